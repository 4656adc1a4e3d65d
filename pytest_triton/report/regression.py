"""A run's measurements compared with a saved run's (perf/compare.py's statistics): a row per
measurement and per test of several shapes, and their text: the terminal's lines and the pull
request's Markdown table. The pytest run's gate is report/gate.py; `python -m pytest_triton
compare REF NEW` does the same on two files."""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..perf import compare as stats
from ..perf.compare import Change, Result, Side
from ..perf.record import Measurement, PerfRecord
from . import history, work_gate

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
    ref: history.SavedRun
    by: str
    threshold: float
    rows: list[Row] = field(default_factory=list)
    refusal: str = ""  # the whole run is not comparable
    made: int = 0  # the comparisons made together: each interval at 1 - 1%/made (perf/compare.py)

    def count(self, verdict: Change) -> int:
        return sum(r.verdict == verdict for r in self.rows)

    def failing(self, fail_on: frozenset[str]) -> list[Row]:
        return [r for r in self.rows if r.verdict.value in fail_on]

    def to_dict(self) -> dict:
        def row(r: Row) -> dict:
            res = r.result
            return {"label": r.label, "verdict": r.verdict.value, "whole": r.whole,
                    "change": res.change if res else None, "lo": res.lo if res else None,
                    "hi": res.hi if res else None, "spread": res.spread if res else None,
                    "spread_from": res.spread_from if res else None,
                    "clock_change": res.clock_change if res else None, "why": r.why,
                    "cause": r.cause,
                    "ref_ms": r.ref.time.median if r.ref else None,
                    "new_ms": r.new.time.median if r.new else None}
        return {"reference": str(self.ref.path), "by": self.by, "threshold": self.threshold,
                "comparisons": self.made, "refusal": self.refusal,
                "rows": [row(r) for r in self.rows]}


def sku(device: dict | None) -> str:
    return history.sku_of(device) or "an unknown device"


def _clock(m: Measurement) -> float | None:
    readings = [g.get("sm_clock_mhz") for g in (m.timings.gpu_before, m.timings.gpu_after) if g]
    readings = [c for c in readings if c]
    return sum(readings) / len(readings) if readings else None


def _kind(m: Measurement) -> str:
    return stats.kind_of(m.time.median, m.flops)


def _peak(m: Measurement, both_measured: bool) -> float | None:
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


def spreads(ref: history.SavedRun, directory: Path, *, skip: Path | None = None
            ) -> dict[str, list[float]]:
    """Each label's medians in the newest SPREAD_RUNS saved runs of the reference's GPU model
    (its own card or another of its SKU: CI runners rarely get one card twice), `skip` left
    out; runs of another branch than the reference's are left out too, where it has one (a
    pull request's runs are not the reference branch's spread)."""
    found: dict[str, list[float]] = {}
    if not Path(directory).is_dir():
        return found
    model = history.model_of(ref.key)
    entries = [e for key, runs in history.saved_runs(directory).items()
               if history.model_of(key) == model for e in runs
               if skip is None or e.path.resolve() != Path(skip).resolve()]
    for entry in sorted(entries, key=lambda e: e.stamp)[-SPREAD_RUNS:]:
        try:
            run = history.load(entry.path)
        except history.HistoryError:
            continue  # a bad file is named when it is the reference; here it adds no spread
        if ref.branch and run.branch and run.branch != ref.branch:
            continue
        for label, m in _labelled(run.records).items():
            found.setdefault(label, []).append(m.time.median)
    return found


def timed(records: list[PerfRecord]) -> bool:
    """Whether the run timed anything: a CPU run's dry runs do not, and are compared on their
    counted work alone (report/work_gate.py), neither MISSING nor REFUSED on time."""
    return any(r.measurements for r in records)


def compare_runs(ref: history.SavedRun, records: list[PerfRecord], device: dict | None, *,
                 by: str = "time", threshold: float = stats.DEFAULT_THRESHOLD,
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
    out.rows += [Row(label, change, why=why)
                 for label, change, why in work_gate.verdicts(ref.records, records)]
    for r in records:  # the shapes of one test, as a whole
        if len(r.measurements) < 2:
            continue
        shapes = {m.label for m in r.measurements}
        parts = [row for row in out.rows if row.result and row.label in shapes]
        if parts:
            whole = stats.combine([p.result for p in parts], threshold)
            out.rows.append(Row(r.nodeid, whole.verdict, whole, whole=True, why=whole.why))
    out.rows.sort(key=lambda row: (ORDER.index(row.verdict), row.label))
    return out


def _row(label: str, ref: Measurement, new: Measurement, out: Outcome, same_gpu: bool,
         medians: list[float] | None) -> Row:
    a, b = ref.time, new.time
    if out.by == "fraction":
        both = all(_peak(m, True) for m in (ref, new))
        pa, pb = _peak(ref, both), _peak(new, both)
        if not (ref.bytes or ref.flops) or not pa or not pb:
            return Row(label, Change.REFUSED, ref=ref, new=new,
                       why="no bytes= or flops= (or no peak of this kind): no fraction of peak "
                           "to compare")
        b = _scaled(new, pb / pa)
    if same_gpu and medians and out.by == "time":
        spread, src = stats.spread_of(medians, _kind(new), out.made)
    else:
        spread, src = stats.spread_of([], _kind(new))
    clocks = (_clock(ref), _clock(new)) if same_gpu else (None, None)
    result = stats.compare(Side(a, clocks[0], ref.timings.throttled),
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


# --- text -------------------------------------------------------------------------------------------

def _units(row: Row) -> str:
    """The row's times, and its rates and fractions of peak where the test gave bytes= or
    flops=, reference -> this run. The fractions are those a comparison by fraction judges:
    of the measured ceilings where both runs measured theirs, else of the datasheet peaks."""
    a, b = row.ref, row.new
    if a is None or b is None:
        m = a or b
        return f"{m.time.median:.4g} ms" if m else ""
    text = f"{a.time.median:.4g} -> {b.time.median:.4g} ms"
    if a.tflops and b.tflops:
        text += f"; {a.tflops:.1f} -> {b.tflops:.1f} TFLOP/s"
    elif a.gbps and b.gbps:
        text += f"; {a.gbps:,.0f} -> {b.gbps:,.0f} GB/s"
    both = all(_peak(m, True) for m in (a, b))
    fa, fb = (_fraction(m, _peak(m, both)) for m in (a, b))
    if fa and fb:
        of = "measured ceiling" if both else "datasheet peak"
        text += f"; {100 * fa:.1f}% -> {100 * fb:.1f}% of {of}"
    return text


def _fraction(m: Measurement, peak: float | None) -> float | None:
    """The measurement's rate over `peak`: the fraction a comparison by fraction compares."""
    rate = m.tflops if m.flops else m.gbps
    return rate / peak if rate and peak else None


def _change(row: Row, by: str = "time") -> str:
    """'+3.2% [+2.1%, +4.3%] (+0.0086 ms [+0.0057, +0.0116])': the change and its interval,
    relative and, compared by time, in ms per call (of the reference's time)."""
    r = row.result
    if r is None or not math.isfinite(r.change):
        return ""
    text = f"{100 * r.change:+.1f}% {r.interval_text}"
    if row.ref is not None and not row.whole and by == "time":
        ms = row.ref.time.median
        text += f" ({ms * r.change:+.4g} ms [{ms * r.lo:+.4g}, {ms * r.hi:+.4g}])"
    return text


def describe_ref(ref: history.SavedRun) -> str:
    bits = [ref.name or "unnamed", (ref.commit or "no commit")[:10]]
    if ref.branch:
        bits.append(f"branch {ref.branch}")
    bits += [str(ref.created)[:16].replace("T", " "), sku(ref.device)]
    return ", ".join(bits)


def counts_text(out: Outcome) -> str:
    counts = ", ".join(f"{out.count(v)} {v.value}" for v in ORDER if out.count(v))
    level = f"; intervals 99% for the run's {out.made} comparisons" if out.made > 1 else ""
    return (f"{counts or 'nothing compared'} (threshold {100 * out.threshold:g}%, by "
            f"{out.by}{level}; SLOW or FAST: the interval is past zero and reaches the threshold)")


def lines(out: Outcome, fail_on: frozenset[str], fail_on_flag: str = "--triton-perf-fail-on"
          ) -> list[str]:
    """The terminal section's lines; `fail_on_flag` is the option the user gave `fail_on` with."""
    text = [f"against {describe_ref(out.ref)} ({out.ref.path})"]
    if out.refusal:
        text.append(f"REFUSED: {out.refusal}")
    shown = [r for r in out.rows
             if r.verdict not in QUIET and not (out.refusal and r.verdict is Change.REFUSED)]
    # advice that many UNCERTAIN rows share is said once, after them; each row keeps its facts
    shared = Counter(r.result.advice for r in shown if r.result and r.result.advice)
    for row in shown:
        what = f"{row.verdict.value.upper():9s} {row.label}{' (all shapes)' if row.whole else ''}"
        detail = "; ".join(x for x in (_change(row, out.by), _units(row)) if x)
        text.append(f"{what}: {detail}" if detail else what)
        why = row.why
        if row.result and shared[row.result.advice] > 1:
            why = why.removesuffix(f"; {row.result.advice}")
        if why and row.verdict is not Change.SLOW:
            text.append(f"          {why}")
        if row.cause:
            text.append(f"          {row.cause}")
    text += [f"{n} of the UNCERTAIN above: {advice}" for advice, n in shared.items() if n > 1]
    text.append(counts_text(out))
    failing = out.failing(fail_on)
    if failing:
        text.append(f"the run FAILS: {fail_on_flag}={','.join(sorted(fail_on))}, and "
                    f"{len(failing)} {'is' if len(failing) == 1 else 'are'} "
                    f"{' or '.join(sorted({r.verdict.value.upper() for r in failing}))}")
    return text


def markdown(out: Outcome) -> str:
    """The pull request's table: regressions first, then improvements, then the counts."""
    head = [f"### pytest-triton: against {describe_ref(out.ref)}", ""]
    if out.refusal:
        return "\n".join(head + [f"**Refused**: {out.refusal}", ""])
    shown = [r for r in out.rows if r.verdict not in QUIET]
    shown.sort(key=lambda r: ({Change.SLOW: 0, Change.FAST: 1}.get(r.verdict, 2), r.label))
    table = ["| verdict | test | change [interval: 99% for the run] | reference -> this run |",
             "|---|---|---|---|"]
    for r in shown:
        label = r.label.replace("|", "\\|") + (" (all shapes)" if r.whole else "")
        units = (_units(r) or r.why) + ("; the autotuner chose another config" if r.cause else "")
        table.append(f"| {r.verdict.value.upper()} | `{label}` | {_change(r, out.by)} | "
                     f"{units.replace('|', '/')} |")
    return "\n".join(head + (table if shown else []) + ["", counts_text(out), ""])


def nothing_measured(doc: dict) -> str:
    """Why a run's document holds no measurement: its perf tests dry-ran, or none timed."""
    n = len(doc.get("unchecked") or [])
    if n:
        return f"a dry run: no GPU to time on, {n} perf target{'s' if n != 1 else ''} unchecked"
    return "no perf test was selected, or none called triton_bench"


def write_markdown(out: Outcome, path: str | None) -> None:
    """The table to `path` (if given) and appended to $GITHUB_STEP_SUMMARY (if set)."""
    write_markdown_text(markdown(out), path)


def write_markdown_text(text: str, path: str | None) -> None:
    if path:
        Path(path).write_text(text)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as f:
            f.write(text + "\n")
