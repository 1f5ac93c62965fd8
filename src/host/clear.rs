//! Deliberate clearing: the clearability rule and the two phases.
//!
//! An operator clears in two steps, each one critical section of the host's lock:
//! [`Host::clear_prepare`] lists what would be cleared (with each receipt's current result) and
//! what is refused, and remembers the listed receipts' versions under a fresh token;
//! [`Host::clear_commit`] applies that list only if the token is fresh and nothing on it changed
//! since. Cleared receipts become tombstones: their IDs never run again in this run.

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use super::read::to_data;
use super::{Host, State};
use crate::book::{Receipt, ReplySlot, RequestKey};
use crate::protocol::introspection::ReceiptsClearedEvent;
use crate::protocol::results::ReceiptCounts;
use crate::protocol::{format_millis, now_millis, Delivery, ErrorBody, ErrorCode, Method, Outcome};
use crate::tasks::{TaskId, Tasks};

/// How long a prepared clear may wait for its commit.
pub const CLEAR_TOKEN_TTL_MS: i64 = 5 * 60 * 1000;
/// Prepared clears kept at once; preparing beyond this forgets the one that expires first, so
/// input cannot grow the host's memory without bound.
pub const MAX_PREPARED_CLEARS: usize = 64;
/// Receipts listed by all prepared clears together (each costs about 40 bytes until its
/// commit); preparing beyond this forgets the prepares that expire first, so a loop of
/// prepares over a full book cannot grow the host's memory without bound.
pub const MAX_PREPARED_RECEIPTS: usize = 2_000_000;

/// The longest an operator's scan holds the host's lock at a time (SPEC §10: a bridge request
/// waiting behind it is answered within milliseconds). Scans check the clock every
/// [`CHECK_EVERY`] receipts.
pub const SLICE: Duration = Duration::from_micros(500);
/// Receipts visited between two looks at the clock within a slice.
const CHECK_EVERY: usize = 64;

/// The order an operator's scan visits the receipts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// Creation order.
    Oldest,
    /// Newest first.
    Newest,
}

/// Why a receipt cannot be cleared (the `reason` of a refusal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClearRefusal {
    /// Its execution is still running.
    Running,
    /// Its reply is uncertain and its pending outcome is unresolved on a task that is not
    /// stopped: clearing it would hide the one thing an operator must look at.
    UnverifiedOutcome,
    /// No receipt or tombstone has this ID in this run.
    Unknown,
    /// It is already a tombstone.
    AlreadyCleared,
}

impl ClearRefusal {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ClearRefusal::Running => "running",
            ClearRefusal::UnverifiedOutcome => "unverified_outcome",
            ClearRefusal::Unknown => "unknown",
            ClearRefusal::AlreadyCleared => "already_cleared",
        }
    }
}

/// The clearability rule for a live receipt: `None` when it may be cleared now.
pub(crate) fn clear_refusal(
    tasks: &Tasks,
    key: &RequestKey,
    receipt: &Receipt,
) -> Option<ClearRefusal> {
    let outcome = match &receipt.reply {
        ReplySlot::Running(_) => return Some(ClearRefusal::Running),
        ReplySlot::Done(o) => o,
    };
    let uncertain = outcome
        .code
        .is_some_and(|c| c.default_delivery() == Delivery::Uncertain);
    if !uncertain || receipt.acknowledged {
        return None;
    }
    // An execution the host stopped under (SPEC §11): only a person who settled it outside
    // Polaris (`outcome.acknowledge`) lets it go.
    if outcome.code == Some(crate::protocol::ErrorCode::Interrupted) {
        return Some(ClearRefusal::UnverifiedOutcome);
    }
    let task = receipt.task_id.as_deref().and_then(|t| tasks.get(t))?;
    let unresolved = task
        .pending
        .iter()
        .any(|p| RequestKey::new(&p.request_id) == *key);
    (unresolved && task.state() != crate::tasks::TaskState::Stopped)
        .then_some(ClearRefusal::UnverifiedOutcome)
}

/// What a prepare remembers of each listed receipt, to tell at commit time whether it changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReceiptVersion {
    joins: u32,
    replays: u32,
    completed_at: i64,
}

impl ReceiptVersion {
    fn of(r: &Receipt) -> ReceiptVersion {
        ReceiptVersion {
            joins: r.joins,
            replays: r.replays,
            completed_at: r.completed_at,
        }
    }
}

/// A prepared clear waiting for its commit, kept in the host's state under its token.
pub(super) struct PreparedClear {
    expires_at: i64,
    items: Vec<(RequestKey, ReceiptVersion)>,
}

/// Which receipts a prepare is about.
pub enum ClearTargets<'a> {
    /// These request IDs (duplicates count once).
    Ids(&'a [String]),
    /// Every receipt the predicate accepts: `(request ID, receipt, refusal if not clearable)`.
    Matching(&'a dyn Fn(&RequestKey, &Receipt, Option<ClearRefusal>) -> bool),
}

/// A receipt a prepare would clear, with its current result.
#[derive(Clone, Debug)]
pub struct ClearCandidate {
    /// The request ID.
    pub request_id: String,
    /// Its method.
    pub method: Method,
    /// Its task, when it names one.
    pub task_id: Option<TaskId>,
    /// Its stored reply.
    pub outcome: Arc<Outcome>,
    /// Copies that joined it.
    pub joins: u32,
    /// Copies answered from it.
    pub replays: u32,
    /// When it completed (epoch ms).
    pub completed_at: i64,
}

/// The result of `receipts.clearPrepare`.
#[derive(Debug)]
pub struct PreparedClearView {
    /// The token the commit must present.
    pub token: String,
    /// When the token expires (epoch ms).
    pub expires_at: i64,
    /// What the commit would clear, with current results.
    pub clearable: Vec<ClearCandidate>,
    /// What it refuses, and why.
    pub refused: Vec<(String, ClearRefusal)>,
}

/// One receipt a commit cleared, as the audit log records it.
#[derive(Clone, Debug)]
pub struct ClearedReceipt {
    /// The request ID.
    pub request_id: String,
    /// Its method.
    pub method: Method,
    /// Its task, when it names one.
    pub task_id: Option<TaskId>,
    /// Its error code when it failed; `None` when it succeeded.
    pub code: Option<ErrorCode>,
}

/// The result of a committed clear.
#[derive(Debug)]
pub struct CommittedClear {
    /// When it applied (epoch ms).
    pub at: i64,
    /// What became tombstones.
    pub cleared: Vec<ClearedReceipt>,
    /// Tombstones held after the commit.
    pub tombstones: usize,
    /// `receipts` as `run.status` shows them, after the commit.
    pub receipts: ReceiptCounts,
    /// Resolves once the clear is durable in the journal (`None` without one); the operator
    /// is answered after it.
    pub durable: Option<Result<crate::journal::Ticket, crate::journal::Error>>,
}

fn stale(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ClearTokenStale, message)
}

impl Host {
    /// Serialises operators' scans and clears: held for a whole scan (or clear), whose slices
    /// take the host's lock one at a time. While it is held no clear runs, so receipts keep
    /// their positions (new ones are only appended) and a scan can resume by position.
    pub(crate) fn operator_gate(&self) -> MutexGuard<'_, ()> {
        self.inner
            .operator_gate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Visits every receipt that existed when the scan began, in `order`, taking the host's
    /// lock for at most about [`SLICE`] at a time so agents' requests interleave with the
    /// scan. The caller holds [`Host::operator_gate`]; this blocks, so call it off the async
    /// runtime's workers.
    pub(crate) fn scan_receipts(
        &self,
        order: Order,
        visit: &mut dyn FnMut(&State, &RequestKey, &Receipt),
    ) {
        let total = self.lock().book.used();
        let mut done = 0;
        while done < total {
            let st = self.lock();
            let started = Instant::now();
            while done < total {
                let i = match order {
                    Order::Oldest => done,
                    Order::Newest => total - 1 - done,
                };
                if let Some((key, r)) = st.book.get_index(i) {
                    visit(&st, key, r);
                }
                done += 1;
                if done % CHECK_EVERY == 0 && started.elapsed() >= SLICE {
                    break;
                }
            }
            drop(st);
            std::thread::yield_now();
        }
    }

    /// Runs `f` on each item in turn under the host's lock, a slice (about [`SLICE`]) at a
    /// time: the per-item work of an operator's request that names receipts one by one.
    pub(crate) fn in_slices<T>(&self, items: &[T], f: &mut dyn FnMut(&mut State, &T)) {
        let mut done = 0;
        while done < items.len() {
            let mut st = self.lock();
            let started = Instant::now();
            while done < items.len() {
                f(&mut st, &items[done]);
                done += 1;
                if done % CHECK_EVERY == 0 && started.elapsed() >= SLICE {
                    break;
                }
            }
            drop(st);
            std::thread::yield_now();
        }
    }

    /// `receipts.clearPrepare`: lists what would be cleared (with current results) and what is
    /// refused, and remembers the listed receipts' versions under a fresh token.
    pub fn clear_prepare(&self, targets: ClearTargets<'_>) -> PreparedClearView {
        self.clear_prepare_at(targets, now_millis())
    }

    /// [`Host::clear_prepare`] at a given time (tests move the clock).
    pub(super) fn clear_prepare_at(
        &self,
        targets: ClearTargets<'_>,
        now: i64,
    ) -> PreparedClearView {
        let _gate = self.operator_gate();
        let mut clearable = Vec::new();
        let mut refused = Vec::new();
        let mut items = Vec::new();
        let mut take = |key: &RequestKey, r: &Receipt| {
            if let ReplySlot::Done(outcome) = &r.reply {
                items.push((key.clone(), ReceiptVersion::of(r)));
                clearable.push(ClearCandidate {
                    request_id: key.to_string(),
                    method: r.method,
                    task_id: r.task_id.clone(),
                    outcome: outcome.clone(),
                    joins: r.joins,
                    replays: r.replays,
                    completed_at: r.completed_at,
                });
            }
        };
        match targets {
            ClearTargets::Ids(ids) => {
                let mut seen = std::collections::HashSet::new();
                let named: Vec<(&String, RequestKey)> = ids
                    .iter()
                    .map(|id| (id, RequestKey::new(id)))
                    .filter(|(_, key)| seen.insert(key.clone()))
                    .collect();
                self.in_slices(&named, &mut |st, (id, key)| {
                    if let Some(r) = st.book.get(key) {
                        match clear_refusal(&st.tasks, key, r) {
                            None => take(key, r),
                            Some(why) => refused.push(((*id).clone(), why)),
                        }
                    } else if st.book.tombstone(key).is_some() {
                        refused.push(((*id).clone(), ClearRefusal::AlreadyCleared));
                    } else {
                        refused.push(((*id).clone(), ClearRefusal::Unknown));
                    }
                });
            }
            ClearTargets::Matching(accept) => {
                self.scan_receipts(Order::Oldest, &mut |st, key, r| {
                    let refusal = clear_refusal(&st.tasks, key, r);
                    if !accept(key, r, refusal) {
                        return;
                    }
                    match refusal {
                        None => take(key, r),
                        Some(why) => refused.push((key.to_string(), why)),
                    }
                });
            }
        }
        let mut guard = self.lock();
        let prepared = &mut guard.prepared_clears;
        prepared.retain(|_, p| p.expires_at > now);
        let mut held: usize = prepared.values().map(|p| p.items.len()).sum();
        while prepared.len() >= MAX_PREPARED_CLEARS
            || (held + items.len() > MAX_PREPARED_RECEIPTS && !prepared.is_empty())
        {
            let first = prepared
                .iter()
                .min_by_key(|(_, p)| p.expires_at)
                .map(|(t, _)| t.clone());
            match first.and_then(|t| prepared.remove(&t)) {
                Some(p) => held -= p.items.len(),
                None => break,
            };
        }
        let token = uuid::Uuid::new_v4().to_string();
        let expires_at = now + CLEAR_TOKEN_TTL_MS;
        prepared.insert(token.clone(), PreparedClear { expires_at, items });
        PreparedClearView {
            token,
            expires_at,
            clearable,
            refused,
        }
    }

    /// `receipts.clearCommit`: applies a prepared clear only if its token is fresh and nothing
    /// it listed changed since (no join, replay or state change); the listed receipts become
    /// tombstones all at once, or nothing changes. The token is used up either way.
    pub fn clear_commit(
        &self,
        token: &str,
        reason: &str,
        operator: &str,
    ) -> Result<CommittedClear, ErrorBody> {
        self.clear_commit_at(token, reason, operator, now_millis())
    }

    /// [`Host::clear_commit`] at a given time (tests move the clock).
    pub(super) fn clear_commit_at(
        &self,
        token: &str,
        reason: &str,
        operator: &str,
        now: i64,
    ) -> Result<CommittedClear, ErrorBody> {
        let _gate = self.operator_gate();
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(prepared) = st.prepared_clears.remove(token) else {
            return Err(stale(format!(
                "clear token {token} is unknown or already used; nothing was cleared. Run receipts.clearPrepare (polaris clear) again and commit its new token"
            )));
        };
        if prepared.expires_at <= now {
            return Err(stale(format!(
                "clear token {token} expired at {}; nothing was cleared. Prepare again to see the receipts' current results",
                format_millis(prepared.expires_at)
            )));
        }
        let mut cleared = Vec::with_capacity(prepared.items.len());
        let mut journaled = Vec::new();
        for (key, version) in &prepared.items {
            let changed = match st.book.get(key) {
                Some(r) => {
                    ReceiptVersion::of(r) != *version || clear_refusal(&st.tasks, key, r).is_some()
                }
                None => true,
            };
            if changed {
                return Err(stale(format!(
                    "receipt {key} changed since the prepare (it was re-queried, joined or cleared); nothing was cleared. Prepare again to see its current result"
                ))
                .with_details(json!({"requestId": key.to_string()})));
            }
            let r = st.book.get(key).expect("checked above");
            if self.journal().is_some() {
                journaled.push(crate::journal::ClearedId {
                    request_id: key.clone(),
                    digest: crate::book::digest(&r.request),
                });
            }
            cleared.push(ClearedReceipt {
                request_id: key.to_string(),
                method: r.method,
                task_id: r.task_id.clone(),
                code: r.outcome().and_then(|o| o.code),
            });
        }
        let keys: Vec<RequestKey> = prepared.items.into_iter().map(|(k, _)| k).collect();
        let reason: Arc<str> = reason.into();
        match st.book.clear(&keys, now, reason.clone()) {
            Ok(_) => {}
            Err(crate::book::ClearError::TombstonesFull { capacity, used }) => {
                return Err(ErrorBody::new(
                    ErrorCode::TombstoneCapacityFull,
                    format!(
                        "clearing {} receipts would exceed the tombstone capacity ({used} of {capacity} used); nothing was cleared. Clear fewer receipts, or stop the host and start it again with a larger --tombstone-capacity (the journal keeps every receipt and tombstone across the restart)",
                        keys.len()
                    ),
                )
                .with_details(json!({"tombstoneCapacity": capacity, "tombstones": used, "requested": keys.len()})));
            }
        }
        // A closed task whose last receipt went is reduced to its compact record.
        for c in &cleared {
            if let Some(tid) = &c.task_id {
                st.tasks.receipt_cleared(tid);
            }
        }
        let event = ReceiptsClearedEvent {
            count: cleared.len() as u64,
            operator: operator.to_owned(),
            reason: reason.to_string(),
            request_ids: cleared.iter().map(|c| c.request_id.to_string()).collect(),
        };
        st.events
            .publish("receipts.cleared", now, || to_data(&event));
        let durable = self.journal().map(|j| {
            j.append(&crate::journal::Record::ReceiptsCleared(
                crate::journal::Cleared {
                    at: now,
                    reason: &reason,
                    operator,
                    ids: &journaled,
                },
            ))
        });
        Ok(CommittedClear {
            durable,
            at: now,
            tombstones: st.book.tombstones(),
            receipts: st.book.counts(),
            cleared,
        })
    }
}
