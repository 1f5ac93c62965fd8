//! `page.snapshot`'s outline (SPEC §15): the nodes an executor reads off a page, and the one
//! place they are written out — as indented YAML-like lines or as a flat JSON list — and cut
//! to the caller's `maxBytes`, saying what was cut.

use serde::{Deserialize, Serialize};

use super::params::SnapshotFormat;

/// One node of a page's outline: an element with a role, or a run of text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotNode {
    /// Nesting depth, 0 for the page's top level; a frame's or shadow root's nodes sit one
    /// deeper than the element that holds them.
    pub depth: u16,
    /// The ARIA role (`button`, `textbox`, `link`, `heading`, `iframe`, `text`, …).
    pub role: String,
    /// The accessible name, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The ref to act on it with (`e7`): interactive or named nodes only.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub ref_: Option<String>,
    /// Its current value (a field's text, a select's chosen labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// States that are on: `checked`, `selected`, `disabled`, `expanded`, `required`, …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    /// Extra facts an agent needs: a link's `url`, a heading's `level`, a frame's `origin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `page.snapshot`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotResult {
    /// The task.
    pub task_id: String,
    /// The page's URL when it was read.
    pub url: String,
    /// The page's title.
    pub title: String,
    /// `yaml` or `json`.
    pub format: SnapshotFormat,
    /// The outline as text (`yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The outline as nodes (`json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<SnapshotNode>>,
    /// How many nodes the page has and how many are shown.
    pub node_count: usize,
    /// How many of them are shown (all unless `truncated`).
    pub shown: usize,
    /// Whether the outline was cut at `maxBytes`.
    pub truncated: bool,
    /// What to do about a cut outline, or how long refs last.
    pub note: String,
}

impl SnapshotNode {
    /// The node as one outline line: `- button "Publish" [ref=e7] [disabled]`, indented two
    /// spaces per depth, with its value after a colon.
    pub fn line(&self) -> String {
        let mut out = String::new();
        self.write_line(&mut out);
        out
    }

    /// [`SnapshotNode::line`], appended to `out`.
    fn write_line(&self, out: &mut String) {
        for _ in 0..self.depth {
            out.push_str("  ");
        }
        out.push_str("- ");
        out.push_str(&self.role);
        if let Some(name) = &self.name {
            out.push(' ');
            out.push_str(&quoted(name));
        }
        if let Some(r) = &self.ref_ {
            out.push_str(" [ref=");
            out.push_str(r);
            out.push(']');
        }
        for s in &self.states {
            out.push_str(" [");
            out.push_str(s);
            out.push(']');
        }
        if let Some(d) = &self.detail {
            out.push_str(" [");
            out.push_str(d);
            out.push(']');
        }
        if let Some(v) = &self.value {
            out.push_str(": ");
            out.push_str(&quoted(v));
        }
    }
}

/// The bytes `s` takes inside a JSON string as serde_json writes it (`"` and `\` and the
/// short control escapes two each, other control characters six), so an outline line is
/// measured without being written a second time.
fn escaped_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// A string in double quotes with `"`, `\` and control characters escaped (JSON's rules,
/// which YAML reads too).
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// Writes `nodes` in `format`, keeping within `max_bytes`: whole nodes from the top, then a
/// note of how many were left out and how to see them.
pub fn render(
    task_id: &str,
    url: String,
    title: String,
    nodes: Vec<SnapshotNode>,
    format: SnapshotFormat,
    max_bytes: usize,
) -> SnapshotResult {
    let node_count = nodes.len();
    // Room for the envelope around the outline (ids, url, title, note).
    let budget = max_bytes.saturating_sub(256 + url.len() + title.len());
    let (snapshot, shown_nodes, shown) = match format {
        SnapshotFormat::Yaml => {
            let mut text = String::new();
            let (mut used, mut shown) = (2, 0);
            for n in &nodes {
                let start = text.len();
                n.write_line(&mut text);
                // What the line and its newline take inside the reply's JSON string.
                let size = escaped_len(&text[start..]) + 2;
                if used + size > budget {
                    text.truncate(start);
                    break;
                }
                used += size;
                text.push('\n');
                shown += 1;
            }
            (Some(text), None, shown)
        }
        SnapshotFormat::Json => {
            let mut used = 2;
            let mut kept = Vec::new();
            for n in nodes {
                let size = serde_json::to_string(&n).map_or(usize::MAX, |s| s.len() + 1);
                if used + size > budget {
                    break;
                }
                used += size;
                kept.push(n);
            }
            let shown = kept.len();
            (None, Some(kept), shown)
        }
    };
    let truncated = shown < node_count;
    let note = if truncated {
        format!(
            "cut at maxBytes: {shown} of {node_count} nodes shown. Ask again with a larger maxBytes (up to {}), or act on what is shown",
            super::params::SNAPSHOT_MAX_BYTES
        )
    } else {
        "refs are valid until the page navigates or is snapshotted again".to_owned()
    };
    SnapshotResult {
        task_id: task_id.to_owned(),
        url,
        title,
        format,
        snapshot,
        nodes: shown_nodes,
        node_count,
        shown,
        truncated,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(depth: u16, role: &str, name: Option<&str>, r: Option<&str>) -> SnapshotNode {
        SnapshotNode {
            depth,
            role: role.into(),
            name: name.map(Into::into),
            ref_: r.map(Into::into),
            ..SnapshotNode::default()
        }
    }

    #[test]
    fn lines_show_role_name_ref_states_and_value() {
        let mut n = node(1, "checkbox", Some("Urgent \"now\""), Some("e3"));
        n.states = vec!["checked".into()];
        n.value = Some("on".into());
        assert_eq!(
            n.line(),
            "  - checkbox \"Urgent \\\"now\\\"\" [ref=e3] [checked]: \"on\""
        );
    }

    #[test]
    fn a_line_is_measured_as_json_writes_it() {
        let all: String = (0u8..0x80).map(char::from).collect();
        for s in [
            all.as_str(),
            "plain",
            "Größe “quoted” ✓ 😀",
            "\u{2028}\u{7f}",
            "",
        ] {
            assert_eq!(escaped_len(s), quoted(s).len() - 2, "{s:?}");
        }
    }

    #[test]
    fn a_cut_outline_says_what_was_cut_in_both_formats() {
        let nodes: Vec<_> = (0..1000)
            .map(|i| node(0, "button", Some("Press me"), Some(&format!("e{i}"))))
            .collect();
        for format in [SnapshotFormat::Yaml, SnapshotFormat::Json] {
            let r = render(
                "t1",
                "http://x/".into(),
                "T".into(),
                nodes.clone(),
                format,
                4096,
            );
            assert!(r.truncated && r.shown > 0 && r.shown < 1000, "{format:?}");
            assert_eq!(r.node_count, 1000);
            assert!(r.note.contains("maxBytes"), "{}", r.note);
            let bytes = serde_json::to_string(&r).unwrap().len();
            assert!(bytes <= 4096, "{format:?}: {bytes}");
            let all = render(
                "t1",
                "u".into(),
                "T".into(),
                nodes[..3].to_vec(),
                format,
                4096,
            );
            assert!(!all.truncated && all.shown == 3);
        }
    }
}
