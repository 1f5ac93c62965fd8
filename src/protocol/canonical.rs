//! Recognising canonical JSON: whether a request's params text is already what the RFC 8785
//! canonicaliser writes, so that its fingerprint can be the text itself.

/// The largest integer magnitude an IEEE double holds exactly: RFC 8785 writes numbers as
/// JavaScript does, so only integers up to this are written the same way by `serde_json`.
pub(super) const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// Whether `text` is already exactly what the RFC 8785 canonicaliser
/// (`serde_json_canonicalizer`) writes for the JSON value it holds, so the fingerprint can be
/// the text itself.
///
/// Deliberately narrower than RFC 8785: it accepts no insignificant whitespace; object keys
/// only of printable ASCII without escapes, in strictly increasing byte order (for ASCII that
/// is RFC 8785's UTF-16 order, and strictness rules out duplicates); strings escaped exactly as
/// the canonicaliser escapes them (`\"`, `\\`, `\b` `\t` `\n` `\f` `\r`, lowercase `\u00xx` for
/// the other control characters, everything else as is); integers only, written without
/// leading zeros or `-0`, of magnitude at most 2^53 (where a double's shortest form is the
/// integer's own digits); `true`, `false`, `null`. Anything else returns `false`, and the caller
/// computes the canonical form through the canonicaliser, so a `false` costs time, never
/// correctness.
pub fn is_canonical(text: &str) -> bool {
    let mut checker = Checker {
        bytes: text.as_bytes(),
        pos: 0,
    };
    checker.value(0) && checker.pos == text.len()
}

/// Nesting deeper than this is left to the canonicaliser (no bridge request nests so deep).
const MAX_DEPTH: usize = 32;

/// A cursor over the text [`is_canonical`] checks: each method reads one piece of JSON at
/// `pos` and answers whether it is written canonically, moving `pos` past what it read.
struct Checker<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Checker<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Steps over `b` if it is next.
    #[inline]
    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Steps over `word` if it is next.
    #[inline]
    fn literal(&mut self, word: &[u8]) -> bool {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    /// Steps over the bytes from `pos` that `plain` accepts, up to the first it does not, and
    /// returns that byte (`None` at the end of the text).
    #[inline]
    fn skip_run(&mut self, plain: impl Fn(u8) -> bool) -> Option<u8> {
        let len = self.bytes[self.pos..].iter().position(|&b| !plain(b))?;
        self.pos += len;
        Some(self.bytes[self.pos])
    }

    /// Any value, its first byte telling which kind.
    fn value(&mut self, depth: usize) -> bool {
        match self.peek() {
            Some(b'{') => depth < MAX_DEPTH && self.object(depth + 1),
            Some(b'[') => depth < MAX_DEPTH && self.array(depth + 1),
            Some(b'"') => self.string(),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.integer(),
            _ => false,
        }
    }

    /// An object: members without spaces, keys in strictly increasing order.
    fn object(&mut self, depth: usize) -> bool {
        self.pos += 1; // `{`
        if self.eat(b'}') {
            return true;
        }
        let mut previous: Option<&'a [u8]> = None;
        loop {
            let Some(key) = self.key() else {
                return false;
            };
            if !follows(previous, key) {
                return false;
            }
            previous = Some(key);
            if !self.eat(b':') || !self.value(depth) {
                return false;
            }
            if self.eat(b'}') {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
        }
    }

    /// A key of printable ASCII without escapes, returned without its quotes.
    #[inline]
    fn key(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.pos;
        if self.skip_run(is_key_byte)? != b'"' {
            return None;
        }
        let bytes: &'a [u8] = self.bytes;
        let key = &bytes[start..self.pos];
        self.pos += 1; // `"`
        Some(key)
    }

    /// An array: items without spaces.
    fn array(&mut self, depth: usize) -> bool {
        self.pos += 1; // `[`
        if self.eat(b']') {
            return true;
        }
        loop {
            if !self.value(depth) {
                return false;
            }
            if self.eat(b']') {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
        }
    }

    /// A string: runs of bytes written as they are, between escapes written as the
    /// canonicaliser writes them.
    fn string(&mut self) -> bool {
        self.pos += 1; // `"`
        loop {
            match self.skip_run(is_unescaped_string_byte) {
                Some(b'"') => {
                    self.pos += 1;
                    return true;
                }
                Some(b'\\') => {
                    self.pos += 1;
                    if !self.escape() {
                        return false;
                    }
                }
                // A raw control character, or the end of the text.
                _ => return false,
            }
        }
    }

    /// After `\`: one of the canonicaliser's short forms, or a `\u00xx` escape.
    #[inline]
    fn escape(&mut self) -> bool {
        match self.peek() {
            Some(b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r') => {
                self.pos += 1;
                true
            }
            Some(b'u') => self.control_escape(),
            _ => false,
        }
    }

    /// After `\`: `u00xx` in lowercase hex, for a control character without a short form.
    fn control_escape(&mut self) -> bool {
        let Some(&[b'u', b'0', b'0', hi, lo]) = self.bytes.get(self.pos..self.pos + 5) else {
            return false;
        };
        let (Some(hi @ 0..=1), Some(lo)) = (lower_hex(hi), lower_hex(lo)) else {
            return false;
        };
        self.pos += 5;
        !has_short_escape(hi * 16 + lo)
    }

    /// An integer: an optional `-` and digits, with no fraction or exponent after them.
    fn integer(&mut self) -> bool {
        let negative = self.eat(b'-');
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return false;
        }
        is_canonical_integer(negative, &self.bytes[start..self.pos])
    }
}

/// Whether `key` may follow the object's `previous` key: strictly greater in byte order, which
/// for ASCII keys is RFC 8785's order and leaves no room for a duplicate.
#[inline]
fn follows(previous: Option<&[u8]>, key: &[u8]) -> bool {
    previous.is_none_or(|p| p < key)
}

/// Whether a key byte needs no escape and is one [`is_canonical`] takes: printable ASCII but
/// `"` and `\`.
#[inline]
fn is_key_byte(b: u8) -> bool {
    (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\'
}

/// Whether the canonicaliser writes a string byte as it is: everything but `"`, `\` and
/// control characters, multi-byte UTF-8 included.
#[inline]
fn is_unescaped_string_byte(b: u8) -> bool {
    b >= 0x20 && b != b'"' && b != b'\\'
}

/// Whether a control character has a short escape (`\b` `\t` `\n` `\f` `\r`), which the
/// canonicaliser writes instead of `\u00xx`.
#[inline]
fn has_short_escape(c: u8) -> bool {
    matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)
}

/// The value of a lowercase hex digit (the canonicaliser never writes uppercase ones).
#[inline]
fn lower_hex(d: u8) -> Option<u8> {
    match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    }
}

/// Whether an integer's `digits` (ASCII digits only) are written as the canonicaliser writes
/// them: no leading zero, no `-0`, and a magnitude a double holds exactly, so that its shortest
/// form is these very digits.
#[inline]
fn is_canonical_integer(negative: bool, digits: &[u8]) -> bool {
    match digits {
        [] => false,
        // `0` alone; `-0` is written `0`, and `01` is not JSON.
        [b'0'] => !negative,
        [b'0', ..] => false,
        // 2^53 has 16 digits; 16 digits fit in a `u64` without overflow.
        _ if digits.len() > 16 => false,
        _ => {
            let n = digits
                .iter()
                .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
            n <= MAX_EXACT_INTEGER
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    use crate::protocol::test_frames;

    /// A value [`is_canonical`] must recognise once the canonicaliser has written it: integers a
    /// double holds exactly, keys of printable ASCII that need no escape.
    fn plain(v: &Value) -> bool {
        match v {
            Value::Null | Value::Bool(_) | Value::String(_) => true,
            Value::Number(n) => {
                n.as_i64()
                    .is_some_and(|i| i.unsigned_abs() <= MAX_EXACT_INTEGER)
                    || n.as_u64().is_some_and(|u| u <= MAX_EXACT_INTEGER)
            }
            Value::Array(items) => items.iter().all(plain),
            Value::Object(map) => map.iter().all(|(k, v)| {
                k.bytes()
                    .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
                    && plain(v)
            }),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Whenever the checker accepts a text, it is byte for byte what the canonicaliser
        /// writes for its value; and it accepts the canonicaliser's own output for every value
        /// without floats, huge integers or keys that need escaping.
        #[test]
        fn is_canonical_accepts_exactly_the_canonicalisers_text(
            v in test_frames::any_json(),
            how in proptest::prelude::any::<u8>(),
            seed in proptest::prelude::any::<u64>(),
        ) {
            let text = test_frames::write_json(&v, how, seed);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            let canonical = serde_json_canonicalizer::to_string(&parsed).unwrap();
            if is_canonical(&text) {
                proptest::prop_assert_eq!(&text, &canonical);
            }
            if plain(&parsed) {
                proptest::prop_assert!(is_canonical(&canonical), "{}", canonical);
            }
        }

        /// Arbitrary text, JSON or not, never makes the checker panic, and what it accepts is
        /// JSON the canonicaliser writes the same way.
        #[test]
        fn is_canonical_accepts_no_other_text(
            text in proptest::prop_oneof![
                proptest::prelude::any::<String>(),
                "[\\[\\]{}\",:0-9a-z\\\\/. eE+-]{0,24}",
            ]
        ) {
            if is_canonical(&text) {
                let parsed: Value = serde_json::from_str(&text).unwrap();
                proptest::prop_assert_eq!(&text, &serde_json_canonicalizer::to_string(&parsed).unwrap());
            }
        }

    }

    #[test]
    fn integers_are_canonical_up_to_two_to_the_53() {
        for (digits, negative, want) in [
            ("0", false, true),
            ("0", true, false),
            ("07", false, false),
            ("", false, false),
            ("1000000000000000", false, true),
            ("9007199254740992", true, true),
            ("9007199254740993", false, false),
            ("9999999999999999", false, false),
            ("10000000000000000", false, false),
        ] {
            assert_eq!(
                is_canonical_integer(negative, digits.as_bytes()),
                want,
                "{negative} {digits}"
            );
        }
    }

    #[test]
    fn is_canonical_follows_the_canonicaliser_on_the_edges() {
        for yes in [
            r#"{}"#,
            r#"[]"#,
            r#"{"a":[1,-2,0,9007199254740992,-9007199254740992],"b":null,"c":true,"d":false}"#,
            "\"\\\"\\\\\\b\\t\\n\\f\\r\\u0000\\u001f\u{7f}/é\u{2028}\u{1F600}\"",
            r#"{"A":1,"B":2,"a":3}"#,
        ] {
            assert!(is_canonical(yes), "{yes}");
            let parsed: Value = serde_json::from_str(yes).unwrap();
            assert_eq!(serde_json_canonicalizer::to_string(&parsed).unwrap(), yes);
        }
        for no in [
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":1}"#,
            r#"{ "a":1}"#,
            r#"{"a": 1}"#,
            r#"{"a":1} "#,
            r#"[1,2 ]"#,
            r#""\/""#,
            r#""\u0041""#,
            r#""\u000a""#,
            r#""\u001F""#,
            r#""\ud83d\ude00""#,
            r#"{"é":1}"#,
            r#"{"a\"b":1}"#,
            "-0",
            "01",
            "1.0",
            "1e3",
            "9007199254740993",
            "-9007199254740993",
            "100000000000000000000",
            "tru",
            "nul",
            "\"unterminated",
            "\"\u{1}\"",
            "",
            "{",
            "[1,]",
            r#"{"a":1,}"#,
        ] {
            assert!(!is_canonical(no), "{no}");
        }
        // Deep nesting is left to the canonicaliser, without recursing far.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(!is_canonical(&deep));
    }
}
