//! Call handling: the MCP server over one [`Session`], which gates each task on its unsettled
//! calls, runs the bridge call detached and answers "running" after `--call-wait-ms`.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    GetTaskResult, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};

use super::results::{bad_arguments, call, client_error_result, reply_result};
use super::tasks::{self, client_takes_tasks, Cancels};
use super::tools::{build_tools, spec_named, TOOLS};
use super::McpOptions;
use crate::client::session::{AmbiguityCause, Session};
use crate::client::{BridgeClient, ClientError, DEFAULT_CALL_TIMEOUT};
use crate::protocol::{now_rfc3339, validate_id, ErrorCode};

// ---------------------------------------------------------------------------------------------
// The server.

/// The MCP server: the tool table over one [`Session`].
#[derive(Clone)]
pub(super) struct Front {
    session: Session,
    call_wait: Duration,
    tools: Arc<Vec<Tool>>,
    /// The tasks whose cancellation a client asked for (SPEC §17: never applied).
    cancels: Cancels,
}

impl Front {
    pub(super) fn new(options: &McpOptions) -> Front {
        // The bridge timeout bounds reads and the background wait of a running mutation; it
        // must outlast --call-wait-ms so the in-progress answer comes first.
        let timeout =
            DEFAULT_CALL_TIMEOUT.max(options.call_wait.saturating_add(Duration::from_secs(10)));
        let client = BridgeClient::new(&options.socket_dir).with_timeout(timeout);
        Front {
            session: Session::new(client),
            call_wait: options.call_wait,
            tools: Arc::new(build_tools()),
            cancels: Cancels::default(),
        }
    }

    async fn run_tool(
        &self,
        name: &str,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let received_at = now_rfc3339();
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
            Err(problem) => return Ok(bad_arguments(spec.name, &fresh, &problem).into()),
        };
        let request_id = match given {
            Some(id) => {
                if let Err(problem) = validate_id(&id) {
                    return Ok(
                        bad_arguments(spec.name, &fresh, &format!("request_id: {problem}")).into(),
                    );
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
            return Ok(client_error_result(&refused, task_id.as_deref()).into());
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
        let as_task = mutating && client_takes_tasks(&context);
        let wait = tokio::time::sleep(self.call_wait);
        tokio::pin!(wait);
        let answer = tokio::select! {
            joined = &mut call => joined,
            _ = &mut wait, if mutating => {
                if let Some(t) = &task_id {
                    self.session.mark_unsettled(&request_id, method, t, AmbiguityCause::StillRunning);
                }
                if as_task {
                    return Ok(tasks::created(spec.name, &request_id, &received_at));
                }
                return Ok(still_running(spec.name, &request_id, task_id.as_deref(), self.call_wait).into());
            }
            _ = context.ct.cancelled() => {
                if let (true, Some(t)) = (mutating, &task_id) {
                    self.session.mark_unsettled(&request_id, method, t, AmbiguityCause::StillRunning);
                }
                tracing::info!(request_id = %request_id, tool = spec.name, "the MCP client cancelled the call; the host keeps working on it");
                // rmcp drops whatever answers a cancelled request; answer as if still running.
                return Ok(still_running(spec.name, &request_id, task_id.as_deref(), self.call_wait).into());
            }
        };
        Ok(match answer {
            Ok(Ok(reply)) => reply_result(&request_id, task_id.as_deref(), reply, Default::default()),
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
        }
        .into())
    }
}

pub(super) fn still_running(
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
        // SPEC §17: the Tasks extension is declared; only a client that declares it too is
        // ever answered with a task (rmcp refuses a task to any other).
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
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
        self.run_tool(&name, arguments, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        tasks::get(&self.session, &self.cancels, &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        tasks::cancel(&self.session, &self.cancels, &request.task_id).await
    }
}
