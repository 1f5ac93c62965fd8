//! The fleet ledger through the real binary (SPEC §13): a private PostgreSQL started by each
//! test, three real `polaris serve --ledger` processes on it, each recording its applied
//! submits in its own `--fixture-effects` file (fsynced outside the host), and clients on real
//! unix sockets.
//!
//! - the same request ID sent to all three hosts at once, 1,000 IDs from 32 clients: exactly
//!   one execution per ID fleet-wide, every other copy joined or replayed with the same reply;
//! - a host killed with SIGKILL mid-action: a copy sent to another host meanwhile waits for
//!   the fleet's decision; once the lease lapses, the other hosts answer its running receipt
//!   `INTERRUPTED`, and nothing runs it again;
//! - PostgreSQL stopped, or killed as in a crash, under load: new IDs answer
//!   `LEDGER_UNAVAILABLE` (`not_executed`) while it is down; started again, the same IDs execute
//!   exactly once;
//! - a task of one host used on another: `TASK_NOT_FOUND` naming the task's host;
//! - the operator's book is the fleet's: a clear committed on one host is answered
//!   `RECEIPT_CLEARED` by every host and frees the fleet's capacity; a copy answered on another
//!   host between prepare and commit makes the token stale; a full tombstone capacity clears
//!   nothing anywhere; an `INTERRUPTED` receipt acknowledged on one host is cleared from another.
//!
//! Without PostgreSQL installed these tests print one line and pass, unless
//! `POLARIS_REQUIRE_POSTGRES=1` (as CI sets), when they fail.

use polaris_testkit::fleet;
use polaris_testkit::host::{err, ok, polaris_bin, receipt, start_task, sync_call, Conn};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleet::Fleet;
use serde_json::{json, Value};

/// The hosts' names in the fleet (`--host-id`).
const NAMES: [&str; 3] = ["alpha", "bravo", "charlie"];

/// Three hosts on a fresh private PostgreSQL, each with `extra` arguments; `None` when the
/// test is skipped.
fn start_fleet(extra: &[&str]) -> Option<Fleet> {
    Fleet::start("tests/fleet/fleet.rs", &NAMES, extra)
}

/// The `"ok":…,"result"|"error":…` bytes of a raw reply line (what every copy repeats).
fn body(line: &str) -> String {
    let start = line.find(',').expect("a reply line has members") + 1;
    let end = line.rfind(",\"meta\":").expect("a host reply has meta");
    line[start..end].to_owned()
}

/// Sends the same request to every connection before reading any reply, then returns the
/// replies with their raw lines, in connection order.
async fn to_all(
    conns: &mut [Conn],
    id: &str,
    method: &str,
    params: &Value,
) -> Vec<(Value, String)> {
    for c in conns.iter_mut() {
        c.send(id, method, params.clone()).await;
    }
    let mut replies = Vec::with_capacity(conns.len());
    for c in conns.iter_mut() {
        replies.push(c.wait_raw(id).await);
    }
    replies
}

/// A submit in the fixture page whose effect is observed: the task's `n`th save (an
/// expectation that already held would be refused unsent).
fn submit_nth(task: &str, n: u64) -> Value {
    json!({"taskId": task, "key": "Enter", "target": "#title",
        "expect": {"target": "#status", "equals": format!("Saved #{n}")}})
}

/// The first submit of a task.
fn submit(task: &str) -> Value {
    submit_nth(task, 1)
}

/// Waits (polling) until `cond` holds; fails after a minute.
async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const IDS: usize = 1_000;
const CLIENTS: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_id_sent_to_three_hosts_at_once_executes_once_fleet_wide() {
    let Some(fleet) = start_fleet(&[]) else {
        return;
    };
    let fleet = Arc::new(fleet);
    // How the copies of each task.start were answered, fleet-wide.
    let kinds: Arc<Mutex<BTreeMap<String, u64>>> = Default::default();
    // The host that opened each task, by its task.start ID.
    let owners: Arc<Mutex<HashMap<String, &'static str>>> = Default::default();
    let mut clients = Vec::new();
    for k in 0..CLIENTS {
        let fleet = fleet.clone();
        let kinds = kinds.clone();
        let owners = owners.clone();
        clients.push(tokio::spawn(async move {
            let mut conns = Vec::new();
            for h in &fleet.hosts {
                conns.push(h.conn().await);
            }
            for i in (k..IDS).step_by(CLIENTS) {
                // A task.start has no task to tie it to a host: every host may claim it, and
                // the ledger lets exactly one open the page.
                let start_id = format!("start-{i}");
                let params = json!({"title": format!("fleet {i}"), "fixture": {}});
                let replies = to_all(&mut conns, &start_id, "task.start", &params).await;
                let first = body(&replies[0].1);
                let mut owner = None;
                for (n, (reply, line)) in replies.iter().enumerate() {
                    ok(reply);
                    assert_eq!(body(line), first, "every copy of {start_id} has one reply");
                    let kind = receipt(reply).to_owned();
                    if kind == "new" {
                        assert!(owner.is_none(), "{start_id} executed twice: {replies:?}");
                        owner = Some(n);
                    } else {
                        assert!(
                            kind == "joined" || kind == "replayed",
                            "{start_id} on {}: {line}",
                            fleet.hosts[n].name
                        );
                    }
                    *kinds.lock().unwrap().entry(kind).or_default() += 1;
                }
                let owner =
                    owner.unwrap_or_else(|| panic!("{start_id} never executed: {replies:?}"));
                let owner_name = fleet.hosts[owner].name;
                owners.lock().unwrap().insert(start_id.clone(), owner_name);
                let task = ok(&replies[0].0)["taskId"].as_str().unwrap().to_owned();

                // A submit on that task, sent to all three at once: only its host may run it.
                // The others run nothing: a copy that finds the ID in the ledger gets the
                // owner's reply (joined or replayed: the receipt rules come first), one that
                // arrives before the owner's claim is told which host has the task.
                let press_id = format!("press-{i}");
                let replies = to_all(&mut conns, &press_id, "page.press", &submit(&task)).await;
                let owned = body(&replies[owner].1);
                for (n, (reply, line)) in replies.iter().enumerate() {
                    if n == owner {
                        ok(reply);
                        assert_eq!(receipt(reply), "new", "{line}");
                    } else if reply["ok"] == true {
                        assert!(matches!(receipt(reply), "joined" | "replayed"), "{line}");
                        assert_eq!(body(line), owned, "{line}");
                    } else {
                        let e = err(reply, "TASK_NOT_FOUND");
                        assert_eq!(e["details"]["hostId"], owner_name, "{line}");
                    }
                }
            }
        }));
    }
    for c in clients {
        c.await.expect("a client finished");
    }

    // Counted where the effects happen: the pages each host opened, and the submits each
    // host's fixture recorded outside it.
    let mut opened = 0;
    let mut mutations = 0;
    for h in &fleet.hosts {
        let s = h.status().await;
        let t = &s["tasks"];
        opened += t["running"].as_u64().unwrap()
            + t["blocked"].as_u64().unwrap()
            + t["finished"].as_u64().unwrap()
            + t["stopped"].as_u64().unwrap();
        mutations += s["executor"]["mutations"].as_u64().unwrap();
        assert_eq!(s["ledger"]["hostId"], h.name, "{s}");
    }
    assert_eq!(opened, IDS as u64, "one page per task.start fleet-wide");
    assert_eq!(
        mutations, IDS as u64,
        "one submit per page.press fleet-wide"
    );
    let effects = fleet.effects();
    let owners = owners.lock().unwrap();
    assert_eq!(
        effects.len(),
        IDS,
        "an effect line for every press, nothing else"
    );
    for i in 0..IDS {
        let hosts = &effects[&format!("press-{i}")];
        assert_eq!(hosts.len(), 1, "press-{i} applied on {hosts:?}");
        assert_eq!(hosts[0], owners[&format!("start-{i}")], "press-{i}");
    }
    let kinds = kinds.lock().unwrap();
    assert_eq!(kinds.get("new"), Some(&(IDS as u64)), "{kinds:?}");
    eprintln!("task.start copies across the fleet: {kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_action_is_interrupted_by_the_others_after_its_lease() {
    // Renewed every third of the lease, a host keeps at least 5 s: more than the action
    // deadline plus one second, so every host starts actions.
    let Some(mut fleet) = start_fleet(&["--action-timeout-ms", "3000", "--lease-ms", "7500"])
    else {
        return;
    };
    let alpha_run = fleet.hosts[0].run_id.clone();
    let mut c = fleet.hosts[0].conn().await;
    let task = start_task(&mut c, json!({})).await;
    // The submit applies at once, but the page never shows what the press expects: the action
    // stays running until its deadline, long after its effect.
    let press = json!({"taskId": task, "key": "Enter", "target": "#title",
                       "expect": {"target": "#status", "contains": "never shown"}});
    let id = "press-killed";
    c.send(id, "page.press", press.clone()).await;
    // The effect is on disk, so the claim was committed before it and the action runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    while fleet.hosts[0].effects().get(id) != Some(&1) {
        assert!(
            Instant::now() < deadline,
            "the press never applied: {}",
            fleet.hosts[0].log()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    fleet.hosts[0].kill9();

    // A copy sent to another host while alpha is dead and its row still `running`: the ID
    // ran, so the copy waits for the fleet's decision (it is joined), however long alpha's
    // lease takes to lapse — never TASK_NOT_FOUND / not_executed because the task was alpha's.
    let mut early = fleet.host("charlie").conn().await;
    early.send(id, "page.press", press.clone()).await;

    // Another host, asked about the ID, sees it running until alpha's lease lapses, then
    // INTERRUPTED — decided by the fleet, never run again.
    let mut b = fleet.host("bravo").conn().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let interrupted = loop {
        let r = b.call("receipt.status", json!({"requestId": id})).await;
        let s = ok(&r).clone();
        if s["state"] == "completed" {
            break s;
        }
        assert_eq!(s["state"], "running", "{s}");
        assert!(
            Instant::now() < deadline,
            "alpha's receipt was never interrupted: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(interrupted["ok"], false, "{interrupted}");
    let error = &interrupted["reply"]["error"];
    assert_eq!(error["code"], "INTERRUPTED", "{interrupted}");
    assert_eq!(error["delivery"], "uncertain", "{interrupted}");
    assert_eq!(
        error["details"]["runId"],
        alpha_run.as_str(),
        "{interrupted}"
    );
    assert_eq!(error["details"]["requestId"], id, "{interrupted}");
    assert_eq!(interrupted["runId"], alpha_run.as_str(), "{interrupted}");

    // What the operator sees on the hosts that stayed: alpha's run is dead.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = fleet.host("bravo").status().await;
        let hosts = s["ledger"]["hosts"].as_array().cloned().unwrap_or_default();
        let alpha = hosts.iter().find(|h| h["runId"] == alpha_run.as_str());
        if alpha.is_some_and(|h| h["state"] == "dead") {
            assert_eq!(alpha.unwrap()["hostId"], "alpha", "{s}");
            break;
        }
        assert!(Instant::now() < deadline, "alpha never shown dead: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The early copy was answered with that decision, as a joined copy.
    let r = early.wait(id).await;
    let e = err(&r, "INTERRUPTED");
    assert_eq!(e["delivery"], "uncertain", "{r}");
    assert_eq!(receipt(&r), "joined", "{r}");
    assert_eq!(e["details"]["runId"], alpha_run.as_str(), "{r}");

    // The third host reads the same stored reply.
    let mut ch = fleet.host("charlie").conn().await;
    let r = ch.call("receipt.status", json!({"requestId": id})).await;
    assert_eq!(ok(&r)["reply"], interrupted["reply"], "{r}");

    // The same ID and content sent to the others runs nothing: the receipt rules come before
    // the task (which lives on alpha), so the row answers.
    for conn in [&mut b, &mut ch] {
        let r = conn.call_id(id, "page.press", press.clone()).await;
        let e = err(&r, "INTERRUPTED");
        assert_eq!(e["delivery"], "uncertain", "{r}");
        assert_eq!(receipt(&r), "replayed", "{r}");
    }
    // The hosts that stayed still act: a new task and a submit on bravo.
    let t = start_task(&mut b, json!({})).await;
    let r = b.call_id("after-kill", "page.press", submit(&t)).await;
    ok(&r);
    assert_eq!(receipt(&r), "new", "{r}");

    let effects = fleet.effects();
    assert_eq!(
        effects[id],
        ["alpha"],
        "the killed press applied once, on alpha"
    );
    assert_eq!(effects["after-kill"], ["bravo"]);
    assert_eq!(effects.len(), 2, "{effects:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_refused_while_postgres_is_down_execute_exactly_once_after_it_is_back() {
    outage_under_load(Outage::Stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_refused_after_postgres_crashed_execute_exactly_once_after_it_recovers() {
    outage_under_load(Outage::Kill).await;
}

/// How PostgreSQL goes away under load.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// `pg_ctl stop -m fast`: open connections are cut, everything committed is on disk.
    Stop,
    /// SIGKILL to the postmaster, as a crash: it recovers from its WAL when started again, and
    /// every claim it acknowledged must still be there.
    Kill,
}

/// 24 clients submit under fresh IDs on three hosts, re-sending each ID until it is executed;
/// PostgreSQL goes away (`outage`) and comes back. Every ID runs exactly once, and every
/// refusal meanwhile was `LEDGER_UNAVAILABLE` (`not_executed`).
async fn outage_under_load(outage: Outage) {
    let Some(mut fleet) = start_fleet(&[]) else {
        return;
    };
    const PER_HOST: usize = 8;
    // Every reply each ID got, in order: (error code or "ok", meta.receipt, delivery).
    type Seen = Arc<Mutex<HashMap<String, Vec<(String, String, String)>>>>;
    let seen: Seen = Default::default();
    let unavailable = Arc::new(AtomicU64::new(0));
    let done_after_restart = Arc::new(AtomicU64::new(0));
    let restarted = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    // One task per host for the probes sent while PostgreSQL is down.
    let mut probes = Vec::new();
    for h in &fleet.hosts {
        let mut c = h.conn().await;
        let task = start_task(&mut c, json!({})).await;
        probes.push((c, task));
    }
    let mut clients = Vec::new();
    for h in &fleet.hosts {
        for n in 0..PER_HOST {
            let mut c = h.conn().await;
            let task = start_task(&mut c, json!({})).await;
            let name = h.name;
            let (seen, unavailable, done_after_restart, restarted, stop) = (
                seen.clone(),
                unavailable.clone(),
                done_after_restart.clone(),
                restarted.clone(),
                stop.clone(),
            );
            clients.push(tokio::spawn(async move {
                let mut round = 0;
                while !stop.load(Ordering::SeqCst) {
                    round += 1;
                    let id = format!("{name}-{n}-{round}");
                    // The same ID is sent again until the fleet executes it.
                    loop {
                        let r = c.call_id(&id, "page.press", submit_nth(&task, round)).await;
                        let code = r["error"]["code"].as_str().unwrap_or("ok").to_owned();
                        let delivery = r["error"]["delivery"].as_str().unwrap_or("").to_owned();
                        seen.lock().unwrap().entry(id.clone()).or_default().push((
                            code.clone(),
                            receipt(&r).to_owned(),
                            delivery,
                        ));
                        if code != "LEDGER_UNAVAILABLE" {
                            ok(&r);
                            break;
                        }
                        unavailable.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    if restarted.load(Ordering::SeqCst) {
                        done_after_restart.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    wait_for("some submits under load", || {
        seen.lock().unwrap().len() >= 100
    })
    .await;

    match outage {
        Outage::Stop => fleet.pg.stop().expect("PostgreSQL stops"),
        Outage::Kill => fleet.pg.kill().expect("PostgreSQL is killed"),
    }
    wait_for("refusals while PostgreSQL is down", || {
        unavailable.load(Ordering::SeqCst) >= 3 * PER_HOST as u64
    })
    .await;
    // While it is down, a fresh ID on every host is refused, and nothing runs.
    for (h, (c, task)) in fleet.hosts.iter().zip(probes.iter_mut()) {
        let r = c
            .call_id(&format!("down-{}", h.name), "page.press", submit(task))
            .await;
        let e = err(&r, "LEDGER_UNAVAILABLE");
        assert_eq!(e["delivery"], "not_executed", "{r}");
        assert!(!h.effects().contains_key(&format!("down-{}", h.name)));
    }

    fleet.pg.start_again().expect("PostgreSQL starts again");
    restarted.store(true, Ordering::SeqCst);
    wait_for("submits after PostgreSQL is back", || {
        done_after_restart.load(Ordering::SeqCst) >= 3 * PER_HOST as u64 * 3
    })
    .await;
    // The IDs refused while it was down run now, once (sent again, as a client does, while a
    // host has not reconnected yet).
    for (h, (c, task)) in fleet.hosts.iter().zip(probes.iter_mut()) {
        let id = format!("down-{}", h.name);
        let r = loop {
            let r = c.call_id(&id, "page.press", submit(task)).await;
            if r["error"]["code"] != "LEDGER_UNAVAILABLE" {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        ok(&r);
        assert_eq!(receipt(&r), "new", "{r}");
        let r = c.call_id(&id, "page.press", submit(task)).await;
        ok(&r);
        assert_eq!(receipt(&r), "replayed", "{r}");
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.expect("a client finished");
    }

    let effects = fleet.effects();
    let seen = seen.lock().unwrap();
    let mut refused_then_ran = 0;
    for (id, replies) in seen.iter() {
        let (last, kind, _) = replies.last().unwrap();
        assert_eq!(last, "ok", "{id}: {replies:?}");
        assert_eq!(kind, "new", "{id} executed by its last send: {replies:?}");
        for (code, _, delivery) in &replies[..replies.len() - 1] {
            assert_eq!(code, "LEDGER_UNAVAILABLE", "{id}: {replies:?}");
            assert_eq!(delivery, "not_executed", "{id}: {replies:?}");
        }
        if replies.len() > 1 {
            refused_then_ran += 1;
        }
        let host = id.split('-').next().unwrap();
        assert_eq!(
            effects.get(id).map(Vec::as_slice),
            Some(&[host][..]),
            "{id}"
        );
    }
    assert!(refused_then_ran > 0, "some IDs were refused, then ran");
    for h in &fleet.hosts {
        let probe = format!("down-{}", h.name);
        assert_eq!(effects.get(&probe).map(Vec::as_slice), Some(&[h.name][..]));
    }
    assert_eq!(
        effects.len(),
        seen.len() + 3,
        "no effect without an answered ID"
    );
    for h in &mut fleet.hosts {
        let exited = h.child.as_mut().unwrap().try_wait().unwrap();
        assert!(
            exited.is_none(),
            "{} survived the outage: {}",
            h.name,
            h.log()
        );
    }
    eprintln!(
        "{outage:?}: {} IDs, {refused_then_ran} refused while PostgreSQL was down and executed once after",
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_used_on_another_host_is_not_found_there_and_names_its_host() {
    let Some(fleet) = start_fleet(&[]) else {
        return;
    };
    let mut epochs = Vec::new();
    for h in &fleet.hosts {
        let s = h.status().await;
        assert_eq!(s["ledger"]["hostId"], h.name, "{s}");
        assert!(s["ledger"]["leaseLeftMs"].as_u64().unwrap() > 0, "{s}");
        epochs.push(s["ledger"]["epoch"].as_i64().unwrap());
    }
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "each host run a fresh, increasing epoch: {epochs:?}"
    );

    let mut a = fleet.host("alpha").conn().await;
    let mut b = fleet.host("bravo").conn().await;
    let start = json!({"title": "lives on alpha", "fixture": {}});
    let started = a.call_id("start-a", "task.start", start.clone()).await;
    let task = ok(&started)["taskId"].as_str().unwrap().to_owned();
    // The start's reply is the fleet's: bravo replays it, and opens no page of its own.
    let copy = {
        b.send("start-a", "task.start", start).await;
        b.wait_raw("start-a").await
    };
    assert_eq!(receipt(&copy.0), "replayed", "{}", copy.1);
    let first = a
        .call("receipt.status", json!({"requestId": "start-a"}))
        .await;
    assert_eq!(ok(&first)["reply"]["result"]["taskId"], task.as_str());
    let copy = copy.0;
    assert_eq!(ok(&copy)["taskId"], task.as_str());

    let fill = json!({"taskId": task, "target": "#title", "value": "hello"});
    for (method, params) in [
        ("page.fill", fill),
        ("page.press", submit(&task)),
        ("page.read", json!({"taskId": task, "target": "#title"})),
        ("task.status", json!({"taskId": task})),
        ("task.finish", json!({"taskId": task})),
    ] {
        let r = b.call(method, params).await;
        let e = err(&r, "TASK_NOT_FOUND");
        assert_eq!(e["details"]["hostId"], "alpha", "{method}: {r}");
        assert_eq!(e["details"]["taskId"], task.as_str(), "{method}: {r}");
    }
    // A task no host opened is not found anywhere, and names no host.
    let r = b
        .call(
            "page.fill",
            json!({"taskId": "no-such-task", "target": "#title", "value": "x"}),
        )
        .await;
    let e = err(&r, "TASK_NOT_FOUND");
    assert!(e["details"].get("hostId").is_none(), "{r}");

    // On its own host the task works, and nothing ran anywhere else.
    let r = a.call("page.press", submit(&task)).await;
    ok(&r);
    assert_eq!(receipt(&r), "new", "{r}");
    let s = fleet.host("bravo").status().await;
    assert_eq!(s["tasks"]["running"], 0, "{s}");
    assert_eq!(s["executor"]["mutations"], 0, "{s}");
    let effects = fleet.effects();
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert!(effects.values().all(|h| h == &["alpha"]), "{effects:?}");
}

/// `task.start` params that differ by `n` (each a distinct request content).
fn start_params(n: usize) -> Value {
    json!({"title": format!("clear {n}"), "fixture": {}})
}

/// Prepares a clear of `ids` on an introspection connection; the prepare's result.
async fn prepare(intro: &mut Conn, ids: &[&str]) -> Value {
    let r = intro
        .call("receipts.clearPrepare", json!({"requestIds": ids}))
        .await;
    ok(&r).clone()
}

/// Commits a prepared clear; the raw reply.
async fn commit(intro: &mut Conn, prepared: &Value) -> Value {
    intro
        .call(
            "receipts.clearCommit",
            json!({"token": prepared["token"], "reason": "tidy up", "operator": "test"}),
        )
        .await
}

fn listed(prepared: &Value, key: &str) -> Vec<String> {
    prepared[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let id = r["requestId"].as_str().unwrap();
            match r["reason"].as_str() {
                Some(why) => format!("{id}:{why}"),
                None => id.to_owned(),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_committed_on_one_host_is_seen_by_every_host_and_frees_the_fleets_capacity() {
    let Some(fleet) = start_fleet(&["--capacity", "4"]) else {
        return;
    };
    let mut a = fleet.host("alpha").conn().await;
    let mut b = fleet.host("bravo").conn().await;
    let mut c = fleet.host("charlie").conn().await;
    for n in 1..=4 {
        let r = a
            .call_id(&format!("s{n}"), "task.start", start_params(n))
            .await;
        assert_eq!(receipt(&r), "new", "{r}");
    }
    // bravo and charlie keep copies of the first two.
    for conn in [&mut b, &mut c] {
        for n in 1..=2 {
            let r = conn
                .call_id(&format!("s{n}"), "task.start", start_params(n))
                .await;
            assert_eq!(receipt(&r), "replayed", "{r}");
        }
    }
    let r = c.call_id("s5", "task.start", start_params(5)).await;
    err(&r, "RECEIPT_CAPACITY_FULL");

    // bravo's listing is the fleet's book: the receipts alpha executed.
    let mut bi = fleet.host("bravo").intro().await;
    let list = bi.call("receipts.list", json!({"sort": "oldest"})).await;
    assert_eq!(ok(&list)["total"], 4, "{list}");
    let ids: Vec<&str> = ok(&list)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["requestId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s1", "s2", "s3", "s4"], "{list}");
    // Read from its end, in the ledger as on a single host.
    let back = bi
        .call("receipts.list", json!({"sort": "oldest", "reverse": true}))
        .await;
    let back_ids: Vec<&str> = ok(&back)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["requestId"].as_str().unwrap())
        .collect();
    assert_eq!(back_ids, ["s4", "s3", "s2", "s1"], "{back}");
    let by_task = bi.call("receipts.list", json!({"sort": "task"})).await;
    let by_task_back = bi
        .call("receipts.list", json!({"sort": "task", "reverse": true}))
        .await;
    let order = |list: &serde_json::Value| -> Vec<String> {
        ok(list)["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["requestId"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut expected = order(&by_task);
    expected.reverse();
    assert_eq!(order(&by_task_back), expected, "{by_task} {by_task_back}");
    assert!(ok(&list)["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["state"] == "completed" && i["clearable"] == true));
    let got = bi.call("receipts.get", json!({"requestId": "s3"})).await;
    assert_eq!(ok(&got)["state"], "completed", "{got}");
    assert_eq!(ok(&got)["request"]["method"], "task.start", "{got}");
    assert_eq!(ok(&got)["reply"]["ok"], true, "{got}");

    // Cleared from alpha's introspection socket.
    let mut ai = fleet.host("alpha").intro().await;
    let p = prepare(&mut ai, &["s1", "s2", "nobody"]).await;
    assert_eq!(listed(&p, "clearable"), ["s1", "s2"], "{p}");
    assert_eq!(listed(&p, "refused"), ["nobody:unknown"], "{p}");
    let done = commit(&mut ai, &p).await;
    assert_eq!(ok(&done)["cleared"], 2, "{done}");
    assert_eq!(ok(&done)["tombstones"], 2, "{done}");

    // Every host answers a re-send RECEIPT_CLEARED, never a replay.
    for conn in [&mut a, &mut b, &mut c] {
        for n in 1..=2 {
            let r = conn
                .call_id(&format!("s{n}"), "task.start", start_params(n))
                .await;
            let e = err(&r, "RECEIPT_CLEARED");
            assert_eq!(e["delivery"], "cleared", "{r}");
            assert_eq!(receipt(&r), "none", "{r}");
        }
    }
    // A fresh prepare on bravo no longer lists them.
    let again = prepare(&mut bi, &["s1", "s2"]).await;
    assert!(listed(&again, "clearable").is_empty(), "{again}");
    assert_eq!(
        listed(&again, "refused"),
        ["s1:already_cleared", "s2:already_cleared"],
        "{again}"
    );
    let got = bi.call("receipts.get", json!({"requestId": "s1"})).await;
    assert_eq!(ok(&got)["state"], "cleared", "{got}");
    assert_eq!(ok(&got)["reason"], "tidy up", "{got}");
    // The fleet's capacity is freed: two new IDs fit, on any host; a third does not.
    let r = c.call_id("s5", "task.start", start_params(5)).await;
    assert_eq!(receipt(&r), "new", "{r}");
    let r = b.call_id("s6", "task.start", start_params(6)).await;
    assert_eq!(receipt(&r), "new", "{r}");
    let r = b.call_id("s7", "task.start", start_params(7)).await;
    err(&r, "RECEIPT_CAPACITY_FULL");
    let list = bi.call("receipts.list", json!({})).await;
    assert_eq!(ok(&list)["total"], 4, "{list}");

    // One audit line, on the host where the clear was committed.
    let audit = fleet.host("alpha").audit();
    assert_eq!(audit.lines().count(), 1, "{audit}");
    assert!(
        audit.contains("\"s1\"") && audit.contains("tidy up"),
        "{audit}"
    );
    assert!(fleet.host("bravo").audit().is_empty());
    // Nothing ran twice.
    let s = fleet.host("bravo").status().await;
    assert_eq!(s["tasks"]["running"], 1, "s6 only: {s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_answered_on_another_host_between_prepare_and_commit_makes_the_token_stale() {
    let Some(fleet) = start_fleet(&[]) else {
        return;
    };
    let mut a = fleet.host("alpha").conn().await;
    let mut b = fleet.host("bravo").conn().await;
    let mut c = fleet.host("charlie").conn().await;
    let r = a.call_id("k1", "task.start", start_params(1)).await;
    assert_eq!(receipt(&r), "new", "{r}");
    let r = b.call_id("k1", "task.start", start_params(1)).await;
    assert_eq!(receipt(&r), "replayed", "{r}");
    let mut ai = fleet.host("alpha").intro().await;

    // bravo answers a copy from its own memory between the phases.
    let p = prepare(&mut ai, &["k1"]).await;
    assert_eq!(listed(&p, "clearable"), ["k1"], "{p}");
    let r = b.call_id("k1", "task.start", start_params(1)).await;
    assert_eq!(receipt(&r), "replayed", "{r}");
    let stale = commit(&mut ai, &p).await;
    let e = err(&stale, "CLEAR_TOKEN_STALE");
    assert_eq!(e["details"]["hosts"], json!(["bravo"]), "{stale}");

    // charlie answers its first copy between the phases.
    let p = prepare(&mut ai, &["k1"]).await;
    let r = c.call_id("k1", "task.start", start_params(1)).await;
    assert_eq!(receipt(&r), "replayed", "nothing was cleared: {r}");
    let stale = commit(&mut ai, &p).await;
    let e = err(&stale, "CLEAR_TOKEN_STALE");
    assert_eq!(e["details"]["hosts"], json!(["charlie"]), "{stale}");

    // A token is used once, and unknown on another host.
    let again = commit(&mut ai, &p).await;
    err(&again, "CLEAR_TOKEN_STALE");
    let p = prepare(&mut ai, &["k1"]).await;
    let mut ci = fleet.host("charlie").intro().await;
    err(&commit(&mut ci, &p).await, "CLEAR_TOKEN_STALE");

    // Quiet between the phases: cleared.
    let p = prepare(&mut ai, &["k1"]).await;
    let done = commit(&mut ai, &p).await;
    assert_eq!(ok(&done)["cleared"], 1, "{done}");
    for conn in [&mut b, &mut c] {
        let r = conn.call_id("k1", "task.start", start_params(1)).await;
        err(&r, "RECEIPT_CLEARED");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tombstone_capacity_clears_nothing_anywhere() {
    let Some(fleet) = start_fleet(&["--tombstone-capacity", "1"]) else {
        return;
    };
    let mut a = fleet.host("alpha").conn().await;
    let mut b = fleet.host("bravo").conn().await;
    for n in 1..=2 {
        let id = format!("f{n}");
        let r = a.call_id(&id, "task.start", start_params(n)).await;
        assert_eq!(receipt(&r), "new", "{r}");
        let r = b.call_id(&id, "task.start", start_params(n)).await;
        assert_eq!(receipt(&r), "replayed", "{r}");
    }
    let mut ci = fleet.host("charlie").intro().await;
    let p = prepare(&mut ci, &["f1", "f2"]).await;
    assert_eq!(listed(&p, "clearable"), ["f1", "f2"], "{p}");
    let full = commit(&mut ci, &p).await;
    let e = err(&full, "TOMBSTONE_CAPACITY_FULL");
    assert_eq!(e["details"]["tombstoneCapacity"], 1, "{full}");
    // Nothing was cleared on any host.
    for n in 1..=2 {
        let r = b
            .call_id(&format!("f{n}"), "task.start", start_params(n))
            .await;
        assert_eq!(receipt(&r), "replayed", "{r}");
    }
    let list = ci.call("receipts.list", json!({})).await;
    assert_eq!(ok(&list)["total"], 2, "{list}");
    assert!(fleet.host("charlie").audit().is_empty());
    // One fits.
    let p = prepare(&mut ci, &["f1"]).await;
    let done = commit(&mut ci, &p).await;
    assert_eq!(ok(&done)["cleared"], 1, "{done}");
    let r = b.call_id("f1", "task.start", start_params(1)).await;
    err(&r, "RECEIPT_CLEARED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_receipt_acknowledged_on_one_host_is_cleared_from_another() {
    let Some(mut fleet) = start_fleet(&["--action-timeout-ms", "3000", "--lease-ms", "7500"])
    else {
        return;
    };
    let mut c = fleet.hosts[0].conn().await;
    let task = start_task(&mut c, json!({})).await;
    let press = json!({"taskId": task, "key": "Enter", "target": "#title",
                       "expect": {"target": "#status", "contains": "never shown"}});
    let id = "press-acknowledged";
    c.send(id, "page.press", press.clone()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while fleet.hosts[0].effects().get(id) != Some(&1) {
        assert!(Instant::now() < deadline, "the press never applied");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    fleet.hosts[0].kill9();
    let mut ch = fleet.host("charlie").conn().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = ch.call("receipt.status", json!({"requestId": id})).await;
        if ok(&r)["state"] == "completed" {
            assert_eq!(ok(&r)["reply"]["error"]["code"], "INTERRUPTED", "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "never interrupted: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Not clearable until a person settles it.
    let mut ci = fleet.host("charlie").intro().await;
    let p = prepare(&mut ci, &[id]).await;
    assert_eq!(
        listed(&p, "refused"),
        [format!("{id}:unverified_outcome")],
        "{p}"
    );
    let list = ci
        .call("receipts.list", json!({"state": "clearable"}))
        .await;
    let clearable: Vec<&str> = ok(&list)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["requestId"].as_str().unwrap())
        .collect();
    assert!(!clearable.contains(&id), "{list}");
    // Acknowledged on bravo, audited there.
    let mut bi = fleet.host("bravo").intro().await;
    let r = bi
        .call(
            "outcome.acknowledge",
            json!({"requestId": id, "reason": "checked the backend", "operator": "test"}),
        )
        .await;
    assert_eq!(ok(&r)["requestId"], id, "{r}");
    let audit = fleet.host("bravo").audit();
    assert!(
        audit.contains(id) && audit.contains("checked the backend"),
        "{audit}"
    );
    // Clearable from charlie now, and cleared for the fleet.
    let p = prepare(&mut ci, &[id]).await;
    assert_eq!(listed(&p, "clearable"), [id], "{p}");
    let done = commit(&mut ci, &p).await;
    assert_eq!(ok(&done)["cleared"], 1, "{done}");
    let mut b = fleet.host("bravo").conn().await;
    let r = b.call_id(id, "page.press", press).await;
    let e = err(&r, "RECEIPT_CLEARED");
    assert_eq!(e["delivery"], "cleared", "{r}");
    assert_eq!(fleet.effects()[id], ["alpha"], "it never ran again");
}

/// Fails the test once a polling loop has waited a minute: a guard against hanging, not a
/// timing assertion.
fn still_waiting(since: Instant, what: &str) {
    assert!(
        since.elapsed() < Duration::from_secs(60),
        "never happened: {what}"
    );
}

/// The request IDs `receipts.list` shows as clearable on an introspection connection.
async fn clearable_ids(intro: &mut Conn) -> Vec<String> {
    let list = intro
        .call(
            "receipts.list",
            json!({"state": "clearable", "limit": 1000}),
        )
        .await;
    ok(&list)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["requestId"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncertain_outcomes_settled_on_their_host_or_acknowledged_elsewhere_clear_fleet_wide() {
    let Some(fleet) = start_fleet(&["--action-timeout-ms", "500"]) else {
        return;
    };
    let mut a = fleet.host("alpha").conn().await;
    let mut ci = fleet.host("charlie").intro().await;
    // Three uncertain presses on alpha: one whose submit applies late (verified later), one on
    // a task that is then stopped, one whose submit is lost (acknowledged on bravo).
    let late = start_task(&mut a, json!({"submitDelayMs": 1500})).await;
    let stopped = start_task(&mut a, json!({"dropSubmit": true})).await;
    let lost = start_task(&mut a, json!({"dropSubmit": true})).await;
    for (id, task) in [
        ("u-late", &late),
        ("u-stopped", &stopped),
        ("u-lost", &lost),
    ] {
        let r = a.call_id(id, "page.press", submit(task)).await;
        err(&r, "OUTCOME_UNCERTAIN");
    }
    let p = prepare(&mut ci, &["u-late", "u-stopped", "u-lost"]).await;
    assert_eq!(
        listed(&p, "refused"),
        [
            "u-late:unverified_outcome",
            "u-stopped:unverified_outcome",
            "u-lost:unverified_outcome"
        ],
        "{p}"
    );
    // alpha confirms the late one by verification, and stops the second task.
    let mut ai = fleet.host("alpha").intro().await;
    let since = Instant::now();
    loop {
        let r = ai.call("task.verifyOutcome", json!({"taskId": late})).await;
        if ok(&r)["outcome"] == "confirmed" {
            break;
        }
        still_waiting(since, "the late submit is confirmed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = a
        .call("task.stop", json!({"taskId": stopped, "reason": "gave up"}))
        .await;
    ok(&r);
    let since = Instant::now();
    loop {
        let ids = clearable_ids(&mut ci).await;
        if ids.contains(&"u-late".to_string()) && ids.contains(&"u-stopped".to_string()) {
            break;
        }
        still_waiting(since, "charlie sees both settled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!clearable_ids(&mut ci).await.contains(&"u-lost".to_string()));
    // The lost one is acknowledged on bravo: alpha's task is no longer blocked.
    let blocked = a.call("task.status", json!({"taskId": lost})).await;
    assert_eq!(ok(&blocked)["state"], "blocked", "{blocked}");
    let mut bi = fleet.host("bravo").intro().await;
    let r = bi
        .call(
            "outcome.acknowledge",
            json!({"requestId": "u-lost", "reason": "the backend never got it"}),
        )
        .await;
    assert_eq!(ok(&r)["requestId"], "u-lost", "{r}");
    let since = Instant::now();
    loop {
        let r = a.call("task.status", json!({"taskId": lost})).await;
        if ok(&r)["state"] == "running" {
            break;
        }
        still_waiting(since, "alpha's task is unblocked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // All three clear from charlie, for the fleet.
    let p = prepare(&mut ci, &["u-late", "u-stopped", "u-lost"]).await;
    assert_eq!(
        listed(&p, "clearable"),
        ["u-late", "u-stopped", "u-lost"],
        "{p}"
    );
    let done = commit(&mut ci, &p).await;
    assert_eq!(ok(&done)["cleared"], 3, "{done}");
    let r = a.call_id("u-late", "page.press", submit(&late)).await;
    err(&r, "RECEIPT_CLEARED");
}

/// Starts `polaris serve --ledger` in `dir` with `args` (after the ledger), its stderr in
/// `dir/serve.log`.
fn spawn_serve(dir: &std::path::Path, conninfo: &str, args: &[&str]) -> std::process::Child {
    std::fs::create_dir_all(dir).unwrap();
    std::process::Command::new(polaris_bin())
        .arg("serve")
        .arg("--socket-dir")
        .arg(dir.join("s"))
        .arg("--audit-log")
        .arg(dir.join("audit.jsonl"))
        .args(["--ledger", conninfo])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .expect("polaris serve starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_host_under_a_live_hosts_name_is_refused_unless_told_to_take_over() {
    let Some(mut fleet) = Fleet::start("tests/fleet/fleet.rs", &["alpha"], &[]) else {
        return;
    };
    let alpha_pid = fleet.hosts[0].child.as_ref().unwrap().id();
    let conninfo = fleet.pg.conninfo();
    let mut a = fleet.hosts[0].conn().await;
    let task = start_task(&mut a, json!({})).await;

    // Same name, same machine, alpha alive: the newcomer exits at once, saying who holds the
    // name and how to choose another; alpha keeps its run.
    let twin = fleet.root.path().join("twin");
    let mut child = spawn_serve(&twin, &conninfo, &["--host-id", "alpha"]);
    let deadline = Instant::now() + fleet::PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "a second host named alpha kept running; alpha: {}",
            fleet.hosts[0].log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log = std::fs::read_to_string(twin.join("serve.log")).unwrap();
    assert!(!status.success(), "{log}");
    for needle in [
        "\"alpha\"",
        &format!("pid {alpha_pid}"),
        "--host-id NAME",
        "--take-over-host-id",
    ] {
        assert!(log.contains(needle), "{needle:?} not in: {log}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        fleet.hosts[0].running(),
        "alpha stopped: {}",
        fleet.hosts[0].log()
    );
    let r = a
        .call_id("after-refusal", "page.press", submit(&task))
        .await;
    ok(&r);
    let s = fleet.hosts[0].status().await;
    assert_eq!(s["runId"], fleet.hosts[0].run_id.as_str(), "{s}");

    // Told to take the name over, it starts, and alpha learns it was superseded and stops.
    let successor = fleet.root.path().join("successor");
    let mut child = spawn_serve(
        &successor,
        &conninfo,
        &["--host-id", "alpha", "--take-over-host-id"],
    );
    let bridge = successor.join("s/bridge.sock");
    let deadline = Instant::now() + fleet::PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the successor exited ({status}): {}",
                std::fs::read_to_string(successor.join("serve.log")).unwrap()
            );
        }
        if sync_call(&bridge, "host.hello", json!({})).is_ok_and(|r| r["ok"] == true) {
            break;
        }
        assert!(Instant::now() < deadline, "the successor never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gone = fleet.hosts[0].wait_exit();
    assert!(!gone.success(), "alpha stops when superseded");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(fleet.effects()["after-refusal"], ["alpha"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_password_is_read_from_a_private_file_not_the_command_line() {
    let Some(fleet) = Fleet::start("tests/fleet/fleet.rs", &[], &[]) else {
        return;
    };
    // A role that must give its password (scram) over the server's unix socket.
    let (db, conn) = tokio_postgres::connect(&fleet.pg.conninfo(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db.batch_execute("CREATE ROLE keeper LOGIN SUPERUSER PASSWORD 'kept-out-of-ps-1'")
        .await
        .unwrap();
    let hba: String = db.query_one("SHOW hba_file", &[]).await.unwrap().get(0);
    let rules = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(&hba, format!("local all keeper scram-sha-256\n{rules}")).unwrap();
    db.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    let conninfo = fleet.pg.conninfo().replace("user=postgres", "user=keeper");
    assert_ne!(conninfo, fleet.pg.conninfo());

    let root = fleet.root.path();
    let write = |name: &str, text: &str, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        let path = root.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path.display().to_string()
    };
    let exits = |dir: &str, file: &str| {
        let mut child = spawn_serve(
            &root.join(dir),
            &conninfo,
            &["--host-id", dir, "--ledger-password-file", file],
        );
        let deadline = Instant::now() + fleet::PATIENCE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(root.join(dir).join("serve.log")).unwrap();
                return (status, log);
            }
            assert!(Instant::now() < deadline, "{dir} kept running");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // A wrong password: the database refuses it.
    let wrong = write("wrong.pw", "not-it\n", 0o600);
    let (status, log) = exits("wrong", &wrong);
    assert!(!status.success(), "{log}");
    assert!(log.contains("password authentication failed"), "{log}");
    // A file others may read is refused before anything is sent.
    let open = write("open.pw", "kept-out-of-ps-1\n", 0o644);
    let (status, log) = exits("open", &open);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("chmod 600"), "{log}");

    // The right one, from a private file: the host joins the fleet.
    let right = write("right.pw", "kept-out-of-ps-1\n", 0o600);
    let dir = root.join("right");
    let mut child = spawn_serve(
        &dir,
        &conninfo,
        &["--host-id", "right", "--ledger-password-file", &right],
    );
    let deadline = Instant::now() + fleet::PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the host exited ({status}): {}",
                std::fs::read_to_string(dir.join("serve.log")).unwrap()
            );
        }
        if let Ok(r) = sync_call(&dir.join("s/bridge.sock"), "run.status", json!({})) {
            assert_eq!(r["result"]["ledger"]["hostId"], "right", "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "the host never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}
