//! Properties of the whole host: any frame gets one well-formed reply, the direct path
//! answers exactly as the general one, and the fast path (pipelined batches) answers and
//! journals exactly as the reference path (`Host::handle`, frame by frame).

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

/// Hides when each pending outcome began (`"since":` epoch milliseconds): two runs of the
/// same frames block at different instants.
fn mask_since(text: &str) -> String {
    const KEY: &str = "\"since\":";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        out.push_str(&rest[..at + KEY.len()]);
        rest = rest[at + KEY.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push_str("<ms>");
    }
    out.push_str(rest);
    out
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

/// How the journal oracle hands a batch of frames to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// `Host::handle_frames`, the batch at once: what a connection does.
    Batched,
    /// `Host::handle_frames` with the fast path off (`HostConfig::fast_path`).
    BatchedOff,
    /// The reference path: each frame read by the general parser and handed to
    /// `Host::handle` (all of a batch before any reply is awaited, as a connection would).
    Reference,
}

/// What a run of the journal oracle leaves: every reply up to its `meta`, the book's
/// fingerprints, and what the journal recovers once the host is gone — receipts (request ID,
/// method, task, request text, reply, code) and tasks — with run facts masked.
#[derive(Debug, PartialEq)]
struct Journaled {
    replies: Vec<String>,
    fingerprints: Vec<(String, String)>,
    receipts: Vec<String>,
    tasks: Vec<String>,
}

/// A journal directory of its own, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("polaris-oracle-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn journal_options() -> crate::journal::Options {
    crate::journal::Options {
        preallocate: 0,
        ..Default::default()
    }
}

/// The reply lines of one batch's answers, one per frame: a `Joined` frame's line comes with
/// the answer it names, which resolves to its own line and those of the frames joined to it,
/// in order.
async fn batch_lines(host: &Host, answers: Vec<Handled>) -> Vec<Vec<u8>> {
    let joined: Vec<Option<usize>> = answers
        .iter()
        .map(|a| match a {
            Handled::Joined(i) => Some(*i),
            _ => None,
        })
        .collect();
    let mut lines = vec![Vec::new(); answers.len()];
    for (i, answer) in answers.into_iter().enumerate() {
        let bytes = match answer {
            Handled::Ready(line) => line,
            Handled::Replay(replay) => replay.line(host.run_id()),
            Handled::Later(fut) => fut.await,
            Handled::Joined(_) => continue,
        };
        let mut owners = std::iter::once(i).chain(
            joined
                .iter()
                .enumerate()
                .filter(|(_, j)| **j == Some(i))
                .map(|(k, _)| k),
        );
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            let owner = owners.next().expect("one line per frame");
            lines[owner] = line.to_vec();
        }
    }
    lines
}

/// Runs `frames` in batches of `sizes` (cycled) through a fresh host (after one task.start
/// whose task the frames may name), journaling to a directory of its own when `journaled`;
/// every batch's replies are awaited before the next batch is handed over.
fn run_journaled(frames: &[String], sizes: &[usize], path: Path, journaled: bool) -> Journaled {
    let dir = TempDir::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let (replies, fingerprints) = rt.block_on(async {
        let executor = Arc::new(FixtureExecutor::new());
        let config = HostConfig {
            fast_path: path != Path::BatchedOff,
            ..HostConfig::default()
        };
        let host = if journaled {
            let (journal, recovered) =
                crate::journal::Journal::open(&dir.0, journal_options()).unwrap();
            Host::with_journal(config, executor, journal, recovered).unwrap()
        } else {
            Host::new(config, executor)
        };
        let start = host.handle("setup", "task.start", &json!({"title": "t"}));
        let start = batch_lines(&host, vec![start]).await.remove(0);
        let start: Value = serde_json::from_slice(&start).unwrap();
        let task = start["result"]["taskId"].as_str().unwrap().to_owned();
        let frames: Vec<Vec<u8>> = frames
            .iter()
            .map(|f| {
                f.replace(crate::protocol::test_frames::TASK, &task)
                    .into_bytes()
            })
            .collect();
        let mut replies = Vec::new();
        let mut rest = &frames[..];
        for size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (batch, after) = rest.split_at((*size).clamp(1, rest.len()));
            rest = after;
            let mut answers = Vec::new();
            match path {
                Path::Batched | Path::BatchedOff => {
                    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                    let mut handed = 0;
                    while handed < refs.len() {
                        let before = answers.len();
                        host.handle_frames(&refs[handed..], usize::MAX, &mut answers);
                        handed += answers.len() - before;
                    }
                }
                Path::Reference => {
                    for frame in batch {
                        answers.push(handle_frame_general(&host, frame));
                    }
                }
            }
            for line in batch_lines(&host, answers).await {
                let line = String::from_utf8(line).unwrap();
                let body = line.split(",\"meta\":").next().unwrap();
                replies.push(mask_run_facts(&without_journal_stats(body)));
            }
        }
        host.wait_idle(std::time::Duration::from_secs(600)).await;
        let fingerprints = {
            let st = host.lock();
            st.book
                .iter()
                .map(|(k, r)| (k.to_string(), mask_run_facts(&r.request_text())))
                .collect()
        };
        if let Some(journal) = host.journal() {
            journal.close().unwrap();
        }
        (replies, fingerprints)
    });
    // Every handle on the journal goes with the runtime's tasks.
    drop(rt);
    if !journaled {
        return Journaled {
            replies,
            fingerprints,
            receipts: Vec::new(),
            tasks: Vec::new(),
        };
    }
    let (journal, recovered) = crate::journal::Journal::open(&dir.0, journal_options()).unwrap();
    journal.close().unwrap();
    drop(journal);
    let receipts = recovered
        .receipts
        .iter()
        .map(|r| {
            let request = r.request.text(&r.method, r.task_id.as_deref());
            let reply = r
                .completion
                .as_ref()
                .map(|c| String::from_utf8_lossy(&c.reply).into_owned());
            let code = reply
                .as_deref()
                .and_then(crate::journaling::code_of)
                .map(ErrorCode::as_str);
            mask_run_facts(&format!(
                "{} {} {:?} {request} {reply:?} {code:?}",
                r.request_id, r.method, r.task_id
            ))
        })
        .collect();
    let tasks = recovered
        .tasks
        .iter()
        .map(|t| {
            mask_run_facts(&format!(
                "{} {} {} {} {} closed={}",
                t.task_id,
                t.title,
                t.state,
                mask_since(&String::from_utf8_lossy(&t.pending)),
                String::from_utf8_lossy(&t.detail),
                t.closed_at.is_some()
            ))
        })
        .collect();
    Journaled {
        replies,
        fingerprints,
        receipts,
        tasks,
    }
}

/// A reply without the journal's figures (`run.status`), which depend on timestamps' widths
/// and the disk.
fn without_journal_stats(body: &str) -> String {
    match body.find(",\"journal\":{") {
        Some(start) => match body[start..].find('}') {
            Some(end) => format!("{}{}", &body[..start], &body[start + end + 1..]),
            None => body.to_owned(),
        },
        None => body.to_owned(),
    }
}

/// A `page.fill` of the started task the fast path reads in place (no escapes), under an ID
/// from a small set so that copies and conflicts come often; some fields the fixture page
/// refuses.
fn plain_fill() -> impl Strategy<Value = String> {
    let id = prop_oneof![
        "f[0-9]{1,2}",
        "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12}",
    ];
    let target = prop_oneof![
        4 => Just("#title"),
        2 => Just("#note"),
        1 => Just("#status"),
        1 => Just("#nowhere"),
    ];
    (id, target, "[a-z0-9 ]{0,8}").prop_map(|(id, target, value)| {
        format!(
            r#"{{"id":"{id}","method":"page.fill","params":{{"taskId":"{}","target":"{target}","value":"{value}"}}}}"#,
            crate::protocol::test_frames::TASK
        )
    })
}

/// Frame sequences for the journal oracle: request frames, and now and then a repeat of an
/// earlier one (a replay, or a join while the first still runs, or a conflict once the task
/// moved on).
fn frames_with_repeats() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(
        prop_oneof![
            3 => crate::protocol::test_frames::request_frame()
                .prop_map(|f| Ok(String::from_utf8_lossy(&f).into_owned())),
            3 => plain_fill().prop_map(Ok),
            1 => any::<prop::sample::Index>().prop_map(Err),
        ],
        1..24,
    )
    .prop_map(|picks| {
        let mut frames: Vec<String> = Vec::new();
        for pick in picks {
            match pick {
                Ok(frame) => frames.push(frame),
                Err(i) if !frames.is_empty() => frames.push(frames[i.index(frames.len())].clone()),
                Err(_) => {}
            }
        }
        frames
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// The fast path (pipelined batches: fills done at once, executions run inline, the rest
    /// deferred) answers exactly as the reference path (`Host::handle`, frame by frame) and as
    /// `Host::handle_frames` with the fast path off, keeps the same fingerprints and leaves the
    /// same durable journal.
    #[test]
    fn the_fast_path_changes_no_reply_and_no_journal_byte(
        frames in frames_with_repeats(),
        sizes in proptest::collection::vec(1usize..8, 1..4),
        journaled in any::<bool>(),
    ) {
        let fast = run_journaled(&frames, &sizes, Path::Batched, journaled);
        let off = run_journaled(&frames, &sizes, Path::BatchedOff, journaled);
        prop_assert_eq!(&fast, &off);
        let reference = run_journaled(&frames, &sizes, Path::Reference, journaled);
        prop_assert_eq!(fast, reference);
    }
}
