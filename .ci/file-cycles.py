#!/usr/bin/env python3
"""Import cycles between the source files of a crate.

Each file under src/ is a node. An edge a -> b is a path (`crate::x::y`, `super::y`,
`self::y`, in `use` lines and in code; comments and string literals do not count) written in a
and resolved to the file that defines its item: module by module, then through the `pub use`
re-exports of a module's file (`pub use command::Command` in protocol/mod.rs leads to
protocol/command.rs). `mod x;` declarations are not edges. Prints every cycle (strongly
connected component of more than one file) with the lines that make it; exits 1 when there is
one that is not allowed.

Usage: .ci/file-cycles.py [SRC_DIR] [--allow FILE,FILE,...]... (default SRC_DIR: the crate's
src/). Each `--allow` names the files of one known cycle, as printed (`crates/host/src/a.rs,crates/host/src/b.rs`):
a cycle whose files are all in one allowed list is still printed, marked allowed, but does not
fail the run, so the script can gate CI while a known cycle is being removed. An allowed list
that no longer matches any cycle fails the run too, so it is taken out once the cycle is gone.

What it cannot see: paths a macro writes, and methods of one `impl` spread over files (a call
`self.admit(..)` names no path). Both are outside what an import cycle is.
"""
import argparse
import os
import re
import sys
from collections import defaultdict

_args = argparse.ArgumentParser(description="Import cycles between the source files of a crate.")
_args.add_argument("src", nargs="?", help="the crate's src/ directory (default: ../src from this script)")
_args.add_argument("--allow", action="append", default=[], metavar="FILE,FILE,...",
                   help="the files of a known cycle that does not fail the run (repeatable)")
ARGS = _args.parse_args()
SRC = ARGS.src or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
ALLOWED = [frozenset(f.strip() for f in entry.split(",") if f.strip()) for entry in ARGS.allow]


def strip(text):
    """Blanks comments, string and char literals, keeping line structure."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 70]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text[i:j].count("\n"))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text[i:j].count("\n"))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        rel = []
    return tuple(rel)


SRC = os.path.normpath(SRC)
files = {}
for root, _, names in os.walk(SRC):
    for name in names:
        if name.endswith(".rs"):
            p = os.path.join(root, name)
            if os.path.relpath(p, SRC) == "main.rs":
                continue  # the binary is its own crate
            files[module_of(p)] = os.path.relpath(p, os.path.dirname(SRC))
texts = {
    m: strip(open(os.path.join(os.path.dirname(SRC), p), encoding="utf-8").read())
    for m, p in files.items()
}


def expand(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for k, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = k
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix, inner, rest = tree[:start], tree[start + 1:k], tree[k + 1:]
                parts, d, s = [], 0, 0
                for j, c2 in enumerate(inner + ","):
                    if c2 in "{":
                        d += 1
                    elif c2 == "}":
                        d -= 1
                    elif c2 == "," and d == 0:
                        if inner[s:j]:
                            parts.append(inner[s:j])
                        s = j + 1
                res = []
                for part in parts:
                    if part == "self":
                        res += [prefix.rstrip(":")]
                    else:
                        res += expand(prefix + part + rest)
                return res
    return [tree]


# Re-exports: module -> {name: path (as written, relative to that module)}.
reexports = defaultdict(dict)
for m, text in texts.items():
    for use in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
        for path in expand(use.group(1)):
            path = re.sub(r"\bas\b.*", "", path.replace(" ", ""))
            name = path.split("::")[-1]
            reexports[m][name] = path


def resolve(base, segs, seen=0):
    """The module (file) that defines the item at `segs`, read from module `base`."""
    mod = list(base)
    for k, s in enumerate(segs):
        if s == "super":
            mod = mod[:-1]
            continue
        if s == "self":
            continue
        if tuple(mod + [s]) in files:
            mod.append(s)
            continue
        # An item of `mod`: follow a re-export of it.
        target = reexports.get(tuple(mod), {}).get(s)
        if target and seen < 8 and s != "*":
            t = target.split("::")
            if t[0] == "crate":
                return resolve((), t[1:] + segs[k + 1:], seen + 1)
            return resolve(tuple(mod), t + segs[k + 1:], seen + 1)
        break
    return tuple(mod)


edges = defaultdict(list)
path_re = re.compile(r"\b(crate|super|self)((?:::\w+)+)(::\{)?")
for m, text in texts.items():
    # Inline modules: the module a line is in (for `super`/`self`).
    stack, depth, inline_at = [], 0, []
    lines = text.split("\n")
    for ln, line in enumerate(lines, 1):
        inner = tuple(list(m) + [s for s, _ in stack])
        targets = []
        use = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?use\s+(.*)", line)
        if use:
            stmt, j = use.group(1), ln
            while ";" not in stmt and j < len(lines):
                stmt += lines[j]
                j += 1
            for p in expand(stmt.split(";")[0]):
                segs = p.split("::")
                if segs[0] in ("crate", "super", "self"):
                    targets.append(segs)
        else:
            for hit in path_re.finditer(line):
                targets.append([hit.group(1)] + hit.group(2).split("::")[1:])
        for segs in targets:
            if segs[0] == "crate":
                base, rest = (), segs[1:]
            else:
                base, rest = inner, segs
            dest = resolve(base, rest)
            # An inline module's own file.
            while dest not in files and dest:
                dest = dest[:-1]
            if dest != m and dest in files:
                edges[(m, dest)].append(f"{files[m]}:{ln}")
        for ch_m in re.finditer(r"\bmod\s+(\w+)\s*\{|[{}]", line):
            tok = ch_m.group(0)
            if tok.startswith("mod"):
                depth += 1
                stack.append((ch_m.group(1), depth))
            elif tok == "{":
                depth += 1
            else:
                if stack and stack[-1][1] == depth:
                    stack.pop()
                depth -= 1

graph = defaultdict(set)
for (a, b) in edges:
    graph[a].add(b)

# Tarjan's strongly connected components.
index, low, on, st, sccs, counter = {}, {}, set(), [], [], [0]
sys.setrecursionlimit(10000)


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    st.append(v)
    on.add(v)
    for w in graph[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = st.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(comp)


for v in list(files):
    if v not in index:
        visit(v)

print(f"{len(files)} files, {len(edges)} file edges")
failing, used = 0, set()
for comp in sccs:
    names = sorted(files[c] for c in comp)
    allowed_by = next((a for a in ALLOWED if set(names) <= a), None)
    if allowed_by is None:
        failing += 1
        print("\ncycle among: " + ", ".join(names))
    else:
        used.add(allowed_by)
        print("\ncycle among (allowed): " + ", ".join(names))
    inside = set(comp)
    for (a, b), at in sorted(edges.items()):
        if a in inside and b in inside:
            print(f"  {files[a]} -> {files[b]}: {', '.join(at[:3])}{' …' if len(at) > 3 else ''}")
for a in ALLOWED:
    if a not in used:
        failing += 1
        print("\nallowed but no longer a cycle (take it out of --allow): " + ",".join(sorted(a)))
sys.exit(1 if failing else 0)
