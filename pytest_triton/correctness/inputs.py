"""Input guard: a kernel must not change the tensors it reads.

A kernel that also writes into its input hands every later reader (the reference, the next timed
call, a determinism check's next run) altered data: KernelBench's zero_out_kernel (PR #82) zeroed
its input, and a ReLU that also stores into `x` passes `assert_close(relu(x), torch.relu(x))`.

What counts as an input, and when it is compared:
- A tensor make_tensor makes with values (poison=True makes outputs). Its contents are copied
  when a Triton kernel first receives it (env/launch_args.py), and compared at each assert_close
  and at the end of the test's call, which a change fails unless the test compared the tensor as
  assert_close's `actual` (an output, an in-place op's result) or declared it in place.
- assert_grads_close's inputs, after fn's forward and backward (gradients.py).
- The tensors a checked `fn` captures (captured(): closure cells, defaults, partial arguments, one
  level of tuples, lists and dicts): triton_bench's (judge/timedcall.py), assert_deterministic's.

In-place ops opt out: `inplace=["x"]` or `inplace=[x]` (assert_close, assert_grads_close,
assert_deterministic, triton_bench). Cost: docs/judging.md.
"""

from __future__ import annotations

import functools
import linecache
import re
import weakref
from dataclasses import dataclass, field

import torch

from . import call_record
from .captured import captured
from .checking import ENABLED, costed
from .comparison_steps import bits, fmt, index_of

_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")
_DECLARE = ('If the op is in place by design, declare it: inplace=["{name}"] (or the tensor) on '
            "assert_close, assert_grads_close, assert_deterministic or triton_bench")
HOW_TO_DECLARE = _DECLARE + "; a tensor compared as assert_close's actual counts as written on purpose."
HOW_TO_DECLARE_STRICT = _DECLARE + "."  # --triton-judge: a compared actual must be declared too


def storage_of(t: torch.Tensor) -> int | None:
    """The address of `t`'s storage (views share it); None without one."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def snapshot(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t`'s values: on its device, else (out of memory) on the host."""
    try:
        return t.detach().clone()
    except torch.OutOfMemoryError:
        return t.detach().to("cpu", copy=True)


def difference(before: torch.Tensor, after: torch.Tensor) -> str | None:
    """None when `after` holds `before`'s bits; else how many elements changed, and the first."""
    if before.shape != after.shape or before.dtype != after.dtype:
        return (f"its shape or dtype changed: {before.dtype} {tuple(before.shape)} before, "
                f"{after.dtype} {tuple(after.shape)} after")
    a, b = bits(after.detach().to(before.device)), bits(before)
    if torch.equal(a, b):  # the common case, in one pass
        return None
    differ = a != b
    if differ.dim() > before.dim():  # complex: (real, imaginary) pairs
        differ = differ.any(-1)
    flat = differ.reshape(-1)
    n = int(flat.sum())
    if n == 0:
        return None
    i = int(torch.nonzero(flat)[0])
    was, now = before.reshape(-1)[i], after.detach().reshape(-1)[i]
    return (f"{n} of {flat.numel()} elements changed; the first at index "
            f"{index_of(i, before.shape)}: {_value(was)} before, {_value(now)} after")


def _value(v: torch.Tensor) -> str:
    try:
        x = v.item()
    except (RuntimeError, NotImplementedError):  # float4_e2m1fn_x2: torch has no scalar of it
        return "bits 0x" + "".join(f"{int(b):02x}" for b in bits(v).reshape(-1).tolist())
    return fmt(x) if isinstance(x, float) else str(x)


def describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}"


def declared(inplace) -> tuple[set[str], set[int]]:
    """(names, storages) of an inplace= argument: names of inputs, or the tensors themselves."""
    if inplace is None:
        return set(), set()
    if isinstance(inplace, (str, torch.Tensor)):
        inplace = [inplace]
    names, storages = set(), set()
    for x in inplace:
        if isinstance(x, str):
            names.add(x)
        elif isinstance(x, torch.Tensor):
            ptr = storage_of(x)
            if ptr is not None:
                storages.add(ptr)
        else:
            raise TypeError(f"inplace={inplace!r}: expected names of inputs (str) or tensors, "
                            f"got {type(x).__name__}")
    return names, storages


# --- the tensors make_tensor made -----------------------------------------------------------

@dataclass(eq=False)
class Input:
    ref: weakref.ref
    where: str  # file:line of the make_tensor call
    label: str  # dtype and shape
    copy: torch.Tensor | None = None  # its values when a kernel first received it since a check
    held: torch.Tensor | None = None  # the tensor itself while it has a copy: checked even if the
    # test drops it before the next check (at the end of its call, its locals are gone)
    seen: str = ""  # what received it: "a launch of _relu_kernel"
    changed: bool = False  # a check found it changed
    source: str = ""  # where, its file absolute: the line its name is read from

    @functools.cached_property
    def name(self) -> str | None:
        """The variable make_tensor's result was assigned to, where its line says (read only
        when a message or a declaration needs it)."""
        path, _, line = (self.source or self.where).rpartition(":")
        m = _ASSIGNED.match(linecache.getline(path, int(line)) if line.isdigit() else "")
        return m.group(1) if m else None

    def title(self) -> str:
        name = self.name or "an input"
        return f"{name} ({self.label}, made by make_tensor at {self.where})"


@dataclass
class Change:
    title: str
    names: tuple  # what it may be declared by: its make_tensor name, the name fn captured it by
    storage: int | None
    detail: str
    seen: str
    found: str


@dataclass(eq=False)
class Guard:
    """The running test's inputs (call_record.TestScope.inputs), their copies and what changed."""
    inputs: list[Input] = field(default_factory=list)
    pending: set = field(default_factory=set)  # tracked, no copy yet: the next launch takes one
    changes: list[Change] = field(default_factory=list)
    compared: set = field(default_factory=set)  # storages compared as assert_close's actual
    names: set = field(default_factory=set)  # declared in place, by name
    storages: set = field(default_factory=set)  # ... by tensor
    paused: bool = False  # while a timed call runs: its checks are judge/timedcall.py's

    def track(self, t: torch.Tensor, where: str, source: str = "") -> None:
        entry = Input(None, where, describe(t), source=source)
        entry.ref = weakref.ref(t, lambda _r, e=entry: self.pending.discard(e))
        self.inputs.append(entry)
        self.pending.add(entry)

    @costed()
    def on_launch(self, kernel: str, args) -> None:
        """Copy the inputs among a launch's arguments that have no copy yet (not while a CUDA
        graph is captured: nothing runs then, and a copy would copy nothing)."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return
        args = args()
        ptrs = {storage_of(a) for a in args if isinstance(a, torch.Tensor)}
        ptrs |= {storage_of(a.base) for a in args if isinstance(getattr(a, "base", None), torch.Tensor)}
        for entry in list(self.pending):
            t = entry.ref()
            if t is not None and storage_of(t) in ptrs:
                entry.copy, entry.held, entry.seen = snapshot(t), t, f"a launch of {kernel}"
                self.pending.discard(entry)

    def declare(self, inplace) -> None:
        names, storages = declared(inplace)
        self.names |= names
        self.storages |= storages

    @costed()
    def check(self, found: str, actual: torch.Tensor | None = None) -> None:
        """Compare every copied input with its copy; a copy is taken again at the next launch."""
        if actual is not None:
            self.compared.add(storage_of(actual))
        alive = []
        for entry in self.inputs:
            t = entry.ref()
            if t is None:
                continue
            alive.append(entry)
            if entry.copy is None:
                continue
            try:
                detail = difference(entry.copy, t)
            except Exception:  # noqa: BLE001 - a lost CUDA context: the fault is the verdict
                self.inputs = []
                return
            if detail is not None:
                entry.changed = True
                self.changes.append(Change(entry.title(), (entry.name,), storage_of(t), detail,
                                           entry.seen, found))
            entry.copy = entry.held = None
            self.pending.add(entry)
        self.inputs = alive

    @costed()
    def problems(self, strict: bool = False) -> list[str]:
        """At the end of the test's call: the inputs that changed and were not declared in
        place, nor (unless `strict`, as --triton-judge asks) compared as an assert_close actual.
        Strict, a kernel that writes a constant over its input and hands the input back passes
        no longer when the test's reference is computed afterwards from that input."""
        self.check("the end of the test's call")
        bad, shown = [], set()
        for c in self.changes:
            if c.storage in self.storages or self.names.intersection(c.names) or \
                    (c.storage in self.compared and not strict) or c.title in shown:
                continue
            shown.add(c.title)
            bad.append(c)
        if not bad:
            return []
        compared = strict and any(c.storage in self.compared for c in bad)
        lines = [f"input mutation: {len(bad)} input{'s' if len(bad) > 1 else ''} changed after a "
                 "kernel received it, and the test never "
                 + ("declared it in place (under --triton-judge an input compared as "
                    "assert_close's actual counts as written on purpose only when declared):"
                    if compared else "compared it as an output:")]
        for c in bad:
            lines.append(f"  {c.title}: {c.detail} (after {c.seen}; found at {c.found})")
        name = next((n for n in bad[0].names if n), "x")
        lines.append("A kernel that writes into a tensor it reads hands the reference altered data "
                     "(every comparison after it saw the new values), as KernelBench's "
                     "zero_out_kernel did. "
                     + (HOW_TO_DECLARE_STRICT if strict else HOW_TO_DECLARE).format(name=name))
        return ["\n".join(lines)]


def guard() -> Guard | None:
    """The running test's guard, made at its first use; None outside a test."""
    sc = call_record.CURRENT.get()
    if sc is None or not ENABLED.get():
        return None
    if sc.inputs is None:
        sc.inputs = Guard()
    return sc.inputs


@costed()
def track(t: torch.Tensor) -> None:
    """make_tensor made `t` with values: an input of the running test."""
    g = guard()
    if g is not None:
        source = call_record.caller(absolute=True)
        g.track(t, call_record.relative(source), source)


def on_launch(kernel: str, args) -> None:
    """env/launch_args' callback: copy the running test's inputs a launch receives."""
    sc = call_record.CURRENT.get()
    g = sc.inputs if sc is not None else None
    if g is not None and g.pending and not g.paused:
        g.on_launch(kernel, args)


def declare(inplace) -> None:
    """The running test's inputs named (or given) in `inplace` are written by design."""
    g = guard()
    if g is not None:
        g.declare(inplace)
    elif inplace is not None:
        declared(inplace)  # its errors, outside a test too


@costed()
def at_comparison(actual: torch.Tensor) -> None:
    """assert_close: note `actual` as written on purpose and compare the inputs."""
    g = guard()
    if g is not None:
        g.check(f"assert_close ({call_record.caller()})", actual)


class Watched:
    """The tensors `fn` captures (but `exclude`'s: its outputs), copied before its first call:
    which it changed, and putting back before each call those declared in place."""

    @costed()
    def __init__(self, fn, exclude=(), inplace=None):
        self.items = []  # (name, tensor, copy, declared, made by make_tensor)
        g = guard()
        if g is None and not ENABLED.get():
            return
        names, storages = declared(inplace)
        skip = {storage_of(t) for t in exclude}
        if g is not None:
            g.declare(inplace)
            g.compared |= skip  # outputs= are written on purpose
            names, storages = names | g.names, storages | g.storages
        tracked = {storage_of(e.ref()) for e in (g.inputs if g else ()) if e.ref() is not None}
        for name, t in captured(fn):
            ptr = storage_of(t)
            if ptr is not None and ptr not in skip:
                self.items.append((name, t, snapshot(t), name in names or ptr in storages,
                                   ptr in tracked))

    def restore(self) -> None:
        with torch.no_grad():
            for _, t, copy, is_declared, _ in self.items:
                if is_declared:
                    t.copy_(copy)

    @costed()
    def changed(self, result_tensors=(), tracked_only: bool = False) -> list[str]:
        """'name: what changed' for each undeclared tensor fn changed, the tensors it returned
        excepted (an output it also captures)."""
        out = {storage_of(t) for t in result_tensors}
        found = []
        for name, t, copy, is_declared, tracked in self.items:
            if is_declared or storage_of(t) in out or (tracked_only and not tracked):
                continue
            detail = difference(copy, t)
            if detail is not None:
                found.append(f"{name} ({describe(t)}): {detail}")
        return found
