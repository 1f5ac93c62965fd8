//! The file header and the block frame: magic, lengths and the CRC32C that makes a torn or
//! damaged write visible.

/// The first eight bytes of every journal file.
pub const MAGIC: [u8; 8] = *b"POLARISJ";
/// The format this build writes and reads. Version 2 added [`OVERLAPPED`] to block headers.
pub const FORMAT_VERSION: u32 = 2;
/// The older format this build also reads: version 1's blocks are version 2 blocks none of
/// which is marked (its length fields never have the bit; the CRC covers the same bytes).
/// Opening such a journal rewrites its header to [`FORMAT_VERSION`] before anything is appended.
pub const READS_VERSION: u32 = 1;
/// Bytes of the file header.
pub const HEADER_LEN: usize = 20;
/// The first four bytes of every block.
pub const BLOCK_MAGIC: [u8; 4] = *b"PJB1";
/// Bytes of a block header.
pub const BLOCK_HEADER_LEN: usize = 12;
/// The bit of a block header's length field that marks a block written while an earlier
/// write was not yet durable (two flushes in flight): a crash can leave such a block whole
/// after a torn one, and recovery then cuts both (see `scan.rs`).
pub const OVERLAPPED: u32 = 1 << 31;
/// The most writes the flusher has unfinished at once (each one block). Recovery trusts a
/// torn block followed by valid ones only when at most this many less one follow it, all
/// marked [`OVERLAPPED`]: more, or an unmarked one, means damage before the tail.
pub const MAX_UNFINISHED_WRITES: usize = 2;
/// The largest block payload the writer makes (bigger batches are split between appends).
pub const MAX_BLOCK_PAYLOAD: usize = 32 << 20;
/// The largest block payload a reader accepts: one append batch is at most this big.
pub const MAX_APPEND_BYTES: usize = 1 << 30;

/// The file header for `version`, naming no log (see [`header_of_log`]).
pub fn header(version: u32) -> [u8; HEADER_LEN] {
    header_of_log(version, 0)
}

/// The file header for `version` of the log named `log`: a random nonzero number given to each
/// log file when it is written (created or compacted), which `journal.end` names beside the
/// log's recorded end, so a log replaced by another file is told apart from the one recorded.
/// Stored in what version 2 first left reserved (written as zero, never read), so releases
/// that do not know it still read the file. 0: a log from before, named at its next open.
pub fn header_of_log(version: u32, log: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..16].copy_from_slice(&log.to_le_bytes());
    let crc = crc32c::crc32c(&h[..16]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What a file's first bytes say.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderCheck {
    /// A journal of this format.
    Ok,
    /// A journal of another format version.
    Version(u32),
    /// Not a journal, or a damaged header.
    Foreign,
}

/// Reads a file header.
pub fn check_header(h: &[u8]) -> HeaderCheck {
    if h.len() < HEADER_LEN || h[..8] != MAGIC {
        return HeaderCheck::Foreign;
    }
    let crc = u32::from_le_bytes(h[16..20].try_into().expect("4 bytes"));
    if crc != crc32c::crc32c(&h[..16]) {
        return HeaderCheck::Foreign;
    }
    match u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) {
        FORMAT_VERSION => HeaderCheck::Ok,
        other => HeaderCheck::Version(other),
    }
}

/// The log named in a header that [`check_header`] accepted (0: none yet).
pub fn header_log(h: &[u8]) -> u32 {
    u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"))
}

/// A fresh random name for a log file: nonzero.
pub fn new_log_name() -> u32 {
    loop {
        let n = uuid::Uuid::new_v4().as_u128() as u32;
        if n != 0 {
            return n;
        }
    }
}

/// The CRC of a block written at `offset` whose length field is `field` (the payload's length,
/// with [`OVERLAPPED`] when set) with `payload`.
pub fn block_crc(offset: u64, field: u32, payload: &[u8]) -> u32 {
    let mut pre = [0u8; 12];
    pre[..8].copy_from_slice(&offset.to_le_bytes());
    pre[8..].copy_from_slice(&field.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&pre), payload)
}

/// Fills in the header of a block whose payload follows it in `block`, to be written at
/// `offset`; `overlapped` when an earlier write may still be unfinished as it is written.
pub fn seal_block(offset: u64, block: &mut [u8], overlapped: bool) {
    let (head, payload) = block.split_at_mut(BLOCK_HEADER_LEN);
    let field = payload.len() as u32 | if overlapped { OVERLAPPED } else { 0 };
    let crc = block_crc(offset, field, payload);
    head[..4].copy_from_slice(&BLOCK_MAGIC);
    head[4..8].copy_from_slice(&field.to_le_bytes());
    head[8..12].copy_from_slice(&crc.to_le_bytes());
}

/// A block header as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHead {
    /// The payload's length.
    pub len: usize,
    /// The CRC the header states.
    pub crc: u32,
    /// The length field as written (the CRC covers it).
    pub field: u32,
    /// Written while an earlier write was not yet durable.
    pub overlapped: bool,
}

/// A block header as read: `None` when the bytes are not a block header.
pub fn block_len(head: &[u8]) -> Option<BlockHead> {
    if head.len() < BLOCK_HEADER_LEN || head[..4] != BLOCK_MAGIC {
        return None;
    }
    let field = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    let len = (field & !OVERLAPPED) as usize;
    (len > 0 && len <= MAX_APPEND_BYTES).then_some(BlockHead {
        len,
        crc,
        field,
        overlapped: field & OVERLAPPED != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_tell_versions_and_strangers_apart() {
        assert_eq!(check_header(&header(FORMAT_VERSION)), HeaderCheck::Ok);
        assert_eq!(check_header(&header(0)), HeaderCheck::Version(0));
        assert_eq!(check_header(&header(1)), HeaderCheck::Version(1));
        assert_eq!(
            check_header(&header(FORMAT_VERSION + 1)),
            HeaderCheck::Version(FORMAT_VERSION + 1)
        );
        let mut h = header(FORMAT_VERSION);
        h[12] ^= 1;
        assert_eq!(check_header(&h), HeaderCheck::Foreign);
        assert_eq!(check_header(b"{\"id\":1}\n"), HeaderCheck::Foreign);
    }
}
