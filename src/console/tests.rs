//! Key flows through `update`, and snapshots of what they draw.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use ratatui::Terminal;
use serde_json::{json, Value};

use super::app::{Act, Action, App, ConfirmStage, Detail, Effect, Link, Mode, OpError, Pane};
use super::update::update;

mod hosts;
mod keys;
mod operator;
use keys::{changed, settle, typed_filter};

/// 2026-11-30T02:00:00Z: every fixture's "now".
const NOW: i64 = 1_795_996_800_000;

fn ts(seconds_ago: i64) -> String {
    crate::protocol::format_millis(NOW - seconds_ago * 1000)
}

fn key(c: char) -> Action {
    Action::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}

fn code(k: KeyCode) -> Action {
    Action::Key(KeyEvent::new(k, KeyModifiers::NONE))
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        assert_eq!(update(app, key(c)), None, "typing {c:?} must not act");
    }
}

fn id(n: u64) -> String {
    format!("{n:08x}-0000-4000-8000-{n:012x}")
}

fn snapshot_json(used: u64, capacity: u64, pending: bool) -> Value {
    let mut pend = vec![];
    if pending {
        pend.push(json!({
            "taskId": "7a1c9e00-1111-4000-8000-000000000001", "title": "agent 1 order 4", "taskState": "blocked",
            "requestId": id(3), "method": "page.press",
            "params": {"taskId": "7a1c9e00-1111-4000-8000-000000000001", "key": "Enter", "target": "#title",
                       "expect": {"target": "#status", "contains": "Saved"}},
            "expect": {"target": "#status", "contains": "Saved"}, "since": ts(42)
        }));
    }
    json!({
        "runId": "5f3e2d1c-aaaa-4000-8000-000000000000", "startedAt": ts(3723), "seq": 10,
        "receipts": {"used": used, "capacity": capacity, "running": 1, "tombstones": 4, "tombstoneCapacity": 1000000},
        "counters": {"executions": used, "joins": 2, "replays": 9, "rejectedReused": 1, "rejectedCapacity": 3,
                     "rejectedCleared": 0, "rejectedBlocked": 2},
        "tasks": [
            {"taskId": "7a1c9e00-1111-4000-8000-000000000001", "title": "agent 1 order 4", "state": if pending {"blocked"} else {"running"}, "createdAt": ts(60), "updatedAt": ts(42)},
            {"taskId": "9b2d0f00-2222-4000-8000-000000000002", "title": "agent 2 order 7", "state": "running", "createdAt": ts(20), "updatedAt": ts(3)},
            {"taskId": "c3e4f500-3333-4000-8000-000000000003", "title": "agent 0 order 2", "state": "finished", "createdAt": ts(200), "updatedAt": ts(150)}
        ],
        "pending": pend,
        "executor": {"kind": "fixture", "mutations": 12}
    })
}

fn receipt(
    n: u64,
    method: &str,
    state: &str,
    ok: Option<bool>,
    code: Option<&str>,
    age: i64,
) -> Value {
    let mut r = json!({
        "requestId": id(n), "method": method, "taskId": "9b2d0f00-2222-4000-8000-000000000002",
        "state": state, "firstSeenAt": ts(age), "joins": n % 3, "replays": n % 2,
        "clearable": state == "completed" && code != Some("OUTCOME_UNCERTAIN")
    });
    if let Some(ok) = ok {
        r["ok"] = json!(ok);
        r["completedAt"] = json!(ts(age - 1));
    }
    if let Some(c) = code {
        r["code"] = json!(c);
    }
    if state == "running" {
        r["refusal"] = json!("running");
    } else if code == Some("OUTCOME_UNCERTAIN") {
        r["refusal"] = json!("unverified_outcome");
    }
    r
}

fn page(total: u64, offset: u64, rows: u64) -> Value {
    let items: Vec<Value> = (offset..(offset + rows).min(total))
        .map(|i| match i % 5 {
            0 => receipt(i, "page.fill", "completed", Some(true), None, 10 + i as i64),
            1 => receipt(
                i,
                "task.start",
                "completed",
                Some(true),
                None,
                10 + i as i64,
            ),
            2 => receipt(i, "page.press", "running", None, None, 10 + i as i64),
            3 => receipt(
                i,
                "page.press",
                "completed",
                Some(false),
                Some("OUTCOME_UNCERTAIN"),
                10 + i as i64,
            ),
            _ => receipt(
                i,
                "page.click",
                "completed",
                Some(false),
                Some("ACTION_FAILED"),
                10 + i as i64,
            ),
        })
        .collect();
    json!({"total": total, "items": items})
}

/// A connected console showing a host with `total` receipts in a `cols`×`rows` terminal.
fn connected(cols: u16, rows: u16, used: u64, capacity: u64, total: u64, pending: bool) -> App {
    let mut app = App::new("/tmp/polaris-demo", NOW);
    update(&mut app, Action::Resize(cols, rows));
    assert_eq!(update(&mut app, Action::Connected), Some(Effect::Refresh));
    let fetch = update(
        &mut app,
        Action::Snapshot(snapshot_json(used, capacity, pending)),
    );
    let Some(Effect::FetchPage {
        offset,
        params,
        seq,
    }) = fetch
    else {
        panic!("a snapshot asks for the page: {fetch:?}")
    };
    assert_eq!(params["limit"], json!(app.visible_rows));
    let reply = page(total, offset, u64::from(app.visible_rows));
    assert_eq!(
        update(
            &mut app,
            Action::Page {
                offset,
                seq,
                reply: Ok(reply)
            }
        ),
        None
    );
    app
}

fn draw(app: &App, cols: u16, rows: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(cols, rows)).expect("a test terminal");
    terminal
        .draw(|f| f.render_widget(app, f.area()))
        .expect("drawing");
    terminal
}

fn screen(app: &App, cols: u16, rows: u16) -> String {
    draw(app, cols, rows).backend().to_string()
}

fn unknown_err() -> OpError {
    OpError {
        code: "BRIDGE_DISCONNECTED".into(),
        message: "the connection broke".into(),
        unknown: true,
    }
}

fn prepared_reply() -> Value {
    json!({
        "token": "tok-1", "expiresAt": ts(-300),
        "clearable": [
            {"requestId": id(0), "method": "page.fill", "taskId": "9b2d0f00-2222-4000-8000-000000000002", "ok": true,
             "reply": {"ok": true, "result": {}}, "joins": 0, "replays": 0, "completedAt": ts(9)},
            {"requestId": id(4), "method": "page.click", "taskId": "9b2d0f00-2222-4000-8000-000000000002", "ok": false,
             "code": "ACTION_FAILED", "reply": {"ok": false}, "joins": 1, "replays": 0, "completedAt": ts(13)}
        ],
        "refused": [{"requestId": id(3), "reason": "unverified_outcome"}, {"requestId": id(2), "reason": "running"}]
    })
}

// ---- key flows -------------------------------------------------------------------------------

#[test]
fn snapshot_empty_host() {
    let app = connected(100, 30, 0, 60, 0, false);
    insta::assert_snapshot!(screen(&app, 100, 30));
}

#[test]
fn snapshot_busy_host() {
    let mut app = connected(120, 34, 48, 60, 48, true);
    // The same per-second activity as before coalescing, as counter totals per second.
    let (mut seq, mut totals) = (10, [48u64, 9, 6]);
    for s in 0..40 {
        update(&mut app, Action::Tick(NOW + s * 1000));
        for (i, total) in totals.iter_mut().enumerate() {
            *total += (s as u64 * (i as u64 + 1)) % 7;
        }
        update(
            &mut app,
            changed(seq + 1, seq + 10, totals[0], totals[1], totals[2]),
        );
        seq += 10;
    }
    update(&mut app, Action::Tick(NOW + 40_000));
    app.now = NOW;
    update(&mut app, key(' '));
    insta::assert_snapshot!(screen(&app, 120, 34));
}

#[test]
fn snapshot_gauge_at_0_50_and_100_percent() {
    for (used, name) in [(0, "gauge_0"), (30, "gauge_50"), (60, "gauge_100")] {
        let app = connected(80, 24, used, 60, used, false);
        let terminal = draw(&app, 80, 24);
        let lines: Vec<String> = terminal
            .backend()
            .to_string()
            .lines()
            .skip(2)
            .take(5)
            .map(str::to_owned)
            .collect();
        insta::assert_snapshot!(name, lines.join("\n"));
    }
}

#[test]
fn the_gauge_changes_colour_at_80_and_95_percent_and_has_none_under_no_color() {
    let gauge_colour = |used: u64, color: bool| {
        let mut app = connected(80, 24, used, 100, used, false);
        app.color = color;
        let t = draw(&app, 80, 24);
        t.backend().buffer()[(1, 3)].fg
    };
    assert_eq!(gauge_colour(79, true), Color::Green);
    assert_eq!(gauge_colour(80, true), Color::Yellow);
    assert_eq!(gauge_colour(95, true), Color::Red);
    assert_eq!(gauge_colour(95, false), Color::Reset);
}

#[test]
fn a_gauge_over_capacity_is_clamped_not_a_panic() {
    let app = connected(80, 24, 70, 60, 70, false);
    assert!(screen(&app, 80, 24).contains("70/60 receipts 100%"));
}

#[test]
fn snapshot_help() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key('?'));
    insta::assert_snapshot!(screen(&app, 100, 30));
}

#[test]
fn snapshot_detail() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, code(KeyCode::Enter));
    let detail = json!({
        "requestId": id(0), "method": "page.fill", "state": "completed", "ok": true, "firstSeenAt": ts(10),
        "completedAt": ts(9), "joins": 0, "replays": 1, "clearable": true,
        "request": {"method": "page.fill", "params": {"target": "#title", "taskId": "9b2d0f00-2222-4000-8000-000000000002", "value": "item 7"}},
        "reply": {"ok": true, "result": {"target": "#title", "value": "item 7"}}
    });
    update(&mut app, Action::ReceiptDetail(Ok(detail)));
    insta::assert_snapshot!(screen(&app, 100, 30));
}

#[test]
fn a_receipts_network_evidence_is_listed_with_duplicates_first() {
    let mut app = connected(140, 30, 5, 60, 5, false);
    update(&mut app, code(KeyCode::Enter));
    let sent = json!({"method": "POST", "url": "http://shop.example/api/orders", "status": "no response",
                      "sentAt": ts(9), "bodyBytes": 23, "bodySha256": "ab".repeat(32)});
    let detail = json!({
        "requestId": id(0), "method": "page.click", "state": "completed", "ok": false, "firstSeenAt": ts(10),
        "completedAt": ts(9), "joins": 0, "replays": 0, "clearable": false,
        "request": {"method": "page.click", "params": {"target": "#buy", "taskId": "9b2d0f00-2222-4000-8000-000000000002"}},
        "reply": {"ok": false, "error": {"code": "OUTCOME_UNCERTAIN", "message": "uncertain", "delivery": "uncertain",
                  "automaticReplay": false, "details": {"evidence": {"requests": [sent, sent],
                  "duplicateSends": [{"method": "POST", "url": "http://shop.example/api/orders", "bodySha256": "ab".repeat(32), "times": 2}],
                  "watching": true}}}}
    });
    update(&mut app, Action::ReceiptDetail(Ok(detail)));
    let text = screen(&app, 140, 30);
    assert!(
        text.contains("network evidence (2 sent, still watched)"),
        "{text}"
    );
    assert!(
        text.contains("DUPLICATE SEND: POST http://shop.example/api/orders sent 2 times"),
        "{text}"
    );
    assert!(
        text.contains("POST http://shop.example/api/orders  no response"),
        "{text}"
    );
}

#[test]
fn snapshot_confirm_dialog() {
    let mut app = connected(100, 30, 60, 60, 60, true);
    keys::mark_all(&mut app, 60);
    update(&mut app, key('c'));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    typed(&mut app, "book full after retry storm");
    update(&mut app, code(KeyCode::Enter));
    insta::assert_snapshot!(screen(&app, 100, 30));
}

#[test]
fn snapshot_disconnected() {
    let mut app = connected(100, 30, 12, 60, 12, true);
    update(
        &mut app,
        Action::Disconnected {
            reason: "the host closed the connection".into(),
            attempts: 3,
        },
    );
    app.now = NOW + 7_000;
    insta::assert_snapshot!(screen(&app, 100, 30));
}

#[test]
fn a_console_that_never_connected_says_so_and_keeps_the_cause_at_80_columns() {
    let mut app = App::new("/tmp/polaris-nowhere", NOW);
    update(&mut app, Action::Resize(80, 24));
    update(
        &mut app,
        Action::Disconnected {
            reason: "no such file".into(),
            attempts: 4,
        },
    );
    app.now = NOW + 3_000;
    let text = screen(&app, 80, 24);
    assert!(
        text.contains("NOT CONNECTED: no host has answered yet (no such file)"),
        "{text}"
    );
    assert!(
        !text.contains("stale"),
        "nothing below was ever read:\n{text}"
    );
}

#[test]
fn snapshot_80x24() {
    let app = connected(80, 24, 45, 60, 45, true);
    insta::assert_snapshot!(screen(&app, 80, 24));
}

/// A notice longer than an 80-column line, as the console says after a failed prepare.
const LONG_NOTICE: &str = "the clear could not be prepared: CLEAR_TOKEN_STALE the book changed between the prepare and the commit; nothing was cleared, so prepare again with c";

#[test]
fn snapshot_80x24_a_long_notice_is_cut_on_its_line_and_whole_on_n() {
    let mut app = connected(80, 24, 45, 60, 45, true);
    app.notice(LONG_NOTICE, true);
    let line = screen(&app, 80, 24);
    assert!(
        line.contains(crate::console::ui::NOTICE_CUT),
        "the cut says how to read the rest:\n{line}"
    );
    insta::assert_snapshot!("notice_cut_80x24", line);
    assert_eq!(update(&mut app, key('n')), None);
    assert!(matches!(app.mode, Mode::Notice(_)));
    let whole = screen(&app, 80, 24);
    insta::assert_snapshot!("notice_whole_80x24", whole);
    // Every line of the sentence, wrapped to the box, is on screen.
    for line in crate::console::overlays::wrap_words(LONG_NOTICE, 74) {
        assert!(whole.contains(&line), "{line:?} is missing:\n{whole}");
    }
    // Any key closes it; the key is not also a command.
    assert_eq!(update(&mut app, key('c')), None);
    assert_eq!(app.mode, Mode::Normal);
}

#[test]
fn the_disconnected_line_is_cut_like_a_notice_and_read_whole_on_n() {
    let mut app = connected(80, 24, 45, 60, 45, false);
    update(
        &mut app,
        Action::Disconnected {
            reason: "connecting to /run/polaris/introspect.sock failed: No such file or directory (os error 2)".into(),
            attempts: 4,
        },
    );
    let line = screen(&app, 80, 24);
    assert!(line.contains(" DISCONNECTED for "), "{line}");
    assert!(line.contains(crate::console::ui::NOTICE_CUT), "{line}");
    update(&mut app, key('n'));
    let Mode::Notice(n) = &app.mode else {
        panic!("n opens the whole line: {:?}", app.mode)
    };
    assert!(n.error && n.text.contains("(os error 2)"), "{}", n.text);
    let whole = screen(&app, 80, 24);
    assert!(whole.contains("(os error 2)"), "{whole}");
}

#[test]
fn notices_wrap_at_spaces_and_cut_only_words_longer_than_a_line() {
    use crate::console::overlays::wrap_words;
    assert_eq!(
        wrap_words("one two three four", 9),
        vec!["one two", "three", "four"]
    );
    assert_eq!(
        wrap_words("abcdefghij xy", 4),
        vec!["abcd", "efgh", "ij", "xy"]
    );
    assert_eq!(wrap_words("", 10), vec![""]);
    assert_eq!(wrap_words("a b", 0), vec!["a", "b"]);
    for width in 1..40 {
        for line in wrap_words(LONG_NOTICE, width) {
            assert!(line.chars().count() <= width, "{line:?} at {width}");
        }
    }
}

#[test]
fn any_terminal_size_draws_without_a_panic_in_every_mode() {
    let mut modes = vec![];
    let mut app = connected(100, 30, 60, 60, 60, true);
    modes.push(app.clone());
    update(&mut app, key('?'));
    modes.push(app.clone());
    update(&mut app, code(KeyCode::Esc));
    app.notice(LONG_NOTICE, true);
    update(&mut app, key('n'));
    modes.push(app.clone());
    update(&mut app, code(KeyCode::Esc));
    update(&mut app, code(KeyCode::Enter));
    update(
        &mut app,
        Action::ReceiptDetail(Ok(json!({"requestId": id(0), "reply": {"ok": true}}))),
    );
    modes.push(app.clone());
    update(&mut app, code(KeyCode::Esc));
    update(&mut app, key('a'));
    update(&mut app, key('c'));
    modes.push(app.clone());
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    modes.push(app.clone());
    update(
        &mut app,
        Action::Disconnected {
            reason: "gone".into(),
            attempts: 1,
        },
    );
    modes.push(app.clone());
    for app in &modes {
        for (cols, rows) in [(1, 1), (5, 3), (20, 6), (40, 12), (79, 23), (300, 100)] {
            let mut sized = app.clone();
            update(&mut sized, Action::Resize(cols, rows));
            draw(&sized, cols, rows);
        }
    }
}

#[test]
fn x_stops_the_blocked_task_only_after_a_reason_and_y_and_sends_it_once() {
    let mut app = connected(100, 30, 5, 60, 5, true);
    update(&mut app, code(KeyCode::Tab));
    update(&mut app, code(KeyCode::Tab));
    assert_eq!(update(&mut app, key('x')), None);
    let Mode::Act { act, .. } = app.mode.clone() else {
        panic!("the stop dialog opens: {:?}", app.mode)
    };
    let task_id = "7a1c9e00-1111-4000-8000-000000000001".to_owned();
    assert_eq!(
        act,
        Act::Stop {
            task_id: task_id.clone()
        }
    );
    assert_eq!(
        update(&mut app, code(KeyCode::Enter)),
        None,
        "no reason yet"
    );
    typed(&mut app, "dropped submit");
    assert_eq!(update(&mut app, code(KeyCode::Enter)), None);
    insta::assert_snapshot!(screen(&app, 100, 30));
    assert_eq!(
        update(&mut app, key('y')),
        Some(Effect::Act {
            act: act.clone(),
            reason: "dropped submit".into()
        })
    );
    assert_eq!(update(&mut app, key('y')), None, "queued, never re-sent");
    let effect = update(
        &mut app,
        Action::Acted {
            act,
            reply: Ok(json!({"taskId": task_id, "state": "stopped"})),
        },
    );
    assert_eq!(effect, Some(Effect::Refresh));
    assert_eq!(app.mode, Mode::Normal);
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .starts_with("stopped: task"));
}

#[test]
fn a_host_without_acknowledge_is_told_cleanly_with_the_way_out() {
    let mut app = connected(100, 30, 5, 60, 5, true);
    update(&mut app, code(KeyCode::Tab));
    update(&mut app, code(KeyCode::Tab));
    update(&mut app, key('A'));
    typed(&mut app, "settled by phone");
    update(&mut app, code(KeyCode::Enter));
    let Some(Effect::Act { act, .. }) = update(&mut app, key('y')) else {
        panic!()
    };
    update(
        &mut app,
        Action::Acted {
            act,
            reply: Err(OpError {
                code: "UNKNOWN_METHOD".into(),
                message: "outcome.acknowledge is not available on this host".into(),
                unknown: false,
            }),
        },
    );
    let notice = app.notice.clone().unwrap();
    assert!(notice.error && notice.text.contains("stop the task instead (x)"));
}

#[test]
fn the_audit_log_narrows_to_the_filter_to_find_a_cleared_id() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key('/'));
    typed_filter(&mut app, "0000000a");
    update(&mut app, code(KeyCode::Enter));
    settle(&mut app, 0);
    assert_eq!(update(&mut app, key('L')), Some(Effect::GetAudit));
    update(
        &mut app,
        Action::Audit(Ok(json!({"entries": [{
            "at": ts(60), "operator": "ops", "reason": "book full", "runId": "5f3e2d1c",
            "cleared": [
                {"requestId": id(10), "method": "page.fill", "ok": true},
                {"requestId": id(11), "method": "page.click", "ok": false, "code": "ACTION_FAILED"}
            ]
        }]}))),
    );
    let text = screen(&app, 100, 30);
    assert!(
        text.contains("book full") && text.contains(&id(10)),
        "{text}"
    );
    assert!(!text.contains(&id(11)), "only the matching ID:\n{text}");
}

#[test]
fn a_new_run_is_announced_and_its_sparklines_start_again() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    app.activity.executions.push_back(1208);
    let mut next = snapshot_json(0, 60, false);
    next["runId"] = json!("77777777-0000-4000-8000-000000000000");
    update(&mut app, Action::Snapshot(next.clone()));
    let notice = app.notice.clone().unwrap();
    assert_eq!(
        notice.text,
        "new run 77777777-0000-4000-8000-000000000000 — receipts forgotten (--no-journal)"
    );
    assert!(app.activity.executions.iter().all(|n| *n == 0));
    next["journal"] = json!({"path": "/j", "bytes": 10, "records": 1, "lastFsyncMs": 0.2, "fsyncsPerSecond": 5.0});
    next["runId"] = json!("88888888-0000-4000-8000-000000000000");
    update(&mut app, Action::Snapshot(next));
    assert!(app
        .notice
        .clone()
        .unwrap()
        .text
        .ends_with("0 receipts kept by the journal"));
    // A notice that is not a problem goes after a while.
    update(&mut app, Action::Tick(NOW + 31_000));
    assert_eq!(app.notice, None);
}

#[test]
fn a_full_book_says_what_to_do_next_and_every_refusal_is_counted() {
    let app = connected(100, 30, 60, 60, 60, false);
    let text = screen(&app, 100, 30);
    assert!(
        text.contains("BOOK FULL: new IDs refused. D marks"),
        "{text}"
    );
    assert!(text.contains("refused 6: full 3  reused 1"), "{text}");
    assert!(text.contains("cleared ID 0  to blocked task 2"), "{text}");
    assert!(text.contains("max 1/s, one scale"), "{text}");
}
