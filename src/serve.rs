//! `polaris serve`: the host behind the bridge socket and the introspection service behind the
//! operator's socket, started together and stopped together.
//!
//! This is the one module that knows both services and the server: it sits above them, so the
//! server stays generic over [`Service`] and the introspection service can use the server's
//! types without the server depending back on it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};

use crate::executor::Executor;
use crate::host::{Handled, Host, HostConfig};
use crate::introspect::{AuditLog, Introspect};
use crate::server::{
    accept_loop, bind, prepare_socket_dir, reclaim_socket_path, Connection, Limits, ServeError,
    Service, BRIDGE_SOCKET, INTROSPECT_SOCKET,
};

/// The bridge socket speaks the host's protocol: each frame is a request to the host.
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

/// Everything `polaris serve` needs, gathered from the command line, so the demo and the
/// tests start the same host the command does.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where the sockets live.
    pub socket_dir: PathBuf,
    /// The host's rules.
    pub host: HostConfig,
    /// Limits of each socket.
    pub limits: Limits,
    /// Where clear commits are recorded.
    pub audit_log: PathBuf,
}

/// A running server: its host (tests and the demo inspect it), and the handle that stops it
/// gracefully.
pub struct Running {
    /// The host behind the sockets.
    pub host: Host,
    /// Flipped first when stopping: the accept loops end, open connections keep being read.
    stop_accepting: watch::Sender<bool>,
    /// Flipped once executions are done: connections stop reading and drain their replies.
    shutdown: watch::Sender<bool>,
    /// Every connection's task, so stopping can wait for their replies to be written.
    tracker: tokio_util::task::TaskTracker,
    /// The two accept loops, awaited so the listeners are closed before the files go.
    accept_loops: Vec<tokio::task::JoinHandle<()>>,
    /// The socket files, removed on stop so clients learn at once that nobody listens.
    socket_paths: Vec<PathBuf>,
}

/// Prepares the socket directory, binds both sockets and starts serving. Returns once the
/// sockets accept connections. Apart from [`run`] so the demo, the tests and the benchmarks
/// can serve with an executor of their own and stop when they choose.
pub fn start(options: &ServeOptions, executor: Arc<dyn Executor>) -> Result<Running, ServeError> {
    let dir = &options.socket_dir;
    AuditLog::new(options.audit_log.clone())
        .check()
        .map_err(|source| ServeError::Io {
            what: format!("the audit log {}", options.audit_log.display()),
            source,
        })?;
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
            Introspect::new(host.clone(), options.audit_log.clone()),
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

/// `polaris serve` itself: serves with the given executor until SIGINT or SIGTERM, then
/// stops gracefully and shuts the executor down.
pub async fn run(options: ServeOptions, executor: Arc<dyn Executor>) -> Result<(), ServeError> {
    let running = start(&options, executor.clone())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| ServeError::Io {
            what: "installing the SIGTERM handler".into(),
            source,
        })?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
    }
    running.stop().await;
    executor.shutdown();
    Ok(())
}
