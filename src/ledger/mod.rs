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

mod batch;
mod lease;
mod operator;
pub mod private;
pub mod schema;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls, Row};
use tokio_util::sync::CancellationToken;

pub use operator::{
    CensusPhase, CensusRequest, Change, Cleared, RowFilter, RowOrder, RowStateFilter, MAX_LISTED,
};

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

/// A host's connection to the fleet ledger: cheap to clone, shared by every execution.
#[derive(Clone)]
pub struct Ledger {
    inner: Arc<Inner>,
}

/// Owns the batch queue: when the last `Ledger` clone goes, the queue closes and the
/// background work stops (the host row is left to expire, as after a crash).
struct Inner {
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<batch::Op>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
    }
}

/// What the background tasks and the API share.
struct Shared {
    pg: tokio_postgres::Config,
    host_id: String,
    run_id: String,
    epoch: i64,
    lease: Duration,
    capacity: usize,
    tombstone_capacity: usize,
    interrupted_reply: Arc<dyn Fn(&Interrupted<'_>) -> String + Send + Sync>,
    /// When the last successful lease renewal (or the registration) was sent.
    renewed_at: Mutex<Instant>,
    /// Set once this run can no longer act: fenced out (`lost`) or left.
    gone: Mutex<Option<String>>,
    lost_tx: watch::Sender<Option<String>>,
    /// Request IDs whose rows were decided, from LISTEN/NOTIFY.
    decided: broadcast::Sender<Arc<str>>,
    /// The connection for single statements (reads, withdrawals), reconnected on demand.
    misc: tokio::sync::Mutex<Option<Arc<Client>>>,
    renewal_paused: AtomicBool,
    /// Reads this host's running receipts and blocked tasks for the lease renewal.
    load: Mutex<Option<LoadReporter>>,
    /// Request IDs whose claim timed out and may still commit late: each is taken back once
    /// the ledger answers, and claims of it are refused until then.
    taking_back: Mutex<std::collections::HashSet<String>>,
    cancel: CancellationToken,
    /// Batches run and operations in them, for measuring the group commit.
    batches: AtomicU64,
    batched_ops: AtomicU64,
}

impl Shared {
    /// Marks this run fenced out and tells the host.
    fn lose(&self, why: String) {
        let mut gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        if gone.is_none() {
            *gone = Some(why.clone());
            self.lost_tx.send_replace(Some(why));
        }
    }

    fn gone(&self) -> Option<String> {
        self.gone.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How long one call to the database may take before this host gives up on it: the
    /// renewal period (lease/3). A database that cannot answer a claim in a third of a lease
    /// is sick, and a host that waited longer would have to refuse the action anyway (its
    /// lease would no longer cover it). The same bound is set on the server for every
    /// statement and lock wait ([`limit_every_connection`]).
    fn call_timeout(&self) -> Duration {
        call_timeout(self.lease)
    }

    fn taking_back(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.taking_back
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This host's load for the lease renewal (zeros until the host installs its reporter).
    fn load(&self) -> HostLoad {
        let reporter = self.load.lock().unwrap_or_else(|p| p.into_inner()).clone();
        reporter.and_then(|read| read()).unwrap_or_default()
    }

    async fn misc(&self) -> Result<Arc<Client>, LedgerError> {
        let mut slot = self.misc.lock().await;
        if let Some(client) = slot.as_ref() {
            if !client.is_closed() {
                return Ok(client.clone());
            }
        }
        *slot = None;
        let client = Arc::new(connect(&self.pg).await?);
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Runs one read on the shared connection; a broken connection is replaced next time.
    async fn read(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, LedgerError> {
        let limit = self.call_timeout();
        let call = async {
            let client = self.misc().await?;
            client.query(sql, params).await.map_err(unavailable)
        };
        match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => {
                // The connection may be stuck on a hung server: use a fresh one next time.
                *self.misc.lock().await = None;
                Err(no_answer(limit))
            }
        }
    }
}

impl Shared {
    /// Runs one operator's statement (a listing page, a count, a fleet-wide clear) on a
    /// connection of its own, bounded by [`OPERATOR_CALL`] instead of a third of the lease: a
    /// clear of a whole book of a million receipts is one statement that takes seconds, and it
    /// must neither be cancelled half-way by the agents' bound nor hold up their connections.
    async fn operator_read(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, LedgerError> {
        let call = async {
            let client = connect(&self.pg).await?;
            client
                .batch_execute(&format!(
                    "SET statement_timeout = {}",
                    OPERATOR_CALL.as_millis()
                ))
                .await
                .map_err(unavailable)?;
            client.query(sql, params).await.map_err(unavailable)
        };
        tokio::time::timeout(OPERATOR_CALL, call)
            .await
            .unwrap_or_else(|_| Err(no_answer(OPERATOR_CALL)))
    }
}

/// How long one operator's statement may take (listing the fleet's book, clearing it): long
/// enough for a whole-book clear of millions of rows, short enough that a hung database still
/// answers the operator with an error.
pub const OPERATOR_CALL: Duration = Duration::from_secs(300);

/// The per-call bound for a lease: a third of it (never below 10 ms).
fn call_timeout(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

/// `Unavailable` for a call the database did not answer in time.
fn no_answer(limit: Duration) -> LedgerError {
    LedgerError::Unavailable(format!(
        "the ledger did not answer within {} ms (PostgreSQL may be hung, overloaded or cut \
         off); check the database server",
        limit.as_millis()
    ))
}

/// The receipt columns, in the order [`receipt_from_row`] reads them by name.
const RECEIPT_COLUMNS: &str = "request_id, request, method, task_id, host_id, epoch, run_id, \
                               state, reply, first_seen, completed_at, cleared_at, clear_reason, \
                               code, acknowledged_at, settled, replays";

/// How often a waiting copy re-reads its row when no notification came.
const WAIT_POLL: Duration = Duration::from_millis(200);

impl Ledger {
    /// Connects, applies the schema's migrations (versioned, idempotent, one host at a time),
    /// stores or reads the fleet's capacities, registers this host run with a fresh epoch,
    /// and starts renewing its lease and reaping dead hosts' receipts in the background.
    pub async fn open(config: LedgerConfig) -> Result<Ledger, LedgerError> {
        let mut pg: tokio_postgres::Config = config.conninfo.parse().map_err(|e| {
            LedgerError::Setup(format!(
                "the ledger connection string is not valid ({e}); write it as \
                 `host=/run/postgresql dbname=polaris` or `postgres://user@host/dbname`"
            ))
        })?;
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(Duration::from_secs(5));
        }
        if pg.get_application_name().is_none() {
            pg.application_name("polaris");
        }
        if config.lease < Duration::from_millis(30) {
            return Err(LedgerError::Setup(format!(
                "the lease ({} ms) is too short to renew; give --lease-ms at least 30",
                config.lease.as_millis()
            )));
        }
        limit_every_connection(&mut pg, config.lease);
        let capacity = i64::try_from(config.capacity).map_err(|_| too_large("capacity"))?;
        let tombstones = i64::try_from(config.tombstone_capacity)
            .map_err(|_| too_large("tombstone capacity"))?;
        let mut client = connect(&pg).await?;
        // Migrations may wait for another host's (the advisory lock) and rewrite tables:
        // they are exempt from the per-statement bounds, which apply again right after.
        client
            .batch_execute("SET statement_timeout = 0; SET lock_timeout = 0")
            .await
            .map_err(unavailable)?;
        schema::migrate(&mut client).await?;
        client
            .batch_execute("RESET statement_timeout; RESET lock_timeout")
            .await
            .map_err(unavailable)?;
        client
            .execute(
                "INSERT INTO fleet_settings (id, capacity, tombstone_capacity) VALUES (1, $1, $2)
                 ON CONFLICT (id) DO NOTHING",
                &[&capacity, &tombstones],
            )
            .await
            .map_err(unavailable)?;
        let row = client
            .query_one(
                "SELECT capacity, tombstone_capacity FROM fleet_settings WHERE id = 1",
                &[],
            )
            .await
            .map_err(unavailable)?;
        let stored = |i: usize| -> Result<usize, LedgerError> {
            let value: i64 = row.try_get(i).map_err(unavailable)?;
            usize::try_from(value).map_err(|_| {
                LedgerError::Setup(format!(
                    "the ledger's stored capacity {value} cannot be used by this host; fix the \
                     fleet_settings row"
                ))
            })
        };
        let (capacity, tombstone_capacity) = (stored(0)?, stored(1)?);
        let sent = Instant::now();
        let epoch: i64 = client
            .query_one(
                "INSERT INTO hosts (host_id, run_id, socket, lease_until, state, renewed_at,
                                    contact_since)
                 VALUES ($1, $2, $3, now() + $4::float8 * interval '1 millisecond', 'alive',
                         now(), now())
                 RETURNING epoch",
                &[
                    &config.host_id,
                    &config.run_id,
                    &config.socket,
                    &(config.lease.as_millis() as f64),
                ],
            )
            .await
            .map_err(unavailable)?
            .try_get(0)
            .map_err(unavailable)?;
        let (lost_tx, _) = watch::channel(None);
        let (decided, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            pg,
            host_id: config.host_id,
            run_id: config.run_id,
            epoch,
            lease: config.lease,
            capacity,
            tombstone_capacity,
            interrupted_reply: config.interrupted_reply,
            renewed_at: Mutex::new(sent),
            gone: Mutex::new(None),
            lost_tx,
            decided,
            misc: tokio::sync::Mutex::new(None),
            renewal_paused: AtomicBool::new(false),
            load: Mutex::new(None),
            taking_back: Mutex::new(std::collections::HashSet::new()),
            cancel: CancellationToken::new(),
            batches: AtomicU64::new(0),
            batched_ops: AtomicU64::new(0),
        });
        // Older runs under this host ID are superseded: interrupt their receipts now.
        lease::reap(&mut client, &shared).await?;
        *shared.misc.lock().await = Some(Arc::new(client));
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..batch::workers(config.connections) {
            tokio::spawn(batch::worker(shared.clone(), rx.clone()));
        }
        tokio::spawn(lease::renew_loop(shared.clone()));
        tokio::spawn(lease::reap_loop(shared.clone()));
        tokio::spawn(lease::listen_loop(shared.clone()));
        Ok(Ledger {
            inner: Arc::new(Inner { shared, queue }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// This host run's epoch.
    pub fn epoch(&self) -> i64 {
        self.shared().epoch
    }

    /// This host's name.
    pub fn host_id(&self) -> &str {
        &self.shared().host_id
    }

    /// The fleet's receipt capacity (as stored in the ledger).
    pub fn capacity(&self) -> usize {
        self.shared().capacity
    }

    /// The fleet's tombstone capacity.
    pub fn tombstone_capacity(&self) -> usize {
        self.shared().tombstone_capacity
    }

    /// How long this host's lease has left, measured from when the last renewal was sent;
    /// zero once lost.
    pub fn lease_left(&self) -> Duration {
        let shared = self.shared();
        if shared.gone().is_some() {
            return Duration::ZERO;
        }
        let renewed = *shared.renewed_at.lock().unwrap_or_else(|p| p.into_inner());
        (renewed + shared.lease).saturating_duration_since(Instant::now())
    }

    /// Becomes `Some(why)` once this host can no longer act for the fleet (its epoch fenced
    /// out): the host stops.
    pub fn lost(&self) -> watch::Receiver<Option<String>> {
        self.shared().lost_tx.subscribe()
    }

    /// Stops renewing this run's lease, as a hung or partitioned host would; for tests of
    /// what the fleet does when a lease lapses.
    #[doc(hidden)]
    pub fn pause_renewal(&self) {
        self.shared().renewal_paused.store(true, Ordering::SeqCst);
    }

    /// Batches this host run has sent and the operations they carried (claims and
    /// completions), for measuring the group commit.
    #[doc(hidden)]
    pub fn batch_stats(&self) -> (u64, u64) {
        let shared = self.shared();
        (
            shared.batches.load(Ordering::Relaxed),
            shared.batched_ops.load(Ordering::Relaxed),
        )
    }

    /// Claims a new mutation: inserts its running row under this host's epoch and commits it
    /// durably, or returns the row that was there, or `Full`.
    ///
    /// A claim the database does not answer within a third of the lease is `Unavailable`
    /// (the action must not start: nothing was executed). It may still commit later, when the
    /// server wakes up: it is then taken back (withdrawn) as soon as its answer arrives, and
    /// until that is done every claim of the same ID is refused, so the late row can never
    /// stand for an execution that did not happen, nor be deleted under a later one.
    pub async fn claim(&self, claim: Claim) -> Result<Claimed, LedgerError> {
        let shared = &self.inner.shared;
        if let Some(why) = shared.gone() {
            return Err(LedgerError::Fenced(why));
        }
        let id = claim.request_id.clone();
        if shared.taking_back().contains(&id) {
            return Err(LedgerError::Unavailable(
                "an earlier claim of this id timed out and is still being taken back from the \
                 ledger"
                    .to_string(),
            ));
        }
        let (tx, mut rx) = oneshot::channel();
        self.inner
            .queue
            .send(batch::Op::Claim(claim, tx))
            .map_err(|_| stopped())?;
        let limit = shared.call_timeout();
        match tokio::time::timeout(limit, &mut rx).await {
            Ok(answer) => answer.map_err(|_| stopped())?,
            Err(_) => {
                shared.taking_back().insert(id.clone());
                tokio::spawn(take_back_late_claim(shared.clone(), id, rx));
                Err(no_answer(limit))
            }
        }
    }

    /// Installs what the lease renewal reports as this host's running receipts and blocked
    /// tasks (every host's hosts pane shows them).
    pub fn report_load(&self, reporter: LoadReporter) {
        *self.shared().load.lock().unwrap_or_else(|p| p.into_inner()) = Some(reporter);
    }

    /// Deletes the `hosts` rows of runs that left or died more than `kept` ago and have no
    /// receipt still running; returns how many. Every host does this with [`HOSTS_KEPT`]
    /// about once a minute.
    pub async fn prune_hosts(&self, kept: Duration) -> Result<u64, LedgerError> {
        let rows = self
            .shared()
            .read(lease::PRUNE_HOSTS, &[&(kept.as_millis() as f64)])
            .await?;
        let pruned: i64 = match rows.first() {
            Some(row) => row.try_get(0).map_err(unavailable)?,
            None => 0,
        };
        Ok(pruned.max(0) as u64)
    }

    /// Stores a claimed receipt's reply body (and, for `task.start`, the task it opened),
    /// fenced by this host's epoch, committed durably.
    pub async fn complete(
        &self,
        request_id: &str,
        reply: &str,
        task_id: Option<&str>,
        at: i64,
    ) -> Result<Completed, LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .queue
            .send(batch::Op::Complete(batch::Completion {
                request_id: request_id.to_string(),
                reply: reply.to_string(),
                task_id: task_id.map(str::to_string),
                at,
                answer: tx,
            }))
            .map_err(|_| stopped())?;
        let limit = self.shared().call_timeout();
        match tokio::time::timeout(limit, rx).await {
            Ok(answer) => answer.map_err(|_| stopped())?,
            // Storing a reply is fenced and safe to repeat: the caller retries.
            Err(_) => Err(no_answer(limit)),
        }
    }

    /// Deletes this host's running row for a claim whose action never started (fenced).
    /// Safe to repeat, e.g. after a claim whose commit outcome was unknown.
    pub async fn withdraw(&self, request_id: &str) -> Result<(), LedgerError> {
        self.shared()
            .read(
                "SELECT polaris_withdraw($1, $2)",
                &[&self.epoch(), &request_id],
            )
            .await?;
        Ok(())
    }

    /// The row of one request ID.
    pub async fn receipt(&self, request_id: &str) -> Result<Option<LedgerReceipt>, LedgerError> {
        let rows = self
            .shared()
            .read(
                &format!("SELECT {RECEIPT_COLUMNS} FROM receipts WHERE request_id = $1"),
                &[&request_id],
            )
            .await?;
        rows.first().map(receipt_from_row).transpose()
    }

    /// Waits until a running row is decided (completed, cleared or gone) or `deadline`
    /// passes; `None` at the deadline, and also when the row is gone (withdrawn: its action
    /// never started), which [`Ledger::receipt`] tells apart.
    pub async fn wait_decided(
        &self,
        request_id: &str,
        deadline: Instant,
    ) -> Result<Option<LedgerReceipt>, LedgerError> {
        // Subscribe before reading so a completion between the read and the wait is not missed.
        let mut decided = self.shared().decided.subscribe();
        loop {
            match self.receipt(request_id).await? {
                None => return Ok(None),
                Some(row) if row.state != RowState::Running => return Ok(Some(row)),
                Some(_) => {}
            }
            let poll = tokio::time::sleep(WAIT_POLL);
            tokio::pin!(poll);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return Ok(None),
                    _ = &mut poll => break,
                    note = decided.recv() => match note {
                        Ok(id) if &*id == request_id => break,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => {}
                    },
                }
            }
        }
    }

    /// The host that opened a task, when any host of the fleet did.
    pub async fn task_host(&self, task_id: &str) -> Result<Option<String>, LedgerError> {
        let rows = self
            .shared()
            .read(
                "SELECT host_id FROM receipts
                  WHERE task_id = $1 AND method = 'task.start' AND state = 'completed'
                  ORDER BY first_seen LIMIT 1",
                &[&task_id],
            )
            .await?;
        rows.first()
            .map(|row| row.try_get(0).map_err(unavailable))
            .transpose()
    }

    /// Every host run the ledger knows, newest first.
    pub async fn hosts(&self) -> Result<Vec<HostRow>, LedgerError> {
        let rows = self
            .shared()
            .read(
                "SELECT h.host_id, h.epoch, h.run_id, h.socket,
                        (extract(epoch FROM h.started_at) * 1000)::bigint AS started_at,
                        (extract(epoch FROM (h.lease_until - now())) * 1000)::bigint AS lease_left,
                        h.state, h.blocked,
                        CASE WHEN h.state = 'alive' THEN h.running
                             ELSE (SELECT count(*) FROM receipts r
                                    WHERE r.epoch = h.epoch AND r.state = 'running')
                        END AS running
                   FROM hosts h ORDER BY h.epoch DESC",
                &[],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let running: i64 = row.try_get("running").map_err(unavailable)?;
                let blocked: i64 = row.try_get("blocked").map_err(unavailable)?;
                Ok(HostRow {
                    host_id: row.try_get("host_id").map_err(unavailable)?,
                    epoch: row.try_get("epoch").map_err(unavailable)?,
                    run_id: row.try_get("run_id").map_err(unavailable)?,
                    socket: row.try_get("socket").map_err(unavailable)?,
                    started_at: row.try_get("started_at").map_err(unavailable)?,
                    lease_left_ms: row.try_get("lease_left").map_err(unavailable)?,
                    state: row.try_get("state").map_err(unavailable)?,
                    running: running.max(0) as u64,
                    blocked: blocked.max(0) as u64,
                })
            })
            .collect()
    }

    /// The fleet's receipt counts.
    pub async fn counts(&self) -> Result<FleetCounts, LedgerError> {
        let rows = self
            .shared()
            .read(
                "SELECT (SELECT used FROM fleet_usage WHERE id = 1) AS used,
                        (SELECT count(*) FROM receipts WHERE state = 'running') AS running,
                        (SELECT tombstones FROM fleet_usage WHERE id = 1) AS tombstones,
                        s.capacity, s.tombstone_capacity
                   FROM fleet_settings s WHERE s.id = 1",
                &[],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Err(LedgerError::Setup(
                "the ledger has no fleet_settings row; restart a host to recreate it".to_string(),
            ));
        };
        let get = |name: &str| -> Result<u64, LedgerError> {
            let value: i64 = row.try_get(name).map_err(unavailable)?;
            Ok(value.max(0) as u64)
        };
        Ok(FleetCounts {
            used: get("used")?,
            running: get("running")?,
            tombstones: get("tombstones")?,
            capacity: get("capacity")?,
            tombstone_capacity: get("tombstone_capacity")?,
        })
    }

    /// Leaves the fleet cleanly: this run's still-running receipts become `INTERRUPTED`, its
    /// row `left`, and the background work stops.
    pub async fn leave(&self) -> Result<(), LedgerError> {
        let shared = self.shared();
        shared.cancel.cancel();
        {
            let mut gone = shared.gone.lock().unwrap_or_else(|p| p.into_inner());
            if gone.is_none() {
                *gone = Some("this host run has left the fleet".to_string());
            }
        }
        let leaving = async {
            let mut client = connect(&shared.pg).await?;
            lease::interrupt_epoch(&mut client, shared, shared.epoch, lease::Ending::Left).await
        };
        // A hung database must not hold the host's exit: after a lease, the others reap.
        match tokio::time::timeout(shared.lease, leaving).await {
            Ok(result) => result.map(|_| ()),
            Err(_) => Err(no_answer(shared.lease)),
        }
    }
}

/// Waits for the answer of a claim whose caller gave up, and takes the claim back when it
/// was (or may have been) committed; then lets claims of the ID through again.
async fn take_back_late_claim(
    shared: Arc<Shared>,
    id: String,
    late: oneshot::Receiver<Result<Claimed, LedgerError>>,
) {
    let committed = match late.await {
        Ok(Ok(Claimed::New)) => true,
        // The connection broke mid-claim: whether it committed is unknown.
        Ok(Err(LedgerError::Unavailable(_))) => true,
        // Another's row, a full book, a fenced run or a stopped ledger: nothing of ours.
        Ok(Ok(_)) | Ok(Err(_)) | Err(_) => false,
    };
    let mut pause = Duration::from_millis(50);
    while committed && !shared.cancel.is_cancelled() {
        match shared
            .read("SELECT polaris_withdraw($1, $2)", &[&shared.epoch, &id])
            .await
        {
            Ok(_) | Err(LedgerError::Fenced(_)) | Err(LedgerError::Setup(_)) => break,
            Err(LedgerError::Unavailable(why)) => {
                tracing::warn!(request_id = %id, "taking back a late claim: {why}; trying again");
                tokio::select! {
                    _ = shared.cancel.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
    shared.taking_back().remove(&id);
}

/// Bounds every ledger connection's waits on the server, so a sick database cannot hold a
/// host (or, through a lock, the whole fleet) indefinitely: each statement and each lock wait
/// is cancelled by the server after a third of the lease (the same bound the host keeps on its
/// side, [`Shared::call_timeout`]); a session idle inside a transaction (a host frozen
/// half-way through reaping, holding the capacity row) is ended after one lease. TCP
/// connections also get keepalives and a user timeout, so a server that vanished from the
/// network is noticed instead of awaited. The host still bounds each call itself: a server
/// that is stopped (`SIGSTOP`) or cut off enforces nothing.
fn limit_every_connection(pg: &mut tokio_postgres::Config, lease: Duration) {
    let per_call = call_timeout(lease).as_millis();
    let idle = lease.as_millis().max(1);
    let mut options = pg.get_options().unwrap_or_default().to_owned();
    for (name, value) in [
        ("statement_timeout", per_call),
        ("lock_timeout", per_call),
        ("idle_in_transaction_session_timeout", idle),
    ] {
        if !options.contains(name) {
            if !options.is_empty() {
                options.push(' ');
            }
            options.push_str(&format!("-c {name}={value}"));
        }
    }
    pg.options(options);
    if pg.get_tcp_user_timeout().is_none() {
        pg.tcp_user_timeout(lease);
        pg.keepalives_idle(call_timeout(lease).max(Duration::from_secs(1)));
        pg.keepalives_interval(Duration::from_secs(1));
        pg.keepalives_retries(3);
    }
}

/// Opens one connection with the settings every ledger connection needs.
async fn connect(pg: &tokio_postgres::Config) -> Result<Client, LedgerError> {
    let (client, connection) = pg.connect(NoTls).await.map_err(unavailable)?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    // A claim is acknowledged only once it survives a crash of the database.
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .map_err(unavailable)?;
    Ok(client)
}

/// Maps a database error: the fencing SQLSTATE means this run lost its epoch; anything else
/// means the ledger could not be used for this call.
fn unavailable(error: tokio_postgres::Error) -> LedgerError {
    if error.code().map(|c| c.code()) == Some(schema::FENCED_SQLSTATE) {
        return LedgerError::Fenced(describe(&error));
    }
    LedgerError::Unavailable(describe(&error))
}

/// A database error in one line, with what to check next when the server was not reached.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => format!(
            "{error}; check that PostgreSQL is running and reachable with the --ledger \
             connection string"
        ),
    }
}

fn stopped() -> LedgerError {
    LedgerError::Unavailable(
        "this host's ledger connection has stopped (the host is leaving the fleet)".to_string(),
    )
}

fn too_large(what: &str) -> LedgerError {
    LedgerError::Setup(format!(
        "the {what} is too large for the ledger; choose a smaller one"
    ))
}

/// Reads a receipt row (any row carrying [`RECEIPT_COLUMNS`] by name).
fn receipt_from_row(row: &Row) -> Result<LedgerReceipt, LedgerError> {
    let state: String = row.try_get("state").map_err(unavailable)?;
    let state = match state.as_str() {
        "running" => RowState::Running,
        "completed" => RowState::Completed,
        "cleared" => RowState::Cleared,
        other => {
            return Err(LedgerError::Unavailable(format!(
                "the ledger holds a receipt in an unknown state {other:?}; upgrade this host"
            )))
        }
    };
    Ok(LedgerReceipt {
        request_id: row.try_get("request_id").map_err(unavailable)?,
        request: row.try_get("request").map_err(unavailable)?,
        method: row.try_get("method").map_err(unavailable)?,
        task_id: row.try_get("task_id").map_err(unavailable)?,
        host_id: row.try_get("host_id").map_err(unavailable)?,
        epoch: row.try_get("epoch").map_err(unavailable)?,
        run_id: row.try_get("run_id").map_err(unavailable)?,
        state,
        reply: row.try_get("reply").map_err(unavailable)?,
        first_seen: row.try_get("first_seen").map_err(unavailable)?,
        completed_at: row.try_get("completed_at").map_err(unavailable)?,
        cleared_at: row.try_get("cleared_at").map_err(unavailable)?,
        clear_reason: row.try_get("clear_reason").map_err(unavailable)?,
        // A claim's answer carries only the columns above; every other read carries these.
        code: row.try_get("code").ok().flatten(),
        acknowledged_at: row.try_get("acknowledged_at").ok().flatten(),
        settled: row.try_get("settled").unwrap_or(false),
        replays: row.try_get("replays").unwrap_or(0),
    })
}
