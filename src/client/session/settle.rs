//! Settling: how the end of each call (a mutation's result, or one of the reads in the table
//! of [`super`]) opens or closes the ambiguities the gate keeps.

use std::str::FromStr;

use serde_json::Value;

use super::{is_mutating, task_of, KeptTask, Session, State};
use super::{AmbiguityCause, RunChange, SessionReply, Settled};
use crate::client::ClientError;
use crate::protocol::results::{
    ReceiptState, ReceiptStatusResult, TaskStartResult, TaskStatusResult, VerifyOutcome,
    VerifyResult,
};
use crate::protocol::{Delivery, ErrorCode, Method, Reply};

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

/// The call a reply ends, as settling reads it.
struct Call<'a> {
    /// The call's request ID.
    request_id: &'a str,
    /// Its method, as sent.
    method: &'a str,
    /// The task its params name, if any.
    task_id: Option<&'a str>,
    /// The request a `receipt.status` asks about.
    subject_request: Option<&'a str>,
}

impl Session {
    /// Learns from the end of a call made outside [`Session::call_with_id`] (the MCP front
    /// calls the gate and the client separately so the call can outlive its caller).
    pub fn observe(
        &self,
        request_id: &str,
        method: &str,
        params: &Value,
        result: Result<Reply, ClientError>,
    ) -> Result<SessionReply, ClientError> {
        let call = Call {
            request_id,
            method,
            task_id: task_of(params),
            subject_request: subject_request(method, params),
        };
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                self.unsettle_if_unknown(&call, &e);
                return Err(e);
            }
        };
        let mut st = self.lock();
        let mut settled = Vec::new();
        let run = reply.meta.as_ref().map(|m| m.run_id.clone());
        let mut run_change = run.as_ref().and_then(|run| keep_run(&mut st, run));
        // The task (or the request's task) this reply is about.
        let about_task = task_about(&st, &call);
        if let (Some(tid), Some(run)) = (&about_task, &run) {
            if let Some(change) = end_run_of_task(&mut st, tid, run, &mut settled) {
                run_change = Some(change);
                return Ok(SessionReply {
                    reply,
                    run_change,
                    settled,
                });
            }
        }
        match Method::from_str(method) {
            Ok(Method::TaskStart) if reply.ok => keep_started_task(&mut st, &reply, method),
            Ok(m) if m.is_mutating() => {
                if let (Some(tid), Some(err)) = (call.task_id, reply.error.as_ref()) {
                    if err.delivery == Delivery::Uncertain {
                        drop(st);
                        self.mark_unsettled(request_id, method, tid, AmbiguityCause::Uncertain);
                    }
                }
            }
            Ok(read) if reply.ok => {
                let about_task = about_task.as_deref();
                settle_by_read(&mut st, read, &call, about_task, &reply, &mut settled);
            }
            _ => {}
        }
        Ok(SessionReply {
            reply,
            run_change,
            settled,
        })
    }

    /// A mutation that got no reply and may or may not have arrived leaves its task unsettled:
    /// timed out, or disconnected.
    fn unsettle_if_unknown(&self, call: &Call<'_>, e: &ClientError) {
        if let (true, Some(tid), Delivery::Unknown) =
            (is_mutating(call.method), call.task_id, e.delivery)
        {
            let cause = if e.code == ErrorCode::BridgeTimeout {
                AmbiguityCause::TimedOut
            } else {
                AmbiguityCause::Disconnected
            };
            self.mark_unsettled(call.request_id, call.method, tid, cause);
        }
    }
}

/// The request a `receipt.status` call asks about, from its params.
fn subject_request<'p>(method: &str, params: &'p Value) -> Option<&'p str> {
    (method == Method::ReceiptStatus.as_str())
        .then(|| params.get("requestId").and_then(Value::as_str))
        .flatten()
}

/// Keeps `run` as the run last heard from; a change when it is not the one heard from before.
fn keep_run(st: &mut State, run: &str) -> Option<RunChange> {
    let prev = st.run_id.replace(run.to_owned())?;
    (prev != run).then(|| RunChange {
        previous_run_id: prev,
        current_run_id: run.to_owned(),
        task_id: None,
    })
}

/// The task a reply is about: the one the call names, or the one whose open ambiguities hold
/// the request a `receipt.status` asks about.
fn task_about(st: &State, call: &Call<'_>) -> Option<String> {
    call.task_id.map(str::to_owned).or_else(|| {
        call.subject_request.and_then(|r| {
            st.tasks
                .iter()
                .find(|(_, t)| t.open.iter().any(|a| a.request_id == r))
                .map(|(k, _)| k.clone())
        })
    })
}

/// When task `tid` was started in another run than `run`, settles all its ambiguities as
/// `run_ended` and returns the change: the run ended and its receipts with it, so nothing in
/// this run can act on the task, and its gate has nothing left to protect.
fn end_run_of_task(
    st: &mut State,
    tid: &str,
    run: &str,
    settled: &mut Vec<Settled>,
) -> Option<RunChange> {
    let task = st.tasks.get_mut(tid)?;
    let kept = task.run_id.clone().filter(|k| k != run)?;
    for a in task.open.drain(..) {
        settled.push(Settled {
            request_id: a.request_id,
            task_id: tid.to_owned(),
            how: "run_ended",
        });
    }
    Some(RunChange {
        previous_run_id: kept,
        current_run_id: run.to_owned(),
        task_id: Some(tid.to_owned()),
    })
}

/// Keeps the run a `task.start` reply says its task was started in.
fn keep_started_task(st: &mut State, reply: &Reply, method: &str) {
    if let Some(started) = read_result::<TaskStartResult>(reply, method) {
        st.tasks.entry(started.task_id).or_default().run_id = Some(started.run_id);
    }
}

/// Settles what the ok reply of a read that settles ambiguities (`receipt.status`,
/// `task.status`, `task.verifyOutcome`) shows; other reads settle nothing.
fn settle_by_read(
    st: &mut State,
    read: Method,
    call: &Call<'_>,
    about_task: Option<&str>,
    reply: &Reply,
    settled: &mut Vec<Settled>,
) {
    let method = call.method;
    match read {
        Method::ReceiptStatus => {
            let status = read_result::<ReceiptStatusResult>(reply, method);
            if let (Some(r), Some(tid), Some(res)) = (call.subject_request, about_task, status) {
                if let Some(task) = st.tasks.get_mut(tid) {
                    settle_by_receipt_status(task, tid, r, &res, settled);
                }
            }
        }
        Method::TaskStatus => {
            let status = read_result::<TaskStatusResult>(reply, method);
            if let (Some(tid), Some(res)) = (call.task_id, status) {
                if let Some(task) = st.tasks.get_mut(tid) {
                    settle_by_task_status(task, tid, &res, settled);
                }
            }
        }
        Method::TaskVerifyOutcome => {
            let verified = read_result::<VerifyResult>(reply, method);
            if let (Some(tid), Some(res)) = (call.task_id, verified) {
                if let Some(task) = st.tasks.get_mut(tid) {
                    settle_by_verification(task, tid, &res, settled);
                }
            }
        }
        _ => {}
    }
}

/// Settles the ambiguity of request `r` of task `tid` from its `receipt.status`: its receipt
/// completed (unless with an uncertain outcome, which keeps it open as uncertain), was cleared,
/// or never arrived at a host that lost the connection.
fn settle_by_receipt_status(
    task: &mut KeptTask,
    tid: &str,
    r: &str,
    res: &ReceiptStatusResult,
    settled: &mut Vec<Settled>,
) {
    let Some(pos) = task.open.iter().position(|a| a.request_id == r) else {
        return;
    };
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
        ReceiptState::Unknown if task.open[pos].cause == AmbiguityCause::Disconnected => {
            Some("never_arrived")
        }
        _ => None,
    };
    if let Some(how) = how {
        let a = task.open.remove(pos);
        settled.push(Settled {
            request_id: a.request_id,
            task_id: tid.to_owned(),
            how,
        });
    }
}

/// Settles the ambiguities of task `tid` from its `task.status`: each request its history shows
/// ended is settled, unless it ended uncertain and is still a pending outcome; one in flight or
/// not in the history stays open.
fn settle_by_task_status(
    task: &mut KeptTask,
    tid: &str,
    res: &TaskStatusResult,
    settled: &mut Vec<Settled>,
) {
    let pending: Vec<&str> = res
        .pending_outcome
        .iter()
        .chain(&res.more_pending_outcomes)
        .map(|p| p.request_id.as_str())
        .collect();
    let mut keep = Vec::new();
    for mut a in task.open.drain(..) {
        let last = res
            .history
            .iter()
            .rev()
            .find(|h| h.request_id == a.request_id && h.method == a.method);
        let running = res.in_flight.iter().any(|f| f.request_id == a.request_id);
        match last.map(|h| h.result.as_str()) {
            // Still in flight (SPEC §14): nothing about it is known yet.
            _ if running => keep.push(a),
            Some("running") => keep.push(a),
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

/// Settles the ambiguities of task `tid` from its `task.verifyOutcome`: the outcome it confirmed,
/// or every uncertain one when it found none pending; the pending one it names stays open as
/// uncertain.
fn settle_by_verification(
    task: &mut KeptTask,
    tid: &str,
    res: &VerifyResult,
    settled: &mut Vec<Settled>,
) {
    let resolved = res.resolved.as_ref().map(|p| p.request_id.as_str());
    let pending = res.pending_outcome.as_ref().map(|p| p.request_id.as_str());
    let mut keep = Vec::new();
    for mut a in task.open.drain(..) {
        let done = (res.outcome == VerifyOutcome::Confirmed
            && resolved == Some(a.request_id.as_str()))
            || (res.outcome == VerifyOutcome::None && a.cause == AmbiguityCause::Uncertain);
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
