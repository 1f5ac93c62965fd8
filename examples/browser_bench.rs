//! What the Chromium executor costs, measured in one run on this machine:
//!
//! - **click-until-saved** on the web app's form (`polaris::webapp`): a `page.click` on
//!   `#submit` with `expect: #status contains "Saved"` through Polaris (bridge socket, receipt,
//!   executor: checks before dispatch, real mouse events, the watch across the POST's navigation
//!   and its 303), against the bare CDP sequence on the same kind of page — set the title, find
//!   the button's centre, press and release the mouse there, poll `#status` until it says
//!   `Saved` — driven directly over the same pipe client, with no host and no checks. The two are
//!   alternated in rounds; p50 and p99 of each.
//! - `page.fill` and `page.read` through Polaris.
//! - **Browser cold start**: launch until the first DevTools answer, fresh profile each time.
//! - **Memory per task page**: the memory of the browser's whole process group with pages open,
//!   against none: summed PSS (shared pages divided among their sharers: what the browser
//!   really holds) and summed RSS (shared pages counted once per process: an overstatement).
//! - **`page.snapshot` of a 5,000-element page** (SPEC §15 budget: ≤ 50 ms p50): a generated
//!   page of 1,000 rows (a label, a text field, a button, a link and a checkbox each), the whole
//!   outline (`maxBytes` 1 MiB) through Polaris.
//! - **Network evidence** (SPEC §16): click-until-saved through a second host whose executor
//!   runs with `--no-network-evidence` (its `ChromiumConfig::with_network_evidence(false)`),
//!   alternated in the same rounds with the one that watches the network, p50 of each; and the
//!   bytes the evidence adds to each click's stored reply.
//! - **The block on non-public addresses**: the bare sequence again in a browser that pauses
//!   the app's requests (127.0.0.1) for the host to allow (`--allow-origin`), alternated with
//!   the unguarded one, p50 of each.
//! - **20 tasks at once in one browser** against one alone (budget: p50 click-until-saved ≤ 2×):
//!   20 tasks started together, each doing the whole sequence above, three times.
//!
//! `cargo run --release --example browser_bench [ITERATIONS_PER_ROUND]` (default 25, 4 rounds).
//! Needs Chromium (`apt-get install chromium-headless-shell`, or `POLARIS_CHROMIUM`).

use std::sync::Arc;
use std::time::Duration;

use polaris::client::BridgeClient;
use polaris::executor::chromium::browser::{Browser, LaunchOptions};
use polaris::executor::chromium::cdp::{methods, Connection};
use polaris::executor::chromium::{
    find_chromium, ChromiumConfig, ChromiumExecutor, FileUrls, Origins,
};
use polaris::executor::Executor;
use polaris::webapp::WebApp;
use serde_json::{json, Value};
use tokio::time::Instant;

const ROUNDS: usize = 4;

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
    cdp: Connection,
    session: String,
}

impl Direct {
    async fn open(browser: &Browser) -> Direct {
        let cdp = browser.cdp.clone();
        let ctx = cdp
            .call(
                None,
                &methods::CreateBrowserContext {
                    dispose_on_detach: false,
                },
            )
            .await
            .unwrap()
            .browser_context_id;
        let target = cdp
            .call(
                None,
                &methods::CreateTarget {
                    url: "about:blank".into(),
                    browser_context_id: ctx,
                },
            )
            .await
            .unwrap()
            .target_id;
        let session = cdp
            .call(
                None,
                &methods::AttachToTarget {
                    target_id: target.clone(),
                    flatten: true,
                },
            )
            .await
            .unwrap()
            .session_id;
        let _signals = cdp.track(&session, &target);
        cdp.call(Some(&session), &methods::PageEnable {})
            .await
            .unwrap();
        Direct { cdp, session }
    }

    async fn eval(&self, expression: String) -> Result<Value, ()> {
        let r = self
            .cdp
            .call(
                Some(&self.session),
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
        self.cdp
            .call(Some(&self.session), &methods::Navigate { url: url.into() })
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
            self.cdp
                .call(
                    Some(&self.session),
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

/// The browser group's memory in MiB: (summed RSS, summed PSS, processes).
fn group_memory(x: &ChromiumExecutor) -> (f64, f64, usize) {
    let ps = x.browser_processes();
    let mib = |f: &dyn Fn(&polaris::executor::chromium::browser::GroupProcess) -> u64| {
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

    // Cold starts: a fresh profile and process group each time.
    let mut cold = Vec::new();
    for _ in 0..5 {
        let b = Browser::launch(&LaunchOptions {
            binary: binary.clone(),
            startup_timeout: Duration::from_secs(30),
            guard: None,
        })
        .await
        .unwrap();
        cold.push(ms(b.started_in));
        b.kill();
    }

    // Polaris: a host in this process, the bridge client over its socket.
    let dir = std::env::temp_dir().join(format!("pl-bench-{}", std::process::id()));
    let mut options = polaris::console::demo::host_options(dir.clone(), 1_000_000);
    options.host.action_timeout = Duration::from_secs(5);
    // The large page below is a local file, in a directory of its own.
    let local_pages = std::env::temp_dir().join(format!("pl-bench-pages-{}", std::process::id()));
    std::fs::create_dir_all(&local_pages).unwrap();
    // The app serves on 127.0.0.1, which the executor refuses unless it is allowed.
    let local_app = Origins::allowing(&[format!("http://{}", app.addr())]).unwrap();
    let executor = ChromiumExecutor::new(
        ChromiumConfig::new(binary.clone())
            .with_file_urls(FileUrls::inside(&local_pages).unwrap())
            .with_origins(local_app.clone()),
    );
    let running = polaris::serve::start(&options, Arc::new(executor.clone())).unwrap();
    let client = BridgeClient::new(&dir);
    through_polaris(&client, &url, 0).await; // starts the browser, warms up

    // The same host without network evidence: its own browser, the same app.
    let dir_off = std::env::temp_dir().join(format!("pl-bench-off-{}", std::process::id()));
    let options_off = {
        let mut o = polaris::console::demo::host_options(dir_off.clone(), 1_000_000);
        o.host.action_timeout = Duration::from_secs(5);
        o
    };
    let executor_off = ChromiumExecutor::new(
        ChromiumConfig::new(binary.clone())
            .with_origins(local_app.clone())
            .with_network_evidence(false),
    );
    let running_off = polaris::serve::start(&options_off, Arc::new(executor_off.clone())).unwrap();
    let client_off = BridgeClient::new(&dir_off);
    through_polaris(&client_off, &url, 0).await;

    // Direct: its own browser and page, the same app.
    let direct_browser = Browser::launch(&LaunchOptions {
        binary: binary.clone(),
        startup_timeout: Duration::from_secs(30),
        guard: None,
    })
    .await
    .unwrap();
    let direct = Direct::open(&direct_browser).await;
    direct.load(&url).await;
    direct.click_until_saved(0).await;
    // The same, in a browser that pauses the app's requests for the host to allow them
    // (`--allow-origin`): what the block on non-public addresses costs an allowed local site.
    let guarded_browser = Browser::launch(&LaunchOptions {
        binary: binary.clone(),
        startup_timeout: Duration::from_secs(30),
        guard: Some(Arc::new(local_app.clone())),
    })
    .await
    .unwrap();
    let guarded = Direct::open(&guarded_browser).await;
    guarded.load(&url).await;
    guarded.click_until_saved(0).await;

    let (mut fill, mut fill2, mut read, mut click, mut bare) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut click_off, mut evidence_bytes, mut bare_guarded) =
        (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for i in 0..per_round {
            let [f, f2, r, c, e] = through_polaris(&client, &url, round * per_round + i).await;
            fill.push(f);
            fill2.push(f2);
            read.push(r);
            click.push(c);
            evidence_bytes.push(e);
        }
        for i in 0..per_round {
            let [.., c, e] = through_polaris(&client_off, &url, round * per_round + i).await;
            assert_eq!(e, 0.0, "no evidence without the watch");
            click_off.push(c);
        }
        for i in 0..per_round {
            direct.load(&url).await;
            bare.push(direct.click_until_saved(round * per_round + i).await);
            guarded.load(&url).await;
            bare_guarded.push(guarded.click_until_saved(round * per_round + i).await);
        }
    }
    direct_browser.kill();
    guarded_browser.kill();

    // 20 tasks at once, each the whole sequence, against the one-at-a-time clicks above.
    let mut together = Vec::new();
    for round in 0..3 {
        let runs: Vec<_> = (0..20)
            .map(|k| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move {
                    through_polaris(&client, &url, 100_000 + round * 20 + k).await[3]
                })
            })
            .collect();
        for run in runs {
            together.push(run.await.unwrap());
        }
    }

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

    // Memory: the host's browser with pages open, against none open.
    for _ in 0..20 {
        if executor
            .browser_processes()
            .iter()
            .all(|p| p.kind != "renderer")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let base = group_memory(&executor);
    let pages = 10;
    for _ in 0..pages {
        ok(&client
            .call("task.start", json!({"title": "open", "url": url}))
            .await
            .unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with_pages = group_memory(&executor);

    println!();
    line("browser cold start (launch → first answer)", &mut cold);
    line("click-until-saved, bare CDP sequence", &mut bare);
    line("  the same, requests paused and allowed", &mut bare_guarded);
    line("click-until-saved, through Polaris", &mut click);
    line("click-until-saved, --no-network-evidence", &mut click_off);
    line("page.fill through Polaris, fresh page", &mut fill);
    line("page.fill through Polaris, second field", &mut fill2);
    line("page.read through Polaris", &mut read);
    line("click-until-saved, 20 tasks at once", &mut together);
    line("page.snapshot, 5,000-element page", &mut snapshot);
    println!("  its outline: {} nodes, {} bytes", outline.0, outline.1);
    let (b50, c50) = (pct(&mut bare, 0.5), pct(&mut click, 0.5));
    println!(
        "20 at once / one alone at p50: {:.2}x",
        pct(&mut together, 0.5) / c50
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
    let off50 = pct(&mut click_off, 0.5);
    println!(
        "network evidence on / off at p50: {:.3}x ({:+.2} ms); evidence per click's stored reply: {:.0} bytes (p50)",
        c50 / off50,
        c50 - off50,
        pct(&mut evidence_bytes, 0.5)
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

    running.stop().await;
    executor.shutdown();
    running_off.stop().await;
    executor_off.shutdown();
    let _ = std::fs::remove_dir_all(&dir_off);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&local_pages);
}
