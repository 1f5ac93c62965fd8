//! The introspection socket's methods, params, results and event frames
//! (`docs/introspection.md`), as types: the host's introspection service answers through them
//! and the console and the operator commands read through the same ones.
//!
//! Result types follow the rules of [`super::results`]: fields in the alphabetical order of
//! their wire names (the bytes the host always wrote), decisive fields required and descriptive
//! ones forgiven when absent. Params keep the order the host has always listed them in its
//! `BAD_REQUEST` messages.

use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::results::{
    sorted, ExecutorStatus, PendingOutcome, ReceiptCounts, ReceiptState, StoredReply, TaskState,
    VerifyOutcome,
};
use super::ErrorCode;

// ----------------------------------------------------------------------------------------------
// Methods
// ----------------------------------------------------------------------------------------------

/// Every method of the introspection socket, by wire name (the bridge's are [`super::Method`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntrospectMethod {
    /// `host.hello`: as on the bridge.
    HostHello,
    /// `snapshot`: everything the console's first screen needs.
    Snapshot,
    /// `receipts.list`: one page of the book.
    ReceiptsList,
    /// `receipts.get`: one receipt with its request and reply.
    ReceiptsGet,
    /// `tasks.list`: task summaries.
    TasksList,
    /// `subscribe`: event frames (or coalesced `changed` frames) on this connection.
    Subscribe,
    /// `task.verifyOutcome`: as on the bridge.
    TaskVerifyOutcome,
    /// `receipts.clearPrepare`: the first phase of a clear.
    ReceiptsClearPrepare,
    /// `receipts.clearCommit`: the second phase of a clear.
    ReceiptsClearCommit,
    /// `audit.list`: recent clear commits.
    AuditList,
    /// `outcome.acknowledge`: a person records that an uncertain outcome was settled outside
    /// Polaris (SPEC §11).
    OutcomeAcknowledge,
}

impl IntrospectMethod {
    /// Every method, in the order the contract lists them.
    pub const ALL: &'static [IntrospectMethod] = &[
        IntrospectMethod::HostHello,
        IntrospectMethod::Snapshot,
        IntrospectMethod::ReceiptsList,
        IntrospectMethod::ReceiptsGet,
        IntrospectMethod::TasksList,
        IntrospectMethod::Subscribe,
        IntrospectMethod::TaskVerifyOutcome,
        IntrospectMethod::ReceiptsClearPrepare,
        IntrospectMethod::ReceiptsClearCommit,
        IntrospectMethod::AuditList,
        IntrospectMethod::OutcomeAcknowledge,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            IntrospectMethod::HostHello => "host.hello",
            IntrospectMethod::Snapshot => "snapshot",
            IntrospectMethod::ReceiptsList => "receipts.list",
            IntrospectMethod::ReceiptsGet => "receipts.get",
            IntrospectMethod::TasksList => "tasks.list",
            IntrospectMethod::Subscribe => "subscribe",
            IntrospectMethod::TaskVerifyOutcome => "task.verifyOutcome",
            IntrospectMethod::ReceiptsClearPrepare => "receipts.clearPrepare",
            IntrospectMethod::ReceiptsClearCommit => "receipts.clearCommit",
            IntrospectMethod::AuditList => "audit.list",
            IntrospectMethod::OutcomeAcknowledge => "outcome.acknowledge",
        }
    }
}

impl FromStr for IntrospectMethod {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        IntrospectMethod::ALL
            .iter()
            .copied()
            .find(|m| m.as_str() == s)
            .ok_or(())
    }
}

impl fmt::Display for IntrospectMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ----------------------------------------------------------------------------------------------
// Selecting receipts
// ----------------------------------------------------------------------------------------------

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

// ----------------------------------------------------------------------------------------------
// Params
// ----------------------------------------------------------------------------------------------

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
        deserialize_with = "super::optional_object"
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

// ----------------------------------------------------------------------------------------------
// Results
// ----------------------------------------------------------------------------------------------

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
    /// The blocked task.
    pub task_id: String,
    /// The task's state (`blocked`, or `stopped` with the outcome still recorded).
    pub task_state: TaskState,
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
    pub journal: Option<super::results::JournalStatus>,
    /// The fleet (SPEC §13): this host's place, the fleet's counts and its hosts; absent
    /// without `--ledger`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<super::results::LedgerStatus>,
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

// ----------------------------------------------------------------------------------------------
// Event frames
// ----------------------------------------------------------------------------------------------

/// An event frame, `{"event": KIND, "seq": N, "at": TS, "data": {…}}`: written without an `id`
/// after `subscribe`. Its fields are in the order the host writes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventFrame {
    /// The kind: `receipt.created`, `changed`, `lagged`, ...
    pub event: String,
    /// Its place in the run's event sequence.
    pub seq: u64,
    /// When it happened.
    #[serde(default)]
    pub at: String,
    /// Kind-specific facts (see the `…Event` types of this module).
    #[serde(default)]
    pub data: Value,
}

impl EventFrame {
    /// The frame's `data` read as `T` (the data type of its kind).
    pub fn data_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.data)
    }
}

/// `receipt.created`: a new mutation was admitted and runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptCreatedEvent {
    /// The method.
    pub method: String,
    /// The request ID.
    pub request_id: String,
    /// The task (`null` for task-less methods).
    pub task_id: Option<String>,
}

/// `receipt.completed`: an execution's reply was stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptCompletedEvent {
    /// The error code (`null` when ok).
    pub code: Option<ErrorCode>,
    /// The method.
    pub method: String,
    /// Whether the reply is a success.
    pub ok: bool,
    /// The request ID.
    pub request_id: String,
}

/// `receipt.joined` and `receipt.replayed`: a copy of a known request was answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptSeenEvent {
    /// The method.
    pub method: String,
    /// The request ID.
    pub request_id: String,
}

/// `request.rejected`: a request was refused before it could run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRejectedEvent {
    /// Why.
    pub code: ErrorCode,
    /// The method asked for.
    pub method: String,
    /// The request ID.
    pub request_id: String,
    /// The task, when the refusal is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// `pending.created`: an action's outcome became uncertain and blocks its task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCreatedEvent {
    /// The new pending outcome.
    pub pending_outcome: PendingOutcome,
    /// The task it blocks.
    pub task_id: String,
}

/// `pending.resolved`: a verification confirmed a pending outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingResolvedEvent {
    /// Always `confirmed`.
    pub outcome: VerifyOutcome,
    /// The request whose effect was confirmed.
    pub request_id: String,
    /// Its task.
    pub task_id: String,
}

/// `receipts.cleared`: an operator's clear applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptsClearedEvent {
    /// How many receipts it cleared.
    pub count: u64,
    /// Who cleared.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// The first IDs it cleared (at most 100, so an event stays small however large the clear;
    /// `count` says how many in all, and the audit log names every one).
    pub request_ids: Vec<String>,
}

/// `lagged`: the subscriber fell behind and missed events; it must re-read the snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaggedEvent {
    /// Events dropped for this subscriber.
    pub missed: u64,
}

/// `changed`: the frame of a coalesced subscription, standing for events `fromSeq..=toSeq`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedEvent {
    /// The counters at `toSeq`, so a reader draws rates from the differences between frames.
    #[serde(serialize_with = "sorted")]
    pub counters: Counters,
    /// The first event this frame stands for.
    pub from_seq: u64,
    /// How full the book is at `toSeq`.
    pub receipts: ReceiptCounts,
    /// The last event this frame stands for (also the frame's `seq`).
    pub to_seq: u64,
}

/// The host's counters, as `snapshot` reports them; all change under the host's state lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Counters {
    /// Executions started (receipts created).
    pub executions: u64,
    /// Copies that joined a running execution.
    pub joins: u64,
    /// Copies answered from a stored reply.
    pub replays: u64,
    /// `MCP_REQUEST_ID_REUSED` refusals.
    pub rejected_reused: u64,
    /// `RECEIPT_CAPACITY_FULL` refusals.
    pub rejected_capacity: u64,
    /// `RECEIPT_CLEARED` refusals.
    pub rejected_cleared: u64,
    /// `TASK_BLOCKED` refusals.
    pub rejected_blocked: u64,
}

impl Counters {
    /// Every refusal counted since start (reused, full, cleared, blocked).
    pub fn refusals(&self) -> u64 {
        self.rejected_reused
            + self.rejected_capacity
            + self.rejected_cleared
            + self.rejected_blocked
    }
}
