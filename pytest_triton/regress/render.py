"""A comparison written out: the terminal's lines (the gate's section, `compare`'s output), the
pull request's Markdown table (and $GITHUB_STEP_SUMMARY), and the JSON of `compare --json`.
Rows come from rows.py; nothing here judges."""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path

from ..perf.record import Measurement
from . import storage
from .change import Change
from .rows import ORDER, QUIET, Outcome, Row, measured_alike, peak, sku


def to_json(out: Outcome) -> dict:
    """The comparison as `compare --json` writes it: the reference, the settings, a row each."""
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
    return {"reference": str(out.ref.path), "by": out.by, "threshold": out.threshold,
            "comparisons": out.made, "refusal": out.refusal,
            "rows": [row(r) for r in out.rows]}


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
    both = measured_alike(a, b)
    fa, fb = (_fraction(m, peak(m, both)) for m in (a, b))
    if fa and fb:
        of = "measured ceiling" if both else "datasheet peak"
        text += f"; {100 * fa:.1f}% -> {100 * fb:.1f}% of {of}"
    return text


def _fraction(m: Measurement, of: float | None) -> float | None:
    """The measurement's rate over the peak `of`: the fraction a comparison by fraction
    compares."""
    rate = m.tflops if m.flops else m.gbps
    return rate / of if rate and of else None


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


def describe_ref(ref: storage.SavedRun) -> str:
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
