//! The walk over a frame's bytes: JSON read once, scalars borrowed from the frame, objects
//! as members in fixed tables, and whether the params text is already RFC 8785 canonical.

use std::borrow::Cow;

use crate::canonical::{canonical_integer, has_short_escape};
use crate::id::{ID_ALPHABET, MAX_ID_LEN};
use crate::ids::uuid_bytes;

/// The most members one params object (or the one object inside it) may have on this path:
/// no bridge method's params, nor `expect` or `fixture`, take more than four fields, and each
/// field at most once.
pub(super) const MAX_MEMBERS: usize = 4;

/// One JSON value of the params, as the walk read it: scalars borrowed from the frame, an
/// object as the members it holds in [`Walk`]'s second-level table.
#[derive(Clone, Copy, Debug)]
pub(super) enum Val<'a> {
    Null,
    Bool(bool),
    /// An integer written without fraction or exponent: its sign and digits.
    Int {
        negative: bool,
        digits: &'a [u8],
    },
    /// Any other number.
    Float,
    Str(JsonStr<'a>),
    /// An object one level below the params: members `start..start + len` of the inner table.
    Object {
        start: u8,
        len: u8,
    },
}

/// A string's text between its quotes (valid UTF-8), and whether it holds escapes.
#[derive(Clone, Copy, Debug)]
pub(super) struct JsonStr<'a> {
    pub(super) raw: &'a str,
    pub(super) escaped: bool,
}

impl<'a> JsonStr<'a> {
    /// The string's value: borrowed unless it has escapes. `None` for an escape serde's
    /// parser would refuse or read differently (a lone surrogate).
    pub(super) fn value(self) -> Option<Cow<'a, str>> {
        if self.escaped {
            unescape(self.raw).map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(self.raw))
        }
    }

    pub(super) fn owned(self) -> Option<String> {
        self.value().map(Cow::into_owned)
    }
}

/// One `"key": value` of an object.
#[derive(Clone, Copy, Debug)]
pub(super) struct Member<'a> {
    pub(super) key: Field,
    pub(super) val: Val<'a>,
}

pub(super) const NO_MEMBER: Member<'static> = Member {
    key: Field::Id,
    val: Val::Null,
};

/// A field name of the envelope or of the params: the only keys any frame may hold, so a key
/// is read as the field it names (one match on its bytes) and compared as a byte afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    Id,
    Method,
    Params,
    Title,
    Url,
    Fixture,
    SubmitDelayMs,
    ReadDelayMs,
    DropSubmit,
    FailSubmit,
    TaskId,
    Target,
    Value,
    Expect,
    Equals,
    Contains,
    Key,
    Reason,
    RunId,
    RequestId,
}

impl Field {
    /// The field a key names, `None` for any other key.
    #[inline]
    fn named(key: &[u8]) -> Option<Field> {
        Some(match key {
            b"id" => Field::Id,
            b"method" => Field::Method,
            b"params" => Field::Params,
            b"title" => Field::Title,
            b"url" => Field::Url,
            b"fixture" => Field::Fixture,
            b"submitDelayMs" => Field::SubmitDelayMs,
            b"readDelayMs" => Field::ReadDelayMs,
            b"dropSubmit" => Field::DropSubmit,
            b"failSubmit" => Field::FailSubmit,
            b"taskId" => Field::TaskId,
            b"target" => Field::Target,
            b"value" => Field::Value,
            b"expect" => Field::Expect,
            b"equals" => Field::Equals,
            b"contains" => Field::Contains,
            b"key" => Field::Key,
            b"reason" => Field::Reason,
            b"runId" => Field::RunId,
            b"requestId" => Field::RequestId,
            _ => return None,
        })
    }

    /// The field whose name is the `len` bytes of `word` (little-endian, zero past them),
    /// for names shorter than eight bytes; `None` for any other: a hash of the word picks the
    /// one field it can be, and the word and length are compared with its name's (the length
    /// too, since a zero byte in the key would read as the word's padding).
    #[inline(always)]
    fn from_word(word: u64, len: usize) -> Option<Field> {
        let slot = name_hash(word);
        // Longer names have no zero byte in their first word: they never compare equal.
        if SLOT_WORDS[slot] == word && usize::from(SLOT_LENS[slot]) == len {
            SLOT_FIELDS[slot]
        } else {
            None
        }
    }

    /// The field's name as JSON writes it.
    pub(super) fn name(self) -> &'static str {
        FIELD_NAMES[self as usize]
    }

    /// Where the name sorts among all field names by bytes (RFC 8785's key order).
    #[inline]
    pub(super) fn rank(self) -> u8 {
        FIELD_RANKS[self as usize]
    }
}

/// Each field's name, in the order of [`Field`].
const FIELD_NAMES: [&str; 20] = [
    "id",
    "method",
    "params",
    "title",
    "url",
    "fixture",
    "submitDelayMs",
    "readDelayMs",
    "dropSubmit",
    "failSubmit",
    "taskId",
    "target",
    "value",
    "expect",
    "equals",
    "contains",
    "key",
    "reason",
    "runId",
    "requestId",
];

/// Every field, in the order of [`Field`].
const FIELDS: [Field; 20] = [
    Field::Id,
    Field::Method,
    Field::Params,
    Field::Title,
    Field::Url,
    Field::Fixture,
    Field::SubmitDelayMs,
    Field::ReadDelayMs,
    Field::DropSubmit,
    Field::FailSubmit,
    Field::TaskId,
    Field::Target,
    Field::Value,
    Field::Expect,
    Field::Equals,
    Field::Contains,
    Field::Key,
    Field::Reason,
    Field::RunId,
    Field::RequestId,
];

/// Each field's name's first eight bytes as a little-endian word, zero past its end: names
/// hold no zero byte, so for names shorter than eight bytes equal words are equal names.
const FIRST_WORDS: [u64; 20] = {
    let mut words = [0; 20];
    let mut i = 0;
    while i < 20 {
        let name = FIELD_NAMES[i].as_bytes();
        let mut j = 0;
        while j < name.len() && j < 8 {
            words[i] |= (name[j] as u64) << (8 * j);
            j += 1;
        }
        i += 1;
    }
    words
};

/// The multiplier of [`name_hash`], for the field names' first words.
const NAME_HASH: u64 = perfect_multiplier(&FIRST_WORDS);

/// The multiplier `k` of a perfect hash of `words` into 64 slots (`(word × k) >> 58`): the first
/// odd number from a fixed start that gives every word a slot of its own, found when Polaris is
/// compiled. The field names here and the bridge methods (`direct.rs`) are looked up with it.
pub(super) const fn perfect_multiplier(words: &[u64]) -> u64 {
    let mut k = 0x9e37_79b9_7f4a_7c15u64;
    'search: loop {
        let mut taken = [false; 64];
        let mut i = 0;
        while i < words.len() {
            let slot = (words[i].wrapping_mul(k) >> 58) as usize;
            if taken[slot] {
                k = k.wrapping_add(2);
                continue 'search;
            }
            taken[slot] = true;
            i += 1;
        }
        break k;
    }
}

/// A field name's slot in [`FIELD_SLOTS`], from its first word.
#[inline(always)]
fn name_hash(first: u64) -> usize {
    (first.wrapping_mul(NAME_HASH) >> 58) as usize
}

/// For each slot of [`name_hash`], the first word of the field name that hashes to it (zero
/// for none), and that field.
static SLOT_WORDS: [u64; 64] = {
    let mut words = [0; 64];
    let mut i = 0;
    while i < 20 {
        words[(FIRST_WORDS[i].wrapping_mul(NAME_HASH) >> 58) as usize] = FIRST_WORDS[i];
        i += 1;
    }
    words
};

/// For each slot of [`name_hash`], the length of the field name that hashes to it.
static SLOT_LENS: [u8; 64] = {
    let mut lens = [0; 64];
    let mut i = 0;
    while i < 20 {
        lens[(FIRST_WORDS[i].wrapping_mul(NAME_HASH) >> 58) as usize] = FIELD_NAMES[i].len() as u8;
        i += 1;
    }
    lens
};

/// See [`SLOT_WORDS`].
static SLOT_FIELDS: [Option<Field>; 64] = {
    let mut fields = [None; 64];
    let mut i = 0;
    while i < 20 {
        fields[(FIRST_WORDS[i].wrapping_mul(NAME_HASH) >> 58) as usize] = Some(FIELDS[i]);
        i += 1;
    }
    fields
};

/// Each field's place when the names are sorted by their bytes.
static FIELD_RANKS: [u8; 20] = {
    const fn before(a: &[u8], b: &[u8]) -> bool {
        let mut i = 0;
        while i < a.len() && i < b.len() {
            if a[i] != b[i] {
                return a[i] < b[i];
            }
            i += 1;
        }
        a.len() < b.len()
    }
    let mut ranks = [0u8; 20];
    let mut i = 0;
    while i < 20 {
        let mut j = 0;
        while j < 20 {
            if before(FIELD_NAMES[j].as_bytes(), FIELD_NAMES[i].as_bytes()) {
                ranks[i] += 1;
            }
            j += 1;
        }
        i += 1;
    }
    ranks
};

/// The cursor of the walk.
///
/// The frame is not checked as UTF-8 up front: every byte outside a string must be one of
/// JSON's ASCII structural bytes (anything else leaves the frame to the general path), and
/// each string notes whether it holds bytes past ASCII, checking only those strings.
pub(super) struct Walk<'a> {
    /// The frame, as it came.
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
    /// Cleared by anything RFC 8785 writes differently: whitespace, keys out of order,
    /// escapes it does not use, numbers other than exact integers.
    pub(super) canonical: bool,
    /// Set by a string holding bytes past ASCII (checked to be UTF-8): without one, every
    /// byte the walk passed is ASCII.
    pub(super) high: bool,
}

impl<'a> Walk<'a> {
    #[inline]
    pub(super) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    pub(super) fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    #[inline]
    pub(super) fn eat(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    /// Skips JSON whitespace; inside params any of it makes the text non-canonical.
    #[inline]
    pub(super) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
            self.canonical = false;
        }
    }

    /// The text walked from `start` (a value's first byte) to here: UTF-8, since the walk
    /// checked every string in it and took nothing but ASCII between them.
    pub(super) fn text(&self, start: usize) -> Option<&'a str> {
        let bytes = self.bytes.get(start..self.pos)?;
        if self.high {
            std::str::from_utf8(bytes).ok()
        } else {
            Some(ascii(bytes))
        }
    }

    /// The bytes between a string's quotes when its closing quote comes within 24 bytes,
    /// unchecked: only for matching whole against names that hold no quote, backslash or
    /// control character, so that a match is a string without escapes (the method).
    #[inline(always)]
    pub(super) fn short_name(&mut self) -> Option<&'a [u8]> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let from = self.pos + 1;
        let len = [0, 8, 16].into_iter().find_map(|i| {
            // Past the frame's end the bytes read as zeros, which are no quotes.
            let quotes = zero_bytes(word_at(self.bytes, from + i) ^ (ONES * u64::from(b'"')));
            (quotes != 0).then(|| i + (quotes.trailing_zeros() / 8) as usize)
        })?;
        let name = self.bytes.get(from..from + len)?;
        self.pos = from + len + 1;
        Some(name)
    }

    /// An object key, as the field it names (the only keys any frame may hold are the
    /// envelope's and the params' fields), also when written with escapes; a key that names
    /// none is left to the general path.
    #[inline(always)]
    pub(super) fn key(&mut self) -> Option<Field> {
        // Nearly every key is a plain name shorter than eight bytes: the word after its quote
        // holds the closing quote, and the bytes before it are matched whole against the
        // field names' first words (all letters, so a match is a name without escapes).
        let at = self.pos;
        if let (Some(b'"'), Some(word)) = (
            self.bytes.get(at),
            self.bytes.get(at + 1..).and_then(<[u8]>::first_chunk::<8>),
        ) {
            let word = u64::from_le_bytes(*word);
            let quotes = zero_bytes(word ^ (ONES * u64::from(b'"')));
            if quotes != 0 {
                let len = (quotes.trailing_zeros() / 8) as usize;
                if let Some(field) = Field::from_word(word & low_bytes(len), len) {
                    self.pos = at + len + 2;
                    return Some(field);
                }
            }
        }
        self.long_key()
    }

    /// [`Walk::key`] for a key the word does not match: whitespace before it, longer names,
    /// escapes, and keys that name no field.
    #[cold]
    #[inline(never)]
    fn long_key(&mut self) -> Option<Field> {
        self.ws();
        let s = self.string()?;
        if !s.escaped {
            return Field::named(s.raw.as_bytes());
        }
        self.canonical = false;
        Field::named(unescape(s.raw)?.as_bytes())
    }

    /// The request ID: a string without escapes, 1–128 bytes of the ID alphabet (anything
    /// else is the general path's to explain). A lowercase hyphenated UUID (the common ID,
    /// whose characters are all in the alphabet) is read into its bytes at once, which are
    /// the book's key for it.
    #[inline]
    pub(super) fn id(&mut self) -> Option<(&'a str, Option<[u8; 16]>)> {
        self.eat(b'"')?;
        let start = self.pos;
        if let Some((digits, [b'"', ..])) = self
            .bytes
            .get(start..)
            .and_then(<[u8]>::split_first_chunk::<36>)
        {
            if let Some(uuid) = uuid_bytes(digits) {
                self.pos = start + 37;
                // Hex digits and hyphens: ASCII.
                return Some((ascii(digits), Some(uuid)));
            }
        }
        let len = self.bytes[start..]
            .iter()
            .position(|&b| !ID_ALPHABET[usize::from(b)])?;
        self.pos += len;
        self.eat(b'"')?;
        if len == 0 || len > MAX_ID_LEN {
            return None;
        }
        // The ID alphabet is ASCII.
        Some((ascii(self.bytes.get(start..start + len)?), None))
    }

    /// A string: its raw text between the quotes, checked to be JSON (no raw control
    /// characters, escapes of the right form, valid UTF-8). An escape RFC 8785 writes
    /// differently clears `canonical`.
    #[inline(never)]
    fn string(&mut self) -> Option<JsonStr<'a>> {
        self.read_string()
    }

    /// [`Walk::string`], inlined where the params' values are read (most of a frame's
    /// strings): no call per value.
    #[inline(always)]
    fn read_string(&mut self) -> Option<JsonStr<'a>> {
        self.eat(b'"')?;
        let start = self.pos;
        let mut at = start;
        let mut escaped = false;
        // The words scanned, or'ed: their high bits are clear when every byte of the string
        // (past its escapes, which are ASCII) is ASCII.
        let mut seen = 0;
        loop {
            // Eight bytes at a time, up to the next quote, backslash or control character.
            let x = word_at(self.bytes, at);
            seen |= x;
            let flagged = special_bytes(x);
            if flagged == 0 {
                at += 8;
                continue;
            }
            at += (flagged.trailing_zeros() / 8) as usize;
            match self.bytes.get(at) {
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    self.pos = at + 1;
                    self.escape()?;
                    at = self.pos;
                }
                // A raw control character, which JSON does not allow in a string, or the
                // frame's end.
                _ => return None,
            }
        }
        self.pos = at + 1;
        let raw = self.bytes.get(start..at)?;
        // Escapes are ASCII, so the raw text is UTF-8 exactly when the string's value is.
        let raw = if seen & HIGHS == 0 {
            ascii(raw)
        } else {
            self.high = true;
            std::str::from_utf8(raw).ok()?
        };
        Some(JsonStr { raw, escaped })
    }

    /// The rest of an escape, past its backslash: checked to be JSON, and `canonical`
    /// cleared if RFC 8785 writes it differently. Kept out of [`Walk::string`]'s loop, which
    /// most strings leave without one.
    #[cold]
    #[inline(never)]
    fn escape(&mut self) -> Option<()> {
        match self.next()? {
            b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => {}
            b'/' => self.canonical = false,
            b'u' => {
                let hex = self.bytes.get(self.pos..self.pos + 4)?;
                let mut code = 0u32;
                for &h in hex {
                    code = code * 16 + u32::from(hex_digit(h)?);
                    if h.is_ascii_uppercase() {
                        self.canonical = false;
                    }
                }
                self.pos += 4;
                // RFC 8785 writes `\u00xx` only for controls without a short form.
                if code >= 0x20 || has_short_escape(code as u8) {
                    self.canonical = false;
                }
            }
            _ => return None,
        }
        Some(())
    }

    /// A number as JSON writes it; an integer keeps its digits.
    fn number(&mut self) -> Option<Val<'a>> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let start = self.pos;
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => {
                while let Some(b'0'..=b'9') = self.peek() {
                    self.pos += 1;
                }
            }
            _ => return None,
        }
        let digits = &self.bytes[start..self.pos];
        let mut float = false;
        if self.peek() == Some(b'.') {
            float = true;
            self.pos += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            float = true;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.digits()?;
        }
        if float {
            self.canonical = false;
            return Some(Val::Float);
        }
        if !canonical_integer(negative, digits) {
            self.canonical = false;
        }
        Some(Val::Int { negative, digits })
    }

    /// One or more digits.
    fn digits(&mut self) -> Option<()> {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        (self.pos > start).then_some(())
    }

    /// `true`, `false` or `null`.
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(())
        } else {
            None
        }
    }

    /// A scalar, or (when `inner` is given) an object whose members go to the end of
    /// `inner` (made when the first object is met), past its first `used`.
    fn value(
        &mut self,
        inner: Option<&mut Option<[Member<'a>; MAX_MEMBERS]>>,
        used: &mut usize,
    ) -> Option<Val<'a>> {
        Some(match self.peek()? {
            b'"' => Val::Str(self.read_string()?),
            b' ' | b'\n' | b'\t' | b'\r' => {
                self.ws();
                return self.value(inner, used);
            }
            b'n' => {
                self.literal(b"null")?;
                Val::Null
            }
            b't' => {
                self.literal(b"true")?;
                Val::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Val::Bool(false)
            }
            b'-' | b'0'..=b'9' => self.number()?,
            b'{' => {
                let table = inner?.get_or_insert([NO_MEMBER; MAX_MEMBERS]);
                let start = *used;
                let len = self.members(table.get_mut(start..)?, None, &mut 0)?;
                *used += len;
                Val::Object {
                    start: start as u8,
                    len: len as u8,
                }
            }
            // Arrays (which no params field takes), objects deeper down, anything else: the
            // general path's.
            _ => return None,
        })
    }

    /// An object's members into `out`, each key once; returns how many. Objects inside it
    /// go to `inner` (one level only), whose first `used` are taken.
    pub(super) fn members(
        &mut self,
        out: &mut [Member<'a>],
        mut inner: Option<&mut Option<[Member<'a>; MAX_MEMBERS]>>,
        used: &mut usize,
    ) -> Option<usize> {
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(0);
        }
        let mut len = 0;
        // The fields seen, one bit each; and one past the last one's rank (zero before the
        // first), for the key order. Whitespace is skipped where it is met: a key, a value
        // and what follows a value each look past it when their first byte is one.
        let (mut seen, mut last) = (0u32, 0u8);
        loop {
            let key = self.key()?;
            let bit = 1u32 << key as u32;
            if len == out.len() || seen & bit != 0 {
                return None;
            }
            seen |= bit;
            let rank = key.rank() + 1;
            if last >= rank {
                self.canonical = false;
            }
            last = rank;
            self.colon()?;
            let val = self.value(inner.as_deref_mut(), used)?;
            out[len] = Member { key, val };
            len += 1;
            if !self.more()? {
                return Some(len);
            }
        }
    }

    /// The `:` after a key, and any whitespace before it.
    #[inline(always)]
    pub(super) fn colon(&mut self) -> Option<()> {
        if self.peek() == Some(b':') {
            self.pos += 1;
            return Some(());
        }
        self.ws();
        self.eat(b':')
    }

    /// What follows a member: `true` past a `,`, `false` past the `}` that ends its object
    /// (whitespace before either skipped).
    #[inline(always)]
    pub(super) fn more(&mut self) -> Option<bool> {
        match self.next()? {
            b',' => Some(true),
            b'}' => Some(false),
            b' ' | b'\n' | b'\t' | b'\r' => {
                self.pos -= 1;
                self.ws();
                match self.next()? {
                    b',' => Some(true),
                    b'}' => Some(false),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The eight bytes of `bytes` from `at` as a little-endian word, zeros past its end.
#[inline(always)]
fn word_at(bytes: &[u8], at: usize) -> u64 {
    match bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        Some(w) => u64::from_le_bytes(*w),
        None => last_word(bytes, at),
    }
}

/// [`word_at`] for fewer than eight bytes left (once per frame at most): the frame's last
/// eight bytes, shifted down past the ones before `at`.
#[cold]
#[inline(never)]
fn last_word(bytes: &[u8], at: usize) -> u64 {
    let left = bytes.len().saturating_sub(at);
    if left == 0 {
        return 0;
    }
    if let Some(last) = bytes.last_chunk::<8>() {
        // `left` is 1 to 7 here: the shift drops the 8 - `left` bytes before `at`.
        return u64::from_le_bytes(*last) >> (8 * (8 - left));
    }
    // A frame shorter than a word.
    let mut w = [0u8; 8];
    for (to, from) in w.iter_mut().zip(bytes.get(at..).unwrap_or_default()) {
        *to = *from;
    }
    u64::from_le_bytes(w)
}

/// The high bit of every byte of `x` that is zero (exact up to the lowest one).
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// The high bit of every byte of `x` that ends a string's plain run: `"`, `\` or a control
/// character. Exact up to the lowest flagged byte (a false flag can only sit above a true
/// one), which is all a scan needs.
#[inline(always)]
fn special_bytes(x: u64) -> u64 {
    // Flipping bit 1 maps `"` (0x22) to 0x20 and the controls (below 0x20) onto themselves:
    // the bytes below 0x21 after it are exactly the quotes and the controls.
    let flipped = x ^ (ONES * 0x02);
    let quote_or_control = flipped.wrapping_sub(ONES * 0x21) & !flipped;
    let backslash = x ^ (ONES * u64::from(b'\\'));
    (quote_or_control | (backslash.wrapping_sub(ONES) & !backslash)) & HIGHS
}

/// A mask of the low `n` bytes of a word (`n` below 8).
#[inline(always)]
fn low_bytes(n: usize) -> u64 {
    (1u64 << (8 * (n & 7))) - 1
}

/// ASCII bytes as text.
///
/// Only for bytes the walk has seen to be below 0x80 (a string whose words' high bits are
/// all clear, the ID alphabet, hex digits): ASCII is UTF-8.
#[inline(always)]
fn ascii(bytes: &[u8]) -> &str {
    debug_assert!(bytes.is_ascii());
    // SAFETY: every caller passes bytes it has checked to be ASCII (see above), and ASCII
    // is valid UTF-8.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

/// The value of a hex digit.
#[inline]
pub(super) fn hex_digit(h: u8) -> Option<u8> {
    match h {
        b'0'..=b'9' => Some(h - b'0'),
        b'a'..=b'f' => Some(h - b'a' + 10),
        b'A'..=b'F' => Some(h - b'A' + 10),
        _ => None,
    }
}

/// A JSON string's value from its raw text (escapes checked by [`Walk::string`]). `None` for a
/// lone surrogate, which the general path explains.
pub(super) fn unescape(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < bytes.len() {
        let run = bytes[i..]
            .iter()
            .position(|&b| b == b'\\')
            .unwrap_or(bytes.len() - i);
        out.push_str(&raw[i..i + run]);
        i += run;
        if i == bytes.len() {
            break;
        }
        let e = bytes[i + 1];
        i += 2;
        let c = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = hex4(bytes.get(i..i + 4)?)?;
                i += 4;
                match hi {
                    0xd800..=0xdbff => {
                        if bytes.get(i..i + 2)? != b"\\u" {
                            return None;
                        }
                        let lo = hex4(bytes.get(i + 2..i + 6)?)?;
                        if !(0xdc00..=0xdfff).contains(&lo) {
                            return None;
                        }
                        i += 6;
                        char::from_u32(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00))?
                    }
                    0xdc00..=0xdfff => return None,
                    _ => char::from_u32(hi)?,
                }
            }
            _ => return None,
        };
        out.push(c);
    }
    Some(out)
}

pub(super) fn hex4(h: &[u8]) -> Option<u32> {
    h.iter()
        .try_fold(0u32, |n, &d| Some(n * 16 + u32::from(hex_digit(d)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_named_and_ranked_by_their_bytes() {
        let all: Vec<Field> = FIELD_NAMES
            .iter()
            .map(|n| Field::named(n.as_bytes()).expect("a field name"))
            .collect();
        for (i, f) in all.iter().enumerate() {
            assert_eq!(*f as usize, i);
            assert_eq!(f.name(), FIELD_NAMES[i]);
            for g in &all {
                assert_eq!(
                    f.rank().cmp(&g.rank()),
                    f.name().cmp(g.name()),
                    "{f:?} {g:?}"
                );
            }
        }
        // A name of each length with one byte changed, and other lengths.
        let near: Vec<String> = FIELD_NAMES
            .iter()
            .map(|n| format!("{}x", &n[..n.len() - 1]))
            .collect();
        let others = [
            "",
            "Id",
            "ids",
            "taskid",
            "targe",
            "é",
            "requestIdx",
            "xd",
            "xaskId",
        ];
        for other in near.iter().map(String::as_str).chain(others) {
            assert_eq!(Field::named(other.as_bytes()), None, "{other}");
        }
        // A key read from a frame names the same field, wherever the frame ends after it; a
        // name followed by bytes that read as a word's padding, or by controls, names none.
        let padded = FIELD_NAMES
            .iter()
            .flat_map(|n| [format!("{n}\0"), format!("{n}\0\0"), format!("{n}\u{1}")]);
        for name in FIELD_NAMES
            .iter()
            .chain(&others)
            .map(|n| n.to_string())
            .chain(near)
            .chain(padded)
        {
            for after in ["", ":", ":1}", ":\"Hello, world\"}}"] {
                let frame = format!("\"{name}\"{after}");
                let mut w = walk(frame.as_bytes());
                assert_eq!(w.key(), Field::named(name.as_bytes()), "{frame}");
            }
        }
    }

    /// A walk at the start of `bytes`.
    fn walk(bytes: &[u8]) -> Walk<'_> {
        Walk {
            bytes,
            pos: 0,
            canonical: true,
            high: false,
        }
    }

    /// What serde's parser reads from the string at the start of `bytes`: its value and
    /// where it ends.
    fn by_serde(bytes: &[u8]) -> Option<(String, usize)> {
        let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<String>();
        let value = values.next()?.ok()?;
        Some((value, values.byte_offset()))
    }

    /// The bytes of a string's body: plain ASCII, quotes, backslashes and escapes of every
    /// kind (some malformed), control bytes, UTF-8 past ASCII and bytes that are not UTF-8,
    /// pieces of field names.
    fn body_piece() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            4 => "[a-zA-Z0-9 #!]{1,9}".prop_map(String::into_bytes),
            2 => proptest::sample::select(FIELD_NAMES.to_vec()).prop_map(|n| n.as_bytes().to_vec()),
            1 => Just(b"\"".to_vec()),
            1 => proptest::sample::select(vec![
                "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0069", "\\u00E9",
                "\\ud83d\\ude00", "\\ud800", "\\udc00x", "\\u12", "\\x", "\\",
            ])
            .prop_map(|e| e.as_bytes().to_vec()),
            1 => (0u8..0x20).prop_map(|b| vec![b]),
            1 => Just(b"\x7f".to_vec()),
            1 => proptest::sample::select(vec!["é", "€", "😀"]).prop_map(|c| c.as_bytes().to_vec()),
            1 => proptest::sample::select(vec![
                vec![0x80u8], vec![0xff], vec![0xc3], vec![0xe2, 0x82], vec![0xed, 0xa0, 0x80],
            ]),
        ]
    }

    /// A string as a frame holds it: a quote, a body, usually a closing quote, then the bytes
    /// after it (few or many, so its end falls everywhere in a word and near the frame's end).
    fn quoted() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        (
            proptest::collection::vec(body_piece(), 0..6),
            any::<bool>(),
            proptest::sample::select(vec![
                "",
                ":",
                "\":1",
                ":\"x\"}}",
                "   ",
                ",\"value\":\"Hello!!!!!\"}}",
            ]),
        )
            .prop_map(|(pieces, close, after)| {
                let mut bytes = vec![b'"'];
                bytes.extend(pieces.concat());
                if close {
                    bytes.push(b'"');
                }
                bytes.extend_from_slice(after.as_bytes());
                bytes
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// A string reads as serde's parser reads it: the same value, the same end, and the
        /// same refusals (raw control bytes, malformed escapes, lone surrogates, bytes that are
        /// not UTF-8).
        #[test]
        fn strings_read_as_serde_reads_them(bytes in quoted()) {
            let want = by_serde(&bytes);
            let mut w = walk(&bytes);
            let got = w.string().and_then(|s| s.value()).map(|v| (v.into_owned(), w.pos));
            // Serde also takes a string this walk leaves to it: none.
            proptest::prop_assert_eq!(got, want);
        }

        /// A key names the field serde's parser reads it as, and ends where it does; a key
        /// that names no field (or is no string) is none.
        #[test]
        fn keys_read_as_serde_reads_them(bytes in quoted()) {
            let want = by_serde(&bytes).and_then(|(v, end)| Some((Field::named(v.as_bytes())?, end)));
            let mut w = walk(&bytes);
            let got = w.key().map(|f| (f, w.pos));
            proptest::prop_assert_eq!(got, want);
        }
    }

    proptest::proptest! {
        /// A word read anywhere in a frame holds the bytes there (zeros past the end), and
        /// the lowest byte its scan flags is the first quote, backslash or control character a
        /// byte-at-a-time scan finds, wherever it sits in the word and among bytes of every
        /// value.
        #[test]
        fn word_scans_stop_at_the_first_special_byte(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<u8>(),
                    proptest::strategy::Just(b'"'),
                    proptest::strategy::Just(b'\\'),
                    0x20u8..0x7f,
                    0x80u8..=0xff,
                ],
                0..40,
            )
        ) {
            for at in 0..=bytes.len() + 2 {
                let mut padded = [0u8; 8];
                for (to, from) in padded.iter_mut().zip(bytes.get(at..).unwrap_or_default()) {
                    *to = *from;
                }
                let word = word_at(&bytes, at);
                proptest::prop_assert_eq!(word, u64::from_le_bytes(padded));
                let want = padded.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
                let flagged = special_bytes(word);
                let got = (flagged != 0).then(|| (flagged.trailing_zeros() / 8) as usize);
                proptest::prop_assert_eq!(got, want);
            }
        }
    }
}
