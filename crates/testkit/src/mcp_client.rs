//! An MCP client on a real `polaris mcp` child, as an agent would start one: rmcp's own client
//! over the child's stdio. Shared by the MCP tests (`tests/mcp/`) and
//! `tests/browser/browser_mcp.rs`, so both start the front and call tools the same way.

#![allow(dead_code)]

use std::path::Path;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

/// A connected MCP client; dropping it closes the front's stdin, which ends `polaris mcp`.
pub type Client = RunningService<RoleClient, ()>;

/// `polaris mcp --socket-dir DIR`, with `--call-wait-ms` when given.
pub fn mcp_command(dir: &Path, call_wait_ms: Option<u64>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(crate::host::polaris_bin());
    cmd.arg("mcp").arg("--socket-dir").arg(dir);
    if let Some(ms) = call_wait_ms {
        cmd.arg("--call-wait-ms").arg(ms.to_string());
    }
    cmd
}

/// Starts `polaris mcp` on `dir` and completes the MCP handshake.
pub async fn connect(dir: &Path, call_wait_ms: Option<u64>) -> Client {
    ().serve(TokioChildProcess::new(mcp_command(dir, call_wait_ms)).expect("polaris mcp starts"))
        .await
        .expect("the MCP handshake completes")
}

/// Calls `tool` with `arguments` (a JSON object); a protocol error fails the test.
pub async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(args) = arguments else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{tool} got a protocol error: {e}"))
}

/// The structured content of a tool result.
pub fn structured(result: &CallToolResult) -> Value {
    result
        .structured_content
        .clone()
        .expect("every result has structuredContent")
}

/// The structured content of a successful result.
pub fn ok(result: &CallToolResult) -> Value {
    let b = structured(result);
    assert_eq!(result.is_error, Some(false), "expected success, got {b}");
    b
}

/// The structured content of an error result, which never invites an automatic replay.
pub fn err(result: &CallToolResult) -> Value {
    let b = structured(result);
    assert_eq!(result.is_error, Some(true), "expected an error, got {b}");
    assert_eq!(b["automaticReplay"], false);
    b
}
