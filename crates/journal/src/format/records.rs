//! What a record says: the typed shapes the host appends (borrowing its data).

use crate::book::{FingerprintDigest, RequestKey};
use crate::protocol::REQUEST_PIECES;

/// The record kinds, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// [`Record::RunStarted`]
    RunStarted = 1,
    /// [`Record::ReceiptBegun`]
    ReceiptBegun = 2,
    /// [`Record::ReceiptCompleted`]
    ReceiptCompleted = 3,
    /// [`Record::ReceiptStored`]
    ReceiptStored = 4,
    /// [`Record::ReceiptsCleared`]
    ReceiptsCleared = 5,
    /// [`Record::OutcomeAcknowledged`]
    OutcomeAcknowledged = 6,
    /// [`Record::Task`]
    Task = 7,
}

impl Kind {
    /// The kind stored as `b`, if any.
    pub(super) fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::RunStarted,
            2 => Kind::ReceiptBegun,
            3 => Kind::ReceiptCompleted,
            4 => Kind::ReceiptStored,
            5 => Kind::ReceiptsCleared,
            6 => Kind::OutcomeAcknowledged,
            7 => Kind::Task,
            _ => return None,
        })
    }
}

/// What happened to a task, as a task record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskEvent {
    /// The task was created.
    Started,
    /// Its state, pending outcome or details changed.
    Updated,
    /// It was finished or stopped.
    Closed,
}

/// A receipt's creation: durable before the executor is asked to act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Begun<'a> {
    /// The request ID.
    pub request_id: &'a RequestKey,
    /// The run that created the receipt (named by a [`Record::RunStarted`] earlier in the journal).
    pub run_id: &'a str,
    /// The method's wire name.
    pub method: &'a str,
    /// The task it acts on, if any.
    pub task_id: Option<&'a str>,
    /// The canonical `{method, params}` (the fingerprint) in pieces, written one after the
    /// other: a receipt keeps its params apart from the text around them
    /// ([`StoredRequest::pieces`](crate::protocol::StoredRequest::pieces)), and a text already
    /// whole is [`RequestPieces::whole`].
    pub request: RequestPieces<'a>,
    /// When it was first seen (epoch ms).
    pub at: i64,
}

/// A request's canonical text in the pieces a receipt keeps it in, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestPieces<'a>(pub [&'a str; REQUEST_PIECES]);

impl<'a> RequestPieces<'a> {
    /// A text already whole.
    pub fn whole(text: &'a str) -> RequestPieces<'a> {
        let mut pieces = [""; REQUEST_PIECES];
        pieces[0] = text;
        RequestPieces(pieces)
    }

    /// The whole text's length.
    pub fn len(&self) -> usize {
        self.0.iter().map(|p| p.len()).sum()
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A receipt's stored reply: durable before the reply reaches any client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed<'a> {
    /// The request ID.
    pub request_id: &'a RequestKey,
    /// The stored reply exactly as the host keeps it (opaque bytes here).
    pub reply: &'a [u8],
    /// When the execution finished (epoch ms).
    pub at: i64,
}

/// One cleared receipt: what its tombstone keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClearedId {
    /// The request ID.
    pub request_id: RequestKey,
    /// The digest of its canonical request.
    pub digest: FingerprintDigest,
}

/// One operator clear: its receipts become tombstones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cleared<'a> {
    /// When the clear was committed (epoch ms).
    pub at: i64,
    /// The operator's reason.
    pub reason: &'a str,
    /// Who cleared (the audit log's operator).
    pub operator: &'a str,
    /// The receipts cleared.
    pub ids: &'a [ClearedId],
}

/// An operator's record that an uncertain outcome was settled outside Polaris.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acknowledged<'a> {
    /// The receipt whose outcome was settled.
    pub request_id: &'a RequestKey,
    /// Why.
    pub reason: &'a str,
    /// Who.
    pub operator: &'a str,
    /// When (epoch ms).
    pub at: i64,
}

/// A task's latest state. The host owns the shape of `pending` and `detail` (JSON, opaque here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRecord<'a> {
    /// Started, updated or closed.
    pub event: TaskEvent,
    /// The task's ID.
    pub task_id: &'a str,
    /// The run the task belongs to.
    pub run_id: &'a str,
    /// When the task was created (epoch ms).
    pub created_at: i64,
    /// When this record was made (epoch ms).
    pub at: i64,
    /// The task's title.
    pub title: &'a str,
    /// The task's state's wire name.
    pub state: &'a str,
    /// The pending outcome(s), as the host serializes them; empty for none.
    pub pending: &'a [u8],
    /// Anything else the host keeps about the task (URL, stop reason, history…); may be empty.
    pub detail: &'a [u8],
    /// When the task was closed (epoch ms).
    pub closed_at: Option<i64>,
}

/// One journal record. Appends borrow their data; decoding borrows from the block read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A host run started; receipts and tasks name their run by this record.
    RunStarted {
        /// The run's ID.
        run_id: &'a str,
        /// When it started (epoch ms).
        started_at: i64,
    },
    /// A receipt was created.
    ReceiptBegun(Begun<'a>),
    /// A receipt's reply was stored.
    ReceiptCompleted(Completed<'a>),
    /// A receipt created and completed in one record (what compaction writes; also fits a
    /// receipt the host completes in the same critical section that created it).
    ReceiptStored(Begun<'a>, Completed<'a>),
    /// Receipts were cleared by an operator.
    ReceiptsCleared(Cleared<'a>),
    /// An uncertain outcome was acknowledged by an operator.
    OutcomeAcknowledged(Acknowledged<'a>),
    /// A task started, changed or closed.
    Task(TaskRecord<'a>),
}

impl Record<'_> {
    /// The record's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Record::RunStarted { .. } => Kind::RunStarted,
            Record::ReceiptBegun(_) => Kind::ReceiptBegun,
            Record::ReceiptCompleted(_) => Kind::ReceiptCompleted,
            Record::ReceiptStored(..) => Kind::ReceiptStored,
            Record::ReceiptsCleared(_) => Kind::ReceiptsCleared,
            Record::OutcomeAcknowledged(_) => Kind::OutcomeAcknowledged,
            Record::Task(_) => Kind::Task,
        }
    }
}
