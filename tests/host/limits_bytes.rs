//! The reply-byte bound through the real binary (SPEC §10, `--max-pending-reply-bytes`): it
//! holds within one pipelined batch of large replies, and it counts the event lines of
//! subscriptions a peer does not read; and the receipt index a host's bounds size is taken at
//! the start only while it is a fraction of the machine's memory. Memory is measured where it
//! would grow: the host's resident set, read from `/proc`.

use polaris_testkit::host::*;

use std::time::Duration;

use serde_json::json;

/// The highest resident set seen while sampling for `for_ms`.
async fn peak_rss(pid: u32, mut peak: u64, for_ms: u64) -> u64 {
    for _ in 0..for_ms / 50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak = peak.max(rss_bytes(pid));
    }
    peak
}

/// What the stated overhead covers, for every connection together: replies being built, the
/// connections' read buffers, the allocator's own pages.
const OVERHEAD: u64 = 48 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_of_large_replies_stays_within_the_reply_byte_bound() {
    // Each connection first reads the replies of a batch of small requests (so nothing it
    // sent before suggests large replies), then pipelines 64 `receipt.status` of a receipt
    // whose stored reply is ~60 KiB, in one write, and never reads. The bound is one such
    // reply: one batch of 64 is far past it unless the bound holds inside the batch.
    const CONNECTIONS: u64 = 32;
    const PIPELINED: u64 = 64;
    let value_bytes = 60 * 1024;
    let bound: u64 = 64 * 1024;
    let host = TestHost::start(&[
        "--no-journal",
        "--max-pending-reply-bytes",
        &bound.to_string(),
    ]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let fill_id = "big-fill";
    ok(&c
        .call_id(
            fill_id,
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "v".repeat(value_bytes)}),
        )
        .await);
    let status = |id: String| {
        let frame = json!({"id": id, "method": "receipt.status", "params": {"requestId": fill_id}});
        format!("{frame}\n")
    };
    c.send_raw(status("probe".into()).as_bytes()).await;
    let reply_bytes = c.wait_raw("probe").await.1.len() as u64 + 1;
    let pid = host.child.as_ref().unwrap().id();
    let before = rss_bytes(pid);

    let mut pipeliners = Vec::new();
    for n in 0..CONNECTIONS {
        let mut p = host.conn().await;
        let hellos: String = (0..4)
            .map(|i| {
                format!(
                    "{}\n",
                    json!({"id": format!("h-{n}-{i}"), "method": "host.hello"})
                )
            })
            .collect();
        p.send_raw(hellos.as_bytes()).await;
        for i in 0..4 {
            ok(&p.wait(&format!("h-{n}-{i}")).await);
        }
        let burst: String = (0..PIPELINED)
            .map(|i| status(format!("rs-{n}-{i}")))
            .collect();
        p.send_raw(burst.as_bytes()).await;
        pipeliners.push(p);
    }
    let mut peak = peak_rss(pid, before, 1500).await;
    // Another client is still served meanwhile.
    ok(&c.call("host.hello", json!({})).await);
    peak = peak.max(rss_bytes(pid));

    // Each connection may hold its bound plus the one reply that crossed it.
    let allowed = CONNECTIONS * (bound + reply_bytes) + OVERHEAD;
    let without_bound = CONNECTIONS * PIPELINED * reply_bytes;
    assert!(
        allowed * 2 < without_bound,
        "the test must be able to fail: {allowed} vs {without_bound}"
    );
    let grew = peak.saturating_sub(before);
    eprintln!(
        "RSS grew {} KiB with {CONNECTIONS} non-reading connections, each sent {PIPELINED} × {} KiB replies in one batch (bound {} KiB per connection; allowed {} KiB; one whole batch each would be {} KiB)",
        grew / 1024,
        reply_bytes / 1024,
        bound / 1024,
        allowed / 1024,
        without_bound / 1024
    );
    assert!(
        grew <= allowed,
        "RSS grew {grew} bytes, more than {allowed}"
    );

    // Nothing is lost: a pipeliner that starts reading gets every reply, in order.
    let mut first = pipeliners.remove(0);
    for i in 0..PIPELINED {
        let r = first.read_frame().await;
        assert_eq!(r["id"], format!("rs-0-{i}"));
        assert_eq!(ok(&r)["state"], "completed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_lines_a_subscriber_does_not_read_count_toward_the_reply_byte_bound() {
    // 32 introspection connections with 8 full-stream subscriptions each never read; agents
    // then create thousands of receipts, each publishing events. Unread event lines may not
    // pile up past the connection's reply-byte bound: the subscriber misses them and is told
    // so (`lagged`) when it reads again.
    const CONNECTIONS: u64 = 32;
    const SUBSCRIPTIONS: u64 = 8;
    const FILLS: usize = 12_000;
    let bound: u64 = 64 * 1024;
    let host = TestHost::start(&[
        "--no-journal",
        "--capacity",
        "20000",
        "--max-pending-reply-bytes",
        &bound.to_string(),
    ]);
    let pid = host.child.as_ref().unwrap().id();
    let mut subscribers = Vec::new();
    for n in 0..CONNECTIONS {
        let mut s = Conn::connect(&host.introspect()).await;
        for i in 0..SUBSCRIPTIONS {
            let r = s
                .call_id(&format!("sub-{n}-{i}"), "subscribe", json!({}))
                .await;
            assert_eq!(ok(&r)["subscribed"], true);
        }
        subscribers.push(s);
    }
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let before = rss_bytes(pid);

    // Fresh fills, 64 in flight on each of 4 connections (small values: the book's own growth
    // is not what is measured).
    let mut agents = Vec::new();
    for a in 0..4 {
        let mut conn = host.conn().await;
        let task = task.clone();
        agents.push(tokio::spawn(async move {
            let value = "x";
            let mut sent = 0;
            while sent < FILLS / 4 {
                let ids: Vec<String> = (0..64).map(|i| format!("f-{a}-{}", sent + i)).collect();
                let burst: String = ids
                    .iter()
                    .map(|id| {
                        let frame = json!({"id": id, "method": "page.fill", "params": {"taskId": task, "target": "#title", "value": value}});
                        format!("{frame}\n")
                    })
                    .collect();
                conn.send_raw(burst.as_bytes()).await;
                for id in &ids {
                    ok(&conn.wait(id).await);
                }
                sent += ids.len();
            }
        }));
    }
    let mut peak = before;
    while agents.iter().any(|a| !a.is_finished()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak = peak.max(rss_bytes(pid));
    }
    for a in agents {
        a.await.unwrap();
    }
    peak = peak_rss(pid, peak, 500).await;

    // Every event line, as one subscriber would have queued it without the bound (measured on
    // a reading subscriber of the same host).
    let mut reader = Conn::connect(&host.introspect()).await;
    ok(&reader.call_id("probe-sub", "subscribe", json!({})).await);
    let probe = new_id();
    ok(&c
        .call_id(
            &probe,
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "x"}),
        )
        .await);
    let mut event_bytes = 0u64;
    let mut events = 0u64;
    while events < 2 {
        let line = reader.read_line().await.expect("an event line");
        event_bytes += line.len() as u64 + 1;
        events += 1;
    }
    let line_bytes = event_bytes / events;
    // Without the bound each subscription keeps its own budget of 4096 lines.
    let without_bound = CONNECTIONS * SUBSCRIPTIONS * 4096 * line_bytes;
    let allowed = CONNECTIONS * (bound + 64 * 1024) + OVERHEAD;
    assert!(
        allowed * 2 < without_bound,
        "the test must be able to fail: {allowed} vs {without_bound}"
    );
    let grew = peak.saturating_sub(before);
    eprintln!(
        "RSS grew {} KiB with {CONNECTIONS} non-reading connections of {SUBSCRIPTIONS} subscriptions during {FILLS} fills (event lines ~{line_bytes} B; bound {} KiB per connection; allowed {} KiB; without the bound up to {} KiB)",
        grew / 1024,
        bound / 1024,
        allowed / 1024,
        without_bound / 1024
    );
    assert!(
        grew <= allowed,
        "RSS grew {grew} bytes, more than {allowed}"
    );

    // A subscriber that reads again hears what it missed.
    let mut first = subscribers.remove(0);
    let mut lagged = false;
    for _ in 0..200_000 {
        let Some(line) = first.read_line().await else {
            break;
        };
        if line.contains("\"lagged\"") {
            lagged = true;
            break;
        }
    }
    assert!(lagged, "a subscriber that missed events is told it lagged");
}

#[test]
fn the_receipt_index_is_resident_at_the_start_unless_it_would_take_a_quarter_of_the_memory() {
    // Room for 4,000,000 receipts: a 64 MiB index, faulted in before `host.hello` answers, so
    // no receipt meets an untouched index page under the host's lock.
    let host = TestHost::start(&[
        "--no-journal",
        "--capacity",
        "4000000",
        "--max-book-bytes",
        "4096000000",
    ]);
    let rss = rss_bytes(host.child.as_ref().unwrap().id());
    assert!(rss >= 64 << 20, "{} MiB resident at the start", rss >> 20);
    drop(host);

    // Bounds far beyond what the host will hold: room for receipts whose index is between half
    // the available memory and all of it (8 bytes a slot, the slots a power of two at least
    // 4/3 of the receipts). Faulting it in would take that memory and seconds before the host
    // answers; it is left to the receipts, and the host says so.
    let receipts = mem_available() * 3 / 64;
    let host = TestHost::start(&[
        "--no-journal",
        "--capacity",
        &receipts.to_string(),
        "--max-book-bytes",
        &(receipts * 1024).to_string(),
    ]);
    let rss = rss_bytes(host.child.as_ref().unwrap().id());
    assert!(
        rss < 256 << 20,
        "{} MiB resident at the start with room for {receipts} receipts",
        rss >> 20
    );
    let log = host.log();
    assert!(
        log.contains("it is not faulted in at the start"),
        "the host says why: {log}"
    );
    // And it takes receipts.
    let reply = sync_call(&host.bridge(), "task.start", json!({"title": "big book"})).unwrap();
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["meta"]["receipt"], "new", "{reply}");
}

/// One wave of `fills` fresh fills, 64 in flight on each of 4 connections; returns the peak RSS
/// of the host seen meanwhile.
async fn fill_wave(host: &TestHost, task: &str, wave: usize, fills: usize) -> u64 {
    let pid = host.child.as_ref().unwrap().id();
    let mut agents = Vec::new();
    for a in 0..4 {
        let mut conn = host.conn().await;
        let task = task.to_owned();
        agents.push(tokio::spawn(async move {
            let mut sent = 0;
            while sent < fills / 4 {
                let ids: Vec<String> = (0..64)
                    .map(|i| format!("w{wave}-{a}-{}", sent + i))
                    .collect();
                let burst: String = ids
                    .iter()
                    .map(|id| {
                        let frame = json!({"id": id, "method": "page.fill", "params": {"taskId": task, "target": "#title", "value": "x"}});
                        format!("{frame}\n")
                    })
                    .collect();
                conn.send_raw(burst.as_bytes()).await;
                for id in &ids {
                    ok(&conn.wait(id).await);
                }
                sent += ids.len();
            }
        }));
    }
    let mut peak = 0;
    while agents.iter().any(|a| !a.is_finished()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak = peak.max(rss_bytes(pid));
    }
    for a in agents {
        a.await.unwrap();
    }
    peak_rss(pid, peak, 500).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_never_read_cost_their_own_small_budget_and_go_when_closed() {
    // At the default reply-byte bound (8 MiB per connection), connections of eight
    // subscriptions each that never read: each subscription may hold only its own budget of
    // unwritten event bytes, and closing them gives it back — a second wave of as many costs
    // no more than the first.
    const CONNECTIONS: u64 = 32;
    const SUBSCRIPTIONS: u64 = 8;
    const FILLS: usize = 12_000;
    let host = TestHost::start(&["--no-journal", "--capacity", "40000"]);
    let pid = host.child.as_ref().unwrap().id();
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    // What one event line weighs, from a subscriber that reads.
    let mut reader = Conn::connect(&host.introspect()).await;
    ok(&reader.call_id("probe-sub", "subscribe", json!({})).await);
    ok(&c
        .call_id(
            &new_id(),
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "x"}),
        )
        .await);
    let mut line_bytes = 0u64;
    for _ in 0..2 {
        line_bytes += reader.read_line().await.expect("an event line").len() as u64 + 1;
    }
    line_bytes /= 2;
    drop(reader);
    let before = peak_rss(pid, rss_bytes(pid), 200).await;

    let budget = 128 * 1024;
    let allowed = CONNECTIONS * SUBSCRIPTIONS * budget + OVERHEAD;
    // What they could hold before: 4,096 lines each (the events of these fills fill it).
    let before_fix = CONNECTIONS * SUBSCRIPTIONS * 4096 * line_bytes;
    assert!(
        allowed * 2 < before_fix,
        "the test must be able to fail: {allowed} vs {before_fix}"
    );
    let mut peaks = Vec::new();
    for wave in 0..2 {
        let mut subscribers = Vec::new();
        for n in 0..CONNECTIONS {
            let mut s = Conn::connect(&host.introspect()).await;
            for i in 0..SUBSCRIPTIONS {
                let r = s
                    .call_id(&format!("sub-{wave}-{n}-{i}"), "subscribe", json!({}))
                    .await;
                assert_eq!(ok(&r)["subscribed"], true);
            }
            subscribers.push(s);
        }
        let peak = fill_wave(&host, &task, wave, FILLS).await;
        let grew = peak.saturating_sub(before);
        eprintln!(
            "wave {wave}: RSS grew {} KiB over the start with {CONNECTIONS}x{SUBSCRIPTIONS} non-reading subscriptions during {FILLS} fills (event lines ~{line_bytes} B; allowed {} KiB; 4,096 lines each would be {} KiB)",
            grew / 1024,
            allowed / 1024,
            before_fix / 1024
        );
        assert!(
            grew <= allowed,
            "wave {wave}: RSS grew {grew} bytes, more than {allowed}"
        );
        peaks.push(grew);
        for s in subscribers {
            s.close();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The host still answers, and the closed subscribers are gone from it: the bridge's
    // events reach a new reader at once.
    let mut reader = Conn::connect(&host.introspect()).await;
    ok(&reader.call_id("last-sub", "subscribe", json!({})).await);
    ok(&c
        .call_id(
            &new_id(),
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "x"}),
        )
        .await);
    assert!(reader.read_line().await.is_some());
}
