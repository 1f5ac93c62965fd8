//! The views drawn over the monitor: help, a receipt's or task's detail, the audit log, the
//! clear dialog and the stop / acknowledge dialog. The long ones scroll (j/k, PgUp/PgDn, g/G)
//! and say where they are.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget, Wrap};

use super::app::{Act, App, ConfirmStage, Detail, Notice};
use super::keymap::{KEYMAP, LINE_COMMANDS};
use super::layout::centered;
use super::panes::{action_of, expectation};
use super::text::{age, clock, fit, plural, result_text, ID, SHORT_ID};
use super::theme::Theme;
use crate::protocol::introspection::{AuditEntry, ClearPrepared};
use crate::protocol::NetworkEvidence;

/// Cuts every line longer than `width` into lines of `width` characters (keeping the first
/// span's style), so the number of rows on screen is known and the end is always reachable.
fn hard_wrap(lines: Vec<Line<'static>>, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        if line.width() <= width {
            out.push(line);
            continue;
        }
        let style = line.spans.first().map_or(Style::new(), |s| s.style);
        let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(width) {
            out.push(Line::styled(chunk.iter().collect::<String>(), style));
        }
    }
    out
}

/// Draws `lines` in a bordered box over `r`, from row `scroll` (clamped so the last page is
/// full), with "lines a–b of n" on the bottom border when they do not all fit.
fn scrolled(lines: Vec<Line<'static>>, title: String, scroll: u16, r: Rect, buf: &mut Buffer) {
    Clear.render(r, buf);
    let block = Block::bordered().title(title);
    let inner = block.inner(r);
    let lines = hard_wrap(lines, inner.width);
    let total = lines.len();
    let height = usize::from(inner.height);
    let first = usize::from(scroll).min(total.saturating_sub(height));
    let block = if total > height {
        block.title_bottom(
            Line::from(format!(
                " lines {}–{} of {total} · j/k PgUp/PgDn g/G ",
                first + 1,
                (first + height).min(total)
            ))
            .right_aligned(),
        )
    } else {
        block
    };
    let shown: Vec<Line> = lines.into_iter().skip(first).take(height).collect();
    Paragraph::new(shown).block(block).render(r, buf);
}

/// The width of the help's key column.
const HELP_KEY: usize = 9;

/// The help: the keymap, then the `:` commands, each sentence wrapped at spaces beside its key
/// (continuation lines indented under the sentence), so no word is cut at any width.
pub(super) fn render_help(app: &App, t: &Theme, area: Rect, buf: &mut Buffer) {
    let r = centered(area, 96, area.height);
    let inner = usize::from(r.width.saturating_sub(2));
    let text_w = inner.saturating_sub(HELP_KEY + 2).max(12);
    let mut lines = vec![
        Line::styled("Keys (the footer shows the same table)", t.bold()),
        Line::raw(""),
    ];
    let entry = |lines: &mut Vec<Line<'static>>, key: String, help: &str| {
        for (i, part) in wrap_words(help, text_w).into_iter().enumerate() {
            let key = if i == 0 { key.clone() } else { String::new() };
            lines.push(Line::from(vec![
                Span::styled(format!("{key:>HELP_KEY$}  "), t.bold()),
                Span::raw(part),
            ]));
        }
    };
    for b in KEYMAP {
        entry(&mut lines, b.label.to_owned(), b.help);
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "Command line (: then enter; a prefix of a name will do)",
        t.bold(),
    ));
    for c in LINE_COMMANDS {
        let said = if c.args.is_empty() {
            c.help.to_owned()
        } else {
            format!("{} — {}", c.args, c.help)
        };
        entry(&mut lines, format!(":{}", c.name), &said);
    }
    lines.push(Line::raw(""));
    for note in [
        "In the clear, stop and acknowledge dialogs: type a reason, enter, then only y acts.",
        "Table columns: j joins (copies that waited), r replays (copies answered later); narrow terminals leave them out.",
        "Here: j/k or PgUp/PgDn scroll; any other key closes.",
    ] {
        lines.extend(wrap_words(note, inner).into_iter().map(Line::raw));
    }
    let height = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, 96, height);
    scrolled(lines, " Help ".into(), app.overlay_scroll, r, buf);
}

/// Splits `text` into lines of at most `width` characters at spaces (a word longer than a
/// line is cut), so a long notice reads whole at any width.
pub fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > width {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..width).collect());
        }
        let word: String = word.into_iter().collect();
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// The current notice whole (its time, then the sentence wrapped to the box), then the
/// earlier ones, newest first, each wrapped too: verdicts stay readable after they left the
/// notice line.
pub(super) fn render_notice(app: &App, t: &Theme, n: &Notice, area: Rect, buf: &mut Buffer) {
    let width = area.width.saturating_sub(4).min(96);
    let inner = usize::from(width.saturating_sub(2));
    let style = |n: &Notice| {
        if n.error {
            t.fg(Color::Red)
        } else {
            t.fg(Color::Cyan)
        }
    };
    let mut lines = vec![Line::styled(format!("said at {}", clock(n.at)), t.dim())];
    lines.extend(
        wrap_words(&n.text, inner)
            .into_iter()
            .map(|l| Line::styled(l, style(n))),
    );
    let earlier: Vec<&Notice> = app.history.iter().rev().filter(|h| *h != n).collect();
    if !earlier.is_empty() {
        lines.push(Line::raw(""));
        lines.push(Line::styled("earlier, newest first:", t.dim()));
        for h in earlier {
            let text = format!("{} {}", clock(h.at), h.text);
            lines.extend(
                wrap_words(&text, inner)
                    .into_iter()
                    .map(|l| Line::styled(l, style(h))),
            );
        }
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled("j/k scroll · any other key closes", t.dim()));
    let height = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, width, height);
    scrolled(lines, " Notices ".into(), app.overlay_scroll, r, buf);
}

pub(super) fn render_detail(app: &App, t: &Theme, d: &Detail, area: Rect, buf: &mut Buffer) {
    let r = centered(
        area,
        area.width.saturating_sub(4),
        area.height.saturating_sub(2),
    );
    let (title, lines): (String, Vec<Line>) = match d {
        Detail::Loading(id) => (format!(" {id} "), vec![Line::raw("reading…")]),
        Detail::Failed(msg) => (
            " Detail ".into(),
            vec![Line::styled(msg.clone(), t.fg(Color::Red))],
        ),
        Detail::Receipt(r) => {
            let count = |n: Option<u64>| n.map_or_else(|| "null".to_owned(), |n| n.to_string());
            let mut lines = vec![Line::from(vec![
                Span::styled("state ", t.bold()),
                Span::raw(format!(
                    "{}  joins {}  replays {}  first seen {}",
                    r.state.as_str(),
                    count(r.joins),
                    count(r.replays),
                    r.first_seen_at.as_deref().unwrap_or("-")
                )),
            ])];
            lines.push(Line::styled("request (canonical)", t.bold()));
            let req = serde_json::to_string(&r.request).unwrap_or_default();
            lines.push(Line::raw(req));
            if let Some(e) = r.reply.as_ref().and_then(|reply| reply.evidence()) {
                evidence_lines(t, &e, &mut lines);
            }
            lines.push(Line::styled("stored reply", t.bold()));
            match &r.reply {
                None => lines.push(Line::styled(
                    "none yet: still running (Esc, then Enter again to re-read)",
                    t.dim(),
                )),
                Some(reply) => {
                    // Through a JSON value, so the keys read sorted at every depth, as the
                    // host writes them.
                    let reply = serde_json::to_value(reply)
                        .and_then(|v| serde_json::to_string_pretty(&v))
                        .unwrap_or_default();
                    lines.extend(reply.lines().map(|l| Line::raw(l.to_owned())));
                }
            }
            (format!(" Receipt {} ", r.request_id), lines)
        }
        Detail::Task {
            task_id,
            task,
            history,
        } => {
            let (title, state, created) = match task {
                Some(task) => (
                    task.title.as_str(),
                    task.state.as_str(),
                    task.created_at.as_str(),
                ),
                None => ("", "", ""),
            };
            let mut lines = vec![
                Line::raw(format!("{title}  state {state}  created {created}")),
                Line::styled("history (newest first)", t.bold()),
            ];
            for h in history {
                lines.push(Line::raw(format!(
                    "{}  {:<14} {:<18} {}",
                    fit(&h.request_id, r.width.saturating_sub(44)),
                    h.method,
                    result_text(h),
                    age(app, &h.first_seen_at)
                )));
            }
            (format!(" Task {task_id} "), lines)
        }
    };
    scrolled(lines, title, app.overlay_scroll, r, buf);
}

/// A receipt's network evidence (SPEC §16), one request a line: what the page sent and how the
/// server answered, the duplicate sends first, flagged. A 2xx is the server's word, not the
/// business outcome; the operator reads it before acknowledging.
fn evidence_lines<'a>(t: &Theme, e: &NetworkEvidence, lines: &mut Vec<Line<'a>>) {
    lines.push(Line::styled(
        format!(
            "network evidence ({} sent{})",
            e.requests.len() as u64 + e.unlisted,
            if e.watching { ", still watched" } else { "" }
        ),
        t.bold(),
    ));
    for d in &e.duplicate_sends {
        lines.push(Line::styled(
            format!(
                "DUPLICATE SEND: {} {} sent {} times",
                d.method, d.url, d.times
            ),
            t.alert(),
        ));
    }
    if e.requests.is_empty() {
        lines.push(Line::styled("nothing sent", t.dim()));
    }
    for q in &e.requests {
        let mut body = match (&q.body_bytes, &q.body_sha256) {
            (Some(n), Some(h)) => format!("  body {n} B sha256 {}", &h[..h.len().min(12)]),
            (Some(n), None) => format!("  body {n} B"),
            _ => String::new(),
        };
        if let Some(why) = q.body_unread {
            body.push_str(&format!("  body not read: {why}"));
        }
        if q.answered_by_service_worker {
            body.push_str("  answered by the page's service worker");
        }
        lines.push(Line::raw(format!(
            "{} {}  {}  sent {}{}{}",
            q.method,
            q.url,
            q.status,
            q.sent_at,
            q.answered_at
                .as_deref()
                .map(|a| format!("  answered {a}"))
                .unwrap_or_default(),
            body
        )));
    }
    if e.unlisted > 0 {
        lines.push(Line::styled(
            format!("and {} more, not listed", e.unlisted),
            t.dim(),
        ));
    }
}

/// The stop / acknowledge dialog: what it does, the reason, then `y`.
/// The stop and acknowledge dialog. Acknowledging shows what is being settled — the action,
/// its expectation and its last verification — and warns when nothing ever verified it.
pub(super) fn render_act(
    app: &App,
    t: &Theme,
    act: &Act,
    reason: &str,
    stage: &ConfirmStage,
    area: Rect,
    buf: &mut Buffer,
) {
    let mut about: Vec<Line> = Vec::new();
    let (title, what) = match act {
        Act::Stop { task_id } => (
            " Stop task ",
            format!("Stop task {task_id}? Nothing is executed and nothing is freed: its agent can do nothing more on it, an unverified outcome stays recorded and its receipts become clearable."),
        ),
        Act::Acknowledge { request_id } => {
            if let Some(p) = app
                .pending()
                .iter()
                .find(|p| p.pending.request_id == *request_id)
            {
                about.push(Line::raw(format!(
                    "Action: {} · expects {} · {}",
                    action_of(p),
                    expectation(&p.pending.expect),
                    if p.code.is_empty() { "OUTCOME_UNCERTAIN" } else { &p.code },
                )));
                match &p.pending.last_verify {
                    Some(v) => about.push(Line::raw(format!(
                        "Last verification: {} at {}",
                        v.outcome.as_str(),
                        v.at
                    ))),
                    None => about.push(Line::styled(
                        "Never verified: nothing in Polaris confirmed or ruled out this effect — acknowledge only what you checked yourself.",
                        t.alert(),
                    )),
                }
            }
            (
                " Acknowledge outcome ",
                format!("Acknowledge {request_id} as settled outside Polaris? Nothing is executed; its receipt becomes clearable."),
            )
        }
    };
    let height = 9 + 2 * about.len() as u16;
    let r = centered(area, area.width.saturating_sub(6).max(20), height);
    Clear.render(r, buf);
    let cursor = if *stage == ConfirmStage::Reason {
        "▏"
    } else {
        ""
    };
    let instruction = match stage {
        ConfirmStage::Reason => Line::raw("Type why (for the audit log), then enter. esc cancels."),
        ConfirmStage::Confirm => Line::styled(
            format!("Press y to {} now. Any other key cancels.", act.verb()),
            t.alert(),
        ),
        ConfirmStage::Committing => Line::raw("Sending…"),
    };
    let mut lines = vec![Line::styled(what, t.bold())];
    lines.extend(about);
    lines.extend([
        Line::raw(""),
        Line::from(vec![
            Span::styled("Reason: ", t.bold()),
            Span::raw(format!("{reason}{cursor}")),
        ]),
        instruction,
    ]);
    let block = Block::bordered().title(title);
    let inner = block.inner(r);
    block.render(r, buf);
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .render(inner, buf);
}

/// The audit log, newest first; with a filter typed, only the clears that removed a matching
/// ID (how an operator finds out what happened to a cleared one).
pub(super) fn render_audit(
    app: &App,
    t: &Theme,
    entries: Option<&[AuditEntry]>,
    failed: Option<&str>,
    area: Rect,
    buf: &mut Buffer,
) {
    let r = centered(
        area,
        area.width.saturating_sub(4),
        area.height.saturating_sub(2),
    );
    // Only the free text names IDs; the console's own tokens (task:, result:, age:) do not.
    let search = app.parsed_filter().search.unwrap_or_default();
    let needle = search.as_str();
    let title = if needle.is_empty() {
        " Audit log (newest first) ".to_owned()
    } else {
        format!(" Audit log · entries naming IDs matching /{needle} ")
    };
    let mut lines: Vec<Line<'static>> = Vec::new();
    match (entries, failed) {
        (_, Some(e)) => lines.push(Line::styled(
            format!("the audit log could not be read: {e}"),
            t.fg(Color::Red),
        )),
        (None, None) => lines.push(Line::raw("reading…")),
        (Some(entries), None) => {
            let id_w = if r.width >= 70 { ID } else { SHORT_ID };
            for e in entries {
                // An acknowledgement or a stop: one line, the verdict first.
                let single = match (&e.acknowledged, &e.stopped) {
                    (Some(a), _) => Some((
                        "acknowledged",
                        format!("{} {} {}", a.code.as_str(), a.method, a.request_id),
                        a.request_id.contains(needle)
                            || a.task_id.as_deref().is_some_and(|t| t.contains(needle)),
                    )),
                    (None, Some(s)) => Some((
                        "stopped",
                        format!("task {} (stop request {})", s.task_id, s.request_id),
                        s.task_id.contains(needle) || s.request_id.contains(needle),
                    )),
                    (None, None) => None,
                };
                if let Some((verdict, what, matches)) = single {
                    if needle.is_empty() || matches {
                        lines.push(Line::styled(
                            format!("{}  {verdict}  {}  — {}", e.at, e.operator, e.reason),
                            t.bold(),
                        ));
                        lines.push(Line::raw(format!("  {what}")));
                    }
                    continue;
                }
                let cleared: Vec<_> = e
                    .cleared
                    .iter()
                    .filter(|c| needle.is_empty() || c.request_id.contains(needle))
                    .collect();
                if cleared.is_empty() {
                    continue;
                }
                lines.push(Line::styled(
                    format!(
                        "{}  {}  cleared {}  — {}",
                        e.at,
                        e.operator,
                        plural(e.cleared.len(), "receipt"),
                        e.reason
                    ),
                    t.bold(),
                ));
                for c in cleared {
                    let result = match (c.ok, c.code) {
                        (true, _) => "ok".to_owned(),
                        (false, Some(code)) => code.as_str().to_owned(),
                        (false, None) => "error".to_owned(),
                    };
                    lines.push(Line::raw(format!(
                        "  {} {:<14} {}",
                        fit(&c.request_id, id_w),
                        c.method,
                        result
                    )));
                }
            }
            if lines.is_empty() {
                lines.push(Line::styled(
                    if needle.is_empty() {
                        "no clears, acknowledgements or stops recorded yet".to_owned()
                    } else {
                        format!("no recorded clear removed an ID matching {needle}: it was never cleared (or before the last 1000 clears)")
                    },
                    t.dim(),
                ));
            }
        }
    }
    scrolled(lines, title, app.overlay_scroll, r, buf);
}

pub(super) fn render_confirm(
    t: &Theme,
    prepared: &ClearPrepared,
    reason: &str,
    stage: &ConfirmStage,
    scroll: usize,
    area: Rect,
    buf: &mut Buffer,
) {
    let r = centered(
        area,
        area.width.saturating_sub(6).max(20),
        area.height.saturating_sub(4),
    );
    Clear.render(r, buf);
    let block = Block::bordered()
        .borders(Borders::ALL)
        .title(" Clear receipts ");
    let inner = block.inner(r);
    block.render(r, buf);
    let n = prepared.clearable.len();
    let request_w = if inner.width >= 100 { ID } else { SHORT_ID };
    let task_w = if inner.width >= 130 { ID } else { SHORT_ID };
    let [head, list, tail] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(1),
        Constraint::Length(3),
    ])
    .areas(inner);
    let errors = prepared.clearable.iter().filter(|c| !c.ok).count();
    Paragraph::new(vec![
        Line::styled(
            format!(
                "Clear {n} receipts? ({} ok, {}, {} refused) Their replies are forgotten:",
                n - errors,
                plural(errors, "error"),
                prepared.refused.len()
            ),
            t.bold(),
        ),
        Line::raw("a re-sent ID then gets RECEIPT_CLEARED. Refused first, then current results:"),
    ])
    .render(head, buf);
    let mut lines: Vec<Line> = Vec::new();
    if !prepared.refused.is_empty() {
        lines.push(Line::styled(
            format!("Refused ({}), kept:", prepared.refused.len()),
            t.bold(),
        ));
        for r in &prepared.refused {
            lines.push(Line::styled(
                format!(" {} {}", r.request_id, r.reason.as_str()),
                t.fg(Color::Yellow),
            ));
        }
        lines.push(Line::styled(format!("To clear ({n}):"), t.bold()));
    }
    for c in &prepared.clearable {
        let style = if c.ok {
            t.fg(Color::Green)
        } else {
            t.fg(Color::Red)
        };
        lines.push(Line::from(vec![
            Span::raw(format!(
                " {} {:<14} {} ",
                fit(&c.request_id, request_w),
                c.method,
                c.task_id.as_deref().map_or("-", |t| fit(t, task_w))
            )),
            Span::styled(format!("{:<18}", c.result_text()), style),
            Span::raw(format!(" joins {} replays {}", c.joins, c.replays)),
        ]));
    }
    let room = list.height as usize;
    let first = scroll.min(lines.len().saturating_sub(room));
    let mut lines: Vec<Line> = lines.into_iter().skip(first).collect();
    if lines.len() > room && room > 0 {
        let more = lines.len() - (room - 1);
        lines.truncate(room - 1);
        lines.push(Line::styled(
            format!(" … {more} more (↑/↓ to scroll)"),
            t.dim(),
        ));
    }
    Paragraph::new(lines).render(list, buf);
    let cursor = if *stage == ConfirmStage::Reason {
        "▏"
    } else {
        ""
    };
    let instruction = match stage {
        ConfirmStage::Reason => {
            Line::raw("Type why (for the audit log), then enter. ↑/↓ scroll, esc cancels.")
        }
        ConfirmStage::Confirm => Line::styled(
            format!("Press y to clear {n} receipts. Any other key cancels."),
            t.alert(),
        ),
        ConfirmStage::Committing => Line::raw("Committing…"),
    };
    Paragraph::new(vec![
        Line::from(vec![
            Span::styled("Reason: ", t.bold()),
            Span::raw(format!("{reason}{cursor}")),
        ]),
        instruction,
        Line::styled(format!("token expires {}", prepared.expires_at), t.dim()),
    ])
    .render(tail, buf);
}
