#!/usr/bin/env python3
"""When the round trip at half the peak has a tail, what the machine was doing then.

Lines a `load --latency-trace` file up with a machine-wide `perf record` on the same clock
(CLOCK_MONOTONIC) and prints, for each 100 ms of the open-loop run: how many round trips
that started in it took over 2 ms, the longest, and what the two cores did meanwhile —
idle, zeroing fresh pages for a process (`clear_page*`), or anything else.

Reproduce (perf starts once the peak is measured, so it covers the warm-up and timed run):

    cargo build --release --bin polaris --example load
    target/release/examples/load --table --reps 1 --book 0 --no-redis \\
        --latency-trace /tmp/trace.txt > /tmp/table.md 2> /tmp/table.err &
    until grep -q 'latency: peak' /tmp/table.err; do sleep 0.05; done
    perf record -a -F 1999 -k CLOCK_MONOTONIC -o /tmp/all.perf -- sleep 7
    wait
    perf script -i /tmp/all.perf -F comm,tid,cpu,time,ip,sym > /tmp/all.script
    python3 examples/latency_tail.py /tmp/trace.txt /tmp/all.script

The profile costs the machine some CPU, so the run it watches is a little slower than one
without it.
"""
import collections
import re
import sys

WINDOW_MS = 100
SLOW_MS = 2.0


def read_trace(path):
    start = None
    trips = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                m = re.search(r"CLOCK_MONOTONIC ([0-9.]+) s", line)
                if m:
                    start = float(m.group(1))
                continue
            lane, sent, replied = line.split()
            trips.append((int(sent), int(replied)))
    if start is None:
        sys.exit(f"{path}: no '# ... CLOCK_MONOTONIC' line (a trace from an older load client?)")
    return start, trips


def read_samples(path, start):
    by_window = collections.defaultdict(collections.Counter)
    sample = re.compile(r"\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+[0-9a-f]+\s*(.*)")
    with open(path) as f:
        for line in f:
            m = sample.match(line)
            if not m:
                continue
            comm, _tid, _cpu, t, sym = m.groups()
            ms = (float(t) - start) * 1000
            if ms < 0:
                continue
            sym = sym.split("+")[0]
            if comm == "swapper":
                kind = "idle"
            elif sym.startswith("clear_page"):
                kind = "zeroing pages"
            else:
                kind = "other"
            by_window[int(ms // WINDOW_MS)][kind] += 1
    return by_window


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    start, trips = read_trace(sys.argv[1])
    samples = read_samples(sys.argv[2], start)
    slow = collections.Counter()
    longest = collections.defaultdict(float)
    count = collections.Counter()
    for sent, replied in trips:
        w = sent // (WINDOW_MS * 1_000_000)
        ms = (replied - sent) / 1e6
        count[w] += 1
        longest[w] = max(longest[w], ms)
        if ms > SLOW_MS:
            slow[w] += 1
    print(f"| from (ms) | round trips | over {SLOW_MS:g} ms | longest | idle | zeroing pages | other |")
    print("|---|---|---|---|---|---|---|")
    for w in sorted(count):
        s = samples.get(w, collections.Counter())
        total = sum(s.values()) or 1
        share = lambda k: f"{100 * s[k] / total:.0f} %"
        print(
            f"| {w * WINDOW_MS} | {count[w]} | {slow[w]} | {longest[w]:.1f} ms "
            f"| {share('idle')} | {share('zeroing pages')} | {share('other')} |"
        )


main()
