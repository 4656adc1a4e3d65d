"""torch's own ops in a counted call (env/work.py): what each reads and writes, from its schema.

A library's timed call often runs torch ops beside its kernels (`torch.zeros` for an output its
kernel accumulates into, a `copy_`, a `cat`). Each op reads its tensor inputs and writes its
outputs and the tensors it changes in place, whole; an overwrite (fill_, zero_, copy_, the random
fills) does not read what it overwrites. Views, aliases, uninitialised allocations (empty and its
kin) and reading one scalar move nothing. Counted through a TorchDispatchMode.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

# aten ops that move no data: uninitialised allocations, a scalar read to the host, and ops on a
# tensor's metadata (views are found by their schema)
_NO_DATA = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
            "empty_permuted", "_local_scalar_dense", "detach", "alias", "lift_fresh", "set_",
            "resize_", "_reshape_alias", "is_same_size", "_has_compatible_shallow_copy_type",
            "record_stream"}
# in-place ops that overwrite what they change without reading it
_OVERWRITE = {"fill_", "zero_", "copy_", "normal_", "uniform_", "random_", "bernoulli_",
              "exponential_", "geometric_", "cauchy_", "log_normal_"}


def _nbytes(value) -> int:
    """Logical bytes of a tensor, or of the tensors of a list or tuple; 0 for anything else."""
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    numel = getattr(value, "numel", None)
    if numel is None or not hasattr(value, "element_size"):
        return 0
    return numel() * value.element_size()


def _op_bytes(func, args, kwargs, out) -> tuple[int, int]:
    """(bytes read, bytes written) of one aten op, from its schema: inputs read, outputs and the
    arguments it changes in place written (an overwrite does not read them first)."""
    schema = func._schema
    name = func.overloadpacket.__name__
    read = written = 0
    for i, arg in enumerate(schema.arguments):
        value = kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else args[i]
        n = _nbytes(value)
        if not n:
            continue
        changed = arg.alias_info is not None and arg.alias_info.is_write
        if changed:
            written += n
        if not changed or not (name in _OVERWRITE or arg.kwarg_only):
            read += n
    outs = out if isinstance(out, tuple) else (out,)
    for ret, value in zip(schema.returns, outs):
        if ret.alias_info is None:  # a new tensor: written (one that aliases an argument was)
            written += _nbytes(value)
    return read, written


@functools.cache
def uncompiled_mode() -> type:
    """torch's TorchDispatchMode, less one cost: torch wraps a mode's handler in
    torch._disable_dynamo, whose first call imports torch._dynamo (900 modules, over a second).
    Nothing a plugin's mode does is compiled, so the wrapping is skipped."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class UncompiledMode(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

    return UncompiledMode


@contextlib.contextmanager
def counting(work, counted: Callable[[], bool]):
    """Count torch's ops into `work` (its torch_loaded, torch_stored and torch_ops) while
    counted() says its scope is the one counted (not inside a launch)."""
    try:
        base = uncompiled_mode()
    except ImportError:  # no torch: nothing of torch's to count
        yield
        return

    class _Count(base):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func.overloadpacket.__name__
            if counted() and name not in _NO_DATA and not func.is_view:
                read, written = _op_bytes(func, args, kwargs, out)
                if read or written:
                    work.torch_loaded += read
                    work.torch_stored += written
                    work.torch_ops[name] = work.torch_ops.get(name, 0) + 1
            return out

    with _Count():
        yield
