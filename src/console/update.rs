//! How host replies, host events and the clock change the console's state: the body of
//! [`update`], the one place the state changes.

use crossterm::event::{
    KeyCode, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use ratatui::layout::{Position, Rect};
use serde::Deserialize;
use serde_json::Value;

use super::app::{
    read, Act, Action, Activity, App, ConfirmStage, Detail, Effect, Link, Mode, Pane, Reply,
    FLEET_REFRESH_MS, NOTICE_MS, REFRESH_EVERY_MS,
};
use super::input::on_key;
use super::layout::{areas, table_rows};
use super::text::id_in_notice;
use crate::protocol::introspection::{
    AuditListResult, ChangedEvent, ClearCommitted, ClearPrepared, EventFrame, ReceiptDetail,
    ReceiptsListResult, Snapshot,
};
use crate::protocol::results::VerifyResult;
use crate::tasks::VerifyOutcome;

/// The one place the console's state changes. Pure: the returned effect is run by the caller,
/// and so are the effects of queued keys, left in [`App::outbox`].
pub fn update(app: &mut App, action: Action) -> Option<Effect> {
    if let Action::Key(key) = action {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        if !ctrl_c && (!app.queued.is_empty() || app.waiting()) {
            if key.code == KeyCode::Char('y') && app.committing() {
                // A second `y` of the dialog that is sending: the dialog's key, never a copy
                // once it closes (which would push its verdict off the notice line).
                return None;
            }
            app.queued.push_back(key);
            return None;
        }
        return on_key(app, key);
    }
    let effect = on_reply(app, action);
    drain_queued(app);
    effect
}

/// Handles the keys typed while the console waited, in order, until it has to wait again.
fn drain_queued(app: &mut App) {
    while !app.waiting() {
        let Some(key) = app.queued.pop_front() else {
            return;
        };
        if let Some(effect) = on_key(app, key) {
            app.outbox.push(effect);
        }
    }
}

/// Drops keys typed for a dialog that did not open, so they are not read as commands.
fn drop_queued(app: &mut App, why: &str) {
    if !app.queued.is_empty() {
        let n = app.queued.len();
        app.queued.clear();
        app.notice(
            format!("{why}; the {n} keys typed meanwhile were dropped"),
            true,
        );
    }
}

/// A page of `receipts.list`: only the reply to the latest read is shown; the selection
/// stays on its receipt, looking for it in a wider window when it left the visible one.
fn on_page(app: &mut App, offset: u64, seq: u64, reply: Reply) -> Option<Effect> {
    if seq != app.page_seq {
        // Overtaken by a later read (another window, filter or sort): its successor is on
        // its way.
        return None;
    }
    app.page_in_flight = false;
    let locating = std::mem::take(&mut app.locating);
    let list = match reply {
        Ok(v) => read::<ReceiptsListResult>("receipt list", v).unwrap_or_else(|e| {
            app.notice(e, true);
            ReceiptsListResult {
                items: Vec::new(),
                total: 0,
            }
        }),
        Err(e) => {
            app.notice(format!("reading the receipts failed: {}", e.message), true);
            return None;
        }
    };
    let mut list = list;
    let local = app.local_view();
    if local {
        let filter = app.parsed_filter();
        let tasks = app.task_states();
        let now = app.now;
        list.items.retain(|r| filter.keeps(r, &tasks, now));
        list.total = list.items.len() as u64;
    }
    if std::mem::take(&mut app.mark_on_load) {
        let ids: Vec<String> = list
            .items
            .iter()
            .filter(|r| r.clearable)
            .map(|r| r.request_id.clone())
            .collect();
        let n = ids.len();
        app.drop_marks();
        app.marked.extend(ids);
        app.notice(
            format!("marked {n} clearable receipts of closed tasks — c clears them, esc drops the marks"),
            false,
        );
    }
    app.total = list.total;
    let found = app
        .anchor
        .as_ref()
        .and_then(|id| list.items.iter().position(|r| r.request_id == *id));
    if locating {
        match found {
            Some(k) => app.selected = offset + k as u64,
            None => {
                // After a clear the book's new count says more than where the cursor went: a
                // notice tied to the count stays until the count changes.
                let counting = app.notice.as_ref().is_some_and(|n| n.while_used.is_some());
                if let Some(id) = app.anchor.take().filter(|_| !counting) {
                    app.notice(
                        format!(
                            "left the list (cleared, or no longer matching): {}",
                            id_in_notice(&id)
                        ),
                        false,
                    );
                }
            }
        }
        app.clamp_selection();
        return app.fetch_page();
    }
    app.page_offset = offset;
    app.page = list.items;
    if app.follow && offset == 0 && app.selected == 0 {
        // Nobody moved the selection yet: it stays on the top row, whatever arrives.
        app.select_row(0);
        app.clamp_selection();
        return None;
    }
    match found {
        Some(k) => app.selected = offset + k as u64,
        None if app.anchor.is_some() && app.total > 0 && !local => return app.locate(),
        None => app.anchor = None,
    }
    let moved = app.clamp_selection();
    if app.anchor.is_none() || moved {
        let i = app.selected;
        app.select_row(i);
    }
    if moved && !local {
        return app.fetch_page();
    }
    None
}

/// The wheel scrolls the pane under the pointer and a click selects the row under it (and
/// focuses its pane), as htop and k9s do; while keys wait for the host the mouse is ignored.
fn on_mouse(app: &mut App, m: MouseEvent) -> Option<Effect> {
    if app.mode != Mode::Normal || app.waiting() || !app.queued.is_empty() {
        return None;
    }
    let a = areas(Rect::new(0, 0, app.size.0, app.size.1), app.in_fleet());
    let at = Position::new(m.column, m.row);
    let pane = if a.table.contains(at) {
        Pane::Receipts
    } else if a.tasks.contains(at) {
        Pane::Tasks
    } else if a.blocked.contains(at) {
        Pane::Blocked
    } else if a.hosts.is_some_and(|h| h.contains(at)) {
        Pane::Hosts
    } else {
        return None;
    };
    match m.kind {
        MouseEventKind::ScrollDown => {
            app.focus = pane;
            app.move_selection(if pane == Pane::Receipts { 3 } else { 1 })
        }
        MouseEventKind::ScrollUp => {
            app.focus = pane;
            app.move_selection(if pane == Pane::Receipts { -3 } else { -1 })
        }
        MouseEventKind::Down(MouseButton::Left) => {
            app.focus = pane;
            match pane {
                Pane::Receipts => {
                    let first = a.table.y + 2;
                    let row = u64::from(m.row.checked_sub(first)?);
                    let target = app.scroll + row;
                    if row >= u64::from(app.visible_rows) || target >= app.total {
                        return None;
                    }
                    app.move_selection(target as i64 - app.selected as i64)
                }
                Pane::Tasks | Pane::Blocked | Pane::Hosts => {
                    let (area, header, current, len) = match pane {
                        Pane::Tasks => (a.tasks, 1, app.task_selected, app.running_tasks().len()),
                        Pane::Hosts => (
                            a.hosts.unwrap_or_default(),
                            2,
                            app.host_selected,
                            app.fleet_hosts().len(),
                        ),
                        _ => (a.blocked, 2, app.blocked_selected, app.pending().len()),
                    };
                    let height = usize::from(area.height.saturating_sub(header + 1)).max(1);
                    let offset = current.saturating_sub(height - 1);
                    let row = usize::from(m.row.checked_sub(area.y + header)?);
                    let target = offset + row;
                    if row >= height || target >= len {
                        return None;
                    }
                    app.move_selection(target as i64 - current as i64)
                }
            }
        }
        _ => None,
    }
}

/// Applies one thing that happened, other than a typed key, to the state.
fn on_reply(app: &mut App, action: Action) -> Option<Effect> {
    match action {
        Action::Key(key) => on_key(app, key),
        Action::Mouse(m) => on_mouse(app, m),
        Action::Tick(now) => on_tick(app, now),
        Action::Resize(cols, rows) => on_resize(app, cols, rows),
        Action::Connected => on_connected(app),
        Action::Disconnected { reason, attempts } => on_disconnected(app, reason, attempts),
        Action::Snapshot(v) => on_snapshot(app, v),
        Action::Page { offset, seq, reply } => on_page(app, offset, seq, reply),
        Action::Event(ev) => on_event(app, ev),
        Action::ReceiptDetail(reply) => on_receipt_detail(app, reply),
        Action::TaskHistory { task_id, reply } => on_task_history(app, task_id, reply),
        Action::Verified { task_id, reply } => on_verified(app, task_id, reply),
        Action::Prepared(reply) => on_prepared(app, reply),
        Action::Acted { act, reply } => on_acted(app, act, reply),
        Action::Matched(reply) => on_matched(app, reply),
        Action::Audit(reply) => on_audit(app, reply),
        Action::Committed(reply) => on_committed(app, reply),
    }
}

/// The clock moved: expires quiet notices, rolls the activity window and refreshes when due.
fn on_tick(app: &mut App, now: i64) -> Option<Effect> {
    app.now = now;
    if app
        .notice
        .as_ref()
        .is_some_and(|n| !n.error && n.while_used.is_none() && now - n.at > NOTICE_MS)
    {
        app.notice = None;
    }
    app.activity.roll(now);
    // A fleet host is re-read every second even when quiet: other hosts' leases and
    // numbers change without an event here.
    let due = if app.in_fleet() {
        app.dirty || now - app.last_refresh >= FLEET_REFRESH_MS
    } else {
        app.dirty
    };
    if due
        && !app.paused
        && !app.stale()
        && !app.page_in_flight
        && now - app.last_refresh >= REFRESH_EVERY_MS
    {
        app.dirty = false;
        app.last_refresh = now;
        return Some(Effect::Refresh);
    }
    None
}

/// The terminal changed size: re-reads the page when a different number of rows fits.
fn on_resize(app: &mut App, cols: u16, rows: u16) -> Option<Effect> {
    app.size = (cols, rows);
    let fit = table_rows(cols, rows);
    if fit != app.visible_rows {
        app.visible_rows = fit;
        app.clamp_selection();
        return app.fetch_page();
    }
    None
}

/// Connected and subscribed: reads everything afresh.
fn on_connected(app: &mut App) -> Option<Effect> {
    app.link = Link::Connected;
    app.dirty = false;
    // A new connection may be a new host run, whose counters start again.
    app.counted = None;
    app.last_refresh = app.now;
    Some(Effect::Refresh)
}

/// The connection was lost: drops reads in flight and closes any dialog, saying what became of it.
fn on_disconnected(app: &mut App, reason: String, attempts: u32) -> Option<Effect> {
    let since = match &app.link {
        Link::Disconnected { since, .. } => *since,
        _ => app.now,
    };
    app.link = Link::Disconnected {
        since,
        reason,
        attempts,
    };
    app.page_in_flight = false;
    app.locating = false;
    app.marking = false;
    app.verifying.clear();
    match &app.mode {
        Mode::Preparing => {
            app.mode = Mode::Normal;
            app.queued.clear();
            app.notice("the connection was lost while preparing the clear; nothing was cleared — prepare again once reconnected", true);
        }
        Mode::Confirm {
            stage: ConfirmStage::Committing,
            ..
        } => {
            app.mode = Mode::Normal;
            app.queued.clear();
            app.notice("clear outcome unknown — the connection was lost during the commit; re-read the receipts (r) before doing anything else", true);
        }
        Mode::Act {
            stage: ConfirmStage::Committing,
            act,
            ..
        } => {
            let verb = act.verb();
            app.mode = Mode::Normal;
            app.queued.clear();
            app.notice(format!("{verb}: outcome unknown — the connection was lost while it was sent; re-read (r) before anything else"), true);
        }
        Mode::Act { .. } => {
            app.mode = Mode::Normal;
            app.notice("the connection was lost; nothing was sent", true);
        }
        Mode::Confirm { .. } => {
            app.mode = Mode::Normal;
            app.notice(
                "the connection was lost; the prepared clear was dropped and nothing was cleared",
                true,
            );
        }
        _ => {}
    }
    None
}

/// A `snapshot`: notices a new host run, keeps the selections in range, then reads the page.
fn on_snapshot(app: &mut App, v: Value) -> Option<Effect> {
    match read::<Snapshot>("snapshot", v) {
        Ok(s) => {
            let previous = app.snapshot.as_ref().map(|old| old.run_id.clone());
            if previous.is_some_and(|old| old != s.run_id) {
                // A new host run: its counters, tasks and clock start again.
                app.activity = Activity::default();
                app.activity.roll(app.now);
                app.verify_results.clear();
                app.counted = None;
                // A host without a journal reports none (SPEC §11).
                let kept = match &s.journal {
                    None => " — receipts forgotten (--no-journal)".to_owned(),
                    Some(_) => {
                        format!(" — {} receipts kept by the journal", s.receipts.used)
                    }
                };
                app.notice(format!("new run {}{kept}", s.run_id), false);
            }
            if app
                .notice
                .as_ref()
                .and_then(|n| n.while_used)
                .is_some_and(|u| u != s.receipts.used)
            {
                app.notice = None;
            }
            app.task_selected = app.task_selected.min(s.tasks.len().saturating_sub(1));
            app.blocked_selected = app.blocked_selected.min(s.pending.len().saturating_sub(1));
            let hosts = s.ledger.as_ref().map_or(0, |l| l.hosts.len());
            app.host_selected = app.host_selected.min(hosts.saturating_sub(1));
            if s.ledger.is_none() && app.focus == Pane::Hosts {
                app.focus = Pane::Receipts;
            }
            if app.counted.is_none() {
                app.counted = Some((s.seq, s.counters));
            }
            app.snapshot = Some(s);
        }
        Err(e) => app.notice(e, true),
    }
    app.fetch_page()
}

/// A `receipts.get` reply: fills the detail view if it still waits for it.
fn on_receipt_detail(app: &mut App, reply: Reply) -> Option<Effect> {
    if matches!(app.mode, Mode::Detail(Detail::Loading(_))) {
        app.mode = Mode::Detail(match reply.map(|v| read::<ReceiptDetail>("receipt", v)) {
            Ok(Ok(detail)) => Detail::Receipt(Box::new(detail)),
            Ok(Err(e)) => Detail::Failed(e),
            Err(e) => Detail::Failed(e.message),
        });
    }
    None
}

/// A task's receipts: fills its detail view if it still waits for them.
fn on_task_history(app: &mut App, task_id: String, reply: Reply) -> Option<Effect> {
    if matches!(&app.mode, Mode::Detail(Detail::Loading(id)) if *id == task_id) {
        let task = app
            .snapshot
            .iter()
            .flat_map(|s| s.tasks.iter())
            .find(|t| t.task_id == task_id)
            .cloned()
            .map(Box::new);
        app.mode = Mode::Detail(match reply {
            Ok(v) => Detail::Task {
                task_id,
                task,
                history: read::<ReceiptsListResult>("receipt list", v)
                    .map(|l| l.items)
                    .unwrap_or_default(),
            },
            Err(e) => Detail::Failed(e.message),
        });
    }
    None
}

/// A `task.verifyOutcome` reply: tells the outcome and what to do next.
fn on_verified(app: &mut App, task_id: String, reply: Reply) -> Option<Effect> {
    app.verifying.remove(&task_id);
    let text = match reply {
        Ok(v) => {
            let verified = read::<VerifyResult>("verification", v).ok();
            let outcome = verified
                .as_ref()
                .map_or("?", |r| r.outcome.as_str())
                .to_owned();
            let state = verified.as_ref().map_or("?", |r| r.state.as_str());
            let seen = verified
                .as_ref()
                .and_then(|r| r.observation.as_ref())
                .map(|o| format!(" (observed {} = {:?})", o.target, o.value))
                .unwrap_or_default();
            let next = match verified.as_ref().map(|r| r.outcome) {
                Some(VerifyOutcome::NotObserved | VerifyOutcome::Unknown) => {
                    " — verify again later, stop the task (x) or acknowledge it (A)"
                }
                _ => "",
            };
            app.notice(
                format!(
                    "{outcome}: verified task {}{seen}; task is {state}{next}",
                    id_in_notice(&task_id)
                ),
                false,
            );
            outcome
        }
        Err(e) => {
            app.notice(
                format!(
                    "refused: verify task {} — {} {}",
                    id_in_notice(&task_id),
                    e.code,
                    e.message
                ),
                true,
            );
            e.code
        }
    };
    app.verify_results.insert(task_id, text);
    app.dirty = true;
    None
}

/// A `receipts.clearPrepare` reply: opens the confirm dialog, or says why it cannot.
fn on_prepared(app: &mut App, reply: Reply) -> Option<Effect> {
    if app.mode != Mode::Preparing {
        return None;
    }
    match reply {
        Ok(v) => match read::<ClearPrepared>("prepared clear", v) {
            Ok(prepared) => {
                app.dialog_scroll = 0;
                app.mode = Mode::Confirm {
                    prepared,
                    reason: String::new(),
                    stage: ConfirmStage::Reason,
                };
            }
            Err(e) => {
                app.mode = Mode::Normal;
                app.notice(format!("{e}; nothing was cleared"), true);
                drop_queued(app, "the clear could not be prepared");
            }
        },
        Err(e) => {
            app.mode = Mode::Normal;
            app.notice(
                format!("the clear could not be prepared: {} {}", e.code, e.message),
                true,
            );
            drop_queued(
                app,
                &format!("the clear could not be prepared: {} {}", e.code, e.message),
            );
        }
    }
    None
}

/// The reply to a stop or an acknowledgement: tells what happened and what to do next.
fn on_acted(app: &mut App, act: Act, reply: Reply) -> Option<Effect> {
    if matches!(&app.mode, Mode::Act { act: open, stage: ConfirmStage::Committing, .. } if *open == act)
    {
        app.mode = Mode::Normal;
    }
    let target = id_in_notice(act.target());
    match (&act, reply) {
        (Act::Stop { .. }, Ok(_)) => app.notice(
            format!("stopped: task {target} — nothing was executed; its outcome stays unverified, and its receipts can now be cleared"),
            false,
        ),
        (Act::Acknowledge { .. }, Ok(_)) => app.notice(
            format!("acknowledged: request {target} settled outside Polaris; its receipt can now be cleared"),
            false,
        ),
        (_, Err(e)) if e.unknown => app.notice(
            format!("outcome unknown: {} {target} ({}) — re-read (r) before anything else; the console will not send it again", act.verb(), e.code),
            true,
        ),
        (Act::Stop { .. }, Err(e)) if e.code == "RECEIPT_CAPACITY_FULL" => app.notice(
            format!("refused: stop task {target} — the book is full and a stop takes a receipt; nothing was stopped. Free room first (D, c, a reason, enter, y), or acknowledge the outcome (A), which needs no room"),
            true,
        ),
        (Act::Stop { .. }, Err(e)) if e.code == "UNKNOWN_METHOD" => app.notice(
            "refused: stop task — this host does not stop tasks from the console yet (UNKNOWN_METHOD); stop it from the agent's side",
            true,
        ),
        (Act::Acknowledge { .. }, Err(e)) if e.code == "UNKNOWN_METHOD" => app.notice(
            "this host does not offer acknowledging yet (UNKNOWN_METHOD); stop the task instead (x) to make the receipt clearable",
            true,
        ),
        (_, Err(e)) => app.notice(
            format!("refused: {} {target} — {} {}", act.verb(), e.code, e.message),
            true,
        ),
    }
    app.dirty = false;
    Some(Effect::Refresh)
}

/// The receipts `a` marks: marks the clearable ones as they are now.
fn on_matched(app: &mut App, reply: Reply) -> Option<Effect> {
    app.marking = false;
    match reply.map(|v| read::<ReceiptsListResult>("receipt list", v)) {
        Ok(Ok(list)) => {
            let read = list.items.len();
            app.drop_marks();
            app.marked.extend(
                list.items
                    .into_iter()
                    .filter(|r| r.clearable)
                    .map(|r| r.request_id),
            );
            let n = app.marked.len();
            let more = if list.total > read as u64 {
                format!(" (of the first {read} of {} matching)", list.total)
            } else {
                String::new()
            };
            app.notice(
                format!("marked {n} clearable receipts{more} as they are now — a fixed set: new receipts are not added; c clears them, esc drops the marks"),
                false,
            );
        }
        Ok(Err(e)) => app.notice(format!("refused: marking — {e}"), true),
        Err(e) => app.notice(
            format!(
                "refused: marking — reading the receipts failed: {} {}",
                e.code, e.message
            ),
            true,
        ),
    }
    None
}

/// An `audit.list` reply: fills the audit view if it is open.
fn on_audit(app: &mut App, reply: Reply) -> Option<Effect> {
    if let Mode::Audit { entries, failed } = &mut app.mode {
        match reply.map(|v| read::<AuditListResult>("audit log", v)) {
            Ok(Ok(list)) => *entries = Some(list.entries),
            Ok(Err(e)) => *failed = Some(e),
            Err(e) => *failed = Some(format!("{} {}", e.code, e.message)),
        }
    }
    None
}

/// A `receipts.clearCommit` reply: tells what was cleared, or that the outcome is unknown.
fn on_committed(app: &mut App, reply: Reply) -> Option<Effect> {
    if !matches!(
        app.mode,
        Mode::Confirm {
            stage: ConfirmStage::Committing,
            ..
        }
    ) {
        return None;
    }
    app.mode = Mode::Normal;
    match reply {
        Ok(v) => {
            let done = read::<ClearCommitted>("clear", v);
            let cleared = done.as_ref().map_or(0, |d| d.cleared);
            let r = done.map(|d| d.receipts).unwrap_or_default();
            app.drop_marks();
            if let Some(s) = app.snapshot.as_mut() {
                s.receipts = r.clone();
            }
            app.notice(
                format!(
                    "cleared {cleared} receipts; capacity now {}/{} used, {} tombstones",
                    r.used, r.capacity, r.tombstones
                ),
                false,
            );
            if let Some(n) = app.notice.as_mut() {
                n.while_used = Some(r.used);
            }
        }
        Err(e) if e.unknown => {
            app.notice("clear outcome unknown — re-read the receipts (r); the console will not send the commit again", true);
        }
        Err(e) => {
            app.notice(
                format!("nothing was cleared: {} {}", e.code, e.message),
                true,
            );
        }
    }
    Some(Effect::Refresh)
}

/// A host frame: a `changed` frame of the console's coalesced subscription (feeding the
/// sparklines from counter differences), or any event of a full subscription.
fn on_event(app: &mut App, ev: Value) -> Option<Effect> {
    let Ok(ev) = EventFrame::deserialize(&ev) else {
        // A frame that does not read still says the host changed.
        app.dirty = true;
        return None;
    };
    if ev.event == "lagged" {
        app.dirty = false;
        return Some(Effect::Refresh);
    }
    if ev.event == "changed" {
        if let Ok(changed) = ev.data_as::<ChangedEvent>() {
            let (to_seq, counters) = (ev.seq, changed.counters);
            match &app.counted {
                Some((counted_seq, since)) if to_seq > *counted_seq => {
                    app.activity.add(app.now, since, &counters);
                    app.counted = Some((to_seq, counters));
                }
                Some(_) => {}
                None => app.counted = Some((to_seq, counters)),
            }
        }
    }
    if app.snapshot.as_ref().is_some_and(|s| ev.seq <= s.seq) {
        return None;
    }
    app.dirty = true;
    None
}
