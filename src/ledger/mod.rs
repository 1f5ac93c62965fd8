//! The fleet ledger: one receipt book in PostgreSQL for many hosts (SPEC §13).
//!
//! When agents fail over between machines, a request ID one host executed is new to every
//! other host unless they share one book. With `polaris serve --ledger CONNSTR` the book lives
//! in PostgreSQL and each host's in-memory book is a cache of it: a new mutation is *claimed*
//! (its row inserted with `INSERT … ON CONFLICT DO NOTHING`, committed with
//! `synchronous_commit = on`) before the executor acts, and its completion is committed before
//! any copy is answered. On conflict the row decides: joined, replayed, reused or cleared.
//!
//! Each host run registers in `hosts` with a fresh, increasing *epoch* and a *lease* it renews
//! every lease/3. Every change of a receipt row is fenced by the epoch that claimed it, so a
//! host whose lease lapsed can no longer change anything; the others turn its running receipts
//! into `INTERRUPTED` (uncertain, never re-run).
//!
//! The host (`crate::host`) decides what a row means for a request; this module only speaks
//! to the database: the schema and its migrations, the connections, batching claims and
//! completions into few commits, the lease, and reaping the receipts of dead hosts.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Default `--lease-ms`: how long a host's claim on its running receipts lasts unrenewed.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// Default `--ledger-connections`.
pub const DEFAULT_CONNECTIONS: usize = 16;

/// How a host joins the fleet's ledger.
#[derive(Clone)]
pub struct LedgerConfig {
    /// The libpq connection string (`host=/run/postgresql dbname=polaris`, `postgres://…`).
    pub conninfo: String,
    /// This host's name in the `hosts` table (`--host-id`; default the machine's hostname).
    pub host_id: String,
    /// This host run's ID, stored with its epoch so an `INTERRUPTED` reply can name it.
    pub run_id: String,
    /// Where this host's bridge socket is, for the operator's hosts pane.
    pub socket: String,
    /// The lease; renewed every lease/3.
    pub lease: Duration,
    /// How many connections this host keeps to PostgreSQL.
    pub connections: usize,
    /// The receipt capacity this host proposes; the first host of a ledger stores it, the
    /// others read the stored one.
    pub capacity: usize,
    /// The tombstone capacity this host proposes (stored the same way).
    pub tombstone_capacity: usize,
    /// Builds the stored reply body of a dead host's running receipt (`INTERRUPTED`): the
    /// host owns that wire shape, the ledger only stores it.
    pub interrupted_reply: Arc<dyn Fn(&Interrupted<'_>) -> String + Send + Sync>,
}

/// A running receipt whose host died: what its `INTERRUPTED` reply names.
pub struct Interrupted<'a> {
    /// The receipt's request ID.
    pub request_id: &'a str,
    /// Its method (`page.click`, …).
    pub method: &'a str,
    /// The task it acted on, when any.
    pub task_id: Option<&'a str>,
    /// The run of the host that claimed it.
    pub run_id: &'a str,
    /// The host that claimed it.
    pub host_id: &'a str,
}

/// Why the ledger could not answer.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The database could not be reached, or refused the statement: nothing was changed by
    /// this call as far as this host can tell.
    #[error("the ledger could not be reached: {0}")]
    Unavailable(String),
    /// This host's epoch was fenced out (its lease lapsed and another host took over its
    /// receipts, or a newer run registered under the same host ID).
    #[error("this host's lease on the ledger was lost: {0}")]
    Fenced(String),
    /// At start: the schema is newer than this binary, the connection string is malformed, or
    /// the stored settings cannot be read.
    #[error("{0}")]
    Setup(String),
}

/// Where a receipt row stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowState {
    /// Claimed; its host is executing it.
    Running,
    /// Its reply is stored.
    Completed,
    /// An operator cleared it: a tombstone (the reply is gone, the fingerprint stays).
    Cleared,
}

/// A receipt row as the ledger holds it.
#[derive(Clone, Debug)]
pub struct LedgerReceipt {
    /// The request ID.
    pub request_id: String,
    /// The canonical `{method, params}` text: the fingerprint copies are compared against.
    pub request: String,
    /// The method.
    pub method: String,
    /// The task it acts on (for `task.start`, the task it opened, once completed).
    pub task_id: Option<String>,
    /// The host that claimed it.
    pub host_id: String,
    /// The epoch of the host run that claimed it.
    pub epoch: i64,
    /// The run ID of that host run.
    pub run_id: String,
    /// Where it stands.
    pub state: RowState,
    /// The stored reply body when completed.
    pub reply: Option<String>,
    /// When it was claimed (epoch ms).
    pub first_seen: i64,
    /// When its reply was stored (epoch ms).
    pub completed_at: Option<i64>,
    /// When an operator cleared it (epoch ms).
    pub cleared_at: Option<i64>,
    /// The reason the operator gave.
    pub clear_reason: Option<String>,
}

/// A new mutation to claim.
#[derive(Clone, Debug)]
pub struct Claim {
    /// The request ID.
    pub request_id: String,
    /// The canonical `{method, params}` text.
    pub request: String,
    /// The method.
    pub method: &'static str,
    /// The task it acts on (`None` for `task.start`).
    pub task_id: Option<String>,
    /// When the host admitted it (epoch ms).
    pub at: i64,
}

/// What a claim found.
#[derive(Clone, Debug)]
pub enum Claimed {
    /// The row is this host's and committed durably: the executor may act.
    New,
    /// The ID was in the ledger already: the row decides.
    Existing(Box<LedgerReceipt>),
    /// The fleet's book is full; nothing was inserted.
    Full {
        /// Receipts held (running + completed).
        used: u64,
        /// The fleet's capacity.
        capacity: u64,
    },
}

/// What storing a completion found.
#[derive(Clone, Debug)]
pub enum Completed {
    /// Stored durably under this host's epoch.
    Stored,
    /// The row was no longer this host's running receipt (another host declared it
    /// `INTERRUPTED` after this host's lease lapsed): the row as it now is.
    Fenced(Box<LedgerReceipt>),
}

/// One host run of the fleet, for the operator's hosts pane.
#[derive(Clone, Debug)]
pub struct HostRow {
    /// The host's name.
    pub host_id: String,
    /// Its run's epoch.
    pub epoch: i64,
    /// Its run ID.
    pub run_id: String,
    /// Its bridge socket.
    pub socket: String,
    /// When it registered (epoch ms).
    pub started_at: i64,
    /// How long its lease has left (ms; negative once lapsed).
    pub lease_left_ms: i64,
    /// `alive`, `left` (stopped cleanly) or `dead` (its lease lapsed; its receipts were
    /// interrupted).
    pub state: String,
    /// Its running receipts.
    pub running: u64,
}

/// The fleet's receipt counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct FleetCounts {
    /// Receipts held (running + completed).
    pub used: u64,
    /// Of them, running.
    pub running: u64,
    /// Tombstones.
    pub tombstones: u64,
    /// The fleet's receipt capacity.
    pub capacity: u64,
    /// The fleet's tombstone capacity.
    pub tombstone_capacity: u64,
}

/// A host's connection to the fleet ledger: cheap to clone, shared by every execution.
#[derive(Clone)]
pub struct Ledger {
    #[allow(dead_code)]
    inner: Arc<()>,
}

impl Ledger {
    /// Connects, applies the schema's migrations (versioned, idempotent, one host at a time),
    /// stores or reads the fleet's capacities, registers this host run with a fresh epoch,
    /// and starts renewing its lease and reaping dead hosts' receipts in the background.
    pub async fn open(_config: LedgerConfig) -> Result<Ledger, LedgerError> {
        todo!("ledger: open")
    }

    /// This host run's epoch.
    pub fn epoch(&self) -> i64 {
        todo!()
    }

    /// This host's name.
    pub fn host_id(&self) -> &str {
        todo!()
    }

    /// The fleet's receipt capacity (as stored in the ledger).
    pub fn capacity(&self) -> usize {
        todo!()
    }

    /// The fleet's tombstone capacity.
    pub fn tombstone_capacity(&self) -> usize {
        todo!()
    }

    /// How long this host's lease has left, measured from when the last renewal was sent;
    /// zero once lost.
    pub fn lease_left(&self) -> Duration {
        todo!()
    }

    /// Becomes `Some(why)` once this host can no longer act for the fleet (its epoch fenced
    /// out): the host stops.
    pub fn lost(&self) -> watch::Receiver<Option<String>> {
        todo!()
    }

    /// Claims a new mutation: inserts its running row under this host's epoch and commits it
    /// durably, or returns the row that was there, or `Full`.
    pub async fn claim(&self, _claim: Claim) -> Result<Claimed, LedgerError> {
        todo!()
    }

    /// Stores a claimed receipt's reply body (and, for `task.start`, the task it opened),
    /// fenced by this host's epoch, committed durably.
    pub async fn complete(
        &self,
        _request_id: &str,
        _reply: &str,
        _task_id: Option<&str>,
        _at: i64,
    ) -> Result<Completed, LedgerError> {
        todo!()
    }

    /// Deletes this host's running row for a claim whose action never started (fenced).
    pub async fn withdraw(&self, _request_id: &str) -> Result<(), LedgerError> {
        todo!()
    }

    /// The row of one request ID.
    pub async fn receipt(&self, _request_id: &str) -> Result<Option<LedgerReceipt>, LedgerError> {
        todo!()
    }

    /// Waits until a running row is decided (completed, cleared or gone) or `deadline`
    /// passes; `None` at the deadline.
    pub async fn wait_decided(
        &self,
        _request_id: &str,
        _deadline: Instant,
    ) -> Result<Option<LedgerReceipt>, LedgerError> {
        todo!()
    }

    /// The host that opened a task, when any host of the fleet did.
    pub async fn task_host(&self, _task_id: &str) -> Result<Option<String>, LedgerError> {
        todo!()
    }

    /// Every host run the ledger knows, newest first.
    pub async fn hosts(&self) -> Result<Vec<HostRow>, LedgerError> {
        todo!()
    }

    /// The fleet's receipt counts.
    pub async fn counts(&self) -> Result<FleetCounts, LedgerError> {
        todo!()
    }

    /// Leaves the fleet cleanly: this run's still-running receipts become `INTERRUPTED`, its
    /// row `left`, and the background work stops.
    pub async fn leave(&self) -> Result<(), LedgerError> {
        todo!()
    }
}
