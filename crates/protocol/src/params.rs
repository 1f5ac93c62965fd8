//! The params of each method, as typed structs, and where they are read from.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::object::{optional_object, ObjectOnly};
use super::target::Target;

/// The observation that shows an action took effect: read after the action, and read again
/// (instead of acting again) when its outcome was uncertain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    /// What is read: an element, the page's URL or the page's whole text.
    pub subject: Subject,
    /// What the value read must be, or contain.
    pub check: ExpectCheck,
}

/// What an expectation reads (SPEC §15): a target's value, or the page itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// The value or text of a target (`{"target": …, "equals"|"contains": …}`).
    Target(Target),
    /// The page's URL (`{"url": {"equals"|"contains": …}}`).
    Url,
    /// The page's whole visible text (`{"text": {"contains": …}}`).
    Text,
}

impl From<&str> for Subject {
    /// A CSS selector's value, as tests and callers that only know selectors write it.
    fn from(css: &str) -> Subject {
        Subject::Target(Target::Css(css.to_owned()))
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Target(t) => t.fmt(f),
            Subject::Url => f.write_str("the page's URL"),
            Subject::Text => f.write_str("the page's text"),
        }
    }
}

/// How an expectation compares the observed value: exactly one of `equals` or `contains`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpectCheck {
    /// The value equals this string exactly.
    Equals(String),
    /// The value contains this string.
    Contains(String),
}

impl ExpectCheck {
    /// The text compared with.
    pub fn text(&self) -> &str {
        match self {
            ExpectCheck::Equals(t) | ExpectCheck::Contains(t) => t,
        }
    }
}

impl Expect {
    /// An expectation on a target's value.
    pub fn on(target: impl Into<Target>, check: ExpectCheck) -> Expect {
        Expect {
            subject: Subject::Target(target.into()),
            check,
        }
    }

    /// Whether an observed value satisfies the expectation.
    pub fn holds(&self, observed: &str) -> bool {
        match &self.check {
            ExpectCheck::Equals(want) => observed == want,
            ExpectCheck::Contains(want) => observed.contains(want.as_str()),
        }
    }

    /// The target read, when the expectation reads one.
    pub fn target(&self) -> Option<&Target> {
        match &self.subject {
            Subject::Target(t) => Some(t),
            Subject::Url | Subject::Text => None,
        }
    }
}

/// `{"equals"|"contains": …}` as `url` and `text` expectations nest it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    equals: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contains: Option<String>,
}

impl CheckWire {
    fn of(check: &ExpectCheck) -> CheckWire {
        match check {
            ExpectCheck::Equals(t) => CheckWire {
                equals: Some(t.clone()),
                contains: None,
            },
            ExpectCheck::Contains(t) => CheckWire {
                equals: None,
                contains: Some(t.clone()),
            },
        }
    }

    fn check<E: serde::de::Error>(self, what: &str) -> Result<ExpectCheck, E> {
        match (self.equals, self.contains) {
            (Some(e), None) => Ok(ExpectCheck::Equals(e)),
            (None, Some(c)) => Ok(ExpectCheck::Contains(c)),
            _ => Err(E::custom(format!(
                "{what} needs exactly one of `equals` or `contains`"
            ))),
        }
    }
}

impl Serialize for Expect {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        match &self.subject {
            Subject::Target(t) => {
                m.serialize_entry("target", t)?;
                match &self.check {
                    ExpectCheck::Equals(v) => m.serialize_entry("equals", v)?,
                    ExpectCheck::Contains(v) => m.serialize_entry("contains", v)?,
                }
            }
            Subject::Url => m.serialize_entry("url", &CheckWire::of(&self.check))?,
            Subject::Text => m.serialize_entry("text", &CheckWire::of(&self.check))?,
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Expect {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default)]
            target: Option<Target>,
            equals: Option<String>,
            contains: Option<String>,
            #[serde(default, deserialize_with = "optional_object")]
            url: Option<CheckWire>,
            #[serde(default, deserialize_with = "optional_object")]
            text: Option<CheckWire>,
        }
        let ObjectOnly(raw) = ObjectOnly::<Raw>::deserialize(d)?;
        match (raw.target, raw.url, raw.text) {
            (Some(target), None, None) => {
                let check = CheckWire {
                    equals: raw.equals,
                    contains: raw.contains,
                }
                .check::<D::Error>("expect")
                .map_err(|_| {
                    D::Error::custom(
                        "expect needs exactly one of `equals` or `contains` beside `target`",
                    )
                })?;
                Ok(Expect {
                    subject: Subject::Target(target),
                    check,
                })
            }
            (None, Some(url), None) if raw.equals.is_none() && raw.contains.is_none() => {
                Ok(Expect {
                    subject: Subject::Url,
                    check: url.check("expect.url")?,
                })
            }
            (None, None, Some(text)) if raw.equals.is_none() && raw.contains.is_none() => {
                match text.check("expect.text")? {
                    ExpectCheck::Contains(c) => Ok(Expect {
                        subject: Subject::Text,
                        check: ExpectCheck::Contains(c),
                    }),
                    ExpectCheck::Equals(_) => Err(D::Error::custom(
                        "expect.text takes `contains` (a page's whole text is never compared whole)",
                    )),
                }
            }
            _ => Err(D::Error::custom(
                "expect is {\"target\": …, \"equals\"|\"contains\": …}, {\"url\": {\"equals\"|\"contains\": …}} or {\"text\": {\"contains\": …}}",
            )),
        }
    }
}

/// Options of the fixture page, chosen per task at `task.start`, so tests and demonstrations
/// can make a submit slow, lost or refused on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureOptions {
    /// The submit applies after this delay, even after the action's deadline (0–60000).
    #[serde(default)]
    pub submit_delay_ms: u64,
    /// The submit is lost and never applies.
    #[serde(default)]
    pub drop_submit: bool,
    /// The backend rejects the submit definitively.
    #[serde(default)]
    pub fail_submit: bool,
    /// Every read takes this long (0–60000).
    #[serde(default)]
    pub read_delay_ms: u64,
}

/// The longest delay a fixture option accepts, so no test page holds a task for long.
pub const MAX_FIXTURE_DELAY_MS: u64 = 60_000;

/// `task.start` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskStartParams {
    /// What the task is for (1–200 characters).
    pub title: String,
    /// The page the task works on.
    #[serde(default)]
    pub url: Option<String>,
    /// Fixture behaviour for this task's page.
    #[serde(default, deserialize_with = "optional_object")]
    pub fixture: Option<FixtureOptions>,
    /// A saved login (SPEC §15): the name of a profile under the host's `--profile-dir`,
    /// whose cookies are loaded into the task's browser context before its page opens.
    #[serde(default)]
    pub profile: Option<String>,
}

/// `page.fill` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageFillParams {
    /// The task whose page is filled.
    pub task_id: String,
    /// The field.
    pub target: Target,
    /// The text to put in the field.
    pub value: String,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// How an action answers a JavaScript dialog (`alert`, `confirm`, `prompt`, `beforeunload`)
/// that it opens (SPEC §14). A dialog no action asked for is dismissed: the answer that
/// commits nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DialogAnswer {
    /// Accept (OK) or dismiss (Cancel).
    pub accept: bool,
    /// The text a `prompt` is answered with, when accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_text: Option<String>,
    /// Answer only a dialog whose message contains this text; any other is dismissed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<DialogMessage>,
}

/// Which dialog an answer is for: its message contains `contains`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DialogMessage {
    /// Text the dialog's message must contain.
    pub contains: String,
}

impl DialogAnswer {
    /// Whether a dialog with `message` is the one this answer is for.
    pub fn matches(&self, message: &str) -> bool {
        self.message
            .as_ref()
            .is_none_or(|m| message.contains(m.contains.as_str()))
    }
}

impl<'de> Deserialize<'de> for DialogAnswer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Raw {
            accept: bool,
            #[serde(default)]
            prompt_text: Option<String>,
            #[serde(default, deserialize_with = "optional_object")]
            message: Option<DialogMessage>,
        }
        let ObjectOnly(raw) = ObjectOnly::<Raw>::deserialize(d)?;
        Ok(DialogAnswer {
            accept: raw.accept,
            prompt_text: raw.prompt_text,
            message: raw.message,
        })
    }
}

/// `page.click` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageClickParams {
    /// The task whose page is clicked.
    pub task_id: String,
    /// What to click.
    pub target: Target,
    /// The observation that shows the click took effect; `null` only with `local: true`.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// The click commits nothing (focus, opening a menu): recorded as page-local, like a
    /// fill. One that navigates or submits anyway ends uncertain.
    #[serde(default)]
    pub local: bool,
    /// How to answer a dialog the click opens.
    #[serde(default, deserialize_with = "optional_object")]
    pub dialog: Option<DialogAnswer>,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `page.press` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PagePressParams {
    /// The task whose page gets the key.
    pub task_id: String,
    /// The key or chord, in Playwright's form: `Enter`, `Tab`, `Control+a`, `Shift+ArrowDown`.
    pub key: String,
    /// The focused target.
    #[serde(default)]
    pub target: Option<Target>,
    /// The observation that shows the key press took effect; `null` only with `local: true`.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// The key press commits nothing (Tab, an arrow key): recorded as page-local, like a
    /// fill. One that navigates or submits anyway ends uncertain.
    #[serde(default)]
    pub local: bool,
    /// How to answer a dialog the key press opens.
    #[serde(default, deserialize_with = "optional_object")]
    pub dialog: Option<DialogAnswer>,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `page.read` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageReadParams {
    /// The task whose page is read.
    pub task_id: String,
    /// What to read.
    pub target: Target,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `page.snapshot` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageSnapshotParams {
    /// The task whose page is outlined.
    pub task_id: String,
    /// The most bytes of outline returned (default 64 KiB); what is cut is said.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// `yaml` (the default: indented lines, as an LLM reads best) or `json` (a flat list).
    #[serde(default)]
    pub format: SnapshotFormat,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// How `page.snapshot` writes its outline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotFormat {
    /// Indented lines: `- button "Publish" [ref=e7]`.
    #[default]
    Yaml,
    /// A flat list of nodes, each with its depth.
    Json,
}

/// The default and the largest `maxBytes` of `page.snapshot`.
pub const SNAPSHOT_DEFAULT_BYTES: u64 = 64 * 1024;
/// The largest `maxBytes` a snapshot may ask for.
pub const SNAPSHOT_MAX_BYTES: u64 = 1024 * 1024;

/// `page.wait` params: wait until a target appears (or disappears) or a text shows.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageWaitParams {
    /// The task whose page is watched.
    pub task_id: String,
    /// The target waited for (exactly one of `target` or `text`).
    #[serde(default)]
    pub target: Option<Target>,
    /// A text waited for anywhere on the page.
    #[serde(default)]
    pub text: Option<String>,
    /// `visible` (the default) or `hidden`.
    #[serde(default)]
    pub state: WaitState,
    /// How long to wait, at most the action deadline × 5 (default: the action deadline).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// What `page.wait` waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitState {
    /// The target is there and visible (the text shows).
    #[default]
    Visible,
    /// The target is gone or hidden (the text no longer shows).
    Hidden,
}

/// `page.screenshot` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageScreenshotParams {
    /// The task whose page is captured.
    pub task_id: String,
    /// One element to capture; the viewport when absent.
    #[serde(default)]
    pub target: Option<Target>,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `page.navigate` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageNavigateParams {
    /// The task whose page navigates.
    pub task_id: String,
    /// An `http(s)` URL, or `back`, `forward` or `reload`.
    pub url: String,
    /// Let a navigation re-send a form (a POST in the page's history); refused otherwise.
    #[serde(default)]
    pub allow_resubmit: bool,
    /// What shows the navigation took effect, beyond the new document's load and URL.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// How to answer a dialog (`beforeunload`) the navigation opens.
    #[serde(default, deserialize_with = "optional_object")]
    pub dialog: Option<DialogAnswer>,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// One string or several, as `page.select` takes its options.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One option.
    One(String),
    /// Several, for a `<select multiple>`.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The strings, in order.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// `page.select` params: exactly one of `label` or `value`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageSelectParams {
    /// The task whose page holds the select.
    pub task_id: String,
    /// The `<select>` (or listbox).
    pub target: Target,
    /// The options to select by their visible label.
    #[serde(default)]
    pub label: Option<OneOrMany>,
    /// The options to select by their value.
    #[serde(default)]
    pub value: Option<OneOrMany>,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `page.check` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageCheckParams {
    /// The task whose page holds the checkbox or radio.
    pub task_id: String,
    /// The checkbox or radio.
    pub target: Target,
    /// The state it must end in.
    pub checked: bool,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `page.upload` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageUploadParams {
    /// The task whose page holds the file input.
    pub task_id: String,
    /// The `<input type=file>`.
    pub target: Target,
    /// File names relative to the host's `--upload-dir`.
    pub files: Vec<String>,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `page.hover` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageHoverParams {
    /// The task whose page is hovered.
    pub task_id: String,
    /// What the pointer moves over.
    pub target: Target,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `page.type` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageTypeParams {
    /// The task whose page is typed into.
    pub task_id: String,
    /// The field that gets the keys.
    pub target: Target,
    /// The text, typed key by key.
    pub text: String,
    /// What shows the typing took effect; without it the step is page-local, like a fill.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// Params of methods that only name a task (`task.finish`, `task.status`, `task.verifyOutcome`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskParams {
    /// The task.
    pub task_id: String,
}

/// `task.saveProfile` params: the task whose browser state is saved, and the profile name.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskSaveProfileParams {
    /// The task.
    pub task_id: String,
    /// The profile's name: one path component of `[A-Za-z0-9._-]`, at most 64 bytes.
    pub profile: String,
}

/// `page.url` params: a task and, optionally, one of its tabs.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageUrlParams {
    /// The task.
    pub task_id: String,
    /// Which of the task's tabs (SPEC §15; `page.tabs` lists them): 0, the default, is the
    /// task's first page.
    #[serde(default)]
    pub tab: Option<u32>,
}

/// `task.stop` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskStopParams {
    /// The task to stop.
    pub task_id: String,
    /// Why it is stopped (1–500 characters); kept with the task.
    pub reason: String,
}

/// `task.resume` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskResumeParams {
    /// The task the caller kept.
    pub task_id: String,
    /// The run the caller kept with it.
    pub run_id: String,
}

/// `run.status` params.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunStatusParams {
    /// A run the caller kept, to compare with the current one.
    #[serde(default)]
    pub run_id: Option<String>,
}

/// `receipt.status` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptStatusParams {
    /// The request ID to look up.
    pub request_id: String,
}

/// Params of methods that take none: still checked, so a stray field is refused rather than
/// ignored.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Where a command's params are read from: a parsed [`Value`], or the raw params text of a
/// frame, so that a well-formed request becomes a [`Command`](super::Command) without building
/// a `Value` first.
pub trait Params {
    /// Deserialises the params as `T`; the error is serde's own message, which differs between
    /// sources (the host only shows the messages of the `Value` source).
    fn typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error>;
}

impl Params for Value {
    fn typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(self)
    }
}

impl Params for RawValue {
    fn typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structs_inside_params_are_objects_never_arrays() {
        let from_text = |t: &str| serde_json::from_str::<TaskStartParams>(t).map(|p| p.fixture);
        assert!(from_text(r#"{"title":"t","fixture":[3000]}"#).is_err());
        assert_eq!(from_text(r#"{"title":"t","fixture":null}"#).unwrap(), None);
        assert_eq!(from_text(r#"{"title":"t"}"#).unwrap(), None);
        let f = from_text(r#"{"title":"t","fixture":{"submitDelayMs":5}}"#).unwrap();
        assert_eq!(f.unwrap().submit_delay_ms, 5);
        let from_value = |v: Value| TaskStartParams::deserialize(&v).map(|p| p.fixture);
        assert!(from_value(json!({"title":"t","fixture":[3000]})).is_err());
        assert!(from_value(json!({"title":"t","fixture":{"dropSubmit":true}})).is_ok());
    }

    #[test]
    fn expect_needs_exactly_one_check() {
        assert!(serde_json::from_value::<Expect>(json!({"target":"#s","equals":"a"})).is_ok());
        assert!(serde_json::from_value::<Expect>(json!({"target":"#s"})).is_err());
        assert!(serde_json::from_value::<Expect>(
            json!({"target":"#s","equals":"a","contains":"b"})
        )
        .is_err());
        assert!(serde_json::from_value::<Expect>(json!(["#s", "a", null])).is_err());
        assert!(serde_json::from_str::<Expect>(r##"["#s","a",null]"##).is_err());
        assert!(
            serde_json::from_value::<Expect>(json!({"target":"#s","equals":"a","x":1})).is_err()
        );
    }
}
