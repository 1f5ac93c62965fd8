//! The local-socket server: a private socket directory, the accept loops of the bridge and
//! introspection sockets, per-connection reading and writing with the frame and in-flight
//! limits, and graceful shutdown.
//!
//! Shaped after mini-redis: a semaphore bounds connections, each connection has a reader loop
//! and a writer task sharing one stream (`&Stream` implements both halves), and shutdown is a
//! watch channel every loop selects on.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use interprocess::local_socket::tokio::{prelude::*, Listener, Stream};
use interprocess::local_socket::{GenericFilePath, ListenerOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use crate::host::{Handled, Host};
use crate::protocol::{
    read_frame, ErrorBody, ErrorCode, FrameRead, Outcome, ReceiptKind, MAX_IN_FLIGHT_PER_CONNECTION,
};

/// Default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// The bridge socket's file name.
pub const BRIDGE_SOCKET: &str = "bridge.sock";
/// The introspection socket's file name.
pub const INTROSPECT_SOCKET: &str = "introspect.sock";

/// Why the server could not start or run.
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
/// arrive together through clap.)
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

/// The effective user ID of this process.
pub fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates the socket directory `0700`, or checks an existing one: it must be a real directory
/// owned by this user and not writable by group or others.
pub fn prepare_socket_dir(dir: &Path) -> Result<(), ServeError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
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
/// runs, a stale one (nobody answers) is removed.
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

/// Binds a listener `0600` on a socket path that [`reclaim_socket_path`] cleared.
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

/// A line to write, and the in-flight slot it frees once written.
pub struct Outbound {
    /// The bytes, newline included.
    pub line: Vec<u8>,
    /// Released after the line is written, so a peer that does not read cannot make the host
    /// queue more than the in-flight limit of replies.
    pub permit: Option<OwnedSemaphorePermit>,
}

/// What a handler may use of its connection: the queue to the writer.
#[derive(Clone)]
pub struct Connection {
    /// Lines to write to the peer.
    pub out: mpsc::UnboundedSender<Outbound>,
    /// Flips to `true` when the host shuts down.
    pub shutdown: watch::Receiver<bool>,
}

/// A protocol spoken on one socket.
pub trait Service: Clone + Send + Sync + 'static {
    /// Handles one frame (without its newline).
    fn handle_frame(&self, frame: &[u8], conn: &Connection) -> Handled;
    /// Handles frames that arrived together, in order, pushing one answer per frame. A service
    /// whose requests share a lock can take it once for all of them; by default each frame is
    /// handled on its own.
    fn handle_frames(&self, frames: &[&[u8]], conn: &Connection, out: &mut Vec<Handled>) {
        out.extend(frames.iter().map(|f| self.handle_frame(f, conn)));
    }
    /// The run ID for replies written by the connection layer.
    fn run_id(&self) -> &str;
}

impl Service for Host {
    fn handle_frame(&self, frame: &[u8], _conn: &Connection) -> Handled {
        Host::handle_frame(self, frame)
    }
    fn handle_frames(&self, frames: &[&[u8]], _conn: &Connection, out: &mut Vec<Handled>) {
        Host::handle_frames(self, frames, out)
    }
    fn run_id(&self) -> &str {
        Host::run_id(self)
    }
}

/// Limits of one socket.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `--max-frame-bytes`
    pub max_frame_bytes: usize,
    /// `--max-connections`
    pub max_connections: usize,
}

/// Accepts connections until shutdown, at most `limits.max_connections` at once (beyond that
/// the accept waits, like mini-redis, until a connection closes).
pub async fn accept_loop<S: Service>(
    listener: Listener,
    service: S,
    limits: Limits,
    mut stop_accepting: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    connections: Arc<Semaphore>,
    tracker: tokio_util::task::TaskTracker,
) {
    let my_uid = current_uid();
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => p.expect("the connection semaphore is never closed"),
            _ = stop_accepting.wait_for(|s| *s) => break,
        };
        let stream = tokio::select! {
            s = listener.accept() => s,
            _ = stop_accepting.wait_for(|s| *s) => break,
        };
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Refuse other users where the OS tells who the peer is.
        match stream.peer_creds().map(|c| c.euid()) {
            Ok(Some(uid)) if uid != my_uid => {
                tracing::warn!(peer_uid = uid, "refused a connection from another user");
                continue;
            }
            _ => {}
        }
        let service = service.clone();
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            serve_connection(stream, service, limits, shutdown).await;
            drop(permit);
        });
    }
    drop(listener);
}

/// A reply that needs waiting (an execution, a slow read), and the in-flight slot it frees.
type LaterReply = (BoxFuture<'static, Vec<u8>>, OwnedSemaphorePermit);

/// A pending reply as the writer polls it: the line, then the slot is freed once written.
async fn owed(
    fut: BoxFuture<'static, Vec<u8>>,
    permit: OwnedSemaphorePermit,
) -> (Vec<u8>, OwnedSemaphorePermit) {
    (fut.await, permit)
}

/// Reads frames from one connection and hands them to the service. Replies that are ready at
/// once (replays, reads, rejections) are written by the reader itself, batched per read, so a
/// replay costs no hop to another task; replies that need waiting go to the writer task, which
/// polls them and writes each as it completes, in whatever order.
pub async fn serve_connection<S: Service>(
    stream: Stream,
    service: S,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) {
    let stream = Arc::new(stream);
    // The reader and the writer task both write; a line is always written whole under this lock.
    let write_lock = Arc::new(tokio::sync::Mutex::new(()));
    let (out, out_rx) = mpsc::unbounded_channel::<Outbound>();
    let (later_tx, later_rx) = mpsc::unbounded_channel::<LaterReply>();
    let (close_tx, close_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(write_loop(
        stream.clone(),
        write_lock.clone(),
        out_rx,
        later_rx,
        close_rx,
    ));
    let conn = Connection {
        out: out.clone(),
        shutdown: shutdown.clone(),
    };
    let inflight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let mut reader = BufReader::with_capacity(64 * 1024, &*stream);
    let mut buf = Vec::with_capacity(1024);
    // Ready replies not yet written, and the in-flight slots they free once written.
    let mut ready: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut ready_permits: Vec<OwnedSemaphorePermit> = Vec::new();
    let run_id = service.run_id().to_owned();
    let mut answers: Vec<Handled> = Vec::new();
    let error_line = |code: ErrorCode, message: &str| {
        Outcome::err(&ErrorBody::new(code, message)).reply_line(None, &run_id, ReceiptKind::None)
    };
    loop {
        // Before waiting — for more input, or for an in-flight slot that only a written reply
        // frees — write what is ready (the peer may be waiting for it).
        let would_wait =
            memchr::memchr(b'\n', reader.buffer()).is_none() || inflight.available_permits() == 0;
        if !ready.is_empty() && would_wait {
            let written = {
                let _guard = write_lock.lock().await;
                (&*stream).write_all(&ready).await.is_ok()
            };
            ready.clear();
            ready_permits.clear();
            if !written {
                break;
            }
        }
        // Waiting is raced against shutdown; what is at hand (a free slot, a whole line already
        // buffered) is taken at once, after a glance at the shutdown flag — registering with
        // the shutdown channel that every connection shares would cost more than the frame.
        if stopping(&shutdown) {
            break;
        }
        // Whole lines already buffered, with slots free for them, are handled together.
        let free = inflight.available_permits();
        if free > 1 {
            let buffered = reader.buffer();
            let mut frames: Vec<&[u8]> = Vec::new();
            let mut used = 0;
            while frames.len() < free {
                let rest = &buffered[used..];
                let Some(pos) = memchr::memchr(b'\n', rest) else {
                    break;
                };
                if pos > limits.max_frame_bytes {
                    // The one-frame path below refuses it.
                    break;
                }
                let frame = &rest[..pos];
                frames.push(frame.strip_suffix(b"\r").unwrap_or(frame));
                used += pos + 1;
            }
            if frames.len() > 1 {
                // Free now; awaiting them still counts against this task's scheduling budget.
                let mut permits = inflight
                    .clone()
                    .acquire_many_owned(frames.len() as u32)
                    .await
                    .expect("the in-flight semaphore is never closed");
                service.handle_frames(&frames, &conn, &mut answers);
                reader.consume(used);
                for answer in answers.drain(..) {
                    let permit = permits.split(1).expect("one slot per frame");
                    take_answer(answer, permit, &mut ready, &mut ready_permits, &later_tx);
                }
                continue;
            }
        }
        let permit = if inflight.available_permits() > 0 {
            // Free now; awaiting it (rather than trying) still counts against this task's
            // scheduling budget, so a connection with a full buffer yields to the others.
            inflight
                .clone()
                .acquire_owned()
                .await
                .expect("the in-flight semaphore is never closed")
        } else {
            tokio::select! {
                p = inflight.clone().acquire_owned() => p.expect("the in-flight semaphore is never closed"),
                _ = shutdown.wait_for(|s| *s) => break,
            }
        };
        let read = if memchr::memchr(b'\n', reader.buffer()).is_some() {
            read_frame(&mut reader, &mut buf, limits.max_frame_bytes).await
        } else {
            tokio::select! {
                r = read_frame(&mut reader, &mut buf, limits.max_frame_bytes) => r,
                _ = shutdown.wait_for(|s| *s) => break,
            }
        };
        match read {
            Ok(FrameRead::Frame) => {
                let answer = service.handle_frame(&buf, &conn);
                take_answer(answer, permit, &mut ready, &mut ready_permits, &later_tx);
                buf.clear();
            }
            Ok(FrameRead::TooLarge) => {
                let msg = format!(
                    "the frame is longer than {} bytes; send smaller requests or start the host with a larger --max-frame-bytes. The connection is closed",
                    limits.max_frame_bytes
                );
                ready.extend_from_slice(&error_line(ErrorCode::FrameTooLarge, &msg));
                break;
            }
            Ok(FrameRead::Partial) => {
                ready.extend_from_slice(&error_line(
                    ErrorCode::BadRequest,
                    "the connection closed in the middle of a frame; nothing of it was executed. End every request with a newline",
                ));
                break;
            }
            Ok(FrameRead::Eof) => break,
            Err(e) => {
                tracing::debug!("connection read failed: {e}");
                break;
            }
        }
    }
    // Hand the ready replies not written yet to the writer, which writes them before closing.
    if !ready.is_empty() {
        let _ = out.send(Outbound {
            line: std::mem::take(&mut ready),
            permit: None,
        });
        ready_permits.clear();
    }
    drop(later_tx);
    // Let the replies of requests already accepted reach the peer (their executions run on
    // regardless), bounded so a stuck peer cannot hold the connection forever.
    let drain = inflight.acquire_many(MAX_IN_FLIGHT_PER_CONNECTION as u32);
    let _ = tokio::time::timeout(Duration::from_secs(30), drain).await;
    let _ = close_tx.send(());
    let _ = writer.await;
}

/// Queues one frame's answer: a ready reply joins the lines the reader writes next, holding its
/// in-flight slot until written; a later one goes to the writer, which writes it when it is done.
fn take_answer(
    answer: Handled,
    permit: OwnedSemaphorePermit,
    ready: &mut Vec<u8>,
    ready_permits: &mut Vec<OwnedSemaphorePermit>,
    later_tx: &mpsc::UnboundedSender<LaterReply>,
) {
    match answer {
        Handled::Ready(line) => {
            ready.extend_from_slice(&line);
            ready_permits.push(permit);
        }
        Handled::Later(fut) => {
            if let Err(mpsc::error::SendError((fut, permit))) = later_tx.send((fut, permit)) {
                // The writer is gone (the peer stopped reading): the work still runs to its
                // end, detached, as it would have with a live peer.
                tokio::spawn(async move {
                    fut.await;
                    drop(permit);
                });
            }
        }
    }
}

/// Whether shutdown has begun (or its sender is gone), read without registering as a waiter.
fn stopping(shutdown: &watch::Receiver<bool>) -> bool {
    match shutdown.has_changed() {
        Ok(false) => false,
        Ok(true) => *shutdown.borrow(),
        Err(_) => true,
    }
}

/// Writes queued lines and the replies of pending futures as they complete, batching whatever
/// is ready into one write. Ends when told to close (after writing everything queued before
/// that and every pending reply) or when the peer is gone; pending replies then still run to
/// their end, detached, so no work is ever cancelled by a connection.
async fn write_loop(
    stream: Arc<Stream>,
    write_lock: Arc<tokio::sync::Mutex<()>>,
    mut rx: mpsc::UnboundedReceiver<Outbound>,
    mut later_rx: mpsc::UnboundedReceiver<LaterReply>,
    mut close: tokio::sync::oneshot::Receiver<()>,
) {
    let mut pending = FuturesUnordered::new();
    let mut batch: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut permits = Vec::new();
    let mut closing = false;
    let mut later_open = true;
    loop {
        batch.clear();
        if closing {
            while let Ok((fut, permit)) = later_rx.try_recv() {
                pending.push(owed(fut, permit));
            }
            while let Ok(o) = rx.try_recv() {
                batch.extend_from_slice(&o.line);
                permits.push(o.permit);
            }
            if batch.is_empty() {
                if pending.is_empty() {
                    return;
                }
                // Replies still owed: wait for the next one.
                if let Some((line, permit)) = pending.next().await {
                    batch.extend_from_slice(&line);
                    permits.push(Some(permit));
                }
            }
        } else {
            tokio::select! {
                biased;
                o = rx.recv() => match o {
                    Some(o) => {
                        batch.extend_from_slice(&o.line);
                        permits.push(o.permit);
                    }
                    None => closing = true,
                },
                Some((line, permit)) = pending.next(), if !pending.is_empty() => {
                    batch.extend_from_slice(&line);
                    permits.push(Some(permit));
                }
                l = later_rx.recv(), if later_open => match l {
                    Some((fut, permit)) => pending.push(owed(fut, permit)),
                    None => later_open = false,
                },
                _ = &mut close => closing = true,
            }
        }
        // Take whatever else is ready without waiting.
        while batch.len() < 256 * 1024 {
            if let Ok((fut, permit)) = later_rx.try_recv() {
                pending.push(owed(fut, permit));
                continue;
            }
            if let Ok(o) = rx.try_recv() {
                batch.extend_from_slice(&o.line);
                permits.push(o.permit);
                continue;
            }
            match futures::FutureExt::now_or_never(pending.next()) {
                Some(Some((line, permit))) => {
                    batch.extend_from_slice(&line);
                    permits.push(Some(permit));
                }
                _ => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let written = {
            let _guard = write_lock.lock().await;
            (&*stream).write_all(&batch).await.is_ok()
        };
        permits.clear();
        if !written {
            // The peer is gone; what it asked for still runs to its end.
            while let Ok((fut, permit)) = later_rx.try_recv() {
                pending.push(owed(fut, permit));
            }
            if !pending.is_empty() {
                tokio::spawn(async move { while pending.next().await.is_some() {} });
            }
            return;
        }
    }
}

/// Everything `polaris serve` needs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where the sockets live.
    pub socket_dir: PathBuf,
    /// The host's rules.
    pub host: crate::host::HostConfig,
    /// Limits of each socket.
    pub limits: Limits,
    /// Where clear commits are recorded.
    pub audit_log: PathBuf,
}

/// A running server: its host, and the handle that stops it.
pub struct Running {
    /// The host behind the sockets.
    pub host: Host,
    stop_accepting: watch::Sender<bool>,
    shutdown: watch::Sender<bool>,
    tracker: tokio_util::task::TaskTracker,
    accept_loops: Vec<tokio::task::JoinHandle<()>>,
    socket_paths: Vec<PathBuf>,
}

/// Prepares the socket directory, binds both sockets and starts serving. Returns once the
/// sockets accept connections.
pub fn start(
    options: &ServeOptions,
    executor: Arc<dyn crate::executor::Executor>,
) -> Result<Running, ServeError> {
    let dir = &options.socket_dir;
    prepare_socket_dir(dir)?;
    let bridge_path = dir.join(BRIDGE_SOCKET);
    let introspect_path = dir.join(INTROSPECT_SOCKET);
    reclaim_socket_path(dir, &bridge_path)?;
    reclaim_socket_path(dir, &introspect_path)?;
    let bridge = bind(&bridge_path)?;
    let introspect = bind(&introspect_path)?;

    let host = Host::new(options.host.clone(), executor);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let (stop_accepting, stop_rx) = watch::channel(false);
    let tracker = tokio_util::task::TaskTracker::new();
    let accept_loops = vec![
        tokio::spawn(accept_loop(
            bridge,
            host.clone(),
            options.limits,
            stop_rx.clone(),
            shutdown_rx.clone(),
            Arc::new(Semaphore::new(options.limits.max_connections)),
            tracker.clone(),
        )),
        tokio::spawn(accept_loop(
            introspect,
            crate::introspect::Introspect::new(host.clone(), options.audit_log.clone()),
            options.limits,
            stop_rx,
            shutdown_rx,
            Arc::new(Semaphore::new(options.limits.max_connections)),
            tracker.clone(),
        )),
    ];
    tracing::info!(
        dir = %dir.display(),
        run_id = host.run_id(),
        capacity = options.host.capacity,
        "polaris host ready"
    );
    Ok(Running {
        host,
        stop_accepting,
        shutdown,
        tracker,
        accept_loops,
        socket_paths: vec![bridge_path, introspect_path],
    })
}

impl Running {
    /// Stops gracefully: no new connections or mutations, running executions finish (or are
    /// reported by request ID), replies already owed are written, the socket files are removed.
    pub async fn stop(self) {
        self.host.begin_shutdown();
        // Closing the listeners removes the socket files, so new clients learn at once that
        // nothing listens (their requests are `not_sent`). Open connections keep being read:
        // their mutations get SHUTTING_DOWN, their reads and re-queries are answered.
        let _ = self.stop_accepting.send(true);
        for l in self.accept_loops {
            let _ = l.await;
        }
        for p in &self.socket_paths {
            let _ = std::fs::remove_file(p);
        }
        let grace = self.host.config().action_timeout + Duration::from_secs(1);
        let unfinished = self.host.wait_idle(grace).await;
        if unfinished.is_empty() {
            tracing::info!("every execution finished; replies are stored");
        } else {
            tracing::error!(
                count = unfinished.len(),
                request_ids = ?unfinished,
                "executions still running at shutdown; their outcome is unknown to callers"
            );
        }
        let _ = self.shutdown.send(true);
        self.tracker.close();
        if tokio::time::timeout(Duration::from_secs(2), self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("some connections did not drain their replies in time");
        }
    }
}

/// Serves until SIGINT or SIGTERM, then stops gracefully and shuts the executor down.
pub async fn serve(
    options: ServeOptions,
    executor: Arc<dyn crate::executor::Executor>,
) -> Result<(), ServeError> {
    let running = start(&options, executor.clone())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(io_err("installing the SIGTERM handler"))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
    }
    running.stop().await;
    executor.shutdown();
    Ok(())
}
