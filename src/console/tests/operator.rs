//! The operator's command line (`:`), follow-newest (`f`), copy (`y`), the `re:` filter token
//! and the narrow layouts.

use crossterm::event::KeyCode;
use serde_json::json;

use super::keys::answer;
use super::*;

/// Types `:` and `line`, then Enter; what Enter returned.
fn command(app: &mut App, line: &str) -> Option<Effect> {
    assert_eq!(update(app, key(':')), None);
    for c in line.chars() {
        assert_eq!(update(app, key(c)), None, "typing {c:?} must not act");
    }
    update(app, code(KeyCode::Enter))
}

fn said(app: &App) -> String {
    app.notice
        .as_ref()
        .map(|n| n.text.clone())
        .unwrap_or_default()
}

const TASK: &str = "9b2d0f00-2222-4000-8000-000000000002";

/// Runs a clear's read of the task's receipts, its marking and its prepare, as the host
/// answers them; the prepare's params.
fn through_to_prepare(app: &mut App, first: Option<Effect>) -> Value {
    let Some(Effect::FetchPage { params, .. }) = &first else {
        panic!("the task's receipts are read first: {first:?}")
    };
    assert_eq!(params["search"], TASK, "{params}");
    answer(app, first, 5);
    let Some(Effect::ReadMatching(params)) = app.outbox.pop() else {
        panic!("then a marks them: {:?}", app.outbox)
    };
    assert_eq!(params["search"], TASK);
    update(app, Action::Matched(Ok(page(5, 0, 5))));
    let Some(Effect::Prepare(params)) = app.outbox.pop() else {
        panic!("then c prepares: {:?}", app.outbox)
    };
    assert_eq!(app.mode, Mode::Preparing);
    params
}

#[test]
fn colon_clear_task_prepares_the_same_clear_as_t_a_c_with_its_dialog() {
    let mut by_keys = connected(100, 30, 5, 60, 5, false);
    let t = update(&mut by_keys, key('t'));
    typed_keys(&mut by_keys, "ac");
    let expected = through_to_prepare(&mut by_keys, t);

    let mut app = connected(100, 30, 5, 60, 5, false);
    let first = command(&mut app, "clear task 9B2D0F");
    assert_eq!(through_to_prepare(&mut app, first), expected);
    // The same dialog: a reason, Enter, and only y commits.
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    assert!(matches!(
        app.mode,
        Mode::Confirm {
            stage: ConfirmStage::Reason,
            ..
        }
    ));
    assert_eq!(update(&mut app, code(KeyCode::Esc)), None);
    assert!(said(&app).contains("nothing was cleared"));
}

fn typed_keys(app: &mut App, keys: &str) {
    for c in keys.chars() {
        update(app, key(c));
    }
}

#[test]
fn the_command_line_never_guesses_and_esc_cancels() {
    let mut app = connected(100, 30, 5, 60, 5, true);
    // A second task whose ID starts like the first.
    let s = app.snapshot.as_mut().unwrap();
    let mut twin = s.tasks[1].clone();
    twin.task_id = "9b2d0f00-9999-4000-8000-000000000009".into();
    s.tasks.push(twin);

    assert_eq!(command(&mut app, "stop 9b2d"), None);
    assert!(
        said(&app).contains("unknown command :stop")
            && said(&app).contains("clear, verify, audit, q, quit, help"),
        "{}",
        said(&app)
    );
    assert_eq!(command(&mut app, "clear task 9b2d"), None);
    assert!(
        said(&app).starts_with("2 tasks start with 9b2d"),
        "{}",
        said(&app)
    );
    assert_eq!(command(&mut app, "clear task 0000"), None);
    assert!(said(&app).contains("no task"), "{}", said(&app));
    assert_eq!(command(&mut app, "clear 9b2d0f00-2222"), None);
    assert!(said(&app).contains("write :clear task ID-PREFIX"));
    assert_eq!(command(&mut app, "verify now"), None);
    assert!(said(&app).contains("takes nothing after it"));
    assert_eq!(command(&mut app, ""), None);
    assert!(said(&app).starts_with("type a command"));
    assert!(app.queued.is_empty() && app.marked.is_empty() && app.filter.is_empty());

    // Esc leaves the line with nothing done, whatever was typed.
    update(&mut app, key(':'));
    typed_keys(&mut app, "clear task 9b2d0f00-2222");
    assert!(screen(&app, 100, 30).contains(":clear task 9b2d0f00-2222▏"));
    assert_eq!(update(&mut app, code(KeyCode::Esc)), None);
    assert_eq!(app.mode, Mode::Normal);
    assert!(app.queued.is_empty() && app.filter.is_empty());

    // Tab completes a command's name; the others run as their keys do.
    update(&mut app, key(':'));
    typed_keys(&mut app, "he");
    update(&mut app, code(KeyCode::Tab));
    assert_eq!(app.mode, Mode::Command("help ".into()));
    assert_eq!(update(&mut app, code(KeyCode::Enter)), None);
    assert_eq!(app.mode, Mode::Help);
    update(&mut app, code(KeyCode::Esc));
    assert_eq!(command(&mut app, "au"), Some(Effect::GetAudit));
    update(&mut app, code(KeyCode::Esc));
    update(&mut app, code(KeyCode::Tab));
    update(&mut app, code(KeyCode::Tab));
    assert_eq!(
        command(&mut app, "verify"),
        Some(Effect::Verify(
            "7a1c9e00-1111-4000-8000-000000000001".into()
        ))
    );
    assert_eq!(command(&mut app, "q"), Some(Effect::Quit));
}

#[test]
fn a_read_only_console_refuses_the_changing_commands_like_their_keys() {
    let mut app = connected(100, 30, 5, 60, 5, true);
    app.read_only = true;
    for line in ["clear task 9b2d", "verify", "c task 9b2d", "v"] {
        app.notice = None;
        assert_eq!(command(&mut app, line), None, ":{line}");
        assert!(said(&app).contains("read-only"), ":{line}: {}", said(&app));
        assert!(app.queued.is_empty() && app.filter.is_empty(), ":{line}");
    }
    assert_eq!(command(&mut app, "audit"), Some(Effect::GetAudit));
}

#[test]
fn f_follows_the_newest_receipt_until_the_selection_moves() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    assert!(app.follow && screen(&app, 100, 30).contains("FOLLOW"));
    update(&mut app, key('j'));
    assert!(!app.follow, "moving stops following");
    assert!(!screen(&app, 100, 30).contains("FOLLOW"));
    update(&mut app, key('k'));
    assert!(!app.follow, "back on the top row by hand is not following");
    // Without follow, a newer receipt pushes the selection's receipt down and it stays on it.
    let newer = |n: u64| {
        let mut fresh = page(5, 0, 5);
        for k in 0..n {
            let r = receipt(70 + k, "page.fill", "completed", Some(true), None, 0);
            fresh["items"].as_array_mut().unwrap().insert(0, r);
        }
        fresh["total"] = json!(5 + n);
        fresh
    };
    let seq = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset: 0,
            seq,
            reply: Ok(newer(1)),
        },
    );
    assert_eq!(app.selected_receipt().unwrap().request_id, id(0));
    // f: back to the newest row, and it stays there as more arrive.
    let read = update(&mut app, key('f'));
    assert!(matches!(read, Some(Effect::FetchPage { .. })), "{read:?}");
    let Some(Effect::FetchPage { seq, .. }) = read else {
        unreachable!()
    };
    update(
        &mut app,
        Action::Page {
            offset: 0,
            seq,
            reply: Ok(newer(1)),
        },
    );
    assert_eq!(app.selected_receipt().unwrap().request_id, id(70));
    assert!(screen(&app, 100, 30).contains("connected · FOLLOW"));
    let seq = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset: 0,
            seq,
            reply: Ok(newer(2)),
        },
    );
    assert_eq!(app.selected_receipt().unwrap().request_id, id(71));
    // Another sort order stops it; f sorts newest first again.
    update(&mut app, key('s'));
    assert!(!app.follow);
    while app.waiting() {
        settle(&mut app, 7);
    }
    update(&mut app, key('f'));
    assert!(app.follow);
    assert_eq!(app.sort, crate::protocol::introspection::Sort::Newest);
    assert!(said(&app).contains("sorted newest first"));
    // f again turns it off.
    while app.waiting() {
        settle(&mut app, 7);
    }
    update(&mut app, key('f'));
    assert!(!app.follow);
}

#[test]
fn y_copies_the_selected_id_with_osc_52() {
    assert_eq!(
        crate::console::run::osc52("abc"),
        "\u{1b}]52;c;YWJj\u{7}",
        "base64 of the text, for the clipboard"
    );
    let mut app = connected(100, 30, 5, 60, 5, true);
    assert_eq!(update(&mut app, key('y')), Some(Effect::Copy(id(0))));
    assert!(said(&app).contains(&format!("copied request {}", id(0))));
    update(&mut app, code(KeyCode::Tab));
    assert_eq!(
        update(&mut app, key('y')),
        Some(Effect::Copy(TASK.into())),
        "the tasks pane copies the task's ID"
    );
}

#[test]
fn a_stray_y_after_a_dialog_never_hides_its_verdict() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key(' '));
    update(&mut app, key('c'));
    update(&mut app, Action::Prepared(Ok(prepared_reply())));
    typed(&mut app, "book full");
    update(&mut app, code(KeyCode::Enter));
    assert!(matches!(
        update(&mut app, key('y')),
        Some(Effect::Commit { .. })
    ));
    // A second y while the commit is out is the dialog's: not queued as a copy.
    assert_eq!(update(&mut app, key('y')), None);
    assert!(app.queued.is_empty(), "{:?}", app.queued);
    let done = json!({"cleared": 2, "tombstones": 6,
        "receipts": {"used": 3, "capacity": 60, "running": 1, "tombstones": 6, "tombstoneCapacity": 1000000}});
    update(&mut app, Action::Committed(Ok(done)));
    assert!(app.outbox.is_empty(), "{:?}", app.outbox);
    assert!(said(&app).starts_with("cleared 2 receipts"));
    // A y pressed on purpose now copies, and the verdict is still the first thing n shows.
    assert!(matches!(update(&mut app, key('y')), Some(Effect::Copy(_))));
    assert!(said(&app).starts_with("copied"));
    update(&mut app, key('n'));
    let Mode::Notice(n) = &app.mode else {
        panic!("{:?}", app.mode)
    };
    assert!(n.text.starts_with("cleared 2 receipts"), "{}", n.text);
    assert!(
        app.history.iter().all(|h| !h.text.starts_with("copied")),
        "a copy's echo is not kept among the verdicts"
    );
}

#[test]
fn a_re_filter_narrows_by_pattern_on_the_console_and_a_bad_one_is_refused() {
    let mut app = connected(100, 30, 5, 60, 5, false);
    update(&mut app, key('/'));
    typed_keys(&mut app, "re:^0000000[03]-");
    let read = update(&mut app, code(KeyCode::Enter));
    assert_eq!(read, None, "Enter keeps the filter applied as typed");
    assert_eq!(app.mode, Mode::Normal);
    let params = app.page_params();
    assert!(
        params["search"].is_null(),
        "the pattern never reaches the host: {params}"
    );
    assert_eq!(params["limit"], 1000);
    settle(&mut app, 5);
    assert_eq!(app.total, 2);
    assert_eq!(app.row(0).unwrap().request_id, id(0));
    assert_eq!(app.row(1).unwrap().request_id, id(3));
    // By method too.
    update(&mut app, code(KeyCode::Esc));
    settle(&mut app, 5);
    update(&mut app, key('/'));
    typed_keys(&mut app, "re:^page\\.(fill|click)$");
    update(&mut app, code(KeyCode::Enter));
    settle(&mut app, 5);
    assert_eq!(app.total, 2, "rows 0 (fill) and 4 (click)");

    update(&mut app, code(KeyCode::Esc));
    settle(&mut app, 5);
    update(&mut app, key('/'));
    typed_keys(&mut app, "re:page.(fill");
    update(&mut app, code(KeyCode::Enter));
    assert_eq!(app.mode, Mode::Filter, "the filter stays open to be fixed");
    assert!(said(&app).contains("unclosed group"), "{}", said(&app));
}

/// The rows of `screen` between the first and the last column.
fn rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .map(|l| l.trim_matches('"').to_owned())
        .collect()
}

/// A console at `cols`×`rows` whose socket directory has a long path.
fn narrow(cols: u16, rows_n: u16) -> App {
    let mut app = connected(cols, rows_n, 45, 60, 45, true);
    app.host_label = "/var/run/polaris/fleet-eu-west-1/host-07/sockets".into();
    app
}

#[test]
fn narrow_layouts_keep_the_socket_path_and_the_method_readable() {
    for (cols, rows_n) in [(72, 20), (80, 24)] {
        let app = narrow(cols, rows_n);
        let text = screen(&app, cols, rows_n);
        let lines = rows(&text);
        let header = &lines[0];
        assert_eq!(header.chars().count(), usize::from(cols), "{header}");
        assert!(header.contains("│ /var/run/pol"), "{header}");
        assert!(header.contains('…'), "the path is cut with …: {header}");
        assert!(header.trim_end().ends_with("FOLLOW"), "{header}");
        // The method column shows whole short names and cuts longer ones with `…`.
        assert!(text.contains("page.fill"), "{text}");
        assert!(text.contains("task.sta…"), "{text}");
        assert!(
            !text.contains("actio ") && !text.contains("expec "),
            "a cut heading ends in …:\n{text}"
        );
        let footer = lines.last().unwrap().trim_end().to_owned();
        assert!(
            crate::console::keymap::footer_hints()
                .iter()
                .any(|(_, h)| footer.ends_with(&format!(" {h}"))),
            "the footer shows whole hints only:\n{text}"
        );
    }
    // No result code is cut.
    assert!(screen(&narrow(80, 24), 80, 24).contains("OUTCOME_UNCERTAIN"));
    let wide = screen(&narrow(120, 36), 120, 36);
    assert!(
        wide.contains(" j   r ") || wide.contains(" j  r "),
        "joins and replays stay where there is room:\n{wide}"
    );
}

#[test]
fn the_help_wraps_at_word_boundaries_at_72_by_20() {
    let mut app = narrow(72, 20);
    update(&mut app, key('?'));
    let mut words = std::collections::HashSet::new();
    for scroll in 0..80 {
        app.overlay_scroll = scroll;
        for line in rows(&screen(&app, 72, 20)) {
            let inside: String = line.chars().skip(1).take(70).collect();
            words.extend(inside.split_whitespace().map(str::to_owned));
        }
    }
    for b in crate::console::keymap::KEYMAP {
        for w in b.help.split_whitespace() {
            assert!(words.contains(w), "{w:?} of {:?} was cut", b.help);
        }
    }
}

#[test]
fn snapshot_72x20() {
    insta::assert_snapshot!(screen(&narrow(72, 20), 72, 20));
}

#[test]
fn snapshot_120x36() {
    insta::assert_snapshot!(screen(&narrow(120, 36), 120, 36));
}

#[test]
fn snapshot_help_72x20() {
    let mut app = narrow(72, 20);
    update(&mut app, key('?'));
    insta::assert_snapshot!(screen(&app, 72, 20));
}

#[test]
fn the_method_column_keeps_nine_characters_at_every_width() {
    for cols in (72..=240u16).step_by(3).chain([73, 79, 80, 81]) {
        let app = narrow(cols, 30);
        let text = screen(&app, cols, 30);
        let header = rows(&text)
            .into_iter()
            .find(|l| l.contains(" request ") && l.contains(" method "))
            .unwrap_or_else(|| panic!("no table header at {cols}:\n{text}"));
        let at = |word: &str| header.find(word).unwrap();
        let width = header[at(" method ")..at(" task ")].chars().count() - 1;
        assert!(
            width >= 9,
            "method {width} wide at {cols} columns:\n{header}"
        );
        assert!(text.contains("page.fill"), "{cols}:\n{text}");
    }
}
