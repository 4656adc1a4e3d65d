"""The main job on 1, 2 and N GPUs of one host: how near linear pytest-xdist scales it, where each
worker's time goes, and whether every test and target comes out as on one GPU (not a test; a step
of bench/final_run.sh: `scaling`).

    python bench/scaling.py [--gpus N] [--configs 1,4] [--repeat K] [--budget S] [--dir DIR]
                            [--json FILE] [--md FILE]
    python bench/scaling.py --dry [--gpus 2] ...     (on CPU, under Triton's interpreter)

Runs the main job (`pytest --pyargs reference_kernels --triton-perf -m perf_target`, from a
folder outside the checkout, as the perf step of final_run.sh does) once per configuration: on
one GPU (CUDA_VISIBLE_DEVICES=0, no xdist), then `-n 2` on two, then `-n N` on N (each xdist
worker gets its own GPU: the plugin sets its CUDA_VISIBLE_DEVICES). Each configuration starts
cold: a Triton cache (TRITON_CACHE_DIR) and a pytest-triton cache (PYTEST_TRITON_CACHE_DIR: the
measured ceilings) of its own, empty, shared by that configuration's workers.

The runs on several GPUs hand their tests out longest first (the plugin's --triton-order under
xdist) by the durations the one-GPU run took: that run's report is merged into a history folder
(`python -m pytest_triton merge`, after its wall time is taken) which they read
(--triton-perf-history), as a team's CI reads the runs it saved. Where the merge fails they go by
the plugin's estimates, and the tables say which (the report's "order").

Per configuration it keeps the wall time (the pytest process's), the speedup over the one-GPU
run and its fraction of linear, the process's time before and after pytest's session (the
report's "session": start-up and collection, then summaries and the workers' exit), each
worker's busy, idle and tail time and the part of busy spent on its GPU's measured ceilings (the
report's "workers", pytest_triton/report/busy.py), and compares every test's outcome (its JUnit XML) and every
target's verdict (its --triton-perf-json) with the one-GPU run's: the differences are listed by
name. With --budget, a configuration that would not end within what is left (the one-GPU run's
wall time over its GPUs, plus a quarter and the start-up) is not started, and says so; the
first one-GPU run always starts, stopped at the budget.

--repeat K makes K rounds of the configurations, one after another (1, 2, N GPUs, then again),
each cold: a single scaling run moves by several percent (the long tests' sampling converges
sooner or later, and the time a cold worker spends outside its samples varies from run to run),
so a speedup is judged on the median wall times over the rounds, with each round's own and the
spread shown. Each round's configurations are compared with that round's one-GPU run; all rounds
order by the first one-GPU run's durations. A later round starts only where all of it fits the
budget, estimated by the first round's own wall times, a tenth over.

--dry runs the same pipeline on CPU: a small generated suite (a stand-in device whose measure
hook sleeps instead of timing, so verdicts are decided and workers are busy) under
TRITON_INTERPRET=1, `-n 2` for "2 GPUs" (CUDA_VISIBLE_DEVICES has no effect there).

The runs inherit the environment's bytecode settings; bench/final_run.sh compiles the bytecode
beforehand (bench/bytecode.py), and the tables say which way it was.

Writes DIR/scaling-<G>gpu[-r<round>].{json,xml,log} per configuration (the round's suffix with
--repeat over 1), --json (every configuration, its workers and differences, and the medians over
the rounds) and --md (the tables BENCHMARKS.md includes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

START_S = 20.0  # xdist's workers' start-up and collection, added to a configuration's estimate
ROUND_MARGIN = 1.1  # a later round's estimate: the first round's wall times, a tenth over
MAIN_JOB = ["--pyargs", "reference_kernels", "--triton-perf", "-m", "perf_target"]

# --dry: a stand-in device (public names only) whose measure hook sleeps the test's MS[name] and
# reports it, so a target passes or fails the same way every run, and a worker is busy meanwhile.
DRY_CONFTEST = '''
import time
from pytest_triton import DeviceInfo, Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="stand-in", sms=1, dram_gbps=1000.0, tflops={})

def pytest_triton_calibrate(config, device):
    return {"dram_gbps": 900.0, "tflops": {}}

def pytest_triton_measure(config, request, fn, baseline, settings):
    fn()
    ms = request.module.MS.get(request.node.name, 0.5)
    time.sleep(request.module.SLEEP.get(request.node.name, 0.05))
    return Timings(ms=[ms] * 20, baseline_ms=None if baseline is None else [1.0] * 20)
'''
DRY_TESTS = '''
import pytest
from pytest_triton import perf_target

MS = {"test_fails": 5.0}  # 1 MB in 5 ms: 0.2 GB/s, under its target: a FAIL every run
SLEEP = {"test_long": 1.5}  # the long test: one worker busy while the other ends early


@perf_target(gbps=1.0)
@pytest.mark.parametrize("i", range(4))
def test_copy(triton_bench, i):
    triton_bench(lambda: None, bytes=1e6)


@perf_target(gbps=1.0)
def test_long(triton_bench):
    triton_bench(lambda: None, bytes=1e6)


@perf_target(gbps=1.0)
def test_fails(triton_bench):
    triton_bench(lambda: None, bytes=1e6)
'''


def configurations(gpus: int, chosen: str | None = None) -> list[int]:
    """1, 2 and `gpus` GPUs, or those `chosen` names ("1,4"); each once, none over `gpus`, and
    always the one-GPU run the others compare with."""
    wanted = {1, 2, gpus} if not chosen else {1, *(int(n) for n in chosen.split(",") if n.strip())}
    return sorted(n for n in wanted if 1 <= n <= gpus)


def visible_gpus() -> int:
    """The GPUs nvidia-smi lists (CUDA_VISIBLE_DEVICES' count where it is set); 0 without one."""
    outer = os.environ.get("CUDA_VISIBLE_DEVICES")
    if outer is not None:
        return len([g for g in outer.split(",") if g.strip() and g.strip() != "-1"])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines())


def _dry_suite() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="scaling-dry-"))
    (folder / "conftest.py").write_text(DRY_CONFTEST)
    (folder / "test_dry.py").write_text(DRY_TESTS)
    return folder


def run_one(n: int, folder: Path, *, dry: bool, suite: Path | None, timeout: float | None,
            history: Path | None = None, tag: str = "") -> dict:
    """The main job on n GPUs (n workers under xdist where n > 1): its report, JUnit XML, log,
    exit status and wall time. `history`: the saved runs its order reads durations from; `tag`
    ends its files' names (a round's)."""
    stem = folder / f"scaling-{n}gpu{tag}"
    report, junit = stem.with_suffix(".json"), stem.with_suffix(".xml")
    cold = Path(tempfile.mkdtemp(prefix=f"scaling-{n}gpu-cache-"))
    env = {**os.environ, "TRITON_CACHE_DIR": str(cold / "triton"),
           "PYTEST_TRITON_CACHE_DIR": str(cold / "pytest-triton"),
           "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(n))}
    for name in [k for k in env if k.startswith("PYTEST_XDIST") or k == "PYTEST_TRITON_GPU_LOCK_HELD"]:
        env.pop(name)  # a run of its own, not a worker of (nor under the GPU lock of) an outer run
    if dry:
        env["TRITON_INTERPRET"] = "1"
    job = [str(suite), "--triton-perf", "-m", "perf_target"] if dry else MAIN_JOB
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
           "--benchmark-disable", "--durations=40", *job, "--triton-perf-json", str(report),
           "--junitxml", str(junit), *(["-n", str(n)] if n > 1 else []),
           *([f"--triton-perf-history={history}"] if history else [])]
    cwd = tempfile.mkdtemp(prefix="scaling-cwd-")  # not the checkout: the installed package
    t0 = time.time()
    rc = None
    try:
        with open(stem.with_suffix(".log"), "w") as log:
            log.write(" ".join(cmd) + "\n")
            log.flush()
            rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = "stopped at the budget"
    finally:
        shutil.rmtree(cold, ignore_errors=True)
        shutil.rmtree(cwd, ignore_errors=True)
    t1 = time.time()
    return {"gpus": n, "workers": n if n > 1 else 0, "rc": rc, "wall_s": round(t1 - t0, 1),
            "launched": t0, "exited": t1, "report": str(report), "junit": str(junit)}


def save_durations(cfg: dict, history: Path) -> Path | None:
    """The one-GPU run's report merged into `history` (a saved run the later runs' order reads);
    None where that fails (they then order by estimates), with the reason in cfg["history"]."""
    report = Path(cfg["report"])
    if not report.exists():
        cfg["history"] = "no report to save"
        return None
    done = subprocess.run([sys.executable, "-m", "pytest_triton", "merge", "-o", str(history),
                           str(report)], capture_output=True, text=True)
    if done.returncode != 0:
        cfg["history"] = f"merge failed: {(done.stderr or done.stdout).strip()[-300:]}"
        return None
    cfg["history"] = "saved"
    return history


def order_words(cfg: dict) -> str:
    """A configuration's order in a table cell: what its longest-first order went by (its
    report's "order"; a scaling.json of before the reports had one says so)."""
    if "order" not in cfg:
        return "not recorded"
    found = cfg["order"]
    if not found:
        return "collection"
    if found.get("saved") == found.get("tests"):
        return "saved durations"
    return f"estimates for {found['tests'] - found['saved']} of {found['tests']}"


def outcomes(junit: Path) -> dict[str, str]:
    """Every test's outcome in a JUnit XML: passed, failed, error, skipped."""
    found = {}
    if not junit.exists():
        return found
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        found[name] = next((k for k in ("error", "failure", "skipped") if k in kinds), "passed")
        found[name] = {"failure": "failed"}.get(found[name], found[name])
    return found


def verdicts(doc: dict) -> dict[str, str]:
    """Every target's verdict in a perf report: "<test> <shape> <target>" -> verdict, the
    geomean's too."""
    found = {}
    for r in doc.get("results", []):
        for m in r.get("measurements", []):
            for c in m.get("checks", []):
                key = " ".join(x for x in (r["nodeid"], m.get("name") or "", c["target"]) if x)
                found[key] = c.get("verdict")
        if r.get("geomean"):
            found[f"{r['nodeid']} geomean"] = r["geomean"].get("verdict")
    return found


def differences(base: dict, other: dict, what: str) -> list[str]:
    """What differs between two {name: outcome} maps, by name: one line each."""
    out = []
    for name in sorted(set(base) | set(other)):
        a, b = base.get(name, "(absent)"), other.get(name, "(absent)")
        if a != b:
            out.append(f"{what} {name}: {a} on 1 GPU, {b} here")
    return out


def read_one(cfg: dict) -> dict:
    """A configuration's outcomes, verdicts and workers, from the files it wrote."""
    report = Path(cfg["report"])
    doc = json.loads(report.read_text()) if report.exists() else {}
    cfg["outcomes"] = outcomes(Path(cfg["junit"]))
    cfg["verdicts"] = verdicts(doc)
    cfg["worker_times"] = doc.get("workers", [])
    cfg["order"] = doc.get("order")
    # the process's wall time outside pytest's session: start-up and collection (on the xdist
    # controller: before its workers start), and the end (summaries, report, workers' exit)
    times = doc.get("session") or {}
    if times and "launched" in cfg:
        cfg["before_s"] = round(times["start"] - cfg["launched"], 1)
        cfg["after_s"] = round(cfg["exited"] - times["end"], 1)
    cfg["device"] = (doc.get("device") or {}).get("name") or next(
        (d.get("name") for d in (doc.get("environment") or {}).get("devices", [])), None)
    counts: dict[str, int] = {}
    for v in cfg["outcomes"].values():
        counts[v] = counts.get(v, 0) + 1
    cfg["counts"] = counts
    return cfg


def round_of(cfg: dict) -> int:
    """The round a configuration ran in (1 in a scaling.json written before --repeat)."""
    return cfg.get("round", 1)


def one_gpu_runs(configs: list[dict], keep) -> dict[int, dict]:
    """Each round's one-GPU run, by round, where keep(run) holds."""
    return {round_of(c): c for c in configs if c["gpus"] == 1 and keep(c)}


def compare(configs: list[dict]) -> None:
    """Each configuration's speedup over its round's one-GPU run (the first one-GPU run where
    its round has none) and its differences from it."""
    ones = one_gpu_runs(configs, lambda c: not c.get("skipped"))
    first = next(iter(ones.values()), configs[0])
    for cfg in configs:
        if cfg.get("skipped"):
            continue
        base = ones.get(round_of(cfg), first)
        cfg["speedup"] = round(base["wall_s"] / cfg["wall_s"], 3) if cfg["wall_s"] else None
        cfg["of_linear"] = round(cfg["speedup"] / cfg["gpus"], 3) if cfg["speedup"] else None
        cfg["differences"] = (differences(base["outcomes"], cfg["outcomes"], "outcome")
                              + differences(base["verdicts"], cfg["verdicts"], "verdict"))
        if not cfg["outcomes"]:
            cfg["differences"].insert(0, "no JUnit XML: the run wrote none")


def complete(cfg: dict) -> bool:
    """Whether a configuration ran to its end: pytest's exit status 0 or 1 (a test failed), not
    stopped at the budget, interrupted or not run."""
    return not cfg.get("skipped") and cfg.get("rc") in (0, 1)


def expected(one_gpu_s: float, n: int) -> float:
    """A configuration's expected wall time on n GPUs, from a one-GPU run's: a quarter over the
    linear share, plus the workers' start-up."""
    return one_gpu_s / n * 1.25 + START_S


def expected_again(first: dict[int, float], n: int) -> float:
    """A configuration's expected wall time on n GPUs: the first round's own, a tenth over
    (rounds on one host differ by a few percent), else, where the first round has not run n,
    expected() from its one-GPU run."""
    if n in first:
        return first[n] * ROUND_MARGIN
    return expected(first[1], n)


def medians(configs: list[dict]) -> list[dict]:
    """Per GPU count over the rounds that ran it to its end and whose one-GPU run did too: its
    wall times, their median and spread, and the speedup of the medians (the median of those
    rounds' one-GPU runs over this one's), with each of those rounds' own."""
    out = []
    ones = one_gpu_runs(configs, complete)
    for n in sorted({c["gpus"] for c in configs if complete(c)}):
        paired = [c for c in configs if c["gpus"] == n and complete(c)
                  and round_of(c) in ones]
        if not paired:
            continue
        walls = [c["wall_s"] for c in paired]
        base = statistics.median(ones[round_of(c)]["wall_s"] for c in paired)
        mid = statistics.median(walls)
        speedup = round(base / mid, 3) if mid else None
        out.append({"gpus": n, "runs": len(walls), "walls_s": walls,
                    "median_s": round(mid, 1), "min_s": min(walls), "max_s": max(walls),
                    "speedup": speedup,
                    "of_linear": round(speedup / n, 3) if speedup else None,
                    "speedups": [c.get("speedup") for c in paired]})
    return out


def _x(value, fmt: str, unit: str = "") -> str:
    """A speedup or fraction in a table cell: n/a where there is none (no one-GPU run, or a wall
    time of 0)."""
    return "n/a" if value is None else format(value, fmt) + unit


def torch_bytecode(prefix: str) -> str | None:
    """Where a process with PYTHONPYCACHEPREFIX=prefix reads torch's __init__ bytecode (None
    without torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    before = sys.pycache_prefix
    sys.pycache_prefix = os.path.abspath(prefix)
    try:
        return importlib.util.cache_from_source(os.path.abspath(spec.origin))
    finally:
        sys.pycache_prefix = before


def bytecode_state() -> str:
    """How the runs' Python gets its modules' bytecode: a cache compiled beforehand (torch's in
    the PYTHONPYCACHEPREFIX folder, bench/bytecode.py), a cache the first run fills, compiled
    from source in every process (PYTHONDONTWRITEBYTECODE on an install without .pyc files), or
    as installed."""
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    if prefix:
        path = torch_bytecode(prefix)
        return "precompiled" if path and os.path.exists(path) else "cache filled by the runs"
    return "not written" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "as installed"


BYTECODE_WORDS = {
    "precompiled": "Python's bytecode compiled before every configuration (bench/bytecode.py), "
                   "as a pip install leaves it. ",
    "cache filled by the runs": "Python's bytecode cache (PYTHONPYCACHEPREFIX) was empty at the "
                                "start: the first configuration filled it for the others. ",
    "not written": "Python writes no bytecode (PYTHONDONTWRITEBYTECODE): where the install has "
                   "no .pyc files, every process compiles what it imports. ",
}


def markdown(configs: list[dict], dry: bool, bytecode: str | None = None) -> str:
    """The tables BENCHMARKS.md shows (bench/render_benchmarks.py renders them from scaling.json):
    each configuration against the one-GPU run, what differs, and each worker's time; with
    several rounds (--repeat), first the medians over them, and a round column in the others."""
    ran = [c for c in configs if not c.get("skipped")]
    device = next((c["device"] for c in ran if c.get("device")), "?")
    rounds = max((round_of(c) for c in configs), default=1)
    col, sep = ("round | ", "---|") if rounds > 1 else ("", "")

    def r(c):
        return f"{round_of(c)} | " if rounds > 1 else ""

    counts = [str(n) for n in sorted({c["gpus"] for c in configs})]
    on = " and ".join(filter(None, [", ".join(counts[:-1]), counts[-1]])) if counts else "no"
    out = [f"### Several GPUs: the main job on {on} GPUs of one host (`bench/scaling.py"
           f"{' --dry' if dry else ''}{f' --repeat {rounds}' if rounds > 1 else ''}`)", "",
           f"On {device}; each configuration cold (an empty Triton cache and ceilings cache of its "
           "own, shared by its workers); one GPU without xdist, N GPUs with `-n N`, one worker per "
           "GPU. " + BYTECODE_WORDS.get(bytecode, "")
           + "Speedup: the one-GPU run's wall time over this one's"
           + (" (in a round, over that round's one-GPU run)." if rounds > 1 else "."), ""]
    if rounds > 1:
        out += [f"Over {rounds} rounds, one after another, each configuration cold each time: "
                "the median wall time, the spread, and the speedup of the medians (the one-GPU "
                "median over this one's), with each round's own.", "",
                "| GPUs | runs | wall s, median | wall s, min-max | speedup of the medians | "
                "of linear | each round's speedup |",
                "|---|---|---|---|---|---|---|"]
        for m in medians(configs):
            each = ", ".join(_x(x, ".2f", "x") for x in m["speedups"])
            out.append(f"| {m['gpus']} | {m['runs']} | {m['median_s']:.1f} | "
                       f"{m['min_s']:.1f}-{m['max_s']:.1f} | {_x(m['speedup'], '.2f', 'x')} | "
                       f"{_x(m['of_linear'], '.0%')} | {each} |")
        out.append("")
    out += ["Order: the order tests went in (several GPUs: longest first by the durations the "
            "one-GPU run saved, where it saved them).", "",
            f"| {col}GPUs | wall s | speedup | of linear | before session s | after session s | "
            "order | tests | pytest rc | same outcomes and verdicts |",
            f"|{sep}---|---|---|---|---|---|---|---|---|---|"]
    for c in configs:
        if c.get("skipped"):
            out.append(f"| {r(c)}{c['gpus']} | not run: {c['skipped']} | | | | | | | | |")
            continue
        tests = ", ".join(f"{n} {k}" for k, n in sorted(c["counts"].items()))
        same = "yes" if not c["differences"] else f"**no, {len(c['differences'])} differ**"
        outside = " | ".join("" if c.get(k) is None else f"{c[k]:.1f}" for k in ("before_s", "after_s"))
        out.append(f"| {r(c)}{c['gpus']} | {c['wall_s']:.1f} | {_x(c['speedup'], '.2f', 'x')} | "
                   f"{_x(c['of_linear'], '.0%')} | {outside} | {order_words(c)} | "
                   f"{tests or 'none'} | {c['rc']} | {same} |")
    for c in ran:
        if c["differences"]:
            where = f" (round {round_of(c)})" if rounds > 1 else ""
            out += ["", f"What differs on {c['gpus']} GPUs{where} from one:", ""]
            out += [f"- {d}" for d in c["differences"][:40]]
            if len(c["differences"]) > 40:
                out.append(f"- ... and {len(c['differences']) - 40} more (scaling.json)")
    out += ["", "Each worker's time (the JSON report's `workers`: busy = its tests' setup, call and "
            "teardown, the setups' and teardowns' part shown apart; idle = the session's wall time "
            "less busy; start = until its first test; "
            "tail = after its last test; ceilings = of busy, looking for its GPU's measured "
            "ceilings, measuring them in a cold run):", "",
            f"| {col}GPUs | worker | GPU | tests | busy s | setups s | teardowns s | ceilings s | "
            "idle s | start s | tail s | busy |",
            f"|{sep}---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in ran:
        for w in c["worker_times"]:
            def s(key, w=w):
                return "" if w.get(key) is None else f"{w[key]:.1f}"
            busy = "" if w.get("busy_frac") is None else f"{w['busy_frac']:.0%}"
            out.append(f"| {r(c)}{c['gpus']} | {w['worker']} | {w.get('gpu') or ''} | "
                       f"{w['tests']} | {s('busy_s')} | {s('setup_s')} | {s('teardown_s')} | "
                       f"{s('calibration_s')} | {s('idle_s')} | {s('start_s')} | "
                       f"{s('tail_s')} | {busy} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, help="GPUs of the host to scale to (default: those "
                   "nvidia-smi lists; 2 with --dry)")
    p.add_argument("--configs", help="the GPU counts to run, as 1,4 (default: 1, 2 and --gpus; "
                   "the one-GPU run is always made)")
    p.add_argument("--budget", type=float, help="seconds the configurations may take: one that "
                   "would not end within what is left is not run")
    p.add_argument("--dir", type=Path, help="where each configuration's report, XML and log go "
                   "(default: a new temporary folder)")
    p.add_argument("--json", type=Path, help="write every configuration as JSON")
    p.add_argument("--md", type=Path, help="write the Markdown tables")
    p.add_argument("--repeat", type=int, default=1, metavar="K", help="rounds of the "
                   "configurations, each cold; the speedup is judged on the medians (default 1)")
    p.add_argument("--dry", action="store_true", help="on CPU: a small stand-in suite under "
                   "Triton's interpreter, -n 2 for two GPUs (the pipeline, not a measurement)")
    args = p.parse_args(argv)
    gpus = args.gpus if args.gpus is not None else (2 if args.dry else visible_gpus())
    if gpus < 1:
        p.error(f"--gpus {gpus}: no GPU to run on (give --gpus N, or --dry on CPU)")
    if args.repeat < 1:
        p.error(f"--repeat {args.repeat}: give 1 round or more")
    folder = args.dir or Path(tempfile.mkdtemp(prefix="scaling-"))
    folder.mkdir(parents=True, exist_ok=True)
    suite = _dry_suite() if args.dry else None
    start, configs = time.time(), []
    history: Path | None = None
    first: dict[int, float] = {}  # the first round's wall times by GPU count, for estimates
    counts = configurations(gpus, args.configs)
    for round_ in range(1, args.repeat + 1):
        left = None if args.budget is None else args.budget - (time.time() - start)
        # a later round starts only where all of it fits (estimated by the first round): a round
        # cut short would pair its runs with another round's
        whole = sum(expected_again(first, n) for n in counts) if 1 in first else 0.0
        why = None
        if round_ > 1 and left is not None and whole > left:
            why = f"the round: ~{whole:.0f} s expected, {max(left, 0):.0f} s left of --budget " \
                  f"{args.budget:.0f}"
        for n in counts:
            left = None if args.budget is None else args.budget - (time.time() - start)
            # in round 1, n has no wall time of its own yet: expected() from its one-GPU run
            estimate = expected_again(first, n) if 1 in first else 0.0
            if why is None and left is not None and (estimate > left or left <= 0):
                why = f"~{estimate:.0f} s expected, {max(left, 0):.0f} s left of --budget " \
                      f"{args.budget:.0f}"
            if why is not None:  # the rest of the round is not run either
                configs.append({"gpus": n, "round": round_, "skipped": why})
                print(f"{n} GPU(s), round {round_}: not run, {why}", flush=True)
                continue
            cfg = read_one(run_one(n, folder, dry=args.dry, suite=suite, timeout=left,
                                   history=history, tag=f"-r{round_}" if args.repeat > 1 else ""))
            cfg["round"] = round_
            if n == 1 and round_ == 1:  # the first one-GPU run: its durations order the others
                history = save_durations(cfg, Path(tempfile.mkdtemp(prefix="scaling-history-")))
            if round_ == 1:
                first[n] = cfg["wall_s"]
            configs.append(cfg)
            print(f"{n} GPU(s), round {round_}: rc={cfg['rc']} in {cfg['wall_s']:.1f} s, "
                  f"{cfg['counts']}", flush=True)
            if n == 1 and not complete(cfg):  # nothing of this round to compare with
                why = f"its one-GPU run ended with rc={cfg['rc']}"
    compare(configs)
    state = bytecode_state()
    text = markdown(configs, args.dry, state)
    print(text)
    if args.md:
        args.md.write_text(text)
    if args.json:
        slim = [{k: v for k, v in c.items() if k not in ("outcomes", "verdicts")} for c in configs]
        args.json.write_text(json.dumps({"dry": args.dry, "gpus": gpus, "bytecode": state,
                                         "rounds": args.repeat, "medians": medians(configs),
                                         "configurations": slim},
                                        indent=1))
    if suite is not None:
        shutil.rmtree(suite, ignore_errors=True)
    if history is not None:
        shutil.rmtree(history, ignore_errors=True)
    ran = [c for c in configs if not c.get("skipped")]
    return 0 if all(not c["differences"] for c in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
