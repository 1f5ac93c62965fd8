//! Tasks and pending outcomes: the state machine that keeps an action whose effect is unknown
//! from being followed by another one.
//!
//! A task's state is derived, never stored twice: a closed task is `finished` or `stopped`; an
//! open task with an unresolved pending outcome is `blocked`; otherwise it is `running`. This
//! module is pure logic (no I/O, no clocks: callers pass `now`), so every transition is a unit
//! test.

use std::collections::{HashMap, VecDeque};

use indexmap::IndexMap;

use serde_json::Value;

use crate::ids::RequestKey;
pub use crate::ids::TaskId;
use crate::protocol::introspection::TaskSummary;
use crate::protocol::results::{self, HistoryItem, InFlightItem, LastVerify, TaskStatusResult};
pub use crate::protocol::results::{Observation, TaskCounts, TaskState, VerifyOutcome};
use crate::protocol::{format_millis, ErrorCode, Expect, Method, NetworkEvidence};

/// How many history entries a task keeps.
pub const HISTORY_LIMIT: usize = 100;

/// The last verification of a pending outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyRecord {
    /// When it finished (epoch ms).
    pub at: i64,
    /// What it found.
    pub outcome: VerifyOutcome,
    /// What it read, when the read worked.
    pub observation: Option<Observation>,
}

/// A mutating action whose effect is unknown. It blocks its task until a verification
/// confirms it; stopping the task keeps it recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingOutcome {
    /// The request ID of the action.
    pub request_id: String,
    /// The action's method.
    pub method: Method,
    /// The action's params as sent.
    pub params: Value,
    /// The original expectation; the only thing verification evaluates (`None` for a local
    /// step sent without one: nothing on the page can confirm it).
    pub expect: Option<Expect>,
    /// When the outcome became uncertain (epoch ms).
    pub since: i64,
    /// The last verification, if any.
    pub last_verify: Option<VerifyRecord>,
    /// What the page sent for the action (SPEC §16), as last read from the executor.
    pub evidence: Option<NetworkEvidence>,
}

impl VerifyRecord {
    /// The wire form (`lastVerify`).
    pub fn to_wire(&self) -> LastVerify {
        LastVerify {
            at: format_millis(self.at),
            observation: self.observation.clone(),
            outcome: self.outcome,
        }
    }
}

impl PendingOutcome {
    /// The wire form, as every reply and event that carries a pending outcome writes it.
    pub fn to_wire(&self) -> results::PendingOutcome {
        results::PendingOutcome {
            evidence: self.evidence.clone(),
            expect: self.expect.clone(),
            last_verify: self.last_verify.as_ref().map(VerifyRecord::to_wire),
            method: self.method.as_str().to_owned(),
            params: self.params.clone(),
            request_id: self.request_id.clone(),
            since: format_millis(self.since),
        }
    }
}

/// One line of a task's history.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    /// The request ID, when the entry came from a request (kept as the book keys it, so
    /// recording an action allocates nothing).
    pub request_id: RequestKey,
    /// The method.
    pub method: Method,
    /// When it happened (epoch ms).
    pub at: i64,
    /// `ok`, an error code, or a verification outcome.
    pub result: &'static str,
}

/// A request of a task admitted under a new receipt whose reply is not stored yet: the task's
/// actions run one at a time, in the order they were admitted (SPEC §14), so only the first
/// of these is executing and the others wait their turn.
#[derive(Clone, Debug, PartialEq)]
pub struct InFlight {
    /// The request, as the book keys it.
    pub request_id: RequestKey,
    /// The method.
    pub method: Method,
    /// When it was admitted (epoch ms).
    pub since: i64,
}

/// Why a task refuses a mutation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The task has an unresolved pending outcome.
    Blocked,
    /// The task is finished or stopped.
    Closed,
}

impl Refusal {
    /// The error code of the refusal.
    pub fn code(self) -> ErrorCode {
        match self {
            Refusal::Blocked => ErrorCode::TaskBlocked,
            Refusal::Closed => ErrorCode::TaskClosed,
        }
    }
}

/// How a task was closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closed {
    /// `task.finish`
    Finished,
    /// `task.stop`, with the caller's reason.
    Stopped {
        /// Why.
        reason: String,
    },
    /// The task belongs to an earlier host run that stopped (crash, kill, restart) while it
    /// was open: nothing can act on its page any more (SPEC §11).
    Interrupted {
        /// The run the task belonged to.
        run_id: std::sync::Arc<str>,
    },
}

/// One task.
#[derive(Clone, Debug)]
pub struct Task {
    /// The task's ID.
    pub id: TaskId,
    /// What it is for.
    pub title: String,
    /// The page it works on.
    pub url: Option<String>,
    /// When it started (epoch ms).
    pub created_at: i64,
    /// When its state last changed (epoch ms).
    pub updated_at: i64,
    /// Set once finished or stopped.
    pub closed: Option<Closed>,
    /// Unresolved pending outcomes, oldest first; the first is the one reported and verified.
    pub pending: VecDeque<PendingOutcome>,
    /// The last [`HISTORY_LIMIT`] events.
    pub history: VecDeque<HistoryEntry>,
    /// Receipts in the book that name this task: once it is closed and they are all cleared,
    /// the task is reduced to a [`ClosedTask`].
    pub receipts: u32,
    /// Its requests admitted and not yet stored, in admission order: the first is executing,
    /// the rest wait for it ([`Task::is_turn`]).
    pub in_flight: VecDeque<InFlight>,
    /// What requests waiting their turn wait on; made by the first to wait
    /// ([`Task::wait_turn`]) and woken (and dropped) when the first request in flight leaves,
    /// so a task nobody waits on pays nothing for it.
    turn: Option<std::sync::Arc<tokio::sync::Notify>>,
}

impl Task {
    /// A running task.
    pub fn new(id: TaskId, title: String, url: Option<String>, now: i64) -> Task {
        Task {
            id,
            title,
            url,
            created_at: now,
            updated_at: now,
            closed: None,
            pending: VecDeque::new(),
            history: VecDeque::new(),
            receipts: 0,
            in_flight: VecDeque::new(),
            turn: None,
        }
    }

    /// Queues an admitted request behind the task's requests still in flight; `true` when
    /// none was, so it may execute at once.
    pub fn enter(&mut self, request_id: &RequestKey, method: Method, now: i64) -> bool {
        self.in_flight.push_back(InFlight {
            request_id: request_id.clone(),
            method,
            since: now,
        });
        self.in_flight.len() == 1
    }

    /// Whether the request is the first of those in flight: its turn to execute.
    pub fn is_turn(&self, request_id: &RequestKey) -> bool {
        self.in_flight
            .front()
            .is_some_and(|f| f.request_id == *request_id)
    }

    /// The request's reply is stored (or it will never run): it leaves the queue, and the
    /// requests waiting behind it are told.
    #[inline]
    pub fn leave(&mut self, request_id: &RequestKey) {
        if self.in_flight.is_empty() {
            // The hottest case: a fill done at once, never queued.
            return;
        }
        if self.is_turn(request_id) {
            // The usual case: the request executing leaves, and the next one's turn comes.
            self.in_flight.pop_front();
            if let Some(turn) = self.turn.take() {
                turn.notify_waiters();
            }
        } else if let Some(i) = self
            .in_flight
            .iter()
            .position(|f| f.request_id == *request_id)
        {
            // One that will never run (its claim was settled elsewhere) leaves from the middle:
            // nobody's turn changes.
            self.in_flight.remove(i);
        }
    }

    /// What a request behind others waits on until the first request in flight leaves (call
    /// it, and register the wait, before letting the host's lock go).
    pub fn wait_turn(&mut self) -> std::sync::Arc<tokio::sync::Notify> {
        self.turn.get_or_insert_with(Default::default).clone()
    }

    /// The derived state.
    pub fn state(&self) -> TaskState {
        match (&self.closed, self.pending.is_empty()) {
            (Some(Closed::Finished), _) => TaskState::Finished,
            (Some(Closed::Stopped { .. }), _) => TaskState::Stopped,
            (Some(Closed::Interrupted { .. }), _) => TaskState::Interrupted,
            (None, false) => TaskState::Blocked,
            (None, true) => TaskState::Running,
        }
    }

    /// Whether the task accepts `method` now. Reads always pass; `task.stop` passes a blocked
    /// task; closed tasks refuse every mutation.
    pub fn admit(&self, method: Method) -> Result<(), Refusal> {
        if !method.is_mutating() {
            return Ok(());
        }
        match self.state() {
            TaskState::Running => Ok(()),
            TaskState::Blocked if method == Method::TaskStop => Ok(()),
            TaskState::Blocked => Err(Refusal::Blocked),
            TaskState::Finished | TaskState::Stopped | TaskState::Interrupted => {
                Err(Refusal::Closed)
            }
        }
    }

    /// The first unresolved pending outcome.
    pub fn pending_outcome(&self) -> Option<&PendingOutcome> {
        self.pending.front()
    }

    /// Appends to the bounded history.
    pub fn record(
        &mut self,
        request_id: &RequestKey,
        method: Method,
        at: i64,
        result: &'static str,
    ) {
        if self.history.len() == HISTORY_LIMIT {
            self.history.pop_front();
        }
        self.history.push_back(HistoryEntry {
            request_id: request_id.clone(),
            method,
            at,
            result,
        });
    }

    /// `task.finish`: closes the task. The caller has admitted the request.
    pub fn finish(&mut self, now: i64) {
        self.closed = Some(Closed::Finished);
        self.updated_at = now;
    }

    /// `task.stop`: closes the task, keeping any pending outcome.
    pub fn stop(&mut self, reason: String, now: i64) {
        self.closed = Some(Closed::Stopped { reason });
        self.updated_at = now;
    }

    /// An action's effect was not observed in time: the task blocks on it (a closed task keeps
    /// it recorded and stays closed).
    pub fn add_pending(&mut self, pending: PendingOutcome) {
        self.updated_at = pending.since;
        self.pending.push_back(pending);
    }

    /// Applies a verification of the first pending outcome. `confirmed` resolves it (the task
    /// runs again unless another pending outcome or a close says otherwise); anything else is
    /// recorded as its last verification.
    pub fn apply_verification(&mut self, record: VerifyRecord) {
        let Some(first) = self.pending.front_mut() else {
            return;
        };
        let request_id = first.request_id.clone();
        let at = record.at;
        let outcome = record.outcome;
        if outcome == VerifyOutcome::Confirmed {
            self.pending.pop_front();
        } else {
            first.last_verify = Some(record);
        }
        self.record(
            &RequestKey::new(&request_id),
            Method::TaskVerifyOutcome,
            at,
            outcome.as_str(),
        );
        self.updated_at = at;
    }

    /// A short summary for listings (`snapshot`, `tasks.list`, `task.updated` events).
    pub fn summary(&self) -> TaskSummary {
        TaskSummary {
            created_at: format_millis(self.created_at),
            pending_outcome: self.pending_outcome().map(PendingOutcome::to_wire),
            state: self.state(),
            task_id: self.id.to_string(),
            title: self.title.clone(),
            updated_at: format_millis(self.updated_at),
        }
    }

    /// The run of an interrupted task (an earlier one); `None` for a task of this run.
    pub fn earlier_run(&self) -> Option<&str> {
        match &self.closed {
            Some(Closed::Interrupted { run_id }) => Some(run_id),
            _ => None,
        }
    }

    /// The `task.status` result (`run_id` is the current run; an interrupted task names its
    /// own).
    pub fn status(&self, run_id: &str) -> TaskStatusResult {
        let run_id = self.earlier_run().unwrap_or(run_id);
        TaskStatusResult {
            created_at: format_millis(self.created_at),
            history: self
                .history
                .iter()
                .map(|h| HistoryItem {
                    at: format_millis(h.at),
                    method: h.method.as_str().to_owned(),
                    request_id: h.request_id.to_string(),
                    result: h.result.to_owned(),
                })
                .chain(self.in_flight.iter().map(|f| HistoryItem {
                    at: format_millis(f.since),
                    method: f.method.as_str().to_owned(),
                    request_id: f.request_id.to_string(),
                    result: "running".to_owned(),
                }))
                .collect(),
            in_flight: self
                .in_flight
                .iter()
                .map(|f| InFlightItem {
                    method: f.method.as_str().to_owned(),
                    request_id: f.request_id.to_string(),
                    since: format_millis(f.since),
                })
                .collect(),
            more_pending_outcomes: self
                .pending
                .iter()
                .skip(1)
                .map(PendingOutcome::to_wire)
                .collect(),
            pending_outcome: self.pending_outcome().map(PendingOutcome::to_wire),
            run_id: run_id.to_owned(),
            state: self.state(),
            stop_reason: match &self.closed {
                Some(Closed::Stopped { reason }) => Some(reason.clone()),
                _ => None,
            },
            task_id: self.id.to_string(),
            title: self.title.clone(),
            url: self.url.clone(),
        }
    }
}

/// The bytes of a title a [`ClosedTask`] keeps (longer titles are cut at a character
/// boundary).
pub const CLOSED_TITLE_BYTES: usize = 60;

/// What remains of a closed task whose receipts have all been cleared (SPEC §10): its ID (the
/// map key, 16 bytes), title, state, run and when it closed: 16 + 80 bytes, plus the map's
/// slot and the eviction queue's 16 bytes, under 128 bytes a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClosedTask {
    /// When it closed (epoch ms).
    pub closed_at: i64,
    /// When it started (epoch ms).
    pub created_at: i64,
    /// The run it belongs to: an index into [`Tasks`]' run table, `0` being this run.
    pub run: u32,
    /// `finished` or `stopped` (or another closed state).
    pub state: TaskState,
    title_len: u8,
    title: [u8; CLOSED_TITLE_BYTES],
}

impl ClosedTask {
    fn of(task: &Task) -> ClosedTask {
        let mut end = task.title.len().min(CLOSED_TITLE_BYTES);
        while !task.title.is_char_boundary(end) {
            end -= 1;
        }
        let mut title = [0u8; CLOSED_TITLE_BYTES];
        title[..end].copy_from_slice(&task.title.as_bytes()[..end]);
        ClosedTask {
            closed_at: task.updated_at,
            created_at: task.created_at,
            run: 0,
            state: task.state(),
            title_len: end as u8,
            title,
        }
    }

    /// The title kept (the first [`CLOSED_TITLE_BYTES`] bytes of the original).
    pub fn title(&self) -> &str {
        std::str::from_utf8(&self.title[..self.title_len as usize]).unwrap_or("")
    }

    /// The task as the reads that name it show it: closed, its history gone with its receipts.
    pub fn to_task(&self, id: &str) -> Task {
        let mut t = Task::new(id.into(), self.title().to_owned(), None, self.created_at);
        t.updated_at = self.closed_at;
        t.closed = Some(match self.state {
            TaskState::Stopped => Closed::Stopped {
                reason: "(its receipts were cleared)".into(),
            },
            _ => Closed::Finished,
        });
        t
    }
}

/// Every task of the run.
pub struct Tasks {
    /// Looked up under the host's lock by every action: a fast seeded hash (foldhash), as in
    /// the receipt book, in an index map so the last task used can be found again by position.
    map: IndexMap<TaskId, Task, foldhash::fast::RandomState>,
    /// Where the task last looked up by [`Tasks::get_mut`] was: an action's admission, its
    /// receipt's count and its completion all name the same task, and a pipelined batch
    /// usually names one task throughout, so most lookups find it here without hashing its ID.
    /// Only a hint: checked against the ID every time.
    last: usize,
    /// Closed tasks whose receipts were all cleared, by the bytes of their UUID.
    closed: HashMap<[u8; 16], ClosedTask, foldhash::fast::RandomState>,
    /// The order they were reduced in, so the oldest record goes first when `closed` is full.
    closed_order: VecDeque<[u8; 16]>,
    /// The most closed-task records kept (`--tombstone-capacity`).
    closed_capacity: usize,
}

impl Default for Tasks {
    fn default() -> Tasks {
        Tasks::with_closed_capacity(usize::MAX)
    }
}

impl Tasks {
    /// No tasks; at most `closed_capacity` closed-task records are kept (the oldest goes).
    pub fn with_closed_capacity(closed_capacity: usize) -> Tasks {
        Tasks {
            map: IndexMap::default(),
            last: 0,
            closed: HashMap::default(),
            closed_order: VecDeque::new(),
            closed_capacity,
        }
    }

    /// A receipt naming the task was created.
    pub fn receipt_created(&mut self, id: &str) {
        if let Some(t) = self.get_mut(id) {
            t.receipts += 1;
        }
    }

    /// The position of task `id` when it is the one looked up last.
    fn last_is(&self, id: &str) -> Option<usize> {
        let (k, _) = self.map.get_index(self.last)?;
        let same = (k.as_ptr() == id.as_ptr() && k.len() == id.len()) || **k == *id;
        same.then_some(self.last)
    }

    /// A receipt naming the task was cleared: a closed task with no receipt left is reduced
    /// to its [`ClosedTask`] record.
    pub fn receipt_cleared(&mut self, id: &str) {
        let Some(t) = self.map.get_mut(id) else {
            return;
        };
        t.receipts = t.receipts.saturating_sub(1);
        if t.receipts > 0 || t.closed.is_none() || !t.pending.is_empty() {
            return;
        }
        let Ok(uuid) = uuid::Uuid::try_parse(id) else {
            return;
        };
        if self.closed_capacity == 0 {
            return;
        }
        let record = ClosedTask::of(t);
        self.map.swap_remove(id);
        while self.closed.len() >= self.closed_capacity {
            match self.closed_order.pop_front() {
                Some(oldest) => self.closed.remove(&oldest),
                None => break,
            };
        }
        let key = *uuid.as_bytes();
        if self.closed.insert(key, record).is_none() {
            self.closed_order.push_back(key);
        }
    }

    /// The record of a closed task whose receipts were all cleared.
    pub fn closed(&self, id: &str) -> Option<ClosedTask> {
        let uuid = uuid::Uuid::try_parse(id).ok()?;
        self.closed.get(uuid.as_bytes()).copied()
    }

    /// How many closed tasks are kept as records.
    pub fn closed_records(&self) -> usize {
        self.closed.len()
    }

    /// Adds a task.
    pub fn insert(&mut self, task: Task) {
        self.map.insert(task.id.clone(), task);
    }

    /// A task by ID.
    pub fn get(&self, id: &str) -> Option<&Task> {
        match self.last_is(id) {
            Some(i) => self.map.get_index(i).map(|(_, t)| t),
            None => self.map.get(id),
        }
    }

    /// A task by ID, to change it.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Task> {
        let i = match self.last_is(id) {
            Some(i) => i,
            None => {
                let i = self.map.get_index_of(id)?;
                self.last = i;
                i
            }
        };
        self.map.get_index_mut(i).map(|(_, t)| t)
    }

    /// The shared ID of a task, so receipts need not copy it.
    pub fn shared_id(&self, id: &str) -> Option<TaskId> {
        self.map.get_key_value(id).map(|(k, _)| k.clone())
    }

    /// Counts by state (closed-task records included).
    pub fn counts(&self) -> TaskCounts {
        let mut c = TaskCounts::default();
        let records = self.closed.values().map(|r| r.state);
        for state in self.map.values().map(Task::state).chain(records) {
            match state {
                TaskState::Running => c.running += 1,
                TaskState::Blocked => c.blocked += 1,
                TaskState::Finished => c.finished += 1,
                TaskState::Stopped => c.stopped += 1,
                TaskState::Interrupted => c.interrupted += 1,
            }
        }
        c
    }

    /// All tasks, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Task> {
        self.map.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ExpectCheck;
    use serde_json::json;

    fn pending(id: &str) -> PendingOutcome {
        PendingOutcome {
            request_id: id.into(),
            method: Method::PagePress,
            params: json!({}),
            expect: Some(Expect::on("#status", ExpectCheck::Contains("Saved".into()))),
            since: 10,
            last_verify: None,
            evidence: None,
        }
    }

    fn verify(outcome: VerifyOutcome, at: i64) -> VerifyRecord {
        VerifyRecord {
            at,
            outcome,
            observation: None,
        }
    }

    #[test]
    fn a_running_task_admits_everything() {
        let t = Task::new("t".into(), "x".into(), None, 0);
        assert_eq!(t.state(), TaskState::Running);
        for m in Method::BRIDGE {
            assert_eq!(t.admit(*m), Ok(()));
        }
    }

    #[test]
    fn an_uncertain_action_blocks_mutations_but_not_reads_or_stop() {
        let mut t = Task::new("t".into(), "x".into(), None, 0);
        t.add_pending(pending("r1"));
        assert_eq!(t.state(), TaskState::Blocked);
        for m in [
            Method::PageFill,
            Method::PageClick,
            Method::PagePress,
            Method::TaskFinish,
        ] {
            assert_eq!(t.admit(m), Err(Refusal::Blocked), "{m}");
        }
        for m in [
            Method::PageRead,
            Method::TaskStatus,
            Method::TaskVerifyOutcome,
            Method::TaskStop,
        ] {
            assert_eq!(t.admit(m), Ok(()), "{m}");
        }
    }

    #[test]
    fn only_confirmation_unblocks() {
        let mut t = Task::new("t".into(), "x".into(), None, 0);
        t.add_pending(pending("r1"));
        t.apply_verification(verify(VerifyOutcome::NotObserved, 20));
        assert_eq!(t.state(), TaskState::Blocked);
        assert_eq!(
            t.pending_outcome()
                .unwrap()
                .last_verify
                .as_ref()
                .unwrap()
                .outcome,
            VerifyOutcome::NotObserved
        );
        t.apply_verification(verify(VerifyOutcome::Unknown, 30));
        assert_eq!(t.state(), TaskState::Blocked);
        t.apply_verification(verify(VerifyOutcome::Confirmed, 40));
        assert_eq!(t.state(), TaskState::Running);
        let results: Vec<_> = t.history.iter().map(|h| h.result).collect();
        assert_eq!(results, ["not_observed", "unknown", "confirmed"]);
    }

    #[test]
    fn two_pending_outcomes_need_two_confirmations() {
        let mut t = Task::new("t".into(), "x".into(), None, 0);
        t.add_pending(pending("r1"));
        t.add_pending(pending("r2"));
        t.apply_verification(verify(VerifyOutcome::Confirmed, 40));
        assert_eq!(t.state(), TaskState::Blocked);
        assert_eq!(t.pending_outcome().unwrap().request_id, "r2");
        t.apply_verification(verify(VerifyOutcome::Confirmed, 41));
        assert_eq!(t.state(), TaskState::Running);
    }

    #[test]
    fn stopping_keeps_the_pending_outcome_and_closes() {
        let mut t = Task::new("t".into(), "x".into(), None, 0);
        t.add_pending(pending("r1"));
        t.stop("gave up".into(), 50);
        assert_eq!(t.state(), TaskState::Stopped);
        assert!(t.pending_outcome().is_some());
        assert_eq!(t.admit(Method::PageFill), Err(Refusal::Closed));
        assert_eq!(t.admit(Method::TaskStop), Err(Refusal::Closed));
        assert_eq!(t.admit(Method::PageRead), Ok(()));
        assert_eq!(
            t.status("run")
                .pending_outcome
                .map(|p| p.request_id)
                .as_deref(),
            Some("r1")
        );
    }

    #[test]
    fn finished_tasks_refuse_mutations() {
        let mut t = Task::new("t".into(), "x".into(), None, 0);
        t.finish(5);
        assert_eq!(t.state(), TaskState::Finished);
        assert_eq!(t.admit(Method::TaskFinish), Err(Refusal::Closed));
        assert_eq!(t.admit(Method::TaskStatus), Ok(()));
    }

    #[test]
    fn closed_tasks_whose_receipts_are_cleared_become_small_bounded_records() {
        // The record, its 16-byte key, its place in the eviction queue and a control byte.
        let per_task = std::mem::size_of::<ClosedTask>() + 16 + 16 + 1;
        assert!(per_task <= 128, "{per_task} bytes per closed task");
        let mut tasks = Tasks::with_closed_capacity(2);
        let ids: Vec<String> = (0..3)
            .map(|i| uuid::Uuid::from_u128(i + 1).to_string())
            .collect();
        for id in &ids {
            let mut t = Task::new(id.as_str().into(), "é".repeat(100), None, 1);
            t.finish(7);
            tasks.insert(t);
            tasks.receipt_created(id);
            tasks.receipt_created(id);
        }
        // Open tasks and tasks with receipts left stay whole.
        tasks.insert(Task::new("open".into(), "o".into(), None, 1));
        tasks.receipt_cleared("open");
        assert!(tasks.get("open").is_some());
        tasks.receipt_cleared(&ids[0]);
        assert!(tasks.get(&ids[0]).is_some());
        tasks.receipt_cleared(&ids[0]);
        assert!(tasks.get(&ids[0]).is_none());
        let r = tasks.closed(&ids[0]).expect("a record");
        assert_eq!(r.state, TaskState::Finished);
        assert_eq!(r.closed_at, 7);
        assert_eq!(r.title(), "é".repeat(30));
        assert_eq!(
            r.to_task(&ids[0]).admit(Method::PageFill),
            Err(Refusal::Closed)
        );
        assert_eq!(tasks.counts().finished, 3);
        // At most two records: the oldest goes.
        for id in &ids[1..] {
            tasks.receipt_cleared(id);
            tasks.receipt_cleared(id);
        }
        assert_eq!(tasks.closed_records(), 2);
        assert!(tasks.closed(&ids[0]).is_none());
        assert!(tasks.closed(&ids[2]).is_some());
    }

    /// Every lookup finds the task it names, whichever task was looked up last and however
    /// removing a reduced task moved the others.
    #[test]
    fn lookups_find_the_task_named_after_others_move() {
        let mut tasks = Tasks::default();
        let ids: Vec<String> = (0..4)
            .map(|i| uuid::Uuid::from_u128(i + 1).to_string())
            .collect();
        for (i, id) in ids.iter().enumerate() {
            tasks.insert(Task::new(id.as_str().into(), format!("t{i}"), None, 1));
            tasks.receipt_created(id);
        }
        let title = |tasks: &mut Tasks, id: &str| tasks.get_mut(id).map(|t| t.title.clone());
        assert_eq!(title(&mut tasks, &ids[3]).as_deref(), Some("t3"));
        assert_eq!(tasks.get(&ids[3]).map(|t| t.receipts), Some(1));
        // The first task closes and goes: the last one takes its place in the map.
        tasks.get_mut(&ids[0]).unwrap().finish(2);
        tasks.receipt_cleared(&ids[0]);
        assert!(tasks.get(&ids[0]).is_none());
        assert!(tasks.get_mut(&ids[0]).is_none());
        for (i, id) in ids.iter().enumerate().skip(1).rev() {
            assert_eq!(title(&mut tasks, id), Some(format!("t{i}")));
            assert_eq!(
                tasks.get(id).map(|t| t.title.as_str()),
                Some(&*format!("t{i}"))
            );
        }
        assert!(tasks.get("no-such-task").is_none());
        assert!(tasks.get_mut("no-such-task").is_none());
        assert_eq!(tasks.get(&ids[1]).map(|t| t.title.as_str()), Some("t1"));
        assert_eq!(tasks.iter().count(), 3);
    }

    #[test]
    fn history_is_bounded() {
        let mut t = Task::new("t".into(), "x".into(), None, 0);
        for i in 0..(HISTORY_LIMIT + 20) {
            t.record(
                &RequestKey::new(&format!("r{i}")),
                Method::PageFill,
                i as i64,
                "ok",
            );
        }
        assert_eq!(t.history.len(), HISTORY_LIMIT);
        assert_eq!(t.history.front().unwrap().request_id.to_string(), "r20");
    }
}
