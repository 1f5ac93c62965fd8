//! Reading the host's state for the operator: `receipts.list`, `receipts.get`, `tasks.list`,
//! `snapshot` and the live feed's `changed` frames. The introspection socket (in the `polaris`
//! package) answers with these; they live here because they read the state behind the host's
//! lock, which nothing outside this crate takes.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::book::{Receipt, RequestKey};
use crate::ledger::{LedgerReceipt, RowFilter, RowOrder, RowState, RowStateFilter};
use crate::protocol::introspection::{
    bad_params, contains_ignoring_case, BlockedOutcome, CanonicalRequest, ChangedEvent,
    ReceiptDetail, ReceiptFilter, ReceiptItem, ReceiptsListParams, ReceiptsListResult,
    RefusalReason, Snapshot, Sort, StateFilter, TasksListParams, TasksListResult,
    DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT,
};
use crate::protocol::results::{ExecutorStatus, PendingOutcome, ReceiptState, StoredReply};
use crate::protocol::{format_millis, ErrorBody, Method, NetworkEvidence};
use crate::tasks::{Task, Tasks};
use crate::{clear_refusal, ledger_error, row_refusal, ClearRefusal, Host, Order};

// ----------------------------------------------------------------------------------------------
// Listing and reading
// ----------------------------------------------------------------------------------------------

/// Whether a receipt of this host's book matches an operator's filter (`refusal`: why it could
/// not be cleared, if it could not).
pub fn receipt_matches(
    filter: &ReceiptFilter,
    key: &RequestKey,
    r: &Receipt,
    refusal: Option<ClearRefusal>,
) -> bool {
    let code = r.result().flatten();
    if let Some(state) = filter.state {
        let keep = match state {
            StateFilter::Running => r.is_running(),
            StateFilter::Completed => !r.is_running(),
            StateFilter::Ok => !r.is_running() && code.is_none(),
            StateFilter::Error => code.is_some(),
            StateFilter::Clearable => refusal.is_none(),
        };
        if !keep {
            return false;
        }
    }
    if filter
        .method
        .as_deref()
        .is_some_and(|m| m != r.method.as_str())
    {
        return false;
    }
    if filter
        .task_id
        .as_deref()
        .is_some_and(|t| r.task_id.as_deref() != Some(t))
    {
        return false;
    }
    if let Some(q) = filter.search.as_deref() {
        let hit = contains_ignoring_case(&key.to_string(), q)
            || contains_ignoring_case(r.method.as_str(), q)
            || r.task_id
                .as_deref()
                .is_some_and(|t| contains_ignoring_case(t, q))
            || code.is_some_and(|c| contains_ignoring_case(c.as_str(), q));
        if !hit {
            return false;
        }
    }
    true
}

fn receipt_state(r: &Receipt) -> ReceiptState {
    if r.is_running() {
        ReceiptState::Running
    } else {
        ReceiptState::Completed
    }
}

/// The network evidence of a receipt's stored reply (SPEC §16).
fn evidence_of(r: &Receipt) -> Option<NetworkEvidence> {
    stored_evidence(
        r.method.as_str(),
        r.result() == Some(None),
        &r.outcome()?.body,
    )
}

/// The network evidence a stored reply `body` of `method` carries, the same for a host's own
/// book and the fleet's (a listing must show on a fleet host what it shows on a single one). A
/// fill that took effect (`succeeded`) keeps no reply to look in, and its reply never carries
/// evidence.
fn stored_evidence(method: &str, succeeded: bool, body: &str) -> Option<NetworkEvidence> {
    if method == Method::PageFill.as_str() && succeeded {
        return None;
    }
    NetworkEvidence::in_reply(body)
}

/// A ReceiptItem (one listing row).
fn item(key: &RequestKey, r: &Receipt, refusal: Option<ClearRefusal>) -> ReceiptItem {
    let result = r.result();
    ReceiptItem {
        clearable: refusal.is_none(),
        code: result.flatten(),
        completed_at: result.map(|_| format_millis(r.completed_at)),
        evidence: evidence_of(r),
        first_seen_at: format_millis(r.first_seen),
        joins: u64::from(r.joins),
        method: r.method.as_str().to_owned(),
        ok: result.map(|code| code.is_none()),
        refusal: refusal.map(RefusalReason::from),
        replays: u64::from(r.replays),
        request_id: key.to_string(),
        state: receipt_state(r),
        task_id: r.task_id.as_deref().map(str::to_owned),
    }
}

/// The ledger's form of an operator's filter, for the fleet's book.
pub fn row_filter(f: &ReceiptFilter) -> RowFilter {
    RowFilter {
        state: f.state.map(|s| match s {
            StateFilter::Running => RowStateFilter::Running,
            StateFilter::Completed => RowStateFilter::Completed,
            StateFilter::Ok => RowStateFilter::Ok,
            StateFilter::Error => RowStateFilter::Error,
            StateFilter::Clearable => RowStateFilter::Clearable,
        }),
        method: f.method.clone(),
        task_id: f.task_id.clone(),
        search: f.search.clone(),
    }
}

/// A listing row of the fleet's book. `joins` and `replays` are the copies this host answered
/// from its own copy of the receipt, plus (in `replays`) those any host answered straight
/// from the row; copies other hosts answered from their own copies are not counted here.
fn fleet_item(host: &Host, row: &LedgerReceipt) -> ReceiptItem {
    let refusal = row_refusal(row);
    let (joins, replays) = host.local_counts(&row.request_id);
    let completed = row.state == RowState::Completed;
    let code = row.code.as_deref().and_then(|c| c.parse().ok());
    ReceiptItem {
        clearable: refusal.is_none(),
        code,
        completed_at: row.completed_at.filter(|_| completed).map(format_millis),
        evidence: row
            .reply
            .as_deref()
            .filter(|_| completed)
            .and_then(|body| stored_evidence(&row.method, row.code.is_none(), body)),
        first_seen_at: format_millis(row.first_seen),
        joins: u64::from(joins),
        method: row.method.clone(),
        ok: completed.then_some(row.code.is_none()),
        refusal: refusal.map(RefusalReason::from),
        replays: u64::from(replays) + row.replays.max(0) as u64,
        request_id: row.request_id.clone(),
        state: match row.state {
            RowState::Running => ReceiptState::Running,
            RowState::Completed => ReceiptState::Completed,
            RowState::Cleared => ReceiptState::Cleared,
        },
        task_id: row.task_id.clone(),
    }
}

/// `receipts.list` on a fleet host: a page of the fleet's book, read from the ledger with an
/// indexed query (the page is at most [`MAX_LIST_LIMIT`] rows). Blocks on the ledger: call it
/// off the runtime's workers.
fn fleet_list(
    host: &Host,
    filter: &ReceiptFilter,
    (sort, reverse): (Sort, bool),
    offset: usize,
    limit: usize,
) -> Result<ReceiptsListResult, ErrorBody> {
    let ledger = host.ledger().expect("a fleet host").clone();
    let order = match sort {
        Sort::Newest => RowOrder::Newest,
        Sort::Oldest => RowOrder::Oldest,
        Sort::State => RowOrder::State,
        Sort::Method => RowOrder::Method,
        Sort::Task => RowOrder::Task,
    };
    let (total, rows) = tokio::runtime::Handle::current()
        .block_on(ledger.list(&row_filter(filter), order, reverse, offset, limit))
        .map_err(|e| ledger_error("listing the fleet's receipts", &e))?;
    Ok(ReceiptsListResult {
        items: rows.iter().map(|r| fleet_item(host, r)).collect(),
        total,
    })
}

/// `receipts.get` on a fleet host: the receipt as the fleet's ledger holds it (any host's),
/// with this host's counts of copies. Blocks on the ledger: call it off the runtime's workers.
fn fleet_get(host: &Host, request_id: &str) -> Result<ReceiptDetail, ErrorBody> {
    let ledger = host.ledger().expect("a fleet host").clone();
    let row = tokio::runtime::Handle::current()
        .block_on(ledger.receipt(request_id))
        .map_err(|e| ledger_error("reading the receipt", &e))?;
    let Some(row) = row else {
        return Ok(ReceiptDetail {
            request_id: request_id.to_owned(),
            state: ReceiptState::Unknown,
            ..ReceiptDetail::default()
        });
    };
    let item = fleet_item(host, &row);
    if row.state == RowState::Cleared {
        return Ok(ReceiptDetail {
            cleared_at: row.cleared_at.map(format_millis),
            reason: row.clear_reason.clone(),
            request_id: row.request_id.clone(),
            state: ReceiptState::Cleared,
            ..ReceiptDetail::default()
        });
    }
    let reply = row
        .reply
        .as_deref()
        .map(|body| crate::protocol::Outcome::of(item.code, body));
    Ok(ReceiptDetail {
        clearable: Some(item.clearable),
        code: item.code,
        completed_at: item.completed_at,
        first_seen_at: Some(item.first_seen_at),
        joins: Some(item.joins),
        method: Some(item.method),
        ok: item.ok,
        refusal: item.refusal,
        replays: Some(item.replays),
        reply: reply.as_deref().map(StoredReply::of),
        request: serde_json::from_str::<CanonicalRequest>(&row.request).ok(),
        request_id: item.request_id,
        state: item.state,
        task_id: item.task_id,
        ..ReceiptDetail::default()
    })
}

/// `receipts.list`: one page of this host's book, or of the fleet's on a fleet host.
pub fn list(host: &Host, p: ReceiptsListParams) -> Result<ReceiptsListResult, ErrorBody> {
    const M: &str = "receipts.list";
    let limit = p.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if limit > MAX_LIST_LIMIT {
        return Err(bad_params(
            M,
            format_args!("limit may be at most {MAX_LIST_LIMIT}; page with offset"),
        ));
    }
    let offset = p.offset.unwrap_or(0);
    let filter = p.filter().checked(M)?;
    let sort = p.sort.unwrap_or(Sort::Newest);
    let reverse = p.reverse.unwrap_or(false);
    if host.ledger().is_some() {
        // A fleet host shows the fleet's book (SPEC §13), not only its own copies.
        return fleet_list(host, &filter, (sort, reverse), offset, limit);
    }
    // Newest first read from its end is oldest first, and the other way round.
    let sort = match (sort, reverse) {
        (Sort::Newest, true) => Sort::Oldest,
        (Sort::Oldest, true) => Sort::Newest,
        (sort, _) => sort,
    };
    let _gate = host.operator_gate();
    let order = if sort == Sort::Oldest {
        Order::Oldest
    } else {
        Order::Newest
    };
    let (total, items) = match sort {
        // The console's usual question: one page of the whole book in creation order. The
        // receipts are stored in that order, so the page is read directly (at most
        // MAX_LIST_LIMIT receipts under the lock) instead of scanning the book.
        Sort::Newest | Sort::Oldest if filter.is_empty() => {
            let st = host.lock();
            let rows = st.book.iter();
            let total = rows.len();
            let row = |(k, r): (&RequestKey, &Receipt)| item(k, r, clear_refusal(&st.tasks, k, r));
            let items: Vec<ReceiptItem> = if sort == Sort::Newest {
                rows.rev().skip(offset).take(limit).map(row).collect()
            } else {
                rows.skip(offset).take(limit).map(row).collect()
            };
            (total, items)
        }
        Sort::Newest | Sort::Oldest => {
            let mut total = 0;
            let mut items = Vec::new();
            host.scan_receipts(order, &mut |st, k, r| {
                let why = clear_refusal(&st.tasks, k, r);
                if !receipt_matches(&filter, k, r, why) {
                    return;
                }
                if total >= offset && items.len() < limit {
                    items.push(item(k, r, why));
                }
                total += 1;
            });
            (total, items)
        }
        Sort::State | Sort::Method | Sort::Task => {
            // Newest first within each group: the matching positions and their group, gathered
            // in slices; a stable sort of them outside the lock; then the page, read by
            // position (the gate keeps positions still).
            #[derive(PartialEq, Eq, PartialOrd, Ord)]
            enum Group {
                State(bool),
                Method(&'static str),
                Task(Option<std::cmp::Reverse<()>>, Option<crate::tasks::TaskId>),
            }
            let used = host.lock().book.used();
            // Room taken before the scan: a list growing inside a slice would copy itself
            // under the lock.
            let mut rows: Vec<(Group, usize)> = Vec::with_capacity(used);
            let mut newest_first = 0usize;
            host.scan_receipts(Order::Newest, &mut |st, k, r| {
                let position = used - 1 - newest_first;
                newest_first += 1;
                if !receipt_matches(&filter, k, r, clear_refusal(&st.tasks, k, r)) {
                    return;
                }
                let group = match sort {
                    Sort::State => Group::State(!r.is_running()),
                    Sort::Method => Group::Method(r.method.as_str()),
                    // Receipts with a task first, by task; then those without.
                    _ => Group::Task(
                        r.task_id.is_none().then_some(std::cmp::Reverse(())),
                        r.task_id.clone(),
                    ),
                };
                rows.push((group, position));
            });
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            if reverse {
                rows.reverse();
            }
            let total = rows.len();
            let st = host.lock();
            let items = rows
                .iter()
                .skip(offset)
                .take(limit)
                .filter_map(|(_, i)| st.book.get_index(*i))
                .map(|(k, r)| item(k, r, clear_refusal(&st.tasks, k, r)))
                .collect();
            (total, items)
        }
    };
    Ok(ReceiptsListResult {
        items,
        total: total as u64,
    })
}

/// `receipts.get`: one receipt with its canonical request and stored reply.
pub fn get(host: &Host, request_id: &str) -> Result<ReceiptDetail, ErrorBody> {
    if host.ledger().is_some() {
        return fleet_get(host, request_id);
    }
    Ok(local_get(host, request_id))
}

fn local_get(host: &Host, request_id: &str) -> ReceiptDetail {
    let key = RequestKey::new(request_id);
    let st = host.lock();
    if let Some(r) = st.book.get(&key) {
        let row = item(&key, r, clear_refusal(&st.tasks, &key, r));
        let request = r.request_text();
        let outcome = r.outcome();
        drop(st);
        return ReceiptDetail {
            clearable: Some(row.clearable),
            code: row.code,
            completed_at: row.completed_at,
            first_seen_at: Some(row.first_seen_at),
            joins: Some(row.joins),
            method: Some(row.method),
            ok: row.ok,
            refusal: row.refusal,
            replays: Some(row.replays),
            reply: outcome.as_deref().map(StoredReply::of),
            request: serde_json::from_str::<CanonicalRequest>(&request).ok(),
            request_id: row.request_id,
            state: row.state,
            task_id: row.task_id,
            ..ReceiptDetail::default()
        };
    }
    if let Some((_, batch)) = st.book.tombstone(&key) {
        return ReceiptDetail {
            cleared_at: Some(format_millis(batch.at)),
            reason: Some(batch.reason.to_string()),
            request_id: request_id.to_owned(),
            state: ReceiptState::Cleared,
            ..ReceiptDetail::default()
        };
    }
    ReceiptDetail {
        request_id: request_id.to_owned(),
        state: ReceiptState::Unknown,
        ..ReceiptDetail::default()
    }
}

fn newest_first(tasks: &Tasks) -> Vec<&Task> {
    let mut all: Vec<&Task> = tasks.iter().collect();
    all.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    all
}

/// `tasks.list`: the tasks, newest first.
pub fn tasks_list(host: &Host, p: TasksListParams) -> TasksListResult {
    let st = host.lock();
    let tasks = newest_first(&st.tasks)
        .into_iter()
        .filter(|t| p.state.is_none_or(|s| t.state() == s))
        .map(Task::summary)
        .collect();
    TasksListResult { tasks }
}

/// `snapshot`: everything the console's first screen needs, read under one taking of the lock.
pub fn snapshot(host: &Host) -> Snapshot {
    let executor = ExecutorStatus {
        kind: host.executor().kind().to_owned(),
        mutations: host.executor().mutations(),
    };
    let journal = host.journal_status();
    let ledger = host.ledger_status();
    let st = host.lock();
    let tasks = newest_first(&st.tasks);
    // The unsettled outcomes, the one list `run.status` counts (`receipts.unsettled`).
    let pending = st
        .unsettled()
        .iter()
        .map(|u| BlockedOutcome {
            pending: match u.pending {
                Some(p) => p.to_wire(),
                // An `INTERRUPTED` receipt recovered from the journal: the action never
                // answered, so no evidence was kept for it.
                None => PendingOutcome {
                    evidence: None,
                    expect: None,
                    last_verify: None,
                    method: u.receipt.method.as_str().to_owned(),
                    params: serde_json::from_str::<serde_json::Value>(&u.receipt.request_text())
                        .map(|v| v["params"].clone())
                        .unwrap_or_default(),
                    request_id: u.key.to_string(),
                    since: format_millis(u.receipt.completed_at),
                },
            },
            code: u.code().map_or("", |c| c.as_str()).to_owned(),
            task_id: u.task.map_or_else(
                || u.receipt.task_id.as_deref().unwrap_or("").to_owned(),
                |t| t.id.to_string(),
            ),
            task_state: u.task.map(|t| t.state()),
            title: u.task.map(|t| t.title.clone()).unwrap_or_default(),
        })
        .chain(st.fleet_unsettled().into_iter().map(|f| {
            // Another host run's receipt, interrupted when that run died or left: its task
            // is that run's, which this host does not hold.
            let task = f.task_id.as_deref().and_then(|t| st.tasks.get(t));
            BlockedOutcome {
                pending: PendingOutcome {
                    evidence: None,
                    expect: None,
                    last_verify: None,
                    method: f.method.clone(),
                    params: serde_json::from_str::<serde_json::Value>(&f.request)
                        .map(|v| v["params"].clone())
                        .unwrap_or_default(),
                    request_id: f.request_id.clone(),
                    since: format_millis(f.since),
                },
                code: "INTERRUPTED".to_owned(),
                task_id: f.task_id.clone().unwrap_or_default(),
                task_state: task.map(|t| t.state()),
                title: task.map(|t| t.title.clone()).unwrap_or_default(),
            }
        }))
        .collect();
    Snapshot {
        journal,
        ledger,
        counters: st.counters,
        executor,
        pending,
        receipts: st.receipt_counts(),
        run_id: host.run_id().to_owned(),
        seq: st.events.seq(),
        started_at: format_millis(host.started_at()),
        tasks: tasks.iter().map(|t| t.summary()).collect(),
    }
}

/// The `changed` frame of a coalesced subscription: the counters and receipt counts now, and
/// the events published since `sent_seq`, the last one a frame covered.
pub fn changed_since(host: &Host, sent_seq: u64) -> ChangedEvent {
    let st = host.lock();
    ChangedEvent {
        counters: st.counters,
        from_seq: sent_seq + 1,
        receipts: st.receipt_counts(),
        to_seq: st.events.seq(),
    }
}

/// Where the live feed is: the last event's sequence number, and the counter of events
/// published that a coalesced subscription polls.
pub fn feed_position(host: &Host) -> (u64, Arc<AtomicU64>) {
    let st = host.lock();
    (st.events.seq(), st.events.published())
}
