//! The connections the ledger keeps and the bounds on every call: what a sick database can
//! cost a host is a third of a lease per call, never a hang.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::rows::{Claimed, HostLoad, Interrupted, LedgerError, LoadReporter};
use super::schema;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::time::Instant;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, NoTls, Row, Socket};
use tokio_util::sync::CancellationToken;

/// What the background tasks and the API share.
pub(super) struct Shared {
    pub(super) pg: tokio_postgres::Config,
    pub(super) host_id: String,
    pub(super) run_id: String,
    pub(super) epoch: i64,
    pub(super) lease: Duration,
    pub(super) capacity: usize,
    pub(super) tombstone_capacity: usize,
    pub(super) interrupted_reply: Arc<dyn Fn(&Interrupted<'_>) -> String + Send + Sync>,
    /// When the last successful lease renewal (or the registration) was sent.
    pub(super) renewed_at: Mutex<Instant>,
    /// Set once this run can no longer act: fenced out (`lost`) or left.
    pub(super) gone: Mutex<Option<String>>,
    pub(super) lost_tx: watch::Sender<Option<String>>,
    /// Request IDs whose rows were decided, from LISTEN/NOTIFY.
    pub(super) decided: broadcast::Sender<Arc<str>>,
    /// The connection for single statements (reads, withdrawals), reconnected on demand.
    pub(super) misc: tokio::sync::Mutex<Option<Arc<Client>>>,
    pub(super) renewal_paused: AtomicBool,
    /// Reads this host's running receipts and blocked tasks for the lease renewal.
    pub(super) load: Mutex<Option<LoadReporter>>,
    /// Request IDs whose claim timed out and may still commit late: each is taken back once
    /// the ledger answers, and claims of it are refused until then.
    pub(super) taking_back: Mutex<std::collections::HashSet<String>>,
    pub(super) cancel: CancellationToken,
    /// Batches run and operations in them, for measuring the group commit.
    pub(super) batches: AtomicU64,
    pub(super) batched_ops: AtomicU64,
}

impl Shared {
    /// Marks this run fenced out and tells the host.
    pub(super) fn lose(&self, why: String) {
        let mut gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        if gone.is_none() {
            *gone = Some(why.clone());
            self.lost_tx.send_replace(Some(why));
        }
    }

    pub(super) fn gone(&self) -> Option<String> {
        self.gone.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How long one call to the database may take before this host gives up on it: the
    /// renewal period (lease/3). A database that cannot answer a claim in a third of a lease
    /// is sick, and a host that waited longer would have to refuse the action anyway (its
    /// lease would no longer cover it). The same bound is set on the server for every
    /// statement and lock wait ([`limit_every_connection`]).
    pub(super) fn call_timeout(&self) -> Duration {
        call_timeout(self.lease)
    }

    pub(super) fn taking_back(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.taking_back
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This host's load for the lease renewal (zeros until the host installs its reporter).
    pub(super) fn load(&self) -> HostLoad {
        let reporter = self.load.lock().unwrap_or_else(|p| p.into_inner()).clone();
        reporter.and_then(|read| read()).unwrap_or_default()
    }

    pub(super) async fn misc(&self) -> Result<Arc<Client>, LedgerError> {
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
    pub(super) async fn read(
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
    pub(super) async fn operator_read(
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
pub(super) fn call_timeout(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

/// `Unavailable` for a call the database did not answer in time.
pub(super) fn no_answer(limit: Duration) -> LedgerError {
    LedgerError::Unavailable(format!(
        "the ledger did not answer within {} ms (PostgreSQL may be hung, overloaded or cut \
         off); check the database server",
        limit.as_millis()
    ))
}

/// Waits for the answer of a claim whose caller gave up, and takes the claim back when it
/// was (or may have been) committed; then lets claims of the ID through again.
pub(super) async fn take_back_late_claim(
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
pub(super) fn limit_every_connection(pg: &mut tokio_postgres::Config, lease: Duration) {
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

/// Opens one connection, bounded as libpq bounds it: `connect_timeout` covers the whole
/// establishment, startup and authentication included. (tokio-postgres applies it to the
/// socket alone, so a server that accepts and never answers would hang the caller.)
pub(super) async fn establish(
    pg: &tokio_postgres::Config,
) -> Result<(Client, tokio_postgres::Connection<Socket, NoTlsStream>), LedgerError> {
    let Some(bound) = pg.get_connect_timeout().copied() else {
        return pg.connect(NoTls).await.map_err(unavailable);
    };
    match tokio::time::timeout(bound, pg.connect(NoTls)).await {
        Ok(connected) => connected.map_err(unavailable),
        Err(_) => Err(LedgerError::Unavailable(format!(
            "the ledger's server took the connection but did not answer within {} s \
             (connect_timeout); check that it is PostgreSQL, running and not overloaded, \
             and that the --ledger connection string points at it",
            bound.as_secs_f64()
        ))),
    }
}

/// Opens one connection with the settings every ledger connection needs.
pub(super) async fn connect(pg: &tokio_postgres::Config) -> Result<Client, LedgerError> {
    let (client, connection) = establish(pg).await?;
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
pub(super) fn unavailable(error: tokio_postgres::Error) -> LedgerError {
    if error.code().map(|c| c.code()) == Some(schema::FENCED_SQLSTATE) {
        return LedgerError::Fenced(describe(&error));
    }
    LedgerError::Unavailable(describe(&error))
}

/// A database error in one line, with what to check next when the server was not reached.
pub(super) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => format!(
            "{error}; check that PostgreSQL is running and reachable with the --ledger \
             connection string"
        ),
    }
}

pub(super) fn stopped() -> LedgerError {
    LedgerError::Unavailable(
        "this host's ledger connection has stopped (the host is leaving the fleet)".to_string(),
    )
}

pub(super) fn too_large(what: &str) -> LedgerError {
    LedgerError::Setup(format!(
        "the {what} is too large for the ledger; choose a smaller one"
    ))
}
