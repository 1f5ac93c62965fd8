//! The Chromium executor end to end: a real `polaris serve --executor chromium` process with a
//! private headless Chromium, driving the real web app of `polaris::webapp` on 127.0.0.1.
//! Effects are counted where they happen — at the app's server — never from the page.
//!
//! Without a browser each test prints one `skipped:` line and passes, unless
//! `POLARIS_REQUIRE_BROWSER=1`.

use polaris_testkit::browser::rig;
use polaris_testkit::browser::*;
use polaris_testkit::host::*;

use std::time::Duration;

use polaris::webapp::{Fault, REJECTED};
use serde_json::{json, Value};

/// A host with the Chromium executor and the app it drives.
type Rig = rig::BrowserHost;

fn click(task: &str, expect: Value) -> Value {
    json!({"taskId": task, "target": "#submit", "expect": expect})
}

async fn verify(r: &mut Rig, task: &str) -> Value {
    let v = r.call("task.verifyOutcome", json!({"taskId": task})).await;
    ok(&v).clone()
}

/// Verifies until the outcome is `want` (a late answer takes a moment to reach the page).
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
async fn a_normal_submit_is_saved_once() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = r.filled("Launch day").await;
    let clicked = r.call("page.click", click(&task, saved())).await;
    assert_eq!(
        ok(&clicked)["observation"],
        json!({"target": "#status", "value": "Saved #1"}),
        "{}",
        r.host.log()
    );
    assert_eq!(r.app.commits(), 1);
    assert_eq!(r.app.posts()[0].title, "Launch day");
    assert_eq!(r.app.posts()[0].body, "Written by an agent.");
    // The form POST navigated (303 to /posts/1); reads see the new page.
    let title = r
        .call(
            "page.read",
            json!({"taskId": task, "target": "#saved-title"}),
        )
        .await;
    assert_eq!(ok(&title)["value"], "Launch day");
    assert_eq!(mutations(&mut r.c).await, 1, "one click dispatched");
    ok(&r.call("task.finish", json!({"taskId": task})).await);

    // Enter in a form field submits the form, as in any browser.
    let task = r.filled("Second post").await;
    let pressed = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()}),
        )
        .await;
    assert_eq!(ok(&pressed)["observation"]["value"], "Saved #2");
    assert_eq!(r.app.commits(), 2);
    assert_eq!(mutations(&mut r.c).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_response_is_uncertain_then_confirmed_and_saved_once() {
    let _one = one_at_a_time().await;
    // The answer comes 3 s after the deadline: on a loaded machine the reply itself, and the
    // watch's last read before it, can take a second or more.
    let Some(mut r) = Rig::start(3000, &[]).await else {
        return;
    };
    let task = r.filled("Late but saved").await;
    r.app.set_fault(Fault::Late(Duration::from_millis(6000)));
    let rid = new_id();
    let params = click(&task, saved());
    let first = r.c.call_id(&rid, "page.click", params.clone()).await;
    let e = err(&first, "OUTCOME_UNCERTAIN");
    assert_eq!(e["delivery"], "uncertain");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("last seen \\\"Draft\\\"")
            || e["message"]
                .as_str()
                .unwrap()
                .contains("last seen \"Draft\""),
        "{e}"
    );
    assert_eq!(r.app.commits(), 0, "the server has not saved yet");

    // Blocked: nothing more reaches the page.
    let st = r.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&st)["state"], "blocked");
    err(
        &r.call(
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "again"}),
        )
        .await,
        "TASK_BLOCKED",
    );
    // Re-sending under the same ID replays the stored answer; nothing is clicked again.
    let again = r.c.call_id(&rid, "page.click", params).await;
    assert_eq!(receipt(&again), "replayed");
    assert_eq!(again["error"], first["error"]);
    assert_eq!(mutations(&mut r.c).await, 1);

    // The late save lands; the page navigates to it; verification confirms.
    assert_eq!(r.app.wait_commits(1, Duration::from_secs(10)).await, 1);
    let v = verify_until(&mut r, &task, "confirmed").await;
    assert_eq!(v["observation"]["value"], "Saved #1");
    assert_eq!(v["state"], "running");
    assert_eq!(r.app.commits(), 1, "exactly one post");
    assert_eq!(r.app.received(), 1, "and one request reached the server");
    ok(&r.call("task.finish", json!({"taskId": task})).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_response_stays_unverified_and_the_agent_stops() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(1500, &[]).await else {
        return;
    };
    let task = r.filled("Saved but never told").await;
    r.app.set_fault(Fault::DropResponse);
    let first = r.call("page.click", click(&task, saved())).await;
    let e = err(&first, "OUTCOME_UNCERTAIN");
    assert!(e["message"].as_str().unwrap().contains("error page"), "{e}");
    // The server saved it; the page never said so (it shows the browser's error page).
    assert_eq!(r.app.commits(), 1);
    let v = verify(&mut r, &task).await;
    assert_eq!(v["outcome"], "not_observed", "{v}");
    assert_eq!(v["state"], "blocked");
    // The agent cannot tell from the page; it stops the task rather than submit again.
    let stopped = r
        .call(
            "task.stop",
            json!({"taskId": task, "reason": "the submit's answer was lost; checking by hand"}),
        )
        .await;
    assert_eq!(ok(&stopped)["state"], "stopped");
    let st = r.call("task.status", json!({"taskId": task})).await;
    assert!(ok(&st)["pendingOutcome"].is_object(), "{st}");
    // Verification still works on the stopped task: its page was closed with the task, so it
    // is opened again to read — and a freshly loaded form shows nothing of what the submit did
    // (the server did save it), so that read proves nothing either way (SPEC §14).
    let v = verify(&mut r, &task).await;
    assert_eq!(v["outcome"], "unknown", "{v}");
    assert!(v["note"].as_str().unwrap().contains("opened again"), "{v}");
    assert_eq!(r.app.commits(), 1, "one post, never a second");
    assert_eq!(r.app.received(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_submit_is_uncertain_and_verification_shows_the_rejection() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(1500, &[]).await else {
        return;
    };
    let task = r.filled("Refused").await;
    r.app.set_fault(Fault::Reject);
    let first = r.call("page.click", click(&task, saved())).await;
    // The executor cannot know the rejection is final: only the page's text says so (the
    // message quotes the last value it saw, usually the rejection itself).
    err(&first, "OUTCOME_UNCERTAIN");
    let v = verify(&mut r, &task).await;
    assert_eq!(v["outcome"], "not_observed");
    assert_eq!(
        v["observation"],
        json!({"target": "#status", "value": REJECTED})
    );
    assert_eq!(r.app.commits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_killed_mid_action_is_uncertain_and_verification_reopens_the_page() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let title = "Survives a crash";
    let task = r.filled(title).await;
    r.app.set_fault(Fault::Late(Duration::from_millis(1500)));
    // The form page lists saved titles: an expectation a reopened page can still show.
    let expect = json!({"target": "#posts", "contains": title});
    let rid = new_id();
    r.c.send(&rid, "page.click", click(&task, expect)).await;
    for _ in 0..100 {
        if r.app.received() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(r.app.received(), 1, "the submit reached the server");
    assert!(kill_renderers(r.pid()) > 0, "a renderer to kill");
    let reply = r.c.wait(&rid).await;
    let e = err(&reply, "OUTCOME_UNCERTAIN");
    assert!(e["message"].as_str().unwrap().contains("crashed"), "{e}");

    assert_eq!(r.app.wait_commits(1, Duration::from_secs(10)).await, 1);
    let v = verify_until(&mut r, &task, "confirmed").await;
    assert!(v["observation"]["value"].as_str().unwrap().contains(title));
    assert!(
        r.host.log().contains("reopened a task's page"),
        "{}",
        r.host.log()
    );
    assert_eq!(r.app.commits(), 1);
    // The reopened page is live: the task goes on.
    let read = r
        .call("page.read", json!({"taskId": task, "target": "#status"}))
        .await;
    assert_eq!(ok(&read)["value"], "Draft");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_killed_mid_action_is_restarted_and_verification_reads_in_the_new_one() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let title = "Browser gone";
    let task = r.filled(title).await;
    let old = browsers_of(r.pid());
    assert_eq!(old.len(), 1, "one private browser");
    r.app.set_fault(Fault::Late(Duration::from_millis(1500)));
    let rid = new_id();
    let expect = json!({"target": "#posts", "contains": title});
    r.c.send(&rid, "page.click", click(&task, expect)).await;
    for _ in 0..100 {
        if r.app.received() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The process group of the browser this test's host started.
    kill_group(old[0]);
    let e = err(&r.c.wait(&rid).await, "OUTCOME_UNCERTAIN").clone();
    assert!(
        e["message"].as_str().unwrap().contains("browser went away"),
        "{e}"
    );
    r.app.set_fault(Fault::None);

    // The next task starts a new browser.
    let other = r.task(&r.app.url()).await;
    let now = browsers_of(r.pid());
    assert_eq!(now.len(), 1);
    assert_ne!(now[0], old[0], "a new browser");
    assert!(gone_soon(old[0]).await, "nothing of the old one is left");

    assert_eq!(r.app.wait_commits(1, Duration::from_secs(10)).await, 1);
    let v = verify_until(&mut r, &task, "confirmed").await;
    assert!(v["observation"]["value"].as_str().unwrap().contains(title));
    // An action on the old task's page would have nothing to act on until a read reopened
    // it; now it has a fresh page again.
    let read = r
        .call("page.read", json!({"taskId": other, "target": "#status"}))
        .await;
    assert_eq!(ok(&read)["value"], "Draft");
    assert_eq!(r.app.commits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_hidden_or_disabled_target_fails_with_nothing_dispatched() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(3000, &[]).await else {
        return;
    };
    let task = r.filled("Not sent").await;
    let missing = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#publish-now", "expect": saved()}),
        )
        .await;
    let e = err(&missing, "ACTION_FAILED");
    assert_eq!(e["delivery"], "failed");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no element matches #publish-now"),
        "{e}"
    );
    let st = r.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&st)["state"], "running", "a failure does not block");

    // A page of our own, from a file: a disabled button, a hidden one, a covered one.
    let file = r.files.path().join("form.html");
    std::fs::write(
        &file,
        r#"<!doctype html><button id="off" disabled>Off</button>
        <button id="gone" style="display:none">Gone</button>
        <div style="position:relative"><button id="under">Under</button>
        <div id="cover" style="position:absolute;inset:0;background:#fff"></div></div>
        <input id="agree" type="checkbox"><p id="status">Draft</p>"#,
    )
    .unwrap();
    let url = format!("file://{}", file.display());
    let page = r.task(&url).await;
    for (target, why) in [
        ("#off", "disabled"),
        ("#gone", "hidden"),
        ("#under", "covered by <div#cover>"),
        ("button[", "not a valid CSS selector"),
    ] {
        let f = r
            .call(
                "page.click",
                json!({"taskId": page, "target": target, "expect": saved()}),
            )
            .await;
        let e = err(&f, "ACTION_FAILED");
        assert!(
            e["message"].as_str().unwrap().contains(why),
            "{target}: {e}"
        );
    }
    let f = r
        .call(
            "page.fill",
            json!({"taskId": page, "target": "#agree", "value": "yes"}),
        )
        .await;
    assert!(err(&f, "ACTION_FAILED")["message"]
        .as_str()
        .unwrap()
        .contains("page.click"));
    // A chord with a modifier no keyboard has is refused with the request; a key name the
    // executor does not know fails before anything is dispatched.
    let f = r
        .call(
            "page.press",
            json!({"taskId": page, "key": "Hyper+Q", "expect": saved()}),
        )
        .await;
    err(&f, "BAD_REQUEST");
    let f = r
        .call(
            "page.press",
            json!({"taskId": page, "key": "Control+Frobnicate", "expect": saved()}),
        )
        .await;
    let e = err(&f, "ACTION_FAILED");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("not one the executor can press"),
        "{e}"
    );
    assert_eq!(mutations(&mut r.c).await, 0, "nothing was dispatched");
    assert_eq!(r.app.commits(), 0);
    assert_eq!(r.app.received(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_content_under_two_ids_is_two_posts() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    // Polaris deduplicates request IDs, not business content: the same title and body sent
    // under two IDs are two requests, and the site gets two posts. Deciding that two posts
    // are "the same" is the site's or the agent's business.
    let start = json!({"title": "publish a post", "url": r.app.url()});
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let t = r.call("task.start", start.clone()).await;
        tasks.push(ok(&t)["taskId"].as_str().unwrap().to_owned());
    }
    assert_ne!(tasks[0], tasks[1]);
    for task in &tasks {
        for (target, value) in [("#title", "Same title"), ("#body", "Same body")] {
            ok(&r
                .call(
                    "page.fill",
                    json!({"taskId": task, "target": target, "value": value}),
                )
                .await);
        }
        ok(&r.call("page.click", click(task, saved())).await);
    }
    assert_eq!(r.app.commits(), 2);
    let posts = r.app.posts();
    assert_eq!(posts[0].title, posts[1].title);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_start_needs_a_page_that_loads() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(3000, &[]).await else {
        return;
    };
    // What could never be opened is refused before anything is stored.
    for (params, why) in [
        (json!({"title": "no url"}), "pass \"url\""),
        (
            json!({"title": "scheme", "url": "javascript:alert(1)"}),
            "http, https or file",
        ),
    ] {
        let f = r.call("task.start", params).await;
        let e = err(&f, "BAD_REQUEST");
        assert_eq!(e["delivery"], "not_executed");
        assert!(e["message"].as_str().unwrap().contains(why), "{why}: {e}");
        assert_eq!(f["meta"]["receipt"], "none", "{f}");
    }
    // What was tried and did not load is a definite failure, stored.
    let cases = [
        (
            json!({"title": "refused", "url": format!("http://{}/", closed_port())}),
            "ERR_CONNECTION_REFUSED",
        ),
        (
            json!({"title": "missing", "url": format!("{}no-such-page", r.app.url())}),
            "HTTP 404",
        ),
    ];
    for (params, why) in cases {
        let f = r.call("task.start", params).await;
        let e = err(&f, "ACTION_FAILED");
        assert_eq!(e["delivery"], "failed");
        assert!(e["message"].as_str().unwrap().contains(why), "{why}: {e}");
    }
    let long = format!("{}?{}", r.app.url(), "a".repeat(8 * 1024));
    let f = r
        .call("task.start", json!({"title": "long", "url": long}))
        .await;
    assert!(err(&f, "BAD_REQUEST")["message"]
        .as_str()
        .unwrap()
        .contains("8192"));
    let rs = r.call("run.status", json!({})).await;
    assert_eq!(ok(&rs)["tasks"]["running"], 0, "no task was started");
    assert_eq!(ok(&rs)["executor"]["kind"], "chromium");
}

/// A local port with nothing listening.
fn closed_port() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_host_kills_the_browser_group() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(3000, &[]).await else {
        return;
    };
    let runs = r.call("run.status", json!({})).await;
    assert_eq!(ok(&runs)["executor"]["kind"], "chromium");
    assert!(browsers_of(r.pid()).is_empty(), "started lazily");
    r.task(&r.app.url()).await;
    let groups = browsers_of(r.pid());
    assert_eq!(groups.len(), 1);
    assert!(
        group_processes_count(groups[0]) > 1,
        "a browser and its helpers"
    );
    let status = r.host.terminate();
    assert!(status.success(), "{status}");
    assert!(gone_soon(groups[0]).await, "the whole group is gone");
}

/// Whether group `pgid` is gone within two seconds (SIGKILL is delivered at once, but the
/// helpers, reparented once the browser is reaped, take a moment to exit).
async fn gone_soon(pgid: i32) -> bool {
    for _ in 0..100 {
        if !group_alive(pgid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn group_processes_count(pgid: i32) -> usize {
    polaris::executor::chromium::browser::group_processes(pgid).len()
}

/// Waits until the app has received `n` submits (a click's POST reached the server).
async fn until_received(r: &Rig, n: u64) {
    for _ in 0..250 {
        if r.app.received() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the app never received {n} submits\n{}", r.host.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_submit_behind_a_pending_one_is_blocked_and_never_sent() {
    let _one = one_at_a_time().await;
    // A deadline long enough that the page answers the checks before dispatch on a loaded
    // machine, and a save later still.
    let Some(mut r) = Rig::start(2500, &[]).await else {
        return;
    };
    let task = r.filled("Only once").await;
    r.app.set_fault(Fault::Late(Duration::from_millis(5000)));
    let mut other = r.host.conn().await;
    // The first submit, a second pipelined right behind it on the same connection, and a
    // third from another connection while the first is still pending.
    let (first, second, third) = (new_id(), new_id(), new_id());
    r.c.send(&first, "page.click", click(&task, saved())).await;
    r.c.send(&second, "page.click", click(&task, saved())).await;
    // The third is sent once the host shows the first in flight: two connections race to
    // admission otherwise, and whichever is admitted first is the one dispatched.
    for _ in 0..200 {
        let s = other.call("task.status", json!({"taskId": task})).await;
        let in_flight = s["result"]["inFlight"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if in_flight.iter().any(|f| f["requestId"] == first.as_str()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    other
        .send(&third, "page.click", click(&task, saved()))
        .await;
    let e = err(&r.c.wait(&first).await, "OUTCOME_UNCERTAIN").clone();
    assert_eq!(e["delivery"], "uncertain");
    let blocked = r.c.wait(&second).await;
    let b = err(&blocked, "TASK_BLOCKED");
    assert_eq!(b["delivery"], "not_executed", "{b}");
    assert_eq!(b["details"]["pendingOutcome"]["requestId"], first.as_str());
    let b3 = err(&other.wait(&third).await, "TASK_BLOCKED").clone();
    assert_eq!(b3["delivery"], "not_executed", "{b3}");
    // The refusal is stored in its receipt: the same ID replays it, nothing is dispatched.
    let again =
        r.c.call_id(&second, "page.click", click(&task, saved()))
            .await;
    assert_eq!(receipt(&again), "replayed", "{again}");
    assert_eq!(again["error"], blocked["error"]);
    assert_eq!(mutations(&mut r.c).await, 1, "one click dispatched");

    // The late save lands, once; verification confirms the first submit and only it.
    assert_eq!(r.app.wait_commits(1, Duration::from_secs(10)).await, 1);
    let v = verify_until(&mut r, &task, "confirmed").await;
    assert_eq!(v["resolved"]["requestId"], first.as_str(), "{v}");
    assert_eq!(v["observation"]["value"], "Saved #1");
    assert_eq!(v["state"], "running");
    assert_eq!(verify(&mut r, &task).await["outcome"], "none");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(r.app.received(), 1, "one POST reached the server");
    assert_eq!(r.app.commits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expectation_that_already_holds_is_refused_before_anything_is_sent() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(3000, &[]).await else {
        return;
    };
    let task = r.filled("Not yet").await;
    // `Draft` is what the page shows before any click: it could never show the submit worked.
    let draft = json!({"target": "#status", "equals": "Draft"});
    let f = r.call("page.click", click(&task, draft)).await;
    let e = err(&f, "ACTION_FAILED");
    assert_eq!(e["delivery"], "not_sent", "{e}");
    assert_eq!(e["details"]["cause"], "expectation_already_holds");
    assert!(
        e["message"].as_str().unwrap().contains("nothing was sent"),
        "{e}"
    );
    let st = r.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&st)["state"], "running", "{st}");
    assert_eq!(mutations(&mut r.c).await, 0, "nothing was dispatched");
    assert_eq!(r.app.received(), 0);
    // An expectation only the submit makes true goes through.
    let next = json!({"target": "#status", "equals": "Saved #1"});
    let clicked = r.call("page.click", click(&task, next)).await;
    assert_eq!(ok(&clicked)["observation"]["value"], "Saved #1");
    assert_eq!(r.app.commits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_step_is_done_and_one_that_submits_is_uncertain() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(2000, &[]).await else {
        return;
    };
    let task = r.filled("Tabbing").await;
    let begun = std::time::Instant::now();
    let tab = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "Tab", "target": "#title", "expect": null, "local": true}),
        )
        .await;
    // It answers after a short look for a navigation, not at the action deadline (2 s).
    assert!(
        begun.elapsed() < Duration::from_millis(1200),
        "{:?}",
        begun.elapsed()
    );
    let done = ok(&tab);
    assert_eq!(done["local"], true, "{tab}");
    assert!(done["observation"].is_null(), "{tab}");
    // The focus moved to the next field; the page is otherwise untouched.
    let focused = r
        .call(
            "page.read",
            json!({"taskId": task, "target": "#body:focus"}),
        )
        .await;
    assert_eq!(ok(&focused)["value"], "Written by an agent.");
    let st = r.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&st)["state"], "running");
    assert_eq!(r.app.received(), 0);

    // A "local" click on the submit button submits the form: the caller was wrong, and the
    // task blocks as for any action whose effect is unknown. The server answers late, so the
    // page has not even committed the next document when the step is judged: the navigation
    // is seen as soon as the form asks for it.
    r.app.set_fault(Fault::Late(Duration::from_millis(1500)));
    let f = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": null, "local": true}),
        )
        .await;
    let e = err(&f, "OUTCOME_UNCERTAIN");
    assert!(
        e["message"].as_str().unwrap().contains("sent as local"),
        "{e}"
    );
    assert_eq!(r.app.commits(), 0, "judged before the server answered");
    let st = r.call("task.status", json!({"taskId": task})).await;
    assert_eq!(ok(&st)["state"], "blocked", "{st}");
    assert_eq!(r.app.wait_commits(1, Duration::from_secs(5)).await, 1);
    r.app.set_fault(Fault::None);
    let v = verify(&mut r, &task).await;
    assert_eq!(
        v["outcome"], "unknown",
        "nothing can confirm a step with no expectation: {v}"
    );
    assert!(v["note"].is_string(), "{v}");

    // Local with an expectation: observed, but the page navigated, so still uncertain.
    let task = r.filled("Entered").await;
    let f = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved(), "local": true}),
        )
        .await;
    let e = err(&f, "OUTCOME_UNCERTAIN");
    assert!(e["message"].as_str().unwrap().contains("navigated"), "{e}");
    assert_eq!(r.app.wait_commits(2, Duration::from_secs(5)).await, 2);
    assert_eq!(r.app.received(), 2, "one POST per submit");
}

/// Starts a submit that the server answers late, kills the page's renderer (or the whole
/// browser, with `browser`) once the POST has reached the server, and returns the task.
async fn killed_mid_post(r: &mut Rig, title: &str, browser: bool) -> String {
    let task = r.filled(title).await;
    let old = browsers_of(r.pid());
    assert_eq!(old.len(), 1, "one private browser");
    r.app.set_fault(Fault::Late(Duration::from_millis(1500)));
    let rid = new_id();
    r.c.send(&rid, "page.click", click(&task, saved())).await;
    until_received(r, 1).await;
    if browser {
        // The process group of the browser this test's host started.
        kill_group(old[0]);
    } else {
        assert!(kill_renderers(r.pid()) > 0, "a renderer to kill");
    }
    err(&r.c.wait(&rid).await, "OUTCOME_UNCERTAIN");
    assert_eq!(r.app.wait_commits(1, Duration::from_secs(10)).await, 1);
    r.app.set_fault(Fault::None);
    task
}

/// Verification on a page opened again after the task's page died: the form a plain load
/// shows says `Draft`, which proves nothing about the submit the server did save.
async fn reopened_page_is_no_witness(r: &mut Rig, task: &str) {
    for _ in 0..2 {
        let v = verify(r, task).await;
        assert_eq!(v["outcome"], "unknown", "never not_observed: {v}");
        assert!(v["note"].as_str().unwrap().contains("opened again"), "{v}");
        assert_eq!(v["state"], "blocked");
    }
    assert!(
        r.host.log().contains("reopened a task's page"),
        "{}",
        r.host.log()
    );
    assert_eq!(r.app.commits(), 1);
    assert_eq!(r.app.received(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_killed_mid_post_leaves_verification_unknown_not_unobserved() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = killed_mid_post(&mut r, "Renderer gone", false).await;
    reopened_page_is_no_witness(&mut r, &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_killed_mid_post_leaves_verification_unknown_not_unobserved() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(5000, &[]).await else {
        return;
    };
    let task = killed_mid_post(&mut r, "Browser gone", true).await;
    reopened_page_is_no_witness(&mut r, &task).await;
}

/// The one dialog a reply lists.
fn one_dialog(details_or_result: &Value) -> &Value {
    let d = details_or_result["dialogs"]
        .as_array()
        .unwrap_or_else(|| panic!("no dialogs in {details_or_result}"));
    assert_eq!(d.len(), 1, "{details_or_result}");
    &d[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_is_accepted_only_when_the_action_asks() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(1500, &[]).await else {
        return;
    };
    let items = r.app.url_of("/items");
    let deleted = json!({"target": "#status", "equals": "Deleted #1"});

    // No action asked how to answer it: the confirm is dismissed, nothing is deleted, and the
    // expectation is never seen — uncertain, with the dialog saying why.
    let task = r.task(&items).await;
    let f = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#delete", "expect": deleted}),
        )
        .await;
    let e = err(&f, "OUTCOME_UNCERTAIN");
    let d = one_dialog(&e["details"]);
    assert_eq!(d["type"], "confirm");
    assert_eq!(d["answer"], "dismissed");
    assert!(d["message"]
        .as_str()
        .unwrap()
        .contains("Delete the first item"));
    assert_eq!(r.app.deletes(), 0, "nothing was deleted");
    let v = verify(&mut r, &task).await;
    assert_eq!(v["outcome"], "not_observed", "{v}");
    assert_eq!(v["observation"]["value"], "3 items");
    let st = r.call("task.status", json!({"taskId": task})).await;
    assert!(
        history(ok(&st)).contains(&"page.click dialog_dismissed".to_owned()),
        "{st}"
    );

    // Asked for, about this dialog: accepted, and the delete happens once.
    let task = r.task(&items).await;
    let dialog = json!({"accept": true, "message": {"contains": "Delete the first item"}});
    let clicked = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#delete", "expect": deleted, "dialog": dialog}),
        )
        .await;
    let done = ok(&clicked);
    assert_eq!(done["observation"]["value"], "Deleted #1", "{clicked}");
    let d = one_dialog(done);
    assert_eq!(
        (d["type"].as_str(), d["answer"].as_str()),
        (Some("confirm"), Some("accepted"))
    );
    assert_eq!(r.app.deletes(), 1, "one delete");

    // An answer for another dialog does not apply: this one is dismissed.
    let other = json!({"accept": true, "message": {"contains": "Leave this page"}});
    let f = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#delete", "expect": {"target": "#status", "equals": "Deleted #2"}, "dialog": other}),
        )
        .await;
    let e = err(&f, "OUTCOME_UNCERTAIN");
    assert_eq!(one_dialog(&e["details"])["answer"], "dismissed");
    assert_eq!(r.app.deletes(), 1, "still one delete");

    // A prompt gets the text asked for; an alert is closed (dismissed) and the page goes on.
    let task = r.task(&items).await;
    let renamed = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#rename", "local": true,
                   "expect": {"target": "#name", "equals": "Chores"},
                   "dialog": {"accept": true, "promptText": "Chores"}}),
        )
        .await;
    let d = one_dialog(ok(&renamed)).clone();
    assert_eq!(
        (
            d["type"].as_str(),
            d["answer"].as_str(),
            d["promptText"].as_str()
        ),
        (Some("prompt"), Some("accepted"), Some("Chores")),
        "{renamed}"
    );
    let notified = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#notify", "expect": {"target": "#notified", "equals": "Notified"}}),
        )
        .await;
    let d = one_dialog(ok(&notified));
    assert_eq!(
        (d["type"].as_str(), d["answer"].as_str()),
        (Some("alert"), Some("dismissed"))
    );
    assert_eq!(d["message"], "Nothing to undo");
    assert_eq!(r.app.deletes(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_that_opens_by_itself_never_holds_up_a_read() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(1500, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/items?alertMs=300")).await;
    // Nothing runs when the alert opens: it is dismissed at once, so the page goes on and the
    // read answers instead of waiting on a dialog nobody would close.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let read = r
        .call("page.read", json!({"taskId": task, "target": "#seen"}))
        .await;
    assert_eq!(ok(&read)["value"], "Alerted", "{read}\n{}", r.host.log());
    let st = r.call("task.status", json!({"taskId": task})).await;
    assert!(
        history(ok(&st)).contains(&"page.read dialog_dismissed".to_owned()),
        "{st}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chords_hold_their_modifiers_as_a_keyboard_would() {
    let _one = one_at_a_time().await;
    let Some(mut r) = Rig::start(3000, &[]).await else {
        return;
    };
    let task = r.task(&r.app.url_of("/keys")).await;
    let filled = r
        .call(
            "page.fill",
            json!({"taskId": task, "target": "#field", "value": "hello world"}),
        )
        .await;
    ok(&filled);
    // Shift+ArrowLeft extends the selection over the last character.
    let p = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "Shift+ArrowLeft", "target": "#field",
                   "expect": {"target": "#selection", "equals": "10-11"}}),
        )
        .await;
    assert_eq!(ok(&p)["observation"]["value"], "10-11", "{p}");
    // Control+a selects the whole field, a local step.
    let p = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "Control+a", "target": "#field", "expect": null, "local": true}),
        )
        .await;
    assert_eq!(ok(&p)["local"], true, "{p}");
    for (target, want) in [("#last-key", "Control+a"), ("#selection", "0-11")] {
        let read = r
            .call("page.read", json!({"taskId": task, "target": target}))
            .await;
        assert_eq!(ok(&read)["value"], want, "{target}");
    }
    // Typing now replaces everything; Shift types the capital.
    let p = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "x", "expect": {"target": "#field", "equals": "x"}}),
        )
        .await;
    assert_eq!(ok(&p)["observation"]["value"], "x", "{p}");
    let p = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "Shift+b", "expect": {"target": "#field", "equals": "xB"}}),
        )
        .await;
    assert_eq!(ok(&p)["observation"]["value"], "xB", "{p}");
    let read = r
        .call("page.read", json!({"taskId": task, "target": "#last-key"}))
        .await;
    assert_eq!(ok(&read)["value"], "Shift+B");
}
