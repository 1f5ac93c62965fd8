//! Reads: answered every time from the current state or the executor, never stored.
//!
//! Nothing here creates a receipt. The state is read in short critical sections of the host's
//! lock; page reads and verifications (`task.verifyOutcome`) ask the executor for a read-only
//! observation outside the lock. A verification is the one read that changes state: it settles
//! the task's pending outcome, under the lock, once the observation is in.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use super::task_record::TaskRecordData;
use super::{ready_ok, reject, to_data, wait_outcome, Handled, Host};
use crate::book::RequestKey;
use std::time::Duration;

use crate::executor::{PageQuery, QueryOutcome, ReadOutcome};
use crate::journal::TaskEvent;
use crate::protocol::introspection::{DuplicateSendsEvent, PendingResolvedEvent};
use crate::protocol::results::{
    ExecutorStatus, FieldResult, HelloResult, PageTabsResult, PageUrlResult, ReceiptState,
    ReceiptStatusResult, RunStatusResult, ScreenshotResult, StoredReply, TaskResumeResult,
    ToolInfo, ToolKind, ToolsListResult, VerifyResult, WaitResult,
};
use crate::protocol::{
    format_millis, now_millis, render_snapshot, Delivery, ErrorBody, ErrorCode, Method, Outcome,
    PageReadParams, ReadCommand, ReceiptKind, ReceiptStatusParams, SnapshotFormat, Subject,
    TaskParams, TaskResumeParams, WaitState, PROTOCOL_VERSION, SNAPSHOT_DEFAULT_BYTES,
};
use crate::tasks::{Observation, PendingOutcome, TaskId, VerifyOutcome, VerifyRecord};

impl Host {
    /// Answers a read admitted by the receipt rules: executed every time, never stored.
    pub(super) fn read(&self, request_id: &str, cmd: ReadCommand) -> Handled {
        let run_id = self.run_id();
        if let (Some(_), Some(tid)) = (self.ledger(), cmd.task_id()) {
            if self.task_unknown_here(tid) {
                // Tasks stay with their host: say which one has it.
                return self.unknown_task_in_fleet(request_id, None, tid, cmd.method());
            }
        }
        match cmd {
            ReadCommand::HostHello => ready_ok(request_id, run_id, self.hello()),
            ReadCommand::ToolsList => ready_ok(
                request_id,
                run_id,
                ToolsListResult {
                    tools: Method::BRIDGE
                        .iter()
                        .filter(|m| self.inner.executor.offers(**m))
                        .map(|m| ToolInfo {
                            description: m.description().to_owned(),
                            kind: if m.is_mutating() {
                                ToolKind::Mutating
                            } else {
                                ToolKind::Read
                            },
                            method: m.as_str().to_owned(),
                        })
                        .collect(),
                },
            ),
            ReadCommand::RunStatus(p) => {
                let mut v = self.run_status();
                v.current = p.run_id.as_deref().is_none_or(|r| r == run_id);
                ready_ok(request_id, run_id, v)
            }
            ReadCommand::ReceiptStatus(p) => self.receipt_status_read(request_id, p),
            ReadCommand::TaskStatus(p) => self.task_status_read(request_id, p),
            ReadCommand::TaskResume(p) => self.task_resume_read(request_id, p),
            ReadCommand::PageRead(p) => self.page_read(request_id, p),
            ReadCommand::PageSnapshot(_)
            | ReadCommand::PageWait(_)
            | ReadCommand::PageScreenshot(_)
            | ReadCommand::PageUrl(_)
            | ReadCommand::PageTabs(_) => self.page_query(request_id, cmd),
            ReadCommand::TaskVerifyOutcome(p) => {
                let request_id = request_id.to_owned();
                match self.verify(&p.task_id) {
                    Ok(fut) => {
                        let host = self.clone();
                        Handled::Later(Box::pin(async move {
                            let outcome = fut.await;
                            outcome.reply_line(Some(&request_id), host.run_id(), ReceiptKind::None)
                        }))
                    }
                    Err(error) => reject(Some(&request_id), run_id, error),
                }
            }
        }
    }

    /// `receipt.status`: answered once the journal holds what it reports; a fleet host asks the
    /// fleet's book about a receipt its own does not have.
    fn receipt_status_read(&self, request_id: &str, p: ReceiptStatusParams) -> Handled {
        let run_id = self.run_id();
        let status = self.receipt_status(&p.request_id);
        if status.state == ReceiptState::Unknown && self.ledger().is_some() {
            // Not in this host's book: the fleet's may have it.
            return self.receipt_status_in_fleet(request_id, status);
        }
        match self.journal() {
            // What a client is told about a receipt must survive a crash: a receipt
            // admitted (or completed, or cleared) a moment ago is answered once the
            // journal holds it, so a restart never forgets what was reported.
            // Almost always it already does, and the reply is ready at once: a ready
            // reply counts against the connection's reply-byte bound before the next
            // frame is read, a delayed one only once it exists.
            Some(journal) if status.state != ReceiptState::Unknown => {
                let barrier = journal.barrier();
                if barrier.is_durable() {
                    return ready_ok(request_id, run_id, status);
                }
                let line =
                    Outcome::ok(&status).reply_line(Some(request_id), run_id, ReceiptKind::None);
                self.reply_once_durable(request_id, barrier, line)
            }
            _ => ready_ok(request_id, run_id, status),
        }
    }

    /// `task.status` of a running or closed task.
    fn task_status_read(&self, request_id: &str, p: TaskParams) -> Handled {
        let run_id = self.run_id();
        let st = self.lock();
        match st.tasks.get(&p.task_id) {
            Some(t) => ready_ok(request_id, run_id, t.status(run_id)),
            None => match st.tasks.closed(&p.task_id) {
                Some(r) => ready_ok(request_id, run_id, r.to_task(&p.task_id).status(run_id)),
                None => reject(Some(request_id), run_id, self.task_not_found(&p.task_id)),
            },
        }
    }

    /// `task.resume`: where a task of this run stands, or `RUN_NOT_CURRENT` for a task of an
    /// earlier run.
    fn task_resume_read(&self, request_id: &str, p: TaskResumeParams) -> Handled {
        let run_id = self.run_id();
        if p.run_id != run_id {
            return reject(
                Some(request_id),
                run_id,
                ErrorBody::new(
                    ErrorCode::RunNotCurrent,
                    format!(
                        "run {} is not this host's run ({run_id}): the host restarted since. Its tasks are interrupted (task.status shows what each did) and, with a journal, its receipts still answer; check what your earlier requests did before starting a new task",
                        p.run_id
                    ),
                )
                .with_details(json!({"currentRunId": run_id, "runId": p.run_id})),
            );
        }
        let st = self.lock();
        let record = st.tasks.closed(&p.task_id).map(|r| r.to_task(&p.task_id));
        match st.tasks.get(&p.task_id).or(record.as_ref()) {
            Some(t) => {
                let v = TaskResumeResult {
                    pending_outcome: t.pending_outcome().map(|po| po.to_wire()),
                    run_id: run_id.to_owned(),
                    state: t.state(),
                    task_id: t.id.to_string(),
                };
                ready_ok(request_id, run_id, v)
            }
            None => reject(Some(request_id), run_id, self.task_not_found(&p.task_id)),
        }
    }

    /// `page.read`: one field of the task's page, read by the executor after the lock is let go.
    fn page_read(&self, request_id: &str, p: PageReadParams) -> Handled {
        let run_id = self.run_id();
        let Some(task) = self.lock().tasks.shared_id(&p.task_id) else {
            return reject(Some(request_id), run_id, self.task_not_found(&p.task_id));
        };
        let host = self.clone();
        let request_id = request_id.to_owned();
        let deadline = Instant::now() + self.inner.config.action_timeout;
        let read = self.inner.executor.observe_in(
            task.clone(),
            p.tab.unwrap_or(0),
            Subject::Target(p.target.clone()),
            deadline,
        );
        Handled::Later(Box::pin(async move {
            let run_id = host.run_id();
            let read = match read.await {
                // A page opened again shows what it shows: a read gives it as it is.
                ReadOutcome::Reopened(inner) => *inner,
                other => other,
            };
            host.take_dialogs(&task, &RequestKey::new(&request_id), Method::PageRead);
            let outcome = match read {
                ReadOutcome::Reopened(_) => unreachable!("unwrapped above"),
                ReadOutcome::Value(value) => Outcome::ok(&FieldResult { target: p.target.clone(), value }),
                ReadOutcome::TimedOut => Outcome::err(&ErrorBody::new(
                    ErrorCode::ReadTimeout,
                    format!("reading {} on task {task} did not finish within {} ms; nothing changed — read again later", p.target, host.inner.config.action_timeout.as_millis()),
                ).with_details(json!({"taskId": &*task, "target": p.target}))),
                ReadOutcome::Failed(reason) | ReadOutcome::Absent(reason) => Outcome::err(&ErrorBody::new(
                    ErrorCode::ActionFailed,
                    format!("reading {} on task {task} failed: {reason}; nothing changed", p.target),
                )),
            };
            outcome.reply_line(Some(&request_id), run_id, ReceiptKind::None)
        }))
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
            return Ok(verification_reply(rx.clone()));
        }
        let pending = task.pending_outcome().cloned();
        let interrupted = task.history.iter().any(|h| h.result == "INTERRUPTED");
        if (pending.is_some() || interrupted) && task.earlier_run().is_some() {
            // The page of an earlier run is gone: nothing can be read to confirm it.
            let result = VerifyResult {
                observation: None,
                outcome: VerifyOutcome::Unknown,
                note: Some("the task belongs to an earlier run of the host, whose page is gone: nothing can be read to confirm it. Settle it outside Polaris and acknowledge it (polaris acknowledge), or leave it recorded".into()),
                pending_outcome: pending.map(|p| p.to_wire()),
                resolved: None,
                state: task.state(),
                task_id: tid.to_string(),
            };
            return Ok(Box::pin(std::future::ready(Outcome::ok(&result))));
        }
        let Some(pending) = pending else {
            let result = VerifyResult {
                observation: None,
                outcome: VerifyOutcome::None,
                note: None,
                pending_outcome: None,
                resolved: None,
                state: task.state(),
                task_id: tid.to_string(),
            };
            return Ok(Box::pin(std::future::ready(Outcome::ok(&result))));
        };
        let (tx, rx) = watch::channel(None);
        st.verifying.insert(tid.clone(), rx.clone());
        drop(guard);

        let host = self.clone();
        let deadline = Instant::now() + self.inner.config.action_timeout;
        // A local step sent without an expectation has nothing to read: nothing on the page
        // can confirm it.
        // The expectation is read on the tab the action acted on (SPEC §15), as it was sent.
        let tab = pending
            .params
            .get("tab")
            .and_then(serde_json::Value::as_u64)
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(0);
        let read = pending.expect.clone().map(|expect| {
            let read =
                self.inner
                    .executor
                    .observe_in(tid.clone(), tab, expect.subject.clone(), deadline);
            (expect, read)
        });
        tokio::spawn(async move {
            let (outcome, observation, note) = match read {
                None => (
                    VerifyOutcome::Unknown,
                    None,
                    Some("the step was sent as local with no expectation, so nothing on the page can confirm it; settle it outside Polaris and acknowledge it (outcome.acknowledge), or stop the task".to_owned()),
                ),
                Some((expect, read)) => {
                    let read = AssertUnwindSafe(read)
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|_| ReadOutcome::Failed("the read panicked".into()));
                    judge(&expect, read)
                }
            };
            let result = host.record_verification(&tid, pending, outcome, observation, note);
            tx.send_replace(Some(Outcome::ok(&result)));
        });
        Ok(verification_reply(rx))
    }

    /// Records a verification's verdict on the task (and the page's evidence of its pending
    /// action), journals the task's new state and tells the feed; the `task.verifyOutcome`
    /// result.
    fn record_verification(
        &self,
        tid: &TaskId,
        mut pending: PendingOutcome,
        outcome: VerifyOutcome,
        observation: Option<Observation>,
        note: Option<String>,
    ) -> VerifyResult {
        self.take_dialogs(
            tid,
            &RequestKey::new(&pending.request_id),
            Method::TaskVerifyOutcome,
        );
        // What the page sent for the action, late answers included (SPEC §16); a
        // confirmation ends the watch. `None` (no watch, or it ended when the task closed)
        // keeps what the pending outcome already holds.
        let evidence = self
            .inner
            .executor
            .evidence(tid, outcome != VerifyOutcome::Confirmed);
        let now = now_millis();
        let mut guard = self.lock();
        let st = &mut *guard;
        st.verifying.remove(tid);
        let task = st.tasks.get_mut(tid).expect("tasks are never removed");
        if let Some(evidence) = evidence {
            let flagged_before = pending
                .evidence
                .as_ref()
                .map_or(0, |e| e.duplicate_sends.len());
            if evidence.duplicate_sends.len() > flagged_before {
                // A duplicate send that arrived after the reply: the feed hears of it now.
                let event = DuplicateSendsEvent {
                    duplicate_sends: evidence.duplicate_sends.clone(),
                    method: pending.method.as_str().to_owned(),
                    request_id: pending.request_id.clone(),
                    task_id: tid.to_string(),
                };
                st.events
                    .publish("network.duplicateSends", now, || to_data(&event));
            }
            if let Some(p) = task
                .pending
                .front_mut()
                .filter(|p| p.request_id == pending.request_id)
            {
                p.evidence = Some(evidence.clone());
            }
            pending.evidence = Some(evidence);
        }
        task.apply_verification(VerifyRecord {
            at: now,
            outcome,
            observation: observation.clone(),
        });
        let result = VerifyResult {
            observation,
            outcome,
            note,
            pending_outcome: task.pending_outcome().map(|p| p.to_wire()),
            resolved: (outcome == VerifyOutcome::Confirmed).then(|| pending.to_wire()),
            state: task.state(),
            task_id: tid.to_string(),
        };
        let summary = task.summary();
        if let Some(j) = self.journal() {
            // The task's new state goes into the journal; nobody waits for it (after a
            // restart the task is interrupted either way).
            let record = TaskRecordData::of(task, TaskEvent::Updated, now);
            if let Err(e) = j.append(&record.record(self.run_id())) {
                self.journal_failed(&e);
            }
        }
        if outcome == VerifyOutcome::Confirmed {
            let resolved = PendingResolvedEvent {
                outcome: VerifyOutcome::Confirmed,
                request_id: pending.request_id.to_string(),
                task_id: tid.to_string(),
            };
            st.events
                .publish("pending.resolved", now, || to_data(&resolved));
            // In a fleet, a clear on any host must see it settled.
            self.settle_in_ledger(vec![resolved.request_id.clone()]);
        }
        st.events.publish("task.updated", now, || to_data(&summary));
        result
    }

    /// `page.snapshot`, `page.wait`, `page.screenshot` and `page.url`: a [`PageQuery`] the
    /// executor answers, bounded by the action deadline (a wait by its own `timeoutMs`, at most
    /// five deadlines), written out here.
    fn page_query(&self, request_id: &str, cmd: ReadCommand) -> Handled {
        let run_id = self.run_id();
        let method = cmd.method();
        let task_id = cmd.task_id().unwrap_or_default().to_owned();
        let tab = cmd.tab();
        let Some(task) = self.lock().tasks.shared_id(&task_id) else {
            return reject(Some(request_id), run_id, self.task_not_found(&task_id));
        };
        let started = Instant::now();
        let planned = match plan_page_query(cmd, self.inner.config.action_timeout, started) {
            Ok(planned) => planned,
            Err(refusal) => return reject(Some(request_id), run_id, refusal),
        };
        let read = self
            .inner
            .executor
            .query_in(task.clone(), tab, planned.query, planned.deadline);
        let host = self.clone();
        let request_id = request_id.to_owned();
        let (snapshot, wait_state) = (planned.snapshot, planned.wait_state);
        Handled::Later(Box::pin(async move {
            let run_id = host.run_id();
            let outcome = read.await;
            host.take_dialogs(&task, &RequestKey::new(&request_id), method);
            let outcome = query_outcome(&task, method, outcome, snapshot, wait_state, started);
            outcome.reply_line(Some(&request_id), run_id, ReceiptKind::None)
        }))
    }

    /// The refusal for a task ID this run does not know.
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
    pub fn hello(&self) -> HelloResult {
        HelloResult {
            capacity: self.inner.config.capacity,
            name: "polaris".to_owned(),
            protocol: PROTOCOL_VERSION,
            run_id: self.run_id().to_owned(),
            started_at: format_millis(self.started_at()),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// The `run.status` result (`current` set as though asked without a `runId`).
    pub fn run_status(&self) -> RunStatusResult {
        let journal = self.journal_status();
        let st = self.lock();
        RunStatusResult {
            journal,
            ledger: self.ledger_status(),
            current: true,
            executor: ExecutorStatus {
                kind: self.inner.executor.kind().to_owned(),
                mutations: self.inner.executor.mutations(),
            },
            receipts: st.receipt_counts(),
            run_id: self.run_id().to_owned(),
            started_at: format_millis(self.started_at()),
            tasks: st.tasks.counts(),
        }
    }

    /// The `receipt.status` result for a request ID.
    pub fn receipt_status(&self, request_id: &str) -> ReceiptStatusResult {
        let key = RequestKey::new(request_id);
        let st = self.lock();
        let mut v = ReceiptStatusResult {
            cleared_at: None,
            completed_at: None,
            first_seen_at: None,
            joins: None,
            method: None,
            ok: None,
            reason: None,
            replays: None,
            reply: None,
            request_id: request_id.to_owned(),
            run_id: None,
            state: ReceiptState::Unknown,
            task_id: None,
        };
        if let Some(r) = st.book.get(&key) {
            let outcome = r.outcome();
            v.state = if r.is_running() {
                ReceiptState::Running
            } else {
                ReceiptState::Completed
            };
            v.method = Some(r.method.as_str().to_owned());
            v.run_id = Some(st.book.run_of(r).map_or(self.run_id(), |r| r).to_owned());
            v.first_seen_at = Some(format_millis(r.first_seen));
            v.joins = Some(r.joins.into());
            v.replays = Some(r.replays.into());
            v.task_id = r.task_id.as_ref().map(|t| t.to_string());
            if let Some(o) = outcome {
                v.completed_at = Some(format_millis(r.completed_at));
                v.ok = Some(o.is_ok());
                v.reply = Some(StoredReply::of(&o));
            }
        } else if let Some((_, batch)) = st.book.tombstone(&key) {
            v.state = ReceiptState::Cleared;
            v.cleared_at = Some(format_millis(batch.at));
            v.reason = Some(batch.reason.to_string());
        }
        v
    }
}

/// What a verification's read says of the pending action's expectation (SPEC §4, §14):
/// `confirmed` when it holds, `not_observed` when the page was read and it does not, `unknown`
/// when the read failed. An expectation dispatched actions are checked against never held
/// before them (the executor refuses the action otherwise), so a value that holds now is one
/// the action could have made. A page that had to be opened again proves nothing by what it
/// lacks: a missing expectation there is `unknown`, with a note saying why.
fn judge(
    expect: &crate::protocol::Expect,
    read: ReadOutcome,
) -> (VerifyOutcome, Option<Observation>, Option<String>) {
    match read {
        ReadOutcome::Value(value) => {
            let obs = Observation {
                target: expect.subject.to_string(),
                value,
            };
            if expect.holds(&obs.value) {
                (VerifyOutcome::Confirmed, Some(obs), None)
            } else {
                (VerifyOutcome::NotObserved, Some(obs), None)
            }
        }
        // The page was read and the expected element is not on it: the expectation does not
        // hold (a submit that ended on an error page, say).
        ReadOutcome::Absent(_) => (VerifyOutcome::NotObserved, None, None),
        ReadOutcome::TimedOut | ReadOutcome::Failed(_) => (VerifyOutcome::Unknown, None, None),
        ReadOutcome::Reopened(inner) => {
            let reopened = "the task's page had died and was opened again to read it: a reopened page shows what a plain load of its address shows, which may not show an effect that happened on the server, so its not showing the expectation proves nothing";
            match judge(expect, *inner) {
                (VerifyOutcome::Confirmed, obs, _) => (
                    VerifyOutcome::Confirmed,
                    obs,
                    Some("read on the task's page opened again after it had died".to_owned()),
                ),
                (_, obs, _) => (VerifyOutcome::Unknown, obs, Some(reopened.to_owned())),
            }
        }
    }
}

/// The reply of a verification running detached: its result once it is sent.
fn verification_reply(
    rx: watch::Receiver<Option<Arc<Outcome>>>,
) -> BoxFuture<'static, Arc<Outcome>> {
    Box::pin(async move {
        wait_outcome(rx).await.unwrap_or_else(|| {
            Outcome::err(&ErrorBody::new(
                ErrorCode::Internal,
                "the verification ended without a result; call task.verifyOutcome again",
            ))
        })
    })
}

/// A page read as the executor is asked it, with what writing out its answer needs.
struct PlannedQuery {
    /// What the executor is asked.
    query: PageQuery,
    /// When it must have answered.
    deadline: Instant,
    /// A snapshot's format and size limit (`None` for other reads).
    snapshot: Option<(SnapshotFormat, usize)>,
    /// The state a wait waits for.
    wait_state: WaitState,
}

/// The [`PageQuery`] of a page read started at `started`, bounded by the action deadline (a
/// wait by its own `timeoutMs`, refused past five deadlines).
fn plan_page_query(
    cmd: ReadCommand,
    action_timeout: Duration,
    started: Instant,
) -> Result<PlannedQuery, ErrorBody> {
    let mut deadline = started + action_timeout;
    let mut wait_state = WaitState::Visible;
    let (query, snapshot) = match cmd {
        ReadCommand::PageSnapshot(p) => (
            PageQuery::Snapshot,
            Some((
                p.format,
                p.max_bytes.unwrap_or(SNAPSHOT_DEFAULT_BYTES) as usize,
            )),
        ),
        ReadCommand::PageWait(p) => {
            let longest = action_timeout * 5;
            let wanted = p.timeout_ms.map_or(action_timeout, Duration::from_millis);
            if wanted > longest {
                return Err(ErrorBody::new(
                    ErrorCode::BadRequest,
                    format!(
                        "invalid params for page.wait: `timeoutMs` {} is past this host's limit of {} ms (five action deadlines); wait again after it ends",
                        wanted.as_millis(),
                        longest.as_millis()
                    ),
                ));
            }
            deadline = started + wanted;
            wait_state = p.state;
            (
                PageQuery::Wait {
                    target: p.target,
                    text: p.text,
                    state: p.state,
                    until: deadline,
                },
                None,
            )
        }
        ReadCommand::PageScreenshot(p) => (PageQuery::Screenshot { target: p.target }, None),
        ReadCommand::PageTabs(_) => (PageQuery::Tabs, None),
        _ => (PageQuery::Url, None),
    };
    Ok(PlannedQuery {
        query,
        deadline,
        snapshot,
        wait_state,
    })
}

/// The outcome of a page read from what the executor answered.
fn query_outcome(
    task: &TaskId,
    method: Method,
    outcome: QueryOutcome,
    snapshot: Option<(SnapshotFormat, usize)>,
    wait_state: WaitState,
    started: Instant,
) -> Arc<Outcome> {
    let failed = |code: ErrorCode, why: String| {
        Outcome::err(&ErrorBody::new(code, why).with_details(json!({"taskId": &**task})))
    };
    match outcome {
        QueryOutcome::Snapshot { url, title, nodes } => {
            let (format, max_bytes) = snapshot.unwrap_or_default();
            Outcome::ok(&render_snapshot(task, url, title, nodes, format, max_bytes))
        }
        QueryOutcome::Waited => Outcome::ok(&WaitResult {
            task_id: task.to_string(),
            state: wait_state,
            waited_ms: started.elapsed().as_millis() as u64,
        }),
        QueryOutcome::Screenshot(data) => {
            let bytes = data.len() / 4 * 3;
            Outcome::ok(&ScreenshotResult {
                task_id: task.to_string(),
                mime_type: "image/png".into(),
                data,
                bytes,
            })
        }
        QueryOutcome::Tabs(tabs) => Outcome::ok(&PageTabsResult {
            task_id: task.to_string(),
            tabs,
        }),
        QueryOutcome::Url { url, title } => Outcome::ok(&PageUrlResult {
            task_id: task.to_string(),
            url,
            title,
        }),
        QueryOutcome::TimedOut => failed(
            ErrorCode::ReadTimeout,
            format!(
                "{method} on task {task} did not finish within {} ms; nothing changed — ask again",
                (Instant::now() - started).as_millis()
            ),
        ),
        QueryOutcome::Failed(why) => failed(
            ErrorCode::ActionFailed,
            format!("{method} on task {task} failed: {why}; nothing changed"),
        ),
        QueryOutcome::Refused(cause, why) => Outcome::err(
            &ErrorBody::new(
                ErrorCode::ActionFailed,
                format!("{method} on task {task} was not done: {why}"),
            )
            .with_delivery(Delivery::NotSent)
            .with_details(if cause.candidates().is_empty() {
                json!({"taskId": &**task, "cause": cause.as_str()})
            } else {
                json!({"taskId": &**task, "cause": cause.as_str(), "candidates": cause.candidates()})
            }),
        ),
    }
}
