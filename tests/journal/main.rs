//! The journal through real `polaris serve` processes: killed, restarted, refused writes,
//! and the records read back.
//!
//! One test binary, so the workspace links once for all of these; each module is one area
//! (`cargo test --test journal journal_serve::` runs one).

mod journal_crash_soak;
mod journal_serve;
