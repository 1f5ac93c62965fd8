//! Compaction: the journal rewritten without cleared receipts, crash-safe at every step.
//!
//! 1. Note where the durable journal ends (`e1`) and fold `[header, e1)` from a second
//!    descriptor, while appends go on.
//! 2. Write the folded state to `journal.compact` (runs, tasks, tombstones, live receipts,
//!    acknowledgements) and `fsync` it.
//! 3. Pause the flusher (take the file's lock), copy the blocks written since `e1` (re-sealed
//!    at their new offsets), `fsync`, record the copy's end beside the old log's in
//!    `journal.end`, rename the copy over `journal.log`, `fsync` the directory, and let the
//!    flusher go on in the new file; the old log's recorded end is dropped at the next record.
//!
//! A crash before the rename leaves the old log whole (the copy is removed at the next open);
//! after it, the new log is whole because it was synced before the rename.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::format::{
    self, Begun, Cleared, ClearedId, Completed, Reader, Record, RequestPieces, TaskEvent,
    TaskRecord, BLOCK_HEADER_LEN, FORMAT_VERSION, HEADER_LEN, MAX_BLOCK_PAYLOAD,
};
use super::writer::Accounting;
use super::{files, recover, scan, Error, Journal};

/// What a compaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// Journal bytes before.
    pub bytes_before: u64,
    /// Journal bytes after.
    pub bytes_after: u64,
    /// Live receipts kept.
    pub receipts: u64,
    /// Tombstones kept.
    pub tombstones: u64,
    /// Tasks kept.
    pub tasks: u64,
    /// Bytes copied after the snapshot (appended while compacting).
    pub tail_bytes: u64,
    /// How long it took.
    pub took: Duration,
}

/// Where a test stops a compaction, as a crash there would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The copy is written, not synced.
    Written,
    /// The copy is synced, not renamed.
    Synced,
    /// The copy is renamed over the log; the directory is not synced.
    Renamed,
}

/// Blocks written into the new file.
struct Out {
    file: std::fs::File,
    path: std::path::PathBuf,
    end: u64,
    buf: Vec<u8>,
    records: u64,
    acct: Accounting,
}

impl Out {
    fn io(&self) -> impl FnOnce(std::io::Error) -> Error + '_ {
        |source| Error::Io {
            path: self.path.clone(),
            op: "writing the compacted copy",
            source,
        }
    }

    fn record(&mut self, r: &Record<'_>, runs: &HashMap<&str, u32>) -> Result<(), Error> {
        if self.buf.is_empty() {
            self.buf.resize(BLOCK_HEADER_LEN, 0);
        }
        let start = self.buf.len();
        format::encode(&mut self.buf, r, |id| runs.get(id).copied())
            .map_err(|e| Error::UnknownRun(e.0))?;
        let cleared = match r {
            Record::ReceiptsCleared(c) => c.ids.len(),
            _ => 0,
        };
        // Tombstones here have no receipt in the file: they are not dead bytes.
        if cleared == 0 {
            self.acct.note(r.kind(), self.buf.len() - start, 0);
        }
        self.records += 1;
        if self.buf.len() >= MAX_BLOCK_PAYLOAD / 8 {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.buf.len() > BLOCK_HEADER_LEN {
            format::seal_block(self.end, &mut self.buf, false);
            let (buf, end) = (std::mem::take(&mut self.buf), self.end);
            self.file.write_all_at(&buf, end).map_err(self.io())?;
            self.end += buf.len() as u64;
            self.buf = buf;
        }
        self.buf.clear();
        Ok(())
    }
}

impl Journal {
    /// [`Journal::compact`], stopping early at `crash` (tests).
    pub(crate) fn compact_at(&self, crash: Option<Stage>) -> Result<Compacted, Error> {
        let started = Instant::now();
        let _one = self
            .inner
            .compacting
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let shared = &self.inner.shared;
        let path = &self.inner.path;
        let e1 = shared.file.lock().unwrap_or_else(|p| p.into_inner()).end;

        // 1. Fold the durable journal up to e1.
        let reader = files::open_file(path, false, false)?;
        let state = recover::read_live(path, &reader, e1)?;

        // 2. Write the live state.
        let (out, log) = self.write_live_state(&state)?;
        if crash == Some(Stage::Written) {
            return Err(Error::Closed);
        }
        out.file.sync_all().map_err(out.io())?;
        if crash == Some(Stage::Synced) {
            return Err(Error::Closed);
        }

        // 3. Pause the flusher, copy what came after e1, switch.
        let (e2, bytes_after) = self.switch_to_copy(out, log, &reader, e1, crash)?;
        Ok(Compacted {
            bytes_before: e2,
            bytes_after,
            receipts: state.receipts.len() as u64,
            tombstones: state.tombstones.len() as u64,
            tasks: state.tasks.len() as u64,
            tail_bytes: e2 - e1,
            took: started.elapsed(),
        })
    }

    /// Step 2: the live state written to `journal.compact` under a new log name (not yet
    /// synced): runs, tasks, tombstones by clear, live receipts, acknowledgements.
    fn write_live_state(&self, state: &recover::Recovered) -> Result<(Out, u32), Error> {
        let copy_path = self.inner.dir.join(files::COMPACT_FILE);
        let _ = std::fs::remove_file(&copy_path);
        let mut file = files::open_file(&copy_path, true, true)?;
        let log = format::new_log_name();
        file.write_all(&format::header_of_log(FORMAT_VERSION, log))
            .map_err(|source| Error::Io {
                path: copy_path.clone(),
                op: "writing the compacted copy",
                source,
            })?;
        let mut out = Out {
            file,
            path: copy_path,
            end: HEADER_LEN as u64,
            buf: Vec::with_capacity(MAX_BLOCK_PAYLOAD / 8 + (1 << 20)),
            records: 0,
            acct: Accounting::default(),
        };
        let runs: HashMap<&str, u32> = state
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| (&*r.run_id, i as u32))
            .collect();
        for r in &state.runs {
            out.record(
                &Record::RunStarted {
                    run_id: &r.run_id,
                    started_at: r.started_at,
                },
                &runs,
            )?;
        }
        write_tasks(&mut out, state, &runs)?;
        write_tombstones(&mut out, state, &runs)?;
        for r in &state.receipts {
            let begun = Begun {
                request_id: &r.request_id,
                run_id: &r.run_id,
                method: &r.method,
                task_id: r.task_id.as_deref(),
                request: RequestPieces(r.request.pieces(&r.method, r.task_id.as_deref())),
                at: r.first_seen,
            };
            let rec = match &r.completion {
                Some(c) => Record::ReceiptStored(
                    begun,
                    Completed {
                        request_id: &r.request_id,
                        reply: &c.reply,
                        at: c.completed_at,
                    },
                ),
                None => Record::ReceiptBegun(begun),
            };
            out.record(&rec, &runs)?;
        }
        for a in &state.acknowledgements {
            out.record(
                &Record::OutcomeAcknowledged(format::Acknowledged {
                    request_id: &a.request_id,
                    reason: &a.reason,
                    operator: &a.operator,
                    at: a.at,
                }),
                &runs,
            )?;
        }
        out.flush()?;
        Ok((out, log))
    }

    /// Step 3, with the flusher paused: the blocks appended since `e1` copied (re-sealed at
    /// their new offsets) and synced, the copy's end recorded, the copy renamed over the log,
    /// the flusher pointed at it, the directory synced. Returns where the old log ended and
    /// where the new one does.
    fn switch_to_copy(
        &self,
        mut out: Out,
        log: u32,
        reader: &std::fs::File,
        e1: u64,
        crash: Option<Stage>,
    ) -> Result<(u64, u64), Error> {
        let shared = &self.inner.shared;
        let path = &self.inner.path;
        let mut fs = shared.file.lock().unwrap_or_else(|p| p.into_inner());
        let e2 = fs.end;
        let mut tail_err = None;
        scan::scan(path, reader, e1, e2, |_, payload| {
            let mut r = Reader::new(payload);
            while !r.is_empty() {
                let Ok((kind, len, d)) = r.record() else {
                    break;
                };
                let cleared = match d {
                    format::Decoded::ReceiptsCleared { count, .. } => count,
                    _ => 0,
                };
                out.acct.note(kind, len, cleared);
                out.records += 1;
            }
            let mut block = vec![0u8; BLOCK_HEADER_LEN];
            block.extend_from_slice(payload);
            format::seal_block(out.end, &mut block, false);
            if let Err(e) = out.file.write_all_at(&block, out.end) {
                tail_err = Some(e);
            }
            out.end += block.len() as u64;
            Ok(())
        })?;
        if let Some(e) = tail_err {
            return Err(out.io()(e));
        }
        out.file.sync_all().map_err(out.io())?;
        self.inner.ends.switching(log, out.end)?;
        std::fs::rename(&out.path, path).map_err(|source| Error::Io {
            path: path.clone(),
            op: "renaming the compacted copy over the journal",
            source,
        })?;
        // From here the new file is the journal: the flusher must write there even if
        // syncing the directory fails (the rename is then durable at the next sync).
        let bytes_after = out.end;
        fs.file = Arc::new(out.file);
        fs.end = bytes_after;
        fs.allocated = bytes_after;
        fs.generation += 1;
        fs.growth.switched(fs.generation, bytes_after);
        self.inner.ends.switched(fs.generation, log, bytes_after);
        shared.reset_after_compaction(out.acct, out.records, bytes_after);
        if crash == Some(Stage::Renamed) {
            return Err(Error::Closed);
        }
        drop(fs);
        files::sync_dir(&self.inner.dir)?;
        self.inner.ends.settled();
        Ok((e2, bytes_after))
    }
}

/// The tasks: a closed task none of whose receipts is left keeps only its compact record.
fn write_tasks(
    out: &mut Out,
    state: &recover::Recovered,
    runs: &HashMap<&str, u32>,
) -> Result<(), Error> {
    let busy: HashSet<&str> = state
        .receipts
        .iter()
        .filter_map(|r| r.task_id.as_deref())
        .collect();
    for t in &state.tasks {
        let compact = t.closed_at.is_some() && !busy.contains(&*t.task_id);
        out.record(
            &Record::Task(TaskRecord {
                event: if t.closed_at.is_some() {
                    TaskEvent::Closed
                } else {
                    TaskEvent::Updated
                },
                task_id: &t.task_id,
                run_id: &t.run_id,
                created_at: t.created_at,
                at: t.updated_at,
                title: &t.title,
                state: &t.state,
                pending: if compact { &[] } else { &t.pending },
                detail: if compact { &[] } else { &t.detail },
                closed_at: t.closed_at,
            }),
            runs,
        )?;
    }
    Ok(())
}

/// The tombstones, grouped by the clear that made them, in slices so no record outgrows a
/// block.
fn write_tombstones(
    out: &mut Out,
    state: &recover::Recovered,
    runs: &HashMap<&str, u32>,
) -> Result<(), Error> {
    let mut by_clear: Vec<Vec<ClearedId>> = vec![Vec::new(); state.clears.len()];
    for t in &state.tombstones {
        by_clear[t.clear as usize].push(ClearedId {
            request_id: t.request_id.clone(),
            digest: t.digest,
        });
    }
    for (c, ids) in state.clears.iter().zip(&by_clear) {
        for chunk in ids.chunks(100_000) {
            out.record(
                &Record::ReceiptsCleared(Cleared {
                    at: c.at,
                    reason: &c.reason,
                    operator: &c.operator,
                    ids: chunk,
                }),
                runs,
            )?;
        }
    }
    Ok(())
}
