//! The event bus: every receipt, rejection, task and pending-outcome change becomes an event
//! with a sequence number, for the operator console.
//!
//! Events are published while the host's state lock is held, so sequence numbers follow the
//! order of the changes they describe. The bus is a `tokio::sync::broadcast` channel: a
//! subscriber that falls behind is told it lagged, and the sender never waits for anyone.
//! When nobody subscribes, an event costs one counter increment.

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
        // Written directly rather than through a `json!` frame: that would deep-copy `data` and
        // build a map for every event of every subscriber.
        let mut line = Vec::with_capacity(128);
        line.extend_from_slice(b"{\"event\":");
        serde_json::to_writer(&mut line, self.kind).expect("a string always serialises");
        line.extend_from_slice(b",\"seq\":");
        line.extend_from_slice(self.seq.to_string().as_bytes());
        line.extend_from_slice(b",\"at\":");
        serde_json::to_writer(&mut line, &format_millis(self.at))
            .expect("a string always serialises");
        line.extend_from_slice(b",\"data\":");
        serde_json::to_writer(&mut line, &self.data).expect("a JSON value always serialises");
        line.extend_from_slice(b"}\n");
        line
    }
}

/// The publishing side, owned by the host's locked state.
pub struct EventBus {
    sender: broadcast::Sender<Arc<Event>>,
    seq: u64,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            sender: broadcast::channel(EVENT_BUFFER).0,
            seq: 0,
        }
    }
}

impl EventBus {
    /// Publishes an event; `data` is only built when someone listens.
    pub fn publish(&mut self, kind: &'static str, at: i64, data: impl FnOnce() -> Value) {
        self.seq += 1;
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

    /// A new subscription, starting after the current sequence number.
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
}
