//! Results: the `next` read that shows the current state after an error, and the tool result
//! built from a session's answer.

use rmcp::model::CallToolResult;
use serde_json::{json, Map, Value};

use super::keys::snake_keys;
use super::tools::{tool_for_method, TOOLS};
use crate::client::session::SessionReply;
use crate::client::ClientError;
use crate::protocol::results::NextRead;
use crate::protocol::{Delivery, ErrorCode};

pub(super) fn call(tool: &str, arguments: Value) -> Value {
    json!({"tool": tool, "arguments": arguments})
}

/// A bridge-form `{"method","params"}` read as the exact tool call.
pub(super) fn next_from_bridge(next: NextRead) -> Option<Value> {
    let tool = tool_for_method(&next.method)?;
    let params = match next.params {
        Value::Null => json!({}),
        params => params,
    };
    Some(call(tool, snake_keys(params)))
}

/// The read that shows the current state after an error.
pub(super) fn next_read(
    code: ErrorCode,
    delivery: Delivery,
    request_id: &str,
    task_id: Option<&str>,
    details: Option<&Value>,
) -> Value {
    if let Some(n) = details
        .and_then(NextRead::in_details)
        .and_then(next_from_bridge)
    {
        return n;
    }
    let by_request = || call("request_status", json!({"request_id": request_id}));
    match (delivery, task_id) {
        (Delivery::Unknown, _) => return by_request(),
        (Delivery::Uncertain, Some(t)) => return call("verify_outcome", json!({"task_id": t})),
        (Delivery::Uncertain, None) => return by_request(),
        _ => {}
    }
    match (code, task_id) {
        (ErrorCode::TaskBlocked, Some(t)) => call("verify_outcome", json!({"task_id": t})),
        (ErrorCode::RequestIdReused | ErrorCode::ShuttingDown, _) => by_request(),
        (ErrorCode::ReceiptCleared, None) => by_request(),
        (_, Some(t)) => call("task_status", json!({"task_id": t})),
        (_, None) => call("run_status", json!({})),
    }
}

pub(super) struct ErrorFacts<'a> {
    pub(super) code: ErrorCode,
    pub(super) message: &'a str,
    pub(super) delivery: Delivery,
    pub(super) request_id: &'a str,
    pub(super) task_id: Option<&'a str>,
    pub(super) details: Option<&'a Value>,
}

/// The host and the client speak of bridge methods (`receipt.status`, `task.verifyOutcome`);
/// an agent knows them as tools (`request_status`, `verify_outcome`).
pub(super) fn in_tool_words(message: &str) -> String {
    let mut out = message.to_owned();
    for spec in TOOLS {
        out = out.replace(spec.method.as_str(), spec.name);
    }
    out.replace("requestId", "request_id")
        .replace("taskId", "task_id")
        .replace("runId", "run_id")
}

pub(super) fn error_result(e: ErrorFacts<'_>, extra: Map<String, Value>) -> CallToolResult {
    let next = next_read(e.code, e.delivery, e.request_id, e.task_id, e.details);
    let mut body = json!({
        "code": e.code.as_str(),
        "message": in_tool_words(e.message),
        "delivery": e.delivery.as_str(),
        "automaticReplay": false,
        "request_id": e.request_id,
        "next": next,
    });
    if let Some(d) = e.details {
        let mut d = d.clone();
        if let Some(obj) = d.as_object_mut() {
            obj.remove("next");
        }
        body["details"] = snake_keys(d);
    }
    if let Some(obj) = body.as_object_mut() {
        obj.extend(extra);
    }
    CallToolResult::structured_error(body)
}

pub(super) fn client_error_result(e: &ClientError, task_id: Option<&str>) -> CallToolResult {
    error_result(
        ErrorFacts {
            code: e.code,
            message: &e.message,
            delivery: e.delivery,
            request_id: &e.request_id,
            task_id,
            details: e.details.as_ref(),
        },
        Map::new(),
    )
}

/// A refusal before anything was sent: the arguments do not fit the tool.
pub(super) fn bad_arguments(tool: &str, request_id: &str, problem: &str) -> CallToolResult {
    let message = format!(
        "the arguments of {tool} do not fit its input schema ({problem}); nothing was sent. Fix the arguments and call {tool} again"
    );
    let body = json!({
        "code": ErrorCode::BadRequest.as_str(),
        "message": message,
        "delivery": Delivery::NotSent.as_str(),
        "automaticReplay": false,
        "request_id": request_id,
        "next": call("request_status", json!({"request_id": request_id})),
    });
    CallToolResult::structured_error(body)
}

/// The tool result of a session's answer; `more` adds fields beside `request_id` (a task's
/// final result says there whether a cancellation was applied).
pub(super) fn reply_result(
    request_id: &str,
    task_id: Option<&str>,
    answer: SessionReply,
    more: Map<String, Value>,
) -> CallToolResult {
    let SessionReply {
        reply,
        run_change,
        settled,
    } = answer;
    let mut extra = more;
    if let Some(meta) = &reply.meta {
        extra.insert("run_id".into(), json!(meta.run_id));
        extra.insert("receipt".into(), json!(meta.receipt.as_str()));
    }
    if let Some(change) = &run_change {
        extra.insert(
            "run_changed".into(),
            json!({
                "previous_run_id": change.previous_run_id,
                "current_run_id": change.current_run_id,
                "task_id": change.task_id,
                "message": change.message(),
            }),
        );
    }
    if !settled.is_empty() {
        extra.insert(
            "settled".into(),
            settled
                .iter()
                .map(|s| json!({"request_id": s.request_id, "task_id": s.task_id, "how": s.how}))
                .collect(),
        );
    }
    match (reply.ok, &reply.error) {
        (false, Some(err)) => error_result(
            ErrorFacts {
                code: err.code,
                message: &err.message,
                delivery: err.delivery,
                request_id,
                task_id,
                details: err.details.as_ref(),
            },
            extra,
        ),
        _ => {
            let mut body = json!({"request_id": request_id});
            if let Some(obj) = body.as_object_mut() {
                obj.extend(extra);
            }
            body["result"] = snake_keys(reply.result.unwrap_or(Value::Null));
            // A screenshot travels as image content (SPEC §15); the structured result keeps
            // everything but the bytes.
            let mime = body["result"]
                .get("mime_type")
                .and_then(Value::as_str)
                .filter(|m| m.starts_with("image/"))
                .map(str::to_owned);
            let image = mime.and_then(|mime| {
                body["result"]
                    .as_object_mut()
                    .and_then(|r| r.remove("data"))
                    .and_then(|d| d.as_str().map(|d| (d.to_owned(), mime)))
            });
            let mut result = CallToolResult::structured(body);
            if let Some((data, mime)) = image {
                result
                    .content
                    .insert(0, rmcp::model::ContentBlock::image(data, mime));
            }
            result
        }
    }
}
