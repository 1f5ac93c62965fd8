//! The release `polaris` binary the examples drive as users run it.

use std::path::{Path, PathBuf};

/// `target/release/polaris`, beside the running example; exits 2 with what to run when it is
/// not built.
pub fn polaris_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("polaris"))
        .expect("target directory");
    if !bin.exists() {
        eprintln!(
            "{} is missing: run `cargo build --release` first",
            bin.display()
        );
        std::process::exit(2);
    }
    bin
}
