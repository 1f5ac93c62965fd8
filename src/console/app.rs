//! The console's state and its only way to change: `update(&mut App, Action) -> Option<Effect>`.
//!
//! `update` does no I/O. Keys, host replies, host events and the clock all arrive as
//! [`Action`]s; whatever needs the host leaves as an [`Effect`] for the network side to run once.
//! Nothing here ever re-issues an operator action (verify, prepare, commit) by itself.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::keymap::{command_for, Command};
use crate::host::Counters;
use crate::protocol::introspection::{
    BlockedOutcome, ChangedEvent, ClearCommitted, ClearPrepareParams, ClearPrepared, EventFrame,
    ReceiptDetail, ReceiptFilter, ReceiptItem, ReceiptsListParams, ReceiptsListResult, Snapshot,
    Sort, StateFilter, TaskSummary,
};
use crate::protocol::results::{TaskState, VerifyResult};

/// The shortest time between two re-reads caused by host changes: a busy host is shown at most
/// twice a second, so a subscribed console costs the host little however busy it is.
pub const REFRESH_EVERY_MS: i64 = 500;

/// Seconds of history in each sparkline.
pub const SPARK_SECONDS: usize = 180;

/// The receipt table's sort orders, in the order `s` cycles through them.
fn next_sort(sort: Sort) -> Sort {
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
    /// Typing a filter.
    Filter,
    /// A detail view.
    Detail(Detail),
    /// Waiting for `receipts.clearPrepare`.
    Preparing,
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
}

/// A reply the network side hands back: the result, or the error code and message.
pub type Reply = Result<Value, OpError>;

/// A call that failed.
#[derive(Clone, Debug, PartialEq)]
pub struct OpError {
    /// The error code (host or client side).
    pub code: String,
    /// The message.
    pub message: String,
    /// Whether the host may or may not have acted (`delivery: unknown`).
    pub unknown: bool,
}

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
    fn roll(&mut self, now_ms: i64) {
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
    fn add(&mut self, now_ms: i64, since: &Counters, now: &Counters) {
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
    /// The filter text.
    pub filter: String,
    /// Receipts marked for clearing.
    pub marked: BTreeSet<String>,
    /// "All completed receipts matching the filter" is marked.
    pub mark_all: bool,
    /// The pane the movement keys act on.
    pub focus: Pane,
    /// Selected running task.
    pub task_selected: usize,
    /// Selected blocked outcome.
    pub blocked_selected: usize,
    /// Tasks whose verification is under way.
    pub verifying: BTreeSet<String>,
    /// The result of the last verification per task, as shown in place.
    pub verify_results: HashMap<String, String>,
    /// Activity per second.
    pub activity: Activity,
    /// Last message.
    pub notice: Option<Notice>,
    /// The keyboard's owner.
    pub mode: Mode,
    /// Set once the operator quit.
    pub quit: bool,
    /// Whether to use colour (off when `NO_COLOR` is set).
    pub color: bool,
    /// The first line of the confirmation dialog's list shown (↑/↓ while typing the reason).
    pub dialog_scroll: usize,
    /// A page read was asked for and not answered yet.
    page_in_flight: bool,
    /// Something changed on the host since the last read.
    dirty: bool,
    /// When the last coalesced re-read was sent (ms).
    last_refresh: i64,
    /// The host's counters at the last sequence number the sparklines include; `None` until
    /// the first snapshot or `changed` frame of a connection.
    counted: Option<(u64, Counters)>,
}

/// Everything that can happen to the console.
#[derive(Clone, Debug)]
pub enum Action {
    /// A key press.
    Key(KeyEvent),
    /// The clock moved (ms since the epoch).
    Tick(i64),
    /// The terminal has this many (columns, rows).
    Resize(u16, u16),
    /// Connected and subscribed.
    Connected,
    /// The connection was lost or could not be made.
    Disconnected {
        /// Why.
        reason: String,
        /// Attempts so far.
        attempts: u32,
    },
    /// A `snapshot` result.
    Snapshot(Value),
    /// A `receipts.list` result for the page at `offset`.
    Page {
        /// The offset asked for.
        offset: u64,
        /// The reply.
        reply: Reply,
    },
    /// An event frame from the subscription.
    Event(Value),
    /// A `receipts.get` result.
    ReceiptDetail(Reply),
    /// A task's receipts for its detail view.
    TaskHistory {
        /// The task.
        task_id: String,
        /// The `receipts.list` reply.
        reply: Reply,
    },
    /// A `task.verifyOutcome` result.
    Verified {
        /// The task.
        task_id: String,
        /// The reply.
        reply: Reply,
    },
    /// A `receipts.clearPrepare` result.
    Prepared(Reply),
    /// A `receipts.clearCommit` result.
    Committed(Reply),
}

/// Work for the network side. Each is run exactly once; none is ever retried by itself.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Leave.
    Quit,
    /// Read `snapshot` and the visible page.
    Refresh,
    /// Read one page of `receipts.list` with these params.
    FetchPage {
        /// The offset (also reported back).
        offset: u64,
        /// The `receipts.list` params.
        params: Value,
    },
    /// Read `receipts.get`.
    GetReceipt(String),
    /// Read a task's receipts.
    GetTaskHistory(String),
    /// Run `task.verifyOutcome` (read-only).
    Verify(String),
    /// Run `receipts.clearPrepare` with these params.
    Prepare(Value),
    /// Run `receipts.clearCommit` once.
    Commit {
        /// The token.
        token: String,
        /// The operator's reason.
        reason: String,
    },
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
            filter: String::new(),
            marked: BTreeSet::new(),
            mark_all: false,
            focus: Pane::Receipts,
            task_selected: 0,
            blocked_selected: 0,
            verifying: BTreeSet::new(),
            verify_results: HashMap::new(),
            activity,
            notice: None,
            mode: Mode::Normal,
            quit: false,
            color: true,
            dialog_scroll: 0,
            page_in_flight: false,
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

    /// The selected receipt, when fetched.
    pub fn selected_receipt(&self) -> Option<&ReceiptItem> {
        self.row(self.selected)
    }

    /// Tasks that are running (the tasks pane).
    pub fn running_tasks(&self) -> Vec<&TaskSummary> {
        self.snapshot
            .iter()
            .flat_map(|s| s.tasks.iter())
            .filter(|t| t.state == TaskState::Running)
            .collect()
    }

    /// The blocked outcomes.
    pub fn pending(&self) -> &[BlockedOutcome] {
        self.snapshot
            .as_ref()
            .map(|s| s.pending.as_slice())
            .unwrap_or(&[])
    }

    /// The `receipts.list` params for the visible window.
    pub fn page_params(&self) -> Value {
        to_params(&ReceiptsListParams {
            offset: Some(self.scroll as usize),
            limit: Some(usize::from(self.visible_rows.max(1))),
            sort: Some(self.sort),
            search: (!self.filter.is_empty()).then(|| self.filter.clone()),
            ..ReceiptsListParams::default()
        })
    }

    fn fetch_page(&mut self) -> Option<Effect> {
        if self.stale() {
            return None;
        }
        self.page_in_flight = true;
        Some(Effect::FetchPage {
            offset: self.scroll,
            params: self.page_params(),
        })
    }

    fn notice(&mut self, text: impl Into<String>, error: bool) {
        self.notice = Some(Notice {
            text: text.into(),
            error,
        });
    }

    /// Keeps the selection inside the list and the scroll window around the selection.
    fn clamp_selection(&mut self) -> bool {
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

    fn move_selection(&mut self, delta: i64) -> Option<Effect> {
        match self.focus {
            Pane::Receipts => {
                let target = (self.selected as i64 + delta).max(0) as u64;
                self.selected = target;
                if self.clamp_selection() {
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
        }
    }

    fn prepare_params(&self) -> Option<Value> {
        let params = if self.mark_all {
            ClearPrepareParams {
                filter: Some(ReceiptFilter {
                    state: Some(StateFilter::Completed),
                    search: (!self.filter.is_empty()).then(|| self.filter.clone()),
                    ..ReceiptFilter::default()
                }),
                ..ClearPrepareParams::default()
            }
        } else if !self.marked.is_empty() {
            ClearPrepareParams {
                request_ids: Some(self.marked.iter().cloned().collect()),
                ..ClearPrepareParams::default()
            }
        } else {
            return None;
        };
        Some(to_params(&params))
    }
}

fn step(current: usize, delta: i64, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (current as i64 + delta).clamp(0, len as i64 - 1) as usize
}

/// Params as the network side sends them.
fn to_params<T: serde::Serialize>(params: &T) -> Value {
    serde_json::to_value(params).expect("params serialise")
}

/// A host reply read as the result type of the method that was called.
fn read<T: DeserializeOwned>(what: &str, v: Value) -> Result<T, String> {
    T::deserialize(&v).map_err(|e| format!("the host's {what} could not be read: {e}"))
}

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

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
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

fn on_key(app: &mut App, key: KeyEvent) -> Option<Effect> {
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
            app.mode = Mode::Normal;
            None
        }
        Mode::Detail(_) => {
            if ctrl_c {
                app.quit = true;
                return Some(Effect::Quit);
            }
            if matches!(key.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q')) {
                app.mode = Mode::Normal;
            }
            None
        }
        Mode::Filter => {
            match key.code {
                KeyCode::Enter => app.mode = Mode::Normal,
                KeyCode::Esc => {
                    app.mode = Mode::Normal;
                    app.filter.clear();
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
            app.selected = 0;
            app.scroll = 0;
            app.mark_all = false;
            app.fetch_page()
        }
        Mode::Preparing => {
            if ctrl_c {
                app.quit = true;
                return Some(Effect::Quit);
            }
            None
        }
        Mode::Confirm {
            prepared,
            mut reason,
            stage,
        } => match stage {
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
        },
        Mode::Normal => {
            let command = command_for(&key)?;
            on_command(app, command)
        }
    }
}

fn on_command(app: &mut App, command: Command) -> Option<Effect> {
    let page = i64::from(app.visible_rows.max(1));
    match command {
        Command::Quit => {
            app.quit = true;
            Some(Effect::Quit)
        }
        Command::Help => {
            app.mode = Mode::Help;
            None
        }
        Command::Up => app.move_selection(-1),
        Command::Down => app.move_selection(1),
        Command::PageUp => app.move_selection(-page),
        Command::PageDown => app.move_selection(page),
        Command::Top => app.move_selection(i64::MIN / 2),
        Command::Bottom => app.move_selection(i64::MAX / 2),
        Command::NextPane => {
            app.focus = match app.focus {
                Pane::Receipts => Pane::Tasks,
                Pane::Tasks => Pane::Blocked,
                Pane::Blocked => Pane::Receipts,
            };
            None
        }
        Command::Detail => match app.focus {
            Pane::Receipts => {
                let id = app.selected_receipt()?.request_id.clone();
                if app.stale() {
                    app.notice("disconnected: the detail view needs the host", true);
                    return None;
                }
                app.mode = Mode::Detail(Detail::Loading(id.clone()));
                Some(Effect::GetReceipt(id))
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
                app.mode = Mode::Detail(Detail::Loading(id.clone()));
                Some(Effect::GetTaskHistory(id))
            }
        },
        Command::Filter => {
            app.mode = Mode::Filter;
            None
        }
        Command::Sort => {
            app.sort = next_sort(app.sort);
            app.selected = 0;
            app.scroll = 0;
            app.fetch_page()
        }
        Command::Mark => {
            let row = app.selected_receipt()?;
            let id = row.request_id.clone();
            if !row.clearable && !app.marked.contains(&id) {
                let why = row.refusal.map_or("not clearable", |r| r.as_str());
                app.notice(format!("{} cannot be cleared now: {why}", short(&id)), true);
                return None;
            }
            app.mark_all = false;
            if !app.marked.remove(&id) {
                app.marked.insert(id);
            }
            app.move_selection(1)
        }
        Command::MarkAll => {
            app.mark_all = !app.mark_all;
            app.marked.clear();
            None
        }
        Command::Clear => {
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
        Command::Verify => {
            let Some(p) = app.pending().get(app.blocked_selected) else {
                app.notice("no blocked outcome to verify", true);
                return None;
            };
            let task_id = p.task_id.clone();
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
        Command::Refresh => {
            if app.stale() {
                return None;
            }
            app.notice = None;
            Some(Effect::Refresh)
        }
        Command::Back => {
            app.marked.clear();
            app.mark_all = false;
            app.notice = None;
            if !app.filter.is_empty() {
                app.filter.clear();
                app.selected = 0;
                app.scroll = 0;
                return app.fetch_page();
            }
            None
        }
    }
}
