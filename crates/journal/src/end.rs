//! The journal's recorded end (`journal.end`): how far the log was known to be durable, so a
//! log shortened, replaced or removed from under the journal is refused instead of being read
//! as a smaller journal (whose lost request IDs would then run again).
//!
//! A log's own bytes cannot say where it ended: cut at a block boundary it reads as a whole,
//! shorter journal. So the end is also kept beside it — not at every flush (that would be a
//! second `fsync` per group commit on the path every request waits for), but when the journal
//! opens, about once a second from a thread of its own while the end moves
//! ([`RECORD_EVERY`]), when compaction switches files, and at close. The recorded end is always
//! one that was durable, so a crash never leaves a log shorter than it; only bytes written in
//! the last second before a crash are not covered. Each log file is named in its header (a
//! random nonzero number, [`super::format::header_of_log`]), so a log replaced by another file is
//! told apart too.
//!
//! The file is text, one line per log it accepts (two while a compaction switches files: the
//! old log, until the rename is durable, and the new one), written to `journal.end.new`,
//! synced and renamed into place (the directory synced only where a new log is named: see
//! [`write`]), so a periodic record costs one small write and one `fdatasync`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::format::HEADER_LEN;
use super::{files, Error};

/// The recorded end inside the journal directory.
pub const END_FILE: &str = "journal.end";
/// Where a new recorded end is written before it is renamed into place.
pub const END_NEW_FILE: &str = "journal.end.new";
/// How often the recorder thread records the durable end while it moves.
pub const RECORD_EVERY: Duration = Duration::from_secs(1);

const FIRST_LINE: &str = "polaris journal end 1";

/// One log the recorded end accepts: its name and how far it was durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The log's name (from its header).
    pub log: u32,
    /// Bytes of the log known durable.
    pub end: u64,
}

fn damaged(path: &Path, what: String) -> Error {
    Error::Shortened {
        path: path.to_owned(),
        what,
    }
}

/// Reads `journal.end`: `None` when there is none (a journal from an older release, or one
/// whose recorded end the operator removed).
pub fn read(dir: &Path) -> Result<Option<Vec<Mark>>, Error> {
    use std::io::Read;
    let path = dir.join(END_FILE);
    let mut file = match files::open_file(&path, false, false) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|source| Error::Io {
        path: path.clone(),
        op: "reading",
        source,
    })?;
    parse(&text)
        .map(Some)
        .ok_or_else(|| damaged(&path, "the recorded end is unreadable".into()))
}

fn parse(text: &str) -> Option<Vec<Mark>> {
    let mut lines = text.lines();
    if lines.next()? != FIRST_LINE {
        return None;
    }
    let mut marks = Vec::new();
    for line in lines {
        let (log, end) = line.strip_prefix("log ")?.split_once(" end ")?;
        marks.push(Mark {
            log: u32::from_str_radix(log, 16).ok()?,
            end: end.parse().ok()?,
        });
    }
    (!marks.is_empty() && marks.len() <= 2).then_some(marks)
}

/// Writes `journal.end`: a new file, synced, renamed into place, and with `sync_rename` the
/// directory synced. A rename not yet durable at a crash leaves the previous recorded end,
/// which is never further than this one for the same log: only a record that names a new log
/// (compaction's, before its rename) must be durable before the log changes.
pub fn write(dir: &Path, marks: &[Mark], sync_rename: bool) -> Result<(), Error> {
    let tmp = dir.join(END_NEW_FILE);
    let _ = std::fs::remove_file(&tmp);
    let mut text = format!("{FIRST_LINE}\n");
    for m in marks {
        text.push_str(&format!("log {:08x} end {}\n", m.log, m.end));
    }
    let mut file = files::open_file(&tmp, true, true)?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_data())
        .map_err(|source| Error::Io {
            path: tmp.clone(),
            op: "writing",
            source,
        })?;
    std::fs::rename(&tmp, dir.join(END_FILE)).map_err(|source| Error::Io {
        path: dir.join(END_FILE),
        op: "renaming the recorded end into place",
        source,
    })?;
    if sync_rename {
        files::sync_dir(dir)?;
    }
    Ok(())
}

/// Refuses a log that is not the one recorded, or shorter than its recorded end. `log` is the
/// log's name, `valid_end` where its valid blocks end (before any torn tail is cut).
pub fn verify(path: &Path, marks: &[Mark], log: u32, valid_end: u64) -> Result<(), Error> {
    let Some(mark) = marks.iter().find(|m| m.log == log) else {
        let names: Vec<String> = marks.iter().map(|m| format!("{:08x}", m.log)).collect();
        return Err(damaged(
            path,
            format!(
                "this log is named {log:08x} in its header, but journal.end records log {} — the log was replaced by another file",
                names.join(" or ")
            ),
        ));
    };
    if valid_end < mark.end {
        return Err(damaged(
            path,
            format!(
                "it holds {valid_end} bytes of valid journal, but {} bytes were durable when its end was last recorded: {} bytes are missing (the log was shortened, or restored from an older copy)",
                mark.end,
                mark.end - valid_end
            ),
        ));
    }
    Ok(())
}

/// Refuses a missing log when the recorded end says it held more than its header.
pub fn verify_missing(path: &Path, marks: &[Mark]) -> Result<(), Error> {
    match marks.iter().map(|m| m.end).max() {
        Some(end) if end > HEADER_LEN as u64 => Err(damaged(
            path,
            format!("the log is missing, but journal.end records {end} bytes of journal"),
        )),
        _ => Ok(()),
    }
}

/// What the open journal last recorded, shared by the recorder thread, compaction and close.
#[derive(Debug)]
struct State {
    /// The file generation (compaction's count) the marks describe.
    generation: u64,
    /// The current log and its recorded end.
    current: Mark,
    /// The log before a compaction, kept until the rename over it is durable.
    previous: Option<Mark>,
    /// The recorder thread stops.
    closing: bool,
}

/// The recorded end of an open journal: the one place that writes `journal.end`, so the
/// recorder thread, compaction and close never undo each other's marks.
#[derive(Debug)]
pub(crate) struct Ends {
    dir: PathBuf,
    state: Mutex<State>,
    tick: Condvar,
}

impl Ends {
    /// For a journal just opened (and its end recorded) on log `current`.
    pub fn new(dir: &Path, current: Mark) -> Ends {
        Ends {
            dir: dir.to_owned(),
            state: Mutex::new(State {
                generation: 0,
                current,
                previous: None,
                closing: false,
            }),
            tick: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write_locked(&self, s: &State) -> Result<(), Error> {
        let mut marks = vec![s.current];
        marks.extend(s.previous);
        write(&self.dir, &marks, false)
    }

    /// Whether `end` of file `generation` is past what is recorded (worth waiting for).
    pub fn moved(&self, generation: u64, end: u64) -> bool {
        let s = self.lock();
        s.generation == generation && end > s.current.end
    }

    /// Records that file `generation` is durable up to `end`, if that is still the current
    /// file and further than recorded. A failure is logged: the journal goes on (its next
    /// open checks against the last end that was recorded).
    pub fn record(&self, generation: u64, end: u64) {
        let mut s = self.lock();
        if s.generation != generation || end <= s.current.end {
            return;
        }
        let before = s.current.end;
        s.current.end = end;
        if let Err(e) = self.write_locked(&s) {
            s.current.end = before;
            tracing::warn!("{e}; the journal's end is recorded later");
        }
    }

    /// Compaction, before renaming its copy (log `log`, durable up to `end`) over the log:
    /// records both, so a crash on either side of the rename finds its log accepted.
    pub fn switching(&self, log: u32, end: u64) -> Result<(), Error> {
        let s = self.lock();
        write(&self.dir, &[Mark { log, end }, s.current], true)
    }

    /// Compaction renamed its copy into place as file `generation`: the old log stays
    /// accepted until [`Ends::settled`].
    pub fn switched(&self, generation: u64, log: u32, end: u64) {
        let mut s = self.lock();
        s.previous = Some(s.current);
        s.current = Mark { log, end };
        s.generation = generation;
    }

    /// The rename is durable: the old log is no longer accepted from the next record on.
    pub fn settled(&self) {
        let mut s = self.lock();
        s.previous = None;
        if let Err(e) = self.write_locked(&s) {
            tracing::warn!("{e}; the journal's end is recorded later");
        }
    }

    /// Sleeps until the next tick; `false` once the journal closes.
    pub fn wait_tick(&self) -> bool {
        let s = self.lock();
        if s.closing {
            return false;
        }
        let (s, _) = self
            .tick
            .wait_timeout(s, RECORD_EVERY)
            .unwrap_or_else(|p| p.into_inner());
        !s.closing
    }

    /// Stops the recorder thread.
    pub fn close(&self) {
        self.lock().closing = true;
        self.tick.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_end_reads_back_and_refuses_a_shorter_replaced_or_missing_log() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read(tmp.path()).unwrap(), None);
        let marks = [
            Mark {
                log: 0xa1b2c3d4,
                end: 4096,
            },
            Mark { log: 7, end: 20 },
        ];
        write(tmp.path(), &marks, true).unwrap();
        assert_eq!(read(tmp.path()).unwrap().unwrap(), marks);
        let log = tmp.path().join("journal.log");
        verify(&log, &marks, 0xa1b2c3d4, 4096).unwrap();
        verify(&log, &marks, 7, 20).unwrap();
        let e = verify(&log, &marks, 0xa1b2c3d4, 4000)
            .unwrap_err()
            .to_string();
        assert!(e.contains("96 bytes are missing"), "{e}");
        assert!(e.contains("remove"), "{e}");
        let e = verify(&log, &marks, 8, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("replaced"), "{e}");
        let e = verify_missing(&log, &marks).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
        verify_missing(&log, &[Mark { log: 1, end: 20 }]).unwrap();
        std::fs::write(tmp.path().join(END_FILE), "nonsense").unwrap();
        assert!(read(tmp.path()).is_err());
    }
}
