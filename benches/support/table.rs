//! The table of ratios the performance docs quote, built from what the `budget` bench wrote
//! under `target/criterion` (criterion's `estimates.json` per benchmark, plus Polaris's own
//! `polaris-extra/*.json` for the figures criterion does not measure: memory, Redis, the storm).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where criterion writes its results: `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`,
/// else the `target/criterion` next to this executable (`target/release/{deps,examples}/…`).
pub fn criterion_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d).join("criterion");
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(|t| t.join("criterion")))
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// Where the figures criterion does not measure are written.
pub fn extra_dir() -> PathBuf {
    criterion_dir().join("polaris-extra")
}

/// Writes one extra figure set as JSON.
#[allow(dead_code)]
pub fn write_extra(name: &str, value: &Value) {
    let dir = extra_dir();
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(
        dir.join(format!("{name}.json")),
        serde_json::to_vec_pretty(value).unwrap(),
    );
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn extra(name: &str) -> Option<Value> {
    read_json(&extra_dir().join(format!("{name}.json")))
}

/// Median nanoseconds per iteration of `group/id` in the latest run (the median, because other
/// processes on a shared machine add outliers that move a mean).
fn mean_ns(group: &str, id: &str) -> Option<f64> {
    let est = read_json(
        &criterion_dir()
            .join(group)
            .join(id)
            .join("new/estimates.json"),
    )?;
    est["median"]["point_estimate"].as_f64()
}

/// Elements per second of a throughput benchmark in the latest run.
fn rate(group: &str, id: &str) -> Option<f64> {
    let bench = read_json(
        &criterion_dir()
            .join(group)
            .join(id)
            .join("new/benchmark.json"),
    )?;
    let elements = bench["throughput"]["Elements"].as_f64()?;
    Some(elements / (mean_ns(group, id)? / 1e9))
}

fn fmt_time(ns: Option<f64>) -> String {
    match ns {
        Some(ns) if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        Some(ns) => format!("{:.1} µs", ns / 1e3),
        None => "–".into(),
    }
}

fn fmt_rate(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{:.0}k/s", r / 1e3),
        None => "–".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "–",
    }
}

/// The Markdown table of the latest run.
pub fn render() -> String {
    let mut out = String::new();
    let mut row =
        |what: &str, value: String, baseline: &str, r: String, budget: &str, met: Option<bool>| {
            let _ = writeln!(
                out,
                "| {what} | {value} | {baseline} | {r} | {budget} | {} |",
                verdict(met)
            );
        };
    let _ = &mut row;
    let mut head = String::new();
    let _ = writeln!(
        head,
        "| measure | Polaris | baseline (same run) | ratio | budget | |"
    );
    let _ = writeln!(head, "|---|---|---|---|---|---|");

    // Round trips, each against the raw echo.
    let echo = mean_ns("round_trip", "raw_echo");
    let json_echo = mean_ns("round_trip", "json_echo");
    row(
        "round trip: JSON echo",
        fmt_time(json_echo),
        &format!("raw echo {}", fmt_time(echo)),
        ratio(json_echo, echo).map_or("–".into(), |r| format!("{r:.2}×")),
        "",
        None,
    );
    for (id, name, budget) in [
        ("host_hello", "round trip: host.hello", None),
        ("replay", "round trip: replayed receipt", Some(1.3)),
        ("fresh_fill", "round trip: fresh page.fill", None),
    ] {
        let t = mean_ns("round_trip", id);
        let r = ratio(t, echo);
        row(
            name,
            fmt_time(t),
            &format!("raw echo {}", fmt_time(echo)),
            r.map_or("–".into(), |r| format!("{r:.2}×")),
            &budget.map_or(String::new(), |b| format!("≤ {b}×")),
            budget.and_then(|b| r.map(|r| r <= b)),
        );
    }

    // Throughput against the JSON echo and Redis SET NX.
    let redis = extra("redis");
    for clients in [1u32, 8, 32] {
        let id = format!("{clients}_clients");
        let polaris = rate("throughput_fresh_fill", &id);
        let jecho = rate("throughput_json_echo", &id);
        let r = ratio(polaris, jecho);
        let last = clients == 32;
        row(
            &format!("throughput, {clients} client(s) × 64 in flight: fresh page.fill"),
            fmt_rate(polaris),
            &format!("JSON echo {}", fmt_rate(jecho)),
            r.map_or("–".into(), |r| format!("{:.0} %", r * 100.0)),
            if last { "≥ 50 %" } else { "" },
            if last { r.map(|r| r >= 0.5) } else { None },
        );
        let redis_rate = redis.as_ref().and_then(|v| v[id.as_str()].as_f64());
        match &redis {
            Some(v) if v["installed"].as_bool() == Some(true) => {
                let r = ratio(polaris, redis_rate);
                row(
                    &format!("throughput, {clients} client(s): receipts vs Redis SET NX keys"),
                    fmt_rate(polaris),
                    &format!("Redis SET NX {}", fmt_rate(redis_rate)),
                    r.map_or("–".into(), |r| format!("{:.0} %", r * 100.0)),
                    if last { "≥ 100 %" } else { "" },
                    if last { r.map(|r| r >= 1.0) } else { None },
                );
            }
            _ if last => row(
                "throughput vs Redis SET NX",
                "–".into(),
                "redis-server not installed: row skipped",
                "–".into(),
                "≥ 100 %",
                None,
            ),
            _ => {}
        }
    }

    // The storm.
    if let Some(storm) = extra("storm") {
        let t = mean_ns("duplicate_storm", "10000_copies");
        row(
            "duplicate storm: 10,000 simultaneous copies of one request",
            format!("{} to the last reply", fmt_time(t)),
            &format!("executions per storm: {}", storm["executions_per_storm"]),
            "–".into(),
            "exactly 1 execution",
            storm["executions_per_storm"].as_u64().map(|n| n == 1),
        );
    }

    // Memory and growth.
    if let Some(mem) = extra("memory") {
        let per_receipt = mem["receipt_bytes"]["1000000"].as_f64();
        let per_tomb = mem["tombstone_bytes"]["1000000"].as_f64();
        row(
            "book memory per completed receipt (beyond its reply), 1,000,000 receipts",
            per_receipt.map_or("–".into(), |b| format!("{b:.0} B")),
            "",
            "–".into(),
            "≤ 400 B",
            per_receipt.map(|b| b <= 400.0),
        );
        row(
            "book memory per tombstone, 1,000,000 tombstones",
            per_tomb.map_or("–".into(), |b| format!("{b:.0} B")),
            "",
            "–".into(),
            "≤ 64 B",
            per_tomb.map(|b| b <= 64.0),
        );
        let small = mem["receipt_bytes"]["1000"].as_f64();
        row(
            "growth: memory per receipt, 1,000 → 1,000,000 receipts",
            format!(
                "{} → {}",
                small.map_or("–".into(), |b| format!("{b:.0} B")),
                per_receipt.map_or("–".into(), |b| format!("{b:.0} B"))
            ),
            "",
            ratio(per_receipt, small).map_or("–".into(), |r| format!("{r:.2}×")),
            "linear (per-receipt cost flat)",
            None,
        );
    }
    let g_small = mean_ns("growth_replay", "1000_receipts");
    let g_big = mean_ns("growth_replay", "1000000_receipts");
    if g_small.is_some() || g_big.is_some() {
        row(
            "growth: replay round trip, 1,000 → 1,000,000 receipts",
            format!("{} → {}", fmt_time(g_small), fmt_time(g_big)),
            &format!("raw echo {}", fmt_time(echo)),
            ratio(g_big, g_small).map_or("–".into(), |r| format!("{r:.2}×")),
            "flat",
            None,
        );
    }
    // Written by `cargo bench --bench subscriber` (it runs after this bench in `cargo bench`).
    let quiet = rate("subscriber_cost_fresh_fill", "none");
    let console = rate("subscriber_cost_fresh_fill", "console");
    let full = rate("subscriber_cost_fresh_fill", "reading");
    if quiet.is_some() || console.is_some() {
        let drop = ratio(console, quiet).map(|r| 1.0 - r);
        row(
            "subscriber overhead: 32 clients, fresh page.fill, one live console (coalesced) vs none",
            fmt_rate(console),
            &format!("no subscriber {}", fmt_rate(quiet)),
            drop.map_or("–".into(), |d| format!("{:+.1} % lower", d * 100.0)),
            "≤ 5 % lower",
            drop.map(|d| d <= 0.05),
        );
    }
    if quiet.is_some() || full.is_some() {
        let drop = ratio(full, quiet).map(|r| 1.0 - r);
        row(
            "full event stream: 32 clients, fresh page.fill, one subscriber reading every event vs none",
            fmt_rate(full),
            &format!("no subscriber {}", fmt_rate(quiet)),
            drop.map_or("–".into(), |d| format!("{:+.1} % lower", d * 100.0)),
            "– (measured)",
            None,
        );
    }
    // Written by `cargo bench --bench console_frame`: one frame per terminal size.
    let mut frames: Vec<(String, f64)> = std::fs::read_dir(criterion_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let est = read_json(&e.path().join("new/estimates.json"))?;
            name.starts_with("console frame")
                .then_some((name, est["median"]["point_estimate"].as_f64()?))
        })
        .collect();
    frames.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, ns) in frames {
        row(
            &format!("{name} (one frame)"),
            fmt_time(Some(ns)),
            "",
            "–".into(),
            "≤ 5 ms",
            Some(ns <= 5e6),
        );
    }
    head + &out
}
