//! How RFC 8785 (the canonicaliser behind every fingerprint) writes integers and strings: the
//! one home of the rules by which the frame's one-pass reader tells whether params text is
//! already canonical, and writes it canonically when it is not.

/// The largest integer magnitude an IEEE double holds exactly: RFC 8785 writes numbers as
/// JavaScript does, so only integers up to this are written the same way by `serde_json`.
pub(super) const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// Whether an integer is written as RFC 8785 writes it: no `-0`, magnitude a double holds
/// exactly (JSON already rules out leading zeros).
#[inline]
pub(super) fn canonical_integer(negative: bool, digits: &[u8]) -> bool {
    if digits == b"0" {
        return !negative;
    }
    digits.len() <= 16 && parse_u64(digits).is_some_and(|n| n <= MAX_EXACT_INTEGER)
}

/// Whether a control character has a short escape (`\b` `\t` `\n` `\f` `\r`), which the
/// canonicaliser writes instead of `\u00xx`.
#[inline]
pub(super) fn has_short_escape(c: u8) -> bool {
    matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)
}

/// Writes `s` as RFC 8785 does: `"`, `\` and control characters escaped (short forms where
/// there are, lowercase `\u00xx` otherwise), everything else as is.
pub(super) fn write_canonical_str(s: &str, out: &mut String) {
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0c => "\\f",
            b'\r' => "\\r",
            0..=0x1f => "",
            // Everything else, multi-byte UTF-8 included, is written as it is.
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        plain = i + 1;
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        } else {
            out.push_str(escape);
        }
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

/// The value of ASCII digits, `None` past `u64`.
pub(super) fn parse_u64(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    use crate::test_frames;

    proptest::proptest! {
        /// Any string is written exactly as the canonicaliser writes it.
        #[test]
        fn strings_are_written_as_the_canonicaliser_writes_them(
            s in proptest::prop_oneof![
                proptest::prelude::any::<String>(),
                "[ -~/\"\\\\\u{0}-\u{1f}\u{7f}é\u{2028}\u{1F600}]{0,12}",
            ]
        ) {
            let mut out = String::new();
            write_canonical_str(&s, &mut out);
            proptest::prop_assert_eq!(out, serde_json_canonicalizer::to_string(&Value::String(s)).unwrap());
        }

        /// An integer taken as canonical as written is one the canonicaliser writes with the
        /// same digits. (Some larger integers a double happens to hold exactly, such as
        /// 14467544279482832, are written the same too; the fast path leaves those to the
        /// canonicaliser, which costs time, never a different fingerprint.)
        #[test]
        fn integers_taken_as_canonical_are_written_the_same(v in test_frames::any_json()) {
            if let Value::Number(n) = &v {
                let text = n.to_string();
                if let Some(digits) = text.strip_prefix('-').or(Some(&text)).filter(|d| d.bytes().all(|b| b.is_ascii_digit())) {
                    let canonical = serde_json_canonicalizer::to_string(&v).unwrap();
                    if canonical_integer(text.starts_with('-'), digits.as_bytes()) {
                        proptest::prop_assert_eq!(&canonical, &text);
                    } else if digits.len() <= 15 && text != "-0" {
                        // Below 2^53 every integer but -0 must take the fast path.
                        proptest::prop_assert!(false, "{} was left to the slow path", text);
                    }
                }
            }
        }
    }

    #[test]
    fn integers_are_canonical_up_to_two_to_the_53() {
        for (digits, negative, want) in [
            ("0", false, true),
            ("0", true, false),
            ("1000000000000000", false, true),
            ("9007199254740992", true, true),
            ("9007199254740993", false, false),
            ("9999999999999999", false, false),
            ("10000000000000000", false, false),
            ("100000000000000000000000", false, false),
        ] {
            assert_eq!(
                canonical_integer(negative, digits.as_bytes()),
                want,
                "{negative} {digits}"
            );
        }
    }
}
