//! Durable appends per second, latency and bytes written per commit for the journal, against
//! `redb` (an embedded B-tree store, one write transaction per append) in the same run; then
//! the time to recover a journal of a million receipts.
//!
//! `cargo run --release --example journal_bench [SECONDS_PER_CASE] [RECOVERY_RECEIPTS] [DIR]`
//! (defaults 3, 1000000, a temporary directory under `target/`). Each append is one receipt's
//! begin record (a 150-byte canonical request), awaited until durable, as the host does before
//! it lets the executor act. Journal writers are tokio tasks on a 2-worker runtime (as in the
//! host); redb writers are threads, since its commits block. Bytes per commit are what the
//! block device was asked to write (`/proc/diskstats`, so other work on the disk shows up too)
//! divided by commits (`fdatasync`s for the journal, transactions for redb).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polaris::book::RequestKey;
use polaris::journal::{Begun, Completed, FlusherKind, Journal, Options, Record, RequestPieces};

const RUN: &str = "6a0c1a44-7d1e-4f57-9a3b-4c1d2e3f4a5b";
const TASK: &str = "0b5e6f70-8192-4a3b-8c4d-5e6f708192a3";

fn key(n: u64) -> RequestKey {
    RequestKey::new(
        &uuid::Uuid::from_u64_pair(0x1000_0000_0000_4000, 0x8000_0000_0000_0000 | n).to_string(),
    )
}

fn request(n: u64) -> String {
    format!(
        r##"{{"method":"page.fill","params":{{"target":"#title","taskId":"{TASK}","value":"a post about the journal, number {n:>12}"}}}}"##
    )
}

fn reply(n: u64) -> String {
    format!(
        r##""ok":true,"result":{{"target":"#title","value":"a post about the journal, number {n:>12}"}}"##
    )
}

/// Sectors written by the block device holding `dir`, from `/proc/diskstats`.
fn sectors_written(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let stats = std::fs::read_to_string("/proc/diskstats").ok()?;
    stats.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 9 && f[0] == major.to_string() && f[1] == minor.to_string())
            .then(|| f[9].parse().ok())
            .flatten()
    })
}

struct Outcome {
    appends: u64,
    seconds: f64,
    commits: u64,
    disk_bytes: Option<u64>,
    file_bytes: u64,
    latencies: Vec<u32>,
}

impl Outcome {
    fn print(&mut self, name: &str, writers: usize) {
        self.latencies.sort_unstable();
        let pct = |p: f64| {
            let i = ((self.latencies.len() as f64 * p) as usize).min(self.latencies.len() - 1);
            self.latencies[i] as f64 / 1000.0
        };
        println!(
            "| {name} | {writers} | {:.0} | {:.1} | {} | {:.0} | {:.2} | {:.2} |",
            self.appends as f64 / self.seconds,
            self.appends as f64 / self.commits.max(1) as f64,
            self.disk_bytes
                .map(|b| format!("{:.1} KiB", b as f64 / self.commits.max(1) as f64 / 1024.0))
                .unwrap_or_else(|| "?".into()),
            self.file_bytes as f64 / self.commits.max(1) as f64,
            pct(0.5),
            pct(0.99),
        );
    }
}

fn journal_case(dir: &Path, options: Options, writers: usize, secs: f64) -> Outcome {
    let _ = std::fs::remove_dir_all(dir);
    let (j, _) = Journal::open(dir, options).unwrap();
    j.append(&Record::RunStarted {
        run_id: RUN,
        started_at: 0,
    })
    .unwrap()
    .wait()
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = j.stats();
    let disk_before = sectors_written(dir);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let latencies = rt.block_on(async {
        let tasks: Vec<_> = (0..writers as u64)
            .map(|w| {
                let (j, stop) = (j.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let n = (w << 32) | i;
                        let (k, req) = (key(n), request(n));
                        let t = Instant::now();
                        j.append(&Record::ReceiptBegun(Begun {
                            request_id: &k,
                            run_id: RUN,
                            method: "page.fill",
                            task_id: Some(TASK),
                            request: RequestPieces::whole(&req),
                            at: 1_700_000_000_000,
                        }))
                        .unwrap()
                        .await
                        .unwrap();
                        lat.push(t.elapsed().as_micros() as u32);
                        i += 1;
                    }
                    lat
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    let seconds = started.elapsed().as_secs_f64();
    let after = j.stats();
    let disk_after = sectors_written(dir);
    Outcome {
        appends: latencies.len() as u64,
        seconds,
        commits: after.fsyncs - before.fsyncs,
        disk_bytes: disk_before.zip(disk_after).map(|(a, b)| (b - a) * 512),
        file_bytes: after.bytes - before.bytes,
        latencies,
    }
}

fn redb_case(dir: &Path, writers: usize, secs: f64) -> Outcome {
    const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("receipts");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let db = Arc::new(redb::Database::create(dir.join("receipts.redb")).unwrap());
    {
        let tx = db.begin_write().unwrap();
        tx.open_table(TABLE).unwrap();
        tx.commit().unwrap();
    }
    let size = |db: &Path| std::fs::metadata(db.join("receipts.redb")).map_or(0, |m| m.len());
    let size_before = size(dir);
    let disk_before = sectors_written(dir);
    let stop = Arc::new(AtomicBool::new(false));
    let all = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let threads: Vec<_> = (0..writers as u64)
        .map(|w| {
            let (db, stop, all) = (db.clone(), stop.clone(), all.clone());
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let n = (w << 32) | i;
                    let (k, req) = (key(n).to_string(), request(n));
                    let t = Instant::now();
                    let tx = db.begin_write().unwrap();
                    tx.open_table(TABLE)
                        .unwrap()
                        .insert(k.as_bytes(), req.as_bytes())
                        .unwrap();
                    tx.commit().unwrap();
                    lat.push(t.elapsed().as_micros() as u32);
                    i += 1;
                }
                all.lock().unwrap().extend(lat);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    let latencies = std::mem::take(&mut *all.lock().unwrap());
    let disk_after = sectors_written(dir);
    Outcome {
        appends: latencies.len() as u64,
        seconds,
        commits: latencies.len() as u64,
        disk_bytes: disk_before.zip(disk_after).map(|(a, b)| (b - a) * 512),
        file_bytes: size(dir).saturating_sub(size_before),
        latencies,
    }
}

fn recovery(dir: &Path, receipts: u64) {
    let _ = std::fs::remove_dir_all(dir);
    let (j, _) = Journal::open(dir, Options::default()).unwrap();
    j.append(&Record::RunStarted {
        run_id: RUN,
        started_at: 0,
    })
    .unwrap();
    let t = Instant::now();
    let mut last = None;
    for chunk in (0..receipts).collect::<Vec<_>>().chunks(1000) {
        let keys: Vec<RequestKey> = chunk.iter().map(|n| key(*n)).collect();
        let reqs: Vec<String> = chunk.iter().map(|n| request(*n)).collect();
        let reps: Vec<String> = chunk.iter().map(|n| reply(*n)).collect();
        let mut records = Vec::with_capacity(chunk.len() * 2);
        for i in 0..chunk.len() {
            records.push(Record::ReceiptBegun(Begun {
                request_id: &keys[i],
                run_id: RUN,
                method: "page.fill",
                task_id: Some(TASK),
                request: RequestPieces::whole(&reqs[i]),
                at: 1_700_000_000_000 + i as i64,
            }));
        }
        for i in 0..chunk.len() {
            records.push(Record::ReceiptCompleted(Completed {
                request_id: &keys[i],
                reply: reps[i].as_bytes(),
                at: 1_700_000_000_100 + i as i64,
            }));
        }
        last = Some(j.append_batch(&records).unwrap());
    }
    if let Some(t) = last {
        t.wait().unwrap();
    }
    let written = t.elapsed();
    let bytes = j.stats().bytes;
    drop(j);
    // Warm: the file is in the page cache, as when a host restarts soon after a crash.
    let t = Instant::now();
    let (j, r) = Journal::open(dir, Options::default()).unwrap();
    let took = t.elapsed();
    assert_eq!(r.receipts.len() as u64, receipts);
    assert!(r.receipts.iter().all(|r| r.completion.is_some()));
    println!(
        "\nRecovery: {} receipts, {:.1} MiB journal ({:.0} bytes per receipt; written in {:.2} s)\nwarm: open + read back in {:.2} s",
        receipts,
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / receipts as f64,
        written.as_secs_f64(),
        took.as_secs_f64()
    );
    drop(r);
    drop(j);
    // Cold: the file's pages dropped from the page cache (only this file's), as after a reboot.
    {
        let f = std::fs::File::open(dir.join(polaris::journal::LOG_FILE)).unwrap();
        let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
    }
    let t = Instant::now();
    let (j, r) = Journal::open(dir, Options::default()).unwrap();
    println!(
        "cold (the file dropped from the page cache first): open + read back in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(r.receipts.len() as u64, receipts);
    drop(r);
    drop(j);
    let t = Instant::now();
    let report = polaris::journal::check(dir).unwrap();
    println!(
        "check (read-only): {} records in {:.2} s",
        report.records,
        t.elapsed().as_secs_f64()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args.get(1).map_or(3.0, |s| s.parse().unwrap());
    let receipts: u64 = args.get(2).map_or(1_000_000, |s| s.parse().unwrap());
    let root: PathBuf = args.get(3).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/journal-bench"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&root).unwrap();
    println!(
        "Durable appends ({secs} s per case) in {}\n",
        root.display()
    );
    println!("| store | writers | appends/s | appends per commit | device bytes per commit | file bytes per commit | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|---|---|");
    let prealloc = Options::default();
    let grow = Options {
        preallocate: 0,
        ..Options::default()
    };
    let blocking = Options {
        flusher: FlusherKind::SpawnBlocking,
        ..Options::default()
    };
    // The flusher before writes could overlap: each write synced before the next is made.
    let one_at_a_time = Options {
        overlap: false,
        ..Options::default()
    };
    for writers in [1, 32, 128] {
        journal_case(&root.join("j"), prealloc.clone(), writers, secs)
            .print("journal, flusher thread, zeros ahead", writers);
        journal_case(&root.join("j"), grow.clone(), writers, secs)
            .print("journal, flusher thread, file grows per write", writers);
        journal_case(&root.join("j"), blocking.clone(), writers, secs)
            .print("journal, spawn_blocking flusher, zeros ahead", writers);
        journal_case(
            &root.join("j"),
            Options {
                extra_sync_latency: Duration::from_millis(5),
                ..Options::default()
            },
            writers,
            secs,
        )
        .print(
            "journal, flusher thread, a 5 ms disk (+5 ms per fdatasync)",
            writers,
        );
        journal_case(&root.join("j"), one_at_a_time.clone(), writers, secs).print(
            "journal, one write at a time (no overlap), zeros ahead",
            writers,
        );
        journal_case(
            &root.join("j"),
            Options {
                extra_sync_latency: Duration::from_millis(5),
                ..one_at_a_time.clone()
            },
            writers,
            secs,
        )
        .print(
            "journal, one write at a time (no overlap), a 5 ms disk",
            writers,
        );
        redb_case(&root.join("redb"), writers, secs)
            .print("redb 2.6, one transaction per append", writers);
    }
    recovery(&root.join("recovery"), receipts);
    let _ = std::fs::remove_dir_all(&root);
}
