//! The receipt table: request key → receipt, in creation order, built for the one thing the
//! host does with it under its lock for every request — look a key up in a table far larger
//! than the processor's caches.
//!
//! Receipts live in one `Vec` in creation order (listings page through it, a clear walks it).
//! The index is open addressing with linear probing over 64-bit slots, each holding the entry's
//! position (32 bits) and the high 32 bits of its key's hash. The slot a key starts probing at
//! is the top bits of that same hash, so the index can be grown, and a slot removed, from the
//! slots alone; and a probe compares 32 hash bits before it reads an entry, so it almost never
//! reads an entry that is not the one it looks for. A lookup is split into steps that touch one
//! piece of memory each ([`ReceiptTable::hash`], [`ReceiptTable::prefetch_slot`],
//! [`ReceiptTable::find_hashed`], [`ReceiptTable::prefetch_entry`]) so a batch of requests can
//! ask memory for all its pieces at once instead of waiting for each in turn. The index is
//! faulted in whole once it exists, and the entries' reserved room a stretch ahead of them
//! ([`ReceiptTable::fault_ahead`]), by the caller once it has let the host's lock go, so no
//! request waits behind a page fault in either.

use std::hash::BuildHasher;

use super::Receipt;
use crate::ids::RequestKey;

/// The hasher the table is seeded with: foldhash, seeded per process (SipHash, the default,
/// cost several times as much per lookup, and this table is searched under the host's lock).
pub type TableHasher = foldhash::fast::RandomState;

/// An empty slot (a taken slot's position field is the position plus one, never zero).
const EMPTY: u64 = 0;

/// The fewest slots an index has.
const MIN_SLOTS: usize = 8;

/// The most entries a table may hold: positions are 32 bits, and the index keeps at least one
/// slot in four free.
pub const MAX_ENTRIES: usize = (u32::MAX as usize) / 2;

/// The table could not get the memory it asked for.
#[derive(Debug)]
pub struct TableFull;

/// Request key → receipt, in creation order (see the module comment).
pub struct ReceiptTable {
    /// The index: `hash >> 32` in the high half, position + 1 in the low half; a power of two
    /// long.
    slots: Box<[u64]>,
    /// `log2(slots.len())`.
    bits: u32,
    /// Key and receipt, oldest first.
    entries: Vec<(RequestKey, Receipt)>,
    hasher: TableHasher,
    /// How far into `entries`' reserved room pages have been handed out to be faulted in
    /// ([`ReceiptTable::fault_ahead`]), in bytes from the start of the buffer at `faulted_base`.
    faulted: usize,
    /// Where `entries`' buffer was when `faulted` was counted (a buffer that moved starts over).
    faulted_base: usize,
    /// The index last handed out whole to be faulted in, or passed over as larger than
    /// `whole_index_limit` (its address; a new index differs).
    index_faulted: usize,
    /// The largest index handed out whole ([`whole_index_limit`]).
    whole_index_limit: usize,
}

/// The bytes of reserved room [`ReceiptTable::fault_ahead`] hands out at a time; a new
/// stretch is handed out once less than half of one is left ahead of the receipts. An index
/// at least this large is handed out whole.
const AHEAD_BYTES: usize = 64 << 10;

/// The largest receipt index faulted in whole ([`ReceiptTable::fault_ahead`]): a quarter of
/// the memory the machine had available (`MemAvailable` in `/proc/meminfo`) when the first
/// table was made, or 1 GiB where that cannot be read. The index is sized by the receipts the
/// host's bounds let it hold, and a bound far beyond what it will hold (`--capacity
/// 1000000000` with `--max-book-bytes` to match is a 16 GiB index) would otherwise take that
/// memory, and the seconds it takes to fault in, before the host answers — or get the host
/// killed for it. Such an index is faulted in by its receipts as they come instead.
fn whole_index_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
                let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(kib.saturating_mul(1024) / 4)
            })
            .unwrap_or(1 << 30)
    })
}

/// A stretch of the receipt table's memory that receipts will be written to next — the whole
/// index once it exists, or the reserved room ahead of the entries — to be faulted in by
/// whoever took it once the host's lock is let go ([`FaultAhead::fault_in`]): the first touch
/// of a fresh page costs a page fault (1.3 µs here, ~10 µs for memory this virtual machine has
/// not backed yet), and one taken inside the critical section holds up every request behind
/// it. The index is read before it is written (a lookup before the insert), so an untouched
/// page of it costs two faults, and the second — replacing the shared zero page the read
/// mapped — also flushes the other processors' TLBs and waits for them.
#[must_use]
pub struct FaultAhead {
    from: usize,
    len: usize,
}

impl FaultAhead {
    /// Faults the stretch's pages in (`MADV_POPULATE_WRITE`: as if each were written, without
    /// writing). Nothing happens where the kernel does not know the advice (before Linux 5.14):
    /// the receipts then fault their pages in as they are written, as they always could.
    pub fn fault_in(self) {
        #[cfg(target_os = "linux")]
        {
            use std::sync::atomic::{AtomicBool, Ordering};
            static UNKNOWN: AtomicBool = AtomicBool::new(false);
            if UNKNOWN.load(Ordering::Relaxed) {
                return;
            }
            let page = 4096;
            let start = self.from & !(page - 1);
            let len = self.from + self.len - start;
            // SAFETY: the advice changes no byte the program can read — a page not yet backed
            // is backed with zeros, which is what reading it would give, and a backed page is
            // left as it is — and it fails (EFAULT, ENOMEM), never faults, on any range not
            // mapped writable. So it is sound on any range, even one whose buffer has since
            // been freed (a table replaced after the stretch was handed out): the host maps no
            // file shared and writable, so at worst a private page is copied unchanged.
            let advised = unsafe {
                rustix::mm::madvise(
                    start as *mut std::ffi::c_void,
                    len,
                    rustix::mm::Advice::LinuxPopulateWrite,
                )
            };
            if advised == Err(rustix::io::Errno::INVAL) {
                UNKNOWN.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Where a lookup that did not find its key stopped: the first free slot of its probe, where the
/// key goes unless the table grows first.
#[derive(Clone, Copy)]
pub struct Miss {
    hash: u64,
    slot: usize,
}

/// The entries an index of `slots` slots takes before it grows (three in four).
fn load_limit(slots: usize) -> usize {
    slots / 4 * 3
}

/// The slots an index needs to hold `entries` entries.
fn slots_for(entries: usize) -> usize {
    (entries.saturating_mul(4) / 3 + 1)
        .max(MIN_SLOTS)
        .next_power_of_two()
}

/// A zeroed index of `n` slots (a power of two), or `None` when the allocator refuses. Zeroed
/// memory from the allocator is fresh pages the kernel maps on first touch; a large index is
/// faulted in whole once it exists ([`ReceiptTable::fault_ahead`]; up to
/// [`whole_index_limit`]), so its memory is taken up front: 8 bytes a slot, 11–21 bytes for
/// each receipt the table has room for.
fn zeroed_slots(n: usize) -> Option<Box<[u64]>> {
    let layout = std::alloc::Layout::array::<u64>(n).ok()?;
    debug_assert!(layout.size() > 0);
    // SAFETY: the layout has a non-zero size (n ≥ MIN_SLOTS); a non-null result is a zeroed
    // allocation of exactly `n` u64s from the global allocator with `[u64]`'s layout, which is
    // what `Box<[u64]>` frees it with; all-zero bits are valid u64s.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut u64;
        if ptr.is_null() {
            return None;
        }
        Some(Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)))
    }
}

/// Asks the processor to bring the cache line at `p` in, without waiting for it.
#[inline(always)]
pub(super) fn prefetch<T: ?Sized>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl ReceiptTable {
    /// An empty table with a small index.
    pub fn with_hasher(hasher: TableHasher) -> ReceiptTable {
        ReceiptTable {
            slots: zeroed_slots(MIN_SLOTS).expect("a 64-byte allocation"),
            bits: MIN_SLOTS.trailing_zeros(),
            entries: Vec::new(),
            hasher,
            faulted: 0,
            faulted_base: 0,
            index_faulted: 0,
            whole_index_limit: whole_index_limit(),
        }
    }

    /// The next stretch of memory the receipts will be written to: the whole index, the
    /// first time it is asked after the index was made (when it is at least [`AHEAD_BYTES`]
    /// and at most [`whole_index_limit`]; a larger one is faulted in by the receipts as they
    /// come, see [`ReceiptTable::index_left_to_receipts`]);
    /// otherwise the next stretch of reserved room, when less than half of [`AHEAD_BYTES`] is
    /// left faulted in ahead of the receipts (each handed out once: the next call hands out
    /// the stretch after it). The caller faults it in once it has let the host's lock go.
    pub fn fault_ahead(&mut self) -> Option<FaultAhead> {
        let index = self.slots.as_ptr() as usize;
        let index_bytes = std::mem::size_of_val(&*self.slots);
        if index != self.index_faulted && index_bytes >= AHEAD_BYTES {
            self.index_faulted = index;
            if index_bytes <= self.whole_index_limit {
                return Some(FaultAhead {
                    from: index,
                    len: index_bytes,
                });
            }
        }
        let size = std::mem::size_of::<(RequestKey, Receipt)>();
        let base = self.entries.as_ptr() as usize;
        let used = self.entries.len() * size;
        if base != self.faulted_base || self.faulted < used {
            (self.faulted_base, self.faulted) = (base, used);
        }
        let room = self.entries.capacity() * size;
        if self.faulted >= room || self.faulted - used >= AHEAD_BYTES / 2 {
            return None;
        }
        let from = self.faulted;
        self.faulted = (from + AHEAD_BYTES).min(room);
        Some(FaultAhead {
            from: base + from,
            len: self.faulted - from,
        })
    }

    /// Faults in, now, the whole index (up to [`whole_index_limit`]) and the room for the first
    /// `entries` receipts: for a table made off the host's lock that takes receipts inside it.
    pub fn fault_in_now(&mut self, entries: usize) {
        if let Some(index) = self.fault_ahead() {
            index.fault_in();
        }
        let size = std::mem::size_of::<(RequestKey, Receipt)>();
        let room = self.entries.capacity() * size;
        let want = (entries * size).min(room);
        let base = self.entries.as_ptr() as usize;
        if want > 0 && want > self.faulted {
            FaultAhead {
                from: base + self.faulted,
                len: want - self.faulted,
            }
            .fault_in();
            (self.faulted_base, self.faulted) = (base, want);
        }
    }

    /// The index's size and [`whole_index_limit`] when the index is too large to be faulted in
    /// whole: its pages are then faulted in by the receipts as they come, each first touch
    /// under the host's lock, so a host says so when it starts.
    pub fn index_left_to_receipts(&self) -> Option<(usize, usize)> {
        let index_bytes = std::mem::size_of_val(&*self.slots);
        (index_bytes >= AHEAD_BYTES && index_bytes > self.whole_index_limit)
            .then_some((index_bytes, self.whole_index_limit))
    }

    /// Sets the largest index handed out whole, for a test that cannot make an index the
    /// size of a quarter of the machine's memory.
    #[cfg(test)]
    pub(crate) fn set_whole_index_limit(&mut self, bytes: usize) {
        self.whole_index_limit = bytes;
    }

    /// The hasher, for a table that replaces this one.
    pub fn hasher(&self) -> &TableHasher {
        &self.hasher
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries the table holds without growing.
    pub fn capacity(&self) -> usize {
        self.entries.capacity().min(load_limit(self.slots.len()))
    }

    /// Makes room for `total` entries in all (not more), or says it could not.
    pub fn try_reserve_total(&mut self, total: usize) -> Result<(), TableFull> {
        if total > MAX_ENTRIES {
            return Err(TableFull);
        }
        if total > load_limit(self.slots.len()) {
            self.rebuild_index(slots_for(total))?;
        }
        let more = total.saturating_sub(self.entries.len());
        self.entries.try_reserve_exact(more).map_err(|_| TableFull)
    }

    /// Makes room for `additional` more entries.
    pub fn reserve(&mut self, additional: usize) {
        let total = self.entries.len().saturating_add(additional);
        // A table that cannot get the room grows entry by entry instead.
        let _ = self.try_reserve_total(total);
    }

    /// The hash a key is looked up by.
    #[inline]
    pub fn hash(&self, key: &RequestKey) -> u64 {
        self.hasher.hash_one(key)
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot a key of this hash starts probing at.
    #[inline]
    fn home(&self, hash: u64) -> usize {
        Self::home_of((hash >> 32) as u32, self.bits)
    }

    #[inline]
    fn home_of(tag: u32, bits: u32) -> usize {
        (u64::from(tag) >> (32 - bits)) as usize
    }

    /// Asks for the index's cache line a lookup of `hash` reads first.
    #[inline]
    pub fn prefetch_slot(&self, hash: u64) {
        prefetch(&self.slots[self.home(hash)]);
    }

    /// Asks for the cache lines of the entry at `pos` (its key and the receipt's fields).
    #[inline]
    pub fn prefetch_entry(&self, pos: usize) {
        if let Some(e) = self.entries.get(pos) {
            let p = e as *const (RequestKey, Receipt) as *const u8;
            prefetch(p);
            prefetch(p.wrapping_add(64));
            prefetch(p.wrapping_add(std::mem::size_of::<(RequestKey, Receipt)>() - 1));
        }
    }

    /// Looks a key of `hash` up: its position, or where it would go.
    #[inline]
    pub fn find_hashed(&self, hash: u64, key: &RequestKey) -> Result<usize, Miss> {
        self.probe(hash, |pos| self.entries[pos].0 == *key)
            .map_err(|slot| Miss { hash, slot })
    }

    /// The position of the first entry whose hash shares `hash`'s high 32 bits, found from the
    /// index alone (almost always the entry of the key hashed): [`ReceiptTable::prefetch_entry`]
    /// can ask for it before the key is compared.
    #[inline]
    pub fn candidate(&self, hash: u64) -> Option<usize> {
        self.probe(hash, |_| true).ok()
    }

    /// Walks `hash`'s probe sequence: the first position whose slot carries `hash`'s high 32
    /// bits and that `is_it` accepts, or the first free slot.
    #[inline]
    fn probe(&self, hash: u64, mut is_it: impl FnMut(usize) -> bool) -> Result<usize, usize> {
        let tag = hash >> 32;
        let mask = self.mask();
        let mut i = self.home(hash);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return Err(i);
            }
            if s >> 32 == tag {
                let pos = (s as u32 - 1) as usize;
                if is_it(pos) {
                    return Ok(pos);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The slot holding position `pos`, whose key hashes to `hash`.
    fn slot_of(&self, hash: u64, pos: usize) -> usize {
        let want = (hash >> 32) << 32 | (pos as u64 + 1);
        let mask = self.mask();
        let mut i = self.home(hash);
        while self.slots[i] != want {
            debug_assert!(self.slots[i] != EMPTY, "every entry has its slot");
            i = (i + 1) & mask;
        }
        i
    }

    /// The position of `key`.
    pub fn get_index_of(&self, key: &RequestKey) -> Option<usize> {
        self.find_hashed(self.hash(key), key).ok()
    }

    /// Whether `key` is held.
    pub fn contains_key(&self, key: &RequestKey) -> bool {
        self.get_index_of(key).is_some()
    }

    /// The receipt of `key`.
    pub fn get(&self, key: &RequestKey) -> Option<&Receipt> {
        self.get_index_of(key).map(|i| &self.entries[i].1)
    }

    /// The receipt of `key`, to change.
    pub fn get_mut(&mut self, key: &RequestKey) -> Option<&mut Receipt> {
        self.get_index_of(key).map(|i| &mut self.entries[i].1)
    }

    /// The position, key and receipt of `key`.
    pub fn get_full(&self, key: &RequestKey) -> Option<(usize, &RequestKey, &Receipt)> {
        self.get_index_of(key).map(|i| {
            let (k, r) = &self.entries[i];
            (i, k, r)
        })
    }

    /// The entry at a position.
    pub fn get_index(&self, i: usize) -> Option<(&RequestKey, &Receipt)> {
        self.entries.get(i).map(|(k, r)| (k, r))
    }

    /// The entry at a position, its receipt to change.
    pub fn get_index_mut(&mut self, i: usize) -> Option<(&RequestKey, &mut Receipt)> {
        self.entries.get_mut(i).map(|(k, r)| (&*k, r))
    }

    /// Entries oldest first.
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&RequestKey, &Receipt)> + ExactSizeIterator {
        self.entries.iter().map(|(k, r)| (k, r))
    }

    /// Appends an entry for a key a lookup just missed (with nothing changed since), returning
    /// its position.
    pub fn insert_missed(&mut self, miss: Miss, key: RequestKey, receipt: Receipt) -> usize {
        let pos = self.entries.len();
        let slot = if pos < load_limit(self.slots.len()) {
            miss.slot
        } else {
            self.grow();
            self.free_slot(miss.hash)
        };
        self.slots[slot] = (miss.hash >> 32) << 32 | (pos as u64 + 1);
        self.entries.push((key, receipt));
        pos
    }

    /// Sets `key`'s receipt, appending it when new; returns the receipt it replaced.
    pub fn insert(&mut self, key: RequestKey, receipt: Receipt) -> Option<Receipt> {
        match self.find_hashed(self.hash(&key), &key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, receipt)),
            Err(miss) => {
                self.insert_missed(miss, key, receipt);
                None
            }
        }
    }

    /// The first free slot of a probe for `hash`.
    fn free_slot(&self, hash: u64) -> usize {
        let mask = self.mask();
        let mut i = self.home(hash);
        while self.slots[i] != EMPTY {
            i = (i + 1) & mask;
        }
        i
    }

    /// Doubles the index (or more, for a table grown past its reservation).
    fn grow(&mut self) {
        let want = slots_for(self.entries.len() + 1).max(self.slots.len() * 2);
        self.rebuild_index(want)
            .expect("the memory for the receipt index");
    }

    /// Moves the index to one of `n` slots, from the old slots alone (each knows its home).
    fn rebuild_index(&mut self, n: usize) -> Result<(), TableFull> {
        if n <= self.slots.len() {
            return Ok(());
        }
        if n > 1usize << 32 {
            return Err(TableFull);
        }
        let mut slots = zeroed_slots(n).ok_or(TableFull)?;
        let bits = n.trailing_zeros();
        let mask = n - 1;
        for &s in self.slots.iter().filter(|&&s| s != EMPTY) {
            let mut i = Self::home_of((s >> 32) as u32, bits);
            while slots[i] != EMPTY {
                i = (i + 1) & mask;
            }
            slots[i] = s;
        }
        self.slots = slots;
        self.bits = bits;
        Ok(())
    }

    /// Frees slot `i`, moving later slots of the same probe run back so every probe still
    /// reaches its entry before an empty slot.
    fn free(&mut self, i: usize) {
        let mask = self.mask();
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let s = self.slots[j];
            if s == EMPTY {
                break;
            }
            let home = Self::home_of((s >> 32) as u32, self.bits);
            // `s` may fill the hole unless its probe starts after the hole.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = s;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = EMPTY;
    }

    /// Repoints the slot of the entry at `from` (whose key hashes to `hash`) to position `to`.
    fn repoint(&mut self, hash: u64, from: usize, to: usize) {
        let i = self.slot_of(hash, from);
        self.slots[i] = (hash >> 32) << 32 | (to as u64 + 1);
    }

    /// Swaps the entries at two positions.
    pub fn swap_indices(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        let ha = self.hash(&self.entries[a].0);
        let hb = self.hash(&self.entries[b].0);
        let sa = self.slot_of(ha, a);
        let sb = self.slot_of(hb, b);
        self.slots[sa] = (ha >> 32) << 32 | (b as u64 + 1);
        self.slots[sb] = (hb >> 32) << 32 | (a as u64 + 1);
        self.entries.swap(a, b);
    }

    /// Takes the entries from position `start` to the end out, newest last.
    pub fn cut_from(&mut self, start: usize) -> std::vec::Drain<'_, (RequestKey, Receipt)> {
        let start = start.min(self.entries.len());
        for pos in start..self.entries.len() {
            let h = self.hash(&self.entries[pos].0);
            let i = self.slot_of(h, pos);
            self.free(i);
        }
        self.entries.drain(start..)
    }

    /// Removes the entry at `pos`, moving the ones after it down by one (their order is kept).
    pub fn shift_remove_index(&mut self, pos: usize) -> Option<(RequestKey, Receipt)> {
        if pos >= self.entries.len() {
            return None;
        }
        let h = self.hash(&self.entries[pos].0);
        let i = self.slot_of(h, pos);
        self.free(i);
        for later in pos + 1..self.entries.len() {
            let h = self.hash(&self.entries[later].0);
            self.repoint(h, later, later - 1);
        }
        Some(self.entries.remove(pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Method;
    use proptest::prelude::*;

    fn key(id: u16) -> RequestKey {
        if id.is_multiple_of(3) {
            RequestKey::new(&format!("text-{id}"))
        } else {
            RequestKey::Uuid(
                u128::from(id)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .to_le_bytes(),
            )
        }
    }

    fn receipt(tag: u16) -> Receipt {
        Receipt::running(
            format!("{tag}").into(),
            Method::PageFill,
            None,
            i64::from(tag),
        )
    }

    /// How many of the pages from `from` for `len` bytes are resident (`mincore`), and how
    /// many pages the range spans.
    fn resident_pages(from: usize, len: usize) -> (usize, usize) {
        let start = from & !4095;
        let pages = (from + len - start).div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: `vec` has one byte per page of the range; mincore only writes those bytes.
        let rc =
            unsafe { libc::mincore(start as *mut libc::c_void, pages * 4096, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        (vec.iter().filter(|&&b| b & 1 == 1).count(), pages)
    }

    /// Gives the whole pages inside `from..from + len` back to the kernel (`MADV_DONTNEED`),
    /// so they are not resident until touched again. Only for spare capacity that holds no
    /// value: the pages read back as zeros.
    fn release_whole_pages(from: usize, len: usize) {
        let start = from.next_multiple_of(4096);
        let end = (from + len) & !4095;
        if end <= start {
            return;
        }
        // SAFETY: the range is whole pages of the table's reserved, never written room (no
        // value lives there, and the allocator's headers sit outside whole pages of it).
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0, "madvise: {}", std::io::Error::last_os_error());
    }

    /// The reserved room is handed out a stretch at a time, each once, in order, only when
    /// the receipts near the end of what was handed out, never past the room; a stretch faulted
    /// in is resident before any receipt is written there; and a buffer grown past its
    /// reservation (moved, or grown in place) starts over from its receipts.
    #[test]
    fn reserved_room_is_faulted_in_ahead_of_the_receipts() {
        let size = std::mem::size_of::<(RequestKey, Receipt)>();
        let mut table = ReceiptTable::with_hasher(TableHasher::default());
        assert!(
            table.fault_ahead().is_none(),
            "no room reserved, nothing to fault in"
        );
        let room = (4 * AHEAD_BYTES).div_ceil(size);
        table.try_reserve_total(room).unwrap();
        let base = table.entries.as_ptr() as usize;
        let first = table.fault_ahead().expect("the first stretch");
        assert_eq!((first.from, first.len), (base, AHEAD_BYTES));
        // The allocator may hand out memory that was touched before (a chunk another test in
        // this process freed): give the stretch's whole pages back first, so that what
        // `fault_in` does is seen. Only the pages at its two ends may stay, shared with the
        // allocator's own headers.
        release_whole_pages(first.from, first.len);
        assert!(
            resident_pages(first.from, first.len).0 <= 2,
            "reserved room given back"
        );
        let (from, len) = (first.from, first.len);
        first.fault_in();
        let (resident, pages) = resident_pages(from, len);
        assert_eq!(resident, pages, "faulted in");
        // Nothing more until the receipts are within half a stretch of its end.
        assert!(table.fault_ahead().is_none());
        let mut id = 0u16;
        while (table.len() + 1) * size < AHEAD_BYTES / 2 {
            table.insert(key(id), receipt(id));
            id += 1;
        }
        assert!(table.fault_ahead().is_none());
        while table.len() * size <= AHEAD_BYTES / 2 {
            table.insert(key(id), receipt(id));
            id += 1;
        }
        let second = table.fault_ahead().expect("the next stretch");
        assert_eq!((second.from, second.len), (base + AHEAD_BYTES, AHEAD_BYTES));
        // Handed out up to the room's end, never past it.
        let mut end = second.from + second.len;
        while table.len() < room {
            table.insert(key(id), receipt(id));
            id += 1;
            if let Some(next) = table.fault_ahead() {
                assert_eq!(next.from, end);
                end = next.from + next.len;
            }
        }
        assert_eq!(end, base + room * size);
        assert!(table.fault_ahead().is_none());
        // Past the reservation the buffer grows: moved (or, when the allocator finds room
        // right after it, grown in place), and either way what its receipts fill is touched
        // already, so the next stretch starts right after them.
        table.insert(key(id), receipt(id));
        let grown = table.entries.as_ptr() as usize;
        let next = table.fault_ahead().expect("room after the grown receipts");
        assert_eq!(next.from, grown + table.len() * size);
        assert!(next.len > 0 && next.from + next.len <= grown + table.entries.capacity() * size);
    }

    /// An index of at least a stretch is handed out whole, once, before any room for the
    /// entries, and faulting it in makes all of it resident; a smaller index is never handed
    /// out; an index replaced by a bigger one is handed out again.
    #[test]
    fn the_index_is_faulted_in_whole_once_it_exists() {
        // An index of 64 MiB: above any size the system allocator serves from its heap
        // (whose calloc writes the zeros), so it arrives as fresh pages.
        let mut table = ReceiptTable::with_hasher(TableHasher::default());
        table.try_reserve_total(4_000_000).unwrap();
        let index = table.slots.as_ptr() as usize;
        let bytes = std::mem::size_of_val(&*table.slots);
        assert!(bytes >= AHEAD_BYTES, "an index of {bytes} bytes");
        let whole = table.fault_ahead().expect("the index");
        assert_eq!((whole.from, whole.len), (index, bytes));
        let (resident, pages) = resident_pages(index, bytes);
        assert!(
            resident <= 2,
            "a fresh index: {resident} of {pages} pages resident"
        );
        whole.fault_in();
        let (resident, pages) = resident_pages(index, bytes);
        assert_eq!(resident, pages, "faulted in");
        let base = table.entries.as_ptr() as usize;
        let room = table.fault_ahead().expect("then the entries' room");
        assert_eq!((room.from, room.len), (base, AHEAD_BYTES));
        assert!(table.fault_ahead().is_none(), "the index only once");
        assert!(table.index_left_to_receipts().is_none());

        // An index larger than the limit is not handed out (nor faulted in): the entries' room
        // is, and the host is told the index is left to the receipts.
        let mut table = ReceiptTable::with_hasher(TableHasher::default());
        table.set_whole_index_limit(bytes - 1);
        table.try_reserve_total(4_000_000).unwrap();
        let index = table.slots.as_ptr() as usize;
        assert_eq!(table.index_left_to_receipts(), Some((bytes, bytes - 1)));
        let room = table.fault_ahead().expect("the entries' room");
        assert_eq!(room.from, table.entries.as_ptr() as usize);
        assert!(table.fault_ahead().is_none(), "and the index never");
        let (resident, pages) = resident_pages(index, bytes);
        assert!(resident <= 2, "{resident} of {pages} pages resident");

        // A table without a reservation: its index grows from a few slots; a small one is
        // never handed out, the first that reaches a stretch is, and the one after it too.
        let mut table = ReceiptTable::with_hasher(TableHasher::default());
        let mut handed = Vec::new();
        for id in 0..20_000u16 {
            table.insert(key(id), receipt(id));
            if let Some(stretch) = table.fault_ahead() {
                if stretch.from == table.slots.as_ptr() as usize {
                    assert_eq!(stretch.len, std::mem::size_of_val(&*table.slots));
                    handed.push(stretch.len);
                }
            }
        }
        let final_bytes = std::mem::size_of_val(&*table.slots);
        assert!(!handed.is_empty() && handed.iter().all(|&b| b >= AHEAD_BYTES));
        assert_eq!(handed.last(), Some(&final_bytes), "the index as it is now");
        assert!(
            handed.windows(2).all(|w| w[0] < w[1]),
            "each index once: {handed:?}"
        );
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16),
        Lookup(u16),
        Swap(u16, u16),
        Cut(u16),
        ShiftRemove(u16),
        Reserve(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u16..400).prop_map(Op::Insert),
            4 => (0u16..400).prop_map(Op::Lookup),
            2 => (0u16..400, 0u16..400).prop_map(|(a, b)| Op::Swap(a, b)),
            1 => (0u16..400).prop_map(Op::Cut),
            1 => (0u16..400).prop_map(Op::ShiftRemove),
            1 => (0u16..600).prop_map(Op::Reserve),
        ]
    }

    /// Every key the model holds is found at its position (through every lookup path), and
    /// no other key is found.
    fn agrees(table: &ReceiptTable, model: &[(u16, u16)]) -> Result<(), TestCaseError> {
        prop_assert_eq!(table.len(), model.len());
        for (pos, &(id, tag)) in model.iter().enumerate() {
            let k = key(id);
            prop_assert_eq!(table.get_index_of(&k), Some(pos));
            let h = table.hash(&k);
            prop_assert_eq!(table.find_hashed(h, &k).ok(), Some(pos));
            let (got, r) = table.get_index(pos).expect("in range");
            prop_assert_eq!(got, &k);
            prop_assert_eq!(r.first_seen, i64::from(tag));
        }
        let held: std::collections::HashSet<u16> = model.iter().map(|&(id, _)| id).collect();
        for id in 0..400u16 {
            if !held.contains(&id) {
                prop_assert!(!table.contains_key(&key(id)), "{} found but not held", id);
            }
        }
        Ok(())
    }

    proptest! {
        /// The table against an ordered list: inserts, lookups, swaps, cuts, removals and
        /// reservations in any order, growing from the smallest index past every reservation.
        #[test]
        fn the_table_agrees_with_an_ordered_model(ops in proptest::collection::vec(op(), 1..300)) {
            let mut table = ReceiptTable::with_hasher(TableHasher::default());
            let mut model: Vec<(u16, u16)> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let tag = n as u16;
                match op {
                    Op::Insert(id) => {
                        let old = table.insert(key(id), receipt(tag));
                        match model.iter_mut().find(|(m, _)| *m == id) {
                            Some(entry) => {
                                prop_assert_eq!(old.map(|r| r.first_seen), Some(i64::from(entry.1)));
                                entry.1 = tag;
                            }
                            None => {
                                prop_assert!(old.is_none());
                                model.push((id, tag));
                            }
                        }
                    }
                    Op::Lookup(id) => {
                        let want = model.iter().position(|(m, _)| *m == id);
                        prop_assert_eq!(table.get_index_of(&key(id)), want);
                        prop_assert_eq!(table.get(&key(id)).is_some(), want.is_some());
                    }
                    Op::Swap(a, b) if !model.is_empty() => {
                        let (a, b) = (a as usize % model.len(), b as usize % model.len());
                        table.swap_indices(a, b);
                        model.swap(a, b);
                    }
                    Op::Cut(n) => {
                        let start = model.len().saturating_sub(n as usize % 8);
                        let cut: Vec<_> = table.cut_from(start).map(|(k, _)| k).collect();
                        let want: Vec<_> = model.drain(start..).map(|(id, _)| key(id)).collect();
                        prop_assert_eq!(cut, want);
                    }
                    Op::ShiftRemove(i) if !model.is_empty() => {
                        let i = i as usize % model.len();
                        let (k, _) = table.shift_remove_index(i).expect("in range");
                        prop_assert_eq!(k, key(model.remove(i).0));
                    }
                    Op::Reserve(n) => {
                        table.reserve(n as usize);
                        prop_assert!(table.capacity() >= model.len() + n as usize);
                    }
                    Op::Swap(..) | Op::ShiftRemove(_) => {}
                }
                agrees(&table, &model)?;
            }
        }
    }

    #[test]
    fn a_reserved_table_takes_its_receipts_without_growing_and_grows_past_them() {
        let mut table = ReceiptTable::with_hasher(TableHasher::default());
        table.try_reserve_total(1000).expect("a small reservation");
        let slots = table.slots.len();
        for id in 0..1000 {
            assert!(table.insert(key(id), receipt(id)).is_none());
        }
        assert_eq!(table.slots.len(), slots, "no growth within the reservation");
        for id in 1000..5000 {
            assert!(table.insert(key(id), receipt(id)).is_none());
        }
        assert!(table.slots.len() > slots);
        for id in 0..5000 {
            assert_eq!(table.get_index_of(&key(id)), Some(id as usize));
        }
        assert!(table.try_reserve_total(MAX_ENTRIES + 1).is_err());
    }
}
