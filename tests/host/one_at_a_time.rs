//! SPEC §14 on the fixture page, through a real host: a task's actions run one at a time and
//! each is checked again when its turn comes; `task.status` shows what is in flight; an
//! expectation that already holds is refused before anything is sent; local steps and chords.
//! Side effects are counted where they happen: the fixture's `#submissions` and the run's
//! `executor.mutations`.

use polaris_testkit::host::*;

use std::time::Duration;

use serde_json::{json, Value};

/// The seed's scenario: the submit lands 1.2 s after it is sent, past a 300 ms deadline.
const DEADLINE: &str = "300";
const LATE_MS: u64 = 1200;

fn press(task: &str) -> Value {
    json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()})
}

fn click(task: &str) -> Value {
    json!({"taskId": task, "target": "#submit", "expect": saved()})
}

/// Waits until the late submit has applied, then checks the book: exactly one submit.
async fn one_submit_applied(c: &mut Conn, task: &str) {
    tokio::time::sleep(Duration::from_millis(LATE_MS + 300)).await;
    assert_eq!(submissions(c, task).await, 1, "one submit applied");
    assert_eq!(mutations(c).await, 1, "one mutation in the run");
}

/// The second submit, admitted while the first was pending, waited its turn; the first ended
/// uncertain, so the second ends `TASK_BLOCKED`, `not_executed`, stored in its receipt (a copy
/// replays it), and the fixture counts one submit. Verification then confirms only the first.
async fn second_submit_is_refused_unsent(
    c: &mut Conn,
    task: &str,
    (first, a): (&str, Value),
    (second, b): (&str, Value),
) {
    let e = err(&a, "OUTCOME_UNCERTAIN");
    assert_eq!(e["delivery"], "uncertain");
    let e = err(&b, "TASK_BLOCKED");
    assert_eq!(e["delivery"], "not_executed", "{b}");
    assert_eq!(e["details"]["queued"], true, "{b}");
    assert_eq!(e["details"]["pendingOutcome"]["requestId"], first, "{b}");
    assert_eq!(
        receipt(&b),
        "new",
        "the refusal is the execution's stored reply"
    );
    let again = c.call_id(second, "page.click", click(task)).await;
    assert_eq!(receipt(&again), "replayed");
    assert_eq!(again["error"], b["error"], "replayed byte for byte");
    one_submit_applied(c, task).await;
    let v = ok(&c.call("task.verifyOutcome", json!({"taskId": task})).await).clone();
    assert_eq!(v["outcome"], "confirmed", "{v}");
    assert_eq!(v["resolved"]["requestId"], first, "{v}");
    assert_eq!(v["state"], "running", "nothing else is pending: {v}");
    assert_eq!(submissions(c, task).await, 1);
}

/// With the journal and without: the two paths run a pipelined batch differently.
const BOOKS: [&[&str]; 2] = [&[], &["--no-journal"]];

#[tokio::test]
async fn a_second_submit_pipelined_behind_a_pending_one_is_never_sent() {
    for book in BOOKS {
        let host = TestHost::start(&[&["--action-timeout-ms", DEADLINE], book].concat());
        pipelined_second_submit(&host).await;
    }
}

async fn pipelined_second_submit(host: &TestHost) {
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"submitDelayMs": LATE_MS})).await;
    let (first, second) = (new_id(), new_id());
    // One write: the host reads both frames as one batch.
    let frames = format!(
        "{}\n{}\n",
        json!({"id": first, "method": "page.press", "params": press(&task)}),
        json!({"id": second, "method": "page.click", "params": click(&task)}),
    );
    c.send_raw(frames.as_bytes()).await;
    let a = c.wait(&first).await;
    let b = c.wait(&second).await;
    second_submit_is_refused_unsent(&mut c, &task, (&first, a), (&second, b)).await;
}

#[tokio::test]
async fn a_second_submit_from_another_connection_waits_and_is_never_sent() {
    let host = TestHost::start(&["--action-timeout-ms", DEADLINE]);
    let mut c = host.conn().await;
    let mut other = host.conn().await;
    let task = start_task(&mut c, json!({"submitDelayMs": LATE_MS})).await;
    let (first, second) = (new_id(), new_id());
    c.send(&first, "page.press", press(&task)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    other.send(&second, "page.click", click(&task)).await;
    // While the first runs, an agent that reconnected sees both in flight, in order, and in
    // the history as running: it has every reason not to send a third.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut reader = host.conn().await;
    let st = ok(&reader.call("task.status", json!({"taskId": task})).await).clone();
    let in_flight: Vec<_> = st["inFlight"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["requestId"].as_str().unwrap(),
                f["method"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        in_flight,
        [
            (first.as_str(), "page.press"),
            (second.as_str(), "page.click")
        ],
        "{st}"
    );
    assert!(st["inFlight"][0]["since"].as_str().unwrap().ends_with('Z'));
    let h = history(&st);
    assert!(
        h.ends_with(&["page.press running".into(), "page.click running".into()]),
        "{h:?}"
    );
    assert_eq!(st["state"], "running", "nothing has ended yet: {st}");

    let a = c.wait(&first).await;
    let b = other.wait(&second).await;
    second_submit_is_refused_unsent(&mut c, &task, (&first, a), (&second, b)).await;
    let st = ok(&c.call("task.status", json!({"taskId": task})).await).clone();
    assert_eq!(st["inFlight"], json!([]), "{st}");
}

/// A `task.finish` admitted behind a pending submit closes nothing when that submit ends
/// uncertain: it is stored `TASK_BLOCKED` and the task stays blocked, not finished.
#[tokio::test]
async fn a_finish_queued_behind_an_uncertain_submit_finishes_nothing() {
    let host = TestHost::start(&["--action-timeout-ms", DEADLINE]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"submitDelayMs": LATE_MS})).await;
    let (first, finish) = (new_id(), new_id());
    c.send(&first, "page.press", press(&task)).await;
    c.send(&finish, "task.finish", json!({"taskId": task}))
        .await;
    err(&c.wait(&first).await, "OUTCOME_UNCERTAIN");
    let f = c.wait(&finish).await;
    assert_eq!(err(&f, "TASK_BLOCKED")["delivery"], "not_executed");
    assert_eq!(receipt(&f), "new");
    let st = ok(&c.call("task.status", json!({"taskId": task})).await).clone();
    assert_eq!(st["state"], "blocked", "{st}");
    // Once the outcome is confirmed, the task runs again and may be finished (a fresh id:
    // the refused one keeps its answer).
    tokio::time::sleep(Duration::from_millis(LATE_MS)).await;
    let v = ok(&c.call("task.verifyOutcome", json!({"taskId": task})).await).clone();
    assert_eq!(v["outcome"], "confirmed", "{v}");
    let again = c
        .call_id(&finish, "task.finish", json!({"taskId": task}))
        .await;
    assert_eq!(receipt(&again), "replayed");
    assert_eq!(
        ok(&c.call("task.finish", json!({"taskId": task})).await)["state"],
        "finished"
    );
}

/// Fills pipelined behind a submit that applies at once run after it, in order, and the task
/// ends with the last fill's value: one at a time does not mean refused.
#[tokio::test]
async fn actions_queued_behind_a_good_submit_run_in_order() {
    for book in BOOKS {
        queued_behind_a_good_submit(&TestHost::start(book)).await;
    }
}

async fn queued_behind_a_good_submit(host: &TestHost) {
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let ids: Vec<String> = (0..4).map(|_| new_id()).collect();
    let fill = |v: &str| json!({"taskId": task, "target": "#title", "value": v});
    let frames = [
        json!({"id": ids[0], "method": "page.fill", "params": fill("one")}),
        json!({"id": ids[1], "method": "page.press", "params": press(&task)}),
        json!({"id": ids[2], "method": "page.fill", "params": fill("two")}),
        json!({"id": ids[3], "method": "page.click", "params": {"taskId": task, "target": "#submit",
            "expect": {"target": "#status", "equals": "Saved #2"}}}),
    ]
    .iter()
    .map(|f| format!("{f}\n"))
    .collect::<String>();
    c.send_raw(frames.as_bytes()).await;
    for id in &ids {
        ok(&c.wait(id).await);
    }
    assert_eq!(submissions(&mut c, &task).await, 2);
    let title = c
        .call("page.read", json!({"taskId": task, "target": "#title"}))
        .await;
    assert_eq!(ok(&title)["value"], "two");
}

/// An expectation that already holds could never show the action's effect: refused before
/// anything is sent (`ACTION_FAILED`, `not_sent`), stored, and the task keeps running. The
/// next value of the counter is the expectation that works.
#[tokio::test]
async fn an_expectation_that_already_holds_is_refused_before_dispatch() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let rid = new_id();
    let draft = json!({"taskId": task, "target": "#submit",
        "expect": {"target": "#status", "contains": "Draft"}});
    let r = c.call_id(&rid, "page.click", draft.clone()).await;
    let e = err(&r, "ACTION_FAILED");
    assert_eq!(e["delivery"], "not_sent", "{r}");
    assert_eq!(e["details"]["cause"], "expectation_already_holds", "{r}");
    assert!(
        e["message"].as_str().unwrap().contains("next value"),
        "the message says what to expect instead: {r}"
    );
    assert_eq!(receipt(&r), "new");
    assert_eq!(
        c.call_id(&rid, "page.click", draft).await["error"],
        r["error"],
        "replayed as stored"
    );
    let tab = json!({"taskId": task, "key": "Tab", "target": "#title",
        "expect": {"target": "#title", "equals": ""}, "local": true});
    let e = err(&c.call("page.press", tab).await, "ACTION_FAILED").clone();
    assert_eq!(e["details"]["cause"], "expectation_already_holds");
    assert_eq!(submissions(&mut c, &task).await, 0);
    assert_eq!(mutations(&mut c).await, 0);
    let st = ok(&c.call("task.status", json!({"taskId": task})).await).clone();
    assert_eq!(st["state"], "running");

    ok(&c.call("page.click", click(&task)).await);
    let again = err(&c.call("page.click", click(&task)).await, "ACTION_FAILED").clone();
    assert_eq!(again["details"]["cause"], "expectation_already_holds");
    let next = json!({"taskId": task, "target": "#submit",
        "expect": {"target": "#submissions", "equals": "2"}});
    ok(&c.call("page.click", next).await);
    assert_eq!(submissions(&mut c, &task).await, 2);
}

/// A step sent as local commits nothing and needs no expectation; one that submits anyway
/// ends uncertain and blocks the task, and verification has nothing to confirm it with.
/// Chords are keys; a malformed one is a bad request.
#[tokio::test]
async fn local_steps_and_chords() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let local = |key: &str| json!({"taskId": task, "key": key, "target": "#title", "expect": null, "local": true});
    for key in ["Tab", "Control+a", "Shift+ArrowDown"] {
        let r = ok(&c.call("page.press", local(key)).await).clone();
        assert_eq!(r, json!({"local": true, "observation": null}), "{key}");
    }
    let e = err(&c.call("page.press", local("Ctrl+a")).await, "BAD_REQUEST").clone();
    assert!(e["message"].as_str().unwrap().contains("Control"), "{e}");
    let e = err(
        &c.call(
            "page.press",
            json!({"taskId": task, "key": "Tab", "target": "#title"}),
        )
        .await,
        "BAD_REQUEST",
    )
    .clone();
    assert!(e["message"].as_str().unwrap().contains("local"), "{e}");
    assert_eq!(submissions(&mut c, &task).await, 0);

    let rid = new_id();
    let r = c.call_id(&rid, "page.press", local("Enter")).await;
    let e = err(&r, "OUTCOME_UNCERTAIN");
    assert!(e["message"].as_str().unwrap().contains("local"), "{r}");
    let st = ok(&c.call("task.status", json!({"taskId": task})).await).clone();
    assert_eq!(st["state"], "blocked");
    assert_eq!(st["pendingOutcome"]["requestId"], rid.as_str());
    assert_eq!(st["pendingOutcome"]["expect"], Value::Null);
    let v = ok(&c.call("task.verifyOutcome", json!({"taskId": task})).await).clone();
    assert_eq!(v["outcome"], "unknown", "{v}");
    assert!(v["note"].as_str().unwrap().contains("local"), "{v}");
    assert_eq!(
        submissions(&mut c, &task).await,
        1,
        "the local Enter did submit"
    );
}

/// A pipelined batch admitted behind another connection's submit that then ends uncertain:
/// when the batch's turn comes, each of its requests is checked again, and none is sent. With
/// the journal, the batch waits for its turn as one; before this check it went straight to the
/// executor once its turn came, on a task already blocked.
#[tokio::test]
async fn a_batch_whose_turn_comes_after_an_uncertain_submit_is_never_sent() {
    for book in BOOKS {
        let host = TestHost::start(&[&["--action-timeout-ms", DEADLINE], book].concat());
        let mut c = host.conn().await;
        let mut other = host.conn().await;
        let task = start_task(&mut c, json!({"submitDelayMs": LATE_MS})).await;
        let ahead = new_id();
        other.send(&ahead, "page.press", press(&task)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (first, second) = (new_id(), new_id());
        let frames = format!(
            "{}\n{}\n",
            json!({"id": first, "method": "page.click", "params": click(&task)}),
            json!({"id": second, "method": "page.click", "params": click(&task)}),
        );
        c.send_raw(frames.as_bytes()).await;
        err(&other.wait(&ahead).await, "OUTCOME_UNCERTAIN");
        for id in [&first, &second] {
            let r = c.wait(id).await;
            let e = err(&r, "TASK_BLOCKED");
            assert_eq!(e["delivery"], "not_executed", "{book:?}: {r}");
            assert_eq!(e["details"]["queued"], true, "{book:?}: {r}");
        }
        one_submit_applied(&mut c, &task).await;
    }
}
