//! The fixture page as an agent sees it (SPEC §15): its elements with roles and names, the
//! outline `page.snapshot` gives, and how a ref, a role or a text finds one of them.
//!
//! The fixture has no DOM: its elements are a fixed form (title, body, category, urgent,
//! submit, status, submissions) plus any field a fill created. Refs are numbered on from the
//! last snapshot, so a ref of an older snapshot is never mistaken for a current one.

use crate::protocol::{Locator, SnapshotNode, Target};

use crate::protocol::NotSent;

/// The select of the fixture form, its options as (value, label).
pub const CATEGORY: &str = "#category";
/// The options of [`CATEGORY`].
pub const CATEGORY_OPTIONS: [(&str, &str); 3] =
    [("news", "News"), ("events", "Events"), ("notes", "Notes")];
/// The checkbox of the fixture form.
pub const URGENT: &str = "#urgent";

/// One element of the fixture page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    /// Its selector: what the rest of the fixture reads and writes by.
    pub css: String,
    /// Its ARIA role.
    pub role: &'static str,
    /// Its accessible name.
    pub name: String,
    /// Its value as the outline shows it.
    pub value: Option<String>,
    /// States that are on.
    pub states: Vec<String>,
}

/// The refs of a page's latest snapshot: `e{first}` … in element order.
#[derive(Debug, Default)]
pub struct Refs {
    /// The number of the first ref of the latest snapshot; 0 before any.
    pub first: u64,
    /// The selectors the refs stand for, in order.
    pub css: Vec<String>,
}

impl Refs {
    /// Numbers the elements of a new snapshot on from the last one and returns its outline.
    pub fn snapshot(&mut self, heading: &str, elements: &[Element]) -> Vec<SnapshotNode> {
        self.first = if self.first == 0 {
            1
        } else {
            self.first + self.css.len() as u64
        };
        self.css = elements.iter().map(|e| e.css.clone()).collect();
        let mut nodes = vec![SnapshotNode {
            depth: 0,
            role: "heading".into(),
            name: Some(heading.into()),
            detail: Some("level=1".into()),
            ..SnapshotNode::default()
        }];
        nodes.extend(elements.iter().enumerate().map(|(i, e)| SnapshotNode {
            depth: 1,
            role: e.role.into(),
            name: Some(e.name.clone()),
            ref_: Some(format!("e{}", self.first + i as u64)),
            value: e.value.clone(),
            states: e.states.clone(),
            detail: None,
        }));
        nodes
    }

    /// The selector `e{n}` stands for, if it is a ref of the latest snapshot.
    fn get(&self, r: &str) -> Option<&str> {
        let n: u64 = r.strip_prefix('e')?.parse().ok()?;
        let i = n.checked_sub(self.first)?;
        self.css.get(usize::try_from(i).ok()?).map(String::as_str)
    }
}

/// Finds the one element `target` names: its selector, or why nothing was sent.
pub fn resolve(
    target: &Target,
    elements: &[Element],
    refs: &Refs,
) -> Result<String, (NotSent, String)> {
    match target {
        Target::Css(css) => Ok(css.clone()),
        Target::Ref(r) => refs.get(r).map(str::to_owned).ok_or_else(|| {
            (
                NotSent::StaleRef,
                format!(
                    "ref {r} is not one of the page's latest snapshot; take a new page.snapshot and use its refs"
                ),
            )
        }),
        Target::Role(l) | Target::Text(l) => {
            if l.frame.is_some() {
                return Err((
                    NotSent::NoMatch,
                    format!("{target} names a frame, and the fixture page has none"),
                ));
            }
            let by_role = matches!(target, Target::Role(_));
            let found: Vec<&Element> = elements
                .iter()
                .filter(|e| {
                    if by_role {
                        e.role == l.what && l.name.as_deref().is_none_or(|n| matches(l, &e.name, n))
                    } else {
                        matches(l, &e.name, &l.what)
                    }
                })
                .collect();
            match found.as_slice() {
                [one] => Ok(one.css.clone()),
                [] => Err((
                    NotSent::NoMatch,
                    format!("{target} matches no element of the page; take a page.snapshot to see what is there"),
                )),
                many => {
                    let candidates: Vec<String> = many
                        .iter()
                        .map(|e| format!("{} {:?} ({})", e.role, e.name, e.css))
                        .collect();
                    Err((
                        NotSent::Ambiguous(candidates.clone()),
                        format!(
                            "{target} matches {} elements: {}; name one (a ref from page.snapshot, or a longer name with \"exact\": true)",
                            many.len(),
                            candidates.join(", ")
                        ),
                    ))
                }
            }
        }
    }
}

/// A locator's match on one name: a substring ignoring case, or the whole name with `exact`.
fn matches(l: &Locator, name: &str, want: &str) -> bool {
    if l.exact {
        name == want
    } else {
        name.to_lowercase().contains(&want.to_lowercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn el(css: &str, role: &'static str, name: &str) -> Element {
        Element {
            css: css.into(),
            role,
            name: name.into(),
            value: None,
            states: vec![],
        }
    }

    #[test]
    fn refs_of_an_older_snapshot_are_stale() {
        let els = [
            el("#title", "textbox", "Title"),
            el("#submit", "button", "Submit"),
        ];
        let mut refs = Refs::default();
        let first = refs.snapshot("Form", &els);
        assert_eq!(first[1].ref_.as_deref(), Some("e1"));
        assert_eq!(
            resolve(&Target::Ref("e2".into()), &els, &refs).unwrap(),
            "#submit"
        );
        let second = refs.snapshot("Form", &els);
        assert_eq!(second[1].ref_.as_deref(), Some("e3"));
        let (cause, why) = resolve(&Target::Ref("e2".into()), &els, &refs).unwrap_err();
        assert_eq!(cause, NotSent::StaleRef, "{why}");
        assert_eq!(
            resolve(&Target::Ref("e4".into()), &els, &refs).unwrap(),
            "#submit"
        );
    }

    #[test]
    fn locators_find_one_or_name_the_candidates() {
        let els = [
            el("#title", "textbox", "Title"),
            el("#subtitle", "textbox", "Subtitle"),
            el("#submit", "button", "Submit"),
        ];
        let refs = Refs::default();
        let role = |name: &str, exact| {
            Target::Role(Box::new(Locator {
                what: "textbox".into(),
                name: Some(name.into()),
                exact,
                frame: None,
            }))
        };
        let (cause, why) = resolve(&role("title", false), &els, &refs).unwrap_err();
        assert!(
            cause.candidates().len() == 2 && why.contains("#subtitle"),
            "{why}"
        );
        assert_eq!(
            resolve(&role("Title", true), &els, &refs).unwrap(),
            "#title"
        );
        let text = Target::Text(Box::new(Locator {
            what: "submit".into(),
            name: None,
            exact: false,
            frame: None,
        }));
        assert_eq!(resolve(&text, &els, &refs).unwrap(), "#submit");
        assert_eq!(
            resolve(&role("Nope", false), &els, &refs).unwrap_err().0,
            NotSent::NoMatch
        );
    }
}
