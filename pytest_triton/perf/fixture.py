"""The triton_bench fixture: time `fn` on the GPU, judge it against the test's perf_target, and
announce the measurement (pytest_triton_measured) to whoever diagnoses or records it."""

from __future__ import annotations

import warnings
from contextlib import nullcontext

import pytest
import torch

from .. import options, state
from ..correctness import inputs
from ..env import compile_watch, dtypes, work
from ..process import gpulock
from . import record, stats, timing, verdict, work_check
from .checklist import NOTES
from .markers import PerfTarget, PerfTargetError
from .record import DryCall, Mode, PerfRecord
from .session import ensure_ceilings, mode, session
from .timing import Settings, Timings


class TritonBench:
    """The triton_bench fixture: triton_bench(fn, *, bytes=None, flops=None, baseline=None,
    dtype=None, kernel=None, name=None, inplace=None) -> Measurement. inplace: the inputs fn
    writes by design (names of the tensors it captures, or the tensors)."""

    def __init__(self, request: pytest.FixtureRequest):
        self._request = request
        self._item = request.node
        self._config = request.config
        rec = record.of(self._item)
        if rec is None:  # requested by name at run time (request.getfixturevalue), not collected
            rec = self._item.stash[record.RECORD_KEY] = PerfRecord(self._item.nodeid)
        if rec.mode is None:
            rec.mode = mode(self._config)
        self._record = rec
        self._target: PerfTarget | None = rec.target
        #: True when this run has no GPU to time on: each call checks its arguments against the
        #: test's targets and calls fn (and baseline) once, untimed, and returns None. A test
        #: picks a small size with it (`n = 4096 if triton_bench.dry_run else 1 << 26`).
        self.dry_run = rec.mode is Mode.DRY_RUN
        if rec.mode is Mode.SKIPPED:
            pytest.skip("triton_bench times kernels only with --triton-perf")

    def _error(self, text: str) -> PerfTargetError:
        return PerfTargetError(f"{self._item.nodeid}: {text}")

    def _calibration_note(self) -> str:
        how = session(self._config).calibration
        # "not measured" is what the peak's own text already says
        return f"; {how}" if how and how != "not measured" else ""

    def _check_args(self, fn, bytes, flops, baseline, dtype, name) -> str | None:
        if not callable(fn):
            raise self._error(f"triton_bench(fn={fn!r}): fn must be a zero-argument callable")
        if baseline is not None and not callable(baseline):
            raise self._error(f"triton_bench(baseline={baseline!r}): must be a zero-argument callable")
        for arg, value in (("bytes", bytes), ("flops", flops)):
            if value is not None and not stats.positive_finite(value):
                raise self._error(f"triton_bench({arg}={value!r}): expected a number > 0")
        t = self._target
        target_dtype = t.dtype if t else None
        call_dtype = dtypes.name(dtype) if dtype is not None else None
        if call_dtype is not None and call_dtype not in dtypes.PERF_DTYPES:
            raise self._error(f"triton_bench(dtype={dtype!r}): expected one of "
                              f"{', '.join(dtypes.PERF_DTYPES)} (a torch.dtype or its name)")
        if target_dtype and call_dtype and t.name and \
                "dtype" in state.get(self._config).checklist.get(t.name, {}):
            # a checklist entry's dtype is its default (the "matmul" entry's float16): the
            # operands' own dtype names the peak the same fraction is taken of
            target_dtype = None
        # float32 operands run on the tensor cores as tf32: one peak, so no conflict
        if target_dtype and call_dtype and not dtypes.same_peak(target_dtype, call_dtype):
            raise self._error(f"dtype conflict: perf_target(dtype={target_dtype!r}) but "
                              f"triton_bench(dtype={call_dtype!r})")
        dt = target_dtype or call_dtype
        if t is not None:
            for key in ("bandwidth_frac", "gbps"):
                if getattr(t, key) is not None and bytes is None:
                    raise self._error(f"{key}={getattr(t, key):g} needs triton_bench(..., bytes=...)")
            for key in ("tflops_frac", "tflops"):
                if getattr(t, key) is not None and flops is None:
                    raise self._error(f"{key}={getattr(t, key):g} needs triton_bench(..., flops=...)")
            if t.tflops_frac is not None and dt is None:
                raise self._error(f"tflops_frac={t.tflops_frac:g} needs the operands' dtype: "
                                  "triton_bench(..., dtype=torch.float16) or perf_target(dtype=...)")
            for key in ("speedup", "geomean_speedup"):
                if getattr(t, key) is not None and baseline is None:
                    raise self._error(f"{key}={getattr(t, key):g} needs triton_bench(..., baseline=...)")
            if self.dry_run:
                self._note_unverifiable(t, dt)
            else:
                ps = session(self._config)
                if t.tflops_frac is not None:
                    peak, what = ps.device.peak_tflops(dt, t.peak)
                    if not peak:
                        raise self._error(f"tflops_frac: {ps.device.label} has no {dt} "
                                          f"tensor-core peak ({what}{self._calibration_note()})")
                if t.bandwidth_frac is not None and not ps.device.peak_gbps(t.peak)[0]:
                    raise self._error(f"bandwidth_frac with peak={t.peak!r}: {ps.device.label} has "
                                      f"no measured copy ceiling{self._calibration_note()}")
        names = [m.name for m in self._record.calls]
        if names and (name is None or name in names or None in names):
            raise self._error(f"triton_bench called more than once: give each call a distinct "
                              f"name= (got {name!r} after {names!r})")
        return dt

    def _note_unverifiable(self, t: PerfTarget, dt: str | None) -> None:
        """The checks a dry run cannot make: they look the device up."""
        peak = t.peak or options.get(self._config, "triton_perf_peak")
        ceiling = "measured ceilings" if peak == "measured" else "datasheet"
        found = self._record.unverifiable
        for key, what in (("tflops_frac", f"the device's {dt} tensor-core peak ({ceiling})"),
                          ("bandwidth_frac", f"the device's DRAM bandwidth ({ceiling})")):
            text = f"{key}: {what}"
            if getattr(t, key) is not None and text not in found:
                found.append(text)

    def _dry_call(self, fn, baseline, name, bytes, flops) -> None:
        """Call fn, then baseline, once each: what raises fails the test, as on the GPU. Through
        pytest_triton_dry_call, so that a checker can look at the call (judge/timedcall.py)."""
        __tracebackhide__ = True

        counted = []  # fn's work, under the interpreter (env/work.py)

        def call():
            __tracebackhide__ = True
            result = None
            for what, f in (("fn", fn), ("baseline", baseline)):
                if f is None:
                    continue
                try:
                    with work.counting() if what == "fn" else nullcontext() as count:
                        value = f()
                    if what == "fn" and count is not None and count.launches:
                        counted.append(count)  # a call that launched no Triton kernel: not counted
                    result = value if what == "fn" else result
                    if state.get(self._config).runtime.device.startswith("cuda"):
                        torch.cuda.synchronize()
                except Exception as exc:
                    if hasattr(exc, "add_note"):  # Python 3.11+
                        exc.add_note(f"pytest-triton: raised by triton_bench's {what} in a dry "
                                     "run (no GPU to time on: called once, untimed)")
                    raise
            return result

        if not self._config.hook.pytest_triton_dry_call(item=self._item, fn=fn, baseline=baseline,
                                                        call=call):
            call()
        dry = DryCall(name, baseline is not None, counted[0] if counted else None, bytes, flops,
                      nodeid=self._item.nodeid)
        self._record.dry_calls.append(dry)
        if dry.work is not None:
            self._check_work(dry)

    def _check_work(self, dry: DryCall) -> None:
        """The declarations against the count (perf/work_check.py): overstated fails, a memory-
        bound call that moved well more than declared gets a note."""
        __tracebackhide__ = True
        message = work_check.overstated(dry.label, dry.work, dry.bytes, dry.flops)
        if message:
            raise PerfTargetError(message)
        dry.note = work_check.reread(dry.work, dry.bytes)
        if dry.note:
            warnings.warn(work_check.WorkNote(f"{dry.label}: {dry.note}"), stacklevel=1)

    def __call__(self, fn, *, bytes=None, flops=None, baseline=None, dtype=None, kernel=None,
                 name=None, inplace=None):
        __tracebackhide__ = True
        inputs.declare(inplace)  # what fn writes by design (correctness/inputs.py)
        if self.dry_run:
            self._check_args(fn, bytes, flops, baseline, dtype, name)
            gap = self._record.gap_stops_body
            if gap is not None:  # fn would meet the interpreter's gap: checked, not called
                pytest.skip(f"{gap} (its triton_bench arguments were checked; fn was not run)")
            self._dry_call(fn, baseline, name, bytes, flops)
            return None
        # Under xdist the measurement holds the GPU alone (gpulock): compile first, sharing it,
        # where other workers of the run share this GPU; a worker with a GPU of its own compiles
        # and tunes once, holding it alone (with no other worker there, it waits for none)
        rt = state.get(self._config).runtime
        with compile_watch.watch_compiles() as first:
            tuned = self._compile(fn, baseline) if gpulock.sharing() and not rt.gpu_alone else []
        wait_s = options.get_float(self._config, "triton_gpu_wait", minimum=0.0)
        with gpulock.alone(wait_s=wait_s, nodeid=self._item.nodeid):
            timing.retune(tuned)  # their configs compiled: timed again, alone
            ensure_ceilings(self._config)  # both fractions are reported: of the datasheet, measured
            dt = self._check_args(fn, bytes, flops, baseline, dtype, name)
            ps = session(self._config)
            l2 = (self._target.l2 if self._target and self._target.l2 else None) or ps.l2
            settings = Settings(l2=l2, max_time=ps.max_time,
                                min_time=timing.COMPUTE_MIN_TIME_S if flops else timing.MIN_TIME_S)
            note = _checklist_note(self._target)
            with compile_watch.watch_compiles() as compiles:
                m = self._measure(fn, bytes, flops, baseline, dt, kernel, name, settings, note)
            for key in ("count", "seconds", "cache_hits", "wall_s"):  # the compile above too
                setattr(compiles, key, getattr(compiles, key) + getattr(first, key))
            self._record.measurements.append(m)
            # the diagnoses, the profiler trace and pytest-benchmark's table listen (plugin.py)
            self._config.hook.pytest_triton_measured(item=self._item, measurement=m, fn=fn,
                                                     kernel=kernel, compiles=compiles)
        return m

    def _compile(self, fn, baseline) -> list:
        """Call fn and baseline once, untimed, before the GPU is held alone: their kernels
        compile (and autotune, the tuners' choices then forgotten, to be timed alone)."""
        if not callable(fn) or not (baseline is None or callable(baseline)):
            return []  # _check_args says what is wrong
        sync = None
        if state.get(self._config).runtime.device.startswith("cuda"):
            import torch  # import time: a dry run never gets here

            sync = torch.cuda.synchronize
        return timing.compile_first([f for f in (fn, baseline) if f is not None], sync=sync)

    def _measure(self, fn, bytes, flops, baseline, dt, kernel, name, settings, note):
        __tracebackhide__ = True
        ps = session(self._config)
        m = None
        timings = None
        for rounds in range(1, ps.retries + 2):
            new = self._config.hook.pytest_triton_measure(
                config=self._config, request=self._request, fn=fn, baseline=baseline,
                settings=settings)
            if not isinstance(new, Timings):
                raise self._error(f"pytest_triton_measure returned {type(new).__name__}, not Timings")
            if baseline is not None and new.baseline_ms is None:
                raise self._error("pytest_triton_measure returned no baseline timings")
            self._check_timings(new)
            # Throttled rounds are measured again rather than merged: their samples are not the
            # card's normal behaviour.
            timings = new if timings is None or timings.throttled else timings.merged(new)
            m = verdict.build(self._item.nodeid, name, timings, bytes=bytes, flops=flops,
                              dtype=dt, config=_config_of(kernel), device=ps.device, rounds=rounds)
            verdict.evaluate(m, self._target, ps.device, note)
            if m.verdict not in (verdict.INCONCLUSIVE,) and not (m.verdict == verdict.FAIL
                                                                 and timings.throttled):
                break
        return m

    def _check_timings(self, t: Timings) -> None:
        """Timings a hook returned are samples of a real run: finite, positive milliseconds, the
        baseline's paired one to one with fn's; anything else would be judged as if it were."""
        for name in ("ms", "baseline_ms"):
            samples = getattr(t, name)
            if samples is None and name == "baseline_ms":
                continue
            if not isinstance(samples, (list, tuple)) or not samples:
                raise self._error(f"pytest_triton_measure returned Timings.{name}={samples!r}: "
                                  "expected a non-empty list of per-call milliseconds")
            for i, v in enumerate(samples):
                if not stats.positive_finite(v):
                    raise self._error(f"pytest_triton_measure returned Timings.{name}[{i}]="
                                      f"{v!r}: expected a finite number of milliseconds > 0")
        if t.baseline_ms is not None and len(t.baseline_ms) != len(t.ms):
            raise self._error(f"pytest_triton_measure returned {len(t.ms)} samples of fn and "
                              f"{len(t.baseline_ms)} of the baseline: they are paired, one each "
                              "per round of interleaved timing")


def _checklist_note(target: PerfTarget | None) -> str | None:
    if target is None or not target.name:
        return None
    return NOTES.get(target.name)


def _config_of(kernel) -> str | None:
    """The autotuned config(s) chosen for `kernel` (an Autotuner, or a list of them)."""
    if kernel is None:
        return None
    kernels = kernel if isinstance(kernel, (list, tuple)) else [kernel]
    chosen = []
    for k in kernels:
        best = getattr(k, "best_config", None)
        if best is not None:
            chosen.append(str(best))
    return "; ".join(chosen) or None
