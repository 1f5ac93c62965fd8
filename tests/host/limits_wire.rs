//! The host's connection limits through the real binary (SPEC §10): a full socket answers
//! `HOST_BUSY`, a frame that trickles in ends `FRAME_TIMEOUT`, an idle connection is closed, a
//! peer that does not read cannot grow the host's memory, a connection holds at most 8
//! subscriptions, and the client library reads these refusals for what they are.

use polaris_testkit::host::*;

use std::time::Duration;

use polaris::client::BridgeClient;
use polaris::protocol::{Delivery, ErrorCode};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// Asserts the line is a connection-level refusal: `"id": null`, not ok, with `code`.
#[track_caller]
fn refusal<'a>(line: &'a Value, code: &str) -> &'a Value {
    assert!(
        line["id"].is_null(),
        "a connection-level line has no id: {line}"
    );
    let e = err(line, code);
    assert_eq!(e["delivery"], "not_executed", "{line}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_257th_connection_hears_host_busy_and_a_freed_slot_serves_again() {
    let host = TestHost::start(&[]);
    // Take every one of the default 256 slots; a served call proves each was accepted.
    let mut held = Vec::new();
    for _ in 0..256 {
        let mut c = host.conn().await;
        ok(&c.call("host.hello", json!({})).await);
        held.push(c);
    }
    let mut late = host.conn().await;
    // What it sends is never read.
    late.try_send(&new_id(), "task.start", json!({"title": "never read"}))
        .await;
    let line = late.read_frame().await;
    let e = refusal(&line, "HOST_BUSY");
    assert_eq!(e["details"]["maxConnections"], 256, "{line}");
    assert!(late.closed_by_host().await, "closed after the one line");
    // Nothing was admitted.
    assert_eq!(used(&mut held[0]).await, 0);

    // A slot freed is a slot served.
    held.pop().unwrap().close();
    let mut again = None;
    for _ in 0..200 {
        let mut c = host.conn().await;
        let id = new_id();
        c.try_send(&id, "host.hello", json!({})).await;
        let first = c.read_frame().await;
        if first["id"] == id.as_str() {
            again = Some(first);
            break;
        }
        refusal(&first, "HOST_BUSY");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ok(&again.expect("a closed connection's slot is given to a new one"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_reports_host_busy_as_not_sent() {
    let host = TestHost::start(&["--max-connections", "2"]);
    let mut a = host.served_conn().await;
    let _b = host.served_conn().await;
    let client = BridgeClient::new(&host.dir).with_timeout(Duration::from_secs(20));
    let e = client
        .call("task.start", json!({"title": "refused"}))
        .await
        .expect_err("every slot is taken");
    assert_eq!(e.code, ErrorCode::HostBusy, "{e:?}");
    assert_eq!(e.delivery, Delivery::NotSent, "{e:?}");
    assert_eq!(e.details.as_ref().unwrap()["maxConnections"], 2, "{e:?}");
    assert_eq!(used(&mut a).await, 0, "nothing was admitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_frame_ends_with_frame_timeout_and_nothing_runs() {
    let host = TestHost::start(&["--frame-timeout-ms", "300"]);
    let c = tokio::net::UnixStream::connect(host.bridge())
        .await
        .unwrap();
    let (r, mut w) = c.into_split();
    // One byte every 20 ms, for as long as the host listens: never a whole frame in time.
    let frame = format!(
        "{}\n",
        json!({"id": "slow-1", "method": "task.start", "params": {"title": "trickled"}})
    );
    let trickle = tokio::spawn(async move {
        for b in frame.as_bytes().iter().cycle() {
            if w.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let mut reader = tokio::io::BufReader::new(r);
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line),
    )
    .await
    .expect("the host answers the slow frame instead of waiting for it")
    .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    let e = refusal(&v, "FRAME_TIMEOUT");
    assert_eq!(e["details"]["frameTimeoutMs"], 300, "{v}");
    let mut rest = String::new();
    let n = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut rest),
    )
    .await
    .expect("closed")
    .unwrap_or(0);
    assert_eq!(n, 0, "the connection is closed after FRAME_TIMEOUT: {rest}");
    trickle.abort();
    let mut c = host.conn().await;
    assert_eq!(used(&mut c).await, 0, "nothing of the slow frame ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_but_a_running_request_or_a_subscription_keeps_it() {
    let host = TestHost::start(&["--idle-timeout-ms", "300"]);
    let mut idle = host.conn().await;
    ok(&idle.call("host.hello", json!({})).await);
    assert!(idle.closed_by_host().await, "an idle connection is closed");

    // A request that runs longer than the idle timeout keeps its connection.
    let mut busy = host.conn().await;
    let task = start_task(&mut busy, json!({"submitDelayMs": 1200})).await;
    let id = busy
        .send(
            &new_id(),
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": saved()}),
        )
        .await;
    ok(&busy.wait(&id).await);

    // So does a subscription on the introspection socket, with no request in flight.
    let mut feed = Conn::connect(&host.introspect()).await;
    ok(&feed.call("subscribe", json!({})).await);
    tokio::time::sleep(Duration::from_millis(900)).await;
    ok(&feed.call("host.hello", json!({})).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cr_of_crlf_does_not_count_toward_the_frame_limit() {
    let host = TestHost::start(&["--max-frame-bytes", "200"]);
    let mut c = host.conn().await;
    // Pad a selector to make the frame exactly 200 bytes (no such task: any reply with this
    // ID shows the frame was taken whole).
    let frame = |pad: usize| {
        json!({"id": "crlf-1", "method": "page.read", "params": {"taskId": "none", "target": format!("#{}", "p".repeat(pad))}}).to_string()
    };
    let base = frame(0).len();
    let exact = frame(200 - base);
    assert_eq!(exact.len(), 200);
    c.send_raw(format!("{exact}\r\n").as_bytes()).await;
    let reply = c.read_frame().await;
    assert_eq!(reply["id"], "crlf-1", "{reply}");
    assert_ne!(reply["error"]["code"], "FRAME_TOO_LARGE", "{reply}");
    // One byte more is over the limit, CR or not.
    let over = frame(201 - base);
    c.send_raw(format!("{over}\r\n").as_bytes()).await;
    let line = c.read_frame().await;
    assert_eq!(
        refusal(&line, "FRAME_TOO_LARGE")["details"]["maxFrameBytes"],
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_too_large_reaches_its_caller_as_not_executed() {
    let host = TestHost::start(&["--max-frame-bytes", "4096"]);
    let client = BridgeClient::new(&host.dir).with_timeout(Duration::from_secs(20));
    let reply = client
        .call_with_id("big-1", "host.hello", json!({"pad": "x".repeat(8192)}))
        .await
        .expect("the host's own answer, not a broken connection");
    assert!(!reply.ok);
    let e = reply.error.unwrap();
    assert_eq!(e.code, ErrorCode::FrameTooLarge);
    assert_eq!(e.delivery, Delivery::NotExecuted);
    assert_eq!(reply.id.as_deref(), Some("big-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_does_not_read_cannot_grow_the_hosts_memory() {
    // A `page.fill` value just under its 64 KiB field limit makes each `receipt.status` reply
    // about that large; the bound is 4 such replies, so pipelining 64 of them on each of 32
    // connections is 16× the bound per connection. (Without the bound the host grew ~155 MiB.)
    const CONNECTIONS: u64 = 32;
    const PIPELINED: u64 = 64;
    let value_bytes: u64 = 60 * 1024;
    let bound = 4 * value_bytes;
    let host = TestHost::start(&["--max-pending-reply-bytes", &bound.to_string()]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let fill_id = "big-fill";
    ok(&c
        .call_id(
            fill_id,
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "v".repeat(value_bytes as usize)}),
        )
        .await);
    let pid = host.child.as_ref().unwrap().id();
    let before = rss_bytes(pid);

    let mut pipeliners = Vec::new();
    for n in 0..CONNECTIONS {
        let mut p = host.conn().await;
        let mut burst = Vec::new();
        for i in 0..PIPELINED {
            let frame = json!({"id": format!("rs-{n}-{i}"), "method": "receipt.status", "params": {"requestId": fill_id}});
            burst.extend_from_slice(format!("{frame}\n").as_bytes());
        }
        p.send_raw(&burst).await;
        pipeliners.push(p);
    }
    // Let the host do whatever it will with what it was sent, sampling its memory meanwhile;
    // another client is still served.
    let mut peak = before;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak = peak.max(rss_bytes(pid));
    }
    ok(&c.call("host.hello", json!({})).await);
    peak = peak.max(rss_bytes(pid));
    // Each connection may hold its bound plus one more reply; the stated overhead (48 MiB, for
    // all connections together) covers the replies being built, the connections' buffers and
    // what the allocator keeps (measured: about 30 MiB with a few connections).
    let overhead: u64 = 48 << 20;
    let allowed = CONNECTIONS * (bound + value_bytes) + overhead;
    let without_bound = CONNECTIONS * PIPELINED * value_bytes;
    assert!(
        allowed < without_bound,
        "the test must be able to fail: {allowed} vs {without_bound}"
    );
    let grew = peak.saturating_sub(before);
    eprintln!(
        "RSS grew {} KiB with {CONNECTIONS} non-reading pipeliners of {PIPELINED} × {} KiB replies (bound {} KiB per connection; allowed {} KiB; unbounded would be {} KiB)",
        grew / 1024,
        value_bytes / 1024,
        bound / 1024,
        allowed / 1024,
        without_bound / 1024
    );
    assert!(
        grew <= allowed,
        "RSS grew {grew} bytes, more than {allowed}"
    );

    // Nothing is lost: a pipeliner that starts reading gets every reply.
    let mut first = pipeliners.remove(0);
    for i in 0..PIPELINED {
        let r = first.wait(&format!("rs-0-{i}")).await;
        assert_eq!(ok(&r)["state"], "completed", "{}", &r.to_string()[..200]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ninth_subscription_on_one_connection_is_refused() {
    let host = TestHost::start(&[]);
    let mut c = Conn::connect(&host.introspect()).await;
    for i in 0..8 {
        let r = c.call_id(&format!("sub-{i}"), "subscribe", json!({})).await;
        assert_eq!(ok(&r)["subscribed"], true);
    }
    let r = c.call_id("sub-8", "subscribe", json!({})).await;
    let e = err(&r, "BAD_REQUEST");
    assert_eq!(e["details"]["maxSubscriptions"], 8, "{r}");
    assert_eq!(e["delivery"], "not_executed");
    // Another connection subscribes as usual.
    let mut other = Conn::connect(&host.introspect()).await;
    ok(&other.call("subscribe", json!({"coalesceMs": 100})).await);
}

/// Run as another user by the test below: connects to the socket named in
/// `POLARIS_RAW_PEER_SOCKET`, sends a request and prints the first line the host writes back.
/// Ignored, so it only runs when asked for by name.
#[test]
#[ignore = "a helper process for the peer test, run as another user"]
fn raw_peer_helper() {
    use std::io::{BufRead, Write};
    let path = std::env::var("POLARIS_RAW_PEER_SOCKET").expect("run by the peer test");
    let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s
        .write_all(b"{\"id\":\"peer-1\",\"method\":\"task.start\",\"params\":{\"title\":\"x\"}}\n");
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    println!("PEER-LINE {}", line.trim_end());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_user_hears_why_before_the_close() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if polaris::server::current_uid() != 0 {
        eprintln!("skipped: acting as another user needs root");
        return;
    }
    let host = TestHost::start(&[]);
    // Open the path to everyone so only the peer-credential check stands in the way.
    std::fs::set_permissions(host.root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&host.dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(host.bridge(), std::fs::Permissions::from_mode(0o666)).unwrap();
    // This test binary, copied where another user can run it wherever the checkout lives.
    let keep = short_tempdir();
    std::fs::set_permissions(keep.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let exe = keep.path().join("limits_wire");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(&exe)
        .args([
            "--ignored",
            "--exact",
            "limits_wire::raw_peer_helper",
            "--nocapture",
        ])
        .env("POLARIS_RAW_PEER_SOCKET", host.bridge())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PEER-LINE "))
        .unwrap_or_else(|| {
            panic!(
                "the other user heard nothing: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let v: Value = serde_json::from_str(line).unwrap();
    let e = refusal(&v, "BAD_REQUEST");
    assert_eq!(e["details"]["peerUid"], 65534, "{v}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("connection refused: peer uid 65534"),
        "{v}"
    );
    let mut c = host.conn().await;
    assert_eq!(used(&mut c).await, 0, "nothing the other user sent ran");
}

fn serve_with(
    args: &[&str],
    envs: &[(&str, Option<&str>)],
    cwd: &std::path::Path,
) -> std::process::Output {
    let mut cmd = std::process::Command::new(polaris_bin());
    cmd.arg("serve").args(args).current_dir(cwd);
    for (k, v) in envs {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_audit_log_is_refused_at_start_and_at_commit() {
    use std::os::unix::fs::PermissionsExt;
    // At start: the host refuses to run with a log it would never write.
    let root = short_tempdir();
    let target = root.path().join("elsewhere.txt");
    std::fs::write(&target, "").unwrap();
    let link = root.path().join("audit.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = serve_with(
        &[
            "--socket-dir",
            root.path().join("s").to_str().unwrap(),
            "--audit-log",
            link.to_str().unwrap(),
        ],
        &[],
        root.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("symbolic link"), "{stderr}");
    // So is one that others may write.
    std::fs::remove_file(&link).unwrap();
    std::fs::write(&link, "").unwrap();
    std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = serve_with(
        &[
            "--socket-dir",
            root.path().join("s").to_str().unwrap(),
            "--audit-log",
            link.to_str().unwrap(),
        ],
        &[],
        root.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("writable by group or others"), "{stderr}");

    // At commit: a link put in its place later is not followed, and nothing is cleared.
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    start_task(&mut c, json!({})).await;
    let target = host.root.path().join("elsewhere.txt");
    std::fs::write(&target, "").unwrap();
    let _ = std::fs::remove_file(host.root.path().join("audit.jsonl"));
    std::os::unix::fs::symlink(&target, host.root.path().join("audit.jsonl")).unwrap();
    let mut intro = Conn::connect(&host.introspect()).await;
    let prepared = intro
        .call("receipts.clearPrepare", json!({"filter": {}}))
        .await;
    let token = ok(&prepared)["token"].clone();
    let commit = intro
        .call(
            "receipts.clearCommit",
            json!({"token": token, "reason": "through a link"}),
        )
        .await;
    let e = err(&commit, "INTERNAL");
    assert_eq!(e["delivery"], "not_executed", "{commit}");
    assert!(
        e["message"].as_str().unwrap().contains("symbolic link"),
        "{commit}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "",
        "nothing written through the link"
    );
    assert_eq!(used(&mut c).await, 1, "nothing was cleared");
}

#[test]
fn without_home_or_xdg_state_home_the_host_needs_an_audit_log_flag() {
    let root = short_tempdir();
    let cwd = root.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let out = serve_with(
        &["--socket-dir", root.path().join("s").to_str().unwrap()],
        &[("HOME", None), ("XDG_STATE_HOME", None)],
        &cwd,
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("pass --audit-log"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(&cwd).unwrap().count(),
        0,
        "nothing is put in the working directory"
    );
    assert!(!root.path().join("s").exists(), "nothing was served");
}

#[test]
fn a_socket_directory_below_a_directory_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = short_tempdir();
    let open = root.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = open.join("mine").join("s");
    let out = serve_with(
        &[
            "--socket-dir",
            dir.to_str().unwrap(),
            "--audit-log",
            root.path().join("a.jsonl").to_str().unwrap(),
        ],
        &[],
        root.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("writable by group or others"), "{stderr}");
    assert!(!dir.exists(), "nothing was created below it");

    // A symlink on the way that another user owns (only root can make one to test with).
    if polaris::server::current_uid() != 0 {
        eprintln!("skipped: a symlink owned by another user needs root to make");
        return;
    }
    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let out = serve_with(
        &[
            "--socket-dir",
            link.join("s").to_str().unwrap(),
            "--audit-log",
            root.path().join("a.jsonl").to_str().unwrap(),
        ],
        &[],
        root.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("symbolic link owned by uid 65534"),
        "{stderr}"
    );
    assert!(!real.join("s").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_does_not_keep_its_slot() {
    // One slot, held by a peer that pipelines large replies and never reads them.
    let host = TestHost::start(&[
        "--max-connections",
        "1",
        "--idle-timeout-ms",
        "300",
        "--max-frame-bytes",
        "1048576",
    ]);
    let mut stuck = host.served_conn().await;
    let task = start_task(&mut stuck, json!({})).await;
    ok(&stuck
        .call_id(
            "wide",
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "w".repeat(60 * 1024)}),
        )
        .await);
    let mut burst = Vec::new();
    for i in 0..64 {
        let frame = json!({"id": format!("nr-{i}"), "method": "receipt.status", "params": {"requestId": "wide"}});
        burst.extend_from_slice(format!("{frame}\n").as_bytes());
    }
    stuck.send_raw(&burst).await;
    // Another client gets the slot once the host gives up on the peer that takes nothing.
    let mut served = None;
    for _ in 0..500 {
        let mut c = host.conn().await;
        c.try_send("next", "host.hello", json!({})).await;
        let first = c.read_frame().await;
        if first["id"] == "next" {
            served = Some(first);
            break;
        }
        refusal(&first, "HOST_BUSY");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ok(&served.expect("the slot of a peer that never reads is freed"));
    // The stalled peer finds its connection closed after the replies that fit in the socket.
    let mut replies = 0;
    while let Some(line) = stuck.read_line().await {
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if v["id"].as_str().is_some_and(|id| id.starts_with("nr-")) {
            replies += 1;
        }
    }
    assert!(
        replies < 64,
        "closed before every reply was taken ({replies})"
    );
}
