//! What the ledger's rows and calls give back: receipts, claims, hosts, counts; and the
//! settings a host opens the ledger with.

use std::sync::Arc;
use std::time::Duration;

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
    /// The password for the database, when it is not in `conninfo`
    /// (`--ledger-password-file`): a connection string is seen by anyone who can list the
    /// host's processes.
    pub password: Option<String>,
    /// Register even when a live run holds `host_id` (`--take-over-host-id`): that run is
    /// superseded. Without it such a start is refused (see `registration`).
    pub take_over: bool,
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
#[derive(Clone, Debug, thiserror::Error)]
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
    /// The stored reply's error code (`None` for a success, or while running).
    pub code: Option<String>,
    /// When a person acknowledged its uncertain outcome (epoch ms), on any host.
    pub acknowledged_at: Option<i64>,
    /// The host run that executed it confirmed its pending outcome or stopped its task.
    pub settled: bool,
    /// Copies answered straight from the row by hosts that keep no copy of it.
    pub replays: i64,
}

impl LedgerReceipt {
    /// Whether an operator may clear it now (SPEC §6): completed, and an uncertain outcome
    /// acknowledged, or (`OUTCOME_UNCERTAIN`) settled by the host that owns its task. The
    /// same rule as the ledger's `polaris_clearable`.
    pub fn clearable(&self) -> bool {
        self.state == RowState::Completed
            && (self.acknowledged_at.is_some()
                || match self.code.as_deref() {
                    Some("INTERRUPTED") => false,
                    Some("OUTCOME_UNCERTAIN") => self.settled,
                    _ => true,
                })
    }
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
#[allow(clippy::large_enum_variant)] // `Existing` is the common answer on a busy fleet: no box.
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
#[allow(clippy::large_enum_variant)] // Built once per completion; a box would buy nothing.
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
    /// Its running receipts: as the host last reported them with its lease renewal while it
    /// is alive; once it has ended, the ledger's rows still `running` under its epoch (none
    /// once they were interrupted).
    pub running: u64,
    /// Its tasks blocked on an uncertain outcome, as the host last reported them (for a host
    /// that has ended: when it ended — those outcomes are still unsettled).
    pub blocked: u64,
}

/// What a host reports about itself with every lease renewal, for every host's hosts pane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostLoad {
    /// Receipts executing on this host.
    pub running: u64,
    /// Tasks blocked on an uncertain outcome.
    pub blocked: u64,
}

/// Reads a host's [`HostLoad`] when its lease is renewed; `None` once the host is gone.
pub type LoadReporter = Arc<dyn Fn() -> Option<HostLoad> + Send + Sync>;

/// How long the `hosts` row of a run that left or died is kept (once none of its receipts is
/// still running): a day, so the hosts pane and `run.status` still show the night's dead
/// hosts to whoever looks in the morning, while a host restarted every few minutes for weeks
/// does not grow the table without bound. Receipts keep what they need without the row: the
/// host ID (`TASK_NOT_FOUND`'s `details.hostId`) and the `INTERRUPTED` reply are stored on the
/// receipt itself.
pub const HOSTS_KEPT: Duration = Duration::from_secs(24 * 3600);

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
