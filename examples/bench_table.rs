//! Prints the table of ratios from the latest `cargo bench --bench budget` run (read from
//! `target/criterion`), without running anything again. Those benches run the host in-process
//! and are kept for profiling; the figures Polaris quotes come from
//! `cargo run --release --example load -- --table`.

#[path = "../benches/support/table.rs"]
mod table;

fn main() {
    let machine = std::fs::read(table::extra_dir().join("machine.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    if let Some(m) = machine {
        println!(
            "Machine: {} ({} cores)\n",
            m["cpu"].as_str().unwrap_or("?"),
            m["cores"]
        );
    } else {
        println!(
            "No benchmark results under {}; run `cargo bench --bench budget` first.\n",
            table::criterion_dir().display()
        );
    }
    println!("{}", table::render());
}
