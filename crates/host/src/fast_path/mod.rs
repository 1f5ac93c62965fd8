//! The host's fast path: what it does beyond the reference path, and where.
//!
//! The reference path is [`Host::handle`]: one request, its params parsed into an owned
//! command, admitted alone under the host's lock, its execution started and polled once in
//! place ([`Host::launch`]). Everything here gives the same replies and leaves the same
//! journal, only cheaper (the oracle in `tests.rs` checks it):
//! - the borrowed fill ([`Work::Fill`]): a `page.fill` whose strings stay the frame's until
//!   its execution outlives the frame;
//! - the fill done at once ([`Host::fill_at_once`]) inside the critical section that admitted
//!   it, with no future and no deadline;
//! - the pipelined batch ([`Host::handle_batch`]): consecutive actions admitted under one
//!   taking of the lock, their receipts written ahead of it, fills done at once stored there,
//!   the other executions run where admission left them ([`Host::run_inline`]) and stored
//!   under one more taking, and only those the executor cannot answer at once moved out and
//!   spawned ([`Host::defer`]); with a journal, the batch's begins awaited together
//!   ([`Host::run_begun_batch`]).
//!
//! `HostConfig::fast_path` switches it off: every frame then takes the reference path.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::Context;

use super::admission::{Admitted, Begin};
use super::execution::{
    completed, panicked, Completion, Deferred, Execution, Finished, Launched, TaskEffect,
};
use super::{Handled, Host, Replay, State};
use crate::book::{ReplyWaiters, RequestKey};
use crate::protocol::results::FieldResult;
use crate::protocol::{now_millis, DirectRequest, FrameCommand, Outcome, PlainFill, ReceiptKind};

mod work;
pub(crate) use work::Work;

/// One request of a batch as admitted: its ID, and its admission or its answer.
type BatchSlot<'a> = (&'a str, Result<Admitted<'a>, Handled>);

impl Host {
    /// Whether the fast path is on (`HostConfig::fast_path`).
    pub(super) fn fast_path(&self) -> bool {
        self.inner.config.fast_path
    }

    /// Starts an admitted execution: answered inline when the executor answers without
    /// waiting (the caller stores the completion), otherwise spawned and answered later.
    pub(super) fn launch<'a>(&self, mut execution: Execution<'a>) -> Launched<'a> {
        match self.run_inline(&mut execution) {
            Ok(completion) => Launched::Inline(execution, completion),
            Err(deferred) => Launched::Later(self.defer(execution, deferred)),
        }
    }

    /// [`Host::launch`] without moving the execution: the executor's work is started and polled
    /// once right here, and the completion comes back when it answered without waiting (the
    /// fixture's fills, a task's opening), with no task spawned and nothing else allocated. A
    /// pipelined batch runs its executions where admission left them this way. `Err` says
    /// what [`Host::defer`] must do with the execution instead.
    pub(super) fn run_inline(&self, execution: &mut Execution<'_>) -> Result<Completion, Deferred> {
        if execution.claim {
            // In a fleet the executor may act only once the ledger holds this host's claim.
            return Err(Deferred::Claim);
        }
        if let Some(begun) = execution.begun.take() {
            // With a journal the executor may act only once the receipt is durable.
            return Err(Deferred::AfterBegin(begun));
        }
        if !execution.turn_now {
            // Another request of the task is still in flight: this one waits for it.
            return Err(Deferred::AwaitTurn);
        }
        if let Some(filled) = self.fill_at_once(execution, None) {
            return Ok(filled);
        }
        let execution = &*execution;
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let first = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut started = self.start(execution);
            match started.poll_once(&mut cx) {
                Some(finished) => Ok(finished),
                None => Err(started),
            }
        }));
        let (outcome, effect) = match first {
            Ok(Ok(finished)) => self.interpret(execution, finished),
            Err(panic) => panicked(execution, panic),
            Ok(Err(started)) => return Err(Deferred::Started(started)),
        };
        Ok(completed(execution, outcome, effect))
    }

    /// A fill the executor does at once ([`Executor::fill_now`]), done right here with its
    /// completion — `None` for anything else, and for an execution that must wait for its
    /// claim or its begin. Cheap and never waiting, so a batch does it inside the critical
    /// section that admitted it. `written` is the reply (`FieldResult::filled`) written for this
    /// same request before the lock was taken, if it was: a fill that takes effect answers with
    /// it instead of writing its reply now.
    pub(super) fn fill_at_once(
        &self,
        execution: &Execution<'_>,
        written: Option<Arc<Outcome>>,
    ) -> Option<Completion> {
        if !self.fast_path() {
            return None;
        }
        if execution.claim || execution.begun.is_some() || !execution.turn_now {
            return None;
        }
        let (outcome, effect) = match std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.fill_now(execution, written)
        })) {
            Ok(None) => return None,
            // A fill done at once wrote its reply already and changes nothing on the task.
            Ok(Some(Finished::Filled(outcome))) => (outcome, TaskEffect::None),
            Ok(Some(finished)) => self.interpret(execution, finished),
            Err(panic) => panicked(execution, panic),
        };
        // The only success a fill done at once answers with is `FieldResult::filled`.
        let fill_took_effect = outcome.is_ok();
        Some(completed(execution, outcome, effect).filled(fill_took_effect))
    }

    /// Runs an execution [`Host::run_inline`] could not complete on its own task, owning
    /// everything it needs, so it keeps running whatever happens to the caller's connection;
    /// the answer is the reply that waits for it.
    pub(super) fn defer(&self, execution: Execution<'_>, deferred: Deferred) -> Handled {
        match deferred {
            Deferred::Claim => self.spawn_claimed(execution.into_owned()),
            Deferred::AfterBegin(begun) => self.spawn_after(execution.into_owned(), Some(begun)),
            Deferred::AwaitTurn => self.spawn_after(execution.into_owned(), None),
            Deferred::Started(started) => self.spawn(execution.into_owned(), started),
        }
    }

    /// Handles the actions gathered so far.
    pub(super) fn flush_batch(&self, batch: &mut Vec<DirectRequest<'_>>, out: &mut Vec<Handled>) {
        match batch.len() {
            0 => {}
            1 => {
                let req = batch.pop().expect("one request");
                out.push(self.handle_request(req));
            }
            _ => self.handle_batch(std::mem::take(batch), out),
        }
    }

    /// [`Host::handle_frames`] for a batch of directly read requests: admitted in order in one
    /// critical section, where the fills the executor does at once are also done and stored
    /// ([`Host::fill_at_once`]: a batch of fills takes the lock once); other executions run
    /// after it and their inline outcomes are stored in order in another. With a journal the
    /// executions wait for their begins together, on one task ([`Host::run_begun_batch`]).
    ///
    /// The executions stay where admission put them: the ones the executor answers at once
    /// are run and stored in place, by index, and only the others are moved out to be
    /// spawned. A fresh execution's answer is its stored outcome, written by the connection
    /// like a replay's ([`Handled::Replay`] with receipt kind `new`).
    fn handle_batch(&self, batch: Vec<DirectRequest<'_>>, out: &mut Vec<Handled>) {
        let mut admitted = self.admit_batch(batch);
        let inline = self.answer_admitted(&mut admitted, out);
        self.store_answered_inline(&mut admitted, inline, out);
    }

    /// The first critical section of [`Host::handle_batch`]: admits the batch in order,
    /// appends its begins (with a journal) and does and stores the fills the executor does at
    /// once; then wakes their copies and faults in the receipt table's next pages.
    fn admit_batch<'a>(&self, mut batch: Vec<DirectRequest<'a>>) -> Vec<BatchSlot<'a>> {
        let now = now_millis();
        // The keys are made before the lock is taken; under it, the book first looks every one
        // up (see [`crate::book::Book::look_ahead`]), then the requests are admitted in order.
        let keys: Vec<RequestKey> = batch.iter().map(DirectRequest::key).collect();
        // When this thread's last batch was new receipts, what new receipts keep is written
        // now, so that the lock is not held while fresh memory is touched for it; a batch of
        // copies drops what it did not use once the lock is let go.
        let mut written: Vec<Option<Arc<Outcome>>> = if NEW_LAST_BATCH.get() {
            let replies = self.inner.journal.is_none() && self.inner.ledger.is_none();
            batch.iter_mut().map(|r| write_ahead(r, replies)).collect()
        } else {
            Vec::new()
        };
        let batch_len = batch.len();
        let mut new_receipts = 0;
        // With a journal the batch's begins are appended together once all are admitted.
        let mut admitted = Vec::with_capacity(batch.len());
        // Copies to wake of the fills stored with their admission, once the lock is let go.
        let (mut filled_wake, mut filled_idle) = (Vec::new(), false);
        // The receipt table's next pages, faulted in once the lock is let go.
        let fault_ahead;
        {
            let mut st = self.lock();
            fault_ahead = st.book.fault_ahead();
            st.book.look_ahead(&keys);
            for (r, key) in batch.into_iter().zip(keys) {
                let id = r.request_id;
                admitted.push((id, self.admit(&mut st, r, key, now, Begin::WithBatch)));
            }
            self.append_begins(&mut st, &mut admitted, now);
            // Fills the executor does at once are done and stored in this same critical
            // section: a batch of them takes the host's lock once.
            for (i, (_, slot)) in admitted.iter_mut().enumerate() {
                let Ok(Admitted::Execute(execution)) = slot else {
                    continue;
                };
                new_receipts += 1;
                // Its turn may have come with the fills before it stored here (SPEC §14).
                execution.check_turn(&st);
                let reply = written.get_mut(i).and_then(Option::take);
                let Some(completion) = self.fill_at_once(execution, reply) else {
                    continue;
                };
                let answer;
                (answer, filled_idle) =
                    self.store_inline(&mut st, execution, completion, &mut filled_wake);
                *slot = Err(answer);
            }
        }
        NEW_LAST_BATCH.set(new_receipts * 2 >= batch_len);
        if let Some(stretch) = fault_ahead {
            stretch.fault_in();
        }
        for (waiters, outcome) in filled_wake {
            waiters.send_replace(Some(outcome));
        }
        self.ring_idle(filled_idle);
        admitted
    }

    /// Answers a batch's admissions in order, after [`Host::admit_batch`]: runs each other
    /// execution where admission left it ([`Host::run_inline`]) and hands back those that
    /// completed there (index in `admitted`, position in `out`, completion), to store under
    /// the lock's second taking; defers the rest ([`Host::defer`]), and with a journal lets
    /// the batch wait for its begins together ([`Host::run_begun_batch`]).
    fn answer_admitted(
        &self,
        admitted: &mut [BatchSlot<'_>],
        out: &mut Vec<Handled>,
    ) -> Vec<(usize, usize, Completion)> {
        let mut inline = Vec::with_capacity(admitted.len());
        let mut begun = Vec::new();
        for (i, (id, slot)) in admitted.iter_mut().enumerate() {
            let id: &str = id;
            // Why an execution run in place did not complete there, if it did not.
            let mut deferred = None;
            if let Ok(Admitted::Execute(execution)) = slot {
                if execution.begun.is_none() {
                    match self.run_inline(execution) {
                        Ok(completion) => {
                            inline.push((i, out.len(), completion));
                            // Replaced by the reply below, once the outcome is stored.
                            out.push(Handled::Ready(Vec::new()));
                            continue;
                        }
                        Err(why) => deferred = Some(why),
                    }
                }
            }
            let answer = match taken(slot) {
                Err(answer) => answer,
                Ok(Admitted::Read(cmd)) => self.read(id, cmd),
                Ok(Admitted::Replay(replay, durable)) => self.replayed(id, replay, durable),
                Ok(Admitted::CloseClaimed(closing)) => self.spawn_claimed(closing.into_owned()),
                Ok(Admitted::CloseQueued(closing)) => self.spawn_close_queued(closing.into_owned()),
                Ok(Admitted::Execute(execution)) => match deferred {
                    // Spawned: claimed in the fleet ledger first, or not answered at once.
                    Some(why) => self.defer(execution, why),
                    // Journaled: the batch waits for its begins together (see below).
                    None => {
                        begun.push((out.len(), execution));
                        Handled::Ready(Vec::new())
                    }
                },
            };
            out.push(answer);
        }
        if !begun.is_empty() {
            self.run_begun_batch(begun, out);
        }
        inline
    }

    /// Stores the outcomes of the executions a batch answered inline, in order, under one
    /// more taking of the lock, and puts each one's answer in its place in `out`.
    fn store_answered_inline(
        &self,
        admitted: &mut [BatchSlot<'_>],
        inline: Vec<(usize, usize, Completion)>,
        out: &mut [Handled],
    ) {
        if inline.is_empty() {
            return;
        }
        // Outcomes with copies to wake once the lock is let go (a copy later in the batch
        // joined its execution).
        let mut to_wake = Vec::new();
        let mut idle = false;
        {
            let mut st = self.lock();
            for (i, position, completion) in inline {
                // Still there: only the executions not completed in place were taken out.
                let Some((_, Ok(Admitted::Execute(execution)))) = admitted.get_mut(i) else {
                    continue;
                };
                (out[position], idle) =
                    self.store_inline(&mut st, execution, completion, &mut to_wake);
            }
        }
        for (waiters, outcome) in to_wake {
            waiters.send_replace(Some(outcome));
        }
        self.ring_idle(idle);
    }
}

impl Host {
    /// Stores the outcome of an execution that completed where admission left it, in the
    /// critical section `st` is, and gives its answer — the stored outcome, written by the
    /// connection with receipt kind `new` — and whether the host is now idle. Copies that
    /// joined it go to `wake`, to be woken once the lock is let go.
    pub(super) fn store_inline(
        &self,
        st: &mut State,
        execution: &mut Execution<'_>,
        completion: Completion,
        wake: &mut Vec<(ReplyWaiters, Arc<Outcome>)>,
    ) -> (Handled, bool) {
        let done = self.complete_locked(st, execution, completion);
        let idle = done.now_idle;
        let (outcome, waiters) = done.into_parts();
        if let Some(waiters) = waiters {
            wake.push((waiters, outcome.clone()));
        }
        let answer = Handled::Replay(Replay {
            outcome,
            key: std::mem::replace(&mut execution.key, RequestKey::Uuid([0; 16])),
            kind: ReceiptKind::New,
        });
        (answer, idle)
    }
}

thread_local! {
    /// Whether the last batch this thread handled was mostly new receipts, so the next is
    /// expected to be too: a client sends new requests in runs, and its retries in runs.
    static NEW_LAST_BATCH: Cell<bool> = const { Cell::new(true) };
}

/// Writes out what a new receipt for `req` keeps before the host's lock is taken: its
/// fingerprint's stored form, and (with `replies`, when the fill would be done inside the critical
/// section) the reply of a borrowed fill that takes effect.
fn write_ahead(req: &mut DirectRequest<'_>, replies: bool) -> Option<Arc<Outcome>> {
    match req.command {
        FrameCommand::Fill {
            task_id,
            target,
            value,
        } => {
            // A fill admitted as new takes the receipt of the task it names.
            req.request.write_out_fill(PlainFill {
                target,
                task_id,
                value,
            });
            replies.then(|| FieldResult::filled(target, value))
        }
        FrameCommand::Owned(_) => {
            req.request.write_out(None);
            None
        }
    }
}

/// Takes an admission out of its place in a batch, leaving a refusal nobody reads.
fn taken<'a>(slot: &mut Result<Admitted<'a>, Handled>) -> Result<Admitted<'a>, Handled> {
    std::mem::replace(slot, Err(Handled::Ready(Vec::new())))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::*;
    use crate::executor::FixtureExecutor;
    use crate::HostConfig;

    /// The reply line of an answer, awaited when it comes later.
    async fn line(host: &Host, answer: Handled) -> Vec<u8> {
        match answer {
            Handled::Ready(line) => line,
            Handled::Replay(replay) => replay.line(host.run_id()),
            Handled::Later(fut) => fut.await,
            Handled::Joined(_) => Vec::new(),
        }
    }

    /// A host on the fixture page with one task started, and the task's ID.
    async fn host_with_a_task() -> (Host, String) {
        let host = Host::new(HostConfig::default(), Arc::new(FixtureExecutor::new()));
        let started = host.handle("start", "task.start", &json!({"title": "t"}));
        let started: Value = serde_json::from_slice(&line(&host, started).await).unwrap();
        let task = started["result"]["taskId"].as_str().unwrap().to_owned();
        (host, task)
    }

    /// A pipelined batch of fresh fills (with a copy of one of them, which joins it) is
    /// answered byte for byte with the line of each receipt's stored outcome, receipt kind
    /// `new` (`joined` for the copy), and a later copy of each replays the same bytes.
    #[tokio::test]
    async fn a_batch_of_fresh_fills_answers_with_the_stored_outcomes() {
        let (host, task) = host_with_a_task().await;
        let ids: Vec<String> = (0..6)
            .map(|i| format!("9b2f4e1c-0d3a-4c5b-8e6f-{i:012x}"))
            .chain(["not-a-uuid:7".to_owned()])
            .collect();
        let frame = |id: &str, value: &str| {
            json!({"id": id, "method": "page.fill",
                "params": {"taskId": task, "target": "#title", "value": value}})
            .to_string()
            .into_bytes()
        };
        let mut frames: Vec<Vec<u8>> = ids.iter().map(|id| frame(id, id)).collect();
        frames.insert(3, frame(&ids[1], &ids[1]));
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let mut answers = Vec::new();
        host.handle_frames(&refs, usize::MAX, &mut answers);
        assert_eq!(answers.len(), frames.len());
        let mut lines = Vec::new();
        for answer in answers {
            lines.push(line(&host, answer).await);
        }
        let stored = |id: &str| {
            let st = host.lock();
            let receipt = st.book.get(&RequestKey::new(id)).expect("a receipt");
            receipt.outcome().expect("completed").clone()
        };
        let mut expected: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| stored(id).reply_line(Some(id), host.run_id(), ReceiptKind::New))
            .collect();
        expected.insert(
            3,
            stored(&ids[1]).reply_line(Some(&ids[1]), host.run_id(), ReceiptKind::Joined),
        );
        assert_eq!(lines, expected);
        let fresh = lines.iter().take(3).chain(lines.iter().skip(4));
        for (id, line) in ids.iter().zip(fresh) {
            let reply: Value = serde_json::from_slice(line).unwrap();
            assert_eq!(reply["result"], json!({"target": "#title", "value": id}));
            assert_eq!(reply["meta"]["receipt"], "new");
        }
        // Copies sent later, alone or together, replay those bytes.
        let again = host.handle_frame(&frames[0]);
        let again = line(&host, again).await;
        let replayed = String::from_utf8(lines[0].clone())
            .unwrap()
            .replace("\"receipt\":\"new\"", "\"receipt\":\"replayed\"");
        assert_eq!(String::from_utf8(again).unwrap(), replayed);
        let mut answers = Vec::new();
        host.handle_frames(&refs, usize::MAX, &mut answers);
        for (answer, line) in answers.into_iter().zip(&lines) {
            let replayed = String::from_utf8(line.clone())
                .unwrap()
                .replace("\"receipt\":\"new\"", "\"receipt\":\"replayed\"")
                .replace("\"receipt\":\"joined\"", "\"receipt\":\"replayed\"");
            assert_eq!(String::from_utf8(line_of(&host, answer)).unwrap(), replayed);
        }
        assert_eq!(host.lock().book.running(), 0);
    }

    /// A batch of fresh fills stores the same outcomes whether what new receipts keep was
    /// written before the lock (the thread's last batch was new receipts) or inside it (the
    /// last batch was copies), and a fill the page refuses answers with its failure even when
    /// the reply of its success was written ahead.
    #[tokio::test]
    async fn a_batch_stores_the_same_outcomes_whether_written_ahead_or_not() {
        let (host, task) = host_with_a_task().await;
        let frames = |round: u32| -> Vec<Vec<u8>> {
            ["#title", "#status", "#note"]
                .iter()
                .enumerate()
                .map(|(i, target)| {
                    json!({"id": format!("9b2f4e1c-0d3a-4c5b-8e6f-{round:06x}{i:06x}"),
                        "method": "page.fill",
                        "params": {"taskId": task, "target": target, "value": format!("v{round}")}})
                    .to_string()
                    .into_bytes()
                })
                .collect()
        };
        let answer = |frames: &[Vec<u8>]| {
            let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            let mut answers = Vec::new();
            host.handle_frames(&refs, usize::MAX, &mut answers);
            answers
                .into_iter()
                .map(|a| serde_json::from_slice::<Value>(&line_of(&host, a)).unwrap())
                .collect::<Vec<_>>()
        };
        // Round 0 follows no batch (expected new: written ahead); round 1 follows a batch of
        // copies (not written ahead).
        let first = frames(0);
        let round0 = answer(&first);
        assert!(answer(&first)
            .iter()
            .all(|r| r["meta"]["receipt"] == "replayed"));
        let round1 = answer(&frames(1));
        for (round, replies) in [(0, round0), (1, round1)] {
            let v = format!("v{round}");
            assert_eq!(
                replies[0]["result"],
                json!({"target": "#title", "value": v})
            );
            assert_eq!(replies[1]["ok"], false, "{}", replies[1]);
            assert_eq!(replies[1]["error"]["code"], "ACTION_FAILED");
            assert_eq!(replies[2]["result"], json!({"target": "#note", "value": v}));
            for r in &replies {
                assert_eq!(r["meta"]["receipt"], "new");
                let stored = host
                    .lock()
                    .book
                    .get(&RequestKey::new(r["id"].as_str().unwrap()))
                    .and_then(|receipt| receipt.outcome())
                    .expect("a completed receipt");
                assert_eq!(stored.to_value()["ok"], r["ok"]);
                assert_eq!(stored.to_value().get("result"), r.get("result"));
                // A fill that took effect keeps no copy of its reply; a failure keeps its own.
                let st = host.lock();
                let receipt = st
                    .book
                    .get(&RequestKey::new(r["id"].as_str().unwrap()))
                    .unwrap();
                let kept = matches!(receipt.reply, crate::book::ReplySlot::Done(_));
                assert_eq!(kept, r["ok"] == false, "{r}");
            }
        }
    }

    /// A replay's line, which is ready at once.
    fn line_of(host: &Host, answer: Handled) -> Vec<u8> {
        match answer {
            Handled::Replay(replay) => replay.line(host.run_id()),
            Handled::Ready(line) => line,
            Handled::Later(_) | Handled::Joined(_) => panic!("a replay is ready at once"),
        }
    }
}
