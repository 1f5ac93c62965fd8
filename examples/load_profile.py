#!/usr/bin/env python3
"""Where the host's CPU goes per fresh receipt: ranks `perf script` samples of `polaris serve`.

Reproduce (the host under the outside fresh-fill load, 32 connections x 64 in flight):

    cargo build --release --bin polaris --example load
    target/release/examples/load --hold 25 --polaris target/release/polaris > /tmp/hold.log &
    sleep 4; PID=$(awk '/host pid/{print $3}' /tmp/hold.log)
    perf record -F 499 --call-graph dwarf,16384 -p $PID -o /tmp/polaris.perf -- sleep 10
    perf script -i /tmp/polaris.perf > /tmp/polaris.script
    python3 examples/load_profile.py /tmp/polaris.script 3.35   # the host CPU µs/request --hold printed

Each sample goes to one phase: samples inside a kernel page fault count as page zeroing;
the others go to the phase of the innermost frame that names one.
"""
import collections
import re
import sys

PHASES = [
    ("reply: stored reply body + reply line formatting",
     ["reply::stored_body", "reply_line", "Outcome::ok", "write_json_str",
      "results::_::<impl serde_core::ser::Serialize"]),
    ("socket write (sendto) + writer", ["__sys_sendto", "write_ready", "Framed::write", "UnixStream::try_write"]),
    ("socket read (recvfrom) + framing", ["__sys_recvfrom", "read_frame", "poll_fill_buf"]),
    ("parsing: envelope, params -> command, ID check",
     ["parse_request_direct", "Command::parse", "parse_envelope", "validate_id"]),
    ("fingerprint: canonical check", ["canonical::Checker", "plain_canonical", "fingerprint"]),
    ("admission under the lock: book lookup + receipt insert",
     ["Book::entry", "insert_running", "admission::<impl polaris::host::Host>::admit", "RequestKey::new"]),
    ("completion under the lock", ["complete_locked"]),
    ("fixture executor", ["Executor>::act", "FixtureExecutor", "FixturePage"]),
    ("execution bookkeeping", ["execution::<impl polaris::host::Host>::run", "interpret"]),
    ("thread hand-offs: scheduler, wake-ups, parking, futex",
     ["park", "futex", "__schedule", "epoll", "wake", "Semaphore"]),
    ("mutex lock/unlock", ["Mutex", "mutex", "lock_contended", "MutexGuard"]),
    ("clock reads", ["clock_gettime", "Timespec::now", "Instant::now"]),
    ("allocator (malloc/free)", ["mi_free", "mi_malloc", "_mi_", "mi_theap", "mi_page"]),
    ("other syscalls", ["entry_SYSCALL", "syscall"]),
]
FRAME = re.compile(r"\s+[0-9a-f]+ (.*?)(\+0x[0-9a-f]+)? (\(.*\))?$")


def samples(path):
    cur = None
    for line in open(path, errors="replace"):
        if line and not line[0].isspace():
            if cur:
                yield cur
            cur = []
            continue
        m = FRAME.match(line.rstrip("\n"))
        if m and cur is not None:
            cur.append(m.group(1))
    if cur:
        yield cur


def main():
    path = sys.argv[1]
    us = float(sys.argv[2]) if len(sys.argv) > 2 else None
    phase, faults = collections.Counter(), collections.Counter()
    n = 0
    for s in samples(path):
        n += 1
        if any("exc_page_fault" in fr for fr in s):
            phase["kernel zeroing of fresh pages (page faults)"] += 1
            who = "other"
            for fr in s:
                if fr.startswith(("mi_", "_mi_")):
                    who = "heap pages (allocator: stored receipts and replies)"
                    break
                if any(p in fr for p in ("insert_unique", "push_entry", "RawVec", "reserve")):
                    who = "receipt table (entries and index)"
                    break
            faults[who] += 1
            continue
        name = "other"
        for fr in s:
            hit = [ph for ph, pats in PHASES if any(p in fr for p in pats)]
            if hit:
                name = hit[0]
                break
        phase[name] += 1
    print(f"{n} samples" + (f"; {us} µs of host CPU per request" if us else ""))
    for name, v in phase.most_common():
        cost = f"  {us * v / n:.2f} µs" if us else ""
        print(f"{100 * v / n:5.1f}%{cost}  {name}")
    print("page faults by who touched the page:")
    for name, v in faults.most_common():
        cost = f"  {us * v / n:.2f} µs" if us else ""
        print(f"{100 * v / n:5.1f}%{cost}  {name}")


if __name__ == "__main__":
    main()
