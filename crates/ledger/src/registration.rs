//! Registering a host run in the `hosts` table, and who may take a host ID.
//!
//! A newer run under a host ID supersedes the older ones at once (their running receipts are
//! declared `INTERRUPTED`), which is what a restart after a crash needs. It is also what makes
//! two live hosts started with the same `--host-id` (by default both take the machine's
//! hostname) stop each other forever under a supervisor. So a run registers only when no live
//! run holds the name — none whose lease has not lapsed, unless it is a process of this same
//! machine that no longer exists (a crashed run being restarted) — or when the operator said
//! to take the name over (`--take-over-host-id`). The check and the insert are one
//! transaction under an advisory lock on the name, so two hosts starting at once cannot both
//! pass it.

use tokio_postgres::Client;

use super::{unavailable, LedgerConfig, LedgerError};

/// The flag that lets a host supersede a live run of its name; named in the refusal.
pub const TAKE_OVER_FLAG: &str = "--take-over-host-id";

/// This machine's hostname: the default host ID, and how a run's machine is recorded.
pub fn machine_name() -> String {
    // What gethostname(2) reads on Linux: the node name of uname(2).
    match rustix::system::uname().nodename().to_str() {
        Ok(name) if !name.is_empty() => name.to_owned(),
        _ => "polaris-host".to_owned(),
    }
}

/// Registers this run under `config.host_id` with a fresh epoch, unless a live run holds the
/// name and `config.take_over` is not set (then [`LedgerError::Setup`] says which run holds
/// it and what to do). Returns the epoch.
pub(super) async fn register(
    client: &mut Client,
    config: &LedgerConfig,
) -> Result<i64, LedgerError> {
    let machine = machine_name();
    let pid = i64::from(std::process::id());
    let tx = client.transaction().await.map_err(unavailable)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('polaris host id ' || $1, 0))",
        &[&config.host_id],
    )
    .await
    .map_err(unavailable)?;
    let holder = tx
        .query_opt(
            "SELECT run_id, socket, machine, pid,
                    (extract(epoch FROM lease_until - now()) * 1000)::bigint AS left_ms
               FROM hosts
              WHERE host_id = $1 AND state = 'alive' AND lease_until > now()
              ORDER BY epoch DESC LIMIT 1",
            &[&config.host_id],
        )
        .await
        .map_err(unavailable)?;
    if let (Some(row), false) = (holder, config.take_over) {
        let run_id: String = row.get("run_id");
        let socket: String = row.get("socket");
        let their_machine: Option<String> = row.get("machine");
        let their_pid: Option<i64> = row.get("pid");
        let left_ms: i64 = row.get("left_ms");
        let gone = their_machine.as_deref() == Some(machine.as_str())
            && their_pid.is_some_and(|p| p != pid && !process_exists(p));
        if !gone {
            let at = match (&their_machine, their_pid) {
                (Some(m), Some(p)) => format!("pid {p} on {m}"),
                _ => "a host of an older Polaris".to_owned(),
            };
            return Err(LedgerError::Setup(format!(
                "the host ID {:?} is held by a live host: run {run_id} ({at}, socket {socket}), \
                 whose lease has {left_ms} ms left. Give this host another name with \
                 --host-id NAME (each host of a fleet needs its own), or stop that host first; \
                 to replace it on purpose (its running requests become INTERRUPTED), start \
                 this one with {TAKE_OVER_FLAG}",
                config.host_id
            )));
        }
    }
    let epoch: i64 = tx
        .query_one(
            "INSERT INTO hosts (host_id, run_id, socket, lease_until, state, renewed_at,
                                contact_since, machine, pid)
             VALUES ($1, $2, $3, now() + $4::float8 * interval '1 millisecond', 'alive',
                     now(), now(), $5, $6)
             RETURNING epoch",
            &[
                &config.host_id,
                &config.run_id,
                &config.socket,
                &(config.lease.as_millis() as f64),
                &machine,
                &pid,
            ],
        )
        .await
        .map_err(unavailable)?
        .try_get(0)
        .map_err(unavailable)?;
    tx.commit().await.map_err(unavailable)?;
    Ok(epoch)
}

/// Whether a process with this pid exists on this machine (one of another user counts).
fn process_exists(pid: i64) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    // Signal 0 sends nothing; it only asks whether the process exists.
    rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH)
}
