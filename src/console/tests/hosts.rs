//! The fleet's hosts pane (SPEC §13): shown only for a host of a fleet, every host run with
//! its state, lease, running receipts and blocked tasks; `H` and Tab focus it; it is re-read
//! every second even when the host is quiet.

use crossterm::event::KeyCode;
use serde_json::{json, Value};

use super::*;

/// A fleet host's snapshot: this host `web-2` (epoch 7), `web-1` alive with blocked tasks,
/// `web-3` dead (its lease lapsed 42 s ago), an earlier run of `web-2` that left.
fn fleet_snapshot() -> Value {
    let mut s = snapshot_json(12, 60, true);
    s["ledger"] = json!({
        "epoch": 7, "hostId": "web-2", "leaseLeftMs": 9100,
        "receipts": {"capacity": 60, "running": 3, "tombstoneCapacity": 1000000, "tombstones": 4,
                     "used": 31, "readAt": ts(1)},
        "hosts": [
            {"epoch": 7, "hostId": "web-2", "leaseLeftMs": 9100, "running": 1, "blocked": 1,
             "runId": "5f3e2d1c-aaaa-4000-8000-000000000000", "state": "alive"},
            {"epoch": 6, "hostId": "web-3", "leaseLeftMs": -42000, "running": 0, "blocked": 2,
             "runId": "6a6a6a6a-bbbb-4000-8000-000000000000", "state": "dead"},
            {"epoch": 5, "hostId": "web-1-with-a-long-name.eu-west", "leaseLeftMs": 7400,
             "running": 2, "blocked": 3, "runId": "7b7b7b7b-cccc-4000-8000-000000000000",
             "state": "alive"},
            {"epoch": 2, "hostId": "web-2", "leaseLeftMs": -3_600_000, "running": 0,
             "blocked": 0, "runId": "8c8c8c8c-dddd-4000-8000-000000000000", "state": "left"}
        ]
    });
    s
}

/// A console connected to a fleet host, in a `cols`×`rows` terminal.
fn fleet_console(cols: u16, rows: u16) -> App {
    let mut app = connected(cols, rows, 12, 60, 12, true);
    let fetch = update(&mut app, Action::Snapshot(fleet_snapshot()));
    assert!(matches!(fetch, Some(Effect::FetchPage { .. })), "{fetch:?}");
    app.page_in_flight = false;
    app
}

#[test]
fn snapshot_hosts_pane_80x24() {
    let app = fleet_console(80, 24);
    insta::assert_snapshot!(screen(&app, 80, 24));
}

#[test]
fn snapshot_hosts_pane_wide() {
    let mut app = fleet_console(160, 40);
    update(&mut app, key('H'));
    insta::assert_snapshot!(screen(&app, 160, 40));
}

#[test]
fn every_host_shows_with_its_numbers_and_the_dead_one_in_red() {
    let app = fleet_console(80, 24);
    let terminal = draw(&app, 80, 24);
    let text = terminal.backend().to_string();
    assert!(text.contains("Hosts 2 alive · 1 DEAD · 1 left"), "{text}");
    // Alive first (by name), then dead, then left.
    let order: Vec<i64> = app.fleet_hosts().iter().map(|h| h.epoch).collect();
    assert_eq!(order, [5, 7, 6, 2]);
    assert!(text.contains("*web-2"), "this host's run is marked: {text}");
    assert!(
        text.contains("-42s"),
        "a dead host's lease says how long ago it lapsed"
    );
    // The dead host's state cell is red (bold), the alive ones green.
    let buf = terminal.backend().buffer().clone();
    let cell_of = |word: &str| {
        let area = buf.area;
        for y in 0..area.height {
            let line: String = (0..area.width).map(|x| buf[(x, y)].symbol()).collect();
            if let Some(col) = line.find(word) {
                let x = line[..col].chars().count() as u16;
                return buf[(x, y)].clone();
            }
        }
        panic!("{word:?} is not on screen:\n{text}");
    };
    assert_eq!(cell_of("dead ").fg, Color::Red);
    assert_eq!(cell_of("alive 7").fg, Color::Green);
}

#[test]
fn no_hosts_pane_without_a_fleet_and_h_says_why() {
    let mut app = connected(80, 24, 12, 60, 12, true);
    assert!(!screen(&app, 80, 24).contains("Hosts"));
    assert_eq!(update(&mut app, key('H')), None);
    assert_eq!(app.focus, Pane::Receipts);
    assert!(app
        .notice
        .as_ref()
        .is_some_and(|n| n.text.contains("not in a fleet")));
    // Tab skips the pane that is not there.
    for expected in [Pane::Tasks, Pane::Blocked, Pane::Receipts] {
        update(&mut app, code(KeyCode::Tab));
        assert_eq!(app.focus, expected);
    }
}

#[test]
fn h_and_tab_focus_the_hosts_pane_and_enter_tells_a_host_whole() {
    let mut app = fleet_console(80, 24);
    for expected in [Pane::Tasks, Pane::Blocked, Pane::Hosts, Pane::Receipts] {
        update(&mut app, code(KeyCode::Tab));
        assert_eq!(app.focus, expected);
    }
    assert_eq!(update(&mut app, key('H')), None);
    assert_eq!(app.focus, Pane::Hosts);
    update(&mut app, key('j'));
    update(&mut app, key('j'));
    assert_eq!(app.host_selected, 2);
    assert_eq!(update(&mut app, code(KeyCode::Enter)), None);
    let said = app.notice.clone().expect("a notice").text;
    assert!(
        said.contains("web-3") && said.contains("6a6a6a6a-bbbb") && said.contains("dead"),
        "{said}"
    );
    update(&mut app, code(KeyCode::End));
    assert_eq!(app.host_selected, 3);
    // A snapshot with fewer hosts keeps the selection inside the list.
    let mut fewer = fleet_snapshot();
    fewer["ledger"]["hosts"].as_array_mut().unwrap().truncate(1);
    fewer["seq"] = json!(11);
    update(&mut app, Action::Snapshot(fewer));
    assert_eq!(app.host_selected, 0);
}

#[test]
fn a_quiet_fleet_host_is_read_again_every_second_and_a_single_host_is_not() {
    let mut app = fleet_console(80, 24);
    app.last_refresh = NOW;
    assert_eq!(update(&mut app, Action::Tick(NOW + 500)), None);
    assert_eq!(
        update(&mut app, Action::Tick(NOW + 1_000)),
        Some(Effect::Refresh)
    );
    let mut single = connected(80, 24, 12, 60, 12, true);
    single.last_refresh = NOW;
    assert_eq!(update(&mut single, Action::Tick(NOW + 5_000)), None);
}

#[test]
fn a_click_in_the_hosts_pane_selects_that_host() {
    let mut app = fleet_console(80, 24);
    let hosts = super::super::layout::areas(ratatui::layout::Rect::new(0, 0, 80, 24), true)
        .hosts
        .expect("a fleet host has the pane");
    let click = crossterm::event::MouseEvent {
        kind: crossterm::event::MouseEventKind::Down(crossterm::event::MouseButton::Left),
        column: hosts.x + 3,
        row: hosts.y + 3,
        modifiers: KeyModifiers::NONE,
    };
    update(&mut app, Action::Mouse(click));
    assert_eq!(app.focus, Pane::Hosts);
    assert_eq!(app.host_selected, 1);
}

#[test]
fn lease_text_fits_six_columns() {
    use super::super::text::lease_text;
    for (ms, text) in [
        (9_100, "9.1s"),
        (0, "0.0s"),
        (250_000, "4m10s"),
        (-42_000, "-42s"),
        (-600_000, "-10m"),
        (-7_200_000, "-2h"),
        (-200_000_000, "-2d"),
    ] {
        assert_eq!(lease_text(ms), text);
    }
}
