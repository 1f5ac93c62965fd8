//! The event bus: every receipt, rejection, task and pending-outcome change becomes an event
//! with a sequence number, for the operator console.
//!
//! Events are published while the host's state lock is held, so sequence numbers follow the
//! order of the changes they describe. The bus is a `tokio::sync::broadcast` channel: a
//! subscriber that falls behind is told it lagged, and the sender never waits for anyone.
//! When nobody subscribes to the full stream, an event costs one counter increment and one
//! relaxed atomic store: coalesced subscribers (the console) poll that atomic on their own
//! clock instead of receiving events, so they add nothing to publishing.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use crate::protocol::format_millis;

/// How many events a subscriber may fall behind before it is told it lagged.
pub const EVENT_BUFFER: usize = 4096;

/// One event.
#[derive(Clone, Debug)]
pub struct Event {
    /// Position in the run's event sequence (starts at 1).
    pub seq: u64,
    /// When it happened (epoch ms).
    pub at: i64,
    /// `receipt.created`, `task.updated`, ...
    pub kind: &'static str,
    /// Kind-specific facts.
    pub data: Value,
}

impl Event {
    /// The event frame: `{"event":KIND,"seq":N,"at":TS,"data":{…}}` with its newline.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = Vec::with_capacity(128);
        self.write_line(&mut line, &format_millis(self.at));
        line
    }

    /// Appends the event frame to `out`, with `at` already formatted (a forwarder formats
    /// each millisecond once, not once per event).
    pub fn write_line(&self, out: &mut Vec<u8>, at: &str) {
        // Written directly rather than through a `json!` frame: that would deep-copy `data` and
        // build a map for every event of every subscriber. Kinds and timestamps never need
        // escaping, so they are copied as they are.
        out.extend_from_slice(b"{\"event\":\"");
        out.extend_from_slice(self.kind.as_bytes());
        out.extend_from_slice(b"\",\"seq\":");
        let _ = write!(out, "{}", self.seq);
        out.extend_from_slice(b",\"at\":\"");
        out.extend_from_slice(at.as_bytes());
        out.extend_from_slice(b"\",\"data\":");
        serde_json::to_writer(&mut *out, &self.data).expect("a JSON value always serialises");
        out.extend_from_slice(b"}\n");
    }
}

/// Formats event timestamps, remembering the last one: a busy host publishes many events in
/// the same millisecond, and formatting a date is a large part of writing an event.
#[derive(Default)]
pub struct AtCache {
    millis: Option<i64>,
    text: String,
}

impl AtCache {
    /// `at` as docs/introspection.md writes timestamps (`2026-01-01T00:00:00.000Z`).
    pub fn format(&mut self, at: i64) -> &str {
        if self.millis != Some(at) {
            self.millis = Some(at);
            self.text = format_millis(at);
        }
        &self.text
    }
}

/// The publishing side, owned by the host's locked state.
pub struct EventBus {
    sender: broadcast::Sender<Arc<Event>>,
    seq: u64,
    /// `seq`, readable without the host's lock by coalesced subscribers.
    published: Arc<AtomicU64>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            sender: broadcast::channel(EVENT_BUFFER).0,
            seq: 0,
            published: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl EventBus {
    /// Publishes an event; `data` is only built when a full-stream subscriber listens.
    pub fn publish(&mut self, kind: &'static str, at: i64, data: impl FnOnce() -> Value) {
        self.seq += 1;
        self.published.store(self.seq, Ordering::Relaxed);
        if self.sender.receiver_count() > 0 {
            let _ = self.sender.send(Arc::new(Event {
                seq: self.seq,
                at,
                kind,
                data: data(),
            }));
        }
    }

    /// The sequence number of the last event published.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The last published sequence number, shared: a coalesced subscriber checks it without
    /// taking the host's lock and only locks when something changed.
    pub fn published(&self) -> Arc<AtomicU64> {
        self.published.clone()
    }

    /// A new full-stream subscription, starting after the current sequence number.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.sender.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_is_one_json_frame() {
        let e = Event {
            seq: 7,
            at: 0,
            kind: "receipt.created",
            data: serde_json::json!({"requestId": "a\"b"}),
        };
        let line = e.to_line();
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"event": "receipt.created", "seq": 7, "at": "1970-01-01T00:00:00.000Z", "data": {"requestId": "a\"b"}})
        );
    }

    #[test]
    fn the_at_cache_formats_each_millisecond_afresh() {
        let mut at = AtCache::default();
        assert_eq!(at.format(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at.format(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at.format(1_001), "1970-01-01T00:00:01.001Z");
    }

    #[test]
    fn publishing_moves_the_shared_seq_even_without_subscribers() {
        let mut bus = EventBus::default();
        let published = bus.published();
        bus.publish("task.updated", 0, || {
            panic!("no one listens, so no data is built")
        });
        bus.publish("task.updated", 0, || {
            panic!("no one listens, so no data is built")
        });
        assert_eq!(published.load(Ordering::Relaxed), 2);
        assert_eq!(bus.seq(), 2);
    }
}
