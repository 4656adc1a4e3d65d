"""The issue's five-test file on a CUDA GPU, as a user sees it (issue 13): an out-of-memory perf
test, an innocent test, a Triton kernel storing far outside any allocation, two innocent tests.

    python3 bench/fault_demo.py

Runs it in-process and with -n 2, prints each run's failures, pytest-triton summary and last
line, and writes the full logs (fault_demo_*.log) under $OUT when set. Expected: 2 failed (the
out-of-memory test, the illegal access) and 3 passed, rc 1, in both runs.
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.plugin.test_gpu_faults import FIVE  # noqa: E402

work = tempfile.mkdtemp()
with open(os.path.join(work, "test_five.py"), "w") as f:
    f.write(FIVE)
out = os.environ.get("OUT")
for label, extra in (("in-process", []), ("n2", ["-n", "2"])):
    p = subprocess.run([sys.executable, "-m", "pytest", "test_five.py", "--triton-perf", "-rf",
                        "-p", "no:cacheprovider", *extra], cwd=work, capture_output=True, text=True)
    log = p.stdout + p.stderr
    if out:
        with open(os.path.join(out, f"fault_demo_{label}.log"), "w") as f:
            f.write(log)
    lines = log.splitlines()
    start = next((i for i, ln in enumerate(lines) if "= FAILURES =" in ln), 0)
    print(f"===== {label}: rc {p.returncode} =====")
    print("\n".join(lines[start:]))
