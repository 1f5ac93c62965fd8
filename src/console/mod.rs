//! `polaris console`: the operator's live monitor of a host.
//!
//! The files, from the bottom up (each imports only files above it in this list):
//! - `messages` (what flows into `update` and out of it), `filter` (the filter line's
//!   grammar) and `keymap` (the one table of keys);
//! - `app`: the state, which only `update` changes;
//! - `layout`, `text`, `theme`: the screen's geometry, the words and numbers shown, the styles;
//! - `input` (keys, through `keymap`) and `update` (everything else): how the state changes;
//! - `panes` and `overlays`, drawn by `ui`: how the state is drawn;
//! - `run`: the one task that owns the [`app::App`], ties `update` to `ui` and the network
//!   side (`net`), and restores the terminal on quit, on error and on panic;
//! - `demo`: a host with simulated agents, watched through `run`.

pub mod app;
pub mod demo;
pub mod filter;
mod input;
pub mod keymap;
pub mod layout;
mod messages;
pub mod net;
mod overlays;
mod panes;
mod run;
pub mod text;
mod theme;
pub mod ui;
pub mod update;

pub use run::{color_wanted, run, Access};

#[cfg(test)]
mod tests;
