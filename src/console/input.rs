//! Keys: what each key does in each mode of the console.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::app::{next_sort, Act, App, ConfirmStage, Detail, Effect, Mode, Pane};
use super::filter::LOCAL_WINDOW;
use super::keymap::{command_for, line_command, KeyCommand, LINE_COMMANDS};
use super::text::{id_in_notice, lease_text, notice_to_read};
use crate::protocol::introspection::{ClearPrepared, Sort};

/// Scrolls the detail view, the help or the audit log; `false` when the key is not a
/// scrolling key. The view clamps what is past its end.
fn scroll_overlay(app: &mut App, code: KeyCode) -> bool {
    let page = app.size.1.saturating_sub(6).max(1);
    let s = &mut app.overlay_scroll;
    match code {
        KeyCode::Down | KeyCode::Char('j') => *s = s.saturating_add(1),
        KeyCode::Up | KeyCode::Char('k') => *s = s.saturating_sub(1),
        KeyCode::PageDown | KeyCode::Char(' ') => *s = s.saturating_add(page),
        KeyCode::PageUp => *s = s.saturating_sub(page),
        KeyCode::Home | KeyCode::Char('g') => *s = 0,
        KeyCode::End | KeyCode::Char('G') => *s = u16::MAX,
        _ => return false,
    }
    true
}

/// The stop and acknowledge dialog: a reason, Enter, then only `y` sends it, once.
fn on_act_key(
    app: &mut App,
    act: Act,
    mut reason: String,
    stage: ConfirmStage,
    key: KeyEvent,
    ctrl_c: bool,
) -> Option<Effect> {
    let cancel = |app: &mut App, act: &Act| {
        app.mode = Mode::Normal;
        app.notice(
            format!("cancelled: {}; nothing was sent", act.verb()),
            false,
        );
        None
    };
    match stage {
        ConfirmStage::Reason => {
            match key.code {
                KeyCode::Esc => return cancel(app, &act),
                KeyCode::Char('c') if ctrl_c => return cancel(app, &act),
                KeyCode::Enter => {
                    if reason.trim().is_empty() {
                        app.notice("type a reason for the audit log first", true);
                    } else {
                        app.notice = None;
                        app.mode = Mode::Act {
                            act,
                            reason,
                            stage: ConfirmStage::Confirm,
                        };
                    }
                    return None;
                }
                KeyCode::Backspace => {
                    reason.pop();
                }
                KeyCode::Char(c)
                    if !key.modifiers.contains(KeyModifiers::CONTROL)
                        && reason.chars().count() < 500 =>
                {
                    reason.push(c)
                }
                _ => {}
            }
            app.mode = Mode::Act {
                act,
                reason,
                stage: ConfirmStage::Reason,
            };
            None
        }
        ConfirmStage::Confirm => {
            if key.code == KeyCode::Char('y')
                && key.modifiers.difference(KeyModifiers::SHIFT).is_empty()
            {
                let effect = Effect::Act {
                    act: act.clone(),
                    reason: reason.trim().to_owned(),
                };
                app.mode = Mode::Act {
                    act,
                    reason,
                    stage: ConfirmStage::Committing,
                };
                Some(effect)
            } else {
                cancel(app, &act)
            }
        }
        ConfirmStage::Committing => None,
    }
}

/// What a key does in the console's current mode.
pub(super) fn on_key(app: &mut App, key: KeyEvent) -> Option<Effect> {
    if key.kind == crossterm::event::KeyEventKind::Release {
        return None;
    }
    let ctrl_c = key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
    match app.mode.clone() {
        Mode::Help => {
            if ctrl_c || key.code == KeyCode::Char('q') {
                app.quit = true;
                return Some(Effect::Quit);
            }
            if !scroll_overlay(app, key.code) {
                app.mode = Mode::Normal;
            }
            None
        }
        Mode::Notice(_) => {
            if ctrl_c {
                app.quit = true;
                return Some(Effect::Quit);
            }
            if matches!(
                key.code,
                KeyCode::Char('j' | 'k') | KeyCode::Up | KeyCode::Down
            ) && scroll_overlay(app, key.code)
            {
                return None;
            }
            app.mode = Mode::Normal;
            None
        }
        Mode::Detail(_) | Mode::Audit { .. } => {
            if ctrl_c {
                app.quit = true;
                return Some(Effect::Quit);
            }
            if !scroll_overlay(app, key.code)
                && matches!(key.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q'))
            {
                app.mode = Mode::Normal;
            }
            None
        }
        Mode::Act { act, reason, stage } => on_act_key(app, act, reason, stage, key, ctrl_c),
        Mode::Filter => on_filter_key(app, key),
        Mode::Command(line) => on_line_key(app, line, key, ctrl_c),
        Mode::Preparing => {
            if ctrl_c {
                app.quit = true;
                return Some(Effect::Quit);
            }
            None
        }
        Mode::Confirm {
            prepared,
            reason,
            stage,
        } => on_confirm_key(app, prepared, reason, stage, key, ctrl_c),
        Mode::Normal => {
            let command = command_for(&key)?;
            on_command(app, command)
        }
    }
}

/// The filter line: typing filters as it goes, Enter keeps a filter that reads, Esc undoes it.
fn on_filter_key(app: &mut App, key: KeyEvent) -> Option<Effect> {
    match key.code {
        KeyCode::Enter => {
            // The filter was applied as it was typed; a word that is no token would
            // silently match nothing, so Enter refuses it and the filter stays open.
            if let Some(why) = app.parsed_filter().refused {
                app.notice(why, true);
                return None;
            }
            app.mode = Mode::Normal;
            return None;
        }
        KeyCode::Esc => {
            // Back to the view before `/`; the marks stay.
            app.mode = Mode::Normal;
            let before = std::mem::take(&mut app.filter_before);
            if before == app.filter {
                return None;
            }
            app.filter = before;
        }
        KeyCode::Backspace => {
            app.filter.pop();
        }
        KeyCode::Char(c)
            if !key.modifiers.contains(KeyModifiers::CONTROL) && app.filter.len() < 200 =>
        {
            app.filter.push(c)
        }
        _ => return None,
    }
    app.reset_view()
}

/// The clear dialog: a reason, Enter, then only `y` sends the commit, once.
fn on_confirm_key(
    app: &mut App,
    prepared: ClearPrepared,
    mut reason: String,
    stage: ConfirmStage,
    key: KeyEvent,
    ctrl_c: bool,
) -> Option<Effect> {
    match stage {
        ConfirmStage::Reason => {
            match key.code {
                KeyCode::Esc => {
                    app.mode = Mode::Normal;
                    app.notice("clear cancelled; nothing was cleared", false);
                    return None;
                }
                KeyCode::Enter => {
                    if prepared.clearable.is_empty() {
                        app.mode = Mode::Normal;
                        app.notice("nothing to clear: every receipt was refused", true);
                        return None;
                    }
                    if reason.trim().is_empty() {
                        app.notice("type a reason for the audit log first", true);
                        return None;
                    }
                    app.notice = None;
                    app.mode = Mode::Confirm {
                        prepared,
                        reason,
                        stage: ConfirmStage::Confirm,
                    };
                    return None;
                }
                KeyCode::Backspace => {
                    reason.pop();
                }
                KeyCode::Up => app.dialog_scroll = app.dialog_scroll.saturating_sub(1),
                KeyCode::Down => app.dialog_scroll = app.dialog_scroll.saturating_add(1),
                KeyCode::PageUp => app.dialog_scroll = app.dialog_scroll.saturating_sub(10),
                KeyCode::PageDown => app.dialog_scroll = app.dialog_scroll.saturating_add(10),
                KeyCode::Char(c)
                    if !key.modifiers.contains(KeyModifiers::CONTROL)
                        && reason.chars().count() < 500 =>
                {
                    reason.push(c)
                }
                KeyCode::Char('c') if ctrl_c => {
                    app.mode = Mode::Normal;
                    app.notice("clear cancelled; nothing was cleared", false);
                    return None;
                }
                _ => {}
            }
            app.mode = Mode::Confirm {
                prepared,
                reason,
                stage: ConfirmStage::Reason,
            };
            None
        }
        ConfirmStage::Confirm => {
            if key.code == KeyCode::Char('y')
                && key.modifiers.difference(KeyModifiers::SHIFT).is_empty()
            {
                let effect = Effect::Commit {
                    token: prepared.token.clone(),
                    reason: reason.trim().to_owned(),
                };
                app.mode = Mode::Confirm {
                    prepared,
                    reason,
                    stage: ConfirmStage::Committing,
                };
                Some(effect)
            } else {
                app.mode = Mode::Normal;
                app.notice("clear cancelled; nothing was cleared", false);
                None
            }
        }
        ConfirmStage::Committing => None,
    }
}

/// Refuses `command` on a `--read-only` console (saying so); `true` when refused.
fn refused_read_only(app: &mut App, command: KeyCommand) -> bool {
    if app.read_only && command.changes_the_host() {
        app.notice(
            "refused: this console is read-only (--read-only); verify, stop, acknowledge and clear from a console started without it",
            true,
        );
        return true;
    }
    false
}

/// The `:` command line: typing, Tab completing a command's name, Enter running it, Esc (or
/// Ctrl-C) leaving it with nothing done.
fn on_line_key(app: &mut App, mut line: String, key: KeyEvent, ctrl_c: bool) -> Option<Effect> {
    match key.code {
        KeyCode::Esc => {
            app.mode = Mode::Normal;
            return None;
        }
        KeyCode::Char('c') if ctrl_c => {
            app.mode = Mode::Normal;
            return None;
        }
        KeyCode::Enter => {
            app.mode = Mode::Normal;
            return run_line(app, &line);
        }
        KeyCode::Backspace => {
            line.pop();
        }
        KeyCode::Tab if !line.contains(' ') => {
            if let Ok(c) = line_command(&line) {
                line = format!("{} ", c.name);
            }
        }
        KeyCode::Char(c)
            if !key.modifiers.contains(KeyModifiers::CONTROL) && line.chars().count() < 200 =>
        {
            line.push(c)
        }
        _ => {}
    }
    app.mode = Mode::Command(line);
    None
}

/// Runs a typed command line: a known command (or an unambiguous prefix of one) through the
/// same path as its key, or a notice naming the commands; never a guess.
fn run_line(app: &mut App, line: &str) -> Option<Effect> {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or("");
    let command = match line_command(first) {
        Ok(c) => c,
        Err(e) => {
            app.notice(e.to_string(), true);
            return None;
        }
    };
    let args: Vec<&str> = words.collect();
    if command.command == KeyCommand::Clear {
        return clear_task(app, &args);
    }
    if !args.is_empty() {
        app.notice(
            format!(
                ":{} takes nothing after it (got {:?}); nothing was done",
                command.name,
                args.join(" ")
            ),
            true,
        );
        return None;
    }
    on_command(app, command.command)
}

/// `:clear task ID-PREFIX`: the task's receipts as `t` shows them, then `a` and `c` queued,
/// so the clear is prepared exactly as those keys prepare it and opens the same dialog.
fn clear_task(app: &mut App, args: &[&str]) -> Option<Effect> {
    if refused_read_only(app, KeyCommand::Clear) {
        return None;
    }
    let prefix = match args {
        ["task", prefix] => *prefix,
        _ => {
            let usage = LINE_COMMANDS
                .iter()
                .find(|c| c.command == KeyCommand::Clear)
                .map_or("", |c| c.args);
            app.notice(
                format!("write :clear {usage} (a task's first characters); nothing was done"),
                true,
            );
            return None;
        }
    };
    let prefix = prefix.to_ascii_lowercase();
    let tasks: Vec<String> = app
        .snapshot
        .iter()
        .flat_map(|s| s.tasks.iter())
        .filter(|t| t.task_id.to_ascii_lowercase().starts_with(&prefix))
        .map(|t| t.task_id.clone())
        .collect();
    let task_id = match tasks.as_slice() {
        [] => {
            app.notice(
                format!("no task of this host run starts with {prefix}; nothing was done"),
                true,
            );
            return None;
        }
        [one] => one.clone(),
        many => {
            let named: Vec<String> = many.iter().take(4).map(|t| id_in_notice(t)).collect();
            app.notice(
                format!(
                    "{} tasks start with {prefix} ({}{}); type more of the ID — nothing was done",
                    many.len(),
                    named.join(", "),
                    if many.len() > 4 { ", …" } else { "" }
                ),
                true,
            );
            return None;
        }
    };
    if app.stale() {
        app.notice(
            "disconnected: clearing needs the host; wait for the reconnection",
            true,
        );
        return None;
    }
    app.filter_before = app.filter.clone();
    app.filter = task_id;
    app.drop_marks();
    app.focus = Pane::Receipts;
    let effect = app.reset_view();
    for c in ['a', 'c'] {
        app.queued
            .push_back(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
    effect
}

/// The ID under the focused pane's cursor, with what it names: the receipt's request ID, the
/// running task's ID, the blocked outcome's request ID, or the host's name.
fn selected_id(app: &App) -> Option<(&'static str, String)> {
    match app.focus {
        Pane::Receipts => app
            .selected_receipt()
            .map(|r| ("request", r.request_id.clone())),
        Pane::Tasks => app
            .running_tasks()
            .get(app.task_selected)
            .map(|t| ("task", t.task_id.clone())),
        Pane::Blocked => app
            .pending()
            .get(app.blocked_selected)
            .map(|p| ("request", p.pending.request_id.clone())),
        Pane::Hosts => app
            .fleet_hosts()
            .get(app.host_selected)
            .map(|h| ("host", h.host_id.clone())),
    }
}

/// `f`: follows the newest receipt (sorting newest first), or stops following.
fn toggle_follow(app: &mut App) -> Option<Effect> {
    if app.follow {
        app.follow = false;
        app.passing_notice("stopped following: the selection stays on its receipt");
        return None;
    }
    app.follow = true;
    let resorted = app.sort != Sort::Newest || app.reverse;
    app.sort = Sort::Newest;
    app.reverse = false;
    app.focus = Pane::Receipts;
    app.passing_notice(if resorted {
        "following the newest receipt (sorted newest first); moving the selection stops it"
    } else {
        "following the newest receipt; moving the selection stops it"
    });
    app.reset_view()
}

/// `y`: the selected ID to the clipboard; the echo is a passing notice, so `n` still opens on
/// the last verdict.
fn copy_selected(app: &mut App) -> Option<Effect> {
    let Some((what, id)) = selected_id(app) else {
        app.notice("nothing selected to copy: select a row first", true);
        return None;
    };
    app.passing_notice(format!(
        "copied {what} {id} (OSC 52: the terminal puts it on the clipboard)"
    ));
    Some(Effect::Copy(id))
}

/// Runs one command of the key map.
fn on_command(app: &mut App, command: KeyCommand) -> Option<Effect> {
    let page = i64::from(app.visible_rows.max(1));
    if refused_read_only(app, command) {
        return None;
    }
    match command {
        KeyCommand::Quit => {
            app.quit = true;
            Some(Effect::Quit)
        }
        KeyCommand::Help => {
            app.overlay_scroll = 0;
            app.mode = Mode::Help;
            None
        }
        KeyCommand::Notice => open_notice(app),
        KeyCommand::Up => app.move_selection(-1),
        KeyCommand::Down => app.move_selection(1),
        KeyCommand::PageUp => app.move_selection(-page),
        KeyCommand::PageDown => app.move_selection(page),
        KeyCommand::Top => app.move_selection(i64::MIN / 2),
        KeyCommand::Bottom => app.move_selection(i64::MAX / 2),
        KeyCommand::NextPane => {
            app.focus = match app.focus {
                Pane::Receipts => Pane::Tasks,
                Pane::Tasks => Pane::Blocked,
                Pane::Blocked if app.in_fleet() => Pane::Hosts,
                Pane::Blocked | Pane::Hosts => Pane::Receipts,
            };
            None
        }
        KeyCommand::PrevPane => {
            app.focus = match app.focus {
                Pane::Receipts if app.in_fleet() => Pane::Hosts,
                Pane::Receipts => Pane::Blocked,
                Pane::Tasks => Pane::Receipts,
                Pane::Blocked => Pane::Tasks,
                Pane::Hosts => Pane::Blocked,
            };
            None
        }
        KeyCommand::Hosts => focus_hosts(app),
        KeyCommand::Detail => open_detail(app),
        KeyCommand::Filter => {
            app.mode = Mode::Filter;
            app.filter_before = app.filter.clone();
            None
        }
        KeyCommand::Sort => cycle_sort(app),
        KeyCommand::Reverse => reverse_order(app),
        KeyCommand::Mark => toggle_mark(app),
        KeyCommand::MarkAll => mark_all(app),
        KeyCommand::Pause => toggle_pause(app),
        KeyCommand::ThisTask => filter_to_task(app),
        KeyCommand::MarkClosed => {
            app.filter_before = app.filter.clone();
            app.filter = "task:closed".to_owned();
            app.mark_on_load = true;
            app.focus = Pane::Receipts;
            app.reset_view()
        }
        KeyCommand::Clear => prepare_clear(app),
        KeyCommand::Verify => verify_outcome(app),
        KeyCommand::Stop | KeyCommand::Acknowledge => open_act(app, command),
        KeyCommand::Audit => open_audit(app),
        KeyCommand::Follow => toggle_follow(app),
        KeyCommand::Copy => copy_selected(app),
        KeyCommand::CommandLine => {
            app.mode = Mode::Command(String::new());
            None
        }
        KeyCommand::Refresh => {
            if app.stale() {
                return None;
            }
            app.notice = None;
            Some(Effect::Refresh)
        }
        KeyCommand::Back => go_back(app),
    }
}

/// Opens the last verdict in full, or says there is none yet.
fn open_notice(app: &mut App) -> Option<Effect> {
    if let Some(n) = notice_to_read(app) {
        app.overlay_scroll = 0;
        app.mode = Mode::Notice(n);
    } else {
        app.notice(
            "no notice yet: verdicts of verify, clear, stop and acknowledge are kept here",
            false,
        );
    }
    None
}

/// Focuses the hosts pane, which only a fleet host has.
fn focus_hosts(app: &mut App) -> Option<Effect> {
    if app.in_fleet() {
        app.focus = Pane::Hosts;
    } else {
        app.notice(
            "no hosts pane: this host is not in a fleet (polaris serve --ledger)",
            false,
        );
    }
    None
}

/// Opens the detail of the row under the cursor in the focused pane.
fn open_detail(app: &mut App) -> Option<Effect> {
    match app.focus {
        Pane::Receipts => {
            let id = app.selected_receipt()?.request_id.clone();
            if app.stale() {
                app.notice("disconnected: the detail view needs the host", true);
                return None;
            }
            app.overlay_scroll = 0;
            app.mode = Mode::Detail(Detail::Loading(id.clone()));
            Some(Effect::GetReceipt(id))
        }
        Pane::Hosts => {
            let text = {
                let hosts = app.fleet_hosts();
                let h = hosts.get(app.host_selected)?;
                format!(
                    "host {} · epoch {} · run {} · {} · lease {} · running {} · blocked {}",
                    h.host_id,
                    h.epoch,
                    h.run_id,
                    h.state,
                    lease_text(h.lease_left_ms),
                    h.running,
                    h.blocked
                )
            };
            app.notice(text, false);
            None
        }
        Pane::Tasks | Pane::Blocked => {
            let id = if app.focus == Pane::Tasks {
                app.running_tasks().get(app.task_selected)?.task_id.clone()
            } else {
                app.pending().get(app.blocked_selected)?.task_id.clone()
            };
            if app.stale() {
                app.notice("disconnected: the detail view needs the host", true);
                return None;
            }
            app.overlay_scroll = 0;
            app.mode = Mode::Detail(Detail::Loading(id.clone()));
            Some(Effect::GetTaskHistory(id))
        }
    }
}

/// Sorts by the next key, keeping the selection on its receipt.
fn cycle_sort(app: &mut App) -> Option<Effect> {
    // The selection stays on its receipt, found again in the new order.
    let anchor = app.anchor.clone();
    app.sort = next_sort(app.sort);
    let effect = app.reset_view();
    app.anchor = anchor;
    // Following means the newest receipt, which only newest-first puts on top.
    app.follow = app.follow && app.sort == Sort::Newest && !app.reverse;
    effect
}

/// Reverses the order, keeping the selection on its receipt.
fn reverse_order(app: &mut App) -> Option<Effect> {
    let anchor = app.anchor.clone();
    app.reverse = !app.reverse;
    let effect = app.reset_view();
    app.anchor = anchor;
    app.follow = false;
    effect
}

/// Marks or unmarks the selected receipt for clearing, then moves down.
fn toggle_mark(app: &mut App) -> Option<Effect> {
    let row = app.selected_receipt()?;
    let id = row.request_id.clone();
    if !row.clearable && !app.marked.contains(&id) {
        let why = row.refusal.map_or("not clearable", |r| r.as_str());
        app.notice(
            format!("not clearable now ({why}): {}", id_in_notice(&id)),
            true,
        );
        return None;
    }
    if !app.marked.remove(&id) {
        app.marked.insert(id);
    }
    app.move_selection(1)
}

/// Marks every clearable receipt matching the filter, or drops all marks.
fn mark_all(app: &mut App) -> Option<Effect> {
    if app.local_view() {
        // Every listed row is read: mark them one by one, so space can exclude some.
        let ids: Vec<String> = app
            .page
            .iter()
            .filter(|r| r.clearable)
            .map(|r| r.request_id.clone())
            .collect();
        if ids.iter().all(|id| app.marked.contains(id)) {
            for id in &ids {
                app.marked.remove(id);
            }
        } else {
            app.marked.extend(ids);
        }
        return None;
    }
    if !app.marked.is_empty() {
        app.drop_marks();
        app.notice("unmarked everything", false);
        return None;
    }
    if app.stale() {
        app.notice(
            "disconnected: marking reads the host; wait for the reconnection",
            true,
        );
        return None;
    }
    // The set is read now and marked by ID: what is marked is what the table shows
    // at this moment, however many receipts arrive before the clear.
    let mut params = app.page_params();
    params["offset"] = 0.into();
    params["limit"] = LOCAL_WINDOW.into();
    if params["state"].is_null() {
        params["state"] = "clearable".into();
    }
    app.marking = true;
    Some(Effect::ReadMatching(params))
}

/// Freezes or resumes the live view.
fn toggle_pause(app: &mut App) -> Option<Effect> {
    app.paused = !app.paused;
    if app.paused {
        app.notice(
            "paused: the table and panes stay as they are while the host goes on; p resumes",
            false,
        );
        None
    } else {
        app.notice("resumed live updates", false);
        app.dirty = false;
        app.last_refresh = app.now;
        Some(Effect::Refresh)
    }
}

/// Shows the receipts of the task named by the selected row.
fn filter_to_task(app: &mut App) -> Option<Effect> {
    let task_id = match app.focus {
        Pane::Receipts => app.selected_receipt().and_then(|r| r.task_id.clone()),
        Pane::Tasks => app
            .running_tasks()
            .get(app.task_selected)
            .map(|t| t.task_id.clone()),
        Pane::Blocked => app
            .pending()
            .get(app.blocked_selected)
            .map(|p| p.task_id.clone())
            .filter(|t| !t.is_empty()),
        Pane::Hosts => None,
    };
    let Some(task_id) = task_id else {
        app.notice(
            "t shows one task's receipts: select a row that names a task",
            true,
        );
        return None;
    };
    app.filter_before = app.filter.clone();
    app.filter = task_id;
    app.drop_marks();
    app.focus = Pane::Receipts;
    app.reset_view()
}

/// Asks the host to prepare the clear of the marked receipts.
fn prepare_clear(app: &mut App) -> Option<Effect> {
    let Some(params) = app.prepare_params() else {
        app.notice(
            "mark receipts first (space, or a for all completed ones matching the filter)",
            true,
        );
        return None;
    };
    if app.stale() {
        app.notice(
            "disconnected: clearing needs the host; wait for the reconnection",
            true,
        );
        return None;
    }
    app.mode = Mode::Preparing;
    Some(Effect::Prepare(params))
}

/// Verifies the blocked outcome under the cursor (read-only).
fn verify_outcome(app: &mut App) -> Option<Effect> {
    let Some(p) = app.focused_outcome() else {
        app.notice(
            "v verifies the blocked outcome under the cursor: tab to Blocked outcomes, or select its receipt",
            true,
        );
        return None;
    };
    let task_id = p.task_id.clone();
    if task_id.is_empty() {
        app.notice(
            "this outcome has no task to read the page of: acknowledge it (A) once settled outside Polaris",
            true,
        );
        return None;
    }
    if app.stale() {
        app.notice("disconnected: verification needs the host", true);
        return None;
    }
    if !app.verifying.insert(task_id.clone()) {
        return None;
    }
    app.verify_results
        .insert(task_id.clone(), "verifying…".to_owned());
    Some(Effect::Verify(task_id))
}

/// Opens the reason dialog of a stop or an acknowledgement of the selected row.
fn open_act(app: &mut App, command: KeyCommand) -> Option<Effect> {
    let act = if command == KeyCommand::Stop {
        let task_id = match app.focus {
            Pane::Tasks => app
                .running_tasks()
                .get(app.task_selected)
                .map(|t| t.task_id.clone()),
            _ => app
                .focused_outcome()
                .map(|p| p.task_id.clone())
                .filter(|t| !t.is_empty()),
        };
        let Some(task_id) = task_id else {
            app.notice(
                "no task to stop: select a running task (tab) or a blocked outcome",
                true,
            );
            return None;
        };
        Act::Stop { task_id }
    } else {
        let request_id = match app.focus {
            Pane::Receipts => app.selected_receipt().map(|r| r.request_id.clone()),
            _ => app.focused_outcome().map(|p| p.pending.request_id.clone()),
        };
        let Some(request_id) = request_id else {
            app.notice("no outcome to acknowledge: select a blocked outcome", true);
            return None;
        };
        Act::Acknowledge { request_id }
    };
    if app.stale() {
        app.notice(format!("disconnected: {} needs the host", act.verb()), true);
        return None;
    }
    app.mode = Mode::Act {
        act,
        reason: String::new(),
        stage: ConfirmStage::Reason,
    };
    None
}

/// Opens the audit log.
fn open_audit(app: &mut App) -> Option<Effect> {
    if app.stale() {
        app.notice("disconnected: the audit log needs the host", true);
        return None;
    }
    app.overlay_scroll = 0;
    app.mode = Mode::Audit {
        entries: None,
        failed: None,
    };
    Some(Effect::GetAudit)
}

/// Drops the marks and the filter, saying what was dropped.
fn go_back(app: &mut App) -> Option<Effect> {
    let marks = app.marked.len();
    app.drop_marks();
    app.notice = None;
    if marks > 0 {
        app.notice(
            format!("dropped {marks} marks; nothing was cleared (a or space marks again)"),
            false,
        );
    }
    if !app.filter.is_empty() {
        app.filter.clear();
        return app.reset_view();
    }
    None
}
