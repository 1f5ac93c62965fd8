//! Drawing: a pure function of [`App`]. Only the visible rows of the receipt table exist here,
//! so a frame costs the same with ten receipts or a million. The header, figures, receipt
//! table and footer are drawn here; the task, blocked and hosts panes in `panes.rs`, the
//! overlays in `overlays.rs`, all into the areas `layout.rs` computes.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Gauge, Paragraph, Row, Sparkline, Table, Widget};

use super::app::{App, ConfirmStage, Link, Mode, Notice, Pane};
use super::keymap::footer_hints;
use super::layout::{areas, centered, fits, share, MIN_COLS, MIN_ROWS};
use super::overlays::{
    render_act, render_audit, render_confirm, render_detail, render_help, render_notice,
};
use super::panes::{render_blocked, render_hosts, render_tasks};
use super::text::{
    age, banner_notice, clock, ellipsized, fit, human_duration, millis_of, result_text, short,
    thousands, ID, SHORT_ID,
};
use super::theme::Theme;
use crate::protocol::introspection::{ReceiptItem, RefusalReason};
use crate::protocol::ErrorCode;

/// The cut that ends a notice too long for its line: `n` shows it whole.
pub const NOTICE_CUT: &str = " … (n: whole)";

/// A notice on its one line with its time; one longer than `width` ends in [`NOTICE_CUT`].
fn notice_line(n: &Notice, width: u16) -> String {
    cut_to(format!(" {} {}", clock(n.at), n.text), width)
}

/// `line` as it fits in `width` columns: whole, or cut to end in [`NOTICE_CUT`].
fn cut_to(line: String, width: u16) -> String {
    let width = usize::from(width);
    if line.chars().count() <= width {
        return line;
    }
    let keep = width.saturating_sub(NOTICE_CUT.chars().count());
    let mut cut: String = line.chars().take(keep).collect();
    cut.push_str(NOTICE_CUT);
    cut
}

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = Theme { color: self.color };
        if !fits(area.width, area.height) {
            render_too_small(self, &theme, area, buf);
            return;
        }
        let a = areas(area, self.in_fleet());
        render_header(self, &theme, a.header, buf);
        render_capacity(self, &theme, a.capacity, buf);
        if !a.activity.is_empty() {
            render_activity(self, &theme, a.activity, buf);
        }
        render_table(self, &theme, a.table, buf);
        render_tasks(self, &theme, a.tasks, buf);
        render_blocked(self, &theme, a.blocked, buf);
        if let Some(hosts) = a.hosts {
            render_hosts(self, &theme, hosts, buf);
        }
        render_footer(self, &theme, a.footer, buf);
        match &self.mode {
            Mode::Help => render_help(self, &theme, area, buf),
            Mode::Notice(n) => render_notice(self, &theme, n, area, buf),
            Mode::Detail(d) => render_detail(self, &theme, d, area, buf),
            Mode::Act { act, reason, stage } => {
                render_act(self, &theme, act, reason, stage, area, buf)
            }
            Mode::Audit { entries, failed } => render_audit(
                self,
                &theme,
                entries.as_deref(),
                failed.as_deref(),
                area,
                buf,
            ),
            Mode::Preparing => {
                let r = centered(area, 40, 3);
                Clear.render(r, buf);
                Paragraph::new("preparing the clear…")
                    .block(Block::bordered().title(" Clear "))
                    .render(r, buf);
            }
            Mode::Confirm {
                prepared,
                reason,
                stage,
            } => render_confirm(
                &theme,
                prepared,
                reason,
                stage,
                self.dialog_scroll,
                area,
                buf,
            ),
            Mode::Normal | Mode::Filter | Mode::Command(_) => {}
        }
    }
}

/// Below the smallest size: the connection state and what to do, nothing cut.
fn render_too_small(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let link = match &app.link {
        Link::Connecting => "connecting",
        Link::Connected => "connected",
        Link::Disconnected { .. } => "DISCONNECTED",
    };
    let lines = vec![
        Line::styled(format!("Polaris console · {link}"), t.bold()),
        Line::raw(format!(
            "terminal too small: {}×{}; the console needs {MIN_COLS}×{MIN_ROWS}.",
            area.width, area.height
        )),
        Line::raw("Enlarge the window, or press q to quit."),
    ];
    Paragraph::new(lines)
        .wrap(ratatui::widgets::Wrap { trim: true })
        .render(area, buf);
}

fn render_header(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let [top, banner] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).areas(area);
    let (run, uptime) = match (&app.snapshot, &app.link) {
        // A host that is gone is not up: say for how long it has been unreachable.
        (Some(s), Link::Disconnected { since, .. }) => (
            short(&s.run_id).to_owned(),
            format!("down {}", human_duration(app.now - since)),
        ),
        (Some(s), _) => (
            short(&s.run_id).to_owned(),
            format!(
                "up {}",
                millis_of(&s.started_at)
                    .map(|st| human_duration(app.now - st))
                    .unwrap_or_else(|| "-".into())
            ),
        ),
        (None, _) => ("-".to_owned(), "up -".to_owned()),
    };
    let (link, link_style) = match &app.link {
        Link::Connecting => ("connecting".to_owned(), t.fg(Color::Yellow)),
        Link::Connected => {
            let mut said = vec!["connected"];
            if app.paused {
                said.push("PAUSED");
            }
            if app.follow {
                said.push("FOLLOW");
            }
            if app.read_only {
                said.push("read-only");
            }
            let style = t.fg(if app.paused {
                Color::Yellow
            } else {
                Color::Green
            });
            (said.join(" · "), style)
        }
        Link::Disconnected { .. } => ("DISCONNECTED".to_owned(), t.alert()),
    };
    // The connection state is drawn last and right-aligned, so nothing before it can cut it.
    let link_w = link.chars().count() as u16 + 3;
    let [left, right] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(link_w)]).areas(top);
    // The socket path takes what the rest leaves and is cut with `…` (never by the edge);
    // where it would be cut, the title and the word "host" give way first.
    let full = (
        " Polaris console ",
        format!("│ run {run} │ {uptime} │ host "),
    );
    let compact = (" Polaris ", format!("│ run {run} │ {uptime} │ "));
    let room = |(title, facts): &(&str, String)| {
        left.width
            .saturating_sub((title.chars().count() + facts.chars().count() + 1) as u16)
    };
    let (title, facts) = if usize::from(room(&full)) >= app.host_label.chars().count() {
        full
    } else {
        compact
    };
    let room = room(&(title, facts.clone()));
    let line = if room >= 4 {
        Line::from(vec![
            Span::styled(title, t.bold()),
            Span::raw(format!(
                "{facts}{} ",
                ellipsized(app.host_label.clone(), room)
            )),
        ])
    } else {
        Line::raw(ellipsized(
            format!("{title}{facts}{}", app.host_label),
            left.width.saturating_sub(1),
        ))
    };
    line.render(left, buf);
    Line::from(vec![Span::raw("│ "), Span::styled(link, link_style)]).render(right, buf);
    let down = banner_notice(app);
    let line = match (&app.link, &app.notice) {
        (Link::Disconnected { .. }, _) => Line::styled(
            cut_to(
                format!(" {}", down.map(|d| d.text).unwrap_or_default()),
                banner.width,
            ),
            t.alert(),
        ),
        (_, Some(n)) if n.error => Line::styled(
            notice_line(n, banner.width),
            t.fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        (_, Some(n)) => Line::styled(notice_line(n, banner.width), t.fg(Color::Cyan)),
        (_, None) if app.book_full() => Line::styled(
            " BOOK FULL: new IDs refused. D marks closed tasks' receipts, c clears them",
            t.alert(),
        ),
        (Link::Connecting, None) => Line::styled(" connecting to the host…", t.dim()),
        _ => Line::raw(""),
    };
    line.render(banner, buf);
}

fn render_capacity(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let stale = match (&app.snapshot, app.stale()) {
        (None, _) => " (no data yet)",
        (Some(_), true) => " (stale)",
        (Some(_), false) => "",
    };
    // A full book is said here too: the notice line may be holding a verdict.
    let block = if app.book_full() && stale.is_empty() {
        Block::bordered().title(Line::styled(" Capacity · BOOK FULL: D, then c ", t.alert()))
    } else {
        Block::bordered().title(format!(" Capacity{stale} "))
    };
    let inner = block.inner(area);
    block.render(area, buf);
    let [gauge, l1, l2, l3] = Layout::vertical([Constraint::Length(1); 4]).areas(inner);
    let (cap, counters) = match &app.snapshot {
        Some(s) => (s.receipts.clone(), s.counters),
        None => Default::default(),
    };
    let fraction = |used: u64, max: u64| {
        if max == 0 {
            0.0
        } else {
            (used as f64 / max as f64).clamp(0.0, 1.0)
        }
    };
    // Whichever bound of the book is fuller: the receipt count or its bytes.
    let by_count = fraction(cap.used, cap.capacity);
    let by_bytes = fraction(cap.used_bytes, cap.max_bytes);
    let (ratio, label) = if by_bytes > by_count {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let (used, max) = (mib(cap.used_bytes), mib(cap.max_bytes));
        (
            by_bytes,
            format!("{used:.1}/{max:.0} MiB {:.0}%", by_bytes * 100.0),
        )
    } else {
        let (used, max) = (cap.used, cap.capacity);
        (
            by_count,
            format!("{used}/{max} receipts {:.0}%", by_count * 100.0),
        )
    };
    Gauge::default()
        .ratio(ratio)
        .label(label)
        .gauge_style(t.gauge(ratio))
        .use_unicode(true)
        .render(gauge, buf);
    Line::raw(format!(
        "executing {}  tombstones {}/{}",
        cap.running, cap.tombstones, cap.tombstone_capacity
    ))
    .render(l1, buf);
    // Every refusal, by why: the total is their sum.
    let style = if counters.rejected_capacity > 0 {
        t.fg(Color::Red)
    } else {
        Style::new()
    };
    Line::styled(
        format!(
            "refused {}: full {}  reused {}",
            thousands(counters.refusals()),
            thousands(counters.rejected_capacity),
            thousands(counters.rejected_reused)
        ),
        style,
    )
    .render(l2, buf);
    Line::raw(format!(
        "  cleared ID {}  to blocked task {}",
        thousands(counters.rejected_cleared),
        thousands(counters.rejected_blocked)
    ))
    .render(l3, buf);
}

fn render_activity(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered().title(" Activity per second ");
    let inner = block.inner(area);
    block.render(area, buf);
    let [a, b, c, scale] = Layout::vertical([Constraint::Length(1); 4]).areas(inner);
    let rows = [a, b, c];
    let width = usize::from(inner.width.saturating_sub(9));
    let tail = |data: &std::collections::VecDeque<u64>| -> Vec<u64> {
        data.iter()
            .skip(data.len().saturating_sub(width))
            .copied()
            .collect()
    };
    // One scale for the three lines, so 1,208 executions and 94 refusals do not look alike.
    let max = [
        &app.activity.executions,
        &app.activity.replays,
        &app.activity.refusals,
    ]
    .into_iter()
    .flat_map(&tail)
    .max()
    .unwrap_or(0)
    .max(1);
    Line::styled(
        format!(
            "max {}/s, one scale · last {}",
            thousands(max),
            human_duration(width as i64 * 1000)
        ),
        t.dim(),
    )
    .render(scale, buf);
    let series = [
        ("exec", &app.activity.executions, Color::Green),
        ("repl", &app.activity.replays, Color::Cyan),
        ("refu", &app.activity.refusals, Color::Red),
    ];
    for (row, (label, data, color)) in rows.into_iter().zip(series) {
        let [l, s] = Layout::horizontal([Constraint::Length(9), Constraint::Min(1)]).areas(row);
        // The last complete second: the current one is still counting.
        let now = data.iter().rev().nth(1).copied().unwrap_or(0);
        Line::raw(format!("{label} {now:>4}")).render(l, buf);
        Sparkline::default()
            .data(tail(data))
            .max(max)
            .style(t.fg(color))
            .render(s, buf);
    }
}

/// The receipt table: one row per receipt in view, whole IDs wherever the width allows.
fn render_table(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let focus = app.focus == Pane::Receipts;
    let block = table_block(app, t, focus);
    // Whole IDs wherever the width allows: the request ID first, then the task ID.
    let inner = area.width.saturating_sub(2);
    let narrow: u16 = 2 + SHORT_ID + 11 + SHORT_ID + 9 + 17 + 5 + 3 + 3 + 5 + 9;
    let request_w = if inner >= narrow + (ID - SHORT_ID) {
        ID
    } else {
        SHORT_ID
    };
    let task_w = if inner >= narrow + 2 * (ID - SHORT_ID) {
        ID
    } else {
        SHORT_ID
    };
    let cols = table_columns(inner, request_w, task_w);
    let rows_visible = area.height.saturating_sub(3) as u64;
    let mut rows = Vec::with_capacity(rows_visible as usize);
    for i in app.scroll..(app.scroll + rows_visible).min(app.total) {
        rows.push(match app.row(i) {
            Some(r) => receipt_row(app, t, i, r, &cols, [request_w, task_w], focus),
            None => Row::new(vec![" ".to_owned(), "…".to_owned()]).style(t.dim()),
        });
    }
    let mut widths = vec![
        Constraint::Length(2),
        Constraint::Length(request_w),
        Constraint::Length(cols.method),
        Constraint::Length(task_w),
        Constraint::Length(9),
        Constraint::Length(cols.result),
        Constraint::Length(5),
    ];
    let mut names = vec!["", "request", "method", "task", "state", "result", "age"];
    if cols.counts {
        widths.extend([Constraint::Length(3), Constraint::Length(3)]);
        names.extend(["j", "r"]);
    }
    widths.push(Constraint::Length(5));
    names.push("clear");
    let header = Row::new(names).style(t.bold());
    let empty = app.total == 0;
    Widget::render(
        Table::new(rows, widths)
            .header(header)
            .column_spacing(1)
            .block(block),
        area,
        buf,
    );
    if empty {
        let inner = Rect::new(area.x + 2, area.y + 2, area.width.saturating_sub(4), 1);
        let text = if app.filter.is_empty() {
            "no receipts yet"
        } else {
            "no receipt matches the filter"
        };
        Line::styled(text, t.dim()).render(inner, buf);
    }
}

/// The receipt table's frame: the count, sort, filter, marks and staleness on top, the
/// selected row's place at the bottom.
fn table_block<'a>(app: &App, t: &Theme, focus: bool) -> Block<'a> {
    let mut title = format!(
        " Receipts {} · sort {}{} ",
        app.total,
        app.sort.as_str(),
        if app.reverse { ", reversed" } else { "" }
    );
    if !app.filter.is_empty() || app.mode == Mode::Filter {
        let cursor = if app.mode == Mode::Filter { "▏" } else { "" };
        title.push_str(&format!("· /{}{cursor} ", app.filter));
    }
    if !app.marked.is_empty() {
        title.push_str(&format!("· {} marked ", app.marked.len()));
    }
    if app.stale() && app.snapshot.is_some() {
        title.push_str("· stale ");
    }
    let position = if app.total == 0 {
        String::new()
    } else {
        format!(
            " {} of {} ",
            thousands(app.selected + 1),
            thousands(app.total)
        )
    };
    Block::bordered()
        .title(title)
        .title_bottom(Line::from(position).right_aligned())
        .border_style(if focus { t.bold() } else { t.dim() })
}

/// The table row of receipt `r`, the `i`th in the table, with the request and task ID
/// columns at the widths given.
fn receipt_row<'a>(
    app: &App,
    t: &Theme,
    i: u64,
    r: &ReceiptItem,
    cols: &TableColumns,
    [request_w, task_w]: [u16; 2],
    focus: bool,
) -> Row<'a> {
    let marked = app.marked.contains(&r.request_id);
    // The cursor sits on the anchored receipt only, never on a row that took its place.
    let here = i == app.selected
        && app
            .selected_receipt()
            .is_some_and(|s| s.request_id == r.request_id);
    let cursor = if here && focus { '>' } else { ' ' };
    let mark = format!("{cursor}{}", if marked { '*' } else { ' ' });
    let id = fit(&r.request_id, request_w);
    let result = result_text(r);
    let result_style = match (r.ok, r.code) {
        (Some(true), _) => t.fg(Color::Green),
        (_, Some(ErrorCode::OutcomeUncertain | ErrorCode::Internal)) => t.fg(Color::Magenta),
        (Some(false), _) => t.fg(Color::Red),
        _ => t.fg(Color::Yellow),
    };
    let clear = match (r.clearable, r.refusal) {
        (true, _) => "yes",
        (false, Some(RefusalReason::Running)) => "run",
        (false, Some(RefusalReason::UnverifiedOutcome)) => "unver",
        (false, _) => "no",
    };
    let state = r.state.as_str();
    let mut cells = vec![
        Span::raw(mark),
        Span::raw(id.to_owned()),
        Span::raw(ellipsized(r.method.clone(), cols.method)),
        Span::raw(
            r.task_id
                .as_deref()
                .map_or("-", |t| fit(t, task_w))
                .to_owned(),
        ),
        Span::raw(state.to_owned()),
        Span::styled(result, result_style),
        Span::raw(age(app, &r.first_seen_at)),
    ];
    if cols.counts {
        cells.push(Span::raw(r.joins.to_string()));
        cells.push(Span::raw(r.replays.to_string()));
    }
    cells.push(Span::raw(clear.to_owned()));
    let row = Row::new(cells);
    if here && focus {
        row.style(t.selected())
    } else {
        row
    }
}

/// The receipt table's flexible columns at one width.
struct TableColumns {
    /// The method column's width.
    method: u16,
    /// The result column's width (17: `OUTCOME_UNCERTAIN` whole).
    result: u16,
    /// Whether the joins and replays columns are shown.
    counts: bool,
}

/// The narrowest method column: `page.fill` whole, `task.start` as `task.sta…`.
const METHOD_MIN: u16 = 9;

/// The method and result columns in `inner` cells beside the fixed ones: a result code is
/// never cut while the method can give way, and the method never goes under [`METHOD_MIN`]
/// while the joins and replays columns (the least needed) can go instead.
fn table_columns(inner: u16, request_w: u16, task_w: u16) -> TableColumns {
    let fit = |fixed: &[u16]| {
        let [mut method, mut result] = share(inner, fixed, [11, 17]);
        if result < 17 {
            let room = method + result;
            result = room.min(17);
            method = room - result;
        }
        (method, result)
    };
    let (method, result) = fit(&[2, request_w, task_w, 9, 5, 3, 3, 5]);
    if method >= METHOD_MIN {
        return TableColumns {
            method,
            result,
            counts: true,
        };
    }
    let (method, result) = fit(&[2, request_w, task_w, 9, 5, 5]);
    TableColumns {
        method,
        result,
        counts: false,
    }
}

fn render_footer(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let hints: Vec<(&str, &str)> = match &app.mode {
        Mode::Normal => footer_hints(),
        Mode::Help => vec![("j/k", "scroll"), ("any other key", "close")],
        Mode::Notice(_) => vec![("any key", "close")],
        Mode::Filter => vec![
            ("enter", "keep filter"),
            ("esc", "drop filter"),
            ("type", "filter"),
        ],
        Mode::Command(_) => vec![("enter", "run"), ("tab", "complete"), ("esc", "cancel")],
        Mode::Detail(_) | Mode::Audit { .. } => {
            vec![("j/k PgUp/PgDn", "scroll"), ("esc/enter", "close")]
        }
        Mode::Act {
            stage: ConfirmStage::Reason,
            ..
        } => vec![("type", "reason"), ("enter", "continue"), ("esc", "cancel")],
        Mode::Act {
            stage: ConfirmStage::Confirm,
            ..
        } => vec![("y", "do it now"), ("any other key", "cancel")],
        Mode::Act {
            stage: ConfirmStage::Committing,
            ..
        } => vec![("", "sending")],
        Mode::Preparing => vec![("", "waiting for the host")],
        Mode::Confirm {
            stage: ConfirmStage::Reason,
            ..
        } => vec![("type", "reason"), ("enter", "continue"), ("esc", "cancel")],
        Mode::Confirm {
            stage: ConfirmStage::Confirm,
            ..
        } => vec![("y", "clear now"), ("any other key", "cancel")],
        Mode::Confirm {
            stage: ConfirmStage::Committing,
            ..
        } => vec![("", "committing")],
    };
    let mut spans = Vec::new();
    if let Mode::Command(line) = &app.mode {
        spans.push(Span::styled(format!(":{line}▏"), t.bold()));
    }
    // Whole hints only: one that would be cut by the edge is left out (`?` lists them all).
    let mut used: usize = spans.iter().map(|s| s.width()).sum();
    for (k, h) in hints {
        let key = if k.is_empty() {
            String::new()
        } else {
            format!(" {k}")
        };
        let hint = format!(" {h}");
        let width = key.chars().count() + hint.chars().count();
        if used + width > usize::from(area.width) {
            break;
        }
        used += width;
        if !key.is_empty() {
            spans.push(Span::styled(key, t.bold().patch(t.fg(Color::Cyan))));
        }
        spans.push(Span::raw(hint));
    }
    Line::from(spans).render(area, buf);
}
