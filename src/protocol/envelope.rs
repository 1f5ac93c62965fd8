//! The envelope of a request frame (`id`, `method`, `params`) and the refusals of frames that
//! are not one.

use serde::Deserialize;
use serde_json::Value;

use super::error::{ErrorBody, ErrorCode};
use super::id::validate_id;
use super::strict::check_strict;

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

/// A well-formed envelope read straight from the frame: `id` and `method` borrowed (plain
/// strings without escapes), no other field, each field once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainEnvelope<'a> {
    id: &'a str,
    method: &'a str,
    #[serde(default)]
    params: Option<Value>,
}

/// Parses one frame (without its newline) into an envelope, or the refusal to send for it.
///
/// A frame with a repeated key or nested deeper than 64 levels is refused first
/// ([`check_strict`]): the JSON value built below would keep only the last of two equal keys.
///
/// A well-formed envelope is read as a `PlainEnvelope`, which builds a JSON value only for
/// the params; anything else goes through `parse_envelope_general`, which alone writes the
/// error messages, so every refusal reads the same whichever way the frame was read.
pub fn parse_envelope(frame: &[u8]) -> Result<Envelope, FrameError> {
    check_strict(frame).map_err(|e| FrameError::bad(e.id, e.message))?;
    if let Ok(plain) = serde_json::from_slice::<PlainEnvelope<'_>>(frame) {
        let params = match plain.params {
            None => Some(Value::Object(Default::default())),
            Some(p @ Value::Object(_)) => Some(p),
            Some(_) => None,
        };
        if let (Some(params), Ok(())) = (params, validate_id(plain.id)) {
            return Ok(Envelope {
                id: plain.id.to_owned(),
                method: plain.method.to_owned(),
                params,
            });
        }
    }
    parse_envelope_general(frame)
}

/// The general envelope parser: builds the frame's JSON value and explains what is wrong.
fn parse_envelope_general(frame: &[u8]) -> Result<Envelope, FrameError> {
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

    use crate::protocol::test_frames::any_json;

    proptest! {
        /// The direct envelope path accepts exactly what the general one accepts, with the
        /// same result, and leaves every refusal to it: frames built from envelope-like
        /// fields (valid, escaped, duplicated, mistyped or unknown), plus raw bytes.
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
                .and_then(|()| parse_envelope_general(&frame));
            prop_assert_eq!(show(parse_envelope(&frame)), show(general));
        }
    }
}
