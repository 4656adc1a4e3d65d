"""assert_close: tolerance-aware comparison of a kernel's output with a reference.

One tolerance table (tolerance.py), keyed by the precision the kernel computed in. The reference
may be float64: both sides are compared in float64, so its precision is kept.
"""

from __future__ import annotations

import contextvars
import math

import torch

from ..env import dtypes, seeding
from . import baseline as _baseline
from . import inputs, outputs
from .comparison_steps import (
    check_guard_regions,
    check_operands,
    fmt,
    index_of,
    record_comparison,
    shape_dtype,
)
from .tolerance import TOLERANCES, Tolerance, precision_name, tolerance_for  # noqa: F401 - re-exported

MAX_LISTED = 8

# A failure whose every error is at most this many units of roundoff (of |expected| + the rms of
# expected) is of the size the output dtype's own arithmetic gives. 16-bit: torch's own fp16/bf16
# results measured 1.0-3.9 such units on reductions and RMSNorm gradients; a dropped
# term of a 4096-term fp16 sum measured 103, of a bf16 one 10. float32: torch's own float32
# results of functions built on transcendentals (GELU erf and tanh, SiLU, exp, softmax,
# layernorm) measured up to 20 units on CPU, a float32 matmul 33, and a correct library GeGLU
# (tanh) on both GPUs up to about 500 (errors 1e-5 to 4e-5); a GELU with an fp16
# intermediate measured 11,000, a matmul of 10-bit-mantissa (tf32-like) inputs 18,000, a bf16
# intermediate 99,000 (on CPU).
ARITHMETIC_UNITS = {torch.float16: 8.0, torch.bfloat16: 8.0, torch.float32: 1024.0}
# The keyword that judges such a kernel against torch at its own precision, named in that
# failure's note; None: no note (assert_grads_close measures torch's error itself and says so).
ARITHMETIC_KEYWORD: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "pytest_triton_arithmetic_keyword",
    default="assert_close(..., baseline=torch_result), torch_result being torch's own result at "
            "that precision")


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, rtol: float | None = None,
                 atol: float | None = None, reduction_size: int | None = None,
                 precision: str | torch.dtype | None = None, equal_nan: bool = False,
                 allow_trivial: bool = False, msg: str | None = None,
                 baseline: torch.Tensor | None = None,
                 baseline_factor: float | None = None, inplace=None) -> None:
    """Assert |actual - expected| <= atol + rtol * |expected| elementwise.

    rtol/atol default from TOLERANCES for `precision` (default: the dtype of `actual`; pass "tf32"
    for float32 matmuls on tensor cores). reduction_size=K widens atol by sqrt(K) (module doc).
    NaN never matches unless equal_nan=True; Inf matches only the same Inf.

    baseline: another low-precision result of the same op (e.g. torch's in the kernel's dtype).
    Then the rule is instead: the kernel's max and mean absolute errors against `expected` are each
    at most baseline_factor (default 2) times the baseline's, plus a floor (atol; see baseline.py).

    inplace: the inputs this op writes by design (names, or the tensors): the input guard
    (inputs.py) then lets them change. `actual` itself always may.

    A comparison an all-zeros output would pass cannot fail. Inside a pytest test that is judged
    for the whole test: the test fails when every comparison it made could not fail (call_record.py).
    Outside a test the call raises. allow_trivial=True says it is intended.
    """
    __tracebackhide__ = True
    check_operands(actual, expected)
    check_guard_regions(actual)
    if inputs.ENABLED.get():
        inputs.declare(inplace)
        why = outputs.problem(actual, "actual") or outputs.alias_problem(actual, "actual")
        if why:
            record_comparison(False, False, None, None)
            raise AssertionError(f"assert_close: {why}")
        inputs.at_comparison(actual)
    if baseline is not None or baseline_factor is not None:
        _baseline.assert_close_to_baseline(
            actual, expected, baseline, factor=baseline_factor, rtol=rtol, atol=atol,
            reduction_size=reduction_size, precision=precision, equal_nan=equal_nan,
            allow_trivial=allow_trivial, msg=msg)
        return
    tol = tolerance_for(actual.dtype, rtol=rtol, atol=atol, reduction_size=reduction_size,
                        precision=precision)
    exact = dtypes.kind(actual.dtype) in ("int", "bool")
    if exact:
        a = actual.detach().to(torch.int64) if actual.dtype != torch.uint64 else actual.detach()
        e = expected.detach().to(a.dtype)
    else:
        a = actual.detach().to(torch.float64)
        e = expected.detach().to(torch.float64)

    if exact:
        allowed = torch.zeros((), dtype=torch.float64, device=e.device)
        mismatch = a != e
        diff = (a.to(torch.float64) - e.to(torch.float64)).abs()
        trivial = bool((e == 0).all())
        nan_a = inf_a = nan_e = None
    else:
        nan_a, nan_e = torch.isnan(a), torch.isnan(e)
        inf_a, inf_e = torch.isinf(a), torch.isinf(e)
        finite = ~(nan_a | nan_e | inf_a | inf_e)
        allowed = tol.atol + tol.rtol * e.abs()
        diff = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
        close = finite & (diff <= allowed)
        close |= inf_a & inf_e & (a == e)
        if equal_nan:
            close |= nan_a & nan_e
        mismatch = ~close
        trivial = bool(((e.abs() <= allowed) | (nan_e & equal_nan)).all())

    n_bad = int(mismatch.sum())
    if n_bad == 0:
        if actual.numel() > 0:
            record_comparison(trivial, allow_trivial, lambda: (
                f"{shape_dtype(actual)}, max |expected| {fmt(float(e.abs().max()))}; "
                f"{tol.describe()}"),
                f"every |expected| <= atol + rtol*|expected|; {tol.describe()}")
        return
    record_comparison(False, allow_trivial, None, None)
    raise AssertionError(_report(actual, a, e, diff, allowed, mismatch, n_bad, tol, nan_a, inf_a,
                                 nan_e, msg, expected.dtype))


def arithmetic_units(dtype: torch.dtype, a: torch.Tensor, e: torch.Tensor) -> float | None:
    """The largest |a - e| in units of roundoff of `dtype` times (|e| + rms(e)), over the
    elements where both are finite; None for dtypes without an ARITHMETIC_UNITS bound, or when a
    mismatch is not finite (no rounding gives NaN). The rms stands for the terms' size: a sum of K
    terms of size s has rms about sqrt(K) s, and rounding its terms or partial sums in `dtype`
    gives errors of about sqrt(K) s u."""
    if dtype not in ARITHMETIC_UNITS:
        return None
    finite = torch.isfinite(a) & torch.isfinite(e)
    if not bool(finite.all()) or a.numel() == 0:
        return None
    u = torch.finfo(dtype).eps / 2
    rms = float(e.pow(2).mean().sqrt())
    scale = u * (e.abs() + rms)
    err = (a - e).abs()
    units = torch.where(err == 0, torch.zeros_like(err), err / scale)
    return float(units.max())


def arithmetic_note(dtype: torch.dtype, a: torch.Tensor, e: torch.Tensor) -> str | None:
    """The failure's note when its errors are of the size `dtype`'s arithmetic gives."""
    keyword = ARITHMETIC_KEYWORD.get()
    units = arithmetic_units(dtype, a, e) if keyword else None
    if units is None or units > ARITHMETIC_UNITS[dtype]:
        return None
    name = dtypes.name(dtype)
    size = (f"every error is of the size {name} arithmetic gives ({units:.3g} units of roundoff "
            f"of |expected| + rms(expected) at most; up to {ARITHMETIC_UNITS[dtype]:g})")
    if dtype == torch.float32:
        return (f"Note: {size}: a float32 kernel whose transcendentals (exp, tanh, erf) or order "
                f"of operations differ from the reference's errs by this much, as torch's own "
                f"float32 GELU and softmax can. The table's float32 row assumes every operation "
                f"rounds once; compare with torch's own float32 result instead: {keyword}.")
    return (f"Note: {size}: the table assumes a kernel that computes in float32 and rounds its "
            f"output once. A kernel that computes in {name} as torch does is judged against "
            f"torch at the same precision with {keyword}.")


def coarser_expected_note(actual: torch.dtype, expected: torch.dtype, tol: Tolerance) -> str | None:
    """The failure's note when `expected` holds fewer mantissa bits than `actual` and its own
    rounding alone exceeds the tolerance, which follows `actual`: the reference, not the
    kernel, is then too coarse to compare with."""
    if not (actual.is_floating_point and expected.is_floating_point):
        return None
    roundoff = torch.finfo(expected).eps / 2
    if torch.finfo(expected).eps <= torch.finfo(actual).eps or roundoff <= tol.rtol:
        return None
    return (f"Note: expected is {expected}, coarser than actual's {actual}, whose tolerance "
            f"applies (rtol {fmt(tol.rtol)}); expected's own rounding, up to {fmt(roundoff)} "
            f"relative, is more than that allows: compute the reference in float64 (e.g. "
            f"reference(x.double())), or at least in {actual}.")


def _worst_first(bad: torch.Tensor, diff: torch.Tensor, allowed: torch.Tensor) -> list[int]:
    """The flat indices of the mismatches, non-finite ones first (in index order), then the
    finite ones by how far over their allowance they are."""
    idx = torch.nonzero(bad).flatten()
    if idx.numel() == 0:
        return []
    d = diff[idx]
    al = allowed.flatten()[idx] if allowed.dim() else allowed.expand_as(d)
    # a non-finite mismatch has diff 0 (compare sets it so) and still fails: it ranks first
    ratio = torch.where(d > al, d / al, torch.full_like(d, math.inf))
    order = torch.sort(ratio, descending=True, stable=True).indices
    return idx[order].tolist()


def _report(actual, a, e, diff, allowed, mismatch, n_bad, tol, nan_a, inf_a, nan_e, msg,
            expected_dtype) -> str:
    total = actual.numel()
    lines = [msg] if msg else []
    lines.append(f"Tensors are not close ({actual.dtype}, shape {tuple(actual.shape)}, "
                 f"on {actual.device}).")
    lines.append(f"Mismatched elements: {n_bad} / {total} ({100.0 * n_bad / total:.3g}%)")
    coarser = coarser_expected_note(actual.dtype, expected_dtype, tol)
    if coarser:
        lines.append(coarser)
    flat_diff = diff.flatten()
    flat_bad = mismatch.flatten()
    finite_bad = flat_bad
    if nan_a is not None:
        # Non-finite mismatches first: the differences below are over finite elements only, so
        # with every mismatch non-finite they would name an element within tolerance.
        nonfinite = (nan_a | inf_a | nan_e | torch.isinf(e)).flatten()
        nonfinite_bad = flat_bad & nonfinite
        finite_bad = flat_bad & ~nonfinite
        n_nonfinite = int(nonfinite_bad.sum())
        if n_nonfinite:
            i = int(torch.nonzero(nonfinite_bad)[0])
            lines.append(f"Non-finite mismatches: {n_nonfinite} of the {n_bad} (NaN or Inf in "
                         f"actual or expected, not matched by the other); the first at index "
                         f"{index_of(i, actual.shape)}: actual {fmt(float(a.flatten()[i]))}, "
                         f"expected {fmt(float(e.flatten()[i]))}")
    if not bool(finite_bad.any()):
        if flat_diff.numel() and float(flat_diff.max()) > 0:
            i_abs = int(torch.argmax(flat_diff))
            allowed_there = float(allowed.flatten()[i_abs] if allowed.dim() else allowed)
            lines.append(f"Every mismatch is non-finite: the finite elements all match (the "
                         f"greatest difference among them, {fmt(float(flat_diff[i_abs]))} at "
                         f"index {index_of(i_abs, actual.shape)}, is within the "
                         f"{fmt(allowed_there)} allowed there).")
        else:
            lines.append("Every mismatch is non-finite: the finite elements all match.")
    elif flat_diff.numel() and float(flat_diff.max()) > 0:
        flat_allowed = allowed.flatten() if allowed.dim() else allowed.expand_as(flat_diff)
        # the finite mismatch furthest over its allowance leads: the greatest difference can sit
        # where |expected| is large and much is allowed, far from the elements that fail
        over = torch.where(finite_bad, flat_diff / flat_allowed, torch.full_like(flat_diff, -1.0))
        i_worst = int(torch.argmax(over))
        ratio = float(over[i_worst])
        lines.append(f"Furthest over its allowance at index {index_of(i_worst, actual.shape)}: "
                     f"actual {fmt(float(a.flatten()[i_worst]))}, expected "
                     f"{fmt(float(e.flatten()[i_worst]))}, |difference| "
                     f"{fmt(float(flat_diff[i_worst]))} where {fmt(float(flat_allowed[i_worst]))} "
                     "is allowed" + (f" ({ratio:.3g}x)" if math.isfinite(ratio) else ""))
        i_abs = int(torch.argmax(flat_diff))
        e_flat = e.abs().flatten().to(torch.float64)
        rel = flat_diff / e_flat
        rel = torch.nan_to_num(torch.where(flat_diff == 0, torch.zeros_like(rel), rel),
                               nan=0.0, posinf=math.inf)
        i_rel = int(torch.argmax(rel))
        allowed_there = float(flat_allowed[i_abs])
        within = "allowed there" if bool(flat_bad[i_abs]) else "allowed there: within it"
        lines.append(f"Greatest absolute difference: {fmt(float(flat_diff[i_abs]))} at index "
                     f"{index_of(i_abs, actual.shape)} ({fmt(allowed_there)} {within})")
        zero_ref = float(e_flat[i_rel]) == 0.0
        lines.append(f"Greatest relative difference: {fmt(float(rel[i_rel]))} at index "
                     f"{index_of(i_rel, actual.shape)} "
                     + (f"(expected is 0 there, so any difference is infinitely relative; atol "
                        f"{fmt(tol.atol)} decides there)" if zero_ref
                        else f"(up to {fmt(tol.rtol)} allowed)"))
    if nan_a is not None:
        finite_e = ~(nan_e | torch.isinf(e))
        n_nan = int((nan_a & finite_e).sum())
        n_inf = int((inf_a & finite_e).sum())
        n_nan_e = int((nan_e & ~nan_a).sum())
        if n_nan or n_inf or n_nan_e:
            lines.append(f"Non-finite: {n_nan} NaN and {n_inf} Inf in actual where expected is "
                         f"finite; {n_nan_e} NaN in expected where actual is not")
            if n_nan:
                lines.append("  (NaN where the reference is finite: an unwritten element of a "
                             "poisoned output, a read of a non-contiguous input's gaps (they "
                             "hold poison: the kernel assumed contiguous rows or elements), or "
                             "an overflow)")
    bad = _worst_first(mismatch.flatten(), diff.flatten(), allowed)[:MAX_LISTED]
    lines.append(f"{'Worst' if len(bad) < n_bad else 'All'} {len(bad)} mismatches, furthest over "
                 "their allowance first:")
    header = ("index", "actual", "expected", "abs diff", "allowed")
    rows = []
    a_flat, e_flat = a.flatten(), e.flatten()
    for i in bad:
        rows.append((str(index_of(i, actual.shape)), fmt(float(a_flat[i])), fmt(float(e_flat[i])),
                     fmt(float(abs(a_flat[i].double() - e_flat[i].double()))),
                     fmt(float(allowed.flatten()[i] if allowed.dim() else allowed))))
    widths = [max(len(r[c]) for r in rows + [header]) for c in range(len(header))]
    for r in [header] + rows:
        lines.append("  " + "  ".join(v.rjust(w) for v, w in zip(r, widths)))
    lines.append(f"Tolerance: {tol.describe()}")
    note = arithmetic_note(actual.dtype, a, e)
    if note:
        lines.append(note)
    seed = seeding.CURRENT.get()
    lines.append(f"Seed: {seed.describe()}" if seed else "Seed: none (not inside a pytest-triton test)")
    return "\n".join(lines)
