//! One task's page: opening it, its actions (fill, click, press, and SPEC §15's navigate,
//! select, check, upload, hover, type), its reads and queries (snapshot, wait, screenshot,
//! URL), and the watch for an action's effect.
//!
//! The line the executor never blurs: everything before the first input event is dispatched
//! (finding the element, checking it is visible and enabled, focusing it, scrolling it into
//! view) can fail definitively, because nothing was sent that could cause an effect. From the
//! first dispatched event on, nothing is a failure any more: the action's expectation is watched
//! until the deadline — across the navigations a form submit causes — and if it is not seen,
//! the outcome is uncertain.
//!
//! A step the caller sends as local (`local: true`, SPEC §14: focus, Tab, opening a menu) is
//! watched briefly after its dispatch for what it said it would not do: a navigation of the page
//! (a form submit, a link) makes it uncertain like any unobserved action. Dialogs the page opens
//! meanwhile are answered as the action asked, else dismissed ([`super::dialogs`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::error::Elapsed;
use tokio::time::{timeout_at, Instant};

use super::browser::Browser;
use super::cdp::{methods, CdpError, PageSignals};
use super::dialogs::Dialogs;
use super::network::NetworkLog;
use super::script;
use crate::protocol::{
    DialogAnswer, Expect, ExpectCheck, KeyChord, Modifiers, Navigation, NotSent, SelectBy,
    SnapshotNode, Subject, Target, WaitState,
};
use crate::tasks::Observation;
use crate::{expectation_already_holds, ActionOutcome, QueryOutcome, ReadOutcome};

/// How long a local step is watched after its input was answered, for a navigation it should
/// not have caused. A click or key handler that submits a form or sets `location` asks for the
/// navigation while the event is dispatched, before the input command is answered, so most show
/// at once; this covers handlers that defer by a tick, an animation frame or a quick fetch, and
/// a loaded machine, while a Tab or a focus click still answers in a fraction of a second. A
/// step that navigates later than this is not seen; the caller said it commits nothing.
const LOCAL_SETTLE: Duration = Duration::from_millis(150);

/// The name of the executor's isolated world in each document.
const WORLD: &str = "polaris";

/// The group of element handles an upload takes (released right after).
const HANDLES: &str = "polaris-handles";

/// The largest screenshot returned, as base64 text: 8 MiB of PNG.
const MAX_SCREENSHOT_BASE64: usize = 8 * 1024 * 1024 / 3 * 4;

/// Why an evaluation gave no value.
#[derive(Debug)]
enum EvalError {
    /// The deadline passed first.
    Deadline,
    /// The browser answered with an error, or went away.
    Cdp(CdpError),
    /// The script threw.
    Threw(String),
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::Deadline => write!(f, "the page did not answer before the deadline"),
            EvalError::Cdp(e) => write!(f, "{e}"),
            EvalError::Threw(e) => write!(f, "a script in the page threw: {e}"),
        }
    }
}

/// What the scripts of [`script`] answer; each sets the fields it knows.
#[derive(Debug, Default, Deserialize)]
struct Answer {
    fail: Option<String>,
    absent: Option<String>,
    /// A target the page could not name one element for: `stale_ref`, `no_match`,
    /// `ambiguous` (with `why` and `candidates`).
    #[serde(rename = "notSent")]
    not_sent: Option<String>,
    why: Option<String>,
    candidates: Option<Vec<String>>,
    mode: Option<String>,
    value: Option<String>,
    holds: Option<bool>,
    done: Option<bool>,
    already: Option<bool>,
    x: Option<f64>,
    y: Option<f64>,
    w: Option<f64>,
    h: Option<f64>,
    url: Option<String>,
    title: Option<String>,
    status: Option<u16>,
    /// What [`script::PREPARE_CLICK`] read of the click's expectation before the target.
    before: Option<Box<Answer>>,
}

impl Answer {
    /// Why the target named no one element, when it did not: a stale ref, no match, or
    /// several.
    fn refusal(&self) -> Option<(NotSent, String)> {
        let cause = match self.not_sent.as_deref()? {
            "stale_ref" => NotSent::StaleRef,
            "ambiguous" => NotSent::Ambiguous(self.candidates.clone().unwrap_or_default()),
            _ => NotSent::NoMatch,
        };
        Some((cause, self.why.clone().unwrap_or_default()))
    }
}

/// `page.snapshot`'s script answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Outline {
    url: String,
    title: String,
    nodes: Vec<OutlineNode>,
    refs: u64,
    /// Where the iframes this world cannot reach (other origins) sit among `nodes`.
    #[serde(default)]
    far_at: Vec<usize>,
}

/// One node of [`Outline`] in the short form the script sends (`script::SNAPSHOT`): every
/// node but text has a ref, numbered in order from the script's `first`, so none is sent.
#[derive(Debug, Deserialize)]
struct OutlineNode {
    #[serde(rename = "d")]
    depth: u16,
    #[serde(rename = "r")]
    role: String,
    #[serde(rename = "n", default)]
    name: Option<String>,
    #[serde(rename = "v", default)]
    value: Option<String>,
    #[serde(rename = "s", default)]
    states: Vec<String>,
    #[serde(rename = "x", default)]
    detail: Option<String>,
}

impl OutlineNode {
    /// The nodes as the protocol shows them, refs numbered from `first` as the script
    /// numbered the elements it kept, `depth` levels deeper (a frame's content under its
    /// iframe).
    fn numbered(nodes: Vec<OutlineNode>, first: u64, depth: u16) -> Vec<SnapshotNode> {
        let mut next = first;
        nodes
            .into_iter()
            .map(|n| {
                let ref_ = (n.role != "text").then(|| {
                    next += 1;
                    format!("e{}", next - 1)
                });
                SnapshotNode {
                    depth: n.depth.saturating_add(depth),
                    role: n.role,
                    name: n.name,
                    ref_,
                    value: n.value,
                    states: n.states,
                    detail: n.detail,
                }
            })
            .collect()
    }
}

/// The most frames of other origins a snapshot reads through their own worlds.
const MAX_FAR_FRAMES: usize = 16;

/// A frame of another origin, which the executor's world of the page cannot reach into: it is
/// read and acted in through a world of its own, in the same renderer (the browser runs without
/// site isolation, see `browser.rs`).
#[derive(Clone, Debug)]
struct FarFrame {
    /// The frame's id, for its own world.
    frame_id: String,
    /// Its iframe in the page's world: the `i`th out-of-reach frame of the latest snapshot, or
    /// (`None`) the one a locator's `frame` named last.
    owner: Option<usize>,
}

/// The refs of the latest snapshot that live in frames of other origins.
#[derive(Debug, Default)]
struct FarRefs {
    /// The page's navigation count when they were made: a new document drops them.
    navigations: u64,
    /// (first ref, how many, the frame).
    ranges: Vec<(u64, u64, FarFrame)>,
}

/// A key `page.press` can send: what `Input.dispatchKeyEvent` needs for it.
#[derive(Debug)]
struct KeyDef {
    key: String,
    code: String,
    key_code: u32,
    text: Option<String>,
    /// The DOM `location`: 1 for the (left) modifier keys, else 0.
    location: u8,
}

/// The keys with names (DOM `key`, DOM `code`, Windows key code, text typed); any single
/// character is accepted as well, and `F1`–`F12`.
const NAMED_KEYS: &[(&str, &str, u32, Option<&str>)] = &[
    ("Enter", "Enter", 13, Some("\r")),
    ("Tab", "Tab", 9, None),
    ("Escape", "Escape", 27, None),
    ("Backspace", "Backspace", 8, None),
    ("Delete", "Delete", 46, None),
    ("Insert", "Insert", 45, None),
    ("Space", "Space", 32, Some(" ")),
    ("ArrowUp", "ArrowUp", 38, None),
    ("ArrowDown", "ArrowDown", 40, None),
    ("ArrowLeft", "ArrowLeft", 37, None),
    ("ArrowRight", "ArrowRight", 39, None),
    ("Home", "Home", 36, None),
    ("End", "End", 35, None),
    ("PageUp", "PageUp", 33, None),
    ("PageDown", "PageDown", 34, None),
    ("Shift", "ShiftLeft", 16, None),
    ("Control", "ControlLeft", 17, None),
    ("Alt", "AltLeft", 18, None),
    ("Meta", "MetaLeft", 91, None),
];

/// The US layout's punctuation keys: the character, the character with Shift, the DOM `code`
/// and the Windows key code (what Playwright sends for them).
const PUNCTUATION: &[(char, char, &str, u32)] = &[
    ('`', '~', "Backquote", 192),
    ('-', '_', "Minus", 189),
    ('=', '+', "Equal", 187),
    ('[', '{', "BracketLeft", 219),
    (']', '}', "BracketRight", 221),
    ('\\', '|', "Backslash", 220),
    (';', ':', "Semicolon", 186),
    ('\'', '"', "Quote", 222),
    (',', '<', "Comma", 188),
    ('.', '>', "Period", 190),
    ('/', '?', "Slash", 191),
];

/// The digits with Shift on the US layout, `0` to `9`.
const SHIFTED_DIGITS: [char; 10] = [')', '!', '@', '#', '$', '%', '^', '&', '*', '('];

/// The key `key` names, as typed with Shift held when `shift` (a letter becomes upper case, a
/// digit or punctuation its US-layout shifted character), or `None` for a name the executor
/// does not know.
fn key_def(key: &str, shift: bool) -> Option<KeyDef> {
    if let Some((name, code, key_code, text)) = NAMED_KEYS.iter().find(|k| k.0 == key) {
        let modifier = ["Shift", "Control", "Alt", "Meta"].contains(name);
        return Some(KeyDef {
            key: if *name == "Space" { " " } else { name }.to_owned(),
            code: (*code).to_owned(),
            key_code: *key_code,
            text: text.map(str::to_owned),
            location: u8::from(modifier),
        });
    }
    if let Some(n) = key
        .strip_prefix('F')
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=12).contains(n) && !key.starts_with("F0"))
    {
        return Some(KeyDef {
            key: key.to_owned(),
            code: key.to_owned(),
            key_code: 111 + n,
            text: None,
            location: 0,
        });
    }
    let mut chars = key.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return None;
    };
    if c.is_control() {
        return None;
    }
    let digit_of = |c: char| SHIFTED_DIGITS.iter().position(|d| *d == c);
    let (c, code, key_code) = if c.is_ascii_alphabetic() {
        let upper = c.to_ascii_uppercase();
        let typed = if shift { upper } else { c };
        (typed, format!("Key{upper}"), upper as u32)
    } else if c.is_ascii_digit() {
        let typed = if shift {
            SHIFTED_DIGITS[c as usize - '0' as usize]
        } else {
            c
        };
        (typed, format!("Digit{c}"), c as u32)
    } else if let Some(d) = digit_of(c) {
        (c, format!("Digit{d}"), '0' as u32 + d as u32)
    } else if c == ' ' {
        (c, "Space".to_owned(), 32)
    } else if let Some((plain, shifted, code, key_code)) =
        PUNCTUATION.iter().find(|p| p.0 == c || p.1 == c)
    {
        let typed = if shift || c == *shifted {
            *shifted
        } else {
            *plain
        };
        (typed, (*code).to_owned(), *key_code)
    } else {
        (c, String::new(), 0)
    };
    Some(KeyDef {
        key: c.to_string(),
        code,
        key_code,
        text: Some(c.to_string()),
        location: 0,
    })
}

/// The keys `page.press` knows, for error messages.
pub fn known_keys() -> String {
    let names: Vec<&str> = NAMED_KEYS.iter().map(|k| k.0).collect();
    format!(
        "{}, F1 to F12 or a single character, after modifiers such as Control+ or Shift+",
        names.join(", ")
    )
}

/// What a click or a key press is asked for besides its input (SPEC §14).
#[derive(Clone, Copy, Debug, Default)]
pub struct Step<'a> {
    /// What shows the step took effect; `None` only for a local step.
    pub expect: Option<&'a Expect>,
    /// The caller says the step commits nothing: a navigation after it makes it uncertain.
    pub local: bool,
    /// How to answer a dialog the step opens (others are dismissed).
    pub dialog: Option<&'a DialogAnswer>,
}

/// Where the page's navigation counters stood when an action dispatched its first event.
#[derive(Clone, Copy, Debug)]
struct Marks {
    navigations: u64,
    started: u64,
}

impl Marks {
    /// Whether the page has navigated to another document (or started to) since.
    fn navigated(&self, p: &PageSignals) -> bool {
        p.navigations > self.navigations || p.started_navigations > self.started
    }
}

/// What every page a task has had answers and records into: its dialogs (SPEC §14) and its
/// network evidence (SPEC §16).
#[derive(Clone)]
pub struct PageWatch {
    /// How the running action wants dialogs answered, and their record.
    pub dialogs: Arc<Dialogs>,
    /// What the task's pages sent, per action.
    pub network: Arc<NetworkLog>,
}

/// An attached page of one task.
pub struct Page {
    /// The browser it lives in.
    pub browser: Arc<Browser>,
    /// Its page target (also its main frame).
    pub target_id: String,
    session_id: String,
    signals: watch::Receiver<PageSignals>,
    /// The task's dialogs: how the running action wants them answered, and their record.
    dialogs: Arc<Dialogs>,
    /// What the task's pages sent, per action (SPEC §16).
    network: Arc<NetworkLog>,
    /// Opened again after the task's page died, and nothing dispatched on it since: it shows
    /// what a plain load shows, so what it lacks proves nothing about an earlier action.
    reopened: AtomicBool,
    /// The executor's isolated world in the current document: its context and the count of
    /// navigations when it was made (a new document needs a new one).
    world: Mutex<Option<(i64, u64)>>,
    /// The number of the next snapshot ref, shared by every page the task has had, so a ref of
    /// an older snapshot (or an older page) never names an element of a newer one.
    refs: Arc<AtomicU64>,
    /// One snapshot at a time: each numbers its refs on from the last.
    snapshotting: tokio::sync::Mutex<()>,
    /// The refs of the latest snapshot inside frames of other origins.
    far_refs: Mutex<FarRefs>,
    /// The executor's worlds in frames of other origins, by frame id.
    far_worlds: Mutex<std::collections::HashMap<String, i64>>,
    /// The worlds (contexts) that hold the scripts' shared helpers: they are sent once per
    /// world, and each script after that without them.
    installed: Mutex<std::collections::HashSet<i64>>,
}

/// The most worlds [`Page::installed`] remembers before it starts over (a world not known to
/// hold the helpers is sent them again, which installs them again).
const MAX_INSTALLED: usize = 1024;

/// The names the shared helpers ([`script::PRELUDE`]) declare at their top level.
fn helper_names() -> &'static str {
    static NAMES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        script::PRELUDE
            .lines()
            .filter_map(|l| l.strip_prefix("const "))
            .filter_map(|l| l.split([' ', '=']).next())
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// `function` (one of the [`script`] functions) as sent to a world that does not hold the
/// shared helpers yet: whole, and keeping the helpers in the world for the next scripts.
fn installing(function: &str) -> std::borrow::Cow<'_, str> {
    if !function.contains(script::PRELUDE) {
        return function.into();
    }
    let keep = format!(
        "{}\nglobalThis.__polarisHelpers = {{ {} }};\n",
        script::PRELUDE,
        helper_names()
    );
    function.replacen(script::PRELUDE, &keep, 1).into()
}

/// `function` as sent to a world that holds the shared helpers: without their text, taking
/// them from the world; it throws [`NOT_INSTALLED`] in a world that does not hold them.
fn using_installed(function: &str) -> std::borrow::Cow<'_, str> {
    if !function.contains(script::PRELUDE) {
        return function.into();
    }
    let take = format!(
        "\nconst {{ {} }} = globalThis.__polarisHelpers || (() => {{ throw new Error('{NOT_INSTALLED}'); }})();\n",
        helper_names()
    );
    function.replacen(script::PRELUDE, &take, 1).into()
}

/// What a script throws in a world that does not hold the shared helpers (a context id the
/// executor took for another world).
const NOT_INSTALLED: &str = "polaris: the helpers are not installed in this world";

impl Page {
    /// Opens a page in `context` at `url` and waits for its `load` event or the deadline. A
    /// navigation that fails, does not commit in time, or answers an HTTP error status is an
    /// error (and the page is closed again). Its dialogs are answered and recorded through
    /// `dialogs`, the task's. `seed`, when given, runs in the first documents before their own
    /// scripts (a profile's local storage).
    pub async fn open(
        browser: Arc<Browser>,
        context: &str,
        url: &str,
        seed: Option<&str>,
        watch: PageWatch,
        refs: Arc<AtomicU64>,
        deadline: Instant,
    ) -> Result<Page, String> {
        let PageWatch { dialogs, network } = watch;
        let cdp = browser.cdp.clone();
        let late = |what: &str| format!("{what} did not finish before the deadline");
        let target = timeout_at(
            deadline,
            cdp.call(
                None,
                &methods::CreateTarget {
                    url: "about:blank".into(),
                    browser_context_id: context.to_owned(),
                },
            ),
        )
        .await
        .map_err(|_| late("creating the page"))?
        .map_err(|e| format!("creating the page failed: {e}"))?
        .target_id;
        let attached = timeout_at(
            deadline,
            cdp.call(
                None,
                &methods::AttachToTarget {
                    target_id: target.clone(),
                    flatten: true,
                },
            ),
        )
        .await;
        let attached = match attached {
            Ok(Ok(a)) => Ok(a.session_id),
            Ok(Err(e)) => Err(format!("attaching to the page failed: {e}")),
            Err(_) => Err(late("attaching to the page")),
        };
        let session_id = match attached {
            Ok(session_id) => session_id,
            Err(e) => {
                close_target(&browser, &target).await;
                return Err(e);
            }
        };
        let signals = cdp.track_answering(&session_id, &target, dialogs.clone(), network.clone());
        let page = Page {
            browser,
            target_id: target,
            session_id,
            signals,
            dialogs,
            network,
            reopened: AtomicBool::new(false),
            world: Mutex::new(None),
            refs,
            snapshotting: tokio::sync::Mutex::new(()),
            far_refs: Mutex::new(FarRefs::default()),
            far_worlds: Mutex::new(std::collections::HashMap::new()),
            installed: Mutex::new(std::collections::HashSet::new()),
        };
        let seeded = match seed {
            Some(source) => match page.seed_first_document(source, deadline).await {
                Ok(id) => Some(id),
                Err(e) => {
                    page.close().await;
                    return Err(e);
                }
            },
            None => None,
        };
        let loaded = page.navigate(url, deadline).await;
        let unseeded = match seeded {
            Some(identifier) => timeout_at(
                deadline,
                cdp.call(
                    Some(page.session_id.as_str()),
                    &methods::RemoveScriptToEvaluateOnNewDocument { identifier },
                ),
            )
            .await
            .map_err(|_| "the new page did not answer before the deadline".to_owned())
            .and_then(|r| {
                r.map(|_| ())
                    .map_err(|e| format!("the new page failed: {e}"))
            }),
            None => Ok(()),
        };
        match loaded.and(unseeded) {
            Ok(()) => Ok(page),
            Err(e) => {
                page.close().await;
                Err(e)
            }
        }
    }

    /// Has the page's next documents run `source` before their own scripts; the caller removes
    /// it (by the identifier returned) once the first document has loaded.
    async fn seed_first_document(&self, source: &str, deadline: Instant) -> Result<String, String> {
        match timeout_at(
            deadline,
            self.browser.cdp.call(
                Some(self.session_id.as_str()),
                &methods::AddScriptToEvaluateOnNewDocument {
                    source: source.to_owned(),
                },
            ),
        )
        .await
        {
            Ok(Ok(a)) => Ok(a.identifier),
            Ok(Err(e)) => Err(format!("preparing the new page failed: {e}")),
            Err(_) => Err("the new page did not answer before the deadline".into()),
        }
    }

    /// Attaches to a page target that is already open (a tab the task's page opened, SPEC
    /// §15) and enables its events; its dialogs and snapshot refs are the task's.
    pub async fn attach(
        browser: Arc<Browser>,
        target: &str,
        url: &str,
        watch: PageWatch,
        refs: Arc<AtomicU64>,
        deadline: Instant,
    ) -> Result<Page, String> {
        let PageWatch { dialogs, network } = watch;
        let cdp = browser.cdp.clone();
        let session_id = match timeout_at(
            deadline,
            cdp.call(
                None,
                &methods::AttachToTarget {
                    target_id: target.to_owned(),
                    flatten: true,
                },
            ),
        )
        .await
        {
            Ok(Ok(a)) => a.session_id,
            Ok(Err(e)) => return Err(format!("attaching to the tab failed: {e}")),
            Err(_) => return Err("attaching to the tab did not finish before the deadline".into()),
        };
        let signals = cdp.track_answering(&session_id, target, dialogs.clone(), network.clone());
        // Until its next navigation, the tab's URL is the one the browser listed.
        cdp.seed_url(&session_id, url);
        let page = Page {
            browser,
            target_id: target.to_owned(),
            session_id,
            signals,
            dialogs,
            network,
            reopened: AtomicBool::new(false),
            world: Mutex::new(None),
            refs,
            snapshotting: tokio::sync::Mutex::new(()),
            far_refs: Mutex::new(FarRefs::default()),
            far_worlds: Mutex::new(std::collections::HashMap::new()),
            installed: Mutex::new(std::collections::HashSet::new()),
        };
        let s = Some(page.session_id.as_str());
        let enabled = timeout_at(
            deadline,
            futures::future::try_join3(
                cdp.call(s, &methods::PageEnable {}),
                cdp.call(s, &methods::InspectorEnable {}),
                page.watch_network(),
            ),
        )
        .await;
        match enabled {
            Ok(Ok(_)) => Ok(page),
            Ok(Err(e)) => {
                page.close().await;
                Err(format!("the tab failed: {e}"))
            }
            Err(_) => {
                page.close().await;
                Err("the tab did not answer before the deadline".into())
            }
        }
    }

    async fn navigate(&self, url: &str, deadline: Instant) -> Result<(), String> {
        let cdp = &self.browser.cdp;
        let s = Some(self.session_id.as_str());
        let enabled = timeout_at(
            deadline,
            futures::future::try_join3(
                cdp.call(s, &methods::PageEnable {}),
                cdp.call(s, &methods::InspectorEnable {}),
                self.watch_network(),
            ),
        )
        .await;
        match enabled {
            Err(_) => return Err("the new page did not answer before the deadline".into()),
            Ok(Err(e)) => return Err(format!("the new page failed: {e}")),
            Ok(Ok(_)) => {}
        }
        let before = self.signals.borrow().navigations;
        let navigated = timeout_at(
            deadline,
            cdp.call(
                s,
                &methods::Navigate {
                    url: url.to_owned(),
                },
            ),
        )
        .await;
        match navigated {
            Err(_) => return Err(format!("{url} did not answer before the deadline")),
            Ok(Err(e)) => return Err(format!("navigating to {url} failed: {e}")),
            Ok(Ok(methods::Navigated {
                error_text: Some(e),
            })) => return Err(format!("{url} did not load: {e}")),
            Ok(Ok(_)) => {}
        }
        let mut rx = self.signals.clone();
        let loaded = timeout_at(deadline, async {
            rx.wait_for(|p| p.gone.is_some() || (p.navigations > before && p.loaded))
                .await
                .is_ok()
        })
        .await;
        if let Some(g) = self.gone() {
            return Err(format!("{url} did not load: {g}"));
        }
        if loaded.is_err() {
            // Committed but still loading at the deadline: usable, as a user would use it.
            tracing::debug!(
                url,
                "the page committed but had not fired load by the deadline"
            );
        }
        match self
            .eval::<Answer, _>(script::LOADED, &json!({}), false, deadline)
            .await
        {
            Ok(a) if a.status.is_some_and(|s| s >= 400) => Err(format!(
                "{} answered HTTP {}",
                a.url.as_deref().unwrap_or(url),
                a.status.unwrap_or_default()
            )),
            _ => Ok(()),
        }
    }

    /// Enables the page's `Network` domain and attaches its workers, unless the task's network
    /// is not watched (`--no-network-evidence`).
    async fn watch_network(&self) -> Result<(), CdpError> {
        if !self.network.is_on() {
            return Ok(());
        }
        let cdp = &self.browser.cdp;
        let s = Some(self.session_id.as_str());
        futures::future::try_join(
            cdp.call(s, &methods::NetworkEnable::default()),
            cdp.call(s, &methods::SetAutoAttach::workers()),
        )
        .await
        .map(|_| ())
    }

    /// Why the page cannot be used any more, if it cannot.
    pub fn gone(&self) -> Option<String> {
        self.signals.borrow().gone.clone().or_else(|| {
            self.browser
                .gone()
                .map(|why| format!("the browser went away ({why})"))
        })
    }

    /// The page's last URL committed with a real response.
    pub fn url(&self) -> String {
        self.signals.borrow().url.clone()
    }

    /// How many new windows (tabs) the page has asked for so far (SPEC §15).
    pub fn windows_opened(&self) -> u64 {
        self.signals.borrow().windows_opened
    }

    /// Marks the page as opened again in place of one that died (see [`Page::is_reopened`]).
    pub fn mark_reopened(&self) {
        self.reopened.store(true, Ordering::SeqCst);
    }

    /// Whether the page was opened again after the task's page died and nothing was done on it
    /// since: a read there shows what a plain load shows, so a missing expectation proves
    /// nothing (SPEC §14). An action on it ends that ([`Page::acting`]).
    pub fn is_reopened(&self) -> bool {
        self.reopened.load(Ordering::SeqCst)
    }

    /// An action is about to run on the page: whatever it leaves pending was done on this page,
    /// so the page witnesses it.
    pub fn acting(&self) {
        self.reopened.store(false, Ordering::SeqCst);
    }

    /// Where the page stands as an action dispatches its first input event: from here on what
    /// the page sends is the action's evidence (SPEC §16).
    fn marks(&self) -> Marks {
        self.network.begin();
        self.position()
    }

    /// Where the page's navigation counters stand now (a second dispatch of the same action).
    fn position(&self) -> Marks {
        let p = self.signals.borrow();
        Marks {
            navigations: p.navigations,
            started: p.started_navigations,
        }
    }

    /// Closes the page (best effort, bounded).
    pub async fn close(&self) {
        self.browser.cdp.untrack(&self.session_id);
        if self.browser.gone().is_none() {
            close_target(&self.browser, &self.target_id).await;
        }
    }

    /// The executor's isolated world in the page's current document (or in the current
    /// document of `frame`, a frame of another origin), made when the document is new (asking
    /// again on the same document gives the same world).
    async fn world(&self, frame: Option<&str>, deadline: Instant) -> Result<i64, EvalError> {
        let navigations = self.signals.borrow().navigations;
        match frame {
            None => {
                if let Some((id, n)) = *self.world.lock().expect("world lock") {
                    if n == navigations {
                        return Ok(id);
                    }
                }
            }
            Some(f) => {
                if let Some(id) = self.far_worlds.lock().expect("far worlds lock").get(f) {
                    return Ok(*id);
                }
            }
        }
        let made = timeout_at(
            deadline,
            self.browser.cdp.call(
                Some(&self.session_id),
                &methods::CreateIsolatedWorld {
                    frame_id: frame.unwrap_or(&self.target_id).to_owned(),
                    world_name: WORLD,
                    grant_univeral_access: true,
                },
            ),
        )
        .await
        .map_err(|_| EvalError::Deadline)?
        .map_err(EvalError::Cdp)?;
        let id = made.execution_context_id;
        match frame {
            None => *self.world.lock().expect("world lock") = Some((id, navigations)),
            Some(f) => {
                let mut worlds = self.far_worlds.lock().expect("far worlds lock");
                if worlds.len() >= 4 * MAX_FAR_FRAMES {
                    worlds.clear();
                }
                worlds.insert(f.to_owned(), id);
            }
        }
        Ok(id)
    }

    /// Forgets that the world `id` holds the helpers, so they are sent again.
    fn forget_installed(&self, id: i64) {
        self.installed
            .lock()
            .expect("installed scripts lock")
            .remove(&id);
    }

    fn forget_world(&self, id: i64) {
        let mut w = self.world.lock().expect("world lock");
        if w.is_some_and(|(current, _)| current == id) {
            *w = None;
        }
        drop(w);
        self.far_worlds
            .lock()
            .expect("far worlds lock")
            .retain(|_, v| *v != id);
        self.forget_installed(id);
    }

    /// Where a script's `sel` must be resolved: `None` for the page's own world (which
    /// reaches its same-origin frames and open shadow roots), or a frame of another origin —
    /// for a ref the latest snapshot made there, or a locator whose `frame` names such a frame
    /// (its `frame` is then taken off `arg`: the locator is resolved inside that frame).
    async fn route(
        &self,
        arg: &mut serde_json::Value,
        deadline: Instant,
    ) -> Result<Option<FarFrame>, EvalError> {
        let Some(sel) = arg.get("sel") else {
            return Ok(None);
        };
        if let Some(r) = sel.get("ref").and_then(serde_json::Value::as_str) {
            return Ok(self.far_ref(r));
        }
        let Some(frame) = sel.get("frame").cloned() else {
            return Ok(None);
        };
        let probe = self
            .call_script(
                script::FRAME_PROBE,
                &json!({ "sel": frame }),
                false,
                true,
                None,
                deadline,
            )
            .await?;
        if probe.value.get("far") != Some(&json!(true)) {
            return Ok(None);
        }
        let Some(frame_id) = self.frame_id(None, deadline).await? else {
            return Ok(None);
        };
        if let Some(sel) = arg
            .get_mut("sel")
            .and_then(serde_json::Value::as_object_mut)
        {
            sel.remove("frame");
        }
        Ok(Some(FarFrame {
            frame_id,
            owner: None,
        }))
    }

    /// The frame of another origin the latest snapshot made ref `r` in, if it made it in one
    /// (and the page has not navigated since).
    fn far_ref(&self, r: &str) -> Option<FarFrame> {
        let n = r.strip_prefix('e').and_then(|n| n.parse::<u64>().ok())?;
        let navigations = self.signals.borrow().navigations;
        let far = self.far_refs.lock().expect("far refs lock");
        if far.navigations != navigations {
            return None;
        }
        far.ranges
            .iter()
            .find(|(first, count, _)| n >= *first && n < first + count)
            .map(|(_, _, f)| f.clone())
    }

    /// Whether a script's `sel` is resolved in the page's own world without a look first
    /// ([`Page::route`]): it names no `frame` to probe, and no ref made inside a frame of
    /// another origin.
    fn in_page_world(&self, sel: &serde_json::Value) -> bool {
        if sel.get("frame").is_some() {
            return false;
        }
        match sel.get("ref").and_then(serde_json::Value::as_str) {
            Some(r) => self.far_ref(r).is_none(),
            None => true,
        }
    }

    /// The frame id held by an iframe of the page's world: the one a locator's `frame` named
    /// last (`owner` `None`), or the `i`th out-of-reach frame of the latest snapshot.
    async fn frame_id(
        &self,
        owner: Option<usize>,
        deadline: Instant,
    ) -> Result<Option<String>, EvalError> {
        let handle = self
            .call_script(
                script::FRAME_ELEMENT,
                &json!({ "i": owner }),
                false,
                false,
                None,
                deadline,
            )
            .await?;
        let Some(object_id) = handle.object_id else {
            return Ok(None);
        };
        let described = timeout_at(
            deadline,
            self.browser
                .cdp
                .call(Some(&self.session_id), &methods::DescribeNode { object_id }),
        )
        .await
        .map_err(|_| EvalError::Deadline)?;
        self.release_handles(deadline).await;
        Ok(described.ok().and_then(|d| d.node.frame_id))
    }

    async fn release_handles(&self, deadline: Instant) {
        let _ = timeout_at(
            deadline,
            self.browser.cdp.call(
                Some(&self.session_id),
                &methods::ReleaseObjectGroup {
                    object_group: HANDLES,
                },
            ),
        )
        .await;
    }

    /// Where the content of `far`'s iframe starts in the top viewport, to place a point found
    /// inside the frame.
    async fn far_offset(&self, far: &FarFrame, deadline: Instant) -> Result<(f64, f64), String> {
        match self
            .call_script(
                script::FRAME_OFFSET,
                &json!({ "i": far.owner }),
                false,
                true,
                None,
                deadline,
            )
            .await
        {
            Ok(v) => match serde_json::from_value::<Answer>(v.value) {
                Ok(Answer {
                    x: Some(x),
                    y: Some(y),
                    ..
                }) => Ok((x, y)),
                Ok(a) => Err(a.fail.unwrap_or_else(|| "the frame has no box".into())),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        }
    }

    /// Calls one of the [`script`] functions with `arg` in the executor's world and returns
    /// its result (a document replaced under the call is tried again on the new one, twice at
    /// most). The shared helpers are sent the first time in each world, and kept there: later
    /// scripts are sent without them, sparing the page their parse each time.
    async fn call_script(
        &self,
        function: &str,
        arg: &serde_json::Value,
        await_promise: bool,
        by_value: bool,
        frame: Option<&str>,
        deadline: Instant,
    ) -> Result<methods::RemoteObject, EvalError> {
        let mut tries = 0;
        loop {
            let context = self.world(frame, deadline).await?;
            let held = self
                .installed
                .lock()
                .expect("installed scripts lock")
                .contains(&context);
            let call = if held {
                using_installed(function)
            } else {
                installing(function)
            };
            let params = methods::CallFunctionOn {
                function_declaration: &call,
                arguments: [methods::CallArgument { value: arg }],
                execution_context_id: context,
                return_by_value: by_value,
                await_promise,
                object_group: (!by_value).then_some(HANDLES),
            };
            let call = self.browser.cdp.call(Some(&self.session_id), &params);
            let answer = timeout_at(deadline, call)
                .await
                .map_err(|_| EvalError::Deadline)?;
            match answer {
                Err(e) if e.is_context_gone() => {
                    self.forget_world(context);
                    if tries >= 2 {
                        return Err(EvalError::Cdp(e));
                    }
                    tries += 1;
                }
                Err(e) => return Err(EvalError::Cdp(e)),
                Ok(answer) => {
                    if let Some(x) = answer.exception_details {
                        let what = x.exception.and_then(|e| e.description).unwrap_or(x.text);
                        if held && what.contains(NOT_INSTALLED) && tries < 2 {
                            // Sent whole on the next try.
                            self.forget_installed(context);
                            tries += 1;
                            continue;
                        }
                        return Err(EvalError::Threw(what));
                    }
                    if !held && function.contains(script::PRELUDE) {
                        let mut installed = self.installed.lock().expect("installed scripts lock");
                        if installed.len() >= MAX_INSTALLED {
                            installed.clear();
                        }
                        installed.insert(context);
                    }
                    return Ok(answer.result);
                }
            }
        }
    }

    async fn eval<T: DeserializeOwned, A: Serialize>(
        &self,
        function: &str,
        arg: &A,
        await_promise: bool,
        deadline: Instant,
    ) -> Result<T, EvalError> {
        self.eval_routed(function, arg, await_promise, deadline)
            .await
            .map(|(t, _)| t)
    }

    /// [`Page::eval`], saying which frame of another origin the script ran in (its points are
    /// then relative to that frame).
    async fn eval_routed<T: DeserializeOwned, A: Serialize>(
        &self,
        function: &str,
        arg: &A,
        await_promise: bool,
        deadline: Instant,
    ) -> Result<(T, Option<FarFrame>), EvalError> {
        let mut arg = serde_json::to_value(arg).map_err(|e| EvalError::Threw(e.to_string()))?;
        let far = self.route(&mut arg, deadline).await?;
        let frame = far.as_ref().map(|f| f.frame_id.as_str());
        let result = self
            .call_script(function, &arg, await_promise, true, frame, deadline)
            .await?;
        let t =
            serde_json::from_value(result.value).map_err(|e| EvalError::Threw(e.to_string()))?;
        Ok((t, far))
    }

    async fn send<M: methods_ext::Input>(
        &self,
        event: &M,
        deadline: Instant,
    ) -> Result<(), EvalError> {
        timeout_at(
            deadline,
            self.browser.cdp.call(Some(&self.session_id), event),
        )
        .await
        .map_err(|_| EvalError::Deadline)?
        .map(|_| ())
        .map_err(EvalError::Cdp)
    }

    /// The checks before dispatch: a definite failure when the page refuses them, and a
    /// refusal (nothing sent) when the target names no one element.
    async fn prepare(
        &self,
        function: &str,
        arg: serde_json::Value,
        deadline: Instant,
    ) -> Result<Answer, ActionOutcome> {
        self.prepare_routed(function, arg, deadline)
            .await
            .map(|(a, _)| a)
    }

    /// [`Page::prepare`]; a point it answers is moved into the top viewport when the target
    /// lives in a frame of another origin.
    async fn prepare_routed(
        &self,
        function: &str,
        arg: serde_json::Value,
        deadline: Instant,
    ) -> Result<(Answer, Option<FarFrame>), ActionOutcome> {
        match self
            .eval_routed::<Answer, _>(function, &arg, false, deadline)
            .await
        {
            Ok((a, far)) => self.judge_prepared(a, far, deadline).await,
            Err(e) => Err(ActionOutcome::Failed(format!(
                "{e}; nothing was dispatched"
            ))),
        }
    }

    /// A prepare script's answer judged: a refusal (nothing sent) when the target named no one
    /// element, a definite failure when the page refused the checks, else the answer with its
    /// point moved into the top viewport when the target lives in a frame of another origin.
    async fn judge_prepared(
        &self,
        mut a: Answer,
        far: Option<FarFrame>,
        deadline: Instant,
    ) -> Result<(Answer, Option<FarFrame>), ActionOutcome> {
        if let Some((cause, why)) = a.refusal() {
            return Err(ActionOutcome::NotSent(
                cause,
                format!("{why}; nothing was sent"),
            ));
        }
        if let Some(why) = a.fail.clone().or_else(|| a.absent.clone()) {
            return Err(ActionOutcome::Failed(format!(
                "{why}; nothing was dispatched"
            )));
        }
        if let (Some(far), Some(x), Some(y)) = (&far, a.x, a.y) {
            match self.far_offset(far, deadline).await {
                Ok((ox, oy)) => {
                    a.x = Some(x + ox);
                    a.y = Some(y + oy);
                }
                Err(why) => {
                    return Err(ActionOutcome::Failed(format!(
                    "the frame of the target could not be placed ({why}); nothing was dispatched"
                )))
                }
            }
        }
        Ok((a, far))
    }

    /// Reads `expect`'s target before an action: an expectation that already holds could never
    /// show the action's effect, so the action is refused before anything is sent (SPEC §14). A
    /// selector the page cannot parse fails the action here.
    async fn before(
        &self,
        expect: Option<&Expect>,
        deadline: Instant,
    ) -> Result<(), ActionOutcome> {
        let Some(expect) = expect else {
            return Ok(());
        };
        let read = self
            .eval::<Answer, _>(script::READ, &subject_arg(&expect.subject), false, deadline)
            .await;
        judge_before(expect, read)
    }

    /// `page.click`'s checks before dispatch in one visit to the page when its expectation and
    /// its target are both read in the page's own world: the expectation first (one that
    /// already holds refuses the click, [`Page::before`]), then the target and its point
    /// ([`Page::point`]); otherwise the two visits one after the other.
    async fn checked_point(
        &self,
        target: &Target,
        expect: Option<&Expect>,
        deadline: Instant,
    ) -> Result<(f64, f64), ActionOutcome> {
        let mut arg = target_arg(target);
        let together = expect
            .filter(|e| self.in_page_world(&arg["sel"]) && self.in_page_world(&sel(&e.subject)));
        let Some(expect) = together else {
            self.before(expect, deadline).await?;
            return self.point(target, deadline).await;
        };
        let (op, want) = op_want(&expect.check);
        arg["expect"] = json!({
            "sel": sel(&expect.subject),
            "label": expect.subject.to_string(),
            "op": op,
            "want": want,
        });
        let mut a = match self
            .eval_routed::<Answer, _>(script::PREPARE_CLICK, &arg, false, deadline)
            .await
        {
            Ok((a, _)) => a,
            Err(e) => {
                return Err(ActionOutcome::Failed(format!(
                    "{e}; nothing was dispatched"
                )))
            }
        };
        let Some(before) = a.before.take() else {
            self.before(Some(expect), deadline).await?;
            return self.point(target, deadline).await;
        };
        judge_before(expect, Ok(*before))?;
        if a.x.is_none() && a.refusal().is_none() && a.fail.is_none() && a.absent.is_none() {
            // The page saw the expectation hold and stopped there; the executor did not.
            return self.point(target, deadline).await;
        }
        let (a, _) = self.judge_prepared(a, None, deadline).await?;
        click_point(a, target)
    }
}

/// The expectation's read before an action judged (SPEC §14): refused when it already holds
/// or names no one element, a definite failure when the page refused the read.
fn judge_before(expect: &Expect, read: Result<Answer, EvalError>) -> Result<(), ActionOutcome> {
    match read {
        Ok(a) if a.not_sent.is_some() => match a.refusal() {
            Some((NotSent::NoMatch, _)) | None => Ok(()),
            Some((cause, why)) => Err(ActionOutcome::NotSent(
                cause,
                format!("the expectation's {why}; nothing was sent"),
            )),
        },
        Ok(Answer {
            fail: Some(why), ..
        }) => Err(ActionOutcome::Failed(format!(
            "expect: {why}; nothing was dispatched"
        ))),
        Ok(Answer { value: Some(v), .. }) if expect.holds(&v) => {
            Err(expectation_already_holds(expect, &v))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(ActionOutcome::Failed(format!(
            "{e}; nothing was dispatched"
        ))),
    }
}

/// The point of a prepared click's answer.
fn click_point(a: Answer, target: &Target) -> Result<(f64, f64), ActionOutcome> {
    match a {
        Answer {
            x: Some(x),
            y: Some(y),
            ..
        } => Ok((x, y)),
        _ => Err(ActionOutcome::Failed(format!(
            "{target} has no point to click; nothing was dispatched"
        ))),
    }
}

/// The comparison an expectation's check makes, as the page's scripts take it.
fn op_want(check: &ExpectCheck) -> (&'static str, &str) {
    match check {
        ExpectCheck::Equals(w) => ("equals", w),
        ExpectCheck::Contains(w) => ("contains", w),
    }
}

impl Page {
    /// `page.fill`: focus, select the old content, type the new one (trusted input events),
    /// announce `change`, then check that the field holds the value.
    pub async fn fill(&self, target: &Target, value: &str, deadline: Instant) -> ActionOutcome {
        let mut arg = target_arg(target);
        arg["value"] = json!(value);
        let prepared = match self
            .prepare(script::PREPARE_FILL, arg.clone(), deadline)
            .await
        {
            Ok(a) => a,
            Err(refused) => return refused,
        };
        let mode = prepared.mode.unwrap_or_default();
        self.network.begin();
        let typed = match mode.as_str() {
            "set" => self
                .eval::<Answer, _>(script::SET_VALUE, &arg, false, deadline)
                .await
                .map(|a| a.value),
            _ => {
                let sent = if value.is_empty() {
                    // Deleting the selection, as a user clearing a field would.
                    let backspace = key_def("Backspace", false).expect("a named key");
                    self.key(Modifiers::default(), &backspace, deadline).await
                } else {
                    self.send(
                        &methods::InsertText {
                            text: value.to_owned(),
                        },
                        deadline,
                    )
                    .await
                };
                match sent {
                    Ok(()) => self
                        .eval::<Answer, _>(
                            script::FINISH_FILL,
                            &target_arg(target),
                            false,
                            deadline,
                        )
                        .await
                        .map(|a| a.value),
                    Err(e) => Err(e),
                }
            }
        };
        if let Ok(Some(v)) = &typed {
            if v == value {
                return ActionOutcome::Applied(Observation {
                    target: target.to_string(),
                    value: v.clone(),
                });
            }
        }
        let expect = Expect::on(target.clone(), ExpectCheck::Equals(value.to_owned()));
        self.watch(&expect, deadline, "the fill").await
    }

    /// `page.click`: scroll into view, then a real mouse move, press and release at the
    /// element's centre; then watch the step's expectation (and, for a local step, for a
    /// navigation).
    pub async fn click(
        &self,
        target: &Target,
        step: Step<'_>,
        deadline: Instant,
        mutations: &AtomicU64,
    ) -> ActionOutcome {
        let at = match self.checked_point(target, step.expect, deadline).await {
            Ok(at) => at,
            Err(refused) => return refused,
        };
        let _asked = self.dialogs.asked(step.dialog);
        let marks = self.marks();
        mutations.fetch_add(1, Ordering::SeqCst);
        self.mouse_click(at, target, deadline).await;
        self.after_dispatch(step, marks, deadline, "the click")
            .await
    }

    /// The viewport point a click on `target` hits, after the checks before dispatch.
    async fn point(&self, target: &Target, deadline: Instant) -> Result<(f64, f64), ActionOutcome> {
        let a = self
            .prepare(script::PREPARE_CLICK, target_arg(target), deadline)
            .await?;
        click_point(a, target)
    }

    /// A real mouse move, press and release at `at`. Errors are only logged: the click may
    /// have been delivered, and from here on only the page can tell.
    async fn mouse_click(&self, at: (f64, f64), target: &Target, deadline: Instant) {
        let event = |kind, button, buttons, click_count| methods::MouseEvent {
            kind,
            x: at.0,
            y: at.1,
            button,
            buttons,
            click_count,
        };
        // The move is sent without waiting for its answer: the browser holds a lone move until
        // its next frame (7–12 ms here), and the press right behind it on the pipe makes it
        // deliver both at once, in order (mouseover, mousemove, mousedown).
        // The release follows on the pipe without waiting for the press's answer either: the
        // browser delivers input events of a page in the order they were sent.
        let (moved, pressed, released) = futures::future::join3(
            self.send(&event("mouseMoved", "none", 0, 0), deadline),
            self.send(&event("mousePressed", "left", 1, 1), deadline),
            self.send(&event("mouseReleased", "left", 0, 1), deadline),
        )
        .await;
        if let Err(e) = moved.and(pressed).and(released) {
            // The click may have been delivered: from here on only the page can tell.
            tracing::debug!(target = %target, error = %e, "a mouse event got no answer");
        }
    }

    /// `page.press`: focus `target` if given, then the key or chord as Playwright presses it
    /// (each modifier down, the key down and up, the modifiers up in reverse), then watch the
    /// step's expectation (and, for a local step, for a navigation).
    pub async fn press(
        &self,
        key: &str,
        target: Option<&Target>,
        step: Step<'_>,
        deadline: Instant,
        mutations: &AtomicU64,
    ) -> ActionOutcome {
        let chord = match KeyChord::parse(key) {
            Ok(c) => c,
            Err(why) => return ActionOutcome::Failed(format!("{why}; nothing was dispatched")),
        };
        let Some(def) = key_def(chord.key, chord.modifiers.contains(Modifiers::SHIFT)) else {
            return ActionOutcome::Failed(format!(
                "the key {:?} is not one the executor can press (it knows {}); nothing was dispatched",
                chord.key,
                known_keys()
            ));
        };
        if let Err(refused) = self.before(step.expect, deadline).await {
            return refused;
        }
        if let Some(t) = target {
            if let Err(refused) = self
                .prepare(script::PREPARE_KEY, target_arg(t), deadline)
                .await
            {
                return refused;
            }
        }
        let _asked = self.dialogs.asked(step.dialog);
        let marks = self.marks();
        mutations.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.key(chord.modifiers, &def, deadline).await {
            tracing::debug!(key, error = %e, "a key event got no answer");
        }
        self.after_dispatch(step, marks, deadline, "the key press")
            .await
    }

    /// Presses `def` with `modifiers` held, as Playwright does: each modifier key down (its
    /// own bit included in the mask), the key down and up, then the modifiers up in reverse.
    /// With Control, Alt or Meta held the key types no text (it is a shortcut). The modifiers
    /// are released even after a failure.
    async fn key(
        &self,
        modifiers: Modifiers,
        def: &KeyDef,
        deadline: Instant,
    ) -> Result<(), EvalError> {
        let event =
            |kind: &'static str, def: &KeyDef, text: Option<String>, held: u8| methods::KeyEvent {
                kind,
                key: def.key.clone(),
                code: def.code.clone(),
                windows_virtual_key_code: def.key_code,
                native_virtual_key_code: def.key_code,
                unmodified_text: text.clone(),
                text,
                modifiers: held,
                location: def.location,
            };
        let held_keys: Vec<(u8, KeyDef)> = [
            (Modifiers::ALT, "Alt"),
            (Modifiers::CONTROL, "Control"),
            (Modifiers::META, "Meta"),
            (Modifiers::SHIFT, "Shift"),
        ]
        .into_iter()
        .filter(|(m, _)| modifiers.contains(*m))
        .map(|(m, name)| (m.bits(), key_def(name, false).expect("a named key")))
        .collect();
        let mut held = 0u8;
        let mut sent = Ok(());
        for (bit, m) in &held_keys {
            held |= bit;
            sent = self
                .send(&event("rawKeyDown", m, None, held), deadline)
                .await;
            if sent.is_err() {
                break;
            }
        }
        if sent.is_ok() {
            let shortcut =
                Modifiers::ALT.bits() | Modifiers::CONTROL.bits() | Modifiers::META.bits();
            let text = def.text.clone().filter(|_| held & shortcut == 0);
            let down = match text {
                Some(t) => event("keyDown", def, Some(t), held),
                None => event("rawKeyDown", def, None, held),
            };
            sent = self.send(&down, deadline).await;
            if sent.is_ok() {
                sent = self.send(&event("keyUp", def, None, held), deadline).await;
            }
        }
        for (bit, m) in held_keys.iter().rev() {
            held &= !bit;
            let up = self.send(&event("keyUp", m, None, held), deadline).await;
            sent = sent.and(up);
        }
        sent
    }

    /// After a click or a key press was dispatched: its expectation watched until the deadline
    /// (a local step without one has nothing to watch), then, for a local step, a short watch
    /// for what it said it would not do.
    async fn after_dispatch(
        &self,
        step: Step<'_>,
        marks: Marks,
        deadline: Instant,
        what: &str,
    ) -> ActionOutcome {
        let dispatched = Instant::now();
        let outcome = match step.expect {
            Some(expect) => self.watch(expect, deadline, what).await,
            None => ActionOutcome::LocalDone,
        };
        if !step.local || matches!(outcome, ActionOutcome::Uncertain(_)) {
            return outcome;
        }
        match self
            .local_step_did_more(marks, dispatched, deadline, what)
            .await
        {
            Some(why) => ActionOutcome::Uncertain(why),
            None => outcome,
        }
    }

    /// Whether a step sent as local did something beyond the page, watched until
    /// [`LOCAL_SETTLE`] after its dispatch was answered (or the deadline): `Some(why)` when the
    /// page navigated to another document (or started to), or went away.
    async fn local_step_did_more(
        &self,
        marks: Marks,
        dispatched: Instant,
        deadline: Instant,
        what: &str,
    ) -> Option<String> {
        let until = deadline.min(dispatched + LOCAL_SETTLE);
        let mut rx = self.signals.clone();
        let _ = timeout_at(
            until,
            rx.wait_for(|p| p.gone.is_some() || marks.navigated(p)),
        )
        .await;
        if let Some(g) = self.gone() {
            return Some(format!(
                "{what} was sent as local, then {g}; whether it did anything beyond the page is unknown"
            ));
        }
        if marks.navigated(&self.signals.borrow()) {
            return Some(format!(
                "{what} was sent as local (committing nothing), but the page navigated after it (a form submit, a link or a script), so it may have sent something to the server; whether it had an effect is unknown"
            ));
        }
        // SPEC §16: a request other than GET, HEAD or OPTIONS sent since the dispatch makes
        // a local step uncertain too (the evidence with the reply names it).
        self.network.first_sent().map(|sent| {
            format!(
                "{what} was sent as local (committing nothing), but the page sent {sent} after it, so it may have changed something on the server; whether it had an effect is unknown"
            )
        })
    }

    /// `page.read`: the value of a form field, else the element's text.
    pub async fn read(&self, subject: &Subject, deadline: Instant) -> ReadOutcome {
        match self
            .eval::<Answer, _>(script::READ, &subject_arg(subject), false, deadline)
            .await
        {
            Ok(a) if a.not_sent.is_some() => match a.refusal() {
                Some((NotSent::NoMatch, why)) => ReadOutcome::Absent(why),
                Some((_, why)) => ReadOutcome::Failed(why),
                None => ReadOutcome::Failed("the page gave no value".into()),
            },
            Ok(Answer { value: Some(v), .. }) => ReadOutcome::Value(v),
            Ok(Answer {
                absent: Some(why), ..
            }) => ReadOutcome::Absent(why),
            Ok(Answer {
                fail: Some(why), ..
            }) => ReadOutcome::Failed(why),
            Ok(_) => ReadOutcome::Failed("the page gave no value".into()),
            Err(EvalError::Deadline) => ReadOutcome::TimedOut,
            Err(e) => ReadOutcome::Failed(match self.gone() {
                Some(g) => g,
                None => e.to_string(),
            }),
        }
    }

    /// Watches `expect` after something was dispatched, until it holds or the deadline passes.
    /// Every document the page commits meanwhile (a form submit's response, its redirect) is
    /// watched in turn. The expectation did not hold before the dispatch (a click or a key press
    /// is refused otherwise, [`Page::before`]), so holding now shows the effect.
    async fn watch(&self, expect: &Expect, deadline: Instant, what: &str) -> ActionOutcome {
        let (op, want) = op_want(&expect.check);
        let mut last: Option<String> = None;
        loop {
            if let Some(g) = self.gone() {
                return ActionOutcome::Uncertain(format!(
                    "{what} was dispatched, then {g}; whether it took effect is unknown"
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let mut changes = self.signals.clone();
            changes.borrow_and_update();
            let ms = (deadline - now)
                .saturating_sub(Duration::from_millis(40))
                .as_millis() as u64;
            let mut arg = subject_arg(&expect.subject);
            arg["op"] = json!(op);
            arg["want"] = json!(want);
            arg["ms"] = json!(ms);
            match self
                .eval::<Answer, _>(script::WATCH, &arg, true, deadline)
                .await
            {
                Ok(a) => {
                    if let Some(v) = a.value {
                        if a.holds == Some(true) && expect.holds(&v) {
                            return ActionOutcome::Applied(Observation {
                                target: expect.subject.to_string(),
                                value: v,
                            });
                        }
                        last = Some(format!("{v:?}"));
                    } else if let Some(why) = a.absent.or(a.fail).or(a.why) {
                        last = Some(why);
                    }
                    if Instant::now() + Duration::from_millis(20) < deadline {
                        // Resolved early without holding: wait for the page to change.
                        let _ = timeout_at(
                            deadline.min(Instant::now() + Duration::from_millis(25)),
                            changes.changed(),
                        )
                        .await;
                    }
                }
                Err(EvalError::Deadline) => break,
                Err(EvalError::Cdp(CdpError::Closed(_))) => continue,
                Err(e) => {
                    // The document went away under the watch (a navigation): watch the next one.
                    // The next document's context may not exist yet: try again soon.
                    if !matches!(&e, EvalError::Cdp(c) if c.is_context_gone()) {
                        tracing::debug!(error = %e, "watching the expectation");
                    }
                    let _ = timeout_at(
                        deadline.min(Instant::now() + Duration::from_millis(3)),
                        changes.changed(),
                    )
                    .await;
                }
            }
        }
        if let Some(g) = self.gone() {
            return ActionOutcome::Uncertain(format!(
                "{what} was dispatched, then {g}; whether it took effect is unknown"
            ));
        }
        if let Some(failed) = self.signals.borrow().error_page.clone() {
            return ActionOutcome::Uncertain(format!(
                "{} did not show the expected value before the deadline: the page shows the browser's error page for {failed} (the request may have reached the server; its answer did not arrive)",
                expect.subject
            ));
        }
        let seen = match &last {
            Some(l) => format!("last seen {l}"),
            None => "the page could not be read".to_owned(),
        };
        ActionOutcome::Uncertain(format!(
            "{} did not show the expected value before the deadline ({seen})",
            expect.subject
        ))
    }
}

/// The SPEC §15 vocabulary: the actions beyond fill, click and press, and the page queries.
impl Page {
    /// Waits for a navigation dispatched after `marks` to arrive: a new document that fired
    /// `load` (or committed, by the deadline), or a move within the document. `Err` when none
    /// arrived or it failed: `Some(url)` when the browser shows its error page for `url`.
    async fn arrival(
        &self,
        marks: Marks,
        before_url: &str,
        deadline: Instant,
    ) -> Result<(), Option<String>> {
        let mut rx = self.signals.clone();
        let arrived = timeout_at(deadline, async {
            rx.wait_for(|p| {
                p.gone.is_some()
                    || (p.navigations > marks.navigations && p.loaded)
                    || (p.navigations == marks.navigations && p.url != before_url)
            })
            .await
            .is_ok()
        })
        .await;
        if self.gone().is_some() {
            return Err(None);
        }
        let (navigations, error_page) = {
            let p = self.signals.borrow();
            (p.navigations, p.error_page.clone())
        };
        if arrived.is_err() && navigations == marks.navigations {
            return Err(None);
        }
        match error_page {
            Some(failed) => Err(Some(failed)),
            None => Ok(()),
        }
    }

    /// After a page-local action did its work: watched for [`LOCAL_SETTLE`] for what it must
    /// not do (navigate the page), as a local click or key press is.
    async fn settle_local(
        &self,
        marks: Marks,
        outcome: ActionOutcome,
        deadline: Instant,
        what: &str,
    ) -> ActionOutcome {
        if matches!(outcome, ActionOutcome::Uncertain(_)) {
            return outcome;
        }
        match self
            .local_step_did_more(marks, Instant::now(), deadline, what)
            .await
        {
            Some(why) => ActionOutcome::Uncertain(why),
            None => outcome,
        }
    }

    /// `page.select`: the options named by label or value are selected (all of them for a
    /// multiple select), `input` and `change` fire, and the selected values are read back.
    pub async fn select(&self, target: &Target, by: &SelectBy, deadline: Instant) -> ActionOutcome {
        let (by_what, values) = match by {
            SelectBy::Label(v) => ("label", v),
            SelectBy::Value(v) => ("value", v),
        };
        let mut arg = target_arg(target);
        arg["by"] = json!(by_what);
        arg["values"] = json!(values);
        let marks = self.marks();
        let answer = match self
            .eval::<Answer, _>(script::SELECT, &arg, false, deadline)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                return ActionOutcome::Uncertain(format!(
                    "the select was sent to the page, then {e}; whether it took effect is unknown"
                ))
            }
        };
        if let Some((cause, why)) = answer.refusal() {
            return ActionOutcome::NotSent(cause, format!("{why}; nothing was sent"));
        }
        if let Some(why) = answer.fail.or(answer.absent) {
            return ActionOutcome::Failed(format!("{why}; nothing was changed"));
        }
        let value = answer.value.unwrap_or_default();
        let outcome = match by {
            SelectBy::Value(v) if value != v.join(",") => {
                let expect = Expect::on(target.clone(), ExpectCheck::Equals(v.join(",")));
                self.watch(&expect, deadline, "the select").await
            }
            _ => ActionOutcome::Applied(Observation {
                target: target.to_string(),
                value,
            }),
        };
        self.settle_local(marks, outcome, deadline, "the select")
            .await
    }

    /// `page.check`: a real click on the checkbox or radio (its label's, when the box itself is
    /// styled away) if its state differs from `checked`, then its state is confirmed.
    pub async fn check(
        &self,
        target: &Target,
        checked: bool,
        deadline: Instant,
        mutations: &AtomicU64,
    ) -> ActionOutcome {
        let mut arg = target_arg(target);
        arg["checked"] = json!(checked);
        let prepared = match self.prepare(script::PREPARE_CHECK, arg, deadline).await {
            Ok(a) => a,
            Err(refused) => return refused,
        };
        if prepared.already == Some(true) {
            return ActionOutcome::Applied(Observation {
                target: target.to_string(),
                value: prepared.value.unwrap_or_else(|| checked.to_string()),
            });
        }
        let (Some(x), Some(y)) = (prepared.x, prepared.y) else {
            return ActionOutcome::Failed(format!(
                "{target} has no point to click; nothing was dispatched"
            ));
        };
        let marks = self.marks();
        mutations.fetch_add(1, Ordering::SeqCst);
        self.mouse_click((x, y), target, deadline).await;
        let expect = Expect::on(target.clone(), ExpectCheck::Equals(checked.to_string()));
        let outcome = self.watch(&expect, deadline, "the check").await;
        self.settle_local(marks, outcome, deadline, "the check")
            .await
    }

    /// `page.hover`: the pointer moves to the target's centre (a real mouse move).
    pub async fn hover(&self, target: &Target, deadline: Instant) -> ActionOutcome {
        let at = match self.point(target, deadline).await {
            Ok(at) => at,
            Err(refused) => return refused,
        };
        let moved = methods::MouseEvent {
            kind: "mouseMoved",
            x: at.0,
            y: at.1,
            button: "none",
            buttons: 0,
            click_count: 0,
        };
        match self.send(&moved, deadline).await {
            Ok(()) => ActionOutcome::LocalDone,
            Err(e) => ActionOutcome::Uncertain(format!(
                "the pointer move was sent, then {e}; whether the page saw it is unknown"
            )),
        }
    }

    /// `page.upload`: puts `files` (absolute paths inside the host's upload directory, checked
    /// before anything was stored) into a file input, as choosing them would (the browser fires
    /// `input` and `change`), and reads back the names the input holds.
    pub async fn upload(
        &self,
        target: &Target,
        files: &[PathBuf],
        deadline: Instant,
    ) -> ActionOutcome {
        let mut paths = Vec::with_capacity(files.len());
        for f in files {
            match f.to_str() {
                Some(p) => paths.push(p.to_owned()),
                None => {
                    return ActionOutcome::Failed(format!(
                        "{} is not a UTF-8 path; nothing was dispatched",
                        f.display()
                    ))
                }
            }
        }
        let mut arg = target_arg(target);
        arg["multiple"] = json!(files.len() > 1);
        if let Err(refused) = self.prepare(script::PREPARE_UPLOAD, arg, deadline).await {
            return refused;
        }
        let mut element_arg = target_arg(target);
        let far = match self.route(&mut element_arg, deadline).await {
            Ok(f) => f,
            Err(e) => return ActionOutcome::Failed(format!("{e}; nothing was dispatched")),
        };
        let handle = match self
            .call_script(
                script::ELEMENT,
                &element_arg,
                false,
                false,
                far.as_ref().map(|f| f.frame_id.as_str()),
                deadline,
            )
            .await
        {
            Ok(o) if o.subtype.as_deref() == Some("node") && o.object_id.is_some() => {
                o.object_id.unwrap_or_default()
            }
            Ok(_) => {
                return ActionOutcome::Failed(format!(
                    "{target} left the page before the files were put in; nothing was dispatched"
                ))
            }
            Err(e) => return ActionOutcome::Failed(format!("{e}; nothing was dispatched")),
        };
        let marks = self.marks();
        let set = timeout_at(
            deadline,
            self.browser.cdp.call(
                Some(&self.session_id),
                &methods::SetFileInputFiles {
                    files: paths,
                    object_id: handle,
                },
            ),
        )
        .await;
        self.release_handles(deadline).await;
        match set {
            Err(_) => {
                return ActionOutcome::Uncertain(
                    "the files were sent to the page, which did not answer before the deadline"
                        .into(),
                )
            }
            Ok(Err(e @ CdpError::Protocol { .. })) => {
                return ActionOutcome::Failed(format!(
                    "the browser refused the files ({e}); nothing was dispatched"
                ))
            }
            Ok(Err(e)) => {
                return ActionOutcome::Uncertain(format!(
                    "the files were sent to the page, then {e}; whether the input holds them is unknown"
                ))
            }
            Ok(Ok(_)) => {}
        }
        let names: Vec<String> = files
            .iter()
            .map(|f| {
                f.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect();
        let expect = Expect::on(target.clone(), ExpectCheck::Equals(names.join(",")));
        let outcome = match self
            .eval::<Answer, _>(script::FILES, &target_arg(target), false, deadline)
            .await
        {
            Ok(Answer { value: Some(v), .. }) if v == names.join(",") => {
                ActionOutcome::Applied(Observation {
                    target: target.to_string(),
                    value: v,
                })
            }
            _ => self.watch_files(&expect, deadline).await,
        };
        self.settle_local(marks, outcome, deadline, "the upload")
            .await
    }

    /// Watches a file input until it holds the files (its value as [`script::FILES`] reads it).
    async fn watch_files(&self, expect: &Expect, deadline: Instant) -> ActionOutcome {
        let Subject::Target(target) = &expect.subject else {
            return ActionOutcome::Uncertain("no file input to read".into());
        };
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Ok(Answer { value: Some(v), .. }) = self
                .eval::<Answer, _>(script::FILES, &target_arg(target), false, deadline)
                .await
            {
                if expect.holds(&v) {
                    return ActionOutcome::Applied(Observation {
                        target: target.to_string(),
                        value: v,
                    });
                }
                last = v;
            }
            tokio::time::sleep(
                Duration::from_millis(25).min(deadline.saturating_duration_since(Instant::now())),
            )
            .await;
        }
        ActionOutcome::Uncertain(format!(
            "{target} did not show the files before the deadline (last seen {last:?})"
        ))
    }

    /// `page.type`: focuses the target with the caret at its end and types `text` key by key
    /// (real key events; characters no key types are inserted as an input method would), then
    /// watches `expect` if given, else reads the target back.
    pub async fn type_text(
        &self,
        target: &Target,
        text: &str,
        expect: Option<&Expect>,
        deadline: Instant,
        mutations: &AtomicU64,
    ) -> ActionOutcome {
        if let Err(refused) = self.before(expect, deadline).await {
            return refused;
        }
        let mut arg = target_arg(target);
        arg["caretAtEnd"] = json!(true);
        if let Err(refused) = self.prepare(script::PREPARE_KEY, arg, deadline).await {
            return refused;
        }
        let marks = self.marks();
        mutations.fetch_add(1, Ordering::SeqCst);
        let mut buf = [0u8; 4];
        for c in text.chars() {
            let named = match c {
                '\n' | '\r' => key_def("Enter", false),
                '\t' => key_def("Tab", false),
                c if c.is_control() => None,
                c => key_def(c.encode_utf8(&mut buf), false).filter(|d| !d.code.is_empty()),
            };
            let sent = match named {
                Some(def) => self.key(Modifiers::default(), &def, deadline).await,
                None if c.is_control() => Ok(()),
                None => {
                    self.send(
                        &methods::InsertText {
                            text: c.to_string(),
                        },
                        deadline,
                    )
                    .await
                }
            };
            if let Err(e) = sent {
                return ActionOutcome::Uncertain(format!(
                    "typing into {target} was under way, then {e}; how much of it the page took is unknown"
                ));
            }
        }
        let outcome = match expect {
            Some(e) => self.watch(e, deadline, "the typing").await,
            None => match self
                .eval::<Answer, _>(script::READ, &target_arg(target), false, deadline)
                .await
            {
                Ok(Answer { value: Some(v), .. }) => ActionOutcome::Applied(Observation {
                    target: target.to_string(),
                    value: v,
                }),
                _ => ActionOutcome::LocalDone,
            },
        };
        self.settle_local(marks, outcome, deadline, "the typing")
            .await
    }

    /// `page.navigate`: to a URL, or back, forward or reload through the tab's history. A
    /// history entry that is a POST's own answer (seen committing at the form's URL, reloads
    /// included), or that was reached by a form submit the executor did not see, is refused
    /// before anything is sent unless `allow_resubmit`: going there may send the form again.
    /// The page a POST redirected to (post/redirect/get) is a plain GET and goes. Waits for the
    /// new document's `load`; then `expect` if given, else the URL it ended on.
    pub async fn navigate_to(
        &self,
        to: &Navigation,
        allow_resubmit: bool,
        expect: Option<&Expect>,
        dialog: Option<&DialogAnswer>,
        deadline: Instant,
        mutations: &AtomicU64,
    ) -> ActionOutcome {
        if let Err(refused) = self.before(expect, deadline).await {
            return refused;
        }
        let route = match to {
            Navigation::Url(u) => Route::Url(u.clone()),
            other => match self.history_step(other, allow_resubmit, deadline).await {
                Ok(route) => route,
                Err(refused) => return refused,
            },
        };
        let _asked = self.dialogs.asked(dialog);
        let before_url = self.signals.borrow().url.clone();
        let marks = self.marks();
        mutations.fetch_add(1, Ordering::SeqCst);
        let sent = self.send_navigation(&route, deadline).await;
        if let Err(outcome) = navigation_answer(sent) {
            return outcome;
        }
        if let Err(outcome) = self
            .navigation_arrival(&route, marks, &before_url, deadline)
            .await
        {
            return outcome;
        }
        self.navigation_observed(expect, deadline).await
    }

    /// Back, forward or reload as the history entry it goes to, read from the tab's history;
    /// refused when there is none, or when going there may send a form again and the caller
    /// did not allow it.
    async fn history_step(
        &self,
        to: &Navigation,
        allow_resubmit: bool,
        deadline: Instant,
    ) -> Result<Route, ActionOutcome> {
        let s = Some(self.session_id.as_str());
        let history = match timeout_at(
            deadline,
            self.browser.cdp.call(s, &methods::GetNavigationHistory {}),
        )
        .await
        {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                return Err(ActionOutcome::Failed(format!(
                    "reading the tab's history failed ({e}); nothing was sent"
                )))
            }
            Err(_) => {
                return Err(ActionOutcome::Failed(
                    "the tab's history could not be read before the deadline; nothing was sent"
                        .into(),
                ))
            }
        };
        let (index, word) = match to {
            Navigation::Back => (history.current_index.checked_sub(1), "back"),
            Navigation::Forward => (history.current_index.checked_add(1), "forward"),
            _ => (Some(history.current_index), "reload"),
        };
        let entry = index
            .and_then(|i| history.entries.get(i))
            .filter(|e| !(word == "back" && e.url == "about:blank"));
        let Some(entry) = entry else {
            return Err(ActionOutcome::Failed(format!(
                "there is no page to go {word} to in this tab's history; nothing was sent"
            )));
        };
        let resends = {
            let p = self.signals.borrow();
            p.posted.contains(&entry.url)
                || (entry.transition_type == "form_submit" && !p.after_post.contains(&entry.url))
        };
        if resends && !allow_resubmit {
            let what = if word == "reload" {
                format!("reloading {}", entry.url)
            } else {
                format!("going {word} to {}", entry.url)
            };
            return Err(ActionOutcome::NotSent(
                NotSent::Resubmit,
                format!(
                    "{what} may send a form again: that page was reached by submitting one; nothing was sent. Navigate to a URL instead, or pass \"allowResubmit\": true to send the form again"
                ),
            ));
        }
        Ok(if word == "reload" {
            Route::Reload
        } else {
            Route::Entry(entry.id, resends.then(|| entry.url.clone()))
        })
    }

    /// Sends the navigation `route` says; its answer is the error text the browser gave, if any.
    async fn send_navigation(
        &self,
        route: &Route,
        deadline: Instant,
    ) -> Result<Result<Option<String>, CdpError>, Elapsed> {
        let s = Some(self.session_id.as_str());
        match route {
            Route::Url(url) => timeout_at(
                deadline,
                self.browser
                    .cdp
                    .call(s, &methods::Navigate { url: url.clone() }),
            )
            .await
            .map(|r| r.map(|n| n.error_text)),
            Route::Entry(id, _) => timeout_at(
                deadline,
                self.browser
                    .cdp
                    .call(s, &methods::NavigateToHistoryEntry { entry_id: *id }),
            )
            .await
            .map(|r| r.map(|_| None)),
            Route::Reload => timeout_at(
                deadline,
                self.browser.cdp.call(
                    s,
                    &methods::Reload {
                        ignore_cache: false,
                    },
                ),
            )
            .await
            .map(|r| r.map(|_| None)),
        }
    }

    /// Waits for the navigation's new page; `Err` with the outcome when none arrived and the
    /// form of a POST's answer is not to be sent again by [`Page::resend_form`].
    async fn navigation_arrival(
        &self,
        route: &Route,
        marks: Marks,
        before_url: &str,
        deadline: Instant,
    ) -> Result<(), ActionOutcome> {
        let Err(unseen) = self.arrival(marks, before_url, deadline).await else {
            return Ok(());
        };
        // Going back or forward to a POST's answer, the browser asks before sending the
        // form again and shows its error page instead; the caller allowed it, so it is
        // sent as a person would: by reloading that page.
        let again =
            matches!(route, Route::Entry(_, Some(url)) if unseen.as_deref() == Some(url.as_str()));
        if !again {
            return Err(ActionOutcome::Uncertain(match unseen {
                Some(failed) => format!(
                    "the navigation was sent, and the browser shows its error page for {failed}: the request may have reached the server; its answer did not arrive"
                ),
                None => self.gone().map_or_else(
                    || "the navigation was sent, and no new page arrived before the deadline".to_owned(),
                    |g| format!("the navigation was sent, then {g}; whether it took effect is unknown"),
                ),
            }));
        }
        self.resend_form(deadline).await
    }

    /// Sends a POST's answer's form again, by reloading the page it answered, and waits for
    /// the new page.
    async fn resend_form(&self, deadline: Instant) -> Result<(), ActionOutcome> {
        let s = Some(self.session_id.as_str());
        let marks = self.position();
        let before_url = self.signals.borrow().url.clone();
        let reload = timeout_at(
            deadline,
            self.browser.cdp.call(
                s,
                &methods::Reload {
                    ignore_cache: false,
                },
            ),
        )
        .await;
        if !matches!(reload, Ok(Ok(_))) {
            return Err(ActionOutcome::Uncertain(
                "the form was being sent again (a reload of the page it answered); the browser did not confirm it".into(),
            ));
        }
        if let Err(unseen) = self.arrival(marks, &before_url, deadline).await {
            return Err(ActionOutcome::Uncertain(format!(
                "the form was sent again, and {}",
                unseen.map_or_else(
                    || "no new page arrived before the deadline".to_owned(),
                    |f| format!("the browser shows its error page for {f}")
                )
            )));
        }
        Ok(())
    }

    /// What the navigation shows once its page arrived: `expect` if given, else the URL it
    /// ended on.
    async fn navigation_observed(
        &self,
        expect: Option<&Expect>,
        deadline: Instant,
    ) -> ActionOutcome {
        match expect {
            Some(e) => self.watch(e, deadline, "the navigation").await,
            None => {
                let url = match self
                    .eval::<Answer, _>(script::LOADED, &json!({}), false, deadline)
                    .await
                {
                    Ok(Answer { url: Some(u), .. }) => u,
                    _ => self.url(),
                };
                ActionOutcome::Applied(Observation {
                    target: Subject::Url.to_string(),
                    value: url,
                })
            }
        }
    }

    /// `page.snapshot`: the page's outline with refs numbered on from the task's last
    /// snapshot; the refs stay in the executor's world of this document.
    pub async fn snapshot(&self, deadline: Instant) -> QueryOutcome {
        let Ok(_one) = timeout_at(deadline, self.snapshotting.lock()).await else {
            return QueryOutcome::TimedOut;
        };
        let first = self.refs.load(Ordering::SeqCst).max(1);
        let navigations = self.signals.borrow().navigations;
        let text = match self
            .eval::<String, _>(
                script::SNAPSHOT,
                &json!({ "first": first }),
                false,
                deadline,
            )
            .await
        {
            Ok(t) => t,
            Err(EvalError::Deadline) => return QueryOutcome::TimedOut,
            Err(e) => return QueryOutcome::Failed(self.gone().unwrap_or_else(|| e.to_string())),
        };
        let Outline {
            url,
            title,
            nodes,
            refs,
            far_at,
        } = match serde_json::from_str::<Outline>(&text) {
            Ok(o) => o,
            Err(e) => {
                return QueryOutcome::Failed(format!("the page's outline was unreadable: {e}"))
            }
        };
        drop(text);
        let mut next = first + refs;
        let mut nodes = OutlineNode::numbered(nodes, first, 0);
        let mut ranges = Vec::new();
        // Frames of other origins, each read through its own world; spliced in from the last
        // so the earlier positions hold.
        let mut inside: Vec<(usize, Vec<SnapshotNode>)> = Vec::new();
        for (i, at) in far_at.iter().copied().enumerate().take(MAX_FAR_FRAMES) {
            let Some(owner) = nodes.get(at) else { break };
            let depth = owner.depth.saturating_add(1);
            let Ok(Some(frame_id)) = self.frame_id(Some(i), deadline).await else {
                continue;
            };
            let far = FarFrame {
                frame_id,
                owner: Some(i),
            };
            let read = self
                .call_script(
                    script::SNAPSHOT,
                    &json!({ "first": next }),
                    false,
                    true,
                    Some(&far.frame_id),
                    deadline,
                )
                .await
                .ok()
                .and_then(|v| serde_json::from_str::<Outline>(v.value.as_str()?).ok());
            let Some(inner) = read else { continue };
            let refs = inner.refs;
            ranges.push((next, refs, far));
            inside.push((at, OutlineNode::numbered(inner.nodes, next, depth)));
            next += refs;
        }
        for (at, inner) in inside.into_iter().rev() {
            if let Some(owner) = nodes.get_mut(at) {
                if let Some(d) = &mut owner.detail {
                    *d = d.replace(" (content out of reach)", "");
                }
            }
            nodes.splice(at + 1..at + 1, inner);
        }
        self.refs.store(next, Ordering::SeqCst);
        *self.far_refs.lock().expect("far refs lock") = FarRefs {
            navigations,
            ranges,
        };
        QueryOutcome::Snapshot { url, title, nodes }
    }

    /// `page.wait`: until the target is shown (or gone), or the page's text holds `text`,
    /// watched across navigations until `until`.
    pub async fn wait(
        &self,
        target: Option<&Target>,
        text: Option<&str>,
        state: WaitState,
        until: Instant,
    ) -> QueryOutcome {
        let mut arg = match target {
            Some(t) => target_arg(t),
            None => json!({"text": text.unwrap_or_default(), "label": "the page's text"}),
        };
        arg["visible"] = json!(state == WaitState::Visible);
        loop {
            if let Some(g) = self.gone() {
                return QueryOutcome::Failed(g);
            }
            let now = Instant::now();
            if now >= until {
                return QueryOutcome::TimedOut;
            }
            let mut changes = self.signals.clone();
            changes.borrow_and_update();
            let ms = (until - now)
                .saturating_sub(Duration::from_millis(40))
                .as_millis() as u64;
            arg["ms"] = json!(ms);
            match self
                .eval::<Answer, _>(script::WAIT, &arg, true, until)
                .await
            {
                Ok(a) => {
                    if a.done == Some(true) {
                        return QueryOutcome::Waited;
                    }
                    if let Some((cause, why)) = a.refusal() {
                        return QueryOutcome::Refused(cause, why);
                    }
                    if let Some(why) = a.fail {
                        return QueryOutcome::Failed(why);
                    }
                    let _ = timeout_at(
                        until.min(Instant::now() + Duration::from_millis(25)),
                        changes.changed(),
                    )
                    .await;
                }
                Err(EvalError::Deadline) => return QueryOutcome::TimedOut,
                Err(EvalError::Cdp(e)) if e.is_context_gone() => {
                    let _ = timeout_at(
                        until.min(Instant::now() + Duration::from_millis(10)),
                        changes.changed(),
                    )
                    .await;
                }
                Err(e) => {
                    return QueryOutcome::Failed(self.gone().unwrap_or_else(|| e.to_string()))
                }
            }
        }
    }

    /// `page.screenshot`: a PNG of the viewport, or of the target's box (scrolled into view),
    /// refused above 8 MiB.
    pub async fn screenshot(&self, target: Option<&Target>, deadline: Instant) -> QueryOutcome {
        let clip = match target {
            None => None,
            Some(t) => match self
                .eval_routed::<Answer, _>(script::RECT, &target_arg(t), false, deadline)
                .await
            {
                Ok((mut a, far)) => {
                    if let (Some(far), Some(x), Some(y)) = (&far, a.x, a.y) {
                        match self.far_offset(far, deadline).await {
                            Ok((ox, oy)) => {
                                a.x = Some(x + ox);
                                a.y = Some(y + oy);
                            }
                            Err(why) => return QueryOutcome::Failed(why),
                        }
                    }
                    if let Some((cause, why)) = a.refusal() {
                        return match cause {
                            NotSent::NoMatch => QueryOutcome::Failed(why),
                            cause => QueryOutcome::Refused(cause, why),
                        };
                    }
                    if let Some(why) = a.fail.or(a.absent) {
                        return QueryOutcome::Failed(why);
                    }
                    match (a.x, a.y, a.w, a.h) {
                        (Some(x), Some(y), Some(width), Some(height)) => Some(methods::Clip {
                            x,
                            y,
                            width,
                            height,
                            scale: 1.0,
                        }),
                        _ => return QueryOutcome::Failed(format!("{t} has no box to capture")),
                    }
                }
                Err(EvalError::Deadline) => return QueryOutcome::TimedOut,
                Err(e) => return QueryOutcome::Failed(e.to_string()),
            },
        };
        let shot = timeout_at(
            deadline,
            self.browser.cdp.call(
                Some(&self.session_id),
                &methods::CaptureScreenshot {
                    format: "png",
                    clip,
                },
            ),
        )
        .await;
        match shot {
            Err(_) => QueryOutcome::TimedOut,
            Ok(Err(e)) => QueryOutcome::Failed(format!("capturing the page failed: {e}")),
            Ok(Ok(s)) if s.data.len() > MAX_SCREENSHOT_BASE64 => QueryOutcome::Failed(format!(
                "the screenshot is {} bytes of PNG, above the 8 MiB limit; capture one element (target) instead",
                s.data.len() / 4 * 3
            )),
            Ok(Ok(s)) => QueryOutcome::Screenshot(s.data),
        }
    }

    /// The local storage of the document's origin, for `task.saveProfile`; `None` for an
    /// opaque origin (`file:`, `about:blank`), which keeps nothing a profile could give back.
    pub async fn local_storage(
        &self,
        deadline: Instant,
    ) -> Result<Option<super::profiles::OriginStorage>, String> {
        match self
            .eval::<super::profiles::OriginStorage, _>(
                script::LOCAL_STORAGE,
                &json!({}),
                false,
                deadline,
            )
            .await
        {
            Ok(o) if o.origin == "null" || o.origin.is_empty() => Ok(None),
            Ok(o) => Ok(Some(o)),
            Err(EvalError::Deadline) => {
                Err("reading the page's local storage did not finish before the deadline".into())
            }
            Err(e) => Err(format!(
                "reading the page's local storage failed: {}",
                self.gone().unwrap_or_else(|| e.to_string())
            )),
        }
    }

    /// `page.url`: the document's URL and title.
    pub async fn url_title(&self, deadline: Instant) -> QueryOutcome {
        match self
            .eval::<Answer, _>(script::LOADED, &json!({}), false, deadline)
            .await
        {
            Ok(a) => QueryOutcome::Url {
                url: a.url.unwrap_or_else(|| self.url()),
                title: a.title.unwrap_or_default(),
            },
            Err(EvalError::Deadline) => QueryOutcome::TimedOut,
            Err(e) => QueryOutcome::Failed(self.gone().unwrap_or_else(|| e.to_string())),
        }
    }
}

/// Which way `page.navigate` goes where it was asked, chosen before anything is sent.
enum Route {
    Url(String),
    /// A history entry, and its URL when it is a POST's answer the caller lets go again.
    Entry(i64, Option<String>),
    Reload,
}

/// The browser's answer to a navigation sent: `Err` with the outcome when it failed, refused
/// it or did not answer (the server unreached is told apart from a request that may have
/// reached it).
fn navigation_answer(
    sent: Result<Result<Option<String>, CdpError>, Elapsed>,
) -> Result<(), ActionOutcome> {
    match sent {
        Err(_) => Err(ActionOutcome::Uncertain(
            "the navigation was sent; the browser did not answer before the deadline".into(),
        )),
        Ok(Err(e @ CdpError::Protocol { .. })) => Err(ActionOutcome::Failed(format!(
            "the browser refused the navigation ({e}); nothing was sent"
        ))),
        Ok(Err(e)) => Err(ActionOutcome::Uncertain(format!(
            "the navigation was sent, then {e}; whether it reached the server is unknown"
        ))),
        Ok(Ok(Some(error))) => {
            let unreached = [
                "ERR_CONNECTION_REFUSED",
                "ERR_NAME_NOT_RESOLVED",
                "ERR_ADDRESS_UNREACHABLE",
                "ERR_INVALID_URL",
                "ERR_BLOCKED",
                "ERR_UNSAFE_PORT",
            ];
            if unreached.iter().any(|u| error.contains(u)) {
                return Err(ActionOutcome::Failed(format!(
                    "the page did not load: {error} (the server was not reached)"
                )));
            }
            Err(ActionOutcome::Uncertain(format!(
                "the navigation was sent and failed with {error}; whether the server received it is unknown"
            )))
        }
        Ok(Ok(None)) => Ok(()),
    }
}

/// What the page's scripts take as `sel`: a target as it travels (a CSS string, or a ref or
/// locator object), or `{"page": "url"|"text"}` for the page itself.
fn sel(subject: &Subject) -> serde_json::Value {
    match subject {
        Subject::Target(t) => json!(t),
        Subject::Url => json!({"page": "url"}),
        Subject::Text => json!({"page": "text"}),
    }
}

/// A script's argument for `subject`: its `sel`, and its `label` for messages.
fn subject_arg(subject: &Subject) -> serde_json::Value {
    json!({"sel": sel(subject), "label": subject.to_string()})
}

/// A script's argument for `target`: its `sel`, and its `label` for messages.
fn target_arg(target: &Target) -> serde_json::Value {
    json!({"sel": target, "label": target.to_string()})
}

async fn close_target(browser: &Browser, target: &str) {
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        browser.cdp.call(
            None,
            &methods::CloseTarget {
                target_id: target.to_owned(),
            },
        ),
    )
    .await;
}

/// Commands that may be sent to a page as input.
mod methods_ext {
    use super::methods;

    /// A command whose answer is ignored.
    pub trait Input: super::super::cdp::Method {}
    impl Input for methods::MouseEvent {}
    impl Input for methods::KeyEvent {}
    impl Input for methods::InsertText {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let enter = key_def("Enter", false).unwrap();
        assert_eq!((enter.key_code, enter.text.as_deref()), (13, Some("\r")));
        let a = key_def("a", false).unwrap();
        assert_eq!((a.code.as_str(), a.key_code), ("KeyA", 65));
        assert_eq!(key_def("Space", false).unwrap().key, " ");
        assert!(key_def("Control+a", false).is_none());
        assert!(key_def("", false).is_none());
        assert!(key_def("\n", false).is_none());
        assert!(key_def("Frobnicate", false).is_none());
        assert!(key_def("F13", false).is_none());
        assert_eq!(key_def("F5", false).unwrap().key_code, 116);
    }

    #[test]
    fn shift_types_what_the_us_layout_types() {
        let a = key_def("a", true).unwrap();
        assert_eq!(
            (a.key.as_str(), a.text.as_deref(), a.key_code),
            ("A", Some("A"), 65)
        );
        let one = key_def("1", true).unwrap();
        assert_eq!(
            (one.key.as_str(), one.code.as_str(), one.key_code),
            ("!", "Digit1", 49)
        );
        let bang = key_def("!", false).unwrap();
        assert_eq!((bang.code.as_str(), bang.key_code), ("Digit1", 49));
        let slash = key_def("/", true).unwrap();
        assert_eq!((slash.key.as_str(), slash.code.as_str()), ("?", "Slash"));
        let shift = key_def("Shift", false).unwrap();
        assert_eq!((shift.code.as_str(), shift.location), ("ShiftLeft", 1));
    }
}
