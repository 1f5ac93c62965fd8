//! The console in a pseudo-terminal: the real binary on a real host (and a fleet host), its
//! screen read as a terminal would draw it.
//!
//! One test binary, so the workspace links once for all of these; each module is one area
//! (`cargo test --test console console_keys::` runs one).

mod console_blocked;
mod console_e2e;
mod console_fleet;
mod console_keys;
