//! Clearing and acknowledging: the two phases of a clear, and recording an outcome that was
//! settled outside Polaris.

use std::sync::Arc;

use super::audit::{
    append_audit, append_audit_with, audit_entry, open_audit, os_user_name, AuditLog,
};
use super::{bad_params, MAX_REASON_CHARS};
use crate::host::operator_reads::{receipt_matches, row_filter};
use crate::host::{ClearTargets, FleetTargets, Handled, Host};
use crate::protocol::introspection::{
    AuditAcknowledged, AuditEntry, AuditStopped, ClearCommitParams, ClearCommitted,
    ClearPrepareParams, ClearPrepared, ClearableReceipt, OperatorStopParams,
    OutcomeAcknowledgeParams, OutcomeAcknowledged, RefusalReason, RefusedReceipt,
};
use crate::protocol::results::StoredReply;
use crate::protocol::{format_millis, ErrorBody, ErrorCode};

pub(super) fn checked_commit(p: ClearCommitParams) -> Result<ClearCommitParams, ErrorBody> {
    let n = p.reason.chars().count();
    if p.reason.trim().is_empty() || n > MAX_REASON_CHARS {
        return Err(bad_params(
            "receipts.clearCommit",
            format_args!("reason must be 1–{MAX_REASON_CHARS} characters and say why (got {n})"),
        ));
    }
    if p.operator.as_ref().is_some_and(|o| {
        o.trim().is_empty()
            || crate::protocol::limits::OPERATOR
                .check("operator", o)
                .is_err()
    }) {
        return Err(bad_params(
            "receipts.clearCommit",
            "operator must be 1–200 characters",
        ));
    }
    Ok(p)
}

// ----------------------------------------------------------------------------------------------
// Clearing
// ----------------------------------------------------------------------------------------------

pub(super) fn clear_prepare(
    host: &Host,
    p: ClearPrepareParams,
) -> Result<ClearPrepared, ErrorBody> {
    const M: &str = "receipts.clearPrepare";
    let view = match (&p.request_ids, p.filter) {
        (Some(ids), None) => {
            if ids.is_empty() {
                return Err(bad_params(
                    M,
                    "requestIds is empty; name at least one request ID",
                ));
            }
            if let Some(bad) = ids
                .iter()
                .find(|id| crate::protocol::validate_id(id).is_err())
            {
                return Err(bad_params(
                    M,
                    format_args!("{bad:?} is not a valid request ID"),
                ));
            }
            if host.ledger().is_some() {
                // A fleet host prepares from the fleet's book (SPEC §13).
                tokio::runtime::Handle::current()
                    .block_on(host.fleet_clear_prepare(FleetTargets::Ids(ids.clone())))?
            } else {
                host.clear_prepare(ClearTargets::Ids(ids))
            }
        }
        (None, Some(filter)) => {
            let filter = filter.checked(M)?;
            if host.ledger().is_some() {
                let targets = FleetTargets::Filter(row_filter(&filter));
                tokio::runtime::Handle::current().block_on(host.fleet_clear_prepare(targets))?
            } else {
                host.clear_prepare(ClearTargets::Matching(&|k, r, why| {
                    receipt_matches(&filter, k, r, why)
                }))
            }
        }
        _ => return Err(bad_params(M, "give exactly one of requestIds or filter")),
    };
    let clearable = view
        .clearable
        .iter()
        .map(|c| ClearableReceipt {
            code: c.outcome.code,
            completed_at: format_millis(c.completed_at),
            joins: u64::from(c.joins),
            method: c.method.as_str().to_owned(),
            ok: c.outcome.is_ok(),
            replays: u64::from(c.replays),
            reply: StoredReply::of(&c.outcome),
            request_id: c.request_id.clone(),
            task_id: c.task_id.as_deref().map(str::to_owned),
        })
        .collect();
    let refused = view
        .refused
        .iter()
        .map(|(id, why)| RefusedReceipt {
            reason: RefusalReason::from(*why),
            request_id: id.clone(),
        })
        .collect();
    Ok(ClearPrepared {
        clearable,
        expires_at: format_millis(view.expires_at),
        refused,
        token: view.token,
    })
}

/// Checks `outcome.acknowledge`'s params before anything is looked up.
pub(super) fn checked_ack(
    p: OutcomeAcknowledgeParams,
) -> Result<OutcomeAcknowledgeParams, ErrorBody> {
    const M: &str = "outcome.acknowledge";
    if crate::protocol::validate_id(&p.request_id).is_err() {
        return Err(bad_params(
            M,
            format_args!("{:?} is not a valid request ID", p.request_id),
        ));
    }
    let n = p.reason.trim().chars().count();
    if n == 0 || p.reason.chars().count() > 500 {
        return Err(bad_params(
            M,
            "reason must say in 1-500 characters how the outcome was settled",
        ));
    }
    Ok(p)
}

/// `outcome.acknowledge`: the audit log must be writable first (an acknowledgement nobody can
/// account for is refused); then the host records it (journaled, durable before the reply) and
/// the audit line is written.
pub(super) async fn acknowledge(
    host: &Host,
    audit: &Arc<AuditLog>,
    p: OutcomeAcknowledgeParams,
) -> Result<OutcomeAcknowledged, ErrorBody> {
    let operator = p.operator.clone().unwrap_or_else(os_user_name);
    let _order = audit.lock.lock().await;
    let file = open_audit(audit, "acknowledged").await?;
    let done = if host.ledger().is_some() {
        // The flag goes on the ledger's row, so a clear on any host sees it settled.
        host.fleet_acknowledge(&p.request_id, &p.reason, &operator)
            .await?
    } else {
        host.acknowledge(&p.request_id, &p.reason, &operator)?
    };
    if let Some(ticket) = done.durable {
        ticket.await.map_err(|e| host.journal_error(&e))?;
    }
    let entry = AuditEntry {
        at: done.result.acknowledged_at.clone(),
        cleared: Vec::new(),
        operator: operator.clone(),
        reason: p.reason.clone(),
        run_id: host.run_id().to_owned(),
        acknowledged: Some(AuditAcknowledged {
            code: done.code,
            method: done.method.as_str().to_owned(),
            request_id: p.request_id.clone(),
            task_id: done.result.task_id.clone(),
        }),
        stopped: None,
    };
    if let Err(e) = append_audit(file, &entry).await {
        tracing::error!(path = %audit.path().display(), "an acknowledgement was recorded but its audit line was not written: {e}");
    }
    Ok(done.result)
}

pub(super) async fn clear_commit(
    host: &Host,
    audit: &Arc<AuditLog>,
    p: ClearCommitParams,
) -> Result<ClearCommitted, ErrorBody> {
    let operator = p.operator.clone().unwrap_or_else(os_user_name);
    // One commit at a time, so the log's order is the order the clears applied in.
    let _order = audit.lock.lock().await;
    // The log must be writable before anything is cleared: a clear nobody can account for is
    // worse than one refused.
    let file = open_audit(audit, "cleared").await?;
    let mut done = if host.ledger().is_some() {
        // Decided in the ledger for the whole fleet; the audit line is written here.
        host.fleet_clear_commit(&p.token, &p.reason, &operator)
            .await?
    } else {
        let (host, token, reason, operator) = (
            host.clone(),
            p.token.clone(),
            p.reason.clone(),
            operator.clone(),
        );
        // The commit waits for any operator scan in progress: off the runtime's workers.
        tokio::task::spawn_blocking(move || host.clear_commit(&token, &reason, &operator))
            .await
            .map_err(|e| {
                ErrorBody::new(
                    ErrorCode::Internal,
                    format!("the clear failed inside the host ({e}); read receipts.list to see what is still there"),
                )
            })??
    };
    match done.durable.take() {
        None => {}
        Some(Ok(ticket)) => {
            if let Err(e) = ticket.await {
                return Err(host.journal_error(&e));
            }
        }
        Some(Err(e)) => return Err(host.journal_error(&e)),
    }
    host.compact_if_due();
    let mut result = ClearCommitted {
        audit_error: None,
        cleared: done.cleared.len() as u64,
        receipts: done.receipts.clone(),
        tombstones: done.tombstones as u64,
    };
    // The entry lists every cleared receipt: built, written and freed off the runtime's workers.
    let (entry_host, reason) = (host.clone(), p.reason.clone());
    let written = append_audit_with(file, move || {
        audit_entry(&entry_host, &done, &operator, &reason)
    })
    .await;
    if let Err(e) = written {
        tracing::error!(path = %audit.path().display(), "the clear applied but its audit line was not written: {e}");
        result.audit_error = Some(format!(
            "the clear applied but its audit line could not be written to {}: {e}",
            audit.path().display()
        ));
    }
    Ok(result)
}

/// Checks an operator's `task.stop` params: a reason of 1–500 characters for the audit log.
pub(super) fn checked_stop(p: OperatorStopParams) -> Result<OperatorStopParams, ErrorBody> {
    let n = p.reason.trim().chars().count();
    if n == 0 || p.reason.chars().count() > MAX_REASON_CHARS {
        return Err(bad_params(
            "task.stop",
            "reason must say in 1-500 characters why the task is stopped",
        ));
    }
    Ok(p)
}

/// An operator's `task.stop`: sent to the host as the bridge's `task.stop` under a fresh
/// request ID (so it has its receipt, as an agent's stop has), then recorded in the audit log
/// with that ID. Refused, nothing stopped, when the audit log cannot be opened; the bridge's
/// refusals (a full book, an unknown or closed task) come back as they are.
pub(super) async fn operator_stop(
    host: &Host,
    audit: &Arc<AuditLog>,
    p: OperatorStopParams,
) -> Result<serde_json::Value, ErrorBody> {
    let operator = p.operator.clone().unwrap_or_else(os_user_name);
    let _order = audit.lock.lock().await;
    let file = open_audit(audit, "stopped").await?;
    let request_id = uuid::Uuid::new_v4().to_string();
    let params = serde_json::json!({"taskId": p.task_id, "reason": p.reason});
    let line = match host.handle(&request_id, "task.stop", &params) {
        Handled::Ready(line) => line,
        Handled::Replay(r) => r.line(host.run_id()),
        Handled::Later(reply) => reply.await,
        Handled::Joined(_) => unreachable!("only handle_frames joins replies"),
    };
    let reply: serde_json::Value = serde_json::from_slice(&line).map_err(|e| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!("the host's reply to the stop could not be read ({e}); read the task's state (task.status) before stopping it again"),
        )
    })?;
    if reply["ok"] != true {
        return Err(
            serde_json::from_value::<ErrorBody>(reply["error"].clone()).unwrap_or_else(|_| {
                ErrorBody::new(ErrorCode::Internal, "the stop was refused without a reason")
            }),
        );
    }
    let entry = AuditEntry {
        at: format_millis(crate::protocol::now_millis()),
        cleared: Vec::new(),
        operator,
        reason: p.reason.clone(),
        run_id: host.run_id().to_owned(),
        acknowledged: None,
        stopped: Some(AuditStopped {
            task_id: p.task_id.clone(),
            request_id,
        }),
    };
    if let Err(e) = append_audit(file, &entry).await {
        tracing::error!(path = %audit.path().display(), "a stop applied but its audit line was not written: {e}");
    }
    Ok(reply["result"].clone())
}
