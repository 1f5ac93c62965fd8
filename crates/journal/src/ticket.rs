//! Tickets: what an appender holds until its append is durable, and the shared record of how
//! far durability has come that the flusher advances and every ticket reads.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::Error;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How far durability has come, as every ticket sees it, and who waits for more.
///
/// Waiters are kept by the sequence number they wait for, so a flush wakes exactly the tasks
/// whose appends it made durable, each once, and none of the ones still waiting.
#[derive(Debug, Default)]
pub(crate) struct Durability {
    /// Every append with a sequence number up to this one is durable (read without the lock).
    pub(super) seq: AtomicU64,
    state: Mutex<Waiting>,
    /// While the flusher gathers the next appends of the waiters it just woke: how many
    /// waiters it waits for (0 when it is not gathering). The waiter that registers as that
    /// many nudges it, once; the others, and appends meanwhile, do not wake it.
    pub(super) gather_until_waiting: AtomicUsize,
    /// The flusher's condition variable, to nudge it.
    pub(super) flusher: Arc<Condvar>,
}

#[derive(Debug, Default)]
struct Waiting {
    /// Set once a write or `fdatasync` failed: nothing after `seq` will ever be durable.
    failed: Option<Arc<str>>,
    /// The journal is gone: nothing more will become durable.
    closed: bool,
    /// The sequence number each waiter waits for, with its waker. A flat list whose room is
    /// kept between flushes: registering a waiter allocates nothing, and a flush walks it once
    /// (a few thousand entries at most, one per request in flight).
    wakers: Vec<(u64, Waker)>,
    /// The wakers a flush is about to wake, kept here between flushes for their room.
    ready: Vec<Waker>,
}

impl Durability {
    /// Nothing durable yet; `flusher` is the condition variable a gathering flusher waits on.
    pub(super) fn new(flusher: Arc<Condvar>) -> Durability {
        Durability {
            flusher,
            ..Durability::default()
        }
    }

    pub(super) fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// How many waiters are registered.
    pub(super) fn waiting(&self) -> usize {
        lock(&self.state).wakers.len()
    }

    /// Everything up to `seq` is durable: wakes whoever waited for it (after the lock is let go).
    /// Returns how many waiters it woke.
    pub(super) fn advance(&self, seq: u64) -> usize {
        let mut ready = {
            let mut w = lock(&self.state);
            self.seq.fetch_max(seq, Ordering::AcqRel);
            let w = &mut *w;
            let mut ready = std::mem::take(&mut w.ready);
            ready.extend(
                w.wakers
                    .extract_if(.., |(waited, _)| *waited <= seq)
                    .map(|(_, waker)| waker),
            );
            ready
        };
        let woken = ready.len();
        for waker in ready.drain(..) {
            waker.wake();
        }
        let mut w = lock(&self.state);
        if w.ready.capacity() < ready.capacity() {
            w.ready = ready;
        }
        woken
    }

    /// Nothing more will become durable (`failed`, or the journal is gone): wakes every waiter.
    pub(super) fn end(&self, failed: Option<Arc<str>>) {
        let all = {
            let mut w = lock(&self.state);
            match failed {
                Some(f) => w.failed = Some(f),
                None => w.closed = true,
            }
            std::mem::take(&mut w.wakers)
        };
        for (_, waker) in all {
            waker.wake();
        }
    }

    fn poll_seq(&self, seq: u64, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if self.seq() >= seq {
            return Poll::Ready(Ok(()));
        }
        let mut w = lock(&self.state);
        if self.seq() >= seq {
            return Poll::Ready(Ok(()));
        }
        if let Some(f) = &w.failed {
            return Poll::Ready(Err(Error::Failed(f.clone())));
        }
        if w.closed {
            return Poll::Ready(Err(Error::Closed));
        }
        // A future polled again before its flush (woken by something else) registers again;
        // the flush wakes it twice, which is harmless, and the list never outlives the flush.
        w.wakers.push((seq, cx.waker().clone()));
        let waiting = w.wakers.len();
        drop(w);
        if self.gather_until_waiting.load(Ordering::Relaxed) == waiting {
            self.flusher.notify_one();
        }
        Poll::Pending
    }
}

/// Resolves once an append is durable (written and `fdatasync`ed), or the journal failed.
///
/// Await it (it is a future) from async code, or call [`Ticket::wait`] from a thread that may
/// block. Cloning is cheap: copies of a request that joined can wait on the same ticket.
#[derive(Clone, Debug)]
pub struct Ticket {
    pub(super) seq: u64,
    pub(super) durability: Arc<Durability>,
}

impl Ticket {
    /// The append's sequence number (appends are numbered in the order they were queued).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether the append is already durable.
    pub fn is_durable(&self) -> bool {
        self.durability.seq() >= self.seq
    }

    /// Waits, blocking this thread (never call it on an async runtime's worker).
    pub fn wait(self) -> Result<(), Error> {
        futures::executor::block_on(self.durable())
    }

    /// Waits without blocking: resolves when the append is durable.
    pub fn durable(self) -> Durably {
        Durably(self)
    }
}

/// The future of [`Ticket::durable`]: no allocation, and woken only once its append's flush
/// is done (or the journal failed).
#[derive(Debug)]
pub struct Durably(Ticket);

impl std::future::Future for Durably {
    type Output = Result<(), Error>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.durability.poll_seq(self.0.seq, cx)
    }
}

impl std::future::IntoFuture for Ticket {
    type Output = Result<(), Error>;
    type IntoFuture = Durably;

    fn into_future(self) -> Self::IntoFuture {
        self.durable()
    }
}
