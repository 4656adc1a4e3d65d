"""The work counts of the bundled perf suite's dry runs, run again and again on CPU: identical
every time, or the work gate cannot be exact (not a test; run on a machine without a GPU).

    python bench/work_repeat.py [--runs 20] [--jobs 2] [--target PYTEST_ARGS] [--json FILE]

Each run is its own pytest process: `pytest --pyargs reference_kernels -m perf_target
--triton-perf --triton-perf-allow-unchecked --triton-perf-json RUN.json` under Triton's
interpreter. The counts of every test's dry-run calls (bytes loaded and stored, atomic lanes,
FLOPs, programs, launches, launch by launch) are compared with the first run's. Prints how many
runs agree with the first, test by test where one does not; exit status 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _compared(work: dict | None) -> dict | None:
    """A dry call's work as the work gate compares it: the kernels' counts, not torch's (a
    buffer a launcher keeps is filled by whichever test calls it first: env/work.py)."""
    if work is None:
        return None
    out = {k: v for k, v in work.items() if k != "torch"}
    if "kernels" in out:
        out["kernels"] = [_compared(k) for k in out["kernels"]]
    return out


def counts(report: Path) -> dict:
    """{nodeid: [each dry call's work]} of a --triton-perf-json report."""
    doc = json.loads(report.read_text())
    return {r["nodeid"]: [_compared(c.get("work")) for c in r.get("dry_calls", [])]
            for r in doc["results"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--jobs", type=int, default=2, help="runs at once")
    p.add_argument("--target", default="--pyargs reference_kernels -m perf_target")
    p.add_argument("--json", type=Path, help="write each run's differences as JSON")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="work-repeat-"))
    env = {**os.environ, "TRITON_INTERPRET": "1"}

    def one(i: int) -> Path:
        report = tmp / f"run-{i}.json"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        *shlex.split(args.target), "--triton-perf", "--triton-perf-allow-unchecked",
                        "--triton-perf-json", str(report)], cwd=tmp, env=env,
                       capture_output=True, text=True)
        return report

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        reports = list(pool.map(one, range(args.runs)))
    missing = [r.name for r in reports if not r.exists()]
    if missing:
        print(f"runs that wrote no report: {missing}")
        return 1
    first = counts(reports[0])
    counted = sum(any(w for w in calls) for calls in first.values())
    differ = {}
    for r in reports[1:]:
        other = counts(r)
        bad = sorted(n for n in set(first) | set(other) if first.get(n) != other.get(n))
        if bad:
            differ[r.name] = bad
    print(f"{args.runs} runs of `pytest {args.target}` (dry runs): {len(first)} tests, {counted} "
          f"with counted work; {args.runs - 1 - len(differ)} of {args.runs - 1} runs count "
          "exactly what the first counted")
    for name, bad in differ.items():
        print(f"  {name}: {len(bad)} tests differ, e.g. {bad[:3]}")
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "tests": len(first),
                                         "counted": counted, "differ": differ}, indent=1))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
