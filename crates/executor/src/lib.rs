//! The executor: what actually performs actions on a page and observes targets.
//!
//! The host only knows this trait. An action either is observed to take effect before its
//! deadline, fails definitively with no effect, or ends uncertain; observation is read-only.
//! The embedded default is [`FixtureExecutor`], a simulated form page per task whose backend
//! counts applied submissions, with knobs to make submits late, lost or rejected.
//! [`chromium::ChromiumExecutor`] drives real pages in a headless Chromium.

#![warn(missing_docs)]

// The layers below, under the names this crate's modules use for them.
use polaris_protocol as protocol;
use polaris_state::tasks;

pub mod chromium;
mod fixture_outline;

use std::collections::HashMap;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::protocol::results::{DialogSeen, Tab};
use crate::protocol::{
    Command, Expect, FixtureOptions, KeyChord, Method, NetworkEvidence, SelectBy, SnapshotNode,
    Subject, Target, WaitState,
};
pub use crate::protocol::{NotSent, PageAction};
use crate::tasks::{Observation, TaskId};

use fixture_outline::{resolve, Element, Refs, CATEGORY, CATEGORY_OPTIONS, URGENT};

/// How an action ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionOutcome {
    /// The effect was observed before the deadline.
    Applied(Observation),
    /// A local step sent without an expectation ran, and did nothing beyond the page (no
    /// navigation, no submit) that the executor could see.
    LocalDone,
    /// A definite failure with no effect.
    Failed(String),
    /// Refused before anything was dispatched to the page, for `cause`.
    NotSent(NotSent, String),
    /// Anything else: the effect may or may not have happened.
    Uncertain(String),
}

/// A read of the page beyond one target's value (SPEC §15): answered every time, never
/// stored, changing nothing.
#[derive(Clone, Debug)]
pub enum PageQuery {
    /// The accessibility outline with refs; the host renders and bounds it.
    Snapshot,
    /// Wait until `target` (or `text`) reaches `state`, until `until` at most.
    Wait {
        /// The target waited for.
        target: Option<Target>,
        /// The text waited for.
        text: Option<String>,
        /// Shown or gone.
        state: WaitState,
        /// When to give up (`READ_TIMEOUT`).
        until: Instant,
    },
    /// A PNG of the viewport, or of `target`.
    Screenshot {
        /// The element, when one.
        target: Option<Target>,
    },
    /// The page's URL and title.
    Url,
    /// The task's open tabs (SPEC §15).
    Tabs,
}

/// How a [`PageQuery`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryOutcome {
    /// The outline: the page's URL and title and its nodes in document order.
    Snapshot {
        /// The page's URL.
        url: String,
        /// The page's title.
        title: String,
        /// The nodes, depth first.
        nodes: Vec<SnapshotNode>,
    },
    /// The wait was satisfied.
    Waited,
    /// The PNG, base64-encoded (as CDP gives it and the reply carries it).
    Screenshot(String),
    /// The page's URL and title.
    Url {
        /// The URL.
        url: String,
        /// The title.
        title: String,
    },
    /// The task's open tabs, tab 0 first.
    Tabs(Vec<Tab>),
    /// The query did not finish in time.
    TimedOut,
    /// The query failed (no page, a target that matches nothing, …).
    Failed(String),
    /// Refused for `cause`, as an action's [`NotSent`] (a stale ref, an ambiguous locator).
    Refused(NotSent, String),
}

/// Why an action or read naming a tab the task does not have sends nothing.
pub fn no_tab(task: &str, tab: u32) -> String {
    format!("task {task} has no open tab {tab}; nothing was sent. Call page.tabs for its open tabs (0 is its first page)")
}

/// What the fixture answers a method it does not offer: `task.saveProfile` names the
/// executor and flags that have profiles.
fn fixture_unsupported(method: Method) -> String {
    match method {
        Method::TaskSaveProfile => "task.saveProfile is not offered by the fixture executor: profiles (saved logins) are the Chromium executor's; run polaris serve --executor chromium --profile-dir DIR".into(),
        _ => unsupported("fixture", method),
    }
}

/// What a method this executor does not offer answers (a `BAD_REQUEST`, nothing stored).
pub fn unsupported(kind: &str, method: Method) -> String {
    format!(
        "{method} is not offered by the {kind} executor; run the host with the browser (polaris serve --executor chromium) for the whole page vocabulary"
    )
}

/// The refusal of an action whose expectation held before anything was dispatched: it could
/// only ever "confirm" a value the page already showed.
pub fn expectation_already_holds(expect: &Expect, value: &str) -> ActionOutcome {
    ActionOutcome::NotSent(
        NotSent::ExpectationAlreadyHolds,
        format!(
            "the expectation already holds before the action ({} is {value:?}), so it could not show the action's effect; nothing was sent. Expect something only this action's effect makes true (for a counter, the next value; for a status, the text it changes to)",
            expect.subject
        ),
    )
}

/// How a read ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The target's value.
    Value(String),
    /// The read did not finish before the deadline.
    TimedOut,
    /// The read failed (no such page, ...).
    Failed(String),
    /// The page was read and nothing on it matches the target (the reason says what was read).
    Absent(String),
    /// The task's page had died and was opened again to read it: what that read found. A
    /// reopened page shows what the server sends back to a plain load, which may not show an
    /// effect that happened, so its silence proves nothing (SPEC §14).
    Reopened(Box<ReadOutcome>),
}

/// What the host needs from a page backend.
pub trait Executor: Send + Sync + 'static {
    /// A short name for `run.status.executor.kind`.
    fn kind(&self) -> &'static str;

    /// Checks a selector before anything is created, so a malformed one is a `BAD_REQUEST`.
    fn check_target(&self, target: &str) -> Result<(), String>;

    /// Whether this executor offers `method` (`tools.list` lists only those). The default
    /// offers the core methods only.
    fn offers(&self, method: Method) -> bool {
        method.is_core()
    }

    /// Checks a command this executor may not offer, or whose params only it can judge (an
    /// upload's files against its upload directory), before anything is created: the refusal
    /// is a `BAD_REQUEST`.
    fn check_command(&self, command: &Command) -> Result<(), String> {
        let method = command.method();
        if self.offers(method) {
            Ok(())
        } else {
            Err(unsupported(self.kind(), method))
        }
    }

    /// Answers a [`PageQuery`] on the page of `task`, by `deadline`.
    fn query(
        &self,
        task: TaskId,
        query: PageQuery,
        deadline: Instant,
    ) -> BoxFuture<'static, QueryOutcome> {
        let _ = (task, query, deadline);
        let kind = self.kind();
        Box::pin(async move {
            QueryOutcome::Failed(format!("the {kind} executor answers no page queries"))
        })
    }

    /// [`Executor::query`] on tab `tab` of the task (SPEC §15). The default knows only tab 0,
    /// the task's first page.
    fn query_in(
        &self,
        task: TaskId,
        tab: u32,
        query: PageQuery,
        deadline: Instant,
    ) -> BoxFuture<'static, QueryOutcome> {
        if tab == 0 || matches!(query, PageQuery::Tabs) {
            return self.query(task, query, deadline);
        }
        Box::pin(async move { QueryOutcome::Refused(NotSent::NoTab, no_tab(&task, tab)) })
    }

    /// [`Executor::observe`] on tab `tab` of the task (SPEC §15). The default knows only tab 0.
    fn observe_in(
        &self,
        task: TaskId,
        tab: u32,
        subject: Subject,
        deadline: Instant,
    ) -> BoxFuture<'static, ReadOutcome> {
        if tab == 0 {
            return self.observe(task, subject, deadline);
        }
        Box::pin(async move { ReadOutcome::Failed(no_tab(&task, tab)) })
    }

    /// [`Executor::act_for`] on tab `tab` of the task (SPEC §15). The default knows only tab
    /// 0; any other is refused with nothing sent.
    fn act_in(
        &self,
        request_id: &str,
        task: TaskId,
        tab: u32,
        action: PageAction,
        deadline: Instant,
    ) -> BoxFuture<'static, ActionOutcome> {
        if tab == 0 {
            return self.act_for(request_id, task, action, deadline);
        }
        Box::pin(async move { ActionOutcome::NotSent(NotSent::NoTab, no_tab(&task, tab)) })
    }

    /// The tabs the task's pages opened since the last call (`window.open`, `target=_blank`;
    /// SPEC §15), for the reply of the action that opened them.
    fn take_opened(&self, task: &str) -> Vec<Tab> {
        let _ = task;
        Vec::new()
    }

    /// Checks a `task.start`'s `url` before anything is created, so a request this executor
    /// could never open (no url where one is needed, a scheme it does not load) is a
    /// `BAD_REQUEST` and stores no receipt.
    fn check_start(&self, url: Option<&str>) -> Result<(), String> {
        let _ = url;
        Ok(())
    }

    /// Opens the page of a new task at `url` (when the executor uses one), by `deadline`.
    fn open(
        &self,
        task: TaskId,
        url: Option<String>,
        options: FixtureOptions,
        deadline: Instant,
    ) -> BoxFuture<'static, Result<(), String>>;

    /// [`Executor::open`] with the task's browser state first loaded from the saved login
    /// `profile` (SPEC §15), when it names one. The default has no profiles and opens the page
    /// as [`Executor::open`] does; [`Executor::check_command`] refuses a `profile` before.
    fn open_with(
        &self,
        task: TaskId,
        url: Option<String>,
        profile: Option<String>,
        options: FixtureOptions,
        deadline: Instant,
    ) -> BoxFuture<'static, Result<(), String>> {
        let _ = profile;
        self.open(task, url, options, deadline)
    }

    /// Performs an action and waits, until `deadline` at most, for its effect.
    fn act(
        &self,
        task: TaskId,
        action: PageAction,
        deadline: Instant,
    ) -> BoxFuture<'static, ActionOutcome>;

    /// [`Executor::act`] on behalf of request `request_id`: an executor that records its
    /// effects outside the host (the fixture's `--fixture-effects`) names the request there.
    fn act_for(
        &self,
        request_id: &str,
        task: TaskId,
        action: PageAction,
        deadline: Instant,
    ) -> BoxFuture<'static, ActionOutcome> {
        let _ = request_id;
        self.act(task, action, deadline)
    }

    /// Fills `target` with `value` on the page of `task` at once, when this executor can do
    /// it without waiting (a page-local change it applies and sees in one step): `Some(Ok(()))`
    /// says the field now holds `value`, `Some(Err(reason))` is a definite failure with no
    /// effect. `None` (the default) sends the fill through [`Executor::act_for`] instead.
    ///
    /// It exists for the host's hottest action: a fill answered here needs no future, no
    /// deadline and no copy of its strings.
    fn fill_now(&self, task: &str, target: &str, value: &str) -> Option<Result<(), String>> {
        let _ = (task, target, value);
        None
    }

    /// Whether [`Executor::fill_now`] answers every fill (never `None`). The host then does a
    /// fill that nothing of its task is waiting behind inside the critical section that
    /// admitted it, so it need not queue it on its task (SPEC §14: one action at a time) —
    /// the hottest path keeps no queue entry.
    fn fills_at_once(&self) -> bool {
        false
    }

    /// The dialogs the page of `task` opened since the last call, and how each was answered
    /// (SPEC §14: answered as the action asked, else dismissed; never left open). The host
    /// takes them when an action or a read ends: a task runs one action at a time, so those
    /// an action's call takes are that action's.
    fn take_dialogs(&self, task: &str) -> Vec<DialogSeen> {
        let _ = task;
        Vec::new()
    }

    /// What the page of `task` sent since its latest action dispatched its first input event
    /// (SPEC §16: requests other than `GET`/`HEAD`/`OPTIONS`, and navigations, with their
    /// answers), or `None` when this executor does not watch the network or nothing was
    /// dispatched. `watching` keeps watching for this action (its outcome is uncertain: a late
    /// answer shows in the next call); otherwise the watch ends. The host calls it when an
    /// action ends, when its pending outcome is verified, and to end the watch when the
    /// outcome is acknowledged or the task closes.
    fn evidence(&self, task: &str, watching: bool) -> Option<NetworkEvidence> {
        let _ = (task, watching);
        None
    }

    /// Reads a target's value, or the page's URL or text, without changing anything.
    fn observe(
        &self,
        task: TaskId,
        subject: Subject,
        deadline: Instant,
    ) -> BoxFuture<'static, ReadOutcome>;

    /// The number of applied backend mutations in this run.
    fn mutations(&self) -> u64;

    /// The task was finished or stopped: its page may be released. A stopped task with an
    /// unresolved outcome is still verified later, so its page must stay reachable
    /// (`keep_for_verification`).
    fn close(&self, _task: TaskId, _keep_for_verification: bool) {}

    /// The host is stopping: release everything (a browser's process group, say).
    fn shutdown(&self) {}
}

/// The reserved targets of the fixture page.
const STATUS: &str = "#status";
const SUBMISSIONS: &str = "#submissions";
const SUBMIT: &str = "#submit";

/// The fixture form page and its backend: the embedded default executor.
#[derive(Default)]
pub struct FixtureExecutor {
    /// Looked up by every action, added to by every task.start: readers share the lock.
    pages: RwLock<FastMap<TaskId, Arc<FixturePage>>>,
    mutations: Arc<AtomicU64>,
    /// `--fixture-effects`: where every applied submit is recorded, outside the host.
    effects: Option<Arc<EffectsFile>>,
}

/// The file of `--fixture-effects FILE` (a testing aid): one JSON line per applied submit,
/// `{"requestId","taskId","n"}`, written and `fdatasync`ed before the submit counts, so the
/// effects outlive the host and a crash test can count them.
pub struct EffectsFile {
    path: std::path::PathBuf,
    file: Mutex<std::fs::File>,
}

impl EffectsFile {
    /// Opens `path` for appending (created `0600` if absent).
    pub fn open(path: &std::path::Path) -> std::io::Result<EffectsFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            // Never written through a symlink (SPEC §10: files the host opens by name).
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                    std::io::Error::other(
                        "it is a symlink, which is never followed; name the file itself",
                    )
                } else {
                    e
                }
            })?;
        Ok(EffectsFile {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    /// Records one applied submit, durably.
    fn record(&self, request_id: &str, task: &str, n: u64) -> std::io::Result<()> {
        use std::io::Write;
        let mut line = serde_json::to_vec(&serde_json::json!({
            "requestId": request_id,
            "taskId": task,
            "n": n,
        }))?;
        line.push(b'\n');
        let mut f = lock(&self.file);
        f.write_all(&line)?;
        f.sync_data()
    }
}

/// Who a submit is applied for, when effects are recorded.
struct Effect {
    file: Arc<EffectsFile>,
    request_id: String,
    task: TaskId,
}

struct FixturePage {
    options: FixtureOptions,
    state: Mutex<PageState>,
    /// Bumped on every change, so an observer can wait for the next one.
    changed: watch::Sender<u64>,
}

/// The fixture's maps: looked up on every action. Their keys are task IDs the host made and a
/// page's own field names, so a per-process seed is all the flooding protection they need.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

struct PageState {
    fields: FastMap<String, String>,
    status: String,
    submissions: u64,
    /// The value of the form's select ([`CATEGORY`]).
    category: String,
    /// The form's checkbox ([`URGENT`]).
    urgent: bool,
    /// The refs of the latest `page.snapshot`.
    refs: Refs,
}

/// What a fixture read looks at, its target already resolved to a selector.
enum Spot {
    /// A target's value.
    Css(String),
    /// The page's URL.
    Url,
    /// The page's whole text.
    Text,
}

impl fmt::Display for Spot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spot::Css(css) => f.write_str(css),
            Spot::Url => f.write_str("the page's URL"),
            Spot::Text => f.write_str("the page's text"),
        }
    }
}

/// The fixture page's URL: it has no server, so it names itself.
const FIXTURE_URL: &str = "about:polaris-fixture";
/// The fixture page's title and heading.
const FIXTURE_TITLE: &str = "Draft a post";

/// Takes a fixture page's lock. Like the host's state, a page recovers from a panic while its
/// lock was held (each critical section only reads or stores a field or two): the host has
/// already answered the panicking request with `INTERNAL`, and refusing every later action on
/// the page would not undo it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FixturePage {
    fn read(&self, target: &str) -> String {
        let s = lock(&self.state);
        match target {
            STATUS => s.status.clone(),
            SUBMISSIONS => s.submissions.to_string(),
            SUBMIT => "Submit".to_owned(),
            CATEGORY => s.category.clone(),
            URGENT => s.urgent.to_string(),
            field => s.fields.get(field).cloned().unwrap_or_default(),
        }
    }

    /// The page's elements as an agent sees them: the form, then any field a fill created.
    fn elements(s: &PageState) -> Vec<Element> {
        let field = |css: &str, name: &str| Element {
            css: css.into(),
            role: "textbox",
            name: name.into(),
            value: Some(s.fields.get(css).cloned().unwrap_or_default()),
            states: vec![],
        };
        let label = CATEGORY_OPTIONS
            .iter()
            .find(|(v, _)| *v == s.category)
            .map_or("", |(_, l)| l);
        let mut out = vec![field("#title", "Title"), field("#body", "Body")];
        out.push(Element {
            css: CATEGORY.into(),
            role: "combobox",
            name: "Category".into(),
            value: Some(label.into()),
            states: vec![],
        });
        out.push(Element {
            css: URGENT.into(),
            role: "checkbox",
            name: "Urgent".into(),
            value: None,
            states: if s.urgent {
                vec!["checked".into()]
            } else {
                vec![]
            },
        });
        let mut extra: Vec<&String> = s
            .fields
            .keys()
            .filter(|k| !matches!(k.as_str(), "#title" | "#body"))
            .collect();
        extra.sort();
        out.extend(
            extra
                .into_iter()
                .map(|k| field(k, k.trim_start_matches('#'))),
        );
        out.push(Element {
            css: SUBMIT.into(),
            role: "button",
            name: "Submit".into(),
            value: None,
            states: vec![],
        });
        out.push(Element {
            css: STATUS.into(),
            role: "status",
            name: "Status".into(),
            value: Some(s.status.clone()),
            states: vec![],
        });
        out.push(Element {
            css: SUBMISSIONS.into(),
            role: "text",
            name: "Submissions".into(),
            value: Some(s.submissions.to_string()),
            states: vec![],
        });
        out
    }

    /// The page's whole visible text, as `expect.text` and `page.wait`'s `text` read it.
    fn text(&self) -> String {
        let s = lock(&self.state);
        let mut out = String::from(FIXTURE_TITLE);
        for e in FixturePage::elements(&s) {
            out.push('\n');
            out.push_str(&e.name);
            if let Some(v) = e.value {
                out.push(' ');
                out.push_str(&v);
            }
        }
        out
    }

    /// The selector `target` names now, or why an action on it is not sent.
    fn resolve(&self, target: &Target) -> Result<String, (NotSent, String)> {
        if let Target::Css(css) = target {
            return Ok(css.clone());
        }
        let s = lock(&self.state);
        resolve(target, &FixturePage::elements(&s), &s.refs)
    }

    /// What `subject` reads, its target resolved.
    fn spot(&self, subject: &Subject) -> Result<Spot, (NotSent, String)> {
        Ok(match subject {
            Subject::Target(t) => Spot::Css(self.resolve(t)?),
            Subject::Url => Spot::Url,
            Subject::Text => Spot::Text,
        })
    }

    /// The value at `spot`.
    fn read_spot(&self, spot: &Spot) -> String {
        match spot {
            Spot::Css(css) => self.read(css),
            Spot::Url => FIXTURE_URL.to_owned(),
            Spot::Text => self.text(),
        }
    }

    /// Wakes whoever waits for the page to change. Nobody usually does (only an observation
    /// waiting for its expectation), so with no observer the channel is not touched at all: a
    /// later observer subscribes, then reads the page itself before waiting, and every change
    /// happens before this call.
    fn announce_change(&self) {
        if self.changed.receiver_count() > 0 {
            self.changed.send_modify(|v| *v += 1);
        }
    }

    fn apply_submit(&self, mutations: &AtomicU64, effect: Option<&Effect>) {
        {
            let mut s = lock(&self.state);
            if let Some(e) = effect {
                if let Err(err) = e.file.record(&e.request_id, &e.task, s.submissions + 1) {
                    tracing::error!(
                        "could not record a submit in {} ({err}); the submit was not applied",
                        e.file.path.display()
                    );
                    return;
                }
            }
            s.submissions += 1;
            s.status = format!("Saved #{}", s.submissions);
        }
        mutations.fetch_add(1, Ordering::SeqCst);
        self.announce_change();
    }

    /// Reads with the page's read delay; `None` when the deadline comes first.
    async fn read_by(&self, spot: &Spot, deadline: Instant) -> Option<String> {
        let delay = Duration::from_millis(self.options.read_delay_ms);
        if delay > Duration::ZERO {
            if Instant::now() + delay > deadline {
                tokio::time::sleep_until(deadline).await;
                return None;
            }
            tokio::time::sleep(delay).await;
        }
        Some(self.read_spot(spot))
    }
}

/// Sets a field of `page` (the task's page, `None` when it has none). The field's strings are
/// reused when it exists (every fill after the first), so a fill allocates nothing.
fn fill(page: Option<&FixturePage>, task: &str, target: &str, value: &str) -> Result<(), String> {
    let Some(page) = page else {
        return Err(format!("task {task} has no page"));
    };
    if is_reserved(target) {
        return Err(format!("{target} is not a text field and cannot be filled"));
    }
    {
        let mut s = lock(&page.state);
        match s.fields.get_mut(target) {
            Some(field) => {
                field.clear();
                field.push_str(value);
            }
            None => {
                s.fields.insert(target.to_owned(), value.to_owned());
            }
        }
    }
    page.announce_change();
    Ok(())
}

/// A fill through [`Executor::act`]: [`fill`], its observation being what was asked (a fill's
/// expectation is implicit: the field holds the value).
fn fill_observed(
    page: Option<&FixturePage>,
    task: &str,
    target: String,
    value: String,
) -> ActionOutcome {
    match fill(page, task, &target, &value) {
        Ok(()) => ActionOutcome::Applied(Observation { target, value }),
        Err(reason) => ActionOutcome::Failed(reason),
    }
}

/// `page.select` on the fixture form's select.
fn select(page: &FixturePage, target: String, by: SelectBy) -> ActionOutcome {
    if target != CATEGORY {
        return ActionOutcome::Failed(format!(
            "{target} is not a select of the fixture page; its select is {CATEGORY} (Category)"
        ));
    }
    let (wanted, by_label) = match &by {
        SelectBy::Label(l) => (l, true),
        SelectBy::Value(v) => (v, false),
    };
    let [one] = wanted.as_slice() else {
        return ActionOutcome::Failed(format!(
            "{CATEGORY} takes one option (it is not a multiple select)"
        ));
    };
    let Some((value, _)) = CATEGORY_OPTIONS
        .iter()
        .find(|(v, l)| if by_label { l == one } else { v == one })
    else {
        let known: Vec<String> = CATEGORY_OPTIONS
            .iter()
            .map(|(v, l)| format!("{l:?} (value {v:?})"))
            .collect();
        return ActionOutcome::Failed(format!(
            "{CATEGORY} has no option {one:?}; its options are {}",
            known.join(", ")
        ));
    };
    lock(&page.state).category = (*value).to_owned();
    page.announce_change();
    ActionOutcome::Applied(Observation {
        target,
        value: (*value).to_owned(),
    })
}

/// `page.check` on the fixture form's checkbox.
fn check(page: &FixturePage, target: String, checked: bool) -> ActionOutcome {
    if target != URGENT {
        return ActionOutcome::Failed(format!(
            "{target} is not a checkbox of the fixture page; its checkbox is {URGENT} (Urgent)"
        ));
    }
    lock(&page.state).urgent = checked;
    page.announce_change();
    ActionOutcome::Applied(Observation {
        target,
        value: checked.to_string(),
    })
}

/// A click or key press on the fixture page, as [`plan_step`] read it.
struct Step {
    /// What the step should show.
    expect: Option<Expect>,
    /// The caller said the step commits nothing.
    local: bool,
    /// It submits the form to the fixture backend.
    submits: bool,
}

/// What `action` (its target resolved to `target`) does on the fixture page: a fill, select or
/// check applied at once, a refusal, or the click or key press still to be done.
fn plan_step(
    page: &FixturePage,
    task: &str,
    target: String,
    action: PageAction,
) -> ControlFlow<ActionOutcome, Step> {
    let (expect, local, submits) = match action {
        PageAction::Fill { value, .. } => {
            return ControlFlow::Break(fill_observed(Some(page), task, target, value));
        }
        PageAction::Select { by, .. } => return ControlFlow::Break(select(page, target, by)),
        PageAction::Check { checked, .. } => {
            return ControlFlow::Break(check(page, target, checked))
        }
        other @ (PageAction::Navigate { .. }
        | PageAction::Upload { .. }
        | PageAction::Hover { .. }
        | PageAction::Type { .. }
        | PageAction::SaveProfile { .. }) => {
            return ControlFlow::Break(ActionOutcome::Failed(unsupported(
                "fixture",
                other.method(),
            )))
        }
        PageAction::Click { expect, local, .. } => (expect, local, click_submits(&target, local)?),
        PageAction::Press {
            key,
            target: pressed,
            expect,
            local,
            ..
        } => (
            expect,
            local,
            press_submits(&key, pressed.map(|_| target), local)?,
        ),
    };
    ControlFlow::Continue(Step {
        expect,
        local,
        submits,
    })
}

/// Whether a click on `target` submits the form: #submit does; clicking a field focuses it (a
/// local step that commits nothing); anything else is refused.
fn click_submits(target: &str, local: bool) -> ControlFlow<ActionOutcome, bool> {
    ControlFlow::Continue(match target {
        SUBMIT => true,
        // Clicking a field focuses it: a step that commits nothing.
        field if !is_reserved(field) && local => false,
        _ if local => {
            return ControlFlow::Break(ActionOutcome::Failed(format!(
                "{target} is not a field or button of the fixture page; nothing was dispatched"
            )))
        }
        _ => {
            return ControlFlow::Break(ActionOutcome::Failed(format!(
                "clicking {target} does nothing on the fixture page; click #submit to submit, or send a click that only focuses a field with \"local\": true"
            )))
        }
    })
}

/// Whether pressing `key` (on `target`, if it names one) submits the form: Enter in a field
/// does; another key only moves focus (a local step); anything else is refused.
fn press_submits(
    key: &str,
    target: Option<String>,
    local: bool,
) -> ControlFlow<ActionOutcome, bool> {
    // The params check read the chord already.
    let enter = KeyChord::parse(key).is_ok_and(|c| c.key == "Enter" && c.modifiers.is_empty());
    let refused = match target {
        Some(t) if is_reserved(&t) => ActionOutcome::Failed(format!(
            "{key} on {t} does nothing; press it in a text field such as #title"
        )),
        None if enter => ActionOutcome::Failed(
            "Enter needs a field target to submit the form, e.g. \"target\":\"#title\"".into(),
        ),
        _ if !enter && !local => ActionOutcome::Failed(format!(
            "key {key:?} does nothing on the fixture page; press Enter in a field to submit, or send a key that only moves focus with \"local\": true"
        )),
        _ => return ControlFlow::Continue(enter),
    };
    ControlFlow::Break(refused)
}

/// The expectation of a step with its subject found on `page`. Refused, nothing dispatched,
/// when its subject cannot be found, or when it already holds: then it could never show this
/// action's effect.
fn expectation_to_observe(
    page: &FixturePage,
    expect: Option<Expect>,
) -> Result<Option<(Expect, Spot)>, ActionOutcome> {
    let expect = match expect.map(|e| page.spot(&e.subject).map(|spot| (e, spot))) {
        None => None,
        Some(Ok(e)) => Some(e),
        Some(Err((cause, why))) => {
            return Err(ActionOutcome::NotSent(
                cause,
                format!("the expectation's {why}"),
            ))
        }
    };
    if let Some((e, spot)) = &expect {
        let before = page.read_spot(spot);
        if e.holds(&before) {
            return Err(expectation_already_holds(e, &before));
        }
    }
    Ok(expect)
}

/// Submits the draft to the fixture backend as the page's options say: rejected (the error),
/// dropped, applied at once, or applied late, even after the action's deadline has passed.
fn submit_draft(
    page: &Arc<FixturePage>,
    mutations: Arc<AtomicU64>,
    effect: Option<Effect>,
) -> Result<(), ActionOutcome> {
    let options = &page.options;
    if options.fail_submit {
        lock(&page.state).status = "Error: submit rejected".to_owned();
        page.announce_change();
        return Err(ActionOutcome::Failed(
            "the backend rejected the submit; nothing was saved".into(),
        ));
    }
    if !options.drop_submit {
        if options.submit_delay_ms == 0 {
            page.apply_submit(&mutations, effect.as_ref());
        } else {
            // A late success: it applies even after the action's deadline has passed.
            let late = page.clone();
            let delay = Duration::from_millis(options.submit_delay_ms);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                late.apply_submit(&mutations, effect.as_ref());
            });
        }
    }
    Ok(())
}

fn is_reserved(target: &str) -> bool {
    matches!(target, STATUS | SUBMISSIONS | SUBMIT | CATEGORY | URGENT)
}

impl FixtureExecutor {
    /// A fixture with no pages.
    pub fn new() -> FixtureExecutor {
        FixtureExecutor::default()
    }

    /// A fixture that records every applied submit in `effects` (`--fixture-effects`).
    pub fn with_effects(effects: EffectsFile) -> FixtureExecutor {
        FixtureExecutor {
            effects: Some(Arc::new(effects)),
            ..FixtureExecutor::default()
        }
    }

    /// Applies `action` to the page of `task`: a fill at once; any other step once its target
    /// is found and its expectation does not already hold, submitting the draft to the fixture
    /// backend when the step submits, then observing its expectation.
    fn act_inner(
        &self,
        request_id: Option<&str>,
        task: TaskId,
        action: PageAction,
        deadline: Instant,
    ) -> BoxFuture<'static, ActionOutcome> {
        let effect = self.effects.as_ref().map(|file| Effect {
            file: file.clone(),
            request_id: request_id.unwrap_or("").to_owned(),
            task: task.clone(),
        });
        let page = self.page(&task);
        if let PageAction::Fill {
            target: Target::Css(target),
            value,
        } = action
        {
            // A fill is a page-local change: applied right here, its future already answered.
            return Box::pin(std::future::ready(fill_observed(
                page.as_deref(),
                &task,
                target,
                value,
            )));
        }
        let mutations = self.mutations.clone();
        Box::pin(async move {
            let Some(page) = page else {
                return ActionOutcome::Failed(format!("task {task} has no page"));
            };
            // The target is found before anything is done: a stale ref or an ambiguous
            // locator sends nothing.
            let target = match action.target().map(|t| page.resolve(t)).transpose() {
                Ok(css) => css.unwrap_or_default(),
                Err((cause, why)) => return ActionOutcome::NotSent(cause, why),
            };
            let step = match plan_step(&page, &task, target, action) {
                ControlFlow::Continue(step) => step,
                ControlFlow::Break(outcome) => return outcome,
            };
            let expect = match expectation_to_observe(&page, step.expect) {
                Ok(expect) => expect,
                Err(refused) => return refused,
            };
            if !step.submits {
                // A page-local step: focus moves, nothing is sent anywhere.
                return match expect {
                    Some((e, spot)) => observe_effect(page, e, spot, deadline).await,
                    None => ActionOutcome::LocalDone,
                };
            }
            if let Err(rejected) = submit_draft(&page, mutations, effect) {
                return rejected;
            }
            if step.local {
                // The caller said the step commits nothing, and it submitted the form.
                return ActionOutcome::Uncertain(
                    "the step was sent as local (committing nothing) but it submitted the form to the backend; whether the submit took effect is unknown".into(),
                );
            }
            match expect {
                Some((e, spot)) => observe_effect(page, e, spot, deadline).await,
                // The params check refuses a step with no expectation that is not local.
                None => ActionOutcome::Uncertain("no expectation to observe".into()),
            }
        })
    }

    fn page(&self, task: &str) -> Option<Arc<FixturePage>> {
        self.pages
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(task)
            .cloned()
    }
}

/// `page.wait` on the fixture page: every element is visible, so a target is there once it
/// resolves; a text shows once the page's text holds it.
async fn wait(
    page: &FixturePage,
    target: Option<Target>,
    text: Option<String>,
    state: WaitState,
    until: Instant,
) -> QueryOutcome {
    let mut changes = page.changed.subscribe();
    loop {
        changes.borrow_and_update();
        let shown = match (&target, &text) {
            (Some(t), _) => match page.resolve(t) {
                Ok(css) => FixturePage::elements(&lock(&page.state))
                    .iter()
                    .any(|e| e.css == css),
                Err((NotSent::StaleRef, why)) => {
                    return QueryOutcome::Refused(NotSent::StaleRef, why)
                }
                Err((NotSent::Ambiguous(c), why)) => {
                    return QueryOutcome::Refused(NotSent::Ambiguous(c), why)
                }
                Err(_) => false,
            },
            (None, Some(text)) => page.text().contains(text.as_str()),
            (None, None) => true,
        };
        if shown == (state == WaitState::Visible) {
            return QueryOutcome::Waited;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep_until(until) => return QueryOutcome::TimedOut,
        }
    }
}

/// Waits until `expect` holds on `page` or the deadline passes.
async fn observe_effect(
    page: Arc<FixturePage>,
    expect: Expect,
    spot: Spot,
    deadline: Instant,
) -> ActionOutcome {
    let mut changes = page.changed.subscribe();
    loop {
        changes.borrow_and_update();
        match page.read_by(&spot, deadline).await {
            None => {
                return ActionOutcome::Uncertain(format!(
                    "could not read {} before the deadline",
                    expect.subject
                ))
            }
            Some(value) if expect.holds(&value) => {
                return ActionOutcome::Applied(Observation {
                    target: expect.subject.to_string(),
                    value,
                })
            }
            Some(_) => {}
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {
                let last = page.read_spot(&spot);
                return ActionOutcome::Uncertain(format!(
                    "{} did not show the expected value before the deadline (last seen {:?})",
                    expect.subject, last
                ));
            }
        }
    }
}

impl Executor for FixtureExecutor {
    fn kind(&self) -> &'static str {
        "fixture"
    }

    fn check_target(&self, target: &str) -> Result<(), String> {
        let name = target.strip_prefix('#').unwrap_or("");
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if valid {
            Ok(())
        } else {
            Err(format!(
                "{target:?} is not a selector of the fixture page; use #name with lowercase letters, digits, - or _ (e.g. #title, #status, #submit)"
            ))
        }
    }

    fn open(
        &self,
        task: TaskId,
        _url: Option<String>,
        options: FixtureOptions,
        _deadline: Instant,
    ) -> BoxFuture<'static, Result<(), String>> {
        let (changed, _) = watch::channel(0);
        let page = Arc::new(FixturePage {
            options,
            state: Mutex::new(PageState {
                fields: FastMap::default(),
                status: "Draft".to_owned(),
                submissions: 0,
                category: CATEGORY_OPTIONS[0].0.to_owned(),
                urgent: false,
                refs: Refs::default(),
            }),
            changed,
        });
        self.pages
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(task, page);
        Box::pin(async { Ok(()) })
    }

    fn act(
        &self,
        task: TaskId,
        action: PageAction,
        deadline: Instant,
    ) -> BoxFuture<'static, ActionOutcome> {
        self.act_inner(None, task, action, deadline)
    }

    fn act_for(
        &self,
        request_id: &str,
        task: TaskId,
        action: PageAction,
        deadline: Instant,
    ) -> BoxFuture<'static, ActionOutcome> {
        self.act_inner(Some(request_id), task, action, deadline)
    }

    fn fills_at_once(&self) -> bool {
        true
    }

    fn fill_now(&self, task: &str, target: &str, value: &str) -> Option<Result<(), String>> {
        // The page is used under the map's read lock: no reference count is touched.
        let pages = self.pages.read().unwrap_or_else(PoisonError::into_inner);
        Some(fill(pages.get(task).map(|p| &**p), task, target, value))
    }

    fn observe(
        &self,
        task: TaskId,
        subject: Subject,
        deadline: Instant,
    ) -> BoxFuture<'static, ReadOutcome> {
        let page = self.page(&task);
        Box::pin(async move {
            let Some(page) = page else {
                return ReadOutcome::Failed(format!("task {task} has no page"));
            };
            let spot = match page.spot(&subject) {
                Ok(spot) => spot,
                Err((_, why)) => return ReadOutcome::Failed(why),
            };
            match page.read_by(&spot, deadline).await {
                Some(v) => ReadOutcome::Value(v),
                None => ReadOutcome::TimedOut,
            }
        })
    }

    fn offers(&self, method: Method) -> bool {
        method.is_core()
            || matches!(
                method,
                Method::PageSnapshot
                    | Method::PageWait
                    | Method::PageUrl
                    | Method::PageTabs
                    | Method::PageSelect
                    | Method::PageCheck
            )
    }

    fn check_command(&self, command: &Command) -> Result<(), String> {
        let method = command.method();
        if !self.offers(method) {
            return Err(fixture_unsupported(method));
        }
        // The fixture page never opens another: one tab, 0. Known before anything is stored,
        // so a request naming another is malformed here, not a failed action.
        let tab = command.tab();
        if tab != 0 {
            return Err(format!(
                "invalid params for {method}: the fixture executor has one tab per task, 0 (got tab {tab}); tabs a page opens are the Chromium executor's (polaris serve --executor chromium)"
            ));
        }
        if let Command::Execute(crate::protocol::ExecutorCommand::Start(p)) = command {
            if p.profile.is_some() {
                return Err(
                    "invalid params for task.start: profiles (saved logins) are offered by the Chromium executor only; run polaris serve --executor chromium --profile-dir DIR, or start the task without `profile`".into(),
                );
            }
        }
        Ok(())
    }

    fn query(
        &self,
        task: TaskId,
        query: PageQuery,
        deadline: Instant,
    ) -> BoxFuture<'static, QueryOutcome> {
        let page = self.page(&task);
        Box::pin(async move {
            let Some(page) = page else {
                return QueryOutcome::Failed(format!("task {task} has no page"));
            };
            match query {
                PageQuery::Snapshot => {
                    let nodes = {
                        let mut s = lock(&page.state);
                        let elements = FixturePage::elements(&s);
                        s.refs.snapshot(FIXTURE_TITLE, &elements)
                    };
                    QueryOutcome::Snapshot {
                        url: FIXTURE_URL.into(),
                        title: FIXTURE_TITLE.into(),
                        nodes,
                    }
                }
                PageQuery::Url => QueryOutcome::Url {
                    url: FIXTURE_URL.into(),
                    title: FIXTURE_TITLE.into(),
                },
                PageQuery::Tabs => QueryOutcome::Tabs(vec![Tab {
                    tab: 0,
                    url: FIXTURE_URL.into(),
                    title: FIXTURE_TITLE.into(),
                }]),
                PageQuery::Wait {
                    target,
                    text,
                    state,
                    until,
                } => wait(&page, target, text, state, until.min(deadline.max(until))).await,
                PageQuery::Screenshot { .. } => {
                    QueryOutcome::Failed(unsupported("fixture", Method::PageScreenshot))
                }
            }
        })
    }

    fn mutations(&self) -> u64 {
        self.mutations.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ExpectCheck;

    fn saved() -> Expect {
        Expect::on("#status", ExpectCheck::Contains("Saved".into()))
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    async fn page(fx: &FixtureExecutor, options: FixtureOptions) -> TaskId {
        let id: TaskId = "t1".into();
        fx.open(id.clone(), None, options, soon(100)).await.unwrap();
        id
    }

    #[tokio::test]
    async fn a_submit_applies_once_and_is_observed() {
        let fx = FixtureExecutor::new();
        let t = page(&fx, FixtureOptions::default()).await;
        let out = fx
            .act(
                t.clone(),
                PageAction::Click {
                    target: "#submit".into(),
                    expect: Some(saved()),
                    local: false,
                    dialog: None,
                },
                soon(500),
            )
            .await;
        assert_eq!(
            out,
            ActionOutcome::Applied(Observation {
                target: "#status".into(),
                value: "Saved #1".into()
            })
        );
        assert_eq!(fx.mutations(), 1);
        assert_eq!(
            fx.observe(t, "#submissions".into(), soon(100)).await,
            ReadOutcome::Value("1".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_submit_is_uncertain_then_lands() {
        let fx = FixtureExecutor::new();
        let t = page(
            &fx,
            FixtureOptions {
                submit_delay_ms: 300,
                ..Default::default()
            },
        )
        .await;
        let press = PageAction::Press {
            key: "Enter".into(),
            target: Some("#title".into()),
            expect: Some(saved()),
            local: false,
            dialog: None,
        };
        assert!(matches!(
            fx.act(t.clone(), press, soon(100)).await,
            ActionOutcome::Uncertain(_)
        ));
        assert_eq!(fx.mutations(), 0);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(fx.mutations(), 1);
        assert_eq!(
            fx.observe(t, "#status".into(), soon(100)).await,
            ReadOutcome::Value("Saved #1".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_failed_and_slow_reads() {
        let fx = FixtureExecutor::new();
        let t = page(
            &fx,
            FixtureOptions {
                drop_submit: true,
                ..Default::default()
            },
        )
        .await;
        let click = PageAction::Click {
            target: "#submit".into(),
            expect: Some(saved()),
            local: false,
            dialog: None,
        };
        assert!(matches!(
            fx.act(t.clone(), click.clone(), soon(100)).await,
            ActionOutcome::Uncertain(_)
        ));
        let fx2 = FixtureExecutor::new();
        let t2 = page(
            &fx2,
            FixtureOptions {
                fail_submit: true,
                ..Default::default()
            },
        )
        .await;
        assert!(matches!(
            fx2.act(t2.clone(), click.clone(), soon(100)).await,
            ActionOutcome::Failed(_)
        ));
        assert_eq!(
            fx2.observe(t2, "#status".into(), soon(10)).await,
            ReadOutcome::Value("Error: submit rejected".into())
        );
        assert_eq!(fx2.mutations(), 0);
        let fx3 = FixtureExecutor::new();
        let t3 = page(
            &fx3,
            FixtureOptions {
                read_delay_ms: 500,
                ..Default::default()
            },
        )
        .await;
        assert_eq!(
            fx3.observe(t3.clone(), "#status".into(), soon(100)).await,
            ReadOutcome::TimedOut
        );
        assert!(matches!(
            fx3.act(t3, click, soon(100)).await,
            ActionOutcome::Uncertain(_)
        ));
        assert_eq!(
            fx3.mutations(),
            1,
            "the submit applied; only its observation was too slow"
        );
    }

    /// A field filled again holds the new value, shorter or longer, and an observer subscribed
    /// to the page is told of each fill.
    #[tokio::test]
    async fn a_field_filled_again_holds_the_new_value_and_tells_its_observer() {
        let fx = FixtureExecutor::new();
        let t = page(&fx, FixtureOptions::default()).await;
        let fill = |value: &str| PageAction::Fill {
            target: "#title".into(),
            value: value.into(),
        };
        for value in [
            "a first, long value",
            "short",
            "",
            "a longer value than before",
        ] {
            assert_eq!(
                fx.act(t.clone(), fill(value), soon(100)).await,
                ActionOutcome::Applied(Observation {
                    target: "#title".into(),
                    value: value.into()
                })
            );
            assert_eq!(
                fx.observe(t.clone(), "#title".into(), soon(100)).await,
                ReadOutcome::Value(value.into())
            );
        }
        assert!(matches!(
            fx.act("no-such-task".into(), fill("x"), soon(100)).await,
            ActionOutcome::Failed(_)
        ));
        // An observer subscribed before the fill is told of it.
        let page = fx.page(&t).expect("the task's page");
        let changes = page.changed.subscribe();
        assert!(!changes.has_changed().unwrap());
        fx.act(t.clone(), fill("seen"), soon(100)).await;
        assert!(changes.has_changed().unwrap(), "the fill told the observer");
        assert_eq!(fx.mutations(), 0, "fills are not backend mutations");
    }

    /// A fill done at once changes the page as one through `act` does: the field holds the
    /// value (shorter or longer than before), an observer is told, and a missing page or a
    /// reserved target fails with nothing changed.
    #[tokio::test]
    async fn a_fill_done_at_once_changes_the_page_as_act_does() {
        let fx = FixtureExecutor::new();
        let t = page(&fx, FixtureOptions::default()).await;
        let changes = fx.page(&t).expect("the task's page").changed.subscribe();
        for value in ["a first, long value", "short", "", "é 日本 \"quoted\""] {
            assert_eq!(fx.fill_now(&t, "#title", value), Some(Ok(())));
            assert_eq!(
                fx.observe(t.clone(), "#title".into(), soon(100)).await,
                ReadOutcome::Value(value.into())
            );
        }
        assert!(changes.has_changed().unwrap(), "the fill told the observer");
        assert!(matches!(
            fx.fill_now("no-such-task", "#title", "x"),
            Some(Err(reason)) if reason.contains("no page")
        ));
        assert!(matches!(fx.fill_now(&t, "#status", "x"), Some(Err(_))));
        assert_eq!(
            fx.observe(t.clone(), "#status".into(), soon(100)).await,
            ReadOutcome::Value("Draft".into())
        );
        assert_eq!(fx.mutations(), 0, "fills are not backend mutations");
    }

    #[tokio::test]
    async fn reserved_targets_and_other_keys_fail_definitively() {
        let fx = FixtureExecutor::new();
        let t = page(&fx, FixtureOptions::default()).await;
        let fill = PageAction::Fill {
            target: "#status".into(),
            value: "x".into(),
        };
        assert!(matches!(
            fx.act(t.clone(), fill, soon(100)).await,
            ActionOutcome::Failed(_)
        ));
        let tab = PageAction::Press {
            key: "Tab".into(),
            target: Some("#title".into()),
            expect: Some(saved()),
            local: false,
            dialog: None,
        };
        assert!(matches!(
            fx.act(t.clone(), tab, soon(100)).await,
            ActionOutcome::Failed(_)
        ));
        let click = PageAction::Click {
            target: "#title".into(),
            expect: Some(saved()),
            local: false,
            dialog: None,
        };
        assert!(matches!(
            fx.act(t, click, soon(100)).await,
            ActionOutcome::Failed(_)
        ));
        assert_eq!(fx.mutations(), 0);
        assert!(fx.check_target("#ok-1_a").is_ok());
        for bad in ["title", "#", "#Title", "#a b", ".x"] {
            assert!(fx.check_target(bad).is_err(), "{bad}");
        }
    }

    /// An expectation that already holds is refused before anything is dispatched (SPEC §14):
    /// a second submit expecting "Saved" after the first showed it sends nothing.
    #[tokio::test]
    async fn an_expectation_that_already_holds_is_refused_before_dispatch() {
        let fx = FixtureExecutor::new();
        let t = page(&fx, FixtureOptions::default()).await;
        let click = |expect: Expect| PageAction::Click {
            target: "#submit".into(),
            expect: Some(expect),
            local: false,
            dialog: None,
        };
        let draft = Expect::on("#status", ExpectCheck::Contains("Draft".into()));
        assert!(matches!(
            fx.act(t.clone(), click(draft), soon(100)).await,
            ActionOutcome::NotSent(NotSent::ExpectationAlreadyHolds, _)
        ));
        assert_eq!(fx.mutations(), 0, "nothing was dispatched");
        assert!(matches!(
            fx.act(t.clone(), click(saved()), soon(500)).await,
            ActionOutcome::Applied(_)
        ));
        assert!(matches!(
            fx.act(t.clone(), click(saved()), soon(500)).await,
            ActionOutcome::NotSent(NotSent::ExpectationAlreadyHolds, reason) if reason.contains("Saved #1")
        ));
        let next = Expect::on("#status", ExpectCheck::Equals("Saved #2".into()));
        assert!(matches!(
            fx.act(t, click(next), soon(500)).await,
            ActionOutcome::Applied(_)
        ));
        assert_eq!(fx.mutations(), 2);
    }

    /// A local step commits nothing: Tab or a chord in a field, a click that focuses a field.
    /// A local step that submits anyway is uncertain (the caller said it commits nothing).
    #[tokio::test]
    async fn local_steps_commit_nothing_or_end_uncertain() {
        let fx = FixtureExecutor::new();
        let t = page(&fx, FixtureOptions::default()).await;
        let press = |key: &str| PageAction::Press {
            key: key.into(),
            target: Some("#title".into()),
            expect: None,
            local: true,
            dialog: None,
        };
        for key in ["Tab", "Control+a", "Shift+ArrowDown"] {
            assert_eq!(
                fx.act(t.clone(), press(key), soon(100)).await,
                ActionOutcome::LocalDone,
                "{key}"
            );
        }
        let focus = PageAction::Click {
            target: "#title".into(),
            expect: None,
            local: true,
            dialog: None,
        };
        assert_eq!(
            fx.act(t.clone(), focus, soon(100)).await,
            ActionOutcome::LocalDone
        );
        assert_eq!(fx.mutations(), 0);
        assert!(matches!(
            fx.act(t.clone(), press("Enter"), soon(100)).await,
            ActionOutcome::Uncertain(reason) if reason.contains("local")
        ));
        assert_eq!(fx.mutations(), 1, "the local Enter did submit");
    }
}
