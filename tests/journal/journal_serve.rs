//! The journal through the real binary (SPEC §11): a `polaris serve` process killed and
//! restarted on the same directories replays what it answered, stores what it was executing as
//! `INTERRUPTED`, keeps its tasks as `interrupted`, refuses a second host on its journal, and
//! lets an operator acknowledge and clear; `--no-journal` forgets; `polaris journal check`
//! reads it.

use polaris_testkit::host::{
    err, history, ok, polaris_bin, receipt, saved, short_tempdir, start_task, sync_call, Conn,
};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A `polaris serve` process on directories that outlive it, so it can be killed and
/// restarted on the same socket directory and journal.
struct Served {
    root: PathBuf,
    child: Option<Child>,
    run_id: String,
    starts: usize,
}

impl Served {
    fn sockets(root: &Path) -> PathBuf {
        root.join("s")
    }

    fn start(root: &Path, extra: &[&str]) -> Served {
        let mut s = Served {
            root: root.to_owned(),
            child: None,
            run_id: String::new(),
            starts: 0,
        };
        s.restart(extra);
        s
    }

    /// Spawns `polaris serve` (the previous process must be gone) and waits until it answers.
    fn restart(&mut self, extra: &[&str]) {
        self.starts += 1;
        let log =
            std::fs::File::create(self.root.join(format!("serve-{}.log", self.starts))).unwrap();
        let child = Command::new(polaris_bin())
            .arg("serve")
            .arg("--socket-dir")
            .arg(Self::sockets(&self.root))
            .arg("--audit-log")
            .arg(self.root.join("audit.jsonl"))
            .arg("--fixture-effects")
            .arg(self.root.join("effects.jsonl"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("polaris serve starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("polaris serve exited early ({status}): {}", self.log());
            }
            if let Ok(r) = sync_call(&self.bridge(), "host.hello", json!({})) {
                if r["ok"] == true {
                    self.run_id = r["result"]["runId"].as_str().unwrap().to_owned();
                    return;
                }
            }
            assert!(Instant::now() < deadline, "no answer: {}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root.join(format!("serve-{}.log", self.starts)))
            .unwrap_or_default()
    }

    fn bridge(&self) -> PathBuf {
        Self::sockets(&self.root).join("bridge.sock")
    }

    fn introspect(&self) -> PathBuf {
        Self::sockets(&self.root).join("introspect.sock")
    }

    async fn conn(&self) -> Conn {
        Conn::connect(&self.bridge()).await
    }

    /// SIGKILL: no shutdown, no flush, no cleanup.
    fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM; returns the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::TERM,
        );
        child.wait().unwrap()
    }

    /// The effect lines the fixture recorded, by request ID.
    fn effects(&self) -> std::collections::HashMap<String, usize> {
        let text = std::fs::read_to_string(self.root.join("effects.jsonl")).unwrap_or_default();
        let mut by_id = std::collections::HashMap::new();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).expect("an effect line is JSON");
            *by_id
                .entry(v["requestId"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        by_id
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The `"ok":…,"result"|"error":…` bytes of a raw reply line (what a replay repeats).
fn body(line: &str) -> &str {
    let start = line.find(',').expect("a reply line has members") + 1;
    let end = line.rfind(",\"meta\":").expect("a host reply has meta");
    &line[start..end]
}

fn journal_args(root: &Path) -> Vec<String> {
    vec!["--journal".into(), root.join("j").display().to_string()]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// One request on an introspection connection.
async fn introspect(host: &Served, method: &str, params: Value) -> Value {
    let mut c = Conn::connect(&host.introspect()).await;
    c.call(method, params).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_replays_every_stored_reply_byte_for_byte_and_keeps_its_tasks() {
    let root = short_tempdir();
    let extra = journal_args(root.path());
    let mut host = Served::start(root.path(), &args(&extra));
    let first_run = host.run_id.clone();
    let mut c = host.conn().await;
    let start = json!({"title": "post", "fixture": {}});
    let (started, start_line) = {
        c.send("start-1", "task.start", start.clone()).await;
        c.wait_raw("start-1").await
    };
    let task = ok(&started)["taskId"].as_str().unwrap().to_owned();
    let requests = [
        (
            "fill-1",
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "hello"}),
        ),
        (
            "press-1",
            "page.press",
            json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()}),
        ),
        // A stored error: filling a reserved target fails definitively.
        (
            "bad-1",
            "page.fill",
            json!({"taskId": task, "target": "#status", "value": "x"}),
        ),
    ];
    let mut lines = vec![("start-1", "task.start", start, start_line)];
    for (id, method, params) in &requests {
        c.send(id, method, params.clone()).await;
        let (reply, line) = c.wait_raw(id).await;
        assert_eq!(receipt(&reply), "new", "{line}");
        lines.push((id, method, params.clone(), line));
    }
    assert!(lines[3].3.contains("ACTION_FAILED"), "{}", lines[3].3);
    drop(c);

    host.kill9();
    host.restart(&args(&extra));
    assert_ne!(host.run_id, first_run, "a restart is a new run");
    let mut c = host.conn().await;
    for (id, method, params, first) in &lines {
        c.send(id, method, params.clone()).await;
        let (reply, line) = c.wait_raw(id).await;
        assert_eq!(receipt(&reply), "replayed", "{line}");
        assert_eq!(body(&line), body(first), "{id} replays byte for byte");
        let status = ok(&c.call("receipt.status", json!({"requestId": id})).await).clone();
        assert_eq!(status["runId"], first_run.as_str(), "{status}");
    }
    // The press applied once, before the kill; nothing ran again.
    assert_eq!(host.effects().get("press-1"), Some(&1));
    assert_eq!(host.effects().len(), 1);
    let status = c.call("run.status", json!({})).await;
    let status = ok(&status);
    assert_eq!(status["receipts"]["used"], 4, "{status}");
    assert_eq!(status["tasks"]["interrupted"], 1, "{status}");
    assert_eq!(status["executor"]["mutations"], 0, "{status}");
    let journal = &status["journal"];
    assert_eq!(
        journal["path"],
        root.path().join("j/journal.log").display().to_string()
    );
    assert!(journal["records"].as_u64().unwrap() >= 9, "{journal}");
    assert!(journal["bytes"].as_u64().unwrap() > 0, "{journal}");

    // The task of the earlier run: readable, closed to mutations, its run no longer current.
    let t = c.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&t)["state"], "interrupted", "{t}");
    assert_eq!(ok(&t)["runId"], first_run.as_str(), "{t}");
    let history = history(ok(&t));
    assert_eq!(
        history,
        [
            "task.start ok",
            "page.fill ok",
            "page.press ok",
            "page.fill ACTION_FAILED"
        ],
        "the history is rebuilt from the receipts"
    );
    let refused = c
        .call(
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "again"}),
        )
        .await;
    let e = err(&refused, "TASK_CLOSED");
    assert_eq!(e["delivery"], "not_executed");
    assert_eq!(e["details"]["state"], "interrupted");
    assert_eq!(e["details"]["runId"], first_run.as_str());
    let resumed = c
        .call("task.resume", json!({"taskId": task, "runId": first_run}))
        .await;
    err(&resumed, "RUN_NOT_CURRENT");
    let snapshot = introspect(&host, "snapshot", json!({})).await;
    assert!(ok(&snapshot)["journal"]["bytes"].as_u64().unwrap() > 0);
    let exit = host.terminate();
    assert!(exit.success(), "{exit}: {}", host.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_slow_submit_leaves_it_interrupted_never_rerun_then_acknowledged_and_cleared(
) {
    let root = short_tempdir();
    let mut extra = journal_args(root.path());
    extra.extend(["--action-timeout-ms".to_string(), "10000".to_string()]);
    let mut host = Served::start(root.path(), &args(&extra));
    let first_run = host.run_id.clone();
    let mut c = host.conn().await;
    let start = json!({"title": "slow", "fixture": {"submitDelayMs": 3000}});
    let started = c.call_id("start-slow", "task.start", start.clone()).await;
    let task = ok(&started)["taskId"].as_str().unwrap().to_owned();
    let press = json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()});
    c.send("press-slow", "page.press", press.clone()).await;
    // Wait until the host has it running and its begin is on disk (a receipt killed before
    // that was never executed and is rightly unknown after a restart), then kill it mid-submit.
    let mut probe = host.conn().await;
    loop {
        let s = probe
            .call("receipt.status", json!({"requestId": "press-slow"}))
            .await;
        if ok(&s)["state"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    loop {
        let out = Command::new(polaris_bin())
            .args(["journal", "check", "--json", "--journal"])
            .arg(root.path().join("j"))
            .output()
            .expect("polaris journal check runs");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if report["running"].as_u64() >= Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    host.kill9();
    assert!(c.read_line().await.is_none(), "the kill cut the connection");

    host.restart(&args(&extra));
    let mut c = host.conn().await;
    let again = c.call_id("press-slow", "page.press", press.clone()).await;
    assert_eq!(receipt(&again), "replayed", "{again}");
    let e = err(&again, "INTERRUPTED");
    assert_eq!(e["delivery"], "uncertain");
    assert_eq!(e["details"]["runId"], first_run.as_str());
    assert_eq!(e["details"]["next"]["method"], "task.status");
    // The task.start re-sent under its ID is the stored reply, not a second task.
    let restarted = c.call_id("start-slow", "task.start", start).await;
    assert_eq!(receipt(&restarted), "replayed");
    assert_eq!(ok(&restarted)["taskId"], task.as_str());
    assert_eq!(
        host.effects().get("press-slow"),
        None,
        "the submit never landed"
    );
    let verified = c.call("task.verifyOutcome", json!({"taskId": task})).await;
    assert_eq!(ok(&verified)["state"], "interrupted", "{verified}");
    assert_eq!(ok(&verified)["outcome"], "unknown", "{verified}");

    // Not clearable until a person acknowledges it.
    let prepared = introspect(
        &host,
        "receipts.clearPrepare",
        json!({"requestIds": ["press-slow"]}),
    )
    .await;
    assert_eq!(ok(&prepared)["clearable"], json!([]), "{prepared}");
    assert_eq!(
        ok(&prepared)["refused"][0]["reason"],
        "unverified_outcome",
        "{prepared}"
    );
    // Acknowledging something that is not uncertain is refused and changes nothing.
    let not_uncertain = introspect(
        &host,
        "outcome.acknowledge",
        json!({"requestId": "start-slow", "reason": "no"}),
    )
    .await;
    err(&not_uncertain, "BAD_REQUEST");
    let out = Command::new(polaris_bin())
        .args([
            "acknowledge",
            "press-slow",
            "--reason",
            "checked the backend",
        ])
        .arg("--socket-dir")
        .arg(Served::sockets(root.path()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let audit = std::fs::read_to_string(root.path().join("audit.jsonl")).unwrap();
    let line: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(line["acknowledged"]["requestId"], "press-slow", "{line}");
    assert_eq!(line["acknowledged"]["code"], "INTERRUPTED", "{line}");
    assert_eq!(line["reason"], "checked the backend");
    let prepared = introspect(
        &host,
        "receipts.clearPrepare",
        json!({"requestIds": ["press-slow"]}),
    )
    .await;
    let token = ok(&prepared)["token"].as_str().unwrap().to_owned();
    assert_eq!(ok(&prepared)["clearable"][0]["requestId"], "press-slow");
    let committed = introspect(
        &host,
        "receipts.clearCommit",
        json!({"token": token, "reason": "settled"}),
    )
    .await;
    assert_eq!(ok(&committed)["cleared"], 1, "{committed}");

    // The acknowledgement and the clear outlive the next restart too.
    host.kill9();
    host.restart(&args(&extra));
    let mut c = host.conn().await;
    let cleared = c.call_id("press-slow", "page.press", press).await;
    assert_eq!(err(&cleared, "RECEIPT_CLEARED")["delivery"], "cleared");
    assert_eq!(
        ok(&c.call("run.status", json!({})).await)["receipts"]["used"],
        1
    );
    assert_eq!(host.effects().get("press-slow"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_host_on_the_same_journal_is_refused_naming_the_directory() {
    let root = short_tempdir();
    let extra = journal_args(root.path());
    let _host = Served::start(root.path(), &args(&extra));
    let other = short_tempdir();
    let out = Command::new(polaris_bin())
        .arg("serve")
        .arg("--socket-dir")
        .arg(other.path().join("s"))
        .arg("--audit-log")
        .arg(other.path().join("audit.jsonl"))
        .args(&extra)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&root.path().join("j").display().to_string()) && stderr.contains("in use"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_journal_forgets_at_restart() {
    let root = short_tempdir();
    let mut host = Served::start(root.path(), &["--no-journal"]);
    let mut c = host.conn().await;
    let start = json!({"title": "forgotten"});
    let first = c.call_id("start-x", "task.start", start.clone()).await;
    assert_eq!(receipt(&first), "new");
    let status = c.call("run.status", json!({})).await;
    assert!(ok(&status).get("journal").is_none(), "{status}");
    assert!(host.terminate().success());
    host.restart(&["--no-journal"]);
    let mut c = host.conn().await;
    let second = c.call_id("start-x", "task.start", start).await;
    assert_eq!(
        receipt(&second),
        "new",
        "a run without a journal starts empty"
    );
    assert_ne!(ok(&second)["taskId"], ok(&first)["taskId"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_check_reports_counts_and_refuses_a_damaged_journal() {
    let root = short_tempdir();
    let extra = journal_args(root.path());
    let mut host = Served::start(root.path(), &args(&extra));
    let mut c = host.conn().await;
    for i in 0..3 {
        ok(&c
            .call_id(&format!("s{i}"), "task.start", json!({"title": "t"}))
            .await);
    }
    assert!(host.terminate().success());
    let check = |json_out: bool| {
        let mut cmd = Command::new(polaris_bin());
        cmd.args(["journal", "check", "--journal"])
            .arg(root.path().join("j"));
        if json_out {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = check(true);
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["receipts"], 3, "{report}");
    assert_eq!(report["running"], 0, "{report}");
    assert_eq!(report["tasks"], 3, "{report}");
    assert_eq!(report["runs"], 1, "{report}");
    let text = check(false);
    assert!(String::from_utf8_lossy(&text.stdout).contains("3 receipts"));

    // A flipped byte inside the first block (a later block is intact): corruption, not a tail.
    let log = root.path().join("j/journal.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[20 + 14] ^= 0xff;
    std::fs::write(&log, &bytes).unwrap();
    let out = check(false);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("corrupt") && stderr.contains("journal.log"),
        "{stderr}"
    );
    // And the host refuses to start on it, naming the file.
    let out = Command::new(polaris_bin())
        .arg("serve")
        .arg("--socket-dir")
        .arg(Served::sockets(root.path()))
        .args(&extra)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_most_receipts_compacts_the_journal_and_the_tombstones_survive_it() {
    let root = short_tempdir();
    let extra = journal_args(root.path());
    let mut host = Served::start(root.path(), &args(&extra));
    let mut c = host.conn().await;
    let ids: Vec<String> = (0..40).map(|i| format!("many-{i}")).collect();
    for id in &ids {
        ok(&c
            .call_id(id, "task.start", json!({"title": "a task with a title"}))
            .await);
    }
    let bytes = |s: &Value| ok(s)["journal"]["bytes"].as_u64().unwrap();
    let before = bytes(&c.call("run.status", json!({})).await);
    let prepared = introspect(&host, "receipts.clearPrepare", json!({"requestIds": ids})).await;
    let token = ok(&prepared)["token"].as_str().unwrap().to_owned();
    let committed = introspect(
        &host,
        "receipts.clearCommit",
        json!({"token": token, "reason": "done with them"}),
    )
    .await;
    assert_eq!(ok(&committed)["cleared"], 40, "{committed}");
    // The rewrite runs in the background after the clear.
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let now = bytes(&c.call("run.status", json!({})).await);
        if now < before {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "not compacted: {now} of {before} bytes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("journal {before} bytes before the clear, {after} after compaction");
    host.kill9();
    host.restart(&args(&extra));
    let mut c = host.conn().await;
    let again = c
        .call_id(
            &ids[7],
            "task.start",
            json!({"title": "a task with a title"}),
        )
        .await;
    assert_eq!(err(&again, "RECEIPT_CLEARED")["delivery"], "cleared");
    let status = c.call("run.status", json!({})).await;
    assert_eq!(ok(&status)["receipts"]["used"], 0, "{status}");
    assert_eq!(ok(&status)["receipts"]["tombstones"], 40, "{status}");
}

/// Starts `polaris serve` whose files may not grow past `limit` bytes (`RLIMIT_FSIZE`, with
/// `SIGXFSZ` ignored so a write past it fails with `EFBIG` instead of killing the process): a
/// disk that stops taking the journal's writes.
fn serve_with_file_limit(root: &Path, limit: u64) -> Child {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(root.join("serve-limited.log")).unwrap();
    let mut cmd = Command::new(polaris_bin());
    cmd.arg("serve")
        .arg("--socket-dir")
        .arg(Served::sockets(root))
        .arg("--audit-log")
        .arg(root.join("audit.jsonl"))
        .args(journal_args(root))
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: only async-signal-safe calls between fork and exec (rustix makes the system
    // call itself). libc's signal: rustix has no safe way to ignore a signal.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = rustix::process::Rlimit {
                current: Some(limit),
                maximum: Some(limit),
            };
            rustix::process::setrlimit(rustix::process::Resource::Fsize, limit)?;
            Ok(())
        });
    }
    cmd.spawn().expect("polaris serve starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_that_cannot_write_stops_the_host_and_loses_nothing_it_answered() {
    let root = short_tempdir();
    // The journal preallocates its first 8 MiB; growing past them fails.
    let mut child = serve_with_file_limit(root.path(), 9 << 20);
    let bridge = Served::sockets(root.path()).join("bridge.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sync_call(&bridge, "host.hello", json!({})).is_ok_and(|r| r["ok"] == true) {
        assert!(Instant::now() < deadline, "the limited host did not answer");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut c = Conn::connect(&bridge).await;
    c.send("start", "task.start", json!({"title": "big"})).await;
    let (started, start_line) = c.wait_raw("start").await;
    let task = ok(&started)["taskId"].as_str().unwrap().to_owned();
    let value = "x".repeat(60_000);
    let mut answered = vec![("start".to_owned(), json!({"title": "big"}), "task.start")];
    let mut first_lines = vec![body(&start_line).to_owned()];
    let mut failed = None;
    for i in 0..200 {
        let id = format!("fill-{i}");
        let params = json!({"taskId": task, "target": "#title", "value": value});
        c.send(&id, "page.fill", params.clone()).await;
        let (reply, line) = c.wait_raw(&id).await;
        if reply["ok"] == true {
            answered.push((id, params, "page.fill"));
            first_lines.push(body(&line).to_owned());
            continue;
        }
        failed = Some((id, reply));
        break;
    }
    let (failed_id, reply) = failed.expect("the journal stopped taking writes");
    let e = err(&reply, "INTERNAL");
    let delivery = e["delivery"].as_str().unwrap().to_owned();
    assert!(
        delivery == "not_executed" || delivery == "uncertain",
        "{reply}"
    );
    eprintln!(
        "the journal failed at {failed_id} ({delivery}) after {} answers",
        answered.len()
    );
    let status = child.wait().unwrap();
    assert!(!status.success(), "the host stops, non-zero");
    let log = std::fs::read_to_string(root.path().join("serve-limited.log")).unwrap();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "one error line: {log}");
    assert!(errors[0].contains("journal.log"), "{log}");

    // Restarted on an ordinary disk: everything a client was told replays; the failed request
    // is exactly what its delivery said.
    let mut host = Served::start(root.path(), &args(&journal_args(root.path())));
    let mut c = host.conn().await;
    for ((id, params, method), first) in answered.iter().zip(&first_lines) {
        c.send(id, method, params.clone()).await;
        let (reply, line) = c.wait_raw(id).await;
        assert_eq!(receipt(&reply), "replayed", "{id}");
        assert_eq!(body(&line), first, "{id}");
    }
    let s = c
        .call("receipt.status", json!({"requestId": failed_id}))
        .await;
    match delivery.as_str() {
        // Its begin never reached the disk: the host does not know it, and it never ran.
        "not_executed" => assert_eq!(ok(&s)["state"], "unknown", "{s}"),
        // It ran, and its reply never reached the disk: stored as INTERRUPTED.
        _ => assert_eq!(ok(&s)["reply"]["error"]["code"], "INTERRUPTED", "{s}"),
    }
    assert!(host.terminate().success());
}

/// Fresh actions that arrive together on one connection are admitted together and wait for
/// their journal begins together. Killed with SIGKILL right after the k-th reply of such a
/// batch (a delayed submit among plain fills) and restarted, the host replays every reply a
/// client read, byte for byte, and never applies the submit twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_batches_killed_midway_replay_what_was_read_and_never_submit_twice() {
    let root = short_tempdir();
    let extra = journal_args(root.path());
    let mut host = Served::start(root.path(), &args(&extra));
    // How many replies are read before the kill; `usize::MAX`: all of them.
    for (round, read_before_kill) in [usize::MAX, 0, 1, 17, 40].into_iter().enumerate() {
        let mut c = host.conn().await;
        let task = start_task(&mut c, json!({"submitDelayMs": 150})).await;
        let mut blob = String::new();
        let mut ids = Vec::new();
        for i in 0..48 {
            let (id, method, params) = if i == 20 {
                (
                    format!("r{round}-press"),
                    "page.press",
                    json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()}),
                )
            } else {
                (
                    format!("r{round}-fill-{i}"),
                    "page.fill",
                    json!({"taskId": task, "target": "#title", "value": format!("v{i}")}),
                )
            };
            blob.push_str(&format!(
                "{}\n",
                json!({"id": id, "method": method, "params": params})
            ));
            ids.push(id);
        }
        c.send_raw(blob.as_bytes()).await;
        let mut read = HashMap::new();
        while read.len() < read_before_kill.min(ids.len()) {
            let line = c.read_line().await.expect("a reply before the kill");
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(receipt(&v), "new", "{line}");
            read.insert(v["id"].as_str().unwrap().to_owned(), line);
        }
        host.kill9();
        drop(c);
        host.restart(&args(&extra));
        let mut c = host.conn().await;
        c.send_raw(blob.as_bytes()).await;
        for _ in 0..ids.len() {
            let line = c
                .read_line()
                .await
                .expect("every re-sent request is answered");
            let v: Value = serde_json::from_str(&line).unwrap();
            let id = v["id"].as_str().unwrap();
            if let Some(first) = read.get(id) {
                assert_eq!(receipt(&v), "replayed", "{line}");
                assert_eq!(body(&line), body(first), "{id} replays byte for byte");
            }
        }
        if read_before_kill == usize::MAX {
            assert_eq!(read.len(), ids.len());
            assert_eq!(host.effects().get(&format!("r{round}-press")), Some(&1));
        }
    }
    for (id, n) in host.effects() {
        assert_eq!(n, 1, "{id} was applied {n} times");
    }
}

/// A journaled pipelined batch is answered with one reply for all its frames while the
/// executor answers every action at once; after a batch that had to wait for a slow action,
/// each frame of the next batches is answered as soon as it is ready, so a slow page action
/// holds back no other reply. Every frame gets exactly one reply either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_batch_waited_for_a_slow_action_pipelined_replies_come_frame_by_frame() {
    let root = short_tempdir();
    let mut extra = journal_args(root.path());
    extra.extend(["--action-timeout-ms".to_string(), "20000".to_string()]);
    let host = Served::start(root.path(), &args(&extra));
    let mut c = host.conn().await;
    let fast = start_task(&mut c, json!({})).await;
    let mut probe = host.conn().await;
    // How each round's press stood when its batch's fill reply was read.
    let mut press_when_fill_read = Vec::new();
    for round in 0..2 {
        // A page of its own each round: its submit has not been seen yet.
        let slow = start_task(&mut c, json!({"submitDelayMs": 2000})).await;
        let press = format!("r{round}-press");
        let fill = format!("r{round}-fill");
        let blob = format!(
            "{}\n{}\n",
            json!({"id": press, "method": "page.press", "params": {"taskId": slow, "key": "Enter", "target": "#title", "expect": saved()}}),
            json!({"id": fill, "method": "page.fill", "params": {"taskId": fast, "target": "#title", "value": "v"}}),
        );
        c.send_raw(blob.as_bytes()).await;
        let mut replies = HashMap::new();
        while replies.len() < 2 {
            let line = c.read_line().await.expect("every frame is answered");
            let v: Value = serde_json::from_str(&line).unwrap();
            let id = v["id"].as_str().unwrap().to_owned();
            if id == fill {
                let s = probe
                    .call("receipt.status", json!({"requestId": press}))
                    .await;
                press_when_fill_read.push(ok(&s)["state"].as_str().unwrap().to_owned());
            }
            assert_eq!(receipt(&v), "new", "{line}");
            assert!(replies.insert(id, v).is_none(), "one reply per frame");
        }
        assert!(replies.contains_key(&press) && replies.contains_key(&fill));
    }
    // Answered together, the fill's reply waited for the press; frame by frame it did not.
    assert_ne!(
        press_when_fill_read[0], "running",
        "{press_when_fill_read:?}"
    );
    assert_eq!(
        press_when_fill_read[1], "running",
        "{press_when_fill_read:?}"
    );
    for (id, n) in host.effects() {
        assert_eq!(n, 1, "{id} was applied {n} times");
    }
}

/// `polaris serve` on `root`'s sockets and journal, run to its exit (for a start that must be
/// refused): its exit status and stderr.
fn serve_refused(root: &Path, sockets: &Path) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(polaris_bin())
        .arg("serve")
        .arg("--socket-dir")
        .arg(sockets)
        .arg("--audit-log")
        .arg(sockets.with_extension("audit.jsonl"))
        .args(journal_args(root))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "a host that should have been refused started: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_lock_file_never_lets_a_second_host_open_a_journal_in_use() {
    let root = short_tempdir();
    let extra = journal_args(root.path());
    let host = Served::start(root.path(), &args(&extra));
    let pid = host.child.as_ref().unwrap().id();
    std::fs::remove_file(root.path().join("j").join("journal.lock")).unwrap();
    let other = short_tempdir();
    let (status, stderr) = serve_refused(root.path(), &other.path().join("s"));
    assert!(!status.success());
    assert!(
        stderr.contains("in use") && stderr.contains(&format!("pid {pid}")),
        "the refusal names the live host: {stderr}"
    );
    assert!(stderr.contains("stop it"), "and says what to do: {stderr}");
    // `journal check` names the live host too.
    let out = Command::new(polaris_bin())
        .args(["journal", "check", "--json", "--journal"])
        .arg(root.path().join("j"))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["hostPid"], pid, "{report}");
}

/// The offsets where the log's blocks start, and where the last one ends.
fn block_starts(log: &Path) -> (Vec<u64>, u64) {
    let bytes = std::fs::read(log).unwrap();
    let mut at = 20usize;
    let mut starts = Vec::new();
    while bytes.len() >= at + 12 && &bytes[at..at + 4] == b"PJB1" {
        starts.push(at as u64);
        let field = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
        at += 12 + (field & !(1 << 31)) as usize;
    }
    (starts, at as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_shortened_at_a_block_boundary_or_missing_is_refused_never_an_empty_book() {
    let root = short_tempdir();
    let extra = journal_args(root.path());
    let mut host = Served::start(root.path(), &args(&extra));
    let mut c = host.conn().await;
    for i in 0..5 {
        ok(&c
            .call_id(&format!("cut{i}"), "task.start", json!({"title": "t"}))
            .await);
    }
    // A crash a while after the last answer: its end was recorded meanwhile.
    std::thread::sleep(Duration::from_secs(2));
    host.kill9();
    let log = root.path().join("j/journal.log");
    let whole = std::fs::read(&log).unwrap();
    let (starts, _) = block_starts(&log);
    let check = || {
        Command::new(polaris_bin())
            .args(["journal", "check", "--journal"])
            .arg(root.path().join("j"))
            .output()
            .unwrap()
    };
    // Cut at the start of the last block: the file reads as a whole, shorter journal.
    let cut = *starts.last().unwrap();
    std::fs::write(&log, &whole[..cut as usize]).unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bytes are missing"), "{stderr}");
    let sockets = Served::sockets(root.path());
    let (status, stderr) = serve_refused(root.path(), &sockets);
    assert!(!status.success());
    assert!(
        stderr.contains("bytes are missing") && stderr.contains("journal.end"),
        "{stderr}"
    );
    // Restored whole, it serves and replays.
    std::fs::write(&log, &whole).unwrap();
    host.restart(&args(&extra));
    let mut c = host.conn().await;
    let again = c.call_id("cut4", "task.start", json!({"title": "t"})).await;
    assert_eq!(receipt(&again), "replayed");
    let status = host.terminate();
    assert!(status.success(), "{status:?}\n{}", host.log());

    // The log deleted, the lock file left: no empty book.
    std::fs::remove_file(&log).unwrap();
    assert!(root.path().join("j/journal.lock").exists());
    let (status, stderr) = serve_refused(root.path(), &sockets);
    assert!(!status.success());
    assert!(stderr.contains("missing"), "{stderr}");
    let out = check();
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // The way out the message gives: accept the loss by removing journal.end.
    std::fs::remove_file(root.path().join("j/journal.end")).unwrap();
    host.restart(&args(&extra));
    let mut c = host.conn().await;
    let fresh = c.call_id("cut4", "task.start", json!({"title": "t"})).await;
    assert_eq!(receipt(&fresh), "new");
}
