//! Network evidence (SPEC §16): what a page sent while an action ran, and how the server
//! answered each request. The one wire shape of it: the Chromium executor writes it; action
//! replies (`evidence`), pending outcomes, `task.verifyOutcome`, the journal (inside the stored
//! reply and the task's pending outcome), `receipts.list`, the event feed, the MCP front and the
//! console read it.
//!
//! Evidence is what the browser saw on the wire, never what the business did: a `2xx` is the
//! server's word that it answered, and a request listed as sent may or may not have been acted
//! on. It never changes how an action is classified.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// The most requests one action's evidence lists unless `--evidence-max-requests` says
/// otherwise; those beyond are counted in [`NetworkEvidence::unlisted`].
pub const DEFAULT_EVIDENCE_REQUESTS: usize = 64;

/// The highest `--evidence-max-requests` a host accepts: the evidence is stored with every
/// receipt and shown in every `receipts.list` page: with URLs bounded by [`MAX_EVIDENCE_URL`],
/// one action's evidence stays under about 600 KiB (some 80 KiB for 256 requests of ordinary
/// URLs).
pub const MAX_EVIDENCE_REQUESTS: usize = 256;

/// Reads `--evidence-max-requests`: a count from 1 to [`MAX_EVIDENCE_REQUESTS`]. The message
/// of a refusal says what to give instead.
pub fn parse_evidence_max_requests(text: &str) -> Result<usize, String> {
    let n: usize = text.trim().parse().map_err(|_| {
        format!("`{text}` is not a count; give how many requests each action's evidence lists (1 to {MAX_EVIDENCE_REQUESTS}, default {DEFAULT_EVIDENCE_REQUESTS})")
    })?;
    match n {
        0 => Err(format!(
            "0 would list no request at all; to stop watching the network use --no-network-evidence, else give 1 to {MAX_EVIDENCE_REQUESTS}"
        )),
        n if n > MAX_EVIDENCE_REQUESTS => Err(format!(
            "{n} is more than {MAX_EVIDENCE_REQUESTS}, the most each action's evidence may list (it is stored with every receipt); the rest are counted in `unlisted`"
        )),
        n => Ok(n),
    }
}

/// What one action's page sent: every request other than `GET`/`HEAD`/`OPTIONS`, and every
/// navigation, from the first input event dispatched until the reply (for an uncertain action,
/// until it is verified, acknowledged or its task closes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkEvidence {
    /// Sends of the same method, URL and body digest more than once within the action (a
    /// double-firing handler, a page script that retries): flagged, never hidden.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub duplicate_sends: Vec<DuplicateSend>,
    /// The requests, in the order they were sent (at most `--evidence-max-requests`, default
    /// [`DEFAULT_EVIDENCE_REQUESTS`]).
    pub requests: Vec<SentRequest>,
    /// Requests sent beyond the bound: counted, not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unlisted: u64,
    /// Whether the executor still watches the page for this action (its outcome is pending):
    /// a late answer will show in a later read of it (`task.verifyOutcome`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub watching: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One request the page sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SentRequest {
    /// When the answer (or the failure) arrived, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<String>,
    /// The page's service worker answered it: this request went to the worker, not to the
    /// network. What the worker sent for it (its own `fetch`, even of the same request) is
    /// listed as requests of their own, so this one is never counted as a duplicate send.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answered_by_service_worker: bool,
    /// The request body's length in bytes: of the bytes read, or, when they could not be read
    /// (see `body_unread`), as the request's `Content-Length` declared it. Absent when neither
    /// is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_bytes: Option<u64>,
    /// The SHA-256 of the request body, hex (the body itself is never kept). Absent when the
    /// body could not be read whole: `body_unread` says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
    /// Why the body was not read whole, so it has no digest (never a silent gap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_unread: Option<BodyUnread>,
    /// The browser's own error text when the request failed (`net::ERR_CONNECTION_RESET`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `POST`, `PUT`, `DELETE`, … (`GET` only for a navigation).
    pub method: String,
    /// Whether the request loads a document into a frame (a navigation).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub navigation: bool,
    /// When the page sent it.
    pub sent_at: String,
    /// The HTTP status, `"no response"`, or how it failed.
    pub status: RequestStatus,
    /// Origin and path, each query value replaced by a short hash ([`redact_url`]).
    pub url: String,
}

/// Why a request's body has no digest in the evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BodyUnread {
    /// Larger than the browser keeps of one request's data for DevTools (1 MiB): its length
    /// is the `Content-Length` sent.
    #[serde(rename = "too large")]
    TooLarge,
    /// Made, at least in part, of files or blobs, which the browser does not hand out (it
    /// gives the other parts only): its length is the `Content-Length` sent.
    #[serde(rename = "files")]
    Files,
    /// The browser did not give it before the evidence was taken (the page went away, or it
    /// was still being read).
    #[serde(rename = "not given")]
    NotGiven,
}

impl fmt::Display for BodyUnread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BodyUnread::TooLarge => "too large",
            BodyUnread::Files => "files",
            BodyUnread::NotGiven => "not given",
        })
    }
}

impl BodyUnread {
    /// What is known of a body from the bytes the browser gave (`read`: length and digest)
    /// and the `Content-Length` it sent (`declared`): `(body_bytes, body_sha256,
    /// body_unread)`. The one place that rule lives: a digest only of the whole body, a length
    /// from the header when the bytes fall short.
    pub fn settle(
        read: Option<(u64, &str)>,
        declared: Option<u64>,
    ) -> (Option<u64>, Option<String>, Option<BodyUnread>) {
        /// Chromium keeps at most this much of one request's data for DevTools.
        const KEPT: u64 = 1024 * 1024;
        match (read, declared) {
            (Some((n, digest)), None) => (Some(n), Some(digest.to_owned()), None),
            (Some((n, digest)), Some(d)) if d == n => (Some(n), Some(digest.to_owned()), None),
            (Some(_), Some(d)) => (Some(d), None, Some(BodyUnread::Files)),
            (None, Some(d)) if d > KEPT => (Some(d), None, Some(BodyUnread::TooLarge)),
            (None, d) => (d, None, Some(BodyUnread::NotGiven)),
        }
    }
}

/// How a request was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestStatus {
    /// The server answered with this HTTP status (a redirect included).
    Http(u16),
    /// Sent, and no answer yet (or ever: the page went away first).
    NoResponse,
    /// The connection ended without an answer (reset, closed, an empty response).
    ConnectionReset,
    /// The browser gave the request up (the page navigated away, the renderer died, a script
    /// aborted it).
    Aborted,
    /// The browser's network stack timed out waiting.
    TimedOut,
    /// Never sent: the host blocked it (a non-public address not allowed with
    /// `--allow-origin`). Nothing reached the server.
    Blocked,
    /// Another failure, in the browser's words.
    Failed(String),
}

impl RequestStatus {
    /// The status of a failed request from the browser's error text (`net::ERR_…`) and its
    /// `canceled` flag.
    pub fn of_failure(error_text: &str, canceled: bool) -> RequestStatus {
        let e = error_text.trim_start_matches("net::");
        if e.starts_with("ERR_BLOCKED_BY_CLIENT") {
            return RequestStatus::Blocked;
        }
        if canceled || e == "ERR_ABORTED" {
            return RequestStatus::Aborted;
        }
        match e {
            "ERR_CONNECTION_RESET"
            | "ERR_CONNECTION_CLOSED"
            | "ERR_EMPTY_RESPONSE"
            | "ERR_CONNECTION_ABORTED"
            | "ERR_SOCKET_NOT_CONNECTED" => RequestStatus::ConnectionReset,
            "ERR_TIMED_OUT" | "ERR_CONNECTION_TIMED_OUT" => RequestStatus::TimedOut,
            _ => RequestStatus::Failed(error_text.to_owned()),
        }
    }

    /// Whether the server answered with a 2xx: its word that it handled the request, which
    /// says nothing of what the handling did.
    pub fn is_success(&self) -> bool {
        matches!(self, RequestStatus::Http(s) if (200..300).contains(s))
    }
}

impl fmt::Display for RequestStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestStatus::Http(s) => write!(f, "{s}"),
            RequestStatus::NoResponse => f.write_str("no response"),
            RequestStatus::ConnectionReset => f.write_str("connection reset"),
            RequestStatus::Aborted => f.write_str("aborted"),
            RequestStatus::TimedOut => f.write_str("timed out"),
            RequestStatus::Blocked => f.write_str("blocked"),
            RequestStatus::Failed(e) => f.write_str(e),
        }
    }
}

impl Serialize for RequestStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestStatus::Http(code) => s.serialize_u16(*code),
            other => s.collect_str(other),
        }
    }
}

impl<'de> Deserialize<'de> for RequestStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Code(u16),
            Text(String),
        }
        Ok(match Wire::deserialize(d)? {
            Wire::Code(c) => RequestStatus::Http(c),
            Wire::Text(t) => match t.as_str() {
                "no response" => RequestStatus::NoResponse,
                "connection reset" => RequestStatus::ConnectionReset,
                "aborted" => RequestStatus::Aborted,
                "timed out" => RequestStatus::TimedOut,
                "blocked" => RequestStatus::Blocked,
                _ => RequestStatus::Failed(t),
            },
        })
    }
}

/// A request sent more than once within one action: same method, URL and body digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DuplicateSend {
    /// The body's digest, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
    /// The method.
    pub method: String,
    /// How many times it was sent.
    pub times: u32,
    /// The URL, as listed.
    pub url: String,
}

impl NetworkEvidence {
    /// The evidence of `requests` (already bounded) and `unlisted` more, with its duplicate
    /// sends worked out: the one place that rule lives. Navigations by `GET` are not sends
    /// (loading a page twice changes nothing a server promised to keep).
    /// A request its service worker answered is not a send (the worker's own are).
    pub fn new(requests: Vec<SentRequest>, unlisted: u64, watching: bool) -> NetworkEvidence {
        let mut duplicate_sends: Vec<DuplicateSend> = Vec::new();
        // Each send's body length beside it: a body not read whole has no digest, and its
        // length (the `Content-Length` sent) stands in, so two different uploads of one URL
        // are not taken for one sent twice.
        let mut lengths: Vec<Option<u64>> = Vec::new();
        let sends = requests
            .iter()
            .filter(|r| !is_safe_method(&r.method) && !r.answered_by_service_worker);
        for r in sends {
            match duplicate_sends.iter_mut().zip(&lengths).find(|(d, n)| {
                d.method == r.method
                    && d.url == r.url
                    && d.body_sha256 == r.body_sha256
                    && **n == r.body_bytes
            }) {
                Some((d, _)) => d.times += 1,
                None => {
                    duplicate_sends.push(DuplicateSend {
                        body_sha256: r.body_sha256.clone(),
                        method: r.method.clone(),
                        times: 1,
                        url: r.url.clone(),
                    });
                    lengths.push(r.body_bytes);
                }
            }
        }
        duplicate_sends.retain(|d| d.times > 1);
        NetworkEvidence {
            duplicate_sends,
            requests,
            unlisted,
            watching,
        }
    }

    /// The evidence a stored reply body carries (`"ok":…,"result":{…}` or `"ok":false,
    /// "error":{…}`, braces left out as the book keeps it): in a success's `result.evidence`,
    /// in an error's `details.evidence`. Looks for the key before parsing anything, so a reply
    /// without evidence costs one scan.
    pub fn in_reply(body: &str) -> Option<NetworkEvidence> {
        memchr::memmem::find(body.as_bytes(), b"\"evidence\":")?;
        let v: serde_json::Value = serde_json::from_str(&format!("{{{body}}}")).ok()?;
        let e = v
            .pointer("/result/evidence")
            .or_else(|| v.pointer("/error/details/evidence"))?;
        serde_json::from_value(e.clone()).ok()
    }

    /// One line for people (logs, the console's list): `POST /api/posts 201; POST /x no
    /// response`.
    pub fn summary(&self) -> String {
        if self.requests.is_empty() {
            return "nothing sent".into();
        }
        let mut s = self
            .requests
            .iter()
            .map(|r| format!("{} {} {}", r.method, r.url, r.status))
            .collect::<Vec<_>>()
            .join("; ");
        if self.unlisted > 0 {
            s.push_str(&format!("; and {} more", self.unlisted));
        }
        if !self.duplicate_sends.is_empty() {
            s.push_str(" (duplicate sends)");
        }
        s
    }
}

/// Whether `method` is one the evidence leaves out unless it loads a document: `GET`, `HEAD`,
/// `OPTIONS` change nothing by the HTTP contract.
pub fn is_safe_method(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS")
}

/// The URL as evidence keeps it: scheme, host, port and path, user info and fragment dropped,
/// and each query value replaced by `~` and the first 8 hex digits of its SHA-256 (names kept),
/// so a token in a query string is never stored while two sends of the same URL still compare
/// equal. A URL with no `//` authority (`data:`, `about:blank`) keeps only its scheme. At most
/// [`MAX_EVIDENCE_URL`] bytes are kept ([`bound_url`]).
pub fn redact_url(url: &str) -> String {
    bound_url(redacted(url))
}

/// The longest URL one evidence entry keeps, in bytes (a page may send to a path of
/// megabytes; the evidence is stored with every receipt and listed with it).
pub const MAX_EVIDENCE_URL: usize = 2048;

/// `url` when it fits [`MAX_EVIDENCE_URL`]; else its start, `…~` and the short hash of the
/// whole, so two sends of one long URL still compare equal and two different ones do not.
fn bound_url(url: String) -> String {
    if url.len() <= MAX_EVIDENCE_URL {
        return url;
    }
    let tail = format!("…~{}", short_hash(url.as_bytes()));
    let mut cut = MAX_EVIDENCE_URL - tail.len();
    while !url.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{tail}", &url[..cut])
}

fn redacted(url: &str) -> String {
    let url = url.split('#').next().unwrap_or("");
    let Some((scheme, rest)) = url.split_once("://") else {
        return match url.split_once(':') {
            Some((scheme, _)) => format!("{scheme}:"),
            None => String::new(),
        };
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(i) => (&before_query[..i], &before_query[i..]),
        None => (before_query, "/"),
    };
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let mut out = format!("{scheme}://{host}{path}");
    if let Some(q) = query {
        out.push('?');
        for (i, pair) in q.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((name, value)) if !value.is_empty() => {
                    out.push_str(name);
                    out.push_str("=~");
                    out.push_str(&short_hash(value.as_bytes()));
                }
                _ => out.push_str(pair),
            }
        }
    }
    out
}

fn short_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// The hex SHA-256 of a request body.
pub fn body_sha256(body: &[u8]) -> String {
    Sha256::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(method: &str, url: &str, body: Option<&str>) -> SentRequest {
        SentRequest {
            answered_at: None,
            answered_by_service_worker: false,
            body_bytes: body.map(|b| b.len() as u64),
            body_sha256: body.map(|b| body_sha256(b.as_bytes())),
            body_unread: None,
            error: None,
            method: method.into(),
            navigation: false,
            sent_at: "2026-01-01T00:00:00.000Z".into(),
            status: RequestStatus::NoResponse,
            url: url.into(),
        }
    }

    #[test]
    fn urls_keep_origin_and_path_and_hash_query_values() {
        assert_eq!(
            redact_url("http://u:p@127.0.0.1:8080/a/b?token=secret&x=&flag#frag"),
            format!(
                "http://127.0.0.1:8080/a/b?token=~{}&x=&flag",
                short_hash(b"secret")
            )
        );
        assert_eq!(redact_url("https://example.com"), "https://example.com/");
        assert_eq!(redact_url("data:text/plain,hello"), "data:");
        assert!(!redact_url("http://h/p?t=secret").contains("secret"));
        let long = format!("http://h/{}", "é".repeat(5000));
        let kept = redact_url(&long);
        assert!(kept.len() <= MAX_EVIDENCE_URL, "{}", kept.len());
        assert!(
            kept.starts_with("http://h/é") && kept.contains("…~"),
            "{kept}"
        );
        assert_eq!(kept, redact_url(&long));
        assert_ne!(kept, redact_url(&format!("{long}x")));
    }

    #[test]
    fn evidence_is_found_in_stored_replies() {
        let e = NetworkEvidence::new(vec![sent("POST", "http://h/x", Some("a"))], 0, true);
        let ok = format!(
            "\"ok\":true,\"result\":{}",
            serde_json::json!({"observation": null, "evidence": e})
        );
        assert_eq!(NetworkEvidence::in_reply(&ok), Some(e.clone()));
        let err = format!(
            "\"ok\":false,\"error\":{}",
            serde_json::json!({"code": "OUTCOME_UNCERTAIN", "details": {"evidence": e}})
        );
        assert_eq!(NetworkEvidence::in_reply(&err), Some(e));
        assert_eq!(
            NetworkEvidence::in_reply("\"ok\":true,\"result\":{\"value\":\"\\\"evidence\\\":\"}"),
            None
        );
    }

    #[test]
    fn duplicates_are_the_same_method_url_and_body() {
        let e = NetworkEvidence::new(
            vec![
                sent("POST", "http://h/x", Some("a=1")),
                sent("POST", "http://h/x", Some("a=2")),
                sent("POST", "http://h/x", Some("a=1")),
                sent("GET", "http://h/", None),
                sent("GET", "http://h/", None),
            ],
            0,
            false,
        );
        assert_eq!(e.duplicate_sends.len(), 1);
        assert_eq!(e.duplicate_sends[0].times, 2);
        // Bodies without a digest compare by their length.
        let unread = |n: u64| SentRequest {
            body_bytes: Some(n),
            body_sha256: None,
            body_unread: Some(BodyUnread::Files),
            ..sent("POST", "http://h/up", None)
        };
        let uploads = NetworkEvidence::new(vec![unread(300), unread(301), unread(300)], 0, false);
        assert_eq!(uploads.duplicate_sends.len(), 1, "{uploads:?}");
        assert_eq!(uploads.duplicate_sends[0].times, 2);
        // A request its service worker answered, and the worker's send of it: sent once.
        let through = SentRequest {
            answered_by_service_worker: true,
            ..sent("POST", "http://h/x", Some("a=1"))
        };
        let once = NetworkEvidence::new(
            vec![through, sent("POST", "http://h/x", Some("a=1"))],
            0,
            false,
        );
        assert!(once.duplicate_sends.is_empty(), "{once:?}");
        assert_eq!(
            e.duplicate_sends[0].body_sha256.as_deref(),
            Some(body_sha256(b"a=1").as_str())
        );
    }

    #[test]
    fn a_body_has_a_digest_only_when_read_whole() {
        let d = body_sha256(b"abc");
        let whole = (Some(3), Some(d.clone()), None);
        assert_eq!(BodyUnread::settle(Some((3, &d)), None), whole);
        assert_eq!(BodyUnread::settle(Some((3, &d)), Some(3)), whole);
        assert_eq!(
            BodyUnread::settle(Some((204, &d)), Some(300_204)),
            (Some(300_204), None, Some(BodyUnread::Files))
        );
        assert_eq!(
            BodyUnread::settle(None, Some(2 << 20)),
            (Some(2 << 20), None, Some(BodyUnread::TooLarge))
        );
        assert_eq!(
            BodyUnread::settle(None, Some(10)),
            (Some(10), None, Some(BodyUnread::NotGiven))
        );
        assert_eq!(
            BodyUnread::settle(None, None),
            (None, None, Some(BodyUnread::NotGiven))
        );
    }

    #[test]
    fn the_wire_shape_reads_back() {
        let mut r = sent("POST", "http://h/x", Some("a=1"));
        for status in [
            RequestStatus::Http(201),
            RequestStatus::NoResponse,
            RequestStatus::ConnectionReset,
            RequestStatus::Aborted,
            RequestStatus::TimedOut,
            RequestStatus::Failed("net::ERR_NAME_NOT_RESOLVED".into()),
        ] {
            r.status = status;
            let e = NetworkEvidence::new(vec![r.clone(), r.clone()], 3, true);
            let text = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<NetworkEvidence>(&text).unwrap(), e);
        }
        r.body_unread = Some(BodyUnread::Files);
        let e = NetworkEvidence::new(vec![r.clone()], 0, false);
        let text = serde_json::to_string(&e).unwrap();
        assert!(text.contains(r#""bodyUnread":"files""#), "{text}");
        assert_eq!(serde_json::from_str::<NetworkEvidence>(&text).unwrap(), e);
        let v = serde_json::to_value(NetworkEvidence::new(vec![r], 0, false)).unwrap();
        assert_eq!(v["requests"][0]["status"], "net::ERR_NAME_NOT_RESOLVED");
        assert_eq!(serde_json::to_value(RequestStatus::Http(500)).unwrap(), 500);
        assert_eq!(
            RequestStatus::of_failure("net::ERR_EMPTY_RESPONSE", false),
            RequestStatus::ConnectionReset
        );
        assert_eq!(
            RequestStatus::of_failure("net::ERR_FAILED", true),
            RequestStatus::Aborted
        );
    }
}
