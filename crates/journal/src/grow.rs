//! Zeros written ahead of the journal's end by a thread of their own, so that the flusher's
//! `fdatasync`s commit only the blocks it wrote.
//!
//! A block written into zeros already on disk changes no file size and allocates no extent:
//! its `fdatasync` has only data to flush. Growing the file is the expensive part (megabytes of
//! zeros, a file size, extents), and doing it in the flusher put all of it on the path every
//! waiting request takes. Here a grower thread keeps between [`Options::preallocate`] and twice
//! that of durable zeros ahead of the end, in 1 MiB steps each made durable before the next
//! (so a concurrent flush finds at most one step of someone else's dirty pages).
//!
//! The flusher writes only where the grower is not: below [`Growth::ready`] (zeros already
//! durable) or past everything the grower was asked to zero. When it catches up with a grower
//! at work it waits for the step it needs; with nothing zeroed ahead it appends, as with no
//! preallocation at all. A grower that cannot write (a full disk, a file size limit) stops
//! quietly: the flusher's own write then meets the same error and reports it.
//!
//! [`Options::preallocate`]: super::Options::preallocate

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Zeros written per step.
const STEP: u64 = 1 << 20;

/// One step of zeros, never allocated at run time.
/// The bytes of zeros one `write` puts in the page cache (see [`write_zeros`]).
const PIECE: u64 = 16 << 10;

static ZEROS: [u8; PIECE as usize] = [0; PIECE as usize];

/// What the grower has done and been asked to do.
#[derive(Debug, Default)]
struct State {
    /// Zeros are durable up to here in the current file (or data is, past the flusher's end).
    ready: u64,
    /// The grower zeroes up to here; `ready < target` while it works.
    target: u64,
    /// Which file `ready` and `target` describe (compaction switches files).
    generation: u64,
    /// The file to grow (a duplicate handle of the flusher's).
    file: Option<Arc<File>>,
    /// The grower met an error: it grows nothing more.
    broken: bool,
    /// The journal is closing: the grower stops.
    closing: bool,
}

/// Shared between the flusher and the grower thread.
#[derive(Debug, Default)]
pub(crate) struct Growth {
    state: Mutex<State>,
    changed: Condvar,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Growth {
    /// A grower for a file whose bytes (data or zeros) end at `allocated`.
    pub fn new(allocated: u64) -> Arc<Growth> {
        Arc::new(Growth {
            state: Mutex::new(State {
                ready: allocated,
                target: allocated,
                ..State::default()
            }),
            changed: Condvar::new(),
        })
    }

    /// Starts the grower thread; it stops once [`Growth::close`] is called.
    pub fn spawn(self: &Arc<Self>) -> std::io::Result<()> {
        let growth = self.clone();
        std::thread::Builder::new()
            .name("polaris-journal-grow".into())
            .spawn(move || growth.run())
            .map(drop)
    }

    /// Before the flusher writes `[end, new_end)` of `file` (generation `generation`): waits
    /// while the grower zeroes any of that range, and returns how far the file's bytes now go
    /// (at least `new_end` once the write is done: a write past it appends).
    pub fn before_write(&self, generation: u64, new_end: u64) -> u64 {
        let mut s = lock(&self.state);
        loop {
            if s.generation != generation || s.ready >= new_end || s.ready == s.target {
                break;
            }
            // The grower is writing zeros where this write goes: let it finish that step.
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if s.generation == generation {
            // Past `ready` nobody writes but the flusher: its data ends the file there.
            s.ready = s.ready.max(new_end);
            s.target = s.target.max(s.ready);
            s.ready
        } else {
            new_end
        }
    }

    /// After a write ending at `end`: asks the grower for more zeros when fewer than `ahead`
    /// bytes are left (it then zeroes up to `end + 2 × ahead`).
    pub fn after_write(&self, file: &File, generation: u64, end: u64, ahead: u64) {
        if ahead == 0 {
            return;
        }
        let mut s = lock(&self.state);
        if s.broken || s.closing || s.generation != generation || s.target >= end + ahead {
            return;
        }
        if s.file.is_none() {
            match file.try_clone() {
                Ok(f) => s.file = Some(Arc::new(f)),
                Err(e) => {
                    tracing::debug!("journal: no zeros written ahead ({e})");
                    s.broken = true;
                    return;
                }
            }
        }
        s.target = (end + 2 * ahead).next_multiple_of(STEP);
        self.changed.notify_all();
    }

    /// Compaction switched to a new file whose bytes end at `allocated`: generation
    /// `generation` from now on.
    pub fn switched(&self, generation: u64, allocated: u64) {
        let mut s = lock(&self.state);
        s.generation = generation;
        s.ready = allocated;
        s.target = allocated;
        s.file = None;
        self.changed.notify_all();
    }

    /// Stops the grower thread.
    pub fn close(&self) {
        lock(&self.state).closing = true;
        self.changed.notify_all();
    }

    /// The grower thread: one step at a time, each durable before it counts as ready.
    fn run(&self) {
        let mut s = lock(&self.state);
        loop {
            if s.closing {
                return;
            }
            let Some(file) = s.file.clone().filter(|_| s.ready < s.target && !s.broken) else {
                s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            let (generation, at) = (s.generation, s.ready);
            let n = (s.target - at).min(STEP);
            drop(s);
            let wrote = write_zeros(&file, at, n).and_then(|()| file.sync_data());
            s = lock(&self.state);
            match wrote {
                Ok(()) if s.generation == generation && s.ready == at => s.ready = at + n,
                Ok(()) => {}
                Err(e) => {
                    tracing::debug!("journal: zeros ahead stopped at byte offset {at} ({e})");
                    s.broken = true;
                    s.target = s.ready;
                }
            }
            self.changed.notify_all();
        }
    }
}

/// Writes `n` zeros at `at` in pieces of [`PIECE`] bytes: the page cache sizes a new folio by
/// the write that creates it, and a 1 MiB write asks for 1 MiB folios, which on a machine whose
/// memory is mostly page cache the kernel compacts memory to find (measured: the grower thread
/// was 8% of a journaled host's CPU, nearly all of it compaction). Small folios need none.
fn write_zeros(file: &File, at: u64, n: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < n {
        let len = (n - done).min(PIECE);
        file.write_all_at(&ZEROS[..len as usize], at + done)?;
        done += len;
    }
    Ok(())
}
