//! The lease, the reaper and the notification listener: the ledger's background work.
//!
//! A host run keeps its epoch alive by renewing `hosts.lease_until` (the database's clock)
//! every lease/3. Every host also reaps: a run whose lease lapsed, or that a newer run under
//! the same host ID superseded, is marked `dead` and its running receipts get their stored
//! `INTERRUPTED` reply, fenced by its epoch — never re-run anywhere. A reaper declares a
//! lapsed run dead only once it has itself been in regular touch with the database for a
//! whole lease, so after an outage of the database the live hosts renew before anyone reaps
//! them ([`MAY_REAP`]); a run that was reaped anyway learns it at its next renewal and stops.
//! The renewal also carries the host's running receipts and blocked tasks, for every host's
//! hosts pane; the reaper prunes the rows of runs that ended a day ago. The listener turns the
//! completions' NOTIFY into wake-ups for copies waiting on another host's execution.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, Client};

use super::{connect, establish, schema, unavailable, Interrupted, LedgerError, Shared};

/// Renews this run's lease every lease/3 until the ledger stops; a renewal that finds the row
/// no longer alive means this run was fenced out.
pub async fn renew_loop(shared: Arc<Shared>) {
    let period = shared.lease / 3;
    let mut conn: Option<Client> = None;
    loop {
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        if shared.renewal_paused.load(Ordering::SeqCst) {
            continue;
        }
        if conn.as_ref().is_none_or(Client::is_closed) {
            conn = connect(&shared.pg).await.ok();
        }
        let Some(client) = conn.as_ref() else {
            continue;
        };
        let sent = Instant::now();
        let lease_ms = shared.lease.as_millis() as f64;
        let load = shared.load();
        let running = i64::try_from(load.running).unwrap_or(i64::MAX);
        let blocked = i64::try_from(load.blocked).unwrap_or(i64::MAX);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&shared.epoch, &lease_ms, &running, &blocked];
        let renewal = client.execute(RENEW, &params);
        match tokio::time::timeout(period, renewal).await {
            Ok(Ok(1)) => {
                let mut renewed = shared.renewed_at.lock().unwrap_or_else(|p| p.into_inner());
                if sent > *renewed {
                    *renewed = sent;
                }
            }
            Ok(Ok(_)) => {
                let state: Option<String> = client
                    .query_opt("SELECT state FROM hosts WHERE epoch = $1", &[&shared.epoch])
                    .await
                    .ok()
                    .flatten()
                    .and_then(|row| row.try_get(0).ok());
                shared.lose(format!(
                    "the fleet marked this host run (epoch {}) {}: its lease lapsed or a newer \
                     run registered as {:?}; its running receipts were interrupted. Restart the \
                     host to rejoin the fleet",
                    shared.epoch,
                    state.as_deref().unwrap_or("gone"),
                    shared.host_id
                ));
                return;
            }
            Ok(Err(_)) | Err(_) => conn = None,
        }
    }
}

/// The renewal: extends the lease (the database's clock), reports the host's load, and keeps
/// `contact_since` — when this run's current stretch of regular renewals began. A renewal
/// more than half a lease after the previous one (renewals are a third of a lease apart)
/// means this host lost touch with the database meanwhile, and the stretch starts again.
const RENEW: &str = "UPDATE hosts
    SET contact_since = CASE WHEN renewed_at IS NULL
                                  OR now() - renewed_at > $2::float8 / 2 * interval '1 millisecond'
                             THEN now() ELSE contact_since END,
        renewed_at = now(),
        lease_until = now() + $2::float8 * interval '1 millisecond',
        running = $3, blocked = $4
  WHERE epoch = $1 AND state = 'alive'";

/// Whether host run `h` may be declared dead by the reaping run `$1` (whose lease is `$2` ms):
/// a newer run under the same host ID superseded it, or its lease lapsed while the reaper has
/// been in regular touch with the database for at least a whole lease.
///
/// The second half is what keeps an outage of the database from turning into a fleet-wide
/// stop: when PostgreSQL comes back after every lease lapsed, the database cannot tell a host
/// that died from one that could not reach it either. Every reaper's contact then restarts
/// with its first renewal, so for one more lease it reaps nobody, and every live host renews
/// (every lease/3) before anyone may reap it. A host that truly died is reaped one lease later
/// than usual. A reaper never reaps itself.
const MAY_REAP: &str = "h.state = 'alive' AND h.epoch <> $1
    AND (EXISTS (SELECT 1 FROM hosts n WHERE n.host_id = h.host_id AND n.epoch > h.epoch)
         OR (h.lease_until < now()
             AND EXISTS (SELECT 1 FROM hosts me
                          WHERE me.epoch = $1 AND me.state = 'alive'
                            AND me.lease_until > now()
                            AND me.contact_since
                                <= now() - $2::float8 * interval '1 millisecond')))";

/// Deletes the rows of runs that ended more than `$1` ms ago with no receipt still running
/// (see [`super::HOSTS_KEPT`]).
pub const PRUNE_HOSTS: &str = "WITH gone AS (
    DELETE FROM hosts h
     WHERE h.state <> 'alive'
       AND coalesce(h.ended_at, h.lease_until) < now() - $1::float8 * interval '1 millisecond'
       AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.epoch = h.epoch AND r.state = 'running')
    RETURNING 1)
  SELECT count(*) FROM gone";

/// How often a host prunes the `hosts` table.
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Reaps dead host runs every lease/3 until the ledger stops, and prunes long-ended runs'
/// rows about once a minute.
pub async fn reap_loop(shared: Arc<Shared>) {
    let period = shared.lease / 3;
    let mut conn: Option<Client> = None;
    let mut pruned_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        if conn.as_ref().is_none_or(Client::is_closed) {
            conn = connect(&shared.pg).await.ok();
        }
        let Some(client) = conn.as_mut() else {
            continue;
        };
        // Bounded like every call: a hung server must not stall reaping for good.
        match tokio::time::timeout(shared.lease, reap(client, &shared)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) if !client.is_closed() => {}
            Ok(Err(_)) | Err(_) => {
                conn = None;
                continue;
            }
        }
        if pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
            pruned_at = Some(Instant::now());
            let kept = super::HOSTS_KEPT.as_millis() as f64;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&kept];
            let prune = client.execute(PRUNE_HOSTS, &params);
            if let Ok(Err(e)) = tokio::time::timeout(shared.lease, prune).await {
                tracing::warn!("pruning ended host runs from the ledger: {e}");
            }
        }
    }
}

/// Marks every lapsed or superseded host run dead and interrupts its running receipts (and
/// any running receipt left under a run that is no longer alive). Returns how many receipts
/// it interrupted.
pub async fn reap(client: &mut Client, shared: &Shared) -> Result<u64, LedgerError> {
    let lease_ms = shared.lease.as_millis() as f64;
    let rows = client
        .query(
            &format!(
                "SELECT h.epoch FROM hosts h WHERE {MAY_REAP}
                 UNION
                 SELECT DISTINCT r.epoch FROM receipts r JOIN hosts h ON h.epoch = r.epoch
                  WHERE r.state = 'running' AND h.state <> 'alive'"
            ),
            &[&shared.epoch, &lease_ms],
        )
        .await
        .map_err(unavailable)?;
    let mut interrupted = 0;
    for row in rows {
        let epoch: i64 = row.try_get(0).map_err(unavailable)?;
        interrupted += interrupt_epoch(client, shared, epoch, Ending::Dead).await?;
    }
    Ok(interrupted)
}

/// How a host run ends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Its lease lapsed or a newer run superseded it (decided by the database's clock).
    Dead,
    /// It left cleanly.
    Left,
}

/// Ends one host run and turns its running receipts into their `INTERRUPTED` replies, in one
/// transaction that first locks the fleet's usage row, so every claim of that run committed
/// before it is interrupted and none commits after.
pub async fn interrupt_epoch(
    client: &mut Client,
    shared: &Shared,
    epoch: i64,
    ending: Ending,
) -> Result<u64, LedgerError> {
    let lease_ms = shared.lease.as_millis() as f64;
    let tx = client.transaction().await.map_err(unavailable)?;
    tx.execute("SELECT 1 FROM fleet_usage WHERE id = 1 FOR UPDATE", &[])
        .await
        .map_err(unavailable)?;
    let ended = match ending {
        Ending::Dead => tx
            .query_opt(
                &format!(
                    "UPDATE hosts h SET state = 'dead', ended_at = now()
                      WHERE h.epoch = $3 AND {MAY_REAP}
                     RETURNING h.host_id, h.run_id"
                ),
                &[&shared.epoch, &lease_ms, &epoch],
            )
            .await
            .map_err(unavailable)?,
        Ending::Left => tx
            .query_opt(
                "UPDATE hosts SET state = 'left', ended_at = now()
                  WHERE epoch = $1 AND state = 'alive'
                 RETURNING host_id, run_id",
                &[&epoch],
            )
            .await
            .map_err(unavailable)?,
    };
    let ended = match ended {
        Some(row) => row,
        // Already ended (by another host, or earlier): interrupt what is still running under
        // it; still alive (renewed meanwhile): nothing to do.
        None => match tx
            .query_opt(
                "SELECT host_id, run_id FROM hosts WHERE epoch = $1 AND state <> 'alive'",
                &[&epoch],
            )
            .await
            .map_err(unavailable)?
        {
            Some(row) => row,
            None => return Ok(0),
        },
    };
    let host_id: String = ended.try_get(0).map_err(unavailable)?;
    let run_id: String = ended.try_get(1).map_err(unavailable)?;
    let running = tx
        .query(
            "SELECT request_id, method, task_id FROM receipts
              WHERE epoch = $1 AND state = 'running'",
            &[&epoch],
        )
        .await
        .map_err(unavailable)?;
    let mut ids = Vec::with_capacity(running.len());
    let mut replies = Vec::with_capacity(running.len());
    for row in &running {
        let request_id: String = row.try_get(0).map_err(unavailable)?;
        let method: String = row.try_get(1).map_err(unavailable)?;
        let task_id: Option<String> = row.try_get(2).map_err(unavailable)?;
        replies.push((shared.interrupted_reply)(&Interrupted {
            request_id: &request_id,
            method: &method,
            task_id: task_id.as_deref(),
            run_id: &run_id,
            host_id: &host_id,
        }));
        ids.push(request_id);
    }
    let changed: i64 = if ids.is_empty() {
        0
    } else {
        tx.query_one(
            "SELECT polaris_interrupt($1, $2, $3)",
            &[&epoch, &ids, &replies],
        )
        .await
        .map_err(unavailable)?
        .try_get(0)
        .map_err(unavailable)?
    };
    tx.commit().await.map_err(unavailable)?;
    if changed > 0 {
        tracing::warn!(
            epoch,
            host_id = %host_id,
            interrupted = changed,
            "a host run of the fleet ended with running receipts; they now answer INTERRUPTED"
        );
    }
    Ok(changed.max(0) as u64)
}

/// Listens for decided receipts and wakes the copies waiting for them; reconnects while the
/// ledger runs (waiting copies also poll, so a gap only delays them).
pub async fn listen_loop(shared: Arc<Shared>) {
    loop {
        if shared.cancel.is_cancelled() {
            return;
        }
        if let Err(_e) = listen_once(&shared).await {
            tokio::select! {
                _ = shared.cancel.cancelled() => return,
                _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
            }
        }
    }
}

async fn listen_once(shared: &Shared) -> Result<(), LedgerError> {
    let (client, mut connection) = establish(&shared.pg).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    let pump = tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(note)) => {
                    if tx.send(note.payload().to_string()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    let result = async {
        client
            .batch_execute(&format!("LISTEN {}", schema::CHANNEL))
            .await
            .map_err(unavailable)?;
        loop {
            tokio::select! {
                _ = shared.cancel.cancelled() => return Ok(()),
                note = rx.recv() => match note {
                    Some(id) => {
                        let _ = shared.decided.send(id.into());
                    }
                    None => {
                        return Err(LedgerError::Unavailable(
                            "the ledger's notification connection closed".to_string(),
                        ))
                    }
                },
            }
        }
    }
    .await;
    pump.abort();
    result
}
