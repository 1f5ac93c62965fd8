//! The receipt rules through a real host and its bridge socket.

use polaris_testkit::host::*;

use std::time::Duration;

use serde_json::{json, Value};

#[tokio::test]
async fn same_id_same_content_joins_then_replays() {
    let host = TestHost::start(&[]);
    let mut a = host.conn().await;
    let mut b = host.conn().await;
    let task = start_task(&mut a, json!({"submitDelayMs": 300})).await;
    let rid = new_id();
    let press = json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()});
    a.send(&rid, "page.press", press.clone()).await;
    // Give the first copy time to create its receipt before the second arrives.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let joined = b.call_id(&rid, "page.press", press.clone()).await;
    let first = a.wait(&rid).await;
    assert_eq!(receipt(&first), "new");
    assert_eq!(receipt(&joined), "joined");
    assert_eq!(first["result"], joined["result"]);
    assert_eq!(ok(&first)["observation"]["value"], "Saved #1");
    let replayed = b.call_id(&rid, "page.press", press).await;
    assert_eq!(receipt(&replayed), "replayed");
    assert_eq!(replayed["result"], first["result"]);
    assert_eq!(submissions(&mut a, &task).await, 1);

    let status = a.call("receipt.status", json!({"requestId": rid})).await;
    let s = ok(&status);
    assert_eq!(s["state"], "completed");
    assert_eq!(s["joins"], 1);
    assert_eq!(s["replays"], 1);
    assert_eq!(s["reply"]["result"], first["result"]);
}

#[tokio::test]
async fn an_id_with_other_content_is_refused_for_mutations_and_reads() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let rid = new_id();
    ok(&c
        .call_id(
            &rid,
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": saved()}),
        )
        .await);
    assert_eq!(mutations(&mut c).await, 1);

    let other = c.call_id(&rid, "page.click", json!({"taskId": task, "target": "#submit", "expect": {"target": "#status", "equals": "Saved #2"}})).await;
    let e = err(&other, "MCP_REQUEST_ID_REUSED");
    assert_eq!(e["delivery"], "not_executed");
    assert_eq!(e["details"]["method"], "page.click");
    assert!(e["details"]["firstSeenAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(receipt(&other), "none");

    // Reads are checked too, and not stored.
    for (method, params) in [
        ("page.read", json!({"taskId": task, "target": "#status"})),
        ("tools.list", json!({})),
        ("host.hello", json!({})),
    ] {
        err(
            &c.call_id(&rid, method, params).await,
            "MCP_REQUEST_ID_REUSED",
        );
    }
    assert_eq!(
        mutations(&mut c).await,
        1,
        "no refusal touched the executor"
    );
    assert_eq!(submissions(&mut c, &task).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_thousand_copies_from_fifty_connections_execute_once() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"submitDelayMs": 400})).await;
    let rid = new_id();
    let press = json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()});
    let used_before = used(&mut c).await;

    let mut senders = Vec::new();
    for _ in 0..50 {
        let mut conn = host.conn().await;
        let rid = rid.clone();
        let frame = format!(
            "{}\n",
            json!({"id": rid, "method": "page.press", "params": press})
        );
        senders.push(tokio::spawn(async move {
            conn.send_raw(frame.repeat(100).as_bytes()).await;
            let mut replies = Vec::new();
            for _ in 0..100 {
                let line = conn.read_line().await.expect("a reply");
                replies.push(serde_json::from_str::<Value>(&line).unwrap());
            }
            replies
        }));
    }
    let mut kinds = std::collections::HashMap::<String, usize>::new();
    let mut results = std::collections::HashSet::new();
    for s in senders {
        for r in s.await.unwrap() {
            assert_eq!(r["id"], rid.as_str());
            *kinds.entry(receipt(&r).to_owned()).or_default() += 1;
            results
                .insert(serde_json::to_string(&json!([r["ok"], r["result"], r["error"]])).unwrap());
        }
    }
    assert_eq!(kinds.get("new"), Some(&1), "{kinds:?}");
    assert_eq!(kinds.values().sum::<usize>(), 5000);
    assert_eq!(kinds.get("none"), None, "{kinds:?}");
    assert_eq!(
        results.len(),
        1,
        "every copy got the same reply: {results:?}"
    );
    assert_eq!(submissions(&mut c, &task).await, 1);
    assert_eq!(mutations(&mut c).await, 1);
    assert_eq!(used(&mut c).await, used_before + 1);
}

#[tokio::test]
async fn a_dropped_connection_cancels_nothing_and_the_reply_is_kept() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"submitDelayMs": 200})).await;
    let rid = new_id();
    let click = json!({"taskId": task, "target": "#submit", "expect": saved()});
    let mut gone = host.conn().await;
    gone.send(&rid, "page.click", click.clone()).await;
    gone.close();

    tokio::time::sleep(Duration::from_millis(50)).await;
    let running = c.call("receipt.status", json!({"requestId": rid})).await;
    assert_eq!(ok(&running)["state"], "running");
    // The same content re-queried while running joins; after completion it replays.
    let joined = c.call_id(&rid, "page.click", click.clone()).await;
    assert_eq!(receipt(&joined), "joined");
    assert_eq!(ok(&joined)["observation"]["value"], "Saved #1");
    let again = c.call_id(&rid, "page.click", click).await;
    assert_eq!(receipt(&again), "replayed");
    assert_eq!(submissions(&mut c, &task).await, 1);
}

#[tokio::test]
async fn a_full_book_refuses_new_ids_and_keeps_every_old_one() {
    let host = TestHost::start(&["--capacity", "6"]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let mut kept = vec![];
    for i in 0..5 {
        let rid = new_id();
        let params = json!({"taskId": task, "target": "#title", "value": format!("v{i}")});
        ok(&c.call_id(&rid, "page.fill", params.clone()).await);
        kept.push((rid, params));
    }
    let refused = c
        .call(
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "one too many"}),
        )
        .await;
    let e = err(&refused, "RECEIPT_CAPACITY_FULL");
    assert_eq!(e["delivery"], "not_executed");
    assert_eq!(e["details"]["limit"], "count");
    assert_eq!(e["details"]["capacity"], 6);
    assert_eq!(e["details"]["used"], 6);
    assert!(e["details"]["usedBytes"].as_u64().unwrap() > 0);
    assert_eq!(e["details"]["maxBytes"], 1u64 << 30);
    assert_eq!(receipt(&refused), "none");
    err(
        &c.call("task.start", json!({"title": "new work"})).await,
        "RECEIPT_CAPACITY_FULL",
    );

    // Reads still work; nothing was evicted: every old ID replays its own reply.
    let page = c
        .call("page.read", json!({"taskId": task, "target": "#title"}))
        .await;
    assert_eq!(ok(&page)["value"], "v4", "the refused fill did not run");
    for (rid, params) in &kept {
        let r = c.call_id(rid, "page.fill", params.clone()).await;
        assert_eq!(receipt(&r), "replayed");
        assert_eq!(ok(&r)["value"], params["value"]);
    }
    let status = c.call("run.status", json!({})).await;
    assert_eq!(ok(&status)["receipts"]["used"], 6);
    assert_eq!(ok(&status)["receipts"]["capacity"], 6);
    ok(&c.call("host.hello", json!({})).await);
}

/// The part of a reply line before `"meta"`: what a replay must repeat byte for byte.
fn before_meta(line: &str) -> &str {
    &line[..line.find(",\"meta\":").expect("a meta member")]
}

#[tokio::test]
async fn an_execution_error_is_stored_and_replayed_byte_for_byte() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"failSubmit": true})).await;
    let rid = new_id();
    let click = json!({"taskId": task, "target": "#submit", "expect": saved()});
    c.send(&rid, "page.click", click.clone()).await;
    let (first, first_line) = c.wait_raw(&rid).await;
    let e = err(&first, "ACTION_FAILED");
    assert_eq!(e["delivery"], "failed");
    c.send(&rid, "page.click", click).await;
    let (again, again_line) = c.wait_raw(&rid).await;
    assert_eq!(receipt(&again), "replayed");
    assert_eq!(before_meta(&first_line), before_meta(&again_line));
    assert_eq!(submissions(&mut c, &task).await, 0);
    let status = c.call("task.status", json!({"taskId": task})).await;
    assert_eq!(
        ok(&status)["state"],
        "running",
        "a definite failure does not block"
    );
}

/// Without the journal, a fill done at once keeps no copy of its reply: a copy sent later is
/// answered with the reply written again from the stored request. Through the real binary, for
/// fills pipelined in one write and for one sent alone, with values plain, escaped and past
/// ASCII: every replay repeats the first answer byte for byte, `receipt.status` shows that
/// reply, and no replay fills the page again.
#[tokio::test]
async fn a_fill_reply_written_again_from_its_request_is_the_first_byte_for_byte() {
    let host = TestHost::start(&["--no-journal"]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let values = [
        "plain",
        "quote \" and \\ backslash",
        "tab\tnewline\n",
        "é 日本 🎉",
        "",
    ];
    let ids: Vec<String> = values.iter().map(|_| new_id()).collect();
    let frames: String = ids
        .iter()
        .zip(values)
        .map(|(id, value)| {
            let params = json!({"taskId": task, "target": "#title", "value": value});
            format!(
                "{}\n",
                json!({"id": id, "method": "page.fill", "params": params})
            )
        })
        .collect();
    c.send_raw(frames.as_bytes()).await;
    let mut first = Vec::new();
    for id in &ids {
        let (reply, line) = c.wait_raw(id).await;
        assert_eq!(receipt(&reply), "new", "{line}");
        first.push(line);
    }
    // The field holds what a later fill put there, whatever the replays below.
    let later = json!({"taskId": task, "target": "#title", "value": "later"});
    ok(&c.call("page.fill", later).await);
    // The same frames again, together, then one alone, on another connection.
    c.send_raw(frames.as_bytes()).await;
    let mut other = host.conn().await;
    other
        .send_raw(frames.lines().last().unwrap().as_bytes())
        .await;
    other.send_raw(b"\n").await;
    for (i, (id, value)) in ids.iter().zip(values).enumerate() {
        let (reply, line) = c.wait_raw(id).await;
        assert_eq!(receipt(&reply), "replayed");
        assert_eq!(before_meta(&line), before_meta(&first[i]), "{value:?}");
        assert_eq!(ok(&reply)["value"], value);
        let status = c.call("receipt.status", json!({"requestId": id})).await;
        assert_eq!(ok(&status)["reply"]["result"], ok(&reply).clone());
    }
    let (alone, line) = other.wait_raw(ids.last().unwrap()).await;
    assert_eq!(receipt(&alone), "replayed");
    assert_eq!(before_meta(&line), before_meta(first.last().unwrap()));
    let read = c
        .call("page.read", json!({"taskId": task, "target": "#title"}))
        .await;
    assert_eq!(
        ok(&read)["value"],
        "later",
        "a replay filled the page again"
    );
}

#[tokio::test]
async fn key_order_and_whitespace_do_not_change_the_fingerprint() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let rid = new_id();
    let one = format!(
        r##"{{"id":"{rid}","method":"page.fill","params":{{"taskId":"{task}","target":"#title","value":"Hello"}}}}"##
    );
    let two = format!(
        r##"{{ "params" : {{ "value":"Hello" , "target" : "#title", "taskId":"{task}" }},"method":"page.fill",  "id":"{rid}" }}"##
    );
    c.send_raw(format!("{one}\n").as_bytes()).await;
    assert_eq!(receipt(&c.wait(&rid).await), "new");
    c.send_raw(format!("{two}\n").as_bytes()).await;
    assert_eq!(receipt(&c.wait(&rid).await), "replayed");
    // A value of another JSON type is other content.
    let three = format!(
        r##"{{"id":"{rid}","method":"page.fill","params":{{"taskId":"{task}","target":"#title","value":"Hello "}}}}"##
    );
    c.send_raw(format!("{three}\n").as_bytes()).await;
    err(&c.wait(&rid).await, "MCP_REQUEST_ID_REUSED");
}

/// A fill kept in its short form (target and value beside the receipt's task) is still told
/// apart by its task: the same ID, target and value in another task is other content, and the
/// very same fill sent again, alone or pipelined, replays the first reply.
#[tokio::test]
async fn a_fill_under_one_id_in_another_task_is_other_content() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let first_task = start_task(&mut c, json!({})).await;
    let other_task = start_task(&mut c, json!({})).await;
    let rid = new_id();
    let fill = |task: &str| json!({"taskId": task, "target": "#title", "value": "Hello"});
    let first = c.call_id(&rid, "page.fill", fill(&first_task)).await;
    assert_eq!(receipt(&first), "new");
    let elsewhere = c.call_id(&rid, "page.fill", fill(&other_task)).await;
    err(&elsewhere, "MCP_REQUEST_ID_REUSED");
    let read = c
        .call(
            "page.read",
            json!({"taskId": other_task, "target": "#title"}),
        )
        .await;
    assert_ne!(
        ok(&read)["value"],
        "Hello",
        "the other task's page was filled"
    );
    let again = c.call_id(&rid, "page.fill", fill(&first_task)).await;
    assert_eq!(receipt(&again), "replayed");
    assert_eq!(again["result"], first["result"]);
    let line = |task: &str| {
        format!(
            "{}\n",
            json!({"id": rid, "method": "page.fill", "params": fill(task)})
        )
    };
    c.send_raw(format!("{}{}", line(&first_task), line(&other_task)).as_bytes())
        .await;
    assert_eq!(receipt(&c.wait(&rid).await), "replayed");
    err(&c.wait(&rid).await, "MCP_REQUEST_ID_REUSED");
}

#[tokio::test]
async fn bad_input_gets_the_spec_error_and_creates_nothing() {
    let host = TestHost::start(&["--max-frame-bytes", "4096"]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let used_before = used(&mut c).await;
    let t = task.as_str();
    let long_title = "x".repeat(201);
    let long_id = "a".repeat(129);
    // (frame, expected code, whether the reply carries the id)
    let rows: Vec<(String, &str, Option<&str>)> = vec![
        ("this is not json".into(), "BAD_REQUEST", None),
        ("[1,2,3]".into(), "BAD_REQUEST", None),
        ("\"a string\"".into(), "BAD_REQUEST", None),
        (r#"{"method":"host.hello"}"#.into(), "BAD_REQUEST", None),
        (r#"{"id":7,"method":"host.hello"}"#.into(), "BAD_REQUEST", None),
        (r#"{"id":"","method":"host.hello"}"#.into(), "BAD_REQUEST", None),
        (format!(r#"{{"id":"{long_id}","method":"host.hello"}}"#), "BAD_REQUEST", None),
        (r#"{"id":"has space","method":"host.hello"}"#.into(), "BAD_REQUEST", None),
        (r#"{"id":"b1"}"#.into(), "BAD_REQUEST", Some("b1")),
        (r#"{"id":"b2","method":5}"#.into(), "BAD_REQUEST", Some("b2")),
        (r#"{"id":"b3","method":"page.explode"}"#.into(), "UNKNOWN_METHOD", Some("b3")),
        (r#"{"id":"b4","method":"task.start","params":[1]}"#.into(), "BAD_REQUEST", Some("b4")),
        (r#"{"id":"b5","method":"host.hello","extra":1}"#.into(), "BAD_REQUEST", Some("b5")),
        (r#"{"id":"b6","method":"task.start","params":{"title":"x","colour":"red"}}"#.into(), "BAD_REQUEST", Some("b6")),
        (r#"{"id":"b7","method":"task.start","params":{"title":7}}"#.into(), "BAD_REQUEST", Some("b7")),
        (r#"{"id":"b8","method":"task.start","params":{"title":""}}"#.into(), "BAD_REQUEST", Some("b8")),
        (format!(r#"{{"id":"b9","method":"task.start","params":{{"title":"{long_title}"}}}}"#), "BAD_REQUEST", Some("b9")),
        (r#"{"id":"b10","method":"task.start","params":{"title":"x","fixture":{"submitDelayMs":60001}}}"#.into(), "BAD_REQUEST", Some("b10")),
        (r#"{"id":"b11","method":"task.start","params":{"title":"x","fixture":{"slow":true}}}"#.into(), "BAD_REQUEST", Some("b11")),
        (r#"{"id":"b12","method":"task.start","params":{"title":"x","fixture":{"submitDelayMs":-1}}}"#.into(), "BAD_REQUEST", Some("b12")),
        (format!(r#"{{"id":"b13","method":"page.click","params":{{"taskId":"{t}","target":"x"}}}}"#), "BAD_REQUEST", Some("b13")),
        (format!(r##"{{"id":"b14","method":"page.click","params":{{"taskId":"{t}","target":"#submit"}}}}"##), "BAD_REQUEST", Some("b14")),
        (format!(r##"{{"id":"b15","method":"page.press","params":{{"taskId":"{t}","key":"Enter","target":"#title","expect":{{"target":"#status"}}}}}}"##), "BAD_REQUEST", Some("b15")),
        (format!(r##"{{"id":"b16","method":"page.press","params":{{"taskId":"{t}","key":"Enter","expect":{{"target":"#status","equals":"a","contains":"b"}}}}}}"##), "BAD_REQUEST", Some("b16")),
        (format!(r##"{{"id":"b17","method":"page.fill","params":{{"taskId":"{t}","target":"#Title","value":"v"}}}}"##), "BAD_REQUEST", Some("b17")),
        (format!(r##"{{"id":"b18","method":"page.fill","params":{{"taskId":"{t}","target":"#title"}}}}"##), "BAD_REQUEST", Some("b18")),
        (format!(r##"{{"id":"b19","method":"page.fill","params":{{"taskId":"{t}","target":"#title","value":null}}}}"##), "BAD_REQUEST", Some("b19")),
        (format!(r#"{{"id":"b20","method":"task.stop","params":{{"taskId":"{t}","reason":""}}}}"#), "BAD_REQUEST", Some("b20")),
        (r#"{"id":"b21","method":"receipt.status","params":{"requestId":"no spaces allowed"}}"#.into(), "BAD_REQUEST", Some("b21")),
        (r#"{"id":"b22","method":"host.hello","params":{"x":1}}"#.into(), "BAD_REQUEST", Some("b22")),
        (r##"{"id":"b23","method":"page.fill","params":{"taskId":"no-such-task","target":"#title","value":"v"}}"##.into(), "TASK_NOT_FOUND", Some("b23")),
        (r#"{"id":"b24","method":"task.finish","params":{"taskId":"no-such-task"}}"#.into(), "TASK_NOT_FOUND", Some("b24")),
    ];
    for (frame, code, id) in &rows {
        c.send_raw(format!("{frame}\n").as_bytes()).await;
        let r = c.read_frame().await;
        let e = err(&r, code);
        assert_eq!(e["delivery"], "not_executed", "{frame}");
        assert_eq!(r["id"], id.map_or(Value::Null, |s| json!(s)), "{frame}");
        assert_eq!(receipt(&r), "none", "{frame}");
    }
    // Non-UTF-8 bytes: an error, and the connection stays usable.
    c.send_raw(b"{\"id\":\"x\",\"method\":\"host.hello\xff\xfe\"}\n")
        .await;
    err(&c.read_frame().await, "BAD_REQUEST");
    ok(&c.call("host.hello", json!({})).await);

    assert_eq!(
        used(&mut c).await,
        used_before,
        "no bad frame created a receipt"
    );
    let status = c.call("run.status", json!({})).await;
    assert_eq!(
        ok(&status)["tasks"]["running"],
        1,
        "no bad frame created a task"
    );
    assert_eq!(mutations(&mut c).await, 0);

    // An oversized frame: FRAME_TOO_LARGE with a null id, then the host closes.
    let mut big = host.conn().await;
    let huge = format!(
        r#"{{"id":"big","method":"task.start","params":{{"title":"{}"}}}}"#,
        "y".repeat(5000)
    );
    big.send_raw(format!("{huge}\n").as_bytes()).await;
    let r = big.read_frame().await;
    err(&r, "FRAME_TOO_LARGE");
    assert_eq!(r["id"], Value::Null);
    assert!(big.closed_by_host().await);

    // A half-written line followed by the end of the stream.
    let s = tokio::net::UnixStream::connect(host.bridge())
        .await
        .unwrap();
    let (r, mut w) = s.into_split();
    use tokio::io::AsyncWriteExt;
    w.write_all(br#"{"id":"half","method":"task.st"#)
        .await
        .unwrap();
    w.shutdown().await.unwrap();
    let mut line = String::new();
    use tokio::io::AsyncBufReadExt;
    tokio::io::BufReader::new(r)
        .read_line(&mut line)
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    err(&v, "BAD_REQUEST");

    // Other connections never noticed.
    assert_eq!(used(&mut c).await, used_before);
}

#[tokio::test]
async fn a_connection_with_64_requests_in_flight_is_not_read_further_until_one_completes() {
    let host = TestHost::start(&["--action-timeout-ms", "5000"]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"readDelayMs": 300})).await;
    let mut batch = String::new();
    for i in 0..64 {
        batch.push_str(&format!(
            "{}\n",
            json!({"id": format!("slow-{i}"), "method": "page.read", "params": {"taskId": task, "target": "#status"}})
        ));
    }
    batch.push_str(&format!(
        "{}\n",
        json!({"id": "hello", "method": "host.hello"})
    ));
    c.send_raw(batch.as_bytes()).await;
    let first = c.read_frame().await;
    assert!(
        first["id"].as_str().unwrap().starts_with("slow-"),
        "the 65th request waited for a slot: {first}"
    );
    assert_eq!(ok(&first)["value"], "Draft");
    ok(&c.wait("hello").await);
    for i in 0..64 {
        let id = format!("slow-{i}");
        if first["id"] != id.as_str() {
            assert_eq!(ok(&c.wait(&id).await)["value"], "Draft");
        }
    }
}

#[tokio::test]
async fn connections_beyond_the_limit_hear_host_busy_until_a_slot_frees() {
    let host = TestHost::start(&["--max-connections", "2"]);
    let a = host.served_conn().await;
    let mut b = host.served_conn().await;
    let mut third = host.conn().await;
    third.try_send("t", "host.hello", json!({})).await;
    let busy = third.read_frame().await;
    assert!(busy["id"].is_null(), "{busy}");
    assert_eq!(err(&busy, "HOST_BUSY")["details"]["maxConnections"], 2);
    assert!(third.closed_by_host().await);
    a.close();
    // The slot frees once the host sees `a` close.
    let mut served = false;
    for _ in 0..250 {
        let mut c = host.conn().await;
        c.try_send("t2", "host.hello", json!({})).await;
        if c.read_frame().await["id"] == "t2" {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "a freed slot serves a new connection");
    ok(&b.call("host.hello", json!({})).await);
}

/// Frames that arrive together are handled together (one critical section for the batch), but
/// each must be answered exactly as if the frames had come one at a time, in order.
#[tokio::test]
async fn a_pipelined_batch_is_answered_as_its_frames_would_be_one_by_one() {
    // Without a journal the fixture's fills complete inline, in frame order. With one, each
    // action waits for its receipt to be durable before it runs, so a close admitted behind
    // it in the same batch can complete first (as it can behind any slow action).
    let host = TestHost::start(&["--no-journal"]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let fill = |value: &str| json!({"taskId": task, "target": "#title", "value": value});
    let frame = |id: &str, method: &str, params: Value| {
        format!(
            "{}\n",
            json!({"id": id, "method": method, "params": params})
        )
    };
    let (a, b, r, f, late) = (new_id(), new_id(), new_id(), new_id(), new_id());
    let mut batch = String::new();
    batch += &frame(&a, "page.fill", fill("one"));
    batch += &frame(&a, "page.fill", fill("one")); // the same request again: joins or replays
    batch += &frame(&a, "page.fill", fill("two")); // the same id, other content
    batch += "this is not JSON\n";
    batch += &frame(&r, "page.read", json!({"taskId": task, "target": "#title"}));
    batch += &frame(&b, "page.fill", fill("three"));
    batch += &frame(&f, "task.finish", json!({"taskId": task}));
    batch += &frame(&late, "page.fill", fill("four")); // after the task closed
    c.send_raw(batch.as_bytes()).await;

    // Replies come in the order the frames were handled; the copies of `a` share one id, so
    // read them as lines.
    let mut replies = Vec::new();
    for _ in 0..8 {
        replies.push(c.read_frame().await);
    }
    let by_id = |id: &str| -> Vec<&Value> { replies.iter().filter(|v| v["id"] == id).collect() };

    let copies = by_id(&a);
    assert_eq!(copies.len(), 3, "{replies:?}");
    let first = copies
        .iter()
        .find(|v| receipt(v) == "new")
        .expect("one new");
    assert_eq!(ok(first), &json!({"target": "#title", "value": "one"}));
    let again = copies
        .iter()
        .find(|v| matches!(receipt(v), "joined" | "replayed"))
        .expect("the same request shares the first reply");
    assert_eq!(again["result"], first["result"]);
    let reused = copies
        .iter()
        .find(|v| v["ok"] == false)
        .expect("other content under the same id is refused");
    err(reused, "MCP_REQUEST_ID_REUSED");

    let bad: Vec<_> = replies.iter().filter(|v| v["id"].is_null()).collect();
    assert_eq!(bad.len(), 1, "{replies:?}");
    err(bad[0], "BAD_REQUEST");

    // (A read observes the page when the executor gets to it, as it would one by one.)
    assert!(ok(by_id(&r)[0])["value"].is_string());
    assert_eq!(ok(by_id(&b)[0])["value"], "three");
    assert_eq!(ok(by_id(&f)[0])["state"], "finished");
    err(by_id(&late)[0], "TASK_CLOSED");

    // The task's history is the order of handling, one by one: both fills before the finish,
    // the late fill refused after it; nothing else executed.
    let status = c.call("task.status", json!({"taskId": task})).await;
    let history = history(ok(&status));
    assert_eq!(
        history,
        [
            "task.start ok",
            "page.fill ok",
            "page.fill ok",
            "task.finish ok",
            "page.fill TASK_CLOSED"
        ],
    );
    assert_eq!(
        used(&mut c).await,
        4,
        "task.start, two fills and task.finish hold receipts"
    );
}
