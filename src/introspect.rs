//! The introspection channel (`introspect.sock`): what the operator console and the operator
//! commands speak. No receipts are taken here.

use serde_json::json;

use crate::host::{Handled, Host};
use crate::protocol::{parse_envelope, ErrorBody, ErrorCode, Outcome, ReceiptKind};
use crate::server::{Connection, Service};

/// The introspection service over a host.
#[derive(Clone)]
pub struct Introspect {
    host: Host,
}

impl Introspect {
    /// The introspection service of `host`.
    pub fn new(host: Host) -> Introspect {
        Introspect { host }
    }
}

impl Service for Introspect {
    fn handle_frame(&self, frame: &[u8], _conn: &Connection) -> Handled {
        let run_id = self.host.run_id();
        let env = match parse_envelope(frame) {
            Ok(env) => env,
            Err(e) => {
                return Handled::Ready(Outcome::err(&e.error).reply_line(
                    e.id.as_deref(),
                    run_id,
                    ReceiptKind::None,
                ))
            }
        };
        let outcome = match env.method.as_str() {
            "host.hello" => Outcome::ok(&self.host.hello()),
            other => Outcome::err(
                &ErrorBody::new(
                    ErrorCode::UnknownMethod,
                    format!("unknown method {other:?} on the introspection socket"),
                )
                .with_details(json!({"method": other})),
            ),
        };
        Handled::Ready(outcome.reply_line(Some(&env.id), run_id, ReceiptKind::None))
    }

    fn run_id(&self) -> &str {
        self.host.run_id()
    }
}
