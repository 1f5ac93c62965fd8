//! The console in a pseudo-terminal: the real `polaris` binary on a portable-pty whose output
//! feeds a vt100 screen, with keys typed into it. Shared by the console's end-to-end tests
//! (`tests/console/`); it starts consoles on a [`TestHost`](crate::host::TestHost).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use serde_json::{json, Value};

use crate::host::{polaris_bin, sync_call, TestHost};

/// The default terminal height.
pub const ROWS: u16 = 30;
/// The default terminal width.
pub const COLS: u16 = 100;
/// How long the console may take to show something before the test gives up (a hang guard, not
/// a timing assertion).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A running console in its own pseudo-terminal; killed on drop if it is still running.
pub struct Console {
    rows: u16,
    cols: u16,
    screen: Arc<Mutex<vt100::Parser>>,
    /// Every byte the console wrote, for what a screen does not show (an OSC 52 copy).
    raw: Arc<Mutex<Vec<u8>>>,
    keys: Box<dyn Write + Send>,
    /// The console process, for waiting on its exit.
    pub child: Box<dyn portable_pty::Child + Send + Sync>,
    /// The terminal's master side: the console's terminal stays open while it is held.
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl Console {
    /// `polaris console` on `host` at the default size.
    pub fn start(host: &TestHost) -> Console {
        Console::start_sized(host, COLS, ROWS)
    }

    /// A console at the default size, once it shows `host` connected with an empty book of
    /// `capacity` receipts.
    pub fn connected(host: &TestHost, capacity: usize) -> Console {
        let console = Console::start(host);
        let empty = format!("0/{capacity} receipts");
        console.wait_for("an empty connected host", |t| {
            t.contains("connected") && t.contains(&empty)
        });
        console
    }

    /// `polaris console` on `host` in a `cols`×`rows` terminal, logging to the host's root.
    pub fn start_sized(host: &TestHost, cols: u16, rows: u16) -> Console {
        let mut args: Vec<std::ffi::OsString> = vec![
            "console".into(),
            "--socket-dir".into(),
            host.dir.clone().into(),
        ];
        args.push("--log-file".into());
        args.push(host.root.path().join("console.log").into());
        Console::spawn_sized(&args, &[("NO_COLOR", "1")], cols, rows)
    }

    /// `polaris ARGS` in a terminal of the default size, with `env` added.
    pub fn spawn(args: &[std::ffi::OsString], env: &[(&str, &str)]) -> Console {
        Console::spawn_sized(args, env, COLS, ROWS)
    }

    /// `polaris ARGS` in a `cols`×`rows` pseudo-terminal whose output feeds a vt100 screen.
    pub fn spawn_sized(
        args: &[std::ffi::OsString],
        env: &[(&str, &str)],
        cols: u16,
        rows: u16,
    ) -> Console {
        let pty = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut cmd = CommandBuilder::new(polaris_bin());
        cmd.args(args);
        cmd.env("TERM", "xterm-256color");
        cmd.env_remove("NO_COLOR");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pty
            .slave
            .spawn_command(cmd)
            .expect("polaris console starts");
        drop(pty.slave);
        let screen = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 0)));
        let mut reader = pty.master.try_clone_reader().expect("pty reader");
        let sink = screen.clone();
        let raw = Arc::new(Mutex::new(Vec::new()));
        let raw_sink = raw.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                raw_sink.lock().unwrap().extend_from_slice(&buf[..n]);
                sink.lock().unwrap().process(&buf[..n]);
            }
        });
        let keys = pty.master.take_writer().expect("pty writer");
        Console {
            rows,
            cols,
            screen,
            raw,
            keys,
            child,
            _master: pty.master,
        }
    }

    /// The screen as text, now.
    pub fn contents(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    /// Waits until `check` holds for the screen and returns it; fails naming `what` after
    /// [`PATIENCE`].
    pub fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = self.contents();
            if check(&text) {
                return text;
            }
            if Instant::now() > deadline {
                panic!("the console never showed {what}; the screen is:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the console has written `needle` (bytes a screen does not show, such as an
    /// escape sequence); fails naming `what` after [`PATIENCE`].
    pub fn wait_for_output(&self, what: &str, needle: &[u8]) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if self
                .raw
                .lock()
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
            {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "the console never wrote {what}; the screen is:\n{}",
                    self.contents()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Cells drawn in a colour other than the terminal's default.
    pub fn coloured_cells(&self) -> usize {
        let parser = self.screen.lock().unwrap();
        let screen = parser.screen();
        let mut n = 0;
        for row in 0..self.rows {
            for col in 0..self.cols {
                if let Some(cell) = screen.cell(row, col) {
                    if cell.fgcolor() != vt100::Color::Default
                        || cell.bgcolor() != vt100::Color::Default
                    {
                        n += 1;
                    }
                }
            }
        }
        n
    }

    /// Waits until the screen contains `needle`.
    pub fn shows(&self, needle: &str) -> String {
        self.wait_for(needle, |t| t.contains(needle))
    }

    /// Types `keys` in one write.
    pub fn press(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The request ID on the row the cursor (`>`) is on, as the screen shows it.
pub fn selected_id(screen: &str) -> Option<String> {
    screen.lines().find_map(|line| {
        let rest = line.split_once("│>")?.1;
        let rest = rest.trim_start_matches('*');
        rest.split_whitespace().next().map(str::to_owned)
    })
}

/// A bridge call as an agent makes it; the host must answer.
pub fn call(host: &TestHost, method: &str, params: Value) -> Value {
    sync_call(&host.bridge(), method, params).expect("the host answers")
}

/// Starts a task on the fixture page with this behaviour and returns its ID.
pub fn start_task(host: &TestHost, fixture: Value) -> String {
    let r = call(
        host,
        "task.start",
        json!({"title": "e2e order", "fixture": fixture}),
    );
    assert_eq!(r["ok"], true, "{r}");
    r["result"]["taskId"].as_str().unwrap().to_owned()
}

/// One `page.fill` of field `#f{i}` on `task`, which must succeed.
pub fn fill(host: &TestHost, task: &str, i: usize) {
    let r = call(
        host,
        "page.fill",
        json!({"taskId": task, "target": format!("#f{i}"), "value": "v"}),
    );
    assert_eq!(r["ok"], true, "{r}");
}

/// A task with `fills` completed `page.fill` receipts (plus its `task.start` receipt); its ID.
pub fn task_with_fills(host: &TestHost, fills: usize) -> String {
    let task = start_task(host, json!({}));
    for i in 0..fills {
        fill(host, &task, i);
    }
    task
}

/// One bridge call under a request ID the test chooses.
pub fn call_as(host: &TestHost, request_id: &str, method: &str, params: Value) -> Value {
    use std::io::BufRead;
    let mut s = std::os::unix::net::UnixStream::connect(host.bridge()).unwrap();
    let frame = json!({"id": request_id, "method": method, "params": params});
    s.write_all(format!("{frame}\n").as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap()
}

/// The host's count of unsettled outcomes, as `run.status` reports it.
pub fn unsettled(host: &TestHost) -> u64 {
    let r = call(host, "run.status", json!({}));
    r["result"]["receipts"]["unsettled"]
        .as_u64()
        .unwrap_or_else(|| panic!("run.status reports no unsettled count: {r}"))
}

/// Waits until the Blocked pane counts `n` and checks that `run.status` says the same; the
/// screen.
pub fn blocked_matches(console: &Console, host: &TestHost, n: u64) -> String {
    let title = format!("Blocked outcomes {n} ");
    let screen = console.shows(&title);
    assert_eq!(
        unsettled(host),
        n,
        "run.status counts what the pane counts:\n{screen}"
    );
    screen
}

/// Kills the host with SIGKILL (no shutdown at all) and starts it again on the same socket
/// directory, audit log and journal with `args`; returns once the new run answers.
pub fn kill_and_restart(host: &mut TestHost, args: &[&str]) {
    let mut child = host.child.take().expect("running");
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::KILL,
    );
    child.wait().unwrap();
    let log = std::fs::File::create(host.root.path().join("serve-restarted.log")).unwrap();
    let child = std::process::Command::new(crate::host::polaris_bin())
        .arg("serve")
        .arg("--socket-dir")
        .arg(&host.dir)
        .arg("--audit-log")
        .arg(host.root.path().join("audit.jsonl"))
        .arg("--journal")
        .arg(host.root.path().join("journal"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("polaris serve starts again");
    host.child = Some(child);
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(r) = sync_call(&host.bridge(), "host.hello", json!({})) {
            if r["ok"] == true {
                host.run_id = r["result"]["runId"].as_str().unwrap().to_owned();
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the restarted host never answered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
