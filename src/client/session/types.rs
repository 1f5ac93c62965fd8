//! What the session tells its caller: why a request's end is unknown, a run change, and what
//! a read settled.

use serde_json::json;

use crate::protocol::results::NextRead;
use crate::protocol::{Method, Reply};

/// Why a request's end is not known to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmbiguityCause {
    /// The connection broke after the request was written (`BRIDGE_DISCONNECTED`).
    Disconnected,
    /// No reply came in time (`BRIDGE_TIMEOUT`).
    TimedOut,
    /// The caller stopped waiting while the request was still running (an in-progress result,
    /// or a cancelled MCP call).
    StillRunning,
    /// The host answered `delivery: uncertain`; the task is blocked on the host too.
    Uncertain,
}

impl AmbiguityCause {
    /// A short wire-friendly name.
    pub fn as_str(self) -> &'static str {
        match self {
            AmbiguityCause::Disconnected => "disconnected",
            AmbiguityCause::TimedOut => "timed_out",
            AmbiguityCause::StillRunning => "still_running",
            AmbiguityCause::Uncertain => "uncertain",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            AmbiguityCause::Disconnected => "lost its connection after it was sent",
            AmbiguityCause::TimedOut => "got no reply in time",
            AmbiguityCause::StillRunning => "was still running when its caller stopped waiting",
            AmbiguityCause::Uncertain => "ended with an uncertain outcome",
        }
    }
}

/// A mutation whose end the caller has not seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ambiguity {
    /// Its request ID.
    pub request_id: String,
    /// Its method, e.g. `page.press`.
    pub method: String,
    /// The task it acted on.
    pub task_id: String,
    /// Why its end is unknown.
    pub cause: AmbiguityCause,
}

impl Ambiguity {
    /// The read that settles it.
    pub fn next_read(&self) -> NextRead {
        if self.cause == AmbiguityCause::Uncertain {
            NextRead {
                method: Method::TaskVerifyOutcome.as_str().to_owned(),
                params: json!({"taskId": self.task_id}),
            }
        } else {
            NextRead {
                method: Method::ReceiptStatus.as_str().to_owned(),
                params: json!({"requestId": self.request_id}),
            }
        }
    }
}

/// A reply that came from another host run than the one the session knew.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunChange {
    /// The run the session (or the task) knew.
    pub previous_run_id: String,
    /// The run that answered now.
    pub current_run_id: String,
    /// The task whose kept run differs, when the reply was about one.
    pub task_id: Option<String>,
}

impl RunChange {
    /// One sentence for the caller.
    pub fn message(&self) -> String {
        let what = match &self.task_id {
            Some(t) => format!("task {t} belonged to run {}", self.previous_run_id),
            None => format!("the session last saw run {}", self.previous_run_id),
        };
        format!(
            "the host restarted: {what} and the host now runs {}; the old run's receipts and tasks are gone, so what its requests did cannot be read through Polaris — check the page or service itself before redoing any work in a new task",
            self.current_run_id
        )
    }
}

/// An ambiguity a read settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The request that was ambiguous.
    pub request_id: String,
    /// Its task.
    pub task_id: String,
    /// How it ended: `completed`, `cleared`, `never_arrived`, `confirmed` or `run_ended`.
    pub how: &'static str,
}

/// A host reply seen through the session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionReply {
    /// The reply as the host sent it.
    pub reply: Reply,
    /// Set when the reply came from another run than the session or the task knew.
    pub run_change: Option<RunChange>,
    /// Ambiguities this reply settled.
    pub settled: Vec<Settled>,
}
