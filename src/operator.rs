//! The operator commands — `polaris receipts`, `polaris verify`, `polaris clear`,
//! `polaris audit` — each a thin layer over the introspection socket with exactly the console's
//! powers and no others, in the console's words.
//!
//! Wherever a command takes a request or task ID, a unique prefix of at least
//! [`MIN_PREFIX`] characters works; an ambiguous one is refused naming the candidates (SPEC §8).
//!
//! Exit codes: 0 done, 1 the host refused or the outcome is not settled (`not_observed`,
//! `unknown`, a partly refused clear, a declined clear), 2 bad usage (an ambiguous or too short
//! prefix included), 3 the host is unavailable or the connection was lost.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::client::{BridgeClient, ClientError};
use crate::protocol::introspection::{
    AuditListParams, AuditListResult, ClearCommitParams, ClearCommitted, ClearPrepareParams,
    ClearPrepared, IntrospectMethod, OutcomeAcknowledgeParams, OutcomeAcknowledged, ReceiptFilter,
    ReceiptsListParams, ReceiptsListResult, RefusalReason, Sort, TasksListParams, TasksListResult,
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
    /// The order read from its end (`--reverse`).
    pub reverse: bool,
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

/// The shortest prefix of an ID accepted where an ID is taken (SPEC §8).
pub const MIN_PREFIX: usize = 6;

/// The host's largest page of `receipts.list` and `audit.list` (SPEC §6).
const LIST_LIMIT: usize = 1000;

/// The length of a whole request or task ID (a UUID): such an ID is sent as given.
const WHOLE_ID: usize = 36;

/// Why a prefix names no single ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixError {
    /// Shorter than [`MIN_PREFIX`] and not a whole ID.
    TooShort,
    /// No candidate starts with it.
    NotFound,
    /// Several candidates start with it (all of them, sorted).
    Ambiguous(Vec<String>),
}

/// The one ID among `candidates` that `given` names: the ID itself, or the only one that
/// starts with `given` when it has at least [`MIN_PREFIX`] characters (as git takes short
/// hashes). The console and every operator command read IDs through this one rule.
pub fn pick_id(
    given: &str,
    candidates: impl IntoIterator<Item = String>,
) -> Result<String, PrefixError> {
    let given = given.trim();
    let mut matches: Vec<String> = Vec::new();
    for c in candidates {
        if c == given {
            return Ok(c);
        }
        if c.starts_with(given) && !matches.contains(&c) {
            matches.push(c);
        }
    }
    if given.chars().count() < MIN_PREFIX {
        return Err(PrefixError::TooShort);
    }
    match matches.len() {
        0 => Err(PrefixError::NotFound),
        1 => Ok(matches.remove(0)),
        _ => {
            matches.sort();
            Err(PrefixError::Ambiguous(matches))
        }
    }
}

/// What an operator reads when a prefix names no single ID, and the exit code.
fn prefix_problem(command: &str, what: &str, given: &str, e: PrefixError) -> ExitCode {
    match e {
        PrefixError::TooShort => {
            eprintln!("polaris {command}: `{given}` is too short to name a {what}: give at least {MIN_PREFIX} characters of its ID");
            ExitCode::from(2)
        }
        PrefixError::NotFound => {
            let code = if what == "task" {
                "TASK_NOT_FOUND"
            } else {
                "RECEIPT_NOT_FOUND"
            };
            eprintln!("polaris {command}: {code}: no {what} of this host run has an ID that is or starts with `{given}`; `polaris receipts` lists the receipts with their tasks");
            ExitCode::from(1)
        }
        PrefixError::Ambiguous(ids) => {
            let shown: Vec<&str> = ids.iter().take(10).map(String::as_str).collect();
            let more = if ids.len() > shown.len() {
                format!(" and {} more", ids.len() - shown.len())
            } else {
                String::new()
            };
            eprintln!(
                "polaris {command}: `{given}` is ambiguous: {} {what}s start with it ({}{more}); give more characters",
                ids.len(),
                shown.join(", ")
            );
            ExitCode::from(2)
        }
    }
}

/// The whole task ID that `given` names among the host's tasks.
fn resolve_task(
    rt: &tokio::runtime::Runtime,
    client: &BridgeClient,
    command: &str,
    given: &str,
) -> Result<String, ExitCode> {
    if given.len() == WHOLE_ID {
        return Ok(given.to_owned());
    }
    if given.chars().count() < MIN_PREFIX {
        return Err(prefix_problem(
            command,
            "task",
            given,
            PrefixError::TooShort,
        ));
    }
    let method = IntrospectMethod::TasksList.as_str();
    let params = to_params(&TasksListParams::default());
    let result = result_of(command, rt.block_on(client.call(method, params)))?;
    let tasks = read::<TasksListResult>(command, &result)?;
    pick_id(given, tasks.tasks.into_iter().map(|t| t.task_id))
        .map_err(|e| prefix_problem(command, "task", given, e))
}

/// For `polaris clear`: the whole ID `given` names, `None` when the book names none (the host
/// then refuses it with its reason), or the ambiguity.
fn resolve_request_quietly(
    rt: &tokio::runtime::Runtime,
    client: &BridgeClient,
    given: &str,
) -> Result<Option<String>, PrefixError> {
    if given.len() == WHOLE_ID {
        return Ok(Some(given.to_owned()));
    }
    let params = ReceiptsListParams {
        limit: Some(LIST_LIMIT),
        search: Some(given.to_owned()),
        ..ReceiptsListParams::default()
    };
    let method = IntrospectMethod::ReceiptsList.as_str();
    let Ok(Reply {
        ok: true,
        result: Some(result),
        ..
    }) = rt.block_on(client.call(method, to_params(&params)))
    else {
        // The prepare that follows reports an unavailable host.
        return Ok(None);
    };
    let Ok(list) = serde_json::from_value::<ReceiptsListResult>(result) else {
        return Ok(None);
    };
    match pick_id(given, list.items.into_iter().map(|r| r.request_id)) {
        Ok(id) => Ok(Some(id)),
        Err(PrefixError::Ambiguous(ids)) => Err(PrefixError::Ambiguous(ids)),
        Err(_) => Ok(None),
    }
}

/// The whole request ID that `given` names among the host's receipts.
pub fn resolve_request(
    rt: &tokio::runtime::Runtime,
    client: &BridgeClient,
    command: &str,
    given: &str,
) -> Result<String, ExitCode> {
    // A caller may choose any request ID ("f1", "order-7"), so the book is always asked: the
    // ID itself wins, and a prefix must be long enough and unique.
    if given.len() == WHOLE_ID {
        return Ok(given.to_owned());
    }
    let params = ReceiptsListParams {
        limit: Some(LIST_LIMIT),
        search: Some(given.to_owned()),
        ..ReceiptsListParams::default()
    };
    let method = IntrospectMethod::ReceiptsList.as_str();
    let result = result_of(
        command,
        rt.block_on(client.call(method, to_params(&params))),
    )?;
    let list = read::<ReceiptsListResult>(command, &result)?;
    pick_id(given, list.items.into_iter().map(|r| r.request_id))
        .map_err(|e| prefix_problem(command, "receipt", given, e))
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
pub fn receipts(socket_dir: &Path, mut options: ListOptions) -> ExitCode {
    let rt = runtime();
    let client = client(socket_dir);
    if let Some(task) = options.filter.task_id.take() {
        match resolve_task(&rt, &client, "receipts", &task) {
            Ok(whole) => options.filter.task_id = Some(whole),
            Err(code) => return code,
        }
    }
    let params = ReceiptsListParams {
        offset: Some(options.offset),
        limit: Some(options.limit),
        sort: options.sort,
        reverse: options.reverse.then_some(true),
        ..ReceiptsListParams::new(options.filter)
    };
    let method = IntrospectMethod::ReceiptsList.as_str();
    let reply = rt.block_on(client.call(method, to_params(&params)));
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
        "{:<36}  {:<18}  {:<36}  {:<9}  {:<22}  {:>5}  {:>7}  CLEARABLE",
        "REQUEST ID", "METHOD", "TASK", "STATE", "RESULT", "JOINS", "REPLAYS"
    );
    for it in &list.items {
        let clearable = match it.refusal {
            None => "yes".to_string(),
            Some(why) => format!("no ({})", why.as_str()),
        };
        println!(
            "{:<36}  {:<18}  {:<36}  {:<9}  {:<22}  {:>5}  {:>7}  {clearable}",
            it.request_id,
            it.method,
            it.task_id.as_deref().unwrap_or("-"),
            it.state.as_str(),
            result_text(it.ok, it.code),
            it.joins,
            it.replays,
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
    let rt = runtime();
    let client = client(socket_dir);
    let request_id = match resolve_request(&rt, &client, "acknowledge", request_id) {
        Ok(id) => id,
        Err(code) => return code,
    };
    let method = IntrospectMethod::OutcomeAcknowledge.as_str();
    let params = to_params(&OutcomeAcknowledgeParams {
        reason: reason.to_owned(),
        request_id,
        operator,
    });
    let reply = rt.block_on(client.call(method, params));
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
///
/// Exit 0 when the outcome is settled (`confirmed`, or `none` pending), 1 when it is not
/// (`not_observed`, `unknown`).
pub fn verify(socket_dir: &Path, task_id: &str, json_out: bool) -> ExitCode {
    let rt = runtime();
    let client = client(socket_dir);
    let task_id = match resolve_task(&rt, &client, "verify", task_id) {
        Ok(id) => id,
        Err(code) => return code,
    };
    let task_id = task_id.as_str();
    let method = IntrospectMethod::TaskVerifyOutcome.as_str();
    let reply = rt.block_on(client.call(method, json!({"taskId": task_id})));
    let result = match result_of("verify", reply) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let verified = match read::<VerifyResult>("verify", &result) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let settled = match verified.outcome {
        VerifyOutcome::Confirmed | VerifyOutcome::None => ExitCode::SUCCESS,
        VerifyOutcome::NotObserved | VerifyOutcome::Unknown => ExitCode::from(1),
    };
    if json_out {
        println!("{result}");
        return settled;
    }
    let meaning = match verified.outcome {
        VerifyOutcome::Confirmed => "the expected effect is observed; the pending outcome is resolved",
        VerifyOutcome::NotObserved => "the page does not show the expected effect (yet); the task stays blocked — verify again later, stop the task, or acknowledge the outcome once it is settled outside Polaris",
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
    settled
}

/// `polaris clear`: prepare, print the current result of every receipt to be cleared and every
/// refusal, confirm (a terminal prompt, or `--yes --reason` in scripts), commit.
pub fn clear(socket_dir: &Path, options: ClearOptions) -> ExitCode {
    let mut params = match clear_params(&options) {
        Ok(params) => params,
        Err(code) => return code,
    };
    let interactive = std::io::stdin().is_terminal();
    let rt = runtime();
    let client = client(socket_dir);
    if let Err(code) = resolve_clear_prefixes(&rt, &client, &mut params) {
        return code;
    }
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
    print_prepared(&prepared);
    let (clearable, refused) = (&prepared.clearable, &prepared.refused);
    if clearable.is_empty() {
        println!("nothing to clear");
        return if refused.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    let reason = match clear_reason(&options, clearable.len(), interactive) {
        Ok(reason) => reason,
        Err(code) => return code,
    };
    let commit = ClearCommitParams {
        token: prepared.token.clone(),
        reason,
        operator: options.operator.clone(),
    };
    let method = IntrospectMethod::ReceiptsClearCommit.as_str();
    let reply = rt.block_on(client.call(method, to_params(&commit)));
    report_commit(reply, refused.len(), !options.ids.is_empty())
}

/// The `receipts.clearPrepare` params of `polaris clear`'s IDs or filter, once its options
/// agree (IDs or a filter, a reason of 1–500 characters, `--yes` only with a reason).
fn clear_params(options: &ClearOptions) -> Result<ClearPrepareParams, ExitCode> {
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
            return Err(ExitCode::from(2));
        }
        (false, false) => {
            eprintln!("polaris clear: give request IDs or a filter, not both; nothing was cleared");
            return Err(ExitCode::from(2));
        }
    };
    if options.yes && options.reason.is_none() {
        eprintln!("polaris clear: --yes needs --reason \"why\" (the reason is recorded in the audit log); nothing was cleared");
        return Err(ExitCode::from(2));
    }
    if let Some(r) = &options.reason {
        if r.trim().is_empty() || r.chars().count() > 500 {
            eprintln!("polaris clear: --reason must be 1–500 characters; nothing was cleared");
            return Err(ExitCode::from(2));
        }
    }
    Ok(params)
}

/// Completes the task ID prefix of the filter, and each request ID prefix the book lists, so
/// the host clears what the operator named.
fn resolve_clear_prefixes(
    rt: &tokio::runtime::Runtime,
    client: &BridgeClient,
    params: &mut ClearPrepareParams,
) -> Result<(), ExitCode> {
    if let Some(task) = params.filter.as_mut().and_then(|f| f.task_id.as_mut()) {
        match resolve_task(rt, client, "clear", task) {
            Ok(whole) => *task = whole,
            Err(code) => return Err(code),
        }
    }
    if let Some(ids) = params.request_ids.as_mut() {
        for id in ids.iter_mut() {
            match resolve_request_quietly(rt, client, id) {
                Ok(Some(whole)) => *id = whole,
                // An ID the book does not list (cleared, unknown, too short to be a prefix) is
                // the host's to refuse, with its reason.
                Ok(None) => {}
                Err(e) => return Err(prefix_problem("clear", "receipt", id, e)),
            }
        }
    }
    Ok(())
}

/// Prints the current result of every receipt the prepared clear would clear, and every
/// refusal with its reason.
fn print_prepared(prepared: &ClearPrepared) {
    let (clearable, refused) = (&prepared.clearable, &prepared.refused);
    if !clearable.is_empty() {
        println!(
            "{} receipt(s) would be cleared (current results):",
            clearable.len()
        );
        for c in clearable {
            println!(
                "  {:<36}  {:<18}  task {:<36}  {:<22}  completed {}  joins {} replays {}",
                c.request_id,
                c.method,
                c.task_id.as_deref().unwrap_or("-"),
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
}

/// The reason of the clear: `--reason` with `--yes`, or asked for on a terminal, followed by
/// the confirmation unless `--yes`; the exit code when there is none or the operator declined.
fn clear_reason(
    options: &ClearOptions,
    clearable: usize,
    interactive: bool,
) -> Result<String, ExitCode> {
    let reason = match (options.yes, options.reason.clone(), interactive) {
        (true, Some(reason), _) => reason,
        (_, _, false) => {
            eprintln!("polaris clear: not a terminal, so nothing was cleared; run again with --yes --reason \"why\" to commit");
            return Err(ExitCode::from(2));
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
                        return Err(ExitCode::from(1));
                    }
                },
            };
            if !yes {
                let question = format!(
                    "Clear these {clearable} receipt(s)? Their IDs will be refused for the rest of this run. Type y to confirm: "
                );
                if !matches!(
                    prompt(&question).as_deref().map(str::trim),
                    Some("y" | "Y" | "yes")
                ) {
                    println!("nothing was cleared");
                    return Err(ExitCode::from(1));
                }
            }
            reason
        }
    };
    Ok(reason)
}

/// Reports the commit's reply: what was cleared (exit 1 when named IDs were refused, which
/// leaves the clear partly done), a stale token, or a lost connection that leaves the clear's
/// outcome unknown (exit 3).
fn report_commit(reply: Result<Reply, ClientError>, refused: usize, named: bool) -> ExitCode {
    match reply {
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
            // Named IDs the host refused leave the clear partly undone (exit 1); a filter's
            // refusals are the receipts it matched that may not be cleared yet, listed above.
            if refused == 0 || !named {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "polaris clear: {} of the receipts named were refused and kept (listed above); the clear is partly done",
                    refused
                );
                ExitCode::from(1)
            }
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

/// What `polaris audit` shows.
#[derive(Clone, Debug)]
pub struct AuditOptions {
    /// Entries to read, newest first (at most 1000).
    pub limit: usize,
    /// Only the entries that cleared this request ID (or a unique prefix of it).
    pub request: Option<String>,
    /// Print the `audit.list` result (filtered when `request` is given) as JSON.
    pub json: bool,
}

/// `polaris audit`: the audit log through `audit.list`, newest first — who cleared what, when
/// and why; with `--request`, the clear that removed one ID (exit 1 when none did).
pub fn audit(socket_dir: &Path, options: AuditOptions) -> ExitCode {
    if options.limit == 0 || options.limit > LIST_LIMIT {
        eprintln!("polaris audit: --limit must be 1–{LIST_LIMIT}");
        return ExitCode::from(2);
    }
    if let Some(r) = &options.request {
        if r.len() < MIN_PREFIX {
            return prefix_problem("audit", "receipt", r, PrefixError::TooShort);
        }
    }
    let params = AuditListParams {
        limit: Some(options.limit),
    };
    let method = IntrospectMethod::AuditList.as_str();
    let reply = runtime().block_on(client(socket_dir).call(method, to_params(&params)));
    let result = match result_of("audit", reply) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut list = match read::<AuditListResult>("audit", &result) {
        Ok(l) => l,
        Err(code) => return code,
    };
    if let Some(r) = &options.request {
        let r = r.trim();
        list.entries
            .retain(|e| e.cleared.iter().any(|c| c.request_id.starts_with(r)));
        for e in &mut list.entries {
            e.cleared.retain(|c| c.request_id.starts_with(r));
        }
    }
    if options.json {
        println!("{}", to_params(&list));
    } else if list.entries.is_empty() {
        match &options.request {
            Some(r) => println!(
                "no clear in the last {} audit entries removed a receipt starting with {r}",
                options.limit
            ),
            None => println!("the audit log has no clears yet"),
        }
    } else {
        for e in &list.entries {
            let verdict = match (&e.acknowledged, &e.stopped) {
                (Some(a), _) => format!(
                    "acknowledged {} {} {}",
                    a.code.as_str(),
                    a.method,
                    a.request_id
                ),
                (None, Some(s)) => format!("stopped task {} (request {})", s.task_id, s.request_id),
                (None, None) => format!("cleared {}", e.cleared.len()),
            };
            println!(
                "{}  {}  {verdict}  run {}  reason: {}",
                e.at, e.operator, e.run_id, e.reason
            );
            for c in &e.cleared {
                println!(
                    "    {:<36}  {:<18}  {:<36}  {}",
                    c.request_id,
                    c.method,
                    c.task_id.as_deref().unwrap_or("-"),
                    result_text(Some(c.ok), c.code)
                );
            }
        }
    }
    if options.request.is_some() && list.entries.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<String> {
        vec![
            "064da170-1111-4000-8000-000000000001".to_owned(),
            "064da171-2222-4000-8000-000000000002".to_owned(),
            "9b2d0f00-3333-4000-8000-000000000003".to_owned(),
        ]
    }

    #[test]
    fn a_unique_prefix_of_six_characters_names_its_id() {
        assert_eq!(pick_id("9b2d0f", ids()), Ok(ids()[2].clone()));
        assert_eq!(pick_id("064da170", ids()), Ok(ids()[0].clone()));
        assert_eq!(pick_id(&ids()[1], ids()), Ok(ids()[1].clone()));
    }

    #[test]
    fn an_ambiguous_prefix_names_the_candidates_and_a_short_one_is_refused() {
        assert_eq!(
            pick_id("064da1", ids()),
            Err(PrefixError::Ambiguous(vec![
                ids()[0].clone(),
                ids()[1].clone()
            ]))
        );
        assert_eq!(pick_id("9b2d0", ids()), Err(PrefixError::TooShort));
        assert_eq!(pick_id("ffffff", ids()), Err(PrefixError::NotFound));
    }
}
