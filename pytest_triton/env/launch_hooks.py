"""What ran: the Triton launches inside a timed function, read from Triton's own metadata.

`capture(fn)` calls `fn` once (untimed, after the measurement: compiled and autotuned by then)
with a hook on `triton.knobs.runtime.launch_enter_hook`. The hook receives only a LazyDict
(name, CUfunction, stream; on triton 3.6 and 3.9 alike), so it reads the rest from the frame of
`JITFunction.run` that is launching: the CompiledKernel (`kernel`: its metadata namedtuple holds
num_warps, num_stages and shared bytes; `n_regs`/`n_spills` are set once its handles are
loaded, which a launch does), the grid (`grid_0..2`), the bound arguments (constexprs, and the
tensors passed) and, further up, the Autotuner whose `run` chose the config. Nothing here times
anything; each read is of metadata Triton already holds.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from . import dtypes
from .compile_watch import tuner_name

# Ops whose presence in a kernel's TTIR makes it more than element-wise.
_NOT_ELEMENTWISE = ("tt.dot", "tt.reduce", "tt.scan", "tt.atomic", "tt.histogram", "scf.for",
                    "scf.while", "tt.descriptor_reduce")
_MAX_FRAMES = 12  # from the hook up to JITFunction.run, and up to an Autotuner


@dataclass
class Operand:
    """A tensor passed at launch."""
    arg: str  # the kernel parameter's name
    shape: tuple
    stride: tuple
    dtype: str
    nbytes: int
    data_ptr: int
    contiguous: bool
    unit_stride: bool  # some dimension of size > 1 has stride 1 (coalesced along it)
    descriptor: bool = False  # the base of a TMA tensor descriptor (loaded by the TMA unit)


@dataclass
class Launch:
    """One launch of a compiled Triton kernel, as Triton described it."""
    kernel: str  # the @triton.jit function's name
    name: str  # the compiled kernel's name (what ncu and profilers show)
    grid: tuple = (1, 1, 1)
    num_warps: int | None = None
    num_stages: int | None = None
    num_ctas: int | None = None
    shared: int | None = None  # bytes of shared memory per program
    n_regs: int | None = None  # registers per thread
    spill_bytes: int | None = None  # local memory per thread (spilled registers), bytes
    constexprs: dict = field(default_factory=dict)
    operands: list = field(default_factory=list)  # Operand dicts
    has_loop: bool | None = None  # scf.for / scf.while in the TTIR
    has_dot: bool | None = None
    elementwise: bool | None = None  # no dot, reduction, scan, atomic or loop
    autotuner: str | None = None  # repr of the Autotuner that chose this config, if any
    source: str = "launch hook"

    @property
    def programs(self) -> int:
        n = 1
        for g in self.grid:
            n *= int(g)
        return n

    def to_dict(self) -> dict:
        d = asdict(self)
        d["grid"] = list(self.grid)
        d["programs"] = self.programs
        return d


def _is_tensor(x) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "stride") and hasattr(x, "shape")


def _operand(arg: str, t) -> Operand:
    shape, stride = tuple(int(s) for s in t.shape), tuple(int(s) for s in t.stride())
    numel = 1
    for s in shape:
        numel *= s
    unit = numel <= 1 or any(st == 1 for sz, st in zip(shape, stride) if sz > 1)
    return Operand(arg=arg, shape=shape, stride=stride, dtype=dtypes.name(t.dtype),
                   nbytes=int(numel * t.element_size()), data_ptr=int(t.data_ptr()),
                   contiguous=bool(t.is_contiguous()), unit_stride=unit)


def _ir_features(kernel) -> dict:
    asm = getattr(kernel, "asm", None) or {}
    try:
        ir = asm.get("ttir") or asm.get("ttgir") or ""
    except Exception:  # noqa: BLE001 - an AsmDict that cannot produce the IR: say nothing
        ir = ""
    if not ir:
        return {}
    return {"has_loop": "scf.for" in ir or "scf.while" in ir,
            "has_dot": "tt.dot" in ir,
            "elementwise": not any(op in ir for op in _NOT_ELEMENTWISE)}


def describe(kernel, grid=(1, 1, 1), jit=None, args: dict | None = None,
             source: str = "launch hook") -> Launch:
    """A Launch from a CompiledKernel (or anything with its attributes), the grid, the
    JITFunction and the bound arguments."""
    md = getattr(kernel, "metadata", None)

    def meta(key):
        return getattr(md, key, None) if md is not None else None

    constexpr_names = {p.name for p in getattr(jit, "params", ()) if getattr(p, "is_constexpr", False)}
    constexprs, operands = {}, []
    for name, value in (args or {}).items():
        if name in constexpr_names and isinstance(value, (int, float, bool, str)):
            constexprs[name] = value
        elif _is_tensor(value) or _is_tensor(getattr(value, "base", None)):
            try:
                if _is_tensor(value):
                    operands.append(asdict(_operand(name, value)))
                else:  # a host-side TensorDescriptor: its base tensor is what moves
                    operands.append({**asdict(_operand(name, value.base)), "descriptor": True})
            except Exception:  # noqa: BLE001 - a tensor-like we cannot read is left out
                pass
    spills = getattr(kernel, "n_spills", None)
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    return Launch(
        kernel=getattr(jit, "__name__", None) or meta("name") or getattr(kernel, "name", "?"),
        name=meta("name") or getattr(kernel, "name", "?"), grid=grid[:3],
        num_warps=meta("num_warps"), num_stages=meta("num_stages"), num_ctas=meta("num_ctas"),
        shared=meta("shared"), n_regs=getattr(kernel, "n_regs", None),
        spill_bytes=None if spills is None else 4 * int(spills),  # Triton keeps 4-byte words
        constexprs=constexprs, operands=operands, source=source, **_ir_features(kernel))


def _looks_like_run(f) -> bool:
    return "grid_0" in f.f_locals and hasattr(f.f_locals.get("kernel"), "metadata")


def run_frame(frame):
    """The frame of JITFunction.run launching from a hook's `frame` (None out of reach): its
    locals hold `kernel`, `grid_0..2`, the JITFunction (`self`) and the bound arguments."""
    f, depth = frame, 0
    while f is not None and depth < _MAX_FRAMES and not _looks_like_run(f):
        f, depth = f.f_back, depth + 1
    return None if f is None or depth >= _MAX_FRAMES else f


def launch_arguments(frame) -> dict | None:
    """The bound arguments of run_frame(frame)'s launch, by parameter name (None: no frame)."""
    f = run_frame(frame)
    return None if f is None else dict(f.f_locals.get("bound_args") or {})


def autotuner_above(frame) -> object | None:
    """The Autotuner whose run called the frame's launch, or None."""
    f, depth = frame.f_back, 0
    while f is not None and depth < _MAX_FRAMES:
        owner = f.f_locals.get("self")
        if owner is not None and hasattr(owner, "configs") and hasattr(owner, "cache") \
                and hasattr(owner, "fn"):
            return owner
        f, depth = f.f_back, depth + 1
    return None


class _Recorder:
    def __init__(self):
        self.launches: list[Launch] = []
        self.autotuners: list = []
        self.errors: list[str] = []

    def __call__(self, metadata=None) -> None:
        try:
            f = run_frame(sys._getframe(1))
            if f is None:
                data = metadata.get() if hasattr(metadata, "get") else {}
                self.launches.append(Launch(kernel=str(data.get("name", "?")),
                                            name=str(data.get("name", "?")), source="hook only"))
                return
            loc = f.f_locals
            grid = (loc.get("grid_0", 1), loc.get("grid_1", 1), loc.get("grid_2", 1))
            jit = loc.get("self")
            launch = describe(loc["kernel"], grid, jit, dict(loc.get("bound_args") or {}))
            tuner = autotuner_above(f)
            if tuner is not None:
                launch.autotuner = tuner_name(tuner)
                if all(t is not tuner for t in self.autotuners):
                    self.autotuners.append(tuner)
            self.launches.append(launch)
        except Exception as exc:  # noqa: BLE001 - a diagnosis must never break the kernel's run
            self.errors.append(f"{type(exc).__name__}: {exc}")


def _hook_owner():
    """Where Triton keeps its launch-enter hook: triton.knobs.runtime (3.4+), else CompiledKernel
    (older); None for a Triton without launch hooks."""
    try:
        import triton  # import time: Triton is imported only once a hook is wanted

        knobs = getattr(triton, "knobs", None)
        if knobs is not None:
            return knobs.runtime
        from triton.compiler.compiler import CompiledKernel

        return CompiledKernel
    except Exception:  # noqa: BLE001 - no launch hooks: launches are not seen
        return None


def add_launch_hook(hook, owner=None):
    """Call `hook(metadata)` at every Triton launch, after whatever hooks were installed before it,
    and return the function that removes it. The one adapter over Triton's launch-enter hook: a
    hook chain (3.5+), a single callable (3.4's knobs; the hook there is chained, never replaced,
    so the fault recorder and an explain capture both see every launch), or CompiledKernel's
    attribute (older). `owner` defaults to Triton's own."""
    owner = _hook_owner() if owner is None else owner
    if owner is None:
        return lambda: None
    current = getattr(owner, "launch_enter_hook", None)
    if hasattr(current, "add") and hasattr(current, "remove"):
        current.add(hook)
        return lambda: current.remove(hook)
    active = [True]

    def chained(metadata, _previous=current):
        if _previous is not None:
            _previous(metadata)
        if active[0]:
            hook(metadata)

    owner.launch_enter_hook = chained

    def remove():
        active[0] = False  # a hook chained after this one keeps calling it: it does nothing now
        if getattr(owner, "launch_enter_hook", None) is chained:
            owner.launch_enter_hook = current
    return remove


@contextmanager
def _hooked(recorder):
    remove = add_launch_hook(recorder)
    try:
        yield
    finally:
        remove()


@dataclass
class Capture:
    """What one untimed call of fn launched."""
    launches: list = field(default_factory=list)  # Launch
    autotuners: list = field(default_factory=list)  # the Autotuner objects met on the way
    errors: list = field(default_factory=list)
    note: str = ""


def capture(fn, sync=None) -> Capture:
    """Call fn once with the launch hook on; `sync` (the device's synchronize) after it."""
    rec = _Recorder()
    try:
        with _hooked(rec):
            fn()
        if sync is not None:
            sync()
    except Exception as exc:  # noqa: BLE001 - fn already ran many times; report, don't raise
        rec.errors.append(f"calling fn to read its launches failed: {type(exc).__name__}: {exc}")
    return Capture(rec.launches, rec.autotuners, rec.errors)


def from_cache(kernel) -> Launch | None:
    """The most recently compiled kernel of a JITFunction (or an Autotuner's), when no launch was
    seen (fn replayed a CUDA graph, say): its metadata but no grid or arguments."""
    jit = getattr(kernel, "fn", kernel)
    while hasattr(jit, "fn") and not hasattr(jit, "device_caches"):
        jit = jit.fn
    caches = getattr(jit, "device_caches", None)
    if not caches:
        return None
    for entry in caches.values():
        compiled = entry[0] if isinstance(entry, tuple) else entry
        if compiled:
            last = list(compiled.values())[-1]
            return describe(last, (1, 1, 1), jit, {}, source="compile cache (no launch seen)")
    return None
