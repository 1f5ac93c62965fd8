//! Folding a journal's records into what the host rebuilds from: live receipts (completed or
//! begun and never completed), tombstones, acknowledgements, tasks and runs.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;

use crate::protocol::StoredRequest;

use super::format::HEADER_LEN;
use super::format::{cleared_ids, Decoded, DecodedBegun, IdRef, Kind, Reader};
use super::scan::{scan, CutTail, ScanEnd};
use super::writer::Accounting;
use super::Error;
use crate::book::{FingerprintDigest, RequestKey};

type Map<K, V> = IndexMap<K, V, foldhash::fast::RandomState>;
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The fewest journal bytes a receipt takes (a compacted one with a short request and reply):
/// a journal of `n` bytes is reserved room for at most `n / MIN_RECEIPT_BYTES` receipts.
const MIN_RECEIPT_BYTES: u64 = 256;

/// One host run the journal knows of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// The run's ID.
    pub run_id: Arc<str>,
    /// When it started (epoch ms).
    pub started_at: i64,
}

/// A receipt's stored reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The reply bytes exactly as appended.
    pub reply: Box<[u8]>,
    /// When the execution finished (epoch ms).
    pub completed_at: i64,
}

/// A live receipt as recovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredReceipt {
    /// The request ID.
    pub request_id: RequestKey,
    /// The run that created it.
    pub run_id: Arc<str>,
    /// The method's wire name (shared between receipts).
    pub method: Arc<str>,
    /// The task it acted on (shared between receipts of one task).
    pub task_id: Option<Arc<str>>,
    /// The canonical request (its fingerprint), kept as the book keeps it (its params beside
    /// `method`), so the book takes it as it is.
    pub request: StoredRequest,
    /// When it was first seen (epoch ms).
    pub first_seen: i64,
    /// The stored reply; `None` when the host stopped while it executed (the host stores
    /// `INTERRUPTED` for it and journals that completion).
    pub completion: Option<Completion>,
}

/// One operator clear, shared by its tombstones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClearInfo {
    /// When (epoch ms).
    pub at: i64,
    /// Why.
    pub reason: Arc<str>,
    /// Who.
    pub operator: Arc<str>,
}

/// What remains of a cleared receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredTombstone {
    /// The request ID.
    pub request_id: RequestKey,
    /// Digest of the canonical request it had.
    pub digest: FingerprintDigest,
    /// Index into [`Recovered::clears`].
    pub clear: u32,
}

/// The latest acknowledgement of a live receipt's uncertain outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acknowledgement {
    /// The receipt.
    pub request_id: RequestKey,
    /// Why.
    pub reason: Box<str>,
    /// Who.
    pub operator: Box<str>,
    /// When (epoch ms).
    pub at: i64,
}

/// A task's latest state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredTask {
    /// The task's ID.
    pub task_id: Arc<str>,
    /// Its run.
    pub run_id: Arc<str>,
    /// Title.
    pub title: Box<str>,
    /// State as last recorded (a task of an earlier run is `interrupted` to the host).
    pub state: Box<str>,
    /// Pending outcome(s) as the host wrote them; empty for none.
    pub pending: Box<[u8]>,
    /// The host's other details; may be empty.
    pub detail: Box<[u8]>,
    /// When it was created.
    pub created_at: i64,
    /// When its last record was made.
    pub updated_at: i64,
    /// When it was closed.
    pub closed_at: Option<i64>,
}

/// Everything the host needs to rebuild its book and tasks, in journal order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Every run recorded, oldest first (the current run is not among them until it appends).
    pub runs: Vec<Run>,
    /// Live receipts in creation order: completed ones, and ones begun but never completed.
    pub receipts: Vec<RecoveredReceipt>,
    /// Tombstones in the order they were cleared.
    pub tombstones: Vec<RecoveredTombstone>,
    /// The clears the tombstones name.
    pub clears: Vec<ClearInfo>,
    /// Acknowledgements of live receipts (the latest per receipt).
    pub acknowledgements: Vec<Acknowledgement>,
    /// Tasks in creation order, each in its latest state.
    pub tasks: Vec<RecoveredTask>,
    /// The torn tail cut at open, if any (already logged).
    pub cut_tail: Option<CutTail>,
}

impl Recovered {
    /// Receipts begun but never completed: the host turns each into an `INTERRUPTED` reply.
    pub fn interrupted(&self) -> impl Iterator<Item = &RecoveredReceipt> {
        self.receipts.iter().filter(|r| r.completion.is_none())
    }

    /// Receipts with a stored reply.
    pub fn completed(&self) -> impl Iterator<Item = &RecoveredReceipt> {
        self.receipts.iter().filter(|r| r.completion.is_some())
    }
}

/// The fold over a journal's records.
pub(crate) struct Fold {
    path: PathBuf,
    runs: Vec<Run>,
    run_ids: FastMap<Arc<str>, u32>,
    /// Receipts in creation order (the ones cleared since are dropped at the end): what
    /// [`Recovered::receipts`] becomes without a copy.
    receipts: Vec<RecoveredReceipt>,
    /// Request ID → index in `receipts`, for the receipts begun and not completed: the only
    /// ones a completion can name. A few thousand at most (what was in flight), so the lookups
    /// stay in cache; a table of every receipt would cost a cache miss per record.
    open: FastMap<RequestKey, u32>,
    /// Every UUID request ID begun, checked for repeats once at the end (sorting is cheaper
    /// than a table of a million keys).
    uuids: Vec<u128>,
    /// Every other request ID begun (rare), checked for repeats as it comes.
    texts: std::collections::HashSet<Box<str>, foldhash::fast::RandomState>,
    /// Every request ID begun, when a repeat must be found where it is (see [`read`]).
    seen: Option<std::collections::HashSet<RequestKey, foldhash::fast::RandomState>>,
    /// Receipts known to be cleared further on (see [`read_live`]): their records are counted
    /// and skipped, never built only to be dropped at their clear.
    skip: FastSet<RequestKey>,
    tombstones: Map<RequestKey, (FingerprintDigest, u32)>,
    clears: Vec<ClearInfo>,
    acks: Map<RequestKey, Acknowledgement>,
    tasks: Map<RequestKey, RecoveredTask>,
    methods: FastMap<Box<str>, Arc<str>>,
    task_ids: FastMap<RequestKey, Arc<str>>,
    /// Records folded.
    pub records: u64,
    /// Exact receipt accounting of the folded records.
    pub acct: Accounting,
}

impl Fold {
    /// A fold for a journal of `bytes`: its receipt table is reserved for about as many
    /// receipts as that many bytes can hold, so reading a big journal never stops to copy
    /// the table into a bigger one (address space mostly: untouched pages cost nothing).
    pub fn for_bytes(path: &Path, bytes: u64) -> Fold {
        let receipts = usize::try_from(bytes / MIN_RECEIPT_BYTES).unwrap_or(usize::MAX);
        Fold {
            path: path.to_owned(),
            runs: Vec::new(),
            run_ids: FastMap::default(),
            receipts: Vec::with_capacity(receipts),
            open: FastMap::default(),
            uuids: Vec::with_capacity(receipts),
            texts: Default::default(),
            seen: None,
            skip: FastSet::default(),
            tombstones: Map::default(),
            clears: Vec::new(),
            acks: Map::default(),
            tasks: Map::default(),
            methods: FastMap::default(),
            task_ids: FastMap::default(),
            records: 0,
            acct: Accounting::default(),
        }
    }

    /// Run ID → index, as the writer needs it to go on appending.
    pub fn run_indexes(&self) -> HashMap<Box<str>, u32> {
        self.runs
            .iter()
            .enumerate()
            .map(|(i, r)| ((*r.run_id).into(), i as u32))
            .collect()
    }

    /// Folds the records of one block written at `offset`.
    pub fn block(&mut self, offset: u64, payload: &[u8]) -> Result<(), Error> {
        let mut r = Reader::new(payload);
        while !r.is_empty() {
            let at = offset + super::format::BLOCK_HEADER_LEN as u64 + r.pos() as u64;
            let (kind, len, d) = r.record().map_err(|e| Error::Corrupt {
                path: self.path.clone(),
                offset: at,
                what: format!(
                    "a record at byte offset {at} cannot be read ({}) although its block's checksum is right",
                    e.0
                ),
            })?;
            self.apply(at, kind, len, d)?;
        }
        Ok(())
    }

    fn inconsistent(&self, offset: u64, what: String) -> Error {
        Error::Inconsistent {
            path: self.path.clone(),
            offset,
            what,
        }
    }

    fn run(&self, offset: u64, index: u32) -> Result<Arc<str>, Error> {
        self.runs
            .get(index as usize)
            .map(|r| r.run_id.clone())
            .ok_or_else(|| self.inconsistent(offset, format!("run #{index} was never started")))
    }

    fn task_id(&mut self, id: &IdRef<'_>) -> Arc<str> {
        let key = id.key();
        self.task_ids
            .entry(key)
            .or_insert_with(|| id.to_string().into())
            .clone()
    }

    /// A receipt's creation; returns its index in `receipts`.
    fn begin(&mut self, offset: u64, b: DecodedBegun<'_>) -> Result<u32, Error> {
        let key = b.request_id.key();
        if !self.tombstones.is_empty() && self.tombstones.contains_key(&key) {
            return Err(self.inconsistent(
                offset,
                format!("receipt {key} begins again after it was cleared"),
            ));
        }
        let run_id = self.run(offset, b.run)?;
        let repeated = match &b.request_id {
            _ if self.seen.is_some() => !self.seen.as_mut().is_some_and(|s| s.insert(key.clone())),
            IdRef::Uuid(bytes) => {
                self.uuids.push(u128::from_be_bytes(*bytes));
                self.open.contains_key(&key)
            }
            IdRef::Text(t) => !self.texts.insert((*t).into()),
        };
        if repeated {
            return Err(self.inconsistent(offset, format!("receipt {key} begins twice")));
        }
        let method = match self.methods.get(b.method) {
            Some(m) => m.clone(),
            None => {
                let m: Arc<str> = b.method.into();
                self.methods.insert(b.method.into(), m.clone());
                m
            }
        };
        let task_id = b.task_id.as_ref().map(|t| self.task_id(t));
        let at = self.receipts.len() as u32;
        let request = StoredRequest::from_text(b.method, b.request, task_id.as_deref());
        self.receipts.push(RecoveredReceipt {
            request_id: key,
            run_id,
            method,
            task_id,
            request,
            first_seen: b.at,
            completion: None,
        });
        Ok(at)
    }

    /// Stores the reply of the receipt at `index` in `receipts`.
    fn complete_at(&mut self, offset: u64, index: u32, reply: &[u8], at: i64) -> Result<(), Error> {
        let receipt = &mut self.receipts[index as usize];
        if receipt.completion.is_some() {
            let key = receipt.request_id.clone();
            return Err(self.inconsistent(offset, format!("receipt {key} completes twice")));
        }
        receipt.completion = Some(Completion {
            reply: reply.into(),
            completed_at: at,
        });
        Ok(())
    }

    fn complete(
        &mut self,
        offset: u64,
        key: &RequestKey,
        reply: &[u8],
        at: i64,
    ) -> Result<(), Error> {
        match self.open.remove(key) {
            Some(index) => self.complete_at(offset, index, reply, at),
            None => Err(self.inconsistent(
                offset,
                format!("receipt {key} completes twice, or completes but was never begun (or was cleared)"),
            )),
        }
    }

    /// Whether the receipt a record names is cleared further on, so the fold skips it.
    fn skipped(&self, d: &Decoded<'_>) -> bool {
        let id = match d {
            Decoded::ReceiptBegun(b) | Decoded::ReceiptStored(b, ..) => &b.request_id,
            Decoded::ReceiptCompleted { request_id, .. } => request_id,
            _ => return false,
        };
        self.skip.contains(&id.key())
    }

    fn apply(&mut self, offset: u64, kind: Kind, len: usize, d: Decoded<'_>) -> Result<(), Error> {
        self.records += 1;
        if !self.skip.is_empty() && self.skipped(&d) {
            self.acct.note(kind, len, 0);
            return Ok(());
        }
        match d {
            Decoded::RunStarted { run_id, started_at } => {
                let run_id: Arc<str> = run_id.to_string().into();
                if !self.run_ids.contains_key(&run_id) {
                    self.run_ids.insert(run_id.clone(), self.runs.len() as u32);
                    self.runs.push(Run { run_id, started_at });
                }
            }
            Decoded::ReceiptBegun(b) => {
                let key = b.request_id.key();
                let index = self.begin(offset, b)?;
                self.open.insert(key, index);
                self.acct.note(kind, len, 0);
            }
            Decoded::ReceiptCompleted {
                request_id,
                reply,
                at,
            } => {
                self.complete(offset, &request_id.key(), reply, at)?;
                self.acct.note(kind, len, 0);
            }
            Decoded::ReceiptStored(b, reply, at) => {
                let index = self.begin(offset, b)?;
                self.complete_at(offset, index, reply, at)?;
                self.acct.note(kind, len, 0);
            }
            Decoded::ReceiptsCleared {
                at,
                reason,
                operator,
                ids,
                ..
            } => {
                let clear = self.clears.len() as u32;
                self.clears.push(ClearInfo {
                    at,
                    reason: reason.into(),
                    operator: operator.into(),
                });
                for (id, digest) in cleared_ids(ids) {
                    let key = id.key();
                    if self.tombstones.contains_key(&key) {
                        return Err(
                            self.inconsistent(offset, format!("receipt {key} is cleared twice"))
                        );
                    }
                    // Its receipt, if the file has it (a compacted journal keeps the
                    // tombstone alone), is dropped at the end.
                    self.open.remove(&key);
                    self.tombstones.insert(key, (digest, clear));
                }
            }
            Decoded::OutcomeAcknowledged {
                request_id,
                reason,
                operator,
                at,
            } => {
                let key = request_id.key();
                self.acks.insert(
                    key.clone(),
                    Acknowledgement {
                        request_id: key,
                        reason: reason.into(),
                        operator: operator.into(),
                        at,
                    },
                );
            }
            Decoded::Task(t) => {
                let run_id = self.run(offset, t.run)?;
                let task_id = self.task_id(&t.task_id);
                let key = t.task_id.key();
                self.tasks.insert(
                    key,
                    RecoveredTask {
                        task_id,
                        run_id,
                        title: t.title.into(),
                        state: t.state.into(),
                        pending: t.pending.into(),
                        detail: t.detail.into(),
                        created_at: t.created_at,
                        updated_at: t.at,
                        closed_at: t.closed_at,
                    },
                );
            }
        }
        Ok(())
    }

    /// The recovered state, once the receipts are checked for an ID begun twice (`Err`: one
    /// was; [`read`] then reads again to say where). Also counts the cleared receipts into
    /// [`Fold::acct`].
    pub fn finish(&mut self, cut_tail: Option<CutTail>) -> Result<Recovered, RepeatedBegin> {
        self.uuids.sort_unstable();
        if self.uuids.windows(2).any(|w| w[0] == w[1]) {
            return Err(RepeatedBegin);
        }
        self.uuids = Vec::new();
        let tombstones = &self.tombstones;
        let mut receipts = std::mem::take(&mut self.receipts);
        if !tombstones.is_empty() {
            let before = receipts.len();
            receipts.retain(|r| !tombstones.contains_key(&r.request_id));
            self.acct.cleared += (before - receipts.len()) as u64;
        }
        let acks = std::mem::take(&mut self.acks);
        Ok(Recovered {
            runs: self.runs.clone(),
            // An acknowledgement outlives its receipt only as long as the receipt is not cleared.
            acknowledgements: acks
                .into_values()
                .filter(|a| !tombstones.contains_key(&a.request_id))
                .collect(),
            receipts,
            tombstones: std::mem::take(&mut self.tombstones)
                .into_iter()
                .map(|(request_id, (digest, clear))| RecoveredTombstone {
                    request_id,
                    digest,
                    clear,
                })
                .collect(),
            clears: std::mem::take(&mut self.clears),
            tasks: std::mem::take(&mut self.tasks).into_values().collect(),
            cut_tail,
        })
    }
}

/// A request ID was begun twice; where is found by reading again (see [`read`]).
#[derive(Debug)]
pub(crate) struct RepeatedBegin;

/// A journal file read whole.
pub(crate) struct Read {
    /// Where its valid blocks end, and any torn tail after them.
    pub end: ScanEnd,
    /// The fold, for its counts ([`Fold::records`], [`Fold::acct`], [`Fold::run_indexes`]).
    pub fold: Fold,
    /// What the host rebuilds from.
    pub recovered: Recovered,
}

/// Reads the blocks of `file` up to `limit` and folds them. An ID begun twice is found only
/// at the end (see [`Fold::uuids`]); then the file is read once more keeping every ID, so the
/// error names the offset of the second begin as any other inconsistency does.
pub(crate) fn read(path: &Path, file: &File, limit: u64, reserve: bool) -> Result<Read, Error> {
    for exact in [false, true] {
        let mut fold = Fold::for_bytes(path, if reserve { limit } else { 0 });
        if exact {
            fold.seen = Some(Default::default());
        }
        let end = scan_folding(path, file, limit, &mut fold)?;
        if let Ok(recovered) = fold.finish(end.tail.clone()) {
            return Ok(Read {
                end,
                fold,
                recovered,
            });
        }
    }
    Err(Error::Inconsistent {
        path: path.to_owned(),
        offset: HEADER_LEN as u64,
        what: "a receipt begins twice".into(),
    })
}

/// [`read`] for compaction: the live state only. Receipts cleared before `limit` are found
/// first (one light pass over the clears), then skipped by the fold instead of being built
/// and dropped at their clear: a clear of a million receipts would otherwise have compaction
/// allocate and free every request and reply it held. The file was checked when it was
/// opened; the receipts skipped are not checked again.
pub(crate) fn read_live(path: &Path, file: &File, limit: u64) -> Result<Recovered, Error> {
    let mut skip = FastSet::default();
    scan(path, file, HEADER_LEN as u64, limit, |offset, payload| {
        let mut r = Reader::new(payload);
        while !r.is_empty() {
            let (_, _, d) = r.record().map_err(|e| Error::Corrupt {
                path: path.to_owned(),
                offset,
                what: format!(
                    "a record in the block at byte offset {offset} cannot be read ({}) although its block's checksum is right",
                    e.0
                ),
            })?;
            if let Decoded::ReceiptsCleared { ids, .. } = d {
                skip.extend(cleared_ids(ids).map(|(id, _)| id.key()));
            }
        }
        Ok(())
    })?;
    let mut fold = Fold::for_bytes(path, 0);
    fold.skip = skip;
    let end = scan_folding(path, file, limit, &mut fold)?;
    match fold.finish(end.tail) {
        Ok(recovered) => Ok(recovered),
        // Never skipped: a repeat among the live receipts, said where as `read` says it.
        Err(RepeatedBegin) => Ok(read(path, file, limit, false)?.recovered),
    }
}

/// Bytes of block payloads handed from the reading thread to the folding one at a time.
const BATCH_BYTES: usize = 4 << 20;

/// Valid blocks' payloads, copied out of the reader's window: `(offset, end in bytes)` each.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    blocks: Vec<(u64, usize)>,
}

/// [`scan`] on a thread of its own (reading the file and checking every block's CRC) while this
/// one folds the blocks it has checked, in order. An error in a block folded comes first, as
/// it would reading in one thread; then the scan's own error (corruption after it).
fn scan_folding(path: &Path, file: &File, limit: u64, fold: &mut Fold) -> Result<ScanEnd, Error> {
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Batch>(2);
    let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Batch>();
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let mut batch = Batch::default();
            let end = scan(path, file, HEADER_LEN as u64, limit, |offset, payload| {
                batch.bytes.extend_from_slice(payload);
                batch.blocks.push((offset, batch.bytes.len()));
                if batch.bytes.len() >= BATCH_BYTES {
                    let next = empty_rx.try_recv().unwrap_or_default();
                    // The folder stopped (it met an error of its own, which it reports).
                    full_tx
                        .send(std::mem::replace(&mut batch, next))
                        .map_err(|_| Error::Closed)?;
                }
                Ok(())
            });
            if !batch.blocks.is_empty() {
                let _ = full_tx.send(batch);
            }
            end
        });
        let mut folded = Ok(());
        for mut batch in full_rx.iter() {
            let mut start = 0;
            for &(offset, end) in &batch.blocks {
                folded = fold.block(offset, &batch.bytes[start..end]);
                if folded.is_err() {
                    break;
                }
                start = end;
            }
            if folded.is_err() {
                break;
            }
            batch.bytes.clear();
            batch.blocks.clear();
            let _ = empty_tx.send(batch);
        }
        drop(full_rx);
        let scanned = reader
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        folded?;
        scanned
    })
}
