//! The audit log: one JSON line per clear commit or acknowledgement, durable before the
//! operator hears that it applied.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::host::{CommittedClear, Host};
use crate::protocol::introspection::{AuditCleared, AuditEntry};
use crate::protocol::{format_millis, Delivery, ErrorBody, ErrorCode};

/// The append-only audit log of clear commits (one JSON line each), shared by every
/// introspection connection. Its lock also orders commits, so the log's lines follow the order
/// in which the clears applied.
pub struct AuditLog {
    path: PathBuf,
    pub(super) lock: tokio::sync::Mutex<()>,
}

impl AuditLog {
    /// The audit log at `path` (created on the first commit).
    pub fn new(path: PathBuf) -> AuditLog {
        AuditLog {
            path,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_for_append(&self) -> std::io::Result<std::fs::File> {
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        self.open(true)
    }

    /// Opens the log without following a symlink (`O_NOFOLLOW`), and only if it is a regular
    /// file of this user's that group and others cannot write: whoever could swap or write it
    /// could redirect or forge the record of what operators cleared.
    fn open(&self, append: bool) -> std::io::Result<std::fs::File> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let mut options = std::fs::OpenOptions::new();
        if append {
            options.create(true).append(true).mode(0o600);
        } else {
            options.read(true);
        }
        // Non-blocking, so a FIFO put in its place cannot hang the open.
        options.custom_flags(
            (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32,
        );
        let file = options.open(&self.path).map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                std::io::Error::other("it is a symbolic link, which Polaris does not follow; point --audit-log at a regular file")
            } else {
                e
            }
        })?;
        let meta = file.metadata()?;
        let me = crate::server::current_uid();
        if !meta.is_file() {
            return Err(std::io::Error::other(
                "it is not a regular file; point --audit-log at a regular file",
            ));
        }
        if meta.uid() != me {
            return Err(std::io::Error::other(format!(
                "it is owned by uid {}, not by the host's user (uid {me}); use a file of your own",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(std::io::Error::other(format!(
                "it is writable by group or others (mode {:o}); run `chmod 600` on it",
                meta.mode() & 0o777
            )));
        }
        Ok(file)
    }

    /// Checks an existing log as [`AuditLog`] opens it (no symlink, this user's, not writable
    /// by others), so a host that could never record a clear refuses to start instead.
    pub fn check(&self) -> std::io::Result<()> {
        match std::fs::symlink_metadata(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(_) => self.open(false).map(drop),
        }
    }

    /// The last `limit` entries, newest first. Reads the file from its end, so a long log costs
    /// only what is shown. Lines that are not audit entries are skipped.
    pub fn recent(&self, limit: usize) -> std::io::Result<Vec<AuditEntry>> {
        let mut file = match self.open(false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let len = file.seek(SeekFrom::End(0))?;
        let mut chunk: u64 = 64 * 1024;
        loop {
            let start = len.saturating_sub(chunk);
            file.seek(SeekFrom::Start(start))?;
            let mut buf = Vec::with_capacity((len - start) as usize);
            (&mut file).take(len - start).read_to_end(&mut buf)?;
            let mut lines: Vec<&[u8]> = buf
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            if start > 0 {
                // The first line may be cut; it only counts once the whole file is read.
                if lines.len() <= limit {
                    chunk = chunk.saturating_mul(4);
                    continue;
                }
                lines.remove(0);
            }
            return Ok(lines
                .iter()
                .rev()
                .filter_map(|l| serde_json::from_slice::<AuditEntry>(l).ok())
                .take(limit)
                .collect());
        }
    }
}

/// The operator name recorded when a commit names none: the OS user running the host (the
/// only user its sockets accept).
pub fn os_user_name() -> String {
    for var in ["USER", "LOGNAME"] {
        if let Some(u) = std::env::var_os(var)
            .and_then(|u| u.into_string().ok())
            .filter(|u| !u.is_empty())
        {
            return u;
        }
    }
    format!("uid:{}", crate::server::current_uid())
}

pub(super) fn audit_entry(
    host: &Host,
    done: &CommittedClear,
    operator: &str,
    reason: &str,
) -> AuditEntry {
    let cleared = done
        .cleared
        .iter()
        .map(|c| AuditCleared {
            code: c.code,
            method: c.method.as_str().to_owned(),
            ok: c.code.is_none(),
            request_id: c.request_id.clone(),
            task_id: c.task_id.as_deref().map(str::to_owned),
        })
        .collect();
    AuditEntry {
        at: format_millis(done.at),
        cleared,
        operator: operator.to_owned(),
        reason: reason.to_owned(),
        run_id: host.run_id().to_owned(),
        acknowledged: None,
        stopped: None,
    }
}

/// Opens the audit log for one entry, off the runtime's workers. An operator action is refused
/// (nothing `what`) when its line could not be written: one nobody can account for is worse.
pub(super) async fn open_audit(
    audit: &Arc<AuditLog>,
    what: &str,
) -> Result<std::fs::File, ErrorBody> {
    let opener = audit.clone();
    tokio::task::spawn_blocking(move || opener.open_for_append())
        .await
        .expect("opening the audit log does not panic")
        .map_err(|e| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!(
                    "could not open the audit log {} ({e}); nothing was {what}. Fix its directory or start the host with another --audit-log",
                    audit.path().display()
                ),
            )
            .with_delivery(Delivery::NotExecuted)
        })
}

/// Appends one entry as a line and makes it durable, off the runtime's workers.
pub(super) async fn append_audit(file: std::fs::File, entry: &AuditEntry) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(entry).expect("JSON serialises");
    line.push(b'\n');
    write_line(file, line).await
}

/// [`append_audit`] for an entry that `build` makes: building, serialising, writing and
/// freeing it all happen off the runtime's workers. A clear of a million receipts is an entry
/// of tens of megabytes; doing that on a worker held up agents' requests on it for hundreds of
/// milliseconds.
pub(super) async fn append_audit_with(
    file: std::fs::File,
    build: impl FnOnce() -> AuditEntry + Send + 'static,
) -> std::io::Result<()> {
    tokio::task::spawn_blocking(move || {
        let entry = build();
        let mut line = serde_json::to_vec(&entry).expect("JSON serialises");
        drop(entry);
        line.push(b'\n');
        let mut file = file;
        file.write_all(&line).and_then(|_| file.sync_data())
    })
    .await
    .expect("writing the audit log does not panic")
}

async fn write_line(file: std::fs::File, line: Vec<u8>) -> std::io::Result<()> {
    tokio::task::spawn_blocking(move || {
        let mut file = file;
        file.write_all(&line).and_then(|_| file.sync_data())
    })
    .await
    .expect("writing the audit log does not panic")
}
