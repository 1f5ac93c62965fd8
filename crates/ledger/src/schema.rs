//! The ledger's schema and its migrations.
//!
//! Every host applies the migrations at start, one host at a time (a transaction-scoped
//! advisory lock), so a fleet can be upgraded by restarting its hosts with a newer binary. A
//! database whose schema is newer than this binary is refused: an older host must not write
//! rows it does not understand.

use tokio_postgres::Client;

use super::LedgerError;

/// The schema version this binary writes and reads.
pub const SCHEMA_VERSION: i32 = 5;

/// The advisory lock key that makes migrations one host at a time ("Polaris" in ASCII).
const MIGRATION_LOCK: i64 = 0x0050_6f6c_6172_6973;

/// The SQLSTATE the ledger's functions raise when a host's epoch is fenced out.
pub const FENCED_SQLSTATE: &str = "PXF01";

/// The channel a completion notifies, with the request ID as payload.
pub const CHANNEL: &str = "polaris_receipts";

/// Migrations in order: each brings the schema from `version - 1` to `version`.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, V1),
    (2, V2),
    (3, V3_HOSTS),
    (4, V4_HOLDER),
    (5, V5_INTERRUPTED),
];

/// The advisory lock that orders the fleet's receipt changes (clears, acknowledgements): each
/// takes it before drawing its `change_seq`, so change numbers commit in increasing order and a
/// host that read every change up to N has missed none below it.
pub const CHANGES_LOCK: i64 = 0x0050_6f6c_4368_6e67;

/// The payload a change (clear, acknowledgement) or a census request notifies on [`CHANNEL`]:
/// not a request ID (`#` is not allowed in one), so no waiting copy mistakes it for its own.
pub const CHANGES_NOTE: &str = "#changes";

/// Version 1: receipts, hosts, the fleet's settings and usage counter, and the batch functions.
///
/// The functions run with `enable_seqscan = off`: their plans are cached per connection, and
/// a plan made while `receipts` was small (a sequential scan) would otherwise stay while the
/// table grows to millions of rows. Every lookup they make is by primary key or index.
const V1: &str = r#"
CREATE TABLE receipts (
    request_id   text PRIMARY KEY,
    request      text NOT NULL,
    method       text NOT NULL,
    task_id      text,
    host_id      text NOT NULL,
    epoch        bigint NOT NULL,
    run_id       text NOT NULL,
    state        text NOT NULL CHECK (state IN ('running', 'completed', 'cleared')),
    reply        text,
    first_seen   bigint NOT NULL,
    completed_at bigint,
    cleared_at   bigint,
    clear_reason text
);
CREATE INDEX receipts_task ON receipts (task_id);
CREATE INDEX receipts_running ON receipts (epoch) WHERE state = 'running';
CREATE INDEX receipts_cleared ON receipts (cleared_at) WHERE state = 'cleared';

CREATE TABLE hosts (
    epoch       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host_id     text NOT NULL,
    run_id      text NOT NULL,
    socket      text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL,
    state       text NOT NULL CHECK (state IN ('alive', 'left', 'dead'))
);
CREATE INDEX hosts_alive ON hosts (host_id, epoch) WHERE state = 'alive';

-- The fleet's capacities: the first host stores its own, later hosts read them.
CREATE TABLE fleet_settings (
    id                 int PRIMARY KEY CHECK (id = 1),
    capacity           bigint NOT NULL CHECK (capacity >= 0),
    tombstone_capacity bigint NOT NULL CHECK (tombstone_capacity >= 0)
);

-- Receipts held (running + completed) and tombstones. Claims lock this row once per batch,
-- which makes the fleet's capacity exact; reaping locks it too, which orders a host's death
-- after its claims; clearing locks it, which makes the tombstone capacity exact.
CREATE TABLE fleet_usage (
    id         int PRIMARY KEY CHECK (id = 1),
    used       bigint NOT NULL CHECK (used >= 0),
    tombstones bigint NOT NULL CHECK (tombstones >= 0)
);
INSERT INTO fleet_usage (id, used, tombstones) VALUES (1, 0, 0);

-- Claims a batch of new mutations for one host run. Returns one row per input position: 'new'
-- (inserted under p_epoch), 'existing' (with the row that was there) or 'full'. The input IDs
-- must be distinct.
--
-- The rows are inserted first, in request ID order (so two batches never wait on each other
-- in a cycle), without any shared lock: batches of every host insert in parallel. Only then
-- does the batch lock the fleet's usage row, check that its host run is still alive, give back
-- what exceeds the capacity (the latest arrivals) and add the rest to the count. The lock is
-- held only for that and an asynchronous commit; the caller makes the batch durable with
-- polaris_flush() before it answers anyone, group-committed with every other host's flushes
-- (a lock held through the fsync would serialize the fleet on the disk).
CREATE FUNCTION polaris_claim(p_epoch bigint, p_ids text[], p_requests text[], p_methods text[],
                              p_tasks text[], p_ats bigint[])
RETURNS TABLE (ord bigint, outcome text, used bigint, capacity bigint,
               request_id text, request text, method text, task_id text, host_id text,
               epoch bigint, run_id text, state text, reply text, first_seen bigint,
               completed_at bigint, cleared_at bigint, clear_reason text)
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
#variable_conflict use_column
DECLARE
    v_host text;
    v_run text;
    v_used bigint;
    v_cap bigint;
    v_room bigint;
    v_inserted text[] := '{}';
    v_excess text[];
BEGIN
    SELECT s.capacity INTO v_cap FROM fleet_settings s WHERE s.id = 1;
    SELECT u.used INTO v_used FROM fleet_usage u WHERE u.id = 1;
    IF v_used < v_cap AND EXISTS (
        SELECT 1 FROM unnest(p_ids) AS i(id)
         WHERE NOT EXISTS (SELECT 1 FROM receipts r WHERE r.request_id = i.id)
    ) THEN
        PERFORM set_config('synchronous_commit', 'off', true);
        SELECT h.host_id, h.run_id INTO v_host, v_run FROM hosts h WHERE h.epoch = p_epoch;
        WITH ins AS (
            INSERT INTO receipts (request_id, request, method, task_id, host_id, epoch, run_id,
                                  state, first_seen)
            SELECT u.id, u.request, u.method, u.task, coalesce(v_host, ''), p_epoch,
                   coalesce(v_run, ''), 'running', u.at
              FROM unnest(p_ids, p_requests, p_methods, p_tasks, p_ats)
                   AS u(id, request, method, task, at)
             ORDER BY u.id
            ON CONFLICT DO NOTHING
            RETURNING receipts.request_id
        )
        SELECT coalesce(array_agg(ins.request_id), '{}') INTO v_inserted FROM ins;
        IF cardinality(v_inserted) > 0 THEN
            SELECT u.used INTO v_used FROM fleet_usage u WHERE u.id = 1 FOR UPDATE;
            PERFORM 1 FROM hosts h
              WHERE h.epoch = p_epoch AND h.state = 'alive'
                AND h.lease_until > clock_timestamp();
            IF NOT FOUND THEN
                RAISE EXCEPTION 'host epoch % is no longer alive in the ledger', p_epoch
                    USING ERRCODE = 'PXF01';
            END IF;
            v_room := greatest(v_cap - v_used, 0);
            IF cardinality(v_inserted) > v_room THEN
                SELECT coalesce(array_agg(x.id), '{}') INTO v_excess
                  FROM (SELECT i.id FROM unnest(p_ids) WITH ORDINALITY AS i(id, ord)
                         WHERE i.id = ANY(v_inserted)
                         ORDER BY i.ord OFFSET v_room) AS x;
                DELETE FROM receipts r WHERE r.request_id = ANY(v_excess);
                v_inserted := ARRAY(SELECT unnest(v_inserted) EXCEPT SELECT unnest(v_excess));
            END IF;
            UPDATE fleet_usage u SET used = u.used + cardinality(v_inserted) WHERE u.id = 1;
            v_used := v_used + cardinality(v_inserted);
        END IF;
    END IF;
    RETURN QUERY
    SELECT i.ord,
           CASE WHEN n.id IS NOT NULL THEN 'new'
                WHEN r.request_id IS NOT NULL THEN 'existing'
                ELSE 'full' END,
           v_used, v_cap,
           r.request_id, r.request, r.method, r.task_id, r.host_id, r.epoch, r.run_id, r.state,
           r.reply, r.first_seen, r.completed_at, r.cleared_at, r.clear_reason
      FROM unnest(p_ids) WITH ORDINALITY AS i(id, ord)
      LEFT JOIN unnest(v_inserted) AS n(id) ON n.id = i.id
      LEFT JOIN receipts r ON r.request_id = i.id AND n.id IS NULL;
END
$fn$;

-- Returns once every transaction committed before it is durable: a transaction that writes a
-- WAL record, committed with synchronous_commit = on, flushes the WAL up to its own commit,
-- which lies after every earlier commit (and waits for synchronous standbys the same way).
CREATE FUNCTION polaris_flush() RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    PERFORM pg_logical_emit_message(true, 'polaris_flush', '');
END
$fn$;

-- Stores a batch of completions for one host run, fenced by its epoch. Returns the request IDs
-- that were stored; the others were no longer this run's running receipts.
CREATE FUNCTION polaris_complete(p_epoch bigint, p_ids text[], p_replies text[], p_tasks text[],
                                 p_ats bigint[])
RETURNS SETOF text
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
DECLARE
    v_done text[];
BEGIN
    WITH input AS (
        SELECT * FROM unnest(p_ids, p_replies, p_tasks, p_ats) AS u(id, reply, task, at)
    ), upd AS (
        UPDATE receipts r
           SET state = 'completed', reply = i.reply, task_id = coalesce(i.task, r.task_id),
               completed_at = i.at
          FROM input i
         WHERE r.request_id = i.id AND r.epoch = p_epoch AND r.state = 'running'
        RETURNING r.request_id
    )
    SELECT coalesce(array_agg(upd.request_id), '{}') INTO v_done FROM upd;
    PERFORM pg_notify('polaris_receipts', d) FROM unnest(v_done) AS d;
    RETURN QUERY SELECT unnest(v_done);
END
$fn$;

-- Turns the running receipts of a dead (or leaving) host run into their stored INTERRUPTED
-- replies, fenced by that epoch. Returns how many it changed.
CREATE FUNCTION polaris_interrupt(p_epoch bigint, p_ids text[], p_replies text[])
RETURNS bigint
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
DECLARE
    v_done text[];
BEGIN
    WITH upd AS (
        UPDATE receipts r
           SET state = 'completed', reply = u.reply,
               completed_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
          FROM unnest(p_ids, p_replies) AS u(id, reply)
         WHERE r.request_id = u.id AND r.epoch = p_epoch AND r.state = 'running'
        RETURNING r.request_id
    )
    SELECT coalesce(array_agg(upd.request_id), '{}') INTO v_done FROM upd;
    PERFORM pg_notify('polaris_receipts', d) FROM unnest(v_done) AS d;
    RETURN cardinality(v_done);
END
$fn$;

-- Clears completed receipts for the fleet, all or none: each must still be completed with the
-- reply the operator saw (same epoch and completion time), and the tombstones must fit.
-- Returns 'cleared', 'stale' (with the IDs that changed) or 'full' (with the tombstone count
-- and capacity).
CREATE FUNCTION polaris_clear(p_ids text[], p_epochs bigint[], p_completed bigint[],
                              p_reason text, p_at bigint)
RETURNS TABLE (outcome text, changed text[], tombstones bigint, tombstone_capacity bigint)
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
#variable_conflict use_column
DECLARE
    v_tomb bigint;
    v_cap bigint;
    v_changed text[];
    v_n bigint;
BEGIN
    SELECT u.tombstones INTO v_tomb FROM fleet_usage u WHERE u.id = 1 FOR UPDATE;
    SELECT s.tombstone_capacity INTO v_cap FROM fleet_settings s WHERE s.id = 1;
    SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}') INTO v_changed
      FROM unnest(p_ids, p_epochs, p_completed) AS i(id, epoch, completed)
     WHERE NOT EXISTS (SELECT 1 FROM receipts r
                        WHERE r.request_id = i.id AND r.state = 'completed'
                          AND r.epoch = i.epoch
                          AND r.completed_at IS NOT DISTINCT FROM i.completed);
    IF cardinality(v_changed) > 0 THEN
        RETURN QUERY SELECT 'stale'::text, v_changed, v_tomb, v_cap;
        RETURN;
    END IF;
    SELECT count(DISTINCT i.id) INTO v_n FROM unnest(p_ids) AS i(id);
    IF v_tomb + v_n > v_cap THEN
        RETURN QUERY SELECT 'full'::text, '{}'::text[], v_tomb, v_cap;
        RETURN;
    END IF;
    UPDATE receipts r
       SET state = 'cleared', reply = NULL, cleared_at = p_at, clear_reason = p_reason
     WHERE r.request_id = ANY(p_ids) AND r.state = 'completed';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE fleet_usage u SET used = u.used - v_n, tombstones = u.tombstones + v_n WHERE u.id = 1;
    PERFORM pg_notify('polaris_receipts', d) FROM unnest(p_ids) AS d;
    RETURN QUERY SELECT 'cleared'::text, '{}'::text[], v_tomb + v_n, v_cap;
END
$fn$;

-- Deletes a host run's running receipt whose action never started, fenced by its epoch, and
-- gives its place back. Safe to repeat. Returns whether a row was deleted.
CREATE FUNCTION polaris_withdraw(p_epoch bigint, p_id text)
RETURNS boolean
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
BEGIN
    DELETE FROM receipts r WHERE r.request_id = p_id AND r.epoch = p_epoch AND r.state = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE fleet_usage u SET used = u.used - 1 WHERE u.id = 1;
    PERFORM pg_notify('polaris_receipts', p_id);
    RETURN true;
END
$fn$;
"#;

/// Version 2: the fleet's one book for operators (SPEC §6, §11, §13).
///
/// - `code`: the stored reply's error code, derived from the reply (`NULL` for success); the
///   clearability rule and the listing filters read it.
/// - `acknowledged_at`, `acknowledged_by`, `acknowledge_reason`: an operator settled an
///   uncertain outcome outside Polaris (`outcome.acknowledge` on any host).
/// - `settled`: the host that owns the task confirmed the pending outcome by verification, or
///   stopped the task; set by that host run only (fenced by its epoch).
/// - `replays`: copies answered straight from the row by a host that keeps no copy of it (a
///   re-send for a task that lives on another host); copies answered from a host's cached copy
///   are counted on that host and reported to a clear's census instead.
/// - `change_seq`: drawn from `polaris_changes` by every clear and acknowledgement, in commit
///   order (see `CHANGES_LOCK`): hosts read the changes after the last one they applied, so a
///   host that missed a notification still converges.
/// - `feed_marks`: the last change each host run applied to its copies.
/// - `clear_census`, `clear_census_reports`: a clear asks every live host what copies of the
///   listed receipts it holds (a checksum of its cached copies and their joins and replays) at
///   prepare and at commit; a difference means a copy was answered in between.
/// - Indexes for the bounded, paged listing of `receipts.list` (by time; by task).
const V2: &str = r#"
-- Replaced by polaris_clear_fleet, which also checks clearability and the hosts' census.
DROP FUNCTION polaris_clear(text[], bigint[], bigint[], text, bigint);
ALTER TABLE receipts
    ADD COLUMN code text GENERATED ALWAYS AS
        (substring(reply FROM '^"ok":false,"error":\{"code":"([A-Z_]+)"')) STORED,
    ADD COLUMN acknowledged_at bigint,
    ADD COLUMN acknowledged_by text,
    ADD COLUMN acknowledge_reason text,
    ADD COLUMN settled boolean NOT NULL DEFAULT false,
    ADD COLUMN replays bigint NOT NULL DEFAULT 0,
    ADD COLUMN cleared_by text,
    ADD COLUMN change_seq bigint;
CREATE SEQUENCE polaris_changes;
-- Every index is paid for by every claim and completion: the listing's pages read the first,
-- a task's receipts (and a task's host) the second, which replaces version 1's task index.
CREATE INDEX receipts_seen ON receipts (first_seen, request_id);
CREATE INDEX receipts_task_seen ON receipts (task_id, first_seen, request_id);
DROP INDEX receipts_task;
CREATE INDEX receipts_changes ON receipts (change_seq) WHERE change_seq IS NOT NULL;

CREATE TABLE clear_census (
    token      text NOT NULL,
    phase      text NOT NULL CHECK (phase IN ('prepare', 'commit')),
    ids        text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (token, phase)
);
-- How far each host run has applied the fleet's changes to its copies: a clear is answered
-- once every live host has dropped its copies of what it cleared.
CREATE TABLE feed_marks (
    epoch bigint PRIMARY KEY,
    seq   bigint NOT NULL
);
CREATE TABLE clear_census_reports (
    token    text NOT NULL,
    phase    text NOT NULL,
    epoch    bigint NOT NULL,
    checksum bigint NOT NULL,
    PRIMARY KEY (token, phase, epoch)
);

-- Whether a completed row may be cleared (SPEC §6): an uncertain outcome must have been
-- acknowledged, or (OUTCOME_UNCERTAIN) settled by the host that owns its task.
CREATE FUNCTION polaris_clearable(p_code text, p_acknowledged bigint, p_settled boolean)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $fn$
    SELECT CASE
        WHEN p_acknowledged IS NOT NULL THEN true
        WHEN p_code = 'INTERRUPTED' THEN false
        WHEN p_code = 'OUTCOME_UNCERTAIN' THEN p_settled
        ELSE true END
$fn$;

-- Clears completed receipts for the fleet, all or none, in one transaction. Each listed row
-- must still be completed, clearable and answered from the row as often as the operator saw
-- (p_replays); every live host's census of its cached copies must be what it was at the
-- prepare; the tombstones must fit. Returns 'cleared', 'stale' (with the IDs that changed),
-- 'copied' (with the hosts whose copies changed) or 'full'.
CREATE FUNCTION polaris_clear_fleet(p_token text, p_ids text[], p_replays bigint[],
                                    p_reason text, p_at bigint, p_host text)
RETURNS TABLE (outcome text, changed text[], tombstones bigint, tombstone_capacity bigint)
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
#variable_conflict use_column
DECLARE
    v_tomb bigint;
    v_cap bigint;
    v_changed text[];
    v_n bigint;
BEGIN
    SELECT u.tombstones INTO v_tomb FROM fleet_usage u WHERE u.id = 1 FOR UPDATE;
    PERFORM pg_advisory_xact_lock(22640508914921063);
    SELECT s.tombstone_capacity INTO v_cap FROM fleet_settings s WHERE s.id = 1;
    PERFORM 1 FROM receipts r WHERE r.request_id = ANY(p_ids) ORDER BY r.request_id FOR UPDATE;
    SELECT coalesce(array_agg(DISTINCT h.host_id), '{}') INTO v_changed
      FROM ((SELECT a.epoch, a.checksum FROM clear_census_reports a
              WHERE a.token = p_token AND a.phase = 'prepare' AND a.checksum <> 0
             EXCEPT
             SELECT b.epoch, b.checksum FROM clear_census_reports b
              WHERE b.token = p_token AND b.phase = 'commit' AND b.checksum <> 0)
            UNION
            (SELECT b.epoch, b.checksum FROM clear_census_reports b
              WHERE b.token = p_token AND b.phase = 'commit' AND b.checksum <> 0
             EXCEPT
             SELECT a.epoch, a.checksum FROM clear_census_reports a
              WHERE a.token = p_token AND a.phase = 'prepare' AND a.checksum <> 0)) d
      JOIN hosts h ON h.epoch = d.epoch;
    DELETE FROM clear_census_reports c WHERE c.token = p_token;
    DELETE FROM clear_census c WHERE c.token = p_token;
    IF cardinality(v_changed) > 0 THEN
        RETURN QUERY SELECT 'copied'::text, v_changed, v_tomb, v_cap;
        RETURN;
    END IF;
    SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}') INTO v_changed
      FROM unnest(p_ids, p_replays) AS i(id, replays)
     WHERE NOT EXISTS (SELECT 1 FROM receipts r
                        WHERE r.request_id = i.id AND r.state = 'completed'
                          AND r.replays = i.replays
                          AND polaris_clearable(r.code, r.acknowledged_at, r.settled));
    IF cardinality(v_changed) > 0 THEN
        RETURN QUERY SELECT 'stale'::text, v_changed, v_tomb, v_cap;
        RETURN;
    END IF;
    SELECT count(DISTINCT i.id) INTO v_n FROM unnest(p_ids) AS i(id);
    IF v_tomb + v_n > v_cap THEN
        RETURN QUERY SELECT 'full'::text, '{}'::text[], v_tomb, v_cap;
        RETURN;
    END IF;
    UPDATE receipts r
       SET state = 'cleared', reply = NULL, cleared_at = p_at, clear_reason = p_reason,
           cleared_by = p_host, change_seq = nextval('polaris_changes')
     WHERE r.request_id = ANY(p_ids) AND r.state = 'completed';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE fleet_usage u SET used = u.used - v_n, tombstones = u.tombstones + v_n WHERE u.id = 1;
    PERFORM pg_notify('polaris_receipts', d) FROM unnest(p_ids) AS d;
    PERFORM pg_notify('polaris_receipts', '#changes');
    RETURN QUERY SELECT 'cleared'::text, '{}'::text[], v_tomb + v_n, v_cap;
END
$fn$;

-- Records that a person settled an uncertain outcome outside Polaris. Returns whether the row
-- was a completed, uncertain receipt (and is now acknowledged).
CREATE FUNCTION polaris_acknowledge(p_id text, p_reason text, p_operator text, p_at bigint)
RETURNS boolean
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(22640508914921063);
    UPDATE receipts r
       SET acknowledged_at = p_at, acknowledged_by = p_operator, acknowledge_reason = p_reason,
           change_seq = nextval('polaris_changes')
     WHERE r.request_id = p_id AND r.state = 'completed'
       AND r.code IN ('OUTCOME_UNCERTAIN', 'INTERRUPTED', 'INTERNAL');
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('polaris_receipts', '#changes');
    RETURN true;
END
$fn$;

-- The host run that executed these receipts settled their uncertain outcomes (verified, or
-- stopped the task), fenced by its epoch. Returns how many rows changed.
CREATE FUNCTION polaris_settle(p_epoch bigint, p_ids text[])
RETURNS bigint
LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
DECLARE
    v_n bigint;
BEGIN
    UPDATE receipts r SET settled = true
     WHERE r.request_id = ANY(p_ids) AND r.epoch = p_epoch AND NOT r.settled;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
"#;

/// Version 3: what each host reports with its lease renewal (its running receipts and blocked
/// tasks, for every host's hosts pane), when it last renewed and since when it has renewed
/// without a gap (reapers wait a lease after losing touch with the database before declaring
/// anyone dead), and when a run ended (its row is pruned a day later).
const V3_HOSTS: &str = r#"
ALTER TABLE hosts
    ADD COLUMN running       bigint NOT NULL DEFAULT 0,
    ADD COLUMN blocked       bigint NOT NULL DEFAULT 0,
    ADD COLUMN renewed_at    timestamptz,
    ADD COLUMN contact_since timestamptz,
    ADD COLUMN ended_at      timestamptz;
CREATE INDEX hosts_ended ON hosts (coalesce(ended_at, lease_until)) WHERE state <> 'alive';
"#;

/// Version 4: the machine and process of each run, so a host starting under a name that a
/// live run holds can say which one, and a restart after a crash on the same machine can tell
/// that the holder is gone.
const V4_HOLDER: &str = r#"
ALTER TABLE hosts
    ADD COLUMN machine text,
    ADD COLUMN pid     bigint;
"#;

/// Version 5: the `INTERRUPTED` receipts nobody acknowledged (a host died holding them), which
/// every host reads each second for its unsettled outcomes: a partial index keeps that read to
/// those rows however large the book is.
const V5_INTERRUPTED: &str = r#"
CREATE INDEX receipts_interrupted ON receipts (first_seen, request_id)
    WHERE code = 'INTERRUPTED' AND acknowledged_at IS NULL;
"#;

/// Brings the database's schema to [`SCHEMA_VERSION`], one host at a time; refuses a schema
/// newer than this binary.
pub async fn migrate(client: &mut Client) -> Result<(), LedgerError> {
    let tx = client.transaction().await.map_err(super::unavailable)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(super::unavailable)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS polaris_schema (
             id int PRIMARY KEY CHECK (id = 1),
             version int NOT NULL
         )",
    )
    .await
    .map_err(super::unavailable)?;
    let current: i32 = match tx
        .query_opt("SELECT version FROM polaris_schema WHERE id = 1", &[])
        .await
        .map_err(super::unavailable)?
    {
        Some(row) => row.get(0),
        None => 0,
    };
    if current > SCHEMA_VERSION {
        return Err(LedgerError::Setup(format!(
            "the ledger's schema is version {current}, newer than this Polaris (version \
             {SCHEMA_VERSION}); upgrade this host's polaris binary to the fleet's version"
        )));
    }
    for (version, sql) in MIGRATIONS {
        if *version > current {
            tx.batch_execute(sql).await.map_err(|e| {
                LedgerError::Setup(format!(
                    "migrating the ledger's schema to version {version} failed: {}; check that \
                     the database user may create tables and functions",
                    super::describe(&e)
                ))
            })?;
        }
    }
    tx.execute(
        "INSERT INTO polaris_schema (id, version) VALUES (1, $1)
         ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version",
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(super::unavailable)?;
    tx.commit().await.map_err(super::unavailable)?;
    Ok(())
}

/// The schema version a database holds (0 when it has none), for tests and diagnostics.
pub async fn version(client: &Client) -> Result<i32, LedgerError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('polaris_schema') IS NOT NULL", &[])
        .await
        .map_err(super::unavailable)?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let row = client
        .query_opt("SELECT version FROM polaris_schema WHERE id = 1", &[])
        .await
        .map_err(super::unavailable)?;
    Ok(row.map(|r| r.get(0)).unwrap_or(0))
}
