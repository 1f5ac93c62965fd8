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
//! - MCP Tasks (SPEC §17, `tasks.rs`): the `io.modelcontextprotocol/tasks` extension is
//!   declared; to a client that declares it too, a mutation still running after
//!   `--call-wait-ms` is a task whose `taskId` is its request ID. `tasks/get` reads the
//!   receipt (so a task survives restarts of the host and of this front); `tasks/cancel` is
//!   acknowledged and never applied, and the task's final result says so.
//! - Logs go to stderr; stdout carries only MCP messages.
//! - Every line read gets exactly one answer (a notification or response none, as JSON-RPC
//!   says): a thin line screen in front of rmcp answers what rmcp would skip in silence or
//!   answer without the request's id — invalid UTF-8, an empty line or malformed JSON get
//!   `-32700` with `id: null`, a `tools/call` without `name` or with non-object `arguments`
//!   `-32602`.
//! - A request whose JSON-RPC id is still in flight (a request with that id read and not yet
//!   answered) is answered `-32600` and never run; an answered id may be reused.
//! - A line over 8 MiB is skipped to its end and answered once; a request before `initialize`
//!   (without 2026-07-28's `_meta`) is answered `-32600` saying to initialize, never run.
//! - A host refusal keeps its own code and delivery: a `FRAME_TOO_LARGE` is `not_executed`
//!   and leaves the task open to the next call.
//!
//! All `rmcp` types stay inside this module: the SDK changes fast and is pinned exactly in
//! `Cargo.toml`.

mod front;
mod keys;
mod results;
mod screen;
mod tasks;
#[cfg(test)]
mod tests;
mod tools;

use std::path::PathBuf;
use std::time::Duration;

use rmcp::ServiceExt;

use front::Front;
pub use screen::MAX_MCP_LINE_BYTES;
use screen::{read_stdin, write_stdout, InFlight, PIPE_BYTES};

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
    let in_flight = InFlight::default();
    let writer = tokio::spawn(write_stdout(from_rmcp, answered, in_flight.clone()));
    let reader = tokio::spawn(read_stdin(to_rmcp, answers, in_flight));
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
