//! The command line: each subcommand is a thin call into the modules above.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use crate::client::BridgeClient;
use crate::host::{
    HostConfig, DEFAULT_ACTION_TIMEOUT_MS, DEFAULT_CAPACITY, DEFAULT_TOMBSTONE_CAPACITY,
};
use crate::protocol::introspection::{ReceiptFilter, Sort, StateFilter};
use crate::protocol::DEFAULT_MAX_FRAME_BYTES;
use crate::serve::ServeOptions;
use crate::server::{
    resolve_socket_dir, Limits, DEFAULT_FRAME_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PENDING_REPLY_BYTES,
};

/// Polaris: one request ID executes at most once; uncertain outcomes are read, never resent.
#[derive(Debug, Parser)]
#[command(name = "polaris", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: CliCommand,
}

/// Where the host's sockets are.
#[derive(Debug, Args, Clone)]
pub struct SocketDir {
    /// Directory of bridge.sock and introspect.sock [default: $POLARIS_SOCKET_DIR, else
    /// $XDG_RUNTIME_DIR/polaris, else /tmp/polaris-<uid>]
    #[arg(long, value_name = "DIR", global = true)]
    pub socket_dir: Option<PathBuf>,
}

impl SocketDir {
    /// The resolved directory.
    pub fn resolve(&self) -> PathBuf {
        resolve_socket_dir(self.socket_dir.as_deref())
    }
}

#[derive(Debug, Subcommand)]
enum CliCommand {
    /// Run the host: the receipt book, the tasks and the executor (the fixture page, or real
    /// pages in Chromium) behind local sockets.
    Serve(Box<ServeArgs>),
    /// Send one request to the host and print the reply (exit 0 ok, 1 error reply, 3 host
    /// unavailable or connection lost).
    Call(CallArgs),
    /// The operator console: receipts, capacity, tasks and blocked outcomes, live; verify and
    /// clear from the keyboard (press ? inside for the keys).
    Console(ConsoleArgs),
    /// A host with the fixture executor, simulated agents and the console, in one process.
    Demo(DemoArgs),
    /// List the host's receipts, newest first: state, result, copies, and whether each may be
    /// cleared (exit 0 ok, 1 error reply, 3 host unavailable).
    Receipts(ReceiptsArgs),
    /// Verify a blocked task's uncertain outcome: a read-only check of the action's original
    /// expectation (exit 0 settled, 1 not_observed, unknown or an error reply, 2 usage,
    /// 3 host unavailable).
    Verify(VerifyArgs),
    /// Clear completed receipts deliberately to free capacity: prepare, show their current
    /// results, confirm (or --yes --reason in scripts), commit; recorded in the audit log
    /// (exit 0 done, 1 refused, declined or partly refused, 2 usage, 3 host unavailable).
    Clear(ClearArgs),
    /// The audit log, newest first: who cleared which receipts, when and why; --request finds
    /// the clear that removed one ID (exit 0 ok, 1 no such clear, 3 host unavailable).
    Audit(AuditArgs),
    /// Serve the host's tools to an MCP client on stdin/stdout (register this command with
    /// your agent); logs go to stderr.
    Mcp(McpArgs),
    /// Record that an uncertain outcome (OUTCOME_UNCERTAIN or INTERRUPTED) was settled outside
    /// Polaris, so its receipt may be cleared; audited, journaled, executes nothing (exit 0
    /// done, 1 refused, 3 host unavailable).
    Acknowledge(AcknowledgeArgs),
    /// The host's journal.
    #[command(subcommand)]
    Journal(JournalCommand),
}

#[derive(Debug, Subcommand)]
enum JournalCommand {
    /// Read the journal without starting a host (or disturbing a running one): its counts and
    /// integrity (exit 0 sound, 1 damaged or unreadable, 2 usage).
    Check(JournalCheckArgs),
}

#[derive(Debug, Args)]
struct JournalCheckArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// The journal directory [default: the one `polaris serve` uses for the socket directory].
    #[arg(long, value_name = "DIR")]
    journal: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct AcknowledgeArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// The request ID whose outcome was settled (a unique prefix of 6 or more characters works).
    request_id: String,
    /// What was done to settle it (1-500 characters), for the audit log.
    #[arg(long)]
    reason: String,
    /// Who, for the audit log [default: the host's user].
    #[arg(long)]
    operator: Option<String>,
    /// Print the raw result as JSON.
    #[arg(long)]
    json: bool,
}

/// Which receipts to select.
#[derive(Debug, Args, Clone)]
struct FilterArgs {
    /// running, completed, ok, error or clearable
    #[arg(long, value_name = "STATE")]
    state: Option<StateFilter>,
    /// A method, e.g. page.click
    #[arg(long, value_name = "METHOD")]
    method: Option<String>,
    /// A task ID, or a unique prefix of at least 6 characters
    #[arg(long, value_name = "TASK_ID")]
    task: Option<String>,
    /// A substring of the request ID, method, task ID or error code
    #[arg(long, value_name = "TEXT")]
    search: Option<String>,
}

impl FilterArgs {
    fn filter(self) -> ReceiptFilter {
        ReceiptFilter {
            state: self.state,
            method: self.method,
            task_id: self.task,
            search: self.search,
        }
    }
}

#[derive(Debug, Args)]
struct ReceiptsArgs {
    #[command(flatten)]
    dir: SocketDir,
    #[command(flatten)]
    filter: FilterArgs,
    /// Print the raw receipts.list result as JSON.
    #[arg(long)]
    json: bool,
    /// newest, oldest, state, method or task
    #[arg(long, value_name = "KEY")]
    sort: Option<Sort>,
    /// Read the order from its end (oldest first, or the last group first).
    #[arg(long)]
    reverse: bool,
    /// Rows to show (at most 1000).
    #[arg(long, default_value_t = 100, value_name = "N")]
    limit: usize,
    /// Rows to skip.
    #[arg(long, default_value_t = 0, value_name = "N")]
    offset: usize,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// The blocked task: its ID, or a unique prefix of at least 6 characters.
    task_id: String,
    /// Print the raw task.verifyOutcome result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ClearArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// Request IDs to clear, or unique prefixes of at least 6 characters (or select with the
    /// filter options instead).
    ids: Vec<String>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Why, for the audit log (asked for on a terminal).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Who, for the audit log [default: the OS user]
    #[arg(long, value_name = "NAME")]
    operator: Option<String>,
    /// Commit without asking (with --reason; required when stdin is not a terminal).
    #[arg(long)]
    yes: bool,
}

#[derive(Debug, Args)]
struct AuditArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// Only the clear that removed this request ID (or a prefix of at least 6 characters).
    #[arg(long, value_name = "REQUEST_ID")]
    request: Option<String>,
    /// Entries to read, newest first (at most 1000).
    #[arg(long, default_value_t = 50, value_name = "N")]
    limit: usize,
    /// Print the audit.list result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ConsoleArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// Where the console logs [default: $XDG_STATE_HOME/polaris/console.log, else
    /// ~/.local/state/polaris/console.log]; never the screen.
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Look only: refuse the keys that would change the host (verify, stop, acknowledge,
    /// clear), for a console left open on a shared screen.
    #[arg(long)]
    read_only: bool,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Directory for the demo host's sockets [default: a fresh /tmp/polaris-demo-<pid>, removed
    /// on exit]. Other terminals can run `polaris console --socket-dir` against it.
    #[arg(long, value_name = "DIR")]
    socket_dir: Option<PathBuf>,
    /// The demo host's receipt capacity (small, so the book fills).
    #[arg(long, default_value_t = crate::console::demo::DEMO_CAPACITY, value_name = "N")]
    capacity: usize,
    /// Where the demo logs [default: as for `polaris console`].
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Drive real pages: the agents publish on a small web app (127.0.0.1) in headless
    /// Chromium instead of the fixture page.
    #[arg(long)]
    browser: bool,
    /// The Chromium binary for --browser [default: as for `polaris serve`].
    #[arg(long, value_name = "PATH", env = "POLARIS_CHROMIUM")]
    chromium: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct McpArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// How long a mutating tool call waits for its reply before answering
    /// {"state":"running","request_id":…}; the host finishes the call regardless.
    #[arg(long, default_value_t = crate::mcp::DEFAULT_CALL_WAIT_MS, value_name = "MS")]
    call_wait_ms: u64,
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// Hard receipt capacity: new mutating IDs are refused beyond it; nothing is evicted.
    #[arg(long, default_value_t = DEFAULT_CAPACITY, value_name = "N")]
    capacity: usize,
    /// Hard tombstone capacity for cleared receipts (and for the compact records of closed
    /// tasks whose receipts were all cleared).
    #[arg(long, default_value_t = DEFAULT_TOMBSTONE_CAPACITY, value_name = "N")]
    tombstone_capacity: usize,
    /// The bytes the receipt book may hold (canonical requests, stored replies, per-receipt
    /// overhead): new mutations are refused past it with RECEIPT_CAPACITY_FULL.
    #[arg(long, default_value_t = crate::book::DEFAULT_MAX_BOOK_BYTES, value_name = "BYTES")]
    max_book_bytes: usize,
    /// How long an action's effect may take to be observed (and a read to finish).
    #[arg(long, default_value_t = DEFAULT_ACTION_TIMEOUT_MS, value_name = "MS")]
    action_timeout_ms: u64,
    /// The longest request line accepted.
    #[arg(long, default_value_t = DEFAULT_MAX_FRAME_BYTES, value_name = "N")]
    max_frame_bytes: usize,
    /// Connections served at once per socket; one more is told HOST_BUSY and closed.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    max_connections: usize,
    /// How long a frame may take to arrive whole after its first byte (else FRAME_TIMEOUT).
    #[arg(long, default_value_t = DEFAULT_FRAME_TIMEOUT_MS, value_name = "MS")]
    frame_timeout_ms: u64,
    /// How long a connection with nothing in flight and no subscription stays open, and how
    /// long a peer may take no reply bytes before it is closed.
    #[arg(long, default_value_t = DEFAULT_IDLE_TIMEOUT_MS, value_name = "MS")]
    idle_timeout_ms: u64,
    /// Reply bytes a connection may have unwritten before the host stops reading it.
    #[arg(long, default_value_t = DEFAULT_MAX_PENDING_REPLY_BYTES, value_name = "N")]
    max_pending_reply_bytes: usize,
    /// Where clear commits are recorded [default: $XDG_STATE_HOME/polaris/audit.jsonl, else
    /// ~/.local/state/polaris/audit.jsonl]
    #[arg(long, value_name = "PATH")]
    audit_log: Option<PathBuf>,
    /// The journal directory [default: $XDG_STATE_HOME/polaris/journal/<key>, else
    /// ~/.local/state/polaris/journal/<key>; <key> from the socket directory].
    #[arg(long, value_name = "DIR", conflicts_with = "no_journal")]
    journal: Option<PathBuf>,
    /// Keep receipts in memory only: a restart forgets them.
    #[arg(long)]
    no_journal: bool,
    /// Keep receipts in a fleet ledger on PostgreSQL shared by every host of the fleet,
    /// instead of the local journal: a libpq connection string such as
    /// `host=/run/postgresql dbname=polaris` or `postgres://user@db/polaris` (docs/fleet.md).
    #[arg(long, value_name = "CONNSTR", conflicts_with_all = ["journal", "no_journal"])]
    ledger: Option<String>,
    /// This host's name in the fleet [default: the machine's hostname]. Each host needs its
    /// own: a start under a name that a live host holds is refused.
    #[arg(long, value_name = "NAME", requires = "ledger")]
    host_id: Option<String>,
    /// Start even though a live host holds this host ID: that host is superseded (its running
    /// requests become INTERRUPTED, and it stops). For replacing a host on purpose.
    #[arg(long, requires = "ledger")]
    take_over_host_id: bool,
    /// How long this host's hold on its running receipts lasts unrenewed (renewed every third
    /// of it); when it lapses, the other hosts declare its running receipts INTERRUPTED.
    #[arg(long, default_value_t = crate::ledger::DEFAULT_LEASE.as_millis() as u64, value_name = "MS")]
    lease_ms: u64,
    /// Read the ledger's database password from FILE (its first line; the file must be
    /// yours and not readable by group or others) instead of writing it in --ledger, where
    /// anyone who can list processes sees it.
    #[arg(long, value_name = "FILE", requires = "ledger")]
    ledger_password_file: Option<PathBuf>,
    /// Connections this host keeps to the ledger's PostgreSQL.
    #[arg(long, default_value_t = crate::ledger::DEFAULT_CONNECTIONS, value_name = "N")]
    ledger_connections: usize,
    /// (testing aid) Record every applied fixture submit as a JSON line in FILE, fsynced
    /// before the submit counts.
    #[arg(long, value_name = "FILE")]
    fixture_effects: Option<PathBuf>,
    #[command(flatten)]
    executor: ExecutorArgs,
}

/// Which executor performs the actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExecutorKind {
    /// The embedded fixture form page per task.
    Fixture,
    /// Real pages in a headless Chromium; task.start needs a url.
    Chromium,
}

#[derive(Debug, Args)]
struct ExecutorArgs {
    /// The page backend.
    #[arg(long, value_enum, default_value_t = ExecutorKind::Fixture)]
    executor: ExecutorKind,
    /// The Chromium binary [default: $POLARIS_CHROMIUM, else the first of
    /// chromium-headless-shell, chromium, google-chrome found]
    #[arg(long, value_name = "PATH", env = "POLARIS_CHROMIUM")]
    chromium: Option<PathBuf>,
    /// The only directory page.upload takes files from (Chromium executor): names are relative
    /// to it, and anything resolving outside it (symlinks included) is refused. Without it,
    /// uploads are refused.
    #[arg(long, value_name = "DIR")]
    upload_dir: Option<PathBuf>,
    /// The only directory saved logins (profiles) are kept in (Chromium executor): task.start
    /// takes a `profile` name from it, task.saveProfile writes one to it. Without it, both
    /// are refused.
    #[arg(long, value_name = "DIR")]
    profile_dir: Option<PathBuf>,
    /// Let tasks open local files (file: URLs) from DIR only (Chromium executor): a path that
    /// leaves it, through `..` or a symlink, is refused. Without it, file: URLs are refused:
    /// an agent that opens local files reads whatever this host's user can read.
    #[arg(long, value_name = "DIR")]
    allow_file_urls: Option<PathBuf>,
    /// Let pages reach ORIGIN, a loopback, private or link-local address or localhost
    /// (Chromium executor; repeatable). `http://127.0.0.1:8080` allows exactly that scheme, host
    /// and port; a bare host (`127.0.0.1`, `localhost`, `[::1]`) allows it on every port and
    /// scheme. Without it, task.start and page.navigate URLs whose host is such an address are
    /// refused, and the browser blocks every request a page makes to one (links, redirects,
    /// fetch, iframes, forms): an agent that reads this machine's services or the cloud's
    /// metadata address could leak their secrets. A DNS name that resolves to a private address
    /// is not caught: isolate the host's network (a namespace, a firewall) for that.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Do not watch each task's network (Chromium executor): replies carry no `evidence` of
    /// what the page sent (SPEC §16), and the browser sends no network events to the host.
    #[arg(long)]
    no_network_evidence: bool,
    /// The most requests each action's evidence lists (Chromium executor, SPEC §16); those
    /// beyond are counted in `unlisted`. 1 to 256: the evidence is stored with every receipt.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::protocol::evidence::DEFAULT_EVIDENCE_REQUESTS,
        value_parser = crate::protocol::evidence::parse_evidence_max_requests,
        conflicts_with = "no_network_evidence"
    )]
    evidence_max_requests: usize,
}

impl ExecutorArgs {
    fn build(
        &self,
        effects: Option<&std::path::Path>,
    ) -> Result<std::sync::Arc<dyn crate::executor::Executor>, String> {
        use crate::executor::chromium::{
            find_chromium, ChromiumConfig, ChromiumExecutor, FileUrls, Origins,
        };
        use crate::executor::{EffectsFile, FixtureExecutor};
        if self.allow_file_urls.is_some() && self.executor != ExecutorKind::Chromium {
            return Err("--allow-file-urls works with --executor chromium only".into());
        }
        if !self.allow_origin.is_empty() && self.executor != ExecutorKind::Chromium {
            return Err("--allow-origin works with --executor chromium only".into());
        }
        if self.profile_dir.is_some() && self.executor != ExecutorKind::Chromium {
            return Err("--profile-dir works with --executor chromium only".into());
        }
        if effects.is_some() && self.executor != ExecutorKind::Fixture {
            return Err("--fixture-effects works with the fixture executor only".into());
        }
        Ok(match self.executor {
            ExecutorKind::Fixture => match effects {
                None => std::sync::Arc::new(FixtureExecutor::new()),
                Some(path) => std::sync::Arc::new(FixtureExecutor::with_effects(
                    EffectsFile::open(path).map_err(|e| {
                        format!("cannot open --fixture-effects {} ({e})", path.display())
                    })?,
                )),
            },
            ExecutorKind::Chromium => {
                let origins = Origins::allowing(&self.allow_origin)?;
                let explicit = self
                    .chromium
                    .as_deref()
                    .filter(|p| !p.as_os_str().is_empty());
                let binary = find_chromium(explicit)?;
                tracing::info!(binary = %binary.display(), "the Chromium executor starts it on the first task");
                if let Some(dir) = &self.upload_dir {
                    if !dir.is_dir() {
                        return Err(format!("--upload-dir {} is not a directory", dir.display()));
                    }
                }
                let profile_dir = match &self.profile_dir {
                    None => None,
                    Some(dir) => Some(std::fs::canonicalize(dir).ok().filter(|d| d.is_dir()).ok_or_else(|| {
                        format!("--profile-dir {} is not a directory; create it (mode 0700) first", dir.display())
                    })?),
                };
                let file_urls = match &self.allow_file_urls {
                    None => FileUrls::refused(),
                    Some(dir) => FileUrls::inside(dir)?,
                };
                let config = ChromiumConfig::new(binary)
                    .with_origins(origins)
                    .with_upload_dir(self.upload_dir.clone())
                    .with_profile_dir(profile_dir)
                    .with_file_urls(file_urls)
                    .with_network_evidence(!self.no_network_evidence)
                    .with_evidence_max_requests(self.evidence_max_requests);
                std::sync::Arc::new(ChromiumExecutor::new(config))
            }
        })
    }
}

#[derive(Debug, Args)]
struct CallArgs {
    #[command(flatten)]
    dir: SocketDir,
    /// The method, e.g. task.start or receipt.status.
    method: String,
    /// The params as a JSON object, e.g. '{"title":"Post"}'.
    params: Option<String>,
    /// The request ID; a fresh UUID by default. Reuse an ID only to re-query the same content.
    #[arg(long)]
    id: Option<String>,
    /// How long to wait for the reply.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    timeout_ms: u64,
}

/// `polaris journal check`: prints the journal's counts and integrity.
fn journal_check(args: JournalCheckArgs) -> ExitCode {
    let dir = match args.journal {
        Some(d) => d,
        None => match crate::journal::default_dir(&args.dir.resolve()) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("polaris journal check: {e}");
                return ExitCode::from(2);
            }
        },
    };
    match crate::journal::check(&dir) {
        Ok(r) => {
            if args.json {
                let v = serde_json::json!({
                    "path": r.path,
                    "bytes": r.bytes,
                    "fileBytes": r.file_bytes,
                    "records": r.records,
                    "blocks": r.blocks,
                    "receipts": r.receipts,
                    "running": r.running,
                    "tombstones": r.tombstones,
                    "tasks": r.tasks,
                    "acknowledgements": r.acknowledgements,
                    "runs": r.runs,
                    "tornTail": r.tail.as_ref().map(|t| serde_json::json!({"offset": t.offset, "bytes": t.bytes, "why": t.why.to_string()})),
                    "hostPid": r.host_pid,
                    "recordedEnd": r.recorded_end,
                });
                println!("{v}");
            } else {
                println!("journal {}: sound", r.path.display());
                println!(
                    "  {} bytes of journal ({} in the file), {} records in {} writes",
                    r.bytes, r.file_bytes, r.records, r.blocks
                );
                println!(
                    "  {} receipts ({} begun and not completed), {} tombstones, {} acknowledgements",
                    r.receipts, r.running, r.tombstones, r.acknowledgements
                );
                println!("  {} tasks over {} runs", r.tasks, r.runs);
                if let Some(t) = &r.tail {
                    println!(
                        "  a torn tail of {} bytes at byte offset {} ({}): the next start cuts it",
                        t.bytes, t.offset, t.why
                    );
                }
                match r.recorded_end {
                    Some(end) => {
                        println!("  durable to at least byte {end}, as journal.end records")
                    }
                    None => {
                        println!("  no recorded end (journal.end): a shortened log cannot be told")
                    }
                }
                match r.host_pid {
                    Some(pid) => println!("  in use by a host (pid {pid})"),
                    None => println!("  no host holds it"),
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("polaris journal check: {e}");
            ExitCode::from(1)
        }
    }
}

/// The default audit log path, if this user has a state directory.
pub fn default_audit_log() -> Option<PathBuf> {
    state_dir().map(|d| d.join("audit.jsonl"))
}

/// Polaris's state directory: `$XDG_STATE_HOME/polaris`, else `~/.local/state/polaris`; none
/// without either variable (never the working directory, which another user may control).
pub fn state_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_STATE_HOME")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .map(|state| state.join("polaris"))
}

/// The console's default log file, if this user has a state directory.
pub fn default_console_log() -> Option<PathBuf> {
    state_dir().map(|d| d.join("console.log"))
}

/// Logs to `path` (appending), never to the terminal the console draws on.
fn init_file_logging(path: &std::path::Path) -> Result<(), String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            format!(
                "cannot create {} for the log file ({e}); pass --log-file",
                parent.display()
            )
        })?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| {
            format!(
                "cannot open the log file {} ({e}); pass --log-file",
                path.display()
            )
        })?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
    Ok(())
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}

/// The ledger password in `path` (`--ledger-password-file`): its first line, from a regular
/// file opened without following symlinks that is not readable by group or others.
fn read_password_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| format!("cannot read --ledger-password-file {shown} ({e}); name the file itself, not a symlink"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read --ledger-password-file {shown} ({e})"))?;
    if !meta.is_file() {
        return Err(format!(
            "--ledger-password-file {shown} is not a regular file"
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "--ledger-password-file {shown} is readable or writable by group or others; run chmod 600 {shown}"
        ));
    }
    let mut text = String::new();
    file.take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read --ledger-password-file {shown} ({e})"))?;
    let password = text.lines().next().unwrap_or("").to_owned();
    if password.is_empty() {
        return Err(format!(
            "--ledger-password-file {shown} is empty; put the password on its first line"
        ));
    }
    Ok(password)
}

/// Runs the command line.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        CliCommand::Serve(args) => serve(*args),
        CliCommand::Call(args) => {
            init_logging("warn");
            call(args)
        }
        CliCommand::Acknowledge(args) => {
            init_logging("warn");
            crate::operator::acknowledge(
                &args.dir.resolve(),
                &args.request_id,
                &args.reason,
                args.operator,
                args.json,
            )
        }
        CliCommand::Journal(JournalCommand::Check(args)) => {
            init_logging("warn");
            journal_check(args)
        }
        CliCommand::Receipts(args) => {
            init_logging("warn");
            let options = crate::operator::ListOptions {
                filter: args.filter.filter(),
                sort: args.sort,
                reverse: args.reverse,
                offset: args.offset,
                limit: args.limit,
                json: args.json,
            };
            crate::operator::receipts(&args.dir.resolve(), options)
        }
        CliCommand::Verify(args) => {
            init_logging("warn");
            crate::operator::verify(&args.dir.resolve(), &args.task_id, args.json)
        }
        CliCommand::Clear(args) => {
            init_logging("warn");
            let options = crate::operator::ClearOptions {
                ids: args.ids,
                filter: args.filter.filter(),
                reason: args.reason,
                operator: args.operator,
                yes: args.yes,
            };
            crate::operator::clear(&args.dir.resolve(), options)
        }
        CliCommand::Audit(args) => {
            init_logging("warn");
            let options = crate::operator::AuditOptions {
                limit: args.limit,
                request: args.request,
                json: args.json,
            };
            crate::operator::audit(&args.dir.resolve(), options)
        }
        CliCommand::Console(args) => console(args),
        CliCommand::Demo(args) => demo(args),
        CliCommand::Mcp(args) => {
            init_logging("warn");
            let options = crate::mcp::McpOptions {
                socket_dir: args.dir.resolve(),
                call_wait: Duration::from_millis(args.call_wait_ms),
            };
            match runtime().block_on(crate::mcp::run(options)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("polaris mcp: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// `polaris serve`: runs the host with the options given until it is stopped.
fn serve(mut args: ServeArgs) -> ExitCode {
    init_logging("info");
    let options = ServeOptions {
        socket_dir: args.dir.resolve(),
        host: HostConfig {
            capacity: args.capacity,
            tombstone_capacity: args.tombstone_capacity,
            max_book_bytes: args.max_book_bytes,
            action_timeout: Duration::from_millis(args.action_timeout_ms),
            fast_path: true,
        },
        limits: Limits {
            max_frame_bytes: args.max_frame_bytes,
            max_connections: args.max_connections.max(1),
            frame_timeout: Duration::from_millis(args.frame_timeout_ms.max(1)),
            idle_timeout: Duration::from_millis(args.idle_timeout_ms.max(1)),
            max_pending_reply_bytes: args.max_pending_reply_bytes.max(1),
        },
        audit_log: match args.audit_log.take().or_else(default_audit_log) {
            Some(path) => path,
            None => {
                eprintln!("polaris serve: neither $XDG_STATE_HOME nor $HOME is set, so there is no place for the audit log; pass --audit-log PATH");
                return ExitCode::from(2);
            }
        },
    };
    let store = match serve_store(&args, &options.socket_dir) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("polaris serve: {e}");
            return ExitCode::from(2);
        }
    };
    let executor = match args.executor.build(args.fixture_effects.as_deref()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("polaris serve: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime().block_on(crate::serve::run(options, executor, store)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("polaris serve: {e}");
            ExitCode::from(2)
        }
    }
}

/// Where `polaris serve` keeps its receipts: the fleet's ledger, a journal, or memory only.
fn serve_store(
    args: &ServeArgs,
    socket_dir: &std::path::Path,
) -> Result<crate::serve::Store, String> {
    match &args.ledger {
        Some(conninfo) => {
            // Renewed every third of the lease, so two thirds of it is the least a
            // healthy host has left: that must cover an action and the margin.
            let floor = args.action_timeout_ms + 1000;
            if args.lease_ms.saturating_mul(2) / 3 <= floor {
                return Err(format!(
                    "--lease-ms {} is too short for --action-timeout-ms {}: a host starts an action only with more than the action deadline plus one second of lease left, and a lease renewed every third of it keeps two thirds; pass --lease-ms {} or more",
                    args.lease_ms,
                    args.action_timeout_ms,
                    floor * 3 / 2 + 1
                ));
            }
            let password = args
                .ledger_password_file
                .as_deref()
                .map(read_password_file)
                .transpose()?;
            Ok(crate::serve::Store::Ledger(crate::serve::FleetOptions {
                password,
                conninfo: conninfo.clone(),
                host_id: args
                    .host_id
                    .clone()
                    .unwrap_or_else(crate::ledger::machine_name),
                lease: Duration::from_millis(args.lease_ms),
                connections: args.ledger_connections.max(1),
                take_over: args.take_over_host_id,
            }))
        }
        None => {
            let dir =
                crate::serve::journal_dir(socket_dir, args.journal.as_deref(), args.no_journal)
                    .map_err(|e| e.to_string())?;
            Ok(match dir {
                Some(dir) => crate::serve::Store::Journal(dir),
                None => crate::serve::Store::Memory,
            })
        }
    }
}

/// `polaris console`: the operator's terminal console on the host's socket.
fn console(args: ConsoleArgs) -> ExitCode {
    let Some(log_file) = args.log_file.or_else(default_console_log) else {
        eprintln!("polaris console: neither $XDG_STATE_HOME nor $HOME is set, so there is no place for the log; pass --log-file PATH");
        return ExitCode::from(2);
    };
    if let Err(e) = init_file_logging(&log_file) {
        eprintln!("polaris console: {e}");
        return ExitCode::from(2);
    }
    match runtime().block_on(crate::console::run(
        args.dir.resolve(),
        if args.read_only {
            crate::console::Access::ReadOnly
        } else {
            crate::console::Access::Full
        },
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "polaris console: the terminal failed ({e}); run it in an interactive terminal"
            );
            ExitCode::from(2)
        }
    }
}

/// `polaris demo`: a host with demo traffic and the console on it.
fn demo(args: DemoArgs) -> ExitCode {
    let Some(log_file) = args.log_file.or_else(default_console_log) else {
        eprintln!("polaris demo: neither $XDG_STATE_HOME nor $HOME is set, so there is no place for the log; pass --log-file PATH");
        return ExitCode::from(2);
    };
    if let Err(e) = init_file_logging(&log_file) {
        eprintln!("polaris demo: {e}");
        return ExitCode::from(2);
    }
    let browser = if args.browser {
        let explicit = args
            .chromium
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty());
        match crate::executor::chromium::find_chromium(explicit) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("polaris demo: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        None
    };
    let options = crate::console::demo::DemoOptions {
        socket_dir: args.socket_dir,
        capacity: args.capacity.max(1),
        browser,
    };
    match runtime().block_on(crate::console::demo::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("polaris demo: {e}");
            ExitCode::from(2)
        }
    }
}

fn call(args: CallArgs) -> ExitCode {
    let params: Value = match args.params.as_deref() {
        None => Value::Object(Default::default()),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                eprintln!("polaris call: PARAMS_JSON must be a JSON object, e.g. '{{\"title\":\"Post\"}}'");
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("polaris call: PARAMS_JSON is not JSON ({e}); quote it for your shell, e.g. '{{\"title\":\"Post\"}}'");
                return ExitCode::from(2);
            }
        },
    };
    let id = args.id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    if let Err(e) = crate::protocol::validate_id(&id) {
        eprintln!("polaris call: --id: {e}");
        return ExitCode::from(2);
    }
    let client =
        BridgeClient::new(&args.dir.resolve()).with_timeout(Duration::from_millis(args.timeout_ms));
    let result = runtime().block_on(client.call_with_id(&id, &args.method, params));
    match result {
        Ok(reply) => {
            println!(
                "{}",
                serde_json::to_string(&reply).expect("a reply always serialises")
            );
            if reply.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            println!("{}", e.to_reply_json());
            eprintln!("polaris call: {}", e.message);
            ExitCode::from(3)
        }
    }
}
