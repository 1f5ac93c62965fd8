//! The replies an execution stores when the host itself failed it: the journal could not
//! record its begin (nothing ran), could not record its reply (it ran; uncertain), or the
//! execution failed inside the host. One home for their wording, shared by admission,
//! execution and the journaling.

use std::sync::Arc;

use serde_json::json;

use crate::journal;
use crate::protocol::{ErrorBody, ErrorCode, Method, Outcome};

/// The stored outcome of an execution whose begin the journal could not make durable: the
/// executor was never asked to act.
pub(super) fn not_begun(id: &str, method: Method, error: &journal::Error) -> Arc<Outcome> {
    Outcome::err(
        &ErrorBody::new(
            ErrorCode::Internal,
            format!(
                "{method} (request {id}) was not executed: the host's journal could not record it ({error}), so the host is stopping. Send it again under the same id once the host is back"
            ),
        )
        .with_delivery(crate::protocol::Delivery::NotExecuted)
        .with_details(json!({"requestId": id})),
    )
}

/// The answer to a copy whose stored reply the journal could not make durable: its effect is
/// uncertain (the execution ran), and the host is stopping.
pub(super) fn not_durable(id: &str, error: &journal::Error) -> Arc<Outcome> {
    Outcome::err(
        &ErrorBody::new(
            ErrorCode::Internal,
            format!(
                "request {id} was executed but the host's journal could not record its reply ({error}), so the host is stopping; its effect is uncertain. Do not resend it: once the host is back, read receipt.status for {id}"
            ),
        )
        .with_details(json!({"requestId": id})),
    )
}

/// The `INTERNAL` refusal an execution that failed inside the host stores.
pub(super) fn internal_error(
    id: &str,
    method: Method,
    task: Option<&str>,
    what: &str,
) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!(
            "the execution of {method} (request {id}) failed inside the host ({what}); its effect is uncertain. Do not resend it: read receipt.status for {id}{}",
            task.map(|t| format!(" and call task.verifyOutcome for task {t}")).unwrap_or_default()
        ),
    )
    .with_details(json!({"requestId": id, "taskId": task}))
}
