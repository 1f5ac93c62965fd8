//! SPEC §15 on the fixture page, through a real host: what an agent sees (`page.snapshot`
//! with refs), how it names what it acts on (refs, role and name, text), the fixture's select,
//! check, wait and url, and the refusals that send nothing (a stale ref, an ambiguous
//! locator, a method the fixture does not offer). Side effects are counted on the fixture's
//! own `#submissions` and the run's `executor.mutations`.

use polaris_testkit::host::*;

use std::time::Duration;

use serde_json::{json, Value};

/// The ref of the first snapshot node with `role` and `name`.
fn ref_of(snapshot: &Value, role: &str, name: &str) -> String {
    let nodes = snapshot["nodes"]
        .as_array()
        .expect("a json snapshot lists nodes");
    nodes
        .iter()
        .find(|n| n["role"] == role && n["name"] == name)
        .and_then(|n| n["ref"].as_str())
        .unwrap_or_else(|| panic!("no {role} {name:?} in {snapshot}"))
        .to_owned()
}

async fn snapshot(c: &mut Conn, task: &str) -> Value {
    ok(&c
        .call("page.snapshot", json!({"taskId": task, "format": "json"}))
        .await)
    .clone()
}

#[tokio::test]
async fn an_agent_sees_the_page_and_acts_by_ref_and_locator() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;

    // The outline, as YAML lines by default.
    let yaml = ok(&c.call("page.snapshot", json!({"taskId": task})).await).clone();
    let text = yaml["snapshot"].as_str().expect("yaml text");
    assert!(text.contains("- textbox \"Title\" [ref=e"), "{text}");
    assert!(text.contains("- button \"Submit\" [ref=e"), "{text}");
    assert!(text.contains("- status \"Status\" [ref=e"), "{text}");
    assert_eq!(yaml["truncated"], false);

    // Fill by ref, select by label, check by role and name, all from the latest snapshot.
    let snap = snapshot(&mut c, &task).await;
    let title = ref_of(&snap, "textbox", "Title");
    let r = c
        .call(
            "page.fill",
            json!({"taskId": task, "target": {"ref": title}, "value": "Q3 report"}),
        )
        .await;
    assert_eq!(ok(&r)["target"]["ref"], title.as_str(), "{r}");
    let r = c
        .call(
            "page.select",
            json!({"taskId": task, "target": {"role": "combobox", "name": "category"}, "label": "Events"}),
        )
        .await;
    assert_eq!(ok(&r)["observation"]["value"], "events", "{r}");
    let r = c
        .call(
            "page.check",
            json!({"taskId": task, "target": {"role": "checkbox", "name": "Urgent"}, "checked": true}),
        )
        .await;
    ok(&r);
    let after = snapshot(&mut c, &task).await;
    let urgent = after["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "Urgent")
        .unwrap();
    assert_eq!(urgent["states"], json!(["checked"]), "{after}");
    let read = ok(&c
        .call(
            "page.read",
            json!({"taskId": task, "target": {"ref": ref_of(&after, "textbox", "Title")}}),
        )
        .await)
    .clone();
    assert_eq!(read["value"], "Q3 report");

    // The ref of the first snapshot is stale now: refused, nothing sent.
    let stale = ref_of(&snap, "button", "Submit");
    let r = c
        .call(
            "page.click",
            json!({"taskId": task, "target": {"ref": stale}, "expect": {"target": {"role": "status"}, "contains": "Saved #1"}}),
        )
        .await;
    let e = err(&r, "ACTION_FAILED");
    assert_eq!(e["delivery"], "not_sent", "{r}");
    assert_eq!(e["details"]["cause"], "stale_ref", "{r}");
    assert_eq!(mutations(&mut c).await, 0);

    // An ambiguous locator names its candidates and sends nothing.
    let r = c
        .call(
            "page.click",
            json!({"taskId": task, "target": {"role": "textbox"}, "local": true, "expect": null}),
        )
        .await;
    let e = err(&r, "ACTION_FAILED");
    assert_eq!(e["details"]["cause"], "ambiguous_target", "{r}");
    let candidates = e["details"]["candidates"].as_array().expect("candidates");
    assert!(candidates.len() >= 2, "{r}");
    assert!(e["message"].as_str().unwrap().contains("Title"), "{r}");

    // The submit by text, its effect expected on the page's text: applied once.
    let r = c
        .call(
            "page.click",
            json!({"taskId": task, "target": {"text": "Submit"}, "expect": {"text": {"contains": "Saved #1"}}}),
        )
        .await;
    assert!(ok(&r)["observation"]["value"]
        .as_str()
        .unwrap()
        .contains("Saved #1"));
    assert_eq!(submissions(&mut c, &task).await, 1);
    assert_eq!(mutations(&mut c).await, 1);

    let url = ok(&c.call("page.url", json!({"taskId": task})).await).clone();
    assert_eq!(url["url"], "about:polaris-fixture");
    assert_eq!(url["title"], "Draft a post");
}

#[tokio::test]
async fn a_wait_sees_a_late_submit_land_and_times_out_otherwise() {
    let host = TestHost::start(&["--action-timeout-ms", "300"]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({"submitDelayMs": 700})).await;
    let r = c
        .call(
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": {"target": "#status", "equals": "Saved #1"}}),
        )
        .await;
    err(&r, "OUTCOME_UNCERTAIN");
    // A wait is a read: it runs while the task is blocked, bounded by its own timeout.
    let w = c
        .call(
            "page.wait",
            json!({"taskId": task, "text": "Saved #1", "timeoutMs": 1400}),
        )
        .await;
    let w = ok(&w);
    assert_eq!(w["state"], "visible");
    assert!(w["waitedMs"].as_u64().unwrap() >= 100, "{w}");
    let w = c
        .call(
            "page.wait",
            json!({"taskId": task, "text": "Saved #2", "timeoutMs": 200}),
        )
        .await;
    err(&w, "READ_TIMEOUT");
    let w = c
        .call(
            "page.wait",
            json!({"taskId": task, "text": "Saved #2", "timeoutMs": 1600}),
        )
        .await;
    let e = err(&w, "BAD_REQUEST");
    assert!(e["message"].as_str().unwrap().contains("1500 ms"), "{w}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(submissions(&mut c, &task).await, 1);
}

#[tokio::test]
async fn what_the_fixture_cannot_do_is_refused_before_anything_is_stored() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let before = used(&mut c).await;
    for (method, params) in [
        ("page.navigate", json!({"taskId": task, "url": "back"})),
        (
            "page.upload",
            json!({"taskId": task, "target": "#file", "files": ["a.txt"]}),
        ),
        ("page.screenshot", json!({"taskId": task})),
    ] {
        let r = c.call(method, params).await;
        let e = err(&r, "BAD_REQUEST");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("--executor chromium"),
            "{method}: {r}"
        );
    }
    assert_eq!(
        used(&mut c).await,
        before,
        "no receipt for a refused request"
    );
    let tools = ok(&c.call("tools.list", json!({})).await).clone();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["method"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"page.snapshot") && names.contains(&"page.select"));
    assert!(!names.contains(&"page.navigate"), "{names:?}");

    // Bad shapes are BAD_REQUEST with the rule named.
    for (method, params, says) in [
        (
            "page.click",
            json!({"taskId": task, "target": {"ref": "12"}, "local": true, "expect": null}),
            "snapshot ref",
        ),
        (
            "page.click",
            json!({"taskId": task, "target": {"ref": "e1", "role": "button"}, "local": true, "expect": null}),
            "exactly one of",
        ),
        (
            "page.select",
            json!({"taskId": task, "target": "#category", "label": "News", "value": "news"}),
            "exactly one of `label` or `value`",
        ),
        (
            "page.snapshot",
            json!({"taskId": task, "maxBytes": 10}),
            "maxBytes",
        ),
        (
            "page.wait",
            json!({"taskId": task}),
            "exactly one of `target` or",
        ),
        (
            "page.click",
            json!({"taskId": task, "target": "#submit", "expect": {"text": {"equals": "x"}}}),
            "expect.text takes `contains`",
        ),
    ] {
        let r = c.call(method, params).await;
        let e = err(&r, "BAD_REQUEST");
        assert!(
            e["message"].as_str().unwrap().contains(says),
            "{method}: {r}"
        );
    }
    assert_eq!(used(&mut c).await, before);
}

#[tokio::test]
async fn a_snapshot_past_max_bytes_says_what_it_cut() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    for i in 0..40 {
        let r = c
            .call(
                "page.fill",
                json!({"taskId": task, "target": format!("#field-{i:02}"), "value": "x".repeat(40)}),
            )
            .await;
        ok(&r);
    }
    let r = c
        .call("page.snapshot", json!({"taskId": task, "maxBytes": 1024}))
        .await;
    let s = ok(&r);
    assert_eq!(s["truncated"], true, "{r}");
    assert!(s["shown"].as_u64().unwrap() < s["nodeCount"].as_u64().unwrap());
    assert!(s["note"].as_str().unwrap().contains("maxBytes"));
    assert!(serde_json::to_string(s).unwrap().len() <= 1024, "{r}");
}

/// SPEC §15's tabs and logins on the fixture: its page opens nothing, so `page.tabs` lists tab
/// 0 and any other `tab` is malformed; profiles are the Chromium executor's. Each refusal is a
/// `BAD_REQUEST` that stores nothing.
#[tokio::test]
async fn the_fixture_has_one_tab_and_no_profiles() {
    let host = TestHost::start(&[]);
    let mut c = host.conn().await;
    let task = start_task(&mut c, json!({})).await;
    let tabs = ok(&c.call("page.tabs", json!({"taskId": task})).await).clone();
    assert_eq!(tabs["tabs"].as_array().unwrap().len(), 1, "{tabs}");
    assert_eq!(tabs["tabs"][0]["tab"], 0, "{tabs}");
    let read = c
        .call(
            "page.read",
            json!({"taskId": task, "target": "#status", "tab": 0}),
        )
        .await;
    assert_eq!(ok(&read)["value"], "Draft");
    let before = used(&mut c).await;
    for (method, params, says) in [
        (
            "page.fill",
            json!({"taskId": task, "target": "#title", "value": "x", "tab": 1}),
            "one tab",
        ),
        (
            "page.read",
            json!({"taskId": task, "target": "#title", "tab": 1}),
            "one tab",
        ),
        (
            "task.saveProfile",
            json!({"taskId": task, "profile": "shop"}),
            "--executor chromium",
        ),
        (
            "task.start",
            json!({"title": "t", "profile": "shop"}),
            "--executor chromium",
        ),
        (
            "task.start",
            json!({"title": "t", "profile": "../shop"}),
            "profile",
        ),
    ] {
        let r = c.call(method, params).await;
        let e = err(&r, "BAD_REQUEST");
        assert!(
            e["message"].as_str().unwrap().contains(says),
            "{method}: {r}"
        );
    }
    assert_eq!(
        used(&mut c).await,
        before,
        "no receipt for a refused request"
    );
}
