//! Applying a clear a step at a time, so the host's lock is never held for the whole of a
//! large clear.

use std::sync::Arc;

use super::limits::receipt_bytes;
use super::table::{ReceiptTable, TableHasher};
use super::tombstones::{ClearBatch, TombstoneRun};
use super::{reachable_receipts, reserved_table, Book, Freed};

pub use crate::ids::RequestKey;

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
    /// The table the receipts that stay move to once the clear left the book's table mostly
    /// empty ([`Clearing::wanted_table`]): asked for, then made and given off the lock.
    spare: Spare,
}

/// Where a clear is with the fresh table it moves the remaining receipts to.
enum Spare {
    /// Not needed yet.
    None,
    /// Asked for: [`Clearing::wanted_table`] hands out what to make.
    Wanted(SpareTable),
    /// Handed out to be made; not given back yet.
    Asked,
    /// Made off the lock and given back ([`Clearing::give_table`]).
    Given(ReceiptTable),
}

/// A receipt table to make off the host's lock ([`SpareTable::make`]) for a clear that left the
/// book's table mostly empty: reserving room for a million receipts and faulting in its index
/// takes tens of milliseconds (megabytes of fresh pages), which no agent may wait for.
pub struct SpareTable {
    receipts: usize,
    moving: usize,
    hasher: TableHasher,
}

impl SpareTable {
    /// The table, with room reserved for the receipts the book's bounds let it hold, its index
    /// and the room for the receipts it takes over already faulted in.
    pub fn make(self) -> ReceiptTable {
        let mut table = reserved_table(self.receipts, self.hasher);
        table.fault_in_now(self.moving);
        table
    }
}

/// Where a clear's walk of the receipt table is ([`Clearing`]); kept by the book so a receipt
/// withdrawn meanwhile ([`Book::withdraw`]) moves it with the receipts.
#[derive(Clone, Copy)]
pub(super) struct ClearCursor {
    /// Receipts before this position were walked.
    pub(super) read: usize,
    /// Receipts before this position stay; `[write, read)` are cleared ones.
    pub(super) write: usize,
}

impl Clearing {
    /// Receipts taken out of the book so far.
    pub fn removed(&self) -> usize {
        self.removed
    }

    /// The table to make off the lock and [`Clearing::give_table`] back, once the clear asked
    /// for one (its receipts are gone and it is about to move the few that stay); handed out
    /// once.
    pub fn wanted_table(&mut self) -> Option<SpareTable> {
        match std::mem::replace(&mut self.spare, Spare::Asked) {
            Spare::Wanted(t) => Some(t),
            other => {
                self.spare = other;
                None
            }
        }
    }

    /// Whether the clear asked for a table not yet handed out: the caller lets the lock go
    /// and makes it ([`Clearing::wanted_table`]) before the next step, which would otherwise
    /// make it in place.
    pub fn wants_table(&self) -> bool {
        matches!(self.spare, Spare::Wanted(_))
    }

    /// The table made from [`Clearing::wanted_table`].
    pub fn give_table(&mut self, table: ReceiptTable) {
        self.spare = Spare::Given(table);
    }
}

/// Receipts cut off the end of the table in one step of a clear.
pub(super) const CUT_PER_STEP: usize = 16;

/// Receipts a book that a clear left with at most this many is rebuilt with, giving the
/// emptied table back (freeing it is the caller's, after letting go of the lock).
pub(super) const REBUILD_BELOW: usize = 4096;

impl Book {
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
                    ids.push((k.clone(), r.digest()));
                }
            }
        }
        let run = Arc::new(TombstoneRun::new(ids, self.next_batch()));
        let mut clearing = self.begin_clear(first, run, ClearBatch { at, reason })?;
        let mut freed = Freed::default();
        while !self.clear_steps(&mut clearing, usize::MAX, &mut freed) {
            if let Some(spare) = clearing.wanted_table() {
                clearing.give_table(spare.make());
            }
        }
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
        Ok(Clearing {
            run,
            removed: 0,
            spare: Spare::None,
        })
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

    pub(super) fn walk(
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
                for (k, r) in self.receipts.cut_from(start) {
                    debug_assert!(!r.is_running(), "a clear takes only completed receipts");
                    let cost = receipt_bytes(&k, r.request_len(), r.reply_len());
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
                    let wanted = SpareTable {
                        receipts: reachable_receipts(self.capacity, self.max_bytes).max(len),
                        moving: len,
                        hasher: self.receipts.hasher().clone(),
                    };
                    // The table is made off the lock: asked for first (the caller makes it and
                    // comes back), made here only if the caller did not (a test's loop).
                    let table = match std::mem::replace(&mut c.spare, Spare::None) {
                        Spare::Given(t) => t,
                        Spare::None => {
                            c.spare = Spare::Wanted(wanted);
                            return false;
                        }
                        Spare::Wanted(_) | Spare::Asked => wanted.make(),
                    };
                    let mut old = std::mem::replace(&mut self.receipts, table);
                    for (k, r) in old.cut_from(0) {
                        self.receipts.insert(k, r);
                    }
                    freed.table = Some(old);
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
}
