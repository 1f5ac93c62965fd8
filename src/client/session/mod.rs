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

mod settle;
#[cfg(test)]
mod tests;
mod types;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::{BridgeClient, ClientError};
use crate::protocol::{Delivery, ErrorCode, Method};

pub use types::{Ambiguity, AmbiguityCause, RunChange, SessionReply, Settled};

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
}
