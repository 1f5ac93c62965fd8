//! The direct parse path: a bridge frame read in one pass — envelope, typed params, the
//! canonical verdict and the fingerprint — without building a JSON value for it.

use std::borrow::Cow;

use serde_json::Value;

use crate::ids::{canonical_uuid, RequestKey};

use super::canonical::{canonical_integer, parse_u64, write_canonical_str};
use super::command::{CloseCommand, Command, ExecutorCommand, ReadCommand};
use super::envelope::FrameError;
use super::error::{ErrorBody, ErrorCode};
use super::fingerprint::{
    join_fingerprint, split_fingerprint, try_fingerprint, PlainFill, StoredRequest,
};
use super::method::Method;
use super::target::Target;
mod walk;

use walk::{Field, Member, Val, Walk, MAX_MEMBERS, NO_MEMBER};

use super::params::{
    Expect, ExpectCheck, FixtureOptions, PageClickParams, PageFillParams, PagePressParams,
    PageReadParams, ReceiptStatusParams, RunStatusParams, TaskParams, TaskResumeParams,
    TaskStartParams, TaskStopParams,
};

/// A bridge request read straight from its frame, without building a JSON value: the shape
/// nearly every well-formed request takes, and the one the throughput budget is about.
#[derive(Debug)]
pub struct DirectRequest<'a> {
    /// The caller's request ID (already validated), borrowed from the frame.
    pub request_id: &'a str,
    /// The ID's bytes when it is a lowercase hyphenated UUID (read with the ID, so its key
    /// needs no second reading: [`DirectRequest::key`]).
    pub uuid: Option<[u8; 16]>,
    /// The checked command.
    pub command: FrameCommand<'a>,
    /// The canonical `{method, params}`: the fingerprint the receipt keeps.
    pub request: Fingerprint<'a>,
}

impl<'a> DirectRequest<'a> {
    /// A request read by the general path (its ID validated, its command checked).
    pub fn new(request_id: &'a str, command: Command, request: String) -> DirectRequest<'a> {
        DirectRequest {
            request_id,
            uuid: canonical_uuid(request_id.as_bytes()),
            command: FrameCommand::Owned(command),
            request: Fingerprint::whole(request),
        }
    }

    /// The book's key for the request's ID.
    pub fn key(&self) -> RequestKey {
        RequestKey::read(self.request_id, self.uuid)
    }
}

/// A request's checked command as the one-pass reader typed it: a `page.fill` whose strings
/// hold no escapes stays borrowed from the frame until admission makes it a new receipt
/// ([`FrameCommand::into_command`]), so a replay copies none of them; any other command is
/// owned from the start.
#[derive(Clone, Debug)]
pub enum FrameCommand<'a> {
    /// A command the reader owned from the start.
    Owned(Command),
    /// `page.fill`, its params borrowed from the frame.
    Fill {
        /// The task whose page is filled.
        task_id: &'a str,
        /// The field selector.
        target: &'a str,
        /// The text to put in the field.
        value: &'a str,
    },
}

impl FrameCommand<'_> {
    /// The method the command came from.
    pub fn method(&self) -> Method {
        match self {
            FrameCommand::Owned(c) => c.method(),
            FrameCommand::Fill { .. } => Method::PageFill,
        }
    }

    /// The command when it is owned already (every command but a borrowed `page.fill`).
    pub fn owned(&self) -> Option<&Command> {
        match self {
            FrameCommand::Owned(c) => Some(c),
            FrameCommand::Fill { .. } => None,
        }
    }

    /// Whether an executor performs it ([`Command::Execute`]).
    pub fn is_executed(&self) -> bool {
        matches!(
            self,
            FrameCommand::Owned(Command::Execute(_)) | FrameCommand::Fill { .. }
        )
    }

    /// The owned command, for a request admitted as new (or read).
    pub fn into_command(self) -> Command {
        match self {
            FrameCommand::Owned(c) => c,
            FrameCommand::Fill {
                task_id,
                target,
                value,
            } => Command::page_fill(PageFillParams {
                task_id: task_id.to_owned(),
                target: Target::Css(target.to_owned()),
                value: value.to_owned(),
                tab: None,
            }),
        }
    }
}

impl From<Command> for FrameCommand<'_> {
    fn from(c: Command) -> Self {
        FrameCommand::Owned(c)
    }
}

/// A request's fingerprint, its canonical `{method, params}`, kept in pieces: the params text is
/// borrowed from the frame when the frame already wrote it canonically. A replay only compares
/// it with the stored fingerprint ([`Fingerprint::matches`]), so nothing is copied for it; a new
/// receipt keeps what [`StoredRequest`] keeps of it ([`Fingerprint::into_stored`]).
#[derive(Clone, Debug)]
pub struct Fingerprint<'a>(Repr<'a>);

#[derive(Clone, Debug)]
enum Repr<'a> {
    /// `{"method":"METHOD","params":PARAMS}`, with PARAMS canonical.
    Parts {
        method: &'static str,
        params: Cow<'a, str>,
        /// What a new receipt would keep, written before the host's lock is taken
        /// ([`Fingerprint::write_out`]).
        written: Option<StoredRequest>,
    },
    /// The whole canonical text, as the general path writes it.
    Whole(String),
}

impl<'a> Fingerprint<'a> {
    /// A fingerprint written whole (by [`try_fingerprint`]).
    pub fn whole(text: String) -> Fingerprint<'static> {
        Fingerprint(Repr::Whole(text))
    }

    /// A fingerprint of `method` whose canonical params text is `params`.
    fn parts(method: &'static str, params: Cow<'a, str>) -> Fingerprint<'a> {
        Fingerprint(Repr::Parts {
            method,
            params,
            written: None,
        })
    }

    /// Whether `stored`, kept by a receipt of `method` whose task is `task`, is this
    /// fingerprint: the one test that tells a copy of a request from other content under its ID.
    pub fn matches(&self, method: &str, stored: &StoredRequest, task: Option<&str>) -> bool {
        let parts = match &self.0 {
            Repr::Parts { method, params, .. } => Some((*method, &**params)),
            Repr::Whole(text) => split_fingerprint(text),
        };
        let Some((mine, params)) = parts else {
            return *self.text() == *stored.text(method, task);
        };
        match stored.params_are(params, task) {
            Some(same) => same && mine == method,
            None => *self.text() == *stored.text(method, task),
        }
    }

    /// The fingerprint's text (written out unless it is already whole).
    pub fn text(&self) -> Cow<'_, str> {
        match &self.0 {
            Repr::Whole(text) => Cow::Borrowed(text),
            Repr::Parts { method, params, .. } => Cow::Owned(join_fingerprint(method, params)),
        }
    }

    /// Writes what a new receipt of this request would keep for a task `task` now, so that
    /// [`Fingerprint::into_stored`] only moves it: a caller that expects its request to be new
    /// pays for the allocation, and the first touch of fresh memory that comes with it, before
    /// it takes a lock.
    pub fn write_out(&mut self, task: Option<&str>) {
        if let Repr::Parts {
            method,
            params,
            written,
        } = &mut self.0
        {
            *written = Some(StoredRequest::new(method, params, task));
        }
    }

    /// [`Fingerprint::write_out`] for a `page.fill` already read as `fill` (strings without
    /// escapes), for the task it names: its params are compared with the fill's pieces instead
    /// of being read again.
    pub fn write_out_fill(&mut self, fill: PlainFill<'_>) {
        if let Repr::Parts {
            method: "page.fill",
            params,
            written,
        } = &mut self.0
        {
            if fill.is(params) {
                *written = Some(StoredRequest::plain(fill));
                return;
            }
        }
        self.write_out(Some(fill.task_id));
    }

    /// What a new receipt of this request keeps for the task `task` ([`StoredRequest`]),
    /// allocated at its exact size: what [`Fingerprint::write_out`] wrote, when it was written
    /// for that task or does not depend on it ([`StoredRequest::kept_for`]).
    pub fn into_stored(self, task: Option<&str>) -> StoredRequest {
        match self.0 {
            Repr::Parts {
                method,
                params,
                written,
            } => match written {
                Some(stored) if stored.kept_for(method, &params, task) => stored,
                _ => match params {
                    Cow::Borrowed(text) => StoredRequest::new(method, text, task),
                    Cow::Owned(text) => {
                        StoredRequest::from_params(method, text.into_boxed_str(), task)
                    }
                },
            },
            Repr::Whole(text) => {
                let method = split_fingerprint(&text).map_or("", |(method, _)| method);
                StoredRequest::from_text(method, &text, task)
            }
        }
    }
}

/// What one pass over a frame found: a checked request, its refusal, or a frame only the
/// general path ([`parse_envelope`](super::parse_envelope) and [`Command::parse`]) can answer.
#[derive(Debug)]
pub enum ParsedFrame<'a> {
    /// A well-formed request with checked params and its fingerprint.
    Request(DirectRequest<'a>),
    /// Strict, well-shaped JSON whose params fail a check ([`Command`]'s limits, the
    /// executor's selector check): refused here, with the message the general path writes.
    Refused(FrameError),
    /// Anything else — not JSON, escapes in the envelope, repeated or unknown fields, wrong
    /// types, an unknown method: the general path reads it and writes the refusal.
    General,
}

/// Reads a bridge frame in one pass: `id`, `method` and `params`, the params straight into the
/// typed command, and — in the same walk — whether the params text is already RFC 8785
/// canonical, so the fingerprint is that text (otherwise it is written from what was read).
///
/// Whatever this returns as a request or a refusal, the general path returns the same ID,
/// command, fingerprint or error; it returns [`ParsedFrame::General`] for what it does not take.
pub fn parse_frame<'a>(
    frame: &'a [u8],
    check_target: &dyn Fn(&str) -> Result<(), String>,
) -> ParsedFrame<'a> {
    // Filled in place: the member tables are most of its size.
    let mut read = Read {
        id: "",
        uuid: None,
        method: Method::HostHello,
        params: None,
        outer: [NO_MEMBER; MAX_MEMBERS],
        outer_len: 0,
        inner: None,
        inner_len: 0,
        canonical: true,
    };
    match read_frame(frame, &mut read) {
        Some(()) => read.finish(check_target),
        None => ParsedFrame::General,
    }
}

/// [`parse_frame`], for callers that want only the requests it takes as they are.
pub fn parse_request_direct<'a>(
    frame: &'a [u8],
    check_target: &dyn Fn(&str) -> Result<(), String>,
) -> Option<DirectRequest<'a>> {
    match parse_frame(frame, check_target) {
        ParsedFrame::Request(r) => Some(r),
        _ => None,
    }
}

/// A frame read once: its ID, method and params, the params' members, and whether the params
/// text is canonical.
struct Read<'a> {
    id: &'a str,
    uuid: Option<[u8; 16]>,
    method: Method,
    /// The params text as sent (`None` when absent or `null`).
    params: Option<&'a str>,
    outer: [Member<'a>; MAX_MEMBERS],
    outer_len: usize,
    /// Filled in only when the params hold an object.
    inner: Option<[Member<'a>; MAX_MEMBERS]>,
    inner_len: usize,
    canonical: bool,
}

/// Reads the envelope and the params' members; `None` for anything the general path must
/// read (or explain).
fn read_frame<'a>(frame: &'a [u8], read: &mut Read<'a>) -> Option<()> {
    // Not checked as UTF-8 here: the walk checks the strings that hold bytes past ASCII, and
    // takes nothing but ASCII elsewhere.
    let mut w = Walk {
        bytes: frame,
        pos: 0,
        canonical: true,
        high: false,
    };
    let (mut id, mut method, mut params_seen) = (None, None, false);
    w.ws();
    w.eat(b'{')?;
    w.ws();
    if w.peek()? == b'}' {
        w.pos += 1;
    } else {
        loop {
            let key = w.key()?;
            w.colon()?;
            w.ws();
            match key {
                Field::Id if id.is_none() => id = Some(w.id()?),
                // Method names hold no quote, backslash or control: a name that matches one
                // is a plain string.
                Field::Method if method.is_none() => method = Some(method_named(w.short_name()?)?),
                Field::Params if !params_seen => {
                    params_seen = true;
                    if w.bytes[w.pos..].starts_with(b"null") {
                        w.pos += 4;
                    } else {
                        // The members are read whatever the method (it may come after them);
                        // typing them waits for it.
                        let start = w.pos;
                        w.canonical = true;
                        read.outer_len =
                            w.members(&mut read.outer, Some(&mut read.inner), &mut read.inner_len)?;
                        read.canonical = w.canonical;
                        read.params = Some(w.text(start)?);
                    }
                }
                _ => return None,
            }
            if !w.more()? {
                break;
            }
        }
    }
    w.ws();
    if w.pos != frame.len() {
        return None;
    }
    (read.id, read.uuid) = id?;
    read.method = method?;
    Some(())
}

/// The bridge method named `name` (as [`Method`]'s `FromStr` reads it), found by a hash of
/// the name's first and last eight bytes and its length, then compared whole: every request
/// names one.
#[inline]
fn method_named(bytes: &[u8]) -> Option<Method> {
    let (first, last) = (bytes.first_chunk::<8>()?, bytes.last_chunk::<8>()?);
    let (first, last) = (u64::from_le_bytes(*first), u64::from_le_bytes(*last));
    let slot = method_hash(first, last, bytes.len(), METHOD_HASH);
    let (m, words) = METHOD_SLOTS[slot]?;
    // Names of at most 16 bytes are their two words; longer ones are compared whole.
    (words == (first, last, bytes.len()) && (bytes.len() <= 16 || m.as_str().as_bytes() == bytes))
        .then_some(m)
}

/// Where [`method_named`] looks for a name with these words and length, for multiplier `k`.
#[inline(always)]
const fn method_hash(first: u64, last: u64, len: usize, k: u64) -> usize {
    (method_key(first, last, len).wrapping_mul(k) >> 58) as usize
}

/// A method name's words and length mixed into the one word [`method_hash`] multiplies.
#[inline(always)]
const fn method_key(first: u64, last: u64, len: usize) -> u64 {
    first ^ last.rotate_left(29) ^ len as u64
}

/// A method name as [`method_named`] reads it: its first and last eight bytes (little-endian)
/// and its length.
type MethodWords = (u64, u64, usize);

/// A bridge method's [`MethodWords`].
const fn method_words(m: Method) -> MethodWords {
    let name = m.as_str().as_bytes();
    let (mut first, mut last, mut i) = (0u64, 0u64, 0);
    while i < 8 {
        first |= (name[i] as u64) << (8 * i);
        last |= (name[name.len() - 8 + i] as u64) << (8 * i);
        i += 1;
    }
    (first, last, name.len())
}

/// The multiplier of [`method_hash`]: one that gives every bridge method a slot of its own.
const METHOD_HASH: u64 = walk::perfect_multiplier(&{
    let mut keys = [0u64; Method::BRIDGE.len()];
    let mut i = 0;
    while i < keys.len() {
        let (first, last, len) = method_words(Method::BRIDGE[i]);
        keys[i] = method_key(first, last, len);
        i += 1;
    }
    keys
});

/// Each slot of [`method_hash`]: the method that hashes to it, with its words.
static METHOD_SLOTS: [Option<(Method, MethodWords)>; 64] = {
    let mut slots = [None; 64];
    let mut i = 0;
    while i < Method::BRIDGE.len() {
        let m = Method::BRIDGE[i];
        let (first, last, len) = method_words(m);
        slots[method_hash(first, last, len, METHOD_HASH)] = Some((m, (first, last, len)));
        i += 1;
    }
    slots
};

/// Why typing the params failed: the general path explains it.
struct Untyped;

type Typed<T> = Result<T, Untyped>;

impl<'a> Read<'a> {
    /// Types and checks the params, and writes the fingerprint.
    fn finish(&self, check_target: &dyn Fn(&str) -> Result<(), String>) -> ParsedFrame<'a> {
        // A `page.fill` without escapes (nearly every request) is typed straight into the
        // request, its strings borrowed: nothing the size of a command is moved on the way.
        if let Some((task_id, target, value)) = self.plain_fill() {
            if let Err(message) = Command::check_fill(target, value, check_target) {
                return self.refused(message);
            }
            let Some(request) = self.fingerprint() else {
                return ParsedFrame::General;
            };
            return ParsedFrame::Request(DirectRequest {
                request_id: self.id,
                uuid: self.uuid,
                command: FrameCommand::Fill {
                    task_id,
                    target,
                    value,
                },
                request,
            });
        }
        let Ok(command) = self.owned_command() else {
            return ParsedFrame::General;
        };
        if let Err(message) = command.check(check_target) {
            return self.refused(message);
        }
        let Some(request) = self.fingerprint() else {
            return ParsedFrame::General;
        };
        ParsedFrame::Request(DirectRequest {
            request_id: self.id,
            uuid: self.uuid,
            command: FrameCommand::Owned(command),
            request,
        })
    }

    /// The refusal of params that fail a check, with the general path's message.
    fn refused(&self, message: String) -> ParsedFrame<'a> {
        ParsedFrame::Refused(FrameError {
            id: Some(self.id.to_owned()),
            error: ErrorBody::new(ErrorCode::BadRequest, message),
        })
    }

    fn members(&self) -> &[Member<'a>] {
        &self.outer[..self.outer_len]
    }

    /// A `page.fill`'s task ID, target and value when none of them holds an escape (as
    /// serde's derived parser would read the same members, left borrowed); `None` for any
    /// other request, which [`Read::owned_command`] types.
    #[inline]
    fn plain_fill(&self) -> Option<(&'a str, &'a str, &'a str)> {
        if self.method != Method::PageFill {
            return None;
        }
        let [task_id, target, value] =
            fields(self.members(), [Field::TaskId, Field::Target, Field::Value]).ok()?;
        Some((plain(task_id)?, plain(target)?, plain(value)?))
    }

    /// The typed command, owned.
    fn owned_command(&self) -> Typed<Command> {
        let m = self.members();
        Ok(match self.method {
            Method::TaskStart => {
                let [title, url, fixture] = fields(m, [Field::Title, Field::Url, Field::Fixture])?;
                Command::Execute(ExecutorCommand::Start(TaskStartParams {
                    title: string(title)?,
                    url: opt_string(url)?,
                    fixture: match fixture {
                        None | Some(Val::Null) => None,
                        Some(Val::Object { start, len }) => Some(self.fixture(start, len)?),
                        Some(_) => return Err(Untyped),
                    },
                    profile: None,
                }))
            }
            Method::PageFill => {
                let [task_id, target, value] =
                    fields(m, [Field::TaskId, Field::Target, Field::Value])?;
                Command::page_fill(PageFillParams {
                    task_id: string(task_id)?,
                    target: Target::Css(string(target)?),
                    value: string(value)?,
                    tab: None,
                })
            }
            Method::PageClick => {
                let [task_id, target, expect] =
                    fields(m, [Field::TaskId, Field::Target, Field::Expect])?;
                Command::page_click(PageClickParams {
                    task_id: string(task_id)?,
                    target: Target::Css(string(target)?),
                    expect: Some(self.expect(expect)?),
                    local: false,
                    dialog: None,
                    tab: None,
                })
            }
            Method::PagePress => {
                let [task_id, key, target, expect] =
                    fields(m, [Field::TaskId, Field::Key, Field::Target, Field::Expect])?;
                Command::page_press(PagePressParams {
                    task_id: string(task_id)?,
                    key: string(key)?,
                    target: opt_string(target)?.map(Target::Css),
                    expect: Some(self.expect(expect)?),
                    local: false,
                    dialog: None,
                    tab: None,
                })
            }
            Method::PageRead => {
                let [task_id, target] = fields(m, [Field::TaskId, Field::Target])?;
                Command::Read(ReadCommand::PageRead(PageReadParams {
                    task_id: string(task_id)?,
                    target: Target::Css(string(target)?),
                    tab: None,
                }))
            }
            Method::TaskFinish | Method::TaskStatus | Method::TaskVerifyOutcome => {
                let [task_id] = fields(m, [Field::TaskId])?;
                let p = TaskParams {
                    task_id: string(task_id)?,
                };
                match self.method {
                    Method::TaskFinish => Command::Close(CloseCommand::Finish(p)),
                    Method::TaskStatus => Command::Read(ReadCommand::TaskStatus(p)),
                    _ => Command::Read(ReadCommand::TaskVerifyOutcome(p)),
                }
            }
            Method::TaskStop => {
                let [task_id, reason] = fields(m, [Field::TaskId, Field::Reason])?;
                Command::Close(CloseCommand::Stop(TaskStopParams {
                    task_id: string(task_id)?,
                    reason: string(reason)?,
                }))
            }
            Method::TaskResume => {
                let [task_id, run_id] = fields(m, [Field::TaskId, Field::RunId])?;
                Command::Read(ReadCommand::TaskResume(TaskResumeParams {
                    task_id: string(task_id)?,
                    run_id: string(run_id)?,
                }))
            }
            Method::RunStatus => {
                let [run_id] = fields(m, [Field::RunId])?;
                Command::Read(ReadCommand::RunStatus(RunStatusParams {
                    run_id: opt_string(run_id)?,
                }))
            }
            Method::ReceiptStatus => {
                let [request_id] = fields(m, [Field::RequestId])?;
                Command::Read(ReadCommand::ReceiptStatus(ReceiptStatusParams {
                    request_id: string(request_id)?,
                }))
            }
            // The page vocabulary of SPEC §15 is read by the general path: its params hold
            // the object forms (targets, `url` expectations) the walk does not type.
            Method::PageSnapshot
            | Method::PageWait
            | Method::PageScreenshot
            | Method::PageUrl
            | Method::PageTabs
            | Method::TaskSaveProfile
            | Method::PageNavigate
            | Method::PageSelect
            | Method::PageCheck
            | Method::PageUpload
            | Method::PageHover
            | Method::PageType => return Err(Untyped),
            Method::HostHello | Method::ToolsList => {
                let [] = fields(m, [])?;
                if self.method == Method::HostHello {
                    Command::Read(ReadCommand::HostHello)
                } else {
                    Command::Read(ReadCommand::ToolsList)
                }
            }
        })
    }

    fn inner(&self, start: u8, len: u8) -> &[Member<'a>] {
        let (start, len) = (usize::from(start), usize::from(len));
        // The walk put the object's members there: the range is always in the table.
        self.inner
            .as_ref()
            .and_then(|t| t.get(start..start + len))
            .unwrap_or_default()
    }

    /// `expect`: an object of `target` and exactly one of `equals` or `contains`.
    fn expect(&self, v: Option<Val<'a>>) -> Typed<Expect> {
        let Some(Val::Object { start, len }) = v else {
            return Err(Untyped);
        };
        let [target, equals, contains] = fields(
            self.inner(start, len),
            [Field::Target, Field::Equals, Field::Contains],
        )?;
        let check = match (opt_string(equals)?, opt_string(contains)?) {
            (Some(e), None) => ExpectCheck::Equals(e),
            (None, Some(c)) => ExpectCheck::Contains(c),
            _ => return Err(Untyped),
        };
        Ok(Expect::on(Target::Css(string(target)?), check))
    }

    /// `fixture`: the fixture page's options, each defaulted.
    fn fixture(&self, start: u8, len: u8) -> Typed<FixtureOptions> {
        let [submit_delay, drop_submit, fail_submit, read_delay] = fields(
            self.inner(start, len),
            [
                Field::SubmitDelayMs,
                Field::DropSubmit,
                Field::FailSubmit,
                Field::ReadDelayMs,
            ],
        )?;
        let number = |v: Option<Val<'_>>| match v {
            None => Ok(0),
            Some(Val::Int {
                negative: false,
                digits,
            }) => parse_u64(digits).ok_or(Untyped),
            Some(_) => Err(Untyped),
        };
        let flag = |v: Option<Val<'_>>| match v {
            None => Ok(false),
            Some(Val::Bool(b)) => Ok(b),
            Some(_) => Err(Untyped),
        };
        Ok(FixtureOptions {
            submit_delay_ms: number(submit_delay)?,
            drop_submit: flag(drop_submit)?,
            fail_submit: flag(fail_submit)?,
            read_delay_ms: number(read_delay)?,
        })
    }

    /// The canonical `{method, params}`: the params text itself when the walk found it
    /// canonical, else written from the members. `None` for numbers only the general
    /// canonicaliser writes (none of which a valid request holds).
    fn fingerprint(&self) -> Option<Fingerprint<'a>> {
        let method = self.method.as_str();
        let params = self.params.unwrap_or("{}");
        if self.canonical {
            return Some(Fingerprint::parts(method, Cow::Borrowed(params)));
        }
        let mut out = String::with_capacity(params.len());
        if self.write_object(self.members(), &mut out).is_none() {
            let value: Value = serde_json::from_str(params).ok()?;
            return try_fingerprint(method, &value).ok().map(Fingerprint::whole);
        }
        Some(Fingerprint::parts(method, Cow::Owned(out)))
    }

    /// Writes an object's members as RFC 8785 does: keys (ASCII here) in byte order.
    fn write_object(&self, members: &[Member<'a>], out: &mut String) -> Option<()> {
        let mut sorted = [NO_MEMBER; MAX_MEMBERS];
        let sorted = &mut sorted[..members.len()];
        sorted.copy_from_slice(members);
        sorted.sort_unstable_by_key(|m| m.key.rank());
        out.push('{');
        for (i, m) in sorted.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // Keys are field names: ASCII, nothing to escape.
            out.push('"');
            out.push_str(m.key.name());
            out.push_str("\":");
            match m.val {
                Val::Null => out.push_str("null"),
                Val::Bool(true) => out.push_str("true"),
                Val::Bool(false) => out.push_str("false"),
                Val::Int { negative, digits } => {
                    if !canonical_integer(negative, digits) {
                        if digits != b"0" {
                            return None;
                        }
                    } else if negative {
                        out.push('-');
                    }
                    // Integers are ASCII digits.
                    out.push_str(std::str::from_utf8(digits).ok()?);
                }
                Val::Float => return None,
                // Without escapes the text has nothing RFC 8785 escapes: it is written as is.
                Val::Str(s) if !s.escaped => {
                    out.push('"');
                    out.push_str(s.raw);
                    out.push('"');
                }
                Val::Str(s) => write_canonical_str(&s.value()?, out),
                Val::Object { start, len } => self.write_object(self.inner(start, len), out)?,
            }
        }
        out.push('}');
        Some(())
    }
}

/// The values of the named fields among `members`, in the order named; `Err` for a member no
/// field takes (serde's `deny_unknown_fields`).
#[inline]
fn fields<'a, const N: usize>(
    members: &[Member<'a>],
    names: [Field; N],
) -> Typed<[Option<Val<'a>>; N]> {
    let mut found = [None; N];
    for m in members {
        let i = names.iter().position(|n| *n == m.key).ok_or(Untyped)?;
        found[i] = Some(m.val);
    }
    Ok(found)
}

/// A string field's text when it holds no escapes (its value as it is).
#[inline]
fn plain(v: Option<Val<'_>>) -> Option<&str> {
    match v {
        Some(Val::Str(s)) if !s.escaped => Some(s.raw),
        _ => None,
    }
}

/// A required string field.
#[inline]
fn string(v: Option<Val<'_>>) -> Typed<String> {
    match v {
        Some(Val::Str(s)) => s.owned().ok_or(Untyped),
        _ => Err(Untyped),
    }
}

/// An optional string field: absent or `null` is `None`.
#[inline]
fn opt_string(v: Option<Val<'_>>) -> Typed<Option<String>> {
    match v {
        None | Some(Val::Null) => Ok(None),
        Some(Val::Str(s)) => s.owned().map(Some).ok_or(Untyped),
        Some(_) => Err(Untyped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::parse_envelope;
    use crate::test_frames::{self, check_target};

    /// What the general path makes of a frame: envelope, method, command and fingerprint, all
    /// from a `Value`; a refusal is the `id` it names and its message.
    fn general_request(
        frame: &[u8],
        check: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<(String, String, String), (Option<String>, String)> {
        let env = parse_envelope(frame).map_err(|e| (e.id, e.error.message))?;
        let id = Some(env.id.clone());
        let method: Method = env
            .method
            .parse()
            .map_err(|()| (id.clone(), "unknown method".to_owned()))?;
        let cmd = Command::parse(method, &env.params, check).map_err(|e| (id.clone(), e))?;
        let request = try_fingerprint(method.as_str(), &env.params).map_err(|e| (id, e))?;
        Ok((env.id, format!("{cmd:?}"), request))
    }

    /// Checks one frame: whatever the one-pass reader answers (a request or a refusal), the
    /// general path answers the same; and a well-formed request whose ID has no escapes is
    /// never left to the general path.
    fn agrees(frame: &[u8]) -> Result<(), String> {
        let general = general_request(frame, &check_target);
        let shown = String::from_utf8_lossy(frame);
        match parse_frame(frame, &check_target) {
            ParsedFrame::Request(r) => {
                let direct = Ok((
                    r.request_id.to_owned(),
                    format!("{:?}", r.command.clone().into_command()),
                    r.request.text().into_owned(),
                ));
                if r.key() != RequestKey::new(r.request_id) {
                    return Err(format!("{shown}\nthe key read with the ID: {:?}", r.key()));
                }
                // The pieces compare as the whole text does, and a new receipt keeps what gives
                // the whole text back.
                let text = r.request.text().into_owned();
                let method = r.command.method().as_str();
                let mut other = text.clone();
                other.insert(other.len() - 1, ' ');
                // Kept for no task, for the task it names (a plain fill is kept short then) and
                // for another task, written ahead for the same task or for none.
                let named: Option<String> = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["params"]["taskId"].as_str().map(str::to_owned));
                for task in [None, named.as_deref(), Some("another-task")] {
                    let stored = |t: &str| StoredRequest::from_text(method, t, task);
                    let kept = r.request.clone().into_stored(task);
                    let mut ahead = r.request.clone();
                    ahead.write_out(task);
                    let mut ahead_for_none = r.request.clone();
                    ahead_for_none.write_out(None);
                    let mut ahead_for_other = r.request.clone();
                    ahead_for_other.write_out(Some("some-other-task"));
                    // A fill read without escapes, written ahead from its strings.
                    let as_fill = match &r.command {
                        FrameCommand::Fill {
                            task_id,
                            target,
                            value,
                        } => {
                            let mut ahead = r.request.clone();
                            ahead.write_out_fill(PlainFill {
                                target,
                                task_id,
                                value,
                            });
                            Some((task_id, ahead.into_stored(task)))
                        }
                        FrameCommand::Owned(_) => None,
                    };
                    if let Some((task_id, stored)) = &as_fill {
                        if *stored != kept
                            || (task == Some(**task_id)
                                && !text.contains('\\')
                                && PlainFill::read(split_fingerprint(&text).unwrap().1).is_some()
                                && stored.plain_fill().is_none())
                        {
                            return Err(format!(
                                "{shown}\nwritten ahead from the fill's strings for task {task:?}: {stored:?}"
                            ));
                        }
                    }
                    let short = kept.plain_fill().is_some();
                    if !r.request.matches(method, &stored(&text), task)
                        || r.request.matches(method, &stored(&other), task)
                        || r.request
                            .matches(method, &stored(&text[..text.len() - 1]), task)
                        || r.request.matches("page.other", &stored(&text), task)
                        || (short && r.request.matches(method, &kept, Some("a-third-task")))
                        || (short
                            && (task.is_none()
                                || task != named.as_deref()
                                || method != "page.fill"
                                || text.contains('\\')))
                        || (!short && kept.params().is_none())
                        || kept != stored(&text)
                        || kept.text(method, task) != text
                        || ahead.into_stored(task) != kept
                        || ahead_for_none.into_stored(task) != kept
                        || ahead_for_other.into_stored(task) != kept
                    {
                        return Err(format!(
                            "{shown}\nthe fingerprint's pieces for task {task:?}: {:?}",
                            r.request
                        ));
                    }
                }
                if direct != general {
                    return Err(format!("{shown}\n direct {direct:?}\ngeneral {general:?}"));
                }
            }
            ParsedFrame::Refused(e) => {
                let direct = Err((e.id, e.error.message));
                if e.error.code != ErrorCode::BadRequest || direct != general {
                    return Err(format!("{shown}\n direct {direct:?}\ngeneral {general:?}"));
                }
            }
            ParsedFrame::General => {
                if general.is_ok() {
                    // The ID written with escapes is the one thing left to the general path.
                    let fields: std::collections::HashMap<
                        String,
                        Box<serde_json::value::RawValue>,
                    > = serde_json::from_slice(frame).expect("the general path read it");
                    if !fields["id"].get().contains('\\') {
                        return Err(format!("{shown}\nleft to the general path: {general:?}"));
                    }
                }
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// The one-pass reader agrees with the general path on every frame: same ID, command
        /// and fingerprint for a request (params keys in any order, spaces, every kind of
        /// escape), same refusal for params that fail a check, and it takes every well-formed
        /// request; malformed envelopes and raw bytes included.
        #[test]
        fn the_one_pass_reader_agrees_with_the_general_path(frame in test_frames::request_frame()) {
            if let Err(e) = agrees(&frame) {
                proptest::prop_assert!(false, "{}", e);
            }
        }
    }

    #[test]
    fn methods_are_named_as_their_parser_names_them() {
        for m in Method::BRIDGE {
            assert_eq!(method_named(m.as_str().as_bytes()), Some(*m));
            let name = m.as_str();
            let mut near = vec![
                format!("{name}x"),
                format!("x{name}"),
                name[..name.len() - 1].to_owned(),
                name[1..].to_owned(),
                name.to_uppercase(),
            ];
            for i in 0..name.len() {
                let mut b = name.as_bytes().to_vec();
                b[i] ^= 1;
                near.push(String::from_utf8(b).expect("ASCII"));
            }
            for other in near {
                assert_eq!(
                    method_named(other.as_bytes()),
                    other.parse().ok(),
                    "{other}"
                );
            }
        }
        for other in [
            "",
            "page",
            "page.fil",
            "task.verifyOutcomes",
            "host.hello\\u0000",
        ] {
            assert_eq!(method_named(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn the_one_pass_reader_takes_well_formed_requests_and_leaves_the_rest() {
        fn direct(frame: &str) -> Option<DirectRequest<'_>> {
            assert_eq!(agrees(frame.as_bytes()), Ok(()));
            parse_request_direct(frame.as_bytes(), &check_target)
        }
        // Canonical params: the fingerprint is the text itself.
        let r = direct(r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"a\n\u0001é"}}"##).unwrap();
        assert_eq!(r.request_id, "r1");
        assert_eq!(r.command.method(), Method::PageFill);
        assert_eq!(
            r.request.text(),
            r##"{"method":"page.fill","params":{"target":"#title","taskId":"t","value":"a\n\u0001é"}}"##
        );
        assert!(matches!(
            r.request.0,
            Repr::Parts {
                params: Cow::Borrowed(_),
                ..
            }
        ));
        // Keys out of order, spaces, escapes the canonicaliser does not write, the method
        // after the params: still taken, with the canonical fingerprint.
        for frame in [
            r##"{"id":"r1","method":"page.fill","params":{"taskId":"t","target":"#title","value":"Hi"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title", "taskId":"t","value":"Hi"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"H\u0069"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"H\u0069"}}"##,
            r##"{"params":{"value":"Hi","target":"\u0023title","taskId":"t"},"id":"r1","method":"page.fill"}"##,
            r##" { "id" : "r1" , "method" : "page.fill" , "params" : { "target" : "#title" , "taskId" : "t" , "value" : "Hi" } } "##,
        ] {
            let r = direct(frame).unwrap();
            assert_eq!(
                r.request.text(),
                r##"{"method":"page.fill","params":{"target":"#title","taskId":"t","value":"Hi"}}"##,
                "{frame}"
            );
        }
        // A fill without escapes keeps its strings borrowed from the frame.
        let r = direct(r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"Hi"}}"##).unwrap();
        assert!(matches!(
            r.command,
            FrameCommand::Fill {
                task_id: "t",
                target: "#title",
                value: "Hi"
            }
        ));
        let r = direct(r##"{"id":"r1","method":"page.press","params":{"taskId":"t","key":"Enter","target":null,"expect":{"target":"#status","equals":null,"contains":"Sa\/ved\uD83D\uDE00"}}}"##).unwrap();
        assert_eq!(
            r.request.text(),
            "{\"method\":\"page.press\",\"params\":{\"expect\":{\"contains\":\"Sa/ved\u{1F600}\",\"equals\":null,\"target\":\"#status\"},\"key\":\"Enter\",\"target\":null,\"taskId\":\"t\"}}"
        );
        // No params, or null params, are `{}`.
        assert_eq!(
            direct(r#"{"id":"r1","method":"host.hello"}"#)
                .unwrap()
                .request
                .text(),
            r#"{"method":"host.hello","params":{}}"#
        );
        assert_eq!(
            direct(r#"{"id":"r1","method":"host.hello","params":null}"#)
                .unwrap()
                .request
                .text(),
            r#"{"method":"host.hello","params":{}}"#
        );
        // Params that fail a check are refused here, with the general path's message.
        for frame in [
            r##"{"id":"r1","method":"page.fill","params":{"target":"title","taskId":"t","value":"a"}}"##,
            r##"{"id":"r1","method":"task.start","params":{"title":"","fixture":{"submitDelayMs":70000}}}"##,
            r##"{"id":"r1","method":"receipt.status","params":{"requestId":"a b"}}"##,
        ] {
            assert_eq!(agrees(frame.as_bytes()), Ok(()));
            assert!(
                matches!(parse_frame(frame.as_bytes(), &check_target), ParsedFrame::Refused(FrameError { id: Some(ref id), .. }) if id == "r1"),
                "{frame}"
            );
        }
        // Everything the general path has to explain is left to it.
        for frame in [
            r#"{"id":"r\u0031","method":"host.hello"}"#,
            r#"{"id":"r1","id":"r2","method":"host.hello"}"#,
            r#"{"id":"a b","method":"host.hello"}"#,
            r#"{"id":"r1","method":"host.hell"}"#,
            r#"{"id":"r1","method":"host.hello","params":[]}"#,
            r#"{"id":"r1","method":"host.hello","params":{"x":1}}"#,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","taskId":"u","value":"a"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"\ud800"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":1}}"##,
            r##"{"id":"r1","method":"page.click","params":{"target":"#a","taskId":"t","expect":{"target":"#s","equals":"a","contains":"b"}}}"##,
            r##"{"id":"r1","method":"task.start","params":{"title":"t","fixture":{"submitDelayMs":1e3}}}"##,
            r##"{"id":"r1","method":"task.start","params":{"title":"t","fixture":[3000]}}"##,
            r#"{"id":"r1","method":"host.hello","extra":1}"#,
            r#"{"id":"r1","method":"host.hello"} x"#,
            "not json",
            "{\"id\":\"r1\",\"method\":\"host.hello\",\"params\":{\"a\":\"\u{1}\"}}",
        ] {
            assert_eq!(agrees(frame.as_bytes()), Ok(()), "{frame}");
            assert!(
                matches!(
                    parse_frame(frame.as_bytes(), &check_target),
                    ParsedFrame::General
                ),
                "{frame}"
            );
        }
        assert!(matches!(
            parse_frame(
                b"{\"id\":\"r1\",\"method\":\"host.hello\",\"params\":{\"a\":\"\xff\"}}",
                &check_target
            ),
            ParsedFrame::General
        ));
        // The method is matched whole where it stands: at the frame's end, or written with
        // an escape (left to the general path, which reads it).
        assert!(direct(r#"{"id":"r1","params":null,"method":"host.hello"}"#).is_some());
        assert!(
            direct(r#"{"id":"r1","method":"task.verifyOutcome","params":{"taskId":"t"}}"#)
                .is_some()
        );
        for frame in [
            r#"{"id":"r1","method":"host.hel\u006co"}"#,
            r#"{"id":"r1","method":"host.hello"#,
            r#"{"id":"r1","method":"host.hello\"}"#,
        ] {
            assert!(
                matches!(
                    parse_frame(frame.as_bytes(), &check_target),
                    ParsedFrame::General
                ),
                "{frame}"
            );
        }
    }
}
#[cfg(test)]
mod sizes {
    use std::mem::size_of;

    /// Every request's command is moved several times between the frame and its storing, and
    /// a fill's borrowed form shares the enum with the owned one: the page vocabulary keeps
    /// its rare, large parts boxed so the hottest path does not copy them (measured: an
    /// unboxed locator cost the fresh fill 5 % more instructions, mostly `memcpy`).
    #[test]
    fn commands_stay_small_enough_to_move() {
        assert!(size_of::<crate::Target>() <= 32);
        assert!(size_of::<crate::Expect>() <= 64);
        assert!(size_of::<super::FrameCommand>() <= 160);
        assert!(size_of::<super::DirectRequest>() <= 256);
    }
}
