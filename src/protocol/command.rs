//! Commands: a bridge request's method and params, checked and typed.

use serde::de::DeserializeOwned;

use super::id::validate_id;
use super::limits::{EXPECTED_TEXT, KEY, REASON, SELECTOR, TITLE, URL, VALUE};
use super::method::Method;
use super::params::Expect;
use super::params::{
    NoParams, PageClickParams, PageFillParams, PagePressParams, PageReadParams, Params,
    ReceiptStatusParams, RunStatusParams, TaskParams, TaskResumeParams, TaskStartParams,
    TaskStopParams, MAX_FIXTURE_DELAY_MS,
};

/// A bridge request after validation: the typed command the host acts on, so nothing past this
/// point reads params out of JSON again.
#[derive(Clone, Debug)]
pub enum Command {
    /// `task.start`
    TaskStart(TaskStartParams),
    /// `page.fill`
    PageFill(PageFillParams),
    /// `page.click`
    PageClick(PageClickParams),
    /// `page.press`
    PagePress(PagePressParams),
    /// `task.finish`
    TaskFinish(TaskParams),
    /// `task.stop`
    TaskStop(TaskStopParams),
    /// `host.hello`
    HostHello,
    /// `tools.list`
    ToolsList,
    /// `page.read`
    PageRead(PageReadParams),
    /// `task.status`
    TaskStatus(TaskParams),
    /// `task.resume`
    TaskResume(TaskResumeParams),
    /// `task.verifyOutcome`
    TaskVerifyOutcome(TaskParams),
    /// `run.status`
    RunStatus(RunStatusParams),
    /// `receipt.status`
    ReceiptStatus(ReceiptStatusParams),
}

impl Command {
    /// The method this command came from.
    pub fn method(&self) -> Method {
        match self {
            Command::TaskStart(_) => Method::TaskStart,
            Command::PageFill(_) => Method::PageFill,
            Command::PageClick(_) => Method::PageClick,
            Command::PagePress(_) => Method::PagePress,
            Command::TaskFinish(_) => Method::TaskFinish,
            Command::TaskStop(_) => Method::TaskStop,
            Command::HostHello => Method::HostHello,
            Command::ToolsList => Method::ToolsList,
            Command::PageRead(_) => Method::PageRead,
            Command::TaskStatus(_) => Method::TaskStatus,
            Command::TaskResume(_) => Method::TaskResume,
            Command::TaskVerifyOutcome(_) => Method::TaskVerifyOutcome,
            Command::RunStatus(_) => Method::RunStatus,
            Command::ReceiptStatus(_) => Method::ReceiptStatus,
        }
    }

    /// The task a command acts on, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Command::PageFill(p) => Some(&p.task_id),
            Command::PageClick(p) => Some(&p.task_id),
            Command::PagePress(p) => Some(&p.task_id),
            Command::PageRead(p) => Some(&p.task_id),
            Command::TaskFinish(p) | Command::TaskStatus(p) | Command::TaskVerifyOutcome(p) => {
                Some(&p.task_id)
            }
            Command::TaskStop(p) => Some(&p.task_id),
            Command::TaskResume(p) => Some(&p.task_id),
            _ => None,
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
            Method::TaskStart => Command::TaskStart(typed(method, params)?),
            Method::PageFill => Command::PageFill(typed(method, params)?),
            Method::PageClick => Command::PageClick(typed(method, params)?),
            Method::PagePress => Command::PagePress(typed(method, params)?),
            Method::TaskFinish => Command::TaskFinish(typed(method, params)?),
            Method::TaskStop => Command::TaskStop(typed(method, params)?),
            Method::HostHello => {
                typed::<NoParams, P>(method, params)?;
                Command::HostHello
            }
            Method::ToolsList => {
                typed::<NoParams, P>(method, params)?;
                Command::ToolsList
            }
            Method::PageRead => Command::PageRead(typed(method, params)?),
            Method::TaskStatus => Command::TaskStatus(typed(method, params)?),
            Method::TaskResume => Command::TaskResume(typed(method, params)?),
            Method::TaskVerifyOutcome => Command::TaskVerifyOutcome(typed(method, params)?),
            Method::RunStatus => Command::RunStatus(typed(method, params)?),
            Method::ReceiptStatus => Command::ReceiptStatus(typed(method, params)?),
        };
        cmd.checked(check_target)
    }

    /// The checks a command's params get once they have the right shape: text limits, the
    /// executor's selector check, non-empty titles, reasons and keys, fixture delays and the
    /// `requestId` of `receipt.status`. The one home of these rules, whichever parser typed
    /// the params.
    pub(super) fn checked(
        self,
        check_target: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<Command, String> {
        let method = self.method();
        let sized = |field: &str, limit: super::limits::TextLimit, text: &str| {
            limit
                .check(field, text)
                .map_err(|e| format!("invalid params for {method}: {e}"))
        };
        let target_ok = |what: &str, target: &str| {
            sized(what, SELECTOR, target)?;
            check_target(target).map_err(|e| format!("invalid {what} for {method}: {e}"))
        };
        let expect_ok = |expect: &Expect| {
            let (field, text) = match &expect.check {
                super::params::ExpectCheck::Equals(t) => ("expect.equals", t),
                super::params::ExpectCheck::Contains(t) => ("expect.contains", t),
            };
            sized(field, EXPECTED_TEXT, text)?;
            target_ok("expect.target", &expect.target)
        };
        match &self {
            Command::TaskStart(p) => {
                if p.title.is_empty() {
                    return Err(
                        "invalid params for task.start: `title` is empty; say what the task is for"
                            .into(),
                    );
                }
                sized("title", TITLE, &p.title)?;
                if let Some(url) = &p.url {
                    sized("url", URL, url)?;
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
            }
            Command::PageFill(p) => {
                sized("value", VALUE, &p.value)?;
                target_ok("target", &p.target)?;
            }
            Command::PageClick(p) => {
                target_ok("target", &p.target)?;
                expect_ok(&p.expect)?;
            }
            Command::PagePress(p) => {
                if p.key.is_empty() {
                    return Err("invalid params for page.press: key must not be empty".into());
                }
                sized("key", KEY, &p.key)?;
                if let Some(t) = &p.target {
                    target_ok("target", t)?;
                }
                expect_ok(&p.expect)?;
            }
            Command::TaskStop(p) => {
                if p.reason.is_empty() {
                    return Err(
                        "invalid params for task.stop: `reason` is empty; say why the task is stopped"
                            .into(),
                    );
                }
                sized("reason", REASON, &p.reason)?;
            }
            Command::PageRead(p) => target_ok("target", &p.target)?,
            Command::ReceiptStatus(p) => validate_id(&p.request_id)
                .map_err(|e| format!("invalid params for receipt.status: requestId: {e}"))?,
            Command::TaskFinish(_)
            | Command::HostHello
            | Command::ToolsList
            | Command::TaskStatus(_)
            | Command::TaskResume(_)
            | Command::TaskVerifyOutcome(_)
            | Command::RunStatus(_) => {}
        }
        Ok(self)
    }
}
