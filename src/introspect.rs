//! The introspection channel (`introspect.sock`): what the operator console and the operator
//! commands speak. No receipts are taken here. `docs/introspection.md` is its exact contract.
//!
//! Reads of the book (snapshot, listings) take the host's state lock briefly and build their
//! JSON from what they copied; the two phases of a clear run in the host, each in one critical
//! section. Event subscriptions are fed from the host's broadcast bus through a bounded budget
//! per subscriber: when a subscriber does not read, its events are dropped and counted, and it
//! is told `lagged` once it drains. Nothing on the bridge's request path ever waits for it.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, watch, Semaphore};

use crate::book::{Receipt, RequestKey};
use crate::events::{AtCache, Event, Subscription};
use crate::host::{
    clear_refusal, ClearRefusal, ClearTargets, CommittedClear, Handled, Host, Order,
};
use crate::protocol::introspection::{
    AuditAcknowledged, AuditCleared, AuditEntry, AuditListParams, AuditListResult, BlockedOutcome,
    CanonicalRequest, ChangedEvent, ClearCommitParams, ClearCommitted, ClearPrepareParams,
    ClearPrepared, ClearableReceipt, IntrospectMethod, LaggedEvent, OutcomeAcknowledgeParams,
    OutcomeAcknowledged, ReceiptDetail, ReceiptFilter, ReceiptItem, ReceiptsGetParams,
    ReceiptsListParams, ReceiptsListResult, RefusalReason, RefusedReceipt, Snapshot, Sort,
    StateFilter, SubscribeParams, Subscribed, TasksListParams, TasksListResult,
};
pub use crate::protocol::introspection::{MAX_COALESCE_MS, MIN_COALESCE_MS};
use crate::protocol::results::{ExecutorStatus, ReceiptState, StoredReply};
use crate::protocol::{
    format_millis, now_millis, parse_envelope, Delivery, ErrorBody, ErrorCode, Method, NoParams,
    Outcome, ReceiptKind, TaskParams,
};
use crate::server::{Connection, Outbound, Service};
use crate::tasks::{Task, Tasks};

/// Event lines a subscriber may have queued and unwritten before its events are dropped (and
/// it is told `lagged`).
pub const SUBSCRIBER_BUDGET: usize = 4096;
/// Subscriptions one connection may hold; each costs the host a forwarding task.
pub const MAX_SUBSCRIPTIONS_PER_CONNECTION: usize = 8;
/// Default `limit` of `receipts.list`.
pub const DEFAULT_LIST_LIMIT: usize = 100;
/// Largest `limit` of `receipts.list` and `audit.list`.
pub const MAX_LIST_LIMIT: usize = 1000;
/// Default `limit` of `audit.list`.
pub const DEFAULT_AUDIT_LIMIT: usize = 50;
/// Longest clear reason accepted, in characters.
pub const MAX_REASON_CHARS: usize = crate::protocol::limits::REASON.max;

/// The introspection service over a host.
#[derive(Clone)]
pub struct Introspect {
    host: Host,
    audit: Arc<AuditLog>,
}

/// The append-only audit log of clear commits (one JSON line each), shared by every
/// introspection connection. Its lock also orders commits, so the log's lines follow the order
/// in which the clears applied.
pub struct AuditLog {
    path: PathBuf,
    lock: tokio::sync::Mutex<()>,
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
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        let file = options.open(&self.path).map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
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

impl Introspect {
    /// The introspection service of `host`, recording clear commits in `audit_log`.
    pub fn new(host: Host, audit_log: PathBuf) -> Introspect {
        Introspect {
            host,
            audit: Arc::new(AuditLog::new(audit_log)),
        }
    }

    /// The audit log this service appends to.
    pub fn audit_log(&self) -> &AuditLog {
        &self.audit
    }
}

fn bad_params(method: &str, e: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::BadRequest,
        format!("bad params for {method}: {e}; nothing was changed. docs/introspection.md lists the params"),
    )
}

fn parse<T: DeserializeOwned>(method: IntrospectMethod, params: &Value) -> Result<T, ErrorBody> {
    T::deserialize(params).map_err(|e| bad_params(method.as_str(), e))
}

fn reply_line<T: Serialize>(id: &str, run_id: &str, result: Result<T, ErrorBody>) -> Vec<u8> {
    let outcome = match result {
        Ok(v) => Outcome::ok(&v),
        Err(e) => Outcome::err(&e),
    };
    outcome.reply_line(Some(id), run_id, ReceiptKind::None)
}

impl Service for Introspect {
    fn handle_frame(&self, frame: &[u8], conn: &Connection) -> Handled {
        let run_id = self.host.run_id().to_owned();
        let env = match parse_envelope(frame) {
            Ok(env) => env,
            Err(e) => {
                return Handled::Ready(Outcome::err(&e.error).reply_line(
                    e.id.as_deref(),
                    &run_id,
                    ReceiptKind::None,
                ))
            }
        };
        let id = env.id;
        let params = &env.params;
        let Ok(method) = env.method.parse::<IntrospectMethod>() else {
            let names: Vec<&str> = IntrospectMethod::ALL.iter().map(|m| m.as_str()).collect();
            let other = env.method.as_str();
            let error = ErrorBody::new(
                ErrorCode::UnknownMethod,
                format!(
                    "unknown method {other:?} on the introspection socket; its methods are {}",
                    names.join(", ")
                ),
            )
            .with_details(json!({"method": other}));
            return Handled::Ready(reply_line::<Value>(&id, &run_id, Err(error)));
        };
        let ready = |line: Vec<u8>| Handled::Ready(line);
        match method {
            IntrospectMethod::HostHello => ready(reply_line(
                &id,
                &run_id,
                parse::<NoParams>(method, params).map(|_| self.host.hello()),
            )),
            IntrospectMethod::Snapshot => ready(reply_line(
                &id,
                &run_id,
                parse::<NoParams>(method, params).map(|_| snapshot(&self.host)),
            )),
            IntrospectMethod::ReceiptsList => match parse::<ReceiptsListParams>(method, params) {
                Err(e) => ready(reply_line::<ReceiptsListResult>(&id, &run_id, Err(e))),
                Ok(p) => operator_work(&self.host, id, run_id, move |host| list(host, p)),
            },
            IntrospectMethod::ReceiptsGet => ready(reply_line(
                &id,
                &run_id,
                parse::<ReceiptsGetParams>(method, params).map(|p| get(&self.host, &p.request_id)),
            )),
            IntrospectMethod::TasksList => ready(reply_line(
                &id,
                &run_id,
                parse::<TasksListParams>(method, params).map(|p| tasks_list(&self.host, p)),
            )),
            IntrospectMethod::ReceiptsClearPrepare => {
                match parse::<ClearPrepareParams>(method, params) {
                    Err(e) => ready(reply_line::<ClearPrepared>(&id, &run_id, Err(e))),
                    Ok(p) => {
                        operator_work(&self.host, id, run_id, move |host| clear_prepare(host, p))
                    }
                }
            }
            IntrospectMethod::Subscribe => {
                let p = match parse::<SubscribeParams>(method, params).and_then(checked_subscribe) {
                    Ok(p) => p,
                    Err(e) => return ready(reply_line::<Subscribed>(&id, &run_id, Err(e))),
                };
                if !conn.add_feed(MAX_SUBSCRIPTIONS_PER_CONNECTION) {
                    let e = ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!("this connection already has {MAX_SUBSCRIPTIONS_PER_CONNECTION} subscriptions, the most one connection may hold; nothing was subscribed. Read events on those, or subscribe on another connection"),
                    )
                    .with_details(json!({"maxSubscriptions": MAX_SUBSCRIPTIONS_PER_CONNECTION}));
                    return ready(reply_line::<Subscribed>(&id, &run_id, Err(e)));
                }
                match p.coalesce_ms {
                    Some(every_ms) => {
                        // Coalesced: no bus receiver, so publishing stays as cheap as with no
                        // subscriber; the reply goes out before the first `changed` frame.
                        let (seq, published) = {
                            let st = self.host.lock();
                            (st.events.seq(), st.events.published())
                        };
                        let reply = Subscribed {
                            coalesce_ms: Some(every_ms),
                            seq,
                            subscribed: true,
                        };
                        let _ = conn.out.send(Outbound {
                            line: reply_line(&id, &run_id, Ok(reply)),
                            permit: None,
                        });
                        tokio::spawn(forward_changes(
                            self.host.clone(),
                            published,
                            seq,
                            std::time::Duration::from_millis(every_ms),
                            conn.out.clone(),
                            conn.shutdown.clone(),
                        ));
                    }
                    None => {
                        // The reply must precede the first event frame on this connection, so it
                        // is queued here, before the forwarder starts; the empty line handed back
                        // writes nothing and releases the request's in-flight slot.
                        let (seq, rx) = self.host.subscribe();
                        let reply = Subscribed {
                            coalesce_ms: None,
                            seq,
                            subscribed: true,
                        };
                        let _ = conn.out.send(Outbound {
                            line: reply_line(&id, &run_id, Ok(reply)),
                            permit: None,
                        });
                        tokio::spawn(forward_events(
                            rx,
                            seq,
                            conn.out.clone(),
                            conn.shutdown.clone(),
                        ));
                    }
                }
                Handled::Ready(Vec::new())
            }
            IntrospectMethod::TaskVerifyOutcome => {
                match parse::<TaskParams>(method, params).and_then(|p| self.host.verify(&p.task_id))
                {
                    Err(e) => ready(reply_line::<Value>(&id, &run_id, Err(e))),
                    Ok(fut) => Handled::Later(Box::pin(async move {
                        fut.await.reply_line(Some(&id), &run_id, ReceiptKind::None)
                    })),
                }
            }
            IntrospectMethod::ReceiptsClearCommit => {
                match parse::<ClearCommitParams>(method, params).and_then(checked_commit) {
                    Err(e) => ready(reply_line::<ClearCommitted>(&id, &run_id, Err(e))),
                    Ok(p) => {
                        let host = self.host.clone();
                        let audit = self.audit.clone();
                        Handled::Later(Box::pin(async move {
                            reply_line(&id, &run_id, clear_commit(&host, &audit, p).await)
                        }))
                    }
                }
            }
            IntrospectMethod::OutcomeAcknowledge => {
                match parse::<OutcomeAcknowledgeParams>(method, params).and_then(checked_ack) {
                    Err(e) => ready(reply_line::<OutcomeAcknowledged>(&id, &run_id, Err(e))),
                    Ok(p) => {
                        let host = self.host.clone();
                        let audit = self.audit.clone();
                        Handled::Later(Box::pin(async move {
                            reply_line(&id, &run_id, acknowledge(&host, &audit, p).await)
                        }))
                    }
                }
            }
            IntrospectMethod::AuditList => match parse::<AuditListParams>(method, params) {
                Err(e) => ready(reply_line::<AuditListResult>(&id, &run_id, Err(e))),
                Ok(p) if p.limit.unwrap_or(DEFAULT_AUDIT_LIMIT) > MAX_LIST_LIMIT => {
                    ready(reply_line::<AuditListResult>(
                        &id,
                        &run_id,
                        Err(bad_params(
                            method.as_str(),
                            format_args!("limit may be at most {MAX_LIST_LIMIT}"),
                        )),
                    ))
                }
                Ok(p) => {
                    let audit = self.audit.clone();
                    Handled::Later(Box::pin(async move {
                        let limit = p.limit.unwrap_or(DEFAULT_AUDIT_LIMIT);
                        let read = tokio::task::spawn_blocking(move || {
                            audit.recent(limit).map_err(|e| (e, audit))
                        })
                        .await
                        .expect("reading the audit log does not panic");
                        let result = match read {
                            Ok(entries) => Ok(AuditListResult { entries }),
                            Err((e, audit)) => Err(ErrorBody::new(
                                ErrorCode::Internal,
                                format!("could not read the audit log {} ({e}); check the file's permissions", audit.path().display()),
                            )
                            .with_delivery(Delivery::NotExecuted)),
                        };
                        reply_line(&id, &run_id, result)
                    }))
                }
            },
        }
    }

    fn run_id(&self) -> &str {
        self.host.run_id()
    }
}

// ----------------------------------------------------------------------------------------------
// Event forwarding
// ----------------------------------------------------------------------------------------------

fn checked_subscribe(p: SubscribeParams) -> Result<SubscribeParams, ErrorBody> {
    match p.coalesce_ms {
        Some(ms) if !(MIN_COALESCE_MS..=MAX_COALESCE_MS).contains(&ms) => Err(bad_params(
            "subscribe",
            format_args!(
                "coalesceMs must be between {MIN_COALESCE_MS} and {MAX_COALESCE_MS} (got {ms})"
            ),
        )),
        _ => Ok(p),
    }
}

/// Sends one `changed` frame per `every` at most, and only when events were published since
/// the last one. Reads the bus's shared seq without the lock; takes the host's lock only to
/// copy the counters and receipt counts of a frame it sends. A frame is not sent while the
/// previous one is unwritten: the change stays pending and the next frame covers it, so a
/// console that stops reading holds at most one frame in the host.
async fn forward_changes(
    host: Host,
    published: Arc<std::sync::atomic::AtomicU64>,
    start_seq: u64,
    every: std::time::Duration,
    out: mpsc::UnboundedSender<Outbound>,
    mut shutdown: watch::Receiver<bool>,
) {
    let unwritten = Arc::new(Semaphore::new(1));
    let mut sent_seq = start_seq;
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            biased;
            _ = out.closed() => break,
            _ = shutdown.wait_for(|s| *s) => break,
            _ = ticks.tick() => {
                if published.load(std::sync::atomic::Ordering::Relaxed) == sent_seq {
                    continue;
                }
                let Ok(permit) = unwritten.clone().try_acquire_owned() else {
                    continue;
                };
                let changed = {
                    let st = host.lock();
                    ChangedEvent {
                        counters: st.counters,
                        from_seq: sent_seq + 1,
                        receipts: st.book.counts(),
                        to_seq: st.events.seq(),
                    }
                };
                let to_seq = changed.to_seq;
                let line = Event {
                    seq: to_seq,
                    at: now_millis(),
                    kind: "changed",
                    data: serde_json::to_value(changed).expect("a changed frame serialises").into(),
                }
                .to_line();
                sent_seq = to_seq;
                if out.send(Outbound { line, permit: Some(permit) }).is_err() {
                    break;
                }
            }
        }
    }
}

fn lagged_line(seq: u64, missed: u64) -> Vec<u8> {
    Event {
        seq,
        at: now_millis(),
        kind: "lagged",
        data: serde_json::to_value(LaggedEvent { missed })
            .expect("a lagged frame serialises")
            .into(),
    }
    .to_line()
}

/// Moves one subscriber's events from the host's bus to its connection's writer, within
/// [`SUBSCRIBER_BUDGET`] unwritten lines. Never blocks the publisher: broadcast sends do not
/// wait, and this task only ever drops what the subscriber cannot take.
async fn forward_events(
    mut rx: Subscription,
    start_seq: u64,
    out: mpsc::UnboundedSender<Outbound>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut feed = Feed {
        budget: Arc::new(Semaphore::new(SUBSCRIBER_BUDGET)),
        missed: 0,
        last_seq: start_seq,
        batch: Vec::new(),
        permit: None,
        at: AtCache::default(),
    };
    loop {
        tokio::select! {
            biased;
            _ = out.closed() => break,
            _ = shutdown.wait_for(|s| *s) => break,
            permit = feed.budget.clone().acquire_owned(), if feed.missed > 0 => {
                let permit = permit.expect("the budget is never closed");
                let _ = out.send(Outbound { line: lagged_line(feed.last_seq, feed.missed), permit: Some(permit) });
                feed.missed = 0;
            }
            first = rx.recv() => {
                let mut closed = feed.take(first);
                // Whatever else is already on the bus goes out in the same write, so a busy
                // host wakes this task and the writer once per burst, not once per event.
                for _ in 0..FORWARD_BATCH {
                    match rx.try_recv() {
                        Ok(event) => closed |= feed.take(Ok(event)),
                        Err(broadcast::error::TryRecvError::Empty) => break,
                        Err(broadcast::error::TryRecvError::Lagged(n)) => {
                            closed |= feed.take(Err(broadcast::error::RecvError::Lagged(n)))
                        }
                        Err(broadcast::error::TryRecvError::Closed) => closed = true,
                    }
                }
                if !feed.batch.is_empty() {
                    let line = std::mem::take(&mut feed.batch);
                    let _ = out.send(Outbound { line, permit: feed.permit.take() });
                }
                if closed {
                    break;
                }
            }
        }
    }
}

/// Events taken from the bus in one wake-up at most.
const FORWARD_BATCH: usize = 256;

/// One subscriber's side of the bus: its budget, what it missed, and the batch being built.
struct Feed {
    budget: Arc<Semaphore>,
    /// Events dropped since the last line that reached the queue.
    missed: u64,
    /// The last seq seen (sent, dropped, or skipped by the bus); a `lagged` notice reports it.
    last_seq: u64,
    batch: Vec<u8>,
    /// The budget held by the lines in `batch`.
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    at: AtCache,
}

impl Feed {
    /// Adds one event to the batch if the budget allows, else counts it as missed. Returns
    /// whether the bus closed.
    fn take(&mut self, received: Result<Arc<Event>, broadcast::error::RecvError>) -> bool {
        match received {
            Ok(event) => {
                self.last_seq = event.seq;
                if self.missed > 0 {
                    self.missed += 1;
                    return false;
                }
                match self.budget.clone().try_acquire_owned() {
                    Ok(p) => {
                        match &mut self.permit {
                            Some(held) => held.merge(p),
                            None => self.permit = Some(p),
                        }
                        let at = self.at.format(event.at);
                        event.write_line(&mut self.batch, at);
                    }
                    Err(_) => self.missed = 1,
                }
                false
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                self.last_seq += n;
                self.missed += n;
                false
            }
            Err(broadcast::error::RecvError::Closed) => true,
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Listing and reading
// ----------------------------------------------------------------------------------------------

impl ReceiptFilter {
    /// The filter, once its method is known to be one of Polaris's.
    fn checked(self, method: &str) -> Result<ReceiptFilter, ErrorBody> {
        if let Some(m) = &self.method {
            if m.parse::<Method>().is_err() {
                return Err(bad_params(
                    method,
                    format_args!("method {m:?} is not a Polaris method"),
                ));
            }
        }
        Ok(self)
    }

    /// Whether a receipt matches.
    pub fn matches(&self, key: &RequestKey, r: &Receipt, refusal: Option<ClearRefusal>) -> bool {
        let code = r.outcome().and_then(|o| o.code);
        if let Some(state) = self.state {
            let keep = match state {
                StateFilter::Running => r.is_running(),
                StateFilter::Completed => !r.is_running(),
                StateFilter::Ok => !r.is_running() && code.is_none(),
                StateFilter::Error => code.is_some(),
                StateFilter::Clearable => refusal.is_none(),
            };
            if !keep {
                return false;
            }
        }
        if self
            .method
            .as_deref()
            .is_some_and(|m| m != r.method.as_str())
        {
            return false;
        }
        if self
            .task_id
            .as_deref()
            .is_some_and(|t| r.task_id.as_deref() != Some(t))
        {
            return false;
        }
        if let Some(q) = self.search.as_deref() {
            let hit = key.to_string().contains(q)
                || r.method.as_str().contains(q)
                || r.task_id.as_deref().is_some_and(|t| t.contains(q))
                || code.is_some_and(|c| c.as_str().contains(q));
            if !hit {
                return false;
            }
        }
        true
    }
}

impl From<ClearRefusal> for RefusalReason {
    fn from(why: ClearRefusal) -> RefusalReason {
        match why {
            ClearRefusal::Running => RefusalReason::Running,
            ClearRefusal::UnverifiedOutcome => RefusalReason::UnverifiedOutcome,
            ClearRefusal::Unknown => RefusalReason::Unknown,
            ClearRefusal::AlreadyCleared => RefusalReason::AlreadyCleared,
        }
    }
}

fn checked_commit(p: ClearCommitParams) -> Result<ClearCommitParams, ErrorBody> {
    let n = p.reason.chars().count();
    if p.reason.trim().is_empty() || n > MAX_REASON_CHARS {
        return Err(bad_params(
            "receipts.clearCommit",
            format_args!("reason must be 1–{MAX_REASON_CHARS} characters and say why (got {n})"),
        ));
    }
    if p.operator.as_ref().is_some_and(|o| {
        o.trim().is_empty()
            || crate::protocol::limits::OPERATOR
                .check("operator", o)
                .is_err()
    }) {
        return Err(bad_params(
            "receipts.clearCommit",
            "operator must be 1–200 characters",
        ));
    }
    Ok(p)
}

fn receipt_state(r: &Receipt) -> ReceiptState {
    if r.is_running() {
        ReceiptState::Running
    } else {
        ReceiptState::Completed
    }
}

/// A ReceiptItem (one listing row).
fn item(key: &RequestKey, r: &Receipt, refusal: Option<ClearRefusal>) -> ReceiptItem {
    let outcome = r.outcome();
    ReceiptItem {
        clearable: refusal.is_none(),
        code: outcome.and_then(|o| o.code),
        completed_at: outcome.map(|_| format_millis(r.completed_at)),
        first_seen_at: format_millis(r.first_seen),
        joins: u64::from(r.joins),
        method: r.method.as_str().to_owned(),
        ok: outcome.map(|o| o.is_ok()),
        refusal: refusal.map(RefusalReason::from),
        replays: u64::from(r.replays),
        request_id: key.to_string(),
        state: receipt_state(r),
        task_id: r.task_id.as_deref().map(str::to_owned),
    }
}

/// Runs an operator's request that scans the book on the blocking pool: the scan takes the
/// host's lock only in short slices, and the runtime's workers stay free for agents' requests
/// while it runs.
fn operator_work<T, F>(host: &Host, id: String, run_id: String, work: F) -> Handled
where
    T: Serialize + Send + 'static,
    F: FnOnce(&Host) -> Result<T, ErrorBody> + Send + 'static,
{
    let host = host.clone();
    Handled::Later(Box::pin(async move {
        // The reply is written out on the blocking pool too: a prepare over a million
        // receipts is hundreds of megabytes of JSON, which must not occupy a runtime worker
        // that agents' connections need.
        let (id2, run_id2) = (id.clone(), run_id.clone());
        tokio::task::spawn_blocking(move || reply_line(&id2, &run_id2, work(&host)))
            .await
            .unwrap_or_else(|e| {
                reply_line::<T>(
                    &id,
                    &run_id,
                    Err(ErrorBody::new(
                        ErrorCode::Internal,
                        format!("the request failed inside the host ({e}); nothing was changed, send it again"),
                    )
                    .with_delivery(Delivery::NotExecuted)),
                )
            })
    }))
}

fn list(host: &Host, p: ReceiptsListParams) -> Result<ReceiptsListResult, ErrorBody> {
    const M: &str = "receipts.list";
    let limit = p.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if limit > MAX_LIST_LIMIT {
        return Err(bad_params(
            M,
            format_args!("limit may be at most {MAX_LIST_LIMIT}; page with offset"),
        ));
    }
    let offset = p.offset.unwrap_or(0);
    let filter = p.filter().checked(M)?;
    let sort = p.sort.unwrap_or(Sort::Newest);
    let _gate = host.operator_gate();
    let order = if sort == Sort::Oldest {
        Order::Oldest
    } else {
        Order::Newest
    };
    let (total, items) = match sort {
        // The console's usual question: one page of the whole book in creation order. The
        // receipts are stored in that order, so the page is read directly (at most
        // MAX_LIST_LIMIT receipts under the lock) instead of scanning the book.
        Sort::Newest | Sort::Oldest if filter.is_empty() => {
            let st = host.lock();
            let rows = st.book.iter();
            let total = rows.len();
            let row = |(k, r): (&RequestKey, &Receipt)| item(k, r, clear_refusal(&st.tasks, k, r));
            let items: Vec<ReceiptItem> = if sort == Sort::Newest {
                rows.rev().skip(offset).take(limit).map(row).collect()
            } else {
                rows.skip(offset).take(limit).map(row).collect()
            };
            (total, items)
        }
        Sort::Newest | Sort::Oldest => {
            let mut total = 0;
            let mut items = Vec::new();
            host.scan_receipts(order, &mut |st, k, r| {
                let why = clear_refusal(&st.tasks, k, r);
                if !filter.matches(k, r, why) {
                    return;
                }
                if total >= offset && items.len() < limit {
                    items.push(item(k, r, why));
                }
                total += 1;
            });
            (total, items)
        }
        Sort::State | Sort::Method | Sort::Task => {
            // Newest first within each group: the matching positions and their group, gathered
            // in slices; a stable sort of them outside the lock; then the page, read by
            // position (the gate keeps positions still).
            #[derive(PartialEq, Eq, PartialOrd, Ord)]
            enum Group {
                State(bool),
                Method(&'static str),
                Task(Option<std::cmp::Reverse<()>>, Option<crate::tasks::TaskId>),
            }
            let used = host.lock().book.used();
            // Room taken before the scan: a list growing inside a slice would copy itself
            // under the lock.
            let mut rows: Vec<(Group, usize)> = Vec::with_capacity(used);
            let mut newest_first = 0usize;
            host.scan_receipts(Order::Newest, &mut |st, k, r| {
                let position = used - 1 - newest_first;
                newest_first += 1;
                if !filter.matches(k, r, clear_refusal(&st.tasks, k, r)) {
                    return;
                }
                let group = match sort {
                    Sort::State => Group::State(!r.is_running()),
                    Sort::Method => Group::Method(r.method.as_str()),
                    // Receipts with a task first, by task; then those without.
                    _ => Group::Task(
                        r.task_id.is_none().then_some(std::cmp::Reverse(())),
                        r.task_id.clone(),
                    ),
                };
                rows.push((group, position));
            });
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            let total = rows.len();
            let st = host.lock();
            let items = rows
                .iter()
                .skip(offset)
                .take(limit)
                .filter_map(|(_, i)| st.book.get_index(*i))
                .map(|(k, r)| item(k, r, clear_refusal(&st.tasks, k, r)))
                .collect();
            (total, items)
        }
    };
    Ok(ReceiptsListResult {
        items,
        total: total as u64,
    })
}

fn get(host: &Host, request_id: &str) -> ReceiptDetail {
    let key = RequestKey::new(request_id);
    let st = host.lock();
    if let Some(r) = st.book.get(&key) {
        let row = item(&key, r, clear_refusal(&st.tasks, &key, r));
        let request = r.request.clone();
        let outcome = r.outcome().cloned();
        drop(st);
        return ReceiptDetail {
            clearable: Some(row.clearable),
            code: row.code,
            completed_at: row.completed_at,
            first_seen_at: Some(row.first_seen_at),
            joins: Some(row.joins),
            method: Some(row.method),
            ok: row.ok,
            refusal: row.refusal,
            replays: Some(row.replays),
            reply: outcome.as_deref().map(StoredReply::of),
            request: serde_json::from_str::<CanonicalRequest>(&request).ok(),
            request_id: row.request_id,
            state: row.state,
            task_id: row.task_id,
            ..ReceiptDetail::default()
        };
    }
    if let Some((_, batch)) = st.book.tombstone(&key) {
        return ReceiptDetail {
            cleared_at: Some(format_millis(batch.at)),
            reason: Some(batch.reason.to_string()),
            request_id: request_id.to_owned(),
            state: ReceiptState::Cleared,
            ..ReceiptDetail::default()
        };
    }
    ReceiptDetail {
        request_id: request_id.to_owned(),
        state: ReceiptState::Unknown,
        ..ReceiptDetail::default()
    }
}

fn newest_first(tasks: &Tasks) -> Vec<&Task> {
    let mut all: Vec<&Task> = tasks.iter().collect();
    all.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    all
}

fn tasks_list(host: &Host, p: TasksListParams) -> TasksListResult {
    let st = host.lock();
    let tasks = newest_first(&st.tasks)
        .into_iter()
        .filter(|t| p.state.is_none_or(|s| t.state() == s))
        .map(Task::summary)
        .collect();
    TasksListResult { tasks }
}

fn snapshot(host: &Host) -> Snapshot {
    let executor = ExecutorStatus {
        kind: host.executor().kind().to_owned(),
        mutations: host.executor().mutations(),
    };
    let journal = host.journal_status();
    let ledger = host.ledger_status();
    let st = host.lock();
    let tasks = newest_first(&st.tasks);
    let pending = tasks
        .iter()
        .flat_map(|t| {
            t.pending.iter().map(|p| BlockedOutcome {
                pending: p.to_wire(),
                task_id: t.id.to_string(),
                task_state: t.state(),
                title: t.title.clone(),
            })
        })
        .collect();
    Snapshot {
        journal,
        ledger,
        counters: st.counters,
        executor,
        pending,
        receipts: st.book.counts(),
        run_id: host.run_id().to_owned(),
        seq: st.events.seq(),
        started_at: format_millis(host.started_at()),
        tasks: tasks.iter().map(|t| t.summary()).collect(),
    }
}

// ----------------------------------------------------------------------------------------------
// Clearing
// ----------------------------------------------------------------------------------------------

fn clear_prepare(host: &Host, p: ClearPrepareParams) -> Result<ClearPrepared, ErrorBody> {
    const M: &str = "receipts.clearPrepare";
    let view = match (&p.request_ids, p.filter) {
        (Some(ids), None) => {
            if ids.is_empty() {
                return Err(bad_params(
                    M,
                    "requestIds is empty; name at least one request ID",
                ));
            }
            if let Some(bad) = ids
                .iter()
                .find(|id| crate::protocol::validate_id(id).is_err())
            {
                return Err(bad_params(
                    M,
                    format_args!("{bad:?} is not a valid request ID"),
                ));
            }
            host.clear_prepare(ClearTargets::Ids(ids))
        }
        (None, Some(filter)) => {
            let filter = filter.checked(M)?;
            host.clear_prepare(ClearTargets::Matching(&|k, r, why| {
                filter.matches(k, r, why)
            }))
        }
        _ => return Err(bad_params(M, "give exactly one of requestIds or filter")),
    };
    let clearable = view
        .clearable
        .iter()
        .map(|c| ClearableReceipt {
            code: c.outcome.code,
            completed_at: format_millis(c.completed_at),
            joins: u64::from(c.joins),
            method: c.method.as_str().to_owned(),
            ok: c.outcome.is_ok(),
            replays: u64::from(c.replays),
            reply: StoredReply::of(&c.outcome),
            request_id: c.request_id.clone(),
            task_id: c.task_id.as_deref().map(str::to_owned),
        })
        .collect();
    let refused = view
        .refused
        .iter()
        .map(|(id, why)| RefusedReceipt {
            reason: RefusalReason::from(*why),
            request_id: id.clone(),
        })
        .collect();
    Ok(ClearPrepared {
        clearable,
        expires_at: format_millis(view.expires_at),
        refused,
        token: view.token,
    })
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

fn audit_entry(host: &Host, done: &CommittedClear, operator: &str, reason: &str) -> AuditEntry {
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
    }
}

/// Checks `outcome.acknowledge`'s params before anything is looked up.
fn checked_ack(p: OutcomeAcknowledgeParams) -> Result<OutcomeAcknowledgeParams, ErrorBody> {
    const M: &str = "outcome.acknowledge";
    if crate::protocol::validate_id(&p.request_id).is_err() {
        return Err(bad_params(
            M,
            format_args!("{:?} is not a valid request ID", p.request_id),
        ));
    }
    let n = p.reason.trim().chars().count();
    if n == 0 || p.reason.chars().count() > 500 {
        return Err(bad_params(
            M,
            "reason must say in 1-500 characters how the outcome was settled",
        ));
    }
    Ok(p)
}

/// Opens the audit log for one entry, off the runtime's workers. An operator action is refused
/// (nothing `what`) when its line could not be written: one nobody can account for is worse.
async fn open_audit(audit: &Arc<AuditLog>, what: &str) -> Result<std::fs::File, ErrorBody> {
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
async fn append_audit(file: std::fs::File, entry: &AuditEntry) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(entry).expect("JSON serialises");
    line.push(b'\n');
    tokio::task::spawn_blocking(move || {
        let mut file = file;
        file.write_all(&line).and_then(|_| file.sync_data())
    })
    .await
    .expect("writing the audit log does not panic")
}

/// `outcome.acknowledge`: the audit log must be writable first (an acknowledgement nobody can
/// account for is refused); then the host records it (journaled, durable before the reply) and
/// the audit line is written.
async fn acknowledge(
    host: &Host,
    audit: &Arc<AuditLog>,
    p: OutcomeAcknowledgeParams,
) -> Result<OutcomeAcknowledged, ErrorBody> {
    let operator = p.operator.clone().unwrap_or_else(os_user_name);
    let _order = audit.lock.lock().await;
    let file = open_audit(audit, "acknowledged").await?;
    let done = host.acknowledge(&p.request_id, &p.reason, &operator)?;
    if let Some(ticket) = done.durable {
        ticket.await.map_err(|e| host.journal_error(&e))?;
    }
    let entry = AuditEntry {
        at: done.result.acknowledged_at.clone(),
        cleared: Vec::new(),
        operator: operator.clone(),
        reason: p.reason.clone(),
        run_id: host.run_id().to_owned(),
        acknowledged: Some(AuditAcknowledged {
            code: done.code,
            method: done.method.as_str().to_owned(),
            request_id: p.request_id.clone(),
            task_id: done.result.task_id.clone(),
        }),
    };
    if let Err(e) = append_audit(file, &entry).await {
        tracing::error!(path = %audit.path().display(), "an acknowledgement was recorded but its audit line was not written: {e}");
    }
    Ok(done.result)
}

async fn clear_commit(
    host: &Host,
    audit: &Arc<AuditLog>,
    p: ClearCommitParams,
) -> Result<ClearCommitted, ErrorBody> {
    let operator = p.operator.clone().unwrap_or_else(os_user_name);
    // One commit at a time, so the log's order is the order the clears applied in.
    let _order = audit.lock.lock().await;
    // The log must be writable before anything is cleared: a clear nobody can account for is
    // worse than one refused.
    let file = open_audit(audit, "cleared").await?;
    let mut done = {
        let (host, token, reason, operator) = (
            host.clone(),
            p.token.clone(),
            p.reason.clone(),
            operator.clone(),
        );
        // The commit waits for any operator scan in progress: off the runtime's workers.
        tokio::task::spawn_blocking(move || host.clear_commit(&token, &reason, &operator))
            .await
            .map_err(|e| {
                ErrorBody::new(
                    ErrorCode::Internal,
                    format!("the clear failed inside the host ({e}); read receipts.list to see what is still there"),
                )
            })??
    };
    match done.durable.take() {
        None => {}
        Some(Ok(ticket)) => {
            if let Err(e) = ticket.await {
                return Err(host.journal_error(&e));
            }
        }
        Some(Err(e)) => return Err(host.journal_error(&e)),
    }
    host.compact_if_due();
    let written = append_audit(file, &audit_entry(host, &done, &operator, &p.reason)).await;
    let mut result = ClearCommitted {
        audit_error: None,
        cleared: done.cleared.len() as u64,
        receipts: done.receipts,
        tombstones: done.tombstones as u64,
    };
    if let Err(e) = written {
        tracing::error!(path = %audit.path().display(), "the clear applied but its audit line was not written: {e}");
        result.audit_error = Some(format!(
            "the clear applied but its audit line could not be written to {}: {e}",
            audit.path().display()
        ));
    }
    Ok(result)
}
