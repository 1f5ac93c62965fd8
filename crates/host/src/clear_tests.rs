//! Clearing with the clock moved by hand: the tokens' lifetime and bound, and commits cut into
//! slices with agents acting between them.

use std::sync::Arc;

use serde_json::{json, Value};

use super::clear::{Pace, Phase};
use super::*;
use crate::book::RequestKey;
use crate::protocol::ErrorCode;

async fn host_with_receipt() -> Host {
    let host = Host::new(
        HostConfig::default(),
        Arc::new(crate::executor::FixtureExecutor::new()),
    );
    let line = match host.handle("t1", "task.start", &json!({"title": "t"})) {
        Handled::Later(f) => f.await,
        Handled::Joined(_) => Vec::new(),
        Handled::Ready(line) => line,
        Handled::Replay(replay) => replay.line(host.run_id()),
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

/// Sends one bridge request as an agent would and returns its reply.
async fn call(host: &Host, id: &str) -> Value {
    let line = match host.handle(id, "task.start", &json!({"title": "t"})) {
        Handled::Later(f) => f.await,
        Handled::Joined(_) => Vec::new(),
        Handled::Ready(line) => line,
        Handled::Replay(replay) => replay.line(host.run_id()),
    };
    serde_json::from_slice(&line).unwrap()
}

/// [`call`] from a blocking thread (a commit's `between`).
fn call_blocking(host: &Host, id: &str) -> Value {
    tokio::runtime::Handle::current().block_on(call(host, id))
}

/// A host holding `t1` and then `s0..s{n}` (all completed), and the prepared clear of all.
async fn filled(n: usize) -> (Host, Vec<String>) {
    let host = host_with_receipt().await;
    let mut ids = vec!["t1".to_string()];
    for i in 0..n {
        let id = format!("s{i}");
        assert_eq!(call(&host, &id).await["ok"], true);
        ids.push(id);
    }
    (host, ids)
}

fn all_clearable(host: &Host, now: i64) -> PreparedClearView {
    host.clear_prepare_at(ClearTargets::Matching(&|_, _, r| r.is_none()), now)
}

fn code(reply: &Value) -> &str {
    reply["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_and_admissions_between_the_commits_slices_keep_the_receipt_rules() {
    let (host, ids) = filled(1_500).await;
    let prepared = all_clearable(&host, 1_000);
    assert_eq!(prepared.clearable.len(), ids.len());
    let token = prepared.token.clone();
    let h = host.clone();
    let listed = ids.clone();
    let (done, seen) = tokio::task::spawn_blocking(move || {
        let mut created = Vec::new();
        let (mut replayed, mut refused, mut slices) = (0, 0, 0);
        let mut between = |phase: Phase| {
            slices += 1;
            // Never vacant: every listed ID is a receipt (it may replay) or a tombstone.
            let mut still: Option<&String> = None;
            let mut gone: Option<&String> = None;
            {
                let st = h.lock();
                for id in &listed {
                    let key = RequestKey::new(id);
                    match (
                        st.book.get(&key).is_some(),
                        st.book.tombstone(&key).is_some(),
                    ) {
                        (true, _) => still = still.or(Some(id)),
                        (false, true) => gone = Some(id),
                        (false, false) => {
                            panic!("{id} is neither a receipt nor a tombstone ({phase:?})")
                        }
                    }
                }
                if phase == Phase::Check {
                    assert!(gone.is_none(), "nothing leaves before the clear applies");
                }
            }
            if phase == Phase::Remove {
                if let Some(id) = still {
                    let r = call_blocking(&h, id);
                    assert_eq!(
                        r["ok"], true,
                        "{id} still replays before the commit answers: {r}"
                    );
                    replayed += 1;
                }
                if let Some(id) = gone {
                    let r = call_blocking(&h, id);
                    assert_eq!(code(&r), "RECEIPT_CLEARED", "{id}: {r}");
                    refused += 1;
                }
            }
            // An agent's new request between slices of either phase.
            let id = format!("new-{slices}");
            assert_eq!(call_blocking(&h, &id)["ok"], true);
            created.push(id);
        };
        let mut pace = Pace {
            max_steps: 40,
            between: &mut between,
        };
        let done = h.clear_commit_paced(&token, "slices", "ops", 2_000, &mut pace);
        (done, (created, replayed, refused))
    })
    .await
    .unwrap();
    let (created, replayed, refused) = seen;
    let done = done.unwrap();
    assert_eq!(done.cleared.len(), ids.len());
    assert!(
        replayed > 0 && refused > 0,
        "{replayed} replays, {refused} refusals"
    );
    // Once the commit answered, every listed ID is refused as cleared.
    for id in ids.iter().step_by(97) {
        assert_eq!(code(&call(&host, id).await), "RECEIPT_CLEARED", "{id}");
    }
    // What agents created meanwhile stays, in the order it was created.
    let st = host.lock();
    assert_eq!(st.book.used(), created.len());
    assert_eq!(done.receipts.used as usize, created.len());
    let order: Vec<String> = st.book.iter().map(|(k, _)| k.to_string()).collect();
    assert_eq!(order, created);
    assert_eq!(st.book.tombstones(), ids.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_while_the_commit_checks_makes_it_stale_and_clears_nothing() {
    let (host, ids) = filled(1_000).await;
    // s5 is checked in the first slice, s900 after the replay: both are caught.
    for (n, replayed) in ["s5", "s900"].into_iter().enumerate() {
        let prepared = all_clearable(&host, 1_000 + n as i64);
        assert_eq!(prepared.clearable.len(), ids.len());
        let (h, token) = (host.clone(), prepared.token.clone());
        let err = tokio::task::spawn_blocking(move || {
            let mut once = true;
            let mut between = |phase: Phase| {
                assert_eq!(phase, Phase::Check, "the clear never applies");
                if std::mem::take(&mut once) {
                    assert_eq!(call_blocking(&h, replayed)["ok"], true);
                }
            };
            let mut pace = Pace {
                max_steps: 40,
                between: &mut between,
            };
            h.clear_commit_paced(&token, "x", "ops", 2_000, &mut pace)
        })
        .await
        .unwrap()
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::ClearTokenStale);
        assert_eq!(err.details.unwrap()["requestId"], replayed);
        let st = host.lock();
        assert_eq!(st.book.used(), ids.len(), "nothing was cleared");
        assert_eq!(st.book.tombstones(), 0);
    }
    // Prepared again, it applies.
    let prepared = all_clearable(&host, 3_000);
    let done = host
        .clear_commit_at(&prepared.token, "x", "ops", 3_000)
        .unwrap();
    assert_eq!(done.cleared.len(), ids.len());
}

#[tokio::test]
async fn a_commit_gives_back_count_and_bytes_exactly() {
    let host = Host::new(
        HostConfig {
            capacity: 600,
            ..HostConfig::default()
        },
        Arc::new(crate::executor::FixtureExecutor::new()),
    );
    // 200 that stay, then 400 to clear (UUIDs and text IDs), filling the book.
    let keep: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for id in &keep {
        assert_eq!(call(&host, id).await["ok"], true);
    }
    let kept_bytes = host.lock().book.used_bytes();
    let clear: Vec<String> = (0..400)
        .map(|i| {
            if i % 2 == 0 {
                uuid::Uuid::new_v4().to_string()
            } else {
                format!("c{i}")
            }
        })
        .collect();
    for id in &clear {
        assert_eq!(call(&host, id).await["ok"], true);
    }
    assert_eq!(
        code(&call(&host, "one-too-many").await),
        "RECEIPT_CAPACITY_FULL"
    );
    let prepared = host.clear_prepare_at(ClearTargets::Ids(&clear), 1_000);
    assert_eq!(prepared.clearable.len(), clear.len());
    let done = host
        .clear_commit_at(&prepared.token, "x", "ops", 2_000)
        .unwrap();
    assert_eq!(done.cleared.len(), clear.len());
    assert_eq!(done.receipts.used, keep.len() as u64);
    assert_eq!(done.receipts.used_bytes, kept_bytes as u64);
    assert_eq!(done.tombstones, clear.len());
    {
        let st = host.lock();
        let order: Vec<String> = st.book.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(order, keep, "what stays keeps its order");
        assert_eq!(st.book.used_bytes(), kept_bytes);
    }
    // Exactly the room cleared is free again.
    for i in 0..clear.len() {
        assert_eq!(call(&host, &format!("again{i}")).await["ok"], true);
    }
    assert_eq!(
        code(&call(&host, "one-too-many").await),
        "RECEIPT_CAPACITY_FULL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_prepares_and_commits_apply_one_clear_or_none() {
    let (host, ids) = filled(2_000).await;
    let n = ids.len();
    let a = all_clearable(&host, 1_000);
    let b = all_clearable(&host, 1_000);
    let commit = |token: String| {
        let h = host.clone();
        tokio::task::spawn_blocking(move || h.clear_commit_at(&token, "race", "ops", 2_000))
    };
    let prepare = || {
        let h = host.clone();
        tokio::task::spawn_blocking(move || all_clearable(&h, 2_000).clearable.len())
    };
    // Two commits of overlapping lists, the same token twice, and a prepare, all at once.
    let (ra, rb, ra2, seen) = tokio::join!(
        commit(a.token.clone()),
        commit(b.token.clone()),
        commit(a.token.clone()),
        prepare()
    );
    let results = [ra.unwrap(), rb.unwrap(), ra2.unwrap()];
    let applied: Vec<&CommittedClear> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(applied.len(), 1, "exactly one clear applies");
    assert_eq!(applied[0].cleared.len(), n);
    for r in &results {
        if let Err(e) = r {
            assert_eq!(e.code, ErrorCode::ClearTokenStale, "{}", e.message);
        }
    }
    // The prepare saw the book whole before the clear or empty after it, never half.
    let seen = seen.unwrap();
    assert!(seen == n || seen == 0, "a prepare saw {seen} of {n}");
    let st = host.lock();
    assert_eq!(st.book.used(), 0);
    assert_eq!(st.book.tombstones(), n);
}
