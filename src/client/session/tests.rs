//! The gate and the settling reads, on replies built in place (no host needed).

use super::*;
use crate::protocol::{ErrorBody, Meta, ReceiptKind, Reply};

fn session() -> Session {
    Session::new(BridgeClient::new(std::path::Path::new(
        "/nonexistent-polaris-test",
    )))
}

fn ok(run: &str, result: Value) -> Reply {
    Reply {
        id: Some("x".into()),
        ok: true,
        result: Some(result),
        error: None,
        meta: Some(Meta {
            run_id: run.into(),
            receipt: ReceiptKind::None,
        }),
    }
}

fn err(run: &str, code: ErrorCode) -> Reply {
    Reply {
        id: Some("x".into()),
        ok: false,
        result: None,
        error: Some(ErrorBody::new(code, "m")),
        meta: Some(Meta {
            run_id: run.into(),
            receipt: ReceiptKind::New,
        }),
    }
}

fn started(s: &Session, task: &str, run: &str) {
    s.observe(
        "s1",
        "task.start",
        &json!({"title": "t"}),
        Ok(ok(
            run,
            json!({"taskId": task, "runId": run, "state": "running"}),
        )),
    )
    .unwrap();
}

fn press() -> Value {
    json!({"taskId": "T", "key": "Enter", "target": "#title", "expect": {"target": "#status", "contains": "Saved"}})
}

fn lost(id: &str) -> Result<Reply, ClientError> {
    Err(ClientError::new(
        ErrorCode::BridgeDisconnected,
        id,
        "lost".into(),
    ))
}

#[test]
fn unknown_results_gate_mutations_but_not_reads() {
    let s = session();
    started(&s, "T", "A");
    assert!(s
        .check(
            "n1",
            "page.fill",
            &json!({"taskId": "T", "target": "#a", "value": "v"})
        )
        .is_ok());
    assert!(s.observe("r1", "page.press", &press(), lost("r1")).is_err());
    let e = s
        .check(
            "n2",
            "page.fill",
            &json!({"taskId": "T", "target": "#a", "value": "v"}),
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ClientBlockedAmbiguous);
    assert_eq!(e.delivery, Delivery::NotSent);
    assert_eq!(e.request_id, "n2");
    let d = e.details.unwrap();
    assert_eq!(d["blockingRequestId"], "r1");
    assert_eq!(
        d["next"],
        json!({"method": "receipt.status", "params": {"requestId": "r1"}})
    );
    // Finishing is a mutation too; stopping (the way out), reads and other tasks pass.
    assert!(s
        .check("n3", "task.finish", &json!({"taskId": "T"}))
        .is_err());
    assert!(s
        .check("n4", "task.stop", &json!({"taskId": "T", "reason": "x"}))
        .is_ok());
    assert!(s
        .check("n5", "task.status", &json!({"taskId": "T"}))
        .is_ok());
    assert!(s
        .check("n6", "page.read", &json!({"taskId": "T", "target": "#a"}))
        .is_ok());
    assert!(s
        .check(
            "n7",
            "page.fill",
            &json!({"taskId": "U", "target": "#a", "value": "v"})
        )
        .is_ok());
    assert!(s
        .check("n8", "task.start", &json!({"title": "new"}))
        .is_ok());
}

#[test]
fn a_completed_receipt_settles_and_a_running_one_does_not() {
    let s = session();
    started(&s, "T", "A");
    let _ = s.observe("r1", "page.press", &press(), lost("r1"));
    let q = json!({"requestId": "r1"});
    let r = s
        .observe(
            "q1",
            "receipt.status",
            &q,
            Ok(ok("A", json!({"requestId": "r1", "state": "running"}))),
        )
        .unwrap();
    assert!(r.settled.is_empty());
    assert!(s
        .check(
            "n",
            "page.fill",
            &json!({"taskId": "T", "target": "#a", "value": "v"})
        )
        .is_err());
    let done = json!({"requestId": "r1", "state": "completed", "ok": true, "reply": {"ok": true, "result": {}}});
    let r = s
        .observe("q2", "receipt.status", &q, Ok(ok("A", done)))
        .unwrap();
    assert_eq!(
        r.settled,
        vec![Settled {
            request_id: "r1".into(),
            task_id: "T".into(),
            how: "completed"
        }]
    );
    assert!(s
        .check(
            "n",
            "page.fill",
            &json!({"taskId": "T", "target": "#a", "value": "v"})
        )
        .is_ok());
}

#[test]
fn an_uncertain_end_needs_verification() {
    let s = session();
    started(&s, "T", "A");
    s.observe(
        "r1",
        "page.press",
        &press(),
        Ok(err("A", ErrorCode::OutcomeUncertain)),
    )
    .unwrap();
    let e = s
        .check(
            "n",
            "page.fill",
            &json!({"taskId": "T", "target": "#a", "value": "v"}),
        )
        .unwrap_err();
    assert_eq!(e.details.unwrap()["next"]["method"], "task.verifyOutcome");
    // The receipt is completed, but uncertain: not settled.
    let stored = json!({"requestId": "r1", "state": "completed", "ok": false,
        "reply": {"ok": false, "error": {"code": "OUTCOME_UNCERTAIN", "delivery": "uncertain"}}});
    let r = s
        .observe(
            "q",
            "receipt.status",
            &json!({"requestId": "r1"}),
            Ok(ok("A", stored)),
        )
        .unwrap();
    assert!(r.settled.is_empty());
    let t = json!({"taskId": "T"});
    let r = s.observe("v1", "task.verifyOutcome", &t, Ok(ok("A", json!({"taskId": "T", "outcome": "not_observed", "state": "blocked", "pendingOutcome": {"requestId": "r1"}})))).unwrap();
    assert!(r.settled.is_empty());
    let r = s.observe("v2", "task.verifyOutcome", &t, Ok(ok("A", json!({"taskId": "T", "outcome": "confirmed", "state": "running", "resolved": {"requestId": "r1"}})))).unwrap();
    assert_eq!(r.settled.len(), 1);
    assert!(s.ambiguities("T").is_empty());
}

#[test]
fn task_status_settles_from_the_history() {
    let s = session();
    started(&s, "T", "A");
    let _ = s.observe("r1", "page.press", &press(), lost("r1"));
    let t = json!({"taskId": "T"});
    let none = json!({"taskId": "T", "state": "running", "history": []});
    assert!(s
        .observe("q", "task.status", &t, Ok(ok("A", none)))
        .unwrap()
        .settled
        .is_empty());
    // Still in flight on the host (SPEC §14): listed as running, which settles nothing.
    let running = json!({"taskId": "T", "state": "running",
        "history": [{"requestId": "r1", "method": "page.press", "result": "running"}],
        "inFlight": [{"requestId": "r1", "method": "page.press", "since": "2026-01-01T00:00:00.000Z"}]});
    assert!(s
        .observe("q", "task.status", &t, Ok(ok("A", running)))
        .unwrap()
        .settled
        .is_empty());
    let blocked = json!({"taskId": "T", "state": "blocked", "pendingOutcome": {"requestId": "r1"},
        "history": [{"requestId": "r1", "method": "page.press", "result": "OUTCOME_UNCERTAIN"}]});
    assert!(s
        .observe("q", "task.status", &t, Ok(ok("A", blocked)))
        .unwrap()
        .settled
        .is_empty());
    assert_eq!(s.ambiguities("T")[0].cause, AmbiguityCause::Uncertain);
    let resolved = json!({"taskId": "T", "state": "running",
        "history": [{"requestId": "r1", "method": "page.press", "result": "OUTCOME_UNCERTAIN"},
                    {"requestId": "r1", "method": "task.verifyOutcome", "result": "confirmed"}]});
    assert_eq!(
        s.observe("q", "task.status", &t, Ok(ok("A", resolved)))
            .unwrap()
            .settled
            .len(),
        1
    );
}

#[test]
fn unknown_receipts_settle_only_after_a_broken_connection() {
    let s = session();
    started(&s, "T", "A");
    let q = |id: &str| json!({"requestId": id});
    let unknown = |id: &str| Ok(ok("A", json!({"requestId": id, "state": "unknown"})));
    let _ = s.observe(
        "r1",
        "page.press",
        &press(),
        Err(ClientError::new(
            ErrorCode::BridgeTimeout,
            "r1",
            "slow".into(),
        )),
    );
    assert!(s
        .observe("q", "receipt.status", &q("r1"), unknown("r1"))
        .unwrap()
        .settled
        .is_empty());
    let _ = s.observe("r1", "page.press", &press(), lost("r1"));
    let r = s
        .observe("q", "receipt.status", &q("r1"), unknown("r1"))
        .unwrap();
    assert_eq!(r.settled[0].how, "never_arrived");
}

#[test]
fn a_new_run_is_reported_and_ends_the_gate() {
    let s = session();
    started(&s, "T", "A");
    let _ = s.observe("r1", "page.press", &press(), lost("r1"));
    let r = s
        .observe(
            "q",
            "receipt.status",
            &json!({"requestId": "r1"}),
            Ok(ok("B", json!({"requestId": "r1", "state": "unknown"}))),
        )
        .unwrap();
    let change = r.run_change.unwrap();
    assert_eq!(
        (
            change.previous_run_id.as_str(),
            change.current_run_id.as_str()
        ),
        ("A", "B")
    );
    assert_eq!(change.task_id.as_deref(), Some("T"));
    assert!(change.message().contains("restarted"));
    assert_eq!(r.settled[0].how, "run_ended");
}

#[test]
fn still_running_never_downgrades_an_uncertain_end() {
    let s = session();
    s.mark_unsettled("r1", "page.press", "T", AmbiguityCause::Uncertain);
    s.mark_unsettled("r1", "page.press", "T", AmbiguityCause::StillRunning);
    assert_eq!(s.ambiguities("T")[0].cause, AmbiguityCause::Uncertain);
    assert_eq!(s.ambiguities("T").len(), 1);
}
