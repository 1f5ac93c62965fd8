//! The Blocked pane against a real host across a crash: it lists what the host has not
//! settled (blocked tasks, `OUTCOME_UNCERTAIN` and `INTERRUPTED` receipts), each with its
//! task's state, and counts what `run.status` counts at every step.

use polaris_testkit::console_pty;
use polaris_testkit::host::{new_id, saved, sync_call, TestHost};

use serde_json::json;

use console_pty::{
    blocked_matches, call, call_as, kill_and_restart, start_task, unsettled, Console,
};

const ARGS: [&str; 4] = ["--capacity", "40", "--action-timeout-ms", "600"];

/// A task blocked on a dropped submit (`OUTCOME_UNCERTAIN`); its ID.
fn blocked_task(host: &TestHost) -> String {
    let task = start_task(host, json!({"dropSubmit": true}));
    let r = call(
        host,
        "page.press",
        json!({"taskId": task, "key": "Enter", "target": "#title", "expect": saved()}),
    );
    assert_eq!(r["error"]["code"], "OUTCOME_UNCERTAIN", "{r}");
    task
}

#[test]
fn the_blocked_pane_counts_what_the_host_has_not_settled_across_a_crash() {
    let mut host = TestHost::start(&ARGS);
    let mut console = Console::start_sized(&host, 120, 36);
    blocked_matches(&console, &host, 0);

    // A dropped submit and a late one: two tasks blocked on uncertain outcomes.
    let dropped = start_task(&host, json!({"dropSubmit": true}));
    let dropped_press = new_id();
    let r = call_as(
        &host,
        &dropped_press,
        "page.press",
        json!({"taskId": dropped, "key": "Enter", "target": "#title", "expect": saved()}),
    );
    assert_eq!(r["error"]["code"], "OUTCOME_UNCERTAIN", "{r}");
    let late = start_task(&host, json!({"submitDelayMs": 5000}));
    let r = call(
        &host,
        "page.press",
        json!({"taskId": late, "key": "Enter", "target": "#title", "expect": saved()}),
    );
    assert_eq!(r["error"]["code"], "OUTCOME_UNCERTAIN", "{r}");
    let two = blocked_matches(&console, &host, 2);
    assert!(
        two.matches(" blocked ").count() >= 2,
        "each row shows its task's state:\n{two}"
    );

    // Stop the dropped one from the pane (the newest task is first: the late one).
    console.press("\t\tj");
    console.press("x");
    console.shows("Stop task");
    console.press("the submit was dropped\r");
    console.shows("Press y to stop task now");
    console.press("y");
    console.shows(&format!("stopped: task {}…", &dropped[..8]));
    // Stopping settles it: the pane and run.status both leave it out.
    blocked_matches(&console, &host, 1);

    // Its receipt is clearable now; clearing it changes nothing in the pane.
    console.press(&format!("\t/{dropped_press}\r"));
    console.wait_for("the stopped task's receipt, clearable", |t| {
        t.contains("1 of 1") && t.contains("yes")
    });
    console.press(" c");
    console.shows("Clear 1 receipts?");
    console.press("stopped and resolved\r");
    console.shows("Press y to clear 1 receipts");
    console.press("y");
    console.shows("cleared 1 receipts");
    blocked_matches(&console, &host, 1);
    console.press("\x1b");

    // A press still executing when the host is killed with SIGKILL.
    let mid = start_task(&host, json!({"submitDelayMs": 5000}));
    let mid_press = new_id();
    let bridge = host.bridge();
    let (id, task) = (mid_press.clone(), mid.clone());
    let pressing = std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        let mut s = std::os::unix::net::UnixStream::connect(bridge).unwrap();
        let frame = json!({"id": id, "method": "page.press", "params":
            {"taskId": task, "key": "Enter", "target": "#title", "expect": saved()}});
        s.write_all(format!("{frame}\n").as_bytes()).unwrap();
        let mut line = String::new();
        let _ = std::io::BufReader::new(s).read_line(&mut line);
        line
    });
    let deadline = std::time::Instant::now() + console_pty::PATIENCE;
    while call(&host, "receipt.status", json!({"requestId": mid_press}))["result"]["state"]
        != "running"
    {
        assert!(std::time::Instant::now() < deadline, "the press never ran");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    kill_and_restart(&mut host, &ARGS);
    let reply = pressing.join().unwrap();
    assert!(!reply.contains("\"ok\":true"), "{reply}");
    let r = call(&host, "receipt.status", json!({"requestId": mid_press}));
    assert_eq!(r["result"]["reply"]["error"]["code"], "INTERRUPTED", "{r}");

    // After the restart: the late task (interrupted, still blocked on its outcome) and the
    // INTERRUPTED press, each with its task's state.
    console.shows("new run ");
    let after = blocked_matches(&console, &host, 2);
    assert!(
        after.contains("INTERRUPTED") && after.contains(" interrupted "),
        "the interrupted receipt is in the pane with its task's state:\n{after}"
    );

    // Acknowledge both, from the pane: each leaves it, and run.status agrees.
    console.press("\t\tG");
    for left in [1, 0] {
        console.press("A");
        console.shows("Acknowledge outcome");
        console.press("settled with the shop by phone\r");
        console.shows("Press y to acknowledge outcome now");
        console.press("y");
        console.shows("acknowledged: request");
        blocked_matches(&console, &host, left);
        console.press("g");
    }
    assert_eq!(unsettled(&host), 0);

    // Agents fill the book: new IDs are refused, a late submit among them, and the pane
    // still counts what run.status counts.
    let filler = start_task(&host, json!({}));
    let mut filled = 0;
    loop {
        let r = call(
            &host,
            "page.fill",
            json!({"taskId": filler, "target": format!("#f{filled}"), "value": "v"}),
        );
        if r["error"]["code"] == "RECEIPT_CAPACITY_FULL" {
            break;
        }
        assert_eq!(r["ok"], true, "{r}");
        filled += 1;
        assert!(filled < 40, "the book never filled");
    }
    console.shows("BOOK FULL: D, then c");
    let late = call(&host, "task.start", json!({"title": "late order"}));
    assert_eq!(late["error"]["code"], "RECEIPT_CAPACITY_FULL", "{late}");
    blocked_matches(&console, &host, 0);

    // D covers the interrupted tasks too, their task.start receipts included: every receipt
    // left (three starts, the operator's stop, two settled presses) is a closed task's, and
    // the running filler's are not. Clearing them makes room again.
    console.press("\tD");
    console.shows("marked 6 clearable receipts of closed tasks");
    console.press("c");
    console.shows("Clear 6 receipts?");
    console.press("settled and resolved after the crash\r");
    console.shows("Press y to clear 6 receipts");
    console.press("y");
    console.shows("cleared 6 receipts");
    blocked_matches(&console, &host, 0);
    let again = call(&host, "task.start", json!({"title": "late order"}));
    assert_eq!(again["ok"], true, "room again after the clear: {again}");
    console.press("q");
    assert!(console.child.wait().expect("the console exits").success());
}

#[test]
fn on_a_full_book_stop_names_the_keys_and_stops_and_acknowledgements_are_audited() {
    let capacity = 8;
    let host = TestHost::start(&["--capacity", "8", "--action-timeout-ms", "300"]);
    // A finished task whose four receipts D can clear, and two tasks blocked on dropped submits.
    let done = start_task(&host, json!({}));
    for i in 0..2 {
        console_pty::fill(&host, &done, i);
    }
    let r = call(&host, "task.finish", json!({"taskId": done}));
    assert_eq!(r["ok"], true, "{r}");
    let mut blocked = Vec::new();
    for _ in 0..2 {
        blocked.push(blocked_task(&host));
    }
    let mut console = Console::start_sized(&host, 120, 36);
    console.shows(&format!("{capacity}/{capacity} receipts"));
    blocked_matches(&console, &host, 2);

    // A stop takes a receipt: on a full book it is refused, naming the console's own keys.
    console.press("\t\tx");
    console.shows("Stop task");
    console.press("agent gave up\r");
    console.press("y");
    let refused = console.shows("refused: stop task");
    assert!(
        refused.contains("book is full"),
        "the verdict leads and says why:\n{refused}"
    );
    console.press("n");
    let whole = console.shows("Notices");
    assert!(
        whole.contains("(D, c, a reason, enter, y)") && !whole.contains("polaris clear"),
        "the way out is the console's keys, not the CLI's:\n{whole}"
    );
    console.press("q");
    console.wait_for("the notice box closed", |t| !t.contains("Notices"));

    // Free room with D, then stop one and acknowledge the other.
    console.press("\tD");
    console.shows("marked 4 clearable receipts of closed tasks");
    console.press("c");
    console.shows("Clear 4 receipts?");
    console.press("archive the finished order\r");
    console.press("y");
    console.shows("cleared 4 receipts");
    console.press("\x1b\t\tx");
    console.shows("Stop task");
    console.press("agent gave up\r");
    console.press("y");
    console.shows("stopped: task");
    blocked_matches(&console, &host, 1);
    console.press("A");
    let dialog = console.shows("Acknowledge outcome");
    assert!(
        dialog.contains("Action: press Enter #title")
            && dialog.contains("expects #status")
            && dialog.contains("Never verified"),
        "the dialog says what is acknowledged and that nothing verified it:\n{dialog}"
    );
    console.press("called the shop\r");
    console.press("y");
    console.shows("acknowledged: request");
    blocked_matches(&console, &host, 0);

    // n keeps every verdict, the clear's included, after the line moved on.
    console.press("n");
    let history = console.shows("Notices");
    for verdict in [
        "acknowledged:",
        "stopped:",
        "cleared 4 receipts",
        "refused: stop",
    ] {
        assert!(history.contains(verdict), "{verdict} is kept:\n{history}");
    }
    console.press("q");

    // L: the clear, the stop and the acknowledgement, newest first.
    console.press("L");
    // The overlay opens with "reading…"; its rows arrive in one answer.
    let audit = console.shows("called the shop");
    let at = |what: &str| {
        audit
            .find(what)
            .unwrap_or_else(|| panic!("{what} is in the audit log:\n{audit}"))
    };
    assert!(at("acknowledged") < at("stopped") && at("stopped") < at("cleared 4"));
    assert!(audit.contains("called the shop") && audit.contains("agent gave up"));
}

#[test]
fn this_task_shows_its_start_receipt_and_clears_its_receipts_in_five_keys() {
    let host = TestHost::start(&["--capacity", "40"]);
    let first = console_pty::task_with_fills(&host, 2);
    let second = console_pty::task_with_fills(&host, 2);
    let mut console = Console::start_sized(&host, 120, 36);
    console.shows("Receipts 6 ");
    // The newest receipt is the second task's: t shows that task's receipts, its start too.
    console.press("t");
    let only = console.shows("Receipts 3 ");
    assert!(only.contains("task.start"), "{only}");
    console.press("ac");
    console.shows("Clear 3 receipts?");
    console.press("done with this order\r");
    console.press("y");
    console.shows("cleared 3 receipts");
    let left = sync_call(&host.introspect(), "receipts.list", json!({"limit": 100})).unwrap();
    let items = left["result"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{left}");
    assert!(
        items.iter().all(|i| i["taskId"] == first.as_str()),
        "only the other task's receipts stay, its start included: {left}"
    );
    assert!(!left.to_string().contains(&second));
}

#[test]
fn a_read_only_console_shows_the_blocked_outcome_and_changes_nothing() {
    let host = TestHost::start(&ARGS);
    let task = blocked_task(&host);

    let args: Vec<std::ffi::OsString> = vec![
        "console".into(),
        "--socket-dir".into(),
        host.dir.clone().into(),
        "--read-only".into(),
        "--log-file".into(),
        host.root.path().join("console.log").into(),
    ];
    let mut console = Console::spawn_sized(&args, &[("NO_COLOR", "1")], 120, 36);
    // The header names every state the console is in: `connected · FOLLOW · read-only`.
    console.wait_for("a connected read-only console", |t| {
        t.contains("│ connected ·") && t.contains("· read-only")
    });
    blocked_matches(&console, &host, 1);

    // Stop, verify and acknowledge from the Blocked pane, and a clear of a marked receipt:
    // each refused where it is pressed, before any dialog or request.
    console.press("\t\t");
    for key in ["x", "v", "A"] {
        console.press(key);
        console.shows("refused: this console is read-only");
        console.press("\x1b");
    }
    console.press("\t a c");
    console.shows("refused: this console is read-only");

    // The host is as it was: the task still blocked, its outcome unsettled, nothing audited.
    let status = call(&host, "task.status", json!({"taskId": task}));
    assert_eq!(status["result"]["state"], "blocked", "{status}");
    assert_eq!(unsettled(&host), 1);
    let audit = sync_call(&host.introspect(), "audit.list", json!({})).expect("the host answers");
    assert_eq!(
        audit["result"]["entries"],
        json!([]),
        "a read-only console writes no audit line: {audit}"
    );
}
