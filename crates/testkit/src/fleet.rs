//! A fleet for tests: real `polaris serve --ledger` processes on a private PostgreSQL, each
//! recording its applied submits in its own `--fixture-effects` file (fsynced outside the
//! host), reached through real unix sockets.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::postgres::PrivatePostgres;
use serde_json::{json, Value};

use crate::host::{ok, polaris_bin, short_tempdir, sync_call, Conn};

/// How long anything a fleet test waits for may take before the test gives up (a hang guard,
/// not a timing assertion).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// One `polaris serve --ledger` process of the fleet, on directories that outlive it.
pub struct FleetHost {
    /// Its `--host-id`.
    pub name: &'static str,
    /// Its directory (sockets, log, effects).
    pub root: PathBuf,
    /// The process, until it is killed or has exited.
    pub child: Option<Child>,
    /// The run ID from `host.hello`.
    pub run_id: String,
}

impl FleetHost {
    /// Starts a host named `name` on the ledger and waits until it answers.
    pub fn start(root: &Path, name: &'static str, conninfo: &str, extra: &[&str]) -> FleetHost {
        let root = root.join(name);
        std::fs::create_dir_all(&root).unwrap();
        let log = std::fs::File::create(root.join("serve.log")).unwrap();
        let child = Command::new(polaris_bin())
            .arg("serve")
            .arg("--socket-dir")
            .arg(root.join("s"))
            .arg("--audit-log")
            .arg(root.join("audit.jsonl"))
            .arg("--fixture-effects")
            .arg(root.join("effects.jsonl"))
            .args(["--ledger", conninfo, "--host-id", name])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("polaris serve starts");
        let mut host = FleetHost {
            name,
            root,
            child: Some(child),
            run_id: String::new(),
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = host.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("{name} exited early ({status}): {}", host.log());
            }
            if let Ok(r) = sync_call(&host.bridge(), "host.hello", json!({})) {
                if r["ok"] == true {
                    host.run_id = r["result"]["runId"].as_str().unwrap().to_owned();
                    return host;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{name} never answered: {}",
                host.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The socket directory (what `polaris console --socket-dir` takes).
    pub fn socket_dir(&self) -> PathBuf {
        self.root.join("s")
    }

    /// The bridge socket.
    pub fn bridge(&self) -> PathBuf {
        self.root.join("s/bridge.sock")
    }

    /// The host's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("serve.log")).unwrap_or_default()
    }

    /// A new bridge connection.
    pub async fn conn(&self) -> Conn {
        Conn::connect(&self.bridge()).await
    }

    /// A connection to this host's introspection socket (the operator's channel).
    pub async fn intro(&self) -> Conn {
        Conn::connect(&self.root.join("s/introspect.sock")).await
    }

    /// This host's audit log (empty when it has none yet).
    pub fn audit(&self) -> String {
        std::fs::read_to_string(self.root.join("audit.jsonl")).unwrap_or_default()
    }

    /// SIGKILL: no shutdown, no leaving the fleet, no cleanup.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Sends `signal` to the process (`SIGSTOP` freezes it as a hung machine would).
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(self.child.as_ref().expect("running"));
        rustix::process::kill_process(pid, signal)
            .unwrap_or_else(|e| panic!("signal {signal:?}: {e}"));
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Waits for the process to exit on its own; fails after [`PATIENCE`].
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "{} never exited", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The effect lines this host's fixture recorded, by request ID.
    pub fn effects(&self) -> HashMap<String, usize> {
        let text = std::fs::read_to_string(self.root.join("effects.jsonl")).unwrap_or_default();
        let mut by_id = HashMap::new();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).expect("an effect line is JSON");
            *by_id
                .entry(v["requestId"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        by_id
    }

    /// `run.status` of this host.
    pub async fn status(&self) -> Value {
        let mut c = self.conn().await;
        ok(&c.call("run.status", json!({})).await).clone()
    }

    /// The fleet's hosts as this host last read them (`run.status.ledger.hosts`).
    pub async fn fleet_hosts(&self) -> Vec<Value> {
        self.status().await["ledger"]["hosts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for FleetHost {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // A stopped process must be resumed to die promptly and release its sockets.
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::CONT,
            );
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A private PostgreSQL and hosts on it.
pub struct Fleet {
    /// The hosts, in the order of their names.
    pub hosts: Vec<FleetHost>,
    /// The database (dropped after the hosts).
    pub pg: PrivatePostgres,
    /// Where the hosts' directories are.
    pub root: tempfile::TempDir,
}

impl Fleet {
    /// Starts hosts named `names` on a fresh private PostgreSQL, one after the other, each
    /// with `extra` arguments; `None` (after one line saying so) when PostgreSQL is not
    /// installed and CI does not require it.
    pub fn start(test: &str, names: &[&'static str], extra: &[&str]) -> Option<Fleet> {
        let pg = crate::postgres::require_or_skip(test)?;
        let root = short_tempdir();
        let hosts = names
            .iter()
            .map(|name| FleetHost::start(root.path(), name, &pg.conninfo(), extra))
            .collect();
        Some(Fleet { hosts, pg, root })
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> &FleetHost {
        self.hosts.iter().find(|h| h.name == name).unwrap()
    }

    /// The host named `name`, to signal or kill.
    pub fn host_mut(&mut self, name: &str) -> &mut FleetHost {
        self.hosts.iter_mut().find(|h| h.name == name).unwrap()
    }

    /// Every effect line of the fleet, by request ID, with the host that applied it.
    pub fn effects(&self) -> HashMap<String, Vec<&'static str>> {
        let mut all: HashMap<String, Vec<&'static str>> = HashMap::new();
        for h in &self.hosts {
            for (id, n) in h.effects() {
                for _ in 0..n {
                    all.entry(id.clone()).or_default().push(h.name);
                }
            }
        }
        all
    }
}

/// Polls `probe` until it returns `Some`; fails with `what` after [`PATIENCE`]
/// ([`crate::poll_until`]).
pub async fn eventually<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    crate::poll_until(what, PATIENCE, probe).await
}
