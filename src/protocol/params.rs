//! The params of each method, as typed structs, and where they are read from.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// The observation that shows an action took effect: read after the action, and read again
/// (instead of acting again) when its outcome was uncertain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Expect {
    /// The selector to read.
    pub target: String,
    /// What the target's value must be, or contain.
    #[serde(flatten)]
    pub check: ExpectCheck,
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

impl Expect {
    /// Whether an observed value satisfies the expectation.
    pub fn holds(&self, observed: &str) -> bool {
        match &self.check {
            ExpectCheck::Equals(want) => observed == want,
            ExpectCheck::Contains(want) => observed.contains(want.as_str()),
        }
    }
}

impl<'de> Deserialize<'de> for Expect {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            target: String,
            equals: Option<String>,
            contains: Option<String>,
        }
        let ObjectOnly(raw) = ObjectOnly::<Raw>::deserialize(d)?;
        let check = match (raw.equals, raw.contains) {
            (Some(e), None) => ExpectCheck::Equals(e),
            (None, Some(c)) => ExpectCheck::Contains(c),
            _ => {
                return Err(serde::de::Error::custom(
                    "expect needs exactly one of `equals` or `contains` beside `target`",
                ))
            }
        };
        Ok(Expect {
            target: raw.target,
            check,
        })
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
}

/// `page.fill` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageFillParams {
    /// The task whose page is filled.
    pub task_id: String,
    /// The field selector.
    pub target: String,
    /// The text to put in the field.
    pub value: String,
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
    pub target: String,
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
    pub target: Option<String>,
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
}

/// `page.read` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PageReadParams {
    /// The task whose page is read.
    pub task_id: String,
    /// The selector to read.
    pub target: String,
}

/// Params of methods that only name a task (`task.finish`, `task.status`, `task.verifyOutcome`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskParams {
    /// The task.
    pub task_id: String,
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

/// A struct read only from a JSON object: serde's derived parsers also take an array of the
/// fields in order (`"fixture":[3000]`), which the wire format never means (SPEC §10).
pub struct ObjectOnly<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Fields(PhantomData)).map(ObjectOnly)
    }
}

/// `deserialize_with` for an optional struct field: absent or `null` is `None`, an object is
/// the struct, anything else (an array above all) is refused.
pub fn optional_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Ok(Option::<ObjectOnly<T>>::deserialize(d)?.map(|o| o.0))
}

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
