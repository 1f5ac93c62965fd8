//! What Cargo cannot check about the layering: the modules inside each crate form no cycle, and
//! the shipped binary depends on no test-only crate.
//!
//! Cargo refuses a cycle between the workspace's crates, but not between the modules of one
//! crate. Each top-level file or folder under a crate's `src/` is one module, named
//! `crate-dir/module`. An edge `a → b` is any `crate::b` path written in `a`'s source (in `use`
//! lines and in code, tests included; comments and string literals do not count). A cycle means
//! two modules can only be understood, changed and tested together; this test names a cycle in
//! each knot of such modules, with the lines that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges that close a known cycle and are being removed elsewhere. Each entry is reported when
/// the test runs; delete it as soon as the edge is gone (the test fails on a stale entry, so the
/// allowance cannot outlive its reason).
const ALLOWED: &[(&str, &str)] = &[];

/// Where a module names another: `file:line`.
type Sites = BTreeMap<(String, String), Vec<String>>;

#[test]
fn the_module_graph_has_no_cycles() {
    let sites = module_edges();
    for (from, to) in ALLOWED {
        if let Some(at) = sites.get(&(from.to_string(), to.to_string())) {
            eprintln!(
                "allowed for now: {from} → {to} (closes a cycle; being removed), at {}",
                at.join(", ")
            );
        }
    }
    let graph = graph_without_allowed(&sites);
    // The graph itself, for `cargo test --test architecture -- --nocapture`.
    for (from, to) in &graph {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        eprintln!("{from} → {}", to.join(", "));
    }
    let cycles = cycles(&graph);
    if !cycles.is_empty() {
        let mut report = String::new();
        for cycle in &cycles {
            report.push_str(&format!("\ncycle: {}\n", cycle.join(" → ")));
            for pair in cycle.windows(2) {
                let at = &sites[&(pair[0].clone(), pair[1].clone())];
                report.push_str(&format!("  {} → {}: {}\n", pair[0], pair[1], at.join(", ")));
            }
        }
        panic!(
            "the module graph has {} cycle(s); move the shared item into the module that owns it \
             or into a small module below both:{report}",
            cycles.len()
        );
    }
}

/// `cargo tree -e normal` of the `polaris` package: the crates the shipped binary links.
fn shipped_dependencies() -> String {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "-e", "normal", "-p", "polaris", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_shipped_binary_links_every_layer_and_no_testkit() {
    let tree = shipped_dependencies();
    let linked = |name: &str| tree.lines().any(|l| l.split(' ').next() == Some(name));
    for layer in [
        "polaris-protocol",
        "polaris-state",
        "polaris-journal",
        "polaris-ledger",
        "polaris-executor",
        "polaris-host",
        "polaris-webapp",
    ] {
        assert!(linked(layer), "the binary should link {layer}:\n{tree}");
    }
    for test_only in [
        "polaris-testkit",
        "proptest",
        "tempfile",
        "insta",
        "criterion",
    ] {
        assert!(
            !linked(test_only),
            "{test_only} is for tests only, yet the shipped binary links it; name it under \
             [dev-dependencies]:\n{tree}"
        );
    }
}

#[test]
fn every_allowed_edge_still_exists() {
    let sites = module_edges();
    let stale: Vec<String> = ALLOWED
        .iter()
        .filter(|(from, to)| !sites.contains_key(&(from.to_string(), to.to_string())))
        .map(|(from, to)| format!("{from} → {to}"))
        .collect();
    assert!(
        stale.is_empty(),
        "these allowed edges are gone; delete them from ALLOWED in tests/architecture.rs: {}",
        stale.join(", ")
    );
}

#[test]
fn the_parser_sees_paths_and_skips_comments_and_strings() {
    let src = r##"
        use crate::book::{Book, Receipt};
        use crate::{host::Host, tasks};
        // crate::console is only mentioned
        /* crate::mcp /* nested */ crate::cli */
        let s = "crate::operator";
        let r = r#"crate::client "quoted""#;
        let c = '"'; let t = crate::events::now();
        fn f<'a>(x: &'a str) -> &'a str { crate::protocol::id(x) }
        pub(crate) fn g() {}
    "##;
    let found: BTreeSet<String> = references(src).into_iter().map(|(m, _)| m).collect();
    let expected: BTreeSet<String> = ["book", "host", "tasks", "events", "protocol"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn a_cycle_is_found_and_named() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "d")] {
        graph.entry(a.into()).or_default().insert(b.into());
    }
    let found = cycles(&graph);
    assert_eq!(
        found,
        vec![
            vec!["a".to_string(), "b".into(), "c".into(), "a".into()],
            vec!["d".to_string(), "d".into()],
        ]
    );
}

/// Every `crate::x` reference between top-level modules of one crate, with where it is
/// written: the root package's `src/` and each `crates/*/src/`.
fn module_edges() -> Sites {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![("polaris".to_string(), root.join("src"))];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        sources.push((name, dir.join("src")));
    }
    let mut sites = Sites::new();
    for (krate, src) in &sources {
        crate_edges(root, krate, src, &mut sites);
    }
    sites
}

/// The edges between the top-level modules of the crate whose sources are in `src`.
fn crate_edges(root: &Path, krate: &str, src: &Path, sites: &mut Sites) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(src, f)).collect();
    for file in &files {
        let Some(from) = module_of(src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(root).unwrap_or(file);
        for (to, line) in references(&text) {
            if to != from && modules.contains(&to) {
                sites
                    .entry((format!("{krate}/{from}"), format!("{krate}/{to}")))
                    .or_default()
                    .push(format!("{}:{line}", shown.display()));
            }
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to; `lib.rs` and `main.rs` are the root, not a module.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_string())
}

fn graph_without_allowed(sites: &Sites) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in sites.keys() {
        if !ALLOWED.contains(&(from.as_str(), to.as_str())) {
            graph.entry(from.clone()).or_default().insert(to.clone());
        }
    }
    graph
}

/// One shortest cycle through each strongly connected component that has one, each starting at
/// its smallest module name.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.to_string()];
        while let Some(m) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let mut done = BTreeSet::new();
    let mut found = Vec::new();
    for start in graph.keys() {
        if done.contains(start) || !reach(start).contains(start) {
            continue;
        }
        // The component: every module reachable from `start` that reaches it back.
        for m in reach(start) {
            if reach(&m).contains(start) {
                done.insert(m);
            }
        }
        found.push(shortest_cycle(graph, start));
    }
    found
}

/// A shortest path from `start` back to itself (breadth first).
fn shortest_cycle(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Vec<String> {
    let mut parent: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.to_string()]);
    while let Some(m) = queue.pop_front() {
        for next in graph.get(&m).into_iter().flatten() {
            if next == start {
                let mut path = vec![start.to_string()];
                let mut at = m.clone();
                while at != start {
                    path.push(at.clone());
                    at = parent[&at].clone();
                }
                path.push(start.to_string());
                path.reverse();
                return path;
            }
            if !parent.contains_key(next) {
                parent.insert(next.clone(), m.clone());
                queue.push_back(next.clone());
            }
        }
    }
    unreachable!("{start} is on a cycle")
}

/// The modules named by `crate::x` paths in Rust source (`use crate::{a, b::c}` names `a` and
/// `b`), with their line numbers. Comments, strings and char literals are skipped.
fn references(src: &str) -> Vec<(String, usize)> {
    let code = blank_comments_and_literals(src);
    let bytes = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let ident_at = |mut i: usize| {
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        (&code[start..i], i)
    };
    let skip_space = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(pos) = code[from..].find("crate") {
        let at = from + pos;
        from = at + "crate".len();
        if at > 0 && (is_ident(bytes[at - 1]) || bytes[at - 1] == b'$') {
            continue;
        }
        let mut i = skip_space(from);
        if !code[i..].starts_with("::") {
            continue;
        }
        i = skip_space(i + 2);
        if bytes.get(i) == Some(&b'{') {
            // A group: the first segment of each item at depth one.
            let mut depth = 0;
            let mut expect_item = true;
            while i < bytes.len() {
                match bytes[i] {
                    b'{' => {
                        depth += 1;
                        expect_item = depth == 1;
                        i += 1;
                    }
                    b'}' => {
                        depth -= 1;
                        i += 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' => {
                        expect_item = depth == 1;
                        i += 1;
                    }
                    b if is_ident(b) && expect_item => {
                        let (name, end) = ident_at(i);
                        found.push((name.to_string(), line_of(i)));
                        expect_item = false;
                        i = end;
                    }
                    _ => i += 1,
                }
            }
        } else {
            let (name, _) = ident_at(i);
            if !name.is_empty() {
                found.push((name.to_string(), line_of(i)));
            }
        }
    }
    found
}

/// The source with comments, string literals and char literals replaced by spaces (newlines
/// kept, so line numbers stay right).
fn blank_comments_and_literals(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(hashes) = raw_string_start(b, i) {
            // r#"…"#, br"…": ends at a quote followed by as many hashes.
            let open = i + b[i..].iter().position(|&c| c == b'"').unwrap() + 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = b[open..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| open + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime / label, which is left alone.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p + 1)
            } else {
                src[i + 1..]
                    .chars()
                    .next()
                    .map(|c| i + 1 + c.len_utf8())
                    .filter(|&after| b.get(after) == Some(&b'\''))
                    .map(|after| after + 1)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced, with ASCII")
}

/// At a raw string (`r"`, `r#"`, `br#"`) that does not continue an identifier: its hash count.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    (b.get(j + hashes) == Some(&b'"')).then_some(hashes)
}
