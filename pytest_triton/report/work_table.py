"""The terminal's table of counted work: for each dry-run triton_bench call whose launches ran
under Triton's interpreter, what they asked of memory (logical GB moved: loaded + stored +
atomic) and of the tensor cores, beside what the test declared (bytes=, flops=)."""

from __future__ import annotations

from ..env.work import gb, gflop
from ..perf.record import PerfRecord

HEADERS = ("test", "launches", "programs", "GB moved (logical)", "GB loaded", "GB stored",
           "atomic lanes", "GFLOP", "declared")


def _declared(bytes: int | None, flops: int | None) -> str:
    parts = [f"bytes={gb(int(bytes))} GB" if bytes else "",
             f"flops={gflop(int(flops))} GFLOP" if flops else ""]
    return ", ".join(p for p in parts if p)


def table(records: list[PerfRecord]) -> list[str]:
    """The table's lines; none where nothing was counted."""
    rows = []
    for r in records:
        for c in r.counted:
            w = c.work
            test = c.label.split("::", 1)[-1]
            rows.append((test, str(w.launches), str(w.programs), gb(w.bytes), gb(w.bytes_loaded),
                         gb(w.bytes_stored), str(w.atomics), gflop(w.flops),
                         _declared(c.bytes, c.flops)))
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows + [HEADERS]) for i in range(len(HEADERS))]
    out = ["work counted under Triton's interpreter (the dry run's call of fn; not a time):",
           "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    notes = [f"{c.label}: {c.note}" for r in records for c in r.counted if c.note]
    return out + notes
