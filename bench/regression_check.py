"""Issue 29's GPU check: planted slowdowns and a commit against itself, each run a separate
pytest process as in CI (not a test; a step of bench/final_run.sh: `regress`).

    python bench/regression_check.py [--runs 10] [--max-time 0.5] [--out DIR] [--replay DIR]

Writes a test file of two perf tests of the bundled kernels, a memory-bound one
(reference_kernels.vector_add, 2^26 float32 elements) and a compute-bound one
(reference_kernels.matmul, 4096^3 fp16), then runs it `--runs` times as it is (the baseline,
saved as base-I) and `--runs` times with a slowdown planted (saved as planted-I), alternating,
each `pytest --triton-perf --triton-perf-save=NAME` in a history directory of its own:

- planted: a 3% slowdown of the vector add, a 10% slowdown of the matmul, in time: more
  elements and more K, sized first on the GPU (CALIBRATE: the smallest sizes that, timed beside
  the baseline in one process, are that much slower);
- then, offline (`python -m pytest_triton compare`): planted-I against base-I (a SLOW is a
  hit), and base-I against base-(I+1) and base-(I+2) (any SLOW is a false verdict, as is a
  FAST). The planted runs are saved in a history of their own, as a pull request's run is
  compared from outside main's.

Prints the counts per test and writes regression_check.json (every comparison's verdict,
change and interval) under --out, and the runs' saved records (each with its measurements' raw
samples, clocks and autotuned configs) under --out/regression_history (the baseline's) and
--out/regression_history_planted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = '''
import os

import pytest
import torch

from pytest_triton import perf_target
from reference_kernels import matmul, vector_add
from reference_kernels.matmul import matmul_kernel_for

SMALL = os.environ.get("REGRESSION_CHECK_SMALL") == "1"  # a smoke test on CPU
MEM = float(os.environ.get("PLANT_MEMORY", "1"))
MM = float(os.environ.get("PLANT_MATMUL", "1"))


@perf_target(bandwidth_frac=0.05)  # floors any GPU clears: what is checked is the compare
def test_vector_add(make_tensor, triton_bench):
    n = int(2 ** (12 if SMALL else 26) * MEM)
    x, y = make_tensor((n,), dtype=torch.float32), make_tensor((n,), dtype=torch.float32)
    out = torch.empty_like(x)
    triton_bench(lambda: vector_add.vector_add(x, y, out=out), bytes=3 * 4 * n)


@perf_target(tflops_frac=0.05)
def test_matmul(make_tensor, triton_bench):
    m = n = 64 if SMALL else 4096
    k = int(m * MM) // 64 * 64 or 64
    a = make_tensor((m, k), dtype=torch.float16)
    b = make_tensor((k, n), dtype=torch.float16)
    out = torch.empty(m, n, dtype=torch.float16, device=a.device)
    # kernel=: each run's record names the config the autotuner chose (on the H100 one baseline
    # process of ten ran this matmul 13-15% slower at 90.6% of cuBLAS, the others 102-106%)
    triton_bench(lambda: matmul.matmul(a, b, out=out), flops=2 * m * n * k, dtype=torch.float16,
                 kernel=matmul_kernel_for(a, b, out=out))
'''

PLANTED = {"PLANT_MEMORY": "1.03", "PLANT_MATMUL": "1.10"}  # the slowdowns, in time
# Sizes are what a plant changes, and time does not follow size one for one: on the H200 3% more
# elements made the vector add 1.7-2.7% slower (on the H100 2.3-3.1%), and 10% more K the matmul
# 6-10%. So each plant is sized on the GPU first: the smallest step up the ladder whose time,
# timed interleaved with the baseline's in one process, is slower by the planted fraction.
CALIBRATE = """
import json, math, statistics
import torch
from pytest_triton import TimingSettings, measure
from reference_kernels import matmul, vector_add

settings, dev = TimingSettings(l2="cold", max_time=0.5), "cuda:0"

def ratio(fn, base):
    t = measure(fn, base, settings, dev)
    return statistics.median(t.ms) / statistics.median(t.baseline_ms)

def add(factor):
    n = int(2 ** 26 * factor)
    x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
    out = torch.empty_like(x)
    return lambda: vector_add.vector_add(x, y, out=out)

def mm(k):
    a = torch.randn(4096, k, device=dev, dtype=torch.float16)
    b = torch.randn(k, 4096, device=dev, dtype=torch.float16)
    out = torch.empty(4096, 4096, device=dev, dtype=torch.float16)
    return lambda: matmul.matmul(a, b, out=out)

def size(name, want, base, steps, make, factor):
    ladder = []
    for step in steps:
        r = ratio(make(step), base)
        ladder.append([factor(step), r])
        if r >= want:
            break
    return {name: repr(ladder[-1][0]), name + "_time": ladder[-1][1], name + "_ladder": ladder}

found = size("PLANT_MEMORY", WANT_MEMORY, add(1.0), [1 + i / 200 for i in range(6, 41)], add,
             lambda f: f)
found.update(size("PLANT_MATMUL", WANT_MATMUL, mm(4096), range(4480, 6145, 64), mm,
                  lambda k: k / 4096))
print("PLANTS " + json.dumps(found))
"""


def calibrate(folder: Path, log) -> dict:
    """The plants' sizes on this GPU (CALIBRATE, a process of its own): {env name: factor,
    env name + "_time": the time it measured against the baseline's, ... + "_ladder": every
    step tried}; PLANTED's fractions as sizes where it finds none."""
    code = CALIBRATE.replace("WANT_MEMORY", PLANTED["PLANT_MEMORY"]).replace(
        "WANT_MATMUL", PLANTED["PLANT_MATMUL"])
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True)
    log.write(done.stdout + done.stderr)
    for line in done.stdout.splitlines():
        if line.startswith("PLANTS "):
            return json.loads(line[len("PLANTS "):])
    print(f"calibration failed (exit {done.returncode}): the plants are sized as timed", flush=True)
    return dict(PLANTED)


def pytest_save(target: list[str], name: str, history: Path, max_time: float | None, cwd: Path,
                log, env: dict | None = None) -> int:
    """`pytest TARGET --triton-perf --triton-perf-save=NAME` in a process of its own, its output
    to `log`; its exit status (bench/self_compare.py runs the perf suite so too)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *target,
           "--triton-perf", f"--triton-perf-save={name}", "--triton-perf-history", str(history)]
    if max_time is not None:
        cmd += ["--triton-perf-max-time", str(max_time)]
    t0 = time.time()
    rc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, stdout=log,
                        stderr=subprocess.STDOUT).returncode
    print(f"{name}: rc={rc} in {time.time() - t0:.0f} s", flush=True)
    return rc


def command(args: list[str]) -> tuple[int, str]:
    """`python -m pytest_triton ARGS`, the public command, run in this process (a process per
    comparison spent ~3 s importing torch: on the H200 the 27 comparisons ran the step past its
    limit): its exit status and what it printed."""
    printed, argv = io.StringIO(), sys.argv
    sys.argv = ["python -m pytest_triton", *args]
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            runpy.run_module("pytest_triton", run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    return rc, printed.getvalue()


def compare(history: Path, ref: str, new: str) -> dict:
    """`python -m pytest_triton compare REF NEW` over the runs saved in `history`, as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "compare.json"
        rc, printed = command(["compare", "--history", str(history), ref, new, "--json", str(path)])
        if rc not in (0, 1) or not path.exists():
            raise SystemExit(f"compare {ref} {new} failed (exit {rc}):\n{printed}")
        return json.loads(path.read_text())


def saved(history: Path, name: str) -> str:
    """The file of the run saved as `name` in `history` (its newest: files begin with their time)."""
    found = sorted(history.glob(f"*/*-{name}-*.json"), key=lambda p: p.name)
    if not found:
        raise SystemExit(f"no run saved as {name} in {history}")
    return str(found[-1])


def tally(comparisons: list[dict]) -> dict[str, dict[str, int]]:
    """Per test (and shape): {verdict: count}."""
    per_test: dict[str, dict[str, int]] = {}
    for row in comparisons:
        c = per_test.setdefault(row["label"], {})
        c[row["verdict"]] = c.get(row["verdict"], 0) + 1
    return per_test


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--max-time", type=float, default=0.5)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--small", action="store_true",
                   help="tiny sizes: a smoke test of the script on CPU (dry runs, no verdicts)")
    p.add_argument("--replay", metavar="DIR",
                   help="no runs: compare again the runs an earlier check saved under DIR "
                        "(its regression_history and regression_history_planted), with this "
                        "checkout's statistics")
    args = p.parse_args()
    if args.small:
        os.environ["REGRESSION_CHECK_SMALL"] = "1"
    folder = Path(tempfile.mkdtemp(prefix="regression-check-"))
    (folder / "test_planted.py").write_text(TESTS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # The baseline's runs in one history, the planted runs in another, as in CI: main's history
    # holds main's runs, and a pull request's run is compared from outside it. (In one history
    # the planted runs' medians counted in the spread the compare reads from the history.)
    history, planted = folder / "history", folder / "planted"
    if args.replay:
        history = Path(args.replay) / "regression_history"
        planted = Path(args.replay) / "regression_history_planted"
        sized = plants = {"replayed": args.replay}
    else:
        with open(out / "regression_check.log", "w") as log:
            sized = dict(PLANTED) if args.small else calibrate(folder, log)
            plants = {k: v for k, v in sized.items() if k in PLANTED}
            print(f"planted: {plants} (as sizes; in time {PLANTED})", flush=True)
            target = ["-p", "no:randomly", str(folder / "test_planted.py")]
            for i in range(args.runs):
                pytest_save(target, f"base-{i}", history, args.max_time, folder, log)
                pytest_save(target, f"planted-{i}", planted, args.max_time, folder, log, plants)
    # the records first: a step stopped at its limit while comparing still brings them back
    for src, dst in ((history, "regression_history"), (planted, "regression_history_planted")):
        if src.is_dir() and not args.replay:
            shutil.copytree(src, out / dst, dirs_exist_ok=True)
    pairs = [("planted", f"base-{i}", saved(planted, f"planted-{i}")) for i in range(args.runs)]
    pairs += [("self", f"base-{i}", f"base-{j}") for i in range(args.runs)
              for j in (i + 1, i + 2) if j < args.runs]
    results = [{"case": case, "ref": ref, "new": Path(new).name, **row}
               for case, ref, new in pairs for row in compare(history, ref, new)["rows"]]
    counts = {(case, label): c for case in ("planted", "self")
              for label, c in tally([r for r in results if r["case"] == case]).items()}
    for (case, label), c in sorted(counts.items()):
        n = sum(c.values())
        what = "SLOW (hits)" if case == "planted" else "SLOW or FAST (false)"
        bad = c.get("slow", 0) if case == "planted" else c.get("slow", 0) + c.get("fast", 0)
        print(f"{case:8s} {label:40s} {what}: {bad} of {n}   {dict(sorted(c.items()))}")
    (out / "regression_check.json").write_text(json.dumps(
        {"runs": args.runs, "max_time_s": args.max_time, "planted": plants,
         "planted_in_time": PLANTED, "calibration": sized,
         "counts": [{"case": k[0], "label": k[1], **v} for k, v in sorted(counts.items())],
         "comparisons": results}, indent=1))


if __name__ == "__main__":
    main()
