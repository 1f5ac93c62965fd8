//! The operator console end to end: the real binary in a pseudo-terminal against a real
//! `polaris serve`. Agents fill the book until it refuses new IDs; the operator watches the table
//! and the gauge fill, verifies the blocked outcome and clears receipts through the dialog until
//! a new ID is accepted again.

use polaris_testkit::console_pty;
use polaris_testkit::host::{polaris_bin, saved, short_tempdir, sync_call, TestHost};

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use console_pty::{call, fill, selected_id, start_task, task_with_fills, Console, PATIENCE};

#[test]
fn an_operator_resolves_a_capacity_full_incident_from_the_console() {
    let capacity = 8;
    let host = TestHost::start(&[
        "--capacity",
        &capacity.to_string(),
        "--action-timeout-ms",
        "300",
    ]);
    let mut console = Console::connected(&host, capacity);

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
    let full = console.wait_for("a full gauge and the refusal", |t| {
        t.contains("8/8 receipts 100%") && t.contains("refused 1: full 1")
    });
    assert!(
        full.contains("BOOK FULL: new IDs refused"),
        "a full book says what to do next:\n{full}"
    );
    assert!(
        full.contains("/s, one scale"),
        "the sparklines' shared scale is shown:\n{full}"
    );
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
    // v acts on the focused pane's selection: tab to the blocked outcomes first.
    console.press("\t\tv");
    console.shows("confirmed");
    console.wait_for("the task unblocked", |t| t.contains("Blocked outcomes 0"));
    console.press("\t");

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
    let mut console = Console::connected(&host, 8);
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
    assert!(
        stale.contains("│ down ") && !stale.contains("│ up "),
        "a gone host is not counted as up:\n{stale}"
    );

    // A new host run on the same socket directory: the console finds it by itself.
    let log = std::fs::File::create(host.root.path().join("serve2.log")).unwrap();
    let mut next = std::process::Command::new(polaris_bin())
        .args(["serve", "--no-journal", "--capacity", "8", "--socket-dir"])
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
    let notice = console.shows("new run ");
    assert!(
        notice.contains(&format!("new run {}", run(&back))),
        "the notice names the new run:\n{notice}"
    );
    assert!(notice.contains("│ up "), "the new host's uptime:\n{notice}");
    console.press("q");
    assert!(console.child.wait().expect("the console exits").success());
    let _ = next.kill();
    let _ = next.wait();
}

#[test]
fn the_demo_runs_agents_against_its_own_host_and_cleans_up_on_quit() {
    let state = short_tempdir();
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

#[test]
fn the_selection_stays_on_its_receipt_while_500_new_ones_arrive() {
    let host = TestHost::start(&["--capacity", "1000"]);
    let mut console = Console::connected(&host, 1000);
    let task = task_with_fills(&host, 20);
    console.shows("Receipts 21 ");
    console.press("jjj");
    let screen = console.shows("4 of 21");
    let chosen = selected_id(&screen).expect("a selected row");

    for i in 20..520 {
        fill(&host, &task, i);
        if i.is_multiple_of(50) {
            let now = console.contents();
            if let Some(seen) = selected_id(&now) {
                assert_eq!(
                    seen, chosen,
                    "the cursor left its receipt under load:\n{now}"
                );
            }
        }
    }
    // The title can be drawn a moment before the rows of a page still being read: wait for
    // the whole settled screen, the selection drawn on its receipt at its new place.
    console.wait_for(
        "all 521 receipts with the selection pushed down, still on its receipt",
        |t| {
            t.contains("Receipts 521 ")
                && t.contains("504 of 521")
                && selected_id(t).as_deref() == Some(chosen.as_str())
        },
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
    let mut console = Console::connected(&host, 200);
    task_with_fills(&host, 50);
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

/// The request IDs of the host's receipts, newest first.
fn request_ids(host: &TestHost) -> Vec<String> {
    let r = sync_call(&host.introspect(), "receipts.list", json!({"limit": 1000})).unwrap();
    r["result"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["requestId"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn whole_ids_show_wherever_the_width_allows() {
    let host = TestHost::start(&["--capacity", "100"]);
    let task = start_task(&host, json!({}));
    fill(&host, &task, 0);
    let ids = request_ids(&host);
    for (cols, task_whole) in [(120, false), (200, true)] {
        let console = Console::start_sized(&host, cols, 40);
        let screen = console.shows("Receipts 2 ");
        for id in &ids {
            assert!(
                screen.contains(id.as_str()),
                "at {cols} columns the whole request ID {id} shows:\n{screen}"
            );
        }
        assert_eq!(
            screen.contains(task.as_str()),
            task_whole,
            "at {cols} columns the task ID is whole only when both fit:\n{screen}"
        );
        assert!(screen.contains(&task[..8]), "{screen}");
    }
}

/// Runs `polaris ARGS --socket-dir DIR`: (exit code, stdout, stderr).
fn polaris(host: &TestHost, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(polaris_bin())
        .args(args)
        .arg("--socket-dir")
        .arg(&host.dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("polaris runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One bridge call under a request ID the test chooses.
fn call_as(host: &TestHost, request_id: &str, method: &str, params: Value) -> Value {
    use std::io::BufRead;
    let mut s = std::os::unix::net::UnixStream::connect(host.bridge()).unwrap();
    let frame = json!({"id": request_id, "method": method, "params": params});
    s.write_all(format!("{frame}\n").as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap()
}

#[test]
fn operator_commands_take_unique_prefixes_and_say_what_their_exit_codes_mean() {
    let host = TestHost::start(&["--capacity", "100", "--action-timeout-ms", "300"]);
    // A dropped submit: the task blocks and verification cannot observe the effect.
    let lost = start_task(&host, json!({"dropSubmit": true}));
    let r = call(
        &host,
        "page.press",
        json!({"taskId": lost, "key": "Enter", "target": "#title", "expect": saved()}),
    );
    assert_eq!(r["error"]["code"], "OUTCOME_UNCERTAIN", "{r}");
    let (code, out, err) = polaris(&host, &["verify", &lost[..8]]);
    assert_eq!(code, 1, "not_observed is not settled:\n{out}{err}");
    assert!(out.contains("not_observed"), "{out}");
    assert!(out.contains(&lost), "the whole task ID is named: {out}");

    let (code, _, err) = polaris(&host, &["verify", &lost[..5]]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 6 characters"), "{err}");
    let (code, _, err) = polaris(&host, &["verify", "ffffff"]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("restarted"), "no misleading hint: {err}");

    // Two receipts whose IDs share a prefix.
    let task = start_task(&host, json!({}));
    for (id, target) in [
        ("064da170-1111-4000-8000-000000000001", "#a"),
        ("064da171-2222-4000-8000-000000000002", "#b"),
    ] {
        let r = call_as(
            &host,
            id,
            "page.fill",
            json!({"taskId": task, "target": target, "value": "v"}),
        );
        assert_eq!(r["ok"], true, "{r}");
    }
    let (code, _, err) = polaris(&host, &["clear", "064da1", "--yes", "--reason", "r"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("064da170-1111-4000-8000-000000000001")
            && err.contains("064da171-2222-4000-8000-000000000002"),
        "the candidates are named: {err}"
    );
    let (code, _, err) = polaris(&host, &["clear", "064da170", "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--reason"),
        "the missing reason is named: {err}"
    );
    let (code, _, err) = polaris(&host, &["receipts", "--state", "bogus"]);
    assert_eq!(code, 2, "{err}");

    let (code, out, err) = polaris(&host, &["receipts", "--task", &task[..8]]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("064da170-1111"),
        "a task prefix selects its receipts: {out}"
    );
    let (code, out, _) = polaris(&host, &["receipts"]);
    assert_eq!(code, 0);
    assert!(out.contains("completed") && !out.contains("done"), "{out}");
    assert!(out.contains("JOINS") && out.contains("REPLAYS"), "{out}");

    // One of two IDs refused (the blocked press is unverified): the clear applies to the
    // other and exits 1.
    let pressed = request_ids(&host)
        .into_iter()
        .find(|id| {
            let r =
                sync_call(&host.introspect(), "receipts.get", json!({"requestId": id})).unwrap();
            r["result"]["method"] == "page.press"
        })
        .expect("the press receipt");
    let (code, out, err) = polaris(
        &host,
        &["clear", "064da170", &pressed, "--yes", "--reason", "partly"],
    );
    assert_eq!(code, 1, "a partly refused clear is not done:\n{out}{err}");
    assert!(out.contains("cleared 1 receipt"), "{out}");
    assert!(out.contains("unverified_outcome"), "{out}");

    let (code, out, err) = polaris(&host, &["audit", "--request", "064da170"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("reason: partly"), "{out}");
    assert!(
        out.contains("064da170-1111-4000-8000-000000000001"),
        "{out}"
    );
    let (code, _, _) = polaris(&host, &["audit", "--request", "064da171"]);
    assert_eq!(code, 1, "no clear removed it");
}

#[test]
fn a_not_observed_outcome_is_resolved_from_the_console_and_its_receipt_cleared() {
    let host = TestHost::start(&["--capacity", "20", "--action-timeout-ms", "300"]);
    let lost = start_task(&host, json!({"dropSubmit": true}));
    let r = call(
        &host,
        "page.press",
        json!({"taskId": lost, "key": "Enter", "target": "#title", "expect": saved()}),
    );
    assert_eq!(r["error"]["code"], "OUTCOME_UNCERTAIN", "{r}");

    // At 80×24 the detail view scrolls to the stored reply's message.
    let mut small = Console::start_sized(&host, 80, 24);
    small.shows("Blocked outcomes 1");
    small.press("/page.press\r");
    small.shows("1 of 1");
    small.press("\r");
    small.shows("stored reply");
    small.press("G");
    let end = small.wait_for("the end of the reply", |t| t.contains("\"message\""));
    assert!(end.contains(" of "), "the view says where it is:\n{end}");
    drop(small);

    let mut console = Console::start_sized(&host, 140, 34);
    console.shows("Blocked outcomes 1");
    console.press("v");
    let seen = console.shows("not_observed");
    assert!(
        seen.contains("observed #status = \"Draft\""),
        "verification shows what it read:\n{seen}"
    );
    // Acknowledging needs a reason and a y; a host without it says so and names the way out.
    console.press("A");
    console.shows("Acknowledge outcome");
    console.press("the order never reached the shop\r");
    console.shows("Press y to acknowledge outcome now");
    console.press("y");
    let after = console.wait_for("the acknowledgement's answer", |t| {
        t.contains("acknowledged: ") || t.contains("UNKNOWN_METHOD")
    });
    if after.contains("UNKNOWN_METHOD") {
        assert!(after.contains("stop the task instead (x)"), "{after}");
        console.press("x");
        console.shows("Stop task");
        console.press("submit was dropped\r");
        console.shows("Press y to stop task now");
        console.press("y");
        console.shows(&format!("stopped: task {}…", &lost[..8]));
    }
    let status = call(&host, "task.status", json!({"taskId": lost}));
    assert!(
        status["result"]["state"] == "stopped" || after.contains("acknowledged: "),
        "{status}"
    );

    // Its receipt is now clearable, and the console clears it.
    console.press("/page.press\r");
    console.wait_for("the press receipt, clearable", |t| {
        t.contains("1 of 1") && t.contains("yes")
    });
    console.press(" c");
    console.shows("Clear 1 receipts?");
    console.press("resolved by the operator\r");
    console.press("y");
    console.shows("cleared 1 receipts");
}

#[test]
fn closed_tasks_receipts_are_cleared_in_four_keys_plus_the_reason() {
    let host = TestHost::start(&["--capacity", "100"]);
    let done = start_task(&host, json!({}));
    for i in 0..3 {
        fill(&host, &done, i);
    }
    let r = call(&host, "task.finish", json!({"taskId": done}));
    assert_eq!(r["ok"], true, "{r}");
    let busy = start_task(&host, json!({}));
    for i in 0..2 {
        fill(&host, &busy, i);
    }
    let list = sync_call(&host.introspect(), "receipts.list", json!({"limit": 1000})).unwrap();
    let items = list["result"]["items"].as_array().unwrap().clone();
    let of = |task: &str| {
        items
            .iter()
            .filter(|i| i["taskId"] == task && i["clearable"] == true)
            .count()
    };
    let (closed, running) = (of(&done), of(&busy));
    assert!(closed >= 4 && running >= 2, "{list}");

    let mut console = Console::start_sized(&host, 120, 34);
    console.shows(&format!("Receipts {} ", items.len()));
    // Filters the console applies itself: by task state and result.
    console.press("/task:running result:ok\r");
    console.shows(&format!("Receipts {running} "));
    // Esc on the filter goes back to the view before it.
    console.press("/x");
    console.shows("result:okx");
    console.press("\x1b");
    console.wait_for("the view before the filter", |t| {
        t.contains(&format!("Receipts {running} ")) && !t.contains("result:okx")
    });

    console.press("D");
    console.shows(&format!(
        "marked {closed} clearable receipts of closed tasks"
    ));
    console.press("c");
    let dialog = console.shows(&format!("Clear {closed} receipts?"));
    let listed: Vec<&str> = dialog.lines().filter(|l| l.contains("joins")).collect();
    assert_eq!(listed.len(), closed, "{dialog}");
    assert!(
        listed
            .iter()
            .all(|l| l.contains(&done[..8]) && !l.contains(&busy[..8])),
        "only the closed task's receipts:\n{dialog}"
    );
    console.press("the finished order is archived\r");
    console.press("y");
    console.shows(&format!("cleared {closed} receipts"));
    let left = sync_call(&host.introspect(), "receipts.list", json!({"limit": 1000})).unwrap();
    assert_eq!(
        left["result"]["total"].as_u64().unwrap() as usize,
        items.len() - closed,
        "the running task's receipts stay: {left}"
    );
}

#[test]
fn the_layout_keeps_the_connection_state_grows_the_panes_and_answers_the_mouse() {
    let host = TestHost::start(&["--capacity", "100"]);
    let tasks: Vec<String> = (0..20).map(|_| start_task(&host, json!({}))).collect();

    let small = Console::start_sized(&host, 80, 24);
    let screen = small.shows("Receipts 20 ");
    let first = screen.lines().next().unwrap_or("");
    assert!(
        first.trim_end().ends_with("connected · FOLLOW"),
        "the connection state is whole at 80×24: {first:?}"
    );
    drop(small);
    let narrow = Console::start_sized(&host, 60, 24);
    narrow.wait_for("the too-small notice with the connection state", |t| {
        t.contains("terminal too small") && t.contains("· connected")
    });
    drop(narrow);

    let mut big = Console::start_sized(&host, 200, 60);
    let screen = big.wait_for("20 tasks and the selected receipt", |t| {
        t.contains("Running tasks 20") && t.contains("│>") && t.contains("1 of 20 ┘")
    });
    let shown = tasks.iter().filter(|t| screen.contains(t.as_str())).count();
    assert!(
        shown >= 12,
        "the tasks pane grows with the terminal ({shown} of 20 shown):\n{screen}"
    );
    assert!(screen.contains("1 of 20"), "{screen}");
    // A click on the third receipt row selects it; the wheel moves on by three.
    let row = screen
        .lines()
        .position(|l| l.contains("│>"))
        .expect("the selected row");
    big.press(&format!("\x1b[<0;10;{}M\x1b[<0;10;{}m", row + 3, row + 3));
    big.shows("3 of 20 ┘");
    big.press(&format!("\x1b[<65;10;{}M", row + 3));
    big.shows("6 of 20 ┘");
}
