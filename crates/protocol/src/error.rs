//! Errors on the wire: the codes of the contract, the `delivery` each one carries and the
//! `error` object of a reply.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What happened to the side effect a message asked for. Every error carries one, so a caller
/// never has to guess whether resending would repeat an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The host is certain it did not execute this message's content (and will not).
    NotExecuted,
    /// Executed and definitively failed; the executor reports no effect.
    Failed,
    /// Delivered; whether the effect happened is unknown: read, don't resend.
    Uncertain,
    /// This ID's content ran earlier; its stored reply was cleared by an operator.
    Cleared,
    /// (client side) the connection broke after sending; the host may or may not have it.
    Unknown,
    /// (client side) nothing was written to the host.
    NotSent,
}

impl Delivery {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::NotExecuted => "not_executed",
            Delivery::Failed => "failed",
            Delivery::Uncertain => "uncertain",
            Delivery::Cleared => "cleared",
            Delivery::Unknown => "unknown",
            Delivery::NotSent => "not_sent",
        }
    }
}

macro_rules! error_codes {
    ($($variant:ident => $wire:literal, $delivery:ident;)*) => {
        /// Every error code of the contract, host and client side: each code's wire spelling and
        /// usual `delivery` are written once, here.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum ErrorCode {
            $(
                #[doc = concat!("`", $wire, "`")]
                #[serde(rename = $wire)]
                $variant,
            )*
        }

        impl ErrorCode {
            /// Every code, in the order of the contract's table.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The wire spelling, e.g. `TASK_BLOCKED`.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $wire,)* }
            }

            /// The `delivery` this code carries unless the situation says otherwise
            /// (only `RECEIPT_CLEARED` varies: `cleared` or `not_executed`).
            pub fn default_delivery(self) -> Delivery {
                match self { $(ErrorCode::$variant => Delivery::$delivery,)* }
            }
        }

        impl FromStr for ErrorCode {
            type Err = ();
            fn from_str(s: &str) -> Result<Self, ()> {
                match s { $($wire => Ok(ErrorCode::$variant),)* _ => Err(()) }
            }
        }
    };
}

error_codes! {
    BadRequest => "BAD_REQUEST", NotExecuted;
    UnknownMethod => "UNKNOWN_METHOD", NotExecuted;
    FrameTooLarge => "FRAME_TOO_LARGE", NotExecuted;
    RequestIdReused => "MCP_REQUEST_ID_REUSED", NotExecuted;
    ReceiptCleared => "RECEIPT_CLEARED", Cleared;
    ReceiptCapacityFull => "RECEIPT_CAPACITY_FULL", NotExecuted;
    TaskNotFound => "TASK_NOT_FOUND", NotExecuted;
    TaskBlocked => "TASK_BLOCKED", NotExecuted;
    TaskClosed => "TASK_CLOSED", NotExecuted;
    ActionFailed => "ACTION_FAILED", Failed;
    OutcomeUncertain => "OUTCOME_UNCERTAIN", Uncertain;
    ReadTimeout => "READ_TIMEOUT", NotExecuted;
    RunNotCurrent => "RUN_NOT_CURRENT", NotExecuted;
    Internal => "INTERNAL", Uncertain;
    ShuttingDown => "SHUTTING_DOWN", NotExecuted;
    Interrupted => "INTERRUPTED", Uncertain;
    HostBusy => "HOST_BUSY", NotExecuted;
    FrameTimeout => "FRAME_TIMEOUT", NotExecuted;
    LedgerUnavailable => "LEDGER_UNAVAILABLE", NotExecuted;
    ClearTokenStale => "CLEAR_TOKEN_STALE", NotExecuted;
    TombstoneCapacityFull => "TOMBSTONE_CAPACITY_FULL", NotExecuted;
    BridgeUnavailable => "BRIDGE_UNAVAILABLE", NotSent;
    BridgeDisconnected => "BRIDGE_DISCONNECTED", Unknown;
    BridgeTimeout => "BRIDGE_TIMEOUT", Unknown;
    ClientBlockedAmbiguous => "CLIENT_BLOCKED_AMBIGUOUS", NotSent;
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `error` object of a reply: which rule refused or failed the request, and what happened
/// to its side effect, so the caller knows whether to read or to send anew.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// Which rule refused or failed the request.
    pub code: ErrorCode,
    /// One sentence: what happened and what to read next.
    pub message: String,
    /// What happened to the side effect this message asked for.
    pub delivery: Delivery,
    /// Always `false`: no error is a licence to resend automatically.
    pub automatic_replay: bool,
    /// Code-specific facts (stored method, pending outcome, capacity, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ErrorBody {
    /// An error with the code's usual delivery.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
            delivery: code.default_delivery(),
            automatic_replay: false,
            details: None,
        }
    }

    /// Attaches `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Attaches details of a typed shape (one of the `*Details` structs below).
    pub fn with_typed_details(self, details: &impl Serialize) -> Self {
        match serde_json::to_value(details) {
            Ok(v) => self.with_details(v),
            Err(_) => self,
        }
    }

    /// The details read as `T`, when they have its shape.
    pub fn details_as<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        T::deserialize(self.details.as_ref()?).ok()
    }

    /// Overrides the delivery (used by `RECEIPT_CLEARED`).
    pub fn with_delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }
}

/// `details` of the refusal a socket sends to a peer of another user before reading anything:
/// the client stops using the connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerRefusedDetails {
    /// The peer's effective uid.
    pub peer_uid: u32,
    /// The uid the host serves.
    pub host_uid: u32,
}

/// `details` of `HOST_BUSY` when every connection slot of a socket is taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostBusyDetails {
    /// The host's `--max-connections`.
    pub max_connections: usize,
}

/// `details` of `FRAME_TIMEOUT`: a frame's bytes did not all arrive within the limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrameTimeoutDetails {
    /// The host's `--frame-timeout-ms`.
    pub frame_timeout_ms: u64,
}

/// `details` of `FRAME_TOO_LARGE`: the client resends nothing on that connection and can split
/// or shorten what it sends to fit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrameTooLargeDetails {
    /// The host's `--max-frame-bytes`.
    pub max_frame_bytes: usize,
}

/// Why an action was refused before anything was dispatched (`details.cause` of its
/// `ACTION_FAILED`, delivery `not_sent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotSent {
    /// The expectation already held before the action: it could never show the action's
    /// effect (SPEC §14).
    ExpectationAlreadyHolds,
    /// A `ref` from a snapshot older than the page's latest (or from before it navigated).
    StaleRef,
    /// The target matches no element.
    NoMatch,
    /// The target matches more than one element: these (SPEC §15: the candidates named).
    Ambiguous(Vec<String>),
    /// A navigation would re-send a form, and the caller did not allow it.
    Resubmit,
    /// The action named a tab the task does not have, or one that was closed (SPEC §15).
    NoTab,
}

impl NotSent {
    /// The wire spelling (`details.cause`).
    pub fn as_str(&self) -> &'static str {
        match self {
            NotSent::ExpectationAlreadyHolds => "expectation_already_holds",
            NotSent::StaleRef => "stale_ref",
            NotSent::NoMatch => "no_match",
            NotSent::Ambiguous(_) => "ambiguous_target",
            NotSent::Resubmit => "would_resubmit",
            NotSent::NoTab => "no_tab",
        }
    }

    /// The elements an ambiguous target matched (`details.candidates`).
    pub fn candidates(&self) -> &[String] {
        match self {
            NotSent::Ambiguous(c) => c,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_round_trips_and_never_licenses_a_replay() {
        for code in ErrorCode::ALL {
            let e = ErrorBody::new(*code, "x");
            let v = serde_json::to_value(&e).unwrap();
            assert_eq!(v["code"], code.as_str());
            assert_eq!(v["automaticReplay"], false);
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(*code));
        }
    }
}
