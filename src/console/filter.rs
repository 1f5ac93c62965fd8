//! The receipt filter typed after `/`: free text the host searches (request ID, method, task
//! ID, error code), and tokens the console applies itself, as k9s and lazygit read filters:
//!
//! - `task:running`, `task:blocked`, `task:closed` (finished, stopped or interrupted) — by the state of the
//!   receipt's task;
//! - `result:ok`, `result:error`, `result:ACTION_FAILED` (any error code) — by the stored result;
//! - `age:>10m`, `age:<30s` (s, m, h, d) — by how long ago the receipt was first seen;
//! - `re:PATTERN` — a regular expression (the `regex` crate's syntax, no spaces: write `\s`)
//!   the request ID or the method must match.
//!
//! With a task, age or `re:` token, or an error code, the console reads the first
//! [`LOCAL_WINDOW`] receipts the host matches and narrows them itself. A pattern never
//! reaches the host: the host's search is plain text, so no pattern can slow it, and the
//! console's matching is linear in the text (the `regex` crate has no backtracking) with the
//! pattern at most [`MAX_PATTERN`] characters and its compiled size bounded.

use std::collections::HashMap;

use crate::protocol::introspection::contains_ignoring_case;
use crate::protocol::introspection::{ReceiptItem, StateFilter};
use crate::protocol::results::TaskState;

/// The most receipts a filter the console applies itself looks at (the host's largest page).
pub const LOCAL_WINDOW: usize = 1000;

/// The longest `re:` pattern read; a longer one is refused.
pub const MAX_PATTERN: usize = 100;

/// The most memory a compiled `re:` pattern may take (a pattern like `\w{1000}{1000}` is
/// refused with the regex crate's own message rather than built).
const PATTERN_BYTES: usize = 1 << 20;

/// A `re:` token: the request ID or the method must match it.
#[derive(Clone, Debug)]
pub struct Pattern(regex::Regex);

impl Pattern {
    /// Compiles `text`, or says why it is refused: too long, or the regex crate's own message.
    pub fn new(text: &str) -> Result<Pattern, String> {
        if text.is_empty() {
            return Err("re: needs a pattern — e.g. re:^page\\.(fill|press)$".to_owned());
        }
        if text.chars().count() > MAX_PATTERN {
            return Err(format!(
                "re: pattern too long ({} characters; at most {MAX_PATTERN})",
                text.chars().count()
            ));
        }
        regex::RegexBuilder::new(text)
            .size_limit(PATTERN_BYTES)
            .dfa_size_limit(PATTERN_BYTES)
            .build()
            .map(Pattern)
            .map_err(|e| {
                // The crate's message spans lines (the pattern, a caret, the error): one line.
                let message = e.to_string();
                let said: Vec<&str> = message
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>();
                format!("re:{text} is refused: {}", said.join(" "))
            })
    }

    /// Whether the receipt's request ID or method matches.
    pub fn matches(&self, r: &ReceiptItem) -> bool {
        self.0.is_match(&r.request_id) || self.0.is_match(&r.method)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for Pattern {}

/// Which tasks' receipts a `task:` token keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskStates {
    /// `task:running`.
    Running,
    /// `task:blocked`.
    Blocked,
    /// `task:closed`: finished, stopped, or interrupted (open when a host run stopped: nothing
    /// can act on it any more).
    Closed,
}

/// A `result:` token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResultIs {
    /// `result:ok`.
    Ok,
    /// `result:error`: any error.
    Error,
    /// `result:CODE`: this error code.
    Code(String),
}

/// An `age:` token: older or newer than this many ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgeIs {
    /// `age:>N`.
    Over(i64),
    /// `age:<N`.
    Under(i64),
}

/// A parsed filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The free text, for the host's search.
    pub search: Option<String>,
    /// The `task:` token.
    pub task: Option<TaskStates>,
    /// The `result:` token.
    pub result: Option<ResultIs>,
    /// The `age:` token.
    pub age: Option<AgeIs>,
    /// The `re:` token.
    pub pattern: Option<Pattern>,
    /// `!text` words: receipts whose request ID, method, task ID or code contains one (without
    /// case) are left out.
    pub not: Vec<String>,
    /// A `key:value` word that is no token the console knows, with what to type instead; Enter
    /// refuses the filter while there is one (it would match nothing).
    pub refused: Option<String>,
}

/// What a refused `key:value` word is told.
const TOKENS: &str = "task:running|blocked|closed, result:ok|error|CODE, age:>10m|<30s, re:PATTERN";

/// `10m` as ms.
fn duration_ms(text: &str) -> Option<i64> {
    let (n, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: i64 = n.parse().ok()?;
    let unit = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit)
}

impl Filter {
    /// Reads the typed text; a token that does not read is kept as search text, so what the
    /// operator typed is never silently dropped.
    pub fn parse(text: &str) -> Filter {
        let mut f = Filter::default();
        let mut words = Vec::new();
        for word in text.split_whitespace() {
            let token = match word.split_once(':') {
                Some(("task", "running")) => f.task.replace(TaskStates::Running).is_none(),
                Some(("task", "blocked")) => f.task.replace(TaskStates::Blocked).is_none(),
                Some(("task", "closed")) => f.task.replace(TaskStates::Closed).is_none(),
                Some(("result", "ok")) => f.result.replace(ResultIs::Ok).is_none(),
                Some(("result", "error")) => f.result.replace(ResultIs::Error).is_none(),
                Some(("result", code))
                    if !code.is_empty()
                        && code.chars().all(|c| c.is_ascii_alphabetic() || c == '_') =>
                {
                    f.result
                        .replace(ResultIs::Code(code.to_ascii_uppercase()))
                        .is_none()
                }
                Some(("age", rest)) => {
                    let age = match rest.split_at(rest.len().min(1)) {
                        (">", n) => duration_ms(n).map(AgeIs::Over),
                        ("<", n) => duration_ms(n).map(AgeIs::Under),
                        _ => None,
                    };
                    match age {
                        Some(a) => f.age.replace(a).is_none(),
                        None => {
                            f.refused.get_or_insert_with(|| {
                                format!("age:{rest} does not read — write age:>10m or age:<30s (s, m, h, d)")
                            });
                            true
                        }
                    }
                }
                Some(("re", pattern)) => {
                    match Pattern::new(pattern) {
                        Ok(p) => f.pattern = Some(p),
                        Err(why) => {
                            f.refused.get_or_insert(why);
                        }
                    }
                    true
                }
                Some((key, value)) => {
                    if f.refused.is_none() {
                        f.refused = Some(format!(
                            "unknown filter token {key}:{value} — the tokens are {TOKENS}; other words search IDs, methods and codes, !word leaves them out"
                        ));
                    }
                    true
                }
                None => match word.strip_prefix('!') {
                    Some(not) if !not.is_empty() => {
                        f.not.push(not.to_owned());
                        true
                    }
                    _ => false,
                },
            };
            if !token {
                words.push(word);
            }
        }
        if !words.is_empty() {
            f.search = Some(words.join(" "));
        }
        f
    }

    /// Whether the console narrows the host's matches itself.
    pub fn local(&self) -> bool {
        self.task.is_some()
            || self.age.is_some()
            || self.pattern.is_some()
            || !self.not.is_empty()
            || matches!(self.result, Some(ResultIs::Code(_)))
    }

    /// The `state` the host filters on.
    pub fn state(&self) -> Option<StateFilter> {
        match self.result {
            Some(ResultIs::Ok) => Some(StateFilter::Ok),
            Some(ResultIs::Error | ResultIs::Code(_)) => Some(StateFilter::Error),
            None => None,
        }
    }

    /// Whether `r` passes the tokens the console applies (the host applied the rest).
    pub fn keeps(&self, r: &ReceiptItem, tasks: &HashMap<&str, TaskState>, now: i64) -> bool {
        if let Some(want) = self.task {
            let state = r.task_id.as_deref().and_then(|t| tasks.get(t)).copied();
            let ok = matches!(
                (want, state),
                (TaskStates::Running, Some(TaskState::Running))
                    | (TaskStates::Blocked, Some(TaskState::Blocked))
                    | (
                        TaskStates::Closed,
                        Some(TaskState::Finished | TaskState::Stopped | TaskState::Interrupted)
                    )
            );
            if !ok {
                return false;
            }
        }
        if let Some(ResultIs::Code(code)) = &self.result {
            if !r
                .code
                .is_some_and(|c| c.as_str().eq_ignore_ascii_case(code))
            {
                return false;
            }
        }
        if self.pattern.as_ref().is_some_and(|p| !p.matches(r)) {
            return false;
        }
        let names = |q: &str| {
            contains_ignoring_case(&r.request_id, q)
                || contains_ignoring_case(&r.method, q)
                || r.task_id
                    .as_deref()
                    .is_some_and(|t| contains_ignoring_case(t, q))
                || r.code
                    .is_some_and(|c| contains_ignoring_case(c.as_str(), q))
        };
        if self.not.iter().any(|q| names(q)) {
            return false;
        }
        if let Some(age) = self.age {
            let seen = chrono::DateTime::parse_from_rfc3339(&r.first_seen_at)
                .map(|t| now - t.timestamp_millis())
                .unwrap_or(0);
            match age {
                AgeIs::Over(ms) if seen <= ms => return false,
                AgeIs::Under(ms) if seen >= ms => return false,
                _ => {}
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_and_the_rest_is_searched() {
        let f = Filter::parse("task:closed result:ACTION_FAILED age:>10m fill");
        assert_eq!(f.task, Some(TaskStates::Closed));
        assert_eq!(f.result, Some(ResultIs::Code("ACTION_FAILED".into())));
        assert_eq!(f.age, Some(AgeIs::Over(600_000)));
        assert_eq!(f.search.as_deref(), Some("fill"));
        assert!(f.local());
        assert_eq!(f.state(), Some(StateFilter::Error));
        let plain = Filter::parse("result:ok 064da1");
        assert!(!plain.local());
        assert_eq!(plain.state(), Some(StateFilter::Ok));
        let bogus = Filter::parse("state:running task:bogus");
        assert_eq!(bogus.search, None);
        assert!(bogus
            .refused
            .as_deref()
            .is_some_and(|r| r.contains("unknown filter token state:running")));
        assert!(Filter::parse("age:>5x").refused.is_some());
        let not = Filter::parse("fill !uncertain result:outcome_uncertain");
        assert_eq!(not.not, ["uncertain"]);
        assert_eq!(not.search.as_deref(), Some("fill"));
        assert_eq!(not.result, Some(ResultIs::Code("OUTCOME_UNCERTAIN".into())));
        assert!(not.local());
    }

    fn item(id: &str, method: &str) -> ReceiptItem {
        serde_json::from_value(serde_json::json!({
            "requestId": id, "method": method, "state": "completed", "firstSeenAt": "2026-11-30T02:00:00Z",
            "joins": 0, "replays": 0, "clearable": true
        }))
        .expect("a receipt item")
    }

    #[test]
    fn a_re_token_matches_the_id_or_the_method_and_never_reaches_the_host() {
        let f = Filter::parse("re:^page\\.(fill|press)$ re2");
        assert!(f.refused.is_none(), "{:?}", f.refused);
        assert!(f.local(), "the console applies a pattern itself");
        assert_eq!(
            f.search.as_deref(),
            Some("re2"),
            "only plain text is searched"
        );
        let tasks = HashMap::new();
        assert!(f.keeps(&item("abc", "page.fill"), &tasks, 0));
        assert!(!f.keeps(&item("abc", "page.click"), &tasks, 0));
        assert!(!f.keeps(&item("abc", "page.fillx"), &tasks, 0));
        let by_id = Filter::parse("re:^0+1[0-9a-f]-");
        assert!(by_id.keeps(&item("00000012-aa", "task.start"), &tasks, 0));
        assert!(!by_id.keeps(&item("00000002-aa", "task.start"), &tasks, 0));
    }

    #[test]
    fn a_bad_pattern_is_refused_with_the_regex_message_never_matching_nothing() {
        let bad = Filter::parse("re:page.(fill");
        let why = bad.refused.expect("refused");
        assert!(why.contains("re:page.(fill is refused"), "{why}");
        assert!(
            why.contains("unclosed group"),
            "the regex crate's own words: {why}"
        );
        assert!(!why.contains('\n'), "{why}");
        assert!(bad.pattern.is_none());
        let empty = Filter::parse("re:");
        assert!(empty.refused.is_some_and(|w| w.contains("needs a pattern")));
        let long = format!("re:{}", "a".repeat(MAX_PATTERN + 1));
        assert!(Filter::parse(&long)
            .refused
            .is_some_and(|w| w.contains("too long")));
        // Within the length cap, a pattern whose compiled form would be huge is refused too.
        let huge = Filter::parse("re:\\w{1000}{1000}");
        assert!(
            huge.refused.is_some_and(|w| w.contains("size limit")),
            "{:?}",
            Filter::parse("re:\\w{1000}{1000}").refused
        );
    }
}
