//! One console frame with 1,000,000 receipts in the book: the console holds only the visible page
//! (what `receipts.list` returns for the window), so drawing costs the same as with ten.
//!
//! Run: `cargo bench --bench console_frame`.

use criterion::{criterion_group, criterion_main, Criterion};
use polaris::console::app::{Action, App};
use polaris::console::update::update;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::widgets::Widget;
use serde_json::{json, Value};

const BOOK: u64 = 1_000_000;

fn row(i: u64, now: i64) -> Value {
    let ts = polaris::protocol::format_millis(now - (i as i64 % 600) * 1000);
    let ok = !i.is_multiple_of(7);
    let mut r = json!({
        "requestId": format!("{i:08x}-0000-4000-8000-{i:012x}"), "method": "page.fill",
        "taskId": format!("{:08x}-1111-4000-8000-000000000000", i / 4), "state": "completed", "ok": ok,
        "firstSeenAt": ts, "completedAt": ts, "joins": i % 3, "replays": i % 5, "clearable": ok
    });
    if !ok {
        r["code"] = json!("OUTCOME_UNCERTAIN");
        r["refusal"] = json!("unverified_outcome");
    }
    r
}

fn app_with_a_million(cols: u16, rows: u16) -> App {
    let now = polaris::protocol::now_millis();
    let mut app = App::new("/tmp/polaris-bench", now);
    update(&mut app, Action::Resize(cols, rows));
    update(&mut app, Action::Connected);
    let tasks: Vec<Value> = (0..50)
        .map(|i| json!({"taskId": format!("{i:08x}-2222-4000-8000-000000000000"), "title": format!("order {i}"),
                        "state": "running", "createdAt": polaris::protocol::format_millis(now), "updatedAt": polaris::protocol::format_millis(now)}))
        .collect();
    update(
        &mut app,
        Action::Snapshot(json!({
            "runId": "5f3e2d1c-aaaa-4000-8000-000000000000", "startedAt": polaris::protocol::format_millis(now - 3_600_000),
            "seq": 1, "receipts": {"used": BOOK, "capacity": BOOK, "running": 3, "tombstones": 0, "tombstoneCapacity": BOOK},
            "counters": {"executions": BOOK, "replays": 12_345, "rejectedCapacity": 77}, "tasks": tasks, "pending": []
        })),
    );
    // The window in the middle of the book, as receipts.list returns it.
    let offset = BOOK / 2;
    let items: Vec<Value> = (offset..offset + u64::from(app.visible_rows))
        .map(|i| row(i, now))
        .collect();
    let seq = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset: 0,
            seq,
            reply: Ok(json!({"total": BOOK, "items": []})),
        },
    );
    app.selected = offset;
    app.scroll = offset;
    let seq = app.page_seq();
    update(
        &mut app,
        Action::Page {
            offset,
            seq,
            reply: Ok(json!({"total": BOOK, "items": items})),
        },
    );
    for s in 0..180 {
        update(&mut app, Action::Tick(now - (180 - s) * 1000));
        for _ in 0..(s % 9) {
            update(
                &mut app,
                Action::Event(json!({"event": "receipt.created", "seq": 2 + s, "data": {}})),
            );
        }
    }
    app
}

fn frame(c: &mut Criterion) {
    for (cols, rows) in [(80u16, 24u16), (200, 60)] {
        let app = app_with_a_million(cols, rows);
        let area = Rect::new(0, 0, cols, rows);
        let mut buf = Buffer::empty(area);
        c.bench_function(
            &format!("console frame {cols}x{rows}, 1,000,000 receipts"),
            |b| {
                b.iter(|| {
                    buf.reset();
                    (&app).render(area, &mut buf);
                })
            },
        );
        assert!(
            buf.content().iter().any(|cell| cell.symbol() == "1"),
            "the frame was drawn"
        );
    }
}

criterion_group!(benches, frame);
criterion_main!(benches);
