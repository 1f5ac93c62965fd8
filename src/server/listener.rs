//! Accepting connections and serving each one: the connection limit, the in-flight window,
//! and shutdown.
//!
//! Shaped after mini-redis's `server.rs`: a semaphore bounds connections (beyond the limit the
//! accept waits until one closes), and shutdown is a watch channel every loop selects on. Each
//! connection admits at most [`MAX_IN_FLIGHT_PER_CONNECTION`] requests whose replies are not
//! written yet, so a peer that sends without reading cannot make the host hold more.

use std::sync::Arc;
use std::time::Duration;

use interprocess::local_socket::tokio::{prelude::*, Listener, Stream};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use super::connection::{Framed, LaterReply, WriterInput};
use super::{current_uid, Connection, Limits, Outbound, Service};
use crate::host::Handled;
use crate::protocol::{
    ErrorBody, ErrorCode, FrameRead, Outcome, ReceiptKind, MAX_IN_FLIGHT_PER_CONNECTION,
};

/// Accepts connections until `stop_accepting` flips, at most `limits.max_connections` at once
/// (beyond that the accept waits, like mini-redis, until a connection closes), refusing peers
/// of another user, and serves each on its own task in `tracker`, so shutdown can wait for
/// their replies to drain.
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
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => p.expect("the connection semaphore is never closed"),
            _ = stop_accepting.wait_for(|s| *s) => break,
        };
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
        match stream.peer_creds().map(|c| c.euid()) {
            Ok(Some(uid)) if uid != my_uid => {
                tracing::warn!(peer_uid = uid, "refused a connection from another user");
                continue;
            }
            _ => {}
        }
        let service = service.clone();
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            serve_connection(stream, service, limits, shutdown).await;
            drop(permit);
        });
    }
    drop(listener);
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
    mut shutdown: watch::Receiver<bool>,
) {
    let stream = Arc::new(stream);
    let mut framed = Framed::new(&stream, limits.max_frame_bytes);
    let (out, lines) = mpsc::unbounded_channel::<Outbound>();
    let (later_tx, later) = mpsc::unbounded_channel::<LaterReply>();
    let (close_tx, close) = oneshot::channel::<()>();
    let writer = framed.spawn_writer(WriterInput {
        lines,
        later,
        close,
    });
    let conn = Connection {
        out: out.clone(),
        shutdown: shutdown.clone(),
    };
    let inflight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let run_id = service.run_id().to_owned();
    let mut answers: Vec<Handled> = Vec::new();
    let error_line = |code: ErrorCode, message: &str| {
        Outcome::err(&ErrorBody::new(code, message)).reply_line(None, &run_id, ReceiptKind::None)
    };
    loop {
        // Before waiting — for more input, or for an in-flight slot that only a written reply
        // frees — write what is ready (the peer may be waiting for it).
        if framed.has_ready()
            && (!framed.has_buffered_frame() || inflight.available_permits() == 0)
            && framed.write_ready().await.is_err()
        {
            break;
        }
        // Waiting is raced against shutdown; what is at hand (a free slot, a whole line already
        // buffered) is taken at once, after a glance at the shutdown flag — registering with
        // the shutdown channel that every connection shares would cost more than the frame.
        if stopping(&shutdown) {
            break;
        }
        // Whole lines already buffered, with slots free for them, are handled together.
        let free = inflight.available_permits();
        if free > 1 {
            let mut frames: Vec<&[u8]> = Vec::new();
            let used = framed.buffered_frames(free, &mut frames);
            if frames.len() > 1 {
                // Free now; awaiting them still counts against this task's scheduling budget.
                let mut permits = inflight
                    .clone()
                    .acquire_many_owned(frames.len() as u32)
                    .await
                    .expect("the in-flight semaphore is never closed");
                service.handle_frames(&frames, &conn, &mut answers);
                framed.consume(used);
                for answer in answers.drain(..) {
                    let permit = permits.split(1).expect("one slot per frame");
                    take_answer(answer, permit, &mut framed, &later_tx);
                }
                continue;
            }
        }
        let permit = if inflight.available_permits() > 0 {
            // Free now; awaiting it (rather than trying) still counts against this task's
            // scheduling budget, so a connection with a full buffer yields to the others.
            inflight
                .clone()
                .acquire_owned()
                .await
                .expect("the in-flight semaphore is never closed")
        } else {
            tokio::select! {
                p = inflight.clone().acquire_owned() => p.expect("the in-flight semaphore is never closed"),
                _ = shutdown.wait_for(|s| *s) => break,
            }
        };
        let read = if framed.has_buffered_frame() {
            framed.read_frame().await
        } else {
            tokio::select! {
                r = framed.read_frame() => r,
                _ = shutdown.wait_for(|s| *s) => break,
            }
        };
        match read {
            Ok(FrameRead::Frame) => {
                let answer = service.handle_frame(framed.frame(), &conn);
                take_answer(answer, permit, &mut framed, &later_tx);
            }
            Ok(FrameRead::TooLarge) => {
                let msg = format!(
                    "the frame is longer than {} bytes; send smaller requests or start the host with a larger --max-frame-bytes. The connection is closed",
                    framed.max_frame_bytes()
                );
                framed.queue_ready(&error_line(ErrorCode::FrameTooLarge, &msg), None);
                break;
            }
            Ok(FrameRead::Partial) => {
                framed.queue_ready(
                    &error_line(
                        ErrorCode::BadRequest,
                        "the connection closed in the middle of a frame; nothing of it was executed. End every request with a newline",
                    ),
                    None,
                );
                break;
            }
            Ok(FrameRead::Eof) => break,
            Err(e) => {
                tracing::debug!("connection read failed: {e}");
                break;
            }
        }
    }
    // Hand the ready replies not written yet to the writer, which writes them before closing.
    if let Some(rest) = framed.take_ready() {
        let _ = out.send(rest);
    }
    drop(later_tx);
    // Let the replies of requests already accepted reach the peer (their executions run on
    // regardless), bounded so a stuck peer cannot hold the connection forever.
    let drain = inflight.acquire_many(MAX_IN_FLIGHT_PER_CONNECTION as u32);
    let _ = tokio::time::timeout(Duration::from_secs(30), drain).await;
    let _ = close_tx.send(());
    let _ = writer.await;
}

/// Queues one frame's answer: a ready reply joins the lines the reader writes next, holding its
/// in-flight slot until written; a later one goes to the writer, which writes it when it is done.
fn take_answer(
    answer: Handled,
    permit: OwnedSemaphorePermit,
    framed: &mut Framed<'_>,
    later_tx: &mpsc::UnboundedSender<LaterReply>,
) {
    match answer {
        Handled::Ready(line) => framed.queue_ready(&line, Some(permit)),
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

/// Whether shutdown has begun (or its sender is gone), read without registering as a waiter.
fn stopping(shutdown: &watch::Receiver<bool>) -> bool {
    match shutdown.has_changed() {
        Ok(false) => false,
        Ok(true) => *shutdown.borrow(),
        Err(_) => true,
    }
}
