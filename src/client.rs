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
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use crate::protocol::{Delivery, ErrorBody, ErrorCode, Reply};
use crate::server::BRIDGE_SOCKET;

/// Default time a call waits for its reply.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A call that did not get a reply from the host: the three client-side errors.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ClientError {
    /// `BRIDGE_UNAVAILABLE`, `BRIDGE_DISCONNECTED` or `BRIDGE_TIMEOUT`.
    pub code: ErrorCode,
    /// `not_sent` or `unknown`.
    pub delivery: Delivery,
    /// The request ID of the call, to read its receipt with.
    pub request_id: String,
    /// What happened and what to read next.
    pub message: String,
}

impl ClientError {
    fn new(code: ErrorCode, request_id: &str, message: String) -> ClientError {
        ClientError {
            code,
            delivery: code.default_delivery(),
            request_id: request_id.to_owned(),
            message,
        }
    }

    /// The error as a reply-shaped JSON object, as `polaris call` prints it.
    pub fn to_reply_json(&self) -> Value {
        let body = ErrorBody::new(self.code, self.message.clone())
            .with_delivery(self.delivery)
            .with_details(json!({"requestId": self.request_id}));
        json!({"id": self.request_id, "ok": false, "error": body})
    }
}

type Waiters = Arc<Mutex<HashMap<String, VecDeque<oneshot::Sender<Reply>>>>>;

struct Conn {
    stream: Arc<Stream>,
    waiters: Waiters,
    /// Serialises writers so two lines never interleave.
    write: tokio::sync::Mutex<()>,
    /// Cleared by the reader when the connection ends.
    alive: Arc<std::sync::atomic::AtomicBool>,
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
    /// socket) to `sink` instead of dropping them. When a connection ends, the sink also gets
    /// `{"event":"connection.closed"}` (the client's own frame, never sent by a host), so a
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
        tokio::spawn(read_loop(
            stream.clone(),
            waiters.clone(),
            alive.clone(),
            self.events.clone(),
        ));
        let conn = Arc::new(Conn {
            stream,
            waiters,
            write: tokio::sync::Mutex::new(()),
            alive,
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
        let conn = loop {
            let conn = self.connection(request_id).await?;
            // Registering and the liveness check share the lock the reader takes when the
            // connection ends, so a waiter is never left behind on a dead connection.
            let mut w = conn.waiters.lock().expect("waiters lock");
            if conn.alive.load(std::sync::atomic::Ordering::SeqCst) {
                w.entry(request_id.to_owned())
                    .or_default()
                    .push_back(tx.take().expect("sent once"));
                drop(w);
                break conn;
            }
        };
        let mut line =
            serde_json::to_vec(&json!({"id": request_id, "method": method, "params": params}))
                .expect("a request always serialises");
        line.push(b'\n');
        let written = {
            let _w = conn.write.lock().await;
            (&*conn.stream).write_all(&line).await
        };
        if let Err(e) = written {
            conn.alive.store(false, std::sync::atomic::Ordering::SeqCst);
            return Err(ClientError::new(
                ErrorCode::BridgeDisconnected,
                request_id,
                format!(
                    "the connection to the host broke while sending {method} ({e}); the host may or may not have it. Do not resend: read receipt.status for {request_id}"
                ),
            ));
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(ClientError::new(
                ErrorCode::BridgeDisconnected,
                request_id,
                format!(
                    "the connection to the host broke after {method} was sent; it may or may not have run. Do not resend: read receipt.status for {request_id} (or task.verifyOutcome for its task)"
                ),
            )),
            Err(_) => {
                // Forget the waiter; a late reply is dropped, the receipt keeps it.
                if let Some(q) = conn.waiters.lock().expect("waiters lock").get_mut(request_id) {
                    q.retain(|s| !s.is_closed());
                }
                Err(ClientError::new(
                    ErrorCode::BridgeTimeout,
                    request_id,
                    format!(
                        "no reply to {method} within {} ms; it may still be running. Do not resend: read receipt.status for {request_id}",
                        self.timeout.as_millis()
                    ),
                ))
            }
        }
    }
}

async fn read_loop(
    stream: Arc<Stream>,
    waiters: Waiters,
    alive: Arc<std::sync::atomic::AtomicBool>,
    events: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
) {
    let mut reader = BufReader::new(&*stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(frame) = serde_json::from_str::<Value>(line.trim_end()) else {
            tracing::warn!("the host sent a line that is not JSON: {}", line.trim_end());
            continue;
        };
        if frame.get("event").is_some() && frame.get("id").is_none() {
            if let Some(sink) = &events {
                let _ = sink.send(frame);
            }
            continue;
        }
        let Ok(reply) = serde_json::from_value::<Reply>(frame) else {
            tracing::warn!(
                "the host sent a frame that is not a reply: {}",
                line.trim_end()
            );
            continue;
        };
        let Some(id) = reply.id.clone() else {
            tracing::warn!("the host sent a reply without an id: {}", line.trim_end());
            continue;
        };
        let mut w = waiters.lock().expect("waiters lock");
        if let Some(q) = w.get_mut(&id) {
            while let Some(tx) = q.pop_front() {
                if tx.send(reply.clone()).is_ok() {
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
        let _ = sink.send(json!({"event": CONNECTION_CLOSED_EVENT}));
    }
}

/// The event kind the client hands its event sink when a connection ends.
pub const CONNECTION_CLOSED_EVENT: &str = "connection.closed";
