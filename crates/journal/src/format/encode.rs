//! Records to bytes: `kind len payload`, LEB128 varints and length-prefixed strings.

use super::records::{Begun, Record, TaskEvent};
use super::{ID_NONE, ID_TEXT, ID_UUID};
use crate::book::RequestKey;

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
    put_varint(out, b.request.len() as u64);
    for piece in b.request.0 {
        out.extend_from_slice(piece.as_bytes());
    }
}

/// A record named a run no [`Record::RunStarted`] introduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownRun(pub String);
