//! The event frames a subscriber reads, and the counters they carry.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::results::{sorted, PendingOutcome, ReceiptCounts, VerifyOutcome};
use crate::ErrorCode;

// Event frames

/// An event frame, `{"event": KIND, "seq": N, "at": TS, "data": {…}}`: written without an `id`
/// after `subscribe`. Its fields are in the order the host writes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventFrame {
    /// The kind: `receipt.created`, `changed`, `lagged`, ...
    pub event: String,
    /// Its place in the run's event sequence.
    pub seq: u64,
    /// When it happened.
    #[serde(default)]
    pub at: String,
    /// Kind-specific facts (see the `…Event` types of this module).
    #[serde(default)]
    pub data: Value,
}

impl EventFrame {
    /// The frame's `data` read as `T` (the data type of its kind).
    pub fn data_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.data)
    }
}

/// `receipt.created`: a new mutation was admitted and runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptCreatedEvent {
    /// The method.
    pub method: String,
    /// The request ID.
    pub request_id: String,
    /// The task (`null` for task-less methods).
    pub task_id: Option<String>,
}

/// `receipt.completed`: an execution's reply was stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptCompletedEvent {
    /// The error code (`null` when ok).
    pub code: Option<ErrorCode>,
    /// The method.
    pub method: String,
    /// Whether the reply is a success.
    pub ok: bool,
    /// The request ID.
    pub request_id: String,
}

/// `network.duplicateSends`: an action's page sent the same request more than once (SPEC §16),
/// published when the action ends (and again if a verification finds more), so the console can
/// flag the receipt. The receipt still records one execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DuplicateSendsEvent {
    /// The requests sent more than once.
    pub duplicate_sends: Vec<crate::evidence::DuplicateSend>,
    /// The action's method.
    pub method: String,
    /// The action's request ID.
    pub request_id: String,
    /// Its task.
    pub task_id: String,
}

/// `receipt.joined` and `receipt.replayed`: a copy of a known request was answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptSeenEvent {
    /// The method.
    pub method: String,
    /// The request ID.
    pub request_id: String,
}

/// `request.rejected`: a request was refused before it could run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRejectedEvent {
    /// Why.
    pub code: ErrorCode,
    /// The method asked for.
    pub method: String,
    /// The request ID.
    pub request_id: String,
    /// The task, when the refusal is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// `pending.created`: an action's outcome became uncertain and blocks its task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCreatedEvent {
    /// The new pending outcome.
    pub pending_outcome: PendingOutcome,
    /// The task it blocks.
    pub task_id: String,
}

/// `pending.resolved`: a verification confirmed a pending outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingResolvedEvent {
    /// Always `confirmed`.
    pub outcome: VerifyOutcome,
    /// The request whose effect was confirmed.
    pub request_id: String,
    /// Its task.
    pub task_id: String,
}

/// `receipts.cleared`: an operator's clear applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptsClearedEvent {
    /// How many receipts it cleared.
    pub count: u64,
    /// Who cleared.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// The first IDs it cleared (at most 100, so an event stays small however large the clear;
    /// `count` says how many in all, and the audit log names every one).
    pub request_ids: Vec<String>,
}

/// `lagged`: the subscriber fell behind and missed events; it must re-read the snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaggedEvent {
    /// Events dropped for this subscriber.
    pub missed: u64,
}

/// `changed`: the frame of a coalesced subscription, standing for events `fromSeq..=toSeq`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedEvent {
    /// The counters at `toSeq`, so a reader draws rates from the differences between frames.
    #[serde(serialize_with = "sorted")]
    pub counters: Counters,
    /// The first event this frame stands for.
    pub from_seq: u64,
    /// How full the book is at `toSeq`.
    pub receipts: ReceiptCounts,
    /// The last event this frame stands for (also the frame's `seq`).
    pub to_seq: u64,
}

/// The host's counters, as `snapshot` reports them; all change under the host's state lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Counters {
    /// Executions started (receipts created).
    pub executions: u64,
    /// Copies that joined a running execution.
    pub joins: u64,
    /// Copies answered from a stored reply.
    pub replays: u64,
    /// `MCP_REQUEST_ID_REUSED` refusals.
    pub rejected_reused: u64,
    /// `RECEIPT_CAPACITY_FULL` refusals.
    pub rejected_capacity: u64,
    /// `RECEIPT_CLEARED` refusals.
    pub rejected_cleared: u64,
    /// `TASK_BLOCKED` refusals.
    pub rejected_blocked: u64,
}

impl Counters {
    /// Every refusal counted since start (reused, full, cleared, blocked).
    pub fn refusals(&self) -> u64 {
        self.rejected_reused
            + self.rejected_capacity
            + self.rejected_cleared
            + self.rejected_blocked
    }
}
