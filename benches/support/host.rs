//! The Polaris host the benchmarks measure: in-process, on the server runtime, with the fixture
//! executor, exactly as `polaris serve` would start it.

use std::path::Path;
use std::sync::Arc;

use polaris::host::HostConfig;
use polaris::serve::{Running, ServeOptions};
use polaris::server::Limits;
use tokio::runtime::Runtime;

/// Starts a host on `dir` with a receipt capacity large enough for the whole bench.
pub fn start_polaris(srv: &Runtime, dir: &Path, capacity: usize) -> Running {
    let _enter = srv.enter();
    let options = ServeOptions {
        socket_dir: dir.to_path_buf(),
        host: HostConfig {
            capacity,
            ..HostConfig::default()
        },
        limits: Limits {
            max_frame_bytes: polaris::protocol::DEFAULT_MAX_FRAME_BYTES,
            max_connections: 256,
            ..Limits::default()
        },
        audit_log: dir.join("audit.jsonl"),
    };
    polaris::serve::start(
        &options,
        Arc::new(polaris::executor::FixtureExecutor::new()),
    )
    .expect("the host starts")
}
