//! Event subscriptions: the host's bus moved to one subscriber within its budget, or
//! coalesced `changed` frames.

use std::sync::Arc;

use tokio::sync::{broadcast, watch, Semaphore};

use super::{bad_params, MAX_COALESCE_MS, MIN_COALESCE_MS, SUBSCRIBER_BUDGET};
use crate::events::{AtCache, Event, Subscription};
use crate::host::operator_reads::changed_since;
use crate::host::Host;
use crate::protocol::introspection::{LaggedEvent, SubscribeParams};
use crate::protocol::{now_millis, ErrorBody};
use crate::server::{Outbound, Outbox};

pub(super) fn checked_subscribe(p: SubscribeParams) -> Result<SubscribeParams, ErrorBody> {
    match p.coalesce_ms {
        Some(ms) if !(MIN_COALESCE_MS..=MAX_COALESCE_MS).contains(&ms) => Err(bad_params(
            "subscribe",
            format_args!(
                "coalesceMs must be between {MIN_COALESCE_MS} and {MAX_COALESCE_MS} (got {ms})"
            ),
        )),
        _ => Ok(p),
    }
}

/// Sends one `changed` frame per `every` at most, and only when events were published since
/// the last one. Reads the bus's shared seq without the lock; takes the host's lock only to
/// copy the counters and receipt counts of a frame it sends. A frame is not sent while the
/// previous one is unwritten: the change stays pending and the next frame covers it, so a
/// console that stops reading holds at most one frame in the host.
pub(super) async fn forward_changes(
    host: Host,
    published: Arc<std::sync::atomic::AtomicU64>,
    start_seq: u64,
    every: std::time::Duration,
    out: Outbox,
    mut shutdown: watch::Receiver<bool>,
) {
    let unwritten = Arc::new(Semaphore::new(1));
    let mut sent_seq = start_seq;
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            biased;
            _ = out.closed() => break,
            _ = shutdown.wait_for(|s| *s) => break,
            _ = ticks.tick() => {
                if published.load(std::sync::atomic::Ordering::Relaxed) == sent_seq {
                    continue;
                }
                let Ok(permit) = unwritten.clone().try_acquire_owned() else {
                    continue;
                };
                let changed = changed_since(&host, sent_seq);
                let to_seq = changed.to_seq;
                let line = Event {
                    seq: to_seq,
                    at: now_millis(),
                    kind: "changed",
                    data: serde_json::to_value(changed).expect("a changed frame serialises").into(),
                }
                .to_line();
                sent_seq = to_seq;
                if out.send(Outbound { line, permit: Some(permit) }).is_err() {
                    break;
                }
            }
        }
    }
}

fn lagged_line(seq: u64, missed: u64) -> Vec<u8> {
    Event {
        seq,
        at: now_millis(),
        kind: "lagged",
        data: serde_json::to_value(LaggedEvent { missed })
            .expect("a lagged frame serialises")
            .into(),
    }
    .to_line()
}

/// Moves one subscriber's events from the host's bus to its connection's writer, within
/// [`SUBSCRIBER_BUDGET`] unwritten bytes and the connection's reply-byte bound (SPEC §10):
/// at the bound it waits for the peer to read while the bus moves on, and what it missed is
/// told as `lagged`. Never blocks the publisher: broadcast sends do not wait, and this task
/// only ever drops what the subscriber cannot take.
pub(super) async fn forward_events(
    mut rx: Subscription,
    start_seq: u64,
    out: Outbox,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut feed = Feed {
        budget: Arc::new(Semaphore::new(SUBSCRIBER_BUDGET)),
        missed: 0,
        last_seq: start_seq,
        batch: Vec::new(),
        permit: None,
        at: AtCache::default(),
    };
    loop {
        if out.room() == 0 {
            // The peer has not read what it was sent: no more lines until it does.
            tokio::select! {
                biased;
                _ = out.closed() => break,
                _ = shutdown.wait_for(|s| *s) => break,
                _ = out.wait_for_room() => continue,
            }
        }
        tokio::select! {
            biased;
            _ = out.closed() => break,
            _ = shutdown.wait_for(|s| *s) => break,
            permit = feed.budget.clone().acquire_owned(), if feed.missed > 0 => {
                let permit = permit.expect("the budget is never closed");
                let _ = out.send(Outbound { line: lagged_line(feed.last_seq, feed.missed), permit: Some(permit) });
                feed.missed = 0;
            }
            first = rx.recv() => {
                let room = out.room();
                let mut closed = feed.take(first, room);
                // Whatever else is already on the bus goes out in the same write, so a busy
                // host wakes this task and the writer once per burst, not once per event.
                for _ in 0..FORWARD_BATCH {
                    match rx.try_recv() {
                        Ok(event) => closed |= feed.take(Ok(event), room),
                        Err(broadcast::error::TryRecvError::Empty) => break,
                        Err(broadcast::error::TryRecvError::Lagged(n)) => {
                            closed |= feed.take(Err(broadcast::error::RecvError::Lagged(n)), room)
                        }
                        Err(broadcast::error::TryRecvError::Closed) => closed = true,
                    }
                }
                if !feed.batch.is_empty() {
                    let line = std::mem::take(&mut feed.batch);
                    let _ = out.send(Outbound { line, permit: feed.permit.take() });
                }
                if closed {
                    break;
                }
            }
        }
    }
}

/// Events taken from the bus in one wake-up at most.
const FORWARD_BATCH: usize = 256;

/// One subscriber's side of the bus: its budget, what it missed, and the batch being built.
struct Feed {
    budget: Arc<Semaphore>,
    /// Events dropped since the last line that reached the queue.
    missed: u64,
    /// The last seq seen (sent, dropped, or skipped by the bus); a `lagged` notice reports it.
    last_seq: u64,
    batch: Vec<u8>,
    /// The budget held by the lines in `batch`.
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    at: AtCache,
}

impl Feed {
    /// Adds one event to the batch if the budget and the connection's `room` (in bytes)
    /// allow, else counts it as missed. Returns whether the bus closed.
    fn take(
        &mut self,
        received: Result<Arc<Event>, broadcast::error::RecvError>,
        room: usize,
    ) -> bool {
        match received {
            Ok(event) => {
                self.last_seq = event.seq;
                if self.missed > 0 {
                    self.missed += 1;
                    return false;
                }
                if self.batch.len() >= room {
                    self.missed = 1;
                    return false;
                }
                let before = self.batch.len();
                let at = self.at.format(event.at);
                event.write_line(&mut self.batch, at);
                // A line larger than the whole budget takes all of it (it goes out alone).
                let bytes = (self.batch.len() - before).min(SUBSCRIBER_BUDGET) as u32;
                match self.budget.clone().try_acquire_many_owned(bytes) {
                    Ok(p) => match &mut self.permit {
                        Some(held) => held.merge(p),
                        None => self.permit = Some(p),
                    },
                    Err(_) => {
                        self.batch.truncate(before);
                        self.missed = 1;
                    }
                }
                false
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                self.last_seq += n;
                self.missed += n;
                false
            }
            Err(broadcast::error::RecvError::Closed) => true,
        }
    }
}
