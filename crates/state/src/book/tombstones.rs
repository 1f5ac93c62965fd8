//! Tombstones: what stays of the receipts an operator cleared — compact sorted runs of
//! fingerprint digests, merged as they accumulate.

use super::FingerprintDigest;
use std::sync::Arc;

pub use crate::ids::RequestKey;

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

/// A tombstone of a UUID request ID in its fixed-size form: 36 bytes, no pointers.
#[derive(Clone, Copy)]
pub(super) struct UuidTombstone {
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

    pub(super) fn get(&self, key: &RequestKey) -> Option<Tombstone> {
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
pub(super) struct Tombstones {
    pub(super) runs: Vec<Arc<TombstoneRun>>,
    pub(super) len: usize,
}

impl Tombstones {
    pub(super) fn get(&self, key: &RequestKey) -> Option<Tombstone> {
        self.runs.iter().rev().find_map(|r| r.get(key))
    }

    pub(super) fn contains(&self, key: &RequestKey) -> bool {
        self.get(key).is_some()
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push(&mut self, run: Arc<TombstoneRun>) {
        if run.is_empty() {
            return;
        }
        self.len += run.len();
        self.runs.push(run);
    }

    /// The two newest runs, when they should be merged: the newer is at least half the size
    /// of the older (so each tombstone is copied about log2(n) times in all), or there are
    /// more than [`MAX_TOMBSTONE_RUNS`].
    pub(super) fn to_merge(&self) -> Option<[Arc<TombstoneRun>; 2]> {
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
    pub(super) fn replace(
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
    pub(super) fn merge_all(&mut self) {
        while self.runs.len() > 1 {
            let newer = self.runs.pop().expect("two runs");
            let older = self.runs.pop().expect("two runs");
            self.runs
                .push(Arc::new(TombstoneRun::merged(&older, &newer)));
        }
    }
}

/// Tombstone runs kept before the two newest are merged whatever their sizes.
pub(super) const MAX_TOMBSTONE_RUNS: usize = 24;
