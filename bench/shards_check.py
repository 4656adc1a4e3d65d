"""Two CI shards merged against one unsharded run: the same tests and the same verdicts.

    python bench/shards_check.py compare MERGED UNSHARDED [--out DIR]
        compares two run files (a merged run and an unsharded one; saved runs or
        --triton-perf-json reports): the tests each holds (perf records, unchecked perf
        targets, every timed test's duration) and each perf record's outcome and verdicts.
        Exit status 1 where they differ, naming each difference.

    python bench/shards_check.py gpu --out DIR [--gpus 0,1] [--unsharded-gpu 2] [-- PYTEST ARGS]
        on a host of 2+ GPUs: the unsharded run (on --unsharded-gpu, at once with the shards
        where it is given, else first on the first GPU), then the shards split by pytest-split
        over the unsharded run's durations, one per GPU at once (CUDA_VISIBLE_DEVICES), each
        saving its run; python -m pytest_triton merge joins them; compare as above. Writes
        DIR/shards.json and DIR/shards.md, and each run's log. PYTEST ARGS default to the bundled
        main job: --pyargs reference_kernels -m perf_target.

Both runs are separate pytest processes: on a GPU a verdict near its target can differ between
any two runs (docs/regressions.md, the series); such a difference is reported with both sides'
verdicts, for a person to judge. Needs pytest-split in the environment (gpu mode only).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MAIN_JOB = ["--pyargs", "reference_kernels", "-m", "perf_target"]


def load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def _verdicts(node, where: str = "") -> list[tuple[str, str]]:
    """Every "verdict" a record holds, with where it sits (measurement, check)."""
    found = []
    if isinstance(node, dict):
        for k, v in sorted(node.items()):
            if k == "verdict" and isinstance(v, str):
                found.append((where, v))
            elif k != "samples":
                found.extend(_verdicts(v, f"{where}/{k}"))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found.extend(_verdicts(v, f"{where}[{i}]"))
    return found


def summary(doc: dict) -> dict:
    """What two runs of the same tests must share: {"records": {nodeid: (outcome, verdicts)},
    "unchecked": [nodeids], "tests": [every test with a duration]}."""
    records = {r["nodeid"]: {"outcome": r.get("outcome"), "verdicts": sorted(_verdicts(r))}
               for r in doc.get("results") or []}
    return {"records": records,
            "unchecked": sorted(u["nodeid"] for u in doc.get("unchecked") or []),
            "tests": sorted(doc.get("durations") or {})}


def differences(merged: dict, unsharded: dict) -> list[str]:
    a, b = summary(merged), summary(unsharded)
    out = []
    for what in ("tests", "unchecked"):
        for nodeid in sorted(set(a[what]) ^ set(b[what])):
            side = "merged" if nodeid in a[what] else "unsharded"
            out.append(f"{what}: {nodeid} only in the {side} run")
    for nodeid in sorted(set(a["records"]) | set(b["records"])):
        ra, rb = a["records"].get(nodeid), b["records"].get(nodeid)
        if ra is None or rb is None:
            out.append(f"records: {nodeid} only in the {'unsharded' if ra is None else 'merged'}"
                       " run")
        elif ra != rb:
            out.append(f"records: {nodeid}: merged {ra}, unsharded {rb}")
    return out


def compare(merged_path: Path, unsharded_path: Path, out: Path | None) -> int:
    merged, unsharded = load(merged_path), load(unsharded_path)
    diffs = differences(merged, unsharded)
    s = summary(unsharded)
    result = {"merged": str(merged_path), "unsharded": str(unsharded_path),
              "tests": len(s["tests"]), "records": len(s["records"]),
              "unchecked": len(s["unchecked"]),
              "shards": [{k: sh.get(k) for k in ("file", "host", "device", "tests")}
                         for sh in (merged.get("run") or {}).get("shards") or []],
              "same": not diffs, "differences": diffs}
    lines = [f"merged {merged_path} against unsharded {unsharded_path}: {result['tests']} "
             f"tests, {result['records']} perf records, {result['unchecked']} unchecked",
             "SAME tests and verdicts" if not diffs else f"{len(diffs)} DIFFERENCES:",
             *diffs]
    print("\n".join(lines))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "shards.json").write_text(json.dumps(result, indent=1))
        (out / "shards.md").write_text("\n\n".join(["# Shards merged against one run", *lines])
                                       + "\n")
    return 0 if not diffs else 1


def _pytest(args: list[str], gpu: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
    print(f"+ CUDA_VISIBLE_DEVICES={gpu} python -m pytest {' '.join(args)}", flush=True)
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def gpu(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    gpus = args.gpus.split(",")
    job = args.pytest_args or MAIN_JOB
    base = [*job, "--triton-perf", "--triton-perf-save=shards-check"]
    started = time.time()
    full = [*base, f"--triton-perf-history={out / 'unsharded'}"]
    shard_runs = []

    def shards() -> list[subprocess.Popen]:
        durations = out / "test_durations.json"
        subprocess.run([sys.executable, "-m", "pytest_triton", "durations", str(out / "unsharded"),
                        "-o", str(durations)], check=True)
        return [_pytest([*base, f"--triton-perf-history={out / f'shard{k}'}",
                         "--splits", str(len(gpus)), "--group", str(k),
                         "--splitting-algorithm", "least_duration",
                         "--durations-path", str(durations)], g, out / f"shard{k}.log")
                for k, g in enumerate(gpus, 1)]

    if args.unsharded_gpu is not None:  # the unsharded run beside the shards: durations of an
        # earlier run are needed to split, so one must exist under DIR/unsharded (or split by count)
        runs = [_pytest(full, args.unsharded_gpu, out / "unsharded.log"), *shards()]
    else:
        first = _pytest(full, gpus[0], out / "unsharded.log")
        first.wait()
        shard_runs = shards()
        runs = [first, *shard_runs]
    codes = [p.wait() for p in runs]
    print(f"exit statuses (unsharded, shards...): {codes}; {time.time() - started:.0f} s")
    merged = out / "merged.json"
    merged.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "pytest_triton", "merge", "-o", str(merged),
                    *[str(out / f"shard{k}") for k in range(1, len(gpus) + 1)]], check=True)
    unsharded = sorted((out / "unsharded").glob("*/*.json"))[-1]
    return compare(merged, unsharded, out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare")
    c.add_argument("merged", type=Path)
    c.add_argument("unsharded", type=Path)
    c.add_argument("--out", type=Path)
    g = sub.add_parser("gpu")
    g.add_argument("--out", required=True)
    g.add_argument("--gpus", default="0,1", help="one shard per GPU, comma list (default 0,1)")
    g.add_argument("--unsharded-gpu", help="run the unsharded run at once on this GPU")
    g.add_argument("pytest_args", nargs="*", help="after --: the job (default the main job)")
    args = p.parse_args(argv)
    if args.command == "compare":
        return compare(args.merged, args.unsharded, args.out)
    return gpu(args)


if __name__ == "__main__":
    sys.exit(main())
