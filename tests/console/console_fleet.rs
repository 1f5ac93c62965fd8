//! The console's hosts pane through the real binary in a pseudo-terminal (80×24), attached to
//! a real fleet host on a private PostgreSQL: both hosts listed, another host's blocked task
//! counted, a host killed with SIGKILL shown dead, `H` and Enter telling it whole. And a host
//! killed in the middle of an action: the receipt the others declare `INTERRUPTED` is in the
//! Blocked pane of a surviving host's console, counted in its `receipts.unsettled`, until it is
//! acknowledged there.
//!
//! Without PostgreSQL installed this test prints one line and passes, unless
//! `POLARIS_REQUIRE_POSTGRES=1` (as CI sets), when it fails.

use polaris_testkit::console_pty;
use polaris_testkit::fleet;
use polaris_testkit::host::{receipt, start_task};

use console_pty::Console;
use fleet::Fleet;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_pane_shows_every_host_and_a_dead_one_at_80x24() {
    let Some(mut fleet) = Fleet::start(
        "tests/console/console_fleet.rs",
        &["alpha", "bravo"],
        &["--lease-ms", "3000", "--action-timeout-ms", "500"],
    ) else {
        return;
    };
    let args: Vec<std::ffi::OsString> = vec![
        "console".into(),
        "--socket-dir".into(),
        fleet.host("alpha").socket_dir().into(),
        "--log-file".into(),
        fleet.root.path().join("console.log").into(),
    ];
    let mut console = Console::spawn_sized(&args, &[("NO_COLOR", "1")], 80, 24);
    console.wait_for("both hosts alive, this one marked", |t| {
        t.contains("Hosts 2 alive") && t.contains("*alpha") && t.contains("bravo")
    });

    // Bravo's task blocks on an uncertain outcome: alpha's console counts it on bravo's row.
    let mut b = fleet.host("bravo").conn().await;
    let task = start_task(&mut b, json!({})).await;
    let press = json!({"taskId": task, "key": "Enter", "target": "#title",
                       "expect": {"target": "#status", "contains": "never shown"}});
    let r = b.call_id("bravo-uncertain", "page.press", press).await;
    assert_eq!(receipt(&r), "new", "{r}");
    console.wait_for("bravo's blocked task", |t| {
        t.lines()
            .any(|l| l.contains("bravo") && l.contains("alive") && l.trim_end().ends_with("1│"))
    });

    // Bravo dies: after its lease (and the others' reaping), alpha's console shows it dead.
    fleet.host_mut("bravo").kill9();
    let screen = console.wait_for("bravo dead", |t| {
        t.contains("Hosts 1 alive · 1 DEAD")
            && t.lines().any(|l| l.contains("bravo") && l.contains("dead"))
    });
    assert!(screen.contains("*alpha"), "{screen}");
    // H focuses the pane; the dead host is the second row; Enter tells it whole.
    console.press("Hj\r");
    console.wait_for("bravo told whole", |t| {
        t.contains("host bravo · epoch") && t.contains("dead")
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_hosts_interrupted_receipt_is_blocked_on_the_others_console() {
    // The lease outlasts the action deadline plus one second, so bravo starts the action.
    let Some(mut fleet) = Fleet::start(
        "tests/console/console_fleet.rs",
        &["alpha", "bravo"],
        &["--action-timeout-ms", "3000", "--lease-ms", "7500"],
    ) else {
        return;
    };
    let args: Vec<std::ffi::OsString> = vec![
        "console".into(),
        "--socket-dir".into(),
        fleet.host("alpha").socket_dir().into(),
        "--log-file".into(),
        fleet.root.path().join("console.log").into(),
    ];
    let mut console = Console::spawn_sized(&args, &[("NO_COLOR", "1")], 120, 36);
    console.wait_for("both hosts alive", |t| t.contains("Hosts 2 alive"));

    // Bravo applies a press whose expectation never shows, and dies while it runs.
    let mut b = fleet.host("bravo").conn().await;
    let task = start_task(&mut b, json!({})).await;
    let press = json!({"taskId": task, "key": "Enter", "target": "#title",
                       "expect": {"target": "#status", "contains": "never shown"}});
    let id = "bravo-interrupted";
    b.send(id, "page.press", press).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while fleet.host("bravo").effects().get(id) != Some(&1) {
        assert!(Instant::now() < deadline, "the press never applied");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    fleet.host_mut("bravo").kill9();

    // Alpha declares it INTERRUPTED after bravo's lease; alpha's console lists it as blocked,
    // and alpha's run.status counts it.
    let screen = console.wait_for("bravo's interrupted receipt blocked", |t| {
        t.contains("Blocked outcomes 1 ") && t.contains("INTERRUPTED")
    });
    assert!(screen.contains(&task[..8]), "its task is named:\n{screen}");
    let unsettled = fleet.host("alpha").status().await["receipts"]["unsettled"].clone();
    assert_eq!(unsettled, 1, "run.status counts what the pane shows");

    // Acknowledged from alpha's console, it leaves the pane and the count.
    console.press("\t\tA");
    console.shows("Acknowledge");
    console.press("checked the shop: no order\r");
    console.press("y");
    console.wait_for("the outcome settled", |t| {
        t.contains("Blocked outcomes 0 ") && t.contains("acknowledged: request")
    });
    let unsettled = fleet.host("alpha").status().await["receipts"]["unsettled"].clone();
    assert_eq!(unsettled, 0);
}
