"""The perf_target marker: a frozen dataclass, parsed and validated once per test."""

from __future__ import annotations

import ast
import difflib
import math
from dataclasses import dataclass, fields

import pytest

from .. import options
from ..env import dtypes
from ..env.interpreter.gaps import INTERPRETER_GAP_KEY, INTERPRETER_GAPS, gap_reason

perf_target = pytest.mark.perf_target

# per item: what is wrong with its markers, found at collection and raised at its setup, so that
# only that test errors (and not at all when it is deselected)
MARKER_ERROR_KEY = pytest.StashKey[str]()

PERF_TARGET_HELP = (
    "perf_target(name=None, *, bandwidth_frac=None, tflops_frac=None, gbps=None, tflops=None, "
    "max_ms=None, speedup=None, geomean_speedup=None, dtype=None, l2=None, peak=None, "
    "max_registers=None, max_spills=None, max_shared_memory=None, min_occupancy=None, "
    "archs=None, triton_only=None): with --triton-perf, time the kernel passed to triton_bench "
    "on the GPU and fail the test unless every target holds. `name` picks an entry of the "
    "performance checklist; peak='measured' takes the fractions against this device's measured "
    "ceilings, 'datasheet' against its datasheet (default: --triton-perf-peak). The resource "
    "keywords are triton_resources'. triton_only=True fails a timed call whose GPU time is "
    "mostly kernels that are not Triton's (the default under --triton-judge; False allows them "
    "there)."
)
INTERPRETER_GAP_HELP = (
    "interpreter_gap(gap, *, reason=None): skip the test under Triton's interpreter, which lacks "
    f"or gets wrong what it needs; gap is one of {', '.join(INTERPRETER_GAPS)} (or 'other' with "
    "reason=)."
)
MARKERS = options.declare_markers(options.Marker(PERF_TARGET_HELP),
                                  options.Marker(INTERPRETER_GAP_HELP))

FRACTIONS = ("bandwidth_frac", "tflops_frac")
# triton_resources' keywords, which perf_target takes too (the resources gate reads them there)
RESOURCE_KEYS = ("max_registers", "max_spills", "max_shared_memory", "min_occupancy", "archs")
POSITIVE = ("gbps", "tflops", "max_ms", "speedup", "geomean_speedup")
TARGETS = FRACTIONS + POSITIVE
PEAKS = ("datasheet", "measured")


class PerfTargetError(Exception):
    """A perf_target that cannot be honoured; the message names the test and the argument."""


class PerfTargetMissed(AssertionError):
    """Raised at the end of a perf test whose kernel was measured clearly below a target."""


class PerfInconclusive(AssertionError):
    """Raised when a measurement stayed too noisy to tell, after every allowed retry."""


class PerfInvalid(AssertionError):
    """Raised for a measurement that cannot be true (above the DRAM's peak): never a pass."""


@dataclass(frozen=True)
class PerfTarget:
    name: str | None = None  # the checklist entry it came from, if any
    bandwidth_frac: float | None = None  # of the device's peak DRAM bandwidth
    tflops_frac: float | None = None  # of the dense tensor-core peak of `dtype`
    gbps: float | None = None
    tflops: float | None = None
    max_ms: float | None = None
    speedup: float | None = None  # over triton_bench's baseline, measured in the same run
    geomean_speedup: float | None = None  # geometric mean of the speedups of all triton_bench calls
    dtype: str | None = None  # the operands' dtype, for tflops_frac
    l2: str | None = None  # "cold" or "warm"; None: the --triton-perf-l2 setting
    # What bandwidth_frac and tflops_frac are fractions of: "datasheet" (the SKU's peaks) or
    # "measured" (this device's copy and cuBLAS ceilings); None: the --triton-perf-peak setting.
    peak: str | None = None
    # True: most of the timed call's GPU time must be Triton kernels' (docs/judging.md); None:
    # True under --triton-judge, else unchecked
    triton_only: bool | None = None

    def targets(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in TARGETS if getattr(self, k) is not None}

    def describe(self) -> str:
        args = [repr(self.name)] if self.name else []
        args += [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if f.name != "name" and getattr(self, f.name) is not None]
        return f"perf_target({', '.join(args)})"

    @classmethod
    def from_describe(cls, text: str) -> PerfTarget:
        """The target describe() wrote (a JSON report's "target"), read back."""
        call = ast.parse(text, mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "perf_target" and len(call.args) <= 1):
            raise ValueError(f"not a perf_target(...) description: {text!r}")
        name = ast.literal_eval(call.args[0]) if call.args else None
        return cls(name=name, **{k.arg: ast.literal_eval(k.value) for k in call.keywords})


def _dtype_name(value, where: str) -> str:
    name = dtypes.name(value)
    if name not in dtypes.PERF_DTYPES:
        raise PerfTargetError(f"{where}dtype={value!r}: expected one of {', '.join(dtypes.PERF_DTYPES)}")
    return name


def _check_number(key: str, value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise PerfTargetError(f"{where}{key}={value!r}: expected a number")
    number = float(value)
    if key in FRACTIONS and not 0.0 < number <= 1.0:
        raise PerfTargetError(f"{where}{key}={value!r}: expected a fraction in (0, 1]")
    if key in POSITIVE and not (number > 0.0 and math.isfinite(number)):
        raise PerfTargetError(f"{where}{key}={value!r}: expected a number > 0")
    return number


def did_you_mean(word: str, names) -> str:
    """'; did you mean 'bandwidth_frac'?' for a misspelt name among `names`, else ''."""
    close = difflib.get_close_matches(word, sorted(names), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def parse_perf_target(args: tuple, kwargs: dict, checklist: dict[str, dict],
                      where: str = "") -> PerfTarget:
    """Validate a perf_target's arguments; `where` prefixes every error (the test id)."""
    if len(args) > 1:
        raise PerfTargetError(f"{where}takes at most one positional argument (a checklist name), "
                              f"got {len(args)}: {args!r}")
    allowed = set(TARGETS) | {"dtype", "l2", "peak", "triton_only"}
    kwargs = {k: v for k, v in kwargs.items() if k not in RESOURCE_KEYS}
    for key in kwargs:
        if key not in allowed:
            raise PerfTargetError(f"{where}perf_target can't have {key!r} keyword argument"
                                  f"{did_you_mean(key, allowed)} (expected some of "
                                  f"{', '.join(sorted(allowed))})")
    merged: dict = {}
    name = None
    if args:
        name = args[0]
        if not isinstance(name, str):
            raise PerfTargetError(f"{where}the positional argument must be a checklist name "
                                  f"(a string), got {name!r}")
        if name not in checklist:
            raise PerfTargetError(f"{where}{name!r} is not in the performance checklist"
                                  f"{did_you_mean(name, checklist)} "
                                  f"({', '.join(sorted(checklist))})")
        for key in checklist[name]:
            if key not in allowed:
                raise PerfTargetError(f"{where}checklist entry {name!r} has unknown key {key!r}")
            if key in kwargs:
                raise PerfTargetError(f"{where}{key} is set both by the checklist entry {name!r} "
                                      f"and as an argument; override the entry in "
                                      "triton_perf_checklist instead")
        merged.update(checklist[name])
    merged.update(kwargs)
    values: dict = {"name": name}
    for key, value in merged.items():
        if key == "dtype":
            values[key] = _dtype_name(value, where)
        elif key == "l2":
            if value not in ("cold", "warm"):
                raise PerfTargetError(f"{where}l2={value!r}: expected 'cold' or 'warm'")
            values[key] = value
        elif key == "triton_only":
            if value is not None and not isinstance(value, bool):  # None: the run's default
                raise PerfTargetError(f"{where}triton_only={value!r}: expected True or False")
            values[key] = value
        elif key == "peak":
            if value not in PEAKS:
                raise PerfTargetError(f"{where}peak={value!r}: expected 'datasheet' or 'measured'")
            values[key] = value
        else:
            values[key] = _check_number(key, value, where)
    target = PerfTarget(**values)
    if not target.targets():
        raise PerfTargetError(f"{where}perf_target needs at least one target "
                              f"({', '.join(TARGETS)}) or a checklist name")
    if target.peak is not None and target.bandwidth_frac is None and target.tflops_frac is None:
        raise PerfTargetError(f"{where}peak={target.peak!r} applies to bandwidth_frac and "
                              "tflops_frac, and this perf_target has neither")
    return target


def perf_target_of(item: pytest.Item, checklist: dict[str, dict]) -> PerfTarget | None:
    """The closest perf_target of `item`, validated (PerfTargetError names the test)."""
    marks = list(item.iter_markers("perf_target"))
    if len(marks) > 1:
        # the closest would win silently, and the others' targets go unchecked
        def shown(m) -> str:
            parts = [*map(repr, m.args), *(f"{k}={v!r}" for k, v in m.kwargs.items())]
            return f"perf_target({', '.join(parts)})"

        given = "; ".join(shown(m) for m in marks)
        raise PerfTargetError(f"{item.nodeid}: {len(marks)} perf_target markers apply ({given}, "
                              "from the test, its class or its module's pytestmark): give one, "
                              "with every target in it")
    mark = marks[0] if marks else None
    if mark is None:
        return None
    return parse_perf_target(mark.args, dict(mark.kwargs), checklist, where=f"{item.nodeid}: ")


def interpreter_gap_of(item: pytest.Item) -> str | None:
    """The skip reason of the item's interpreter_gap marker, or None."""
    mark = item.get_closest_marker("interpreter_gap")
    if mark is None:
        return None
    if len(mark.args) != 1 or set(mark.kwargs) - {"reason"}:
        raise PerfTargetError(f"{item.nodeid}: interpreter_gap takes one gap name and an optional "
                              f"reason=, got args={mark.args!r} kwargs={mark.kwargs!r}")
    try:
        return gap_reason(mark.args[0], mark.kwargs.get("reason"))
    except ValueError as exc:
        raise PerfTargetError(f"{item.nodeid}: {exc}") from None


def validate_item(item: pytest.Item, checklist: dict[str, dict]) -> PerfTarget | None:
    """Parse the item's markers (its interpreter gap into its stash) and return its perf_target.
    What is wrong with them (PerfTargetError's message, naming the test and the argument; a
    misspelt marker of ours) is kept for the test's setup (raise_marker_error), so that it
    errors alone, and not at all when it is deselected."""
    try:
        target = perf_target_of(item, checklist)
        if target is not None and "triton_bench" not in getattr(item, "fixturenames", ()):
            raise PerfTargetError(f"{item.nodeid}: {target.describe()} on a test that does not "
                                  "use the triton_bench fixture: nothing would be measured")
        item.stash[INTERPRETER_GAP_KEY] = interpreter_gap_of(item)
    except PerfTargetError as exc:
        item.stash[MARKER_ERROR_KEY] = str(exc)
        item.stash[INTERPRETER_GAP_KEY] = None
        return None
    near = _near_misses(item)
    if near:
        item.stash[MARKER_ERROR_KEY] = near
    return target


def _near_misses(item: pytest.Item) -> str | None:
    """A marker on the item that is not registered and is spelt almost as one of ours: pytest
    only warns about it, and the test would run without what the marker asked for."""
    registered = {line.split("(")[0].split(":")[0].strip()
                  for line in item.config.getini("markers")}
    misses = []
    for mark in item.iter_markers():
        if mark.name in registered or mark.name in options.MARKERS_BY_NAME:
            continue
        close = difflib.get_close_matches(mark.name, options.MARKER_ORDER, n=1, cutoff=0.75)
        if close:
            misses.append(f"unknown marker {mark.name!r}: did you mean {close[0]}?")
    if not misses:
        return None
    return (f"{item.nodeid}: " + "; ".join(dict.fromkeys(misses)) + " (pytest only warns about "
            "an unknown marker, and the test would run without it; --strict-markers makes every "
            "unknown marker an error)")


def raise_marker_error(item: pytest.Item) -> None:
    """At the test's setup: the error validate_item kept, as this test's error alone."""
    error = item.stash.get(MARKER_ERROR_KEY, None)
    if error is not None:
        pytest.fail(error, pytrace=False)
