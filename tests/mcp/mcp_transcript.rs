//! Raw JSON-RPC lines into `polaris mcp`, lines out: the protocol's edge cases.

use polaris_testkit::mcp::{bridge, socket_dir, HostProcess};

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_polaris");
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
    // The whole table (tests/mcp/mcp.rs checks its names and order): the core tools and the page
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

/// `initialize` asking for 2026-07-28 (which has no handshake) is answered with the newest
/// version that has one; `server/discover` offers 2026-07-28 and declares the Tasks extension.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_versions_and_the_tasks_extension_are_offered() {
    let dir = socket_dir();
    let mut t = Transcript::start(dir.path());
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "transcript", "version": "0"},
    });
    let discovered = t
        .request(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}))
        .await;
    let result = &discovered["result"];
    assert!(
        result["supportedVersions"]
            .to_string()
            .contains("2026-07-28"),
        "{discovered}"
    );
    assert!(
        result["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{discovered}"
    );
    let init = t
        .request(
            json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
            "protocolVersion": "2026-07-28", "capabilities": {},
            "clientInfo": {"name": "transcript", "version": "0"}}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert!(
        init["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{init}"
    );
}

/// On 2026-07-28 a JSON-RPC id need only differ from the ids in flight: a client reusing the
/// id of an answered press sends a new call, with a new request ID, and it presses again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_jsonrpc_id_reused_on_2026_07_28_is_a_new_call() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let mut t = Transcript::start(dir.path());
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "transcript", "version": "0"},
    });
    let call = |id: u64, name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"_meta": meta, "name": name, "arguments": arguments}})
    };
    let started = t
        .request(call(1, "task_start", json!({"title": "Post"})))
        .await;
    let task = structured(&started)["result"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut request_ids = Vec::new();
    for n in 1..=2 {
        let press = json!({"task_id": task, "key": "Enter", "target": "#title",
                           "expect": {"target": "#submissions", "equals": n.to_string()}});
        let answer = t.request(call(7, "page_press", press)).await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        assert_eq!(structured(&answer)["receipt"], "new", "{answer}");
        request_ids.push(structured(&answer)["request_id"].clone());
    }
    assert_ne!(
        request_ids[0], request_ids[1],
        "each call its own request ID"
    );
    let status = bridge(dir.path(), "run.status", json!({})).await;
    assert_eq!(
        status["result"]["executor"]["mutations"], 2,
        "two calls, two presses: {status}"
    );
}

/// A request before `initialize` (and without 2026-07-28's `_meta`) is answered with an
/// error that says to initialize, never run; a notification there is dropped, and the
/// session that follows works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_before_initialize_is_told_to_initialize_and_never_runs() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let mut t = Transcript::start(dir.path());
    t.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let early = t
        .tool(json!(1), "task_start", json!({"title": "Too early"}))
        .await;
    assert_eq!(early["error"]["code"], -32600, "{early}");
    let message = early["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("before initialize") && message.contains("nothing was executed"),
        "{early}"
    );
    assert_eq!(mutations(dir.path()).await, 0, "nothing ran");

    let init = t
        .request(
            json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "transcript", "version": "0"}}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    t.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    // The id of the refused call is free: it runs now.
    let started = t
        .tool(json!(1), "task_start", json!({"title": "In time"}))
        .await;
    assert_eq!(started["result"]["isError"], false, "{started}");
    assert_eq!(mutations(dir.path()).await, 1);
}

/// A stdin line longer than 8 MiB gets exactly one answer (`-32700`, id null) however long it
/// is, and the call written right after it, in the same write, is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_8_mib_gets_one_answer_and_the_next_call_is_served() {
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
    // Just over the limit, and more than twice it: each is one line, one answer.
    for (n, size) in [(0u64, 8 * 1024 * 1024 + 1), (1, 17 * 1024 * 1024 + 5)] {
        let title = "x".repeat(size);
        let mut bytes = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 100 + n,
            "method": "tools/call", "params": {"name": "task_start", "arguments": {"title": title}}}))
        .unwrap();
        bytes.push(b'\n');
        let after = json!({"jsonrpc": "2.0", "id": 200 + n, "method": "tools/call",
            "params": {"name": "task_start", "arguments": {"title": format!("after {n}")}}});
        bytes.extend(serde_json::to_vec(&after).unwrap());
        bytes.push(b'\n');
        let ping = json!({"jsonrpc": "2.0", "id": 300 + n, "method": "ping"});
        bytes.extend(serde_json::to_vec(&ping).unwrap());
        bytes.push(b'\n');
        // The front reads stdin as it comes and answers in a few short lines, so the whole
        // write goes through before anything is read back.
        t.stdin.write_all(&bytes).await.unwrap();
        t.stdin.flush().await.unwrap();
        let mut answers = Vec::new();
        while answers.len() < 3 {
            answers.push(t.next().await);
        }
        let too_long: Vec<&Value> = answers.iter().filter(|a| a["id"].is_null()).collect();
        assert_eq!(
            too_long.len(),
            1,
            "one answer to the long line: {answers:?}"
        );
        assert_eq!(too_long[0]["error"]["code"], -32700);
        let served = answers
            .iter()
            .find(|a| a["id"] == 200 + n)
            .unwrap_or_else(|| panic!("the call after the cut is answered: {answers:?}"));
        assert_eq!(served["result"]["isError"], false, "{served}");
        assert!(answers.iter().any(|a| a["id"] == 300 + n), "{answers:?}");
    }
    // Exactly the two calls after the cuts started tasks; the long lines ran nothing.
    assert_eq!(mutations(dir.path()).await, 2);
}
