//! The commit phase of a clear: checked a slice at a time, applied all at once, the
//! cleared receipts leaving the book a slice at a time.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::{
    changed_error, cleared_event, stale, touched_vec, unchanged, Checked, ClearedReceipt,
    CommittedClear, Pace, Phase, ReceiptVersion, CHECK_EVERY, SLICE,
};
use crate::book::{ClearBatch, Clearing, Freed, RequestKey, TombstoneRun};
use crate::protocol::results::ReceiptCounts;
use crate::protocol::{format_millis, now_millis, ErrorBody, ErrorCode};
use crate::to_data;
use crate::{Host, State};

impl Host {
    /// `receipts.clearCommit`: applies a prepared clear only if its token is fresh and nothing
    /// it listed changed since (no join, replay or state change); the listed receipts become
    /// tombstones all at once, or nothing changes. The token is used up either way. Blocks
    /// (slices of the host's lock, then waits for the operator gate): call it off the async
    /// runtime's workers.
    pub fn clear_commit(
        &self,
        token: &str,
        reason: &str,
        operator: &str,
    ) -> Result<CommittedClear, ErrorBody> {
        self.clear_commit_at(token, reason, operator, now_millis())
    }

    /// [`Host::clear_commit`] at a given time (tests move the clock).
    pub(crate) fn clear_commit_at(
        &self,
        token: &str,
        reason: &str,
        operator: &str,
        now: i64,
    ) -> Result<CommittedClear, ErrorBody> {
        let mut pace = Pace {
            max_steps: usize::MAX,
            between: &mut |_| {},
        };
        self.clear_commit_paced(token, reason, operator, now, &mut pace)
    }

    /// Runs `f` on items `0..n` in turn under the host's lock, a slice at a time, until it
    /// returns `false`.
    fn paced_items(
        &self,
        n: usize,
        pace: &mut Pace<'_>,
        phase: Phase,
        f: &mut dyn FnMut(&mut State, usize) -> bool,
    ) {
        let mut done = 0;
        while done < n {
            let mut st = self.operator_lock();
            let started = Instant::now();
            let mut steps = 0;
            while done < n {
                let go_on = f(&mut st, done);
                done += 1;
                steps += 1;
                if !go_on {
                    return;
                }
                if steps >= pace.max_steps
                    || (steps % CHECK_EVERY == 0 && started.elapsed() >= SLICE)
                {
                    break;
                }
            }
            drop(st);
            (pace.between)(phase);
        }
    }

    /// [`Host::clear_commit_at`], cut into slices by `pace`.
    pub(crate) fn clear_commit_paced(
        &self,
        token: &str,
        reason: &str,
        operator: &str,
        now: i64,
        pace: &mut Pace<'_>,
    ) -> Result<CommittedClear, ErrorBody> {
        let _gate = self.operator_gate();
        let (items, batch) = self.take_clear_token(token, now)?;

        // 1. Every listed receipt, a slice at a time: still as the prepare saw it?
        let checked = self.check_listed(&items, pace)?;

        // 2. Outside the lock: the tombstones sorted, the list in
        // key order (to find what agents reached), the journal's record.
        let run = Arc::new(TombstoneRun::new(
            items
                .iter()
                .zip(&checked)
                .map(|((k, _), c)| (k.clone(), c.digest)),
            batch,
        ));
        // The listed receipt first in the book: the walk that takes them out starts there.
        let first = (0..checked.len()).min_by_key(|&i| checked[i].position);
        let mut by_key: Vec<usize> = (0..items.len()).collect();
        by_key.sort_unstable_by(|&a, &b| items[a].0.cmp(&items[b].0));
        let journaled = self.journaled_ids(&items, &checked);
        let reason: Arc<str> = reason.into();

        // 3. The receipts agents reached meanwhile, a slice at a time; the slice that finds
        // none left applies the clear: every tombstone in place at once.
        let batch = ClearBatch {
            at: now,
            reason: reason.clone(),
        };
        let clearing = self.apply_when_settled(&items, &by_key, first, run, batch, pace)?;

        // 4. The clear applied: it goes in the journal before any receipt leaves the book.
        let durable = self.journal().map(|j| {
            j.append(&crate::journal::Record::ReceiptsCleared(
                crate::journal::Cleared {
                    at: now,
                    reason: &reason,
                    operator,
                    ids: &journaled,
                },
            ))
        });
        drop(journaled);

        // 5. The receipts leave the book a slice at a time, freed outside the lock.
        let clearing = self.remove_cleared(clearing, pace);
        debug_assert_eq!(clearing.removed(), items.len());

        // 6. A closed task whose last receipt went is reduced to its compact record.
        self.paced_items(checked.len(), pace, Phase::Tasks, &mut |st, i| {
            if let Some(tid) = &checked[i].task_id {
                st.tasks.receipt_cleared(tid);
            }
            true
        });

        // 7. Told to subscribers (the first IDs only: the audit log lists them all).
        let (tombstones, receipts) = self.publish_cleared(&items, operator, &reason, now);

        // 8. The tombstone runs merged outside the lock, so lookups stay few.
        self.merge_tombstone_runs();

        Ok(CommittedClear {
            durable,
            at: now,
            tombstones,
            receipts,
            cleared: cleared_receipts(items, checked),
        })
    }

    /// Takes the prepared clear under `token` (used up either way) if it has not expired, with
    /// the batch its tombstones will name; from then on the book notes every receipt agents
    /// reach, for the last check.
    fn take_clear_token(
        &self,
        token: &str,
        now: i64,
    ) -> Result<(Vec<(RequestKey, ReceiptVersion)>, u32), ErrorBody> {
        let mut st = self.operator_lock();
        let Some(prepared) = st.prepared_clears.remove(token) else {
            return Err(stale(format!(
                "clear token {token} is unknown or already used; nothing was cleared. Run receipts.clearPrepare (polaris clear) again and commit its new token"
            )));
        };
        if prepared.expires_at <= now {
            drop(st);
            return Err(stale(format!(
                "clear token {token} expired at {}; nothing was cleared. Prepare again to see the receipts' current results",
                format_millis(prepared.expires_at)
            )));
        }
        st.book.watch_changes();
        Ok((prepared.items, st.book.next_batch()))
    }

    /// Checks every listed receipt, a slice at a time, against the version the prepare saw;
    /// the first that changed ends the commit (and the book's watch) with nothing cleared.
    fn check_listed(
        &self,
        items: &[(RequestKey, ReceiptVersion)],
        pace: &mut Pace<'_>,
    ) -> Result<Vec<Checked>, ErrorBody> {
        let mut checked: Vec<Checked> = touched_vec(items.len());
        let mut changed = None;
        self.paced_items(items.len(), pace, Phase::Check, &mut |st, i| {
            let (key, version) = &items[i];
            let position = st.book.position(key);
            let found = position.and_then(|p| st.book.get_index(p));
            let (Some(position), Some((_, r)), true) =
                (position, found, unchanged(&st.tasks, key, version, found))
            else {
                changed = Some(i);
                return false;
            };
            checked.push(Checked {
                position,
                digest: r.digest(),
                method: r.method,
                task_id: r.task_id.clone(),
                code: r.result().flatten(),
            });
            true
        });
        if let Some(i) = changed {
            self.operator_lock().book.stop_watching();
            return Err(changed_error(&items[i].0));
        }
        Ok(checked)
    }

    /// The IDs and digests the journal's record of the clear names (none without a journal).
    fn journaled_ids(
        &self,
        items: &[(RequestKey, ReceiptVersion)],
        checked: &[Checked],
    ) -> Vec<crate::journal::ClearedId> {
        match self.journal() {
            Some(_) => items
                .iter()
                .zip(checked)
                .map(|((k, _), c)| crate::journal::ClearedId {
                    request_id: k.clone(),
                    digest: c.digest,
                })
                .collect(),
            None => Vec::new(),
        }
    }

    /// Checks again, a slice at a time, the listed receipts agents reached since the watch
    /// began; the slice that finds none left puts every tombstone in place at once (the
    /// moment the clear applies) and ends the watch. `by_key` orders `items` by key; `first`
    /// is the listed receipt that was first in the book.
    fn apply_when_settled(
        &self,
        items: &[(RequestKey, ReceiptVersion)],
        by_key: &[usize],
        first: Option<usize>,
        run: Arc<TombstoneRun>,
        batch: ClearBatch,
        pace: &mut Pace<'_>,
    ) -> Result<Clearing, ErrorBody> {
        let mut run = Some(run);
        let mut batch = Some(batch);
        let mut reached: Vec<RequestKey> = Vec::new();
        let mut seen = 0;
        loop {
            let mut st = self.operator_lock();
            let started = Instant::now();
            reached.extend(st.book.take_changes());
            let mut steps = 0;
            while seen < reached.len() {
                let key = &reached[seen];
                seen += 1;
                steps += 1;
                if let Ok(j) = by_key.binary_search_by(|&i| items[i].0.cmp(key)) {
                    let i = by_key[j];
                    let found = st.book.position(key).and_then(|p| st.book.get_index(p));
                    if !unchanged(&st.tasks, key, &items[i].1, found) {
                        st.book.stop_watching();
                        return Err(changed_error(key));
                    }
                }
                if steps >= pace.max_steps
                    || (steps % CHECK_EVERY == 0 && started.elapsed() >= SLICE)
                {
                    break;
                }
            }
            if seen == reached.len() {
                st.book.stop_watching();
                // Positions may have moved down since the check (a receipt withdrawn), never
                // up, and keep their order: the first listed receipt is still the first.
                let first = first
                    .and_then(|i| st.book.position(&items[i].0))
                    .unwrap_or(usize::MAX);
                let run = run.take().expect("applied once");
                let batch = batch.take().expect("applied once");
                return st
                    .book
                    .begin_clear(first, run, batch)
                    .map_err(|e| tombstones_full(e, items.len()));
            }
            drop(st);
            (pace.between)(Phase::Check);
        }
    }

    /// Takes the cleared receipts out of the book a slice at a time, their memory freed
    /// outside the lock.
    fn remove_cleared(&self, mut clearing: Clearing, pace: &mut Pace<'_>) -> Clearing {
        loop {
            let mut freed = Freed::default();
            let mut st = self.operator_lock();
            let started = Instant::now();
            let mut steps = 0;
            let done = loop {
                let n = CHECK_EVERY.min(pace.max_steps - steps);
                if st.book.clear_steps(&mut clearing, n, &mut freed) {
                    break true;
                }
                steps += n;
                if steps >= pace.max_steps || started.elapsed() >= SLICE || clearing.wants_table() {
                    break false;
                }
            };
            drop(st);
            drop(freed);
            if let Some(spare) = clearing.wanted_table() {
                clearing.give_table(spare.make());
            }
            (pace.between)(Phase::Remove);
            if done {
                return clearing;
            }
        }
    }

    /// Tells subscribers of the clear (its first IDs only: the audit log lists them all);
    /// returns the tombstone and receipt counts after it.
    fn publish_cleared(
        &self,
        items: &[(RequestKey, ReceiptVersion)],
        operator: &str,
        reason: &str,
        now: i64,
    ) -> (usize, ReceiptCounts) {
        let mut st = self.operator_lock();
        let event = cleared_event(items.len(), items.iter().map(|(k, _)| k), operator, reason);
        st.events
            .publish("receipts.cleared", now, || to_data(&event));
        (st.book.tombstones(), st.receipt_counts())
    }
}

/// The refusal of a clear that would overflow the tombstones: nothing was cleared, and what to
/// do instead.
fn tombstones_full(error: crate::book::ClearError, n: usize) -> ErrorBody {
    let crate::book::ClearError::TombstonesFull { capacity, used } = error;
    ErrorBody::new(
        ErrorCode::TombstoneCapacityFull,
        format!(
            "clearing {n} receipts would exceed the tombstone capacity ({used} of {capacity} used); nothing was cleared. Clear fewer receipts, or stop the host and start it again with a larger --tombstone-capacity (the journal keeps every receipt and tombstone across the restart)"
        ),
    )
    .with_details(json!({"tombstoneCapacity": capacity, "tombstones": used, "requested": n}))
}

/// The audit log's lines for the cleared receipts, in the order they were listed.
fn cleared_receipts(
    items: Vec<(RequestKey, ReceiptVersion)>,
    checked: Vec<Checked>,
) -> Vec<ClearedReceipt> {
    items
        .into_iter()
        .zip(checked)
        .map(|((key, _), c)| ClearedReceipt {
            request_id: key.to_string(),
            method: c.method,
            task_id: c.task_id,
            code: c.code,
        })
        .collect()
}
