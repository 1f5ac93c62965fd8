//! JavaScript dialogs (`alert`, `confirm`, `prompt`, `beforeunload`): how each is answered and
//! the record of them (SPEC §14).
//!
//! A dialog stops the page's JavaScript until it is answered, and with it every read, watch and
//! verification of the page. So no dialog waits for anyone: the protocol reader answers it the
//! moment `Page.javascriptDialogOpening` arrives ([`super::cdp`]), with what [`Dialogs::answer`]
//! decides. The running action's `dialog` answer applies to a dialog whose message matches it;
//! every other dialog is dismissed, the answer that commits nothing (a `confirm` says no, a
//! `prompt` is cancelled, a `beforeunload` keeps the page). Each answer is recorded for the task
//! and handed to the host by [`Dialogs::take`], which puts them in the reply and the history.

use std::sync::{Arc, Mutex};

use crate::protocol::results::DialogSeen;
use crate::protocol::DialogAnswer;

/// The most dialogs kept between two takes: a page that opens alerts in a loop must not grow
/// the host's memory. The rest are counted and logged.
const MAX_KEPT: usize = 64;

/// The longest dialog message kept, in bytes (a page may alert megabytes).
const MAX_MESSAGE_BYTES: usize = 1024;

/// How the reader answers one dialog (`Page.handleJavaScriptDialog`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// OK (`true`) or Cancel.
    pub accept: bool,
    /// The text a `prompt` is answered with, when accepted.
    pub prompt_text: Option<String>,
}

/// One task's dialogs: the answer its running action asked for, and those answered since the
/// host last took them. Shared by every page the task has had (a reopened page keeps the
/// record), and by the protocol reader that answers them.
#[derive(Debug, Default)]
pub struct Dialogs {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The running action's answer, while it runs.
    asked: Option<DialogAnswer>,
    seen: Vec<DialogSeen>,
    /// Dialogs answered but not kept (past [`MAX_KEPT`]).
    dropped: u64,
}

/// While it lives, dialogs are answered as an action asked; dropped when the action ends.
pub struct Asked<'a> {
    dialogs: &'a Dialogs,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.dialogs.lock().asked = None;
    }
}

impl Dialogs {
    /// An empty record.
    pub fn new() -> Arc<Dialogs> {
        Arc::new(Dialogs::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("dialogs lock")
    }

    /// Answers dialogs as `answer` says (when given) until the returned guard is dropped: set
    /// just before an action dispatches its first input event, dropped when the action ends.
    pub fn asked(&self, answer: Option<&DialogAnswer>) -> Asked<'_> {
        self.lock().asked = answer.cloned();
        Asked { dialogs: self }
    }

    /// Decides how to answer a dialog the page just opened, and records it. `kind` is the
    /// protocol's `type`; `default_prompt` is what a `prompt` offers, which is what a person
    /// pressing OK without typing would send.
    pub fn answer(&self, kind: &str, message: &str, default_prompt: &str) -> Reply {
        let mut st = self.lock();
        let reply = match &st.asked {
            Some(a) if a.matches(message) => Reply {
                accept: a.accept,
                prompt_text: (a.accept && kind == "prompt").then(|| {
                    a.prompt_text
                        .clone()
                        .unwrap_or_else(|| default_prompt.to_owned())
                }),
            },
            // Nobody asked, or the action asked about another dialog: the answer that commits
            // nothing.
            _ => Reply {
                accept: false,
                prompt_text: None,
            },
        };
        if st.seen.len() < MAX_KEPT {
            st.seen.push(DialogSeen {
                answer: if reply.accept {
                    "accepted"
                } else {
                    "dismissed"
                }
                .to_owned(),
                message: clip(message),
                prompt_text: reply.prompt_text.as_deref().map(clip),
                kind: kind.to_owned(),
            });
        } else {
            st.dropped += 1;
        }
        reply
    }

    /// The dialogs answered since the last take, oldest first.
    pub fn take(&self) -> Vec<DialogSeen> {
        let mut st = self.lock();
        if st.dropped > 0 {
            tracing::warn!(
                dropped = st.dropped,
                kept = MAX_KEPT,
                "a page opened more dialogs than are kept between two replies; all were dismissed or answered as asked"
            );
            st.dropped = 0;
        }
        std::mem::take(&mut st.seen)
    }
}

/// A message cut to [`MAX_MESSAGE_BYTES`] at a character boundary.
fn clip(s: &str) -> String {
    if s.len() <= MAX_MESSAGE_BYTES {
        return s.to_owned();
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::DialogMessage;

    fn accept(contains: Option<&str>, prompt: Option<&str>) -> DialogAnswer {
        DialogAnswer {
            accept: true,
            prompt_text: prompt.map(str::to_owned),
            message: contains.map(|c| DialogMessage {
                contains: c.to_owned(),
            }),
        }
    }

    #[test]
    fn unasked_dialogs_are_dismissed_and_asked_ones_answered_while_the_action_runs() {
        let d = Dialogs::new();
        assert!(!d.answer("confirm", "Delete?", "").accept);
        let asked = accept(Some("Delete"), None);
        {
            let _g = d.asked(Some(&asked));
            assert!(d.answer("confirm", "Delete the item?", "").accept);
            // Another dialog than the one asked about is dismissed.
            assert!(!d.answer("confirm", "Leave the page?", "").accept);
        }
        assert!(
            !d.answer("confirm", "Delete again?", "").accept,
            "the action ended"
        );
        let seen = d.take();
        let answers: Vec<&str> = seen.iter().map(|s| s.answer.as_str()).collect();
        assert_eq!(answers, ["dismissed", "accepted", "dismissed", "dismissed"]);
        assert!(d.take().is_empty());
    }

    #[test]
    fn prompts_get_the_text_asked_for_or_their_default() {
        let d = Dialogs::new();
        let with = accept(None, Some("Chores"));
        let _g = d.asked(Some(&with));
        let r = d.answer("prompt", "Name?", "Groceries");
        assert_eq!(r.prompt_text.as_deref(), Some("Chores"));
        drop(_g);
        let without = accept(None, None);
        let _g = d.asked(Some(&without));
        let r = d.answer("prompt", "Name?", "Groceries");
        assert_eq!(r.prompt_text.as_deref(), Some("Groceries"));
        assert_eq!(d.answer("alert", "Hi", "").prompt_text, None);
        assert_eq!(d.take()[0].prompt_text.as_deref(), Some("Chores"));
    }

    #[test]
    fn a_flood_of_dialogs_is_bounded() {
        let d = Dialogs::new();
        let long = "x".repeat(5000);
        for _ in 0..1000 {
            d.answer("alert", &long, "");
        }
        let seen = d.take();
        assert_eq!(seen.len(), MAX_KEPT);
        assert!(seen[0].message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
    }
}
