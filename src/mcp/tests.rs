//! The line screen, the key renaming and the tool table, without a host.

use super::keys::*;
use super::results::*;
use super::screen::*;
use super::tools::*;
use crate::protocol::{Delivery, ErrorCode};
use serde_json::{json, Value};

fn answer(line: &[u8]) -> Value {
    match screen_line(line) {
        Screened::Answer(v) => v,
        Screened::Forward | Screened::Drop => {
            panic!("not answered: {}", String::from_utf8_lossy(line))
        }
    }
}

#[test]
fn the_line_screen_answers_what_rmcp_would_not() {
    for (line, code, id) in [
        (&b"\xff\xfe{}"[..], -32700, Value::Null),
        (b"", -32700, Value::Null),
        (b"   ", -32700, Value::Null),
        (b"{\"jsonrpc\":\"2.0\",", -32700, Value::Null),
        (b"[1,2]", -32600, Value::Null),
        (b"{\"id\":1,\"method\":\"ping\"}", -32600, json!(1)),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}",
            -32600,
            Value::Null,
        ),
        (b"{\"jsonrpc\":\"2.0\",\"id\":1}", -32600, json!(1)),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":5}",
            -32600,
            json!(2),
        ),
    ] {
        let a = answer(line);
        assert_eq!(
            a["error"]["code"],
            code,
            "{}",
            String::from_utf8_lossy(line)
        );
        assert_eq!(a["id"], id, "{a}");
    }
    for (line, id) in [
        (&br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#[..], json!(7)),
        (br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"task_start","arguments":[1]}}"#, json!("a")),
        (br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":3}}"#, json!(8)),
        (br#"{"jsonrpc":"2.0","id":9,"method":"tools/call"}"#, json!(9)),
    ] {
        let a = answer(line);
        assert_eq!(a["error"]["code"], -32602, "{a}");
        assert_eq!(a["id"], id, "{a}");
    }
    for line in [
        &br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"host_hello"}}"#[..],
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}"#,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"no/such"}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
    ] {
        assert_eq!(
            screen_line(line),
            Screened::Forward,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

#[test]
fn keys_translate_both_ways() {
    let args =
        json!({"task_id": "t", "fixture": {"submit_delay_ms": 5}, "expect": {"target": "#s"}});
    let camel = camel_keys(args.clone());
    assert_eq!(
        camel,
        json!({"taskId": "t", "fixture": {"submitDelayMs": 5}, "expect": {"target": "#s"}})
    );
    assert_eq!(snake_keys(camel), args);
    assert_eq!(
        snake_keys(json!({"automaticReplay": false, "pendingOutcome": {"requestId": "r"}})),
        json!({"automaticReplay": false, "pending_outcome": {"request_id": "r"}})
    );
}

#[test]
fn every_tool_parses_and_schemas_are_objects() {
    for spec in TOOLS {
        let schema = (spec.schema)();
        assert_eq!(schema.get("type"), Some(&json!("object")), "{}", spec.name);
        assert!(
            tool_for_method(spec.method.as_str()) == Some(spec.name),
            "{} maps back from {}",
            spec.name,
            spec.method
        );
    }
    let (params, id) = (spec_named("page_press").unwrap().parse)(
        json!({"task_id": "t", "key": "Enter", "target": "#title", "expect": {"target": "#status", "contains": "Saved"}, "request_id": "r-1"})
            .as_object()
            .unwrap()
            .clone(),
    )
    .unwrap();
    assert_eq!(id.as_deref(), Some("r-1"));
    assert_eq!(
        params,
        json!({"taskId": "t", "key": "Enter", "target": "#title", "expect": {"target": "#status", "contains": "Saved"}})
    );
    let (params, _) = (spec_named("request_status").unwrap().parse)(
        json!({"request_id": "abc"}).as_object().unwrap().clone(),
    )
    .unwrap();
    assert_eq!(params, json!({"requestId": "abc"}));
    assert!((spec_named("page_fill").unwrap().parse)(
        json!({"task_id": "t", "target": "#a", "value": "v", "extra": 1})
            .as_object()
            .unwrap()
            .clone()
    )
    .is_err());
    assert!((spec_named("page_fill").unwrap().parse)(
        json!({"task_id": "t", "target": "#a"})
            .as_object()
            .unwrap()
            .clone()
    )
    .is_err());
}

#[test]
fn messages_name_tools_not_bridge_methods() {
    assert_eq!(
        in_tool_words("do not resend page.press: read receipt.status for r, or call task.verifyOutcome for task t (taskId)"),
        "do not resend page_press: read request_status for r, or call verify_outcome for task t (task_id)"
    );
}

#[test]
fn next_reads_follow_the_delivery() {
    assert_eq!(
        next_read(
            ErrorCode::BridgeDisconnected,
            Delivery::Unknown,
            "r",
            Some("t"),
            None
        ),
        json!({"tool": "request_status", "arguments": {"request_id": "r"}})
    );
    assert_eq!(
        next_read(
            ErrorCode::OutcomeUncertain,
            Delivery::Uncertain,
            "r",
            Some("t"),
            None
        ),
        json!({"tool": "verify_outcome", "arguments": {"task_id": "t"}})
    );
    let host_next = json!({"next": {"method": "task.verifyOutcome", "params": {"taskId": "t9"}}});
    assert_eq!(
        next_read(
            ErrorCode::OutcomeUncertain,
            Delivery::Uncertain,
            "r",
            Some("t"),
            Some(&host_next)
        ),
        json!({"tool": "verify_outcome", "arguments": {"task_id": "t9"}})
    );
    assert_eq!(
        next_read(
            ErrorCode::TaskClosed,
            Delivery::NotExecuted,
            "r",
            Some("t"),
            None
        ),
        json!({"tool": "task_status", "arguments": {"task_id": "t"}})
    );
    assert_eq!(
        next_read(
            ErrorCode::BridgeUnavailable,
            Delivery::NotSent,
            "r",
            None,
            None
        ),
        json!({"tool": "run_status", "arguments": {}})
    );
}

#[tokio::test]
async fn a_line_over_the_limit_is_skipped_whole_in_any_piece_size() {
    let data = b"0123456789\nabcdefghijklmnopqrstuvwxyz\nshort\r\nxy";
    // Read in pieces that cut the long line anywhere, and through a CR of a CRLF line.
    for cap in [1, 3, 7, 11, 64] {
        let mut r = tokio::io::BufReader::with_capacity(cap, &data[..]);
        let mut buf = Vec::new();
        let mut got = Vec::new();
        loop {
            match read_line(&mut r, &mut buf, 10).await.unwrap() {
                LineRead::Eof => break,
                LineRead::Line => got.push(String::from_utf8(buf.clone()).unwrap()),
                LineRead::TooLong => got.push("<too long>".into()),
            }
        }
        assert_eq!(
            got,
            ["0123456789", "<too long>", "short", "xy"],
            "capacity {cap}"
        );
    }
}

#[test]
fn before_initialize_a_request_is_told_to_initialize_and_a_notification_is_dropped() {
    let mut life = Lifecycle::default();
    let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_status"}}"#;
    let Screened::Answer(a) = life.admit(call, Screened::Forward) else {
        panic!("answered")
    };
    assert_eq!(a["error"]["code"], -32600);
    assert_eq!(a["id"], 1);
    let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(life.admit(note, Screened::Forward), Screened::Drop);
    for early in [
        &br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#[..],
        br#"{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{"_meta":{}}}"#,
    ] {
        assert_eq!(life.admit(early, Screened::Forward), Screened::Forward);
    }
    // A request with its own _meta (2026-07-28) opens the lifecycle, as initialize does.
    let inline = br#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":{}}}"#;
    assert_eq!(life.admit(inline, Screened::Forward), Screened::Forward);
    assert_eq!(life.admit(call, Screened::Forward), Screened::Forward);
    assert_eq!(life.admit(note, Screened::Forward), Screened::Forward);
}
