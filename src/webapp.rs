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
//! - Faults (the app-wide one from [`WebApp::set_fault`], or the form's own):
//!   [`Fault::Late`] waits, then commits, then answers (after the action's deadline, a late
//!   success); [`Fault::DropResponse`] commits, then closes the connection without an answer
//!   (the response is lost; the browser shows its error page); [`Fault::Reject`] commits
//!   nothing and answers `422` with the form again, `#status` reading
//!   `Rejected: the server refused this post; nothing was saved`.
//!
//! The server's own count ([`WebApp::commits`]) is the truth the tests compare with: the
//! executor can only ever see what the page shows.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
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
    state: Arc<AppState>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for WebApp {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl WebApp {
    /// Starts the app on 127.0.0.1 with a port of the system's choosing.
    pub async fn start() -> std::io::Result<WebApp> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(AppState {
            fault: Mutex::new(Fault::None),
            posts: Mutex::new(Vec::new()),
            committed: watch::channel(0).0,
            received: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, state.clone()));
        Ok(WebApp {
            addr,
            state,
            accept,
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
}

async fn accept_loop(listener: TcpListener, state: Arc<AppState>) {
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
            let svc = {
                let drop_conn = drop_conn.clone();
                service_fn(move |req| handle(state.clone(), drop_conn.clone(), req))
            };
            // One request per connection: a browser resends a request that a reused
            // keep-alive connection closed without answering, even a POST, which would make
            // the dropped-response fault commit twice for reasons of its own.
            let conn = http1::Builder::new()
                .keep_alive(false)
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
    req: Request<Incoming>,
) -> Result<Reply, Infallible> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
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
        (&Method::GET, "/keys") => html(StatusCode::OK, keys_page()),
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
}
