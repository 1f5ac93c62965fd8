//! The console's connection to the host's introspection socket.
//!
//! A supervisor keeps one subscribed connection: `host.hello`, a coalesced `subscribe` (one
//! `changed` frame per [`COALESCE_MS`] at most, which costs the host nothing per event), then it
//! forwards those frames until the connection ends, and reconnects with backoff. Every [`Effect`] is one
//! call, run once: a read, a verification or a clear step is never re-sent by this module — a
//! call cut off by a lost connection comes back as an error marked `unknown`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::app::{Act, Action, Effect, OpError, Reply};
use crate::client::{BridgeClient, ClientError, CONNECTION_CLOSED_EVENT};
use crate::protocol::introspection::{
    AuditListParams, ClearCommitParams, EventFrame, IntrospectMethod, OperatorStopParams,
    OutcomeAcknowledgeParams, ReceiptsGetParams, ReceiptsListParams, Sort, SubscribeParams,
};
use crate::protocol::Delivery;
use crate::server::INTROSPECT_SOCKET;

/// How long a console call waits for its reply (a verification may take an action timeout).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The interval of the console's coalesced subscription: the sparklines get four points a
/// second and the screen is re-read at most every [`super::app::REFRESH_EVERY_MS`].
pub const COALESCE_MS: u64 = 250;
/// The first reconnection delay; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The network side: runs effects against the current connection.
#[derive(Clone)]
pub struct Net {
    client: Arc<Mutex<Option<BridgeClient>>>,
    actions: UnboundedSender<Action>,
}

/// The delay before reconnection attempt `attempts` (1-based).
pub fn backoff(attempts: u32) -> Duration {
    let factor = 1u32 << attempts.saturating_sub(1).min(10);
    (FIRST_BACKOFF * factor).min(MAX_BACKOFF)
}

impl Net {
    /// Starts the supervisor for the host whose sockets are in `socket_dir`; results and events
    /// arrive on `actions`.
    pub fn start(socket_dir: PathBuf, actions: UnboundedSender<Action>) -> Net {
        let net = Net {
            client: Arc::new(Mutex::new(None)),
            actions,
        };
        tokio::spawn(supervise(socket_dir.join(INTROSPECT_SOCKET), net.clone()));
        net
    }

    fn current(&self) -> Option<BridgeClient> {
        self.client.lock().expect("client slot").clone()
    }

    /// Runs `effect` once in the background; its result comes back as an [`Action`].
    pub fn run(&self, effect: Effect) {
        let net = self.clone();
        tokio::spawn(async move {
            let action = match effect {
                Effect::Quit | Effect::Copy(_) => return,
                Effect::Refresh => Action::Snapshot(
                    match net.call(IntrospectMethod::Snapshot, json!({})).await {
                        Ok(v) => v,
                        Err(e) => {
                            tracing::warn!(code = %e.code, "snapshot failed: {}", e.message);
                            return;
                        }
                    },
                ),
                Effect::FetchPage {
                    offset,
                    seq,
                    params,
                } => Action::Page {
                    offset,
                    seq,
                    reply: net.call(IntrospectMethod::ReceiptsList, params).await,
                },
                Effect::GetReceipt(request_id) => Action::ReceiptDetail(
                    net.call(
                        IntrospectMethod::ReceiptsGet,
                        to_params(&ReceiptsGetParams { request_id }),
                    )
                    .await,
                ),
                Effect::GetTaskHistory(task_id) => {
                    let params = ReceiptsListParams {
                        limit: Some(100),
                        sort: Some(Sort::Newest),
                        task_id: Some(task_id.clone()),
                        ..ReceiptsListParams::default()
                    };
                    let reply = net
                        .call(IntrospectMethod::ReceiptsList, to_params(&params))
                        .await;
                    Action::TaskHistory { task_id, reply }
                }
                Effect::Verify(task_id) => {
                    let reply = net
                        .call(
                            IntrospectMethod::TaskVerifyOutcome,
                            json!({"taskId": task_id}),
                        )
                        .await;
                    Action::Verified { task_id, reply }
                }
                Effect::Prepare(params) => Action::Prepared(
                    net.call(IntrospectMethod::ReceiptsClearPrepare, params)
                        .await,
                ),
                Effect::Act { act, reason } => {
                    tracing::info!(%reason, target = act.target(), "{}", act.verb());
                    let reply = match &act {
                        // The host sends the stop as the bridge's, under a fresh request ID
                        // (its own receipt), and records it in the audit log; sent once.
                        Act::Stop { task_id } => {
                            net.call(
                                IntrospectMethod::TaskStop,
                                to_params(&OperatorStopParams {
                                    reason,
                                    task_id: task_id.clone(),
                                    operator: None,
                                }),
                            )
                            .await
                        }
                        Act::Acknowledge { request_id } => {
                            net.call(
                                IntrospectMethod::OutcomeAcknowledge,
                                to_params(&OutcomeAcknowledgeParams {
                                    request_id: request_id.clone(),
                                    reason,
                                    operator: None,
                                }),
                            )
                            .await
                        }
                    };
                    Action::Acted { act, reply }
                }
                Effect::ReadMatching(params) => {
                    Action::Matched(net.call(IntrospectMethod::ReceiptsList, params).await)
                }
                Effect::GetAudit => Action::Audit(
                    net.call(
                        IntrospectMethod::AuditList,
                        to_params(&AuditListParams { limit: Some(1000) }),
                    )
                    .await,
                ),
                Effect::Commit { token, reason } => {
                    tracing::info!(%reason, "committing a clear");
                    Action::Committed(
                        net.call(
                            IntrospectMethod::ReceiptsClearCommit,
                            to_params(&ClearCommitParams {
                                token,
                                reason,
                                operator: None,
                            }),
                        )
                        .await,
                    )
                }
            };
            let _ = net.actions.send(action);
        });
    }

    async fn call(&self, method: IntrospectMethod, params: Value) -> Reply {
        let Some(client) = self.current() else {
            return Err(OpError {
                code: "BRIDGE_UNAVAILABLE".into(),
                message: "not connected to the host; nothing was sent".into(),
                unknown: false,
            });
        };
        reply_of(client.call(method.as_str(), params).await)
    }
}

/// Params as they go on the wire.
fn to_params<T: serde::Serialize>(params: &T) -> Value {
    serde_json::to_value(params).expect("params serialise")
}

fn reply_of(r: Result<crate::protocol::Reply, ClientError>) -> Reply {
    match r {
        Ok(reply) if reply.ok => Ok(reply.result.unwrap_or(Value::Null)),
        Ok(reply) => {
            let e = reply.error.expect("an error reply has an error");
            Err(OpError {
                code: e.code.to_string(),
                message: e.message,
                unknown: e.delivery == Delivery::Unknown,
            })
        }
        Err(e) => Err(OpError {
            code: e.code.to_string(),
            message: e.message,
            unknown: e.delivery == Delivery::Unknown,
        }),
    }
}

async fn supervise(path: PathBuf, net: Net) {
    let mut attempts = 0u32;
    loop {
        let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let client = BridgeClient::at_path(&path)
            .with_timeout(CALL_TIMEOUT)
            .with_event_sink(events_tx);
        let subscribed = async {
            reply_of(
                client
                    .call(IntrospectMethod::HostHello.as_str(), json!({}))
                    .await,
            )?;
            let subscribe = SubscribeParams {
                coalesce_ms: Some(COALESCE_MS),
            };
            reply_of(
                client
                    .call(IntrospectMethod::Subscribe.as_str(), to_params(&subscribe))
                    .await,
            )
        }
        .await;
        match subscribed {
            Ok(_) => {
                tracing::info!(path = %path.display(), "connected and subscribed");
                attempts = 0;
                *net.client.lock().expect("client slot") = Some(client);
                let _ = net.actions.send(Action::Connected);
                while let Some(frame) = events.recv().await {
                    if EventFrame::deserialize(&frame)
                        .is_ok_and(|f| f.event == CONNECTION_CLOSED_EVENT)
                    {
                        break;
                    }
                    if net.actions.send(Action::Event(frame)).is_err() {
                        return;
                    }
                }
                *net.client.lock().expect("client slot") = None;
                tracing::warn!("the connection to the host ended");
                attempts += 1;
                if net
                    .actions
                    .send(Action::Disconnected {
                        reason: "the host closed the connection".into(),
                        attempts,
                    })
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                attempts += 1;
                tracing::debug!(code = %e.code, attempts, "connecting failed: {}", e.message);
                let reason = if e.code == "UNKNOWN_METHOD" {
                    format!(
                        "this host does not serve the console's methods ({})",
                        e.message
                    )
                } else {
                    e.message
                };
                if net
                    .actions
                    .send(Action::Disconnected { reason, attempts })
                    .is_err()
                {
                    return;
                }
            }
        }
        tokio::time::sleep(backoff(attempts)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_stops_at_the_cap() {
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(2), Duration::from_millis(400));
        assert_eq!(backoff(3), Duration::from_millis(800));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
