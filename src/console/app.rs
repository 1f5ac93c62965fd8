//! The console's state. It changes only in `update(&mut App, Action) -> Option<Effect>`
//! (`update.rs`, with the keys in `input.rs`); drawing it is `ui.rs`'s.
//!
//! `update` does no I/O. Keys, host replies, host events and the clock all arrive as
//! [`Action`]s; whatever needs the host leaves as an [`Effect`] for the network side to run once.
//! Nothing here ever re-issues an operator action (verify, prepare, commit) by itself.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crossterm::event::KeyEvent;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::filter::{Filter, LOCAL_WINDOW};
pub use super::messages::{Act, Action, Effect, OpError, Reply};
use crate::host::Counters;
use crate::protocol::introspection::{
    AuditEntry, BlockedOutcome, ClearPrepareParams, ClearPrepared, ReceiptDetail, ReceiptItem,
    ReceiptsListParams, Snapshot, Sort, TaskSummary,
};
use crate::protocol::results::{FleetHost, TaskState};

/// The shortest time between two re-reads caused by host changes: a busy host is shown at most
/// twice a second, so a subscribed console costs the host little however busy it is.
pub const REFRESH_EVERY_MS: i64 = 500;

/// How far above the selection the console looks for its receipt when it left the window.
const LOCATE_BEFORE: u64 = 200;
/// How many rows it reads then (the host's largest page).
const LOCATE_WINDOW: u64 = 1000;

/// How often the console re-reads a fleet host's snapshot even when nothing changed on that
/// host: the hosts pane (leases, other hosts' numbers) is read by the host every second, so
/// a quiet host's console still shows a lease running out or a host dying.
pub const FLEET_REFRESH_MS: i64 = 1000;

/// Seconds of history in each sparkline.
pub const SPARK_SECONDS: usize = 180;

/// The receipt table's sort orders, in the order `s` cycles through them.
pub(super) fn next_sort(sort: Sort) -> Sort {
    match sort {
        Sort::Newest => Sort::Oldest,
        Sort::Oldest => Sort::State,
        Sort::State => Sort::Method,
        Sort::Method => Sort::Task,
        Sort::Task => Sort::Newest,
    }
}

/// Which pane the movement keys act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pane {
    /// The receipt table.
    Receipts,
    /// Running tasks.
    Tasks,
    /// Blocked outcomes.
    Blocked,
    /// The fleet's hosts (only with a host of a fleet, SPEC §13).
    Hosts,
}

/// The connection to the host, as the header shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum Link {
    /// Not connected yet.
    Connecting,
    /// Connected and subscribed.
    Connected,
    /// The connection is gone; the data on screen is stale.
    Disconnected {
        /// When it was lost (ms).
        since: i64,
        /// Why.
        reason: String,
        /// Reconnection attempts so far.
        attempts: u32,
    },
}

/// Where the confirmation dialog is.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfirmStage {
    /// The operator types the reason (Enter to go on).
    Reason,
    /// Only `y` commits; any other key cancels.
    Confirm,
    /// The commit was sent; waiting for the host.
    Committing,
}

/// The detail view's content.
#[derive(Clone, Debug, PartialEq)]
pub enum Detail {
    /// Waiting for the host.
    Loading(String),
    /// A receipt from `receipts.get` (boxed: it is much larger than the other views).
    Receipt(Box<ReceiptDetail>),
    /// A task with its receipts, newest first.
    Task {
        /// The task.
        task_id: String,
        /// The task as the last snapshot showed it, when it did (boxed, as a receipt is).
        task: Option<Box<TaskSummary>>,
        /// Its receipts.
        history: Vec<ReceiptItem>,
    },
    /// The read failed.
    Failed(String),
}

/// What has the keyboard.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// The monitor.
    Normal,
    /// The help overlay.
    Help,
    /// A notice shown whole, wrapped (kept here, so it stays while read after it expires).
    Notice(Notice),
    /// Typing a filter.
    Filter,
    /// Typing a `:` command (the text after the colon).
    Command(String),
    /// A detail view.
    Detail(Detail),
    /// Waiting for `receipts.clearPrepare`.
    Preparing,
    /// Stopping a task or acknowledging an outcome: a reason, then `y`.
    Act {
        /// What is done.
        act: Act,
        /// The reason being typed.
        reason: String,
        /// Where the dialog is (`Committing` once sent).
        stage: ConfirmStage,
    },
    /// The audit log (`audit.list`), narrowed to the filter when one is typed.
    Audit {
        /// The entries, newest first; `None` while they are read.
        entries: Option<Vec<AuditEntry>>,
        /// Why they could not be read.
        failed: Option<String>,
    },
    /// The confirmation dialog.
    Confirm {
        /// The prepared clear: the token the commit needs and the current result of each
        /// receipt it would clear.
        prepared: ClearPrepared,
        /// The reason being typed.
        reason: String,
        /// Where the dialog is.
        stage: ConfirmStage,
    },
}

/// A message for the operator at the bottom of the screen.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The text.
    pub text: String,
    /// Whether it is a problem.
    pub error: bool,
    /// When it was said (ms since the epoch), shown beside it.
    pub at: i64,
    /// It reports this many receipts used, and goes once the book holds another number.
    pub while_used: Option<u64>,
}

/// How many notices `n` keeps.
pub const NOTICE_HISTORY: usize = 20;

/// How long a notice that is not a problem stays up.
pub const NOTICE_MS: i64 = 30_000;

/// Per-second activity for the sparklines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Activity {
    /// The second the last bucket is for.
    pub second: i64,
    /// Executions per second, oldest first.
    pub executions: VecDeque<u64>,
    /// Replays per second.
    pub replays: VecDeque<u64>,
    /// Refusals per second.
    pub refusals: VecDeque<u64>,
}

impl Activity {
    pub(super) fn roll(&mut self, now_ms: i64) {
        let second = now_ms.div_euclid(1000);
        if self.executions.is_empty() {
            self.second = second;
            for q in [&mut self.executions, &mut self.replays, &mut self.refusals] {
                q.push_back(0);
            }
            return;
        }
        let steps = (second - self.second).clamp(0, SPARK_SECONDS as i64);
        for _ in 0..steps {
            for q in [&mut self.executions, &mut self.replays, &mut self.refusals] {
                q.push_back(0);
                while q.len() > SPARK_SECONDS {
                    q.pop_front();
                }
            }
        }
        if second > self.second {
            self.second = second;
        }
    }

    /// Adds what happened since the last counted change to the current second.
    pub(super) fn add(&mut self, now_ms: i64, since: &Counters, now: &Counters) {
        self.roll(now_ms);
        for (q, n) in [
            (
                &mut self.executions,
                now.executions.saturating_sub(since.executions),
            ),
            (&mut self.replays, now.replays.saturating_sub(since.replays)),
            (
                &mut self.refusals,
                now.refusals().saturating_sub(since.refusals()),
            ),
        ] {
            if let Some(last) = q.back_mut() {
                *last += n;
            }
        }
    }
}

/// The console's whole state. Owned by the main loop; rendering reads it, `update` changes it.
#[derive(Clone, Debug)]
pub struct App {
    /// "Now" in ms since the epoch, set by ticks so renders are deterministic.
    pub now: i64,
    /// What the header calls the host (the socket directory).
    pub host_label: String,
    /// The connection.
    pub link: Link,
    /// The last snapshot (stale while disconnected).
    pub snapshot: Option<Snapshot>,
    /// Total receipts matching the filter.
    pub total: u64,
    /// The fetched page of the receipt table and its offset.
    pub page_offset: u64,
    /// Rows of the fetched page.
    pub page: Vec<ReceiptItem>,
    /// The first visible row.
    pub scroll: u64,
    /// The selected row (absolute index in the filtered, sorted list).
    pub selected: u64,
    /// Receipt rows the table can show at the current terminal size.
    pub visible_rows: u16,
    /// The terminal size (columns, rows).
    pub size: (u16, u16),
    /// The sort order.
    pub sort: Sort,
    /// `S`: the sort order read from its end.
    pub reverse: bool,
    /// The filter text.
    pub filter: String,
    /// The filter before `/` was pressed, restored by Esc.
    pub filter_before: String,
    /// Mark every clearable row of the next page read (the "closed tasks" key).
    pub mark_on_load: bool,
    /// Receipts marked for clearing.
    pub marked: BTreeSet<String>,
    /// The pane the movement keys act on.
    pub focus: Pane,
    /// Selected running task.
    pub task_selected: usize,
    /// Selected blocked outcome.
    pub blocked_selected: usize,
    /// Selected host in the hosts pane.
    pub host_selected: usize,
    /// Tasks whose verification is under way.
    pub verifying: BTreeSet<String>,
    /// The result of the last verification per task, as shown in place.
    pub verify_results: HashMap<String, String>,
    /// Activity per second.
    pub activity: Activity,
    /// Last message.
    pub notice: Option<Notice>,
    /// The last [`NOTICE_HISTORY`] notices, oldest first: a verdict that left the notice line
    /// (a busy host replaces it quickly) is still one `n` away.
    pub history: VecDeque<Notice>,
    /// The keyboard's owner.
    pub mode: Mode,
    /// Set once the operator quit.
    pub quit: bool,
    /// Whether to use colour (off when `NO_COLOR` is set).
    pub color: bool,
    /// The first line of the confirmation dialog's list shown (↑/↓ while typing the reason).
    pub dialog_scroll: usize,
    /// The first line shown of the detail view, the help or the audit log.
    pub overlay_scroll: u16,
    /// The request ID the selection is on: the selection stays on this receipt while others
    /// arrive, leave or move (`None` until the row under the selection is read).
    pub anchor: Option<String>,
    /// `f`: the selection follows the newest receipt (the top row of the newest-first sort)
    /// as receipts arrive, until the operator moves it or sorts otherwise; the header says
    /// FOLLOW. Off, the selection stays on its receipt. On at start.
    pub follow: bool,
    /// `p`: live updates are paused — the table and panes stay as they are (moving still
    /// reads the rows it needs) until `p` again.
    pub paused: bool,
    /// Started with `--read-only`: verify, stop, acknowledge and clear are refused here, so a
    /// console left open on a shared screen cannot change the host.
    pub read_only: bool,
    /// Keys typed while the console waits for the host (a page under the selection, a prepared
    /// clear); they are handled in order once it answers, so no key is lost or reordered.
    pub queued: VecDeque<KeyEvent>,
    /// Effects produced while handling queued keys, for the network side to run in order.
    pub outbox: Vec<Effect>,
    /// The number of the last page read asked for; only its reply is shown.
    pub(super) page_seq: u64,
    /// The last page read asked for looks for the anchored receipt in a wide window.
    pub(super) locating: bool,
    /// A page read was asked for and not answered yet.
    pub(super) page_in_flight: bool,
    /// `a` is reading the receipts it marks: keys wait, so a `c` typed right after it clears
    /// what it marked.
    pub(super) marking: bool,
    /// Something changed on the host since the last read.
    pub(super) dirty: bool,
    /// When the last coalesced re-read was sent (ms).
    pub(super) last_refresh: i64,
    /// The host's counters at the last sequence number the sparklines include; `None` until
    /// the first snapshot or `changed` frame of a connection.
    pub(super) counted: Option<(u64, Counters)>,
}

impl App {
    /// A console for the host at `host_label`, at time `now` (ms), not yet connected.
    pub fn new(host_label: impl Into<String>, now: i64) -> App {
        let mut activity = Activity::default();
        activity.roll(now);
        App {
            now,
            host_label: host_label.into(),
            link: Link::Connecting,
            snapshot: None,
            total: 0,
            page_offset: 0,
            page: Vec::new(),
            scroll: 0,
            selected: 0,
            visible_rows: 10,
            size: (80, 24),
            sort: Sort::Newest,
            reverse: false,
            filter: String::new(),
            filter_before: String::new(),
            mark_on_load: false,
            marked: BTreeSet::new(),
            focus: Pane::Receipts,
            task_selected: 0,
            blocked_selected: 0,
            host_selected: 0,
            verifying: BTreeSet::new(),
            verify_results: HashMap::new(),
            activity,
            notice: None,
            history: VecDeque::new(),
            mode: Mode::Normal,
            quit: false,
            color: true,
            dialog_scroll: 0,
            overlay_scroll: 0,
            anchor: None,
            follow: true,
            paused: false,
            read_only: false,
            queued: VecDeque::new(),
            outbox: Vec::new(),
            page_seq: 0,
            locating: false,
            page_in_flight: false,
            marking: false,
            dirty: false,
            last_refresh: i64::MIN / 2,
            counted: None,
        }
    }

    /// Whether the data on screen may be out of date.
    pub fn stale(&self) -> bool {
        !matches!(self.link, Link::Connected)
    }

    /// The receipt row at absolute index `i`, when it is in the fetched page.
    pub fn row(&self, i: u64) -> Option<&ReceiptItem> {
        i.checked_sub(self.page_offset)
            .and_then(|k| self.page.get(k as usize))
    }

    /// The selected receipt, when fetched and still the anchored one: a key never acts on a
    /// row the operator has not seen under the selection.
    pub fn selected_receipt(&self) -> Option<&ReceiptItem> {
        if self.locating {
            return None;
        }
        self.row(self.selected)
            .filter(|r| self.anchor.as_ref().is_none_or(|a| *a == r.request_id))
    }

    /// Whether the book is full: new request IDs are being refused.
    pub fn book_full(&self) -> bool {
        self.snapshot
            .as_ref()
            .is_some_and(|s| s.receipts.capacity > 0 && s.receipts.used >= s.receipts.capacity)
    }

    /// The number of the last page read asked for.
    pub fn page_seq(&self) -> u64 {
        self.page_seq
    }

    /// Whether keys must wait for the host before they can be handled: the clear is being
    /// prepared or committed, or the row under the selection is still being read.
    pub fn waiting(&self) -> bool {
        match &self.mode {
            Mode::Preparing
            | Mode::Confirm {
                stage: ConfirmStage::Committing,
                ..
            }
            | Mode::Act {
                stage: ConfirmStage::Committing,
                ..
            } => true,
            Mode::Normal => {
                self.marking
                    || (self.focus == Pane::Receipts
                        && self.page_in_flight
                        && self.selected_receipt().is_none())
            }
            _ => false,
        }
    }

    /// Whether a clear, stop or acknowledgement was confirmed and is being sent: its dialog
    /// is still open until the host answers.
    pub fn committing(&self) -> bool {
        matches!(
            self.mode,
            Mode::Confirm {
                stage: ConfirmStage::Committing,
                ..
            } | Mode::Act {
                stage: ConfirmStage::Committing,
                ..
            }
        )
    }

    /// Puts the selection on absolute row `i` and anchors it to that row's receipt when read.
    pub(super) fn select_row(&mut self, i: u64) {
        self.selected = i;
        self.anchor = self.row(i).map(|r| r.request_id.clone());
    }

    /// Tasks that are running (the tasks pane).
    pub fn running_tasks(&self) -> Vec<&TaskSummary> {
        self.snapshot
            .iter()
            .flat_map(|s| s.tasks.iter())
            .filter(|t| t.state == TaskState::Running)
            .collect()
    }

    /// Whether the host is a host of a fleet (`--ledger`): only then is there a hosts pane.
    pub fn in_fleet(&self) -> bool {
        self.snapshot.as_ref().is_some_and(|s| s.ledger.is_some())
    }

    /// The fleet's host runs as the hosts pane lists them: alive ones first (by name), then
    /// dead, then those that left (newest first within each), so the hosts that serve are
    /// always on screen and a dead one is right below them.
    pub fn fleet_hosts(&self) -> Vec<&FleetHost> {
        let mut hosts: Vec<&FleetHost> = self
            .snapshot
            .iter()
            .filter_map(|s| s.ledger.as_ref())
            .flat_map(|l| l.hosts.iter())
            .collect();
        let rank = |h: &FleetHost| match h.state.as_str() {
            "alive" => 0,
            "dead" => 1,
            _ => 2,
        };
        hosts.sort_by(|a, b| {
            rank(a).cmp(&rank(b)).then_with(|| {
                if rank(a) == 0 {
                    a.host_id.cmp(&b.host_id).then(b.epoch.cmp(&a.epoch))
                } else {
                    b.epoch.cmp(&a.epoch)
                }
            })
        });
        hosts
    }

    /// This host run's epoch in the fleet, when it is in one.
    pub fn own_epoch(&self) -> Option<i64> {
        self.snapshot
            .as_ref()
            .and_then(|s| s.ledger.as_ref())
            .map(|l| l.epoch)
    }

    /// The blocked outcomes.
    pub fn pending(&self) -> &[BlockedOutcome] {
        self.snapshot
            .as_ref()
            .map(|s| s.pending.as_slice())
            .unwrap_or(&[])
    }

    /// The blocked outcome the focused pane's cursor is on, as drawn: the Blocked pane's
    /// selection, or the outcome of the receipt selected in the table. Never another pane's
    /// selection the operator is not looking at.
    pub fn focused_outcome(&self) -> Option<&BlockedOutcome> {
        match self.focus {
            Pane::Blocked => self.pending().get(self.blocked_selected),
            Pane::Receipts => {
                let id = &self.selected_receipt()?.request_id;
                self.pending().iter().find(|p| p.pending.request_id == *id)
            }
            Pane::Tasks | Pane::Hosts => None,
        }
    }

    /// The `receipts.list` params for the visible window.
    pub fn page_params(&self) -> Value {
        let filter = self.parsed_filter();
        let (offset, limit) = if filter.local() {
            (0, LOCAL_WINDOW)
        } else {
            (self.scroll as usize, usize::from(self.visible_rows.max(1)))
        };
        to_params(&ReceiptsListParams {
            offset: Some(offset),
            limit: Some(limit),
            sort: Some(self.sort),
            reverse: self.reverse.then_some(true),
            state: filter.state(),
            search: filter.search,
            ..ReceiptsListParams::default()
        })
    }

    /// The filter as typed, read into the host's part and the console's part.
    pub fn parsed_filter(&self) -> Filter {
        Filter::parse(&self.filter)
    }

    /// Whether the receipt list is narrowed by the console itself (all its rows are read at
    /// once, so moving never reads again).
    pub fn local_view(&self) -> bool {
        self.parsed_filter().local()
    }

    /// The state of every task the last snapshot showed, by ID.
    pub fn task_states(&self) -> HashMap<&str, TaskState> {
        self.snapshot
            .iter()
            .flat_map(|s| s.tasks.iter())
            .map(|t| (t.task_id.as_str(), t.state))
            .collect()
    }

    pub(super) fn fetch_page(&mut self) -> Option<Effect> {
        if self.stale() {
            return None;
        }
        self.page_in_flight = true;
        self.locating = false;
        self.page_seq += 1;
        let offset = if self.local_view() { 0 } else { self.scroll };
        Some(Effect::FetchPage {
            offset,
            seq: self.page_seq,
            params: self.page_params(),
        })
    }

    /// A new view (filter or sort): the top row is selected and the rows of the old view are
    /// forgotten, so no key acts on them while the new ones are read.
    pub(super) fn reset_view(&mut self) -> Option<Effect> {
        self.selected = 0;
        self.scroll = 0;
        self.anchor = None;
        self.page.clear();
        self.fetch_page()
    }

    /// Reads a wide window around the selection to find where the anchored receipt went.
    pub(super) fn locate(&mut self) -> Option<Effect> {
        let mut effect = self.fetch_page()?;
        self.locating = true;
        if let Effect::FetchPage { offset, params, .. } = &mut effect {
            *offset = self.selected.saturating_sub(LOCATE_BEFORE);
            params["offset"] = Value::from(*offset);
            params["limit"] = Value::from(LOCATE_WINDOW);
        }
        Some(effect)
    }

    /// Says `text` on the notice line and keeps it in the history `n` shows.
    pub(super) fn notice(&mut self, text: impl Into<String>, error: bool) {
        let n = Notice {
            text: text.into(),
            error,
            at: self.now,
            while_used: None,
        };
        if self.history.len() == NOTICE_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(n.clone());
        self.notice = Some(n);
    }

    /// Says `text` on the notice line without keeping it in the history `n` shows: for what
    /// is only an echo of a key (a copy), so it never stands before a verdict there.
    pub(super) fn passing_notice(&mut self, text: impl Into<String>) {
        self.notice = Some(Notice {
            text: text.into(),
            error: false,
            at: self.now,
            while_used: None,
        });
    }

    /// Keeps the selection inside the list and the scroll window around the selection.
    pub(super) fn clamp_selection(&mut self) -> bool {
        let rows = u64::from(self.visible_rows.max(1));
        if self.total == 0 {
            self.selected = 0;
        } else if self.selected >= self.total {
            self.selected = self.total - 1;
        }
        let old = self.scroll;
        if self.selected < self.scroll {
            self.scroll = self.selected;
        } else if self.selected >= self.scroll + rows {
            self.scroll = self.selected + 1 - rows;
        }
        let max_scroll = self.total.saturating_sub(rows);
        if self.scroll > max_scroll {
            self.scroll = max_scroll;
        }
        old != self.scroll
    }

    pub(super) fn move_selection(&mut self, delta: i64) -> Option<Effect> {
        match self.focus {
            Pane::Receipts => {
                let target = (self.selected as i64 + delta).max(0) as u64;
                self.selected = target;
                let moved = self.clamp_selection();
                self.select_row(self.selected);
                // Any movement by the operator stops following the newest receipt.
                self.follow = false;
                if moved && !self.local_view() {
                    return self.fetch_page();
                }
                None
            }
            Pane::Tasks => {
                let n = self.running_tasks().len();
                self.task_selected = step(self.task_selected, delta, n);
                None
            }
            Pane::Blocked => {
                let n = self.pending().len();
                self.blocked_selected = step(self.blocked_selected, delta, n);
                None
            }
            Pane::Hosts => {
                let n = self.fleet_hosts().len();
                self.host_selected = step(self.host_selected, delta, n);
                None
            }
        }
    }

    /// Drops every mark.
    pub(super) fn drop_marks(&mut self) {
        self.marked.clear();
    }

    /// The `receipts.clearPrepare` params for the marked receipts, by ID; `None` when none
    /// is marked.
    pub(super) fn prepare_params(&self) -> Option<Value> {
        if self.marked.is_empty() {
            return None;
        }
        Some(to_params(&ClearPrepareParams {
            request_ids: Some(self.marked.iter().cloned().collect()),
            ..ClearPrepareParams::default()
        }))
    }
}

pub(super) fn step(current: usize, delta: i64, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (current as i64 + delta).clamp(0, len as i64 - 1) as usize
}

/// Params as the network side sends them.
pub(super) fn to_params<T: serde::Serialize>(params: &T) -> Value {
    serde_json::to_value(params).expect("params serialise")
}

/// A host reply read as the result type of the method that was called.
pub(super) fn read<T: DeserializeOwned>(what: &str, v: Value) -> Result<T, String> {
    T::deserialize(&v).map_err(|e| format!("the host's {what} could not be read: {e}"))
}
