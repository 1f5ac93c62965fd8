//! The replies an execution stores when the host itself failed it: the journal could not
//! record its begin (nothing ran), could not record its reply (it ran; uncertain), or the
//! execution failed inside the host; and the refusals of a task that does not accept a
//! request, at admission or when a queued request's turn comes. One home for their wording,
//! shared by admission, execution and the journaling.

use std::sync::Arc;

use serde_json::json;

use crate::journal;
use crate::protocol::{ErrorBody, ErrorCode, Method, Outcome};
use crate::tasks::Task;

/// The stored outcome of an execution whose begin the journal could not make durable: the
/// executor was never asked to act.
pub(super) fn not_begun(id: &str, method: Method, error: &journal::Error) -> Arc<Outcome> {
    Outcome::err(
        &ErrorBody::new(
            ErrorCode::Internal,
            format!(
                "{method} (request {id}) was not executed: the host's journal could not record it ({error}), so the host is stopping. Send it again under the same id once the host is back"
            ),
        )
        .with_delivery(crate::protocol::Delivery::NotExecuted)
        .with_details(json!({"requestId": id})),
    )
}

/// The answer to a copy whose stored reply the journal could not make durable: its effect is
/// uncertain (the execution ran), and the host is stopping.
pub(super) fn not_durable(id: &str, error: &journal::Error) -> Arc<Outcome> {
    Outcome::err(
        &ErrorBody::new(
            ErrorCode::Internal,
            format!(
                "request {id} was executed but the host's journal could not record its reply ({error}), so the host is stopping; its effect is uncertain. Do not resend it: once the host is back, read receipt.status for {id}"
            ),
        )
        .with_details(json!({"requestId": id})),
    )
}

/// The `INTERNAL` refusal an execution that failed inside the host stores.
pub(super) fn internal_error(
    id: &str,
    method: Method,
    task: Option<&str>,
    what: &str,
) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!(
            "the execution of {method} (request {id}) failed inside the host ({what}); its effect is uncertain. Do not resend it: read receipt.status for {id}{}",
            task.map(|t| format!(" and call task.verifyOutcome for task {t}")).unwrap_or_default()
        ),
    )
    .with_details(json!({"requestId": id, "taskId": task}))
}

/// The refusal stored for a request that was admitted while an earlier request of its task
/// was in flight and found, when its turn came, that the task no longer accepts it: the
/// earlier one ended uncertain (`TASK_BLOCKED`) or the task was closed (`TASK_CLOSED`).
/// Nothing was sent; unlike a refusal at admission, this one is stored, so the same ID
/// replays it.
pub(super) fn queued_refusal(task: &Task, method: Method, code: ErrorCode, id: &str) -> ErrorBody {
    let tid = &*task.id;
    let base = admission_error(task, method, code);
    let why = match (code, task.pending_outcome()) {
        (ErrorCode::TaskBlocked, Some(p)) => format!(
            "{method} (request {id}) was admitted while an earlier action of task {tid} was running and waited its turn; that action, {} (request {}), ended uncertain, so {method} was not sent. Its receipt keeps this answer: call task.verifyOutcome for task {tid}, then send {method} again under a fresh id if it is still wanted",
            p.method, p.request_id
        ),
        _ => format!(
            "{method} (request {id}) waited its turn behind an earlier action of task {tid}, and the task was {} by then, so {method} was not sent. Its receipt keeps this answer; task.status shows what the task did",
            task.state().as_str()
        ),
    };
    let mut details = base.details.clone().unwrap_or_else(|| json!({}));
    details["queued"] = json!(true);
    ErrorBody::new(code, why).with_details(details)
}

/// The refusal of a task that does not accept `method` in its state (blocked, finished, …).
pub(super) fn admission_error(task: &Task, method: Method, code: ErrorCode) -> ErrorBody {
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
            .with_details(json!({"taskId": tid, "pendingOutcome": pending.to_wire()}))
        }
        _ => match task.earlier_run() {
            Some(run) => ErrorBody::new(
                code,
                format!(
                    "task {tid} is interrupted: it belongs to run {run}, which stopped while it was open, so its page is gone; {method} was not sent. Start a new task (task.start) for new work; task.status shows what this one did"
                ),
            )
            .with_details(json!({"taskId": tid, "state": task.state().as_str(), "runId": run})),
            None => ErrorBody::new(
                code,
                format!(
                    "task {tid} is {}; {method} was not sent. Start a new task (task.start) for new work; task.status shows what this one did",
                    task.state().as_str()
                ),
            )
            .with_details(json!({"taskId": tid, "state": task.state().as_str()})),
        },
    }
}
