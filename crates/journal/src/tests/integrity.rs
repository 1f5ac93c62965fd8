//! Torn tails are cut; corruption before the tail, other format versions and strangers are
//! refused with the file and offset named.

use super::*;

/// A journal of `n` receipts, each append in its own block, and the offset where the last
/// block starts.
fn journal_with_last_block(dir: &Path, n: u128, options: Options) -> (u64, u64) {
    let j = fresh(dir, options);
    receipts(&j, 0..n - 1);
    let k = key(n - 1);
    let req = request(n - 1);
    j.append(&begun(&k, &req, 1)).unwrap().wait().unwrap();
    let last_start = j.stats().bytes;
    let rep = reply(n - 1);
    j.append(&completed(&k, &rep, 2)).unwrap().wait().unwrap();
    let end = j.stats().bytes;
    drop(j);
    (last_start, end)
}

/// A journal directory holding `bytes` as its log.
fn journal_of(to: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::write(to.join(LOG_FILE), bytes).unwrap();
}

#[test]
fn a_torn_last_record_is_cut_at_every_byte_offset_and_nothing_before_it_is_lost() {
    let small_prealloc = Options {
        preallocate: 64 << 10,
        ..Options::default()
    };
    for options in [no_prealloc(), small_prealloc] {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        let (last, end) = journal_with_last_block(&src, 5, options.clone());
        let whole = std::fs::read(src.join(LOG_FILE)).unwrap();
        assert!(end - last > 40, "a completion block is more than a header");
        for cut in last..end {
            let dir = tmp.path().join(format!("cut-{cut}"));
            // The file ends inside the last block (no zeros written ahead)...
            let mut torn = whole[..cut as usize].to_vec();
            // ...or the block is unfinished inside zeros written ahead of it.
            let mut zeroed = whole[..end as usize].to_vec();
            zeroed[cut as usize..].fill(0);
            zeroed.extend_from_slice(&[0; 4096]);
            for (variant, bytes) in [("truncated", &mut torn), ("zeroed", &mut zeroed)] {
                let _ = std::fs::remove_dir_all(&dir);
                journal_of(&dir, bytes);
                // `check` sees the same tail the open is about to cut, and cuts nothing.
                let report = check(&dir).unwrap();
                assert_eq!(
                    report.tail.as_ref().map(|t| t.offset),
                    (cut > last).then_some(last)
                );
                assert_eq!(std::fs::read(dir.join(LOG_FILE)).unwrap(), *bytes);
                let (j, r) = reopen(&dir, options.clone())
                    .unwrap_or_else(|e| panic!("{variant} at {cut}: {e}"));
                assert_eq!(r.receipts.len(), 5, "{variant} at {cut}");
                assert_eq!(
                    r.interrupted().count(),
                    1,
                    "{variant} at {cut}: the last completion is gone"
                );
                assert!(r.receipts[..4].iter().all(|r| r.completion.is_some()));
                match (&r.cut_tail, variant, cut == last) {
                    (None, "truncated", true) => {}
                    (None, "zeroed", _) if cut == last => {}
                    (Some(t), _, _) => {
                        assert_eq!(t.offset, last, "{variant} at {cut}");
                        assert!(t.bytes > 0);
                    }
                    (None, _, _) => panic!("{variant} at {cut}: no tail was cut"),
                }
                // The journal goes on from the cut, and the next open finds no tail.
                let k = key(4);
                j.append(&completed(&k, b"again", 3))
                    .unwrap()
                    .wait()
                    .unwrap();
                drop(j);
                let (_j, r) = reopen(&dir, options.clone()).unwrap();
                assert_eq!(r.cut_tail, None, "{variant} at {cut}");
                assert_eq!(r.interrupted().count(), 0);
            }
        }
    }
}

#[test]
fn a_flipped_byte_before_the_tail_stops_the_open_naming_the_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let j = fresh(&src, no_prealloc());
    receipts(&j, 0..3);
    let mid_start = j.stats().bytes;
    // Two blocks in the middle: receipt 3's begin and its completion.
    receipts(&j, 3..4);
    let mid_end = j.stats().bytes;
    receipts(&j, 4..6);
    drop(j);
    let whole = std::fs::read(src.join(LOG_FILE)).unwrap();
    let dir = tmp.path().join("flipped");
    for at in mid_start..mid_end {
        let mut bytes = whole.clone();
        bytes[at as usize] ^= 0x20;
        let _ = std::fs::remove_dir_all(&dir);
        journal_of(&dir, &bytes);
        let e = Journal::open(&dir, no_prealloc()).unwrap_err();
        let msg = e.to_string();
        match &e {
            Error::Corrupt { path, offset, .. } => {
                assert_eq!(path, &dir.join(LOG_FILE));
                assert!(
                    (mid_start..mid_end).contains(offset),
                    "flip at {at}: reported offset {offset}"
                );
            }
            other => panic!("flip at {at}: {other}"),
        }
        assert!(
            msg.contains(&dir.join(LOG_FILE).display().to_string()),
            "{msg}"
        );
        assert!(msg.contains("byte offset"), "{msg}");
        // Nothing was changed, and check says the same.
        assert_eq!(std::fs::read(dir.join(LOG_FILE)).unwrap(), bytes);
        assert!(matches!(check(&dir), Err(Error::Corrupt { .. })));
    }
}

#[test]
fn another_format_version_is_refused_saying_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    drop(fresh(&src, Options::default()));
    let whole = std::fs::read(src.join(LOG_FILE)).unwrap();
    for (version, advice) in [(0, "older polaris"), (FORMAT_VERSION + 1, "newer polaris")] {
        let dir = tmp.path().join(format!("v{version}"));
        let mut bytes = whole.clone();
        bytes[..format::HEADER_LEN].copy_from_slice(&format::header(version));
        journal_of(&dir, &bytes);
        let e = Journal::open(&dir, Options::default()).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Version { found, .. } if found == version),
            "{msg}"
        );
        assert!(
            msg.contains(&dir.join(LOG_FILE).display().to_string()),
            "{msg}"
        );
        assert!(msg.contains(&format!("format version {version}")), "{msg}");
        assert!(msg.contains(advice), "{msg}");
        assert!(matches!(check(&dir), Err(Error::Version { .. })));
        assert_eq!(std::fs::read(dir.join(LOG_FILE)).unwrap(), bytes);
    }
    let dir = tmp.path().join("foreign");
    journal_of(&dir, b"{\"not\":\"a journal\"}\n");
    let msg = Journal::open(&dir, Options::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("is not a polaris journal"), "{msg}");
}

#[test]
fn records_that_contradict_each_other_are_refused_not_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let j = fresh(tmp.path(), Options::default());
    receipts(&j, 0..2);
    let k = key(0);
    // The host never does this; the journal refuses to guess which record is right.
    j.append(&completed(&k, b"again", 5))
        .unwrap()
        .wait()
        .unwrap();
    drop(j);
    let e = Journal::open(tmp.path(), Options::default()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Inconsistent { .. }), "{msg}");
    assert!(msg.contains("completes twice"), "{msg}");
}

#[test]
fn a_receipt_begun_again_after_it_completed_is_refused_naming_the_second_begin() {
    let tmp = tempfile::tempdir().unwrap();
    let j = fresh(tmp.path(), Options::default());
    receipts(&j, 0..3);
    let k = key(1);
    let req = request(1);
    let second = j.stats().bytes;
    // The host never does this: the repeat is found only once every receipt was read, and
    // the journal is read again to name where it is.
    j.append(&begun(&k, &req, 9)).unwrap().wait().unwrap();
    receipts(&j, 3..5);
    drop(j);
    for e in [
        Journal::open(tmp.path(), Options::default()).unwrap_err(),
        check(tmp.path()).unwrap_err(),
    ] {
        let msg = e.to_string();
        let Error::Inconsistent { offset, what, .. } = e else {
            panic!("{msg}")
        };
        assert!(what.contains("begins twice"), "{msg}");
        assert!(what.contains(&k.to_string()), "{msg}");
        assert_eq!(offset, second + format::BLOCK_HEADER_LEN as u64, "{msg}");
    }
}

/// The journal of `journal_with_last_block` with its last block (receipt 4's completion)
/// sealed again as the writer seals a write made while the one before it was unfinished.
fn with_last_block_overlapped(whole: &[u8], last: u64, end: u64) -> Vec<u8> {
    let mut bytes = whole[..end as usize].to_vec();
    format::seal_block(last, &mut bytes[last as usize..], true);
    bytes
}

/// Where the block before the last one starts (receipt 4's begin).
fn block_before(dir: &Path, last: u64) -> u64 {
    let file = std::fs::File::open(dir.join(LOG_FILE)).unwrap();
    let mut starts = Vec::new();
    scan::scan(
        &dir.join(LOG_FILE),
        &file,
        format::HEADER_LEN as u64,
        last,
        |offset, _| {
            starts.push(offset);
            Ok(())
        },
    )
    .unwrap();
    *starts.last().unwrap()
}

#[test]
fn two_unfinished_writes_a_torn_one_then_a_whole_later_one_are_cut_together_at_every_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let (last, end) = journal_with_last_block(&src, 5, no_prealloc());
    let first = block_before(&src, last);
    let whole = std::fs::read(src.join(LOG_FILE)).unwrap();
    let overlapped = with_last_block_overlapped(&whole, last, end);
    let dir = tmp.path().join("torn");
    // The earlier write (receipt 4's begin) torn from every offset on — zeros where its pages
    // never reached the disk — while the later one (its completion) reached it whole.
    for cut in first..last {
        let mut bytes = overlapped.clone();
        bytes[cut as usize..last as usize].fill(0);
        bytes.extend_from_slice(&[0; 4096]);
        let _ = std::fs::remove_dir_all(&dir);
        journal_of(&dir, &bytes);
        let report = check(&dir).unwrap_or_else(|e| panic!("check, torn at {cut}: {e}"));
        assert_eq!(report.tail.as_ref().map(|t| t.offset), Some(first));
        let (j, r) = reopen(&dir, no_prealloc()).unwrap_or_else(|e| panic!("torn at {cut}: {e}"));
        let tail = r
            .cut_tail
            .clone()
            .expect("the two unfinished writes are cut");
        assert_eq!(tail.offset, first, "torn at {cut}");
        // Receipt 4 was never acknowledged: its begin and completion are both gone.
        assert_eq!(r.receipts.len(), 4, "torn at {cut}");
        assert!(r.receipts.iter().all(|r| r.completion.is_some()));
        assert_eq!(
            std::fs::metadata(dir.join(LOG_FILE)).unwrap().len(),
            first,
            "the file is cut where the torn write began"
        );
        j.append(&begun(&key(9), &request(9), 5))
            .unwrap()
            .wait()
            .unwrap();
        drop(j);
        let (_j, r) = reopen(&dir, no_prealloc()).unwrap();
        assert_eq!(r.cut_tail, None, "torn at {cut}");
        assert_eq!(r.receipts.len(), 5);
    }
}

#[test]
fn a_whole_block_after_a_bad_one_is_corruption_unless_it_was_one_unfinished_write_of_two() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let (last, end) = journal_with_last_block(&src, 5, no_prealloc());
    let first = block_before(&src, last);
    let whole = std::fs::read(src.join(LOG_FILE)).unwrap();
    let dir = tmp.path().join("bad");
    let refused = |bytes: &[u8], what: &str| {
        let _ = std::fs::remove_dir_all(&dir);
        journal_of(&dir, bytes);
        for e in [
            check(&dir).map(drop).unwrap_err(),
            Journal::open(&dir, no_prealloc()).map(drop).unwrap_err(),
        ] {
            match &e {
                Error::Corrupt { offset, .. } => assert_eq!(*offset, first, "{what}: {e}"),
                other => panic!("{what}: {other}"),
            }
        }
        assert_eq!(std::fs::read(dir.join(LOG_FILE)).unwrap(), bytes, "{what}");
    };
    let mid = (first + last) / 2;
    // The later block was written after the earlier one was durable: the earlier one's damage
    // is not a torn write.
    let mut plain = whole[..end as usize].to_vec();
    plain[mid as usize..last as usize].fill(0);
    refused(&plain, "an unmarked block after a bad one");
    // Two marked blocks after a bad one: more writes than can be unfinished at once.
    let j = fresh(&tmp.path().join("three"), no_prealloc());
    receipts(&j, 0..3);
    let a = j.stats().bytes;
    receipts(&j, 3..4);
    let b = j.stats().bytes;
    drop(j);
    let mut three = std::fs::read(tmp.path().join("three").join(LOG_FILE)).unwrap();
    let c = block_before(&tmp.path().join("three"), b);
    assert!(a < c && c < b);
    // Receipt 3's begin (a..c) is bad; its completion and a block appended after it are
    // marked overlapped and whole.
    let mut extra = vec![0u8; format::BLOCK_HEADER_LEN];
    extra.extend_from_slice(&three[c as usize + format::BLOCK_HEADER_LEN..b as usize]);
    three.truncate(b as usize);
    three.extend_from_slice(&extra);
    format::seal_block(c, &mut three[c as usize..b as usize], true);
    format::seal_block(b, &mut three[b as usize..], true);
    three[(a as usize + c as usize) / 2..c as usize].fill(0);
    let _ = std::fs::remove_dir_all(&dir);
    journal_of(&dir, &three);
    match Journal::open(&dir, no_prealloc()).map(drop).unwrap_err() {
        Error::Corrupt { offset, what, .. } => {
            assert_eq!(offset, a);
            assert!(what.contains("more valid blocks"), "{what}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_version_1_journal_is_read_as_it_is_and_its_header_upgraded_before_anything_is_appended() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("v1");
    let j = fresh(&dir, no_prealloc());
    receipts(&j, 0..3);
    drop(j);
    // Written one block at a time, nothing is marked overlapped: the bytes of a version 1
    // journal, with its header.
    let mut bytes = std::fs::read(dir.join(LOG_FILE)).unwrap();
    bytes[..format::HEADER_LEN].copy_from_slice(&format::header(format::READS_VERSION));
    std::fs::write(dir.join(LOG_FILE), &bytes).unwrap();
    // `check` reads it and changes nothing.
    let report = check(&dir).unwrap();
    assert_eq!(report.tail, None);
    assert_eq!(std::fs::read(dir.join(LOG_FILE)).unwrap(), bytes);
    let (j, r) = reopen(&dir, no_prealloc()).unwrap();
    assert_eq!(r.receipts.len(), 3);
    assert!(r.receipts.iter().all(|r| r.completion.is_some()));
    let upgraded = std::fs::read(dir.join(LOG_FILE)).unwrap();
    assert_eq!(
        format::check_header(&upgraded[..format::HEADER_LEN]),
        format::HeaderCheck::Ok
    );
    assert_eq!(upgraded[format::HEADER_LEN..], bytes[format::HEADER_LEN..]);
    receipts(&j, 3..4);
    drop(j);
    let (_j, r) = reopen(&dir, no_prealloc()).unwrap();
    assert_eq!(r.receipts.len(), 4);
}
