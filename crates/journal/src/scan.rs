//! Reading a journal file block by block, and telling a torn tail from corruption.
//!
//! The flusher has at most [`MAX_UNFINISHED_WRITES`] writes unfinished at once (each one
//! block, the later ones marked [`format::OVERLAPPED`]), and it reports a write durable only once every
//! earlier one is. So a crash can damage only those last writes: a torn tail. After it there is
//! nothing, or zeros written ahead, or whole blocks of the later unfinished writes. When a block
//! is bad, the rest of the file decides: if the valid blocks after it are at most
//! `MAX_UNFINISHED_WRITES − 1`, each marked overlapped, they were written while it was
//! unfinished, no client was answered from them, and they are cut with it; any other valid
//! block after it means the damage is not a tail (something overwrote written data), and
//! opening stops with the file and offset.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::format::{
    self, BlockHead, BLOCK_HEADER_LEN, BLOCK_MAGIC, HEADER_LEN, MAX_UNFINISHED_WRITES,
};
use super::Error;

/// A torn tail: bytes after the last valid block that a crash left unfinished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutTail {
    /// Where the valid journal ends (the first byte cut).
    pub offset: u64,
    /// How many bytes follow it (to the end of the file).
    pub bytes: u64,
    /// What was wrong at `offset`.
    pub why: &'static str,
}

/// How a scan ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanEnd {
    /// Where the next block goes.
    pub end: u64,
    /// Blocks read.
    pub blocks: u64,
    /// A torn tail found after `end`, if any.
    pub tail: Option<CutTail>,
}

/// Buffered positional reads of one file.
struct Window<'a> {
    file: &'a File,
    path: &'a Path,
    /// The end of what is read (reads never go past it).
    limit: u64,
    buf: Vec<u8>,
    start: u64,
}

const READ_CHUNK: usize = 4 << 20;

impl<'a> Window<'a> {
    fn new(file: &'a File, path: &'a Path, limit: u64) -> Window<'a> {
        Window {
            file,
            path,
            limit,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The `n` bytes at `offset` (the caller made sure the file has them).
    fn get(&mut self, offset: u64, n: usize) -> Result<&[u8], Error> {
        let have = offset >= self.start && offset + n as u64 <= self.start + self.buf.len() as u64;
        if !have {
            let want = n.max(READ_CHUNK.min(self.limit.saturating_sub(offset) as usize));
            self.buf.clear();
            self.buf.resize(want, 0);
            let mut filled = 0;
            while filled < n {
                let got = self
                    .file
                    .read_at(&mut self.buf[filled..], offset + filled as u64)
                    .map_err(|source| Error::Io {
                        path: self.path.to_owned(),
                        op: "reading",
                        source,
                    })?;
                if got == 0 {
                    break;
                }
                filled += got;
            }
            if filled < n {
                return Err(Error::Io {
                    path: self.path.to_owned(),
                    op: "reading",
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                });
            }
            self.buf.truncate(filled);
            self.start = offset;
        }
        let at = (offset - self.start) as usize;
        Ok(&self.buf[at..at + n])
    }

    /// Whether every byte in `[from, to)` is zero.
    fn zeros(&mut self, mut from: u64, to: u64) -> Result<bool, Error> {
        while from < to {
            let n = ((to - from) as usize).min(READ_CHUNK);
            if self.get(from, n)?.iter().any(|b| *b != 0) {
                return Ok(false);
            }
            from += n as u64;
        }
        Ok(true)
    }

    /// The block at `offset` if it is whole and valid: its header.
    fn valid_block(&mut self, offset: u64, limit: u64) -> Result<Option<BlockHead>, Error> {
        if limit - offset < BLOCK_HEADER_LEN as u64 {
            return Ok(None);
        }
        let Some(head) = format::block_len(self.get(offset, BLOCK_HEADER_LEN)?) else {
            return Ok(None);
        };
        if (head.len as u64) > limit - offset - BLOCK_HEADER_LEN as u64 {
            return Ok(None);
        }
        let payload = self.get(offset + BLOCK_HEADER_LEN as u64, head.len)?;
        Ok((format::block_crc(offset, head.field, payload) == head.crc).then_some(head))
    }

    /// The first valid block starting after `offset`, if any, with its header.
    fn next_valid_block(
        &mut self,
        offset: u64,
        limit: u64,
    ) -> Result<Option<(u64, BlockHead)>, Error> {
        let finder = memchr::memmem::Finder::new(&BLOCK_MAGIC);
        let mut from = offset + 1;
        while from < limit {
            let n = ((limit - from) as usize).min(READ_CHUNK);
            let hits: Vec<u64> = finder
                .find_iter(self.get(from, n)?)
                .map(|i| from + i as u64)
                .collect();
            for at in hits {
                if let Some(head) = self.valid_block(at, limit)? {
                    return Ok(Some((at, head)));
                }
            }
            // Overlap by the magic's length less one, so a magic across chunks is seen.
            if from + n as u64 >= limit {
                break;
            }
            from += (n - (BLOCK_MAGIC.len() - 1)) as u64;
        }
        Ok(None)
    }
}

/// Reads the blocks of `file` from `from` (just after the header, or where an earlier scan
/// stopped) up to `limit`, calling `visit(offset, payload)` for each valid block in order.
/// Returns where the valid blocks end and any torn tail after them; corruption before the tail
/// is an error naming the file and offset.
pub fn scan(
    path: &Path,
    file: &File,
    from: u64,
    limit: u64,
    mut visit: impl FnMut(u64, &[u8]) -> Result<(), Error>,
) -> Result<ScanEnd, Error> {
    debug_assert!(from >= HEADER_LEN as u64);
    let mut w = Window::new(file, path, limit);
    let mut offset = from;
    let mut blocks = 0;
    let bad = loop {
        if offset >= limit {
            return Ok(ScanEnd {
                end: offset,
                blocks,
                tail: None,
            });
        }
        let remaining = limit - offset;
        if remaining < BLOCK_HEADER_LEN as u64 {
            break "an incomplete block header";
        }
        let head: [u8; BLOCK_HEADER_LEN] = w
            .get(offset, BLOCK_HEADER_LEN)?
            .try_into()
            .expect("a block header's length");
        if head.iter().all(|b| *b == 0) {
            // Zeros: the end of what was written, if only zeros (written ahead) follow.
            if w.zeros(offset, limit)? {
                return Ok(ScanEnd {
                    end: offset,
                    blocks,
                    tail: None,
                });
            }
            break "zeros where a block should start";
        }
        let Some(BlockHead { len, .. }) = format::block_len(&head) else {
            break "bytes that are not a block header";
        };
        if len as u64 > remaining - BLOCK_HEADER_LEN as u64 {
            break "a block longer than the rest of the file";
        }
        if w.valid_block(offset, limit)?.is_none() {
            break "a block whose checksum does not match";
        }
        let payload = w.get(offset + BLOCK_HEADER_LEN as u64, len)?;
        visit(offset, payload)?;
        blocks += 1;
        offset += (BLOCK_HEADER_LEN + len) as u64;
    };
    // Valid blocks after the bad one: only the other unfinished writes may be there.
    let (mut from, mut after) = (offset, 0);
    while let Some((next, head)) = w.next_valid_block(from, limit)? {
        after += 1;
        if !head.overlapped || after >= MAX_UNFINISHED_WRITES {
            let why = if head.overlapped {
                "more valid blocks follow it than writes can be unfinished at once"
            } else {
                "it was written after everything before it was durable"
            };
            return Err(Error::Corrupt {
                path: path.to_owned(),
                offset,
                what: format!(
                    "{bad} at byte offset {offset}, but a valid block follows at offset {next} ({why}): this is not an unfinished last write"
                ),
            });
        }
        from = next;
    }
    Ok(ScanEnd {
        end: offset,
        blocks,
        tail: Some(CutTail {
            offset,
            bytes: limit - offset,
            why: bad,
        }),
    })
}
