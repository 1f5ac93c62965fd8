//! Where requests come in: one frame, one parsed request, or frames that arrived together.
//!
//! Each entry point checks the request, applies the receipt rules under the host's lock
//! ([`Host::admit`]), then answers a read, or runs the new execution and stores its outcome
//! when it completed inline. [`Host::handle_frames`] does the same for a pipelined batch of
//! actions, admitted under one taking of the lock and stored under one more.

use serde_json::{json, Value};

use super::admission::{Admitted, Begin};
use super::execution::Launched;
use super::{reject, Handled, Host, Replay};
use crate::book::RequestKey;
use crate::journal::Ticket;
use crate::protocol::{
    now_millis, parse_envelope, parse_frame, try_fingerprint, Command, DirectRequest, ErrorBody,
    ErrorCode, Method, ParsedFrame, ReceiptKind,
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
        let command = match Command::parse(method, params, &|t| executor.check_target(t)) {
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
        let admitted = self.admit(&mut self.lock(), req, key, now, Begin::Append);
        match admitted {
            Err(answer) => answer,
            Ok(Admitted::Read(cmd)) => self.read(id, cmd),
            Ok(Admitted::Replay(replay, durable)) => self.replayed(id, replay, durable),
            Ok(Admitted::CloseClaimed(closing)) => self.spawn_claimed(closing.into_owned()),
            Ok(Admitted::Execute(execution)) => match self.launch(execution) {
                Launched::Later(answer) => answer,
                Launched::Inline(execution, completion) => {
                    let outcome = self.complete(&execution, completion);
                    Handled::Ready(outcome.reply_line(Some(id), self.run_id(), ReceiptKind::New))
                }
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
    /// critical section, executed, and the inline outcomes stored in order in another. With a
    /// journal the executions wait for their begins together, on one task
    /// ([`Host::run_begun_batch`]).
    fn handle_batch(&self, batch: Vec<DirectRequest<'_>>, out: &mut Vec<Handled>) {
        let now = now_millis();
        // The keys are made before the lock is taken; under it, the book first looks every one
        // up (see [`crate::book::Book::look_ahead`]), then the requests are admitted in order.
        let keys: Vec<RequestKey> = batch.iter().map(DirectRequest::key).collect();
        // With a journal the batch's begins are appended together once all are admitted.
        let admitted: Vec<_> = {
            let mut st = self.lock();
            st.book.look_ahead(&keys);
            let mut admitted: Vec<_> = batch
                .into_iter()
                .zip(keys)
                .map(|(r, key)| {
                    (
                        r.request_id,
                        self.admit(&mut st, r, key, now, Begin::WithBatch),
                    )
                })
                .collect();
            self.append_begins(&mut st, &mut admitted, now);
            admitted
        };
        let mut inline = Vec::with_capacity(admitted.len());
        let mut begun = Vec::new();
        for (id, admission) in admitted {
            let answer = match admission {
                Err(answer) => answer,
                Ok(Admitted::Read(cmd)) => self.read(id, cmd),
                Ok(Admitted::Replay(replay, durable)) => self.replayed(id, replay, durable),
                Ok(Admitted::CloseClaimed(closing)) => self.spawn_claimed(closing.into_owned()),
                // Journaled: the batch waits for its begins together (see below).
                Ok(Admitted::Execute(execution)) if execution.begun.is_some() => {
                    begun.push((out.len(), execution));
                    Handled::Ready(Vec::new())
                }
                Ok(Admitted::Execute(execution)) => match self.launch(execution) {
                    Launched::Later(answer) => answer,
                    Launched::Inline(execution, completion) => {
                        inline.push((out.len(), execution, completion));
                        // Replaced by the reply below, once the outcome is stored.
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
        let mut stored = Vec::with_capacity(inline.len());
        let mut idle = false;
        {
            let mut st = self.lock();
            for (position, execution, completion) in inline {
                let done = self.complete_locked(&mut st, &execution, completion);
                idle = done.now_idle;
                stored.push((position, execution.request_id, done));
            }
        }
        for (position, id, done) in stored {
            let outcome = done.wake();
            out[position] =
                Handled::Ready(outcome.reply_line(Some(&id), self.run_id(), ReceiptKind::New));
        }
        self.ring_idle(idle);
    }
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
