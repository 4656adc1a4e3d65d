"""A run's measurements compared with a saved run's (change.py's statistics): a row per
measurement and per test of several shapes, in the order they are shown. render.py writes them
out; the pytest run's gate is gate.py, and `python -m pytest_triton compare REF NEW` does the
same on two files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..perf.record import Measurement, PerfRecord
from . import change, storage, work_gate
from .change import Change, Result, Side

# the order rows are shown in: what fails a run first
ORDER = (Change.SLOW, Change.MORE_WORK, Change.REFUSED, Change.UNCERTAIN, Change.MISSING,
         Change.FAST, Change.LESS_WORK, Change.NEW, Change.SAME, Change.SAME_WORK)
QUIET = (Change.SAME, Change.SAME_WORK)  # counted, not listed
SPREAD_RUNS = 10  # the newest saved runs of the device a test's run-to-run spread is taken from


@dataclass
class Row:
    """One measurement compared (or, `whole`, one test of several shapes as a whole)."""
    label: str
    verdict: Change
    result: Result | None = None
    ref: Measurement | None = None
    new: Measurement | None = None
    whole: bool = False
    why: str = ""
    cause: str = ""  # what else differs between the two runs of it: the autotuner's config


@dataclass
class Outcome:
    ref: storage.SavedRun
    by: str
    threshold: float
    rows: list[Row] = field(default_factory=list)
    refusal: str = ""  # the whole run is not comparable
    made: int = 0  # the comparisons made together: each interval at 1 - 1%/made (change.py)

    def count(self, verdict: Change) -> int:
        return sum(r.verdict == verdict for r in self.rows)

    def failing(self, fail_on: frozenset[str]) -> list[Row]:
        return [r for r in self.rows if r.verdict.value in fail_on]


def sku(device: dict | None) -> str:
    return storage.sku_of(device) or "an unknown device"


def _clock(m: Measurement) -> float | None:
    readings = [g.get("sm_clock_mhz") for g in (m.timings.gpu_before, m.timings.gpu_after) if g]
    readings = [c for c in readings if c]
    return sum(readings) / len(readings) if readings else None


def _kind(m: Measurement) -> str:
    return change.kind_of(m.time.median, m.flops)


def measured_alike(a: Measurement, b: Measurement) -> bool:
    """Whether two measurements' fractions can both be taken of their measured ceilings: both
    have one of their kind, and, for bandwidth, both are of a copy of their own bytes or both of
    the device's one ceiling (a run saved before the copies' sizes were measured): a fraction of
    a copy of 512 MiB and one of a 1 GiB copy differ by the copy's size effect, not the kernel."""
    if not all(peak(m, True) for m in (a, b)):
        return False
    return bool(a.flops) or ((a.peaks.dram_measured_for is None)
                             == (b.peaks.dram_measured_for is None))


def peak(m: Measurement, both_measured: bool) -> float | None:
    """The peak a fraction of `m` is taken of: the measured ceiling where both runs measured
    theirs, else the datasheet's; TFLOP/s for a flops= measurement, else GB/s."""
    return m.peaks.of_kind("tflops" if m.flops else "bandwidth",
                           "measured" if both_measured else "datasheet")


def _scaled(m: Measurement, factor: float):
    """The measurement's time summary times `factor` (fractions: the other GPU's peak)."""
    s = m.time
    return type(s)(n=s.n, median=s.median * factor, q1=s.q1 * factor, q3=s.q3 * factor,
                   mean=s.mean * factor, stdev=s.stdev * factor, min=s.min * factor,
                   max=s.max * factor, ci_lo=s.ci_lo * factor, ci_hi=s.ci_hi * factor)


def _labelled(records: list[PerfRecord]) -> dict[str, Measurement]:
    return {m.label: m for r in records for m in r.measurements}


def spreads(ref: storage.SavedRun, directory: Path, *, skip: Path | None = None
            ) -> dict[str, list[float]]:
    """Each label's medians in the newest SPREAD_RUNS saved runs of the reference's GPU model
    (its own card or another of its SKU: CI runners rarely get one card twice), `skip` left
    out; runs of another branch than the reference's are left out too, where it has one (a
    pull request's runs are not the reference branch's spread)."""
    found: dict[str, list[float]] = {}
    if not Path(directory).is_dir():
        return found
    model = storage.model_of(ref.key)
    entries = [e for key, runs in storage.saved_runs(directory).items()
               if storage.model_of(key) == model for e in runs
               if skip is None or e.path.resolve() != Path(skip).resolve()]
    for entry in sorted(entries, key=lambda e: e.stamp)[-SPREAD_RUNS:]:
        try:
            run = storage.load(entry.path)
        except storage.HistoryError:
            continue  # a bad file is named when it is the reference; here it adds no spread
        if ref.branch and run.branch and run.branch != ref.branch:
            continue
        for label, m in _labelled(run.records).items():
            found.setdefault(label, []).append(m.time.median)
    return found


def timed(records: list[PerfRecord]) -> bool:
    """Whether the run timed anything: a CPU run's dry runs do not, and are compared on their
    counted work alone (work_gate.py), neither MISSING nor REFUSED on time."""
    return any(r.measurements for r in records)


def compare_runs(ref: storage.SavedRun, records: list[PerfRecord], device: dict | None, *,
                 by: str = "time", threshold: float = change.DEFAULT_THRESHOLD,
                 medians: dict[str, list[float]] | None = None,
                 by_fraction: str = "--triton-perf-compare-by=fraction") -> Outcome:
    """Every measurement of `records` (this run, on `device`) against the reference run's.
    `by_fraction`: how the caller's user asks for a comparison by fraction (a refusal says it)."""
    out = Outcome(ref, by, threshold)
    same_gpu = sku(ref.device) == sku(device)
    if not same_gpu and by == "time" and timed(records):
        out.refusal = (f"{sku(ref.device)} vs {sku(device)}: not comparable; compare fractions of "
                       f"the measured ceiling with {by_fraction}")
    old, new = _labelled(ref.records), _labelled(records)
    # made together (compare()); none where the whole run is refused
    out.made = 0 if out.refusal else sum(label in old for label in new)
    for label, m in new.items():
        if label not in old:
            out.rows.append(Row(label, Change.NEW, new=m))
        elif out.refusal:
            out.rows.append(Row(label, Change.REFUSED, ref=old[label], new=m, why=out.refusal))
        else:
            out.rows.append(_row(label, old[label], m, out, same_gpu, (medians or {}).get(label)))
    if timed(records):
        out.rows += [Row(label, Change.MISSING, ref=m) for label, m in old.items()
                     if label not in new]
    out.rows += [Row(label, verdict, why=why)
                 for label, verdict, why in work_gate.verdicts(ref.records, records)]
    for r in records:  # the shapes of one test, as a whole
        if len(r.measurements) < 2:
            continue
        shapes = {m.label for m in r.measurements}
        parts = [row for row in out.rows if row.result and row.label in shapes]
        if parts:
            whole = change.combine([p.result for p in parts], threshold)
            out.rows.append(Row(r.nodeid, whole.verdict, whole, whole=True, why=whole.why))
    out.rows.sort(key=lambda row: (ORDER.index(row.verdict), row.label))
    return out


def _row(label: str, ref: Measurement, new: Measurement, out: Outcome, same_gpu: bool,
         medians: list[float] | None) -> Row:
    a, b = ref.time, new.time
    if out.by == "fraction":
        both = measured_alike(ref, new)
        pa, pb = peak(ref, both), peak(new, both)
        if not (ref.bytes or ref.flops) or not pa or not pb:
            return Row(label, Change.REFUSED, ref=ref, new=new,
                       why="no bytes= or flops= (or no peak of this kind): no fraction of peak "
                           "to compare")
        b = _scaled(new, pb / pa)
    if same_gpu and medians and out.by == "time":
        spread, src = change.spread_of(medians, _kind(new), out.made)
    else:
        spread, src = change.spread_of([], _kind(new))
    clocks = (_clock(ref), _clock(new)) if same_gpu else (None, None)
    result = change.compare(Side(a, clocks[0], ref.timings.throttled),
                           Side(b, clocks[1], new.timings.throttled),
                           threshold=out.threshold, spread=spread, spread_from=src,
                           comparisons=out.made)
    return Row(label, result.verdict, result, ref, new, why=result.why, cause=config_change(ref, new))


def config_change(ref: Measurement, new: Measurement) -> str:
    """Where the autotuner chose another config in this run than in the reference's (on an H100
    one process of ten ran a 4096^3 matmul 13-15% slower, at 90.6% of cuBLAS against 102-106%):
    a change of config is a change the code did not make, and the first place to look."""
    if not ref.config or not new.config or ref.config == new.config:
        return ""
    return f"the autotuner chose another config: {new.config} (the reference's: {ref.config})"
