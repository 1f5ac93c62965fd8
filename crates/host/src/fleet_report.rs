//! What a fleet host tells the others about itself: its running receipts and blocked tasks,
//! sent with every lease renewal so every host's hosts pane shows every host's numbers.

use std::sync::Arc;

use super::Host;
use crate::ledger::HostLoad;
use crate::protocol::results::TaskState;

impl Host {
    /// Has the fleet ledger report this host's running receipts and blocked tasks with each
    /// lease renewal (read under the host lock, off the request path; the ledger holds only a
    /// weak handle, so the report ends with the host).
    pub fn report_load_to_ledger(&self) {
        let Some(ledger) = self.ledger() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        ledger.report_load(Arc::new(move || {
            let host = Host {
                inner: weak.upgrade()?,
            };
            let st = host.lock();
            Some(HostLoad {
                running: st.book.running() as u64,
                blocked: st
                    .tasks
                    .iter()
                    .filter(|t| t.state() == TaskState::Blocked)
                    .count() as u64,
            })
        }));
    }
}
