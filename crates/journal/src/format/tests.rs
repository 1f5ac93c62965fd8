//! Records round-trip through [`encode`] and [`Reader::record`]; arbitrary bytes never panic.

use super::*;
use crate::book::RequestKey;

fn runs(r: &str) -> Option<u32> {
    (r == "run-a").then_some(0)
}

fn round_trip(rec: &Record<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&mut out, rec, runs).unwrap();
    let mut r = Reader::new(&out);
    let (kind, len, _) = r.record().unwrap();
    assert_eq!(kind, rec.kind());
    assert_eq!(len, out.len());
    assert!(r.is_empty());
    out
}

#[test]
fn records_round_trip_and_length_prefixes_of_every_size_fit() {
    let key = RequestKey::new("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d");
    for n in [
        0usize, 1, 100, 126, 127, 128, 16_000, 16_383, 16_384, 3_000_000,
    ] {
        let reply = vec![b'x'; n];
        let c = Completed {
            request_id: &key,
            reply: &reply,
            at: 1_700_000_000_123,
        };
        let bytes = round_trip(&Record::ReceiptCompleted(c.clone()));
        match Reader::new(&bytes).record().unwrap().2 {
            Decoded::ReceiptCompleted {
                request_id,
                reply,
                at,
            } => {
                assert_eq!(request_id.key(), key);
                assert_eq!(reply.len(), n);
                assert_eq!(at, c.at);
            }
            other => panic!("{other:?}"),
        }
    }
    let text = RequestKey::new("my-own:id.1");
    let b = Begun {
        request_id: &text,
        run_id: "run-a",
        method: "page.fill",
        task_id: Some("3f1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"),
        // In the pieces a receipt keeps it in: written as one text.
        request: RequestPieces([
            "{\"method\":\"",
            "page.fill",
            "\",\"params\":",
            "{}",
            "}",
            "",
            "",
            "",
            "",
            "",
            "",
        ]),
        at: -5,
    };
    let bytes = round_trip(&Record::ReceiptBegun(b.clone()));
    let Decoded::ReceiptBegun(d) = Reader::new(&bytes).record().unwrap().2 else {
        panic!()
    };
    assert_eq!(d.request_id, IdRef::Text("my-own:id.1"));
    assert_eq!(
        d.task_id.unwrap().to_string(),
        "3f1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"
    );
    assert_eq!(
        (d.at, d.method, d.request, d.run),
        (-5, b.method, r#"{"method":"page.fill","params":{}}"#, 0)
    );
    let ids = [
        ClearedId {
            request_id: key.clone(),
            digest: [7; 16],
        },
        ClearedId {
            request_id: text.clone(),
            digest: [9; 16],
        },
    ];
    let bytes = round_trip(&Record::ReceiptsCleared(Cleared {
        at: 1,
        reason: "done",
        operator: "ops",
        ids: &ids,
    }));
    let Decoded::ReceiptsCleared {
        ids: raw, count, ..
    } = Reader::new(&bytes).record().unwrap().2
    else {
        panic!()
    };
    assert_eq!(count, 2);
    let back: Vec<_> = cleared_ids(raw).map(|(i, d)| (i.key(), d)).collect();
    assert_eq!(back, vec![(key.clone(), [7; 16]), (text.clone(), [9; 16])]);
    round_trip(&Record::Task(TaskRecord {
        event: TaskEvent::Closed,
        task_id: "t",
        run_id: "run-a",
        created_at: 1,
        at: 3,
        title: "ttl",
        state: "stopped",
        pending: b"[1]",
        detail: b"",
        closed_at: Some(3),
    }));
    round_trip(&Record::OutcomeAcknowledged(Acknowledged {
        request_id: &key,
        reason: "checked by hand",
        operator: "me",
        at: 4,
    }));
    let mut out = Vec::new();
    assert_eq!(
        encode(
            &mut out,
            &Record::ReceiptBegun(Begun {
                run_id: "nope",
                ..b
            }),
            runs
        ),
        Err(UnknownRun("nope".into()))
    );
}

proptest::proptest! {
    /// A block whose checksum matched but whose bytes are nonsense (a bug, or a writer of
    /// another format under the same version) is an error, never a panic.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        let mut r = Reader::new(&bytes);
        while !r.is_empty() {
            match r.record() {
                Ok((_, len, Decoded::ReceiptsCleared { ids, count, .. })) => {
                    proptest::prop_assert!(len > 0);
                    proptest::prop_assert_eq!(cleared_ids(ids).count(), count);
                }
                Ok((_, len, _)) => proptest::prop_assert!(len > 0),
                Err(_) => break,
            }
        }
    }
}
