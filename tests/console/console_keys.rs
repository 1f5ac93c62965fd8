//! Console keys through the real terminal against a real `polaris serve`: `a` marks the
//! clearable receipts as they are and space takes single rows out, a notice too long for an
//! 80-column line is read whole with `n`, `y` copies the selected ID with OSC 52, the `:`
//! command line clears one task's receipts through the clear dialog (and a `--read-only`
//! console refuses it), `/re:` filters by a pattern, and `f` follows the newest receipt.

use polaris_testkit::console_pty;
use polaris_testkit::host::{sync_call, TestHost};

use serde_json::json;

use console_pty::{fill, selected_id, task_with_fills, Console};

#[test]
fn space_after_a_keeps_single_receipts_out_of_the_clear() {
    let host = TestHost::start(&["--capacity", "100"]);
    task_with_fills(&host, 6);
    let list = sync_call(&host.introspect(), "receipts.list", json!({"limit": 1000})).unwrap();
    let items = list["result"]["items"].as_array().unwrap().clone();
    let clearable = items.iter().filter(|i| i["clearable"] == true).count();
    assert!(clearable >= 6, "{list}");

    // Wide enough for whole request IDs, so the screen names the row exactly.
    let mut console = Console::start_sized(&host, 140, 34);
    let screen = console.shows(&format!("Receipts {} ", items.len()));
    let kept = selected_id(&screen).expect("a selected row");
    // a marks the clearable receipts as they are now, by ID; space takes one out.
    console.press("a");
    console.shows(&format!("· {clearable} marked"));
    console.press(" ");
    console.shows(&format!("· {} marked", clearable - 1));
    console.press("c");
    let dialog = console.shows(&format!("Clear {} receipts?", clearable - 1));
    assert!(
        !dialog.contains(&kept),
        "the receipt taken out is not in the clear:\n{dialog}"
    );
    console.press("all but the newest\r");
    console.press("y");
    // The summary stays even though the row under the cursor was cleared with the rest.
    let left_rows = items.len() - (clearable - 1);
    console.wait_for("the book after the clear", |t| {
        t.contains(&format!("Receipts {left_rows} "))
            && t.contains(&format!("cleared {} receipts", clearable - 1))
    });

    let status = sync_call(&host.bridge(), "receipt.status", json!({"requestId": kept})).unwrap();
    assert_eq!(
        status["result"]["state"], "completed",
        "the excluded receipt stays: {status}"
    );
    let left = sync_call(&host.introspect(), "receipts.list", json!({"limit": 1000})).unwrap();
    assert_eq!(
        left["result"]["total"].as_u64().unwrap() as usize,
        items.len() - (clearable - 1),
        "{left}"
    );
}

#[test]
fn a_long_notice_is_read_whole_at_80_by_24() {
    let host = TestHost::start(&["--capacity", "100"]);
    let mut console = Console::start_sized(&host, 80, 24);
    console.wait_for("a connected host", |t| t.contains("connected"));
    // `c` with nothing marked says what to do in a sentence longer than the line.
    let sentence = "mark receipts first (space, or a for all completed ones matching the filter)";
    console.press("c");
    let cut = console.shows("… (n: whole)");
    assert!(!cut.contains(sentence), "the line cannot hold it:\n{cut}");
    console.press("n");
    let whole = console.shows(" Notices ");
    let boxed = boxed_text(&whole, " Notices ");
    assert!(
        boxed.contains(sentence),
        "the whole sentence is in the box:\n{whole}"
    );
    // Any key closes it, and is not also a command.
    console.press("c");
    console.wait_for("the monitor again", |t| !t.contains(" Notices "));
}

#[test]
fn y_copies_the_selected_request_id_with_osc_52() {
    use base64::Engine;
    let host = TestHost::start(&["--capacity", "100"]);
    task_with_fills(&host, 2);
    let mut console = Console::start_sized(&host, 140, 34);
    let screen = console.shows("Receipts 3 ");
    let id = selected_id(&screen).expect("a selected row");
    assert_eq!(id.len(), 36, "a whole request ID at 140 columns: {id}");
    console.press("y");
    let sequence = format!(
        "\x1b]52;c;{}\x07",
        base64::engine::general_purpose::STANDARD.encode(&id)
    );
    console.wait_for_output("the OSC 52 copy of the selected ID", sequence.as_bytes());
    console.shows(&format!("copied request {id}"));
}

/// The receipts of `task` the host would clear now.
fn clearable_of(host: &TestHost, task: &str) -> usize {
    let list = sync_call(
        &host.introspect(),
        "receipts.list",
        json!({"limit": 1000, "search": task, "state": "clearable"}),
    )
    .unwrap();
    list["result"]["items"].as_array().unwrap().len()
}

#[test]
fn colon_clear_task_clears_one_tasks_receipts_after_a_reason_and_y() {
    let host = TestHost::start(&["--capacity", "100"]);
    let gone = task_with_fills(&host, 3);
    let kept = task_with_fills(&host, 2);
    let n = clearable_of(&host, &gone);
    assert!(n >= 3, "{n}");
    let mut console = Console::start_sized(&host, 140, 34);
    console.shows("Receipts 7 ");
    // An unknown command does nothing and says what exists.
    console.press(":purge\r");
    console.shows("unknown command :purge");
    console.press(&format!(":clear task {}\r", &gone[..8]));
    console.shows(&format!("Clear {n} receipts?"));
    console.press("one task done\r");
    console.press("y");
    console.shows(&format!("cleared {n} receipts"));
    assert_eq!(clearable_of(&host, &gone), 0);
    assert_eq!(
        clearable_of(&host, &kept),
        3,
        "the other task's receipts stay"
    );
}

#[test]
fn a_read_only_console_refuses_colon_clear() {
    let host = TestHost::start(&["--capacity", "100"]);
    let task = task_with_fills(&host, 2);
    let args: Vec<std::ffi::OsString> = vec![
        "console".into(),
        "--read-only".into(),
        "--socket-dir".into(),
        host.dir.clone().into(),
        "--log-file".into(),
        host.root.path().join("console.log").into(),
    ];
    let mut console = Console::spawn_sized(&args, &[("NO_COLOR", "1")], 140, 34);
    console.shows("Receipts 3 ");
    console.press(&format!(":clear task {}\r", &task[..8]));
    let screen = console.shows("refused: this console is read-only");
    assert!(!screen.contains("Clear "), "no dialog:\n{screen}");
    assert_eq!(clearable_of(&host, &task), 3, "nothing was cleared");
}

#[test]
fn a_re_filter_matches_methods_and_a_bad_pattern_is_refused() {
    let host = TestHost::start(&["--capacity", "100"]);
    task_with_fills(&host, 3);
    task_with_fills(&host, 2);
    let mut console = Console::start_sized(&host, 140, 34);
    console.shows("Receipts 7 ");
    console.press("/re:^page\\.fill$\r");
    console.shows("Receipts 5 ");
    console.press("\x1b");
    console.shows("Receipts 7 ");
    console.press("/re:^task\r");
    console.shows("Receipts 2 ");
    console.press("\x1b/re:page.(fill\r");
    console.shows("unclosed group");
}

#[test]
fn f_follows_the_newest_receipt_and_moving_stops_it() {
    let host = TestHost::start(&["--capacity", "100"]);
    let task = task_with_fills(&host, 2);
    let mut console = Console::start_sized(&host, 140, 34);
    console.shows("Receipts 3 ");
    console.shows("connected · FOLLOW");
    console.press("j");
    let screen = console.wait_for("following stopped", |t| !t.contains("FOLLOW"));
    let chosen = selected_id(&screen).expect("a selected row");
    fill(&host, &task, 7);
    let screen = console.shows("Receipts 4 ");
    assert_eq!(selected_id(&screen).as_ref(), Some(&chosen), "{screen}");
    console.press("f");
    console.shows("connected · FOLLOW");
    fill(&host, &task, 8);
    let newest = sync_call(&host.introspect(), "receipts.list", json!({"limit": 1})).unwrap();
    let newest = newest["result"]["items"][0]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    console.wait_for("the newest receipt selected", |t| {
        t.contains("Receipts 5 ") && selected_id(t).as_deref() == Some(newest.as_str())
    });
}

/// The text inside the box titled `title`, its rows joined by spaces.
fn boxed_text(screen: &str, title: &str) -> String {
    let rows: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
    let top = rows
        .iter()
        .position(|r| r.iter().collect::<String>().contains(&format!("┌{title}")))
        .unwrap_or_else(|| panic!("no box titled {title:?}:\n{screen}"));
    let text: String = rows[top].iter().collect();
    let x0 = text[..text.find(&format!("┌{title}")).unwrap()]
        .chars()
        .count();
    let x1 = x0 + rows[top][x0..].iter().position(|c| *c == '┐').unwrap();
    rows[top + 1..]
        .iter()
        .take_while(|r| r.get(x0) != Some(&'└'))
        .map(|r| {
            r[x0 + 1..x1.min(r.len())]
                .iter()
                .collect::<String>()
                .trim()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join(" ")
}
