//! Shared by the browser tests (`tests/browser/`): finding Chromium (or skipping), the flags of
//! a `polaris serve --executor chromium`, and the private browser's process group, found under
//! the host process and killed at the end.

#![allow(dead_code)]

pub mod rig;

use std::path::PathBuf;

use polaris::executor::chromium::browser::{browser_groups_of, group_processes};
use polaris::executor::chromium::find_chromium;

/// The line printed when a test is skipped for want of a browser.
pub const SKIPPED: &str = "skipped: Chromium not found (apt-get install chromium-headless-shell)";

/// The browser binary, or `None` after printing [`SKIPPED`]. With `POLARIS_REQUIRE_BROWSER=1`
/// a missing browser fails the test instead.
pub fn chromium_or_skip() -> Option<PathBuf> {
    let explicit = std::env::var_os("POLARIS_CHROMIUM")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    match find_chromium(explicit.as_deref()) {
        Ok(p) => Some(p),
        Err(e) => {
            if std::env::var("POLARIS_REQUIRE_BROWSER").as_deref() == Ok("1") {
                panic!("POLARIS_REQUIRE_BROWSER=1 but {e}");
            }
            println!("{SKIPPED}");
            None
        }
    }
}

/// `polaris serve` flags for the Chromium executor, allowed to reach the test web app's
/// origins (every port of 127.0.0.1, which is refused unless allowed).
pub fn serve_args(chromium: &std::path::Path, action_timeout_ms: u64) -> Vec<String> {
    serve_args_allowing(chromium, action_timeout_ms, &["127.0.0.1"])
}

/// `polaris serve` flags for the Chromium executor with one `--allow-origin` per `allowed`.
pub fn serve_args_allowing(
    chromium: &std::path::Path,
    action_timeout_ms: u64,
    allowed: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--executor".into(),
        "chromium".into(),
        "--chromium".into(),
        chromium.display().to_string(),
        "--action-timeout-ms".into(),
        action_timeout_ms.to_string(),
    ];
    for origin in allowed {
        args.push("--allow-origin".into());
        args.push(origin.to_string());
    }
    args
}

/// The browsers (process group ids) a host process started.
pub fn browsers_of(host_pid: u32) -> Vec<i32> {
    browser_groups_of(host_pid)
}

/// Kills every renderer process of the host's browsers; returns how many.
pub fn kill_renderers(host_pid: u32) -> usize {
    let mut killed = 0;
    for g in browsers_of(host_pid) {
        for p in group_processes(g) {
            if p.kind == "renderer" {
                // A renderer of the browser this test's host started.
                if let Some(pid) = rustix::process::Pid::from_raw(p.pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                killed += 1;
            }
        }
    }
    killed
}

/// SIGKILL to process group `pgid` (a browser's).
pub fn kill_group(pgid: i32) {
    if let Some(group) = rustix::process::Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
}

/// Whether any process of group `pgid` is still alive.
pub fn group_alive(pgid: i32) -> bool {
    !group_processes(pgid).is_empty()
}

/// Kills the browsers of a host process when dropped: declare it after the host, so it runs
/// while the host (their parent) is still there to find them by.
pub struct Reaper {
    pub host_pid: u32,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for g in browsers_of(self.host_pid) {
            // The process group of a browser the test's own host started.
            kill_group(g);
        }
    }
}

/// One browser test at a time in the process (all of them run in the `browser` test binary): a
/// browser per test on two cores with deadlines of a second or two would make the timing tests
/// measure the machine.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}
