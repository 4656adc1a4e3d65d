"""A series of main-job runs of one commit: did any fail a correct kernel, and how close did each
target come to failing (not a test; a step of bench/final_run.sh: `series`).

    python bench/series.py RUN.json [RUN.json ...] [--json FILE] [--md FILE]

Each RUN.json is a perf run (`--triton-perf-json`, or a run saved with `--triton-perf-save`).
A run fails when a test other than an expected failure (the negative controls, xfail) failed, or
when one of its targets came out FAIL or INCONCLUSIVE. A target's margin is how far the bound of
its 99% interval that the verdict reads stayed on the passing side of the target, relative to the
target: for a floor (speedup=0.95, bandwidth_frac=0.9, tflops=...) the interval's low end over
the target, minus one; for a ceiling (max_ms=...) the target over the interval's high end, minus
one. A margin under 1% is a target that noise alone may fail: the table marks it.

Prints the runs and the margins, smallest first; --json writes
{"runs": [{"name", "file", "passed", "failed": [...], "inconclusive": [...]}],
 "margins": [{"test", "shape", "target", "asked", "smallest", "median", "runs"}]};
--md writes the tables BENCHMARKS.md includes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# The targets that are ceilings (smaller is better); every other target is a floor.
CEILINGS = {"max_ms"}
NEAR = 0.01  # a margin under this is flagged


def margin(check: dict) -> float | None:
    """How far the verdict's bound of the interval stayed past the target, relative to it."""
    lo, hi = (check.get("ci") or (None, None))
    asked = check.get("asked")
    if asked in (None, 0) or lo is None or hi is None:
        return None
    if check["target"] in CEILINGS:
        return asked / hi - 1
    return lo / asked - 1


def _checks(result: dict):
    """(shape, check) for every target of a test: its shapes' own and its geomean's."""
    for m in result.get("measurements", []):
        for c in m.get("checks", []):
            yield m.get("name") or "", c
    if result.get("geomean"):
        yield "geomean", result["geomean"]


def read_run(path: Path) -> dict:
    doc = json.loads(path.read_text())
    name = (doc.get("run") or {}).get("name") or path.stem
    failed, inconclusive, checks = [], [], {}
    for r in doc["results"]:
        expected_to_fail = r["outcome"] in ("xfailed", "skipped")
        if r["outcome"] == "failed":
            failed.append(r["nodeid"])
        for shape, c in _checks(r):
            if expected_to_fail:
                continue
            if c.get("verdict") == "inconclusive":
                inconclusive.append(f"{r['nodeid']} {shape} {c['target']}".rstrip())
            elif c.get("verdict") == "fail" and r["nodeid"] not in failed:
                failed.append(r["nodeid"])
            checks[(r["nodeid"].split("::")[-1], shape, c.get("short") or c["target"])] = \
                (c.get("asked"), margin(c))
    return {"name": name, "file": str(path), "failed": failed, "inconclusive": inconclusive,
            "passed": not failed and not inconclusive, "checks": checks,
            "device": (doc.get("device") or {}).get("name")}


def summarize(runs: list[dict]) -> list[dict]:
    """Per target, its smallest and median margin over the runs, smallest first."""
    keys = {k for r in runs for k in r["checks"]}
    rows = []
    for key in keys:
        got = [r["checks"][key] for r in runs if key in r["checks"]]
        margins = [m for _, m in got if m is not None]
        if not margins:
            continue
        rows.append({"test": key[0], "shape": key[1], "target": key[2], "asked": got[0][0],
                     "smallest": min(margins), "median": statistics.median(margins),
                     "runs": len(margins)})
    return sorted(rows, key=lambda row: row["smallest"])


def markdown(runs: list[dict], rows: list[dict], top: int = 25) -> str:
    bad = [r for r in runs if not r["passed"]]
    devices = sorted({r["device"] or "?" for r in runs})
    out = [f"{len(runs)} runs on {', '.join(devices)}: {len(runs) - len(bad)} passed, "
           f"{sum(bool(r['failed']) for r in runs)} with a failed test, "
           f"{sum(bool(r['inconclusive']) for r in runs)} with an INCONCLUSIVE target.", ""]
    for r in bad:
        out.append(f"- {r['name']}: failed {r['failed'] or 'none'}; inconclusive "
                   f"{r['inconclusive'] or 'none'}")
    near = [row for row in rows if row["smallest"] < NEAR]
    out += ["", f"Every target's smallest margin over the runs (the {min(top, len(rows))} "
            f"closest of {len(rows)}; {len(near)} under {NEAR:.0%}):", "",
            "| test | shape | target | smallest margin | median margin | runs |",
            "|---|---|---|---|---|---|"]
    for row in rows[:top]:
        flag = " **(under 1%)**" if row["smallest"] < NEAR else ""
        out.append(f"| {row['test']} | {row['shape']} | {row['target']} | "
                   f"{row['smallest']:+.1%}{flag} | {row['median']:+.1%} | {row['runs']} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN.json")
    p.add_argument("--json", type=Path, help="write the runs and margins as JSON")
    p.add_argument("--md", type=Path, help="write the Markdown tables")
    p.add_argument("--top", type=int, default=25, help="margins listed in the tables")
    args = p.parse_args(argv)
    runs = [read_run(path) for path in args.runs]
    rows = summarize(runs)
    text = markdown(runs, rows, args.top)
    print(text)
    if args.md:
        args.md.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(
            {"runs": [{k: v for k, v in r.items() if k != "checks"} for r in runs],
             "margins": rows}, indent=1))
    return 0 if all(r["passed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
