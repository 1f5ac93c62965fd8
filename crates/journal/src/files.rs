//! The journal's directory and files: where they live, who may own them, and the lock that
//! keeps a second host out.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Error;

/// The log file inside the journal directory.
pub const LOG_FILE: &str = "journal.log";
/// The lock file inside the journal directory.
pub const LOCK_FILE: &str = "journal.lock";
/// Where compaction writes its copy before renaming it over the log.
pub const COMPACT_FILE: &str = "journal.compact";
/// Where a new log is written before it is renamed into place.
pub const NEW_FILE: &str = "journal.new";

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        path: path.to_owned(),
        op,
        source,
    }
}

/// The default journal directory for a socket directory (SPEC §11):
/// `$XDG_STATE_HOME/polaris/journal/<key>`, else `~/.local/state/polaris/journal/<key>`, where
/// `<key>` is the first 16 hex digits of the SHA-256 of the socket directory's canonical path.
/// The socket directory must exist (the host makes it first).
pub fn default_dir(socket_dir: &Path) -> Result<PathBuf, Error> {
    let canonical = socket_dir
        .canonicalize()
        .map_err(io(socket_dir, "resolving the socket directory"))?;
    default_dir_from(
        &canonical,
        std::env::var_os("XDG_STATE_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

/// [`default_dir`] with the canonical socket directory and the environment given.
/// A relative or empty `XDG_STATE_HOME` is ignored, as the XDG specification says.
pub fn default_dir_from(
    canonical_socket_dir: &Path,
    xdg_state_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, Error> {
    let state = match (xdg_state_home.map(Path::new), home.map(Path::new)) {
        (Some(x), _) if x.is_absolute() => x.to_owned(),
        (_, Some(h)) if !h.as_os_str().is_empty() => h.join(".local/state"),
        _ => return Err(Error::NoStateDir),
    };
    Ok(state
        .join("polaris/journal")
        .join(key(canonical_socket_dir)))
}

/// The first 16 hex digits of the SHA-256 of a path's bytes.
pub fn key(canonical: &Path) -> String {
    let digest = Sha256::digest(canonical.as_os_str().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Creates the journal directory (`0700`, parents too) or checks the one there: a real
/// directory (not a symlink), owned by this user, not group- or world-writable.
pub fn prepare_dir(dir: &Path) -> Result<(), Error> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(dir, "creating the journal directory"))?,
        Err(e) => return Err(io(dir, "reading the journal directory")(e)),
        Ok(_) => {}
    }
    check_dir(dir)
}

/// Checks an existing journal directory without changing it.
pub fn check_dir(dir: &Path) -> Result<(), Error> {
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir, "reading the journal directory"))?;
    let insecure = |why: String| Error::Insecure {
        path: dir.to_owned(),
        why,
    };
    if meta.file_type().is_symlink() {
        return Err(insecure("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(insecure("it is not a directory".into()));
    }
    if meta.uid() != euid() {
        return Err(insecure(format!(
            "it is owned by uid {}, not by this user (uid {})",
            meta.uid(),
            euid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(insecure(format!(
            "it is writable by group or others (mode {:o}); chmod 700 it",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Opens a journal file without following symlinks and checks it: a regular file owned by this
/// user, not group- or world-writable. `create` makes it (`0600`) when missing.
pub fn open_file(path: &Path, write: bool, create: bool) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .create(create)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                Error::Insecure {
                    path: path.to_owned(),
                    why: "it is a symbolic link".into(),
                }
            } else {
                io(path, "opening")(e)
            }
        })?;
    let meta = file.metadata().map_err(io(path, "reading"))?;
    let insecure = |why: String| Error::Insecure {
        path: path.to_owned(),
        why,
    };
    if !meta.is_file() {
        return Err(insecure("it is not a regular file".into()));
    }
    if meta.uid() != euid() {
        return Err(insecure(format!(
            "it is owned by uid {}, not by this user (uid {})",
            meta.uid(),
            euid()
        )));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(insecure(format!(
            "it is writable by group or others (mode {:o}); chmod 600 it",
            meta.permissions().mode() & 0o7777
        )));
    }
    Ok(file)
}

/// Makes a rename or a new file in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "syncing the journal directory"))
}

/// The exclusive lock on a journal directory, held while the value lives.
///
/// The lock is on the directory itself (an `flock` on a descriptor of it), which nobody can
/// delete from under a live host while the journal is in it: a lock on `journal.lock` alone
/// was lost when that file was deleted (it holds a process ID, which invites deleting it as
/// stale), and a second host then opened the same journal and ran its IDs again. The lock
/// file is still locked too (older releases lock only it) and still holds the holder's
/// process ID, for the message a second host gets.
#[derive(Debug)]
pub struct DirLock {
    _dir: File,
    file: File,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Still holding the lock: forget the process ID, so nobody reads it as a live holder.
        let _ = self.file.set_len(0);
    }
}

/// `flock(LOCK_EX | LOCK_NB)`: `Ok(false)` when another descriptor holds it.
fn try_flock(file: &File) -> std::io::Result<bool> {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Takes the directory's lock without waiting, or says who holds it: first the directory
/// itself, then (for older releases, which lock only it) `journal.lock`, whose content
/// becomes this process's ID.
pub fn lock_dir(dir: &Path) -> Result<DirLock, Error> {
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW).bits() as i32)
        .open(dir)
        .map_err(io(dir, "opening the journal directory"))?;
    if !try_flock(&handle).map_err(io(dir, "locking the journal directory"))? {
        return Err(Error::Locked {
            dir: dir.to_owned(),
            pid: lock_holder(dir),
        });
    }
    // The directory locked must be the one at this path (not one renamed away meanwhile).
    let held = handle
        .metadata()
        .map_err(io(dir, "reading the journal directory"))?;
    let named = std::fs::symlink_metadata(dir).map_err(io(dir, "reading the journal directory"))?;
    if (held.dev(), held.ino()) != (named.dev(), named.ino()) {
        return Err(Error::Insecure {
            path: dir.to_owned(),
            why: "the directory was replaced while it was being locked; start the host again"
                .into(),
        });
    }
    let path = dir.join(LOCK_FILE);
    let mut file = open_file(&path, true, true)?;
    if !try_flock(&file).map_err(io(&path, "locking"))? {
        return Err(Error::Locked {
            dir: dir.to_owned(),
            pid: holder(&mut file),
        });
    }
    let pid = std::process::id().to_string();
    file.set_len(0)
        .and_then(|_| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(pid.as_bytes()))
        .map_err(io(&path, "writing"))?;
    Ok(DirLock { _dir: handle, file })
}

fn holder(file: &mut File) -> Option<u32> {
    let mut s = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

/// The process holding an `flock` on the directory, as `/proc/locks` lists it (Linux): found
/// even when `journal.lock` was deleted or emptied.
fn flock_holder(dir: &Path) -> Option<u32> {
    let meta = std::fs::symlink_metadata(dir).ok()?;
    let (major, minor) = (rustix::fs::major(meta.dev()), rustix::fs::minor(meta.dev()));
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    for line in locks.lines() {
        // `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`; waiters' lines carry `->`.
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields[1] != "FLOCK" {
            continue;
        }
        let mut at = fields[5].split(':');
        let (Some(ma), Some(mi), Some(ino)) = (at.next(), at.next(), at.next()) else {
            continue;
        };
        if u32::from_str_radix(ma, 16).ok() == Some(major)
            && u32::from_str_radix(mi, 16).ok() == Some(minor)
            && ino.parse::<u64>().ok() == Some(meta.ino())
        {
            return fields[4].parse().ok();
        }
    }
    None
}

/// The process that holds a directory's lock, if one is alive: the holder of the directory's
/// `flock`, else the process ID in its lock file — read without touching the lock, so a
/// running or starting host is never disturbed. (A host that stopped cleanly leaves no ID;
/// one that crashed leaves one that is usually dead, or rarely reused.)
pub fn lock_holder(dir: &Path) -> Option<u32> {
    if let Some(pid) = flock_holder(dir) {
        return Some(pid);
    }
    let mut file = open_file(&dir.join(LOCK_FILE), false, false).ok()?;
    let pid = holder(&mut file)?;
    let alive = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|p| {
            matches!(
                rustix::process::test_kill_process(p),
                Ok(()) | Err(rustix::io::Errno::PERM)
            )
        });
    alive.then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_default_directory_follows_xdg_then_home_and_hashes_the_socket_dir() {
        let sock = Path::new("/run/user/1000/polaris");
        let k = key(sock);
        assert_eq!(k.len(), 16);
        assert!(k.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(k, key(Path::new("/tmp/polaris-1000")));
        assert_eq!(
            default_dir_from(
                sock,
                Some(OsStr::new("/state")),
                Some(OsStr::new("/home/a"))
            )
            .unwrap(),
            PathBuf::from(format!("/state/polaris/journal/{k}"))
        );
        for xdg in [None, Some(OsStr::new("")), Some(OsStr::new("rel/state"))] {
            assert_eq!(
                default_dir_from(sock, xdg, Some(OsStr::new("/home/a"))).unwrap(),
                PathBuf::from(format!("/home/a/.local/state/polaris/journal/{k}"))
            );
        }
        assert!(matches!(
            default_dir_from(sock, None, None),
            Err(Error::NoStateDir)
        ));
        assert!(matches!(
            default_dir_from(sock, Some(OsStr::new("x")), Some(OsStr::new(""))),
            Err(Error::NoStateDir)
        ));
        // The key is of the canonical path: a symlinked spelling finds the same journal.
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        assert_eq!(
            default_dir(&real).unwrap(),
            default_dir(&tmp.path().join("link")).unwrap()
        );
    }

    #[test]
    fn directories_and_files_must_be_private_and_real() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/journal");
        prepare_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);

        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_dir(&open).unwrap_err().to_string();
        assert!(e.contains("writable by group or others"), "{e}");

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = prepare_dir(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");

        let target = dir.join("target");
        std::fs::write(&target, b"x").unwrap();
        let file_link = dir.join(LOG_FILE);
        std::os::unix::fs::symlink(&target, &file_link).unwrap();
        let e = open_file(&file_link, true, true).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");

        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = open_file(&target, true, false).unwrap_err().to_string();
        assert!(e.contains("writable by group or others"), "{e}");
    }

    #[test]
    fn a_second_locker_is_refused_naming_the_directory_and_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let held = lock_dir(tmp.path()).unwrap();
        assert_eq!(lock_holder(tmp.path()), Some(std::process::id()));
        let e = lock_dir(tmp.path()).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(&tmp.path().display().to_string()), "{msg}");
        assert!(msg.contains(&std::process::id().to_string()), "{msg}");
        // Deleting the lock file changes nothing: the directory itself is locked.
        std::fs::remove_file(tmp.path().join(LOCK_FILE)).unwrap();
        let msg = lock_dir(tmp.path()).unwrap_err().to_string();
        assert!(msg.contains(&std::process::id().to_string()), "{msg}");
        drop(held);
        assert_eq!(lock_holder(tmp.path()), None);
        lock_dir(tmp.path()).unwrap();
    }
}
