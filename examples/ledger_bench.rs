//! Fleet claims per second through the `Ledger` API against pgbench's
//! `INSERT … ON CONFLICT DO NOTHING` on the same private PostgreSQL, in the same run.
//!
//! `cargo run --release --example ledger_bench [SECONDS_PER_CASE] [REPETITIONS] [CONNECTIONS]`
//! (defaults 10, 2, 4). Each repetition runs, alternated:
//! - pgbench: 32 connections, each transaction one `INSERT … ON CONFLICT DO NOTHING` of a fresh
//!   key with a receipt-sized row, `synchronous_commit = on` (the baseline the fleet is held to);
//! - the ledger: 3 host runs (`Ledger`s, each with CONNECTIONS batch connections) × 32
//!   concurrent callers, each claiming fresh request IDs one after another (every claim durable
//!   before it returns), on a 2-worker tokio runtime;
//! - the replay path: the same callers claiming IDs that already exist.
//!
//! Needs PostgreSQL's server (`initdb`, `pg_ctl`) and `pgbench` (`apt-get install postgresql`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use polaris::ledger::{Claim, Claimed, Ledger, LedgerConfig};
use polaris_testkit::postgres::PrivatePostgres;

const CALLERS_PER_HOST: usize = 32;
const HOSTS: usize = 3;

fn request(id: &str) -> String {
    format!(
        r##"{{"method":"page.fill","params":{{"target":"#title","taskId":"0b5e6f70-8192-4a3b-8c4d-5e6f708192a3","value":"a post about the ledger {id}"}}}}"##
    )
}

fn pgbench(pg: &PrivatePostgres, seconds: u64) -> f64 {
    let script = pg.dir().join("claim.sql");
    std::fs::write(
        &script,
        "INSERT INTO bench_claims (request_id, request, method, task_id, host_id, epoch, run_id, state, first_seen) \
         VALUES (md5(random()::text || clock_timestamp()::text), \
                 repeat('r', 160), 'page.fill', '0b5e6f70-8192-4a3b-8c4d-5e6f708192a3', 'bench', 1, \
                 'run', 'running', 1) ON CONFLICT DO NOTHING;\n",
    )
    .expect("write the pgbench script");
    let out = std::process::Command::new("pgbench")
        .args([
            "-n",
            "-c",
            "32",
            "-j",
            "2",
            "-T",
            &seconds.to_string(),
            "-f",
        ])
        .arg(&script)
        .arg("-h")
        .arg(pg.dir())
        .args(["-p", "5432", "-U", "postgres", "postgres"])
        .env("PGOPTIONS", "-c synchronous_commit=on")
        .output()
        .expect("run pgbench (apt-get install postgresql-contrib or postgresql)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("tps = ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "pgbench printed no tps: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

fn config(pg: &PrivatePostgres, host: usize, connections: usize) -> LedgerConfig {
    LedgerConfig {
        conninfo: pg.conninfo(),
        host_id: format!("bench-{host}"),
        run_id: uuid::Uuid::new_v4().to_string(),
        password: None,
        take_over: false,
        socket: String::new(),
        lease: Duration::from_secs(10),
        connections,
        capacity: 100_000_000,
        tombstone_capacity: 1000,
        interrupted_reply: Arc::new(|i| format!(r#"{{"interrupted":"{}"}}"#, i.request_id)),
    }
}

/// Claims per second from every caller of every ledger for `seconds`; `ids` picks each
/// caller's next ID (fresh or existing).
async fn drive(
    ledgers: &[Ledger],
    seconds: u64,
    ids: Arc<dyn Fn(usize, u64) -> String + Send + Sync>,
) -> (f64, u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let claims = Arc::new(AtomicU64::new(0));
    let new = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (h, ledger) in ledgers.iter().enumerate() {
        for c in 0..CALLERS_PER_HOST {
            let (ledger, stop, claims, new, ids) = (
                ledger.clone(),
                stop.clone(),
                claims.clone(),
                new.clone(),
                ids.clone(),
            );
            let caller = h * CALLERS_PER_HOST + c;
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let id = ids(caller, n);
                    n += 1;
                    let outcome = ledger
                        .claim(Claim {
                            request: request(&id),
                            request_id: id,
                            method: "page.fill",
                            task_id: Some("0b5e6f70-8192-4a3b-8c4d-5e6f708192a3".to_string()),
                            at: 1,
                        })
                        .await
                        .expect("claim");
                    if matches!(outcome, Claimed::New) {
                        new.fetch_add(1, Ordering::Relaxed);
                    }
                    claims.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("caller");
    }
    let counted = claims.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    (
        counted as f64 / elapsed,
        counted,
        new.load(Ordering::Relaxed),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    let reps: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2);
    let connections: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(4);
    let pg = PrivatePostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let ledgers: Vec<Ledger> = {
            let mut v = Vec::new();
            for h in 0..HOSTS {
                v.push(
                    Ledger::open(config(&pg, h, connections))
                        .await
                        .expect("open the ledger"),
                );
            }
            v
        };
        // pgbench's table: the receipts table's shape, without the ledger's functions.
        let (client, conn) = tokio_postgres::connect(&pg.conninfo(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        client
            .batch_execute("CREATE TABLE bench_claims (LIKE receipts INCLUDING ALL)")
            .await
            .expect("create the pgbench table");
        println!(
            "ledger_bench: {HOSTS} hosts x {CALLERS_PER_HOST} callers, {connections} batch \
             connections per host, {seconds} s per case, synchronous_commit=on"
        );
        let mut ratios = Vec::new();
        for rep in 0..reps {
            let base = tokio::task::block_in_place(|| pgbench(&pg, seconds));
            let epoch = rep as u64;
            let (fresh, claims, new) = drive(
                &ledgers,
                seconds,
                Arc::new(move |caller, n| format!("fresh-{epoch}-{caller}-{n}")),
            )
            .await;
            assert_eq!(claims, new, "fresh IDs are all new");
            let (replay, _, new) = drive(
                &ledgers,
                seconds,
                Arc::new(move |caller, n| format!("fresh-{epoch}-{caller}-{}", n % 100)),
            )
            .await;
            let (batches, ops) = ledgers.iter().fold((0, 0), |(b, o), l| {
                let (lb, lo) = l.batch_stats();
                (b + lb, o + lo)
            });
            println!(
                "  so far: {batches} batches, {:.1} operations per batch",
                ops as f64 / batches.max(1) as f64
            );
            let ratio = fresh / base;
            ratios.push(ratio);
            println!(
                "rep {rep}: pgbench INSERT ON CONFLICT (32 conns) {base:.0} tps | ledger claims \
                 {fresh:.0}/s ({:.0} % of pgbench) | ledger replays {replay:.0}/s ({new} new)",
                ratio * 100.0
            );
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "median ledger/pgbench: {:.0} %",
            ratios[ratios.len() / 2] * 100.0
        );
        for ledger in &ledgers {
            ledger.leave().await.expect("leave");
        }
    });
}
