//! A private PostgreSQL server for Polaris's fleet tests and benchmarks.
//!
//! The fleet ledger is only as good as the tests that run it against a real database, so this
//! starts one: `initdb` into a fresh directory under the system temp directory, listening only
//! on a unix socket inside that directory (no TCP port, nothing shared with other runs), as the
//! `postgres` system user when running as root (PostgreSQL refuses to run as root). Dropping it
//! stops the server and removes the directory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::{kill_process, test_kill_process, Pid, Signal};

/// The environment variable that turns a missing PostgreSQL from "skip" into "fail" (CI sets it).
pub const REQUIRE_ENV: &str = "POLARIS_REQUIRE_POSTGRES";

/// How to install the server, for every message that says it is missing.
const INSTALL_HINT: &str = "install PostgreSQL with `apt-get install postgresql` (Debian/Ubuntu) \
                            or put `initdb` and `pg_ctl` on PATH";

/// The port number in the socket file's name (`.s.PGSQL.PORT`); no TCP port is opened.
const PORT: u16 = 5432;

/// A PostgreSQL server of its own, in a temp directory, reachable only through a unix socket.
pub struct PrivatePostgres {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    /// The processes [`PrivatePostgres::freeze`] stopped, for `thaw` (and drop) to resume.
    frozen: std::sync::Mutex<Vec<Pid>>,
}

impl PrivatePostgres {
    /// Says whether a private server can be started here, and how to install one when not.
    pub fn available() -> Result<(), String> {
        find_bin_dir()?;
        if is_root() {
            if which("runuser").is_none() {
                return Err(
                    "PostgreSQL refuses to run as root and `runuser` was not found to run it as \
                     the `postgres` user; install util-linux or run as an ordinary user"
                        .to_string(),
                );
            }
            if postgres_ids().is_none() {
                return Err(format!(
                    "PostgreSQL refuses to run as root and there is no `postgres` system user to \
                     run it as; {INSTALL_HINT} (the package creates the user)"
                ));
            }
        }
        Ok(())
    }

    /// Creates a fresh cluster in a new temp directory and starts it.
    pub fn start() -> Result<PrivatePostgres, String> {
        Self::available()?;
        let bin = find_bin_dir()?;
        let as_postgres = is_root();
        let dir =
            std::env::temp_dir().join(format!("polaris-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).map_err(|e| {
            format!(
                "cannot create {}: {e}; check the temp directory",
                dir.display()
            )
        })?;
        let pg = PrivatePostgres {
            dir,
            bin,
            as_postgres,
            frozen: std::sync::Mutex::new(Vec::new()),
        };
        if as_postgres {
            let (uid, gid) = postgres_ids().ok_or("no `postgres` system user")?;
            chown(&pg.dir, uid, gid)?;
        }
        let data = pg.data_dir();
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run initdb: {e}; {INSTALL_HINT}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed in {}: {}{}",
                data.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        pg.start_again()?;
        Ok(pg)
    }

    /// The libpq connection string of this server.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={PORT} user=postgres dbname=postgres",
            self.dir.display()
        )
    }

    /// The directory holding the data directory, the socket and the server log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log file (for a failing test's message).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Stops the server (fast shutdown: open connections are cut), keeping its data.
    pub fn stop(&self) -> Result<(), String> {
        self.pg_ctl_stop("fast")
    }

    /// Starts the server again on the same data directory (after `stop` or `kill`).
    pub fn start_again(&self) -> Result<(), String> {
        // After `kill`, the killed postmaster's backends may still hold its shared memory for
        // a moment; PostgreSQL refuses to start until they are gone, so try a few times.
        let mut last = String::new();
        for _ in 0..50 {
            let log = File::options()
                .create(true)
                .append(true)
                .open(self.dir.join("pg_ctl.log"))
                .map_err(|e| format!("cannot open the pg_ctl log: {e}"))?;
            let log2 = log
                .try_clone()
                .map_err(|e| format!("cannot open the pg_ctl log: {e}"))?;
            let options = format!(
                "-k {} -c listen_addresses='' -p {PORT} -c max_connections=300 \
                 -c synchronous_commit=on",
                self.dir.display()
            );
            let status = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data_dir())
                .arg("-l")
                .arg(self.log_path())
                .arg("-o")
                .arg(options)
                .args(["-w", "-t", "60", "start"])
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(log2))
                .status()
                .map_err(|e| format!("cannot run pg_ctl: {e}; {INSTALL_HINT}"))?;
            if status.success() {
                return Ok(());
            }
            last = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "PostgreSQL did not start in {}; its log ends with: {}",
            self.dir.display(),
            tail(&last, 2000)
        ))
    }

    /// Kills the server abruptly (SIGKILL to the postmaster), as a crash would; its backends
    /// exit on their own once they notice. `start_again` recovers from the WAL.
    pub fn kill(&self) -> Result<(), String> {
        let Some(pid) = self.postmaster_pid() else {
            return Err("the private PostgreSQL is not running (no postmaster.pid)".to_string());
        };
        if let Err(e) = kill_process(pid, Signal::KILL) {
            return Err(format!(
                "cannot kill the postmaster {}: {}",
                pid.as_raw_pid(),
                std::io::Error::from(e)
            ));
        }
        for _ in 0..200 {
            if test_kill_process(pid).is_err() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Hangs the server as a sick machine would: `SIGSTOP` to the postmaster and every one of
    /// its processes. Connections stay open and new ones are accepted by the kernel, but
    /// nothing is answered (and no server-side timeout fires) until [`PrivatePostgres::thaw`].
    pub fn freeze(&self) -> Result<(), String> {
        let Some(pid) = self.postmaster_pid() else {
            return Err("the private PostgreSQL is not running (no postmaster.pid)".to_string());
        };
        let mut frozen = self.frozen.lock().unwrap_or_else(|p| p.into_inner());
        // The postmaster first, so it starts no process that would escape the freeze.
        for target in std::iter::once(pid).chain(children_of(pid)) {
            if kill_process(target, Signal::STOP).is_ok() {
                frozen.push(target);
            }
        }
        Ok(())
    }

    /// Resumes every process [`PrivatePostgres::freeze`] stopped.
    pub fn thaw(&self) {
        let mut frozen = self.frozen.lock().unwrap_or_else(|p| p.into_inner());
        for target in frozen.drain(..).rev() {
            let _ = kill_process(target, Signal::CONT);
        }
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<(), String> {
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", mode, "-w", "-t", "60", "stop"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl stop failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn postmaster_pid(&self) -> Option<Pid> {
        let text = std::fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        positive_pid(text.lines().next()?.trim().parse().ok()?)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A command for one of the server's programs, run as `postgres` when we are root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(path);
            cmd
        } else {
            Command::new(path)
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.thaw();
        if self.postmaster_pid().is_some() {
            let _ = self.pg_ctl_stop("immediate");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts a private server for the test `test_name`, or — when PostgreSQL is not installed and
/// `POLARIS_REQUIRE_POSTGRES` is not `1` — prints one line saying the test was skipped and how
/// to install the server, and returns `None`.
///
/// # Panics
/// When the server is required but missing, or installed but fails to start.
pub fn require_or_skip(test_name: &str) -> Option<PrivatePostgres> {
    if let Err(why) = PrivatePostgres::available() {
        if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
            panic!("{test_name}: PostgreSQL is required ({REQUIRE_ENV}=1) but {why}");
        }
        eprintln!("skipped {test_name}: no PostgreSQL server here ({why})");
        return None;
    }
    match PrivatePostgres::start() {
        Ok(pg) => Some(pg),
        Err(why) => panic!("{test_name}: the private PostgreSQL did not start: {why}"),
    }
}

/// The directory holding `initdb` and `pg_ctl`: on PATH, else the newest
/// `/usr/lib/postgresql/*/bin`.
fn find_bin_dir() -> Result<PathBuf, String> {
    if let Some(initdb) = which("initdb") {
        // Resolve symlinks so the directory also holds `postgres` and `pg_ctl` together.
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        if let Some(dir) = real.parent() {
            if dir.join("pg_ctl").is_file() {
                return Ok(dir.to_path_buf());
            }
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry
                .file_name()
                .to_str()?
                .split('.')
                .next()?
                .parse()
                .ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        format!(
            "`initdb` and `pg_ctl` were not found on PATH or under /usr/lib/postgresql/*/bin; \
             {INSTALL_HINT}"
        )
    })
}

/// The processes whose parent is `pid` (the postmaster's backends and helpers), from /proc.
fn children_of(pid: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let child = positive_pid(entry.file_name().to_str()?.parse().ok()?)?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`: the command may hold spaces, so read after its `)`.
            let ppid: i32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid.as_raw_pid()).then_some(child)
        })
        .collect()
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// A process ID as read from a file: `None` for zero or a negative number, which name no
/// single process (to kill(2) they mean a whole process group).
fn positive_pid(raw: i32) -> Option<Pid> {
    if raw > 0 {
        Pid::from_raw(raw)
    } else {
        None
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The `postgres` system user's uid and gid.
fn postgres_ids() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != "postgres" {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    })
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| format!("cannot hand {} to the postgres user: {e}", path.display()))
}

fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
