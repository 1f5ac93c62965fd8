//! A server process an example started: waiting until its socket accepts, and stopping it.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// Waits until `sock` accepts a connection, or `child` exits (then `log()` says why), or
/// `within` passes.
pub fn wait_for_socket(
    child: &mut Child,
    sock: &Path,
    within: Duration,
    log: impl Fn() -> String,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited with {status}: {}", log().trim()));
        }
        if std::os::unix::net::UnixStream::connect(sock).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} did not accept connections within {} s",
                sock.display(),
                within.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asks `child` to stop with SIGTERM (a fleet host leaves its ledger cleanly), then kills it
/// if it has not exited within 10 s; always reaps it.
pub fn stop(child: &mut Child) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(child),
        rustix::process::Signal::TERM,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
