#!/usr/bin/env python3
"""What the journal costs a real `polaris serve`, measured against `--no-journal` in one run.

    cargo build --release && python3 scripts/journal_roundtrip.py [target/release/polaris]

For each mode: one client's fresh `page.fill` round trip (sequential, p50/p99), fresh
mutations per second from 32 connections with 16 requests in flight each, and — with the
journal — the time from a `kill -9` to `host.hello` answering again on the journal left
behind (recovery of every receipt written so far).
"""

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/polaris"


def start(root, journal):
    args = [BIN, "serve", "--socket-dir", f"{root}/s", "--audit-log", f"{root}/audit.jsonl",
            "--capacity", "10000000"]
    args += ["--journal", f"{root}/j"] if journal else ["--no-journal"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(f"{root}/serve.log", "a"))
    t0 = time.monotonic()
    while True:
        try:
            asyncio.run(one(f"{root}/s/bridge.sock", "host.hello", {}))
            return p, time.monotonic() - t0
        except OSError:
            time.sleep(0.002)


async def one(path, method, params):
    r, w = await asyncio.open_unix_connection(path)
    w.write((json.dumps({"id": str(uuid.uuid4()), "method": method, "params": params}) + "\n").encode())
    line = await r.readline()
    w.close()
    if not line:
        raise OSError("no reply")
    return json.loads(line)


async def sequential(path, task, n):
    r, w = await asyncio.open_unix_connection(path, limit=1 << 20)
    lat = []
    for i in range(n):
        frame = json.dumps({"id": str(uuid.uuid4()), "method": "page.fill",
                            "params": {"taskId": task, "target": "#title", "value": f"v{i}"}})
        t = time.perf_counter()
        w.write((frame + "\n").encode())
        await r.readline()
        lat.append(time.perf_counter() - t)
    w.close()
    lat.sort()
    return lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3


async def loaded(path, task, conns, depth, secs):
    done = 0
    stop = time.monotonic() + secs

    async def conn():
        nonlocal done
        r, w = await asyncio.open_unix_connection(path, limit=1 << 20)

        def send():
            frame = json.dumps({"id": str(uuid.uuid4()), "method": "page.fill",
                                "params": {"taskId": task, "target": "#title", "value": "x"}})
            w.write((frame + "\n").encode())
        for _ in range(depth):
            send()
        inflight = depth
        while inflight:
            await r.readline()
            done += 1
            inflight -= 1
            if time.monotonic() < stop:
                send()
                inflight += 1
        w.close()

    t = time.monotonic()
    await asyncio.gather(*(conn() for _ in range(conns)))
    return done / (time.monotonic() - t), done


def main():
    for journal in (False, True):
        root = tempfile.mkdtemp(prefix="pjr", dir="/tmp")
        p, _ = start(root, journal)
        path = f"{root}/s/bridge.sock"
        task = asyncio.run(one(path, "task.start", {"title": "bench"}))["result"]["taskId"]
        p50, p99 = asyncio.run(sequential(path, task, 2000))
        rate, total = asyncio.run(loaded(path, task, 32, 16, 5.0))
        mode = "journal" if journal else "no journal"
        print(f"{mode:>10}: one client p50 {p50:.3f} ms p99 {p99:.3f} ms; "
              f"32x16 in flight {rate:,.0f} fresh mutations/s ({total} in 5 s)")
        if journal:
            status = asyncio.run(one(path, "run.status", {}))["result"]
            used = status["receipts"]["used"]
            jb = status["journal"]["bytes"]
            print(f"{'':>10}  journal {jb:,} bytes for {used:,} receipts "
                  f"({jb / used:.0f} bytes per receipt incl. task records)")
            p.send_signal(signal.SIGKILL)
            p.wait()
            p, took = start(root, journal)
            print(f"{'':>10}  kill -9, restart: host.hello answers after {took:.2f} s "
                  f"(recovering {used:,} receipts)")
        p.send_signal(signal.SIGTERM)
        p.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
