//! The host's rules: validation, the receipt rules, task admission, executions and reads.
//!
//! Everything that must be atomic — looking an ID up, comparing fingerprints, admitting a
//! mutation against its task's state, checking capacity and creating the receipt — happens in
//! one critical section of one `std::sync::Mutex` (the mini-redis answer: the section is short
//! and never awaits). An execution is polled once as soon as its receipt exists: when the
//! executor answers without waiting it completes inline, otherwise it is spawned detached from
//! the connection that asked for it, so a caller that disconnects cancels nothing; replies,
//! errors and panics included, are stored and shared by every copy of the request.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::book::{digest, Book, ClearBatch, Entry, Receipt, ReplySlot, RequestKey, Tombstone};
use crate::events::{EventBus, ReceiptFacts, Subscription};
use crate::executor::{Action, ActionOutcome, Executor, ReadOutcome};
use crate::protocol::{
    format_millis, now_millis, parse_envelope, parse_request_direct, try_fingerprint, Command,
    Delivery, DirectRequest, ErrorBody, ErrorCode, Expect, ExpectCheck, Method, Outcome,
    ReceiptKind, PROTOCOL_VERSION,
};
use crate::tasks::{Observation, PendingOutcome, Task, TaskId, Tasks, VerifyOutcome, VerifyRecord};

/// Default `--capacity`.
pub const DEFAULT_CAPACITY: usize = 10_000;
/// Default `--tombstone-capacity`.
pub const DEFAULT_TOMBSTONE_CAPACITY: usize = 1_000_000;
/// Default `--action-timeout-ms`.
pub const DEFAULT_ACTION_TIMEOUT_MS: u64 = 2_000;

/// The knobs of one host run.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Hard receipt capacity; new mutating IDs are refused beyond it, nothing is evicted.
    pub capacity: usize,
    /// Hard tombstone capacity.
    pub tombstone_capacity: usize,
    /// How long an action's effect may take to be observed, and how long a read may take.
    pub action_timeout: Duration,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            capacity: DEFAULT_CAPACITY,
            tombstone_capacity: DEFAULT_TOMBSTONE_CAPACITY,
            action_timeout: Duration::from_millis(DEFAULT_ACTION_TIMEOUT_MS),
        }
    }
}

/// Counters the console shows; all change under the state lock.
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

/// The state behind the host's one lock.
pub(crate) struct State {
    pub(crate) book: Book,
    pub(crate) tasks: Tasks,
    pub(crate) counters: Counters,
    pub(crate) events: EventBus,
    /// Verifications in progress, so a second one shares the first.
    verifying: std::collections::HashMap<TaskId, watch::Receiver<Option<Arc<Outcome>>>>,
    /// Clears prepared and not yet committed, by token.
    prepared_clears: std::collections::HashMap<String, PreparedClear>,
}

/// The host: a cheap-to-clone handle shared by every connection and execution.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

struct Inner {
    run_id: String,
    started_at: i64,
    config: HostConfig,
    state: Mutex<State>,
    executor: Arc<dyn Executor>,
    shutting_down: AtomicBool,
    /// Signalled whenever the last running execution finishes.
    idle: Notify,
    /// How many `wait_idle` calls are waiting, so completions skip `idle` when nobody is.
    idle_watchers: std::sync::atomic::AtomicUsize,
}

/// A reply that is ready now, or one that needs waiting (an execution, a slow read).
pub enum Handled {
    /// The reply line.
    Ready(Vec<u8>),
    /// A future resolving to the reply line.
    Later(BoxFuture<'static, Vec<u8>>),
}

/// What an execution changed besides its reply.
enum Effect {
    None,
    TaskStarted(Task),
    Uncertain(Expect),
}

/// A fill's result, `{"target":…,"value":…}`, written without building a JSON value (the
/// members in the order a JSON object would list them).
#[derive(serde::Serialize)]
struct Filled<'a> {
    target: &'a str,
    value: &'a str,
}

fn reject(id: Option<&str>, run_id: &str, error: ErrorBody) -> Handled {
    Handled::Ready(Outcome::err(&error).reply_line(id, run_id, ReceiptKind::None))
}

fn ready_ok(id: &str, run_id: &str, result: Value) -> Handled {
    Handled::Ready(Outcome::ok(&result).reply_line(Some(id), run_id, ReceiptKind::None))
}

/// Guards an execution's future: dropped before the outcome is stored, it drops the receipt's
/// waiters so joined copies get an answer rather than wait forever.
struct Unfinished<'a> {
    host: &'a Host,
    key: Option<&'a RequestKey>,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.host.lock().book.abandon_waiters(key);
        }
    }
}

/// What the receipt rules decided for a request that is not answered at once.
enum Admitted {
    /// A read: executed every time, never stored.
    Read(Command),
    /// A new receipt, to execute.
    Execute(Execution),
}

/// A mutation whose running receipt now exists.
struct Execution {
    key: RequestKey,
    /// Where the receipt was created (a hint for storing its outcome).
    slot: usize,
    cmd: Command,
    task_id: Option<TaskId>,
}

/// An execution the executor answered without waiting, to be stored.
struct Inline {
    execution: Execution,
    outcome: Outcome,
    effect: Effect,
}

/// How starting an execution went.
// Inline is the common case, on every fresh action: boxing it would cost an allocation each
// time to save moving a few hundred bytes once.
#[allow(clippy::large_enum_variant)]
enum Ran {
    /// Answered inline: the outcome is ready to store.
    Inline(Inline),
    /// Spawned: the reply comes when it finishes.
    Later(Handled),
}

/// Whether a command can share a batch's critical sections: an action an executor performs.
fn joins_a_run(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::TaskStart(_)
            | Command::PageFill(_)
            | Command::PageClick(_)
            | Command::PagePress(_)
    )
}

/// An execution the executor has started.
enum Started {
    /// `task.start`: the new task's page opening.
    Open(TaskId, BoxFuture<'static, Result<(), String>>),
    /// A page action on a task.
    Act(TaskId, BoxFuture<'static, ActionOutcome>),
}

/// What the executor answered.
enum Finished {
    Open(TaskId, Result<(), String>),
    Act(TaskId, ActionOutcome),
}

impl Started {
    /// Polls the executor's work once; `Some` when it answered without waiting.
    fn poll_once(&mut self, cx: &mut std::task::Context<'_>) -> Option<Finished> {
        use std::task::Poll;
        match self {
            Started::Open(t, f) => match f.as_mut().poll(cx) {
                Poll::Ready(r) => Some(Finished::Open(t.clone(), r)),
                Poll::Pending => None,
            },
            Started::Act(t, f) => match f.as_mut().poll(cx) {
                Poll::Ready(r) => Some(Finished::Act(t.clone(), r)),
                Poll::Pending => None,
            },
        }
    }

    /// Waits for the executor's answer.
    async fn finish(self) -> Finished {
        match self {
            Started::Open(t, f) => Finished::Open(t, f.await),
            Started::Act(t, f) => Finished::Act(t, f.await),
        }
    }
}

/// The stored outcome of an execution that panicked: `INTERNAL`, and uncertain when the action
/// may have had an effect (never re-run; the task blocks until verified).
fn panicked(
    id: &str,
    cmd: &Command,
    task_id: Option<&str>,
    panic: Box<dyn std::any::Any + Send>,
) -> (Outcome, Effect) {
    let method = cmd.method();
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    tracing::error!(request_id = %id, method = %method, "execution panicked: {what}");
    let error = internal_error(id, method, task_id, &what);
    let effect = match expectation(cmd) {
        Some(e) => Effect::Uncertain(e),
        None => Effect::None,
    };
    (Outcome::err(&error), effect)
}

/// Waits for a running receipt's outcome.
async fn wait_outcome(mut rx: watch::Receiver<Option<Arc<Outcome>>>) -> Option<Arc<Outcome>> {
    match rx.wait_for(Option::is_some).await {
        Ok(v) => v.clone(),
        Err(_) => None,
    }
}

/// The implicit or explicit expectation of a mutating page action.
fn expectation(cmd: &Command) -> Option<Expect> {
    match cmd {
        Command::PageFill(p) => Some(Expect {
            target: p.target.clone(),
            check: ExpectCheck::Equals(p.value.clone()),
        }),
        Command::PageClick(p) => Some(p.expect.clone()),
        Command::PagePress(p) => Some(p.expect.clone()),
        _ => None,
    }
}

impl Host {
    /// A host with a fresh run ID.
    pub fn new(config: HostConfig, executor: Arc<dyn Executor>) -> Host {
        Host {
            inner: Arc::new(Inner {
                run_id: uuid::Uuid::new_v4().to_string(),
                started_at: now_millis(),
                state: Mutex::new(State {
                    book: Book::new(config.capacity, config.tombstone_capacity),
                    tasks: Tasks::default(),
                    counters: Counters::default(),
                    events: EventBus::default(),
                    verifying: Default::default(),
                    prepared_clears: Default::default(),
                }),
                config,
                executor,
                shutting_down: AtomicBool::new(false),
                idle: Notify::new(),
                idle_watchers: Default::default(),
            }),
        }
    }

    /// This run's ID.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// When this run started (epoch ms).
    pub fn started_at(&self) -> i64 {
        self.inner.started_at
    }

    /// The run's configuration.
    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// The executor.
    pub fn executor(&self) -> &Arc<dyn Executor> {
        &self.inner.executor
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the book half-changed in a way that
        // matters more than refusing all service, so keep serving.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new event subscription and the sequence number it starts after.
    pub fn subscribe(&self) -> (u64, Subscription) {
        let st = self.lock();
        (st.events.seq(), st.events.subscribe())
    }

    /// From now on new mutations are refused with `SHUTTING_DOWN`.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Whether the host is stopping.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
    }

    /// Waits until no execution runs, or `timeout` passes. Returns the request IDs still
    /// running when it gave up (empty when idle).
    pub async fn wait_idle(&self, timeout: Duration) -> Vec<String> {
        // Counted before the first look at the book, so a completion that empties the book
        // after that look sees the count and wakes this waiter.
        struct Watching<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Watching<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.inner.idle_watchers.fetch_add(1, Ordering::SeqCst);
        let _watching = Watching(&self.inner.idle_watchers);
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.inner.idle.notified();
            {
                let st = self.lock();
                if st.book.running() == 0 {
                    return Vec::new();
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let st = self.lock();
                return st
                    .book
                    .iter()
                    .filter(|(_, r)| r.is_running())
                    .map(|(k, _)| k.to_string())
                    .collect();
            }
        }
    }

    /// Handles one bridge frame (without its newline).
    ///
    /// A well-formed request is read straight from the frame (no JSON value is built for it);
    /// anything that path does not take goes through [`Host::handle`], which writes every
    /// refusal, so a bad frame reads the same whichever path saw it first.
    pub fn handle_frame(&self, frame: &[u8]) -> Handled {
        let executor = &self.inner.executor;
        if let Some(req) = parse_request_direct(frame, &|t| executor.check_target(t)) {
            return self.handle_command(req.id, req.command, req.request);
        }
        match parse_envelope(frame) {
            Ok(env) => self.handle(&env.id, &env.method, &env.params),
            Err(e) => reject(e.id.as_deref(), self.run_id(), e.error),
        }
    }

    /// Handles one bridge request.
    pub fn handle(&self, id: &str, method_name: &str, params: &Value) -> Handled {
        let run_id = self.run_id();
        let Ok(method) = method_name.parse::<Method>() else {
            return reject(
                Some(id),
                run_id,
                ErrorBody::new(
                    ErrorCode::UnknownMethod,
                    format!("unknown method {method_name:?}; call tools.list for the methods of this socket"),
                )
                .with_details(json!({"method": method_name})),
            );
        };
        let executor = &self.inner.executor;
        let cmd = match Command::parse(method, params, &|t| executor.check_target(t)) {
            Ok(c) => c,
            Err(msg) => {
                return reject(Some(id), run_id, ErrorBody::new(ErrorCode::BadRequest, msg))
            }
        };
        let request = match try_fingerprint(method.as_str(), params) {
            Ok(r) => r,
            Err(msg) => {
                return reject(Some(id), run_id, ErrorBody::new(ErrorCode::BadRequest, msg))
            }
        };
        self.handle_command(id, cmd, request)
    }

    /// The receipt rules for one request whose params are already checked (`request` is its
    /// canonical `{method, params}`, the fingerprint the receipt keeps), applied in the host's
    /// critical section: answered at once, a read to run, or a new receipt to execute.
    fn admit(
        &self,
        st: &mut State,
        id: &str,
        cmd: Command,
        request: String,
        now: i64,
    ) -> Result<Admitted, Handled> {
        let run_id = self.run_id();
        let method = cmd.method();
        let key = RequestKey::new(id);
        let vacancy = match st.book.entry(&key) {
            Entry::Receipt(r) => {
                if *r.request != *request {
                    st.counters.rejected_reused += 1;
                    let stored = r.method;
                    let first_seen = r.first_seen;
                    st.events.publish("request.rejected", now, || {
                        json!({"requestId": id, "method": method.as_str(), "code": "MCP_REQUEST_ID_REUSED"})
                    });
                    return Err(reject(
                        Some(id),
                        run_id,
                        ErrorBody::new(
                            ErrorCode::RequestIdReused,
                            format!(
                                "request id {id} was first used at {} for {stored} with other content; nothing was executed. Send new content under a fresh id, or the original content to read its reply (receipt.status shows it)",
                                format_millis(first_seen)
                            ),
                        )
                        .with_details(json!({
                            "requestId": id,
                            "method": stored.as_str(),
                            "firstSeenAt": format_millis(first_seen),
                        })),
                    ));
                }
                return Err(match &r.reply {
                    crate::book::ReplySlot::Done(outcome) => {
                        r.replays += 1;
                        let line = outcome.reply_line(Some(id), run_id, ReceiptKind::Replayed);
                        st.counters.replays += 1;
                        st.events
                            .publish_receipt("receipt.replayed", now, || ReceiptFacts::Seen {
                                request_id: id.into(),
                                method: method.as_str(),
                            });
                        Handled::Ready(line)
                    }
                    crate::book::ReplySlot::Running(_) => {
                        r.joins += 1;
                        let rx = r.wait_for_outcome().expect("the receipt is running");
                        st.counters.joins += 1;
                        st.events
                            .publish_receipt("receipt.joined", now, || ReceiptFacts::Seen {
                                request_id: id.into(),
                                method: method.as_str(),
                            });
                        self.reply_when_done(id, rx, ReceiptKind::Joined)
                    }
                });
            }
            Entry::Tombstone(t, batch) => {
                let same = t.digest == digest(&request);
                st.counters.rejected_cleared += 1;
                let error = cleared_error(id, t, batch, same);
                st.events.publish("request.rejected", now, || {
                    json!({"requestId": id, "method": method.as_str(), "code": "RECEIPT_CLEARED"})
                });
                return Err(reject(Some(id), run_id, error));
            }
            Entry::Vacant(vacancy) => vacancy,
        };

        if !method.is_mutating() {
            return Ok(Admitted::Read(cmd));
        }
        if self.is_shutting_down() {
            st.events.publish(
                "request.rejected",
                now,
                || json!({"requestId": id, "method": method.as_str(), "code": "SHUTTING_DOWN"}),
            );
            return Err(reject(
                Some(id),
                run_id,
                ErrorBody::new(
                    ErrorCode::ShuttingDown,
                    format!("the host is stopping and did not execute {method}; send it again under the same id to the next host run"),
                ),
            ));
        }

        // Admission: the task must exist and accept the action.
        let task_id = match cmd.task_id() {
            None => None,
            Some(tid) => {
                let Some(task) = st.tasks.get_mut(tid) else {
                    st.events.publish("request.rejected", now, || {
                        json!({"requestId": id, "method": method.as_str(), "taskId": tid, "code": "TASK_NOT_FOUND"})
                    });
                    return Err(reject(
                        Some(id),
                        run_id,
                        ErrorBody::new(
                            ErrorCode::TaskNotFound,
                            format!("no task {tid} in this run ({run_id}); nothing was executed. Check the taskId and runId you kept with task.resume"),
                        )
                        .with_details(json!({"taskId": tid, "runId": run_id})),
                    ));
                };
                if let Err(refusal) = task.admit(method) {
                    let code = refusal.code();
                    task.record(&key, method, now, code.as_str());
                    let error = admission_error(task, method, code);
                    if code == ErrorCode::TaskBlocked {
                        st.counters.rejected_blocked += 1;
                    }
                    st.events.publish("request.rejected", now, || {
                        json!({"requestId": id, "method": method.as_str(), "taskId": tid, "code": code.as_str()})
                    });
                    return Err(reject(Some(id), run_id, error));
                }
                Some(task.id.clone())
            }
        };

        let slot = match vacancy.insert_running(
            request.into_boxed_str(),
            method,
            task_id.clone(),
            now,
        ) {
            Ok(slot) => slot,
            Err(full) => {
                st.counters.rejected_capacity += 1;
                st.events.publish("request.rejected", now, || {
                    json!({"requestId": id, "method": method.as_str(), "code": "RECEIPT_CAPACITY_FULL"})
                });
                return Err(reject(
                    Some(id),
                    run_id,
                    ErrorBody::new(
                        ErrorCode::ReceiptCapacityFull,
                        format!(
                            "the receipt book is full ({} of {}); {method} was not executed. An operator must clear completed receipts (polaris clear) — then send this request again under the same id",
                            full.used, full.capacity
                        ),
                    )
                    .with_details(json!({"capacity": full.capacity, "used": full.used})),
                ));
            }
        };
        st.counters.executions += 1;
        st.events
            .publish_receipt("receipt.created", now, || ReceiptFacts::Created {
                request_id: id.into(),
                method: method.as_str(),
                task_id: task_id.clone(),
            });

        // Closing a task touches no executor: apply it in this critical section, so no action
        // can slip in between the check and the change.
        if let (Command::TaskFinish(_) | Command::TaskStop(_), Some(tid)) = (&cmd, &task_id) {
            let task = st.tasks.get_mut(tid).expect("admitted task exists");
            match &cmd {
                Command::TaskStop(p) => task.stop(p.reason.clone(), now),
                _ => task.finish(now),
            }
            task.record(&key, method, now, "ok");
            self.inner
                .executor
                .close(tid.clone(), task.pending_outcome().is_some());
            let state = task.state().as_str();
            let summary = task.summary_json();
            let outcome = Arc::new(Outcome::ok(&json!({"taskId": &**tid, "state": state})));
            st.book.complete(&key, outcome.clone(), now);
            st.events.publish("task.updated", now, || summary);
            publish_completed(st, id, method, &outcome, now);
            return Err(Handled::Ready(outcome.reply_line(
                Some(id),
                run_id,
                ReceiptKind::New,
            )));
        }
        Ok(Admitted::Execute(Execution {
            key,
            slot,
            cmd,
            task_id,
        }))
    }

    /// Applies the receipt rules to a request whose params are already checked: `request` is
    /// its canonical `{method, params}` (the fingerprint the receipt keeps).
    fn handle_command(&self, id: &str, cmd: Command, request: String) -> Handled {
        let now = now_millis();
        let admitted = self.admit(&mut self.lock(), id, cmd, request, now);
        match admitted {
            Err(answer) => answer,
            Ok(Admitted::Read(cmd)) => self.read(id, cmd),
            Ok(Admitted::Execute(execution)) => match self.run(id, execution) {
                Ran::Later(answer) => answer,
                Ran::Inline(done) => {
                    let outcome = self.complete(
                        &done.execution.key,
                        done.execution.slot,
                        id,
                        done.execution.cmd.method(),
                        done.execution.task_id,
                        done.outcome,
                        done.effect,
                        now,
                    );
                    Handled::Ready(outcome.reply_line(Some(id), self.run_id(), ReceiptKind::New))
                }
            },
        }
    }

    /// Handles frames that arrived together on one connection, in order. Consecutive actions
    /// (the mutations that run on an executor) are admitted under one taking of the host's
    /// lock and the ones that complete inline are stored under one more, so a pipelining
    /// client pays for the lock twice per run of actions instead of twice per request. Reads,
    /// task closings and anything the direct parse path does not read end a run and are
    /// handled on their own, after it: each frame is answered as it would be alone, in turn.
    pub fn handle_frames(&self, frames: &[&[u8]], out: &mut Vec<Handled>) {
        let executor = &self.inner.executor;
        let check = |t: &str| executor.check_target(t);
        let mut run = Vec::new();
        for frame in frames {
            match parse_request_direct(frame, &check) {
                Some(req) if joins_a_run(&req.command) => run.push(req),
                direct => {
                    self.flush_run(&mut run, out);
                    out.push(match direct {
                        Some(req) => self.handle_command(req.id, req.command, req.request),
                        None => self.handle_frame(frame),
                    });
                }
            }
        }
        self.flush_run(&mut run, out);
    }

    /// Handles the actions gathered so far.
    fn flush_run(&self, run: &mut Vec<DirectRequest<'_>>, out: &mut Vec<Handled>) {
        match run.len() {
            0 => {}
            1 => {
                let req = run.pop().expect("one request");
                out.push(self.handle_command(req.id, req.command, req.request));
            }
            _ => self.handle_run(std::mem::take(run), out),
        }
    }

    /// [`Host::handle_frames`] for a run of directly read requests: admitted in order in one
    /// critical section, executed, and the inline outcomes stored in order in another.
    fn handle_run(&self, run: Vec<DirectRequest<'_>>, out: &mut Vec<Handled>) {
        let now = now_millis();
        let admitted: Vec<_> = {
            let mut st = self.lock();
            run.into_iter()
                .map(|r| (r.id, self.admit(&mut st, r.id, r.command, r.request, now)))
                .collect()
        };
        let mut inline = Vec::new();
        for (id, admission) in admitted {
            let answer = match admission {
                Err(answer) => answer,
                Ok(Admitted::Read(cmd)) => self.read(id, cmd),
                Ok(Admitted::Execute(execution)) => match self.run(id, execution) {
                    Ran::Later(answer) => answer,
                    Ran::Inline(done) => {
                        inline.push((out.len(), id, done));
                        // Replaced by the reply below, once the outcome is stored.
                        Handled::Ready(Vec::new())
                    }
                },
            };
            out.push(answer);
        }
        if inline.is_empty() {
            return;
        }
        let mut stored = Vec::with_capacity(inline.len());
        let mut idle = false;
        {
            let mut st = self.lock();
            for (position, id, done) in inline {
                let outcome = Arc::new(done.outcome);
                let (waiters, now_idle) = self.complete_locked(
                    &mut st,
                    &done.execution.key,
                    done.execution.slot,
                    id,
                    done.execution.cmd.method(),
                    done.execution.task_id,
                    &outcome,
                    done.effect,
                    now,
                );
                idle = now_idle;
                stored.push((position, id, outcome, waiters));
            }
        }
        for (position, id, outcome, waiters) in stored {
            if let Some(waiters) = waiters {
                waiters.send_replace(Some(outcome.clone()));
            }
            out[position] =
                Handled::Ready(outcome.reply_line(Some(id), self.run_id(), ReceiptKind::New));
        }
        self.ring_idle(idle);
    }

    /// Starts an admitted execution: answered inline when the executor answers without
    /// waiting (the caller stores the outcome), otherwise spawned and answered later.
    fn run(&self, id: &str, execution: Execution) -> Ran {
        let Execution {
            key,
            slot,
            cmd,
            task_id,
        } = execution;
        let method = cmd.method();

        // The executor's work is started and polled once right here: actions it answers
        // without waiting (the fixture's fills, a task's opening) complete inline, with no task
        // spawned and nothing else allocated; the others are spawned, owning everything they
        // need, and keep running whatever happens to the caller's connection.
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        let first = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut started = self.start_execution(&cmd, task_id.as_ref());
            match started.poll_once(&mut cx) {
                Some(finished) => Ok(finished),
                None => Err(started),
            }
        }));
        let (outcome, effect) = match first {
            Ok(Ok(finished)) => self.interpret(id, &cmd, finished),
            Err(panic) => panicked(id, &cmd, task_id.as_deref(), panic),
            Ok(Err(started)) => {
                // Whatever the first poll registered with the no-op waker is registered again
                // when the spawned task polls it with its own.
                let host = self.clone();
                let exec_id = id.to_owned();
                let done = tokio::spawn(async move {
                    // Should this future be dropped unfinished (the runtime going away), the
                    // copies that joined learn there will be no reply instead of waiting forever.
                    let mut unfinished = Unfinished {
                        host: &host,
                        key: Some(&key),
                    };
                    let (outcome, effect) =
                        match AssertUnwindSafe(started.finish()).catch_unwind().await {
                            Ok(finished) => host.interpret(&exec_id, &cmd, finished),
                            Err(panic) => panicked(&exec_id, &cmd, task_id.as_deref(), panic),
                        };
                    let outcome = host.complete(
                        &key,
                        slot,
                        &exec_id,
                        method,
                        task_id,
                        outcome,
                        effect,
                        now_millis(),
                    );
                    unfinished.key = None;
                    outcome
                });
                let id = id.to_owned();
                let host = self.clone();
                return Ran::Later(Handled::Later(Box::pin(async move {
                    match done.await {
                        Ok(outcome) => {
                            outcome.reply_line(Some(&id), host.run_id(), ReceiptKind::New)
                        }
                        Err(_) => host.vanished(&id),
                    }
                })));
            }
        };
        // Completed inline: within microseconds of the receipt's creation, so its clock reading
        // stands for the completion too.
        Ran::Inline(Inline {
            execution: Execution {
                key,
                slot,
                cmd,
                task_id,
            },
            outcome,
            effect,
        })
    }

    fn reply_when_done(
        &self,
        id: &str,
        rx: watch::Receiver<Option<Arc<Outcome>>>,
        kind: ReceiptKind,
    ) -> Handled {
        let host = self.clone();
        let id = id.to_owned();
        Handled::Later(Box::pin(async move {
            match wait_outcome(rx).await {
                Some(outcome) => outcome.reply_line(Some(&id), host.run_id(), kind),
                None => host.vanished(&id),
            }
        }))
    }

    /// The reply when an execution task vanished without storing a reply (the runtime is
    /// going away): say so rather than pretend.
    fn vanished(&self, id: &str) -> Vec<u8> {
        Outcome::err(&ErrorBody::new(
            ErrorCode::Internal,
            format!("the execution of request {id} ended without a reply; read receipt.status for {id} before doing anything else"),
        ))
        .reply_line(Some(id), self.run_id(), ReceiptKind::None)
    }

    /// Starts one mutation on the executor. Never called twice for one receipt.
    fn start_execution(&self, cmd: &Command, task: Option<&TaskId>) -> Started {
        let executor = &self.inner.executor;
        if let Command::TaskStart(p) = cmd {
            let task_id: TaskId = uuid::Uuid::new_v4().to_string().into();
            let opening = executor.open(
                task_id.clone(),
                p.url.clone(),
                p.fixture.clone().unwrap_or_default(),
                Instant::now() + self.inner.config.action_timeout,
            );
            return Started::Open(task_id, opening);
        }
        let task = task.expect("page actions name an admitted task").clone();
        let deadline = Instant::now() + self.inner.config.action_timeout;
        let action = match cmd {
            Command::PageFill(p) => Action::Fill {
                target: p.target.clone(),
                value: p.value.clone(),
            },
            Command::PageClick(p) => Action::Click {
                target: p.target.clone(),
                expect: p.expect.clone(),
            },
            Command::PagePress(p) => Action::Press {
                key: p.key.clone(),
                target: p.target.clone(),
                expect: p.expect.clone(),
            },
            other => unreachable!("{} is not executed as a page action", other.method()),
        };
        Started::Act(task.clone(), executor.act(task, action, deadline))
    }

    /// Turns what the executor answered into the stored outcome and its effect on the task.
    fn interpret(&self, id: &str, cmd: &Command, finished: Finished) -> (Outcome, Effect) {
        let method = cmd.method();
        match finished {
            Finished::Open(task_id, Ok(())) => {
                let Command::TaskStart(p) = cmd else {
                    unreachable!("only task.start opens a page")
                };
                let now = now_millis();
                let mut t = Task::new(task_id.clone(), p.title.clone(), p.url.clone(), now);
                t.record(&RequestKey::new(id), method, now, "ok");
                let result = json!({"taskId": &*task_id, "runId": self.run_id(), "state": "running"});
                (Outcome::ok(&result), Effect::TaskStarted(t))
            }
            Finished::Open(_, Err(e)) => (
                Outcome::err(&ErrorBody::new(
                    ErrorCode::ActionFailed,
                    format!("the executor could not open a page for the task: {e}; nothing was started"),
                )),
                Effect::None,
            ),
            Finished::Act(_, ActionOutcome::Applied(obs)) => {
                let outcome = match cmd {
                    Command::PageFill(p) => Outcome::ok(&Filled {
                        target: &p.target,
                        value: &p.value,
                    }),
                    _ => Outcome::ok(&json!({"observation": obs})),
                };
                (outcome, Effect::None)
            }
            Finished::Act(task, ActionOutcome::Failed(reason)) => (
                Outcome::err(
                    &ErrorBody::new(
                        ErrorCode::ActionFailed,
                        format!("{method} failed with no effect: {reason}. Task {task} is still running; read the page (page.read) before deciding what to send next"),
                    )
                    .with_details(json!({"taskId": &*task, "requestId": id, "reason": reason})),
                ),
                Effect::None,
            ),
            Finished::Act(task, ActionOutcome::Uncertain(reason)) => {
                let expect = expectation(cmd).expect("page actions have an expectation");
                (
                    Outcome::err(
                        &ErrorBody::new(
                            ErrorCode::OutcomeUncertain,
                            format!("the outcome of {method} (request {id}) is uncertain: {reason}. Do not resend it: call task.verifyOutcome for task {task} before sending anything else"),
                        )
                        .with_details(json!({
                            "taskId": &*task,
                            "requestId": id,
                            "expect": expect,
                            "reason": reason,
                            "next": {"method": "task.verifyOutcome", "params": {"taskId": &*task}},
                        })),
                    ),
                    Effect::Uncertain(expect),
                )
            }
        }
    }

    /// Stores an execution's outcome and applies its effect on the task, atomically, then wakes
    /// every copy waiting for it.
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &self,
        key: &RequestKey,
        slot: usize,
        id: &str,
        method: Method,
        task_id: Option<TaskId>,
        outcome: Outcome,
        effect: Effect,
        now: i64,
    ) -> Arc<Outcome> {
        let outcome = Arc::new(outcome);
        let (waiters, idle) = self.complete_locked(
            &mut self.lock(),
            key,
            slot,
            id,
            method,
            task_id,
            &outcome,
            effect,
            now,
        );
        if let Some(waiters) = waiters {
            waiters.send_replace(Some(outcome.clone()));
        }
        self.ring_idle(idle);
        outcome
    }

    /// Wakes whoever waits for the host to have no execution running.
    fn ring_idle(&self, idle: bool) {
        if idle && self.inner.idle_watchers.load(Ordering::SeqCst) > 0 {
            self.inner.idle.notify_waiters();
        }
    }

    /// The part of [`Host::complete`] done under the host's lock. Returns the waiters of
    /// copies that joined, to wake once the lock is let go, and whether nothing runs now.
    #[allow(clippy::too_many_arguments)]
    fn complete_locked(
        &self,
        st: &mut State,
        key: &RequestKey,
        slot: usize,
        id: &str,
        method: Method,
        task_id: Option<TaskId>,
        outcome: &Arc<Outcome>,
        effect: Effect,
        now: i64,
    ) -> (Option<crate::book::ReplyWaiters>, bool) {
        let result = outcome.code.map_or("ok", ErrorCode::as_str);
        match effect {
            Effect::TaskStarted(task) => {
                let summary = task.summary_json();
                st.tasks.insert(task);
                st.events.publish("task.updated", now, || summary);
            }
            Effect::Uncertain(expect) => {
                // The pending outcome records the params the receipt holds (in canonical form),
                // so executions need not carry a copy of them for this rare case.
                let params = st
                    .book
                    .get(key)
                    .and_then(|r| serde_json::from_str::<Value>(&r.request).ok())
                    .map(|mut request| request["params"].take())
                    .unwrap_or_default();
                if let Some(task) = task_id.as_deref().and_then(|t| st.tasks.get_mut(t)) {
                    let pending = PendingOutcome {
                        request_id: id.to_owned(),
                        method,
                        params,
                        expect,
                        since: now,
                        last_verify: None,
                    };
                    let pending_json = pending.to_json();
                    task.add_pending(pending);
                    task.record(key, method, now, result);
                    let summary = task.summary_json();
                    let tid = task.id.clone();
                    st.events.publish(
                        "pending.created",
                        now,
                        || json!({"taskId": &*tid, "pendingOutcome": pending_json}),
                    );
                    st.events.publish("task.updated", now, || summary);
                }
            }
            Effect::None => {
                if let Some(task) = task_id.as_deref().and_then(|t| st.tasks.get_mut(t)) {
                    task.record(key, method, now, result);
                }
            }
        }
        let waiters = st
            .book
            .finish_at(slot, key, outcome.clone(), now)
            .ok()
            .flatten();
        publish_completed(st, id, method, outcome, now);
        (waiters, st.book.running() == 0)
    }

    /// Reads: executed every time, never stored.
    fn read(&self, id: &str, cmd: Command) -> Handled {
        let run_id = self.run_id();
        match cmd {
            Command::HostHello => ready_ok(id, run_id, self.hello()),
            Command::ToolsList => ready_ok(
                id,
                run_id,
                json!({"tools": Method::BRIDGE.iter().map(|m| json!({
                    "method": m.as_str(),
                    "kind": if m.is_mutating() { "mutating" } else { "read" },
                    "description": m.description(),
                })).collect::<Vec<_>>()}),
            ),
            Command::RunStatus(p) => {
                let mut v = self.run_status();
                v["current"] = json!(p.run_id.as_deref().is_none_or(|r| r == run_id));
                ready_ok(id, run_id, v)
            }
            Command::ReceiptStatus(p) => ready_ok(id, run_id, self.receipt_status(&p.request_id)),
            Command::TaskStatus(p) => match self.lock().tasks.get(&p.task_id) {
                Some(t) => ready_ok(id, run_id, t.status_json(run_id)),
                None => reject(Some(id), run_id, self.task_not_found(&p.task_id)),
            },
            Command::TaskResume(p) => {
                if p.run_id != run_id {
                    return reject(
                        Some(id),
                        run_id,
                        ErrorBody::new(
                            ErrorCode::RunNotCurrent,
                            format!(
                                "run {} is not this host's run ({run_id}): the host restarted and its receipts and tasks are gone. Check what your earlier requests did outside Polaris before starting a new task",
                                p.run_id
                            ),
                        )
                        .with_details(json!({"currentRunId": run_id, "runId": p.run_id})),
                    );
                }
                match self.lock().tasks.get(&p.task_id) {
                    Some(t) => {
                        let mut v =
                            json!({"taskId": &*t.id, "runId": run_id, "state": t.state().as_str()});
                        if let Some(po) = t.pending_outcome() {
                            v["pendingOutcome"] = po.to_json();
                        }
                        ready_ok(id, run_id, v)
                    }
                    None => reject(Some(id), run_id, self.task_not_found(&p.task_id)),
                }
            }
            Command::PageRead(p) => {
                let Some(task) = self.lock().tasks.shared_id(&p.task_id) else {
                    return reject(Some(id), run_id, self.task_not_found(&p.task_id));
                };
                let host = self.clone();
                let id = id.to_owned();
                let deadline = Instant::now() + self.inner.config.action_timeout;
                let read = self
                    .inner
                    .executor
                    .observe(task.clone(), p.target.clone(), deadline);
                Handled::Later(Box::pin(async move {
                    let run_id = host.run_id();
                    let outcome = match read.await {
                        ReadOutcome::Value(value) => Outcome::ok(&json!({"target": p.target, "value": value})),
                        ReadOutcome::TimedOut => Outcome::err(&ErrorBody::new(
                            ErrorCode::ReadTimeout,
                            format!("reading {} on task {task} did not finish within {} ms; nothing changed — read again later", p.target, host.inner.config.action_timeout.as_millis()),
                        ).with_details(json!({"taskId": &*task, "target": p.target}))),
                        ReadOutcome::Failed(reason) | ReadOutcome::Absent(reason) => Outcome::err(&ErrorBody::new(
                            ErrorCode::ActionFailed,
                            format!("reading {} on task {task} failed: {reason}; nothing changed", p.target),
                        )),
                    };
                    outcome.reply_line(Some(&id), run_id, ReceiptKind::None)
                }))
            }
            Command::TaskVerifyOutcome(p) => {
                let id = id.to_owned();
                match self.verify(&p.task_id) {
                    Ok(fut) => {
                        let host = self.clone();
                        Handled::Later(Box::pin(async move {
                            let outcome = fut.await;
                            outcome.reply_line(Some(&id), host.run_id(), ReceiptKind::None)
                        }))
                    }
                    Err(error) => reject(Some(&id), run_id, error),
                }
            }
            other => unreachable!("{} is not a read", other.method()),
        }
    }

    /// `task.verifyOutcome`: evaluates only the stored expectation of the task's pending
    /// action, with a read-only observation. A verification already running for the task is
    /// shared, not repeated. The verification runs detached, so a caller that goes away does
    /// not leave it half done.
    pub fn verify(&self, task_id: &str) -> Result<BoxFuture<'static, Arc<Outcome>>, ErrorBody> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(task) = st.tasks.get(task_id) else {
            return Err(self.task_not_found(task_id));
        };
        let tid = task.id.clone();
        if let Some(rx) = st.verifying.get(&tid) {
            let rx = rx.clone();
            return Ok(Box::pin(async move {
                wait_outcome(rx).await.unwrap_or_else(|| {
                    Arc::new(Outcome::err(&ErrorBody::new(
                        ErrorCode::Internal,
                        "the verification ended without a result; call task.verifyOutcome again",
                    )))
                })
            }));
        }
        let Some(pending) = task.pending_outcome().cloned() else {
            let result =
                json!({"taskId": &*tid, "outcome": "none", "state": task.state().as_str()});
            return Ok(Box::pin(std::future::ready(Arc::new(Outcome::ok(&result)))));
        };
        let (tx, rx) = watch::channel(None);
        st.verifying.insert(tid.clone(), rx.clone());
        drop(guard);

        let host = self.clone();
        let deadline = Instant::now() + self.inner.config.action_timeout;
        let read =
            self.inner
                .executor
                .observe(tid.clone(), pending.expect.target.clone(), deadline);
        tokio::spawn(async move {
            let read = AssertUnwindSafe(read)
                .catch_unwind()
                .await
                .unwrap_or_else(|_| ReadOutcome::Failed("the read panicked".into()));
            let (outcome, observation) = match read {
                ReadOutcome::Value(value) => {
                    let obs = Observation {
                        target: pending.expect.target.clone(),
                        value,
                    };
                    if pending.expect.holds(&obs.value) {
                        (VerifyOutcome::Confirmed, Some(obs))
                    } else {
                        (VerifyOutcome::NotObserved, Some(obs))
                    }
                }
                // The page was read and the expected element is not on it: the expectation
                // does not hold (a submit that ended on an error page, say).
                ReadOutcome::Absent(_) => (VerifyOutcome::NotObserved, None),
                ReadOutcome::TimedOut | ReadOutcome::Failed(_) => (VerifyOutcome::Unknown, None),
            };
            let now = now_millis();
            let mut guard = host.lock();
            let st = &mut *guard;
            st.verifying.remove(&tid);
            let task = st.tasks.get_mut(&tid).expect("tasks are never removed");
            task.apply_verification(VerifyRecord {
                at: now,
                outcome,
                observation: observation.clone(),
            });
            let mut result = json!({"taskId": &*tid, "outcome": outcome.as_str(), "state": task.state().as_str()});
            if let Some(o) = &observation {
                result["observation"] = json!(o);
            }
            match outcome {
                VerifyOutcome::Confirmed => {
                    result["resolved"] = pending.to_json();
                    if let Some(next) = task.pending_outcome() {
                        result["pendingOutcome"] = next.to_json();
                    }
                }
                _ => {
                    if let Some(p) = task.pending_outcome() {
                        result["pendingOutcome"] = p.to_json();
                    }
                }
            }
            let summary = task.summary_json();
            if outcome == VerifyOutcome::Confirmed {
                let rid = pending.request_id.clone();
                st.events.publish(
                    "pending.resolved",
                    now,
                    || json!({"taskId": &*tid, "requestId": rid, "outcome": "confirmed"}),
                );
            }
            st.events.publish("task.updated", now, || summary);
            drop(guard);
            tx.send_replace(Some(Arc::new(Outcome::ok(&result))));
        });
        Ok(Box::pin(async move {
            wait_outcome(rx).await.unwrap_or_else(|| {
                Arc::new(Outcome::err(&ErrorBody::new(
                    ErrorCode::Internal,
                    "the verification ended without a result; call task.verifyOutcome again",
                )))
            })
        }))
    }

    fn task_not_found(&self, task_id: &str) -> ErrorBody {
        ErrorBody::new(
            ErrorCode::TaskNotFound,
            format!(
                "no task {task_id} in this run ({}); if you kept its runId, task.resume tells whether the host restarted",
                self.run_id()
            ),
        )
        .with_details(json!({"taskId": task_id, "runId": self.run_id()}))
    }

    /// The `host.hello` result.
    pub fn hello(&self) -> Value {
        json!({
            "name": "polaris",
            "version": env!("CARGO_PKG_VERSION"),
            "protocol": PROTOCOL_VERSION,
            "runId": self.run_id(),
            "startedAt": format_millis(self.started_at()),
            "capacity": self.inner.config.capacity,
        })
    }

    /// The `run.status` result (without `current`).
    pub fn run_status(&self) -> Value {
        let st = self.lock();
        json!({
            "runId": self.run_id(),
            "startedAt": format_millis(self.started_at()),
            "receipts": receipts_json(&st.book),
            "tasks": st.tasks.counts(),
            "executor": {"kind": self.inner.executor.kind(), "mutations": self.inner.executor.mutations()},
        })
    }

    /// The `receipt.status` result for a request ID.
    pub fn receipt_status(&self, request_id: &str) -> Value {
        let key = RequestKey::new(request_id);
        let st = self.lock();
        if let Some(r) = st.book.get(&key) {
            let mut v = json!({
                "requestId": request_id,
                "state": if r.is_running() { "running" } else { "completed" },
                "method": r.method.as_str(),
                "firstSeenAt": format_millis(r.first_seen),
                "joins": r.joins,
                "replays": r.replays,
            });
            if let Some(t) = &r.task_id {
                v["taskId"] = json!(&**t);
            }
            if let Some(o) = r.outcome() {
                v["completedAt"] = json!(format_millis(r.completed_at));
                v["ok"] = json!(o.is_ok());
                v["reply"] = o.to_value();
            }
            return v;
        }
        if let Some((_, batch)) = st.book.tombstone(&key) {
            return cleared_json(request_id, batch);
        }
        json!({"requestId": request_id, "state": "unknown"})
    }
}

/// What a cleared ID's status reads as, on either socket.
pub(crate) fn cleared_json(request_id: &str, batch: &ClearBatch) -> Value {
    json!({
        "requestId": request_id,
        "state": "cleared",
        "clearedAt": format_millis(batch.at),
        "reason": &*batch.reason,
    })
}

/// `receipts` of `run.status` and `snapshot`.
pub(crate) fn receipts_json(book: &Book) -> Value {
    json!({
        "used": book.used(),
        "capacity": book.capacity(),
        "running": book.running(),
        "tombstones": book.tombstones(),
        "tombstoneCapacity": book.tombstone_capacity(),
    })
}

fn publish_completed(st: &mut State, id: &str, method: Method, outcome: &Outcome, now: i64) {
    let code = outcome.code.map(ErrorCode::as_str);
    st.events
        .publish_receipt("receipt.completed", now, || ReceiptFacts::Completed {
            request_id: id.into(),
            method: method.as_str(),
            code,
        });
}

fn cleared_error(id: &str, _t: Tombstone, batch: &ClearBatch, same: bool) -> ErrorBody {
    let (delivery, what) = if same {
        (Delivery::Cleared, "its content ran earlier in this run")
    } else {
        (Delivery::NotExecuted, "this other content was not executed")
    };
    ErrorBody::new(
        ErrorCode::ReceiptCleared,
        format!(
            "request id {id} was cleared by an operator at {} (reason: {}); {what} and the id will not run again in this run. Read the task's state (task.status) before sending new work under a fresh id",
            format_millis(batch.at),
            batch.reason
        ),
    )
    .with_delivery(delivery)
    .with_details(json!({
        "requestId": id,
        "clearedAt": format_millis(batch.at),
        "reason": &*batch.reason,
        "sameContent": same,
    }))
}

fn admission_error(task: &Task, method: Method, code: ErrorCode) -> ErrorBody {
    let tid = &*task.id;
    match code {
        ErrorCode::TaskBlocked => {
            let pending = task.pending_outcome().expect("a blocked task has a pending outcome");
            ErrorBody::new(
                code,
                format!(
                    "task {tid} is blocked: the outcome of {} (request {}) is uncertain, so {method} was not sent. Call task.verifyOutcome for task {tid}; once it is confirmed, send this request again under the same id",
                    pending.method, pending.request_id
                ),
            )
            .with_details(json!({"taskId": tid, "pendingOutcome": pending.to_json()}))
        }
        _ => ErrorBody::new(
            code,
            format!(
                "task {tid} is {}; {method} was not sent. Start a new task (task.start) for new work; task.status shows what this one did",
                task.state().as_str()
            ),
        )
        .with_details(json!({"taskId": tid, "state": task.state().as_str()})),
    }
}

fn internal_error(id: &str, method: Method, task: Option<&str>, what: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!(
            "the execution of {method} (request {id}) failed inside the host ({what}); its effect is uncertain. Do not resend it: read receipt.status for {id}{}",
            task.map(|t| format!(" and call task.verifyOutcome for task {t}")).unwrap_or_default()
        ),
    )
    .with_details(json!({"requestId": id, "taskId": task}))
}

// ---------------------------------------------------------------------------------------------
// Deliberate clearing: the clearability rule and the two phases, each one critical section.
// ---------------------------------------------------------------------------------------------

/// How long a prepared clear may wait for its commit.
pub const CLEAR_TOKEN_TTL_MS: i64 = 5 * 60 * 1000;
/// Prepared clears kept at once; preparing beyond this forgets the one that expires first, so
/// input cannot grow the host's memory without bound.
pub const MAX_PREPARED_CLEARS: usize = 64;

/// Why a receipt cannot be cleared (the `reason` of a refusal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClearRefusal {
    /// Its execution is still running.
    Running,
    /// Its reply is uncertain and its pending outcome is unresolved on a task that is not
    /// stopped: clearing it would hide the one thing an operator must look at.
    UnverifiedOutcome,
    /// No receipt or tombstone has this ID in this run.
    Unknown,
    /// It is already a tombstone.
    AlreadyCleared,
}

impl ClearRefusal {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ClearRefusal::Running => "running",
            ClearRefusal::UnverifiedOutcome => "unverified_outcome",
            ClearRefusal::Unknown => "unknown",
            ClearRefusal::AlreadyCleared => "already_cleared",
        }
    }
}

/// The clearability rule for a live receipt: `None` when it may be cleared now.
pub(crate) fn clear_refusal(
    tasks: &Tasks,
    key: &RequestKey,
    receipt: &Receipt,
) -> Option<ClearRefusal> {
    let outcome = match &receipt.reply {
        ReplySlot::Running(_) => return Some(ClearRefusal::Running),
        ReplySlot::Done(o) => o,
    };
    let uncertain = outcome
        .code
        .is_some_and(|c| c.default_delivery() == Delivery::Uncertain);
    if !uncertain {
        return None;
    }
    let task = receipt.task_id.as_deref().and_then(|t| tasks.get(t))?;
    let unresolved = task
        .pending
        .iter()
        .any(|p| RequestKey::new(&p.request_id) == *key);
    (unresolved && task.state() != crate::tasks::TaskState::Stopped)
        .then_some(ClearRefusal::UnverifiedOutcome)
}

/// What a prepare remembers of each listed receipt, to tell at commit time whether it changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReceiptVersion {
    joins: u32,
    replays: u32,
    completed_at: i64,
}

impl ReceiptVersion {
    fn of(r: &Receipt) -> ReceiptVersion {
        ReceiptVersion {
            joins: r.joins,
            replays: r.replays,
            completed_at: r.completed_at,
        }
    }
}

/// A prepared clear waiting for its commit.
pub(crate) struct PreparedClear {
    expires_at: i64,
    items: Vec<(RequestKey, ReceiptVersion)>,
}

/// Which receipts a prepare is about.
pub enum ClearTargets<'a> {
    /// These request IDs (duplicates count once).
    Ids(&'a [String]),
    /// Every receipt the predicate accepts: `(request ID, receipt, refusal if not clearable)`.
    Matching(&'a dyn Fn(&RequestKey, &Receipt, Option<ClearRefusal>) -> bool),
}

/// A receipt a prepare would clear, with its current result.
#[derive(Clone, Debug)]
pub struct ClearCandidate {
    /// The request ID.
    pub request_id: String,
    /// Its method.
    pub method: Method,
    /// Its task, when it names one.
    pub task_id: Option<TaskId>,
    /// Its stored reply.
    pub outcome: Arc<Outcome>,
    /// Copies that joined it.
    pub joins: u32,
    /// Copies answered from it.
    pub replays: u32,
    /// When it completed (epoch ms).
    pub completed_at: i64,
}

/// The result of `receipts.clearPrepare`.
#[derive(Debug)]
pub struct PreparedClearView {
    /// The token the commit must present.
    pub token: String,
    /// When the token expires (epoch ms).
    pub expires_at: i64,
    /// What the commit would clear, with current results.
    pub clearable: Vec<ClearCandidate>,
    /// What it refuses, and why.
    pub refused: Vec<(String, ClearRefusal)>,
}

/// One receipt a commit cleared, as the audit log records it.
#[derive(Clone, Debug)]
pub struct ClearedReceipt {
    /// The request ID.
    pub request_id: String,
    /// Its method.
    pub method: Method,
    /// Its task, when it names one.
    pub task_id: Option<TaskId>,
    /// Its error code when it failed; `None` when it succeeded.
    pub code: Option<ErrorCode>,
}

/// The result of a committed clear.
#[derive(Debug)]
pub struct CommittedClear {
    /// When it applied (epoch ms).
    pub at: i64,
    /// What became tombstones.
    pub cleared: Vec<ClearedReceipt>,
    /// Tombstones held after the commit.
    pub tombstones: usize,
    /// `receipts` as `run.status` shows them, after the commit.
    pub receipts: Value,
}

fn stale(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ClearTokenStale, message)
}

impl Host {
    /// `receipts.clearPrepare`: lists what would be cleared (with current results) and what is
    /// refused, and remembers the listed receipts' versions under a fresh token.
    pub fn clear_prepare(&self, targets: ClearTargets<'_>) -> PreparedClearView {
        self.clear_prepare_at(targets, now_millis())
    }

    fn clear_prepare_at(&self, targets: ClearTargets<'_>, now: i64) -> PreparedClearView {
        let mut guard = self.lock();
        let st = &mut *guard;
        let mut clearable = Vec::new();
        let mut refused = Vec::new();
        let mut items = Vec::new();
        let mut take = |key: &RequestKey, r: &Receipt| {
            if let ReplySlot::Done(outcome) = &r.reply {
                items.push((key.clone(), ReceiptVersion::of(r)));
                clearable.push(ClearCandidate {
                    request_id: key.to_string(),
                    method: r.method,
                    task_id: r.task_id.clone(),
                    outcome: outcome.clone(),
                    joins: r.joins,
                    replays: r.replays,
                    completed_at: r.completed_at,
                });
            }
        };
        match targets {
            ClearTargets::Ids(ids) => {
                let mut seen = std::collections::HashSet::new();
                for id in ids {
                    let key = RequestKey::new(id);
                    if !seen.insert(key.clone()) {
                        continue;
                    }
                    if let Some(r) = st.book.get(&key) {
                        match clear_refusal(&st.tasks, &key, r) {
                            None => take(&key, r),
                            Some(why) => refused.push((id.clone(), why)),
                        }
                    } else if st.book.tombstone(&key).is_some() {
                        refused.push((id.clone(), ClearRefusal::AlreadyCleared));
                    } else {
                        refused.push((id.clone(), ClearRefusal::Unknown));
                    }
                }
            }
            ClearTargets::Matching(accept) => {
                for (key, r) in st.book.iter() {
                    let refusal = clear_refusal(&st.tasks, key, r);
                    if !accept(key, r, refusal) {
                        continue;
                    }
                    match refusal {
                        None => take(key, r),
                        Some(why) => refused.push((key.to_string(), why)),
                    }
                }
            }
        }
        let prepared = &mut st.prepared_clears;
        prepared.retain(|_, p| p.expires_at > now);
        while prepared.len() >= MAX_PREPARED_CLEARS {
            let first = prepared
                .iter()
                .min_by_key(|(_, p)| p.expires_at)
                .map(|(t, _)| t.clone());
            match first {
                Some(t) => prepared.remove(&t),
                None => break,
            };
        }
        let token = uuid::Uuid::new_v4().to_string();
        let expires_at = now + CLEAR_TOKEN_TTL_MS;
        prepared.insert(token.clone(), PreparedClear { expires_at, items });
        PreparedClearView {
            token,
            expires_at,
            clearable,
            refused,
        }
    }

    /// `receipts.clearCommit`: applies a prepared clear only if its token is fresh and nothing
    /// it listed changed since (no join, replay or state change); the listed receipts become
    /// tombstones all at once, or nothing changes. The token is used up either way.
    pub fn clear_commit(
        &self,
        token: &str,
        reason: &str,
        operator: &str,
    ) -> Result<CommittedClear, ErrorBody> {
        self.clear_commit_at(token, reason, operator, now_millis())
    }

    fn clear_commit_at(
        &self,
        token: &str,
        reason: &str,
        operator: &str,
        now: i64,
    ) -> Result<CommittedClear, ErrorBody> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(prepared) = st.prepared_clears.remove(token) else {
            return Err(stale(format!(
                "clear token {token} is unknown or already used; nothing was cleared. Run receipts.clearPrepare (polaris clear) again and commit its new token"
            )));
        };
        if prepared.expires_at <= now {
            return Err(stale(format!(
                "clear token {token} expired at {}; nothing was cleared. Prepare again to see the receipts' current results",
                format_millis(prepared.expires_at)
            )));
        }
        let mut cleared = Vec::with_capacity(prepared.items.len());
        for (key, version) in &prepared.items {
            let changed = match st.book.get(key) {
                Some(r) => {
                    ReceiptVersion::of(r) != *version || clear_refusal(&st.tasks, key, r).is_some()
                }
                None => true,
            };
            if changed {
                return Err(stale(format!(
                    "receipt {key} changed since the prepare (it was re-queried, joined or cleared); nothing was cleared. Prepare again to see its current result"
                ))
                .with_details(json!({"requestId": key.to_string()})));
            }
            let r = st.book.get(key).expect("checked above");
            cleared.push(ClearedReceipt {
                request_id: key.to_string(),
                method: r.method,
                task_id: r.task_id.clone(),
                code: r.outcome().and_then(|o| o.code),
            });
        }
        let keys: Vec<RequestKey> = prepared.items.into_iter().map(|(k, _)| k).collect();
        let reason: Arc<str> = reason.into();
        match st.book.clear(&keys, now, reason.clone()) {
            Ok(_) => {}
            Err(crate::book::ClearError::TombstonesFull { capacity, used }) => {
                return Err(ErrorBody::new(
                    ErrorCode::TombstoneCapacityFull,
                    format!(
                        "clearing {} receipts would exceed the tombstone capacity ({used} of {capacity} used); nothing was cleared. Clear fewer receipts, or restart the host with a larger --tombstone-capacity when duplicate protection for this run may be given up",
                        keys.len()
                    ),
                )
                .with_details(json!({"tombstoneCapacity": capacity, "tombstones": used, "requested": keys.len()})));
            }
        }
        let ids: Vec<&str> = cleared.iter().map(|c| c.request_id.as_str()).collect();
        st.events.publish("receipts.cleared", now, || {
            json!({"requestIds": ids, "count": ids.len(), "reason": &*reason, "operator": operator})
        });
        Ok(CommittedClear {
            at: now,
            tombstones: st.book.tombstones(),
            receipts: receipts_json(&st.book),
            cleared,
        })
    }
}

#[cfg(test)]
mod clear_tests {
    use super::*;

    async fn host_with_receipt() -> Host {
        let host = Host::new(
            HostConfig::default(),
            Arc::new(crate::executor::FixtureExecutor::new()),
        );
        let line = match host.handle("t1", "task.start", &json!({"title": "t"})) {
            Handled::Later(f) => f.await,
            Handled::Ready(line) => line,
        };
        let reply: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(reply["ok"], true, "{reply}");
        host
    }

    #[tokio::test]
    async fn a_clear_token_expires_after_five_minutes() {
        let host = host_with_receipt().await;
        let ids = ["t1".to_string()];
        let prepared = host.clear_prepare_at(ClearTargets::Ids(&ids), 1_000);
        assert_eq!(prepared.clearable.len(), 1);
        let err = host
            .clear_commit_at(&prepared.token, "late", "ops", 1_000 + CLEAR_TOKEN_TTL_MS)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ClearTokenStale);
        assert_eq!(host.lock().book.used(), 1);

        let prepared = host.clear_prepare_at(ClearTargets::Ids(&ids), 2_000);
        let done = host
            .clear_commit_at(
                &prepared.token,
                "in time",
                "ops",
                1_999 + CLEAR_TOKEN_TTL_MS,
            )
            .unwrap();
        assert_eq!(done.cleared.len(), 1);
        assert_eq!(host.lock().book.tombstones(), 1);
    }

    #[tokio::test]
    async fn prepared_clears_are_bounded() {
        let host = host_with_receipt().await;
        let ids = ["t1".to_string()];
        let tokens: Vec<String> = (0..MAX_PREPARED_CLEARS + 5)
            .map(|i| {
                host.clear_prepare_at(ClearTargets::Ids(&ids), 1_000 + i as i64)
                    .token
            })
            .collect();
        assert_eq!(host.lock().prepared_clears.len(), MAX_PREPARED_CLEARS);
        // The oldest were forgotten; the newest still commits.
        let err = host
            .clear_commit_at(&tokens[0], "x", "ops", 2_000)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ClearTokenStale);
        assert!(host
            .clear_commit_at(tokens.last().unwrap(), "x", "ops", 2_000)
            .is_ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::FixtureExecutor;
    use proptest::prelude::*;

    fn frame_strategy() -> impl Strategy<Value = Vec<u8>> {
        let method = prop_oneof![
            Just("task.start".to_owned()),
            Just("page.fill".to_owned()),
            Just("page.click".to_owned()),
            Just("page.press".to_owned()),
            Just("page.read".to_owned()),
            Just("task.finish".to_owned()),
            Just("task.stop".to_owned()),
            Just("task.status".to_owned()),
            Just("task.resume".to_owned()),
            Just("task.verifyOutcome".to_owned()),
            Just("run.status".to_owned()),
            Just("receipt.status".to_owned()),
            Just("host.hello".to_owned()),
            "[a-z.]{0,12}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[#a-zA-Z0-9 ._:-]{0,20}".prop_map(Value::String),
            Just(json!("#title")),
            Just(json!("#submit")),
            Just(json!("Enter")),
        ];
        let value = leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("taskId".to_owned()),
                        Just("target".to_owned()),
                        Just("value".to_owned()),
                        Just("title".to_owned()),
                        Just("expect".to_owned()),
                        Just("equals".to_owned()),
                        Just("contains".to_owned()),
                        Just("key".to_owned()),
                        Just("fixture".to_owned()),
                        Just("submitDelayMs".to_owned()),
                        Just("reason".to_owned()),
                        Just("requestId".to_owned()),
                        Just("runId".to_owned()),
                        "[a-z]{1,6}",
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        let id = prop_oneof![
            Just(json!("same-id")),
            "[A-Za-z0-9._:-]{1,10}".prop_map(Value::String),
            Just(json!(7)),
            Just(Value::Null),
        ];
        prop_oneof![
            8 => (id, method, value).prop_map(|(id, method, params)| {
                serde_json::to_vec(&json!({"id": id, "method": method, "params": params})).unwrap()
            }),
            1 => proptest::collection::vec(any::<u8>(), 0..64),
        ]
    }

    /// How every frame was handled before the direct path: envelope and params as a `Value`.
    fn handle_frame_general(host: &Host, frame: &[u8]) -> Handled {
        match parse_envelope(frame) {
            Ok(env) => host.handle(&env.id, &env.method, &env.params),
            Err(e) => reject(e.id.as_deref(), host.run_id(), e.error),
        }
    }

    /// Hides what differs between two runs given the same frames: run and task IDs (UUIDs) and
    /// wall-clock timestamps.
    fn mask_run_facts(text: &str) -> String {
        fn shaped(window: &[u8], shape: &[u8]) -> bool {
            window.len() == shape.len()
                && window.iter().zip(shape).all(|(b, s)| match s {
                    b'd' => b.is_ascii_digit(),
                    b'h' => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
                    _ => b == s,
                })
        }
        const TIME: &[u8] = b"dddd-dd-ddTdd:dd:dd.dddZ";
        const UUID: &[u8] = b"hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh";
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let rest = &bytes[i..];
            if shaped(&rest[..TIME.len().min(rest.len())], TIME) {
                out.extend_from_slice(b"<time>");
                i += TIME.len();
            } else if shaped(&rest[..UUID.len().min(rest.len())], UUID) {
                out.extend_from_slice(b"<uuid>");
                i += UUID.len();
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    /// Runs `frames` through a fresh host (after one task.start whose task the frames may
    /// name), with the direct path or the general one; returns every reply up to its `meta`,
    /// and the stored fingerprints, with run facts masked.
    fn run_frames(frames: &[Vec<u8>], direct: bool) -> (Vec<String>, Vec<(String, String)>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let host = Host::new(HostConfig::default(), Arc::new(FixtureExecutor::new()));
            let start = match host.handle("setup", "task.start", &json!({"title": "t"})) {
                Handled::Ready(line) => line,
                Handled::Later(fut) => fut.await,
            };
            let start: Value = serde_json::from_slice(&start).unwrap();
            let task = start["result"]["taskId"].as_str().unwrap().to_owned();
            let mut replies = Vec::new();
            for frame in frames {
                let frame = String::from_utf8_lossy(frame)
                    .replace(crate::protocol::test_frames::TASK, &task)
                    .into_bytes();
                let handled = if direct {
                    host.handle_frame(&frame)
                } else {
                    handle_frame_general(&host, &frame)
                };
                let line = match handled {
                    Handled::Ready(line) => line,
                    Handled::Later(fut) => fut.await,
                };
                let line = String::from_utf8(line).unwrap();
                let body = line.split(",\"meta\":").next().unwrap();
                replies.push(mask_run_facts(body));
            }
            let st = host.lock();
            let fingerprints = st
                .book
                .iter()
                .map(|(k, r)| (k.to_string(), mask_run_facts(&r.request)))
                .collect();
            (replies, fingerprints)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Frame for frame, the host answers the same whether the direct path or only the
        /// general one reads the frames, and keeps the same fingerprints.
        #[test]
        fn the_direct_path_changes_no_reply(
            frames in proptest::collection::vec(crate::protocol::test_frames::request_frame(), 1..16)
        ) {
            let (direct, direct_book) = run_frames(&frames, true);
            let (general, general_book) = run_frames(&frames, false);
            prop_assert_eq!(direct, general);
            prop_assert_eq!(direct_book, general_book);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// Whatever arrives, the host answers with one well-formed reply line and never panics.
        #[test]
        fn any_frame_gets_one_well_formed_reply(frames in proptest::collection::vec(frame_strategy(), 1..12)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
            rt.block_on(async {
                let host = Host::new(HostConfig::default(), Arc::new(FixtureExecutor::new()));
                for frame in frames {
                    let line = match host.handle_frame(&frame) {
                        Handled::Ready(line) => line,
                        Handled::Later(fut) => fut.await,
                    };
                    assert_eq!(line.last(), Some(&b'\n'));
                    assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
                    let reply: Value = serde_json::from_slice(&line).expect("a JSON reply");
                    assert!(reply["ok"].is_boolean());
                    if reply["ok"] == false {
                        assert_eq!(reply["error"]["automaticReplay"], false);
                        let code = reply["error"]["code"].as_str().unwrap();
                        assert!(code.parse::<ErrorCode>().is_ok(), "{code}");
                    }
                }
                let st = host.lock();
                assert!(st.book.used() <= st.book.capacity());
            });
        }
    }
}
