"""Print, as a user sees them, the reports of the GPU-only negative controls of the correctness
checkers (issue 11): programs racing on one atomic float sum (assert_deterministic), and a Triton
store one element past the end of a torch tensor under `pytest --triton-sanitize memcheck`.

    python3 bench/correctness_controls.py

Needs a CUDA GPU (and compute-sanitizer for the second). The tests that assert these outcomes are
tests/plugin/test_determinism.py and tests/plugin/test_sanitize.py; this script only shows the text.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import torch

if not torch.cuda.is_available():
    sys.exit("needs a CUDA GPU")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pytest_triton import TensorFactory, assert_deterministic  # noqa: E402
from tests.plugin.test_determinism import atomic_sum, tree_sum  # noqa: E402
from tests.plugin.test_sanitize import GPU_TESTS  # noqa: E402

print("=== 1. assert_deterministic: 4096 programs atomically adding into one float32 ===")
x = TensorFactory("cuda", 0)(1 << 20)
assert_deterministic(lambda: tree_sum(x), runs=10)
print("positive control (per-program partial sums, then one fixed-order sum): passed")
try:
    assert_deterministic(lambda: atomic_sum(x), runs=10)
    print("NEGATIVE CONTROL PASSED: the race did not show in 10 runs")
except AssertionError as exc:
    print(exc)

print("\n=== 2. pytest --triton-sanitize memcheck: a store one past the end, and clean tests ===")
TESTS = GPU_TESTS  # the same tests tests/plugin/test_sanitize.py asserts on
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "test_oob.py"), "w") as f:
        f.write(TESTS)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--triton-sanitize", "memcheck",
                           "-p", "no:cacheprovider", "test_oob.py"], cwd=tmp,
                          capture_output=True, text=True)
    print(proc.stdout[-6000:], proc.stderr[-2000:], f"(exit status {proc.returncode})")
