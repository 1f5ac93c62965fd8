//! The method table: every method of the bridge socket, its wire name, whether it mutates and
//! how `tools.list` describes it.

use std::fmt;
use std::str::FromStr;

/// Every bridge method, by wire name: the host, `tools.list` and the MCP front all read this
/// one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `task.start`
    TaskStart,
    /// `page.fill`
    PageFill,
    /// `page.click`
    PageClick,
    /// `page.press`
    PagePress,
    /// `task.finish`
    TaskFinish,
    /// `task.stop`
    TaskStop,
    /// `host.hello`
    HostHello,
    /// `tools.list`
    ToolsList,
    /// `page.read`
    PageRead,
    /// `task.status`
    TaskStatus,
    /// `task.resume`
    TaskResume,
    /// `task.verifyOutcome`
    TaskVerifyOutcome,
    /// `run.status`
    RunStatus,
    /// `receipt.status`
    ReceiptStatus,
    /// `page.snapshot`
    PageSnapshot,
    /// `page.wait`
    PageWait,
    /// `page.screenshot`
    PageScreenshot,
    /// `page.url`
    PageUrl,
    /// `page.navigate`
    PageNavigate,
    /// `page.select`
    PageSelect,
    /// `page.check`
    PageCheck,
    /// `page.upload`
    PageUpload,
    /// `page.hover`
    PageHover,
    /// `page.type`
    PageType,
    /// `page.tabs`
    PageTabs,
    /// `task.saveProfile`
    TaskSaveProfile,
}

impl Method {
    /// The methods of the bridge socket, in the order `tools.list` reports them.
    pub const BRIDGE: &'static [Method] = &[
        Method::TaskStart,
        Method::PageFill,
        Method::PageClick,
        Method::PagePress,
        Method::PageNavigate,
        Method::PageSelect,
        Method::PageCheck,
        Method::PageUpload,
        Method::PageHover,
        Method::PageType,
        Method::PageRead,
        Method::PageSnapshot,
        Method::PageWait,
        Method::PageScreenshot,
        Method::PageUrl,
        Method::PageTabs,
        Method::TaskSaveProfile,
        Method::TaskFinish,
        Method::TaskStop,
        Method::TaskStatus,
        Method::TaskResume,
        Method::TaskVerifyOutcome,
        Method::RunStatus,
        Method::ReceiptStatus,
        Method::HostHello,
        Method::ToolsList,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::TaskStart => "task.start",
            Method::PageFill => "page.fill",
            Method::PageClick => "page.click",
            Method::PagePress => "page.press",
            Method::TaskFinish => "task.finish",
            Method::TaskStop => "task.stop",
            Method::HostHello => "host.hello",
            Method::ToolsList => "tools.list",
            Method::PageRead => "page.read",
            Method::TaskStatus => "task.status",
            Method::TaskResume => "task.resume",
            Method::TaskVerifyOutcome => "task.verifyOutcome",
            Method::RunStatus => "run.status",
            Method::ReceiptStatus => "receipt.status",
            Method::PageSnapshot => "page.snapshot",
            Method::PageWait => "page.wait",
            Method::PageScreenshot => "page.screenshot",
            Method::PageUrl => "page.url",
            Method::PageNavigate => "page.navigate",
            Method::PageSelect => "page.select",
            Method::PageCheck => "page.check",
            Method::PageUpload => "page.upload",
            Method::PageHover => "page.hover",
            Method::PageType => "page.type",
            Method::PageTabs => "page.tabs",
            Method::TaskSaveProfile => "task.saveProfile",
        }
    }

    /// Whether the method asks for a side effect (and so takes a receipt).
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Method::TaskStart
                | Method::PageFill
                | Method::PageClick
                | Method::PagePress
                | Method::PageNavigate
                | Method::PageSelect
                | Method::PageCheck
                | Method::PageUpload
                | Method::PageHover
                | Method::PageType
                | Method::TaskSaveProfile
                | Method::TaskFinish
                | Method::TaskStop
        )
    }

    /// One line for `tools.list` and the MCP tool descriptions.
    pub fn description(self) -> &'static str {
        match self {
            Method::TaskStart => "Start a task: opens a page for one unit of business work and returns its taskId and runId; keep both.",
            Method::PageFill => "Fill a field of the task's page with a value (a page-local change).",
            Method::PageClick => "Click a target and observe the expectation that shows the click took effect.",
            Method::PagePress => "Press a key (Enter submits) and observe the expectation that shows it took effect.",
            Method::TaskFinish => "Finish a task whose work is done; a blocked task cannot finish until its outcome is verified.",
            Method::TaskStop => "Stop a task with a reason; an unresolved pending outcome stays recorded.",
            Method::HostHello => "Name, version, protocol, run and capacity of this host.",
            Method::ToolsList => "The methods of this socket and whether each one mutates.",
            Method::PageRead => "Read the current value of a target on the task's page.",
            Method::TaskStatus => "A task's state, its pending outcome and its recent history.",
            Method::TaskResume => "Check a kept (taskId, runId) pair against this run and return the task's state.",
            Method::TaskVerifyOutcome => "Read-only check of a blocked task's pending action against its original expectation.",
            Method::RunStatus => "This run's receipts, tasks and executor mutation count.",
            Method::ReceiptStatus => "The current state and stored reply of a request ID: read this instead of resending.",
            Method::PageSnapshot => "An outline of the task's page (roles, names, values, states) with a ref for each element to act on; refs last until the page navigates or is snapshotted again.",
            Method::PageWait => "Wait until a target appears or disappears, or a text shows, on the task's page (read-only).",
            Method::PageScreenshot => "A PNG of the task's page (the viewport) or of one element (read-only).",
            Method::PageUrl => "The URL and title of the task's page (read-only).",
            Method::PageNavigate => "Go to a URL, or back, forward or reload; a navigation that would re-send a form is refused unless allowResubmit.",
            Method::PageSelect => "Select options of a select by label or value (a page-local change).",
            Method::PageCheck => "Check or uncheck a checkbox or radio (a page-local change).",
            Method::PageUpload => "Put files from the host's upload directory into a file input (a page-local change; the form's submit sends them).",
            Method::PageHover => "Move the pointer over a target (a page-local step).",
            Method::PageType => "Type text key by key into a field, for fields that react to typing (a page-local change).",
            Method::PageTabs => "The task's tabs (tab 0 is its first page; pages its actions opened follow) with their URL and title (read-only); page methods take `tab` to address one.",
            Method::TaskSaveProfile => "Save the task's browser state (cookies, so its logins) as a named profile of the host's --profile-dir, for task.start's `profile`.",
        }
    }
}

impl Method {
    /// Whether the method is one of the page vocabulary of SPEC §15, which an executor may not
    /// offer ([`Method::is_core`] is its opposite).
    pub fn is_core(self) -> bool {
        !matches!(
            self,
            Method::PageSnapshot
                | Method::PageWait
                | Method::PageScreenshot
                | Method::PageUrl
                | Method::PageNavigate
                | Method::PageSelect
                | Method::PageCheck
                | Method::PageUpload
                | Method::PageHover
                | Method::PageType
                | Method::PageTabs
                | Method::TaskSaveProfile
        )
    }
}

impl FromStr for Method {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        Method::BRIDGE
            .iter()
            .copied()
            .find(|m| m.as_str() == s)
            .ok_or(())
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
