//! The console's hosts pane through the real binary in a pseudo-terminal (80×24), attached to
//! a real fleet host on a private PostgreSQL: both hosts listed, another host's blocked task
//! counted, a host killed with SIGKILL shown dead, `H` and Enter telling it whole.
//!
//! Without PostgreSQL installed this test prints one line and passes, unless
//! `POLARIS_REQUIRE_POSTGRES=1` (as CI sets), when it fails.

mod common;
#[path = "support/console_pty.rs"]
mod console_pty;
#[path = "support/fleet.rs"]
mod fleet;

use common::{receipt, start_task};
use console_pty::Console;
use fleet::Fleet;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_pane_shows_every_host_and_a_dead_one_at_80x24() {
    let Some(mut fleet) = Fleet::start(
        "tests/console_fleet.rs",
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
