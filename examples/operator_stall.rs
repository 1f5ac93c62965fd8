//! Whether an operator's scan of a full book stalls agents (SPEC §10): a real `polaris serve`
//! is filled with 1,000,000 receipts, then a bridge client measures `host.hello` round trips,
//! first with no operator load and then while another client runs `receipts.clearPrepare`
//! with `{"filter":{}}` over the whole book in a loop on the introspection socket, and while
//! it commits one clear of the whole book, until the journal's compaction that follows it has
//! ended. The operator runs in a process of its own (this
//! example started again with `--operator`): its replies are hundreds of megabytes, and
//! reading them in the measuring process would stall the bridge client there, not the host.
//!
//! `cargo build --release && cargo run --release --example operator_stall [RECEIPTS] [SAMPLES]`
//! (defaults 1000000 and 2000). It prints p50/p99/max of both phases and how many prepares ran.
//! `POLARIS_BIN=PATH` measures another build of `polaris` (a before/after comparison).
#[path = "support/release_binary.rs"]
mod release_binary;
use release_binary::polaris_bin;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A line client over a Unix socket.
struct Line {
    w: UnixStream,
    r: BufReader<UnixStream>,
    buf: String,
}

impl Line {
    fn connect(path: &Path) -> std::io::Result<Line> {
        let w = UnixStream::connect(path)?;
        let r = BufReader::with_capacity(1 << 20, w.try_clone()?);
        Ok(Line {
            w,
            r,
            buf: String::new(),
        })
    }

    fn send(&mut self, frame: &str) {
        self.w.write_all(frame.as_bytes()).expect("write");
    }

    fn read(&mut self) -> &str {
        self.buf.clear();
        let n = self.r.read_line(&mut self.buf).expect("read");
        assert!(n > 0, "the host closed the connection");
        &self.buf
    }
}

struct Host {
    child: Child,
    _dir: tempfile::TempDir,
    bridge: PathBuf,
    introspect: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_host(capacity: usize) -> Host {
    let dir = tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .expect("temp dir");
    let sockets = dir.path().join("s");
    let bin = std::env::var_os("POLARIS_BIN").map_or_else(polaris_bin, PathBuf::from);
    let child = Command::new(bin)
        .arg("serve")
        .arg("--socket-dir")
        .arg(&sockets)
        .arg("--audit-log")
        .arg(dir.path().join("audit.jsonl"))
        .arg("--capacity")
        .arg(capacity.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("polaris serve starts");
    let host = Host {
        child,
        bridge: sockets.join("bridge.sock"),
        introspect: sockets.join("introspect.sock"),
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Line::connect(&host.bridge).is_err() {
        assert!(Instant::now() < deadline, "polaris serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    host
}

/// The journal's valid bytes from `run.status` (`None`: the host keeps no journal).
fn journal_bytes(c: &mut Line) -> Option<u64> {
    c.send("{\"id\":\"stall-status\",\"method\":\"run.status\"}\n");
    let reply = c.read();
    let journal = reply.split("\"journal\":{").nth(1)?;
    let bytes = journal.split("\"bytes\":").nth(1)?;
    bytes
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Fills the book with `n` completed `page.fill` receipts over 4 pipelining connections.
fn fill(host: &Host, n: usize) {
    let mut c = Line::connect(&host.bridge).unwrap();
    c.send("{\"id\":\"stall-task\",\"method\":\"task.start\",\"params\":{\"title\":\"fill\"}}\n");
    let reply = c.read().to_owned();
    let task = reply
        .split("\"taskId\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("task.start answers a taskId")
        .to_owned();
    let per = (n - 1) / 4;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let bridge = host.bridge.clone();
            let task = task.clone();
            let count = if t == 3 { n - 1 - 3 * per } else { per };
            std::thread::spawn(move || {
                let mut c = Line::connect(&bridge).unwrap();
                let mut sent = 0;
                while sent < count {
                    let batch = 64.min(count - sent);
                    let mut frames = String::new();
                    for i in 0..batch {
                        let id = uuid::Uuid::from_u128(((t as u128) << 64) | (sent + i) as u128);
                        frames.push_str(&format!(
                            "{{\"id\":\"{id}\",\"method\":\"page.fill\",\"params\":{{\"taskId\":\"{task}\",\"target\":\"#title\",\"value\":\"v{i}\"}}}}\n"
                        ));
                    }
                    c.send(&frames);
                    for _ in 0..batch {
                        let line = c.read();
                        assert!(line.contains("\"ok\":true"), "fill refused: {line}");
                    }
                    sent += batch;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("filler");
    }
}

/// `samples` sequential `host.hello` round trips on the bridge, 1 ms apart; microseconds each.
fn hellos(host: &Host, samples: usize) -> Vec<u64> {
    let mut c = Line::connect(&host.bridge).unwrap();
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let t = Instant::now();
        c.send(&format!(
            "{{\"id\":\"hello-{i}\",\"method\":\"host.hello\"}}\n"
        ));
        let line = c.read();
        out.push(t.elapsed().as_micros() as u64);
        assert!(line.contains("\"ok\":true"), "{line}");
        std::thread::sleep(Duration::from_millis(1));
    }
    out
}

fn summary(name: &str, mut us: Vec<u64>) {
    us.sort_unstable();
    let at = |q: f64| us[((us.len() as f64 * q) as usize).min(us.len() - 1)];
    println!(
        "{name:<32} n={:<5} p50={:>7.3} ms  p99={:>7.3} ms  max={:>8.3} ms",
        us.len(),
        at(0.50) as f64 / 1000.0,
        at(0.99) as f64 / 1000.0,
        *us.last().unwrap() as f64 / 1000.0
    );
}

/// The operator's side, run as a process of its own (`operator_stall --operator SOCKET`), so
/// that reading its replies of hundreds of megabytes (allocating and unmapping them holds that
/// process's memory map lock) never delays the bridge client's round trips in the measuring
/// process. It reads commands on stdin, one per line:
///
/// - `loop`: `clearPrepare {"filter":{}}` over and over until stdin's next line arrives; then it
///   prints `prepares N mean_ms M`;
/// - `prepare`: one prepare; prints `prepared`;
/// - `commit`: commits that prepare; prints `committed MS`.
fn operator(introspect: &Path) {
    let mut c = Line::connect(introspect).unwrap();
    let mut out = std::io::stdout().lock();
    let mut command = String::new();
    let mut token = String::new();
    let mut i = 0;
    loop {
        command.clear();
        if std::io::stdin().read_line(&mut command).unwrap() == 0 {
            return;
        }
        match command.trim() {
            "loop" => {
                // Another line on stdin ends the loop: a reader thread says when it came.
                let stop = Arc::new(AtomicBool::new(false));
                let watcher = {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        let mut line = String::new();
                        let _ = std::io::stdin().lock().read_line(&mut line);
                        stop.store(true, Ordering::Relaxed);
                    })
                };
                let (mut n, mut ms) = (0u64, 0u128);
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    c.send(&format!(
                        "{{\"id\":\"prep-{i}\",\"method\":\"receipts.clearPrepare\",\"params\":{{\"filter\":{{}}}}}}\n"
                    ));
                    let line = c.read();
                    assert!(
                        line.contains("\"token\""),
                        "{}",
                        &line[..line.len().min(300)]
                    );
                    ms += t.elapsed().as_millis();
                    n += 1;
                    i += 1;
                }
                watcher.join().unwrap();
                writeln!(out, "prepares {n} mean_ms {}", ms / u128::from(n.max(1))).unwrap();
            }
            "prepare" => {
                c.send("{\"id\":\"last-prepare\",\"method\":\"receipts.clearPrepare\",\"params\":{\"filter\":{}}}\n");
                let line = c.read();
                token = line
                    .split("\"token\":\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .expect("the prepare answers a token")
                    .to_owned();
                writeln!(out, "prepared").unwrap();
            }
            "commit" => {
                let t = Instant::now();
                c.send(&format!(
                    "{{\"id\":\"commit\",\"method\":\"receipts.clearCommit\",\"params\":{{\"token\":\"{token}\",\"reason\":\"measure\"}}}}\n"
                ));
                let line = c.read();
                assert!(
                    line.contains("\"ok\":true"),
                    "{}",
                    &line[..line.len().min(300)]
                );
                writeln!(out, "committed {}", t.elapsed().as_millis()).unwrap();
            }
            other => panic!("unknown operator command {other:?}"),
        }
        out.flush().unwrap();
    }
}

/// The operator process: commands on its stdin, answers on its stdout.
struct Operator {
    child: Child,
    answers: BufReader<std::process::ChildStdout>,
}

impl Operator {
    fn start(introspect: &Path) -> Operator {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg("--operator")
            .arg(introspect)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the operator process starts");
        let answers = BufReader::new(child.stdout.take().unwrap());
        Operator { child, answers }
    }

    fn tell(&mut self, command: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{command}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    fn answer(&mut self) -> String {
        let mut line = String::new();
        self.answers.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the operator process stopped");
        line.trim().to_owned()
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("--operator") {
        operator(Path::new(&args.next().expect("--operator SOCKET")));
        return;
    }
    let receipts: usize = first.map_or(1_000_000, |a| a.parse().expect("RECEIPTS"));
    let samples: usize = args.next().map_or(2000, |a| a.parse().expect("SAMPLES"));
    let host = start_host(receipts + 10);
    let t = Instant::now();
    fill(&host, receipts);
    println!(
        "filled {receipts} receipts in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let idle = hellos(&host, samples);

    // The operator, in its own process, prepares in a loop while hellos are sampled.
    let mut op = Operator::start(&host.introspect);
    op.tell("loop");
    // The first prepare is under way before measuring.
    std::thread::sleep(Duration::from_millis(200));
    let loaded = hellos(&host, samples);
    op.tell("stop");
    let prepares = op.answer();

    // One more prepare over the whole book, then its commit, while hellos are sampled.
    op.tell("prepare");
    assert_eq!(op.answer(), "prepared");
    let committing = Arc::new(AtomicBool::new(true));
    let sampler = {
        let committing = committing.clone();
        let bridge = host.bridge.clone();
        std::thread::spawn(move || {
            let mut c = Line::connect(&bridge).unwrap();
            let mut out = Vec::new();
            let mut i = 0;
            while committing.load(Ordering::Relaxed) {
                let t = Instant::now();
                c.send(&format!(
                    "{{\"id\":\"c-hello-{i}\",\"method\":\"host.hello\"}}\n"
                ));
                c.read();
                out.push(t.elapsed().as_micros() as u64);
                i += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            out
        })
    };
    // The journal's size before the commit: the compaction a large clear starts is over when
    // it has shrunk, and the bridge is sampled until then, not only until the commit's reply.
    let mut status = Line::connect(&host.bridge).unwrap();
    let before = journal_bytes(&mut status);
    op.tell("commit");
    let committed = op.answer();
    let compacted = before.map(|before| {
        let t = Instant::now();
        while journal_bytes(&mut status).is_some_and(|b| b >= before)
            && t.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        t.elapsed()
    });
    committing.store(false, Ordering::Relaxed);
    let during_commit = sampler.join().expect("sampler");
    drop(op.child.stdin.take());
    let _ = op.child.wait();

    println!("bridge host.hello over a book of {receipts} receipts (operator in its own process):");
    summary("  no operator load", idle);
    summary("  clearPrepare {filter:{}} loop", loaded);
    summary(
        "  clearCommit of the whole book, then the compaction",
        during_commit,
    );
    println!("  operator: {prepares} (reply included); {committed} ms for the commit");
    if let Some(after) = compacted {
        println!(
            "  the journal's compaction ended {:.0} ms after the commit's reply",
            after.as_secs_f64() * 1e3
        );
    }
}
