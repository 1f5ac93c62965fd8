//! One connection's bytes: frames in, with the frame limit, and reply lines out.
//!
//! Shaped after mini-redis's `Connection`: [`Framed`] owns the connection's read buffer, the
//! frame being read and the replies ready to write, so the loop that drives it (in
//! `listener`) deals in frames and lines, never in buffers. Replies that need waiting (an
//! execution, a slow read) are written by a writer task instead ([`Framed::spawn_writer`]), so
//! a slow reply never holds up the ones behind it. Both write whole batches under one lock, so
//! lines never interleave.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::net::UnixStream;

use interprocess::local_socket::tokio::Stream;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncBufReadExt, BufReader, Interest};
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

use crate::host::Replay;
use crate::protocol::{read_frame, FrameRead, LineEnds};

/// The read buffer's size, and the write batch's starting capacity: room for a pipelined
/// burst of small frames, read or written with one system call.
const BUFFER_BYTES: usize = 64 * 1024;

/// The writer task stops gathering replies and writes once its batch is this large.
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// A line to write, and the in-flight slot it frees once written.
pub struct Outbound {
    /// The bytes, newline included.
    pub line: Vec<u8>,
    /// Released after the line is written, so a peer that does not read cannot make the host
    /// queue more than the in-flight limit of replies.
    pub permit: Option<OwnedSemaphorePermit>,
}

/// The reply bytes one connection has waiting to be written — the reader's ready replies, the
/// lines services send on their own (event feeds), the writer's batch — against
/// `--max-pending-reply-bytes` (SPEC §10). Everyone who queues bytes for the peer adds them,
/// the writes take them off, and whoever must not queue more past the bound waits here until
/// the peer reads.
pub(super) struct ReplyBytes {
    /// Bytes queued and not yet written.
    queued: AtomicUsize,
    /// `--max-pending-reply-bytes`.
    max: usize,
    /// Set when the connection's writer has ended: nothing queued will be written any more,
    /// so nobody waits for it.
    closed: std::sync::atomic::AtomicBool,
    /// Woken when the queued bytes fall below the bound, or the writer ends.
    drained: Notify,
}

impl ReplyBytes {
    pub(super) fn new(max: usize) -> ReplyBytes {
        ReplyBytes {
            queued: AtomicUsize::new(0),
            max: max.max(1),
            closed: false.into(),
            drained: Notify::new(),
        }
    }

    /// Counts `n` more bytes waiting for the peer.
    #[inline]
    pub(super) fn add(&self, n: usize) {
        self.queued.fetch_add(n, Ordering::AcqRel);
    }

    /// Takes `n` written bytes off; wakes those waiting when this brings the count below the
    /// bound.
    #[inline]
    pub(super) fn written(&self, n: usize) {
        let before = self.queued.fetch_sub(n, Ordering::AcqRel);
        if before >= self.max && before - n < self.max {
            self.drained.notify_waiters();
        }
    }

    /// How many more bytes may be queued before the bound is reached (0 at or past it).
    #[inline]
    pub(super) fn room(&self) -> usize {
        self.max.saturating_sub(self.queued.load(Ordering::Acquire))
    }

    /// Whether the writer has ended.
    #[inline]
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the writer ended and wakes everyone waiting.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// Waits until there is room below the bound (or the writer ended).
    pub(super) async fn wait_for_room(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.room() > 0 || self.closed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// The queue of lines a service sends to its peer on its own (an event feed, a reply that
/// must precede them), counted against the connection's reply-byte bound: a feed waits for
/// room ([`Outbox::wait_for_room`]) instead of piling up lines a peer does not read.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outbound>,
    bytes: Arc<ReplyBytes>,
}

impl Outbox {
    pub(super) fn new(tx: mpsc::UnboundedSender<Outbound>, bytes: Arc<ReplyBytes>) -> Outbox {
        Outbox { tx, bytes }
    }

    /// Queues a line for the writer, counting its bytes; fails when the writer is gone.
    pub fn send(&self, o: Outbound) -> Result<(), mpsc::error::SendError<Outbound>> {
        // Counted before the writer can see it, so its write never takes off more than was
        // added.
        let n = o.line.len();
        self.bytes.add(n);
        self.tx.send(o).inspect_err(|_| self.bytes.written(n))
    }

    /// Hands the writer lines whose bytes are already counted (the reader's unwritten ones).
    pub(super) fn send_counted(&self, o: Outbound) {
        let _ = self.tx.send(o);
    }

    /// Resolves once the writer is gone (the peer left or stopped reading).
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// How many more bytes may be queued before the connection's bound (0 at or past it).
    pub fn room(&self) -> usize {
        self.bytes.room()
    }

    /// Waits until the queued bytes are below the connection's bound (or the writer ended).
    pub async fn wait_for_room(&self) {
        self.bytes.wait_for_room().await
    }
}

/// What a service may use of its connection: the queue to the writer, for lines it sends on
/// its own (an event feed), and the shutdown flag, so such a feed ends with the host.
#[derive(Clone)]
pub struct Connection {
    /// Lines to write to the peer.
    pub out: Outbox,
    /// Flips to `true` when the host shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// Feeds this connection carries (event subscriptions): a connection with one is never
    /// idle, and a service can cap how many one connection opens.
    pub(super) feeds: Arc<AtomicUsize>,
}

impl Connection {
    /// Counts one more feed on this connection unless it already carries `max`; returns
    /// whether it was counted. A feed lasts as long as its connection.
    pub fn add_feed(&self, max: usize) -> bool {
        self.feeds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Whether a feed runs on this connection (it then is never closed as idle).
    pub(super) fn has_feed(&self) -> bool {
        self.feeds.load(Ordering::Acquire) > 0
    }
}

/// A reply that needs waiting (an execution, a slow read), and the in-flight slot it frees.
pub(super) type LaterReply = (BoxFuture<'static, Vec<u8>>, OwnedSemaphorePermit);

/// The channels the writer task reads from.
pub(super) struct WriterInput {
    /// Lines a service sends on its own, and what the reader leaves unwritten when it stops.
    pub(super) lines: mpsc::UnboundedReceiver<Outbound>,
    /// Replies still being worked out.
    pub(super) later: mpsc::UnboundedReceiver<LaterReply>,
    /// Fires when the reader is done: write everything owed, then end.
    pub(super) close: oneshot::Receiver<()>,
}

/// One connection's stream with its buffers: frames are read from it (at most
/// `max_frame_bytes` each) and ready replies gathered for it, written in one go.
pub(super) struct Framed<'s> {
    /// The socket, shared with the writer task (`&Socket` both reads and writes).
    stream: &'s Arc<Socket>,
    /// Bytes read and not yet taken; whole lines in it are frames at hand.
    reader: BufReader<ReadSide<'s>>,
    /// The frame being read. It survives a cancelled read, which is what makes reading
    /// cancel-safe: bytes move from `reader` into it as they are taken, so none are lost.
    frame: Vec<u8>,
    /// `frame` holds a whole frame already handed out; the next read starts a new one.
    frame_done: bool,
    /// Ready replies not yet written.
    ready: Vec<u8>,
    /// The in-flight slots those replies free once written, merged into one permit: freed
    /// together with one taking of the semaphore's lock, not one per reply.
    ready_permit: Option<OwnedSemaphorePermit>,
    /// Held while writing: the writer task writes to the same stream, and a line is always
    /// written whole.
    write_lock: Arc<tokio::sync::Mutex<()>>,
    /// `--max-frame-bytes`.
    max_frame_bytes: usize,
    /// How long a write may wait for the peer to take bytes before the peer counts as gone:
    /// a peer that never reads must not hold its connection slot forever.
    write_stall: std::time::Duration,
    /// Every reply byte of this connection not yet written, against the bound.
    bytes: Arc<ReplyBytes>,
    /// Bytes queued in `ready` and not yet added to `bytes`: a batch's replies are counted
    /// with one atomic addition ([`Framed::count_queued`]), not one per reply.
    uncounted: usize,
}

// What the per-frame path calls is `#[inline]`: the loop calling it is generic over the service
// and compiled elsewhere, and these were inline code in it before they had a type.
impl<'s> Framed<'s> {
    /// Buffers for `stream`, which the caller keeps alive for as long as this is used.
    pub(super) fn new(
        stream: &'s Arc<Socket>,
        max_frame_bytes: usize,
        write_stall: std::time::Duration,
        bytes: Arc<ReplyBytes>,
    ) -> Framed<'s> {
        Framed {
            stream,
            reader: BufReader::with_capacity(BUFFER_BYTES, ReadSide(stream)),
            frame: Vec::with_capacity(1024),
            frame_done: false,
            ready: Vec::with_capacity(BUFFER_BYTES),
            ready_permit: None,
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
            max_frame_bytes,
            write_stall,
            bytes,
            uncounted: 0,
        }
    }

    /// The frame limit this connection enforces.
    #[inline]
    pub(super) fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// Starts the task that writes the lines and later replies it is sent, batching whatever
    /// is ready into one write; see [`write_loop`].
    pub(super) fn spawn_writer(&self, input: WriterInput) -> JoinHandle<()> {
        tokio::spawn(write_loop(
            self.stream.clone(),
            self.write_lock.clone(),
            self.write_stall,
            self.bytes.clone(),
            input,
        ))
    }

    /// Whether a whole frame is already buffered, so reading it will not wait for the peer.
    #[inline]
    pub(super) fn has_buffered_frame(&self) -> bool {
        memchr::memchr(b'\n', self.reader.buffer()).is_some()
    }

    /// Up to `max` whole frames already buffered, pushed to `frames` without reading or
    /// copying (a trailing `\r` is dropped). Stops before a line over the frame limit, which
    /// [`Framed::read_frame`] then refuses. For each frame, `ends` gets how many bytes the
    /// frames up to it span: pass that to [`Framed::consume`] once they are handled.
    #[inline]
    pub(super) fn buffered_frames<'a>(
        &'a self,
        max: usize,
        frames: &mut Vec<&'a [u8]>,
        ends: &mut Vec<usize>,
    ) {
        let buffered = self.reader.buffer();
        let mut used = 0;
        // One pass finds every newline of the buffer (rather than a search started per frame).
        for newline in memchr::memchr_iter(b'\n', buffered) {
            if frames.len() == max {
                break;
            }
            let frame = &buffered[used..newline];
            let frame = frame.strip_suffix(b"\r").unwrap_or(frame);
            if frame.len() > self.max_frame_bytes {
                break;
            }
            frames.push(frame);
            used = newline + 1;
            ends.push(used);
        }
    }

    /// Drops `used` bytes of frames taken with [`Framed::buffered_frames`].
    #[inline]
    pub(super) fn consume(&mut self, used: usize) {
        self.reader.consume(used);
    }

    /// Reads the next frame; on [`FrameRead::Frame`] it is in [`Framed::frame`] until the next
    /// read. Cancel-safe: a cancelled read keeps what it took, and the next one goes on.
    pub(super) async fn read_frame(&mut self) -> io::Result<FrameRead> {
        if self.frame_done {
            self.frame.clear();
            self.frame_done = false;
        }
        let read = read_frame(&mut self.reader, &mut self.frame, self.max_frame_bytes).await;
        self.frame_done = matches!(read, Ok(FrameRead::Frame));
        read
    }

    /// The frame the last read returned (without its newline).
    #[inline]
    pub(super) fn frame(&self) -> &[u8] {
        &self.frame
    }

    /// Queues a reply line to be written with the next [`Framed::write_ready`], and the
    /// in-flight slot it frees once written.
    #[inline]
    pub(super) fn queue_ready(&mut self, line: &[u8], permit: Option<OwnedSemaphorePermit>) {
        self.uncounted += line.len();
        self.ready.extend_from_slice(line);
        self.hold(permit);
    }

    /// Queues a replayed copy's reply, written straight into the bytes sent next (the same
    /// bytes [`Replay::line`] gives), and the in-flight slot it frees once written.
    #[inline]
    pub(super) fn queue_replay(
        &mut self,
        replay: &Replay,
        ends: &LineEnds,
        permit: Option<OwnedSemaphorePermit>,
    ) {
        let before = self.ready.len();
        replay.write_ending(&mut self.ready, ends);
        self.uncounted += self.ready.len() - before;
        self.hold(permit);
    }

    /// Counts the replies queued since the last call against the connection's reply-byte
    /// bound. The loop that queues them calls it before it next looks at the bound; writing
    /// or handing the replies on counts them first too.
    #[inline]
    pub(super) fn count_queued(&mut self) {
        if self.uncounted > 0 {
            self.bytes.add(std::mem::take(&mut self.uncounted));
        }
    }

    /// Keeps in-flight slots (every one from this connection's semaphore) until the ready
    /// replies are written: a pipelined batch hands the slots of all its ready replies at once.
    #[inline]
    pub(super) fn hold(&mut self, permit: Option<OwnedSemaphorePermit>) {
        match (&mut self.ready_permit, permit) {
            (Some(held), Some(permit)) => held.merge(permit),
            (held @ None, permit) => *held = permit,
            (Some(_), None) => {}
        }
    }

    /// Whether replies wait to be written.
    #[inline]
    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Whether part of a frame has arrived (buffered or taken) without its newline yet.
    #[inline]
    pub(super) fn has_partial(&self) -> bool {
        !self.reader.buffer().is_empty() || (!self.frame_done && !self.frame.is_empty())
    }

    /// Waits until the peer sends something (or leaves: `Ok(0)`), without taking it.
    /// Cancel-safe. Call it only when nothing is buffered.
    pub(super) async fn wait_for_bytes(&mut self) -> io::Result<usize> {
        Ok(self.reader.fill_buf().await?.len())
    }

    /// Writes the ready replies in one go and frees their slots. Fails when the peer is gone,
    /// or takes no bytes for the write-stall time.
    /// Not cancel-safe (a line could be cut): the caller awaits it without racing it.
    ///
    /// When the writer task is not writing and the socket takes everything at once (the usual
    /// case), the replies are written right here: no lock is awaited, no timer armed and no
    /// clock read. Only what the socket does not take at once is waited for, under the
    /// write-stall timeout, still holding the write lock so no other line gets in between.
    pub(super) async fn write_ready(&mut self) -> io::Result<()> {
        self.count_queued();
        let len = self.ready.len();
        let mut done = 0;
        let mut guard = self.write_lock.try_lock().ok();
        if guard.is_some() {
            while done < len {
                match self.stream.try_write(&self.ready[done..]) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        drop(guard);
                        self.written_all();
                        return Err(e);
                    }
                }
            }
        }
        let written = if done == len {
            Ok(())
        } else {
            let rest = &self.ready[done..];
            let (stream, lock) = (self.stream, &self.write_lock);
            let write = async {
                let _guard = match guard.take() {
                    Some(held) => held,
                    None => lock.lock().await,
                };
                stream.write_all(rest).await
            };
            tokio::time::timeout(self.write_stall, write)
                .await
                .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
        };
        drop(guard);
        self.written_all();
        written
    }

    /// Takes the ready replies off the bound and frees their slots, once they are written (or
    /// never will be).
    fn written_all(&mut self) {
        self.bytes.written(self.ready.len());
        self.ready.clear();
        self.ready_permit = None;
    }

    /// The ready replies not yet written, taken out (their slots are freed), for the writer
    /// task to write before it closes.
    pub(super) fn take_ready(&mut self) -> Option<Outbound> {
        self.count_queued();
        self.ready_permit = None;
        (!self.ready.is_empty()).then(|| Outbound {
            line: std::mem::take(&mut self.ready),
            permit: None,
        })
    }
}

/// A connection's socket, registered with the runtime for reading only.
///
/// A socket registered for writing as well (as Tokio's own streams are) is signalled each time
/// the peer reads a reply and frees room in it: the host's event loop then wakes for nothing
/// (a third of the events a half-loaded host saw, one wake-up in twelve carrying nothing
/// else). Writes here are plain non-blocking writes; only a write the socket does not take at
/// once (a peer that stops reading) waits for room, through a registration for writing made
/// for that wait alone ([`Socket::write_all`]).
pub(super) struct Socket {
    fd: AsyncFd<UnixStream>,
}

impl Socket {
    /// Takes the accepted stream over, registered for reading only.
    pub(super) fn new(stream: Stream) -> io::Result<Socket> {
        let Stream::UdSocket(stream) = stream;
        let stream = UnixStream::from(OwnedFd::try_from(stream)?);
        stream.set_nonblocking(true)?;
        // SAFETY: the `UnixStream` owns its descriptor and is owned by the `AsyncFd` from here
        // on, so the descriptor stays open, and the same, for as long as it is registered.
        let fd = unsafe { AsyncFd::register_with_interest(stream, Interest::READABLE) }?;
        Ok(Socket { fd })
    }

    /// Writes what the socket takes now, without waiting.
    #[inline]
    pub(super) fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut stream = self.fd.get_ref();
        stream.write(bytes)
    }

    /// Writes all of `bytes`, waiting for room whenever the socket is full.
    pub(super) async fn write_all(&self, mut bytes: &[u8]) -> io::Result<()> {
        // Registered for writing only while a write waits for room.
        let mut room: Option<AsyncFd<OwnedFd>> = None;
        while !bytes.is_empty() {
            let wrote = match &room {
                None => self.try_write(bytes),
                Some(room) => {
                    let mut ready = room.writable().await?;
                    // Readiness seen stale (the write would block) is cleared, and the
                    // next room the peer frees is signalled afresh.
                    match ready.try_io(|_| self.try_write(bytes)) {
                        Ok(wrote) => wrote,
                        Err(_would_block) => continue,
                    }
                }
            };
            match wrote {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if room.is_none() {
                        let dup = self.fd.get_ref().as_fd().try_clone_to_owned()?;
                        // SAFETY: the `OwnedFd` owns the duplicate descriptor and is owned
                        // by the `AsyncFd`, so it stays open, and the same, while registered.
                        let waiter =
                            unsafe { AsyncFd::register_with_interest(dup, Interest::WRITABLE) }?;
                        room = Some(waiter);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The reading side of a connection's socket: a read that fills less than the room it was
/// given marks the socket as drained. The peer's next bytes wake the connection as before, but
/// the read after a batch no longer asks the kernel once more only to hear that nothing is
/// there (one system call per batch saved). The mark is the runtime's own readiness, cleared
/// against the readiness seen before the read (as Tokio's own streams do), so bytes arriving
/// meanwhile are never missed.
pub(super) struct ReadSide<'s>(&'s Socket);

impl tokio::io::AsyncRead for ReadSide<'_> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let fd = &self.0.fd;
        loop {
            let mut ready = std::task::ready!(fd.poll_read_ready(cx))?;
            let room = buf.initialize_unfilled();
            let wanted = room.len();
            let mut got = None;
            // `try_io` clears the readiness it saw when the closure says `WouldBlock`: a short
            // read says so after keeping what it read.
            let read = ready.try_io(|fd| {
                let mut stream = fd.get_ref();
                let n = stream.read(room)?;
                got = Some(n);
                if n > 0 && n < wanted {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(n)
                }
            });
            match (read, got) {
                (Ok(Ok(n)), _) | (Err(_), Some(n)) => {
                    buf.advance(n);
                    return std::task::Poll::Ready(Ok(()));
                }
                (Ok(Err(e)), _) if e.kind() == io::ErrorKind::Interrupted => {}
                (Ok(Err(e)), _) => return std::task::Poll::Ready(Err(e)),
                // Nothing there after all: the readiness is cleared, wait for the next.
                (Err(_), None) => {}
            }
        }
    }
}

/// Writes `bytes` a chunk of [`MAX_BATCH_BYTES`] at a time, letting the runtime worker serve
/// other connections between chunks: an operator's reply of hundreds of megabytes, to a peer
/// reading as fast as it can, would otherwise hold one worker for as long as the socket keeps
/// taking bytes. Returns whether everything was written.
async fn write_in_chunks(stream: &Socket, bytes: &[u8]) -> bool {
    let large = bytes.len() > MAX_BATCH_BYTES;
    for chunk in bytes.chunks(MAX_BATCH_BYTES) {
        if stream.write_all(chunk).await.is_err() {
            return false;
        }
        if large {
            tokio::task::yield_now().await;
        }
    }
    true
}

/// A pending reply as the writer polls it: the line (counted against the reply-byte bound
/// from the moment it exists), then the slot is freed once written.
async fn owed(
    fut: BoxFuture<'static, Vec<u8>>,
    permit: OwnedSemaphorePermit,
    bytes: Arc<ReplyBytes>,
) -> (Vec<u8>, OwnedSemaphorePermit) {
    let line = fut.await;
    bytes.add(line.len());
    (line, permit)
}

/// Adds a line to the batch being gathered. A line arriving first is taken as the batch itself,
/// not copied: an operator's reply can be hundreds of megabytes, and copying it would hold up a
/// runtime worker.
fn gather(batch: &mut Vec<u8>, line: Vec<u8>) {
    if batch.is_empty() && line.len() > MAX_BATCH_BYTES {
        *batch = line;
    } else {
        batch.extend_from_slice(&line);
    }
}

/// Writes queued lines and the replies of pending futures as they complete, batching whatever
/// is ready into one write. Ends when told to close (after writing everything queued before
/// that and every pending reply) or when the peer is gone; pending replies then still run to
/// their end, detached, so no work is ever cancelled by a connection.
async fn write_loop(
    stream: Arc<Socket>,
    write_lock: Arc<tokio::sync::Mutex<()>>,
    write_stall: std::time::Duration,
    bytes: Arc<ReplyBytes>,
    input: WriterInput,
) {
    write_lines(stream, write_lock, write_stall, &bytes, input).await;
    // Nothing queued will be written any more: nobody may wait for it.
    bytes.close();
}

/// [`write_loop`] until it ends.
async fn write_lines(
    stream: Arc<Socket>,
    write_lock: Arc<tokio::sync::Mutex<()>>,
    write_stall: std::time::Duration,
    bytes: &Arc<ReplyBytes>,
    input: WriterInput,
) {
    let WriterInput {
        lines: mut rx,
        later: mut later_rx,
        mut close,
    } = input;
    let mut pending = FuturesUnordered::new();
    let mut batch: Vec<u8> = Vec::with_capacity(BUFFER_BYTES);
    let mut permits = Vec::new();
    let mut closing = false;
    let mut later_open = true;
    loop {
        batch.clear();
        if closing {
            while let Ok((fut, permit)) = later_rx.try_recv() {
                pending.push(owed(fut, permit, bytes.clone()));
            }
            while let Ok(o) = rx.try_recv() {
                gather(&mut batch, o.line);
                permits.push(o.permit);
            }
            if batch.is_empty() {
                if pending.is_empty() {
                    return;
                }
                // Replies still owed: wait for the next one.
                if let Some((line, permit)) = pending.next().await {
                    gather(&mut batch, line);
                    permits.push(Some(permit));
                }
            }
        } else {
            tokio::select! {
                biased;
                o = rx.recv() => match o {
                    Some(o) => {
                        gather(&mut batch, o.line);
                        permits.push(o.permit);
                    }
                    None => closing = true,
                },
                Some((line, permit)) = pending.next(), if !pending.is_empty() => {
                    gather(&mut batch, line);
                    permits.push(Some(permit));
                }
                l = later_rx.recv(), if later_open => match l {
                    Some((fut, permit)) => pending.push(owed(fut, permit, bytes.clone())),
                    None => later_open = false,
                },
                _ = &mut close => closing = true,
            }
        }
        // Take whatever else is ready without waiting, within the reply-byte bound (the
        // batch's own bytes count against it: a peer that does not read is owed no more).
        while batch.len() < MAX_BATCH_BYTES && bytes.room() > 0 {
            if let Ok((fut, permit)) = later_rx.try_recv() {
                pending.push(owed(fut, permit, bytes.clone()));
                continue;
            }
            if let Ok(o) = rx.try_recv() {
                gather(&mut batch, o.line);
                permits.push(o.permit);
                continue;
            }
            match futures::FutureExt::now_or_never(pending.next()) {
                Some(Some((line, permit))) => {
                    gather(&mut batch, line);
                    permits.push(Some(permit));
                }
                _ => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let write = async {
            let _guard = write_lock.lock().await;
            write_in_chunks(&stream, &batch).await
        };
        // A peer that takes nothing for this long counts as gone.
        let written = tokio::time::timeout(write_stall, write)
            .await
            .unwrap_or(false);
        bytes.written(batch.len());
        permits.clear();
        if batch.capacity() > 4 * MAX_BATCH_BYTES {
            // A large reply was written as it came: free it off the runtime's workers (freeing
            // hundreds of megabytes takes milliseconds) and go back to a small batch.
            let big = std::mem::replace(&mut batch, Vec::with_capacity(BUFFER_BYTES));
            tokio::task::spawn_blocking(move || drop(big));
        }
        if !written {
            // The peer is gone; what it asked for still runs to its end.
            while let Ok((fut, permit)) = later_rx.try_recv() {
                pending.push(owed(fut, permit, bytes.clone()));
            }
            if !pending.is_empty() {
                tokio::spawn(async move { while pending.next().await.is_some() {} });
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_at_the_bound_wakes_when_the_peer_reads_or_the_writer_ends() {
        let bytes = Arc::new(ReplyBytes::new(100));
        bytes.add(60);
        assert_eq!(bytes.room(), 40);
        bytes.add(60);
        assert_eq!(bytes.room(), 0, "past the bound there is no room");
        // Waits while the writer has written only part of it, wakes once below the bound.
        let waiter = tokio::spawn({
            let bytes = bytes.clone();
            async move { bytes.wait_for_room().await }
        });
        tokio::task::yield_now().await;
        bytes.written(10);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "110 of 100 bytes: still at the bound"
        );
        bytes.written(60);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken below the bound")
            .unwrap();
        assert_eq!(bytes.room(), 50);

        // A writer that ends wakes whoever waits, whatever is still counted.
        bytes.add(100);
        let waiter = tokio::spawn({
            let bytes = bytes.clone();
            async move { bytes.wait_for_room().await }
        });
        tokio::task::yield_now().await;
        bytes.close();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken when the writer ends")
            .unwrap();
        assert!(bytes.is_closed());
    }
}
