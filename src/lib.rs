//! Polaris stands between AI agents and the side effects they cause.
//!
//! Within one host run, one request ID executes at most once, means exactly one request
//! content, and its outcome — success, failure or "unknown" — can always be read back instead
//! of being re-sent. See `README.md` for the guarantee and what it does not cover.
//!
//! The modules follow the shape of the system: [`protocol`] (the wire), [`ids`] (request and
//! task IDs), [`book`] (receipts), [`tasks`] (task states and pending outcomes), [`executor`]
//! (what acts on pages), [`host`] (the rules), [`events`] (the operator's live feed),
//! [`server`] (sockets), [`introspect`] (the operator's channel), [`serve`] (both services on
//! their sockets), [`operator`] (the operator commands), [`client`] (the bridge client and its
//! ambiguity gate), [`mcp`] (the MCP front), [`console`] (the operator's terminal monitor),
//! [`cli`], [`journal`] (the durable receipt log), [`ledger`] (one receipt book for a fleet, in PostgreSQL) and [`webapp`] (a small real web app the
//! Chromium executor's tests and `polaris demo --browser` drive). `tests/architecture.rs` keeps the graph of these modules free of cycles.

#![warn(missing_docs)]

pub mod cli;
pub mod client;
pub mod console;
pub mod introspect;
pub mod mcp;
pub mod operator;
pub mod serve;
pub mod server;

// The layers below, each a crate of its own, under the names the whole codebase uses.
pub use polaris_executor as executor;
pub use polaris_host as host;
pub use polaris_journal as journal;
pub use polaris_ledger as ledger;
pub use polaris_protocol::{self as protocol, ids};
pub use polaris_state::{book, events, tasks};
pub use polaris_webapp as webapp;
