//! A fleet host's side of the operator's book (SPEC §6, §11, §13): clearing and acknowledging
//! for the whole fleet, and keeping this host's copies in memory consistent with the ledger.
//!
//! The ledger is the book; what this host holds in memory is a cache of rows it claimed or
//! answered. The rules for that cache:
//!
//! - A clear is decided in the ledger alone (one transaction: the rows become tombstones). Every
//!   host then turns the copies it holds of the cleared receipts into local tombstones, from the
//!   ledger's feed of changes (woken by a notification, and read by change number every
//!   [`FEED_EVERY`] too, so a host that missed the notification still converges). From then on a
//!   re-send there answers `RECEIPT_CLEARED`, never a replay.
//! - A copy whose claim read the row *before* the clear and that is still being settled when the
//!   clear reaches this host (its local receipt is running) gets its tombstone too; when it then
//!   tries to cache the row's reply it finds the tombstone, withdraws its receipt and answers
//!   `RECEIPT_CLEARED`: no stale reply is ever cached after the clear applied here.
//! - A host's own execution cannot be cleared while it runs: the ledger clears completed rows
//!   only, and the census (below) sees a copy that is still running here.
//! - Copies answered from memory never touch the ledger. So each phase of a clear takes a
//!   census: every live host reports a checksum of its copies of the listed receipts (present,
//!   running, joins, replays), and the commit applies only if every host reports what it did at
//!   the prepare.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::clear::{ClearCandidate, ClearRefusal, ClearedReceipt, CommittedClear};
use super::{Host, PreparedClearView, CLEAR_TOKEN_TTL_MS, MAX_PREPARED_CLEARS};
use crate::book::{digest, RequestKey};
use crate::ledger::{
    CensusPhase, CensusRequest, Cleared, LedgerError, LedgerReceipt, RowFilter, RowState,
    MAX_LISTED,
};
use crate::protocol::results::ReceiptCounts;
use crate::protocol::{format_millis, now_millis, Delivery, ErrorBody, ErrorCode, Method, Outcome};

/// How often a fleet host reads the ledger's changes and census requests when no
/// notification woke it.
pub const FEED_EVERY: Duration = Duration::from_millis(250);

/// How long a clear waits for every live host's census.
const CENSUS_WAIT: Duration = Duration::from_secs(5);

/// Changes read per round of the feed.
const CHANGES_PER_READ: i64 = 10_000;

/// A fleet clear's time and reason: the copies it drops here become one local clear.
type ClearOf = (i64, String);

/// A request ID and its fingerprint digest, as a tombstone keeps them.
type Tombstoned = (RequestKey, crate::book::FingerprintDigest);

/// A fleet clear prepared on this host and not yet committed, by token.
pub(super) type FleetPrepared = std::sync::Mutex<HashMap<String, PreparedFleetClear>>;

/// What a fleet prepare remembers for its commit.
pub(super) struct PreparedFleetClear {
    expires_at: i64,
    /// Each listed request ID with the row's count of copies answered straight from it.
    seen: Vec<(String, i64)>,
    /// What the audit log records of each.
    listed: Vec<ClearedReceipt>,
}

/// Which receipts a fleet prepare is about.
pub enum FleetTargets {
    /// These request IDs (duplicates count once).
    Ids(Vec<String>),
    /// Every receipt of the fleet's book that the filter accepts.
    Filter(RowFilter),
}

/// `LEDGER_UNAVAILABLE` for an operator's request: nothing was changed.
pub(crate) fn ledger_error(what: &str, e: &LedgerError) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::LedgerUnavailable,
        format!("{what} could not be done because the fleet ledger could not be used ({e}); nothing was changed. Try again once the ledger is reachable (run.status shows this host's lease)"),
    )
    .with_delivery(Delivery::NotExecuted)
}

/// The stored reply of a row as an outcome.
fn row_outcome(row: &LedgerReceipt) -> Arc<Outcome> {
    let body = row.reply.clone().unwrap_or_default();
    Outcome::of(super::journaling::code_of(&body), &body)
}

/// Why a row cannot be cleared now, if it cannot.
pub(crate) fn row_refusal(row: &LedgerReceipt) -> Option<ClearRefusal> {
    match row.state {
        RowState::Running => Some(ClearRefusal::Running),
        RowState::Cleared => Some(ClearRefusal::AlreadyCleared),
        RowState::Completed if row.method.parse::<Method>().is_err() => Some(ClearRefusal::Unknown),
        RowState::Completed if !row.clearable() => Some(ClearRefusal::UnverifiedOutcome),
        RowState::Completed => None,
    }
}

impl Host {
    fn fleet_prepared(&self) -> std::sync::MutexGuard<'_, HashMap<String, PreparedFleetClear>> {
        self.inner
            .fleet_prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This host's copy counts of a receipt (joins, replays), `(0, 0)` when it holds none.
    pub(crate) fn local_counts(&self, request_id: &str) -> (u32, u32) {
        let st = self.lock();
        st.book
            .get(&RequestKey::new(request_id))
            .map_or((0, 0), |r| (r.joins, r.replays))
    }

    /// Starts the feed that keeps this host's copies consistent with the ledger: cleared
    /// receipts become local tombstones, acknowledged ones are acknowledged here too, and the
    /// censuses clears ask for are answered. Ends with the host.
    pub(super) fn start_fleet_feed(&self) {
        let Some(ledger) = self.ledger().cloned() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut notes = ledger.notes();
            // A host starting now holds no copies: only later changes concern it.
            let mut seen = loop {
                match ledger.last_change().await {
                    Ok(n) => break n,
                    Err(_) => tokio::time::sleep(FEED_EVERY).await,
                }
                if weak.upgrade().is_none() {
                    return;
                }
            };
            let mut marked = None;
            loop {
                // Kept up while the host drains at shutdown too: until it leaves the fleet it
                // is a live host that clears wait for.
                let Some(inner) = weak.upgrade() else { return };
                let host = Host { inner };
                if marked != Some(seen) && ledger.mark_applied(seen).await.is_ok() {
                    marked = Some(seen);
                }
                // Changes first: a census taken after a clear applied here counts no copy of it.
                loop {
                    match ledger.changes_after(seen, CHANGES_PER_READ).await {
                        Ok(changes) if changes.is_empty() => break,
                        Ok(changes) => {
                            seen = changes.last().map_or(seen, |c| c.seq);
                            let rows: Vec<LedgerReceipt> =
                                changes.into_iter().map(|c| c.row).collect();
                            let h = host.clone();
                            let _ =
                                tokio::task::spawn_blocking(move || h.apply_changes(rows)).await;
                        }
                        Err(e) => {
                            tracing::warn!("reading the fleet ledger's changes: {e}; trying again");
                            break;
                        }
                    }
                }
                if marked != Some(seen) && ledger.mark_applied(seen).await.is_ok() {
                    marked = Some(seen);
                }
                match ledger.census_requests().await {
                    Ok(requests) => {
                        for request in requests {
                            // A large clear's list is walked in slices of the host's lock,
                            // off the runtime's workers.
                            let (h, r) = (host.clone(), request.clone());
                            let Ok(sum) =
                                tokio::task::spawn_blocking(move || h.census_checksum(&r)).await
                            else {
                                continue;
                            };
                            if let Err(e) = ledger.census_report(&request, sum).await {
                                tracing::warn!("answering a clear's census: {e}");
                            }
                        }
                    }
                    Err(e) => tracing::warn!("reading the fleet ledger's census requests: {e}"),
                }
                drop(host);
                let tick = tokio::time::sleep(FEED_EVERY);
                tokio::pin!(tick);
                loop {
                    tokio::select! {
                        _ = &mut tick => break,
                        note = notes.recv() => match note {
                            Ok(n) if &*n == crate::ledger::schema::CHANGES_NOTE => break,
                            Ok(_) => {}
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                                (&mut tick).await;
                                break;
                            }
                        },
                    }
                }
            }
        });
    }

    /// A checksum of the copies this host holds of the listed receipts: which it holds, which
    /// are still running here, and how many copies joined or replayed them. 0 when it holds
    /// none. Taken a slice of the host's lock at a time.
    fn census_checksum(&self, request: &CensusRequest) -> i64 {
        let mut sum: u64 = 0;
        let mut held = false;
        self.in_slices(&request.ids, &mut |st, id| {
            let key = RequestKey::new(id);
            if let Some(r) = st.book.get(&key) {
                held = true;
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (id.as_str(), r.is_running(), r.joins, r.replays).hash(&mut h);
                sum = sum.wrapping_add(h.finish());
            }
        });
        match (held, sum as i64) {
            (false, _) => 0,
            (true, 0) => 1,
            (true, n) => n,
        }
    }

    /// Applies the ledger's changes to the copies this host holds: cleared receipts become
    /// tombstones here (in one local clear per fleet clear), acknowledged ones are acknowledged
    /// here too (their pending outcomes leave their tasks). Blocks: call it off the runtime's
    /// workers.
    fn apply_changes(&self, rows: Vec<LedgerReceipt>) {
        let mut clears: Vec<(ClearOf, Vec<Tombstoned>)> = Vec::new();
        for row in rows {
            match row.state {
                RowState::Cleared => {
                    let batch = (
                        row.cleared_at.unwrap_or_default(),
                        row.clear_reason.clone().unwrap_or_default(),
                    );
                    let entry = (RequestKey::new(&row.request_id), digest(&row.request));
                    match clears.last_mut() {
                        Some((b, keys)) if *b == batch => keys.push(entry),
                        _ => clears.push((batch, vec![entry])),
                    }
                }
                RowState::Completed if row.acknowledged_at.is_some() => {
                    let key = RequestKey::new(&row.request_id);
                    let held = {
                        let st = self.lock();
                        st.book
                            .get(&key)
                            .is_some_and(|r| !r.acknowledged && !r.is_running())
                    };
                    if held {
                        // Already recorded (and audited) where it was acknowledged.
                        let _ = self.acknowledge(
                            &row.request_id,
                            "acknowledged on another host of the fleet",
                            "fleet",
                        );
                    }
                }
                _ => {}
            }
        }
        for ((at, reason), keys) in clears {
            self.drop_cleared_copies(keys, at, &reason, "fleet");
        }
    }

    /// `receipts.clearPrepare` on a fleet host: the candidates are read from the ledger (the
    /// fleet's book), refused as SPEC §6 says, and every live host's census of them is taken.
    pub async fn fleet_clear_prepare(
        &self,
        targets: FleetTargets,
    ) -> Result<PreparedClearView, ErrorBody> {
        let ledger = self.ledger().expect("a fleet host").clone();
        let unavailable = |e: LedgerError| ledger_error("preparing the clear", &e);
        let now = now_millis();
        let mut refused = Vec::new();
        let rows: Vec<LedgerReceipt> = match targets {
            FleetTargets::Ids(ids) => {
                let mut seen = std::collections::HashSet::new();
                let ids: Vec<String> = ids
                    .into_iter()
                    .filter(|id| seen.insert(id.clone()))
                    .collect();
                let found = ledger.receipts_of(&ids).await.map_err(unavailable)?;
                let mut by_id: HashMap<String, LedgerReceipt> = found
                    .into_iter()
                    .map(|r| (r.request_id.clone(), r))
                    .collect();
                let mut rows = Vec::with_capacity(ids.len());
                for id in ids {
                    match by_id.remove(&id) {
                        Some(row) => rows.push(row),
                        None => refused.push((id, ClearRefusal::Unknown)),
                    }
                }
                rows
            }
            FleetTargets::Filter(filter) => ledger
                .matching(&filter, self.config().capacity.min(MAX_LISTED))
                .await
                .map_err(unavailable)?,
        };
        let mut clearable = Vec::new();
        let mut seen = Vec::new();
        let mut listed = Vec::new();
        for row in rows {
            if let Some(why) = row_refusal(&row) {
                refused.push((row.request_id, why));
                continue;
            }
            let method: Method = row.method.parse().expect("row_refusal checked it");
            let outcome = row_outcome(&row);
            let (joins, replays) = self.local_counts(&row.request_id);
            let task_id: Option<crate::tasks::TaskId> = row.task_id.as_deref().map(Into::into);
            seen.push((row.request_id.clone(), row.replays));
            listed.push(ClearedReceipt {
                request_id: row.request_id.clone(),
                method,
                task_id: task_id.clone(),
                code: outcome.code,
            });
            clearable.push(ClearCandidate {
                request_id: row.request_id,
                method,
                task_id,
                outcome,
                joins,
                replays: replays.saturating_add(u32::try_from(row.replays).unwrap_or(u32::MAX)),
                completed_at: row.completed_at.unwrap_or_default(),
            });
        }
        let token = uuid::Uuid::new_v4().to_string();
        let ids: Vec<String> = seen.iter().map(|(id, _)| id.clone()).collect();
        if !ids.is_empty() {
            ledger
                .census(&token, CensusPhase::Prepare, &ids, CENSUS_WAIT)
                .await
                .map_err(unavailable)?;
        }
        let expires_at = now + CLEAR_TOKEN_TTL_MS;
        {
            let mut prepared = self.fleet_prepared();
            prepared.retain(|_, p| p.expires_at > now);
            while prepared.len() >= MAX_PREPARED_CLEARS {
                let first = prepared
                    .iter()
                    .min_by_key(|(_, p)| p.expires_at)
                    .map(|(t, _)| t.clone());
                match first {
                    Some(t) => drop(prepared.remove(&t)),
                    None => break,
                }
            }
            prepared.insert(
                token.clone(),
                PreparedFleetClear {
                    expires_at,
                    seen,
                    listed,
                },
            );
        }
        Ok(PreparedClearView {
            token,
            expires_at,
            clearable,
            refused,
        })
    }

    /// `receipts.clearCommit` on a fleet host: a fresh census, then one transaction in the
    /// ledger that checks every listed row and every host's census against the prepare's and
    /// turns the rows into tombstones for the whole fleet, or changes nothing. This host's
    /// copies become tombstones before it answers; the others' follow from the ledger's feed.
    pub async fn fleet_clear_commit(
        &self,
        token: &str,
        reason: &str,
        operator: &str,
    ) -> Result<CommittedClear, ErrorBody> {
        let ledger = self.ledger().expect("a fleet host").clone();
        let now = now_millis();
        let Some(prepared) = self.fleet_prepared().remove(token) else {
            return Err(ErrorBody::new(
                ErrorCode::ClearTokenStale,
                format!("clear token {token} is unknown on this host or already used; nothing was cleared. Run receipts.clearPrepare (polaris clear) again on this host and commit its new token"),
            ));
        };
        if prepared.expires_at <= now {
            return Err(ErrorBody::new(
                ErrorCode::ClearTokenStale,
                format!("clear token {token} expired at {}; nothing was cleared. Prepare again to see the receipts' current results", format_millis(prepared.expires_at)),
            ));
        }
        let unavailable = |e: LedgerError| ledger_error("the clear", &e);
        let ids: Vec<String> = prepared.seen.iter().map(|(id, _)| id.clone()).collect();
        if !ids.is_empty() {
            ledger
                .census(token, CensusPhase::Commit, &ids, CENSUS_WAIT)
                .await
                .map_err(unavailable)?;
        }
        let tombstones = match ledger
            .clear(token, &prepared.seen, reason, now)
            .await
            .map_err(unavailable)?
        {
            Cleared::Done { tombstones, .. } => tombstones,
            Cleared::Stale { changed } => {
                let first = changed.first().cloned().unwrap_or_default();
                return Err(ErrorBody::new(
                    ErrorCode::ClearTokenStale,
                    format!("receipt {first} changed since the prepare (it was re-queried, acknowledged or cleared on some host of the fleet); nothing was cleared. Prepare again to see its current result"),
                )
                .with_details(json!({"requestId": first, "changed": changed})));
            }
            Cleared::Copied { hosts } => {
                return Err(ErrorBody::new(
                    ErrorCode::ClearTokenStale,
                    format!("host(s) {} of the fleet answered copies of listed receipts since the prepare (a join or a replay); nothing was cleared. Prepare again to see their current results", hosts.join(", ")),
                )
                .with_details(json!({"hosts": hosts})));
            }
            Cleared::TombstonesFull {
                tombstones,
                capacity,
            } => {
                let n = prepared.seen.len();
                return Err(ErrorBody::new(
                    ErrorCode::TombstoneCapacityFull,
                    format!("clearing {n} receipts would exceed the fleet's tombstone capacity ({tombstones} of {capacity} used); nothing was cleared anywhere. Clear fewer receipts, or raise tombstone_capacity in the ledger's fleet_settings table (docs/fleet.md)"),
                )
                .with_details(json!({"tombstoneCapacity": capacity, "tombstones": tombstones, "requested": n})));
            }
        };
        // This host's copies, before the operator is answered.
        let keys: Vec<(RequestKey, crate::book::FingerprintDigest)> = {
            let st = self.lock();
            prepared
                .seen
                .iter()
                .filter_map(|(id, _)| {
                    let key = RequestKey::new(id);
                    st.book.get(&key).map(|r| (key.clone(), r.digest()))
                })
                .collect()
        };
        let host = self.clone();
        let (reason2, operator2) = (reason.to_owned(), operator.to_owned());
        let _ = tokio::task::spawn_blocking(move || {
            host.drop_cleared_copies(keys, now, &reason2, &operator2)
        })
        .await;
        // Every other live host drops its copies before the operator is told it is done, so
        // a re-send anywhere answers RECEIPT_CLEARED from then on.
        match ledger.last_change().await {
            Ok(seq) => {
                if let Err(e) = ledger.wait_applied(seq, CENSUS_WAIT).await {
                    tracing::warn!("the clear applied in the ledger, but {e}; they drop them when they next read the ledger");
                }
            }
            Err(e) => {
                tracing::warn!("the clear applied; reading the ledger's changes after it: {e}")
            }
        }
        let counts = ledger.counts().await.ok();
        let local = self.lock().receipt_counts();
        let receipts = match counts {
            Some(c) => ReceiptCounts {
                capacity: c.capacity,
                running: c.running,
                tombstone_capacity: c.tombstone_capacity,
                tombstones: c.tombstones,
                used: c.used,
                ..local
            },
            None => local,
        };
        Ok(CommittedClear {
            at: now,
            cleared: prepared.listed,
            tombstones: usize::try_from(tombstones).unwrap_or(usize::MAX),
            receipts,
            durable: None,
        })
    }

    /// `outcome.acknowledge` on a fleet host: the row is flagged acknowledged in the ledger
    /// (clearable from any host); when this host holds the receipt, it also does what a single
    /// host does (the pending outcome leaves its task). Other hosts holding it follow from the
    /// ledger's feed.
    pub async fn fleet_acknowledge(
        &self,
        request_id: &str,
        reason: &str,
        operator: &str,
    ) -> Result<super::Acknowledgement, ErrorBody> {
        let ledger = self.ledger().expect("a fleet host").clone();
        let unavailable = |e: LedgerError| ledger_error("the acknowledgement", &e);
        let refuse = |why: String, state: &str| {
            ErrorBody::new(ErrorCode::BadRequest, why)
                .with_details(json!({"requestId": request_id, "state": state}))
        };
        let now = now_millis();
        let Some(row) = ledger.receipt(request_id).await.map_err(unavailable)? else {
            return Err(refuse(format!("no receipt of the fleet has request id {request_id}; check the id (polaris receipts --state error lists the uncertain ones)"), "unknown"));
        };
        match row.state {
            RowState::Cleared => return Err(refuse(format!("request {request_id} was already cleared; there is nothing to acknowledge"), "cleared")),
            RowState::Running => return Err(refuse(format!("request {request_id} is still executing on host {}; wait for its outcome (receipt.status) before acknowledging it", row.host_id), "running")),
            RowState::Completed => {}
        }
        let outcome = row_outcome(&row);
        let code = match outcome.code {
            Some(c) if c.default_delivery() == Delivery::Uncertain => c,
            _ => return Err(refuse(format!("the outcome of request {request_id} is not uncertain ({}); only OUTCOME_UNCERTAIN or INTERRUPTED outcomes are acknowledged", outcome.code.map_or("ok", ErrorCode::as_str)), "completed")),
        };
        if !ledger
            .acknowledge(request_id, reason, operator, now)
            .await
            .map_err(unavailable)?
        {
            return Err(refuse(format!("request {request_id} changed while it was being acknowledged (cleared on another host?); read receipts.get and try again"), "changed"));
        }
        let held = {
            let mut st = self.lock();
            // Settled for the fleet now: out of the unsettled list before the next read of
            // the ledger.
            st.fleet_interrupted.retain(|f| f.request_id != request_id);
            st.book
                .get(&RequestKey::new(request_id))
                .is_some_and(|r| !r.is_running())
        };
        if held {
            if let Ok(done) = self.acknowledge(request_id, reason, operator) {
                return Ok(done);
            }
        }
        Ok(super::Acknowledgement {
            result: crate::protocol::introspection::OutcomeAcknowledged {
                acknowledged_at: format_millis(now),
                operator: operator.to_owned(),
                reason: reason.to_owned(),
                request_id: request_id.to_owned(),
                task_id: row.task_id.clone(),
            },
            code,
            method: row.method.parse().unwrap_or(Method::PageClick),
            durable: None,
        })
    }

    /// Marks receipts this host executed as settled in the ledger (their pending outcomes were
    /// confirmed, or their task stopped), so a clear on any host treats them as a single host
    /// would. Retried in the background until the ledger answers; nothing without a ledger.
    pub(crate) fn settle_in_ledger(&self, request_ids: Vec<String>) {
        let Some(ledger) = self.ledger().cloned() else {
            return;
        };
        if request_ids.is_empty() {
            return;
        }
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(50);
            loop {
                match ledger.settle(&request_ids).await {
                    Ok(_) | Err(LedgerError::Fenced(_)) => return,
                    Err(e) => {
                        tracing::warn!(
                            "marking settled outcomes in the fleet ledger: {e}; trying again"
                        );
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(5));
                    }
                }
            }
        });
    }

    /// A task of this host was stopped: its unresolved pending outcomes count as settled in the
    /// ledger (SPEC §6: a stopped task's uncertain receipts may be cleared).
    pub(crate) fn settle_stopped_task(&self, task_id: Option<&str>) {
        if self.ledger().is_none() {
            return;
        }
        let ids: Vec<String> = {
            let st = self.lock();
            task_id
                .and_then(|t| st.tasks.get(t))
                .map(|t| t.pending.iter().map(|p| p.request_id.to_string()).collect())
                .unwrap_or_default()
        };
        self.settle_in_ledger(ids);
    }
}
