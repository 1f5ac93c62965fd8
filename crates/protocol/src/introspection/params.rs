//! The params of the introspection methods, checked where the host parses them.

use serde::{Deserialize, Deserializer, Serialize};

use super::*;
use crate::results::TaskState;

// Params

/// `receipts.list` params: a page of the receipts a filter selects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReceiptsListParams {
    /// Matching receipts to skip (0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
    /// Receipts to return (100, at most 1000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The order (newest first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sort: Option<Sort>,
    /// The order read from its end (`false`): oldest first within each group, and the groups
    /// last to first — an operator looking for what sorts last does not page to the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverse: Option<bool>,
    /// The filter's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<StateFilter>,
    /// The filter's method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The filter's task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The filter's substring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
}

impl ReceiptsListParams {
    /// A page of the receipts `filter` selects.
    pub fn new(filter: ReceiptFilter) -> ReceiptsListParams {
        ReceiptsListParams {
            state: filter.state,
            method: filter.method,
            task_id: filter.task_id,
            search: filter.search,
            ..ReceiptsListParams::default()
        }
    }

    /// The filter part of the params.
    pub fn filter(&self) -> ReceiptFilter {
        ReceiptFilter {
            state: self.state,
            method: self.method.clone(),
            task_id: self.task_id.clone(),
            search: self.search.clone(),
        }
    }
}

/// `receipts.get` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReceiptsGetParams {
    /// The request ID to show.
    pub request_id: String,
}

/// `tasks.list` params.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TasksListParams {
    /// Only tasks in this state.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "task_state_param"
    )]
    pub state: Option<TaskState>,
}

/// A task state given as a param, refused with the states it may be.
fn task_state_param<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TaskState>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => TaskState::parse(&s).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "state {s:?} is not one of running, blocked, finished, stopped"
            ))
        }),
    }
}

/// Shortest `coalesceMs` accepted by `subscribe`.
pub const MIN_COALESCE_MS: u64 = 50;
/// Longest `coalesceMs` accepted by `subscribe`.
pub const MAX_COALESCE_MS: u64 = 60_000;

/// `subscribe` params: none for the full event stream, `coalesceMs` for `changed` frames.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SubscribeParams {
    /// At most one `changed` frame per this many ms ([`MIN_COALESCE_MS`]–[`MAX_COALESCE_MS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coalesce_ms: Option<u64>,
}

/// `receipts.clearPrepare` params: exactly one of `requestIds` or `filter`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClearPrepareParams {
    /// These receipts (duplicates count once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_ids: Option<Vec<String>>,
    /// Every receipt this filter selects.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::optional_object"
    )]
    pub filter: Option<ReceiptFilter>,
}

/// `receipts.clearCommit` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClearCommitParams {
    /// The token of the prepare being committed.
    pub token: String,
    /// Why (1–500 characters), for the audit log.
    pub reason: String,
    /// Who, for the audit log (the host's OS user when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
}

/// `audit.list` params.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditListParams {
    /// Entries to return, newest first (50, at most 1000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `task.stop` params on the introspection socket: the task an operator stops and why (for the
/// audit log as for the task).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperatorStopParams {
    /// Why (1–500 characters).
    pub reason: String,
    /// The task to stop.
    pub task_id: String,
    /// Who, for the audit log (the host's OS user when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
}

/// `outcome.acknowledge` params: the uncertain receipt a person settled outside Polaris.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OutcomeAcknowledgeParams {
    /// What the person did to settle it (1–500 characters), for the audit log.
    pub reason: String,
    /// The receipt whose outcome (`OUTCOME_UNCERTAIN` or `INTERRUPTED`) was settled.
    pub request_id: String,
    /// Who, for the audit log (the host's OS user when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
}
