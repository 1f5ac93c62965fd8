//! The host's side of the journal (SPEC §11): rebuilding the book and the tasks at start, the
//! records the host appends, waiting for them to be durable, and what a failed journal does.
//!
//! The rule this serves: a receipt's begin is durable before the executor acts, and its
//! completion is durable before any client sees the reply. Records are appended under the
//! host's lock (so the file has the host's order) and awaited after it is let go.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch};

use super::execution::{Completion, Execution, Launched, Unjournaled};
use super::task_record::{pending_of, TaskRecordData};
use super::{Handled, Host, State};
use crate::book::{ClearBatch, RequestKey};
use crate::executor::Executor;
use crate::journal::{self, Completed, Journal, Record, Recovered, TaskEvent, Ticket};
use crate::protocol::results::JournalStatus;
use crate::protocol::{now_millis, ErrorBody, ErrorCode, Method, Outcome, ReceiptKind};
use crate::tasks::{Closed, Task, TaskId, TaskState};

use super::HostConfig;

/// The error code of a stored reply body, read back from its bytes.
pub(super) fn code_of(body: &str) -> Option<ErrorCode> {
    if body.starts_with("\"ok\":true") {
        return None;
    }
    let v: Value = serde_json::from_str(&format!("{{{body}}}")).ok()?;
    v["error"]["code"].as_str()?.parse().ok()
}

/// The stored outcome of a receipt whose execution the host stopped under: `INTERRUPTED`,
/// uncertain, never re-run.
pub(super) fn interrupted_outcome(
    id: &str,
    method: Method,
    task: Option<&str>,
    run_id: &str,
) -> Arc<Outcome> {
    let next = match task {
        Some(t) => json!({"method": "task.status", "params": {"taskId": t}}),
        None => json!({"method": "receipt.status", "params": {"requestId": id}}),
    };
    let read = match task {
        Some(t) => format!("read task.status for task {t}"),
        None => format!("read receipt.status for {id}"),
    };
    Outcome::err(
        &ErrorBody::new(
            ErrorCode::Interrupted,
            format!(
                "the host stopped while {method} (request {id}) was executing in run {run_id}; its effect is unknown and it will never run again. Do not resend it: {read}, check the page or the service it acted on, and have an operator acknowledge the outcome (polaris acknowledge {id} --reason …)"
            ),
        )
        .with_details(json!({
            "requestId": id,
            "method": method.as_str(),
            "taskId": task,
            "runId": run_id,
            "next": next,
        })),
    )
}

/// A recovered record the host cannot read back.
fn unreadable(journal: &Journal, what: String) -> journal::Error {
    journal::Error::Inconsistent {
        path: journal.path().to_owned(),
        offset: 0,
        what,
    }
}

/// The recovered tasks back in the task table; a task open when its run stopped is closed as
/// `interrupted` (nothing can act on its page any more).
fn restore_tasks(st: &mut State, tasks: &[journal::RecoveredTask]) {
    for t in tasks {
        let mut task = Task::new(t.task_id.clone(), t.title.to_string(), None, t.created_at);
        task.updated_at = t.updated_at;
        let detail: Value = serde_json::from_slice(&t.detail).unwrap_or_default();
        task.url = detail["url"].as_str().map(str::to_owned);
        if !t.pending.is_empty() {
            let pending: Vec<Value> = serde_json::from_slice(&t.pending).unwrap_or_default();
            task.pending = pending.iter().filter_map(pending_of).collect();
        }
        task.closed = Some(match TaskState::parse(&t.state) {
            Some(TaskState::Finished) => Closed::Finished,
            Some(TaskState::Stopped) => Closed::Stopped {
                reason: detail["stopReason"].as_str().unwrap_or("").to_owned(),
            },
            // Open when its run stopped: nothing can act on its page any more.
            _ => Closed::Interrupted {
                run_id: t.run_id.clone(),
            },
        });
        st.tasks.insert(task);
    }
}

/// The recovered receipts back in the book, in their order, each in its task's history;
/// returns those that were executing when the last run stopped, now `INTERRUPTED`, for the
/// journal.
fn restore_receipts(
    st: &mut State,
    journal: &Journal,
    receipts: Vec<journal::RecoveredReceipt>,
    run_id: &str,
    now: i64,
) -> Result<Vec<(RequestKey, Arc<Outcome>)>, journal::Error> {
    let mut interrupted: Vec<(RequestKey, Arc<Outcome>)> = Vec::new();
    st.book.reserve(receipts.len());
    for r in receipts {
        let method: Method = r.method.parse().map_err(|_| {
            unreadable(
                journal,
                format!(
                    "receipt {} names an unknown method {}",
                    r.request_id, r.method
                ),
            )
        })?;
        let (outcome, completed_at) = match r.completion {
            Some(c) => {
                let body = String::from_utf8(c.reply.into_vec()).map_err(|_| {
                    unreadable(
                        journal,
                        format!("the reply of receipt {} is not UTF-8", r.request_id),
                    )
                })?;
                let code = code_of(&body);
                (Outcome::of(code, &body), c.completed_at)
            }
            None => {
                let o = interrupted_outcome(
                    &r.request_id.to_string(),
                    method,
                    r.task_id.as_deref(),
                    &r.run_id,
                );
                interrupted.push((r.request_id.clone(), o.clone()));
                (o, now)
            }
        };
        // A task.start names its task only in its reply.
        let started = (method == Method::TaskStart && outcome.is_ok())
            .then(|| serde_json::from_str::<Value>(&format!("{{{}}}", &outcome.body)).ok())
            .flatten()
            .and_then(|v| v["result"]["taskId"].as_str().map(str::to_owned));
        let history_task = r.task_id.as_deref().or(started.as_deref());
        if let Some(task) = history_task.and_then(|t| st.tasks.get_mut(t)) {
            let result = outcome.code.map_or("ok", ErrorCode::as_str);
            task.record(&r.request_id, method, completed_at, result);
        }
        // A start's receipt belongs to the task it made (as in the run that made it).
        let receipt_task = r.task_id.or_else(|| started.as_deref().map(TaskId::from));
        if let Some(t) = receipt_task.as_deref() {
            st.tasks.receipt_created(t);
        }
        let run = (*r.run_id != *run_id).then_some(r.run_id);
        st.book.restore(
            r.request_id,
            r.request,
            method,
            receipt_task,
            r.first_seen,
            outcome,
            completed_at,
            run,
        );
    }
    Ok(interrupted)
}

/// The recovered clears and tombstones back in the book, the acknowledgements on their
/// receipts, and the list of `INTERRUPTED` receipts still waiting for one.
fn restore_clears(
    st: &mut State,
    clears: Vec<journal::ClearInfo>,
    tombstones: Vec<journal::RecoveredTombstone>,
    acknowledgements: &[journal::Acknowledgement],
) {
    let batches = clears
        .into_iter()
        .map(|c| ClearBatch {
            at: c.at,
            reason: c.reason,
        })
        .collect();
    st.book.restore_tombstones(
        batches,
        tombstones
            .into_iter()
            .map(|t| (t.request_id, t.digest, t.clear))
            .collect(),
    );
    for a in acknowledgements {
        if let Some(r) = st.book.get_mut(&a.request_id) {
            r.acknowledged = true;
        }
    }
    // Every INTERRUPTED receipt still in the book, whichever run stored it, until an
    // operator acknowledges it.
    st.interrupted = st
        .book
        .iter()
        .filter(|(_, r)| !r.acknowledged && r.result() == Some(Some(ErrorCode::Interrupted)))
        .map(|(k, _)| k.clone())
        .collect();
}

/// Journals the receipts that were executing when the last run stopped as completed
/// `INTERRUPTED`, and waits until that is durable.
fn journal_interrupted(
    journal: &Journal,
    interrupted: &[(RequestKey, Arc<Outcome>)],
    now: i64,
) -> Result<(), journal::Error> {
    if !interrupted.is_empty() {
        let records: Vec<Record<'_>> = interrupted
            .iter()
            .map(|(key, o)| {
                Record::ReceiptCompleted(Completed {
                    request_id: key,
                    reply: o.body.as_bytes(),
                    at: now,
                })
            })
            .collect();
        journal.append_batch(&records)?.wait()?;
        tracing::warn!(
            count = interrupted.len(),
            "receipts that were executing when the last run stopped are stored as INTERRUPTED; they will not run again"
        );
    }
    Ok(())
}

impl Host {
    /// A host writing through `journal`, rebuilt from what it `recovered`: completed receipts
    /// replay as before, tombstones refuse their IDs, capacity counts everything, receipts that
    /// were executing when the last run stopped become `INTERRUPTED` (journaled before this
    /// returns), and open tasks of earlier runs are `interrupted`.
    pub fn with_journal(
        config: HostConfig,
        executor: Arc<dyn Executor>,
        journal: Journal,
        recovered: Recovered,
    ) -> Result<Host, journal::Error> {
        let host = Host::build(config, executor, Some(journal.clone()));
        let run_id = host.run_id().to_owned();
        journal.append(&Record::RunStarted {
            run_id: &run_id,
            started_at: host.started_at(),
        })?;
        let now = now_millis();
        let interrupted = {
            let mut guard = host.lock();
            let st = &mut *guard;
            restore_tasks(st, &recovered.tasks);
            let interrupted = restore_receipts(st, &journal, recovered.receipts, &run_id, now)?;
            restore_clears(
                st,
                recovered.clears,
                recovered.tombstones,
                &recovered.acknowledgements,
            );
            interrupted
        };
        journal_interrupted(&journal, &interrupted, now)?;
        Ok(host)
    }

    /// The journal, unless the host runs with `--no-journal`.
    pub fn journal(&self) -> Option<&Journal> {
        self.inner.journal.as_ref()
    }

    /// Tells when the journal failed (the host must stop: it cannot keep its promise).
    pub fn journal_failure(&self) -> watch::Receiver<Option<String>> {
        self.inner.failure.subscribe()
    }

    /// A write or `fdatasync` of the journal failed: log one line naming the file, refuse new
    /// work and tell `polaris serve` to stop (exit non-zero). A restart recovers.
    pub(crate) fn journal_failed(&self, error: &journal::Error) {
        let path = self
            .journal()
            .map(|j| j.path().display().to_string())
            .unwrap_or_default();
        let first = self.inner.failure.send_if_modified(|f| {
            if f.is_some() {
                return false;
            }
            *f = Some(format!("journal {path} failed: {error}"));
            true
        });
        if first {
            tracing::error!(
                "journal {path} failed ({error}); nothing more can be made durable, so the host stops. Check the disk, then start the host again: recovery answers every receipt"
            );
            self.begin_shutdown();
        }
    }

    /// The answer to an operator whose change the journal could not keep: the host stops
    /// (its memory has the change; a restart recovers what the journal has).
    pub fn journal_error(&self, error: &journal::Error) -> ErrorBody {
        self.journal_failed(error);
        ErrorBody::new(
            ErrorCode::Internal,
            format!("the host's journal could not record this change ({error}), so the host is stopping; once it is back, read the receipts again (polaris receipts) before repeating it"),
        )
    }

    /// A ticket to await before answering from a stored reply whose completion record is
    /// `seq`, when it is not durable yet.
    pub(super) fn pending_durability(&self, seq: u64) -> Option<Ticket> {
        let j = self.journal()?;
        (seq > j.durable_seq()).then(|| j.ticket(seq))
    }

    /// `run.status.journal`.
    pub fn journal_status(&self) -> Option<JournalStatus> {
        let stats = self.journal()?.stats();
        Some(JournalStatus {
            bytes: stats.bytes,
            fsyncs_per_second: stats.fsyncs_per_second,
            last_fsync_ms: stats.last_fsync_ms(),
            path: stats.path.display().to_string(),
            records: stats.records,
        })
    }

    /// After a clear: rewrites the journal without cleared receipts when they make up more than
    /// half of it, on a blocking thread (the journal runs one compaction at a time).
    pub fn compact_if_due(&self) {
        let Some(j) = self.journal() else { return };
        if !j.stats().compaction_due() {
            return;
        }
        let j = j.clone();
        let host = self.clone();
        tokio::task::spawn_blocking(move || match j.compact() {
            Ok(c) => tracing::info!(?c, "journal compacted"),
            Err(e @ journal::Error::Failed(_)) => host.journal_failed(&e),
            Err(e) => tracing::warn!("journal compaction did not run: {e}"),
        });
    }
}

/// Executions of one pipelined batch waiting for their begins to be durable; dropped before
/// they run (the runtime going away), it drops their receipts' waiters so copies that joined
/// learn there will be no reply instead of waiting forever.
struct AwaitingBegin<'h> {
    host: &'h Host,
    batch: Vec<Execution<'static>>,
}

impl Drop for AwaitingBegin<'_> {
    fn drop(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let mut st = self.host.lock();
        for execution in &self.batch {
            st.book.abandon_waiters(&execution.key);
        }
    }
}

/// Where a journaled batch's replies go: all into one line buffer sent once (the frames'
/// answers are one `Handled::Later` and `Handled::Joined` for the rest), or each through a
/// channel of its own (every frame its own `Handled::Later`).
enum BatchReplies {
    Together(Vec<u8>, oneshot::Sender<Vec<u8>>),
    Each(Vec<Option<oneshot::Sender<Vec<u8>>>>),
}

impl BatchReplies {
    /// The reply of the batch's `i`th execution.
    fn send(&mut self, i: usize, line: Vec<u8>) {
        match self {
            BatchReplies::Together(lines, _) => lines.extend_from_slice(&line),
            BatchReplies::Each(_) => {
                if let Some(tx) = self.take_sender(i) {
                    let _ = tx.send(line);
                }
            }
        }
    }

    /// The channel of the `i`th execution's own reply (frame by frame only).
    fn take_sender(&mut self, i: usize) -> Option<oneshot::Sender<Vec<u8>>> {
        match self {
            BatchReplies::Together(..) => None,
            BatchReplies::Each(senders) => senders.get_mut(i).and_then(Option::take),
        }
    }

    /// Every reply is in: hands the batch's lines over.
    fn finish(self) {
        if let BatchReplies::Together(lines, tx) = self {
            let _ = tx.send(lines);
        }
    }
}

impl Host {
    /// Runs the journaled executions of a pipelined batch (admitted together, so their begins
    /// share a flush) on one task instead of one each: it waits once for the last begin to be
    /// durable, starts every execution, stores the ones answered at once under one taking of
    /// the lock (their completions share the next flush), waits once for the last completion,
    /// and answers each copy. `out[position]` receives each execution's answer.
    ///
    /// The batch's replies are one answer (the first frame's `Handled::Later`, resolving to
    /// every line; `Handled::Joined` for the others): one future, one channel and one wake of
    /// the connection's writer per batch instead of per frame. That answer waits for the
    /// slowest execution of the batch, so it is used only while the executor has answered
    /// every execution of every batch at once (the fixture's actions); after a batch in which
    /// one was not, each frame gets a reply of its own again (a slow page action then delays
    /// no other reply).
    ///
    /// The rule holds per receipt as on the single path: no executor acts before its begin is
    /// durable (every begin of the batch is, once the last is), and no copy sees a reply before
    /// its completion is durable. An execution the executor does not answer at once goes on on
    /// its own task, and its reply also waits for its completion.
    pub(super) fn run_begun_batch(
        &self,
        executions: Vec<(usize, Execution<'_>)>,
        out: &mut [Handled],
    ) {
        let together = self.inner.batches_together.load(Ordering::Relaxed);
        let mut last: Option<Ticket> = None;
        let mut batch = Vec::with_capacity(executions.len());
        let mut ids = Vec::new();
        let mut senders = Vec::new();
        let first = executions.first().map_or(0, |(position, _)| *position);
        for (position, execution) in executions {
            let Execution {
                request_id,
                key,
                slot,
                command,
                task_id,
                admitted_at,
                begun,
                claim,
                turn_now,
            } = execution;
            if let Some(t) = begun {
                if last.as_ref().is_none_or(|l| t.seq() > l.seq()) {
                    last = Some(t);
                }
            }
            let id = request_id.into_owned();
            if together {
                out[position] = Handled::Joined(first);
                ids.push(id.clone());
            } else {
                let (tx, rx) = oneshot::channel();
                let host = self.clone();
                let fallback = id.clone();
                out[position] = Handled::Later(Box::pin(async move {
                    match rx.await {
                        Ok(line) => line,
                        Err(_) => host.vanished(&fallback),
                    }
                }));
                senders.push(Some(tx));
            }
            batch.push(Execution {
                request_id: Cow::Owned(id),
                key,
                slot,
                command: command.owned(),
                task_id,
                admitted_at,
                begun: None,
                claim,
                turn_now,
            });
        }
        let replies = if together {
            let (tx, rx) = oneshot::channel();
            let host = self.clone();
            out[first] = Handled::Later(Box::pin(async move {
                match rx.await {
                    Ok(lines) => lines,
                    Err(_) => ids.iter().flat_map(|id| host.vanished(id)).collect(),
                }
            }));
            BatchReplies::Together(Vec::new(), tx)
        } else {
            BatchReplies::Each(senders)
        };
        let host = self.clone();
        tokio::spawn(async move {
            let mut waiting = AwaitingBegin { host: &host, batch };
            let begun = match last {
                Some(ticket) => ticket.await,
                None => Ok(()),
            };
            let batch = std::mem::take(&mut waiting.batch);
            host.answer_begun_batch(batch, begun, replies).await;
        });
    }

    /// [`Host::run_begun_batch`] once the batch's begins are durable (or could not be made so).
    async fn answer_begun_batch(
        &self,
        batch: Vec<Execution<'static>>,
        begun: Result<(), journal::Error>,
        mut replies: BatchReplies,
    ) {
        if let Err(e) = begun {
            self.answer_unbegun_batch(batch, &e, replies);
            return;
        }
        // The fills the executor does at once are done and stored in one critical section, in
        // order, each once its turn has come (SPEC §14: a task's requests one at a time), with
        // their completions appended together: a batch of fills on one task is one batch.
        // A batch's requests sit together in their task's queue (admitted under one taking of
        // the lock): once the first has its turn, the others' come as each is stored below.
        // Waiting for it here, rather than each on a task of its own, keeps the batch one
        // batch when an earlier batch of the same task is still being answered.
        // (Only the first request with a task: any other may be queued behind it.)
        if let Some(first) = batch.iter().find(|e| e.task_id.is_some()) {
            if let Some(tid) = first.task_id.as_deref() {
                self.turn_comes(tid, &first.key).await;
            }
        }
        let (mut stored, rest, mut idle) = self.store_filled_at_once(batch);
        let (inline, later) = self.launch_batch_rest(rest, &mut replies);
        if !inline.is_empty() {
            idle = self.store_batch_inline(inline, &mut stored);
        }
        stored.sort_by_key(|(i, _, _)| *i);
        let run_id = self.run_id();
        for (i, execution, done) in stored {
            let outcome = done.stored.wake_durable(self, &execution.request_id).await;
            replies.send(
                i,
                outcome.reply_line(Some(&execution.request_id), run_id, ReceiptKind::New),
            );
        }
        self.ring_idle(idle);
        send_when_answered(later, replies).await;
    }

    /// Answers a batch whose begins could not be made durable: nothing ran, so each reply is
    /// certain, whatever the journal can still keep.
    fn answer_unbegun_batch(
        &self,
        batch: Vec<Execution<'static>>,
        e: &journal::Error,
        mut replies: BatchReplies,
    ) {
        self.journal_failed(e);
        let mut idle = false;
        let mut stored = Vec::with_capacity(batch.len());
        {
            let mut st = self.lock();
            for execution in batch {
                let completion = Completion::not_begun(&execution, e);
                let done = self.complete_locked(&mut st, &execution, completion);
                idle = done.now_idle;
                stored.push((execution, done));
            }
        }
        let run_id = self.run_id();
        for (i, (execution, done)) in stored.into_iter().enumerate() {
            // Nothing ran: the answer is certain, whatever the journal can still keep.
            let line =
                done.wake()
                    .reply_line(Some(&execution.request_id), run_id, ReceiptKind::New);
            replies.send(i, line);
        }
        replies.finish();
        self.ring_idle(idle);
    }

    /// Under one taking of the lock, in order: stores each execution refused now its turn has
    /// come, and each fill the executor does at once, journaling their completions together.
    /// Returns them (with their place in the batch), the executions left to launch, and
    /// whether the host is idle after the last store.
    fn store_filled_at_once(&self, batch: Vec<Execution<'static>>) -> StoredAtOnce {
        let mut idle = false;
        let mut stored = Vec::with_capacity(batch.len());
        let mut rest = Vec::new();
        let mut st = self.lock();
        for (i, mut execution) in batch.into_iter().enumerate() {
            // A request is checked again once its turn has come and its begin is durable, as
            // on the single path (SPEC §14): a request ahead of it, from this batch or any
            // other connection, may have ended uncertain, and a `task.stop` that waits for
            // nothing may have closed the task while the begin was written.
            execution.check_turn(&st);
            if execution.turn_now {
                if let Some(refused) = self.refusal_at_turn(&st, &execution) {
                    let done = self.store_locked(&mut st, &execution, Completion::refused(refused));
                    idle = done.stored.now_idle;
                    stored.push((i, execution, done));
                    continue;
                }
            }
            match self.fill_at_once(&execution, None) {
                Some(completion) => {
                    let done = self.store_locked(&mut st, &execution, completion);
                    idle = done.stored.now_idle;
                    stored.push((i, execution, done));
                }
                None => rest.push((i, execution)),
            }
        }
        let mut done: Vec<_> = stored
            .iter_mut()
            .map(|(_, execution, done)| (&*execution, done))
            .collect();
        self.journal_completions(&mut st, &mut done);
        drop(done);
        drop(st);
        (stored, rest, idle)
    }

    /// Launches the batch's other executions: those the executor answered inline come back to
    /// be stored together, those it made wait come back as their replies' futures, and the
    /// rest are answered now.
    #[allow(clippy::type_complexity)]
    fn launch_batch_rest(
        &self,
        rest: Vec<(usize, Execution<'static>)>,
        replies: &mut BatchReplies,
    ) -> (
        Vec<(usize, Execution<'static>, Completion)>,
        Vec<(usize, BoxFuture<'static, Vec<u8>>)>,
    ) {
        let mut inline = Vec::with_capacity(rest.len());
        let mut later = Vec::new();
        for (i, execution) in rest {
            match self.launch(execution) {
                Launched::Inline(execution, completion) => inline.push((i, execution, completion)),
                Launched::Later(Handled::Later(reply)) => later.push((i, reply)),
                Launched::Later(Handled::Ready(line)) => replies.send(i, line),
                Launched::Later(Handled::Replay(replay)) => {
                    replies.send(i, replay.line(self.run_id()))
                }
                Launched::Later(Handled::Joined(_)) => {}
            }
        }
        if !later.is_empty() {
            // The executor made this batch wait: the next batches answer frame by frame.
            self.inner.batches_together.store(false, Ordering::Relaxed);
        }
        (inline, later)
    }

    /// Stores the executions the executor answered inline under one taking of the lock, after
    /// those already `stored`; returns whether the host is idle after the last.
    fn store_batch_inline(
        &self,
        inline: Vec<(usize, Execution<'static>, Completion)>,
        stored: &mut Vec<(usize, Execution<'static>, Unjournaled)>,
    ) -> bool {
        let mut idle = false;
        let mut st = self.lock();
        let first = stored.len();
        for (i, execution, completion) in inline {
            let done = self.store_locked(&mut st, &execution, completion);
            idle = done.stored.now_idle;
            stored.push((i, execution, done));
        }
        // The completions go to the journal as one append, in order: once the first is
        // durable all are, and the other waits return at once.
        let mut done: Vec<_> = stored[first..]
            .iter_mut()
            .map(|(_, execution, done)| (&*execution, done))
            .collect();
        self.journal_completions(&mut st, &mut done);
        idle
    }
}

/// What [`Host::store_filled_at_once`] stored (with each one's place in the batch), what is
/// left to launch, and whether the host is idle after the last store.
type StoredAtOnce = (
    Vec<(usize, Execution<'static>, Unjournaled)>,
    Vec<(usize, Execution<'static>)>,
    bool,
);

/// Sends the replies the executor made wait: frame by frame each goes as it comes; together
/// they join the others at the end, and the batch's lines are handed over.
async fn send_when_answered(
    later: Vec<(usize, BoxFuture<'static, Vec<u8>>)>,
    mut replies: BatchReplies,
) {
    let waited = later.into_iter().map(|(i, reply)| {
        let tx = replies.take_sender(i);
        async move {
            let line = reply.await;
            match tx {
                Some(tx) => drop(tx.send(line)),
                None => return Some(line),
            }
            None
        }
    });
    for line in futures::future::join_all(waited)
        .await
        .into_iter()
        .flatten()
    {
        replies.send(0, line);
    }
    replies.finish();
}

/// What [`Host::acknowledge`] recorded.
pub struct Acknowledgement {
    /// The reply's result.
    pub result: crate::protocol::introspection::OutcomeAcknowledged,
    /// The stored error code that was acknowledged.
    pub code: ErrorCode,
    /// The receipt's method.
    pub method: Method,
    /// Resolves once the acknowledgement is durable (`None` without a journal).
    pub durable: Option<Ticket>,
}

impl Host {
    /// `outcome.acknowledge`: a person records that a receipt's uncertain outcome
    /// (`OUTCOME_UNCERTAIN`, `INTERRUPTED`, or an uncertain `INTERNAL`) was settled outside
    /// Polaris. The receipt becomes clearable and its pending outcome leaves its task; nothing
    /// is executed. Refused (`BAD_REQUEST`, nothing changed) for an ID that is unknown,
    /// cleared, still running, or whose outcome is not uncertain.
    pub fn acknowledge(
        &self,
        request_id: &str,
        reason: &str,
        operator: &str,
    ) -> Result<Acknowledgement, ErrorBody> {
        let refuse = |why: String, state: &str| {
            ErrorBody::new(ErrorCode::BadRequest, why)
                .with_details(json!({"requestId": request_id, "state": state}))
        };
        let key = RequestKey::new(request_id);
        let now = now_millis();
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(r) = st.book.get_mut(&key) else {
            return Err(match st.book.tombstone(&key) {
                Some(_) => refuse(format!("request {request_id} was already cleared; there is nothing to acknowledge"), "cleared"),
                None => refuse(format!("no receipt has request id {request_id}; check the id (polaris receipts --state error lists the uncertain ones)"), "unknown"),
            });
        };
        let Some(outcome) = r.outcome() else {
            return Err(refuse(format!("request {request_id} is still executing; wait for its outcome (receipt.status) before acknowledging it"), "running"));
        };
        let code = match outcome.code {
            Some(c) if c.default_delivery() == crate::protocol::Delivery::Uncertain => c,
            _ => {
                return Err(refuse(format!("the outcome of request {request_id} is not uncertain ({}); only OUTCOME_UNCERTAIN or INTERRUPTED outcomes are acknowledged", outcome.code.map_or("ok", ErrorCode::as_str)), "completed"));
            }
        };
        r.acknowledged = true;
        st.interrupted.retain(|k| *k != key);
        let method = r.method;
        let task_id = r.task_id.clone();
        let mut task_record = None;
        if let Some(task) = task_id.as_deref().and_then(|t| st.tasks.get_mut(t)) {
            let before = task.pending.len();
            task.pending.retain(|p| p.request_id != request_id);
            if task.pending.len() != before {
                // Settled: the watch of its network ends (SPEC §16).
                self.inner.executor.evidence(&task.id, false);
                task.updated_at = now;
                task.record(&key, Method::TaskVerifyOutcome, now, "acknowledged");
                let summary = task.summary();
                if self.journal().is_some() {
                    task_record = Some(TaskRecordData::of(task, TaskEvent::Updated, now));
                }
                st.events
                    .publish("task.updated", now, || super::to_data(&summary));
            }
        }
        let durable = match self.journal() {
            None => None,
            Some(j) => {
                let ack = Record::OutcomeAcknowledged(journal::Acknowledged {
                    request_id: &key,
                    reason,
                    operator,
                    at: now,
                });
                let run_id = self.run_id();
                let appended = match &task_record {
                    Some(t) => j.append_batch([&ack, &t.record(run_id)]),
                    None => j.append(&ack),
                };
                match appended {
                    Ok(t) => Some(t),
                    Err(e) => {
                        drop(guard);
                        self.journal_failed(&e);
                        return Err(ErrorBody::new(
                            ErrorCode::Internal,
                            format!("the acknowledgement of {request_id} could not be journaled ({e}); the host is stopping. Acknowledge it again once the host is back"),
                        )
                        .with_delivery(crate::protocol::Delivery::NotExecuted));
                    }
                }
            }
        };
        Ok(Acknowledgement {
            result: crate::protocol::introspection::OutcomeAcknowledged {
                acknowledged_at: crate::protocol::format_millis(now),
                operator: operator.to_owned(),
                reason: reason.to_owned(),
                request_id: request_id.to_owned(),
                task_id: task_id.map(|t| t.to_string()),
            },
            code,
            method,
            durable,
        })
    }
}

impl Host {
    /// Appends the completion records (each with its task record, when it has one) of
    /// executions stored under this same taking of the lock as one append: one taking of the
    /// journal's lock and at most one wake of its flusher for the lot. The records are the ones
    /// each completion would have on its own, in the same order; they become durable together,
    /// and every reply waits for the one ticket. Nobody can read the stored outcomes before the
    /// lock is let go, so each receipt knows its completion's sequence number by then.
    pub(super) fn journal_completions(
        &self,
        st: &mut State,
        done: &mut [(&Execution<'_>, &mut Unjournaled)],
    ) {
        let Some(j) = self.journal() else { return };
        if done.is_empty() {
            return;
        }
        let run_id = self.run_id();
        let appended = {
            let mut records = Vec::with_capacity(done.len());
            for (execution, d) in done.iter() {
                records.push(Record::ReceiptCompleted(Completed {
                    request_id: &execution.key,
                    reply: d.stored.outcome().body.as_bytes(),
                    at: d.at,
                }));
                if let Some(t) = &d.task_record {
                    records.push(t.record(run_id));
                }
            }
            j.append_batch(&records)
        };
        match appended {
            Ok(ticket) => {
                for (execution, d) in done.iter_mut() {
                    st.book
                        .set_seq(execution.slot, &execution.key, ticket.seq());
                    d.stored.durable = Some(Ok(ticket.clone()));
                }
            }
            Err(e) => {
                for (_, d) in done.iter_mut() {
                    d.stored.durable = Some(Err(e.copy_of_append_error()));
                }
            }
        }
    }
}
