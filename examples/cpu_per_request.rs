//! The host's CPU time per fresh `page.fill`, with 32 clients keeping 64 requests in flight:
//! steadier than wall-clock throughput on a machine shared with other work, so it is how
//! before/after figures for one change are taken (run the two builds alternately).
//! It is a profiling aid: the host runs inside this process, which flatters it, so the figures
//! Polaris quotes come from the outside measurement, `cargo run --release --example load -- --table`.
//!
//! `cargo run --release --example cpu_per_request [ROUNDS]` (each round is 16,384 requests; the
//! first two are warm-up). The host runs in this process on a 2-worker runtime, as in
//! `benches/budget.rs`; the clients run on the main thread, whose CPU time is subtracted.
use std::path::Path;
use std::time::Instant;

use interprocess::local_socket::tokio::{prelude::*, Stream};
use interprocess::local_socket::GenericFilePath;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[path = "../benches/support/host.rs"]
mod host;

#[path = "../benches/support/pipeline.rs"]
mod pipeline;

/// The allocator the `polaris` binary uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// User and system CPU seconds of the whole process.
fn process_cpu() -> f64 {
    // The process's CPU clock: the sum getrusage(RUSAGE_SELF) gives, in nanoseconds.
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}
/// CPU seconds of the calling thread.
fn thread_cpu() -> f64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

async fn connect(path: &Path) -> BufReader<Stream> {
    let name = path.to_fs_name::<GenericFilePath>().unwrap();
    BufReader::with_capacity(64 * 1024, Stream::connect(name).await.unwrap())
}

async fn call(io: &mut BufReader<Stream>, line: String) -> serde_json::Value {
    io.get_mut().write_all(line.as_bytes()).await.unwrap();
    let mut r = String::new();
    io.read_line(&mut r).await.unwrap();
    serde_json::from_str(&r).unwrap()
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(20);
    let srv = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cli = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .unwrap();
    let running = host::start_polaris(&srv, dir.path(), 50_000_000);
    let path = dir.path().join("bridge.sock");
    let mut conns = cli.block_on(async {
        let mut v = Vec::new();
        for _ in 0..32 {
            let mut io = connect(&path).await;
            let r = call(
                &mut io,
                format!(
                    "{{\"id\":\"{}\",\"method\":\"task.start\",\"params\":{{\"title\":\"b\"}}}}\n",
                    uuid::Uuid::new_v4()
                ),
            )
            .await;
            let task = r["result"]["taskId"].as_str().unwrap().to_owned();
            v.push((io, task));
        }
        v
    });
    let mut cpu_total = 0.0;
    let mut wall_total = 0.0;
    let mut n_total = 0usize;
    let mut client_total = 0.0;
    for round in 0..rounds {
        let work: Vec<_> = conns.drain(..).map(|(io, task)| {
            let lines: Vec<Vec<u8>> = (0..512).map(|_| {
                let mut l = serde_json::to_vec(&json!({"id": uuid::Uuid::new_v4().to_string(), "method": "page.fill", "params": {"taskId": task, "target": "#title", "value": "Hello"}})).unwrap();
                l.push(b'\n');
                l
            }).collect();
            (io, task, lines)
        }).collect();
        let n: usize = work.iter().map(|w| w.2.len()).sum();
        let p0 = process_cpu();
        let c0 = thread_cpu();
        let t0 = Instant::now();
        conns = cli.block_on(async move {
            let hs: Vec<_> = work
                .into_iter()
                .map(|(mut io, task, lines)| {
                    tokio::spawn(async move {
                        pipeline::pipeline(&mut io, &lines, 64, &mut Vec::new()).await;
                        (io, task)
                    })
                })
                .collect();
            let mut back = Vec::new();
            for h in hs {
                back.push(h.await.unwrap());
            }
            back
        });
        let wall = t0.elapsed().as_secs_f64();
        let client = thread_cpu() - c0;
        let server = process_cpu() - p0 - client;
        if round >= 2 {
            cpu_total += server;
            client_total += client;
            wall_total += wall;
            n_total += n;
        }
    }
    println!("fresh page.fill, 32 clients: {:.0}/s wall, host CPU {:.2} µs/request ({:.2} cores), clients {:.2} µs/request ({:.2} cores)", n_total as f64 / wall_total, cpu_total / n_total as f64 * 1e6, cpu_total / wall_total, client_total / n_total as f64 * 1e6, client_total / wall_total);
    drop(conns);
    srv.block_on(running.stop());
}
