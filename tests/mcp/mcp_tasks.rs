//! MCP Tasks (SPEC §17) through `polaris mcp`, driven by rmcp's own client with the Tasks
//! extension declared and without it, against a real `polaris serve` whose fixture records
//! every applied submit in its effects file.

use polaris_testkit::mcp::{bridge, eventually, socket_dir, HostProcess};
use polaris_testkit::mcp_client;

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_client::mcp_command;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, GetTaskParams, GetTaskResult, Implementation, ProtocolVersion, TaskPayload,
    TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError, ServiceExt};
use serde_json::{json, Value};

type Client = RunningService<RoleClient, ClientConfig>;

/// How the client opens its session: `initialize` (2025-11-25) or self-contained requests
/// (2026-07-28, `server/discover`).
#[derive(Clone, Copy, Debug)]
enum Lifecycle {
    Initialize,
    Discover,
}

/// `polaris mcp --call-wait-ms WAIT` with rmcp's client, declaring the Tasks extension when
/// `tasks`.
async fn connect(dir: &Path, wait_ms: u64, tasks: bool, lifecycle: Lifecycle) -> Client {
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    let info = ClientConfig::new(capabilities, Implementation::new("polaris-tasks-test", "0"));
    let transport = TokioChildProcess::new(mcp_command(dir, Some(wait_ms))).expect("mcp starts");
    let client = match lifecycle {
        Lifecycle::Initialize => info.serve(transport).await,
        Lifecycle::Discover => {
            info.serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
        }
    }
    .expect("the MCP session opens");
    let version = client.peer_info().unwrap().protocol_version.clone();
    match lifecycle {
        Lifecycle::Initialize => assert_eq!(version, ProtocolVersion::V_2025_11_25),
        Lifecycle::Discover => assert_eq!(version, ProtocolVersion::V_2026_07_28),
    }
    assert!(
        client.peer_info().unwrap().capabilities.supports_tasks(),
        "polaris mcp declares the Tasks extension"
    );
    client
}

async fn tool(client: &Client, name: &str, arguments: Value) -> CallToolResponse {
    let Value::Object(args) = arguments else {
        panic!("arguments must be an object")
    };
    client
        .call_tool_once(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{name} got a protocol error: {e}"))
}

fn complete(response: CallToolResponse) -> CallToolResult {
    match response {
        CallToolResponse::Complete(r) => r,
        other => panic!("expected a complete result, got {other:?}"),
    }
}

fn structured(result: &CallToolResult) -> Value {
    result.structured_content.clone().expect("structured")
}

/// The fixture's effects file for a host started by [`host`].
fn effects_file(dir: &Path) -> PathBuf {
    dir.join("effects.jsonl")
}

/// How many times the fixture applied a submit for `request_id`.
fn effects_of(dir: &Path, request_id: &str) -> usize {
    std::fs::read_to_string(effects_file(dir))
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).expect("an effect line is JSON");
            v["requestId"] == request_id
        })
        .count()
}

async fn host(dir: &Path, action_timeout_ms: u64) -> HostProcess {
    let effects = effects_file(dir);
    HostProcess::start(
        dir,
        &[
            "--action-timeout-ms",
            &action_timeout_ms.to_string(),
            "--fixture-effects",
            effects.to_str().unwrap(),
        ],
    )
    .await
}

/// A task on the fixture page whose submit takes `delay_ms`, its title filled.
async fn slow_task(client: &Client, delay_ms: u64) -> String {
    let started = complete(
        tool(
            client,
            "task_start",
            json!({"title": "Post", "fixture": {"submit_delay_ms": delay_ms}}),
        )
        .await,
    );
    let task = structured(&started)["result"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let filled = complete(
        tool(
            client,
            "page_fill",
            json!({"task_id": task, "target": "#title", "value": "Hello"}),
        )
        .await,
    );
    assert_eq!(filled.is_error, Some(false));
    task
}

fn press(task: &str, request_id: &str) -> Value {
    json!({"task_id": task, "key": "Enter", "target": "#title", "request_id": request_id,
           "expect": {"target": "#status", "contains": "Saved"}})
}

async fn get(client: &Client, task_id: &str) -> GetTaskResult {
    client
        .get_task(GetTaskParams::new(task_id))
        .await
        .unwrap_or_else(|e| panic!("tasks/get {task_id}: {e}"))
}

/// Polls `tasks/get` until the task is completed; returns its tool result.
async fn completed(client: &Client, task_id: &str) -> Value {
    eventually("the task to complete", || async {
        let got = get(client, task_id).await;
        match &got.task.payload {
            TaskPayload::Completed { result } => {
                assert_eq!(got.task.status(), TaskStatus::Completed);
                Some(Value::Object(result.clone()))
            }
            TaskPayload::Working => None,
            other => panic!("a task is working or completed, never {other:?}"),
        }
    })
    .await
}

fn fresh_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_press_becomes_a_task_whose_result_is_the_stored_reply() {
    let dir = socket_dir();
    let _host = host(dir.path(), 10_000).await;
    for lifecycle in [Lifecycle::Initialize, Lifecycle::Discover] {
        let client = connect(dir.path(), 100, true, lifecycle).await;
        let task = slow_task(&client, 1500).await;
        let id = fresh_id();
        let CallToolResponse::Task(created) = tool(&client, "page_press", press(&task, &id)).await
        else {
            panic!("{lifecycle:?}: a press still running after --call-wait-ms is a task");
        };
        assert_eq!(created.task.task_id, id, "the MCP taskId is the request ID");
        assert_eq!(created.task.status, TaskStatus::Working);
        assert_eq!(created.task.ttl_ms, None, "receipts live until cleared");
        assert!(created.task.poll_interval_ms.is_some());
        assert!(
            created
                .task
                .status_message
                .as_deref()
                .unwrap()
                .contains("page_press is running"),
            "{created:?}"
        );

        let working = get(&client, &id).await;
        assert_eq!(working.task.status(), TaskStatus::Working, "{lifecycle:?}");
        assert!(working
            .task
            .task
            .status_message
            .as_deref()
            .unwrap()
            .contains("page_press"));

        let result = completed(&client, &id).await;
        assert_eq!(result["isError"], false, "{result}");
        let body = &result["structuredContent"];
        assert_eq!(body["request_id"], id.as_str(), "{body}");
        assert_eq!(body["result"]["observation"]["value"], "Saved #1", "{body}");
        // The same body as text, as every tool result has.
        let text = result["content"][0]["text"].as_str().unwrap();
        assert_eq!(&serde_json::from_str::<Value>(text).unwrap(), body);
        assert_eq!(effects_of(dir.path(), &id), 1);

        // The stored reply settled the task's gate: the next step goes through, and a
        // re-query of the press under its request ID replays without pressing again.
        let finish = complete(tool(&client, "task_finish", json!({"task_id": task})).await);
        assert_eq!(
            finish.is_error,
            Some(false),
            "{:?}",
            finish.structured_content
        );
        let replay = complete(tool(&client, "page_press", press(&task, &id)).await);
        assert_eq!(structured(&replay)["receipt"], "replayed");
        assert_eq!(effects_of(dir.path(), &id), 1);

        // A task id the host never saw is invalid params (SEP-2663).
        let unknown = client
            .get_task(GetTaskParams::new(fresh_id()))
            .await
            .unwrap_err();
        assert!(
            matches!(&unknown, ServiceError::McpError(e) if e.code.0 == -32602),
            "{unknown}"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_extension_sees_running_and_gets_no_tasks() {
    let dir = socket_dir();
    let _host = host(dir.path(), 10_000).await;
    let client = connect(dir.path(), 100, false, Lifecycle::Initialize).await;
    let task = slow_task(&client, 1000).await;
    let id = fresh_id();
    let running = complete(tool(&client, "page_press", press(&task, &id)).await);
    let body = structured(&running);
    assert_eq!(running.is_error, Some(false));
    assert_eq!(body["state"], "running", "{body}");
    assert_eq!(body["request_id"], id.as_str());
    assert_eq!(body["next"]["tool"], "request_status");
    // tasks/get needs the extension declared: -32021, naming the capability.
    let refused = client.get_task(GetTaskParams::new(&id)).await.unwrap_err();
    assert!(
        matches!(&refused, ServiceError::McpError(e) if e.code.0 == -32021),
        "{refused}"
    );
    eventually("the press to apply", || async {
        (effects_of(dir.path(), &id) == 1).then_some(())
    })
    .await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncertain_press_completes_with_outcome_uncertain_and_verify_outcome_next() {
    let dir = socket_dir();
    let _host = host(dir.path(), 300).await;
    let client = connect(dir.path(), 100, true, Lifecycle::Initialize).await;
    let task = slow_task(&client, 1500).await;
    let id = fresh_id();
    let CallToolResponse::Task(created) = tool(&client, "page_press", press(&task, &id)).await
    else {
        panic!("the press is a task");
    };
    let result = completed(&client, &created.task.task_id).await;
    assert_eq!(result["isError"], true, "{result}");
    let body = &result["structuredContent"];
    assert_eq!(body["code"], "OUTCOME_UNCERTAIN", "{body}");
    assert_eq!(body["delivery"], "uncertain", "{body}");
    assert_eq!(body["automaticReplay"], false, "{body}");
    assert_eq!(body["request_id"], id.as_str(), "{body}");
    assert_eq!(
        body["next"],
        json!({"tool": "verify_outcome", "arguments": {"task_id": task}})
    );
    // The late submit still lands, once, and verify_outcome confirms it.
    eventually("the late submit to be confirmed", || async {
        let v = complete(tool(&client, "verify_outcome", json!({"task_id": task})).await);
        (structured(&v)["result"]["outcome"] == "confirmed").then_some(())
    })
    .await;
    assert_eq!(effects_of(dir.path(), &id), 1);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_answered_from_the_journal_after_the_host_restarts() {
    let dir = socket_dir();
    let mut first = host(dir.path(), 10_000).await;
    let client = connect(dir.path(), 100, true, Lifecycle::Initialize).await;
    let task = slow_task(&client, 1200).await;
    let id = fresh_id();
    let CallToolResponse::Task(_) = tool(&client, "page_press", press(&task, &id)).await else {
        panic!("the press is a task");
    };
    assert_eq!(get(&client, &id).await.task.status(), TaskStatus::Working);

    // The press ends and is stored; then the host stops and a new one opens the journal.
    eventually("the press to be stored", || async {
        let r = bridge(dir.path(), "receipt.status", json!({"requestId": id})).await;
        (r["result"]["state"] == "completed").then_some(())
    })
    .await;
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(&first.child),
        rustix::process::Signal::TERM,
    );
    let stopped = first.child.wait().unwrap();
    assert!(stopped.success(), "the host stops cleanly: {stopped}");
    let _second = host(dir.path(), 10_000).await;

    let result = completed(&client, &id).await;
    assert_eq!(result["isError"], false, "{result}");
    let body = &result["structuredContent"];
    assert_eq!(body["result"]["observation"]["value"], "Saved #1", "{body}");
    // The receipt's run is the first one; the read came from the second.
    assert!(body["run_changed"].is_object(), "{body}");
    assert_eq!(effects_of(dir.path(), &id), 1);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_is_acknowledged_and_never_applied_to_the_press() {
    let dir = socket_dir();
    let _host = host(dir.path(), 10_000).await;
    let client = connect(dir.path(), 100, true, Lifecycle::Initialize).await;
    let task = slow_task(&client, 1500).await;
    let id = fresh_id();
    let CallToolResponse::Task(_) = tool(&client, "page_press", press(&task, &id)).await else {
        panic!("the press is a task");
    };
    client
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect("tasks/cancel is acknowledged");
    let working = get(&client, &id).await;
    assert_eq!(working.task.status(), TaskStatus::Working);
    assert!(
        working
            .task
            .task
            .status_message
            .as_deref()
            .unwrap()
            .contains("not applied"),
        "{working:?}"
    );

    let result = completed(&client, &id).await;
    assert_eq!(result["isError"], false, "{result}");
    let body = &result["structuredContent"];
    assert_eq!(body["result"]["observation"]["value"], "Saved #1", "{body}");
    assert_eq!(body["cancellation"]["applied"], false, "{body}");
    assert!(body["cancellation"]["message"]
        .as_str()
        .unwrap()
        .contains("never cancels host work"));
    assert_eq!(effects_of(dir.path(), &id), 1, "the click applied once");
    let status = bridge(dir.path(), "run.status", json!({})).await;
    assert_eq!(status["result"]["executor"]["mutations"], 1);

    // Cancelling a task the host never saw is invalid params.
    let unknown = client
        .cancel_task(CancelTaskParams::new(fresh_id()))
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, ServiceError::McpError(e) if e.code.0 == -32602),
        "{unknown}"
    );
    client.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// One request on the host's introspection socket (the operator's channel).
fn operator(dir: &Path, method: &str, params: Value) -> Value {
    use std::io::{BufRead, Write};
    let mut s = std::os::unix::net::UnixStream::connect(dir.join("introspect.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let frame = json!({"id": fresh_id(), "method": method, "params": params});
    s.write_all(format!("{frame}\n").as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    let reply: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["ok"], true, "{method}: {reply}");
    reply["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outlives_its_front_and_a_cleared_one_says_so() {
    let dir = socket_dir();
    let _host = host(dir.path(), 10_000).await;
    let first = connect(dir.path(), 100, true, Lifecycle::Initialize).await;
    let task = slow_task(&first, 800).await;
    let id = fresh_id();
    let CallToolResponse::Task(_) = tool(&first, "page_press", press(&task, &id)).await else {
        panic!("the press is a task");
    };
    first.cancel().await.unwrap();

    // Another front, with no memory of the call, answers the task from the receipt.
    let second = connect(dir.path(), 100, true, Lifecycle::Discover).await;
    let result = completed(&second, &id).await;
    assert_eq!(
        result["structuredContent"]["result"]["observation"]["value"], "Saved #1",
        "{result}"
    );

    // An operator clears the receipt: the task is still answered, and says it was cleared.
    let prepared = operator(
        dir.path(),
        "receipts.clearPrepare",
        json!({"requestIds": [id]}),
    );
    operator(
        dir.path(),
        "receipts.clearCommit",
        json!({"token": prepared["token"], "reason": "tidy up"}),
    );
    let cleared = completed(&second, &id).await;
    assert_eq!(cleared["isError"], true, "{cleared}");
    let body = &cleared["structuredContent"];
    assert_eq!(body["code"], "RECEIPT_CLEARED", "{body}");
    assert_eq!(body["delivery"], "cleared", "{body}");
    assert_eq!(
        body["next"],
        json!({"tool": "request_status", "arguments": {"request_id": id}})
    );
    assert_eq!(effects_of(dir.path(), &id), 1);
    second.cancel().await.unwrap();
}
