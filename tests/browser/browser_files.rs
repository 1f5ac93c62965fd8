//! Local files (`file:` URLs) against real Chromium: refused unless the host is started with
//! `--allow-file-urls DIR`, and then confined to DIR — through `..`, through a symlink, and
//! through a link an allowed page leads to. A file outside DIR holds a marker; no reply may
//! ever carry it.
//!
//! Without a browser each test prints one `skipped:` line and passes, unless
//! `POLARIS_REQUIRE_BROWSER=1`.

use polaris_testkit::browser::rig;
use polaris_testkit::browser::*;
use polaris_testkit::host::*;

use serde_json::{json, Value};

/// What the file outside the allowed directory holds.
const SECRET: &str = "MARKER-OUTSIDE-THE-ALLOWED-DIR";

/// A host with the Chromium executor, and the files it may or may not open: `secret.html`
/// (outside `pages/`) and `pages/`.
type Rig = rig::BrowserHost;

/// A host; with `allow`, started with `--allow-file-urls <files>/pages`.
async fn start(allow: bool) -> Option<Rig> {
    let files = tempfile::tempdir().unwrap();
    let pages = files.path().join("pages");
    std::fs::create_dir(&pages).unwrap();
    let secret = files.path().join("secret.html");
    std::fs::write(&secret, format!("<p id=s>{SECRET}</p>")).unwrap();
    std::fs::write(
        pages.join("index.html"),
        format!(
            "<title>Allowed</title><p id=hello>hello from a local page</p><a id=out href=\"file://{}\">out</a>",
            secret.display()
        ),
    )
    .unwrap();
    std::os::unix::fs::symlink(&secret, pages.join("link.html")).unwrap();
    rig::Setup::new(5000)
        .files(files)
        .file_urls(allow.then_some("pages"))
        .start()
        .await
}

fn url(rig: &Rig, rel: &str) -> String {
    format!("file://{}/{rel}", rig.files.path().display())
}

/// Sends `task.start` at `url` under a fresh ID; returns the ID and the reply.
async fn start_at(rig: &mut Rig, url: &str) -> (String, Value) {
    let id = new_id();
    let r = rig
        .c
        .call_id(
            &id,
            "task.start",
            json!({"title": "read a file", "url": url}),
        )
        .await;
    assert!(!r.to_string().contains(SECRET), "{r}");
    (id, r)
}

async fn stored(rig: &mut Rig, id: &str) -> Value {
    let s = rig.c.call("receipt.status", json!({"requestId": id})).await;
    ok(&s).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_no_local_file_opens_and_nothing_is_stored() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(false).await else {
        return;
    };
    let pid = r.host.child.as_ref().unwrap().id();
    for url in [
        "file:///etc/passwd".to_owned(),
        "FILE://localhost/etc/shadow".to_owned(),
        url(&r, "pages/index.html"),
    ] {
        let (id, reply) = start_at(&mut r, &url).await;
        let e = err(&reply, "BAD_REQUEST");
        assert_eq!(e["delivery"], "not_executed", "{reply}");
        assert!(
            e["message"].as_str().unwrap().contains("--allow-file-urls"),
            "the refusal names the flag that allows it: {reply}"
        );
        assert_eq!(stored(&mut r, &id).await["state"], "unknown", "{url}");
    }
    // Nothing was opened: the browser starts on the first task, and none started.
    assert!(browsers_of(pid).is_empty(), "a browser was started");

    // A page on the web may not be sent to a local file either.
    let page = r.app.url();
    let (_, t) = start_at(&mut r, &page).await;
    let task = ok(&t)["taskId"].as_str().unwrap().to_owned();
    let n =
        r.c.call(
            "page.navigate",
            json!({"taskId": task, "url": url(&r, "secret.html")}),
        )
        .await;
    let e = err(&n, "BAD_REQUEST");
    assert!(
        e["message"].as_str().unwrap().contains("--allow-file-urls"),
        "{n}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_flag_only_files_inside_the_directory_are_read() {
    let _one = one_at_a_time().await;
    let Some(mut r) = start(true).await else {
        return;
    };
    // Inside: opens, and reads.
    let at = url(&r, "pages/index.html");
    let (_, t) = start_at(&mut r, &at).await;
    let task = ok(&t)["taskId"].as_str().unwrap().to_owned();
    let read =
        r.c.call("page.read", json!({"taskId": task, "target": "#hello"}))
            .await;
    assert_eq!(ok(&read)["value"], "hello from a local page", "{read}");

    // Outside, as text: refused before anything is stored.
    for url in [
        "file:///etc/passwd".to_owned(),
        url(&r, "secret.html"),
        url(&r, "pages/../secret.html"),
        url(&r, "pages/%2e%2e/secret.html"),
        url(&r, "pages\\..\\secret.html"),
    ] {
        let (id, reply) = start_at(&mut r, &url).await;
        let e = err(&reply, "BAD_REQUEST");
        assert!(
            e["message"].as_str().unwrap().contains("outside"),
            "{url}: {reply}"
        );
        assert_eq!(stored(&mut r, &id).await["state"], "unknown", "{url}");
    }

    // Inside as text, outside through a symlink: failed, nothing opened.
    let at = url(&r, "pages/link.html");
    let (_, reply) = start_at(&mut r, &at).await;
    let e = err(&reply, "ACTION_FAILED");
    assert_eq!(e["delivery"], "failed", "{reply}");
    assert!(
        e["message"].as_str().unwrap().contains("symlink"),
        "{reply}"
    );

    // An allowed page that links out: the click happens, the page it leads to is not read.
    let c =
        r.c.call(
            "page.click",
            json!({"taskId": task, "target": "#out", "local": true, "expect": null}),
        )
        .await;
    assert!(!c.to_string().contains(SECRET), "{c}");
    let mut refused = None;
    for _ in 0..40 {
        let read =
            r.c.call("page.read", json!({"taskId": task, "target": "body"}))
                .await;
        assert!(!read.to_string().contains(SECRET), "{read}");
        if read["ok"] == false {
            refused = Some(read);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let refused = refused.expect("the page read after the link was refused");
    assert!(
        refused
            .to_string()
            .contains("local file this host does not open"),
        "{refused}"
    );
    for method in ["page.snapshot", "page.url"] {
        let q = r.c.call(method, json!({"taskId": task})).await;
        assert_eq!(q["ok"], false, "{method}: {q}");
        assert!(!q.to_string().contains(SECRET), "{method}: {q}");
    }
}
