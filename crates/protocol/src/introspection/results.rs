//! The results of the introspection methods.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::*;
use crate::results::{
    sorted, ExecutorStatus, PendingOutcome, ReceiptCounts, ReceiptState, StoredReply, TaskState,
};
use crate::{ErrorCode, NetworkEvidence};

// Results

/// A task as listings show it (`snapshot.tasks`, `tasks.list`, `task.updated` events).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// When it started.
    #[serde(default)]
    pub created_at: String,
    /// What blocks it, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_outcome: Option<PendingOutcome>,
    /// The derived state.
    pub state: TaskState,
    /// The task.
    pub task_id: String,
    /// What it is for.
    #[serde(default)]
    pub title: String,
    /// When its state last changed.
    #[serde(default)]
    pub updated_at: String,
}

/// A pending outcome with its task, as the snapshot lists every one of them: the rows of the
/// console's blocked-outcomes pane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedOutcome {
    /// The pending outcome itself (its fields all sort before the task's).
    #[serde(flatten)]
    pub pending: PendingOutcome,
    /// The stored uncertain code: `OUTCOME_UNCERTAIN`, or `INTERRUPTED` for an execution a
    /// host run stopped under.
    #[serde(default)]
    pub code: String,
    /// The receipt's task (empty for a `task.start` that never named one).
    #[serde(default)]
    pub task_id: String,
    /// The task's state (`blocked`, or `interrupted` after a restart); absent when the host
    /// knows no such task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_state: Option<TaskState>,
    /// The task's title.
    #[serde(default)]
    pub title: String,
}

/// `snapshot`: everything the console's first screen needs, read at one event `seq`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// The host's counters since its start.
    #[serde(serialize_with = "sorted")]
    pub counters: Counters,
    /// The executor's kind and mutation count.
    #[serde(default)]
    pub executor: ExecutorStatus,
    /// Every pending outcome, newest task first.
    #[serde(default)]
    pub pending: Vec<BlockedOutcome>,
    /// How full the book is.
    pub receipts: ReceiptCounts,
    /// This run.
    pub run_id: String,
    /// The last event included, so a subscriber knows which events it has seen.
    pub seq: u64,
    /// When the run started.
    pub started_at: String,
    /// The journal's numbers (SPEC §11); absent with `--no-journal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<crate::results::JournalStatus>,
    /// The fleet (SPEC §13): this host's place, the fleet's counts and its hosts; absent
    /// without `--ledger`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<crate::results::LedgerStatus>,
    /// Every task, newest first.
    #[serde(default)]
    pub tasks: Vec<TaskSummary>,
}

/// One row of `receipts.list` (docs/introspection.md's ReceiptItem).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptItem {
    /// Whether `receipts.clearPrepare` would accept it now.
    pub clearable: bool,
    /// The error code of a failed reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// When it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// What the action's page sent (SPEC §16), as its stored reply holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<NetworkEvidence>,
    /// When the ID first arrived.
    #[serde(default)]
    pub first_seen_at: String,
    /// Copies that joined its execution.
    #[serde(default)]
    pub joins: u64,
    /// The method.
    pub method: String,
    /// Whether its reply is a success, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// Why a clear would refuse it, when `clearable` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<RefusalReason>,
    /// Copies answered from its reply.
    #[serde(default)]
    pub replays: u64,
    /// The request ID.
    pub request_id: String,
    /// `running` or `completed`.
    pub state: ReceiptState,
    /// Its task, when the method names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// `receipts.list`: one page, and how many receipts match in all.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptsListResult {
    /// The page.
    pub items: Vec<ReceiptItem>,
    /// Every matching receipt, not only the page.
    pub total: u64,
}

/// A receipt's canonical `{method, params}`: its fingerprint, as the book keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanonicalRequest {
    /// The method.
    pub method: String,
    /// The params as validated.
    pub params: Value,
}

/// `receipts.get`: a listing row with the canonical request and the stored reply; for a
/// cleared ID its tombstone (`clearedAt`, `reason`); for an unknown one only the ID.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptDetail {
    /// Whether a clear would accept it now (live receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clearable: Option<bool>,
    /// When an operator cleared it (`cleared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared_at: Option<String>,
    /// The error code of a failed reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// When it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// When the ID first arrived (live receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_seen_at: Option<String>,
    /// Copies that joined its execution (live receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joins: Option<u64>,
    /// The method (live receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Whether its reply is a success, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The operator's reason for clearing it (`cleared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why a clear would refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<RefusalReason>,
    /// Copies answered from its reply (live receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replays: Option<u64>,
    /// The stored reply, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<StoredReply>,
    /// The canonical request (live receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<CanonicalRequest>,
    /// The ID asked about.
    pub request_id: String,
    /// Where it stands (`unknown` when a reply leaves it out).
    #[serde(default)]
    pub state: ReceiptState,
    /// Its task, when the method names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// `tasks.list`: task summaries, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TasksListResult {
    /// The tasks.
    pub tasks: Vec<TaskSummary>,
}

/// `subscribe`: where the subscription starts, so the first frame's `seq` can be checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscribed {
    /// The interval of a coalesced subscription.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce_ms: Option<u64>,
    /// The last event before the subscription; the first frame follows it.
    pub seq: u64,
    /// Always `true`.
    pub subscribed: bool,
}

/// A receipt a prepared clear would forget, with its current result for the operator to see.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClearableReceipt {
    /// The error code of a failed reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// When it completed.
    #[serde(default)]
    pub completed_at: String,
    /// Copies that joined it.
    #[serde(default)]
    pub joins: u64,
    /// The method.
    pub method: String,
    /// Whether its reply is a success.
    pub ok: bool,
    /// Copies answered from it.
    #[serde(default)]
    pub replays: u64,
    /// The reply that will be forgotten.
    pub reply: StoredReply,
    /// The request ID.
    pub request_id: String,
    /// Its task, when the method names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

impl ClearableReceipt {
    /// `ok`, or the error code of the reply.
    pub fn result_text(&self) -> &'static str {
        match (self.ok, self.code) {
            (true, _) => "ok",
            (false, Some(code)) => code.as_str(),
            (false, None) => "error",
        }
    }
}

/// A receipt a prepare refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedReceipt {
    /// Why it may not be cleared now.
    pub reason: RefusalReason,
    /// The request ID.
    pub request_id: String,
}

/// `receipts.clearPrepare`: what the commit would clear and what it refuses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClearPrepared {
    /// Each receipt to clear with its current result.
    pub clearable: Vec<ClearableReceipt>,
    /// When the token expires (5 minutes).
    pub expires_at: String,
    /// The receipts refused, with reasons.
    pub refused: Vec<RefusedReceipt>,
    /// What the commit must present.
    pub token: String,
}

/// `receipts.clearCommit`: what the clear did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClearCommitted {
    /// Set when the clear applied but its audit line could not be written: a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_error: Option<String>,
    /// Receipts cleared.
    pub cleared: u64,
    /// How full the book is now.
    pub receipts: ReceiptCounts,
    /// Tombstones held now.
    pub tombstones: u64,
}

/// One receipt of an audit entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditCleared {
    /// Its error code, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// The method.
    pub method: String,
    /// Whether its reply was a success.
    pub ok: bool,
    /// The request ID.
    pub request_id: String,
    /// Its task, when the method names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// One line of the audit log: one clear commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// When the clear applied.
    pub at: String,
    /// What it cleared.
    pub cleared: Vec<AuditCleared>,
    /// Who cleared.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// The host run that applied it.
    pub run_id: String,
    /// Set on an `outcome.acknowledge` line (then `cleared` is empty): the settled receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged: Option<AuditAcknowledged>,
    /// Set on an operator's `task.stop` line (then `cleared` is empty): the stopped task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<AuditStopped>,
}

/// The task an operator's `task.stop` audit line is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditStopped {
    /// The stopped task.
    pub task_id: String,
    /// The request ID the stop was sent under (its own receipt).
    pub request_id: String,
}

/// The receipt an `outcome.acknowledge` audit line is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditAcknowledged {
    /// The uncertain code that was settled (`OUTCOME_UNCERTAIN`, `INTERRUPTED`, …).
    pub code: ErrorCode,
    /// The receipt's method.
    pub method: String,
    /// The request ID.
    pub request_id: String,
    /// Its task, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// `audit.list`: recent clear commits, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditListResult {
    /// The entries.
    pub entries: Vec<AuditEntry>,
}

/// `outcome.acknowledge`: the receipt is now clearable; nothing was executed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutcomeAcknowledged {
    /// When the acknowledgement was recorded.
    pub acknowledged_at: String,
    /// Who acknowledged.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// The acknowledged receipt.
    pub request_id: String,
    /// The task whose pending outcome was settled, if it still had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}
