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
        if !self.fast_path() {
            return self.handle_general(frame);
        }
        let executor = &self.inner.executor;
        match parse_frame(frame, &|t| executor.check_target(t)) {
            ParsedFrame::Request(req) => self.handle_request(req),
            ParsedFrame::Refused(e) => reject(e.id.as_deref(), self.run_id(), e.error),
            ParsedFrame::General => self.handle_general(frame),
        }
    }

    /// Handles a frame the one-pass reader left to the general path, which reads it once more
    /// and writes its refusal (or, for an ID written with escapes, handles it).
    pub(super) fn handle_general(&self, frame: &[u8]) -> Handled {
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
    pub(super) fn handle_request(&self, req: DirectRequest<'_>) -> Handled {
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
    pub(super) fn replayed(&self, id: &str, replay: Replay, durable: Option<Ticket>) -> Handled {
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
        let fast = self.fast_path();
        // Only actions an executor performs share a batch's critical sections.
        let mut batch = Vec::new();
        // Ready reply bytes pushed, and the frames' lengths of the batch not yet handled.
        let (mut used, mut in_batch) = (0, 0);
        for (i, frame) in frames.iter().enumerate() {
            if i > 0 && used + in_batch >= room {
                break;
            }
            if !fast {
                out.push(self.handle_general(frame));
                used = ready_bytes(&out[start..], self.run_id());
                continue;
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
