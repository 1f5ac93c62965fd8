//! Prints the table of ratios from the latest `cargo bench --bench budget` run (read from
//! `target/criterion`), without running anything again.

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
