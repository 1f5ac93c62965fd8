//! A `polaris serve --executor chromium` on a private browser with the web app it drives and a
//! bridge connection, for the browser tests that act on the app's form (`tests/browser.rs`,
//! `tests/browser_evidence.rs`). Included by path, since it needs the including test's
//! `common` module.

#![allow(dead_code)]

use std::time::Duration;

use polaris::webapp::WebApp;
use serde_json::{json, Value};

use crate::browser_common::{chromium_or_skip, serve_args, Reaper};
use crate::common::{ok, Conn, TestHost};

/// The host and the app it drives, allowed to open local pages from `files`. Dropped in order after the host is asked to stop: the
/// reaper kills the private browser while the host is still its parent, then the host goes.
pub struct BrowserHost {
    pub app: WebApp,
    /// The directory local pages open from (`--allow-file-urls`).
    pub files: tempfile::TempDir,
    _reaper: Reaper,
    pub host: TestHost,
    pub c: Conn,
}

impl BrowserHost {
    /// A host whose actions have `action_timeout_ms`, with `extra` flags; `None` (after a
    /// `skipped:` line) without a browser.
    pub async fn start(action_timeout_ms: u64, extra: &[&str]) -> Option<BrowserHost> {
        let chromium = chromium_or_skip()?;
        let app = WebApp::start().await.expect("the web app starts");
        let files = tempfile::tempdir().expect("a directory for local pages");
        let mut args = serve_args(&chromium, action_timeout_ms);
        args.push("--allow-file-urls".into());
        args.push(files.path().display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let host = TestHost::start(&args);
        let reaper = Reaper {
            host_pid: host.child.as_ref().unwrap().id(),
        };
        let c = host.conn().await;
        Some(BrowserHost {
            app,
            files,
            _reaper: reaper,
            host,
            c,
        })
    }

    /// The host's process ID.
    pub fn pid(&self) -> u32 {
        self.host.child.as_ref().unwrap().id()
    }

    /// Starts a task on `url` and returns its ID.
    pub async fn task(&mut self, url: &str) -> String {
        let r = self
            .c
            .call("task.start", json!({"title": "publish a post", "url": url}))
            .await;
        assert_eq!(r["ok"], true, "{r}\n{}", self.host.log());
        r["result"]["taskId"].as_str().unwrap().to_owned()
    }

    /// Starts a task on the app's form and fills its title and body.
    pub async fn filled(&mut self, title: &str) -> String {
        let task = self.task(&self.app.url()).await;
        for (target, value) in [("#title", title), ("#body", "Written by an agent.")] {
            let r = self
                .c
                .call(
                    "page.fill",
                    json!({"taskId": task, "target": target, "value": value}),
                )
                .await;
            assert_eq!(ok(&r)["value"], value);
        }
        task
    }

    /// One bridge call.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.c.call(method, params).await
    }

    /// Requests the app's server received with `method` on `path` (either origin).
    pub fn received(&self, method: &str, path: &str) -> usize {
        self.app
            .requests()
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    }

    /// Waits until the server has received `n` such requests (or gives up and says how many).
    pub async fn until_received(&self, method: &str, path: &str, n: usize) -> usize {
        for _ in 0..250 {
            if self.received(method, path) >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.received(method, path)
    }
}

impl Drop for BrowserHost {
    fn drop(&mut self) {
        // A graceful stop, so the host kills its browser and removes the profile itself.
        if self.host.child.is_some() {
            self.host.terminate();
        }
    }
}
