//! Selecting receipts: the filters, sort orders and clear refusals that `receipts.list` and
//! `receipts.clearPrepare` share.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

// Selecting receipts

/// The `state` of a receipt filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateFilter {
    /// Still executing.
    Running,
    /// Finished, successfully or not.
    Completed,
    /// Finished successfully.
    Ok,
    /// Finished with an error.
    Error,
    /// Would be accepted by a clear now.
    Clearable,
}

impl StateFilter {
    /// Every state filter, in the order the contract lists them.
    pub const ALL: &'static [StateFilter] = &[
        StateFilter::Running,
        StateFilter::Completed,
        StateFilter::Ok,
        StateFilter::Error,
        StateFilter::Clearable,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StateFilter::Running => "running",
            StateFilter::Completed => "completed",
            StateFilter::Ok => "ok",
            StateFilter::Error => "error",
            StateFilter::Clearable => "clearable",
        }
    }
}

impl FromStr for StateFilter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        StateFilter::ALL
            .iter()
            .copied()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not one of running, completed, ok, error, clearable"))
    }
}

/// Which receipts a listing or a clear is about; every given field must match. The one
/// filter of the introspection methods, the operator commands and the console.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReceiptFilter {
    /// By state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<StateFilter>,
    /// By method (wire name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// By task ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// A substring of the request ID, method, task ID or error code (case-sensitive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
}

impl ReceiptFilter {
    /// Whether it selects every receipt.
    pub fn is_empty(&self) -> bool {
        self.state.is_none()
            && self.method.is_none()
            && self.task_id.is_none()
            && self.search.is_none()
    }
}

/// The order of `receipts.list`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sort {
    /// Newest first (the default).
    #[default]
    Newest,
    /// Oldest first.
    Oldest,
    /// Running first, newest first within each state.
    State,
    /// By method, newest first within each.
    Method,
    /// By task, newest first within each.
    Task,
}

impl Sort {
    /// Every order, in the order the contract lists them.
    pub const ALL: &'static [Sort] = &[
        Sort::Newest,
        Sort::Oldest,
        Sort::State,
        Sort::Method,
        Sort::Task,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Sort::Newest => "newest",
            Sort::Oldest => "oldest",
            Sort::State => "state",
            Sort::Method => "method",
            Sort::Task => "task",
        }
    }
}

impl FromStr for Sort {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Sort::ALL
            .iter()
            .copied()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not one of newest, oldest, state, method, task"))
    }
}

/// Why a receipt may not be cleared (a clear's `refused[].reason`, a listing's `refusal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// Its execution is still running.
    Running,
    /// Its reply is uncertain and its pending outcome is unresolved on a task that is not
    /// stopped.
    UnverifiedOutcome,
    /// No receipt or tombstone has this ID.
    Unknown,
    /// It is already a tombstone.
    AlreadyCleared,
}

impl RefusalReason {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::Running => "running",
            RefusalReason::UnverifiedOutcome => "unverified_outcome",
            RefusalReason::Unknown => "unknown",
            RefusalReason::AlreadyCleared => "already_cleared",
        }
    }
}
