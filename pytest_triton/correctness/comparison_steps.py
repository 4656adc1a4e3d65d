"""What every assert_close does, against a reference or a baseline: check the operands and the
output's guard regions, count the comparison for the running test, and write indices and values
the way the failure reports show them."""

from __future__ import annotations

import torch

from ..env import dtypes
from . import call_record, guards

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """`t`'s elements as integers of their width (bool as it is, complex as (real, imag) pairs):
    equal bits, NaN payloads and the sign of zero included."""
    if t.dtype == torch.bool:
        return t
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(_BITS[t.element_size()])


def index_of(flat: int, shape: torch.Size) -> tuple[int, ...]:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return tuple(reversed(idx))


def fmt(value: float) -> str:
    return f"{value:.6g}"


def check_operands(actual, expected, name: str = "actual") -> None:
    """That `actual` (named `name` in the messages: "baseline" for baseline=) can be compared with
    `expected`."""
    __tracebackhide__ = True
    for arg, value in ((name, actual), ("expected", expected)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"assert_close: {arg} must be a torch.Tensor, got {type(value).__name__}")
    problems = []
    if actual.shape != expected.shape:
        problems.append(f"shape: {name} {tuple(actual.shape)} vs expected {tuple(expected.shape)} "
                        "(no broadcasting)")
    if actual.device != expected.device:
        problems.append(f"device: {name} on {actual.device} vs expected on {expected.device} "
                        "(move the reference with .to(actual.device))")
    ka, ke = dtypes.kind(actual.dtype), dtypes.kind(expected.dtype)
    if ka != ke:
        problems.append(f"dtype kind: {name} {actual.dtype} ({ka}) vs expected {expected.dtype} ({ke})")
    if "complex" in (ka, ke) and not problems:
        raise TypeError("assert_close: complex tensors are not supported; compare .real and .imag")
    if problems:
        raise AssertionError("assert_close: the tensors cannot be compared:\n  " + "\n  ".join(problems))


def shape_dtype(t: torch.Tensor) -> str:
    return f"{dtypes.name(t.dtype)} {tuple(t.shape)}"


def check_guard_regions(actual: torch.Tensor) -> None:
    """A poisoned buffer with a clobbered guard fails before its values are looked at."""
    __tracebackhide__ = True
    g = guards.find(actual)
    if g is None:
        return
    report = guards.check(g)
    if report:
        guards.forget(g)
        record_comparison(False, False, None, None)
        raise AssertionError("assert_close: " + report)


def record_comparison(trivial: bool, allow_trivial: bool, what, why: str | None) -> None:
    """Count a comparison for the running test (call_record.py); outside a test, a comparison that
    cannot fail raises here. `what()` describes it, `why` is the rule that zeros would pass."""
    __tracebackhide__ = True
    sc = call_record.CURRENT.get()
    if sc is None:
        if trivial and not allow_trivial:
            raise AssertionError(
                "assert_close: this comparison cannot fail: an all-zeros output would pass it "
                f"({why}). A kernel that writes nothing would pass. Use inputs whose reference "
                "is not ~0, a smaller atol, or allow_trivial=True if this is intended.")
        return
    if not trivial:
        sc.informative += 1
    elif allow_trivial:
        sc.allowed_trivial += 1
    else:
        sc.trivial.append(call_record.Trivial(call_record.caller(), what()))
