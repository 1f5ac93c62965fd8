//! The two IDs the receipt book and the task table both name: a request's and a task's.
//!
//! They live here, below both, so that `book` (whose receipts name their task) and `tasks`
//! (whose history names the requests that acted) need not depend on each other.

use std::fmt;
use std::sync::Arc;

/// A task's ID, shared cheaply between the task table and the receipts that name it.
pub type TaskId = Arc<str>;

/// A request ID as the book stores it: canonical UUIDs (the common case) in 16 bytes, anything
/// else as text. Converting back gives exactly the string that was sent.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestKey {
    /// A lowercase hyphenated UUID, stored as its bytes.
    Uuid([u8; 16]),
    /// Any other valid request ID.
    Text(Box<str>),
}

impl RequestKey {
    /// The key for a (validated) request ID.
    ///
    /// Made for every request before the host's lock is taken, so it reads the ID once: only
    /// the canonical spelling (lowercase, hyphenated) is kept as bytes, since only it converts
    /// back to the same string; anything else stays text.
    pub fn new(id: &str) -> RequestKey {
        match canonical_uuid(id.as_bytes()) {
            Some(bytes) => RequestKey::Uuid(bytes),
            None => RequestKey::Text(id.into()),
        }
    }

    /// [`RequestKey::new`] for an ID whose UUID bytes were read already: `uuid` must be
    /// `canonical_uuid(id)`, which the frame's reader finds while it checks the ID.
    pub fn read(id: &str, uuid: Option<[u8; 16]>) -> RequestKey {
        match uuid {
            Some(bytes) => RequestKey::Uuid(bytes),
            None => RequestKey::Text(id.into()),
        }
    }
}

/// The bytes of a lowercase hyphenated UUID, or `None` for any other text. The 32 digits are
/// read as four words of eight, each checked and converted with word arithmetic: no branch
/// or table lookup per digit, and one branch for the whole ID (every request's ID is read
/// this way).
pub(crate) fn canonical_uuid(s: &[u8]) -> Option<[u8; 16]> {
    uuid_bytes(s.try_into().ok()?)
}

/// [`canonical_uuid`] for text already known to be 36 bytes long.
#[inline]
pub(crate) fn uuid_bytes(s: &[u8; 36]) -> Option<[u8; 16]> {
    // Fixed offsets into a 36-byte array: no bounds check, no copy loop.
    let four = |i: usize| u64::from(u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]));
    let eight = |i: usize| four(i) | four(i + 4) << 32;
    let (a, a_bad) = hex_word(eight(0));
    let (b, b_bad) = hex_word(four(9) | four(14) << 32);
    let (c, c_bad) = hex_word(four(19) | four(24) << 32);
    let (d, d_bad) = hex_word(eight(28));
    let hyphens = (s[8] ^ b'-') | (s[13] ^ b'-') | (s[18] ^ b'-') | (s[23] ^ b'-');
    if (a_bad | b_bad | c_bad | d_bad) != 0 || hyphens != 0 {
        return None;
    }
    let value = u128::from(a) | u128::from(b) << 32 | u128::from(c) << 64 | u128::from(d) << 96;
    Some(value.to_le_bytes())
}

/// Eight hex digits (one per byte of `x`, first digit lowest) as the four bytes they spell
/// (first byte lowest), and a word that is not zero if any byte is not a lowercase hex digit
/// (the value is then meaningless).
#[inline(always)]
fn hex_word(x: u64) -> (u32, u64) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // For bytes below 0x80, the high bit of `x + (0x80 - c)` says `byte >= c` (no carries;
    // a byte from 0x80 up is refused by its own high bit, whatever its carry does).
    let at_least = |c: u8| x.wrapping_add(ONES * u64::from(0x80 - c));
    let (zero, colon, a, past_f) = (
        at_least(b'0'),
        at_least(b'9' + 1),
        at_least(b'a'),
        at_least(b'f' + 1),
    );
    let letter = a & !past_f & HIGHS;
    // `0`–`9` or `a`–`f`: at least `0`, not from `:` below `a`, not past `f` (only the high
    // bits of the sums count, so they are masked once, at the end).
    let bad = (!(zero ^ colon ^ a ^ past_f) | x) & HIGHS;
    // A digit's value is its low nibble; a letter's is its low nibble plus 9.
    let nibbles = (x & (ONES * 0x0f)) + (letter >> 7) * 9;
    // Each 16-bit lane: first digit (low byte) times 16 plus the second (high byte).
    let pairs = ((nibbles << 4) | (nibbles >> 8)) & 0x00ff_00ff_00ff_00ff;
    // The four lanes' low bytes, packed.
    let packed = (pairs | pairs >> 8) & 0x0000_ffff_0000_ffff;
    ((packed | packed >> 16) as u32, bad)
}

/// Writes the lowercase hyphenated spelling of a UUID's bytes (four bytes at a time, the
/// inverse of [`canonical_uuid`]; hex digits and hyphens only, which JSON needs no escapes
/// for): reply lines copy it as it is.
pub(crate) fn spell_uuid(bytes: &[u8; 16], out: &mut [u8; 36]) {
    let b = bytes;
    let four = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let [w0, w1, w2, w3] = [
        hex_spelling(four(0)),
        hex_spelling(four(4)),
        hex_spelling(four(8)),
        hex_spelling(four(12)),
    ];
    out[0..8].copy_from_slice(&w0);
    out[9..13].copy_from_slice(&w1[..4]);
    out[14..18].copy_from_slice(&w1[4..]);
    out[19..23].copy_from_slice(&w2[..4]);
    out[24..28].copy_from_slice(&w2[4..]);
    out[28..36].copy_from_slice(&w3);
    for i in [8, 13, 18, 23] {
        out[i] = b'-';
    }
}

/// The eight lowercase hex digits of four bytes (the first byte's value is `v`'s lowest).
#[inline(always)]
fn hex_spelling(v: u32) -> [u8; 8] {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Each byte into the low half of its own 16-bit lane.
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    // Per lane: the high nibble first (low byte), the low nibble second.
    const LANE: u64 = 0x000f_000f_000f_000f;
    let nibbles = ((x >> 4) & LANE) | ((x & LANE) << 8);
    // Nibbles of ten and more are letters: `'a' - '0' - 10` past the digits.
    let letters = ((nibbles + ONES * 0x76) & HIGHS) >> 7;
    (nibbles + ONES * u64::from(b'0') + letters * 0x27).to_le_bytes()
}

impl RequestKey {
    /// Calls `f` with the request ID as it was sent (a UUID is spelled out on the stack, not
    /// allocated): a replay's reply line is written from its key.
    pub fn with_str<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match self {
            RequestKey::Uuid(b) => {
                let mut buf = [0u8; 36];
                spell_uuid(b, &mut buf);
                // Hex digits and hyphens only: always UTF-8.
                f(std::str::from_utf8(&buf).unwrap_or_default())
            }
            RequestKey::Text(s) => f(s),
        }
    }
}

impl fmt::Display for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_str(|id| f.write_str(id))
    }
}

impl fmt::Debug for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_keys_round_trip_and_others_stay_text() {
        let u = "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d";
        assert!(matches!(RequestKey::new(u), RequestKey::Uuid(_)));
        assert_eq!(RequestKey::new(u).to_string(), u);
        let upper = "9B1DEB4D-3B7D-4BAD-9BDD-2B0D7B3DCB6D";
        assert!(matches!(RequestKey::new(upper), RequestKey::Text(_)));
        assert_eq!(RequestKey::new(upper).to_string(), upper);
        assert_ne!(RequestKey::new(u), RequestKey::new(upper));
    }

    /// What the `uuid` crate says: a key is bytes exactly when the ID parses as a UUID and
    /// is that UUID's lowercase hyphenated spelling.
    fn by_the_uuid_crate(id: &str) -> Option<[u8; 16]> {
        let u = uuid::Uuid::try_parse(id).ok()?;
        let mut canonical = [0u8; uuid::fmt::Hyphenated::LENGTH];
        (u.hyphenated().encode_lower(&mut canonical).as_bytes() == id.as_bytes())
            .then(|| *u.as_bytes())
    }

    /// A UUID's bytes read one digit at a time.
    fn by_digits(s: &[u8]) -> Option<[u8; 16]> {
        const HYPHENS: [usize; 4] = [8, 13, 18, 23];
        if s.len() != 36 || HYPHENS.iter().any(|&i| s[i] != b'-') {
            return None;
        }
        let digits: Vec<u8> = (0..36)
            .filter(|i| !HYPHENS.contains(i))
            .map(|i| s[i])
            .collect();
        let value = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 16];
        for (k, byte) in out.iter_mut().enumerate() {
            *byte = value(digits[2 * k])? << 4 | value(digits[2 * k + 1])?;
        }
        Some(out)
    }

    proptest::proptest! {
        /// The word arithmetic reads digits as a digit-by-digit reading does, bytes next to
        /// the edges of the hex ranges and bytes of every value included.
        #[test]
        fn uuid_words_agree_with_a_digit_by_digit_reading(
            uuid_bytes in proptest::prelude::any::<[u8; 16]>(),
            changes in proptest::collection::vec(
                (
                    0usize..36,
                    proptest::prop_oneof![
                        proptest::sample::select(b"/:`gAF-0af9\x00\x7f\x80\xff".to_vec()),
                        proptest::prelude::any::<u8>(),
                    ],
                ),
                0..3,
            ),
        ) {
            let mut bytes = uuid::Uuid::from_bytes(uuid_bytes).hyphenated().to_string().into_bytes();
            for (at, b) in changes {
                bytes[at] = b;
            }
            proptest::prop_assert_eq!(canonical_uuid(&bytes), by_digits(&bytes));
        }

        #[test]
        fn keys_agree_with_the_uuid_crate(
            id in "[0-9a-fA-F-]{36}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-fA-F]{4}-[0-9a-f]{4}-[0-9a-g]{12}|[0-9a-f]{32}|[a-z0-9-]{0,40}",
            uuid_bytes in proptest::prelude::any::<[u8; 16]>(),
        ) {
            let want = by_the_uuid_crate(&id);
            match RequestKey::new(&id) {
                RequestKey::Uuid(b) => proptest::prop_assert_eq!(Some(b), want),
                RequestKey::Text(t) => {
                    proptest::prop_assert_eq!(want, None);
                    proptest::prop_assert_eq!(&*t, id.as_str());
                }
            }
            let spelled = uuid::Uuid::from_bytes(uuid_bytes).hyphenated().to_string();
            let key = RequestKey::new(&spelled);
            proptest::prop_assert!(matches!(key, RequestKey::Uuid(b) if b == uuid_bytes));
            proptest::prop_assert_eq!(key.to_string(), spelled.as_str());
            proptest::prop_assert_eq!(key.with_str(str::to_owned), spelled);
        }
    }
}
