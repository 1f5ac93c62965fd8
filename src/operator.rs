//! The operator commands — `polaris receipts`, `polaris verify`, `polaris clear` — each a thin
//! layer over the introspection socket with exactly the console's powers and no others.
//!
//! Exit codes: 0 success, 1 a refusal or error reply (or a declined clear), 2 bad usage,
//! 3 the host is unavailable or the connection was lost.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Map, Value};

use crate::client::{BridgeClient, ClientError};
use crate::protocol::{ErrorCode, Reply};
use crate::server::INTROSPECT_SOCKET;

/// Which receipts a listing or a clear selects (the `filter` of the introspection methods).
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// `running`, `completed`, `ok`, `error` or `clearable`.
    pub state: Option<String>,
    /// A method name, e.g. `page.click`.
    pub method: Option<String>,
    /// A task ID.
    pub task: Option<String>,
    /// A substring of the request ID, method, task ID or error code.
    pub search: Option<String>,
}

impl Selection {
    fn is_empty(&self) -> bool {
        self.state.is_none()
            && self.method.is_none()
            && self.task.is_none()
            && self.search.is_none()
    }

    fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        for (k, v) in [
            ("state", &self.state),
            ("method", &self.method),
            ("taskId", &self.task),
            ("search", &self.search),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        m
    }
}

/// What `polaris receipts` shows.
#[derive(Clone, Debug)]
pub struct ListOptions {
    /// The filter.
    pub selection: Selection,
    /// `newest`, `oldest`, `state`, `method` or `task`.
    pub sort: Option<String>,
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
    /// Request IDs to clear (exclusive with a selection).
    pub ids: Vec<String>,
    /// A filter selecting the receipts to clear.
    pub selection: Selection,
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

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn result_text(v: &Value) -> String {
    match (
        v.get("ok").and_then(Value::as_bool),
        v.get("code").and_then(Value::as_str),
    ) {
        (Some(true), _) => "ok".into(),
        (Some(false), Some(code)) => code.into(),
        _ => "-".into(),
    }
}

/// `polaris receipts`: one page of `receipts.list`.
pub fn receipts(socket_dir: &Path, options: ListOptions) -> ExitCode {
    let mut params = options.selection.to_json();
    params.insert("offset".into(), json!(options.offset));
    params.insert("limit".into(), json!(options.limit));
    if let Some(sort) = &options.sort {
        params.insert("sort".into(), json!(sort));
    }
    let reply = runtime().block_on(client(socket_dir).call("receipts.list", Value::Object(params)));
    let result = match result_of("receipts", reply) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if options.json {
        println!("{result}");
        return ExitCode::SUCCESS;
    }
    let items = result["items"].as_array().cloned().unwrap_or_default();
    let total = result["total"].as_u64().unwrap_or(0);
    if items.is_empty() {
        println!("no receipts match ({total} in total)");
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<36}  {:<18}  {:<8}  {:<9}  {:<22}  {:>5}  CLEARABLE",
        "REQUEST ID", "METHOD", "TASK", "STATE", "RESULT", "COPY"
    );
    for it in &items {
        let clearable = match it.get("refusal").and_then(Value::as_str) {
            None => "yes".to_string(),
            Some(why) => format!("no ({why})"),
        };
        let copies = it["joins"].as_u64().unwrap_or(0) + it["replays"].as_u64().unwrap_or(0);
        println!(
            "{:<36}  {:<18}  {:<8}  {:<9}  {:<22}  {:>5}  {clearable}",
            s(it, "requestId"),
            s(it, "method"),
            short(s(it, "taskId")),
            s(it, "state"),
            result_text(it),
            copies,
        );
    }
    let first = options.offset + 1;
    println!(
        "receipts {first}–{} of {total} matching",
        options.offset + items.len()
    );
    ExitCode::SUCCESS
}

/// `polaris verify TASK_ID`: `task.verifyOutcome` through the introspection socket.
pub fn verify(socket_dir: &Path, task_id: &str, json_out: bool) -> ExitCode {
    let reply = runtime()
        .block_on(client(socket_dir).call("task.verifyOutcome", json!({"taskId": task_id})));
    let result = match result_of("verify", reply) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if json_out {
        println!("{result}");
        return ExitCode::SUCCESS;
    }
    let outcome = s(&result, "outcome");
    let state = s(&result, "state");
    let meaning = match outcome {
        "confirmed" => "the expected effect is observed; the pending outcome is resolved",
        "not_observed" => "the page does not show the expected effect (yet); the task stays blocked — verify again later, or stop the task",
        "unknown" => "the read failed or timed out; the task stays blocked — verify again",
        "none" => "the task has no pending outcome",
        _ => "",
    };
    println!("task {task_id}: {outcome} — {meaning}. Task state: {state}.");
    if let Some(obs) = result.get("observation") {
        println!("observed {} = {:?}", s(obs, "target"), s(obs, "value"));
    }
    ExitCode::SUCCESS
}

/// `polaris clear`: prepare, print the current result of every receipt to be cleared and every
/// refusal, confirm (a terminal prompt, or `--yes --reason` in scripts), commit.
pub fn clear(socket_dir: &Path, options: ClearOptions) -> ExitCode {
    let params = match (options.ids.is_empty(), options.selection.is_empty()) {
        (false, true) => json!({"requestIds": options.ids}),
        (true, false) => json!({"filter": options.selection.to_json()}),
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
    let prepared = match result_of(
        "clear",
        rt.block_on(client.call("receipts.clearPrepare", params)),
    ) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let clearable = prepared["clearable"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let refused = prepared["refused"].as_array().cloned().unwrap_or_default();
    if !clearable.is_empty() {
        println!(
            "{} receipt(s) would be cleared (current results):",
            clearable.len()
        );
        for c in &clearable {
            println!(
                "  {:<36}  {:<18}  task {:<8}  {:<22}  completed {}  joins {} replays {}",
                s(c, "requestId"),
                s(c, "method"),
                short(s(c, "taskId")),
                result_text(c),
                s(c, "completedAt"),
                c["joins"].as_u64().unwrap_or(0),
                c["replays"].as_u64().unwrap_or(0),
            );
        }
    }
    if !refused.is_empty() {
        println!("{} refused:", refused.len());
        for r in &refused {
            let why = match s(r, "reason") {
                "running" => "running — its execution has not finished",
                "unverified_outcome" => "unverified_outcome — its effect is uncertain; run `polaris verify` on its task first (or stop the task)",
                "unknown" => "unknown — no receipt with this ID in this run",
                "already_cleared" => "already_cleared",
                other => other,
            };
            println!("  {:<36}  {why}", s(r, "requestId"));
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
    let mut commit = json!({"token": prepared["token"], "reason": reason});
    if let Some(op) = &options.operator {
        commit["operator"] = json!(op);
    }
    match rt.block_on(client.call("receipts.clearCommit", commit)) {
        Ok(Reply {
            ok: true,
            result: Some(done),
            ..
        }) => {
            let receipts = &done["receipts"];
            println!(
                "cleared {} receipt(s); receipts used {} of {}; tombstones {} of {}",
                done["cleared"],
                receipts["used"],
                receipts["capacity"],
                receipts["tombstones"],
                receipts["tombstoneCapacity"]
            );
            if let Some(e) = done.get("auditError").and_then(Value::as_str) {
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
