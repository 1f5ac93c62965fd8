//! Targets: what an action acts on or a read reads (SPEC §15) — a CSS selector, a `ref` from
//! the task's latest `page.snapshot`, or a locator by ARIA role and name or by visible text.
//!
//! A CSS selector travels as a plain string, as it always has; the other forms are objects.
//! Each is written back exactly as it is read, so a stored reply or a pending outcome shows the
//! target the caller sent.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::limits::SELECTOR;
use super::object::ObjectOnly;

/// The deepest chain of `frame` targets a locator may name (a frame in a frame in …).
pub const MAX_FRAME_DEPTH: usize = 4;

/// What an action acts on or a read reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A CSS selector, resolved in the page's main document.
    Css(String),
    /// A `ref` (`e12`) from the task's latest `page.snapshot`: valid until the page navigates
    /// or is snapshotted again.
    Ref(String),
    /// The element whose ARIA role is `role` and, when given, whose accessible name matches
    /// `name` (contains it, ignoring case; equals it with `exact`). Boxed, as the text form:
    /// rare, and a target sits in every command the hot path moves.
    Role(Box<Locator>),
    /// The element whose visible text matches `text` (contains it, ignoring case; equals it
    /// with `exact`).
    Text(Box<Locator>),
}

/// A locator's terms: by role (`what` is the role, `name` the accessible name) or by text
/// (`what` is the text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locator {
    /// The role, or the text.
    pub what: String,
    /// The accessible name a role locator asks for.
    pub name: Option<String>,
    /// Match the name or text exactly (case and all) instead of as a substring.
    pub exact: bool,
    /// The iframe to look inside, itself a target.
    pub frame: Option<Box<Target>>,
}

impl Target {
    /// The CSS selector, when the target is one.
    pub fn css(&self) -> Option<&str> {
        match self {
            Target::Css(s) => Some(s),
            _ => None,
        }
    }

    /// Checks the target's text sizes and shape, and every CSS selector in it with the
    /// executor's `check_css`; the refusal is for a `BAD_REQUEST` naming `field`.
    pub fn check(
        &self,
        field: &str,
        check_css: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<(), String> {
        self.check_depth(field, check_css, 0)
    }

    fn check_depth(
        &self,
        field: &str,
        check_css: &dyn Fn(&str) -> Result<(), String>,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_FRAME_DEPTH {
            return Err(format!(
                "`{field}` nests frames deeper than {MAX_FRAME_DEPTH}; name the frame nearest the element"
            ));
        }
        match self {
            Target::Css(css) => {
                SELECTOR.check(field, css)?;
                check_css(css).map_err(|e| format!("invalid {field}: {e}"))
            }
            Target::Ref(r) => {
                let digits = r.strip_prefix('e').unwrap_or("");
                if digits.is_empty()
                    || digits.len() > 9
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(format!(
                        "`{field}.ref` {r:?} is not a snapshot ref; refs look like \"e12\": take them from the latest page.snapshot"
                    ));
                }
                Ok(())
            }
            Target::Role(l) | Target::Text(l) => {
                let what = if matches!(self, Target::Role(_)) {
                    "role"
                } else {
                    "text"
                };
                if l.what.is_empty() {
                    return Err(format!("`{field}.{what}` is empty"));
                }
                SELECTOR.check(&format!("{field}.{what}"), &l.what)?;
                if matches!(self, Target::Role(_))
                    && !l.what.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
                {
                    return Err(format!(
                        "`{field}.role` {:?} is not an ARIA role; use one such as \"button\", \"link\", \"textbox\", \"checkbox\", \"combobox\"",
                        l.what
                    ));
                }
                if let Some(name) = &l.name {
                    SELECTOR.check(&format!("{field}.name"), name)?;
                }
                match &l.frame {
                    Some(frame) => {
                        frame.check_depth(&format!("{field}.frame"), check_css, depth + 1)
                    }
                    None => Ok(()),
                }
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Css(css) => f.write_str(css),
            Target::Ref(r) => write!(f, "ref {r}"),
            Target::Role(l) => {
                write!(f, "role={}", l.what)?;
                if let Some(name) = &l.name {
                    write!(f, " name={name:?}")?;
                }
                l.fmt_tail(f)
            }
            Target::Text(l) => {
                write!(f, "text={:?}", l.what)?;
                l.fmt_tail(f)
            }
        }
    }
}

impl Locator {
    fn fmt_tail(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exact {
            f.write_str(" exact")?;
        }
        if let Some(frame) = &self.frame {
            write!(f, " in frame ({frame})")?;
        }
        Ok(())
    }
}

impl From<&str> for Target {
    fn from(css: &str) -> Target {
        Target::Css(css.to_owned())
    }
}

impl From<String> for Target {
    fn from(css: String) -> Target {
        Target::Css(css)
    }
}

/// The object forms, as they travel.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    ref_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    exact: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    frame: Option<Box<Target>>,
}

impl Serialize for Target {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let locator = |l: &Locator, role: bool| Wire {
            ref_: None,
            role: role.then(|| l.what.clone()),
            name: l.name.clone(),
            text: (!role).then(|| l.what.clone()),
            exact: l.exact,
            frame: l.frame.clone(),
        };
        match self {
            Target::Css(css) => s.serialize_str(css),
            Target::Ref(r) => Wire {
                ref_: Some(r.clone()),
                role: None,
                name: None,
                text: None,
                exact: false,
                frame: None,
            }
            .serialize(s),
            Target::Role(l) => locator(l, true).serialize(s),
            Target::Text(l) => locator(l, false).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Css(String),
            Object(ObjectOnly<Wire>),
        }
        const SHAPES: &str = "a target is a CSS selector string, {\"ref\": \"e12\"} from page.snapshot, {\"role\": \"button\", \"name\": \"Publish\"} or {\"text\": \"Delete\"}";
        let either = Either::deserialize(d).map_err(|_| D::Error::custom(SHAPES))?;
        let w = match either {
            Either::Css(css) => return Ok(Target::Css(css)),
            Either::Object(ObjectOnly(w)) => w,
        };
        let locator = |what: String, w: Wire| Locator {
            what,
            name: w.name,
            exact: w.exact,
            frame: w.frame,
        };
        match (w.ref_.is_some(), w.role.is_some(), w.text.is_some()) {
            (true, false, false) if w.name.is_none() && !w.exact && w.frame.is_none() => {
                Ok(Target::Ref(w.ref_.unwrap_or_default()))
            }
            (false, true, false) => {
                let role = w.role.clone().unwrap_or_default();
                Ok(Target::Role(Box::new(locator(role, w))))
            }
            (false, false, true) if w.name.is_none() => {
                let text = w.text.clone().unwrap_or_default();
                Ok(Target::Text(Box::new(locator(text, w))))
            }
            _ => Err(D::Error::custom(format!(
                "{SHAPES}: exactly one of `ref`, `role` or `text` (`name` goes with `role`; a ref stands alone)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_form_reads_and_writes_back_as_sent() {
        for v in [
            json!("#title"),
            json!({"ref": "e12"}),
            json!({"role": "button", "name": "Publish"}),
            json!({"role": "button", "name": "Pay", "exact": true, "frame": {"ref": "e3"}}),
            json!({"text": "Delete"}),
            json!({"text": "Delete", "frame": "#card"}),
        ] {
            let t: Target = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(&t).unwrap(), v);
        }
        for bad in [
            json!({"ref": "e1", "role": "button"}),
            json!({"ref": "e1", "name": "x"}),
            json!({"text": "x", "name": "y"}),
            json!({}),
            json!({"css": "#a"}),
            json!(["#a"]),
            json!(3),
        ] {
            assert!(
                serde_json::from_value::<Target>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn checks_name_what_is_wrong() {
        let ok = |_: &str| Ok(());
        let t = |v| serde_json::from_value::<Target>(v).unwrap();
        assert!(t(json!({"ref": "e12"})).check("target", &ok).is_ok());
        let e = t(json!({"ref": "12"})).check("target", &ok).unwrap_err();
        assert!(e.contains("page.snapshot"), "{e}");
        let e = t(json!({"role": "Button"}))
            .check("target", &ok)
            .unwrap_err();
        assert!(e.contains("ARIA role"), "{e}");
        assert!(t(json!({"text": ""})).check("target", &ok).is_err());
        let refuse = |_: &str| Err("no".to_owned());
        let e = t(json!({"text": "a", "frame": "#f"}))
            .check("target", &refuse)
            .unwrap_err();
        assert!(e.contains("target.frame"), "{e}");
        let mut deep = json!("#f");
        for _ in 0..6 {
            deep = json!({"text": "a", "frame": deep});
        }
        assert!(t(deep).check("target", &ok).is_err());
        assert_eq!(
            t(json!({"role": "button", "name": "Pay", "frame": {"ref": "e3"}})).to_string(),
            "role=button name=\"Pay\" in frame (ref e3)"
        );
    }
}
