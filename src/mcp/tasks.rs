//! MCP Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663; SPEC §17) over
//! receipts: a mutating call not done within `--call-wait-ms` is answered as a task whose
//! `taskId` is its Polaris request ID, `tasks/get` reads that receipt from the host, and
//! `tasks/cancel` is acknowledged and never applied to host work.
//!
//! Nothing is kept here but the cancellations asked for: the receipt is the task record, so a
//! task survives a restart of the host (with its journal) or of this front.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use indexmap::IndexSet;
use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{json, Map, Value};

use super::results::{error_result, reply_result, ErrorFacts};
use crate::client::session::{Session, SessionReply};
use crate::protocol::results::{ReceiptState, ReceiptStatusResult};
use crate::protocol::{now_rfc3339, validate_id, Delivery, ErrorCode, Method, Reply};

/// The poll interval a task suggests: a quarter of the host's default action deadline, so a
/// client sees an action's end soon after the deadline that decides it.
pub(super) const POLL_INTERVAL: Duration =
    Duration::from_millis(crate::host::DEFAULT_ACTION_TIMEOUT_MS / 4);

/// How many cancelled task ids the front remembers (the oldest is forgotten first), so a
/// client cancelling without end cannot grow its memory.
const REMEMBERED_CANCELS: usize = 4096;

/// Why `tasks/cancel` changes nothing, as the log and the task's final result say it.
const CANCEL_NOT_APPLIED: &str = "tasks/cancel was acknowledged but not applied: Polaris never cancels host work (an action already sent to the page cannot be taken back), so the request runs to its end, once, and keeps its receipt";

/// Whether the client of this request declared the Tasks extension (at `initialize`, or in
/// the request's own `_meta` on protocol 2026-07-28); only such a client may get a task.
pub(super) fn client_takes_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks())
}

/// The answer to a mutating call still running after `--call-wait-ms`, for a client that takes
/// tasks: a `working` task named by the request ID.
pub(super) fn created(tool: &str, request_id: &str, created_at: &str) -> CallToolResponse {
    let task = Task::new(request_id, TaskStatus::Working, created_at, now_rfc3339())
        .with_poll_interval_ms(millis(POLL_INTERVAL))
        .with_status_message(running_message(tool, false));
    CallToolResponse::Task(CreateTaskResult::new(task))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What a working task says: `tool` runs on, and is not to be resent.
fn running_message(tool: &str, cancel_asked: bool) -> String {
    let what = tool;
    let mut m = format!(
        "{what} is running on the host, which finishes it whatever happens here; poll tasks/get until it is completed, and do not resend it"
    );
    if cancel_asked {
        m.push_str(". ");
        m.push_str(CANCEL_NOT_APPLIED);
    }
    m
}

/// A bridge method as the agent knows it: its tool's name.
fn tool_word(method: &str) -> &str {
    super::tools::tool_for_method(method).unwrap_or(method)
}

/// The task ids whose cancellation a client asked for: remembered only to say, in the task's
/// final result, that it was not applied.
#[derive(Clone, Default)]
pub(super) struct Cancels(Arc<Mutex<IndexSet<String>>>);

impl Cancels {
    fn set(&self) -> std::sync::MutexGuard<'_, IndexSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remember(&self, task_id: &str) {
        let mut set = self.set();
        if set.len() >= REMEMBERED_CANCELS && !set.contains(task_id) {
            set.shift_remove_index(0);
        }
        set.insert(task_id.to_owned());
    }

    fn asked(&self, task_id: &str) -> bool {
        self.set().contains(task_id)
    }
}

/// The receipt of `task_id`, read through the session (so a completed receipt settles the
/// task's gate as `request_status` would); a task id the host never saw is `-32602`, as
/// SEP-2663 asks.
async fn receipt(
    session: &Session,
    task_id: &str,
) -> Result<(ReceiptStatusResult, SessionReply), McpError> {
    if let Err(problem) = validate_id(task_id) {
        return Err(McpError::invalid_params(
            format!("unknown task {task_id:?}: a Polaris task id is a request ID ({problem})"),
            Some(json!({"taskId": task_id})),
        ));
    }
    let read = session
        .call(
            Method::ReceiptStatus.as_str(),
            json!({"requestId": task_id}),
        )
        .await
        .map_err(|e| {
            McpError::internal_error(
                format!(
                    "could not read the receipt of task {task_id} ({}: {}); the host finishes the request regardless — call tasks/get again once polaris serve answers",
                    e.code.as_str(),
                    e.message
                ),
                Some(json!({"taskId": task_id, "code": e.code.as_str()})),
            )
        })?;
    let status = match (
        &read.reply.error,
        read.reply.result_as::<ReceiptStatusResult>(),
    ) {
        (None, Ok(status)) => status,
        (Some(e), _) => {
            return Err(McpError::internal_error(
                format!(
                    "the host refused to read the receipt of task {task_id} ({}: {})",
                    e.code.as_str(),
                    e.message
                ),
                Some(json!({"taskId": task_id, "code": e.code.as_str()})),
            ))
        }
        (None, Err(e)) => {
            return Err(McpError::internal_error(
                format!("the receipt of task {task_id} could not be read ({e})"),
                None,
            ))
        }
    };
    if status.state == ReceiptState::Unknown {
        return Err(McpError::invalid_params(
            format!(
                "unknown task {task_id}: the host has no receipt for this request ID (a task id is the request_id of a tool call answered as a task)"
            ),
            Some(json!({"taskId": task_id})),
        ));
    }
    Ok((status, read))
}

/// `tasks/get`: the receipt as a task — `working` while it runs, `completed` with the tool's
/// result once it is stored (an `isError` result included: an uncertain outcome says
/// `OUTCOME_UNCERTAIN` and names `verify_outcome`).
pub(super) async fn get(
    session: &Session,
    cancels: &Cancels,
    task_id: &str,
) -> Result<GetTaskResult, McpError> {
    let (status, read) = receipt(session, task_id).await?;
    let cancel_asked = cancels.asked(task_id);
    let now = now_rfc3339();
    let created_at = status
        .first_seen_at
        .clone()
        .or_else(|| status.cleared_at.clone())
        .unwrap_or_else(|| now.clone());
    let updated_at = status
        .completed_at
        .clone()
        .or_else(|| status.cleared_at.clone())
        .unwrap_or(now);
    let mut more = Map::new();
    if cancel_asked {
        more.insert(
            "cancellation".into(),
            json!({"applied": false, "message": CANCEL_NOT_APPLIED}),
        );
    }
    if let Some(run) = &status.run_id {
        more.insert("run_id".into(), json!(run));
    }
    let task = Task::new(task_id, TaskStatus::Working, created_at, updated_at)
        .with_poll_interval_ms(millis(POLL_INTERVAL));
    let detailed = match (status.state, status.reply) {
        (ReceiptState::Completed, Some(stored)) => {
            let reply = Reply {
                id: Some(task_id.to_owned()),
                ok: stored.ok,
                result: stored.result,
                error: stored.error,
                meta: None,
            };
            let answer = SessionReply { reply, ..read };
            let result = reply_result(task_id, status.task_id.as_deref(), answer, more);
            let message = if result.is_error == Some(true) {
                "completed: the stored reply is an error; its next names the read to make"
            } else {
                "completed: the stored reply"
            };
            DetailedTask::new(
                task.with_status_message(message),
                TaskPayload::Completed {
                    result: as_object(&result)?,
                },
            )
        }
        (ReceiptState::Cleared, _) => {
            let message = format!(
                "the stored reply of {task_id} was cleared by an operator{}; it ran once and never runs again. request_status shows when it was cleared, and task_status of its task where the work stands; do not resend it",
                status
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
            let result = error_result(
                ErrorFacts {
                    code: ErrorCode::ReceiptCleared,
                    message: &message,
                    delivery: Delivery::Cleared,
                    request_id: task_id,
                    task_id: status.task_id.as_deref(),
                    details: None,
                },
                more,
            );
            DetailedTask::new(
                task.with_status_message(message.clone()),
                TaskPayload::Completed {
                    result: as_object(&result)?,
                },
            )
        }
        // Running (or completed without a reply to show, which the host never answers).
        _ => DetailedTask::new(
            task.with_status_message(running_message(
                status.method.as_deref().map_or("the call", tool_word),
                cancel_asked,
            )),
            TaskPayload::Working,
        ),
    };
    Ok(GetTaskResult::new(detailed))
}

fn as_object(result: &rmcp::model::CallToolResult) -> Result<JsonObject, McpError> {
    match serde_json::to_value(result) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) | Err(_) => Err(McpError::internal_error(
            "a tool result did not serialise as an object",
            None,
        )),
    }
}

/// `tasks/cancel`: acknowledged (SEP-2663 makes it cooperative) and never applied. The
/// request runs to its real end; the log says so now and the final result says so later.
pub(super) async fn cancel(
    session: &Session,
    cancels: &Cancels,
    task_id: &str,
) -> Result<(), McpError> {
    let (status, _) = receipt(session, task_id).await?;
    cancels.remember(task_id);
    tracing::warn!(
        task_id,
        state = status.state.as_str(),
        "{CANCEL_NOT_APPLIED}"
    );
    Ok(())
}
