//! `polaris serve` and `polaris call` as processes: socket safety, shutdown, exit codes, and an
//! execution that panics inside the host.

use polaris_testkit::host::*;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use polaris::executor::{ActionOutcome, Executor, FixtureExecutor, PageAction, ReadOutcome};
use polaris::protocol::FixtureOptions;
use polaris::tasks::TaskId;
use serde_json::{json, Value};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn serve_output(dir: &std::path::Path) -> std::process::Output {
    Command::new(polaris_bin())
        .args(["serve", "--no-journal", "--socket-dir"])
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn the_socket_directory_and_sockets_are_private() {
    let host = TestHost::start(&[]);
    assert_eq!(mode(&host.dir), 0o700);
    assert_eq!(mode(&host.bridge()), 0o600);
    assert_eq!(mode(&host.introspect()), 0o600);
}

#[test]
fn an_unsafe_directory_is_refused() {
    let root = short_tempdir();
    let dir = root.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = serve_output(&dir);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("writable by group or others"), "{stderr}");
    assert!(!dir.join("bridge.sock").exists());

    let link = root.path().join("link");
    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = serve_output(&link);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"));

    // A socket path that is a symlink is refused, whatever it points at.
    std::os::unix::fs::symlink("/tmp/elsewhere.sock", real.join("bridge.sock")).unwrap();
    let out = serve_output(&real);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bridge.sock is a symbolic link"));

    if polaris::server::current_uid() == 0 {
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let out = serve_output(&theirs);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("is owned by uid 65534"));
    }
}

#[test]
fn a_second_host_beside_a_live_one_exits_naming_the_directory() {
    let host = TestHost::start(&[]);
    let out = serve_output(&host.dir);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("already serving") && stderr.contains(host.dir.to_str().unwrap()),
        "{stderr}"
    );
    // The live host is untouched.
    ok(&sync_call(&host.bridge(), "host.hello", json!({})).unwrap());
}

#[test]
fn a_stale_socket_is_reclaimed() {
    let root = short_tempdir();
    let dir = root.path().join("s");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A socket file nobody listens on, as a crashed host leaves it.
    drop(std::os::unix::net::UnixListener::bind(dir.join("bridge.sock")).unwrap());
    assert!(dir.join("bridge.sock").exists());
    let mut child = Command::new(polaris_bin())
        .args(["serve", "--no-journal", "--socket-dir"])
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut answered = false;
    for _ in 0..200 {
        if sync_call(&dir.join("bridge.sock"), "host.hello", json!({}))
            .is_ok_and(|r| r["ok"] == true)
        {
            answered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(answered, "the host did not reclaim the stale socket");
}

#[test]
fn other_users_are_refused_by_peer_credentials() {
    if polaris::server::current_uid() != 0 {
        eprintln!("skipped: acting as another user needs root");
        return;
    }
    let host = TestHost::start(&[]);
    // Open the path to everyone so only the peer-credential check stands in the way.
    std::fs::set_permissions(host.root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&host.dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(host.bridge(), std::fs::Permissions::from_mode(0o666)).unwrap();
    use std::os::unix::process::CommandExt;
    let (_keep, bin) = binary_for_another_user();
    let out = Command::new(&bin)
        .args(["call", "host.hello", "--timeout-ms", "3000", "--socket-dir"])
        .arg(&host.dir)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The host says why before it closes, and the client knows nothing was read.
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["ok"], false);
    assert_eq!(reply["error"]["code"], "BAD_REQUEST", "{reply}");
    assert_eq!(reply["error"]["delivery"], "not_sent", "{reply}");
    assert_eq!(reply["error"]["details"]["peerUid"], 65534, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection refused: peer uid 65534"),
        "{reply}"
    );
    assert!(
        host.log()
            .contains("refused a connection from another user"),
        "{}",
        host.log()
    );
    // This user is still served.
    ok(&sync_call(&host.bridge(), "host.hello", json!({})).unwrap());
}

#[test]
fn polaris_call_prints_the_reply_and_exits_by_outcome() {
    let host = TestHost::start(&[]);
    let call = |args: &[&str]| {
        Command::new(polaris_bin())
            .arg("call")
            .args(args)
            .arg("--socket-dir")
            .arg(&host.dir)
            .output()
            .unwrap()
    };
    let out = call(&[
        "task.start",
        r#"{"title":"from the shell"}"#,
        "--id",
        "cli-1",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["id"], "cli-1");
    assert_eq!(reply["meta"]["receipt"], "new");
    let out = call(&[
        "task.start",
        r#"{"title":"from the shell"}"#,
        "--id",
        "cli-1",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["meta"]["receipt"],
        "replayed"
    );

    let out = call(&["task.finish", r#"{"taskId":"nope"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["error"]["code"],
        "TASK_NOT_FOUND"
    );

    let out = call(&["task.start", "not json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PARAMS_JSON is not JSON"));

    let nowhere = short_tempdir();
    let out = Command::new(polaris_bin())
        .args(["call", "host.hello", "--socket-dir"])
        .arg(nowhere.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["error"]["code"], "BRIDGE_UNAVAILABLE");
    assert_eq!(reply["error"]["delivery"], "not_sent");
    assert_eq!(reply["error"]["automaticReplay"], false);
}

#[tokio::test]
async fn shutdown_finishes_running_executions_and_removes_the_sockets() {
    let mut host = TestHost::start(&["--action-timeout-ms", "3000"]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"submitDelayMs": 400})).await;
    let rid = new_id();
    c.send(
        &rid,
        "page.click",
        json!({"taskId": task, "target": "#submit", "expect": saved()}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let pid = rustix::process::Pid::from_child(host.child.as_ref().unwrap());
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // New work on an open connection is refused; nothing was executed.
    let refused = c.call("task.start", json!({"title": "too late"})).await;
    assert_eq!(err(&refused, "SHUTTING_DOWN")["delivery"], "not_executed");
    // New connections are not accepted.
    assert!(
        !host.bridge().exists(),
        "the socket file is removed at once"
    );
    // The running execution finished and its reply arrived.
    let reply = c.wait(&rid).await;
    assert_eq!(ok(&reply)["observation"]["value"], "Saved #1");
    let status = host.child.take().unwrap().wait().unwrap();
    assert!(status.success(), "{status}: {}", host.log());
    assert!(!host.introspect().exists());
}

/// An executor whose actions panic, to show a panic is stored as `INTERNAL`, never re-run.
struct PanickingExecutor {
    inner: FixtureExecutor,
    acts: std::sync::atomic::AtomicU32,
}

impl Executor for PanickingExecutor {
    fn kind(&self) -> &'static str {
        "panicking"
    }
    fn check_target(&self, target: &str) -> Result<(), String> {
        self.inner.check_target(target)
    }
    fn open(
        &self,
        task: TaskId,
        url: Option<String>,
        options: FixtureOptions,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'static, Result<(), String>> {
        self.inner.open(task, url, options, deadline)
    }
    fn act(
        &self,
        _task: TaskId,
        _action: PageAction,
        _deadline: tokio::time::Instant,
    ) -> BoxFuture<'static, ActionOutcome> {
        self.acts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async { panic!("the page crashed") })
    }
    fn observe(
        &self,
        task: TaskId,
        subject: polaris::protocol::Subject,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'static, ReadOutcome> {
        self.inner.observe(task, subject, deadline)
    }
    fn mutations(&self) -> u64 {
        0
    }
}

#[tokio::test]
async fn a_panicking_execution_is_stored_as_internal_and_blocks_its_task() {
    let root = short_tempdir();
    let executor = Arc::new(PanickingExecutor {
        inner: FixtureExecutor::new(),
        acts: Default::default(),
    });
    let options = polaris::serve::ServeOptions {
        socket_dir: root.path().join("s"),
        host: polaris::host::HostConfig::default(),
        limits: polaris::server::Limits {
            max_frame_bytes: 1 << 20,
            max_connections: 8,
            ..polaris::server::Limits::default()
        },
        audit_log: root.path().join("audit.jsonl"),
    };
    let running = polaris::serve::start(&options, executor.clone()).unwrap();
    let mut c = Conn::connect(&options.socket_dir.join("bridge.sock")).await;
    let task = start_task(&mut c, json!({})).await;
    let rid = new_id();
    let click = json!({"taskId": task, "target": "#submit", "expect": saved()});
    c.send(&rid, "page.click", click.clone()).await;
    let (first, first_line) = c.wait_raw(&rid).await;
    let e = err(&first, "INTERNAL");
    assert_eq!(e["delivery"], "uncertain");
    c.send(&rid, "page.click", click).await;
    let (again, again_line) = c.wait_raw(&rid).await;
    assert_eq!(receipt(&again), "replayed");
    assert_eq!(
        first_line[..first_line.find(",\"meta\"").unwrap()],
        again_line[..again_line.find(",\"meta\"").unwrap()]
    );
    assert_eq!(
        executor.acts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "never re-executed"
    );
    let st = c.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&st)["state"], "blocked");
    assert_eq!(ok(&st)["pendingOutcome"]["requestId"], rid.as_str());
    // The host keeps serving.
    ok(&c.call("host.hello", json!({})).await);
    running.stop().await;
}

/// A "ledger" in a new directory `pg` under `root` that takes connections and says nothing
/// (libpq waits for the server's first message): the directory, and a channel that hears each
/// connection it took.
fn silent_ledger(root: &std::path::Path) -> (std::path::PathBuf, std::sync::mpsc::Receiver<()>) {
    let dir = root.join("pg");
    std::fs::create_dir(&dir).unwrap();
    let silent = std::os::unix::net::UnixListener::bind(dir.join(".s.PGSQL.5432")).unwrap();
    let (connected, joining) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in silent.incoming().flatten() {
            kept.push(s);
            let _ = connected.send(());
        }
    });
    (dir, joining)
}

/// A host joining the ledger at `pg_dir` (connect timeout `connect_secs`), serving into `sockets`.
fn host_joining(
    root: &std::path::Path,
    pg_dir: &std::path::Path,
    connect_secs: u32,
) -> std::process::Child {
    Command::new(polaris_bin())
        .args(["serve", "--socket-dir"])
        .arg(root.join("s"))
        .arg("--audit-log")
        .arg(root.join("audit.jsonl"))
        .arg("--ledger")
        .arg(format!(
            "host={} port=5432 user=polaris dbname=polaris connect_timeout={connect_secs}",
            pg_dir.display()
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits up to `bound` for the child to end; kills it (and fails) if it has not.
fn ended_within(mut child: std::process::Child, bound: Duration) -> std::process::Output {
    let deadline = std::time::Instant::now() + bound;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {bound:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A host still starting — here joining a fleet ledger whose server takes the connection and
/// never answers — ends at once on SIGTERM, with 128 + 15, having bound no socket; it does not
/// wait out its connection's timeout first.
#[test]
fn a_signal_while_starting_ends_the_host_at_once_without_serving() {
    let root = short_tempdir();
    let (pg_dir, joining) = silent_ledger(root.path());
    let child = host_joining(root.path(), &pg_dir, 20);
    // The host is joining the ledger: its connection accepted and waiting for an answer.
    joining
        .recv_timeout(Duration::from_secs(30))
        .expect("the host connects to the ledger");
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    );
    // Well inside the 20 s the start itself would have waited.
    let out = ended_within(child, Duration::from_secs(5));
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(128 + rustix::process::Signal::TERM.as_raw()),
        "{log}"
    );
    assert!(log.contains("before the host was ready"), "{log}");
    assert!(
        !root.path().join("s/bridge.sock").exists(),
        "nothing was served"
    );
}

/// A ledger whose server takes the connection and never answers fails the host's start
/// within the connection string's `connect_timeout`, saying what to check, having served nobody.
#[test]
fn a_ledger_that_takes_the_connection_and_never_answers_fails_the_start_within_its_timeout() {
    let root = short_tempdir();
    let (pg_dir, joining) = silent_ledger(root.path());
    let started = std::time::Instant::now();
    let child = host_joining(root.path(), &pg_dir, 1);
    let out = ended_within(child, Duration::from_secs(15));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        joining.try_recv().is_ok(),
        "the host reached the ledger: {log}"
    );
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("did not answer within 1 s") && log.contains("--ledger"),
        "says what happened and what to check: {log}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited its timeout"
    );
    assert!(
        !root.path().join("s/bridge.sock").exists(),
        "nothing was served"
    );
}

#[test]
fn a_fixture_effects_file_that_is_a_symlink_is_refused_and_not_written_through() {
    let root = short_tempdir();
    let target = root.path().join("elsewhere.txt");
    std::fs::write(&target, "untouched\n").unwrap();
    let link = root.path().join("effects.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = Command::new(polaris_bin())
        .args(["serve", "--no-journal", "--socket-dir"])
        .arg(root.path().join("s"))
        .arg("--fixture-effects")
        .arg(&link)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--fixture-effects"), "{stderr}");
    assert!(stderr.contains("symlink"), "{stderr}");
    // Nothing was written through the link, and no host ran.
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched\n");
    assert!(!root.path().join("s/bridge.sock").exists());
}

#[test]
fn an_evidence_bound_of_zero_or_past_the_most_is_refused_with_what_to_give() {
    let root = short_tempdir();
    for (n, says) in [
        ("0", "--no-network-evidence"),
        ("257", "more than 256"),
        ("many", "not a count"),
    ] {
        let out = Command::new(polaris_bin())
            .args(["serve", "--no-journal", "--executor", "chromium"])
            .args(["--evidence-max-requests", n, "--socket-dir"])
            .arg(root.path().join("s"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{n}: {stderr}");
        assert!(stderr.contains("--evidence-max-requests"), "{stderr}");
        assert!(stderr.contains(says), "{n}: {stderr}");
        assert!(!root.path().join("s").exists(), "no host ran: {stderr}");
    }
}
