//! The hostile-input fuzzer (SPEC §10): structured mutations of valid frames against a real
//! `polaris serve`, over the bridge and the introspection sockets, and against `polaris mcp`'s
//! stdin.
//!
//! Mutations: fields retyped, deleted or duplicated, values nested deep, arrays in place of
//! objects, huge numbers, invalid UTF-8, surrogate escapes, frames at and over the frame limit,
//! CRLF line ends (and unmutated frames, so the host also does real work). After every batch it
//! checks that the host answers `host.hello` within 100 ms and that `receipts.used` grew by
//! exactly the replies that said `"receipt":"new"`; every frame must get one well-formed reply
//! (an object with `ok`, a known error code, `automaticReplay: false`).
//!
//! `cargo build --release && cargo run --release --example fuzz -- --seconds N [--seed S]`
//! prints the count of each mutation kind tried and exits non-zero on the first violation,
//! printing the frames that caused it. Lines that are not JSON at all go to the MCP front too,
//! which must answer each with a parse error.
#[path = "support/release_binary.rs"]
mod release_binary;
use release_binary::polaris_bin;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use polaris::protocol::ErrorCode;
use serde_json::{json, Value};

/// The frame limit of the host under test (small, so frames at and over it are cheap).
const MAX_FRAME: usize = 64 * 1024;
/// Frames per batch.
const BATCH: usize = 24;
/// How long a reply may take before its absence is a violation.
const REPLY_WAIT: Duration = Duration::from_secs(10);
/// How long `host.hello` may take after a batch.
const HELLO_BUDGET: Duration = Duration::from_millis(100);

/// xorshift64*: a small reproducible generator (the seed is printed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// What was done to a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Valid,
    Retype,
    Delete,
    Duplicate,
    Deep,
    ArrayForObject,
    HugeNumber,
    BadUtf8,
    Surrogate,
    AtLimit,
    OverLimit,
    Crlf,
}

const KINDS: &[Kind] = &[
    Kind::Valid,
    Kind::Retype,
    Kind::Delete,
    Kind::Duplicate,
    Kind::Deep,
    Kind::ArrayForObject,
    Kind::HugeNumber,
    Kind::BadUtf8,
    Kind::Surrogate,
    Kind::AtLimit,
    Kind::OverLimit,
    Kind::Crlf,
];

/// Placeholders put into a value and replaced in its text by raw bytes that JSON values cannot
/// hold (a repeated key, invalid UTF-8, unpaired surrogates, numbers past f64).
const RAW: &str = "\u{1}RAW\u{1}";
const DUP: &str = "\u{1}DUP\u{1}";

/// A frame and the raw texts its placeholders stand for.
struct Frame {
    value: Value,
    raws: Vec<Vec<u8>>,
    dup_key: Option<String>,
}

impl Frame {
    fn new(value: Value) -> Frame {
        Frame {
            value,
            raws: Vec::new(),
            dup_key: None,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut text = serde_json::to_vec(&self.value).expect("a value serialises");
        if let Some(key) = &self.dup_key {
            let escaped = serde_json::to_string(DUP).unwrap();
            text = replace(&text, escaped.as_bytes(), &serde_json::to_vec(key).unwrap());
        }
        let escaped = serde_json::to_string(RAW).unwrap();
        for raw in &self.raws {
            text = replace_first(&text, escaped.as_bytes(), raw);
        }
        text
    }
}

fn replace(text: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = text.to_vec();
    while let Some(at) = find(&out, from) {
        out.splice(at..at + from.len(), to.iter().copied());
    }
    out
}

fn replace_first(text: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = text.to_vec();
    if let Some(at) = find(&out, from) {
        out.splice(at..at + from.len(), to.iter().copied());
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn uuid(rng: &mut Rng) -> String {
    uuid::Uuid::from_u64_pair(rng.next(), rng.next()).to_string()
}

/// A valid bridge frame of a random method, naming one of `tasks`.
fn bridge_frame(rng: &mut Rng, tasks: &[String], ids: &[String]) -> Value {
    let task = rng.pick(tasks).clone();
    let id = if !ids.is_empty() && rng.chance(10) {
        rng.pick(ids).clone()
    } else {
        uuid(rng)
    };
    let expect = json!({"target": "#status", "contains": "Saved"});
    let (method, params) = match rng.below(13) {
        0 => ("host.hello", json!({})),
        1 => ("tools.list", json!({})),
        2 => (
            "task.start",
            json!({"title": "fuzz", "url": "https://example.test/form",
                   "fixture": {"submitDelayMs": rng.below(3) * 100, "dropSubmit": rng.chance(10),
                               "failSubmit": rng.chance(10), "readDelayMs": 0}}),
        ),
        3 | 4 => (
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": format!("v{}", rng.below(1000))}),
        ),
        5 => (
            "page.click",
            json!({"taskId": task, "target": "#save", "expect": expect}),
        ),
        6 => (
            "page.press",
            json!({"taskId": task, "key": "Enter", "target": "#title", "expect": expect}),
        ),
        7 => ("page.read", json!({"taskId": task, "target": "#status"})),
        8 => ("task.status", json!({"taskId": task})),
        9 => ("task.verifyOutcome", json!({"taskId": task})),
        10 => ("run.status", json!({})),
        11 => ("receipt.status", json!({"requestId": uuid(rng)})),
        _ => {
            if rng.chance(50) {
                ("task.finish", json!({"taskId": task}))
            } else {
                ("task.stop", json!({"taskId": task, "reason": "fuzz"}))
            }
        }
    };
    json!({"id": id, "method": method, "params": params})
}

/// A valid introspection frame (never `subscribe`, whose event lines are not replies).
fn introspect_frame(rng: &mut Rng, ids: &[String]) -> Value {
    let some_id = if ids.is_empty() {
        "none".to_owned()
    } else {
        rng.pick(ids).clone()
    };
    let (method, params) = match rng.below(8) {
        0 => ("host.hello", json!({})),
        1 => ("snapshot", json!({})),
        2 => (
            "receipts.list",
            json!({"limit": 5, "offset": rng.below(10), "sort": "newest",
                   "state": "completed", "search": "v"}),
        ),
        3 => ("receipts.get", json!({"requestId": some_id})),
        4 => ("tasks.list", json!({"state": "running"})),
        5 => (
            "receipts.clearPrepare",
            json!({"filter": {"state": "failed", "method": "page.fill"}}),
        ),
        6 => ("receipts.clearPrepare", json!({"requestIds": [some_id]})),
        _ => (
            "receipts.clearCommit",
            json!({"token": uuid(rng), "reason": "fuzz", "operator": "fuzzer"}),
        ),
    };
    json!({"id": uuid(rng), "method": method, "params": params})
}

/// Every path to a value inside `v` (keys and indices), the root included.
fn paths(v: &Value, at: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                at.push(PathStep::Key(k.clone()));
                paths(child, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(PathStep::Index(i));
                paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn at_path<'a>(v: &'a mut Value, path: &[PathStep]) -> &'a mut Value {
    path.iter().fold(v, |v, step| match step {
        PathStep::Key(k) => &mut v[k.as_str()],
        PathStep::Index(i) => &mut v[*i],
    })
}

/// A random path (never the root unless it is the only one).
fn any_path(rng: &mut Rng, v: &Value) -> Vec<PathStep> {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    if all.len() > 1 {
        all.remove(0);
    }
    rng.pick(&all).clone()
}

/// A random path to an object (the root included).
fn object_path(rng: &mut Rng, v: &Value) -> Vec<PathStep> {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let mut objects: Vec<Vec<PathStep>> = all
        .into_iter()
        .filter(|p| at_path(&mut v.clone(), p).is_object())
        .collect();
    if objects.len() > 1 && rng.chance(70) {
        objects.remove(0);
    }
    rng.pick(&objects).clone()
}

/// Applies one mutation; `Valid`, `AtLimit`, `OverLimit` and `Crlf` change only the line.
fn mutate(rng: &mut Rng, kind: Kind, frame: &mut Frame) {
    match kind {
        Kind::Retype => {
            let path = any_path(rng, &frame.value);
            let values = [
                Value::Null,
                json!(true),
                json!(12),
                json!(-1),
                json!(1.5),
                json!("text"),
                json!(""),
                json!([]),
                json!({}),
                json!([1, "a"]),
                json!({"a": 1}),
            ];
            *at_path(&mut frame.value, &path) = rng.pick(&values).clone();
        }
        Kind::Delete => {
            let path = object_path(rng, &frame.value);
            if let Value::Object(m) = at_path(&mut frame.value, &path) {
                let keys: Vec<String> = m.keys().cloned().collect();
                if !keys.is_empty() {
                    m.remove(&keys[rng.below(keys.len())]);
                }
            }
        }
        Kind::Duplicate => {
            let path = object_path(rng, &frame.value);
            if let Value::Object(m) = at_path(&mut frame.value, &path) {
                let keys: Vec<String> = m.keys().cloned().collect();
                if let Some(key) = keys.get(rng.below(keys.len())) {
                    let same = rng.chance(50);
                    let value = if same { m[key].clone() } else { json!("other") };
                    m.insert(DUP.to_owned(), value);
                    frame.dup_key = Some(key.clone());
                }
            }
        }
        Kind::Deep => {
            let depth = *rng.pick(&[62usize, 63, 64, 65, 66, 128, 129, 4096, 20_000]);
            let (open, close) = if rng.chance(50) || depth > 4096 {
                ("[".repeat(depth), "]".repeat(depth))
            } else {
                ("{\"a\":".repeat(depth), "}".repeat(depth))
            };
            let inner = if open.starts_with('[') { "" } else { "1" };
            let path = any_path(rng, &frame.value);
            *at_path(&mut frame.value, &path) = json!(RAW);
            frame
                .raws
                .push(format!("{open}{inner}{close}").into_bytes());
        }
        Kind::ArrayForObject => {
            let path = object_path(rng, &frame.value);
            let target = at_path(&mut frame.value, &path);
            if let Value::Object(m) = target {
                let values: Vec<Value> = m.values().cloned().collect();
                *target = Value::Array(values);
            }
        }
        Kind::HugeNumber => {
            let numbers = [
                "1e400",
                "-1e400",
                "18446744073709551616",
                "-9223372036854775809",
                "123456789012345678901234567890.5",
                "1E-400",
                "-0",
                "0.0000000000000000000000000001",
                "99999999999999999999999999999999999999999999999999",
            ];
            let path = any_path(rng, &frame.value);
            *at_path(&mut frame.value, &path) = json!(RAW);
            frame.raws.push(rng.pick(&numbers).as_bytes().to_vec());
        }
        Kind::BadUtf8 => {
            let bad: &[&[u8]] = &[
                b"\"\xff\"",
                b"\"a\xc0\xafb\"",
                b"\"\xed\xa0\x80\"",
                b"\"\xf4\x90\x80\x80\"",
                b"\"\xe2\x82\"",
            ];
            let path = any_path(rng, &frame.value);
            *at_path(&mut frame.value, &path) = json!(RAW);
            frame.raws.push(rng.pick(bad).to_vec());
        }
        Kind::Surrogate => {
            let texts = [
                r#""\ud800""#,
                r#""\udc00\ud800""#,
                r#""a\ud83d""#,
                r#""\ud83d\ude00""#,
                r#""\u0000""#,
                r#""\uZZZZ""#,
            ];
            let path = any_path(rng, &frame.value);
            *at_path(&mut frame.value, &path) = json!(RAW);
            frame.raws.push(rng.pick(&texts).as_bytes().to_vec());
        }
        Kind::Valid | Kind::AtLimit | Kind::OverLimit | Kind::Crlf => {}
    }
}

/// The line to send for a mutated frame, with its ending.
fn line(rng: &mut Rng, kind: Kind, frame: &Frame) -> Vec<u8> {
    let mut bytes = frame.bytes();
    match kind {
        Kind::AtLimit | Kind::OverLimit => {
            // Pad with spaces after the object (insignificant whitespace) to the size wanted.
            let want = if kind == Kind::AtLimit {
                MAX_FRAME - rng.below(2)
            } else {
                MAX_FRAME + 1 + rng.below(4096)
            };
            if bytes.len() < want {
                bytes.resize(want, b' ');
            }
            bytes.push(b'\n');
        }
        Kind::Crlf => bytes.extend_from_slice(b"\r\n"),
        _ => bytes.push(b'\n'),
    }
    bytes
}

/// A line client with a reply timeout.
struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Conn {
    fn connect(path: &Path) -> Conn {
        let w = UnixStream::connect(path)
            .unwrap_or_else(|e| fail(&format!("cannot connect to {}: {e}", path.display()), &[]));
        w.set_read_timeout(Some(REPLY_WAIT)).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Conn { w, r }
    }

    /// One reply line, or `None` at end of stream.
    fn read(&mut self) -> Result<Option<String>, String> {
        let mut buf = Vec::new();
        match self.r.read_until(b'\n', &mut buf) {
            Ok(0) => Ok(None),
            Ok(_) => String::from_utf8(buf)
                .map(Some)
                .map_err(|_| "a reply line is not UTF-8".to_owned()),
            Err(e) => Err(format!("no reply within {REPLY_WAIT:?} ({e})")),
        }
    }

    fn call(&mut self, frame: &Value) -> Value {
        let mut bytes = serde_json::to_vec(frame).unwrap();
        bytes.push(b'\n');
        self.w.write_all(&bytes).unwrap();
        match self.read() {
            Ok(Some(l)) => serde_json::from_str(&l).unwrap_or(Value::Null),
            other => fail(&format!("no answer to a probe: {other:?}"), &[bytes]),
        }
    }
}

/// Prints the violation and the frames that led to it, then exits non-zero.
fn fail(what: &str, frames: &[Vec<u8>]) -> ! {
    eprintln!("VIOLATION: {what}");
    for f in frames {
        let shown = String::from_utf8_lossy(&f[..f.len().min(2000)]);
        eprintln!(
            "  frame ({} bytes): {}{}",
            f.len(),
            shown.trim_end(),
            if f.len() > 2000 { " …" } else { "" }
        );
    }
    std::process::exit(1);
}

/// Checks one reply line of the bridge or introspection socket; returns whether it reported a
/// new receipt.
fn check_reply(line: &str) -> Result<bool, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("reply is not JSON ({e})"))?;
    let obj = v.as_object().ok_or("reply is not an object")?;
    if !obj.contains_key("id") {
        return Err("reply has no id member".into());
    }
    match obj.get("ok") {
        Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            let e = &v["error"];
            let code = e["code"].as_str().ok_or("error without a code")?;
            code.parse::<ErrorCode>()
                .map_err(|_| format!("unknown error code {code}"))?;
            if e["automaticReplay"] != json!(false) {
                return Err("automaticReplay is not false".into());
            }
            if !e["delivery"].is_string() || !e["message"].is_string() {
                return Err("error without delivery or message".into());
            }
        }
        _ => return Err("reply has no boolean ok".into()),
    }
    Ok(v["meta"]["receipt"] == "new")
}

/// The host under test and the `polaris mcp` front on it.
struct Target {
    serve: Child,
    dir: tempfile::TempDir,
    bridge: PathBuf,
    introspect: PathBuf,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.serve.kill();
        let _ = self.serve.wait();
    }
}

fn start() -> Target {
    let dir = tempfile::Builder::new()
        .prefix("pf")
        .tempdir_in("/tmp")
        .expect("temp dir");
    let sockets = dir.path().join("s");
    let serve = Command::new(polaris_bin())
        .arg("serve")
        .arg("--socket-dir")
        .arg(&sockets)
        .arg("--audit-log")
        .arg(dir.path().join("audit.jsonl"))
        .args(["--capacity", "1000000", "--action-timeout-ms", "300"])
        .args(["--max-frame-bytes", &MAX_FRAME.to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("serve.log")).unwrap())
        .spawn()
        .expect("polaris serve starts");
    let t = Target {
        serve,
        bridge: sockets.join("bridge.sock"),
        introspect: sockets.join("introspect.sock"),
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(&t.bridge).is_err() {
        if Instant::now() > deadline {
            fail("polaris serve did not start", &[]);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    t
}

/// The state the checks after each batch compare against.
struct Checker {
    probe: Conn,
    used: u64,
    news: u64,
}

impl Checker {
    fn used(&mut self) -> u64 {
        let v = self
            .probe
            .call(&json!({"id": "fuzz-run-status", "method": "run.status"}));
        v["result"]["receipts"]["used"]
            .as_u64()
            .unwrap_or_else(|| fail(&format!("run.status answered {v}"), &[]))
    }

    /// `host.hello` within [`HELLO_BUDGET`], and `receipts.used` grown by exactly the news.
    fn after_batch(&mut self, target: &mut Target, frames: &[Vec<u8>], what: &str) {
        if let Ok(Some(status)) = target.serve.try_wait() {
            fail(
                &format!("polaris serve exited ({status}) after {what}"),
                frames,
            );
        }
        let t = Instant::now();
        let hello = self
            .probe
            .call(&json!({"id": "fuzz-hello", "method": "host.hello"}));
        let took = t.elapsed();
        if hello["ok"] != true {
            fail(&format!("host.hello answered {hello}"), frames);
        }
        if took > HELLO_BUDGET {
            fail(
                &format!("host.hello took {took:?} after {what} (budget {HELLO_BUDGET:?})"),
                frames,
            );
        }
        let used = self.used();
        if used != self.used + self.news {
            fail(
                &format!(
                    "receipts.used is {used}, expected {} + {} new replies, after {what}",
                    self.used, self.news
                ),
                frames,
            );
        }
        self.used = used;
        self.news = 0;
    }
}

/// One batch on a socket: frames written together, one reply each read back.
fn socket_batch(
    rng: &mut Rng,
    path: &Path,
    bridge: bool,
    tasks: &[String],
    ids: &mut Vec<String>,
    counts: &mut BTreeMap<Kind, u64>,
) -> (Vec<Vec<u8>>, u64) {
    let mut conn = Conn::connect(path);
    let mut lines = Vec::new();
    let mut over_limit = false;
    for _ in 0..BATCH {
        let kind = *rng.pick(KINDS);
        let value = if bridge {
            bridge_frame(rng, tasks, ids)
        } else {
            introspect_frame(rng, ids)
        };
        if let Some(id) = value["id"].as_str() {
            if ids.len() < 4096 {
                ids.push(id.to_owned());
            }
        }
        let mut frame = Frame::new(value);
        mutate(rng, kind, &mut frame);
        *counts.entry(kind).or_default() += 1;
        let l = line(rng, kind, &frame);
        let too_large = l.len() - 1 > MAX_FRAME;
        lines.push(l);
        if too_large {
            // The host answers FRAME_TOO_LARGE and closes: nothing after it would be read.
            over_limit = true;
            break;
        }
    }
    // Written from another thread while the replies are read, so a host that stops reading
    // shows up as replies that never come (a violation) rather than a write that never ends.
    let writer = {
        let mut w = conn.w.try_clone().expect("socket clone");
        let lines = lines.clone();
        std::thread::spawn(move || {
            for l in &lines {
                w.write_all(l)?;
            }
            Ok::<(), std::io::Error>(())
        })
    };
    let mut news = 0;
    // Replies that wait (executions, operator scans) may come after later ones: count them.
    let mut too_large = 0;
    for i in 0..lines.len() {
        match conn.read() {
            Ok(Some(reply)) => match check_reply(&reply) {
                Ok(new) => {
                    news += u64::from(new);
                    too_large += usize::from(reply.contains("\"FRAME_TOO_LARGE\""));
                }
                Err(e) => fail(
                    &format!("{e}: {}", reply.trim_end()),
                    &lines[i.min(lines.len() - 1)..=i.min(lines.len() - 1)],
                ),
            },
            Ok(None) => fail(
                &format!(
                    "the host closed the connection after {i} of {} replies",
                    lines.len()
                ),
                &lines,
            ),
            Err(e) => fail(&e, &lines),
        }
    }
    match writer.join() {
        Ok(Err(e)) if !over_limit => fail(&format!("writing a frame failed: {e}"), &lines),
        _ => {}
    }
    if too_large != usize::from(over_limit) {
        fail(
            &format!(
                "{too_large} FRAME_TOO_LARGE replies to {} frames over the limit",
                usize::from(over_limit)
            ),
            &lines,
        );
    }
    (lines, news)
}

/// `polaris mcp` on the host's sockets, its stdout read by a thread.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    out: Receiver<String>,
    next_id: u64,
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Mcp {
    fn start(target: &Target) -> Mcp {
        let mut child = Command::new(polaris_bin())
            .arg("mcp")
            .arg("--socket-dir")
            .arg(target.bridge.parent().unwrap())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(target.dir.path().join("mcp.log")).unwrap())
            .spawn()
            .expect("polaris mcp starts");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, out) = std::sync::mpsc::channel();
        std::thread::spawn(move || loop {
            let mut buf = Vec::new();
            match stdout.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        });
        let mut mcp = Mcp {
            child,
            stdin,
            out,
            next_id: 1,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "polaris-fuzz", "version": "1"}}});
        mcp.send(&serde_json::to_vec(&init).unwrap());
        mcp.answer(&[]);
        mcp.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        mcp
    }

    fn send(&mut self, line: &[u8]) {
        let mut bytes = line.to_vec();
        bytes.push(b'\n');
        if let Err(e) = self.stdin.write_all(&bytes) {
            fail(&format!("polaris mcp's stdin closed: {e}"), &[bytes]);
        }
    }

    /// The next answer: a JSON-RPC response (notifications the front sends are skipped).
    fn answer(&mut self, frame: &[u8]) -> Value {
        let deadline = Instant::now() + REPLY_WAIT * 3;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(line) => {
                    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                        fail(
                            &format!("polaris mcp wrote a line that is not JSON ({e}): {line}"),
                            &[frame.to_vec()],
                        )
                    });
                    if v.get("id").is_some() {
                        if v["jsonrpc"] != "2.0"
                            || (v.get("result").is_none() && v.get("error").is_none())
                        {
                            fail(&format!("malformed JSON-RPC answer {v}"), &[frame.to_vec()]);
                        }
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    fail("polaris mcp did not answer a tools/call", &[frame.to_vec()])
                }
                Err(RecvTimeoutError::Disconnected) => {
                    fail("polaris mcp exited", &[frame.to_vec()])
                }
            }
        }
    }
}

/// The MCP tool call a bridge frame corresponds to (arguments in snake_case).
fn mcp_call(rng: &mut Rng, tasks: &[String]) -> (String, Value) {
    let task = rng.pick(tasks).clone();
    let expect = json!({"target": "#status", "contains": "Saved"});
    match rng.below(7) {
        0 => (
            "task_start".into(),
            json!({"title": "fuzz", "fixture": {"submit_delay_ms": 0}}),
        ),
        1 | 2 => (
            "page_fill".into(),
            json!({"task_id": task, "target": "#title", "value": "v"}),
        ),
        3 => (
            "page_click".into(),
            json!({"task_id": task, "target": "#save", "expect": expect}),
        ),
        4 => (
            "page_read".into(),
            json!({"task_id": task, "target": "#status"}),
        ),
        5 => ("task_status".into(), json!({"task_id": task})),
        _ => (
            "page_press".into(),
            json!({"task_id": task, "key": "Enter", "expect": expect}),
        ),
    }
}

/// One batch through the MCP front: tool calls with mutated arguments, one at a time.
fn mcp_batch(
    rng: &mut Rng,
    mcp: &mut Mcp,
    tasks: &[String],
    counts: &mut BTreeMap<Kind, u64>,
) -> (Vec<Vec<u8>>, u64) {
    let mut sent = Vec::new();
    let mut news = 0;
    for _ in 0..BATCH / 4 {
        // Only the arguments are mutated (an envelope without an id is a notification, which
        // JSON-RPC answers with nothing); bytes that are not JSON stay out of the envelope.
        let kind = *rng.pick(&[
            Kind::Valid,
            Kind::Retype,
            Kind::Delete,
            Kind::Duplicate,
            Kind::Deep,
            Kind::ArrayForObject,
            Kind::HugeNumber,
            Kind::Surrogate,
            Kind::Crlf,
        ]);
        let (name, args) = mcp_call(rng, tasks);
        let mut frame = Frame::new(args);
        mutate(rng, kind, &mut frame);
        *counts.entry(kind).or_default() += 1;
        let id = mcp.next_id;
        mcp.next_id += 1;
        let mut line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":"#
        )
        .into_bytes();
        line.extend_from_slice(&frame.bytes());
        line.extend_from_slice(b"}}");
        if kind == Kind::Crlf {
            line.push(b'\r');
        }
        mcp.send(&line);
        let answer = mcp.answer(&line);
        if answer["result"]["structuredContent"]["receipt"] == "new" {
            news += 1;
        }
        sent.push(line);
    }
    (sent, news)
}

/// Starts a task over the bridge (a valid request, counted as new).
fn start_task(probe: &mut Conn, rng: &mut Rng) -> (String, bool) {
    let v = probe.call(&json!({"id": uuid(rng), "method": "task.start",
        "params": {"title": "fuzz", "fixture": {"submitDelayMs": 0}}}));
    let new = v["meta"]["receipt"] == "new";
    (
        v["result"]["taskId"].as_str().unwrap_or("none").to_owned(),
        new,
    )
}

fn main() {
    let mut seconds = 30u64;
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(30),
            "--seed" => seed = args.next().and_then(|s| s.parse().ok()).unwrap_or(seed) | 1,
            other => {
                eprintln!("usage: fuzz [--seconds N] [--seed S] (unknown argument {other})");
                std::process::exit(2);
            }
        }
    }
    println!("fuzz: seed {seed}, {seconds} s");
    let mut rng = Rng(seed);
    let mut target = start();
    let mut checker = Checker {
        probe: Conn::connect(&target.bridge),
        used: 0,
        news: 0,
    };
    checker.used = checker.used();
    let mut mcp = Mcp::start(&target);
    let mut counts: BTreeMap<Kind, u64> = BTreeMap::new();
    let mut per_socket: BTreeMap<&str, u64> = BTreeMap::new();
    let mut tasks: Vec<String> = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut batches = 0u64;
    while Instant::now() < deadline {
        // A few live tasks for the frames to act on (old ones get finished, stopped, blocked).
        if tasks.len() < 4 || rng.chance(20) {
            let (task, new) = start_task(&mut checker.probe, &mut rng);
            checker.news += u64::from(new);
            tasks.push(task);
            if tasks.len() > 8 {
                tasks.remove(0);
            }
        }
        let (socket, (frames, news)) = match rng.below(10) {
            0..=5 => (
                "bridge",
                socket_batch(
                    &mut rng,
                    &target.bridge.clone(),
                    true,
                    &tasks,
                    &mut ids,
                    &mut counts,
                ),
            ),
            6..=7 => (
                "introspect",
                socket_batch(
                    &mut rng,
                    &target.introspect.clone(),
                    false,
                    &tasks,
                    &mut ids,
                    &mut counts,
                ),
            ),
            _ => ("mcp", mcp_batch(&mut rng, &mut mcp, &tasks, &mut counts)),
        };
        *per_socket.entry(socket).or_default() += frames.len() as u64;
        checker.news += news;
        checker.after_batch(&mut target, &frames, &format!("a {socket} batch"));
        batches += 1;
    }
    let mut log = String::new();
    let _ = std::fs::File::open(target.dir.path().join("serve.log"))
        .and_then(|mut f| f.read_to_string(&mut log));
    if log.contains("panicked") {
        fail(&format!("the host logged a panic:\n{log}"), &[]);
    }
    println!("fuzz: {batches} batches, no violation");
    for (socket, n) in &per_socket {
        println!("  {socket:<10} {n:>9} frames");
    }
    let total: u64 = counts.values().sum();
    for (kind, n) in &counts {
        println!("  {:<16} {n:>9}", format!("{kind:?}"));
    }
    println!("  {:<16} {total:>9}", "total");
    println!("  receipts.used   {:>9}", checker.used);
}
