//! The result of every bridge method, as one type each: the host writes its replies through
//! these types and every client reads them back through the same ones, so a field cannot be
//! added on one side and forgotten on the other (`tests/host/wire_types.rs` checks each of them
//! against a running host).
//!
//! Two rules shape every type here:
//!
//! - **Fields are declared in the alphabetical order of their wire names.** The host used to
//!   build these replies as `serde_json::Value`s, whose keys serialise sorted; a struct in that
//!   order writes the very same bytes, so a stored reply reads the same whether it was built as
//!   a value or through its type. Nested values that are not in that order on their own (an
//!   [`ErrorBody`], an [`Expect`], the host's counters) are written through [`sorted`].
//! - **Reading forgives what reading can do without.** Fields that decide what a reader does
//!   (states, outcomes, request IDs, `ok`) are required; descriptive ones (titles, timestamps,
//!   params) read as empty when a reply leaves them out, so a reply written by hand (a test, a
//!   script) still reads. Writing is always complete, and the test against the host pins that.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::reply::needs_escape;
use super::{ErrorBody, Expect, NetworkEvidence, Outcome, PlainFill, Reply, Target};

/// Writes `value` with its object keys sorted, as a `serde_json::Value` would: for nested types
/// whose own field order is not alphabetical, so a reply keeps the bytes it always had.
pub fn sorted<T: Serialize, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(serializer)
}

impl Reply {
    /// The `result` of an ok reply read as `T` (the result type of the method that was called).
    /// An error reply, or a result of another shape, is an error naming what did not fit.
    pub fn result_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match &self.result {
            Some(result) => T::deserialize(result),
            None => Err(serde::de::Error::custom("the reply has no result")),
        }
    }
}

/// The states of a task, as every reply about one names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Accepts actions.
    Running,
    /// Has an unresolved pending outcome: mutations are refused, reads pass.
    Blocked,
    /// Finished by the caller; refuses mutations.
    Finished,
    /// Stopped by the caller; refuses mutations, keeps any pending outcome.
    Stopped,
    /// Belongs to an earlier host run, which stopped while the task was open (SPEC §11):
    /// refuses mutations; reads answer from the journal.
    Interrupted,
}

impl TaskState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Running => "running",
            TaskState::Blocked => "blocked",
            TaskState::Finished => "finished",
            TaskState::Stopped => "stopped",
            TaskState::Interrupted => "interrupted",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<TaskState> {
        [
            TaskState::Running,
            TaskState::Blocked,
            TaskState::Finished,
            TaskState::Stopped,
            TaskState::Interrupted,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a read-only verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyOutcome {
    /// The expectation was observed: the pending outcome is resolved.
    Confirmed,
    /// The read worked but the expectation does not hold (yet).
    NotObserved,
    /// The read failed or timed out.
    Unknown,
    /// The task has no pending outcome.
    None,
}

impl VerifyOutcome {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyOutcome::Confirmed => "confirmed",
            VerifyOutcome::NotObserved => "not_observed",
            VerifyOutcome::Unknown => "unknown",
            VerifyOutcome::None => "none",
        }
    }
}

impl fmt::Display for VerifyOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a read of a target showed: the evidence behind an action's `ok` and a verification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    /// The selector read.
    pub target: String,
    /// Its value at the time of the read.
    pub value: String,
}

/// Counts of tasks by state (`run.status.tasks`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCounts {
    /// `blocked`
    pub blocked: usize,
    /// `finished`
    pub finished: usize,
    /// `running`
    pub running: usize,
    /// `stopped`
    pub stopped: usize,
    /// `interrupted`: tasks of earlier runs, kept by the journal.
    #[serde(default)]
    pub interrupted: usize,
}

/// `host.hello`: who answers, so a client can tell one host run from the next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloResult {
    /// The hard receipt capacity (`--capacity`).
    pub capacity: usize,
    /// Always `polaris`.
    pub name: String,
    /// The wire protocol version ([`super::PROTOCOL_VERSION`]).
    pub protocol: u32,
    /// This run; a different one means a restarted host and another book.
    pub run_id: String,
    /// When this run started.
    pub started_at: String,
    /// The host's crate version.
    pub version: String,
}

/// Whether a method asks for a side effect (and so takes a receipt) or only reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    /// Takes a receipt; executes at most once per request ID.
    Mutating,
    /// Executed every time, never stored.
    Read,
}

/// One method in `tools.list`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInfo {
    /// One line saying what the method is for.
    pub description: String,
    /// Mutating or read, so an agent knows which calls it may repeat.
    pub kind: ToolKind,
    /// The wire name, e.g. `page.click`.
    pub method: String,
}

/// `tools.list`: the methods of the bridge socket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsListResult {
    /// In the order [`super::Method::BRIDGE`] lists them.
    pub tools: Vec<ToolInfo>,
}

/// `task.start`: the pair a caller keeps to find its task again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStartResult {
    /// The run the task belongs to; `task.resume` checks the pair against it.
    pub run_id: String,
    /// Always `running` for a new task.
    pub state: TaskState,
    /// The new task.
    pub task_id: String,
}

/// `page.fill` (what was put in the field) and `page.read` (what the target holds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldResult {
    /// The target filled or read, as the caller sent it.
    pub target: Target,
    /// The value it holds.
    pub value: String,
}

impl FieldResult {
    /// The stored reply of a `page.fill` that put `value` in `target`: byte for byte what
    /// `Outcome::ok(&FieldResult { target, value })` writes, but written directly when neither
    /// string needs escaping, as a fill's almost always do (the fill is the host's hottest
    /// reply). This type stays the shape's one definition; a test holds the two equal.
    pub fn filled(target: &str, value: &str) -> Arc<Outcome> {
        if needs_escape(target.as_bytes()) || needs_escape(value.as_bytes()) {
            return Outcome::ok(&FieldResult {
                target: Target::Css(target.to_owned()),
                value: value.to_owned(),
            });
        }
        Outcome::of_parts(None, &[FILLED_HEAD, target, FILLED_MID, value, FILLED_TAIL])
    }

    /// The reply [`FieldResult::filled`] gave the `page.fill` whose canonical params (what its
    /// receipt keeps of its fingerprint, [`StoredRequest`](super::StoredRequest)) are `params`,
    /// written again from them alone: the receipt of a fill that took effect keeps no copy of
    /// its reply (a quarter of a fresh receipt's memory), and a copy sent later gets these same
    /// bytes. `None` when `params` are not a fill's (no string `target` and `value`).
    pub fn filled_again(params: &str) -> Option<Arc<Outcome>> {
        if let Some(fill) = PlainFill::read(params) {
            return Some(FieldResult::filled(fill.target, fill.value));
        }
        let params: Value = serde_json::from_str(params).ok()?;
        Some(FieldResult::filled(
            params["target"].as_str()?,
            params["value"].as_str()?,
        ))
    }

    /// Whether [`FieldResult::filled_again`] of `params` is `outcome`, byte for byte: checked
    /// in place (no reply written) when the params' strings hold no escapes.
    pub fn gives_back(params: &str, outcome: &Outcome) -> bool {
        match PlainFill::read(params) {
            Some(fill) => FieldResult::is_filled(fill.target, fill.value, outcome),
            None => {
                outcome.code.is_none()
                    && FieldResult::filled_again(params).is_some_and(|o| o.body == outcome.body)
            }
        }
    }

    /// Whether `outcome` is byte for byte [`FieldResult::filled`] of `target` and `value`, which
    /// hold no escapes (checked in place, no reply written).
    pub fn is_filled(target: &str, value: &str, outcome: &Outcome) -> bool {
        if outcome.code.is_some() {
            return false;
        }
        let pieces = [FILLED_HEAD, target, FILLED_MID, value, FILLED_TAIL];
        let mut body = outcome.body.as_bytes();
        pieces
            .iter()
            .all(|p| match body.strip_prefix(p.as_bytes()) {
                Some(rest) => {
                    body = rest;
                    true
                }
                None => false,
            })
            && body.is_empty()
    }

    /// The length of [`FieldResult::filled_again`]'s body, counted without writing it when the
    /// params' strings hold no escapes (as good as always).
    pub fn filled_again_len(params: &str) -> Option<usize> {
        match PlainFill::read(params) {
            Some(fill) => Some(FieldResult::filled_len(fill.target, fill.value)),
            None => FieldResult::filled_again(params).map(|o| o.body.len()),
        }
    }

    /// The length of [`FieldResult::filled`]'s body for `target` and `value`, which hold no
    /// escapes, counted without writing it.
    pub fn filled_len(target: &str, value: &str) -> usize {
        FILLED_HEAD.len() + target.len() + FILLED_MID.len() + value.len() + FILLED_TAIL.len()
    }
}

/// The pieces of a fill's success reply around its target and value (see [`FieldResult::filled`]).
const FILLED_HEAD: &str = "\"ok\":true,\"result\":{\"target\":\"";
const FILLED_MID: &str = "\",\"value\":\"";
const FILLED_TAIL: &str = "\"}";

/// `page.wait`: what was waited for, and how long it took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitResult {
    /// The task.
    pub task_id: String,
    /// `visible` or `hidden`: what now holds.
    pub state: crate::WaitState,
    /// How long the wait took, in milliseconds.
    pub waited_ms: u64,
}

/// `page.screenshot`: a PNG, base64-encoded (the MCP front returns it as image content).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScreenshotResult {
    /// The task.
    pub task_id: String,
    /// Always `image/png`.
    pub mime_type: String,
    /// The PNG's bytes, base64.
    pub data: String,
    /// The PNG's size in bytes.
    pub bytes: usize,
}

/// `page.url`: where the task's page is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageUrlResult {
    /// The task.
    pub task_id: String,
    /// The page's URL.
    pub url: String,
    /// The page's title.
    pub title: String,
}

/// `page.click` and `page.press`: the observation that shows the action took effect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedResult {
    /// The dialogs the action opened, and how each was answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dialogs: Vec<DialogSeen>,
    /// Whether the caller sent the step as page-local (`local: true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local: bool,
    /// What the page sent while the action ran (SPEC §16), when the executor watches the
    /// network (the Chromium executor does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<NetworkEvidence>,
    /// The expectation's target and the value read there; `null` for a local step sent
    /// without an expectation.
    pub observation: Option<Observation>,
    /// The tabs the action opened (`window.open`, `target=_blank`; SPEC §15), to address with
    /// `tab`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opened: Vec<Tab>,
}

/// One of a task's tabs (SPEC §15): its number, for the `tab` param of page methods, and
/// where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tab {
    /// 0 for the task's first page; the pages its actions opened count on from 1.
    pub tab: u32,
    /// The tab's URL.
    pub url: String,
    /// The tab's title (empty while it loads).
    #[serde(default)]
    pub title: String,
}

/// `page.tabs`: the task's open tabs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageTabsResult {
    /// The task.
    pub task_id: String,
    /// Its open tabs, tab 0 first.
    pub tabs: Vec<Tab>,
}

/// A JavaScript dialog (`alert`, `confirm`, `prompt`, `beforeunload`) a page opened, and how
/// Polaris answered it (SPEC §14): in an action's reply and its task's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DialogSeen {
    /// `accepted` (the action asked for it) or `dismissed` (the answer that commits nothing).
    pub answer: String,
    /// The dialog's message.
    pub message: String,
    /// The text a `prompt` was answered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_text: Option<String>,
    /// `alert`, `confirm`, `prompt` or `beforeunload`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A request of a task still running (`task.status.inFlight`): admitted, its receipt taken,
/// its reply not yet stored. Only the first is being executed; the rest wait their turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlightItem {
    /// The method.
    pub method: String,
    /// The request: running, so never to be resent under a new ID.
    pub request_id: String,
    /// When it was admitted.
    pub since: String,
}

/// `task.finish` and `task.stop`: the task's state once closed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskClosedResult {
    /// `finished` or `stopped`.
    pub state: TaskState,
    /// The task closed.
    pub task_id: String,
}

/// The last read-only verification of a pending outcome, so a reader sees what was tried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastVerify {
    /// When it finished.
    #[serde(default)]
    pub at: String,
    /// What the read saw, when it worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
    /// What it found (never `confirmed`: that resolves the outcome).
    pub outcome: VerifyOutcome,
}

/// What an empty expectation reads as when a reply leaves `expect` out.
/// A mutating action whose effect is unknown: it blocks its task until verified. Carried by
/// `task.status`, `task.resume`, `task.verifyOutcome`, `TASK_BLOCKED` details and the
/// operator's snapshot, so a reader knows exactly which request to verify.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingOutcome {
    /// The original expectation; the only thing verification evaluates (`null` for a local
    /// step sent without one: nothing can confirm it).
    #[serde(default, serialize_with = "sorted")]
    pub expect: Option<Expect>,
    /// What the page sent for the action (SPEC §16), kept up to date while it is pending: a
    /// late answer shows here once the outcome is verified again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<NetworkEvidence>,
    /// The last verification, if any ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verify: Option<LastVerify>,
    /// The action's method, e.g. `page.press`.
    #[serde(default)]
    pub method: String,
    /// The action's params as the receipt holds them (canonical).
    #[serde(default)]
    pub params: Value,
    /// The request whose effect is unknown: the one ID a reader must not resend.
    pub request_id: String,
    /// When the outcome became uncertain.
    #[serde(default)]
    pub since: String,
}

/// One line of a task's history: what happened to it, and under which request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryItem {
    /// When it happened.
    #[serde(default)]
    pub at: String,
    /// The method.
    pub method: String,
    /// The request it came from.
    pub request_id: String,
    /// `ok`, an error code, or a verification outcome.
    pub result: String,
}

/// `task.status`: a task's state, what blocks it and what happened to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusResult {
    /// When the task started.
    #[serde(default)]
    pub created_at: String,
    /// The last 100 events, oldest first; requests still running last, with result
    /// `running`.
    #[serde(default)]
    pub history: Vec<HistoryItem>,
    /// The task's requests still running, in the order they were admitted: the first is
    /// executing, the others wait their turn (SPEC §14).
    #[serde(default)]
    pub in_flight: Vec<InFlightItem>,
    /// Further unresolved pending outcomes behind the first (a stopped task may keep several).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_pending_outcomes: Vec<PendingOutcome>,
    /// The first unresolved pending outcome: the one `task.verifyOutcome` checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_outcome: Option<PendingOutcome>,
    /// The run that answered.
    #[serde(default)]
    pub run_id: String,
    /// The derived state.
    pub state: TaskState,
    /// Why the task was stopped, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The task.
    pub task_id: String,
    /// What the task is for.
    #[serde(default)]
    pub title: String,
    /// The page it works on, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// `task.resume`: the kept (task, run) pair checked against this run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResumeResult {
    /// What blocks the task, if anything: it resumes `blocked` until verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_outcome: Option<PendingOutcome>,
    /// The current run (the one the caller kept).
    pub run_id: String,
    /// The task's current state.
    pub state: TaskState,
    /// The task.
    pub task_id: String,
}

/// `task.verifyOutcome`, on either socket: what a read-only check of the pending action's
/// expectation found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResult {
    /// What the read saw, when it worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
    /// `confirmed`, `not_observed`, `unknown` or `none`.
    pub outcome: VerifyOutcome,
    /// The pending outcome still blocking the task (after a confirmation: the next one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_outcome: Option<PendingOutcome>,
    /// What the outcome does not prove, when there is something to say: the page was
    /// reopened (it may not show server-side effects), or the step had no expectation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// After `confirmed`: the pending outcome this verification resolved, so a caller knows
    /// which request it settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<PendingOutcome>,
    /// The task's state after the verification.
    pub state: TaskState,
    /// The task.
    pub task_id: String,
}

/// `receipts` of `run.status`, the snapshot, `changed` frames and `receipts.clearCommit`: how
/// full the book is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptCounts {
    /// The hard receipt capacity.
    pub capacity: u64,
    /// `--max-book-bytes`: new mutations are refused past it.
    #[serde(default)]
    pub max_bytes: u64,
    /// Receipts still executing.
    pub running: u64,
    /// The hard tombstone capacity.
    pub tombstone_capacity: u64,
    /// Cleared receipts remembered as tombstones.
    pub tombstones: u64,
    /// Receipts whose outcome is uncertain and nobody has settled (`OUTCOME_UNCERTAIN` on a
    /// task blocked by it, `INTERRUPTED` not acknowledged): the rows of the console's Blocked
    /// pane. Verifying, acknowledging or stopping the task settles one.
    #[serde(default)]
    pub unsettled: u64,
    /// Receipts in the book.
    pub used: u64,
    /// Bytes the book holds (canonical requests, stored replies, per-receipt overhead).
    #[serde(default)]
    pub used_bytes: u64,
}

/// `executor` of `run.status` and the snapshot: what acts on pages, and how often it did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorStatus {
    /// `fixture`, `chromium`, ...
    pub kind: String,
    /// Side effects the executor applied in this run (the tests count submits with it).
    pub mutations: u64,
}

/// `run.status`: the run, its book, its tasks and its executor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStatusResult {
    /// Whether the `runId` given (if any) is this run.
    pub current: bool,
    /// The executor's kind and mutation count.
    pub executor: ExecutorStatus,
    /// How full the book is.
    pub receipts: ReceiptCounts,
    /// This run.
    pub run_id: String,
    /// When it started.
    pub started_at: String,
    /// Tasks by state.
    pub tasks: TaskCounts,
    /// The journal's numbers; absent with `--no-journal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<JournalStatus>,
    /// This host's place in the fleet; absent without `--ledger` (SPEC §13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<LedgerStatus>,
}

/// `run.status.ledger`: which host of the fleet answered, its run's epoch, and how long its
/// lease has left (an action starts only with more than its deadline plus one second).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerStatus {
    /// This host's run epoch in the ledger.
    pub epoch: i64,
    /// This host's name in the fleet.
    pub host_id: String,
    /// How long its lease has left.
    pub lease_left_ms: u64,
    /// The fleet's receipt counts as the ledger last gave them (`receipts` at the top of
    /// `run.status` counts this host's book, a cache of the fleet's); absent until read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipts: Option<FleetReceiptCounts>,
    /// Every host run the ledger knows, newest first, as last read (the console's hosts pane).
    #[serde(default)]
    pub hosts: Vec<FleetHost>,
}

/// One host run of the fleet, as the operator's hosts pane shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetHost {
    /// Its run's epoch.
    pub epoch: i64,
    /// The host's name.
    pub host_id: String,
    /// How long its lease had left when read (ms; negative once lapsed).
    pub lease_left_ms: i64,
    /// Its receipts still executing.
    pub running: u64,
    /// Its run ID.
    pub run_id: String,
    /// `alive`, `left` (stopped cleanly) or `dead` (its lease lapsed; its running receipts
    /// were declared `INTERRUPTED`).
    pub state: String,
    /// Its tasks blocked on an uncertain outcome, as it last reported them.
    #[serde(default)]
    pub blocked: u64,
}

/// `run.status.ledger.receipts`: the fleet's book, read from the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetReceiptCounts {
    /// The fleet's receipt capacity.
    pub capacity: u64,
    /// Receipts still executing on some host.
    pub running: u64,
    /// The fleet's tombstone capacity.
    pub tombstone_capacity: u64,
    /// Cleared receipts remembered as tombstones.
    pub tombstones: u64,
    /// Receipts in the fleet's book.
    pub used: u64,
    /// When the ledger gave these counts.
    pub read_at: String,
}

/// `run.status.journal` and the snapshot's `journal` (SPEC §11): where the journal is, how big,
/// and how its flushes go.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalStatus {
    /// Valid journal bytes.
    pub bytes: u64,
    /// `fdatasync`s per second over the last second or so.
    pub fsyncs_per_second: f64,
    /// How long the last `fdatasync` took.
    pub last_fsync_ms: f64,
    /// The log file.
    pub path: String,
    /// Durable records in the file.
    pub records: u64,
}

/// Where a request ID stands in the book.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptState {
    /// Its execution has not finished.
    Running,
    /// Its reply is stored.
    Completed,
    /// An operator cleared it; the ID never runs again.
    Cleared,
    /// The book has never seen it (in this book).
    #[default]
    Unknown,
}

impl ReceiptState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptState::Running => "running",
            ReceiptState::Completed => "completed",
            ReceiptState::Cleared => "cleared",
            ReceiptState::Unknown => "unknown",
        }
    }
}

/// A stored reply, `{ok, result}` or `{ok, error}`: what a replay of the request answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredReply {
    /// What went wrong, when `ok` is false.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "sorted"
    )]
    pub error: Option<ErrorBody>,
    /// Whether the execution succeeded.
    pub ok: bool,
    /// The method's result, when `ok` (its shape is the method's result type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

impl StoredReply {
    /// The network evidence the reply carries (SPEC §16): a success's `result.evidence`, an
    /// error's `details.evidence`.
    pub fn evidence(&self) -> Option<NetworkEvidence> {
        let e = match (&self.result, &self.error) {
            (Some(r), _) => r.get("evidence"),
            (None, Some(e)) => e.details.as_ref().and_then(|d| d.get("evidence")),
            (None, None) => None,
        }?;
        serde_json::from_value(e.clone()).ok()
    }

    /// Reads a stored outcome's body (`"ok":…,"result"|"error":…`).
    pub fn of(outcome: &Outcome) -> StoredReply {
        serde_json::from_str(&format!("{{{}}}", &outcome.body))
            .expect("a stored outcome is a reply body")
    }
}

/// `receipt.status`: a request ID's state and, once completed, its stored reply — what a
/// caller reads instead of resending.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptStatusResult {
    /// When an operator cleared it (`cleared` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared_at: Option<String>,
    /// When its execution finished (`completed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// When the ID first arrived (`running`, `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_seen_at: Option<String>,
    /// Copies that arrived while it ran (`running`, `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joins: Option<u64>,
    /// The method (`running`, `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Whether the stored reply is a success (`completed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The operator's reason for clearing it (`cleared` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The run that created the receipt (`running`, `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Copies answered from the stored reply (`running`, `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replays: Option<u64>,
    /// The stored reply (`completed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<StoredReply>,
    /// The ID asked about.
    pub request_id: String,
    /// Where it stands.
    pub state: ReceiptState,
    /// The task it acted on, when its method names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// The read to call next, `{"method", "params"}`, as error details carry it (`details.next`),
/// so a client can name the exact read instead of guessing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NextRead {
    /// The read's method, e.g. `task.verifyOutcome`.
    pub method: String,
    /// Its params.
    #[serde(default)]
    pub params: Value,
}

impl NextRead {
    /// The `next` of an error's `details`, when it names one.
    pub fn in_details(details: &Value) -> Option<NextRead> {
        #[derive(Deserialize)]
        struct Details {
            next: Option<NextRead>,
        }
        Details::deserialize(details).ok()?.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fill's reply written directly is the one serde writes from its type, whatever the
    /// strings hold (quotes, backslashes, control characters, non-ASCII, empty).
    #[test]
    fn a_fill_written_directly_is_the_typed_reply_byte_for_byte() {
        let strings = [
            "",
            "#title",
            "Hello!!!!!!",
            "é ü 日本 🎉",
            "a\"b",
            "back\\slash",
            "tab\there",
            "nl\n",
            "\u{1}\u{1f}",
            "\u{7f}",
            "</script>",
            "' ~ {}[]:,",
        ];
        for target in strings {
            for value in strings {
                let typed = Outcome::ok(&FieldResult {
                    target: Target::Css(target.to_owned()),
                    value: value.to_owned(),
                });
                assert_eq!(
                    *FieldResult::filled(target, value),
                    *typed,
                    "{target:?} {value:?}"
                );
            }
        }
    }

    /// What a `page.fill` receipt keeps of its fingerprint (its canonical params), written
    /// the way the host writes it.
    fn fill_request(task: &str, target: &str, value: &str) -> String {
        let params = serde_json::json!({"taskId": task, "target": target, "value": value});
        let text = crate::try_fingerprint("page.fill", &params).unwrap();
        let (_, params) = crate::split_fingerprint(&text).unwrap();
        params.to_owned()
    }

    proptest::proptest! {
        /// A fill's reply written again from its stored request is the first one byte for
        /// byte, whatever its strings hold (escapes, controls, anything past ASCII); its
        /// length is counted right without writing it; and the check that a request gives an
        /// outcome back holds for that outcome and for no other.
        #[test]
        fn a_fill_reply_is_written_again_from_its_request(
            task in ".{0,40}",
            target in ".{0,20}",
            value in ".{0,60}",
            other in ".{0,60}",
        ) {
            let request = fill_request(&task, &target, &value);
            let first = FieldResult::filled(&target, &value);
            let again = FieldResult::filled_again(&request).expect("a page.fill request");
            proptest::prop_assert_eq!(&*again, &*first);
            proptest::prop_assert_eq!(
                FieldResult::filled_again_len(&request),
                Some(first.body.len())
            );
            proptest::prop_assert!(FieldResult::gives_back(&request, &first));
            if other != value {
                let different = FieldResult::filled(&target, &other);
                proptest::prop_assert!(!FieldResult::gives_back(&request, &different));
            }
        }
    }

    /// A fill whose strings hold no escapes (as good as every fill) is read in place, not
    /// parsed; one with an escape anywhere is left to the parser.
    #[test]
    fn a_fill_request_without_escapes_is_read_in_place() {
        let request = fill_request("9b2f4e1c-0d3a-4c5b-8e6f-000000000001", "#title", "v é!");
        let plain = PlainFill::read(&request).map(|f| (f.target, f.value));
        assert_eq!(plain, Some(("#title", "v é!")));
        for (task, target, value) in [("t\"", "#a", "v"), ("t", "#a\n", "v"), ("t", "#a", "\\")] {
            let request = fill_request(task, target, value);
            assert_eq!(PlainFill::read(&request), None, "{request}");
            assert_eq!(
                *FieldResult::filled_again(&request).unwrap(),
                *FieldResult::filled(target, value)
            );
        }
    }

    /// A request that is not a fill's gives no fill reply back, and a fill's failure is never
    /// what a fill's request gives back.
    #[test]
    fn only_a_fill_request_gives_a_fill_reply_back() {
        let click = r##"{"target":"#submit","taskId":"t"}"##;
        assert!(FieldResult::filled_again(click).is_none());
        assert!(FieldResult::filled_again_len(click).is_none());
        let request = fill_request("t", "#title", "v");
        let failed = Outcome::err(&ErrorBody::new(crate::ErrorCode::ActionFailed, "x"));
        assert!(!FieldResult::gives_back(&request, &failed));
        assert!(!FieldResult::gives_back(
            click,
            &FieldResult::filled("#title", "v")
        ));
    }
}
