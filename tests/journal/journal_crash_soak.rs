//! The crash soak (SPEC §11): a real `polaris serve --fixture-effects F` process, 32 clients
//! that re-send every request under its ID until it is answered, and SIGKILL at random moments,
//! more than 20 times, each followed by a restart on the same socket directory and journal.
//!
//! At the end: no request ID has more than one effect line (the fixture writes and fsyncs a
//! line per applied submit, outside the host); every stored reply a client received is
//! replayed byte for byte; the receipts that were executing at each kill (counted by
//! `polaris journal check` on the dead host's journal) are exactly the ones that answer
//! `INTERRUPTED`; and `receipts.used` equals the IDs that were created.

use polaris_testkit::host::{polaris_bin, short_tempdir, sync_call};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

const CLIENTS: usize = 32;
const KILLS: usize = 22;

/// A small deterministic generator (the seed is printed, so a failure can be replayed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every reply a client received, by request ID: `(meta.receipt, the ok/result/error bytes)`.
type Replies = Arc<Mutex<HashMap<String, Vec<(String, String)>>>>;

/// The request line sent under each ID.
type Sent = Arc<Mutex<HashMap<String, String>>>;

/// The `"ok":…,"result"|"error":…` bytes of a reply line.
fn body(line: &str) -> String {
    let start = line.find(',').expect("a reply line has members") + 1;
    let end = line.rfind(",\"meta\":").expect("a host reply has meta");
    line[start..end].to_owned()
}

/// Sends one request and reads its reply, re-sending it under the same ID on a new connection
/// whenever the host is not there or the connection breaks, until it is answered.
async fn until_answered(
    bridge: &Path,
    (replies, sent): &(Replies, Sent),
    id: &str,
    method: &str,
    params: &Value,
) -> Value {
    let frame = format!(
        "{}\n",
        json!({"id": id, "method": method, "params": params})
    );
    sent.lock().unwrap().insert(id.to_owned(), frame.clone());
    loop {
        let Ok(stream) = UnixStream::connect(bridge).await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let (r, mut w) = stream.into_split();
        if w.write_all(frame.as_bytes()).await.is_err() {
            continue;
        }
        let mut line = String::new();
        match BufReader::new(r).read_line(&mut line).await {
            Ok(n) if n > 0 && line.ends_with('\n') => {
                let line = line.trim_end().to_owned();
                let v: Value = serde_json::from_str(&line).expect("a reply is JSON");
                let kind = v["meta"]["receipt"].as_str().unwrap_or("?").to_owned();
                replies
                    .lock()
                    .unwrap()
                    .entry(id.to_owned())
                    .or_default()
                    .push((kind, body(&line)));
                return v;
            }
            // Killed before it answered: the host may or may not have the request. Re-send.
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// One agent: start a task, fill, press Enter (a submit, late by a random delay), finish;
/// again and again until told to stop. A refusal (a task interrupted by a kill, blocked by an
/// uncertain submit) starts the next round.
async fn client(
    n: usize,
    seed: u64,
    bridge: PathBuf,
    replies: (Replies, Sent),
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng((seed ^ (n as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let id = |step: &str| format!("c{n}-r{round}-{step}");
        let delay = if rng.below(4) == 0 { 0 } else { rng.below(600) };
        let started = until_answered(
            &bridge,
            &replies,
            &id("start"),
            "task.start",
            &json!({"title": format!("client {n} round {round}"), "fixture": {"submitDelayMs": delay}}),
        )
        .await;
        let Some(task) = started["result"]["taskId"].as_str().map(str::to_owned) else {
            continue;
        };
        let steps = [
            (
                "fill",
                "page.fill",
                json!({"taskId": task, "target": "#title", "value": format!("v{round}")}),
            ),
            (
                "press",
                "page.press",
                json!({"taskId": task, "key": "Enter", "target": "#title",
                       "expect": {"target": "#status", "contains": "Saved"}}),
            ),
            ("finish", "task.finish", json!({"taskId": task})),
        ];
        for (step, method, params) in steps {
            let r = until_answered(&bridge, &replies, &id(step), method, &params).await;
            if r["ok"] != true {
                break;
            }
        }
    }
}

struct Host {
    root: PathBuf,
    child: Option<Child>,
    starts: usize,
}

impl Host {
    fn sockets(&self) -> PathBuf {
        self.root.join("s")
    }
    fn bridge(&self) -> PathBuf {
        self.sockets().join("bridge.sock")
    }
    fn journal(&self) -> PathBuf {
        self.root.join("j")
    }
    fn log(&self) -> String {
        std::fs::read_to_string(self.root.join(format!("serve-{}.log", self.starts)))
            .unwrap_or_default()
    }

    fn start(&mut self) {
        self.starts += 1;
        let log =
            std::fs::File::create(self.root.join(format!("serve-{}.log", self.starts))).unwrap();
        self.child = Some(
            Command::new(polaris_bin())
                .arg("serve")
                .arg("--socket-dir")
                .arg(self.sockets())
                .arg("--journal")
                .arg(self.journal())
                .arg("--audit-log")
                .arg(self.root.join("audit.jsonl"))
                .arg("--fixture-effects")
                .arg(self.root.join("effects.jsonl"))
                .args(["--action-timeout-ms", "400", "--capacity", "1000000"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("polaris serve starts"),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("polaris serve exited early ({status}): {}", self.log());
            }
            if sync_call(&self.bridge(), "host.hello", json!({})).is_ok_and(|r| r["ok"] == true) {
                return;
            }
            assert!(Instant::now() < deadline, "no answer: {}", self.log());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// `polaris journal check --json` on the journal of a dead host: how many receipts were
    /// begun and not completed when it died.
    fn running_in_journal(&self) -> u64 {
        let out = Command::new(polaris_bin())
            .args(["journal", "check", "--json", "--journal"])
            .arg(self.journal())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["running"].as_u64().unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_clients_through_twenty_two_kills_never_run_an_id_twice() {
    let seed = std::env::var("POLARIS_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash soak seed {seed} (POLARIS_SOAK_SEED={seed} replays the client choices)");
    let root = short_tempdir();
    let mut host = Host {
        root: root.path().to_owned(),
        child: None,
        starts: 0,
    };
    host.start();
    let replies: (Replies, Sent) = Default::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| {
            tokio::spawn(client(
                n,
                seed,
                host.bridge(),
                replies.clone(),
                stop.clone(),
            ))
        })
        .collect();

    let mut rng = Rng(seed);
    let mut interrupted_at_kills = 0;
    let soak_started = Instant::now();
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(100 + rng.below(500))).await;
        host.kill9();
        interrupted_at_kills += host.running_in_journal();
        host.start();
    }
    // Let the clients finish what they were doing (each re-sends until answered).
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    eprintln!(
        "{KILLS} kills in {:?}; {interrupted_at_kills} receipts were executing at a kill",
        soak_started.elapsed()
    );

    let sent = std::mem::take(&mut *replies.1.lock().unwrap());
    let replies = std::mem::take(&mut *replies.0.lock().unwrap());
    // Every ID whose receipt a client saw: its stored replies all agree.
    let mut created: HashMap<&str, &str> = HashMap::new();
    for (id, got) in &replies {
        let stored: Vec<&(String, String)> = got.iter().filter(|(k, _)| k != "none").collect();
        if let Some((_, first)) = stored.first() {
            for (kind, b) in &stored {
                assert_eq!(b, first, "{id}: a {kind} reply differs from the first");
            }
            created.insert(id, first);
        }
    }
    assert!(created.len() > 200, "the soak did work: {}", created.len());
    eprintln!("{} request IDs created", created.len());

    // Re-sent after all the restarts (pipelined on one connection), every request with a
    // stored reply is replayed byte for byte.
    let stream = UnixStream::connect(host.bridge()).await.unwrap();
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    let mut interrupted = 0;
    for (id, first) in &created {
        w.write_all(sent[*id].as_bytes()).await.unwrap();
        let line = lines.next_line().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], *id, "{line}");
        assert_eq!(v["meta"]["receipt"], "replayed", "{id}: {line}");
        assert_eq!(body(&line), *first, "{id}: replayed byte for byte");
        if v["error"]["code"] == "INTERRUPTED" {
            interrupted += 1;
        }
    }
    assert_eq!(
        interrupted, interrupted_at_kills,
        "exactly the receipts executing at a kill answer INTERRUPTED"
    );

    // At most one effect per request ID; every submit confirmed to a client landed once.
    let effects = std::fs::read_to_string(root.path().join("effects.jsonl")).unwrap_or_default();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for line in effects.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        *by_id
            .entry(v["requestId"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    for (id, n) in &by_id {
        assert_eq!(*n, 1, "{id} has {n} effect lines");
    }
    for (id, first) in &created {
        if id.ends_with("-press") && first.starts_with("\"ok\":true") {
            assert_eq!(by_id.get(*id), Some(&1), "{id} was answered ok: one effect");
        }
    }

    let status = sync_call(&host.bridge(), "run.status", json!({})).unwrap();
    assert_eq!(
        status["result"]["receipts"]["used"],
        created.len() as u64,
        "receipts.used counts every ID created, no more: {status}"
    );
    let mut child = host.child.take().unwrap();
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    );
    assert!(child.wait().unwrap().success(), "{}", host.log());
}
