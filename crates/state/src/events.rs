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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use crate::protocol::format_millis;
use crate::tasks::TaskId;

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
    pub data: EventData,
}

/// An event's `data`: typed for the receipt events every request publishes (copied under the
/// host's lock as a few fields, written as bytes by the forwarder), a JSON value for the rest.
#[derive(Clone, Debug)]
pub enum EventData {
    /// Any other event's facts.
    Json(Value),
    /// `receipt.created`, `receipt.completed`, `receipt.replayed` or `receipt.joined`.
    Receipt(ReceiptFacts),
}

impl From<Value> for EventData {
    fn from(v: Value) -> EventData {
        EventData::Json(v)
    }
}

/// The facts of a receipt event. Written with the keys in the order a `serde_json` object
/// writes them (sorted), so the frames are byte for byte what a JSON value would give.
#[derive(Clone, Debug)]
pub enum ReceiptFacts {
    /// `receipt.created`: `{method, requestId, taskId}` (`taskId` null for task-less methods).
    Created {
        /// The request ID.
        request_id: Box<str>,
        /// The method's wire name.
        method: &'static str,
        /// The task, if the method has one.
        task_id: Option<TaskId>,
    },
    /// `receipt.completed`: `{code, method, ok, requestId}`.
    Completed {
        /// The request ID.
        request_id: Box<str>,
        /// The method's wire name.
        method: &'static str,
        /// The error code; `None` when the reply is ok.
        code: Option<&'static str>,
    },
    /// `receipt.replayed` and `receipt.joined`: `{method, requestId}`.
    Seen {
        /// The request ID.
        request_id: Box<str>,
        /// The method's wire name.
        method: &'static str,
    },
}

impl ReceiptFacts {
    fn write(&self, out: &mut Vec<u8>) {
        // Method names and error codes are fixed ASCII identifiers; IDs are escaped.
        fn id(out: &mut Vec<u8>, s: &str) {
            serde_json::to_writer(&mut *out, s).expect("a string always serialises");
        }
        match self {
            ReceiptFacts::Created {
                request_id,
                method,
                task_id,
            } => {
                out.extend_from_slice(b"{\"method\":\"");
                out.extend_from_slice(method.as_bytes());
                out.extend_from_slice(b"\",\"requestId\":");
                id(out, request_id);
                out.extend_from_slice(b",\"taskId\":");
                match task_id {
                    Some(t) => id(out, t),
                    None => out.extend_from_slice(b"null"),
                }
            }
            ReceiptFacts::Completed {
                request_id,
                method,
                code,
            } => {
                out.extend_from_slice(b"{\"code\":");
                match code {
                    Some(c) => {
                        out.push(b'"');
                        out.extend_from_slice(c.as_bytes());
                        out.push(b'"');
                    }
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"method\":\"");
                out.extend_from_slice(method.as_bytes());
                out.extend_from_slice(if code.is_none() {
                    b"\",\"ok\":true,\"requestId\":"
                } else {
                    b"\",\"ok\":false,\"requestId\":"
                });
                id(out, request_id);
            }
            ReceiptFacts::Seen { request_id, method } => {
                out.extend_from_slice(b"{\"method\":\"");
                out.extend_from_slice(method.as_bytes());
                out.extend_from_slice(b"\",\"requestId\":");
                id(out, request_id);
            }
        }
        out.push(b'}');
    }
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
        match &self.data {
            EventData::Json(v) => {
                serde_json::to_writer(&mut *out, v).expect("a JSON value always serialises")
            }
            EventData::Receipt(facts) => facts.write(out),
        }
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
    /// Full-stream subscriptions alive. Counted here rather than asked of the channel, whose
    /// count sits behind a lock of its own that every publish would take.
    listeners: Arc<AtomicUsize>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            sender: broadcast::channel(EVENT_BUFFER).0,
            seq: 0,
            published: Arc::new(AtomicU64::new(0)),
            listeners: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// A full-stream subscription: every event from the moment it was made. Dropping it tells
/// the bus one listener fewer.
pub struct Subscription {
    receiver: broadcast::Receiver<Arc<Event>>,
    listeners: Arc<AtomicUsize>,
}

impl std::ops::Deref for Subscription {
    type Target = broadcast::Receiver<Arc<Event>>;
    fn deref(&self) -> &Self::Target {
        &self.receiver
    }
}

impl std::ops::DerefMut for Subscription {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.receiver
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.listeners.fetch_sub(1, Ordering::Relaxed);
    }
}

impl EventBus {
    /// Publishes an event; `data` is only built when a full-stream subscriber listens.
    pub fn publish(&mut self, kind: &'static str, at: i64, data: impl FnOnce() -> Value) {
        self.publish_data(kind, at, || EventData::Json(data()));
    }

    /// Publishes a receipt event; its facts are only copied when a full-stream subscriber
    /// listens, and then as a few fields rather than a JSON value.
    pub fn publish_receipt(
        &mut self,
        kind: &'static str,
        at: i64,
        facts: impl FnOnce() -> ReceiptFacts,
    ) {
        self.publish_data(kind, at, || EventData::Receipt(facts()));
    }

    /// Numbers the event (coalesced subscribers only watch this number) and builds and sends
    /// its data only when a full-stream subscriber listens.
    fn publish_data(&mut self, kind: &'static str, at: i64, data: impl FnOnce() -> EventData) {
        self.seq += 1;
        self.published.store(self.seq, Ordering::Relaxed);
        // Subscriptions are made under the host's lock, as publishing is, so a new one is
        // always seen here; one dropped a moment ago at worst costs an unread send.
        if self.listeners.load(Ordering::Relaxed) > 0 {
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
    pub fn subscribe(&self) -> Subscription {
        self.listeners.fetch_add(1, Ordering::Relaxed);
        Subscription {
            receiver: self.sender.subscribe(),
            listeners: self.listeners.clone(),
        }
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
            data: serde_json::json!({"requestId": "a\"b"}).into(),
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
    fn receipt_facts_write_what_a_json_value_would() {
        let id: Box<str> = "r-\"1\"\\\u{7}é".into();
        let cases = [
            (
                ReceiptFacts::Created {
                    request_id: id.clone(),
                    method: "page.fill",
                    task_id: Some("t\"1".into()),
                },
                serde_json::json!({"requestId": &*id, "method": "page.fill", "taskId": "t\"1"}),
            ),
            (
                ReceiptFacts::Created {
                    request_id: id.clone(),
                    method: "task.start",
                    task_id: None,
                },
                serde_json::json!({"requestId": &*id, "method": "task.start", "taskId": null}),
            ),
            (
                ReceiptFacts::Completed {
                    request_id: id.clone(),
                    method: "page.click",
                    code: None,
                },
                serde_json::json!({"requestId": &*id, "method": "page.click", "ok": true, "code": null}),
            ),
            (
                ReceiptFacts::Completed {
                    request_id: id.clone(),
                    method: "page.click",
                    code: Some("OUTCOME_UNCERTAIN"),
                },
                serde_json::json!({"requestId": &*id, "method": "page.click", "ok": false, "code": "OUTCOME_UNCERTAIN"}),
            ),
            (
                ReceiptFacts::Seen {
                    request_id: id.clone(),
                    method: "page.fill",
                },
                serde_json::json!({"requestId": &*id, "method": "page.fill"}),
            ),
        ];
        for (facts, value) in cases {
            let typed = Event {
                seq: 3,
                at: 1_000,
                kind: "receipt.created",
                data: EventData::Receipt(facts),
            };
            let json = Event {
                data: EventData::Json(value),
                ..typed.clone()
            };
            assert_eq!(
                String::from_utf8(typed.to_line()).unwrap(),
                String::from_utf8(json.to_line()).unwrap()
            );
        }
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
