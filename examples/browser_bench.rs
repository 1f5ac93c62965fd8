//! What the Chromium executor costs, measured as users run Polaris: the release binary
//! (`polaris serve --executor chromium`) started as its own process, this benchmark a client
//! in its own process over the bridge socket (`polaris::client::BridgeClient`). Every
//! through-Polaris figure below comes from such a spawned host.
//!
//! - **click-until-saved, the same CDP sequence driven directly** (SPEC §15's budget: through
//!   Polaris ≤ this + 10 % + 0.5 ms): the Chromium executor as a library in this process
//!   (`ChromiumExecutor`, configured as the host configures it: the allowed origin, network
//!   evidence), its own browser, the same task each time (open, fill, fill, read, click with
//!   the same expectation, close), alternated in the same rounds — every CDP command Polaris
//!   sends, with no host, socket, receipt or journal around it.
//! - **click-until-saved** on the web app's form (`polaris::webapp`): a `page.click` on
//!   `#submit` with `expect: #status contains "Saved"` through Polaris (bridge socket, receipt,
//!   journal, executor: checks before dispatch, real mouse events, the watch across the POST's
//!   navigation and its 303), against the bare CDP sequence on the same kind of page — set the
//!   title, find the button's centre, press and release the mouse there, poll `#status` until
//!   it says `Saved` — driven from this process over the same pipe client, in a Chromium of its
//!   own launched exactly as the host launches its browser (`Browser::launch`: the same flags),
//!   with no host and no checks. The two are alternated in rounds; p50 and p99 of each.
//! - `page.fill` and `page.read` through Polaris.
//! - **Browser cold start**: launch until the first DevTools answer, fresh profile each time.
//! - **Memory per task page**: the memory of the spawned host's browser (its whole process
//!   group) with pages open, against none: summed PSS (shared pages divided among their
//!   sharers: what the browser really holds) and summed RSS (shared pages counted once per
//!   process: an overstatement).
//! - **`page.snapshot` of a 5,000-element page** (SPEC §15 budget: ≤ 50 ms p50): a generated
//!   page of 1,000 rows (a label, a text field, a button, a link and a checkbox each), the whole
//!   outline (`maxBytes` 1 MiB), as the client receives it (the reply parsed).
//! - **Network evidence** (SPEC §16): click-until-saved through a second spawned host started
//!   with `--no-network-evidence`, alternated in the same rounds with the one that watches the
//!   network, p50 of each; and the bytes the evidence adds to each click's stored reply.
//! - **The journal**: click-until-saved through a third spawned host started with
//!   `--no-journal` (receipts in memory only), alternated in the same rounds: what the
//!   journal's durable writes (each action's begin and its completion) add.
//! - **The block on non-public addresses**: the bare sequence again in a browser that pauses
//!   the app's requests (127.0.0.1) for the host to allow (`--allow-origin`, which every host
//!   above is started with), alternated with the unguarded one, p50 of each.
//! - **20 tasks at once in one browser** against one alone (budget: p50 click-until-saved ≤ 2×):
//!   20 tasks started together, each doing the whole sequence above, three times; and, for
//!   what the machine itself allows, 20 bare tasks in the direct browser at once, each the
//!   same whole sequence (a context and page of its own, the form loaded, fields set and read,
//!   the bare click, closed), three times, against the bare sequence alone; and 20 tasks of
//!   the executor driven directly at once. On a machine with fewer cores than renderers, the
//!   bare 20 are far above 2× by themselves; Polaris's scaling over the machine's is the
//!   figure that is Polaris's own.
//!
//! - **Two builds in one run**: with `POLARIS_BIN_BASELINE` set to another build's `polaris`,
//!   click-until-saved through a host of that build too, alternated in the same rounds, and
//!   this build / that build at p50 — the machine's load moves between runs, so a change to the
//!   click path is judged within one.
//!
//! `cargo build --release --bin polaris --example browser_bench`, then
//! `cargo run --release --example browser_bench [ITERATIONS_PER_ROUND]` (default 25, 4 rounds;
//! every row's clicks are interleaved one by one).
//! The host binary is `$POLARIS_BIN`, else the `polaris` next to this example's directory
//! (`target/release/polaris`). Needs Chromium (`apt-get install chromium-headless-shell`, or
//! `POLARIS_CHROMIUM`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use polaris::client::BridgeClient;
use polaris::executor::chromium::browser::{
    browser_groups_of, group_processes, Browser, GroupProcess, LaunchOptions,
};
use polaris::executor::chromium::cdp::methods;
use polaris::executor::chromium::{find_chromium, ChromiumConfig, ChromiumExecutor, Origins};
use polaris::executor::{ActionOutcome, Executor, PageAction, ReadOutcome};
use polaris::protocol::{Expect, ExpectCheck, FixtureOptions, Subject, Target};
use polaris::webapp::WebApp;
#[path = "support/bare_page.rs"]
mod bare_page;
use bare_page::BarePage;
use serde_json::{json, Value};
use tokio::time::Instant;

const ROUNDS: usize = 4;

/// The `polaris` binary the hosts run: `$POLARIS_BIN`, else the one Cargo built next to this
/// example (`target/release/examples/browser_bench` → `target/release/polaris`).
fn polaris_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("POLARIS_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("this example's path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("polaris"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| {
            eprintln!(
                "no polaris binary next to {}: build it with `cargo build --release --bin polaris --example browser_bench`, or set POLARIS_BIN",
                exe.display()
            );
            std::process::exit(2)
        });
    bin
}

/// A `polaris serve --executor chromium` process of its own, as a user starts one: its
/// sockets, journal and log in a fresh directory, its browser started by its first task.
struct Host {
    root: PathBuf,
    child: Child,
    client: BridgeClient,
}

impl Host {
    /// Starts the host with `extra` flags after the common ones, and waits for its first
    /// answer. The one place the command line is written.
    async fn spawn(
        polaris: &Path,
        name: &str,
        chromium: &Path,
        local_pages: &Path,
        app_origin: &str,
        extra: &[&str],
    ) -> Host {
        let root = std::env::temp_dir().join(format!("pl-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let log = std::fs::File::create(root.join("serve.log")).unwrap();
        let mut cmd = Command::new(polaris);
        cmd.arg("serve")
            .arg("--socket-dir")
            .arg(root.join("s"))
            .arg("--audit-log")
            .arg(root.join("audit.jsonl"))
            .args(["--executor", "chromium", "--chromium"])
            .arg(chromium)
            // 20 renderers on a small machine: room for the slowest of them.
            .args(["--action-timeout-ms", "5000"])
            // The large page is a local file, in a directory of its own.
            .arg("--allow-file-urls")
            .arg(local_pages)
            // The app serves on 127.0.0.1, which the host refuses unless it is allowed.
            .args(["--allow-origin", app_origin])
            .args(extra)
            // The journal in the host's own directory, unless it runs without one.
            .args(
                (!extra.contains(&"--no-journal"))
                    .then(|| ["--journal".into(), root.join("journal").into_os_string()])
                    .into_iter()
                    .flatten(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = cmd.spawn().expect("polaris serve starts");
        let client = BridgeClient::new(&root.join("s"));
        let mut host = Host {
            root,
            child,
            client,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = host.child.try_wait().unwrap() {
                panic!("polaris serve exited early ({status}): {}", host.log());
            }
            if matches!(host.client.call("host.hello", json!({})).await, Ok(r) if r.ok) {
                return host;
            }
            assert!(
                Instant::now() < deadline,
                "polaris serve did not answer: {}",
                host.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("serve.log")).unwrap_or_default()
    }

    /// The processes of the browser this host started (its process group).
    fn browser_processes(&self) -> Vec<GroupProcess> {
        browser_groups_of(self.child.id())
            .into_iter()
            .flat_map(group_processes)
            .collect()
    }

    /// Stops the host as a user would (SIGTERM: it closes its browser) and removes its files.
    fn stop(self) {
        drop(self);
    }
}

/// A host is stopped however the benchmark ends, a failed assertion included: no host or
/// browser outlives it.
impl Drop for Host {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn line(name: &str, v: &mut [f64]) {
    let (p50, p99) = (pct(v, 0.5), pct(v, 0.99));
    println!(
        "{name:<42} n={:<4} p50 {p50:>7.2} ms   p99 {p99:>7.2} ms",
        v.len()
    );
}

fn ok(reply: &polaris::protocol::Reply) -> Value {
    assert!(reply.ok, "{reply:?}");
    reply.result.clone().unwrap_or_default()
}

/// One Polaris task: start on the form, fill the title (timed: the page's first script) and the
/// body (timed), read the title back (timed), click until saved (timed), finish; last, the bytes
/// of the click reply's network evidence.
async fn through_polaris(client: &BridgeClient, url: &str, i: usize) -> [f64; 5] {
    let t = ok(&client
        .call("task.start", json!({"title": "bench", "url": url}))
        .await
        .unwrap());
    let task = t["taskId"].as_str().unwrap().to_owned();
    let t0 = Instant::now();
    ok(&client
        .call(
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": format!("post {i}")}),
        )
        .await
        .unwrap());
    let fill = ms(t0.elapsed());
    let t0 = Instant::now();
    ok(&client
        .call(
            "page.fill",
            json!({"taskId": task, "target": "#body", "value": "Measured."}),
        )
        .await
        .unwrap());
    let fill2 = ms(t0.elapsed());
    let t0 = Instant::now();
    ok(&client
        .call("page.read", json!({"taskId": task, "target": "#title"}))
        .await
        .unwrap());
    let read = ms(t0.elapsed());
    let t0 = Instant::now();
    let r = ok(&client
        .call(
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": {"target": "#status", "contains": "Saved"}}),
        )
        .await
        .unwrap());
    let click = ms(t0.elapsed());
    let evidence_bytes = r
        .get("evidence")
        .map_or(0, |e| serde_json::to_string(e).unwrap().len());
    assert!(r["observation"]["value"]
        .as_str()
        .unwrap()
        .starts_with("Saved"));
    ok(&client
        .call("task.finish", json!({"taskId": task}))
        .await
        .unwrap());
    [fill, fill2, read, click, evidence_bytes as f64]
}

/// The same task as [`through_polaris`], the executor driven directly in this process: open,
/// fill, fill, read, click until saved (timed), close.
async fn executor_directly(executor: &ChromiumExecutor, url: &str, i: usize) -> f64 {
    let task: polaris::ids::TaskId = format!("direct-{i}").into();
    let deadline = || Instant::now() + Duration::from_secs(5);
    let css = |s: &str| Target::Css(s.into());
    executor
        .open(
            task.clone(),
            Some(url.into()),
            FixtureOptions::default(),
            deadline(),
        )
        .await
        .unwrap();
    for (field, value) in [
        ("#title", format!("post {i}")),
        ("#body", "Measured.".into()),
    ] {
        let filled = executor
            .act(
                task.clone(),
                PageAction::Fill {
                    target: css(field),
                    value,
                },
                deadline(),
            )
            .await;
        assert!(matches!(filled, ActionOutcome::Applied(_)), "{filled:?}");
    }
    let read = executor
        .observe(task.clone(), Subject::Target(css("#title")), deadline())
        .await;
    assert!(matches!(read, ReadOutcome::Value(_)), "{read:?}");
    let t0 = Instant::now();
    let clicked = executor
        .act(
            task.clone(),
            PageAction::Click {
                target: css("#submit"),
                expect: Some(Expect {
                    subject: Subject::Target(css("#status")),
                    check: ExpectCheck::Contains("Saved".into()),
                }),
                local: false,
                dialog: None,
            },
            deadline(),
        )
        .await;
    let click = ms(t0.elapsed());
    assert!(matches!(clicked, ActionOutcome::Applied(_)), "{clicked:?}");
    executor.close(task, false);
    click
}

/// Three rounds of 20 `task(n)` at once (`n` numbers each run, for its post's title), and each
/// run's click-until-saved.
async fn twenty_at_once<F, Fut>(task: F) -> Vec<f64>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = f64> + Send + 'static,
{
    let mut clicks = Vec::new();
    for round in 0..3 {
        let runs: Vec<_> = (0..20)
            .map(|k| tokio::spawn(task(round * 20 + k)))
            .collect();
        for run in runs {
            clicks.push(run.await.unwrap());
        }
    }
    clicks
}

/// A page of `rows` rows of five elements each: a label, a text field, a button, a link and
/// a checkbox.
fn big_page(rows: usize) -> String {
    let mut html = String::from("<!doctype html><title>Big</title><h1>Rows</h1><main>");
    for i in 0..rows {
        html.push_str(&format!(
            "<div class=row><label for=f{i}>Field {i}</label><input id=f{i} value='v{i}'><button>Save {i}</button><a href='#r{i}'>Row {i}</a><input type=checkbox aria-label='Pick {i}'></div>"
        ));
    }
    html.push_str("</main>");
    html
}

/// A bare page for the direct sequence.
struct Direct {
    page: BarePage,
}

impl Direct {
    async fn open(browser: &Browser) -> Direct {
        Direct {
            page: BarePage::open(&browser.cdp).await,
        }
    }

    /// What one Polaris task does, bare: a page of its own, the form loaded, the body set and
    /// the title read back, click until saved (timed), the page and its context closed.
    async fn whole_task(browser: &Browser, url: &str, i: usize) -> f64 {
        let page = Direct::open(browser).await;
        page.load(url).await;
        page.eval("document.querySelector('#body').value = 'Measured.'".into())
            .await
            .unwrap();
        page.eval("document.querySelector('#title').value".into())
            .await
            .unwrap();
        let click = page.click_until_saved(i).await;
        page.page.close().await;
        click
    }

    async fn eval(&self, expression: String) -> Result<Value, ()> {
        let r = self
            .page
            .cdp
            .call(
                Some(&self.page.session),
                &methods::Evaluate {
                    expression,
                    return_by_value: true,
                    await_promise: false,
                },
            )
            .await
            .map_err(|_| ())?;
        Ok(r.result.value)
    }

    /// Loads the form (untimed): navigate, then wait until `#title` is there.
    async fn load(&self, url: &str) {
        self.page
            .cdp
            .call(
                Some(&self.page.session),
                &methods::Navigate { url: url.into() },
            )
            .await
            .unwrap();
        while self
            .eval("document.readyState === 'complete' && !!document.querySelector('#title')".into())
            .await
            != Ok(Value::Bool(true))
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The bare sequence: set the title, find the button, click, poll `#status`.
    async fn click_until_saved(&self, i: usize) -> f64 {
        self.eval(format!(
            "document.querySelector('#title').value = {:?}",
            format!("post {i}")
        ))
        .await
        .unwrap();
        let t0 = Instant::now();
        let at = self
            .eval("(() => { const b = document.querySelector('#submit').getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2]; })()".into())
            .await
            .unwrap();
        let (x, y) = (at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
        for (kind, button, buttons, clicks) in [
            ("mousePressed", "left", 1, 1),
            ("mouseReleased", "left", 0, 1),
        ] {
            self.page
                .cdp
                .call(
                    Some(&self.page.session),
                    &methods::MouseEvent {
                        kind,
                        x,
                        y,
                        button,
                        buttons,
                        click_count: clicks,
                    },
                )
                .await
                .unwrap();
        }
        loop {
            let v = self
                .eval("(document.querySelector('#status') || {}).textContent || ''".into())
                .await;
            if let Ok(Value::String(s)) = v {
                if s.contains("Saved") {
                    return ms(t0.elapsed());
                }
            }
        }
    }
}

/// A browser group's memory in MiB: (summed RSS, summed PSS, processes).
fn group_memory(ps: &[GroupProcess]) -> (f64, f64, usize) {
    let mib = |f: &dyn Fn(&GroupProcess) -> u64| {
        ps.iter().map(|p| f(p) as f64).sum::<f64>() / (1024.0 * 1024.0)
    };
    (mib(&|p| p.rss_bytes), mib(&|p| p.pss_bytes), ps.len())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let per_round: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a number of iterations"))
        .unwrap_or(25);
    let binary = find_chromium(
        std::env::var_os("POLARIS_CHROMIUM")
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from)
            .as_deref(),
    )
    .unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let app = WebApp::start().await.unwrap();
    let url = app.url();
    println!("browser: {}", binary.display());
    println!("host: {}", polaris_binary().display());
    let launch = LaunchOptions {
        binary: binary.clone(),
        startup_timeout: Duration::from_secs(30),
        guard: None,
    };
    let app_origin = format!("http://{}", app.addr());

    // Cold starts: a fresh profile and process group each time.
    let mut cold = Vec::new();
    for _ in 0..5 {
        let b = Browser::launch(&launch).await.unwrap();
        cold.push(ms(b.started_in));
        b.kill();
    }

    // Polaris: a host process, this process its client over the bridge socket.
    let local_pages = std::env::temp_dir().join(format!("pl-bench-pages-{}", std::process::id()));
    std::fs::create_dir_all(&local_pages).unwrap();
    let polaris = polaris_binary();
    let host = Host::spawn(&polaris, "on", &binary, &local_pages, &app_origin, &[]).await;
    let client = host.client.clone();
    through_polaris(&client, &url, 0).await; // starts the browser, warms up

    // The same host without network evidence: its own process and browser, the same app.
    let host_off = Host::spawn(
        &polaris,
        "off",
        &binary,
        &local_pages,
        &app_origin,
        &["--no-network-evidence"],
    )
    .await;
    let client_off = host_off.client.clone();
    through_polaris(&client_off, &url, 0).await;

    // The same host keeping receipts in memory only: what the journal's two durable writes
    // per action (its begin, its completion) cost.
    let host_mem = Host::spawn(
        &polaris,
        "mem",
        &binary,
        &local_pages,
        &app_origin,
        &["--no-journal"],
    )
    .await;

    // Another build's host, when one is named: the same flags, the same app.
    let baseline = match std::env::var_os("POLARIS_BIN_BASELINE").filter(|p| !p.is_empty()) {
        Some(other) => {
            let h = Host::spawn(
                Path::new(&other),
                "baseline",
                &binary,
                &local_pages,
                &app_origin,
                &[],
            )
            .await;
            through_polaris(&h.client, &url, 0).await;
            println!("baseline host: {}", Path::new(&other).display());
            Some(h)
        }
        None => None,
    };
    let client_mem = host_mem.client.clone();
    through_polaris(&client_mem, &url, 0).await;

    // The executor as a library in this process, configured as the host configures it.
    let executor = ChromiumExecutor::new(
        ChromiumConfig::new(binary.clone())
            .with_origins(Origins::allowing(std::slice::from_ref(&app_origin)).unwrap()),
    );
    executor_directly(&executor, &url, 0).await; // starts its browser, warms up

    // Direct: its own browser, launched as the host launches its own, and page; the same app.
    let direct_browser = Browser::launch(&launch).await.unwrap();
    let direct = Direct::open(&direct_browser).await;
    direct.load(&url).await;
    direct.click_until_saved(0).await;
    // The same, in a browser that pauses the app's requests for the host to allow them
    // (`--allow-origin`): what the block on non-public addresses costs an allowed local site.
    let guarded_browser = Browser::launch(&LaunchOptions {
        guard: Some(Arc::new(
            Origins::allowing(std::slice::from_ref(&app_origin)).unwrap(),
        )),
        ..launch.clone()
    })
    .await
    .unwrap();
    let guarded = Direct::open(&guarded_browser).await;
    guarded.load(&url).await;
    guarded.click_until_saved(0).await;

    let (mut fill, mut fill2, mut read, mut click, mut bare) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut click_off, mut click_mem, mut evidence_bytes, mut bare_guarded) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut click_baseline, mut click_direct) = (Vec::new(), Vec::new());
    // Each row's clicks interleaved one by one, so the machine's load, which drifts over
    // seconds, falls on every row alike.
    for n in 0..ROUNDS * per_round {
        let [f, f2, r, c, e] = through_polaris(&client, &url, n).await;
        fill.push(f);
        fill2.push(f2);
        read.push(r);
        click.push(c);
        evidence_bytes.push(e);
        click_direct.push(executor_directly(&executor, &url, n + 1).await);
        let [.., c, e] = through_polaris(&client_off, &url, n).await;
        assert_eq!(e, 0.0, "no evidence without the watch");
        click_off.push(c);
        let [.., c, _] = through_polaris(&client_mem, &url, n).await;
        click_mem.push(c);
        if let Some(h) = &baseline {
            let [.., c, _] = through_polaris(&h.client, &url, n).await;
            click_baseline.push(c);
        }
        direct.load(&url).await;
        bare.push(direct.click_until_saved(n).await);
        guarded.load(&url).await;
        bare_guarded.push(guarded.click_until_saved(n).await);
    }
    guarded_browser.kill();
    host_off.stop();
    host_mem.stop();
    drop(baseline);

    // 20 tasks at once, each the whole sequence, against the one-at-a-time clicks above.
    let mut together = twenty_at_once(|n| {
        let (client, url) = (client.clone(), url.clone());
        async move { through_polaris(&client, &url, 100_000 + n).await[3] }
    })
    .await;

    // 20 tasks at once through the executor driven directly: what the host adds at 20.
    let executor = Arc::new(executor);
    let mut direct_together = twenty_at_once(|n| {
        let (executor, url) = (executor.clone(), url.clone());
        async move { executor_directly(&executor, &url, 300_000 + n).await }
    })
    .await;
    executor.shutdown();

    // 20 bare tasks at once in the direct browser, each the same whole sequence as a Polaris
    // task above (a context and page of its own, the form loaded, fields set and read, click
    // until saved, closed): what the machine itself allows 20 at once, beside Polaris's 20.
    let direct_browser = Arc::new(direct_browser);
    let mut bare_together = twenty_at_once(|n| {
        let (browser, url) = (direct_browser.clone(), url.clone());
        async move { Direct::whole_task(&browser, &url, 200_000 + n).await }
    })
    .await;
    direct_browser.kill();

    // The outline of a page of 5,000 elements.
    let big = local_pages.join("big.html");
    std::fs::write(&big, big_page(1000)).unwrap();
    let t = ok(&client
        .call(
            "task.start",
            json!({"title": "big", "url": format!("file://{}", big.display())}),
        )
        .await
        .unwrap());
    let big_task = t["taskId"].as_str().unwrap().to_owned();
    let (mut snapshot, mut outline) = (Vec::new(), (0, 0));
    for _ in 0..20 {
        let t0 = Instant::now();
        let r = ok(&client
            .call(
                "page.snapshot",
                json!({"taskId": big_task, "maxBytes": 1024 * 1024}),
            )
            .await
            .unwrap());
        snapshot.push(ms(t0.elapsed()));
        outline = (
            r["nodeCount"].as_u64().unwrap_or(0),
            r["snapshot"].as_str().map_or(0, str::len),
        );
    }
    ok(&client
        .call("task.finish", json!({"taskId": big_task}))
        .await
        .unwrap());

    // Memory: the host's browser with pages open, against none open.
    for _ in 0..50 {
        if host
            .browser_processes()
            .iter()
            .all(|p| p.kind != "renderer")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let base = group_memory(&host.browser_processes());
    let pages = 10;
    for _ in 0..pages {
        ok(&client
            .call("task.start", json!({"title": "open", "url": url}))
            .await
            .unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with_pages = group_memory(&host.browser_processes());

    println!();
    line("browser cold start (launch → first answer)", &mut cold);
    line("click-until-saved, bare CDP sequence", &mut bare);
    line("  the same, requests paused and allowed", &mut bare_guarded);
    line("click-until-saved, through Polaris", &mut click);
    line("  Polaris's own CDP sequence, direct", &mut click_direct);
    line("click-until-saved, --no-network-evidence", &mut click_off);
    line("click-until-saved, --no-journal", &mut click_mem);
    line("page.fill through Polaris, fresh page", &mut fill);
    line("page.fill through Polaris, second field", &mut fill2);
    line("page.read through Polaris", &mut read);
    line("click-until-saved, 20 tasks at once", &mut together);
    line(
        "  Polaris's own CDP sequence, direct, 20",
        &mut direct_together,
    );
    line("  bare CDP, 20 whole tasks at once", &mut bare_together);
    line("page.snapshot, 5,000-element page", &mut snapshot);
    println!("  its outline: {} nodes, {} bytes", outline.0, outline.1);
    let (b50, c50) = (pct(&mut bare, 0.5), pct(&mut click, 0.5));
    let (t50, bt50) = (pct(&mut together, 0.5), pct(&mut bare_together, 0.5));
    let (polaris_scaling, bare_scaling) = (t50 / c50, bt50 / b50);
    println!(
        "20 at once / one alone at p50: {polaris_scaling:.2}x through Polaris, {bare_scaling:.2}x bare CDP (Polaris's against the machine's: {:.2}x); Polaris / bare, 20 at once: {:.2}x",
        polaris_scaling / bare_scaling,
        t50 / bt50
    );
    let d50 = pct(&mut click_direct, 0.5);
    println!(
        "Polaris / the same CDP sequence driven directly at p50: {:.3}x ({:+.2} ms; SPEC §15: ≤ 1.10x + 0.5 ms, that is ≤ {:.2} ms); 20 at once: {:.2}x",
        c50 / d50,
        c50 - d50,
        d50 * 1.10 + 0.5,
        t50 / pct(&mut direct_together, 0.5)
    );
    println!(
        "Polaris / bare at p50: {:.2}x ({:+.2} ms)",
        c50 / b50,
        c50 - b50
    );
    let g50 = pct(&mut bare_guarded, 0.5);
    println!(
        "bare, requests paused for --allow-origin / not paused at p50: {:.3}x ({:+.2} ms)",
        g50 / b50,
        g50 - b50
    );
    println!(
        "Polaris / bare with the same requests paused at p50: {:.2}x ({:+.2} ms)",
        c50 / g50,
        c50 - g50
    );
    let off50 = pct(&mut click_off, 0.5);
    println!(
        "network evidence on / off at p50: {:.3}x ({:+.2} ms); evidence per click's stored reply: {:.0} bytes (p50)",
        c50 / off50,
        c50 - off50,
        pct(&mut evidence_bytes, 0.5)
    );
    if !click_baseline.is_empty() {
        line("click-until-saved, baseline build", &mut click_baseline);
        let base50 = pct(&mut click_baseline, 0.5);
        println!(
            "this build / baseline build at p50: {:.3}x ({:+.2} ms)",
            c50 / base50,
            c50 - base50
        );
    }
    let mem50 = pct(&mut click_mem, 0.5);
    println!(
        "journal on / off at p50: {:.3}x ({:+.2} ms); without the journal / bare: {:.2}x ({:+.2} ms)",
        c50 / mem50,
        c50 - mem50,
        mem50 / b50,
        mem50 - b50
    );
    println!(
        "browser group, no task page: {} processes, RSS {:.0} MiB, PSS {:.0} MiB",
        base.2, base.0, base.1
    );
    println!(
        "browser group, {pages} task pages: {} processes, RSS {:.0} MiB, PSS {:.0} MiB: {:.1} MiB PSS ({:.1} MiB RSS) per page",
        with_pages.2,
        with_pages.0,
        with_pages.1,
        (with_pages.1 - base.1) / pages as f64,
        (with_pages.0 - base.0) / pages as f64
    );
    println!("commits at the server: {}", app.commits());

    host.stop();
    let _ = std::fs::remove_dir_all(&local_pages);
}
