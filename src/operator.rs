//! The operator commands — `polaris receipts`, `polaris verify`, `polaris clear` — each a thin
//! layer over the introspection socket with exactly the console's powers and no others.
//!
//! Exit codes: 0 success, 1 a refusal or error reply (or a declined clear), 2 bad usage,
//! 3 the host is unavailable or the connection was lost.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::client::{BridgeClient, ClientError};
use crate::protocol::introspection::{
    ClearCommitParams, ClearCommitted, ClearPrepareParams, ClearPrepared, IntrospectMethod,
    OutcomeAcknowledgeParams, OutcomeAcknowledged, ReceiptFilter, ReceiptsListParams,
    ReceiptsListResult, RefusalReason, Sort,
};
use crate::protocol::results::VerifyResult;
use crate::protocol::{ErrorCode, Reply};
use crate::server::INTROSPECT_SOCKET;
use crate::tasks::VerifyOutcome;

/// What `polaris receipts` shows.
#[derive(Clone, Debug)]
pub struct ListOptions {
    /// Which receipts to list.
    pub filter: ReceiptFilter,
    /// The order (newest first by default).
    pub sort: Option<Sort>,
    /// Rows to skip.
    pub offset: usize,
    /// Rows to show (at most 1000).
    pub limit: usize,
    /// Print the raw `receipts.list` result instead of a table.
    pub json: bool,
}

/// What `polaris clear` clears and how it is confirmed.
#[derive(Clone, Debug)]
pub struct ClearOptions {
    /// Request IDs to clear (exclusive with a filter).
    pub ids: Vec<String>,
    /// A filter selecting the receipts to clear.
    pub filter: ReceiptFilter,
    /// Why (recorded in the audit log); asked for on a terminal when absent.
    pub reason: Option<String>,
    /// Who (recorded in the audit log); the OS user by default.
    pub operator: Option<String>,
    /// Commit without asking; required with `reason` when stdin is not a terminal.
    pub yes: bool,
}

fn client(socket_dir: &Path) -> BridgeClient {
    BridgeClient::at_path(&socket_dir.join(INTROSPECT_SOCKET))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}

/// A reply's result, or the exit code after saying what went wrong.
fn result_of(command: &str, reply: Result<Reply, ClientError>) -> Result<Value, ExitCode> {
    match reply {
        Ok(Reply {
            ok: true, result, ..
        }) => Ok(result.unwrap_or(Value::Null)),
        Ok(Reply { error: Some(e), .. }) => {
            eprintln!("polaris {command}: {}: {}", e.code, e.message);
            Err(ExitCode::from(1))
        }
        Ok(_) => {
            eprintln!("polaris {command}: the host sent an error reply without an error body");
            Err(ExitCode::from(1))
        }
        Err(e) => {
            eprintln!(
                "polaris {command}: {}",
                e.message
                    .replace("Polaris host", "Polaris host's introspection socket")
            );
            Err(ExitCode::from(3))
        }
    }
}

/// A result read as the type of the method called; a reply of another shape is reported
/// like an error reply.
fn read<T: DeserializeOwned>(command: &str, result: &Value) -> Result<T, ExitCode> {
    T::deserialize(result).map_err(|e| {
        eprintln!("polaris {command}: the host's reply could not be read ({e}): {result}");
        ExitCode::from(1)
    })
}

/// Params as they go on the wire.
fn to_params<T: serde::Serialize>(params: &T) -> Value {
    serde_json::to_value(params).expect("params serialise")
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// `ok`, the error code, or `-` while there is no result.
fn result_text(ok: Option<bool>, code: Option<ErrorCode>) -> &'static str {
    match (ok, code) {
        (Some(true), _) => "ok",
        (Some(false), Some(code)) => code.as_str(),
        _ => "-",
    }
}

/// `polaris receipts`: one page of `receipts.list`.
pub fn receipts(socket_dir: &Path, options: ListOptions) -> ExitCode {
    let params = ReceiptsListParams {
        offset: Some(options.offset),
        limit: Some(options.limit),
        sort: options.sort,
        ..ReceiptsListParams::new(options.filter)
    };
    let method = IntrospectMethod::ReceiptsList.as_str();
    let reply = runtime().block_on(client(socket_dir).call(method, to_params(&params)));
    let result = match result_of("receipts", reply) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if options.json {
        println!("{result}");
        return ExitCode::SUCCESS;
    }
    let list = match read::<ReceiptsListResult>("receipts", &result) {
        Ok(list) => list,
        Err(code) => return code,
    };
    let total = list.total;
    if list.items.is_empty() {
        println!("no receipts match ({total} in total)");
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<36}  {:<18}  {:<8}  {:<9}  {:<22}  {:>5}  CLEARABLE",
        "REQUEST ID", "METHOD", "TASK", "STATE", "RESULT", "COPY"
    );
    for it in &list.items {
        let clearable = match it.refusal {
            None => "yes".to_string(),
            Some(why) => format!("no ({})", why.as_str()),
        };
        println!(
            "{:<36}  {:<18}  {:<8}  {:<9}  {:<22}  {:>5}  {clearable}",
            it.request_id,
            it.method,
            short(it.task_id.as_deref().unwrap_or("")),
            it.state.as_str(),
            result_text(it.ok, it.code),
            it.joins + it.replays,
        );
    }
    let first = options.offset + 1;
    println!(
        "receipts {first}–{} of {total} matching",
        options.offset + list.items.len()
    );
    ExitCode::SUCCESS
}

/// `polaris acknowledge REQUEST_ID --reason R`: records that an uncertain outcome was settled
/// outside Polaris (`outcome.acknowledge`), so its receipt may be cleared. Executes nothing.
pub fn acknowledge(
    socket_dir: &Path,
    request_id: &str,
    reason: &str,
    operator: Option<String>,
    json_out: bool,
) -> ExitCode {
    let method = IntrospectMethod::OutcomeAcknowledge.as_str();
    let params = to_params(&OutcomeAcknowledgeParams {
        reason: reason.to_owned(),
        request_id: request_id.to_owned(),
        operator,
    });
    let reply = runtime().block_on(client(socket_dir).call(method, params));
    let result = match result_of("acknowledge", reply) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if json_out {
        println!("{result}");
        return ExitCode::SUCCESS;
    }
    let done = match read::<OutcomeAcknowledged>("acknowledge", &result) {
        Ok(v) => v,
        Err(code) => return code,
    };
    println!(
        "request {}: acknowledged by {} at {} ({}); nothing was executed. Its receipt may now be cleared (polaris clear {}).",
        done.request_id, done.operator, done.acknowledged_at, done.reason, done.request_id
    );
    ExitCode::SUCCESS
}

/// `polaris verify TASK_ID`: `task.verifyOutcome` through the introspection socket.
pub fn verify(socket_dir: &Path, task_id: &str, json_out: bool) -> ExitCode {
    let method = IntrospectMethod::TaskVerifyOutcome.as_str();
    let reply = runtime().block_on(client(socket_dir).call(method, json!({"taskId": task_id})));
    let result = match result_of("verify", reply) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if json_out {
        println!("{result}");
        return ExitCode::SUCCESS;
    }
    let verified = match read::<VerifyResult>("verify", &result) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let meaning = match verified.outcome {
        VerifyOutcome::Confirmed => "the expected effect is observed; the pending outcome is resolved",
        VerifyOutcome::NotObserved => "the page does not show the expected effect (yet); the task stays blocked — verify again later, or stop the task",
        VerifyOutcome::Unknown => "the read failed or timed out; the task stays blocked — verify again",
        VerifyOutcome::None => "the task has no pending outcome",
    };
    println!(
        "task {task_id}: {} — {meaning}. Task state: {}.",
        verified.outcome.as_str(),
        verified.state.as_str()
    );
    if let Some(obs) = &verified.observation {
        println!("observed {} = {:?}", obs.target, obs.value);
    }
    ExitCode::SUCCESS
}

/// `polaris clear`: prepare, print the current result of every receipt to be cleared and every
/// refusal, confirm (a terminal prompt, or `--yes --reason` in scripts), commit.
pub fn clear(socket_dir: &Path, options: ClearOptions) -> ExitCode {
    let params = match (options.ids.is_empty(), options.filter.is_empty()) {
        (false, true) => ClearPrepareParams {
            request_ids: Some(options.ids.clone()),
            filter: None,
        },
        (true, false) => ClearPrepareParams {
            request_ids: None,
            filter: Some(options.filter.clone()),
        },
        (true, true) => {
            eprintln!("polaris clear: name request IDs or a filter (e.g. --state completed, --task TASK_ID); nothing was cleared");
            return ExitCode::from(2);
        }
        (false, false) => {
            eprintln!("polaris clear: give request IDs or a filter, not both; nothing was cleared");
            return ExitCode::from(2);
        }
    };
    let interactive = std::io::stdin().is_terminal();
    if let Some(r) = &options.reason {
        if r.trim().is_empty() || r.chars().count() > 500 {
            eprintln!("polaris clear: --reason must be 1–500 characters; nothing was cleared");
            return ExitCode::from(2);
        }
    }
    let rt = runtime();
    let client = client(socket_dir);
    let prepare = IntrospectMethod::ReceiptsClearPrepare.as_str();
    let prepared = match result_of(
        "clear",
        rt.block_on(client.call(prepare, to_params(&params))),
    )
    .and_then(|r| read::<ClearPrepared>("clear", &r))
    {
        Ok(r) => r,
        Err(code) => return code,
    };
    let (clearable, refused) = (&prepared.clearable, &prepared.refused);
    if !clearable.is_empty() {
        println!(
            "{} receipt(s) would be cleared (current results):",
            clearable.len()
        );
        for c in clearable {
            println!(
                "  {:<36}  {:<18}  task {:<8}  {:<22}  completed {}  joins {} replays {}",
                c.request_id,
                c.method,
                short(c.task_id.as_deref().unwrap_or("")),
                result_text(Some(c.ok), c.code),
                c.completed_at,
                c.joins,
                c.replays,
            );
        }
    }
    if !refused.is_empty() {
        println!("{} refused:", refused.len());
        for r in refused {
            let why = match r.reason {
                RefusalReason::Running => "running — its execution has not finished",
                RefusalReason::UnverifiedOutcome => "unverified_outcome — its effect is uncertain; run `polaris verify` on its task first (or stop the task)",
                RefusalReason::Unknown => "unknown — no receipt with this ID in this run",
                RefusalReason::AlreadyCleared => "already_cleared",
            };
            println!("  {:<36}  {why}", r.request_id);
        }
    }
    if clearable.is_empty() {
        println!("nothing to clear");
        return if refused.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    let reason = match (options.yes, options.reason.clone(), interactive) {
        (true, Some(reason), _) => reason,
        (_, _, false) => {
            eprintln!("polaris clear: not a terminal, so nothing was cleared; run again with --yes --reason \"why\" to commit");
            return ExitCode::from(2);
        }
        (yes, reason, true) => {
            let reason = match reason {
                Some(r) => r,
                None => match prompt("Reason for clearing (recorded in the audit log): ") {
                    Some(r) if !r.trim().is_empty() && r.chars().count() <= 500 => {
                        r.trim().to_string()
                    }
                    _ => {
                        eprintln!("polaris clear: a reason of 1–500 characters is required; nothing was cleared");
                        return ExitCode::from(1);
                    }
                },
            };
            if !yes {
                let question = format!(
                    "Clear these {} receipt(s)? Their IDs will be refused for the rest of this run. Type y to confirm: ",
                    clearable.len()
                );
                if !matches!(
                    prompt(&question).as_deref().map(str::trim),
                    Some("y" | "Y" | "yes")
                ) {
                    println!("nothing was cleared");
                    return ExitCode::from(1);
                }
            }
            reason
        }
    };
    let commit = ClearCommitParams {
        token: prepared.token.clone(),
        reason,
        operator: options.operator.clone(),
    };
    let method = IntrospectMethod::ReceiptsClearCommit.as_str();
    match rt.block_on(client.call(method, to_params(&commit))) {
        Ok(Reply {
            ok: true,
            result: Some(result),
            ..
        }) => {
            let done = match read::<ClearCommitted>("clear", &result) {
                Ok(done) => done,
                Err(code) => return code,
            };
            let receipts = &done.receipts;
            println!(
                "cleared {} receipt(s); receipts used {} of {}; tombstones {} of {}",
                done.cleared,
                receipts.used,
                receipts.capacity,
                receipts.tombstones,
                receipts.tombstone_capacity
            );
            if let Some(e) = &done.audit_error {
                eprintln!("polaris clear: warning: {e}");
            }
            ExitCode::SUCCESS
        }
        Ok(Reply { error: Some(e), .. }) if e.code == ErrorCode::ClearTokenStale => {
            eprintln!("polaris clear: {}: {}", e.code, e.message);
            eprintln!("polaris clear: run the same command again to see the current results");
            ExitCode::from(1)
        }
        Err(e) if e.code == ErrorCode::BridgeDisconnected || e.code == ErrorCode::BridgeTimeout => {
            eprintln!(
                "polaris clear: the connection was lost during the commit; whether it applied is unknown. Re-read with `polaris receipts` (cleared IDs are gone from it) before deciding anything; do not repeat the clear blindly"
            );
            ExitCode::from(3)
        }
        other => match result_of("clear", other) {
            Ok(_) => ExitCode::SUCCESS,
            Err(code) => code,
        },
    }
}

fn prompt(question: &str) -> Option<String> {
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{question}");
    let _ = stderr.flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_string()),
    }
}
