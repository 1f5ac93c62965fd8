//! Shared test support: a real `polaris serve` process on a private temp socket directory, and
//! a raw line client that speaks the wire format byte for byte.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// The binary under test.
pub fn polaris_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        // A test runs from `target/<profile>/deps/`; Cargo builds the package's binary, which
        // its integration tests run, into `target/<profile>/` first.
        let exe = std::env::current_exe().expect("the test knows its own executable");
        let mut dir = exe.parent().expect("the executable is in a directory");
        if dir.ends_with("deps") {
            dir = dir
                .parent()
                .expect("deps/ is inside the profile's directory");
        }
        let bin = dir.join("polaris");
        assert!(
            bin.is_file(),
            "no polaris binary at {}; run the tests with `cargo test`, which builds it first",
            bin.display()
        );
        bin.to_string_lossy().into_owned()
    })
}

/// A copy of the binary that another user can run wherever this checkout lives (a `0700`
/// home, say): the copy sits in a fresh temp dir that others may traverse but not list. Keep
/// the returned dir alive while the copy is used.
pub fn binary_for_another_user() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = short_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let bin = dir.path().join("polaris");
    std::fs::copy(polaris_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, bin)
}

/// A short temp dir (socket paths must stay short).
pub fn short_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .expect("temp dir")
}

/// A fresh request ID.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A `polaris serve` child process.
pub struct TestHost {
    /// Holds the temp dir alive.
    pub root: tempfile::TempDir,
    /// The socket directory.
    pub dir: PathBuf,
    /// The serve process.
    pub child: Option<Child>,
    /// The run ID from `host.hello`.
    pub run_id: String,
}

impl TestHost {
    /// Starts `polaris serve` with extra args and waits until `host.hello` answers.
    pub fn start(args: &[&str]) -> TestHost {
        let root = short_tempdir();
        let dir = root.path().join("s");
        let log = std::fs::File::create(root.path().join("serve.log")).unwrap();
        // The journal stays inside the test's temp dir unless the test chooses.
        let journal = root.path().join("journal");
        let chosen = args
            .iter()
            .any(|a| a.starts_with("--journal") || *a == "--no-journal" || *a == "--ledger");
        let child = Command::new(polaris_bin())
            .arg("serve")
            .arg("--socket-dir")
            .arg(&dir)
            .arg("--audit-log")
            .arg(root.path().join("audit.jsonl"))
            .args((!chosen).then_some("--journal"))
            .args((!chosen).then_some(&journal))
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("polaris serve starts");
        let mut host = TestHost {
            root,
            dir,
            child: Some(child),
            run_id: String::new(),
        };
        host.run_id = host.wait_ready();
        host
    }

    fn wait_ready(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("polaris serve exited early ({status}): {}", self.log());
            }
            if let Ok(reply) = sync_call(&self.bridge(), "host.hello", json!({})) {
                if reply["ok"] == true {
                    return reply["result"]["runId"].as_str().unwrap().to_owned();
                }
            }
            assert!(
                Instant::now() < deadline,
                "polaris serve did not answer: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The bridge socket path.
    pub fn bridge(&self) -> PathBuf {
        self.dir.join("bridge.sock")
    }

    /// The introspection socket path.
    pub fn introspect(&self) -> PathBuf {
        self.dir.join("introspect.sock")
    }

    /// The host's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("serve.log")).unwrap_or_default()
    }

    /// A new raw connection to the bridge.
    pub async fn conn(&self) -> Conn {
        Conn::connect(&self.bridge()).await
    }

    /// A new bridge connection that the host serves, retried while every slot is taken (with
    /// a small `--max-connections`, the readiness probe's slot frees only once the host sees
    /// it close).
    pub async fn served_conn(&self) -> Conn {
        for _ in 0..500 {
            let mut c = self.conn().await;
            let id = new_id();
            c.try_send(&id, "host.hello", json!({})).await;
            if c.read_frame().await["id"] == id.as_str() {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no connection slot freed up: {}", self.log());
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::TERM,
        );
        child.wait().unwrap()
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One blocking request on a fresh connection (for readiness checks).
pub fn sync_call(path: &Path, method: &str, params: Value) -> std::io::Result<Value> {
    use std::io::{BufRead, Write};
    let mut s = std::os::unix::net::UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let frame = json!({"id": new_id(), "method": method, "params": params});
    s.write_all(format!("{frame}\n").as_bytes())?;
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line)?;
    serde_json::from_str(&line).map_err(|e| std::io::Error::other(e.to_string()))
}

/// A raw line connection.
pub struct Conn {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    pending: HashMap<String, (Value, String)>,
}

impl Conn {
    /// Connects to a socket.
    pub async fn connect(path: &Path) -> Conn {
        let s = UnixStream::connect(path).await.expect("connect");
        let (r, w) = s.into_split();
        Conn {
            reader: BufReader::new(r),
            writer: w,
            pending: HashMap::new(),
        }
    }

    /// Writes raw bytes.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.expect("write");
    }

    /// Sends a request where the host may already have refused the connection (`HOST_BUSY`):
    /// a failed write is not an error, the host's line is read next either way.
    pub async fn try_send(&mut self, id: &str, method: &str, params: Value) {
        let frame = json!({"id": id, "method": method, "params": params});
        let _ = self.writer.write_all(format!("{frame}\n").as_bytes()).await;
    }

    /// Sends a request; returns its id.
    pub async fn send(&mut self, id: &str, method: &str, params: Value) -> String {
        let frame = json!({"id": id, "method": method, "params": params});
        self.send_raw(format!("{frame}\n").as_bytes()).await;
        id.to_owned()
    }

    /// Reads the next line (without newline); `None` at EOF.
    pub async fn read_line(&mut self) -> Option<String> {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(20), self.reader.read_line(&mut line))
            .await
            .expect("a reply within 20 s")
            .expect("read");
        if n == 0 {
            None
        } else {
            Some(line.trim_end_matches('\n').to_owned())
        }
    }

    /// Reads the next frame as JSON.
    pub async fn read_frame(&mut self) -> Value {
        let line = self.read_line().await.expect("a frame, not EOF");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Waits for the reply to `id`, returning it and its raw line.
    pub async fn wait_raw(&mut self, id: &str) -> (Value, String) {
        if let Some(r) = self.pending.remove(id) {
            return r;
        }
        loop {
            let line = self.read_line().await.expect("a reply, not EOF");
            let v: Value = serde_json::from_str(&line).unwrap();
            let rid = v["id"].as_str().unwrap_or_default().to_owned();
            if rid == id {
                return (v, line);
            }
            self.pending.insert(rid, (v, line));
        }
    }

    /// Waits for the reply to `id`.
    pub async fn wait(&mut self, id: &str) -> Value {
        self.wait_raw(id).await.0
    }

    /// Sends and waits, under a given id.
    pub async fn call_id(&mut self, id: &str, method: &str, params: Value) -> Value {
        self.send(id, method, params).await;
        self.wait(id).await
    }

    /// Sends and waits, under a fresh id.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.call_id(&new_id(), method, params).await
    }

    /// Whether the host closed the connection (EOF within a few seconds).
    pub async fn closed_by_host(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), self.reader.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }

    /// Closes the connection.
    pub fn close(self) {
        drop(self);
    }
}

/// Asserts an ok reply and returns its result.
#[track_caller]
pub fn ok(reply: &Value) -> &Value {
    assert_eq!(reply["ok"], true, "expected ok: {reply}");
    &reply["result"]
}

/// Asserts an error reply with `code` and returns the error object.
#[track_caller]
pub fn err<'a>(reply: &'a Value, code: &str) -> &'a Value {
    assert_eq!(reply["ok"], false, "expected {code}: {reply}");
    let e = &reply["error"];
    assert_eq!(e["code"], code, "{reply}");
    assert_eq!(e["automaticReplay"], false, "{reply}");
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{reply}"
    );
    e
}

/// A task's history (`task.status` result) as "method result" lines, in order.
pub fn history(status: &Value) -> Vec<String> {
    status["history"]
        .as_array()
        .expect("task.status has a history")
        .iter()
        .map(|h| {
            format!(
                "{} {}",
                h["method"].as_str().unwrap(),
                h["result"].as_str().unwrap()
            )
        })
        .collect()
}

/// `meta.receipt` of a reply.
pub fn receipt(reply: &Value) -> &str {
    reply["meta"]["receipt"].as_str().unwrap_or("?")
}

/// Starts a task and returns its ID.
pub async fn start_task(c: &mut Conn, fixture: Value) -> String {
    let r = c
        .call(
            "task.start",
            json!({"title": "test task", "fixture": fixture}),
        )
        .await;
    ok(&r)["taskId"].as_str().unwrap().to_owned()
}

/// The applied submissions of a task, read from its page.
pub async fn submissions(c: &mut Conn, task: &str) -> u64 {
    let r = c
        .call(
            "page.read",
            json!({"taskId": task, "target": "#submissions"}),
        )
        .await;
    ok(&r)["value"].as_str().unwrap().parse().unwrap()
}

/// The run's executor mutation count.
pub async fn mutations(c: &mut Conn) -> u64 {
    let r = c.call("run.status", json!({})).await;
    ok(&r)["executor"]["mutations"].as_u64().unwrap()
}

/// `run.status.receipts.used`.
pub async fn used(c: &mut Conn) -> u64 {
    let r = c.call("run.status", json!({})).await;
    ok(&r)["receipts"]["used"].as_u64().unwrap()
}

/// The expectation that a submit saved.
pub fn saved() -> Value {
    json!({"target": "#status", "contains": "Saved"})
}

/// A process's resident memory in bytes, from /proc (the memory-bound tests).
pub fn rss_bytes(pid: u32) -> u64 {
    proc_kib(&format!("/proc/{pid}/status"), "VmRSS:") * 1024
}

/// The memory this machine has available (`MemAvailable`), in bytes.
pub fn mem_available() -> u64 {
    proc_kib("/proc/meminfo", "MemAvailable:") * 1024
}

/// The kiB figure on the line of `file` that starts with `field`.
fn proc_kib(file: &str, field: &str) -> u64 {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in {file}"))
}
