//! Console keys through the real terminal against a real `polaris serve`: `a` marks the
//! clearable receipts as they are and space takes single rows out, and a notice too long for an
//! 80-column line is read whole with `n`.

mod common;
#[path = "support/console_pty.rs"]
mod console_pty;

use serde_json::json;

use common::{sync_call, TestHost};
use console_pty::{selected_id, task_with_fills, Console};

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
