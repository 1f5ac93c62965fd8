//! `polaris mcp`: the MCP front on stdio, for agents.
//!
//! It turns MCP `tools/call` requests into bridge requests through the convenience
//! [`Session`], so an agent gets the same guarantees as a library caller:
//!
//! - The MCP JSON-RPC id and the bridge request ID are different numbers. Every mutating call
//!   gets a fresh UUID unless the agent passes `request_id`; a resent `tools/call` (or a reused
//!   JSON-RPC id) is a new request and executes again. Only the same `request_id` with the same
//!   arguments is a re-query, answered from the receipt.
//! - Every result carries `request_id` in `structuredContent` (and the same JSON as text).
//!   Host and bridge errors are tool results with `isError: true` holding `code`, `delivery`,
//!   `automaticReplay: false`, `request_id` and `next` — the exact tool call that reads the
//!   current state.
//! - A mutation still running after `--call-wait-ms` returns `{"state":"running",…}`; the bridge
//!   call goes on in the background (the host executes it regardless) and the task stays gated
//!   until `request_status` shows how it ended.
//! - An MCP cancellation never cancels host work: bridge calls run detached from the MCP
//!   request. A cancelled mutation leaves its task gated like an in-progress one.
//! - Logs go to stderr; stdout carries only MCP messages.
//! - Every line read gets exactly one answer (a notification or response none, as JSON-RPC
//!   says): a thin line screen in front of rmcp answers what rmcp would skip in silence or
//!   answer without the request's id — invalid UTF-8, an empty line or malformed JSON get
//!   `-32700` with `id: null`, a `tools/call` without `name` or with non-object `arguments`
//!   `-32602`.
//! - A host refusal keeps its own code and delivery: a `FRAME_TOO_LARGE` is `not_executed`
//!   and leaves the task open to the next call.
//!
//! All `rmcp` types stay inside this module: the SDK changes fast and is pinned exactly in
//! `Cargo.toml`.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::client::session::{AmbiguityCause, Session, SessionReply};
use crate::client::{BridgeClient, ClientError, DEFAULT_CALL_TIMEOUT};
use crate::protocol::results::NextRead;
use crate::protocol::{validate_id, Delivery, ErrorCode, Method};

/// Default `--call-wait-ms`: how long a mutating tool call waits before it answers "running".
pub const DEFAULT_CALL_WAIT_MS: u64 = 20_000;

/// How `polaris mcp` runs.
#[derive(Clone, Debug)]
pub struct McpOptions {
    /// The host's socket directory.
    pub socket_dir: PathBuf,
    /// How long a mutating call waits for its reply before answering `{"state":"running"}`.
    pub call_wait: Duration,
}

// ---------------------------------------------------------------------------------------------
// Tool arguments: the params of SPEC §4 in snake_case. Field names are exactly the snake_case
// of the host's camelCase names, so translating is a mechanical key rename.

/// The fixture page's behaviour for a new task (tests and demos).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FixtureArgs {
    /// The submit applies after this many milliseconds (0–60000), even after the action's
    /// deadline has passed (a late success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    submit_delay_ms: Option<u64>,
    /// The submit is lost and never applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    drop_submit: Option<bool>,
    /// The backend rejects the submit definitively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fail_submit: Option<bool>,
    /// Every read takes this many milliseconds (0–60000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    read_delay_ms: Option<u64>,
}

/// The observation that shows an action took effect: `target` plus exactly one of `equals`
/// or `contains`.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ExpectArgs {
    /// The selector to read, e.g. `#status`.
    target: String,
    /// The value must equal this exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    equals: Option<String>,
    /// The value must contain this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contains: Option<String>,
}

const REQUEST_ID_DOC: &str = "Omit for a new request (a fresh UUID is minted and returned). Pass the request_id of an earlier call, with the very same arguments, only to re-query it: the host answers from its receipt and executes nothing again.";

macro_rules! mutating_args {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Deserialize, Serialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        struct $name {
            $($(#[$fdoc])* $field: $ty,)*
            #[doc = "Omit for a new request (a fresh UUID is minted and returned). Pass the request_id of an earlier call, with the very same arguments, only to re-query it: the host answers from its receipt and executes nothing again."]
            #[serde(default, skip_serializing)]
            request_id: Option<String>,
        }
        impl ToolArgs for $name {
            fn request_id(&self) -> Option<&str> {
                self.request_id.as_deref()
            }
        }
    };
}

trait ToolArgs: DeserializeOwned + Serialize + JsonSchema + 'static {
    /// The caller's bridge request ID, for mutating tools.
    fn request_id(&self) -> Option<&str> {
        None
    }
}

mutating_args!(
    /// `task_start` arguments.
    TaskStartArgs {
        /// What the task is for (1–200 characters).
        title: String,
        /// The page the task works on: an http, https or file URL (at most 8 KiB), required
        /// when the host runs the Chromium executor, which opens it in a fresh browser context.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// Fixture page behaviour (the embedded executor only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fixture: Option<FixtureArgs>,
    }
);

mutating_args!(
    /// `page_fill` arguments.
    PageFillArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// The field selector, e.g. `#title`.
        target: String,
        /// The text to put in the field.
        value: String,
    }
);

mutating_args!(
    /// `page_click` arguments.
    PageClickArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// What to click, e.g. `#submit`.
        target: String,
        /// The observation that shows the click took effect.
        expect: ExpectArgs,
    }
);

mutating_args!(
    /// `page_press` arguments.
    PagePressArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// The key, e.g. `Enter` (Enter in a field submits the form).
        key: String,
        /// The focused field, e.g. `#title`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        /// The observation that shows the key press took effect.
        expect: ExpectArgs,
    }
);

mutating_args!(
    /// `task_finish` arguments.
    TaskFinishArgs {
        /// The task_id returned by task_start.
        task_id: String,
    }
);

mutating_args!(
    /// `task_stop` arguments.
    TaskStopArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Why the task is stopped (1–500 characters); kept with the task.
        reason: String,
    }
);

/// Arguments of reads that name a task.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TaskArgs {
    /// The task_id returned by task_start.
    task_id: String,
}
impl ToolArgs for TaskArgs {}

/// `page_read` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PageReadArgs {
    /// The task_id returned by task_start.
    task_id: String,
    /// The selector to read, e.g. `#status`.
    target: String,
}
impl ToolArgs for PageReadArgs {}

/// `task_resume` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TaskResumeArgs {
    /// The task_id you kept from task_start.
    task_id: String,
    /// The run_id you kept with it.
    run_id: String,
}
impl ToolArgs for TaskResumeArgs {}

/// `run_status` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunStatusArgs {
    /// A run_id you kept, to learn whether it is still the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_id: Option<String>,
}
impl ToolArgs for RunStatusArgs {}

/// `request_status` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RequestStatusArgs {
    /// The request_id to look up (from an earlier result or error).
    request_id: String,
}
impl ToolArgs for RequestStatusArgs {}

// ---------------------------------------------------------------------------------------------
// The tool table.

/// Parsed arguments: the host's camelCase params and the caller's request ID, if any.
type Parsed = Result<(Value, Option<String>), String>;

struct ToolSpec {
    name: &'static str,
    title: &'static str,
    method: Method,
    destructive: bool,
    schema: fn() -> Arc<JsonObject>,
    parse: fn(JsonObject) -> Parsed,
}

fn schema_of<T: ToolArgs>() -> Arc<JsonObject> {
    rmcp::handler::server::tool::schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("the input schema of a Polaris tool is invalid: {e}"))
}

fn parse_as<T: ToolArgs>(args: JsonObject) -> Parsed {
    let typed: T = serde_json::from_value(Value::Object(args)).map_err(|e| e.to_string())?;
    let id = typed.request_id().map(str::to_owned);
    let params = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    Ok((camel_keys(params), id))
}

macro_rules! tool {
    ($name:literal, $title:literal, $method:ident, $destructive:literal, $args:ty) => {
        ToolSpec {
            name: $name,
            title: $title,
            method: Method::$method,
            destructive: $destructive,
            schema: schema_of::<$args>,
            parse: parse_as::<$args>,
        }
    };
}

/// The tools of SPEC §7, in the order `tools/list` shows them.
static TOOLS: &[ToolSpec] = &[
    tool!(
        "task_start",
        "Start a task",
        TaskStart,
        false,
        TaskStartArgs
    ),
    tool!("page_fill", "Fill a field", PageFill, true, PageFillArgs),
    tool!(
        "page_click",
        "Click and observe",
        PageClick,
        true,
        PageClickArgs
    ),
    tool!(
        "page_press",
        "Press a key and observe",
        PagePress,
        true,
        PagePressArgs
    ),
    tool!("page_read", "Read a target", PageRead, false, PageReadArgs),
    tool!(
        "task_finish",
        "Finish a task",
        TaskFinish,
        false,
        TaskFinishArgs
    ),
    tool!("task_stop", "Stop a task", TaskStop, true, TaskStopArgs),
    tool!("task_status", "Task status", TaskStatus, false, TaskArgs),
    tool!(
        "task_resume",
        "Check a kept task and run",
        TaskResume,
        false,
        TaskResumeArgs
    ),
    tool!(
        "verify_outcome",
        "Verify an uncertain outcome",
        TaskVerifyOutcome,
        false,
        TaskArgs
    ),
    tool!("run_status", "Run status", RunStatus, false, RunStatusArgs),
    tool!(
        "request_status",
        "Request status",
        ReceiptStatus,
        false,
        RequestStatusArgs
    ),
];

fn spec_named(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|t| t.name == name)
}

fn tool_for_method(method: &str) -> Option<&'static str> {
    TOOLS
        .iter()
        .find(|t| t.method.as_str() == method)
        .map(|t| t.name)
}

fn description(spec: &ToolSpec) -> String {
    let mut d = spec.method.description().to_owned();
    if spec.method.is_mutating() {
        d.push_str(" Mutating: without request_id every call is a new request and executes again, even with identical arguments. On an error or an unknown outcome, call the tool named in `next` instead of resending.");
        d.push(' ');
        d.push_str(REQUEST_ID_DOC);
    } else {
        d.push_str(" Read-only: changes nothing on the page.");
    }
    d
}

fn build_tools() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|spec| {
            let annotations = if spec.method.is_mutating() {
                // Never idempotentHint: a mutation without request_id executes again.
                ToolAnnotations::with_title(spec.title)
                    .read_only(false)
                    .destructive(spec.destructive)
            } else {
                ToolAnnotations::with_title(spec.title).read_only(true)
            };
            Tool::new(spec.name, description(spec), (spec.schema)())
                .with_title(spec.title)
                .with_annotations(annotations)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// JSON shapes.

/// `taskId` → `task_id`, recursively over object keys. `automaticReplay` keeps the contract's
/// spelling.
fn snake_keys(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = if k == "automaticReplay" {
                        k
                    } else {
                        to_snake(&k)
                    };
                    (key, snake_keys(v))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(snake_keys).collect()),
        other => other,
    }
}

fn to_snake(k: &str) -> String {
    let mut out = String::with_capacity(k.len() + 4);
    for c in k.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `task_id` → `taskId`, recursively over object keys.
fn camel_keys(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (to_camel(&k), camel_keys(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(camel_keys).collect()),
        other => other,
    }
}

fn to_camel(k: &str) -> String {
    let mut out = String::with_capacity(k.len());
    let mut upper = false;
    for c in k.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn call(tool: &str, arguments: Value) -> Value {
    json!({"tool": tool, "arguments": arguments})
}

/// A bridge-form `{"method","params"}` read as the exact tool call.
fn next_from_bridge(next: NextRead) -> Option<Value> {
    let tool = tool_for_method(&next.method)?;
    let params = match next.params {
        Value::Null => json!({}),
        params => params,
    };
    Some(call(tool, snake_keys(params)))
}

/// The read that shows the current state after an error.
fn next_read(
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

struct ErrorFacts<'a> {
    code: ErrorCode,
    message: &'a str,
    delivery: Delivery,
    request_id: &'a str,
    task_id: Option<&'a str>,
    details: Option<&'a Value>,
}

/// The host and the client speak of bridge methods (`receipt.status`, `task.verifyOutcome`);
/// an agent knows them as tools (`request_status`, `verify_outcome`).
fn in_tool_words(message: &str) -> String {
    let mut out = message.to_owned();
    for spec in TOOLS {
        out = out.replace(spec.method.as_str(), spec.name);
    }
    out.replace("requestId", "request_id")
        .replace("taskId", "task_id")
        .replace("runId", "run_id")
}

fn error_result(e: ErrorFacts<'_>, extra: Map<String, Value>) -> CallToolResult {
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

fn client_error_result(e: &ClientError, task_id: Option<&str>) -> CallToolResult {
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
fn bad_arguments(tool: &str, request_id: &str, problem: &str) -> CallToolResult {
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

fn reply_result(request_id: &str, task_id: Option<&str>, answer: SessionReply) -> CallToolResult {
    let SessionReply {
        reply,
        run_change,
        settled,
    } = answer;
    let mut extra = Map::new();
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
            CallToolResult::structured(body)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The server.

/// The MCP server: the tool table over one [`Session`].
#[derive(Clone)]
struct Front {
    session: Session,
    call_wait: Duration,
    tools: Arc<Vec<Tool>>,
}

impl Front {
    fn new(options: &McpOptions) -> Front {
        // The bridge timeout bounds reads and the background wait of a running mutation; it
        // must outlast --call-wait-ms so the in-progress answer comes first.
        let timeout =
            DEFAULT_CALL_TIMEOUT.max(options.call_wait.saturating_add(Duration::from_secs(10)));
        let client = BridgeClient::new(&options.socket_dir).with_timeout(timeout);
        Front {
            session: Session::new(client),
            call_wait: options.call_wait,
            tools: Arc::new(build_tools()),
        }
    }

    async fn run_tool(
        &self,
        name: &str,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(spec) = spec_named(name) else {
            let names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {name:?}; call tools/list — the tools are {}",
                    names.join(", ")
                ),
                Some(json!({"tool": name})),
            ));
        };
        let fresh = uuid::Uuid::new_v4().to_string();
        let (params, given) = match (spec.parse)(arguments) {
            Ok(p) => p,
            Err(problem) => return Ok(bad_arguments(spec.name, &fresh, &problem)),
        };
        let request_id = match given {
            Some(id) => {
                if let Err(problem) = validate_id(&id) {
                    return Ok(bad_arguments(
                        spec.name,
                        &fresh,
                        &format!("request_id: {problem}"),
                    ));
                }
                id
            }
            None => fresh,
        };
        let method = spec.method.as_str();
        let task_id = params
            .get("taskId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Err(refused) = self.session.check(&request_id, method, &params) {
            return Ok(client_error_result(&refused, task_id.as_deref()));
        }

        // The bridge call runs detached: neither the --call-wait-ms answer nor an MCP
        // cancellation can cut it (or the line it is writing) short.
        let session = self.session.clone();
        let (rid, p) = (request_id.clone(), params.clone());
        let mut call = tokio::spawn(async move {
            let result = session.client().call_with_id(&rid, method, p.clone()).await;
            session.observe(&rid, method, &p, result)
        });
        let mutating = spec.method.is_mutating();
        let wait = tokio::time::sleep(self.call_wait);
        tokio::pin!(wait);
        let answer = tokio::select! {
            joined = &mut call => joined,
            _ = &mut wait, if mutating => {
                if let Some(t) = &task_id {
                    self.session.mark_unsettled(&request_id, method, t, AmbiguityCause::StillRunning);
                }
                return Ok(still_running(spec.name, &request_id, task_id.as_deref(), self.call_wait));
            }
            _ = context.ct.cancelled() => {
                if let (true, Some(t)) = (mutating, &task_id) {
                    self.session.mark_unsettled(&request_id, method, t, AmbiguityCause::StillRunning);
                }
                tracing::info!(request_id = %request_id, tool = spec.name, "the MCP client cancelled the call; the host keeps working on it");
                // rmcp drops whatever answers a cancelled request; answer as if still running.
                return Ok(still_running(spec.name, &request_id, task_id.as_deref(), self.call_wait));
            }
        };
        Ok(match answer {
            Ok(Ok(reply)) => reply_result(&request_id, task_id.as_deref(), reply),
            Ok(Err(e)) => client_error_result(&e, task_id.as_deref()),
            Err(join) => {
                if let (true, Some(t)) = (mutating, &task_id) {
                    self.session.mark_unsettled(
                        &request_id,
                        method,
                        t,
                        AmbiguityCause::Disconnected,
                    );
                }
                let e = ClientError::new(
                    ErrorCode::BridgeDisconnected,
                    &request_id,
                    format!("the MCP front lost track of {method} ({join}); the host may or may not have it. Do not resend: read request_status for {request_id}"),
                );
                client_error_result(&e, task_id.as_deref())
            }
        })
    }
}

fn still_running(
    tool: &str,
    request_id: &str,
    task_id: Option<&str>,
    waited: Duration,
) -> CallToolResult {
    let message = format!(
        "{tool} is still running after {} ms; the host finishes it whatever happens here. Do not resend it: call request_status with this request_id until its state is completed{}",
        waited.as_millis(),
        if task_id.is_some() { " (mutations on this task are refused until then)" } else { "" }
    );
    let mut body = json!({
        "state": "running",
        "request_id": request_id,
        "message": message,
        "next": call("request_status", json!({"request_id": request_id})),
    });
    if let Some(t) = task_id {
        body["task_id"] = json!(t);
    }
    CallToolResult::structured(body)
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("polaris", env!("CARGO_PKG_VERSION")).with_title("Polaris"))
            .with_instructions(
                "Polaris runs page actions at most once per request_id. Keep task_id and run_id from task_start. \
                 Never resend a mutating call after an error, a timeout or a 'running' result: call the tool named in `next` \
                 (request_status, verify_outcome, task_status) and decide from what it shows. Without request_id, \
                 a repeated call is a new request and executes again.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name: Cow<'static, str> = request.name.clone();
        let arguments = request.arguments.unwrap_or_default();
        self.run_tool(&name, arguments, context)
            .await
            .map(Into::into)
    }
}

/// Runs `polaris mcp` on stdin/stdout until the client closes stdin.
///
/// Every line read from stdin passes [`screen_line`] first: what rmcp would skip in silence
/// (invalid UTF-8, an empty line, malformed JSON) or answer without the request's id (a
/// `tools/call` with no `name`) is answered here, once, and only well-formed messages reach
/// rmcp. Both answer streams are merged onto stdout a whole line at a time.
pub async fn run(options: McpOptions) -> Result<(), String> {
    let front = Front::new(&options);
    tracing::info!(socket_dir = %options.socket_dir.display(), "polaris mcp serving on stdio");
    let (to_rmcp, rmcp_in) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (answers, answered) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(write_stdout(from_rmcp, answered));
    let reader = tokio::spawn(read_stdin(to_rmcp, answers));
    let served = async {
        let service = front
            .serve((rmcp_in, rmcp_out))
            .await
            .map_err(|e| format!("the MCP client did not complete the handshake: {e}"))?;
        service
            .waiting()
            .await
            .map_err(|e| format!("the MCP service stopped unexpectedly: {e}"))?;
        Ok::<(), String>(())
    }
    .await;
    // Stop reading (rmcp is done), but the answers already owed still reach the client.
    reader.abort();
    let _ = writer.await;
    served
}

/// Room in each in-process pipe between the line screen and rmcp.
const PIPE_BYTES: usize = 256 * 1024;

/// The longest line the front reads; a longer one is answered `-32700` and skipped.
pub const MAX_MCP_LINE_BYTES: usize = 8 * 1024 * 1024;

/// What to do with one line from the MCP client.
#[derive(Debug, PartialEq)]
enum Screened {
    /// A well-formed message: rmcp reads it (and answers it if it is a request).
    Forward,
    /// Answered here with this JSON-RPC error line; rmcp never sees it.
    Answer(Value),
}

/// A JSON-RPC error response.
fn rpc_error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// JSON-RPC's parse error.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's invalid request.
const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's invalid params.
const INVALID_PARAMS: i64 = -32602;

/// Decides what one line (without its newline) gets: a parse error for what is not JSON, an
/// invalid-request error for what is not a JSON-RPC message, invalid params for a
/// `tools/call` without a string `name` or with non-object `arguments`; everything else goes
/// to rmcp, which answers every request it reads (its handshake, the methods it knows, and
/// -32601 for the rest).
fn screen_line(line: &[u8]) -> Screened {
    let Ok(text) = std::str::from_utf8(line) else {
        return Screened::Answer(rpc_error(
            Value::Null,
            PARSE_ERROR,
            "Parse error: the line is not valid UTF-8; send one JSON-RPC message per line",
        ));
    };
    if text.trim().is_empty() {
        return Screened::Answer(rpc_error(
            Value::Null,
            PARSE_ERROR,
            "Parse error: empty line; send one JSON-RPC message per line",
        ));
    }
    let message: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Screened::Answer(rpc_error(
                Value::Null,
                PARSE_ERROR,
                format!("Parse error: {e}; send one JSON-RPC message per line"),
            ))
        }
    };
    let Value::Object(fields) = &message else {
        return Screened::Answer(rpc_error(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a message must be a JSON object (batches are not supported)",
        ));
    };
    // An id this front can echo: a string or an integer; anything else is answered with null.
    let id = fields.get("id").cloned();
    let echo = match &id {
        Some(v @ Value::String(_)) => v.clone(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n.clone()),
        _ => Value::Null,
    };
    let invalid = |why: &str| {
        Screened::Answer(rpc_error(
            echo.clone(),
            INVALID_REQUEST,
            format!("Invalid Request: {why}"),
        ))
    };
    if fields.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    if id.is_some() && echo.is_null() {
        return invalid("\"id\" must be a string or an integer");
    }
    let Some(method) = fields.get("method") else {
        // A response to a request of ours, which rmcp matches; anything else is no message.
        if id.is_some() && (fields.contains_key("result") || fields.contains_key("error")) {
            return Screened::Forward;
        }
        return invalid(
            "a message needs a \"method\" (or, as a response, \"result\" or \"error\")",
        );
    };
    let Some(method) = method.as_str() else {
        return invalid("\"method\" must be a string");
    };
    if id.is_none() {
        // A notification: never answered, whatever it says.
        return Screened::Forward;
    }
    if method == "tools/call" {
        let problem = match fields.get("params") {
            Some(Value::Object(params)) => match (params.get("name"), params.get("arguments")) {
                (Some(Value::String(_)), None | Some(Value::Null) | Some(Value::Object(_))) => None,
                (Some(Value::String(_)), Some(_)) => Some("\"arguments\" must be an object"),
                (None, _) => Some("\"name\" is required: the tool to call (see tools/list)"),
                (Some(_), _) => {
                    Some("\"name\" must be a string: the tool to call (see tools/list)")
                }
            },
            _ => Some("tools/call needs params {\"name\", \"arguments\"}"),
        };
        if let Some(problem) = problem {
            return Screened::Answer(rpc_error(
                echo,
                INVALID_PARAMS,
                format!("Invalid params: {problem}"),
            ));
        }
    }
    Screened::Forward
}

/// Reads stdin a line at a time: forwards well-formed messages to rmcp and sends the answer
/// of every other line to the stdout writer. Ends at the client's EOF, which rmcp then sees.
async fn read_stdin(
    mut to_rmcp: tokio::io::DuplexStream,
    answers: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) {
    use tokio::io::AsyncWriteExt;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let screened =
            match crate::protocol::read_frame(&mut stdin, &mut line, MAX_MCP_LINE_BYTES).await {
                Ok(crate::protocol::FrameRead::Frame | crate::protocol::FrameRead::Partial) => {
                    screen_line(&line)
                }
                Ok(crate::protocol::FrameRead::TooLarge) => Screened::Answer(rpc_error(
                    Value::Null,
                    PARSE_ERROR,
                    format!("Parse error: the line is longer than {MAX_MCP_LINE_BYTES} bytes"),
                )),
                Ok(crate::protocol::FrameRead::Eof) => break,
                Err(e) => {
                    tracing::warn!("reading stdin failed: {e}");
                    break;
                }
            };
        match screened {
            Screened::Forward => {
                line.push(b'\n');
                if to_rmcp.write_all(&line).await.is_err() {
                    break;
                }
            }
            Screened::Answer(answer) => {
                let mut out = serde_json::to_vec(&answer).expect("an error response serialises");
                out.push(b'\n');
                if answers.send(out).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_rmcp.shutdown().await;
}

/// Writes rmcp's lines and the screen's answers to stdout, each line whole, until both end.
async fn write_stdout(
    from_rmcp: tokio::io::DuplexStream,
    mut answers: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stdout = tokio::io::stdout();
    let mut from_rmcp = tokio::io::BufReader::new(from_rmcp);
    let mut rmcp_open = true;
    let mut answers_open = true;
    // rmcp's line being read: kept across iterations, as a cancelled `read_until` leaves what
    // it read so far in it.
    let mut rmcp_line = Vec::new();
    while rmcp_open || answers_open {
        // The screen's answers first: one is queued before the next line reaches rmcp, so a
        // client that waits for each answer reads them in the order of its lines.
        let line = tokio::select! {
            biased;
            answer = answers.recv(), if answers_open => match answer {
                Some(a) => a,
                None => {
                    answers_open = false;
                    continue;
                }
            },
            read = from_rmcp.read_until(b'\n', &mut rmcp_line), if rmcp_open => {
                if !matches!(read, Ok(n) if n > 0) {
                    rmcp_open = false;
                }
                std::mem::take(&mut rmcp_line)
            }
        };
        if line.is_empty() {
            continue;
        }
        if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &[u8]) -> Value {
        match screen_line(line) {
            Screened::Answer(v) => v,
            Screened::Forward => panic!("forwarded: {}", String::from_utf8_lossy(line)),
        }
    }

    #[test]
    fn the_line_screen_answers_what_rmcp_would_not() {
        for (line, code, id) in [
            (&b"\xff\xfe{}"[..], -32700, Value::Null),
            (b"", -32700, Value::Null),
            (b"   ", -32700, Value::Null),
            (b"{\"jsonrpc\":\"2.0\",", -32700, Value::Null),
            (b"[1,2]", -32600, Value::Null),
            (b"{\"id\":1,\"method\":\"ping\"}", -32600, json!(1)),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}",
                -32600,
                Value::Null,
            ),
            (b"{\"jsonrpc\":\"2.0\",\"id\":1}", -32600, json!(1)),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":5}",
                -32600,
                json!(2),
            ),
        ] {
            let a = answer(line);
            assert_eq!(
                a["error"]["code"],
                code,
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(a["id"], id, "{a}");
        }
        for (line, id) in [
            (&br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#[..], json!(7)),
            (br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"task_start","arguments":[1]}}"#, json!("a")),
            (br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":3}}"#, json!(8)),
            (br#"{"jsonrpc":"2.0","id":9,"method":"tools/call"}"#, json!(9)),
        ] {
            let a = answer(line);
            assert_eq!(a["error"]["code"], -32602, "{a}");
            assert_eq!(a["id"], id, "{a}");
        }
        for line in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"host_hello"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"no/such"}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ] {
            assert_eq!(screen_line(line), Screened::Forward, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn keys_translate_both_ways() {
        let args =
            json!({"task_id": "t", "fixture": {"submit_delay_ms": 5}, "expect": {"target": "#s"}});
        let camel = camel_keys(args.clone());
        assert_eq!(
            camel,
            json!({"taskId": "t", "fixture": {"submitDelayMs": 5}, "expect": {"target": "#s"}})
        );
        assert_eq!(snake_keys(camel), args);
        assert_eq!(
            snake_keys(json!({"automaticReplay": false, "pendingOutcome": {"requestId": "r"}})),
            json!({"automaticReplay": false, "pending_outcome": {"request_id": "r"}})
        );
    }

    #[test]
    fn every_tool_parses_and_schemas_are_objects() {
        for spec in TOOLS {
            let schema = (spec.schema)();
            assert_eq!(schema.get("type"), Some(&json!("object")), "{}", spec.name);
            assert!(
                tool_for_method(spec.method.as_str()) == Some(spec.name),
                "{} maps back from {}",
                spec.name,
                spec.method
            );
        }
        let (params, id) = (spec_named("page_press").unwrap().parse)(
            json!({"task_id": "t", "key": "Enter", "target": "#title", "expect": {"target": "#status", "contains": "Saved"}, "request_id": "r-1"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .unwrap();
        assert_eq!(id.as_deref(), Some("r-1"));
        assert_eq!(
            params,
            json!({"taskId": "t", "key": "Enter", "target": "#title", "expect": {"target": "#status", "contains": "Saved"}})
        );
        let (params, _) = (spec_named("request_status").unwrap().parse)(
            json!({"request_id": "abc"}).as_object().unwrap().clone(),
        )
        .unwrap();
        assert_eq!(params, json!({"requestId": "abc"}));
        assert!((spec_named("page_fill").unwrap().parse)(
            json!({"task_id": "t", "target": "#a", "value": "v", "extra": 1})
                .as_object()
                .unwrap()
                .clone()
        )
        .is_err());
        assert!((spec_named("page_fill").unwrap().parse)(
            json!({"task_id": "t", "target": "#a"})
                .as_object()
                .unwrap()
                .clone()
        )
        .is_err());
    }

    #[test]
    fn messages_name_tools_not_bridge_methods() {
        assert_eq!(
            in_tool_words("do not resend page.press: read receipt.status for r, or call task.verifyOutcome for task t (taskId)"),
            "do not resend page_press: read request_status for r, or call verify_outcome for task t (task_id)"
        );
    }

    #[test]
    fn next_reads_follow_the_delivery() {
        assert_eq!(
            next_read(
                ErrorCode::BridgeDisconnected,
                Delivery::Unknown,
                "r",
                Some("t"),
                None
            ),
            json!({"tool": "request_status", "arguments": {"request_id": "r"}})
        );
        assert_eq!(
            next_read(
                ErrorCode::OutcomeUncertain,
                Delivery::Uncertain,
                "r",
                Some("t"),
                None
            ),
            json!({"tool": "verify_outcome", "arguments": {"task_id": "t"}})
        );
        let host_next =
            json!({"next": {"method": "task.verifyOutcome", "params": {"taskId": "t9"}}});
        assert_eq!(
            next_read(
                ErrorCode::OutcomeUncertain,
                Delivery::Uncertain,
                "r",
                Some("t"),
                Some(&host_next)
            ),
            json!({"tool": "verify_outcome", "arguments": {"task_id": "t9"}})
        );
        assert_eq!(
            next_read(
                ErrorCode::TaskClosed,
                Delivery::NotExecuted,
                "r",
                Some("t"),
                None
            ),
            json!({"tool": "task_status", "arguments": {"task_id": "t"}})
        );
        assert_eq!(
            next_read(
                ErrorCode::BridgeUnavailable,
                Delivery::NotSent,
                "r",
                None,
                None
            ),
            json!({"tool": "run_status", "arguments": {}})
        );
    }
}
