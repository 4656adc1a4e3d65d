"""A series of main-job runs of one commit: did any fail a correct kernel, and how close did each
target come to failing (not a test; a step of bench/final_run.sh: `series`).

    python bench/series.py RUN.json|SERIES.json [...] [--json FILE] [--md FILE]
    python bench/series.py --make N [--gpus G] [--first K] [--budget S] --dir DIR [--json FILE]
                           [--md FILE]

--make N runs the main job (`pytest --pyargs reference_kernels --triton-perf -m perf_target`) N
times into DIR (series-I.json and series-I.log), G at once, one on each GPU of a machine of one
model (CUDA_VISIBLE_DEVICES), each its own process with a cold Triton cache of its own, then
reads them as below. Each run's wall time is printed and kept in the JSON.

Each RUN.json is a perf run (`--triton-perf-json`, or a run saved with `--triton-perf-save`).
A run fails when a test other than an expected failure (the negative controls, xfail) failed, or
when one of its targets came out FAIL or INCONCLUSIVE. A target's margin is how far the bound of
its 99% interval that the verdict reads stayed on the passing side of the target, relative to the
target: for a floor (speedup=0.95, bandwidth_frac=0.9, tflops=...) the interval's low end over
the target, minus one; for a ceiling (max_ms=...) the target over the interval's high end, minus
one. A margin under 1% is a target that noise alone may fail: the table marks it.

A SERIES.json (an earlier --json) stands for its runs, each with its margins: series of one
commit made in several sessions or on several machines (a GPU lent for less time than twelve runs
take) join into one. (A later call on the same machine adds its runs to the same --dir, whose
series.json then holds them all.) Refused (exit 2, naming them): runs of different commits (a run
--make makes names its checkout's: .commit, else git's HEAD), runs of a known commit beside runs
of an unknown one, runs of different GPU models, one run twice; and --make into a --dir that
holds runs of another commit, before any run is made.

Prints the runs and the margins, smallest first; --json writes
{"api_version": 2,
 "runs": [{"name", "file", "passed", "failed": [...], "inconclusive": [...], "device",
           "commit", "created", "checks": [{"test", "shape", "target", "short", "asked",
           "margin"}]}],
 "margins": [{"test", "shape", "target", "asked", "smallest", "median", "runs"}]};
--md writes the tables BENCHMARKS.md includes.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
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


def read_run(path: Path, doc: dict | None = None) -> dict:
    doc = json.loads(path.read_text()) if doc is None else doc
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
                inconclusive.append(" ".join(x for x in (r["nodeid"], shape, c["target"]) if x))
            elif c.get("verdict") == "fail" and r["nodeid"] not in failed:
                failed.append(r["nodeid"])
            # keyed by what was asked, not by its text: a fraction of the measured ceiling
            # names that card's own GB/s, which differs between cards of one model
            key = (r["nodeid"].split("::")[-1], shape, c["target"], c.get("asked"))
            checks[key] = (c.get("short") or c["target"], margin(c))
    return {"name": name, "file": str(path), "failed": failed, "inconclusive": inconclusive,
            "passed": not failed and not inconclusive, "checks": checks,
            "device": (doc.get("device") or {}).get("name"), "created": doc.get("created"),
            "commit": (doc.get("run") or {}).get("commit")}  # a saved run's; --make's: .status


CHECK_FIELDS = ("test", "shape", "target", "asked")
# 2: each run keeps its checks (margins), commit and report's creation stamp (1: neither)
API_VERSION = 2
UNKNOWN_COMMIT = "an unknown commit"  # a run's commit where none was recorded


def checks_out(checks: dict) -> list[dict]:
    """A run's checks as JSON: one entry per target, its key's fields, words and margin."""
    return [{**dict(zip(CHECK_FIELDS, key)), "short": short, "margin": m}
            for key, (short, m) in checks.items()]


def checks_in(entries: list[dict]) -> dict:
    """checks_out's entries back into a run's checks."""
    return {tuple(e[f] for f in CHECK_FIELDS): (e["short"], e["margin"]) for e in entries}


def read_series(path: Path, doc: dict) -> list[dict]:
    """The runs of an earlier --json, each with its checks (a file written before the runs kept
    their checks cannot join: ValueError naming it)."""
    if any("checks" not in r for r in doc["runs"]):
        raise ValueError(f"{path}: its runs carry no per-target margins (written by an older "
                         "bench/series.py); give the runs' reports (series-*.json) instead")
    # named by their folder and file too: two calls' series.json both hold a series-0 (a run of
    # a joined series keeps the name it was given when first joined)
    where = f"{path.resolve().parent.name}/{path.stem}"
    return [{**r, "name": r["name"] if ":" in r["name"] else f"{where}:{r['name']}",
             "checks": checks_in(r["checks"])} for r in doc["runs"]]


def same_commit(a: str, b: str) -> bool:
    """Whether two hashes name one commit: a short one is a prefix of the full one."""
    return a.startswith(b) or b.startswith(a)


def mixed(runs: list[dict]) -> str | None:
    """Why these runs are not one series, or None: runs of several commits (or some of an
    unknown one beside runs of a known one), of several GPU models, or one run twice (the same
    report's creation stamp on the same GPU: a later call's series.json holds the runs an
    earlier call left in its folder)."""
    commits: list[tuple[str, list[str]]] = []
    unknown = []
    for r in runs:
        if not r.get("commit"):
            unknown.append(r["name"])
            continue
        group = next((g for g in commits if same_commit(g[0], r["commit"])), None)
        if group is None:
            commits.append((r["commit"], [r["name"]]))
        else:
            group[1].append(r["name"])
    if len(commits) > 1:
        return "runs of different commits: " + "; ".join(
            f"{c} ({', '.join(names)})" for c, names in commits)
    if commits and unknown:
        return f"runs of {commits[0][0]} beside runs of {UNKNOWN_COMMIT} ({', '.join(unknown)})"
    models: dict[str, list[str]] = {}
    for r in runs:
        if r.get("device"):
            models.setdefault(r["device"], []).append(r["name"])
    if len(models) > 1:
        return "runs of different GPU models: " + "; ".join(
            f"{m} ({', '.join(names)})" for m, names in sorted(models.items()))
    seen: dict[tuple, str] = {}
    for r in runs:
        if r.get("created"):
            key = (r["created"], r.get("device"))
            if key in seen:
                return f"one run twice: {seen[key]} and {r['name']} (its report made {key[0]})"
            seen[key] = r["name"]
    return None


def summarize(runs: list[dict]) -> list[dict]:
    """Per target, its smallest and median margin over the runs, smallest first."""
    keys = {k for r in runs for k in r["checks"]}
    rows = []
    for key in keys:
        got = [r["checks"][key] for r in runs if key in r["checks"]]
        margins = [m for _, m in got if m is not None]
        if not margins:
            continue
        rows.append({"test": key[0], "shape": key[1], "target": got[0][0], "asked": key[3],
                     "smallest": min(margins), "median": statistics.median(margins),
                     "runs": len(margins)})
    return sorted(rows, key=lambda row: row["smallest"])


def markdown(runs: list[dict], rows: list[dict], top: int = 25) -> str:
    bad = [r for r in runs if not r["passed"]]
    devices = sorted({r["device"] or "?" for r in runs})
    commits = {r["commit"] for r in runs if r.get("commit")}
    # a commit named short and in full is named once, short
    commits = sorted(c for c in commits if not any(o != c and c.startswith(o) for o in commits))
    at = f" of {', '.join(commits)}" if commits else ""
    out = [f"### The main job, {len(runs)} runs in a row (`bench/series.py`)", "",
           f"{len(runs)} runs{at} on {', '.join(devices)}, each its own process with a cold Triton "
           f"cache: {len(runs) - len(bad)} passed, {sum(bool(r['failed']) for r in runs)} with a "
           f"failed test, {sum(bool(r['inconclusive']) for r in runs)} with an INCONCLUSIVE "
           "target."]
    walls = sorted(r["wall_s"] for r in runs if "wall_s" in r)
    if walls:
        out[-1] += (f" Wall time per run: {walls[0]:.0f}-{walls[-1]:.0f} s (median "
                    f"{statistics.median(walls):.0f} s).")
    out.append("")
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


ESTIMATE_S = 200.0  # a cold run of the main job on an H100 or H200, before one has finished
MAIN_JOB = ["--pyargs", "reference_kernels", "--triton-perf", "-m", "perf_target"]
ROOT = Path(__file__).resolve().parents[1]


def checkout_commit() -> str | None:
    """The commit of the checkout the runs are made from: its .commit file (a GPU machine's copy
    of the tree may carry an older .git than its files), else git's HEAD, else None."""
    stamp = ROOT / ".commit"
    if stamp.exists() and stamp.read_text().strip():
        return stamp.read_text().strip()
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def statuses(folder: Path) -> list[dict]:
    """What each run an earlier call left in `folder` wrote of itself (its .status): exit
    status, wall time, commit."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("series-*.status"))]


def gpu_ids(gpus: int) -> list[str]:
    """The GPUs runs go to, one each at a time: the first `gpus` an outer CUDA_VISIBLE_DEVICES
    names (the others of the machine may be busy with other work), else 0 .. gpus-1."""
    outer = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if outer and len(outer) < gpus:
        raise SystemExit(f"--gpus {gpus}: CUDA_VISIBLE_DEVICES names only {len(outer)}: {outer}")
    return outer[:gpus] if outer else [str(g) for g in range(gpus)]


def make_runs(n: int, gpus: int, folder: Path, first: int = 0, budget: float | None = None,
              commit: str | None = None) -> None:
    """Run the main job n times, `gpus` at once, as series-FIRST ... in `folder`: each run's
    report (.json), output (.log), and pytest's exit status and wall time in s (.status). With a
    `budget` (s), a run that would not finish within it (at the longest run's wall time so far,
    an earlier call's runs in `folder` among them, or ESTIMATE_S before any finished) is not
    started: a run cut short would count as failed."""
    folder.mkdir(parents=True, exist_ok=True)
    start = time.time()
    walls = [status["wall_s"] for status in statuses(folder)]
    free: queue.Queue = queue.Queue()
    for gpu in gpu_ids(gpus):
        free.put(gpu)
    cwd = Path(tempfile.mkdtemp(prefix="series-"))  # not the checkout: the installed package

    def one(i: int) -> None:
        gpu, report = free.get(), folder / f"series-{i}.json"
        if budget is not None and time.time() - start + max(walls, default=ESTIMATE_S) > budget:
            free.put(gpu)
            print(f"series-{i}: not started, it would not end within the {budget:.0f} s budget",
                  flush=True)
            return
        cache = Path(tempfile.mkdtemp(prefix=f"triton-cache-{i}-"))  # a cold Triton cache
        env = {**os.environ, "TRITON_CACHE_DIR": str(cache)}
        if gpus > 1 or "CUDA_VISIBLE_DEVICES" in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=25",
               "--benchmark-disable", *MAIN_JOB, "--triton-perf-json", str(report)]
        t0 = time.time()
        try:
            with open(folder / f"series-{i}.log", "w") as log:
                rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=log,
                                    stderr=subprocess.STDOUT).returncode
        finally:
            free.put(gpu)
            shutil.rmtree(cache, ignore_errors=True)
        wall = time.time() - t0
        walls.append(wall)
        (folder / f"series-{i}.status").write_text(
            json.dumps({"rc": rc, "wall_s": round(wall, 1), "commit": commit}))
        print(f"series-{i}: rc={rc} in {wall:.0f} s on GPU {gpu}", flush=True)

    with ThreadPoolExecutor(max_workers=gpus) as pool:
        list(pool.map(one, range(first, first + n)))


def made_runs(folder: Path) -> list[Path]:
    """The runs --make left in `folder` (an earlier call's too), in order: their reports, made
    or not (a run that crashed or was stopped wrote none)."""
    logs = folder.glob("series-*.log")
    return sorted((p.with_suffix(".json") for p in logs), key=lambda p: int(p.stem.split("-")[1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", type=Path, metavar="RUN.json")
    p.add_argument("--make", type=int, default=0, metavar="N", help="runs of the main job to make")
    p.add_argument("--gpus", type=int, default=1, help="runs at once, one on each GPU")
    p.add_argument("--first", type=int, default=0, help="--make numbers its runs from FIRST "
                   "(a later call adds to the runs an earlier one left in --dir)")
    p.add_argument("--dir", type=Path, help="where --make writes its runs")
    p.add_argument("--budget", type=float, help="seconds --make may take: a run that would not "
                   "end within them is not started")
    p.add_argument("--json", type=Path, help="write the runs and margins as JSON")
    p.add_argument("--md", type=Path, help="write the Markdown tables")
    p.add_argument("--top", type=int, default=25, help="margins listed in the tables")
    args = p.parse_args(argv)
    made = []
    if args.make:
        if args.dir is None or args.gpus < 1:
            p.error("--make N needs --dir DIR and --gpus >= 1")
        commit = checkout_commit()
        mine = commit or UNKNOWN_COMMIT
        earlier = {c for c in (s.get("commit") or UNKNOWN_COMMIT for s in statuses(args.dir))
                   if not same_commit(c, mine)}
        if earlier:  # refused before the GPU time is spent, not after
            print(f"series: refused: {args.dir} holds runs of {', '.join(sorted(earlier))}, and "
                  f"this checkout is {commit or 'of ' + UNKNOWN_COMMIT}: give a folder of its own",
                  file=sys.stderr)
            return 2
        make_runs(args.make, args.gpus, args.dir, args.first, args.budget, commit)
        made = made_runs(args.dir)
    paths = [*args.runs, *made]
    if not paths:
        p.error("no runs: give RUN.json files or --make N")
    runs = []
    for path in paths:
        doc = json.loads(path.read_text()) if path.exists() else None
        if isinstance(doc, dict) and "margins" in doc and "runs" in doc:  # an earlier --json
            try:
                runs += read_series(path, doc)
            except ValueError as exc:
                print(f"series: refused: {exc}", file=sys.stderr)
                return 2
            continue
        if doc is None:  # a run that wrote no report (it crashed, or was stopped)
            runs.append({"name": path.stem, "file": str(path), "failed": ["(no report)"],
                         "inconclusive": [], "passed": False, "checks": {}, "device": None,
                         "commit": None})
        else:
            runs.append(read_run(path, doc))
        status = path.with_suffix(".status")
        if status.exists():  # a run --make made: its exit status fails it too (UNCHECKED, say)
            runs[-1].update(json.loads(status.read_text()))
            if runs[-1]["rc"] != 0 and not runs[-1]["failed"]:
                runs[-1]["failed"].append(f"(pytest exit status {runs[-1]['rc']})")
                runs[-1]["passed"] = False
    why = mixed(runs)
    if why:
        print(f"series: refused: {why}", file=sys.stderr)
        return 2
    rows = summarize(runs)
    text = markdown(runs, rows, args.top)
    print(text)
    if args.md:
        args.md.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(
            {"api_version": API_VERSION,
             "runs": [{**r, "checks": checks_out(r["checks"])} for r in runs],
             "margins": rows}, indent=1))
    return 0 if all(r["passed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
