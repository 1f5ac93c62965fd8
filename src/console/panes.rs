//! The running tasks, blocked outcomes and fleet hosts panes: they grow with the terminal,
//! scroll to their selection and show whole IDs where the width allows.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Row, StatefulWidget, Table, TableState, Widget};

use super::app::{App, Pane};
use super::layout::share;
use super::text::{age, ellipsized, fit, lease_text, thousands, ID, SHORT_ID};
use super::theme::Theme;
use crate::protocol::introspection::BlockedOutcome;
use crate::protocol::{Command, ExecutorCommand, Expect, ExpectCheck, Method, PageAction};

pub(super) fn render_tasks(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let tasks = app.running_tasks();
    let focus = app.focus == Pane::Tasks;
    let block = Block::bordered()
        .title(format!(" Running tasks {} ", tasks.len()))
        .title_bottom(position(app.task_selected, tasks.len()))
        .border_style(if focus { t.bold() } else { t.dim() });
    let id_w = if area.width.saturating_sub(2) >= ID + 20 {
        ID
    } else {
        SHORT_ID
    };
    let title_w = area.width.saturating_sub(2 + id_w + 6 + 2).max(6);
    let rows: Vec<Row> = tasks
        .iter()
        .enumerate()
        .map(|(i, task)| {
            let row = Row::new(vec![
                fit(&task.task_id, id_w).to_owned(),
                ellipsized(task.title.clone(), title_w),
                age(app, &task.updated_at),
            ]);
            if focus && i == app.task_selected {
                row.style(t.selected())
            } else {
                row
            }
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(id_w),
            Constraint::Length(title_w),
            Constraint::Length(6),
        ],
    )
    .column_spacing(1)
    .block(block);
    let mut state = TableState::default().with_selected(Some(app.task_selected));
    StatefulWidget::render(table, area, buf, &mut state);
}

/// "3 of 20" on a pane's bottom border, when it has rows.
fn position(selected: usize, len: usize) -> Line<'static> {
    if len == 0 {
        return Line::raw("");
    }
    Line::from(format!(
        " {} of {} ",
        thousands(selected.min(len - 1) as u64 + 1),
        thousands(len as u64)
    ))
    .right_aligned()
}

/// `press Enter #title`, `click #submit`: the pending action, read from its params as the
/// bridge reads them.
pub(super) fn action_of(p: &BlockedOutcome) -> String {
    let pending = &p.pending;
    let command = pending
        .method
        .parse::<Method>()
        .ok()
        .and_then(|m| Command::parse(m, &pending.params, &|_| Ok(())).ok());
    let action = match &command {
        Some(Command::Execute(ExecutorCommand::Act(a))) => Some(&a.action),
        _ => None,
    };
    let key = match action {
        Some(PageAction::Press { key, .. }) => format!(" {key}"),
        _ => String::new(),
    };
    let target = action
        .and_then(PageAction::target)
        .map(ToString::to_string)
        .unwrap_or_default();
    format!(
        "{}{key} {target}",
        pending.method.trim_start_matches("page."),
    )
}

/// `#status~Saved` for a `contains` expectation, `#status=Saved` for `equals`, `(local)` for a
/// local step sent without one.
pub(super) fn expectation(expect: &Option<Expect>) -> String {
    let Some(expect) = expect else {
        return "(local)".to_owned();
    };
    let target = &expect.subject;
    match &expect.check {
        ExpectCheck::Equals(v) => format!("{target}={v}"),
        ExpectCheck::Contains(v) => format!("{target}~{v}"),
    }
}

/// The task state column of the blocked outcomes (`interrupted` is the longest word).
const STATE_W: u16 = 11;

/// Below this inner width the blocked outcomes leave out the request and since columns.
const COMPACT_BELOW: u16 = 64;

/// The unsettled outcomes, as the host lists them (`snapshot.pending`): each row is a receipt
/// whose outcome nobody has settled, with its task's state; the title's count is the one
/// `run.status` reports as `receipts.unsettled`.
pub(super) fn render_blocked(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let pending = app.pending();
    let focus = app.focus == Pane::Blocked;
    let block = Block::bordered()
        .title(format!(" Blocked outcomes {} ", pending.len()))
        .title_bottom(position(app.blocked_selected, pending.len()))
        .border_style(if focus {
            t.bold()
        } else if pending.is_empty() {
            t.dim()
        } else {
            t.fg(Color::Magenta)
        });
    // Whole IDs wherever the width allows: the request ID first, then the task ID. Narrow,
    // the request and since columns go (Enter and A name the request) so that the action and
    // its expectation keep a readable width.
    let inner = area.width.saturating_sub(2);
    let compact = inner < COMPACT_BELOW;
    let keep = |i: usize| !compact || !matches!(i, 2 | 5);
    let narrow: u16 = SHORT_ID + STATE_W + 1 + SHORT_ID + 5 + 12 + 16 + 5;
    let request_w = if inner >= narrow + (ID - SHORT_ID) {
        ID
    } else if area.width >= 60 {
        SHORT_ID
    } else {
        4
    };
    let task_w = if inner >= narrow + 2 * (ID - SHORT_ID) {
        ID
    } else {
        SHORT_ID
    };
    let fixed: &[u16] = if compact {
        &[task_w, STATE_W, 12]
    } else {
        &[task_w, STATE_W, request_w, 5, 12]
    };
    let [action_w, expect_w] = share(inner, fixed, [8, 8]);
    let column_widths = [task_w, STATE_W, request_w, action_w, expect_w, 5, 12];
    // A heading cut to its column ends in `…`, like every cut name.
    let header = Row::new(
        [
            "task", "state", "request", "action", "expect", "since", "verified",
        ]
        .into_iter()
        .zip(column_widths)
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(_, (h, w))| ellipsized(h.to_owned(), w)),
    )
    .style(t.bold());
    let rows: Vec<Row> = pending
        .iter()
        .enumerate()
        .map(|(i, p)| {
            // An execution a host run stopped under has no expectation to read: its code says
            // what it is.
            let expect = match (&p.pending.expect, p.code.as_str()) {
                (None, "INTERRUPTED") => "INTERRUPTED".to_owned(),
                (e, _) => expectation(e),
            };
            let task = if p.task_id.is_empty() {
                "-"
            } else {
                &p.task_id
            };
            let state = p.task_state.map_or("-", |s| s.as_str());
            let verified = app
                .verify_results
                .get(&p.task_id)
                .cloned()
                .or_else(|| {
                    p.pending
                        .last_verify
                        .as_ref()
                        .map(|l| l.outcome.as_str().to_owned())
                })
                .unwrap_or_else(|| "never".to_owned());
            let cells = [
                fit(task, task_w).to_owned(),
                state.to_owned(),
                fit(&p.pending.request_id, request_w).to_owned(),
                ellipsized(action_of(p), action_w),
                ellipsized(expect, expect_w),
                age(app, &p.pending.since),
                verified,
            ];
            let row = Row::new(
                cells
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| keep(*i))
                    .map(|(_, c)| c),
            );
            if i == app.blocked_selected && (focus || app.focus != Pane::Tasks) {
                row.style(if focus { t.selected() } else { t.bold() })
            } else {
                row
            }
        })
        .collect();
    let widths: Vec<Constraint> = column_widths
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(_, w)| Constraint::Length(w))
        .collect();
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .block(block);
    let mut state = TableState::default().with_selected(Some(app.blocked_selected));
    StatefulWidget::render(table, area, buf, &mut state);
}

/// The fleet's hosts (SPEC §13): every host run the ledger knows, with its state, lease left,
/// running receipts and blocked tasks. This host's run is marked `*`; a dead host is red, and
/// the title counts the hosts by state.
pub(super) fn render_hosts(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let hosts = app.fleet_hosts();
    let focus = app.focus == Pane::Hosts;
    let own = app.own_epoch();
    let count = |state: &str| hosts.iter().filter(|h| h.state == state).count();
    let (alive, dead, left) = (count("alive"), count("dead"), count("left"));
    let mut title = vec![Span::raw(format!(" Hosts {alive} alive"))];
    if dead > 0 {
        title.push(Span::raw(" · "));
        title.push(Span::styled(
            format!("{dead} DEAD"),
            t.fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    if left > 0 {
        title.push(Span::raw(format!(" · {left} left")));
    }
    title.push(Span::raw(" "));
    let block = Block::bordered()
        .title(Line::from(title))
        .title_bottom(position(app.host_selected, hosts.len()))
        .border_style(if focus { t.bold() } else { t.dim() });
    let inner = area.width.saturating_sub(2);
    // state 5, lease 6, running 3, blocked 3, and one space between columns.
    let host_w = inner.saturating_sub(5 + 6 + 3 + 3 + 4).max(4);
    let header = Row::new(vec!["host", "state", "lease", "run", "blk"]).style(t.bold());
    let rows: Vec<Row> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let mark = if Some(h.epoch) == own { "*" } else { "" };
            let name = format!("{mark}{}", h.host_id);
            let name = ellipsized(name, host_w);
            let (lease, lease_style) = match h.state.as_str() {
                "alive" if h.lease_left_ms < 0 => (lease_text(h.lease_left_ms), t.fg(Color::Red)),
                "alive" => (lease_text(h.lease_left_ms), Style::new()),
                "dead" => (lease_text(h.lease_left_ms), t.fg(Color::Red)),
                _ => ("-".to_owned(), t.dim()),
            };
            let state_style = match h.state.as_str() {
                "alive" => t.fg(Color::Green),
                "dead" => t.fg(Color::Red).add_modifier(Modifier::BOLD),
                _ => t.dim(),
            };
            let blocked_style = if h.blocked > 0 {
                t.fg(Color::Magenta)
            } else {
                Style::new()
            };
            let mut row = Row::new(vec![
                Span::raw(name),
                Span::styled(h.state.clone(), state_style),
                Span::styled(lease, lease_style),
                Span::raw(format!("{:>3}", compact(h.running))),
                Span::styled(format!("{:>3}", compact(h.blocked)), blocked_style),
            ]);
            if h.state == "dead" {
                row = row.style(t.fg(Color::Red));
            }
            if focus && i == app.host_selected {
                row = row.style(t.selected());
            }
            row
        })
        .collect();
    let widths = [
        Constraint::Length(host_w),
        Constraint::Length(5),
        Constraint::Length(6),
        Constraint::Length(3),
        Constraint::Length(3),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .block(block);
    let mut state = TableState::default().with_selected(Some(app.host_selected));
    StatefulWidget::render(table, area, buf, &mut state);
    if hosts.is_empty() {
        let line = Rect::new(area.x + 1, area.y + 2, inner, 1);
        Line::styled("not read yet", t.dim()).render(line, buf);
    }
}

/// A count in 3 columns: `999`, then `1k`, `12k`, `1M`.
fn compact(n: u64) -> String {
    match n {
        0..1000 => n.to_string(),
        1000..1_000_000 => format!("{}k", n / 1000),
        _ => format!("{}M", n / 1_000_000),
    }
}
