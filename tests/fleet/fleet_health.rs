//! A fleet that holds when its database or one of its hosts is sick (SPEC §13), through real
//! `polaris serve --ledger` processes on a private PostgreSQL:
//!
//! - a hung PostgreSQL (every process `SIGSTOP`ped: connections open, nothing answered) does
//!   not hang a host: a new action answers `LEDGER_UNAVAILABLE` (`not_executed`); the claim that
//!   was left in the frozen server is taken back once it wakes, and the ID then runs once;
//! - PostgreSQL stopped for longer than the lease: when it is back, the hosts that were only
//!   waiting for it keep their runs and serve; a host that was itself frozen the whole time is
//!   declared dead, its running receipt answers `INTERRUPTED`, and once it wakes it stops with
//!   a message saying why — nothing runs twice;
//! - each host reports its running receipts and blocked tasks, and every host shows them;
//! - the `hosts` rows of runs that ended long ago are pruned, never while a receipt of theirs
//!   is still running, and receipts keep naming their host.
//!
//! Without PostgreSQL installed these tests print one line and pass, unless
//! `POLARIS_REQUIRE_POSTGRES=1` (as CI sets), when they fail.

use polaris_testkit::fleet;
use polaris_testkit::host::{err, ok, receipt, saved, start_task};

use std::time::Duration;

use fleet::{eventually, Fleet, PATIENCE};
use polaris::ledger::{Claim, Claimed, Completed, Ledger, LedgerConfig, HOSTS_KEPT};
use rustix::process::Signal;
use serde_json::{json, Value};

/// A submit whose effect is observed at once.
fn submit(task: &str) -> Value {
    json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()})
}

/// A submit that applies at once but whose expectation never shows: it runs until the action
/// deadline and ends `OUTCOME_UNCERTAIN`, blocking its task.
fn uncertain_submit(task: &str) -> Value {
    json!({"taskId": task, "key": "Enter", "target": "#title",
           "expect": {"target": "#status", "contains": "never shown"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_database_refuses_new_actions_and_never_runs_the_stuck_claim_late() {
    // A claim may take a third of the lease (2 s) before the host gives up on it.
    let Some(fleet) = Fleet::start(
        "tests/fleet/fleet_health.rs",
        &["alpha"],
        &["--lease-ms", "6000", "--action-timeout-ms", "1000"],
    ) else {
        return;
    };
    let alpha = &fleet.hosts[0];
    let mut c = alpha.conn().await;
    let task = start_task(&mut c, json!({})).await;

    fleet.pg.freeze().expect("PostgreSQL freezes");
    let id = "press-while-hung";
    let sent = std::time::Instant::now();
    let reply = tokio::time::timeout(PATIENCE, c.call_id(id, "page.press", submit(&task)))
        .await
        .unwrap_or_else(|_| panic!("the host hung with its database: {}", alpha.log()));
    eprintln!(
        "measured: a claim on a frozen PostgreSQL answered LEDGER_UNAVAILABLE after {} ms \
         (lease 6000 ms: a third of it is the bound)",
        sent.elapsed().as_millis()
    );
    let e = err(&reply, "LEDGER_UNAVAILABLE");
    assert_eq!(e["delivery"], "not_executed", "{reply}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("did not answer within"),
        "the claim itself timed out: {reply}"
    );
    // The host still answers what needs no database.
    let hello = tokio::time::timeout(PATIENCE, c.call("host.hello", json!({})))
        .await
        .expect("host.hello answers while the database hangs");
    ok(&hello);
    assert!(alpha.effects().is_empty(), "nothing ran while hung");

    fleet.pg.thaw();
    // The claim the frozen server held commits when it wakes, and is taken back: the ledger
    // ends up without the ID (a re-send is refused until then, never run).
    let mut tries = 0;
    let replay = eventually("the late claim is taken back and the ID runs", || {
        tries += 1;
        let host = &fleet.hosts[0];
        let task = task.clone();
        async move {
            let mut c = host.conn().await;
            let r = tokio::time::timeout(PATIENCE, c.call_id(id, "page.press", submit(&task)))
                .await
                .expect("a re-send is answered, never held by a claim left behind");
            if r["ok"] == true {
                return Some(r);
            }
            let e = err(&r, "LEDGER_UNAVAILABLE");
            assert_eq!(e["delivery"], "not_executed", "{r}");
            None
        }
    })
    .await;
    assert_eq!(receipt(&replay), "new", "{replay}");
    assert_eq!(
        fleet.hosts[0].effects().get(id),
        Some(&1),
        "one effect, after the database was back ({tries} tries)"
    );
    // And it stays once: a copy now replays.
    let again = c.call_id(id, "page.press", submit(&task)).await;
    assert_eq!(receipt(&again), "replayed", "{again}");
    assert_eq!(fleet.hosts[0].effects().get(id), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_longer_than_the_lease_live_hosts_keep_running_and_a_frozen_one_stops() {
    // Lease 3 s (renewed every second), actions 0.5 s.
    let Some(mut fleet) = Fleet::start(
        "tests/fleet/fleet_health.rs",
        &["alpha", "bravo", "charlie"],
        &["--lease-ms", "3000", "--action-timeout-ms", "500"],
    ) else {
        return;
    };
    let charlie_run = fleet.host("charlie").run_id.clone();
    let mut ch = fleet.host("charlie").conn().await;
    let task = start_task(&mut ch, json!({})).await;
    // Charlie applies a submit and is frozen (SIGSTOP) while the action still runs: its
    // receipt stays `running` in the ledger.
    let id = "press-on-frozen-host";
    ch.send(id, "page.press", uncertain_submit(&task)).await;
    eventually("charlie applies the submit", || {
        let applied = fleet.host("charlie").effects().get(id) == Some(&1);
        async move { applied.then_some(()) }
    })
    .await;
    fleet.host("charlie").signal(Signal::STOP);

    // PostgreSQL goes away for two leases: every lease lapses in the database's clock.
    fleet.pg.stop().expect("PostgreSQL stops");
    tokio::time::sleep(Duration::from_millis(6000)).await;
    fleet.pg.start_again().expect("PostgreSQL starts again");
    let back = std::time::Instant::now();

    // Charlie never renews: after the grace, the others declare it dead and its running
    // receipt INTERRUPTED.
    let interrupted = eventually("charlie's running receipt is interrupted", || {
        let bravo = fleet.host("bravo");
        async move {
            let mut b = bravo.conn().await;
            let s = ok(&b.call("receipt.status", json!({"requestId": id})).await).clone();
            (s["state"] == "completed").then_some(s)
        }
    })
    .await;
    eprintln!(
        "measured: the frozen host's receipt was INTERRUPTED {} ms after PostgreSQL was back \
         (lease 3000 ms: the reapers first wait one lease of regular contact)",
        back.elapsed().as_millis()
    );
    let error = &interrupted["reply"]["error"];
    assert_eq!(error["code"], "INTERRUPTED", "{interrupted}");
    assert_eq!(error["delivery"], "uncertain", "{interrupted}");
    assert_eq!(error["details"]["runId"], charlie_run.as_str());

    // Alpha and bravo, which only waited for the database, were not reaped: they are still
    // up, alive in the ledger, and execute new requests.
    for name in ["alpha", "bravo"] {
        let host = fleet.host_mut(name);
        assert!(
            host.running(),
            "{name} stopped after the outage: {}",
            host.log()
        );
        let host = fleet.host(name);
        let charlie_run = charlie_run.as_str();
        let hosts = eventually("the fleet shows charlie dead", || async move {
            let hosts = host.fleet_hosts().await;
            let charlie = hosts.iter().find(|h| h["runId"] == charlie_run)?;
            (charlie["state"] == "dead").then_some(hosts)
        })
        .await;
        let own = hosts
            .iter()
            .find(|h| h["runId"] == host.run_id.as_str())
            .expect("its own run is listed");
        assert_eq!(own["state"], "alive", "{name}: {hosts:?}");
        let t = eventually("a new task once the lease is renewed", || async move {
            let mut c = host.conn().await;
            let r = c
                .call("task.start", json!({"title": "after", "fixture": {}}))
                .await;
            (r["ok"] == true).then(|| ok(&r)["taskId"].as_str().unwrap().to_owned())
        })
        .await;
        let mut c = host.conn().await;
        let r = c
            .call_id(&format!("after-outage-{name}"), "page.press", submit(&t))
            .await;
        assert_eq!(receipt(&r), "new", "{name}: {r}");
    }

    // Charlie wakes up on a lost lease: it stops, non-zero, saying why.
    fleet.host("charlie").signal(Signal::CONT);
    let status = fleet.host_mut("charlie").wait_exit();
    assert!(!status.success(), "a reaped host exits non-zero");
    let log = fleet.host("charlie").log();
    assert!(
        log.contains("marked this host run") && log.contains("dead") && log.contains("Restart"),
        "charlie says why it stopped: {log}"
    );

    // Nothing ran twice; the ID re-sent elsewhere runs nothing: the receipt rules come before
    // the task's host, so it is answered from the ledger's row.
    let mut b = fleet.host("bravo").conn().await;
    let r = b.call_id(id, "page.press", uncertain_submit(&task)).await;
    let e = err(&r, "INTERRUPTED");
    assert_eq!(e["details"]["runId"], charlie_run.as_str(), "{r}");
    assert_eq!(receipt(&r), "replayed", "{r}");
    let effects = fleet.effects();
    assert_eq!(effects.get(id), Some(&vec!["charlie"]), "{effects:?}");
    for (id, hosts) in &effects {
        assert_eq!(hosts.len(), 1, "{id} applied on {hosts:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_host_shows_each_hosts_running_receipts_and_blocked_tasks() {
    // Renewed every 2.5 s; an uncertain action runs its whole 3 s deadline.
    let Some(fleet) = Fleet::start(
        "tests/fleet/fleet_health.rs",
        &["alpha", "bravo"],
        &["--lease-ms", "7500", "--action-timeout-ms", "3000"],
    ) else {
        return;
    };
    let alpha_run = fleet.host("alpha").run_id.clone();
    let bravo_run = fleet.host("bravo").run_id.clone();
    let mut a = fleet.host("alpha").conn().await;
    let task = start_task(&mut a, json!({})).await;
    a.send("uncertain-1", "page.press", uncertain_submit(&task))
        .await;

    let row = |hosts: &[Value], run: &str| -> Value {
        hosts
            .iter()
            .find(|h| h["runId"] == run)
            .cloned()
            .unwrap_or_else(|| panic!("run {run} is listed: {hosts:?}"))
    };
    // While the action runs, alpha reports it running; both hosts show it.
    for viewer in ["alpha", "bravo"] {
        let host = fleet.host(viewer);
        let alpha_run = alpha_run.clone();
        eventually("alpha's running receipt is shown", || {
            let alpha_run = alpha_run.clone();
            async move {
                let hosts = host.fleet_hosts().await;
                (row(&hosts, &alpha_run)["running"] == 1).then_some(())
            }
        })
        .await;
    }
    // Once it ends uncertain, alpha's task is blocked: alpha reports 1 blocked, 0 running,
    // and bravo its own zeros — on both hosts.
    assert_eq!(receipt(&a.wait("uncertain-1").await), "new");
    for viewer in ["alpha", "bravo"] {
        let host = fleet.host(viewer);
        let (alpha_run, bravo_run) = (alpha_run.clone(), bravo_run.clone());
        eventually("alpha's blocked task is shown", || {
            let (alpha_run, bravo_run) = (alpha_run.clone(), bravo_run.clone());
            async move {
                let hosts = host.fleet_hosts().await;
                let alpha = row(&hosts, &alpha_run);
                let bravo = row(&hosts, &bravo_run);
                assert_eq!(bravo["blocked"], 0, "{hosts:?}");
                (alpha["blocked"] == 1 && alpha["running"] == 0 && bravo["running"] == 0)
                    .then_some(())
            }
        })
        .await;
    }
}

/// A ledger opened through the library, for what the binary cannot show quickly.
async fn open(pg: &polaris_testkit::postgres::PrivatePostgres, host: &str) -> Ledger {
    Ledger::open(config(pg, host))
        .await
        .expect("the ledger opens")
}

/// The library's configuration of host `host` on `pg`.
fn config(pg: &polaris_testkit::postgres::PrivatePostgres, host: &str) -> LedgerConfig {
    LedgerConfig {
        conninfo: pg.conninfo(),
        host_id: host.to_owned(),
        run_id: format!("run-{host}"),
        password: None,
        take_over: false,
        socket: format!("/tmp/{host}.sock"),
        // Long: no reaping pass (every 20 s) runs during the test.
        lease: Duration::from_secs(60),
        connections: 2,
        capacity: 100,
        tombstone_capacity: 100,
        interrupted_reply: polaris::host::interrupted_reply(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_runs_are_pruned_after_a_while_but_never_with_running_receipts() {
    let Some(pg) = polaris_testkit::postgres::require_or_skip("tests/fleet/fleet_health.rs") else {
        return;
    };
    let alive = open(&pg, "alive").await;
    let gone = open(&pg, "gone").await;
    // The run that leaves opened a task: receipts keep naming its host after its row goes.
    let claim = Claim {
        request_id: "start-on-gone".to_owned(),
        request: "{\"method\":\"task.start\"}".to_owned(),
        method: "task.start",
        task_id: None,
        at: 1,
    };
    assert!(matches!(gone.claim(claim).await, Ok(Claimed::New)));
    assert!(matches!(
        gone.complete("start-on-gone", "{\"ok\":true}", Some("task-on-gone"), 2)
            .await,
        Ok(Completed::Stored)
    ));
    gone.leave().await.expect("leaves");

    // A run that ended long ago with a receipt still running (its reaping has not happened
    // yet), and one that ended long ago with nothing running.
    let (db, conn) = tokio_postgres::connect(&pg.conninfo(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let old_epoch = |host: &'static str| {
        let db = &db;
        async move {
            db.query_one(
                "INSERT INTO hosts (host_id, run_id, socket, lease_until, state, ended_at)
                 VALUES ($1, 'old-' || $1, '', now() - interval '3 days', 'dead',
                         now() - interval '2 days')
                 RETURNING epoch",
                &[&host],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    let busy = old_epoch("busy").await;
    let idle = old_epoch("idle").await;
    db.execute(
        "INSERT INTO receipts (request_id, request, method, host_id, epoch, run_id, state,
                               first_seen)
         VALUES ('still-running', '{}', 'page.click', 'busy', $1, 'old-busy', 'running', 1)",
        &[&busy],
    )
    .await
    .unwrap();
    let epochs = || async {
        let mut e: Vec<i64> = db
            .query("SELECT epoch FROM hosts ORDER BY epoch", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        e.sort();
        e
    };

    // With the default (a day), the run that just left stays, the idle old one goes, and the
    // old one with a running receipt stays.
    assert_eq!(alive.prune_hosts(HOSTS_KEPT).await.unwrap(), 1);
    let kept = epochs().await;
    assert!(!kept.contains(&idle), "{kept:?}");
    assert!(kept.contains(&busy), "a run with a running receipt is kept");
    assert!(kept.contains(&gone.epoch()), "a run that just left is kept");
    assert!(kept.contains(&alive.epoch()));

    // Asked to keep nothing, only the alive run and the one with a running receipt remain.
    assert_eq!(alive.prune_hosts(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(epochs().await, {
        let mut e = vec![alive.epoch(), busy];
        e.sort();
        e
    });
    // The receipt still names the host that opened the task.
    assert_eq!(
        alive.task_host("task-on-gone").await.unwrap().as_deref(),
        Some("gone")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_on_the_server_ends_a_claim_there_too_instead_of_queueing_it_forever() {
    let Some(pg) = polaris_testkit::postgres::require_or_skip("tests/fleet/fleet_health.rs") else {
        return;
    };
    // Lease 1.5 s: a call may take 0.5 s, on the host's side and on the server's.
    let ledger = Ledger::open(LedgerConfig {
        lease: Duration::from_millis(1500),
        ..config(&pg, "locked")
    })
    .await
    .expect("the ledger opens");
    let claim = |id: &str| Claim {
        request_id: id.to_owned(),
        request: "{\"method\":\"page.click\"}".to_owned(),
        method: "page.click",
        task_id: Some("t".to_owned()),
        at: 1,
    };
    // Another session holds the fleet's capacity row (as a host frozen half-way through
    // reaping would): every claim needs it.
    let (mut db, conn) = tokio_postgres::connect(&pg.conninfo(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let holder = db.transaction().await.unwrap();
    holder
        .execute("SELECT 1 FROM fleet_usage WHERE id = 1 FOR UPDATE", &[])
        .await
        .unwrap();

    match ledger.claim(claim("x")).await {
        Err(polaris::ledger::LedgerError::Unavailable(why)) => {
            assert!(why.contains("did not answer within"), "{why}")
        }
        other => panic!("a claim behind a held lock is unavailable: {other:?}"),
    }
    // The claim left on the server ends there (lock_timeout), so the ID is let through again
    // while the lock is still held — it is refused as unavailable, no longer as "still being
    // taken back". Without a server-side bound it would wait for the lock for good.
    eventually("the server ends the stuck claim", || {
        let ledger = ledger.clone();
        async move {
            match ledger.claim(claim("x")).await {
                Err(polaris::ledger::LedgerError::Unavailable(why)) => {
                    (!why.contains("still being taken back")).then_some(())
                }
                other => panic!("the lock is still held: {other:?}"),
            }
        }
    })
    .await;
    holder.rollback().await.unwrap();
    // Once the lock is released the ID is claimed, once.
    eventually("the claim succeeds once the lock is free", || {
        let ledger = ledger.clone();
        async move { matches!(ledger.claim(claim("x")).await, Ok(Claimed::New)).then_some(()) }
    })
    .await;
    let rows: i64 = db
        .query_one("SELECT count(*) FROM receipts WHERE request_id = 'x'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}
