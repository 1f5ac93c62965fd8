//! The operator console end to end: the real binary in a pseudo-terminal against a real
//! `polaris serve`. Agents fill the book until it refuses new IDs; the operator watches the table
//! and the gauge fill, verifies the blocked outcome and clears receipts through the dialog until
//! a new ID is accepted again.

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use serde_json::{json, Value};

use common::{polaris_bin, saved, sync_call, TestHost};

const ROWS: u16 = 30;
const COLS: u16 = 100;
/// How long the console may take to show something before the test gives up (a hang guard, not
/// a timing assertion).
const PATIENCE: Duration = Duration::from_secs(30);

struct Console {
    screen: Arc<Mutex<vt100::Parser>>,
    keys: Box<dyn Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    /// The terminal's master side: the console's terminal stays open while it is held.
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl Console {
    fn start(host: &TestHost) -> Console {
        let mut args: Vec<std::ffi::OsString> = vec![
            "console".into(),
            "--socket-dir".into(),
            host.dir.clone().into(),
        ];
        args.push("--log-file".into());
        args.push(host.root.path().join("console.log").into());
        Console::spawn(&args, &[("NO_COLOR", "1")])
    }

    fn spawn(args: &[std::ffi::OsString], env: &[(&str, &str)]) -> Console {
        let pty = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut cmd = CommandBuilder::new(polaris_bin());
        cmd.args(args);
        cmd.env("TERM", "xterm-256color");
        cmd.env_remove("NO_COLOR");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pty
            .slave
            .spawn_command(cmd)
            .expect("polaris console starts");
        drop(pty.slave);
        let screen = Arc::new(Mutex::new(vt100::Parser::new(ROWS, COLS, 0)));
        let mut reader = pty.master.try_clone_reader().expect("pty reader");
        let sink = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().process(&buf[..n]);
            }
        });
        let keys = pty.master.take_writer().expect("pty writer");
        Console {
            screen,
            keys,
            child,
            _master: pty.master,
        }
    }

    fn contents(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = self.contents();
            if check(&text) {
                return text;
            }
            if Instant::now() > deadline {
                panic!("the console never showed {what}; the screen is:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Cells drawn in a colour other than the terminal's default.
    fn coloured_cells(&self) -> usize {
        let parser = self.screen.lock().unwrap();
        let screen = parser.screen();
        let mut n = 0;
        for row in 0..ROWS {
            for col in 0..COLS {
                if let Some(cell) = screen.cell(row, col) {
                    if cell.fgcolor() != vt100::Color::Default
                        || cell.bgcolor() != vt100::Color::Default
                    {
                        n += 1;
                    }
                }
            }
        }
        n
    }

    fn shows(&self, needle: &str) -> String {
        self.wait_for(needle, |t| t.contains(needle))
    }

    fn press(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn call(host: &TestHost, method: &str, params: Value) -> Value {
    sync_call(&host.bridge(), method, params).expect("the host answers")
}

fn start_task(host: &TestHost, fixture: Value) -> String {
    let r = call(
        host,
        "task.start",
        json!({"title": "e2e order", "fixture": fixture}),
    );
    assert_eq!(r["ok"], true, "{r}");
    r["result"]["taskId"].as_str().unwrap().to_owned()
}

#[test]
fn an_operator_resolves_a_capacity_full_incident_from_the_console() {
    let capacity = 8;
    let host = TestHost::start(&[
        "--capacity",
        &capacity.to_string(),
        "--action-timeout-ms",
        "300",
    ]);
    let mut console = Console::start(&host);
    console.wait_for("an empty connected host", |t| {
        t.contains("connected") && t.contains("0/8 receipts")
    });

    // An agent whose submit lands after the deadline: its task blocks on an uncertain outcome.
    let late = start_task(&host, json!({"submitDelayMs": 1200}));
    let r = call(
        &host,
        "page.fill",
        json!({"taskId": late, "target": "#title", "value": "late"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    let r = call(
        &host,
        "page.press",
        json!({"taskId": late, "key": "Enter", "target": "#title", "expect": saved()}),
    );
    assert_eq!(r["error"]["code"], "OUTCOME_UNCERTAIN", "{r}");
    console.wait_for("the blocked outcome", |t| {
        t.contains("Blocked outcomes 1") && t.contains("OUTCOME_UNCERTAIN")
    });

    // Other agents fill the book until new IDs are refused.
    let busy = start_task(&host, json!({}));
    for i in 0..capacity - 4 {
        let r = call(
            &host,
            "page.fill",
            json!({"taskId": busy, "target": format!("#f{i}"), "value": "v"}),
        );
        assert_eq!(r["ok"], true, "{r}");
        console.shows(&format!("{}/8 receipts", 5 + i));
    }
    let refused = call(
        &host,
        "page.fill",
        json!({"taskId": busy, "target": "#extra", "value": "v"}),
    );
    assert_eq!(
        refused["error"]["code"], "RECEIPT_CAPACITY_FULL",
        "{refused}"
    );
    console.wait_for("a full gauge and the refusal", |t| {
        t.contains("8/8 receipts 100%") && t.contains("full 1")
    });
    console.shows("Receipts 8");

    // The late submit has applied by now (read-only check through the bridge), so the operator's
    // verification confirms it.
    let deadline = Instant::now() + PATIENCE;
    while call(
        &host,
        "page.read",
        json!({"taskId": late, "target": "#submissions"}),
    )["result"]["value"]
        != "1"
    {
        assert!(Instant::now() < deadline, "the late submit never applied");
        std::thread::sleep(Duration::from_millis(50));
    }
    console.press("v");
    console.shows("confirmed");
    console.wait_for("the task unblocked", |t| t.contains("Blocked outcomes 0"));

    // Clear every completed receipt through the dialog: prepare, read the results, reason, y.
    console.press("a");
    console.press("c");
    let dialog = console.shows("Clear 8 receipts?");
    assert!(
        dialog.contains("OUTCOME_UNCERTAIN"),
        "the dialog shows each current result:\n{dialog}"
    );
    console.press("y");
    let text = console.shows("Reason: y");
    assert!(
        !text.contains("cleared 8"),
        "a y typed as the reason never commits"
    );
    console.press("\x7f");
    console.press("book full in e2e\r");
    console.shows("Press y to clear 8 receipts");
    console.press("y");
    console.shows("cleared 8 receipts; capacity now 0/8 used, 8 tombstones");
    console.wait_for("the emptied gauge", |t| t.contains("0/8 receipts 0%"));

    // A new ID is accepted again; a cleared one is not executed again.
    let r = call(&host, "task.start", json!({"title": "after the clear"}));
    assert_eq!(
        r["ok"], true,
        "a new ID is accepted once the book has room: {r}"
    );
    let r = sync_call(
        &host.bridge(),
        "page.fill",
        json!({"taskId": busy, "target": "#extra", "value": "v"}),
    )
    .unwrap();
    assert_eq!(r["ok"], true, "{r}");
    console.shows("2/8 receipts");

    console.press("q");
    let status = console.child.wait().expect("the console exits");
    assert!(
        status.success(),
        "the console exits cleanly on q: {status:?}"
    );
}

#[test]
fn a_lost_host_marks_the_data_stale_and_the_console_reconnects_to_the_next_run() {
    let mut host = TestHost::start(&["--capacity", "8"]);
    let mut console = Console::start(&host);
    console.wait_for("a connected host", |t| {
        t.contains("connected") && t.contains("0/8 receipts")
    });
    start_task(&host, json!({}));
    start_task(&host, json!({}));
    let first = console.shows("2/8 receipts");
    let run = |screen: &str| {
        screen
            .split("run ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("")
            .to_owned()
    };
    let first_run = run(&first);

    let status = host.terminate();
    assert!(status.success(), "the host stops cleanly: {status}");
    let stale = console.wait_for("the disconnection banner", |t| {
        t.contains("DISCONNECTED for") && t.contains("stale")
    });
    assert!(
        stale.contains("2/8 receipts"),
        "the last data stays on screen:\n{stale}"
    );

    // A new host run on the same socket directory: the console finds it by itself.
    let log = std::fs::File::create(host.root.path().join("serve2.log")).unwrap();
    let mut next = std::process::Command::new(polaris_bin())
        .args(["serve", "--capacity", "8", "--socket-dir"])
        .arg(&host.dir)
        .arg("--audit-log")
        .arg(host.root.path().join("audit.jsonl"))
        .stderr(log)
        .spawn()
        .expect("a second host starts");
    let back = console.wait_for("the new run", |t| {
        t.contains("connected") && !t.contains("DISCONNECTED") && t.contains("0/8 receipts")
    });
    assert_ne!(run(&back), first_run, "the header shows the new run");
    console.press("q");
    assert!(console.child.wait().expect("the console exits").success());
    let _ = next.kill();
    let _ = next.wait();
}

#[test]
fn the_demo_runs_agents_against_its_own_host_and_cleans_up_on_quit() {
    let state = common::short_tempdir();
    let args: Vec<std::ffi::OsString> = vec!["demo".into()];
    let xdg = state.path().to_str().unwrap();
    let mut demo = Console::spawn(&args, &[("XDG_STATE_HOME", xdg)]);
    let pid = demo.child.process_id().expect("the demo's pid");
    let dir = std::path::PathBuf::from(format!("/tmp/polaris-demo-{pid}"));
    demo.wait_for("agents at work", |t| {
        t.contains("connected") && t.contains("/60 receipts") && !t.contains("Receipts 0 ")
    });
    assert!(
        dir.join("bridge.sock").exists(),
        "the demo host listens in {}",
        dir.display()
    );
    assert!(demo.coloured_cells() > 0, "colour is on without NO_COLOR");
    demo.press("q");
    assert!(demo.child.wait().expect("the demo exits").success());
    assert!(!dir.exists(), "the demo removes its socket directory");
    let log =
        std::fs::read_to_string(state.path().join("polaris/console.log")).expect("the log file");
    assert!(
        log.contains("connected and subscribed"),
        "logs go to the file:\n{log}"
    );
}

/// The request ID on the row the cursor (`>`) is on, as the screen shows it.
fn selected_id(screen: &str) -> Option<String> {
    screen.lines().find_map(|line| {
        let rest = line.split_once("│>")?.1;
        let rest = rest.trim_start_matches('*');
        rest.split_whitespace().next().map(str::to_owned)
    })
}

fn fill(host: &TestHost, task: &str, i: usize) {
    let r = call(
        host,
        "page.fill",
        json!({"taskId": task, "target": format!("#f{i}"), "value": "v"}),
    );
    assert_eq!(r["ok"], true, "{r}");
}

#[test]
fn the_selection_stays_on_its_receipt_while_500_new_ones_arrive() {
    let host = TestHost::start(&["--capacity", "1000"]);
    let mut console = Console::start(&host);
    console.wait_for("a connected host", |t| {
        t.contains("connected") && t.contains("0/1000 receipts")
    });
    let task = start_task(&host, json!({}));
    for i in 0..20 {
        fill(&host, &task, i);
    }
    console.shows("Receipts 21 ");
    console.press("jjj");
    let screen = console.shows("4 of 21");
    let chosen = selected_id(&screen).expect("a selected row");

    for i in 20..520 {
        fill(&host, &task, i);
        if i % 50 == 0 {
            let now = console.contents();
            if let Some(seen) = selected_id(&now) {
                assert_eq!(
                    seen, chosen,
                    "the cursor left its receipt under load:\n{now}"
                );
            }
        }
    }
    let screen = console.wait_for("all 521 receipts with the selection pushed down", |t| {
        t.contains("Receipts 521 ") && t.contains("504 of 521")
    });
    assert_eq!(
        selected_id(&screen).as_deref(),
        Some(chosen.as_str()),
        "{screen}"
    );
    console.press("\r");
    let detail = console.shows("Receipt ");
    let title = detail
        .split("Receipt ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("");
    assert!(
        title.starts_with(&chosen),
        "Enter opens the selected receipt {chosen}, not {title}:\n{detail}"
    );
}

#[test]
fn a_burst_of_64_keys_is_handled_key_by_key_in_order() {
    let host = TestHost::start(&["--capacity", "200"]);
    let mut console = Console::start(&host);
    console.wait_for("a connected host", |t| {
        t.contains("connected") && t.contains("0/200 receipts")
    });
    let task = start_task(&host, json!({}));
    for i in 0..50 {
        fill(&host, &task, i);
    }
    console.shows("Receipts 51 ");
    // One write: a filter typed and applied, 43 marks across several pages, the clear key,
    // and a reason typed while the clear is being prepared.
    let burst = format!("/fill\r{}cburst of keys\r", " ".repeat(43));
    assert_eq!(burst.chars().count(), 64);
    console.press(&burst);
    let screen = console.wait_for("the confirmation of 43 receipts", |t| {
        t.contains("Press y to clear 43 receipts")
    });
    assert!(screen.contains("Clear 43 receipts?"), "{screen}");
    assert!(screen.contains("Reason: burst of keys"), "{screen}");
    assert!(
        !screen.contains("task.start"),
        "only the filtered rows were marked:\n{screen}"
    );
    console.press("y");
    console.shows("cleared 43 receipts");
    console.shows("Receipts 7 ");
}
