//! Properties of the whole host: any frame gets one well-formed reply, and the direct path
//! answers exactly as the general one.

use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::executor::FixtureExecutor;
use crate::protocol::{parse_envelope, ErrorCode};
use proptest::prelude::*;

fn frame_strategy() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("task.start".to_owned()),
        Just("page.fill".to_owned()),
        Just("page.click".to_owned()),
        Just("page.press".to_owned()),
        Just("page.read".to_owned()),
        Just("task.finish".to_owned()),
        Just("task.stop".to_owned()),
        Just("task.status".to_owned()),
        Just("task.resume".to_owned()),
        Just("task.verifyOutcome".to_owned()),
        Just("run.status".to_owned()),
        Just("receipt.status".to_owned()),
        Just("host.hello".to_owned()),
        "[a-z.]{0,12}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[#a-zA-Z0-9 ._:-]{0,20}".prop_map(Value::String),
        Just(json!("#title")),
        Just(json!("#submit")),
        Just(json!("Enter")),
    ];
    let value = leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("taskId".to_owned()),
                    Just("target".to_owned()),
                    Just("value".to_owned()),
                    Just("title".to_owned()),
                    Just("expect".to_owned()),
                    Just("equals".to_owned()),
                    Just("contains".to_owned()),
                    Just("key".to_owned()),
                    Just("fixture".to_owned()),
                    Just("submitDelayMs".to_owned()),
                    Just("reason".to_owned()),
                    Just("requestId".to_owned()),
                    Just("runId".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    let id = prop_oneof![
        Just(json!("same-id")),
        "[A-Za-z0-9._:-]{1,10}".prop_map(Value::String),
        Just(json!(7)),
        Just(Value::Null),
    ];
    prop_oneof![
        8 => (id, method, value).prop_map(|(id, method, params)| {
            serde_json::to_vec(&json!({"id": id, "method": method, "params": params})).unwrap()
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

/// How every frame was handled before the direct path: envelope and params as a `Value`.
fn handle_frame_general(host: &Host, frame: &[u8]) -> Handled {
    match parse_envelope(frame) {
        Ok(env) => host.handle(&env.id, &env.method, &env.params),
        Err(e) => reject(e.id.as_deref(), host.run_id(), e.error),
    }
}

/// Hides what differs between two runs given the same frames: run and task IDs (UUIDs) and
/// wall-clock timestamps.
fn mask_run_facts(text: &str) -> String {
    fn shaped(window: &[u8], shape: &[u8]) -> bool {
        window.len() == shape.len()
            && window.iter().zip(shape).all(|(b, s)| match s {
                b'd' => b.is_ascii_digit(),
                b'h' => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
                _ => b == s,
            })
    }
    const TIME: &[u8] = b"dddd-dd-ddTdd:dd:dd.dddZ";
    const UUID: &[u8] = b"hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh";
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if shaped(&rest[..TIME.len().min(rest.len())], TIME) {
            out.extend_from_slice(b"<time>");
            i += TIME.len();
        } else if shaped(&rest[..UUID.len().min(rest.len())], UUID) {
            out.extend_from_slice(b"<uuid>");
            i += UUID.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Runs `frames` through a fresh host (after one task.start whose task the frames may
/// name), with the direct path or the general one; returns every reply up to its `meta`,
/// and the stored fingerprints, with run facts masked.
fn run_frames(frames: &[Vec<u8>], direct: bool) -> (Vec<String>, Vec<(String, String)>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let host = Host::new(HostConfig::default(), Arc::new(FixtureExecutor::new()));
        let start = match host.handle("setup", "task.start", &json!({"title": "t"})) {
            Handled::Ready(line) => line,
            Handled::Replay(replay) => replay.line(host.run_id()),
            Handled::Later(fut) => fut.await,
            Handled::Joined(_) => Vec::new(),
        };
        let start: Value = serde_json::from_slice(&start).unwrap();
        let task = start["result"]["taskId"].as_str().unwrap().to_owned();
        let mut replies = Vec::new();
        for frame in frames {
            let frame = String::from_utf8_lossy(frame)
                .replace(crate::protocol::test_frames::TASK, &task)
                .into_bytes();
            let handled = if direct {
                host.handle_frame(&frame)
            } else {
                handle_frame_general(&host, &frame)
            };
            let line = match handled {
                Handled::Ready(line) => line,
                Handled::Replay(replay) => replay.line(host.run_id()),
                Handled::Later(fut) => fut.await,
                Handled::Joined(_) => Vec::new(),
            };
            let line = String::from_utf8(line).unwrap();
            let body = line.split(",\"meta\":").next().unwrap();
            replies.push(mask_run_facts(body));
        }
        let st = host.lock();
        let fingerprints = st
            .book
            .iter()
            .map(|(k, r)| (k.to_string(), mask_run_facts(&r.request_text())))
            .collect();
        (replies, fingerprints)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Frame for frame, the host answers the same whether the direct path or only the
    /// general one reads the frames, and keeps the same fingerprints.
    #[test]
    fn the_direct_path_changes_no_reply(
        frames in proptest::collection::vec(crate::protocol::test_frames::request_frame(), 1..16)
    ) {
        let (direct, direct_book) = run_frames(&frames, true);
        let (general, general_book) = run_frames(&frames, false);
        prop_assert_eq!(direct, general);
        prop_assert_eq!(direct_book, general_book);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// Whatever arrives, the host answers with one well-formed reply line and never panics.
    #[test]
    fn any_frame_gets_one_well_formed_reply(frames in proptest::collection::vec(frame_strategy(), 1..12)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        rt.block_on(async {
            let host = Host::new(HostConfig::default(), Arc::new(FixtureExecutor::new()));
            for frame in frames {
                let line = match host.handle_frame(&frame) {
                    Handled::Ready(line) => line,
                    Handled::Replay(replay) => replay.line(host.run_id()),
                    Handled::Later(fut) => fut.await,
                    Handled::Joined(_) => Vec::new(),
                };
                assert_eq!(line.last(), Some(&b'\n'));
                assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
                let reply: Value = serde_json::from_slice(&line).expect("a JSON reply");
                assert!(reply["ok"].is_boolean());
                if reply["ok"] == false {
                    assert_eq!(reply["error"]["automaticReplay"], false);
                    let code = reply["error"]["code"].as_str().unwrap();
                    assert!(code.parse::<ErrorCode>().is_ok(), "{code}");
                }
            }
            let st = host.lock();
            assert!(st.book.used() <= st.book.capacity());
        });
    }
}
