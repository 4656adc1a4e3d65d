"""The work a kernel does, counted under Triton's interpreter: global-memory bytes loaded and
stored by the lanes a mask lets through (by element size), atomic lanes, tl.dot FLOPs, programs
and launches. A GPU time moves between processes and machines; these counts do not, so a change
of a few percent in what a kernel does shows where no timing could (as CodSpeed counts
instructions instead of timing).

Under the interpreter every program runs one after the other in Python and every memory
operation goes through the interpreter's builder with its mask, so the counts are exact and
repeat exactly. They are logical work: what the program asks of memory, not what reaches DRAM
(no caches, no coalescing, no sector rounding) and not a time.

- `counting()`: a context in which every interpreted launch is counted; yields a `Work` that
  holds the sum and, in `kernels`, each launch's own `Work`. Yields None, with `unavailable()`
  saying why, when this Triton's interpreter is not the one the counter knows.
- `Work.to_dict()` / `Work.from_dict()`: the JSON form (integers only), as the perf record and
  the saved history keep it.

torch's own ops in the counted call (a library's `torch.zeros` for the output its kernel
accumulates into, a `copy_`, a `cat`) are counted too, beside the kernels, through a
TorchDispatchMode: each op reads its tensor inputs and writes its outputs and the tensors it
changes in place, whole (an overwrite such as fill_, zero_ or copy_ does not read what it
overwrites). Views, aliases, uninitialised allocations (empty and its kin) and reading one scalar
move nothing. Ops a launch runs inside the interpreter are not the call's: they are not counted.
They count towards `call_bytes`, what a declaration is checked against, and not towards `bytes`
and `key()`, what two runs are compared on: a launcher's first call may fill a buffer it keeps
for later calls (a ticket counter), and which test makes the first call depends on the order
tests run in, so torch's part of a count does not repeat from run to run as the kernels' does.

The counter wraps the interpreter builder's create_masked_load / create_masked_store (through
which create_load, create_store, tensor-descriptor and block-pointer accesses and atomic loads
and stores all go), create_atomic_rmw / create_atomic_cas, create_dot, set_grid_idx (one call
per program) and GridExecutor.__call__ (one per launch). The wrappers count only inside
counting(); outside it they cost one attribute read. tl.dot_scaled is not counted.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field

from . import torch_ops
from .interpreter.base import interpreting

_MARK = "_pytest_triton_work"
_active: list[Work] = []  # the counted scopes, outermost first; each launch pushes its own
_unavailable: list[str] = []  # why this interpreter cannot be counted, once found out
_probed: list[bool] = []  # the probe passed once: the wrappers count what they should


@dataclass
class Work:
    """What one launch (or, summed, one call) asked of memory and of the tensor cores."""
    kernel: str = ""  # the kernel's name for one launch; "" for a sum
    launches: int = 0
    programs: int = 0
    loaded: dict[int, int] = field(default_factory=dict)  # element bytes -> bytes loaded
    stored: dict[int, int] = field(default_factory=dict)  # element bytes -> bytes stored
    atomics: int = 0  # lanes of atomic read-modify-writes and compare-and-swaps
    atomic_bytes: int = 0  # their elements' bytes, each counted once
    flops: int = 0  # 2*M*N*K per tl.dot
    kernels: list[Work] = field(default_factory=list)  # each launch's own, in launch order
    torch_loaded: int = 0  # bytes torch's ops in the call read (outside any launch)
    torch_stored: int = 0  # bytes they wrote
    torch_ops: dict[str, int] = field(default_factory=dict)  # aten op name -> times it ran

    @property
    def bytes_loaded(self) -> int:
        return sum(self.loaded.values())

    @property
    def bytes_stored(self) -> int:
        return sum(self.stored.values())

    @property
    def bytes(self) -> int:
        """Logical bytes the kernels moved: loaded + stored + one element per atomic lane."""
        return self.bytes_loaded + self.bytes_stored + self.atomic_bytes

    @property
    def call_bytes(self) -> int:
        """Logical bytes the whole call moved: the kernels' and torch's ops' (what a bytes= that
        counts a library's zero fill is checked against)."""
        return self.bytes + self.torch_loaded + self.torch_stored

    def add(self, other: Work) -> None:
        self.launches += other.launches
        self.programs += other.programs
        for mine, theirs in ((self.loaded, other.loaded), (self.stored, other.stored)):
            for size, n in theirs.items():
                mine[size] = mine.get(size, 0) + n
        self.atomics += other.atomics
        self.atomic_bytes += other.atomic_bytes
        self.flops += other.flops
        self.torch_loaded += other.torch_loaded
        self.torch_stored += other.torch_stored
        for name, n in other.torch_ops.items():
            self.torch_ops[name] = self.torch_ops.get(name, 0) + n

    def key(self) -> tuple:
        """The counts two runs are compared on, exactly (the launches' own included)."""
        return (self.launches, self.programs, tuple(sorted(self.loaded.items())),
                tuple(sorted(self.stored.items())), self.atomics, self.atomic_bytes, self.flops)

    def describe(self) -> str:
        """'3 launches, 12 programs: 0.000049 GB loaded, 0.000025 GB stored, 0.5 GFLOP'."""
        text = (f"{self.launches} launch{'' if self.launches == 1 else 'es'}, {self.programs} "
                f"program{'' if self.programs == 1 else 's'}: {gb(self.bytes_loaded)} GB loaded, "
                f"{gb(self.bytes_stored)} GB stored")
        if self.atomics:
            text += f", {self.atomics} atomic lanes ({gb(self.atomic_bytes)} GB)"
        if self.flops:
            text += f", {gflop(self.flops)} GFLOP"
        if self.torch_ops:
            text += f"; {self.torch_text()}"
        return text

    def torch_text(self) -> str:
        """'torch ops (zeros x1): 0 GB read, 0.000082 GB written', or '' where none ran."""
        if not self.torch_ops:
            return ""
        ops = ", ".join(f"{name} x{n}" for name, n in sorted(self.torch_ops.items()))
        return (f"torch ops ({ops}): {gb(self.torch_loaded)} GB read, "
                f"{gb(self.torch_stored)} GB written")

    def to_dict(self) -> dict:
        d = {"launches": self.launches, "programs": self.programs,
             "loaded": {str(k): v for k, v in sorted(self.loaded.items())},
             "stored": {str(k): v for k, v in sorted(self.stored.items())},
             "atomics": self.atomics, "atomic_bytes": self.atomic_bytes, "flops": self.flops,
             "bytes": self.bytes}
        if self.torch_ops:
            d["torch"] = {"loaded": self.torch_loaded, "stored": self.torch_stored,
                          "ops": dict(sorted(self.torch_ops.items()))}
        if self.kernel:
            d["kernel"] = self.kernel
        if self.kernels:
            d["kernels"] = [k.to_dict() for k in self.kernels]
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> Work | None:
        if d is None:
            return None
        t = d.get("torch") or {}
        return cls(kernel=d.get("kernel", ""), launches=d.get("launches", 0),
                   programs=d.get("programs", 0),
                   loaded={int(k): v for k, v in (d.get("loaded") or {}).items()},
                   stored={int(k): v for k, v in (d.get("stored") or {}).items()},
                   atomics=d.get("atomics", 0), atomic_bytes=d.get("atomic_bytes", 0),
                   flops=d.get("flops", 0),
                   kernels=[cls.from_dict(k) for k in d.get("kernels") or ()],
                   torch_loaded=t.get("loaded", 0), torch_stored=t.get("stored", 0),
                   torch_ops=dict(t.get("ops") or {}))


def gb(n: int) -> str:
    """Bytes in GB (1e9), to the byte: '0.000049152'."""
    return f"{n / 1e9:.9f}".rstrip("0").rstrip(".") if n else "0"


def gflop(n: int) -> str:
    """FLOPs in GFLOP (1e9), to the FLOP."""
    return f"{n / 1e9:.9f}".rstrip("0").rstrip(".") if n else "0"


def unavailable() -> str | None:
    """Why this Triton's interpreter cannot be counted; None where it can (or is not probed yet)."""
    return _unavailable[0] if _unavailable else None


@contextlib.contextmanager
def counting():
    """Count every interpreted launch inside; yields the Work, or None where kernels are not
    interpreted or this interpreter cannot be counted (unavailable() says why)."""
    if not interpreting() or not _install():
        yield None
        return
    work = Work()
    _active.append(work)
    try:
        with torch_ops.counting(work, lambda: _current() is work):
            yield work
    finally:
        _active.remove(work)




# --------------------------------------------------------------------------------------------
# The interpreter's side


def _current() -> Work | None:
    return _active[-1] if _active else None


def _lanes(np, mask, shape) -> int:
    if mask is None:
        return int(np.prod(shape))
    return int(np.count_nonzero(np.broadcast_to(mask.data, shape)))


def _element_bytes(ptrs) -> int:
    dtype = ptrs.get_element_ty() if hasattr(ptrs, "get_element_ty") else ptrs.dtype.element_ty
    return max(dtype.primitive_bitwidth // 8, 1)


def _wrappers(np, ti):
    """The builder's and executor's methods, each counting into the innermost counted scope."""
    cls = ti.InterpreterBuilder

    def memory(original, book, mask_at):
        def counted(self, ptrs, *args, **kwargs):
            __tracebackhide__ = True  # the counter's frame: hidden from failures
            work = _current()
            if work is not None:
                mask = args[mask_at] if len(args) > mask_at else kwargs.get("mask")
                size = _element_bytes(ptrs)
                book_of = work.loaded if book == "loaded" else work.stored
                book_of[size] = book_of.get(size, 0) + size * _lanes(np, mask, ptrs.data.shape)
            return original(self, ptrs, *args, **kwargs)
        return counted

    def atomic(original, ptr_at, mask_at):
        def counted(self, *args, **kwargs):
            __tracebackhide__ = True  # the counter's frame: hidden from failures
            work = _current()
            if work is not None:
                ptr = args[ptr_at]
                mask = args[mask_at] if mask_at is not None else None
                lanes = _lanes(np, mask, ptr.data.shape)
                work.atomics += lanes
                work.atomic_bytes += lanes * _element_bytes(ptr)
            return original(self, *args, **kwargs)
        return counted

    def dot(original):
        def counted(self, a, b, *args, **kwargs):
            __tracebackhide__ = True  # the counter's frame: hidden from failures
            work = _current()
            if work is not None:  # batch * M * K of a, times N of b, two FLOPs each
                work.flops += 2 * int(np.prod(a.data.shape)) * int(b.data.shape[-1])
            return original(self, a, b, *args, **kwargs)
        return counted

    def program(original):
        def counted(self, *args, **kwargs):
            __tracebackhide__ = True  # the counter's frame: hidden from failures
            work = _current()
            if work is not None:
                work.programs += 1
            return original(self, *args, **kwargs)
        return counted

    def launch(original):
        def counted(self, *args, **kwargs):
            __tracebackhide__ = True  # the counter's frame: hidden from failures
            outer = _current()
            if outer is None:
                return original(self, *args, **kwargs)
            one = Work(kernel=getattr(self.fn, "__name__", "?"), launches=1)
            _active.append(one)
            try:
                return original(self, *args, **kwargs)
            finally:
                _active.remove(one)
                outer.add(one)
                outer.kernels.append(one)
        return counted

    return [(cls, "create_masked_load", lambda f: memory(f, "loaded", 0)),
            (cls, "create_masked_store", lambda f: memory(f, "stored", 1)),
            (cls, "create_atomic_rmw", lambda f: atomic(f, 1, 3)),
            (cls, "create_atomic_cas", lambda f: atomic(f, 0, None)),
            (cls, "create_dot", dot), (cls, "set_grid_idx", program),
            (ti.GridExecutor, "__call__", launch)]


def _install() -> bool:
    """Wrap the interpreter's methods (again, where a fix put its own over them since); False,
    with unavailable() saying why, where this interpreter lacks one or a probe miscounts."""
    if _unavailable:
        return False
    try:
        import numpy as np  # import time: numpy and triton only once a call is counted
        from triton.runtime import interpreter as ti
    except ImportError as exc:
        _unavailable.append(f"Triton's interpreter is not importable ({exc})")
        return False
    try:
        wrappers = _wrappers(np, ti)
    except AttributeError as exc:
        _unavailable.append(f"this Triton's interpreter is not the one the counter knows ({exc})")
        return False
    for owner, name, wrap in wrappers:
        current = getattr(owner, name, None)
        if current is None:
            _unavailable.append(f"this Triton's interpreter has no {owner.__name__}.{name}")
            return False
        if not getattr(current, _MARK, False):
            counted = wrap(current)
            setattr(counted, _MARK, True)
            counted.__wrapped__ = current
            setattr(owner, name, counted)
    if _probed:
        return True
    problem = _probe(np, ti)
    if problem:
        _unavailable.append(problem)
        return False
    _probed.append(True)
    return True


def _probe(np, ti) -> str | None:
    """Load 3 float32 elements through the builder's plain create_load, then 2 of the 3 through
    create_masked_load: the counter must see 12 + 8 bytes. Catches an interpreter whose loads
    bypass the wrapped methods or ignore the mask (every count would be silently wrong)."""
    import torch  # import time: the probe's buffer
    import triton.language as tl

    buf = torch.zeros(4, dtype=torch.float32)
    builder = ti.InterpreterBuilder()
    ptrs = ti.TensorHandle(buf.data_ptr() + 4 * np.arange(3, dtype=np.uint64),
                           tl.pointer_type(tl.float32))
    mask = ti.TensorHandle(np.array([True, False, True]), tl.int1)
    work = Work()
    _active.append(work)
    try:
        rest = len(inspect.signature(builder.create_load).parameters) - 1
        builder.create_load(ptrs, *([None] * (rest - 1)), False)
        rest = len(inspect.signature(builder.create_masked_load).parameters) - 3
        builder.create_masked_load(ptrs, mask, None, *([None] * (rest - 1)), False)
    except Exception as exc:  # noqa: BLE001 - an interpreter whose builder takes other arguments
        return f"this Triton's interpreter loads differently ({type(exc).__name__}: {exc})"
    finally:
        _active.remove(work)
    if work.loaded != {4: 20}:
        return (f"this Triton's interpreter loads past the counted methods (a probe of 20 bytes "
                f"counted {work.bytes_loaded})")
    return None
