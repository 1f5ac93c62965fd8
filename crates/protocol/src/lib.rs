//! The wire format: request and reply shapes, error codes with their `delivery`, the
//! per-method parameter types and the line codec with its frame limit.
//!
//! This is the only place the wire format is spelled out; the host, the clients, the console
//! and the tests all speak through these types. Each concern has a file of its own, and every
//! public item is re-exported here, so the rest of the crate names them `protocol::X`:
//!
//! - `error`: error codes, their `delivery`, the `error` object;
//! - `reply`: replies and the stored body a replay repeats;
//! - `id`: request ID checks;
//! - `method`: the method table;
//! - `params` and `command`: per-method params, checked into a [`Command`] of its family
//!   (executed, closing, read);
//! - `envelope`: the general parse of a frame, which writes every refusal but the checks';
//! - `direct`: a frame read in one pass (`direct/walk.rs` walks the bytes): envelope, typed
//!   params, whether the params text is already canonical, and the fingerprint, with no JSON
//!   value built;
//! - `fingerprint` and `canonical`: the canonical form a receipt keeps, and how RFC 8785
//!   writes integers and strings;
//! - `strict`: duplicate keys and nesting depth, refused where a frame becomes a JSON value;
//! - `limits`: the longest each text field may be;
//! - `object`: structs read only from JSON objects, never arrays;
//! - `target`: what an action acts on — CSS, a snapshot ref, a role or text locator;
//! - `snapshot`: `page.snapshot`'s nodes and how they are written and bounded;
//! - `chord`: key chords (`Control+a`) as `page.press` takes them;
//! - `evidence`: network evidence (SPEC §16), what an action's page sent and how it was answered;
//! - `codec`: the line codec and its limits;
//! - `time`: timestamps.

#![warn(missing_docs)]

pub mod ids;

mod canonical;
mod chord;
mod codec;
mod command;
mod direct;
mod envelope;
mod error;
pub mod evidence;
mod fingerprint;
mod id;
pub mod introspection;
pub mod limits;
mod method;
mod object;
mod params;
mod reply;
pub mod results;
mod snapshot;
mod strict;
mod target;
mod time;

#[cfg(any(test, feature = "test-frames"))]
pub mod test_frames;

pub use chord::{KeyChord, Modifiers};
pub use codec::{read_frame, FrameRead, DEFAULT_MAX_FRAME_BYTES, MAX_IN_FLIGHT_PER_CONNECTION};
pub use command::{check_profile_name, MAX_PROFILE_NAME};
pub use command::{
    ActCommand, CloseCommand, Command, ExecutorCommand, Navigation, PageAction, ReadCommand,
    SelectBy, MAX_SELECTED, MAX_UPLOAD_FILES, MIN_SNAPSHOT_BYTES,
};
pub use direct::{
    parse_frame, parse_request_direct, DirectRequest, Fingerprint, FrameCommand, ParsedFrame,
};
pub use envelope::{json_type, parse_envelope, Envelope, FrameError};
pub use error::{
    Delivery, ErrorBody, ErrorCode, FrameTimeoutDetails, FrameTooLargeDetails, HostBusyDetails,
    NotSent, PeerRefusedDetails,
};
pub use evidence::{BodyUnread, NetworkEvidence, RequestStatus, SentRequest};
pub use fingerprint::{
    fingerprint, split_fingerprint, try_fingerprint, PlainFill, StoredRequest, REQUEST_PIECES,
};
pub use id::{validate_id, MAX_ID_LEN};
pub use limits::MAX_URL_BYTES;
pub use method::Method;
pub use object::{optional_object, ObjectOnly};
pub use params::{
    DialogAnswer, DialogMessage, Expect, ExpectCheck, FixtureOptions, NoParams, OneOrMany,
    PageCheckParams, PageClickParams, PageFillParams, PageHoverParams, PageNavigateParams,
    PagePressParams, PageReadParams, PageScreenshotParams, PageSelectParams, PageSnapshotParams,
    PageTypeParams, PageUploadParams, PageUrlParams, PageWaitParams, Params, ReceiptStatusParams,
    RunStatusParams, SnapshotFormat, Subject, TaskParams, TaskResumeParams, TaskSaveProfileParams,
    TaskStartParams, TaskStopParams, WaitState, MAX_FIXTURE_DELAY_MS, SNAPSHOT_DEFAULT_BYTES,
    SNAPSHOT_MAX_BYTES,
};
pub use reply::{LineEnds, Meta, Outcome, ReceiptKind, Reply};
pub use snapshot::{render as render_snapshot, SnapshotNode, SnapshotResult};
pub use strict::{check_strict, StrictError, MAX_DEPTH};
pub use target::{Locator, Target, MAX_FRAME_DEPTH};
pub use time::{format_millis, now_millis, now_rfc3339};

/// The protocol version `host.hello` reports, so a client can tell a host that speaks another
/// wire format before it sends anything that acts.
pub const PROTOCOL_VERSION: u32 = 1;
