"""Issue 29's self-comparison: one commit's perf suite against itself, over many pairs of runs,
each run its own pytest process as in CI (not a test; a step of bench/final_run.sh: `self`).

    python bench/self_compare.py --history DIR [--names final again] [--runs 5] [--out DIR]
                                 [--max-time S] [--target PYTEST_ARGS] [--gpus N] [--small]

Runs the perf suite `--runs` more times (saved as self-0, self-1, ... in --history, beside the
runs --names names there: the perf and again steps' "final" and "again"), then compares every pair
of them, the older as the reference (`python -m pytest_triton compare`; its run-to-run spread
comes from the reference's saved runs with the candidate left out, as on a pull request). Every
SLOW or FAST is a false verdict: the issue asks for SLOW in 0 of 20 comparisons per test, which 7
runs give (21 pairs).

Prints, per test (and per shape of a geomean test), its verdicts over the pairs, and writes
self_compare_pairs.json under --out:
{"runs": [...], "pairs": N, "per_test": {label: {verdict: count}}, "comparisons": [every row,
with its ref and new]}. --small: a smoke test on CPU (a
two-test file, dry runs: no verdicts). --gpus N: on a machine of N GPUs of one model, N runs at
once, one on each (CUDA_VISIBLE_DEVICES), as CI runners of one SKU would make them: the runs'
spread then holds the cards' differences too (the compare takes a model's cards as one, and
refuses another model by name). --runs 0 with --names: compare runs saved earlier (a replay).
New runs are numbered on from the self-N that --names names, so a later call adds to them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import queue
import re
import shlex
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from regression_check import compare, pytest_save, tally

SMALL_TESTS = '''
import torch
from pytest_triton import perf_target

@perf_target(max_ms=1.0)
def test_add(make_tensor, triton_bench):
    x = make_tensor(256)
    triton_bench(lambda: x + x, bytes=3 * x.nbytes)
'''


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--history", required=True, help="the saved runs' directory")
    p.add_argument("--names", nargs="*", default=[], help="runs already saved there to include")
    p.add_argument("--runs", type=int, default=5, help="perf-suite runs to make and save")
    p.add_argument("--max-time", type=float, default=None, help="--triton-perf-max-time")
    p.add_argument("--target", default="--pyargs reference_kernels -m perf_target",
                   help="what pytest runs (default: the bundled perf suite)")
    p.add_argument("--gpus", type=int, default=1, help="runs at once, one on each GPU")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--small", action="store_true", help="a smoke test on CPU (dry runs)")
    args = p.parse_args()
    history = Path(args.history)
    history.mkdir(parents=True, exist_ok=True)
    cwd = Path(tempfile.mkdtemp(prefix="self-compare-"))
    target = shlex.split(args.target)
    if args.small:
        (cwd / "test_small.py").write_text(SMALL_TESTS)
        target = [str(cwd / "test_small.py")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = list(args.names)
    if args.gpus < 1:
        p.error(f"--gpus {args.gpus}: expected a whole number >= 1")

    free = queue.Queue()  # the GPUs no run holds: a run takes one, and gives it back
    for gpu in range(args.gpus):
        free.put(gpu)

    # a second self step on the same machine goes on from the runs --names names (self-0 ...)
    first = 1 + max((int(n[5:]) for n in names if re.fullmatch(r"self-\d+", n)), default=-1)

    def one(i: int) -> str | None:
        """Run self-I on a free GPU (its own log); its name, None where it did not finish."""
        name, gpu = f"self-{i}", free.get()
        env = {"CUDA_VISIBLE_DEVICES": str(gpu)} if args.gpus > 1 else None
        try:
            with open(out / f"self_compare.{name}.log", "w") as log:
                rc = pytest_save(target, name, history, args.max_time, cwd, log, env)
        finally:
            free.put(gpu)
        if rc not in (0, 1):
            print(f"{name}: the run did not finish; left out", flush=True)
            return None
        return name

    with ThreadPoolExecutor(max_workers=args.gpus) as pool:  # in order: names keep run order
        names += [n for n in pool.map(one, range(first, first + args.runs)) if n is not None]
    comparisons = []
    for ref, new in itertools.combinations(names, 2):
        # every row: a geomean test's shapes each, and the test as a whole
        comparisons += [{"ref": ref, "new": new, **row} for row in compare(history, ref, new)["rows"]]
    per_test = tally(comparisons)
    false = {v: sum(c.get(v, 0) for c in per_test.values()) for v in ("slow", "fast")}
    pairs = len(names) * (len(names) - 1) // 2
    for label, c in sorted(per_test.items()):
        bad = c.get("slow", 0) + c.get("fast", 0)
        print(f"{label:70s} SLOW or FAST in {bad} of {sum(c.values())}  {dict(sorted(c.items()))}")
    print(f"{len(names)} runs, {pairs} pairs, {len(per_test)} tests: SLOW {false['slow']}, FAST "
          f"{false['fast']} of {len(comparisons)} comparisons")
    (out / "self_compare_pairs.json").write_text(json.dumps(
        {"runs": names, "pairs": pairs, "per_test": per_test, "comparisons": comparisons},
        indent=1))


if __name__ == "__main__":
    main()
