#!/usr/bin/env python3
"""Bytes of memory the host keeps per fresh receipt: the growth of its resident set (VmRSS in
/proc/PID/status) while fresh `page.fill` receipts are created, divided by the receipts created.

    cargo build --release --bin polaris
    python3 examples/rss_fresh.py target/release/polaris [OTHER_POLARIS ...]

Each binary runs as `polaris serve --no-journal --capacity 4000000 --max-book-bytes 8GiB` (the
receipt index is reserved for four million receipts). One connection starts a task and sends
FIRST fresh fills (165-byte frames, sorted params keys, as `examples/load.rs` sends them, in
windows of 256); VmRSS is read; then MORE fresh fills and VmRSS again. It prints the marginal
bytes per receipt, (RSS after − RSS between) ÷ MORE — what each further receipt costs once the
index's pages are all touched — and the total, RSS after ÷ every receipt (index, runtime and
all). Every reply must say `"ok":true`. Knobs: FIRST (1,000,000) and MORE (2,000,000) in the
environment, and VALUES: `same` (the default, as `examples/load.rs` sends: every fill puts the
same value in the same field, so every reply is the same) or `distinct` (the value's last 12
characters are the request's sequence number, so every reply differs; same frame size).
"""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import json
import uuid

WINDOW = 256
FRAME_BYTES = 165


def vm_rss(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS for pid %d" % pid)


def client(sock_path, first, more, pid, distinct):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    f = s.makefile("rb")
    start = {"id": str(uuid.uuid4()), "method": "task.start", "params": {"title": "load"}}
    s.sendall(json.dumps(start).encode() + b"\n")
    task = json.loads(f.readline())["result"]["taskId"]
    r = uuid.uuid4().hex
    head = '{"id":"%s-%s-4%s-a%s-' % (r[0:8], r[8:12], r[13:16], r[17:20])
    fixed = (len(head) + 12 + len('","method":"page.fill","params":{"taskId":"') + len(task)
             + len('","target":"#title","value":""}}\n'))
    value = "Hello" + "!" * (FRAME_BYTES - fixed - 5)
    tail = ('","method":"page.fill","params":{"target":"#title","taskId":"%s","value":"%s"}}\n'
            % (task, value))
    mid = ('","method":"page.fill","params":{"target":"#title","taskId":"%s","value":"%s'
           % (task, value[:-12]))

    def frame(n):
        if distinct:
            return head + "%012x" % n + mid + "%012x" % n + '"}}\n'
        return head + "%012x" % n + tail
    seq = 0

    def send(n):
        # A writer thread keeps the host's socket full while this thread reads the replies.
        nonlocal seq
        base = seq
        seq += n

        def write():
            sent = 0
            while sent < n:
                w = min(n - sent, WINDOW)
                s.sendall("".join(frame(base + sent + i) for i in range(w)).encode())
                sent += w

        writer = threading.Thread(target=write)
        writer.start()
        buf = b""
        lines = 0
        while lines < n:
            chunk = f.read1(1 << 20)
            if not chunk:
                raise SystemExit("the host closed the connection")
            buf += chunk
            replies = buf.split(b"\n")
            buf = replies.pop()
            lines += len(replies)
            for line in replies:
                if b'"ok":true' not in line:
                    raise SystemExit("a fill did not say ok: %r" % line)
        writer.join()

    send(first)
    between = vm_rss(pid)
    send(more)
    after = vm_rss(pid)
    return between, after


def measure(binary, first, more, distinct):
    d = tempfile.mkdtemp(prefix="polaris-rss-")
    p = subprocess.Popen(
        [binary, "serve", "--socket-dir", os.path.join(d, "s"), "--audit-log",
         os.path.join(d, "audit.jsonl"), "--capacity", "4000000", "--max-book-bytes",
         str(8 << 30), "--no-journal"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sock = os.path.join(d, "s", "bridge.sock")
    for _ in range(300):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    else:
        p.kill()
        raise SystemExit("%s did not start serving" % binary)
    try:
        return client(sock, first, more, p.pid, distinct)
    finally:
        p.send_signal(2)
        p.wait()


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    first = int(os.environ.get("FIRST", "1000000"))
    more = int(os.environ.get("MORE", "2000000"))
    values = os.environ.get("VALUES", "same")
    if values not in ("same", "distinct"):
        raise SystemExit("VALUES is `same` or `distinct`, not %r" % values)
    for binary in sys.argv[1:]:
        between, after = measure(binary, first, more, values == "distinct")
        print("%s: %.0f bytes of RSS per further fresh receipt (%d → %d receipts, %s values), "
              "%.0f per receipt in all (%.0f MiB)"
              % (binary, (after - between) / more, first, first + more, values,
                 after / (first + more), after / (1 << 20)))


if __name__ == "__main__":
    main()
