//! What a task's pages sent (SPEC §16): the CDP `Network` events of every page the task has had
//! (its frames of other origins share the page's session, the browser runs without site
//! isolation) and of the workers attached under them, gathered per action.
//!
//! An action opens a window when it dispatches its first input event ([`NetworkLog::begin`]);
//! from then on every request other than `GET`/`HEAD`/`OPTIONS`, and every navigation, is
//! recorded with how it was answered, and the host takes the evidence with the reply
//! ([`NetworkLog::take`]). An uncertain action's window stays open — a late answer shows in the
//! pending outcome when it is verified — but then records new requests only from the sessions
//! that were already watched (a page opened again for verification sends its own `GET`, which
//! is no evidence of the action). Bodies are hashed as they pass and never kept.
//!
//! The reader task of the connection calls [`NetworkLog::on_event`] under no lock of the host's
//! and never waits: each event is a few map operations under this log's own mutex.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::origins::Origins;
use crate::protocol::evidence::{body_sha256, is_safe_method, redact_url, BodyUnread};
use crate::protocol::{now_rfc3339, NetworkEvidence, RequestStatus, SentRequest};

/// The requests of one task's pages, per action.
#[derive(Debug)]
pub struct NetworkLog {
    window: Mutex<Option<Window>>,
    /// Bodies asked for and not yet answered ([`NetworkLog::bodies_read`]).
    fetching: tokio::sync::watch::Sender<u32>,
    /// Requests of the open window with no answer yet ([`NetworkLog::answers_in`]).
    unanswered: tokio::sync::watch::Sender<u32>,
    /// Whether the task's pages are watched at all (`--no-network-evidence` turns it off).
    on: bool,
    /// The most requests one action's evidence lists (`--evidence-max-requests`).
    max_requests: usize,
    /// What the host lets pages reach: a safe request elsewhere is blocked, and listed once
    /// the browser reports the block ([`NetworkLog::answers_in`] waits for that report).
    origins: Option<Arc<Origins>>,
}

/// Whether the host's guard sees requests to `url` at all: it pauses only the web's schemes
/// ([`Origins::pause_patterns`]), so a `blob:` or `data:` URL is never blocked.
fn guarded(url: &str) -> bool {
    ["http:", "https:", "ws:", "wss:"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
    })
}

/// The requests recorded since an action dispatched its first event.
#[derive(Debug, Default)]
struct Window {
    requests: Vec<SentRequest>,
    /// What is known of each listed request's body (same positions as `requests`), settled
    /// into its fields when the evidence is taken ([`BodyUnread::settle`]).
    bodies: Vec<BodySeen>,
    /// `Content-Length`s of requests not listed (yet): the browser may report a request's
    /// headers before the request itself. Bounded by [`MAX_EARLY_LENGTHS`].
    early_lengths: HashMap<String, u64>,
    /// Requests beyond [`NetworkLog::max_requests`].
    unlisted: u64,
    /// CDP request id → index in `requests` of its latest hop. Keyed by the id alone: a
    /// worker's request may be reported on the page's session and answered on the worker's.
    index: HashMap<String, usize>,
    /// After the reply of an uncertain action: new requests are recorded only from these
    /// sessions (those the action's page and workers used), answers to listed ones always.
    sealed: Option<HashSet<String>>,
    /// Every session a request was recorded from.
    sessions: HashSet<String>,
    /// `GET`/`HEAD`/`OPTIONS` requests not answered yet (at most [`MAX_UNANSWERED_SAFE`]): not
    /// evidence themselves, but listed if the host blocks one ([`RequestStatus::Blocked`]).
    safe: HashMap<String, Unanswered>,
}

/// The most unanswered safe requests a window remembers, in case one is blocked.
const MAX_UNANSWERED_SAFE: usize = 256;

/// A safe request sent and not answered yet.
#[derive(Debug)]
struct Unanswered {
    url: String,
    method: String,
    sent_at: String,
}

impl Window {
    /// Lists a safe request the host blocked.
    fn push_blocked(&mut self, safe: Unanswered, error: String, max_requests: usize) {
        if self.requests.len() >= max_requests {
            self.unlisted += 1;
            return;
        }
        self.bodies.push(BodySeen::default());
        self.requests.push(SentRequest {
            answered_at: Some(now_rfc3339()),
            answered_by_service_worker: false,
            body_bytes: None,
            body_sha256: None,
            body_unread: None,
            error: Some(error),
            method: safe.method,
            navigation: false,
            sent_at: safe.sent_at,
            status: RequestStatus::Blocked,
            url: redact_url(&safe.url),
        });
    }
}

/// The most `Content-Length`s kept for requests not listed yet.
const MAX_EARLY_LENGTHS: usize = 256;

/// One listed request's body as far as the browser showed it.
#[derive(Debug, Default)]
struct BodySeen {
    /// The bytes read (from the event, or `Network.getRequestPostData`): length and digest.
    read: Option<(u64, String)>,
    /// The `Content-Length` the browser sent (`Network.requestWillBeSentExtraInfo`).
    declared: Option<u64>,
}

/// What a `Network.requestWillBeSent` asks of the connection: the body of a request the event
/// did not carry (`Network.getRequestPostData`).
pub struct FetchBody {
    /// The CDP request id.
    pub request_id: String,
}

fn lock(m: &Mutex<Option<Window>>) -> MutexGuard<'_, Option<Window>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PostDataEntry {
    bytes: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    url: String,
    method: String,
    post_data: Option<String>,
    #[serde(default)]
    has_post_data: bool,
    post_data_entries: Option<Vec<PostDataEntry>>,
}

#[derive(Deserialize)]
struct StatusOnly {
    status: u16,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WillBeSent {
    request_id: String,
    request: Request,
    #[serde(rename = "type")]
    kind: Option<String>,
    redirect_response: Option<StatusOnly>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExtraInfo {
    request_id: String,
    headers: HashMap<String, serde_json::Value>,
}

impl ExtraInfo {
    /// The `Content-Length` the request was sent with, if any.
    fn content_length(&self) -> Option<u64> {
        self.headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.as_str()?.trim().parse().ok())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponseReceived {
    request_id: String,
    response: Response,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    status: u16,
    #[serde(default)]
    from_service_worker: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoadingFailed {
    request_id: String,
    error_text: String,
    #[serde(default)]
    canceled: bool,
}

impl NetworkLog {
    /// A log with no window open, listing at most `max_requests` requests per action
    /// (`--evidence-max-requests`) and counting the rest.
    pub fn new(max_requests: usize) -> Arc<NetworkLog> {
        NetworkLog::made(true, max_requests, None)
    }

    /// A log like [`NetworkLog::new`] for pages whose requests the host blocks unless
    /// `origins` allows them.
    pub fn guarded(max_requests: usize, origins: Arc<Origins>) -> Arc<NetworkLog> {
        NetworkLog::made(true, max_requests, Some(origins))
    }

    /// A log that records nothing: the pages it belongs to do not enable the `Network` domain
    /// (`--no-network-evidence`).
    pub fn off() -> Arc<NetworkLog> {
        NetworkLog::made(false, 0, None)
    }

    /// The one constructor behind [`NetworkLog::new`], [`NetworkLog::guarded`] and
    /// [`NetworkLog::off`].
    fn made(on: bool, max_requests: usize, origins: Option<Arc<Origins>>) -> Arc<NetworkLog> {
        Arc::new(NetworkLog {
            window: Mutex::new(None),
            fetching: tokio::sync::watch::channel(0).0,
            unanswered: tokio::sync::watch::channel(0).0,
            on,
            max_requests,
            origins,
        })
    }

    /// Whether pages should enable the `Network` domain for this log.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// An action is dispatching its first input event: a fresh window (whatever an earlier one
    /// held was taken with its reply, or belonged to an outcome since settled).
    pub fn begin(&self) {
        if self.on {
            let mut guard = lock(&self.window);
            *guard = Some(Window::default());
            self.unanswered.send_replace(0);
        }
    }

    /// The evidence so far, or `None` when no action dispatched anything since the last
    /// `take` that closed its window. `watching` keeps the window open (the action's outcome is
    /// pending, so a late answer still counts); otherwise it closes.
    pub fn take(&self, watching: bool) -> Option<NetworkEvidence> {
        let mut guard = lock(&self.window);
        let w = guard.as_mut()?;
        let requests = w
            .requests
            .iter()
            .zip(&w.bodies)
            .map(|(r, body)| {
                let mut r = r.clone();
                (r.body_bytes, r.body_sha256, r.body_unread) = BodyUnread::settle(
                    body.read.as_ref().map(|(n, d)| (*n, d.as_str())),
                    body.declared,
                );
                r
            })
            .collect();
        let evidence = NetworkEvidence::new(requests, w.unlisted, watching);
        if watching {
            if w.sealed.is_none() {
                w.sealed = Some(w.sessions.clone());
            }
        } else {
            *guard = None;
        }
        Some(evidence)
    }

    /// Closes the window without reading it (the task closed, or its outcome was settled).
    pub fn end(&self) {
        *lock(&self.window) = None;
    }

    /// The first request of the open window, if any, as `METHOD URL` (for a local step that
    /// said it commits nothing).
    pub fn first_sent(&self) -> Option<String> {
        let guard = lock(&self.window);
        let w = guard.as_ref()?;
        // A request the host blocked never left the browser: no effect of the step.
        let sent = w
            .requests
            .iter()
            .find(|r| r.status != RequestStatus::Blocked);
        sent.map(|r| {
            if r.navigation && is_safe_method(&r.method) {
                format!("a navigation to {}", r.url)
            } else {
                format!("{} {}", r.method, r.url)
            }
        })
    }

    /// One `Network.*` event of `session`. Returns the request whose body the event did not
    /// carry, for the connection to ask for.
    pub fn on_event(
        &self,
        session: &str,
        method: &str,
        params: Option<&RawValue>,
    ) -> Option<FetchBody> {
        let params = params?;
        let mut guard = lock(&self.window);
        let w = guard.as_mut()?;
        match method {
            "Network.requestWillBeSent" => self.on_request_sent(w, session, params),
            "Network.requestWillBeSentExtraInfo" => on_declared_length(w, params),
            "Network.responseReceived" => self.on_response(w, params),
            "Network.loadingFailed" => self.on_loading_failed(w, params),
            _ => None,
        }
    }

    /// A request leaving the browser (or the next hop of a redirect): listed in `w` unless it
    /// is a safe request, which is only remembered until answered. Returns it when its body
    /// must be asked for.
    fn on_request_sent(
        &self,
        w: &mut Window,
        session: &str,
        params: &RawValue,
    ) -> Option<FetchBody> {
        let e: WillBeSent = serde_json::from_str(params.get()).ok()?;
        let key = e.request_id.clone();
        let declared = w.early_lengths.remove(&key);
        if let Some(redirect) = &e.redirect_response {
            // The hop before this one got its answer: a redirect.
            if let Some(&i) = w.index.get(&key) {
                let r = &mut w.requests[i];
                self.answered(r);
                r.status = RequestStatus::Http(redirect.status);
            }
            w.index.remove(&key);
        } else if w.index.contains_key(&key) {
            // The same request reported again by another session (a worker's).
            return None;
        }
        let navigation = e.kind.as_deref() == Some("Document");
        if let Some(sealed) = &w.sealed {
            if !sealed.contains(session) {
                return None;
            }
        }
        if !navigation && is_safe_method(&e.request.method) {
            if w.safe.len() < MAX_UNANSWERED_SAFE || w.safe.contains_key(&key) {
                w.safe.insert(
                    key,
                    Unanswered {
                        url: e.request.url,
                        method: e.request.method,
                        sent_at: now_rfc3339(),
                    },
                );
            }
            return None;
        }
        if w.requests.len() >= self.max_requests {
            w.unlisted += 1;
            return None;
        }
        let body = body_of(&e.request);
        let fetch = body.is_none() && e.request.has_post_data;
        w.sessions.insert(session.to_owned());
        w.index.insert(key, w.requests.len());
        w.bodies.push(BodySeen {
            read: body.map(|b| (b.len() as u64, body_sha256(&b))),
            declared,
        });
        self.unanswered.send_modify(|n| *n += 1);
        w.requests.push(SentRequest {
            answered_at: None,
            answered_by_service_worker: false,
            body_bytes: None,
            body_sha256: None,
            body_unread: None,
            error: None,
            method: e.request.method,
            navigation,
            sent_at: now_rfc3339(),
            status: RequestStatus::NoResponse,
            url: redact_url(&e.request.url),
        });
        fetch.then_some(FetchBody {
            request_id: e.request_id,
        })
    }

    /// A request's answer arrived: its status, and whether a service worker gave it.
    fn on_response(&self, w: &mut Window, params: &RawValue) -> Option<FetchBody> {
        let e: ResponseReceived = serde_json::from_str(params.get()).ok()?;
        w.safe.remove(&e.request_id);
        let i = *w.index.get(&e.request_id)?;
        let r = &mut w.requests[i];
        self.answered(r);
        r.status = RequestStatus::Http(e.response.status);
        r.answered_by_service_worker = e.response.from_service_worker;
        None
    }

    /// A request failed: its failure, listed for a safe request only when the host blocked it.
    fn on_loading_failed(&self, w: &mut Window, params: &RawValue) -> Option<FetchBody> {
        let e: LoadingFailed = serde_json::from_str(params.get()).ok()?;
        let status = RequestStatus::of_failure(&e.error_text, e.canceled);
        if let Some(safe) = w.safe.remove(&e.request_id) {
            // A safe request is listed only when the host blocked it.
            if status == RequestStatus::Blocked {
                w.push_blocked(safe, e.error_text, self.max_requests);
            }
            return None;
        }
        let i = *w.index.get(&e.request_id)?;
        let r = &mut w.requests[i];
        // A failure after the answer's head (the body broke off) keeps the status: the
        // server did answer.
        if matches!(r.status, RequestStatus::NoResponse) {
            self.answered(r);
            r.status = status;
        }
        r.error = Some(e.error_text);
        None
    }

    /// `r` has its answer (or its failure) now: stamped, and counted off the first time.
    fn answered(&self, r: &mut SentRequest) {
        if r.answered_at.is_none() {
            self.unanswered.send_modify(|n| *n = n.saturating_sub(1));
        }
        r.answered_at = Some(now_rfc3339());
    }

    /// Waits, until `until` at most, for every request of the open window to have its answer
    /// or its failure. A worker's events come on its own session, so a page can show what
    /// the answer said before the host has read the answer's event: an action whose effect
    /// was observed waits for them briefly, so its evidence does not say "no response" of a
    /// request that was answered.
    ///
    /// A safe request the host blocks is listed only once the browser reports the block, and
    /// the page can show the failure (a rejected `fetch`) before that report arrives: those
    /// reports are waited for too, within the same bound.
    pub async fn answers_in(&self, until: tokio::time::Instant) {
        let mut rx = self.unanswered.subscribe();
        let _ = tokio::time::timeout_at(until, rx.wait_for(|n| *n == 0)).await;
        while self.blocks_unreported() && tokio::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Whether the open window holds a safe request the host blocks whose block the browser
    /// has not reported yet.
    fn blocks_unreported(&self) -> bool {
        let Some(origins) = &self.origins else {
            return false;
        };
        let guard = lock(&self.window);
        guard.as_ref().is_some_and(|w| {
            w.safe
                .values()
                .any(|s| guarded(&s.url) && !origins.allows(&s.url))
        })
    }

    /// A body is being asked for (`Network.getRequestPostData`); [`NetworkLog::fetch_done`]
    /// follows whatever the answer.
    pub fn fetch_started(&self) {
        self.fetching.send_modify(|n| *n += 1);
    }

    /// The body asked for was answered (or will not be).
    pub fn fetch_done(&self) {
        self.fetching.send_modify(|n| *n = n.saturating_sub(1));
    }

    /// Waits, until `until` at most, for the bodies asked for to arrive, so an action's
    /// evidence is taken with their digests.
    pub async fn bodies_read(&self, until: tokio::time::Instant) {
        let mut rx = self.fetching.subscribe();
        let _ = tokio::time::timeout_at(until, rx.wait_for(|n| *n == 0)).await;
    }

    /// The body of a request that its `requestWillBeSent` did not carry, as
    /// `Network.getRequestPostData` gave it.
    pub fn set_body(&self, request_id: &str, body: &[u8]) {
        let mut guard = lock(&self.window);
        let Some(w) = guard.as_mut() else {
            return;
        };
        if let Some(&i) = w.index.get(request_id) {
            w.bodies[i].read = Some((body.len() as u64, body_sha256(body)));
        }
    }
}

/// The body length a request declared (`Network.requestWillBeSentExtraInfo`), kept with the
/// request, or until it is seen when this came first.
fn on_declared_length(w: &mut Window, params: &RawValue) -> Option<FetchBody> {
    let e: ExtraInfo = serde_json::from_str(params.get()).ok()?;
    let length = e.content_length()?;
    match w.index.get(&e.request_id) {
        Some(&i) if w.bodies[i].declared.is_none() => w.bodies[i].declared = Some(length),
        _ if w.early_lengths.len() < MAX_EARLY_LENGTHS => {
            w.early_lengths.insert(e.request_id, length);
        }
        _ => {}
    }
    None
}

/// The request's body from the event: its entries' bytes (base64) one after the other, else
/// its `postData` text; `None` when the event carries none of it.
fn body_of(request: &Request) -> Option<Vec<u8>> {
    if let Some(entries) = &request.post_data_entries {
        if !entries.is_empty() && entries.iter().all(|e| e.bytes.is_some()) {
            let mut body = Vec::new();
            for e in entries {
                body.extend(decode_base64(e.bytes.as_deref().unwrap_or(""))?);
            }
            return Some(body);
        }
    }
    if let Some(text) = &request.post_data {
        return Some(text.as_bytes().to_vec());
    }
    if request.has_post_data {
        None
    } else {
        Some(Vec::new())
    }
}

/// Standard base64 (as CDP writes bytes), padding optional; `None` for anything else.
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        match chunk.len() {
            4 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]),
            3 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8]),
            2 => out.push((n >> 16) as u8),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: serde_json::Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    fn sent(log: &NetworkLog, session: &str, id: &str, method: &str, body: Option<&str>) {
        let mut request = serde_json::json!({"url": "http://h/p?k=v", "method": method});
        if let Some(b) = body {
            request["hasPostData"] = true.into();
            request["postDataEntries"] = serde_json::json!([{"bytes": encode(b.as_bytes())}]);
        }
        log.on_event(
            session,
            "Network.requestWillBeSent",
            Some(&raw(
                serde_json::json!({"requestId": id, "request": request, "type": "Fetch"}),
            )),
        );
    }

    fn encode(b: &[u8]) -> String {
        const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for c in b.chunks(3) {
            let n = (c[0] as u32) << 16
                | (*c.get(1).unwrap_or(&0) as u32) << 8
                | *c.get(2).unwrap_or(&0) as u32;
            for i in 0..4 {
                if i <= c.len() {
                    s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    s.push('=');
                }
            }
        }
        s
    }

    #[test]
    fn base64_reads_back() {
        for s in ["", "a", "ab", "abc", "title=Hello&body=World"] {
            assert_eq!(decode_base64(&encode(s.as_bytes())).unwrap(), s.as_bytes());
        }
        assert!(decode_base64("a").is_none());
    }

    fn headers(log: &NetworkLog, id: &str, length: u64) {
        log.on_event(
            "s",
            "Network.requestWillBeSentExtraInfo",
            Some(&raw(serde_json::json!({"requestId": id,
                "headers": {"content-length": length.to_string(), "Host": "h"}}))),
        );
    }

    #[test]
    fn a_body_read_short_of_its_length_has_no_digest() {
        let log = NetworkLog::new(8);
        log.begin();
        // Headers before the request, and after it: both are matched.
        headers(&log, "1", 300_204);
        sent(&log, "s", "1", "POST", Some("the text parts"));
        sent(&log, "s", "2", "POST", Some("a=1"));
        headers(&log, "2", 3);
        let huge = serde_json::json!({"requestId": "3", "type": "Fetch",
            "request": {"url": "http://h/big", "method": "POST", "hasPostData": true}});
        let fetch = log.on_event("s", "Network.requestWillBeSent", Some(&raw(huge)));
        assert!(fetch.is_some(), "the body is asked for");
        headers(&log, "3", 2 << 20);
        let e = log.take(false).unwrap();
        let r = &e.requests;
        assert_eq!(r[0].body_bytes, Some(300_204));
        assert_eq!(r[0].body_unread, Some(BodyUnread::Files));
        assert!(r[0].body_sha256.is_none());
        assert_eq!(r[1].body_bytes, Some(3));
        assert!(r[1].body_sha256.is_some() && r[1].body_unread.is_none());
        // A body the event did not carry and nobody read: its length, and why.
        assert_eq!(r[2].body_bytes, Some(2 << 20));
        assert_eq!(r[2].body_unread, Some(BodyUnread::TooLarge));
    }

    #[test]
    fn a_window_records_sends_and_their_answers() {
        let log = NetworkLog::new(8);
        sent(&log, "s", "1", "POST", Some("a=1"));
        assert!(log.take(false).is_none(), "nothing before a window opens");
        log.begin();
        sent(&log, "s", "1", "GET", None);
        sent(&log, "s", "2", "POST", Some("a=1"));
        sent(&log, "s", "3", "POST", Some("a=1"));
        log.on_event(
            "s",
            "Network.responseReceived",
            Some(&raw(
                serde_json::json!({"requestId": "2", "response": {"status": 201}}),
            )),
        );
        log.on_event(
            "s",
            "Network.loadingFailed",
            Some(&raw(
                serde_json::json!({"requestId": "3", "errorText": "net::ERR_CONNECTION_RESET"}),
            )),
        );
        let e = log.take(true).unwrap();
        assert_eq!(e.requests.len(), 2);
        assert_eq!(e.requests[0].status, RequestStatus::Http(201));
        assert_eq!(e.requests[1].status, RequestStatus::ConnectionReset);
        assert_eq!(e.requests[0].body_bytes, Some(3));
        assert_eq!(e.duplicate_sends[0].times, 2);
        assert!(!e.requests[0].url.contains("=v"));
        // Sealed: another session's new request is not the action's; answers still are.
        sent(&log, "other", "9", "POST", None);
        sent(&log, "s", "4", "PUT", None);
        assert_eq!(log.take(false).unwrap().requests.len(), 3);
        assert!(log.take(false).is_none());
    }

    #[test]
    fn a_blocked_request_is_listed_even_a_get_and_is_never_the_first_sent() {
        let log = NetworkLog::new(8);
        log.begin();
        let failed = |id: &str, text: &str| {
            log.on_event(
                "s",
                "Network.loadingFailed",
                Some(&raw(
                    serde_json::json!({"requestId": id, "errorText": text}),
                )),
            );
        };
        sent(&log, "s", "1", "GET", None);
        failed("1", "net::ERR_BLOCKED_BY_CLIENT.Inspector");
        sent(&log, "s", "2", "GET", None);
        failed("2", "net::ERR_CONNECTION_REFUSED");
        sent(&log, "s", "3", "GET", None);
        log.on_event(
            "s",
            "Network.responseReceived",
            Some(&raw(
                serde_json::json!({"requestId": "3", "response": {"status": 200}}),
            )),
        );
        failed("3", "net::ERR_BLOCKED_BY_CLIENT");
        assert_eq!(log.first_sent(), None, "a blocked GET is no send");
        sent(&log, "s", "4", "POST", Some("a=1"));
        failed("4", "net::ERR_BLOCKED_BY_CLIENT");
        assert_eq!(log.first_sent(), None, "a blocked POST is no send");
        sent(&log, "s", "5", "POST", Some("a=1"));
        assert_eq!(
            log.first_sent().as_deref(),
            Some("POST http://h/p?k=~4c94485e")
        );
        let e = log.take(false).unwrap();
        let statuses: Vec<_> = e
            .requests
            .iter()
            .map(|r| (r.method.as_str(), r.status.to_string()))
            .collect();
        assert_eq!(
            statuses,
            [
                ("GET", "blocked".to_owned()),
                ("POST", "blocked".to_owned()),
                ("POST", "no response".to_owned())
            ],
            "only the blocked GET is listed of the GETs"
        );
        assert_eq!(
            e.requests[0].error.as_deref(),
            Some("net::ERR_BLOCKED_BY_CLIENT.Inspector")
        );
    }
}
