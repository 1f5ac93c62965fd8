//! Uncertain outcomes through a real host: blocked tasks, read-only verification, stop and
//! resume, counted by `#submissions` and `executor.mutations`.

use polaris_testkit::host::*;

use std::time::Duration;

use serde_json::{json, Value};

/// Hosts here use a short action deadline so late submits are quick to provoke.
const DEADLINE: &str = "300";

fn press(task: &str) -> Value {
    json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()})
}

#[tokio::test]
async fn the_seed_scenario_a_late_enter_blocks_until_verified() {
    let host = TestHost::start(&["--action-timeout-ms", DEADLINE]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"submitDelayMs": 700})).await;
    ok(&c
        .call(
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "Hello"}),
        )
        .await);

    let rid = new_id();
    let uncertain = c.call_id(&rid, "page.press", press(&task)).await;
    let e = err(&uncertain, "OUTCOME_UNCERTAIN");
    assert_eq!(e["delivery"], "uncertain");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("task.verifyOutcome"),
        "{e}"
    );
    assert_eq!(
        e["details"]["next"],
        json!({"method": "task.verifyOutcome", "params": {"taskId": task}})
    );

    // Mutations are refused without touching the executor; nothing is stored for them.
    let fill_id = new_id();
    let fill = json!({"taskId": task, "target": "#title", "value": "changed"});
    let blocked = c.call_id(&fill_id, "page.fill", fill.clone()).await;
    let b = err(&blocked, "TASK_BLOCKED");
    assert_eq!(b["delivery"], "not_executed");
    assert_eq!(b["details"]["pendingOutcome"]["requestId"], rid.as_str());
    assert_eq!(receipt(&blocked), "none");
    err(
        &c.call("task.finish", json!({"taskId": task})).await,
        "TASK_BLOCKED",
    );
    err(
        &c.call(
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": saved()}),
        )
        .await,
        "TASK_BLOCKED",
    );

    // Reads work.
    let title = c
        .call("page.read", json!({"taskId": task, "target": "#title"}))
        .await;
    assert_eq!(ok(&title)["value"], "Hello");
    let st = c.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&st)["state"], "blocked");
    let pending = &ok(&st)["pendingOutcome"];
    assert_eq!(pending["requestId"], rid.as_str());
    assert_eq!(pending["method"], "page.press");
    assert_eq!(pending["expect"], saved());
    assert_eq!(pending["params"], press(&task));
    assert!(pending["since"].as_str().unwrap().ends_with('Z'));

    // The same request ID replays the uncertain reply; it is not re-executed.
    let again = c.call_id(&rid, "page.press", press(&task)).await;
    assert_eq!(receipt(&again), "replayed");
    assert_eq!(again["error"], uncertain["error"]);
    assert_eq!(mutations(&mut c).await, 0, "the submit has not landed yet");

    // The late submit lands; verification confirms the original expectation.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(mutations(&mut c).await, 1);
    let v = c.call("task.verifyOutcome", json!({"taskId": task})).await;
    let v = ok(&v);
    assert_eq!(v["outcome"], "confirmed");
    assert_eq!(v["state"], "running");
    assert_eq!(
        v["observation"],
        json!({"target": "#status", "value": "Saved #1"})
    );
    assert_eq!(mutations(&mut c).await, 1, "verification never mutates");

    // The refused fill can now be sent again under the same ID: it was never stored.
    let fill_now = c.call_id(&fill_id, "page.fill", fill).await;
    assert_eq!(receipt(&fill_now), "new");
    ok(&fill_now);
    assert_eq!(submissions(&mut c, &task).await, 1);
    let finished = c.call("task.finish", json!({"taskId": task})).await;
    assert_eq!(ok(&finished)["state"], "finished");
    assert_eq!(mutations(&mut c).await, 1);

    let st = c.call("task.status", json!({"taskId": task})).await;
    let history: Vec<(String, String)> = ok(&st)["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["method"].as_str().unwrap().to_owned(),
                h["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("task.start", "ok"),
        ("page.fill", "ok"),
        ("page.press", "OUTCOME_UNCERTAIN"),
        ("page.fill", "TASK_BLOCKED"),
        ("task.finish", "TASK_BLOCKED"),
        ("page.click", "TASK_BLOCKED"),
        ("task.verifyOutcome", "confirmed"),
        ("page.fill", "ok"),
        ("task.finish", "ok"),
    ]
    .iter()
    .map(|(m, r)| (m.to_string(), r.to_string()))
    .collect();
    assert_eq!(history, expected);
}

#[tokio::test]
async fn a_dropped_submit_stays_blocked_and_stopping_keeps_the_pending_outcome() {
    let host = TestHost::start(&["--action-timeout-ms", DEADLINE]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"dropSubmit": true})).await;
    let rid = new_id();
    err(
        &c.call_id(&rid, "page.press", press(&task)).await,
        "OUTCOME_UNCERTAIN",
    );
    let v = c.call("task.verifyOutcome", json!({"taskId": task})).await;
    assert_eq!(ok(&v)["outcome"], "not_observed");
    assert_eq!(ok(&v)["state"], "blocked");
    assert_eq!(ok(&v)["observation"]["value"], "Draft");
    assert_eq!(
        ok(&v)["pendingOutcome"]["lastVerify"]["outcome"],
        "not_observed"
    );

    let stopped = c
        .call(
            "task.stop",
            json!({"taskId": task, "reason": "could not confirm the save"}),
        )
        .await;
    assert_eq!(ok(&stopped)["state"], "stopped");
    for (m, p) in [
        (
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "x"}),
        ),
        ("page.press", press(&task)),
        ("task.finish", json!({"taskId": task})),
        ("task.stop", json!({"taskId": task, "reason": "again"})),
    ] {
        assert_eq!(
            err(&c.call(m, p).await, "TASK_CLOSED")["delivery"],
            "not_executed"
        );
    }
    let st = c.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&st)["state"], "stopped");
    assert_eq!(ok(&st)["pendingOutcome"]["requestId"], rid.as_str());
    assert_eq!(ok(&st)["stopReason"], "could not confirm the save");
    assert_eq!(mutations(&mut c).await, 0);
    // Reads still pass on a stopped task.
    assert_eq!(
        ok(&c
            .call("page.read", json!({"taskId": task, "target": "#status"}))
            .await)["value"],
        "Draft"
    );
}

#[tokio::test]
async fn a_read_slower_than_the_deadline_makes_verification_unknown() {
    let host = TestHost::start(&["--action-timeout-ms", DEADLINE]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"readDelayMs": 500})).await;
    err(
        &c.call(
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": saved()}),
        )
        .await,
        "OUTCOME_UNCERTAIN",
    );
    assert_eq!(
        mutations(&mut c).await,
        1,
        "the submit applied; only its observation was too slow"
    );
    let v = c.call("task.verifyOutcome", json!({"taskId": task})).await;
    assert_eq!(ok(&v)["outcome"], "unknown");
    assert_eq!(ok(&v)["state"], "blocked");
    assert!(ok(&v).get("observation").is_none());
    let r = c
        .call("page.read", json!({"taskId": task, "target": "#status"}))
        .await;
    assert_eq!(err(&r, "READ_TIMEOUT")["delivery"], "not_executed");
    err(
        &c.call(
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "x"}),
        )
        .await,
        "TASK_BLOCKED",
    );
    assert_eq!(mutations(&mut c).await, 1);
}

#[tokio::test]
async fn a_failed_submit_is_a_stored_failure_and_the_task_keeps_running() {
    let host = TestHost::start(&["--action-timeout-ms", DEADLINE]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"failSubmit": true})).await;
    let rid = new_id();
    c.send(&rid, "page.press", press(&task)).await;
    let (first, first_line) = c.wait_raw(&rid).await;
    assert_eq!(err(&first, "ACTION_FAILED")["delivery"], "failed");
    c.send(&rid, "page.press", press(&task)).await;
    let (again, again_line) = c.wait_raw(&rid).await;
    assert_eq!(receipt(&again), "replayed");
    let cut = |l: &str| l[..l.find(",\"meta\"").unwrap()].to_owned();
    assert_eq!(cut(&first_line), cut(&again_line));
    assert_eq!(
        ok(&c.call("task.status", json!({"taskId": task})).await)["state"],
        "running"
    );
    assert_eq!(
        ok(&c
            .call("page.read", json!({"taskId": task, "target": "#status"}))
            .await)["value"],
        "Error: submit rejected"
    );
    assert_eq!(mutations(&mut c).await, 0);
    let v = c.call("task.verifyOutcome", json!({"taskId": task})).await;
    assert_eq!(ok(&v)["outcome"], "none");
}

#[tokio::test]
async fn concurrent_verifications_share_one_read() {
    let host = TestHost::start(&["--action-timeout-ms", "600"]);
    let mut a = host.conn().await;
    let mut b = host.conn().await;
    // Reads take 300 ms: the click's observation fits in the deadline only after a late submit.
    let task = start_task(&mut a, json!({"dropSubmit": true, "readDelayMs": 300})).await;
    err(
        &a.call(
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": saved()}),
        )
        .await,
        "OUTCOME_UNCERTAIN",
    );
    let (ia, ib) = (new_id(), new_id());
    a.send(&ia, "task.verifyOutcome", json!({"taskId": task}))
        .await;
    b.send(&ib, "task.verifyOutcome", json!({"taskId": task}))
        .await;
    let (ra, rb) = (a.wait(&ia).await, b.wait(&ib).await);
    assert_eq!(ok(&ra), ok(&rb));
    assert_eq!(ok(&ra)["outcome"], "not_observed");
    let st = a.call("task.status", json!({"taskId": task})).await;
    let verifications = ok(&st)["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["method"] == "task.verifyOutcome")
        .count();
    assert_eq!(verifications, 1, "the second verification shared the first");
}

#[tokio::test]
async fn resume_checks_the_kept_run_and_task() {
    let host = TestHost::start(&["--action-timeout-ms", DEADLINE]);
    let mut c = host.conn().await;
    let started = c
        .call(
            "task.start",
            json!({"title": "kept", "fixture": {"dropSubmit": true}}),
        )
        .await;
    let task = ok(&started)["taskId"].as_str().unwrap().to_owned();
    let run = ok(&started)["runId"].as_str().unwrap().to_owned();
    assert_eq!(run, host.run_id);

    let r = c
        .call("task.resume", json!({"taskId": task, "runId": run}))
        .await;
    assert_eq!(ok(&r)["state"], "running");
    let stale = c
        .call(
            "task.resume",
            json!({"taskId": task, "runId": "an-earlier-run"}),
        )
        .await;
    assert_eq!(
        err(&stale, "RUN_NOT_CURRENT")["details"]["currentRunId"],
        run.as_str()
    );
    err(
        &c.call("task.resume", json!({"taskId": "nope", "runId": run}))
            .await,
        "TASK_NOT_FOUND",
    );

    err(
        &c.call("page.press", press(&task)).await,
        "OUTCOME_UNCERTAIN",
    );
    let r = c
        .call("task.resume", json!({"taskId": task, "runId": run}))
        .await;
    assert_eq!(
        ok(&r)["state"],
        "blocked",
        "reconnecting does not clear an uncertain outcome"
    );
    assert!(ok(&r)["pendingOutcome"].is_object());

    let status = c
        .call("run.status", json!({"runId": "an-earlier-run"}))
        .await;
    assert_eq!(ok(&status)["current"], false);
    assert_eq!(ok(&status)["runId"], run.as_str());
    assert_eq!(ok(&status)["tasks"]["blocked"], 1);
}

/// The fault a task's fixture injects.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    Late,
    Drop,
    Fail,
    SlowRead,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_tasks_with_random_faults_never_mutate_past_a_block() {
    use rand_like::Lcg;
    let host = TestHost::start(&["--action-timeout-ms", DEADLINE]);
    let faults = [
        Fault::None,
        Fault::Late,
        Fault::Drop,
        Fault::Fail,
        Fault::SlowRead,
    ];
    let mut rng = Lcg(0x9e3779b97f4a7c15);
    let plan: Vec<(Fault, u64)> = (0..200)
        .map(|_| {
            (
                faults[rng.next() as usize % faults.len()],
                350 + rng.next() % 300,
            )
        })
        .collect();

    let mut workers = Vec::new();
    for chunk in plan.chunks(20) {
        let chunk = chunk.to_vec();
        let mut c = host.conn().await;
        workers.push(tokio::spawn(async move {
            let mut applied_expected = 0u64;
            let mut tasks = Vec::new();
            for (fault, delay) in chunk {
                let fixture = match fault {
                    Fault::None => json!({}),
                    Fault::Late => json!({"submitDelayMs": delay}),
                    Fault::Drop => json!({"dropSubmit": true}),
                    Fault::Fail => json!({"failSubmit": true}),
                    Fault::SlowRead => json!({"readDelayMs": 400}),
                };
                let task = start_task(&mut c, fixture).await;
                ok(&c
                    .call(
                        "page.fill",
                        json!({"taskId": task, "target": "#title", "value": "v"}),
                    )
                    .await);
                let first = c.call("page.press", press(&task)).await;
                let code = first["error"]["code"].as_str().map(str::to_owned);
                match fault {
                    Fault::None => assert!(first["ok"] == true, "{first}"),
                    Fault::Fail => assert_eq!(code.as_deref(), Some("ACTION_FAILED")),
                    _ => assert_eq!(
                        code.as_deref(),
                        Some("OUTCOME_UNCERTAIN"),
                        "{fault:?}: {first}"
                    ),
                }
                if matches!(fault, Fault::None | Fault::Late | Fault::SlowRead) {
                    applied_expected += 1;
                }
                // While blocked, every further mutation is refused.
                if code.as_deref() == Some("OUTCOME_UNCERTAIN") {
                    for _ in 0..3 {
                        err(&c.call("page.press", press(&task)).await, "TASK_BLOCKED");
                        err(
                            &c.call(
                                "page.fill",
                                json!({"taskId": task, "target": "#title", "value": "w"}),
                            )
                            .await,
                            "TASK_BLOCKED",
                        );
                    }
                }
                tasks.push((task, fault));
            }
            (c, tasks, applied_expected)
        }));
    }
    let mut all = Vec::new();
    let mut expected = 0;
    for w in workers {
        let (c, tasks, n) = w.await.unwrap();
        expected += n;
        all.push((c, tasks));
    }
    // A window for any submit past a block to show (there must be none); each late submit is
    // waited for by its task below.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut total = 0;
    for (c, tasks) in &mut all {
        for (task, fault) in tasks.iter() {
            if *fault == Fault::SlowRead {
                // Its page cannot be read within the deadline; the run's count covers it.
                total += 1;
            } else {
                if *fault == Fault::Late {
                    // It lands on a timer in the host, which a loaded machine fires late.
                    polaris_testkit::poll_until(
                        &format!("the late submit of task {task}"),
                        Duration::from_secs(10),
                        || async {
                            let n = submissions(&mut host.conn().await, task).await;
                            (n >= 1).then_some(())
                        },
                    )
                    .await;
                }
                let n = submissions(c, task).await;
                assert!(n <= 1, "task {task} ({fault:?}) applied {n} submits");
                total += n;
            }
            let v = c.call("task.verifyOutcome", json!({"taskId": task})).await;
            let outcome = ok(&v)["outcome"].as_str().unwrap().to_owned();
            let want = match fault {
                Fault::None | Fault::Fail => "none",
                Fault::Late => "confirmed",
                Fault::Drop => "not_observed",
                Fault::SlowRead => "unknown",
            };
            assert_eq!(outcome, want, "{fault:?}");
        }
    }
    let (c, _) = &mut all[0];
    assert_eq!(total, expected);
    assert_eq!(
        mutations(c).await,
        expected,
        "every mutation is a submit that actually applied"
    );
}

/// A tiny deterministic generator, so the fault mix is the same on every run.
mod rand_like {
    pub struct Lcg(pub u64);
    impl Lcg {
        pub fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }
}
