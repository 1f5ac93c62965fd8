//! `polaris demo`: a host with the fixture executor (or, with `--browser`, real Chromium pages
//! on a small web app), a few simulated agents and the console, in one process — a small book
//! that fills up, late submits that block tasks, re-queries and the occasional reused ID, so
//! every part of the console has something to show.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::client::BridgeClient;
use crate::host::{HostConfig, DEFAULT_TOMBSTONE_CAPACITY};
use crate::protocol::results::TaskStartResult;
use crate::protocol::DEFAULT_MAX_FRAME_BYTES;
use crate::serve::ServeOptions;
use crate::server::{Limits, DEFAULT_MAX_CONNECTIONS};

/// The demo's receipt capacity: small, so the gauge fills in under a minute.
pub const DEMO_CAPACITY: usize = 60;
/// The demo's action timeout: submits are delayed up to twice this, so some land late.
pub const DEMO_ACTION_TIMEOUT: Duration = Duration::from_millis(1500);
/// Simulated agents.
pub const DEMO_AGENTS: usize = 3;

/// The demo's variety: pauses, late submits and reused IDs.
struct Rng(fastrand::Rng);

impl Rng {
    fn seeded() -> Rng {
        Rng(fastrand::Rng::new())
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n.max(1))
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The options of a demo run.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Where the sockets go; a fresh directory under /tmp when `None` (removed afterwards).
    pub socket_dir: Option<PathBuf>,
    /// Receipt capacity.
    pub capacity: usize,
    /// Drive real pages: this Chromium binary against the demo web app ([`crate::webapp`]),
    /// instead of the fixture executor.
    pub browser: Option<PathBuf>,
}

/// The default demo socket directory: short enough for socket path limits, unique per process.
pub fn fresh_demo_dir() -> PathBuf {
    PathBuf::from(format!("/tmp/polaris-demo-{}", std::process::id()))
}

/// The host options of a demo.
pub fn host_options(socket_dir: PathBuf, capacity: usize) -> ServeOptions {
    ServeOptions {
        audit_log: socket_dir.join("audit.jsonl"),
        socket_dir,
        host: HostConfig {
            capacity,
            tombstone_capacity: DEFAULT_TOMBSTONE_CAPACITY,
            action_timeout: DEMO_ACTION_TIMEOUT,
            ..HostConfig::default()
        },
        limits: Limits {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            ..Limits::default()
        },
    }
}

/// Runs the demo until the operator quits the console.
pub async fn run(options: DemoOptions) -> Result<(), String> {
    let (dir, remove_after) = match options.socket_dir {
        Some(d) => (d, false),
        None => (fresh_demo_dir(), true),
    };
    // With a browser, the agents publish on a real web app in real Chromium pages.
    let (executor, app): (Arc<dyn crate::executor::Executor>, _) = match options.browser {
        Some(binary) => {
            let app = crate::webapp::WebApp::start()
                .await
                .map_err(|e| format!("the demo web app could not start: {e}"))?;
            // The app serves on 127.0.0.1, refused unless allowed: its two origins exactly.
            let origins = crate::executor::chromium::Origins::allowing(&[
                format!("http://{}", app.addr()),
                format!("http://{}", app.card_addr()),
            ])?;
            let config =
                crate::executor::chromium::ChromiumConfig::new(binary).with_origins(origins);
            let executor = Arc::new(crate::executor::chromium::ChromiumExecutor::new(config));
            (executor, Some(app))
        }
        None => (Arc::new(crate::executor::FixtureExecutor::new()), None),
    };
    // The demo's journal lives in a temporary directory of its own, removed at exit: a demo
    // leaves nothing behind in the state directory.
    let journal_dir = PathBuf::from(format!("/tmp/polaris-demo-journal-{}", std::process::id()));
    let running = crate::serve::start_journaled(
        &host_options(dir.clone(), options.capacity),
        executor.clone(),
        Some(journal_dir.clone()),
    )
    .map_err(|e| {
        let _ = std::fs::remove_dir_all(&journal_dir);
        format!("the demo host could not start: {e}")
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let site = app.as_ref().map(|a| a.url());
    let agents: Vec<_> = (0..DEMO_AGENTS)
        .map(|n| {
            tokio::spawn(agent(
                n,
                BridgeClient::new(&dir),
                stop.clone(),
                site.clone(),
            ))
        })
        .collect();
    let console = super::run(dir.clone(), super::Access::Full).await;
    stop.store(true, Ordering::SeqCst);
    for a in agents {
        a.abort();
    }
    running.stop().await;
    executor.shutdown();
    drop(app);
    let _ = std::fs::remove_dir_all(&journal_dir);
    if remove_after {
        let _ = std::fs::remove_dir_all(&dir);
    }
    console.map_err(|e| format!("the console failed: {e}"))
}

async fn pause(rng: &mut Rng, min_ms: u64, spread_ms: u64) {
    tokio::time::sleep(Duration::from_millis(min_ms + rng.below(spread_ms))).await;
}

fn code_of(reply: &Result<crate::protocol::Reply, crate::client::ClientError>) -> Option<String> {
    match reply {
        Ok(r) if r.ok => None,
        Ok(r) => Some(
            r.error
                .as_ref()
                .map(|e| e.code.to_string())
                .unwrap_or_default(),
        ),
        Err(e) => Some(e.code.to_string()),
    }
}

/// One simulated agent: start a task, fill a field, press Enter (sometimes the submit lands
/// after the deadline), sometimes re-query, sometimes reuse an ID by mistake, finish. With a
/// `site`, the task's page is the web app's form and the late saves are the server's.
async fn agent(n: usize, client: BridgeClient, stop: Arc<AtomicBool>, site: Option<String>) {
    let mut rng = Rng::seeded();
    let mut order = 0u64;
    while !stop.load(Ordering::SeqCst) {
        order += 1;
        let late = rng.chance(25);
        let delay = if late {
            1_700 + rng.below(1_500)
        } else {
            rng.below(900)
        };
        let title = format!("agent {n} order {order}");
        let start = match &site {
            Some(url) => json!({"title": title, "url": format!("{url}?delayMs={delay}")}),
            None => json!({"title": title, "fixture": {"submitDelayMs": delay}}),
        };
        let started = client.call("task.start", start).await;
        let task_id = match &started {
            Ok(r) if r.ok => r
                .result_as::<TaskStartResult>()
                .map(|started| started.task_id)
                .unwrap_or_default(),
            _ => {
                let full = code_of(&started).as_deref() == Some("RECEIPT_CAPACITY_FULL");
                pause(&mut rng, if full { 1_500 } else { 300 }, 1_500).await;
                continue;
            }
        };
        pause(&mut rng, 400, 1_200).await;
        let fill_id = uuid::Uuid::new_v4().to_string();
        let value = format!("item {}", rng.below(1000));
        let _ = client
            .call_with_id(
                &fill_id,
                "page.fill",
                json!({"taskId": task_id, "target": "#title", "value": value}),
            )
            .await;
        if rng.chance(8) {
            // A buggy agent reuses an ID for other content: the host refuses it.
            let _ = client
                .call_with_id(
                    &fill_id,
                    "page.fill",
                    json!({"taskId": task_id, "target": "#title", "value": "other"}),
                )
                .await;
        }
        pause(&mut rng, 400, 1_200).await;
        let press_id = uuid::Uuid::new_v4().to_string();
        let press: Value = json!({
            "taskId": task_id, "key": "Enter", "target": "#title",
            "expect": {"target": "#status", "contains": "Saved"}
        });
        let pressed = client
            .call_with_id(&press_id, "page.press", press.clone())
            .await;
        if rng.chance(35) {
            // A cautious agent re-queries under the same ID: a replay, never a second submit.
            pause(&mut rng, 100, 400).await;
            let _ = client.call_with_id(&press_id, "page.press", press).await;
        }
        if code_of(&pressed).is_some() {
            // Uncertain: the task is blocked until someone verifies; this agent moves on.
            pause(&mut rng, 300, 900).await;
            continue;
        }
        pause(&mut rng, 400, 1_200).await;
        let _ = client.call("task.finish", json!({"taskId": task_id})).await;
        pause(&mut rng, 600, 1_800).await;
    }
}
