"""Poisoned allocations: what the code under test allocates uninitialised starts as poison.

A kernel library allocates its outputs itself (`out = torch.empty_like(x)`), so make_tensor's
poisoned buffers never reach it: an element its kernel forgets to write holds whatever the
allocator handed back, and on a GPU the caching allocator hands back the block a correct result
was just freed from. Inside `poison_allocations()` every tensor made by one of aten's
uninitialised-memory factories (empty, empty_like, new_empty, empty_strided, new_empty_strided,
empty_permuted, and the legacy torch.Tensor(n) / x.new(n) that call them), and the part of a
tensor that resize_ grows, is filled when it is made: NaN for floating and complex dtypes, the
dtype's least likely value for integers (tensors.poison_value; bool has none and is left alone).
An unwritten element then fails assert_close as NaN (or the sentinel), whoever allocated it.

How: a TorchDispatchMode that fills those ops' results and passes every other op through
untouched, so the code under test runs the same kernels on the same values. torch's own
`torch.utils.deterministic.fill_uninitialized_memory` fills the same results, but only under
`torch.use_deterministic_algorithms(True)`, which is process-wide and changes what runs:
index_add, scatter_add, cumsum and others switch to deterministic implementations (other
kernels, other rounding, other speed), and ops with no deterministic CUDA implementation raise.
The mode sees the ops Python code calls (a library's torch.empty); allocations inside a C++ op
are written by that op anyway.

Entry points: `poison_allocations()` (a context manager, also outside pytest; nesting is a
no-op), the `poison_allocations` marker and `--triton-poison-allocations` (the test's setup and
call run inside it; a perf test timed under --triton-perf does not: a fill per allocation would
be timed), and assert_every_config, which runs each config's check inside it.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass, field

import pytest

from .. import options, state
from ..env import torch_ops
from ..options import Option

OPTIONS = options.declare(
    Option("triton_poison_allocations", "bool", False,
           "fill every tensor allocated uninitialised during each test's setup and call "
           "(torch.empty, empty_like, new_empty, ...: a library's own outputs) with NaN, or the "
           "dtype's least likely value for integers, so an element a kernel never writes fails "
           "assert_close (the poison_allocations marker does it for one test; perf tests timed "
           "under --triton-perf are left alone)"),
)

MARKER = "poison_allocations"
MARKER_HELP = (
    "poison_allocations: fill every tensor allocated uninitialised during the test's setup and "
    "call (torch.empty, empty_like, new_empty, empty_strided, ...: a library's own outputs) with "
    "NaN, or the dtype's least likely value for integers, so an element a kernel never writes "
    "fails assert_close (as --triton-poison-allocations does for every test)."
)
MARKERS = options.declare_markers(options.Marker(MARKER_HELP))
_FACTORIES = ("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided",
              "empty_permuted")


@dataclass
class Record:
    """What one poison_allocations() block filled."""
    tensors: int = 0
    bytes: int = 0
    ops: dict = field(default_factory=dict)  # aten op name -> how many of its results

    def describe(self) -> str:
        ops = ", ".join(f"{name} x{n}" for name, n in sorted(self.ops.items()))
        return (f"{self.tensors} fresh allocation{'' if self.tensors == 1 else 's'} "
                f"({self.bytes / 1e6:.3g} MB) filled with poison ({ops})" if self.tensors else
                "no fresh allocation was made")


_ACTIVE: contextvars.ContextVar[Record | None] = contextvars.ContextVar("triton_poison", default=None)


def _fill_value(dtype):
    import torch

    from .tensors import poison_value  # import time: torch

    if dtype == torch.bool:
        return None
    if dtype.is_complex:
        return complex(math.nan, math.nan)
    return poison_value(dtype)


def _fill(t, first_element: int, record: Record, op: str) -> None:
    """Poison the storage of `t` from `first_element` (in elements of t's dtype) to its end: its
    gaps too, where its strides leave any."""
    import torch

    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided \
            or t.device.type == "meta":
        return
    value = _fill_value(t.dtype)
    if value is None:
        return
    total = t.untyped_storage().nbytes() // t.element_size()
    if total <= first_element:
        return
    try:
        with torch.no_grad():
            t.as_strided((total - first_element,), (1,), first_element).fill_(value)
    except RuntimeError:  # a dtype this device cannot fill (some float8 and uint kinds): left as is
        return
    record.tensors += 1
    record.bytes += (total - first_element) * t.element_size()
    record.ops[op] = record.ops.get(op, 0) + 1


def _mode(record: Record):
    import torch

    factories = {getattr(torch.ops.aten, name) for name in _FACTORIES}
    resize = torch.ops.aten.resize_

    class _PoisonMode(torch_ops.uncompiled_mode()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            packet = func.overloadpacket
            if packet is resize:
                t = args[0]
                before = t.untyped_storage().nbytes() // t.element_size()
                out = func(*args, **kwargs)
                _fill(out, before, record, "resize_")
                return out
            out = func(*args, **kwargs)
            if packet in factories:
                _fill(out, 0, record, packet.__name__)
            return out

    return _PoisonMode()


@contextlib.contextmanager
def poison_allocations():
    """Inside, every tensor allocated uninitialised (torch.empty and its kin) starts as poison:
    NaN for floats, the dtype's least likely value for integers. Yields the Record of what was
    filled. Inside another poison_allocations() block it adds nothing."""
    outer = _ACTIVE.get()
    if outer is not None:
        yield outer
        return
    record = Record()
    token = _ACTIVE.set(record)
    try:
        with _mode(record):
            yield record
    finally:
        _ACTIVE.reset(token)


# --- the marker and the option --------------------------------------------------------------------

RECORD_KEY = pytest.StashKey[Record]()


def wanted(item: pytest.Item) -> bool:
    """Whether the test's setup and call run with poisoned allocations: the marker or the option
    asks for it, and the test is not a perf test this run times."""
    if item.get_closest_marker(MARKER) is None and \
            not options.get(item.config, "triton_poison_allocations"):
        return False
    timed = state.get(item.config).perf and "triton_bench" in getattr(item, "fixturenames", ())
    return not timed


@contextlib.contextmanager
def during(item: pytest.Item):
    """A phase of `item` (setup, call), poisoned when wanted(item)."""
    if not wanted(item):
        yield
        return
    with poison_allocations() as record:
        try:
            yield
        finally:
            total = item.stash.setdefault(RECORD_KEY, Record())
            total.tensors += record.tensors
            total.bytes += record.bytes
            for op, n in record.ops.items():
                total.ops[op] = total.ops.get(op, 0) + n


def annotate_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failed call's report says what was poisoned: NaN in an output the test did not make is
    an element the code that allocated it never wrote."""
    record = item.stash.get(RECORD_KEY, None)
    if record is None or report.when != "call" or not report.failed:
        return
    report.sections.append(("pytest-triton poisoned allocations",
                            f"{record.describe()}: NaN (or the integer sentinel) in an output is "
                            "an element that no kernel or op wrote after it was allocated (a "
                            "launch that failed silently, or a kernel that left the output to "
                            "hold what recycled memory held: a freed reference's result)"))


class Poison:
    """The poison_allocations marker and --triton-poison-allocations: a test's setup and call
    run with poisoned allocations, and a failure says what was poisoned."""

    def __init__(self, config: pytest.Config):
        self._config = config

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        with during(item):  # fixtures that allocate outputs too
            return (yield)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item):
        with during(item):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        annotate_report(item, report)
        return report
