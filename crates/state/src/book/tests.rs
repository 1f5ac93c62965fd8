//! The book's rules, example by example and by property.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn done(code: bool) -> Arc<Outcome> {
    if code {
        Outcome::err(&crate::protocol::ErrorBody::new(
            crate::protocol::ErrorCode::ActionFailed,
            "x",
        ))
    } else {
        Outcome::ok(&serde_json::json!({}))
    }
}

#[test]
fn a_full_book_refuses_and_keeps_everything() {
    let mut b = Book::new(2, 10);
    for i in 0..2 {
        b.insert_running(
            RequestKey::new(&format!("r{i}")),
            "{}".into(),
            Method::TaskStart,
            None,
            0,
        )
        .unwrap();
    }
    assert_eq!(
        b.insert_running(
            RequestKey::new("r9"),
            "{}".into(),
            Method::TaskStart,
            None,
            0
        )
        .unwrap_err(),
        BookFull {
            limit: Limit::Count,
            capacity: 2,
            used: 2,
            used_bytes: 2 * (RECEIPT_OVERHEAD_BYTES + 2 + 2 + reply_reservation(2)),
            max_bytes: DEFAULT_MAX_BOOK_BYTES,
        }
    );
    assert!(b.get(&RequestKey::new("r0")).is_some());
    assert!(b.get(&RequestKey::new("r1")).is_some());
}

#[test]
fn bytes_bound_the_book_and_clearing_gives_them_back() {
    let request = |n: usize| -> Box<str> { "x".repeat(n).into() };
    let key = |i: usize| RequestKey::new(&uuid::Uuid::from_u128(i as u128).to_string());
    let reply = done(false).body.len();
    // While running, a receipt holds room for its reply; once done, the reply itself.
    let running = RECEIPT_OVERHEAD_BYTES + 1000 + reply_reservation(1000);
    let completed = RECEIPT_OVERHEAD_BYTES + 1000 + reply;
    let max = 2 * completed + running + 10;
    let mut b = Book::new(100, 100).with_max_bytes(max);
    for i in 0..3 {
        b.insert_running(key(i), request(1000).into(), Method::PageFill, None, 0)
            .unwrap();
        assert_eq!(b.used_bytes(), i * completed + running);
        b.complete(&key(i), done(false), 1);
        assert_eq!(b.used_bytes(), (i + 1) * completed);
        if i == 2 {
            break;
        }
    }
    let full = b
        .insert_running(key(9), request(1000).into(), Method::PageFill, None, 0)
        .unwrap_err();
    assert_eq!(full.limit, Limit::Bytes);
    assert_eq!((full.used_bytes, full.max_bytes), (3 * completed, max));
    assert!(b.used_bytes() <= max);
    // A small request still fits.
    b.insert_running(key(3), request(0).into(), Method::PageFill, None, 0)
        .unwrap_or_else(|e| panic!("{e:?}"));
    b.complete(&key(3), done(false), 1);
    assert!(b.used_bytes() <= max);
    let keys: Vec<RequestKey> = (0..4).map(key).collect();
    assert_eq!(b.clear(&keys, 2, "why".into()), Ok(4));
    assert_eq!(b.used_bytes(), 0);
    assert_eq!(b.counts().used_bytes, 0);
    assert_eq!(b.counts().max_bytes, max as u64);
}

#[test]
fn the_per_receipt_overhead_covers_the_receipt_table() {
    // The table entry (key, receipt), its index slot at the index's worst load (3 in 8 just
    // after it grew), the reply's shared allocation, and allocator rounding of the two
    // strings a receipt owns.
    let entry = std::mem::size_of::<(RequestKey, Receipt)>();
    let index = (8 * std::mem::size_of::<u64>()).div_ceil(3);
    // The reply's one allocation: its reference counts and error code before the body.
    let reply = 2 * std::mem::size_of::<usize>()
        + std::mem::size_of::<Option<crate::protocol::ErrorCode>>();
    let rounding = 2 * 16;
    let total = entry + index + reply + rounding;
    assert!(total <= RECEIPT_OVERHEAD_BYTES, "{total} bytes per receipt");
}

#[test]
fn a_receipt_table_entry_stays_within_120_bytes() {
    // Every receipt ever created keeps its entry for the life of the run: 120 bytes is key (24)
    // and receipt (96), with a recovered receipt's run held as an index, not as its ID. The
    // reply slot's third state (a fill's reply written again from its request, not kept)
    // costs the slot a tag, 8 bytes, where a kept fill reply costs ~100.
    let entry = std::mem::size_of::<(RequestKey, Receipt)>();
    assert!(entry <= 120, "{entry} bytes per table entry");
}

#[test]
fn a_recovered_receipt_keeps_the_run_that_created_it() {
    let key = |i: u32| RequestKey::new(&format!("r{i}"));
    let mut b = Book::new(10, 10);
    let (earlier, other): (Arc<str>, Arc<str>) = ("run-1".into(), "run-2".into());
    b.restore(
        key(0),
        "{}".into(),
        Method::PageFill,
        None,
        0,
        done(false),
        1,
        Some(earlier.clone()),
    );
    b.restore(
        key(1),
        "{}".into(),
        Method::PageFill,
        None,
        0,
        done(false),
        1,
        Some(other.clone()),
    );
    b.restore(
        key(2),
        "{}".into(),
        Method::PageFill,
        None,
        0,
        done(false),
        1,
        Some("run-1".into()),
    );
    b.restore(
        key(3),
        "{}".into(),
        Method::PageFill,
        None,
        0,
        done(false),
        1,
        None,
    );
    b.insert_running(key(4), "{}".into(), Method::PageFill, None, 2)
        .unwrap();
    let run = |i| {
        b.get(&key(i))
            .and_then(|r| b.run_of(r))
            .map(|r| r.to_string())
    };
    assert_eq!(run(0).as_deref(), Some("run-1"));
    assert_eq!(run(1).as_deref(), Some("run-2"));
    assert_eq!(run(2).as_deref(), Some("run-1"));
    assert_eq!((run(3), run(4)), (None, None));
    assert_eq!(
        b.runs.len(),
        2,
        "one entry per earlier run, however many receipts"
    );
}

#[test]
fn clearing_is_all_or_nothing_against_tombstone_capacity() {
    let mut b = Book::new(10, 1);
    for i in 0..2 {
        let k = RequestKey::new(&format!("r{i}"));
        b.insert_running(k.clone(), "{}".into(), Method::TaskStart, None, 0)
            .unwrap();
        b.complete(&k, done(false), 1);
    }
    let keys = [RequestKey::new("r0"), RequestKey::new("r1")];
    assert!(matches!(
        b.clear(&keys, 5, "why".into()),
        Err(ClearError::TombstonesFull { .. })
    ));
    assert_eq!(b.used(), 2);
    assert_eq!(b.clear(&keys[..1], 5, "why".into()), Ok(1));
    assert_eq!(b.used(), 1);
    assert!(
        matches!(b.entry(&keys[0]), Entry::Tombstone(t, batch) if t.digest == digest("{}") && batch.at == 5)
    );
}

#[test]
fn tombstones_of_every_clear_are_found_by_uuid_and_by_text() {
    let mut b = Book::new(1000, 1000);
    let ids: Vec<String> = (0..300u32)
        .map(|i| {
            if i.is_multiple_of(3) {
                format!("text-{i}")
            } else {
                uuid::Uuid::new_v4().to_string()
            }
        })
        .collect();
    for id in &ids {
        let k = RequestKey::new(id);
        b.insert_running(
            k.clone(),
            format!("{{\"r\":\"{id}\"}}").into(),
            Method::PageFill,
            None,
            0,
        )
        .unwrap();
        b.complete(&k, done(false), 1);
    }
    // Three clears in an order unrelated to the keys' order.
    let keys: Vec<RequestKey> = ids.iter().map(|i| RequestKey::new(i)).collect();
    for (n, chunk) in keys.chunks(100).rev().enumerate() {
        assert_eq!(
            b.clear(chunk, 10 + n as i64, format!("clear {n}").into()),
            Ok(100)
        );
    }
    assert_eq!(b.used(), 0);
    assert_eq!(b.tombstones(), 300);
    for (i, id) in ids.iter().enumerate() {
        let (t, batch) = b
            .tombstone(&RequestKey::new(id))
            .expect("every cleared id has a tombstone");
        assert_eq!(t.digest, digest(&format!("{{\"r\":\"{id}\"}}")));
        assert_eq!(
            batch.at,
            10 + (2 - (i / 100)) as i64,
            "{id} keeps the batch that cleared it"
        );
    }
    assert!(b
        .tombstone(&RequestKey::new(&uuid::Uuid::new_v4().to_string()))
        .is_none());
    assert!(b.tombstone(&RequestKey::new("text-1")).is_none());
}

#[test]
fn a_clear_in_steps_keeps_order_while_receipts_arrive() {
    let mut b = Book::new(10_000, 10_000);
    let key = |i: usize| {
        if i.is_multiple_of(5) {
            RequestKey::new(&format!("text-{i}"))
        } else {
            RequestKey::new(&uuid::Uuid::from_u128(i as u128 + 1).to_string())
        }
    };
    let add = |b: &mut Book, i: usize| {
        b.insert_running(
            key(i),
            format!("{{\"n\":{i}}}").into(),
            Method::PageFill,
            None,
            0,
        )
        .unwrap();
        b.complete(&key(i), done(i.is_multiple_of(2)), 1);
    };
    for i in 0..1000 {
        add(&mut b, i);
    }
    let bytes = |b: &Book, keys: &[usize]| -> usize {
        keys.iter()
            .map(|&i| {
                let r = b.get(&key(i)).unwrap();
                receipt_bytes(&key(i), r.request_len(), r.reply_len())
            })
            .sum()
    };
    // Every third goes; one new receipt arrives after each step.
    let cleared: Vec<usize> = (0..1000).filter(|i| i % 3 == 1).collect();
    let mut stay: Vec<usize> = (0..1000).filter(|i| i % 3 != 1).collect();
    let stay_bytes = bytes(&b, &stay);
    let first = b.position(&key(cleared[0])).unwrap();
    let ids = cleared
        .iter()
        .map(|&i| (key(i), digest(&format!("{{\"n\":{i}}}"))));
    let run = Arc::new(TombstoneRun::new(ids, b.next_batch()));
    let mut c = b
        .begin_clear(
            first,
            run,
            ClearBatch {
                at: 7,
                reason: "r".into(),
            },
        )
        .unwrap();
    let mut next = 1000;
    let mut freed = Freed::default();
    while !b.clear_steps(&mut c, 7, &mut freed) {
        // Never vacant: each cleared ID is still a receipt or already a tombstone.
        for &i in &cleared {
            assert!(b.get(&key(i)).is_some() || b.tombstone(&key(i)).is_some());
        }
        if next < 1300 {
            add(&mut b, next);
            stay.push(next);
            next += 1;
        }
    }
    assert_eq!(c.removed(), cleared.len());
    assert_eq!(freed.receipts(), cleared.len());
    let order: Vec<RequestKey> = b.iter().map(|(k, _)| k.clone()).collect();
    let expected: Vec<RequestKey> = stay.iter().map(|&i| key(i)).collect();
    assert!(order == expected, "the receipts that stay keep their order");
    assert_eq!(
        b.used_bytes(),
        stay_bytes + bytes(&b, &stay[stay.len() - (next - 1000)..])
    );
    assert!(next > 1100, "receipts arrived during the clear");
    for &i in &cleared {
        let (t, batch) = b.tombstone(&key(i)).expect("a tombstone");
        assert_eq!(t.digest, digest(&format!("{{\"n\":{i}}}")));
        assert_eq!(batch.at, 7);
        assert!(b.get(&key(i)).is_none());
    }
    for (p, &i) in stay.iter().enumerate() {
        assert_eq!(b.position(&key(i)), Some(p));
    }
}

/// A clear that leaves the table mostly empty asks for the fresh table the receipts that stay
/// move to (the host makes it off its lock: reserving and faulting in room for a full book is
/// megabytes of fresh pages), asks once, and moves them only into the table it is given.
#[test]
fn a_large_clear_moves_what_stays_into_the_table_it_is_given() {
    let mut b = Book::new(10_000, 10_000);
    let key = |i: usize| RequestKey::new(&uuid::Uuid::from_u128(i as u128 + 1).to_string());
    for i in 0..3000 {
        b.insert_running(
            key(i),
            format!("{{\"n\":{i}}}").into(),
            Method::PageFill,
            None,
            0,
        )
        .unwrap();
        b.complete(&key(i), done(false), 1);
    }
    let stay: Vec<usize> = (0..3000).filter(|i| i % 10 == 0).collect();
    let ids = (0..3000)
        .filter(|i| i % 10 != 0)
        .map(|i| (key(i), digest(&format!("{{\"n\":{i}}}"))));
    let run = Arc::new(TombstoneRun::new(ids, b.next_batch()));
    let mut c = b
        .begin_clear(
            0,
            run,
            ClearBatch {
                at: 7,
                reason: "r".into(),
            },
        )
        .unwrap();
    let before = b.receipts.capacity();
    let (mut asked, mut given) = (0, None);
    let mut freed = Freed::default();
    loop {
        let done = b.clear_steps(&mut c, 64, &mut freed);
        if let Some(spare) = c.wanted_table() {
            asked += 1;
            assert_eq!(
                b.receipts.capacity(),
                before,
                "nothing moves before the table is given"
            );
            let mut table = spare.make();
            // Room no table the book would make has, to tell the given one apart.
            table.try_reserve_total(before + 2345).unwrap();
            given = Some(table.capacity());
            c.give_table(table);
        }
        if done {
            break;
        }
    }
    assert_eq!(asked, 1, "the table is asked for once");
    assert_eq!(
        Some(b.receipts.capacity()),
        given,
        "moved into the given table"
    );
    assert_eq!(c.removed(), 2700);
    let order: Vec<RequestKey> = b.iter().map(|(k, _)| k.clone()).collect();
    let expected: Vec<RequestKey> = stay.iter().map(|&i| key(i)).collect();
    assert!(order == expected, "the receipts that stay keep their order");
}

#[test]
fn a_receipt_withdrawn_during_a_clear_moves_its_walk_with_it() {
    let key = |i: usize| RequestKey::new(&format!("r{i}"));
    for withdraw_after in [1, 30, 120, 250, 100_000] {
        let mut b = Book::new(1000, 1000);
        // r0..r199 completed, with running r1000 (early) and r1001 (late) among them.
        for i in 0..200 {
            b.insert_running(key(i), "{}".into(), Method::PageFill, None, 0)
                .unwrap();
            b.complete(&key(i), done(false), 1);
            if i == 10 || i == 150 {
                let r = 1000 + usize::from(i == 150);
                b.insert_running(key(r), "{}".into(), Method::PageFill, None, 0)
                    .unwrap();
            }
        }
        let cleared: Vec<usize> = (0..200).filter(|i| i % 2 == 0).collect();
        let ids = cleared.iter().map(|&i| (key(i), digest("{}")));
        let run = Arc::new(TombstoneRun::new(ids, b.next_batch()));
        let batch = ClearBatch {
            at: 1,
            reason: "r".into(),
        };
        let mut c = b.begin_clear(0, run, batch).unwrap();
        let mut freed = Freed::default();
        let (mut steps, mut withdrawn) = (0, false);
        while !b.clear_steps(&mut c, 1, &mut freed) {
            steps += 1;
            if steps == withdraw_after {
                withdrawn = true;
                assert!(b.withdraw(&key(1000)).is_none());
                assert!(b.withdraw(&key(1001)).is_none());
            }
        }
        let order: Vec<RequestKey> = b.iter().map(|(k, _)| k.clone()).collect();
        let mut expected: Vec<RequestKey> = Vec::new();
        for i in (0..200).filter(|i| i % 2 == 1) {
            if !withdrawn && (i == 11 || i == 151) {
                expected.push(key(1000 + usize::from(i == 151)));
            }
            expected.push(key(i));
        }
        assert!(order == expected, "withdrawn after {withdraw_after} steps");
        for &i in &cleared {
            assert!(b.get(&key(i)).is_none() && b.tombstone(&key(i)).is_some());
        }
    }
}

#[test]
fn many_clears_keep_few_tombstone_runs() {
    let mut b = Book::new(100_000, 100_000);
    let mut n = 0;
    for round in 0..300 {
        let keys: Vec<RequestKey> = (0..1 + round % 7)
            .map(|_| {
                n += 1;
                let k = RequestKey::new(&uuid::Uuid::new_v4().to_string());
                b.insert_running(k.clone(), "{}".into(), Method::TaskStart, None, 0)
                    .unwrap();
                b.complete(&k, done(false), 1);
                k
            })
            .collect();
        b.clear(&keys, round, "r".into()).unwrap();
        assert!(b.tombstone_runs() <= 16, "{} runs", b.tombstone_runs());
    }
    assert_eq!(b.tombstones(), n);
}

#[derive(Clone, Debug)]
enum Op {
    Submit { id: u8, content: u8 },
    Complete { id: u8 },
    Clear { id: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..24, 0u8..3).prop_map(|(id, content)| Op::Submit { id, content }),
        2 => (0u8..24).prop_map(|id| Op::Complete { id }),
        1 => (0u8..24).prop_map(|id| Op::Clear { id }),
    ]
}

proptest! {
    /// Never two executions per ID, never an eviction, `used ≤ capacity`.
    #[test]
    fn book_invariants(capacity in 1usize..16, ops in proptest::collection::vec(op(), 1..200)) {
        let mut book = Book::new(capacity, 8);
        let mut executions: HashMap<u8, u32> = HashMap::new();
        let mut ever_stored: std::collections::HashSet<u8> = Default::default();
        let mut cleared: std::collections::HashSet<u8> = Default::default();
        let mut senders = HashMap::new();
        for op in ops {
            match op {
                Op::Submit { id, content } => {
                    let key = RequestKey::new(&format!("id-{id}"));
                    let request: Box<str> = format!("{{\"c\":{content}}}").into();
                    match book.entry(&key) {
                        Entry::Receipt(r) => {
                            // Same or other content: never a second execution.
                            let _same = r.request_text() == *request;
                        }
                        Entry::Tombstone(..) => prop_assert!(cleared.contains(&id)),
                        Entry::Vacant(_) => {
                            prop_assert!(!cleared.contains(&id));
                            if let Ok(tx) = book.insert_running(key, request.into(), Method::PageFill, None, 0) {
                                *executions.entry(id).or_default() += 1;
                                ever_stored.insert(id);
                                senders.insert(id, tx);
                            }
                        }
                    }
                }
                Op::Complete { id } => {
                    let key = RequestKey::new(&format!("id-{id}"));
                    if senders.remove(&id).is_some() {
                        prop_assert!(book.complete(&key, done(id.is_multiple_of(2)), 1));
                    }
                }
                Op::Clear { id } => {
                    let key = RequestKey::new(&format!("id-{id}"));
                    let clearable = matches!(book.entry(&key), Entry::Receipt(r) if !r.is_running());
                    if clearable && book.clear(&[key], 2, "test".into()).is_ok() {
                        cleared.insert(id);
                    }
                }
            }
            prop_assert!(book.used() <= capacity);
            prop_assert!(executions.values().all(|n| *n == 1));
            // Nothing stored is ever lost: every ID is a receipt or a tombstone.
            for id in &ever_stored {
                let key = RequestKey::new(&format!("id-{id}"));
                prop_assert!(!matches!(book.entry(&key), Entry::Vacant(_)), "id-{} was evicted", id);
            }
            prop_assert_eq!(book.running(), senders.len());
        }
    }
}

#[test]
fn a_receipt_keeps_its_params_and_gives_its_whole_request_and_digest_back() {
    let text = crate::protocol::fingerprint(
        "page.fill",
        &serde_json::json!({"target": "#t", "taskId": "t", "value": "é \"q\""}),
    );
    let plain = crate::protocol::fingerprint(
        "page.fill",
        &serde_json::json!({"target": "#t", "taskId": "t", "value": "é q"}),
    );
    let mut b = Book::new(10, 10);
    for (i, stored) in [
        StoredRequest::from_text("page.fill", &text, Some("t")),
        // Text not of a fingerprint's shape is kept whole, and given back the same way.
        StoredRequest::from_text(
            "page.fill",
            "{\"params\":{},\"method\":\"page.fill\"}",
            Some("t"),
        ),
        // A plain fill of the receipt's task keeps its target and value alone.
        StoredRequest::from_text("page.fill", &plain, Some("t")),
    ]
    .into_iter()
    .enumerate()
    {
        let whole = stored.text("page.fill", Some("t"));
        let key = RequestKey::new(&format!("r{i}"));
        b.insert_running(key.clone(), stored, Method::PageFill, Some("t".into()), 0)
            .unwrap();
        let r = b.get(&key).unwrap();
        assert_eq!(r.request_text(), whole);
        assert_eq!(r.request_len(), whole.len());
        assert_eq!(r.request_pieces().concat(), whole);
        assert_eq!(
            r.digest(),
            digest(&whole),
            "a tombstone's digest is the text's"
        );
    }
    let r = b.get(&RequestKey::new("r0")).unwrap();
    assert_eq!(r.request_text(), text);
    assert!(text.len() - r.request.params().unwrap().len() >= 30);
    let r = b.get(&RequestKey::new("r2")).unwrap();
    assert_eq!(r.request_text(), plain);
    assert_eq!(r.request.plain_fill(), Some(("#t", "é q")));
    assert!(plain.len() - r.request.kept_len() >= 60);
}
