"""The work gate: where both runs of a compare counted a test's work under Triton's interpreter
(env/work.py: CPU dry runs), the counts are compared exactly. Integers that repeat exactly need
no interval: any change in bytes moved, FLOPs, atomic lanes, launches or programs is the code's.

MORE-WORK: any of them grew; LESS-WORK: none grew and one fell; SAME-WORK: all equal.
--triton-perf-fail-on=more-work fails the run on a MORE-WORK."""

from __future__ import annotations

from ..env.work import Work, gb, gflop
from ..perf.record import DryCall, PerfRecord
from .change import Change

# what is compared, as the row names it
_TOTALS = (("GB moved", lambda w: w.bytes, gb), ("GFLOP", lambda w: w.flops, gflop),
           ("atomic lanes", lambda w: w.atomics, str), ("launches", lambda w: w.launches, str),
           ("programs", lambda w: w.programs, str))


def _counted(records: list[PerfRecord]) -> dict[str, DryCall]:
    return {c.label: c for r in records for c in r.counted}


def verdict(ref: Work, new: Work) -> tuple[Change, str]:
    """The verdict, and each total that changed, in the user's units: 'GB moved 0.000012 ->
    0.00001212 (+1.00%)'."""
    changes, grew, fell = [], False, False
    for name, total, unit in _TOTALS:
        a, b = total(ref), total(new)
        if a == b:
            continue
        grew, fell = grew or b > a, fell or b < a
        rel = f" ({100 * (b / a - 1):+.2f}%)" if a else ""
        changes.append(f"{name} {unit(a)} -> {unit(b)}{rel}")
    if grew:
        return Change.MORE_WORK, "; ".join(changes)
    if fell:
        return Change.LESS_WORK, "; ".join(changes)
    same = f"{gb(new.bytes)} GB moved, {gflop(new.flops)} GFLOP, {new.launches} launches"
    return Change.SAME_WORK, same


def verdicts(ref: list[PerfRecord], new: list[PerfRecord]) -> list[tuple[str, Change, str]]:
    """(label, verdict, what changed) for each test and shape whose work both runs counted."""
    old, now = _counted(ref), _counted(new)
    out = []
    for label, call in now.items():
        if label in old:
            change, why = verdict(old[label].work, call.work)
            out.append((label, change, f"work counted under the interpreter: {why}"))
    return out
