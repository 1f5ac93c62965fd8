//! Commands: a bridge request's method and params, checked and typed.

use serde::de::DeserializeOwned;

use super::id::validate_id;
use super::method::Method;
use super::params::{
    NoParams, PageClickParams, PageFillParams, PagePressParams, PageReadParams, Params,
    ReceiptStatusParams, RunStatusParams, TaskParams, TaskResumeParams, TaskStartParams,
    TaskStopParams, MAX_FIXTURE_DELAY_MS, MAX_URL_BYTES,
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
    /// params ([`Params`]); every check lives here either way, so both parse paths accept and
    /// refuse the same requests.
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
        let target_ok = |what: &str, target: &str| {
            check_target(target).map_err(|e| format!("invalid {what} for {method}: {e}"))
        };
        let cmd = match method {
            Method::TaskStart => {
                let p: TaskStartParams = typed(method, params)?;
                let len = p.title.chars().count();
                if !(1..=200).contains(&len) {
                    return Err(format!(
                        "invalid params for task.start: title must be 1 to 200 characters (got {len})"
                    ));
                }
                if let Some(url) = &p.url {
                    if url.len() > MAX_URL_BYTES {
                        return Err(format!(
                            "invalid params for task.start: url must be at most {MAX_URL_BYTES} bytes (got {})",
                            url.len()
                        ));
                    }
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
                Command::TaskStart(p)
            }
            Method::PageFill => {
                let p: PageFillParams = typed(method, params)?;
                target_ok("target", &p.target)?;
                Command::PageFill(p)
            }
            Method::PageClick => {
                let p: PageClickParams = typed(method, params)?;
                target_ok("target", &p.target)?;
                target_ok("expect.target", &p.expect.target)?;
                Command::PageClick(p)
            }
            Method::PagePress => {
                let p: PagePressParams = typed(method, params)?;
                if p.key.is_empty() {
                    return Err("invalid params for page.press: key must not be empty".into());
                }
                if let Some(t) = &p.target {
                    target_ok("target", t)?;
                }
                target_ok("expect.target", &p.expect.target)?;
                Command::PagePress(p)
            }
            Method::TaskFinish => Command::TaskFinish(typed(method, params)?),
            Method::TaskStop => {
                let p: TaskStopParams = typed(method, params)?;
                let len = p.reason.chars().count();
                if !(1..=500).contains(&len) {
                    return Err(format!(
                        "invalid params for task.stop: reason must be 1 to 500 characters (got {len})"
                    ));
                }
                Command::TaskStop(p)
            }
            Method::HostHello => {
                typed::<NoParams, P>(method, params)?;
                Command::HostHello
            }
            Method::ToolsList => {
                typed::<NoParams, P>(method, params)?;
                Command::ToolsList
            }
            Method::PageRead => {
                let p: PageReadParams = typed(method, params)?;
                target_ok("target", &p.target)?;
                Command::PageRead(p)
            }
            Method::TaskStatus => Command::TaskStatus(typed(method, params)?),
            Method::TaskResume => Command::TaskResume(typed(method, params)?),
            Method::TaskVerifyOutcome => Command::TaskVerifyOutcome(typed(method, params)?),
            Method::RunStatus => Command::RunStatus(typed(method, params)?),
            Method::ReceiptStatus => {
                let p: ReceiptStatusParams = typed(method, params)?;
                validate_id(&p.request_id)
                    .map_err(|e| format!("invalid params for receipt.status: requestId: {e}"))?;
                Command::ReceiptStatus(p)
            }
        };
        Ok(cmd)
    }
}
