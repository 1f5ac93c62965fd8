//! The execution lifecycle: from a new receipt to its stored outcome.
//!
//! Admission hands over an [`Execution`] once its running receipt exists. [`Host::launch`] starts
//! the executor's work and polls it once in place: when the executor answers without waiting
//! the execution completes inline (no task spawned, nothing allocated for it; a fill the
//! executor can do at once skips even the future and the deadline); otherwise it is
//! spawned, owning everything it needs, detached from the connection that asked for it, so a
//! caller that disconnects cancels nothing. [`Host::interpret`] turns the executor's answer
//! (or a panic) into the outcome to store and its effect on the task, and [`Host::complete`]
//! stores both in one critical section, then wakes every copy that joined.

use std::borrow::Cow;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::failures::{internal_error, not_begun, not_durable};
pub(super) use super::fast_path::Work;
use super::task_record::TaskRecordData;
use super::to_data;
use super::{Handled, Host, State};
use crate::book::{ReplyWaiters, RequestKey};
use crate::events::ReceiptFacts;
use crate::executor::ActionOutcome;
use crate::journal::{self, TaskEvent, Ticket};
use crate::protocol::introspection::{DuplicateSendsEvent, PendingCreatedEvent};
use crate::protocol::results::{
    DialogSeen, FieldResult, ObservedResult, TaskStartResult, TaskState,
};
use crate::protocol::{
    now_millis, CloseCommand, Delivery, ErrorBody, ErrorCode, ExecutorCommand, Expect, Method,
    NetworkEvidence, NotSent, Outcome, PageAction, ReceiptKind, Target,
};
use crate::tasks::{Observation, PendingOutcome, Task, TaskId};

/// A mutation admitted under a new receipt, from the receipt's creation to its completion.
///
/// Admission creates it in the critical section that creates the receipt; the executor's work
/// is started from it, and completion reads it to store the outcome where the receipt is. It
/// borrows the request ID from the frame while the execution runs inline and owns a copy only
/// once it is spawned, so the fresh-request path allocates nothing for it.
///
/// `C` is the command's family: the [`Work`] the executor performs, or a
/// [`CloseCommand`] closing a task (which goes through an `Execution` only to be claimed in the
/// fleet ledger; without one, admission closes the task itself).
pub(super) struct Execution<'a, C = Work<'a>> {
    /// The request ID as the caller sent it: replies and events spell it this way.
    pub(super) request_id: Cow<'a, str>,
    /// The receipt's key in the book.
    pub(super) key: RequestKey,
    /// Where the receipt was created (a hint for storing its outcome).
    pub(super) slot: usize,
    /// The checked command: what the executor is asked to do, or the closing.
    pub(super) command: C,
    /// The admitted task the command acts on; `None` for `task.start`, whose task does not
    /// exist until its page opens.
    pub(super) task_id: Option<TaskId>,
    /// When the receipt was created (epoch ms). An execution answered inline completes within
    /// microseconds of it, so this reading stands for its completion too.
    pub(super) admitted_at: i64,
    /// The journal's ticket for the receipt's begin: the executor is not asked to act before
    /// it resolves (`None` without a journal).
    pub(super) begun: Option<Ticket>,
    /// The receipt must be claimed in the fleet ledger before the executor acts (`--ledger`).
    pub(super) claim: bool,
    /// No other request of its task was in flight when it was admitted (or the ones that
    /// were have been stored since): it may execute without waiting its turn (SPEC §14).
    pub(super) turn_now: bool,
}

impl<C> Execution<'_, C> {
    /// The same execution owning its request ID, its command made owned by `own`.
    fn owning<D>(self, own: impl FnOnce(C) -> D) -> Execution<'static, D> {
        Execution {
            request_id: Cow::Owned(self.request_id.into_owned()),
            key: self.key,
            slot: self.slot,
            command: own(self.command),
            task_id: self.task_id,
            admitted_at: self.admitted_at,
            begun: self.begun,
            claim: self.claim,
            turn_now: self.turn_now,
        }
    }
}

impl<C> Execution<'_, C> {
    /// Notes that its turn has come when it is now the first of its task's requests in flight
    /// (the ones before it were stored in this same critical section).
    pub(super) fn check_turn(&mut self, st: &State) {
        if !self.turn_now {
            self.turn_now = self
                .task_id
                .as_deref()
                .and_then(|t| st.tasks.get(t))
                .is_some_and(|t| t.is_turn(&self.key));
        }
    }
}

impl Execution<'_> {
    /// The same execution owning its request ID and command, to outlive the frame it came
    /// from.
    pub(super) fn into_owned(self) -> Execution<'static> {
        self.owning(Work::owned)
    }
}

impl Execution<'_, CloseCommand> {
    /// The same closing owning its request ID, to outlive the frame it came from.
    pub(super) fn into_owned(self) -> Execution<'static, CloseCommand> {
        self.owning(|close| close)
    }
}

impl<'a> Execution<'a, ()> {
    /// The execution of `command` under the receipt admission just created.
    pub(super) fn with<C>(self, command: C) -> Execution<'a, C> {
        Execution {
            request_id: self.request_id,
            key: self.key,
            slot: self.slot,
            command,
            task_id: self.task_id,
            admitted_at: self.admitted_at,
            begun: self.begun,
            claim: self.claim,
            turn_now: self.turn_now,
        }
    }
}

/// What the host reads of any command an execution carries: the method it came from.
pub(super) trait Commanded {
    /// The method the command came from.
    fn method(&self) -> Method;
}

impl Commanded for Work<'_> {
    fn method(&self) -> Method {
        Work::method(self)
    }
}

impl Commanded for CloseCommand {
    fn method(&self) -> Method {
        CloseCommand::method(self)
    }
}

/// A command family that takes a receipt ([`Work`], [`CloseCommand`]): what the
/// host needs of either, whatever it does.
pub(super) trait Mutation: Send + Sync + Sized + 'static {
    /// The method the command came from.
    fn method(&self) -> Method;

    /// Does the command's work once the fleet ledger holds this host's claim on its receipt,
    /// and stores the outcome locally: the stored outcome, and the task a `task.start` opened.
    fn settle_claimed<'h>(
        host: &'h Host,
        execution: &'h Execution<'static, Self>,
    ) -> impl Future<Output = (Stored, Option<TaskId>)> + Send + 'h;
}

impl Mutation for Work<'static> {
    fn method(&self) -> Method {
        Work::method(self)
    }

    async fn settle_claimed(
        host: &Host,
        execution: &Execution<'static>,
    ) -> (Stored, Option<TaskId>) {
        let (completion, opened) = host.execute(execution).await;
        (
            host.complete_locked(&mut host.lock(), execution, completion),
            opened,
        )
    }
}

impl Mutation for CloseCommand {
    fn method(&self) -> Method {
        CloseCommand::method(self)
    }

    async fn settle_claimed(
        host: &Host,
        execution: &Execution<'static, CloseCommand>,
    ) -> (Stored, Option<TaskId>) {
        // A `task.finish` admitted behind running actions closes the task only once they
        // ended; `close_claimed` checks the task again then.
        if let Some(refused) = host.await_turn(execution).await {
            return (host.store_refused_close(execution, refused), None);
        }
        let closed = host.close_claimed(execution);
        if let CloseCommand::Stop(_) = execution.command {
            host.settle_stopped_task(execution.task_id.as_deref());
        }
        (closed, None)
    }
}

/// How an execution ended: the outcome to store under its receipt, what it changes on the
/// task, and when.
pub(super) struct Completion {
    /// The reply every copy of the request gets from now on.
    outcome: Arc<Outcome>,
    /// Its effect on the task, applied in the same critical section as the store.
    effect: TaskEffect,
    /// When it completed (epoch ms).
    at: i64,
    /// A fill done at once that took effect, whose outcome is `FieldResult::filled` of its own
    /// target and value: the receipt need not keep a copy ([`crate::book::ReplySlot::Filled`]).
    fill_took_effect: bool,
}

impl Completion {
    /// The same completion, of a fill done at once that took effect when `took_effect` (the
    /// receipt then keeps no copy of its reply).
    pub(super) fn filled(self, took_effect: bool) -> Completion {
        Completion {
            fill_took_effect: took_effect,
            ..self
        }
    }
}

/// An outcome stored under the host's lock, with the copies to wake once the lock is let go.
pub(super) struct Stored {
    /// The stored outcome.
    outcome: Arc<Outcome>,
    /// The channel copies that joined are waiting on, when any joined.
    waiters: Option<ReplyWaiters>,
    /// Whether no execution ran any more once this one was stored.
    pub(super) now_idle: bool,
    /// The journal's ticket for the completion (with its task record): nobody is answered
    /// before it resolves. `Err` when the append itself failed.
    pub(super) durable: Option<Result<Ticket, journal::Error>>,
}

/// An outcome stored under the host's lock whose completion is not yet appended to the journal
/// ([`Host::journal_completions`] appends it, under the same taking of the lock).
pub(super) struct Unjournaled {
    /// The stored outcome, its ticket still to come.
    pub(super) stored: Stored,
    /// The task's record to append with the completion, when the completion changed the task.
    pub(super) task_record: Option<TaskRecordData>,
    /// When it completed (epoch ms).
    pub(super) at: i64,
}

impl Stored {
    /// An outcome stored with nothing to make durable locally (the ledger's turn comes next).
    pub(super) fn new(
        outcome: Arc<Outcome>,
        waiters: Option<ReplyWaiters>,
        now_idle: bool,
    ) -> Stored {
        Stored {
            outcome,
            waiters,
            now_idle,
            durable: None,
        }
    }

    /// The outcome stored.
    pub(super) fn outcome(&self) -> &Arc<Outcome> {
        &self.outcome
    }

    /// Wakes the copies that joined with `outcome` instead of the one stored (the fleet ledger
    /// answered otherwise) and hands it back.
    pub(super) fn wake_with(self, outcome: Arc<Outcome>) -> Arc<Outcome> {
        if let Some(waiters) = self.waiters {
            waiters.send_replace(Some(outcome.clone()));
        }
        outcome
    }

    /// Waits until the completion is durable, then wakes the copies that joined and hands back
    /// the outcome. A completion the journal could not keep is answered `INTERNAL`
    /// (uncertain), and the host stops.
    pub(super) async fn wake_durable(mut self, host: &Host, id: &str) -> Arc<Outcome> {
        let failed = match self.durable.take() {
            None => None,
            Some(Ok(ticket)) => ticket.await.err(),
            Some(Err(e)) => Some(e),
        };
        match failed {
            None => self.wake(),
            Some(e) => {
                host.journal_failed(&e);
                let outcome = not_durable(id, &e);
                if let Some(waiters) = self.waiters.take() {
                    waiters.send_replace(Some(outcome.clone()));
                }
                outcome
            }
        }
    }

    /// The outcome stored, and the channel of the copies that joined it, if any, for the
    /// caller to wake once the lock is let go (a batch stores many and wakes only those).
    /// Without the journal's ticket: only for an outcome stored with no journal to wait for.
    pub(super) fn into_parts(self) -> (Arc<Outcome>, Option<ReplyWaiters>) {
        (self.outcome, self.waiters)
    }

    /// Wakes the copies that joined (call it without the lock) and hands back the outcome.
    pub(super) fn wake(self) -> Arc<Outcome> {
        if let Some(waiters) = self.waiters {
            waiters.send_replace(Some(self.outcome.clone()));
        }
        self.outcome
    }
}

impl Completion {
    /// The completion of an execution whose begin the journal could not make durable: the
    /// executor was never asked to act.
    pub(super) fn not_begun(execution: &Execution<'_>, error: &journal::Error) -> Completion {
        Completion {
            outcome: not_begun(&execution.request_id, execution.command.method(), error),
            effect: TaskEffect::None,
            at: now_millis(),
            fill_took_effect: false,
        }
    }

    /// The completion of an execution refused when its turn came: its task no longer accepts
    /// it (an earlier action of the task ended uncertain, or the task was closed meanwhile).
    /// Nothing was dispatched.
    pub(super) fn refused(outcome: Arc<Outcome>) -> Completion {
        Completion {
            outcome,
            effect: TaskEffect::None,
            at: now_millis(),
            fill_took_effect: false,
        }
    }
}

/// What an execution changed besides its reply. The rare effects are boxed: a completion is
/// moved a few times on every fresh action, almost always with no effect to carry.
pub(super) enum TaskEffect {
    None,
    TaskStarted(Box<Task>),
    /// The outcome is uncertain: the task blocks on it, verified by this expectation (`None`
    /// for a local step sent without one, which nothing on the page can confirm), with what
    /// the page sent so far (SPEC §16).
    Uncertain(Box<(Option<Expect>, Option<NetworkEvidence>)>),
}

/// How starting an execution went.
// Inline is the common case, on every fresh action: boxing it would cost an allocation each
// time to save moving a few hundred bytes once.
#[allow(clippy::large_enum_variant)]
pub(super) enum Launched<'a> {
    /// Answered inline: the completion is ready to store (the caller stores it, so a batch can
    /// store several under one taking of the lock).
    Inline(Execution<'a>, Completion),
    /// Spawned: the reply comes when it finishes.
    Later(Handled),
}

/// Why [`Host::run_inline`] did not complete an execution: what [`Host::defer`] does with it.
pub(super) enum Deferred {
    /// Claimed in the fleet ledger first (`--ledger`).
    Claim,
    /// Started once its begin (this ticket) is durable in the journal: waited for off the
    /// caller's thread.
    AfterBegin(Ticket),
    /// Started, and not answered at once: it finishes on its own task.
    Started(Started),
    /// Admitted behind other requests of its task still in flight: it waits its turn on its
    /// own task, then executes if the task still accepts it (SPEC §14).
    AwaitTurn,
}

/// An execution the executor has started.
pub(super) enum Started {
    /// `task.start`: the new task's page opening.
    Open(NewTask, BoxFuture<'static, Result<(), String>>),
    /// A page action on a task.
    Act(TaskId, BoxFuture<'static, ActionOutcome>),
}

/// A task whose page is opening: what its record is made of once the page is open.
pub(super) struct NewTask {
    id: TaskId,
    title: String,
    url: Option<String>,
}

/// What the executor answered.
pub(super) enum Finished {
    Open(NewTask, Result<(), String>),
    Act(TaskId, ActionOutcome),
    /// A fill the executor did at once ([`crate::executor::Executor::fill_now`]), its reply
    /// already written.
    Filled(Arc<Outcome>),
}

impl Started {
    /// Polls the executor's work once; `Some` when it answered without waiting.
    pub(super) fn poll_once(&mut self, cx: &mut Context<'_>) -> Option<Finished> {
        match self {
            Started::Open(task, f) => match f.as_mut().poll(cx) {
                Poll::Ready(r) => {
                    // Polled no more once ready: the task's record takes its parts.
                    let task = NewTask {
                        id: task.id.clone(),
                        title: std::mem::take(&mut task.title),
                        url: task.url.take(),
                    };
                    Some(Finished::Open(task, r))
                }
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

/// Guards a spawned execution's future: dropped before the outcome is stored, it drops the
/// receipt's waiters so joined copies get an answer rather than wait forever.
struct Unfinished<'a> {
    host: &'a Host,
    key: Option<&'a RequestKey>,
    /// The task whose queue the execution is in, when it acts on one.
    task: Option<&'a str>,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            let mut st = self.host.lock();
            st.book.abandon_waiters(key);
            // It will never be stored: the requests behind it must not wait for it.
            if let Some(task) = self.task.and_then(|t| st.tasks.get_mut(t)) {
                task.leave(key);
            }
        }
    }
}

impl Host {
    /// Lets an execution the executor did not answer at once finish on its own task, and
    /// returns the reply that waits for it.
    pub(super) fn spawn(&self, execution: Execution<'static>, started: Started) -> Handled {
        // Whatever the first poll registered with the no-op waker is registered again when the
        // spawned task polls it with its own.
        let id = execution.request_id.to_string();
        let host = self.clone();
        let done = tokio::spawn(async move {
            // Should this future be dropped unfinished (the runtime going away), the copies
            // that joined learn there will be no reply instead of waiting forever.
            let mut unfinished = Unfinished {
                host: &host,
                key: Some(&execution.key),
                task: execution.task_id.as_deref(),
            };
            let (outcome, effect) = match AssertUnwindSafe(started.finish()).catch_unwind().await {
                Ok(finished) => host.interpret(&execution, finished),
                Err(panic) => panicked(&execution, panic),
            };
            let completion = Completion {
                outcome,
                effect,
                at: now_millis(),
                fill_took_effect: false,
            };
            // With a journal (an execution whose begin was made durable before it ran), no copy
            // is answered before the completion is durable too.
            let stored = host.complete_locked(&mut host.lock(), &execution, completion);
            let idle = stored.now_idle;
            let outcome = stored.wake_durable(&host, &execution.request_id).await;
            host.ring_idle(idle);
            unfinished.key = None;
            outcome
        });
        let host = self.clone();
        Handled::Later(Box::pin(async move {
            match done.await {
                Ok(outcome) => outcome.reply_line(Some(&id), host.run_id(), ReceiptKind::New),
                Err(_) => host.vanished(&id),
            }
        }))
    }

    /// Starts an execution on the executor and waits for its answer (a panic on the way is
    /// an `INTERNAL` outcome): the completion to store, and the task a `task.start` opened.
    async fn execute(&self, execution: &Execution<'_>) -> (Completion, Option<TaskId>) {
        if let Some(refused) = self.await_turn(execution).await {
            return (Completion::refused(refused), None);
        }
        let started = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.fill_now(execution, None)
                .ok_or_else(|| self.start(execution))
        }));
        let mut opened = None;
        let (outcome, effect) = match started {
            Ok(Ok(filled)) => self.interpret(execution, filled),
            Ok(Err(started)) => match AssertUnwindSafe(started.finish()).catch_unwind().await {
                Ok(finished) => {
                    if let Finished::Open(t, Ok(())) = &finished {
                        opened = Some(t.id.clone());
                    }
                    self.interpret(execution, finished)
                }
                Err(panic) => panicked(execution, panic),
            },
            Err(panic) => panicked(execution, panic),
        };
        let completion = Completion {
            outcome,
            effect,
            at: now_millis(),
            fill_took_effect: false,
        };
        (completion, opened)
    }

    /// Runs an execution once its begin is durable (when `begun` names it) and its turn has
    /// come, on its own task (detached, like [`Host::spawn`]). A begin the journal could not
    /// keep is answered `INTERNAL` with delivery `not_executed`: the executor was never asked
    /// to act.
    pub(super) fn spawn_after(
        &self,
        execution: Execution<'static>,
        begun: Option<Ticket>,
    ) -> Handled {
        let id = execution.request_id.to_string();
        let host = self.clone();
        let done = tokio::spawn(async move {
            let mut unfinished = Unfinished {
                host: &host,
                key: Some(&execution.key),
                task: execution.task_id.as_deref(),
            };
            let mut begin_failed = false;
            let begun = match begun {
                Some(ticket) => ticket.await,
                None => Ok(()),
            };
            let completion = match begun {
                Err(e) => {
                    host.journal_failed(&e);
                    begin_failed = true;
                    Completion::not_begun(&execution, &e)
                }
                Ok(()) => host.execute(&execution).await.0,
            };
            let stored = host.complete_locked(&mut host.lock(), &execution, completion);
            let idle = stored.now_idle;
            let outcome = if begin_failed {
                // Nothing ran: the answer is certain, whatever the journal can still keep.
                stored.wake()
            } else {
                stored.wake_durable(&host, &execution.request_id).await
            };
            host.ring_idle(idle);
            unfinished.key = None;
            outcome
        });
        let host = self.clone();
        Handled::Later(Box::pin(async move {
            match done.await {
                Ok(outcome) => outcome.reply_line(Some(&id), host.run_id(), ReceiptKind::New),
                Err(_) => host.vanished(&id),
            }
        }))
    }

    /// Runs an execution once its claim in the fleet ledger is this host's, on its own task
    /// (detached, like [`Host::spawn`]); its reply is stored in the ledger before any copy is
    /// answered. A claim the ledger settles otherwise (the ID was there already, the book is
    /// full, the ledger is unreachable) is answered without executing anything.
    pub(super) fn spawn_claimed<C: Mutation>(&self, execution: Execution<'static, C>) -> Handled {
        let id = execution.request_id.to_string();
        let host = self.clone();
        let done = tokio::spawn(async move {
            let mut unfinished = Unfinished {
                host: &host,
                key: Some(&execution.key),
                task: execution.task_id.as_deref(),
            };
            if let Err(line) = host.claim_in_ledger(&execution).await {
                unfinished.key = None;
                host.leave_queue(&execution);
                return line;
            }
            let (stored, opened) = C::settle_claimed(&host, &execution).await;
            let idle = stored.now_idle;
            let outcome = host.store_in_ledger(&execution, stored, opened).await;
            host.ring_idle(idle);
            unfinished.key = None;
            outcome.reply_line(Some(&execution.request_id), host.run_id(), ReceiptKind::New)
        });
        let host = self.clone();
        Handled::Later(Box::pin(async move {
            match done.await {
                Ok(line) => line,
                Err(_) => host.vanished(&id),
            }
        }))
    }

    /// Waits until the execution is the first of its task's requests in flight (SPEC §14), then
    /// checks the task again: `Some` is the refusal to store instead of executing, when the
    /// task no longer accepts it (an earlier action ended uncertain, or the task was closed
    /// while it waited for its turn, its journal begin or its ledger claim). A request that is
    /// not queued (`task.stop`, or one with no task) does not wait.
    pub(super) async fn await_turn<C: Commanded>(
        &self,
        execution: &Execution<'_, C>,
    ) -> Option<Arc<Outcome>> {
        let tid = execution.task_id.as_deref()?;
        self.turn_comes(tid, &execution.key).await;
        let st = self.lock();
        if !st.tasks.get(tid)?.is_turn(&execution.key) {
            // Not queued (a `task.stop`, which waits for nothing).
            return None;
        }
        self.refusal_at_turn(&st, execution)
    }

    /// The refusal to store instead of executing, for a request whose turn has just come
    /// after it waited: `Some` when its task no longer accepts it (an action ahead of it
    /// ended uncertain, or the task was closed meanwhile).
    pub(super) fn refusal_at_turn<C: Commanded>(
        &self,
        st: &State,
        execution: &Execution<'_, C>,
    ) -> Option<Arc<Outcome>> {
        let task = st.tasks.get(execution.task_id.as_deref()?)?;
        let method = execution.command.method();
        task.admit(method).err().map(|refusal| {
            Outcome::err(&super::failures::queued_refusal(
                task,
                method,
                refusal.code(),
                &execution.request_id,
            ))
        })
    }

    /// Waits until request `key` is the first of task `tid`'s requests in flight, or is not
    /// queued there at all.
    pub(super) async fn turn_comes(&self, tid: &str, key: &RequestKey) {
        loop {
            let turn = {
                let mut st = self.lock();
                let Some(task) = st.tasks.get_mut(tid) else {
                    return;
                };
                if task.is_turn(key) || !task.in_flight.iter().any(|f| f.request_id == *key) {
                    return;
                }
                // Registered before the lock is let go, so the request ahead cannot leave
                // unseen.
                let mut notified = Box::pin(task.wait_turn().notified_owned());
                notified.as_mut().enable();
                notified
            };
            turn.await;
        }
    }

    /// Takes an execution that will never be stored out of its task's queue (its receipt was
    /// settled elsewhere, by the fleet ledger), so the requests behind it do not wait for it.
    pub(super) fn leave_queue<C>(&self, execution: &Execution<'_, C>) {
        if let Some(tid) = execution.task_id.as_deref() {
            if let Some(task) = self.lock().tasks.get_mut(tid) {
                task.leave(&execution.key);
            }
        }
    }

    /// The reply when an execution task vanished without storing a reply (the runtime is
    /// going away): say so rather than pretend.
    pub(super) fn vanished(&self, id: &str) -> Vec<u8> {
        Outcome::err(&ErrorBody::new(
            ErrorCode::Internal,
            format!("the execution of request {id} ended without a reply; read receipt.status for {id} before doing anything else"),
        ))
        .reply_line(Some(id), self.run_id(), ReceiptKind::None)
    }

    /// A fill done at once by an executor that can ([`crate::executor::Executor::fill_now`]);
    /// `None` for every other command, or when the executor cannot. Like [`Host::start`], never
    /// called twice for one receipt.
    pub(super) fn fill_now(
        &self,
        execution: &Execution<'_>,
        written: Option<Arc<Outcome>>,
    ) -> Option<Finished> {
        let (task_id, target, value) = execution.command.fill()?;
        let task = execution.task_id.as_deref().unwrap_or(task_id);
        let filled = self.inner.executor.fill_now(task, target, value)?;
        Some(Finished::Filled(match filled {
            // The reply says what was asked for, which is what the field now holds.
            Ok(()) => written.unwrap_or_else(|| FieldResult::filled(target, value)),
            Err(reason) => action_failed(
                Method::PageFill,
                task,
                &execution.request_id,
                &reason,
                Vec::new(),
            ),
        }))
    }

    /// Starts one mutation on the executor. Never called twice for one receipt.
    pub(super) fn start(&self, execution: &Execution<'_>) -> Started {
        let executor = &self.inner.executor;
        let deadline = Instant::now() + self.inner.config.action_timeout;
        let (task_id, tab, action) = match &execution.command {
            Work::Owned(ExecutorCommand::Start(p)) => {
                let task = NewTask {
                    id: uuid::Uuid::new_v4().to_string().into(),
                    title: p.title.clone(),
                    url: p.url.clone(),
                };
                let opening = executor.open_with(
                    task.id.clone(),
                    p.url.clone(),
                    p.profile.clone(),
                    p.fixture.clone().unwrap_or_default(),
                    deadline,
                );
                return Started::Open(task, opening);
            }
            Work::Owned(ExecutorCommand::Act(a)) => (a.task_id.as_str(), a.tab, a.action.clone()),
            Work::Fill {
                task_id,
                target,
                value,
            } => (
                *task_id,
                0,
                PageAction::Fill {
                    target: Target::Css((*target).to_owned()),
                    value: (*value).to_owned(),
                },
            ),
        };
        // The task admission found (its ID shared with the task table); the command names
        // the same task.
        let task = execution.task_id.clone().unwrap_or_else(|| task_id.into());
        Started::Act(
            task.clone(),
            executor.act_in(&execution.request_id, task, tab, action, deadline),
        )
    }

    /// Turns what the executor answered into the outcome to store and its effect on the task.
    pub(super) fn interpret(
        &self,
        execution: &Execution<'_>,
        finished: Finished,
    ) -> (Arc<Outcome>, TaskEffect) {
        let id = &*execution.request_id;
        let method = execution.command.method();
        match finished {
            Finished::Open(task, Ok(())) => self.task_opened(execution, task),
            Finished::Open(_, Err(e)) => (
                Outcome::err(&ErrorBody::new(
                    ErrorCode::ActionFailed,
                    format!(
                        "the executor could not open a page for the task: {e}; nothing was started"
                    ),
                )),
                TaskEffect::None,
            ),
            Finished::Act(task, ActionOutcome::Applied(obs)) => {
                (self.applied(execution, &task, obs), TaskEffect::None)
            }
            Finished::Act(task, ActionOutcome::LocalDone) => (
                Outcome::ok(&ObservedResult {
                    dialogs: self.take_dialogs(&task, &execution.key, method),
                    // A local step that sent anything is uncertain: nothing to flag here.
                    evidence: self.inner.executor.evidence(&task, false),
                    local: true,
                    observation: None,
                    opened: self.inner.executor.take_opened(&task),
                }),
                TaskEffect::None,
            ),
            Finished::Filled(outcome) => (outcome, TaskEffect::None),
            Finished::Act(task, ActionOutcome::Failed(reason)) => {
                let dialogs = self.take_dialogs(&task, &execution.key, method);
                // Failures come before anything is dispatched: no evidence to keep.
                self.inner.executor.evidence(&task, false);
                (
                    action_failed(method, &task, id, &reason, dialogs),
                    TaskEffect::None,
                )
            }
            Finished::Act(task, ActionOutcome::NotSent(cause, reason)) => (
                self.not_sent(execution, &task, cause, reason),
                TaskEffect::None,
            ),
            Finished::Act(task, ActionOutcome::Uncertain(reason)) => {
                self.uncertain(execution, &task, reason)
            }
        }
    }

    /// The outcome of a `task.start` whose page opened, and the new task's record.
    fn task_opened(&self, execution: &Execution<'_>, task: NewTask) -> (Arc<Outcome>, TaskEffect) {
        let task_id = task.id;
        let now = now_millis();
        let mut t = Task::new(task_id.clone(), task.title, task.url, now);
        t.record(&execution.key, execution.command.method(), now, "ok");
        let result = TaskStartResult {
            run_id: self.run_id().to_owned(),
            state: TaskState::Running,
            task_id: task_id.to_string(),
        };
        (Outcome::ok(&result), TaskEffect::TaskStarted(Box::new(t)))
    }

    /// The outcome of an action the page applied: what a fill asked for, or what the page
    /// showed after it.
    fn applied(&self, execution: &Execution<'_>, task: &TaskId, obs: Observation) -> Arc<Outcome> {
        let id = &*execution.request_id;
        let cmd = &execution.command;
        let method = cmd.method();
        // A fill's reply says what was asked for and nothing else; its evidence (a
        // page that sends as a field changes) is read only if it ends uncertain.
        let evidence = self.inner.executor.evidence(task, false);
        self.flag_duplicates(task, id, method, evidence.as_ref());
        match cmd.fill() {
            // The reply says what was asked for; the observation's strings are that
            // (the fixture's always are), so they are moved, not copied, when equal.
            Some((_, target, value)) => {
                Outcome::ok(&if obs.target == target && obs.value == value {
                    FieldResult {
                        target: Target::Css(obs.target),
                        value: obs.value,
                    }
                } else {
                    FieldResult {
                        target: Target::Css(target.to_owned()),
                        value: value.to_owned(),
                    }
                })
            }
            // A fill by ref or locator says what was asked for the same way.
            None if method == Method::PageFill => match cmd.action() {
                Some(PageAction::Fill { target, value }) => Outcome::ok(&FieldResult {
                    target: target.clone(),
                    value: value.clone(),
                }),
                _ => Outcome::ok(&ObservedResult {
                    dialogs: self.take_dialogs(task, &execution.key, method),
                    evidence,
                    local: false,
                    observation: Some(obs),
                    opened: self.inner.executor.take_opened(task),
                }),
            },
            None => Outcome::ok(&ObservedResult {
                dialogs: self.take_dialogs(task, &execution.key, method),
                evidence,
                local: cmd.is_local_step(),
                observation: Some(obs),
                opened: self.inner.executor.take_opened(task),
            }),
        }
    }

    /// The outcome of an action the executor knows it never sent: the task runs on.
    fn not_sent(
        &self,
        execution: &Execution<'_>,
        task: &TaskId,
        cause: NotSent,
        reason: String,
    ) -> Arc<Outcome> {
        let method = execution.command.method();
        let dialogs = self.take_dialogs(task, &execution.key, method);
        self.inner.executor.evidence(task, false);
        let mut details = json!({
            "taskId": &**task,
            "requestId": &*execution.request_id,
            "cause": cause.as_str(),
            "reason": reason,
        });
        if !cause.candidates().is_empty() {
            details["candidates"] = json!(cause.candidates());
        }
        if !dialogs.is_empty() {
            details["dialogs"] = json!(dialogs);
        }
        Outcome::err(
            &ErrorBody::new(
                ErrorCode::ActionFailed,
                format!("{method} was not sent: {reason}. Task {task} is still running"),
            )
            .with_delivery(Delivery::NotSent)
            .with_details(details),
        )
    }

    /// The outcome of an action that may or may not have taken effect, and the expectation
    /// and evidence the task keeps until it is verified.
    fn uncertain(
        &self,
        execution: &Execution<'_>,
        task: &TaskId,
        reason: String,
    ) -> (Arc<Outcome>, TaskEffect) {
        let id = &*execution.request_id;
        let cmd = &execution.command;
        let method = cmd.method();
        // A page action has one unless it is a local step sent without one; only
        // `task.start` has none, and opening a page is never uncertain.
        let expect = cmd.expectation();
        let dialogs = self.take_dialogs(task, &execution.key, method);
        // Watched on until the outcome is settled: a late answer still shows.
        let evidence = self.inner.executor.evidence(task, true);
        self.flag_duplicates(task, id, method, evidence.as_ref());
        let mut details = json!({
            "taskId": &**task,
            "requestId": id,
            "expect": expect,
            "reason": reason,
            "next": {"method": "task.verifyOutcome", "params": {"taskId": &**task}},
        });
        if !dialogs.is_empty() {
            details["dialogs"] = json!(dialogs);
        }
        if let Some(e) = &evidence {
            details["evidence"] = json!(e);
        }
        let reason = match &evidence {
            Some(e) => format!("{reason} (sent: {})", e.summary()),
            None => reason,
        };
        (
            Outcome::err(
                &ErrorBody::new(
                    ErrorCode::OutcomeUncertain,
                    format!("the outcome of {method} (request {id}) is uncertain: {reason}. Do not resend it: call task.verifyOutcome for task {task} before sending anything else"),
                )
                .with_details(details),
            ),
            TaskEffect::Uncertain(Box::new((expect, evidence))),
        )
    }

    /// Tells the event feed when an action's page sent the same request twice (SPEC §16).
    /// Rare, so it takes the host's lock only then.
    pub(super) fn flag_duplicates(
        &self,
        task: &str,
        request_id: &str,
        method: Method,
        evidence: Option<&NetworkEvidence>,
    ) {
        let Some(e) = evidence.filter(|e| !e.duplicate_sends.is_empty()) else {
            return;
        };
        let event = DuplicateSendsEvent {
            duplicate_sends: e.duplicate_sends.clone(),
            method: method.as_str().to_owned(),
            request_id: request_id.to_owned(),
            task_id: task.to_owned(),
        };
        tracing::warn!(request_id, task, sent = %e.summary(), "an action's page sent the same request more than once");
        self.lock()
            .events
            .publish("network.duplicateSends", now_millis(), || to_data(&event));
    }

    /// The dialogs the task's page opened during an action or a read
    /// ([`crate::executor::Executor::take_dialogs`]), recorded in the task's history as they
    /// were answered, under request `key` and `method`. Never called under the host's lock
    /// (it takes it when there is something to record, which is rare).
    pub(super) fn take_dialogs(
        &self,
        task: &str,
        key: &RequestKey,
        method: Method,
    ) -> Vec<DialogSeen> {
        let dialogs = self.inner.executor.take_dialogs(task);
        if !dialogs.is_empty() {
            let now = now_millis();
            if let Some(t) = self.lock().tasks.get_mut(task) {
                for d in &dialogs {
                    let answered = if d.answer == "accepted" {
                        "dialog_accepted"
                    } else {
                        "dialog_dismissed"
                    };
                    t.record(key, method, now, answered);
                }
            }
        }
        dialogs
    }

    /// Stores an execution's outcome and applies its effect on the task, atomically, then wakes
    /// every copy waiting for it.
    pub(super) fn complete(
        &self,
        execution: &Execution<'_>,
        completion: Completion,
    ) -> Arc<Outcome> {
        let stored = self.complete_locked(&mut self.lock(), execution, completion);
        let idle = stored.now_idle;
        let outcome = stored.wake();
        self.ring_idle(idle);
        outcome
    }

    /// The part of [`Host::complete`] done under the host's lock: applies the effect, stores
    /// the outcome, publishes the completion and appends it to the journal. The caller wakes
    /// the waiters it returns once the lock is let go.
    pub(super) fn complete_locked(
        &self,
        st: &mut State,
        execution: &Execution<'_>,
        completion: Completion,
    ) -> Stored {
        let mut done = self.store_locked(st, execution, completion);
        self.journal_completions(st, &mut [(execution, &mut done)]);
        done.stored
    }

    /// The part of [`Host::complete_locked`] before the journal: applies the effect, stores the
    /// outcome and publishes the completion.
    pub(super) fn store_locked(
        &self,
        st: &mut State,
        execution: &Execution<'_>,
        completion: Completion,
    ) -> Unjournaled {
        let Completion {
            outcome,
            effect,
            at: now,
            fill_took_effect,
        } = completion;
        let key = &execution.key;
        let method = execution.command.method();
        let task_id = execution.task_id.as_deref();
        let result = outcome.code.map_or("ok", ErrorCode::as_str);
        let mut task_record = None;
        match effect {
            TaskEffect::TaskStarted(task) => {
                let summary = task.summary();
                if self.journal().is_some() {
                    task_record = Some(TaskRecordData::of(&task, TaskEvent::Started, now));
                }
                // The start's receipt belongs to the task it made, so the task's filters, its
                // history and a clear of its receipts include it.
                if let Some(r) = st.book.get_mut(key) {
                    r.task_id = Some(task.id.clone());
                }
                let id = task.id.clone();
                st.tasks.insert(*task);
                st.tasks.receipt_created(&id);
                st.events.publish("task.updated", now, || to_data(&summary));
            }
            TaskEffect::Uncertain(uncertain) => {
                let (expect, evidence) = *uncertain;
                // The pending outcome records the params the receipt holds (in canonical form),
                // so executions need not carry a copy of them for this rare case.
                let params = st
                    .book
                    .get(key)
                    .and_then(|r| serde_json::from_str::<Value>(&r.request_text()).ok())
                    .map(|mut request| request["params"].take())
                    .unwrap_or_default();
                if let Some(task) = task_id.and_then(|t| st.tasks.get_mut(t)) {
                    let pending = PendingOutcome {
                        request_id: execution.request_id.to_string(),
                        method,
                        params,
                        expect,
                        since: now,
                        last_verify: None,
                        evidence,
                    };
                    let created = PendingCreatedEvent {
                        pending_outcome: pending.to_wire(),
                        task_id: task.id.to_string(),
                    };
                    task.add_pending(pending);
                    task.record(key, method, now, result);
                    task.leave(key);
                    if self.journal().is_some() {
                        task_record = Some(TaskRecordData::of(task, TaskEvent::Updated, now));
                    }
                    let summary = task.summary();
                    st.events
                        .publish("pending.created", now, || to_data(&created));
                    st.events.publish("task.updated", now, || to_data(&summary));
                }
            }
            TaskEffect::None => {
                if let Some(task) = task_id.and_then(|t| st.tasks.get_mut(t)) {
                    task.record(key, method, now, result);
                    task.leave(key);
                }
            }
        }
        let finished = if fill_took_effect {
            st.book.finish_filled_at(execution.slot, key, &outcome, now)
        } else {
            st.book.finish_at(execution.slot, key, outcome.clone(), now)
        };
        let waiters = finished.ok().flatten();
        publish_completed(st, &execution.request_id, method, &outcome, now);
        Unjournaled {
            stored: Stored {
                outcome,
                waiters,
                now_idle: st.book.running() == 0,
                durable: None,
            },
            task_record,
            at: now,
        }
    }
}

/// `ACTION_FAILED`: the executor says `method` on `task` failed with no effect (with the
/// dialogs the page opened meanwhile, if any).
fn action_failed(
    method: Method,
    task: &str,
    id: &str,
    reason: &str,
    dialogs: Vec<DialogSeen>,
) -> Arc<Outcome> {
    let mut details = json!({"taskId": task, "requestId": id, "reason": reason});
    if !dialogs.is_empty() {
        details["dialogs"] = json!(dialogs);
    }
    Outcome::err(
        &ErrorBody::new(
            ErrorCode::ActionFailed,
            format!("{method} failed with no effect: {reason}. Task {task} is still running; read the page (page.read) before deciding what to send next"),
        )
        .with_details(details),
    )
}

/// Publishes `receipt.completed` for a stored outcome.
pub(super) fn publish_completed(
    st: &mut State,
    id: &str,
    method: Method,
    outcome: &Outcome,
    now: i64,
) {
    let code = outcome.code.map(ErrorCode::as_str);
    st.events
        .publish_receipt("receipt.completed", now, || ReceiptFacts::Completed {
            request_id: id.into(),
            method: method.as_str(),
            code,
        });
}

/// The completion of an execution that ended where it was run, as of its admission.
pub(super) fn completed(
    execution: &Execution<'_>,
    outcome: Arc<Outcome>,
    effect: TaskEffect,
) -> Completion {
    Completion {
        outcome,
        effect,
        at: execution.admitted_at,
        fill_took_effect: false,
    }
}

/// The stored outcome of an execution that panicked: `INTERNAL`, and uncertain when the action
/// may have had an effect (never re-run; the task blocks until verified).
pub(super) fn panicked(
    execution: &Execution<'_>,
    panic: Box<dyn std::any::Any + Send>,
) -> (Arc<Outcome>, TaskEffect) {
    let id = &*execution.request_id;
    let method = execution.command.method();
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    tracing::error!(request_id = %id, method = %method, "execution panicked: {what}");
    let error = internal_error(id, method, execution.task_id.as_deref(), &what);
    // Every page action may have had an effect; only `task.start` (no task yet) has none.
    let effect = match &execution.command {
        Work::Owned(ExecutorCommand::Start(_)) => TaskEffect::None,
        work => TaskEffect::Uncertain(Box::new((work.expectation(), None))),
    };
    (Outcome::err(&error), effect)
}
