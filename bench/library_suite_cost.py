"""What the plugin costs on a kernel library's own test suite, on CPU (Triton's interpreter).

    python bench/library_suite_cost.py --suite /path/to/conch/tests --python /path/to/venv/bin/python \\
        --sample 100 [--profile] [--out DIR]

The library's own tests (its checkout's tests/ directory; not this repository's) run three ways,
each a plain `python -m pytest -q` process as the library's developers type it, under
TRITON_INTERPRET=1:

1. off:    `-p no:triton`: pytest alone;
2. on:     the plugin loaded, its defaults (a supervised child on CPU, the interpreter's fixes,
           per-test seeds, the correctness record);
3. poison: on, with --triton-poison-allocations (every torch.empty of the test starts as NaN).

and, to say which feature costs what, the plugin-on run again with one feature left out:
`on-unsupervised` (--triton-supervise=off), and with --without FIX,... one `on-without-FIX` run
per interpreter fix (not supervised, the fix taken out of pytest_triton's FIXES before it is
installed; compared with on-unsupervised: a fix that rewrites a kernel, as loop_index_tensors
does, costs inside the kernel's own interpreted ops, where cProfile cannot name the plugin).
With --profile the plugin-on run (not supervised,
so that one process runs every test) runs under cProfile too, and the plugin's functions that
took the most time are listed, by module (the feature) and by function.

--sample N takes N of the suite's tests, spread evenly over its collection order (the same N
every time), so that every kernel of the library is in a sample that fits a shared machine.
Each test file runs as its own pytest process, every mode of a file one after another (a change
in the machine's load falls on all modes alike; a process that crashes, as plain Triton's
interpreter does on some kernels, loses its file only). Per-test times come from each run's JUnit
XML (setup, call and teardown); the ratios compare the tests that passed in both runs, where both
did the same work; the wall ratio adds each process's start (the plugin's supervised child
starts a second one). Prints a table; with --out DIR writes library_suite_cost.json there (and
the profiles, profile/on.N.prof, one per file). Not a
test: on a shared machine these times vary.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


WITHOUT_ENV = "SUITE_COST_WITHOUT"
# A -p plugin for the on-without-FIX runs (it reaches past pytest_triton's public names into the
# fixes' table, as only a measurement of the plugin's internals should): imported before the
# plugin installs the interpreter's fixes (pytest imports -p plugins before the initial
# conftests), it takes FIX out of the table.
WITHOUT_PLUGIN = f"""
import os
from pytest_triton.env.interpreter import fixes
for name in os.environ.get("{WITHOUT_ENV}", "").split(","):
    if name:
        fixes.FIXES.pop(name)
"""


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_CURRENT_TEST", "PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    env["TRITON_INTERPRET"] = "1"  # the library's own way to run on CPU, plugin or not
    # this checkout's plugin, whatever the library's environment has installed
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def collect(python: str, suite: str, select: list[str]) -> list[str]:
    out = subprocess.run([python, "-m", "pytest", "-p", "no:triton", "-p", "no:randomly",
                          "--collect-only", "-q", *select, suite], cwd=os.path.dirname(suite),
                         env=_env(), capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines() if "::" in line]


def sample(ids: list[str], n: int | None) -> list[str]:
    """n of `ids`: as many from each test file (a file with fewer gives all it has), spread
    evenly over each file's order, the same every time."""
    if not n or n >= len(ids):
        return ids
    files: dict[str, list[str]] = {}
    for i in ids:
        files.setdefault(i.split("::", 1)[0], []).append(i)
    share, picked = {f: 0 for f in files}, 0
    while picked < n:  # deal one per file per round, to the files that have tests left
        dealt = False
        for f, tests in files.items():
            if picked < n and share[f] < len(tests):
                share[f] += 1
                picked += 1
                dealt = True
        if not dealt:
            break
    out = []
    for f, tests in files.items():
        step = len(tests) / share[f] if share[f] else 0
        out += [tests[int(i * step)] for i in range(share[f])]
    return out


def _by_file(ids: list[str]) -> dict[str, list[str]]:
    files: dict[str, list[str]] = {}
    for i in ids:
        files.setdefault(i.split("::", 1)[0], []).append(i)
    return files


def run_file(python: str, cwd: str, tests: list[str], args: list[str], timeout: float,
             profile: str | None = None, env: dict | None = None) -> tuple[float, dict, bool]:
    """One pytest process on one file's `tests`, as a library's developer runs a file (a process
    that crashes loses its file's results only: they count as "crashed"). Returns (wall seconds,
    {id: (outcome, seconds)}, crashed)."""
    with tempfile.TemporaryDirectory(prefix="suite-cost-") as tmp:
        xml = os.path.join(tmp, "junit.xml")
        prof = [] if profile is None else ["-m", "cProfile", "-o", profile]
        cmd = [python, *prof, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               f"--junitxml={xml}", "-o", "junit_family=xunit2", *args, *tests]
        start = time.perf_counter()
        try:
            code = subprocess.run(cmd, cwd=cwd, env=_env(env), capture_output=True, text=True,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        wall = time.perf_counter() - start
        found = _junit(xml) if os.path.exists(xml) else {}
    crashed = not found and code not in (0, 1, 5)
    if crashed:
        found = {t: ("crashed", 0.0) for t in tests}
    return wall, found, crashed


def run_all(python: str, cwd: str, ids: list[str], modes: dict[str, list[str]],
            timeout: float, envs: dict[str, dict] | None = None) -> dict:
    """Every mode on every file, the modes of a file one after another (so that a change in the
    machine's load falls on all of them alike)."""
    runs = {m: {"args": a, "wall_s": 0.0, "tests": {}, "crashed": [], "file_wall_s": {}}
            for m, a in modes.items()}
    for file, tests in _by_file(ids).items():
        for mode, args in modes.items():
            wall, found, crashed = run_file(python, cwd, tests, args, timeout,
                                            env=(envs or {}).get(mode))
            r = runs[mode]
            r["wall_s"] += wall
            r["file_wall_s"][file] = wall
            r["tests"].update(found)
            if crashed:
                r["crashed"].append(file)
        print(f"  {file}: " + "; ".join(
            f"{m} {sum(runs[m]['tests'].get(t, ('', 0.0))[1] for t in tests):.1f} s" for m in modes),
            flush=True)
    return runs


def _junit(path: str) -> dict:
    tests = {}
    for case in ET.parse(path).iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        name = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        tests[name] = (outcome, float(case.get("time") or 0.0))
    return tests


def compare(base: dict, other: dict) -> dict:
    both = [t for t, (o, _) in base["tests"].items()
            if o == "passed" and other["tests"].get(t, ("", 0))[0] == "passed"]
    b = sum(base["tests"][t][1] for t in both)
    o = sum(other["tests"][t][1] for t in both)
    per = [other["tests"][t][1] / base["tests"][t][1] for t in both if base["tests"][t][1] > 0]
    # whole processes (start, collection, the plugin's set-up and every test) of the files whose
    # sampled tests all passed in both runs: what the per-test times leave out
    files = [f for f, tests in _by_file(list(base["tests"])).items()
             if all(t in both for t in tests) and f in other["file_wall_s"]]
    fb = sum(base["file_wall_s"][f] for f in files)
    fo = sum(other["file_wall_s"][f] for f in files)
    return {"tests": len(both), "base_s": b, "other_s": o, "ratio": o / b if b else None,
            "median_test_ratio": statistics.median(per) if per else None,
            "files": len(files), "files_base_wall_s": fb, "files_other_wall_s": fo,
            "files_wall_ratio": fo / fb if fb else None}


def profile_table(paths: list[str], top: int = 15) -> tuple[list, list]:
    """(self seconds by pytest_triton module, the functions that took most): the plugin's
    functions' own time, and their time with what they called, counted from outside their
    module (a recursion or a module's own calls counted once)."""
    stats = pstats.Stats(*paths)
    mine = {}
    for (file, line, fn), (_cc, _nc, tt, ct, callers) in stats.stats.items():
        if "pytest_triton" not in file:
            continue
        module = file.split("pytest_triton", 1)[1].strip("/").removesuffix(".py").replace("/", ".")
        # outermost frames of this module: called from outside it (recursion counted once)
        outside = sum(c[3] for (cf, _, _), c in callers.items() if cf != file)
        mine[(module, fn, line)] = (tt, outside if callers else ct)
    by_module = {}
    for (module, _, _), (tt, _ct) in mine.items():
        by_module[module] = by_module.get(module, 0.0) + tt
    modules = sorted(by_module.items(), key=lambda kv: -kv[1])[:top]
    funcs = sorted(((f"{m}.{fn}:{line}", tt, ct) for (m, fn, line), (tt, ct) in mine.items()),
                   key=lambda r: -r[2])[:top]
    return modules, funcs


MODES = {
    "off": ["-p", "no:triton"],
    "on": [],
    "on-unsupervised": ["--triton-supervise=off"],
    "poison": ["--triton-poison-allocations"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--suite", required=True, help="the library's tests directory")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter of an environment with the library installed")
    ap.add_argument("--sample", type=int, default=None, help="run N of the suite's tests")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k, before sampling")
    ap.add_argument("--modes", default=",".join(MODES), help="which runs, comma-separated")
    ap.add_argument("--without", default="",
                    help="interpreter fixes (names of pytest_triton's FIXES), comma-separated: for "
                    "each, a run on-without-FIX (not supervised), compared with on-unsupervised")
    ap.add_argument("--profile", action="store_true",
                    help="also run the plugin under cProfile (not supervised) and list its costs")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per test file's run")
    ap.add_argument("--test-timeout", type=float, default=120.0,
                    help="seconds per test (pytest-timeout): a test that takes longer fails")
    ap.add_argument("--out", default=os.environ.get("OUT"))
    args = ap.parse_args()
    suite = os.path.abspath(args.suite)
    cwd = os.path.dirname(suite)
    ids = sample(collect(args.python, suite, ["-k", args.keyword] if args.keyword else []),
                 args.sample)
    if not ids:
        raise SystemExit(f"no tests collected under {suite}")
    load = os.getloadavg()[0]
    extra = [f"--timeout={args.test_timeout:g}"] if args.test_timeout else []
    modes = {m: [*MODES[m], *extra] for m in args.modes.split(",")}
    envs = {}
    helper_dir = tempfile.mkdtemp(prefix="suite-cost-without-")
    with open(os.path.join(helper_dir, "suite_cost_without.py"), "w") as f:
        f.write(WITHOUT_PLUGIN)
    for fix in filter(None, args.without.split(",")):
        modes[f"on-without-{fix}"] = [*MODES["on-unsupervised"], "-p", "suite_cost_without", *extra]
        envs[f"on-without-{fix}"] = {WITHOUT_ENV: fix, "PYTHONPATH": os.pathsep.join(
            (HERE, helper_dir, os.environ.get("PYTHONPATH", "")))}
    try:
        runs = run_all(args.python, cwd, ids, modes, args.timeout, envs)
    finally:
        shutil.rmtree(helper_dir, ignore_errors=True)
    for mode, r in runs.items():
        counts = {}
        for outcome, _ in r["tests"].values():
            counts[outcome] = counts.get(outcome, 0) + 1
        print(f"{mode:20} wall {r['wall_s']:7.1f} s  {counts}"
              + (f"  crashed: {', '.join(r['crashed'])}" if r["crashed"] else ""), flush=True)
    print(f"\nmachine: {os.cpu_count()} cores; {len(ids)} tests of {suite}; load average before "
          f"{load:.2f}, after {os.getloadavg()[0]:.2f}")
    print(f"{'run':20} {'vs off: tests passing in both':>30} {'off s':>8} {'run s':>8} "
          f"{'ratio':>7} {'median per test':>16} {'wall ratio':>11} {'files passing in both: wall':>28}")
    result = {"suite": suite, "tests": len(ids), "cores": os.cpu_count(), "runs": runs,
              "compared": {}}
    for mode in runs:
        if mode == "off" or "off" not in runs:
            continue
        base = "on-unsupervised" if mode.startswith("on-without-") and "on-unsupervised" in runs \
            else "off"
        c = compare(runs[base], runs[mode])
        c["base"] = base
        result["compared"][mode] = c
        ratio = f"{c['ratio']:.3f}x" if c["ratio"] else "-"
        med = f"{c['median_test_ratio']:.3f}x" if c["median_test_ratio"] else "-"
        wall = runs[mode]["wall_s"] / runs[base]["wall_s"]
        fw = (f"{c['files']} files {c['files_base_wall_s']:.0f} s -> {c['files_other_wall_s']:.0f} s "
              f"{c['files_wall_ratio']:.3f}x" if c["files_wall_ratio"] else "-")
        label = mode if base == "off" else f"{mode} (vs {base})"
        print(f"{label:20} {c['tests']:>30} {c['base_s']:8.1f} {c['other_s']:8.1f} {ratio:>7} "
              f"{med:>16} {wall:10.3f}x {fw:>28}")
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="suite-cost-prof-") as tmp:
            tmp = os.path.join(args.out, "profile") if args.out else tmp  # kept, with --out
            os.makedirs(tmp, exist_ok=True)
            total = 0.0
            for n, tests in enumerate(_by_file(ids).values()):
                _, found, _ = run_file(args.python, cwd, tests, ["--triton-supervise=off", *extra],
                                       args.timeout, profile=os.path.join(tmp, f"on.{n}.prof"))
                total += sum(t for _, t in found.values())
            modules, funcs = profile_table(sorted(glob.glob(os.path.join(tmp, "*.prof"))))
        print(f"\nunder cProfile (not supervised): {total:.1f} s in tests; the plugin's own time "
              "(self time, by module):")
        for module, t in modules:
            print(f"  {t:8.2f} s  {module}")
        print("the plugin's functions by inclusive time (what runs inside them included):")
        for name, tt, ct in funcs:
            print(f"  {ct:8.2f} s (self {tt:6.2f} s)  {name}")
        result["profile"] = {"modules": modules, "functions": funcs}
    if args.out:
        with open(os.path.join(args.out, "library_suite_cost.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
