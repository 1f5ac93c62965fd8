//! `polaris mcp` driven by rmcp's own client over stdio, against a real `polaris serve`.

use polaris_testkit::mcp::{bridge, eventually, socket_dir, HostProcess};
use polaris_testkit::mcp_client;

use std::path::Path;
use std::time::Duration;

use mcp_client::{call, connect, mcp_command, structured, Client};

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_polaris");
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ProtocolVersion,
};
use rmcp::service::PeerRequestOptions;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceError};
use serde_json::{json, Value};

async fn mcp(dir: &Path, call_wait_ms: u64) -> Client {
    connect(dir, Some(call_wait_ms)).await
}

/// The structured content, after checking that the text content carries the same JSON.
fn body(result: &CallToolResult) -> Value {
    let structured = structured(result);
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .expect("and a text copy")
        .text
        .clone();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), structured);
    assert!(
        structured["request_id"].is_string(),
        "request_id in every result: {structured}"
    );
    structured
}

fn ok(result: &CallToolResult) -> Value {
    let b = body(result);
    assert_eq!(result.is_error, Some(false), "expected success, got {b}");
    b
}

fn err(result: &CallToolResult) -> Value {
    let b = body(result);
    assert_eq!(result.is_error, Some(true), "expected an error, got {b}");
    assert_eq!(b["automaticReplay"], false);
    assert!(b["next"]["tool"].is_string(), "next names a tool: {b}");
    b
}

async fn start_task(client: &Client, fixture: Value) -> (String, String) {
    let started = ok(&call(
        client,
        "task_start",
        json!({"title": "Post", "fixture": fixture}),
    )
    .await);
    let r = &started["result"];
    (
        r["task_id"].as_str().unwrap().to_owned(),
        r["run_id"].as_str().unwrap().to_owned(),
    )
}

/// `page_fill` of the fixture page's `#title` with `value`.
async fn fill_title(client: &Client, task: &str, value: &str) -> CallToolResult {
    call(
        client,
        "page_fill",
        json!({"task_id": task, "target": "#title", "value": value}),
    )
    .await
}

fn press_args(task: &str) -> Value {
    json!({"task_id": task, "key": "Enter", "target": "#title", "expect": {"target": "#status", "contains": "Saved"}})
}

async fn read(client: &Client, task: &str, target: &str) -> String {
    let r = ok(&call(
        client,
        "page_read",
        json!({"task_id": task, "target": target}),
    )
    .await);
    r["result"]["value"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_carry_annotations_and_schemas_on_both_protocols() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let client = mcp(dir.path(), 20_000).await;
    assert_eq!(
        client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2025_11_25
    );
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    assert_eq!(
        names,
        [
            "task_start",
            "page_fill",
            "page_click",
            "page_press",
            "page_navigate",
            "page_select",
            "page_check",
            "page_upload",
            "page_hover",
            "page_type",
            "page_read",
            "page_snapshot",
            "page_wait",
            "page_screenshot",
            "page_url",
            "page_tabs",
            "task_save_profile",
            "task_finish",
            "task_stop",
            "task_status",
            "task_resume",
            "verify_outcome",
            "run_status",
            "request_status"
        ]
    );
    let reads = [
        "page_read",
        "page_snapshot",
        "page_wait",
        "page_screenshot",
        "page_url",
        "page_tabs",
        "task_status",
        "task_resume",
        "verify_outcome",
        "run_status",
        "request_status",
    ];
    for tool in &tools {
        let a = tool.annotations.as_ref().expect("annotated");
        let schema = serde_json::to_value(tool.input_schema.as_ref()).unwrap();
        assert_eq!(schema["type"], "object");
        assert_eq!(
            schema["additionalProperties"], false,
            "{} refuses unknown arguments",
            tool.name
        );
        if reads.contains(&&*tool.name) {
            assert_eq!(a.read_only_hint, Some(true), "{} is a read", tool.name);
            assert!(
                schema["properties"].get("request_id").is_none() || tool.name == "request_status"
            );
        } else {
            assert_eq!(a.read_only_hint, Some(false), "{} mutates", tool.name);
            assert_ne!(
                a.idempotent_hint,
                Some(true),
                "{} is never idempotent",
                tool.name
            );
            assert!(
                schema["properties"]["request_id"].is_object(),
                "{} takes request_id",
                tool.name
            );
            assert!(!schema["required"]
                .as_array()
                .unwrap()
                .contains(&json!("request_id")));
            assert!(tool
                .description
                .as_deref()
                .unwrap()
                .contains("executes again"));
        }
    }
    let destructive = |n: &str| {
        tools
            .iter()
            .find(|t| t.name == n)
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()
            .destructive_hint
    };
    assert_eq!(destructive("page_press"), Some(true));
    assert_eq!(destructive("page_navigate"), Some(true));
    assert_eq!(destructive("page_check"), Some(false));
    // A target is a CSS string or a locator object, in every tool that takes one.
    let click = tools.iter().find(|t| t.name == "page_click").unwrap();
    let click = serde_json::to_value(click.input_schema.as_ref())
        .unwrap()
        .to_string();
    assert!(
        click.contains("\"ref\"") && click.contains("\"role\""),
        "{click}"
    );
    assert_eq!(destructive("task_start"), Some(false));
    let press = serde_json::to_value(
        tools
            .iter()
            .find(|t| t.name == "page_press")
            .unwrap()
            .input_schema
            .as_ref(),
    )
    .unwrap();
    let required: Vec<&str> = press["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for field in ["task_id", "key"] {
        assert!(
            required.contains(&field),
            "page_press requires {field}: {press}"
        );
    }
    // `expect` may be left out only for a local step (the host refuses it otherwise, naming
    // `local`); the schema offers both, and the dialog answer.
    for field in ["expect", "local", "dialog"] {
        assert!(
            press["properties"].get(field).is_some(),
            "page_press takes {field}: {press}"
        );
    }
    let start = serde_json::to_value(tools[0].input_schema.as_ref())
        .unwrap()
        .to_string();
    assert!(
        start.contains("submit_delay_ms") && !start.contains("submitDelayMs"),
        "snake_case nested params: {start}"
    );
    let status = serde_json::to_value(
        tools
            .iter()
            .find(|t| t.name == "request_status")
            .unwrap()
            .input_schema
            .as_ref(),
    )
    .unwrap();
    assert_eq!(status["required"], json!(["request_id"]));
    client.cancel().await.unwrap();

    // A 2026-07-28 client: no initialize, self-contained requests.
    let modern = ()
        .serve_with_lifecycle(
            TokioChildProcess::new(mcp_command(dir.path(), Some(20_000))).unwrap(),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 client connects");
    assert_eq!(
        modern.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    assert_eq!(modern.list_all_tools().await.unwrap().len(), 24);
    let (task, _) = start_task(&modern, json!({})).await;
    assert_eq!(read(&modern, &task, "#status").await, "Draft");
    modern.cancel().await.unwrap();
}

/// SPEC §15 through MCP on the fixture page: the agent sees the page, then acts only on
/// what the snapshot named (refs and role locators), with no CSS of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_acts_on_what_the_snapshot_shows() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let client = mcp(dir.path(), 20_000).await;
    let (task, _) = start_task(&client, json!({})).await;
    let snap = ok(&call(&client, "page_snapshot", json!({"task_id": task})).await);
    let outline = snap["result"]["snapshot"]
        .as_str()
        .expect("a yaml outline")
        .to_owned();
    let title_ref = outline
        .lines()
        .find(|l| l.contains("textbox \"Title\""))
        .and_then(|l| l.split("[ref=").nth(1))
        .and_then(|r| r.split(']').next())
        .expect("the title's ref")
        .to_owned();
    ok(&call(
        &client,
        "page_fill",
        json!({"task_id": task, "target": {"ref": title_ref}, "value": "Q3"}),
    )
    .await);
    ok(&call(
        &client,
        "page_select",
        json!({"task_id": task, "target": {"role": "combobox", "name": "Category"}, "value": "notes"}),
    )
    .await);
    ok(&call(
        &client,
        "page_check",
        json!({"task_id": task, "target": {"role": "checkbox", "name": "Urgent"}, "checked": true}),
    )
    .await);
    let clicked = ok(&call(
        &client,
        "page_click",
        json!({"task_id": task, "target": {"role": "button", "name": "Submit"},
               "expect": {"target": {"role": "status"}, "equals": "Saved #1"}}),
    )
    .await);
    assert_eq!(
        clicked["result"]["observation"]["value"], "Saved #1",
        "{clicked}"
    );
    let waited = ok(&call(
        &client,
        "page_wait",
        json!({"task_id": task, "text": "Saved #1"}),
    )
    .await);
    assert_eq!(waited["result"]["state"], "visible");
    // Refused before anything is stored: the fixture has no browser history.
    let refused = err(&call(
        &client,
        "page_navigate",
        json!({"task_id": task, "url": "back"}),
    )
    .await);
    assert_eq!(refused["code"], "BAD_REQUEST", "{refused}");
    let status = bridge(dir.path(), "run.status", json!({})).await;
    assert_eq!(status["result"]["executor"]["mutations"], 1, "{status}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_task_then_a_requery_replays_and_a_resend_executes_again() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let client = mcp(dir.path(), 20_000).await;
    let (task, run) = start_task(&client, json!({})).await;

    let filled = ok(&fill_title(&client, &task, "Hello").await);
    assert_eq!(filled["receipt"], "new");
    assert_eq!(filled["run_id"], run.as_str());
    assert_eq!(
        filled["result"],
        json!({"target": "#title", "value": "Hello"})
    );

    let mut args = press_args(&task);
    args["request_id"] = json!("press-1");
    let pressed = ok(&call(&client, "page_press", args.clone()).await);
    assert_eq!(pressed["request_id"], "press-1");
    assert_eq!(pressed["receipt"], "new");
    assert_eq!(pressed["result"]["observation"]["value"], "Saved #1");

    // A re-query: the same request_id with the same arguments is answered from the receipt.
    let again = ok(&call(&client, "page_press", args).await);
    assert_eq!(again["receipt"], "replayed");
    assert_eq!(again["result"], pressed["result"]);
    assert_eq!(read(&client, &task, "#submissions").await, "1");

    // The same tools/call twice without request_id: two requests, two receipts, each sent on
    // its own merits. The second is refused before anything is sent only because its
    // expectation (the second save) already holds by then: it could show nothing.
    let mut next = press_args(&task);
    next["expect"] = json!({"target": "#submissions", "equals": "2"});
    let first = ok(&call(&client, "page_press", next.clone()).await);
    let second = err(&call(&client, "page_press", next).await);
    assert_ne!(first["request_id"], second["request_id"]);
    assert_eq!(
        (first["receipt"].as_str(), second["receipt"].as_str()),
        (Some("new"), Some("new"))
    );
    assert_eq!(first["result"]["observation"]["value"], "2");
    assert_eq!(second["code"], "ACTION_FAILED");
    assert_eq!(second["delivery"], "not_sent");
    assert_eq!(second["details"]["cause"], "expectation_already_holds");
    assert_eq!(read(&client, &task, "#submissions").await, "2");
    // With an expectation only it can make true, a resend executes again.
    let mut third = press_args(&task);
    third["expect"] = json!({"target": "#submissions", "equals": "3"});
    let third = ok(&call(&client, "page_press", third).await);
    assert_eq!(third["result"]["observation"]["value"], "3");
    assert_eq!(read(&client, &task, "#submissions").await, "3");

    let finished = ok(&call(&client, "task_finish", json!({"task_id": task})).await);
    assert_eq!(finished["result"]["state"], "finished");
    let closed = err(&fill_title(&client, &task, "x").await);
    assert_eq!(closed["code"], "TASK_CLOSED");
    assert_eq!(closed["delivery"], "not_executed");
    assert_eq!(
        closed["next"],
        json!({"tool": "task_status", "arguments": {"task_id": task}})
    );

    let status = ok(&call(&client, "run_status", json!({"run_id": run})).await);
    assert_eq!(status["result"]["current"], true);
    assert_eq!(status["result"]["executor"]["mutations"], 3);
    let resumed = ok(&call(
        &client,
        "task_resume",
        json!({"task_id": task, "run_id": run}),
    )
    .await);
    assert_eq!(resumed["result"]["state"], "finished");
    let receipt = ok(&call(&client, "request_status", json!({"request_id": "press-1"})).await);
    assert_eq!(receipt["result"]["request_id"], "press-1");
    assert_eq!(receipt["result"]["state"], "completed");
    assert_eq!(receipt["result"]["replays"], 1);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_call_is_disconnected_and_the_gate_holds_until_a_read_settles_it() {
    let dir = socket_dir();
    let mut host = HostProcess::start(dir.path(), &["--action-timeout-ms", "30000"]).await;
    let client = mcp(dir.path(), 20_000).await;
    let (task, run) = start_task(&client, json!({"submit_delay_ms": 20000})).await;

    let mut args = press_args(&task);
    args["request_id"] = json!("press-lost");
    let pressing = {
        let args = args.clone();
        let peer = client.peer().clone();
        tokio::spawn(async move {
            let Value::Object(a) = args else {
                unreachable!()
            };
            peer.call_tool(CallToolRequestParams::new("page_press").with_arguments(a))
                .await
        })
    };
    // Kill the host once it holds the press as a running receipt whose begin is on disk (a
    // receipt killed before that was never executed and is rightly unknown after a restart).
    eventually("the press to be running on the host", || async {
        let r = bridge(
            dir.path(),
            "receipt.status",
            json!({"requestId": "press-lost"}),
        )
        .await;
        (r["result"]["state"] == "running").then_some(())
    })
    .await;
    eventually("the press's begin to be durable", || async {
        let out = std::process::Command::new(BIN)
            .args(["journal", "check", "--json", "--journal"])
            .arg(dir.path().join("journal"))
            .output()
            .expect("polaris journal check runs");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (report["running"].as_u64() >= Some(1)).then_some(())
    })
    .await;
    host.kill();

    let lost = pressing
        .await
        .unwrap()
        .expect("a tool result, not a protocol error");
    let lost = err(&lost);
    assert_eq!(lost["code"], "BRIDGE_DISCONNECTED");
    assert_eq!(lost["delivery"], "unknown");
    assert_eq!(lost["request_id"], "press-lost");
    assert_eq!(
        lost["next"],
        json!({"tool": "request_status", "arguments": {"request_id": "press-lost"}})
    );

    // Further mutations on the task are refused locally, and say which read settles it.
    let refused = err(&fill_title(&client, &task, "x").await);
    assert_eq!(refused["code"], "CLIENT_BLOCKED_AMBIGUOUS");
    assert_eq!(refused["delivery"], "not_sent");
    assert_eq!(refused["details"]["blocking_request_id"], "press-lost");
    assert_eq!(
        refused["next"],
        json!({"tool": "request_status", "arguments": {"request_id": "press-lost"}})
    );
    assert_ne!(refused["request_id"], "press-lost");
    let refused = err(&call(&client, "task_finish", json!({"task_id": task})).await);
    assert_eq!(refused["code"], "CLIENT_BLOCKED_AMBIGUOUS");

    // task_stop (the way out) and reads pass the gate: with the host gone, nothing was sent.
    let stop = err(&call(
        &client,
        "task_stop",
        json!({"task_id": task, "reason": "host lost"}),
    )
    .await);
    assert_eq!(stop["code"], "BRIDGE_UNAVAILABLE");
    assert_eq!(stop["delivery"], "not_sent");
    let down = err(&call(&client, "task_status", json!({"task_id": task})).await);
    assert_eq!(down["code"], "BRIDGE_UNAVAILABLE");
    assert_eq!(down["delivery"], "not_sent");

    // The host comes back as a new run on the same journal; the read of the lost request
    // reports the change, and the press it was executing is stored as INTERRUPTED.
    let _host = HostProcess::start(dir.path(), &[]).await;
    let read = ok(&call(
        &client,
        "request_status",
        json!({"request_id": "press-lost"}),
    )
    .await);
    assert_eq!(read["result"]["state"], "completed", "{read}");
    assert_eq!(
        read["result"]["reply"]["error"]["code"], "INTERRUPTED",
        "{read}"
    );
    assert_eq!(read["run_changed"]["previous_run_id"], run.as_str());
    assert_eq!(read["run_changed"]["task_id"], task.as_str());
    assert_ne!(read["run_changed"]["current_run_id"], run.as_str());
    assert_eq!(read["settled"][0]["how"], "run_ended");
    // Settled: the next mutation reaches the host, whose task of the earlier run is
    // interrupted.
    let gone = err(&fill_title(&client, &task, "x").await);
    assert_eq!(gone["code"], "TASK_CLOSED", "{gone}");
    assert_eq!(gone["delivery"], "not_executed");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncertain_outcome_gates_the_task_until_verify_outcome_confirms_it() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &["--action-timeout-ms", "200"]).await;
    let client = mcp(dir.path(), 20_000).await;
    let (task, _) = start_task(&client, json!({"submit_delay_ms": 600})).await;
    let uncertain = err(&call(&client, "page_press", press_args(&task)).await);
    assert_eq!(uncertain["code"], "OUTCOME_UNCERTAIN");
    assert_eq!(uncertain["delivery"], "uncertain");
    assert_eq!(
        uncertain["next"],
        json!({"tool": "verify_outcome", "arguments": {"task_id": task}})
    );
    let pressed_id = uncertain["request_id"].as_str().unwrap().to_owned();

    let refused = err(&call(&client, "page_press", press_args(&task)).await);
    assert_eq!(refused["code"], "CLIENT_BLOCKED_AMBIGUOUS");
    assert_eq!(
        refused["next"],
        json!({"tool": "verify_outcome", "arguments": {"task_id": task}})
    );
    // request_status shows the stored uncertain reply: that alone settles nothing.
    let stored = ok(&call(&client, "request_status", json!({"request_id": pressed_id})).await);
    assert_eq!(
        stored["result"]["reply"]["error"]["code"],
        "OUTCOME_UNCERTAIN"
    );
    assert!(stored.get("settled").is_none());

    let verified = eventually("the late submit to be confirmed", || async {
        let v = ok(&call(&client, "verify_outcome", json!({"task_id": task})).await);
        (v["result"]["outcome"] == "confirmed").then_some(v)
    })
    .await;
    assert_eq!(verified["settled"][0]["request_id"], pressed_id.as_str());
    ok(&fill_title(&client, &task, "next").await);
    assert_eq!(read(&client, &task, "#submissions").await, "1");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_action_answers_running_then_request_status_shows_it_completed() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &["--action-timeout-ms", "10000"]).await;
    let client = mcp(dir.path(), 100).await;
    let (task, _) = start_task(&client, json!({"submit_delay_ms": 2000})).await;

    let running = call(&client, "page_press", press_args(&task)).await;
    assert_eq!(running.is_error, Some(false));
    let running = body(&running);
    assert_eq!(running["state"], "running");
    let id = running["request_id"].as_str().unwrap().to_owned();
    assert_eq!(
        running["next"],
        json!({"tool": "request_status", "arguments": {"request_id": id}})
    );

    let refused = err(&fill_title(&client, &task, "x").await);
    assert_eq!(refused["code"], "CLIENT_BLOCKED_AMBIGUOUS");
    assert_eq!(refused["details"]["blocking_request_id"], id.as_str());

    let done = eventually("the press to complete", || async {
        let r = ok(&call(&client, "request_status", json!({"request_id": id})).await);
        (r["result"]["state"] == "completed").then_some(r)
    })
    .await;
    assert_eq!(done["result"]["ok"], true);
    assert_eq!(
        done["result"]["reply"]["result"]["observation"]["value"],
        "Saved #1"
    );
    assert_eq!(done["settled"][0]["how"], "completed");
    ok(&fill_title(&client, &task, "x").await);
    assert_eq!(read(&client, &task, "#submissions").await, "1");
    client.cancel().await.unwrap();
}

/// An agent whose front restarted (a new `polaris mcp`, no memory of the call) reads
/// `task_status` before it acts and sees the press still in flight: in `in_flight` and as
/// `running` at the end of its history (SPEC §14). Had it pressed again anyway, the second press
/// would wait its turn and never reach the page while the first is unsettled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_agent_sees_the_press_in_flight_before_it_acts() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &["--action-timeout-ms", "10000"]).await;
    let first = mcp(dir.path(), 100).await;
    let (task, _) = start_task(&first, json!({"submit_delay_ms": 1500})).await;
    let running = body(&call(&first, "page_press", press_args(&task)).await);
    assert_eq!(running["state"], "running");
    let id = running["request_id"].as_str().unwrap().to_owned();
    first.cancel().await.unwrap();

    let again = mcp(dir.path(), 10_000).await;
    let status = ok(&call(&again, "task_status", json!({"task_id": task})).await);
    let in_flight = &status["result"]["in_flight"];
    assert_eq!(in_flight.as_array().map(Vec::len), Some(1), "{status}");
    assert_eq!(in_flight[0]["request_id"], id.as_str(), "{status}");
    assert_eq!(in_flight[0]["method"], "page.press", "{status}");
    let last = status["result"]["history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["request_id"], id.as_str(), "{status}");
    assert_eq!(last["result"], "running", "{status}");

    // A second press sent regardless waits behind the first, which then takes effect: the
    // second's expectation held by its turn, so it is refused with nothing sent.
    let second = err(&call(&again, "page_press", press_args(&task)).await);
    assert_eq!(second["code"], "ACTION_FAILED", "{second}");
    assert_eq!(second["delivery"], "not_sent", "{second}");
    assert_eq!(read(&again, &task, "#submissions").await, "1");
    again.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_still_completes_once_on_the_host() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &["--action-timeout-ms", "10000"]).await;
    let client = mcp(dir.path(), 20_000).await;
    let (task, _) = start_task(&client, json!({"submit_delay_ms": 1500})).await;

    // rmcp's client gives up after 100 ms and sends notifications/cancelled, as agents do.
    let Value::Object(args) = press_args(&task) else {
        unreachable!()
    };
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("page_press").with_arguments(args),
    ));
    let handle = client
        .peer()
        .send_request_with_option(
            request,
            PeerRequestOptions::with_timeout(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    assert!(matches!(
        handle.await_response().await,
        Err(ServiceError::Timeout { .. })
    ));

    let mutations = eventually("the press to apply on the host", || async {
        let r = bridge(dir.path(), "run.status", json!({})).await;
        let n = r["result"]["executor"]["mutations"].as_u64().unwrap();
        (n > 0).then_some(n)
    })
    .await;
    assert_eq!(mutations, 1);

    // The agent never saw the result, so the task is gated until it reads what happened.
    let refused = err(&call(&client, "page_press", press_args(&task)).await);
    assert_eq!(refused["code"], "CLIENT_BLOCKED_AMBIGUOUS");
    let cancelled_id = refused["details"]["blocking_request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = eventually("the cancelled press to complete", || async {
        let r = ok(&call(
            &client,
            "request_status",
            json!({"request_id": cancelled_id}),
        )
        .await);
        (r["result"]["state"] == "completed").then_some(r)
    })
    .await;
    assert_eq!(
        done["result"]["reply"]["result"]["observation"]["value"],
        "Saved #1"
    );
    assert_eq!(read(&client, &task, "#submissions").await, "1");
    let r = bridge(dir.path(), "run.status", json!({})).await;
    assert_eq!(
        r["result"]["executor"]["mutations"], 1,
        "executed exactly once"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_is_not_running_is_unavailable_and_nothing_was_sent() {
    let dir = socket_dir();
    let client = mcp(dir.path(), 20_000).await;
    let r = err(&call(&client, "task_start", json!({"title": "Post"})).await);
    assert_eq!(r["code"], "BRIDGE_UNAVAILABLE");
    assert_eq!(r["delivery"], "not_sent");
    assert!(r["message"].as_str().unwrap().contains("polaris serve"));
    assert_eq!(r["next"], json!({"tool": "run_status", "arguments": {}}));
    let r = err(&call(&client, "request_status", json!({"request_id": "anything"})).await);
    assert_eq!(r["code"], "BRIDGE_UNAVAILABLE");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_the_host_refuses_as_too_large_is_not_executed_and_does_not_gate_the_task() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &["--max-frame-bytes", "4096"]).await;
    let client = mcp(dir.path(), 20_000).await;
    let (task, _) = start_task(&client, json!({})).await;
    let r = err(&fill_title(&client, &task, &"v".repeat(8192)).await);
    assert_eq!(r["code"], "FRAME_TOO_LARGE", "{r}");
    assert_eq!(r["delivery"], "not_executed", "{r}");
    // The task is not gated: the next mutation goes through, on a new connection.
    ok(&fill_title(&client, &task, "short").await);
    assert_eq!(read(&client, &task, "#title").await, "short");
    client.cancel().await.unwrap();
}

/// `polaris mcp` over raw stdin/stdout lines, for what an SDK client would never send.
struct RawFront {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
}

impl RawFront {
    async fn start(dir: &Path) -> RawFront {
        let mut child = mcp_command(dir, Some(20_000))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("polaris mcp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        RawFront {
            child,
            stdin,
            stdout,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(bytes).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn line(&mut self) -> Value {
        use tokio::io::AsyncBufReadExt;
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(20), self.stdout.read_line(&mut line))
            .await
            .expect("an answer within 20 s")
            .unwrap();
        assert!(n > 0, "polaris mcp closed stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Sends `bytes` (a line, or what should be one), then a ping, and returns every answer
    /// that came before the ping's (or, when none did, the one that came just after it).
    async fn answers_to(&mut self, bytes: &[u8], n: usize) -> Vec<Value> {
        self.send(bytes).await;
        let ping = format!("ping-{n}");
        self.send(
            format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": ping, "method": "ping"})
            )
            .as_bytes(),
        )
        .await;
        let mut before = Vec::new();
        loop {
            let v = self.line().await;
            if v["id"] == ping.as_str() {
                assert!(v.get("result").is_some(), "{v}");
                break;
            }
            before.push(v);
        }
        // Requests with an id may be answered in any order, so an answer to `bytes` can come
        // just after the ping's; a second answer would show up in the next call's list.
        if before.is_empty() {
            use tokio::io::AsyncBufReadExt;
            let mut line = String::new();
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_secs(2), self.stdout.read_line(&mut line)).await
            {
                if n > 0 {
                    before.push(
                        serde_json::from_str(&line)
                            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}")),
                    );
                }
            }
        }
        before
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_the_front_reads_gets_exactly_one_answer() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &[]).await;
    let mut front = RawFront::start(dir.path()).await;
    // A line before the handshake is answered too.
    let early = front.answers_to(b"not json\n", 0).await;
    assert_eq!(early.len(), 1, "{early:?}");
    assert_eq!(early[0]["error"]["code"], -32700);
    front
        .send(
            format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"}}})
            )
            .as_bytes(),
        )
        .await;
    let init = front.line().await;
    assert_eq!(init["id"], "init");
    assert!(init.get("result").is_some(), "{init}");
    front
        .send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await;

    let cases: Vec<(Vec<u8>, i64, Value)> = vec![
        (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\"\n".to_vec(), -32700, Value::Null),
        (b"\n".to_vec(), -32700, Value::Null),
        (b"\r\n".to_vec(), -32700, Value::Null),
        (b"\xff\xfe\xfd\n".to_vec(), -32700, Value::Null),
        (b"[]\n".to_vec(), -32600, Value::Null),
        (
            format!("{}\n", json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"arguments": {}}})).into_bytes(),
            -32602,
            json!(41),
        ),
        (
            format!("{}\n", json!({"jsonrpc": "2.0", "id": "a42", "method": "tools/call", "params": {"name": "host_hello", "arguments": [1]}})).into_bytes(),
            -32602,
            json!("a42"),
        ),
        (
            format!("{}\n", json!({"jsonrpc": "2.0", "id": 43, "method": "no/such/method"})).into_bytes(),
            -32601,
            json!(43),
        ),
    ];
    for (n, (line, code, id)) in cases.into_iter().enumerate() {
        let answers = front.answers_to(&line, n + 1).await;
        assert_eq!(
            answers.len(),
            1,
            "exactly one answer to {:?}: {answers:?}",
            String::from_utf8_lossy(&line)
        );
        assert_eq!(answers[0]["error"]["code"], code, "{:?}", answers[0]);
        assert_eq!(answers[0]["id"], id, "{:?}", answers[0]);
        assert_eq!(answers[0]["jsonrpc"], "2.0");
    }
    // And a well-formed call is still served after all that.
    front
        .send(format!("{}\n", json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {"name": "run_status", "arguments": {}}})).as_bytes())
        .await;
    let served = front.line().await;
    assert_eq!(served["id"], 50, "{served}");
    assert_eq!(served["result"]["isError"], false, "{served}");
    drop(front.stdin);
    let status = tokio::time::timeout(Duration::from_secs(20), front.child.wait())
        .await
        .expect("polaris mcp ends when stdin closes")
        .unwrap();
    assert!(status.success(), "{status}");
}
