//! The clear tokens' lifetime and bound, with the clock moved by hand.

use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::protocol::ErrorCode;

async fn host_with_receipt() -> Host {
    let host = Host::new(
        HostConfig::default(),
        Arc::new(crate::executor::FixtureExecutor::new()),
    );
    let line = match host.handle("t1", "task.start", &json!({"title": "t"})) {
        Handled::Later(f) => f.await,
        Handled::Ready(line) => line,
    };
    let reply: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(reply["ok"], true, "{reply}");
    host
}

#[tokio::test]
async fn a_clear_token_expires_after_five_minutes() {
    let host = host_with_receipt().await;
    let ids = ["t1".to_string()];
    let prepared = host.clear_prepare_at(ClearTargets::Ids(&ids), 1_000);
    assert_eq!(prepared.clearable.len(), 1);
    let err = host
        .clear_commit_at(&prepared.token, "late", "ops", 1_000 + CLEAR_TOKEN_TTL_MS)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ClearTokenStale);
    assert_eq!(host.lock().book.used(), 1);

    let prepared = host.clear_prepare_at(ClearTargets::Ids(&ids), 2_000);
    let done = host
        .clear_commit_at(
            &prepared.token,
            "in time",
            "ops",
            1_999 + CLEAR_TOKEN_TTL_MS,
        )
        .unwrap();
    assert_eq!(done.cleared.len(), 1);
    assert_eq!(host.lock().book.tombstones(), 1);
}

#[tokio::test]
async fn prepared_clears_are_bounded() {
    let host = host_with_receipt().await;
    let ids = ["t1".to_string()];
    let tokens: Vec<String> = (0..MAX_PREPARED_CLEARS + 5)
        .map(|i| {
            host.clear_prepare_at(ClearTargets::Ids(&ids), 1_000 + i as i64)
                .token
        })
        .collect();
    assert_eq!(host.lock().prepared_clears.len(), MAX_PREPARED_CLEARS);
    // The oldest were forgotten; the newest still commits.
    let err = host
        .clear_commit_at(&tokens[0], "x", "ops", 2_000)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ClearTokenStale);
    assert!(host
        .clear_commit_at(tokens.last().unwrap(), "x", "ops", 2_000)
        .is_ok());
}
