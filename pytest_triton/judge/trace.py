"""What the GPU did in the timed call, against what was timed: a listener of
pytest_triton_measured.

- Work the events did not cover: the timed call is profiled once more (diagnose/breakdown.py:
  every kernel of the call, on every stream, with CUPTI's own times); GPU busy time well above
  the measured time per call is work on a side stream the events ignore, or work left running
  past the end event (KernelBench's non_default_stream_kernel; mlx-benchmark #21).
- Work that is not Triton's: the kernels of the call that no Triton launch made (its launches
  are watched through env/launch_args.py in one more call); a call whose GPU time is mostly
  theirs times torch, cuBLAS or cuDNN under a Triton test's name (Kevin; KernelBench #110).
  perf_target(triton_only=True) asks for it; the default under --triton-judge.
- A time no call can take: less than FLOOR_MS per call is less than launching one kernel takes,
  and one such shape sends a geometric mean towards 0 (gpu-mode reference-kernels #162 topped a
  leaderboard with a score of 0.000). Checked for geomean_speedup tests, and every test under
  --triton-judge; there a geomean's shapes must each give bytes= or flops=, so that each shape
  passes the >100%-of-peak check (perf/verdict.py) before the mean is taken.
The profile needs a GPU: under Triton's interpreter only the floor is checked.
"""

from __future__ import annotations

import pytest

from ..correctness import checking
from ..env import launch_args
from ..perf import record
from . import launcherrors

FLOOR_MS = 0.0005  # 0.5 us: below one kernel launch, even replayed from a CUDA graph
BUSY_OVER = 1.5  # GPU busy time over the measured time per call that no honest call reaches
BUSY_SLACK_MS = 0.01
MOSTLY = 0.5  # of the GPU time: a call whose non-Triton kernels take more is not a Triton call


def triton_names(fn) -> set[str]:
    """The names of the Triton kernels one call of `fn` launches."""
    names: set[str] = set()
    remove = launch_args.watch(lambda name, args: names.add(name))
    try:
        fn()
        launcherrors.pending()
    finally:
        remove()
    return names


def _short(row_name: str) -> str:
    """A breakdown row's kernel name: 'aten::mm (sm90_xmma_gemm)' -> 'sm90_xmma_gemm'."""
    if row_name.endswith(")") and " (" in row_name:
        return row_name.rsplit(" (", 1)[1][:-1]
    return row_name


def floor_problem(m, geomean: bool, judged: bool) -> str | None:
    if judged and geomean and not (m.bytes or m.flops):
        return ("geomean collapse: under --triton-judge each shape of a geomean_speedup test "
                "gives bytes= or flops=, so that a shape whose time is impossibly short is "
                f"caught before it enters the mean; {m.label} gives neither")
    if m.time.median < FLOOR_MS:
        return (f"geomean collapse: {m.label} measured {1e3 * m.time.median:.3g} us per call, "
                f"less than launching one kernel takes ({1e3 * FLOOR_MS:g} us): the call did "
                "no GPU work, or its time was not measured; one such shape sends a geometric "
                "mean towards 0 (gpu-mode reference-kernels #162)")
    return None


def trace_problems(call: dict, median_ms: float, triton: set[str], check_triton: bool) -> list[str]:
    """What the profiled call shows that the measurement did not."""
    if not call or call.get("error"):
        return []
    problems = []
    busy = call["gpu_busy_ms"]
    if busy > BUSY_OVER * median_ms + BUSY_SLACK_MS:
        problems.append(
            f"side stream: one call keeps the GPU busy {busy:.4g} ms (every stream, profiled), "
            f"but was timed at {median_ms:.4g} ms: work on a stream the timing events do not "
            "wait for, or left running past the end event (KernelBench's "
            "non_default_stream_kernel). Launch on the current stream, or make it wait for the "
            "side stream (torch.cuda.current_stream().wait_stream(side)) before returning.")
    if check_triton and busy > 0:
        other = [k for k in call["kernels"] if _short(k["name"]) not in triton]
        share = sum(k["ms"] for k in other) / busy
        if share > MOSTLY:
            named = ", ".join(f"{k['name']} {100 * k['ms'] / busy:.0f}%" for k in other[:3])
            problems.append(
                f"non-Triton fallback: {100 * share:.0f}% of the timed call's GPU time is kernels "
                f"no Triton launch made ({named}; the Triton kernels: "
                f"{', '.join(sorted(triton)) or 'none launched'}): it times torch, cuBLAS or "
                "cuDNN under a Triton test's name. perf_target(triton_only=False) allows it.")
    return problems


@checking.costed("judge")
def _profiled(item, measurement, fn, triton_only: bool) -> list[str]:
    from ..diagnose import breakdown  # import time: torch.profiler, for measured runs only

    events = breakdown.profile_call(item.config, fn)
    if events is None:  # no GPU to profile on
        return []
    return trace_problems(breakdown.analyze(events), measurement.time.median,
                          triton_names(fn) if triton_only else set(), triton_only)


class TraceJudge:
    """Registered by mode.configure unless --triton-judge=off."""

    def __init__(self, judging):
        self.judging = judging

    def pytest_triton_measured(self, item, measurement, fn, kernel, compiles) -> None:
        __tracebackhide__ = True
        rec = record.of(item)
        target = rec.target if rec is not None else None
        judged = self.judging(item)
        geomean = target is not None and target.geomean_speedup is not None
        problems = []
        if geomean or judged:
            problems.append(floor_problem(measurement, geomean, judged))
        triton_only = target.triton_only if target is not None and target.triton_only is not None \
            else judged
        if (judged or triton_only) and measurement.timings.method != "ncu-child":
            problems += _profiled(item, measurement, fn, triton_only)
        problems = [p for p in problems if p]
        if problems:
            pytest.fail("pytest-triton judge: " + "\n".join(problems), pytrace=False)
