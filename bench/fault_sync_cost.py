"""What pytest-triton's per-test fault check costs, on a CUDA GPU.

    python3 bench/fault_sync_cost.py            # the estimate (a few seconds)
    python3 bench/fault_sync_cost.py --suite    # and the bundled suite timed with and without it

The check synchronises the device after each test's call and teardown. On a test whose work is
done, that is an idle torch.cuda.synchronize(); on a test that left work queued, the wait moves
from the next synchronising call (there is always one: a comparison, .item(), the next test's
first copy) to the end of this test, so it adds nothing but the call itself.

1. the median of 20000 idle synchronisations;
2. the estimate for the bundled suite: its tests (tests/ and reference_kernels/) x 2 x (1);
3. with --suite: its wall time (pytest -n 8) with the check, and with the check replaced by a
   no-op (a plugin implementing pytest_triton_synchronize); runs vary by more than the estimate.
Writes fault_sync_cost.json under $OUT when set.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

if not torch.cuda.is_available():
    sys.exit("needs a CUDA GPU")
torch.ones(1, device="cuda").sum().item()  # CUDA initialised, device idle
samples = []
for _ in range(20000):
    t = time.perf_counter_ns()
    torch.cuda.synchronize()
    samples.append(time.perf_counter_ns() - t)
idle_us = statistics.median(samples) / 1e3
collected = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"],
                           capture_output=True, text=True).stdout
n_tests = int(re.search(r"(\d+) tests? collected", collected).group(1))
result = {"idle_sync_us": round(idle_us, 2), "tests": n_tests,
          "estimate_s": round(n_tests * 2 * idle_us / 1e6, 3)}
print(f"idle torch.cuda.synchronize(): {idle_us:.2f} us (median of 20000)")
print(f"bundled suite: {n_tests} tests x 2 synchronisations = {result['estimate_s']:.3f} s")

if "--suite" in sys.argv:
    plugin_dir = tempfile.mkdtemp()
    with open(os.path.join(plugin_dir, "triton_nosync.py"), "w") as f:
        f.write("def pytest_triton_synchronize(config, item):\n    return True\n")
    for label, extra, env in (("with the check", [], {}),
                              ("check replaced by a no-op", ["-p", "triton_nosync"],
                               {"PYTHONPATH": os.pathsep.join(
                                   p for p in (plugin_dir, os.environ.get("PYTHONPATH")) if p)})):
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "8", "-p", "no:cacheprovider",
                            *extra], capture_output=True, text=True, env={**os.environ, **env})
        wall = time.perf_counter() - t
        tail = (p.stdout.strip().splitlines() or [""])[-1]
        result[label] = {"wall_s": round(wall, 1), "rc": p.returncode, "summary": tail}
        print(f"suite {label}: {wall:.1f} s, rc {p.returncode}: {tail}")

out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "fault_sync_cost.json"), "w") as f:
        json.dump(result, f, indent=1)
