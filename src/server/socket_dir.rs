//! Where the sockets live, and whether it is safe to serve there.
//!
//! The sockets are the host's only access control: whoever can connect can submit actions and
//! clear receipts. So the directory must be this user's own, a real directory, closed to group
//! and others; each socket is bound `0600`; a symlink in place of a socket is refused; and a
//! socket file left by a crashed host is reclaimed only after checking that nobody answers on
//! it.

use std::io;
use std::path::{Path, PathBuf};

use interprocess::local_socket::tokio::{prelude::*, Listener};
use interprocess::local_socket::{GenericFilePath, ListenerOptions};

/// Why the server could not start or run, worded for the person starting it: each variant
/// says what is wrong and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket directory is not safe to use.
    #[error("socket directory {dir}: {problem}")]
    UnsafeDir {
        /// The directory.
        dir: PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// Another host answers on the socket.
    #[error("another Polaris host is already serving in {dir} ({socket} answers); stop it first, or start this one with another --socket-dir")]
    AlreadyRunning {
        /// The directory.
        dir: PathBuf,
        /// The socket that answered.
        socket: String,
    },
    /// An I/O error with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Io { what, source }
}

/// Where the sockets live: `--socket-dir`, else `$POLARIS_SOCKET_DIR`, else
/// `$XDG_RUNTIME_DIR/polaris`, else `/tmp/polaris-<uid>`. (`--socket-dir` and the variable
/// arrive together through clap.) One function, so the host and every client agree on it.
pub fn resolve_socket_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(d) = explicit {
        return d.to_path_buf();
    }
    if let Some(d) = std::env::var_os("POLARIS_SOCKET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("polaris");
    }
    PathBuf::from(format!("/tmp/polaris-{}", current_uid()))
}

/// The effective user ID of this process: the owner the socket directory must have, the only
/// peer the sockets accept, and the operator named in the audit log.
pub fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Checks every directory above the socket directory, as written and as resolved: each must
/// be owned by root or this user, and not writable by group or others unless sticky (as
/// `/tmp` is, where nobody can replace another's entries); a symlink on the way must be owned
/// by root or this user. Otherwise another user could swap a component and put their own
/// sockets where clients look for the host's.
fn check_ancestors(dir: &Path) -> Result<(), ServeError> {
    use std::os::unix::fs::MetadataExt;
    let unsafe_dir = |problem: String| ServeError::UnsafeDir {
        dir: dir.to_path_buf(),
        problem,
    };
    let me = current_uid();
    let trusted = |uid: u32| uid == 0 || uid == me;
    let absolute = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io_err("reading the working directory"))?
            .join(dir)
    };
    let check_dir = |path: &Path, meta: &std::fs::Metadata| -> Result<(), ServeError> {
        if !trusted(meta.uid()) {
            return Err(unsafe_dir(format!(
                "{} on its path is owned by uid {}, who could replace what is below it; choose a --socket-dir whose parents belong to you or root",
                path.display(),
                meta.uid()
            )));
        }
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.mode() & 0o022 != 0 && !sticky {
            return Err(unsafe_dir(format!(
                "{} on its path is writable by group or others (mode {:o}), who could replace what is below it; choose another --socket-dir",
                path.display(),
                meta.mode() & 0o7777
            )));
        }
        Ok(())
    };
    let Some(parent) = absolute.parent() else {
        return Ok(());
    };
    // As written: symlinks on the way must be trusted, and so must the directories.
    let mut prefix = PathBuf::new();
    for part in parent.components() {
        prefix.push(part);
        let meta = match std::fs::symlink_metadata(&prefix) {
            Ok(m) => m,
            // Missing parts are created below, by this user.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(format!("inspecting {}", prefix.display()))(e)),
        };
        if meta.file_type().is_symlink() {
            if !trusted(meta.uid()) {
                return Err(unsafe_dir(format!(
                    "{} on its path is a symbolic link owned by uid {}, who could point it elsewhere; use a path without it",
                    prefix.display(),
                    meta.uid()
                )));
            }
            let target = std::fs::metadata(&prefix)
                .map_err(io_err(format!("following {}", prefix.display())))?;
            check_dir(&prefix, &target)?;
        } else {
            check_dir(&prefix, &meta)?;
        }
    }
    // As resolved: every directory the links lead through.
    let resolved =
        std::fs::canonicalize(parent).map_err(io_err(format!("resolving {}", parent.display())))?;
    let mut prefix = PathBuf::new();
    for part in resolved.components() {
        prefix.push(part);
        let meta = std::fs::symlink_metadata(&prefix)
            .map_err(io_err(format!("inspecting {}", prefix.display())))?;
        check_dir(&prefix, &meta)?;
    }
    Ok(())
}

/// Creates the socket directory `0700`, or checks an existing one: it must be a real directory
/// owned by this user and not writable by group or others, because anyone who could place a
/// file there could stand in for the host. Every directory above it is checked too
/// ([`check_ancestors`]).
pub fn prepare_socket_dir(dir: &Path) -> Result<(), ServeError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    check_ancestors(dir)?;
    let unsafe_dir = |problem: String| ServeError::UnsafeDir {
        dir: dir.to_path_buf(),
        problem,
    };
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .map_err(io_err(format!("creating {}", parent.display())))?;
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(io_err(format!(
                    "creating socket directory {}",
                    dir.display()
                )))?;
            // The mode passed to mkdir is filtered by the umask; set it exactly.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io_err(format!("setting mode 0700 on {}", dir.display())))?;
            Ok(())
        }
        Err(e) => Err(io_err(format!(
            "inspecting socket directory {}",
            dir.display()
        ))(e)),
        Ok(meta) => {
            if meta.file_type().is_symlink() {
                return Err(unsafe_dir(
                    "is a symbolic link; point --socket-dir at a real directory".into(),
                ));
            }
            if !meta.is_dir() {
                return Err(unsafe_dir(
                    "is not a directory; choose another --socket-dir".into(),
                ));
            }
            if meta.uid() != current_uid() {
                return Err(unsafe_dir(format!(
                    "is owned by uid {}, not by this user (uid {}); use a directory of your own",
                    meta.uid(),
                    current_uid()
                )));
            }
            if meta.mode() & 0o022 != 0 {
                return Err(unsafe_dir(format!(
                    "is writable by group or others (mode {:o}); run `chmod 700 {}` or choose another --socket-dir",
                    meta.mode() & 0o777,
                    dir.display()
                )));
            }
            Ok(())
        }
    }
}

/// Checks a socket path before binding: a symlink is refused, a live socket means another host
/// runs (two hosts would each keep their own receipts), a stale one (nobody answers) is
/// removed so a host that crashed can be restarted without manual cleanup.
pub fn reclaim_socket_path(dir: &Path, path: &Path) -> Result<(), ServeError> {
    use std::os::unix::fs::FileTypeExt;
    let name = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(format!("inspecting {}", path.display()))(e)),
        Ok(meta) if meta.file_type().is_symlink() => Err(ServeError::UnsafeDir {
            dir: dir.to_path_buf(),
            problem: format!(
                "{name} is a symbolic link; remove it (nothing of Polaris's is a link)"
            ),
        }),
        Ok(meta) if !meta.file_type().is_socket() => Err(ServeError::UnsafeDir {
            dir: dir.to_path_buf(),
            problem: format!("{name} exists and is not a socket; move it away"),
        }),
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => Err(ServeError::AlreadyRunning {
                dir: dir.to_path_buf(),
                socket: name,
            }),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "removing a stale socket nobody listens on");
                std::fs::remove_file(path)
                    .map_err(io_err(format!("removing stale socket {}", path.display())))
            }
            Err(e) => Err(io_err(format!("probing {}", path.display()))(e)),
        },
    }
}

/// Binds a listener `0600` on a socket path that [`reclaim_socket_path`] cleared, refusing a
/// path too long for a local socket with a message instead of an OS error.
pub fn bind(path: &Path) -> Result<Listener, ServeError> {
    use interprocess::os::unix::local_socket::ListenerOptionsExt;
    if path.as_os_str().len() > 100 {
        return Err(ServeError::UnsafeDir {
            dir: path.parent().unwrap_or(path).to_path_buf(),
            problem: format!(
                "the socket path {} is {} bytes long; local sockets allow about 100 — choose a shorter --socket-dir",
                path.display(),
                path.as_os_str().len()
            ),
        });
    }
    let name = path
        .to_fs_name::<GenericFilePath>()
        .map_err(io_err(format!("naming socket {}", path.display())))?;
    ListenerOptions::new()
        .name(name)
        .mode(0o600)
        .reclaim_name(true)
        .create_tokio()
        .map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => ServeError::AlreadyRunning {
                dir: path.parent().unwrap_or(path).to_path_buf(),
                socket: path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            },
            _ => io_err(format!("binding {}", path.display()))(e),
        })
}
