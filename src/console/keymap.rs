//! One table of keys: it drives dispatch, the footer hints and the `?` help overlay, so what the
//! screen promises is exactly what the keys do.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What an operator can ask for with one key in the normal view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyCommand {
    /// Leave the console and restore the terminal.
    Quit,
    /// Show or hide the key help.
    Help,
    /// Move the selection up one row.
    Up,
    /// Move the selection down one row.
    Down,
    /// Move the selection up one page.
    PageUp,
    /// Move the selection down one page.
    PageDown,
    /// Jump to the first row.
    Top,
    /// Jump to the last row.
    Bottom,
    /// Switch between the receipts, tasks and blocked panes (and the hosts pane in a fleet).
    NextPane,
    /// Switch panes the other way round (Shift-Tab).
    PrevPane,
    /// Focus the fleet's hosts pane.
    Hosts,
    /// Open the selected receipt's request and reply, or the selected task's history.
    Detail,
    /// Type a filter for the receipt table.
    Filter,
    /// Cycle the receipt table's sort order.
    Sort,
    /// Read the receipt table's sort order from its end.
    Reverse,
    /// Mark or unmark the selected receipt for clearing.
    Mark,
    /// Mark every completed receipt that matches the filter for clearing; space then takes
    /// single rows out.
    MarkAll,
    /// Show the receipts of closed (finished, stopped or interrupted) tasks and mark every
    /// clearable one.
    MarkClosed,
    /// Show only the receipts of the selected row's task (its `task.start` included).
    ThisTask,
    /// Pause or resume live updates.
    Pause,
    /// Prepare a clear of the marked receipts and show the confirmation dialog.
    Clear,
    /// Run the read-only verification of the blocked outcome under the cursor (Blocked pane, or its receipt).
    Verify,
    /// Stop the selected task (a reason and a confirmation first).
    Stop,
    /// Acknowledge the selected uncertain outcome as settled outside Polaris (a reason and a
    /// confirmation first).
    Acknowledge,
    /// Show the audit log (narrowed to the filter, to look up a cleared ID).
    Audit,
    /// Show the current notice whole, wrapped (its line cuts a long one).
    Notice,
    /// Re-read everything from the host.
    Refresh,
    /// Keep the selection on the newest receipt as receipts arrive (newest-first sort), until
    /// the operator moves it.
    Follow,
    /// Copy the selected ID to the clipboard (OSC 52, through the terminal).
    Copy,
    /// Open the `:` command line.
    CommandLine,
    /// Close a view, drop the filter and the marks.
    Back,
}

impl KeyCommand {
    /// Whether the command asks the host to change anything (a `--read-only` console refuses
    /// these): a verification can settle an outcome, the others stop, acknowledge or clear.
    pub fn changes_the_host(self) -> bool {
        matches!(
            self,
            KeyCommand::Clear | KeyCommand::Verify | KeyCommand::Stop | KeyCommand::Acknowledge
        )
    }
}

/// One row of the keymap.
#[derive(Clone, Copy, Debug)]
pub struct Binding {
    /// The key as written in hints, e.g. `"space"`.
    pub label: &'static str,
    /// The keys that trigger it.
    pub keys: &'static [KeyCode],
    /// What it does.
    pub command: KeyCommand,
    /// Short text for the footer; `None` keeps it out of the footer.
    pub hint: Option<&'static str>,
    /// The sentence in the help overlay.
    pub help: &'static str,
}

/// The keymap of the normal view, in the order the help overlay lists it.
pub const KEYMAP: &[Binding] = &[
    Binding {
        label: "q",
        keys: &[KeyCode::Char('q')],
        command: KeyCommand::Quit,
        hint: Some("quit"),
        help: "quit and restore the terminal",
    },
    Binding {
        label: "?",
        keys: &[KeyCode::Char('?')],
        command: KeyCommand::Help,
        hint: Some("help"),
        help: "show or hide this help",
    },
    Binding {
        label: "↑/k",
        keys: &[KeyCode::Up, KeyCode::Char('k')],
        command: KeyCommand::Up,
        hint: None,
        help: "select the previous row",
    },
    Binding {
        label: "↓/j",
        keys: &[KeyCode::Down, KeyCode::Char('j')],
        command: KeyCommand::Down,
        hint: None,
        help: "select the next row",
    },
    Binding {
        label: "PgUp",
        keys: &[KeyCode::PageUp],
        command: KeyCommand::PageUp,
        hint: None,
        help: "one page up",
    },
    Binding {
        label: "PgDn",
        keys: &[KeyCode::PageDown],
        command: KeyCommand::PageDown,
        hint: None,
        help: "one page down",
    },
    Binding {
        label: "g/Home",
        keys: &[KeyCode::Char('g'), KeyCode::Home],
        command: KeyCommand::Top,
        hint: None,
        help: "first row",
    },
    Binding {
        label: "G/End",
        keys: &[KeyCode::Char('G'), KeyCode::End],
        command: KeyCommand::Bottom,
        hint: None,
        help: "last row",
    },
    Binding {
        label: "tab",
        keys: &[KeyCode::Tab],
        command: KeyCommand::NextPane,
        hint: Some("pane"),
        help: "switch pane: receipts, tasks, blocked outcomes (, hosts in a fleet)",
    },
    Binding {
        label: "shift-tab",
        keys: &[KeyCode::BackTab],
        command: KeyCommand::PrevPane,
        hint: None,
        help: "switch pane the other way round",
    },
    Binding {
        label: "H",
        keys: &[KeyCode::Char('H')],
        command: KeyCommand::Hosts,
        hint: None,
        help: "focus the fleet's hosts pane (a host run with --ledger); enter tells one whole",
    },
    Binding {
        label: "enter",
        keys: &[KeyCode::Enter],
        command: KeyCommand::Detail,
        hint: Some("detail"),
        help: "a receipt's canonical request and stored reply, or a task's history",
    },
    Binding {
        label: "/",
        keys: &[KeyCode::Char('/')],
        command: KeyCommand::Filter,
        hint: Some("filter"),
        help: "filter: text, task:running|blocked|closed, result:ok|error|CODE, age:>10m, re:PATTERN (ID or method)",
    },
    Binding {
        label: "s",
        keys: &[KeyCode::Char('s')],
        command: KeyCommand::Sort,
        hint: None,
        help: "sort: newest, oldest, state, method, task",
    },
    Binding {
        label: "S",
        keys: &[KeyCode::Char('S')],
        command: KeyCommand::Reverse,
        hint: None,
        help: "reverse the sort (oldest first within each group, the last group first)",
    },
    Binding {
        label: "space",
        keys: &[KeyCode::Char(' ')],
        command: KeyCommand::Mark,
        hint: Some("mark"),
        help: "mark or unmark the selected receipt for clearing (after a: take it out of all)",
    },
    Binding {
        label: "a",
        keys: &[KeyCode::Char('a')],
        command: KeyCommand::MarkAll,
        hint: Some("all"),
        help: "mark all clearable matching the filter; then space excludes rows (a again: unmark)",
    },
    Binding {
        label: "D",
        keys: &[KeyCode::Char('D')],
        command: KeyCommand::MarkClosed,
        hint: None,
        help: "show closed (finished, stopped, interrupted) tasks' receipts and mark the clearable ones",
    },
    Binding {
        label: "p",
        keys: &[KeyCode::Char('p')],
        command: KeyCommand::Pause,
        hint: None,
        help: "pause live updates (the table and panes stay as they are; the header says PAUSED); p again resumes",
    },
    Binding {
        label: "t",
        keys: &[KeyCode::Char('t')],
        command: KeyCommand::ThisTask,
        hint: None,
        help: "this task: only the selected row's task's receipts, its task.start included (then a, c clears them)",
    },
    Binding {
        label: "c",
        keys: &[KeyCode::Char('c')],
        command: KeyCommand::Clear,
        hint: Some("clear"),
        help: "prepare a clear of the marked receipts (a dialog confirms)",
    },
    Binding {
        label: "v",
        keys: &[KeyCode::Char('v')],
        command: KeyCommand::Verify,
        hint: Some("verify"),
        help: "read-only verification of the blocked outcome under the cursor (Blocked pane, or its receipt)",
    },
    Binding {
        label: "x",
        keys: &[KeyCode::Char('x')],
        command: KeyCommand::Stop,
        hint: None,
        help: "stop the selected task (tasks pane) or the blocked outcome's task; asks why",
    },
    Binding {
        label: "A",
        keys: &[KeyCode::Char('A')],
        command: KeyCommand::Acknowledge,
        hint: None,
        help: "acknowledge an uncertain outcome settled outside Polaris; asks why",
    },
    Binding {
        label: "L",
        keys: &[KeyCode::Char('L')],
        command: KeyCommand::Audit,
        hint: None,
        help: "the audit log: clears, stops and acknowledgements, who and why (the filter finds an ID)",
    },
    Binding {
        label: "n",
        keys: &[KeyCode::Char('n')],
        command: KeyCommand::Notice,
        hint: None,
        help: "the last notices whole, newest first: verdicts stay here once the line moves on",
    },
    Binding {
        label: "r",
        keys: &[KeyCode::Char('r')],
        command: KeyCommand::Refresh,
        hint: None,
        help: "re-read everything from the host",
    },
    Binding {
        label: "f",
        keys: &[KeyCode::Char('f')],
        command: KeyCommand::Follow,
        hint: None,
        help: "follow the newest receipt (sorts newest first; the header says FOLLOW); moving the selection stops it, f again too",
    },
    Binding {
        label: "y",
        keys: &[KeyCode::Char('y')],
        command: KeyCommand::Copy,
        hint: None,
        help: "copy the selected ID (receipt, task, blocked request or host) to the clipboard through the terminal (OSC 52)",
    },
    Binding {
        label: ":",
        keys: &[KeyCode::Char(':')],
        command: KeyCommand::CommandLine,
        hint: None,
        help: "command line: clear task ID-PREFIX, verify, audit, q, help (below); esc cancels",
    },
    Binding {
        label: "esc",
        keys: &[KeyCode::Esc],
        command: KeyCommand::Back,
        hint: None,
        help: "close a view; drop the filter and the marks",
    },
];

/// One command of the `:` command line.
#[derive(Clone, Copy, Debug)]
pub struct LineCommand {
    /// Its name, as typed (any unambiguous prefix also runs it).
    pub name: &'static str,
    /// What follows the name, as the help writes it (`""` for nothing).
    pub args: &'static str,
    /// The key command it runs, whose rules (`--read-only`, the dialogs) it shares.
    pub command: KeyCommand,
    /// The sentence in the help overlay.
    pub help: &'static str,
}

/// The commands of the `:` command line, in the order the help lists them.
pub const LINE_COMMANDS: &[LineCommand] = &[
    LineCommand {
        name: "clear",
        args: "task ID-PREFIX",
        command: KeyCommand::Clear,
        help: "prepare the clear of one task's clearable receipts, as t a c does (a reason and y confirm)",
    },
    LineCommand {
        name: "verify",
        args: "",
        command: KeyCommand::Verify,
        help: "verify the selected blocked outcome, as v does",
    },
    LineCommand {
        name: "audit",
        args: "",
        command: KeyCommand::Audit,
        help: "the audit log, as L shows it",
    },
    LineCommand {
        name: "q",
        args: "",
        command: KeyCommand::Quit,
        help: "quit (also :quit)",
    },
    LineCommand {
        name: "quit",
        args: "",
        command: KeyCommand::Quit,
        help: "quit",
    },
    LineCommand {
        name: "help",
        args: "",
        command: KeyCommand::Help,
        help: "this help",
    },
];

/// Why a typed command line does not name one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineError {
    /// Nothing was typed.
    Empty,
    /// No command has this name or starts with it.
    Unknown(String),
    /// More than one command starts with it: their names.
    Ambiguous(String, Vec<&'static str>),
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = LINE_COMMANDS.iter().map(|c| c.name).collect();
        match self {
            LineError::Empty => write!(f, "type a command: {}", names.join(", ")),
            LineError::Unknown(w) => write!(
                f,
                "unknown command :{w} — the commands are {}; nothing was done",
                names.join(", ")
            ),
            LineError::Ambiguous(w, of) => write!(
                f,
                ":{w} could be {}; type more of it — nothing was done",
                of.join(" or ")
            ),
        }
    }
}

/// The command `word` names: its exact name, else the one command it is a prefix of.
pub fn line_command(word: &str) -> Result<&'static LineCommand, LineError> {
    named_in(LINE_COMMANDS, word)
}

/// The command of `table` that `word` names (see [`line_command`]).
fn named_in<'a>(table: &'a [LineCommand], word: &str) -> Result<&'a LineCommand, LineError> {
    if word.is_empty() {
        return Err(LineError::Empty);
    }
    if let Some(c) = table.iter().find(|c| c.name == word) {
        return Ok(c);
    }
    let starting: Vec<&LineCommand> = table.iter().filter(|c| c.name.starts_with(word)).collect();
    match starting.as_slice() {
        [] => Err(LineError::Unknown(word.to_owned())),
        [one] => Ok(one),
        many => Err(LineError::Ambiguous(
            word.to_owned(),
            many.iter().map(|c| c.name).collect(),
        )),
    }
}

/// The command bound to `key` in the normal view. Ctrl-C always quits.
pub fn command_for(key: &KeyEvent) -> Option<KeyCommand> {
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return (key.code == KeyCode::Char('c')).then_some(KeyCommand::Quit);
    }
    KEYMAP
        .iter()
        .find(|b| b.keys.contains(&key.code))
        .map(|b| b.command)
}

/// The footer line: `key hint` pairs of the bindings that have a hint (long key names
/// shortened so the line fits 80 columns).
pub fn footer_hints() -> Vec<(&'static str, &'static str)> {
    KEYMAP
        .iter()
        .filter_map(|b| {
            let key = match b.label {
                "enter" => "↵",
                "space" => "spc",
                other => other,
            };
            b.hint.map(|h| (key, h))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_maps_to_exactly_one_command() {
        let mut seen = std::collections::HashSet::new();
        for b in KEYMAP {
            for k in b.keys {
                assert!(seen.insert(*k), "{k:?} is bound twice");
                let ev = KeyEvent::new(*k, KeyModifiers::NONE);
                assert_eq!(command_for(&ev), Some(b.command));
            }
        }
        assert_eq!(
            command_for(&KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(KeyCommand::Quit)
        );
        assert_eq!(
            command_for(&KeyEvent::new(KeyCode::Char('z'), KeyModifiers::NONE)),
            None
        );
    }

    #[test]
    fn a_command_is_its_name_or_an_unambiguous_prefix() {
        assert_eq!(line_command("clear").unwrap().command, KeyCommand::Clear);
        assert_eq!(line_command("c").unwrap().command, KeyCommand::Clear);
        assert_eq!(line_command("ver").unwrap().command, KeyCommand::Verify);
        // `q` is a name of its own, though `quit` starts with it.
        assert_eq!(line_command("q").unwrap().name, "q");
        assert_eq!(line_command("qu").unwrap().name, "quit");
        assert_eq!(line_command("").unwrap_err(), LineError::Empty);
        let unknown = line_command("stop").unwrap_err();
        assert_eq!(unknown, LineError::Unknown("stop".into()));
        assert!(unknown
            .to_string()
            .contains("clear, verify, audit, q, quit, help"));
        // A prefix of two names runs neither.
        let table = [
            LineCommand {
                name: "stop",
                ..LINE_COMMANDS[0]
            },
            LineCommand {
                name: "status",
                ..LINE_COMMANDS[0]
            },
        ];
        let both = named_in(&table, "st").unwrap_err();
        assert_eq!(
            both,
            LineError::Ambiguous("st".into(), vec!["stop", "status"])
        );
        assert!(both.to_string().contains(":st could be stop or status"));
        // Every command the line runs is one of the keys', so --read-only refuses the same.
        for c in LINE_COMMANDS {
            assert!(KEYMAP.iter().any(|b| b.command == c.command), "{}", c.name);
        }
    }
}
