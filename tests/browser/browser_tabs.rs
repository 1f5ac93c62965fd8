//! SPEC §15's tabs and logins against real Chromium: a link with `target=_blank` opens a tab
//! the click's reply records, `page.tabs` lists, and `tab` addresses; a login saved with
//! `task.saveProfile` lets a later task start logged in, counted at the app's server; profile
//! names that could leave `--profile-dir` are refused before anything is stored.
//!
//! Without a browser each test prints one `skipped:` line and passes, unless
//! `POLARIS_REQUIRE_BROWSER=1`.

use polaris_testkit::browser::rig;
use polaris_testkit::browser::*;
use polaris_testkit::host::*;

use serde_json::{json, Value};

/// A host with the Chromium executor and a profile directory (`files`), and the app it drives.
type Rig = rig::BrowserHost;

async fn start() -> Option<Rig> {
    rig::Setup::new(5000)
        .files_for("--profile-dir")
        .file_urls(None)
        .start()
        .await
}

/// Starts a task on `path` of the site (with `extra` params) and returns its ID.
async fn task_on(rig: &mut Rig, path: &str, extra: Value) -> String {
    let mut p = json!({"title": "work on the site", "url": rig.app.url_of(path)});
    if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
        p.extend(extra.clone());
    }
    let r = rig.c.call("task.start", p).await;
    assert_eq!(r["ok"], true, "{r}\n{}", rig.host.log());
    r["result"]["taskId"].as_str().unwrap().to_owned()
}

/// A request that must be a `BAD_REQUEST` whose message says `says`, and store nothing.
async fn refused(rig: &mut Rig, method: &str, params: Value, says: &str) {
    let id = new_id();
    let r = rig.c.call_id(&id, method, params.clone()).await;
    let e = err(&r, "BAD_REQUEST");
    assert!(
        e["message"].as_str().unwrap_or("").contains(says),
        "{method} {params}: {r}"
    );
    let s = rig.c.call("receipt.status", json!({"requestId": id})).await;
    assert_eq!(
        ok(&s)["state"],
        "unknown",
        "nothing stored for {params}: {s}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tab_the_page_opens_is_recorded_listed_and_addressed() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start().await else {
        return;
    };
    let task = task_on(&mut r, "/site", json!({})).await;
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "link", "name": "Open help"}, "expect": null, "local": true}),
        )
        .await;
    let opened = ok(&c)["opened"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        opened.len(),
        1,
        "the click's reply records the new tab: {c}"
    );
    assert_eq!(opened[0]["tab"], 1, "{c}");
    assert!(
        opened[0]["url"].as_str().unwrap().contains("/site/help"),
        "{c}"
    );
    let t = r.call("page.tabs", json!({"taskId": task})).await;
    let tabs = ok(&t)["tabs"].as_array().cloned().unwrap_or_default();
    assert_eq!(tabs.len(), 2, "{t}");
    assert_eq!(tabs[0]["tab"], 0, "{t}");
    assert!(tabs[0]["url"].as_str().unwrap().ends_with("/site"), "{t}");
    assert_eq!(tabs[1]["tab"], 1, "{t}");
    // Tab 1 is the help page; tab 0 is still the form.
    let h = r
        .call(
            "page.read",
            json!({"taskId": task, "tab": 1, "target": "h1"}),
        )
        .await;
    assert_eq!(ok(&h)["value"], "Help", "{h}");
    let u = r.call("page.url", json!({"taskId": task, "tab": 1})).await;
    assert!(
        ok(&u)["url"].as_str().unwrap().contains("/site/help"),
        "{u}"
    );
    let u0 = r.call("page.url", json!({"taskId": task})).await;
    assert!(ok(&u0)["url"].as_str().unwrap().ends_with("/site"), "{u0}");
    // Actions on tab 1 act there: it goes to the drafts, whose link leads back to the form,
    // while tab 0 stays where it was.
    let drafts = r.app.url_of("/site/drafts");
    ok(&r
        .call(
            "page.navigate",
            json!({"taskId": task, "tab": 1, "url": drafts}),
        )
        .await);
    let form = r.app.url_of("/site");
    let back = r
        .call(
            "page.click",
            json!({"taskId": task, "tab": 1, "target": {"role": "link", "name": "Back to the form"},
                   "expect": {"url": {"equals": form}}}),
        )
        .await;
    ok(&back);
    let who = r
        .call(
            "page.read",
            json!({"taskId": task, "tab": 1, "target": "#who"}),
        )
        .await;
    assert_eq!(ok(&who)["value"], "Not logged in", "{who}");
    let u0 = r.call("page.url", json!({"taskId": task})).await;
    assert!(ok(&u0)["url"].as_str().unwrap().ends_with("/site"), "{u0}");
    let s = r
        .call("page.snapshot", json!({"taskId": task, "tab": 1}))
        .await;
    assert!(ok(&s)["url"].as_str().is_some(), "{s}");
    // A tab the task does not have sends nothing.
    let none = r
        .call(
            "page.click",
            json!({"taskId": task, "tab": 7, "target": "h1", "expect": null, "local": true}),
        )
        .await;
    let e = err(&none, "ACTION_FAILED");
    assert_eq!(e["delivery"], "not_sent", "{none}");
    assert_eq!(e["details"]["cause"], "no_tab", "{none}");
    let none = r
        .call(
            "page.read",
            json!({"taskId": task, "tab": 7, "target": "h1"}),
        )
        .await;
    err(&none, "ACTION_FAILED");
    // A second help tab closes itself: it is then refused, and no longer listed.
    let c = r
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "link", "name": "Open help"}, "expect": null, "local": true}),
        )
        .await;
    assert_eq!(ok(&c)["opened"][0]["tab"], 2, "{c}");
    let close = r
        .call(
            "page.click",
            json!({"taskId": task, "tab": 2, "target": {"role": "button", "name": "Close help"}, "expect": null, "local": true}),
        )
        .await;
    // A page that closes under a local step may have done anything on its way out: the
    // click is uncertain, as any local step whose page went away (SPEC §14).
    err(&close, "OUTCOME_UNCERTAIN");
    let t = r.call("page.tabs", json!({"taskId": task})).await;
    let listed: Vec<&Value> = ok(&t)["tabs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["tab"])
        .collect();
    assert_eq!(listed, [0, 1], "{t}");
    let gone = r
        .call(
            "page.read",
            json!({"taskId": task, "tab": 2, "target": "h1"}),
        )
        .await;
    let e = err(&gone, "ACTION_FAILED");
    assert!(e["message"].as_str().unwrap().contains("closed"), "{gone}");
    assert_eq!(r.app.site_posts(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_login_starts_a_later_task_logged_in() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start().await else {
        return;
    };
    let a = task_on(&mut r, "/site/login", json!({})).await;
    ok(&r
        .call(
            "page.fill",
            json!({"taskId": a, "target": {"role": "textbox", "name": "Username"}, "value": "ada"}),
        )
        .await);
    ok(&r
        .call(
            "page.fill",
            json!({"taskId": a, "target": {"role": "textbox", "name": "Password"}, "value": "s3cret!"}),
        )
        .await);
    ok(&r
        .call(
            "page.click",
            json!({"taskId": a, "target": {"role": "button", "name": "Log in"},
                   "expect": {"text": {"contains": "Logged in as ada"}}}),
        )
        .await);
    assert_eq!(r.app.site_logins(), 1);
    // A preference the site keeps in local storage, set without sending anything.
    ok(&r
        .call(
            "page.click",
            json!({"taskId": a, "target": {"role": "button", "name": "Use dark theme"},
                   "local": true, "expect": {"target": "#theme", "contains": "dark"}}),
        )
        .await);
    let saved = r
        .call("task.saveProfile", json!({"taskId": a, "profile": "ada"}))
        .await;
    ok(&saved);
    let file = r.files.path().join("ada");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert!(std::fs::read_to_string(&file).unwrap().contains("session"));
    let b = task_on(&mut r, "/site", json!({"profile": "ada"})).await;
    let who = r
        .call("page.read", json!({"taskId": b, "target": "#who"}))
        .await;
    assert_eq!(ok(&who)["value"], "Logged in as ada", "{who}");
    assert_eq!(r.app.site_logins(), 1, "task B did not log in again");
    // Its local storage came back before the page's own script read it.
    let theme = r
        .call("page.read", json!({"taskId": b, "target": "#theme"}))
        .await;
    assert_eq!(ok(&theme)["value"], "Theme: dark", "{theme}");
    // A task without the profile starts logged out: contexts stay separate.
    let c = task_on(&mut r, "/site", json!({})).await;
    let who = r
        .call("page.read", json!({"taskId": c, "target": "#who"}))
        .await;
    assert_eq!(ok(&who)["value"], "Not logged in", "{who}");
    let theme = r
        .call("page.read", json!({"taskId": c, "target": "#theme"}))
        .await;
    assert_eq!(ok(&theme)["value"], "Theme: light", "{theme}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_never_leave_their_directory() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start().await else {
        return;
    };
    let url = r.app.url_of("/site");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("stolen"),
        b"{\"version\":1,\"cookies\":[]}",
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path().join("stolen"), r.files.path().join("link")).unwrap();
    for (name, says) in [
        ("../stolen", "profile"),
        ("a/b", "profile"),
        ("", "profile"),
        ("..", "profile"),
        ("missing", "does not exist"),
        ("link", "symlink"),
    ] {
        refused(
            &mut r,
            "task.start",
            json!({"title": "t", "url": url, "profile": name}),
            says,
        )
        .await;
    }
    let task = task_on(&mut r, "/site", json!({})).await;
    for name in ["../x", "a/b", "/tmp/x", &"x".repeat(65)] {
        refused(
            &mut r,
            "task.saveProfile",
            json!({"taskId": task, "profile": name}),
            "profile",
        )
        .await;
    }
    // Saving over a symlink replaces the link, and never writes where it pointed.
    ok(&r
        .call(
            "task.saveProfile",
            json!({"taskId": task, "profile": "link"}),
        )
        .await);
    assert_eq!(
        std::fs::read(outside.path().join("stolen")).unwrap(),
        b"{\"version\":1,\"cookies\":[]}"
    );
    assert!(!std::fs::symlink_metadata(r.files.path().join("link"))
        .unwrap()
        .file_type()
        .is_symlink());
}
