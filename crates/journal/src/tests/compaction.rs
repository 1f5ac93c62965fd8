//! Compaction keeps exactly the live state, survives a crash at any step, and the bytes a live
//! receipt costs stay bounded.

use super::compact::Stage;
use super::*;

const OTHER: &str = "9c8d7e6f-5a4b-4c3d-8e2f-1a0b9c8d7e6f";

/// A journal of `n` receipts of which every one with `n % 5 != 0` is cleared, a running
/// receipt, the task they belong to (closed) and a closed task with no receipts.
fn cleared_mostly(dir: &Path, n: u128) -> Journal {
    let j = fresh(dir, Options::default());
    j.append(&task(TaskEvent::Started, "running", b"", 10))
        .unwrap()
        .wait()
        .unwrap();
    receipts(&j, 0..n);
    let ids: Vec<ClearedId> = (0..n)
        .filter(|i| !i.is_multiple_of(5))
        .map(|i| ClearedId {
            request_id: key(i),
            digest: digest(&request(i)),
        })
        .collect();
    let running = key(n + 1);
    let acked = key(0);
    j.append_batch([
        &Record::ReceiptsCleared(Cleared {
            at: 500,
            reason: "checked",
            operator: "ops",
            ids: &ids,
        }),
        &task(TaskEvent::Closed, "finished", b"[]", 501),
        &Record::Task(TaskRecord {
            event: TaskEvent::Closed,
            task_id: OTHER,
            run_id: RUN,
            created_at: 7,
            at: 8,
            title: "Nothing left of it",
            state: "stopped",
            pending: br#"[{"requestId":"gone"}]"#,
            detail: br#"{"reason":"no longer needed"}"#,
            closed_at: Some(8),
        }),
        &begun(&running, "{}", 502),
        &Record::OutcomeAcknowledged(Acknowledged {
            request_id: &acked,
            reason: "settled",
            operator: "ops",
            at: 503,
        }),
    ])
    .unwrap()
    .wait()
    .unwrap();
    j
}

/// What a reopen recovers (the journal is closed first).
fn recovered_now(dir: &Path) -> Recovered {
    Journal::open(dir, Options::default()).unwrap().1
}

#[test]
fn compaction_keeps_the_live_state_and_drops_cleared_receipts() {
    let tmp = tempfile::tempdir().unwrap();
    let j = cleared_mostly(tmp.path(), 200);
    let before = j.stats();
    assert_eq!((before.receipts, before.cleared), (201, 160));
    assert!(before.compaction_due(), "{before:?}");
    drop(j);
    let expected = recovered_now(tmp.path());
    assert_eq!(expected.receipts.len(), 41);
    assert_eq!(expected.tombstones.len(), 160);

    let (j, _) = open(tmp.path());
    // Appends go on while compacting, from another thread.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (j, stop) = (j.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 10_000u128;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 10_020 {
                receipts(&j, n..n + 1);
                n += 1;
            }
            n
        })
    };
    let done = j.compact().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().unwrap();
    // (What was appended meanwhile is copied as it is.)
    assert!(
        done.bytes_after - done.tail_bytes < (done.bytes_before - done.tail_bytes) / 2,
        "{done:?}"
    );
    // (The writer may have got some receipts in before the snapshot.)
    assert!(done.receipts >= 41, "{done:?}");
    assert_eq!((done.tombstones, done.tasks), (160, 2));
    let after = j.stats();
    assert!(!after.compaction_due(), "{after:?}");
    assert_eq!(after.cleared, 0);
    drop(j);

    let r = recovered_now(tmp.path());
    assert_eq!(r.runs, expected.runs);
    assert_eq!(r.tombstones, expected.tombstones);
    assert_eq!(r.clears, expected.clears);
    assert_eq!(r.acknowledgements, expected.acknowledgements);
    assert_eq!(r.receipts[..41], expected.receipts[..]);
    assert_eq!(r.receipts.len() as u128, 41 + (written - 10_000));
    // A closed task with receipts left is kept whole; one without keeps its compact record.
    assert_eq!(r.tasks.len(), 2);
    assert_eq!(r.tasks[0], expected.tasks[0]);
    assert!(!r.tasks[0].pending.is_empty());
    let (t, e) = (&r.tasks[1], &expected.tasks[1]);
    assert_eq!(
        (
            &t.task_id,
            &t.state,
            t.created_at,
            t.updated_at,
            t.closed_at
        ),
        (
            &e.task_id,
            &e.state,
            e.created_at,
            e.updated_at,
            e.closed_at
        )
    );
    assert!(t.pending.is_empty() && t.detail.is_empty());
    assert_eq!(check(tmp.path()).unwrap().receipts, r.receipts.len() as u64);
}

#[test]
fn a_crash_at_any_step_of_compaction_leaves_the_old_or_the_new_journal_whole() {
    for stage in [
        Some(Stage::Written),
        Some(Stage::Synced),
        Some(Stage::Renamed),
        None,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        drop(cleared_mostly(tmp.path(), 50));
        let expected = recovered_now(tmp.path());
        let (j, _) = open(tmp.path());
        let result = j.compact_at(stage);
        assert_eq!(result.is_ok(), stage.is_none());
        // The crash: the handle goes away with whatever the step left on disk.
        drop(j);
        let leftover = tmp.path().join(super::files::COMPACT_FILE).exists();
        assert_eq!(
            leftover,
            matches!(stage, Some(Stage::Written | Stage::Synced)),
            "{stage:?}"
        );
        let r = recovered_now(tmp.path());
        assert!(!tmp.path().join(super::files::COMPACT_FILE).exists());
        assert_eq!(r.receipts, expected.receipts, "{stage:?}");
        assert_eq!(r.tombstones, expected.tombstones, "{stage:?}");
        assert_eq!(r.acknowledgements, expected.acknowledgements, "{stage:?}");
        assert_eq!(r.runs, expected.runs, "{stage:?}");
        assert_eq!(r.tasks.len(), 2);
        assert_eq!(r.cut_tail, None);
    }
}

/// Bytes the journal grows by per receipt, begun and completed in separate appends (each its
/// own block: the worst case), and after compaction.
fn bytes_per_receipt(id: impl Fn(u128) -> RequestKey, n: u128) -> (f64, f64, usize) {
    let tmp = tempfile::tempdir().unwrap();
    let j = fresh(tmp.path(), Options::default());
    j.append(&task(TaskEvent::Started, "running", b"", 1))
        .unwrap()
        .wait()
        .unwrap();
    let base = j.stats().bytes;
    let mut payload = 0;
    for i in 0..n {
        let k = id(i);
        let req = request(i);
        let rep = reply(i);
        payload += req.len() + rep.len();
        j.append(&begun(&k, &req, 1_700_000_000_000 + i as i64))
            .unwrap()
            .wait()
            .unwrap();
        j.append(&completed(&k, &rep, 1_700_000_000_500 + i as i64))
            .unwrap()
            .wait()
            .unwrap();
    }
    let grown = (j.stats().bytes - base) as f64 / n as f64;
    let compacted = j.compact().unwrap();
    let base_after = {
        // The same journal with no receipts, compacted.
        let tmp = tempfile::tempdir().unwrap();
        let e = fresh(tmp.path(), Options::default());
        e.append(&task(TaskEvent::Started, "running", b"", 1))
            .unwrap()
            .wait()
            .unwrap();
        e.compact().unwrap().bytes_after
    };
    let after = (compacted.bytes_after - base_after) as f64 / n as f64;
    eprintln!(
        "journal bytes per receipt: {grown:.1} appended one record per block, {after:.1} compacted, for {} bytes of request + reply",
        payload / n as usize
    );
    (grown, after, payload / n as usize)
}

#[test]
fn journal_bytes_per_live_receipt_stay_within_request_plus_reply_plus_128() {
    let (grown, compacted, payload) = bytes_per_receipt(key, 300);
    let limit = (payload + 128) as f64;
    assert!(grown <= limit, "{grown} bytes per receipt > {limit}");
    assert!(compacted <= grown, "{compacted} after compaction");
    // A caller-chosen text ID is kept as text, in each of the two records: beyond the bound by
    // that text alone.
    let long = |i: u128| RequestKey::new(&format!("{:0>128}", i));
    let (grown, compacted, _) = bytes_per_receipt(long, 100);
    assert!(grown <= limit + 2.0 * 128.0, "{grown}");
    assert!(compacted <= limit + 128.0, "{compacted}");
}

/// The log's name and its recorded end, as `journal.end` has them.
fn recorded(dir: &Path) -> Vec<(u32, u64)> {
    super::end::read(dir)
        .unwrap()
        .expect("journal.end exists")
        .iter()
        .map(|m| (m.log, m.end))
        .collect()
}

fn log_name(dir: &Path) -> u32 {
    let bytes = std::fs::read(dir.join(LOG_FILE)).unwrap();
    format::header_log(&bytes[..format::HEADER_LEN])
}

#[test]
fn the_recorded_end_follows_the_log_while_open_through_compaction_and_at_close() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let j = cleared_mostly(&dir, 200);
    let before = log_name(&dir);
    assert_ne!(before, 0, "a new log is named");
    // While open, the recorder thread catches up with the durable end within a tick or two.
    let deadline = std::time::Instant::now() + 3 * super::RECORD_EVERY;
    while recorded(&dir) != [(before, j.stats().bytes)] {
        assert!(std::time::Instant::now() < deadline, "{:?}", recorded(&dir));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let uncompacted = std::fs::read(dir.join(LOG_FILE)).unwrap();
    j.compact().unwrap();
    let after = log_name(&dir);
    assert_ne!(after, before, "the compacted copy is a log of its own");
    assert_eq!(recorded(&dir)[0], (after, j.stats().bytes));
    receipts(&j, 1000..1003);
    let end = j.stats().bytes;
    j.close().unwrap();
    assert_eq!(
        recorded(&dir),
        [(after, end)],
        "the old log is no longer accepted"
    );
    drop(j);

    // Cut at the start of the last block: refused, naming what is missing, nothing changed.
    let whole = std::fs::read(dir.join(LOG_FILE)).unwrap();
    let last = blocks_of(&dir.join(LOG_FILE)).last().unwrap().0;
    std::fs::write(dir.join(LOG_FILE), &whole[..last as usize]).unwrap();
    for e in [
        check(&dir).unwrap_err(),
        reopen(&dir, Options::default()).map(drop).unwrap_err(),
    ] {
        match e {
            Error::Shortened { what, .. } => {
                assert!(
                    what.contains(&format!("{} bytes are missing", end - last)),
                    "{what}"
                )
            }
            other => panic!("{other}"),
        }
    }
    assert_eq!(
        std::fs::read(dir.join(LOG_FILE)).unwrap(),
        whole[..last as usize]
    );
    // The old, uncompacted log put back in its place: another log, refused.
    std::fs::write(dir.join(LOG_FILE), &uncompacted).unwrap();
    match check(&dir).unwrap_err() {
        Error::Shortened { what, .. } => assert!(what.contains("replaced"), "{what}"),
        other => panic!("{other}"),
    }
    // The whole log restored: it opens and keeps everything.
    std::fs::write(dir.join(LOG_FILE), &whole).unwrap();
    let (j, r) = reopen(&dir, Options::default()).unwrap();
    assert_eq!(r.receipts.len(), 200 / 5 + 1 + 3);
    drop(j);
}

#[test]
fn compactions_fold_skips_cleared_receipts_and_keeps_what_a_full_fold_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    let j = cleared_mostly(tmp.path(), 200);
    // A receipt begun, cleared while it ran (its completion comes after the clear's record
    // in no valid journal, so it never completes), and a live one completed after the clear.
    let (cut, late) = (key(900), key(901));
    j.append_batch([
        &begun(&cut, "{}", 600),
        &begun(&late, "{}", 601),
        &Record::ReceiptsCleared(Cleared {
            at: 602,
            reason: "stuck",
            operator: "ops",
            ids: &[ClearedId {
                request_id: cut.clone(),
                digest: digest("{}"),
            }],
        }),
        &completed(&late, b"{\"ok\":true}", 603),
    ])
    .unwrap()
    .wait()
    .unwrap();
    let end = j.stats().bytes;
    j.close().unwrap();
    let path = tmp.path().join(files::LOG_FILE);
    let file = files::open_file(&path, false, false).unwrap();
    let full = recover::read(&path, &file, end, false).unwrap().recovered;
    let live = recover::read_live(&path, &file, end).unwrap();
    assert_eq!(live, full);
    assert_eq!((live.receipts.len(), live.tombstones.len()), (42, 161));
    assert!(live.receipts.iter().any(|r| r.request_id == late));
}
