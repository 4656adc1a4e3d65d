"""What crash supervision costs a CPU user's edit-run loop: wall time of pytest runs, medians.

    python bench/startup.py               # 5 runs of each (about two minutes on 2 cores)
    python bench/startup.py --runs 3 --only one
    python bench/startup.py --root /path/to/another/checkout   # its plugin and softmax file

The plugin measured is the one `python -m pytest` imports from the directory it runs in: the
checkout given by --root (default: this one) for the softmax file, and for the one-line file
whatever PYTHONPATH or the environment holds (set PYTHONPATH=ROOT to compare checkouts).

Runs, each as its own `python -m pytest -q` process, as a user types it (under Triton's
interpreter when no GPU is visible, where --triton-supervise=auto supervises):

1. a one-line test file (`def test_t(): pass`, in a fresh directory): supervised (the default),
   `--triton-supervise=off`, `-p no:triton` (pytest alone), and `import torch, triton` alone;
2. reference_kernels/tests/test_softmax.py (170 tests under the interpreter): supervised and off.

Supervised and off run in pairs, one right after the other (the order alternating), so that a
change in the machine's load falls on both; the ratio is that of the medians, and the median
of the per-pair ratios is shown beside it. Prints the machine (cores) and a table; with OUT set,
writes startup.json there. Not a test: on a shared machine these times vary by a tenth or more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOFTMAX = os.path.join("reference_kernels", "tests", "test_softmax.py")


def _env() -> dict:
    # A run of its own: nothing of an outer pytest (PYTEST_CURRENT_TEST turns auto supervision
    # off) or xdist worker reaches it.
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST_CURRENT_TEST", "PYTEST_XDIST", "PYTEST_ADDOPTS"))}


def _timed(cmd: list[str], cwd: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: failed tests are still a timed run
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}")
    return took


def _pytest(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", *args]


def _paired(runs: int, cwd: str, target: str) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"supervised": [], "off": []}
    modes = {"supervised": _pytest(target), "off": _pytest(target, "--triton-supervise=off")}
    order = ["supervised", "off"]
    for _ in range(runs):
        for mode in order:
            times[mode].append(_timed(modes[mode], cwd))
        order.reverse()
    return times


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", choices=("one", "softmax"), default=None)
    ap.add_argument("--root", default=HERE, help="the checkout whose softmax file (and, from "
                    "there, plugin) is run (default: this one)")
    args = ap.parse_args()
    load_before = _load()
    rows = []  # (case, mode, times)
    if args.only in (None, "one"):
        with tempfile.TemporaryDirectory(prefix="startup-") as d:
            with open(os.path.join(d, "test_t.py"), "w") as f:
                f.write("def test_t(): pass\n")
            _timed(_pytest("test_t.py"), d)  # warm the file cache and Triton's caches first
            paired = _paired(args.runs, d, "test_t.py")
            alone = [_timed(_pytest("test_t.py", "-p", "no:triton"), d) for _ in range(args.runs)]
            bare = [_timed([sys.executable, "-c", "import torch, triton"], d)
                    for _ in range(args.runs)]
        rows += [("one-line test file", m, t) for m, t in paired.items()]
        rows += [("one-line test file", "-p no:triton", alone), ("import torch, triton", "", bare)]
    if args.only in (None, "softmax"):
        _timed(_pytest(SOFTMAX, "--triton-supervise=off"), args.root)
        paired = _paired(args.runs, args.root, SOFTMAX)
        rows += [("test_softmax.py (170 tests)", m, t) for m, t in paired.items()]

    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; {args.runs} runs "
          f"each; checkout {args.root}; load average before {load_before}, after {os.getloadavg()[0]:.2f}")
    print(f"{'case':30} {'mode':14} {'median s':>9} {'min s':>7} {'max s':>7}  ratio to off")
    med = {(c, m): statistics.median(t) for c, m, t in rows}
    for case, mode, times in rows:
        ratio = ""
        if mode == "supervised":
            off = dict(((c, m), t) for c, m, t in rows)[(case, "off")]
            pairs = statistics.median(s / o for s, o in zip(times, off))
            ratio = f"{med[case, mode] / med[case, 'off']:.3f}x (pairs {pairs:.3f}x)"
        print(f"{case:30} {mode:14} {med[case, mode]:9.2f} {min(times):7.2f} {max(times):7.2f}  {ratio}")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "startup.json"), "w") as f:
            json.dump({"cores": os.cpu_count(), "runs": [
                {"case": c, "mode": m, "seconds": t} for c, m, t in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
