//! The host's state in memory: the receipt book ([`book`]), the tasks with their pending
//! outcomes ([`tasks`]), and the operator's live feed of their changes ([`events`]).
//!
//! Nothing here knows how a request arrives or how an action is carried out; the rules that
//! change this state live in `polaris-host`, and what survives a crash in `polaris-journal`.

#![warn(missing_docs)]

pub mod book;
pub mod events;
pub mod tasks;

// The layer below, under the names this crate's modules use for it.
use polaris_protocol::{self as protocol, ids};
