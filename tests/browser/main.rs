//! The browser tests: a real host driving a private headless Chromium against the test site,
//! through the bridge and through `polaris mcp`. Without a browser each test prints one
//! `skipped:` line and passes, unless `POLARIS_REQUIRE_BROWSER=1`.
//!
//! One test binary, so the workspace links once for all of these; each module is one area
//! (`cargo test --test browser browser_tabs::` runs one).

mod browser;
mod browser_evidence;
mod browser_files;
mod browser_mcp;
mod browser_origins;
mod browser_site;
mod browser_tabs;
