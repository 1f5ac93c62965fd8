//! Which part of a click costs what: the parts of the executor's click sequence, each put in
//! turn into the bare CDP script and timed in one browser, one page, alternated.
//!
//! Each variant loads the web app's form, sets the title, then times from the button's
//! point being asked for until `#status` says `Saved` (the POST, its 303 and the new
//! document). The bare script presses and releases, then polls `#status` in the page's own
//! world back to back; the variants change one thing each:
//!
//! - `mouseMoved` sent first, the three events together (the executor's input);
//! - the watch as the executor runs it: a promise on DOM mutations in the executor's isolated
//!   world, made again after the navigation (`Page.createIsolatedWorld`), with the shared
//!   helpers (17 KB) sent whole in each new world, or with a few lines in their place (the
//!   element's `textContent`, and again its `innerText`, which lays the page out, as the
//!   helpers' read does);
//! - that promise in the page's own world (no world to make after the navigation);
//! - the page's network watched (`Network.enable`, as for SPEC §16 evidence), polling;
//! - a fresh browser context and page for each click (as each Polaris task has).
//!
//! `cargo build --release --example click_parts && target/release/examples/click_parts [N]`
//! (default 80 per variant). Needs Chromium, as `browser_bench` does. The host, the bridge, the
//! receipt and the journal are not in these figures: `browser_bench` has them.

use std::time::Duration;

use polaris::executor::chromium::browser::{Browser, LaunchOptions};
use polaris::executor::chromium::cdp::{methods, Connection, Method};
use polaris::executor::chromium::find_chromium;
use polaris::webapp::WebApp;
#[path = "support/bare_page.rs"]
mod bare_page;
use bare_page::BarePage;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::time::Instant;

/// A DevTools method with its params and answer as plain JSON, for the calls the executor's
/// typed methods do not cover in the shape this probe needs.
macro_rules! json_method {
    ($name:ident, $method:expr) => {
        #[derive(Serialize)]
        #[serde(transparent)]
        struct $name(Value);
        impl Method for $name {
            const NAME: &'static str = $method;
            type Returns = Value;
        }
    };
}
json_method!(CallFunctionOn, "Runtime.callFunctionOn");
json_method!(CreateIsolatedWorld, "Page.createIsolatedWorld");
json_method!(Navigate, "Page.navigate");
json_method!(Evaluate, "Runtime.evaluate");
json_method!(NetworkEnable, "Network.enable");

/// The executor's scripts, read from their source so the probe runs exactly their text.
const SCRIPTS: &str = include_str!("../crates/executor/src/chromium/script.rs");

/// The first raw string after `marker` in [`SCRIPTS`].
fn raw_string_after(marker: &str) -> String {
    let at = SCRIPTS.find(marker).expect("marker in script.rs");
    let start = at + SCRIPTS[at..].find("r#\"").expect("a raw string") + 3;
    let end = start + SCRIPTS[start..].find("\"#").expect("its end");
    SCRIPTS[start..end].to_owned()
}

/// One page of the probe's browser.
struct Page {
    page: BarePage,
}

impl Page {
    async fn open(cdp: &Connection, watch_network: bool) -> Page {
        let page = BarePage::open(cdp).await;
        if watch_network {
            cdp.call(
                Some(&page.session),
                &NetworkEnable(json!({"maxPostDataSize": 65536})),
            )
            .await
            .unwrap();
        }
        Page { page }
    }

    async fn evaluate(&self, expression: &str) -> Value {
        self.page
            .cdp
            .call(
                Some(&self.page.session),
                &Evaluate(
                    json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
                ),
            )
            .await
            .unwrap_or(Value::Null)
    }

    async fn load(&self, url: &str, title: &str) {
        self.page
            .cdp
            .call(Some(&self.page.session), &Navigate(json!({ "url": url })))
            .await
            .unwrap();
        let ready = "document.readyState === 'complete' && !!document.querySelector('#title')";
        while self.evaluate(ready).await["result"]["value"] != json!(true) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.evaluate(&format!(
            "document.querySelector('#title').value = {title:?}"
        ))
        .await;
    }

    async fn click(&self, move_first: bool) {
        let point = self
            .evaluate("(() => { const b = document.querySelector('#submit').getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2]; })()")
            .await;
        let (x, y) = (
            point["result"]["value"][0].as_f64().unwrap(),
            point["result"]["value"][1].as_f64().unwrap(),
        );
        let event = |kind, button, buttons, click_count| methods::MouseEvent {
            kind,
            x,
            y,
            button,
            buttons,
            click_count,
        };
        let s = Some(self.page.session.as_str());
        if move_first {
            let _ = futures::future::join3(
                self.page.cdp.call(s, &event("mouseMoved", "none", 0, 0)),
                self.page.cdp.call(s, &event("mousePressed", "left", 1, 1)),
                self.page.cdp.call(s, &event("mouseReleased", "left", 0, 1)),
            )
            .await;
        } else {
            for e in [
                event("mousePressed", "left", 1, 1),
                event("mouseReleased", "left", 0, 1),
            ] {
                self.page.cdp.call(s, &e).await.unwrap();
            }
        }
    }

    async fn poll(&self) {
        let status = "(document.querySelector('#status') || {}).textContent || ''";
        while !self.evaluate(status).await["result"]["value"]
            .as_str()
            .is_some_and(|s| s.contains("Saved"))
        {}
    }

    /// `watch` (a function of the watch's argument) in the executor's world, made again for
    /// each document, until it says the status holds.
    async fn watch_in_world(&self, watch: &str) {
        loop {
            let world = self.page
                .cdp
                .call(
                    Some(&self.page.session),
                    &CreateIsolatedWorld(
                        json!({"frameId": self.page.target, "worldName": "polaris", "grantUniveralAccess": true}),
                    ),
                )
                .await
                .unwrap();
            let answer = self.page
                .cdp
                .call(
                    Some(&self.page.session),
                    &CallFunctionOn(json!({
                        "functionDeclaration": watch,
                        "arguments": [{"value": {"sel": "#status", "label": "#status", "op": "contains", "want": "Saved", "ms": 5000}}],
                        "executionContextId": world["executionContextId"],
                        "returnByValue": true,
                        "awaitPromise": true,
                    })),
                )
                .await;
            if answer.is_ok_and(|a| a["result"]["value"]["holds"] == json!(true)) {
                return;
            }
        }
    }

    /// `watch` in the page's own world, until it says the status holds.
    async fn watch_in_page(&self, watch: &str) {
        let call = format!(
            "({watch})({{sel: '#status', label: '#status', op: 'contains', want: 'Saved', ms: 5000}})"
        );
        while self.evaluate(&call).await["result"]["value"]["holds"] != json!(true) {}
    }
}

const VARIANTS: [&str; 8] = [
    "bare script",
    "mouseMoved first",
    "world watch, helpers",
    "world watch, few lines",
    "page-world watch",
    "network watched",
    "fresh context each",
    "the same, with innerText",
];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a number of clicks per variant"))
        .unwrap_or(80);
    let body = raw_string_after("pub const WATCH");
    let with_helpers = format!(
        "(a) => new Promise((resolve) => {{{}{body}",
        raw_string_after("macro_rules! prelude")
    );
    let few_lines = format!(
        "(a) => new Promise((resolve) => {{\nconst read = (sel) => {{ const el = document.querySelector(sel); return el ? {{ value: el.textContent }} : {{ absent: 'none' }}; }};\n{body}"
    );
    let inner_text = few_lines.replace("el.textContent", "el.innerText");
    let app = WebApp::start().await.unwrap();
    let url = app.url();
    let browser = Browser::launch(&LaunchOptions {
        binary: find_chromium(
            std::env::var_os("POLARIS_CHROMIUM")
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from)
                .as_deref(),
        )
        .expect("Chromium: apt-get install chromium-headless-shell, or set POLARIS_CHROMIUM"),
        startup_timeout: Duration::from_secs(30),
        guard: None,
    })
    .await
    .unwrap();
    let cdp = browser.cdp.clone();
    let plain = Page::open(&cdp, false).await;
    let watched = Page::open(&cdp, true).await;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    for i in 0..n {
        for (k, time) in times.iter_mut().enumerate() {
            let fresh = if k == 6 {
                Some(Page::open(&cdp, false).await)
            } else {
                None
            };
            let page = match (k, &fresh) {
                (5, _) => &watched,
                (_, Some(f)) => f,
                _ => &plain,
            };
            page.load(&url, &format!("post {i} {k}")).await;
            let t0 = Instant::now();
            page.click(k == 1).await;
            match k {
                2 => page.watch_in_world(&with_helpers).await,
                3 => page.watch_in_world(&few_lines).await,
                4 => page.watch_in_page(&few_lines).await,
                7 => page.watch_in_world(&inner_text).await,
                _ => page.poll().await,
            }
            time.push(t0.elapsed().as_secs_f64() * 1000.0);
            if let Some(f) = fresh {
                f.page.close().await;
            }
        }
    }
    browser.kill();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let bare = median(&mut times[0]);
    for (name, v) in VARIANTS.iter().zip(times.iter_mut()) {
        let p50 = median(v);
        println!(
            "{name:<24} n={:<4} p50 {p50:>6.2} ms ({:+.2} ms against the bare script)",
            v.len(),
            p50 - bare
        );
    }
    println!("commits at the server: {}", app.commits());
}
