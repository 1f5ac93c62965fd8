//! How a receipt row reads: the columns every receipt read selects, and the row turned into a
//! [`LedgerReceipt`].

use super::connection::unavailable;
use super::rows::{LedgerError, LedgerReceipt, RowState};
use tokio_postgres::Row;

/// The receipt columns, in the order [`receipt_from_row`] reads them by name.
pub(super) const RECEIPT_COLUMNS: &str =
    "request_id, request, method, task_id, host_id, epoch, run_id, \
                               state, reply, first_seen, completed_at, cleared_at, clear_reason, \
                               code, acknowledged_at, settled, replays";

/// Reads a receipt row (any row carrying [`RECEIPT_COLUMNS`] by name).
pub(super) fn receipt_from_row(row: &Row) -> Result<LedgerReceipt, LedgerError> {
    let state: String = row.try_get("state").map_err(unavailable)?;
    let state = match state.as_str() {
        "running" => RowState::Running,
        "completed" => RowState::Completed,
        "cleared" => RowState::Cleared,
        other => {
            return Err(LedgerError::Unavailable(format!(
                "the ledger holds a receipt in an unknown state {other:?}; upgrade this host"
            )))
        }
    };
    Ok(LedgerReceipt {
        request_id: row.try_get("request_id").map_err(unavailable)?,
        request: row.try_get("request").map_err(unavailable)?,
        method: row.try_get("method").map_err(unavailable)?,
        task_id: row.try_get("task_id").map_err(unavailable)?,
        host_id: row.try_get("host_id").map_err(unavailable)?,
        epoch: row.try_get("epoch").map_err(unavailable)?,
        run_id: row.try_get("run_id").map_err(unavailable)?,
        state,
        reply: row.try_get("reply").map_err(unavailable)?,
        first_seen: row.try_get("first_seen").map_err(unavailable)?,
        completed_at: row.try_get("completed_at").map_err(unavailable)?,
        cleared_at: row.try_get("cleared_at").map_err(unavailable)?,
        clear_reason: row.try_get("clear_reason").map_err(unavailable)?,
        // A claim's answer carries only the columns above; every other read carries these.
        code: row.try_get("code").ok().flatten(),
        acknowledged_at: row.try_get("acknowledged_at").ok().flatten(),
        settled: row.try_get("settled").unwrap_or(false),
        replays: row.try_get("replays").unwrap_or(0),
    })
}
