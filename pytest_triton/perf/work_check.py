"""A dry run's declarations checked against the work its timed call did under Triton's
interpreter (env/work.py): triton_bench's bytes= and flops= are what every GB/s, TFLOP/s and
fraction of peak is computed from, so a declaration above what the kernel does inflates them all.

- Declared more than counted, beyond OVERSTATED (1%): the test fails, naming both numbers in GB
  or GFLOP. Bytes are the whole call's (Work.call_bytes): the kernels' and torch's own ops', so
  that a declaration counting a library's zero-filled output is not taken for an overstatement.
- Counted more bytes than declared, beyond REREAD_RATIO: a note, not a failure (redundant loads,
  or re-reads a GPU's caches may absorb), for bytes= only: a tiled matmul re-reads its operands
  by design, and its counted FLOPs include the tiles' padding, so flops= gets no such note.
- flops= is checked only where the call ran a tl.dot: elementwise FLOPs are not counted.
"""

from __future__ import annotations

import pytest

from ..env.work import Work, gb, gflop

# bytes= or flops= above the count by more than this fails: the declarations are integers the
# test computes from its shapes, so 1% leaves room for a rounded formula and none for a wrong one
OVERSTATED = 0.01

# Counted bytes above bytes= by this ratio or more get a note. A kernel declared to read its one
# input and write its one output once counts 1.5x when it reads the input twice (3 units of 2);
# a one-pass kernel whose programs each re-read a small operand (a norm's weight and bias) stays
# well below that. 1.4 notes the first and not the second.
REREAD_RATIO = 1.4


class WorkNote(pytest.PytestWarning):
    """A memory-bound test's timed call moved well more bytes than its bytes= declares."""


def _moved(w: Work) -> str:
    text = f"{gb(w.bytes_loaded)} GB loaded, {gb(w.bytes_stored)} GB stored"
    if w.atomic_bytes:
        text += f", {gb(w.atomic_bytes)} GB by atomics"
    if w.torch_ops:
        text += f"; {w.torch_text()}"
    return text


def overstated(label: str, w: Work, bytes: float | None, flops: float | None) -> str | None:
    """The failure's message where bytes= or flops= exceeds what `w` counted; else None."""
    found = []
    moved = w.call_bytes
    if bytes and bytes > moved * (1 + OVERSTATED):
        over = f"{100 * (bytes / moved - 1):.1f}%" if moved else "all of it"
        found.append(f"bytes={gb(int(bytes))} GB declared, but the timed call moved "
                     f"{gb(moved)} GB ({_moved(w)}): {over} more declared than done; every "
                     "GB/s and fraction of peak bandwidth reported for it would be inflated")
    if flops and w.flops and flops > w.flops * (1 + OVERSTATED):
        found.append(f"flops={gflop(int(flops))} GFLOP declared, but the timed call's tl.dot "
                     f"did {gflop(w.flops)} GFLOP: {100 * (flops / w.flops - 1):.1f}% more "
                     "declared than done; every TFLOP/s and fraction of peak reported for it "
                     "would be inflated")
    if not found:
        return None
    return (f"{label}: {'; '.join(found)} (counted under Triton's interpreter, every masked lane "
            f"left out; {w.launches} launch{'' if w.launches == 1 else 'es'})")


def reread(w: Work, bytes: float | None) -> str:
    """The note where the call moved REREAD_RATIO times its bytes= or more; else ''."""
    if not bytes or w.call_bytes < bytes * REREAD_RATIO:
        return ""
    return (f"the timed call moved {gb(w.call_bytes)} GB, {w.call_bytes / bytes:.2f}x its bytes="
            f"{gb(int(bytes))} GB ({_moved(w)}): redundant loads, or re-reads a GPU's caches may "
            "absorb; bytes= is what GB/s is computed from, so it stays as declared")
