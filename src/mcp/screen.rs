//! The line screen in front of rmcp: every line read from stdin gets exactly one answer, so
//! hostile or broken input (invalid UTF-8, malformed JSON, a `tools/call` without `name`) is
//! answered here with the JSON-RPC error and never reaches rmcp; and the stdout writer that
//! merges both answer streams a whole line at a time.

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
pub(super) fn screen_line(line: &[u8]) -> Screened {
    let Ok(text) = std::str::from_utf8(line) else {
        return Screened::Answer(rpc_error(
            Value::Null,
            PARSE_ERROR,
            "Parse error: the line is not valid UTF-8; send one JSON-RPC message per line",
        ));
    };
    if text.trim().is_empty() {
        return Screened::Answer(rpc_error(
            Value::Null,
            PARSE_ERROR,
            "Parse error: empty line; send one JSON-RPC message per line",
        ));
    }
    let message: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Screened::Answer(rpc_error(
                Value::Null,
                PARSE_ERROR,
                format!("Parse error: {e}; send one JSON-RPC message per line"),
            ))
        }
    };
    let Value::Object(fields) = &message else {
        return Screened::Answer(rpc_error(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a message must be a JSON object (batches are not supported)",
        ));
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
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    if id.is_some() && echo.is_null() {
        return invalid("\"id\" must be a string or an integer");
    }
    let Some(method) = fields.get("method") else {
        // A response to a request of ours, which rmcp matches; anything else is no message.
        if id.is_some() && (fields.contains_key("result") || fields.contains_key("error")) {
            return Screened::Forward;
        }
        return invalid(
            "a message needs a \"method\" (or, as a response, \"result\" or \"error\")",
        );
    };
    let Some(method) = method.as_str() else {
        return invalid("\"method\" must be a string");
    };
    if id.is_none() {
        // A notification: never answered, whatever it says.
        return Screened::Forward;
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
            return Screened::Answer(rpc_error(
                echo,
                INVALID_PARAMS,
                format!("Invalid params: {problem}"),
            ));
        }
    }
    Screened::Forward
}

/// Reads stdin a line at a time: forwards well-formed messages to rmcp and sends the answer
/// of every other line to the stdout writer. Ends at the client's EOF, which rmcp then sees.
pub(super) async fn read_stdin(
    mut to_rmcp: tokio::io::DuplexStream,
    answers: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) {
    use tokio::io::AsyncWriteExt;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let screened =
            match crate::protocol::read_frame(&mut stdin, &mut line, MAX_MCP_LINE_BYTES).await {
                Ok(crate::protocol::FrameRead::Frame | crate::protocol::FrameRead::Partial) => {
                    screen_line(&line)
                }
                Ok(crate::protocol::FrameRead::TooLarge) => Screened::Answer(rpc_error(
                    Value::Null,
                    PARSE_ERROR,
                    format!("Parse error: the line is longer than {MAX_MCP_LINE_BYTES} bytes"),
                )),
                Ok(crate::protocol::FrameRead::Eof) => break,
                Err(e) => {
                    tracing::warn!("reading stdin failed: {e}");
                    break;
                }
            };
        match screened {
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

/// Writes rmcp's lines and the screen's answers to stdout, each line whole, until both end.
pub(super) async fn write_stdout(
    from_rmcp: tokio::io::DuplexStream,
    mut answers: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
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
