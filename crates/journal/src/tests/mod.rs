//! Tests of the journal against real files in temporary directories, with real `fdatasync`.

use std::path::Path;

use super::*;
use crate::book::{digest, RequestKey};

mod compaction;
mod crash;
mod integrity;

/// Opens a journal just closed by this process. Another test thread that spawns a process
/// shares every open descriptor with its child between `fork` and `exec`, the directory's lock
/// included, so for that instant the lock still reads as held: wait it out (a second at most).
pub(super) fn reopen(dir: &Path, options: Options) -> Result<(Journal, Recovered), Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match Journal::open(dir, options.clone()) {
            Err(Error::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            other => return other,
        }
    }
}

pub(super) const RUN: &str = "6a0c1a44-7d1e-4f57-9a3b-4c1d2e3f4a5b";
pub(super) const TASK: &str = "0b5e6f70-8192-4a3b-8c4d-5e6f708192a3";

/// A canonical UUID request key numbered `n`.
pub(super) fn key(n: u128) -> RequestKey {
    RequestKey::new(
        &uuid::Uuid::from_u128(0x1000_0000_0000_4000_8000_0000_0000_0000 | n).to_string(),
    )
}

pub(super) fn request(n: u128) -> String {
    format!(
        r##"{{"method":"page.fill","params":{{"target":"#title","taskId":"{TASK}","value":"post number {n}"}}}}"##
    )
}

pub(super) fn reply(n: u128) -> Vec<u8> {
    format!(r##""ok":true,"result":{{"target":"#title","value":"post number {n}"}}"##).into_bytes()
}

pub(super) fn begun<'a>(key: &'a RequestKey, request: &'a str, at: i64) -> Record<'a> {
    Record::ReceiptBegun(Begun {
        request_id: key,
        run_id: RUN,
        method: "page.fill",
        task_id: Some(TASK),
        request: RequestPieces::whole(request),
        at,
    })
}

pub(super) fn completed<'a>(key: &'a RequestKey, reply: &'a [u8], at: i64) -> Record<'a> {
    Record::ReceiptCompleted(Completed {
        request_id: key,
        reply,
        at,
    })
}

pub(super) fn task<'a>(event: TaskEvent, state: &'a str, pending: &'a [u8], at: i64) -> Record<'a> {
    Record::Task(TaskRecord {
        event,
        task_id: TASK,
        run_id: RUN,
        created_at: 10,
        at,
        title: "Publish the post",
        state,
        pending,
        detail: br#"{"url":"file:///form.html"}"#,
        closed_at: (event == TaskEvent::Closed).then_some(at),
    })
}

pub(super) fn no_prealloc() -> Options {
    Options {
        preallocate: 0,
        ..Options::default()
    }
}

pub(super) fn open(dir: &Path) -> (Journal, Recovered) {
    Journal::open(dir, Options::default()).expect("the journal opens")
}

/// Opens a fresh journal with a run started.
pub(super) fn fresh(dir: &Path, options: Options) -> Journal {
    let (j, r) = Journal::open(dir, options).unwrap();
    assert_eq!(r, Recovered::default());
    j.append(&Record::RunStarted {
        run_id: RUN,
        started_at: 1,
    })
    .unwrap()
    .wait()
    .unwrap();
    j
}

/// `n` completed receipts, each begun and completed in its own append (its own block).
pub(super) fn receipts(j: &Journal, range: std::ops::Range<u128>) {
    for n in range {
        let k = key(n);
        let req = request(n);
        j.append(&begun(&k, &req, 100 + n as i64))
            .unwrap()
            .wait()
            .unwrap();
        let rep = reply(n);
        j.append(&completed(&k, &rep, 200 + n as i64))
            .unwrap()
            .wait()
            .unwrap();
    }
}

#[test]
fn everything_appended_is_recovered_in_order_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let j = fresh(&dir, Options::default());
    let text = RequestKey::new("caller-chosen:id.7");
    let (k0, k1, k2) = (key(0), key(1), key(2));
    let (r0, r1, r2) = (request(0), request(1), request(2));
    let pending = br#"[{"requestId":"x"}]"#;
    let t = j
        .append_batch([
            &task(TaskEvent::Started, "running", b"", 10),
            &begun(&k0, &r0, 11),
            &begun(&text, &r1, 12),
            &Record::ReceiptStored(
                Begun {
                    request_id: &k2,
                    run_id: RUN,
                    method: "task.finish",
                    task_id: None,
                    request: RequestPieces::whole(&r2),
                    at: 13,
                },
                Completed {
                    request_id: &k2,
                    reply: b"\"ok\":true",
                    at: 13,
                },
            ),
        ])
        .unwrap();
    futures::executor::block_on(t.durable()).unwrap();
    j.append_batch([
        &completed(&k0, &reply(0), 20),
        &task(TaskEvent::Updated, "blocked", pending, 21),
        &begun(&k1, &r1, 22),
    ])
    .unwrap()
    .wait()
    .unwrap();
    let clear = [ClearedId {
        request_id: k0.clone(),
        digest: digest(&r0),
    }];
    j.append_batch([
        &Record::OutcomeAcknowledged(Acknowledged {
            request_id: &k0,
            reason: "dropped before clearing",
            operator: "ops",
            at: 29,
        }),
        &Record::OutcomeAcknowledged(Acknowledged {
            request_id: &text,
            reason: "seen on the site",
            operator: "ops",
            at: 30,
        }),
        &Record::ReceiptsCleared(Cleared {
            at: 31,
            reason: "verified by hand",
            operator: "ops",
            ids: &clear,
        }),
        &Record::RunStarted {
            run_id: "second-run",
            started_at: 40,
        },
    ])
    .unwrap()
    .wait()
    .unwrap();
    let stats = j.stats();
    assert_eq!(stats.records, 12);
    assert_eq!((stats.receipts, stats.cleared), (4, 1));
    drop(j);

    let (j, r) = open(&dir);
    assert_eq!(
        r.runs.iter().map(|r| &*r.run_id).collect::<Vec<_>>(),
        [RUN, "second-run"]
    );
    let ids: Vec<String> = r
        .receipts
        .iter()
        .map(|r| r.request_id.to_string())
        .collect();
    assert_eq!(ids, [text.to_string(), k2.to_string(), k1.to_string()]);
    let t = &r.receipts[0];
    assert_eq!(
        (&*t.method, t.task_id.as_deref(), &*t.run_id),
        ("page.fill", Some(TASK), RUN)
    );
    assert_eq!(
        (
            t.request.text(&t.method, t.task_id.as_deref()),
            t.first_seen,
            &t.completion,
        ),
        (r1.clone(), 12, &None)
    );
    assert_eq!(
        r.receipts[1].completion,
        Some(Completion {
            reply: b"\"ok\":true".to_vec().into(),
            completed_at: 13
        })
    );
    assert_eq!(r.receipts[1].task_id, None);
    assert_eq!(
        r.interrupted()
            .map(|r| r.request_id.clone())
            .collect::<Vec<_>>(),
        [text.clone(), k1.clone()]
    );
    assert_eq!(r.completed().count(), 1);
    assert_eq!(
        r.tombstones,
        [RecoveredTombstone {
            request_id: k0,
            digest: digest(&r0),
            clear: 0
        }]
    );
    assert_eq!(
        (r.clears[0].at, &*r.clears[0].reason, &*r.clears[0].operator),
        (31, "verified by hand", "ops")
    );
    // The acknowledgement of a receipt cleared since is gone with it.
    assert_eq!(r.acknowledgements.len(), 1);
    assert_eq!(r.acknowledgements[0].request_id, text);
    assert_eq!(&*r.acknowledgements[0].reason, "seen on the site");
    assert_eq!(r.tasks.len(), 1);
    let task = &r.tasks[0];
    assert_eq!(
        (&*task.task_id, &*task.state, &*task.pending),
        (TASK, "blocked", &pending[..])
    );
    assert_eq!(
        (task.created_at, task.updated_at, task.closed_at),
        (10, 21, None)
    );
    assert_eq!(r.cut_tail, None);
    let stats = j.stats();
    assert_eq!((stats.records, stats.receipts, stats.cleared), (12, 4, 1));

    // Appends go on after a reopen, naming runs recorded before it.
    let k3 = key(3);
    j.append(&begun(&k3, &r0, 50)).unwrap().wait().unwrap();
    j.append(&completed(&k1, b"late", 51))
        .unwrap()
        .wait()
        .unwrap();
    drop(j);
    let (_j, r) = open(&dir);
    assert_eq!(r.receipts.len(), 4);
    assert_eq!(
        r.receipts[2].completion.as_ref().unwrap().reply[..],
        b"late"[..]
    );
}

#[test]
fn appends_that_name_an_unknown_run_or_nothing_are_refused_and_leave_nothing_queued() {
    let tmp = tempfile::tempdir().unwrap();
    let j = fresh(tmp.path(), Options::default());
    let k = key(1);
    let req = request(1);
    let bad = Record::ReceiptBegun(Begun {
        run_id: "never-started",
        ..match begun(&k, &req, 1) {
            Record::ReceiptBegun(b) => b,
            _ => unreachable!(),
        }
    });
    // A batch that introduces a run and then fails introduces nothing.
    let e = j
        .append_batch([
            &Record::RunStarted {
                run_id: "r2",
                started_at: 1,
            },
            &bad,
        ])
        .unwrap_err();
    assert!(
        matches!(e, Error::UnknownRun(ref r) if r == "never-started"),
        "{e}"
    );
    assert!(matches!(j.append_batch([]), Err(Error::EmptyAppend)));
    let e = j
        .append(&Record::Task(TaskRecord {
            run_id: "r2",
            ..match task(TaskEvent::Started, "running", b"", 1) {
                Record::Task(t) => t,
                _ => unreachable!(),
            }
        }))
        .unwrap_err();
    assert!(matches!(e, Error::UnknownRun(_)));
    j.barrier().wait().unwrap();
    assert_eq!(j.stats().records, 1);
    drop(j);
    let (_j, r) = open(tmp.path());
    assert_eq!(r.runs.len(), 1);
    assert!(r.receipts.is_empty());
}

#[test]
fn concurrent_appends_share_flushes_and_every_ticket_resolves_durable() {
    for flusher in [FlusherKind::Thread, FlusherKind::SpawnBlocking] {
        let tmp = tempfile::tempdir().unwrap();
        let j = fresh(
            tmp.path(),
            Options {
                flusher,
                ..Options::default()
            },
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for w in 0..64u128 {
                let j = j.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..20u128 {
                        let n = w * 1000 + i;
                        let k = key(n);
                        let req = request(n);
                        let t = j.append(&begun(&k, &req, 1)).unwrap();
                        t.clone().await.unwrap();
                        assert!(t.is_durable());
                        let rep = reply(n);
                        j.append(&completed(&k, &rep, 2)).unwrap().await.unwrap();
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let last = j.barrier().seq();
        assert!(j.durable_seq() >= last);
        assert!(j.ticket(last).is_durable());
        assert!(!j.ticket(last + 1).is_durable());
        let stats = j.stats();
        assert_eq!(stats.records, 1 + 64 * 20 * 2);
        assert!(
            stats.fsyncs < 64 * 20 * 2,
            "{flusher:?}: {} fsyncs for {} appends: appends waiting together share a flush",
            stats.fsyncs,
            64 * 20 * 2
        );
        assert!(stats.last_fsync > Duration::ZERO);
        assert!(stats.bytes > 64 * 20 * 200);
        assert_eq!(stats.path, tmp.path().join(LOG_FILE));
        j.close().unwrap();
        assert!(matches!(
            j.append(&begun(&key(0), "{}", 1)),
            Err(Error::Closed)
        ));
        drop(rt);
        drop(j);
        let (_j, r) = open(tmp.path());
        assert_eq!(r.receipts.len(), 64 * 20);
        assert!(r.receipts.iter().all(|r| r.completion.is_some()));
    }
}

#[test]
fn blocks_written_while_zeros_are_written_ahead_are_never_overwritten_by_them() {
    let tmp = tempfile::tempdir().unwrap();
    // 64 KiB kept ahead: the grower works (in 1 MiB steps) all through the appends, and the
    // flusher keeps reaching the zeros it is writing.
    let j = fresh(
        tmp.path(),
        Options {
            preallocate: 64 << 10,
            ..Options::default()
        },
    );
    let writers: Vec<_> = (0..8u128)
        .map(|w| {
            let j = j.clone();
            std::thread::spawn(move || {
                let pad = "p".repeat(2_000);
                for i in 0..300u128 {
                    let n = w * 10_000 + i;
                    let k = key(n);
                    let req = format!("{}{pad}", request(n));
                    j.append(&begun(&k, &req, 1)).unwrap().wait().unwrap();
                    let rep = reply(n);
                    j.append(&completed(&k, &rep, 2)).unwrap().wait().unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let end = j.stats().bytes;
    assert!(
        end > 4 << 20,
        "the appends cross several steps of zeros: {end}"
    );
    j.close().unwrap();
    drop(j);
    let bytes = std::fs::read(tmp.path().join(LOG_FILE)).unwrap();
    assert!(bytes.len() as u64 >= end);
    assert!(
        bytes[end as usize..].iter().all(|b| *b == 0),
        "only zeros after the journal's end"
    );
    let report = check(tmp.path()).unwrap();
    assert_eq!((report.bytes, report.tail), (end, None));
    let (_j, r) = open(tmp.path());
    assert_eq!(r.receipts.len(), 8 * 300);
    assert!(r.receipts.iter().all(|r| r.completion.is_some()));
}

#[test]
fn big_appends_queued_together_are_split_into_blocks_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let j = fresh(tmp.path(), no_prealloc());
    let big = vec![b'x'; 12 << 20];
    let keys: Vec<RequestKey> = (0..6).map(key).collect();
    // Queued without waiting, so one flush takes them all: more than one block's worth.
    let tickets: Vec<Ticket> = keys
        .iter()
        .map(|k| {
            j.append_batch([&begun(k, "{}", 1), &completed(k, &big, 2)])
                .unwrap()
        })
        .collect();
    for t in tickets {
        t.wait().unwrap();
    }
    drop(j);
    let (_j, r) = open(tmp.path());
    assert_eq!(r.receipts.len(), 6);
    assert!(r
        .receipts
        .iter()
        .all(|r| r.completion.as_ref().unwrap().reply.len() == big.len()));
    let report = check(tmp.path()).unwrap();
    assert!(report.blocks >= 3, "{report:?}");
}

#[test]
fn a_second_opener_is_refused_and_check_reads_alongside_the_host() {
    let tmp = tempfile::tempdir().unwrap();
    let j = fresh(tmp.path(), Options::default());
    receipts(&j, 0..5);
    let k = key(99);
    j.append(&begun(&k, "{}", 1)).unwrap().wait().unwrap();
    let e = Journal::open(tmp.path(), Options::default()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Locked { .. }), "{msg}");
    assert!(msg.contains(&tmp.path().display().to_string()), "{msg}");
    assert!(msg.contains("in use by another polaris host"), "{msg}");

    let report = check(tmp.path()).unwrap();
    assert_eq!(
        (
            report.receipts,
            report.running,
            report.tombstones,
            report.tasks,
            report.runs
        ),
        (6, 1, 0, 0, 1)
    );
    assert_eq!(report.records, 12);
    assert_eq!(report.bytes, j.stats().bytes);
    assert!(report.file_bytes >= report.bytes);
    assert_eq!(report.tail, None);
    assert_eq!(report.host_pid, Some(std::process::id()));
    // The host was not disturbed.
    j.append(&completed(&k, b"done", 2))
        .unwrap()
        .wait()
        .unwrap();
    drop(j);
    let report = check(tmp.path()).unwrap();
    assert_eq!((report.running, report.host_pid), (0, None));
}

#[test]
fn stats_report_fsync_time_and_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let j = fresh(tmp.path(), Options::default());
    let started = std::time::Instant::now();
    let mut n = 0;
    while started.elapsed() < Duration::from_millis(1100) {
        receipts(&j, n..n + 1);
        n += 1;
    }
    let s = j.stats();
    assert!(s.fsyncs_per_second > 0.0, "{s:?}");
    assert!(s.last_fsync_ms() > 0.0);
    assert_eq!(s.records, 1 + 2 * n as u64);
    assert!(!s.compaction_due());
    assert_eq!(s.failed, None);
}

/// The blocks of a journal file: `(offset, overlapped)` each.
fn blocks_of(path: &Path) -> Vec<(u64, bool)> {
    let bytes = std::fs::read(path).unwrap();
    let file = std::fs::File::open(path).unwrap();
    let mut blocks = Vec::new();
    scan::scan(
        path,
        &file,
        format::HEADER_LEN as u64,
        bytes.len() as u64,
        |offset, _| {
            let head = &bytes[offset as usize..offset as usize + format::BLOCK_HEADER_LEN];
            blocks.push((offset, format::block_len(head).unwrap().overlapped));
            Ok(())
        },
    )
    .unwrap();
    blocks
}

#[test]
fn on_a_slow_disk_a_second_flusher_writes_while_the_first_syncs_and_everything_reads_back() {
    for overlap in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let options = Options {
            preallocate: 0,
            overlap,
            extra_sync_latency: Duration::from_millis(3),
            ..Options::default()
        };
        let j = fresh(tmp.path(), options.clone());
        std::thread::scope(|s| {
            for w in 0..16u128 {
                let j = j.clone();
                s.spawn(move || {
                    for i in 0..15u128 {
                        let n = w * 1000 + i;
                        let (k, req, rep) = (key(n), request(n), reply(n));
                        j.append(&begun(&k, &req, 1)).unwrap().wait().unwrap();
                        j.append(&completed(&k, &rep, 2)).unwrap().wait().unwrap();
                    }
                });
            }
        });
        let stats = j.stats();
        assert_eq!(stats.records, 1 + 16 * 15 * 2);
        drop(j);
        let blocks = blocks_of(&tmp.path().join(LOG_FILE));
        let marked = blocks.iter().filter(|b| b.1).count();
        if overlap {
            assert!(
                marked > 0,
                "no write was made while another was unfinished ({} blocks)",
                blocks.len()
            );
        } else {
            assert_eq!(marked, 0, "one write at a time marks nothing");
        }
        let (_j, r) = reopen(tmp.path(), options).unwrap();
        assert_eq!(r.cut_tail, None);
        assert_eq!(r.receipts.len(), 16 * 15);
        assert!(r.receipts.iter().all(|r| r.completion.is_some()));
    }
}
