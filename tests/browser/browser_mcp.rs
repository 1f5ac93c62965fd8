//! The Chromium executor through `polaris mcp`, driven by the official Rust MCP SDK's client
//! (rmcp) as an agent would: a real host with a private headless Chromium, the real web app,
//! effects counted at the app's server.

use polaris_testkit::browser::*;
use polaris_testkit::mcp::{eventually, socket_dir, HostProcess};
use polaris_testkit::mcp_client;
use polaris_testkit::python_sdk;

use std::time::Duration;

use mcp_client::{call, connect, err, ok, Client};
use polaris::webapp::{Fault, WebApp};
use serde_json::{json, Value};

/// A host with the Chromium executor, the app and an MCP client. The reaper is declared after
/// the host so it runs first, while the host still parents the browser.
struct Rig {
    app: WebApp,
    client: Client,
    _reaper: Reaper,
    _host: StopGently,
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn start(action_timeout_ms: u64) -> Option<Rig> {
        let chromium = chromium_or_skip()?;
        let app = WebApp::start().await.expect("the web app starts");
        let dir = socket_dir();
        let args = serve_args(&chromium, action_timeout_ms);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let host = HostProcess::start(dir.path(), &args).await;
        let reaper = Reaper {
            host_pid: host.child.id(),
        };
        let client = connect(dir.path(), None).await;
        Some(Rig {
            app,
            client,
            _reaper: reaper,
            _host: StopGently(host),
            _dir: dir,
        })
    }

    /// `task_start` on the app's form, then `page_fill` of the title.
    async fn filled(&self, title: &str) -> String {
        let started = ok(&call(
            &self.client,
            "task_start",
            json!({"title": "publish a post", "url": self.app.url()}),
        )
        .await);
        let task = started["result"]["task_id"].as_str().unwrap().to_owned();
        let filled = ok(&call(
            &self.client,
            "page_fill",
            json!({"task_id": task, "target": "#title", "value": title}),
        )
        .await);
        assert_eq!(filled["result"]["value"], title);
        task
    }
}

/// A host stopped gracefully when dropped, so it kills its browser and removes its profile.
struct StopGently(HostProcess);

impl Drop for StopGently {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.0.child),
            rustix::process::Signal::TERM,
        );
        for _ in 0..100 {
            if matches!(self.0.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn click(task: &str) -> Value {
    json!({"task_id": task, "target": "#submit", "expect": {"target": "#status", "contains": "Saved"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_publishes_once_through_mcp() {
    let _one = one_at_a_time().await;
    let Some(r) = Rig::start(5000).await else {
        return;
    };
    let task = r.filled("From an agent").await;
    let mut args = click(&task);
    args["request_id"] = json!("publish-1");
    let clicked = ok(&call(&r.client, "page_click", args.clone()).await);
    assert_eq!(clicked["receipt"], "new");
    assert_eq!(clicked["result"]["observation"]["value"], "Saved #1");
    // What the page sent (SPEC §16), in the tool's structured result with snake_case keys.
    let sent = &clicked["result"]["evidence"]["requests"][0];
    assert_eq!(sent["method"], "POST", "{clicked}");
    assert_eq!(sent["status"], 303, "{clicked}");
    assert_eq!(
        sent["body_sha256"].as_str().map(str::len),
        Some(64),
        "{clicked}"
    );
    // The agent's framework retries the call with the same request_id: a replay, no click.
    let again = ok(&call(&r.client, "page_click", args).await);
    assert_eq!(again["receipt"], "replayed");
    assert_eq!(r.app.commits(), 1);
    let status = ok(&call(&r.client, "run_status", json!({})).await);
    assert_eq!(status["result"]["executor"]["kind"], "chromium");
    assert_eq!(status["result"]["executor"]["mutations"], 1);
    r.client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_save_through_mcp_is_gated_until_verify_outcome_confirms_it() {
    let _one = one_at_a_time().await;
    let Some(r) = Rig::start(1500).await else {
        return;
    };
    let task = r.filled("Slow server").await;
    r.app.set_fault(Fault::Late(Duration::from_millis(3000)));
    let uncertain = err(&call(&r.client, "page_click", click(&task)).await);
    assert_eq!(uncertain["code"], "OUTCOME_UNCERTAIN");
    assert_eq!(uncertain["delivery"], "uncertain");
    assert_eq!(
        uncertain["details"]["evidence"]["requests"][0]["status"], "no response",
        "{uncertain}"
    );
    assert_eq!(
        uncertain["next"],
        json!({"tool": "verify_outcome", "arguments": {"task_id": task}})
    );
    // Clicking again is refused before anything is sent.
    let refused = err(&call(&r.client, "page_click", click(&task)).await);
    assert_eq!(refused["code"], "CLIENT_BLOCKED_AMBIGUOUS");
    assert_eq!(refused["delivery"], "not_sent");

    let verified = eventually("the late save to be confirmed", || async {
        let v = ok(&call(&r.client, "verify_outcome", json!({"task_id": task})).await);
        (v["result"]["outcome"] == "confirmed").then_some(v)
    })
    .await;
    assert_eq!(verified["result"]["observation"]["value"], "Saved #1");
    assert_eq!(r.app.commits(), 1, "saved exactly once");
    assert_eq!(r.app.received(), 1);
    ok(&call(&r.client, "task_finish", json!({"task_id": task})).await);
    r.client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_selector_through_mcp_fails_and_nothing_is_dispatched() {
    let _one = one_at_a_time().await;
    let Some(r) = Rig::start(3000).await else {
        return;
    };
    let task = r.filled("Wrong button").await;
    let failed = err(&call(
        &r.client,
        "page_click",
        json!({"task_id": task, "target": "button.publish", "expect": {"target": "#status", "contains": "Saved"}}),
    )
    .await);
    assert_eq!(failed["code"], "ACTION_FAILED");
    assert_eq!(failed["delivery"], "failed");
    // A definite failure does not gate the task: the agent reads the page and tries the
    // right button.
    let status = ok(&call(
        &r.client,
        "page_read",
        json!({"task_id": task, "target": "#status"}),
    )
    .await);
    assert_eq!(status["result"]["value"], "Draft");
    let clicked = ok(&call(&r.client, "page_click", click(&task)).await);
    assert_eq!(clicked["result"]["observation"]["value"], "Saved #1");
    let run = ok(&call(&r.client, "run_status", json!({})).await);
    assert_eq!(
        run["result"]["executor"]["mutations"], 1,
        "only the second click was dispatched"
    );
    assert_eq!(r.app.commits(), 1);
    r.client.cancel().await.unwrap();
}

/// The ref of the first outline line that names `name` (any role): what an agent reads off a
/// `page_snapshot` before acting.
fn ref_named(outline: &str, name: &str) -> Value {
    let quoted = format!("\"{name}\"");
    let line = outline
        .lines()
        .find(|l| l.contains(&quoted) && l.contains("[ref="))
        .unwrap_or_else(|| panic!("no {quoted} with a ref in the outline:\n{outline}"));
    let r = line
        .split("[ref=")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .unwrap();
    json!({"ref": r})
}

/// SPEC §15 through `polaris mcp`: an agent works the realistic site by what its snapshots show,
/// with no CSS of its own — logs in, fills every control, publishes once, follows a link and
/// comes back, presses buttons in a same-origin frame, a frame of another origin and a shadow
/// root, accepts a confirm, waits for a late button, uploads a file from the upload directory.
/// Every POST is counted exactly once at the app's server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_works_the_site_by_what_it_sees() {
    let _one = one_at_a_time().await;
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let app = WebApp::start().await.expect("the web app starts");
    let uploads = tempfile::tempdir().unwrap();
    std::fs::write(uploads.path().join("report.txt"), "quarterly numbers\n").unwrap();
    let dir = socket_dir();
    let profiles = tempfile::tempdir().unwrap();
    let host = site_host(&chromium, &dir, uploads.path(), profiles.path()).await;
    let _reaper = Reaper {
        host_pid: host.child.id(),
    };
    let _host = StopGently(host);
    let client = connect(dir.path(), None).await;
    let c = &client;
    let see = |task: String| async move {
        let s = ok(&call(c, "page_snapshot", json!({"task_id": task})).await);
        s["result"]["snapshot"].as_str().unwrap().to_owned()
    };
    let act = |tool: &'static str, args: Value| async move {
        let r = call(c, tool, args.clone()).await;
        assert_eq!(
            r.is_error,
            Some(false),
            "{tool} {args}: {:?}",
            r.structured_content
        );
        r.structured_content.unwrap()
    };

    let started = act(
        "task_start",
        json!({"title": "work the site", "url": app.url_of("/site/login")}),
    )
    .await;
    let task = started["result"]["task_id"].as_str().unwrap().to_owned();

    // Log in.
    let outline = see(task.clone()).await;
    act(
        "page_fill",
        json!({"task_id": task, "target": ref_named(&outline, "Username"), "value": "ada"}),
    )
    .await;
    act(
        "page_fill",
        json!({"task_id": task, "target": ref_named(&outline, "Password"), "value": "secret"}),
    )
    .await;
    act(
        "page_click",
        json!({"task_id": task, "target": {"role": "button", "name": "Log in"},
        "expect": {"text": {"contains": "Logged in as ada"}}}),
    )
    .await;
    assert_eq!(app.site_logins(), 1);

    // Every control of the form, then one publish.
    let outline = see(task.clone()).await;
    act(
        "page_fill",
        json!({"task_id": task, "target": ref_named(&outline, "Title"), "value": "Launch notes"}),
    )
    .await;
    act(
        "page_fill",
        json!({"task_id": task, "target": ref_named(&outline, "Body"), "value": "What shipped."}),
    )
    .await;
    act("page_select", json!({"task_id": task, "target": ref_named(&outline, "Category"), "label": "How-to guide"})).await;
    act(
        "page_check",
        json!({"task_id": task, "target": ref_named(&outline, "Urgent"), "checked": true}),
    )
    .await;
    act(
        "page_check",
        json!({"task_id": task, "target": ref_named(&outline, "Private"), "checked": true}),
    )
    .await;
    act(
        "page_click",
        json!({"task_id": task, "target": {"role": "button", "name": "Publish"},
        "expect": {"text": {"contains": "Published #1"}}}),
    )
    .await;
    let post = app.site_last_post().expect("a post");
    assert_eq!(
        (
            app.site_posts(),
            post.title.as_str(),
            post.category.as_str(),
            post.urgent
        ),
        (1, "Launch notes", "guide", true)
    );
    assert_eq!(post.visibility.to_lowercase(), "private");

    // Back to the form by URL, to the drafts by link, and back through the history.
    act(
        "page_navigate",
        json!({"task_id": task, "url": app.url_of("/site")}),
    )
    .await;
    act(
        "page_click",
        json!({"task_id": task, "target": {"role": "link", "name": "Drafts"},
        "expect": {"url": {"contains": "/site/drafts"}}}),
    )
    .await;
    act("page_navigate", json!({"task_id": task, "url": "back"})).await;
    let url = act("page_url", json!({"task_id": task})).await;
    assert!(
        url["result"]["url"].as_str().unwrap().ends_with("/site"),
        "{url}"
    );

    // A tab the help link opens: on the click's result, in page_tabs, and read with `tab`.
    let opened = act(
        "page_click",
        json!({"task_id": task, "target": {"role": "link", "name": "Open help"}, "expect": null, "local": true}),
    )
    .await;
    assert_eq!(opened["result"]["opened"][0]["tab"], 1, "{opened}");
    let tabs = act("page_tabs", json!({"task_id": task})).await;
    assert_eq!(
        tabs["result"]["tabs"].as_array().unwrap().len(),
        2,
        "{tabs}"
    );
    let help = act(
        "page_read",
        json!({"task_id": task, "tab": 1, "target": "h1"}),
    )
    .await;
    assert_eq!(help["result"]["value"], "Help", "{help}");

    // A same-origin frame, a frame of another origin, a shadow root.
    act(
        "page_click",
        json!({"task_id": task, "target": {"role": "button", "name": "Confirm in frame"},
        "expect": {"target": {"text": "Frame confirmed"}, "contains": "#1"}}),
    )
    .await;
    assert_eq!(app.site_frame_confirms(), 1);
    let outline = see(task.clone()).await;
    act("page_fill", json!({"task_id": task, "target": ref_named(&outline, "Card number"), "value": "4242424242424242"})).await;
    act("page_click", json!({"task_id": task, "target": ref_named(&outline, "Pay"),
        "expect": {"target": {"text": "Paid", "frame": {"role": "iframe", "name": "Payment"}}, "contains": "#1"}})).await;
    assert_eq!(app.card_payments(), 1);
    act("page_fill", json!({"task_id": task, "target": {"role": "textbox", "name": "Note"}, "value": "call the printer"})).await;
    act(
        "page_click",
        json!({"task_id": task, "target": {"role": "button", "name": "Save note"},
        "expect": {"target": {"text": "Note saved"}, "contains": "#1"}}),
    )
    .await;
    assert_eq!(app.site_notes(), 1);

    // The late button: waited for, then pressed.
    act("page_wait", json!({"task_id": task, "target": {"role": "button", "name": "Load more"}, "timeout_ms": 5000})).await;
    act(
        "page_click",
        json!({"task_id": task, "target": {"role": "button", "name": "Load more"},
        "expect": {"target": {"text": "More loaded"}, "contains": "#1"}}),
    )
    .await;
    assert_eq!(app.site_more(), 1);

    // A confirm() the agent asked to accept.
    let deleted = act(
        "page_click",
        json!({"task_id": task, "target": {"role": "button", "name": "Delete draft"},
        "dialog": {"accept": true, "message": {"contains": "Delete the draft"}},
        "expect": {"text": {"contains": "Draft deleted #1"}}}),
    )
    .await;
    assert_eq!(
        deleted["result"]["dialogs"][0]["type"], "confirm",
        "{deleted}"
    );
    assert_eq!(app.site_deletes(), 1);

    // A file from the upload directory, then its form's submit.
    let outline = see(task.clone()).await;
    act("page_upload", json!({"task_id": task, "target": ref_named(&outline, "Attachment"), "files": ["report.txt"]})).await;
    act(
        "page_click",
        json!({"task_id": task, "target": {"role": "button", "name": "Upload"},
        "expect": {"text": {"contains": "Uploaded report.txt"}}}),
    )
    .await;
    let files = app.site_uploads();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!((files[0].name.as_str(), files[0].size), ("report.txt", 18));

    // Each POST once: nothing was sent twice.
    let posts = app.requests().iter().filter(|r| r.method == "POST").count();
    assert_eq!(posts, 8, "{:?}", app.requests());

    // The login, saved, and a second task that starts with it: logged in, with no new login.
    act(
        "task_save_profile",
        json!({"task_id": task, "profile": "ada"}),
    )
    .await;
    ok(&call(c, "task_finish", json!({"task_id": task})).await);
    let second = act(
        "task_start",
        json!({"title": "logged in already", "url": app.url_of("/site"), "profile": "ada"}),
    )
    .await;
    let other = second["result"]["task_id"].as_str().unwrap().to_owned();
    let who = act(
        "page_read",
        json!({"task_id": other, "target": {"text": "Logged in as ada"}}),
    )
    .await;
    assert_eq!(who["result"]["value"], "Logged in as ada", "{who}");
    assert_eq!(app.site_logins(), 1);
    ok(&call(c, "task_finish", json!({"task_id": other})).await);
    client.cancel().await.unwrap();
}

/// A host for the site walks: the Chromium executor with an upload and a profile directory.
async fn site_host(
    chromium: &std::path::Path,
    dir: &tempfile::TempDir,
    uploads: &std::path::Path,
    profiles: &std::path::Path,
) -> HostProcess {
    let mut args = serve_args(chromium, 5000);
    args.extend([
        "--upload-dir".into(),
        uploads.display().to_string(),
        "--profile-dir".into(),
        profiles.display().to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    HostProcess::start(dir.path(), &args).await
}

/// SPEC §15 through the official Python MCP SDK (`tests/python/site_walk.py`): the same walk of
/// the site by what the snapshots show, with a stale ref and an upload from outside the upload
/// directory refused on the way and a saved login used by a second task. Every POST is counted
/// exactly once at the app's server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_works_the_site_by_what_it_sees() {
    let _one = one_at_a_time().await;
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    if !python_sdk::python_mcp_or_skip() {
        return;
    }
    let app = WebApp::start().await.expect("the web app starts");
    let uploads = tempfile::tempdir().unwrap();
    std::fs::write(uploads.path().join("report.txt"), "quarterly numbers\n").unwrap();
    let profiles = tempfile::tempdir().unwrap();
    let dir = socket_dir();
    let host = site_host(&chromium, &dir, uploads.path(), profiles.path()).await;
    let _reaper = Reaper {
        host_pid: host.child.id(),
    };
    let _host = StopGently(host);
    python_sdk::run(
        "site_walk.py",
        vec![
            (
                "POLARIS_SOCKET_DIR".into(),
                dir.path().display().to_string(),
            ),
            ("SITE".into(), app.url_of("")),
        ],
    )
    .await;
    let count = |path: &str| {
        app.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.starts_with(path))
            .count()
    };
    assert_eq!(
        (
            app.site_logins(),
            app.site_posts(),
            app.site_frame_confirms()
        ),
        (1, 1, 1)
    );
    assert_eq!(
        (
            app.card_payments(),
            app.site_notes(),
            app.site_more(),
            app.site_deletes()
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(app.site_uploads().len(), 1);
    let posts = app.requests().iter().filter(|r| r.method == "POST").count();
    assert_eq!(posts, 8, "{:?}", app.requests());
    assert_eq!(count("/site/upload"), 1);
}
