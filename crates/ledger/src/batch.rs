//! Group commit: claims and completions queued by many executions, written in few commits.
//!
//! A few workers each own one connection. A worker takes every operation queued (up to
//! [`MAX_BATCH`]), runs one statement for all the claims and one for all the completions
//! (arrays, unnested by a server-side function), each its own transaction committed once,
//! and answers every caller. While one worker waits for its commit, the next gathers the
//! following batch, so the commit rate, not the caller count, bounds the connections used.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_postgres::{Client, Statement};

use super::{
    connect, receipt_from_row, unavailable, Claim, Claimed, Completed, LedgerError, LedgerReceipt,
    RowState, Shared, RECEIPT_COLUMNS,
};

/// The most operations one worker takes into one batch.
pub const MAX_BATCH: usize = 512;

/// How many batch workers (connections) a host runs for `--ledger-connections`. Claims of the
/// whole fleet serialize on the capacity row once per batch, so more workers than this only
/// make batches smaller.
pub fn workers(connections: usize) -> usize {
    connections.clamp(1, 4)
}

/// One queued operation and where its answer goes.
pub enum Op {
    /// A claim.
    Claim(Claim, oneshot::Sender<Result<Claimed, LedgerError>>),
    /// A completion.
    Complete(Completion),
}

/// A completion to store, fenced by this run's epoch.
pub struct Completion {
    pub request_id: String,
    pub reply: String,
    pub task_id: Option<String>,
    pub at: i64,
    pub answer: oneshot::Sender<Result<Completed, LedgerError>>,
}

/// A worker's connection with its statements prepared.
struct Conn {
    client: Client,
    claim: Statement,
    flush: Statement,
    complete: Statement,
}

impl Conn {
    async fn open(shared: &Shared) -> Result<Conn, LedgerError> {
        let client = connect(&shared.pg).await?;
        let claim = client
            .prepare("SELECT * FROM polaris_claim($1, $2, $3, $4, $5, $6)")
            .await
            .map_err(unavailable)?;
        let flush = client
            .prepare("SELECT polaris_flush()")
            .await
            .map_err(unavailable)?;
        let complete = client
            .prepare("SELECT * FROM polaris_complete($1, $2, $3, $4, $5)")
            .await
            .map_err(unavailable)?;
        Ok(Conn {
            client,
            claim,
            flush,
            complete,
        })
    }
}

/// Takes batches from the queue until the ledger stops.
pub async fn worker(shared: Arc<Shared>, queue: Arc<Mutex<mpsc::UnboundedReceiver<Op>>>) {
    let mut conn: Option<Conn> = None;
    loop {
        let mut ops = Vec::new();
        {
            let mut rx = tokio::select! {
                _ = shared.cancel.cancelled() => return,
                rx = queue.lock() => rx,
            };
            let first = tokio::select! {
                _ = shared.cancel.cancelled() => return,
                op = rx.recv() => op,
            };
            let Some(first) = first else { return };
            ops.push(first);
            while ops.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(op) => ops.push(op),
                    Err(_) => break,
                }
            }
        }
        shared.batches.fetch_add(1, Ordering::Relaxed);
        shared
            .batched_ops
            .fetch_add(ops.len() as u64, Ordering::Relaxed);
        let mut claims = Vec::new();
        let mut completions = Vec::new();
        for op in ops {
            match op {
                Op::Claim(claim, answer) => claims.push((claim, answer)),
                Op::Complete(completion) => completions.push(completion),
            }
        }
        if conn.as_ref().is_none_or(|c| c.client.is_closed()) {
            conn = None;
            match Conn::open(&shared).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    fail(claims, completions, e);
                    continue;
                }
            }
        }
        let Some(c) = conn.as_ref() else { continue };
        tokio::join!(
            run_claims(&shared, c, claims),
            run_completions(&shared, c, completions)
        );
        if c.client.is_closed() {
            conn = None;
        }
    }
}

fn fail(
    claims: Vec<(Claim, oneshot::Sender<Result<Claimed, LedgerError>>)>,
    completions: Vec<Completion>,
    error: LedgerError,
) {
    for (_, answer) in claims {
        let _ = answer.send(Err(error.clone()));
    }
    for completion in completions {
        let _ = completion.answer.send(Err(error.clone()));
    }
}

/// Claims a batch in one statement. Copies of one ID within the batch are sent once: the
/// first caller gets the outcome, the others the row it made.
async fn run_claims(
    shared: &Shared,
    conn: &Conn,
    claims: Vec<(Claim, oneshot::Sender<Result<Claimed, LedgerError>>)>,
) {
    if claims.is_empty() {
        return;
    }
    // Each claim's slot among the distinct IDs sent.
    let mut slot_of = Vec::with_capacity(claims.len());
    let mut unique: Vec<usize> = Vec::with_capacity(claims.len());
    let result = {
        let mut position: HashMap<&str, usize> = HashMap::with_capacity(claims.len());
        for (i, (claim, _)) in claims.iter().enumerate() {
            let slot = *position
                .entry(claim.request_id.as_str())
                .or_insert_with(|| {
                    unique.push(i);
                    unique.len() - 1
                });
            slot_of.push(slot);
        }
        let ids: Vec<&str> = unique
            .iter()
            .map(|&i| claims[i].0.request_id.as_str())
            .collect();
        let requests: Vec<&str> = unique
            .iter()
            .map(|&i| claims[i].0.request.as_str())
            .collect();
        let methods: Vec<&str> = unique.iter().map(|&i| claims[i].0.method).collect();
        let tasks: Vec<Option<&str>> = unique
            .iter()
            .map(|&i| claims[i].0.task_id.as_deref())
            .collect();
        let ats: Vec<i64> = unique.iter().map(|&i| claims[i].0.at).collect();
        conn.client
            .query(
                &conn.claim,
                &[&shared.epoch, &ids, &requests, &methods, &tasks, &ats],
            )
            .await
    };
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            // Whether it committed is unknown when the connection broke: the caller withdraws.
            let error = unavailable(e);
            for (_, answer) in claims {
                let _ = answer.send(Err(error.clone()));
            }
            return;
        }
    };
    let mut outcomes: Vec<Option<Result<Claimed, LedgerError>>> = vec![None; unique.len()];
    for row in &rows {
        let ord: i64 = match row.try_get("ord") {
            Ok(ord) => ord,
            Err(_) => continue,
        };
        let Some(slot) = usize::try_from(ord - 1)
            .ok()
            .and_then(|i| outcomes.get_mut(i))
        else {
            continue;
        };
        *slot = Some(claim_outcome(row));
    }
    // The claim committed asynchronously (it held the fleet's usage row): nothing it
    // inserted is acknowledged before the WAL holding it is durable.
    if outcomes.iter().any(|o| matches!(o, Some(Ok(Claimed::New)))) {
        if let Err(e) = conn.client.query(&conn.flush, &[]).await {
            let error = unavailable(e);
            for outcome in outcomes.iter_mut() {
                if matches!(outcome, Some(Ok(Claimed::New))) {
                    *outcome = Some(Err(error.clone()));
                }
            }
        }
    }
    let mut answered = vec![false; unique.len()];
    for ((claim, answer), u) in claims.into_iter().zip(slot_of) {
        let first = !answered[u];
        answered[u] = true;
        let outcome = match &outcomes[u] {
            None => Err(LedgerError::Unavailable(format!(
                "the ledger did not answer for the claim of {:?}; retry the request",
                claim.request_id
            ))),
            Some(Ok(Claimed::New)) if !first => Ok(Claimed::Existing(Box::new(LedgerReceipt {
                request_id: claim.request_id.clone(),
                request: claim.request.clone(),
                method: claim.method.to_string(),
                task_id: claim.task_id.clone(),
                host_id: shared.host_id.clone(),
                epoch: shared.epoch,
                run_id: shared.run_id.clone(),
                state: RowState::Running,
                reply: None,
                first_seen: claim.at,
                completed_at: None,
                cleared_at: None,
                clear_reason: None,
                code: None,
                acknowledged_at: None,
                settled: false,
                replays: 0,
            }))),
            Some(outcome) => outcome.clone(),
        };
        let _ = answer.send(outcome);
    }
}

fn claim_outcome(row: &tokio_postgres::Row) -> Result<Claimed, LedgerError> {
    let outcome: String = row.try_get("outcome").map_err(unavailable)?;
    match outcome.as_str() {
        "new" => Ok(Claimed::New),
        "existing" => Ok(Claimed::Existing(Box::new(receipt_from_row(row)?))),
        _ => {
            let used: i64 = row.try_get("used").map_err(unavailable)?;
            let capacity: i64 = row.try_get("capacity").map_err(unavailable)?;
            Ok(Claimed::Full {
                used: used.max(0) as u64,
                capacity: capacity.max(0) as u64,
            })
        }
    }
}

/// Stores a batch of completions in one statement; the ones no longer this run's running
/// receipts are answered with their row as it now is.
async fn run_completions(shared: &Shared, conn: &Conn, completions: Vec<Completion>) {
    if completions.is_empty() {
        return;
    }
    let ids: Vec<&str> = completions.iter().map(|c| c.request_id.as_str()).collect();
    let replies: Vec<&str> = completions.iter().map(|c| c.reply.as_str()).collect();
    let tasks: Vec<Option<&str>> = completions.iter().map(|c| c.task_id.as_deref()).collect();
    let ats: Vec<i64> = completions.iter().map(|c| c.at).collect();
    let result = conn
        .client
        .query(
            &conn.complete,
            &[&shared.epoch, &ids, &replies, &tasks, &ats],
        )
        .await;
    let stored: std::collections::HashSet<String> = match result {
        Ok(rows) => rows.iter().filter_map(|r| r.try_get(0).ok()).collect(),
        Err(e) => {
            let error = unavailable(e);
            for completion in completions {
                let _ = completion.answer.send(Err(error.clone()));
            }
            return;
        }
    };
    let fenced: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !stored.contains(*id))
        .collect();
    let mut rows: HashMap<String, LedgerReceipt> = HashMap::new();
    let mut read_error = None;
    if !fenced.is_empty() {
        match conn
            .client
            .query(
                &format!("SELECT {RECEIPT_COLUMNS} FROM receipts WHERE request_id = ANY($1)"),
                &[&fenced],
            )
            .await
        {
            Ok(found) => {
                for row in &found {
                    match receipt_from_row(row) {
                        Ok(receipt) => {
                            rows.insert(receipt.request_id.clone(), receipt);
                        }
                        Err(e) => read_error = Some(e),
                    }
                }
            }
            Err(e) => read_error = Some(unavailable(e)),
        }
    }
    for completion in completions {
        let outcome = if stored.contains(&completion.request_id) {
            Ok(Completed::Stored)
        } else if let Some(row) = rows.get(&completion.request_id) {
            Ok(Completed::Fenced(Box::new(row.clone())))
        } else if let Some(error) = &read_error {
            Err(error.clone())
        } else {
            Err(LedgerError::Fenced(format!(
                "the receipt {:?} is no longer in the ledger (withdrawn or never claimed by \
                 this host run); its reply was not stored",
                completion.request_id
            )))
        };
        let _ = completion.answer.send(outcome);
    }
}
