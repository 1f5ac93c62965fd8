//! A task's journal record: what the host writes when a task starts, changes or closes, and the
//! pending outcomes read back from it on recovery. Its own file so that the execution (which
//! builds records) and the journaling (which writes and recovers them) both sit on top of it.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::journal::{Record, TaskEvent, TaskRecord};
use crate::protocol::Expect;
use crate::tasks::{Closed, PendingOutcome, Task};

/// A task's journal record with the bytes it borrows, built under the host's lock.
pub(super) struct TaskRecordData {
    event: TaskEvent,
    task_id: Arc<str>,
    title: String,
    state: &'static str,
    pending: Vec<u8>,
    detail: Vec<u8>,
    created_at: i64,
    at: i64,
    closed_at: Option<i64>,
}

impl TaskRecordData {
    /// The task as it is now. `pending` holds its unresolved pending outcomes; `detail` its URL
    /// and stop reason (history is rebuilt from the receipts, which carry it already).
    pub(super) fn of(task: &Task, event: TaskEvent, at: i64) -> TaskRecordData {
        let pending: Vec<Value> = task
            .pending
            .iter()
            .map(|p| {
                let mut v = json!({
                    "requestId": p.request_id,
                    "method": p.method.as_str(),
                    "params": p.params,
                    "expect": p.expect,
                    "since": p.since,
                });
                if let Some(e) = &p.evidence {
                    v["evidence"] = json!(e);
                }
                v
            })
            .collect();
        let stop_reason = match &task.closed {
            Some(Closed::Stopped { reason }) => Some(reason.as_str()),
            _ => None,
        };
        TaskRecordData {
            event,
            task_id: task.id.clone(),
            title: task.title.clone(),
            state: task.state().as_str(),
            pending: if pending.is_empty() {
                Vec::new()
            } else {
                serde_json::to_vec(&pending).unwrap_or_default()
            },
            detail: serde_json::to_vec(&json!({"url": task.url, "stopReason": stop_reason}))
                .unwrap_or_default(),
            created_at: task.created_at,
            at,
            closed_at: task.closed.is_some().then_some(task.updated_at),
        }
    }

    /// The record, naming `run_id`.
    pub(super) fn record<'a>(&'a self, run_id: &'a str) -> Record<'a> {
        Record::Task(TaskRecord {
            event: self.event,
            task_id: &self.task_id,
            run_id,
            created_at: self.created_at,
            at: self.at,
            title: &self.title,
            state: self.state,
            pending: &self.pending,
            detail: &self.detail,
            closed_at: self.closed_at,
        })
    }
}

/// A pending outcome as [`TaskRecordData`] wrote it.
pub(super) fn pending_of(v: &Value) -> Option<PendingOutcome> {
    Some(PendingOutcome {
        request_id: v["requestId"].as_str()?.to_owned(),
        method: v["method"].as_str()?.parse().ok()?,
        params: v["params"].clone(),
        // `null` for a local step sent without an expectation; a record with no readable
        // expectation otherwise is not a pending outcome this host wrote.
        expect: match &v["expect"] {
            Value::Null => None,
            e => Some(serde_json::from_value::<Expect>(e.clone()).ok()?),
        },
        since: v["since"].as_i64()?,
        last_verify: None,
        // Written since SPEC §16; a record without it reads as no evidence.
        evidence: serde_json::from_value(v["evidence"].clone()).ok().flatten(),
    })
}
