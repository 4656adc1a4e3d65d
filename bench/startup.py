"""What crash supervision costs a CPU user's edit-run loop: wall time of pytest runs, medians.

    python bench/startup.py               # 5 runs of each (about two minutes on 2 cores)
    python bench/startup.py --runs 3 --only one
    python bench/startup.py --root /path/to/another/checkout   # its plugin and softmax file
    python bench/startup.py --runs 10 --against /path/to/another/checkout   # one-line file, both

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


def _env(pythonpath: str | None = None) -> dict:
    # A run of its own: nothing of an outer pytest (PYTEST_CURRENT_TEST turns auto supervision
    # off) or xdist worker reaches it.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_CURRENT_TEST", "PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return env


def _timed(cmd: list[str], cwd: str, pythonpath: str | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=_env(pythonpath), stdout=subprocess.PIPE,
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


def _against(runs: int, cwd: str, other: str) -> list[tuple[str, str, list[float]]]:
    """The one-line file under this checkout's plugin and `other`'s (PYTHONPATH), each mode's
    runs of the two alternating, so that a change in the machine's load falls on both."""
    modes = {"supervised": _pytest("test_t.py"),
             "off": _pytest("test_t.py", "--triton-supervise=off"),
             "-p no:triton": _pytest("test_t.py", "-p", "no:triton")}
    roots = {"this checkout": HERE, os.path.basename(other.rstrip("/")) or other: other}
    times = {(r, m): [] for r in roots for m in modes}
    order = list(roots)
    for _ in range(runs):
        for mode, cmd in modes.items():
            for root in order:
                times[root, mode].append(_timed(cmd, cwd, pythonpath=roots[root]))
        order.reverse()  # neither checkout always goes first
    return [(f"one-line, {root}", mode, times[root, mode]) for root in roots for mode in modes]


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", choices=("one", "softmax"), default=None)
    ap.add_argument("--root", default=HERE, help="the checkout whose softmax file (and, from "
                    "there, plugin) is run (default: this one)")
    ap.add_argument("--against", default=None, help="another checkout: the one-line file under "
                    "its plugin (PYTHONPATH) and this one's, alternating (as --only one)")
    args = ap.parse_args()
    load_before = _load()
    rows = []  # (case, mode, times)
    if args.against:
        with tempfile.TemporaryDirectory(prefix="startup-") as d:
            with open(os.path.join(d, "test_t.py"), "w") as f:
                f.write("def test_t(): pass\n")
            _timed(_pytest("test_t.py"), d)
            rows += _against(args.runs, d, os.path.abspath(args.against))
    elif args.only in (None, "one"):
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
    if args.only in (None, "softmax") and not args.against:
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
    if args.against:
        cases = list(dict.fromkeys(c for c, _, _ in rows))
        for mode in ("supervised", "off", "-p no:triton"):
            print(f"{mode}: this checkout / {cases[1].split(', ', 1)[1]}: "
                  f"{med[cases[0], mode] / med[cases[1], mode]:.3f}x")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "startup.json"), "w") as f:
            json.dump({"cores": os.cpu_count(), "runs": [
                {"case": c, "mode": m, "seconds": t} for c, m, t in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
