//! A small real web app for the Chromium executor's tests, its benchmark and `polaris demo
//! --browser`: a form that publishes posts, served over HTTP/1.1 on 127.0.0.1.
//!
//! - `GET /` — the form: `#title`, `#body`, `#submit`, `#status` (`Draft`) and `#posts` (the
//!   titles saved so far, newest first). Query `?fault=late|drop|reject` (and `delayMs=N`)
//!   puts the fault into the form as hidden fields, so it applies to that page's submit only.
//! - `POST /posts` — the submit (a plain form POST, so the page navigates). The server commits
//!   the post and counts it, then answers `303 See Other` to `/posts/<n>`, whose `#status` reads
//!   `Saved #<n>` and `#saved-title` the title.
//! - `GET /items` — a list whose first item `#delete` deletes, guarded by a `confirm()`: the
//!   form POSTs to `/items/delete` only when the dialog is accepted. The server counts the
//!   deletes ([`WebApp::deletes`]) and answers `303` to `/items?deleted=<n>`, whose `#status`
//!   reads `Deleted #<n>` (else `<k> items`). `#rename` asks a `prompt()` and shows the answer in
//!   `#name`; `#notify` shows an `alert()` and then `Notified` in `#notified`. Query
//!   `alertMs=N` opens an `alert()` by itself N ms after the page loads, then `#seen` reads
//!   `Alerted`. (The JavaScript dialogs of SPEC §14.)
//! - `GET /keys` — a text field `#field`; `#last-key` shows the last key pressed with the
//!   modifiers held (`Control+a`), `#selection` the field's selection (`start-end`) after each
//!   key. (Chords in `page.press`.)
//! - `/site…` — a small realistic site (SPEC §15). Every page shows `#who`: `Logged in as
//!   <name>` with a valid `session` cookie, else `Not logged in` (the pages render either way).
//!   - `GET /site/login`, `POST /site/login` — Username, Password, "Log in"; sets `session`
//!     (HttpOnly, Path=/) and answers `303` to `/site`; empty fields get `422`.
//!   - `GET /site` — labelled Title, Body, Category (`<select>`: value `news` "News", `guide`
//!     "How-to guide", `op-ed` "Opinion"), Urgent (checkbox), Visibility (radios Public/Private),
//!     "Publish" (form POST to `/site/posts`); `#status` (role=status) reads `Ready`, or
//!     `Draft deleted #<n>` after a delete. Also: links "Drafts" (`/site/drafts`, which links
//!     "Back to the form") and "Open help" (`target=_blank`, `/site/help`, heading "Help",
//!     a "Close help" button that closes its tab); a
//!     same-origin iframe `/site/frame` ("Confirm in frame" → `POST /site/frame/confirm` → `Frame
//!     confirmed #<n>`); a cross-origin iframe, [`WebApp::card_url`]; an open shadow root in
//!     `<polaris-widget>` (input "Note", "Save note" → `fetch` `POST /site/notes` → `Note saved
//!     #<n>`); "Delete draft" behind `confirm("Delete the draft?")` (form POST to `/site/delete`,
//!     `303` to `/site?deleted=<n>`); Attachment (file) + "Upload" (multipart POST to
//!     `/site/upload`, ≤ 1 MiB, answered `200` with `Uploaded <name> (<bytes> bytes)`, so the
//!     result page is a POST in history); "Load more", inserted 1 s after load (`fetch` `POST
//!     /site/more` → `More loaded #<n>` in `#more-status`).
//!   - `POST /site/posts` — stores every field ([`SitePost`]) and answers `303` to
//!     `/site/posts/<n>`: `#status` `Published #<n>`, `#saved-title`, `#saved-body`,
//!     `#saved-category` (the value), `#saved-urgent` (`yes`/`no`), `#saved-visibility`,
//!     `#saved-author`.
//! - `/ev…` — a page for network evidence (SPEC §16), saving with `fetch` rather than a form:
//!   `GET /ev` shows `#status` (`Ready`) and buttons `#save` (one `fetch` `POST
//!   /ev/save?status=<S>&token=secret` with a JSON body; `#status` then reads `Answered <S>`,
//!   where `S` is the page's own `status` query, default `201`), `#double` (a handler that fires
//!   the same save twice), `#again` (the save, then the same save again 1.5 s later), `#large`
//!   (a `POST /ev/save` of 100,000 bytes; `#status` reads `Large answered <S>`), `#beacon` (`navigator.sendBeacon` to `POST /ev/beacon`; `#status`
//!   reads `Beacon queued`), `#worker` (a dedicated worker, `GET /ev/worker.js`, does the
//!   save; `#status` reads `Worker answered <S>`), `#many` (five saves at once, `POST
//!   /ev/save?n=1…5`; `Many answered`), `#huge` (a `POST /ev/big` of 2 MiB; `Big answered
//!   <bytes read>`) and `#blob` (a `POST /ev/big` of a 5,000-byte `Blob`; `Blob answered
//!   5000`). `POST /ev/save` (bodies up to 256 KiB) answers the status its query asks for
//!   (`?delayMs=N` first waits); `POST /ev/big` (up to 4 MiB) answers `201` with the bytes it
//!   read. `GET /ev/sw` registers a service worker (`GET /ev/sw.js`, scope `/ev/`; `#status`
//!   reads `Worker ready` once it controls the page): `#relay` posts to `/ev/relay`, which the
//!   worker answers by sending its own `POST /ev/save?via=worker` (`Relayed <S>`), `#through`
//!   posts to `/ev/save`, which the worker passes on unchanged (`Through <S>`). Every request
//!   shows in [`WebApp::requests`], with its `Content-Length`.
//! - `GET /reach` — every way a page leaves for the second origin: links `#link` (to
//!   `/card`), `#redirect` (`/reach/redirect`, a `302` to `/card`) and `#tab` (`/card` in a new
//!   tab), `#post` (a form POST to
//!   `/card/pay`), and buttons `#fetch` (a `fetch`; `#status` reads `Fetched` or `Fetch
//!   failed`), `#frame` (an iframe of `/card`; `#status` reads `Framed` once it loaded, or showed its error) and `#worker` (a dedicated worker,
//!   `/reach/worker.js`, fetches `/card`; `#status` reads `Worker fetched` or `Worker
//!   failed`). What reaches the second origin shows in [`WebApp::requests`].
//! - [`WebApp::set_keep_alive`] keeps connections open between requests (by default each is
//!   closed after one answer), so a browser may send a request on a reused connection — and
//!   send it again on a new one when the server closes the reused one without answering.
//! - The second origin, another port of 127.0.0.1 ([`WebApp::card_url`]): `GET /card` — a
//!   payment field, "Card number" and "Pay" (form POST to `/card/pay`, `303` to `/card?paid=<n>`,
//!   `#status` `Paid #<n>`). Nothing else is served there.
//! - Each side effect of `/site` and `/card` is counted by the server when committed (malformed
//!   requests get `400`, too large ones `413`, and count nothing); [`WebApp::requests`] logs
//!   every request both origins received, committed or not.
//! - Faults (the app-wide one from [`WebApp::set_fault`], or the form's own):
//!   [`Fault::Late`] waits, then commits, then answers (after the action's deadline, a late
//!   success); [`Fault::DropResponse`] commits, then closes the connection without an answer
//!   (the response is lost; the browser shows its error page); [`Fault::Reject`] commits
//!   nothing and answers `422` with the form again, `#status` reading
//!   `Rejected: the server refused this post; nothing was saved`.
//!
//! The server's own counts ([`WebApp::commits`], [`WebApp::site_posts`], …) are the truth the
//! tests compare with: the executor can only ever see what the page shows.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, SET_COOKIE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

/// What the server does with a submitted post.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Commit and answer at once.
    #[default]
    None,
    /// Wait this long, then commit, then answer.
    Late(Duration),
    /// Commit, then close the connection without answering.
    DropResponse,
    /// Commit nothing; answer the form again with the rejection in `#status`.
    Reject,
}

/// The rejection shown in `#status`.
pub const REJECTED: &str = "Rejected: the server refused this post; nothing was saved";

/// A committed post.
#[derive(Clone, Debug)]
pub struct Post {
    /// Its number (1, 2, …).
    pub n: u64,
    /// Its title.
    pub title: String,
    /// Its body.
    pub body: String,
}

struct AppState {
    fault: Mutex<Fault>,
    posts: Mutex<Vec<Post>>,
    /// Posts committed, for waiters.
    committed: watch::Sender<u64>,
    /// POST requests received (committed or not).
    received: AtomicU64,
    /// Deletes committed (`POST /items/delete`).
    deletes: AtomicU64,
    /// The `/site` pages and the card origin.
    site: SiteState,
    /// Whether connections stay open between requests ([`WebApp::set_keep_alive`]).
    keep_alive: std::sync::atomic::AtomicBool,
}

impl AppState {
    fn commit(&self, title: String, body: String) -> u64 {
        let n = {
            let mut posts = self.posts.lock().expect("posts lock");
            let n = posts.len() as u64 + 1;
            posts.push(Post { n, title, body });
            n
        };
        self.committed.send_replace(n);
        n
    }
}

/// The running app. Dropping it stops accepting connections.
pub struct WebApp {
    addr: SocketAddr,
    card_addr: SocketAddr,
    state: Arc<AppState>,
    accept: tokio::task::JoinHandle<()>,
    card_accept: tokio::task::JoinHandle<()>,
}

impl Drop for WebApp {
    fn drop(&mut self) {
        self.accept.abort();
        self.card_accept.abort();
    }
}

impl WebApp {
    /// Starts the app on 127.0.0.1 with a port of the system's choosing.
    pub async fn start() -> std::io::Result<WebApp> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let card_listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let card_addr = card_listener.local_addr()?;
        let state = Arc::new(AppState {
            fault: Mutex::new(Fault::None),
            posts: Mutex::new(Vec::new()),
            committed: watch::channel(0).0,
            received: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            site: SiteState::new(card_addr),
            keep_alive: std::sync::atomic::AtomicBool::new(false),
        });
        let accept = tokio::spawn(accept_loop(listener, state.clone(), Origin::Main));
        let card_accept = tokio::spawn(accept_loop(card_listener, state.clone(), Origin::Card));
        Ok(WebApp {
            addr,
            card_addr,
            state,
            accept,
            card_accept,
        })
    }

    /// The form page's URL, `http://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The URL of `path` on the app (`/items`, `/keys?…`).
    pub fn url_of(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Keeps connections open between requests from now on (`true`), or closes each after one
    /// answer (the default): a test of what a browser does with a reused connection that the
    /// server closes without answering turns it on.
    pub fn set_keep_alive(&self, on: bool) {
        self.state.keep_alive.store(on, Ordering::SeqCst);
    }

    /// Sets what the server does with submits from now on (forms with their own fault keep it).
    pub fn set_fault(&self, fault: Fault) {
        *self.state.fault.lock().expect("fault lock") = fault;
    }

    /// Posts committed so far: the real count of side effects.
    pub fn commits(&self) -> u64 {
        *self.state.committed.borrow()
    }

    /// POST requests received, committed or not.
    pub fn received(&self) -> u64 {
        self.state.received.load(Ordering::SeqCst)
    }

    /// Deletes committed on the items page: the side effect its `confirm()` guards.
    pub fn deletes(&self) -> u64 {
        self.state.deletes.load(Ordering::SeqCst)
    }

    /// The committed posts.
    pub fn posts(&self) -> Vec<Post> {
        self.state.posts.lock().expect("posts lock").clone()
    }

    /// Waits until at least `n` posts are committed, for at most `within`; the count then.
    pub async fn wait_commits(&self, n: u64, within: Duration) -> u64 {
        let mut rx = self.state.committed.subscribe();
        let _ = tokio::time::timeout(within, rx.wait_for(|c| *c >= n)).await;
        self.commits()
    }

    /// The second origin's payment page, `http://127.0.0.1:PORT2/card`: what `/site` embeds
    /// as its cross-origin iframe.
    pub fn card_url(&self) -> String {
        format!("http://{}/card", self.card_addr)
    }

    /// The second origin's address, to tell its requests apart in [`WebApp::requests`].
    pub fn card_addr(&self) -> SocketAddr {
        self.card_addr
    }

    /// Posts committed through `/site` (`POST /site/posts`), apart from [`WebApp::commits`].
    pub fn site_posts(&self) -> u64 {
        self.state.site.posts.lock().expect("site posts lock").len() as u64
    }

    /// The last post committed through `/site`, every field as stored: what a test compares
    /// with what the agent meant to select, check and fill.
    pub fn site_last_post(&self) -> Option<SitePost> {
        self.state
            .site
            .posts
            .lock()
            .expect("site posts lock")
            .last()
            .cloned()
    }

    /// Confirmations committed in `/site`'s same-origin iframe (`POST /site/frame/confirm`).
    pub fn site_frame_confirms(&self) -> u64 {
        self.state.site.frame_confirms.load(Ordering::SeqCst)
    }

    /// Payments committed on the second origin (`POST /card/pay`), from its cross-origin iframe.
    pub fn card_payments(&self) -> u64 {
        self.state.site.card_payments.load(Ordering::SeqCst)
    }

    /// The card number of the last payment, as typed: proof the text reached that frame's form.
    pub fn last_card_number(&self) -> Option<String> {
        self.state.site.last_card.lock().expect("card lock").clone()
    }

    /// Notes saved from the shadow-root widget (`POST /site/notes`).
    pub fn site_notes(&self) -> u64 {
        self.state.site.notes.lock().expect("notes lock").len() as u64
    }

    /// The last note's text, as the widget sent it.
    pub fn site_last_note(&self) -> Option<String> {
        self.state
            .site
            .notes
            .lock()
            .expect("notes lock")
            .last()
            .cloned()
    }

    /// Drafts deleted on `/site` (`POST /site/delete`): the side effect its `confirm()` guards.
    pub fn site_deletes(&self) -> u64 {
        self.state.site.deletes.load(Ordering::SeqCst)
    }

    /// The files uploaded through `/site` (`POST /site/upload`), one record a file, in order.
    pub fn site_uploads(&self) -> Vec<Upload> {
        self.state
            .site
            .uploads
            .lock()
            .expect("uploads lock")
            .clone()
    }

    /// Presses of the late "Load more" button that reached the server (`POST /site/more`).
    pub fn site_more(&self) -> u64 {
        self.state.site.more.load(Ordering::SeqCst)
    }

    /// Logins accepted (`POST /site/login`), each of which set a session cookie.
    pub fn site_logins(&self) -> u64 {
        self.state.site.logins.load(Ordering::SeqCst)
    }

    /// Every request both origins received, oldest first (the latest [`REQUEST_LOG_CAP`]): the
    /// server's side of the network evidence, whether or not anything was committed.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.state
            .site
            .log
            .lock()
            .expect("request log lock")
            .iter()
            .cloned()
            .collect()
    }
}

/// Which of the two listeners a connection came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// The app's own origin: the form, `/items`, `/keys`, `/site…`.
    Main,
    /// The second origin: `/card` only.
    Card,
}

async fn accept_loop(listener: TcpListener, state: Arc<AppState>, origin: Origin) {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            // A handler that must lose its response notifies this; the connection is then
            // dropped without a byte of answer.
            let drop_conn = Arc::new(Notify::new());
            let keep_alive = state.keep_alive.load(Ordering::SeqCst);
            let svc = {
                let drop_conn = drop_conn.clone();
                service_fn(move |req| handle(state.clone(), drop_conn.clone(), origin, port, req))
            };
            // One request per connection unless a test asks otherwise: a browser resends a
            // request that a reused keep-alive connection closed without answering, even a
            // POST, which would make the dropped-response fault commit twice for reasons of
            // its own.
            let conn = http1::Builder::new()
                .keep_alive(keep_alive)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                _ = conn => {}
                _ = drop_conn.notified() => {}
            }
        });
    }
}

type Reply = Response<Full<Bytes>>;

fn html(status: StatusCode, body: String) -> Reply {
    Response::builder()
        .status(status)
        .header("content-type", "text/html; charset=utf-8")
        .header("cache-control", "no-store")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

async fn handle(
    state: Arc<AppState>,
    drop_conn: Arc<Notify>,
    origin: Origin,
    port: u16,
    req: Request<Incoming>,
) -> Result<Reply, Infallible> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let content_length = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    state.site.record(req.method(), &path, port, content_length);
    if origin == Origin::Card {
        return Ok(card(&state, req, &path, &query).await);
    }
    Ok(match (req.method(), path.as_str()) {
        (&Method::GET, "/") => {
            let q = parse_form(&query);
            let hidden: Vec<(&str, String)> = ["fault", "delayMs"]
                .into_iter()
                .filter_map(|k| field(&q, k).map(|v| (k, v.to_owned())))
                .collect();
            html(StatusCode::OK, form_page(&state, "Draft", "", "", &hidden))
        }
        (&Method::POST, "/posts") => submit(state, drop_conn, req).await,
        (&Method::GET, "/items") => html(StatusCode::OK, items_page(&state, &parse_form(&query))),
        (&Method::POST, "/items/delete") => {
            let n = state.deletes.fetch_add(1, Ordering::SeqCst) + 1;
            Response::builder()
                .status(StatusCode::SEE_OTHER)
                .header("location", format!("/items?deleted={n}"))
                .header("cache-control", "no-store")
                .body(Full::new(Bytes::new()))
                .expect("a valid response")
        }
        (_, p) if p == "/site" || p.starts_with("/site/") => site(&state, req, p, &query).await,
        (_, p) if p == "/ev" || p.starts_with("/ev/") => evidence_routes(req, p, &query).await,
        (&Method::GET, "/keys") => html(StatusCode::OK, keys_page()),
        (&Method::GET, p) if p == "/reach" || p.starts_with("/reach/") => reach_routes(&state, p),
        (&Method::GET, "/posts") => html(StatusCode::OK, saved_page(&state, None)),
        (&Method::GET, p) if p.starts_with("/posts/") => {
            match p["/posts/".len()..].parse::<u64>() {
                Ok(n) if n >= 1 && n <= state.posts.lock().expect("posts lock").len() as u64 => {
                    html(StatusCode::OK, saved_page(&state, Some(n)))
                }
                _ => html(
                    StatusCode::NOT_FOUND,
                    page("Not found", "<p id=\"status\">Not found</p>"),
                ),
            }
        }
        _ => html(
            StatusCode::NOT_FOUND,
            page("Not found", "<p id=\"status\">Not found</p>"),
        ),
    })
}

/// The `/ev` page's script: each button's request, and what `#status` says after it.
const EV_SCRIPT: &str = r#"
const st = document.getElementById('status');
const code = new URLSearchParams(location.search).get('status') || '201';
const url = '/ev/save?status=' + code + '&token=secret';
const body = JSON.stringify({title: 'Hello', n: 1});
function save() {
  return fetch(url, {method: 'POST', headers: {'content-type': 'application/json'}, body})
    .then(r => { st.textContent = 'Answered ' + r.status; }, () => { st.textContent = 'Failed'; });
}
document.getElementById('save').onclick = () => { save(); };
document.getElementById('double').onclick = () => { save(); save(); };
document.getElementById('large').onclick = () => {
  fetch('/ev/save', {method: 'POST', body: 'x'.repeat(100000)})
    .then(r => { st.textContent = 'Large answered ' + r.status; });
};
document.getElementById('again').onclick = () => { save(); setTimeout(save, 1500); };
document.getElementById('beacon').onclick = () => {
  navigator.sendBeacon('/ev/beacon', 'seen=1');
  st.textContent = 'Beacon queued';
};
document.getElementById('many').onclick = () => {
  const saves = [1, 2, 3, 4, 5].map(i => fetch('/ev/save?n=' + i, {method: 'POST', body: 'n=' + i}));
  Promise.all(saves).then(() => { st.textContent = 'Many answered'; });
};
document.getElementById('huge').onclick = () => {
  fetch('/ev/big', {method: 'POST', body: 'y'.repeat(2 * 1024 * 1024)})
    .then(r => r.text()).then(t => { st.textContent = 'Big answered ' + t; });
};
document.getElementById('blob').onclick = () => {
  const blob = new Blob(['z'.repeat(5000)], {type: 'application/octet-stream'});
  fetch('/ev/big', {method: 'POST', body: blob})
    .then(r => r.text()).then(t => { st.textContent = 'Blob answered ' + t; });
};
document.getElementById('worker').onclick = () => {
  const w = new Worker('/ev/worker.js');
  w.onmessage = (m) => { st.textContent = 'Worker answered ' + m.data; };
  w.postMessage(url);
};
"#;

/// The dedicated worker of the `/ev` page: saves the URL it is sent, answers the status.
const EV_WORKER: &str = r#"
onmessage = (m) => {
  fetch(m.data, {method: 'POST', body: 'from-worker'})
    .then(r => postMessage(String(r.status)), () => postMessage('failed'));
};
"#;

/// The `/ev/sw` page's script: registers the service worker and says when it controls the
/// page; `#relay` posts to `/ev/relay` (which only the worker answers), `#through` to
/// `/ev/save` (which the worker passes on as it is).
const EV_SW_PAGE_SCRIPT: &str = r#"
const st = document.getElementById('status');
const ready = () => { st.textContent = 'Worker ready'; };
navigator.serviceWorker.register('/ev/sw.js').then(() => navigator.serviceWorker.ready).then(() => {
  if (navigator.serviceWorker.controller) { ready(); }
  else { navigator.serviceWorker.addEventListener('controllerchange', ready); }
}, (e) => { st.textContent = 'No worker: ' + e; });
document.getElementById('relay').onclick = () => {
  fetch('/ev/relay', {method: 'POST', body: 'note=1'})
    .then(r => { st.textContent = 'Relayed ' + r.status; }, () => { st.textContent = 'Failed'; });
};
document.getElementById('through').onclick = () => {
  fetch('/ev/save', {method: 'POST', body: 'note=2'})
    .then(r => { st.textContent = 'Through ' + r.status; }, () => { st.textContent = 'Failed'; });
};
"#;

/// The service worker of `/ev/sw` (scope `/ev/`): it answers a `POST /ev/relay` itself by
/// sending its own `POST /ev/save?via=worker` (the page's request never reaches the network),
/// and passes a `POST /ev/save` on unchanged (`fetch(event.request)`).
const EV_SERVICE_WORKER: &str = r#"
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil(self.clients.claim()));
self.addEventListener('fetch', (e) => {
  if (e.request.method !== 'POST') { return; }
  const path = new URL(e.request.url).pathname;
  if (path === '/ev/relay') {
    e.respondWith(e.request.text().then(body =>
      fetch('/ev/save?via=worker', {method: 'POST', body: 'relayed:' + body})));
  } else if (path === '/ev/save') {
    e.respondWith(fetch(e.request));
  }
});
"#;

/// `/reach…`: a page whose every way out goes to the second origin (`--allow-origin`'s tests).
fn reach_routes(state: &AppState, path: &str) -> Reply {
    let card = format!("http://{}", state.site.card_addr);
    match path {
        "/reach" => html(
            StatusCode::OK,
            page(
                "Reach",
                &format!(
                    "<p id=\"status\">Ready</p>\
                     <a id=\"link\" href=\"{card}/card?via=link\">Card by link</a>\
                     <a id=\"redirect\" href=\"/reach/redirect\">Card by redirect</a>\
                     <a id=\"tab\" href=\"{card}/card?via=tab\" target=\"_blank\">Card in a new tab</a>\
                     <form id=\"pay\" method=\"post\" action=\"{card}/card/pay\">\
                     <input type=\"hidden\" name=\"card\" value=\"4242\">\
                     <button id=\"post\" type=\"submit\">Pay by form</button></form>\
                     <button id=\"fetch\" type=\"button\">Card by fetch</button>\
                     <button id=\"frame\" type=\"button\">Card in a frame</button>\
                     <button id=\"worker\" type=\"button\">Card from a worker</button>\
                     <script>\
                     const st = document.getElementById('status');\
                     document.getElementById('fetch').onclick = () => fetch('{card}/card?via=fetch', {{mode: 'no-cors'}})\
                       .then(() => {{ st.textContent = 'Fetched'; }}, () => {{ st.textContent = 'Fetch failed'; }});\
                     document.getElementById('frame').onclick = () => {{\
                       const f = document.createElement('iframe'); f.src = '{card}/card?via=frame';\
                       f.onload = () => {{ st.textContent = 'Framed'; }}; document.body.appendChild(f); }};\
                     document.getElementById('worker').onclick = () => {{\
                       const w = new Worker('/reach/worker.js');\
                       w.onmessage = (m) => {{ st.textContent = 'Worker ' + m.data; }}; }};\
                     </script>"
                ),
            ),
        ),
        "/reach/redirect" => Response::builder()
            .status(StatusCode::FOUND)
            .header("location", format!("{card}/card?via=redirect"))
            .header("cache-control", "no-store")
            .body(Full::new(Bytes::new()))
            .expect("a valid response"),
        "/reach/worker.js" => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/javascript")
            .header("cache-control", "no-store")
            .body(Full::new(Bytes::from(format!(
                "fetch('{card}/card?via=worker', {{mode: 'no-cors'}})\
                 .then(() => postMessage('fetched'), () => postMessage('failed'));"
            ))))
            .expect("a valid response"),
        _ => not_found(),
    }
}

/// `/ev…`: the page that saves with `fetch`, `sendBeacon` and a worker (SPEC §16's tests).
async fn evidence_routes(req: Request<Incoming>, path: &str, query: &str) -> Reply {
    match (req.method().clone(), path) {
        (Method::GET, "/ev") => html(
            StatusCode::OK,
            page(
                "Evidence",
                &format!(
                    "<p id=\"status\">Ready</p>\
                     <button id=\"save\" type=\"button\">Save</button>\
                     <button id=\"double\" type=\"button\">Save twice</button>\
                     <button id=\"again\" type=\"button\">Save, and again later</button>\
                     <button id=\"large\" type=\"button\">Save a large body</button>\
                     <button id=\"beacon\" type=\"button\">Send beacon</button>\
                     <button id=\"worker\" type=\"button\">Save in a worker</button>\
                     <button id=\"many\" type=\"button\">Save five times</button>\
                     <button id=\"huge\" type=\"button\">Save 2 MiB</button>\
                     <button id=\"blob\" type=\"button\">Save a blob</button>\
                     <script>{EV_SCRIPT}</script>"
                ),
            ),
        ),
        (Method::GET, "/ev/sw") => html(
            StatusCode::OK,
            page(
                "Service worker",
                &format!(
                    "<p id=\"status\">Registering</p>\
                     <button id=\"relay\" type=\"button\">Relay</button>\
                     <button id=\"through\" type=\"button\">Save through the worker</button>\
                     <script>{EV_SW_PAGE_SCRIPT}</script>"
                ),
            ),
        ),
        (Method::GET, "/ev/sw.js") => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/javascript")
            .header("cache-control", "no-store")
            .body(Full::new(Bytes::from_static(EV_SERVICE_WORKER.as_bytes())))
            .expect("a valid response"),
        (Method::GET, "/ev/worker.js") => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/javascript")
            .header("cache-control", "no-store")
            .body(Full::new(Bytes::from_static(EV_WORKER.as_bytes())))
            .expect("a valid response"),
        (Method::POST, "/ev/save") => {
            let q = parse_form(query);
            if let Some(ms) = field(&q, "delayMs").and_then(|d| d.parse::<u64>().ok()) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if let Err(e) = read_body(req, 256 * 1024).await {
                return e.reply();
            }
            let status = field(&q, "status")
                .and_then(|s| s.parse::<u16>().ok())
                .and_then(|s| StatusCode::from_u16(s).ok())
                .unwrap_or(StatusCode::CREATED);
            text(status, status.as_u16().to_string())
        }
        (Method::POST, "/ev/big") => match read_body(req, EV_BIG_LIMIT).await {
            Ok(body) => text(StatusCode::CREATED, body.len().to_string()),
            Err(e) => e.reply(),
        },
        (Method::POST, "/ev/beacon") => {
            if let Err(e) = read_body(req, FORM_LIMIT).await {
                return e.reply();
            }
            text(StatusCode::NO_CONTENT, String::new())
        }
        _ => not_found(),
    }
}

async fn submit(state: Arc<AppState>, drop_conn: Arc<Notify>, req: Request<Incoming>) -> Reply {
    state.received.fetch_add(1, Ordering::SeqCst);
    let body = match Limited::new(req.into_body(), 256 * 1024).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return html(
                StatusCode::PAYLOAD_TOO_LARGE,
                page("Too large", "<p id=\"status\">Rejected: too large</p>"),
            )
        }
    };
    let form = parse_form(&String::from_utf8_lossy(&body));
    let title = field(&form, "title").unwrap_or("").to_owned();
    let text = field(&form, "body").unwrap_or("").to_owned();
    let delay = field(&form, "delayMs")
        .and_then(|d| d.parse::<u64>().ok())
        .map(Duration::from_millis);
    let fault = match field(&form, "fault") {
        Some("late") => Fault::Late(delay.unwrap_or(Duration::from_millis(3000))),
        Some("drop") => Fault::DropResponse,
        Some("reject") => Fault::Reject,
        _ => match (state.fault.lock().expect("fault lock").clone(), delay) {
            (Fault::None, Some(d)) => Fault::Late(d),
            (f, _) => f,
        },
    };
    let hidden: Vec<(&str, String)> = ["fault", "delayMs"]
        .into_iter()
        .filter_map(|k| field(&form, k).map(|v| (k, v.to_owned())))
        .collect();
    if title.trim().is_empty() {
        return html(
            StatusCode::UNPROCESSABLE_ENTITY,
            form_page(
                &state,
                "Rejected: a title is required",
                &title,
                &text,
                &hidden,
            ),
        );
    }
    let n = match fault {
        Fault::Reject => {
            return html(
                StatusCode::UNPROCESSABLE_ENTITY,
                form_page(&state, REJECTED, &title, &text, &hidden),
            )
        }
        Fault::DropResponse => {
            state.commit(title, text);
            drop_conn.notify_one();
            return std::future::pending().await;
        }
        Fault::Late(d) => {
            // Committed by a task of its own: a client that gives up does not stop the save,
            // as with a real backend.
            let st = state.clone();
            let saving = tokio::spawn(async move {
                tokio::time::sleep(d).await;
                st.commit(title, text)
            });
            match saving.await {
                Ok(n) => n,
                Err(_) => {
                    return html(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        page("Error", "<p id=\"status\">Error</p>"),
                    )
                }
            }
        }
        Fault::None => state.commit(title, text),
    };
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header("location", format!("/posts/{n}"))
        .header("cache-control", "no-store")
        .body(Full::new(Bytes::new()))
        .expect("a valid response")
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `application/x-www-form-urlencoded` (and query strings) into pairs.
pub fn parse_form(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Escapes text for HTML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font:16px system-ui,sans-serif;max-width:40em;margin:2em auto}}\
         input,textarea{{display:block;width:100%;margin:.3em 0 1em}}</style></head>\
         <body>{body}</body></html>\n",
        esc(title)
    )
}

fn post_list(state: &AppState) -> String {
    let posts = state.posts.lock().expect("posts lock");
    let items: String = posts
        .iter()
        .rev()
        .take(20)
        .map(|p| format!("<li>{}</li>", esc(&p.title)))
        .collect();
    format!("<h2>Published</h2><ul id=\"posts\">{items}</ul>")
}

fn form_page(
    state: &AppState,
    status: &str,
    title: &str,
    body: &str,
    hidden: &[(&str, String)],
) -> String {
    let hidden: String = hidden
        .iter()
        .map(|(k, v)| format!("<input type=\"hidden\" name=\"{k}\" value=\"{}\">", esc(v)))
        .collect();
    page(
        "New post",
        &format!(
            "<h1>New post</h1>\
             <form id=\"post\" method=\"post\" action=\"/posts\">{hidden}\
             <label for=\"title\">Title</label><input id=\"title\" name=\"title\" value=\"{}\">\
             <label for=\"body\">Body</label><textarea id=\"body\" name=\"body\" rows=\"4\">{}</textarea>\
             <button id=\"submit\" type=\"submit\">Publish</button></form>\
             <p id=\"status\">{}</p>{}",
            esc(title),
            esc(body),
            esc(status),
            post_list(state)
        ),
    )
}

/// The items a fresh app lists; each delete removes the first.
const ITEMS: [&str; 3] = ["Milk", "Bread", "Eggs"];

fn items_page(state: &AppState, query: &[(String, String)]) -> String {
    let deleted = state.deletes.load(Ordering::SeqCst) as usize;
    let left = &ITEMS[deleted.min(ITEMS.len())..];
    let status = match field(query, "deleted").and_then(|n| n.parse::<u64>().ok()) {
        Some(n) => format!("Deleted #{n}"),
        None => format!("{} items", left.len()),
    };
    let items: String = left
        .iter()
        .map(|i| format!("<li>{}</li>", esc(i)))
        .collect();
    let timer = match field(query, "alertMs").and_then(|n| n.parse::<u64>().ok()) {
        Some(ms) => format!(
            "<script>setTimeout(() => {{ alert('Your session expires in 5 minutes'); \
             document.getElementById('seen').textContent = 'Alerted'; }}, {ms});</script>"
        ),
        None => String::new(),
    };
    let body = format!(
        r#"<h1>Items</h1><p id="status">{}</p><ul id="items">{items}</ul>
<form id="remove" method="post" action="/items/delete"
  onsubmit="return confirm('Delete the first item? This cannot be undone.')">
<button id="delete" type="submit">Delete the first item</button></form>
<p><button id="rename" type="button"
  onclick="const t = prompt('A new name for the list?', 'Groceries'); document.getElementById('name').textContent = t === null ? 'Unnamed' : t;">Rename</button>
<span id="name">Unnamed</span></p>
<p><button id="notify" type="button"
  onclick="alert('Nothing to undo'); document.getElementById('notified').textContent = 'Notified';">Notify</button>
<span id="notified">Quiet</span></p>
<p id="seen">Waiting</p>{timer}"#,
        esc(&status)
    );
    page("Items", &body)
}

fn keys_page() -> String {
    page(
        "Keys",
        r#"<h1>Keys</h1><input id="field" value=""><p id="last-key">none</p>
<p id="selection">0-0</p>
<script>
const field = document.getElementById('field');
document.addEventListener('keydown', (e) => {
  if (['Alt', 'Control', 'Meta', 'Shift'].includes(e.key)) return;
  const held = [['altKey', 'Alt'], ['ctrlKey', 'Control'], ['metaKey', 'Meta'], ['shiftKey', 'Shift']]
    .filter(([flag]) => e[flag]).map(([, name]) => name);
  document.getElementById('last-key').textContent = [...held, e.key].join('+');
}, true);
document.addEventListener('keyup', () => {
  document.getElementById('selection').textContent = `${field.selectionStart}-${field.selectionEnd}`;
}, true);
</script>"#,
    )
}

fn saved_page(state: &AppState, n: Option<u64>) -> String {
    let head = match n {
        Some(n) => {
            let title = state
                .posts
                .lock()
                .expect("posts lock")
                .get(n as usize - 1)
                .map(|p| p.title.clone())
                .unwrap_or_default();
            format!(
                "<h1>Published</h1><p id=\"status\">Saved #{n}</p>\
                 <p id=\"saved-title\">{}</p>",
                esc(&title)
            )
        }
        None => "<h1>Posts</h1><p id=\"status\">Posts</p>".to_owned(),
    };
    page(
        "Published",
        &format!(
            "{head}<p><a id=\"new\" href=\"/\">New post</a></p>{}",
            post_list(state)
        ),
    )
}

/// How many requests [`WebApp::requests`] keeps; older ones are dropped first, so a long
/// benchmark cannot grow the log without bound.
pub const REQUEST_LOG_CAP: usize = 100_000;

/// The most a `/site` upload body may hold.
const UPLOAD_LIMIT: usize = 1024 * 1024;

/// The most a `POST /ev/big` body may hold (answered `201` with the bytes read).
const EV_BIG_LIMIT: usize = 4 * 1024 * 1024;

/// The most any other `/site` or `/card` form body may hold.
const FORM_LIMIT: usize = 64 * 1024;

/// One request as the server received it, for tests that hold what the browser says it sent
/// against what arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The port it arrived on: [`WebApp::addr`]'s or [`WebApp::card_addr`]'s.
    pub port: u16,
    /// When its head was read.
    pub at: SystemTime,
    /// The body's length as its `Content-Length` declared it (the server reads exactly that
    /// many bytes or fails the request); `None` without the header.
    pub content_length: Option<u64>,
}

/// A post committed through `/site`, every field as the form sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SitePost {
    /// Its number (1, 2, …).
    pub n: u64,
    /// The Title field.
    pub title: String,
    /// The Body field.
    pub body: String,
    /// The Category's selected value (`news`, `guide`, `op-ed`), not its label.
    pub category: String,
    /// Whether Urgent was checked.
    pub urgent: bool,
    /// The Visibility radio's value (`public`, `private`), empty when none was sent.
    pub visibility: String,
    /// Who was logged in when it was posted, if anyone.
    pub author: Option<String>,
}

/// A file uploaded through `/site`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    /// The number of the upload (the POST) it came with (1, 2, …).
    pub n: u64,
    /// The file name as the browser sent it.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
}

/// The state of the `/site` pages and the card origin.
struct SiteState {
    card_addr: SocketAddr,
    posts: Mutex<Vec<SitePost>>,
    frame_confirms: AtomicU64,
    card_payments: AtomicU64,
    last_card: Mutex<Option<String>>,
    notes: Mutex<Vec<String>>,
    deletes: AtomicU64,
    upload_posts: AtomicU64,
    uploads: Mutex<Vec<Upload>>,
    more: AtomicU64,
    logins: AtomicU64,
    /// Session token → user name.
    sessions: Mutex<HashMap<String, String>>,
    log: Mutex<VecDeque<ReceivedRequest>>,
}

impl SiteState {
    fn new(card_addr: SocketAddr) -> SiteState {
        SiteState {
            card_addr,
            posts: Mutex::new(Vec::new()),
            frame_confirms: AtomicU64::new(0),
            card_payments: AtomicU64::new(0),
            last_card: Mutex::new(None),
            notes: Mutex::new(Vec::new()),
            deletes: AtomicU64::new(0),
            upload_posts: AtomicU64::new(0),
            uploads: Mutex::new(Vec::new()),
            more: AtomicU64::new(0),
            logins: AtomicU64::new(0),
            sessions: Mutex::new(HashMap::new()),
            log: Mutex::new(VecDeque::new()),
        }
    }

    fn record(&self, method: &Method, path: &str, port: u16, content_length: Option<u64>) {
        let mut log = self.log.lock().expect("request log lock");
        if log.len() >= REQUEST_LOG_CAP {
            log.pop_front();
        }
        log.push_back(ReceivedRequest {
            method: method.as_str().to_owned(),
            path: path.to_owned(),
            port,
            at: SystemTime::now(),
            content_length,
        });
    }

    /// The user of the request's `session` cookie, if it names a live session.
    fn user(&self, headers: &HeaderMap) -> Option<String> {
        let sessions = self.sessions.lock().expect("sessions lock");
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .filter(|(k, _)| *k == "session")
            .find_map(|(_, token)| sessions.get(token).cloned())
    }
}

fn see_other(location: &str) -> Reply {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header("location", location)
        .header("cache-control", "no-store")
        .body(Full::new(Bytes::new()))
        .expect("a valid response")
}

fn text(status: StatusCode, body: String) -> Reply {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .header("cache-control", "no-store")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

fn not_found() -> Reply {
    html(
        StatusCode::NOT_FOUND,
        page("Not found", "<p id=\"status\">Not found</p>"),
    )
}

fn bad_request() -> Reply {
    html(
        StatusCode::BAD_REQUEST,
        page("Bad request", "<p id=\"status\">Bad request</p>"),
    )
}

/// Why a request's body was not read.
#[derive(Debug)]
enum BodyError {
    /// Beyond the limit: `413`.
    TooLarge,
    /// Broken off: `400`.
    Broken,
}

impl BodyError {
    fn reply(self) -> Reply {
        match self {
            BodyError::TooLarge => html(
                StatusCode::PAYLOAD_TOO_LARGE,
                page("Too large", "<p id=\"status\">Rejected: too large</p>"),
            ),
            BodyError::Broken => bad_request(),
        }
    }
}

/// The request's body, at most `limit` bytes (a declared length beyond it is refused before
/// reading).
async fn read_body(req: Request<Incoming>, limit: usize) -> Result<Bytes, BodyError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|d| d > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    match Limited::new(req.into_body(), limit).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(BodyError::TooLarge)
        }
        Err(_) => Err(BodyError::Broken),
    }
}

/// The request's form body, decoded.
async fn read_form(req: Request<Incoming>) -> Result<Vec<(String, String)>, BodyError> {
    let body = read_body(req, FORM_LIMIT).await?;
    Ok(parse_form(&String::from_utf8_lossy(&body)))
}

/// The `/site` pages the browser tests step through: a form to publish posts, its login, the
/// posts, drafts, a frame to confirm in, notes, uploads and help.
async fn site(state: &AppState, req: Request<Incoming>, path: &str, query: &str) -> Reply {
    let s = &state.site;
    let who = s.user(req.headers());
    let who = who.as_deref();
    let method = req.method().clone();
    match (method, path) {
        (Method::GET, "/site") => html(StatusCode::OK, site_form_page(s, who, query)),
        (Method::GET, "/site/login") => html(StatusCode::OK, login_page(who, "Please log in")),
        (Method::POST, "/site/login") => site_login(s, who, req).await,
        (Method::POST, "/site/posts") => site_publish(s, who, req).await,
        (Method::GET, p) if p.starts_with("/site/posts/") => site_post(s, who, p),
        (Method::GET, "/site/drafts") => site_drafts(s, who),
        (Method::GET, "/site/frame") => site_frame(query),
        (Method::POST, "/site/frame/confirm") => {
            if let Err(e) = read_body(req, FORM_LIMIT).await {
                return e.reply();
            }
            let n = s.frame_confirms.fetch_add(1, Ordering::SeqCst) + 1;
            see_other(&format!("/site/frame?confirmed={n}"))
        }
        (Method::POST, "/site/notes") => site_note(s, req).await,
        (Method::POST, "/site/delete") => {
            if let Err(e) = read_body(req, FORM_LIMIT).await {
                return e.reply();
            }
            let n = s.deletes.fetch_add(1, Ordering::SeqCst) + 1;
            see_other(&format!("/site?deleted={n}"))
        }
        (Method::POST, "/site/upload") => upload(s, who, req).await,
        (Method::POST, "/site/more") => {
            if let Err(e) = read_body(req, FORM_LIMIT).await {
                return e.reply();
            }
            let n = s.more.fetch_add(1, Ordering::SeqCst) + 1;
            text(StatusCode::OK, n.to_string())
        }
        (Method::GET, "/site/help") => html(
            StatusCode::OK,
            site_page(
                "Help",
                who,
                "<h1>Help</h1><p>Fill in the form and press Publish. \
                 Urgent posts go to the top of the front page.</p>\
                 <p><button id=\"close\" type=\"button\" onclick=\"window.close()\">Close help</button></p>",
            ),
        ),
        _ => not_found(),
    }
}

/// `POST /site/login`: any non-empty username and password log in, with a session cookie.
async fn site_login(s: &SiteState, who: Option<&str>, req: Request<Incoming>) -> Reply {
    let form = match read_form(req).await {
        Ok(f) => f,
        Err(e) => return e.reply(),
    };
    let user = field(&form, "username").unwrap_or("").trim().to_owned();
    let password = field(&form, "password").unwrap_or("");
    if user.is_empty() || password.is_empty() {
        return html(
            StatusCode::UNPROCESSABLE_ENTITY,
            login_page(who, "Rejected: a username and a password are required"),
        );
    }
    let token = uuid::Uuid::new_v4().simple().to_string();
    s.sessions
        .lock()
        .expect("sessions lock")
        .insert(token.clone(), user);
    s.logins.fetch_add(1, Ordering::SeqCst);
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header("location", "/site")
        .header("cache-control", "no-store")
        .header(
            SET_COOKIE,
            format!("session={token}; HttpOnly; Path=/; SameSite=Lax"),
        )
        .body(Full::new(Bytes::new()))
        .expect("a valid response")
}

/// `POST /site/posts`: the form published as the next post, then its page.
async fn site_publish(s: &SiteState, who: Option<&str>, req: Request<Incoming>) -> Reply {
    let form = match read_form(req).await {
        Ok(f) => f,
        Err(e) => return e.reply(),
    };
    let get = |k: &str| field(&form, k).unwrap_or("").to_owned();
    let n = {
        let mut posts = s.posts.lock().expect("site posts lock");
        let n = posts.len() as u64 + 1;
        posts.push(SitePost {
            n,
            title: get("title"),
            body: get("body"),
            category: get("category"),
            urgent: field(&form, "urgent").is_some(),
            visibility: get("visibility"),
            author: who.map(str::to_owned),
        });
        n
    };
    see_other(&format!("/site/posts/{n}"))
}

/// `GET /site/posts/N`: post `N`'s page.
fn site_post(s: &SiteState, who: Option<&str>, path: &str) -> Reply {
    let post = path["/site/posts/".len()..]
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| s.posts.lock().expect("site posts lock").get(i).cloned());
    match post {
        Some(post) => html(StatusCode::OK, site_post_page(who, &post)),
        None => not_found(),
    }
}

/// `GET /site/drafts`: one draft until a delete was posted.
fn site_drafts(s: &SiteState, who: Option<&str>) -> Reply {
    let left = if s.deletes.load(Ordering::SeqCst) == 0 {
        "<ul id=\"draft-list\"><li>Untitled draft</li></ul>"
    } else {
        "<p id=\"draft-list\">No drafts</p>"
    };
    html(
        StatusCode::OK,
        site_page(
            "Drafts",
            who,
            &format!(
                "<h1>Drafts</h1>{left}\
                 <p><a id=\"back\" href=\"/site\">Back to the form</a></p>"
            ),
        ),
    )
}

/// `GET /site/frame`: the confirmation page shown in a frame, with the confirmation `query`
/// names.
fn site_frame(query: &str) -> Reply {
    let status = match field(&parse_form(query), "confirmed").and_then(|n| n.parse::<u64>().ok()) {
        Some(n) => format!("Frame confirmed #{n}"),
        None => "Not confirmed".to_owned(),
    };
    html(
        StatusCode::OK,
        page(
            "Confirmation",
            &format!(
                "<form id=\"confirm-form\" method=\"post\" action=\"/site/frame/confirm\">\
                 <button id=\"confirm\" type=\"submit\">Confirm in frame</button></form>\
                 <p id=\"status\" role=\"status\">{status}</p>"
            ),
        ),
    )
}

/// `POST /site/notes`: the note kept; answers how many there are.
async fn site_note(s: &SiteState, req: Request<Incoming>) -> Reply {
    let form = match read_form(req).await {
        Ok(f) => f,
        Err(e) => return e.reply(),
    };
    let note = field(&form, "note").unwrap_or("").to_owned();
    let n = {
        let mut notes = s.notes.lock().expect("notes lock");
        notes.push(note);
        notes.len()
    };
    text(StatusCode::OK, n.to_string())
}

async fn upload(s: &SiteState, who: Option<&str>, req: Request<Incoming>) -> Reply {
    let boundary = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(multipart_boundary);
    // Read even when refusing: a connection closed on unread data is reset, and the browser
    // would show that instead of the answer.
    let body = match read_body(req, UPLOAD_LIMIT).await {
        Ok(b) => b,
        Err(e) => return e.reply(),
    };
    let Some(boundary) = boundary else {
        return bad_request();
    };
    let Some(parts) = parse_multipart(&body, &boundary) else {
        return bad_request();
    };
    // The Attachment field's files; a file input left empty still sends its part, with an
    // empty file name.
    let files: Vec<(String, u64)> = parts
        .iter()
        .filter(|p| p.name == "attachment")
        .filter_map(|p| match &p.filename {
            Some(f) if !f.is_empty() => Some((f.clone(), p.content.len() as u64)),
            _ => None,
        })
        .collect();
    if files.is_empty() {
        return html(
            StatusCode::UNPROCESSABLE_ENTITY,
            site_page(
                "Upload",
                who,
                "<h1>Upload</h1><p id=\"status\" role=\"status\">Rejected: choose a file to upload</p>\
                 <p><a id=\"back\" href=\"/site\">Back to the form</a></p>",
            ),
        );
    }
    let n = s.upload_posts.fetch_add(1, Ordering::SeqCst) + 1;
    let shown: Vec<String> = files
        .iter()
        .map(|(name, size)| format!("{} ({size} bytes)", esc(name)))
        .collect();
    s.uploads
        .lock()
        .expect("uploads lock")
        .extend(
            files
                .into_iter()
                .map(|(name, size)| Upload { n, name, size }),
        );
    html(
        StatusCode::OK,
        site_page(
            "Uploaded",
            who,
            &format!(
                "<h1>Uploaded</h1><p id=\"status\" role=\"status\">Uploaded {}</p>\
                 <p><a id=\"back\" href=\"/site\">Back to the form</a></p>",
                shown.join(", ")
            ),
        ),
    )
}

async fn card(state: &AppState, req: Request<Incoming>, path: &str, query: &str) -> Reply {
    let s = &state.site;
    let method = req.method().clone();
    match (method, path) {
        (Method::GET, "/card") => {
            let status = match field(&parse_form(query), "paid").and_then(|n| n.parse::<u64>().ok())
            {
                Some(n) => format!("Paid #{n}"),
                None => "Unpaid".to_owned(),
            };
            html(StatusCode::OK, card_page(&status))
        }
        (Method::POST, "/card/pay") => {
            let form = match read_form(req).await {
                Ok(f) => f,
                Err(e) => return e.reply(),
            };
            let number = field(&form, "number").unwrap_or("").trim().to_owned();
            if number.is_empty() {
                return html(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    card_page("Rejected: a card number is required"),
                );
            }
            *s.last_card.lock().expect("card lock") = Some(number);
            let n = s.card_payments.fetch_add(1, Ordering::SeqCst) + 1;
            see_other(&format!("/card?paid={n}"))
        }
        _ => not_found(),
    }
}

fn card_page(status: &str) -> String {
    page(
        "Payment",
        &format!(
            "<form id=\"pay-form\" method=\"post\" action=\"/card/pay\">\
             <label for=\"card-number\">Card number</label>\
             <input id=\"card-number\" name=\"number\" inputmode=\"numeric\" autocomplete=\"cc-number\">\
             <button id=\"pay\" type=\"submit\">Pay</button></form>\
             <p id=\"status\" role=\"status\">{}</p>",
            esc(status)
        ),
    )
}

/// A `/site` page: its style, and `#who` above `body`.
fn site_page(title: &str, who: Option<&str>, body: &str) -> String {
    let who = match who {
        Some(name) => format!("<p id=\"who\">Logged in as {}</p>", esc(name)),
        None => "<p id=\"who\">Not logged in</p>".to_owned(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font:16px system-ui,sans-serif;max-width:44em;margin:2em auto}}\
         label{{display:block;margin-top:.8em}}\
         input:not([type]),input[type=password],textarea,select{{display:block;width:100%}}\
         label.inline{{display:inline;margin:0 1em 0 .3em}}\
         iframe{{display:block;width:100%;height:9em;border:1px solid #ccc;margin:1em 0}}\
         </style></head><body><header>{who}</header>{body}</body></html>\n",
        esc(title)
    )
}

fn login_page(who: Option<&str>, status: &str) -> String {
    site_page(
        "Log in",
        who,
        &format!(
            "<h1>Log in</h1>\
             <form id=\"login\" method=\"post\" action=\"/site/login\">\
             <label for=\"username\">Username</label>\
             <input id=\"username\" name=\"username\" autocomplete=\"username\">\
             <label for=\"password\">Password</label>\
             <input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\">\
             <button id=\"login-button\" type=\"submit\">Log in</button></form>\
             <p id=\"status\" role=\"status\">{}</p>",
            esc(status)
        ),
    )
}

/// The widget with an open shadow root, and the "Load more" button a second after load.
const SITE_SCRIPT: &str = r##"<script>
const theme = document.getElementById('theme');
theme.textContent = 'Theme: ' + (localStorage.getItem('theme') || 'light');
document.getElementById('dark').addEventListener('click', () => {
  localStorage.setItem('theme', 'dark');
  theme.textContent = 'Theme: dark';
});
customElements.define('polaris-widget', class extends HTMLElement {
  connectedCallback() {
    if (this.shadowRoot) return;
    const root = this.attachShadow({mode: 'open'});
    root.innerHTML = '<input id="note" aria-label="Note">'
      + '<button id="save-note" type="button">Save note</button>'
      + '<p id="note-status">No note yet</p>';
    root.getElementById('save-note').addEventListener('click', async () => {
      const status = root.getElementById('note-status');
      try {
        const body = new URLSearchParams({note: root.getElementById('note').value});
        const r = await fetch('/site/notes', {method: 'POST', body});
        status.textContent = r.ok ? 'Note saved #' + (await r.text()) : 'Note failed: ' + r.status;
      } catch (e) {
        status.textContent = 'Note failed';
      }
    });
  }
});
setTimeout(() => {
  const b = document.createElement('button');
  b.id = 'load-more';
  b.type = 'button';
  b.textContent = 'Load more';
  b.addEventListener('click', async () => {
    const status = document.getElementById('more-status');
    try {
      const r = await fetch('/site/more', {method: 'POST'});
      status.textContent = r.ok ? 'More loaded #' + (await r.text()) : 'Load failed: ' + r.status;
    } catch (e) {
      status.textContent = 'Load failed';
    }
  });
  document.getElementById('more').prepend(b);
}, 1000);
</script>"##;

fn site_form_page(s: &SiteState, who: Option<&str>, query: &str) -> String {
    let status = match field(&parse_form(query), "deleted").and_then(|n| n.parse::<u64>().ok()) {
        Some(n) => format!("Draft deleted #{n}"),
        None => "Ready".to_owned(),
    };
    let login = if who.is_none() {
        "<p><a id=\"login-link\" href=\"/site/login\">Sign in</a></p>"
    } else {
        ""
    };
    let mut body = format!(
        "{login}<h1>New post</h1><p id=\"status\" role=\"status\">{}</p>\
         <form id=\"post\" method=\"post\" action=\"/site/posts\">\
         <label for=\"title\">Title</label><input id=\"title\" name=\"title\">\
         <label for=\"body\">Body</label><textarea id=\"body\" name=\"body\" rows=\"4\"></textarea>\
         <label for=\"category\">Category</label><select id=\"category\" name=\"category\">\
         <option value=\"news\">News</option><option value=\"guide\">How-to guide</option>\
         <option value=\"op-ed\">Opinion</option></select>\
         <p><input type=\"checkbox\" id=\"urgent\" name=\"urgent\" value=\"yes\">\
         <label class=\"inline\" for=\"urgent\">Urgent</label></p>\
         <fieldset><legend>Visibility</legend>\
         <input type=\"radio\" id=\"visibility-public\" name=\"visibility\" value=\"public\" checked>\
         <label class=\"inline\" for=\"visibility-public\">Public</label>\
         <input type=\"radio\" id=\"visibility-private\" name=\"visibility\" value=\"private\">\
         <label class=\"inline\" for=\"visibility-private\">Private</label></fieldset>\
         <p><button id=\"publish\" type=\"submit\">Publish</button></p></form>\
         <p><a id=\"drafts\" href=\"/site/drafts\">Drafts</a> · \
         <a id=\"help\" href=\"/site/help\" target=\"_blank\">Open help</a></p>\
         <form id=\"delete-draft\" method=\"post\" action=\"/site/delete\" \
         onsubmit=\"return confirm('Delete the draft?')\">\
         <button id=\"delete\" type=\"submit\">Delete draft</button></form>\
         <form id=\"upload\" method=\"post\" action=\"/site/upload\" enctype=\"multipart/form-data\">\
         <label for=\"attachment\">Attachment</label>\
         <input type=\"file\" id=\"attachment\" name=\"attachment\">\
         <button id=\"upload-button\" type=\"submit\">Upload</button></form>\
         <h2>Note</h2><polaris-widget id=\"widget\"></polaris-widget>\
         <p id=\"theme\">Theme: unknown</p>\
         <button id=\"dark\" type=\"button\">Use dark theme</button>\
         <div id=\"more\"><p id=\"more-status\">Nothing more yet</p></div>\
         <iframe id=\"confirm-frame\" title=\"Confirmation\" src=\"/site/frame\"></iframe>\
         <iframe id=\"card-frame\" title=\"Payment\" src=\"http://{}/card\"></iframe>",
        esc(&status),
        s.card_addr
    );
    body.push_str(SITE_SCRIPT);
    site_page("New post", who, &body)
}

fn site_post_page(who: Option<&str>, post: &SitePost) -> String {
    site_page(
        "Published",
        who,
        &format!(
            "<h1>Published</h1><p id=\"status\" role=\"status\">Published #{}</p><dl>\
             <dt>Title</dt><dd id=\"saved-title\">{}</dd>\
             <dt>Body</dt><dd id=\"saved-body\">{}</dd>\
             <dt>Category</dt><dd id=\"saved-category\">{}</dd>\
             <dt>Urgent</dt><dd id=\"saved-urgent\">{}</dd>\
             <dt>Visibility</dt><dd id=\"saved-visibility\">{}</dd>\
             <dt>Author</dt><dd id=\"saved-author\">{}</dd></dl>\
             <p><a id=\"new\" href=\"/site\">New post</a></p>",
            post.n,
            esc(&post.title),
            esc(&post.body),
            esc(&post.category),
            if post.urgent { "yes" } else { "no" },
            esc(&post.visibility),
            esc(post.author.as_deref().unwrap_or("anonymous")),
        ),
    )
}

/// The boundary of a `multipart/form-data` content type.
fn multipart_boundary(content_type: &str) -> Option<String> {
    let (mime, params) = content_type.split_once(';')?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let b = header_params(params)
        .into_iter()
        .find(|(k, _)| k == "boundary")?
        .1;
    // RFC 2046: 1 to 70 characters.
    (!b.is_empty() && b.len() <= 70).then_some(b)
}

/// `; key=value; key="quoted value"` into lowercase keys and values. As browsers write form
/// data, a quoted value ends at the next `"` (they percent-encode quotes in file names).
fn header_params(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ';' || c.is_ascii_whitespace());
        if rest.is_empty() {
            return out;
        }
        let Some(eq) = rest.find('=') else {
            return out;
        };
        if let Some(semi) = rest[..eq].find(';') {
            // A parameter without a value: skip it.
            rest = &rest[semi..];
            continue;
        }
        let key = rest[..eq].trim().to_ascii_lowercase();
        rest = &rest[eq + 1..];
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let Some(end) = quoted.find('"') else {
                return out;
            };
            let v = &quoted[..end];
            rest = &quoted[end + 1..];
            v
        } else {
            let end = rest.find(';').unwrap_or(rest.len());
            let v = rest[..end].trim();
            rest = &rest[end..];
            v
        };
        out.push((key, value.to_owned()));
    }
}

/// One part of a `multipart/form-data` body.
struct Part<'a> {
    /// The form field's name.
    name: String,
    /// The file name, for a file part.
    filename: Option<String>,
    content: &'a [u8],
}

/// A `multipart/form-data` body into its parts; `None` if it is not well formed.
fn parse_multipart<'a>(body: &'a [u8], boundary: &str) -> Option<Vec<Part<'a>>> {
    use memchr::memmem;
    let delim = format!("\r\n--{boundary}");
    let delim = delim.as_bytes();
    // The first delimiter may open the body (no CRLF before it) or follow a preamble.
    let mut pos = if body.starts_with(&delim[2..]) {
        delim.len() - 2
    } else {
        memmem::find(body, delim)? + delim.len()
    };
    let mut parts = Vec::new();
    loop {
        let rest = &body[pos..];
        if rest.starts_with(b"--") {
            return Some(parts);
        }
        // Transport padding (spaces, tabs) may follow a delimiter before its CRLF.
        let pad = rest
            .iter()
            .take_while(|b| **b == b' ' || **b == b'\t')
            .count();
        let rest = rest[pad..].strip_prefix(b"\r\n")?;
        let head_len = memmem::find(rest, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&rest[..head_len]);
        let content_at = head_len + 4;
        let content_len = memmem::find(&rest[content_at..], delim)?;
        let (name, filename) = disposition(&head)?;
        parts.push(Part {
            name,
            filename,
            content: &rest[content_at..content_at + content_len],
        });
        pos += pad + 2 + content_at + content_len + delim.len();
    }
}

/// A part's field name and file name, from its `Content-Disposition: form-data` header.
fn disposition(head: &str) -> Option<(String, Option<String>)> {
    let value = head.split("\r\n").find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-disposition")
            .then_some(v)
    })?;
    let (kind, params) = value.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("form-data") {
        return None;
    }
    let params = header_params(params);
    let get = |k: &str| {
        params
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    Some((get("name")?, get("filename")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode() {
        let f = parse_form("title=Hello+world%21&body=a%26b%3Dc&x=%zz&empty=");
        assert_eq!(field(&f, "title"), Some("Hello world!"));
        assert_eq!(field(&f, "body"), Some("a&b=c"));
        assert_eq!(field(&f, "x"), Some("%zz"));
        assert_eq!(field(&f, "empty"), Some(""));
        assert_eq!(decode("%E2%9C%93"), "✓");
        assert_eq!(decode("50%"), "50%");
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn multipart_boundaries() {
        assert_eq!(
            multipart_boundary("multipart/form-data; boundary=----WebKitFormBoundaryAb1"),
            Some("----WebKitFormBoundaryAb1".to_owned())
        );
        assert_eq!(
            multipart_boundary("Multipart/Form-Data; charset=utf-8; Boundary=\"a b\""),
            Some("a b".to_owned())
        );
        assert_eq!(multipart_boundary("multipart/form-data"), None);
        assert_eq!(multipart_boundary("multipart/form-data; boundary="), None);
        assert_eq!(multipart_boundary("text/plain; boundary=x"), None);
        assert_eq!(
            multipart_boundary(&format!("multipart/form-data; boundary={}", "x".repeat(71))),
            None
        );
    }

    #[test]
    fn multipart_parts() {
        let body = b"preamble\r\n--XY\r\n\
Content-Disposition: form-data; name=\"title\"\r\n\r\n\
Hi\r\n--XY  \r\n\
Content-Disposition: form-data; name=\"attachment\"; filename=\"a;b=c.txt\"\r\n\
Content-Type: text/plain\r\n\r\n\
line\r\n--X not the end\r\n\r\n--XY\r\n\
Content-Disposition: form-data; name=\"empty\"; filename=\"\"\r\n\r\n\
\r\n--XY--\r\n";
        let parts = parse_multipart(body, "XY").expect("well formed");
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].name, "title");
        assert_eq!(parts[0].filename, None);
        assert_eq!(parts[0].content, b"Hi");
        assert_eq!(parts[1].name, "attachment");
        assert_eq!(parts[1].filename.as_deref(), Some("a;b=c.txt"));
        assert_eq!(parts[1].content, b"line\r\n--X not the end\r\n");
        assert_eq!(parts[2].filename.as_deref(), Some(""));
        assert_eq!(parts[2].content, b"");

        // Broken bodies are refused, never a panic.
        for bad in [
            &b""[..],
            b"--XY",
            b"--XY\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end",
            b"--XY\r\nContent-Type: text/plain\r\n\r\nx\r\n--XY--",
            b"--XY\r\n\r\n\r\n--XY--",
            b"--XYZ\r\n",
        ] {
            assert!(parse_multipart(bad, "XY").is_none(), "{bad:?}");
        }
    }

    #[test]
    fn params_tolerate_odd_input() {
        assert_eq!(
            header_params("; name=\"a\"; flag; filename=\"x.txt\""),
            vec![
                ("name".to_owned(), "a".to_owned()),
                ("filename".to_owned(), "x.txt".to_owned())
            ]
        );
        assert_eq!(header_params("; name=\"unterminated"), vec![]);
        assert_eq!(header_params("novalue"), vec![]);
    }
}
