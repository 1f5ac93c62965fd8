//! Raw JSON-RPC lines into `polaris mcp`, lines out: the protocol's edge cases.

mod mcp_common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use mcp_common::{bridge, socket_dir, HostProcess, BIN};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

struct Transcript {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Transcript {
    fn start(dir: &Path) -> Transcript {
        let mut child = tokio::process::Command::new(BIN)
            .arg("mcp")
            .arg("--socket-dir")
            .arg(dir)
            // Logs at their most verbose must still stay off stdout.
            .env("RUST_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("polaris mcp starts");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Transcript {
            child,
            stdin,
            lines,
        }
    }

    async fn send(&mut self, message: Value) {
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The next line on stdout; every line must be one JSON-RPC message.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("polaris mcp answers in time")
            .unwrap()
            .expect("stdout stays open");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{v}");
        v
    }

    /// Sends a request and returns its response (skipping notifications).
    async fn request(&mut self, message: Value) -> Value {
        let id = message["id"].clone();
        self.send(message).await;
        loop {
            let v = self.next().await;
            if v.get("id") == Some(&id) {
                return v;
            }
            assert!(v.get("id").is_none(), "a response to another request: {v}");
        }
    }

    async fn tool(&mut self, id: Value, name: &str, arguments: Value) -> Value {
        self.request(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}))
            .await
    }
}

fn structured(response: &Value) -> &Value {
    &response["result"]["structuredContent"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_jsonrpc_ids_unknown_tools_and_bad_arguments() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let mut t = Transcript::start(dir.path());

    let init = t
        .request(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "transcript", "version": "0"}}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["serverInfo"]["name"], "polaris");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    t.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    let started = t
        .tool(json!(2), "task_start", json!({"title": "Post"}))
        .await;
    assert_eq!(started["result"]["isError"], false);
    let task = structured(&started)["result"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The same JSON-RPC id and the same arguments, twice: two bridge requests, two executions.
    let fill = json!({"task_id": task, "target": "#title", "value": "Hello"});
    let a = t.tool(json!(3), "page_fill", fill.clone()).await;
    let b = t.tool(json!(3), "page_fill", fill.clone()).await;
    assert_eq!(structured(&a)["receipt"], "new");
    assert_eq!(structured(&b)["receipt"], "new");
    assert_ne!(structured(&a)["request_id"], structured(&b)["request_id"]);
    let history = bridge(dir.path(), "task.status", json!({"taskId": task})).await;
    let fills = history["result"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["method"] == "page.fill")
        .count();
    assert_eq!(fills, 2, "a reused JSON-RPC id is never a re-query");

    // A string id equal to an earlier numeric one is yet another request.
    let c = t.tool(json!("3"), "page_fill", fill).await;
    assert_eq!(structured(&c)["receipt"], "new");

    // An unknown tool is a JSON-RPC error naming the tools; nothing reaches the host.
    let unknown = t
        .tool(json!(4), "page_submit", json!({"task_id": task}))
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("page_press"));

    // Bad arguments are tool errors the model can read: nothing was sent.
    for (id, args) in [
        (5, json!({"task_id": task, "target": "#title"})),
        (
            6,
            json!({"task_id": task, "target": "#title", "value": "x", "taskId": task}),
        ),
        (7, json!({"task_id": task, "target": "#title", "value": 5})),
        (
            8,
            json!({"task_id": task, "target": "#title", "value": "x", "request_id": "not a valid id"}),
        ),
    ] {
        let r = t.tool(json!(id), "page_fill", args).await;
        assert_eq!(r["result"]["isError"], true, "{r}");
        let s = structured(&r);
        assert_eq!(s["code"], "BAD_REQUEST");
        assert_eq!(s["delivery"], "not_sent");
        assert_eq!(s["automaticReplay"], false);
        assert!(s["request_id"].is_string());
        assert!(s["next"]["tool"].is_string());
    }
    // Arguments that fit the schema but not the host's rules: the host refuses, executes nothing.
    let r = t
        .tool(
            json!(9),
            "page_fill",
            json!({"task_id": task, "target": "title", "value": "x"}),
        )
        .await;
    assert_eq!(structured(&r)["code"], "BAD_REQUEST");
    assert_eq!(structured(&r)["delivery"], "not_executed");
    let r = t
        .tool(
            json!(10),
            "page_fill",
            json!({"task_id": "no-such-task", "target": "#title", "value": "x"}),
        )
        .await;
    assert_eq!(structured(&r)["code"], "TASK_NOT_FOUND");

    // Still exactly the two fills plus the third, and nothing else executed.
    let history = bridge(dir.path(), "task.status", json!({"taskId": task})).await;
    let fills = history["result"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["method"] == "page.fill")
        .count();
    assert_eq!(fills, 3);

    drop(t.stdin);
    let status = tokio::time::timeout(Duration::from_secs(10), t.child.wait())
        .await
        .expect("exits when stdin closes")
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_client_needs_no_initialize() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let mut t = Transcript::start(dir.path());
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "transcript", "version": "0"},
    });
    let discovered = t.request(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}})).await;
    let versions = discovered["result"]["supportedVersions"].to_string();
    assert!(
        versions.contains("2026-07-28") && versions.contains("2025-11-25"),
        "{discovered}"
    );

    let listed = t
        .request(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}}),
        )
        .await;
    // The whole table (tests/mcp.rs checks its names and order): the core tools and the page
    // vocabulary of SPEC §15.
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.len() >= 22, "{names:?}");
    for tool in [
        "task_start",
        "page_click",
        "page_snapshot",
        "request_status",
    ] {
        assert!(names.contains(&tool), "{tool} in {names:?}");
    }
    let started = t
        .request(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "_meta": meta, "name": "task_start", "arguments": {"title": "Post"}}}),
        )
        .await;
    assert_eq!(started["result"]["resultType"], "complete");
    assert_eq!(started["result"]["isError"], false);
    assert_eq!(structured(&started)["result"]["state"], "running");
}

/// `tasks.running` of the host's `run.status`: the tasks started and not closed.
async fn mutations(dir: &Path) -> u64 {
    let status = bridge(dir, "run.status", json!({})).await;
    status["result"]["tasks"]["running"]
        .as_u64()
        .unwrap_or_else(|| panic!("run.status has tasks.running: {status}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jsonrpc_id_still_in_flight_is_refused_on_its_line_and_never_runs() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let mut t = Transcript::start(dir.path());
    t.request(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "transcript", "version": "0"}}}),
    )
    .await;
    t.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let before = mutations(dir.path()).await;

    // Three task_start lines with one id, in one write: the second and third arrive while
    // the first is in flight.
    let mut lines = Vec::new();
    for title in ["one", "two", "three"] {
        let call = json!({"jsonrpc": "2.0", "id": 30, "method": "tools/call",
            "params": {"name": "task_start", "arguments": {"title": title}}});
        lines.extend(serde_json::to_vec(&call).unwrap());
        lines.push(b'\n');
    }
    t.stdin.write_all(&lines).await.unwrap();
    t.stdin.flush().await.unwrap();
    let mut answers = Vec::new();
    while answers.len() < 3 {
        let v = t.next().await;
        if v.get("id").is_some() {
            assert_eq!(v["id"], 30, "{v}");
            answers.push(v);
        }
    }
    let started = answers
        .iter()
        .filter(|a| a["result"]["isError"] == false)
        .count();
    for refused in answers.iter().filter(|a| a.get("error").is_some()) {
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("in flight"),
            "{refused}"
        );
    }
    // Every line one answer, and exactly as many tasks started as answers said so.
    assert!(started >= 1, "{answers:?}");
    assert_eq!(mutations(dir.path()).await - before, started as u64);

    // Answered, the id is free again: reusing it runs a new call.
    let again = t
        .tool(json!(30), "task_start", json!({"title": "four"}))
        .await;
    assert_eq!(again["result"]["isError"], false, "{again}");
    assert_eq!(mutations(dir.path()).await - before, started as u64 + 1);
}
