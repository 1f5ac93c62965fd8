#!/usr/bin/env python3
"""How long `polaris serve` takes to answer its first `host.hello`, and what it holds resident
then, for hosts with room for more and more receipts: the receipt index is sized by the
receipts a host's bounds let it hold and faulted in before the host listens, so its memory is
taken, and its time spent, at the start.

    cargo build --release --bin polaris
    python3 examples/start_time.py target/release/polaris [OTHER_POLARIS ...]

Each binary starts as `polaris serve --no-journal --capacity N --max-book-bytes N*1024` (the
byte bound set high enough that N receipts are reachable) on a private socket directory, for N
= 10,000 (the default capacity), 10,000,000 and 50,000,000, each REPS times (3; in the
environment). The time runs from the spawn until `bridge.sock` answers a `host.hello` with
`"ok":true`; VmRSS is read from /proc/PID/status at that moment. It prints the median and range
of each.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

CAPACITIES = [10_000, 10_000_000, 50_000_000]


def vm_rss_mb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise SystemExit("no VmRSS for pid %d" % pid)


def hello(path):
    """True once the host at `path` answers `host.hello` with ok."""
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(path)
            s.sendall(b'{"id":"start-time","method":"host.hello","params":{}}\n')
            line = b""
            while not line.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    return False
                line += chunk
            return json.loads(line).get("ok") is True
    except OSError:
        return False


def one_start(binary, capacity):
    with tempfile.TemporaryDirectory(prefix="polaris-start-") as d:
        os.chmod(d, 0o700)
        started = time.monotonic()
        host = subprocess.Popen(
            [binary, "serve", "--socket-dir", d, "--no-journal",
             "--capacity", str(capacity), "--max-book-bytes", str(capacity * 1024),
             "--audit-log", os.path.join(d, "audit.jsonl")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            sock = os.path.join(d, "bridge.sock")
            while not hello(sock):
                if host.poll() is not None:
                    raise SystemExit("%s serve exited with %s" % (binary, host.returncode))
                if time.monotonic() - started > 60:
                    raise SystemExit("%s serve did not answer host.hello in 60 s" % binary)
                time.sleep(0.001)
            elapsed_ms = (time.monotonic() - started) * 1000
            return elapsed_ms, vm_rss_mb(host.pid)
        finally:
            host.terminate()
            host.wait()


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    reps = int(os.environ.get("REPS", "3"))
    for binary in sys.argv[1:]:
        for capacity in CAPACITIES:
            runs = sorted(one_start(binary, capacity) for _ in range(reps))
            times = sorted(t for t, _ in runs)
            rss = sorted(r for _, r in runs)
            print("%s --capacity %d: host.hello after %.0f ms (%.0f-%.0f), %d MB resident (%d-%d)"
                  % (binary, capacity, times[len(times) // 2], times[0], times[-1],
                     rss[len(rss) // 2], rss[0], rss[-1]))


if __name__ == "__main__":
    main()
