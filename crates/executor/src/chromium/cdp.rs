//! A thin Chrome DevTools Protocol client over `--remote-debugging-pipe`.
//!
//! The browser reads commands on its fd 3 and writes replies and events on its fd 4; every
//! message is one JSON object followed by a NUL byte. One writer task owns the command pipe,
//! one reader task owns the reply pipe: a reply wakes the call that waits for its `id`, and the
//! few events the executor needs update a per-page [`PageSignals`] (a `watch`, so nothing
//! queues up and a slow reader never holds the browser back). A JavaScript dialog is answered
//! by the reader itself, the moment it opens ([`super::dialogs`]): nothing the executor waits
//! on can stand between a dialog and its answer.
//!
//! Only the methods the executor uses are typed (see [`methods`]); a call is
//! `conn.call(session, &methods::PageNavigate { .. })`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot, watch};

use super::dialogs::Dialogs;
use super::network::NetworkLog;
use super::origins::Origins;
use crate::protocol::evidence::DEFAULT_EVIDENCE_REQUESTS;

/// What each DevTools pipe holds (the browser's launch asks the kernel for it): a large answer
/// (a page's outline is hundreds of KiB) then crosses in one write, instead of in 64 KiB turns
/// between the browser and the reader, each waiting for the other to be scheduled.
pub const PIPE_BYTES: usize = 1 << 20;

/// A typed CDP command.
pub trait Method: Serialize {
    /// The protocol's name for it, e.g. `Page.navigate`.
    const NAME: &'static str;
    /// What the browser answers.
    type Returns: DeserializeOwned;
}

/// Why a call got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CdpError {
    /// The pipe closed: the browser exited or was killed. The reason says which, when known.
    Closed(String),
    /// The browser answered with an error.
    Protocol {
        /// The protocol's error code.
        code: i64,
        /// Its message, e.g. "Execution context was destroyed."
        message: String,
    },
    /// The answer did not have the expected shape.
    Decode(String),
}

impl std::fmt::Display for CdpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CdpError::Closed(why) => write!(f, "the browser connection closed ({why})"),
            CdpError::Protocol { code, message } => {
                write!(f, "the browser answered error {code}: {message}")
            }
            CdpError::Decode(e) => write!(f, "an unexpected answer from the browser: {e}"),
        }
    }
}

impl CdpError {
    /// Whether the error means the page's JavaScript world went away under the call (a
    /// navigation replaced the document): worth trying again on the next document.
    pub fn is_context_gone(&self) -> bool {
        match self {
            CdpError::Protocol { message, .. } => {
                let m = message.as_str();
                m.contains("Execution context was destroyed")
                    || m.contains("Cannot find default execution context")
                    || m.contains("Cannot find context with specified id")
                    || m.contains("Inspected target navigated or closed")
                    || m.contains("Promise was collected")
            }
            _ => false,
        }
    }
}

/// What the executor needs to know about one attached page, kept up to date by the reader.
#[derive(Clone, Debug, Default)]
pub struct PageSignals {
    /// Main-frame navigations committed (a form submit's response, a redirect, an error page).
    pub navigations: u64,
    /// Main-frame navigations to another document requested or started, committed or not (a
    /// form submit shows here as soon as it is sent, long before a slow server answers it).
    pub started_navigations: u64,
    /// JavaScript dialogs the page opened (each answered at once; see [`super::dialogs`]).
    pub dialogs: u64,
    /// New windows the page asked for (`Page.windowOpen`: `window.open`, a `target=_blank`
    /// link), so an action's reply looks for the tabs it opened only when there are some.
    pub windows_opened: u64,
    /// Main-frame `load` events.
    pub loads: u64,
    /// Whether the current document fired `load` (reset by each navigation).
    pub loaded: bool,
    /// The last main-frame URL committed with a real response (error pages are not counted:
    /// their URL is the request that failed, which may have been a POST).
    pub url: String,
    /// The URL whose load failed when the page shows the browser's own error page (the
    /// connection closed without an answer, say); cleared by the next real document.
    pub error_page: Option<String>,
    /// Set once the page cannot be used any more: its renderer crashed, it was closed, or the
    /// browser went away.
    pub gone: Option<String>,
    /// The URL a form is being POSTed to, from the request of a main-frame form submission
    /// until the next main-frame document commits.
    pub post_pending: Option<String>,
    /// URLs of main-frame documents that are a POST's own answer (the form's URL committed
    /// with no redirect): going back to one, or reloading it, sends the form again. At most
    /// [`MAX_POSTED`] are kept.
    pub posted: Vec<String>,
    /// URLs of documents a POST redirected to (post/redirect/get): loading one again is a GET.
    pub after_post: Vec<String>,
}

/// The most URLs [`PageSignals::posted`] and [`PageSignals::after_post`] keep each.
pub const MAX_POSTED: usize = 256;

fn remember(list: &mut Vec<String>, url: String) {
    if !list.contains(&url) && list.len() < MAX_POSTED {
        list.push(url);
    }
}

#[derive(Deserialize)]
struct ProtocolError {
    code: i64,
    message: String,
}

/// One message from the browser: a reply (`id`) or an event (`method`).
#[derive(Deserialize)]
struct Incoming<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<ProtocolError>,
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(rename = "sessionId")]
    session_id: Option<&'a str>,
}

#[derive(Serialize)]
struct Outgoing<'a, P> {
    id: u64,
    method: &'static str,
    params: &'a P,
    #[serde(rename = "sessionId", skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
}

type Answer = Result<Box<RawValue>, CdpError>;

struct Session {
    /// The page's target, which is also its main frame's id.
    target_id: String,
    signals: watch::Sender<PageSignals>,
    /// How the page's dialogs are answered, and their record.
    dialogs: Arc<Dialogs>,
    /// What the page sent, per action (SPEC §16).
    network: Arc<NetworkLog>,
}

/// A worker attached under a tracked page (auto-attach): its network events go to the page's
/// log.
struct Worker {
    /// The page's session.
    parent: String,
    network: Arc<NetworkLog>,
}

struct Shared {
    outbox: mpsc::UnboundedSender<Vec<u8>>,
    next_id: AtomicU64,
    calls: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    sessions: Mutex<HashMap<String, Session>>,
    /// Workers' sessions, by session id.
    workers: Mutex<HashMap<String, Worker>>,
    /// The non-public addresses pages may reach, once [`Connection::guard`] paused requests.
    origins: std::sync::OnceLock<Arc<Origins>>,
    /// `Some(reason)` once the pipe closed.
    closed: watch::Sender<Option<String>>,
}

impl Shared {
    fn close(&self, reason: &str) {
        let first = self.closed.send_if_modified(|c| {
            if c.is_none() {
                *c = Some(reason.to_owned());
                true
            } else {
                false
            }
        });
        if !first {
            return;
        }
        // Dropping the senders answers every waiting call with `Closed`.
        self.calls.lock().expect("cdp calls lock").clear();
        for s in self.sessions.lock().expect("cdp sessions lock").values() {
            s.signals.send_modify(|p| {
                p.gone
                    .get_or_insert_with(|| format!("the browser went away ({reason})"));
            });
        }
    }

    fn closed_reason(&self) -> Option<String> {
        self.closed.borrow().clone()
    }

    /// Sends a command whose answer nobody waits for (the reader drops an answer with no
    /// waiter), on `session` or the browser's own (`None`). Used from the reader itself, which
    /// must never wait on the browser.
    fn send_detached<M: Method>(&self, session: Option<&str>, params: &M) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let Ok(mut msg) = serde_json::to_vec(&Outgoing {
            id,
            method: M::NAME,
            params,
            session_id: session,
        }) else {
            return;
        };
        msg.push(0);
        tracing::trace!(id, method = M::NAME, session, "CDP command sent");
        let _ = self.outbox.send(msg);
    }

    /// Asks for the body of a request whose `requestWillBeSent` did not carry it, and hands it
    /// to `log` when it comes. Called from the reader, so it waits on nothing itself.
    fn fetch_body(&self, session: &str, request_id: String, log: Arc<NetworkLog>) {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct PostData {
            post_data: String,
            #[serde(default)]
            base64_encoded: bool,
        }
        tracing::debug!(request_id, "asking for a request's body");
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let Ok(mut msg) = serde_json::to_vec(&Outgoing {
            id,
            method: "Network.getRequestPostData",
            params: &serde_json::json!({ "requestId": request_id }),
            session_id: Some(session),
        }) else {
            return;
        };
        msg.push(0);
        tracing::trace!(
            id,
            method = "Network.getRequestPostData",
            session,
            "CDP command sent"
        );
        let (tx, rx) = oneshot::channel();
        self.calls.lock().expect("cdp calls lock").insert(id, tx);
        if self.outbox.send(msg).is_err() {
            self.calls.lock().expect("cdp calls lock").remove(&id);
            return;
        }
        /// Marks the body answered however the task below ends.
        struct Done(Arc<NetworkLog>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.fetch_done();
            }
        }
        log.fetch_started();
        let done = Done(log.clone());
        tokio::spawn(async move {
            let _done = done;
            let raw = match rx.await {
                Ok(Ok(raw)) => raw,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "a request's body could not be read for its digest");
                    return;
                }
                Err(_) => return,
            };
            let Ok(p) = serde_json::from_str::<PostData>(raw.get()) else {
                tracing::debug!(
                    answer = raw.get().len(),
                    "a request's body came in an unexpected shape"
                );
                return;
            };
            let body = if p.base64_encoded {
                match super::network::decode_base64(&p.post_data) {
                    Some(b) => b,
                    None => return,
                }
            } else {
                p.post_data.into_bytes()
            };
            log.set_body(&request_id, &body);
        });
    }

    /// A request the browser paused (`Fetch.requestPaused`, browser-wide, [`Connection::guard`]):
    /// sent on if its URL is allowed, else failed as `BlockedByClient`, which the page's network
    /// log records as `blocked`. Answered at once, from the reader.
    fn on_paused(&self, params: Option<&RawValue>) {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Paused {
            request_id: String,
            request: PausedRequest,
        }
        #[derive(Deserialize)]
        struct PausedRequest {
            url: String,
        }
        let Some(p) = params.and_then(|p| serde_json::from_str::<Paused>(p.get()).ok()) else {
            return;
        };
        let allowed = self.origins.get().is_some_and(|o| o.allows(&p.request.url));
        if allowed {
            self.send_detached(
                None,
                &methods::FetchContinueRequest {
                    request_id: p.request_id,
                },
            );
        } else {
            tracing::info!(url = %crate::protocol::evidence::redact_url(&p.request.url), "a page's request to a non-public address was blocked (--allow-origin)");
            self.send_detached(
                None,
                &methods::FetchFailRequest {
                    request_id: p.request_id,
                    error_reason: "BlockedByClient",
                },
            );
        }
    }

    /// One event from the browser, to the handler of its family: browser-wide, a worker's
    /// network, or a page's.
    fn on_event(&self, method: &str, params: Option<&RawValue>, session: Option<&str>) {
        if session.is_none() && method == "Fetch.requestPaused" {
            return self.on_paused(params);
        }
        let Some(session) = session else {
            if method == "Target.detachedFromTarget" {
                self.on_page_detached(params);
            }
            return;
        };
        if method.starts_with("Network.") && self.on_worker_network(session, method, params) {
            return;
        }
        let sessions = self.sessions.lock().expect("cdp sessions lock");
        let Some(s) = sessions.get(session) else {
            return;
        };
        match method {
            m if m.starts_with("Network.") => self.on_page_network(session, s, m, params),
            "Target.attachedToTarget" => self.on_worker_attached(session, s, params),
            "Target.detachedFromTarget" => self.on_worker_detached(params),
            "Page.frameNavigated" => on_frame_navigated(s, params),
            "Page.navigatedWithinDocument" => on_navigated_within_document(s, params),
            "Page.frameRequestedNavigation" | "Page.frameStartedNavigating" => {
                on_navigation_started(s, params)
            }
            "Page.javascriptDialogOpening" => self.on_dialog_opening(session, s, params),
            "Page.windowOpen" => s.signals.send_modify(|p| p.windows_opened += 1),
            "Page.loadEventFired" => on_load(s),
            "Inspector.targetCrashed" => on_gone(s, "the page's renderer crashed"),
            "Inspector.detached" => on_gone(s, "the page was detached"),
            _ => {}
        }
    }

    /// A page's session ended (`Target.detachedFromTarget`, browser-wide): the page is gone.
    fn on_page_detached(&self, params: Option<&RawValue>) {
        let Some(d) = parse_params::<Detached>(params) else {
            return;
        };
        let removed = self
            .sessions
            .lock()
            .expect("cdp sessions lock")
            .remove(&d.session_id);
        if let Some(s) = removed {
            s.signals.send_modify(|p| {
                p.gone
                    .get_or_insert_with(|| "the page was closed".to_owned());
            });
        }
    }

    /// A `Network.*` event of a worker's session, into its page's log. `false` when `session`
    /// is not a worker's.
    fn on_worker_network(&self, session: &str, method: &str, params: Option<&RawValue>) -> bool {
        let log = self
            .workers
            .lock()
            .expect("cdp workers lock")
            .get(session)
            .map(|w| w.network.clone());
        let Some(log) = log else {
            return false;
        };
        if let Some(fetch) = log.on_event(session, method, params) {
            self.fetch_body(session, fetch.request_id, log);
        }
        true
    }

    /// A `Network.*` event of the page `s`, into its log.
    fn on_page_network(&self, session: &str, s: &Session, method: &str, params: Option<&RawValue>) {
        if let Some(fetch) = s.network.on_event(session, method, params) {
            self.fetch_body(session, fetch.request_id, s.network.clone());
        }
    }

    /// A worker of the page (auto-attach, SPEC §16): its requests are the page's. It runs on;
    /// nothing waits for it.
    fn on_worker_attached(&self, session: &str, s: &Session, params: Option<&RawValue>) {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct AttachedTarget {
            session_id: String,
            target_info: AttachedInfo,
            #[serde(default)]
            waiting_for_debugger: bool,
        }
        #[derive(Deserialize)]
        struct AttachedInfo {
            #[serde(rename = "type")]
            kind: String,
        }
        let Some(a) = parse_params::<AttachedTarget>(params) else {
            return;
        };
        if a.target_info.kind.contains("worker") {
            self.workers.lock().expect("cdp workers lock").insert(
                a.session_id.clone(),
                Worker {
                    parent: session.to_owned(),
                    network: s.network.clone(),
                },
            );
            self.send_detached(Some(&a.session_id), &methods::NetworkEnable::default());
        }
        if a.waiting_for_debugger {
            self.send_detached(Some(&a.session_id), &methods::RunIfWaitingForDebugger {});
        }
    }

    /// A worker of a page is gone: its session is forgotten.
    fn on_worker_detached(&self, params: Option<&RawValue>) {
        if let Some(d) = parse_params::<Detached>(params) {
            self.workers
                .lock()
                .expect("cdp workers lock")
                .remove(&d.session_id);
        }
    }

    /// A JavaScript dialog opened on the page `s`: answered as its dialogs say, and counted.
    fn on_dialog_opening(&self, session: &str, s: &Session, params: Option<&RawValue>) {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct DialogOpening {
            message: String,
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            default_prompt: String,
        }
        let Some(d) = parse_params::<DialogOpening>(params) else {
            // Unreadable, yet open: dismiss it rather than leave the page stopped.
            self.send_detached(
                Some(session),
                &methods::HandleJavaScriptDialog {
                    accept: false,
                    prompt_text: None,
                },
            );
            return;
        };
        let reply = s.dialogs.answer(&d.kind, &d.message, &d.default_prompt);
        tracing::debug!(kind = %d.kind, accept = reply.accept, "answered a JavaScript dialog");
        self.send_detached(
            Some(session),
            &methods::HandleJavaScriptDialog {
                accept: reply.accept,
                prompt_text: reply.prompt_text,
            },
        );
        s.signals.send_modify(|p| p.dialogs += 1);
    }
}

/// `Target.detachedFromTarget`'s params: the session that ended.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Detached {
    session_id: String,
}

/// An event's params as `T`; `None` when absent or unreadable.
fn parse_params<T: DeserializeOwned>(params: Option<&RawValue>) -> Option<T> {
    serde_json::from_str(params?.get()).ok()
}

/// The main frame of the page `s` committed a document (`Page.frameNavigated`): its URL, or
/// the error page the browser shows, and whether it answered a POST.
fn on_frame_navigated(s: &Session, params: Option<&RawValue>) {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Frame {
        parent_id: Option<String>,
        url: String,
        unreachable_url: Option<String>,
    }
    #[derive(Deserialize)]
    struct FrameNavigated {
        frame: Frame,
    }
    let Some(n) = parse_params::<FrameNavigated>(params) else {
        return;
    };
    if n.frame.parent_id.is_some() {
        return;
    }
    s.signals.send_modify(|p| {
        p.navigations += 1;
        p.loaded = false;
        if let (Some(posted), None) = (p.post_pending.take(), &n.frame.unreachable_url) {
            if posted == n.frame.url {
                remember(&mut p.posted, posted);
            } else {
                remember(&mut p.after_post, n.frame.url.clone());
            }
        }
        match n.frame.unreachable_url {
            None => {
                p.url = n.frame.url;
                p.error_page = None;
            }
            Some(failed) => p.error_page = Some(failed),
        }
    });
}

/// The main frame of the page `s` moved within its document: its URL.
fn on_navigated_within_document(s: &Session, params: Option<&RawValue>) {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct WithinDocument {
        frame_id: String,
        url: String,
    }
    if let Some(n) = parse_params::<WithinDocument>(params) {
        if n.frame_id == s.target_id {
            s.signals.send_modify(|p| p.url = n.url);
        }
    }
}

/// A navigation of the main frame to another document, as soon as it is asked for
/// (`frameRequestedNavigation`: a form submit, a link, `location = …`) or started
/// (`frameStartedNavigating`, newer browsers, any initiator). Either may come alone; counting
/// both twice is harmless, since only growth is looked at.
fn on_navigation_started(s: &Session, params: Option<&RawValue>) {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct FrameNavigating {
        frame_id: String,
        /// `frameStartedNavigating` only: `sameDocument`, `differentDocument`, `reload`, …
        navigation_type: Option<String>,
        /// `frameRequestedNavigation` only: `formSubmissionPost`, `anchorClick`, …
        reason: Option<String>,
        /// `frameRequestedNavigation`: where to.
        url: Option<String>,
    }
    let Some(n) = parse_params::<FrameNavigating>(params) else {
        return;
    };
    let same_document = n
        .navigation_type
        .as_deref()
        .is_some_and(|t| t.contains("SameDocument") || t == "sameDocument");
    if n.frame_id == s.target_id && !same_document {
        let post = n
            .url
            .filter(|_| n.reason.as_deref() == Some("formSubmissionPost"));
        s.signals.send_modify(|p| {
            p.started_navigations += 1;
            if post.is_some() {
                p.post_pending = post;
            }
        });
    }
}

/// The page `s` fired `load`.
fn on_load(s: &Session) {
    s.signals.send_modify(|p| {
        p.loads += 1;
        p.loaded = true;
    });
}

/// The page `s` is gone, for the reason `why` unless one was already given.
fn on_gone(s: &Session, why: &str) {
    s.signals.send_modify(|p| {
        p.gone.get_or_insert_with(|| why.to_owned());
    });
}

/// Removes a call's entry when the call is dropped before its answer (a deadline passed).
struct Pending<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.shared
            .calls
            .lock()
            .expect("cdp calls lock")
            .remove(&self.id);
    }
}

/// A connection to one browser. Cheap to clone.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

impl Connection {
    /// Starts the reader and writer tasks over the two pipe ends.
    pub fn start(commands: pipe::Sender, replies: pipe::Receiver) -> Connection {
        let (outbox, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let (closed, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            outbox,
            next_id: AtomicU64::new(1),
            calls: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
            origins: std::sync::OnceLock::new(),
            closed,
        });
        let writer_shared = Arc::downgrade(&shared);
        tokio::spawn(async move {
            let mut commands = commands;
            while let Some(msg) = rx.recv().await {
                if let Err(e) = commands.write_all(&msg).await {
                    if let Some(s) = writer_shared.upgrade() {
                        s.close(&format!("writing to the browser failed: {e}"));
                    }
                    return;
                }
            }
        });
        let reader_shared = shared.clone();
        tokio::spawn(async move {
            // As large as the pipe: a large answer is read in one go.
            let mut replies = BufReader::with_capacity(PIPE_BYTES, replies);
            let mut buf = Vec::with_capacity(64 * 1024);
            let reason = loop {
                buf.clear();
                match replies.read_until(0, &mut buf).await {
                    Ok(0) => break "the browser closed its pipe".to_owned(),
                    Ok(_) => {}
                    Err(e) => break format!("reading from the browser failed: {e}"),
                }
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                reader_shared.dispatch(&buf);
            };
            reader_shared.close(&reason);
        });
        Connection { shared }
    }

    /// Sends a command (to a page's session, or to the browser when `session` is `None`) and
    /// waits for its answer. Dropping the future abandons the call; the browser may still
    /// carry it out.
    pub async fn call<M: Method>(
        &self,
        session: Option<&str>,
        params: &M,
    ) -> Result<M::Returns, CdpError> {
        let raw = self.call_raw(M::NAME, session, params).await?;
        serde_json::from_str(raw.get())
            .map_err(|e| CdpError::Decode(format!("{}: {e}: {}", M::NAME, raw.get())))
    }

    async fn call_raw<P: Serialize>(
        &self,
        method: &'static str,
        session: Option<&str>,
        params: &P,
    ) -> Answer {
        let shared = &*self.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut msg = serde_json::to_vec(&Outgoing {
            id,
            method,
            params,
            session_id: session,
        })
        .map_err(|e| CdpError::Decode(e.to_string()))?;
        msg.push(0);
        tracing::trace!(id, method, session, bytes = msg.len(), "CDP command sent");
        let (tx, rx) = oneshot::channel();
        shared.calls.lock().expect("cdp calls lock").insert(id, tx);
        let _pending = Pending { shared, id };
        // Checked after registering: a close that ran before the insert left this entry
        // behind, so look again rather than wait forever.
        if let Some(why) = shared.closed_reason() {
            return Err(CdpError::Closed(why));
        }
        if shared.outbox.send(msg).is_err() {
            return Err(CdpError::Closed("the writer stopped".into()));
        }
        match rx.await {
            Ok(answer) => answer,
            Err(_) => Err(CdpError::Closed(
                shared
                    .closed_reason()
                    .unwrap_or_else(|| "the browser went away".into()),
            )),
        }
    }

    /// Sets the URL a tracked session reports before its first navigation is seen (a tab
    /// attached after it loaded).
    pub fn seed_url(&self, session_id: &str, url: &str) {
        if let Some(s) = self
            .shared
            .sessions
            .lock()
            .expect("cdp sessions lock")
            .get(session_id)
        {
            s.signals.send_modify(|p| {
                if p.url.is_empty() {
                    p.url = url.to_owned();
                }
            });
        }
    }

    /// Starts tracking the events of an attached page session. Its dialogs are dismissed (and
    /// recorded where nobody reads them); [`Connection::track_answering`] gives them a task's
    /// record and its actions' answers.
    pub fn track(&self, session_id: &str, target_id: &str) -> watch::Receiver<PageSignals> {
        self.track_answering(
            session_id,
            target_id,
            Dialogs::new(),
            NetworkLog::new(DEFAULT_EVIDENCE_REQUESTS),
        )
    }

    /// Starts tracking the events of an attached page session; its dialogs are answered as
    /// `dialogs` decides, and recorded there; what it sends is recorded in `network`.
    pub fn track_answering(
        &self,
        session_id: &str,
        target_id: &str,
        dialogs: Arc<Dialogs>,
        network: Arc<NetworkLog>,
    ) -> watch::Receiver<PageSignals> {
        let (tx, rx) = watch::channel(PageSignals::default());
        if let Some(why) = self.shared.closed_reason() {
            tx.send_modify(|p| p.gone = Some(format!("the browser went away ({why})")));
        }
        self.shared
            .sessions
            .lock()
            .expect("cdp sessions lock")
            .insert(
                session_id.to_owned(),
                Session {
                    target_id: target_id.to_owned(),
                    signals: tx,
                    dialogs,
                    network,
                },
            );
        rx
    }

    /// Blocks, browser-wide, every request of every page, frame, tab and worker to a
    /// non-public address that `origins` does not allow: such requests are paused
    /// ([`Origins::pause_patterns`]) and the reader fails or continues each. Called once, before
    /// any page opens.
    pub async fn guard(&self, origins: Arc<Origins>) -> Result<(), CdpError> {
        let _ = self.shared.origins.set(origins);
        let patterns = Origins::pause_patterns()
            .into_iter()
            .map(|url_pattern| methods::RequestPattern { url_pattern })
            .collect();
        self.call(None, &methods::FetchEnable { patterns })
            .await
            .map(|_| ())
    }

    /// Stops tracking a session (its page is being closed).
    pub fn untrack(&self, session_id: &str) {
        self.shared
            .sessions
            .lock()
            .expect("cdp sessions lock")
            .remove(session_id);
        self.shared
            .workers
            .lock()
            .expect("cdp workers lock")
            .retain(|_, w| w.parent != session_id);
    }

    /// `Some(reason)` once the browser connection closed.
    pub fn closed(&self) -> Option<String> {
        self.shared.closed_reason()
    }

    /// Resolves when the connection closes.
    pub async fn wait_closed(&self) {
        let mut rx = self.shared.closed.subscribe();
        let _ = rx.wait_for(|c| c.is_some()).await;
    }

    /// Marks the connection closed (the browser is being killed).
    pub fn close(&self, reason: &str) {
        self.shared.close(reason);
    }
}

impl Shared {
    fn dispatch(&self, message: &[u8]) {
        let Ok(msg) = serde_json::from_slice::<Incoming<'_>>(message) else {
            tracing::debug!(
                len = message.len(),
                "an unreadable message from the browser"
            );
            return;
        };
        if let Some(id) = msg.id {
            tracing::trace!(id, bytes = message.len(), "CDP answer read");
            let waiter = self.calls.lock().expect("cdp calls lock").remove(&id);
            if let Some(tx) = waiter {
                let answer = match (msg.error, msg.result) {
                    (Some(e), _) => Err(CdpError::Protocol {
                        code: e.code,
                        message: e.message,
                    }),
                    (None, Some(r)) => Ok(r.to_owned()),
                    (None, None) => Ok(RawValue::from_string("{}".into()).expect("valid JSON")),
                };
                let _ = tx.send(answer);
            }
        } else if let Some(method) = msg.method {
            tracing::trace!(method, session = msg.session_id, "CDP event read");
            self.on_event(method, msg.params, msg.session_id);
        }
    }
}

/// The commands the executor sends, typed.
pub mod methods {
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    use super::Method;

    /// An empty answer.
    #[derive(Debug, Deserialize)]
    pub struct Empty {}

    /// `Browser.getVersion`.
    #[derive(Serialize)]
    pub struct BrowserGetVersion {}
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Version {
        /// E.g. `HeadlessChrome/156.0.7573.0`.
        pub product: String,
    }
    impl Method for BrowserGetVersion {
        const NAME: &'static str = "Browser.getVersion";
        type Returns = Version;
    }

    /// `Target.createBrowserContext`: cookies and storage isolated from every other task.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct CreateBrowserContext {
        /// Keep it when the creating session detaches (the pipe's root session never does).
        pub dispose_on_detach: bool,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct BrowserContext {
        /// The new context.
        pub browser_context_id: String,
    }
    impl Method for CreateBrowserContext {
        const NAME: &'static str = "Target.createBrowserContext";
        type Returns = BrowserContext;
    }

    /// `Target.disposeBrowserContext`: closes its pages and forgets its storage.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct DisposeBrowserContext {
        /// The context.
        pub browser_context_id: String,
    }
    impl Method for DisposeBrowserContext {
        const NAME: &'static str = "Target.disposeBrowserContext";
        type Returns = Empty;
    }

    /// `Target.createTarget`: a new page.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct CreateTarget {
        /// Its first URL.
        pub url: String,
        /// The context it lives in.
        pub browser_context_id: String,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Target {
        /// The new target (also its main frame's id).
        pub target_id: String,
    }
    impl Method for CreateTarget {
        const NAME: &'static str = "Target.createTarget";
        type Returns = Target;
    }

    /// `Target.attachToTarget` with `flatten: true`: the page's commands and events travel on
    /// this same pipe, tagged with the returned `sessionId`.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct AttachToTarget {
        /// The page.
        pub target_id: String,
        /// Always true.
        pub flatten: bool,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Attached {
        /// The session to address the page with.
        pub session_id: String,
    }
    impl Method for AttachToTarget {
        const NAME: &'static str = "Target.attachToTarget";
        type Returns = Attached;
    }

    /// `Target.getTargets`: every target of the browser, to find the tabs a task's pages
    /// opened (SPEC §15).
    #[derive(Serialize)]
    pub struct GetTargets {}
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct TargetInfos {
        /// The targets.
        pub target_infos: Vec<TargetInfo>,
    }
    /// One target.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct TargetInfo {
        /// Its id (a page's is also its main frame's).
        pub target_id: String,
        /// `page`, `iframe`, `worker`, …
        #[serde(rename = "type")]
        pub kind: String,
        /// Its title.
        #[serde(default)]
        pub title: String,
        /// Its URL.
        #[serde(default)]
        pub url: String,
        /// The browser context it lives in.
        #[serde(default)]
        pub browser_context_id: Option<String>,
    }
    impl Method for GetTargets {
        const NAME: &'static str = "Target.getTargets";
        type Returns = TargetInfos;
    }

    /// One cookie as a profile keeps it (SPEC §15): what `Storage.getCookies` gives and
    /// `Storage.setCookies` takes back, without the fields the browser derives.
    #[derive(Clone, Debug, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Cookie {
        /// Its name.
        pub name: String,
        /// Its value.
        pub value: String,
        /// Its domain.
        pub domain: String,
        /// Its path.
        pub path: String,
        /// When it expires (seconds since the epoch); absent or negative for a session cookie.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub expires: Option<f64>,
        /// `HttpOnly`.
        #[serde(default)]
        pub http_only: bool,
        /// `Secure`.
        #[serde(default)]
        pub secure: bool,
        /// `SameSite` (`Strict`, `Lax`, `None`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub same_site: Option<String>,
    }

    /// `Storage.getCookies` of one browser context.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct GetCookies {
        /// The context.
        pub browser_context_id: String,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    pub struct Cookies {
        /// The context's cookies.
        pub cookies: Vec<Cookie>,
    }
    impl Method for GetCookies {
        const NAME: &'static str = "Storage.getCookies";
        type Returns = Cookies;
    }

    /// `Storage.setCookies` into one browser context.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct SetCookies {
        /// The cookies.
        pub cookies: Vec<Cookie>,
        /// The context.
        pub browser_context_id: String,
    }
    impl Method for SetCookies {
        const NAME: &'static str = "Storage.setCookies";
        type Returns = Empty;
    }

    /// `Page.addScriptToEvaluateOnNewDocument`: a script every new document of the page runs
    /// before its own (a saved profile's local storage, SPEC §15).
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct AddScriptToEvaluateOnNewDocument {
        /// The script.
        pub source: String,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    pub struct ScriptIdentifier {
        /// What removes it again.
        pub identifier: String,
    }
    impl Method for AddScriptToEvaluateOnNewDocument {
        const NAME: &'static str = "Page.addScriptToEvaluateOnNewDocument";
        type Returns = ScriptIdentifier;
    }

    /// `Page.removeScriptToEvaluateOnNewDocument`.
    #[derive(Serialize)]
    pub struct RemoveScriptToEvaluateOnNewDocument {
        /// What [`AddScriptToEvaluateOnNewDocument`] answered.
        pub identifier: String,
    }
    impl Method for RemoveScriptToEvaluateOnNewDocument {
        const NAME: &'static str = "Page.removeScriptToEvaluateOnNewDocument";
        type Returns = Empty;
    }

    /// `Target.closeTarget`.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct CloseTarget {
        /// The page.
        pub target_id: String,
    }
    impl Method for CloseTarget {
        const NAME: &'static str = "Target.closeTarget";
        type Returns = Value;
    }

    /// `Page.enable`: frame, load and dialog events (a page with this domain enabled keeps a
    /// dialog open until `Page.handleJavaScriptDialog` answers it).
    #[derive(Serialize)]
    pub struct PageEnable {}
    impl Method for PageEnable {
        const NAME: &'static str = "Page.enable";
        type Returns = Empty;
    }

    /// `Page.handleJavaScriptDialog`: closes the open dialog with OK or Cancel.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct HandleJavaScriptDialog {
        /// OK (`true`) or Cancel.
        pub accept: bool,
        /// What a `prompt` answers, when accepted.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub prompt_text: Option<String>,
    }
    impl Method for HandleJavaScriptDialog {
        const NAME: &'static str = "Page.handleJavaScriptDialog";
        type Returns = Empty;
    }

    /// `Network.enable`: every request's events (SPEC §16). Bodies up to `max_post_data_size`
    /// bytes come with `requestWillBeSent`; longer ones are asked for. The executor never reads
    /// a response body, so the renderer keeps little of them (its default is 100 MB a page).
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct NetworkEnable {
        /// The longest body sent with its event.
        pub max_post_data_size: u32,
        /// The most response bytes the renderer keeps for the page.
        pub max_total_buffer_size: u32,
        /// The most it keeps of one response.
        pub max_resource_buffer_size: u32,
    }
    impl Default for NetworkEnable {
        fn default() -> NetworkEnable {
            NetworkEnable {
                max_post_data_size: 64 * 1024,
                max_total_buffer_size: 8 * 1024 * 1024,
                max_resource_buffer_size: 1024 * 1024,
            }
        }
    }
    impl Method for NetworkEnable {
        const NAME: &'static str = "Network.enable";
        type Returns = Empty;
    }

    /// `Target.setAutoAttach` on a page's session: its workers attach (flattened, on this
    /// pipe) as they start, so their requests are watched too (SPEC §16).
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct SetAutoAttach {
        /// Always true.
        pub auto_attach: bool,
        /// Always: a worker waits until its `Network.enable` is sent (then
        /// `Runtime.runIfWaitingForDebugger` starts it), so its first request is watched too.
        pub wait_for_debugger_on_start: bool,
        /// Always true.
        pub flatten: bool,
        /// Which targets: workers only.
        pub filter: Value,
    }
    impl SetAutoAttach {
        /// Workers of every kind, nothing else.
        pub fn workers() -> SetAutoAttach {
            SetAutoAttach {
                auto_attach: true,
                wait_for_debugger_on_start: true,
                flatten: true,
                filter: serde_json::json!([
                    {"type": "worker", "exclude": false},
                    {"type": "shared_worker", "exclude": false},
                    {"type": "service_worker", "exclude": false},
                    {"exclude": true}
                ]),
            }
        }
    }
    impl Method for SetAutoAttach {
        const NAME: &'static str = "Target.setAutoAttach";
        type Returns = Empty;
    }

    /// `Runtime.runIfWaitingForDebugger`: lets an attached worker that waits start.
    #[derive(Serialize)]
    pub struct RunIfWaitingForDebugger {}
    impl Method for RunIfWaitingForDebugger {
        const NAME: &'static str = "Runtime.runIfWaitingForDebugger";
        type Returns = Empty;
    }

    /// `Fetch.enable` on the browser's session: requests matching `patterns` pause, in every
    /// target, until answered.
    #[derive(Serialize)]
    pub struct FetchEnable {
        /// What to pause.
        pub patterns: Vec<RequestPattern>,
    }
    /// One `Fetch.RequestPattern`: a glob on the request's URL (`*` any run, `?` one character).
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct RequestPattern {
        /// The glob.
        pub url_pattern: String,
    }
    impl Method for FetchEnable {
        const NAME: &'static str = "Fetch.enable";
        type Returns = Empty;
    }

    /// `Fetch.continueRequest`: a paused request goes on unchanged.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct FetchContinueRequest {
        /// The paused request.
        pub request_id: String,
    }
    impl Method for FetchContinueRequest {
        const NAME: &'static str = "Fetch.continueRequest";
        type Returns = Empty;
    }

    /// `Fetch.failRequest`: a paused request fails without being sent.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct FetchFailRequest {
        /// The paused request.
        pub request_id: String,
        /// A `Network.ErrorReason` (`BlockedByClient`).
        pub error_reason: &'static str,
    }
    impl Method for FetchFailRequest {
        const NAME: &'static str = "Fetch.failRequest";
        type Returns = Empty;
    }

    /// `Inspector.enable`: the `targetCrashed` event.
    #[derive(Serialize)]
    pub struct InspectorEnable {}
    impl Method for InspectorEnable {
        const NAME: &'static str = "Inspector.enable";
        type Returns = Empty;
    }

    /// `Page.navigate`.
    #[derive(Serialize)]
    pub struct Navigate {
        /// Where to.
        pub url: String,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Navigated {
        /// Set when the navigation failed (e.g. `net::ERR_CONNECTION_REFUSED`).
        pub error_text: Option<String>,
    }
    impl Method for Navigate {
        const NAME: &'static str = "Page.navigate";
        type Returns = Navigated;
    }

    /// `Runtime.evaluate` of an expression, its result returned by value.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Evaluate {
        /// The JavaScript expression.
        pub expression: String,
        /// Always true: the caller only wants JSON back.
        pub return_by_value: bool,
        /// Wait for a returned promise.
        pub await_promise: bool,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Evaluated {
        /// The value.
        pub result: RemoteObject,
        /// Set when the expression threw.
        pub exception_details: Option<ExceptionDetails>,
    }
    /// A JavaScript value.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct RemoteObject {
        /// The value, when it is JSON.
        #[serde(default)]
        pub value: Value,
        /// A description (of an exception, say).
        pub description: Option<String>,
        /// A handle on the object, when it was not returned by value.
        pub object_id: Option<String>,
        /// `node` for a DOM node.
        pub subtype: Option<String>,
    }
    /// Why an expression threw.
    #[derive(Debug, Deserialize)]
    pub struct ExceptionDetails {
        /// A summary.
        pub text: String,
        /// The thrown value.
        pub exception: Option<RemoteObject>,
    }
    impl Method for Evaluate {
        const NAME: &'static str = "Runtime.evaluate";
        type Returns = Evaluated;
    }

    /// `Input.dispatchMouseEvent`: a real mouse event, hit-tested by the browser.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct MouseEvent {
        /// `mouseMoved`, `mousePressed` or `mouseReleased`.
        #[serde(rename = "type")]
        pub kind: &'static str,
        /// Viewport x, CSS pixels.
        pub x: f64,
        /// Viewport y, CSS pixels.
        pub y: f64,
        /// `none` or `left`.
        pub button: &'static str,
        /// Buttons held (1 = left).
        pub buttons: u8,
        /// 1 for a single click.
        pub click_count: u8,
    }
    impl Method for MouseEvent {
        const NAME: &'static str = "Input.dispatchMouseEvent";
        type Returns = Empty;
    }

    /// `Input.dispatchKeyEvent`: a real key event to the focused element.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct KeyEvent {
        /// `keyDown` (with text), `rawKeyDown` (without) or `keyUp`.
        #[serde(rename = "type")]
        pub kind: &'static str,
        /// The DOM `key`, e.g. `Enter`.
        pub key: String,
        /// The DOM `code`, e.g. `Enter`.
        pub code: String,
        /// The Windows virtual key code, e.g. 13.
        pub windows_virtual_key_code: u32,
        /// Same as above; Chromium reads it on Linux.
        pub native_virtual_key_code: u32,
        /// The text the key types (`"\r"` for Enter).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub text: Option<String>,
        /// The same, unmodified.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub unmodified_text: Option<String>,
        /// The modifiers held (Alt 1, Control 2, Meta 4, Shift 8), the modifier itself included
        /// on its own key down, as Playwright sends them.
        pub modifiers: u8,
        /// 1 for a left modifier key, else 0 (the DOM `location`).
        pub location: u8,
    }
    impl Method for KeyEvent {
        const NAME: &'static str = "Input.dispatchKeyEvent";
        type Returns = Empty;
    }

    /// `Input.insertText`: text entered into the focused field as an input method commits it
    /// (trusted `beforeinput` and `input` events).
    #[derive(Serialize)]
    pub struct InsertText {
        /// The text.
        pub text: String,
    }
    impl Method for InsertText {
        const NAME: &'static str = "Input.insertText";
        type Returns = Empty;
    }

    /// `Page.createIsolatedWorld`: the executor's own JavaScript world in a frame's current
    /// document. Its globals (the snapshot's refs) are invisible to the page, and the page's
    /// scripts cannot replace the built-ins the executor calls. Asking again for the same name
    /// on the same document gives the same context.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct CreateIsolatedWorld {
        /// The frame (the page's main frame: its target id).
        pub frame_id: String,
        /// The world's name.
        pub world_name: &'static str,
        /// Lets the world reach into frames of other origins that live in the page's process
        /// (the protocol spells it this way).
        pub grant_univeral_access: bool,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct IsolatedWorld {
        /// The context to evaluate in.
        pub execution_context_id: i64,
    }
    impl Method for CreateIsolatedWorld {
        const NAME: &'static str = "Page.createIsolatedWorld";
        type Returns = IsolatedWorld;
    }

    /// `Runtime.releaseObjectGroup`: lets the page forget the handles of a group.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ReleaseObjectGroup {
        /// The group.
        pub object_group: &'static str,
    }
    impl Method for ReleaseObjectGroup {
        const NAME: &'static str = "Runtime.releaseObjectGroup";
        type Returns = Empty;
    }

    /// `DOM.setFileInputFiles`: puts files into a file input, as a person choosing them would
    /// (the browser fires `input` and `change`).
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct SetFileInputFiles {
        /// Absolute paths.
        pub files: Vec<String>,
        /// The input, by handle.
        pub object_id: String,
    }
    impl Method for SetFileInputFiles {
        const NAME: &'static str = "DOM.setFileInputFiles";
        type Returns = Empty;
    }

    /// `Page.captureScreenshot` as PNG, of the viewport or of a clip.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct CaptureScreenshot {
        /// Always `png`.
        pub format: &'static str,
        /// The region, in CSS pixels of the document.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub clip: Option<Clip>,
    }
    /// A region of the page.
    #[derive(Debug, Serialize)]
    pub struct Clip {
        /// Left, CSS pixels from the document's left.
        pub x: f64,
        /// Top, CSS pixels from the document's top.
        pub y: f64,
        /// Width.
        pub width: f64,
        /// Height.
        pub height: f64,
        /// Always 1.
        pub scale: f64,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    pub struct Screenshot {
        /// The PNG, base64.
        pub data: String,
    }
    impl Method for CaptureScreenshot {
        const NAME: &'static str = "Page.captureScreenshot";
        type Returns = Screenshot;
    }

    /// `Page.getNavigationHistory`.
    #[derive(Serialize)]
    pub struct GetNavigationHistory {}
    /// Its answer.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct NavigationHistory {
        /// The current entry's index.
        pub current_index: usize,
        /// The entries, oldest first.
        pub entries: Vec<NavigationEntry>,
    }
    /// One history entry.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct NavigationEntry {
        /// Its id, for [`NavigateToHistoryEntry`].
        pub id: i64,
        /// Its URL.
        pub url: String,
        /// How it was reached: `link`, `typed`, `form_submit`, `reload`, …
        pub transition_type: String,
    }
    impl Method for GetNavigationHistory {
        const NAME: &'static str = "Page.getNavigationHistory";
        type Returns = NavigationHistory;
    }

    /// `Page.navigateToHistoryEntry`: back or forward.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct NavigateToHistoryEntry {
        /// The entry.
        pub entry_id: i64,
    }
    impl Method for NavigateToHistoryEntry {
        const NAME: &'static str = "Page.navigateToHistoryEntry";
        type Returns = Empty;
    }

    /// `Page.reload`.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Reload {
        /// Bypass the cache, as a user's reload of a changed page would.
        pub ignore_cache: bool,
    }
    impl Method for Reload {
        const NAME: &'static str = "Page.reload";
        type Returns = Empty;
    }

    /// `Runtime.callFunctionOn` in an execution context: the executor's scripts, each called
    /// with its one argument. The function's text is the same on every call, so the page
    /// compiles each script once.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct CallFunctionOn<'a> {
        /// The function, e.g. `(a) => …`.
        pub function_declaration: &'a str,
        /// Its argument.
        pub arguments: [CallArgument<'a>; 1],
        /// Where it runs.
        pub execution_context_id: i64,
        /// True when the executor wants JSON back; false for a handle on an element.
        pub return_by_value: bool,
        /// Wait for a returned promise.
        pub await_promise: bool,
        /// The group a returned handle belongs to.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub object_group: Option<&'static str>,
    }
    /// One argument, by value.
    #[derive(Serialize)]
    pub struct CallArgument<'a> {
        /// The value.
        pub value: &'a Value,
    }
    impl Method for CallFunctionOn<'_> {
        const NAME: &'static str = "Runtime.callFunctionOn";
        type Returns = Evaluated;
    }

    /// `DOM.describeNode` of a handle: for an iframe, the frame it holds.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct DescribeNode {
        /// The node, by handle.
        pub object_id: String,
    }
    /// Its answer.
    #[derive(Debug, Deserialize)]
    pub struct Described {
        /// The node.
        pub node: DescribedNode,
    }
    /// The part of a node the executor reads.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct DescribedNode {
        /// For a frame owner (an iframe), the frame it holds.
        pub frame_id: Option<String>,
    }
    impl Method for DescribeNode {
        const NAME: &'static str = "DOM.describeNode";
        type Returns = Described;
    }
}
