//! The wire format: request and reply shapes, error codes with their `delivery`, the
//! per-method parameter types and the line codec with its frame limit.
//!
//! This is the only place the wire format is spelled out; the host, the clients, the console
//! and the tests all speak through these types.

use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The protocol version `host.hello` reports.
pub const PROTOCOL_VERSION: u32 = 1;
/// Default `--max-frame-bytes`: the longest line a peer may send.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 1024 * 1024;
/// At most this many requests of one connection are handled at once; beyond it the host stops
/// reading from that connection until replies drain.
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;
/// The longest request ID accepted.
pub const MAX_ID_LEN: usize = 128;

/// What happened to the side effect a message asked for. Every error carries one, so a caller
/// never has to guess whether resending would repeat an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The host is certain it did not execute this message's content (and will not).
    NotExecuted,
    /// Executed and definitively failed; the executor reports no effect.
    Failed,
    /// Delivered; whether the effect happened is unknown: read, don't resend.
    Uncertain,
    /// This ID's content ran earlier; its stored reply was cleared by an operator.
    Cleared,
    /// (client side) the connection broke after sending; the host may or may not have it.
    Unknown,
    /// (client side) nothing was written to the host.
    NotSent,
}

impl Delivery {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::NotExecuted => "not_executed",
            Delivery::Failed => "failed",
            Delivery::Uncertain => "uncertain",
            Delivery::Cleared => "cleared",
            Delivery::Unknown => "unknown",
            Delivery::NotSent => "not_sent",
        }
    }
}

macro_rules! error_codes {
    ($($variant:ident => $wire:literal, $delivery:ident;)*) => {
        /// Every error code of the contract, host and client side.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum ErrorCode {
            $(
                #[doc = concat!("`", $wire, "`")]
                #[serde(rename = $wire)]
                $variant,
            )*
        }

        impl ErrorCode {
            /// Every code, in the order of the contract's table.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The wire spelling, e.g. `TASK_BLOCKED`.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $wire,)* }
            }

            /// The `delivery` this code carries unless the situation says otherwise
            /// (only `RECEIPT_CLEARED` varies: `cleared` or `not_executed`).
            pub fn default_delivery(self) -> Delivery {
                match self { $(ErrorCode::$variant => Delivery::$delivery,)* }
            }
        }

        impl FromStr for ErrorCode {
            type Err = ();
            fn from_str(s: &str) -> Result<Self, ()> {
                match s { $($wire => Ok(ErrorCode::$variant),)* _ => Err(()) }
            }
        }
    };
}

error_codes! {
    BadRequest => "BAD_REQUEST", NotExecuted;
    UnknownMethod => "UNKNOWN_METHOD", NotExecuted;
    FrameTooLarge => "FRAME_TOO_LARGE", NotExecuted;
    RequestIdReused => "MCP_REQUEST_ID_REUSED", NotExecuted;
    ReceiptCleared => "RECEIPT_CLEARED", Cleared;
    ReceiptCapacityFull => "RECEIPT_CAPACITY_FULL", NotExecuted;
    TaskNotFound => "TASK_NOT_FOUND", NotExecuted;
    TaskBlocked => "TASK_BLOCKED", NotExecuted;
    TaskClosed => "TASK_CLOSED", NotExecuted;
    ActionFailed => "ACTION_FAILED", Failed;
    OutcomeUncertain => "OUTCOME_UNCERTAIN", Uncertain;
    ReadTimeout => "READ_TIMEOUT", NotExecuted;
    RunNotCurrent => "RUN_NOT_CURRENT", NotExecuted;
    Internal => "INTERNAL", Uncertain;
    ShuttingDown => "SHUTTING_DOWN", NotExecuted;
    ClearTokenStale => "CLEAR_TOKEN_STALE", NotExecuted;
    TombstoneCapacityFull => "TOMBSTONE_CAPACITY_FULL", NotExecuted;
    BridgeUnavailable => "BRIDGE_UNAVAILABLE", NotSent;
    BridgeDisconnected => "BRIDGE_DISCONNECTED", Unknown;
    BridgeTimeout => "BRIDGE_TIMEOUT", Unknown;
    ClientBlockedAmbiguous => "CLIENT_BLOCKED_AMBIGUOUS", NotSent;
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `error` object of a reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// Which rule refused or failed the request.
    pub code: ErrorCode,
    /// One sentence: what happened and what to read next.
    pub message: String,
    /// What happened to the side effect this message asked for.
    pub delivery: Delivery,
    /// Always `false`: no error is a licence to resend automatically.
    pub automatic_replay: bool,
    /// Code-specific facts (stored method, pending outcome, capacity, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ErrorBody {
    /// An error with the code's usual delivery.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
            delivery: code.default_delivery(),
            automatic_replay: false,
            details: None,
        }
    }

    /// Attaches `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Overrides the delivery (used by `RECEIPT_CLEARED`).
    pub fn with_delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }
}

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

/// `meta` of a reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The host run that answered; a different one means the book was not the same.
    pub run_id: String,
    /// How this reply relates to the receipt book.
    pub receipt: ReceiptKind,
}

/// A reply as a client reads it.
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
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The JSON members `ok` and `result` or `error`, without braces.
    pub body: Box<str>,
    /// The error code when `ok` is false.
    pub code: Option<ErrorCode>,
}

impl Outcome {
    /// A successful result.
    pub fn ok<T: Serialize + ?Sized>(result: &T) -> Outcome {
        Outcome {
            body: stored_body(b"\"ok\":true,\"result\":", result),
            code: None,
        }
    }

    /// An error result.
    pub fn err(error: &ErrorBody) -> Outcome {
        Outcome {
            body: stored_body(b"\"ok\":false,\"error\":", error),
            code: Some(error.code),
        }
    }

    /// Whether the outcome is a success.
    pub fn is_ok(&self) -> bool {
        self.code.is_none()
    }

    /// The outcome as a JSON object `{"ok":…,"result"|"error":…}`.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&format!("{{{}}}", self.body)).unwrap_or(Value::Null)
    }

    /// Writes the full reply line (with its trailing newline).
    pub fn reply_line(&self, id: Option<&str>, run_id: &str, receipt: ReceiptKind) -> Vec<u8> {
        let mut line = Vec::with_capacity(self.body.len() + 96 + id.map_or(4, str::len));
        line.extend_from_slice(b"{\"id\":");
        match id {
            Some(id) => write_json_str(&mut line, id),
            None => line.extend_from_slice(b"null"),
        }
        line.push(b',');
        line.extend_from_slice(self.body.as_bytes());
        line.extend_from_slice(b",\"meta\":{\"runId\":");
        write_json_str(&mut line, run_id);
        line.extend_from_slice(b",\"receipt\":\"");
        line.extend_from_slice(receipt.as_str().as_bytes());
        line.extend_from_slice(b"\"}}\n");
        line
    }
}

/// The bytes a request ID may hold, `[A-Za-z0-9._:-]`, as a table: every request's ID is
/// checked, so the check is one lookup per byte.
static ID_ALPHABET: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-');
        b += 1;
    }
    table
};

/// Writes `prefix` and `value` into a stored reply body of exactly the right size: the text is
/// built in a per-thread scratch buffer, so the receipt's copy is the one allocation it keeps.
fn stored_body<T: Serialize + ?Sized>(prefix: &[u8], value: &T) -> Box<str> {
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
        let body = std::str::from_utf8(buf)
            .expect("serde_json writes UTF-8")
            .into();
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
    if s.bytes().all(|b| ID_ALPHABET[usize::from(b)]) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, s).expect("a string always serialises");
    }
}

/// Checks a request ID: 1–128 characters from `[A-Za-z0-9._:-]`.
pub fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!(
            "id must be 1 to {MAX_ID_LEN} characters long (got {})",
            id.len()
        ));
    }
    if id.bytes().all(|b| ID_ALPHABET[usize::from(b)]) {
        return Ok(());
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(format!(
            "id may only contain letters, digits and . _ : - (found {bad:?}); a fresh UUID is a good id"
        ));
    }
    Ok(())
}

/// Every method of both sockets, by wire name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `task.start`
    TaskStart,
    /// `page.fill`
    PageFill,
    /// `page.click`
    PageClick,
    /// `page.press`
    PagePress,
    /// `task.finish`
    TaskFinish,
    /// `task.stop`
    TaskStop,
    /// `host.hello`
    HostHello,
    /// `tools.list`
    ToolsList,
    /// `page.read`
    PageRead,
    /// `task.status`
    TaskStatus,
    /// `task.resume`
    TaskResume,
    /// `task.verifyOutcome`
    TaskVerifyOutcome,
    /// `run.status`
    RunStatus,
    /// `receipt.status`
    ReceiptStatus,
}

impl Method {
    /// The methods of the bridge socket, in the order `tools.list` reports them.
    pub const BRIDGE: &'static [Method] = &[
        Method::TaskStart,
        Method::PageFill,
        Method::PageClick,
        Method::PagePress,
        Method::PageRead,
        Method::TaskFinish,
        Method::TaskStop,
        Method::TaskStatus,
        Method::TaskResume,
        Method::TaskVerifyOutcome,
        Method::RunStatus,
        Method::ReceiptStatus,
        Method::HostHello,
        Method::ToolsList,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::TaskStart => "task.start",
            Method::PageFill => "page.fill",
            Method::PageClick => "page.click",
            Method::PagePress => "page.press",
            Method::TaskFinish => "task.finish",
            Method::TaskStop => "task.stop",
            Method::HostHello => "host.hello",
            Method::ToolsList => "tools.list",
            Method::PageRead => "page.read",
            Method::TaskStatus => "task.status",
            Method::TaskResume => "task.resume",
            Method::TaskVerifyOutcome => "task.verifyOutcome",
            Method::RunStatus => "run.status",
            Method::ReceiptStatus => "receipt.status",
        }
    }

    /// Whether the method asks for a side effect (and so takes a receipt).
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Method::TaskStart
                | Method::PageFill
                | Method::PageClick
                | Method::PagePress
                | Method::TaskFinish
                | Method::TaskStop
        )
    }

    /// One line for `tools.list` and the MCP tool descriptions.
    pub fn description(self) -> &'static str {
        match self {
            Method::TaskStart => "Start a task: opens a page for one unit of business work and returns its taskId and runId; keep both.",
            Method::PageFill => "Fill a field of the task's page with a value (a page-local change).",
            Method::PageClick => "Click a target and observe the expectation that shows the click took effect.",
            Method::PagePress => "Press a key (Enter submits) and observe the expectation that shows it took effect.",
            Method::TaskFinish => "Finish a task whose work is done; a blocked task cannot finish until its outcome is verified.",
            Method::TaskStop => "Stop a task with a reason; an unresolved pending outcome stays recorded.",
            Method::HostHello => "Name, version, protocol, run and capacity of this host.",
            Method::ToolsList => "The methods of this socket and whether each one mutates.",
            Method::PageRead => "Read the current value of a target on the task's page.",
            Method::TaskStatus => "A task's state, its pending outcome and its recent history.",
            Method::TaskResume => "Check a kept (taskId, runId) pair against this run and return the task's state.",
            Method::TaskVerifyOutcome => "Read-only check of a blocked task's pending action against its original expectation.",
            Method::RunStatus => "This run's receipts, tasks and executor mutation count.",
            Method::ReceiptStatus => "The current state and stored reply of a request ID: read this instead of resending.",
        }
    }
}

impl FromStr for Method {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        Method::BRIDGE
            .iter()
            .copied()
            .find(|m| m.as_str() == s)
            .ok_or(())
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The observation that shows an action took effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Expect {
    /// The selector to read.
    pub target: String,
    /// What the target's value must be, or contain.
    #[serde(flatten)]
    pub check: ExpectCheck,
}

/// How an expectation compares the observed value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpectCheck {
    /// The value equals this string exactly.
    Equals(String),
    /// The value contains this string.
    Contains(String),
}

impl Expect {
    /// Whether an observed value satisfies the expectation.
    pub fn holds(&self, observed: &str) -> bool {
        match &self.check {
            ExpectCheck::Equals(want) => observed == want,
            ExpectCheck::Contains(want) => observed.contains(want.as_str()),
        }
    }
}

impl<'de> Deserialize<'de> for Expect {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            target: String,
            equals: Option<String>,
            contains: Option<String>,
        }
        let raw = Raw::deserialize(d)?;
        let check = match (raw.equals, raw.contains) {
            (Some(e), None) => ExpectCheck::Equals(e),
            (None, Some(c)) => ExpectCheck::Contains(c),
            _ => {
                return Err(serde::de::Error::custom(
                    "expect needs exactly one of `equals` or `contains` beside `target`",
                ))
            }
        };
        Ok(Expect {
            target: raw.target,
            check,
        })
    }
}

/// Options of the fixture page, chosen per task at `task.start`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureOptions {
    /// The submit applies after this delay, even after the action's deadline (0–60000).
    #[serde(default)]
    pub submit_delay_ms: u64,
    /// The submit is lost and never applies.
    #[serde(default)]
    pub drop_submit: bool,
    /// The backend rejects the submit definitively.
    #[serde(default)]
    pub fail_submit: bool,
    /// Every read takes this long (0–60000).
    #[serde(default)]
    pub read_delay_ms: u64,
}

/// The longest delay a fixture option accepts.
pub const MAX_FIXTURE_DELAY_MS: u64 = 60_000;

/// The longest `url` a task may name (SPEC §10).
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// `task.start` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskStartParams {
    /// What the task is for (1–200 characters).
    pub title: String,
    /// The page the task works on.
    #[serde(default)]
    pub url: Option<String>,
    /// Fixture behaviour for this task's page.
    #[serde(default)]
    pub fixture: Option<FixtureOptions>,
}

/// `page.fill` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageFillParams {
    /// The task whose page is filled.
    pub task_id: String,
    /// The field selector.
    pub target: String,
    /// The text to put in the field.
    pub value: String,
}

/// `page.click` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageClickParams {
    /// The task whose page is clicked.
    pub task_id: String,
    /// What to click.
    pub target: String,
    /// The observation that shows the click took effect.
    pub expect: Expect,
}

/// `page.press` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PagePressParams {
    /// The task whose page gets the key.
    pub task_id: String,
    /// The key, e.g. `Enter`.
    pub key: String,
    /// The focused target.
    #[serde(default)]
    pub target: Option<String>,
    /// The observation that shows the key press took effect.
    pub expect: Expect,
}

/// `page.read` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageReadParams {
    /// The task whose page is read.
    pub task_id: String,
    /// The selector to read.
    pub target: String,
}

/// Params of methods that only name a task (`task.finish`, `task.status`, `task.verifyOutcome`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskParams {
    /// The task.
    pub task_id: String,
}

/// `task.stop` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskStopParams {
    /// The task to stop.
    pub task_id: String,
    /// Why it is stopped (1–500 characters); kept with the task.
    pub reason: String,
}

/// `task.resume` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskResumeParams {
    /// The task the caller kept.
    pub task_id: String,
    /// The run the caller kept with it.
    pub run_id: String,
}

/// `run.status` params.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunStatusParams {
    /// A run the caller kept, to compare with the current one.
    #[serde(default)]
    pub run_id: Option<String>,
}

/// `receipt.status` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptStatusParams {
    /// The request ID to look up.
    pub request_id: String,
}

/// Params of methods that take none.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Where a command's params are read from: a parsed [`Value`], or the raw params text of a
/// frame, so that a well-formed request becomes a [`Command`] without building a `Value` first.
pub trait Params {
    /// Deserialises the params as `T`; the error is serde's own message, which differs between
    /// sources (the host only shows the messages of the `Value` source).
    fn typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error>;
}

impl Params for Value {
    fn typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(self)
    }
}

impl Params for RawValue {
    fn typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.get())
    }
}

/// A bridge request after validation: the typed command plus what the receipt book needs.
#[derive(Clone, Debug)]
pub enum Command {
    /// `task.start`
    TaskStart(TaskStartParams),
    /// `page.fill`
    PageFill(PageFillParams),
    /// `page.click`
    PageClick(PageClickParams),
    /// `page.press`
    PagePress(PagePressParams),
    /// `task.finish`
    TaskFinish(TaskParams),
    /// `task.stop`
    TaskStop(TaskStopParams),
    /// `host.hello`
    HostHello,
    /// `tools.list`
    ToolsList,
    /// `page.read`
    PageRead(PageReadParams),
    /// `task.status`
    TaskStatus(TaskParams),
    /// `task.resume`
    TaskResume(TaskResumeParams),
    /// `task.verifyOutcome`
    TaskVerifyOutcome(TaskParams),
    /// `run.status`
    RunStatus(RunStatusParams),
    /// `receipt.status`
    ReceiptStatus(ReceiptStatusParams),
}

impl Command {
    /// The method this command came from.
    pub fn method(&self) -> Method {
        match self {
            Command::TaskStart(_) => Method::TaskStart,
            Command::PageFill(_) => Method::PageFill,
            Command::PageClick(_) => Method::PageClick,
            Command::PagePress(_) => Method::PagePress,
            Command::TaskFinish(_) => Method::TaskFinish,
            Command::TaskStop(_) => Method::TaskStop,
            Command::HostHello => Method::HostHello,
            Command::ToolsList => Method::ToolsList,
            Command::PageRead(_) => Method::PageRead,
            Command::TaskStatus(_) => Method::TaskStatus,
            Command::TaskResume(_) => Method::TaskResume,
            Command::TaskVerifyOutcome(_) => Method::TaskVerifyOutcome,
            Command::RunStatus(_) => Method::RunStatus,
            Command::ReceiptStatus(_) => Method::ReceiptStatus,
        }
    }

    /// The task a command acts on, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Command::PageFill(p) => Some(&p.task_id),
            Command::PageClick(p) => Some(&p.task_id),
            Command::PagePress(p) => Some(&p.task_id),
            Command::PageRead(p) => Some(&p.task_id),
            Command::TaskFinish(p) | Command::TaskStatus(p) | Command::TaskVerifyOutcome(p) => {
                Some(&p.task_id)
            }
            Command::TaskStop(p) => Some(&p.task_id),
            Command::TaskResume(p) => Some(&p.task_id),
            _ => None,
        }
    }

    /// Parses and checks the params of `method`. `check_target` is the executor's selector check.
    ///
    /// The params may be a parsed [`Value`] or the raw text of a frame's params ([`Params`]);
    /// every check lives here either way.
    pub fn parse<P: Params + ?Sized>(
        method: Method,
        params: &P,
        check_target: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<Command, String> {
        fn typed<T: DeserializeOwned, P: Params + ?Sized>(
            method: Method,
            params: &P,
        ) -> Result<T, String> {
            params
                .typed()
                .map_err(|e| format!("invalid params for {method}: {e}"))
        }
        let target_ok = |what: &str, target: &str| {
            check_target(target).map_err(|e| format!("invalid {what} for {method}: {e}"))
        };
        let cmd = match method {
            Method::TaskStart => {
                let p: TaskStartParams = typed(method, params)?;
                let len = p.title.chars().count();
                if !(1..=200).contains(&len) {
                    return Err(format!(
                        "invalid params for task.start: title must be 1 to 200 characters (got {len})"
                    ));
                }
                if let Some(url) = &p.url {
                    if url.len() > MAX_URL_BYTES {
                        return Err(format!(
                            "invalid params for task.start: url must be at most {MAX_URL_BYTES} bytes (got {})",
                            url.len()
                        ));
                    }
                }
                if let Some(f) = &p.fixture {
                    for (name, v) in [
                        ("submitDelayMs", f.submit_delay_ms),
                        ("readDelayMs", f.read_delay_ms),
                    ] {
                        if v > MAX_FIXTURE_DELAY_MS {
                            return Err(format!(
                                "invalid params for task.start: fixture.{name} must be 0 to {MAX_FIXTURE_DELAY_MS} (got {v})"
                            ));
                        }
                    }
                }
                Command::TaskStart(p)
            }
            Method::PageFill => {
                let p: PageFillParams = typed(method, params)?;
                target_ok("target", &p.target)?;
                Command::PageFill(p)
            }
            Method::PageClick => {
                let p: PageClickParams = typed(method, params)?;
                target_ok("target", &p.target)?;
                target_ok("expect.target", &p.expect.target)?;
                Command::PageClick(p)
            }
            Method::PagePress => {
                let p: PagePressParams = typed(method, params)?;
                if p.key.is_empty() {
                    return Err("invalid params for page.press: key must not be empty".into());
                }
                if let Some(t) = &p.target {
                    target_ok("target", t)?;
                }
                target_ok("expect.target", &p.expect.target)?;
                Command::PagePress(p)
            }
            Method::TaskFinish => Command::TaskFinish(typed(method, params)?),
            Method::TaskStop => {
                let p: TaskStopParams = typed(method, params)?;
                let len = p.reason.chars().count();
                if !(1..=500).contains(&len) {
                    return Err(format!(
                        "invalid params for task.stop: reason must be 1 to 500 characters (got {len})"
                    ));
                }
                Command::TaskStop(p)
            }
            Method::HostHello => {
                typed::<NoParams, P>(method, params)?;
                Command::HostHello
            }
            Method::ToolsList => {
                typed::<NoParams, P>(method, params)?;
                Command::ToolsList
            }
            Method::PageRead => {
                let p: PageReadParams = typed(method, params)?;
                target_ok("target", &p.target)?;
                Command::PageRead(p)
            }
            Method::TaskStatus => Command::TaskStatus(typed(method, params)?),
            Method::TaskResume => Command::TaskResume(typed(method, params)?),
            Method::TaskVerifyOutcome => Command::TaskVerifyOutcome(typed(method, params)?),
            Method::RunStatus => Command::RunStatus(typed(method, params)?),
            Method::ReceiptStatus => {
                let p: ReceiptStatusParams = typed(method, params)?;
                validate_id(&p.request_id)
                    .map_err(|e| format!("invalid params for receipt.status: requestId: {e}"))?;
                Command::ReceiptStatus(p)
            }
        };
        Ok(cmd)
    }
}

/// The envelope of a request frame, before the method's params are checked.
#[derive(Debug)]
pub struct Envelope {
    /// The caller's request ID.
    pub id: String,
    /// The method name as sent.
    pub method: String,
    /// The params object (`{}` when absent).
    pub params: Value,
}

/// Why a frame could not become an [`Envelope`]: the error to send, and the `id` if it was read.
#[derive(Debug)]
pub struct FrameError {
    /// The request's `id`, when it could be read.
    pub id: Option<String>,
    /// The error to reply with.
    pub error: ErrorBody,
}

impl FrameError {
    fn bad(id: Option<String>, message: impl Into<String>) -> FrameError {
        FrameError {
            id,
            error: ErrorBody::new(ErrorCode::BadRequest, message),
        }
    }
}

/// A well-formed request read straight from the frame: `id` and `method` borrowed (plain
/// strings without escapes), no other field, each field once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainEnvelope<'a> {
    id: &'a str,
    method: &'a str,
    #[serde(default)]
    params: Option<Value>,
}

/// Parses one frame (without its newline) into an envelope.
///
/// Well-formed requests take a direct path that builds no JSON value for the envelope itself;
/// anything that path does not accept as is goes through the general one, which alone writes
/// the error messages, so every refusal reads the same whichever path saw the frame first.
pub fn parse_envelope(frame: &[u8]) -> Result<Envelope, FrameError> {
    if let Ok(plain) = serde_json::from_slice::<PlainEnvelope<'_>>(frame) {
        let params = match plain.params {
            None => Some(Value::Object(Default::default())),
            Some(p @ Value::Object(_)) => Some(p),
            Some(_) => None,
        };
        if let (Some(params), Ok(())) = (params, validate_id(plain.id)) {
            return Ok(Envelope {
                id: plain.id.to_owned(),
                method: plain.method.to_owned(),
                params,
            });
        }
    }
    parse_envelope_general(frame)
}

/// The general envelope parser: builds the frame's JSON value and explains what is wrong.
fn parse_envelope_general(frame: &[u8]) -> Result<Envelope, FrameError> {
    let text = std::str::from_utf8(frame).map_err(|e| {
        FrameError::bad(
            None,
            format!("the frame is not valid UTF-8 ({e}); send one UTF-8 JSON object per line"),
        )
    })?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        FrameError::bad(
            None,
            format!("the frame is not JSON ({e}); send one JSON object per line"),
        )
    })?;
    let Value::Object(mut obj) = value else {
        return Err(FrameError::bad(
            None,
            "the frame is not a JSON object; send {\"id\":…,\"method\":…,\"params\":{…}}",
        ));
    };
    let id = match obj.remove("id") {
        Some(Value::String(s)) => match validate_id(&s) {
            Ok(()) => s,
            Err(e) => return Err(FrameError::bad(None, format!("bad id: {e}"))),
        },
        Some(other) => {
            return Err(FrameError::bad(
                None,
                format!("bad id: it must be a string, got {}", json_type(&other)),
            ))
        }
        None => {
            return Err(FrameError::bad(
                None,
                "the request has no id; give each request a fresh UUID",
            ))
        }
    };
    let method = match obj.remove("method") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(FrameError::bad(
                Some(id),
                format!("method must be a string, got {}", json_type(&other)),
            ))
        }
        None => {
            return Err(FrameError::bad(
                Some(id),
                "the request has no method; call tools.list to see them",
            ))
        }
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p,
        Some(other) => {
            return Err(FrameError::bad(
                Some(id),
                format!("params must be an object, got {}", json_type(&other)),
            ))
        }
    };
    if let Some(field) = obj.keys().next() {
        return Err(FrameError::bad(
            Some(id),
            format!(
                "unknown field `{field}` in the request; only id, method and params are allowed"
            ),
        ));
    }
    Ok(Envelope { id, method, params })
}

/// A JSON type's name for error messages.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The RFC 8785 canonical form of `{method, params}`: the request's fingerprint. Key order and
/// whitespace do not change it; any other difference does.
pub fn fingerprint(method: &str, params: &Value) -> String {
    try_fingerprint(method, params).expect("a parsed JSON value always canonicalises")
}

/// [`fingerprint`] for values that came from the wire: a value the canonicaliser cannot write
/// is an error for the caller to report, never a panic.
pub fn try_fingerprint(method: &str, params: &Value) -> Result<String, String> {
    if let Some(canonical) = plain_canonical(method, params) {
        return Ok(canonical);
    }
    #[derive(Serialize)]
    struct Fp<'a> {
        method: &'a str,
        params: &'a Value,
    }
    serde_json_canonicalizer::to_string(&Fp { method, params })
        .map_err(|e| format!("the params cannot be written as canonical JSON ({e})"))
}

/// The largest integer magnitude an IEEE double holds exactly: RFC 8785 writes numbers as
/// JavaScript does, so only integers up to this are written the same way by `serde_json`.
const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// The canonical form written directly, for the requests Polaris actually receives.
///
/// When every object key is ASCII and already in ascending order as `serde_json` iterates
/// them, and every number is an integer a double holds exactly, RFC 8785's output is exactly
/// `serde_json`'s compact output (both escape only `"`, `\` and control characters, with the
/// same short forms and lowercase `\u00xx`). That covers every valid bridge request, and skips
/// the general canonicaliser, which was a third of the host's time per fresh mutation. Anything
/// else (floats, huge integers, non-ASCII keys, or a map that does not iterate sorted) returns
/// `None` and goes through the general canonicaliser.
fn plain_canonical(method: &str, params: &Value) -> Option<String> {
    fn plain(v: &Value) -> bool {
        match v {
            Value::Null | Value::Bool(_) | Value::String(_) => true,
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u <= MAX_EXACT_INTEGER,
                (None, Some(i)) => i.unsigned_abs() <= MAX_EXACT_INTEGER,
                (None, None) => false,
            },
            Value::Array(items) => items.iter().all(plain),
            Value::Object(map) => {
                let mut previous: Option<&str> = None;
                map.iter().all(|(k, v)| {
                    let ordered = k.is_ascii() && previous.is_none_or(|p| p < k.as_str());
                    previous = Some(k);
                    ordered && plain(v)
                })
            }
        }
    }
    if !plain(params) {
        return None;
    }
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"method\":");
    serde_json::to_writer(&mut out, method).ok()?;
    out.extend_from_slice(b",\"params\":");
    serde_json::to_writer(&mut out, params).ok()?;
    out.push(b'}');
    String::from_utf8(out).ok()
}

/// A bridge request read straight from its frame, without building a JSON value: the shape
/// nearly every well-formed request takes, and the one the throughput budget is about.
#[derive(Debug)]
pub struct DirectRequest<'a> {
    /// The caller's request ID (already validated), borrowed from the frame.
    pub id: &'a str,
    /// The checked command.
    pub command: Command,
    /// The canonical `{method, params}`: the fingerprint the receipt keeps.
    pub request: String,
}

/// The envelope of a frame as the direct path reads it: `id` and `method` borrowed (plain
/// strings without escapes), params kept as their raw text, no other field, each field once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvelope<'a> {
    id: &'a str,
    method: &'a str,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

/// Reads a well-formed bridge request straight from its frame: the typed command from the raw
/// params text, and the fingerprint from that same text when it is already canonical.
///
/// Returns `None` for anything it does not take as is (a bad envelope, an unknown method, params
/// the command refuses, ...); the caller then goes through [`parse_envelope`] and
/// [`Command::parse`] on a [`Value`], which alone write the error messages. Whatever this
/// returns, the general path would return the same ID, command and fingerprint.
pub fn parse_request_direct<'a>(
    frame: &'a [u8],
    check_target: &dyn Fn(&str) -> Result<(), String>,
) -> Option<DirectRequest<'a>> {
    let env: RawEnvelope<'a> = serde_json::from_slice(frame).ok()?;
    validate_id(env.id).ok()?;
    let method: Method = env.method.parse().ok()?;
    let raw = env.params.map_or("{}", RawValue::get);
    if !raw.starts_with('{') {
        return None;
    }
    let command = match env.params {
        Some(params) => Command::parse(method, params, check_target).ok()?,
        None => Command::parse(method, &Value::Object(Default::default()), check_target).ok()?,
    };
    let request = if is_canonical(raw) {
        // Exactly the length written below, so the receipt's `Box<str>` needs no reallocation.
        let mut request = String::with_capacity(raw.len() + method.as_str().len() + 23);
        request.push_str("{\"method\":\"");
        request.push_str(method.as_str());
        request.push_str("\",\"params\":");
        request.push_str(raw);
        request.push('}');
        request
    } else {
        let params: Value = serde_json::from_str(raw).ok()?;
        try_fingerprint(method.as_str(), &params).ok()?
    };
    Some(DirectRequest {
        id: env.id,
        command,
        request,
    })
}

/// Whether `text` is already exactly what the RFC 8785 canonicaliser
/// (`serde_json_canonicalizer`) writes for the JSON value it holds, so the fingerprint can be
/// the text itself.
///
/// Deliberately narrower than RFC 8785: it accepts no insignificant whitespace; object keys
/// only of printable ASCII without escapes, in strictly increasing byte order (for ASCII that
/// is RFC 8785's UTF-16 order, and strictness rules out duplicates); strings escaped exactly as
/// the canonicaliser escapes them (`\"`, `\\`, `\b` `\t` `\n` `\f` `\r`, lowercase `\u00xx` for
/// the other control characters, everything else as is); integers only, written without
/// leading zeros or `-0`, of magnitude at most 2^53 (where a double's shortest form is the
/// integer's own digits); `true`, `false`, `null`. Anything else returns `false`, and the caller
/// computes the canonical form through the canonicaliser, so a `false` costs time, never
/// correctness.
pub fn is_canonical(text: &str) -> bool {
    /// Nesting deeper than this is left to the canonicaliser (no bridge request nests so deep).
    const MAX_DEPTH: usize = 32;

    struct Checker<'a> {
        bytes: &'a [u8],
        pos: usize,
    }

    impl<'a> Checker<'a> {
        fn peek(&self) -> Option<u8> {
            self.bytes.get(self.pos).copied()
        }

        fn eat(&mut self, b: u8) -> bool {
            if self.peek() == Some(b) {
                self.pos += 1;
                true
            } else {
                false
            }
        }

        fn literal(&mut self, word: &[u8]) -> bool {
            if self.bytes[self.pos..].starts_with(word) {
                self.pos += word.len();
                true
            } else {
                false
            }
        }

        fn value(&mut self, depth: usize) -> bool {
            match self.peek() {
                Some(b'{') => depth < MAX_DEPTH && self.object(depth + 1),
                Some(b'[') => depth < MAX_DEPTH && self.array(depth + 1),
                Some(b'"') => self.string(),
                Some(b't') => self.literal(b"true"),
                Some(b'f') => self.literal(b"false"),
                Some(b'n') => self.literal(b"null"),
                Some(b'-' | b'0'..=b'9') => self.integer(),
                _ => false,
            }
        }

        fn object(&mut self, depth: usize) -> bool {
            self.pos += 1; // `{`
            if self.eat(b'}') {
                return true;
            }
            let mut previous: Option<&'a [u8]> = None;
            loop {
                let Some(key) = self.key() else {
                    return false;
                };
                if previous.is_some_and(|p| p >= key) {
                    return false;
                }
                previous = Some(key);
                if !self.eat(b':') || !self.value(depth) {
                    return false;
                }
                if self.eat(b'}') {
                    return true;
                }
                if !self.eat(b',') {
                    return false;
                }
            }
        }

        /// A key of printable ASCII without escapes, returned without its quotes.
        fn key(&mut self) -> Option<&'a [u8]> {
            if !self.eat(b'"') {
                return None;
            }
            let start = self.pos;
            let len = self.bytes[start..]
                .iter()
                .position(|&b| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\')?;
            self.pos += len;
            if self.peek() != Some(b'"') {
                return None;
            }
            let bytes: &'a [u8] = self.bytes;
            let key = &bytes[start..self.pos];
            self.pos += 1; // `"`
            Some(key)
        }

        fn array(&mut self, depth: usize) -> bool {
            self.pos += 1; // `[`
            if self.eat(b']') {
                return true;
            }
            loop {
                if !self.value(depth) {
                    return false;
                }
                if self.eat(b']') {
                    return true;
                }
                if !self.eat(b',') {
                    return false;
                }
            }
        }

        fn string(&mut self) -> bool {
            self.pos += 1; // `"`
            loop {
                // Everything but `"`, `\` and control characters, multi-byte UTF-8 included,
                // is written as is.
                let Some(len) = self.bytes[self.pos..]
                    .iter()
                    .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
                else {
                    return false;
                };
                self.pos += len;
                match self.bytes[self.pos] {
                    b'"' => {
                        self.pos += 1;
                        return true;
                    }
                    b'\\' => {
                        self.pos += 1;
                        let ok = match self.peek() {
                            Some(b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r') => {
                                self.pos += 1;
                                true
                            }
                            Some(b'u') => self.control_escape(),
                            _ => false,
                        };
                        if !ok {
                            return false;
                        }
                    }
                    _ => return false,
                }
            }
        }

        /// After `\`: `u00xx` in lowercase hex, for a control character without a short form.
        fn control_escape(&mut self) -> bool {
            let Some(&[b'u', b'0', b'0', hi, lo]) = self.bytes.get(self.pos..self.pos + 5) else {
                return false;
            };
            let digit = |d: u8| match d {
                b'0'..=b'9' => Some(d - b'0'),
                b'a'..=b'f' => Some(d - b'a' + 10),
                _ => None,
            };
            let (Some(hi @ 0..=1), Some(lo)) = (digit(hi), digit(lo)) else {
                return false;
            };
            self.pos += 5;
            // \b \t \n \f \r have short forms, which the canonicaliser uses.
            !matches!(hi * 16 + lo, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)
        }

        fn integer(&mut self) -> bool {
            let negative = self.eat(b'-');
            let start = self.pos;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.pos += 1;
            }
            let digits = &self.bytes[start..self.pos];
            if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
                return false;
            }
            match digits {
                [] => false,
                // `0` alone; `-0` is written `0`, and `01` is not JSON.
                [b'0'] => !negative,
                [b'0', ..] => false,
                _ if digits.len() > 16 => false,
                _ => std::str::from_utf8(digits)
                    .ok()
                    .and_then(|d| d.parse::<u64>().ok())
                    .is_some_and(|n| n <= MAX_EXACT_INTEGER),
            }
        }
    }

    let mut checker = Checker {
        bytes: text.as_bytes(),
        pos: 0,
    };
    checker.value(0) && checker.pos == text.len()
}

/// What one read of the line codec produced.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameRead {
    /// A complete line is in the buffer (without its newline or a trailing `\r`).
    Frame,
    /// The line exceeded the frame limit; the rest of the line was not read.
    TooLarge,
    /// The peer closed after a partial line (kept in the buffer).
    Partial,
    /// The peer closed cleanly between frames.
    Eof,
}

/// Reads one `\n`-terminated frame of at most `max` bytes into `buf`.
///
/// Cancel-safe as long as `buf` is kept between calls: bytes are moved from the reader into
/// `buf` as they are consumed, so a cancelled call loses nothing.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<FrameRead> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                FrameRead::Eof
            } else {
                FrameRead::Partial
            });
        }
        if let Some(pos) = memchr::memchr(b'\n', available) {
            if buf.len() + pos > max {
                reader.consume(pos + 1);
                return Ok(FrameRead::TooLarge);
            }
            buf.extend_from_slice(&available[..pos]);
            reader.consume(pos + 1);
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(FrameRead::Frame);
        }
        let n = available.len();
        if buf.len() + n > max {
            reader.consume(n);
            return Ok(FrameRead::TooLarge);
        }
        buf.extend_from_slice(available);
        reader.consume(n);
    }
}

/// Now, as an RFC 3339 UTC timestamp with milliseconds.
pub fn now_rfc3339() -> String {
    format_millis(now_millis())
}

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> i64 {
    // Read on every request: the system clock straight, without a calendar conversion.
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// Formats epoch milliseconds as RFC 3339 UTC with milliseconds.
pub fn format_millis(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Strategies and writers for the tests of both parse paths (here and in the host).
#[cfg(test)]
pub(crate) mod test_frames {
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    /// Any JSON value: floats, huge integers, non-ASCII keys and strings included.
    pub(crate) fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            (-(1i64 << 53)..=(1i64 << 53)).prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
            "[ -~/\"\\\\\u{0}-\u{1f}\u{7f}é\u{2028}\u{1F600}]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-zA-Z_é\u{1F600}]{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Deterministic choices for [`write_json`], so a failing case shrinks and replays.
    pub(crate) struct Choices(pub(crate) u64);

    impl Choices {
        /// True about once in `n` calls.
        fn one_in(&mut self, n: u64) -> bool {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n == 0
        }
    }

    /// Writes `v` in one of several ways: serde_json compact or pretty, the canonicaliser's
    /// form, or by hand with now and then shuffled keys, spaces, `\/`, `\u0041`-style escapes,
    /// surrogate pairs, uppercase hex and integers written as floats.
    pub(crate) fn write_json(v: &Value, how: u8, seed: u64) -> String {
        match how % 5 {
            0 => serde_json::to_string(v).unwrap(),
            1 => serde_json::to_string_pretty(v).unwrap(),
            2 => serde_json_canonicalizer::to_string(v).unwrap(),
            _ => {
                let mut out = String::new();
                let mut c = Choices(seed | 1);
                write_by_hand(v, &mut c, &mut out);
                out
            }
        }
    }

    fn write_by_hand(v: &Value, c: &mut Choices, out: &mut String) {
        if c.one_in(16) {
            out.push(' ');
        }
        match v {
            Value::Null | Value::Bool(_) => out.push_str(&v.to_string()),
            Value::Number(n) => {
                out.push_str(&n.to_string());
                if (n.is_i64() || n.is_u64()) && c.one_in(12) {
                    out.push_str(if c.one_in(2) { ".0" } else { "e0" });
                }
            }
            Value::String(s) => write_string(s, c, out),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_by_hand(item, c, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                if entries.len() > 1 && c.one_in(4) {
                    entries.rotate_left(1);
                }
                out.push('{');
                for (i, (k, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, c, out);
                    out.push(':');
                    write_by_hand(item, c, out);
                }
                out.push('}');
            }
        }
        if c.one_in(16) {
            out.push(' ');
        }
    }

    fn write_string(s: &str, c: &mut Choices, out: &mut String) {
        out.push('"');
        for ch in s.chars() {
            match ch {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' if c.one_in(4) => out.push_str("\\/"),
                '\u{8}' if !c.one_in(4) => out.push_str("\\b"),
                '\t' if !c.one_in(4) => out.push_str("\\t"),
                '\n' if !c.one_in(4) => out.push_str("\\n"),
                '\u{c}' if !c.one_in(4) => out.push_str("\\f"),
                '\r' if !c.one_in(4) => out.push_str("\\r"),
                '\u{0}'..='\u{1f}' => {
                    let escaped = format!("\\u{:04x}", ch as u32);
                    if c.one_in(4) {
                        out.push_str(&escaped.to_uppercase().replace("\\U", "\\u"));
                    } else {
                        out.push_str(&escaped);
                    }
                }
                _ if c.one_in(20) => {
                    let mut units = [0u16; 2];
                    for unit in ch.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04X}"));
                    }
                }
                _ => out.push(ch),
            }
        }
        out.push('"');
    }

    fn text() -> BoxedStrategy<Value> {
        prop_oneof![
            "[ -~]{0,10}",
            any::<String>(),
            "[a-z/\"\\\\\n\u{1}é\u{1F600}]{0,6}",
            Just("Enter".to_owned()),
            Just(String::new()),
        ]
        .prop_map(Value::String)
        .boxed()
    }

    fn selector() -> BoxedStrategy<Value> {
        prop_oneof![
            4 => "#[a-z0-9_-]{1,8}",
            2 => Just("#title".to_owned()),
            1 => "[#A-Za-z /]{0,6}",
        ]
        .prop_map(Value::String)
        .boxed()
    }

    fn task_id() -> BoxedStrategy<Value> {
        prop_oneof![
            3 => Just(TASK.to_owned()),
            1 => "[a-z0-9-]{1,8}",
        ]
        .prop_map(Value::String)
        .boxed()
    }

    /// A task ID the host test replaces with a task it started, per host.
    pub(crate) const TASK: &str = "TASK-PLACEHOLDER";

    fn delay() -> BoxedStrategy<Value> {
        prop_oneof![
            4 => (0u64..70_000).prop_map(|n| json!(n)),
            1 => any_json(),
        ]
        .boxed()
    }

    fn bool_value() -> BoxedStrategy<Value> {
        prop_oneof![4 => any::<bool>().prop_map(Value::Bool), 1 => any_json()].boxed()
    }

    /// An object of the given fields, each present with its probability, now and then with
    /// a field no method takes.
    fn object(fields: Vec<(&'static str, f64, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
        let present: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
            .into_iter()
            .map(|(name, p, value)| {
                proptest::option::weighted(p, value.prop_map(move |v| (name.to_owned(), v))).boxed()
            })
            .collect();
        let extra = proptest::option::weighted(0.05, ("[a-z]{1,4}", any_json()));
        (present, extra)
            .prop_map(|(fields, extra)| {
                let mut map = Map::new();
                for (k, v) in fields.into_iter().flatten().chain(extra) {
                    map.insert(k, v);
                }
                Value::Object(map)
            })
            .boxed()
    }

    fn expect() -> BoxedStrategy<Value> {
        prop_oneof![
            8 => object(vec![("target", 0.95, selector()), ("equals", 0.6, text())]),
            8 => object(vec![("target", 0.95, selector()), ("contains", 0.6, text())]),
            1 => any_json(),
        ]
        .boxed()
    }

    /// Params for `method`, mostly shaped the way the method wants them, sometimes not.
    fn params_for(method: &'static str) -> BoxedStrategy<Value> {
        let shaped = match method {
            "task.start" => object(vec![
                ("title", 0.95, text()),
                ("url", 0.3, text()),
                (
                    "fixture",
                    0.4,
                    object(vec![
                        ("submitDelayMs", 0.5, delay()),
                        ("readDelayMs", 0.3, delay()),
                        ("dropSubmit", 0.3, bool_value()),
                        ("failSubmit", 0.3, bool_value()),
                    ]),
                ),
            ]),
            "page.fill" => object(vec![
                ("taskId", 0.95, task_id()),
                ("target", 0.95, selector()),
                ("value", 0.95, text()),
            ]),
            "page.click" => object(vec![
                ("taskId", 0.95, task_id()),
                ("target", 0.95, selector()),
                ("expect", 0.95, expect()),
            ]),
            "page.press" => object(vec![
                ("taskId", 0.95, task_id()),
                ("key", 0.95, text()),
                ("target", 0.5, selector()),
                ("expect", 0.95, expect()),
            ]),
            "page.read" => object(vec![
                ("taskId", 0.95, task_id()),
                ("target", 0.95, selector()),
            ]),
            "task.stop" => object(vec![("taskId", 0.95, task_id()), ("reason", 0.95, text())]),
            "task.resume" => object(vec![("taskId", 0.95, task_id()), ("runId", 0.95, text())]),
            "run.status" => object(vec![("runId", 0.3, text())]),
            "receipt.status" => object(vec![(
                "requestId",
                0.95,
                prop_oneof![
                    Just(json!("same-id")),
                    "[A-Za-z0-9._:-]{0,10}".prop_map(Value::String),
                    text()
                ]
                .boxed(),
            )]),
            "host.hello" | "tools.list" => object(vec![]),
            _ => object(vec![("taskId", 0.95, task_id())]),
        };
        prop_oneof![12 => shaped, 1 => any_json()].boxed()
    }

    /// Request frames: mostly well-formed requests of every bridge method (params written in
    /// several ways, some canonical, some not), plus envelopes with odd ids, methods, params,
    /// duplicated or unknown fields, and raw bytes.
    pub(crate) fn request_frame() -> impl Strategy<Value = Vec<u8>> {
        let method = prop_oneof![
            Just("task.start"),
            Just("page.fill"),
            Just("page.click"),
            Just("page.press"),
            Just("page.read"),
            Just("task.finish"),
            Just("task.stop"),
            Just("task.status"),
            Just("task.resume"),
            Just("task.verifyOutcome"),
            Just("run.status"),
            Just("receipt.status"),
            Just("host.hello"),
            Just("tools.list"),
            Just("page.fil"),
        ];
        let id = prop_oneof![
            4 => "[A-Za-z0-9._:-]{1,10}".prop_map(|s| json!(s).to_string()),
            2 => Just("\"same-id\"".to_owned()),
            1 => Just("\"same\\u002did\"".to_owned()),
            1 => Just("\"a b\"".to_owned()),
            1 => Just("7".to_owned()),
        ];
        let request = (method, id)
            .prop_flat_map(|(method, id)| {
                (
                    Just(method),
                    Just(id),
                    params_for(method),
                    any::<u8>(),
                    any::<u64>(),
                    0u8..8,
                )
            })
            .prop_map(|(method, id, params, how, seed, envelope)| {
                let text = write_json(&params, how, seed);
                let method = json!(method).to_string();
                let frame = match envelope {
                    0 => format!("{{\"params\":{text},\"method\":{method},\"id\":{id}}}"),
                    1 if params.as_object().is_some_and(|m| m.is_empty()) => {
                        format!("{{\"id\":{id},\"method\":{method}}}")
                    }
                    1 => format!("{{\"id\":{id},\"method\":{method},\"params\":null}}"),
                    2 => {
                        format!("{{ \"id\" : {id} , \"method\" : {method} , \"params\" : {text} }}")
                    }
                    3 => {
                        format!("{{\"id\":{id},\"id\":{id},\"method\":{method},\"params\":{text}}}")
                    }
                    4 => format!("{{\"id\":{id},\"method\":{method},\"params\":{text},\"x\":1}}"),
                    _ => format!("{{\"id\":{id},\"method\":{method},\"params\":{text}}}"),
                };
                frame.into_bytes()
            });
        prop_oneof![
            20 => request,
            1 => proptest::collection::vec(any::<u8>(), 0..48),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;
    use serde_json::json;

    fn general_canonical(method: &str, params: &Value) -> String {
        #[derive(Serialize)]
        struct Fp<'a> {
            method: &'a str,
            params: &'a Value,
        }
        serde_json_canonicalizer::to_string(&Fp { method, params }).unwrap()
    }

    #[test]
    fn the_direct_canonical_form_is_taken_only_where_it_equals_rfc_8785() {
        let plain = json!({"taskId":"t","target":"#a","value":"é\u{1F600}\n\u{1}\"\\","n":9007199254740992i64,"m":-3,"a":[true,null,{"z":1,"b":"x"}]});
        assert_eq!(
            plain_canonical("page.fill", &plain).as_deref(),
            Some(general_canonical("page.fill", &plain).as_str())
        );
        // Floats, integers a double cannot hold and non-ASCII keys take the general path.
        for odd in [
            json!({"v": 1.5}),
            json!({"v": 1e21}),
            json!({"v": 9007199254740993u64}),
            json!({"é": 1, "z": 2}),
        ] {
            assert_eq!(plain_canonical("page.fill", &odd), None, "{odd}");
            assert_eq!(
                try_fingerprint("page.fill", &odd).unwrap(),
                general_canonical("page.fill", &odd)
            );
        }
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-zA-Z_é\u{1F600}]{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever the params, the fingerprint is the RFC 8785 form the general canonicaliser writes.
        #[test]
        fn fingerprints_equal_the_general_canonicaliser(params in any_json()) {
            proptest::prop_assert_eq!(try_fingerprint("page.fill", &params).unwrap(), general_canonical("page.fill", &params));
        }

        /// The direct envelope path accepts exactly what the general one accepts, with the
        /// same result, and leaves every refusal to it: frames built from envelope-like
        /// fields (valid, escaped, duplicated, mistyped or unknown), plus raw bytes.
        #[test]
        fn both_envelope_paths_agree(
            fields in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::strategy::Just("id".to_owned()),
                        proptest::strategy::Just("method".to_owned()),
                        proptest::strategy::Just("params".to_owned()),
                        proptest::strategy::Just("i\\u0064".to_owned()),
                        "[a-z]{1,3}",
                    ],
                    proptest::prop_oneof![
                        any_json(),
                        "[A-Za-z0-9._:-]{1,8}".prop_map(Value::String),
                        proptest::strategy::Just(json!("a\"b")),
                        proptest::strategy::Just(json!({"taskId": "t", "target": "#title"})),
                    ],
                ),
                0..5,
            ),
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
            use_raw in proptest::prelude::any::<bool>(),
        ) {
            use proptest::prelude::*;
            let frame = if use_raw {
                raw
            } else {
                let body: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("\"{k}\":{v}"))
                    .collect();
                format!("{{{}}}", body.join(",")).into_bytes()
            };
            let show = |r: Result<Envelope, FrameError>| match r {
                Ok(e) => format!("ok {} {} {}", e.id, e.method, e.params),
                Err(e) => format!("err {:?} {}", e.id, e.error.message),
            };
            prop_assert_eq!(show(parse_envelope(&frame)), show(parse_envelope_general(&frame)));
        }
    }

    /// The old way a frame became a request: envelope, method, command and fingerprint, all
    /// from a `Value`. `Err` carries the refusal's message.
    fn general_request(
        frame: &[u8],
        check: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<(String, String, String), String> {
        let env = parse_envelope(frame).map_err(|e| e.error.message)?;
        let method: Method = env
            .method
            .parse()
            .map_err(|()| "unknown method".to_owned())?;
        let cmd = Command::parse(method, &env.params, check)?;
        let request = try_fingerprint(method.as_str(), &env.params)?;
        Ok((env.id, format!("{cmd:?}"), request))
    }

    fn fixture_check(target: &str) -> Result<(), String> {
        use crate::executor::Executor as _;
        crate::executor::FixtureExecutor::new().check_target(target)
    }

    /// A value [`is_canonical`] must recognise once the canonicaliser has written it: integers a
    /// double holds exactly, keys of printable ASCII that need no escape.
    fn plain(v: &Value) -> bool {
        match v {
            Value::Null | Value::Bool(_) | Value::String(_) => true,
            Value::Number(n) => {
                n.as_i64()
                    .is_some_and(|i| i.unsigned_abs() <= MAX_EXACT_INTEGER)
                    || n.as_u64().is_some_and(|u| u <= MAX_EXACT_INTEGER)
            }
            Value::Array(items) => items.iter().all(plain),
            Value::Object(map) => map.iter().all(|(k, v)| {
                k.bytes()
                    .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
                    && plain(v)
            }),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Whenever the checker accepts a text, it is byte for byte what the canonicaliser
        /// writes for its value; and it accepts the canonicaliser's own output for every value
        /// without floats, huge integers or keys that need escaping.
        #[test]
        fn is_canonical_accepts_exactly_the_canonicalisers_text(
            v in test_frames::any_json(),
            how in proptest::prelude::any::<u8>(),
            seed in proptest::prelude::any::<u64>(),
        ) {
            let text = test_frames::write_json(&v, how, seed);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            let canonical = serde_json_canonicalizer::to_string(&parsed).unwrap();
            if is_canonical(&text) {
                proptest::prop_assert_eq!(&text, &canonical);
            }
            if plain(&parsed) {
                proptest::prop_assert!(is_canonical(&canonical), "{}", canonical);
            }
        }

        /// Arbitrary text, JSON or not, never makes the checker panic, and what it accepts is
        /// JSON the canonicaliser writes the same way.
        #[test]
        fn is_canonical_accepts_no_other_text(
            text in proptest::prop_oneof![
                proptest::prelude::any::<String>(),
                "[\\[\\]{}\",:0-9a-z\\\\/. eE+-]{0,24}",
            ]
        ) {
            if is_canonical(&text) {
                let parsed: Value = serde_json::from_str(&text).unwrap();
                proptest::prop_assert_eq!(&text, &serde_json_canonicalizer::to_string(&parsed).unwrap());
            }
        }

        /// Whatever the direct path takes, it reads as the general path does: same id, same
        /// command, same fingerprint.
        #[test]
        fn the_direct_path_agrees_with_the_general_one(frame in test_frames::request_frame()) {
            if let Some(direct) = parse_request_direct(&frame, &fixture_check) {
                proptest::prop_assert_eq!(
                    Ok((direct.id.to_owned(), format!("{:?}", direct.command), direct.request)),
                    general_request(&frame, &fixture_check)
                );
            }
        }
    }

    #[test]
    fn the_direct_path_takes_well_formed_requests_and_leaves_the_rest() {
        fn direct(frame: &str) -> Option<DirectRequest<'_>> {
            parse_request_direct(frame.as_bytes(), &fixture_check)
        }
        // Canonical params: the fingerprint is the text itself.
        let r = direct(r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"a\n\u0001é"}}"##).unwrap();
        assert_eq!(r.id, "r1");
        assert!(matches!(r.command, Command::PageFill(_)));
        assert_eq!(
            r.request,
            r##"{"method":"page.fill","params":{"target":"#title","taskId":"t","value":"a\n\u0001é"}}"##
        );
        assert_eq!(r.request.capacity(), r.request.len());
        // Keys out of order, spaces, escapes the canonicaliser does not write: still taken,
        // with the canonical fingerprint.
        for frame in [
            r##"{"id":"r1","method":"page.fill","params":{"taskId":"t","target":"#title","value":"Hi"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title", "taskId":"t","value":"Hi"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","value":"H\u0069"}}"##,
        ] {
            let r = direct(frame).unwrap();
            assert_eq!(
                r.request,
                r##"{"method":"page.fill","params":{"target":"#title","taskId":"t","value":"Hi"}}"##,
                "{frame}"
            );
        }
        // No params, or null params, are `{}`.
        assert_eq!(
            direct(r#"{"id":"r1","method":"host.hello"}"#)
                .unwrap()
                .request,
            r#"{"method":"host.hello","params":{}}"#
        );
        assert_eq!(
            direct(r#"{"id":"r1","method":"host.hello","params":null}"#)
                .unwrap()
                .request,
            r#"{"method":"host.hello","params":{}}"#
        );
        // Everything the general path has to explain is left to it.
        for frame in [
            r#"{"id":"r\u0031","method":"host.hello"}"#,
            r#"{"id":"r1","id":"r2","method":"host.hello"}"#,
            r#"{"id":"a b","method":"host.hello"}"#,
            r#"{"id":"r1","method":"host.hell"}"#,
            r#"{"id":"r1","method":"host.hello","params":[]}"#,
            r#"{"id":"r1","method":"host.hello","params":{"x":1}}"#,
            r##"{"id":"r1","method":"page.fill","params":{"target":"#title","taskId":"t","taskId":"u","value":"a"}}"##,
            r##"{"id":"r1","method":"page.fill","params":{"target":"title","taskId":"t","value":"a"}}"##,
            r#"{"id":"r1","method":"host.hello","extra":1}"#,
            "not json",
        ] {
            assert!(direct(frame).is_none(), "{frame}");
        }
    }

    #[test]
    fn is_canonical_follows_the_canonicaliser_on_the_edges() {
        for yes in [
            r#"{}"#,
            r#"[]"#,
            r#"{"a":[1,-2,0,9007199254740992,-9007199254740992],"b":null,"c":true,"d":false}"#,
            "\"\\\"\\\\\\b\\t\\n\\f\\r\\u0000\\u001f\u{7f}/é\u{2028}\u{1F600}\"",
            r#"{"A":1,"B":2,"a":3}"#,
        ] {
            assert!(is_canonical(yes), "{yes}");
            let parsed: Value = serde_json::from_str(yes).unwrap();
            assert_eq!(serde_json_canonicalizer::to_string(&parsed).unwrap(), yes);
        }
        for no in [
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":1}"#,
            r#"{ "a":1}"#,
            r#"{"a": 1}"#,
            r#"{"a":1} "#,
            r#"[1,2 ]"#,
            r#""\/""#,
            r#""\u0041""#,
            r#""\u000a""#,
            r#""\u001F""#,
            r#""\ud83d\ude00""#,
            r#"{"é":1}"#,
            r#"{"a\"b":1}"#,
            "-0",
            "01",
            "1.0",
            "1e3",
            "9007199254740993",
            "-9007199254740993",
            "100000000000000000000",
            "tru",
            "nul",
            "\"unterminated",
            "\"\u{1}\"",
            "",
            "{",
            "[1,]",
            r#"{"a":1,}"#,
        ] {
            assert!(!is_canonical(no), "{no}");
        }
        // Deep nesting is left to the canonicaliser, without recursing far.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(!is_canonical(&deep));
    }

    #[test]
    fn fingerprints_ignore_key_order_and_whitespace() {
        let a: Value =
            serde_json::from_str(r##"{"taskId":"t1","target":"#title","value":"Hi"}"##).unwrap();
        let b: Value =
            serde_json::from_str(r##"{ "value" : "Hi", "target":"#title",  "taskId":"t1" }"##)
                .unwrap();
        assert_eq!(fingerprint("page.fill", &a), fingerprint("page.fill", &b));
        assert_eq!(
            fingerprint("page.fill", &a),
            r##"{"method":"page.fill","params":{"target":"#title","taskId":"t1","value":"Hi"}}"##
        );
    }

    #[test]
    fn fingerprints_are_pinned() {
        // These strings are the contract: a dependency that changes map order or number
        // formatting would change every stored fingerprint.
        assert_eq!(
            fingerprint(
                "task.start",
                &json!({"title": "Post", "fixture": {"submitDelayMs": 1.0e3}})
            ),
            r#"{"method":"task.start","params":{"fixture":{"submitDelayMs":1000},"title":"Post"}}"#
        );
        assert_eq!(
            fingerprint(
                "page.press",
                &json!({"taskId":"t","key":"Enter","expect":{"target":"#status","contains":"Saved"}})
            ),
            r##"{"method":"page.press","params":{"expect":{"contains":"Saved","target":"#status"},"key":"Enter","taskId":"t"}}"##
        );
        assert_eq!(
            fingerprint("task.stop", &json!({"taskId":"t","reason":"é\u{1F600}\n"})),
            "{\"method\":\"task.stop\",\"params\":{\"reason\":\"é\u{1F600}\\n\",\"taskId\":\"t\"}}"
        );
        assert_ne!(
            fingerprint(
                "page.fill",
                &json!({"taskId":"t","target":"#a","value":"1"})
            ),
            fingerprint("page.fill", &json!({"taskId":"t","target":"#a","value":1}))
        );
    }

    #[test]
    fn ids_are_checked() {
        assert!(validate_id("9b1d-ab.c_d:e").is_ok());
        assert!(validate_id("").is_err());
        assert!(validate_id(&"a".repeat(129)).is_err());
        assert!(validate_id(&"a".repeat(128)).is_ok());
        assert!(validate_id("a b").is_err());
        assert!(validate_id("é").is_err());
        for c in (0..=0x7fu8).map(char::from) {
            let allowed = c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
            assert_eq!(validate_id(&c.to_string()).is_ok(), allowed, "{c:?}");
        }
    }

    #[test]
    fn every_error_code_round_trips_and_never_licenses_a_replay() {
        for code in ErrorCode::ALL {
            let e = ErrorBody::new(*code, "x");
            let v = serde_json::to_value(&e).unwrap();
            assert_eq!(v["code"], code.as_str());
            assert_eq!(v["automaticReplay"], false);
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(*code));
        }
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
    fn expect_needs_exactly_one_check() {
        assert!(serde_json::from_value::<Expect>(json!({"target":"#s","equals":"a"})).is_ok());
        assert!(serde_json::from_value::<Expect>(json!({"target":"#s"})).is_err());
        assert!(serde_json::from_value::<Expect>(
            json!({"target":"#s","equals":"a","contains":"b"})
        )
        .is_err());
        assert!(
            serde_json::from_value::<Expect>(json!({"target":"#s","equals":"a","x":1})).is_err()
        );
    }

    #[tokio::test]
    async fn frames_are_limited_and_split_on_newlines() {
        let data: &[u8] = b"{\"a\":1}\r\n0123456789ABCDEF\nlast";
        let mut r = tokio::io::BufReader::new(data);
        let mut buf = Vec::new();
        assert_eq!(
            read_frame(&mut r, &mut buf, 10).await.unwrap(),
            FrameRead::Frame
        );
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert_eq!(
            read_frame(&mut r, &mut buf, 10).await.unwrap(),
            FrameRead::TooLarge
        );
        buf.clear();
        assert_eq!(
            read_frame(&mut r, &mut buf, 10).await.unwrap(),
            FrameRead::Partial
        );
        assert_eq!(buf, b"last");
    }
}
