#!/usr/bin/env python3
"""Check that every relative link in README.md, ARCHITECTURE.md and docs/ resolves.

A link resolves when the file it names exists and, for a `#fragment` into a Markdown file,
when that file has a heading whose GitHub anchor is the fragment. Links inside fenced code
blocks and links with a scheme (https:, mailto:) are not checked. Prints each broken link and
exits 1 when there is one. Run from the repository's root: `python3 .ci/doc-links.py`.
"""
import glob
import os
import re
import sys


def anchors(path):
    """The GitHub anchors of a Markdown file's headings (duplicates get -1, -2, …)."""
    seen = {}
    out = set()
    text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
    for line in text.split("\n"):
        m = re.match(r"^#+ (.*)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def main():
    files = ["README.md", "ARCHITECTURE.md"] + sorted(glob.glob("docs/**/*.md", recursive=True))
    broken = 0
    for f in files:
        text = re.sub(r"```.*?```", "", open(f, encoding="utf-8").read(), flags=re.S)
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            url = m.group(1)
            if re.match(r"[a-z]+:", url):
                continue
            path, _, frag = url.partition("#")
            target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not os.path.exists(target):
                print(f"{f}: {url}: no such file")
                broken += 1
            elif frag and target.endswith(".md") and frag not in anchors(target):
                print(f"{f}: {url}: no such heading")
                broken += 1
    print(f"{len(files)} files, {broken} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
