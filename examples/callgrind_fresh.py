#!/usr/bin/env python3
"""Instructions the host executes per fresh `page.fill`, counted by callgrind: a figure that,
unlike CPU time, does not move with whatever else the machine runs, so two builds can be
compared one change at a time.

    cargo build --release --bin polaris
    python3 examples/callgrind_fresh.py target/release/polaris [OTHER_POLARIS ...]

Each binary runs as `polaris serve --no-journal` under `valgrind --tool=callgrind`; one
connection starts a task, sends WARM windows of 64 fresh fills (165-byte frames, sorted params
keys, as `examples/load.rs` sends them), then the counters are zeroed (`callgrind_control -z`),
MEASURE more windows are sent and the counters dumped (`callgrind_control -d`). Every reply
must say `"ok":true`. It prints the host's instructions in the measured window divided by the
fills sent; `callgrind_annotate --inclusive=yes CALLGRIND_FILE` ranks the functions.

With MODE=replay the measured windows are replays instead: MEASURE windows of fresh fills are
sent first (after the WARM ones), the counters are zeroed, and the very same frames are sent
again; every reply must say `"receipt":"replayed"`. It prints instructions per replay.
Knobs: WARM (50), MEASURE (100), MODE (`fresh` or `replay`) and JOURNAL (`1`: with the journal,
its writer thread counted too) in the environment.
"""
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

WINDOW = 64
FRAME_BYTES = 165


def client(sock_path, warm, measure, pid, mode):
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
    seq = 0

    def window(first=None, want=b'"ok":true'):
        nonlocal seq
        if first is None:
            first = seq
            seq += WINDOW
        frames = "".join(head + "%012x" % (first + i) + tail for i in range(WINDOW))
        s.sendall(frames.encode())
        for _ in range(WINDOW):
            line = f.readline()
            if want not in line:
                raise SystemExit("a fill did not say %s: %r" % (want.decode(), line))

    for _ in range(warm):
        window()
    if mode == "replay":
        replayed = seq
        for _ in range(measure):
            window()
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    for n in range(measure):
        if mode == "replay":
            window(replayed + n * WINDOW, b'"receipt":"replayed"')
        else:
            window()
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    return measure * WINDOW


def measure(binary, warm, measure, mode):
    d = tempfile.mkdtemp(prefix="polaris-callgrind-")
    out = os.path.join(d, "callgrind.out")
    p = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out + ".%p",
         binary, "serve", "--socket-dir", os.path.join(d, "s"), "--audit-log",
         os.path.join(d, "audit.jsonl"), "--capacity", "1000000"]
        + (["--journal", os.path.join(d, "journal")] if os.environ.get("JOURNAL") == "1"
           else ["--no-journal"]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sock = os.path.join(d, "s", "bridge.sock")
    for _ in range(300):
        if os.path.exists(sock):
            break
        time.sleep(0.2)
    else:
        p.kill()
        raise SystemExit("%s did not start serving under valgrind" % binary)
    try:
        fills = client(sock, warm, measure, p.pid, mode)
    finally:
        p.send_signal(2)
        p.wait()
    dump = sorted(glob.glob(out + ".%d.*" % p.pid))[-1]
    total = None
    for line in open(dump):
        if line.startswith("summary:") or line.startswith("totals:"):
            total = int(line.split()[1])
    return total / fills, dump


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    warm = int(os.environ.get("WARM", "50"))
    count = int(os.environ.get("MEASURE", "100"))
    mode = os.environ.get("MODE", "fresh")
    if mode not in ("fresh", "replay"):
        raise SystemExit("MODE is `fresh` or `replay`, not %r" % mode)
    what = "fresh page.fill" if mode == "fresh" else "replayed page.fill"
    for binary in sys.argv[1:]:
        per, dump = measure(binary, warm, count, mode)
        print("%s: %.0f instructions per %s (%d sent; %s)"
              % (binary, per, what, count * WINDOW, dump))


if __name__ == "__main__":
    main()
