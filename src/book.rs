//! The receipt book: one receipt per request ID for the life of a run.
//!
//! A receipt binds a request ID to the canonical request it first arrived with and to one
//! shared reply. The book never evicts: when it is full it refuses new IDs, and only an
//! operator's deliberate clear turns receipts into compact tombstones. The book is plain data
//! behind the host's lock; every rule that needs atomicity (lookup, fingerprint compare,
//! capacity check, insert) is one method call here, made under that one lock.
//!
//! Storage is behind this module's API so a durable journal can be added later without touching
//! the rules in `host`.

use std::sync::Arc;

use indexmap::IndexMap;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

pub use crate::ids::RequestKey;
use crate::ids::TaskId;
use crate::protocol::results::ReceiptCounts;
use crate::protocol::{Method, Outcome};

/// The channel copies that joined a running execution wait on; the execution's completion
/// sends the outcome through it.
pub type ReplyWaiters = watch::Sender<Option<Arc<Outcome>>>;

/// The shared reply of a receipt: while the execution runs, the channel joiners wait on (made
/// only when the first copy joins, so the usual fresh request allocates none), then the stored
/// outcome itself (the channel is dropped so a completed receipt stays small).
pub enum ReplySlot {
    /// The execution is still running; joiners wait on these waiters, created on first join.
    Running(Option<ReplyWaiters>),
    /// The execution finished; this is the reply every later copy gets.
    Done(Arc<Outcome>),
}

/// One receipt: request ID → (canonical request, shared reply).
pub struct Receipt {
    /// The canonical `{method, params}` the ID first arrived with (its fingerprint).
    pub request: Box<str>,
    /// The task the request acts on, when it names one.
    pub task_id: Option<TaskId>,
    /// The method, for listing and for the pending-outcome rule.
    pub method: Method,
    /// When the ID was first seen (epoch ms).
    pub first_seen: i64,
    /// When the execution finished (epoch ms), `0` while running.
    pub completed_at: i64,
    /// How many copies attached while the first was running.
    pub joins: u32,
    /// How many copies were answered from the stored reply.
    pub replays: u32,
    /// The reply, shared by every copy.
    pub reply: ReplySlot,
    /// The earlier run that created the receipt, for one recovered from the journal; `None`
    /// for a receipt of the current run.
    pub run_id: Option<Arc<str>>,
    /// The journal sequence number of the stored reply's completion record (0: none, or no
    /// journal). A copy may be answered from the stored reply only once it is durable.
    pub seq: u64,
    /// An operator recorded that this receipt's uncertain outcome was settled outside Polaris
    /// (`outcome.acknowledge`): it may be cleared.
    pub acknowledged: bool,
}

impl Receipt {
    fn running(request: Box<str>, method: Method, task_id: Option<TaskId>, now: i64) -> Receipt {
        Receipt {
            request,
            task_id,
            method,
            first_seen: now,
            completed_at: 0,
            joins: 0,
            replays: 0,
            reply: ReplySlot::Running(None),
            run_id: None,
            seq: 0,
            acknowledged: false,
        }
    }

    /// The stored outcome, once the execution finished.
    pub fn outcome(&self) -> Option<&Arc<Outcome>> {
        match &self.reply {
            ReplySlot::Done(o) => Some(o),
            ReplySlot::Running(_) => None,
        }
    }

    /// Whether the execution is still running.
    pub fn is_running(&self) -> bool {
        matches!(self.reply, ReplySlot::Running(_))
    }

    /// A receiver for the outcome of a running execution (creating the waiters on the first
    /// join); `None` when the receipt already holds its outcome.
    pub fn wait_for_outcome(&mut self) -> Option<watch::Receiver<Option<Arc<Outcome>>>> {
        match &mut self.reply {
            ReplySlot::Running(waiters) => Some(
                waiters
                    .get_or_insert_with(|| watch::channel(None).0)
                    .subscribe(),
            ),
            ReplySlot::Done(_) => None,
        }
    }
}

/// [`Book::finish`] was asked to complete a receipt that is not running.
#[derive(Debug)]
pub struct NotRunning;

/// The 128-bit digest a tombstone keeps instead of the whole request.
pub type FingerprintDigest = [u8; 16];

/// The digest of a canonical request.
pub fn digest(request: &str) -> FingerprintDigest {
    let full = Sha256::digest(request.as_bytes());
    let mut d = [0u8; 16];
    d.copy_from_slice(&full[..16]);
    d
}

/// Who cleared a set of receipts, when and why; shared by all tombstones of one commit.
#[derive(Clone, Debug)]
pub struct ClearBatch {
    /// When the commit applied (epoch ms).
    pub at: i64,
    /// The operator's reason.
    pub reason: Arc<str>,
}

/// What remains of a cleared receipt: enough to refuse the ID forever (within the run) and to
/// say whether a re-sent request had the same content.
#[derive(Clone, Copy, Debug)]
pub struct Tombstone {
    /// Digest of the canonical request.
    pub digest: FingerprintDigest,
    /// Index of the [`ClearBatch`] that cleared it.
    pub batch: u32,
}

/// What the book knows about an ID.
pub enum Entry<'a> {
    /// A live receipt.
    Receipt(&'a mut Receipt),
    /// A tombstone, with its batch.
    Tombstone(Tombstone, &'a ClearBatch),
    /// Never seen in this run: the place its receipt would take.
    Vacant(Vacancy<'a>),
}

/// Where a new receipt goes, found by the same lookup that saw the ID was new, so creating
/// the receipt costs no second search of a book that may hold millions.
pub struct Vacancy<'a> {
    slot: indexmap::map::VacantEntry<'a, RequestKey, Receipt>,
    running: &'a mut usize,
    capacity: usize,
    used_bytes: &'a mut usize,
    max_bytes: usize,
}

impl Vacancy<'_> {
    /// Creates a running receipt here, unless the book is full. Returns the receipt's position
    /// in the book, a hint for [`Book::finish_at`].
    pub fn insert_running(
        self,
        request: Box<str>,
        method: Method,
        task_id: Option<TaskId>,
        now: i64,
    ) -> Result<usize, BookFull> {
        let used = self.slot.index();
        let cost = receipt_bytes(self.slot.key(), &request, None);
        let limit = if used >= self.capacity {
            Some(Limit::Count)
        } else if self.used_bytes.saturating_add(cost) > self.max_bytes {
            Some(Limit::Bytes)
        } else {
            None
        };
        if let Some(limit) = limit {
            return Err(BookFull {
                limit,
                capacity: self.capacity,
                used,
                used_bytes: *self.used_bytes,
                max_bytes: self.max_bytes,
            });
        }
        self.slot
            .insert(Receipt::running(request, method, task_id, now));
        *self.running += 1;
        *self.used_bytes += cost;
        Ok(used)
    }
}

/// Which bound of the book a new receipt would pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `--capacity`: the count of receipts.
    Count,
    /// `--max-book-bytes`: the bytes they hold.
    Bytes,
}

impl Limit {
    /// The name `details.limit` carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Count => "count",
            Limit::Bytes => "bytes",
        }
    }
}

/// Why a new receipt could not be created.
#[derive(Debug, PartialEq, Eq)]
pub struct BookFull {
    /// The bound the receipt would pass (the count first, when both are reached).
    pub limit: Limit,
    /// The hard capacity.
    pub capacity: usize,
    /// Receipts held now.
    pub used: usize,
    /// Bytes held now.
    pub used_bytes: usize,
    /// The byte bound.
    pub max_bytes: usize,
}

/// What every receipt costs beyond the bytes of its request, reply and textual ID: its table
/// entry (key, hash, index, the receipt's fields) and the allocations of its request and
/// shared reply. Measured by `the_per_receipt_overhead_covers_the_receipt_table`.
pub const RECEIPT_OVERHEAD_BYTES: usize = 256;

/// Default `--max-book-bytes`: 1 GiB.
pub const DEFAULT_MAX_BOOK_BYTES: usize = 1 << 30;

/// The bytes a running receipt holds for the reply it does not have yet: an action's reply
/// repeats at most what its request carries (a filled value, an expectation) and a message, so
/// the book's bound holds for the replies still to come, not only for those stored.
fn reply_reservation(request: &str) -> usize {
    2 * request.len() + 1024
}

/// The bytes a receipt counts against `--max-book-bytes`: its canonical request, its stored
/// reply body (or, while it runs, [`reply_reservation`]), a request ID kept as text, and
/// [`RECEIPT_OVERHEAD_BYTES`].
fn receipt_bytes(key: &RequestKey, request: &str, outcome: Option<&Outcome>) -> usize {
    let key_bytes = match key {
        RequestKey::Text(t) => t.len(),
        RequestKey::Uuid(_) => 0,
    };
    let reply = outcome.map_or_else(|| reply_reservation(request), |o| o.body.len());
    RECEIPT_OVERHEAD_BYTES + key_bytes + request.len() + reply
}

/// Why a clear could not be applied.
#[derive(Debug, PartialEq, Eq)]
pub enum ClearError {
    /// The tombstones would exceed their hard capacity.
    TombstonesFull {
        /// The hard capacity.
        capacity: usize,
        /// Tombstones held now.
        used: usize,
    },
}

/// A tombstone of a UUID request ID in its fixed-size form: 36 bytes, no pointers.
#[derive(Clone, Copy)]
struct UuidTombstone {
    key: [u8; 16],
    digest: FingerprintDigest,
    batch: u32,
}

/// A sorted run of tombstones: those of one clear, or of several merged. Request IDs are UUIDs
/// in practice, so their tombstones are fixed-size records (36 bytes each, found by binary
/// search) instead of a hash map of enum keys (about 100 bytes each at a million); any other
/// ID is kept as text, also sorted.
///
/// A run is built and merged off the host's lock ([`TombstoneRun::new`],
/// [`TombstoneRun::merged`]): sorting a million tombstones takes tens of milliseconds,
/// which no agent may wait for (SPEC §10). The book only ever adds or swaps whole runs.
#[derive(Default)]
pub struct TombstoneRun {
    /// Sorted by `key`, keys unique.
    uuids: Vec<UuidTombstone>,
    /// Sorted by key, keys unique.
    texts: Vec<(Box<str>, Tombstone)>,
}

impl TombstoneRun {
    /// The tombstones of one clear (its batch index is `batch`), sorted; a key given twice
    /// counts once.
    pub fn new(ids: impl IntoIterator<Item = (RequestKey, FingerprintDigest)>, batch: u32) -> Self {
        let mut run = TombstoneRun::default();
        for (key, digest) in ids {
            match key {
                RequestKey::Uuid(key) => run.uuids.push(UuidTombstone { key, digest, batch }),
                RequestKey::Text(key) => run.texts.push((key, Tombstone { digest, batch })),
            }
        }
        run.uuids.sort_unstable_by_key(|t| t.key);
        run.uuids.dedup_by_key(|t| t.key);
        run.uuids.shrink_to_fit();
        run.texts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        run.texts.dedup_by(|a, b| a.0 == b.0);
        run.texts.shrink_to_fit();
        run
    }

    /// Tombstones in the run.
    pub fn len(&self) -> usize {
        self.uuids.len() + self.texts.len()
    }

    /// Whether the run holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, key: &RequestKey) -> Option<Tombstone> {
        match key {
            RequestKey::Uuid(k) => {
                self.uuids
                    .binary_search_by(|t| t.key.cmp(k))
                    .ok()
                    .map(|i| Tombstone {
                        digest: self.uuids[i].digest,
                        batch: self.uuids[i].batch,
                    })
            }
            RequestKey::Text(k) => self
                .texts
                .binary_search_by(|(t, _)| (**t).cmp(&**k))
                .ok()
                .map(|i| self.texts[i].1),
        }
    }

    /// One run holding both (their keys are disjoint: an ID is cleared once), in linear time.
    pub fn merged(a: &TombstoneRun, b: &TombstoneRun) -> TombstoneRun {
        fn merge<T: Clone, K: Ord + ?Sized>(a: &[T], b: &[T], key: impl Fn(&T) -> &K) -> Vec<T> {
            let mut out = Vec::with_capacity(a.len() + b.len());
            let (mut i, mut j) = (0, 0);
            while i < a.len() && j < b.len() {
                if key(&a[i]) <= key(&b[j]) {
                    out.push(a[i].clone());
                    i += 1;
                } else {
                    out.push(b[j].clone());
                    j += 1;
                }
            }
            out.extend_from_slice(&a[i..]);
            out.extend_from_slice(&b[j..]);
            out
        }
        TombstoneRun {
            uuids: merge(&a.uuids, &b.uuids, |t| &t.key),
            texts: merge(&a.texts, &b.texts, |t| &*t.0),
        }
    }
}

/// The tombstone store: a few sorted runs. Each clear adds one run (built off the lock); runs
/// are merged, off the lock too, so that there are never more than about log2 of the tombstones
/// held (see [`Book::merge_tombstones_step`]).
#[derive(Default)]
struct Tombstones {
    runs: Vec<Arc<TombstoneRun>>,
    len: usize,
}

impl Tombstones {
    fn get(&self, key: &RequestKey) -> Option<Tombstone> {
        self.runs.iter().rev().find_map(|r| r.get(key))
    }

    fn contains(&self, key: &RequestKey) -> bool {
        self.get(key).is_some()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, run: Arc<TombstoneRun>) {
        if run.is_empty() {
            return;
        }
        self.len += run.len();
        self.runs.push(run);
    }

    /// The two newest runs, when they should be merged: the newer is at least half the size
    /// of the older (so each tombstone is copied about log2(n) times in all), or there are
    /// more than [`MAX_TOMBSTONE_RUNS`].
    fn to_merge(&self) -> Option<[Arc<TombstoneRun>; 2]> {
        let n = self.runs.len();
        if n < 2 {
            return None;
        }
        let (older, newer) = (&self.runs[n - 2], &self.runs[n - 1]);
        (2 * newer.len() >= older.len() || n > MAX_TOMBSTONE_RUNS)
            .then(|| [older.clone(), newer.clone()])
    }

    /// Replaces the two newest runs, if they are still `pair`, with `merged`; hands back what
    /// it replaced (for the caller to free after letting go of the lock).
    fn replace(
        &mut self,
        pair: &[Arc<TombstoneRun>; 2],
        merged: Arc<TombstoneRun>,
    ) -> Vec<Arc<TombstoneRun>> {
        let n = self.runs.len();
        let same = n >= 2
            && Arc::ptr_eq(&self.runs[n - 2], &pair[0])
            && Arc::ptr_eq(&self.runs[n - 1], &pair[1]);
        if !same {
            return vec![merged];
        }
        debug_assert_eq!(merged.len(), pair[0].len() + pair[1].len());
        let old = self.runs.split_off(n - 2);
        self.runs.push(merged);
        old
    }

    /// Merges every run into one, in place (at start, before anyone else is served).
    fn merge_all(&mut self) {
        while self.runs.len() > 1 {
            let newer = self.runs.pop().expect("two runs");
            let older = self.runs.pop().expect("two runs");
            self.runs
                .push(Arc::new(TombstoneRun::merged(&older, &newer)));
        }
    }
}

/// Tombstone runs kept before the two newest are merged whatever their sizes.
const MAX_TOMBSTONE_RUNS: usize = 24;

/// A clear being applied a step at a time ([`Book::begin_clear`], [`Book::clear_steps`]):
/// its receipts leave the book a few at a time, so the host's lock is never held for the whole
/// of a large clear, and the receipts that stay keep their creation order.
///
/// The book's receipt table is an ordered map; removing from its middle shifts everything after.
/// So the clear walks the table once with a read and a write position: a receipt that stays is
/// swapped down to the write position (its order among those that stay is kept), a cleared one
/// is left behind, so the cleared gather at the end, where they are cut off a few at a time.
/// Receipts created meanwhile are appended and walked too. Until a cleared receipt is cut off
/// it is still found as a receipt (and may replay); its tombstone is already in place behind it,
/// so the ID is never vacant.
pub struct Clearing {
    /// The clear's tombstones: a receipt whose key is here is one it clears.
    run: Arc<TombstoneRun>,
    /// Receipts cut off so far.
    removed: usize,
}

/// Where a clear's walk of the receipt table is ([`Clearing`]); kept by the book so a receipt
/// withdrawn meanwhile ([`Book::withdraw`]) moves it with the receipts.
#[derive(Clone, Copy)]
struct ClearCursor {
    /// Receipts before this position were walked.
    read: usize,
    /// Receipts before this position stay; `[write, read)` are cleared ones.
    write: usize,
}

impl Clearing {
    /// Receipts taken out of the book so far.
    pub fn removed(&self) -> usize {
        self.removed
    }
}

/// Receipts cut off the end of the table in one step of a clear.
const CUT_PER_STEP: usize = 16;

/// Receipts a book that a clear left with at most this many is rebuilt with, giving the
/// emptied table back (freeing it is the caller's, after letting go of the lock).
const REBUILD_BELOW: usize = 4096;

/// How many receipts a new book reserves room for, at most (see [`Book::new`]).
pub const RESERVED_RECEIPTS: usize = 1 << 20;

/// The receipt book.
pub struct Book {
    /// Receipts in the order they were created (oldest first), for newest/oldest listings.
    /// Hashed with foldhash, seeded per process: this table is searched under the host's lock
    /// for every request, and SipHash (the default) cost several times as much per lookup.
    receipts: ReceiptTable,
    tombstones: Tombstones,
    batches: Vec<ClearBatch>,
    capacity: usize,
    tombstone_capacity: usize,
    running: usize,
    /// The bytes the receipts hold ([`receipt_bytes`] summed); checked against `max_bytes`
    /// when a receipt is created, grown by its reply when it completes.
    used_bytes: usize,
    max_bytes: usize,
    /// While an operator's clear checks its list a slice at a time: the keys of receipts
    /// reached since (the only ways a completed receipt changes are [`Book::entry`] and
    /// [`Book::get_mut`]), for it to check again before it applies.
    touched: Option<Vec<RequestKey>>,
    /// The walk of a clear in progress ([`Book::clear_steps`]).
    clear_cursor: Option<ClearCursor>,
}

/// The receipt table: request ID → receipt, in creation order.
type ReceiptTable = IndexMap<RequestKey, Receipt, foldhash::fast::RandomState>;

/// What a step of a clear took out of the book, to be freed after the host's lock is let go
/// (freeing a large clear's receipts takes longer than any agent may wait).
#[derive(Default)]
pub struct Freed {
    receipts: Vec<(RequestKey, Receipt)>,
    table: Option<ReceiptTable>,
    runs: Vec<Arc<TombstoneRun>>,
}

impl Freed {
    /// Receipts held here.
    pub fn receipts(&self) -> usize {
        self.receipts.len()
    }
}

impl Book {
    /// An empty book with hard capacities for receipts and tombstones.
    ///
    /// Room for the first [`RESERVED_RECEIPTS`] receipts (or the capacity, if smaller) is
    /// reserved at once: address space, not memory — pages are touched only as receipts
    /// arrive — so a book filling up never stops to copy its whole receipt table into a bigger
    /// one, which on a busy host cost more than the receipts themselves.
    pub fn new(capacity: usize, tombstone_capacity: usize) -> Book {
        Book {
            receipts: IndexMap::with_capacity_and_hasher(
                capacity.min(RESERVED_RECEIPTS),
                Default::default(),
            ),
            tombstones: Tombstones::default(),
            batches: Vec::new(),
            capacity,
            tombstone_capacity,
            running: 0,
            used_bytes: 0,
            max_bytes: DEFAULT_MAX_BOOK_BYTES,
            touched: None,
            clear_cursor: None,
        }
    }

    /// Bounds the bytes the receipts may hold (`--max-book-bytes`).
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Book {
        self.max_bytes = max_bytes;
        self
    }

    /// What the book holds for `key`.
    pub fn entry(&mut self, key: &RequestKey) -> Entry<'_> {
        match self.receipts.entry(key.clone()) {
            indexmap::map::Entry::Occupied(o) => {
                if let Some(touched) = &mut self.touched {
                    touched.push(key.clone());
                }
                Entry::Receipt(o.into_mut())
            }
            indexmap::map::Entry::Vacant(slot) => match self.tombstones.get(key) {
                Some(t) => Entry::Tombstone(t, &self.batches[t.batch as usize]),
                None => Entry::Vacant(Vacancy {
                    slot,
                    running: &mut self.running,
                    capacity: self.capacity,
                    used_bytes: &mut self.used_bytes,
                    max_bytes: self.max_bytes,
                }),
            },
        }
    }

    /// A receipt by key, read-only.
    pub fn get(&self, key: &RequestKey) -> Option<&Receipt> {
        self.receipts.get(key)
    }

    /// A tombstone by key, with its batch.
    pub fn tombstone(&self, key: &RequestKey) -> Option<(Tombstone, &ClearBatch)> {
        self.tombstones
            .get(key)
            .map(|t| (t, &self.batches[t.batch as usize]))
    }

    /// Creates a running receipt for a vacant key, or refuses when the book is full.
    ///
    /// The caller has checked that `key` is vacant (under the same lock).
    pub fn insert_running(
        &mut self,
        key: RequestKey,
        request: Box<str>,
        method: Method,
        task_id: Option<TaskId>,
        now: i64,
    ) -> Result<(), BookFull> {
        debug_assert!(!self.receipts.contains_key(&key) && !self.tombstones.contains(&key));
        match self.entry(&key) {
            Entry::Vacant(v) => v.insert_running(request, method, task_id, now).map(|_| ()),
            _ => unreachable!("the caller checked the key is vacant"),
        }
    }

    /// Stores the outcome of a running receipt. Returns `false` if the receipt was not running
    /// (which the host's rules never allow; the stored reply is then left untouched).
    /// Copies that joined it are woken at once.
    pub fn complete(&mut self, key: &RequestKey, outcome: Arc<Outcome>, now: i64) -> bool {
        match self.finish(key, outcome.clone(), now) {
            Ok(waiters) => {
                if let Some(waiters) = waiters {
                    waiters.send_replace(Some(outcome));
                }
                true
            }
            Err(NotRunning) => false,
        }
    }

    /// Stores the outcome of a running receipt and hands back the waiters of the copies that
    /// joined it, for the caller to wake once it has let go of the book.
    pub fn finish(
        &mut self,
        key: &RequestKey,
        outcome: Arc<Outcome>,
        now: i64,
    ) -> Result<Option<ReplyWaiters>, NotRunning> {
        self.finish_at(usize::MAX, key, outcome, now)
    }

    /// [`Book::finish`], looking first at position `hint` (where the receipt was created; a
    /// clear since then may have moved it, which the key comparison notices).
    pub fn finish_at(
        &mut self,
        hint: usize,
        key: &RequestKey,
        outcome: Arc<Outcome>,
        now: i64,
    ) -> Result<Option<ReplyWaiters>, NotRunning> {
        let receipt = match self.receipts.get_index_mut(hint) {
            Some((k, r)) if k == key => Some(r),
            _ => self.receipts.get_mut(key),
        };
        match receipt {
            Some(r) if r.is_running() => {
                // The reservation made at admission becomes the reply's real size.
                self.used_bytes = (self.used_bytes + outcome.body.len())
                    .saturating_sub(reply_reservation(&r.request));
                let ReplySlot::Running(waiters) =
                    std::mem::replace(&mut r.reply, ReplySlot::Done(outcome))
                else {
                    unreachable!("checked running above")
                };
                r.completed_at = now;
                self.running -= 1;
                Ok(waiters)
            }
            _ => Err(NotRunning),
        }
    }

    /// Records the journal sequence number of a receipt's stored completion (see
    /// [`Receipt::seq`]), looking first at position `hint`.
    pub fn set_seq(&mut self, hint: usize, key: &RequestKey, seq: u64) {
        let receipt = match self.receipts.get_index_mut(hint) {
            Some((k, r)) if k == key => Some(r),
            _ => self.receipts.get_mut(key),
        };
        if let Some(r) = receipt {
            r.seq = seq;
        }
    }

    /// A receipt by key, to change its bookkeeping (not its reply).
    pub fn get_mut(&mut self, key: &RequestKey) -> Option<&mut Receipt> {
        if let Some(touched) = &mut self.touched {
            touched.push(key.clone());
        }
        self.receipts.get_mut(key)
    }

    /// Makes room for `additional` more receipts at once: recovery knows how many it puts
    /// back, and a table grown by doubling copies itself about twenty times on the way to a
    /// million.
    pub fn reserve(&mut self, additional: usize) {
        self.receipts.reserve(additional);
    }

    /// Starts noting the keys of receipts reached through [`Book::entry`] or
    /// [`Book::get_mut`], so an operator's clear that checked its list a slice at a time
    /// checks again only those.
    pub fn watch_changes(&mut self) {
        self.touched = Some(Vec::new());
    }

    /// The keys reached since the last call (or [`Book::watch_changes`]); noting goes on.
    pub fn take_changes(&mut self) -> Vec<RequestKey> {
        match &mut self.touched {
            Some(t) => std::mem::take(t),
            None => Vec::new(),
        }
    }

    /// Stops noting changes.
    pub fn stop_watching(&mut self) {
        self.touched = None;
    }

    /// Where a receipt is in creation order (see [`Book::get_index`]).
    pub fn position(&self, key: &RequestKey) -> Option<usize> {
        self.receipts.get_index_of(key)
    }

    /// Puts back a completed receipt read from the journal at start. Capacity (count and bytes)
    /// counts it even past the limit: a restart never frees room, only a clear does.
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        &mut self,
        key: RequestKey,
        request: Box<str>,
        method: Method,
        task_id: Option<TaskId>,
        first_seen: i64,
        outcome: Arc<Outcome>,
        completed_at: i64,
        run_id: Option<Arc<str>>,
    ) {
        let cost = receipt_bytes(&key, &request, Some(&outcome));
        let mut r = Receipt::running(request, method, task_id, first_seen);
        r.reply = ReplySlot::Done(outcome);
        r.completed_at = completed_at;
        r.run_id = run_id;
        if self.receipts.insert(key, r).is_none() {
            self.used_bytes += cost;
        }
    }

    /// Puts back the tombstones and clears read from the journal at start (`batch` indexes
    /// `batches`).
    pub fn restore_tombstones(
        &mut self,
        batches: Vec<ClearBatch>,
        tombstones: Vec<(RequestKey, FingerprintDigest, u32)>,
    ) {
        let base = self.batches.len() as u32;
        self.batches.extend(batches);
        // One run per batch (a run's tombstones share theirs), then one run in all.
        let mut by_batch: Vec<Vec<(RequestKey, FingerprintDigest)>> = Vec::new();
        for (k, digest, batch) in tombstones {
            let b = batch as usize;
            if by_batch.len() <= b {
                by_batch.resize_with(b + 1, Vec::new);
            }
            by_batch[b].push((k, digest));
        }
        for (b, ids) in by_batch.into_iter().enumerate() {
            self.tombstones
                .push(Arc::new(TombstoneRun::new(ids, base + b as u32)));
        }
        self.tombstones.merge_all();
    }

    /// Drops the waiters of a running receipt whose execution vanished without an outcome (the
    /// runtime is going away), so the copies waiting on it learn there will be no reply.
    pub fn abandon_waiters(&mut self, key: &RequestKey) {
        if let Some(Receipt {
            reply: ReplySlot::Running(waiters),
            ..
        }) = self.receipts.get_mut(key)
        {
            *waiters = None;
        }
    }

    /// Removes a running receipt whose execution never started (the fleet ledger refused its
    /// claim, or found the ID there already), handing back the waiters of the copies that
    /// joined it so they get the same answer. Its ID is vacant again.
    pub fn withdraw(&mut self, key: &RequestKey) -> Option<ReplyWaiters> {
        let index = self.receipts.get_index_of(key)?;
        if !self.receipts[index].is_running() {
            return None;
        }
        // The receipt was created moments ago, near the end: shifting keeps the book's order
        // and moves only the few receipts created since.
        let (k, r) = self.receipts.shift_remove_index(index)?;
        // A clear walking the book: what it walked moved down by one.
        if let Some(cursor) = &mut self.clear_cursor {
            if index < cursor.read {
                cursor.read -= 1;
                if index < cursor.write {
                    cursor.write -= 1;
                }
            }
        }
        self.running -= 1;
        let bytes = receipt_bytes(&k, &r.request, None);
        self.used_bytes = self.used_bytes.saturating_sub(bytes);
        match r.reply {
            ReplySlot::Running(waiters) => waiters,
            ReplySlot::Done(_) => None,
        }
    }

    /// Turns the given receipts into tombstones, all or nothing, in one go (the host applies
    /// a clear in slices with [`Book::begin_clear`] and [`Book::clear_steps`] instead).
    ///
    /// Running receipts and keys the book does not hold are skipped.
    pub fn clear(
        &mut self,
        keys: &[RequestKey],
        at: i64,
        reason: Arc<str>,
    ) -> Result<usize, ClearError> {
        let mut first = usize::MAX;
        let mut ids = Vec::new();
        for k in keys {
            if let Some((i, _, r)) = self.receipts.get_full(k) {
                if !r.is_running() {
                    first = first.min(i);
                    ids.push((k.clone(), digest(&r.request)));
                }
            }
        }
        let run = Arc::new(TombstoneRun::new(ids, self.next_batch()));
        let mut clearing = self.begin_clear(first, run, ClearBatch { at, reason })?;
        let mut freed = Freed::default();
        while !self.clear_steps(&mut clearing, usize::MAX, &mut freed) {}
        while let Some(pair) = self.tombstones.to_merge() {
            let merged = Arc::new(TombstoneRun::merged(&pair[0], &pair[1]));
            self.tombstones.replace(&pair, merged);
        }
        Ok(clearing.removed())
    }

    /// The batch index the next clear's tombstones name (see [`TombstoneRun::new`]).
    pub fn next_batch(&self) -> u32 {
        self.batches.len() as u32
    }

    /// Starts a clear: the receipts whose keys `run` holds (each a completed receipt, as the
    /// caller checked under the same lock; the run was built off the lock, naming
    /// [`Book::next_batch`]) get their tombstones at once, all or nothing against the tombstone
    /// capacity. The receipts themselves leave with [`Book::clear_steps`]; until then each is
    /// still found as a receipt, in front of its tombstone. `first` is at most the position of
    /// the first of them (receipts before it are not walked; `usize::MAX` when none is held).
    pub fn begin_clear(
        &mut self,
        first: usize,
        run: Arc<TombstoneRun>,
        batch: ClearBatch,
    ) -> Result<Clearing, ClearError> {
        debug_assert!(self.clear_cursor.is_none(), "one clear at a time");
        if self.tombstones.len() + run.len() > self.tombstone_capacity {
            return Err(ClearError::TombstonesFull {
                capacity: self.tombstone_capacity,
                used: self.tombstones.len(),
            });
        }
        self.batches.push(batch);
        self.tombstones.push(run.clone());
        // Receipts before the first cleared one stay where they are.
        let first = first.min(self.receipts.len());
        self.clear_cursor = Some(ClearCursor {
            read: first,
            write: first,
        });
        Ok(Clearing { run, removed: 0 })
    }

    /// Does at most `steps` steps of a clear begun with [`Book::begin_clear`] (each visits one
    /// receipt or cuts off up to a few cleared ones); what leaves the book goes to `freed`, to
    /// be dropped after the lock is let go. Returns `true` once every cleared receipt is gone.
    /// No other clear may run until this one is done (the host's operator gate).
    pub fn clear_steps(&mut self, c: &mut Clearing, steps: usize, freed: &mut Freed) -> bool {
        let Some(mut cursor) = self.clear_cursor else {
            return true;
        };
        let done = self.walk(c, &mut cursor, steps, freed);
        self.clear_cursor = (!done).then_some(cursor);
        done
    }

    fn walk(
        &mut self,
        c: &mut Clearing,
        cursor: &mut ClearCursor,
        steps: usize,
        freed: &mut Freed,
    ) -> bool {
        let cur = cursor;
        for _ in 0..steps {
            let len = self.receipts.len();
            if cur.read < len {
                let (key, r) = self.receipts.get_index(cur.read).expect("in the table");
                if !r.is_running() && c.run.get(key).is_some() {
                    // A cleared receipt: left behind, in `[write, read)`.
                } else {
                    // One that stays: down to the write position, after those that stayed.
                    self.receipts.swap_indices(cur.write, cur.read);
                    cur.write += 1;
                }
                cur.read += 1;
            } else if len > cur.write {
                // Every receipt walked: `[write, len)` are cleared; cut a few off the end.
                let start = len.saturating_sub(CUT_PER_STEP).max(cur.write);
                for (k, r) in self.receipts.drain(start..len) {
                    debug_assert!(!r.is_running(), "a clear takes only completed receipts");
                    let cost = receipt_bytes(&k, &r.request, r.outcome().map(|o| &**o));
                    debug_assert!(cost <= self.used_bytes, "the book counted every receipt");
                    self.used_bytes = self.used_bytes.saturating_sub(cost);
                    freed.receipts.push((k, r));
                }
                c.removed += len - start;
                cur.read = start;
            } else {
                // A large clear leaves the table mostly empty: give its memory back when what
                // is left is little to move (keeping room reserved for the receipts to come).
                let len = self.receipts.len();
                if c.removed >= 1024
                    && len <= REBUILD_BELOW
                    && self.receipts.capacity() > 4 * len.max(1)
                {
                    let mut table = IndexMap::with_capacity_and_hasher(
                        self.capacity.min(RESERVED_RECEIPTS).max(len),
                        self.receipts.hasher().clone(),
                    );
                    table.extend(self.receipts.drain(..));
                    freed.table = Some(std::mem::replace(&mut self.receipts, table));
                }
                return true;
            }
        }
        false
    }

    /// The two newest tombstone runs, when they are due to be merged (by
    /// [`TombstoneRun::merged`], off the lock, then [`Book::replace_tombstones`]).
    pub fn tombstones_to_merge(&self) -> Option<[Arc<TombstoneRun>; 2]> {
        self.tombstones.to_merge()
    }

    /// Puts a merge of the two newest runs in their place, if they are still `pair`; what it
    /// replaced goes to `freed`.
    pub fn replace_tombstones(
        &mut self,
        pair: &[Arc<TombstoneRun>; 2],
        merged: Arc<TombstoneRun>,
        freed: &mut Freed,
    ) {
        freed.runs.extend(self.tombstones.replace(pair, merged));
    }

    /// Tombstone runs held (tests check merging keeps them few).
    #[cfg(test)]
    pub(crate) fn tombstone_runs(&self) -> usize {
        self.tombstones.runs.len()
    }

    /// Receipts held (running and completed).
    pub fn used(&self) -> usize {
        self.receipts.len()
    }

    /// Receipts whose execution is still running.
    pub fn running(&self) -> usize {
        self.running
    }

    /// The hard receipt capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Tombstones held.
    pub fn tombstones(&self) -> usize {
        self.tombstones.len()
    }

    /// The hard tombstone capacity.
    pub fn tombstone_capacity(&self) -> usize {
        self.tombstone_capacity
    }

    /// How full the book is, as `run.status`, the snapshot and `changed` frames report it.
    pub fn counts(&self) -> ReceiptCounts {
        ReceiptCounts {
            capacity: self.capacity() as u64,
            running: self.running() as u64,
            tombstone_capacity: self.tombstone_capacity() as u64,
            tombstones: self.tombstones() as u64,
            used: self.used() as u64,
            used_bytes: self.used_bytes as u64,
            max_bytes: self.max_bytes as u64,
        }
    }

    /// The bytes the receipts hold, as `--max-book-bytes` counts them.
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    /// The receipt at a position in creation order (0 is the oldest).
    pub fn get_index(&self, i: usize) -> Option<(&RequestKey, &Receipt)> {
        self.receipts.get_index(i)
    }

    /// Receipts oldest first.
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&RequestKey, &Receipt)> + ExactSizeIterator {
        self.receipts.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn done(code: bool) -> Arc<Outcome> {
        Arc::new(if code {
            Outcome::err(&crate::protocol::ErrorBody::new(
                crate::protocol::ErrorCode::ActionFailed,
                "x",
            ))
        } else {
            Outcome::ok(&serde_json::json!({}))
        })
    }

    #[test]
    fn a_full_book_refuses_and_keeps_everything() {
        let mut b = Book::new(2, 10);
        for i in 0..2 {
            b.insert_running(
                RequestKey::new(&format!("r{i}")),
                "{}".into(),
                Method::TaskStart,
                None,
                0,
            )
            .unwrap();
        }
        assert_eq!(
            b.insert_running(
                RequestKey::new("r9"),
                "{}".into(),
                Method::TaskStart,
                None,
                0
            )
            .unwrap_err(),
            BookFull {
                limit: Limit::Count,
                capacity: 2,
                used: 2,
                used_bytes: 2 * (RECEIPT_OVERHEAD_BYTES + 2 + 2 + reply_reservation("{}")),
                max_bytes: DEFAULT_MAX_BOOK_BYTES,
            }
        );
        assert!(b.get(&RequestKey::new("r0")).is_some());
        assert!(b.get(&RequestKey::new("r1")).is_some());
    }

    #[test]
    fn bytes_bound_the_book_and_clearing_gives_them_back() {
        let request = |n: usize| -> Box<str> { "x".repeat(n).into() };
        let key = |i: usize| RequestKey::new(&uuid::Uuid::from_u128(i as u128).to_string());
        let reply = done(false).body.len();
        // While running, a receipt holds room for its reply; once done, the reply itself.
        let running = RECEIPT_OVERHEAD_BYTES + 1000 + reply_reservation(&request(1000));
        let completed = RECEIPT_OVERHEAD_BYTES + 1000 + reply;
        let max = 2 * completed + running + 10;
        let mut b = Book::new(100, 100).with_max_bytes(max);
        for i in 0..3 {
            b.insert_running(key(i), request(1000), Method::PageFill, None, 0)
                .unwrap();
            assert_eq!(b.used_bytes(), i * completed + running);
            b.complete(&key(i), done(false), 1);
            assert_eq!(b.used_bytes(), (i + 1) * completed);
            if i == 2 {
                break;
            }
        }
        let full = b
            .insert_running(key(9), request(1000), Method::PageFill, None, 0)
            .unwrap_err();
        assert_eq!(full.limit, Limit::Bytes);
        assert_eq!((full.used_bytes, full.max_bytes), (3 * completed, max));
        assert!(b.used_bytes() <= max);
        // A small request still fits.
        b.insert_running(key(3), request(0), Method::PageFill, None, 0)
            .unwrap_or_else(|e| panic!("{e:?}"));
        b.complete(&key(3), done(false), 1);
        assert!(b.used_bytes() <= max);
        let keys: Vec<RequestKey> = (0..4).map(key).collect();
        assert_eq!(b.clear(&keys, 2, "why".into()), Ok(4));
        assert_eq!(b.used_bytes(), 0);
        assert_eq!(b.counts().used_bytes, 0);
        assert_eq!(b.counts().max_bytes, max as u64);
    }

    #[test]
    fn the_per_receipt_overhead_covers_the_receipt_table() {
        // The table entry (hash, key, receipt), its index slot and control byte at the
        // table's worst load, the reply's shared allocation, and allocator rounding of the two
        // strings a receipt owns.
        let entry = std::mem::size_of::<(usize, RequestKey, Receipt)>();
        let index = 2 * (std::mem::size_of::<usize>() + 1);
        let reply = std::mem::size_of::<Outcome>() + 2 * std::mem::size_of::<usize>();
        let rounding = 2 * 16;
        let total = entry + index + reply + rounding;
        assert!(total <= RECEIPT_OVERHEAD_BYTES, "{total} bytes per receipt");
    }

    #[test]
    fn clearing_is_all_or_nothing_against_tombstone_capacity() {
        let mut b = Book::new(10, 1);
        for i in 0..2 {
            let k = RequestKey::new(&format!("r{i}"));
            b.insert_running(k.clone(), "{}".into(), Method::TaskStart, None, 0)
                .unwrap();
            b.complete(&k, done(false), 1);
        }
        let keys = [RequestKey::new("r0"), RequestKey::new("r1")];
        assert!(matches!(
            b.clear(&keys, 5, "why".into()),
            Err(ClearError::TombstonesFull { .. })
        ));
        assert_eq!(b.used(), 2);
        assert_eq!(b.clear(&keys[..1], 5, "why".into()), Ok(1));
        assert_eq!(b.used(), 1);
        assert!(
            matches!(b.entry(&keys[0]), Entry::Tombstone(t, batch) if t.digest == digest("{}") && batch.at == 5)
        );
    }

    #[test]
    fn tombstones_of_every_clear_are_found_by_uuid_and_by_text() {
        let mut b = Book::new(1000, 1000);
        let ids: Vec<String> = (0..300u32)
            .map(|i| {
                if i.is_multiple_of(3) {
                    format!("text-{i}")
                } else {
                    uuid::Uuid::new_v4().to_string()
                }
            })
            .collect();
        for id in &ids {
            let k = RequestKey::new(id);
            b.insert_running(
                k.clone(),
                format!("{{\"r\":\"{id}\"}}").into(),
                Method::PageFill,
                None,
                0,
            )
            .unwrap();
            b.complete(&k, done(false), 1);
        }
        // Three clears in an order unrelated to the keys' order.
        let keys: Vec<RequestKey> = ids.iter().map(|i| RequestKey::new(i)).collect();
        for (n, chunk) in keys.chunks(100).rev().enumerate() {
            assert_eq!(
                b.clear(chunk, 10 + n as i64, format!("clear {n}").into()),
                Ok(100)
            );
        }
        assert_eq!(b.used(), 0);
        assert_eq!(b.tombstones(), 300);
        for (i, id) in ids.iter().enumerate() {
            let (t, batch) = b
                .tombstone(&RequestKey::new(id))
                .expect("every cleared id has a tombstone");
            assert_eq!(t.digest, digest(&format!("{{\"r\":\"{id}\"}}")));
            assert_eq!(
                batch.at,
                10 + (2 - (i / 100)) as i64,
                "{id} keeps the batch that cleared it"
            );
        }
        assert!(b
            .tombstone(&RequestKey::new(&uuid::Uuid::new_v4().to_string()))
            .is_none());
        assert!(b.tombstone(&RequestKey::new("text-1")).is_none());
    }

    #[test]
    fn a_clear_in_steps_keeps_order_while_receipts_arrive() {
        let mut b = Book::new(10_000, 10_000);
        let key = |i: usize| {
            if i.is_multiple_of(5) {
                RequestKey::new(&format!("text-{i}"))
            } else {
                RequestKey::new(&uuid::Uuid::from_u128(i as u128 + 1).to_string())
            }
        };
        let add = |b: &mut Book, i: usize| {
            b.insert_running(
                key(i),
                format!("{{\"n\":{i}}}").into(),
                Method::PageFill,
                None,
                0,
            )
            .unwrap();
            b.complete(&key(i), done(i.is_multiple_of(2)), 1);
        };
        for i in 0..1000 {
            add(&mut b, i);
        }
        let bytes = |b: &Book, keys: &[usize]| -> usize {
            keys.iter()
                .map(|&i| {
                    let r = b.get(&key(i)).unwrap();
                    receipt_bytes(&key(i), &r.request, r.outcome().map(|o| &**o))
                })
                .sum()
        };
        // Every third goes; one new receipt arrives after each step.
        let cleared: Vec<usize> = (0..1000).filter(|i| i % 3 == 1).collect();
        let mut stay: Vec<usize> = (0..1000).filter(|i| i % 3 != 1).collect();
        let stay_bytes = bytes(&b, &stay);
        let first = b.position(&key(cleared[0])).unwrap();
        let ids = cleared
            .iter()
            .map(|&i| (key(i), digest(&format!("{{\"n\":{i}}}"))));
        let run = Arc::new(TombstoneRun::new(ids, b.next_batch()));
        let mut c = b
            .begin_clear(
                first,
                run,
                ClearBatch {
                    at: 7,
                    reason: "r".into(),
                },
            )
            .unwrap();
        let mut next = 1000;
        let mut freed = Freed::default();
        while !b.clear_steps(&mut c, 7, &mut freed) {
            // Never vacant: each cleared ID is still a receipt or already a tombstone.
            for &i in &cleared {
                assert!(b.get(&key(i)).is_some() || b.tombstone(&key(i)).is_some());
            }
            if next < 1300 {
                add(&mut b, next);
                stay.push(next);
                next += 1;
            }
        }
        assert_eq!(c.removed(), cleared.len());
        assert_eq!(freed.receipts(), cleared.len());
        let order: Vec<RequestKey> = b.iter().map(|(k, _)| k.clone()).collect();
        let expected: Vec<RequestKey> = stay.iter().map(|&i| key(i)).collect();
        assert!(order == expected, "the receipts that stay keep their order");
        assert_eq!(
            b.used_bytes(),
            stay_bytes + bytes(&b, &stay[stay.len() - (next - 1000)..])
        );
        assert!(next > 1100, "receipts arrived during the clear");
        for &i in &cleared {
            let (t, batch) = b.tombstone(&key(i)).expect("a tombstone");
            assert_eq!(t.digest, digest(&format!("{{\"n\":{i}}}")));
            assert_eq!(batch.at, 7);
            assert!(b.get(&key(i)).is_none());
        }
        for (p, &i) in stay.iter().enumerate() {
            assert_eq!(b.position(&key(i)), Some(p));
        }
    }

    #[test]
    fn a_receipt_withdrawn_during_a_clear_moves_its_walk_with_it() {
        let key = |i: usize| RequestKey::new(&format!("r{i}"));
        for withdraw_after in [1, 30, 120, 250, 100_000] {
            let mut b = Book::new(1000, 1000);
            // r0..r199 completed, with running r1000 (early) and r1001 (late) among them.
            for i in 0..200 {
                b.insert_running(key(i), "{}".into(), Method::PageFill, None, 0)
                    .unwrap();
                b.complete(&key(i), done(false), 1);
                if i == 10 || i == 150 {
                    let r = 1000 + usize::from(i == 150);
                    b.insert_running(key(r), "{}".into(), Method::PageFill, None, 0)
                        .unwrap();
                }
            }
            let cleared: Vec<usize> = (0..200).filter(|i| i % 2 == 0).collect();
            let ids = cleared.iter().map(|&i| (key(i), digest("{}")));
            let run = Arc::new(TombstoneRun::new(ids, b.next_batch()));
            let batch = ClearBatch {
                at: 1,
                reason: "r".into(),
            };
            let mut c = b.begin_clear(0, run, batch).unwrap();
            let mut freed = Freed::default();
            let (mut steps, mut withdrawn) = (0, false);
            while !b.clear_steps(&mut c, 1, &mut freed) {
                steps += 1;
                if steps == withdraw_after {
                    withdrawn = true;
                    assert!(b.withdraw(&key(1000)).is_none());
                    assert!(b.withdraw(&key(1001)).is_none());
                }
            }
            let order: Vec<RequestKey> = b.iter().map(|(k, _)| k.clone()).collect();
            let mut expected: Vec<RequestKey> = Vec::new();
            for i in (0..200).filter(|i| i % 2 == 1) {
                if !withdrawn && (i == 11 || i == 151) {
                    expected.push(key(1000 + usize::from(i == 151)));
                }
                expected.push(key(i));
            }
            assert!(order == expected, "withdrawn after {withdraw_after} steps");
            for &i in &cleared {
                assert!(b.get(&key(i)).is_none() && b.tombstone(&key(i)).is_some());
            }
        }
    }

    #[test]
    fn many_clears_keep_few_tombstone_runs() {
        let mut b = Book::new(100_000, 100_000);
        let mut n = 0;
        for round in 0..300 {
            let keys: Vec<RequestKey> = (0..1 + round % 7)
                .map(|_| {
                    n += 1;
                    let k = RequestKey::new(&uuid::Uuid::new_v4().to_string());
                    b.insert_running(k.clone(), "{}".into(), Method::TaskStart, None, 0)
                        .unwrap();
                    b.complete(&k, done(false), 1);
                    k
                })
                .collect();
            b.clear(&keys, round, "r".into()).unwrap();
            assert!(b.tombstone_runs() <= 16, "{} runs", b.tombstone_runs());
        }
        assert_eq!(b.tombstones(), n);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Submit { id: u8, content: u8 },
        Complete { id: u8 },
        Clear { id: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..24, 0u8..3).prop_map(|(id, content)| Op::Submit { id, content }),
            2 => (0u8..24).prop_map(|id| Op::Complete { id }),
            1 => (0u8..24).prop_map(|id| Op::Clear { id }),
        ]
    }

    proptest! {
        /// Never two executions per ID, never an eviction, `used ≤ capacity`.
        #[test]
        fn book_invariants(capacity in 1usize..16, ops in proptest::collection::vec(op(), 1..200)) {
            let mut book = Book::new(capacity, 8);
            let mut executions: HashMap<u8, u32> = HashMap::new();
            let mut ever_stored: std::collections::HashSet<u8> = Default::default();
            let mut cleared: std::collections::HashSet<u8> = Default::default();
            let mut senders = HashMap::new();
            for op in ops {
                match op {
                    Op::Submit { id, content } => {
                        let key = RequestKey::new(&format!("id-{id}"));
                        let request: Box<str> = format!("{{\"c\":{content}}}").into();
                        match book.entry(&key) {
                            Entry::Receipt(r) => {
                                // Same or other content: never a second execution.
                                let _same = *r.request == *request;
                            }
                            Entry::Tombstone(..) => prop_assert!(cleared.contains(&id)),
                            Entry::Vacant(_) => {
                                prop_assert!(!cleared.contains(&id));
                                if let Ok(tx) = book.insert_running(key, request, Method::PageFill, None, 0) {
                                    *executions.entry(id).or_default() += 1;
                                    ever_stored.insert(id);
                                    senders.insert(id, tx);
                                }
                            }
                        }
                    }
                    Op::Complete { id } => {
                        let key = RequestKey::new(&format!("id-{id}"));
                        if senders.remove(&id).is_some() {
                            prop_assert!(book.complete(&key, done(id.is_multiple_of(2)), 1));
                        }
                    }
                    Op::Clear { id } => {
                        let key = RequestKey::new(&format!("id-{id}"));
                        let clearable = matches!(book.entry(&key), Entry::Receipt(r) if !r.is_running());
                        if clearable && book.clear(&[key], 2, "test".into()).is_ok() {
                            cleared.insert(id);
                        }
                    }
                }
                prop_assert!(book.used() <= capacity);
                prop_assert!(executions.values().all(|n| *n == 1));
                // Nothing stored is ever lost: every ID is a receipt or a tombstone.
                for id in &ever_stored {
                    let key = RequestKey::new(&format!("id-{id}"));
                    prop_assert!(!matches!(book.entry(&key), Entry::Vacant(_)), "id-{} was evicted", id);
                }
                prop_assert_eq!(book.running(), senders.len());
            }
        }
    }
}
