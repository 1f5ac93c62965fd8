//! Polaris's performance budget, measured side by side with baselines run in the same process,
//! on the same machine, in the same run: a raw line echo and a JSON echo over the same kind of
//! local socket, and Redis `SET key NX` (when `redis-server` is installed).
//!
//! `cargo bench --bench budget` runs everything and prints the table of ratios at the end;
//! `cargo run --release --example bench_table` prints it again from the saved results.

use std::alloc::{GlobalAlloc, Layout};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use interprocess::local_socket::tokio::{prelude::*, Stream};
use interprocess::local_socket::GenericFilePath;
use polaris::book::{Book, RequestKey};
use polaris::host::{Handled, Host};
use polaris::protocol::{fingerprint, read_frame, FrameRead, Method, Outcome, StoredRequest};
use polaris::server::{Connection, Limits, Service};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::runtime::Runtime;

#[path = "support/table.rs"]
mod table;

#[path = "support/host.rs"]
mod host;

#[path = "support/pipeline.rs"]
mod pipeline;
use host::start_polaris;

// ---------------------------------------------------------------------------------------------
// A counting allocator, switched on only while the memory figures are taken, over the
// allocator the `polaris` binary uses.

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATED.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATED.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocated() -> isize {
    ALLOCATED.load(Ordering::SeqCst)
}

// ---------------------------------------------------------------------------------------------
// Settings

/// `cargo test --benches` runs every benchmark once with `--test`: keep the sizes tiny then.
fn test_mode() -> bool {
    std::env::args().any(|a| a == "--test")
}

/// The benchmark filter given on the command line, if any.
fn filter() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--bench" || a == "--test" || a == "--list" {
            continue;
        }
        if a.starts_with('-') {
            // Options with a value.
            if matches!(
                a.as_str(),
                "--save-baseline"
                    | "--baseline"
                    | "--load-baseline"
                    | "--sample-size"
                    | "--measurement-time"
                    | "--warm-up-time"
                    | "--profile-time"
                    | "--output-format"
                    | "--color"
                    | "--plotting-backend"
                    | "--noise-threshold"
                    | "--confidence-level"
                    | "--significance-level"
                    | "--nresamples"
            ) {
                args.next();
            }
            continue;
        }
        return Some(a);
    }
    None
}

fn wanted(name: &str) -> bool {
    filter().is_none_or(|f| name.contains(&f) || f.contains(name))
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .expect("a temp dir in /tmp")
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

// ---------------------------------------------------------------------------------------------
// Servers under test and baselines

/// The raw echo: the same line codec, each line written straight back; lines that arrived
/// together go back in one write. The cost of the socket and the framing, nothing else.
fn start_raw_echo(srv: &Runtime, path: &Path) {
    let _enter = srv.enter();
    let listener = polaris::server::bind(path).expect("the echo binds");
    srv.spawn(async move {
        while let Ok(stream) = listener.accept().await {
            tokio::spawn(async move {
                let mut reader = BufReader::with_capacity(64 * 1024, &stream);
                let mut frame = Vec::with_capacity(1024);
                let mut out = Vec::with_capacity(64 * 1024);
                while let Ok(FrameRead::Frame) = read_frame(&mut reader, &mut frame, 1 << 20).await
                {
                    out.extend_from_slice(&frame);
                    out.push(b'\n');
                    frame.clear();
                    if reader.buffer().is_empty() {
                        if (&stream).write_all(&out).await.is_err() {
                            return;
                        }
                        out.clear();
                    }
                }
            });
        }
    });
}

/// The JSON echo: parses each request and writes a small JSON reply, through the very reader,
/// in-flight limit and batching writer Polaris uses (`server::serve_connection`).
#[derive(Clone)]
struct JsonEcho;

impl Service for JsonEcho {
    fn handle_frame(&self, frame: &[u8], _conn: &Connection) -> Handled {
        let request: Value = serde_json::from_slice(frame).unwrap_or(Value::Null);
        let mut line =
            serde_json::to_vec(&json!({"id": request["id"], "ok": true, "result": {}})).unwrap();
        line.push(b'\n');
        Handled::Ready(line)
    }
    fn run_id(&self) -> &str {
        "json-echo"
    }
}

fn start_json_echo(srv: &Runtime, path: &Path) {
    let _enter = srv.enter();
    let listener = polaris::server::bind(path).expect("the JSON echo binds");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    // The sender is leaked with the listener: the echo lives as long as the bench.
    std::mem::forget(_tx);
    srv.spawn(polaris::server::accept_loop(
        listener,
        JsonEcho,
        Limits {
            max_frame_bytes: 1 << 20,
            max_connections: 256,
            ..Limits::default()
        },
        rx.clone(),
        rx,
        Arc::new(tokio::sync::Semaphore::new(256)),
        tokio_util::task::TaskTracker::new(),
    ));
}

// ---------------------------------------------------------------------------------------------
// The client side: plain lines over a local socket, so both sides of every comparison pay the
// same client cost.

struct Conn {
    io: BufReader<Stream>,
    reply: Vec<u8>,
}

async fn connect(path: &Path) -> Conn {
    let name = path.to_fs_name::<GenericFilePath>().expect("a socket path");
    let stream = Stream::connect(name).await.expect("the server listens");
    Conn {
        io: BufReader::with_capacity(64 * 1024, stream),
        reply: Vec::with_capacity(1024),
    }
}

impl Conn {
    async fn call(&mut self, line: &[u8]) -> &[u8] {
        self.io.get_mut().write_all(line).await.expect("write");
        self.reply.clear();
        self.io
            .read_until(b'\n', &mut self.reply)
            .await
            .expect("read");
        assert!(!self.reply.is_empty(), "the server closed the connection");
        &self.reply
    }

    async fn call_json(&mut self, line: &str) -> Value {
        let reply = self.call(line.as_bytes()).await;
        serde_json::from_slice(reply).expect("a JSON reply")
    }

    /// Sends `lines` keeping at most `window` in flight; checks every reply says `"ok":true`.
    async fn pipeline(&mut self, lines: &[Vec<u8>], window: usize) {
        pipeline::pipeline(&mut self.io, lines, window, &mut self.reply).await;
    }
}

fn line(v: &Value) -> Vec<u8> {
    let mut l = serde_json::to_vec(v).unwrap();
    l.push(b'\n');
    l
}

fn fill_line(task: &str) -> Vec<u8> {
    line(
        &json!({"id": uuid(), "method": "page.fill", "params": {"taskId": task, "target": "#title", "value": "Hello"}}),
    )
}

async fn start_task(conn: &mut Conn) -> String {
    let reply = conn
        .call_json(&format!(
            "{{\"id\":\"{}\",\"method\":\"task.start\",\"params\":{{\"title\":\"bench\"}}}}\n",
            uuid()
        ))
        .await;
    reply["result"]["taskId"]
        .as_str()
        .expect("task.start returns a taskId")
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// Round trips

fn round_trip(c: &mut Criterion, srv: &Runtime, cli: &Runtime) {
    let dir = temp_dir();
    let echo_path = dir.path().join("echo.sock");
    let jecho_path = dir.path().join("jecho.sock");
    start_raw_echo(srv, &echo_path);
    start_json_echo(srv, &jecho_path);
    let polaris = start_polaris(srv, &dir.path().join("p"), 50_000_000);
    let bridge = dir.path().join("p/bridge.sock");

    let (mut echo, mut jecho, mut conn, task, replay_line) = cli.block_on(async {
        let mut conn = connect(&bridge).await;
        let task = start_task(&mut conn).await;
        let replay_line = fill_line(&task);
        let first = conn.call(&replay_line).await.to_vec();
        assert!(memchr::memmem::find(&first, b"\"receipt\":\"new\"").is_some());
        (
            connect(&echo_path).await,
            connect(&jecho_path).await,
            conn,
            task,
            replay_line,
        )
    });

    let mut g = c.benchmark_group("round_trip");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g.bench_function("raw_echo", |b| {
        b.iter_custom(|iters| {
            cli.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    echo.call(&replay_line).await;
                }
                start.elapsed()
            })
        })
    });
    g.bench_function("json_echo", |b| {
        b.iter_custom(|iters| {
            cli.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    jecho.call(&replay_line).await;
                }
                start.elapsed()
            })
        })
    });
    g.bench_function("host_hello", |b| {
        let hello = line(&json!({"id": uuid(), "method": "host.hello"}));
        b.iter_custom(|iters| {
            cli.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    conn.call(&hello).await;
                }
                start.elapsed()
            })
        })
    });
    g.bench_function("replay", |b| {
        b.iter_custom(|iters| {
            cli.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let reply = conn.call(&replay_line).await;
                    debug_assert!(memchr::memmem::find(reply, b"\"replayed\"").is_some());
                }
                start.elapsed()
            })
        })
    });
    g.bench_function("fresh_fill", |b| {
        b.iter_custom(|iters| {
            let lines: Vec<Vec<u8>> = (0..iters).map(|_| fill_line(&task)).collect();
            cli.block_on(async {
                let start = Instant::now();
                for l in &lines {
                    let reply = conn.call(l).await;
                    debug_assert!(memchr::memmem::find(reply, b"\"new\"").is_some());
                }
                start.elapsed()
            })
        })
    });
    g.finish();
    drop((echo, jecho, conn));
    srv.block_on(polaris.stop());
}

// ---------------------------------------------------------------------------------------------
// Throughput: N clients, each keeping 64 requests in flight.

const CLIENT_COUNTS: [usize; 3] = [1, 8, 32];

fn per_client(clients: usize) -> usize {
    (4096 / clients).max(512)
}

fn throughput(c: &mut Criterion, srv: &Runtime, cli: &Runtime) {
    let dir = temp_dir();
    let jecho_path = dir.path().join("jecho.sock");
    start_json_echo(srv, &jecho_path);

    for (group, target) in [
        ("throughput_json_echo", None),
        ("throughput_fresh_fill", Some("p")),
    ] {
        let mut g = c.benchmark_group(group);
        g.sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for clients in CLIENT_COUNTS {
            // A fresh host per client count, so each starts from an empty book.
            let polaris = target
                .map(|t| start_polaris(srv, &dir.path().join(format!("{t}{clients}")), 50_000_000));
            let path = match target {
                Some(t) => dir.path().join(format!("{t}{clients}/bridge.sock")),
                None => jecho_path.clone(),
            };
            let mut conns: Vec<(Conn, String)> = cli.block_on(async {
                let mut v = Vec::new();
                for _ in 0..clients {
                    let mut conn = connect(&path).await;
                    let task = if target.is_some() {
                        start_task(&mut conn).await
                    } else {
                        uuid()
                    };
                    v.push((conn, task));
                }
                v
            });
            let n = per_client(clients);
            g.throughput(Throughput::Elements((n * clients) as u64));
            g.bench_function(
                BenchmarkId::from_parameter(format!("{clients}_clients")),
                |b| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            // Fresh request IDs for every round, made before the clock starts.
                            let work: Vec<(Conn, String, Vec<Vec<u8>>)> = conns
                                .drain(..)
                                .map(|(conn, task)| {
                                    let lines = (0..n).map(|_| fill_line(&task)).collect();
                                    (conn, task, lines)
                                })
                                .collect();
                            let (elapsed, back) = cli.block_on(async move {
                                let start = Instant::now();
                                let handles: Vec<_> = work
                                    .into_iter()
                                    .map(|(mut conn, task, lines)| {
                                        tokio::spawn(async move {
                                            conn.pipeline(&lines, 64).await;
                                            (conn, task)
                                        })
                                    })
                                    .collect();
                                let mut back = Vec::new();
                                for h in handles {
                                    back.push(h.await.expect("a client failed"));
                                }
                                (start.elapsed(), back)
                            });
                            conns = back;
                            total += elapsed;
                        }
                        total
                    })
                },
            );
            drop(conns);
            if let Some(p) = polaris {
                srv.block_on(p.stop());
            }
        }
        g.finish();
    }
}

// ---------------------------------------------------------------------------------------------
// Redis SET NX at the same connection counts and pipelining

fn redis(quick: bool) {
    let installed = |bin: &str| {
        std::process::Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !installed("redis-server") || !installed("redis-benchmark") {
        println!("redis: redis-server/redis-benchmark are not installed; the Redis SET NX rows are skipped (install redis-server to measure them)");
        table::write_extra("redis", &json!({"installed": false}));
        return;
    }
    let dir = temp_dir();
    let sock = dir.path().join("redis.sock");
    let mut server = std::process::Command::new("redis-server")
        .args(["--port", "0", "--unixsocket"])
        .arg(&sock)
        .args([
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let ready = Instant::now();
    while !sock.exists() && ready.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut result = json!({"installed": true});
    for clients in CLIENT_COUNTS {
        let requests = if quick { 10_000 } else { 1_000_000 };
        let out = std::process::Command::new("redis-benchmark")
            .arg("-s")
            .arg(&sock)
            .args([
                "-c",
                &clients.to_string(),
                "-P",
                "64",
                "-n",
                &requests.to_string(),
                "-r",
                "1000000000",
                "--csv",
            ])
            .args(["SET", "receipt:__rand_int__", "1", "NX"])
            .output()
            .expect("redis-benchmark runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let rps = text
            .lines()
            .nth(1)
            .and_then(|l| l.split(',').nth(1))
            .and_then(|f| f.trim_matches('"').parse::<f64>().ok());
        println!("redis SET NX, {clients} client(s) × 64 pipelined: {rps:?} keys/s");
        if let Some(rps) = rps {
            result[format!("{clients}_clients")] = json!(rps);
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    table::write_extra("redis", &result);
}

// ---------------------------------------------------------------------------------------------
// Duplicate storm: 10,000 simultaneous copies of one request

const STORM_CONNECTIONS: usize = 200;
const STORM_COPIES: usize = 10_000;

async fn mutations(conn: &mut Conn) -> u64 {
    let status = conn
        .call_json(&format!(
            "{{\"id\":\"{}\",\"method\":\"run.status\"}}\n",
            uuid()
        ))
        .await;
    status["result"]["executor"]["mutations"]
        .as_u64()
        .expect("run.status has executor.mutations")
}

fn storm(c: &mut Criterion, srv: &Runtime, cli: &Runtime) {
    let dir = temp_dir();
    let polaris = start_polaris(srv, dir.path(), 1_000_000);
    let bridge = dir.path().join("bridge.sock");
    let (mut control, mut conns) = cli.block_on(async {
        let control = connect(&bridge).await;
        let mut conns = Vec::new();
        for _ in 0..STORM_CONNECTIONS {
            conns.push(connect(&bridge).await);
        }
        (control, conns)
    });
    let mut storms = 0u64;
    let mut g = c.benchmark_group("duplicate_storm");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(300));
    g.measurement_time(Duration::from_secs(2));
    g.bench_function("10000_copies", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (elapsed, back) = cli.block_on(async {
                    let task = start_task(&mut control).await;
                    let before = mutations(&mut control).await;
                    let click = line(&json!({"id": uuid(), "method": "page.click", "params": {
                        "taskId": task, "target": "#submit", "expect": {"target": "#status", "contains": "Saved"}}}));
                    let per = STORM_COPIES / STORM_CONNECTIONS;
                    let burst: Vec<u8> = click.repeat(per);
                    let start = Instant::now();
                    let handles: Vec<_> = conns
                        .drain(..)
                        .map(|mut conn| {
                            let burst = burst.clone();
                            tokio::spawn(async move {
                                conn.io.get_mut().write_all(&burst).await.expect("write");
                                let mut replies = Vec::with_capacity(per);
                                for _ in 0..per {
                                    conn.reply.clear();
                                    conn.io.read_until(b'\n', &mut conn.reply).await.expect("read");
                                    replies.push(conn.reply.clone());
                                }
                                (conn, replies)
                            })
                        })
                        .collect();
                    let mut back = Vec::new();
                    let mut replies = Vec::new();
                    for h in handles {
                        let (conn, r) = h.await.expect("a storm client failed");
                        back.push(conn);
                        replies.extend(r);
                    }
                    let elapsed = start.elapsed();
                    // Exactly one execution, and every copy got its result.
                    let after = mutations(&mut control).await;
                    assert_eq!(after - before, 1, "10,000 copies of one request must execute exactly once");
                    assert_eq!(replies.len(), STORM_COPIES);
                    let results: std::collections::HashSet<String> = replies
                        .iter()
                        .map(|r| {
                            let v: Value = serde_json::from_slice(r).unwrap();
                            assert_eq!(v["ok"], true, "a copy failed: {v}");
                            v["result"].to_string()
                        })
                        .collect();
                    assert_eq!(results.len(), 1, "every copy gets the one stored result");
                    (elapsed, back)
                });
                conns = back;
                storms += 1;
                total += elapsed;
            }
            total
        })
    });
    g.finish();
    table::write_extra(
        "storm",
        &json!({"storms": storms, "executions_per_storm": 1}),
    );
    drop((control, conns));
    srv.block_on(polaris.stop());
}

// ---------------------------------------------------------------------------------------------
// Memory: bytes of book per completed receipt (beyond its reply) and per tombstone

fn page_fill_request(task: &str, i: usize) -> String {
    fingerprint(
        "page.fill",
        &json!({"taskId": task, "target": "#title", "value": format!("Hello {i}")}),
    )
}

fn receipt_key(i: usize) -> RequestKey {
    let id = uuid::Uuid::from_u128(
        0x9b1d_eb4d_3b7d_4bad_9bdd_2b0d_7b3d_cb6du128.wrapping_mul(i as u128 + 1),
    );
    RequestKey::new(&id.hyphenated().to_string())
}

/// Fills a book with `n` completed page.fill receipts sharing one reply (so the reply is not
/// counted) and returns the book and the bytes it took.
fn filled_book(n: usize, task: &polaris::tasks::TaskId, reply: &Arc<Outcome>) -> (Book, isize) {
    let base = allocated();
    let mut book = Book::new(n, n);
    for i in 0..n {
        let key = receipt_key(i);
        book.insert_running(
            key.clone(),
            StoredRequest::from_text("page.fill", &page_fill_request(task, i), Some(task)),
            Method::PageFill,
            Some(task.clone()),
            1,
        )
        .expect("room in the book");
        assert!(book.complete(&key, reply.clone(), 2));
    }
    let bytes = allocated() - base;
    (book, bytes)
}

fn memory(quick: bool) {
    let task: polaris::tasks::TaskId = uuid().into();
    let reply = Outcome::ok(&json!({"target": "#title", "value": "Hello"}));
    let sizes: &[usize] = if quick {
        &[1_000]
    } else {
        &[1_000, 10_000, 100_000, 1_000_000]
    };
    let mut receipts = json!({});
    let mut tombstones = json!({});
    COUNTING.store(true, Ordering::SeqCst);
    for &n in sizes {
        let base = allocated();
        let (mut book, bytes) = filled_book(n, &task, &reply);
        let per_receipt = bytes as f64 / n as f64;
        // Clear everything in operator-sized batches.
        let keys: Vec<RequestKey> = (0..n).map(receipt_key).collect();
        let keys_bytes = allocated() - base - bytes;
        for chunk in keys.chunks(100_000) {
            book.clear(chunk, 3, Arc::from("cleared by the memory benchmark"))
                .expect("room for tombstones");
        }
        assert_eq!(book.used(), 0);
        assert_eq!(book.tombstones(), n);
        let per_tombstone = (allocated() - base - keys_bytes) as f64 / n as f64;
        println!("memory, {n} receipts: {per_receipt:.1} B per completed receipt beyond its reply; {per_tombstone:.1} B per tombstone");
        receipts[n.to_string()] = json!(per_receipt);
        tombstones[n.to_string()] = json!(per_tombstone);
        drop(keys);
        drop(book);
    }
    COUNTING.store(false, Ordering::SeqCst);
    table::write_extra(
        "memory",
        &json!({"receipt_bytes": receipts, "tombstone_bytes": tombstones}),
    );
}

// ---------------------------------------------------------------------------------------------
// Growth: the replay round trip with 1,000 and 1,000,000 receipts in the book

/// Fills the host's book to `n` receipts with fresh page.fill requests, in-process.
fn fill_host(srv: &Runtime, host: &Host, task: &str, n: usize) {
    srv.block_on(async {
        let params = json!({"taskId": task, "target": "#title", "value": "Hello"});
        let mut filled = host.run_status_used();
        while filled < n {
            let batch = (n - filled).min(1000);
            let waits: Vec<_> = (0..batch)
                .filter_map(|_| match host.handle(&uuid(), "page.fill", &params) {
                    Handled::Later(f) => Some(f),
                    Handled::Ready(_) | Handled::Replay(_) | Handled::Joined(_) => None,
                })
                .collect();
            futures::future::join_all(waits).await;
            filled += batch;
        }
    });
}

trait Used {
    fn run_status_used(&self) -> usize;
}

impl Used for Host {
    fn run_status_used(&self) -> usize {
        let reply = match self.handle(&uuid(), "run.status", &json!({})) {
            Handled::Ready(l) => l,
            Handled::Later(_) | Handled::Replay(_) | Handled::Joined(_) => {
                unreachable!("run.status answers at once")
            }
        };
        let v: Value = serde_json::from_slice(&reply).unwrap();
        v["result"]["receipts"]["used"].as_u64().unwrap() as usize
    }
}

fn growth(c: &mut Criterion, srv: &Runtime, cli: &Runtime, quick: bool) {
    let dir = temp_dir();
    let polaris = start_polaris(srv, dir.path(), 2_000_000);
    let bridge = dir.path().join("bridge.sock");
    let (mut conn, task, replay_line) = cli.block_on(async {
        let mut conn = connect(&bridge).await;
        let task = start_task(&mut conn).await;
        let replay_line = fill_line(&task);
        conn.call(&replay_line).await;
        (conn, task, replay_line)
    });
    let mut g = c.benchmark_group("growth_replay");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let sizes: &[usize] = if quick { &[1_000] } else { &[1_000, 1_000_000] };
    for &n in sizes {
        fill_host(srv, &polaris.host, &task, n);
        g.bench_function(format!("{n}_receipts"), |b| {
            b.iter_custom(|iters| {
                cli.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        conn.call(&replay_line).await;
                    }
                    start.elapsed()
                })
            })
        });
    }
    g.finish();
    drop(conn);
    srv.block_on(polaris.stop());
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let quick = test_mode();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
        .configure_from_args();
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    table::write_extra("machine", &json!({"cpu": machine, "cores": cores}));

    if wanted("memory") {
        memory(quick);
    }
    // The hosts and baselines share one server runtime (as `polaris serve` would have on this
    // machine); the clients run on their own single thread.
    let srv = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores.min(2))
        .enable_all()
        .build()
        .unwrap();
    let cli = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if wanted("round_trip") {
        round_trip(&mut c, &srv, &cli);
    }
    if wanted("throughput") {
        throughput(&mut c, &srv, &cli);
    }
    if wanted("redis") {
        redis(quick);
    }
    if wanted("duplicate_storm") {
        storm(&mut c, &srv, &cli);
    }
    if wanted("growth") {
        growth(&mut c, &srv, &cli, quick);
    }
    c.final_summary();
    println!("\nPolaris performance budget ({machine}, {cores} cores), ratios against baselines measured in this run:\n");
    println!("{}", table::render());
}
