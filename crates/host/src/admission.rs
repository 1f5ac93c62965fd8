//! The receipt rules for a new request, applied in one critical section of the host's lock.
//!
//! [`Host::admit`] looks the request ID up and, in order: refuses other content under a known
//! ID (`MCP_REQUEST_ID_REUSED`), answers a copy from the stored reply (replay) or attaches it
//! to the running execution (join), refuses a cleared ID (`RECEIPT_CLEARED`), lets a read
//! through, refuses mutations while stopping (`SHUTTING_DOWN`), admits the mutation against its
//! task's state (`TASK_NOT_FOUND`, `TASK_BLOCKED`, …), checks capacity
//! (`RECEIPT_CAPACITY_FULL`) and creates the running receipt. Lookup, compare, admission and
//! creation are one atomic step, so two copies of one request can never both execute.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::watch;

use super::execution::{publish_completed, Execution, Stored, Work};
use super::failures::{admission_error, not_durable};
use super::task_record::TaskRecordData;
use super::to_data;
use super::{reject, wait_outcome, Counters, Handled, Host, Replay, State};
use crate::book::{digest, Book, BookFull, Entry, Limit, Receipt, ReplyWaiters, RequestKey};
use crate::events::{EventBus, ReceiptFacts};
use crate::journal::{self, Begun, Completed, Record, RequestPieces, TaskEvent, Ticket};
use crate::protocol::introspection::RequestRejectedEvent;
use crate::protocol::results::TaskClosedResult;
use crate::protocol::{
    format_millis, now_millis, CloseCommand, Command, Delivery, DirectRequest, ErrorBody,
    ErrorCode, ExecutorCommand, Fingerprint, FrameCommand, Method, Outcome, ReadCommand,
    ReceiptKind,
};
use crate::tasks::Task;

/// What the receipt rules decided for a request that is not answered at once.
pub(super) enum Admitted<'a> {
    /// A read: executed every time, never stored.
    Read(ReadCommand),
    /// A copy of a completed request: its stored reply, answered once the lock is let go
    /// ([`Host::replayed`]), after the journal has its completion when the ticket says it
    /// does not yet.
    Replay(Replay, Option<Ticket>),
    /// A new receipt, to execute.
    Execute(Execution<'a>),
    /// A new receipt closing a task, to claim in the fleet ledger before the task is closed
    /// (without a ledger, admission closes the task itself).
    CloseClaimed(Execution<'a, CloseCommand>),
    /// A new receipt for `task.finish` admitted while other requests of its task are in
    /// flight: it closes the task once they ended, if the task still accepts it then.
    CloseQueued(Execution<'a, CloseCommand>),
}

/// When admission appends a new receipt's begin to the journal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Begin {
    /// At once: the execution leaves admission with its ticket.
    Append,
    /// Together with the rest of its batch, by [`Host::append_begins`] under the same taking
    /// of the lock: the execution leaves admission without a ticket.
    WithBatch,
}

/// The request being admitted, as its rejections and events name it.
#[derive(Clone, Copy)]
struct Asked<'r> {
    /// The caller's request ID.
    request_id: &'r str,
    /// Its method.
    method: Method,
    /// When it is admitted (epoch ms).
    now: i64,
}

impl Host {
    /// Appends the begins of a batch's new receipts (admitted with [`Begin::WithBatch`] under
    /// this same taking of the lock) as one append: one taking of the journal's lock and at
    /// most one wake of its flusher for the lot. The records are the ones each admission would
    /// have appended, in the same order; every execution gets the one ticket, so none acts
    /// before all the batch's begins are durable. Should the journal refuse the append,
    /// nothing is executed: each receipt stores the `INTERNAL` answer saying so, as admission
    /// does, and the host stops.
    pub(super) fn append_begins(
        &self,
        st: &mut State,
        admitted: &mut [(&str, Result<Admitted<'_>, Handled>)],
        now: i64,
    ) {
        let Some(journal) = self.journal() else {
            return;
        };
        let run_id = self.run_id();
        let appended = {
            let mut records = Vec::with_capacity(admitted.len());
            for (_, a) in admitted.iter() {
                if let Ok(Admitted::Execute(execution)) = a {
                    let r = st
                        .book
                        .get(&execution.key)
                        .expect("the receipt was just created");
                    let method = execution.command.method().as_str();
                    records.push(Record::ReceiptBegun(Begun {
                        request_id: &execution.key,
                        run_id,
                        method,
                        task_id: execution.task_id.as_deref(),
                        request: RequestPieces(r.request_pieces()),
                        at: execution.admitted_at,
                    }));
                }
            }
            if records.is_empty() {
                return;
            }
            journal.append_batch(&records)
        };
        match appended {
            Ok(ticket) => {
                for (_, a) in admitted.iter_mut() {
                    if let Ok(Admitted::Execute(execution)) = a {
                        execution.begun = Some(ticket.clone());
                    }
                }
            }
            Err(e) => {
                // Nothing can be made durable: no executor is asked to act.
                self.journal_failed(&e);
                for (id, a) in admitted.iter_mut() {
                    let Ok(Admitted::Execute(execution)) = a else {
                        continue;
                    };
                    let method = execution.command.method();
                    let outcome = Outcome::err(&not_recorded(id, method, &e));
                    if let Some(task) = execution
                        .task_id
                        .as_deref()
                        .and_then(|t| st.tasks.get_mut(t))
                    {
                        task.leave(&execution.key);
                    }
                    // Copies of the request later in the batch joined it: they get this too.
                    st.book.complete(&execution.key, outcome.clone(), now);
                    publish_completed(st, id, method, &outcome, now);
                    *a = Err(Handled::Ready(outcome.reply_line(
                        Some(id),
                        run_id,
                        ReceiptKind::New,
                    )));
                }
            }
        }
    }

    /// The receipt rules for one request whose params are already checked (`req.request` is
    /// its canonical `{method, params}`, the fingerprint the receipt keeps), applied in the
    /// host's critical section: answered at once (`Err`), a read to run, or a new receipt to
    /// execute. `key` is the book's key for `req.id`, made before the lock was taken.
    pub(super) fn admit<'a>(
        &self,
        st: &mut State,
        req: DirectRequest<'a>,
        key: RequestKey,
        now: i64,
        begin: Begin,
    ) -> Result<Admitted<'a>, Handled> {
        // `key` is the book's key made from the ID (and its UUID bytes) before the lock.
        let DirectRequest {
            request_id,
            command: cmd,
            request,
            uuid: _,
        } = req;
        let method = cmd.method();
        let asked = Asked {
            request_id,
            method,
            now,
        };
        self.check_start_url(&cmd, request_id)?;
        let vacancy = match st.book.entry(&key) {
            Entry::Receipt(r) => {
                let replayed =
                    self.replay_or_join(r, &mut st.counters, &mut st.events, asked, &request);
                let (outcome, durable) = replayed?;
                // The reply line is written once the lock is let go.
                let kind = ReceiptKind::Replayed;
                return Ok(Admitted::Replay(Replay { outcome, key, kind }, durable));
            }
            Entry::Tombstone(t, batch) => {
                let same = t.digest == digest(&request.text());
                st.counters.rejected_cleared += 1;
                let error = cleared_error(request_id, batch.at, &batch.reason, same);
                let code = ErrorCode::ReceiptCleared;
                return Err(self.refuse(&mut st.events, asked, None, code, error));
            }
            Entry::Vacant(vacancy) => vacancy,
        };
        // A read goes no further; a mutation is the executor's work (`Ok`) or a task closing
        // (`Err`, which is no failure: it only takes the other way out below).
        let mutation = match Work::of(cmd) {
            Ok(mutation) => mutation,
            Err(read) => return Ok(Admitted::Read(read)),
        };
        if self.is_shutting_down() {
            let (code, error) = (ErrorCode::ShuttingDown, shutting_down_error(method));
            return Err(self.refuse(&mut st.events, asked, None, code, error));
        }

        // Admission: the task must exist and accept the action.
        let task_named = match &mutation {
            Ok(work) => work.task_id(),
            Err(close) => Some(close.task_id()),
        };
        // The admitted task stays at hand (its receipt count goes up once the receipt exists).
        let (task_id, task) = match task_named {
            None => (None, None),
            Some(tid) => {
                let Some(task) = st.tasks.get_mut(tid) else {
                    return Err(self.refuse_missing_task(st, asked, tid, &request));
                };
                if let Err(refusal) = task.admit(method) {
                    let code = refusal.code();
                    task.record(&key, method, now, code.as_str());
                    let error = admission_error(task, method, code);
                    st.counters.rejected_blocked += u64::from(code == ErrorCode::TaskBlocked);
                    return Err(self.refuse(&mut st.events, asked, Some(tid), code, error));
                }
                (Some(task.id.clone()), Some(task))
            }
        };

        if let Some(error) = self.lease_refusal(request_id, method) {
            let code = ErrorCode::LedgerUnavailable;
            return Err(self.refuse(&mut st.events, asked, task_id.as_deref(), code, error));
        }
        let stored = request.into_stored(task_id.as_deref());
        let inserted = vacancy.insert_running(stored, method, task_id.clone(), now);
        let slot = inserted.map_err(|full| {
            st.counters.rejected_capacity += 1;
            let error = capacity_error(method, &full);
            self.refuse(
                &mut st.events,
                asked,
                None,
                ErrorCode::ReceiptCapacityFull,
                error,
            )
        })?;
        let is_closing = mutation.is_err();
        let claim = self.ledger().is_some();
        let begun = match (self.journal(), is_closing, begin) {
            (Some(journal), false, Begin::Append) => {
                Some(self.append_begun(journal, &mut st.book, &key, asked, task_id.as_deref())?)
            }
            _ => None,
        };
        st.counters.executions += 1;
        let mut turn_now = true;
        if let Some(task) = task {
            task.receipts += 1;
            turn_now = self.takes_turn_now(task, &mutation, &key, method, now, claim);
        }
        st.events
            .publish_receipt("receipt.created", now, || ReceiptFacts::Created {
                request_id: request_id.into(),
                method: method.as_str(),
                task_id: task_id.clone(),
            });

        let execution = Execution {
            request_id: Cow::Borrowed(request_id),
            key,
            slot,
            command: (),
            task_id,
            admitted_at: now,
            begun,
            claim,
            turn_now,
        };
        match mutation {
            Ok(work) => Ok(Admitted::Execute(execution.with(work))),
            Err(close) if claim => Ok(Admitted::CloseClaimed(execution.with(close))),
            Err(close) if !turn_now => Ok(Admitted::CloseQueued(execution.with(close))),
            Err(close) => Err(self.close_task(st, execution.with(close))),
        }
    }

    /// Refuses a `task.start` of a page this executor could never open as a bad request, before
    /// anything is stored for it.
    #[inline]
    fn check_start_url(&self, cmd: &FrameCommand<'_>, request_id: &str) -> Result<(), Handled> {
        if let Some(Command::Execute(ExecutorCommand::Start(p))) = cmd.owned() {
            if let Err(msg) = self.inner.executor.check_start(p.url.as_deref()) {
                return Err(reject(
                    Some(request_id),
                    self.run_id(),
                    ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!("invalid params for task.start: {msg}"),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A request whose ID has a live receipt: refused when its content differs (`Err`), else
    /// answered from the stored reply (replay: its outcome, and the journal's ticket when the
    /// journal does not have it durably yet) or attached to the running execution (join, `Err`).
    #[inline]
    fn replay_or_join(
        &self,
        r: &mut Receipt,
        counters: &mut Counters,
        events: &mut EventBus,
        asked: Asked<'_>,
        request: &Fingerprint<'_>,
    ) -> Result<(Arc<Outcome>, Option<Ticket>), Handled> {
        let Asked {
            request_id,
            method,
            now,
        } = asked;
        if !r.is_for(request) {
            counters.rejected_reused += 1;
            let error = reused_error(request_id, r.method, r.first_seen);
            return Err(self.refuse(events, asked, None, ErrorCode::RequestIdReused, error));
        }
        match r.outcome() {
            Some(outcome) => {
                r.replays += 1;
                let durable = self.pending_durability(r.seq);
                counters.replays += 1;
                events.publish_receipt("receipt.replayed", now, || ReceiptFacts::Seen {
                    request_id: request_id.into(),
                    method: method.as_str(),
                });
                Ok((outcome, durable))
            }
            None => {
                r.joins += 1;
                let rx = r.wait_for_outcome().expect("the receipt is running");
                counters.joins += 1;
                events.publish_receipt("receipt.joined", now, || ReceiptFacts::Seen {
                    request_id: request_id.into(),
                    method: method.as_str(),
                });
                Err(self.reply_when_done(request_id, rx, ReceiptKind::Joined))
            }
        }
    }

    /// Publishes `request.rejected` for a refused request and makes its error reply.
    #[inline]
    fn refuse(
        &self,
        events: &mut EventBus,
        asked: Asked<'_>,
        task_id: Option<&str>,
        code: ErrorCode,
        error: ErrorBody,
    ) -> Handled {
        events.publish("request.rejected", asked.now, || {
            rejected(asked.request_id, asked.method, task_id, code)
        });
        reject(Some(asked.request_id), self.run_id(), error)
    }

    /// Refuses a request for a task this host does not run: closed here, kept by another host
    /// of the fleet (which it names), or unknown.
    fn refuse_missing_task(
        &self,
        st: &mut State,
        asked: Asked<'_>,
        tid: &str,
        request: &Fingerprint<'_>,
    ) -> Handled {
        let Asked {
            request_id, method, ..
        } = asked;
        if let Some(record) = st.tasks.closed(tid) {
            let error = admission_error(&record.to_task(tid), method, ErrorCode::TaskClosed);
            return self.refuse(
                &mut st.events,
                asked,
                Some(tid),
                ErrorCode::TaskClosed,
                error,
            );
        }
        st.events.publish("request.rejected", asked.now, || {
            rejected(request_id, method, Some(tid), ErrorCode::TaskNotFound)
        });
        if self.ledger().is_some() {
            // Tasks stay with their host: say which one has it.
            return self.unknown_task_in_fleet(request_id, Some(&request.text()), tid, method);
        }
        let run_id = self.run_id();
        reject(Some(request_id), run_id, unknown_task_error(tid, run_id))
    }

    /// Appends a new receipt's begin to the journal, so its execution leaves admission with a
    /// ticket; when the journal fails, the receipt is completed as not executed and the executor
    /// is never asked to act.
    fn append_begun(
        &self,
        journal: &journal::Journal,
        book: &mut Book,
        key: &RequestKey,
        asked: Asked<'_>,
        task_id: Option<&str>,
    ) -> Result<Ticket, Handled> {
        let Asked {
            request_id,
            method,
            now,
        } = asked;
        let run_id = self.run_id();
        let r = book.get(key).expect("the receipt was just created");
        let record = Record::ReceiptBegun(Begun {
            request_id: key,
            run_id,
            method: method.as_str(),
            task_id,
            request: RequestPieces(r.request_pieces()),
            at: now,
        });
        journal.append(&record).map_err(|e| {
            self.journal_failed(&e);
            let outcome = Outcome::err(&not_recorded(request_id, method, &e));
            book.complete(key, outcome.clone(), now);
            Handled::Ready(outcome.reply_line(Some(request_id), run_id, ReceiptKind::New))
        })
    }

    /// Whether a new receipt of `task` may execute now, queueing it behind the task's requests
    /// in flight otherwise. A task's requests execute one at a time, in the order they were
    /// admitted (SPEC §14): one admitted behind others still in flight waits for them.
    /// `task.stop` waits for nothing (it executes nothing, and is the way out of a task), and
    /// neither does a fill the executor does at once with nothing of its task in flight: it is
    /// done before this critical section ends (`Host::fill_at_once`), so nothing admitted after
    /// it can run first, and it takes no place in the queue.
    #[inline]
    fn takes_turn_now(
        &self,
        task: &mut Task,
        mutation: &Result<Work<'_>, CloseCommand>,
        key: &RequestKey,
        method: Method,
        now: i64,
        claim: bool,
    ) -> bool {
        let queued = match mutation {
            Err(CloseCommand::Stop(_)) => false,
            Err(CloseCommand::Finish(_)) => !task.in_flight.is_empty(),
            Ok(work) => {
                !(task.in_flight.is_empty()
                    && work.is_fill()
                    && !claim
                    && self.journal().is_none()
                    && self.inner.executor.fills_at_once())
            }
        };
        !queued || task.enter(key, method, now)
    }

    /// Executes `task.finish` or `task.stop` in the critical section that admitted it: closing
    /// a task touches no executor, and doing it here means no action can slip in between the
    /// check and the change.
    fn close_task(&self, st: &mut State, execution: Execution<'_, CloseCommand>) -> Handled {
        let (outcome, waiters, task_record) = self.close_admitted(st, &execution);
        self.store_closing(st, execution, outcome, waiters, task_record)
    }

    /// The rest of [`Host::close_task`] once the task's closing (or its refusal) is stored in
    /// the receipt: one journal record for the receipt's begin and completion, with the task's
    /// record; the reply, and the copies that joined a queued closing, wait for it.
    fn store_closing(
        &self,
        st: &mut State,
        execution: Execution<'_, CloseCommand>,
        outcome: Arc<Outcome>,
        waiters: Option<ReplyWaiters>,
        task_record: Option<TaskRecordData>,
    ) -> Handled {
        let Execution {
            request_id,
            key,
            command,
            task_id,
            admitted_at: now,
            ..
        } = execution;
        let method = command.method();
        let tid = task_id.expect("task closings name an admitted task");
        let line = outcome.reply_line(Some(&request_id), self.run_id(), ReceiptKind::New);
        let Some(journal) = self.journal() else {
            if let Some(waiters) = waiters {
                waiters.send_replace(Some(outcome));
            }
            return Handled::Ready(line);
        };
        // Created and completed in this one critical section: one record for both, in the same
        // block as the task's close; the reply waits for it.
        let r = st.book.get(&key).expect("the receipt was just completed");
        let run_id = self.run_id();
        let stored = Record::ReceiptStored(
            Begun {
                request_id: &key,
                run_id,
                method: method.as_str(),
                task_id: Some(&tid),
                request: RequestPieces(r.request_pieces()),
                at: now,
            },
            Completed {
                request_id: &key,
                reply: outcome.body.as_bytes(),
                at: now,
            },
        );
        let appended = match &task_record {
            Some(task_record) => journal.append_batch([&stored, &task_record.record(run_id)]),
            None => journal.append_batch([&stored]),
        };
        match appended {
            Ok(ticket) => {
                st.book.set_seq(usize::MAX, &key, ticket.seq());
                if let Some(waiters) = waiters {
                    // Copies that joined a queued closing: answered once it is durable too.
                    let wake = ticket.clone();
                    tokio::spawn(async move {
                        if wake.await.is_ok() {
                            waiters.send_replace(Some(outcome));
                        }
                    });
                }
                self.reply_once_durable(&request_id, ticket, line)
            }
            Err(e) => {
                self.journal_failed(&e);
                Handled::Ready(
                    Outcome::err(&not_recorded(&request_id, method, &e)).reply_line(
                        Some(&request_id),
                        run_id,
                        ReceiptKind::None,
                    ),
                )
            }
        }
    }

    /// Closes the task of an admitted `task.finish` / `task.stop` and stores the reply under
    /// its receipt: the outcome, the waiters of copies that joined (to wake once the reply is
    /// durable), and the task's journal record when there is a journal.
    fn close_admitted(
        &self,
        st: &mut State,
        execution: &Execution<'_, CloseCommand>,
    ) -> (Arc<Outcome>, Option<ReplyWaiters>, Option<TaskRecordData>) {
        let Execution {
            request_id,
            key,
            command,
            task_id,
            admitted_at: now,
            ..
        } = execution;
        let now = *now;
        let method = command.method();
        let tid = task_id
            .as_ref()
            .expect("task closings name an admitted task");
        let task = st.tasks.get_mut(tid).expect("admitted task exists");
        match command {
            CloseCommand::Stop(p) => task.stop(p.reason.clone(), now),
            CloseCommand::Finish(_) => task.finish(now),
        }
        task.record(key, method, now, "ok");
        task.leave(key);
        // The watch of a pending action's network ends with the task (SPEC §16): what it saw
        // last stays with the pending outcome.
        if let Some(evidence) = self.inner.executor.evidence(tid, false) {
            if let Some(p) = task.pending.front_mut() {
                p.evidence = Some(evidence);
            }
        }
        self.inner
            .executor
            .close(tid.clone(), task.pending_outcome().is_some());
        let result = TaskClosedResult {
            state: task.state(),
            task_id: tid.to_string(),
        };
        let summary = task.summary();
        let task_record = self
            .journal()
            .is_some()
            .then(|| TaskRecordData::of(task, TaskEvent::Closed, now));
        let outcome = Outcome::ok(&result);
        let waiters = st
            .book
            .finish_at(execution.slot, key, outcome.clone(), now)
            .ok()
            .flatten();
        st.events.publish("task.updated", now, || to_data(&summary));
        publish_completed(st, request_id, method, &outcome, now);
        (outcome, waiters, task_record)
    }

    /// [`Host::close_admitted`] for a closing claimed in the fleet ledger: the task may have
    /// been closed by another request while the claim was made, and is then closed again
    /// harmlessly (its state does not change twice).
    pub(super) fn close_claimed(&self, execution: &Execution<'_, CloseCommand>) -> Stored {
        let mut st = self.lock();
        let open = execution
            .task_id
            .as_deref()
            .and_then(|t| st.tasks.get(t))
            .is_some_and(|t| t.closed.is_none());
        if !open {
            let tid = execution.task_id.as_deref().unwrap_or("");
            let error = match st.tasks.get(tid) {
                Some(t) => admission_error(t, execution.command.method(), ErrorCode::TaskClosed),
                None => unknown_task_error(tid, self.run_id()),
            };
            let outcome = Outcome::err(&error);
            let waiters = self.refuse_closing(&mut st, execution, &outcome);
            let idle = st.book.running() == 0;
            return Stored::new(outcome, waiters, idle);
        }
        let (outcome, waiters, _) = self.close_admitted(&mut st, execution);
        let idle = st.book.running() == 0;
        Stored::new(outcome, waiters, idle)
    }

    /// A `task.finish` admitted behind requests of its task still in flight: on its own task
    /// (detached from the connection), it waits for them, then closes the task if it still
    /// accepts it, else stores the refusal in its receipt (SPEC §14).
    pub(super) fn spawn_close_queued(
        &self,
        execution: Execution<'static, CloseCommand>,
    ) -> Handled {
        let host = self.clone();
        let id = execution.request_id.to_string();
        let done = tokio::spawn(async move {
            let refused = host.await_turn(&execution).await;
            let answer = {
                let mut guard = host.lock();
                let st = &mut *guard;
                match refused {
                    None => host.close_task(st, execution),
                    Some(outcome) => {
                        let waiters = host.refuse_closing(st, &execution, &outcome);
                        host.store_closing(st, execution, outcome, waiters, None)
                    }
                }
            };
            match answer {
                Handled::Ready(line) => line,
                Handled::Later(reply) => reply.await,
                Handled::Replay(replay) => replay.line(host.run_id()),
                Handled::Joined(_) => Vec::new(),
            }
        });
        let host = self.clone();
        Handled::Later(Box::pin(async move {
            match done.await {
                Ok(line) => line,
                Err(_) => host.vanished(&id),
            }
        }))
    }

    /// Stores the refusal of a closing whose task no longer accepted it when its turn came:
    /// the copies that joined it are handed back to wake.
    fn refuse_closing(
        &self,
        st: &mut State,
        execution: &Execution<'_, CloseCommand>,
        outcome: &Arc<Outcome>,
    ) -> Option<ReplyWaiters> {
        let now = now_millis();
        let method = execution.command.method();
        if let Some(t) = execution
            .task_id
            .as_deref()
            .and_then(|t| st.tasks.get_mut(t))
        {
            t.record(
                &execution.key,
                method,
                now,
                outcome.code.map_or("ok", ErrorCode::as_str),
            );
            t.leave(&execution.key);
        }
        let waiters = st
            .book
            .finish_at(execution.slot, &execution.key, outcome.clone(), now)
            .ok()
            .flatten();
        publish_completed(st, &execution.request_id, method, outcome, now);
        waiters
    }

    /// [`Host::refuse_closing`] for a closing claimed in the fleet ledger, under the lock.
    pub(super) fn store_refused_close(
        &self,
        execution: &Execution<'_, CloseCommand>,
        outcome: Arc<Outcome>,
    ) -> Stored {
        let mut st = self.lock();
        let waiters = self.refuse_closing(&mut st, execution, &outcome);
        let idle = st.book.running() == 0;
        Stored::new(outcome, waiters, idle)
    }

    /// A reply that waits until the journal holds what it says; a journal that fails meanwhile
    /// turns it into `INTERNAL` (uncertain), and the host stops.
    pub(super) fn reply_once_durable(&self, id: &str, ticket: Ticket, line: Vec<u8>) -> Handled {
        let host = self.clone();
        let id = id.to_owned();
        Handled::Later(Box::pin(async move {
            match ticket.await {
                Ok(()) => line,
                Err(e) => {
                    host.journal_failed(&e);
                    not_durable(&id, &e).reply_line(Some(&id), host.run_id(), ReceiptKind::None)
                }
            }
        }))
    }

    /// The reply of a copy that joined a running execution: the execution's own, when it
    /// comes.
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
}

/// `MCP_REQUEST_ID_REUSED`: other content under an ID first used for `stored`.
pub(super) fn reused_error(id: &str, stored: Method, first_seen: i64) -> ErrorBody {
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
    }))
}

/// `INTERNAL`, `not_executed`: the journal could not record a new receipt, so the executor
/// was never asked to act.
fn not_recorded(id: &str, method: Method, error: &journal::Error) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!("{method} (request {id}) was not executed: the host's journal could not record it ({error}), so the host is stopping. Send it again under the same id once the host is back"),
    )
    .with_delivery(Delivery::NotExecuted)
    .with_details(json!({"requestId": id}))
}

/// `SHUTTING_DOWN`: a mutation that arrived while the host stops.
fn shutting_down_error(method: Method) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ShuttingDown,
        format!("the host is stopping and did not execute {method}; send it again under the same id to the next host run"),
    )
}

/// `TASK_NOT_FOUND` for a mutation naming a task this run does not know.
fn unknown_task_error(tid: &str, run_id: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::TaskNotFound,
        format!("no task {tid} in this run ({run_id}); nothing was executed. Check the taskId and runId you kept with task.resume"),
    )
    .with_details(json!({"taskId": tid, "runId": run_id}))
}

/// `RECEIPT_CAPACITY_FULL`: no room for a new receipt.
fn capacity_error(method: Method, full: &BookFull) -> ErrorBody {
    let BookFull {
        limit,
        capacity,
        used,
        used_bytes,
        max_bytes,
    } = *full;
    let what = match limit {
        Limit::Count => format!("{used} of {capacity} receipts"),
        Limit::Bytes => format!("{used_bytes} of {max_bytes} bytes"),
    };
    ErrorBody::new(
        ErrorCode::ReceiptCapacityFull,
        format!(
            "the receipt book is full ({what}); {method} was not executed. An operator must clear completed receipts (polaris clear) — then send this request again under the same id"
        ),
    )
    .with_details(json!({
        "limit": limit.as_str(),
        "capacity": capacity,
        "used": used,
        "usedBytes": used_bytes,
        "maxBytes": max_bytes,
    }))
}

/// `RECEIPT_CLEARED`: an ID an operator cleared, with the same content (`same`) or other.
pub(super) fn cleared_error(id: &str, at: i64, reason: &str, same: bool) -> ErrorBody {
    let (delivery, what) = if same {
        (Delivery::Cleared, "its content ran earlier in this run")
    } else {
        (Delivery::NotExecuted, "this other content was not executed")
    };
    ErrorBody::new(
        ErrorCode::ReceiptCleared,
        format!(
            "request id {id} was cleared by an operator at {} (reason: {}); {what} and the id will not run again in this run. Read the task's state (task.status) before sending new work under a fresh id",
            format_millis(at),
            reason
        ),
    )
    .with_delivery(delivery)
    .with_details(json!({
        "requestId": id,
        "clearedAt": format_millis(at),
        "reason": reason,
        "sameContent": same,
    }))
}

/// The facts of a `request.rejected` event.
fn rejected(id: &str, method: Method, task_id: Option<&str>, code: ErrorCode) -> serde_json::Value {
    to_data(&RequestRejectedEvent {
        code,
        method: method.as_str().to_owned(),
        request_id: id.to_owned(),
        task_id: task_id.map(str::to_owned),
    })
}
