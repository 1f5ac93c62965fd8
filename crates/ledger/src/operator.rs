//! The fleet's one book for operators (SPEC §6, §11, §13): listing and reading every host's
//! receipts, clearing them for the whole fleet in two phases, acknowledging uncertain outcomes,
//! and the feed of those changes that every host applies to the copies it keeps in memory.
//!
//! A clear must refuse when a listed receipt was answered again since the prepare, but hosts
//! answer copies from their own memory without a round trip to the database (that is what keeps
//! replays fast). So a clear takes a *census* at each phase: it asks every live host, through
//! the ledger, for a checksum of the copies it holds of the listed receipts (held or not,
//! running or completed, joins and replays) and waits until each has answered. The commit
//! applies only if every host's checksum is what it was at the prepare, and does so in the same
//! transaction that checks the rows and writes the tombstones.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::{receipt_from_row, schema, unavailable, Ledger, LedgerError, LedgerReceipt};

/// Which rows a listing (or a clear by filter) is about.
#[derive(Clone, Debug, Default)]
pub struct RowFilter {
    /// Only rows in this state.
    pub state: Option<RowStateFilter>,
    /// Only this method.
    pub method: Option<String>,
    /// Only this task.
    pub task_id: Option<String>,
    /// Only rows whose request ID, method, task or error code contains this text.
    pub search: Option<String>,
}

/// The `state` filter of a listing, as the ledger evaluates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowStateFilter {
    /// Running.
    Running,
    /// Completed (ok or error).
    Completed,
    /// Completed without an error.
    Ok,
    /// Completed with an error.
    Error,
    /// Completed and clearable now.
    Clearable,
}

/// The order of a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOrder {
    /// Newest first.
    Newest,
    /// Oldest first.
    Oldest,
    /// Running first, then completed; newest first within each.
    State,
    /// By method; newest first within each.
    Method,
    /// By task (receipts without a task last); newest first within each.
    Task,
}

impl RowOrder {
    /// The `ORDER BY` of this order, or of this order read from its end (`reverse`): the
    /// same as the host's own listing (`receipts.list`'s `reverse`).
    fn order_by(self, reverse: bool) -> &'static str {
        match (self, reverse) {
            (RowOrder::Newest, false) | (RowOrder::Oldest, true) => {
                "first_seen DESC, request_id DESC"
            }
            (RowOrder::Oldest, false) | (RowOrder::Newest, true) => "first_seen, request_id",
            (RowOrder::State, false) => {
                "(state = 'running') DESC, state, first_seen DESC, request_id DESC"
            }
            (RowOrder::State, true) => "(state = 'running'), state DESC, first_seen, request_id",
            (RowOrder::Method, false) => "method, first_seen DESC, request_id DESC",
            (RowOrder::Method, true) => "method DESC, first_seen, request_id",
            (RowOrder::Task, false) => "task_id NULLS LAST, first_seen DESC, request_id DESC",
            (RowOrder::Task, true) => "task_id DESC NULLS FIRST, first_seen, request_id",
        }
    }
}

/// The phase of a clear a census is taken for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CensusPhase {
    /// Taken when the clear is prepared.
    Prepare,
    /// Taken when it is committed; must match the prepare's.
    Commit,
}

impl CensusPhase {
    fn as_str(self) -> &'static str {
        match self {
            CensusPhase::Prepare => "prepare",
            CensusPhase::Commit => "commit",
        }
    }
}

/// A census a clear asked this host run for: the listed request IDs.
#[derive(Clone, Debug)]
pub struct CensusRequest {
    /// The clear's token.
    pub token: String,
    /// Which phase.
    pub phase: CensusPhase,
    /// The request IDs listed.
    pub ids: Vec<String>,
}

/// What a fleet-wide clear did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleared {
    /// Every receipt became a tombstone, for every host of the fleet.
    Done {
        /// Receipts cleared.
        cleared: u64,
        /// Tombstones the fleet now holds.
        tombstones: u64,
    },
    /// Some receipts changed since the operator saw them (or are gone): nothing was cleared.
    Stale {
        /// The request IDs that changed.
        changed: Vec<String>,
    },
    /// A host answered copies of listed receipts since the prepare (or dropped or took copies):
    /// nothing was cleared.
    Copied {
        /// The hosts whose copies changed.
        hosts: Vec<String>,
    },
    /// The tombstones would not fit: nothing was cleared.
    TombstonesFull {
        /// Tombstones held.
        tombstones: u64,
        /// The fleet's tombstone capacity.
        capacity: u64,
    },
}

/// A change another host (or this one) made to a receipt that hosts may hold a copy of.
#[derive(Clone, Debug)]
pub struct Change {
    /// Its place in the fleet's order of changes.
    pub seq: i64,
    /// The row as it is now.
    pub row: LedgerReceipt,
}

/// The most request IDs one census or clear may name: bounds one statement's arrays.
pub const MAX_LISTED: usize = 1_000_000;

/// How often a census waits before looking again for the hosts' answers.
const CENSUS_POLL: Duration = Duration::from_millis(20);

/// The columns a clear's row carries (the receipt columns, by name).
const COLUMNS: &str = super::RECEIPT_COLUMNS;

/// The columns a listing row carries: the receipt columns, with the stored reply only when it
/// carries network evidence (SPEC §16), the one thing a listing reads from it, so a page of
/// listed rows does not bring every stored reply over the wire.
const LISTING_COLUMNS: &str = "request_id, request, method, task_id, host_id, epoch, run_id, \
     state, CASE WHEN strpos(reply, '\"evidence\":') > 0 THEN reply END AS reply, first_seen, \
     completed_at, cleared_at, clear_reason, code, acknowledged_at, settled, replays";

impl Ledger {
    /// One page of the fleet's receipts matching `filter` in `order` (read from its end when
    /// `reverse`), and how many match in
    /// all, for a listing: each row's `reply` only when it carries network evidence. The
    /// newest and oldest orders read the time index, a task filter the task index; other
    /// filters and orders are matched row by row (a filtered `total` counts every match).
    pub async fn list(
        &self,
        filter: &RowFilter,
        order: RowOrder,
        reverse: bool,
        offset: usize,
        limit: usize,
    ) -> Result<(u64, Vec<LedgerReceipt>), LedgerError> {
        self.page(
            filter,
            order.order_by(reverse),
            offset,
            limit,
            LISTING_COLUMNS,
        )
        .await
    }

    /// One page of rows with `columns` (read by name) in `order_by`, and how many match in all.
    async fn page(
        &self,
        filter: &RowFilter,
        order_by: &str,
        offset: usize,
        limit: usize,
        columns: &str,
    ) -> Result<(u64, Vec<LedgerReceipt>), LedgerError> {
        let (clause, params) = where_clause(filter);
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p as _).collect();
        // The whole book's size is the fleet's usage counter; a filtered total is counted.
        let count = if params.is_empty() && filter.state.is_none() {
            "SELECT used FROM fleet_usage WHERE id = 1".to_string()
        } else {
            format!("SELECT count(*) FROM receipts {clause}")
        };
        let total: i64 = self
            .shared()
            .operator_read(&count, &params)
            .await?
            .first()
            .map(|r| r.try_get(0).map_err(unavailable))
            .transpose()?
            .unwrap_or(0);
        let sql = format!(
            "SELECT {columns} FROM receipts {clause} ORDER BY {order_by} LIMIT {} OFFSET {}",
            limit.min(MAX_LISTED),
            offset.min(i64::MAX as usize)
        );
        let rows = self.shared().operator_read(&sql, &params).await?;
        let rows = rows
            .iter()
            .map(receipt_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((total.max(0) as u64, rows))
    }

    /// Every row matching `filter`, oldest first, up to `most` (a clear by filter).
    pub async fn matching(
        &self,
        filter: &RowFilter,
        most: usize,
    ) -> Result<Vec<LedgerReceipt>, LedgerError> {
        Ok(self
            .page(filter, RowOrder::Oldest.order_by(false), 0, most, COLUMNS)
            .await?
            .1)
    }

    /// The `INTERRUPTED` receipts nobody has acknowledged (their host run died or left holding
    /// them), oldest first, at most `most`: outcomes unsettled for the whole fleet.
    pub async fn interrupted_unacknowledged(
        &self,
        most: usize,
    ) -> Result<Vec<LedgerReceipt>, LedgerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM receipts
              WHERE code = 'INTERRUPTED' AND acknowledged_at IS NULL
              ORDER BY first_seen, request_id LIMIT {}",
            most.min(MAX_LISTED)
        );
        let rows = self.shared().read(&sql, &[]).await?;
        rows.iter().map(receipt_from_row).collect()
    }

    /// The rows of these request IDs (those the ledger holds), in no particular order.
    pub async fn receipts_of(&self, ids: &[String]) -> Result<Vec<LedgerReceipt>, LedgerError> {
        let rows = self
            .shared()
            .read(
                &format!("SELECT {COLUMNS} FROM receipts WHERE request_id = ANY($1)"),
                &[&ids],
            )
            .await?;
        rows.iter().map(receipt_from_row).collect()
    }

    /// Counts a copy answered straight from the row by a host that keeps no copy of it, so a
    /// clear prepared before it finds the receipt changed.
    pub async fn count_replay(&self, request_id: &str) -> Result<(), LedgerError> {
        self.shared()
            .read(
                "UPDATE receipts SET replays = replays + 1
                  WHERE request_id = $1 AND state = 'completed'",
                &[&request_id],
            )
            .await?;
        Ok(())
    }

    /// Asks every live host of the fleet for its census of `ids` for the clear `token`, and
    /// waits until each has answered (at most `within`). `Unavailable`, naming the hosts,
    /// when some did not answer in time.
    pub async fn census(
        &self,
        token: &str,
        phase: CensusPhase,
        ids: &[String],
        within: Duration,
    ) -> Result<(), LedgerError> {
        let shared = self.shared();
        shared
            .read(
                "WITH old AS (
                     DELETE FROM clear_census WHERE created_at < now() - interval '15 minutes'
                     RETURNING token
                 ), gone AS (
                     DELETE FROM clear_census_reports r USING old WHERE r.token = old.token
                 )
                 INSERT INTO clear_census (token, phase, ids) VALUES ($1, $2, $3)
                 ON CONFLICT (token, phase) DO UPDATE SET ids = EXCLUDED.ids",
                &[&token, &phase.as_str(), &ids],
            )
            .await?;
        shared
            .read(
                "DELETE FROM clear_census_reports WHERE token = $1 AND phase = $2",
                &[&token, &phase.as_str()],
            )
            .await?;
        shared
            .read(
                &format!(
                    "SELECT pg_notify('{}', '{}')",
                    schema::CHANNEL,
                    schema::CHANGES_NOTE
                ),
                &[],
            )
            .await?;
        let deadline = Instant::now() + within;
        loop {
            let missing: Vec<String> = shared
                .read(
                    "SELECT h.host_id FROM hosts h
                      WHERE h.state = 'alive' AND h.lease_until > now()
                        AND NOT EXISTS (SELECT 1 FROM clear_census_reports r
                                         WHERE r.token = $1 AND r.phase = $2
                                           AND r.epoch = h.epoch)
                      ORDER BY h.host_id",
                    &[&token, &phase.as_str()],
                )
                .await?
                .iter()
                .filter_map(|r| r.try_get(0).ok())
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(LedgerError::Unavailable(format!(
                    "host(s) {} of the fleet did not report which copies of these receipts they \
                     hold within {} ms",
                    missing.join(", "),
                    within.as_millis()
                )));
            }
            tokio::time::sleep(CENSUS_POLL).await;
        }
    }

    /// The censuses clears asked for that this host run has not answered yet.
    pub async fn census_requests(&self) -> Result<Vec<CensusRequest>, LedgerError> {
        let rows = self
            .shared()
            .read(
                "SELECT c.token, c.phase, c.ids FROM clear_census c
                  WHERE NOT EXISTS (SELECT 1 FROM clear_census_reports r
                                     WHERE r.token = c.token AND r.phase = c.phase
                                       AND r.epoch = $1)
                  ORDER BY c.created_at",
                &[&self.epoch()],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let phase: String = r.try_get(1).map_err(unavailable)?;
                Ok(CensusRequest {
                    token: r.try_get(0).map_err(unavailable)?,
                    phase: if phase == "commit" {
                        CensusPhase::Commit
                    } else {
                        CensusPhase::Prepare
                    },
                    ids: r.try_get(2).map_err(unavailable)?,
                })
            })
            .collect()
    }

    /// This host run's answer to a census: a checksum of the copies it holds (0 for none).
    pub async fn census_report(
        &self,
        request: &CensusRequest,
        checksum: i64,
    ) -> Result<(), LedgerError> {
        self.shared()
            .read(
                "INSERT INTO clear_census_reports (token, phase, epoch, checksum)
                 SELECT $1, $2, $3, $4
                  WHERE EXISTS (SELECT 1 FROM clear_census WHERE token = $1 AND phase = $2)
                 ON CONFLICT (token, phase, epoch) DO UPDATE SET checksum = EXCLUDED.checksum",
                &[
                    &request.token,
                    &request.phase.as_str(),
                    &self.epoch(),
                    &checksum,
                ],
            )
            .await?;
        Ok(())
    }

    /// Clears completed receipts for the whole fleet (the commit phase of an operator's
    /// clear), all or none, in one transaction: each must still be completed and clearable,
    /// answered from its row as often as the operator saw (`seen`: request ID and its
    /// `replays`), every live host's census for `token` must match the prepare's, and the
    /// tombstones must fit the fleet's tombstone capacity. The reply is dropped; the request
    /// (the fingerprint), the time, the reason and the committing host stay.
    pub async fn clear(
        &self,
        token: &str,
        seen: &[(String, i64)],
        reason: &str,
        at: i64,
    ) -> Result<Cleared, LedgerError> {
        let ids: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
        let replays: Vec<i64> = seen.iter().map(|(_, n)| *n).collect();
        let rows = self
            .shared()
            .operator_read(
                "SELECT * FROM polaris_clear_fleet($1, $2, $3, $4, $5, $6)",
                &[&token, &ids, &replays, &reason, &at, &self.host_id()],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Err(LedgerError::Unavailable(
                "the ledger did not answer the clear; list the receipts again and retry"
                    .to_string(),
            ));
        };
        let outcome: String = row.try_get("outcome").map_err(unavailable)?;
        let tombstones: i64 = row.try_get("tombstones").map_err(unavailable)?;
        let capacity: i64 = row.try_get("tombstone_capacity").map_err(unavailable)?;
        Ok(match outcome.as_str() {
            "cleared" => Cleared::Done {
                cleared: ids.iter().collect::<std::collections::HashSet<_>>().len() as u64,
                tombstones: tombstones.max(0) as u64,
            },
            "stale" => Cleared::Stale {
                changed: row.try_get("changed").map_err(unavailable)?,
            },
            "copied" => Cleared::Copied {
                hosts: row.try_get("changed").map_err(unavailable)?,
            },
            _ => Cleared::TombstonesFull {
                tombstones: tombstones.max(0) as u64,
                capacity: capacity.max(0) as u64,
            },
        })
    }

    /// Records on the row that a person settled its uncertain outcome outside Polaris. `false`
    /// when the row is not a completed receipt with an uncertain outcome (nothing changed).
    pub async fn acknowledge(
        &self,
        request_id: &str,
        reason: &str,
        operator: &str,
        at: i64,
    ) -> Result<bool, LedgerError> {
        let rows = self
            .shared()
            .read(
                "SELECT polaris_acknowledge($1, $2, $3, $4)",
                &[&request_id, &reason, &operator, &at],
            )
            .await?;
        rows.first()
            .map(|r| r.try_get(0).map_err(unavailable))
            .transpose()
            .map(|ok| ok.unwrap_or(false))
    }

    /// Marks receipts this host run executed as settled: their pending outcomes were confirmed
    /// by verification, or their task was stopped (fenced by this run's epoch).
    pub async fn settle(&self, request_ids: &[String]) -> Result<u64, LedgerError> {
        let rows = self
            .shared()
            .read(
                "SELECT polaris_settle($1, $2)",
                &[&self.epoch(), &request_ids],
            )
            .await?;
        let n: i64 = rows
            .first()
            .map(|r| r.try_get(0).map_err(unavailable))
            .transpose()?
            .unwrap_or(0);
        Ok(n.max(0) as u64)
    }

    /// The fleet's latest change number: a host starting now holds no copies, so it applies
    /// only the changes after it.
    pub async fn last_change(&self) -> Result<i64, LedgerError> {
        let rows = self
            .shared()
            .read(
                "SELECT coalesce(max(change_seq), 0) FROM receipts WHERE change_seq IS NOT NULL",
                &[],
            )
            .await?;
        rows.first()
            .map(|r| r.try_get(0).map_err(unavailable))
            .transpose()
            .map(|n| n.unwrap_or(0))
    }

    /// The changes (clears, acknowledgements) after `seq`, in order, at most `limit`.
    pub async fn changes_after(&self, seq: i64, limit: i64) -> Result<Vec<Change>, LedgerError> {
        let rows = self
            .shared()
            .read(
                &format!(
                    "SELECT {COLUMNS}, change_seq FROM receipts
                      WHERE change_seq > $1 ORDER BY change_seq LIMIT $2"
                ),
                &[&seq, &limit],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Change {
                    seq: r.try_get("change_seq").map_err(unavailable)?,
                    row: receipt_from_row(r)?,
                })
            })
            .collect()
    }

    /// Records that this host run applied every change up to `seq` to its copies.
    pub async fn mark_applied(&self, seq: i64) -> Result<(), LedgerError> {
        self.shared()
            .read(
                "INSERT INTO feed_marks (epoch, seq) VALUES ($1, $2)
                 ON CONFLICT (epoch) DO UPDATE SET seq = greatest(feed_marks.seq, EXCLUDED.seq)",
                &[&self.epoch(), &seq],
            )
            .await?;
        Ok(())
    }

    /// Waits until every live host run has applied the changes up to `seq` (at most
    /// `within`); `Unavailable`, naming the hosts, when some have not.
    pub async fn wait_applied(&self, seq: i64, within: Duration) -> Result<(), LedgerError> {
        let deadline = Instant::now() + within;
        loop {
            let behind: Vec<String> = self
                .shared()
                .read(
                    "SELECT h.host_id FROM hosts h
                      WHERE h.state = 'alive' AND h.lease_until > now()
                        AND NOT EXISTS (SELECT 1 FROM feed_marks m
                                         WHERE m.epoch = h.epoch AND m.seq >= $1)
                      ORDER BY h.host_id",
                    &[&seq],
                )
                .await?
                .iter()
                .filter_map(|r| r.try_get(0).ok())
                .collect();
            if behind.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(LedgerError::Unavailable(format!(
                    "host(s) {} of the fleet have not yet dropped their copies",
                    behind.join(", ")
                )));
            }
            tokio::time::sleep(CENSUS_POLL).await;
        }
    }

    /// Notifications from the ledger (decided request IDs, and [`schema::CHANGES_NOTE`] when
    /// a receipt was cleared or acknowledged or a clear asks for a census).
    pub fn notes(&self) -> broadcast::Receiver<Arc<str>> {
        self.shared().decided.subscribe()
    }
}

/// A filter as SQL: the `WHERE` clause and its parameters (all text).
fn where_clause(filter: &RowFilter) -> (String, Vec<String>) {
    let mut parts: Vec<String> = Vec::new();
    let mut params: Vec<String> = Vec::new();
    if let Some(state) = filter.state {
        parts.push(
            match state {
                RowStateFilter::Running => "state = 'running'",
                RowStateFilter::Completed => "state = 'completed'",
                RowStateFilter::Ok => "state = 'completed' AND code IS NULL",
                RowStateFilter::Error => "state = 'completed' AND code IS NOT NULL",
                RowStateFilter::Clearable => {
                    "state = 'completed' AND polaris_clearable(code, acknowledged_at, settled)"
                }
            }
            .to_string(),
        );
    } else {
        // Tombstones are not receipts: the listing shows what the book holds.
        parts.push("state <> 'cleared'".to_string());
    }
    if let Some(method) = &filter.method {
        params.push(method.clone());
        parts.push(format!("method = ${}", params.len()));
    }
    if let Some(task) = &filter.task_id {
        params.push(task.clone());
        parts.push(format!("task_id = ${}", params.len()));
    }
    if let Some(search) = &filter.search {
        params.push(search.clone());
        let n = params.len();
        parts.push(format!(
            "(strpos(request_id, ${n}) > 0 OR strpos(method, ${n}) > 0 \
              OR strpos(coalesce(task_id, ''), ${n}) > 0 OR strpos(coalesce(code, ''), ${n}) > 0)"
        ));
    }
    (format!("WHERE {}", parts.join(" AND ")), params)
}
