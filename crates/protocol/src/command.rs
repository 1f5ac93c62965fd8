//! Commands: a bridge request's method and params, checked and typed, in the family the host
//! handles them by.
//!
//! The families follow who answers a request: the executor does the work of a
//! [`ExecutorCommand`] (`task.start` opens a page, the page actions act on one) under a new
//! receipt; the host itself closes a task for a [`CloseCommand`] (`task.finish`, `task.stop`),
//! also under a new receipt; a [`ReadCommand`] is answered every time and never stored. Each
//! stage of the host takes only the family it handles, so its matches are total.

use serde::de::DeserializeOwned;

use super::chord::KeyChord;
use super::id::validate_id;
use super::limits::{EXPECTED_TEXT, KEY, REASON, SELECTOR, TITLE, URL, VALUE};
use super::method::Method;
use super::params::{DialogAnswer, Expect, ExpectCheck, Subject};
use super::params::{
    NoParams, PageCheckParams, PageClickParams, PageFillParams, PageHoverParams,
    PageNavigateParams, PagePressParams, PageReadParams, PageScreenshotParams, PageSelectParams,
    PageSnapshotParams, PageTypeParams, PageUploadParams, PageUrlParams, PageWaitParams, Params,
    ReceiptStatusParams, RunStatusParams, TaskParams, TaskResumeParams, TaskSaveProfileParams,
    TaskStartParams, TaskStopParams, MAX_FIXTURE_DELAY_MS, SNAPSHOT_MAX_BYTES,
};
use super::target::Target;

/// A bridge request after validation: the typed command the host acts on, so nothing past this
/// point reads params out of JSON again.
#[derive(Clone, Debug)]
pub enum Command {
    /// Work the executor does under a new receipt: `task.start` and the page actions.
    Execute(ExecutorCommand),
    /// `task.finish` / `task.stop`: the host closes a task under a new receipt.
    Close(CloseCommand),
    /// Everything else: answered every time, never stored.
    Read(ReadCommand),
}

/// A command the executor performs: it may have a side effect, so it runs at most once per
/// request ID.
#[derive(Clone, Debug)]
pub enum ExecutorCommand {
    /// `task.start`: opens the page of a new task.
    Start(TaskStartParams),
    /// A page action (`page.fill`, `page.click`, `page.navigate`, `page.upload`, …): acts on
    /// a task's page.
    Act(ActCommand),
}

/// A page action on a task: one of the methods that may change a page ([`PageAction`]).
#[derive(Clone, Debug)]
pub struct ActCommand {
    /// The task whose page is acted on.
    pub task_id: String,
    /// Which of the task's tabs (SPEC §15): 0 is its first page.
    pub tab: u32,
    /// What to do on the page; which one it is names the method.
    pub action: PageAction,
}

/// An action on a page: what the executor is asked to do for a page method.
#[derive(Clone, Debug)]
pub enum PageAction {
    /// Set a field's value (a page-local change).
    Fill {
        /// The field.
        target: Target,
        /// The value.
        value: String,
    },
    /// Click a target, then observe `expect`.
    Click {
        /// What to click.
        target: Target,
        /// What shows the click took effect; `None` only for a local step.
        expect: Option<Expect>,
        /// The caller says the click commits nothing (SPEC §14).
        local: bool,
        /// How to answer a dialog the click opens (boxed: rare, and every command is moved
        /// several times on the hot path).
        dialog: Option<Box<DialogAnswer>>,
    },
    /// Press a key (or a chord, [`KeyChord`]) on a target, then observe `expect`.
    Press {
        /// The key or chord (boxed: a short text, and the largest variant sets the size of
        /// every command).
        key: Box<str>,
        /// The focused target.
        target: Option<Target>,
        /// What shows the press took effect; `None` only for a local step.
        expect: Option<Expect>,
        /// The caller says the key press commits nothing (SPEC §14).
        local: bool,
        /// How to answer a dialog the key press opens (boxed, as a click's).
        dialog: Option<Box<DialogAnswer>>,
    },
    /// Go to a URL or through the history (SPEC §15).
    Navigate {
        /// Where to.
        to: Navigation,
        /// The caller lets the navigation re-send a form.
        allow_resubmit: bool,
        /// What shows the navigation took effect, beyond the new document's load.
        expect: Option<Expect>,
        /// How to answer a dialog (`beforeunload`) the navigation opens.
        dialog: Option<Box<DialogAnswer>>,
    },
    /// Select options of a select (a page-local change).
    Select {
        /// The select.
        target: Target,
        /// Which options.
        by: SelectBy,
    },
    /// Check or uncheck a checkbox or radio (a page-local change).
    Check {
        /// The checkbox or radio.
        target: Target,
        /// The state it must end in.
        checked: bool,
    },
    /// Put files from the upload directory into a file input (a page-local change).
    Upload {
        /// The file input.
        target: Target,
        /// Names relative to `--upload-dir`, checked by the executor before anything is stored.
        files: Vec<String>,
    },
    /// Move the pointer over a target (a page-local step).
    Hover {
        /// What the pointer moves over.
        target: Target,
    },
    /// Type text key by key (a page-local change).
    Type {
        /// The field.
        target: Target,
        /// The text.
        text: String,
        /// What shows the typing took effect, when the caller gave one.
        expect: Option<Expect>,
    },
    /// `task.saveProfile`: write the task's browser state (its logins) to a profile of the
    /// host's `--profile-dir` (SPEC §15). It acts on the task, so it runs in the task's turn.
    SaveProfile {
        /// The profile's name, checked by [`check_profile_name`].
        profile: String,
    },
}

/// The longest profile name `task.start` and `task.saveProfile` accept.
pub const MAX_PROFILE_NAME: usize = 64;

/// Checks a profile name (SPEC §15): one path component of ASCII letters, digits, `.`, `_`
/// and `-`, at most [`MAX_PROFILE_NAME`] bytes, and not `.` or `..`, so it can only ever name
/// a file directly inside the host's `--profile-dir`.
pub fn check_profile_name(name: &str) -> Result<(), String> {
    let shown: String = name.chars().take(80).collect();
    if name.is_empty() || name.len() > MAX_PROFILE_NAME {
        return Err(format!(
            "a profile name is 1 to {MAX_PROFILE_NAME} bytes (got {} for {shown:?})",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!(
            "{shown:?} is not a profile name; name a profile like \"shop-admin\""
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(format!(
            "the profile name {shown:?} may hold only letters, digits, '.', '_' and '-' (one name inside --profile-dir, no path)"
        ));
    }
    Ok(())
}

/// Where `page.navigate` goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Navigation {
    /// A URL.
    Url(String),
    /// One step back in the page's history.
    Back,
    /// One step forward.
    Forward,
    /// The same document again.
    Reload,
}

impl Navigation {
    /// `back`, `forward` and `reload` by name, anything else as a URL.
    pub fn parse(url: String) -> Navigation {
        match url.as_str() {
            "back" => Navigation::Back,
            "forward" => Navigation::Forward,
            "reload" => Navigation::Reload,
            _ => Navigation::Url(url),
        }
    }
}

/// Which options `page.select` selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectBy {
    /// By visible label.
    Label(Vec<String>),
    /// By value.
    Value(Vec<String>),
}

/// The most options one `page.select` names.
pub const MAX_SELECTED: usize = 100;
/// The most files one `page.upload` names.
pub const MAX_UPLOAD_FILES: usize = 16;
/// The smallest `maxBytes` a snapshot may ask for: room for its header and a few nodes.
pub const MIN_SNAPSHOT_BYTES: u64 = 256;

/// `task.finish` or `task.stop`: closes a task; no executor acts.
#[derive(Clone, Debug)]
pub enum CloseCommand {
    /// `task.finish`
    Finish(TaskParams),
    /// `task.stop`, with its reason.
    Stop(TaskStopParams),
}

/// A read: answered from the host's state or a read-only observation, every time, never
/// stored.
#[derive(Clone, Debug)]
pub enum ReadCommand {
    /// `host.hello`
    HostHello,
    /// `tools.list`
    ToolsList,
    /// `run.status`
    RunStatus(RunStatusParams),
    /// `receipt.status`
    ReceiptStatus(ReceiptStatusParams),
    /// `page.read`
    PageRead(PageReadParams),
    /// `task.status`
    TaskStatus(TaskParams),
    /// `task.resume`
    TaskResume(TaskResumeParams),
    /// `task.verifyOutcome`
    TaskVerifyOutcome(TaskParams),
    /// `page.snapshot`
    PageSnapshot(PageSnapshotParams),
    /// `page.wait`
    PageWait(PageWaitParams),
    /// `page.screenshot`
    PageScreenshot(PageScreenshotParams),
    /// `page.url`
    PageUrl(PageUrlParams),
    /// `page.tabs`
    PageTabs(TaskParams),
}

impl Command {
    /// The method this command came from.
    pub fn method(&self) -> Method {
        match self {
            Command::Execute(c) => c.method(),
            Command::Close(c) => c.method(),
            Command::Read(c) => c.method(),
        }
    }

    /// The tab a page action or page read addresses (SPEC §15): 0, the task's first page,
    /// unless the request names another.
    pub fn tab(&self) -> u32 {
        match self {
            Command::Execute(ExecutorCommand::Act(a)) => a.tab,
            Command::Read(r) => r.tab(),
            _ => 0,
        }
    }

    /// The task a command acts on, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Command::Execute(c) => c.task_id(),
            Command::Close(c) => Some(c.task_id()),
            Command::Read(c) => c.task_id(),
        }
    }

    /// Parses and checks the params of `method`. `check_target` is the executor's selector check.
    ///
    /// The params may be a parsed [`Value`](serde_json::Value) or the raw text of a frame's
    /// params ([`Params`]); the checks past the params' shape live in [`Command::checked`],
    /// which the frame's one-pass reader calls too, so every path accepts and refuses the same
    /// requests.
    pub fn parse<P: Params + ?Sized>(
        method: Method,
        params: &P,
        check_target: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<Command, String> {
        fn typed<T: DeserializeOwned, P: Params + ?Sized>(
            method: Method,
            params: &P,
        ) -> Result<T, String> {
            params
                .typed()
                .map_err(|e| format!("invalid params for {method}: {e}"))
        }
        let cmd = match method {
            Method::TaskStart => Command::Execute(ExecutorCommand::Start(typed(method, params)?)),
            Method::PageFill => Command::page_fill(typed(method, params)?),
            Method::PageClick => Command::page_click(typed(method, params)?),
            Method::PagePress => Command::page_press(typed(method, params)?),
            Method::TaskFinish => Command::Close(CloseCommand::Finish(typed(method, params)?)),
            Method::TaskStop => Command::Close(CloseCommand::Stop(typed(method, params)?)),
            Method::HostHello => {
                typed::<NoParams, P>(method, params)?;
                Command::Read(ReadCommand::HostHello)
            }
            Method::ToolsList => {
                typed::<NoParams, P>(method, params)?;
                Command::Read(ReadCommand::ToolsList)
            }
            Method::PageRead => Command::Read(ReadCommand::PageRead(typed(method, params)?)),
            Method::TaskStatus => Command::Read(ReadCommand::TaskStatus(typed(method, params)?)),
            Method::TaskResume => Command::Read(ReadCommand::TaskResume(typed(method, params)?)),
            Method::TaskVerifyOutcome => {
                Command::Read(ReadCommand::TaskVerifyOutcome(typed(method, params)?))
            }
            Method::RunStatus => Command::Read(ReadCommand::RunStatus(typed(method, params)?)),
            Method::ReceiptStatus => {
                Command::Read(ReadCommand::ReceiptStatus(typed(method, params)?))
            }
            Method::PageSnapshot => {
                Command::Read(ReadCommand::PageSnapshot(typed(method, params)?))
            }
            Method::PageWait => Command::Read(ReadCommand::PageWait(typed(method, params)?)),
            Method::PageScreenshot => {
                Command::Read(ReadCommand::PageScreenshot(typed(method, params)?))
            }
            Method::PageUrl => Command::Read(ReadCommand::PageUrl(typed(method, params)?)),
            Method::PageTabs => Command::Read(ReadCommand::PageTabs(typed(method, params)?)),
            Method::TaskSaveProfile => Command::task_save_profile(typed(method, params)?),
            Method::PageNavigate => Command::page_navigate(typed(method, params)?),
            Method::PageSelect => Command::page_select(typed(method, params)?)?,
            Method::PageCheck => Command::page_check(typed(method, params)?),
            Method::PageUpload => Command::page_upload(typed(method, params)?),
            Method::PageHover => Command::page_hover(typed(method, params)?),
            Method::PageType => Command::page_type(typed(method, params)?),
        };
        cmd.checked(check_target)
    }

    /// `page.fill` as the page action it asks for.
    pub(super) fn page_fill(p: PageFillParams) -> Command {
        let PageFillParams {
            task_id,
            target,
            value,
            tab,
        } = p;
        Command::act(task_id, tab, PageAction::Fill { target, value })
    }

    /// `page.click` as the page action it asks for.
    pub(super) fn page_click(p: PageClickParams) -> Command {
        let PageClickParams {
            task_id,
            target,
            expect,
            local,
            dialog,
            tab,
        } = p;
        Command::act(
            task_id,
            tab,
            PageAction::Click {
                target,
                expect,
                local,
                dialog: dialog.map(Box::new),
            },
        )
    }

    /// `page.press` as the page action it asks for.
    pub(super) fn page_press(p: PagePressParams) -> Command {
        let PagePressParams {
            task_id,
            key,
            target,
            expect,
            local,
            dialog,
            tab,
        } = p;
        Command::act(
            task_id,
            tab,
            PageAction::Press {
                key: key.into_boxed_str(),
                target,
                expect,
                local,
                dialog: dialog.map(Box::new),
            },
        )
    }

    /// `task.saveProfile` as the page action it asks for.
    fn task_save_profile(p: TaskSaveProfileParams) -> Command {
        let profile = p.profile;
        Command::act(p.task_id, None, PageAction::SaveProfile { profile })
    }

    /// `page.navigate` as the page action it asks for.
    fn page_navigate(p: PageNavigateParams) -> Command {
        Command::act(
            p.task_id,
            p.tab,
            PageAction::Navigate {
                to: Navigation::parse(p.url),
                allow_resubmit: p.allow_resubmit,
                expect: p.expect,
                dialog: p.dialog.map(Box::new),
            },
        )
    }

    /// `page.select` as the page action it asks for; refused unless it names exactly one of
    /// `label` or `value`.
    fn page_select(p: PageSelectParams) -> Result<Command, String> {
        let by = match (p.label, p.value) {
            (Some(l), None) => SelectBy::Label(l.into_vec()),
            (None, Some(v)) => SelectBy::Value(v.into_vec()),
            _ => {
                return Err(
                    "invalid params for page.select: send exactly one of `label` or `value` (a string, or a list for a multiple select)".into(),
                )
            }
        };
        let target = p.target;
        Ok(Command::act(
            p.task_id,
            p.tab,
            PageAction::Select { target, by },
        ))
    }

    /// `page.check` as the page action it asks for.
    fn page_check(p: PageCheckParams) -> Command {
        let (target, checked) = (p.target, p.checked);
        Command::act(p.task_id, p.tab, PageAction::Check { target, checked })
    }

    /// `page.upload` as the page action it asks for.
    fn page_upload(p: PageUploadParams) -> Command {
        let (target, files) = (p.target, p.files);
        Command::act(p.task_id, p.tab, PageAction::Upload { target, files })
    }

    /// `page.hover` as the page action it asks for.
    fn page_hover(p: PageHoverParams) -> Command {
        Command::act(p.task_id, p.tab, PageAction::Hover { target: p.target })
    }

    /// `page.type` as the page action it asks for.
    fn page_type(p: PageTypeParams) -> Command {
        Command::act(
            p.task_id,
            p.tab,
            PageAction::Type {
                target: p.target,
                text: p.text,
                expect: p.expect,
            },
        )
    }

    pub(super) fn act(task_id: String, tab: Option<u32>, action: PageAction) -> Command {
        Command::Execute(ExecutorCommand::Act(ActCommand {
            task_id,
            tab: tab.unwrap_or(0),
            action,
        }))
    }

    /// The checks of a `page.fill`'s params (part of [`Command::checked`]), for the one-pass
    /// reader too, which checks a fill's strings before it owns them.
    pub(super) fn check_fill(
        target: &str,
        value: &str,
        check_target: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<(), String> {
        let method = Method::PageFill;
        VALUE
            .check("value", value)
            .map_err(|e| format!("invalid params for {method}: {e}"))?;
        SELECTOR
            .check("target", target)
            .map_err(|e| format!("invalid params for {method}: {e}"))?;
        check_target(target).map_err(|e| format!("invalid target for {method}: {e}"))
    }

    /// The checks a command's params get once they have the right shape: text limits, the
    /// executor's selector check, non-empty titles, reasons and keys, fixture delays and the
    /// `requestId` of `receipt.status`. The one home of these rules, whichever parser typed
    /// the params.
    pub(super) fn checked(
        self,
        check_target: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<Command, String> {
        self.check(check_target).map(|()| self)
    }

    /// [`Command::checked`] without taking the command: the one-pass reader checks the
    /// command it built where it stands.
    pub(super) fn check(
        &self,
        check_target: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<(), String> {
        let rules = Rules {
            method: self.method(),
            check_target,
        };
        match self {
            Command::Execute(ExecutorCommand::Start(p)) => rules.start(p),
            Command::Execute(ExecutorCommand::Act(act)) => rules.action(&act.action),
            Command::Close(CloseCommand::Stop(p)) => {
                if p.reason.is_empty() {
                    return Err(
                        "invalid params for task.stop: `reason` is empty; say why the task is stopped"
                            .into(),
                    );
                }
                rules.sized("reason", REASON, &p.reason)
            }
            Command::Close(CloseCommand::Finish(_)) => Ok(()),
            Command::Read(read) => rules.read(read),
        }
    }
}

/// The checks of one command's params, in the words of its method: what
/// [`Command::check`] applies to each kind of command.
struct Rules<'c> {
    /// The command's method, named in every refusal.
    method: Method,
    /// The executor's selector check.
    check_target: &'c dyn Fn(&str) -> Result<(), String>,
}

impl Rules<'_> {
    /// `text` within `limit`.
    #[inline]
    fn sized(
        &self,
        field: &str,
        limit: super::limits::TextLimit,
        text: &str,
    ) -> Result<(), String> {
        let method = self.method;
        limit
            .check(field, text)
            .map_err(|e| format!("invalid params for {method}: {e}"))
    }

    /// A target the executor can look for: a CSS selector within its limit that the
    /// executor's check accepts, or a target of another kind that reads.
    fn target(&self, what: &str, target: &Target) -> Result<(), String> {
        let method = self.method;
        match target {
            Target::Css(css) => {
                self.sized(what, SELECTOR, css)?;
                (self.check_target)(css).map_err(|e| format!("invalid {what} for {method}: {e}"))
            }
            other => other
                .check(what, self.check_target)
                .map_err(|e| format!("invalid params for {method}: {e}")),
        }
    }

    /// The observation that shows an action took effect: required unless the step is `local`.
    fn expect(&self, expect: &Option<Expect>, local: bool) -> Result<(), String> {
        let method = self.method;
        let Some(expect) = expect else {
            if local {
                return Ok(());
            }
            return Err(format!(
                "invalid params for {method}: missing `expect`, the observation that shows the action took effect (e.g. {{\"target\":\"#status\",\"equals\":\"Saved #2\"}}); a step that commits nothing (focus, Tab, opening a menu) may send \"expect\": null with \"local\": true"
            ));
        };
        let (field, text) = match &expect.check {
            ExpectCheck::Equals(t) => ("expect.equals", t),
            ExpectCheck::Contains(t) => ("expect.contains", t),
        };
        self.sized(field, EXPECTED_TEXT, text)?;
        match &expect.subject {
            Subject::Target(t) => self.target("expect.target", t),
            Subject::Url | Subject::Text => Ok(()),
        }
    }

    /// The answer to a dialog the action may open.
    fn dialog(&self, dialog: &Option<Box<DialogAnswer>>) -> Result<(), String> {
        let Some(d) = dialog else {
            return Ok(());
        };
        if let Some(t) = &d.prompt_text {
            self.sized("dialog.promptText", VALUE, t)?;
        }
        if let Some(m) = &d.message {
            self.sized("dialog.message.contains", EXPECTED_TEXT, &m.contains)?;
        }
        Ok(())
    }

    /// `task.start`: a title saying what the task is for, and a URL, profile and fixture
    /// delays within their limits.
    fn start(&self, p: &TaskStartParams) -> Result<(), String> {
        if p.title.is_empty() {
            return Err(
                "invalid params for task.start: `title` is empty; say what the task is for".into(),
            );
        }
        self.sized("title", TITLE, &p.title)?;
        if let Some(url) = &p.url {
            self.sized("url", URL, url)?;
        }
        if let Some(name) = &p.profile {
            check_profile_name(name)
                .map_err(|e| format!("invalid params for task.start: profile: {e}"))?;
        }
        if let Some(f) = &p.fixture {
            for (name, v) in [
                ("submitDelayMs", f.submit_delay_ms),
                ("readDelayMs", f.read_delay_ms),
            ] {
                if v > MAX_FIXTURE_DELAY_MS {
                    return Err(format!(
                        "invalid params for task.start: fixture.{name} must be 0 to {MAX_FIXTURE_DELAY_MS} (got {v})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// An action on a task's page.
    fn action(&self, action: &PageAction) -> Result<(), String> {
        match action {
            PageAction::Fill { target, value } => match target {
                Target::Css(css) => Command::check_fill(css, value, self.check_target)?,
                other => {
                    self.sized("value", VALUE, value)?;
                    self.target("target", other)?;
                }
            },
            PageAction::Click {
                target,
                expect,
                local,
                dialog,
            } => {
                self.target("target", target)?;
                self.expect(expect, *local)?;
                self.dialog(dialog)?;
            }
            PageAction::Press {
                key,
                target,
                expect,
                local,
                dialog,
            } => {
                self.sized("key", KEY, key)?;
                KeyChord::parse(key).map_err(|e| format!("invalid params for page.press: {e}"))?;
                if let Some(t) = target {
                    self.target("target", t)?;
                }
                self.expect(expect, *local)?;
                self.dialog(dialog)?;
            }
            PageAction::Navigate {
                to, expect, dialog, ..
            } => {
                if let Navigation::Url(url) = to {
                    self.sized("url", URL, url)?;
                    if url.is_empty() {
                        return Err("invalid params for page.navigate: `url` is empty; send an http(s) URL, or back, forward or reload".into());
                    }
                }
                if expect.is_some() {
                    self.expect(expect, false)?;
                }
                self.dialog(dialog)?;
            }
            PageAction::Select { target, by } => {
                self.target("target", target)?;
                let (field, options) = match by {
                    SelectBy::Label(o) => ("label", o),
                    SelectBy::Value(o) => ("value", o),
                };
                if options.is_empty() || options.len() > MAX_SELECTED {
                    return Err(format!("invalid params for page.select: `{field}` names 1 to {MAX_SELECTED} options"));
                }
                for o in options {
                    self.sized(field, VALUE, o)?;
                }
            }
            PageAction::Check { target, .. } | PageAction::Hover { target } => {
                self.target("target", target)?;
            }
            PageAction::Upload { target, files } => {
                self.target("target", target)?;
                if files.is_empty() || files.len() > MAX_UPLOAD_FILES {
                    return Err(format!("invalid params for page.upload: `files` names 1 to {MAX_UPLOAD_FILES} files of the host's upload directory"));
                }
                for f in files {
                    self.sized("files", URL, f)?;
                }
            }
            PageAction::Type {
                target,
                text,
                expect,
            } => {
                self.target("target", target)?;
                if text.is_empty() {
                    return Err("invalid params for page.type: `text` is empty".into());
                }
                self.sized("text", VALUE, text)?;
                if expect.is_some() {
                    self.expect(expect, true)?;
                }
            }
            PageAction::SaveProfile { profile } => check_profile_name(profile)
                .map_err(|e| format!("invalid params for task.saveProfile: profile: {e}"))?,
        }
        Ok(())
    }

    /// A read: its target, text, snapshot size, timeout or request ID.
    fn read(&self, read: &ReadCommand) -> Result<(), String> {
        match read {
            ReadCommand::PageRead(p) => self.target("target", &p.target)?,
            ReadCommand::PageSnapshot(p) => {
                if let Some(n) = p.max_bytes {
                    if !(MIN_SNAPSHOT_BYTES..=SNAPSHOT_MAX_BYTES).contains(&n) {
                        return Err(format!("invalid params for page.snapshot: `maxBytes` must be {MIN_SNAPSHOT_BYTES} to {SNAPSHOT_MAX_BYTES} (got {n})"));
                    }
                }
            }
            ReadCommand::PageWait(p) => {
                match (&p.target, &p.text) {
                    (Some(t), None) => self.target("target", t)?,
                    (None, Some(text)) if !text.is_empty() => {
                        self.sized("text", EXPECTED_TEXT, text)?
                    }
                    _ => return Err("invalid params for page.wait: send exactly one of `target` or a non-empty `text`".into()),
                }
                if p.timeout_ms == Some(0) {
                    return Err(
                        "invalid params for page.wait: `timeoutMs` must be at least 1".into(),
                    );
                }
            }
            ReadCommand::PageScreenshot(p) => {
                if let Some(t) = &p.target {
                    self.target("target", t)?;
                }
            }
            ReadCommand::ReceiptStatus(p) => validate_id(&p.request_id)
                .map_err(|e| format!("invalid params for receipt.status: requestId: {e}"))?,
            ReadCommand::HostHello
            | ReadCommand::ToolsList
            | ReadCommand::PageUrl(_)
            | ReadCommand::PageTabs(_)
            | ReadCommand::TaskStatus(_)
            | ReadCommand::TaskResume(_)
            | ReadCommand::TaskVerifyOutcome(_)
            | ReadCommand::RunStatus(_) => {}
        }
        Ok(())
    }
}

impl ExecutorCommand {
    /// The method this command came from.
    pub fn method(&self) -> Method {
        match self {
            ExecutorCommand::Start(_) => Method::TaskStart,
            ExecutorCommand::Act(a) => a.action.method(),
        }
    }

    /// The task acted on; `None` for `task.start`, whose task does not exist yet.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            ExecutorCommand::Start(_) => None,
            ExecutorCommand::Act(a) => Some(&a.task_id),
        }
    }

    /// The observation that shows the command took effect, read again (instead of acting
    /// again) when its outcome is uncertain; `None` for `task.start`, which only opens a page,
    /// and for a local step sent without one.
    pub fn expectation(&self) -> Option<Expect> {
        match self {
            ExecutorCommand::Start(_) => None,
            ExecutorCommand::Act(a) => a.action.expectation(),
        }
    }
}

impl PageAction {
    /// The page method this action is asked for by.
    pub fn method(&self) -> Method {
        match self {
            PageAction::Fill { .. } => Method::PageFill,
            PageAction::Click { .. } => Method::PageClick,
            PageAction::Press { .. } => Method::PagePress,
            PageAction::Navigate { .. } => Method::PageNavigate,
            PageAction::Select { .. } => Method::PageSelect,
            PageAction::Check { .. } => Method::PageCheck,
            PageAction::Upload { .. } => Method::PageUpload,
            PageAction::Hover { .. } => Method::PageHover,
            PageAction::Type { .. } => Method::PageType,
            PageAction::SaveProfile { .. } => Method::TaskSaveProfile,
        }
    }

    /// The observation that shows the action took effect: a fill's is implicit (the field
    /// holds the value), a click's or a press's is the one the caller sent (`None` for a
    /// local step sent without one).
    pub fn expectation(&self) -> Option<Expect> {
        match self {
            PageAction::Fill { target, value } => Some(Expect::on(
                target.clone(),
                ExpectCheck::Equals(value.clone()),
            )),
            PageAction::Click { expect, .. }
            | PageAction::Press { expect, .. }
            | PageAction::Navigate { expect, .. }
            | PageAction::Type { expect, .. } => expect.clone(),
            PageAction::Select {
                target,
                by: SelectBy::Value(values),
            } => Some(Expect::on(
                target.clone(),
                ExpectCheck::Equals(values.join(",")),
            )),
            PageAction::Check { target, checked } => Some(Expect::on(
                target.clone(),
                ExpectCheck::Equals(checked.to_string()),
            )),
            PageAction::Select { .. }
            | PageAction::Upload { .. }
            | PageAction::Hover { .. }
            | PageAction::SaveProfile { .. } => None,
        }
    }

    /// Whether the action commits nothing by what it is or what the caller said: a fill, a
    /// select, a check, an upload (the form's submit sends the files), a hover and typing
    /// always; a click or a key press sent with `local: true`; a navigation never.
    pub fn is_local(&self) -> bool {
        match self {
            PageAction::Fill { .. }
            | PageAction::Select { .. }
            | PageAction::Check { .. }
            | PageAction::Upload { .. }
            | PageAction::Hover { .. }
            | PageAction::Type { .. } => true,
            PageAction::Click { local, .. } | PageAction::Press { local, .. } => *local,
            // Saving a profile writes a file of the host, nothing on the site.
            PageAction::SaveProfile { .. } => true,
            PageAction::Navigate { .. } => false,
        }
    }

    /// The target acted on, when the action has one.
    pub fn target(&self) -> Option<&Target> {
        match self {
            PageAction::Fill { target, .. }
            | PageAction::Click { target, .. }
            | PageAction::Select { target, .. }
            | PageAction::Check { target, .. }
            | PageAction::Upload { target, .. }
            | PageAction::Hover { target }
            | PageAction::Type { target, .. } => Some(target),
            PageAction::Press { target, .. } => target.as_ref(),
            PageAction::Navigate { .. } | PageAction::SaveProfile { .. } => None,
        }
    }

    /// How the caller asked a dialog this action opens to be answered.
    pub fn dialog(&self) -> Option<&DialogAnswer> {
        match self {
            PageAction::Click { dialog, .. }
            | PageAction::Press { dialog, .. }
            | PageAction::Navigate { dialog, .. } => dialog.as_deref(),
            _ => None,
        }
    }
}

impl CloseCommand {
    /// The method this command came from.
    pub fn method(&self) -> Method {
        match self {
            CloseCommand::Finish(_) => Method::TaskFinish,
            CloseCommand::Stop(_) => Method::TaskStop,
        }
    }

    /// The task closed.
    pub fn task_id(&self) -> &str {
        match self {
            CloseCommand::Finish(p) => &p.task_id,
            CloseCommand::Stop(p) => &p.task_id,
        }
    }
}

impl ReadCommand {
    /// The method this command came from.
    pub fn method(&self) -> Method {
        match self {
            ReadCommand::HostHello => Method::HostHello,
            ReadCommand::ToolsList => Method::ToolsList,
            ReadCommand::RunStatus(_) => Method::RunStatus,
            ReadCommand::ReceiptStatus(_) => Method::ReceiptStatus,
            ReadCommand::PageRead(_) => Method::PageRead,
            ReadCommand::TaskStatus(_) => Method::TaskStatus,
            ReadCommand::TaskResume(_) => Method::TaskResume,
            ReadCommand::TaskVerifyOutcome(_) => Method::TaskVerifyOutcome,
            ReadCommand::PageSnapshot(_) => Method::PageSnapshot,
            ReadCommand::PageWait(_) => Method::PageWait,
            ReadCommand::PageScreenshot(_) => Method::PageScreenshot,
            ReadCommand::PageUrl(_) => Method::PageUrl,
            ReadCommand::PageTabs(_) => Method::PageTabs,
        }
    }

    /// The task read, if the read names one.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            ReadCommand::HostHello
            | ReadCommand::ToolsList
            | ReadCommand::RunStatus(_)
            | ReadCommand::ReceiptStatus(_) => None,
            ReadCommand::PageRead(p) => Some(&p.task_id),
            ReadCommand::TaskStatus(p) | ReadCommand::TaskVerifyOutcome(p) => Some(&p.task_id),
            ReadCommand::TaskResume(p) => Some(&p.task_id),
            ReadCommand::PageSnapshot(p) => Some(&p.task_id),
            ReadCommand::PageWait(p) => Some(&p.task_id),
            ReadCommand::PageScreenshot(p) => Some(&p.task_id),
            ReadCommand::PageUrl(p) => Some(&p.task_id),
            ReadCommand::PageTabs(p) => Some(&p.task_id),
        }
    }

    /// The tab a page read addresses (SPEC §15): 0, the task's first page, unless it names
    /// another.
    pub fn tab(&self) -> u32 {
        match self {
            ReadCommand::PageRead(p) => p.tab,
            ReadCommand::PageSnapshot(p) => p.tab,
            ReadCommand::PageWait(p) => p.tab,
            ReadCommand::PageScreenshot(p) => p.tab,
            ReadCommand::PageUrl(p) => p.tab,
            _ => None,
        }
        .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// Params each bridge method accepts.
    fn params(method: Method) -> Value {
        let expect = json!({"target": "#status", "equals": "Saved"});
        match method {
            Method::TaskStart => json!({"title": "file the form"}),
            Method::PageFill => json!({"taskId": "t1", "target": "#title", "value": "Q3"}),
            Method::PageClick => json!({"taskId": "t1", "target": "#submit", "expect": expect}),
            Method::PagePress => json!({"taskId": "t1", "key": "Enter", "expect": expect}),
            Method::PageRead => json!({"taskId": "t1", "target": "#title"}),
            Method::TaskFinish | Method::TaskStatus | Method::TaskVerifyOutcome => {
                json!({"taskId": "t1"})
            }
            Method::TaskStop => json!({"taskId": "t1", "reason": "done by hand"}),
            Method::TaskResume => json!({"taskId": "t1", "runId": "r1"}),
            Method::RunStatus | Method::HostHello | Method::ToolsList => json!({}),
            Method::ReceiptStatus => json!({"requestId": "req-1"}),
            Method::PageSnapshot | Method::PageUrl | Method::PageTabs => json!({"taskId": "t1"}),
            Method::TaskSaveProfile => json!({"taskId": "t1", "profile": "shop-admin"}),
            Method::PageWait => json!({"taskId": "t1", "text": "Saved"}),
            Method::PageScreenshot => json!({"taskId": "t1", "target": {"ref": "e3"}}),
            Method::PageNavigate => {
                json!({"taskId": "t1", "url": "back", "expect": {"url": {"contains": "/site"}}})
            }
            Method::PageSelect => {
                json!({"taskId": "t1", "target": {"role": "combobox", "name": "Category"}, "label": "News"})
            }
            Method::PageCheck => json!({"taskId": "t1", "target": "#urgent", "checked": true}),
            Method::PageUpload => json!({"taskId": "t1", "target": "#file", "files": ["a.txt"]}),
            Method::PageHover => json!({"taskId": "t1", "target": {"text": "Help"}}),
            Method::PageType => json!({"taskId": "t1", "target": "#q", "text": "ber"}),
        }
    }

    /// A profile name is one path component inside `--profile-dir`, nothing else; `tab`
    /// reaches the command of every page action and page read.
    #[test]
    fn profile_names_and_tabs() {
        for ok in [
            "shop",
            "shop-admin_2.v1",
            "A",
            &"x".repeat(MAX_PROFILE_NAME),
        ] {
            assert!(check_profile_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../etc",
            "/abs",
            "a b",
            "naïve",
            "a\\b",
            "x\u{0}",
            &"x".repeat(MAX_PROFILE_NAME + 1),
        ] {
            assert!(check_profile_name(bad).is_err(), "{bad:?}");
        }
        let parse = |method, p: Value| Command::parse(method, &p, &|_| Ok(()));
        for bad in ["../x", "a/b", ""] {
            let e = parse(Method::TaskStart, json!({"title": "t", "profile": bad})).unwrap_err();
            assert!(e.contains("profile"), "{e}");
            let e = parse(
                Method::TaskSaveProfile,
                json!({"taskId": "t1", "profile": bad}),
            )
            .unwrap_err();
            assert!(e.contains("profile"), "{e}");
        }
        let mut click = params(Method::PageClick);
        assert_eq!(parse(Method::PageClick, click.clone()).unwrap().tab(), 0);
        click["tab"] = json!(1);
        assert_eq!(parse(Method::PageClick, click.clone()).unwrap().tab(), 1);
        click["tab"] = json!(-1);
        assert!(parse(Method::PageClick, click).is_err());
        let read = json!({"taskId": "t1", "target": "#who", "tab": 2});
        assert_eq!(parse(Method::PageRead, read).unwrap().tab(), 2);
        let url = json!({"taskId": "t1", "tab": 3});
        assert_eq!(parse(Method::PageUrl, url).unwrap().tab(), 3);
    }

    #[test]
    fn every_method_parses_into_the_family_the_method_table_says() {
        for &method in Method::BRIDGE {
            let cmd = Command::parse(method, &params(method), &|_| Ok(()))
                .unwrap_or_else(|e| panic!("{method}: {e}"));
            assert_eq!(cmd.method(), method);
            let takes_receipt = match &cmd {
                Command::Execute(work) => {
                    assert_eq!(work.method(), method);
                    // Only a page action has an observation to verify an uncertain outcome by;
                    // one without is a page-local step.
                    match work {
                        ExecutorCommand::Start(_) => assert!(work.expectation().is_none()),
                        ExecutorCommand::Act(a) => assert!(
                            work.expectation().is_some() || a.action.is_local(),
                            "{method}"
                        ),
                    }
                    true
                }
                Command::Close(close) => {
                    assert_eq!(close.method(), method);
                    true
                }
                Command::Read(read) => {
                    assert_eq!(read.method(), method);
                    false
                }
            };
            assert_eq!(takes_receipt, method.is_mutating(), "{method}");
            let named = params(method)
                .get("taskId")
                .and_then(Value::as_str)
                .map(str::to_owned);
            assert_eq!(cmd.task_id().map(str::to_owned), named, "{method}");
        }
    }

    #[test]
    fn a_fill_is_verified_by_reading_its_value_back() {
        let Command::Execute(ExecutorCommand::Act(act)) =
            Command::parse(Method::PageFill, &params(Method::PageFill), &|_| Ok(())).unwrap()
        else {
            panic!("page.fill is a page action");
        };
        assert_eq!(
            act.action.expectation(),
            Some(Expect::on("#title", ExpectCheck::Equals("Q3".into())))
        );
        let Command::Execute(ExecutorCommand::Act(act)) =
            Command::parse(Method::PageClick, &params(Method::PageClick), &|_| Ok(())).unwrap()
        else {
            panic!("page.click is a page action");
        };
        assert_eq!(
            act.action.expectation(),
            Some(Expect::on("#status", ExpectCheck::Equals("Saved".into())))
        );
    }

    /// A click or a key press needs an expectation unless the caller says it is a local step;
    /// a local step may still carry one. Chords are checked where the params are.
    #[test]
    fn only_a_local_step_goes_without_an_expectation() {
        let parse = |method, p: Value| Command::parse(method, &p, &|_| Ok(()));
        let no_expect = json!({"taskId": "t1", "target": "#title", "key": "Tab"});
        let e = parse(Method::PagePress, no_expect.clone()).unwrap_err();
        assert!(e.contains("missing `expect`") && e.contains("local"), "{e}");
        let e = parse(
            Method::PageClick,
            json!({"taskId": "t1", "target": "#x", "expect": null}),
        )
        .unwrap_err();
        assert!(e.contains("missing `expect`"), "{e}");
        let mut local = no_expect;
        local["local"] = json!(true);
        local["expect"] = Value::Null;
        let Command::Execute(ExecutorCommand::Act(act)) =
            parse(Method::PagePress, local.clone()).unwrap()
        else {
            panic!("page.press is a page action");
        };
        assert!(act.action.is_local() && act.action.expectation().is_none());
        for (key, ok) in [
            ("Control+a", true),
            ("Shift+ArrowDown", true),
            ("Ctrl+a", false),
        ] {
            local["key"] = json!(key);
            assert_eq!(parse(Method::PagePress, local.clone()).is_ok(), ok, "{key}");
        }
        let dialog = json!({"taskId": "t1", "target": "#delete", "expect": {"target": "#status", "equals": "Deleted"},
            "dialog": {"accept": true, "message": {"contains": "Delete?"}}});
        let Command::Execute(ExecutorCommand::Act(act)) = parse(Method::PageClick, dialog).unwrap()
        else {
            panic!("page.click is a page action");
        };
        let answer = act.action.dialog().expect("the dialog answer");
        assert!(
            answer.accept
                && answer.matches("Delete? This cannot be undone")
                && !answer.matches("Leave?")
        );
        assert!(parse(
            Method::PageClick,
            json!({"taskId": "t1", "target": "#d", "expect": null, "local": true, "dialog": [true]})
        )
        .is_err());
    }
}
