//! Non-public addresses against real Chromium and the test web app (`--allow-origin`): a
//! `task.start` or `page.navigate` to loopback, private, link-local or unspecified addresses
//! (however the address is written) is refused before anything is stored or opened; an allowed
//! origin opens; and a page on it that leads elsewhere in the private network — a link, a
//! redirect, a form's POST, a `fetch`, an iframe, a worker, a new tab — is blocked inside the browser,
//! shown as `blocked` in the action's evidence, and never reaches the server, whose own log
//! is the count. The same page with every port of 127.0.0.1 allowed does reach it.
//!
//! Without a browser each test prints one `skipped:` line and passes, unless
//! `POLARIS_REQUIRE_BROWSER=1`.

use polaris_testkit::browser::rig;
use polaris_testkit::browser::*;
use polaris_testkit::host::*;

use std::time::Duration;

use polaris::webapp::{ReceivedRequest, WebApp};
use serde_json::{json, Value};

/// A host with the Chromium executor and the web app it may (or may not) reach.
type Rig = rig::BrowserHost;

/// A host started with `--allow-origin` for each value `allowed` gives for the app.
async fn start(allowed: impl FnOnce(&WebApp) -> Vec<String> + 'static) -> Option<Rig> {
    start_with(allowed, &[]).await
}

/// The same, with `extra` flags.
async fn start_with(
    allowed: impl FnOnce(&WebApp) -> Vec<String> + 'static,
    extra: &[&str],
) -> Option<Rig> {
    rig::Setup::new(3000)
        .allowing(allowed)
        .file_urls(None)
        .flags(extra)
        .start()
        .await
}

fn main_origin(rig: &Rig) -> String {
    format!("http://{}", rig.app.addr())
}

/// Requests the second origin received: the count that must stay zero.
fn card_hits(rig: &Rig) -> Vec<ReceivedRequest> {
    let port = rig.app.card_addr().port();
    rig.app
        .requests()
        .into_iter()
        .filter(|r| r.port == port)
        .collect()
}

/// A task on the app's `/reach` page.
async fn reach_task(rig: &mut Rig) -> String {
    let url = rig.app.url_of("/reach");
    let r = rig
        .call("task.start", json!({"title": "reach", "url": url}))
        .await;
    assert_eq!(r["ok"], true, "{r}\n{}", rig.host.log());
    r["result"]["taskId"].as_str().unwrap().to_owned()
}

/// The one request in `evidence` to the second origin's `path`, which must be `blocked`.
fn blocked<'a>(evidence: &'a Value, method: &str, path: &str) -> &'a Value {
    let hits: Vec<&Value> = evidence["requests"]
        .as_array()
        .unwrap_or_else(|| panic!("no requests in {evidence}"))
        .iter()
        .filter(|r| r["method"] == method && r["url"].as_str().unwrap_or("").contains(path))
        .collect();
    assert_eq!(hits.len(), 1, "one {method} {path} in {evidence}");
    assert_eq!(hits[0]["status"], "blocked", "{evidence}");
    assert!(
        hits[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("ERR_BLOCKED_BY_CLIENT"),
        "{evidence}"
    );
    hits[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_every_non_public_address_is_refused_before_anything_opens() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(|_| vec![]).await else {
        return;
    };
    let port = r.app.addr().port();
    let exact = format!("--allow-origin http://127.0.0.1:{port}");
    let cases: Vec<(String, &str)> = vec![
        (r.app.url(), exact.as_str()),
        (format!("http://2130706433:{port}/"), exact.as_str()),
        (format!("http://0x7f.1:{port}/"), exact.as_str()),
        (format!("http://0177.0.0.1:{port}/"), exact.as_str()),
        (
            format!("http://localhost:{port}/"),
            "a name for this machine",
        ),
        (
            format!("http://app.localhost:{port}/"),
            "a name for this machine",
        ),
        (format!("http://[::1]:{port}/"), "a loopback address"),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            "a loopback address",
        ),
        (format!("http://0.0.0.0:{port}/"), "unspecified"),
        ("http://[::]/".into(), "unspecified"),
        ("http://10.0.0.1/".into(), "a private address"),
        ("http://172.16.5.4/".into(), "a private address"),
        ("http://192.168.1.1/".into(), "a private address"),
        (
            "http://[fd00::1]/".into(),
            "a private (unique local) address",
        ),
        (
            "http://169.254.169.254/latest/meta-data/".into(),
            "--allow-origin http://169.254.169.254 ",
        ),
        ("http://[fe80::1]/".into(), "a link-local address"),
        ("http://100.64.0.1/".into(), "shared"),
    ];
    for (url, says) in &cases {
        let id = new_id();
        let reply =
            r.c.call_id(&id, "task.start", json!({"title": "probe", "url": url}))
                .await;
        let e = err(&reply, "BAD_REQUEST");
        assert_eq!(e["delivery"], "not_executed", "{reply}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("--allow-origin"), "{url}: {message}");
        assert!(message.contains(says), "{url}: {message}");
        let stored = r.call("receipt.status", json!({"requestId": id})).await;
        assert_eq!(ok(&stored)["state"], "unknown", "{url}: nothing stored");
    }
    // Nothing was opened: the browser starts on the first task, and none started; the app
    // never heard a request.
    let pid = r.host.child.as_ref().unwrap().id();
    assert!(browsers_of(pid).is_empty(), "a browser was started");
    assert!(r.app.requests().is_empty(), "{:?}", r.app.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_origin_opens_but_its_page_reaches_no_other_private_origin() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(|app| vec![format!("http://{}", app.addr())]).await else {
        return;
    };
    let card_port = r.app.card_addr().port();
    let task = reach_task(&mut r).await;

    // Sent there by the agent: refused before anything is stored, naming the origin to allow.
    for url in [
        r.app.card_url(),
        format!("http://2130706433:{card_port}/card"),
        format!("http://localhost:{card_port}/card"),
    ] {
        let n = r
            .call("page.navigate", json!({"taskId": task, "url": url}))
            .await;
        let e = err(&n, "BAD_REQUEST");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("--allow-origin http://"), "{message}");
        assert!(message.contains(&format!(":{card_port}")), "{message}");
    }
    // A form the check does not read (a soft hyphen, which the browser's IDNA mapping drops)
    // gets past it, and the browser's own block stops the load: the task fails to open.
    let exotic = format!("http://127.0.0.1\u{ad}:{card_port}/card");
    let t = r
        .call("task.start", json!({"title": "exotic", "url": exotic}))
        .await;
    let e = err(&t, "ACTION_FAILED");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("ERR_BLOCKED_BY_CLIENT"),
        "{t}"
    );
    // The allowed origin itself still navigates.
    let back = main_origin(&r) + "/reach";
    let n = r
        .call("page.navigate", json!({"taskId": task, "url": back}))
        .await;
    ok(&n);

    // Sent there by the page: blocked in the browser and listed as blocked.
    let click = |target: &str, contains: &str| {
        json!({"taskId": task, "target": target,
               "expect": {"target": "#status", "contains": contains}})
    };
    let fetched = r.call("page.click", click("#fetch", "Fetch failed")).await;
    blocked(&ok(&fetched)["evidence"], "GET", "/card");
    let framed = r.call("page.click", click("#frame", "Framed")).await;
    assert_eq!(
        blocked(&ok(&framed)["evidence"], "GET", "/card")["navigation"],
        true
    );
    let worker = r
        .call("page.click", click("#worker", "Worker failed"))
        .await;
    blocked(&ok(&worker)["evidence"], "GET", "/card");

    // A link, a redirect and a form POST: each in a task of its own, since an expected
    // navigation that a block stops is never observed — the action ends uncertain, not applied.
    for (target, method, path) in [
        ("#link", "GET", "/card"),
        ("#redirect", "GET", "/card"),
        ("#post", "POST", "/card/pay"),
    ] {
        let task = reach_task(&mut r).await;
        let reply = r
            .call(
                "page.click",
                json!({"taskId": task, "target": target,
                       "expect": {"url": {"contains": format!(":{card_port}/card")}}}),
            )
            .await;
        let e = err(&reply, "OUTCOME_UNCERTAIN");
        blocked(&e["details"]["evidence"], method, path);
    }

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        card_hits(&r).is_empty(),
        "the second origin heard {:?}",
        card_hits(&r)
    );
    assert!(r.host.log().contains("blocked"), "the host logs the blocks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_host_allows_every_port_so_the_same_page_reaches_the_second_origin() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(|_| vec!["127.0.0.1".into()]).await else {
        return;
    };
    let card_port = r.app.card_addr().port();
    let task = reach_task(&mut r).await;
    let fetched = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#fetch",
                   "expect": {"target": "#status", "contains": "Fetched"}}),
        )
        .await;
    ok(&fetched);
    let linked = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#link",
                   "expect": {"url": {"contains": format!(":{card_port}/card")}}}),
        )
        .await;
    ok(&linked);
    let paths: Vec<String> = card_hits(&r).into_iter().map(|h| h.path).collect();
    assert_eq!(
        paths,
        ["/card", "/card"],
        "the fetch and the link reached it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_block_holds_without_network_evidence() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start_with(
        |app| vec![format!("http://{}", app.addr())],
        &["--no-network-evidence"],
    )
    .await
    else {
        return;
    };
    let task = reach_task(&mut r).await;
    let fetched = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#fetch",
                   "expect": {"target": "#status", "contains": "Fetch failed"}}),
        )
        .await;
    assert!(ok(&fetched).get("evidence").is_none(), "{fetched}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(card_hits(&r).is_empty(), "{:?}", card_hits(&r));
}

#[test]
fn a_malformed_or_misplaced_flag_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            vec![
                "--executor",
                "chromium",
                "--allow-origin",
                "http://127.0.0.1:8080/admin",
            ],
            "no path",
        ),
        (
            vec!["--executor", "chromium", "--allow-origin", "127.0.0.1:8080"],
            "a port needs a scheme",
        ),
        (
            vec![
                "--executor",
                "chromium",
                "--allow-origin",
                "ftp://127.0.0.1",
            ],
            "only http and https",
        ),
        (
            vec!["--executor", "chromium", "--allow-origin", "example.org"],
            "nothing to allow",
        ),
        (
            vec!["--allow-origin", "127.0.0.1"],
            "--allow-origin works with --executor chromium only",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_polaris"))
            .arg("serve")
            .arg("--no-journal")
            .arg("--socket-dir")
            .arg(dir.path().join("s"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(stderr.contains("--allow-origin"), "{args:?}: {stderr}");
    }
}
