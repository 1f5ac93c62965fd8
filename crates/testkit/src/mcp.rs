//! Shared by the MCP tests (`tests/mcp/`): a real `polaris serve` child process on a temp socket dir.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use polaris::client::BridgeClient;
use serde_json::{json, Value};

/// A temp socket dir with a short path.
pub fn socket_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .expect("temp dir")
}

/// A `polaris serve` child, killed on drop.
pub struct HostProcess {
    pub child: Child,
    pub dir: PathBuf,
}

impl HostProcess {
    /// Starts a host on `dir` and waits until it answers `host.hello`.
    pub async fn start(dir: &Path, extra: &[&str]) -> HostProcess {
        let child = Command::new(crate::host::polaris_bin())
            .arg("serve")
            .arg("--socket-dir")
            .arg(dir)
            .arg("--audit-log")
            .arg(dir.join("audit.jsonl"))
            // The journal stays inside the test's directory unless the test chooses.
            .args(
                (!extra
                    .iter()
                    .any(|a| a.starts_with("--journal") || *a == "--no-journal"))
                .then(|| ["--journal".into(), dir.join("journal")])
                .into_iter()
                .flatten(),
            )
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("polaris serve starts");
        let host = HostProcess {
            child,
            dir: dir.to_path_buf(),
        };
        let client = BridgeClient::new(dir).with_timeout(Duration::from_secs(5));
        for _ in 0..200 {
            if let Ok(reply) = client.call("host.hello", json!({})).await {
                assert!(reply.ok);
                return host;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "polaris serve did not answer host.hello on {}",
            dir.display()
        );
    }

    /// Kills the host at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A direct bridge call, for checking what the host did.
pub async fn bridge(dir: &Path, method: &str, params: Value) -> Value {
    let reply = BridgeClient::new(dir)
        .with_timeout(Duration::from_secs(10))
        .call(method, params)
        .await
        .expect("the host answers");
    serde_json::to_value(reply).expect("a reply serialises")
}

/// Polls `check` until it returns `Some`, for at most 10 s ([`crate::poll_until`]).
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    crate::poll_until(what, Duration::from_secs(10), check).await
}
