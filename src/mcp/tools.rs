//! The tool table: each tool's arguments (SPEC §4's params in snake_case), its JSON schema,
//! the bridge method it calls, and how `tools/list` describes it.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::keys::camel_keys;
use crate::protocol::Method;

// ---------------------------------------------------------------------------------------------
// Tool arguments: the params of SPEC §4 in snake_case. Field names are exactly the snake_case
// of the host's camelCase names, so translating is a mechanical key rename.

/// The fixture page's behaviour for a new task (tests and demos).
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FixtureArgs {
    /// The submit applies after this many milliseconds (0–60000), even after the action's
    /// deadline has passed (a late success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    submit_delay_ms: Option<u64>,
    /// The submit is lost and never applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    drop_submit: Option<bool>,
    /// The backend rejects the submit definitively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fail_submit: Option<bool>,
    /// Every read takes this many milliseconds (0–60000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    read_delay_ms: Option<u64>,
}

/// What to act on or read: a ref from page_snapshot (best), a role and name, a visible text,
/// or a CSS selector.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum TargetArg {
    /// A CSS selector, e.g. `#title`.
    Css(String),
    /// `{"ref": "e12"}` from the latest page_snapshot, `{"role": "button", "name":
    /// "Publish"}` or `{"text": "Delete"}`; add `"frame"` (a target naming an iframe) to look
    /// inside one.
    Locator(LocatorArg),
}

/// A target by ref, role and name, or text.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LocatorArg {
    /// A ref from the latest page_snapshot, e.g. `e12` (alone).
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    ref_: Option<String>,
    /// An ARIA role: button, link, textbox, checkbox, radio, combobox, heading, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    role: Option<String>,
    /// With `role`: the accessible name (its label), matched as a substring ignoring case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// Visible text, matched as a substring ignoring case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// Match `name` or `text` exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exact: Option<bool>,
    /// The iframe to look inside (itself a target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    frame: Option<Box<TargetArg>>,
}

/// `equals` or `contains`, for an expectation on the page's URL or text.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckArgs {
    /// Must equal this exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    equals: Option<String>,
    /// Must contain this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contains: Option<String>,
}

/// The observation that shows an action took effect: `target` plus exactly one of `equals`
/// or `contains`; or `url` (`{"contains": "/posts/"}`); or `text` (`{"contains": "Saved"}`)
/// on the whole page.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ExpectArgs {
    /// What to read, e.g. `#status` or `{"role": "status"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<TargetArg>,
    /// The value must equal this exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    equals: Option<String>,
    /// The value must contain this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contains: Option<String>,
    /// The page's URL must equal or contain this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<CheckArgs>,
    /// The page's whole text must contain this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<CheckArgs>,
}

/// One option or several.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum OneOrManyArg {
    /// One.
    One(String),
    /// Several (a multiple select).
    Many(Vec<String>),
}

/// How to answer a JavaScript dialog (`alert`, `confirm`, `prompt`) the action opens. A
/// dialog no action asked for is dismissed, which commits nothing.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DialogArgs {
    /// true to accept (OK), false to dismiss (Cancel).
    accept: bool,
    /// The text to answer a `prompt` with, when accepting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prompt_text: Option<String>,
    /// Answer only a dialog whose message contains this text; any other is dismissed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<DialogMessageArgs>,
}

/// Which dialog an answer is for.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DialogMessageArgs {
    /// Text the dialog's message must contain.
    contains: String,
}

pub(super) const REQUEST_ID_DOC: &str = "Omit for a new request (a fresh UUID is minted and returned). Pass the request_id of an earlier call, with the very same arguments, only to re-query it: the host answers from its receipt and executes nothing again.";

macro_rules! mutating_args {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Deserialize, Serialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        struct $name {
            $($(#[$fdoc])* $field: $ty,)*
            #[doc = "Omit for a new request (a fresh UUID is minted and returned). Pass the request_id of an earlier call, with the very same arguments, only to re-query it: the host answers from its receipt and executes nothing again."]
            #[serde(default, skip_serializing)]
            request_id: Option<String>,
        }
        impl ToolArgs for $name {
            fn request_id(&self) -> Option<&str> {
                self.request_id.as_deref()
            }
        }
    };
}

pub(super) trait ToolArgs: DeserializeOwned + Serialize + JsonSchema + 'static {
    /// The caller's bridge request ID, for mutating tools.
    fn request_id(&self) -> Option<&str> {
        None
    }
}

mutating_args!(
    /// `task_start` arguments.
    TaskStartArgs {
        /// What the task is for (1–200 characters).
        title: String,
        /// The page the task works on: an http, https or file URL (at most 8 KiB), required
        /// when the host runs the Chromium executor, which opens it in a fresh browser context.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// Fixture page behaviour (the embedded executor only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fixture: Option<FixtureArgs>,
        /// A saved login: the name of a profile of the host's --profile-dir (written by
        /// task_save_profile), whose cookies the task's browser starts with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    }
);

mutating_args!(
    /// `task_save_profile` arguments.
    TaskSaveProfileArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// The profile's name: letters, digits, '.', '_' and '-', at most 64 bytes.
        profile: String,
    }
);

mutating_args!(
    /// `page_fill` arguments.
    PageFillArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// The field: a ref from page_snapshot, a role and name, or a CSS selector.
        target: TargetArg,
        /// The text to put in the field.
        value: String,
    }
);

mutating_args!(
    /// `page_click` arguments.
    PageClickArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// What to click: a ref from page_snapshot, a role and name, a text, or a CSS selector.
        target: TargetArg,
        /// The observation that shows the click took effect; it must not hold already (expect
        /// what only the click makes true, e.g. the next count). Omit only with `local: true`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<ExpectArgs>,
        /// true for a step that commits nothing (focusing a field, opening a menu); one that
        /// navigates or submits anyway ends uncertain and blocks the task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        local: Option<bool>,
        /// How to answer a dialog the click opens (e.g. a confirm() before a delete).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dialog: Option<DialogArgs>,
    }
);

mutating_args!(
    /// `page_press` arguments.
    PagePressArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// The key or chord, e.g. `Enter` (Enter in a field submits the form), `Tab`,
        /// `Control+a`, `Shift+ArrowDown`.
        key: String,
        /// The focused field (a ref, a role and name, or a CSS selector).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<TargetArg>,
        /// The observation that shows the key press took effect; it must not hold already.
        /// Omit only with `local: true`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<ExpectArgs>,
        /// true for a key that commits nothing (Tab, arrows, selecting text); one that
        /// navigates or submits anyway ends uncertain and blocks the task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        local: Option<bool>,
        /// How to answer a dialog the key press opens.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dialog: Option<DialogArgs>,
    }
);

mutating_args!(
    /// `page_navigate` arguments.
    PageNavigateArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// An http(s) URL, or `back`, `forward` or `reload`.
        url: String,
        /// true to let the navigation re-send a form (a POST in the history); refused otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        allow_resubmit: Option<bool>,
        /// What shows the navigation took effect beyond the new page's load, e.g.
        /// `{"text": {"contains": "Drafts"}}`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<ExpectArgs>,
        /// How to answer a dialog (beforeunload) the navigation opens.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dialog: Option<DialogArgs>,
    }
);

mutating_args!(
    /// `page_select` arguments.
    PageSelectArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// The select (a ref, a role and name such as combobox "Category", or CSS).
        target: TargetArg,
        /// The option(s) to select by visible label (exactly one of label or value).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<OneOrManyArg>,
        /// The option(s) to select by value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<OneOrManyArg>,
    }
);

mutating_args!(
    /// `page_check` arguments.
    PageCheckArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// The checkbox or radio.
        target: TargetArg,
        /// The state it must end in.
        checked: bool,
    }
);

mutating_args!(
    /// `page_upload` arguments.
    PageUploadArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// The file input.
        target: TargetArg,
        /// File names relative to the host's --upload-dir.
        files: Vec<String>,
    }
);

mutating_args!(
    /// `page_hover` arguments.
    PageHoverArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// What the pointer moves over.
        target: TargetArg,
    }
);

mutating_args!(
    /// `page_type` arguments.
    PageTypeArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tab: Option<u32>,
        /// The field that gets the keys.
        target: TargetArg,
        /// The text, typed key by key.
        text: String,
        /// What shows the typing took effect (e.g. a suggestion list); optional.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<ExpectArgs>,
    }
);

mutating_args!(
    /// `task_finish` arguments.
    TaskFinishArgs {
        /// The task_id returned by task_start.
        task_id: String,
    }
);

mutating_args!(
    /// `task_stop` arguments.
    TaskStopArgs {
        /// The task_id returned by task_start.
        task_id: String,
        /// Why the task is stopped (1–500 characters); kept with the task.
        reason: String,
    }
);

/// Arguments of reads that name a task.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskArgs {
    /// The task_id returned by task_start.
    task_id: String,
}
impl ToolArgs for TaskArgs {}

/// `page_url` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PageUrlArgs {
    /// The task_id returned by task_start.
    task_id: String,
    /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tab: Option<u32>,
}
impl ToolArgs for PageUrlArgs {}

/// `page_read` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PageReadArgs {
    /// The task_id returned by task_start.
    task_id: String,
    /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tab: Option<u32>,
    /// What to read: a ref, a role and name, a text, or a CSS selector.
    target: TargetArg,
}
impl ToolArgs for PageReadArgs {}

/// `page_snapshot` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PageSnapshotArgs {
    /// The task_id returned by task_start.
    task_id: String,
    /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tab: Option<u32>,
    /// The most bytes of outline (default 65536, at most 1048576); what is cut is said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_bytes: Option<u64>,
    /// `yaml` (default) or `json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    format: Option<String>,
}
impl ToolArgs for PageSnapshotArgs {}

/// `page_wait` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PageWaitArgs {
    /// The task_id returned by task_start.
    task_id: String,
    /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tab: Option<u32>,
    /// The element to wait for (exactly one of target or text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<TargetArg>,
    /// A text to wait for anywhere on the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// `visible` (default) or `hidden`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<String>,
    /// How long to wait in milliseconds (default: the host's action deadline; at most five).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
}
impl ToolArgs for PageWaitArgs {}

/// `page_screenshot` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PageScreenshotArgs {
    /// The task_id returned by task_start.
    task_id: String,
    /// Which of the task's tabs (page_tabs lists them); 0, the default, is its first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tab: Option<u32>,
    /// One element to capture; the viewport when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<TargetArg>,
}
impl ToolArgs for PageScreenshotArgs {}

/// `task_resume` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskResumeArgs {
    /// The task_id you kept from task_start.
    task_id: String,
    /// The run_id you kept with it.
    run_id: String,
}
impl ToolArgs for TaskResumeArgs {}

/// `run_status` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RunStatusArgs {
    /// A run_id you kept, to learn whether it is still the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_id: Option<String>,
}
impl ToolArgs for RunStatusArgs {}

/// `request_status` arguments.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RequestStatusArgs {
    /// The request_id to look up (from an earlier result or error).
    request_id: String,
}
impl ToolArgs for RequestStatusArgs {}

// ---------------------------------------------------------------------------------------------
// The tool table.

/// Parsed arguments: the host's camelCase params and the caller's request ID, if any.
pub(super) type Parsed = Result<(Value, Option<String>), String>;

pub(super) struct ToolSpec {
    pub(super) name: &'static str,
    pub(super) title: &'static str,
    pub(super) method: Method,
    pub(super) destructive: bool,
    pub(super) schema: fn() -> Arc<JsonObject>,
    pub(super) parse: fn(JsonObject) -> Parsed,
}

pub(super) fn schema_of<T: ToolArgs>() -> Arc<JsonObject> {
    rmcp::handler::server::tool::schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("the input schema of a Polaris tool is invalid: {e}"))
}

pub(super) fn parse_as<T: ToolArgs>(args: JsonObject) -> Parsed {
    let typed: T = serde_json::from_value(Value::Object(args)).map_err(|e| e.to_string())?;
    let id = typed.request_id().map(str::to_owned);
    let params = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    Ok((camel_keys(params), id))
}

macro_rules! tool {
    ($name:literal, $title:literal, $method:ident, $destructive:literal, $args:ty) => {
        ToolSpec {
            name: $name,
            title: $title,
            method: Method::$method,
            destructive: $destructive,
            schema: schema_of::<$args>,
            parse: parse_as::<$args>,
        }
    };
}

/// The tools of SPEC §7, in the order `tools/list` shows them.
pub(super) static TOOLS: &[ToolSpec] = &[
    tool!(
        "task_start",
        "Start a task",
        TaskStart,
        false,
        TaskStartArgs
    ),
    tool!("page_fill", "Fill a field", PageFill, true, PageFillArgs),
    tool!(
        "page_click",
        "Click and observe",
        PageClick,
        true,
        PageClickArgs
    ),
    tool!(
        "page_press",
        "Press a key and observe",
        PagePress,
        true,
        PagePressArgs
    ),
    tool!(
        "page_navigate",
        "Navigate the page",
        PageNavigate,
        true,
        PageNavigateArgs
    ),
    tool!(
        "page_select",
        "Select options",
        PageSelect,
        false,
        PageSelectArgs
    ),
    tool!(
        "page_check",
        "Check or uncheck",
        PageCheck,
        false,
        PageCheckArgs
    ),
    tool!(
        "page_upload",
        "Choose files to upload",
        PageUpload,
        false,
        PageUploadArgs
    ),
    tool!("page_hover", "Hover", PageHover, false, PageHoverArgs),
    tool!("page_type", "Type text", PageType, false, PageTypeArgs),
    tool!("page_read", "Read a target", PageRead, false, PageReadArgs),
    tool!(
        "page_snapshot",
        "See the page",
        PageSnapshot,
        false,
        PageSnapshotArgs
    ),
    tool!(
        "page_wait",
        "Wait for the page",
        PageWait,
        false,
        PageWaitArgs
    ),
    tool!(
        "page_screenshot",
        "Screenshot",
        PageScreenshot,
        false,
        PageScreenshotArgs
    ),
    tool!("page_url", "Page URL", PageUrl, false, PageUrlArgs),
    tool!("page_tabs", "List the tabs", PageTabs, false, TaskArgs),
    tool!(
        "task_save_profile",
        "Save the login",
        TaskSaveProfile,
        false,
        TaskSaveProfileArgs
    ),
    tool!(
        "task_finish",
        "Finish a task",
        TaskFinish,
        false,
        TaskFinishArgs
    ),
    tool!("task_stop", "Stop a task", TaskStop, true, TaskStopArgs),
    tool!("task_status", "Task status", TaskStatus, false, TaskArgs),
    tool!(
        "task_resume",
        "Check a kept task and run",
        TaskResume,
        false,
        TaskResumeArgs
    ),
    tool!(
        "verify_outcome",
        "Verify an uncertain outcome",
        TaskVerifyOutcome,
        false,
        TaskArgs
    ),
    tool!("run_status", "Run status", RunStatus, false, RunStatusArgs),
    tool!(
        "request_status",
        "Request status",
        ReceiptStatus,
        false,
        RequestStatusArgs
    ),
];

pub(super) fn spec_named(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|t| t.name == name)
}

pub(super) fn tool_for_method(method: &str) -> Option<&'static str> {
    TOOLS
        .iter()
        .find(|t| t.method.as_str() == method)
        .map(|t| t.name)
}

pub(super) fn description(spec: &ToolSpec) -> String {
    let mut d = spec.method.description().to_owned();
    if spec.method.is_mutating() {
        d.push_str(" Mutating: without request_id every call is a new request and executes again, even with identical arguments. On an error or an unknown outcome, call the tool named in `next` instead of resending.");
        d.push(' ');
        d.push_str(REQUEST_ID_DOC);
    } else {
        d.push_str(" Read-only: changes nothing on the page.");
    }
    d
}

pub(super) fn build_tools() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|spec| {
            let annotations = if spec.method.is_mutating() {
                // Never idempotentHint: a mutation without request_id executes again.
                ToolAnnotations::with_title(spec.title)
                    .read_only(false)
                    .destructive(spec.destructive)
            } else {
                ToolAnnotations::with_title(spec.title).read_only(true)
            };
            Tool::new(spec.name, description(spec), (spec.schema)())
                .with_title(spec.title)
                .with_annotations(annotations)
        })
        .collect()
}
