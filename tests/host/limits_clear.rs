//! SPEC §10 "operators never stall agents", the receipt rules' side, against a real
//! `polaris serve` with its journal: while a large `clearCommit` takes its receipts out of the
//! book slice by slice, an agent reading listed IDs and sending new ones never finds a listed ID
//! unknown or back after it was cleared, new IDs run once and stay, and once the commit answers
//! every listed ID is refused as cleared. The `receipts.cleared` event stays small however large
//! the clear.

use polaris_testkit::host::*;

use std::collections::HashSet;

use serde_json::{json, Value};

/// Receipts in the book before the clear.
const RECEIPTS: usize = 20_000;

fn fill_params(task: &str, i: usize) -> Value {
    json!({"taskId": task, "target": "#title", "value": format!("v{i}")})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_replaying_and_creating_during_a_large_commit_keep_the_receipt_rules() {
    let host = TestHost::start(&["--capacity", "100000"]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let ids: Vec<String> = (0..RECEIPTS).map(|_| new_id()).collect();
    for (n, chunk) in ids.chunks(64).enumerate() {
        for (i, id) in chunk.iter().enumerate() {
            c.send(id, "page.fill", fill_params(&task, n * 64 + i))
                .await;
        }
        for id in chunk {
            assert_eq!(receipt(&c.wait(id).await), "new");
        }
    }

    let mut events = Conn::connect(&host.introspect()).await;
    ok(&events.call("subscribe", json!({})).await);
    let mut op = Conn::connect(&host.introspect()).await;
    let prepared = op
        .call("receipts.clearPrepare", json!({"filter": {}}))
        .await;
    let prepared = ok(&prepared);
    let listed = prepared["clearable"].as_array().unwrap().len();
    assert_eq!(listed, RECEIPTS + 1, "every fill and the task's start");
    let token = prepared["token"].as_str().unwrap().to_owned();
    let executions = |snapshot: &Value| ok(snapshot)["counters"]["executions"].as_u64().unwrap();
    let executed_before = executions(&op.call("snapshot", json!({})).await);

    // An agent replays listed IDs (round and round) and sends new ones until the commit answers.
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent = {
        let mut a = host.conn().await;
        let (ids, task) = (ids.clone(), task.clone());
        tokio::spawn(async move {
            let mut cleared: HashSet<String> = HashSet::new();
            let (mut replays, mut refusals, mut created) = (0u64, 0u64, Vec::new());
            let mut i = 0;
            while stop_rx.try_recv().is_err() {
                // Reading a listed receipt leaves it unchanged (a replay would make the
                // commit stale, as the contract says): it is still there, or cleared, never
                // unknown, and never back once cleared.
                let id = &ids[(i * 7919) % ids.len()];
                let r = a.call("receipt.status", json!({"requestId": id})).await;
                match ok(&r)["state"].as_str().unwrap() {
                    "completed" => {
                        assert!(!cleared.contains(id), "{id} came back after it was cleared");
                        replays += 1;
                    }
                    "cleared" => {
                        cleared.insert(id.clone());
                        refusals += 1;
                    }
                    other => panic!("{id} is {other} while its clear is applied: {r}"),
                }
                let fresh = new_id();
                let r = a.call_id(&fresh, "page.fill", fill_params(&task, i)).await;
                assert_eq!(receipt(&r), "new", "{r}");
                created.push((fresh, i));
                i += 1;
            }
            (replays, refusals, created)
        })
    };

    let committed = op
        .call(
            "receipts.clearCommit",
            json!({"token": token, "reason": "clear while agents work"}),
        )
        .await;
    stop_tx.send(()).unwrap();
    let (replays, refusals, created) = agent.await.unwrap();
    let committed = ok(&committed);
    assert_eq!(committed["cleared"], listed as u64);
    eprintln!(
        "during the commit: {replays} reads found a listed receipt, {refusals} found it cleared, {} new IDs ran",
        created.len()
    );

    // Once the commit answered: every listed ID is refused as cleared, what agents created
    // meanwhile stays, and no replay executed anything.
    for (n, id) in ids.iter().enumerate().step_by(101) {
        let r = c.call_id(id, "page.fill", fill_params(&task, n)).await;
        err(&r, "RECEIPT_CLEARED");
    }
    for (id, i) in &created {
        let r = c.call_id(id, "page.fill", fill_params(&task, *i)).await;
        assert_eq!(receipt(&r), "replayed", "{id} was kept: {r}");
    }
    let status = ok(&c.call("run.status", json!({})).await).clone();
    assert_eq!(status["receipts"]["used"], created.len() as u64);
    assert_eq!(status["receipts"]["tombstones"], listed as u64);
    assert_eq!(
        executions(&op.call("snapshot", json!({})).await),
        executed_before + created.len() as u64,
        "only new IDs executed"
    );

    // The event names the count and only the first IDs.
    loop {
        let frame = events.read_frame().await;
        if frame["event"] == "receipts.cleared" {
            assert_eq!(frame["data"]["count"], listed as u64);
            let named = frame["data"]["requestIds"].as_array().unwrap();
            assert_eq!(named.len(), 100);
            break;
        }
    }
}
