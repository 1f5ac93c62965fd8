//! Bytes to records, borrowing from the block read; every malformed input is an error, never
//! a panic.

use super::records::{Kind, TaskEvent};
use super::{ID_NONE, ID_TEXT, ID_UUID};
use crate::book::{FingerprintDigest, RequestKey};

/// A decoded ID: UUIDs come back as their canonical text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IdRef<'a> {
    /// A canonical UUID's bytes.
    Uuid([u8; 16]),
    /// Any other ID.
    Text(&'a str),
}

impl IdRef<'_> {
    /// As a request key.
    pub fn key(&self) -> RequestKey {
        match self {
            IdRef::Uuid(b) => RequestKey::Uuid(*b),
            IdRef::Text(s) => RequestKey::Text((*s).into()),
        }
    }
}

impl std::fmt::Display for IdRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdRef::Uuid(b) => std::fmt::Display::fmt(&uuid::Uuid::from_bytes(*b).hyphenated(), f),
            IdRef::Text(s) => f.write_str(s),
        }
    }
}

/// A record as decoded: like [`Record`], with IDs as [`IdRef`] and runs as indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// See [`Record::RunStarted`].
    RunStarted {
        /// The run's ID.
        run_id: IdRef<'a>,
        /// When it started.
        started_at: i64,
    },
    /// See [`Record::ReceiptBegun`].
    ReceiptBegun(DecodedBegun<'a>),
    /// See [`Record::ReceiptCompleted`].
    ReceiptCompleted {
        /// The request ID.
        request_id: IdRef<'a>,
        /// The stored reply.
        reply: &'a [u8],
        /// When it completed.
        at: i64,
    },
    /// See [`Record::ReceiptStored`]: the begun part, the reply and the completion time.
    ReceiptStored(DecodedBegun<'a>, &'a [u8], i64),
    /// See [`Record::ReceiptsCleared`]; the IDs are read with [`cleared_ids`].
    ReceiptsCleared {
        /// When.
        at: i64,
        /// Why.
        reason: &'a str,
        /// Who.
        operator: &'a str,
        /// How many IDs.
        count: usize,
        /// The encoded IDs.
        ids: &'a [u8],
    },
    /// See [`Record::OutcomeAcknowledged`].
    OutcomeAcknowledged {
        /// The receipt.
        request_id: IdRef<'a>,
        /// Why.
        reason: &'a str,
        /// Who.
        operator: &'a str,
        /// When.
        at: i64,
    },
    /// See [`Record::Task`].
    Task(DecodedTask<'a>),
}

/// The begun part of a receipt record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedBegun<'a> {
    /// The request ID.
    pub request_id: IdRef<'a>,
    /// Index of the run among the journal's run records.
    pub run: u32,
    /// First seen.
    pub at: i64,
    /// The method.
    pub method: &'a str,
    /// The task.
    pub task_id: Option<IdRef<'a>>,
    /// The canonical request.
    pub request: &'a str,
}

/// A decoded task record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedTask<'a> {
    /// Started, updated or closed.
    pub event: TaskEvent,
    /// The task's ID.
    pub task_id: IdRef<'a>,
    /// Index of its run.
    pub run: u32,
    /// When the task was created.
    pub created_at: i64,
    /// When.
    pub at: i64,
    /// Title.
    pub title: &'a str,
    /// State.
    pub state: &'a str,
    /// Pending outcome bytes (empty: none).
    pub pending: &'a [u8],
    /// Host-owned details.
    pub detail: &'a [u8],
    /// When closed.
    pub closed_at: Option<i64>,
}

/// Why a record could not be decoded (its block's CRC was right: a bug or another format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord(pub &'static str);

/// A cursor over bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads `buf` from its start.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes read so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn u8(&mut self) -> Result<u8, BadRecord> {
        let b = *self.buf.get(self.pos).ok_or(BadRecord("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, BadRecord> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(BadRecord("varint too long"))
    }

    fn time(&mut self) -> Result<i64, BadRecord> {
        let z = self.varint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], BadRecord> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or(BadRecord("truncated"))?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    fn bytes(&mut self) -> Result<&'a [u8], BadRecord> {
        let n = self.varint()?;
        self.take(usize::try_from(n).map_err(|_| BadRecord("length"))?)
    }

    fn str(&mut self) -> Result<&'a str, BadRecord> {
        std::str::from_utf8(self.bytes()?).map_err(|_| BadRecord("text is not UTF-8"))
    }

    fn id(&mut self) -> Result<Option<IdRef<'a>>, BadRecord> {
        match self.u8()? {
            ID_NONE => Ok(None),
            ID_UUID => Ok(Some(IdRef::Uuid(
                self.take(16)?.try_into().expect("16 bytes"),
            ))),
            ID_TEXT => Ok(Some(IdRef::Text(self.str()?))),
            _ => Err(BadRecord("bad id tag")),
        }
    }

    fn some_id(&mut self) -> Result<IdRef<'a>, BadRecord> {
        self.id()?.ok_or(BadRecord("missing id"))
    }

    fn run(&mut self) -> Result<u32, BadRecord> {
        u32::try_from(self.varint()?).map_err(|_| BadRecord("run index"))
    }

    /// Reads the next record: its kind, its encoded length, and the record.
    pub fn record(&mut self) -> Result<(Kind, usize, Decoded<'a>), BadRecord> {
        let start = self.pos;
        let kind = Kind::from_u8(self.u8()?).ok_or(BadRecord("unknown record kind"))?;
        let body = self.bytes()?;
        let len = self.pos - start;
        let mut r = Reader::new(body);
        let d = match kind {
            Kind::RunStarted => Decoded::RunStarted {
                run_id: r.some_id()?,
                started_at: r.time()?,
            },
            Kind::ReceiptBegun => Decoded::ReceiptBegun(r.begun()?),
            Kind::ReceiptCompleted => Decoded::ReceiptCompleted {
                request_id: r.some_id()?,
                at: r.time()?,
                reply: r.bytes()?,
            },
            Kind::ReceiptStored => {
                let b = r.begun()?;
                let at = r.time()?;
                Decoded::ReceiptStored(b, r.bytes()?, at)
            }
            Kind::ReceiptsCleared => {
                let at = r.time()?;
                let reason = r.str()?;
                let operator = r.str()?;
                let count = usize::try_from(r.varint()?).map_err(|_| BadRecord("count"))?;
                let ids = &body[r.pos..];
                // Validate the IDs now, so later readers of them cannot fail.
                let mut n = 0;
                let mut ir = Reader::new(ids);
                while !ir.is_empty() {
                    ir.some_id()?;
                    ir.take(16)?;
                    n += 1;
                }
                if n != count {
                    return Err(BadRecord("cleared id count"));
                }
                r.pos = body.len();
                Decoded::ReceiptsCleared {
                    at,
                    reason,
                    operator,
                    count,
                    ids,
                }
            }
            Kind::OutcomeAcknowledged => Decoded::OutcomeAcknowledged {
                request_id: r.some_id()?,
                at: r.time()?,
                reason: r.str()?,
                operator: r.str()?,
            },
            Kind::Task => {
                let event = match r.u8()? {
                    0 => TaskEvent::Started,
                    1 => TaskEvent::Updated,
                    2 => TaskEvent::Closed,
                    _ => return Err(BadRecord("task event")),
                };
                Decoded::Task(DecodedTask {
                    event,
                    task_id: r.some_id()?,
                    run: r.run()?,
                    created_at: r.time()?,
                    at: r.time()?,
                    title: r.str()?,
                    state: r.str()?,
                    pending: r.bytes()?,
                    detail: r.bytes()?,
                    closed_at: match r.u8()? {
                        0 => None,
                        1 => Some(r.time()?),
                        _ => return Err(BadRecord("closed flag")),
                    },
                })
            }
        };
        if !r.is_empty() {
            return Err(BadRecord("trailing bytes in record"));
        }
        Ok((kind, len, d))
    }

    fn begun(&mut self) -> Result<DecodedBegun<'a>, BadRecord> {
        Ok(DecodedBegun {
            request_id: self.some_id()?,
            run: self.run()?,
            at: self.time()?,
            method: self.str()?,
            task_id: self.id()?,
            request: self.str()?,
        })
    }
}

/// The IDs of a decoded [`Decoded::ReceiptsCleared`] (already validated by the decoder).
pub fn cleared_ids(ids: &[u8]) -> impl Iterator<Item = (IdRef<'_>, FingerprintDigest)> {
    let mut r = Reader::new(ids);
    std::iter::from_fn(move || {
        if r.is_empty() {
            return None;
        }
        let id = r.some_id().ok()?;
        let digest = r.take(16).ok()?.try_into().ok()?;
        Some((id, digest))
    })
}
