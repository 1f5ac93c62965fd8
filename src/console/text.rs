//! The words and numbers the console shows: durations, counts, times, IDs cut to fit. Drawing
//! uses them, and so do the keys that put the same text in a notice.

use super::app::{App, Link, Notice};
use crate::protocol::introspection::ReceiptItem;
use crate::protocol::results::ReceiptState;
use crate::protocol::ErrorCode;

/// A duration in ms as `12s`, `5m03s`, `2h10m`, `3d4h`.
pub fn human_duration(ms: i64) -> String {
    let s = (ms / 1000).max(0);
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// `4310` as `4,310`: counts an operator reads at a glance.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// While the host is unreachable the banner says so, in place of any notice; `n` shows it
/// whole like a notice.
pub(super) fn banner_notice(app: &App) -> Option<Notice> {
    let Link::Disconnected {
        since,
        reason,
        attempts,
    } = &app.link
    else {
        return None;
    };
    // The cause comes before the attempt count, so a narrow line keeps it.
    let text = if app.snapshot.is_none() {
        format!(
            "NOT CONNECTED: no host has answered yet ({reason}) — retrying (attempt {attempts}, for {}); is `polaris serve` running on this socket directory?",
            human_duration(app.now - since)
        )
    } else {
        format!(
            "DISCONNECTED for {}: {reason} — data below is stale — reconnecting (attempt {attempts})",
            human_duration(app.now - since)
        )
    };
    Some(Notice {
        text,
        error: true,
        at: app.now,
        while_used: None,
    })
}

/// The notice `n` opens on: the disconnection banner, else the newest notice the history
/// keeps (a passing one, such as a copy's echo, is left out, so the last verdict is first).
pub(super) fn notice_to_read(app: &App) -> Option<Notice> {
    banner_notice(app).or_else(|| {
        app.notice
            .clone()
            .filter(|n| app.history.contains(n))
            .or_else(|| app.history.back().cloned())
    })
}

/// `04:12:03Z`: when a notice was said (UTC, as the host's timestamps are).
pub(super) fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// An RFC 3339 timestamp of the host as ms since the epoch.
pub(super) fn millis_of(ts: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(ts)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// How long ago the host's timestamp `ts` was, as [`human_duration`]; `-` when unreadable.
pub(super) fn age(app: &App, ts: &str) -> String {
    millis_of(ts)
        .map(|t| human_duration(app.now - t))
        .unwrap_or_else(|| "-".to_owned())
}

/// The first [`SHORT_ID`] characters of an ID.
pub(super) fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// An ID as a notice names it, after its verdict: its first [`SHORT_ID`] characters (a prefix
/// every command accepts) and `…` when that cut it, so the verdict never leaves the line.
pub(super) fn id_in_notice(id: &str) -> String {
    if id.len() > usize::from(SHORT_ID) {
        format!("{}…", short(id))
    } else {
        id.to_owned()
    }
}

/// The length of a whole request or task ID.
pub(super) const ID: u16 = 36;
/// The length of an ID cut to fit (still a unique prefix the console and every operator
/// command accept, SPEC §8).
pub(super) const SHORT_ID: u16 = 8;

/// The whole ID in a column of `width` cells, or its first [`SHORT_ID`] characters.
pub(super) fn fit(id: &str, width: u16) -> &str {
    if id.len() <= usize::from(width) {
        id
    } else {
        short(id)
    }
}

/// `text` as it fits in a column of `width` cells: whole, or cut to end in `…`, so a reader
/// can tell a cut name from a whole one.
pub(super) fn ellipsized(text: String, width: u16) -> String {
    let width = usize::from(width);
    if text.chars().count() <= width {
        return text;
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    if width > 0 {
        cut.push('…');
    }
    cut
}

/// A receipt's result column: `…` while running, `ok`, or its error code.
pub(super) fn result_text(r: &ReceiptItem) -> String {
    match (r.state, r.ok) {
        (ReceiptState::Running, _) => "…".to_owned(),
        (_, Some(true)) => "ok".to_owned(),
        (_, Some(false)) => r.code.map_or("error", ErrorCode::as_str).to_owned(),
        _ => "-".to_owned(),
    }
}

/// `1 task`, `3 tasks`.
pub(super) fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// A lease as the hosts pane shows it in at most 6 columns: `9.8s` left, `2m05s` left, or
/// `-12s` / `-3m` / `-2h` since it lapsed (a dead host's says how long ago it stopped renewing).
pub(super) fn lease_text(ms: i64) -> String {
    if ms >= 0 {
        if ms < 100_000 {
            format!("{:.1}s", ms as f64 / 1000.0)
        } else {
            human_duration(ms)
        }
    } else {
        let s = ms.unsigned_abs() / 1000;
        match s {
            0..60 => format!("-{s}s"),
            60..3600 => format!("-{}m", s / 60),
            3600..86_400 => format!("-{}h", s / 3600),
            _ => format!("-{}d", s / 86_400),
        }
    }
}
