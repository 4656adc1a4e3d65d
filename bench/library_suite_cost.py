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
`on, not supervised` (--triton-supervise=off). With --profile the plugin-on run (not supervised,
so that one process runs every test) runs under cProfile too, and the plugin's functions that
took the most time are listed, by module (the feature) and by function.

--sample N takes N of the suite's tests, spread evenly over its collection order (the same N
every time), so that every kernel of the library is in a sample that fits a shared machine.
Per-test times come from each run's JUnit XML (setup, call and teardown); the ratios compare the
tests that passed in both runs, where both did the same work. Prints a table; with --out DIR
writes library_suite_cost.json there. Not a test: on a shared machine these times vary.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_CURRENT_TEST", "PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    env["TRITON_INTERPRET"] = "1"  # the library's own way to run on CPU, plugin or not
    # this checkout's plugin, whatever the library's environment has installed
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    return env


def collect(python: str, suite: str, select: list[str]) -> list[str]:
    out = subprocess.run([python, "-m", "pytest", "-p", "no:triton", "-p", "no:randomly",
                          "--collect-only", "-q", *select, suite], cwd=os.path.dirname(suite),
                         env=_env(), capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines() if "::" in line]


def sample(ids: list[str], n: int | None) -> list[str]:
    if not n or n >= len(ids):
        return ids
    step = len(ids) / n
    return [ids[int(i * step)] for i in range(n)]


def run(python: str, cwd: str, ids: list[str], args: list[str], timeout: float,
        profile: str | None = None) -> dict:
    """One pytest run of `ids`: {"wall_s", "tests": {id: (outcome, seconds)}, "returncode"}."""
    with tempfile.TemporaryDirectory(prefix="suite-cost-") as tmp:
        xml = os.path.join(tmp, "junit.xml")
        ids_file = os.path.join(tmp, "ids.txt")
        with open(ids_file, "w") as f:
            f.write("\n".join(ids) + "\n")
        head = [python] + (["-m", "cProfile", "-o", profile] if profile else []) + ["-m", "pytest"]
        cmd = [*head, "-q", "-p", "no:randomly", "-p", "no:cacheprovider", f"--junitxml={xml}",
               "-o", "junit_family=xunit2", *args, *ids]
        start = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True,
                                  timeout=timeout)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        wall = time.perf_counter() - start
        tests = _junit(xml, cwd) if os.path.exists(xml) else {}
    return {"args": args, "wall_s": wall, "returncode": code, "tests": tests}


def _junit(path: str, cwd: str) -> dict:
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
    return {"tests": len(both), "base_s": b, "other_s": o, "ratio": o / b if b else None,
            "median_test_ratio": statistics.median(per) if per else None}


def profile_table(path: str, top: int = 15) -> tuple[list, list]:
    """(seconds by pytest_triton module, the functions that took most): inclusive time of the
    plugin's functions, counted once per call chain (its outermost frame of a module)."""
    stats = pstats.Stats(path)
    mine = {}
    for (file, line, fn), (cc, nc, tt, ct, callers) in stats.stats.items():
        if "pytest_triton" not in file:
            continue
        module = file.split("pytest_triton", 1)[1].strip("/").removesuffix(".py").replace("/", ".")
        # outermost frames of this module: called from outside it (recursion counted once)
        outside = sum(c[3] for (cf, _, _), c in callers.items() if cf != file)
        mine[(module, fn, line)] = (tt, outside if callers else ct)
    by_module = {}
    for (module, _, _), (tt, ct) in mine.items():
        by_module[module] = by_module.get(module, 0.0) + tt
    modules = sorted(by_module.items(), key=lambda kv: -kv[1])[:top]
    funcs = sorted(((f"{m}.{fn}:{line}", tt, ct) for (m, fn, line), (tt, ct) in mine.items()),
                   key=lambda r: -r[2])[:top]
    return modules, funcs


MODES = {
    "off": ["-p", "no:triton"],
    "on": [],
    "on, not supervised": ["--triton-supervise=off"],
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
    ap.add_argument("--profile", action="store_true",
                    help="also run the plugin under cProfile (not supervised) and list its costs")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    ap.add_argument("--out", default=os.environ.get("OUT"))
    args = ap.parse_args()
    suite = os.path.abspath(args.suite)
    cwd = os.path.dirname(suite)
    ids = sample(collect(args.python, suite, ["-k", args.keyword] if args.keyword else []),
                 args.sample)
    if not ids:
        raise SystemExit(f"no tests collected under {suite}")
    load = os.getloadavg()[0]
    runs = {}
    for mode in args.modes.split(","):
        runs[mode] = run(args.python, cwd, ids, MODES[mode], args.timeout)
        r = runs[mode]
        counts = {}
        for outcome, _ in r["tests"].values():
            counts[outcome] = counts.get(outcome, 0) + 1
        print(f"{mode:20} wall {r['wall_s']:7.1f} s  exit {r['returncode']}  {counts}", flush=True)
    print(f"\nmachine: {os.cpu_count()} cores; {len(ids)} tests of {suite}; load average before "
          f"{load:.2f}, after {os.getloadavg()[0]:.2f}")
    print(f"{'run':20} {'vs off: tests passing in both':>30} {'off s':>8} {'run s':>8} "
          f"{'ratio':>7} {'median per test':>16}")
    result = {"suite": suite, "tests": len(ids), "cores": os.cpu_count(), "runs": runs,
              "compared": {}}
    for mode in runs:
        if mode == "off" or "off" not in runs:
            continue
        c = compare(runs["off"], runs[mode])
        result["compared"][mode] = c
        ratio = f"{c['ratio']:.3f}x" if c["ratio"] else "-"
        med = f"{c['median_test_ratio']:.3f}x" if c["median_test_ratio"] else "-"
        print(f"{mode:20} {c['tests']:>30} {c['base_s']:8.1f} {c['other_s']:8.1f} {ratio:>7} "
              f"{med:>16}")
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="suite-cost-prof-") as tmp:
            prof = os.path.join(tmp, "on.prof")
            r = run(args.python, cwd, ids, ["--triton-supervise=off"], args.timeout, profile=prof)
            modules, funcs = profile_table(prof)
        total = sum(t for _, t in r["tests"].values())
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
