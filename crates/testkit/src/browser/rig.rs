//! A `polaris serve --executor chromium` on a private browser with the web app it drives and a
//! bridge connection, for the browser tests that drive the app or local pages
//! (every module of `tests/browser/` but `browser_mcp`, which goes through `polaris mcp`).

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use polaris::webapp::WebApp;
use serde_json::{json, Value};

use crate::browser::{chromium_or_skip, serve_args, serve_args_allowing, Reaper};
use crate::host::{ok, Conn, TestHost};

/// The host and the app it drives, with a directory of its own (`files`). Dropped in order after
/// the host is asked to stop: the reaper kills the private browser while the host is still its
/// parent, then the host goes.
pub struct BrowserHost {
    pub app: WebApp,
    /// The host's directory: where local pages open from (`--allow-file-urls`) unless the
    /// [`Setup`] says otherwise, and what any flag named by [`Setup::files_for`] points at.
    pub files: tempfile::TempDir,
    _reaper: Reaper,
    pub host: TestHost,
    pub c: Conn,
}

/// The `--allow-origin` values for an app.
type Allowed = Box<dyn FnOnce(&WebApp) -> Vec<String>>;

/// How a [`BrowserHost`] starts: its action timeout, the origins it may reach, where local
/// pages may open from, and any other flags.
pub struct Setup {
    action_timeout_ms: u64,
    allowed: Option<Allowed>,
    file_urls: Option<PathBuf>,
    files: Option<tempfile::TempDir>,
    files_for: Vec<String>,
    extra: Vec<String>,
}

impl Setup {
    /// Actions with `action_timeout_ms`; every port of 127.0.0.1 allowed; local pages open
    /// from `files`, a fresh empty directory.
    pub fn new(action_timeout_ms: u64) -> Setup {
        Setup {
            action_timeout_ms,
            allowed: None,
            file_urls: Some(PathBuf::new()),
            files: None,
            files_for: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// One `--allow-origin` per value `allowed` gives for the app, instead of 127.0.0.1.
    pub fn allowing(mut self, allowed: impl FnOnce(&WebApp) -> Vec<String> + 'static) -> Setup {
        self.allowed = Some(Box::new(allowed));
        self
    }

    /// Local pages open from this subdirectory of `files` (`""` for `files` itself), or, with
    /// `None`, are refused (no `--allow-file-urls`).
    pub fn file_urls(mut self, under: Option<&str>) -> Setup {
        self.file_urls = under.map(PathBuf::from);
        self
    }

    /// `files` is this directory, prepared before the host starts, instead of an empty one.
    pub fn files(mut self, dir: tempfile::TempDir) -> Setup {
        self.files = Some(dir);
        self
    }

    /// `flag` is given `files` as its value too (e.g. `--upload-dir`, `--profile-dir`).
    pub fn files_for(mut self, flag: &str) -> Setup {
        self.files_for.push(flag.to_owned());
        self
    }

    /// More flags, as given.
    pub fn flags(mut self, extra: &[&str]) -> Setup {
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self
    }

    /// Starts the app and the host; `None` (after a `skipped:` line) without a browser.
    pub async fn start(self) -> Option<BrowserHost> {
        let chromium = chromium_or_skip()?;
        let app = WebApp::start().await.expect("the web app starts");
        let files = match self.files {
            Some(dir) => dir,
            None => tempfile::tempdir().expect("a directory for the host"),
        };
        let mut args = match self.allowed {
            Some(allowed) => {
                let allowed = allowed(&app);
                let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
                serve_args_allowing(&chromium, self.action_timeout_ms, &allowed)
            }
            None => serve_args(&chromium, self.action_timeout_ms),
        };
        for flag in self.files_for {
            args.push(flag);
            args.push(files.path().display().to_string());
        }
        if let Some(under) = self.file_urls {
            let dir = if under.as_os_str().is_empty() {
                files.path().to_path_buf()
            } else {
                files.path().join(under)
            };
            args.push("--allow-file-urls".into());
            args.push(dir.display().to_string());
        }
        args.extend(self.extra);
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
}

impl BrowserHost {
    /// A host whose actions have `action_timeout_ms`, with `extra` flags and [`Setup::new`]'s
    /// defaults; `None` (after a `skipped:` line) without a browser.
    pub async fn start(action_timeout_ms: u64, extra: &[&str]) -> Option<BrowserHost> {
        Setup::new(action_timeout_ms).flags(extra).start().await
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
