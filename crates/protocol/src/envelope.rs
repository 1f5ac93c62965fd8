//! The envelope of a request frame (`id`, `method`, `params`) and the refusals of frames that
//! are not one.

use serde_json::Value;

use super::error::{ErrorBody, ErrorCode};
use super::id::validate_id;
use super::strict::{parse_strict, StrictRefusal};

/// The envelope of a request frame, before the method's params are checked: what the general
/// path, and the operator's socket, dispatch on.
#[derive(Debug)]
pub struct Envelope {
    /// The caller's request ID.
    pub id: String,
    /// The method name as sent.
    pub method: String,
    /// The params object (`{}` when absent).
    pub params: Value,
}

/// Why a frame could not become an [`Envelope`]: the error to send, and the `id` if it was read.
#[derive(Debug)]
pub struct FrameError {
    /// The request's `id`, when it could be read.
    pub id: Option<String>,
    /// The error to reply with.
    pub error: ErrorBody,
}

impl FrameError {
    fn bad(id: Option<String>, message: impl Into<String>) -> FrameError {
        FrameError {
            id,
            error: ErrorBody::new(ErrorCode::BadRequest, message),
        }
    }
}

/// Parses one frame (without its newline) into an envelope, or the refusal to send for it.
///
/// The frame is read once ([`parse_strict`]): a repeated key or nesting deeper than 64 levels
/// is refused as it is met (a JSON value keeps only the last of two equal keys), then what is
/// not JSON, not an object, or not an envelope. Every refusal of a frame is written here.
pub fn parse_envelope(frame: &[u8]) -> Result<Envelope, FrameError> {
    let value = match parse_strict(frame) {
        Ok(value) => value,
        Err(StrictRefusal::Strict(e)) => return Err(FrameError::bad(e.id, e.message)),
        Err(StrictRefusal::NotJson(e)) => return Err(not_json(frame, &e)),
    };
    envelope_of(value)
}

/// The refusal of a frame that is not JSON: not UTF-8 first, then serde's own words.
fn not_json(frame: &[u8], e: &serde_json::Error) -> FrameError {
    match std::str::from_utf8(frame) {
        Err(e) => FrameError::bad(
            None,
            format!("the frame is not valid UTF-8 ({e}); send one UTF-8 JSON object per line"),
        ),
        Ok(_) => FrameError::bad(
            None,
            format!("the frame is not JSON ({e}); send one JSON object per line"),
        ),
    }
}

/// The envelope in a frame's JSON value, or what is wrong with it.
fn envelope_of(value: Value) -> Result<Envelope, FrameError> {
    let Value::Object(mut obj) = value else {
        return Err(FrameError::bad(
            None,
            "the frame is not a JSON object; send {\"id\":…,\"method\":…,\"params\":{…}}",
        ));
    };
    let id = match obj.remove("id") {
        Some(Value::String(s)) => match validate_id(&s) {
            Ok(()) => s,
            Err(e) => return Err(FrameError::bad(None, format!("bad id: {e}"))),
        },
        Some(other) => {
            return Err(FrameError::bad(
                None,
                format!("bad id: it must be a string, got {}", json_type(&other)),
            ))
        }
        None => {
            return Err(FrameError::bad(
                None,
                "the request has no id; give each request a fresh UUID",
            ))
        }
    };
    let method = match obj.remove("method") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(FrameError::bad(
                Some(id),
                format!("method must be a string, got {}", json_type(&other)),
            ))
        }
        None => {
            return Err(FrameError::bad(
                Some(id),
                "the request has no method; call tools.list to see them",
            ))
        }
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p,
        Some(other) => {
            return Err(FrameError::bad(
                Some(id),
                format!("params must be an object, got {}", json_type(&other)),
            ))
        }
    };
    if let Some(field) = obj.keys().next() {
        return Err(FrameError::bad(
            Some(id),
            format!(
                "unknown field `{field}` in the request; only id, method and params are allowed"
            ),
        ));
    }
    Ok(Envelope { id, method, params })
}

/// A JSON type's name for error messages ("got an array"), so refusals name what was sent.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    use crate::check_strict;
    use crate::test_frames::any_json;

    /// How a frame was read before it was read once: `check_strict`'s walk, then the text
    /// parsed into a JSON value.
    fn two_passes(frame: &[u8]) -> Result<Envelope, FrameError> {
        let text = std::str::from_utf8(frame).map_err(|e| {
            FrameError::bad(
                None,
                format!("the frame is not valid UTF-8 ({e}); send one UTF-8 JSON object per line"),
            )
        })?;
        let value: Value = serde_json::from_str(text).map_err(|e| {
            FrameError::bad(
                None,
                format!("the frame is not JSON ({e}); send one JSON object per line"),
            )
        })?;
        envelope_of(value)
    }

    proptest! {
        /// Reading a frame once answers exactly as the strict walk followed by serde's parse
        /// did: the same envelope, or the same refusal with the same `id`, for frames built
        /// from envelope-like fields (valid, escaped, duplicated, mistyped or unknown), nested
        /// values, plus raw bytes.
        #[test]
        fn both_envelope_paths_agree(
            fields in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::strategy::Just("id".to_owned()),
                        proptest::strategy::Just("method".to_owned()),
                        proptest::strategy::Just("params".to_owned()),
                        proptest::strategy::Just("i\\u0064".to_owned()),
                        "[a-z]{1,3}",
                    ],
                    proptest::prop_oneof![
                        any_json(),
                        "[A-Za-z0-9._:-]{1,8}".prop_map(Value::String),
                        proptest::strategy::Just(json!("a\"b")),
                        proptest::strategy::Just(json!({"taskId": "t", "target": "#title"})),
                    ],
                ),
                0..5,
            ),
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
            use_raw in proptest::prelude::any::<bool>(),
        ) {
            use proptest::prelude::*;
            let frame = if use_raw {
                raw
            } else {
                let body: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("\"{k}\":{v}"))
                    .collect();
                format!("{{{}}}", body.join(",")).into_bytes()
            };
            let show = |r: Result<Envelope, FrameError>| match r {
                Ok(e) => format!("ok {} {} {}", e.id, e.method, e.params),
                Err(e) => format!("err {:?} {}", e.id, e.error.message),
            };
            let general = check_strict(&frame)
                .map_err(|e| FrameError::bad(e.id, e.message))
                .and_then(|()| two_passes(&frame));
            prop_assert_eq!(show(parse_envelope(&frame)), show(general));
        }
    }
}
