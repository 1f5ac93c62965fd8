//! Accepting connections and serving each one: the connection limit, the in-flight window,
//! and shutdown.
//!
//! Shaped after mini-redis's `server.rs`: a semaphore bounds connections (beyond the limit a new
//! one is told `HOST_BUSY` and closed), and shutdown is a watch channel every loop selects on.
//! Each connection admits at most [`MAX_IN_FLIGHT_PER_CONNECTION`] requests whose replies are
//! not written yet and stops reading while `--max-pending-reply-bytes` of replies wait, so a
//! peer that sends without reading cannot make the host hold more. A frame must be whole
//! within `--frame-timeout-ms` of its first byte, and a connection with nothing to do is closed
//! after `--idle-timeout-ms`.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::task::AtomicWaker;

use tokio::time::{Instant, Sleep};

use interprocess::local_socket::tokio::{prelude::*, Listener, Stream};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::connection::{Framed, LaterReply, ReplyBytes, Socket, WriterInput};
use super::{current_uid, Connection, Limits, Outbound, Outbox, Service};
use crate::host::Handled;
use crate::protocol::{
    ErrorBody, ErrorCode, FrameRead, FrameTimeoutDetails, FrameTooLargeDetails, HostBusyDetails,
    LineEnds, Outcome, PeerRefusedDetails, ReceiptKind, MAX_IN_FLIGHT_PER_CONNECTION,
};

/// Accepts connections until `stop_accepting` flips, serving each on its own task in
/// `tracker` (so shutdown can wait for their replies to drain) while one of `connections`'
/// `limits.max_connections` slots is free. A connection beyond that gets one `HOST_BUSY` line
/// and is closed at once, and a peer of another user one `BAD_REQUEST` line, so neither reads
/// as a lost reply; nothing either sent is read.
pub async fn accept_loop<S: Service>(
    listener: Listener,
    service: S,
    limits: Limits,
    mut stop_accepting: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    connections: Arc<Semaphore>,
    tracker: tokio_util::task::TaskTracker,
) {
    let my_uid = current_uid();
    // Refusal lines being written at once; beyond this a refused peer is closed without one.
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS_IN_PROGRESS));
    loop {
        let stream = tokio::select! {
            s = listener.accept() => s,
            _ = stop_accepting.wait_for(|s| *s) => break,
        };
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Refuse other users where the OS tells who the peer is.
        if let Ok(Some(uid)) = stream.peer_creds().map(|c| c.euid()) {
            if uid != my_uid {
                tracing::warn!(peer_uid = uid, "refused a connection from another user");
                let body = ErrorBody::new(
                    ErrorCode::BadRequest,
                    format!(
                        "connection refused: peer uid {uid}; this host serves only uid {my_uid}. Connect as the host's user"
                    ),
                )
                .with_typed_details(&PeerRefusedDetails {
                    peer_uid: uid,
                    host_uid: my_uid,
                });
                refuse(stream, &body, service.run_id(), &refusals);
                continue;
            }
        }
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::warn!(
                max_connections = limits.max_connections,
                "refused a connection: every slot is taken"
            );
            let body = ErrorBody::new(
                ErrorCode::HostBusy,
                format!(
                    "all {} connections of this socket are taken; nothing was read from this connection. Retry later, close idle connections, or start the host with a larger --max-connections",
                    limits.max_connections
                ),
            )
            .with_typed_details(&HostBusyDetails {
                max_connections: limits.max_connections,
            });
            refuse(stream, &body, service.run_id(), &refusals);
            continue;
        };
        let service = service.clone();
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            serve_connection(stream, service, limits, shutdown).await;
            drop(permit);
        });
    }
    drop(listener);
}

/// How often a busy connection (a request in flight, a feed) looks again whether it is idle.
const BUSY_RECHECK: Duration = Duration::from_secs(1);

/// Refusal lines written at once at most (a flood of refused connections costs no more).
const MAX_REFUSALS_IN_PROGRESS: usize = 64;

/// How long a refused peer gets to take its one line.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Writes one `"id": null` error line to a connection that will not be served, then closes it,
/// without reading anything from it.
fn refuse(stream: Stream, body: &ErrorBody, run_id: &str, refusals: &Arc<Semaphore>) {
    let Ok(slot) = refusals.clone().try_acquire_owned() else {
        return;
    };
    let line = Outcome::err(body).reply_line(None, run_id, ReceiptKind::None);
    tokio::spawn(async move {
        let write = async { (&stream).write_all(&line).await };
        let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, write).await;
        drop(stream);
        drop(slot);
    });
}

/// Reads frames from one connection and hands them to the service until the peer leaves or
/// the host shuts down. Replies that are ready at once (replays, reads, rejections) are written
/// by this loop itself, batched per read, so a replay costs no hop to another task; replies
/// that need waiting go to the writer task, which writes each as it completes, in whatever
/// order. Whole frames that arrived together go to [`Service::handle_frames`] as one batch.
pub async fn serve_connection<S: Service>(
    stream: Stream,
    service: S,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
) {
    let Some(stream) = register(stream) else {
        return;
    };
    // Every reply byte queued for this peer, whoever queued it, against the bound.
    let bytes = Arc::new(ReplyBytes::new(limits.max_pending_reply_bytes));
    // A peer that takes no reply bytes for the idle timeout is as good as gone: it must not
    // keep its slot (and the replies it does not read) forever.
    let mut framed = Framed::new(
        &stream,
        limits.max_frame_bytes,
        limits.idle_timeout,
        bytes.clone(),
    );
    let writer = Writer::start(&framed, &bytes);
    let conn = Connection {
        out: writer.out.clone(),
        shutdown: shutdown.clone(),
        feeds: Default::default(),
    };
    // Shutdown as this connection waits for it: one registration with the shared channel for
    // the connection's whole life (see [`Stop`]).
    let stop = Arc::new(Stop::default());
    let watcher = watch_shutdown(stop.clone(), shutdown.clone());
    let inflight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let mut batch = Batch::new();
    let run_id = service.run_id().to_owned();
    // Every reply line of this connection ends the same way for a receipt kind.
    let line_ends = LineEnds::new(&run_id);
    // When the frame being read began, and since when the connection has had nothing to do.
    let mut frame_since: Option<Instant> = None;
    let mut idle_since: Option<Instant> = None;
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    loop {
        // The reply bytes queued since the last turn count against the bound from here on.
        framed.count_queued();
        if must_write_first(&framed, &inflight, &bytes) && framed.write_ready().await.is_err() {
            break;
        }
        // Waiting is raced against shutdown; what is at hand (a free slot, a whole line already
        // buffered) is taken at once, after a glance at the shutdown flag.
        // The writer ends only when the peer is gone (or stalled): stop reading for it.
        if stopping(&shutdown) || writer.task.is_finished() || bytes.is_closed() {
            break;
        }
        // Still at the bound: the writer holds replies (or event lines) the peer has not
        // taken. Nothing more is read until it does.
        if bytes.room() == 0 {
            tokio::select! {
                biased;
                _ = bytes.wait_for_room() => continue,
                _ = stop.wait() => break,
            }
        }
        // Whole lines already buffered, with slots free for them, are handled together, until
        // their replies reach the reply-byte bound.
        let free = inflight.available_permits();
        if free > 1 {
            if let Some(taken) = batch.handle(free, &mut framed, &service, &conn, &bytes) {
                frame_since = None;
                // Free now; awaiting them still counts against this task's scheduling budget.
                let permits = inflight
                    .clone()
                    .acquire_many_owned(taken as u32)
                    .await
                    .expect("the in-flight semaphore is never closed");
                let later = &writer.later;
                take_batch_answers(&mut batch.answers, permits, &mut framed, later, &line_ends);
                continue;
            }
        }
        if !framed.has_buffered_frame() && !framed.has_partial() {
            // Nothing buffered: wait for the peer's next bytes, holding no in-flight slot. A
            // connection with nothing in flight and no feed is idle, and closed once it has
            // been idle for the idle timeout; a busy one looks again within a second.
            frame_since = None;
            let busy =
                inflight.available_permits() < MAX_IN_FLIGHT_PER_CONNECTION || conn.has_feed();
            let turn = wait_for_input(
                &mut framed,
                &stop,
                timer.as_mut(),
                busy,
                &mut idle_since,
                limits.idle_timeout,
            );
            match turn.await {
                Turn::Again => continue,
                Turn::Close => break,
            }
        }
        let Some(permit) = take_slot(&inflight, &stop).await else {
            break;
        };
        let whole = read_next_frame(
            &mut framed,
            &stop,
            timer.as_mut(),
            &mut frame_since,
            &mut idle_since,
            limits.frame_timeout,
            &run_id,
        );
        if !whole.await {
            break;
        }
        let answer = service.handle_frame(framed.frame(), &conn);
        take_answer(answer, permit, &mut framed, &writer.later, &line_ends);
    }
    watcher.abort();
    drain_and_close(&mut framed, writer, &inflight).await;
}

/// The connection registered with the runtime for reading only (see [`Socket`]), or `None`,
/// logged, when it cannot be.
fn register(stream: Stream) -> Option<Arc<Socket>> {
    match Socket::new(stream) {
        Ok(socket) => Some(Arc::new(socket)),
        Err(e) => {
            tracing::warn!("a connection could not be registered with the runtime: {e}");
            None
        }
    }
}

/// A connection's writer task and the reader's ends of the channels it reads.
struct Writer {
    /// Lines the service sends on its own, counted against the reply-byte bound.
    out: Outbox,
    /// Replies still being worked out, written by the task as each completes.
    later: mpsc::UnboundedSender<LaterReply>,
    /// Fired when the reader is done: the task writes everything owed, then ends.
    close: oneshot::Sender<()>,
    /// The writer task.
    task: JoinHandle<()>,
}

impl Writer {
    /// Starts the writer task of `framed`, whose queued lines count in `bytes`.
    fn start(framed: &Framed<'_>, bytes: &Arc<ReplyBytes>) -> Writer {
        let (out, lines) = mpsc::unbounded_channel::<Outbound>();
        let (later_tx, later) = mpsc::unbounded_channel::<LaterReply>();
        let (close_tx, close) = oneshot::channel::<()>();
        let task = framed.spawn_writer(WriterInput {
            lines,
            later,
            close,
        });
        Writer {
            out: Outbox::new(out, bytes.clone()),
            later: later_tx,
            close: close_tx,
            task,
        }
    }
}

/// Whether the ready replies are written before the next wait: there are some, and the wait
/// would be for more input (no whole frame buffered), for an in-flight slot that only a written
/// reply frees, or, at the reply-byte bound, for the peer to read (the peer may be waiting for
/// them).
#[inline]
fn must_write_first(framed: &Framed<'_>, inflight: &Semaphore, bytes: &ReplyBytes) -> bool {
    framed.has_ready()
        && (!framed.has_buffered_frame() || inflight.available_permits() == 0 || bytes.room() == 0)
}

/// A batch's frames, where each ends and their answers, kept from batch to batch so their
/// allocations are reused (empty between batches, so they borrow nothing then).
struct Batch {
    /// The frames, as [`recycle`] keeps them.
    frames: Vec<&'static [u8]>,
    /// For each frame, how many bytes the frames up to it span.
    ends: Vec<usize>,
    /// One answer per frame taken.
    answers: Vec<Handled>,
}

impl Batch {
    /// Empty, with room for a window of frames.
    fn new() -> Batch {
        Batch {
            frames: Vec::with_capacity(MAX_IN_FLIGHT_PER_CONNECTION),
            ends: Vec::with_capacity(MAX_IN_FLIGHT_PER_CONNECTION),
            answers: Vec::new(),
        }
    }

    /// Hands up to `free` (a window's worth: a pipelining client keeps up to the in-flight
    /// limit buffered) whole frames already buffered to the service as one batch, and consumes
    /// those it took; their answers are left in `answers`. How many it took, or `None` (nothing
    /// handled) when fewer than two frames are buffered.
    #[inline]
    fn handle<S: Service>(
        &mut self,
        free: usize,
        framed: &mut Framed<'_>,
        service: &S,
        conn: &Connection,
        bytes: &ReplyBytes,
    ) -> Option<usize> {
        let mut frames = recycle(std::mem::take(&mut self.frames));
        self.ends.clear();
        framed.buffered_frames(free, &mut frames, &mut self.ends);
        if frames.len() <= 1 {
            self.frames = recycle(frames);
            return None;
        }
        service.handle_frames(&frames, bytes.room(), conn, &mut self.answers);
        let taken = self.answers.len();
        debug_assert!(
            (1..=frames.len()).contains(&taken),
            "at least one frame is taken"
        );
        let used = self.ends[taken.clamp(1, self.ends.len()) - 1];
        self.frames = recycle(frames);
        framed.consume(used);
        Some(taken)
    }
}

/// An in-flight slot for the next frame, waiting for a written reply to free one when none is
/// free; `None` when shutdown begins first.
async fn take_slot(inflight: &Arc<Semaphore>, stop: &Stop) -> Option<OwnedSemaphorePermit> {
    if inflight.available_permits() > 0 {
        // Free now; awaiting it (rather than trying) still counts against this task's
        // scheduling budget, so a connection with a full buffer yields to the others.
        let permit = inflight.clone().acquire_owned().await;
        return Some(permit.expect("the in-flight semaphore is never closed"));
    }
    tokio::select! {
        p = inflight.clone().acquire_owned() => Some(p.expect("the in-flight semaphore is never closed")),
        _ = stop.wait() => None,
    }
}

/// Reads the next frame into `framed`: at once when it is whole, else within `frame_timeout`
/// of its first byte. `false` when the connection closes instead: the peer left or the read
/// failed, shutdown began, or the frame was late, too large or cut off (its error line queued).
async fn read_next_frame(
    framed: &mut Framed<'_>,
    stop: &Stop,
    mut timer: Pin<&mut Sleep>,
    frame_since: &mut Option<Instant>,
    idle_since: &mut Option<Instant>,
    frame_timeout: Duration,
    run_id: &str,
) -> bool {
    let read = if framed.has_buffered_frame() {
        framed.read_frame().await
    } else {
        // Part of a frame is here: the rest must come within the frame timeout of its
        // first byte.
        *idle_since = None;
        let started = *frame_since.get_or_insert_with(Instant::now);
        timer.as_mut().reset(deadline_after(started, frame_timeout));
        // Bytes already here count before the clock: only a peer that has not sent the
        // rest times out, never one the host was too busy to read.
        tokio::select! {
            biased;
            r = framed.read_frame() => r,
            _ = stop.wait() => return false,
            _ = &mut timer => {
                framed.queue_ready(&error_line(frame_timeout_body(frame_timeout), run_id), None);
                return false;
            }
        }
    };
    match read {
        Ok(FrameRead::Frame) => {
            *frame_since = None;
            true
        }
        Ok(FrameRead::TooLarge) => {
            let body = frame_too_large_body(framed.max_frame_bytes());
            framed.queue_ready(&error_line(body, run_id), None);
            false
        }
        Ok(FrameRead::Partial) => {
            framed.queue_ready(&error_line(partial_frame_body(), run_id), None);
            false
        }
        Ok(FrameRead::Eof) => false,
        Err(e) => {
            tracing::debug!("connection read failed: {e}");
            false
        }
    }
}

/// The `"id": null` reply line of an error that closes the connection.
fn error_line(body: ErrorBody, run_id: &str) -> Vec<u8> {
    Outcome::err(&body).reply_line(None, run_id, ReceiptKind::None)
}

/// Spawns the task that waits on the host's shutdown channel once for the whole connection and
/// then triggers `stop`.
fn watch_shutdown(stop: Arc<Stop>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let _ = shutdown.wait_for(|s| *s).await;
        stop.trigger();
    })
}

/// Queues the answers of a batch, which hold `permits`, one slot per frame: a ready reply's slot
/// stays in `permits`, which the ready replies then hold as one permit until they are written; a
/// later answer is handed on once the frames joined to it have added their slots to its own.
fn take_batch_answers(
    answers: &mut Vec<Handled>,
    mut permits: OwnedSemaphorePermit,
    framed: &mut Framed<'_>,
    later_tx: &mpsc::UnboundedSender<LaterReply>,
    line_ends: &LineEnds,
) {
    let mut held: Vec<(usize, LaterReply)> = Vec::new();
    for (i, answer) in answers.drain(..).enumerate() {
        match answer {
            Handled::Ready(line) => framed.queue_ready(&line, None),
            Handled::Replay(replay) => framed.queue_replay(&replay, line_ends, None),
            Handled::Later(fut) => {
                let permit = permits.split(1).expect("one slot per frame");
                held.push((i, (fut, permit)));
            }
            Handled::Joined(to) => {
                let permit = permits.split(1).expect("one slot per frame");
                match held.iter_mut().rev().find(|(j, _)| *j == to) {
                    Some((_, (_, slots))) => slots.merge(permit),
                    None => drop(permit),
                }
            }
        }
    }
    framed.hold(Some(permits));
    for (_, (fut, slots)) in held {
        take_answer(Handled::Later(fut), slots, framed, later_tx, line_ends);
    }
}

/// What a connection does after waiting for input.
enum Turn {
    /// Read what came, or look again whether it is idle.
    Again,
    /// Close it: the peer left, the host is shutting down, or it was idle for too long.
    Close,
}

/// Waits for the peer's next bytes with nothing buffered, holding no in-flight slot. A
/// connection that is not `busy` is idle, and closed once it has been idle for `idle_timeout`;
/// a busy one looks again within a second.
async fn wait_for_input(
    framed: &mut Framed<'_>,
    stop: &Stop,
    mut timer: Pin<&mut Sleep>,
    busy: bool,
    idle_since: &mut Option<Instant>,
    idle_timeout: Duration,
) -> Turn {
    let deadline = wait_deadline(Instant::now(), busy, idle_since, idle_timeout);
    timer.as_mut().reset(deadline);
    tokio::select! {
        biased;
        r = framed.wait_for_bytes() => match r {
            Ok(0) => Turn::Close,
            // The frame's clock starts when a partial frame is first seen (on the next turn),
            // not here: no clock is read for a batch that arrives whole.
            Ok(_) => {
                *idle_since = None;
                Turn::Again
            }
            Err(e) => {
                tracing::debug!("connection read failed: {e}");
                Turn::Close
            }
        },
        _ = stop.wait() => Turn::Close,
        _ = &mut timer => {
            if busy {
                return Turn::Again;
            }
            tracing::debug!(
                idle_ms = idle_timeout.as_millis() as u64,
                "closing an idle connection"
            );
            Turn::Close
        }
    }
}

/// When a connection waiting for bytes looks again: a busy one (a request in flight, a feed)
/// within a second, an idle one once it has been idle (since `idle_since`) for the idle timeout.
#[inline]
fn wait_deadline(
    now: Instant,
    busy: bool,
    idle_since: &mut Option<Instant>,
    idle_timeout: Duration,
) -> Instant {
    if busy {
        *idle_since = None;
        deadline_after(now, idle_timeout.min(BUSY_RECHECK))
    } else {
        deadline_after(*idle_since.get_or_insert(now), idle_timeout)
    }
}

/// The `FRAME_TIMEOUT` error of a frame not whole within `frame_timeout` of its first byte.
fn frame_timeout_body(frame_timeout: Duration) -> ErrorBody {
    let msg = format!(
        "the frame was not complete within {} ms of its first byte; nothing of it was executed and the connection is closed. Send each request whole, ending with a newline (or start the host with a larger --frame-timeout-ms)",
        frame_timeout.as_millis()
    );
    ErrorBody::new(ErrorCode::FrameTimeout, msg).with_typed_details(&FrameTimeoutDetails {
        frame_timeout_ms: frame_timeout.as_millis() as u64,
    })
}

/// The `FRAME_TOO_LARGE` error of a frame longer than `max_frame_bytes`.
fn frame_too_large_body(max_frame_bytes: usize) -> ErrorBody {
    let msg = format!(
        "the frame is longer than {max_frame_bytes} bytes; send smaller requests or start the host with a larger --max-frame-bytes. The connection is closed"
    );
    ErrorBody::new(ErrorCode::FrameTooLarge, msg)
        .with_typed_details(&FrameTooLargeDetails { max_frame_bytes })
}

/// The error of a connection that closed in the middle of a frame.
fn partial_frame_body() -> ErrorBody {
    ErrorBody::new(
        ErrorCode::BadRequest,
        "the connection closed in the middle of a frame; nothing of it was executed. End every request with a newline",
    )
}

/// Ends a connection: hands the ready replies not written yet to the writer, lets the replies
/// of requests already accepted reach the peer (their executions run on regardless), bounded so
/// a stuck peer cannot hold the connection forever, then closes the writer and waits for it.
async fn drain_and_close(framed: &mut Framed<'_>, writer: Writer, inflight: &Semaphore) {
    let Writer {
        out,
        later,
        close,
        task,
    } = writer;
    if let Some(rest) = framed.take_ready() {
        out.send_counted(rest);
    }
    drop(later);
    let drain = inflight.acquire_many(MAX_IN_FLIGHT_PER_CONNECTION as u32);
    let _ = tokio::time::timeout(Duration::from_secs(30), drain).await;
    let _ = close.send(());
    let _ = task.await;
}

/// Queues one frame's answer: a ready reply joins the lines the reader writes next, holding its
/// in-flight slot until written; a later one goes to the writer, which writes it when it is done.
fn take_answer(
    answer: Handled,
    permit: OwnedSemaphorePermit,
    framed: &mut Framed<'_>,
    later_tx: &mpsc::UnboundedSender<LaterReply>,
    ends: &LineEnds,
) {
    match answer {
        Handled::Ready(line) => framed.queue_ready(&line, Some(permit)),
        Handled::Replay(replay) => framed.queue_replay(&replay, ends, Some(permit)),
        // Joined to no earlier answer (never given so): nothing to write, the slot is free.
        Handled::Joined(_) => drop(permit),
        Handled::Later(fut) => {
            if let Err(mpsc::error::SendError((fut, permit))) = later_tx.send((fut, permit)) {
                // The writer is gone (the peer stopped reading): the work still runs to its
                // end, detached, as it would have with a live peer.
                tokio::spawn(async move {
                    fut.await;
                    drop(permit);
                });
            }
        }
    }
}

/// Shutdown as one connection waits for it: a flag and the connection task's waker, set by a
/// small task that waits on the host's shutdown channel once for the whole connection. Each
/// time the connection waits (once per batch) it registers its waker here with an atomic swap,
/// instead of joining and leaving the waiter list every connection of the host shares.
#[derive(Default)]
struct Stop {
    /// Set once shutdown has begun.
    stopped: AtomicBool,
    /// The connection task, woken when `stopped` is set.
    waker: AtomicWaker,
}

impl Stop {
    /// Marks shutdown begun and wakes the connection.
    fn trigger(&self) {
        self.stopped.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Resolves once shutdown has begun.
    fn wait(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.stopped.load(Ordering::Acquire) {
                return std::task::Poll::Ready(());
            }
            self.waker.register(cx.waker());
            // Set between the first look and the registration: seen now.
            if self.stopped.load(Ordering::Acquire) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
    }
}

/// An empty vector of frames made of `v`'s allocation, borrowing for any lifetime: the batch's
/// frame list is kept from batch to batch without borrowing the read buffer in between.
fn recycle<'b>(mut v: Vec<&[u8]>) -> Vec<&'b [u8]> {
    v.clear();
    // Collected in place (same size and alignment): no element is left to map.
    v.into_iter().map(|_| &[][..]).collect()
}

/// `at + after`, or a year from `at` when that is past what the clock can count (a timeout
/// given on the command line can be any number).
fn deadline_after(at: Instant, after: Duration) -> Instant {
    at.checked_add(after)
        .unwrap_or_else(|| at + Duration::from_secs(365 * 86_400))
}

/// Whether shutdown has begun (or its sender is gone), read without registering as a waiter.
fn stopping(shutdown: &watch::Receiver<bool>) -> bool {
    match shutdown.has_changed() {
        Ok(false) => false,
        Ok(true) => *shutdown.borrow(),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection waiting for shutdown is woken when it begins, whether it started waiting
    /// before (its waker registered) or after (the flag seen at once).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_waiting_for_shutdown_is_woken_when_it_begins() {
        let stop = Arc::new(Stop::default());
        let waiting = tokio::spawn({
            let stop = stop.clone();
            async move { stop.wait().await }
        });
        // Waiting, not done: nothing has triggered it.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "no shutdown yet");
        stop.trigger();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the trigger")
            .unwrap();
        // After the trigger, a new wait resolves at once.
        assert!(futures::FutureExt::now_or_never(stop.wait()).is_some());
    }

    /// The batch's frame list keeps its allocation from batch to batch, emptied.
    #[test]
    fn a_recycled_frame_list_keeps_its_allocation_and_nothing_else() {
        let buffer = b"one\ntwo\n".to_vec();
        let mut frames: Vec<&[u8]> = Vec::with_capacity(64);
        frames.extend(buffer.split(|b| *b == b'\n'));
        let at = frames.as_ptr() as usize;
        let kept: Vec<&'static [u8]> = recycle(frames);
        assert!(kept.is_empty());
        assert_eq!(kept.capacity(), 64);
        assert_eq!(kept.as_ptr() as usize, at, "the same allocation");
    }
}
