//! The Chromium executor: real pages in a headless Chromium driven over the DevTools protocol
//! (SPEC §12).
//!
//! - One browser per host, started on the first task ([`browser`]) and started again when it
//!   has died; its whole process group is killed when the host stops, and on drop.
//! - Per task: a browser context of its own (cookies and storage isolated) and one page,
//!   opened at the task's `url` ([`page`]).
//! - Actions fail definitively only before anything was dispatched; afterwards their
//!   expectation is watched until the deadline, else they are uncertain.
//! - Reads (and so `task.verifyOutcome`) never dispatch anything. When the task's page died
//!   with its renderer or its browser, a fresh page is opened at the last URL the page
//!   committed with a real response, in the task's context (a new one if the browser itself
//!   was replaced), and read there; until an action runs on it, its reads say so
//!   ([`ReadOutcome::Reopened`]): a fresh load is no witness of what an earlier action did.
//! - JavaScript dialogs are answered the moment they open, as the running action asked, else
//!   dismissed, and recorded per task for the host ([`dialogs`]); none is ever left open.
//! - Clicks and key presses sent as local steps (SPEC §14) are watched briefly for a navigation
//!   they should not have caused ([`page`]); so are the page-local actions of SPEC §15 (select,
//!   check, upload, type).
//! - Targets (SPEC §15) are resolved by one resolver in the executor's isolated world of the
//!   page (`script`): a CSS selector, a ref of the task's latest `page.snapshot`, or a locator by
//!   role and name or by text, across open shadow roots and frames. Frames of other origins are
//!   read and acted in through worlds of their own (the browser runs without site isolation, so
//!   they share the page's renderer and session). A stale ref, or a locator matching none or
//!   several elements, sends nothing (`ActionOutcome::NotSent`).
//! - `page.navigate` refuses, before anything is sent, to go back, forward or reload to a page
//!   that answered a form's POST unless the caller allows it; `page.upload` takes files only
//!   from the host's `--upload-dir` ([`resolve_upload`]).
//! - Addresses of the host's own machine and private network (loopback, private, link-local,
//!   `localhost`) are refused as a `task.start` or `page.navigate` URL and blocked, browser-wide,
//!   for every request a page makes, unless `--allow-origin` allows them ([`origins`]).
//!
//! - Tabs (SPEC §15): a page an action opens (its page fires `Page.windowOpen`) is found
//!   among the page targets of the task's browser context right after the action (and on
//!   `page.tabs`), numbered on from 1 and reported on the action's reply; it is attached on first use by `tab`. The task's actions
//!   stay one at a time across its tabs (one `acting` lock per task).
//! - Logins (SPEC §15): a `profile` of `--profile-dir` is loaded into the task's new context
//!   before its page opens, and `task.saveProfile` writes the context's cookies back
//!   ([`profiles`]).
//!
//! The protocol client is hand-written and thin ([`cdp`]): one pipe, typed structs for the
//! dozen methods used, events folded into per-page signals.

pub mod browser;
pub mod cdp;
pub mod dialogs;
pub mod local_files;
pub mod network;
pub mod origins;
pub mod page;
pub mod profiles;
mod script;

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::{timeout_at, Instant};

use self::browser::{Browser, LaunchOptions};
use self::cdp::methods;
use self::dialogs::Dialogs;
use self::network::NetworkLog;
use self::page::{Page, PageWatch, Step};
use super::{ActionOutcome, Executor, PageAction, PageQuery, QueryOutcome, ReadOutcome};
use crate::protocol::evidence::DEFAULT_EVIDENCE_REQUESTS;
use crate::protocol::results::{DialogSeen, Tab};
use crate::protocol::{Command, ExecutorCommand, FixtureOptions, Method, Navigation, Subject};
use crate::protocol::{NetworkEvidence, NotSent};
use crate::tasks::TaskId;

pub use self::browser::find_chromium;
pub use self::local_files::FileUrls;
pub use self::origins::Origins;

/// The longest selector accepted (SPEC §10).
pub const MAX_SELECTOR_BYTES: usize = 1024;

/// The URL schemes a task may open.
pub const URL_SCHEMES: [&str; 3] = ["http", "https", "file"];

/// Checks a task's URL: `http`, `https` or `file`, at most 8 KiB, no spaces or control
/// characters.
/// Why a `task.start` without `url` is refused under this executor.
const MISSING_URL: &str = "the Chromium executor opens each task's page at its url: pass \"url\" (an http, https or file URL)";

/// Checks a task's `url`: an http, https or file URL within the size limit, no spaces.
pub fn check_url(url: &str) -> Result<(), String> {
    if url.len() > crate::protocol::MAX_URL_BYTES {
        return Err(format!(
            "url must be at most {} bytes (got {})",
            crate::protocol::MAX_URL_BYTES,
            url.len()
        ));
    }
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    if !scheme.is_some_and(|s| URL_SCHEMES.contains(&s.as_str())) {
        return Err(format!(
            "url must be an http, https or file URL (got {:?})",
            url.chars().take(60).collect::<String>()
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("url must not contain spaces or control characters".into());
    }
    Ok(())
}

/// Checks `page.navigate`'s URL: as a task's (`check_url`), and `http` or `https` only — a
/// running page is never sent to a local file (a task opens one only as its start URL, with
/// `--allow-file-urls`).
pub fn check_navigation_url(url: &str) -> Result<(), String> {
    check_url(url)?;
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    if scheme.is_some_and(|s| s == "http" || s == "https") {
        Ok(())
    } else {
        Err(format!(
            "page.navigate goes to http or https URLs only (got {:?}); send \"back\", \"forward\" or \"reload\" to move through the history. A local file opens only as a task.start url, on a host started with --allow-file-urls DIR",
            url.chars().take(60).collect::<String>()
        ))
    }
}

/// Resolves a `page.upload` file name inside the host's upload directory (SPEC §15): a
/// relative name, resolved with every symlink followed, that stays inside the directory and
/// is a regular file. Anything else is refused (a `BAD_REQUEST`), so an agent can never hand
/// the page a file the operator did not put there.
pub fn resolve_upload(dir: Option<&Path>, name: &str) -> Result<PathBuf, String> {
    let Some(dir) = dir else {
        return Err("page.upload takes files only from the host's upload directory, and this host has none: start it with --upload-dir DIR and put the files there".into());
    };
    let shown: String = name.chars().take(80).collect();
    let path = Path::new(name);
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(format!(
            "the file name {shown:?} is empty or holds control characters"
        ));
    }
    if !path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "the file name {shown:?} must be relative to the upload directory, without `..`"
        ));
    }
    let base = dir.canonicalize().map_err(|e| {
        format!(
            "the upload directory {} cannot be read ({e})",
            dir.display()
        )
    })?;
    let full = base
        .join(path)
        .canonicalize()
        .map_err(|e| format!("{shown:?} is not a file of the upload directory ({e})"))?;
    if !full.starts_with(&base) {
        return Err(format!(
            "{shown:?} resolves outside the upload directory (through a symlink); only files inside it can be uploaded"
        ));
    }
    match std::fs::metadata(&full) {
        Ok(m) if m.is_file() => Ok(full),
        Ok(_) => Err(format!("{shown:?} is not a regular file")),
        Err(e) => Err(format!("{shown:?} cannot be read ({e})")),
    }
}

/// Checks, after a read of `page`, the address of the document the page shows now (read from
/// the page itself, not from the navigation events, which can arrive after the new document
/// already answers): a read that raced a link to a local file outside `--allow-file-urls` is
/// refused, never returned. Without local files allowed no page can reach one (Chromium does
/// not let a web page open a `file:` URL), so nothing is asked.
async fn shown_after(inner: &Inner, page: &Page, deadline: Instant) -> Result<(), String> {
    if !inner.file_urls.allowed() {
        return Ok(());
    }
    // A read that ends at its deadline still gets its address checked.
    let deadline = deadline.max(Instant::now() + Duration::from_secs(1));
    match page.url_title(deadline).await {
        QueryOutcome::Url { url, .. } => inner.file_urls.check_shown(&url),
        _ => Err("the page's address could not be read after the read, so what was read is not returned; read again".into()),
    }
}

/// How the executor starts its browser.
#[derive(Clone, Debug)]
pub struct ChromiumConfig {
    /// The browser binary ([`find_chromium`]).
    pub binary: PathBuf,
    /// How long a start may take before it counts as failed.
    pub startup_timeout: Duration,
    /// `--upload-dir`: the only directory `page.upload` takes files from (none: uploads are
    /// refused).
    pub upload_dir: Option<PathBuf>,
    /// `--profile-dir`: the only directory saved logins are read from and written to (none:
    /// `profile` and `task.saveProfile` are refused).
    pub profile_dir: Option<PathBuf>,
    /// `--allow-file-urls`: the only directory local pages open from (none by default).
    pub file_urls: FileUrls,
    /// `--allow-origin`: the non-public addresses pages may reach (none by default).
    pub origins: Origins,
    /// Whether each task's network is watched for evidence (SPEC §16; on unless
    /// `--no-network-evidence`).
    pub network_evidence: bool,
    /// The most requests one action's evidence lists (`--evidence-max-requests`); the rest
    /// are counted.
    pub evidence_max_requests: usize,
}

impl ChromiumConfig {
    /// The config for `binary`, with a 30 s start-up allowance (a cold start on a busy
    /// machine takes seconds).
    pub fn new(binary: PathBuf) -> ChromiumConfig {
        ChromiumConfig {
            binary,
            startup_timeout: Duration::from_secs(30),
            upload_dir: None,
            profile_dir: None,
            file_urls: FileUrls::refused(),
            origins: Origins::refusing_private(),
            network_evidence: true,
            evidence_max_requests: DEFAULT_EVIDENCE_REQUESTS,
        }
    }

    /// The same, listing at most `n` requests in each action's evidence
    /// (`--evidence-max-requests`, checked by
    /// [`crate::protocol::evidence::parse_evidence_max_requests`]).
    pub fn with_evidence_max_requests(mut self, n: usize) -> ChromiumConfig {
        self.evidence_max_requests = n;
        self
    }

    /// The same, watching each task's network for evidence (`true`, the default) or not
    /// (`--no-network-evidence`: replies carry no `evidence`, and the browser sends no
    /// network events at all).
    pub fn with_network_evidence(mut self, on: bool) -> ChromiumConfig {
        self.network_evidence = on;
        self
    }

    /// The same, opening local files from `file_urls` only.
    pub fn with_file_urls(mut self, file_urls: FileUrls) -> ChromiumConfig {
        self.file_urls = file_urls;
        self
    }

    /// The same, letting pages reach the non-public addresses `origins` allows.
    pub fn with_origins(mut self, origins: Origins) -> ChromiumConfig {
        self.origins = origins;
        self
    }

    /// The same, keeping saved logins in `dir` (SPEC §15).
    pub fn with_profile_dir(mut self, dir: Option<PathBuf>) -> ChromiumConfig {
        self.profile_dir = dir;
        self
    }

    /// The same, taking uploads from `dir`.
    pub fn with_upload_dir(mut self, dir: Option<PathBuf>) -> ChromiumConfig {
        self.upload_dir = dir;
        self
    }
}

/// The executor. Cheap to clone; clones share the browser.
#[derive(Clone)]
pub struct ChromiumExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    launch: LaunchOptions,
    /// The current browser; the lock is held while one starts, so tasks that arrive
    /// meanwhile share that start.
    browser: tokio::sync::Mutex<Option<Arc<Browser>>>,
    /// The same browser, for synchronous readers (its pid, the shutdown).
    current: Mutex<Option<Arc<Browser>>>,
    tasks: Mutex<HashMap<TaskId, Arc<TaskPage>>>,
    mutations: AtomicU64,
    stopped: AtomicBool,
    upload_dir: Option<PathBuf>,
    profile_dir: Option<PathBuf>,
    file_urls: FileUrls,
    /// `--allow-origin`: also in `launch`, for the browser's own block.
    origins: Arc<Origins>,
    network_evidence: bool,
    evidence_max_requests: usize,
}

/// One task's page and what it takes to open it again.
struct TaskPage {
    slot: Mutex<Slot>,
    /// One reopening at a time.
    reopening: tokio::sync::Mutex<()>,
    /// Actions on one page run one after the other (a fill must not interleave a click's focus).
    /// The host already runs a task's mutating actions one at a time (SPEC §14); this is the
    /// executor's own second line.
    acting: tokio::sync::Mutex<()>,
    /// The task's dialogs, shared by every page it has had.
    dialogs: Arc<Dialogs>,
    /// What the task's pages sent, per action (SPEC §16), shared by every page it has had.
    network: Arc<NetworkLog>,
    /// The number of the task's next snapshot ref, shared by every page it has had.
    refs: Arc<AtomicU64>,
    /// The tabs the task's pages opened (SPEC §15): tab `n` is `tabs.opened[n - 1]`.
    tabs: Mutex<Tabs>,
}

/// The tabs a task's pages opened, and those no reply has reported yet.
#[derive(Default)]
struct Tabs {
    opened: Vec<OpenedTab>,
    unreported: Vec<Tab>,
}

/// One tab a task's page opened: its target, and the page attached to it once it is used.
struct OpenedTab {
    target_id: String,
    url: String,
    page: Option<Arc<Page>>,
    closed: bool,
}

struct Slot {
    page: Option<Arc<Page>>,
    /// The task's browser context, in the browser that made it.
    context: Option<(Arc<Browser>, String)>,
    /// The URL to reopen at when the page has none (it was closed, or never committed).
    last_url: String,
}

impl TaskPage {
    /// What each of the task's pages answers dialogs with and records its network into.
    fn watch(&self) -> PageWatch {
        PageWatch {
            dialogs: self.dialogs.clone(),
            network: self.network.clone(),
        }
    }

    fn live_page(&self) -> Result<Arc<Page>, String> {
        let slot = self.slot.lock().expect("task page lock");
        match &slot.page {
            Some(p) => match p.gone() {
                None => Ok(p.clone()),
                Some(why) => Err(why),
            },
            None => Err("the page was closed".into()),
        }
    }

    fn last_url(&self) -> String {
        let slot = self.slot.lock().expect("task page lock");
        slot.page
            .as_ref()
            .map(|p| p.url())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| slot.last_url.clone())
    }
}

impl ChromiumExecutor {
    /// An executor that starts `config.binary` on its first task.
    pub fn new(config: ChromiumConfig) -> ChromiumExecutor {
        let origins = Arc::new(config.origins);
        ChromiumExecutor {
            inner: Arc::new(Inner {
                launch: LaunchOptions {
                    binary: config.binary,
                    startup_timeout: config.startup_timeout,
                    guard: Some(origins.clone()),
                },
                browser: tokio::sync::Mutex::new(None),
                current: Mutex::new(None),
                tasks: Mutex::new(HashMap::new()),
                mutations: AtomicU64::new(0),
                stopped: AtomicBool::new(false),
                upload_dir: config.upload_dir,
                profile_dir: config.profile_dir,
                file_urls: config.file_urls,
                origins,
                network_evidence: config.network_evidence,
                evidence_max_requests: config.evidence_max_requests,
            }),
        }
    }

    /// The running browser's pid (its process group's id), if one runs.
    pub fn browser_pid(&self) -> Option<i32> {
        let current = self.inner.current.lock().expect("current browser lock");
        current
            .as_ref()
            .filter(|b| b.gone().is_none())
            .map(|b| b.pid())
    }

    /// Starts the browser now (it is otherwise started by the first task) and returns how long
    /// the start took, zero if it was running.
    pub async fn warm_up(&self) -> Result<Duration, String> {
        let before = self.browser_pid();
        let b = self.inner.browser().await?;
        Ok(if before.is_some() {
            Duration::ZERO
        } else {
            b.started_in
        })
    }

    /// The browser's processes, with their memory (for measurements).
    pub fn browser_processes(&self) -> Vec<browser::GroupProcess> {
        let current = self.inner.current.lock().expect("current browser lock");
        current.as_ref().map(|b| b.processes()).unwrap_or_default()
    }
}

impl Inner {
    async fn browser(&self) -> Result<Arc<Browser>, String> {
        let mut slot = self.browser.lock().await;
        if self.stopped.load(Ordering::SeqCst) {
            return Err("the host is stopping; no browser is started".into());
        }
        if let Some(b) = slot.as_ref() {
            match b.gone() {
                None => return Ok(b.clone()),
                Some(why) => {
                    tracing::warn!(pid = b.pid(), reason = %why, "Chromium went away; starting a new one");
                    b.kill();
                }
            }
        }
        let b = Arc::new(Browser::launch(&self.launch).await?);
        watch_browser(&b);
        *slot = Some(b.clone());
        *self.current.lock().expect("current browser lock") = Some(b.clone());
        if self.stopped.load(Ordering::SeqCst) {
            b.kill();
            return Err("the host is stopping; no browser is started".into());
        }
        Ok(b)
    }

    fn task(&self, task: &str) -> Option<Arc<TaskPage>> {
        self.tasks.lock().expect("tasks lock").get(task).cloned()
    }

    /// The task's page, opened again at its last URL if it died (the page is then marked
    /// reopened, [`Page::is_reopened`]).
    async fn page_for_reading(
        &self,
        tp: &TaskPage,
        deadline: Instant,
    ) -> Result<Arc<Page>, String> {
        let dead = match tp.live_page() {
            Ok(p) => return Ok(p),
            Err(why) => why,
        };
        let _one = timeout_at(deadline, tp.reopening.lock())
            .await
            .map_err(|_| "another read was reopening the page at the deadline".to_owned())?;
        if let Ok(p) = tp.live_page() {
            return Ok(p);
        }
        let url = tp.last_url();
        if url.is_empty() {
            return Err(format!(
                "the page is gone ({dead}) and never committed a URL to reopen"
            ));
        }
        let browser = self.browser().await?;
        let (old, context) = {
            let slot = tp.slot.lock().expect("task page lock");
            let context = match &slot.context {
                Some((b, id)) if Arc::ptr_eq(b, &browser) => Some(id.clone()),
                _ => None,
            };
            (slot.page.clone(), context)
        };
        if let Some(old) = old.filter(|p| Arc::ptr_eq(&p.browser, &browser)) {
            old.close().await;
        }
        let context = match context {
            Some(c) => c,
            None => new_context(&browser, deadline).await?,
        };
        let page = Page::open(
            browser.clone(),
            &context,
            &url,
            None,
            tp.watch(),
            tp.refs.clone(),
            deadline,
        )
        .await
        .map_err(|e| format!("the page is gone ({dead}) and reopening {url} failed: {e}"))?;
        page.mark_reopened();
        tracing::info!(url, reason = %dead, "reopened a task's page to read it");
        let page = Arc::new(page);
        let mut slot = tp.slot.lock().expect("task page lock");
        slot.page = Some(page.clone());
        slot.context = Some((browser, context));
        slot.last_url = url;
        Ok(page)
    }
}

impl Inner {
    /// Lists the task's page targets in its browser context and records the tabs its pages
    /// opened since the last look (`window.open`, `target=_blank`; a `noopener` link's tab has
    /// no opener, so the context, which is the task's alone, is what ties a tab to the task).
    /// Tabs no longer listed are marked closed. New tabs are kept for the next action's reply
    /// when `report` (an action's own look), else only listed. Returns every open tab, tab 0
    /// first.
    async fn discover_tabs(
        &self,
        tp: &TaskPage,
        report: bool,
        deadline: Instant,
    ) -> Result<Vec<Tab>, String> {
        let (browser, context, first) = {
            let slot = tp.slot.lock().expect("task page lock");
            let Some((browser, context)) = slot.context.clone() else {
                return Err("the task's browser context is gone".into());
            };
            let first = slot.page.as_ref().map(|p| p.target_id.clone());
            (browser, context, first)
        };
        let listed =
            match timeout_at(deadline, browser.cdp.call(None, &methods::GetTargets {})).await {
                Ok(Ok(t)) => t.target_infos,
                Ok(Err(e)) => return Err(format!("listing the task's tabs failed: {e}")),
                Err(_) => {
                    return Err("listing the task's tabs did not finish before the deadline".into())
                }
            };
        let mine: Vec<_> = listed
            .into_iter()
            .filter(|t| t.kind == "page" && t.browser_context_id.as_deref() == Some(&context))
            .collect();
        let mut tabs = tp.tabs.lock().expect("task tabs lock");
        let mut all = Vec::with_capacity(mine.len());
        if let Some(t) = mine.iter().find(|t| Some(&t.target_id) == first.as_ref()) {
            all.push(Tab {
                tab: 0,
                url: t.url.clone(),
                title: t.title.clone(),
            });
        }
        for o in tabs.opened.iter_mut() {
            if !o.closed && !mine.iter().any(|t| t.target_id == o.target_id) {
                o.closed = true;
            }
        }
        for t in &mine {
            if Some(&t.target_id) == first.as_ref() {
                continue;
            }
            let known = tabs.opened.iter().position(|o| o.target_id == t.target_id);
            let n = match known {
                Some(i) => i,
                None => {
                    tabs.opened.push(OpenedTab {
                        target_id: t.target_id.clone(),
                        url: t.url.clone(),
                        page: None,
                        closed: false,
                    });
                    let n = tabs.opened.len() - 1;
                    if report {
                        tabs.unreported.push(Tab {
                            tab: n as u32 + 1,
                            url: t.url.clone(),
                            title: t.title.clone(),
                        });
                    }
                    n
                }
            };
            tabs.opened[n].url = t.url.clone();
            all.push(Tab {
                tab: n as u32 + 1,
                url: t.url.clone(),
                title: t.title.clone(),
            });
        }
        all.sort_by_key(|t| t.tab);
        Ok(all)
    }

    /// The page of tab `tab` (not 0) of the task, attached on first use; a tab the task never
    /// had, or one that was closed, is refused with why.
    async fn tab_page(
        &self,
        tp: &TaskPage,
        tab: u32,
        deadline: Instant,
    ) -> Result<Arc<Page>, String> {
        let known = tp.tabs.lock().expect("task tabs lock").opened.len() >= tab as usize;
        if !known {
            // A tab opened since the last look is found now.
            let _ = self.discover_tabs(tp, false, deadline).await;
        }
        let (target, url) = {
            let tabs = tp.tabs.lock().expect("task tabs lock");
            let Some(o) = tab.checked_sub(1).and_then(|i| tabs.opened.get(i as usize)) else {
                return Err(format!(
                    "the task has no tab {tab} (its pages opened {} tabs); call page.tabs for its open tabs",
                    tabs.opened.len()
                ));
            };
            if o.closed {
                return Err(format!(
                    "tab {tab} was closed; call page.tabs for the task's open tabs"
                ));
            }
            if let Some(p) = &o.page {
                match p.gone() {
                    None => return Ok(p.clone()),
                    Some(why) => {
                        return Err(format!(
                            "tab {tab} was closed ({why}); call page.tabs for the task's open tabs"
                        ))
                    }
                }
            }
            (o.target_id.clone(), o.url.clone())
        };
        let browser = {
            let slot = tp.slot.lock().expect("task page lock");
            match &slot.context {
                Some((b, _)) => b.clone(),
                None => return Err("the task's browser context is gone".into()),
            }
        };
        let page = Arc::new(
            Page::attach(
                browser,
                &target,
                &url,
                tp.watch(),
                tp.refs.clone(),
                deadline,
            )
            .await
            .map_err(|e| format!("tab {tab} could not be used: {e}"))?,
        );
        let earlier = {
            let mut tabs = tp.tabs.lock().expect("task tabs lock");
            let o = &mut tabs.opened[tab as usize - 1];
            match &o.page {
                Some(p) => Some(p.clone()),
                None => {
                    o.page = Some(page.clone());
                    None
                }
            }
        };
        match earlier {
            // Another call attached it meanwhile: use that one.
            Some(p) => {
                page.close().await;
                Ok(p)
            }
            None => Ok(page),
        }
    }
}

/// Loads saved login `name` into browser context `context` (SPEC §15): its cookies now, and
/// its local storage as the script the task's first page runs before its own
/// ([`script::seed_local_storage`]), or `None` when it keeps none.
async fn load_profile(
    inner: &Inner,
    browser: &Browser,
    context: &str,
    name: &str,
    deadline: Instant,
) -> Result<Option<String>, String> {
    let profile = profiles::load(inner.profile_dir.as_deref(), name)?;
    let seed = (!profile.local_storage.is_empty())
        .then(|| script::seed_local_storage(&profile.local_storage));
    let cookies = profile
        .cookies
        .into_iter()
        .map(|mut c| {
            // A session cookie is given back as one.
            c.expires = c.expires.filter(|e| *e > 0.0);
            c
        })
        .collect();
    match timeout_at(
        deadline,
        browser.cdp.call(
            None,
            &methods::SetCookies {
                cookies,
                browser_context_id: context.to_owned(),
            },
        ),
    )
    .await
    {
        Ok(Ok(_)) => Ok(seed),
        Ok(Err(e)) => Err(format!(
            "loading profile {name:?} into the task's browser failed: {e}"
        )),
        Err(_) => Err(format!(
            "loading profile {name:?} did not finish before the deadline"
        )),
    }
}

/// `task.saveProfile`: writes the cookies of the task's browser context as profile `name`.
async fn save_profile(
    inner: &Inner,
    tp: &TaskPage,
    name: &str,
    deadline: Instant,
) -> ActionOutcome {
    let context = tp.slot.lock().expect("task page lock").context.clone();
    let Some((browser, context)) = context else {
        return ActionOutcome::Failed(
            "the task's browser context is gone; nothing was saved".into(),
        );
    };
    let cookies =
        match timeout_at(
            deadline,
            browser.cdp.call(
                None,
                &methods::GetCookies {
                    browser_context_id: context,
                },
            ),
        )
        .await
        {
            Ok(Ok(c)) => c.cookies,
            Ok(Err(e)) => {
                return ActionOutcome::Failed(format!(
                    "reading the task's cookies failed: {e}; nothing was saved"
                ))
            }
            Err(_) => return ActionOutcome::Failed(
                "reading the task's cookies did not finish before the deadline; nothing was saved"
                    .into(),
            ),
        };
    let local_storage = match task_storage(tp, deadline).await {
        Ok(s) => s,
        Err(e) => return ActionOutcome::Failed(format!("{e}; nothing was saved")),
    };
    let (count, origins) = (cookies.len(), local_storage.len());
    let profile = profiles::Profile {
        version: 1,
        cookies,
        local_storage,
    };
    match profiles::save(inner.profile_dir.as_deref(), name, &profile) {
        Ok(()) => ActionOutcome::Applied(crate::tasks::Observation {
            target: format!("profile {name}"),
            value: format!("{count} cookies and the local storage of {origins} origins saved"),
        }),
        Err(e) => ActionOutcome::Failed(e),
    }
}

/// The local storage of the origins the task's open tabs show (its page and the tabs it
/// opened that an action has used), one entry per origin.
async fn task_storage(
    tp: &TaskPage,
    deadline: Instant,
) -> Result<Vec<profiles::OriginStorage>, String> {
    let mut pages: Vec<Arc<Page>> = tp
        .slot
        .lock()
        .expect("task page lock")
        .page
        .iter()
        .cloned()
        .collect();
    pages.extend(
        tp.tabs
            .lock()
            .expect("task tabs lock")
            .opened
            .iter()
            .filter(|o| !o.closed)
            .filter_map(|o| o.page.clone()),
    );
    let mut kept: Vec<profiles::OriginStorage> = Vec::new();
    for page in pages.iter().filter(|p| p.gone().is_none()) {
        if let Some(o) = page.local_storage(deadline).await? {
            if !kept.iter().any(|k| k.origin == o.origin) {
                kept.push(o);
            }
        }
    }
    Ok(kept)
}

/// Records, for the reply of the action that asked for them, the tabs its page opened: the
/// page said it opens a window, and its target shows in the task's context a moment later, so
/// the look is repeated briefly ([`TAB_LOOK`] at most).
async fn report_opened(inner: &Inner, tp: &TaskPage) {
    let until = Instant::now() + TAB_LOOK;
    let known = tp.tabs.lock().expect("task tabs lock").opened.len();
    loop {
        match inner.discover_tabs(tp, true, until).await {
            Ok(_) if tp.tabs.lock().expect("task tabs lock").opened.len() > known => return,
            Ok(_) => {}
            Err(why) => {
                tracing::debug!(reason = %why, "looking for the tabs an action opened failed");
                return;
            }
        }
        if Instant::now() + Duration::from_millis(25) >= until {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// How long an action's reply waits for the list of tabs it may have opened, at most.
const TAB_LOOK: Duration = Duration::from_millis(1000);

/// Does `action` on `page` (one of the task's tabs), by `deadline`.
async fn perform(
    inner: &Inner,
    page: &Page,
    action: PageAction,
    deadline: Instant,
) -> ActionOutcome {
    match action {
        PageAction::Fill { target, value } => page.fill(&target, &value, deadline).await,
        PageAction::Click {
            target,
            expect,
            local,
            dialog,
        } => {
            let step = Step {
                expect: expect.as_ref(),
                local,
                dialog: dialog.as_deref(),
            };
            page.click(&target, step, deadline, &inner.mutations).await
        }
        PageAction::Press {
            key,
            target,
            expect,
            local,
            dialog,
        } => {
            let step = Step {
                expect: expect.as_ref(),
                local,
                dialog: dialog.as_deref(),
            };
            page.press(&key, target.as_ref(), step, deadline, &inner.mutations)
                .await
        }
        PageAction::Navigate {
            to,
            allow_resubmit,
            expect,
            dialog,
        } => {
            page.navigate_to(
                &to,
                allow_resubmit,
                expect.as_ref(),
                dialog.as_deref(),
                deadline,
                &inner.mutations,
            )
            .await
        }
        PageAction::Select { target, by } => page.select(&target, &by, deadline).await,
        PageAction::Check { target, checked } => {
            page.check(&target, checked, deadline, &inner.mutations)
                .await
        }
        PageAction::Upload { target, files } => {
            let mut paths = Vec::with_capacity(files.len());
            for f in &files {
                match resolve_upload(inner.upload_dir.as_deref(), f) {
                    Ok(p) => paths.push(p),
                    Err(why) => {
                        return ActionOutcome::Failed(format!("{why}; nothing was dispatched"))
                    }
                }
            }
            page.upload(&target, &paths, deadline).await
        }
        PageAction::Hover { target } => page.hover(&target, deadline).await,
        PageAction::Type {
            target,
            text,
            expect,
        } => {
            page.type_text(&target, &text, expect.as_ref(), deadline, &inner.mutations)
                .await
        }
        PageAction::SaveProfile { .. } => ActionOutcome::Failed(
            "task.saveProfile is not a page action; nothing was dispatched".into(),
        ),
    }
}

/// Kills what is left of the browser's group as soon as its pipe closes (a crash leaves
/// helpers behind), and says so.
fn watch_browser(b: &Arc<Browser>) {
    let weak = Arc::downgrade(b);
    let cdp = b.cdp.clone();
    tokio::spawn(async move {
        cdp.wait_closed().await;
        if let Some(b) = weak.upgrade() {
            let reason = b.gone().unwrap_or_default();
            if reason != browser::STOPPED {
                tracing::warn!(pid = b.pid(), %reason, "Chromium went away");
            }
            b.kill();
        }
    });
}

async fn new_context(browser: &Browser, deadline: Instant) -> Result<String, String> {
    match timeout_at(
        deadline,
        browser.cdp.call(
            None,
            &methods::CreateBrowserContext {
                dispose_on_detach: false,
            },
        ),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c.browser_context_id),
        Ok(Err(e)) => Err(format!("creating a browser context failed: {e}")),
        Err(_) => Err("creating a browser context did not finish before the deadline".into()),
    }
}

fn dispose_context(browser: Arc<Browser>, context: String) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        if browser.gone().is_none() {
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                browser.cdp.call(
                    None,
                    &methods::DisposeBrowserContext {
                        browser_context_id: context,
                    },
                ),
            )
            .await;
        }
    });
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(b) = self.current.get_mut().expect("current browser lock").take() {
            b.kill();
        }
    }
}

impl Executor for ChromiumExecutor {
    fn kind(&self) -> &'static str {
        "chromium"
    }

    fn check_target(&self, target: &str) -> Result<(), String> {
        if target.trim().is_empty() {
            return Err(
                "a CSS selector must not be empty (e.g. #title, form button[type=submit])".into(),
            );
        }
        if target.len() > MAX_SELECTOR_BYTES {
            return Err(format!(
                "a CSS selector must be at most {MAX_SELECTOR_BYTES} bytes (got {})",
                target.len()
            ));
        }
        if target.chars().any(|c| c.is_control()) {
            return Err("a CSS selector must not contain control characters".into());
        }
        Ok(())
    }

    fn check_start(&self, url: Option<&str>) -> Result<(), String> {
        match url {
            None => Err(MISSING_URL.into()),
            Some(url) => check_url(url)
                .and_then(|()| self.inner.file_urls.check(url))
                .and_then(|()| self.inner.origins.check(url)),
        }
    }

    fn open(
        &self,
        task: TaskId,
        url: Option<String>,
        fixture: FixtureOptions,
        deadline: Instant,
    ) -> BoxFuture<'static, Result<(), String>> {
        self.open_with(task, url, None, fixture, deadline)
    }

    fn open_with(
        &self,
        task: TaskId,
        url: Option<String>,
        profile: Option<String>,
        _fixture: FixtureOptions,
        deadline: Instant,
    ) -> BoxFuture<'static, Result<(), String>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let Some(url) = url else {
                return Err(MISSING_URL.into());
            };
            check_url(&url)?;
            // A local file opens at its resolved path, and only inside the allowed directory.
            let url = inner.file_urls.resolve(&url)?;
            let budget = deadline.saturating_duration_since(Instant::now());
            let browser = inner.browser().await?;
            // Starting the browser does not eat into the page's own time.
            let deadline = Instant::now() + budget;
            let context = new_context(&browser, deadline).await?;
            let mut seed = None;
            if let Some(name) = profile {
                // The saved login goes into the context before its page asks for anything.
                match load_profile(&inner, &browser, &context, &name, deadline).await {
                    Ok(storage) => seed = storage,
                    Err(e) => {
                        dispose_context(browser, context);
                        return Err(e);
                    }
                }
            }
            let dialogs = Dialogs::new();
            let network = if inner.network_evidence {
                NetworkLog::guarded(inner.evidence_max_requests, inner.origins.clone())
            } else {
                NetworkLog::off()
            };
            let refs = Arc::new(AtomicU64::new(1));
            let opened = Page::open(
                browser.clone(),
                &context,
                &url,
                seed.as_deref(),
                PageWatch {
                    dialogs: dialogs.clone(),
                    network: network.clone(),
                },
                refs.clone(),
                deadline,
            );
            let page = match opened.await {
                Ok(p) => p,
                Err(e) => {
                    dispose_context(browser, context);
                    return Err(e);
                }
            };
            let committed = page.url();
            let tp = Arc::new(TaskPage {
                slot: Mutex::new(Slot {
                    page: Some(Arc::new(page)),
                    context: Some((browser, context)),
                    last_url: if committed.is_empty() { url } else { committed },
                }),
                reopening: tokio::sync::Mutex::new(()),
                acting: tokio::sync::Mutex::new(()),
                dialogs,
                network,
                refs,
                tabs: Mutex::new(Tabs::default()),
            });
            inner.tasks.lock().expect("tasks lock").insert(task, tp);
            Ok(())
        })
    }

    fn act(
        &self,
        task: TaskId,
        action: PageAction,
        deadline: Instant,
    ) -> BoxFuture<'static, ActionOutcome> {
        self.act_in("", task, 0, action, deadline)
    }

    fn act_in(
        &self,
        _request_id: &str,
        task: TaskId,
        tab: u32,
        action: PageAction,
        deadline: Instant,
    ) -> BoxFuture<'static, ActionOutcome> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let Some(tp) = inner.task(&task) else {
                return ActionOutcome::Failed(format!(
                    "task {task} has no page in this executor; nothing was dispatched"
                ));
            };
            // One action at a time per task, whichever of its tabs it acts on (SPEC §14).
            let Ok(_turn) = timeout_at(deadline, tp.acting.lock()).await else {
                return ActionOutcome::Failed(
                    "another action on this task's page was still running at the deadline; nothing was dispatched".into(),
                );
            };
            let page = if tab == 0 {
                match tp.live_page() {
                    Ok(p) => p,
                    Err(why) => {
                        return ActionOutcome::Failed(format!(
                            "the task's page is gone ({why}), and what was filled in went with it; nothing was dispatched. page.read opens it again at {}; fill it in again before submitting",
                            tp.last_url()
                        ))
                    }
                }
            } else {
                match inner.tab_page(&tp, tab, deadline).await {
                    Ok(p) => p,
                    Err(why) => {
                        return ActionOutcome::NotSent(
                            NotSent::NoTab,
                            format!("{why}; nothing was sent"),
                        )
                    }
                }
            };
            if let PageAction::SaveProfile { profile } = &action {
                return save_profile(&inner, &tp, profile, deadline).await;
            }
            page.acting();
            let windows = page.windows_opened();
            let outcome = perform(&inner, &page, action, deadline).await;
            // A body too large for its event was asked for: its digest belongs in the reply
            // (bounded: a browser that does not answer leaves the digest out). An observed
            // effect's answers are in or about to be: read them too, for a shorter while (a
            // page may keep a request open for long, and the effect is already seen).
            let now = Instant::now();
            tp.network
                .bodies_read(now + std::time::Duration::from_millis(500))
                .await;
            if matches!(outcome, ActionOutcome::Applied(_)) {
                let until = (now + std::time::Duration::from_millis(200)).max(Instant::now());
                tp.network.answers_in(until).await;
            }
            if page.windows_opened() > windows {
                report_opened(&inner, &tp).await;
            }
            outcome
        })
    }

    fn offers(&self, _method: Method) -> bool {
        true
    }

    fn check_command(&self, command: &Command) -> Result<(), String> {
        let act = match command {
            Command::Execute(ExecutorCommand::Act(act)) => act,
            Command::Execute(ExecutorCommand::Start(p)) => {
                if let Some(name) = &p.profile {
                    profiles::check_existing(self.inner.profile_dir.as_deref(), name)
                        .map_err(|e| format!("invalid params for task.start: {e}"))?;
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        match &act.action {
            PageAction::SaveProfile { profile } => {
                profiles::profile_path(self.inner.profile_dir.as_deref(), profile)
                    .map_err(|e| format!("invalid params for task.saveProfile: {e}"))?;
                Ok(())
            }
            PageAction::Navigate {
                to: Navigation::Url(url),
                ..
            } => check_navigation_url(url)
                .and_then(|()| self.inner.origins.check(url))
                .map_err(|e| format!("invalid params for page.navigate: {e}")),
            PageAction::Upload { files, .. } => {
                for f in files {
                    resolve_upload(self.inner.upload_dir.as_deref(), f)
                        .map_err(|e| format!("invalid params for page.upload: {e}"))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn query(
        &self,
        task: TaskId,
        query: PageQuery,
        deadline: Instant,
    ) -> BoxFuture<'static, QueryOutcome> {
        self.query_in(task, 0, query, deadline)
    }

    fn query_in(
        &self,
        task: TaskId,
        tab: u32,
        query: PageQuery,
        deadline: Instant,
    ) -> BoxFuture<'static, QueryOutcome> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let Some(tp) = inner.task(&task) else {
                return QueryOutcome::Failed(format!(
                    "task {task} has no page in this executor (its page is closed once the task ends)"
                ));
            };
            if let PageQuery::Tabs = query {
                return match inner.discover_tabs(&tp, false, deadline).await {
                    Ok(tabs) => QueryOutcome::Tabs(tabs),
                    Err(_) if Instant::now() >= deadline => QueryOutcome::TimedOut,
                    Err(why) => QueryOutcome::Failed(why),
                };
            }
            let page = if tab == 0 {
                inner.page_for_reading(&tp, deadline).await
            } else {
                match inner.tab_page(&tp, tab, deadline).await {
                    Ok(p) => Ok(p),
                    Err(why) => return QueryOutcome::Refused(NotSent::NoTab, why),
                }
            };
            let page = match page {
                Ok(p) => p,
                Err(why) if Instant::now() >= deadline => {
                    tracing::debug!(reason = %why, "reading a task's page timed out");
                    return QueryOutcome::TimedOut;
                }
                Err(why) => return QueryOutcome::Failed(why),
            };
            if let Err(why) = inner.file_urls.check_shown(&page.url()) {
                return QueryOutcome::Failed(why);
            }
            let outcome = match query {
                PageQuery::Snapshot => page.snapshot(deadline).await,
                PageQuery::Wait {
                    target,
                    text,
                    state,
                    until,
                } => {
                    page.wait(target.as_ref(), text.as_deref(), state, until)
                        .await
                }
                PageQuery::Screenshot { target } => {
                    page.screenshot(target.as_ref(), deadline).await
                }
                PageQuery::Url => page.url_title(deadline).await,
                PageQuery::Tabs => QueryOutcome::Failed("page.tabs is answered above".into()),
            };
            if matches!(
                outcome,
                QueryOutcome::TimedOut | QueryOutcome::Failed(_) | QueryOutcome::Refused(..)
            ) {
                return outcome;
            }
            match shown_after(&inner, &page, deadline).await {
                Ok(()) => outcome,
                Err(why) => QueryOutcome::Failed(why),
            }
        })
    }

    fn observe(
        &self,
        task: TaskId,
        subject: Subject,
        deadline: Instant,
    ) -> BoxFuture<'static, ReadOutcome> {
        self.observe_in(task, 0, subject, deadline)
    }

    fn observe_in(
        &self,
        task: TaskId,
        tab: u32,
        subject: Subject,
        deadline: Instant,
    ) -> BoxFuture<'static, ReadOutcome> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let Some(tp) = inner.task(&task) else {
                return ReadOutcome::Failed(format!(
                    "task {task} has no page in this executor (its page is closed once the task ends)"
                ));
            };
            if tab != 0 {
                return match inner.tab_page(&tp, tab, deadline).await {
                    Ok(page) => match inner.file_urls.check_shown(&page.url()) {
                        Ok(()) => {
                            let read = page.read(&subject, deadline).await;
                            if matches!(read, ReadOutcome::TimedOut | ReadOutcome::Failed(_)) {
                                return read;
                            }
                            match shown_after(&inner, &page, deadline).await {
                                Ok(()) => read,
                                Err(why) => ReadOutcome::Failed(why),
                            }
                        }
                        Err(why) => ReadOutcome::Failed(why),
                    },
                    Err(why) => ReadOutcome::Failed(why),
                };
            }
            match inner.page_for_reading(&tp, deadline).await {
                Ok(page) => {
                    if let Err(why) = inner.file_urls.check_shown(&page.url()) {
                        return ReadOutcome::Failed(why);
                    }
                    let read = page.read(&subject, deadline).await;
                    let carries = !matches!(read, ReadOutcome::TimedOut | ReadOutcome::Failed(_));
                    if carries {
                        if let Err(why) = shown_after(&inner, &page, deadline).await {
                            return ReadOutcome::Failed(why);
                        }
                    }
                    if page.is_reopened() {
                        ReadOutcome::Reopened(Box::new(read))
                    } else {
                        read
                    }
                }
                Err(why) if Instant::now() >= deadline => {
                    tracing::debug!(reason = %why, "reading a task's page timed out");
                    ReadOutcome::TimedOut
                }
                Err(why) => ReadOutcome::Failed(why),
            }
        })
    }

    fn close(&self, task: TaskId, keep_for_verification: bool) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let tp = if keep_for_verification {
            self.inner.task(&task)
        } else {
            self.inner.tasks.lock().expect("tasks lock").remove(&task)
        };
        let Some(tp) = tp else {
            return;
        };
        // A closed task's pages send nothing more for its actions (SPEC §16).
        tp.network.end();
        let (page, context) = {
            let mut slot = tp.slot.lock().expect("task page lock");
            if let Some(p) = &slot.page {
                let u = p.url();
                if !u.is_empty() {
                    slot.last_url = u;
                }
            }
            let context = if keep_for_verification {
                None
            } else {
                slot.context.take()
            };
            (slot.page.take(), context)
        };
        let tabs: Vec<Arc<Page>> = if keep_for_verification {
            Vec::new()
        } else {
            let mut tabs = tp.tabs.lock().expect("task tabs lock");
            tabs.opened
                .iter_mut()
                .filter_map(|o| o.page.take())
                .collect()
        };
        rt.spawn(async move {
            if let Some(p) = page {
                p.close().await;
            }
            for p in tabs {
                p.close().await;
            }
            if let Some((browser, id)) = context {
                dispose_context(browser, id);
            }
        });
    }

    fn shutdown(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        let current = self
            .inner
            .current
            .lock()
            .expect("current browser lock")
            .take();
        if let Some(b) = current {
            b.kill();
        }
    }

    fn mutations(&self) -> u64 {
        self.inner.mutations.load(Ordering::SeqCst)
    }

    fn take_opened(&self, task: &str) -> Vec<Tab> {
        match self.inner.task(task) {
            Some(tp) => std::mem::take(&mut tp.tabs.lock().expect("task tabs lock").unreported),
            None => Vec::new(),
        }
    }

    fn evidence(&self, task: &str, watching: bool) -> Option<NetworkEvidence> {
        self.inner.task(task)?.network.take(watching)
    }

    fn take_dialogs(&self, task: &str) -> Vec<DialogSeen> {
        match self.inner.task(task) {
            Some(tp) => tp.dialogs.take(),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        for ok in [
            "http://127.0.0.1:8080/",
            "HTTPS://example.org/a?b=c",
            "file:///tmp/form.html",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "about:blank",
            "javascript:alert(1)",
            "127.0.0.1:80",
            "",
            "http://a b/",
            "data:text/html,hi",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        let long = format!("http://x/{}", "a".repeat(8192));
        assert!(check_url(&long).unwrap_err().contains("8192"));
    }

    #[test]
    fn navigations_go_to_http_only() {
        assert!(check_navigation_url("https://example.org/a").is_ok());
        assert!(check_navigation_url("HTTP://127.0.0.1:8080/").is_ok());
        assert!(check_navigation_url("file:///etc/passwd").is_err());
        assert!(check_navigation_url("javascript:alert(1)").is_err());
    }

    #[test]
    fn uploads_stay_inside_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), b"a").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.txt"), b"b").unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a.txt"), dir.path().join("inner")).unwrap();
        let d = Some(dir.path());
        assert!(resolve_upload(d, "a.txt").unwrap().ends_with("a.txt"));
        assert!(resolve_upload(d, "./sub/b.txt").is_ok());
        assert!(resolve_upload(d, "inner").unwrap().ends_with("a.txt"));
        for bad in [
            "",
            "/etc/passwd",
            "../a.txt",
            "sub/../a.txt",
            "link",
            "sub",
            "nope",
            "a\0b",
        ] {
            assert!(resolve_upload(d, bad).is_err(), "{bad:?}");
        }
        let e = resolve_upload(None, "a.txt").unwrap_err();
        assert!(e.contains("--upload-dir"), "{e}");
    }

    #[test]
    fn selectors() {
        let x = ChromiumExecutor::new(ChromiumConfig::new("/nonexistent".into()));
        assert!(x.check_target("form#post button[type=submit]").is_ok());
        assert!(x.check_target("").is_err());
        assert!(x.check_target(&"a".repeat(1025)).is_err());
        assert!(x.check_target("#a\n").is_err());
    }
}
