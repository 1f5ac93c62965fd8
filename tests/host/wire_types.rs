//! Every result a real host sends, on both sockets, and every event frame it writes, read
//! through its type in `polaris::protocol::{results, introspection}` and written back: the
//! JSON must be the same value and the same bytes. A field the host sends that the type lacks,
//! or a required field the host leaves out, fails here — so a reply shape cannot change on one
//! side only.

use polaris_testkit::host::{new_id, saved, Conn, TestHost};

use std::collections::BTreeSet;
use std::time::Duration;

use polaris::protocol::introspection::{
    AuditListResult, ChangedEvent, ClearCommitted, ClearPrepared, EventFrame, LaggedEvent,
    PendingCreatedEvent, PendingResolvedEvent, ReceiptCompletedEvent, ReceiptCreatedEvent,
    ReceiptDetail, ReceiptSeenEvent, ReceiptsClearedEvent, ReceiptsListResult,
    RequestRejectedEvent, Snapshot, Subscribed, TaskSummary, TasksListResult,
};
use polaris::protocol::results::{
    FieldResult, HelloResult, ObservedResult, PendingOutcome, ReceiptState, ReceiptStatusResult,
    RunStatusResult, TaskClosedResult, TaskResumeResult, TaskStartResult, TaskStatusResult,
    ToolsListResult, VerifyResult,
};
use polaris::tasks::{TaskState, VerifyOutcome};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// Reads `text` as `T`, writes it back, and requires the same JSON value and the same bytes.
#[track_caller]
fn round_trip<T: DeserializeOwned + Serialize>(what: &str, text: &str) -> T {
    let typed: T = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{what} does not read as its type ({e}): {text}"));
    let again = serde_json::to_string(&typed).expect("a wire type serialises");
    let sent: Value = serde_json::from_str(text).unwrap();
    let written: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(
        written, sent,
        "{what}: the type and the host disagree on a field\n type: {again}\n host: {text}"
    );
    assert_eq!(
        again, text,
        "{what}: same fields, other bytes (field order)"
    );
    typed
}

/// The raw `result` of an ok reply line.
#[track_caller]
fn raw_result(what: &str, line: &str) -> String {
    #[derive(Deserialize)]
    struct Raw<'a> {
        ok: bool,
        #[serde(borrow)]
        result: Option<&'a RawValue>,
    }
    let raw: Raw<'_> = serde_json::from_str(line).unwrap();
    assert!(raw.ok, "{what} failed: {line}");
    raw.result
        .unwrap_or_else(|| panic!("{what} has no result: {line}"))
        .get()
        .to_owned()
}

/// Checked results, by the name of the case, so the test can say what it covered.
#[derive(Default)]
struct Checked(BTreeSet<String>);

impl Checked {
    /// Calls `method` and round-trips its result through `T`.
    async fn call<T: DeserializeOwned + Serialize>(
        &mut self,
        c: &mut Conn,
        what: &str,
        method: &str,
        params: Value,
    ) -> T {
        let id = c.send(&new_id(), method, params).await;
        let (_, line) = c.wait_raw(&id).await;
        self.0.insert(what.to_owned());
        round_trip(what, &raw_result(what, &line))
    }
}

async fn send(c: &mut Conn, method: &str, params: Value) -> String {
    c.send(&new_id(), method, params).await
}

/// Round-trips an event frame's `data` through the type of its kind.
#[track_caller]
fn event_data(frame: &EventFrame) {
    fn check<T: DeserializeOwned + Serialize>(frame: &EventFrame) {
        round_trip::<T>(&format!("{} data", frame.event), &frame.data.to_string());
    }
    match frame.event.as_str() {
        "receipt.created" => check::<ReceiptCreatedEvent>(frame),
        "receipt.completed" => check::<ReceiptCompletedEvent>(frame),
        "receipt.joined" | "receipt.replayed" => check::<ReceiptSeenEvent>(frame),
        "request.rejected" => check::<RequestRejectedEvent>(frame),
        "task.updated" => check::<TaskSummary>(frame),
        "pending.created" => check::<PendingCreatedEvent>(frame),
        "pending.resolved" => check::<PendingResolvedEvent>(frame),
        "receipts.cleared" => check::<ReceiptsClearedEvent>(frame),
        "lagged" => check::<LaggedEvent>(frame),
        "changed" => check::<ChangedEvent>(frame),
        other => panic!("an event kind without a type: {other}"),
    }
}

fn press(task: &str) -> Value {
    json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()})
}

#[tokio::test(flavor = "multi_thread")]
async fn every_result_and_event_reads_as_its_type_and_writes_the_same_bytes() {
    let host = TestHost::start(&["--action-timeout-ms", "300"]);
    let mut b = host.conn().await;
    let mut i = Conn::connect(&host.introspect()).await;
    let mut checked = Checked::default();

    // A full-stream subscriber and a coalesced one, each on its own connection.
    let mut events = Conn::connect(&host.introspect()).await;
    let id = events.send(&new_id(), "subscribe", json!({})).await;
    let (_, line) = events.wait_raw(&id).await;
    let full: Subscribed = round_trip("subscribe", &raw_result("subscribe", &line));
    assert!(full.subscribed && full.coalesce_ms.is_none());
    let mut coalesced = Conn::connect(&host.introspect()).await;
    let id = coalesced
        .send(&new_id(), "subscribe", json!({"coalesceMs": 50}))
        .await;
    let (_, line) = coalesced.wait_raw(&id).await;
    let sub: Subscribed = round_trip("subscribe (coalesced)", &raw_result("subscribe", &line));
    assert_eq!(sub.coalesce_ms, Some(50));

    // ---- the bridge ----
    let _: HelloResult = checked
        .call(&mut b, "host.hello", "host.hello", json!({}))
        .await;
    let tools: ToolsListResult = checked
        .call(&mut b, "tools.list", "tools.list", json!({}))
        .await;
    // The fixture's: the 14 core methods and what it offers of SPEC §15 (page.snapshot,
    // page.wait, page.url, page.tabs, page.select, page.check).
    assert_eq!(tools.tools.len(), 20, "{:?}", tools.tools);
    let started: TaskStartResult = checked
        .call(
            &mut b,
            "task.start",
            "task.start",
            json!({"title": "typed", "url": "https://example.test/form"}),
        )
        .await;
    let t = started.task_id.clone();
    let _: FieldResult = checked
        .call(
            &mut b,
            "page.fill",
            "page.fill",
            json!({"taskId": t, "target": "#title", "value": "hi"}),
        )
        .await;
    let _: ObservedResult = checked
        .call(&mut b, "page.press", "page.press", press(&t))
        .await;
    let _: FieldResult = checked
        .call(
            &mut b,
            "page.read",
            "page.read",
            json!({"taskId": t, "target": "#status"}),
        )
        .await;
    let click = json!({"taskId": t, "target": "#submit", "expect": {"target": "#status", "equals": "Saved #2"}});
    let _: ObservedResult = checked
        .call(&mut b, "page.click", "page.click", click)
        .await;
    let with_url: TaskStatusResult = checked
        .call(
            &mut b,
            "task.status (with url)",
            "task.status",
            json!({"taskId": t}),
        )
        .await;
    assert!(with_url.url.is_some() && with_url.history.len() == 4);
    let none: VerifyResult = checked
        .call(
            &mut b,
            "task.verifyOutcome (none)",
            "task.verifyOutcome",
            json!({"taskId": t}),
        )
        .await;
    assert_eq!(none.outcome, VerifyOutcome::None);

    // A task whose submits never land: of two presses admitted together, the first ends
    // uncertain and the second, which waited its turn behind it, is refused unsent.
    let dropped: TaskStartResult = checked
        .call(
            &mut b,
            "task.start (dropSubmit)",
            "task.start",
            json!({"title": "lost", "fixture": {"dropSubmit": true}}),
        )
        .await;
    let d = dropped.task_id;
    let p1 = send(&mut b, "page.press", press(&d)).await;
    let p2 = send(&mut b, "page.press", press(&d)).await;
    // While the first runs: its receipt reads `running`, and a copy joins it.
    tokio::time::sleep(Duration::from_millis(60)).await;
    let running: ReceiptStatusResult = checked
        .call(
            &mut b,
            "receipt.status (running)",
            "receipt.status",
            json!({"requestId": p1}),
        )
        .await;
    assert_eq!(running.state, ReceiptState::Running);
    let live: ReceiptDetail = checked
        .call(
            &mut i,
            "receipts.get (running)",
            "receipts.get",
            json!({"requestId": p1}),
        )
        .await;
    assert_eq!(live.state, ReceiptState::Running);
    let in_flight: TaskStatusResult = checked
        .call(
            &mut b,
            "task.status (two in flight)",
            "task.status",
            json!({"taskId": d}),
        )
        .await;
    assert_eq!(in_flight.in_flight.len(), 2);
    let mut copy = host.conn().await;
    copy.call_id(&p1, "page.press", press(&d)).await;
    let blocked = b.wait(&p1).await;
    assert_eq!(blocked["error"]["code"], "OUTCOME_UNCERTAIN", "{blocked}");
    let queued = b.wait(&p2).await;
    assert_eq!(queued["error"]["code"], "TASK_BLOCKED", "{queued}");
    // Replayed, refused as reused content, refused as blocked.
    copy.call_id(&p1, "page.press", press(&d)).await;
    copy.call_id(
        &p1,
        "page.fill",
        json!({"taskId": d, "target": "#a", "value": "x"}),
    )
    .await;
    let refused = copy
        .call(
            "page.fill",
            json!({"taskId": d, "target": "#a", "value": "x"}),
        )
        .await;
    assert_eq!(refused["error"]["code"], "TASK_BLOCKED", "{refused}");
    let _: PendingOutcome = round_trip(
        "TASK_BLOCKED details.pendingOutcome",
        &refused["error"]["details"]["pendingOutcome"].to_string(),
    );

    let status: TaskStatusResult = checked
        .call(
            &mut b,
            "task.status (blocked)",
            "task.status",
            json!({"taskId": d}),
        )
        .await;
    assert_eq!(status.state, TaskState::Blocked);
    assert_eq!(status.more_pending_outcomes.len(), 0);
    let completed: ReceiptStatusResult = checked
        .call(
            &mut b,
            "receipt.status (completed)",
            "receipt.status",
            json!({"requestId": p1}),
        )
        .await;
    assert!(completed.reply.is_some_and(|r| r.error.is_some()));
    let not_observed: VerifyResult = checked
        .call(
            &mut b,
            "task.verifyOutcome (not_observed)",
            "task.verifyOutcome",
            json!({"taskId": d}),
        )
        .await;
    assert_eq!(not_observed.outcome, VerifyOutcome::NotObserved);
    let resumed: TaskResumeResult = checked
        .call(
            &mut b,
            "task.resume (blocked)",
            "task.resume",
            json!({"taskId": d, "runId": host.run_id}),
        )
        .await;
    assert!(resumed.pending_outcome.is_some());
    let _: TaskStatusResult = checked
        .call(
            &mut b,
            "task.status (verified)",
            "task.status",
            json!({"taskId": d}),
        )
        .await;

    // A late submit: uncertain at the deadline, confirmed afterwards.
    let late: TaskStartResult = checked
        .call(
            &mut b,
            "task.start (late)",
            "task.start",
            json!({"title": "late", "fixture": {"submitDelayMs": 500}}),
        )
        .await;
    let l = late.task_id;
    let r = b.call("page.press", press(&l)).await;
    assert_eq!(r["error"]["code"], "OUTCOME_UNCERTAIN", "{r}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let confirmed: VerifyResult = checked
        .call(
            &mut i,
            "task.verifyOutcome (confirmed, introspection)",
            "task.verifyOutcome",
            json!({"taskId": l}),
        )
        .await;
    assert_eq!(confirmed.outcome, VerifyOutcome::Confirmed);
    assert!(confirmed.resolved.is_some());

    // A page whose reads never finish in time: verification cannot tell.
    let slow: TaskStartResult = checked
        .call(
            &mut b,
            "task.start (slow reads)",
            "task.start",
            json!({"title": "slow", "fixture": {"readDelayMs": 1000}}),
        )
        .await;
    let s = slow.task_id;
    b.call("page.press", press(&s)).await;
    let unknown: VerifyResult = checked
        .call(
            &mut b,
            "task.verifyOutcome (unknown)",
            "task.verifyOutcome",
            json!({"taskId": s}),
        )
        .await;
    assert_eq!(unknown.outcome, VerifyOutcome::Unknown);

    let stopped: TaskClosedResult = checked
        .call(
            &mut b,
            "task.stop",
            "task.stop",
            json!({"taskId": d, "reason": "the submit never lands"}),
        )
        .await;
    assert_eq!(stopped.state, TaskState::Stopped);
    let _: TaskStatusResult = checked
        .call(
            &mut b,
            "task.status (stopped)",
            "task.status",
            json!({"taskId": d}),
        )
        .await;
    let finished: TaskClosedResult = checked
        .call(&mut b, "task.finish", "task.finish", json!({"taskId": t}))
        .await;
    assert_eq!(finished.state, TaskState::Finished);
    let _: TaskResumeResult = checked
        .call(
            &mut b,
            "task.resume",
            "task.resume",
            json!({"taskId": t, "runId": host.run_id}),
        )
        .await;
    let run: RunStatusResult = checked
        .call(
            &mut b,
            "run.status",
            "run.status",
            json!({"runId": "another-run"}),
        )
        .await;
    assert!(!run.current);
    let unknown_receipt: ReceiptStatusResult = checked
        .call(
            &mut b,
            "receipt.status (unknown)",
            "receipt.status",
            json!({"requestId": "never-sent"}),
        )
        .await;
    assert_eq!(unknown_receipt.state, ReceiptState::Unknown);

    // ---- introspection ----
    let _: HelloResult = checked
        .call(
            &mut i,
            "host.hello (introspection)",
            "host.hello",
            json!({}),
        )
        .await;
    let snap: Snapshot = checked
        .call(&mut i, "snapshot", "snapshot", json!({}))
        .await;
    assert!(
        !snap.pending.is_empty() && snap.pending.iter().any(|p| p.pending.last_verify.is_some())
    );
    let _: ReceiptsListResult = checked
        .call(
            &mut i,
            "receipts.list",
            "receipts.list",
            json!({"limit": 1000}),
        )
        .await;
    let _: ReceiptsListResult = checked
        .call(
            &mut i,
            "receipts.list (filtered)",
            "receipts.list",
            json!({"state": "error", "sort": "task"}),
        )
        .await;
    let _: ReceiptDetail = checked
        .call(
            &mut i,
            "receipts.get (completed)",
            "receipts.get",
            json!({"requestId": p1}),
        )
        .await;
    let _: ReceiptDetail = checked
        .call(
            &mut i,
            "receipts.get (unknown)",
            "receipts.get",
            json!({"requestId": "never-sent"}),
        )
        .await;
    let _: TasksListResult = checked
        .call(&mut i, "tasks.list", "tasks.list", json!({}))
        .await;
    let _: TasksListResult = checked
        .call(
            &mut i,
            "tasks.list (stopped)",
            "tasks.list",
            json!({"state": "stopped"}),
        )
        .await;
    let _: ClearPrepared = checked
        .call(
            &mut i,
            "receipts.clearPrepare (filter)",
            "receipts.clearPrepare",
            json!({"filter": {"state": "completed"}}),
        )
        .await;
    let stuck = status
        .pending_outcome
        .as_ref()
        .map(|p| p.request_id.clone())
        .unwrap();
    let slow_press = snap
        .pending
        .iter()
        .find(|p| p.task_id == s)
        .map(|p| p.pending.request_id.clone())
        .unwrap();
    let prepared: ClearPrepared = checked
        .call(
            &mut i,
            "receipts.clearPrepare (ids, some refused)",
            "receipts.clearPrepare",
            json!({"requestIds": [p1, stuck, slow_press, "never-sent"]}),
        )
        .await;
    assert!(!prepared.clearable.is_empty() && prepared.refused.len() == 2);
    let done: ClearCommitted = checked
        .call(
            &mut i,
            "receipts.clearCommit",
            "receipts.clearCommit",
            json!({"token": prepared.token, "reason": "typed wire check"}),
        )
        .await;
    assert!(done.cleared > 0);
    let _: AuditListResult = checked
        .call(&mut i, "audit.list", "audit.list", json!({}))
        .await;
    let cleared: ReceiptStatusResult = checked
        .call(
            &mut b,
            "receipt.status (cleared)",
            "receipt.status",
            json!({"requestId": p1}),
        )
        .await;
    assert_eq!(cleared.state, ReceiptState::Cleared);
    let _: ReceiptDetail = checked
        .call(
            &mut i,
            "receipts.get (cleared)",
            "receipts.get",
            json!({"requestId": p1}),
        )
        .await;

    // ---- event frames ----
    let mut kinds = BTreeSet::new();
    let wanted = [
        "receipt.created",
        "receipt.completed",
        "receipt.joined",
        "receipt.replayed",
        "request.rejected",
        "task.updated",
        "pending.created",
        "pending.resolved",
        "receipts.cleared",
    ];
    while !wanted.iter().all(|k| kinds.contains(*k)) {
        let line = events.read_line().await.expect("an event frame");
        let frame: EventFrame = round_trip("event frame", &line);
        event_data(&frame);
        kinds.insert(frame.event);
    }
    let line = coalesced.read_line().await.expect("a changed frame");
    let frame: EventFrame = round_trip("changed frame", &line);
    assert_eq!(frame.event, "changed");
    event_data(&frame);
    assert_eq!(frame.data_as::<ChangedEvent>().unwrap().to_seq, frame.seq);

    // Every result type of both sockets was read from the host at least once.
    for case in [
        "host.hello",
        "tools.list",
        "task.start",
        "page.fill",
        "page.click",
        "page.press",
        "page.read",
        "task.finish",
        "task.stop",
        "task.status (blocked)",
        "task.resume (blocked)",
        "task.verifyOutcome (confirmed, introspection)",
        "run.status",
        "receipt.status (completed)",
        "snapshot",
        "receipts.list",
        "receipts.get (completed)",
        "tasks.list",
        "receipts.clearPrepare (ids, some refused)",
        "receipts.clearCommit",
        "audit.list",
    ] {
        assert!(checked.0.contains(case), "not checked: {case}");
    }
}
