//! The MCP front and the client library against a real `polaris serve`: rmcp's client, the
//! official Python SDK, the assets each MCP client is configured with, and `BridgeClient`.
//!
//! One test binary, so the workspace links once for all of these; each module is one area
//! (`cargo test --test mcp client::` runs one).

mod client;
mod mcp;
mod mcp_assets;
mod mcp_python;
mod mcp_tasks;
mod mcp_transcript;
