//! The receipt book: one receipt per request ID for the life of a run.
//!
//! A receipt binds a request ID to the canonical request it first arrived with and to one
//! shared reply. The book never evicts: when it is full it refuses new IDs, and only an
//! operator's deliberate clear turns receipts into compact tombstones. The book is plain data
//! behind the host's lock; every rule that needs atomicity (lookup, fingerprint compare,
//! capacity check, insert) is one method call here, made under that one lock.
//!
//! The book lives in memory; durability is the host's: it writes through to the journal (the
//! `journal` module) or the fleet ledger (`ledger`), and neither changes the rules here.

mod clearing;
mod limits;
mod table;
#[cfg(test)]
mod tests;
mod tombstones;

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

pub use crate::ids::RequestKey;
use crate::ids::TaskId;
use crate::protocol::results::FieldResult;
use crate::protocol::results::ReceiptCounts;
use crate::protocol::{Fingerprint, Method, Outcome, StoredRequest, REQUEST_PIECES};

use clearing::ClearCursor;
pub use clearing::{ClearError, Clearing, SpareTable};
use limits::{receipt_bytes, reply_reservation};
pub use limits::{BookFull, Limit, DEFAULT_MAX_BOOK_BYTES, RECEIPT_OVERHEAD_BYTES};
pub use table::FaultAhead;
use table::{Miss, ReceiptTable, TableHasher, MAX_ENTRIES};
use tombstones::Tombstones;
pub use tombstones::{ClearBatch, Tombstone, TombstoneRun};

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
    /// A `page.fill` that took effect: its reply — what was asked for — is written again from
    /// the stored request whenever it is read ([`FieldResult::filled_again`]), byte for byte the
    /// first answer's, instead of being kept: it would be a quarter of the receipt's memory.
    Filled,
}

/// One receipt: request ID → (canonical request, shared reply).
pub struct Receipt {
    /// The canonical `{method, params}` the ID first arrived with (its fingerprint), kept as its
    /// params text beside `method`, or a plain fill's target and value beside `task_id`
    /// ([`StoredRequest`]; [`Receipt::request_text`] writes it whole).
    pub request: StoredRequest,
    /// The task the request acts on, when it names one. A plain fill's stored request is
    /// written again with it ([`StoredRequest::pieces`]), so it never changes once the receipt
    /// exists.
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
    /// The earlier run that created the receipt, for one recovered from the journal: its
    /// place in the book's earlier runs plus one ([`Book::run_of`]); 0 for a receipt of the
    /// current run. An index, not the run's ID, so a receipt stays small.
    run: u32,
    /// The journal sequence number of the stored reply's completion record (0: none, or no
    /// journal). A copy may be answered from the stored reply only once it is durable.
    pub seq: u64,
    /// An operator recorded that this receipt's uncertain outcome was settled outside Polaris
    /// (`outcome.acknowledge`): it may be cleared.
    pub acknowledged: bool,
}

impl Receipt {
    fn running(
        request: StoredRequest,
        method: Method,
        task_id: Option<TaskId>,
        now: i64,
    ) -> Receipt {
        Receipt {
            request,
            task_id,
            method,
            first_seen: now,
            completed_at: 0,
            joins: 0,
            replays: 0,
            reply: ReplySlot::Running(None),
            run: 0,
            seq: 0,
            acknowledged: false,
        }
    }

    /// The stored outcome, once the execution finished (a fill's written again from its
    /// request: see [`ReplySlot::Filled`]).
    pub fn outcome(&self) -> Option<Arc<Outcome>> {
        match &self.reply {
            ReplySlot::Done(o) => Some(o.clone()),
            ReplySlot::Filled => Some(self.filled_again()),
            ReplySlot::Running(_) => None,
        }
    }

    /// The stored outcome's error code once the execution finished (`Some(None)`: it
    /// succeeded), read without writing a fill's reply again.
    pub fn result(&self) -> Option<Option<crate::protocol::ErrorCode>> {
        match &self.reply {
            ReplySlot::Done(o) => Some(o.code),
            ReplySlot::Filled => Some(None),
            ReplySlot::Running(_) => None,
        }
    }

    /// The length of the stored outcome's body, once the execution finished (counted, not
    /// written, for a fill's).
    pub fn reply_len(&self) -> Option<usize> {
        match &self.reply {
            ReplySlot::Done(o) => Some(o.body.len()),
            ReplySlot::Filled => Some(self.filled_again_len()),
            ReplySlot::Running(_) => None,
        }
    }

    /// The canonical `{method, params}` the ID first arrived with, written whole: what the
    /// journal, the ledger and the operator's views show.
    pub fn request_text(&self) -> String {
        self.request
            .text(self.method.as_str(), self.task_id.as_deref())
    }

    /// The length of [`Receipt::request_text`], without writing it: what the book's byte bound
    /// counts.
    pub fn request_len(&self) -> usize {
        self.request
            .text_len(self.method.as_str(), self.task_id.as_deref())
    }

    /// [`Receipt::request_text`] in the pieces the receipt keeps it in (see
    /// [`StoredRequest::pieces`]), for a writer that takes them one by one.
    pub fn request_pieces(&self) -> [&str; REQUEST_PIECES] {
        self.request
            .pieces(self.method.as_str(), self.task_id.as_deref())
    }

    /// Whether `request` is the fingerprint this receipt was made for.
    pub fn is_for(&self, request: &Fingerprint<'_>) -> bool {
        request.matches(self.method.as_str(), &self.request, self.task_id.as_deref())
    }

    /// The digest a tombstone of this receipt keeps ([`digest`] of its whole text, hashed in
    /// pieces).
    pub fn digest(&self) -> FingerprintDigest {
        let mut hasher = Sha256::new();
        for piece in self.request_pieces() {
            hasher.update(piece.as_bytes());
        }
        truncated(&hasher.finalize())
    }

    /// What a `page.fill` receipt's reply is written again from; `None` for any other method
    /// (or a request kept whole, which no fill is).
    #[inline]
    fn fill_source(&self) -> Option<FillSource<'_>> {
        if self.method != Method::PageFill {
            return None;
        }
        match self.request.plain_fill() {
            Some((target, value)) => Some(FillSource::Plain { target, value }),
            None => self.request.params().map(FillSource::Params),
        }
    }

    /// The reply of a [`ReplySlot::Filled`] receipt, written again from its stored request: a
    /// receipt is marked so only when its request is a `page.fill` ([`Book::finish_filled_at`]),
    /// so this never fails but for a broken book, where it says so instead of panicking.
    fn filled_again(&self) -> Arc<Outcome> {
        let again = match self.fill_source() {
            Some(FillSource::Plain { target, value }) => Some(FieldResult::filled(target, value)),
            Some(FillSource::Params(params)) => FieldResult::filled_again(params),
            None => None,
        };
        again.unwrap_or_else(|| {
            Outcome::err(&crate::protocol::ErrorBody::new(
                crate::protocol::ErrorCode::Internal,
                "this receipt's stored reply could not be written again from its request",
            ))
        })
    }

    /// The length of [`Receipt::filled_again`]'s body, counted without writing it when it can be.
    fn filled_again_len(&self) -> usize {
        match self.fill_source() {
            Some(FillSource::Plain { target, value }) => FieldResult::filled_len(target, value),
            Some(FillSource::Params(params)) => FieldResult::filled_again_len(params).unwrap_or(0),
            None => 0,
        }
    }

    /// Whether a `page.fill` receipt would write `outcome` again byte for byte from its stored
    /// request (so it need not keep it).
    fn gives_back(&self, outcome: &Outcome) -> bool {
        match self.fill_source() {
            Some(FillSource::Plain { target, value }) => {
                FieldResult::is_filled(target, value, outcome)
            }
            Some(FillSource::Params(params)) => FieldResult::gives_back(params, outcome),
            None => false,
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
            ReplySlot::Done(_) | ReplySlot::Filled => None,
        }
    }
}

/// What a `page.fill` receipt's reply is written again from ([`Receipt::filled_again`]).
enum FillSource<'a> {
    /// A plain fill kept short: its target and value, which hold no escapes.
    Plain { target: &'a str, value: &'a str },
    /// The fill's canonical params text.
    Params(&'a str),
}

/// [`Book::finish`] was asked to complete a receipt that is not running.
#[derive(Debug)]
pub struct NotRunning;

/// The 128-bit digest a tombstone keeps instead of the whole request.
pub type FingerprintDigest = [u8; 16];

/// The digest of a canonical request.
pub fn digest(request: &str) -> FingerprintDigest {
    truncated(&Sha256::digest(request.as_bytes()))
}

/// The first 128 bits of a SHA-256.
fn truncated(full: &[u8]) -> FingerprintDigest {
    let mut d = [0u8; 16];
    d.copy_from_slice(&full[..16]);
    d
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
    table: &'a mut ReceiptTable,
    miss: Miss,
    key: &'a RequestKey,
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
        request: StoredRequest,
        method: Method,
        task_id: Option<TaskId>,
        now: i64,
    ) -> Result<usize, BookFull> {
        let used = self.table.len();
        let cost = receipt_bytes(
            self.key,
            request.text_len(method.as_str(), task_id.as_deref()),
            None,
        );
        let limit = if used >= self.capacity || used >= MAX_ENTRIES {
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
        let position = self.table.insert_missed(
            self.miss,
            self.key.clone(),
            Receipt::running(request, method, task_id, now),
        );
        *self.running += 1;
        *self.used_bytes += cost;
        Ok(position)
    }
}

/// How many receipts a book bounded by `capacity` receipts and `max_bytes` bytes can ever hold:
/// each receipt is charged at least [`RECEIPT_OVERHEAD_BYTES`], so no more than
/// `max_bytes / RECEIPT_OVERHEAD_BYTES` fit whatever the capacity says. The book reserves room
/// for exactly this many (see [`Book::new`]).
pub fn reachable_receipts(capacity: usize, max_bytes: usize) -> usize {
    capacity.min(max_bytes / RECEIPT_OVERHEAD_BYTES)
}

/// A receipt table with room reserved for `receipts`, or for as many as the system lets the
/// host reserve (halving the request until it is granted): a bound larger than this machine can
/// back still starts a host, whose table then grows as it fills.
pub(super) fn reserved_table(receipts: usize, hasher: TableHasher) -> ReceiptTable {
    let mut table = ReceiptTable::with_hasher(hasher);
    let mut want = receipts.min(MAX_ENTRIES);
    while want > 0 && table.try_reserve_total(want).is_err() {
        want /= 2;
    }
    table
}

/// The receipt book.
pub struct Book {
    /// Receipts in the order they were created (oldest first), for newest/oldest listings.
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
    /// The earlier runs receipts recovered from the journal were created in
    /// ([`Receipt::run`]).
    runs: Vec<Arc<str>>,
}

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
    /// Room for every receipt the book can ever hold ([`reachable_receipts`]) is reserved at
    /// once — address space for the receipts themselves, whose pages are touched as they
    /// arrive; memory for the index, 11–21 bytes a receipt of room, once the host faults it in
    /// ([`Book::fault_ahead`]) — so a book filling up never stops to copy its whole receipt
    /// table into a bigger one. Such a copy
    /// happens under the host's lock: at two million receipts it held every agent's request
    /// for hundreds of milliseconds.
    pub fn new(capacity: usize, tombstone_capacity: usize) -> Book {
        Book {
            receipts: reserved_table(
                reachable_receipts(capacity, DEFAULT_MAX_BOOK_BYTES),
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
            runs: Vec::new(),
        }
    }

    /// Bounds the bytes the receipts may hold (`--max-book-bytes`).
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Book {
        self.max_bytes = max_bytes;
        let reachable = reachable_receipts(self.capacity, max_bytes);
        if self.receipts.is_empty() && self.receipts.capacity() != reachable {
            // Reserved for the bound just set instead (see [`Book::new`]).
            self.receipts = reserved_table(reachable, self.receipts.hasher().clone());
        }
        self
    }

    /// The next stretch of the receipt table to fault in once the host's lock is let go: its
    /// index whole once it is made, then the reserved room when the receipts are about to
    /// reach the end of what is faulted in ([`ReceiptTable::fault_ahead`]).
    pub fn fault_ahead(&mut self) -> Option<FaultAhead> {
        self.receipts.fault_ahead()
    }

    /// The index's size and the largest faulted in whole, when the index is larger: see
    /// [`ReceiptTable::index_left_to_receipts`].
    pub fn index_left_to_receipts(&self) -> Option<(usize, usize)> {
        self.receipts.index_left_to_receipts()
    }

    /// What the book holds for `key`.
    pub fn entry<'a>(&'a mut self, key: &'a RequestKey) -> Entry<'a> {
        let hash = self.receipts.hash(key);
        match self.receipts.find_hashed(hash, key) {
            Ok(position) => {
                if let Some(touched) = &mut self.touched {
                    touched.push(key.clone());
                }
                let (_, receipt) = self
                    .receipts
                    .get_index_mut(position)
                    .expect("a position the lookup found");
                Entry::Receipt(receipt)
            }
            Err(miss) => match self.tombstones.get(key) {
                Some(t) => Entry::Tombstone(t, &self.batches[t.batch as usize]),
                None => Entry::Vacant(Vacancy {
                    table: &mut self.receipts,
                    miss,
                    key,
                    running: &mut self.running,
                    capacity: self.capacity,
                    used_bytes: &mut self.used_bytes,
                    max_bytes: self.max_bytes,
                }),
            },
        }
    }

    /// Brings what admitting each of `keys` will read into the processor's cache, before a
    /// batch of requests is admitted in order. The table is far larger than the caches, so
    /// each lookup waits for memory four times in a row: the index slot, the entry, then the
    /// stored request (compared with the new one) and the stored reply (copied into the
    /// answer). The lookups of a batch depend on nothing but their keys, so this asks for each
    /// level of all of them at once, one level after the other, and the admissions that follow
    /// find the batch in cache instead of waiting for it one request at a time.
    pub fn look_ahead(&self, keys: &[RequestKey]) {
        if keys.len() < 2 {
            return;
        }
        const CHUNK: usize = 32;
        let table = &self.receipts;
        for keys in keys.chunks(CHUNK) {
            let mut hashes = [0u64; CHUNK];
            for (h, key) in hashes.iter_mut().zip(keys) {
                *h = table.hash(key);
                table.prefetch_slot(*h);
            }
            let mut found = [usize::MAX; CHUNK];
            for (f, &h) in found.iter_mut().zip(&hashes[..keys.len()]) {
                if let Some(position) = table.candidate(h) {
                    table.prefetch_entry(position);
                    *f = position;
                }
            }
            let mut outcomes: [Option<&Outcome>; CHUNK] = [None; CHUNK];
            for ((o, &f), key) in outcomes.iter_mut().zip(&found).zip(keys) {
                let Some((k, r)) = table.get_index(f) else {
                    continue;
                };
                if k == key {
                    table::prefetch(r.request.as_ptr());
                    if let ReplySlot::Done(outcome) = &r.reply {
                        table::prefetch(Arc::as_ptr(outcome));
                        *o = Some(outcome);
                    }
                }
            }
            for outcome in outcomes.iter().flatten() {
                table::prefetch(outcome.body.as_ptr());
            }
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
    /// The caller has checked that `key` is vacant (under the same lock); a key already in the
    /// book (a receipt or a tombstone) is left as it is. The host itself creates receipts
    /// through [`Book::entry`], whose [`Vacancy`] is the proof the key is free.
    pub fn insert_running(
        &mut self,
        key: RequestKey,
        request: StoredRequest,
        method: Method,
        task_id: Option<TaskId>,
        now: i64,
    ) -> Result<(), BookFull> {
        debug_assert!(!self.receipts.contains_key(&key) && !self.tombstones.contains(&key));
        match self.entry(&key) {
            Entry::Vacant(v) => v.insert_running(request, method, task_id, now).map(|_| ()),
            Entry::Receipt(_) | Entry::Tombstone(..) => Ok(()),
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
        let len = outcome.body.len();
        self.finish_slot(hint, key, |_| ReplySlot::Done(outcome), len, now)
    }

    /// [`Book::finish_at`] for a running `page.fill` that took effect, whose reply is
    /// `FieldResult::filled` of its own target and value: the receipt keeps no copy of it
    /// ([`ReplySlot::Filled`]) once its stored request is checked to give those very bytes
    /// back ([`FieldResult::gives_back`]; otherwise it keeps `outcome`), and counts against
    /// `--max-book-bytes` as if it did.
    pub fn finish_filled_at(
        &mut self,
        hint: usize,
        key: &RequestKey,
        outcome: &Arc<Outcome>,
        now: i64,
    ) -> Result<Option<ReplyWaiters>, NotRunning> {
        let slot = |r: &Receipt| {
            if r.gives_back(outcome) {
                ReplySlot::Filled
            } else {
                ReplySlot::Done(outcome.clone())
            }
        };
        self.finish_slot(hint, key, slot, outcome.body.len(), now)
    }

    /// Completes a running receipt with the slot `slot` makes for it, its reply's body `len`
    /// bytes long.
    fn finish_slot(
        &mut self,
        hint: usize,
        key: &RequestKey,
        slot: impl FnOnce(&Receipt) -> ReplySlot,
        len: usize,
        now: i64,
    ) -> Result<Option<ReplyWaiters>, NotRunning> {
        let receipt = match self.receipts.get_index_mut(hint) {
            Some((k, r)) if k == key => Some(r),
            _ => self.receipts.get_mut(key),
        };
        let Some(r) = receipt else {
            return Err(NotRunning);
        };
        let ReplySlot::Running(waiters) = &mut r.reply else {
            return Err(NotRunning);
        };
        let waiters = waiters.take();
        // The reservation made at admission becomes the reply's real size.
        self.used_bytes =
            (self.used_bytes + len).saturating_sub(reply_reservation(r.request_len()));
        r.reply = slot(r);
        r.completed_at = now;
        self.running -= 1;
        Ok(waiters)
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

    /// The earlier run that created a receipt recovered from the journal; `None` for a
    /// receipt of the current run.
    pub fn run_of(&self, r: &Receipt) -> Option<&Arc<str>> {
        (r.run as usize)
            .checked_sub(1)
            .and_then(|i| self.runs.get(i))
    }

    /// [`Receipt::run`] for a receipt of the earlier run `run`.
    fn run_index(&mut self, run: Arc<str>) -> u32 {
        // Recovery restores a journal's receipts run by run: the last run is the likely one.
        let i = match self.runs.iter().rposition(|r| **r == *run) {
            Some(i) => i,
            None => {
                self.runs.push(run);
                self.runs.len() - 1
            }
        };
        u32::try_from(i + 1).unwrap_or(u32::MAX)
    }

    /// Puts back a completed receipt read from the journal at start. Capacity (count and bytes)
    /// counts it even past the limit: a restart never frees room, only a clear does.
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        &mut self,
        key: RequestKey,
        request: StoredRequest,
        method: Method,
        task_id: Option<TaskId>,
        first_seen: i64,
        outcome: Arc<Outcome>,
        completed_at: i64,
        run_id: Option<Arc<str>>,
    ) {
        let cost = receipt_bytes(
            &key,
            request.text_len(method.as_str(), task_id.as_deref()),
            Some(outcome.body.len()),
        );
        let mut r = Receipt::running(request, method, task_id, first_seen);
        r.reply = ReplySlot::Done(outcome);
        r.completed_at = completed_at;
        r.run = run_id.map_or(0, |run| self.run_index(run));
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
        if !self.receipts.get_index(index)?.1.is_running() {
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
        let bytes = receipt_bytes(&k, r.request_len(), None);
        self.used_bytes = self.used_bytes.saturating_sub(bytes);
        match r.reply {
            ReplySlot::Running(waiters) => waiters,
            ReplySlot::Done(_) | ReplySlot::Filled => None,
        }
    }
}

impl Book {
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
            // The book does not know tasks: the host fills it in (`State::receipt_counts`).
            unsettled: 0,
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
