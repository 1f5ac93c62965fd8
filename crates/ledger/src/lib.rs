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
//! The host (`polaris-host`) decides what a row means for a request; this module only speaks
//! to the database: the schema and its migrations, the connections, batching claims and
//! completions into few commits, the lease, and reaping the receipts of dead hosts.

#![warn(missing_docs)]

mod batch;
mod connection;
mod lease;
mod operator;
mod receipt_row;
mod registration;
mod rows;
pub mod schema;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use connection::*;
pub use operator::{
    CensusPhase, CensusRequest, Change, Cleared, RowFilter, RowOrder, RowStateFilter, MAX_LISTED,
};
use receipt_row::{receipt_from_row, RECEIPT_COLUMNS};
pub use registration::{machine_name, TAKE_OVER_FLAG};
pub use rows::*;

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
        if let Some(password) = &config.password {
            pg.password(password.as_bytes());
        }
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
        let epoch = registration::register(&mut client, &config).await?;
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
