//! The line screen in front of rmcp: every line read from stdin gets exactly one answer, so
//! hostile or broken input (invalid UTF-8, malformed JSON, a `tools/call` without `name`) is
//! answered here with the JSON-RPC error and never reaches rmcp; and the stdout writer that
//! merges both answer streams a whole line at a time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// Room in each in-process pipe between the line screen and rmcp.
pub(super) const PIPE_BYTES: usize = 256 * 1024;

/// The longest line the front reads; a longer one is answered `-32700` and skipped.
pub const MAX_MCP_LINE_BYTES: usize = 8 * 1024 * 1024;

/// What to do with one line from the MCP client.
#[derive(Debug, PartialEq)]
pub(super) enum Screened {
    /// A well-formed message: rmcp reads it (and answers it if it is a request).
    Forward,
    /// Answered here with this JSON-RPC error line; rmcp never sees it.
    Answer(Value),
    /// A notification or response before the lifecycle opened: no answer is owed, and rmcp
    /// would end the whole session on it, so it is logged and dropped.
    Drop,
}

/// What a forwarded line means for the ids in flight.
#[derive(Debug, PartialEq)]
pub(super) enum Track {
    /// Nothing: a notification, a response, or a line answered here.
    Nothing,
    /// A request with this id: in flight until rmcp answers it.
    Request(Value),
    /// `notifications/cancelled` for this id: rmcp answers that request no more.
    Cancelled(Value),
}

/// The JSON-RPC ids of the requests rmcp has read and not yet answered. rmcp keeps one entry
/// per id, so a second request with an id still in flight would run and its answer (or the
/// first one's) be dropped: three `tools/call`s with one id executed three times and got one
/// answer. A line reusing such an id is answered here with an error instead and never runs;
/// an id is free again once its answer is on its way to the client (MCP allows reusing it).
#[derive(Clone, Debug, Default)]
pub(super) struct InFlight(Arc<Mutex<HashSet<String>>>);

impl InFlight {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `id` in flight; `false` when it already is.
    pub(super) fn begin(&self, id: &Value) -> bool {
        self.ids().insert(id.to_string())
    }

    /// `id` is answered (or cancelled): free for another request.
    pub(super) fn end(&self, id: &Value) {
        self.ids().remove(&id.to_string());
    }

    /// The answer to a request whose id is in flight: nothing of it was done.
    fn refusal(id: Value) -> Value {
        rpc_error(
            id.clone(),
            INVALID_REQUEST,
            format!(
                "Invalid Request: id {id} belongs to a request still in flight, so this line was not run (nothing was executed for it). Give each request an id of its own; an id may be reused once its answer has arrived"
            ),
        )
    }

    /// Frees the id of an rmcp line that answers a request, before the line is written (so a
    /// client that reuses the id after reading the answer is never refused).
    fn answered(&self, line: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Head {
            id: Option<Value>,
            method: Option<serde::de::IgnoredAny>,
        }
        if let Ok(Head {
            id: Some(id),
            method: None,
        }) = serde_json::from_slice::<Head>(line)
        {
            self.end(&id);
        }
    }
}

/// A JSON-RPC error response.
pub(super) fn rpc_error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// JSON-RPC's parse error.
pub(super) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's invalid request.
pub(super) const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's invalid params.
pub(super) const INVALID_PARAMS: i64 = -32602;

/// Decides what one line (without its newline) gets: a parse error for what is not JSON, an
/// invalid-request error for what is not a JSON-RPC message, invalid params for a
/// `tools/call` without a string `name` or with non-object `arguments`; everything else goes
/// to rmcp, which answers every request it reads (its handshake, the methods it knows, and
/// -32601 for the rest).
#[cfg_attr(not(test), allow(dead_code))]
pub(super) fn screen_line(line: &[u8]) -> Screened {
    screen(line).0
}

/// [`screen_line`], and what the line means for the ids in flight.
pub(super) fn screen(line: &[u8]) -> (Screened, Track) {
    let screened = |s: Screened| (s, Track::Nothing);
    let Ok(text) = std::str::from_utf8(line) else {
        return screened(Screened::Answer(rpc_error(
            Value::Null,
            PARSE_ERROR,
            "Parse error: the line is not valid UTF-8; send one JSON-RPC message per line",
        )));
    };
    if text.trim().is_empty() {
        return screened(Screened::Answer(rpc_error(
            Value::Null,
            PARSE_ERROR,
            "Parse error: empty line; send one JSON-RPC message per line",
        )));
    }
    let message: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return screened(Screened::Answer(rpc_error(
                Value::Null,
                PARSE_ERROR,
                format!("Parse error: {e}; send one JSON-RPC message per line"),
            )))
        }
    };
    let Value::Object(fields) = &message else {
        return screened(Screened::Answer(rpc_error(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a message must be a JSON object (batches are not supported)",
        )));
    };
    // An id this front can echo: a string or an integer; anything else is answered with null.
    let id = fields.get("id").cloned();
    let echo = match &id {
        Some(v @ Value::String(_)) => v.clone(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n.clone()),
        _ => Value::Null,
    };
    let invalid = |why: &str| {
        Screened::Answer(rpc_error(
            echo.clone(),
            INVALID_REQUEST,
            format!("Invalid Request: {why}"),
        ))
    };
    if fields.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return screened(invalid("\"jsonrpc\" must be \"2.0\""));
    }
    if id.is_some() && echo.is_null() {
        return screened(invalid("\"id\" must be a string or an integer"));
    }
    let Some(method) = fields.get("method") else {
        // A response to a request of ours, which rmcp matches; anything else is no message.
        if id.is_some() && (fields.contains_key("result") || fields.contains_key("error")) {
            return screened(Screened::Forward);
        }
        return screened(invalid(
            "a message needs a \"method\" (or, as a response, \"result\" or \"error\")",
        ));
    };
    let Some(method) = method.as_str() else {
        return screened(invalid("\"method\" must be a string"));
    };
    if id.is_none() {
        // A notification: never answered, whatever it says.
        if method == "notifications/cancelled" {
            if let Some(cancelled) = fields.get("params").and_then(|p| p.get("requestId")) {
                return (Screened::Forward, Track::Cancelled(cancelled.clone()));
            }
        }
        return screened(Screened::Forward);
    }
    if method == "tools/call" {
        let problem = match fields.get("params") {
            Some(Value::Object(params)) => match (params.get("name"), params.get("arguments")) {
                (Some(Value::String(_)), None | Some(Value::Null) | Some(Value::Object(_))) => None,
                (Some(Value::String(_)), Some(_)) => Some("\"arguments\" must be an object"),
                (None, _) => Some("\"name\" is required: the tool to call (see tools/list)"),
                (Some(_), _) => {
                    Some("\"name\" must be a string: the tool to call (see tools/list)")
                }
            },
            _ => Some("tools/call needs params {\"name\", \"arguments\"}"),
        };
        if let Some(problem) = problem {
            return screened(Screened::Answer(rpc_error(
                echo,
                INVALID_PARAMS,
                format!("Invalid params: {problem}"),
            )));
        }
    }
    (Screened::Forward, Track::Request(echo))
}

/// Whether the MCP lifecycle has opened: an `initialize` was read, or a request carrying
/// its own `_meta` (the self-contained requests of protocol 2026-07-28). Before that, rmcp
/// answers a plain request with an invalid-params error about `_meta` fields the client never
/// heard of, and ends the session on a notification; the screen answers and drops those
/// instead.
#[derive(Debug, Default)]
pub(super) struct Lifecycle {
    open: bool,
}

impl Lifecycle {
    /// What a line that [`screen`] would forward gets before the lifecycle opens (it opens on
    /// the way); `screened` unchanged once it is open.
    pub(super) fn admit(&mut self, line: &[u8], screened: Screened) -> Screened {
        if self.open || screened != Screened::Forward {
            return screened;
        }
        #[derive(serde::Deserialize)]
        struct Params {
            #[serde(rename = "_meta")]
            meta: Option<serde::de::IgnoredAny>,
        }
        #[derive(serde::Deserialize)]
        struct Head {
            id: Option<Value>,
            method: Option<String>,
            params: Option<Params>,
        }
        let Ok(head) = serde_json::from_slice::<Head>(line) else {
            // A request whose params are not an object: rmcp answers it as it would later.
            return screened;
        };
        let (Some(id), Some(method)) = (head.id, head.method) else {
            tracing::warn!("dropped a notification or response that came before initialize");
            return Screened::Drop;
        };
        let inline = head.params.is_some_and(|p| p.meta.is_some());
        match method.as_str() {
            "initialize" => self.open = true,
            "ping" | "server/discover" => {}
            _ if inline => self.open = true,
            _ => {
                return Screened::Answer(rpc_error(
                    id,
                    INVALID_REQUEST,
                    format!(
                        "Invalid Request: {method} came before initialize, so it was not run (nothing was executed). Send initialize first (protocol 2025-11-25 and older), then notifications/initialized; or, on protocol 2026-07-28, give every request its params._meta with the protocol version and the client's capabilities (server/discover lists the versions)"
                    ),
                ))
            }
        }
        Screened::Forward
    }
}

/// What reading one line from the client gave.
#[derive(Debug, PartialEq)]
pub(super) enum LineRead {
    /// A whole line (its `\n`, and a `\r` before it, removed) or the last, unterminated one.
    Line,
    /// A line longer than the limit, skipped to its end: it gets one answer, and the line after
    /// it is read whole.
    TooLong,
    /// The client closed stdin.
    Eof,
}

/// Reads one line of at most `max` bytes into `buf` (cleared first). A longer line is skipped
/// through its `\n` without being buffered, so the next read starts at the next line: one
/// answer for the long line, and the call sent after it is not lost.
pub(super) async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    use tokio::io::AsyncBufReadExt;
    buf.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => LineRead::TooLong,
                (false, true) => LineRead::Eof,
                (false, false) => LineRead::Line,
            });
        }
        let (piece, ended) = match memchr::memchr(b'\n', available) {
            Some(pos) => (&available[..pos], pos + 1),
            None => (available, 0),
        };
        let taken = if ended > 0 { ended } else { piece.len() };
        // One byte past `max` may still be the `\r` of a CRLF line.
        if !too_long && buf.len() + piece.len() > max.saturating_add(1) {
            too_long = true;
            buf.clear();
        }
        if !too_long {
            buf.extend_from_slice(piece);
        }
        reader.consume(taken);
        if ended > 0 {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            if too_long || buf.len() > max {
                buf.clear();
                return Ok(LineRead::TooLong);
            }
            return Ok(LineRead::Line);
        }
    }
}

/// Reads stdin a line at a time: forwards well-formed messages to rmcp and sends the answer
/// of every other line (and of a request whose id is still in flight) to the stdout writer.
/// Ends at the client's EOF, which rmcp then sees.
pub(super) async fn read_stdin(
    mut to_rmcp: tokio::io::DuplexStream,
    answers: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    in_flight: InFlight,
) {
    use tokio::io::AsyncWriteExt;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    let mut lifecycle = Lifecycle::default();
    loop {
        let screened = match read_line(&mut stdin, &mut line, MAX_MCP_LINE_BYTES).await {
            Ok(LineRead::Line) => match screen(&line) {
                (Screened::Forward, Track::Request(id)) if !in_flight.begin(&id) => {
                    Screened::Answer(InFlight::refusal(id))
                }
                (Screened::Forward, Track::Request(id)) => {
                    let admitted = lifecycle.admit(&line, Screened::Forward);
                    if admitted != Screened::Forward {
                        in_flight.end(&id);
                    }
                    admitted
                }
                (Screened::Forward, Track::Cancelled(id)) => {
                    in_flight.end(&id);
                    lifecycle.admit(&line, Screened::Forward)
                }
                (screened, _) => lifecycle.admit(&line, screened),
            },
            Ok(LineRead::TooLong) => Screened::Answer(rpc_error(
                Value::Null,
                PARSE_ERROR,
                format!("Parse error: the line is longer than {MAX_MCP_LINE_BYTES} bytes, so it was skipped (nothing of it was run); send one JSON-RPC message per line, each shorter"),
            )),
            Ok(LineRead::Eof) => break,
            Err(e) => {
                tracing::warn!("reading stdin failed: {e}");
                break;
            }
        };
        match screened {
            Screened::Drop => {}
            Screened::Forward => {
                line.push(b'\n');
                if to_rmcp.write_all(&line).await.is_err() {
                    break;
                }
            }
            Screened::Answer(answer) => {
                let mut out = serde_json::to_vec(&answer).expect("an error response serialises");
                out.push(b'\n');
                if answers.send(out).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_rmcp.shutdown().await;
}

/// Writes rmcp's lines and the screen's answers to stdout, each line whole, until both end;
/// frees the id of each answer of rmcp's before writing it.
pub(super) async fn write_stdout(
    from_rmcp: tokio::io::DuplexStream,
    mut answers: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    in_flight: InFlight,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stdout = tokio::io::stdout();
    let mut from_rmcp = tokio::io::BufReader::new(from_rmcp);
    let mut rmcp_open = true;
    let mut answers_open = true;
    // rmcp's line being read: kept across iterations, as a cancelled `read_until` leaves what
    // it read so far in it.
    let mut rmcp_line = Vec::new();
    while rmcp_open || answers_open {
        // The screen's answers first: one is queued before the next line reaches rmcp, so a
        // client that waits for each answer reads them in the order of its lines.
        let line = tokio::select! {
            biased;
            answer = answers.recv(), if answers_open => match answer {
                Some(a) => a,
                None => {
                    answers_open = false;
                    continue;
                }
            },
            read = from_rmcp.read_until(b'\n', &mut rmcp_line), if rmcp_open => {
                if !matches!(read, Ok(n) if n > 0) {
                    rmcp_open = false;
                }
                in_flight.answered(&rmcp_line);
                std::mem::take(&mut rmcp_line)
            }
        };
        if line.is_empty() {
            continue;
        }
        if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}
