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
    pub fn new(id: &str) -> RequestKey {
        if id.len() == 36 {
            if let Ok(u) = uuid::Uuid::try_parse(id) {
                // Only the canonical spelling round-trips; keep anything else as text.
                let mut canonical = [0u8; uuid::fmt::Hyphenated::LENGTH];
                if u.hyphenated().encode_lower(&mut canonical).as_bytes() == id.as_bytes() {
                    return RequestKey::Uuid(*u.as_bytes());
                }
            }
        }
        RequestKey::Text(id.into())
    }
}

impl fmt::Display for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestKey::Uuid(b) => fmt::Display::fmt(&uuid::Uuid::from_bytes(*b).hyphenated(), f),
            RequestKey::Text(s) => f.write_str(s),
        }
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
}
