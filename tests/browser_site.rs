//! SPEC §15 against real Chromium: a `polaris serve --executor chromium` process drives the
//! web app's realistic site (`/site`: a form with a select, a checkbox and radios, a widget in
//! an open shadow root, a same-origin frame and a payment frame of a second origin, a confirmed
//! delete, an upload, a button that appears late). Side effects are counted at the app's
//! server, never from the page.
//!
//! Without a browser each test prints one `skipped:` line and passes, unless
//! `POLARIS_REQUIRE_BROWSER=1`.

mod browser_common;
mod common;

use std::time::Duration;

use browser_common::*;
use common::*;
use polaris::webapp::WebApp;
use serde_json::{json, Value};

/// A host with the Chromium executor, an upload directory, and the app it drives. Dropped in
/// reverse order: the reaper kills the private browser while the host is still its parent.
struct Rig {
    app: WebApp,
    uploads: tempfile::TempDir,
    _reaper: Reaper,
    host: TestHost,
    c: Conn,
}

impl Rig {
    async fn start(action_timeout_ms: u64) -> Option<Rig> {
        let chromium = chromium_or_skip()?;
        let app = WebApp::start().await.expect("the web app starts");
        let uploads = tempfile::tempdir().expect("an upload directory");
        let mut args = serve_args(&chromium, action_timeout_ms);
        args.push("--upload-dir".into());
        args.push(uploads.path().display().to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let host = TestHost::start(&args);
        let reaper = Reaper {
            host_pid: host.child.as_ref().unwrap().id(),
        };
        let c = host.conn().await;
        Some(Rig {
            app,
            uploads,
            _reaper: reaper,
            host,
            c,
        })
    }

    /// Starts a task on the site's form and returns its ID.
    async fn site(&mut self) -> String {
        let url = self.app.url_of("/site");
        let r = self
            .c
            .call(
                "task.start",
                json!({"title": "publish on the site", "url": url}),
            )
            .await;
        assert_eq!(r["ok"], true, "{r}\n{}", self.host.log());
        r["result"]["taskId"].as_str().unwrap().to_owned()
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.c.call(method, params).await
    }

    /// `page.snapshot` as JSON nodes.
    async fn nodes(&mut self, task: &str) -> Vec<Value> {
        let r = self
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
    async fn read(&mut self, task: &str, target: Value) -> Value {
        self.call("page.read", json!({"taskId": task, "target": target}))
            .await
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if self.host.child.is_some() {
            self.host.terminate();
        }
    }
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
    let Some(mut r) = Rig::start(5000).await else {
        return;
    };
    let task = r.site().await;
    let nodes = r.nodes(&task).await;
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
}
