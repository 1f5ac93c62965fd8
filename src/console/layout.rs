//! Where each part of the screen is: the geometry drawing lays out and a mouse click is read
//! against, so what is drawn and what a click hits never disagree.

use ratatui::layout::{Constraint, Layout, Rect};

const HEADER: u16 = 2;
const TOP_BAND: u16 = 6;
const BOTTOM_PANES: u16 = 6;
const FOOTER: u16 = 1;
/// The smallest terminal the monitor is drawn in; below it the console says so.
pub const MIN_COLS: u16 = 72;
/// See [`MIN_COLS`].
pub const MIN_ROWS: u16 = 20;

/// Where each pane is: the layout rendering and mouse clicks share.
pub struct Areas {
    /// The header lines.
    pub header: Rect,
    /// The capacity gauge.
    pub capacity: Rect,
    /// The sparklines (empty where a fleet host's hosts pane takes their place).
    pub activity: Rect,
    /// The receipt table.
    pub table: Rect,
    /// Running tasks.
    pub tasks: Rect,
    /// Blocked outcomes.
    pub blocked: Rect,
    /// The fleet's hosts, for a host of a fleet.
    pub hosts: Option<Rect>,
    /// The key hints.
    pub footer: Rect,
}

/// Whether the terminal is large enough for the monitor.
pub fn fits(cols: u16, rows: u16) -> bool {
    cols >= MIN_COLS && rows >= MIN_ROWS
}

/// From this width a fleet host's hosts pane sits beside the task and blocked panes; below
/// it, the pane takes the place of the activity sparklines, so the blocked outcomes keep
/// their action and expectation columns and the receipt table keeps its rows.
const HOSTS_BESIDE_PANES: u16 = 120;

/// The hosts pane's width beside the task and blocked panes (the host name gets 22 columns).
const HOSTS_WIDTH: u16 = 44;

/// The layout of a terminal area: the task and blocked panes grow with the terminal (a
/// third of what the header, figures and footer leave), the receipt table takes the rest. A
/// host of a fleet (`fleet`) gets the hosts pane: at the right of the task and blocked panes
/// from [`HOSTS_BESIDE_PANES`] columns, else in place of the activity sparklines.
pub fn areas(area: Rect, fleet: bool) -> Areas {
    let free = area.height.saturating_sub(HEADER + TOP_BAND + FOOTER);
    let bottom = (free / 3).max(BOTTOM_PANES);
    let [header, top, table, bottom, footer] = Layout::vertical([
        Constraint::Length(HEADER),
        Constraint::Length(TOP_BAND),
        Constraint::Min(4),
        Constraint::Length(bottom),
        Constraint::Length(FOOTER),
    ])
    .areas(area);
    let [capacity, activity] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(top);
    let (activity, bottom, hosts) = match fleet {
        false => (activity, bottom, None),
        true if area.width < HOSTS_BESIDE_PANES => (Rect::default(), bottom, Some(activity)),
        true => {
            let [rest, hosts] =
                Layout::horizontal([Constraint::Min(0), Constraint::Length(HOSTS_WIDTH)])
                    .areas(bottom);
            (activity, rest, Some(hosts))
        }
    };
    let [tasks, blocked] =
        Layout::horizontal([Constraint::Percentage(35), Constraint::Percentage(65)]).areas(bottom);
    Areas {
        header,
        capacity,
        activity,
        table,
        tasks,
        blocked,
        hosts,
        footer,
    }
}

/// How many receipt rows the table shows on a terminal of this size (what the console asks the
/// host for).
pub fn table_rows(cols: u16, rows: u16) -> u16 {
    areas(Rect::new(0, 0, cols, rows), false)
        .table
        .height
        .saturating_sub(3)
        .max(1)
}

/// Widths of two flexible columns beside fixed ones in `inner` cells with one space between
/// columns: at least `min` each, the rest shared evenly, so the layout never depends on the
/// constraint solver's choice.
pub(super) fn share(inner: u16, fixed: &[u16], min: [u16; 2]) -> [u16; 2] {
    let spacing = (fixed.len() + 1) as u16;
    let used: u16 = fixed.iter().sum::<u16>() + spacing;
    let room = inner.saturating_sub(used);
    if room <= min[0] + min[1] {
        let first = (room * min[0]) / (min[0] + min[1]).max(1);
        return [first, room - first];
    }
    let extra = room - min[0] - min[1];
    [min[0] + extra / 2, min[1] + extra - extra / 2]
}

/// A box of at most `width` by `height` in the middle of `area` (an overlay's place).
pub(super) fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}
