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

use crate::book::{FingerprintDigest, RequestKey};

/// The first eight bytes of every journal file.
pub const MAGIC: [u8; 8] = *b"POLARISJ";
/// The format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the file header.
pub const HEADER_LEN: usize = 20;
/// The first four bytes of every block.
pub const BLOCK_MAGIC: [u8; 4] = *b"PJB1";
/// Bytes of a block header.
pub const BLOCK_HEADER_LEN: usize = 12;
/// The largest block payload the writer makes (bigger batches are split between appends).
pub const MAX_BLOCK_PAYLOAD: usize = 32 << 20;
/// The largest block payload a reader accepts: one append batch is at most this big.
pub const MAX_APPEND_BYTES: usize = 1 << 30;

/// The file header for `version`.
pub fn header(version: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&version.to_le_bytes());
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

/// The CRC of a block written at `offset` with `payload`.
pub fn block_crc(offset: u64, payload: &[u8]) -> u32 {
    let mut pre = [0u8; 12];
    pre[..8].copy_from_slice(&offset.to_le_bytes());
    pre[8..].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&pre), payload)
}

/// Fills in the header of a block whose payload follows it in `block`, to be written at `offset`.
pub fn seal_block(offset: u64, block: &mut [u8]) {
    let (head, payload) = block.split_at_mut(BLOCK_HEADER_LEN);
    let crc = block_crc(offset, payload);
    head[..4].copy_from_slice(&BLOCK_MAGIC);
    head[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    head[8..12].copy_from_slice(&crc.to_le_bytes());
}

/// A block header as read: `None` when the bytes are not a block header.
pub fn block_len(head: &[u8]) -> Option<(usize, u32)> {
    if head.len() < BLOCK_HEADER_LEN || head[..4] != BLOCK_MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    (len > 0 && len <= MAX_APPEND_BYTES).then_some((len, crc))
}

/// The record kinds, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// [`Record::RunStarted`]
    RunStarted = 1,
    /// [`Record::ReceiptBegun`]
    ReceiptBegun = 2,
    /// [`Record::ReceiptCompleted`]
    ReceiptCompleted = 3,
    /// [`Record::ReceiptStored`]
    ReceiptStored = 4,
    /// [`Record::ReceiptsCleared`]
    ReceiptsCleared = 5,
    /// [`Record::OutcomeAcknowledged`]
    OutcomeAcknowledged = 6,
    /// [`Record::Task`]
    Task = 7,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::RunStarted,
            2 => Kind::ReceiptBegun,
            3 => Kind::ReceiptCompleted,
            4 => Kind::ReceiptStored,
            5 => Kind::ReceiptsCleared,
            6 => Kind::OutcomeAcknowledged,
            7 => Kind::Task,
            _ => return None,
        })
    }
}

/// What happened to a task, as a task record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskEvent {
    /// The task was created.
    Started,
    /// Its state, pending outcome or details changed.
    Updated,
    /// It was finished or stopped.
    Closed,
}

/// A receipt's creation: durable before the executor is asked to act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Begun<'a> {
    /// The request ID.
    pub request_id: &'a RequestKey,
    /// The run that created the receipt (named by a [`Record::RunStarted`] earlier in the journal).
    pub run_id: &'a str,
    /// The method's wire name.
    pub method: &'a str,
    /// The task it acts on, if any.
    pub task_id: Option<&'a str>,
    /// The canonical `{method, params}`: the fingerprint.
    pub request: &'a str,
    /// When it was first seen (epoch ms).
    pub at: i64,
}

/// A receipt's stored reply: durable before the reply reaches any client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed<'a> {
    /// The request ID.
    pub request_id: &'a RequestKey,
    /// The stored reply exactly as the host keeps it (opaque bytes here).
    pub reply: &'a [u8],
    /// When the execution finished (epoch ms).
    pub at: i64,
}

/// One cleared receipt: what its tombstone keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClearedId {
    /// The request ID.
    pub request_id: RequestKey,
    /// The digest of its canonical request.
    pub digest: FingerprintDigest,
}

/// One operator clear: its receipts become tombstones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cleared<'a> {
    /// When the clear was committed (epoch ms).
    pub at: i64,
    /// The operator's reason.
    pub reason: &'a str,
    /// Who cleared (the audit log's operator).
    pub operator: &'a str,
    /// The receipts cleared.
    pub ids: &'a [ClearedId],
}

/// An operator's record that an uncertain outcome was settled outside Polaris.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acknowledged<'a> {
    /// The receipt whose outcome was settled.
    pub request_id: &'a RequestKey,
    /// Why.
    pub reason: &'a str,
    /// Who.
    pub operator: &'a str,
    /// When (epoch ms).
    pub at: i64,
}

/// A task's latest state. The host owns the shape of `pending` and `detail` (JSON, opaque here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRecord<'a> {
    /// Started, updated or closed.
    pub event: TaskEvent,
    /// The task's ID.
    pub task_id: &'a str,
    /// The run the task belongs to.
    pub run_id: &'a str,
    /// When the task was created (epoch ms).
    pub created_at: i64,
    /// When this record was made (epoch ms).
    pub at: i64,
    /// The task's title.
    pub title: &'a str,
    /// The task's state's wire name.
    pub state: &'a str,
    /// The pending outcome(s), as the host serializes them; empty for none.
    pub pending: &'a [u8],
    /// Anything else the host keeps about the task (URL, stop reason, history…); may be empty.
    pub detail: &'a [u8],
    /// When the task was closed (epoch ms).
    pub closed_at: Option<i64>,
}

/// One journal record. Appends borrow their data; decoding borrows from the block read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A host run started; receipts and tasks name their run by this record.
    RunStarted {
        /// The run's ID.
        run_id: &'a str,
        /// When it started (epoch ms).
        started_at: i64,
    },
    /// A receipt was created.
    ReceiptBegun(Begun<'a>),
    /// A receipt's reply was stored.
    ReceiptCompleted(Completed<'a>),
    /// A receipt created and completed in one record (what compaction writes; also fits a
    /// receipt the host completes in the same critical section that created it).
    ReceiptStored(Begun<'a>, Completed<'a>),
    /// Receipts were cleared by an operator.
    ReceiptsCleared(Cleared<'a>),
    /// An uncertain outcome was acknowledged by an operator.
    OutcomeAcknowledged(Acknowledged<'a>),
    /// A task started, changed or closed.
    Task(TaskRecord<'a>),
}

impl Record<'_> {
    /// The record's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Record::RunStarted { .. } => Kind::RunStarted,
            Record::ReceiptBegun(_) => Kind::ReceiptBegun,
            Record::ReceiptCompleted(_) => Kind::ReceiptCompleted,
            Record::ReceiptStored(..) => Kind::ReceiptStored,
            Record::ReceiptsCleared(_) => Kind::ReceiptsCleared,
            Record::OutcomeAcknowledged(_) => Kind::OutcomeAcknowledged,
            Record::Task(_) => Kind::Task,
        }
    }
}

// ---- encoding ----

/// Appends a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_time(out: &mut Vec<u8>, t: i64) {
    put_varint(out, ((t << 1) ^ (t >> 63)) as u64);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

const ID_NONE: u8 = 0;
const ID_UUID: u8 = 1;
const ID_TEXT: u8 = 2;

fn put_key(out: &mut Vec<u8>, key: &RequestKey) {
    match key {
        RequestKey::Uuid(b) => {
            out.push(ID_UUID);
            out.extend_from_slice(b);
        }
        RequestKey::Text(s) => {
            out.push(ID_TEXT);
            put_bytes(out, s.as_bytes());
        }
    }
}

/// Task and run IDs: a canonical UUID in 16 bytes, anything else as text.
fn put_id(out: &mut Vec<u8>, id: Option<&str>) {
    match id {
        None => out.push(ID_NONE),
        Some(id) => put_key(out, &RequestKey::new(id)),
    }
}

/// Appends `record` as `kind len payload`. `run` maps a run ID to its index among the
/// journal's run records; `None` means the run is unknown.
pub fn encode(
    out: &mut Vec<u8>,
    record: &Record<'_>,
    run: impl Fn(&str) -> Option<u32>,
) -> Result<(), UnknownRun> {
    let start = out.len();
    out.push(record.kind() as u8);
    // Room for the length, fixed up below (most records need one or two bytes).
    out.extend_from_slice(&[0, 0]);
    let body = out.len();
    let run_index = |r: &str| run(r).ok_or_else(|| UnknownRun(r.to_owned()));
    match record {
        Record::RunStarted { run_id, started_at } => {
            put_id(out, Some(run_id));
            put_time(out, *started_at);
        }
        Record::ReceiptBegun(b) => put_begun(out, b, run_index(b.run_id)?),
        Record::ReceiptCompleted(c) => {
            put_key(out, c.request_id);
            put_time(out, c.at);
            put_bytes(out, c.reply);
        }
        Record::ReceiptStored(b, c) => {
            put_begun(out, b, run_index(b.run_id)?);
            put_time(out, c.at);
            put_bytes(out, c.reply);
        }
        Record::ReceiptsCleared(c) => {
            put_time(out, c.at);
            put_bytes(out, c.reason.as_bytes());
            put_bytes(out, c.operator.as_bytes());
            put_varint(out, c.ids.len() as u64);
            for id in c.ids {
                put_key(out, &id.request_id);
                out.extend_from_slice(&id.digest);
            }
        }
        Record::OutcomeAcknowledged(a) => {
            put_key(out, a.request_id);
            put_time(out, a.at);
            put_bytes(out, a.reason.as_bytes());
            put_bytes(out, a.operator.as_bytes());
        }
        Record::Task(t) => {
            out.push(match t.event {
                TaskEvent::Started => 0,
                TaskEvent::Updated => 1,
                TaskEvent::Closed => 2,
            });
            put_id(out, Some(t.task_id));
            put_varint(out, run_index(t.run_id)? as u64);
            put_time(out, t.created_at);
            put_time(out, t.at);
            put_bytes(out, t.title.as_bytes());
            put_bytes(out, t.state.as_bytes());
            put_bytes(out, t.pending);
            put_bytes(out, t.detail);
            match t.closed_at {
                None => out.push(0),
                Some(at) => {
                    out.push(1);
                    put_time(out, at);
                }
            }
        }
    }
    // Fix up the length: two bytes hold up to 16383; longer payloads shift right.
    let len = out.len() - body;
    let mut prefix = Vec::with_capacity(5);
    put_varint(&mut prefix, len as u64);
    match prefix.len() {
        1 => {
            out[start + 1] = prefix[0];
            out.remove(start + 2);
        }
        2 => out[start + 1..start + 3].copy_from_slice(&prefix),
        n => {
            out.splice(start + 1..start + 3, prefix.iter().copied());
            debug_assert!(n > 2);
        }
    }
    Ok(())
}

fn put_begun(out: &mut Vec<u8>, b: &Begun<'_>, run: u32) {
    put_key(out, b.request_id);
    put_varint(out, run as u64);
    put_time(out, b.at);
    put_bytes(out, b.method.as_bytes());
    put_id(out, b.task_id);
    put_bytes(out, b.request.as_bytes());
}

/// A record named a run no [`Record::RunStarted`] introduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownRun(pub String);

// ---- decoding ----

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

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(r: &str) -> Option<u32> {
        (r == "run-a").then_some(0)
    }

    fn round_trip(rec: &Record<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, rec, runs).unwrap();
        let mut r = Reader::new(&out);
        let (kind, len, _) = r.record().unwrap();
        assert_eq!(kind, rec.kind());
        assert_eq!(len, out.len());
        assert!(r.is_empty());
        out
    }

    #[test]
    fn records_round_trip_and_length_prefixes_of_every_size_fit() {
        let key = RequestKey::new("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d");
        for n in [
            0usize, 1, 100, 126, 127, 128, 16_000, 16_383, 16_384, 3_000_000,
        ] {
            let reply = vec![b'x'; n];
            let c = Completed {
                request_id: &key,
                reply: &reply,
                at: 1_700_000_000_123,
            };
            let bytes = round_trip(&Record::ReceiptCompleted(c.clone()));
            match Reader::new(&bytes).record().unwrap().2 {
                Decoded::ReceiptCompleted {
                    request_id,
                    reply,
                    at,
                } => {
                    assert_eq!(request_id.key(), key);
                    assert_eq!(reply.len(), n);
                    assert_eq!(at, c.at);
                }
                other => panic!("{other:?}"),
            }
        }
        let text = RequestKey::new("my-own:id.1");
        let b = Begun {
            request_id: &text,
            run_id: "run-a",
            method: "page.fill",
            task_id: Some("3f1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"),
            request: r#"{"method":"page.fill","params":{}}"#,
            at: -5,
        };
        let bytes = round_trip(&Record::ReceiptBegun(b.clone()));
        let Decoded::ReceiptBegun(d) = Reader::new(&bytes).record().unwrap().2 else {
            panic!()
        };
        assert_eq!(d.request_id, IdRef::Text("my-own:id.1"));
        assert_eq!(
            d.task_id.unwrap().to_string(),
            "3f1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"
        );
        assert_eq!(
            (d.at, d.method, d.request, d.run),
            (-5, b.method, b.request, 0)
        );
        let ids = [
            ClearedId {
                request_id: key.clone(),
                digest: [7; 16],
            },
            ClearedId {
                request_id: text.clone(),
                digest: [9; 16],
            },
        ];
        let bytes = round_trip(&Record::ReceiptsCleared(Cleared {
            at: 1,
            reason: "done",
            operator: "ops",
            ids: &ids,
        }));
        let Decoded::ReceiptsCleared {
            ids: raw, count, ..
        } = Reader::new(&bytes).record().unwrap().2
        else {
            panic!()
        };
        assert_eq!(count, 2);
        let back: Vec<_> = cleared_ids(raw).map(|(i, d)| (i.key(), d)).collect();
        assert_eq!(back, vec![(key.clone(), [7; 16]), (text.clone(), [9; 16])]);
        round_trip(&Record::Task(TaskRecord {
            event: TaskEvent::Closed,
            task_id: "t",
            run_id: "run-a",
            created_at: 1,
            at: 3,
            title: "ttl",
            state: "stopped",
            pending: b"[1]",
            detail: b"",
            closed_at: Some(3),
        }));
        round_trip(&Record::OutcomeAcknowledged(Acknowledged {
            request_id: &key,
            reason: "checked by hand",
            operator: "me",
            at: 4,
        }));
        let mut out = Vec::new();
        assert_eq!(
            encode(
                &mut out,
                &Record::ReceiptBegun(Begun {
                    run_id: "nope",
                    ..b
                }),
                runs
            ),
            Err(UnknownRun("nope".into()))
        );
    }

    proptest::proptest! {
        /// A block whose checksum matched but whose bytes are nonsense (a bug, or a writer of
        /// another format under the same version) is an error, never a panic.
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let mut r = Reader::new(&bytes);
            while !r.is_empty() {
                match r.record() {
                    Ok((_, len, Decoded::ReceiptsCleared { ids, count, .. })) => {
                        proptest::prop_assert!(len > 0);
                        proptest::prop_assert_eq!(cleared_ids(ids).count(), count);
                    }
                    Ok((_, len, _)) => proptest::prop_assert!(len > 0),
                    Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn headers_tell_versions_and_strangers_apart() {
        assert_eq!(check_header(&header(FORMAT_VERSION)), HeaderCheck::Ok);
        assert_eq!(check_header(&header(0)), HeaderCheck::Version(0));
        assert_eq!(check_header(&header(2)), HeaderCheck::Version(2));
        let mut h = header(FORMAT_VERSION);
        h[12] ^= 1;
        assert_eq!(check_header(&h), HeaderCheck::Foreign);
        assert_eq!(check_header(b"{\"id\":1}\n"), HeaderCheck::Foreign);
    }
}
