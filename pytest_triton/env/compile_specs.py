"""The compiles a test's Triton launches ask for: one CompileSpec per distinct launch, recorded
while the test runs, with the autotuner that launched it.

On a GPU the launch hook (launch_hooks.add_launch_hook) sees each launch's CompiledKernel: its
source and metadata are the CompileSpec, and the driver filled its n_regs and n_spills. Under
Triton's interpreter nothing compiles: InterpretedFunction.run is wrapped (once per process,
doing nothing while no recorder is active) and each launch's arguments go through Triton's own
binder (archcompile.spec_of_call), as JITFunction.run would take them on a GPU.

Recording is process-wide, not per thread: on a GPU, autograd runs a backward's kernels on a
thread of its own.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

from . import archcompile, launch_hooks


@dataclass
class Recorded:
    """One distinct launch of a test."""
    spec: archcompile.CompileSpec
    launches: int = 1
    tuner: object | None = None  # the Autotuner whose run launched it
    # the first launch's arguments (an autotuner's other configs are bound from them); held
    # until the test's check is done, then the recorder is dropped
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    compiled: object | None = None  # on a GPU: the CompiledKernel that ran


class Recorder:
    """What one test launched."""

    def __init__(self) -> None:
        self.kernels: dict[str, Recorded] = {}
        self.errors: list[str] = []
        self._by_compiled: dict[int, str] = {}  # id(CompiledKernel) -> key (GPU)

    def add(self, spec, frame, args: tuple, kwargs: dict, compiled=None) -> None:
        key = spec.key()
        seen = self.kernels.get(key)
        if seen is not None:
            seen.launches += 1
            return
        tuner = launch_hooks.autotuner_above(frame)
        self.kernels[key] = Recorded(spec, tuner=tuner, compiled=compiled, args=tuple(args),
                                     kwargs=dict(kwargs))
        if compiled is not None:
            self._by_compiled[id(compiled)] = key

    def interpreted(self, kernel, args: tuple, kwargs: dict, frame) -> None:
        try:
            self.add(archcompile.spec_of_call(kernel, args, kwargs), frame, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the launch itself runs (and reports its own errors)
            self.errors.append(f"{getattr(kernel, '__name__', kernel)}: {type(exc).__name__}: {exc}")

    def __call__(self, metadata=None) -> None:
        """The launch hook (GPU)."""
        try:
            frame = launch_hooks.run_frame(sys._getframe(1))
            if frame is None:
                return
            compiled = frame.f_locals["kernel"]
            key = self._by_compiled.get(id(compiled))
            if key is not None and self.kernels[key].compiled is compiled:
                self.kernels[key].launches += 1
                return
            spec = archcompile.spec_of_compiled(compiled)
            if spec is None:
                self.errors.append(f"{getattr(compiled, 'name', '?')}: not compiled from a "
                                   "@triton.jit function's source; its resources are not read")
                return
            loc = frame.f_locals
            self.add(spec, frame, loc.get("args", ()), loc.get("kwargs") or {}, compiled)
        except Exception as exc:  # noqa: BLE001 - recording must never break the kernel's run
            self.errors.append(f"reading a launch failed: {type(exc).__name__}: {exc}")


_active: list[Recorder] = []
_wrapped = False


def _wrap_interpreter() -> None:
    """Wrap InterpretedFunction.run once: each interpreted launch is shown to the active
    recorders before it runs."""
    global _wrapped
    if _wrapped:
        return
    from triton.runtime.interpreter import InterpretedFunction  # import time: triton

    run = InterpretedFunction.run

    def recorded_run(self, *args, grid, warmup, **kwargs):
        __tracebackhide__ = True  # the plugin's frame, not the kernel's: hidden from failures
        if _active and not warmup:
            frame = sys._getframe()
            for recorder in list(_active):
                recorder.interpreted(self, args, kwargs, frame)
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    recorded_run.__name__ = getattr(run, "__name__", "run")
    recorded_run.__doc__ = getattr(run, "__doc__", None)
    InterpretedFunction.run = recorded_run
    _wrapped = True


@contextmanager
def recording(recorder: Recorder, interpret: bool):
    """Record into `recorder` every Triton launch while the block runs."""
    remove = None
    if interpret:
        _wrap_interpreter()
    else:
        remove = launch_hooks.add_launch_hook(recorder)
    _active.append(recorder)
    try:
        yield recorder
    finally:
        _active.remove(recorder)
        if remove is not None:
            remove()
