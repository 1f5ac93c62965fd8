//! The official Python MCP SDK (`pip install 'mcp>=2,<3'`) as a second client of `polaris mcp`:
//! a test runs a script of `tests/python/` against a real front and fails with its output.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `python3` with the `mcp` package is here. Without it the test prints one line and
/// is skipped, unless `POLARIS_REQUIRE_PYTHON_MCP=1` (CI), which makes its absence a failure.
pub fn python_mcp_or_skip() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var("POLARIS_REQUIRE_PYTHON_MCP").as_deref() == Ok("1") {
            panic!("POLARIS_REQUIRE_PYTHON_MCP=1 but python3 cannot import mcp: pip install 'mcp>=2,<3'");
        }
        println!("skipped: the official Python MCP SDK is not installed (pip install 'mcp>=2,<3')");
    }
    found
}

/// `tests/python/NAME`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/python")
        .join(name)
}

/// Runs `python3 tests/python/NAME` with `envs` (plus `POLARIS_BIN`) on a blocking thread and
/// fails the test with its output unless it exits 0.
pub async fn run(name: &str, envs: Vec<(String, String)>) {
    let path = script(name);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(&path)
            .env("POLARIS_BIN", crate::host::polaris_bin())
            .envs(envs)
            .output()
            .expect("python3 runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{name} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
