"""Guard regions: poison before and after a poisoned buffer, in the same allocation.

make_tensor(..., poison=True) and poisoned_like return a view into the middle of a larger
allocation whose every other element holds poison too: GUARD_BYTES before the buffer, GUARD_BYTES
after it, and (for non-contiguous layouts) the gaps between its rows or elements. A kernel that
writes past either end, or into a gap, changes poison that nothing should touch; check() finds
those elements and says where they are and what was written. The plugin checks every guarded
buffer when the test's call ends, and a buffer passed to assert_close before comparing it.

Poison is compared bit for bit (NaN payloads included), so a kernel that writes NaN into a guard
is caught too. What lies beyond the guards is not checked here: --triton-sanitize memcheck (NVIDIA
compute-sanitizer) sees accesses outside any allocation.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch

from ..env import dtypes
from . import call_record

# 512 bytes on each side: torch's CUDA caching allocator hands out 512-byte aligned blocks, so the
# view keeps the alignment a plain torch.empty has (Triton specialises pointers on 16-byte
# divisibility, TMA descriptors need 16 bytes), and a write up to 512 bytes past an end is caught.
GUARD_BYTES = 512

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
MAX_LISTED = 8


@dataclass(eq=False)
class Guarded:
    flat: torch.Tensor  # the whole allocation, 1-D
    start: int  # the view's first element in `flat`
    span: int  # elements from the view's first to one past its last (gaps included)
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    pattern: int  # the poison's bits, as an integer of the element's width
    where: str  # file:line that made it

    @property
    def dtype(self) -> torch.dtype:
        return self.flat.dtype

    def describe(self) -> str:
        layout = "" if self.span == math.prod(self.shape) else f", strides {self.strides}"
        return (f"poisoned buffer ({dtypes.name(self.dtype)}, shape "
                f"{self.shape}{layout}) made at {self.where}")

    def check(self) -> str | None:
        """What was written outside the view (guards, gaps), or None: see check()."""
        return check(self)


def _dense_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def span_of(shape, strides) -> int:
    """Elements from a strided tensor's first element to one past its last."""
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))


def allocate(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, fill,
             layout: str | tuple[int, ...] | None) -> torch.Tensor:
    """A poisoned tensor of `shape` inside a guarded allocation: dense, or with rows whose stride
    is their width + 3 (layout "rows"), or an innermost stride of 2 ("elements"), or the given
    strides (a tuple: another tensor's layout, non-overlapping)."""
    if isinstance(layout, tuple):
        strides = layout
        span = span_of(shape, strides)
        base = None
    elif layout == "rows":
        base = (*shape[:-1], shape[-1] + 3)
        strides = _dense_strides(base)
    elif layout == "elements":
        base = (*shape[:-1], shape[-1] * 2)
        strides = (*_dense_strides(base)[:-1], 2)
    else:
        base = shape
        strides = _dense_strides(shape)
    if base is not None:
        span = math.prod(base)
    guard = -(-GUARD_BYTES // dtype.itemsize)
    flat = torch.full((guard + span + guard,), fill, dtype=dtype, device=device)
    view = flat.as_strided(shape, strides, guard)
    pattern = int(flat[:1].view(_BITS[dtype.itemsize]).item())
    g = Guarded(flat, guard, span, tuple(shape), tuple(strides), pattern, call_record.caller())
    _register(view, g)
    return view


# Outside a test, guarded buffers are found through their storage while the tensor lives.
_LOOSE: dict[int, Guarded] = {}


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _register(view: torch.Tensor, g: Guarded) -> None:
    sc = call_record.CURRENT.get()
    if sc is not None:
        sc.guarded.append(g)  # kept until the call ends, then checked
        return
    key = _key(view)
    _LOOSE[key] = g
    weakref.finalize(view, _LOOSE.pop, key, None)


def find(t: torch.Tensor) -> Guarded | None:
    """The guarded allocation `t` is a view of, if any."""
    if not isinstance(t, torch.Tensor) or t.device.type == "meta":
        return None
    try:
        key = _key(t)
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less tensors
        return None
    sc = call_record.CURRENT.get()
    for g in (sc.guarded if sc is not None else ()):
        if _key(g.flat) == key:
            return g
    return _LOOSE.get(key)


def _clobbered(g: Guarded) -> torch.Tensor:
    """Indices into g.flat of the elements outside the buffer that no longer hold poison."""
    raw = g.flat.detach().view(_BITS[g.dtype.itemsize])
    end = g.start + g.span
    if g.span == math.prod(g.shape):  # dense: only the guards lie outside (no full-size mask)
        head = torch.nonzero(raw[:g.start] != g.pattern).flatten()
        tail = torch.nonzero(raw[end:] != g.pattern).flatten() + end
        return torch.cat([head, tail]).cpu()
    outside = torch.ones(raw.shape, dtype=torch.bool, device=raw.device)
    outside.as_strided(g.shape, g.strides, g.start).fill_(False)  # the view's own elements
    return torch.nonzero(outside & (raw != g.pattern)).flatten().cpu()


def _values(g: Guarded, idx: list[int]) -> str:
    vals = g.flat.detach()[torch.tensor(idx, device=g.flat.device)].cpu()
    if g.dtype.is_floating_point:
        vals = vals.to(torch.float64)
    return ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in vals.tolist())


def _n(count: int, what: str = "element") -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def _listing(offsets: list[int]) -> str:
    shown = ", ".join(f"{o:+d}" for o in offsets[:MAX_LISTED])
    return shown + (", ..." if len(offsets) > MAX_LISTED else "")


def check(g: Guarded) -> str | None:
    """None while every guard element still holds poison; else where and what was written."""
    idx = _clobbered(g).tolist()
    if not idx:
        return None
    before = [i for i in idx if i < g.start]
    after = [i for i in idx if i >= g.start + g.span]
    gaps = [i for i in idx if g.start <= i < g.start + g.span]
    n = len(idx)
    item = g.dtype.itemsize
    lines = [f"out-of-bounds write: {_n(n)} outside the {g.describe()} no longer "
             f"hold{'s' if n == 1 else ''} poison: a kernel wrote past the buffer."]
    if after:
        # Offsets past the end: +0 is the first element after the buffer's last.
        offs = [i - (g.start + g.span) for i in after]
        lines.append(f"  after its end: {_n(len(after))} at offset{'s' if len(after) > 1 else ''} "
                     f"{_listing(offs)} past the last element (+0 = element {g.span}, byte "
                     f"{g.span * item} from the start); written: {_values(g, after[:MAX_LISTED])}")
    if before:
        offs = [i - g.start for i in reversed(before)]
        lines.append(f"  before its start: {_n(len(before))} at offset"
                     f"{'s' if len(before) > 1 else ''} {_listing(offs)} (-1 = the element just "
                     "before the first); written: "
                     f"{_values(g, list(reversed(before))[:MAX_LISTED])}")
    if gaps:
        offs = [i - g.start for i in gaps]
        lines.append(f"  in the gaps of its strided layout (strides {g.strides}): "
                     f"{_n(len(gaps))} at offset{'s' if len(gaps) > 1 else ''} {_listing(offs)} "
                     "from its first element; written: "
                     f"{_values(g, gaps[:MAX_LISTED])}")
    guard = g.start
    lines.append(f"  (guards: {guard} elements = {guard * item} bytes of poison on each side, in "
                 f"the same allocation; writes farther out: {_farther_out(g)})")
    return "\n".join(lines)


def _farther_out(g: Guarded) -> str:
    """What finds writes beyond the guards, where this buffer lives: compute-sanitizer needs a
    CUDA GPU; on CPU (Triton's interpreter) nothing can, and such a write may crash the process."""
    if g.flat.device.type == "cuda":
        return "--triton-sanitize memcheck"
    return ("not checked on CPU, where one may crash the process (a supervised run fails the "
            "test that crashed); on a GPU, --triton-sanitize memcheck finds them")


def check_guards(t: torch.Tensor) -> None:
    """Raise AssertionError if a kernel wrote outside the poisoned buffer `t` (made by
    make_tensor(..., poison=True) or poisoned_like): past either end, or into its gaps."""
    __tracebackhide__ = True
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"check_guards: expected a torch.Tensor, got {type(t).__name__}")
    g = find(t)
    if g is None:
        raise ValueError("check_guards: this tensor has no guard regions (only make_tensor(..., "
                         "poison=True) and poisoned_like make them)")
    report = check(g)
    if report:
        forget(g)
        raise AssertionError(report)


def forget(g: Guarded) -> None:
    """Stop checking `g` (its clobbering was reported once)."""
    sc = call_record.CURRENT.get()
    if sc is not None and g in sc.guarded:
        sc.guarded.remove(g)
