//! The fleet ledger measured the way a fleet runs it (SPEC §13), every row in the same run on
//! the same private PostgreSQL (unix socket, `synchronous_commit = on`):
//!
//! 1. the baseline: `pgbench -n -c 32 -j 2 -T S -f SCRIPT`, where the script is one
//!    `INSERT … ON CONFLICT DO NOTHING` of a random key — what a claim costs the database alone;
//! 2. the fleet: three release `polaris serve --ledger` hosts on that server, driven by this
//!    process (a load client of its own: 2 tokio workers, 3 × 32 connections, each keeping
//!    `--window` requests in flight, a fresh request ID per `page.fill`, one task per
//!    connection) → claims/s fleet-wide and the ratio to the baseline;
//! 3. replays of IDs the fleet already completed, sent again to one host (answered from its
//!    local book, no database round trip) vs the same replays on a single `--no-journal` host.
//!
//! `cargo build --release --bins --examples && target/release/examples/fleet_bench` (or
//! `cargo run --release --example fleet_bench -- --seconds 10 --reps 3`) prints a markdown table
//! of medians (and ranges over the repetitions). Needs PostgreSQL (`initdb`, `pg_ctl`, `pgbench`).

#[path = "support/child.rs"]
mod child;
#[path = "support/release_binary.rs"]
mod release_binary;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use polaris_testkit::postgres::PrivatePostgres;
use release_binary::polaris_bin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::runtime::Runtime;

/// The allocator the `polaris` binary uses, so the client costs what a Rust client would.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Connections per host, as pgbench's `-c 32`.
const CONNECTIONS: usize = 32;
/// Hosts of the fleet.
const HOSTS: usize = 3;

#[derive(Parser, Debug)]
#[command(
    about = "Fleet claims/s vs pgbench INSERT … ON CONFLICT, and replays from a fleet host's cache"
)]
struct Args {
    /// Seconds of every measured phase (pgbench's -T too).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Repetitions of every row, alternated.
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Requests each connection keeps in flight (64, as the load client of examples/load.rs).
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Connections each host keeps to PostgreSQL (`--ledger-connections`).
    #[arg(long, default_value_t = polaris::ledger::DEFAULT_CONNECTIONS)]
    ledger_connections: usize,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("fleet_bench: {e}");
        std::process::exit(1);
    }
}

/// One measured row's repetitions (requests or transactions per second).
#[derive(Default)]
struct Row(Vec<f64>);

impl Row {
    fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }
    fn range(&self) -> String {
        let min = self.0.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.0.iter().copied().fold(0.0, f64::max);
        format!("{min:.0}–{max:.0}")
    }
}

fn run(args: &Args) -> Result<(), String> {
    let bin = polaris_bin();
    let pgbench = find_program("pgbench")?;
    let pg = PrivatePostgres::start()?;
    eprintln!("private PostgreSQL in {}", pg.dir().display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    let work = tempfile::Builder::new()
        .prefix("fb")
        .tempdir_in("/tmp")
        .map_err(|e| format!("temp dir: {e}"))?;
    let script = work.path().join("claim.sql");
    std::fs::write(
        &script,
        "INSERT INTO bench_claims (request_id, body) VALUES (gen_random_uuid()::text, 'x') \
         ON CONFLICT DO NOTHING;\n",
    )
    .map_err(|e| format!("{}: {e}", script.display()))?;
    psql(
        &pg,
        "CREATE TABLE bench_claims (request_id text PRIMARY KEY, body text NOT NULL)",
    )?;

    let (mut baseline, mut fleet, mut cached, mut single) = (
        Row::default(),
        Row::default(),
        Row::default(),
        Row::default(),
    );
    for rep in 0..args.reps {
        eprintln!("repetition {}/{}", rep + 1, args.reps);
        let tps = pgbench_tps(&pgbench, &pg, &script, args.seconds)?;
        eprintln!("  pgbench INSERT … ON CONFLICT DO NOTHING: {tps:.0} tps");
        baseline.0.push(tps);

        let (claims, replays, filled) = fleet_run(&rt, &bin, &pg, work.path(), rep, args)?;
        eprintln!("  fleet: {claims:.0} claims/s; replays from one host's cache: {replays:.0}/s");
        fleet.0.push(claims);
        cached.0.push(replays);

        let replays = single_run(&rt, &bin, work.path(), rep, args, &filled)?;
        eprintln!("  single --no-journal host: {replays:.0} replays/s");
        single.0.push(replays);
    }

    println!(
        "\nFleet ledger, {} s per phase, {} repetition(s), medians (range); PostgreSQL {} on a \
         unix socket, synchronous_commit=on; {} hosts × {CONNECTIONS} connections × {} in flight, \
         --ledger-connections {}\n",
        args.seconds,
        args.reps,
        server_version(&pg),
        HOSTS,
        args.window,
        args.ledger_connections
    );
    println!("| what | per second | ratio |");
    println!("| --- | ---: | ---: |");
    println!(
        "| pgbench `INSERT … ON CONFLICT DO NOTHING`, 32 connections (baseline) | {:.0} ({}) | 100 % |",
        baseline.median(),
        baseline.range()
    );
    println!(
        "| fleet claims (`page.fill`, fresh IDs), 3 hosts × 32 connections | {:.0} ({}) | {:.0} % of pgbench |",
        fleet.median(),
        fleet.range(),
        100.0 * fleet.median() / baseline.median()
    );
    println!(
        "| replays of completed IDs from one fleet host's local book, 32 connections | {:.0} ({}) | {:.0} % of a single host |",
        cached.median(),
        cached.range(),
        100.0 * cached.median() / single.median()
    );
    println!(
        "| the same replays on a single `--no-journal` host, 32 connections | {:.0} ({}) | 100 % |",
        single.median(),
        single.range()
    );
    drop(pg);
    Ok(())
}

/// `pgbench -n -c 32 -j 2 -T S -f SCRIPT` against the private server; its tps (without the
/// connection time).
fn pgbench_tps(
    pgbench: &Path,
    pg: &PrivatePostgres,
    script: &Path,
    secs: u64,
) -> Result<f64, String> {
    let out = Command::new(pgbench)
        .args(["-n", "-c", "32", "-j", "2", "-T", &secs.to_string(), "-f"])
        .arg(script)
        .arg(pg.conninfo())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run pgbench: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "pgbench failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    text.lines()
        .find_map(|l| {
            let l = l.strip_prefix("tps = ")?;
            l.split_whitespace().next()?.parse().ok()
        })
        .ok_or_else(|| format!("no tps in pgbench's output: {text}"))
}

/// Runs one statement with `psql`.
fn psql(pg: &PrivatePostgres, sql: &str) -> Result<String, String> {
    let out = Command::new(find_program("psql")?)
        .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .arg(pg.conninfo())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn server_version(pg: &PrivatePostgres) -> String {
    psql(pg, "SHOW server_version").unwrap_or_else(|_| "?".into())
}

/// A PostgreSQL client program: on PATH, else the newest `/usr/lib/postgresql/*/bin`.
fn find_program(name: &str) -> Result<PathBuf, String> {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    });
    if let Some(p) = on_path {
        return Ok(p);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found
        .pop()
        .ok_or_else(|| format!("{name} not found; install PostgreSQL (apt-get install postgresql)"))
}

/// A release `polaris serve` child, killed when dropped.
struct Served {
    child: Child,
    bridge: PathBuf,
}

impl Served {
    fn start(bin: &Path, dir: &Path, extra: &[String]) -> Result<Served, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = std::fs::File::create(dir.join("serve.log")).map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .arg("serve")
            .arg("--socket-dir")
            .arg(dir.join("s"))
            .arg("--audit-log")
            .arg(dir.join("audit.jsonl"))
            .args(["--capacity", "5000000"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut s = Served {
            child,
            bridge: dir.join("s/bridge.sock"),
        };
        let log_path = dir.join("serve.log");
        child::wait_for_socket(&mut s.child, &s.bridge, Duration::from_secs(30), || {
            std::fs::read_to_string(&log_path).unwrap_or_default()
        })
        .map_err(|e| format!("polaris serve {e}"))?;
        Ok(s)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        child::stop(&mut self.child);
    }
}

/// One connection with its own task, sending `page.fill` under IDs `PREFIX-SEQ`.
struct Lane {
    stream: UnixStream,
    prefix: String,
    task: String,
    /// Sequence numbers completed so far (0..done), replayable.
    done: u64,
}

impl Lane {
    async fn open(bridge: &Path) -> Result<Lane, String> {
        let mut stream = UnixStream::connect(bridge)
            .await
            .map_err(|e| format!("connect {}: {e}", bridge.display()))?;
        let line = format!(
            "{{\"id\":\"{}\",\"method\":\"task.start\",\"params\":{{\"title\":\"bench\"}}}}\n",
            uuid::Uuid::new_v4()
        );
        stream
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.ends_with(b"\n") {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("the host closed the connection".into());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let v: serde_json::Value = serde_json::from_slice(&buf).map_err(|e| e.to_string())?;
        let task = v["result"]["taskId"]
            .as_str()
            .ok_or_else(|| format!("task.start failed: {v}"))?
            .to_owned();
        Ok(Lane {
            stream,
            prefix: uuid::Uuid::new_v4().simple().to_string()[..20].to_owned(),
            task,
            done: 0,
        })
    }

    fn push(&self, out: &mut Vec<u8>, seq: u64) {
        use std::io::Write;
        let _ = writeln!(
            out,
            "{{\"id\":\"{}-{seq:012x}\",\"method\":\"page.fill\",\"params\":{{\"target\":\"#title\",\"taskId\":\"{}\",\"value\":\"hello\"}}}}",
            self.prefix, self.task
        );
    }

    /// Keeps `window` requests in flight until `until` (or `limit` requests are sent), then
    /// drains. Fresh IDs continue from `done`; replays cycle over `0..done`. Every reply must
    /// be ok, and a replay must say so. Returns the replies received.
    async fn drive(
        &mut self,
        window: usize,
        until: Instant,
        limit: Option<u64>,
        replay: bool,
    ) -> Result<u64, String> {
        if replay && self.done == 0 {
            return Err("nothing completed on this connection to replay".into());
        }
        let ok = memchr::memmem::Finder::new(b"\"ok\":true");
        let replayed = memchr::memmem::Finder::new(b"\"receipt\":\"replayed\"");
        let mut next = if replay { 0 } else { self.done };
        let (mut sent, mut received) = (0u64, 0u64);
        let mut out = Vec::with_capacity(window * 160);
        let mut inbuf = vec![0u8; 64 * 1024];
        let mut filled = 0;
        loop {
            out.clear();
            let open = Instant::now() < until && limit.is_none_or(|l| sent < l);
            while open && sent - received < window as u64 {
                self.push(&mut out, next);
                next += 1;
                if replay && next == self.done {
                    next = 0;
                }
                sent += 1;
            }
            if !out.is_empty() {
                self.stream
                    .write_all(&out)
                    .await
                    .map_err(|e| format!("write: {e}"))?;
            }
            if received == sent {
                break;
            }
            let n = self
                .stream
                .read(&mut inbuf[filled..])
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("the host closed the connection mid-run".into());
            }
            filled += n;
            let mut pos = 0;
            while let Some(i) = memchr::memchr(b'\n', &inbuf[pos..filled]) {
                let line = &inbuf[pos..pos + i];
                if ok.find(line).is_none() || (replay && replayed.find(line).is_none()) {
                    return Err(format!(
                        "unexpected reply: {}",
                        String::from_utf8_lossy(line)
                    ));
                }
                received += 1;
                pos += i + 1;
            }
            inbuf.copy_within(pos..filled, 0);
            filled -= pos;
        }
        if !replay {
            self.done += received;
        }
        Ok(received)
    }
}

/// Drives every lane at once for `secs` (lane `i` sending at most `limits[i]` when given);
/// returns the lanes and the replies per second.
fn drive_all(
    rt: &Runtime,
    lanes: Vec<Lane>,
    window: usize,
    secs: u64,
    limits: Option<&[u64]>,
    replay: bool,
) -> Result<(Vec<Lane>, f64), String> {
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs(secs);
    let back = rt.block_on(async move {
        let handles: Vec<_> = lanes
            .into_iter()
            .enumerate()
            .map(|(i, mut lane)| {
                let limit = limits.map(|l| l[i]);
                tokio::spawn(async move {
                    let r = lane.drive(window, until, limit, replay).await;
                    (lane, r)
                })
            })
            .collect();
        let mut back = Vec::new();
        for h in handles {
            back.push(h.await.map_err(|e| format!("a client task failed: {e}"))?);
        }
        Ok::<_, String>(back)
    })?;
    let wall = t0.elapsed().as_secs_f64();
    let mut total = 0;
    let mut lanes = Vec::new();
    for (lane, r) in back {
        total += r?;
        lanes.push(lane);
    }
    Ok((lanes, total as f64 / wall))
}

fn open_lanes(rt: &Runtime, bridge: &Path) -> Result<Vec<Lane>, String> {
    rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..CONNECTIONS {
            v.push(Lane::open(bridge).await?);
        }
        Ok(v)
    })
}

/// Three fleet hosts on the server: fresh claims on all of them, then replays of the first
/// host's completed IDs on that host. Returns claims/s, replays/s and how many IDs each of the
/// first host's connections completed.
fn fleet_run(
    rt: &Runtime,
    bin: &Path,
    pg: &PrivatePostgres,
    work: &Path,
    rep: usize,
    args: &Args,
) -> Result<(f64, f64, Vec<u64>), String> {
    let mut hosts = Vec::new();
    for n in 0..HOSTS {
        let extra = vec![
            "--ledger".to_owned(),
            pg.conninfo(),
            "--host-id".to_owned(),
            format!("bench-{rep}-{n}"),
            "--ledger-connections".to_owned(),
            args.ledger_connections.to_string(),
        ];
        hosts.push(Served::start(
            bin,
            &work.join(format!("fleet-{rep}-{n}")),
            &extra,
        )?);
    }
    let mut lanes = Vec::new();
    for h in &hosts {
        lanes.extend(open_lanes(rt, &h.bridge)?);
    }
    let (lanes, claims) = drive_all(rt, lanes, args.window, args.seconds, None, false)?;
    let first: Vec<Lane> = lanes.into_iter().take(CONNECTIONS).collect();
    let filled: Vec<u64> = first.iter().map(|l| l.done).collect();
    let (_, replays) = drive_all(rt, first, args.window, args.seconds, None, true)?;
    drop(hosts);
    Ok((claims, replays, filled))
}

/// A single `--no-journal` host: as many fresh fills per connection as the fleet's first host
/// completed (`filled`), then replays of them. Returns replays/s.
fn single_run(
    rt: &Runtime,
    bin: &Path,
    work: &Path,
    rep: usize,
    args: &Args,
    filled: &[u64],
) -> Result<f64, String> {
    let host = Served::start(
        bin,
        &work.join(format!("single-{rep}")),
        &["--no-journal".to_owned()],
    )?;
    let lanes = open_lanes(rt, &host.bridge)?;
    let (lanes, _) = drive_all(rt, lanes, args.window, 3600, Some(filled), false)?;
    let (_, replays) = drive_all(rt, lanes, args.window, args.seconds, None, true)?;
    drop(host);
    Ok(replays)
}
