//! The direct parse path: a well-formed bridge request read straight from its frame, without
//! building a JSON value for it.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::canonical::is_canonical;
use super::command::Command;
use super::fingerprint::try_fingerprint;
use super::id::validate_id;
use super::method::Method;

/// A bridge request read straight from its frame, without building a JSON value: the shape
/// nearly every well-formed request takes, and the one the throughput budget is about.
#[derive(Debug)]
pub struct DirectRequest<'a> {
    /// The caller's request ID (already validated), borrowed from the frame.
    pub id: &'a str,
    /// The checked command.
    pub command: Command,
    /// The canonical `{method, params}`: the fingerprint the receipt keeps.
    pub request: String,
}

/// The envelope of a frame as the direct path reads it: `id` and `method` borrowed (plain
/// strings without escapes), params kept as their raw text, no other field, each field once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvelope<'a> {
    id: &'a str,
    method: &'a str,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

/// Reads a well-formed bridge request straight from its frame: the typed command from the raw
/// params text, and the fingerprint from that same text when it is already canonical.
///
/// Returns `None` for anything it does not take as is (a bad envelope, an unknown method, params
/// the command refuses, ...); the caller then goes through
/// [`parse_envelope`](super::parse_envelope) and [`Command::parse`] on a [`Value`], which alone
/// write the error messages. Whatever this returns, the general path would return the same ID,
/// command and fingerprint.
pub fn parse_request_direct<'a>(
    frame: &'a [u8],
    check_target: &dyn Fn(&str) -> Result<(), String>,
) -> Option<DirectRequest<'a>> {
    let env: RawEnvelope<'a> = serde_json::from_slice(frame).ok()?;
    validate_id(env.id).ok()?;
    let method: Method = env.method.parse().ok()?;
    let raw = env.params.map_or("{}", RawValue::get);
    if !raw.starts_with('{') {
        return None;
    }
    let command = match env.params {
        Some(params) => Command::parse(method, params, check_target).ok()?,
        None => Command::parse(method, &Value::Object(Default::default()), check_target).ok()?,
    };
    let request = if is_canonical(raw) {
        // Exactly the length written below, so the receipt's `Box<str>` needs no reallocation.
        let mut request = String::with_capacity(raw.len() + method.as_str().len() + 23);
        request.push_str("{\"method\":\"");
        request.push_str(method.as_str());
        request.push_str("\",\"params\":");
        request.push_str(raw);
        request.push('}');
        request
    } else {
        let params: Value = serde_json::from_str(raw).ok()?;
        try_fingerprint(method.as_str(), &params).ok()?
    };
    Some(DirectRequest {
        id: env.id,
        command,
        request,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::protocol::parse_envelope;
    use crate::protocol::test_frames::{self, check_target};

    /// The old way a frame became a request: envelope, method, command and fingerprint, all
    /// from a `Value`. `Err` carries the refusal's message.
    fn general_request(
        frame: &[u8],
        check: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<(String, String, String), String> {
        let env = parse_envelope(frame).map_err(|e| e.error.message)?;
        let method: Method = env
            .method
            .parse()
            .map_err(|()| "unknown method".to_owned())?;
        let cmd = Command::parse(method, &env.params, check)?;
        let request = try_fingerprint(method.as_str(), &env.params)?;
        Ok((env.id, format!("{cmd:?}"), request))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Whatever the direct path takes, it reads as the general path does: same id, same
        /// command, same fingerprint.
        #[test]
        fn the_direct_path_agrees_with_the_general_one(frame in test_frames::request_frame()) {
            if let Some(direct) = parse_request_direct(&frame, &check_target) {
                proptest::prop_assert_eq!(
                    Ok((direct.id.to_owned(), format!("{:?}", direct.command), direct.request)),
                    general_request(&frame, &check_target)
                );
            }
        }
    }

    #[test]
    fn the_direct_path_takes_well_formed_requests_and_leaves_the_rest() {
        fn direct(frame: &str) -> Option<DirectRequest<'_>> {
            parse_request_direct(frame.as_bytes(), &check_target)
        }
        // Canonical params: the fingerprint is the text itself.
        let r = direct(r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"a\n\u0001é"}}"##).unwrap();
        assert_eq!(r.id, "r1");
        assert_eq!(r.command.method(), Method::PageFill);
        assert_eq!(
            r.request,
            r##"{"method":"page.fill","params":{"target":"#title","taskId":"t","value":"a\n\u0001é"}}"##
        );
        assert_eq!(r.request.capacity(), r.request.len());
        // Keys out of order, spaces, escapes the canonicaliser does not write: still taken,
        // with the canonical fingerprint.
        for frame in [
            r##"{"id":"r1","method":"page.fill","params":{"taskId":"t","target":"#title","value":"Hi"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title", "taskId":"t","value":"Hi"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"H\u0069"}}"##,
        ] {
            let r = direct(frame).unwrap();
            assert_eq!(
                r.request,
                r##"{"method":"page.fill","params":{"target":"#title","taskId":"t","value":"Hi"}}"##,
                "{frame}"
            );
        }
        // No params, or null params, are `{}`.
        assert_eq!(
            direct(r#"{"id":"r1","method":"host.hello"}"#)
                .unwrap()
                .request,
            r#"{"method":"host.hello","params":{}}"#
        );
        assert_eq!(
            direct(r#"{"id":"r1","method":"host.hello","params":null}"#)
                .unwrap()
                .request,
            r#"{"method":"host.hello","params":{}}"#
        );
        // Everything the general path has to explain is left to it.
        for frame in [
            r#"{"id":"r\u0031","method":"host.hello"}"#,
            r#"{"id":"r1","id":"r2","method":"host.hello"}"#,
            r#"{"id":"a b","method":"host.hello"}"#,
            r#"{"id":"r1","method":"host.hell"}"#,
            r#"{"id":"r1","method":"host.hello","params":[]}"#,
            r#"{"id":"r1","method":"host.hello","params":{"x":1}}"#,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","taskId":"u","value":"a"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"title","taskId":"t","value":"a"}}"##,
            r#"{"id":"r1","method":"host.hello","extra":1}"#,
            "not json",
        ] {
            assert!(direct(frame).is_none(), "{frame}");
        }
    }
}
