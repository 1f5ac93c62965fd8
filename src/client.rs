//! The bridge client: how programs (the CLI, the MCP front, tests) talk to a host.
//!
//! One connection carries many calls at once; replies are matched by request ID. The client
//! never resends anything by itself and reconnecting never replays: a call whose connection
//! broke after it was written ends `BRIDGE_DISCONNECTED` with `delivery: unknown`, and the
//! caller decides what to read next.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use interprocess::local_socket::tokio::{prelude::*, Stream};
use interprocess::local_socket::GenericFilePath;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use crate::protocol::introspection::EventFrame;
use crate::protocol::results::NextRead;
use crate::protocol::{
    now_rfc3339, Delivery, ErrorBody, ErrorCode, FrameTooLargeDetails, Method, PeerRefusedDetails,
    Reply,
};
use crate::server::BRIDGE_SOCKET;

pub mod session;

/// Default time a call waits for its reply.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A call that got no reply from the host, or that the client refused to send: the client-side
/// errors `BRIDGE_UNAVAILABLE`, `BRIDGE_DISCONNECTED`, `BRIDGE_TIMEOUT` and (from the
/// [`session::Session`] gate) `CLIENT_BLOCKED_AMBIGUOUS`.
///
/// None of them is a licence to resend: [`ClientError::automatic_replay`] is always `false`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ClientError {
    /// Which client-side rule ended the call.
    pub code: ErrorCode,
    /// `not_sent` (nothing was written) or `unknown` (written; the host may or may not have it).
    pub delivery: Delivery,
    /// The request ID of the call, to read its receipt with.
    pub request_id: String,
    /// What happened and what to read next.
    pub message: String,
    /// Code-specific facts, in the host's camelCase; `details.next` is the read to call next
    /// as `{"method", "params"}`.
    pub details: Option<Value>,
}

impl ClientError {
    /// An error with the code's usual delivery and `details.next`: the receipt when the
    /// delivery is unknown, the run otherwise.
    pub fn new(code: ErrorCode, request_id: &str, message: String) -> ClientError {
        let delivery = code.default_delivery();
        // Unknown delivery: the receipt tells what happened. Nothing sent: the run tells
        // whether the host is back.
        let next = if delivery == Delivery::Unknown {
            NextRead {
                method: Method::ReceiptStatus.as_str().to_owned(),
                params: json!({"requestId": request_id}),
            }
        } else {
            NextRead {
                method: Method::RunStatus.as_str().to_owned(),
                params: json!({}),
            }
        };
        ClientError {
            code,
            delivery,
            request_id: request_id.to_owned(),
            message,
            details: Some(json!({"requestId": request_id, "next": next})),
        }
    }

    /// Always `false`: a client error never licenses resending the request.
    pub fn automatic_replay(&self) -> bool {
        false
    }

    /// The error as the wire's `error` object (`code`, `message`, `delivery`,
    /// `automaticReplay: false`, `details`).
    pub fn to_error_body(&self) -> ErrorBody {
        let body = ErrorBody::new(self.code, self.message.clone()).with_delivery(self.delivery);
        match &self.details {
            Some(d) => body.with_details(d.clone()),
            None => body.with_details(json!({"requestId": self.request_id})),
        }
    }

    /// The error as a reply-shaped JSON object, as `polaris call` prints it.
    pub fn to_reply_json(&self) -> Value {
        json!({"id": self.request_id, "ok": false, "error": self.to_error_body()})
    }
}

/// What a waiting call is told: the host's reply, or that the host refused the whole
/// connection (`HOST_BUSY`, another user) before reading anything from it.
type Answer = Result<Reply, ClientError>;

/// One call waiting for its reply, and the length of the frame it wrote, so a
/// `FRAME_TOO_LARGE` line (which carries no ID) can be matched to the calls it refused.
struct Waiter {
    tx: oneshot::Sender<Answer>,
    frame_len: usize,
}

type Waiters = Arc<Mutex<HashMap<String, VecDeque<Waiter>>>>;

struct Conn {
    stream: Arc<Stream>,
    waiters: Waiters,
    /// Serialises writers so two lines never interleave.
    write: tokio::sync::Mutex<()>,
    /// Cleared by the reader when the connection ends.
    alive: Arc<std::sync::atomic::AtomicBool>,
    /// Cancelled when the last handle goes away, so the reader drops the stream and the host
    /// sees the connection close (the reader alone would keep it open forever).
    closed: tokio_util::sync::CancellationToken,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

/// A bridge client. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct BridgeClient {
    path: PathBuf,
    conn: Arc<tokio::sync::Mutex<Option<Arc<Conn>>>>,
    timeout: Duration,
    events: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
}

impl BridgeClient {
    /// A client for the host whose sockets are in `socket_dir`. Nothing connects until the
    /// first call.
    pub fn new(socket_dir: &Path) -> BridgeClient {
        BridgeClient {
            path: socket_dir.join(BRIDGE_SOCKET),
            conn: Arc::new(tokio::sync::Mutex::new(None)),
            timeout: DEFAULT_CALL_TIMEOUT,
            events: None,
        }
    }

    /// A client of the socket at `path` (the introspection socket speaks the same framing).
    pub fn at_path(path: &Path) -> BridgeClient {
        BridgeClient {
            path: path.to_path_buf(),
            conn: Arc::new(tokio::sync::Mutex::new(None)),
            timeout: DEFAULT_CALL_TIMEOUT,
            events: None,
        }
    }

    /// Sends event frames (frames without an `id`, after `subscribe` on the introspection
    /// socket; each reads as an [`EventFrame`]) to `sink` as the host wrote them, instead of
    /// dropping them. When a connection ends, the sink also gets a frame of kind
    /// [`CONNECTION_CLOSED_EVENT`] (the client's own, with `seq` 0, never sent by a host), so a
    /// subscriber learns at once that its subscription is gone.
    pub fn with_event_sink(
        mut self,
        sink: tokio::sync::mpsc::UnboundedSender<Value>,
    ) -> BridgeClient {
        self.events = Some(sink);
        self
    }

    /// Sets how long a call waits for its reply before `BRIDGE_TIMEOUT`.
    pub fn with_timeout(mut self, timeout: Duration) -> BridgeClient {
        self.timeout = timeout;
        self
    }

    /// The bridge socket path.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    async fn connection(&self, request_id: &str) -> Result<Arc<Conn>, ClientError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if c.alive.load(std::sync::atomic::Ordering::SeqCst) {
                return Ok(c.clone());
            }
        }
        let unavailable = |e: io::Error| {
            ClientError::new(
                ErrorCode::BridgeUnavailable,
                request_id,
                format!(
                    "could not connect to the Polaris host at {} ({e}); nothing was sent. Start it with `polaris serve` or check --socket-dir",
                    self.path.display()
                ),
            )
        };
        let name = self
            .path
            .as_path()
            .to_fs_name::<GenericFilePath>()
            .map_err(unavailable)?;
        let stream = Arc::new(Stream::connect(name).await.map_err(unavailable)?);
        let waiters: Waiters = Default::default();
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let closed = tokio_util::sync::CancellationToken::new();
        tokio::spawn(read_loop(
            stream.clone(),
            waiters.clone(),
            alive.clone(),
            self.events.clone(),
            closed.clone(),
        ));
        let conn = Arc::new(Conn {
            stream,
            waiters,
            write: tokio::sync::Mutex::new(()),
            alive,
            closed,
        });
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Calls `method` with a fresh UUID as request ID.
    pub async fn call(&self, method: &str, params: Value) -> Result<Reply, ClientError> {
        self.call_with_id(&uuid::Uuid::new_v4().to_string(), method, params)
            .await
    }

    /// Calls `method` under the given request ID (a re-query when the content is the same).
    pub async fn call_with_id(
        &self,
        request_id: &str,
        method: &str,
        params: Value,
    ) -> Result<Reply, ClientError> {
        let (tx, rx) = oneshot::channel();
        let mut tx = Some(tx);
        let mut line =
            serde_json::to_vec(&json!({"id": request_id, "method": method, "params": params}))
                .expect("a request always serialises");
        let frame_len = line.len();
        line.push(b'\n');
        let conn = loop {
            let conn = self.connection(request_id).await?;
            // Registering and the liveness check share the lock the reader takes when the
            // connection ends, so a waiter is never left behind on a dead connection.
            let mut w = conn.waiters.lock().expect("waiters lock");
            if conn.alive.load(std::sync::atomic::Ordering::SeqCst) {
                w.entry(request_id.to_owned())
                    .or_default()
                    .push_back(Waiter {
                        tx: tx.take().expect("sent once"),
                        frame_len,
                    });
                drop(w);
                break conn;
            }
        };
        // The write runs in its own task, so a caller that stops waiting (a timeout around this
        // call, an MCP cancellation) never leaves half a line on the shared connection.
        let writer = conn.clone();
        let write = tokio::spawn(async move {
            let _w = writer.write.lock().await;
            let written = (&*writer.stream).write_all(&line).await;
            if written.is_err() {
                writer
                    .alive
                    .store(false, std::sync::atomic::Ordering::SeqCst);
            }
            written
        });
        let now = tokio::time::Instant::now();
        // A timeout too large to add means "wait a very long time", never a panic.
        let deadline = now
            .checked_add(self.timeout)
            .unwrap_or_else(|| now + Duration::from_secs(10 * 365 * 86_400));
        let timed_out = |conn: &Conn| {
            // Forget the waiter; a late reply is dropped, the receipt keeps it.
            if let Some(q) = conn
                .waiters
                .lock()
                .expect("waiters lock")
                .get_mut(request_id)
            {
                q.retain(|s| !s.tx.is_closed());
            }
            ClientError::new(
                ErrorCode::BridgeTimeout,
                request_id,
                format!(
                    "no reply to {method} within {} ms; it may still be running. Do not resend: read receipt.status for {request_id}",
                    self.timeout.as_millis()
                ),
            )
        };
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                // The host may have answered before the connection broke, or refused the
                // connection before reading anything: that answer is on its way to this call.
                if let Ok(Ok(answer)) = tokio::time::timeout(REFUSAL_GRACE, rx).await {
                    return answer;
                }
                return Err(ClientError::new(
                    ErrorCode::BridgeDisconnected,
                    request_id,
                    format!(
                        "the connection to the host broke while sending {method} ({e}); the host may or may not have it. Do not resend: read receipt.status for {request_id}"
                    ),
                ))
            }
            Ok(Err(join)) => {
                return Err(ClientError::new(
                    ErrorCode::BridgeDisconnected,
                    request_id,
                    format!(
                        "sending {method} failed inside the client ({join}); the host may or may not have it. Do not resend: read receipt.status for {request_id}"
                    ),
                ))
            }
            Err(_) => {
                drop(rx);
                return Err(timed_out(&conn));
            }
        }
        let got = tokio::time::timeout_at(deadline, rx).await;
        match got {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(ClientError::new(
                ErrorCode::BridgeDisconnected,
                request_id,
                format!(
                    "the connection to the host broke after {method} was sent; it may or may not have run. Do not resend: read receipt.status for {request_id} (or task.verifyOutcome for its task)"
                ),
            )),
            Err(_) => Err(timed_out(&conn)),
        }
    }
}

async fn read_loop(
    stream: Arc<Stream>,
    waiters: Waiters,
    alive: Arc<std::sync::atomic::AtomicBool>,
    events: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    closed: tokio_util::sync::CancellationToken,
) {
    let mut reader = BufReader::new(&*stream);
    let mut line = String::new();
    loop {
        line.clear();
        let read = tokio::select! {
            read = reader.read_line(&mut line) => read,
            // Every handle is gone: nobody waits for a reply on this connection any more.
            _ = closed.cancelled() => break,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = line.trim_end();
        // A reply is read straight into its type; a line that is not one is an event frame
        // (no `id`, after `subscribe`) or something the host should not have sent.
        let reply = match serde_json::from_str::<Reply>(text) {
            Ok(reply) => reply,
            Err(_) => {
                match serde_json::from_str::<Value>(text) {
                    Ok(frame) if EventFrame::deserialize(&frame).is_ok() => {
                        if let Some(sink) = &events {
                            let _ = sink.send(frame);
                        }
                    }
                    Ok(_) => tracing::warn!("the host sent a frame that is not a reply: {text}"),
                    Err(_) => tracing::warn!("the host sent a line that is not JSON: {text}"),
                }
                continue;
            }
        };
        let Some(id) = reply.id.clone() else {
            answer_connection_line(&reply, &waiters, &alive);
            continue;
        };
        let mut w = waiters.lock().expect("waiters lock");
        if let Some(q) = w.get_mut(&id) {
            while let Some(waiter) = q.pop_front() {
                if waiter.tx.send(Ok(reply.clone())).is_ok() {
                    break;
                }
            }
            if q.is_empty() {
                w.remove(&id);
            }
        }
    }
    let mut w = waiters.lock().expect("waiters lock");
    alive.store(false, std::sync::atomic::Ordering::SeqCst);
    // Dropping the senders tells every waiting call that the connection broke.
    w.clear();
    drop(w);
    if let Some(sink) = &events {
        let closed = EventFrame {
            event: CONNECTION_CLOSED_EVENT.to_owned(),
            seq: 0,
            at: now_rfc3339(),
            data: Value::Null,
        };
        let _ = sink.send(serde_json::to_value(closed).expect("an event frame serialises"));
    }
}

/// How long a call whose write failed waits for the host's refusal line before it reports the
/// connection as broken.
const REFUSAL_GRACE: Duration = Duration::from_millis(500);

/// Hands a reply without an ID (the host could not tie it to a request) to the calls it is
/// about: `HOST_BUSY` and a refused peer (`details.peerUid`) mean the host read nothing from
/// this connection, so every waiting call ends `not_sent`; `FRAME_TOO_LARGE` (with
/// `details.maxFrameBytes`) refused the calls whose frames were longer than that, and the
/// host closes the connection before reading any later one, so none of them ran.
fn answer_connection_line(reply: &Reply, waiters: &Waiters, alive: &std::sync::atomic::AtomicBool) {
    let Some(err) = reply.error.as_ref().filter(|_| !reply.ok) else {
        tracing::warn!("the host sent a reply without an id");
        return;
    };
    let refused_connection =
        err.code == ErrorCode::HostBusy || err.details_as::<PeerRefusedDetails>().is_some();
    let max_frame = err
        .details_as::<FrameTooLargeDetails>()
        .map(|d| d.max_frame_bytes as u64)
        .filter(|_| err.code == ErrorCode::FrameTooLarge);
    let mut w = waiters.lock().expect("waiters lock");
    // The host closes the connection after these and reads nothing more: later calls must
    // not be written to it, but to a new connection.
    if refused_connection || matches!(err.code, ErrorCode::FrameTooLarge | ErrorCode::FrameTimeout)
    {
        alive.store(false, std::sync::atomic::Ordering::SeqCst);
    }
    if refused_connection {
        for (id, q) in w.drain() {
            for waiter in q {
                let mut e = ClientError::new(err.code, &id, err.message.clone());
                e.delivery = Delivery::NotSent;
                if let (Some(Value::Object(mine)), Some(Value::Object(host))) =
                    (e.details.as_mut(), err.details.as_ref())
                {
                    mine.extend(host.clone());
                }
                let _ = waiter.tx.send(Err(e));
            }
        }
    } else if let Some(max) = max_frame {
        for (id, q) in w.iter_mut() {
            q.retain_mut(|waiter| {
                if waiter.frame_len as u64 <= max {
                    return true;
                }
                let mut own = reply.clone();
                own.id = Some(id.clone());
                let (tx, _) = oneshot::channel();
                let _ = std::mem::replace(&mut waiter.tx, tx).send(Ok(own));
                false
            });
        }
        w.retain(|_, q| !q.is_empty());
    } else {
        tracing::warn!("the host sent an error without an id: {}", err.message);
    }
}

/// The event kind the client hands its event sink when a connection ends.
pub const CONNECTION_CLOSED_EVENT: &str = "connection.closed";
