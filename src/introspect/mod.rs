//! The introspection channel (`introspect.sock`): what the operator console and the operator
//! commands speak. No receipts are taken here. `docs/introspection.md` is its exact contract.
//!
//! Reads of the book (snapshot, listings) take the host's state lock briefly and build their
//! JSON from what they copied; the two phases of a clear run in the host, each in one critical
//! section. Event subscriptions are fed from the host's broadcast bus through a bounded budget
//! per subscriber: when a subscriber does not read, its events are dropped and counted, and it
//! is told `lagged` once it drains. Nothing on the bridge's request path ever waits for it.

use std::path::PathBuf;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::host::{Handled, Host};
pub use crate::protocol::introspection::{
    bad_params, DEFAULT_LIST_LIMIT, MAX_COALESCE_MS, MAX_LIST_LIMIT, MIN_COALESCE_MS,
};
use crate::protocol::introspection::{
    AuditListParams, AuditListResult, ClearCommitParams, ClearCommitted, ClearPrepareParams,
    ClearPrepared, IntrospectMethod, OperatorStopParams, OutcomeAcknowledgeParams,
    OutcomeAcknowledged, ReceiptsGetParams, ReceiptsListParams, ReceiptsListResult,
    SubscribeParams, Subscribed, TasksListParams,
};
use crate::protocol::{
    parse_envelope, Delivery, ErrorBody, ErrorCode, NoParams, Outcome, ReceiptKind, TaskParams,
};
use crate::server::{Connection, Outbound, Service};

/// Event bytes a subscriber may have queued and unwritten before its events are dropped (and
/// it is told `lagged`). Far below the connection's reply-byte bound: a subscriber that stops
/// reading would otherwise hold that whole bound (8 MiB by default) in the host, per
/// subscription, for as long as its connection stays open.
pub const SUBSCRIBER_BUDGET: usize = 128 * 1024;
/// Subscriptions one connection may hold; each costs the host a forwarding task.
pub const MAX_SUBSCRIPTIONS_PER_CONNECTION: usize = 8;
/// Default `limit` of `audit.list`.
pub const DEFAULT_AUDIT_LIMIT: usize = 50;
/// Longest clear reason accepted, in characters.
pub const MAX_REASON_CHARS: usize = crate::protocol::limits::REASON.max;

/// The introspection service over a host.
#[derive(Clone)]
pub struct Introspect {
    host: Host,
    audit: Arc<AuditLog>,
}

mod audit;
mod clearing;
mod feed;

use crate::host::operator_reads::{feed_position, get, list, snapshot, tasks_list};
pub use audit::{os_user_name, AuditLog};
use clearing::{
    acknowledge, checked_ack, checked_commit, checked_stop, clear_commit, clear_prepare,
    operator_stop,
};
use feed::{checked_subscribe, forward_changes, forward_events};

impl Introspect {
    /// The introspection service of `host`, recording clear commits in `audit_log`.
    pub fn new(host: Host, audit_log: PathBuf) -> Introspect {
        Introspect {
            host,
            audit: Arc::new(AuditLog::new(audit_log)),
        }
    }

    /// The audit log this service appends to.
    pub fn audit_log(&self) -> &AuditLog {
        &self.audit
    }
}

fn parse<T: DeserializeOwned>(method: IntrospectMethod, params: &Value) -> Result<T, ErrorBody> {
    T::deserialize(params).map_err(|e| bad_params(method.as_str(), e))
}

fn reply_line<T: Serialize>(id: &str, run_id: &str, result: Result<T, ErrorBody>) -> Vec<u8> {
    let outcome = match result {
        Ok(v) => Outcome::ok(&v),
        Err(e) => Outcome::err(&e),
    };
    outcome.reply_line(Some(id), run_id, ReceiptKind::None)
}

impl Introspect {
    /// `subscribe`: queues the reply, then starts the forwarder of this connection's events (a
    /// `changed` frame every `coalesceMs`, or every event), so the reply precedes them.
    fn subscribe(
        &self,
        method: IntrospectMethod,
        params: &Value,
        id: &str,
        run_id: &str,
        conn: &Connection,
    ) -> Handled {
        let ready = |line: Vec<u8>| Handled::Ready(line);
        let p = match parse::<SubscribeParams>(method, params).and_then(checked_subscribe) {
            Ok(p) => p,
            Err(e) => return ready(reply_line::<Subscribed>(id, run_id, Err(e))),
        };
        if !conn.add_feed(MAX_SUBSCRIPTIONS_PER_CONNECTION) {
            let e = ErrorBody::new(
                    ErrorCode::BadRequest,
                    format!("this connection already has {MAX_SUBSCRIPTIONS_PER_CONNECTION} subscriptions, the most one connection may hold; nothing was subscribed. Read events on those, or subscribe on another connection"),
                )
                .with_details(json!({"maxSubscriptions": MAX_SUBSCRIPTIONS_PER_CONNECTION}));
            return ready(reply_line::<Subscribed>(id, run_id, Err(e)));
        }
        match p.coalesce_ms {
            Some(every_ms) => {
                // Coalesced: no bus receiver, so publishing stays as cheap as with no
                // subscriber; the reply goes out before the first `changed` frame.
                let (seq, published) = feed_position(&self.host);
                let reply = Subscribed {
                    coalesce_ms: Some(every_ms),
                    seq,
                    subscribed: true,
                };
                let _ = conn.out.send(Outbound {
                    line: reply_line(id, run_id, Ok(reply)),
                    permit: None,
                });
                tokio::spawn(forward_changes(
                    self.host.clone(),
                    published,
                    seq,
                    std::time::Duration::from_millis(every_ms),
                    conn.out.clone(),
                    conn.shutdown.clone(),
                ));
            }
            None => {
                // The reply must precede the first event frame on this connection, so it
                // is queued here, before the forwarder starts; the empty line handed back
                // writes nothing and releases the request's in-flight slot.
                let (seq, rx) = self.host.subscribe();
                let reply = Subscribed {
                    coalesce_ms: None,
                    seq,
                    subscribed: true,
                };
                let _ = conn.out.send(Outbound {
                    line: reply_line(id, run_id, Ok(reply)),
                    permit: None,
                });
                tokio::spawn(forward_events(
                    rx,
                    seq,
                    conn.out.clone(),
                    conn.shutdown.clone(),
                ));
            }
        }
        Handled::Ready(Vec::new())
    }

    /// `audit.list`: the last `limit` entries of the audit log, read off the runtime's workers.
    fn audit_list(&self, id: String, run_id: String, limit: usize) -> Handled {
        let audit = self.audit.clone();
        Handled::Later(Box::pin(async move {
            let read =
                tokio::task::spawn_blocking(move || audit.recent(limit).map_err(|e| (e, audit)))
                    .await
                    .expect("reading the audit log does not panic");
            let result = match read {
                Ok(entries) => Ok(AuditListResult { entries }),
                Err((e, audit)) => Err(ErrorBody::new(
                    ErrorCode::Internal,
                    format!(
                        "could not read the audit log {} ({e}); check the file's permissions",
                        audit.path().display()
                    ),
                )
                .with_delivery(Delivery::NotExecuted)),
            };
            reply_line(&id, &run_id, result)
        }))
    }
}

/// The `UNKNOWN_METHOD` error of a method the introspection socket does not have, naming those
/// it has.
fn unknown_method(other: &str) -> ErrorBody {
    let names: Vec<&str> = IntrospectMethod::ALL.iter().map(|m| m.as_str()).collect();
    ErrorBody::new(
        ErrorCode::UnknownMethod,
        format!(
            "unknown method {other:?} on the introspection socket; its methods are {}",
            names.join(", ")
        ),
    )
    .with_details(json!({"method": other}))
}

impl Service for Introspect {
    fn handle_frame(&self, frame: &[u8], conn: &Connection) -> Handled {
        let run_id = self.host.run_id().to_owned();
        let env = match parse_envelope(frame) {
            Ok(env) => env,
            Err(e) => {
                return Handled::Ready(Outcome::err(&e.error).reply_line(
                    e.id.as_deref(),
                    &run_id,
                    ReceiptKind::None,
                ))
            }
        };
        let id = env.id;
        let params = &env.params;
        let Ok(method) = env.method.parse::<IntrospectMethod>() else {
            let error = unknown_method(&env.method);
            return Handled::Ready(reply_line::<Value>(&id, &run_id, Err(error)));
        };
        let ready = |line: Vec<u8>| Handled::Ready(line);
        match method {
            IntrospectMethod::HostHello => ready(reply_line(
                &id,
                &run_id,
                parse::<NoParams>(method, params).map(|_| self.host.hello()),
            )),
            IntrospectMethod::Snapshot => ready(reply_line(
                &id,
                &run_id,
                parse::<NoParams>(method, params).map(|_| snapshot(&self.host)),
            )),
            IntrospectMethod::ReceiptsList => match parse::<ReceiptsListParams>(method, params) {
                Err(e) => ready(reply_line::<ReceiptsListResult>(&id, &run_id, Err(e))),
                Ok(p) => operator_work(&self.host, id, run_id, move |host| list(host, p)),
            },
            IntrospectMethod::ReceiptsGet => match parse::<ReceiptsGetParams>(method, params) {
                Err(e) => ready(reply_line::<Value>(&id, &run_id, Err(e))),
                // A fleet host reads the ledger: off the runtime's workers.
                Ok(p) if self.host.ledger().is_some() => {
                    operator_work(&self.host, id, run_id, move |host| get(host, &p.request_id))
                }
                Ok(p) => ready(reply_line(&id, &run_id, get(&self.host, &p.request_id))),
            },
            IntrospectMethod::TasksList => ready(reply_line(
                &id,
                &run_id,
                parse::<TasksListParams>(method, params).map(|p| tasks_list(&self.host, p)),
            )),
            IntrospectMethod::ReceiptsClearPrepare => {
                match parse::<ClearPrepareParams>(method, params) {
                    Err(e) => ready(reply_line::<ClearPrepared>(&id, &run_id, Err(e))),
                    Ok(p) => {
                        operator_work(&self.host, id, run_id, move |host| clear_prepare(host, p))
                    }
                }
            }
            IntrospectMethod::Subscribe => self.subscribe(method, params, &id, &run_id, conn),
            IntrospectMethod::TaskVerifyOutcome => {
                match parse::<TaskParams>(method, params).and_then(|p| self.host.verify(&p.task_id))
                {
                    Err(e) => ready(reply_line::<Value>(&id, &run_id, Err(e))),
                    Ok(fut) => Handled::Later(Box::pin(async move {
                        fut.await.reply_line(Some(&id), &run_id, ReceiptKind::None)
                    })),
                }
            }
            IntrospectMethod::ReceiptsClearCommit => {
                match parse::<ClearCommitParams>(method, params).and_then(checked_commit) {
                    Err(e) => ready(reply_line::<ClearCommitted>(&id, &run_id, Err(e))),
                    Ok(p) => {
                        let host = self.host.clone();
                        let audit = self.audit.clone();
                        Handled::Later(Box::pin(async move {
                            reply_line(&id, &run_id, clear_commit(&host, &audit, p).await)
                        }))
                    }
                }
            }
            IntrospectMethod::OutcomeAcknowledge => {
                match parse::<OutcomeAcknowledgeParams>(method, params).and_then(checked_ack) {
                    Err(e) => ready(reply_line::<OutcomeAcknowledged>(&id, &run_id, Err(e))),
                    Ok(p) => {
                        let host = self.host.clone();
                        let audit = self.audit.clone();
                        Handled::Later(Box::pin(async move {
                            reply_line(&id, &run_id, acknowledge(&host, &audit, p).await)
                        }))
                    }
                }
            }
            IntrospectMethod::TaskStop => {
                match parse::<OperatorStopParams>(method, params).and_then(checked_stop) {
                    Err(e) => ready(reply_line::<Value>(&id, &run_id, Err(e))),
                    Ok(p) => {
                        let host = self.host.clone();
                        let audit = self.audit.clone();
                        Handled::Later(Box::pin(async move {
                            reply_line(&id, &run_id, operator_stop(&host, &audit, p).await)
                        }))
                    }
                }
            }
            IntrospectMethod::AuditList => match parse::<AuditListParams>(method, params) {
                Err(e) => ready(reply_line::<AuditListResult>(&id, &run_id, Err(e))),
                Ok(p) if p.limit.unwrap_or(DEFAULT_AUDIT_LIMIT) > MAX_LIST_LIMIT => {
                    ready(reply_line::<AuditListResult>(
                        &id,
                        &run_id,
                        Err(bad_params(
                            method.as_str(),
                            format_args!("limit may be at most {MAX_LIST_LIMIT}"),
                        )),
                    ))
                }
                Ok(p) => self.audit_list(id, run_id, p.limit.unwrap_or(DEFAULT_AUDIT_LIMIT)),
            },
        }
    }

    fn run_id(&self) -> &str {
        self.host.run_id()
    }
}

/// Runs an operator's request that scans the book on the blocking pool: the scan takes the
/// host's lock only in short slices, and the runtime's workers stay free for agents' requests
/// while it runs.
fn operator_work<T, F>(host: &Host, id: String, run_id: String, work: F) -> Handled
where
    T: Serialize + Send + 'static,
    F: FnOnce(&Host) -> Result<T, ErrorBody> + Send + 'static,
{
    let host = host.clone();
    Handled::Later(Box::pin(async move {
        // The reply is written out on the blocking pool too: a prepare over a million
        // receipts is hundreds of megabytes of JSON, which must not occupy a runtime worker
        // that agents' connections need.
        let (id2, run_id2) = (id.clone(), run_id.clone());
        tokio::task::spawn_blocking(move || reply_line(&id2, &run_id2, work(&host)))
            .await
            .unwrap_or_else(|e| {
                reply_line::<T>(
                    &id,
                    &run_id,
                    Err(ErrorBody::new(
                        ErrorCode::Internal,
                        format!("the request failed inside the host ({e}); nothing was changed, send it again"),
                    )
                    .with_delivery(Delivery::NotExecuted)),
                )
            })
    }))
}
