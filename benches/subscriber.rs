//! What an introspection subscriber costs the bridge: fresh `page.fill` mutations from 32
//! pipelining clients with no subscriber (`none`), with a live console's coalesced subscription
//! (`console`: `changed` frames every 250 ms, read), with a full-stream subscriber that reads
//! every event (`reading`), and with a full-stream one that never reads (`stuck`, which must
//! cost nothing more than a reading one). `cargo bench --bench subscriber`; `-- --test` runs
//! each case once.
//!
//! Server and clients run on separate runtimes, as a real console and agents would be separate
//! processes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use interprocess::local_socket::tokio::{prelude::*, Stream};
use interprocess::local_socket::GenericFilePath;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::runtime::Runtime;

#[path = "support/host.rs"]
mod host;
use host::start_polaris;

#[path = "support/pipeline.rs"]
mod pipeline;

/// The allocator the `polaris` binary uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CLIENTS: usize = 32;
const PER_CLIENT: usize = 500;
const WINDOW: usize = 64;

fn runtime(threads: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(path: &Path) -> Stream {
    Stream::connect(path.to_fs_name::<GenericFilePath>().unwrap())
        .await
        .unwrap()
}

/// One client: sends its lines keeping at most `WINDOW` in flight, checks every reply is ok.
async fn pipeline(path: PathBuf, lines: Vec<Vec<u8>>) {
    let mut io = BufReader::with_capacity(64 * 1024, connect(&path).await);
    pipeline::pipeline(&mut io, &lines, WINDOW, &mut Vec::new()).await;
}

#[derive(Clone, Copy)]
enum Subscriber {
    None,
    /// The console's coalesced subscription, read.
    Console,
    Reading,
    Stuck,
}

fn bench(c: &mut Criterion) {
    let srv = runtime(1);
    let cli = runtime(1);
    let tmp = tempfile::Builder::new()
        .prefix("pl")
        .tempdir_in("/tmp")
        .unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let console_seen = Arc::new(AtomicU64::new(0));
    let counter = AtomicU64::new(0);

    let mut g = c.benchmark_group("subscriber_cost_fresh_fill");
    g.throughput(Throughput::Elements((CLIENTS * PER_CLIENT) as u64));
    g.sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(1));
    for (case, (name, kind)) in [
        ("none", Subscriber::None),
        ("console", Subscriber::Console),
        ("reading", Subscriber::Reading),
        ("stuck", Subscriber::Stuck),
    ]
    .into_iter()
    .enumerate()
    {
        // Each case gets a host of its own, starting from an empty book: one shared host would
        // make every later case pay for the millions of receipts the earlier ones left behind.
        let dir = tmp.path().join(format!("s{case}"));
        let running = start_polaris(&srv, &dir, 50_000_000);
        let bridge = dir.join("bridge.sock");
        let task = cli.block_on(async {
            let mut io = BufReader::new(connect(&bridge).await);
            io.get_mut()
            .write_all(
                b"{\"id\":\"start\",\"method\":\"task.start\",\"params\":{\"title\":\"bench\"}}\n",
            )
            .await
            .unwrap();
            let mut line = String::new();
            io.read_line(&mut line).await.unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            v["result"]["taskId"].as_str().unwrap().to_owned()
        });
        // The subscriber lives for the whole case; it connects before the first request.
        let intro = dir.join("introspect.sock");
        let seen = match kind {
            Subscriber::Console => console_seen.clone(),
            _ => seen.clone(),
        };
        let holder = cli.block_on(async move {
            if let Subscriber::None = kind {
                return None;
            }
            let stream = connect(&intro).await;
            let request: &[u8] = match kind {
                Subscriber::Console => {
                    b"{\"id\":\"sub\",\"method\":\"subscribe\",\"params\":{\"coalesceMs\":250}}\n"
                }
                _ => b"{\"id\":\"sub\",\"method\":\"subscribe\"}\n",
            };
            (&stream).write_all(request).await.unwrap();
            let mut io = BufReader::new(stream);
            let mut line = String::new();
            io.read_line(&mut line).await.unwrap();
            assert!(line.contains("\"subscribed\":true"), "{line}");
            Some(match kind {
                Subscriber::Reading | Subscriber::Console => tokio::spawn(async move {
                    let mut line = Vec::new();
                    while io.read_until(b'\n', &mut line).await.unwrap_or(0) > 0 {
                        seen.fetch_add(1, Ordering::Relaxed);
                        line.clear();
                    }
                    drop(io);
                }),
                // Holds the connection open and never reads it.
                _ => tokio::spawn(async move {
                    let _keep = io;
                    std::future::pending::<()>().await
                }),
            })
        });
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let round = counter.fetch_add(1, Ordering::Relaxed);
                    let batches: Vec<Vec<Vec<u8>>> = (0..CLIENTS)
                        .map(|c| {
                            (0..PER_CLIENT)
                                .map(|i| {
                                    format!(
                                        "{{\"id\":\"r{round}-{c}-{i}\",\"method\":\"page.fill\",\"params\":{{\"taskId\":\"{task}\",\"target\":\"#t{c}\",\"value\":\"{i}\"}}}}\n"
                                    )
                                    .into_bytes()
                                })
                                .collect()
                        })
                        .collect();
                    let start = Instant::now();
                    cli.block_on(async {
                        let runs: Vec<_> =
                            batches.into_iter().map(|lines| tokio::spawn(pipeline(bridge.clone(), lines))).collect();
                        for r in runs {
                            r.await.unwrap();
                        }
                    });
                    total += start.elapsed();
                }
                total
            })
        });
        if let Some(h) = holder {
            h.abort();
        }
        srv.block_on(running.stop());
    }
    g.finish();
    eprintln!(
        "the reading subscriber saw {} event lines, the console {} changed frames",
        seen.load(Ordering::Relaxed),
        console_seen.load(Ordering::Relaxed)
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
