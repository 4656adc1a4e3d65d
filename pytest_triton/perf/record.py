"""One record per perf test: what it asked (its target), how it ran (timed, dry run or skipped,
decided once), what each triton_bench call measured and how that was judged, the geomean check,
and why it is slow (the explanation).

Made at collection for every test with a perf_target or the triton_bench fixture, kept in
item.stash[RECORD_KEY]. The terminal table, the JSON file, JUnit properties, pytest-benchmark,
explain, profile and plot all read it; none recomputes what it holds. to_dict() is the JSON
report's per-test entry and from_dict() reads one back, exactly: so the process that writes the
results (an xdist controller, a supervised child's parent) rebuilds each record from its report,
and an earlier run's file loads into the same type. Reading ignores keys it does not know and
gives a field the file lacks its default (where it has one), so a field added later does not
break the files saved before it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import pytest

from ..env.device import ceiling_kind
from ..env.work import Work
from .diagnosis import Diagnosis
from .markers import PerfTarget
from .peaks import DeviceId, Fractions, Peaks
from .stats import Summary
from .timing import Timings


def label(nodeid: str, name: str | None = None, *, short: bool = False,
          spaced: bool | None = None) -> str:
    """A measurement's label: its test's id, and its triton_bench name= where it has one.
    'tests/test_k.py::test_add[big]' is the key saved runs are compared by; short drops the
    file ('test_add [big]', as the table and the diagnosis show it); spaced puts a space before
    the name (short ones have it unless told otherwise)."""
    test = nodeid.split("::", 1)[-1] if short else nodeid
    if not name:
        return test
    return f"{test} [{name}]" if (short if spaced is None else spaced) else f"{test}[{name}]"


class Verdict(str, enum.Enum):
    """A check's or a measurement's verdict; its value is what the JSON file says."""
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    INVALID = "invalid"  # a measurement that cannot be true (above the DRAM's peak)
    MEASURED = "measured"  # nothing was asked of it

    __hash__ = str.__hash__  # a dict keyed by "pass" finds Verdict.PASS, as == does

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def worst(cls, verdicts) -> Verdict:
        """The verdict of several checks: the worst of them (MEASURED when there are none)."""
        found = set(verdicts)
        for v in (cls.INVALID, cls.FAIL, cls.INCONCLUSIVE, cls.PASS):
            if v in found:
                return v
        return cls.MEASURED


class Mode(enum.Enum):
    """How a perf test's body runs in this process, decided once, at its setup."""
    TIMED = "timed"  # --triton-perf on a GPU: triton_bench times fn
    DRY_RUN = "dry run"  # no GPU to time on: triton_bench checks its arguments, calls fn once
    SKIPPED = "skipped"  # a GPU without --triton-perf: full-size bodies belong to the perf job


@dataclass
class Check:
    """One target checked against one measurement (or the geomean of several)."""
    target: str  # e.g. "bandwidth_frac"
    asked: float
    achieved: float  # a fraction of peak for the *_frac targets, as the table and JSON show it
    ci: tuple[float, float]
    verdict: Verdict
    message: str
    short: str = ""  # the target as the summary table shows it, in this device's numbers

    def to_dict(self) -> dict:
        return {"target": self.target, "asked": self.asked, "achieved": self.achieved,
                "ci": list(self.ci), "verdict": self.verdict.value, "message": self.message,
                "short": self.short}

    @classmethod
    def from_dict(cls, d: dict | None) -> Check | None:
        if d is None:
            return None
        return cls(d["target"], d["asked"], d["achieved"], tuple(d["ci"]), Verdict(d["verdict"]),
                   d.get("message", ""), d.get("short", ""))


@dataclass
class Measurement:
    """One triton_bench call: its samples, their summary, rates and fractions of peak (computed
    once, by perf/verdict.py), its checks, and what the diagnoses added."""
    nodeid: str
    name: str | None
    time: Summary  # ms per call
    timings: Timings  # the raw samples, method, and the GPU's clocks before and after
    bytes: int | None = None
    flops: int | None = None
    dtype: str | None = None
    baseline: Summary | None = None
    speedup: Summary | None = None  # baseline / fn, paired per sample
    config: str | None = None
    device: DeviceId = field(default_factory=DeviceId)
    peaks: Peaks = field(default_factory=Peaks)  # filled when judged (perf/verdict.py)
    checks: list[Check] = field(default_factory=list)
    roofline: str = ""
    rounds: int = 1
    gbps: float | None = None
    tflops: float | None = None
    # what was achieved as a fraction of each kind of peak, filled when judged
    fractions: Fractions = field(default_factory=Fractions)
    trace: str | None = None  # --triton-perf-profile: the Chrome trace's path
    explain: Diagnosis | None = None  # --triton-perf-explain, or a verdict not a pass

    def __post_init__(self):
        # a measurement made by hand (a test, a pytest_triton_measure user) may give these as the
        # JSON report writes them
        for name, kind in (("device", DeviceId), ("peaks", Peaks), ("fractions", Fractions)):
            if isinstance(getattr(self, name), dict):
                setattr(self, name, kind.from_dict(getattr(self, name)))
        if isinstance(self.explain, dict):
            self.explain = Diagnosis.from_dict(self.explain)

    @property
    def label(self) -> str:
        return label(self.nodeid, self.name)

    @property
    def junit_prefix(self) -> str:
        """What its JUnit properties' names start with: 'triton.', or 'triton[name].'."""
        return f"triton[{self.name}]." if self.name else "triton."

    @property
    def median_ms(self) -> float:
        return self.time.median

    @property
    def bandwidth_frac(self) -> float | None:
        """Achieved fraction of the peak DRAM bandwidth fractions are taken against."""
        p = self.peaks
        return self.fraction("bandwidth", ceiling_kind(p.dram_source) if p.dram_gbps else None)

    @property
    def tflops_frac(self) -> float | None:
        """Achieved fraction of the dense tensor-core peak of the operands' dtype."""
        p = self.peaks
        return self.fraction("tflops", ceiling_kind(p.tflops_source) if p.tflops else None)

    def fraction(self, kind: str, src: str | None) -> float | None:
        """The fraction achieved of this measurement's `kind` ("bandwidth" or "tflops") peak
        from `src` ("datasheet" or "measured"; None: no such peak), as `fractions` holds it."""
        return self.fractions.of(kind, src)

    @property
    def verdict(self) -> Verdict:
        return Verdict.worst(c.verdict for c in self.checks)

    def fractions_text(self) -> str:
        """'85.8% bw, 95.9% of copy', as the table shows it: of the datasheet peak, then of the
        measured ceiling (when this device's were measured); TFLOP/s where flops= was given,
        else bandwidth."""
        fr = self.fractions
        kind = "tflops" if self.tflops is not None and fr.of("tflops", "datasheet") \
            else "bandwidth"
        ds, meas = (fr.of(kind, src) for src in ("datasheet", "measured"))
        if ds is None and meas is None:
            return ""
        unit, ceiling = ("bw", "copy") if kind == "bandwidth" else (self.dtype, "cuBLAS")
        text = f"{100 * ds:.1f}% {unit}" if ds is not None else ""
        if meas is not None:
            text += f"{', ' if text else ''}{100 * meas:.1f}% of {ceiling}"
        return text

    def to_dict(self) -> dict:
        t = self.timings
        d = {
            "nodeid": self.nodeid, "name": self.name, "verdict": self.verdict.value,
            "median_ms": self.time.median, "time_ms": self.time.to_dict(),
            "gbps": self.gbps, "tflops": self.tflops, "bytes": self.bytes, "flops": self.flops,
            "dtype": self.dtype, "config": self.config, "method": t.method,
            "l2": t.l2, "calls_per_sample": t.calls_per_sample,
            "rounds": self.rounds, "throttled": t.throttled,
            "gpu_before": t.gpu_before, "gpu_after": t.gpu_after,
            "notes": t.notes, "peaks": self.peaks.to_dict(), "roofline": self.roofline,
            "fractions": self.fractions.to_dict(),
            "baseline_ms": self.baseline.to_dict() if self.baseline else None,
            "speedup": self.speedup.to_dict() if self.speedup else None,
            "checks": [c.to_dict() for c in self.checks], "device": self.device.to_dict(),
            "samples_ms": t.ms, "baseline_samples_ms": t.baseline_ms,
        }
        if self.trace is not None:
            d["trace"] = self.trace
        if self.explain is not None:
            d["explain"] = self.explain.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Measurement:
        """A measurement read back from to_dict(): its nodeid and time_ms are required; every
        other key it lacks takes the field's default, and keys it does not know are ignored."""
        timings = Timings(ms=d.get("samples_ms") or [], baseline_ms=d.get("baseline_samples_ms"),
                          **{k: d[k] for k in _TIMINGS if d.get(k) is not None})
        plain = {k: d[k] for k in _PLAIN if d.get(k) is not None}
        return cls(nodeid=d["nodeid"], name=d.get("name"), time=Summary.from_dict(d["time_ms"]),
                   timings=timings, baseline=Summary.from_dict(d.get("baseline_ms")),
                   speedup=Summary.from_dict(d.get("speedup")),
                   device=DeviceId.from_dict(d.get("device")), peaks=Peaks.from_dict(d.get("peaks")),
                   checks=[Check.from_dict(c) for c in d.get("checks") or ()],
                   fractions=Fractions.from_dict(d.get("fractions")),
                   explain=Diagnosis.from_dict(d.get("explain")), **plain)


# The measurement's and its Timings' keys read as they are written (the others have a type or a
# name of their own); one missing or null takes the field's default.
_PLAIN = ("bytes", "flops", "dtype", "config", "roofline", "rounds", "gbps", "tflops", "trace")
_TIMINGS = ("method", "l2", "calls_per_sample", "gpu_before", "gpu_after", "notes")


@dataclass
class DryCall:
    """One triton_bench call of a dry run: its arguments were checked, fn (and baseline) ran once;
    under the interpreter, what fn's launches did (env/work.py) and its declared bytes=/flops=."""
    name: str | None
    baseline: bool
    work: Work | None = None
    bytes: int | None = None
    flops: int | None = None
    note: str = ""  # what the declarations' check says without failing (perf/work_check.py)

    nodeid: str = ""

    @property
    def label(self) -> str:
        """As a measurement's: the test's id, and the call's name= where it has one."""
        return label(self.nodeid, self.name)

    def to_dict(self) -> dict:
        return {"name": self.name, "baseline": self.baseline, "bytes": self.bytes,
                "flops": self.flops, "note": self.note,
                "work": self.work.to_dict() if self.work else None}

    @classmethod
    def from_dict(cls, d: dict, nodeid: str) -> DryCall:
        return cls(d.get("name"), bool(d.get("baseline")), Work.from_dict(d.get("work")),
                   d.get("bytes"), d.get("flops"), d.get("note", ""), nodeid)


@dataclass
class PerfRecord:
    """Everything about one perf test (see the module's docstring)."""
    nodeid: str
    target: PerfTarget | None = None
    mode: Mode | None = None  # decided at setup (perf/lifecycle.py), never again
    # An interpreter gap that stops the body: triton_bench checks its arguments, then the test
    # skips naming the gap (the dry run still checks what it can).
    gap_stops_body: str | None = None
    measurements: list[Measurement] = field(default_factory=list)  # TIMED
    dry_calls: list[DryCall] = field(default_factory=list)  # DRY_RUN
    unverifiable: list[str] = field(default_factory=list)  # DRY_RUN: checks that need the device
    geomean: Check | None = None  # geomean_speedup over all measurements, judged at the end
    outcome: str | None = None  # as the test's call report gave it, where reports are read

    @property
    def calls(self) -> list:
        """What triton_bench did so far: its measurements, or a dry run's calls."""
        return self.dry_calls if self.mode is Mode.DRY_RUN else self.measurements

    @property
    def counted(self) -> list[DryCall]:
        """The dry run's calls whose work was counted under the interpreter."""
        return [c for c in self.dry_calls if c.work is not None]

    @property
    def verdict(self) -> Verdict:
        """The test's verdict: the worst of every check of every measurement and the geomean's."""
        checks = [c for m in self.measurements for c in m.checks]
        return Verdict.worst(c.verdict for c in checks + ([self.geomean] if self.geomean else []))

    @property
    def device(self) -> DeviceId:
        """The device its measurements ran on (name, sku, SMs, driver, fingerprint)."""
        return self.measurements[0].device if self.measurements else DeviceId()

    def payload(self) -> dict:
        """What the call report carries to the process that writes the results: JSON-ready."""
        d = {"measurements": [m.to_dict() for m in self.measurements],
             "target": self.target.describe() if self.target else None,
             "geomean": None if self.geomean is None else self.geomean.to_dict()}
        if self.counted:
            d["dry_calls"] = [c.to_dict() for c in self.dry_calls]
        return d

    def to_dict(self) -> dict:
        return {"nodeid": self.nodeid, "outcome": self.outcome, **self.payload()}

    @classmethod
    def from_dict(cls, d: dict) -> PerfRecord:
        target = PerfTarget.from_describe(d["target"]) if d.get("target") else None
        dry = [DryCall.from_dict(c, d["nodeid"]) for c in d.get("dry_calls") or ()]
        return cls(nodeid=d["nodeid"], target=target,
                   mode=Mode.DRY_RUN if dry and not d["measurements"] else Mode.TIMED,
                   measurements=[Measurement.from_dict(m) for m in d["measurements"]],
                   dry_calls=dry, geomean=Check.from_dict(d.get("geomean")),
                   outcome=d.get("outcome"))


RECORD_KEY = pytest.StashKey[PerfRecord]()  # per perf item, made at collection


def of(item: pytest.Item) -> PerfRecord | None:
    """The item's perf record; None for a test that is no perf test."""
    return item.stash.get(RECORD_KEY, None)
