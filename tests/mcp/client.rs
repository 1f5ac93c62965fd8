//! The library bridge client and its session against a real `polaris serve` process.

use polaris_testkit::mcp::{bridge, eventually, socket_dir, HostProcess};

use std::collections::HashSet;
use std::time::Duration;

use polaris::client::session::Session;
use polaris::client::BridgeClient;
use polaris::protocol::{Delivery, ErrorCode, ReceiptKind};
use serde_json::{json, Value};

fn press(task: &str) -> Value {
    json!({"taskId": task, "key": "Enter", "target": "#title", "expect": {"target": "#status", "contains": "Saved"}})
}

async fn start(client: &BridgeClient, fixture: Value) -> String {
    let reply = client
        .call("task.start", json!({"title": "Post", "fixture": fixture}))
        .await
        .unwrap();
    reply.result.unwrap()["taskId"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_carries_many_calls_at_once_with_fresh_ids() {
    let dir = socket_dir();
    // One connection slot: a client that opened a second connection would wait forever.
    let _host = HostProcess::start(
        dir.path(),
        &["--max-connections", "1", "--action-timeout-ms", "60000"],
    )
    .await;
    let client = BridgeClient::new(dir.path()).with_timeout(Duration::from_secs(20));
    // The readiness probe's connection frees the only slot once the host sees it close; until
    // then a new connection is told HOST_BUSY.
    eventually("the only connection slot to be free", || async {
        client.call("host.hello", json!({})).await.ok().map(|_| ())
    })
    .await;
    let slow = start(&client, json!({"dropSubmit": true})).await;
    let task = start(&client, json!({})).await;

    // A press whose submit is lost stays in flight until the 60 s deadline...
    let pressing = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call_with_id("held-press", "page.press", press(&slow))
                .await
        })
    };
    eventually("the held press to run", || async {
        let r = client
            .call("receipt.status", json!({"requestId": "held-press"}))
            .await
            .ok()?;
        (r.result?["state"] == "running").then_some(())
    })
    .await;
    // ...while 64 more calls share the same connection and come back.
    let calls: Vec<_> = (0..64)
        .map(|i| {
            let client = client.clone();
            let task = task.clone();
            tokio::spawn(async move {
                client
                    .call(
                        "page.fill",
                        json!({"taskId": task, "target": format!("#f{i}"), "value": "v"}),
                    )
                    .await
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for call in calls {
        let reply = call.await.unwrap().unwrap();
        assert!(reply.ok);
        assert_eq!(reply.meta.unwrap().receipt, ReceiptKind::New);
        ids.insert(reply.id.unwrap());
    }
    assert_eq!(ids.len(), 64, "a fresh UUID per call");
    assert!(!pressing.is_finished());
    pressing.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_unknown_and_the_client_never_resends() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &["--action-timeout-ms", "60000"]).await;
    let patient = BridgeClient::new(dir.path());
    let task = start(&patient, json!({"dropSubmit": true})).await;

    let hasty = BridgeClient::new(dir.path()).with_timeout(Duration::from_millis(300));
    let e = hasty
        .call_with_id("hasty-press", "page.press", press(&task))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BridgeTimeout);
    assert_eq!(e.delivery, Delivery::Unknown);
    assert_eq!(e.request_id, "hasty-press");
    assert!(!e.automatic_replay());
    let wire = e.to_reply_json();
    assert_eq!(wire["error"]["automaticReplay"], false);
    assert_eq!(wire["error"]["details"]["requestId"], "hasty-press");
    assert_eq!(
        wire["error"]["details"]["next"],
        json!({"method": "receipt.status", "params": {"requestId": "hasty-press"}})
    );

    // The same client goes on working; nothing was sent again.
    let r = hasty
        .call("receipt.status", json!({"requestId": "hasty-press"}))
        .await
        .unwrap()
        .result
        .unwrap();
    assert_eq!(r["state"], "running");
    assert_eq!(
        (r["joins"].as_u64(), r["replays"].as_u64()),
        (Some(0), Some(0))
    );
    let run = bridge(dir.path(), "run.status", json!({})).await;
    assert_eq!(
        run["result"]["receipts"]["used"], 2,
        "task.start and one press"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_host_is_unknown_then_unavailable_and_reconnecting_replays_nothing() {
    let dir = socket_dir();
    let mut host = HostProcess::start(dir.path(), &["--action-timeout-ms", "60000"]).await;
    let client = BridgeClient::new(dir.path());
    let task = start(&client, json!({"dropSubmit": true})).await;
    let pressing = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call_with_id("lost-press", "page.press", press(&task))
                .await
        })
    };
    eventually("the press to run", || async {
        let r = client
            .call("receipt.status", json!({"requestId": "lost-press"}))
            .await
            .ok()?;
        (r.result?["state"] == "running").then_some(())
    })
    .await;
    host.kill();

    let e = pressing.await.unwrap().unwrap_err();
    assert_eq!(
        (e.code, e.delivery),
        (ErrorCode::BridgeDisconnected, Delivery::Unknown)
    );
    assert_eq!(e.request_id, "lost-press");
    let e = client.call("run.status", json!({})).await.unwrap_err();
    assert_eq!(
        (e.code, e.delivery),
        (ErrorCode::BridgeUnavailable, Delivery::NotSent)
    );
    assert!(e.message.contains("polaris serve"));

    // A new host run on the same journal: the client reconnects for its next call and replays
    // nothing; the press the host was executing when it died is stored as INTERRUPTED.
    let _host = HostProcess::start(dir.path(), &[]).await;
    let r = client
        .call("receipt.status", json!({"requestId": "lost-press"}))
        .await
        .unwrap()
        .result
        .unwrap();
    assert_eq!(r["state"], "completed");
    assert_eq!(r["reply"]["error"]["code"], "INTERRUPTED", "{r}");
    let run = client
        .call("run.status", json!({}))
        .await
        .unwrap()
        .result
        .unwrap();
    assert_eq!(run["receipts"]["used"], 2, "a restart frees nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_refuses_mutations_after_an_uncertain_result_until_verified() {
    let dir = socket_dir();
    let _host = HostProcess::start(dir.path(), &["--action-timeout-ms", "200"]).await;
    let session = Session::new(BridgeClient::new(dir.path()));
    let started = session
        .call(
            "task.start",
            json!({"title": "Post", "fixture": {"submitDelayMs": 600}}),
        )
        .await
        .unwrap();
    let task = started.reply.result.unwrap()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(session.kept_run(&task).is_some());

    let pressed = session.call("page.press", press(&task)).await.unwrap();
    assert_eq!(
        pressed.reply.error.unwrap().code,
        ErrorCode::OutcomeUncertain
    );
    let fill = json!({"taskId": task, "target": "#title", "value": "x"});
    let e = session
        .call_with_id("refused-fill", "page.fill", fill.clone())
        .await
        .unwrap_err();
    assert_eq!(
        (e.code, e.delivery),
        (ErrorCode::ClientBlockedAmbiguous, Delivery::NotSent)
    );
    let d = e.details.unwrap();
    assert_eq!(
        d["next"],
        json!({"method": "task.verifyOutcome", "params": {"taskId": task}})
    );
    // Refused locally: the host never saw it.
    let r = bridge(
        dir.path(),
        "receipt.status",
        json!({"requestId": "refused-fill"}),
    )
    .await;
    assert_eq!(r["result"]["state"], "unknown");
    // Reads pass.
    assert!(
        session
            .call("task.status", json!({"taskId": task}))
            .await
            .unwrap()
            .reply
            .ok
    );

    let settled = eventually("the late submit to be confirmed", || async {
        let v = session
            .call("task.verifyOutcome", json!({"taskId": task}))
            .await
            .unwrap();
        (v.reply.result.as_ref()?["outcome"] == "confirmed").then_some(v.settled)
    })
    .await;
    assert_eq!(settled.len(), 1);
    assert!(session.call("page.fill", fill).await.unwrap().reply.ok);
    let subs = session
        .call(
            "page.read",
            json!({"taskId": task, "target": "#submissions"}),
        )
        .await
        .unwrap();
    assert_eq!(subs.reply.result.unwrap()["value"], "1");
}
