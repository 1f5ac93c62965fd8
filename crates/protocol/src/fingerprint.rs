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

/// The most pieces [`StoredRequest::pieces`] writes a fingerprint's whole text in.
pub const REQUEST_PIECES: usize = 11;

/// A `page.fill`'s canonical params when none of their strings holds an escape (as good as every
/// fill an agent sends): `{"target":"T","taskId":"K","value":"V"}`, RFC 8785 sorting the keys.
/// Each string's text is its value, so the fill's reply and its stored form are written from
/// these pieces as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainFill<'a> {
    /// The selector filled.
    pub target: &'a str,
    /// The task the fill acts on.
    pub task_id: &'a str,
    /// The value written.
    pub value: &'a str,
}

/// The text of [`PlainFill`]'s params around its three strings.
const FILL_HEAD: &str = "{\"target\":\"";
const FILL_TASK: &str = "\",\"taskId\":\"";
const FILL_VALUE: &str = "\",\"value\":\"";
const FILL_TAIL: &str = "\"}";

impl<'a> PlainFill<'a> {
    /// Reads `params` as a plain fill's canonical params; `None` for any other text (another
    /// member, a string with an escape, another order).
    pub fn read(params: &'a str) -> Option<PlainFill<'a>> {
        let rest = params.strip_prefix(FILL_HEAD)?;
        let (target, rest) = rest.split_once('"')?;
        let rest = rest.strip_prefix(&FILL_TASK[1..])?;
        let (task_id, rest) = rest.split_once('"')?;
        let rest = rest.strip_prefix(&FILL_VALUE[1..])?;
        let (value, rest) = rest.split_once('"')?;
        let escaped = [target, task_id, value].iter().any(|s| s.contains('\\'));
        (rest == &FILL_TAIL[1..] && !escaped).then_some(PlainFill {
            target,
            task_id,
            value,
        })
    }

    /// Whether `params` are this fill's params, compared in place: how a fill whose strings
    /// were already read is told to be plain without reading its params again. The caller
    /// vouches that the strings hold no escape (the one-pass reader borrows only such a fill:
    /// [`FrameCommand::Fill`](super::FrameCommand::Fill)); a quote in the target, which would
    /// end the stored form's target early, is refused here all the same.
    pub fn is(&self, params: &str) -> bool {
        let same = pieces_are(&self.pieces(), params) && !self.target.contains('"');
        debug_assert!(
            !same || !params.contains('\\'),
            "a plain fill has no escape: {params}"
        );
        same
    }

    /// The params text in pieces, in order.
    fn pieces(&self) -> [&'a str; 7] {
        [
            FILL_HEAD,
            self.target,
            FILL_TASK,
            self.task_id,
            FILL_VALUE,
            self.value,
            FILL_TAIL,
        ]
    }
}

/// A fingerprint as a receipt keeps it, in the fewest bytes that give its whole text back: the
/// receipt keeps the method and the task beside it, and the 30-odd bytes around the method and
/// params are the same in every receipt of a method. Its first byte tells the three forms
/// apart:
///
/// - `"`: a [`PlainFill`] whose task is the receipt's own, kept as `"TARGET"VALUE` (a plain
///   target holds no quote): its keys and the task ID were two-thirds of the text;
/// - a space: text not of a fingerprint's shape (Polaris writes none, but a journal record or a
///   ledger row is read as input), kept whole after the space;
/// - anything else: the params text (canonical params never start with a space or a quote:
///   every request's params are an object or absent).
///
/// The task a receipt keeps is given back to each call that writes the text
/// ([`StoredRequest::pieces`]), and a plain fill is kept short only when it names that task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRequest(Box<str>);

impl StoredRequest {
    /// The stored form of a request of `method` with canonical `params`, for a receipt whose
    /// task is `task`.
    pub fn new(method: &str, params: &str, task: Option<&str>) -> StoredRequest {
        match Self::plain_fill_of(method, params, task) {
            Some(fill) => Self::plain(fill),
            None if params.starts_with([' ', '"']) => {
                Self::whole(&join_fingerprint(method, params))
            }
            None => StoredRequest(params.into()),
        }
    }

    /// [`StoredRequest::new`] for params already allocated at their exact size, which are kept
    /// as they are when they are not a plain fill.
    pub fn from_params(method: &str, params: Box<str>, task: Option<&str>) -> StoredRequest {
        if params.starts_with([' ', '"']) || Self::plain_fill_of(method, &params, task).is_some() {
            return Self::new(method, &params, task);
        }
        StoredRequest(params)
    }

    /// The stored form of a fingerprint's whole `text`, whose method is `method`, for a receipt
    /// whose task is `task`: as [`StoredRequest::new`] when the text has a fingerprint's shape
    /// and names that method, else the text itself.
    pub fn from_text(method: &str, text: &str, task: Option<&str>) -> StoredRequest {
        match split_fingerprint(text) {
            Some((m, params)) if m == method => Self::new(method, params, task),
            _ => Self::whole(text),
        }
    }

    /// What a receipt of `fill`'s task keeps of a plain fill ([`PlainFill`]: its strings hold no
    /// escape, which [`PlainFill::read`] or [`PlainFill::is`] has checked): `"TARGET"VALUE`.
    pub fn plain(fill: PlainFill<'_>) -> StoredRequest {
        let mut text = String::with_capacity(2 + fill.target.len() + fill.value.len());
        for piece in ["\"", fill.target, "\"", fill.value] {
            text.push_str(piece);
        }
        StoredRequest(text.into_boxed_str())
    }

    /// `params` read as a plain fill of `task`, when `method` is `page.fill`.
    fn plain_fill_of<'p>(
        method: &str,
        params: &'p str,
        task: Option<&str>,
    ) -> Option<PlainFill<'p>> {
        let fill = (method == "page.fill")
            .then(|| PlainFill::read(params))
            .flatten()?;
        (Some(fill.task_id) == task).then_some(fill)
    }

    fn whole(text: &str) -> StoredRequest {
        StoredRequest(format!(" {text}").into_boxed_str())
    }

    /// The params text, when it is kept as it is (neither a plain fill nor whole text).
    pub fn params(&self) -> Option<&str> {
        (!self.0.starts_with([' ', '"'])).then_some(&*self.0)
    }

    /// The target and value of a plain fill kept short. Read on every fill's storing and
    /// replay: a byte scan for the closing quote (the target is a short selector), which the
    /// compiler keeps inline, where `split_once` became a call to the generic char searcher.
    #[inline]
    pub fn plain_fill(&self) -> Option<(&str, &str)> {
        let rest = self.0.strip_prefix('"')?;
        let at = rest.bytes().position(|b| b == b'"')?;
        // `"` is ASCII: both sides of it are char boundaries.
        Some((rest.get(..at)?, rest.get(at + 1..)?))
    }

    /// The pieces of the fingerprint's whole text for a receipt of `method` whose task is
    /// `task`, in order (unused pieces empty).
    pub fn pieces<'a>(
        &'a self,
        method: &'a str,
        task: Option<&'a str>,
    ) -> [&'a str; REQUEST_PIECES] {
        if let Some((target, value)) = self.plain_fill() {
            debug_assert!(
                task.is_some(),
                "a plain fill is kept short only with its task"
            );
            let [a, b, c, d, e, f, g] = PlainFill {
                target,
                task_id: task.unwrap_or_default(),
                value,
            }
            .pieces();
            return [
                FINGERPRINT_HEAD,
                method,
                FINGERPRINT_MIDDLE,
                a,
                b,
                c,
                d,
                e,
                f,
                g,
                FINGERPRINT_TAIL,
            ];
        }
        let mut pieces = [""; REQUEST_PIECES];
        match self.params() {
            Some(params) => {
                pieces[..5].copy_from_slice(&[
                    FINGERPRINT_HEAD,
                    method,
                    FINGERPRINT_MIDDLE,
                    params,
                    FINGERPRINT_TAIL,
                ]);
            }
            None => pieces[0] = &self.0[1..],
        }
        pieces
    }

    /// Whether `params` are the params this stored request was made from, for a receipt whose
    /// task is `task`; `None` when it keeps the whole text (compare that instead).
    pub fn params_are(&self, params: &str, task: Option<&str>) -> Option<bool> {
        if let Some((target, value)) = self.plain_fill() {
            let Some(task_id) = task else {
                return Some(false);
            };
            let pieces = PlainFill {
                target,
                task_id,
                value,
            }
            .pieces();
            return Some(pieces_are(&pieces, params));
        }
        self.params().map(|mine| mine == params)
    }

    /// Whether this stored form, made from the params `params` of a request of `method`
    /// ([`StoredRequest::new`], for whatever task), is what a receipt whose task is `task` keeps
    /// of them: a plain fill's only when it names that task (found where the task stands in
    /// `params`, without reading them again); any other form unless the params would be a
    /// plain fill of `task`.
    pub fn kept_for(&self, method: &str, params: &str, task: Option<&str>) -> bool {
        let Some((target, value)) = self.plain_fill() else {
            return Self::plain_fill_of(method, params, task).is_none();
        };
        let Some(task) = task else {
            return false;
        };
        let at = FILL_HEAD.len() + target.len() + FILL_TASK.len();
        let plain_len = at + task.len() + FILL_VALUE.len() + value.len() + FILL_TAIL.len();
        params.len() == plain_len && params.get(at..at + task.len()) == Some(task)
    }

    /// The fingerprint's whole text for a receipt of `method` whose task is `task`.
    pub fn text(&self, method: &str, task: Option<&str>) -> String {
        self.pieces(method, task).concat()
    }

    /// The length of [`StoredRequest::text`], counted without writing it.
    pub fn text_len(&self, method: &str, task: Option<&str>) -> usize {
        const AROUND: usize =
            FINGERPRINT_HEAD.len() + FINGERPRINT_MIDDLE.len() + FINGERPRINT_TAIL.len();
        const FILL_AROUND: usize =
            FILL_HEAD.len() + FILL_TASK.len() + FILL_VALUE.len() + FILL_TAIL.len();
        match self.0.as_bytes().first() {
            // `"TARGET"VALUE`: the two quotes stand for the fill's text around its strings.
            Some(b'"') => {
                AROUND + method.len() + FILL_AROUND + self.0.len() - 2 + task.map_or(0, str::len)
            }
            Some(b' ') => self.0.len() - 1,
            _ => AROUND + method.len() + self.0.len(),
        }
    }

    /// Where the kept text starts, for a prefetch.
    pub fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr()
    }

    /// The bytes the stored form keeps (what it allocates).
    #[cfg(any(test, feature = "test-frames"))]
    pub fn kept_len(&self) -> usize {
        self.0.len()
    }
}

/// Whether `pieces`, joined, are `text`, compared in place.
fn pieces_are(pieces: &[&str], text: &str) -> bool {
    let mut rest = text.as_bytes();
    for piece in pieces {
        match rest.strip_prefix(piece.as_bytes()) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

/// A test's stand-in request: any text, kept whole (so it counts as its own length).
#[cfg(any(test, feature = "test-frames"))]
impl From<&str> for StoredRequest {
    fn from(text: &str) -> StoredRequest {
        StoredRequest::from_text("", text, None)
    }
}

#[cfg(any(test, feature = "test-frames"))]
impl From<String> for StoredRequest {
    fn from(text: String) -> StoredRequest {
        StoredRequest::from(text.as_str())
    }
}

#[cfg(any(test, feature = "test-frames"))]
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
        let stored = StoredRequest::from_text("page.fill", &text, None);
        assert_eq!(stored.params(), Some(params));
        assert_eq!(stored.text("page.fill", None), text);
        assert_eq!(stored.text_len("page.fill", None), text.len());
        assert_eq!(
            stored,
            StoredRequest::from_params("page.fill", params.into(), None)
        );
        // Text of another shape, or of another method, is kept whole and given back as it was;
        // so are params that start with a quote (no request's do).
        for (method, odd) in [
            ("page.fill", "{\"params\":{},\"method\":\"page.fill\"}"),
            ("page.fill", "not json"),
            ("task.start", text.as_str()),
            ("page.fill", "{\"method\":\"page.fill\",\"params\": {}}"),
            ("page.fill", "{\"method\":\"page.fill\",\"params\":\"#a\"}"),
        ] {
            let stored = StoredRequest::from_text(method, odd, Some("t"));
            assert_eq!(stored.params(), None, "{odd}");
            assert_eq!(stored.plain_fill(), None, "{odd}");
            assert_eq!(stored.text(method, Some("t")), odd);
            assert_eq!(stored.text_len(method, Some("t")), odd.len());
        }
        assert_eq!(split_fingerprint("{\"method\":\"x\""), None);
    }

    /// A fill whose strings hold no escapes, of the receipt's own task, keeps only its target
    /// and value: the whole text, its length and its comparisons come out as the params'.
    #[test]
    fn a_plain_fill_of_the_receipts_task_keeps_its_target_and_value_alone() {
        let task = "0b7e2f0a-5d1c-4e8f-9a2b-3c4d5e6f7a8b";
        let params = json!({"taskId": task, "target": "#title", "value": "Hello 'world' é"});
        let text = fingerprint("page.fill", &params);
        let (_, params_text) = split_fingerprint(&text).unwrap();
        let stored = StoredRequest::from_text("page.fill", &text, Some(task));
        assert_eq!(stored.plain_fill(), Some(("#title", "Hello 'world' é")));
        assert_eq!(stored.params(), None);
        assert_eq!(stored.kept_len(), "\"#title\"Hello 'world' é".len());
        assert_eq!(stored.text("page.fill", Some(task)), text);
        assert_eq!(stored.text_len("page.fill", Some(task)), text.len());
        assert_eq!(stored.params_are(params_text, Some(task)), Some(true));
        assert_eq!(stored.params_are(params_text, Some("another")), Some(false));
        assert_eq!(
            stored.params_are(&params_text[..params_text.len() - 1], Some(task)),
            Some(false)
        );
        assert_eq!(
            stored,
            StoredRequest::from_params("page.fill", params_text.into(), Some(task))
        );
        // Of another task, of no task, of another method, or with one string escaped: the params
        // are kept as they are.
        for (method, t) in [
            ("page.fill", Some("another")),
            ("page.fill", None),
            ("page.click", Some(task)),
        ] {
            let stored = StoredRequest::new(method, params_text, t);
            assert_eq!(stored.params(), Some(params_text), "{method} {t:?}");
        }
        let escaped = fingerprint(
            "page.fill",
            &json!({"taskId": task, "target": "#title", "value": "a \"quote\""}),
        );
        let stored = StoredRequest::from_text("page.fill", &escaped, Some(task));
        assert!(stored.params().is_some());
        assert_eq!(stored.text("page.fill", Some(task)), escaped);
        assert_eq!(
            PlainFill::read(params_text),
            Some(PlainFill {
                target: "#title",
                task_id: task,
                value: "Hello 'world' é"
            })
        );
        let fill = PlainFill::read(params_text).unwrap();
        assert!(fill.is(params_text));
        assert!(!fill.is(&params_text[1..]));
        // A quote in the target is refused even where the text matches; a string with an
        // escape is never read as plain.
        let quoted = PlainFill {
            target: "#a\"b",
            task_id: task,
            value: "v",
        };
        assert!(!quoted.is(&quoted.pieces().concat()));
        let escaped = "{\"target\":\"#a\\\"b\",\"taskId\":\"t\",\"value\":\"v\"}";
        assert_eq!(PlainFill::read(escaped), None);
    }

    proptest::proptest! {
        /// Whatever a fill's strings and task, the stored form gives the whole text back for its
        /// own task, compares equal to its own params and to no other, and is short exactly when
        /// no string needs an escape.
        #[test]
        fn a_stored_fill_gives_back_its_text_and_tells_others_apart(
            target in ".{0,12}",
            value in ".{0,24}",
            task in "[-a-z0-9\"\\\\]{1,12}",
            other_value in ".{0,24}",
        ) {
            let params = json!({"taskId": task, "target": target, "value": value});
            let text = fingerprint("page.fill", &params);
            let (_, params_text) = split_fingerprint(&text).unwrap();
            let stored = StoredRequest::from_text("page.fill", &text, Some(&task));
            proptest::prop_assert_eq!(stored.text("page.fill", Some(&task)), text.clone());
            proptest::prop_assert_eq!(stored.text_len("page.fill", Some(&task)), text.len());
            proptest::prop_assert_eq!(stored.params_are(params_text, Some(&task)), Some(true));
            let plain = !params_text.contains('\\');
            proptest::prop_assert_eq!(stored.plain_fill().is_some(), plain);
            proptest::prop_assert!(stored.kept_for("page.fill", params_text, Some(&task)));
            proptest::prop_assert_eq!(
                stored.kept_for("page.fill", params_text, Some("another")),
                !plain || task == "another"
            );
            proptest::prop_assert_eq!(stored.kept_for("page.fill", params_text, None), !plain);
            // Kept as params for no task, they are not what a receipt of its own task keeps.
            let for_none = StoredRequest::new("page.fill", params_text, None);
            proptest::prop_assert_eq!(
                for_none.kept_for("page.fill", params_text, Some(&task)),
                !plain
            );
            let other = fingerprint(
                "page.fill",
                &json!({"taskId": task, "target": target, "value": other_value}),
            );
            let (_, other_params) = split_fingerprint(&other).unwrap();
            proptest::prop_assert_eq!(
                stored.params_are(other_params, Some(&task)),
                Some(other_value == value)
            );
        }
    }

    use crate::test_frames::any_json;

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
