//! The introspection socket's methods, params, results and event frames
//! (`docs/introspection.md`), as types: the host's introspection service answers through them
//! and the console and the operator commands read through the same ones.
//!
//! Result types follow the rules of [`super::results`]: fields in the alphabetical order of
//! their wire names (the bytes the host always wrote), decisive fields required and descriptive
//! ones forgiven when absent. Params keep the order the host has always listed them in its
//! `BAD_REQUEST` messages.

mod events;
mod params;
mod results;
mod selection;

pub use events::*;
pub use params::*;
pub use results::*;
pub use selection::*;

use std::fmt;
use std::str::FromStr;

// Methods

/// Every method of the introspection socket, by wire name (the bridge's are [`super::Method`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntrospectMethod {
    /// `host.hello`: as on the bridge.
    HostHello,
    /// `snapshot`: everything the console's first screen needs.
    Snapshot,
    /// `receipts.list`: one page of the book.
    ReceiptsList,
    /// `receipts.get`: one receipt with its request and reply.
    ReceiptsGet,
    /// `tasks.list`: task summaries.
    TasksList,
    /// `subscribe`: event frames (or coalesced `changed` frames) on this connection.
    Subscribe,
    /// `task.verifyOutcome`: as on the bridge.
    TaskVerifyOutcome,
    /// `receipts.clearPrepare`: the first phase of a clear.
    ReceiptsClearPrepare,
    /// `receipts.clearCommit`: the second phase of a clear.
    ReceiptsClearCommit,
    /// `audit.list`: recent clear commits.
    AuditList,
    /// `outcome.acknowledge`: a person records that an uncertain outcome was settled outside
    /// Polaris (SPEC §11).
    OutcomeAcknowledge,
    /// `task.stop`: the operator stops a task (as on the bridge, under a fresh request ID),
    /// recorded in the audit log.
    TaskStop,
}

impl IntrospectMethod {
    /// Every method, in the order the contract lists them.
    pub const ALL: &'static [IntrospectMethod] = &[
        IntrospectMethod::HostHello,
        IntrospectMethod::Snapshot,
        IntrospectMethod::ReceiptsList,
        IntrospectMethod::ReceiptsGet,
        IntrospectMethod::TasksList,
        IntrospectMethod::Subscribe,
        IntrospectMethod::TaskVerifyOutcome,
        IntrospectMethod::ReceiptsClearPrepare,
        IntrospectMethod::ReceiptsClearCommit,
        IntrospectMethod::AuditList,
        IntrospectMethod::OutcomeAcknowledge,
        IntrospectMethod::TaskStop,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            IntrospectMethod::HostHello => "host.hello",
            IntrospectMethod::Snapshot => "snapshot",
            IntrospectMethod::ReceiptsList => "receipts.list",
            IntrospectMethod::ReceiptsGet => "receipts.get",
            IntrospectMethod::TasksList => "tasks.list",
            IntrospectMethod::Subscribe => "subscribe",
            IntrospectMethod::TaskVerifyOutcome => "task.verifyOutcome",
            IntrospectMethod::ReceiptsClearPrepare => "receipts.clearPrepare",
            IntrospectMethod::ReceiptsClearCommit => "receipts.clearCommit",
            IntrospectMethod::AuditList => "audit.list",
            IntrospectMethod::OutcomeAcknowledge => "outcome.acknowledge",
            IntrospectMethod::TaskStop => "task.stop",
        }
    }
}

impl FromStr for IntrospectMethod {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        IntrospectMethod::ALL
            .iter()
            .copied()
            .find(|m| m.as_str() == s)
            .ok_or(())
    }
}

impl fmt::Display for IntrospectMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
