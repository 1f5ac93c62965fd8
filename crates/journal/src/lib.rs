//! The journal: receipts, tombstones and tasks that survive a crash (SPEC §11).
//!
//! A hand-written append-only log in one directory (`0700`, locked by one host at a time):
//! `journal.log` holds a header (magic + format version) and then *blocks*, each one write of
//! the group-commit flusher, with its length and a CRC32C; inside a block, compact binary
//! [`Record`]s (see [`mod@format`]). The host's rule — a receipt's begin durable before the executor
//! acts, its completion durable before any client sees the reply — is served by
//! [`Journal::append`]: it queues records without touching the disk and returns a [`Ticket`]
//! that resolves once they are written and `fdatasync`ed. Every append queued while a flush is
//! under way shares the next one, so durability costs one `fdatasync` per batch, not per
//! request. A second thread keeps zeros written ahead of the end (`grow.rs`), so those
//! `fdatasync`s have no file size to commit.
//!
//! [`Journal::open`] reads everything back ([`Recovered`]), cutting a torn tail (the last,
//! unfinished write) with a warning and refusing corruption anywhere before it. [`check`] reads a
//! journal without locking it. [`Journal::compact`] rewrites the file without cleared receipts.

#![warn(missing_docs)]

// The layers below, under the names this crate's modules use for them.
use polaris_protocol as protocol;
use polaris_state::book;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod compact;
mod end;
mod files;
pub mod format;
mod grow;
mod recover;
mod scan;
mod ticket;
mod writer;

#[cfg(test)]
mod tests;

pub use compact::Compacted;
pub use end::{END_FILE, RECORD_EVERY};
pub use files::{default_dir, default_dir_from, key as dir_key, LOCK_FILE, LOG_FILE};
pub use format::{
    Acknowledged, Begun, Cleared, ClearedId, Completed, Record, RequestPieces, TaskEvent,
    TaskRecord, FORMAT_VERSION,
};
pub use recover::{
    Acknowledgement, ClearInfo, Completion, Recovered, RecoveredReceipt, RecoveredTask,
    RecoveredTombstone, Run,
};
pub use scan::CutTail;
pub use ticket::{Durably, Ticket};
pub use writer::FlusherKind;

use writer::{FileState, Shared};

/// Why the journal cannot be opened, read or written. Every message names the file or
/// directory and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("journal {}: {op} failed: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Another process holds the directory's lock.
    #[error("journal {} is in use by another polaris host{}; stop it, or give this host another --journal directory", dir.display(), pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// The holder's process ID, when it wrote one.
        pid: Option<u32>,
    },
    /// A file or directory that others could change or swap.
    #[error("journal {} is not safe to use: {why}", path.display())]
    Insecure {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong, and how to fix it.
        why: String,
    },
    /// A journal written in another format version.
    #[error("journal {} has format version {found}, but this polaris reads version {FORMAT_VERSION}; {}", path.display(), if *found > FORMAT_VERSION { "use the newer polaris that wrote it".to_string() } else { format!("it was written by an older polaris: open it with that release and clear what it holds, or move {} aside to start an empty journal (its receipts are then forgotten)", path.display()) })]
    Version {
        /// The file.
        path: PathBuf,
        /// The version it has.
        found: u32,
    },
    /// A file that is not a journal (or whose header is damaged).
    #[error("{} is not a polaris journal (its header is missing or damaged); move it aside or give another --journal directory", path.display())]
    NotAJournal {
        /// The file.
        path: PathBuf,
    },
    /// Damage before the tail: the journal cannot be trusted past `offset`.
    #[error("journal {} is corrupt: {what}. Nothing was changed; keep a copy of the file, then run `polaris journal check` for its counts", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong there.
        what: String,
    },
    /// A log shorter than its recorded end, another file in its place, or none at all, where
    /// `journal.end` says the journal held more: its lost receipts would otherwise run again.
    #[error("journal {} cannot be trusted: {what}. Nothing was changed. Restore the whole journal.log from a backup if there is one; if not, and you accept that the request IDs in the lost part may run again, remove journal.end from the journal directory and start the host again (`polaris journal check` then shows what is left)", path.display())]
    Shortened {
        /// The log (or `journal.end`, when that is what is unreadable).
        path: PathBuf,
        /// What was found against what was recorded.
        what: String,
    },
    /// Records whose checksums are right but that contradict each other.
    #[error("journal {} is inconsistent at byte offset {offset}: {what}. Nothing was changed; keep a copy of the file and report it", path.display())]
    Inconsistent {
        /// The file.
        path: PathBuf,
        /// The record's offset.
        offset: u64,
        /// What contradicts what.
        what: String,
    },
    /// Neither `$XDG_STATE_HOME` nor `$HOME` is set: there is no default place.
    #[error("no journal directory: neither XDG_STATE_HOME nor HOME is set; pass --journal DIR (or --no-journal)")]
    NoStateDir,
    /// A record names a run that no run record introduced.
    #[error("journal record names run {0}, which was never started in this journal (append a RunStarted record first)")]
    UnknownRun(String),
    /// An append of no records.
    #[error("an append must carry at least one record")]
    EmptyAppend,
    /// An append bigger than one block may be.
    #[error("an append of {bytes} bytes is larger than the journal accepts at once")]
    TooLarge {
        /// Its encoded size.
        bytes: usize,
    },
    /// An earlier write or `fdatasync` failed; nothing more can be made durable.
    #[error("{0}")]
    Failed(Arc<str>),
    /// The journal was closed.
    #[error("the journal is closed")]
    Closed,
}

impl Error {
    /// The same refusal of an append, for each of the appenders that shared it: what failed
    /// or closed the journal is kept as it is, anything else as its message.
    pub fn copy_of_append_error(&self) -> Error {
        match self {
            Error::Failed(f) => Error::Failed(f.clone()),
            Error::Closed => Error::Closed,
            Error::UnknownRun(run) => Error::UnknownRun(run.clone()),
            Error::EmptyAppend => Error::EmptyAppend,
            Error::TooLarge { bytes } => Error::TooLarge { bytes: *bytes },
            other => Error::Failed(other.to_string().into()),
        }
    }
}

/// How the journal writes.
#[derive(Clone, Debug)]
pub struct Options {
    /// Keep at least this many bytes of zeros written ahead of the journal's end, and up to
    /// twice as many (0: grow with each write). A thread of its own writes them; writing into
    /// zeros already on disk means an `fdatasync` has no file size or extent to commit.
    pub preallocate: u64,
    /// Who writes and syncs.
    pub flusher: FlusherKind,
    /// With the dedicated thread flusher: let a second flusher thread write and `fdatasync`
    /// the next batch while the first one's `fdatasync` is still under way (at most
    /// [`format::MAX_UNFINISHED_WRITES`] writes unfinished). Off: one write at a time.
    pub overlap: bool,
    /// Added to every `fdatasync` (a testing aid: how the journal behaves on a disk whose
    /// flushes take milliseconds). Zero by default.
    pub extra_sync_latency: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            preallocate: 4 << 20,
            flusher: FlusherKind::Thread,
            overlap: true,
            extra_sync_latency: Duration::ZERO,
        }
    }
}

/// Numbers for `run.status.journal`, and for deciding when to compact.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// The log file.
    pub path: PathBuf,
    /// Bytes of valid journal (zeros written ahead not counted).
    pub bytes: u64,
    /// Durable records in the file.
    pub records: u64,
    /// How long the last `fdatasync` took.
    pub last_fsync: Duration,
    /// `fdatasync`s per second over the last second or so (0 when idle).
    pub fsyncs_per_second: f64,
    /// `fdatasync`s since open.
    pub fsyncs: u64,
    /// Receipts created in the file (live or cleared since), counting queued appends.
    pub receipts: u64,
    /// Of those, cleared.
    pub cleared: u64,
    /// Estimated bytes of cleared receipts' records still in the file.
    pub cleared_bytes: u64,
    /// Set when a write failed: the journal takes no more appends.
    pub failed: Option<Arc<str>>,
}

impl Stats {
    /// SPEC §11: rewrite when cleared records exceed half of the file.
    pub fn compaction_due(&self) -> bool {
        self.cleared_bytes > self.bytes / 2
    }

    /// `lastFsyncMs`.
    pub fn last_fsync_ms(&self) -> f64 {
        self.last_fsync.as_secs_f64() * 1e3
    }
}

struct Inner {
    dir: PathBuf,
    path: PathBuf,
    shared: Arc<Shared>,
    flushers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    compacting: Mutex<()>,
    /// The recorded end (`journal.end`) and its recorder thread.
    ends: Arc<end::Ends>,
    recorder: Mutex<Option<std::thread::JoinHandle<()>>>,
    _lock: files::DirLock,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.close();
        join_all(&self.flushers);
        self.record_final_end();
    }
}

impl Inner {
    /// After the flushers stopped: stops the recorder and records the end, if everything
    /// appended is durable (a failed journal keeps the end recorded last).
    fn record_final_end(&self) {
        self.ends.close();
        if let Some(t) = self
            .recorder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = t.join();
        }
        let seq = self.shared.barrier().seq();
        if self.shared.durable_seq() >= seq && self.shared.stats().failed.is_none() {
            let (generation, end) = {
                let f = self.shared.file.lock().unwrap_or_else(|p| p.into_inner());
                (f.generation, f.end)
            };
            self.ends.record(generation, end);
        }
    }
}

/// The recorder thread: about once a [`RECORD_EVERY`], records the journal's durable end when
/// it moved — off the path of every append: it never waits for a flush (a write not yet
/// durable is recorded at a later tick), and a flush never waits for it.
fn record_ends(shared: Arc<Shared>, ends: Arc<end::Ends>) {
    let mut pending: Option<(u64, u64, u64)> = None;
    while ends.wait_tick() {
        if pending.is_none() {
            let (generation, end) = {
                let f = shared.file.lock().unwrap_or_else(|p| p.into_inner());
                (f.generation, f.end)
            };
            if ends.moved(generation, end) {
                // Every write placed before `end` carries appends up to this sequence number.
                pending = Some((generation, end, shared.barrier().seq()));
            }
        }
        if let Some((generation, end, seq)) = pending {
            if shared.durable_seq() >= seq {
                ends.record(generation, end);
                pending = None;
            } else if shared.stats().failed.is_some() {
                return;
            }
        }
    }
}

/// An open journal: a cheap-clone handle. The last handle dropped drains what is queued, stops
/// the flusher and lets go of the directory's lock.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Journal {
    /// Opens (or creates) the journal in `dir`: makes the directory `0700`, takes its lock,
    /// reads every record back, cuts a torn tail (logged as a warning naming the offset) and
    /// starts the flusher.
    pub fn open(dir: &Path, options: Options) -> Result<(Journal, Recovered), Error> {
        files::prepare_dir(dir)?;
        let lock = files::lock_dir(dir)?;
        let path = dir.join(files::LOG_FILE);
        remove_leftovers(dir)?;
        let marks = marks_or_new_log(dir, &path)?;
        let file = Arc::new(files::open_file(&path, true, false)?);
        let (len, version, named) = read_header(&path, &file)?;
        let recover::Read {
            end,
            fold,
            recovered,
        } = recover::read(&path, &file, len, true)?;
        check_recorded_end(&path, marks.as_deref(), named, end.end)?;
        if let Some(tail) = &end.tail {
            cut_torn_tail(&path, &file, tail)?;
        }
        let log = upgrade_header(&path, &file, version, named)?;
        // What this open found is durable (a cut tail is gone): record it before serving.
        let start = end::Mark { log, end: end.end };
        end::write(dir, &[start], true)?;
        let ends = Arc::new(end::Ends::new(dir, start));
        let allocated = if end.tail.is_some() { end.end } else { len };
        let shared = shared_state(&path, file, end.end, allocated, &options, fold)?;
        let flushers = start_flushers(&shared, &path, options.flusher, options.overlap)?;
        let recorder = start_recorder(&shared, &ends);
        let inner = Inner {
            dir: dir.to_owned(),
            path,
            shared,
            flushers,
            compacting: Mutex::new(()),
            ends,
            recorder: Mutex::new(None),
            _lock: lock,
        };
        match recorder {
            Ok(t) => *inner.recorder.lock().unwrap_or_else(|p| p.into_inner()) = Some(t),
            Err(source) => {
                return Err(Error::Io {
                    path: inner.path.clone(),
                    op: "starting the thread that records the journal's end",
                    source,
                })
            }
        }
        Ok((
            Journal {
                inner: Arc::new(inner),
            },
            recovered,
        ))
    }

    /// Queues one record; the ticket resolves when it is durable.
    pub fn append(&self, record: &Record<'_>) -> Result<Ticket, Error> {
        self.inner.shared.append(std::iter::once(record))
    }

    /// Queues records that become durable together (one block: all or none survive a crash),
    /// with one ticket — for a batch of admissions made under one lock.
    pub fn append_batch<'r>(
        &self,
        records: impl IntoIterator<Item = &'r Record<'r>>,
    ) -> Result<Ticket, Error> {
        self.inner.shared.append(records)
    }

    /// A ticket that resolves when everything appended so far is durable.
    pub fn barrier(&self) -> Ticket {
        self.inner.shared.barrier()
    }

    /// Every append whose [`Ticket::seq`] is at most this is durable: a cheap check for a
    /// stored reply that kept only its completion's sequence number (8 bytes) instead of the
    /// ticket — a copy arriving before it is durable waits with [`Journal::ticket`].
    pub fn durable_seq(&self) -> u64 {
        self.inner.shared.durable_seq()
    }

    /// A ticket for the append numbered `seq` (see [`Journal::durable_seq`]).
    pub fn ticket(&self, seq: u64) -> Ticket {
        self.inner.shared.ticket(seq)
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The journal's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Current numbers.
    pub fn stats(&self) -> Stats {
        let w = self.inner.shared.stats();
        Stats {
            path: self.inner.path.clone(),
            bytes: w.bytes,
            records: w.records,
            last_fsync: w.last_fsync,
            fsyncs_per_second: w.fsyncs_per_second,
            fsyncs: w.fsyncs,
            receipts: w.acct.receipts,
            cleared: w.acct.cleared,
            cleared_bytes: w.acct.dead_bytes(),
            failed: w.failed,
        }
    }

    /// Rewrites the journal without cleared receipts: a compacted copy, `fsync`ed, renamed over
    /// the log, the directory `fsync`ed — a crash at any step leaves the old or the new journal
    /// whole. Blocks for as long as reading and writing the live journal takes; call it from a
    /// blocking thread. Appends go on meanwhile; only the final switch pauses the flusher.
    /// Worth it when [`Stats::compaction_due`].
    pub fn compact(&self) -> Result<Compacted, Error> {
        self.compact_at(None)
    }

    /// Waits until everything appended is durable and stops taking appends. Further appends
    /// fail with [`Error::Closed`]; the directory stays locked until the last handle is gone.
    pub fn close(&self) -> Result<(), Error> {
        let barrier = self.barrier();
        self.inner.shared.close();
        join_all(&self.inner.flushers);
        self.inner.record_final_end();
        match self.inner.shared.stats().failed {
            Some(f) => Err(Error::Failed(f)),
            None => {
                debug_assert!(barrier.is_durable());
                Ok(())
            }
        }
    }
}
/// Removes what an unfinished compaction or creation left beside the log: the log itself is
/// still the whole journal.
fn remove_leftovers(dir: &Path) -> Result<(), Error> {
    for leftover in [files::COMPACT_FILE, files::NEW_FILE, end::END_NEW_FILE] {
        match std::fs::remove_file(dir.join(leftover)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::Io {
                    path: dir.join(leftover),
                    op: "removing",
                    source: e,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// The recorded ends (`journal.end`), after creating the log when there is none — refused when
/// the recorded end says there was one.
fn marks_or_new_log(dir: &Path, path: &Path) -> Result<Option<Vec<end::Mark>>, Error> {
    let mut marks = end::read(dir)?;
    if std::fs::symlink_metadata(path).is_err() {
        // No log: a new journal — unless the recorded end says there was one.
        if let Some(marks) = &marks {
            end::verify_missing(path, marks)?;
        }
        marks = Some(vec![create_log(dir, path)?]);
    }
    Ok(marks)
}

/// Refuses a log shorter than its recorded end; warns when it cannot be checked (no
/// `journal.end`, or a log from before logs were named).
fn check_recorded_end(
    path: &Path,
    marks: Option<&[end::Mark]>,
    named: u32,
    valid_end: u64,
) -> Result<(), Error> {
    match marks {
        // A log written by an older release (unnamed) cannot be matched with a recorded end.
        Some(marks) if named != 0 => end::verify(path, marks, named, valid_end)?,
        _ if named != 0 || marks.is_some() => tracing::warn!(
            "journal {}: {}, so whether the log was shortened cannot be checked this once; its end is recorded from now on",
            path.display(),
            if named == 0 { "the log was written by an older polaris" } else { "there is no journal.end beside it" },
        ),
        _ => {}
    }
    Ok(())
}

/// Cuts the torn tail (the last write, unfinished when the host stopped) off the log, durably,
/// with a warning naming its offset.
fn cut_torn_tail(path: &Path, file: &std::fs::File, tail: &CutTail) -> Result<(), Error> {
    tracing::warn!(
        "journal {}: cut a torn tail of {} bytes at byte offset {} ({}): the last write was unfinished when the host stopped",
        path.display(),
        tail.bytes,
        tail.offset,
        tail.why
    );
    file.set_len(tail.offset)
        .and_then(|_| file.sync_all())
        .map_err(|source| Error::Io {
            path: path.to_owned(),
            op: "cutting the torn tail",
            source,
        })
}

/// The log's name, after rewriting a header of an older format version, or one without a
/// name, as the current one.
fn upgrade_header(
    path: &Path,
    file: &std::fs::File,
    version: u32,
    named: u32,
) -> Result<u32, Error> {
    let log = if named == 0 {
        format::new_log_name()
    } else {
        named
    };
    if version != FORMAT_VERSION || named == 0 {
        // Version 1's blocks are valid version 2 blocks (none marked overlapped); from
        // here on blocks may be marked, which version 1 cannot read: say so in the header.
        // A log from before `journal.end` gets its name.
        use std::os::unix::fs::FileExt;
        file.write_all_at(&format::header_of_log(FORMAT_VERSION, log), 0)
            .and_then(|_| file.sync_data())
            .map_err(|source| Error::Io {
                path: path.to_owned(),
                op: "upgrading the header",
                source,
            })?;
        if version != FORMAT_VERSION {
            tracing::info!(
                "journal {}: format version {version} read and its header upgraded to version {FORMAT_VERSION} (older polaris releases cannot open it any more)",
                path.display()
            );
        }
    }
    Ok(log)
}

/// The state the appenders and flushers share, from what the open read, with the thread that
/// writes zeros ahead started when the options ask for it.
fn shared_state(
    path: &Path,
    file: Arc<std::fs::File>,
    end: u64,
    allocated: u64,
    options: &Options,
    fold: recover::Fold,
) -> Result<Arc<Shared>, Error> {
    let growth = grow::Growth::new(allocated);
    if options.preallocate > 0 {
        growth.spawn().map_err(|source| Error::Io {
            path: path.to_owned(),
            op: "starting the thread that writes zeros ahead",
            source,
        })?;
    }
    let runs = fold.run_indexes();
    let records = fold.records;
    let acct = fold.acct;
    Ok(Shared::new(
        FileState {
            file,
            end,
            allocated,
            preallocate: options.preallocate,
            extra_sync_latency: options.extra_sync_latency,
            generation: 0,
            growth,
        },
        runs,
        records,
        acct,
        options.flusher,
    ))
}

/// Starts the flusher threads `flusher` and `overlap` ask for (none when appenders flush on
/// the blocking pool); when one cannot start, stops those already started.
fn start_flushers(
    shared: &Arc<Shared>,
    path: &Path,
    flusher: FlusherKind,
    overlap: bool,
) -> Result<Mutex<Vec<std::thread::JoinHandle<()>>>, Error> {
    let threads = match flusher {
        FlusherKind::Thread if overlap => format::MAX_UNFINISHED_WRITES,
        FlusherKind::Thread => 1,
        FlusherKind::SpawnBlocking => 0,
    };
    let flushers = Mutex::new(Vec::with_capacity(threads));
    for _ in 0..threads {
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("polaris-journal".into())
            .spawn(move || s.run_thread());
        match spawned {
            Ok(t) => flushers.lock().unwrap_or_else(|p| p.into_inner()).push(t),
            Err(source) => {
                shared.close();
                join_all(&flushers);
                return Err(Error::Io {
                    path: path.to_owned(),
                    op: "starting the flusher thread",
                    source,
                });
            }
        }
    }
    Ok(flushers)
}

/// Starts the thread that records the journal's durable end ([`record_ends`]).
fn start_recorder(
    shared: &Arc<Shared>,
    ends: &Arc<end::Ends>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let (s, e) = (shared.clone(), ends.clone());
    std::thread::Builder::new()
        .name("polaris-journal-end".into())
        .spawn(move || record_ends(s, e))
}

/// Joins the flusher threads (after [`Shared::close`]).
fn join_all(flushers: &Mutex<Vec<std::thread::JoinHandle<()>>>) {
    let threads = std::mem::take(&mut *flushers.lock().unwrap_or_else(|p| p.into_inner()));
    for t in threads {
        let _ = t.join();
    }
}

/// Writes a new, empty log (header only) and renames it into place, durably. Its end is
/// recorded first, so a crash before the rename leaves a recorded end of an empty journal.
/// Returns what it recorded.
fn create_log(dir: &Path, path: &Path) -> Result<end::Mark, Error> {
    use std::io::Write;
    let tmp = dir.join(files::NEW_FILE);
    let log = format::new_log_name();
    let mut f = files::open_file(&tmp, true, true)?;
    f.write_all(&format::header_of_log(FORMAT_VERSION, log))
        .and_then(|_| f.sync_all())
        .map_err(|source| Error::Io {
            path: tmp.clone(),
            op: "writing",
            source,
        })?;
    let mark = end::Mark {
        log,
        end: format::HEADER_LEN as u64,
    };
    end::write(dir, &[mark], true)?;
    std::fs::rename(&tmp, path).map_err(|source| Error::Io {
        path: path.to_owned(),
        op: "creating",
        source,
    })?;
    files::sync_dir(dir)?;
    Ok(mark)
}

/// Checks the header; returns the file's length, its format version (this one, or
/// version 1, whose blocks this version reads as they are) and the log's name (0: none yet).
fn read_header(path: &Path, file: &std::fs::File) -> Result<(u64, u32, u32), Error> {
    use std::os::unix::fs::FileExt;
    let io = |source| Error::Io {
        path: path.to_owned(),
        op: "reading",
        source,
    };
    let len = file.metadata().map_err(io)?.len();
    let mut h = [0u8; format::HEADER_LEN];
    if len < h.len() as u64 {
        return Err(Error::NotAJournal {
            path: path.to_owned(),
        });
    }
    file.read_exact_at(&mut h, 0).map_err(io)?;
    match format::check_header(&h) {
        format::HeaderCheck::Ok => Ok((len, FORMAT_VERSION, format::header_log(&h))),
        format::HeaderCheck::Version(format::READS_VERSION) => {
            Ok((len, format::READS_VERSION, format::header_log(&h)))
        }
        format::HeaderCheck::Version(found) => Err(Error::Version {
            path: path.to_owned(),
            found,
        }),
        format::HeaderCheck::Foreign => Err(Error::NotAJournal {
            path: path.to_owned(),
        }),
    }
}

/// What [`check`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// The log file.
    pub path: PathBuf,
    /// Bytes of valid journal.
    pub bytes: u64,
    /// The file's length (valid journal, a torn tail, zeros written ahead).
    pub file_bytes: u64,
    /// Records.
    pub records: u64,
    /// Blocks (writes).
    pub blocks: u64,
    /// Live receipts.
    pub receipts: u64,
    /// Receipts begun and never completed: running at a crash (or now, if a host runs).
    pub running: u64,
    /// Tombstones.
    pub tombstones: u64,
    /// Tasks.
    pub tasks: u64,
    /// Acknowledgements.
    pub acknowledgements: u64,
    /// Runs recorded.
    pub runs: u64,
    /// A torn tail the next open would cut (a host writing right now can show one too).
    pub tail: Option<CutTail>,
    /// The process that holds the journal, when one appears to.
    pub host_pid: Option<u32>,
    /// The durable end recorded for this log in `journal.end` (`None`: no such file, a journal
    /// from an older release); the log is never shorter, or `check` fails.
    pub recorded_end: Option<u64>,
}

/// Reads the journal in `dir` without taking its lock or changing anything, so a running host
/// is not disturbed: counts and integrity for `polaris journal check`. Corruption before the
/// tail is the same error as at open.
pub fn check(dir: &Path) -> Result<CheckReport, Error> {
    files::check_dir(dir)?;
    let path = dir.join(files::LOG_FILE);
    // The log first, then its recorded end: compaction records a new log before renaming it
    // into place, so the end read second always knows the log opened first.
    let file = match files::open_file(&path, false, false) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            if let Some(marks) = end::read(dir)? {
                end::verify_missing(&path, &marks)?;
            }
            return Err(Error::Io {
                path,
                op: "opening",
                source,
            });
        }
        other => other?,
    };
    let (len, _, named) = read_header(&path, &file)?;
    let marks = end::read(dir)?;
    let recover::Read {
        end,
        fold,
        recovered: r,
    } = recover::read(&path, &file, len, true)?;
    if let (Some(marks), true) = (&marks, named != 0) {
        end::verify(&path, marks, named, end.end)?;
    }
    let recorded_end = marks
        .iter()
        .flatten()
        .find(|m| m.log == named)
        .map(|m| m.end);
    let records = fold.records;
    Ok(CheckReport {
        path,
        bytes: end.end,
        file_bytes: len,
        records,
        blocks: end.blocks,
        receipts: r.receipts.len() as u64,
        running: r.interrupted().count() as u64,
        tombstones: r.tombstones.len() as u64,
        tasks: r.tasks.len() as u64,
        acknowledgements: r.acknowledgements.len() as u64,
        runs: r.runs.len() as u64,
        tail: end.tail,
        host_pid: files::lock_holder(dir),
        recorded_end,
    })
}
