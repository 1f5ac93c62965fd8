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
}

/// Where the 16 byte pairs of a hyphenated UUID start (`8-4-4-4-12` hex digits).
const HEX_PAIRS: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/// Each byte's value as a lowercase hex digit, or [`NOT_HEX`].
static HEX_VALUE: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// [`HEX_VALUE`] of a byte that is no lowercase hex digit (a bit no digit's value has).
const NOT_HEX: u8 = 0x10;

/// The bytes of a lowercase hyphenated UUID, or `None` for any other text. Every digit is
/// looked up and the misfits are noted, with no branch per digit.
fn canonical_uuid(s: &[u8]) -> Option<[u8; 16]> {
    if s.len() != 36 || s[8] != b'-' || s[13] != b'-' || s[18] != b'-' || s[23] != b'-' {
        return None;
    }
    let mut out = [0u8; 16];
    let mut misfit = 0;
    for (byte, &at) in out.iter_mut().zip(&HEX_PAIRS) {
        let (hi, lo) = (
            HEX_VALUE[usize::from(s[at])],
            HEX_VALUE[usize::from(s[at + 1])],
        );
        misfit |= hi | lo;
        *byte = hi << 4 | lo;
    }
    (misfit & NOT_HEX == 0).then_some(out)
}

/// Writes the lowercase hyphenated spelling of a UUID's bytes (hex digits and hyphens only,
/// which JSON needs no escapes for: a reply line copies it as it is).
pub(crate) fn spell_uuid(bytes: &[u8; 16], out: &mut [u8; 36]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for i in [8, 13, 18, 23] {
        out[i] = b'-';
    }
    for (&b, &at) in bytes.iter().zip(&HEX_PAIRS) {
        out[at] = DIGITS[usize::from(b >> 4)];
        out[at + 1] = DIGITS[usize::from(b & 0xf)];
    }
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

    proptest::proptest! {
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
