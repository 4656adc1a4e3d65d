"""The interpreter's work count against what ncu reads from DRAM, for the bundled memory-bound
kernels (on a GPU machine with ncu on PATH):

    python bench/work_vs_ncu.py                 # every case, at its size below
    python bench/work_vs_ncu.py vector_add softmax

Each case runs twice, each in a process of its own: once as a perf test that pytest-triton
dry-runs under Triton's interpreter on CPU tensors of the GPU's shape (its JSON report holds the
launch's logical bytes, loaded and stored by active lanes), and once on the GPU under
`ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum`, the bytes of
the case's Triton kernels summed. The table gives both and their ratio. Logical bytes count a
re-read every time (L2 may serve it) and no sector rounding; DRAM bytes miss writes still in L2
when the kernel ends. The sizes are 64 MiB per operand, well past any L2, so the two should meet
within a few percent for one-pass kernels: where they do not, the count (or bytes=) is wrong.
Under the interpreter the launchers take their interpreter config (reference_kernels/
_elementwise.py), so per-program re-reads (layernorm's weight and bias) follow its program count.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

N = 1 << 24  # elements of a 1-D operand: 64 MiB in float32
ROWS, COLS = 16384, 1024  # a 2-D operand of the same size

# case -> (the Triton kernels' name prefix, what it runs: rand(k, shape) makes k operands)
CASES = {
    "vector_add": ("_vector_add", "vector_add.vector_add(*rand(2, (N,)))"),
    "add_mul": ("_add_mul", "fused.add_mul(*rand(3, (N,)))"),
    "softmax": ("_softmax", "softmax.softmax(*rand(1, (ROWS, COLS)))"),
    "layernorm": ("_layernorm_fwd", "layernorm.layernorm(*rand(1, (ROWS, COLS)), "
                                    "*rand(2, (COLS,)))"),
}


def _run_case(case: str) -> None:
    """In the ncu child: make the operands on the GPU, run the case once."""
    import torch

    from reference_kernels import fused, layernorm, softmax, vector_add  # noqa: F401

    def rand(k, shape):
        return [torch.randn(shape, device="cuda") for _ in range(k)]

    eval(CASES[case][1])  # the first call tunes (many launches): not profiled
    torch.cuda.synchronize()
    torch.cuda.profiler.start()  # ncu --profile-from-start off: this call's launches only
    eval(CASES[case][1])
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


# The CPU half is a perf test of its own, dry-run by the plugin: its JSON report holds the count.
COUNTED_TEST = """
import torch
from pytest_triton import perf_target
from reference_kernels import fused, layernorm, softmax, vector_add

N, ROWS, COLS = {N}, {ROWS}, {COLS}


def rand(k, shape):
    return [torch.randn(shape) for _ in range(k)]


@perf_target(max_ms=1e9)  # nothing to check: the dry run counts the call
def test_case(triton_bench):
    triton_bench(lambda: {code})
"""


def counted(case: str, tmp: str) -> dict:
    """The case's work, counted by the plugin's dry run under Triton's interpreter."""
    test = os.path.join(tmp, f"test_count_{case}.py")
    with open(test, "w") as f:
        f.write(COUNTED_TEST.format(N=N, ROWS=ROWS, COLS=COLS, code=CASES[case][1]))
    report = os.path.join(tmp, f"{case}.json")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTEST_TRITON_TUNE": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider",
                    "--triton-interpret", "--triton-perf", "--triton-perf-allow-unchecked",
                    "--triton-perf-json", report], env=env, cwd=tmp, capture_output=True,
                   text=True, check=True)
    with open(report) as f:
        (result,) = json.load(f)["results"]
    return result["dry_calls"][0]["work"]


def dram(case: str) -> int:
    """The DRAM bytes read and written by the case's kernels, as ncu reads them."""
    prefix = CASES[case][0]
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--metrics",
           "dram__bytes_read.sum,dram__bytes_write.sum", "-k", f"regex:^{prefix}",
           sys.executable, __file__, "--child", case]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    start = out.find('"ID"')
    if start < 0:
        raise SystemExit(f"ncu measured no kernel named {prefix}*:\n{out[-2000:]}")
    total = 0.0
    scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    for row in csv.DictReader(io.StringIO(out[start:])):
        if row.get("Metric Name", "").startswith("dram__bytes_"):
            value = float(row["Metric Value"].replace(",", ""))
            total += value * scale.get(row.get("Metric Unit", "byte"), 1)
    return int(total)


def main(argv: list[str]) -> None:
    """Options: --counts-only FILE (count on this machine, no GPU: write the counts as JSON),
    --counts FILE (take the counts from such a file instead of counting: a GPU machine's time
    then goes to ncu alone), --md FILE (the table as Markdown too)."""
    if argv[:1] == ["--child"]:
        _run_case(argv[1])
        return
    opts = {}
    while argv[:1] and argv[0] in ("--counts-only", "--counts", "--md"):
        opts[argv[0]], argv = argv[1], argv[2:]
    cases = argv or list(CASES)
    tmp = tempfile.mkdtemp(prefix="work-vs-ncu-")
    if "--counts" in opts:
        with open(opts["--counts"]) as f:
            counts = json.load(f)
    else:
        counts = {case: counted(case, tmp)["bytes"] for case in cases}
    if "--counts-only" in opts:
        with open(opts["--counts-only"], "w") as f:
            json.dump(counts, f)
        return
    rows = [f"{'case':12s} {'counted GB':>12s} {'ncu DRAM GB':>12s} {'ncu/counted':>12s}"]
    md = ["### The interpreter's work count against ncu's DRAM bytes (`bench/work_vs_ncu.py`)", "",
          "| case | counted GB (CPU, interpreter) | ncu DRAM GB read + written | ncu / counted |",
          "|---|---|---|---|"]
    for case in cases:
        logical, measured = counts[case], dram(case)
        rows.append(f"{case:12s} {logical / 1e9:12.4f} {measured / 1e9:12.4f} "
                    f"{measured / logical:12.3f}")
        md.append(f"| {case} | {logical / 1e9:.4f} | {measured / 1e9:.4f} | "
                  f"{measured / logical:.3f} |")
        print(rows[-1] if len(rows) > 2 else "\n".join(rows), flush=True)
    if "--md" in opts:
        with open(opts["--md"], "w") as f:
            f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
