//! Selecting receipts: the filters, sort orders and clear refusals that `receipts.list` and
//! `receipts.clearPrepare` share.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{ErrorBody, ErrorCode, Method};

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

    /// The filter, once its method is known to be one of Polaris's (`method` names the
    /// introspection method it came with, for the refusal).
    pub fn checked(self, method: &str) -> Result<ReceiptFilter, ErrorBody> {
        if let Some(m) = &self.method {
            if m.parse::<Method>().is_err() {
                return Err(bad_params(
                    method,
                    format_args!("method {m:?} is not a Polaris method"),
                ));
            }
        }
        Ok(self)
    }
}

/// Whether `hay` contains `needle`, ASCII letters compared without case: IDs are lowercase and
/// codes uppercase, and an operator typing `uncertain` means `OUTCOME_UNCERTAIN`. The one
/// matching of a filter's `search`, in the host and in the console.
pub fn contains_ignoring_case(hay: &str, needle: &str) -> bool {
    let n = needle.as_bytes();
    n.is_empty()
        || hay
            .as_bytes()
            .windows(n.len())
            .any(|w| w.eq_ignore_ascii_case(n))
}

/// Default `limit` of `receipts.list`.
pub const DEFAULT_LIST_LIMIT: usize = 100;
/// Largest `limit` of `receipts.list` and `audit.list`.
pub const MAX_LIST_LIMIT: usize = 1000;

/// The `BAD_REQUEST` refusal of an introspection method's params: nothing was changed.
pub fn bad_params(method: &str, e: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::BadRequest,
        format!("bad params for {method}: {e}; nothing was changed. docs/introspection.md lists the params"),
    )
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
