//! The convenience session: a bridge client that remembers, per task, every result it could not
//! see the end of, and refuses to send further mutations on that task until a read settles it.
//!
//! The rule (SPEC §7): after an `unknown` (`BRIDGE_DISCONNECTED`, `BRIDGE_TIMEOUT`) or
//! `uncertain` (`OUTCOME_UNCERTAIN`, `INTERNAL`) result on a task, or after the caller stopped
//! waiting for a mutation that was still running, further mutations on that task end locally
//! with `CLIENT_BLOCKED_AMBIGUOUS` (`not_sent`). Reads always pass, and so does `task.stop`:
//! it repeats nothing, and it is the way out of a task whose outcome is never confirmed (the
//! host accepts it on a blocked task for the same reason; the ambiguity stays recorded). The ambiguity is settled
//! only by a read that shows the request's end:
//!
//! | read | settles request R when |
//! |---|---|
//! | `receipt.status` R | `completed` with a certain reply (ok, or `delivery` other than `uncertain`); `cleared`; `unknown` when R's connection broke (the host can no longer receive it) |
//! | `task.status` | R is in the history with a certain result, or with an uncertain one that is no longer pending |
//! | `task.verifyOutcome` | `confirmed` resolving R; `none` once R is known to have ended uncertain |
//! | any read of R or its task | the reply comes from another run than the task's: the run ended, and so did the receipts (reported as a run change) |
//!
//! A completed receipt whose reply is `uncertain` moves the ambiguity onto the host's pending
//! outcome: then only `task.verifyOutcome` (or `task.status` once it is resolved) settles it.
//!
//! The session keeps the `runId` of every task it started and of the last reply it saw; a
//! reply from another run is reported ([`RunChange`]), never papered over.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::{BridgeClient, ClientError};
use crate::protocol::results::{
    NextRead, ReceiptState, ReceiptStatusResult, TaskStartResult, TaskStatusResult, VerifyOutcome,
    VerifyResult,
};
use crate::protocol::{Delivery, ErrorCode, Method, Reply};

/// Why a request's end is not known to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmbiguityCause {
    /// The connection broke after the request was written (`BRIDGE_DISCONNECTED`).
    Disconnected,
    /// No reply came in time (`BRIDGE_TIMEOUT`).
    TimedOut,
    /// The caller stopped waiting while the request was still running (an in-progress result,
    /// or a cancelled MCP call).
    StillRunning,
    /// The host answered `delivery: uncertain`; the task is blocked on the host too.
    Uncertain,
}

impl AmbiguityCause {
    /// A short wire-friendly name.
    pub fn as_str(self) -> &'static str {
        match self {
            AmbiguityCause::Disconnected => "disconnected",
            AmbiguityCause::TimedOut => "timed_out",
            AmbiguityCause::StillRunning => "still_running",
            AmbiguityCause::Uncertain => "uncertain",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            AmbiguityCause::Disconnected => "lost its connection after it was sent",
            AmbiguityCause::TimedOut => "got no reply in time",
            AmbiguityCause::StillRunning => "was still running when its caller stopped waiting",
            AmbiguityCause::Uncertain => "ended with an uncertain outcome",
        }
    }
}

/// A mutation whose end the caller has not seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ambiguity {
    /// Its request ID.
    pub request_id: String,
    /// Its method, e.g. `page.press`.
    pub method: String,
    /// The task it acted on.
    pub task_id: String,
    /// Why its end is unknown.
    pub cause: AmbiguityCause,
}

impl Ambiguity {
    /// The read that settles it.
    pub fn next_read(&self) -> NextRead {
        if self.cause == AmbiguityCause::Uncertain {
            NextRead {
                method: Method::TaskVerifyOutcome.as_str().to_owned(),
                params: json!({"taskId": self.task_id}),
            }
        } else {
            NextRead {
                method: Method::ReceiptStatus.as_str().to_owned(),
                params: json!({"requestId": self.request_id}),
            }
        }
    }
}

/// A reply that came from another host run than the one the session knew.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunChange {
    /// The run the session (or the task) knew.
    pub previous_run_id: String,
    /// The run that answered now.
    pub current_run_id: String,
    /// The task whose kept run differs, when the reply was about one.
    pub task_id: Option<String>,
}

impl RunChange {
    /// One sentence for the caller.
    pub fn message(&self) -> String {
        let what = match &self.task_id {
            Some(t) => format!("task {t} belonged to run {}", self.previous_run_id),
            None => format!("the session last saw run {}", self.previous_run_id),
        };
        format!(
            "the host restarted: {what} and the host now runs {}; the old run's receipts and tasks are gone, so what its requests did cannot be read through Polaris — check the page or service itself before redoing any work in a new task",
            self.current_run_id
        )
    }
}

/// An ambiguity a read settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The request that was ambiguous.
    pub request_id: String,
    /// Its task.
    pub task_id: String,
    /// How it ended: `completed`, `cleared`, `never_arrived`, `confirmed` or `run_ended`.
    pub how: &'static str,
}

/// A host reply seen through the session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionReply {
    /// The reply as the host sent it.
    pub reply: Reply,
    /// Set when the reply came from another run than the session or the task knew.
    pub run_change: Option<RunChange>,
    /// Ambiguities this reply settled.
    pub settled: Vec<Settled>,
}

#[derive(Default)]
struct KeptTask {
    run_id: Option<String>,
    open: Vec<Ambiguity>,
}

#[derive(Default)]
struct State {
    run_id: Option<String>,
    tasks: HashMap<String, KeptTask>,
}

/// A bridge client with the ambiguity gate. Cheap to clone; clones share the connection and
/// the gate.
#[derive(Clone)]
pub struct Session {
    client: BridgeClient,
    state: Arc<Mutex<State>>,
}

fn task_of(params: &Value) -> Option<&str> {
    params.get("taskId").and_then(Value::as_str)
}

fn is_mutating(method: &str) -> bool {
    Method::from_str(method).is_ok_and(Method::is_mutating)
}

/// The result of an ok reply as the type of the read that was sent. A result that does not
/// read as that type settles nothing: the gate stays as it was, which is the safe way to be
/// wrong.
fn read_result<T: serde::de::DeserializeOwned>(reply: &Reply, method: &str) -> Option<T> {
    match reply.result_as::<T>() {
        Ok(result) => Some(result),
        Err(e) => {
            tracing::warn!("the result of {method} could not be read ({e}); it settles nothing");
            None
        }
    }
}

fn is_uncertain_code(code: &str) -> bool {
    code == ErrorCode::OutcomeUncertain.as_str() || code == ErrorCode::Internal.as_str()
}

impl Session {
    /// A session over `client`.
    pub fn new(client: BridgeClient) -> Session {
        Session {
            client,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// The client underneath.
    pub fn client(&self) -> &BridgeClient {
        &self.client
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The unsettled results on `task_id`, oldest first.
    pub fn ambiguities(&self, task_id: &str) -> Vec<Ambiguity> {
        self.lock()
            .tasks
            .get(task_id)
            .map(|t| t.open.clone())
            .unwrap_or_default()
    }

    /// The run the session kept for `task_id` (from its `task.start`).
    pub fn kept_run(&self, task_id: &str) -> Option<String> {
        self.lock()
            .tasks
            .get(task_id)
            .and_then(|t| t.run_id.clone())
    }

    /// The gate: `Err(CLIENT_BLOCKED_AMBIGUOUS)` when `method` mutates a task that has an
    /// unsettled result; reads and unknown tasks always pass.
    pub fn check(&self, request_id: &str, method: &str, params: &Value) -> Result<(), ClientError> {
        // task.stop repeats nothing: it is the way out of a task whose outcome stays
        // unconfirmed, and the host accepts it on a blocked task for the same reason.
        if !is_mutating(method) || method == Method::TaskStop.as_str() {
            return Ok(());
        }
        let Some(task_id) = task_of(params) else {
            return Ok(());
        };
        let st = self.lock();
        let Some(first) = st.tasks.get(task_id).and_then(|t| t.open.first()) else {
            return Ok(());
        };
        let next = first.next_read();
        let read = match first.cause {
            AmbiguityCause::Uncertain => format!("call task.verifyOutcome for task {task_id}"),
            _ => format!("read receipt.status for {}", first.request_id),
        };
        let message = format!(
            "{method} was not sent: on task {task_id}, {} (request {}) {} and nothing has settled it yet. Do not resend anything: {read}; once that read shows how it ended, send {method} again",
            first.method,
            first.request_id,
            first.cause.describe(),
        );
        Err(ClientError {
            code: ErrorCode::ClientBlockedAmbiguous,
            delivery: Delivery::NotSent,
            request_id: request_id.to_owned(),
            message,
            details: Some(json!({
                "requestId": request_id,
                "taskId": task_id,
                "blockingRequestId": first.request_id,
                "blockingMethod": first.method,
                "cause": first.cause.as_str(),
                "next": next,
            })),
        })
    }

    /// Records that the caller stopped waiting for a mutation still in flight (the in-progress
    /// result of the MCP front, or a cancelled call): the task stays gated until a read settles
    /// it.
    pub fn mark_unsettled(
        &self,
        request_id: &str,
        method: &str,
        task_id: &str,
        cause: AmbiguityCause,
    ) {
        let mut st = self.lock();
        let task = st.tasks.entry(task_id.to_owned()).or_default();
        match task.open.iter_mut().find(|a| a.request_id == request_id) {
            // Never downgrade what is already known (an uncertain end stays uncertain).
            Some(a) if a.cause == AmbiguityCause::Uncertain => {}
            Some(a) => a.cause = cause,
            None => task.open.push(Ambiguity {
                request_id: request_id.to_owned(),
                method: method.to_owned(),
                task_id: task_id.to_owned(),
                cause,
            }),
        }
    }

    /// Calls `method` under a fresh UUID, through the gate.
    pub async fn call(&self, method: &str, params: Value) -> Result<SessionReply, ClientError> {
        self.call_with_id(&uuid::Uuid::new_v4().to_string(), method, params)
            .await
    }

    /// Calls `method` under `request_id` (a re-query when the content is the same), through
    /// the gate. Never resends.
    pub async fn call_with_id(
        &self,
        request_id: &str,
        method: &str,
        params: Value,
    ) -> Result<SessionReply, ClientError> {
        self.check(request_id, method, &params)?;
        let result = self
            .client
            .call_with_id(request_id, method, params.clone())
            .await;
        self.observe(request_id, method, &params, result)
    }

    /// Learns from the end of a call made outside [`Session::call_with_id`] (the MCP front
    /// calls the gate and the client separately so the call can outlive its caller).
    pub fn observe(
        &self,
        request_id: &str,
        method: &str,
        params: &Value,
        result: Result<Reply, ClientError>,
    ) -> Result<SessionReply, ClientError> {
        let mutating = is_mutating(method);
        let task_id = task_of(params);
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                if let (true, Some(tid), Delivery::Unknown) = (mutating, task_id, e.delivery) {
                    let cause = if e.code == ErrorCode::BridgeTimeout {
                        AmbiguityCause::TimedOut
                    } else {
                        AmbiguityCause::Disconnected
                    };
                    self.mark_unsettled(request_id, method, tid, cause);
                }
                return Err(e);
            }
        };
        let mut st = self.lock();
        let mut run_change = None;
        let mut settled = Vec::new();
        let run = reply.meta.as_ref().map(|m| m.run_id.clone());
        if let Some(run) = &run {
            if let Some(prev) = st.run_id.replace(run.clone()) {
                if &prev != run {
                    run_change = Some(RunChange {
                        previous_run_id: prev,
                        current_run_id: run.clone(),
                        task_id: None,
                    });
                }
            }
        }

        // The task (or the request's task) this reply is about.
        let subject_request = (method == Method::ReceiptStatus.as_str())
            .then(|| params.get("requestId").and_then(Value::as_str))
            .flatten();
        let about_task: Option<String> = task_id.map(str::to_owned).or_else(|| {
            subject_request.and_then(|r| {
                st.tasks
                    .iter()
                    .find(|(_, t)| t.open.iter().any(|a| a.request_id == r))
                    .map(|(k, _)| k.clone())
            })
        });
        if let (Some(tid), Some(run)) = (&about_task, &run) {
            if let Some(task) = st.tasks.get_mut(tid) {
                if let Some(kept) = task.run_id.clone().filter(|k| k != run) {
                    run_change = Some(RunChange {
                        previous_run_id: kept,
                        current_run_id: run.clone(),
                        task_id: Some(tid.clone()),
                    });
                    // The run ended and its receipts with it: nothing in this run can act on
                    // the task, so its gate has nothing left to protect.
                    for a in task.open.drain(..) {
                        settled.push(Settled {
                            request_id: a.request_id,
                            task_id: tid.clone(),
                            how: "run_ended",
                        });
                    }
                    return Ok(SessionReply {
                        reply,
                        run_change,
                        settled,
                    });
                }
            }
        }

        match Method::from_str(method) {
            Ok(Method::TaskStart) if reply.ok => {
                if let Some(started) = read_result::<TaskStartResult>(&reply, method) {
                    st.tasks.entry(started.task_id).or_default().run_id = Some(started.run_id);
                }
            }
            Ok(m) if m.is_mutating() => {
                if let (Some(tid), Some(err)) = (task_id, reply.error.as_ref()) {
                    if err.delivery == Delivery::Uncertain {
                        drop(st);
                        self.mark_unsettled(request_id, method, tid, AmbiguityCause::Uncertain);
                        return Ok(SessionReply {
                            reply,
                            run_change,
                            settled,
                        });
                    }
                }
            }
            Ok(Method::ReceiptStatus) if reply.ok => {
                let status = read_result::<ReceiptStatusResult>(&reply, method);
                if let (Some(r), Some(tid), Some(res)) = (subject_request, &about_task, status) {
                    if let Some(task) = st.tasks.get_mut(tid) {
                        if let Some(pos) = task.open.iter().position(|a| a.request_id == r) {
                            let how = match res.state {
                                ReceiptState::Completed => {
                                    let uncertain = res
                                        .reply
                                        .as_ref()
                                        .and_then(|stored| stored.error.as_ref())
                                        .is_some_and(|e| e.delivery == Delivery::Uncertain);
                                    if uncertain {
                                        task.open[pos].cause = AmbiguityCause::Uncertain;
                                        None
                                    } else {
                                        Some("completed")
                                    }
                                }
                                ReceiptState::Cleared => Some("cleared"),
                                ReceiptState::Unknown
                                    if task.open[pos].cause == AmbiguityCause::Disconnected =>
                                {
                                    Some("never_arrived")
                                }
                                _ => None,
                            };
                            if let Some(how) = how {
                                let a = task.open.remove(pos);
                                settled.push(Settled {
                                    request_id: a.request_id,
                                    task_id: tid.clone(),
                                    how,
                                });
                            }
                        }
                    }
                }
            }
            Ok(Method::TaskStatus) if reply.ok => {
                let status = read_result::<TaskStatusResult>(&reply, method);
                if let (Some(tid), Some(res)) = (task_id, status) {
                    let pending: Vec<&str> = res
                        .pending_outcome
                        .iter()
                        .chain(&res.more_pending_outcomes)
                        .map(|p| p.request_id.as_str())
                        .collect();
                    if let Some(task) = st.tasks.get_mut(tid) {
                        let mut keep = Vec::new();
                        for mut a in task.open.drain(..) {
                            let last = res
                                .history
                                .iter()
                                .rev()
                                .find(|h| h.request_id == a.request_id && h.method == a.method);
                            match last.map(|h| h.result.as_str()) {
                                Some(code) if is_uncertain_code(code) => {
                                    if pending.contains(&a.request_id.as_str()) {
                                        a.cause = AmbiguityCause::Uncertain;
                                        keep.push(a);
                                    } else {
                                        settled.push(Settled {
                                            request_id: a.request_id,
                                            task_id: tid.to_owned(),
                                            how: "confirmed",
                                        });
                                    }
                                }
                                Some(_) => settled.push(Settled {
                                    request_id: a.request_id,
                                    task_id: tid.to_owned(),
                                    how: "completed",
                                }),
                                None => keep.push(a),
                            }
                        }
                        task.open = keep;
                    }
                }
            }
            Ok(Method::TaskVerifyOutcome) if reply.ok => {
                let verified = read_result::<VerifyResult>(&reply, method);
                if let (Some(tid), Some(res)) = (task_id, verified) {
                    let resolved = res.resolved.as_ref().map(|p| p.request_id.as_str());
                    let pending = res.pending_outcome.as_ref().map(|p| p.request_id.as_str());
                    if let Some(task) = st.tasks.get_mut(tid) {
                        let mut keep = Vec::new();
                        for mut a in task.open.drain(..) {
                            let done = (res.outcome == VerifyOutcome::Confirmed
                                && resolved == Some(a.request_id.as_str()))
                                || (res.outcome == VerifyOutcome::None
                                    && a.cause == AmbiguityCause::Uncertain);
                            if done {
                                settled.push(Settled {
                                    request_id: a.request_id,
                                    task_id: tid.to_owned(),
                                    how: "confirmed",
                                });
                            } else {
                                if pending == Some(a.request_id.as_str()) {
                                    a.cause = AmbiguityCause::Uncertain;
                                }
                                keep.push(a);
                            }
                        }
                        task.open = keep;
                    }
                }
            }
            _ => {}
        }
        Ok(SessionReply {
            reply,
            run_change,
            settled,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ErrorBody, Meta, ReceiptKind};

    fn session() -> Session {
        Session::new(BridgeClient::new(std::path::Path::new(
            "/nonexistent-polaris-test",
        )))
    }

    fn ok(run: &str, result: Value) -> Reply {
        Reply {
            id: Some("x".into()),
            ok: true,
            result: Some(result),
            error: None,
            meta: Some(Meta {
                run_id: run.into(),
                receipt: ReceiptKind::None,
            }),
        }
    }

    fn err(run: &str, code: ErrorCode) -> Reply {
        Reply {
            id: Some("x".into()),
            ok: false,
            result: None,
            error: Some(ErrorBody::new(code, "m")),
            meta: Some(Meta {
                run_id: run.into(),
                receipt: ReceiptKind::New,
            }),
        }
    }

    fn started(s: &Session, task: &str, run: &str) {
        s.observe(
            "s1",
            "task.start",
            &json!({"title": "t"}),
            Ok(ok(
                run,
                json!({"taskId": task, "runId": run, "state": "running"}),
            )),
        )
        .unwrap();
    }

    fn press() -> Value {
        json!({"taskId": "T", "key": "Enter", "target": "#title", "expect": {"target": "#status", "contains": "Saved"}})
    }

    fn lost(id: &str) -> Result<Reply, ClientError> {
        Err(ClientError::new(
            ErrorCode::BridgeDisconnected,
            id,
            "lost".into(),
        ))
    }

    #[test]
    fn unknown_results_gate_mutations_but_not_reads() {
        let s = session();
        started(&s, "T", "A");
        assert!(s
            .check(
                "n1",
                "page.fill",
                &json!({"taskId": "T", "target": "#a", "value": "v"})
            )
            .is_ok());
        assert!(s.observe("r1", "page.press", &press(), lost("r1")).is_err());
        let e = s
            .check(
                "n2",
                "page.fill",
                &json!({"taskId": "T", "target": "#a", "value": "v"}),
            )
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::ClientBlockedAmbiguous);
        assert_eq!(e.delivery, Delivery::NotSent);
        assert_eq!(e.request_id, "n2");
        let d = e.details.unwrap();
        assert_eq!(d["blockingRequestId"], "r1");
        assert_eq!(
            d["next"],
            json!({"method": "receipt.status", "params": {"requestId": "r1"}})
        );
        // Finishing is a mutation too; stopping (the way out), reads and other tasks pass.
        assert!(s
            .check("n3", "task.finish", &json!({"taskId": "T"}))
            .is_err());
        assert!(s
            .check("n4", "task.stop", &json!({"taskId": "T", "reason": "x"}))
            .is_ok());
        assert!(s
            .check("n5", "task.status", &json!({"taskId": "T"}))
            .is_ok());
        assert!(s
            .check("n6", "page.read", &json!({"taskId": "T", "target": "#a"}))
            .is_ok());
        assert!(s
            .check(
                "n7",
                "page.fill",
                &json!({"taskId": "U", "target": "#a", "value": "v"})
            )
            .is_ok());
        assert!(s
            .check("n8", "task.start", &json!({"title": "new"}))
            .is_ok());
    }

    #[test]
    fn a_completed_receipt_settles_and_a_running_one_does_not() {
        let s = session();
        started(&s, "T", "A");
        let _ = s.observe("r1", "page.press", &press(), lost("r1"));
        let q = json!({"requestId": "r1"});
        let r = s
            .observe(
                "q1",
                "receipt.status",
                &q,
                Ok(ok("A", json!({"requestId": "r1", "state": "running"}))),
            )
            .unwrap();
        assert!(r.settled.is_empty());
        assert!(s
            .check(
                "n",
                "page.fill",
                &json!({"taskId": "T", "target": "#a", "value": "v"})
            )
            .is_err());
        let done = json!({"requestId": "r1", "state": "completed", "ok": true, "reply": {"ok": true, "result": {}}});
        let r = s
            .observe("q2", "receipt.status", &q, Ok(ok("A", done)))
            .unwrap();
        assert_eq!(
            r.settled,
            vec![Settled {
                request_id: "r1".into(),
                task_id: "T".into(),
                how: "completed"
            }]
        );
        assert!(s
            .check(
                "n",
                "page.fill",
                &json!({"taskId": "T", "target": "#a", "value": "v"})
            )
            .is_ok());
    }

    #[test]
    fn an_uncertain_end_needs_verification() {
        let s = session();
        started(&s, "T", "A");
        s.observe(
            "r1",
            "page.press",
            &press(),
            Ok(err("A", ErrorCode::OutcomeUncertain)),
        )
        .unwrap();
        let e = s
            .check(
                "n",
                "page.fill",
                &json!({"taskId": "T", "target": "#a", "value": "v"}),
            )
            .unwrap_err();
        assert_eq!(e.details.unwrap()["next"]["method"], "task.verifyOutcome");
        // The receipt is completed, but uncertain: not settled.
        let stored = json!({"requestId": "r1", "state": "completed", "ok": false,
            "reply": {"ok": false, "error": {"code": "OUTCOME_UNCERTAIN", "delivery": "uncertain"}}});
        let r = s
            .observe(
                "q",
                "receipt.status",
                &json!({"requestId": "r1"}),
                Ok(ok("A", stored)),
            )
            .unwrap();
        assert!(r.settled.is_empty());
        let t = json!({"taskId": "T"});
        let r = s.observe("v1", "task.verifyOutcome", &t, Ok(ok("A", json!({"taskId": "T", "outcome": "not_observed", "state": "blocked", "pendingOutcome": {"requestId": "r1"}})))).unwrap();
        assert!(r.settled.is_empty());
        let r = s.observe("v2", "task.verifyOutcome", &t, Ok(ok("A", json!({"taskId": "T", "outcome": "confirmed", "state": "running", "resolved": {"requestId": "r1"}})))).unwrap();
        assert_eq!(r.settled.len(), 1);
        assert!(s.ambiguities("T").is_empty());
    }

    #[test]
    fn task_status_settles_from_the_history() {
        let s = session();
        started(&s, "T", "A");
        let _ = s.observe("r1", "page.press", &press(), lost("r1"));
        let t = json!({"taskId": "T"});
        let none = json!({"taskId": "T", "state": "running", "history": []});
        assert!(s
            .observe("q", "task.status", &t, Ok(ok("A", none)))
            .unwrap()
            .settled
            .is_empty());
        let blocked = json!({"taskId": "T", "state": "blocked", "pendingOutcome": {"requestId": "r1"},
            "history": [{"requestId": "r1", "method": "page.press", "result": "OUTCOME_UNCERTAIN"}]});
        assert!(s
            .observe("q", "task.status", &t, Ok(ok("A", blocked)))
            .unwrap()
            .settled
            .is_empty());
        assert_eq!(s.ambiguities("T")[0].cause, AmbiguityCause::Uncertain);
        let resolved = json!({"taskId": "T", "state": "running",
            "history": [{"requestId": "r1", "method": "page.press", "result": "OUTCOME_UNCERTAIN"},
                        {"requestId": "r1", "method": "task.verifyOutcome", "result": "confirmed"}]});
        assert_eq!(
            s.observe("q", "task.status", &t, Ok(ok("A", resolved)))
                .unwrap()
                .settled
                .len(),
            1
        );
    }

    #[test]
    fn unknown_receipts_settle_only_after_a_broken_connection() {
        let s = session();
        started(&s, "T", "A");
        let q = |id: &str| json!({"requestId": id});
        let unknown = |id: &str| Ok(ok("A", json!({"requestId": id, "state": "unknown"})));
        let _ = s.observe(
            "r1",
            "page.press",
            &press(),
            Err(ClientError::new(
                ErrorCode::BridgeTimeout,
                "r1",
                "slow".into(),
            )),
        );
        assert!(s
            .observe("q", "receipt.status", &q("r1"), unknown("r1"))
            .unwrap()
            .settled
            .is_empty());
        let _ = s.observe("r1", "page.press", &press(), lost("r1"));
        let r = s
            .observe("q", "receipt.status", &q("r1"), unknown("r1"))
            .unwrap();
        assert_eq!(r.settled[0].how, "never_arrived");
    }

    #[test]
    fn a_new_run_is_reported_and_ends_the_gate() {
        let s = session();
        started(&s, "T", "A");
        let _ = s.observe("r1", "page.press", &press(), lost("r1"));
        let r = s
            .observe(
                "q",
                "receipt.status",
                &json!({"requestId": "r1"}),
                Ok(ok("B", json!({"requestId": "r1", "state": "unknown"}))),
            )
            .unwrap();
        let change = r.run_change.unwrap();
        assert_eq!(
            (
                change.previous_run_id.as_str(),
                change.current_run_id.as_str()
            ),
            ("A", "B")
        );
        assert_eq!(change.task_id.as_deref(), Some("T"));
        assert!(change.message().contains("restarted"));
        assert_eq!(r.settled[0].how, "run_ended");
    }

    #[test]
    fn still_running_never_downgrades_an_uncertain_end() {
        let s = session();
        s.mark_unsettled("r1", "page.press", "T", AmbiguityCause::Uncertain);
        s.mark_unsettled("r1", "page.press", "T", AmbiguityCause::StillRunning);
        assert_eq!(s.ambiguities("T")[0].cause, AmbiguityCause::Uncertain);
        assert_eq!(s.ambiguities("T").len(), 1);
    }
}
