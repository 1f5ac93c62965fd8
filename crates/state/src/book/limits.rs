//! The book's two bounds (count and bytes), and what a receipt is charged against them.

pub use crate::ids::RequestKey;

/// Which bound of the book a new receipt would pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `--capacity`: the count of receipts.
    Count,
    /// `--max-book-bytes`: the bytes they hold.
    Bytes,
}

impl Limit {
    /// The name `details.limit` carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Count => "count",
            Limit::Bytes => "bytes",
        }
    }
}

/// Why a new receipt could not be created.
#[derive(Debug, PartialEq, Eq)]
pub struct BookFull {
    /// The bound the receipt would pass (the count first, when both are reached).
    pub limit: Limit,
    /// The hard capacity.
    pub capacity: usize,
    /// Receipts held now.
    pub used: usize,
    /// Bytes held now.
    pub used_bytes: usize,
    /// The byte bound.
    pub max_bytes: usize,
}

/// What every receipt costs beyond the bytes of its request, reply and textual ID: its table
/// entry (key, hash, index, the receipt's fields) and the allocations of its request and
/// shared reply. Measured by `the_per_receipt_overhead_covers_the_receipt_table`.
pub const RECEIPT_OVERHEAD_BYTES: usize = 256;

/// Default `--max-book-bytes`: 1 GiB.
pub const DEFAULT_MAX_BOOK_BYTES: usize = 1 << 30;

/// The bytes a running receipt holds for the reply it does not have yet: an action's reply
/// repeats at most what its request carries (a filled value, an expectation) and a message, so
/// the book's bound holds for the replies still to come, not only for those stored.
pub(super) fn reply_reservation(request_len: usize) -> usize {
    2 * request_len + 1024
}

/// The bytes a receipt counts against `--max-book-bytes`: its canonical request, its stored
/// reply body (or, while it runs, [`reply_reservation`]), a request ID kept as text, and
/// [`RECEIPT_OVERHEAD_BYTES`]. A reply several receipts share (fills that replied the same)
/// is counted for each of them, so the bound holds whoever keeps the shared copy alive.
pub(super) fn receipt_bytes(
    key: &RequestKey,
    request_len: usize,
    reply_len: Option<usize>,
) -> usize {
    let key_bytes = match key {
        RequestKey::Text(t) => t.len(),
        RequestKey::Uuid(_) => 0,
    };
    let reply = reply_len.unwrap_or_else(|| reply_reservation(request_len));
    RECEIPT_OVERHEAD_BYTES + key_bytes + request_len + reply
}
