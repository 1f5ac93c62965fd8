//! One host process per test through the bridge and introspection sockets: the rules, the
//! limits, the wire's types, the outcomes left uncertain, and the test site.
//!
//! One test binary, so the workspace links once for all of these; each module is one area
//! (`cargo test --test host webapp_site::` runs one).

mod host;
mod introspect;
mod limits_bytes;
mod limits_clear;
mod limits_input;
mod limits_wire;
mod one_at_a_time;
mod page_vocabulary;
mod serve;
mod uncertain;
mod webapp_site;
mod wire_types;
