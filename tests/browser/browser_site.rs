//! SPEC §15 against real Chromium: a `polaris serve --executor chromium` process drives the
//! web app's realistic site (`/site`: a form with a select, a checkbox and radios, a widget in
//! an open shadow root, a same-origin frame and a payment frame of a second origin, a confirmed
//! delete, an upload, a button that appears late). Side effects are counted at the app's
//! server, never from the page.
//!
//! Without a browser each test prints one `skipped:` line and passes, unless
//! `POLARIS_REQUIRE_BROWSER=1`.

use polaris_testkit::browser::rig;
use polaris_testkit::browser::*;
use polaris_testkit::host::*;

use std::time::Duration;

use serde_json::{json, Value};

/// A host with the Chromium executor, an upload directory (`files`), and the app it drives.
type Rig = rig::BrowserHost;

/// A host whose uploads come from `files`; the large pages of one test are local files,
/// kept beside the uploads.
async fn start(action_timeout_ms: u64) -> Option<Rig> {
    rig::Setup::new(action_timeout_ms)
        .files_for("--upload-dir")
        .start()
        .await
}

/// Starts a task on the site's form and returns its ID.
async fn site(rig: &mut Rig) -> String {
    let url = rig.app.url_of("/site");
    let r = rig
        .c
        .call(
            "task.start",
            json!({"title": "publish on the site", "url": url}),
        )
        .await;
    assert_eq!(r["ok"], true, "{r}\n{}", rig.host.log());
    r["result"]["taskId"].as_str().unwrap().to_owned()
}

/// `page.snapshot` as JSON nodes.
async fn nodes(rig: &mut Rig, task: &str) -> Vec<Value> {
    let r = rig
        .call(
            "page.snapshot",
            json!({"taskId": task, "format": "json", "maxBytes": 1_000_000}),
        )
        .await;
    let nodes = ok(&r)["nodes"].as_array().cloned().unwrap_or_default();
    assert!(!nodes.is_empty(), "{r}");
    nodes
}

/// Reads a target's value.
async fn read(rig: &mut Rig, task: &str, target: Value) -> Value {
    rig.call("page.read", json!({"taskId": task, "target": target}))
        .await
}

/// The ref of the first node with `role` whose name contains `name`.
fn ref_of(nodes: &[Value], role: &str, name: &str) -> String {
    nodes
        .iter()
        .find(|n| n["role"] == role && n["name"].as_str().is_some_and(|s| s.contains(name)))
        .and_then(|n| n["ref"].as_str())
        .unwrap_or_else(|| panic!("no {role} {name:?} in {}", outline(nodes)))
        .to_owned()
}

fn outline(nodes: &[Value]) -> String {
    nodes
        .iter()
        .map(|n| {
            format!(
                "{}{} {} {} {} {}",
                "  ".repeat(n["depth"].as_u64().unwrap_or(0) as usize),
                n["role"],
                n["name"],
                n["ref"],
                n["value"],
                n["detail"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until `f` is true (the app's counters move a moment after the page's answer).
async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..50 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_shows_refs_across_shadow_root_and_frames() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(5000).await else {
        return;
    };
    let task = site(&mut r).await;
    let nodes = nodes(&mut r, &task).await;
    let text = outline(&nodes);
    // The form, with its states and values.
    ref_of(&nodes, "heading", "New post");
    ref_of(&nodes, "textbox", "Title");
    let category = nodes
        .iter()
        .find(|n| n["role"] == "combobox" && n["name"] == "Category")
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(category["value"], "News", "{text}");
    assert!(
        nodes.iter().any(|n| n["role"] == "radio"
            && n["name"] == "Public"
            && n["states"]
                .as_array()
                .is_some_and(|s| s.contains(&json!("checked")))),
        "{text}"
    );
    assert!(
        nodes.iter().any(|n| n["role"] == "link"
            && n["detail"]
                .as_str()
                .is_some_and(|d| d.contains("/site/drafts"))),
        "{text}"
    );
    // Inside the open shadow root.
    ref_of(&nodes, "textbox", "Note");
    ref_of(&nodes, "button", "Save note");
    // Inside the same-origin frame.
    ref_of(&nodes, "iframe", "Confirmation");
    ref_of(&nodes, "button", "Confirm in frame");
    // The payment frame of a second origin: at least the frame and its origin.
    let card = r.app.card_addr().port().to_string();
    assert!(
        nodes
            .iter()
            .any(|n| n["role"] == "iframe"
                && n["detail"].as_str().is_some_and(|d| d.contains(&card))),
        "{text}"
    );
    // The shadow root's and the frame's nodes carry refs that act there.
    let note = ref_of(&nodes, "textbox", "Note");
    let save = ref_of(&nodes, "button", "Save note");
    let f = r
        .call(
            "page.fill",
            json!({"taskId": task, "target": {"ref": note}, "value": "from a ref"}),
        )
        .await;
    assert_eq!(ok(&f)["value"], "from a ref", "{f}");
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"ref": save},
                   "expect": {"target": {"text": "Note saved"}, "contains": "Note saved #1"}}),
        )
        .await;
    ok(&c);
    assert_eq!(r.app.site_notes(), 1);
    assert_eq!(r.app.site_last_note().as_deref(), Some("from a ref"));
    let confirm = ref_of(&nodes, "button", "Confirm in frame");
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"ref": confirm},
                   "expect": {"target": {"role": "status", "frame": "#confirm-frame"}, "equals": "Frame confirmed #1"}}),
        )
        .await;
    ok(&c);
    assert!(eventually(|| r.app.site_frame_confirms() == 1).await);

    // The payment frame's content, read through its own world: refs and frame locators act
    // there, and the pointer lands inside the frame.
    let number = ref_of(&nodes, "textbox", "Card number");
    let f = r
        .call(
            "page.fill",
            json!({"taskId": task, "target": {"ref": number}, "value": "4242 4242"}),
        )
        .await;
    assert_eq!(ok(&f)["value"], "4242 4242", "{f}");
    let pay = r
        .call(
            "page.click",
            json!({"taskId": task,
                   "target": {"role": "button", "name": "Pay", "exact": true, "frame": "#card-frame"},
                   "expect": {"target": {"role": "status", "frame": "#card-frame"}, "equals": "Paid #1"}}),
        )
        .await;
    ok(&pay);
    assert!(eventually(|| r.app.card_payments() == 1).await);
    assert_eq!(r.app.last_card_number().as_deref(), Some("4242 4242"));
}

/// Asserts an `ACTION_FAILED` refusal with nothing sent, for `cause`; returns its details.
fn not_sent<'a>(r: &'a Value, cause: &str) -> &'a Value {
    let e = err(r, "ACTION_FAILED");
    assert_eq!(e["delivery"], "not_sent", "{r}");
    assert_eq!(e["details"]["cause"], cause, "{r}");
    &e["details"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locators_act_and_stale_or_ambiguous_targets_send_nothing() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(5000).await else {
        return;
    };
    let task = site(&mut r).await;
    for (name, value) in [("Title", "By role"), ("Body", "Typed by an agent.")] {
        let f = r
            .call(
                "page.fill",
                json!({"taskId": task, "target": {"role": "textbox", "name": name, "exact": true}, "value": value}),
            )
            .await;
        assert_eq!(ok(&f)["value"], value, "{f}");
    }
    let publish = json!({"url": {"contains": "/site/posts/"}});

    // A ref of an older snapshot is stale: refused, nothing sent.
    let first = nodes(&mut r, &task).await;
    let old = ref_of(&first, "button", "Publish");
    let second = nodes(&mut r, &task).await;
    let new = ref_of(&second, "button", "Publish");
    assert_ne!(old, new, "refs are numbered on across snapshots");
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"ref": old}, "expect": publish}),
        )
        .await;
    not_sent(&c, "stale_ref");

    // A locator matching several elements names them, and sends nothing.
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "button"}, "expect": publish}),
        )
        .await;
    let details = not_sent(&c, "ambiguous_target");
    let candidates = details["candidates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        (2..=10).contains(&candidates.len())
            && candidates
                .iter()
                .any(|c| c == "button \"Publish\" (#publish)"),
        "{c}"
    );
    // One matching nothing.
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "button", "name": "Publish now"}, "expect": publish}),
        )
        .await;
    not_sent(&c, "no_match");
    assert_eq!(r.app.site_posts(), 0, "nothing reached the server");
    assert_eq!(
        r.app
            .requests()
            .iter()
            .filter(|q| q.method == "POST")
            .count(),
        0
    );

    // The current ref works; the page reads the saved post.
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"text": "Publish", "exact": true}, "expect": publish}),
        )
        .await;
    assert_eq!(
        ok(&c)["observation"]["value"]
            .as_str()
            .map(|u| u.contains("/site/posts/1")),
        Some(true),
        "{c}"
    );
    assert_eq!(r.app.site_posts(), 1);
    let post = r.app.site_last_post().unwrap();
    assert_eq!(
        (post.title.as_str(), post.body.as_str()),
        ("By role", "Typed by an agent.")
    );
    // The page navigated: the refs of its last snapshot are gone with it.
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"ref": new}, "expect": {"target": "#status", "equals": "Published #2"}}),
        )
        .await;
    not_sent(&c, "stale_ref");
    let v = read(&mut r, &task, json!({"role": "status"})).await;
    assert_eq!(ok(&v)["value"], "Published #1", "{v}");
    assert_eq!(r.app.site_posts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_check_and_upload_then_submit_send_the_values_once() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(5000).await else {
        return;
    };
    let task = site(&mut r).await;
    let f = r
        .call(
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "Chosen"}),
        )
        .await;
    ok(&f);
    let s = r
        .call(
            "page.select",
            json!({"taskId": task, "target": {"role": "combobox", "name": "Category"}, "label": "How-to guide"}),
        )
        .await;
    assert_eq!(ok(&s)["observation"]["value"], "guide", "{s}");
    let s = r
        .call(
            "page.select",
            json!({"taskId": task, "target": "#category", "value": "op-ed"}),
        )
        .await;
    assert_eq!(ok(&s)["observation"]["value"], "op-ed", "{s}");
    let s = r
        .call(
            "page.select",
            json!({"taskId": task, "target": "#category", "label": "Sports"}),
        )
        .await;
    let e = err(&s, "ACTION_FAILED");
    assert!(
        e["message"].as_str().unwrap().contains("How-to guide"),
        "{s}"
    );
    let c = r
        .call(
            "page.check",
            json!({"taskId": task, "target": {"role": "checkbox", "name": "Urgent"}, "checked": true}),
        )
        .await;
    assert_eq!(ok(&c)["observation"]["value"], "true", "{c}");
    let c = r
        .call(
            "page.check",
            json!({"taskId": task, "target": {"role": "radio", "name": "Private"}, "checked": true}),
        )
        .await;
    assert_eq!(ok(&c)["observation"]["value"], "true", "{c}");
    // Reads say what a check and a select expect.
    assert_eq!(
        ok(&read(&mut r, &task, json!("#urgent")).await)["value"],
        "true"
    );
    assert_eq!(
        ok(&read(&mut r, &task, json!("#visibility-public")).await)["value"],
        "false"
    );
    assert_eq!(
        ok(&read(&mut r, &task, json!("#category")).await)["value"],
        "op-ed"
    );
    // Checking what is checked already sends nothing more.
    let c = r
        .call(
            "page.check",
            json!({"taskId": task, "target": "#urgent", "checked": true}),
        )
        .await;
    assert_eq!(ok(&c)["observation"]["value"], "true", "{c}");
    let sent: Vec<_> = r
        .app
        .requests()
        .into_iter()
        .filter(|q| q.method != "GET")
        .collect();
    assert!(sent.is_empty(), "page-local steps sent nothing: {sent:?}");

    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#publish", "expect": {"target": "#status", "equals": "Published #1"}}),
        )
        .await;
    ok(&c);
    assert_eq!(r.app.site_posts(), 1);
    let post = r.app.site_last_post().unwrap();
    assert_eq!(post.category, "op-ed");
    assert!(post.urgent);
    assert_eq!(post.visibility, "private");

    // An upload from the upload directory, then its form's submit.
    std::fs::write(r.files.path().join("report.txt"), b"twelve bytes").unwrap();
    let n = r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": r.app.url_of("/site")}),
        )
        .await;
    ok(&n);
    let u = r
        .call(
            "page.upload",
            json!({"taskId": task, "target": {"role": "button", "name": "Attachment"}, "files": ["report.txt"]}),
        )
        .await;
    assert_eq!(ok(&u)["observation"]["value"], "report.txt", "{u}");
    assert!(r.app.site_uploads().is_empty());
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#upload-button", "expect": {"text": {"contains": "Uploaded report.txt"}}}),
        )
        .await;
    ok(&c);
    let uploads = r.app.site_uploads();
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert_eq!(
        (uploads[0].name.as_str(), uploads[0].size),
        ("report.txt", 12)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_outside_the_upload_dir_are_bad_requests() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(5000).await else {
        return;
    };
    let task = site(&mut r).await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), b"secret").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        r.files.path().join("link.txt"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path(), r.files.path().join("dir")).unwrap();
    std::fs::create_dir(r.files.path().join("sub")).unwrap();
    let secret = outside.path().join("secret.txt").display().to_string();
    for (file, says) in [
        (secret.as_str(), "relative"),
        ("../secret.txt", "relative"),
        ("link.txt", "outside"),
        ("dir/secret.txt", "outside"),
        ("missing.txt", "not a file"),
        ("sub", "regular file"),
    ] {
        let u = r
            .call(
                "page.upload",
                json!({"taskId": task, "target": "#attachment", "files": [file]}),
            )
            .await;
        let e = err(&u, "BAD_REQUEST");
        assert!(e["message"].as_str().unwrap().contains(says), "{file}: {u}");
    }
    let read = read(&mut r, &task, json!("#attachment")).await;
    assert_eq!(ok(&read)["value"], "", "the input got nothing");
    assert!(r.app.site_uploads().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigate_follows_links_and_history_and_refuses_to_resend_a_form() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(5000).await else {
        return;
    };
    let task = site(&mut r).await;
    // A link, by role, with an expectation on the URL.
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "link", "name": "Drafts"}, "expect": {"url": {"contains": "/site/drafts"}}}),
        )
        .await;
    ok(&c);
    let back = r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": "back", "expect": {"text": {"contains": "New post"}}}),
        )
        .await;
    ok(&back);
    let fwd = r
        .call("page.navigate", json!({"taskId": task, "url": "forward"}))
        .await;
    assert!(
        ok(&fwd)["observation"]["value"]
            .as_str()
            .unwrap()
            .ends_with("/site/drafts"),
        "{fwd}"
    );
    let u = r.call("page.url", json!({"taskId": task})).await;
    assert_eq!(ok(&u)["title"], "Drafts", "{u}");
    let bad = r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": "file:///etc/passwd"}),
        )
        .await;
    err(&bad, "BAD_REQUEST");

    // A page that is the answer to a POST: reloading it, or going back to it, re-sends it.
    std::fs::write(r.files.path().join("a.txt"), b"a").unwrap();
    ok(&r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": r.app.url_of("/site")}),
        )
        .await);
    ok(&r
        .call(
            "page.upload",
            json!({"taskId": task, "target": "#attachment", "files": ["a.txt"]}),
        )
        .await);
    ok(&r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#upload-button", "expect": {"text": {"contains": "Uploaded a.txt"}}}),
        )
        .await);
    assert_eq!(r.app.site_uploads().len(), 1);
    let reload = r
        .call("page.navigate", json!({"taskId": task, "url": "reload"}))
        .await;
    not_sent(&reload, "would_resubmit");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(r.app.site_uploads().len(), 1, "nothing was sent again");
    let reload = r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": "reload", "allowResubmit": true}),
        )
        .await;
    ok(&reload);
    assert!(
        eventually(|| r.app.site_uploads().len() == 2).await,
        "the form was sent again, as allowed"
    );
    ok(&r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": r.app.url_of("/site/help")}),
        )
        .await);
    let back = r
        .call("page.navigate", json!({"taskId": task, "url": "back"}))
        .await;
    not_sent(&back, "would_resubmit");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(r.app.site_uploads().len(), 2);
    let back = r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": "back", "allowResubmit": true}),
        )
        .await;
    ok(&back);
    assert!(
        eventually(|| r.app.site_uploads().len() == 3).await,
        "going back sent the form again, as allowed"
    );

    // The page a POST redirected to (post/redirect/get) loads again with a GET: back to it goes.
    ok(&r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": r.app.url_of("/site")}),
        )
        .await);
    ok(&r
        .call(
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "Once"}),
        )
        .await);
    ok(&r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#publish", "expect": {"target": "#status", "equals": "Published #1"}}),
        )
        .await);
    ok(&r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": r.app.url_of("/site/help")}),
        )
        .await);
    let back = r
        .call(
            "page.navigate",
            json!({"taskId": task, "url": "back", "expect": {"target": "#saved-title", "equals": "Once"}}),
        )
        .await;
    ok(&back);
    assert_eq!(r.app.site_posts(), 1, "the post was not sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_sees_the_late_button_and_screenshots_are_png() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(3000).await else {
        return;
    };
    let task = site(&mut r).await;
    let w = r
        .call(
            "page.wait",
            json!({"taskId": task, "target": {"role": "button", "name": "Load more"}, "timeoutMs": 5000}),
        )
        .await;
    ok(&w);
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "button", "name": "Load more"}, "expect": {"text": {"contains": "More loaded #1"}}}),
        )
        .await;
    ok(&c);
    assert_eq!(r.app.site_more(), 1);
    let w = r
        .call(
            "page.wait",
            json!({"taskId": task, "text": "Never shown", "timeoutMs": 300}),
        )
        .await;
    err(&w, "READ_TIMEOUT");
    let w = r
        .call(
            "page.wait",
            json!({"taskId": task, "text": "Never shown", "state": "hidden"}),
        )
        .await;
    ok(&w);

    const PNG: &str = "iVBORw0KGgo"; // base64 of the PNG signature
    let s = r.call("page.screenshot", json!({"taskId": task})).await;
    assert!(
        ok(&s)["data"].as_str().unwrap().starts_with(PNG),
        "{}",
        &s.to_string()[..200.min(s.to_string().len())]
    );
    let whole = ok(&s)["data"].as_str().unwrap().len();
    let s = r
        .call(
            "page.screenshot",
            json!({"taskId": task, "target": {"role": "button", "name": "Publish"}}),
        )
        .await;
    let part = ok(&s)["data"].as_str().unwrap();
    assert!(
        part.starts_with(PNG) && part.len() < whole,
        "an element is smaller than the page"
    );

    // Typing key by key, and a hover.
    let t = r
        .call(
            "page.type",
            json!({"taskId": task, "target": "#title", "text": "Hi there!"}),
        )
        .await;
    assert_eq!(ok(&t)["observation"]["value"], "Hi there!", "{t}");
    let h = r
        .call(
            "page.hover",
            json!({"taskId": task, "target": {"text": "Open help"}}),
        )
        .await;
    ok(&h);
    // A confirmed delete: the dialog answered as asked.
    let d = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "button", "name": "Delete draft"},
                   "dialog": {"accept": true}, "expect": {"url": {"contains": "deleted=1"}}}),
        )
        .await;
    ok(&d);
    assert_eq!(r.app.site_deletes(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_page_is_outlined_within_its_bounds() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(10_000).await else {
        return;
    };
    let dir = r.files.path().to_path_buf();
    let page = |n: usize| {
        let items: String = (0..n)
            .map(|i| format!("<li><button type=button>Item {i}</button></li>"))
            .collect();
        format!("<!doctype html><title>Many</title><ul>{items}</ul>")
    };
    for (name, rows) in [("five.html", 2_500), ("many.html", 15_000)] {
        std::fs::write(dir.join(name), page(rows)).unwrap();
    }
    let open = |name: &str| format!("file://{}", dir.join(name).display());
    // About 5,000 nodes: what an outline costs, printed for the record.
    let url = open("five.html");
    let t = r
        .call(
            "task.start",
            json!({"title": "read a long list", "url": url}),
        )
        .await;
    let task = ok(&t)["taskId"].as_str().unwrap().to_owned();
    let mut took = Vec::new();
    for _ in 0..5 {
        let began = std::time::Instant::now();
        let s = r.call("page.snapshot", json!({"taskId": task})).await;
        took.push(began.elapsed());
        assert!(ok(&s)["nodeCount"].as_u64().unwrap() >= 5_000, "{s}");
    }
    took.sort();
    println!(
        "page.snapshot of a 5,000-node page: p50 {:?} (debug build, through the host)",
        took[2]
    );
    // 30,000 elements: the walk stops at its bound and says so.
    let url = open("many.html");
    let t = r
        .call(
            "task.start",
            json!({"title": "read a longer list", "url": url}),
        )
        .await;
    let task = ok(&t)["taskId"].as_str().unwrap().to_owned();
    let s = r
        .call("page.snapshot", json!({"taskId": task, "format": "json"}))
        .await;
    let count = ok(&s)["nodeCount"].as_u64().unwrap();
    assert!((10_000..=20_001).contains(&count), "{count}");
    assert_eq!(ok(&s)["truncated"], true);
    // Refs past the part shown still act.
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "button", "name": "Item 9000", "exact": true}, "local": true, "expect": null}),
        )
        .await;
    ok(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_by_roles_and_typing_keeps_the_password_out_of_the_outline() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(5000).await else {
        return;
    };
    let task = site(&mut r).await;
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "link", "name": "Sign in"}, "expect": {"url": {"contains": "/site/login"}}}),
        )
        .await;
    ok(&c);
    ok(&r
        .call(
            "page.fill",
            json!({"taskId": task, "target": {"role": "textbox", "name": "Username"}, "value": "ada"}),
        )
        .await);
    let t = r
        .call(
            "page.type",
            json!({"taskId": task, "target": {"role": "textbox", "name": "Password"}, "text": "s3cret!"}),
        )
        .await;
    assert_eq!(ok(&t)["observation"]["value"], "s3cret!");
    let nodes = nodes(&mut r, &task).await;
    let password = nodes
        .iter()
        .find(|n| n["name"] == "Password")
        .unwrap_or_else(|| panic!("{}", outline(&nodes)));
    assert_eq!(password["value"], "••••", "{}", outline(&nodes));
    assert!(!outline(&nodes).contains("s3cret"));
    assert_eq!(r.app.site_logins(), 0);
    let p = r
        .call(
            "page.press",
            json!({"taskId": task, "key": "Enter", "target": {"role": "textbox", "name": "Password"},
                   "expect": {"text": {"contains": "Logged in as ada"}}}),
        )
        .await;
    ok(&p);
    assert_eq!(r.app.site_logins(), 1);
    // The refs of the login page went with it; the expectation's stale ref sends nothing.
    let old = ref_of(&nodes, "button", "Log in");
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": "#publish", "expect": {"target": {"ref": old}, "equals": "x"}}),
        )
        .await;
    not_sent(&c, "stale_ref");
    let w = r
        .call(
            "page.wait",
            json!({"taskId": task, "target": {"role": "link", "name": "Sign in"}, "state": "hidden", "timeoutMs": 1000}),
        )
        .await;
    ok(&w);
    assert_eq!(r.app.site_posts(), 0);
}
