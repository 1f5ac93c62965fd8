//! One task's page: opening it, the four operations, and the watch for an action's effect.
//!
//! The line the executor never blurs: everything before the first input event is dispatched
//! (finding the element, checking it is visible and enabled, focusing it, scrolling it into
//! view) can fail definitively, because nothing was sent that could cause an effect. From the
//! first dispatched event on, nothing is a failure any more: the action's expectation is watched
//! until the deadline — across the navigations a form submit causes — and if it is not seen,
//! the outcome is uncertain.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::{timeout_at, Instant};

use super::browser::Browser;
use super::cdp::{methods, CdpError, PageSignals};
use super::script;
use crate::executor::{ActionOutcome, ReadOutcome};
use crate::protocol::{Expect, ExpectCheck};
use crate::tasks::Observation;

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
    mode: Option<String>,
    value: Option<String>,
    holds: Option<bool>,
    x: Option<f64>,
    y: Option<f64>,
    url: Option<String>,
    status: Option<u16>,
}

/// A key `page.press` can send: what `Input.dispatchKeyEvent` needs for it.
struct KeyDef {
    key: String,
    code: String,
    key_code: u32,
    text: Option<String>,
}

/// The keys with names; any single character is accepted as well.
const NAMED_KEYS: &[(&str, &str, u32, Option<&str>)] = &[
    ("Enter", "Enter", 13, Some("\r")),
    ("Tab", "Tab", 9, None),
    ("Escape", "Escape", 27, None),
    ("Backspace", "Backspace", 8, None),
    ("Delete", "Delete", 46, None),
    ("Space", "Space", 32, Some(" ")),
    ("ArrowUp", "ArrowUp", 38, None),
    ("ArrowDown", "ArrowDown", 40, None),
    ("ArrowLeft", "ArrowLeft", 37, None),
    ("ArrowRight", "ArrowRight", 39, None),
    ("Home", "Home", 36, None),
    ("End", "End", 35, None),
    ("PageUp", "PageUp", 33, None),
    ("PageDown", "PageDown", 34, None),
];

fn key_def(key: &str) -> Option<KeyDef> {
    if let Some((name, code, key_code, text)) = NAMED_KEYS.iter().find(|k| k.0 == key) {
        return Some(KeyDef {
            key: if *name == "Space" { " " } else { name }.to_owned(),
            code: (*code).to_owned(),
            key_code: *key_code,
            text: text.map(str::to_owned),
        });
    }
    let mut chars = key.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return None;
    };
    if c.is_control() {
        return None;
    }
    let (code, key_code) = if c.is_ascii_alphabetic() {
        (
            format!("Key{}", c.to_ascii_uppercase()),
            c.to_ascii_uppercase() as u32,
        )
    } else if c.is_ascii_digit() {
        (format!("Digit{c}"), c as u32)
    } else {
        (String::new(), 0)
    };
    Some(KeyDef {
        key: c.to_string(),
        code,
        key_code,
        text: Some(c.to_string()),
    })
}

/// The keys `page.press` knows, for error messages.
pub fn known_keys() -> String {
    let names: Vec<&str> = NAMED_KEYS.iter().map(|k| k.0).collect();
    format!("{} or a single character", names.join(", "))
}

/// An attached page of one task.
pub struct Page {
    /// The browser it lives in.
    pub browser: Arc<Browser>,
    /// Its page target (also its main frame).
    pub target_id: String,
    session_id: String,
    signals: watch::Receiver<PageSignals>,
}

impl Page {
    /// Opens a page in `context` at `url` and waits for its `load` event or the deadline. A
    /// navigation that fails, does not commit in time, or answers an HTTP error status is an
    /// error (and the page is closed again).
    pub async fn open(
        browser: Arc<Browser>,
        context: &str,
        url: &str,
        deadline: Instant,
    ) -> Result<Page, String> {
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
        let signals = cdp.track(&session_id, &target);
        let page = Page {
            browser,
            target_id: target,
            session_id,
            signals,
        };
        match page.navigate(url, deadline).await {
            Ok(()) => Ok(page),
            Err(e) => {
                page.close().await;
                Err(e)
            }
        }
    }

    async fn navigate(&self, url: &str, deadline: Instant) -> Result<(), String> {
        let cdp = &self.browser.cdp;
        let s = Some(self.session_id.as_str());
        let enabled = timeout_at(
            deadline,
            futures::future::try_join(
                cdp.call(s, &methods::PageEnable {}),
                cdp.call(s, &methods::InspectorEnable {}),
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

    /// Closes the page (best effort, bounded).
    pub async fn close(&self) {
        self.browser.cdp.untrack(&self.session_id);
        if self.browser.gone().is_none() {
            close_target(&self.browser, &self.target_id).await;
        }
    }

    async fn eval<T: DeserializeOwned, A: Serialize>(
        &self,
        function: &str,
        arg: &A,
        await_promise: bool,
        deadline: Instant,
    ) -> Result<T, EvalError> {
        let arg = serde_json::to_string(arg).map_err(|e| EvalError::Threw(e.to_string()))?;
        let params = methods::Evaluate {
            expression: format!("({function})({arg})"),
            return_by_value: true,
            await_promise,
        };
        let call = self.browser.cdp.call(Some(&self.session_id), &params);
        let answer = timeout_at(deadline, call)
            .await
            .map_err(|_| EvalError::Deadline)?
            .map_err(EvalError::Cdp)?;
        if let Some(x) = answer.exception_details {
            let what = x.exception.and_then(|e| e.description).unwrap_or(x.text);
            return Err(EvalError::Threw(what));
        }
        serde_json::from_value(answer.result.value).map_err(|e| EvalError::Threw(e.to_string()))
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

    /// The checks before dispatch: a definite failure when the page refuses them.
    async fn prepare(
        &self,
        function: &str,
        arg: serde_json::Value,
        deadline: Instant,
    ) -> Result<Answer, String> {
        match self
            .eval::<Answer, _>(function, &arg, false, deadline)
            .await
        {
            Ok(a) => match (a.fail.clone(), a.absent.clone()) {
                (Some(why), _) | (None, Some(why)) => Err(format!("{why}; nothing was dispatched")),
                _ => Ok(a),
            },
            Err(e) => Err(format!("{e}; nothing was dispatched")),
        }
    }

    /// Reads `expect`'s target before an action, so that a value that already held cannot be
    /// taken as the action's effect. A selector the page cannot parse fails the action here.
    async fn before(&self, expect: &Expect, deadline: Instant) -> Result<Option<String>, String> {
        match self
            .eval::<Answer, _>(
                script::READ,
                &json!({"sel": expect.target}),
                false,
                deadline,
            )
            .await
        {
            Ok(Answer {
                fail: Some(why), ..
            }) => Err(format!("expect: {why}; nothing was dispatched")),
            Ok(Answer { value: Some(v), .. }) if expect.holds(&v) => Ok(Some(v)),
            Ok(_) => Ok(None),
            Err(e) => Err(format!("{e}; nothing was dispatched")),
        }
    }

    /// `page.fill`: focus, select the old content, type the new one (trusted input events),
    /// announce `change`, then check that the field holds the value.
    pub async fn fill(&self, target: &str, value: &str, deadline: Instant) -> ActionOutcome {
        let arg = json!({"sel": target, "value": value});
        let prepared = match self
            .prepare(script::PREPARE_FILL, arg.clone(), deadline)
            .await
        {
            Ok(a) => a,
            Err(why) => return ActionOutcome::Failed(why),
        };
        let nav = self.signals.borrow().navigations;
        let mode = prepared.mode.unwrap_or_default();
        let typed = match mode.as_str() {
            "set" => self
                .eval::<Answer, _>(script::SET_VALUE, &arg, false, deadline)
                .await
                .map(|a| a.value),
            _ => {
                let sent = if value.is_empty() {
                    // Deleting the selection, as a user clearing a field would.
                    self.key(&key_def("Backspace").expect("a named key"), deadline)
                        .await
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
                            &json!({"sel": target}),
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
                    target: target.to_owned(),
                    value: v.clone(),
                });
            }
        }
        let expect = Expect {
            target: target.to_owned(),
            check: ExpectCheck::Equals(value.to_owned()),
        };
        self.watch(&expect, None, nav, deadline, "the fill").await
    }

    /// `page.click`: scroll into view, then a real mouse move, press and release at the
    /// element's centre; then watch `expect`.
    pub async fn click(
        &self,
        target: &str,
        expect: &Expect,
        deadline: Instant,
        mutations: &AtomicU64,
    ) -> ActionOutcome {
        let stale = match self.before(expect, deadline).await {
            Ok(s) => s,
            Err(why) => return ActionOutcome::Failed(why),
        };
        let at = match self
            .prepare(script::PREPARE_CLICK, json!({"sel": target}), deadline)
            .await
        {
            Ok(Answer {
                x: Some(x),
                y: Some(y),
                ..
            }) => (x, y),
            Ok(_) => {
                return ActionOutcome::Failed(format!(
                    "{target} has no point to click; nothing was dispatched"
                ))
            }
            Err(why) => return ActionOutcome::Failed(why),
        };
        let nav = self.signals.borrow().navigations;
        mutations.fetch_add(1, Ordering::SeqCst);
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
        let (moved, pressed) = futures::future::join(
            self.send(&event("mouseMoved", "none", 0, 0), deadline),
            self.send(&event("mousePressed", "left", 1, 1), deadline),
        )
        .await;
        let released = match pressed {
            Ok(()) => {
                self.send(&event("mouseReleased", "left", 0, 1), deadline)
                    .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = moved.and(released) {
            // The click may have been delivered: from here on only the page can tell.
            tracing::debug!(target, error = %e, "a mouse event got no answer");
        }
        self.watch(expect, stale, nav, deadline, "the click").await
    }

    /// `page.press`: focus `target` if given, then a real key down and up; then watch `expect`.
    pub async fn press(
        &self,
        key: &str,
        target: Option<&str>,
        expect: &Expect,
        deadline: Instant,
        mutations: &AtomicU64,
    ) -> ActionOutcome {
        let Some(def) = key_def(key) else {
            return ActionOutcome::Failed(format!(
                "the key {key:?} is not one the executor can press ({}); nothing was dispatched",
                known_keys()
            ));
        };
        let stale = match self.before(expect, deadline).await {
            Ok(s) => s,
            Err(why) => return ActionOutcome::Failed(why),
        };
        if let Some(t) = target {
            if let Err(why) = self
                .prepare(script::PREPARE_KEY, json!({"sel": t}), deadline)
                .await
            {
                return ActionOutcome::Failed(why);
            }
        }
        let nav = self.signals.borrow().navigations;
        mutations.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.key(&def, deadline).await {
            tracing::debug!(key, error = %e, "a key event got no answer");
        }
        self.watch(expect, stale, nav, deadline, "the key press")
            .await
    }

    async fn key(&self, def: &KeyDef, deadline: Instant) -> Result<(), EvalError> {
        let event = |kind: &'static str, text: Option<String>| methods::KeyEvent {
            kind,
            key: def.key.clone(),
            code: def.code.clone(),
            windows_virtual_key_code: def.key_code,
            native_virtual_key_code: def.key_code,
            unmodified_text: text.clone(),
            text,
        };
        let down = match &def.text {
            Some(t) => event("keyDown", Some(t.clone())),
            None => event("rawKeyDown", None),
        };
        self.send(&down, deadline).await?;
        self.send(&event("keyUp", None), deadline).await
    }

    /// `page.read`: the value of a form field, else the element's text.
    pub async fn read(&self, target: &str, deadline: Instant) -> ReadOutcome {
        match self
            .eval::<Answer, _>(script::READ, &json!({"sel": target}), false, deadline)
            .await
        {
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
    /// watched in turn. `stale` is a value that already held before the dispatch: on the same
    /// document it does not count.
    async fn watch(
        &self,
        expect: &Expect,
        stale: Option<String>,
        nav_at_dispatch: u64,
        deadline: Instant,
        what: &str,
    ) -> ActionOutcome {
        let (op, want) = match &expect.check {
            ExpectCheck::Equals(w) => ("equals", w),
            ExpectCheck::Contains(w) => ("contains", w),
        };
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
            let navigated = self.signals.borrow().navigations > nav_at_dispatch;
            let stale_now = if navigated { None } else { stale.as_deref() };
            let ms = (deadline - now)
                .saturating_sub(Duration::from_millis(40))
                .as_millis() as u64;
            let arg =
                json!({"sel": expect.target, "op": op, "want": want, "stale": stale_now, "ms": ms});
            match self
                .eval::<Answer, _>(script::WATCH, &arg, true, deadline)
                .await
            {
                Ok(a) => {
                    if let Some(v) = a.value {
                        if a.holds == Some(true) && expect.holds(&v) {
                            return ActionOutcome::Applied(Observation {
                                target: expect.target.clone(),
                                value: v,
                            });
                        }
                        last = Some(format!("{v:?}"));
                    } else if let Some(why) = a.absent.or(a.fail) {
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
                expect.target
            ));
        }
        let seen = match (&last, &stale) {
            (Some(l), Some(s)) if *l == format!("{s:?}") => format!(
                "last seen {l}, which already held before {what}, so it shows nothing about it"
            ),
            (Some(l), _) => format!("last seen {l}"),
            (None, _) => "the page could not be read".to_owned(),
        };
        ActionOutcome::Uncertain(format!(
            "{} did not show the expected value before the deadline ({seen})",
            expect.target
        ))
    }
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
        let enter = key_def("Enter").unwrap();
        assert_eq!((enter.key_code, enter.text.as_deref()), (13, Some("\r")));
        let a = key_def("a").unwrap();
        assert_eq!((a.code.as_str(), a.key_code), ("KeyA", 65));
        assert_eq!(key_def("Space").unwrap().key, " ");
        assert!(key_def("Control+a").is_none());
        assert!(key_def("").is_none());
        assert!(key_def("\n").is_none());
    }
}
