"""assert_close(actual, expected, baseline=...): the kernel's error relative to a baseline's.

FlashAttention tests its low-precision kernels this way: run the same op in a trusted low-precision
implementation (the baseline: torch's own fp16/bf16 result), measure both against a float64
reference, and require the kernel's error to be at most k times the baseline's. No fixed table
fits such kernels (attention's error depends on the logits' scale, the sequence length, the
head dim), but "no worse than torch at the same precision" always does.

The rule, for both the largest and the mean absolute error over the finite elements:

    error(actual, expected) <= k * error(baseline, expected) + floor

with k = baseline_factor (default 2, FlashAttention's) and floor = atol (default: the tolerance
table's atol for the precision, the same 1e-5 FlashAttention adds for fp16/bf16; reduction_size
widens it as elsewhere). The max catches a few elements gone wrong (a mask, a tail); the mean
catches an error spread thin over every element (an accumulator kept in low precision) that the
max, dominated by one unlucky element of the baseline, can hide. Where `expected` is NaN or Inf,
`actual` must be the same (NaN only with equal_nan=True).
"""

from __future__ import annotations

import math

import torch

from ..env import dtypes, seeding
from . import call_record
from .comparison_steps import check_operands, index_of, record_comparison, shape_dtype
from .tolerance import tolerance_for

DEFAULT_FACTOR = 2.0


def _error_stats(x: torch.Tensor, e: torch.Tensor, finite: torch.Tensor):
    """(max, index of max, mean) of |x - e| over `finite`; zeros when nothing is finite."""
    err = torch.where(finite, (x - e).abs(), torch.zeros_like(e))
    n = int(finite.sum())
    if n == 0:
        return 0.0, None, 0.0
    flat = err.flatten()
    i = int(torch.argmax(flat))
    return float(flat[i]), i, float(err.sum()) / n


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _value(value: float) -> str:
    """An element's value, with the digits that tell it from its neighbours (1.00049, not 1)."""
    return f"{value:.7g}"


def _half_ulp(e: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Half the spacing of `dtype` around each |e| (taken a little above |e|, so that a result
    rounded up across a power of two is covered): the least error any kernel writing `dtype`
    can have there. 0 where e is 0."""
    eps = torch.finfo(dtype).eps  # the spacing at 1
    _, exp = torch.frexp(e.abs() * (1 + 2 * eps))  # |e| = m * 2**exp, m in [0.5, 1)
    half = eps * torch.pow(2.0, (exp - 2).to(torch.float64))
    return torch.where(e == 0, torch.zeros_like(half), half)


def _ratio(kernel: float, base: float) -> str:
    if base == 0:
        return "inf" if kernel > 0 else "-"
    return f"{kernel / base:.3g}x"


def _passed_note(actual, factor: float, floor: float, maxes, means, excess: float) -> str:
    """A passing comparison's line: each error against what was allowed, the half-ulp allowance
    shown, so that a kernel 2.1x the baseline's max error reads as the pass it is."""
    k_max, b_max, allowed_max = maxes
    k_mean, b_mean, allowed_mean = means
    rule = f"{factor:g}x the baseline's + {floor:.3g}"
    text = (f"assert_close against a baseline ({shape_dtype(actual)}): passed. max |error| "
            f"{_fmt(k_max)} = {_ratio(k_max, b_max)} the baseline's {_fmt(b_max)}")
    if actual.dtype != torch.float64:
        dt = dtypes.name(actual.dtype)
        text += (f"; less half an ulp of expected in {dt} (rounding no {dt} output avoids), "
                 f"{_fmt(max(excess, 0.0))}")
    return (text + f" <= allowed {_fmt(allowed_max)} ({rule}). mean |error| {_fmt(k_mean)} = "
            f"{_ratio(k_mean, b_mean)} the baseline's {_fmt(b_mean)} <= allowed "
            f"{_fmt(allowed_mean)} ({rule})")


def assert_close_to_baseline(actual, expected, baseline, *, factor, rtol, atol, reduction_size,
                             precision, equal_nan, allow_trivial, msg) -> None:
    __tracebackhide__ = True
    if baseline is None:
        raise ValueError("assert_close: baseline_factor= needs baseline= (a low-precision result "
                         "of the same op to compare the kernel's error with)")
    check_operands(baseline, expected, "baseline")
    if baseline.shape != actual.shape:
        raise AssertionError(f"assert_close: baseline has shape {tuple(baseline.shape)}, actual "
                             f"{tuple(actual.shape)}")
    if not actual.dtype.is_floating_point:
        raise ValueError(f"assert_close: baseline= is for floating-point outputs; {actual.dtype} "
                         "is compared exactly")
    if rtol is not None:
        raise ValueError("assert_close: rtol= does not apply with baseline= (the rule is error <= "
                         "baseline_factor x the baseline's error + atol)")
    factor = DEFAULT_FACTOR if factor is None else factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0 \
            or math.isinf(factor):
        raise ValueError(f"assert_close: baseline_factor={factor!r} must be a finite number > 0")
    floor = tolerance_for(actual.dtype, atol=atol, reduction_size=reduction_size,
                                  precision=precision)
    rule = (f"max and mean |error| <= {factor:g} x the baseline's + floor {floor.atol:.3g} "
            f"({floor.atol_source}), each element's error also less half an ulp of its value in "
            f"{actual.dtype}")

    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    b = baseline.detach().to(torch.float64)
    finite_e = torch.isfinite(e)
    # Where the reference is NaN or Inf, the kernel must agree exactly.
    special_ok = (a == e) | (torch.isnan(a) & torch.isnan(e) & equal_nan)
    n_special_bad = int((~finite_e & ~special_ok).sum())
    nonfinite_a = finite_e & ~torch.isfinite(a)
    n_nonfinite = int(nonfinite_a.sum())
    bad_baseline = int((finite_e & ~torch.isfinite(b)).sum())
    if bad_baseline:
        raise AssertionError(
            f"assert_close: the baseline has {bad_baseline} NaN or Inf where expected is finite: "
            "it is no baseline to measure the kernel's error against (an overflow in its "
            "precision?)")
    finite = finite_e & torch.isfinite(a)
    k_max, k_at, k_mean = _error_stats(a, e, finite)
    b_max, b_at, b_mean = _error_stats(b, e, finite_e)
    z_max, _, z_mean = _error_stats(torch.zeros_like(e), e, finite_e)
    allowed_max = factor * b_max + floor.atol
    allowed_mean = factor * b_mean + floor.atol
    # No kernel writing actual's dtype can beat its rounding: an element may be off by k x the
    # baseline's max error plus half a unit in the last place of its own value. (The baseline's
    # max error may lie at smaller values, whose units are finer: with a few hundred elements a
    # correct fp16 kernel near 1.0 otherwise failed at some seeds.)
    rounding = _half_ulp(e, actual.dtype) if actual.dtype != torch.float64 else torch.zeros_like(e)
    beyond = torch.where(finite, (a - e).abs() - rounding, torch.zeros_like(e))
    max_ok = actual.numel() == 0 or not bool(finite.any()) or \
        float(beyond.max()) <= allowed_max
    failed = []
    if not max_ok:
        failed.append(f"max |error| {_fmt(k_max)} > {_fmt(allowed_max)}")
    if k_mean > allowed_mean:
        failed.append(f"mean |error| {_fmt(k_mean)} > {_fmt(allowed_mean)}")
    if n_nonfinite:
        failed.append(f"{n_nonfinite} NaN or Inf where expected is finite")
    if n_special_bad:
        failed.append(f"{n_special_bad} elements differ where expected is NaN or Inf")

    if not failed:
        if actual.numel() > 0:
            trivial = z_max <= allowed_max and z_mean <= allowed_mean and bool(finite_e.all())
            record_comparison(
                trivial, allow_trivial,
                lambda: (f"{shape_dtype(actual)} against a baseline, max |expected| "
                         f"{_fmt(z_max)} <= {_fmt(allowed_max)} allowed"),
                f"a kernel's max and mean |error| of all zeros, {_fmt(z_max)} and "
                f"{_fmt(z_mean)}, are within {factor:g} x the baseline's + "
                f"{floor.atol:.3g}")
            excess = float(beyond.max()) if bool(finite.any()) else 0.0
            call_record.note(_passed_note(actual, factor, floor.atol, (k_max, b_max, allowed_max),
                                    (k_mean, b_mean, allowed_mean), excess))
        return
    table = tolerance_for(actual.dtype, atol=atol, reduction_size=reduction_size, precision=precision)
    if not n_nonfinite and not n_special_bad and bool(
            ((a - e).abs() <= table.atol + table.rtol * e.abs())[finite].all()):
        # baseline= widens what assert_close accepts, never narrows it: every element is within
        # the table's tolerance, which is what assert_close asks without a baseline (a kernel
        # that rounds twice where torch rounds once, within the dtype's own tolerance, passes)
        record_comparison(False, allow_trivial, None, None)
        call_record.note(f"assert_close against a baseline ({shape_dtype(actual)}): max |error| "
                   f"{_fmt(k_max)} = {_ratio(k_max, b_max)} the baseline's, above "
                   f"{factor:g}x, but every element is within the table's tolerance "
                   f"({table.describe()}), which baseline= never narrows")
        return
    record_comparison(False, allow_trivial, None, None)

    shape = tuple(actual.shape)
    where_k = index_of(k_at, actual.shape) if k_at is not None else "-"
    where_b = index_of(b_at, actual.shape) if b_at is not None else "-"
    rows = [("", "max |error|", "at index", "mean |error|"),
            ("kernel", _fmt(k_max), str(where_k), _fmt(k_mean)),
            ("baseline", _fmt(b_max), str(where_b), _fmt(b_mean)),
            ("ratio", _ratio(k_max, b_max), "", _ratio(k_mean, b_mean)),
            ("allowed", _fmt(allowed_max), "", _fmt(allowed_mean))]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = [msg] if msg else []
    lines.append(f"Kernel error exceeds {factor:g}x the baseline's ({actual.dtype}, shape {shape}, "
                 f"on {actual.device}): {'; '.join(failed)}.")
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    if k_at is not None:
        i = k_at
        lines.append(f"At the kernel's largest error, index {where_k}: actual "
                     f"{_value(float(a.flatten()[i]))}, expected "
                     f"{_value(float(e.flatten()[i]))}, baseline "
                     f"{_value(float(b.flatten()[i]))}")
    lines.append(f"Rule: {rule}; errors against the float64 expected, over its finite elements.")
    seed = seeding.CURRENT.get()
    lines.append(f"Seed: {seed.describe()}" if seed else "Seed: none (not inside a pytest-triton test)")
    raise AssertionError("\n".join(lines))
