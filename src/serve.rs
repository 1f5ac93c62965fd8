//! `polaris serve`: the host behind the bridge socket and the introspection service behind the
//! operator's socket, started together and stopped together.
//!
//! This is the one module that knows both services and the server: it sits above them, so the
//! server stays generic over [`Service`] and the introspection service can use the server's
//! types without the server depending back on it.

use std::path::{Path, PathBuf};
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
    fn handle_frames(
        &self,
        frames: &[&[u8]],
        room: usize,
        _conn: &Connection,
        out: &mut Vec<Handled>,
    ) {
        Host::handle_frames(self, frames, room, out)
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
    start_journaled(options, executor, None)
}

/// Where `polaris serve` keeps its journal: `--journal DIR`, else the default directory keyed
/// by the socket directory (SPEC §11); `None` with `--no-journal`.
pub fn journal_dir(
    socket_dir: &Path,
    explicit: Option<&Path>,
    disabled: bool,
) -> Result<Option<PathBuf>, ServeError> {
    if disabled {
        return Ok(None);
    }
    if let Some(d) = explicit {
        return Ok(Some(d.to_owned()));
    }
    // The key is taken from the canonical path, so the socket directory must exist first.
    prepare_socket_dir(socket_dir)?;
    crate::journal::default_dir(socket_dir)
        .map(Some)
        .map_err(journal_error("choosing the journal directory"))
}

/// A journal error as `polaris serve` reports it (the journal's message names the directory or
/// file and what to do).
fn journal_error(what: &'static str) -> impl FnOnce(crate::journal::Error) -> ServeError {
    move |e| ServeError::Io {
        what: what.to_owned(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// [`start`] with a durable journal in `journal` (`None`: receipts live for the run). The
/// journal is opened (and locked) before the sockets are bound, and everything it holds is
/// recovered before the first request is read.
pub fn start_journaled(
    options: &ServeOptions,
    executor: Arc<dyn Executor>,
    journal: Option<PathBuf>,
) -> Result<Running, ServeError> {
    let (bridge_path, introspect_path) = prepare_sockets(options)?;
    let host = match &journal {
        None => Host::new(options.host.clone(), executor),
        Some(jdir) => {
            let began = std::time::Instant::now();
            let (journal, recovered) =
                crate::journal::Journal::open(jdir, crate::journal::Options::default())
                    .map_err(journal_error("opening the journal"))?;
            let receipts = recovered.receipts.len();
            let tombstones = recovered.tombstones.len();
            let host = Host::with_journal(options.host.clone(), executor, journal, recovered)
                .map_err(journal_error("recovering the journal"))?;
            tracing::info!(
                journal = %jdir.display(),
                receipts,
                tombstones,
                ms = began.elapsed().as_millis() as u64,
                "journal recovered"
            );
            host
        }
    };
    serve_host(options, host, bridge_path, introspect_path)
}

/// Checks the audit log and the socket directory and takes over stale socket files: what
/// every way of starting a host does first. Returns the two socket paths.
fn prepare_sockets(options: &ServeOptions) -> Result<(PathBuf, PathBuf), ServeError> {
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
    Ok((bridge_path, introspect_path))
}

/// How `polaris serve --ledger` joins a fleet (SPEC §13).
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// The libpq connection string of the ledger's PostgreSQL.
    pub conninfo: String,
    /// This host's name in the fleet (`--host-id`; default the machine's hostname).
    pub host_id: String,
    /// The lease (`--lease-ms`).
    pub lease: Duration,
    /// Connections to PostgreSQL (`--ledger-connections`).
    pub connections: usize,
    /// Supersede a live run holding `host_id` (`--take-over-host-id`) instead of refusing.
    pub take_over: bool,
    /// The database password read from `--ledger-password-file`.
    pub password: Option<String>,
}

/// Where `polaris serve` keeps its receipts.
#[derive(Clone, Debug)]
pub enum Store {
    /// In memory only (`--no-journal`): a restart forgets them.
    Memory,
    /// In the journal in this directory (SPEC §11).
    Journal(PathBuf),
    /// In the fleet ledger (SPEC §13).
    Ledger(FleetOptions),
}

/// [`start`] for a host of a fleet: joins the ledger (applying its migrations, registering
/// this run with a fresh epoch) before the sockets are bound.
pub async fn start_fleet(
    options: &ServeOptions,
    executor: Arc<dyn Executor>,
    fleet: &FleetOptions,
) -> Result<Running, ServeError> {
    let (bridge_path, introspect_path) = prepare_sockets(options)?;
    let run_id = uuid::Uuid::new_v4().to_string();
    let config = crate::ledger::LedgerConfig {
        conninfo: fleet.conninfo.clone(),
        host_id: fleet.host_id.clone(),
        run_id: run_id.clone(),
        take_over: fleet.take_over,
        password: fleet.password.clone(),
        socket: bridge_path.display().to_string(),
        lease: fleet.lease,
        connections: fleet.connections.max(1),
        capacity: options.host.capacity,
        tombstone_capacity: options.host.tombstone_capacity,
        interrupted_reply: crate::host::interrupted_reply(),
    };
    let ledger = crate::ledger::Ledger::open(config)
        .await
        .map_err(|e| ServeError::Io {
            what: "joining the fleet ledger".to_owned(),
            source: std::io::Error::other(e.to_string()),
        })?;
    tracing::info!(
        host_id = ledger.host_id(),
        epoch = ledger.epoch(),
        capacity = ledger.capacity(),
        "joined the fleet ledger"
    );
    let host = Host::with_ledger(run_id, options.host.clone(), executor, ledger);
    host.report_load_to_ledger();
    serve_host(options, host, bridge_path, introspect_path)
}

/// Binds both sockets for `host` and starts accepting.
fn serve_host(
    options: &ServeOptions,
    host: Host,
    bridge_path: PathBuf,
    introspect_path: PathBuf,
) -> Result<Running, ServeError> {
    let dir = &options.socket_dir;
    let bridge = bind(&bridge_path)?;
    let introspect = bind(&introspect_path)?;

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
        capacity = host.config().capacity,
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
        if let Some(ledger) = self.host.ledger() {
            // Leaving cleanly: the fleet need not wait a lease to know this run is gone.
            match tokio::time::timeout(Duration::from_secs(5), ledger.leave()).await {
                Ok(Ok(())) => tracing::info!("left the fleet ledger"),
                Ok(Err(e)) => tracing::warn!("leaving the fleet ledger: {e}"),
                Err(_) => tracing::warn!("leaving the fleet ledger took too long; the others will see this run's lease lapse"),
            }
        }
        let _ = self.shutdown.send(true);
        self.tracker.close();
        if tokio::time::timeout(Duration::from_secs(2), self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("some connections did not drain their replies in time");
        }
        if let Some(journal) = self.host.journal() {
            let journal = journal.clone();
            let failed = self.host.journal_failure().borrow().is_some();
            match tokio::task::spawn_blocking(move || journal.close()).await {
                Ok(Ok(())) => tracing::info!("journal closed; everything stored is durable"),
                // Already said, once, when it failed.
                Ok(Err(_)) if failed => {}
                Ok(Err(e)) => tracing::error!("closing the journal: {e}"),
                Err(e) => tracing::error!("closing the journal: {e}"),
            }
        }
    }
}

/// A signal before the host was ready: it has answered nobody, so it ends at once, as the
/// signal's default would have ended it (exit status 128 + the signal's number). A journal cut
/// short in its recovery is recovered by the next start, as after any kill.
fn ended_while_starting(name: &str, signal: rustix::process::Signal) -> ! {
    tracing::warn!("{name} before the host was ready: ending without serving");
    std::process::exit(128 + signal.as_raw())
}

/// `polaris serve` itself: serves with the given executor until SIGINT or SIGTERM, then
/// stops gracefully and shuts the executor down.
/// A journal that fails, or a lost lease on the fleet ledger, stops it (the error says why;
/// the exit is non-zero).
pub async fn run(
    options: ServeOptions,
    executor: Arc<dyn Executor>,
    store: Store,
) -> Result<(), ServeError> {
    // Before the sockets exist: a host that has answered anyone stops gracefully on a signal,
    // however soon after its start the signal comes; one still starting (recovering its
    // journal, joining the ledger: either can take a while) ends at once, having served nobody.
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|source| ServeError::Io {
            what: format!("installing the {name} handler"),
            source,
        })
    };
    let mut term = listen(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = listen(SignalKind::interrupt(), "SIGINT")?;
    let journal = match &store {
        Store::Journal(dir) => Some(dir.clone()),
        Store::Memory | Store::Ledger(_) => None,
    };
    let starting = async {
        if let Store::Ledger(fleet) = &store {
            return start_fleet(&options, executor.clone(), fleet).await;
        }
        // Recovery reads the whole journal: off this thread, so a signal is heard.
        let (options, executor) = (options.clone(), executor.clone());
        tokio::task::spawn_blocking(move || start_journaled(&options, executor, journal))
            .await
            .map_err(|e| ServeError::Io {
                what: "starting the host".to_owned(),
                source: std::io::Error::other(e.to_string()),
            })?
    };
    let running = tokio::select! {
        // A start that completed goes first: a signal that came meanwhile then stops it
        // gracefully, below.
        biased;
        started = starting => started?,
        _ = term.recv() => ended_while_starting("SIGTERM", rustix::process::Signal::TERM),
        _ = interrupt.recv() => ended_while_starting("SIGINT", rustix::process::Signal::INT),
    };
    let mut failure = running.host.journal_failure();
    tokio::select! {
        _ = interrupt.recv() => tracing::info!("SIGINT: stopping"),
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = failure.wait_for(Option::is_some) => {}
    }
    let failed = running.host.journal_failure().borrow().clone();
    running.stop().await;
    executor.shutdown();
    match failed {
        None => Ok(()),
        Some(why) => Err(ServeError::Io {
            what: "stopped".to_owned(),
            source: std::io::Error::other(why),
        }),
    }
}
