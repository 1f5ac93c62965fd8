//! How host replies, host events and the clock change the console's state: the body of
//! [`update`], the one place the state changes.

use serde::Deserialize;
use serde_json::Value;

use super::app::{
    read, short, Action, App, ConfirmStage, Detail, Effect, Link, Mode, REFRESH_EVERY_MS,
};
use super::input::on_key;
use crate::protocol::introspection::{
    ChangedEvent, ClearCommitted, ClearPrepared, EventFrame, ReceiptDetail, ReceiptsListResult,
    Snapshot,
};
use crate::protocol::results::VerifyResult;

/// The one place the console's state changes. Pure: the returned effect is run by the caller.
pub fn update(app: &mut App, action: Action) -> Option<Effect> {
    match action {
        Action::Key(key) => on_key(app, key),
        Action::Tick(now) => {
            app.now = now;
            app.activity.roll(now);
            if app.dirty
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
        Action::Resize(cols, rows) => {
            app.size = (cols, rows);
            let fit = super::ui::table_rows(cols, rows);
            if fit != app.visible_rows {
                app.visible_rows = fit;
                app.clamp_selection();
                return app.fetch_page();
            }
            None
        }
        Action::Connected => {
            app.link = Link::Connected;
            app.dirty = false;
            // A new connection may be a new host run, whose counters start again.
            app.counted = None;
            app.last_refresh = app.now;
            Some(Effect::Refresh)
        }
        Action::Disconnected { reason, attempts } => {
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
            app.verifying.clear();
            match &app.mode {
                Mode::Preparing => {
                    app.mode = Mode::Normal;
                    app.notice("the connection was lost while preparing the clear; nothing was cleared — prepare again once reconnected", true);
                }
                Mode::Confirm {
                    stage: ConfirmStage::Committing,
                    ..
                } => {
                    app.mode = Mode::Normal;
                    app.notice("clear outcome unknown — the connection was lost during the commit; re-read the receipts (r) before doing anything else", true);
                }
                Mode::Confirm { .. } => {
                    app.mode = Mode::Normal;
                    app.notice("the connection was lost; the prepared clear was dropped and nothing was cleared", true);
                }
                _ => {}
            }
            None
        }
        Action::Snapshot(v) => {
            match read::<Snapshot>("snapshot", v) {
                Ok(s) => {
                    app.task_selected = app.task_selected.min(s.tasks.len().saturating_sub(1));
                    app.blocked_selected =
                        app.blocked_selected.min(s.pending.len().saturating_sub(1));
                    if app.counted.is_none() {
                        app.counted = Some((s.seq, s.counters));
                    }
                    app.snapshot = Some(s);
                }
                Err(e) => app.notice(e, true),
            }
            app.fetch_page()
        }
        Action::Page { offset, reply } => {
            app.page_in_flight = false;
            match reply {
                Ok(_) if offset != app.scroll => {
                    // An older window, overtaken by a later move: its successor is on its way.
                    app.page_in_flight = true;
                }
                Ok(v) => {
                    // The selection follows its receipt while new ones push the rows down.
                    let keep = app.selected_receipt().map(|r| r.request_id.clone());
                    let list = read::<ReceiptsListResult>("receipt list", v).unwrap_or_else(|e| {
                        app.notice(e, true);
                        ReceiptsListResult {
                            items: Vec::new(),
                            total: 0,
                        }
                    });
                    app.total = list.total;
                    app.page_offset = offset;
                    app.page = list.items;
                    if let Some(k) =
                        keep.and_then(|id| app.page.iter().position(|r| r.request_id == id))
                    {
                        app.selected = offset + k as u64;
                    }
                    if app.clamp_selection() {
                        return app.fetch_page();
                    }
                }
                Err(e) => app.notice(format!("reading the receipts failed: {}", e.message), true),
            }
            None
        }
        Action::Event(ev) => on_event(app, ev),
        Action::ReceiptDetail(reply) => {
            if matches!(app.mode, Mode::Detail(Detail::Loading(_))) {
                app.mode = Mode::Detail(match reply.map(|v| read::<ReceiptDetail>("receipt", v)) {
                    Ok(Ok(detail)) => Detail::Receipt(Box::new(detail)),
                    Ok(Err(e)) => Detail::Failed(e),
                    Err(e) => Detail::Failed(e.message),
                });
            }
            None
        }
        Action::TaskHistory { task_id, reply } => {
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
        Action::Verified { task_id, reply } => {
            app.verifying.remove(&task_id);
            let text = match reply {
                Ok(v) => {
                    let verified = read::<VerifyResult>("verification", v).ok();
                    let outcome = verified
                        .as_ref()
                        .map_or("?", |r| r.outcome.as_str())
                        .to_owned();
                    let state = verified.as_ref().map_or("?", |r| r.state.as_str());
                    app.notice(
                        format!(
                            "verification of {}: {outcome}; task is {state}",
                            short(&task_id)
                        ),
                        false,
                    );
                    outcome
                }
                Err(e) => {
                    app.notice(
                        format!(
                            "verification of {} failed: {} {}",
                            short(&task_id),
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
        Action::Prepared(reply) => {
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
                    }
                },
                Err(e) => {
                    app.mode = Mode::Normal;
                    app.notice(
                        format!("the clear could not be prepared: {} {}", e.code, e.message),
                        true,
                    );
                }
            }
            None
        }
        Action::Committed(reply) => {
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
                    app.marked.clear();
                    app.mark_all = false;
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
    }
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
