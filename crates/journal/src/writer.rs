//! Group commit: appenders encode records into one shared buffer; a flusher writes everything
//! queued since the last write with one `write` and makes it durable with one `fdatasync`, then
//! resolves every ticket it covered at once. Two flusher threads take turns: while one waits
//! for its `fdatasync`, the other may write and sync what was queued meanwhile; a ticket
//! resolves only once its write and every write before it are durable.
//!
//! Appending never touches the file: it takes a short lock, encodes, and returns a [`Ticket`].
//! So the host can append under its own lock, let go of it, and await the ticket on a tokio
//! task; the runtime never blocks on the disk. The flusher is a dedicated thread (or, as a
//! measured alternative, a `spawn_blocking` job started when work arrives).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::format::{self, Record, BLOCK_HEADER_LEN, MAX_APPEND_BYTES, MAX_BLOCK_PAYLOAD};
use super::grow::Growth;
use super::ticket::{Durability, Ticket};
use super::Error;

/// The longest the flusher waits after a flush for the appends of the waiters it woke.
const MAX_GATHER: Duration = Duration::from_micros(500);

/// How long a write's `fdatasync` may run before the other flusher writes and syncs what was
/// queued meanwhile. Overlapping every flush splits group commits in two and costs CPU per
/// request (measured: ~0.5 µs more on a journaled host); overlapping only a slow one (this
/// disk's are 50 µs usually and 2–4 ms now and then; a slow disk's are all slow) keeps the
/// groups and spares the requests queued behind it most of that wait.
const OVERLAP_AFTER: Duration = Duration::from_millis(1);

/// Who runs the write + `fdatasync` loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlusherKind {
    /// A dedicated thread that sleeps until records are queued (the default).
    #[default]
    Thread,
    /// A tokio `spawn_blocking` job started when records arrive and none runs (it runs until the
    /// queue is empty); outside a runtime, a short-lived thread. Kept to measure against the
    /// dedicated thread.
    SpawnBlocking,
}

/// The file as the flusher writes it. Holding its lock pauses the flusher (compaction does).
pub(crate) struct FileState {
    /// The file; shared with the flusher threads' `fdatasync`s, which run without the lock.
    pub file: Arc<File>,
    /// Where the next block goes: everything before is written (durable once its flush is).
    pub end: u64,
    /// The file's length as far as the flusher knows: `end` plus zeros written ahead (see
    /// `Options::preallocate`).
    pub allocated: u64,
    /// Bytes of zeros to keep written ahead of `end`; 0 for none.
    pub preallocate: u64,
    /// Slept after each `fdatasync` (see `Options::extra_sync_latency`).
    pub extra_sync_latency: Duration,
    /// Which file this is to the grower (compaction switches files).
    pub generation: u64,
    /// The grower thread's side (see [`mod@super::grow`]).
    pub growth: Arc<Growth>,
}

impl FileState {
    /// Writes `buf` (sealed blocks at `end`) and moves `end` past it; the caller makes it
    /// durable with the file handed back. The zeros ahead are the grower's work: this only
    /// waits for it when it is writing where `buf` goes.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<Arc<File>> {
        let new_end = self.end + buf.len() as u64;
        if self.preallocate > 0 {
            self.allocated = self
                .allocated
                .max(self.growth.before_write(self.generation, new_end));
        }
        self.file.write_all_at(buf, self.end)?;
        self.end = new_end;
        self.allocated = self.allocated.max(new_end);
        self.growth
            .after_write(&self.file, self.generation, new_end, self.preallocate);
        Ok(self.file.clone())
    }
}

/// `fdatasync`s `file` (plus the testing aid's extra latency): how long it took.
fn sync(file: &File, extra: Duration) -> std::io::Result<Duration> {
    let t = Instant::now();
    file.sync_data()?;
    if !extra.is_zero() {
        std::thread::sleep(extra);
    }
    Ok(t.elapsed())
}

/// One write of the flusher from the moment it is placed in the file until it and every
/// write before it are durable.
struct Unfinished {
    /// Which write (in file order).
    id: u64,
    /// The last append it carries.
    seq: u64,
    /// Records it carries.
    records: u64,
    /// Where it ends in the file.
    end: u64,
    /// More than one block (such a write is never in flight with another).
    multi: bool,
    /// When it was placed.
    started: Instant,
    /// Its outcome once its `fdatasync` returned.
    done: Option<Result<(), Arc<str>>>,
}

/// The writes whose `fdatasync` has not returned yet, or that wait for an earlier one: at most
/// [`format::MAX_UNFINISHED_WRITES`], in file order. A write becomes durable to tickets only
/// once every write before it is, so no ticket ever resolves past a write a crash could tear.
#[derive(Default)]
struct InFlight {
    writes: std::collections::VecDeque<Unfinished>,
    next_id: u64,
    /// A write failed: nothing after it ever counts as durable.
    failed: bool,
}

/// What one turn of a flusher did.
enum Flushed {
    /// Nothing was queued.
    Nothing,
    /// Wrote and synced; woke this many waiters.
    Woke(usize),
    /// The journal failed (or had failed): the flusher stops.
    Failed,
}

/// What appends have queued for the flusher.
struct Queue {
    /// Blocks, each a header's room and then records.
    buf: Vec<u8>,
    /// Where each block of `buf` starts.
    blocks: Vec<usize>,
    /// A spare buffer, so the flusher and appenders swap instead of allocating.
    spare: Vec<u8>,
    /// The sequence number of the last append queued.
    seq: u64,
    /// Records queued.
    records: u64,
    /// Run ID → index among the journal's run records.
    runs: HashMap<Box<str>, u32>,
    /// Receipt accounting for the compaction decision, including what is queued.
    acct: Accounting,
    /// Whether a `spawn_blocking` flusher is running.
    flusher_busy: bool,
    /// How many flusher threads sleep on `Shared::work` (so an append must wake one). A
    /// flusher that is writing takes the queue when it is done without being told: waking it
    /// costs a system call, paid once per batch rather than once per append.
    asleep: usize,
    /// An append woke a sleeping flusher that has not run yet (later appends need not).
    wake_pending: bool,
    /// The journal is closing: the flusher drains the queue and stops.
    closing: bool,
    /// Copy of `Durable::failed`, so appends refuse at once.
    failed: Option<Arc<str>>,
}

/// Counts that decide when clearing has made the journal worth rewriting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Receipts created in the file (live or cleared since).
    pub receipts: u64,
    /// Of those, cleared by an operator.
    pub cleared: u64,
    /// Bytes of the file's receipt records (created, completed, stored).
    pub receipt_bytes: u64,
}

impl Accounting {
    /// Bytes of cleared receipts' records still in the file (estimated from the average receipt).
    pub fn dead_bytes(&self) -> u64 {
        if self.receipts == 0 {
            0
        } else {
            (self.receipt_bytes as u128 * self.cleared as u128 / self.receipts as u128) as u64
        }
    }

    pub(crate) fn note(&mut self, kind: format::Kind, len: usize, cleared: usize) {
        match kind {
            format::Kind::ReceiptBegun | format::Kind::ReceiptStored => {
                self.receipts += 1;
                self.receipt_bytes += len as u64;
            }
            format::Kind::ReceiptCompleted => self.receipt_bytes += len as u64,
            format::Kind::ReceiptsCleared => self.cleared += cleared as u64,
            _ => {}
        }
    }
}

/// Counters of the flusher, for `run.status.journal`.
#[derive(Default)]
struct FlushStats {
    records: u64,
    fsyncs: u64,
    last_fsync: Duration,
    window_start: Option<Instant>,
    window_fsyncs: u64,
    rate: f64,
    bytes: u64,
}

/// What every handle and the flusher share.
pub(crate) struct Shared {
    queue: Mutex<Queue>,
    /// Shared with [`Durability`], whose waiters nudge a gathering flusher.
    work: Arc<Condvar>,
    durable: Arc<Durability>,
    pub file: Mutex<FileState>,
    /// Writes not yet known durable, in file order, and who waits for them to settle.
    in_flight: Mutex<InFlight>,
    settled: Condvar,
    stats: Mutex<FlushStats>,
    kind: FlusherKind,
}

/// A snapshot of the writer's counters.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WriterStats {
    pub bytes: u64,
    pub records: u64,
    pub fsyncs: u64,
    pub last_fsync: Duration,
    pub fsyncs_per_second: f64,
    pub acct: Accounting,
    pub failed: Option<Arc<str>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Whoever still waits learns that nothing more will become durable.
        self.durable.end(None);
        lock(&self.file).growth.close();
    }
}

impl Shared {
    pub fn new(
        file: FileState,
        runs: HashMap<Box<str>, u32>,
        records: u64,
        acct: Accounting,
        kind: FlusherKind,
    ) -> Arc<Shared> {
        let bytes = file.end;
        let work = Arc::new(Condvar::new());
        Arc::new(Shared {
            queue: Mutex::new(Queue {
                buf: Vec::new(),
                blocks: Vec::new(),
                spare: Vec::new(),
                seq: 0,
                records: 0,
                runs,
                acct,
                flusher_busy: false,
                asleep: 0,
                wake_pending: false,
                closing: false,
                failed: None,
            }),
            durable: Arc::new(Durability::new(work.clone())),
            work,
            file: Mutex::new(file),
            in_flight: Mutex::new(InFlight::default()),
            settled: Condvar::new(),
            stats: Mutex::new(FlushStats {
                records,
                bytes,
                ..Default::default()
            }),
            kind,
        })
    }

    /// Queues `records` as one append: all of them become durable together (they go into one
    /// block, which is written whole or cut whole).
    pub fn append<'r>(
        self: &Arc<Self>,
        records: impl IntoIterator<Item = &'r Record<'r>>,
    ) -> Result<Ticket, Error> {
        let mut q = lock(&self.queue);
        if let Some(f) = &q.failed {
            return Err(Error::Failed(f.clone()));
        }
        if q.closing {
            return Err(Error::Closed);
        }
        let q = &mut *q;
        let mark = q.buf.len();
        let blocks = q.blocks.len();
        let new_block = q.blocks.is_empty();
        if new_block {
            q.blocks.push(mark);
            q.buf.resize(mark + BLOCK_HEADER_LEN, 0);
        }
        let body = q.buf.len();
        let mut new_runs: Vec<Box<str>> = Vec::new();
        let mut acct = q.acct;
        let mut n = 0u64;
        for r in records {
            let start = q.buf.len();
            let run_count = q.runs.len() as u32;
            let runs = &q.runs;
            let encoded = format::encode(&mut q.buf, r, |id| runs.get(id).copied());
            if let Err(format::UnknownRun(run)) = encoded {
                for r in new_runs {
                    q.runs.remove(&r);
                }
                q.buf.truncate(mark);
                q.blocks.truncate(blocks);
                return Err(Error::UnknownRun(run));
            }
            if let Record::RunStarted { run_id, .. } = r {
                if !q.runs.contains_key(*run_id) {
                    q.runs.insert((*run_id).into(), run_count);
                    new_runs.push((*run_id).into());
                }
            }
            let cleared = match r {
                Record::ReceiptsCleared(c) => c.ids.len(),
                _ => 0,
            };
            acct.note(r.kind(), q.buf.len() - start, cleared);
            n += 1;
        }
        let len = q.buf.len() - body;
        if n == 0 || len > MAX_APPEND_BYTES {
            for r in new_runs {
                q.runs.remove(&r);
            }
            q.buf.truncate(mark);
            q.blocks.truncate(blocks);
            return Err(if n == 0 {
                Error::EmptyAppend
            } else {
                Error::TooLarge { bytes: len }
            });
        }
        // Start a new block before this append if it would make the current one too big.
        let current = *q.blocks.last().expect("a block is open");
        if !new_block && body - current - BLOCK_HEADER_LEN + len > MAX_BLOCK_PAYLOAD {
            q.buf
                .splice(mark..mark, std::iter::repeat_n(0, BLOCK_HEADER_LEN));
            q.blocks.push(mark);
        }
        q.acct = acct;
        q.records += n;
        q.seq += 1;
        let seq = q.seq;
        match self.kind {
            FlusherKind::Thread => {
                if q.asleep > 0 && !q.wake_pending {
                    q.wake_pending = true;
                    self.work.notify_one();
                }
            }
            FlusherKind::SpawnBlocking => {
                if !q.flusher_busy {
                    q.flusher_busy = true;
                    let shared = self.clone();
                    match tokio::runtime::Handle::try_current() {
                        Ok(rt) => drop(rt.spawn_blocking(move || shared.flush_until_idle())),
                        // Outside a runtime (a blocking caller): a short-lived thread.
                        Err(_) => drop(std::thread::spawn(move || shared.flush_until_idle())),
                    }
                }
            }
        }
        Ok(Ticket {
            seq,
            durability: self.durable.clone(),
        })
    }

    /// A ticket for the append numbered `seq`.
    pub fn ticket(&self, seq: u64) -> Ticket {
        Ticket {
            seq,
            durability: self.durable.clone(),
        }
    }

    /// Every append numbered up to this one is durable.
    pub fn durable_seq(&self) -> u64 {
        self.durable.seq()
    }

    /// A ticket for everything appended so far.
    pub fn barrier(&self) -> Ticket {
        let seq = lock(&self.queue).seq;
        Ticket {
            seq,
            durability: self.durable.clone(),
        }
    }

    /// Takes what is queued: `(buffer, block starts, last seq, records)`, or `None` if empty.
    fn take(q: &mut Queue) -> Option<(Vec<u8>, Vec<usize>, u64, u64)> {
        if q.buf.is_empty() {
            return None;
        }
        let spare = std::mem::take(&mut q.spare);
        let buf = std::mem::replace(&mut q.buf, spare);
        let blocks = std::mem::take(&mut q.blocks);
        let records = std::mem::take(&mut q.records);
        Some((buf, blocks, q.seq, records))
    }

    /// Takes what is queued, seals and writes it (under the file's lock, so writes land in the
    /// order they were taken), then `fdatasync`s it without the lock — while another flusher
    /// may write and sync the next batch — and resolves the tickets of every write that is now
    /// durable with all the writes before it.
    fn flush_next(&self) -> Flushed {
        let mut f = lock(&self.file);
        let taken = {
            let mut q = lock(&self.queue);
            if q.failed.is_some() {
                return Flushed::Failed;
            }
            Self::take(&mut q)
        };
        let Some((mut buf, blocks, seq, records)) = taken else {
            return Flushed::Nothing;
        };
        let multi = blocks.len() > 1;
        let (id, overlapped) = {
            let mut u = lock(&self.in_flight);
            // A write of several blocks is never in flight with another: recovery allows one
            // marked block after a torn one, not several.
            while !u.failed && !u.writes.is_empty() && (multi || u.writes.iter().any(|w| w.multi)) {
                u = self.settled.wait(u).unwrap_or_else(|p| p.into_inner());
            }
            let id = u.next_id;
            u.next_id += 1;
            let overlapped = !u.writes.is_empty();
            u.writes.push_back(Unfinished {
                id,
                seq,
                records,
                end: 0,
                multi,
                started: Instant::now(),
                done: None,
            });
            (id, overlapped)
        };
        for (i, &start) in blocks.iter().enumerate() {
            let end = blocks.get(i + 1).copied().unwrap_or(buf.len());
            format::seal_block(f.end + start as u64, &mut buf[start..end], overlapped);
        }
        let extra = f.extra_sync_latency;
        let wrote = f.write(&buf).map(|file| (file, f.end));
        drop(f);
        let result = wrote.and_then(|(file, end)| sync(&file, extra).map(|took| (took, end)));
        let flushed = self.settle(id, result);
        buf.clear();
        let mut q = lock(&self.queue);
        if q.spare.capacity() < buf.capacity() && buf.capacity() <= 64 << 20 {
            q.spare = buf;
        }
        flushed
    }

    /// Write `id` is synced (or failed): resolves the tickets of the writes now durable in
    /// order, or fails the journal.
    fn settle(&self, id: u64, result: std::io::Result<(Duration, u64)>) -> Flushed {
        let (durable, failed) = {
            let mut u = lock(&self.in_flight);
            let outcome = match &result {
                Ok((_, end)) => Ok(*end),
                Err(e) => Err(Arc::<str>::from(format!("writing the journal failed: {e}"))),
            };
            if let Some(w) = u.writes.iter_mut().find(|w| w.id == id) {
                w.done = Some(outcome.as_ref().map(|_| ()).map_err(Arc::clone));
                if let Ok(end) = outcome {
                    w.end = end;
                }
            }
            let mut durable: Option<(u64, u64, u64)> = None;
            let mut failed = None;
            while u.writes.front().is_some_and(|w| w.done.is_some()) {
                let Some(w) = u.writes.pop_front() else { break };
                match w.done {
                    Some(Err(msg)) if !u.failed => {
                        u.failed = true;
                        failed = Some(msg);
                    }
                    Some(Ok(())) if !u.failed => {
                        let records = durable.map_or(0, |d| d.2) + w.records;
                        durable = Some((w.seq, w.end, records));
                    }
                    _ => {}
                }
            }
            if u.failed && failed.is_none() {
                durable = None;
            }
            self.settled.notify_all();
            (durable, failed)
        };
        if let Some(msg) = failed {
            // An fsync that failed may have dropped the dirty pages: never retry, never
            // pretend. Everything queued and everything later fails. A warning here; the host
            // that owns the journal says it once, as an error naming the file, when it stops.
            tracing::warn!("{msg}; no further mutation can be made durable");
            lock(&self.queue).failed = Some(msg.clone());
            self.durable.end(Some(msg));
            return Flushed::Failed;
        }
        let Ok((took, _)) = result else {
            return Flushed::Failed;
        };
        {
            let mut s = lock(&self.stats);
            let now = Instant::now();
            s.fsyncs += 1;
            s.last_fsync = took;
            if let Some((_, end, records)) = durable {
                s.records += records;
                s.bytes = end;
            }
            let start = *s.window_start.get_or_insert(now);
            s.window_fsyncs += 1;
            let elapsed = now - start;
            if elapsed >= Duration::from_secs(1) {
                s.rate = s.window_fsyncs as f64 / elapsed.as_secs_f64();
                s.window_start = Some(now);
                s.window_fsyncs = 0;
            }
        }
        match durable {
            Some((seq, _, _)) => Flushed::Woke(self.durable.advance(seq)),
            None => Flushed::Woke(0),
        }
    }

    /// The dedicated flusher thread's loop.
    ///
    /// After a flush that woke several waiters, it gives their next appends a moment to
    /// arrive before it takes the queue: a waiter woken because its begin is durable appends
    /// its completion a few microseconds later, and that completion then rides the next flush
    /// instead of waiting for one more (a request under load waits for two flushes, not
    /// three). The pause ends as soon as as many waiters registered again as were woken (a
    /// woken task appends its completions, then waits for them: counting appends instead would
    /// end the pause after the first of many batches), and lasts at most a quarter of the last
    /// `fdatasync` (never more than [`MAX_GATHER`]); a flush that woke one waiter (one client at
    /// a time) does not pause.
    pub fn run_thread(&self) {
        let mut gather: Option<(Instant, usize)> = None;
        loop {
            {
                let mut q = lock(&self.queue);
                loop {
                    if q.failed.is_some() {
                        return;
                    }
                    if let Some((until, want)) = gather {
                        let now = Instant::now();
                        if self.durable.waiting() < want && now < until && !q.closing {
                            // Not counted asleep: appends meanwhile do not wake it, only
                            // the waiter that completes the count (or the pause's end) does.
                            q = match self.work.wait_timeout(q, until - now) {
                                Ok((q, _)) => q,
                                Err(p) => p.into_inner().0,
                            };
                            // The wake an append meant for a sleeping flusher may have come
                            // here: this one takes what is queued when its pause ends, and
                            // the next append wakes a sleeper again.
                            q.wake_pending = false;
                            continue;
                        }
                        gather = None;
                        self.durable
                            .gather_until_waiting
                            .store(0, Ordering::Relaxed);
                    }
                    // While the other flusher pauses to gather, what is queued is its to take.
                    let other_gathers = gather.is_none()
                        && self.durable.gather_until_waiting.load(Ordering::Relaxed) != 0
                        && !q.closing;
                    if !q.buf.is_empty() && !other_gathers {
                        break;
                    }
                    if q.closing && q.buf.is_empty() {
                        return;
                    }
                    q.asleep += 1;
                    q = self.work.wait(q).unwrap_or_else(|p| p.into_inner());
                    q.asleep -= 1;
                    q.wake_pending = false;
                }
            }
            self.await_overlap();
            // Taken again under the file's lock: another flusher may have taken it meanwhile.
            match self.flush_next() {
                Flushed::Failed => return,
                Flushed::Nothing => {}
                Flushed::Woke(woken) if woken > 1 => {
                    let pause = (lock(&self.stats).last_fsync / 4).min(MAX_GATHER);
                    let want = self.durable.waiting() + woken;
                    self.durable
                        .gather_until_waiting
                        .store(want, Ordering::Relaxed);
                    gather = Some((Instant::now() + pause, want));
                }
                Flushed::Woke(_) => {}
            }
        }
    }

    /// Before a flusher writes while another write is unfinished: waits until that write
    /// settles or has been syncing for [`OVERLAP_AFTER`], whichever comes first.
    fn await_overlap(&self) {
        let mut u = lock(&self.in_flight);
        loop {
            let Some(oldest) = u.writes.front().filter(|_| !u.failed) else {
                return;
            };
            let age = oldest.started.elapsed();
            if age >= OVERLAP_AFTER {
                return;
            }
            u = match self.settled.wait_timeout(u, OVERLAP_AFTER - age) {
                Ok((u, _)) => u,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// The `spawn_blocking` flusher: runs until nothing is queued.
    fn flush_until_idle(&self) {
        loop {
            match self.flush_next() {
                Flushed::Woke(_) => continue,
                Flushed::Nothing => {
                    let mut q = lock(&self.queue);
                    // An append that came after the take saw this flusher busy: flush it too.
                    if !q.buf.is_empty() && q.failed.is_none() {
                        continue;
                    }
                    q.flusher_busy = false;
                }
                Flushed::Failed => lock(&self.queue).flusher_busy = false,
            }
            self.work.notify_all();
            return;
        }
    }

    /// Stops taking appends and waits until everything queued is durable (or failed).
    pub fn close(&self) {
        lock(&self.file).growth.close();
        let mut q = lock(&self.queue);
        q.closing = true;
        self.work.notify_all();
        if self.kind == FlusherKind::SpawnBlocking {
            // No thread to join: drain here if nobody is flushing.
            while q.flusher_busy {
                q = self.work.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            drop(q);
            while let Flushed::Woke(_) = self.flush_next() {}
        }
    }

    pub fn stats(&self) -> WriterStats {
        let (acct, failed) = {
            let q = lock(&self.queue);
            (q.acct, q.failed.clone())
        };
        let s = lock(&self.stats);
        let idle = s
            .window_start
            .is_some_and(|w| w.elapsed() > Duration::from_secs(2));
        WriterStats {
            bytes: s.bytes,
            records: s.records,
            fsyncs: s.fsyncs,
            last_fsync: s.last_fsync,
            fsyncs_per_second: if idle { 0.0 } else { s.rate },
            acct,
            failed,
        }
    }

    /// After compaction rewrote the file (with the flusher paused): the new file's counts.
    /// Appends queued meanwhile are not in `acct`; it is an estimate for a threshold, and the
    /// next open or compaction counts exactly again.
    pub fn reset_after_compaction(&self, acct: Accounting, records: u64, bytes: u64) {
        lock(&self.queue).acct = acct;
        let mut s = lock(&self.stats);
        s.records = records;
        s.bytes = bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_fails_every_waiting_and_later_append_and_is_never_retried() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("log");
        std::fs::write(&path, format::header(format::FORMAT_VERSION)).unwrap();
        // Read-only: every write fails, as a full or failing disk would.
        let file = File::open(&path).unwrap();
        let shared = Shared::new(
            FileState {
                file: Arc::new(file),
                end: format::HEADER_LEN as u64,
                allocated: format::HEADER_LEN as u64,
                preallocate: 0,
                extra_sync_latency: Duration::ZERO,
                generation: 0,
                growth: Growth::new(format::HEADER_LEN as u64),
            },
            HashMap::new(),
            0,
            Accounting::default(),
            FlusherKind::Thread,
        );
        let flusher = {
            let s = shared.clone();
            std::thread::spawn(move || s.run_thread())
        };
        let run = Record::RunStarted {
            run_id: "r",
            started_at: 1,
        };
        let first = shared.append([&run]).unwrap();
        let e = first.clone().wait().unwrap_err();
        assert!(
            matches!(e, Error::Failed(ref m) if m.contains("writing the journal failed")),
            "{e}"
        );
        assert!(!first.is_durable());
        assert!(matches!(shared.append([&run]), Err(Error::Failed(_))));
        assert!(shared.stats().failed.is_some());
        flusher.join().unwrap();
        assert_eq!(std::fs::read(&path).unwrap().len(), format::HEADER_LEN);
    }
}
