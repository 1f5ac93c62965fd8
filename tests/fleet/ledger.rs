//! The fleet ledger against a real, private PostgreSQL (SPEC §13): one claim per request ID
//! across host runs, exact fleet-wide capacity, epochs fencing every change, dead hosts'
//! receipts interrupted (never re-run), a database restart survived without reopening, and the
//! operator's rules in SQL: fleet clears all or none (clearability, replays from the row, every
//! host's census, the tombstone capacity), acknowledging and settling, the ordered feed of
//! changes, and the paged listing of the fleet's book.
//!
//! Each test starts its own server (`initdb` into a temp directory, unix socket only). Without
//! PostgreSQL installed the tests print one line and pass, unless `POLARIS_REQUIRE_POSTGRES=1`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use polaris::ledger::{
    CensusPhase, Claim, Claimed, Cleared, Completed, Ledger, LedgerConfig, LedgerError, RowFilter,
    RowOrder, RowState, RowStateFilter, DEFAULT_LEASE,
};
use polaris_testkit::postgres::{require_or_skip, PrivatePostgres};
use tokio::time::Instant;

/// A host run's configuration on the private server.
fn config(pg: &PrivatePostgres, host: &str, lease: Duration, capacity: usize) -> LedgerConfig {
    LedgerConfig {
        conninfo: pg.conninfo(),
        host_id: host.to_string(),
        run_id: format!("run-{host}-{}", uuid::Uuid::new_v4().simple()),
        password: None,
        take_over: false,
        socket: format!("/tmp/{host}.sock"),
        lease,
        connections: 4,
        capacity,
        tombstone_capacity: 1000,
        interrupted_reply: Arc::new(|i| {
            serde_json::json!({
                "interrupted": i.request_id,
                "method": i.method,
                "task": i.task_id,
                "run": i.run_id,
                "host": i.host_id,
            })
            .to_string()
        }),
    }
}

async fn open(pg: &PrivatePostgres, host: &str, lease: Duration, capacity: usize) -> Ledger {
    Ledger::open(config(pg, host, lease, capacity))
        .await
        .unwrap_or_else(|e| panic!("opening the ledger as {host}: {e}"))
}

fn claim(id: &str) -> Claim {
    Claim {
        request_id: id.to_string(),
        request: format!(r#"{{"method":"page.click","params":{{"id":"{id}"}}}}"#),
        method: "page.click",
        task_id: Some("t-1".to_string()),
        at: 1_700_000_000_000,
    }
}

/// Polls `check` until it holds; a guard against hanging, not a timing assertion.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..1200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never happened: {what}");
}

async fn raw(pg: &PrivatePostgres) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&pg.conninfo(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

#[test]
fn a_private_postgres_starts_stops_and_is_removed() {
    let Some(pg) = require_or_skip("a_private_postgres_starts_stops_and_is_removed") else {
        return;
    };
    let dir = pg.dir().to_path_buf();
    assert!(
        dir.join(".s.PGSQL.5432").exists(),
        "the socket is in the private directory"
    );
    pg.stop().unwrap();
    assert!(!dir.join(".s.PGSQL.5432").exists());
    pg.start_again().unwrap();
    pg.kill().unwrap();
    pg.start_again().unwrap();
    assert!(dir.join(".s.PGSQL.5432").exists());
    drop(pg);
    assert!(!dir.exists(), "dropping the server removes its directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_connection_string_is_a_setup_error_that_names_the_fix() {
    let mut cfg = LedgerConfig {
        conninfo: "host=/tmp port=notaport".to_string(),
        host_id: "h".to_string(),
        run_id: "r".to_string(),
        password: None,
        take_over: false,
        socket: String::new(),
        lease: DEFAULT_LEASE,
        connections: 1,
        capacity: 10,
        tombstone_capacity: 10,
        interrupted_reply: Arc::new(|_| String::new()),
    };
    let Err(LedgerError::Setup(why)) = Ledger::open(cfg.clone()).await else {
        panic!("a malformed connection string must be refused at setup");
    };
    assert!(why.contains("host=/run/postgresql"), "{why}");
    // A server that is not there: unavailable, not a panic.
    cfg.conninfo = "host=/nonexistent/polaris port=5432 user=postgres".to_string();
    assert!(matches!(
        Ledger::open(cfg).await,
        Err(LedgerError::Unavailable(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent_and_hosts_starting_at_once_do_not_race() {
    let Some(pg) = require_or_skip("migrations_are_idempotent") else {
        return;
    };
    let (a, b, c) = tokio::join!(
        Ledger::open(config(&pg, "a", DEFAULT_LEASE, 50)),
        Ledger::open(config(&pg, "b", DEFAULT_LEASE, 60)),
        Ledger::open(config(&pg, "c", DEFAULT_LEASE, 70)),
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    let d = open(&pg, "d", DEFAULT_LEASE, 80).await;
    let mut epochs = vec![a.epoch(), b.epoch(), c.epoch(), d.epoch()];
    assert!(d.epoch() > a.epoch().max(b.epoch()).max(c.epoch()));
    epochs.sort();
    epochs.dedup();
    assert_eq!(epochs.len(), 4, "every host run has its own epoch");
    // The first host to store the capacity wins; the others read it.
    let stored = a.capacity();
    assert!([50, 60, 70].contains(&stored));
    for ledger in [&b, &c, &d] {
        assert_eq!(ledger.capacity(), stored);
    }
    let client = raw(&pg).await;
    let version: i32 = client
        .query_one("SELECT version FROM polaris_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, polaris::ledger::schema::SCHEMA_VERSION);
    let hosts: i64 = client
        .query_one("SELECT count(*) FROM hosts WHERE state = 'alive'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hosts, 4);

    // A schema newer than this binary is refused, with what to do.
    client
        .execute("UPDATE polaris_schema SET version = version + 1", &[])
        .await
        .unwrap();
    let Err(LedgerError::Setup(why)) = Ledger::open(config(&pg, "e", DEFAULT_LEASE, 80)).await
    else {
        panic!("a newer schema must be refused");
    };
    assert!(why.contains("newer") && why.contains("upgrade"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_id_is_claimed_new_exactly_once_across_three_host_runs() {
    let Some(pg) = require_or_skip("each_id_is_claimed_new_exactly_once") else {
        return;
    };
    let ledgers = [
        open(&pg, "a", DEFAULT_LEASE, 100_000).await,
        open(&pg, "b", DEFAULT_LEASE, 100_000).await,
        open(&pg, "c", DEFAULT_LEASE, 100_000).await,
    ];
    let ids: Vec<String> = (0..200).map(|i| format!("shared-{i}")).collect();
    let mut tasks = Vec::new();
    for t in 0..32usize {
        let ledger = ledgers[t % 3].clone();
        let ids = ids.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            // Each task walks the IDs from its own starting point, so copies collide.
            for k in 0..ids.len() {
                let id = &ids[(k * 7 + t * 13) % ids.len()];
                let outcome = ledger.claim(claim(id)).await.unwrap();
                seen.push((id.clone(), ledger.epoch(), outcome));
            }
            seen
        }));
    }
    let mut new_by: HashMap<String, Vec<i64>> = HashMap::new();
    let mut existing: Vec<(String, i64)> = Vec::new();
    for task in tasks {
        for (id, epoch, outcome) in task.await.unwrap() {
            match outcome {
                Claimed::New => new_by.entry(id).or_default().push(epoch),
                Claimed::Existing(row) => {
                    assert_eq!(row.request_id, id);
                    assert_eq!(row.state, RowState::Running);
                    existing.push((id, row.epoch));
                }
                Claimed::Full { .. } => panic!("the book cannot be full"),
            }
        }
    }
    assert_eq!(new_by.len(), ids.len(), "every ID was claimed new once");
    for (id, epochs) in &new_by {
        assert_eq!(
            epochs.len(),
            1,
            "{id} was claimed new {} times",
            epochs.len()
        );
    }
    assert_eq!(existing.len(), 32 * ids.len() - ids.len());
    for (id, epoch) in existing {
        assert_eq!(
            new_by[&id][0], epoch,
            "the row a copy found is the winner's"
        );
    }
    let counts = ledgers[0].counts().await.unwrap();
    assert_eq!(counts.used, ids.len() as u64);
    assert_eq!(counts.running, ids.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_capacity_is_exact_under_concurrent_claims() {
    let Some(pg) = require_or_skip("the_fleet_capacity_is_exact") else {
        return;
    };
    let first = open(&pg, "a", DEFAULT_LEASE, 100).await;
    let ledgers = [
        first,
        open(&pg, "b", DEFAULT_LEASE, 5).await,
        open(&pg, "c", DEFAULT_LEASE, 100_000).await,
    ];
    for ledger in &ledgers {
        assert_eq!(
            ledger.capacity(),
            100,
            "later hosts read the stored capacity"
        );
    }
    let mut tasks = Vec::new();
    for t in 0..30usize {
        let ledger = ledgers[t % 3].clone();
        // Every claim in flight at once, so batches of several hosts race for the last places.
        tasks.push(tokio::spawn(async move {
            let claims = (0..10).map(|k| ledger.claim(claim(&format!("cap-{t}-{k}"))));
            futures::future::join_all(claims)
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
        }));
    }
    let (mut new, mut full) = (0, 0);
    for task in tasks {
        for outcome in task.await.unwrap() {
            match outcome {
                Claimed::New => new += 1,
                Claimed::Full { used, capacity } => {
                    assert_eq!(capacity, 100);
                    assert!(used <= 100);
                    full += 1;
                }
                Claimed::Existing(row) => panic!("distinct IDs, found {row:?}"),
            }
        }
    }
    assert_eq!(new, 100);
    assert_eq!(full, 200);
    let counts = ledgers[1].counts().await.unwrap();
    assert_eq!(counts.used, 100);
    let client = raw(&pg).await;
    let rows: i64 = client
        .query_one("SELECT count(*) FROM receipts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 100, "a full claim inserts nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_is_reaped_by_another_host_and_fences_its_completions() {
    let Some(pg) = require_or_skip("a_lapsed_lease_is_reaped") else {
        return;
    };
    let lease = Duration::from_millis(600);
    let a = open(&pg, "a", lease, 1000).await;
    let b = open(&pg, "b", lease, 1000).await;
    assert!(matches!(a.claim(claim("x")).await.unwrap(), Claimed::New));
    assert!(matches!(a.claim(claim("y")).await.unwrap(), Claimed::New));
    assert!(matches!(
        a.complete("y", r#"{"ok":true}"#, None, 1).await.unwrap(),
        Completed::Stored
    ));
    // Renewals keep the lease alive across several lease periods.
    let before = a.epoch();
    tokio::time::sleep(lease * 3).await;
    assert!(
        b.hosts()
            .await
            .unwrap()
            .iter()
            .any(|h| h.epoch == before && h.state == "alive"),
        "a renewing host stays alive"
    );
    a.pause_renewal();
    eventually("b reaps a", || async {
        b.hosts()
            .await
            .unwrap()
            .iter()
            .any(|h| h.epoch == a.epoch() && h.state == "dead" && h.running == 0)
    })
    .await;
    assert_eq!(
        a.lease_left(),
        Duration::ZERO,
        "the lease ran out locally too"
    );
    let x = b.receipt("x").await.unwrap().unwrap();
    assert_eq!(x.state, RowState::Completed);
    let reply: serde_json::Value = serde_json::from_str(x.reply.as_deref().unwrap()).unwrap();
    assert_eq!(reply["interrupted"], "x");
    assert_eq!(reply["host"], "a");
    assert_eq!(reply["run"], x.run_id.as_str());
    assert_eq!(reply["task"], "t-1");
    // The dead run can change nothing any more.
    match a.complete("x", r#"{"ok":"late"}"#, None, 2).await.unwrap() {
        Completed::Fenced(row) => assert_eq!(row.reply, x.reply),
        Completed::Stored => panic!("a reaped receipt must not take a late reply"),
    }
    assert!(matches!(
        a.claim(claim("z")).await,
        Err(LedgerError::Fenced(_))
    ));
    assert!(b.receipt("z").await.unwrap().is_none());
    // The completed receipt kept its reply.
    let y = b.receipt("y").await.unwrap().unwrap();
    assert_eq!(y.reply.as_deref(), Some(r#"{"ok":true}"#));
    // A copy of x on the live host now finds the interrupted row: nothing is re-run.
    match b.claim(claim("x")).await.unwrap() {
        Claimed::Existing(row) => assert_eq!(row.reply, x.reply),
        other => panic!("expected the interrupted row, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_run_of_the_same_host_supersedes_the_older_one_at_once() {
    let Some(pg) = require_or_skip("a_newer_run_supersedes") else {
        return;
    };
    let old = open(&pg, "same", Duration::from_millis(300), 1000).await;
    let mut lost = old.lost();
    assert!(lost.borrow().is_none());
    assert!(matches!(old.claim(claim("x")).await.unwrap(), Claimed::New));
    // A second run under a name a live run holds is refused, naming the holder and the way
    // out; nothing of the live run changes.
    let Err(LedgerError::Setup(why)) =
        Ledger::open(config(&pg, "same", Duration::from_millis(300), 1000)).await
    else {
        panic!("a second live run under the same host ID was let in");
    };
    assert!(
        why.contains(&format!("pid {}", std::process::id())),
        "{why}"
    );
    assert!(
        why.contains("--host-id") && why.contains("--take-over-host-id"),
        "{why}"
    );
    assert!(lost.borrow().is_none());
    // Told to take the name over, it does so at once.
    let mut take_over = config(&pg, "same", Duration::from_millis(300), 1000);
    take_over.take_over = true;
    let new = Ledger::open(take_over).await.unwrap();
    // Registration interrupted the older run's receipt before returning.
    let x = new.receipt("x").await.unwrap().unwrap();
    assert_eq!(x.state, RowState::Completed);
    assert!(x.reply.unwrap().contains("interrupted"));
    tokio::time::timeout(Duration::from_secs(60), lost.wait_for(Option::is_some))
        .await
        .expect("the older run learns it lost its lease")
        .unwrap();
    let why = lost.borrow().clone().unwrap();
    assert!(why.contains("Restart the host"), "{why}");
    assert_eq!(old.lease_left(), Duration::ZERO);
    assert!(new.lease_left() > Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdraw_deletes_only_this_runs_running_row_and_gives_its_place_back() {
    let Some(pg) = require_or_skip("withdraw_deletes_only_this_runs_running_row") else {
        return;
    };
    let a = open(&pg, "a", DEFAULT_LEASE, 2).await;
    let b = open(&pg, "b", DEFAULT_LEASE, 2).await;
    assert!(matches!(a.claim(claim("x")).await.unwrap(), Claimed::New));
    assert!(matches!(
        a.claim(claim("done")).await.unwrap(),
        Claimed::New
    ));
    assert!(matches!(
        a.claim(claim("y")).await.unwrap(),
        Claimed::Full {
            used: 2,
            capacity: 2
        }
    ));
    a.complete("done", "{}", None, 1).await.unwrap();
    // Another run cannot withdraw it, and a completed receipt is never withdrawn.
    b.withdraw("x").await.unwrap();
    a.withdraw("done").await.unwrap();
    assert!(b.receipt("x").await.unwrap().is_some());
    assert!(b.receipt("done").await.unwrap().is_some());
    assert_eq!(a.counts().await.unwrap().used, 2);
    // Ours goes, and repeating it is harmless.
    a.withdraw("x").await.unwrap();
    a.withdraw("x").await.unwrap();
    assert!(a.receipt("x").await.unwrap().is_none());
    assert_eq!(a.counts().await.unwrap().used, 1);
    assert!(matches!(b.claim(claim("y")).await.unwrap(), Claimed::New));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_is_unavailable_while_down_and_claims_resume_without_reopening() {
    let Some(pg) = require_or_skip("a_database_restart") else {
        return;
    };
    let a = open(&pg, "a", DEFAULT_LEASE, 1000).await;
    assert!(matches!(
        a.claim(claim("before")).await.unwrap(),
        Claimed::New
    ));
    tokio::task::block_in_place(|| pg.stop()).unwrap();
    match a.claim(claim("during")).await {
        Err(LedgerError::Unavailable(why)) => assert!(why.contains("PostgreSQL"), "{why}"),
        other => panic!("a claim while the database is down: {other:?}"),
    }
    assert!(matches!(
        a.complete("before", "{}", None, 1).await,
        Err(LedgerError::Unavailable(_))
    ));
    assert!(matches!(
        a.receipt("before").await,
        Err(LedgerError::Unavailable(_))
    ));
    tokio::task::block_in_place(|| pg.start_again()).unwrap();
    assert!(matches!(
        a.claim(claim("after")).await.unwrap(),
        Claimed::New
    ));
    assert!(a.receipt("during").await.unwrap().is_none());
    assert!(matches!(
        a.complete("before", "{}", None, 1).await.unwrap(),
        Completed::Stored
    ));

    // A crash of the database keeps every acknowledged claim.
    let mut acknowledged = Vec::new();
    for i in 0..50 {
        let id = format!("crash-{i}");
        assert!(matches!(a.claim(claim(&id)).await.unwrap(), Claimed::New));
        acknowledged.push(id);
    }
    tokio::task::block_in_place(|| pg.kill()).unwrap();
    assert!(a.claim(claim("while-dead")).await.is_err());
    tokio::task::block_in_place(|| pg.start_again()).unwrap();
    for id in &acknowledged {
        let row = a.receipt(id).await.unwrap();
        assert!(
            row.is_some(),
            "{id} was acknowledged and must survive the crash"
        );
    }
    assert!(matches!(
        a.claim(claim("resumed")).await.unwrap(),
        Claimed::New
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_waiting_on_another_host_wakes_when_the_first_completes() {
    let Some(pg) = require_or_skip("a_copy_waiting_on_another_host_wakes") else {
        return;
    };
    let a = open(&pg, "a", DEFAULT_LEASE, 1000).await;
    let b = open(&pg, "b", DEFAULT_LEASE, 1000).await;
    assert!(matches!(a.claim(claim("x")).await.unwrap(), Claimed::New));
    // A deadline that passes while the row still runs: None.
    let soon = Instant::now() + Duration::from_millis(50);
    assert!(b.wait_decided("x", soon).await.unwrap().is_none());
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.wait_decided("x", Instant::now() + Duration::from_secs(120))
                .await
        })
    };
    assert!(matches!(
        a.complete("x", r#"{"done":1}"#, None, 5).await.unwrap(),
        Completed::Stored
    ));
    let row = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("decided before the deadline");
    assert_eq!(row.state, RowState::Completed);
    assert_eq!(row.reply.as_deref(), Some(r#"{"done":1}"#));
    assert_eq!(row.completed_at, Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_interrupts_running_receipts_and_tasks_stay_with_their_host() {
    let Some(pg) = require_or_skip("leaving_interrupts_running_receipts") else {
        return;
    };
    let a = open(&pg, "a", DEFAULT_LEASE, 1000).await;
    let b = open(&pg, "b", DEFAULT_LEASE, 1000).await;
    let start = Claim {
        request_id: "start-1".to_string(),
        request: r#"{"method":"task.start","params":{}}"#.to_string(),
        method: "task.start",
        task_id: None,
        at: 1,
    };
    assert!(matches!(a.claim(start).await.unwrap(), Claimed::New));
    assert!(b.task_host("t-9").await.unwrap().is_none());
    a.complete("start-1", r#"{"taskId":"t-9"}"#, Some("t-9"), 2)
        .await
        .unwrap();
    assert_eq!(b.task_host("t-9").await.unwrap().as_deref(), Some("a"));
    assert!(matches!(a.claim(claim("x")).await.unwrap(), Claimed::New));
    a.leave().await.unwrap();
    let x = b.receipt("x").await.unwrap().unwrap();
    assert_eq!(x.state, RowState::Completed);
    assert!(x.reply.unwrap().contains(r#""interrupted":"x""#));
    let hosts = b.hosts().await.unwrap();
    assert_eq!(hosts[0].epoch, b.epoch(), "newest first");
    let row = hosts.iter().find(|h| h.epoch == a.epoch()).unwrap();
    assert_eq!(row.state, "left");
    assert_eq!(row.running, 0);
    assert!(matches!(
        a.claim(claim("y")).await,
        Err(LedgerError::Fenced(_))
    ));
    assert_eq!(a.lease_left(), Duration::ZERO);
}

/// A stored error reply body with `code`, as hosts store them.
fn error_body(code: &str) -> String {
    format!(
        r#""ok":false,"error":{{"code":"{code}","message":"m","delivery":"uncertain","automaticReplay":false}}"#
    )
}

/// What a listed receipt looked like to the operator: its ID and its row's replay count.
async fn seen(ledger: &Ledger, ids: &[&str]) -> Vec<(String, i64)> {
    let mut rows = Vec::new();
    for id in ids {
        let row = ledger.receipt(id).await.unwrap().unwrap();
        rows.push((row.request_id, row.replays));
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_is_fleet_wide_all_or_nothing_and_bounded_by_the_tombstone_capacity() {
    let Some(pg) = require_or_skip("a_clear_is_fleet_wide") else {
        return;
    };
    let mut first = config(&pg, "a", DEFAULT_LEASE, 1000);
    first.tombstone_capacity = 3;
    let a = Ledger::open(first).await.unwrap();
    let b = open(&pg, "b", DEFAULT_LEASE, 1000).await;
    assert_eq!(b.tombstone_capacity(), 3, "later hosts read the stored one");
    for id in ["x", "y", "z", "w", "run"] {
        assert!(matches!(a.claim(claim(id)).await.unwrap(), Claimed::New));
    }
    for (i, id) in ["x", "y", "z", "w"].iter().enumerate() {
        a.complete(id, r#""ok":true,"result":{}"#, None, 10 + i as i64)
            .await
            .unwrap();
    }
    let before = b.last_change().await.unwrap();
    // A running receipt, or one answered again from its row since it was seen: nothing is
    // cleared.
    assert_eq!(
        b.clear("t1", &seen(&b, &["x", "run"]).await, "tidy", 99)
            .await
            .unwrap(),
        Cleared::Stale {
            changed: vec!["run".to_string()]
        }
    );
    let listed = seen(&b, &["x", "y"]).await;
    a.count_replay("y").await.unwrap();
    assert_eq!(
        b.clear("t2", &listed, "tidy", 99).await.unwrap(),
        Cleared::Stale {
            changed: vec!["y".to_string()]
        }
    );
    assert_eq!(a.counts().await.unwrap().tombstones, 0);
    // More tombstones than the fleet may hold: nothing is cleared.
    assert_eq!(
        b.clear("t3", &seen(&b, &["x", "y", "z", "w"]).await, "tidy", 99)
            .await
            .unwrap(),
        Cleared::TombstonesFull {
            tombstones: 0,
            capacity: 3
        }
    );
    assert_eq!(
        a.receipt("x").await.unwrap().unwrap().state,
        RowState::Completed
    );
    // A clear on one host is seen by every host, and is a change every host can read.
    assert_eq!(
        b.clear("t4", &seen(&b, &["x", "y"]).await, "tidy", 99)
            .await
            .unwrap(),
        Cleared::Done {
            cleared: 2,
            tombstones: 2
        }
    );
    let x = a.receipt("x").await.unwrap().unwrap();
    assert_eq!(x.state, RowState::Cleared);
    assert_eq!(x.reply, None);
    assert_eq!(x.cleared_at, Some(99));
    assert_eq!(x.clear_reason.as_deref(), Some("tidy"));
    assert!(x.request.contains("page.click"), "the fingerprint stays");
    match a.claim(claim("x")).await.unwrap() {
        Claimed::Existing(row) => assert_eq!(row.state, RowState::Cleared),
        other => panic!("a cleared ID is not new again: {other:?}"),
    }
    let counts = a.counts().await.unwrap();
    assert_eq!((counts.used, counts.tombstones), (3, 2));
    let changes = a.changes_after(before, 100).await.unwrap();
    let ids: Vec<&str> = changes.iter().map(|c| c.row.request_id.as_str()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&"x") && ids.contains(&"y"), "{ids:?}");
    assert!(changes.iter().all(|c| c.row.state == RowState::Cleared));
    assert!(changes.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(a.last_change().await.unwrap(), changes[1].seq);
    assert!(a
        .changes_after(changes[1].seq, 100)
        .await
        .unwrap()
        .is_empty());
    // Clearing twice: the second finds them changed.
    assert!(matches!(
        b.clear("t5", &[("x".to_string(), 0)], "again", 100)
            .await
            .unwrap(),
        Cleared::Stale { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncertain_outcomes_are_cleared_only_once_acknowledged_or_settled_by_their_host() {
    let Some(pg) = require_or_skip("uncertain_outcomes_are_cleared") else {
        return;
    };
    let a = open(&pg, "a", DEFAULT_LEASE, 1000).await;
    let b = open(&pg, "b", DEFAULT_LEASE, 1000).await;
    for (id, body) in [
        ("uncertain", error_body("OUTCOME_UNCERTAIN")),
        ("interrupted", error_body("INTERRUPTED")),
        ("failed", error_body("ACTION_FAILED")),
        ("fine", r#""ok":true,"result":{}"#.to_string()),
    ] {
        assert!(matches!(a.claim(claim(id)).await.unwrap(), Claimed::New));
        a.complete(id, &body, None, 5).await.unwrap();
    }
    let row = b.receipt("uncertain").await.unwrap().unwrap();
    assert_eq!(row.code.as_deref(), Some("OUTCOME_UNCERTAIN"));
    assert!(!row.clearable());
    assert_eq!(b.receipt("fine").await.unwrap().unwrap().code, None);
    assert!(b.receipt("failed").await.unwrap().unwrap().clearable());
    // Neither uncertain receipt may be cleared yet.
    let stale = b
        .clear(
            "u1",
            &seen(&b, &["uncertain", "interrupted", "fine"]).await,
            "r",
            1,
        )
        .await
        .unwrap();
    assert_eq!(
        stale,
        Cleared::Stale {
            changed: vec!["interrupted".to_string(), "uncertain".to_string()]
        }
    );
    // Only the host run that executed it may settle it; settling does not help INTERRUPTED.
    assert_eq!(b.settle(&["uncertain".to_string()]).await.unwrap(), 0);
    assert!(!b.receipt("uncertain").await.unwrap().unwrap().clearable());
    assert_eq!(
        a.settle(&["uncertain".to_string(), "interrupted".to_string()])
            .await
            .unwrap(),
        2
    );
    assert!(b.receipt("uncertain").await.unwrap().unwrap().clearable());
    assert!(!b.receipt("interrupted").await.unwrap().unwrap().clearable());
    let listed = b
        .list(
            &RowFilter {
                state: Some(RowStateFilter::Clearable),
                ..RowFilter::default()
            },
            RowOrder::Oldest,
            false,
            0,
            100,
        )
        .await
        .unwrap();
    assert_eq!(listed.0, 3, "{:?}", listed.1);
    // An acknowledgement on any host makes INTERRUPTED clearable; a certain outcome is not
    // acknowledged.
    // Unacknowledged, it is every host's unsettled outcome (the partial index's rows).
    let unsettled = |rows: Vec<polaris::ledger::LedgerReceipt>| -> Vec<String> {
        rows.into_iter().map(|r| r.request_id).collect()
    };
    assert_eq!(
        unsettled(a.interrupted_unacknowledged(100).await.unwrap()),
        ["interrupted"]
    );
    let mark = a.last_change().await.unwrap();
    assert!(!b.acknowledge("fine", "why", "op", 7).await.unwrap());
    assert!(!b.acknowledge("nobody", "why", "op", 7).await.unwrap());
    assert!(b
        .acknowledge("interrupted", "called them", "op", 7)
        .await
        .unwrap());
    let row = a.receipt("interrupted").await.unwrap().unwrap();
    assert_eq!(row.acknowledged_at, Some(7));
    assert!(b.interrupted_unacknowledged(100).await.unwrap().is_empty());
    assert!(row.clearable());
    let changes = a.changes_after(mark, 10).await.unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].row.request_id, "interrupted");
    assert_eq!(
        b.clear("u2", &seen(&b, &["uncertain", "interrupted"]).await, "r", 8)
            .await
            .unwrap(),
        Cleared::Done {
            cleared: 2,
            tombstones: 2
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_needs_every_live_hosts_census_and_refuses_when_a_host_answered_a_copy() {
    let Some(pg) = require_or_skip("a_clear_needs_every_live_hosts_census") else {
        return;
    };
    let a = open(&pg, "a", DEFAULT_LEASE, 1000).await;
    let b = open(&pg, "b", DEFAULT_LEASE, 1000).await;
    for id in ["p", "q"] {
        assert!(matches!(a.claim(claim(id)).await.unwrap(), Claimed::New));
        a.complete(id, r#""ok":true,"result":{}"#, None, 5)
            .await
            .unwrap();
    }
    let ids = vec!["p".to_string(), "q".to_string()];
    // Nobody answers: the census names every live host that did not.
    match a
        .census("c1", CensusPhase::Prepare, &ids, Duration::from_millis(200))
        .await
    {
        Err(LedgerError::Unavailable(why)) => {
            assert!(why.contains("a, b"), "{why}");
        }
        other => panic!("a census nobody answered: {other:?}"),
    }
    // Each host answers with the checksum `sums` gives for its phase.
    let answer = |ledger: Ledger, prepare: i64, commit: i64| async move {
        for _ in 0..400 {
            for request in ledger.census_requests().await.unwrap() {
                let sum = match request.phase {
                    CensusPhase::Prepare => prepare,
                    CensusPhase::Commit => commit,
                };
                ledger.census_report(&request, sum).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let quiet_a = tokio::spawn(answer(a.clone(), 0, 0));
    let same_b = tokio::spawn(answer(b.clone(), 5, 5));
    let wait = Duration::from_secs(10);
    a.census("c2", CensusPhase::Prepare, &ids, wait)
        .await
        .unwrap();
    let listed = seen(&a, &["p"]).await;
    a.census("c2", CensusPhase::Commit, &ids, wait)
        .await
        .unwrap();
    assert_eq!(
        a.clear("c2", &listed, "tidy", 9).await.unwrap(),
        Cleared::Done {
            cleared: 1,
            tombstones: 1
        }
    );
    same_b.abort();
    // Host b's copies changed between the phases: nothing is cleared, and b is named.
    let changed_b = tokio::spawn(answer(b.clone(), 5, 6));
    a.census("c3", CensusPhase::Prepare, &ids, wait)
        .await
        .unwrap();
    let listed = seen(&a, &["q"]).await;
    a.census("c3", CensusPhase::Commit, &ids, wait)
        .await
        .unwrap();
    assert_eq!(
        a.clear("c3", &listed, "tidy", 9).await.unwrap(),
        Cleared::Copied {
            hosts: vec!["b".to_string()]
        }
    );
    assert_eq!(
        a.receipt("q").await.unwrap().unwrap().state,
        RowState::Completed
    );
    changed_b.abort();
    quiet_a.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleets_book_is_listed_with_filters_order_and_pages() {
    let Some(pg) = require_or_skip("the_fleets_book_is_listed") else {
        return;
    };
    let a = open(&pg, "a", DEFAULT_LEASE, 1000).await;
    let b = open(&pg, "b", DEFAULT_LEASE, 1000).await;
    for i in 0..30 {
        let id = format!("r{i:02}");
        let mut c = claim(&id);
        c.at = 1000 + i;
        c.method = if i % 3 == 0 {
            "page.fill"
        } else {
            "page.click"
        };
        let ledger = if i % 2 == 0 { &a } else { &b };
        assert!(matches!(ledger.claim(c).await.unwrap(), Claimed::New));
        if i < 25 {
            let body = if i % 5 == 0 {
                error_body("ACTION_FAILED")
            } else {
                r#""ok":true,"result":{}"#.to_string()
            };
            ledger.complete(&id, &body, None, 2000 + i).await.unwrap();
        }
    }
    let all = RowFilter::default();
    let (total, page) = a.list(&all, RowOrder::Newest, false, 0, 10).await.unwrap();
    assert_eq!(total, 30);
    let ids: Vec<&str> = page.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids[0], "r29", "newest first, from every host: {ids:?}");
    assert_eq!(ids.len(), 10);
    let (_, page) = a.list(&all, RowOrder::Oldest, false, 28, 10).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, ["r28", "r29"]);
    let running = RowFilter {
        state: Some(RowStateFilter::Running),
        ..RowFilter::default()
    };
    assert_eq!(
        a.list(&running, RowOrder::Newest, false, 0, 100)
            .await
            .unwrap()
            .0,
        5
    );
    let errors = RowFilter {
        state: Some(RowStateFilter::Error),
        ..RowFilter::default()
    };
    assert_eq!(
        a.list(&errors, RowOrder::Newest, false, 0, 100)
            .await
            .unwrap()
            .0,
        5
    );
    let fills = RowFilter {
        method: Some("page.fill".to_string()),
        ..RowFilter::default()
    };
    assert_eq!(
        a.list(&fills, RowOrder::Newest, false, 0, 100)
            .await
            .unwrap()
            .0,
        10
    );
    let search = RowFilter {
        search: Some("r1".to_string()),
        ..RowFilter::default()
    };
    assert_eq!(
        a.list(&search, RowOrder::Newest, false, 0, 100)
            .await
            .unwrap()
            .0,
        10
    );
    let (_, page) = a.list(&all, RowOrder::State, false, 0, 6).await.unwrap();
    assert!(
        page[..5].iter().all(|r| r.state == RowState::Running),
        "running first: {page:?}"
    );
    assert_eq!(page[5].state, RowState::Completed);
}
