//! Hosts sharing one ledger on a private PostgreSQL: claims, takeovers, health, and the
//! ledger's rows read straight from the server. Without PostgreSQL each test prints one
//! `skipped` line and passes, unless `POLARIS_REQUIRE_POSTGRES=1`.
//!
//! One test binary, so the workspace links once for all of these; each module is one area
//! (`cargo test --test fleet ledger::` runs one).

mod fleet;
mod fleet_health;
mod ledger;
