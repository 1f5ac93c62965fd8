//! The outcomes nobody has settled yet: the one list the console's Blocked pane shows and
//! `run.status` counts, so the two never disagree.
//!
//! An outcome is unsettled while its receipt is in the book and the clearability rule refuses
//! it as `unverified_outcome`: an `OUTCOME_UNCERTAIN` reply whose task is blocked on it (or
//! was interrupted while blocked), or an `INTERRUPTED` reply nobody acknowledged. Verifying
//! (`confirmed`), acknowledging or stopping the task settles it; clearing a settled receipt
//! takes it out of the book. A pending outcome recorded on a stopped task, or whose receipt was
//! cleared, is not listed.
//!
//! A host of a fleet also lists the ledger's `INTERRUPTED` receipts nobody acknowledged, of any
//! host run (a host that died holding them cannot list them itself), as it read them last
//! ([`FleetInterrupted`]); acknowledging one on any host settles it for the fleet.

use crate::book::{Receipt, RequestKey};
use crate::protocol::ErrorCode;
use crate::tasks::{PendingOutcome, Task};

use super::clear::{clear_refusal, ClearRefusal};
use super::State;

/// One unsettled outcome: its receipt, and its task with the pending outcome it blocks on when
/// the task is known.
pub(crate) struct Unsettled<'a> {
    /// The receipt's request ID.
    pub(crate) key: RequestKey,
    /// The receipt, with its stored uncertain reply.
    pub(crate) receipt: &'a Receipt,
    /// The receipt's task, when it names one the host knows.
    pub(crate) task: Option<&'a Task>,
    /// The task's pending outcome for this receipt (absent for an `INTERRUPTED` receipt whose
    /// task never recorded one).
    pub(crate) pending: Option<&'a PendingOutcome>,
}

impl Unsettled<'_> {
    /// The stored error code (`OUTCOME_UNCERTAIN`, `INTERRUPTED`, …).
    pub(crate) fn code(&self) -> Option<ErrorCode> {
        self.receipt.result().flatten()
    }
}

/// An `INTERRUPTED` receipt of the fleet's ledger nobody acknowledged, as a fleet host read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FleetInterrupted {
    /// The request ID.
    pub(crate) request_id: String,
    /// The method.
    pub(crate) method: String,
    /// The canonical `{method, params}` text.
    pub(crate) request: String,
    /// The task it acted on, when it names one.
    pub(crate) task_id: Option<String>,
    /// When it was declared `INTERRUPTED` (epoch ms; when it was claimed, if not recorded).
    pub(crate) since: i64,
}

impl From<crate::ledger::LedgerReceipt> for FleetInterrupted {
    fn from(r: crate::ledger::LedgerReceipt) -> FleetInterrupted {
        FleetInterrupted {
            since: r.completed_at.unwrap_or(r.first_seen),
            request_id: r.request_id,
            method: r.method,
            request: r.request,
            task_id: r.task_id,
        }
    }
}

impl State {
    /// The fleet's unacknowledged `INTERRUPTED` receipts that [`State::unsettled`] does not
    /// already list (this host's own, recovered from its journal, are listed there).
    pub(crate) fn fleet_unsettled(&self) -> Vec<&FleetInterrupted> {
        if self.fleet_interrupted.is_empty() {
            return Vec::new();
        }
        let local: std::collections::HashSet<RequestKey> =
            self.unsettled().into_iter().map(|u| u.key).collect();
        self.fleet_interrupted
            .iter()
            .filter(|f| !local.contains(&RequestKey::new(&f.request_id)))
            .collect()
    }

    /// Every unsettled outcome: those tasks block on (newest task first, as the snapshot lists
    /// tasks), then the `INTERRUPTED` receipts no task records (oldest first).
    pub(crate) fn unsettled(&self) -> Vec<Unsettled<'_>> {
        let mut tasks: Vec<&Task> = self
            .tasks
            .iter()
            .filter(|t| !t.pending.is_empty())
            .collect();
        tasks.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        let mut out: Vec<Unsettled<'_>> = Vec::new();
        for task in tasks {
            for p in &task.pending {
                let key = RequestKey::new(&p.request_id);
                let Some(receipt) = self.book.get(&key) else {
                    continue;
                };
                if clear_refusal(&self.tasks, &key, receipt)
                    == Some(ClearRefusal::UnverifiedOutcome)
                {
                    out.push(Unsettled {
                        key,
                        receipt,
                        task: Some(task),
                        pending: Some(p),
                    });
                }
            }
        }
        for key in &self.interrupted {
            let Some(receipt) = self.book.get(key) else {
                continue;
            };
            if out.iter().any(|u| u.key == *key)
                || clear_refusal(&self.tasks, key, receipt) != Some(ClearRefusal::UnverifiedOutcome)
            {
                continue;
            }
            let task = receipt.task_id.as_deref().and_then(|t| self.tasks.get(t));
            out.push(Unsettled {
                key: key.clone(),
                receipt,
                task,
                pending: None,
            });
        }
        out
    }

    /// The book's counts with `unsettled` filled in: what `run.status`, the snapshot and the
    /// `changed` frames report.
    pub(crate) fn receipt_counts(&self) -> crate::protocol::results::ReceiptCounts {
        let mut counts = self.book.counts();
        counts.unsettled = (self.unsettled().len() + self.fleet_unsettled().len()) as u64;
        counts
    }
}
