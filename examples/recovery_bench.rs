//! How long a host takes to recover a journal of N receipts (SPEC §11: a million in ≤ 3 s).
//!
//! `cargo build --release && cargo run --release --example recovery_bench [RECEIPTS] [RUNS] [DIR]`
//! (defaults 1000000, 3, a temporary directory under `target/`). Writes a journal through the
//! journal API as a host would: one run, a task started every 100 receipts (`task.start` with
//! its task record), the other receipts `page.fill`s on the current task with ~150-byte
//! canonical requests and replies, each begun and then completed. Then, RUNS times each, with
//! the file in the page cache (a restart soon after a crash):
//!
//! - (a) `journal::check`: reading and checking the file, read-only;
//! - (b) `Journal::open`: the read and the fold into what the host rebuilds;
//! - (c) `target/release/polaris serve --journal DIR` from spawn until `host.hello` answers on
//!   the bridge socket: what a user waits for.
//!
//! Prints each run and the median; (c) also gives the host's CPU time until it answered (user +
//! system, from `/proc`), which a busy machine disturbs less than the wall time.
//! `POLARIS_BIN=path` times another build of the host.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use polaris::book::RequestKey;
use polaris::journal::{
    Begun, Completed, Journal, Options, Record, RequestPieces, TaskEvent, TaskRecord,
};

const RUN: &str = "6a0c1a44-7d1e-4f57-9a3b-4c1d2e3f4a5b";

fn uuid(hi: u64, n: u64) -> String {
    uuid::Uuid::from_u64_pair(hi, 0x8000_0000_0000_0000 | n).to_string()
}

fn write_journal(dir: &Path, receipts: u64) -> u64 {
    let _ = std::fs::remove_dir_all(dir);
    let (j, _) = Journal::open(dir, Options::default()).unwrap();
    j.append(&Record::RunStarted {
        run_id: RUN,
        started_at: 1_700_000_000_000,
    })
    .unwrap();
    let mut last = None;
    let mut task = String::new();
    let mut n = 0;
    while n < receipts {
        let chunk = (receipts - n).min(1000);
        let ids: Vec<RequestKey> = (n..n + chunk)
            .map(|i| RequestKey::new(&uuid(0x1000_0000_0000_4000, i)))
            .collect();
        let mut reqs = Vec::with_capacity(chunk as usize);
        let mut reps = Vec::with_capacity(chunk as usize);
        let mut tasks = Vec::with_capacity(chunk as usize);
        for i in n..n + chunk {
            if i.is_multiple_of(100) {
                task = uuid(0x2000_0000_0000_4000, i);
                reqs.push(format!(
                    r#"{{"method":"task.start","params":{{"title":"write the post about the journal, part {i:>10}","url":"https://example.com/"}}}}"#
                ));
                reps.push(format!(
                    r#""ok":true,"result":{{"taskId":"{task}","state":"open","title":"write the post about the journal, part {i:>10}"}}"#
                ));
            } else {
                reqs.push(format!(
                    r##"{{"method":"page.fill","params":{{"target":"#title","taskId":"{task}","value":"a post about the journal, number {i:>12}"}}}}"##
                ));
                reps.push(format!(
                    r##""ok":true,"result":{{"target":"#title","value":"a post about the journal, number {i:>12}"}}"##
                ));
            }
            tasks.push(task.clone());
        }
        let title = "write the post about the journal";
        let detail = br#"{"url":"https://example.com/","stopReason":null}"#;
        let mut records = Vec::with_capacity(chunk as usize * 3);
        for k in 0..chunk as usize {
            let i = n + k as u64;
            let start = i.is_multiple_of(100);
            let at = 1_700_000_000_000 + i as i64;
            records.push(Record::ReceiptBegun(Begun {
                request_id: &ids[k],
                run_id: RUN,
                method: if start { "task.start" } else { "page.fill" },
                task_id: (!start).then_some(tasks[k].as_str()),
                request: RequestPieces::whole(&reqs[k]),
                at,
            }));
            records.push(Record::ReceiptCompleted(Completed {
                request_id: &ids[k],
                reply: reps[k].as_bytes(),
                at: at + 1,
            }));
            if start {
                records.push(Record::Task(TaskRecord {
                    event: TaskEvent::Started,
                    task_id: &tasks[k],
                    run_id: RUN,
                    created_at: at,
                    at: at + 1,
                    title,
                    state: "open",
                    pending: b"",
                    detail,
                    closed_at: None,
                }));
            }
        }
        last = Some(j.append_batch(&records).unwrap());
        n += chunk;
    }
    if let Some(t) = last {
        t.wait().unwrap();
    }
    let bytes = j.stats().bytes;
    j.close().unwrap();
    bytes
}

fn hello(bridge: &Path) -> bool {
    use std::io::{BufRead, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(bridge) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"{\"id\":\"bench-hello\",\"method\":\"host.hello\",\"params\":{}}\n")
        .is_err()
    {
        return false;
    }
    let mut line = String::new();
    let _ = std::io::BufReader::new(s).read_line(&mut line);
    line.contains("\"ok\":true")
}

/// CPU seconds (user + system) process `pid` has used so far, from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let hz = rustix::param::clock_ticks_per_second() as f64;
    (ticks(11) + ticks(12)) / hz
}

/// Spawns `polaris serve` on the journal and returns the time until `host.hello` answers and
/// the CPU time the host had used by then (what recovery costs whatever else runs on the
/// machine).
fn serve_until_hello(bin: &Path, root: &Path, journal: &Path) -> (f64, f64) {
    let sockets = root.join("s");
    let _ = std::fs::remove_dir_all(&sockets);
    let log = std::fs::File::create(root.join("serve.log")).unwrap();
    let t = Instant::now();
    let mut child = Command::new(bin)
        .arg("serve")
        .arg("--socket-dir")
        .arg(&sockets)
        .arg("--audit-log")
        .arg(root.join("audit.jsonl"))
        .arg("--fixture-effects")
        .arg(root.join("effects.jsonl"))
        .arg("--journal")
        .arg(journal)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("polaris serve starts");
    let bridge = sockets.join("bridge.sock");
    let took = loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "polaris serve exited ({status}): {}",
                std::fs::read_to_string(root.join("serve.log")).unwrap_or_default()
            );
        }
        if hello(&bridge) {
            break (t.elapsed().as_secs_f64(), cpu_seconds(child.id()));
        }
        assert!(t.elapsed() < Duration::from_secs(120), "no answer");
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    );
    child.wait().unwrap();
    took
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let receipts: u64 = args.get(1).map_or(1_000_000, |s| s.parse().unwrap());
    let runs: usize = args.get(2).map_or(3, |s| s.parse().unwrap());
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root: PathBuf = args
        .get(3)
        .map_or_else(|| manifest.join("target/recovery-bench"), PathBuf::from);
    let bin = std::env::var_os("POLARIS_BIN")
        .map_or_else(|| manifest.join("target/release/polaris"), PathBuf::from);
    assert!(
        bin.exists(),
        "build the host first: cargo build --release (looked for {})",
        bin.display()
    );
    std::fs::create_dir_all(&root).unwrap();
    let master = root.join("master");
    let t = Instant::now();
    let bytes = write_journal(&master, receipts);
    println!(
        "{receipts} receipts, {:.1} MiB journal ({:.0} bytes per receipt), written in {:.1} s",
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / receipts as f64,
        t.elapsed().as_secs_f64()
    );
    // Each serve adds one run record to the journal, nothing else (no request is sent).
    let (mut a, mut b, mut c, mut cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 1..=runs {
        let t = Instant::now();
        let report = polaris::journal::check(&master).unwrap();
        a.push(t.elapsed().as_secs_f64());
        assert_eq!(report.receipts, receipts);
        let t = Instant::now();
        let (j, r) = Journal::open(&master, Options::default()).unwrap();
        b.push(t.elapsed().as_secs_f64());
        assert_eq!(r.receipts.len() as u64, receipts);
        drop(r);
        j.close().unwrap();
        drop(j);
        let (wall, used) = serve_until_hello(&bin, &root, &master);
        c.push(wall);
        cpu.push(used);
        println!(
            "run {run}: (a) check {:.2} s  (b) Journal::open {:.2} s  (c) serve until host.hello {:.2} s ({:.2} s of CPU)",
            a[run - 1],
            b[run - 1],
            c[run - 1],
            cpu[run - 1]
        );
    }
    println!(
        "p50 of {runs}: (a) check {:.2} s  (b) Journal::open {:.2} s  (c) serve until host.hello {:.2} s ({:.2} s of CPU)",
        median(a),
        median(b),
        median(c),
        median(cpu)
    );
    let _ = std::fs::remove_dir_all(&root);
}
