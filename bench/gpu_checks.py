"""The --triton-perf done-when checks, on a GPU. Run from the repo root after the offline install:

    python3 bench/gpu_checks.py

1. the same perf test (a ~130 us kernel) in 5 separate processes: medians within 1%;
2. a one-block kernel: reported time within 1.5x of its CUDA-graph replay time;
3. a kernel made 15% slower on purpose fails 10 of 10 against a target 5% below the good
   kernel's speed, and the good kernel passes 10 of 10;
4. the GPU's clocks and settings are as they were after the runs;
5. pytest-benchmark: --benchmark-autosave, then --benchmark-compare-fail=median:5% catches the
   slower kernel.
Prints a table last; writes gpu_checks.json (and the pytest logs) under $OUT when set.
"""

import json
import os
import subprocess
import sys
import tempfile

OUT = os.environ.get("OUT") or tempfile.mkdtemp()
GATE = "bench/gate/test_gate.py"
rows = []


def pytest(*args, env=None, log=None):
    cmd = [sys.executable, "-m", "pytest", GATE, "--triton-perf", "-p", "no:cacheprovider", "-q", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if log:
        with open(os.path.join(OUT, log), "a") as f:
            f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr + "\n")
    return p


def results(path):
    with open(path) as f:
        doc = json.load(f)
    return {m["nodeid"].split("::")[-1]: m for r in doc["results"] for m in r["measurements"]}, doc


def smi():
    q = "clocks.applications.graphics,clocks.applications.memory,power.limit,persistence_mode,compute_mode,clocks.max.sm"
    p = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
    return p.stdout.strip()


settings_before = smi()

# 1. stability over 5 processes
medians = []
for i in range(5):
    path = os.path.join(OUT, f"stable{i}.json")
    p = pytest("-k", "test_stable", "--triton-perf-json", path, log="stable.log")
    medians.append(results(path)[0]["test_stable"]["median_ms"])
spread = max(medians) / min(medians) - 1
rows.append(("1. 5 processes, medians within 1%", f"{', '.join(f'{m:.4f}' for m in medians)} ms; spread {100 * spread:.2f}%", spread <= 0.01))

# 2. one-block kernel vs CUDA-graph replay
path = os.path.join(OUT, "one_block.json")
pytest("-k", "test_one_block", "--triton-perf-json", path, log="one_block.log")
m = results(path)[0]["test_one_block"]
code = r'''
import torch, sys
sys.path.insert(0, "bench/gate")
from test_gate import _one_block_kernel
x = torch.randn(1024, device="cuda"); out = torch.empty_like(x)
f = lambda: _one_block_kernel[(1,)](x, out, BLOCK=1024, num_warps=4)
f(); torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s): f()
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    for _ in range(1000): f()
g.replay(); torch.cuda.synchronize()
ts = []
for _ in range(20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) / 1000)
print(sorted(ts)[10])
'''
graph_ms = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip().splitlines()[-1])
ratio = m["median_ms"] / graph_ms
rows.append(("2. one-block kernel vs graph replay (<=1.5x)", f"reported {m['median_ms'] * 1e3:.2f} us ({m['method']}, L2 {m['l2']}), graph replay {graph_ms * 1e3:.2f} us: {ratio:.2f}x", ratio <= 1.5))

# 3. 15% slower kernel vs a target 5% below the good kernel
path = os.path.join(OUT, "calib.json")
pytest("-k", "test_good", "--triton-perf-json", path, env={"GATE_REPS": "1", "GATE_GBPS": "1"}, log="gate.log")
good_gbps = results(path)[0]["test_good[0]"]["gbps"]
target = 0.95 * good_gbps
path = os.path.join(OUT, "gate.json")
p = pytest("-k", "test_good or test_slow", "-rA", "--triton-perf-json", path, env={"GATE_GBPS": f"{target:.1f}"}, log="gate.log")
ms, _ = results(path)
good = [v for k, v in ms.items() if k.startswith("test_good")]
slow = [v for k, v in ms.items() if k.startswith("test_slow")]
good_pass = sum(v["verdict"] == "pass" for v in good)
slow_fail = sum(v["verdict"] == "fail" for v in slow)
slow_gbps = sorted(v["gbps"] for v in slow)
rows.append(("3. good passes 10/10, 15%-slower fails 10/10", f"target {target:.0f} GB/s (0.95 x {good_gbps:.0f}); good pass {good_pass}/{len(good)}; slow ({slow_gbps[0]:.0f}-{slow_gbps[-1]:.0f} GB/s) fail {slow_fail}/{len(slow)}; pytest rc {p.returncode}", good_pass == len(good) == 10 and slow_fail == len(slow) == 10 and p.returncode == 0))

# 5. pytest-benchmark compare
store = os.path.join(tempfile.mkdtemp(), "bench")
a = pytest("-k", "test_compare", "--benchmark-autosave", "--benchmark-storage", store, log="compare.log")
b = pytest("-k", "test_compare", "--benchmark-compare", "--benchmark-compare-fail=median:5%", "--benchmark-storage", store, env={"GATE_SLOW": "1"}, log="compare.log")
caught = a.returncode == 0 and b.returncode != 0 and "regressed" in (b.stdout + b.stderr)
rows.append(("5. pytest-benchmark compare catches the slower kernel", f"autosave rc {a.returncode}; compare rc {b.returncode}", caught))

# 4. settings unchanged
settings_after = smi()
rows.append(("4. clocks/settings unchanged", f"before [{settings_before}] after [{settings_after}]", settings_before == settings_after))

with open(os.path.join(OUT, "gpu_checks.json"), "w") as f:
    json.dump([{"check": c, "result": r, "ok": ok} for c, r, ok in rows], f, indent=1)
print("\n| check | result | ok |\n|---|---|---|")
for c, r, ok in rows:
    print(f"| {c} | {r} | {'yes' if ok else 'NO'} |")
