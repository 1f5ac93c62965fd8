//! Where requests come in: one frame, one parsed request, or frames that arrived together.
//!
//! Each entry point checks the request, applies the receipt rules under the host's lock
//! ([`Host::admit`]), then answers a read, or runs the new execution and stores its outcome
//! when it completed inline. [`Host::handle_frames`] does the same for a pipelined batch of
//! actions, admitted under one taking of the lock and stored under one more.

use serde_json::{json, Value};

use std::cell::Cell;
use std::sync::Arc;

use super::admission::{Admitted, Begin};
use super::execution::{Completion, Execution, Launched};
use super::{reject, Handled, Host, Replay, State};
use crate::book::{ReplyWaiters, RequestKey};
use crate::journal::Ticket;
use crate::protocol::results::FieldResult;
use crate::protocol::{
    now_millis, parse_envelope, parse_frame, try_fingerprint, Command, DirectRequest, ErrorBody,
    ErrorCode, FrameCommand, Method, Outcome, ParsedFrame, PlainFill, ReceiptKind,
};

impl Host {
    /// Handles one bridge frame (without its newline).
    ///
    /// The frame is read once ([`parse_frame`]): a well-formed request straight into its
    /// command (no JSON value is built for it), params that fail a check into their refusal;
    /// anything else goes through [`Host::handle`], which writes every other refusal, so a bad
    /// frame reads the same whichever path saw it first.
    pub fn handle_frame(&self, frame: &[u8]) -> Handled {
        let executor = &self.inner.executor;
        match parse_frame(frame, &|t| executor.check_target(t)) {
            ParsedFrame::Request(req) => self.handle_request(req),
            ParsedFrame::Refused(e) => reject(e.id.as_deref(), self.run_id(), e.error),
            ParsedFrame::General => self.handle_general(frame),
        }
    }

    /// Handles a frame the one-pass reader left to the general path, which reads it once more
    /// and writes its refusal (or, for an ID written with escapes, handles it).
    fn handle_general(&self, frame: &[u8]) -> Handled {
        match parse_envelope(frame) {
            Ok(env) => self.handle(&env.id, &env.method, &env.params),
            Err(e) => reject(e.id.as_deref(), self.run_id(), e.error),
        }
    }

    /// Handles one bridge request.
    pub fn handle(&self, id: &str, method_name: &str, params: &Value) -> Handled {
        let run_id = self.run_id();
        let Ok(method) = method_name.parse::<Method>() else {
            return reject(
                Some(id),
                run_id,
                ErrorBody::new(
                    ErrorCode::UnknownMethod,
                    format!("unknown method {method_name:?}; call tools.list for the methods of this socket"),
                )
                .with_details(json!({"method": method_name})),
            );
        };
        let executor = &self.inner.executor;
        let command = match Command::parse(method, params, &|t| executor.check_target(t))
            .and_then(|c| executor.check_command(&c).map(|()| c))
        {
            Ok(c) => c,
            Err(msg) => {
                return reject(Some(id), run_id, ErrorBody::new(ErrorCode::BadRequest, msg))
            }
        };
        let request = match try_fingerprint(method.as_str(), params) {
            Ok(r) => r,
            Err(msg) => {
                return reject(Some(id), run_id, ErrorBody::new(ErrorCode::BadRequest, msg))
            }
        };
        self.handle_request(DirectRequest::new(id, command, request))
    }

    /// Applies the receipt rules to a request whose params are already checked, then answers
    /// it: `req.request` is its canonical `{method, params}` (the fingerprint the receipt
    /// keeps).
    fn handle_request(&self, req: DirectRequest<'_>) -> Handled {
        let now = now_millis();
        let id = req.request_id;
        let key = req.key();
        // Copies to wake, and whether the host went idle, when a fill is done right here.
        let (mut wake, mut idle) = (Vec::new(), None);
        let (admitted, fault_ahead) = {
            let mut st = self.lock();
            let fault_ahead = st.book.fault_ahead();
            let mut admitted = self.admit(&mut st, req, key, now, Begin::Append);
            // A fill the executor does at once is done in the critical section that admitted
            // it: with nothing of its task in flight it took no place in the task's queue, so
            // nothing admitted after it may run first.
            if let Ok(Admitted::Execute(execution)) = &mut admitted {
                if let Some(completion) = self.fill_at_once(execution, None) {
                    let (answer, now_idle) =
                        self.store_inline(&mut st, execution, completion, &mut wake);
                    idle = Some(now_idle);
                    admitted = Err(answer);
                }
            }
            (admitted, fault_ahead)
        };
        if let Some(stretch) = fault_ahead {
            stretch.fault_in();
        }
        if let Some(idle) = idle {
            for (waiters, outcome) in wake {
                waiters.send_replace(Some(outcome));
            }
            self.ring_idle(idle);
        }
        match admitted {
            Err(answer) => answer,
            Ok(Admitted::Read(cmd)) => self.read(id, cmd),
            Ok(Admitted::Replay(replay, durable)) => self.replayed(id, replay, durable),
            Ok(Admitted::CloseClaimed(closing)) => self.spawn_claimed(closing.into_owned()),
            Ok(Admitted::CloseQueued(closing)) => self.spawn_close_queued(closing.into_owned()),
            Ok(Admitted::Execute(execution)) => match self.launch(execution) {
                Launched::Later(answer) => answer,
                Launched::Inline(execution, completion) => Handled::Replay(Replay {
                    outcome: self.complete(&execution, completion),
                    key: execution.key,
                    kind: ReceiptKind::New,
                }),
            },
        }
    }

    /// The answer of a replayed copy: the stored reply, written by the connection, once its
    /// completion is durable.
    fn replayed(&self, id: &str, replay: Replay, durable: Option<Ticket>) -> Handled {
        match durable {
            None => Handled::Replay(replay),
            // Stored, but its completion is not durable yet: no client sees it before the
            // journal has it.
            Some(ticket) => self.reply_once_durable(id, ticket, replay.line(self.run_id())),
        }
    }

    /// Handles frames that arrived together on one connection, in order. Consecutive actions
    /// (the mutations that run on an executor) are admitted under one taking of the host's
    /// lock and the ones that complete inline are stored under one more, so a pipelining
    /// client pays for the lock twice per batch of actions instead of twice per request. Reads,
    /// task closings and anything the direct parse path does not read end a batch and are
    /// handled on their own, after it: each frame is answered as it would be alone, in turn.
    ///
    /// Frames are taken until their ready replies reach `room` bytes (the connection's
    /// reply-byte bound, SPEC §10), at least one: an action's reply is counted as its frame's
    /// length until it exists (a reply carries what its request sent, and a replay the same),
    /// so a batch stops before it would pass the bound. The frames not taken are the caller's to
    /// hand again.
    pub fn handle_frames(&self, frames: &[&[u8]], room: usize, out: &mut Vec<Handled>) {
        let executor = &self.inner.executor;
        let check = |t: &str| executor.check_target(t);
        let start = out.len();
        // Only actions an executor performs share a batch's critical sections.
        let mut batch = Vec::new();
        // Ready reply bytes pushed, and the frames' lengths of the batch not yet handled.
        let (mut used, mut in_batch) = (0, 0);
        for (i, frame) in frames.iter().enumerate() {
            if i > 0 && used + in_batch >= room {
                break;
            }
            match parse_frame(frame, &check) {
                ParsedFrame::Request(req) if req.command.is_executed() => {
                    in_batch += frame.len();
                    batch.push(req);
                }
                parsed => {
                    self.flush_batch(&mut batch, out);
                    out.push(match parsed {
                        ParsedFrame::Request(req) => self.handle_request(req),
                        ParsedFrame::Refused(e) => reject(e.id.as_deref(), self.run_id(), e.error),
                        ParsedFrame::General => self.handle_general(frame),
                    });
                    used = ready_bytes(&out[start..], self.run_id());
                    in_batch = 0;
                }
            }
        }
        self.flush_batch(&mut batch, out);
    }

    /// Handles the actions gathered so far.
    fn flush_batch(&self, batch: &mut Vec<DirectRequest<'_>>, out: &mut Vec<Handled>) {
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
    fn handle_batch(&self, mut batch: Vec<DirectRequest<'_>>, out: &mut Vec<Handled>) {
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
        // (index in `admitted`, position in `out`, completion) of the executions answered
        // inline, to store under the lock's second taking.
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
    fn store_inline(
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

/// The bytes of the ready replies among `answers`.
fn ready_bytes(answers: &[Handled], run_id: &str) -> usize {
    answers
        .iter()
        .map(|a| match a {
            Handled::Ready(line) => line.len(),
            Handled::Replay(replay) => replay.line_len(run_id),
            Handled::Later(_) | Handled::Joined(_) => 0,
        })
        .sum()
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
