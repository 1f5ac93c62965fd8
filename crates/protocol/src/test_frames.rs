//! Strategies and writers for the tests of both parse paths (here and in the host).

use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Any JSON value: floats, huge integers, non-ASCII keys and strings included.
pub fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
        "[ -~/\"\\\\\u{0}-\u{1f}\u{7f}é\u{2028}\u{1F600}]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z_é\u{1F600}]{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Deterministic choices for [`write_json`], so a failing case shrinks and replays.
pub struct Choices(fastrand::Rng);

impl Choices {
    /// True about once in `n` calls.
    fn one_in(&mut self, n: u64) -> bool {
        self.0.u64(..n) == 0
    }
}

/// Writes `v` in one of several ways: serde_json compact or pretty, the canonicaliser's
/// form, or by hand with now and then shuffled keys, spaces, `\/`, `\u0041`-style escapes,
/// surrogate pairs, uppercase hex and integers written as floats.
pub fn write_json(v: &Value, how: u8, seed: u64) -> String {
    match how % 5 {
        0 => serde_json::to_string(v).unwrap(),
        1 => serde_json::to_string_pretty(v).unwrap(),
        2 => serde_json_canonicalizer::to_string(v).unwrap(),
        _ => {
            let mut out = String::new();
            let mut c = Choices(fastrand::Rng::with_seed(seed));
            write_by_hand(v, &mut c, &mut out);
            out
        }
    }
}

fn write_by_hand(v: &Value, c: &mut Choices, out: &mut String) {
    if c.one_in(16) {
        out.push(' ');
    }
    match v {
        Value::Null | Value::Bool(_) => out.push_str(&v.to_string()),
        Value::Number(n) => {
            out.push_str(&n.to_string());
            if (n.is_i64() || n.is_u64()) && c.one_in(12) {
                out.push_str(if c.one_in(2) { ".0" } else { "e0" });
            }
        }
        Value::String(s) => write_string(s, c, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_by_hand(item, c, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if entries.len() > 1 && c.one_in(4) {
                entries.rotate_left(1);
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, c, out);
                out.push(':');
                write_by_hand(item, c, out);
            }
            out.push('}');
        }
    }
    if c.one_in(16) {
        out.push(' ');
    }
}

fn write_string(s: &str, c: &mut Choices, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if c.one_in(4) => out.push_str("\\/"),
            '\u{8}' if !c.one_in(4) => out.push_str("\\b"),
            '\t' if !c.one_in(4) => out.push_str("\\t"),
            '\n' if !c.one_in(4) => out.push_str("\\n"),
            '\u{c}' if !c.one_in(4) => out.push_str("\\f"),
            '\r' if !c.one_in(4) => out.push_str("\\r"),
            '\u{0}'..='\u{1f}' => {
                let escaped = format!("\\u{:04x}", ch as u32);
                if c.one_in(4) {
                    out.push_str(&escaped.to_uppercase().replace("\\U", "\\u"));
                } else {
                    out.push_str(&escaped);
                }
            }
            _ if c.one_in(20) => {
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
            _ => out.push(ch),
        }
    }
    out.push('"');
}

fn text() -> BoxedStrategy<Value> {
    prop_oneof![
        "[ -~]{0,10}",
        any::<String>(),
        "[a-z/\"\\\\\n\u{1}é\u{1F600}]{0,6}",
        Just("Enter".to_owned()),
        Just(String::new()),
    ]
    .prop_map(Value::String)
    .boxed()
}

fn selector() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => "#[a-z0-9_-]{1,8}",
        2 => Just("#title".to_owned()),
        1 => "[#A-Za-z /]{0,6}",
    ]
    .prop_map(Value::String)
    .boxed()
}

fn task_id() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => Just(TASK.to_owned()),
        1 => "[a-z0-9-]{1,8}",
    ]
    .prop_map(Value::String)
    .boxed()
}

/// The selector check the parse tests hand to [`Command::parse`](super::Command::parse):
/// `#` and then lowercase letters, digits, `-` or `_`. It stands in for an executor's, so
/// that these tests exercise both answers of a check without depending on an executor.
pub fn check_target(target: &str) -> Result<(), String> {
    let name = target.strip_prefix('#').unwrap_or("");
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(format!("{target:?} is not a selector of the test page"))
    }
}

/// A task ID the host test replaces with a task it started, per host.
pub const TASK: &str = "TASK-PLACEHOLDER";

fn delay() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => (0u64..70_000).prop_map(|n| json!(n)),
        1 => any_json(),
    ]
    .boxed()
}

fn bool_value() -> BoxedStrategy<Value> {
    prop_oneof![4 => any::<bool>().prop_map(Value::Bool), 1 => any_json()].boxed()
}

/// An object of the given fields, each present with its probability, now and then with
/// a field no method takes.
fn object(fields: Vec<(&'static str, f64, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let present: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
        .into_iter()
        .map(|(name, p, value)| {
            proptest::option::weighted(p, value.prop_map(move |v| (name.to_owned(), v))).boxed()
        })
        .collect();
    let extra = proptest::option::weighted(0.05, ("[a-z]{1,4}", any_json()));
    (present, extra)
        .prop_map(|(fields, extra)| {
            let mut map = Map::new();
            for (k, v) in fields.into_iter().flatten().chain(extra) {
                map.insert(k, v);
            }
            Value::Object(map)
        })
        .boxed()
}

fn expect() -> BoxedStrategy<Value> {
    prop_oneof![
        8 => object(vec![("target", 0.95, selector()), ("equals", 0.6, text())]),
        8 => object(vec![("target", 0.95, selector()), ("contains", 0.6, text())]),
        1 => any_json(),
    ]
    .boxed()
}

/// Params for `method`, mostly shaped the way the method wants them, sometimes not.
fn params_for(method: &'static str) -> BoxedStrategy<Value> {
    let shaped = match method {
        "task.start" => object(vec![
            ("title", 0.95, text()),
            ("url", 0.3, text()),
            (
                "fixture",
                0.4,
                object(vec![
                    ("submitDelayMs", 0.5, delay()),
                    ("readDelayMs", 0.3, delay()),
                    ("dropSubmit", 0.3, bool_value()),
                    ("failSubmit", 0.3, bool_value()),
                ]),
            ),
        ]),
        "page.fill" => object(vec![
            ("taskId", 0.95, task_id()),
            ("target", 0.95, selector()),
            ("value", 0.95, text()),
        ]),
        "page.click" => object(vec![
            ("taskId", 0.95, task_id()),
            ("target", 0.95, selector()),
            ("expect", 0.95, expect()),
        ]),
        "page.press" => object(vec![
            ("taskId", 0.95, task_id()),
            ("key", 0.95, text()),
            ("target", 0.5, selector()),
            ("expect", 0.95, expect()),
        ]),
        "page.read" => object(vec![
            ("taskId", 0.95, task_id()),
            ("target", 0.95, selector()),
        ]),
        "task.stop" => object(vec![("taskId", 0.95, task_id()), ("reason", 0.95, text())]),
        "task.resume" => object(vec![("taskId", 0.95, task_id()), ("runId", 0.95, text())]),
        "run.status" => object(vec![("runId", 0.3, text())]),
        "receipt.status" => object(vec![(
            "requestId",
            0.95,
            prop_oneof![
                Just(json!("same-id")),
                "[A-Za-z0-9._:-]{0,10}".prop_map(Value::String),
                text()
            ]
            .boxed(),
        )]),
        "host.hello" | "tools.list" => object(vec![]),
        _ => object(vec![("taskId", 0.95, task_id())]),
    };
    prop_oneof![12 => shaped, 1 => any_json()].boxed()
}

/// Request frames: mostly well-formed requests of every bridge method (params written in
/// several ways, some canonical, some not), plus envelopes with odd ids, methods, params,
/// duplicated or unknown fields, and raw bytes.
pub fn request_frame() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("task.start"),
        Just("page.fill"),
        Just("page.click"),
        Just("page.press"),
        Just("page.read"),
        Just("task.finish"),
        Just("task.stop"),
        Just("task.status"),
        Just("task.resume"),
        Just("task.verifyOutcome"),
        Just("run.status"),
        Just("receipt.status"),
        Just("host.hello"),
        Just("tools.list"),
        Just("page.fil"),
    ];
    let id = prop_oneof![
        4 => "[A-Za-z0-9._:-]{1,10}".prop_map(|s| json!(s).to_string()),
        2 => "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-fA-F]{4}-[0-9a-f]{4}-[0-9a-g]{12}"
            .prop_map(|s| json!(s).to_string()),
        2 => Just("\"same-id\"".to_owned()),
        1 => Just("\"same\\u002did\"".to_owned()),
        1 => Just("\"a b\"".to_owned()),
        1 => Just("7".to_owned()),
    ];
    let request = (method, id)
        .prop_flat_map(|(method, id)| {
            (
                Just(method),
                Just(id),
                params_for(method),
                any::<u8>(),
                any::<u64>(),
                0u8..8,
            )
        })
        .prop_map(|(method, id, params, how, seed, envelope)| {
            let text = write_json(&params, how, seed);
            let method = json!(method).to_string();
            let frame = match envelope {
                0 => format!("{{\"params\":{text},\"method\":{method},\"id\":{id}}}"),
                1 if params.as_object().is_some_and(|m| m.is_empty()) => {
                    format!("{{\"id\":{id},\"method\":{method}}}")
                }
                1 => format!("{{\"id\":{id},\"method\":{method},\"params\":null}}"),
                2 => {
                    format!("{{ \"id\" : {id} , \"method\" : {method} , \"params\" : {text} }}")
                }
                3 => {
                    format!("{{\"id\":{id},\"id\":{id},\"method\":{method},\"params\":{text}}}")
                }
                4 => format!("{{\"id\":{id},\"method\":{method},\"params\":{text},\"x\":1}}"),
                _ => format!("{{\"id\":{id},\"method\":{method},\"params\":{text}}}"),
            };
            frame.into_bytes()
        });
    prop_oneof![
        20 => request,
        1 => proptest::collection::vec(any::<u8>(), 0..48),
    ]
}
