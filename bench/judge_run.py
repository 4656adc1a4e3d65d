"""The judge on a GPU (issue 30), one command; bench/final_run.sh's `judge` step runs it:

    OUT=/tmp/out python3 bench/judge_run.py [--budget SECONDS] [--perf-log PATH]

1. The cheat suite, tests/judge, on CUDA: every cheat caught with its exploit named, every honest
   twin passing (its tests assert both; the GPU-only cheats run here, not on CPU).
2. The bundled perf suite with --triton-judge (perf tests timed in a supervised child, each timed
   call probed and profiled, every verdict recomputed by the parent): it must pass as it does
   without the judge. Its summary line gives what the default checks and judge mode cost, as
   measured by the checks themselves (judge/cost.py).
3. --perf-log: the log of a perf run with --triton-judge=default (final_run.sh's perf step): the
   default checks' cost in the run BENCHMARKS.md reports.
Writes $OUT/judge.json (bench/render_benchmarks.py renders it) and the logs beside it.
"""

import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COST = re.compile(r"pytest-triton judge: the default checks took ([\d.e+-]+) s of the tests' "
                  r"([\d.e+-]+) s \(([\d.e+-]+)%\)(?:; --triton-judge's checks ([\d.e+-]+) s more "
                  r"\(([\d.e+-]+)%\))?")
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)")


def _run(cmd, log, limit, cwd=ROOT):
    t0 = time.time()
    try:
        with open(log, "w") as f:
            rc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                                timeout=limit).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    return rc, round(time.time() - t0, 1), open(log, errors="replace").read()


def _summary(text):
    last = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    counts = {k: int(n) for n, k in COUNTS.findall(last[-1])} if last else {}
    return (last[-1].strip("= ") if last else ""), counts


def _cost(text):
    m = COST.search(text)
    if not m:
        return None
    d = {"line": m.group(0), "default_s": float(m.group(1)), "tests_s": float(m.group(2)),
         "default_pct": float(m.group(3))}
    if m.group(4):
        d.update(judge_s=float(m.group(4)), judge_pct=float(m.group(5)))
    return d


def main(argv):
    out = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out, exist_ok=True)
    budget = float(argv[argv.index("--budget") + 1]) if "--budget" in argv else 540
    t0 = time.time()
    doc = {}
    # -n 4: its GPU tests run pytest inside (a few seconds each); serially they took 90 s and more
    rc, wall, text = _run([sys.executable, "-m", "pytest", "tests/judge", "-q", "-rA", "-n", "4",
                           "-p", "no:cacheprovider", "--timeout", "300"],
                          os.path.join(out, "judge_suite.log"), budget / 2)
    line, counts = _summary(text)
    tests = re.findall(r"^(PASSED|FAILED|SKIPPED|ERROR) (?:\[\d+\] )?(tests/judge/\S+)", text, re.M)
    doc["cheat_suite"] = {"rc": rc, "wall_s": wall, "summary": line, "counts": counts,
                          "tests": [{"outcome": o, "test": t} for o, t in tests]}
    print("cheat suite:", rc, wall, "s:", line, flush=True)
    left = budget - (time.time() - t0) - 10
    rc, wall, text = _run([sys.executable, "-m", "pytest", "--pyargs", "reference_kernels",
                           "--triton-perf", "-m", "perf_target", "--triton-judge", "-q",
                           "-p", "no:cacheprovider", "--benchmark-disable", "-rfE",
                           "--triton-perf-json", os.path.join(out, "judge_perf.json")]
                          # --history DIR: saved there as "judged", one more run of this commit for
                          # final_run.sh's self step to pair with the others
                          + (["--triton-perf-save=judged", "--triton-perf-history",
                              argv[argv.index("--history") + 1]] if "--history" in argv else []),
                          os.path.join(out, "judge_perf.log"), max(left, 30), cwd="/tmp")
    line, counts = _summary(text)
    doc["perf_judged"] = {"rc": rc, "wall_s": wall, "summary": line, "counts": counts,
                          "cost": _cost(text),
                          "failures": [ln for ln in text.splitlines() if ln.startswith(("FAILED", "ERROR"))]}
    print("perf suite with --triton-judge:", rc, wall, "s:", line, flush=True)
    if "--perf-log" in argv:
        path = argv[argv.index("--perf-log") + 1]
        if os.path.exists(path):
            text = open(path, errors="replace").read()
            doc["perf_default"] = {"summary": _summary(text)[0], "cost": _cost(text)}
    with open(os.path.join(out, "judge.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({k: {kk: v.get(kk) for kk in ("summary", "cost")} for k, v in doc.items()},
                     indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
