//! The official Python MCP SDK (`mcp` 2.x) drives `polaris mcp`: `tests/python/mcp_sdk_flow.py`
//! runs an agent's flow against the built binary and a real `polaris serve`, with the
//! `initialize` handshake, with 2026-07-28's self-contained requests, and with the Tasks
//! extension (SPEC §17). The fixture's effects file shows each press applied once.
//!
//! Skipped, with one line saying so, when `python3 -c 'import mcp'` fails — unless
//! `POLARIS_REQUIRE_PYTHON_MCP=1`, as in CI, where a missing SDK fails the test.

use polaris_testkit::mcp::{socket_dir, HostProcess};
use polaris_testkit::python_sdk;

use std::path::Path;
use std::process::Command;

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_polaris");
use serde_json::Value;

/// Runs the flow in `mode`; returns its JSON summary.
fn run_flow(dir: &Path, mode: &str) -> Value {
    let script = python_sdk::script("mcp_sdk_flow.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(BIN)
        .arg(dir)
        .arg(mode)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python SDK flow ({mode}) failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("a summary line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("summary is not JSON ({e}): {last}"))
}

fn effects_of(file: &Path, request_id: &str) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["requestId"] == request_id)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_runs_its_flows_with_and_without_tasks() {
    if !python_sdk::python_mcp_or_skip() {
        return;
    }
    let dir = socket_dir();
    let effects = dir.path().join("effects.jsonl");
    let _host = HostProcess::start(
        dir.path(),
        &[
            "--action-timeout-ms",
            "10000",
            "--fixture-effects",
            effects.to_str().unwrap(),
        ],
    )
    .await;
    let dir_path = dir.path().to_path_buf();
    for mode in ["legacy", "modern", "tasks"] {
        let d = dir_path.clone();
        let summary = tokio::task::spawn_blocking(move || run_flow(&d, mode))
            .await
            .unwrap();
        let press = summary["press_request_id"].as_str().unwrap();
        assert_eq!(summary["replay_receipt"], "replayed", "{summary}");
        assert_eq!(
            effects_of(&effects, press),
            1,
            "{mode}: the press applied once, its replay not at all"
        );
        let protocol = if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(summary["protocol"], protocol, "{summary}");
        if mode == "tasks" {
            // The press outlasted --call-wait-ms: a task named by its request ID, polled
            // working, then completed.
            assert_eq!(
                summary["task_handles"],
                serde_json::json!([press]),
                "{summary}"
            );
            let statuses: Vec<&str> = summary["task_statuses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            assert_eq!(statuses.first(), Some(&"working"), "{summary}");
            assert_eq!(statuses.last(), Some(&"completed"), "{summary}");
            assert_eq!(summary["first_receipt"], Value::Null, "{summary}");
        } else {
            assert_eq!(summary["task_handles"], serde_json::json!([]), "{summary}");
            assert_eq!(summary["first_receipt"], "new", "{summary}");
        }
    }
}
