#!/usr/bin/env python3
# Usage: python3 scripts/mcp_latency.py target/release/polaris [N]
# Round-trip latency of polaris mcp tool calls vs the raw bridge, same host, same harness.
import json, os, socket, statistics, subprocess, sys, tempfile, time
BIN = sys.argv[1]; N = int(sys.argv[2]) if len(sys.argv) > 2 else 500
d = tempfile.mkdtemp(prefix="pl", dir="/tmp")
host = subprocess.Popen([BIN, "serve", "--socket-dir", d, "--audit-log", d + "/a.jsonl"], stderr=subprocess.DEVNULL)
for _ in range(200):
    if os.path.exists(d + "/bridge.sock"): break
    time.sleep(0.02)
time.sleep(0.2)
s = socket.socket(socket.AF_UNIX); s.connect(d + "/bridge.sock"); f = s.makefile("rwb")
def bridge(method, params, rid):
    f.write((json.dumps({"id": rid, "method": method, "params": params}) + "\n").encode()); f.flush()
    return json.loads(f.readline())
task = bridge("task.start", {"title": "bench"}, "t0")["result"]["taskId"]
mcp = subprocess.Popen([BIN, "mcp", "--socket-dir", d], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
n = [0]
def rpc(method, params):
    n[0] += 1
    mcp.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n[0], "method": method, "params": params}) + "\n"); mcp.stdin.flush()
    while True:
        m = json.loads(mcp.stdout.readline())
        if m.get("id") == n[0]: return m
rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}})
mcp.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"); mcp.stdin.flush()
def measure(fn):
    for i in range(50): fn(i)
    t = []
    for i in range(N):
        a = time.perf_counter(); fn(i); t.append((time.perf_counter() - a) * 1e6)
    t.sort(); return statistics.median(t), t[int(len(t) * 0.99)]
res = {
 "bridge page.read": measure(lambda i: bridge("page.read", {"taskId": task, "target": "#title"}, f"r{i}-{time.time_ns()}")),
 "mcp page_read": measure(lambda i: rpc("tools/call", {"name": "page_read", "arguments": {"task_id": task, "target": "#title"}})),
 "bridge page.fill": measure(lambda i: bridge("page.fill", {"taskId": task, "target": "#title", "value": str(i)}, f"f{i}-{time.time_ns()}")),
 "mcp page_fill": measure(lambda i: rpc("tools/call", {"name": "page_fill", "arguments": {"task_id": task, "target": "#title", "value": str(i)}})),
}
for k, (med, p99) in res.items(): print(f"{k:18s} median {med:7.0f} us   p99 {p99:7.0f} us   (n={N})")
mcp.stdin.close(); mcp.wait(); host.terminate(); host.wait()
