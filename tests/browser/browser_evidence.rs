//! Network evidence (SPEC §16) end to end: a real `polaris serve --executor chromium` with a
//! private headless Chromium drives the web app of `polaris::webapp`, and what each action's
//! reply says the page sent is held against what the app's server received (its own request
//! log, [`WebApp::requests`], and its commit counts) — one test per case of the SPEC.
//!
//! Without a browser each test prints one `skipped:` line and passes, unless
//! `POLARIS_REQUIRE_BROWSER=1`.

use polaris_testkit::browser::rig;
use polaris_testkit::browser::*;
use polaris_testkit::host::*;

use std::path::Path;
use std::time::Duration;

use polaris::webapp::Fault;
use serde_json::{json, Value};

/// A host with the Chromium executor and the app it drives.
type Rig = rig::BrowserHost;

fn submit(task: &str, expect: Value) -> Value {
    json!({"taskId": task, "target": "#submit", "expect": expect})
}

fn click(task: &str, target: &str, contains: &str) -> Value {
    json!({"taskId": task, "target": target, "expect": {"target": "#status", "contains": contains}})
}

/// The evidence's requests whose method is `method` and whose URL's path ends with `path`.
fn sent<'a>(evidence: &'a Value, method: &str, path: &str) -> Vec<&'a Value> {
    evidence["requests"]
        .as_array()
        .unwrap_or_else(|| panic!("evidence lists requests: {evidence}"))
        .iter()
        .filter(|r| {
            r["method"] == method && {
                let url = r["url"].as_str().unwrap();
                url.split('?').next().unwrap().ends_with(path)
            }
        })
        .collect()
}

/// The one request `method path` of the evidence, checked for the fields every entry has.
fn one<'a>(evidence: &'a Value, method: &str, path: &str) -> &'a Value {
    let found = sent(evidence, method, path);
    assert_eq!(found.len(), 1, "one {method} {path}: {evidence}");
    let r = found[0];
    assert!(r["sentAt"].as_str().unwrap().ends_with('Z'), "{r}");
    r
}

fn digest(r: &Value) -> &str {
    let d = r["bodySha256"]
        .as_str()
        .unwrap_or_else(|| panic!("a body digest: {r}"));
    assert_eq!(d.len(), 64, "{r}");
    d
}

async fn verify(r: &mut Rig, task: &str) -> Value {
    let v = r.call("task.verifyOutcome", json!({"taskId": task})).await;
    ok(&v).clone()
}

async fn verify_until(r: &mut Rig, task: &str, want: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..40 {
        last = verify(r, task).await;
        if last["outcome"] == want {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    panic!(
        "verification never said {want}; last {last}\n{}",
        r.host.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_save_shows_one_post_and_its_answer() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.filled("Evidence one").await;
    let reply = r.call("page.click", submit(&task, saved())).await;
    let e = &ok(&reply)["evidence"];
    let post = one(e, "POST", "/posts");
    assert_eq!(post["status"], 303, "{e}");
    assert!(post["answeredAt"].is_string(), "{post}");
    assert!(post["bodyBytes"].as_u64().unwrap() > 0, "{post}");
    digest(post);
    // The redirect's document load is the navigation that followed.
    let nav = one(e, "GET", "/posts/1");
    assert_eq!(nav["navigation"], true, "{nav}");
    assert_eq!(nav["status"], 200, "{nav}");
    assert!(e.get("duplicateSends").is_none(), "{e}");
    // The server saw exactly what the evidence lists.
    assert_eq!(r.received("POST", "/posts"), 1);
    assert_eq!(r.app.commits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_answered_after_the_deadline_shows_its_late_answer_when_verified() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(1500, &[]).await else {
        return;
    };
    let task = r.filled("Late evidence").await;
    r.app.set_fault(Fault::Late(Duration::from_millis(2500)));
    let reply = r.call("page.click", submit(&task, saved())).await;
    let e = err(&reply, "OUTCOME_UNCERTAIN");
    let evidence = &e["details"]["evidence"];
    let post = one(evidence, "POST", "/posts");
    assert_eq!(post["status"], "no response", "{evidence}");
    assert!(post.get("answeredAt").is_none(), "{post}");
    assert_eq!(evidence["watching"], true, "{evidence}");
    assert!(
        e["message"].as_str().unwrap().contains("no response"),
        "{e}"
    );
    assert_eq!(
        r.received("POST", "/posts"),
        1,
        "the POST reached the server"
    );
    // The late answer arrives; verification shows it with the outcome it resolves.
    assert_eq!(r.app.wait_commits(1, Duration::from_secs(10)).await, 1);
    let v = verify_until(&mut r, &task, "confirmed").await;
    let late = &v["resolved"]["evidence"];
    let post = one(late, "POST", "/posts");
    assert_eq!(post["status"], 303, "{v}");
    assert!(post["answeredAt"].is_string(), "{post}");
    assert!(late.get("watching").is_none(), "the watch ended: {late}");
    assert_eq!(r.received("POST", "/posts"), 1, "never sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_shows_the_post_sent_and_failed() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(1500, &[]).await else {
        return;
    };
    let task = r.filled("Dropped").await;
    r.app.set_fault(Fault::DropResponse);
    let reply = r.call("page.click", submit(&task, saved())).await;
    let e = err(&reply, "OUTCOME_UNCERTAIN");
    let post = one(&e["details"]["evidence"], "POST", "/posts");
    assert_eq!(post["status"], "connection reset", "{post}");
    assert!(
        post["error"].as_str().unwrap().starts_with("net::ERR_"),
        "{post}"
    );
    // It did reach the server (which committed, then closed without answering).
    assert_eq!(r.received("POST", "/posts"), 1);
    assert_eq!(r.app.commits(), 1);
    // The pending outcome carries it too.
    let st = r.call("task.status", json!({"taskId": task})).await;
    let pending = &ok(&st)["pendingOutcome"]["evidence"];
    assert_eq!(one(pending, "POST", "/posts")["status"], "connection reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_is_evidence_and_changes_no_classification() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev?status=500")).await;
    let reply = r
        .call("page.click", click(&task, "#save", "Answered 500"))
        .await;
    // The expectation the caller chose held: ok, whatever the status (evidence never
    // reclassifies an action).
    let e = &ok(&reply)["evidence"];
    let post = one(e, "POST", "/ev/save");
    assert_eq!(post["status"], 500, "{e}");
    let url = post["url"].as_str().unwrap();
    assert!(url.contains("status=~") && url.contains("token=~"), "{url}");
    assert!(
        !url.contains("secret") && !url.contains("500"),
        "query values hashed: {url}"
    );
    let body = br#"{"title":"Hello","n":1}"#;
    assert_eq!(post["bodyBytes"], body.len());
    assert_eq!(
        digest(post),
        polaris::protocol::evidence::body_sha256(body),
        "the digest of the body the page sent"
    );
    assert_eq!(r.received("POST", "/ev/save"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_fires_twice_is_flagged_as_a_duplicate_send() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev")).await;
    let mut feed = Conn::connect(&r.host.introspect()).await;
    let sub = feed.call("subscribe", json!({})).await;
    assert_eq!(ok(&sub)["subscribed"], true);
    let rid = new_id();
    let reply =
        r.c.call_id(&rid, "page.click", click(&task, "#double", "Answered 201"))
            .await;
    let e = &ok(&reply)["evidence"];
    let posts = sent(e, "POST", "/ev/save");
    assert_eq!(posts.len(), 2, "{e}");
    assert_eq!(digest(posts[0]), digest(posts[1]));
    let dup = &e["duplicateSends"];
    assert_eq!(dup.as_array().unwrap().len(), 1, "{e}");
    assert_eq!(dup[0]["times"], 2);
    assert_eq!(dup[0]["method"], "POST");
    assert_eq!(r.until_received("POST", "/ev/save", 2).await, 2);
    // The receipt records one execution; the feed flags the duplicate.
    let status = r.call("receipt.status", json!({"requestId": rid})).await;
    assert_eq!(ok(&status)["state"], "completed");
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), feed.read_frame())
            .await
            .expect("the feed flags the duplicate send");
        if frame["event"] == "network.duplicateSends" {
            assert_eq!(frame["data"]["requestId"], rid.as_str(), "{frame}");
            assert_eq!(frame["data"]["duplicateSends"][0]["times"], 2, "{frame}");
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_after_an_uncertain_reply_shows_when_verified_and_is_flagged() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(1000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev")).await;
    let mut feed = Conn::connect(&r.host.introspect()).await;
    ok(&feed.call("subscribe", json!({})).await);
    // An expectation nothing shows: the action ends uncertain, its page still watched.
    let reply = r
        .call("page.click", click(&task, "#again", "Never shown"))
        .await;
    let e = err(&reply, "OUTCOME_UNCERTAIN");
    assert_eq!(e["details"]["evidence"]["watching"], true, "{e}");
    // The handler's second save reaches the server after a while; verification then lists it
    // with the first and flags the pair.
    assert_eq!(r.until_received("POST", "/ev/save", 2).await, 2);
    let v = verify(&mut r, &task).await;
    assert_eq!(v["outcome"], "not_observed", "{v}");
    let evidence = &v["pendingOutcome"]["evidence"];
    assert_eq!(sent(evidence, "POST", "/ev/save").len(), 2, "{v}");
    assert_eq!(evidence["duplicateSends"][0]["times"], 2, "{v}");
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), feed.read_frame())
            .await
            .expect("the feed flags the duplicate send");
        if frame["event"] == "network.duplicateSends" {
            assert_eq!(frame["data"]["taskId"], task.as_str(), "{frame}");
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_resend_by_the_browser_reaches_the_server_but_not_the_evidence() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(3000, &[]).await else {
        return;
    };
    r.app.set_keep_alive(true);
    let task = r.filled("Kept alive").await;
    // The server commits, then closes the (reused) connection without answering: Chromium's
    // network stack sends the POST again on a fresh connection, below what DevTools reports.
    r.app.set_fault(Fault::DropResponse);
    let reply = r.call("page.click", submit(&task, saved())).await;
    let e = err(&reply, "OUTCOME_UNCERTAIN");
    let evidence = &e["details"]["evidence"];
    let server = r.until_received("POST", "/posts", 2).await;
    let listed = sent(evidence, "POST", "/posts");
    // What this browser does, measured: the page sent one POST; the server received it twice
    // and committed twice; the evidence lists the one request the page made, failed. The
    // re-send happens inside the network stack, which DevTools does not report, so no
    // duplicate can be flagged for it — the server's own count is the only witness.
    assert_eq!(listed.len(), 1, "{evidence}");
    assert_eq!(
        server, 2,
        "the browser re-sent the POST on a new connection"
    );
    assert_eq!(r.app.commits(), 2);
    assert_ne!(listed[0]["status"], 303, "{evidence}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_killed_with_the_post_in_flight_shows_it_unanswered() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.filled("Crashed").await;
    r.app.set_fault(Fault::Late(Duration::from_millis(1500)));
    let rid = new_id();
    r.c.send(&rid, "page.click", submit(&task, saved())).await;
    assert_eq!(r.until_received("POST", "/posts", 1).await, 1);
    assert!(kill_renderers(r.pid()) > 0, "a renderer to kill");
    let reply = r.c.wait(&rid).await;
    let e = err(&reply, "OUTCOME_UNCERTAIN");
    let post = one(&e["details"]["evidence"], "POST", "/posts");
    assert!(
        post["status"] == "no response" || post["status"] == "aborted",
        "sent, never answered: {post}"
    );
    assert_eq!(r.app.wait_commits(1, Duration::from_secs(10)).await, 1);
    assert_eq!(r.received("POST", "/posts"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_of_another_origin_shows_its_post() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/site")).await;
    let frame = "#card-frame";
    let f = r
        .call(
            "page.fill",
            json!({"taskId": task, "target": {"role": "textbox", "name": "Card number", "frame": frame}, "value": "4242 4242"}),
        )
        .await;
    ok(&f);
    let pay = r
        .call(
            "page.click",
            json!({"taskId": task,
                   "target": {"role": "button", "name": "Pay", "exact": true, "frame": frame},
                   "expect": {"target": {"role": "status", "frame": frame}, "equals": "Paid #1"}}),
        )
        .await;
    let e = &ok(&pay)["evidence"];
    let post = one(e, "POST", "/card/pay");
    let card = format!("http://{}/card/pay", r.app.card_addr());
    assert_eq!(post["url"], card, "the second origin: {e}");
    assert_eq!(post["status"], 303);
    digest(post);
    let card_posts = r
        .app
        .requests()
        .iter()
        .filter(|q| q.method == "POST" && q.port == r.app.card_addr().port())
        .count();
    assert_eq!(card_posts, 1);
    assert_eq!(r.app.card_payments(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_beacon_shows_in_the_evidence() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev")).await;
    let reply = r
        .call("page.click", click(&task, "#beacon", "Beacon queued"))
        .await;
    let e = &ok(&reply)["evidence"];
    let beacon = one(e, "POST", "/ev/beacon");
    assert_eq!(beacon["bodyBytes"], "seen=1".len(), "{beacon}");
    assert_eq!(r.until_received("POST", "/ev/beacon", 1).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_too_large_for_its_event_is_asked_for_and_digested() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev")).await;
    let reply = r
        .call("page.click", click(&task, "#large", "Large answered 201"))
        .await;
    let e = &ok(&reply)["evidence"];
    let post = one(e, "POST", "/ev/save");
    // Beyond the 64 KiB the event carries: the body was asked for, hashed and dropped.
    let body = vec![b'x'; 100_000];
    assert_eq!(post["bodyBytes"], body.len(), "{post}");
    assert_eq!(
        digest(post),
        polaris::protocol::evidence::body_sha256(&body)
    );
    assert_eq!(r.received("POST", "/ev/save"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_fetch_shows_in_the_evidence() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev")).await;
    let reply = r
        .call("page.click", click(&task, "#worker", "Worker answered 201"))
        .await;
    let e = &ok(&reply)["evidence"];
    let post = one(e, "POST", "/ev/save");
    assert_eq!(post["status"], 201, "{e}");
    assert_eq!(post["bodyBytes"], "from-worker".len(), "{post}");
    assert_eq!(r.received("POST", "/ev/save"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_evidence_bound_are_counted_in_unlisted() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &["--evidence-max-requests", "2"]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev")).await;
    let reply = r
        .call("page.click", click(&task, "#many", "Many answered"))
        .await;
    let e = &ok(&reply)["evidence"];
    // The page sent five; the first two are listed, the other three counted.
    assert_eq!(sent(e, "POST", "/ev/save").len(), 2, "{e}");
    assert_eq!(e["unlisted"], 3, "{e}");
    assert_eq!(r.until_received("POST", "/ev/save", 5).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_step_that_posts_is_uncertain_with_the_post_as_evidence() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(3000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev")).await;
    let reply = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#save", "expect": null, "local": true}),
        )
        .await;
    let e = err(&reply, "OUTCOME_UNCERTAIN");
    assert!(e["message"].as_str().unwrap().contains("sent POST"), "{e}");
    one(&e["details"]["evidence"], "POST", "/ev/save");
    assert_eq!(r.until_received("POST", "/ev/save", 1).await, 1);
    // A local step that sends nothing stays local.
    let st = r
        .call("task.stop", json!({"taskId": task, "reason": "checked"}))
        .await;
    ok(&st);
    let task = r.task(&r.app.url_of("/ev")).await;
    let tab = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "Tab", "expect": null, "local": true}),
        )
        .await;
    let done = ok(&tab);
    assert_eq!(done["evidence"]["requests"], json!([]), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_watch_replies_carry_no_evidence() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &["--no-network-evidence"]).await else {
        return;
    };
    let task = r.filled("Not watched").await;
    let reply = r.call("page.click", submit(&task, saved())).await;
    let result = ok(&reply);
    assert!(result.get("evidence").is_none(), "{result}");
    assert_eq!(r.received("POST", "/posts"), 1);
}

/// `polaris receipts --json` against a host's socket directory.
fn receipts_json(dir: &Path) -> Value {
    let out = std::process::Command::new(polaris_bin())
        .args(["receipts", "--json", "--socket-dir"])
        .arg(dir)
        .output()
        .expect("polaris receipts runs");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_survives_a_restart_and_shows_in_receipts() {
    let _one = one_at_a_time().await;
    let journal = tempfile::tempdir().unwrap();
    let jdir = journal.path().join("j").display().to_string();
    let Some(mut r) = Rig::start(1500, &["--journal", &jdir]).await else {
        return;
    };
    let task = r.filled("Kept in the journal").await;
    r.app.set_fault(Fault::DropResponse);
    let rid = new_id();
    let reply =
        r.c.call_id(&rid, "page.click", submit(&task, saved()))
            .await;
    let before = err(&reply, "OUTCOME_UNCERTAIN")["details"]["evidence"].clone();
    assert_eq!(one(&before, "POST", "/posts")["status"], "connection reset");
    let listed = receipts_json(&r.host.dir);
    let item = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["requestId"] == rid.as_str())
        .expect("the click's receipt is listed")
        .clone();
    assert_eq!(item["evidence"], before, "{item}");
    r.host.terminate();

    // A new host on the same journal: the stored reply, its evidence included, replays.
    let chromium = chromium_or_skip().unwrap();
    let mut args = serve_args(&chromium, 1500);
    args.extend(["--journal".to_owned(), jdir.clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let host = TestHost::start(&args);
    let _reaper = Reaper {
        host_pid: host.child.as_ref().unwrap().id(),
    };
    let mut c = host.conn().await;
    let status = c.call("receipt.status", json!({"requestId": rid})).await;
    let stored = &ok(&status)["reply"];
    assert_eq!(stored["error"]["details"]["evidence"], before, "{status}");
    let st = c.call("task.status", json!({"taskId": task})).await;
    assert_eq!(
        ok(&st)["pendingOutcome"]["evidence"],
        before,
        "the pending outcome keeps it: {st}"
    );
    let listed = receipts_json(&host.dir);
    let item = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["requestId"] == rid.as_str())
        .expect("listed after the restart")
        .clone();
    assert_eq!(item["evidence"], before, "{item}");
    assert_eq!(r.received("POST", "/posts"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_host_lists_the_evidence_it_stored() {
    let _one = one_at_a_time().await;
    let Some(pg) = polaris_testkit::postgres::require_or_skip("tests/browser/browser_evidence.rs")
    else {
        return;
    };
    let conninfo = pg.conninfo();
    let fleet = ["--ledger", &conninfo, "--host-id", "alpha"];
    let Some(mut r) = Rig::start(5000, &fleet).await else {
        return;
    };
    let task = r.filled("On the fleet").await;
    let rid = new_id();
    let reply =
        r.c.call_id(&rid, "page.click", submit(&task, saved()))
            .await;
    let stored = ok(&reply)["evidence"].clone();
    assert_eq!(one(&stored, "POST", "/posts")["status"], 303, "{stored}");
    // The operator's listing of the fleet's book shows what the reply carried; the fills
    // that took effect carry none, as on a single host.
    let listed = receipts_json(&r.host.dir);
    let items = listed["items"].as_array().unwrap();
    let item = items
        .iter()
        .find(|i| i["requestId"] == rid.as_str())
        .unwrap_or_else(|| panic!("the click is listed: {listed}"));
    assert_eq!(item["evidence"], stored, "{item}");
    let fills: Vec<_> = items
        .iter()
        .filter(|i| i["method"] == "page.fill")
        .collect();
    assert_eq!(fills.len(), 2, "{listed}");
    assert!(
        fills.iter().all(|i| i.get("evidence").is_none()),
        "{listed}"
    );
    // And receipts.get, read from the same row, agrees.
    let mut intro = Conn::connect(&r.host.introspect()).await;
    let got = intro.call("receipts.get", json!({"requestId": rid})).await;
    assert_eq!(ok(&got)["reply"]["result"]["evidence"], stored, "{got}");
    assert_eq!(r.received("POST", "/posts"), 1);
    drop(r);
    drop(pg);
}

/// What the app's server received for `method path`: each request's `Content-Length`.
fn received_lengths(r: &Rig, method: &str, path: &str) -> Vec<Option<u64>> {
    r.app
        .requests()
        .iter()
        .filter(|q| q.method == method && q.path == path)
        .map(|q| q.content_length)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_a_mebibyte_has_its_length_and_says_why_it_has_no_digest() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(8000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev")).await;
    let big = 2 * 1024 * 1024;
    let reply = r
        .call(
            "page.click",
            click(&task, "#huge", &format!("Big answered {big}")),
        )
        .await;
    let e = &ok(&reply)["evidence"];
    let post = one(e, "POST", "/ev/big");
    assert_eq!(post["status"], 201, "{e}");
    // The browser keeps 1 MiB of a request's data: the length is the one sent, the digest is
    // said to be missing rather than left out.
    assert_eq!(post["bodyBytes"], big, "{post}");
    assert_eq!(post["bodyUnread"], "too large", "{post}");
    assert!(post.get("bodySha256").is_none(), "{post}");
    assert_eq!(received_lengths(&r, "POST", "/ev/big"), [Some(big)]);

    // A blob the page made in memory is read whole, digest and all.
    let reply = r
        .call("page.click", click(&task, "#blob", "Blob answered 5000"))
        .await;
    let e = &ok(&reply)["evidence"];
    let post = one(e, "POST", "/ev/big");
    assert_eq!(post["bodyBytes"], 5000, "{post}");
    assert_eq!(
        digest(post),
        polaris::protocol::evidence::body_sha256(&[b'z'; 5000])
    );
    assert!(post.get("bodyUnread").is_none(), "{post}");
    assert_eq!(
        received_lengths(&r, "POST", "/ev/big"),
        [Some(big), Some(5000)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_upload_has_its_length_and_says_why_it_has_no_digest() {
    let _one = one_at_a_time().await;
    let uploads = tempfile::tempdir().unwrap();
    std::fs::write(uploads.path().join("report.bin"), vec![7u8; 300_000]).unwrap();
    let dir = uploads.path().display().to_string();
    let Some(mut r) = Rig::start(8000, &["--upload-dir", &dir]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/site")).await;
    let u = r
        .call(
            "page.upload",
            json!({"taskId": task, "target": {"role": "button", "name": "Attachment"},
                   "files": ["report.bin"]}),
        )
        .await;
    assert_eq!(
        ok(&u)["evidence"]["requests"],
        json!([]),
        "choosing sends nothing"
    );
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#upload-button",
                   "expect": {"text": {"contains": "Uploaded report.bin (300000 bytes)"}}}),
        )
        .await;
    let e = &ok(&c)["evidence"];
    let post = one(e, "POST", "/site/upload");
    // The browser hands out the form's text parts only, never the file's bytes: a digest of
    // those would be of a body nobody sent. The length is the multipart body's as sent.
    let sent = received_lengths(&r, "POST", "/site/upload");
    assert_eq!(sent.len(), 1);
    let length = sent[0].expect("the upload declares its length");
    assert!(length > 300_000, "{length}");
    assert_eq!(post["bodyBytes"], length, "{post}");
    assert_eq!(post["bodyUnread"], "files", "{post}");
    assert!(post.get("bodySha256").is_none(), "{post}");
    assert_eq!(r.app.site_uploads()[0].size, 300_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_workers_sends_are_listed_once_and_a_pass_through_is_no_duplicate() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/ev/sw")).await;
    let w = r
        .call(
            "page.wait",
            json!({"taskId": task, "text": "Worker ready", "timeoutMs": 10000}),
        )
        .await;
    ok(&w);
    // The worker answers the page's POST /ev/relay itself, by sending a POST of its own.
    let reply = r
        .call("page.click", click(&task, "#relay", "Relayed 201"))
        .await;
    let e = &ok(&reply)["evidence"];
    let relay = one(e, "POST", "/ev/relay");
    assert_eq!(relay["answeredByServiceWorker"], true, "{e}");
    let forwarded = one(e, "POST", "/ev/save");
    assert_eq!(forwarded["status"], 201, "{e}");
    assert_eq!(
        digest(forwarded),
        polaris::protocol::evidence::body_sha256(b"relayed:note=1")
    );
    assert!(forwarded.get("answeredByServiceWorker").is_none(), "{e}");
    assert!(e.get("duplicateSends").is_none(), "{e}");
    // The server's log: the worker's POST, once; the page's never reached it.
    assert_eq!(r.received("POST", "/ev/save"), 1);
    assert_eq!(r.received("POST", "/ev/relay"), 0);

    // The worker passes the page's POST /ev/save on as it is: DevTools reports it twice, the
    // page's request (answered by the worker) and the worker's fetch; the server got it once,
    // so it is no duplicate send.
    let reply = r
        .call("page.click", click(&task, "#through", "Through 201"))
        .await;
    let e = &ok(&reply)["evidence"];
    let posts = sent(e, "POST", "/ev/save");
    assert_eq!(posts.len(), 2, "{e}");
    let by_worker: Vec<_> = posts
        .iter()
        .filter(|p| p["answeredByServiceWorker"] == true)
        .collect();
    assert_eq!(by_worker.len(), 1, "the page's request: {e}");
    assert_eq!(digest(posts[0]), digest(posts[1]), "{e}");
    assert!(e.get("duplicateSends").is_none(), "sent once: {e}");
    assert_eq!(r.until_received("POST", "/ev/save", 2).await, 2);
}
