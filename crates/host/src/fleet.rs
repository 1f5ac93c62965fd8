//! The host's side of the fleet ledger (SPEC §13): claiming a new receipt in PostgreSQL before
//! the executor acts, settling a copy from the row another host wrote, storing a completion
//! there before any copy is answered, and the refusals only a fleet gives.
//!
//! The local book stays the hot path: a copy of a request this host has already seen is
//! answered from memory (replayed or joined) without a round trip. A request ID new to this
//! host is admitted locally as usual — so local copies join it — and then claimed in the
//! ledger; only when the claim is this host's does the executor act. When the ledger already
//! held the ID, the row decides, and the local receipt either caches the row's reply or is
//! withdrawn (the ID was another content's, cleared, or the claim could not be made).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::execution::{publish_completed, Execution, Mutation, Stored};
use super::to_data;
use super::unsettled::FleetInterrupted;
use super::{reject, Handled, Host, HostConfig};
use crate::executor::Executor;
use crate::ledger::{
    Claim, Claimed, Completed, Interrupted, Ledger, LedgerError, LedgerReceipt, RowState,
};
use crate::protocol::introspection::RequestRejectedEvent;
use crate::protocol::results::{
    FleetHost, FleetReceiptCounts, LedgerStatus, ReceiptState, ReceiptStatusResult, StoredReply,
};
use crate::protocol::{
    format_millis, now_millis, Delivery, ErrorBody, ErrorCode, Method, Outcome, ReceiptKind,
};
use crate::tasks::TaskId;

/// The fleet as the ledger last showed it (counts and hosts), for `run.status` and the
/// console; read every [`COUNTS_EVERY`] off the request path.
pub(super) type FleetView = std::sync::Mutex<(Option<FleetReceiptCounts>, Vec<FleetHost>)>;

/// Request IDs whose claim this host is taking back (an attempt refused after its claim may
/// have been committed). A new attempt under such an ID waits for the withdrawal: the ledger
/// withdraws by ID and epoch, so a late withdrawal would delete the new attempt's claim while
/// its action runs, and another host could then run the ID again.
pub(super) type Withdrawing = std::sync::Mutex<std::collections::HashSet<String>>;

/// How often a fleet host reads the fleet's counts.
const COUNTS_EVERY: Duration = Duration::from_secs(1);

/// The most unacknowledged `INTERRUPTED` receipts of the fleet a host lists among its
/// unsettled outcomes (the ledger's oldest first).
const INTERRUPTED_MOST: usize = 1000;

/// The margin SPEC §13 asks of a lease beyond the action deadline before an action starts.
const LEASE_MARGIN: Duration = Duration::from_secs(1);

/// The stored `INTERRUPTED` reply body of a running receipt whose host died, as every host of
/// the fleet writes it (the ledger stores what this builds).
pub fn interrupted_reply() -> Arc<dyn Fn(&Interrupted<'_>) -> String + Send + Sync> {
    Arc::new(|r: &Interrupted<'_>| {
        let method: Method = r.method.parse().unwrap_or(Method::PageClick);
        super::journaling::interrupted_outcome(r.request_id, method, r.task_id, r.run_id)
            .body
            .to_owned()
    })
}

impl Host {
    /// A host of a fleet: run `run_id` (the one the ledger registered), its receipts claimed in
    /// `ledger`, whose stored capacities replace the configured ones.
    pub fn with_ledger(
        run_id: String,
        mut config: HostConfig,
        executor: Arc<dyn Executor>,
        ledger: Ledger,
    ) -> Host {
        config.capacity = ledger.capacity();
        config.tombstone_capacity = ledger.tombstone_capacity();
        let host = Host::build_run(run_id, config, executor, None, Some(ledger.clone()));
        // Clears and acknowledgements made on any host reach the copies held here.
        host.start_fleet_feed();
        // A host that lost its lease can no longer act for the fleet: it stops, as a host
        // whose journal failed does.
        let mut lost = ledger.lost();
        let watcher = host.clone();
        tokio::spawn(async move {
            if let Ok(why) = lost.wait_for(Option::is_some).await {
                let why = why.clone().unwrap_or_default();
                watcher.fail(format!("the fleet ledger: {why}"));
            }
        });
        // The fleet's counts, read every second while the host runs (a weak handle: the
        // reader ends with the host).
        let weak = Arc::downgrade(&host.inner);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(COUNTS_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let host = Host { inner };
                if host.is_shutting_down() {
                    return;
                }
                let Some(ledger) = host.ledger().cloned() else {
                    return;
                };
                drop(host);
                let counts = ledger.counts().await;
                let hosts = ledger.hosts().await;
                let interrupted = ledger.interrupted_unacknowledged(INTERRUPTED_MOST).await;
                let Some(inner) = weak.upgrade() else { return };
                if let Ok(rows) = interrupted {
                    let rows = rows.into_iter().map(FleetInterrupted::from).collect();
                    Host {
                        inner: inner.clone(),
                    }
                    .lock()
                    .fleet_interrupted = rows;
                }
                let mut view = inner.fleet_counts.lock().unwrap_or_else(|p| p.into_inner());
                if let Ok(c) = counts {
                    view.0 = Some(FleetReceiptCounts {
                        capacity: c.capacity,
                        running: c.running,
                        tombstone_capacity: c.tombstone_capacity,
                        tombstones: c.tombstones,
                        used: c.used,
                        read_at: format_millis(now_millis()),
                    });
                }
                if let Ok(hosts) = hosts {
                    view.1 = hosts
                        .into_iter()
                        .map(|h| FleetHost {
                            epoch: h.epoch,
                            host_id: h.host_id,
                            lease_left_ms: h.lease_left_ms,
                            running: h.running,
                            run_id: h.run_id,
                            state: h.state,
                            blocked: h.blocked,
                        })
                        .collect();
                }
            }
        });
        host
    }

    /// The fleet ledger, when the host runs with `--ledger`.
    pub fn ledger(&self) -> Option<&Ledger> {
        self.inner.ledger.as_ref()
    }

    /// `run.status.ledger`: this host's place in the fleet.
    pub fn ledger_status(&self) -> Option<LedgerStatus> {
        let ledger = self.ledger()?;
        let view = self
            .inner
            .fleet_counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Some(LedgerStatus {
            epoch: ledger.epoch(),
            host_id: ledger.host_id().to_owned(),
            lease_left_ms: ledger.lease_left().as_millis() as u64,
            receipts: view.0.clone(),
            hosts: view.1.clone(),
        })
    }

    /// `LEDGER_UNAVAILABLE` when this host's lease is too short to start an action (SPEC §13:
    /// less than the action deadline plus one second left).
    pub(super) fn lease_refusal(&self, id: &str, method: Method) -> Option<ErrorBody> {
        let ledger = self.ledger()?;
        let left = ledger.lease_left();
        let needed = self.inner.config.action_timeout + LEASE_MARGIN;
        (left < needed).then(|| {
            unavailable_error(
                id,
                method,
                &format!(
                    "this host's lease has {} ms left, less than the action deadline plus one second ({} ms)",
                    left.as_millis(),
                    needed.as_millis()
                ),
            )
        })
    }

    /// Claims an admitted receipt in the ledger. `Ok` when the claim is this host's and the
    /// executor may act; otherwise the request is settled without executing (from the row
    /// another host wrote, or refused) and this is its reply line.
    pub(super) async fn claim_in_ledger(
        &self,
        execution: &Execution<'_, impl Mutation>,
    ) -> Result<(), Vec<u8>> {
        let ledger = self
            .ledger()
            .expect("claims are made with a ledger")
            .clone();
        let id = &*execution.request_id;
        let method = execution.command.method();
        let request = {
            let st = self.lock();
            match st.book.get(&execution.key) {
                Some(r) => r.request_text(),
                None => return Err(self.vanished(id)),
            }
        };
        let claim = Claim {
            request_id: id.to_owned(),
            request: request.clone(),
            method: method.as_str(),
            task_id: execution.task_id.as_deref().map(str::to_owned),
            at: execution.admitted_at,
        };
        if self.withdrawing().contains(id) {
            let error = unavailable_error(
                id,
                method,
                "this host is still taking back an earlier attempt's claim of this id",
            );
            return Err(self.refuse_claimed(execution, error));
        }
        match ledger.claim(claim).await {
            Ok(Claimed::New) => {
                // The claim took time: the lease must still cover the whole action.
                if ledger.lease_left() < self.inner.config.action_timeout {
                    self.withdraw_claim(id);
                    let error = unavailable_error(
                        id,
                        method,
                        "this host's lease ran short while the claim was being committed",
                    );
                    return Err(self.refuse_claimed(execution, error));
                }
                Ok(())
            }
            Ok(Claimed::Full { used, capacity }) => {
                let error = ErrorBody::new(
                    ErrorCode::ReceiptCapacityFull,
                    format!(
                        "the fleet's receipt book is full ({used} of {capacity} receipts); {method} was not executed. An operator must clear completed receipts (polaris clear) — then send this request again under the same id"
                    ),
                )
                .with_details(json!({"limit": "count", "capacity": capacity, "used": used}));
                Err(self.refuse_claimed(execution, error))
            }
            Ok(Claimed::Existing(row)) => {
                Err(self.settle_from_row(execution, &request, *row).await)
            }
            Err(e) => {
                // The commit's fate may be unknown: take the claim back if it was made.
                self.withdraw_claim(id);
                let error = unavailable_error(id, method, &e.to_string());
                Err(self.refuse_claimed(execution, error))
            }
        }
    }

    /// Answers a request whose ID the ledger held already, from its row: another content's
    /// ID is refused, a cleared one too, a completed one is replayed (and cached here), a
    /// running one is waited for.
    async fn settle_from_row(
        &self,
        execution: &Execution<'_, impl Mutation>,
        request: &str,
        mut row: LedgerReceipt,
    ) -> Vec<u8> {
        let id = &*execution.request_id;
        let method = execution.command.method();
        let mut kind = ReceiptKind::Replayed;
        loop {
            if row.request != request {
                let stored = row.method.parse().unwrap_or(method);
                let error = super::admission::reused_error(id, stored, row.first_seen);
                return self.refuse_claimed(execution, error);
            }
            match row.state {
                RowState::Cleared => {
                    let error = super::admission::cleared_error(
                        id,
                        row.cleared_at.unwrap_or_default(),
                        row.clear_reason.as_deref().unwrap_or(""),
                        true,
                    );
                    return self.refuse_claimed(execution, error);
                }
                RowState::Completed => {
                    let body = row.reply.clone().unwrap_or_default();
                    let outcome = Outcome::of(super::journaling::code_of(&body), &body);
                    if let Some(error) = self.cache_from_row(execution, outcome.clone()) {
                        return self.refuse_claimed(execution, error);
                    }
                    return outcome.reply_line(Some(id), self.run_id(), kind);
                }
                RowState::Running => {
                    // Another host runs it (or ran it and died): wait until its row is
                    // decided — completed by that host, or INTERRUPTED once its lease lapsed.
                    kind = ReceiptKind::Joined;
                    let ledger = self.ledger().expect("a ledger").clone();
                    let wait = self.inner.config.action_timeout + LEASE_MARGIN;
                    match ledger.wait_decided(id, Instant::now() + wait).await {
                        Ok(Some(next)) => row = next,
                        Ok(None) => {}
                        Err(e) => {
                            let error = unavailable_error(id, method, &e.to_string());
                            return self.refuse_claimed(execution, error);
                        }
                    }
                    if row.state == RowState::Running {
                        // Still running: read it again (a row that vanished was withdrawn,
                        // and then nothing ran: say so rather than run it here unasked).
                        match ledger.receipt(id).await {
                            Ok(Some(next)) => row = next,
                            Ok(None) => {
                                let error = unavailable_error(
                                    id,
                                    method,
                                    "the host that claimed this id withdrew its claim without executing it",
                                );
                                return self.refuse_claimed(execution, error);
                            }
                            Err(e) => {
                                let error = unavailable_error(id, method, &e.to_string());
                                return self.refuse_claimed(execution, error);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Stores a reply the ledger already held under the local receipt, so later copies here
    /// replay it from memory, and wakes the copies that joined locally. When a fleet clear of
    /// this ID reached this host while the row was being read (its tombstone is here already),
    /// nothing is cached and the `RECEIPT_CLEARED` refusal to answer with is handed back.
    fn cache_from_row(
        &self,
        execution: &Execution<'_, impl Mutation>,
        outcome: Arc<Outcome>,
    ) -> Option<ErrorBody> {
        let now = now_millis();
        let method = execution.command.method();
        let waiters = {
            let mut st = self.lock();
            if let Some((_, batch)) = st.book.tombstone(&execution.key) {
                return Some(super::admission::cleared_error(
                    &execution.request_id,
                    batch.at,
                    &batch.reason,
                    true,
                ));
            }
            let waiters = st
                .book
                .finish_at(execution.slot, &execution.key, outcome.clone(), now)
                .ok()
                .flatten();
            // Counted as an execution at admission; it was a copy of another host's.
            st.counters.executions = st.counters.executions.saturating_sub(1);
            st.counters.replays += 1;
            publish_completed(&mut st, &execution.request_id, method, &outcome, now);
            waiters
        };
        if let Some(w) = waiters {
            w.send_replace(Some(outcome));
        }
        None
    }

    /// Withdraws the local receipt of a request the fleet did not let this host execute, and
    /// answers it (and every copy that joined it here) with `error`. Nothing is stored: the
    /// ID is free again on this host.
    fn refuse_claimed(
        &self,
        execution: &Execution<'_, impl Mutation>,
        error: ErrorBody,
    ) -> Vec<u8> {
        let id = &*execution.request_id;
        let method = execution.command.method();
        let now = now_millis();
        let code = error.code;
        let outcome = Outcome::err(&error);
        let (waiters, idle) = {
            let mut st = self.lock();
            let waiters = st.book.withdraw(&execution.key);
            st.counters.executions = st.counters.executions.saturating_sub(1);
            if let Some(tid) = &execution.task_id {
                st.tasks.receipt_cleared(tid);
            }
            st.events.publish("request.rejected", now, || {
                to_data(&RequestRejectedEvent {
                    code,
                    method: method.as_str().to_owned(),
                    request_id: id.to_owned(),
                    task_id: execution.task_id.as_deref().map(str::to_owned),
                })
            });
            (waiters, st.book.running() == 0)
        };
        if let Some(w) = waiters {
            w.send_replace(Some(outcome.clone()));
        }
        self.ring_idle(idle);
        outcome.reply_line(Some(id), self.run_id(), ReceiptKind::None)
    }

    fn withdrawing(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.inner
            .withdrawing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes back this host's claim of `id` (its action never started), retrying in the
    /// background until the ledger answers: a claim left behind would be reported
    /// `INTERRUPTED` when this host stops, though nothing ran.
    fn withdraw_claim(&self, id: &str) {
        let Some(ledger) = self.ledger().cloned() else {
            return;
        };
        let id = id.to_owned();
        // Registered before the refusal is answered, so a re-sent attempt sees it.
        self.withdrawing().insert(id.clone());
        let host = self.clone();
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(50);
            loop {
                match ledger.withdraw(&id).await {
                    Ok(()) | Err(LedgerError::Fenced(_)) => {
                        host.withdrawing().remove(&id);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(request_id = %id, "withdrawing a claim: {e}; trying again");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(2));
                    }
                }
            }
        });
    }

    /// Stores an executed receipt's reply in the ledger (fenced by this host's epoch), then
    /// wakes the copies that joined and hands back the reply every copy gets. An unreachable
    /// ledger is retried: no copy is answered before the fleet holds the reply.
    pub(super) async fn store_in_ledger(
        &self,
        execution: &Execution<'_, impl Mutation>,
        stored: Stored,
        opened: Option<TaskId>,
    ) -> Arc<Outcome> {
        let ledger = self.ledger().expect("a ledger").clone();
        let id = &*execution.request_id;
        let body = stored.outcome().body.to_string();
        let mut pause = Duration::from_millis(20);
        loop {
            match ledger
                .complete(id, &body, opened.as_deref(), now_millis())
                .await
            {
                Ok(Completed::Stored) => return stored.wake(),
                Ok(Completed::Fenced(row)) => {
                    // Another host declared this receipt INTERRUPTED while this one's lease
                    // had lapsed: the fleet's answer is the row's.
                    let reply = row.reply.unwrap_or_default();
                    let outcome = Outcome::of(super::journaling::code_of(&reply), &reply);
                    if let Some(r) = self.lock().book.get_mut(&execution.key) {
                        r.reply = crate::book::ReplySlot::Done(outcome.clone());
                    }
                    return stored.wake_with(outcome);
                }
                Err(LedgerError::Unavailable(why)) if !self.has_failed() => {
                    tracing::warn!(request_id = %id, "storing a reply in the fleet ledger: {why}; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    let outcome = Outcome::err(
                        &ErrorBody::new(
                            ErrorCode::Internal,
                            format!(
                                "request {id} was executed but the fleet ledger could not record its reply ({e}); its effect is uncertain. Do not resend it: read receipt.status for {id} on any host of the fleet"
                            ),
                        )
                        .with_details(json!({"requestId": id})),
                    );
                    return stored.wake_with(outcome);
                }
            }
        }
    }

    /// `TASK_NOT_FOUND` for a task this host does not have, naming the host of the fleet
    /// that opened it (`details.hostId`) when one did: tasks stay with their host.
    pub(super) fn unknown_task_in_fleet(
        &self,
        id: &str,
        request: Option<&str>,
        task_id: &str,
        method: Method,
    ) -> Handled {
        let host = self.clone();
        let id = id.to_owned();
        let task_id = task_id.to_owned();
        let request = request.map(str::to_owned);
        Handled::Later(Box::pin(async move {
            let ledger = host.ledger().expect("a ledger").clone();
            // The receipt rules come before task admission (SPEC §3): a mutation whose ID the
            // fleet holds is answered from its row, even when its task lives on another host.
            if let Some(request) = &request {
                if let Some(line) = host.answer_from_row(&ledger, &id, request, method).await {
                    return line;
                }
            }
            let here = ledger.host_id().to_owned();
            let error = match ledger.task_host(&task_id).await {
                Ok(Some(owner)) if owner != here => ErrorBody::new(
                    ErrorCode::TaskNotFound,
                    format!(
                        "task {task_id} lives on host {owner}, not on this host ({here}); {method} was not sent. A page stays on the machine that opened it: send requests for this task to {owner}"
                    ),
                )
                .with_details(json!({"taskId": task_id, "hostId": owner, "runId": host.run_id()})),
                Ok(Some(owner)) => ErrorBody::new(
                    ErrorCode::TaskNotFound,
                    format!(
                        "task {task_id} was opened by an earlier run of this host ({here}), which stopped: its page is gone and {method} was not sent. Start a new task (task.start); receipt.status tells what each earlier request did"
                    ),
                )
                .with_details(json!({"taskId": task_id, "hostId": owner, "runId": host.run_id()})),
                _ => ErrorBody::new(
                    ErrorCode::TaskNotFound,
                    format!(
                        "no task {task_id} on this host ({here}) or, as far as the fleet ledger knows, on any other; {method} was not sent. Check the taskId you kept from task.start"
                    ),
                )
                .with_details(json!({"taskId": task_id, "runId": host.run_id()})),
            };
            match reject(Some(&id), host.run_id(), error) {
                Handled::Ready(line) => line,
                Handled::Replay(replay) => replay.line(host.run_id()),
                Handled::Later(f) => f.await,
                Handled::Joined(_) => Vec::new(),
            }
        }))
    }

    /// The answer for a copy whose ID the fleet's ledger holds, read from its row without
    /// keeping a copy here (its task lives elsewhere): replayed (counted on the row, so a clear
    /// prepared before it goes stale), joined once the row is decided, reused or cleared.
    /// `None` when the ledger does not hold the ID, or cannot be read before anything about
    /// the ID is known (the caller's refusal stands).
    ///
    /// A row that stays `running` is waited on until it is decided — completed by the host
    /// that claimed it, or `INTERRUPTED` once that host's lease lapsed if it died — exactly as
    /// a copy on the task's own host waits: the ID ran, so this copy is never answered as if
    /// nothing had (`TASK_NOT_FOUND`, `not_executed`).
    async fn answer_from_row(
        &self,
        ledger: &Ledger,
        id: &str,
        request: &str,
        method: Method,
    ) -> Option<Vec<u8>> {
        let mut row = ledger.receipt(id).await.ok()??;
        let mut kind = ReceiptKind::Replayed;
        while row.state == RowState::Running && row.request == request {
            kind = ReceiptKind::Joined;
            let wait = self.inner.config.action_timeout + LEASE_MARGIN;
            match ledger.wait_decided(id, Instant::now() + wait).await {
                Ok(Some(next)) => row = next,
                // A claim withdrawn before anything ran: the caller's refusal stands.
                Ok(None) if ledger.receipt(id).await.is_ok_and(|r| r.is_none()) => return None,
                Ok(None) => {}
                Err(e) => return Some(self.running_elsewhere(id, &row, &e.to_string())),
            }
        }
        let error = if row.request != request {
            let stored = row.method.parse().unwrap_or(method);
            super::admission::reused_error(id, stored, row.first_seen)
        } else {
            match row.state {
                RowState::Running => return None,
                RowState::Cleared => super::admission::cleared_error(
                    id,
                    row.cleared_at.unwrap_or_default(),
                    row.clear_reason.as_deref().unwrap_or(""),
                    true,
                ),
                RowState::Completed => {
                    if ledger.count_replay(id).await.is_err() {
                        return None;
                    }
                    let body = row.reply.unwrap_or_default();
                    let outcome = Outcome::of(super::journaling::code_of(&body), &body);
                    return Some(outcome.reply_line(Some(id), self.run_id(), kind));
                }
            }
        };
        Some(Outcome::err(&error).reply_line(Some(id), self.run_id(), ReceiptKind::None))
    }

    /// The answer for a copy of an ID another host claimed and, as far as the fleet ledger
    /// last said, still runs, when the ledger can no longer be read: its effect is uncertain
    /// (it may have run there), never `not_executed`.
    fn running_elsewhere(&self, id: &str, row: &LedgerReceipt, why: &str) -> Vec<u8> {
        let error = ErrorBody::new(
            ErrorCode::LedgerUnavailable,
            format!(
                "request {id} was claimed by host {} and was still running there when the fleet ledger stopped answering ({why}); whether it took effect is unknown. Do not resend it: read receipt.status for {id} on any host once the ledger is reachable (INTERRUPTED once that host's lease lapses, if it died)",
                row.host_id
            ),
        )
        .with_delivery(Delivery::Uncertain)
        .with_details(json!({"requestId": id, "hostId": row.host_id, "runId": row.run_id, "state": "running"}));
        Outcome::err(&error).reply_line(Some(id), self.run_id(), ReceiptKind::None)
    }

    /// `receipt.status` for an ID this host's book does not hold, read from the fleet ledger
    /// (`unknown` there too, or when the ledger cannot be reached — said in `reason`).
    pub(super) fn receipt_status_in_fleet(
        &self,
        id: &str,
        mut status: ReceiptStatusResult,
    ) -> Handled {
        let host = self.clone();
        let id = id.to_owned();
        Handled::Later(Box::pin(async move {
            let ledger = host.ledger().expect("a ledger").clone();
            match ledger.receipt(&status.request_id).await {
                Ok(Some(row)) => {
                    status.method = Some(row.method.clone());
                    status.run_id = Some(row.run_id.clone());
                    status.first_seen_at = Some(format_millis(row.first_seen));
                    status.task_id = row.task_id.clone();
                    status.joins = Some(0);
                    status.replays = Some(0);
                    match row.state {
                        RowState::Running => status.state = ReceiptState::Running,
                        RowState::Completed => {
                            status.state = ReceiptState::Completed;
                            status.completed_at = row.completed_at.map(format_millis);
                            let body = row.reply.unwrap_or_default();
                            let outcome = Outcome::of(super::journaling::code_of(&body), &body);
                            status.ok = Some(outcome.is_ok());
                            status.reply = Some(StoredReply::of(&outcome));
                        }
                        RowState::Cleared => {
                            status.state = ReceiptState::Cleared;
                            status.cleared_at = row.cleared_at.map(format_millis);
                            status.reason = row.clear_reason;
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    let error = ErrorBody::new(
                        ErrorCode::LedgerUnavailable,
                        format!("request {} is not in this host's book and the fleet ledger could not be read ({e}); read receipt.status again once it is reachable", status.request_id),
                    )
                    .with_delivery(Delivery::NotExecuted)
                    .with_details(json!({"requestId": status.request_id}));
                    return Outcome::err(&error).reply_line(
                        Some(&id),
                        host.run_id(),
                        ReceiptKind::None,
                    );
                }
            }
            Outcome::ok(&status).reply_line(Some(&id), host.run_id(), ReceiptKind::None)
        }))
    }

    /// Whether `task_id` is unknown to this host (neither open nor closed here).
    pub(super) fn task_unknown_here(&self, task_id: &str) -> bool {
        let st = self.lock();
        st.tasks.get(task_id).is_none() && st.tasks.closed(task_id).is_none()
    }
}

/// `LEDGER_UNAVAILABLE` (`not_executed`): the fleet ledger could not be used to claim `id`.
fn unavailable_error(id: &str, method: Method, why: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::LedgerUnavailable,
        format!(
            "{method} (request {id}) was not executed: {why}. Send it again under the same id once the fleet ledger is reachable (run.status shows the lease), to this host or another"
        ),
    )
    .with_delivery(Delivery::NotExecuted)
    .with_details(json!({"requestId": id, "reason": why, "at": format_millis(now_millis())}))
}
