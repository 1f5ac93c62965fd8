//! The sample MCP client configurations in `assets/` work as written with a default host: each
//! names `polaris mcp` with no path of anyone's machine in it, and the command it gives, started
//! the way a client starts it (the binary found on `PATH`, the file's env), reaches a host
//! started with the defaults and answers a tool call.

use polaris_testkit::mcp::socket_dir;
use polaris_testkit::mcp_client;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mcp_client::{call, ok};

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_polaris");
use polaris::client::BridgeClient;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Map, Value};

/// One server entry of a client configuration.
#[derive(Debug)]
struct Entry {
    file: String,
    command: String,
    args: Vec<String>,
    env: Map<String, Value>,
}

fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets")
}

/// The `polaris` entry of a JSON configuration, under whichever key its client uses.
fn json_entry(path: &Path) -> Entry {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let servers = ["mcpServers", "servers", "context_servers"]
        .iter()
        .find_map(|k| v.get(*k))
        .unwrap_or_else(|| panic!("{} names no servers", path.display()));
    let s = &servers["polaris"];
    if let Some(kind) = s.get("type") {
        assert_eq!(kind, "stdio", "{}", path.display());
    }
    Entry {
        file: path.display().to_string(),
        command: s["command"].as_str().unwrap().to_owned(),
        args: s["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect(),
        env: s
            .get("env")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    }
}

/// The `[mcp_servers.polaris]` table of a Codex `config.toml`, read for the three keys it has.
fn toml_entry(path: &Path) -> Entry {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("[mcp_servers.polaris]"), "{text}");
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{key} in {}", path.display()))
            .to_owned()
    };
    let env_line = value("env");
    let (k, v) = env_line
        .trim_matches(|c| c == '{' || c == '}' || c == ' ')
        .split_once(" = ")
        .unwrap();
    Entry {
        file: path.display().to_string(),
        command: serde_json::from_str(&value("command")).unwrap(),
        args: serde_json::from_str(&value("args")).unwrap(),
        env: Map::from_iter([(k.to_owned(), serde_json::from_str(v).unwrap())]),
    }
}

fn entries() -> Vec<Entry> {
    let mut out = vec![json_entry(&assets().join("mcp-client.json"))];
    let dir = assets().join("mcp-clients");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        match f.extension().and_then(|e| e.to_str()) {
            Some("json") => out.push(json_entry(&f)),
            Some("toml") => out.push(toml_entry(&f)),
            _ => {}
        }
    }
    assert!(out.len() >= 7, "{out:?}");
    out
}

/// `polaris serve` with the default socket directory (from `$POLARIS_SOCKET_DIR`, as on any
/// machine where it is set) and its files kept in the test's directory.
struct DefaultHost(Child);

impl Drop for DefaultHost {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_configuration_reaches_a_default_host() {
    let entries = entries();
    for e in &entries {
        assert_eq!(e.command, "polaris", "{e:?}: the binary is found on PATH");
        assert_eq!(e.args, ["mcp"], "{e:?}: the defaults, no socket dir");
        let all = format!("{} {:?} {:?}", e.command, e.args, e.env);
        for bad in ["/home/", "/Users/", "/root", "~", "C:\\"] {
            assert!(!all.contains(bad), "{e:?} holds a user path");
        }
    }

    let dir = socket_dir();
    let sockets = dir.path().join("run");
    let _host = DefaultHost(
        Command::new(BIN)
            .arg("serve")
            .arg("--audit-log")
            .arg(dir.path().join("audit.jsonl"))
            .arg("--journal")
            .arg(dir.path().join("journal"))
            .env("POLARIS_SOCKET_DIR", &sockets)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("polaris serve starts"),
    );
    let bridge = BridgeClient::new(&sockets).with_timeout(Duration::from_secs(5));
    let mut hello = None;
    for _ in 0..200 {
        if let Ok(r) = bridge.call("host.hello", json!({})).await {
            hello = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let hello = serde_json::to_value(hello.expect("the default host answers")).unwrap();
    let run = hello["result"]["runId"].clone();

    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for e in &entries {
        let mut cmd = tokio::process::Command::new(&e.command);
        cmd.args(&e.args)
            .env("PATH", &path)
            .env("POLARIS_SOCKET_DIR", &sockets);
        for (k, v) in &e.env {
            cmd.env(k, v.as_str().unwrap());
        }
        let client = ()
            .serve(TokioChildProcess::new(cmd).expect("the configured command starts"))
            .await
            .unwrap_or_else(|err| panic!("{}: no MCP session ({err})", e.file));
        let status = ok(&call(&client, "run_status", json!({})).await);
        assert_eq!(status["result"]["run_id"], run, "{}: {status}", e.file);
        client.cancel().await.unwrap();
    }
}
