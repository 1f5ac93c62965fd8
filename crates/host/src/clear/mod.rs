//! Deliberate clearing: the clearability rule and the two phases.
//!
//! An operator clears in two steps: [`Host::clear_prepare`] lists what would be cleared (with
//! each receipt's current result) and what is refused, and remembers the listed receipts'
//! versions under a fresh token; [`Host::clear_commit`] applies that list only if the token is
//! fresh and nothing on it changed since. Cleared receipts become tombstones: their IDs never
//! run again in this run.
//!
//! Neither step holds the host's lock for long (SPEC §10: a bridge request waiting behind an
//! operator is answered within milliseconds), whatever the size of the book:
//!
//! - the prepare scans the book a slice at a time;
//! - the commit checks its list a slice at a time while the book notes every receipt agents
//!   reach; outside the lock it sorts the tombstones-to-be; then, in one short section, it checks
//!   again only the receipts agents reached and puts every tombstone in place at once — the
//!   moment the clear applies. The cleared receipts then leave the book a slice at a time (each
//!   still answers as a receipt until it leaves, and as a tombstone after: an ID is never
//!   vacant), their memory is freed outside the lock, and the commit answers once all are gone.

mod commit;

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use super::to_data;
use super::{Host, State};
use crate::book::{
    ClearBatch, FingerprintDigest, Freed, Receipt, ReplySlot, RequestKey, TombstoneRun,
};
use crate::protocol::introspection::ReceiptsClearedEvent;
use crate::protocol::results::ReceiptCounts;
use crate::protocol::{now_millis, Delivery, ErrorBody, ErrorCode, Method, Outcome};
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
/// How long an operator's thread sleeps before each slice of the host's lock
/// ([`Host::operator_lock`]); any sleep gives it a fresh time slice.
const OPERATOR_PAUSE: Duration = Duration::from_micros(20);
/// Receipts visited between two looks at the clock within a slice.
const CHECK_EVERY: usize = 64;

/// Request IDs a `receipts.cleared` event names (the first ones of the clear); its `count` says
/// how many were cleared in all, and the audit log lists every one.
pub const CLEARED_EVENT_IDS: usize = 100;

/// How a commit is cut into slices: by [`SLICE`] and at most `max_steps` steps each; `between`
/// runs after each slice, with the host's lock let go (tests act there as agents would).
pub(super) struct Pace<'a> {
    pub(super) max_steps: usize,
    pub(super) between: &'a mut dyn FnMut(Phase),
}

/// Where a commit is when [`Pace::between`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Checking the list; nothing is decided yet.
    Check,
    /// The clear applied; its receipts are leaving the book.
    Remove,
    /// The receipts are gone; their tasks are being told.
    Tasks,
}

/// What the commit's check read of a listed receipt, for the tombstone, the journal and the
/// audit log.
struct Checked {
    position: usize,
    digest: FingerprintDigest,
    method: Method,
    task_id: Option<TaskId>,
    code: Option<ErrorCode>,
}

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

impl From<ClearRefusal> for crate::protocol::introspection::RefusalReason {
    fn from(why: ClearRefusal) -> Self {
        match why {
            ClearRefusal::Running => Self::Running,
            ClearRefusal::UnverifiedOutcome => Self::UnverifiedOutcome,
            ClearRefusal::Unknown => Self::Unknown,
            ClearRefusal::AlreadyCleared => Self::AlreadyCleared,
        }
    }
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
        // A fill that took effect: nothing uncertain about it.
        ReplySlot::Filled => return None,
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

fn changed_error(key: &RequestKey) -> ErrorBody {
    stale(format!(
        "receipt {key} changed since the prepare (it was re-queried, joined or cleared); nothing was cleared. Prepare again to see its current result"
    ))
    .with_details(json!({"requestId": key.to_string()}))
}

/// Whether a listed receipt is still as the prepare saw it, and still clearable.
fn unchanged(
    tasks: &Tasks,
    key: &RequestKey,
    version: &ReceiptVersion,
    found: Option<(&RequestKey, &Receipt)>,
) -> bool {
    match found {
        Some((k, r)) => {
            k == key && ReceiptVersion::of(r) == *version && clear_refusal(tasks, key, r).is_none()
        }
        None => false,
    }
}

/// An empty vector with room for `n` items whose memory is already touched: filling it under
/// the host's lock then takes no page faults there (a fresh page is zeroed by the kernel on
/// first touch, and on a machine short of free memory that can mean reclaim or compaction for
/// milliseconds, while every agent waits for the lock).
fn touched_vec<T>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    let spare = v.spare_capacity_mut();
    // SAFETY: the spare capacity is `MaybeUninit<T>`, which any bytes may fill; the length
    // stays 0, so nothing reads them as `T`.
    unsafe { std::ptr::write_bytes(spare.as_mut_ptr(), 0, spare.len()) };
    v
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

    /// Takes the host's lock for one slice of an operator's work, after a pause off the CPU.
    ///
    /// An operator's thread does seconds of CPU work (scans, sorts, replies of hundreds of
    /// megabytes); the scheduler preempts such a thread once its time slice is used up, and
    /// if that happens inside a slice of the lock every agent waits until it runs again —
    /// tens to hundreds of milliseconds on a busy machine. A thread that sleeps, however
    /// briefly, is given a fresh time slice when it wakes (EEVDF places a woken task with a
    /// new deadline), so a slice of the lock begun right after the pause runs to its end
    /// without being preempted; if the thread must wait for a CPU, it waits before taking the
    /// lock, not inside it.
    pub(crate) fn operator_lock(&self) -> MutexGuard<'_, State> {
        std::thread::sleep(OPERATOR_PAUSE);
        self.lock()
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
        let total = self.operator_lock().book.used();
        let mut done = 0;
        while done < total {
            let st = self.operator_lock();
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
        }
    }

    /// Runs `f` on each item in turn under the host's lock, a slice (about [`SLICE`]) at a
    /// time: the per-item work of an operator's request that names receipts one by one.
    pub(crate) fn in_slices<T>(&self, items: &[T], f: &mut dyn FnMut(&mut State, &T)) {
        let mut done = 0;
        while done < items.len() {
            let mut st = self.operator_lock();
            let started = Instant::now();
            while done < items.len() {
                f(&mut st, &items[done]);
                done += 1;
                if done % CHECK_EVERY == 0 && started.elapsed() >= SLICE {
                    break;
                }
            }
            drop(st);
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
        // Room for every listed receipt is taken before the lock: a list growing inside a
        // slice would copy itself there (tens of milliseconds at a million).
        let most = match &targets {
            ClearTargets::Ids(ids) => ids.len(),
            ClearTargets::Matching(_) => self.operator_lock().book.used(),
        };
        let mut clearable = touched_vec(most);
        let mut refused = Vec::new();
        let mut items = touched_vec(most);
        let mut take = |key: &RequestKey, r: &Receipt| {
            if let Some(outcome) = r.outcome() {
                items.push((key.clone(), ReceiptVersion::of(r)));
                clearable.push(ClearCandidate {
                    request_id: key.to_string(),
                    method: r.method,
                    task_id: r.task_id.clone(),
                    outcome,
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
        items.shrink_to_fit();
        let token = uuid::Uuid::new_v4().to_string();
        let expires_at = now + CLEAR_TOKEN_TTL_MS;
        // What is forgotten is freed after the lock is let go: a list of a million takes
        // milliseconds to free.
        let mut forgotten = Vec::new();
        let mut guard = self.operator_lock();
        let prepared = &mut guard.prepared_clears;
        let expired: Vec<String> = prepared
            .iter()
            .filter(|(_, p)| p.expires_at <= now)
            .map(|(t, _)| t.clone())
            .collect();
        forgotten.extend(expired.iter().filter_map(|t| prepared.remove(t)));
        let mut held: usize = prepared.values().map(|p| p.items.len()).sum();
        while prepared.len() >= MAX_PREPARED_CLEARS
            || (held + items.len() > MAX_PREPARED_RECEIPTS && !prepared.is_empty())
        {
            let first = prepared
                .iter()
                .min_by_key(|(_, p)| p.expires_at)
                .map(|(t, _)| t.clone());
            match first.and_then(|t| prepared.remove(&t)) {
                Some(p) => {
                    held -= p.items.len();
                    forgotten.push(p);
                }
                None => break,
            };
        }
        prepared.insert(token.clone(), PreparedClear { expires_at, items });
        drop(guard);
        drop(forgotten);
        PreparedClearView {
            token,
            expires_at,
            clearable,
            refused,
        }
    }

    /// A fleet clear reached this host (SPEC §13): the copies it holds of the cleared
    /// receipts become tombstones here, as a local clear would make them, so a re-send here
    /// answers `RECEIPT_CLEARED` and never a stale replay. Keys it holds no copy of are skipped
    /// (the ledger answers for them). A copy still running here (a claim settling from the
    /// row) gets its tombstone too and stays until it settles; it then finds the tombstone and
    /// withdraws. Applied in slices of the host's lock, like a local clear. Blocks: call it off
    /// the runtime's workers.
    pub(super) fn drop_cleared_copies(
        &self,
        keys: Vec<(RequestKey, FingerprintDigest)>,
        at: i64,
        reason: &str,
        operator: &str,
    ) {
        if keys.is_empty() {
            return;
        }
        let _gate = self.operator_gate();
        let (held, tasks, batch) = {
            let st = self.operator_lock();
            let mut tasks = Vec::new();
            let held: Vec<(RequestKey, FingerprintDigest)> = keys
                .into_iter()
                .filter(|(k, _)| {
                    let Some(r) = st.book.get(k) else {
                        return false;
                    };
                    if st.book.tombstone(k).is_some() {
                        return false;
                    }
                    if !r.is_running() {
                        tasks.extend(r.task_id.clone());
                    }
                    true
                })
                .collect();
            (held, tasks, st.book.next_batch())
        };
        if held.is_empty() {
            return;
        }
        let ids: Vec<RequestKey> = held.iter().map(|(k, _)| k.clone()).collect();
        let run = Arc::new(TombstoneRun::new(held, batch));
        let reason: Arc<str> = reason.into();
        let mut clearing = {
            let mut st = self.operator_lock();
            let first = ids
                .iter()
                .filter_map(|k| st.book.position(k))
                .min()
                .unwrap_or(usize::MAX);
            let batch = ClearBatch {
                at,
                reason: reason.clone(),
            };
            match st.book.begin_clear(first, run, batch) {
                Ok(c) => c,
                Err(crate::book::ClearError::TombstonesFull { capacity, used }) => {
                    tracing::error!(
                        "a fleet clear of {} receipts does not fit this host's tombstones ({used} of {capacity}); its copies stay here until the host restarts",
                        ids.len()
                    );
                    return;
                }
            }
        };
        loop {
            let mut freed = Freed::default();
            let mut st = self.operator_lock();
            let started = Instant::now();
            let done = loop {
                if st.book.clear_steps(&mut clearing, CHECK_EVERY, &mut freed) {
                    break true;
                }
                if started.elapsed() >= SLICE || clearing.wants_table() {
                    break false;
                }
            };
            drop(st);
            drop(freed);
            if let Some(spare) = clearing.wanted_table() {
                clearing.give_table(spare.make());
            }
            if done {
                break;
            }
        }
        self.in_slices(&tasks, &mut |st, tid| st.tasks.receipt_cleared(tid));
        {
            let mut st = self.operator_lock();
            let event = cleared_event(ids.len(), ids.iter(), operator, &reason);
            st.events
                .publish("receipts.cleared", at, || to_data(&event));
        }
        self.merge_tombstone_runs();
    }

    /// Merges the book's tombstone runs two at a time outside the host's lock (each merge
    /// takes the lock only to swap the pair for the merged run), so lookups stay few.
    pub(super) fn merge_tombstone_runs(&self) {
        loop {
            let Some(pair) = self.operator_lock().book.tombstones_to_merge() else {
                break;
            };
            let merged = Arc::new(TombstoneRun::merged(&pair[0], &pair[1]));
            let mut freed = Freed::default();
            self.operator_lock()
                .book
                .replace_tombstones(&pair, merged, &mut freed);
            drop(pair);
            drop(freed);
        }
    }
}

/// The `receipts.cleared` event of a clear of `count` receipts: its first IDs only (the audit
/// log lists them all).
pub(super) fn cleared_event<'k>(
    count: usize,
    ids: impl Iterator<Item = &'k RequestKey>,
    operator: &str,
    reason: &str,
) -> ReceiptsClearedEvent {
    ReceiptsClearedEvent {
        count: count as u64,
        operator: operator.to_owned(),
        reason: reason.to_owned(),
        request_ids: ids.take(CLEARED_EVENT_IDS).map(|k| k.to_string()).collect(),
    }
}
