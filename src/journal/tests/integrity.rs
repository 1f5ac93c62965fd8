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
