//! What a replay's lookup in a large receipt book costs, with and without the batch's
//! look-ahead (`Book::look_ahead`), measured on the book alone: the index slot, the entry, the
//! stored request compared byte for byte and the stored reply read, as admission does.
//!
//! `cargo run --release --example book_lookup -- [RECEIPTS] [ROUNDS]` (default 1,000,000 and 5)
//! fills a book with completed `page.fill` receipts, then looks every one up again in a random
//! order, in batches of 64, alternating rounds with and without the look-ahead, and prints the
//! median nanoseconds per lookup of each.

use std::time::Instant;

use polaris::book::{Book, Entry, RequestKey};
use polaris::protocol::{Method, Outcome, StoredRequest};

/// Frames a pipelining client sends together.
const BATCH: usize = 64;
/// The task every receipt acts on.
const TASK: &str = "t-0123456789abcdef0123456789abcdef";

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let mut book = Book::new(n, 0).with_max_bytes(usize::MAX);
    let mut keys = Vec::with_capacity(n);
    let mut requests = Vec::with_capacity(n);
    for i in 0..n {
        let id = uuid::Uuid::new_v4().hyphenated().to_string();
        let key = RequestKey::new(&id);
        let request = format!(
            r##"{{"method":"page.fill","params":{{"target":"#title","taskId":"{TASK}","value":"Hello {i:012}"}}}}"##
        );
        book.insert_running(
            key.clone(),
            StoredRequest::from_text("page.fill", &request, Some(TASK)),
            Method::PageFill,
            Some(TASK.into()),
            0,
        )
        .expect("room for every receipt");
        let reply = serde_json::json!({"filled": "#title", "value": format!("Hello {i:012}")});
        book.complete(&key, Outcome::ok(&reply), 1);
        keys.push(key);
        requests.push(StoredRequest::from_text("page.fill", &request, Some(TASK)));
    }
    // A random order, so consecutive lookups share no cache lines.
    let mut order: Vec<usize> = (0..n).collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        order.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    let mut plain = Vec::new();
    let mut ahead = Vec::new();
    let mut check = 0usize;
    for round in 0..2 * rounds {
        let look_ahead = round % 2 == 1;
        let t0 = Instant::now();
        let mut batch_keys = Vec::with_capacity(BATCH);
        for batch in order.chunks(BATCH) {
            batch_keys.clear();
            batch_keys.extend(batch.iter().map(|&i| keys[i].clone()));
            if look_ahead {
                book.look_ahead(&batch_keys);
            }
            for (key, &i) in batch_keys.iter().zip(batch) {
                if let Entry::Receipt(r) = book.entry(key) {
                    if r.request == requests[i] {
                        check += r.outcome().map_or(0, |o| o.body.len());
                    }
                }
            }
        }
        let ns = t0.elapsed().as_nanos() as f64 / n as f64;
        if look_ahead {
            ahead.push(ns);
        } else {
            plain.push(ns);
        }
    }
    assert!(check > 0, "every lookup found its receipt");
    println!(
        "{n} receipts, batches of {BATCH}: {:.0} ns per lookup one at a time, {:.0} ns with the look-ahead (medians of {rounds})",
        median(&mut plain),
        median(&mut ahead)
    );
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
