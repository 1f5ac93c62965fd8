//! Replies: what a client reads back, and the stored body a receipt keeps so that a replay is
//! the first reply byte for byte.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ErrorBody, ErrorCode};
use crate::ids::{spell_uuid, RequestKey};

/// `meta.receipt`: how this reply relates to the receipt book.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    /// Executed now; a receipt was created.
    New,
    /// The same ID and content arrived while the first was running; this is its reply.
    Joined,
    /// The same ID and content after completion; the stored reply.
    Replayed,
    /// Nothing stored: a read, or a rejection.
    None,
}

impl ReceiptKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptKind::New => "new",
            ReceiptKind::Joined => "joined",
            ReceiptKind::Replayed => "replayed",
            ReceiptKind::None => "none",
        }
    }
}

/// `meta` of a reply: which run answered and how the reply relates to the receipt book, so a
/// caller can tell a replay from a fresh execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The host run that answered; a different one means the book was not the same.
    pub run_id: String,
    /// How this reply relates to the receipt book.
    pub receipt: ReceiptKind,
}

/// A reply as a client reads it. The host never builds one: it writes reply lines straight from
/// an [`Outcome`] ([`Outcome::reply_line`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The request's `id`, or `null` when it could not be read.
    pub id: Option<String>,
    /// `true` with `result`, `false` with `error`.
    pub ok: bool,
    /// The method's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Run and receipt information; absent on replies written by a client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

/// The stored part of a reply, `"ok":…,"result"|"error":…`, already serialised so that a replay
/// is byte-for-byte the first reply and costs no serialisation.
///
/// It is only ever made shared, as an `Arc<Outcome>` ([`Outcome::of`]): the code and the body
/// are one allocation with the reference counts, so a stored reply costs one allocation, not
/// one for the shared part and one for its text.
#[derive(Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Outcome {
    /// The error code when `ok` is false.
    pub code: Option<ErrorCode>,
    /// The JSON members `ok` and `result` or `error`, without braces.
    pub body: str,
}

// `Outcome::of` writes the code as one byte.
const _: () = assert!(std::mem::size_of::<Option<ErrorCode>>() == 1);

impl Outcome {
    /// A successful result.
    pub fn ok<T: Serialize + ?Sized>(result: &T) -> Arc<Outcome> {
        stored(b"\"ok\":true,\"result\":", result, None)
    }

    /// An error result.
    pub fn err(error: &ErrorBody) -> Arc<Outcome> {
        stored(b"\"ok\":false,\"error\":", error, Some(error.code))
    }

    /// The outcome whose body is `body` (a stored body read back, from the journal or the
    /// fleet's ledger): `code` must be the body's error code.
    pub fn of(code: Option<ErrorCode>, body: &str) -> Arc<Outcome> {
        Outcome::of_parts(code, &[body])
    }

    /// The outcome whose body is `parts` one after the other, written straight into its one
    /// allocation.
    pub fn of_parts(code: Option<ErrorCode>, parts: &[&str]) -> Arc<Outcome> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        // SAFETY: `Option<ErrorCode>` is one byte (asserted above) and has no padding, so its
        // value read as a `u8` is an initialised byte.
        let tag = unsafe { std::mem::transmute::<Option<ErrorCode>, u8>(code) };
        let mut bytes = Arc::<[u8]>::new_uninit_slice(1 + len);
        let out = Arc::get_mut(&mut bytes).expect("a new Arc is not shared");
        out[0].write(tag);
        let mut at = 1;
        for p in parts {
            // SAFETY: `out` holds `1 + len` bytes and the parts, `len` bytes in all, are
            // written after the first one, each after the one before.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    p.as_ptr(),
                    out.as_mut_ptr().add(at).cast::<u8>(),
                    p.len(),
                );
            }
            at += p.len();
        }
        // SAFETY: every byte was written just above.
        let bytes = unsafe { bytes.assume_init() };
        let raw = Arc::into_raw(bytes).cast::<u8>();
        // SAFETY: `Outcome` is `repr(C)` with alignment 1: its one-byte code, then the body's
        // bytes. So an `Outcome` with a body of `len` bytes has the size and alignment of the
        // `1 + len` bytes just written (and the shared allocation the same layout); a pointer
        // to it carries its body's length. The first byte is a valid `Option<ErrorCode>`
        // (written from one), the rest is UTF-8 (copied from `&str`s).
        unsafe { Arc::from_raw(std::ptr::slice_from_raw_parts(raw, len) as *const Outcome) }
    }

    /// Whether the outcome is a success.
    pub fn is_ok(&self) -> bool {
        self.code.is_none()
    }

    /// The outcome as a JSON object `{"ok":…,"result"|"error":…}`.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&format!("{{{}}}", &self.body)).unwrap_or(Value::Null)
    }

    /// Writes the full reply line (with its trailing newline).
    pub fn reply_line(&self, id: Option<&str>, run_id: &str, receipt: ReceiptKind) -> Vec<u8> {
        let mut line = Vec::with_capacity(self.reply_line_len(id, run_id));
        self.write_reply_line(&mut line, id, run_id, receipt);
        line
    }

    /// About the length of [`Outcome::reply_line`] (exact unless the IDs need escapes).
    pub fn reply_line_len(&self, id: Option<&str>, run_id: &str) -> usize {
        self.body.len() + 52 + id.map_or(4, |id| id.len() + 2) + run_id.len() + 8
    }

    /// Appends the full reply line (with its trailing newline) to `line`: a connection writes
    /// a replay straight into the bytes it sends next.
    pub fn write_reply_line(
        &self,
        line: &mut Vec<u8>,
        id: Option<&str>,
        run_id: &str,
        receipt: ReceiptKind,
    ) {
        self.write_head(line, id);
        write_line_end(line, run_id, receipt);
    }

    /// [`Outcome::write_reply_line`] with the line's end (its `meta`, which only the run and
    /// the receipt kind decide) already written out in `ends`: what a connection uses, so each
    /// reply copies its end instead of writing it again.
    pub fn write_reply_line_ending(
        &self,
        line: &mut Vec<u8>,
        id: Option<&str>,
        ends: &LineEnds,
        receipt: ReceiptKind,
    ) {
        self.write_head(line, id);
        line.extend_from_slice(ends.get(receipt));
    }

    /// [`Outcome::write_reply_line_ending`] for the request ID `key` as the book keys it: a
    /// UUID key is spelled straight into the line (hex digits and hyphens need no escapes, so
    /// they are neither checked nor validated again), any other is written as a string.
    pub fn write_reply_line_key(
        &self,
        line: &mut Vec<u8>,
        key: &RequestKey,
        ends: &LineEnds,
        receipt: ReceiptKind,
    ) {
        match key {
            RequestKey::Uuid(bytes) => {
                let mut id = [0u8; 36];
                spell_uuid(bytes, &mut id);
                let end = ends.get(receipt);
                line.reserve(ID_HEAD.len() + id.len() + 2 + self.body.len() + end.len());
                line.extend_from_slice(ID_HEAD);
                line.push(b'"');
                line.extend_from_slice(&id);
                line.extend_from_slice(b"\",");
                line.extend_from_slice(self.body.as_bytes());
                line.extend_from_slice(end);
            }
            RequestKey::Text(id) => self.write_reply_line_ending(line, Some(id), ends, receipt),
        }
    }

    /// The part of a reply line before its `meta`: `{"id":…,` and the stored body.
    fn write_head(&self, line: &mut Vec<u8>, id: Option<&str>) {
        line.extend_from_slice(ID_HEAD);
        match id {
            Some(id) => write_json_str(line, id),
            None => line.extend_from_slice(b"null"),
        }
        line.push(b',');
        line.extend_from_slice(self.body.as_bytes());
    }
}

/// How every reply line begins, before its request ID.
const ID_HEAD: &[u8] = b"{\"id\":";

/// The ends of one run's reply lines (`,"meta":{…}}` and the newline), one per receipt kind,
/// written once (for a connection) and copied into every reply line after its body.
pub struct LineEnds {
    /// Indexed by [`LineEnds::index`].
    ends: [Box<[u8]>; 4],
}

impl LineEnds {
    /// The line ends of the run `run_id`.
    pub fn new(run_id: &str) -> LineEnds {
        let end = |kind| {
            let mut end = Vec::new();
            write_line_end(&mut end, run_id, kind);
            end.into_boxed_slice()
        };
        LineEnds {
            ends: [
                end(ReceiptKind::New),
                end(ReceiptKind::Joined),
                end(ReceiptKind::Replayed),
                end(ReceiptKind::None),
            ],
        }
    }

    /// The end of a line with receipt kind `kind`.
    pub fn get(&self, kind: ReceiptKind) -> &[u8] {
        &self.ends[match kind {
            ReceiptKind::New => 0,
            ReceiptKind::Joined => 1,
            ReceiptKind::Replayed => 2,
            ReceiptKind::None => 3,
        }]
    }
}

/// Appends the end of a reply line: `,"meta":{"runId":…,"receipt":…}}` and the newline.
fn write_line_end(line: &mut Vec<u8>, run_id: &str, receipt: ReceiptKind) {
    line.extend_from_slice(b",\"meta\":{\"runId\":");
    write_json_str(line, run_id);
    line.extend_from_slice(b",\"receipt\":\"");
    line.extend_from_slice(receipt.as_str().as_bytes());
    line.extend_from_slice(b"\"}}\n");
}

/// The outcome whose body is `prefix` and `value`, of exactly the right size: the text is built
/// in a per-thread scratch buffer, so the outcome is the one allocation it keeps.
fn stored<T: Serialize + ?Sized>(
    prefix: &[u8],
    value: &T,
    code: Option<ErrorCode>,
) -> Arc<Outcome> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|scratch| {
        // A value's serialiser may itself build a reply body (nothing does today): fall back
        // to a buffer of its own rather than borrow the scratch twice.
        let mut own = Vec::new();
        let mut guard = scratch.try_borrow_mut();
        let buf = match guard.as_mut() {
            Ok(b) => &mut **b,
            Err(_) => &mut own,
        };
        buf.clear();
        buf.extend_from_slice(prefix);
        serde_json::to_writer(&mut *buf, value).expect("a reply body always serialises");
        let body = Outcome::of(
            code,
            std::str::from_utf8(buf).expect("serde_json writes UTF-8"),
        );
        if buf.capacity() > 64 * 1024 {
            // One huge reply must not pin its buffer to the thread forever.
            *buf = Vec::new();
        }
        body
    })
}

/// Writes a JSON string. Request and run IDs are drawn from an alphabet JSON needs no escapes
/// for, so they are copied as they are; anything else is quoted through serde.
fn write_json_str(out: &mut Vec<u8>, s: &str) {
    if !needs_escape(s.as_bytes()) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, s).expect("a string always serialises");
    }
}

/// Whether a string holds a byte JSON escapes (`"`, `\`, a control), tested eight bytes at a
/// time: every reply writes two IDs, and a byte at a time cost more than the rest of writing
/// the line.
pub(crate) fn needs_escape(s: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte of `v` is below `n` (n ≤ 128): exact as a yes or no for the whole word.
    let below = |v: u64, n: u8| v.wrapping_sub(ONES * u64::from(n)) & !v & HIGH;
    let zero = |v: u64| below(v, 1);
    let mut chunks = s.chunks_exact(8);
    let mut found = 0;
    for chunk in &mut chunks {
        let v = u64::from_le_bytes(<[u8; 8]>::try_from(chunk).unwrap_or_default());
        found |= below(v, 0x20)
            | zero(v ^ (ONES * u64::from(b'"')))
            | zero(v ^ (ONES * u64::from(b'\\')));
    }
    found != 0
        || chunks
            .remainder()
            .iter()
            .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An outcome made in one allocation reads back the code and body it was made of, for
    /// every code and any body, and lives as long as its last holder.
    #[test]
    fn an_outcome_keeps_its_code_and_body_in_one_allocation() {
        let codes = std::iter::once(None).chain(ErrorCode::ALL.iter().copied().map(Some));
        for code in codes {
            for len in [0, 1, 7, 8, 9, 63, 64, 65, 1000] {
                let body = "é".repeat(len / 2) + &"x".repeat(len % 2);
                let outcome = Outcome::of(code, &body);
                assert_eq!((outcome.code, &outcome.body), (code, &*body));
                let (head, tail) = body.split_at(body.len() / 4 * 2);
                let parts = Outcome::of_parts(code, &[head, "", tail]);
                assert_eq!(parts, outcome);
                let held = parts.clone();
                drop(parts);
                assert_eq!(held.body, *body);
            }
        }
        let e = ErrorBody::new(ErrorCode::TaskBlocked, "m");
        assert_eq!(Outcome::err(&e).code, Some(ErrorCode::TaskBlocked));
        assert_eq!(Outcome::ok(&json!({"a": 1})).code, None);
    }

    #[test]
    fn outcome_lines_are_valid_json() {
        let o = Outcome::ok(&json!({"a": 1}));
        let line = o.reply_line(Some("r1"), "run", ReceiptKind::Replayed);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            v,
            json!({"id":"r1","ok":true,"result":{"a":1},"meta":{"runId":"run","receipt":"replayed"}})
        );
        let e = Outcome::err(&ErrorBody::new(ErrorCode::TaskBlocked, "m"));
        let v: Value =
            serde_json::from_slice(&e.reply_line(None, "run", ReceiptKind::None)).unwrap();
        assert_eq!(v["id"], Value::Null);
        assert_eq!(v["error"]["delivery"], "not_executed");
    }

    #[test]
    fn lines_written_with_their_ends_at_hand_are_the_same_lines() {
        let outcome = Outcome::ok(&json!({"target": "#title", "value": "v"}));
        for run_id in ["4d1c2a2e-7b7c-4a57-9b55-2a3d3c1e5f60", "odd \"run\"\n"] {
            let ends = LineEnds::new(run_id);
            for kind in [
                ReceiptKind::New,
                ReceiptKind::Joined,
                ReceiptKind::Replayed,
                ReceiptKind::None,
            ] {
                for key in [
                    RequestKey::new("9b2f4e1c-0d3a-4c5b-8e6f-0123456789ab"),
                    RequestKey::new("9B2F4E1C-0D3A-4C5B-8E6F-0123456789AB"),
                    RequestKey::new("q\"\u{1}"),
                ] {
                    let mut line = b"before".to_vec();
                    outcome.write_reply_line_key(&mut line, &key, &ends, kind);
                    let expected = key.with_str(|id| outcome.reply_line(Some(id), run_id, kind));
                    assert_eq!(line[6..], expected);
                }
                for id in [Some("r1"), Some("q\"\u{1}"), None] {
                    let mut line = b"before".to_vec();
                    outcome.write_reply_line_ending(&mut line, id, &ends, kind);
                    let mut expected = b"before".to_vec();
                    expected.extend(outcome.reply_line(id, run_id, kind));
                    assert_eq!(line, expected);
                    let v: Value = serde_json::from_slice(&line[6..]).unwrap();
                    assert_eq!(v["meta"]["runId"], run_id);
                    assert_eq!(v["meta"]["receipt"], kind.as_str());
                }
            }
        }
    }

    #[test]
    fn every_byte_json_escapes_is_seen_wherever_it_is() {
        for len in 1..26 {
            for at in 0..len {
                for b in (0u8..0x20).chain([b'"', b'\\']).chain([b' ', b'~', 0x7f]) {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    let s = String::from_utf8(s).unwrap();
                    let mut out = Vec::new();
                    write_json_str(&mut out, &s);
                    assert_eq!(out, serde_json::to_vec(&s).unwrap(), "{s:?}");
                    assert_eq!(
                        needs_escape(s.as_bytes()),
                        b < 0x20 || b == b'"' || b == b'\\'
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// Copied as it is or quoted through serde, a string is written as serde writes it.
        #[test]
        fn json_strings_are_written_as_serde_writes_them(s in "\\PC{0,40}|[\\x00-\\x7f]{0,40}|[A-Za-z0-9._:-]{1,128}") {
            let mut out = Vec::new();
            write_json_str(&mut out, &s);
            proptest::prop_assert_eq!(out, serde_json::to_vec(&s).unwrap());
        }
    }
}
