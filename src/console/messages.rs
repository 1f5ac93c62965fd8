//! What flows into the console's `update` ([`Action`]: keys, host replies, events, the clock)
//! and out of it ([`Effect`]: what the network side runs once), the replies it gets back, and
//! the operator actions ([`Act`]) both carry.

use crossterm::event::KeyEvent;
use serde_json::Value;

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

/// Everything that can happen to the console.
#[derive(Clone, Debug)]
pub enum Action {
    /// A key press.
    Key(KeyEvent),
    /// The mouse: the wheel moves the selection of the pane under it, a click selects a row.
    Mouse(crossterm::event::MouseEvent),
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
        /// The read's number, from [`Effect::FetchPage`].
        seq: u64,
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
    /// The result of a stop or an acknowledgement.
    Acted {
        /// What was done.
        act: Act,
        /// The reply.
        reply: Reply,
    },
    /// An `audit.list` result.
    Audit(Reply),
    /// The receipts `a` marks, read when it was pressed (`receipts.list`).
    Matched(Reply),
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
        /// The read's number (also reported back): a reply to an older read is ignored.
        seq: u64,
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
    /// Stop a task or acknowledge an outcome, once.
    Act {
        /// What.
        act: Act,
        /// The operator's reason.
        reason: String,
    },
    /// Read `audit.list`.
    GetAudit,
    /// Read the clearable receipts matching the filter now (`receipts.list` params), to mark
    /// exactly those: `a` marks a fixed set, never a query that grows until the commit.
    ReadMatching(Value),
    /// Put this text on the clipboard: the runner writes it as an OSC 52 sequence through
    /// the terminal (the terminal, not the host, does the rest).
    Copy(String),
    /// Run `receipts.clearCommit` once.
    Commit {
        /// The token.
        token: String,
        /// The operator's reason.
        reason: String,
    },
}

/// An operator action on a blocked outcome that needs a reason and a confirmation.
#[derive(Clone, Debug, PartialEq)]
pub enum Act {
    /// Stop the task (bridge `task.stop` under a fresh request ID): its unverified outcome
    /// stays recorded on the stopped task and its receipt becomes clearable.
    Stop {
        /// The task.
        task_id: String,
    },
    /// Record that the uncertain outcome was settled outside Polaris (`outcome.acknowledge`,
    /// SPEC §11): nothing is executed and the receipt becomes clearable.
    Acknowledge {
        /// The receipt whose outcome is settled.
        request_id: String,
    },
}

impl Act {
    /// What the dialog and the notices call it.
    pub fn verb(&self) -> &'static str {
        match self {
            Act::Stop { .. } => "stop task",
            Act::Acknowledge { .. } => "acknowledge outcome",
        }
    }

    /// The ID it acts on.
    pub fn target(&self) -> &str {
        match self {
            Act::Stop { task_id } => task_id,
            Act::Acknowledge { request_id } => request_id,
        }
    }
}
