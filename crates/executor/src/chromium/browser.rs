//! Finding, starting and killing the Chromium process.
//!
//! The browser runs headless with `--remote-debugging-pipe` (no TCP port: nothing else on the
//! machine can reach it), a fresh `--user-data-dir` under the temp directory, and in a process
//! group of its own: its helpers (zygotes, renderers, the network service, a crash handler)
//! stay in that group, so killing the group leaves nothing behind.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::cdp::{methods, Connection, PIPE_BYTES};

/// The names tried, in order, when no binary is given.
pub const BROWSER_NAMES: [&str; 3] = ["chromium-headless-shell", "chromium", "google-chrome"];

/// Where distributions keep the real binaries (Debian's `/usr/bin/chromium*` are wrapper
/// scripts; the `chromium-headless-shell` package's binary is only here, off the `PATH`).
fn library_locations(name: &str) -> Vec<PathBuf> {
    let mut v = vec![
        PathBuf::from("/usr/lib/chromium").join(name),
        PathBuf::from("/usr/lib/chromium-browser").join(name),
        PathBuf::from("/usr/lib64/chromium-browser").join(name),
    ];
    if name == "google-chrome" {
        v.push(PathBuf::from("/opt/google/chrome/chrome"));
    }
    v
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The browser binary: `explicit` (from `--chromium` or `$POLARIS_CHROMIUM`), else the first of
/// [`BROWSER_NAMES`] found in its library directory or on the `PATH`.
pub fn find_chromium(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(format!(
                "{} is not an executable file; pass the Chromium binary with --chromium PATH",
                p.display()
            ))
        };
    }
    let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for name in BROWSER_NAMES {
        let found = library_locations(name)
            .into_iter()
            .chain(path_dirs.iter().map(|d| d.join(name)))
            .find(|p| is_executable(p));
        if let Some(p) = found {
            return Ok(p);
        }
    }
    Err("Chromium not found: install it (apt-get install chromium-headless-shell) or pass --chromium PATH (or set POLARIS_CHROMIUM)".into())
}

/// The reason a browser the executor killed gives.
pub const STOPPED: &str = "the executor stopped it";

/// How to start the browser.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// The binary.
    pub binary: PathBuf,
    /// How long the browser may take to answer its first command.
    pub startup_timeout: Duration,
    /// The non-public addresses pages may reach; every other one is blocked browser-wide from
    /// the start ([`Connection::guard`]). `None` blocks nothing: only for a bare browser that
    /// no agent drives (the benchmark's baseline).
    pub guard: Option<std::sync::Arc<super::origins::Origins>>,
}

/// A running browser: its pipe connection and its process group.
pub struct Browser {
    /// The DevTools connection.
    pub cdp: Connection,
    /// The browser's pid, which is also its process group's id.
    pid: i32,
    child: Mutex<Option<Child>>,
    user_data_dir: PathBuf,
    /// How long the start took, until the first answer.
    pub started_in: Duration,
    /// What the browser calls itself, e.g. `HeadlessChrome/156.0.7573.0`.
    pub product: String,
}

fn pipe_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Asks the kernel for a [`PIPE_BYTES`] pipe; a smaller one (a lower system limit) still
/// works, only with more turns.
fn widen(fd: &OwnedFd) {
    if let Err(e) = rustix::pipe::fcntl_setpipe_size(fd, PIPE_BYTES) {
        tracing::debug!(error = %std::io::Error::from(e), "the DevTools pipe keeps its default size");
    }
}

/// A close-on-exec copy numbered 10 or above, so moving it onto 3 or 4 in the child can never
/// overwrite the other end first.
fn high_copy(fd: &OwnedFd) -> std::io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 10)?)
}

static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// Profile directories are named `polaris-chromium-<host pid>-…`. A host that was killed
/// (SIGKILL, power loss) could not remove its own; the next start removes those whose host
/// is gone.
fn remove_orphaned_profiles(temp: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("polaris-chromium-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let mine = e.metadata().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.is_dir() && m.uid() == rustix::process::geteuid().as_raw()
        });
        if mine && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn fresh_profile_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let n = LAUNCHES.fetch_add(1, Ordering::Relaxed);
    if n == 0 {
        remove_orphaned_profiles(&std::env::temp_dir());
    }
    let dir = std::env::temp_dir().join(format!(
        "polaris-chromium-{}-{n}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// The flags every launch uses. This machine kind has no network: without the `--disable-*`
/// flags Chromium keeps trying to reach its update, sync and field-trial services.
fn flags(profile: &Path) -> Vec<String> {
    let mut v: Vec<String> = [
        "--headless",
        "--remote-debugging-pipe",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        "--disable-breakpad",
        "--disable-crash-reporter",
        // `IsolateOrigins,site-per-process` and `--disable-site-isolation-trials`: frames of
        // other sites stay in their page's renderer process and session, so the executor's
        // isolated world reaches into them (page.snapshot, refs and locators inside a payment
        // frame) instead of their being out-of-process targets it would have to attach to one
        // by one. Each task still has its own browser context, and contexts never share a
        // renderer. `BackForwardCache`: back and forward load their page afresh, so each fires
        // `load` and its server sees the request, as the page.navigate rules expect.
        "--disable-features=Translate,MediaRouter,OptimizationHints,InterestFeedContentSuggestions,IsolateOrigins,site-per-process,BackForwardCache",
        "--disable-site-isolation-trials",
        "--disable-background-timer-throttling",
        "--disable-renderer-backgrounding",
        "--disable-backgrounding-occluded-windows",
        "--password-store=basic",
        "--use-mock-keychain",
        "--mute-audio",
        "--hide-scrollbars",
        "--window-size=1280,800",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if rustix::process::geteuid().is_root() {
        // Chromium refuses to run as root with its sandbox on.
        v.push("--no-sandbox".into());
    }
    v.push(format!("--user-data-dir={}", profile.display()));
    v.push("about:blank".into());
    v
}

impl Browser {
    /// Starts a browser and waits for its first answer.
    pub async fn launch(options: &LaunchOptions) -> Result<Browser, String> {
        let begun = Instant::now();
        let profile = fresh_profile_dir()
            .map_err(|e| format!("cannot create a profile directory for Chromium: {e}"))?;
        let cleanup = |e: String| {
            let _ = std::fs::remove_dir_all(&profile);
            e
        };
        let spawned = Self::spawn(options, &profile).map_err(cleanup)?;
        let (child, commands, replies) = spawned;
        let pid = child.id() as i32;
        let cdp = Connection::start(commands, replies);
        let mut browser = Browser {
            cdp,
            pid,
            child: Mutex::new(Some(child)),
            user_data_dir: profile,
            started_in: Duration::ZERO,
            product: String::new(),
        };
        let first = tokio::time::timeout(
            options.startup_timeout,
            browser.cdp.call(None, &methods::BrowserGetVersion {}),
        )
        .await;
        match first {
            Ok(Ok(v)) => {
                browser.product = v.product;
                browser.started_in = begun.elapsed();
                // After the start is timed: the block is no part of the browser's start.
                if let Some(origins) = &options.guard {
                    let guarded = tokio::time::timeout(
                        options.startup_timeout,
                        browser.cdp.guard(origins.clone()),
                    )
                    .await;
                    match guarded {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            return Err(format!(
                                "Chromium could not block non-public addresses (Fetch.enable): {e}"
                            ))
                        }
                        Err(_) => return Err("Chromium did not answer Fetch.enable in time".into()),
                    }
                }
                tracing::info!(
                    pid,
                    product = %browser.product,
                    ms = browser.started_in.as_millis() as u64,
                    binary = %options.binary.display(),
                    "Chromium started"
                );
                Ok(browser)
            }
            Ok(Err(e)) => Err(format!(
                "Chromium ({}) did not start: {e}{}",
                options.binary.display(),
                browser.log_tail()
            )),
            Err(_) => Err(format!(
                "Chromium ({}) did not answer within {} ms{}",
                options.binary.display(),
                options.startup_timeout.as_millis(),
                browser.log_tail()
            )),
        }
        // On an error `browser` is dropped here, which kills its group and removes the profile.
    }

    fn spawn(
        options: &LaunchOptions,
        profile: &Path,
    ) -> Result<(Child, pipe::Sender, pipe::Receiver), String> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |e: std::io::Error| format!("{what}: {e}")
        };
        // The browser reads commands on fd 3 and writes answers on fd 4.
        let (cmd_read, cmd_write) = pipe_pair().map_err(io("creating a pipe"))?;
        let (reply_read, reply_write) = pipe_pair().map_err(io("creating a pipe"))?;
        widen(&cmd_write);
        widen(&reply_read);
        let child_in = high_copy(&cmd_read).map_err(io("duplicating a pipe"))?;
        let child_out = high_copy(&reply_write).map_err(io("duplicating a pipe"))?;
        drop((cmd_read, reply_write));
        let (cin, cout) = (child_in.as_raw_fd(), child_out.as_raw_fd());
        let log = std::fs::File::create(profile.join("chromium.log"))
            .map_err(io("creating Chromium's log file"))?;
        let mut cmd = Command::new(&options.binary);
        cmd.args(flags(profile))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0);
        // SAFETY: only async-signal-safe calls between fork and exec. dup2 clears
        // close-on-exec on 3 and 4; the sources (≥ 10) close at exec. (libc's dup2: rustix's
        // wants the target as an owned descriptor, and 3 and 4 may not even be open here.)
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(cin, 3) < 0 || libc::dup2(cout, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(io(&format!("starting {}", options.binary.display())))?;
        drop((child_in, child_out));
        let commands =
            pipe::Sender::from_owned_fd(cmd_write).map_err(io("watching the command pipe"))?;
        let replies =
            pipe::Receiver::from_owned_fd(reply_read).map_err(io("watching the reply pipe"))?;
        Ok((child, commands, replies))
    }

    fn log_tail(&self) -> String {
        let text =
            std::fs::read_to_string(self.user_data_dir.join("chromium.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        if lines.is_empty() {
            String::new()
        } else {
            let mut l = lines;
            l.reverse();
            format!("; its last words: {}", l.join(" | "))
        }
    }

    /// The browser's pid (also its process group's id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// `Some(reason)` once the browser is gone.
    pub fn gone(&self) -> Option<String> {
        self.cdp.closed()
    }

    /// Kills the whole process group and removes the profile. Idempotent.
    pub fn kill(&self) {
        let child = self.child.lock().expect("browser child lock").take();
        let Some(mut child) = child else {
            return;
        };
        self.cdp.close(STOPPED);
        // The group this browser leads: it was started with process_group(0) and has not been
        // reaped yet, so the id is still ours.
        if let Some(group) = rustix::process::Pid::from_raw(self.pid) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&self.user_data_dir);
        tracing::debug!(pid = self.pid, "Chromium's process group killed");
    }

    /// The processes of the browser's group.
    pub fn processes(&self) -> Vec<GroupProcess> {
        group_processes(self.pid)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One process of a browser's group, read from `/proc`.
#[derive(Clone, Debug)]
pub struct GroupProcess {
    /// Its pid.
    pub pid: i32,
    /// Its parent's pid.
    pub ppid: i32,
    /// Resident memory, bytes (pages shared with the other processes counted in full).
    pub rss_bytes: u64,
    /// Proportional memory, bytes: shared pages divided among their sharers, so the sum over
    /// the group is what the browser really holds (0 when the kernel does not say).
    pub pss_bytes: u64,
    /// Chromium's `--type=` (renderer, zygote, gpu-process, utility, …); `browser` for the main one.
    pub kind: String,
}

/// The live processes whose process group is `pgid`.
pub fn group_processes(pgid: i32) -> Vec<GroupProcess> {
    let page = 4096u64;
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state ppid pgrp … (rss is field 24).
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 22 || f[0] == "Z" {
            continue;
        }
        let (ppid, pgrp) = (f[1].parse().unwrap_or(0), f[2].parse().unwrap_or(0));
        if pgrp != pgid {
            continue;
        }
        let rss_pages: u64 = f[21].parse().unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        // Chromium rewrites its process title, so the flags may be one space-separated string.
        let kind = cmdline
            .split(|b| *b == 0 || *b == b' ')
            .filter_map(|a| std::str::from_utf8(a).ok())
            .find_map(|a| a.strip_prefix("--type="))
            .unwrap_or("browser")
            .to_owned();
        out.push(GroupProcess {
            pid,
            ppid,
            rss_bytes: rss_pages * page,
            pss_bytes: pss_kib(pid) * 1024,
            kind,
        });
    }
    out
}

fn pss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The process groups led by children of `parent` — the browsers a host process started.
pub fn browser_groups_of(parent: u32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2
            && f[0] != "Z"
            && f[1].parse::<u32>().ok() == Some(parent)
            && f[2].parse::<i32>().ok() == Some(pid)
        {
            out.push(pid);
        }
    }
    out
}
