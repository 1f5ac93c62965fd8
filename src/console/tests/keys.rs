//! Key flows through `update`: what each key asks of the host, and what the console does
//! with the replies.

use crossterm::event::KeyCode;
use serde_json::{json, Value};

use super::*;

#[test]
fn q_quits_from_the_monitor_and_from_help() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert_eq!(update(&mut app, key('q')), Some(Effect::Quit));
    assert!(app.quit);
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key('?'));
    assert_eq!(update(&mut app, key('q')), Some(Effect::Quit));
    let mut app = connected(100, 30, 5, 60, 5, false);
    let ctrl_c = Action::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert_eq!(update(&mut app, ctrl_c), Some(Effect::Quit));
}

#[test]
fn help_opens_and_any_key_closes_it() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert_eq!(update(&mut app, key('?')), None);
    assert_eq!(app.mode, Mode::Help);
    assert_eq!(update(&mut app, key('x')), None);
    assert_eq!(app.mode, Mode::Normal);
}

#[test]
fn moving_past_the_window_asks_the_host_for_the_next_page_only() {
    let mut app = connected(100, 30, 1000, 1000, 1000, false);
    let rows = u64::from(app.visible_rows);
    for _ in 0..rows - 1 {
        assert_eq!(
            update(&mut app, code(KeyCode::Down)),
            None,
            "inside the window nothing is fetched"
        );
    }
    let down = update(&mut app, code(KeyCode::Down));
    let Some(Effect::FetchPage { offset, params, .. }) = down.clone() else {
        panic!()
    };
    assert_eq!(offset, 1);
    assert_eq!(
        params,
        json!({"offset": 1, "limit": rows, "sort": "newest"})
    );
    // Keys typed before the row under the selection is read wait for it.
    assert_eq!(update(&mut app, code(KeyCode::End)), None);
    assert_eq!(app.queued.len(), 1);
    assert_eq!(answer(&mut app, down, 1000), None);
    let Some(Effect::FetchPage { offset, .. }) = app.outbox.pop() else {
        panic!("the queued End reads the last page")
    };
    assert_eq!(offset, 1000 - rows);
    assert_eq!(app.selected, 999);
    let last = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset,
            seq: last,
            reply: Ok(page(1000, offset, rows)),
        },
    );
    let Some(Effect::FetchPage { offset, .. }) = update(&mut app, key('g')) else {
        panic!()
    };
    assert_eq!((offset, app.selected), (0, 0));
    let seq = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset,
            seq,
            reply: Ok(page(1000, 0, rows)),
        },
    );
    let Some(Effect::FetchPage { offset, .. }) = update(&mut app, code(KeyCode::PageDown)) else {
        panic!()
    };
    assert_eq!((offset, app.selected), (1, rows));
}

/// Answers a page read with `total` receipts.
pub(super) fn answer(app: &mut App, effect: Option<Effect>, total: u64) -> Option<Effect> {
    let Some(Effect::FetchPage {
        offset,
        seq,
        params,
    }) = effect
    else {
        panic!("a page read: {effect:?}")
    };
    let limit = params["limit"].as_u64().unwrap();
    let rows = limit.min(total.saturating_sub(offset));
    update(
        app,
        Action::Page {
            offset,
            seq,
            reply: Ok(page(total, offset, rows)),
        },
    )
}

#[test]
fn the_selection_follows_its_receipt_when_new_ones_arrive_and_stale_pages_are_ignored() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key('j'));
    assert_eq!(app.selected_receipt().unwrap().request_id, id(1));
    let mut fresh = page(5, 0, 5);
    let newer = receipt(77, "task.start", "completed", Some(true), None, 0);
    fresh["items"].as_array_mut().unwrap().insert(0, newer);
    fresh["total"] = json!(6);
    let seq = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset: 0,
            seq,
            reply: Ok(fresh),
        },
    );
    assert_eq!(app.selected, 2);
    assert_eq!(app.selected_receipt().unwrap().request_id, id(1));
    // A page for a window the console has already left changes nothing.
    update(
        &mut app,
        Action::Page {
            offset: 3,
            seq: seq - 1,
            reply: Ok(page(6, 3, 3)),
        },
    );
    assert_eq!(
        (
            app.page_offset,
            app.selected_receipt().unwrap().request_id.clone()
        ),
        (0, id(1))
    );
}

#[test]
fn the_selection_finds_its_receipt_when_new_ones_push_it_out_of_the_window() {
    let mut app = connected(100, 30, 50, 1000, 50, false);
    update(&mut app, key('j'));
    update(&mut app, key('j'));
    assert_eq!(app.anchor, Some(id(2)));
    // 500 new receipts: the visible window now holds only new ones.
    let seq = app.page_seq();
    let rows = u64::from(app.visible_rows);
    let newer: Vec<Value> = (0..rows)
        .map(|i| receipt(10_000 + i, "page.fill", "completed", Some(true), None, 0))
        .collect();
    let locate = update(
        &mut app,
        Action::Page {
            offset: 0,
            seq,
            reply: Ok(json!({"total": 550, "items": newer})),
        },
    );
    assert_eq!(app.selected_receipt(), None, "no key acts on an unseen row");
    let Some(Effect::FetchPage {
        offset,
        params,
        seq,
    }) = locate
    else {
        panic!("the console looks for its receipt: {locate:?}")
    };
    assert_eq!((offset, params["limit"].clone()), (0, json!(1000)));
    // The host's wide window: 500 new ones, then the old 50.
    let mut items: Vec<Value> = (0..500)
        .map(|i| receipt(20_000 + i, "page.fill", "completed", Some(true), None, 0))
        .collect();
    items.extend(page(50, 0, 50)["items"].as_array().unwrap().iter().cloned());
    let visible = update(
        &mut app,
        Action::Page {
            offset,
            seq,
            reply: Ok(json!({"total": 550, "items": items})),
        },
    );
    assert_eq!(app.selected, 502);
    let Some(Effect::FetchPage { offset, .. }) = visible.clone() else {
        panic!("then the window around it: {visible:?}")
    };
    assert!(offset <= 502 && 502 < offset + rows);
    let Some(Effect::FetchPage { seq, .. }) = visible else {
        unreachable!()
    };
    let window: Vec<Value> = (offset..offset + rows)
        .map(|i| {
            if i >= 500 {
                receipt(i - 500, "page.fill", "completed", Some(true), None, 0)
            } else {
                receipt(20_000 + i, "page.fill", "completed", Some(true), None, 0)
            }
        })
        .collect();
    update(
        &mut app,
        Action::Page {
            offset,
            seq,
            reply: Ok(json!({"total": 550, "items": window})),
        },
    );
    assert_eq!(app.selected_receipt().unwrap().request_id, id(2));
}

#[test]
fn a_resize_changes_the_page_size_asked_for() {
    let mut app = connected(100, 30, 5, 60, 500, false);
    let before = app.visible_rows;
    let Some(Effect::FetchPage { params, .. }) = update(&mut app, Action::Resize(100, 50)) else {
        panic!()
    };
    assert_eq!(
        params["limit"],
        json!(crate::console::layout::table_rows(100, 50))
    );
    assert!(
        app.visible_rows > before,
        "a taller terminal shows more receipts"
    );
    assert_eq!(
        update(&mut app, Action::Resize(100, 50)),
        None,
        "same size, nothing to fetch"
    );
}

#[test]
fn filter_types_a_search_and_esc_drops_it() {
    let mut app = connected(100, 30, 5, 60, 50, false);
    update(&mut app, key('/'));
    assert_eq!(app.mode, Mode::Filter);
    let Some(Effect::FetchPage { params, .. }) = update(&mut app, key('p')) else {
        panic!()
    };
    assert_eq!(params["search"], json!("p"));
    update(&mut app, key('r'));
    let Some(Effect::FetchPage { params, .. }) = update(&mut app, code(KeyCode::Backspace)) else {
        panic!()
    };
    assert_eq!(params["search"], json!("p"));
    assert_eq!(
        update(&mut app, code(KeyCode::Enter)),
        None,
        "applied as typed"
    );
    assert_eq!((app.mode.clone(), app.filter.as_str()), (Mode::Normal, "p"));
    settle(&mut app, 5);
    let Some(Effect::FetchPage { params, .. }) = update(&mut app, code(KeyCode::Esc)) else {
        panic!()
    };
    assert_eq!(params.get("search"), None);
    assert_eq!(app.filter, "");
}

#[test]
fn esc_on_the_filter_restores_the_view_before_it_and_keeps_the_marks() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    update(&mut app, key('/'));
    typed_filter(&mut app, "fill");
    settle(&mut app, 5);
    update(&mut app, code(KeyCode::Enter));
    update(&mut app, key('/'));
    typed_filter(&mut app, "x");
    let Some(Effect::FetchPage { params, .. }) = update(&mut app, code(KeyCode::Esc)) else {
        panic!()
    };
    assert_eq!(params["search"], json!("fill"), "the view before this /");
    assert_eq!(app.marked.len(), 1, "the marks stay");
}

/// Answers the latest page read with a window of `total` receipts.
pub(super) fn settle(app: &mut App, total: u64) -> Option<Effect> {
    let rows = u64::from(app.visible_rows).min(total.saturating_sub(app.scroll));
    let (offset, seq) = (app.scroll, app.page_seq());
    update(
        app,
        Action::Page {
            offset,
            seq,
            reply: Ok(page(total, offset, rows)),
        },
    )
}

#[test]
fn s_cycles_the_sort_order() {
    let mut app = connected(100, 30, 5, 60, 50, false);
    let Some(Effect::FetchPage { params, .. }) = update(&mut app, key('s')) else {
        panic!()
    };
    assert_eq!(params["sort"], json!("oldest"));
    for expected in ["state", "method", "task", "newest"] {
        settle(&mut app, 50);
        let Some(Effect::FetchPage { params, .. }) = update(&mut app, key('s')) else {
            panic!()
        };
        assert_eq!(params["sort"], json!(expected));
    }
}

#[test]
fn shift_s_reverses_the_sort_and_f_undoes_it() {
    let mut app = connected(100, 30, 5, 60, 50, false);
    let Some(Effect::FetchPage { params, .. }) = update(&mut app, key('S')) else {
        panic!()
    };
    assert_eq!(params["sort"], json!("newest"));
    assert_eq!(params["reverse"], json!(true));
    assert!(!app.follow, "the newest receipt is no longer on top");
    settle(&mut app, 50);
    let Some(Effect::FetchPage { params, .. }) = update(&mut app, key('s')) else {
        panic!()
    };
    assert_eq!(params["sort"], json!("oldest"));
    assert_eq!(params["reverse"], json!(true), "s keeps the direction");
    settle(&mut app, 50);
    update(&mut app, key('f'));
    assert!(app.follow);
    assert!(!app.reverse);
    assert_eq!(app.page_params().get("reverse"), None);
}

#[test]
fn enter_opens_a_receipt_and_esc_closes_it() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert_eq!(
        update(&mut app, code(KeyCode::Enter)),
        Some(Effect::GetReceipt(id(0)))
    );
    assert_eq!(app.mode, Mode::Detail(Detail::Loading(id(0))));
    update(
        &mut app,
        Action::ReceiptDetail(Ok(json!({"requestId": id(0)}))),
    );
    assert!(matches!(app.mode, Mode::Detail(Detail::Receipt(_))));
    update(&mut app, code(KeyCode::Esc));
    assert_eq!(app.mode, Mode::Normal);
}

#[test]
fn enter_on_a_task_opens_its_history() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, code(KeyCode::Tab));
    assert_eq!(app.focus, Pane::Tasks);
    let task = app.running_tasks()[0].task_id.clone();
    assert_eq!(
        update(&mut app, code(KeyCode::Enter)),
        Some(Effect::GetTaskHistory(task.clone()))
    );
    update(
        &mut app,
        Action::TaskHistory {
            task_id: task,
            reply: Ok(page(5, 0, 5)),
        },
    );
    let Mode::Detail(Detail::Task { history, .. }) = &app.mode else {
        panic!("{:?}", app.mode)
    };
    assert_eq!(history.len(), 5);
}

#[test]
fn space_marks_clearable_receipts_only() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    assert!(app.marked.contains(&id(0)));
    assert_eq!(app.selected, 1, "marking moves on");
    update(&mut app, key(' '));
    assert!(app.marked.contains(&id(1)));
    update(&mut app, key(' '));
    assert!(
        !app.marked.contains(&id(2)),
        "a running receipt is not clearable"
    );
    assert!(app.notice.as_ref().unwrap().text.contains("running"));
    update(&mut app, key('k'));
    update(&mut app, key(' '));
    assert!(!app.marked.contains(&id(1)), "space again unmarks");
    update(&mut app, code(KeyCode::Esc));
    assert!(app.marked.is_empty());
}

#[test]
fn clear_without_marks_says_what_to_do() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert_eq!(update(&mut app, key('c')), None);
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("mark receipts first"));
}

#[test]
fn the_confirm_dialog_commits_only_on_y_after_a_reason() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    update(&mut app, key('j'));
    update(&mut app, key('j'));
    update(&mut app, key('j'));
    update(&mut app, key(' '));
    assert_eq!(
        update(&mut app, key('c')),
        Some(Effect::Prepare(json!({"requestIds": [id(0), id(4)]})))
    );
    assert_eq!(app.mode, Mode::Preparing);
    assert_eq!(
        update(&mut app, Action::Prepared(Ok(prepared_reply()))),
        None
    );
    // Enter with no reason does not go on.
    assert_eq!(update(&mut app, code(KeyCode::Enter)), None);
    assert!(matches!(
        &app.mode,
        Mode::Confirm {
            stage: ConfirmStage::Reason,
            ..
        }
    ));
    // A `y` typed in the reason is text, never a commit.
    typed(&mut app, "yes, book full");
    update(&mut app, code(KeyCode::Enter));
    let Mode::Confirm {
        stage: ConfirmStage::Confirm,
        reason,
        ..
    } = &app.mode
    else {
        panic!("{:?}", app.mode)
    };
    assert_eq!(reason, "yes, book full");
    // Any other key cancels.
    assert_eq!(update(&mut app, key('n')), None);
    assert_eq!(app.mode, Mode::Normal);
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("nothing was cleared"));
    assert_eq!(app.marked.len(), 2, "the marks stay for another try");
    // Again, and this time y.
    update(&mut app, key('c'));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    typed(&mut app, "book full");
    update(&mut app, code(KeyCode::Enter));
    assert_eq!(
        update(&mut app, key('y')),
        Some(Effect::Commit {
            token: "tok-1".into(),
            reason: "book full".into()
        })
    );
    assert!(matches!(
        &app.mode,
        Mode::Confirm {
            stage: ConfirmStage::Committing,
            ..
        }
    ));
    assert_eq!(update(&mut app, key('y')), None, "a second y sends nothing");
    let done = json!({"cleared": 2, "tombstones": 6,
        "receipts": {"used": 3, "capacity": 60, "running": 1, "tombstones": 6, "tombstoneCapacity": 1000000}});
    assert_eq!(
        update(&mut app, Action::Committed(Ok(done))),
        Some(Effect::Refresh)
    );
    assert_eq!(app.mode, Mode::Normal);
    assert_eq!(
        app.notice.as_ref().unwrap().text,
        "cleared 2 receipts; capacity now 3/60 used, 6 tombstones"
    );
    assert!(app.marked.is_empty());
    assert_eq!(app.snapshot.as_ref().unwrap().receipts.used, 3);
}

#[test]
fn the_clear_summary_stays_when_the_selected_receipt_was_cleared() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    assert_eq!(app.selected_receipt().unwrap().request_id, id(1));
    update(&mut app, key('c'));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    typed(&mut app, "book full");
    update(&mut app, code(KeyCode::Enter));
    update(&mut app, key('y'));
    let done = json!({"cleared": 2, "tombstones": 2,
        "receipts": {"used": 3, "capacity": 60, "running": 1, "tombstones": 2, "tombstoneCapacity": 1000000}});
    update(&mut app, Action::Committed(Ok(done)));
    // The refreshed book no longer holds the row under the cursor.
    let without_selected = |offset: u64, limit: u64| {
        let mut p = page(5, offset, limit.min(5 - offset));
        p["items"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r["requestId"] != json!(id(1)) && r["requestId"] != json!(id(0)));
        p["total"] = json!(3);
        p
    };
    let mut effect = update(&mut app, Action::Snapshot(snapshot_json(3, 60, false)));
    while let Some(Effect::FetchPage {
        offset,
        seq,
        params,
    }) = effect
    {
        let limit = params["limit"].as_u64().unwrap();
        effect = update(
            &mut app,
            Action::Page {
                offset,
                seq,
                reply: Ok(without_selected(offset, limit)),
            },
        );
    }
    assert_eq!(
        app.notice.as_ref().unwrap().text,
        "cleared 2 receipts; capacity now 3/60 used, 2 tombstones",
        "the summary is not replaced by where the cursor went"
    );
}

#[test]
fn esc_in_the_dialog_cancels_and_a_refused_only_clear_cannot_be_confirmed() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    update(&mut app, key('c'));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    assert_eq!(update(&mut app, code(KeyCode::Esc)), None);
    assert_eq!(app.mode, Mode::Normal);
    update(&mut app, key('c'));
    update(
        &mut app,
        Action::Prepared(Ok(
            json!({"token": "t", "expiresAt": ts(-300), "clearable": [],
        "refused": [{"requestId": id(0), "reason": "already_cleared"}]}),
        )),
    );
    typed(&mut app, "x");
    assert_eq!(update(&mut app, code(KeyCode::Enter)), None);
    assert_eq!(app.mode, Mode::Normal);
}

#[test]
fn a_failed_prepare_or_commit_says_nothing_was_cleared() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    update(&mut app, key('c'));
    let stale = OpError {
        code: "CLEAR_TOKEN_STALE".into(),
        message: "a receipt changed".into(),
        unknown: false,
    };
    update(&mut app, Action::Prepared(Err(stale.clone())));
    assert_eq!(app.mode, Mode::Normal);
    update(&mut app, key('c'));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    typed(&mut app, "r");
    update(&mut app, code(KeyCode::Enter));
    update(&mut app, key('y'));
    assert_eq!(
        update(&mut app, Action::Committed(Err(stale))),
        Some(Effect::Refresh)
    );
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .starts_with("nothing was cleared: CLEAR_TOKEN_STALE"));
}

#[test]
fn a_commit_cut_off_is_outcome_unknown_and_is_never_sent_again() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    mark_all(&mut app, 5);
    let Some(Effect::Prepare(params)) = update(&mut app, key('c')) else {
        panic!()
    };
    assert_eq!(params, json!({"requestIds": [id(0), id(1), id(4)]}));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    typed(&mut app, "full");
    update(&mut app, code(KeyCode::Enter));
    assert!(matches!(
        update(&mut app, key('y')),
        Some(Effect::Commit { .. })
    ));
    // The connection drops while the commit is out.
    assert_eq!(
        update(
            &mut app,
            Action::Disconnected {
                reason: "gone".into(),
                attempts: 1
            }
        ),
        None
    );
    assert_eq!(app.mode, Mode::Normal);
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("outcome unknown"));
    // The late error of that call, reconnection and ticks never bring the commit back.
    assert_eq!(
        update(&mut app, Action::Committed(Err(unknown_err()))),
        None
    );
    assert_eq!(update(&mut app, Action::Connected), Some(Effect::Refresh));
    for t in 1..5 {
        assert_ne!(
            update(&mut app, Action::Tick(NOW + t * 250))
                .map(|e| matches!(e, Effect::Commit { .. })),
            Some(true)
        );
    }
}

#[test]
fn a_commit_that_times_out_while_connected_is_outcome_unknown() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    update(&mut app, key('c'));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    typed(&mut app, "full");
    update(&mut app, code(KeyCode::Enter));
    update(&mut app, key('y'));
    assert_eq!(
        update(&mut app, Action::Committed(Err(unknown_err()))),
        Some(Effect::Refresh)
    );
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .starts_with("clear outcome unknown"));
}

/// Presses `a` and answers its read with the first `total` receipts of [`page`]: marks the
/// clearable ones.
pub(super) fn mark_all(app: &mut App, total: u64) -> Value {
    let effect = update(app, key('a'));
    let Some(Effect::ReadMatching(params)) = effect else {
        panic!("a reads what it marks: {effect:?}")
    };
    update(app, Action::Matched(Ok(page(total, 0, total))));
    params
}

#[test]
fn a_marks_the_set_as_it_is_when_pressed_and_space_takes_rows_out() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    let params = mark_all(&mut app, 5);
    assert_eq!(params["state"], "clearable");
    // Rows 0, 1 and 4 are clearable (2 runs, 3 is uncertain).
    assert_eq!(
        app.marked.iter().cloned().collect::<Vec<_>>(),
        vec![id(0), id(1), id(4)]
    );
    assert!(app.notice.as_ref().unwrap().text.contains("a fixed set"));
    // New receipts arrive: the marks stay the same set.
    let mut fresh = page(5, 0, 5);
    let newer = receipt(77, "page.fill", "completed", Some(true), None, 0);
    fresh["items"].as_array_mut().unwrap().insert(0, newer);
    fresh["total"] = json!(6);
    let seq = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset: 0,
            seq,
            reply: Ok(fresh),
        },
    );
    assert_eq!(app.marked.len(), 3);
    // Space on the selected marked row takes it out; c prepares exactly the rest, by ID.
    update(&mut app, key('j'));
    assert_eq!(app.selected_receipt().unwrap().request_id, id(0));
    update(&mut app, key(' '));
    assert_eq!(
        update(&mut app, key('c')),
        Some(Effect::Prepare(json!({"requestIds": [id(1), id(4)]})))
    );
}

#[test]
fn mark_all_follows_the_filter() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key('/'));
    typed_filter(&mut app, "fill");
    update(&mut app, code(KeyCode::Enter));
    settle(&mut app, 5);
    let params = mark_all(&mut app, 5);
    assert_eq!(params["search"], "fill");
    assert_eq!(params["state"], "clearable");
}

pub(super) fn typed_filter(app: &mut App, text: &str) {
    for c in text.chars() {
        update(app, key(c));
    }
}

#[test]
fn v_verifies_the_blocked_outcome_once_and_shows_the_result_in_place() {
    let mut app = connected(100, 30, 5, 60, 5, true);
    let task = "7a1c9e00-1111-4000-8000-000000000001".to_owned();
    update(&mut app, code(KeyCode::Tab));
    update(&mut app, code(KeyCode::Tab));
    assert_eq!(app.focus, Pane::Blocked);
    assert_eq!(
        update(&mut app, key('v')),
        Some(Effect::Verify(task.clone()))
    );
    assert_eq!(
        update(&mut app, key('v')),
        None,
        "one verification at a time per task"
    );
    assert_eq!(app.verify_results[&task], "verifying…");
    let reply = json!({"taskId": task, "outcome": "not_observed", "state": "blocked"});
    update(
        &mut app,
        Action::Verified {
            task_id: task.clone(),
            reply: Ok(reply),
        },
    );
    assert_eq!(app.verify_results[&task], "not_observed");
    assert!(screen(&app, 100, 30).contains("not_observed"));
    // The host changed: a tick re-reads, at most twice a second.
    assert_eq!(update(&mut app, Action::Tick(NOW + 250)), None);
    assert_eq!(
        update(&mut app, Action::Tick(NOW + 500)),
        Some(Effect::Refresh)
    );
    assert_eq!(update(&mut app, key('v')), Some(Effect::Verify(task)));
}

#[test]
fn v_with_nothing_blocked_says_so() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert_eq!(update(&mut app, key('v')), None);
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("tab to Blocked outcomes"));
}

#[test]
fn v_acts_only_on_the_focused_panes_selection() {
    // A blocked outcome exists, but the receipts pane is focused on a receipt that is not it.
    let mut app = connected(100, 30, 5, 60, 5, true);
    assert_eq!(app.focus, Pane::Receipts);
    assert_eq!(update(&mut app, key('v')), None, "nothing verified unseen");
    assert!(app.verifying.is_empty());
    assert!(app
        .notice
        .as_ref()
        .is_some_and(|n| n.text.contains("tab to Blocked outcomes")));
    assert_eq!(update(&mut app, key('x')), None);
    assert_eq!(app.mode, Mode::Normal, "no stop dialog for an unseen task");
}

/// A `changed` frame of the console's coalesced subscription.
pub(super) fn changed(from: u64, to: u64, executions: u64, replays: u64, refusals: u64) -> Action {
    Action::Event(json!({"event": "changed", "seq": to, "at": ts(0), "data": {
        "fromSeq": from, "toSeq": to,
        "counters": {"executions": executions, "joins": 0, "replays": replays, "rejectedReused": refusals,
                     "rejectedCapacity": 0, "rejectedCleared": 0, "rejectedBlocked": 0},
        "receipts": {"used": executions, "capacity": 60, "running": 0, "tombstones": 0, "tombstoneCapacity": 10}
    }}))
}

#[test]
fn changed_frames_feed_the_sparklines_and_a_coalesced_refresh() {
    // The snapshot says seq 10 with executions 5, replays 9 and 6 refusals.
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert_eq!(
        update(&mut app, Action::Tick(NOW + 100)),
        None,
        "nothing changed, nothing read"
    );
    assert_eq!(update(&mut app, changed(11, 12, 7, 9, 6)), None);
    assert_eq!(update(&mut app, changed(13, 14, 7, 10, 7)), None);
    assert_eq!(
        update(&mut app, changed(5, 9, 1, 1, 1)),
        None,
        "a frame the counted state already includes"
    );
    assert_eq!(
        app.activity.executions.back(),
        Some(&2),
        "the differences from the snapshot's counters, not the totals"
    );
    assert_eq!(app.activity.replays.back(), Some(&1));
    assert_eq!(app.activity.refusals.back(), Some(&1));
    assert_eq!(
        update(&mut app, Action::Tick(NOW + 1_100)),
        Some(Effect::Refresh),
        "one read for a burst"
    );
    assert_eq!(update(&mut app, Action::Tick(NOW + 1_200)), None);
    assert_eq!(update(&mut app, changed(15, 16, 10, 10, 7)), None);
    assert_eq!(
        app.activity
            .executions
            .iter()
            .rev()
            .take(2)
            .collect::<Vec<_>>(),
        [&3, &2],
        "each second gets what changed in it"
    );
    assert_eq!(
        update(
            &mut app,
            Action::Event(json!({"event": "lagged", "seq": 20, "data": {"missed": 5}}))
        ),
        Some(Effect::Refresh)
    );
}

#[test]
fn a_new_connection_counts_from_its_first_counters() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, changed(11, 12, 8, 9, 7));
    assert_eq!(app.activity.executions.back(), Some(&3));
    // The host restarted: its counters start again, and nothing is counted twice or negative.
    update(
        &mut app,
        Action::Disconnected {
            reason: "gone".into(),
            attempts: 1,
        },
    );
    assert_eq!(update(&mut app, Action::Connected), Some(Effect::Refresh));
    update(&mut app, changed(1, 3, 2, 0, 0));
    assert_eq!(
        app.activity.executions.back(),
        Some(&3),
        "the first frame of a connection is only a baseline"
    );
    update(&mut app, changed(4, 6, 6, 1, 0));
    assert_eq!(app.activity.executions.back(), Some(&7));
    assert_eq!(app.activity.replays.back(), Some(&1));
}

#[test]
fn disconnected_marks_data_stale_and_refuses_operator_actions() {
    let mut app = connected(100, 30, 5, 60, 5, true);
    update(&mut app, Action::Tick(NOW + 1000));
    update(
        &mut app,
        Action::Disconnected {
            reason: "the host closed the connection".into(),
            attempts: 1,
        },
    );
    assert!(app.stale());
    assert!(app.snapshot.is_some(), "the last data stays on screen");
    update(
        &mut app,
        Action::Event(json!({"event": "receipt.created", "seq": 99, "data": {}})),
    );
    assert_eq!(
        update(&mut app, Action::Tick(NOW + 2000)),
        None,
        "no reads while disconnected"
    );
    update(&mut app, key(' '));
    assert_eq!(update(&mut app, key('c')), None);
    assert_eq!(update(&mut app, key('v')), None);
    assert_eq!(update(&mut app, code(KeyCode::Enter)), None);
    assert_eq!(
        update(&mut app, code(KeyCode::Down)),
        None,
        "moving does not read while disconnected"
    );
    update(
        &mut app,
        Action::Disconnected {
            reason: "refused".into(),
            attempts: 2,
        },
    );
    let Link::Disconnected {
        since, attempts, ..
    } = app.link
    else {
        panic!()
    };
    assert_eq!(
        (since, attempts),
        (NOW + 1000, 2),
        "the banner counts from the first loss"
    );
    assert_eq!(update(&mut app, Action::Connected), Some(Effect::Refresh));
    assert!(!app.stale());
}

#[test]
fn a_lost_connection_drops_an_open_dialog_without_acting() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    update(&mut app, key('c'));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    update(
        &mut app,
        Action::Disconnected {
            reason: "gone".into(),
            attempts: 1,
        },
    );
    assert_eq!(app.mode, Mode::Normal);
    assert!(app
        .notice
        .as_ref()
        .unwrap()
        .text
        .contains("nothing was cleared"));
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    update(&mut app, key('c'));
    update(
        &mut app,
        Action::Disconnected {
            reason: "gone".into(),
            attempts: 1,
        },
    );
    assert_eq!(update(&mut app, Action::Prepared(Err(unknown_err()))), None);
    assert_eq!(app.mode, Mode::Normal);
}

// ---- snapshots -------------------------------------------------------------------------------

#[test]
fn at_start_the_selection_stays_on_the_newest_row_as_rows_arrive() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert_eq!(app.selected_receipt().unwrap().request_id, id(0));
    let mut fresh = page(5, 0, 5);
    let newer = receipt(77, "task.start", "completed", Some(true), None, 0);
    fresh["items"].as_array_mut().unwrap().insert(0, newer);
    fresh["total"] = json!(6);
    let seq = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset: 0,
            seq,
            reply: Ok(fresh),
        },
    );
    assert_eq!(app.selected, 0, "the cursor did not drift down");
    assert_eq!(app.selected_receipt().unwrap().request_id, id(77));
}

#[test]
fn s_keeps_the_selection_on_its_receipt() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key('j'));
    update(&mut app, key('j'));
    let chosen = app.selected_receipt().unwrap().request_id.clone();
    let effect = update(&mut app, key('s'));
    // The host answers in the other order: the chosen receipt is now third from the end.
    let Some(Effect::FetchPage { offset, seq, .. }) = effect else {
        panic!("a page read: {effect:?}")
    };
    let mut reversed = page(5, 0, 5);
    reversed["items"].as_array_mut().unwrap().reverse();
    update(
        &mut app,
        Action::Page {
            offset,
            seq,
            reply: Ok(reversed),
        },
    );
    assert_eq!(app.selected_receipt().unwrap().request_id, chosen);
}

#[test]
fn an_unknown_filter_token_is_refused_with_what_to_type() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key('/'));
    typed_filter(&mut app, "state:running");
    update(&mut app, code(KeyCode::Enter));
    assert_eq!(app.mode, Mode::Filter, "the filter stays open to be fixed");
    let said = &app.notice.as_ref().unwrap().text;
    assert!(
        said.contains("unknown filter token state:running") && said.contains("task:running"),
        "{said}"
    );
}

#[test]
fn esc_says_which_marks_it_dropped() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    assert_eq!(app.marked.len(), 1);
    update(&mut app, code(KeyCode::Esc));
    assert!(app.marked.is_empty());
    assert!(app
        .notice
        .as_ref()
        .is_some_and(|n| n.text.starts_with("dropped 1 marks")));
}

#[test]
fn p_pauses_live_updates_until_pressed_again() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert_eq!(update(&mut app, key('p')), None);
    assert!(app.paused);
    assert!(screen(&app, 100, 30).contains("PAUSED"));
    update(&mut app, changed(1, 5, 3, 0, 0));
    assert_eq!(
        update(&mut app, Action::Tick(NOW + 5_000)),
        None,
        "nothing is re-read while paused"
    );
    assert_eq!(update(&mut app, key('p')), Some(Effect::Refresh));
    assert!(!app.paused);
}

#[test]
fn shift_tab_switches_panes_the_other_way_round() {
    let mut app = connected(100, 30, 5, 60, 5, true);
    update(&mut app, code(KeyCode::BackTab));
    assert_eq!(app.focus, Pane::Blocked);
    update(&mut app, code(KeyCode::BackTab));
    assert_eq!(app.focus, Pane::Tasks);
    update(&mut app, code(KeyCode::BackTab));
    assert_eq!(app.focus, Pane::Receipts);
}
