//! What Polaris's tests, examples and benchmarks start for themselves and stop at the end: a
//! host process and its connections ([`host`]), a private PostgreSQL ([`postgres`]) and a fleet
//! of hosts on it ([`fleet`]), a browser host on the test site ([`browser`]), an MCP front and
//! its clients ([`mcp`], [`mcp_client`], [`python_sdk`]), and the console in a pseudo-terminal
//! ([`console_pty`]).
//!
//! Never a dependency of the shipped binary: only `[dev-dependencies]` name this crate, and
//! `tests/architecture.rs` checks that the binary's dependency tree holds none of it. The
//! processes it starts run the `polaris` binary Cargo built for the running tests
//! ([`host::polaris_bin`]).

use std::time::{Duration, Instant};

pub mod browser;
pub mod console_pty;
pub mod fleet;
pub mod host;
pub mod mcp;
pub mod mcp_client;
pub mod postgres;
pub mod python_sdk;

/// Polls `probe` every 25 ms until it returns `Some`, and fails naming `what` once `within`
/// has passed: the one wait for something a real process does in its own time.
pub async fn poll_until<T, F, Fut>(what: &str, within: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "never happened within {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
