//! The introspection channel against a real host on real local sockets: events, the
//! never-reading subscriber, two-phase clearing, tombstones, capacity, the audit log, the
//! socket's permissions and peer check, and the operator commands through the real binary.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use interprocess::local_socket::tokio::{prelude::*, Stream};
use interprocess::local_socket::GenericFilePath;
use polaris::client::BridgeClient;
use polaris::executor::FixtureExecutor;
use polaris::host::HostConfig;
use polaris::protocol::{Reply, DEFAULT_MAX_FRAME_BYTES};
use polaris::serve::{start, Running, ServeOptions};
use polaris::server::Limits;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A guard against a hang, never an assertion about speed.
const PATIENCE: Duration = Duration::from_secs(60);

struct TestHost {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    audit: PathBuf,
    running: Running,
    bridge: BridgeClient,
    intro: BridgeClient,
}

fn options(
    dir: &Path,
    audit: &Path,
    capacity: usize,
    tombstones: usize,
    action_ms: u64,
) -> ServeOptions {
    ServeOptions {
        socket_dir: dir.to_path_buf(),
        host: HostConfig {
            capacity,
            tombstone_capacity: tombstones,
            action_timeout: Duration::from_millis(action_ms),
            ..HostConfig::default()
        },
        limits: Limits {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_connections: 64,
            ..Limits::default()
        },
        audit_log: audit.to_path_buf(),
    }
}

fn start_host(capacity: usize, tombstones: usize, action_ms: u64) -> TestHost {
    let tmp = tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = tmp.path().join("s");
    let audit = tmp.path().join("state").join("audit.jsonl");
    let running = start(
        &options(&dir, &audit, capacity, tombstones, action_ms),
        Arc::new(FixtureExecutor::new()),
    )
    .expect("the host starts");
    let bridge = BridgeClient::new(&dir);
    let intro = BridgeClient::at_path(&dir.join("introspect.sock"));
    TestHost {
        _tmp: tmp,
        dir,
        audit,
        running,
        bridge,
        intro,
    }
}

async fn call(c: &BridgeClient, method: &str, params: Value) -> Reply {
    c.call(method, params).await.expect("the host answers")
}

async fn call_id(c: &BridgeClient, id: &str, method: &str, params: Value) -> Reply {
    c.call_with_id(id, method, params)
        .await
        .expect("the host answers")
}

fn ok(r: Reply) -> Value {
    assert!(r.ok, "expected ok, got {r:?}");
    r.result.unwrap()
}

fn err_code(r: &Reply) -> &'static str {
    assert!(!r.ok, "expected an error, got {r:?}");
    r.error.as_ref().unwrap().code.as_str()
}

async fn start_task(h: &TestHost, fixture: Value) -> String {
    let r = ok(call(
        &h.bridge,
        "task.start",
        json!({"title": "post", "fixture": fixture}),
    )
    .await);
    r["taskId"].as_str().unwrap().to_owned()
}

fn fill(task: &str, value: &str) -> Value {
    json!({"taskId": task, "target": "#title", "value": value})
}

fn click(task: &str) -> Value {
    json!({"taskId": task, "target": "#submit", "expect": {"target": "#status", "contains": "Saved"}})
}

async fn run_status(h: &TestHost) -> Value {
    ok(call(&h.bridge, "run.status", json!({})).await)
}

/// Waits (bounded) for `n` event frames from a subscription sink.
async fn events(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    while out.len() < n {
        let e = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("events arrive")
            .expect("sink open");
        out.push(e);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_sees_the_events_of_a_scripted_run_in_order() {
    let h = start_host(100, 100, 300);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sub = BridgeClient::at_path(&h.dir.join("introspect.sock")).with_event_sink(tx);
    let subscribed = ok(call(&sub, "subscribe", json!({})).await);
    assert_eq!(subscribed["subscribed"], true);
    let start_seq = subscribed["seq"].as_u64().unwrap();

    let task = ok(call_id(
        &h.bridge,
        "s1",
        "task.start",
        json!({"title": "t", "fixture": {"dropSubmit": true}}),
    )
    .await)["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&task, "a")).await);
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&task, "a")).await);
    let reused = call_id(&h.bridge, "f1", "page.fill", fill(&task, "other")).await;
    assert_eq!(err_code(&reused), "MCP_REQUEST_ID_REUSED");
    let uncertain = call_id(&h.bridge, "c1", "page.click", click(&task)).await;
    assert_eq!(err_code(&uncertain), "OUTCOME_UNCERTAIN");
    let blocked = call_id(&h.bridge, "f2", "page.fill", fill(&task, "b")).await;
    assert_eq!(err_code(&blocked), "TASK_BLOCKED");
    ok(call_id(
        &h.bridge,
        "x1",
        "task.stop",
        json!({"taskId": task, "reason": "gave up"}),
    )
    .await);
    let lost = call_id(&h.bridge, "n1", "page.fill", fill("no-such-task", "a")).await;
    assert_eq!(err_code(&lost), "TASK_NOT_FOUND");
    let prepared = prepare(&h.intro, json!({"requestIds": ["f1"]})).await;
    commit(&h.intro, &prepared["token"], "test").await;

    let expected = [
        ("receipt.created", "s1"),
        ("task.updated", ""),
        ("receipt.completed", "s1"),
        ("receipt.created", "f1"),
        ("receipt.completed", "f1"),
        ("receipt.replayed", "f1"),
        ("request.rejected", "f1"),
        ("receipt.created", "c1"),
        ("pending.created", ""),
        ("task.updated", ""),
        ("receipt.completed", "c1"),
        ("request.rejected", "f2"),
        ("receipt.created", "x1"),
        ("task.updated", ""),
        ("receipt.completed", "x1"),
        ("request.rejected", "n1"),
        ("receipts.cleared", ""),
    ];
    let got = events(&mut rx, expected.len()).await;
    for (i, (e, (kind, rid))) in got.iter().zip(expected).enumerate() {
        assert_eq!(e["event"], kind, "event {i}: {e}");
        assert_eq!(
            e["seq"].as_u64().unwrap(),
            start_seq + 1 + i as u64,
            "seq of event {i}: {e}"
        );
        if !rid.is_empty() {
            assert_eq!(e["data"]["requestId"], rid, "event {i}: {e}");
        }
    }
    assert_eq!(got[6]["data"]["code"], "MCP_REQUEST_ID_REUSED");
    assert_eq!(got[11]["data"]["code"], "TASK_BLOCKED");
    assert_eq!(got[8]["data"]["pendingOutcome"]["requestId"], "c1");
    assert_eq!(got[13]["data"]["state"], "stopped");
    assert_eq!(got[15]["data"]["code"], "TASK_NOT_FOUND");
    assert_eq!(got[16]["data"]["requestIds"], json!(["f1"]));
    assert_eq!(got[16]["data"]["reason"], "test");
    // The snapshot agrees with the stream: its seq is the last event's.
    let snap = ok(call(&h.intro, "snapshot", json!({})).await);
    assert_eq!(snap["seq"], got.last().unwrap()["seq"]);
    assert_eq!(snap["counters"]["replays"], 1);
    assert_eq!(snap["counters"]["rejectedReused"], 1);
    assert_eq!(snap["counters"]["rejectedBlocked"], 1);
    // Stopping the task settled c1's outcome: the snapshot lists only unsettled ones.
    assert_eq!(snap["pending"], json!([]), "{snap}");
    assert_eq!(snap["receipts"]["unsettled"], 0);
    h.running.stop().await;
}

async fn connect(path: &Path) -> Stream {
    Stream::connect(path.to_fs_name::<GenericFilePath>().unwrap())
        .await
        .unwrap()
}

/// Sends `lines` on one bridge connection without waiting, reads `n` replies, returns how many
/// were `ok`.
async fn pipeline(path: PathBuf, lines: Vec<u8>, n: usize) -> usize {
    let stream = Arc::new(connect(&path).await);
    let writer = {
        let stream = stream.clone();
        tokio::spawn(async move { (&*stream).write_all(&lines).await.unwrap() })
    };
    let mut reader = BufReader::new(&*stream);
    let mut line = String::new();
    let mut oks = 0;
    for _ in 0..n {
        line.clear();
        assert!(
            reader.read_line(&mut line).await.unwrap() > 0,
            "the bridge closed early"
        );
        if line.contains("\"ok\":true") {
            oks += 1;
        }
    }
    writer.await.unwrap();
    oks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalesced_subscriber_gets_changed_frames_covering_a_scripted_run() {
    const EVERY_MS: u64 = 100;
    let h = start_host(100, 100, 300);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sub = BridgeClient::at_path(&h.dir.join("introspect.sock")).with_event_sink(tx);
    // Taken before subscribing, so the host's interval starts after it.
    let began = std::time::Instant::now();
    let subscribed = ok(call(&sub, "subscribe", json!({"coalesceMs": EVERY_MS})).await);
    assert_eq!(subscribed["subscribed"], true);
    assert_eq!(subscribed["coalesceMs"], EVERY_MS);
    let start_seq = subscribed["seq"].as_u64().unwrap();

    let task = start_task(&h, json!({})).await;
    for i in 0..20 {
        ok(call_id(&h.bridge, &format!("f{i}"), "page.fill", fill(&task, "a")).await);
    }
    ok(call_id(&h.bridge, "f0", "page.fill", fill(&task, "a")).await);
    let reused = call_id(&h.bridge, "f0", "page.fill", fill(&task, "other")).await;
    assert_eq!(err_code(&reused), "MCP_REQUEST_ID_REUSED");
    let snap = ok(call(&h.intro, "snapshot", json!({})).await);
    let end_seq = snap["seq"].as_u64().unwrap();
    assert!(end_seq > start_seq);

    // Frames chain without gaps from the subscription's seq until one covers the whole run.
    let mut frames = Vec::new();
    let mut next_from = start_seq + 1;
    loop {
        let f = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("a changed frame arrives")
            .expect("sink open");
        assert_eq!(f["event"], "changed", "{f}");
        let (from, to) = (
            f["data"]["fromSeq"].as_u64().unwrap(),
            f["data"]["toSeq"].as_u64().unwrap(),
        );
        assert_eq!(from, next_from, "{f}");
        assert!(to >= from, "{f}");
        assert_eq!(f["seq"], to, "{f}");
        next_from = to + 1;
        frames.push(f);
        if to >= end_seq {
            break;
        }
    }
    let elapsed = began.elapsed().as_millis() as u64;
    // Never more than one frame per interval (the first one comes an interval after subscribe).
    assert!(
        (frames.len() as u64) <= elapsed / EVERY_MS,
        "{} frames in {elapsed} ms",
        frames.len()
    );
    let last = &frames.last().unwrap()["data"];
    assert_eq!(last["toSeq"], end_seq);
    assert_eq!(last["counters"], snap["counters"]);
    assert_eq!(last["receipts"], snap["receipts"]);
    assert_eq!(last["counters"]["executions"], 21);
    assert_eq!(last["counters"]["replays"], 1);
    assert_eq!(last["counters"]["rejectedReused"], 1);

    // Idle: nothing changes, so nothing is sent.
    let idle = tokio::time::timeout(Duration::from_millis(EVERY_MS * 4), rx.recv()).await;
    assert!(idle.is_err(), "a frame while idle: {idle:?}");

    // The next change is reported, starting right after the last frame.
    ok(call_id(&h.bridge, "g1", "page.fill", fill(&task, "b")).await);
    let f = tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("a changed frame arrives")
        .expect("sink open");
    assert_eq!(f["data"]["fromSeq"], end_seq + 1, "{f}");
    assert_eq!(f["data"]["counters"]["executions"], 22, "{f}");
    h.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_does_not_stop_the_bridge_and_is_told_it_lagged() {
    const CONNECTIONS: usize = 8;
    const PER_CONNECTION: usize = 12_500;
    const DISTINCT: usize = 1_000;
    // Room for the fills sent after each `lagged` notice while the subscriber catches up (its
    // budget is in bytes: a notice may come every few hundred events).
    let h = start_host(CONNECTIONS * DISTINCT + 1_000, 100, 2_000);
    let task = start_task(&h, json!({})).await;

    // Subscribe, read the reply, then stop reading.
    let sub = connect(&h.dir.join("introspect.sock")).await;
    (&sub)
        .write_all(b"{\"id\":\"sub\",\"method\":\"subscribe\"}\n")
        .await
        .unwrap();
    let mut sub_reader = BufReader::new(&sub);
    let mut line = String::new();
    sub_reader.read_line(&mut line).await.unwrap();
    let reply: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["result"]["subscribed"], true, "{line}");

    // Each connection sends 1,000 new fills and re-sends them (joins and replays) until it has
    // sent its share: every request takes the receipt path and publishes events.
    let mut runs = Vec::new();
    for c in 0..CONNECTIONS {
        let mut lines = String::new();
        for i in 0..PER_CONNECTION {
            let k = i % DISTINCT;
            lines.push_str(&format!(
                "{{\"id\":\"b{c}-{k}\",\"method\":\"page.fill\",\"params\":{{\"taskId\":\"{task}\",\"target\":\"#f{c}\",\"value\":\"{k}\"}}}}\n"
            ));
        }
        runs.push(tokio::spawn(pipeline(
            h.dir.join("bridge.sock"),
            lines.into_bytes(),
            PER_CONNECTION,
        )));
    }
    let mut completed = 0;
    for r in runs {
        completed += tokio::time::timeout(PATIENCE, r)
            .await
            .expect("the bridge keeps going")
            .unwrap();
    }
    assert_eq!(
        completed,
        CONNECTIONS * PER_CONNECTION,
        "every bridge request completed ok"
    );
    let snap = ok(call(&h.intro, "snapshot", json!({})).await);
    assert_eq!(snap["receipts"]["used"], CONNECTIONS * DISTINCT + 1);
    assert_eq!(snap["counters"]["executions"], CONNECTIONS * DISTINCT + 1);
    let copies =
        snap["counters"]["joins"].as_u64().unwrap() + snap["counters"]["replays"].as_u64().unwrap();
    assert_eq!(copies as usize, CONNECTIONS * (PER_CONNECTION - DISTINCT));

    // Now the subscriber reads: the events it could take, then `lagged` with what it missed,
    // then events again (more notices may follow while it catches up); every seq accounted for.
    let mut previous = reply["result"]["seq"].as_u64().unwrap();
    let mut notices = 0;
    let mut afters = 0;
    loop {
        line.clear();
        let n = tokio::time::timeout(PATIENCE, sub_reader.read_line(&mut line))
            .await
            .expect("events arrive")
            .unwrap();
        assert!(n > 0, "the subscription closed");
        let e: Value = serde_json::from_str(&line).unwrap();
        let seq = e["seq"].as_u64().unwrap();
        if e["event"] == "lagged" {
            let missed = e["data"]["missed"].as_u64().unwrap();
            assert!(missed > 0, "{line}");
            assert_eq!(
                seq,
                previous + missed,
                "lagged names the last missed seq: {line}"
            );
            notices += 1;
        } else {
            assert_eq!(
                seq,
                previous + 1,
                "events arrive in order between notices: {line}"
            );
        }
        previous = seq;
        if notices > 0 && (afters == 0 || e["event"] == "lagged") {
            // After a notice the subscription carries on with new events. While the forwarder
            // is still behind, a new event may itself fall into the next notice's range, so a
            // fresh one is sent after every notice until one arrives as an event.
            afters += 1;
            let id = format!("after-{afters}");
            ok(call_id(&h.bridge, &id, "page.fill", fill(&task, "z")).await);
        }
        if e["event"] == "receipt.created"
            && e["data"]["requestId"]
                .as_str()
                .is_some_and(|id| id.starts_with("after-"))
        {
            break;
        }
    }
    drop(sub_reader);
    drop(sub);
    h.running.stop().await;
}

/// `receipts.clearPrepare` with `params`, which must succeed.
async fn prepare(intro: &BridgeClient, params: Value) -> Value {
    ok(call(intro, "receipts.clearPrepare", params).await)
}

/// `receipts.clearCommit` of `token` for `reason`, which must succeed.
async fn commit(intro: &BridgeClient, token: &Value, reason: &str) -> Value {
    ok(call(
        intro,
        "receipts.clearCommit",
        json!({"token": token, "reason": reason}),
    )
    .await)
}

fn refusals(prepared: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = prepared["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["requestId"].as_str().unwrap().to_owned(),
                r["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_refuses_a_running_receipt() {
    // The submit is dropped and the deadline is far away, so the click stays running.
    let h = start_host(100, 100, 60_000);
    let task = start_task(&h, json!({"dropSubmit": true})).await;
    let bridge = h.bridge.clone();
    let t = task.clone();
    let _click =
        tokio::spawn(async move { bridge.call_with_id("c1", "page.click", click(&t)).await });
    loop {
        let r = ok(call(&h.intro, "receipts.get", json!({"requestId": "c1"})).await);
        if r["state"] == "running" {
            assert_eq!(r["clearable"], false);
            assert_eq!(r["refusal"], "running");
            break;
        }
        assert_eq!(r["state"], "unknown", "{r}");
        tokio::task::yield_now().await;
    }
    let prepared = prepare(&h.intro, json!({"requestIds": ["c1"]})).await;
    assert_eq!(
        refusals(&prepared),
        vec![("c1".to_owned(), "running".to_owned())]
    );
    assert_eq!(prepared["clearable"], json!([]));
    let listed = ok(call(&h.intro, "receipts.list", json!({"state": "running"})).await);
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["items"][0]["requestId"], "c1");
    // Not stopped gracefully: the click would hold the host for its whole deadline.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_refuses_unverified_unknown_and_already_cleared_and_the_rule_follows_the_task() {
    let h = start_host(100, 100, 300);
    let dropped = start_task(&h, json!({"dropSubmit": true})).await;
    let late = start_task(&h, json!({"submitDelayMs": 1500})).await;
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&dropped, "x")).await);
    assert_eq!(
        err_code(&call_id(&h.bridge, "u1", "page.click", click(&dropped)).await),
        "OUTCOME_UNCERTAIN"
    );
    assert_eq!(
        err_code(&call_id(&h.bridge, "u2", "page.click", click(&late)).await),
        "OUTCOME_UNCERTAIN"
    );
    let first = prepare(&h.intro, json!({"requestIds": ["f1"]})).await;
    commit(&h.intro, &first["token"], "done").await;

    let prepared = prepare(
        &h.intro,
        json!({"requestIds": ["u1", "u2", "nope", "f1", "u1"]}),
    )
    .await;
    assert_eq!(
        refusals(&prepared),
        vec![
            ("f1".to_owned(), "already_cleared".to_owned()),
            ("nope".to_owned(), "unknown".to_owned()),
            ("u1".to_owned(), "unverified_outcome".to_owned()),
            ("u2".to_owned(), "unverified_outcome".to_owned()),
        ]
    );
    assert_eq!(prepared["clearable"], json!([]));

    // A confirmed verification makes u2 clearable; stopping the task makes u1 clearable.
    loop {
        let v = ok(call(&h.intro, "task.verifyOutcome", json!({"taskId": late})).await);
        if v["outcome"] == "confirmed" {
            break;
        }
        assert_eq!(v["outcome"], "not_observed", "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ok(call(
        &h.bridge,
        "task.stop",
        json!({"taskId": dropped, "reason": "effect never seen"}),
    )
    .await);
    let prepared = prepare(&h.intro, json!({"requestIds": ["u1", "u2"]})).await;
    assert_eq!(refusals(&prepared), vec![]);
    let ids: Vec<&str> = prepared["clearable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["requestId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["u1", "u2"]);
    assert_eq!(prepared["clearable"][0]["code"], "OUTCOME_UNCERTAIN");
    assert_eq!(
        prepared["clearable"][0]["reply"]["error"]["code"],
        "OUTCOME_UNCERTAIN"
    );
    h.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_between_prepare_and_commit_makes_the_commit_stale() {
    let h = start_host(100, 100, 2_000);
    let task = start_task(&h, json!({})).await;
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&task, "a")).await);
    ok(call_id(&h.bridge, "f2", "page.fill", fill(&task, "b")).await);
    let prepared = prepare(&h.intro, json!({"filter": {"method": "page.fill"}})).await;
    assert_eq!(prepared["clearable"].as_array().unwrap().len(), 2);
    let replay = call_id(&h.bridge, "f2", "page.fill", fill(&task, "b")).await;
    assert_eq!(replay.meta.as_ref().unwrap().receipt.as_str(), "replayed");
    let stale = call(
        &h.intro,
        "receipts.clearCommit",
        json!({"token": prepared["token"], "reason": "x"}),
    )
    .await;
    assert_eq!(err_code(&stale), "CLEAR_TOKEN_STALE");
    assert_eq!(stale.error.unwrap().details.unwrap()["requestId"], "f2");
    assert_eq!(
        run_status(&h).await["receipts"]["used"],
        3,
        "nothing was cleared"
    );
    // The token is used up; an unknown token is stale too.
    for token in [prepared["token"].clone(), json!("not-a-token")] {
        let again = call(
            &h.intro,
            "receipts.clearCommit",
            json!({"token": token, "reason": "x"}),
        )
        .await;
        assert_eq!(err_code(&again), "CLEAR_TOKEN_STALE");
    }
    // A fresh prepare sees the replay and commits.
    let prepared = prepare(&h.intro, json!({"filter": {"method": "page.fill"}})).await;
    let f2 = prepared["clearable"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["requestId"] == "f2")
        .unwrap()
        .clone();
    assert_eq!(f2["replays"], 1);
    let done = commit(&h.intro, &prepared["token"], "x").await;
    assert_eq!(done["cleared"], 2);
    assert_eq!(done["receipts"]["used"], 1);
    h.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleared_id_is_refused_for_same_and_other_content_and_never_runs_again() {
    let h = start_host(100, 100, 2_000);
    let task = start_task(&h, json!({})).await;
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&task, "a")).await);
    ok(call_id(&h.bridge, "c1", "page.click", click(&task)).await);
    let before = run_status(&h).await;
    assert_eq!(before["executor"]["mutations"], 1);
    let prepared = prepare(&h.intro, json!({"requestIds": ["c1"]})).await;
    commit(&h.intro, &prepared["token"], "capacity").await;
    let executions =
        ok(call(&h.intro, "snapshot", json!({})).await)["counters"]["executions"].clone();

    let same = call_id(&h.bridge, "c1", "page.click", click(&task)).await;
    assert_eq!(err_code(&same), "RECEIPT_CLEARED");
    let e = same.error.unwrap();
    assert_eq!(e.delivery.as_str(), "cleared");
    assert_eq!(e.details.as_ref().unwrap()["sameContent"], true);
    assert_eq!(e.details.as_ref().unwrap()["reason"], "capacity");
    assert_eq!(same.meta.unwrap().receipt.as_str(), "none");

    let other = call_id(&h.bridge, "c1", "page.fill", fill(&task, "other")).await;
    assert_eq!(err_code(&other), "RECEIPT_CLEARED");
    let e = other.error.unwrap();
    assert_eq!(e.delivery.as_str(), "not_executed");
    assert_eq!(e.details.unwrap()["sameContent"], false);

    let after = run_status(&h).await;
    assert_eq!(
        after["executor"]["mutations"], 1,
        "the cleared click was not executed again"
    );
    assert_eq!(after["receipts"]["tombstones"], 1);
    let snap = ok(call(&h.intro, "snapshot", json!({})).await);
    assert_eq!(snap["counters"]["executions"], executions);
    assert_eq!(snap["counters"]["rejectedCleared"], 2);
    let got = ok(call(&h.intro, "receipts.get", json!({"requestId": "c1"})).await);
    assert_eq!(got["state"], "cleared");
    assert_eq!(got["reason"], "capacity");
    h.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_frees_capacity_without_a_restart_and_writes_the_audit_line() {
    let h = start_host(3, 100, 2_000);
    let task = start_task(&h, json!({})).await;
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&task, "a")).await);
    ok(call_id(&h.bridge, "f2", "page.fill", fill(&task, "b")).await);
    let full = call_id(&h.bridge, "f3", "page.fill", fill(&task, "c")).await;
    assert_eq!(err_code(&full), "RECEIPT_CAPACITY_FULL");
    let run_id = run_status(&h).await["runId"].clone();

    let prepared = prepare(
        &h.intro,
        json!({"filter": {"state": "ok", "method": "page.fill"}}),
    )
    .await;
    let done = ok(call(
        &h.intro,
        "receipts.clearCommit",
        json!({"token": prepared["token"], "reason": "book full during incident 7", "operator": "dana"}),
    )
    .await);
    assert_eq!(done["cleared"], 2);
    assert_eq!(done["tombstones"], 2);
    assert_eq!(done["receipts"]["used"], 1);

    // The same ID that was refused is accepted now and runs.
    let accepted = call_id(&h.bridge, "f3", "page.fill", fill(&task, "c")).await;
    assert_eq!(accepted.meta.as_ref().unwrap().receipt.as_str(), "new");
    ok(accepted);

    let text = std::fs::read_to_string(&h.audit).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1);
    let entry: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(entry["operator"], "dana");
    assert_eq!(entry["reason"], "book full during incident 7");
    assert_eq!(entry["runId"], run_id);
    assert!(entry["at"].as_str().unwrap().ends_with('Z'));
    let cleared: Vec<&str> = entry["cleared"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["requestId"].as_str().unwrap())
        .collect();
    assert_eq!(cleared, ["f1", "f2"]);
    assert_eq!(entry["cleared"][0]["ok"], true);
    assert_eq!(entry["cleared"][0]["method"], "page.fill");
    assert_eq!(entry["cleared"][0]["taskId"], task.as_str());
    let listed = ok(call(&h.intro, "audit.list", json!({})).await);
    assert_eq!(listed["entries"], json!([entry]));

    // The log survives a restart: a new run on the same log lists the old entry and appends.
    let audit = h.audit.clone();
    let dir = h.dir.clone();
    h.running.stop().await;
    let again = start(
        &options(&dir, &audit, 3, 100, 2_000),
        Arc::new(FixtureExecutor::new()),
    )
    .unwrap();
    let intro = BridgeClient::at_path(&dir.join("introspect.sock"));
    let listed = ok(call(&intro, "audit.list", json!({"limit": 10})).await);
    assert_eq!(listed["entries"], json!([entry]));
    let bridge = BridgeClient::new(&dir);
    ok(call_id(&bridge, "t2", "task.start", json!({"title": "next run"})).await);
    let p = prepare(&intro, json!({"requestIds": ["t2"]})).await;
    commit(&intro, &p["token"], "second").await;
    let listed = ok(call(&intro, "audit.list", json!({"limit": 1})).await);
    assert_eq!(listed["entries"].as_array().unwrap().len(), 1);
    assert_eq!(listed["entries"][0]["reason"], "second");
    assert_eq!(std::fs::read_to_string(&audit).unwrap().lines().count(), 2);
    again.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstone_capacity_is_hard_and_a_refused_commit_clears_nothing() {
    let h = start_host(100, 1, 2_000);
    let task = start_task(&h, json!({})).await;
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&task, "a")).await);
    ok(call_id(&h.bridge, "f2", "page.fill", fill(&task, "b")).await);
    let p = prepare(&h.intro, json!({"requestIds": ["f1", "f2"]})).await;
    let r = call(
        &h.intro,
        "receipts.clearCommit",
        json!({"token": p["token"], "reason": "x"}),
    )
    .await;
    assert_eq!(err_code(&r), "TOMBSTONE_CAPACITY_FULL");
    assert_eq!(r.error.unwrap().delivery.as_str(), "not_executed");
    let st = run_status(&h).await;
    assert_eq!(st["receipts"]["used"], 3);
    assert_eq!(st["receipts"]["tombstones"], 0);
    assert!(!h.audit.exists() || std::fs::read_to_string(&h.audit).unwrap().is_empty());
    // Replays still work: nothing was cleared.
    assert_eq!(
        call_id(&h.bridge, "f1", "page.fill", fill(&task, "a"))
            .await
            .meta
            .unwrap()
            .receipt
            .as_str(),
        "replayed"
    );
    h.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_filters_sorts_pages_and_reads_one_receipt() {
    let h = start_host(100, 100, 300);
    let a = start_task(&h, json!({})).await;
    let b = start_task(&h, json!({"failSubmit": true})).await;
    for i in 0..5 {
        ok(call_id(
            &h.bridge,
            &format!("a-{i}"),
            "page.fill",
            fill(&a, &i.to_string()),
        )
        .await);
    }
    assert_eq!(
        err_code(&call_id(&h.bridge, "b-click", "page.click", click(&b)).await),
        "ACTION_FAILED"
    );

    let all = ok(call(&h.intro, "receipts.list", json!({})).await);
    assert_eq!(all["total"], 8);
    assert_eq!(all["items"][0]["requestId"], "b-click", "newest first");
    let oldest = ok(call(
        &h.intro,
        "receipts.list",
        json!({"sort": "oldest", "limit": 2, "offset": 2}),
    )
    .await);
    assert_eq!(oldest["total"], 8);
    let ids: Vec<&str> = oldest["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["requestId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a-0", "a-1"]);
    let by_task = ok(call(&h.intro, "receipts.list", json!({"taskId": a, "limit": 3})).await);
    // The task's own task.start receipt belongs to it.
    assert_eq!(by_task["total"], 6);
    assert_eq!(by_task["items"].as_array().unwrap().len(), 3);
    let errors = ok(call(&h.intro, "receipts.list", json!({"state": "error"})).await);
    assert_eq!(errors["total"], 1);
    assert_eq!(errors["items"][0]["code"], "ACTION_FAILED");
    assert_eq!(errors["items"][0]["ok"], false);
    assert_eq!(errors["items"][0]["clearable"], true);
    let search = ok(call(&h.intro, "receipts.list", json!({"search": "FAILED"})).await);
    assert_eq!(search["total"], 1);
    let starts = ok(call(&h.intro, "receipts.list", json!({"method": "task.start"})).await);
    assert_eq!(starts["total"], 2);
    // A start's receipt names the task it started, newest first.
    assert_eq!(starts["items"][0]["taskId"], b.as_str(), "{starts}");
    assert_eq!(starts["items"][1]["taskId"], a.as_str(), "{starts}");
    let by_method = ok(call(&h.intro, "receipts.list", json!({"sort": "method"})).await);
    assert_eq!(by_method["items"][0]["method"], "page.click");
    assert_eq!(by_method["items"][7]["method"], "task.start");
    // `reverse` reads each order from its end: the same rows, last first.
    let ids = |list: &serde_json::Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["requestId"].as_str().unwrap().to_owned())
            .collect()
    };
    for sort in ["newest", "oldest", "state", "method", "task"] {
        let forward = ok(call(&h.intro, "receipts.list", json!({"sort": sort})).await);
        let back = ok(call(
            &h.intro,
            "receipts.list",
            json!({"sort": sort, "reverse": true}),
        )
        .await);
        let mut expected = ids(&forward);
        expected.reverse();
        assert_eq!(ids(&back), expected, "{sort}");
        assert_eq!(back["total"], 8, "{sort}");
    }
    let last_two = ok(call(
        &h.intro,
        "receipts.list",
        json!({"sort": "method", "reverse": true, "limit": 2}),
    )
    .await);
    assert_eq!(last_two["items"][0]["method"], "task.start", "{last_two}");
    assert_eq!(last_two["items"][1]["method"], "task.start", "{last_two}");

    let got = ok(call(&h.intro, "receipts.get", json!({"requestId": "a-4"})).await);
    assert_eq!(
        got["request"],
        json!({"method": "page.fill", "params": fill(&a, "4")})
    );
    assert_eq!(
        got["reply"],
        json!({"ok": true, "result": {"target": "#title", "value": "4"}})
    );
    assert_eq!(got["state"], "completed");
    let unknown = ok(call(&h.intro, "receipts.get", json!({"requestId": "zzz"})).await);
    assert_eq!(unknown, json!({"requestId": "zzz", "state": "unknown"}));

    let tasks = ok(call(&h.intro, "tasks.list", json!({})).await);
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 2);
    let running = ok(call(&h.intro, "tasks.list", json!({"state": "running"})).await);
    assert_eq!(running["tasks"].as_array().unwrap().len(), 2);
    let stopped = ok(call(&h.intro, "tasks.list", json!({"state": "stopped"})).await);
    assert_eq!(stopped["tasks"], json!([]));
    h.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_creates_nothing() {
    let h = start_host(100, 100, 300);
    let task = start_task(&h, json!({})).await;
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&task, "a")).await);
    let cases = [
        ("receipts.list", json!({"limit": 1001}), "BAD_REQUEST"),
        ("receipts.list", json!({"reverse": "yes"}), "BAD_REQUEST"),
        ("receipts.list", json!({"state": "weird"}), "BAD_REQUEST"),
        ("receipts.list", json!({"sort": "random"}), "BAD_REQUEST"),
        (
            "receipts.list",
            json!({"method": "page.scroll"}),
            "BAD_REQUEST",
        ),
        ("receipts.list", json!({"colour": "red"}), "BAD_REQUEST"),
        ("receipts.get", json!({}), "BAD_REQUEST"),
        ("tasks.list", json!({"state": "asleep"}), "BAD_REQUEST"),
        ("snapshot", json!({"x": 1}), "BAD_REQUEST"),
        ("subscribe", json!({"coalesceMs": 0}), "BAD_REQUEST"),
        ("subscribe", json!({"coalesceMs": 60_001}), "BAD_REQUEST"),
        ("subscribe", json!({"coalesceMs": "250"}), "BAD_REQUEST"),
        ("subscribe", json!({"coalesce": 250}), "BAD_REQUEST"),
        ("receipts.clearPrepare", json!({}), "BAD_REQUEST"),
        (
            "receipts.clearPrepare",
            json!({"requestIds": ["f1"], "filter": {}}),
            "BAD_REQUEST",
        ),
        (
            "receipts.clearPrepare",
            json!({"requestIds": []}),
            "BAD_REQUEST",
        ),
        (
            "receipts.clearPrepare",
            json!({"requestIds": ["bad id!"]}),
            "BAD_REQUEST",
        ),
        (
            "receipts.clearPrepare",
            json!({"filter": {"owner": "me"}}),
            "BAD_REQUEST",
        ),
        ("receipts.clearCommit", json!({"token": "t"}), "BAD_REQUEST"),
        (
            "receipts.clearCommit",
            json!({"token": "t", "reason": ""}),
            "BAD_REQUEST",
        ),
        (
            "receipts.clearCommit",
            json!({"token": "t", "reason": "x".repeat(501)}),
            "BAD_REQUEST",
        ),
        ("audit.list", json!({"limit": 5000}), "BAD_REQUEST"),
        (
            "task.verifyOutcome",
            json!({"taskId": "nope"}),
            "TASK_NOT_FOUND",
        ),
        ("page.fill", fill(&task, "x"), "UNKNOWN_METHOD"),
        (
            "receipt.status",
            json!({"requestId": "f1"}),
            "UNKNOWN_METHOD",
        ),
    ];
    for (method, params, code) in cases {
        let r = call(&h.intro, method, params.clone()).await;
        assert_eq!(err_code(&r), code, "{method} {params}");
        let e = r.error.unwrap();
        assert_eq!(e.delivery.as_str(), "not_executed", "{method}");
        assert!(!e.message.is_empty());
    }
    // A valid prepare followed by a bad commit leaves its token usable.
    let p = prepare(&h.intro, json!({"requestIds": ["f1"]})).await;
    let bad = call(
        &h.intro,
        "receipts.clearCommit",
        json!({"token": p["token"], "reason": " "}),
    )
    .await;
    assert_eq!(err_code(&bad), "BAD_REQUEST");
    let st = run_status(&h).await;
    assert_eq!(st["receipts"]["used"], 2);
    assert_eq!(st["receipts"]["tombstones"], 0);
    commit(&h.intro, &p["token"], "ok").await;
    // The channel still answers after all that, and takes no receipts.
    let hello = call(&h.intro, "host.hello", json!({})).await;
    assert_eq!(hello.meta.as_ref().unwrap().receipt.as_str(), "none");
    assert_eq!(ok(hello)["name"], "polaris");
    h.running.stop().await;
}

/// A copy of the binary that another user can run wherever this checkout lives: in a fresh
/// temp dir that others may traverse but not list. Keep the returned dir alive while used.
fn binary_for_another_user() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let bin = dir.path().join("polaris");
    std::fs::copy(env!("CARGO_BIN_EXE_polaris"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, bin)
}

fn polaris() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_polaris"))
}

async fn run(mut cmd: std::process::Command) -> (i32, String, String) {
    let out = tokio::task::spawn_blocking(move || {
        cmd.stdin(std::process::Stdio::null()).output().unwrap()
    })
    .await
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_commands_work_through_the_real_binary() {
    let h = start_host(3, 100, 300);
    let dir = h.dir.to_str().unwrap().to_owned();
    let task = start_task(&h, json!({"dropSubmit": true})).await;
    ok(call_id(&h.bridge, "fill-x", "page.fill", fill(&task, "a")).await);
    assert_eq!(
        err_code(&call_id(&h.bridge, "click-x", "page.click", click(&task)).await),
        "OUTCOME_UNCERTAIN"
    );

    let mut cmd = polaris();
    cmd.args(["receipts", "--json", "--socket-dir", &dir]);
    let (code, out, _) = run(cmd).await;
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["total"], 3);

    let mut cmd = polaris();
    cmd.args(["receipts", "--state", "clearable", "--socket-dir", &dir]);
    let (code, out, _) = run(cmd).await;
    assert_eq!(code, 0);
    assert!(out.contains("fill-x") && !out.contains("click-x"), "{out}");

    let mut cmd = polaris();
    cmd.args(["verify", &task, "--socket-dir", &dir]);
    let (code, out, _) = run(cmd).await;
    assert_eq!(code, 1, "not_observed is not settled (SPEC §8)");
    assert!(
        out.contains("not_observed") && out.contains("blocked"),
        "{out}"
    );
    let mut cmd = polaris();
    cmd.args(["verify", "no-such-task", "--socket-dir", &dir]);
    let (code, _, err) = run(cmd).await;
    assert_eq!(code, 1);
    assert!(err.contains("TASK_NOT_FOUND"), "{err}");

    // Not a terminal and no --yes: it shows what it would clear and clears nothing.
    let mut cmd = polaris();
    cmd.args(["clear", "--state", "completed", "--socket-dir", &dir]);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        out.contains("fill-x") && out.contains("unverified_outcome"),
        "{out}"
    );
    assert!(err.contains("--yes --reason"), "{err}");
    assert_eq!(run_status(&h).await["receipts"]["tombstones"], 0);

    let mut cmd = polaris();
    cmd.args([
        "clear",
        "--state",
        "completed",
        "--yes",
        "--reason",
        "free the book",
        "--operator",
        "ops",
        "--socket-dir",
        &dir,
    ]);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("cleared 2 receipt(s)"), "{out}");
    let st = run_status(&h).await;
    assert_eq!(st["receipts"]["used"], 1);
    assert_eq!(st["receipts"]["tombstones"], 2);
    let entry: Value =
        serde_json::from_str(std::fs::read_to_string(&h.audit).unwrap().trim()).unwrap();
    assert_eq!(entry["operator"], "ops");

    // Only refusals: exit 1.
    let mut cmd = polaris();
    cmd.args([
        "clear",
        "click-x",
        "fill-x",
        "--yes",
        "--reason",
        "again",
        "--socket-dir",
        &dir,
    ]);
    let (code, out, _) = run(cmd).await;
    assert_eq!(code, 1);
    assert!(
        out.contains("already_cleared") && out.contains("unverified_outcome"),
        "{out}"
    );

    // No selection is a usage error; no host is exit 3.
    let mut cmd = polaris();
    cmd.args(["clear", "--yes", "--reason", "x", "--socket-dir", &dir]);
    assert_eq!(run(cmd).await.0, 2);
    let empty = tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .unwrap();
    let mut cmd = polaris();
    cmd.args(["receipts", "--socket-dir", empty.path().to_str().unwrap()]);
    let (code, _, err) = run(cmd).await;
    assert_eq!(code, 3);
    assert!(err.contains("introspection socket"), "{err}");
    h.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_introspection_socket_has_the_bridges_permissions_and_peer_check() {
    let h = start_host(10, 10, 300);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&h.dir), 0o700);
    assert_eq!(mode(&h.dir.join("introspect.sock")), 0o600);
    assert_eq!(mode(&h.dir.join("bridge.sock")), 0o600);

    // Another user is refused. The file modes already keep it out; open them to reach the
    // peer-credential check behind them (only possible when the tests run as root).
    if polaris::server::current_uid() == 0 {
        let dir = h.dir.to_str().unwrap().to_owned();
        // Another user may not reach this checkout's binary (a `0700` home): run a copy.
        let (_keep, bin) = binary_for_another_user();
        let nobody = |dir: &str| {
            let mut cmd = std::process::Command::new(&bin);
            std::os::unix::process::CommandExt::uid(&mut cmd, 65534);
            std::os::unix::process::CommandExt::gid(&mut cmd, 65534);
            cmd.args(["receipts", "--json", "--socket-dir", dir])
                .env("HOME", "/tmp");
            cmd
        };
        let (code, _, err) = run(nobody(&dir)).await;
        assert_eq!(code, 3, "{err}");
        assert!(
            err.contains("could not connect"),
            "the file mode refuses: {err}"
        );

        std::fs::set_permissions(&h.dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(
            h.dir.join("introspect.sock"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        let (code, out, err) = run(nobody(&dir)).await;
        assert_eq!(code, 3, "{out}{err}");
        assert!(
            !err.contains("could not connect") && out.is_empty(),
            "the peer check refuses: {out}{err}"
        );
        assert!(
            err.contains("connection refused: peer uid 65534"),
            "the host says why: {err}"
        );
        // The owner is still served.
        ok(call(&h.intro, "host.hello", json!({})).await);
    }
    h.running.stop().await;
}

/// `polaris clear` on a terminal: the output read so far, the keyboard, the process.
struct Terminal {
    output: Arc<std::sync::Mutex<String>>,
    keys: Box<dyn std::io::Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl Terminal {
    fn run(args: &[&str]) -> Terminal {
        use portable_pty::{native_pty_system, CommandBuilder, PtySize};
        let pty = native_pty_system()
            .openpty(PtySize {
                rows: 40,
                cols: 200,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_polaris"));
        cmd.args(args);
        let child = pty.slave.spawn_command(cmd).expect("polaris starts");
        drop(pty.slave);
        let output = Arc::new(std::sync::Mutex::new(String::new()));
        let mut reader = pty.master.try_clone_reader().unwrap();
        let sink = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut reader, &mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let keys = pty.master.take_writer().unwrap();
        Terminal {
            output,
            keys,
            child,
            _master: pty.master,
        }
    }

    fn wait_for(&self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let text = self.output.lock().unwrap().clone();
            if text.contains(needle) {
                return text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never saw {needle:?}; the terminal shows:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn type_line(&mut self, line: &str) {
        self.keys.write_all(format!("{line}\r").as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }

    fn exit_code(mut self) -> u32 {
        self.child.wait().unwrap().exit_code()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_on_a_terminal_asks_for_a_reason_and_commits_only_on_yes() {
    let h = start_host(10, 10, 300);
    let task = start_task(&h, json!({})).await;
    ok(call_id(&h.bridge, "f1", "page.fill", fill(&task, "a")).await);
    let dir = h.dir.to_str().unwrap().to_owned();

    let d = dir.clone();
    let declined = tokio::task::spawn_blocking(move || {
        let mut t = Terminal::run(&["clear", "f1", "--socket-dir", &d]);
        t.wait_for("Reason for clearing");
        t.type_line("incident 9");
        t.wait_for("Type y to confirm");
        t.type_line("n");
        let text = t.wait_for("nothing was cleared");
        (text, t.exit_code())
    })
    .await
    .unwrap();
    assert!(
        declined.0.contains("f1") && declined.0.contains("page.fill"),
        "{}",
        declined.0
    );
    assert_eq!(declined.1, 1);
    assert_eq!(run_status(&h).await["receipts"]["tombstones"], 0);

    let confirmed = tokio::task::spawn_blocking(move || {
        let mut t = Terminal::run(&["clear", "f1", "--socket-dir", &dir]);
        t.wait_for("Reason for clearing");
        t.type_line("incident 9");
        t.wait_for("Type y to confirm");
        t.type_line("y");
        t.wait_for("cleared 1 receipt(s)");
        t.exit_code()
    })
    .await
    .unwrap();
    assert_eq!(confirmed, 0);
    assert_eq!(run_status(&h).await["receipts"]["tombstones"], 1);
    let entry: Value =
        serde_json::from_str(std::fs::read_to_string(&h.audit).unwrap().trim()).unwrap();
    assert_eq!(entry["reason"], "incident 9");
    h.running.stop().await;
}
