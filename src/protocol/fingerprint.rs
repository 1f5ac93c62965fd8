//! Fingerprints: the RFC 8785 canonical form of a request's `{method, params}`, which a
//! receipt keeps to tell the same content from other content under one ID — the shape of its
//! text, and the form a receipt keeps it in ([`StoredRequest`]: the params alone).

use serde::Serialize;
use serde_json::Value;

use super::canonical::MAX_EXACT_INTEGER;

/// The text before a fingerprint's method. Every fingerprint is
/// `{"method":"METHOD","params":PARAMS}` — RFC 8785 puts `method` before `params`, and a
/// method's name needs no escape — so a receipt keeps PARAMS alone and writes the rest again
/// ([`split_fingerprint`], [`join_fingerprint`]).
const FINGERPRINT_HEAD: &str = "{\"method\":\"";
/// The text between a fingerprint's method and its params.
const FINGERPRINT_MIDDLE: &str = "\",\"params\":";
/// The text after a fingerprint's params.
const FINGERPRINT_TAIL: &str = "}";

/// A fingerprint's method and params text, or `None` for text not of a fingerprint's shape.
pub fn split_fingerprint(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix(FINGERPRINT_HEAD)?;
    let (method, rest) = rest.split_once('"')?;
    let params = rest
        .strip_prefix(&FINGERPRINT_MIDDLE[1..])?
        .strip_suffix(FINGERPRINT_TAIL)?;
    Some((method, params))
}

/// The length of the fingerprint of `method` with `params` (canonical text), without writing it.
fn fingerprint_len(method: &str, params: &str) -> usize {
    FINGERPRINT_HEAD.len()
        + method.len()
        + FINGERPRINT_MIDDLE.len()
        + params.len()
        + FINGERPRINT_TAIL.len()
}

/// The fingerprint of `method` with `params` (canonical text), written whole.
pub(super) fn join_fingerprint(method: &str, params: &str) -> String {
    let mut out = String::with_capacity(fingerprint_len(method, params));
    for piece in [
        FINGERPRINT_HEAD,
        method,
        FINGERPRINT_MIDDLE,
        params,
        FINGERPRINT_TAIL,
    ] {
        out.push_str(piece);
    }
    out
}

/// A fingerprint as a receipt keeps it: its params text alone — the receipt keeps the method
/// beside it, and the 30-odd bytes around the two are the same in every receipt of a method —
/// or, for text not of a fingerprint's shape (Polaris writes none, but a journal record or a
/// ledger row is read as input), a space and the whole text: canonical params never start
/// with a space, so the two cannot be confused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRequest(Box<str>);

impl StoredRequest {
    /// The stored form of canonical `params` text (what [`Fingerprint`](super::Fingerprint)
    /// keeps, or [`split_fingerprint`] found).
    pub fn from_params(params: Box<str>) -> StoredRequest {
        debug_assert!(!params.starts_with(' '), "canonical params: {params}");
        StoredRequest(params)
    }

    /// The stored form of a fingerprint's whole `text`, whose method is `method`: its params
    /// when the text has a fingerprint's shape and names that method, else the text itself.
    pub fn from_text(method: &str, text: &str) -> StoredRequest {
        match split_fingerprint(text) {
            Some((m, params)) if m == method && !params.starts_with(' ') => {
                StoredRequest(params.into())
            }
            _ => StoredRequest(format!(" {text}").into_boxed_str()),
        }
    }

    /// The params text, unless the whole text is kept.
    pub fn params(&self) -> Option<&str> {
        (!self.0.starts_with(' ')).then_some(&*self.0)
    }

    /// The pieces of the fingerprint's whole text for a receipt of `method`, in order (the
    /// whole text and four empty pieces when it is kept whole).
    pub fn pieces<'a>(&'a self, method: &'a str) -> [&'a str; 5] {
        match self.params() {
            Some(params) => [
                FINGERPRINT_HEAD,
                method,
                FINGERPRINT_MIDDLE,
                params,
                FINGERPRINT_TAIL,
            ],
            None => [&self.0[1..], "", "", "", ""],
        }
    }

    /// The fingerprint's whole text for a receipt of `method`.
    pub fn text(&self, method: &str) -> String {
        self.pieces(method).concat()
    }

    /// The length of [`StoredRequest::text`], without writing it.
    pub fn text_len(&self, method: &str) -> usize {
        self.pieces(method).iter().map(|p| p.len()).sum()
    }

    /// Where the kept text starts, for a prefetch.
    pub fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr()
    }
}

/// A test's stand-in request: any text, kept whole (so it counts as its own length).
#[cfg(test)]
impl From<&str> for StoredRequest {
    fn from(text: &str) -> StoredRequest {
        StoredRequest::from_text("", text)
    }
}

#[cfg(test)]
impl From<String> for StoredRequest {
    fn from(text: String) -> StoredRequest {
        StoredRequest::from(text.as_str())
    }
}

#[cfg(test)]
impl From<Box<str>> for StoredRequest {
    fn from(text: Box<str>) -> StoredRequest {
        StoredRequest::from(&*text)
    }
}

/// The RFC 8785 canonical form of `{method, params}`: the request's fingerprint. Key order and
/// whitespace do not change it; any other difference does.
pub fn fingerprint(method: &str, params: &Value) -> String {
    try_fingerprint(method, params).expect("a parsed JSON value always canonicalises")
}

/// [`fingerprint`] for values that came from the wire: a value the canonicaliser cannot write
/// is an error for the caller to report, never a panic.
pub fn try_fingerprint(method: &str, params: &Value) -> Result<String, String> {
    if let Some(canonical) = plain_canonical(method, params) {
        return Ok(canonical);
    }
    #[derive(Serialize)]
    struct Fp<'a> {
        method: &'a str,
        params: &'a Value,
    }
    serde_json_canonicalizer::to_string(&Fp { method, params })
        .map_err(|e| format!("the params cannot be written as canonical JSON ({e})"))
}

/// The canonical form written directly, for the requests Polaris actually receives.
///
/// When every object key is ASCII and already in ascending order as `serde_json` iterates
/// them, and every number is an integer a double holds exactly, RFC 8785's output is exactly
/// `serde_json`'s compact output (both escape only `"`, `\` and control characters, with the
/// same short forms and lowercase `\u00xx`). That covers every valid bridge request, and skips
/// the general canonicaliser, which was a third of the host's time per fresh mutation. Anything
/// else (floats, huge integers, non-ASCII keys, or a map that does not iterate sorted) returns
/// `None` and goes through the general canonicaliser.
fn plain_canonical(method: &str, params: &Value) -> Option<String> {
    fn plain(v: &Value) -> bool {
        match v {
            Value::Null | Value::Bool(_) | Value::String(_) => true,
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u <= MAX_EXACT_INTEGER,
                (None, Some(i)) => i.unsigned_abs() <= MAX_EXACT_INTEGER,
                (None, None) => false,
            },
            Value::Array(items) => items.iter().all(plain),
            Value::Object(map) => {
                let mut previous: Option<&str> = None;
                map.iter().all(|(k, v)| {
                    let ordered = k.is_ascii() && previous.is_none_or(|p| p < k.as_str());
                    previous = Some(k);
                    ordered && plain(v)
                })
            }
        }
    }
    if !plain(params) {
        return None;
    }
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"method\":");
    serde_json::to_writer(&mut out, method).ok()?;
    out.extend_from_slice(b",\"params\":");
    serde_json::to_writer(&mut out, params).ok()?;
    out.push(b'}');
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stored_request_keeps_the_params_and_gives_the_whole_text_back() {
        let text = fingerprint("page.fill", &json!({"target": "#t", "value": "v \\ \""}));
        let (method, params) = split_fingerprint(&text).unwrap();
        assert_eq!(method, "page.fill");
        assert_eq!(join_fingerprint(method, params), text);
        assert_eq!(fingerprint_len(method, params), text.len());
        let stored = StoredRequest::from_text("page.fill", &text);
        assert_eq!(stored.params(), Some(params));
        assert_eq!(stored.text("page.fill"), text);
        assert_eq!(stored.text_len("page.fill"), text.len());
        assert_eq!(stored, StoredRequest::from_params(params.into()));
        // Text of another shape, or of another method, is kept whole and given back as it was.
        for (method, odd) in [
            ("page.fill", "{\"params\":{},\"method\":\"page.fill\"}"),
            ("page.fill", "not json"),
            ("task.start", text.as_str()),
            ("page.fill", "{\"method\":\"page.fill\",\"params\": {}}"),
        ] {
            let stored = StoredRequest::from_text(method, odd);
            assert_eq!(stored.params(), None, "{odd}");
            assert_eq!(stored.text(method), odd);
            assert_eq!(stored.text_len(method), odd.len());
        }
        assert_eq!(split_fingerprint("{\"method\":\"x\""), None);
    }

    use crate::protocol::test_frames::any_json;

    fn general_canonical(method: &str, params: &Value) -> String {
        #[derive(Serialize)]
        struct Fp<'a> {
            method: &'a str,
            params: &'a Value,
        }
        serde_json_canonicalizer::to_string(&Fp { method, params }).unwrap()
    }

    #[test]
    fn the_direct_canonical_form_is_taken_only_where_it_equals_rfc_8785() {
        let plain = json!({"taskId":"t","target":"#a","value":"é\u{1F600}\n\u{1}\"\\","n":9007199254740992i64,"m":-3,"a":[true,null,{"z":1,"b":"x"}]});
        assert_eq!(
            plain_canonical("page.fill", &plain).as_deref(),
            Some(general_canonical("page.fill", &plain).as_str())
        );
        // Floats, integers a double cannot hold and non-ASCII keys take the general path.
        for odd in [
            json!({"v": 1.5}),
            json!({"v": 1e21}),
            json!({"v": 9007199254740993u64}),
            json!({"é": 1, "z": 2}),
        ] {
            assert_eq!(plain_canonical("page.fill", &odd), None, "{odd}");
            assert_eq!(
                try_fingerprint("page.fill", &odd).unwrap(),
                general_canonical("page.fill", &odd)
            );
        }
    }

    proptest::proptest! {
        /// Whatever the params, the fingerprint is the RFC 8785 form the general canonicaliser writes.
        #[test]
        fn fingerprints_equal_the_general_canonicaliser(params in any_json()) {
            proptest::prop_assert_eq!(try_fingerprint("page.fill", &params).unwrap(), general_canonical("page.fill", &params));
        }

    }

    #[test]
    fn fingerprints_ignore_key_order_and_whitespace() {
        let a: Value =
            serde_json::from_str(r##"{"taskId":"t1","target":"#title","value":"Hi"}"##).unwrap();
        let b: Value =
            serde_json::from_str(r##"{ "value" : "Hi", "target":"#title",  "taskId":"t1" }"##)
                .unwrap();
        assert_eq!(fingerprint("page.fill", &a), fingerprint("page.fill", &b));
        assert_eq!(
            fingerprint("page.fill", &a),
            r##"{"method":"page.fill","params":{"target":"#title","taskId":"t1","value":"Hi"}}"##
        );
    }

    #[test]
    fn fingerprints_are_pinned() {
        // These strings are the contract: a dependency that changes map order or number
        // formatting would change every stored fingerprint.
        assert_eq!(
            fingerprint(
                "task.start",
                &json!({"title": "Post", "fixture": {"submitDelayMs": 1.0e3}})
            ),
            r#"{"method":"task.start","params":{"fixture":{"submitDelayMs":1000},"title":"Post"}}"#
        );
        assert_eq!(
            fingerprint(
                "page.press",
                &json!({"taskId":"t","key":"Enter","expect":{"target":"#status","contains":"Saved"}})
            ),
            r##"{"method":"page.press","params":{"expect":{"contains":"Saved","target":"#status"},"key":"Enter","taskId":"t"}}"##
        );
        assert_eq!(
            fingerprint("task.stop", &json!({"taskId":"t","reason":"é\u{1F600}\n"})),
            "{\"method\":\"task.stop\",\"params\":{\"reason\":\"é\u{1F600}\\n\",\"taskId\":\"t\"}}"
        );
        assert_ne!(
            fingerprint(
                "page.fill",
                &json!({"taskId":"t","target":"#a","value":"1"})
            ),
            fingerprint("page.fill", &json!({"taskId":"t","target":"#a","value":1}))
        );
    }
}
