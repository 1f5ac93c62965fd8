//! The journal's bytes: the file header, commit blocks and the records inside them.
//!
//! ```text
//! file    = header block*
//! header  = "POLARISJ" version:u32le reserved:u32le crc:u32le       (20 bytes)
//! block   = "PJB1" len:u32le crc:u32le record{1..}                  (12 bytes + len)
//! record  = kind:u8 len:varint payload
//! ```
//!
//! A block is what the flusher writes with one `write` before one `fdatasync`: the unit that can
//! tear in a crash, so it is the unit the length and CRC32C cover (the CRC also covers the
//! block's own file offset, so a block is valid only where it was written). Inside, records are
//! hand-rolled binary: LEB128 varints, length-prefixed byte strings, request and task IDs that
//! are canonical UUIDs in 16 bytes. Compactness matters — a live receipt may cost at most its
//! canonical request + reply + 128 bytes — and so does decoding speed: a million receipts must
//! be read back in well under three seconds.
//!
//! The format's concerns each have a file: [`framing`] (the file header, block headers and
//! their checksums), [`records`] (what a record says), [`encode`] and [`decode`] (the record
//! bytes, one way each).

mod decode;
mod encode;
mod framing;
mod records;

#[cfg(test)]
mod tests;

pub use decode::{cleared_ids, BadRecord, Decoded, DecodedBegun, DecodedTask, IdRef, Reader};
pub use encode::{encode, put_varint, UnknownRun};
pub use framing::{
    block_crc, block_len, check_header, header, header_log, header_of_log, new_log_name,
    seal_block, BlockHead, HeaderCheck, BLOCK_HEADER_LEN, BLOCK_MAGIC, FORMAT_VERSION, HEADER_LEN,
    MAGIC, MAX_APPEND_BYTES, MAX_BLOCK_PAYLOAD, MAX_UNFINISHED_WRITES, OVERLAPPED, READS_VERSION,
};
pub use records::{
    Acknowledged, Begun, Cleared, ClearedId, Completed, Kind, Record, RequestPieces, TaskEvent,
    TaskRecord,
};

/// How an ID is tagged in record bytes: absent.
const ID_NONE: u8 = 0;
/// A canonical UUID in 16 bytes.
const ID_UUID: u8 = 1;
/// Any other ID, as length-prefixed text.
const ID_TEXT: u8 = 2;
