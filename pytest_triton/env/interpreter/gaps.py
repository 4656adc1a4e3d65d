"""The interpreter's known gaps, and the one check of whether a test that needs one runs here:
the interpreter_gap marker and skip_interpreter_gap() both ask gap_reason()."""

from __future__ import annotations

import pytest

from .base import interpreting
from .fixes import closed_gaps

# The interpreter's known gaps: a test that needs one of these is skipped there, with this reason.
INTERPRETER_GAPS = {
    "bf16_dot": "Triton's interpreter computes bf16 tl.dot wrongly",
    "libdevice": "Triton's interpreter has no libdevice",
    "inline_asm": "Triton's interpreter cannot run inline assembly",
    "autotune": "Triton's interpreter cannot autotune over several configs (no driver to time them)",
    "tensor_descriptor": "this Triton's interpreter does not support tensor descriptors (TMA)",
    "bf16_rounding": "Triton's interpreter rounds float32 to bfloat16 toward zero, not to nearest "
                     "as GPUs do: errors up to 1 ulp, twice a GPU's",
}

# per item, parsed at collection (perf/markers.py): its interpreter_gap marker's skip reason
INTERPRETER_GAP_KEY = pytest.StashKey["str | None"]()


def gap_reason(gap: str, reason: str | None = None, *, where: str = "interpreter_gap") -> str | None:
    """The skip reason of a test that needs `gap` (a key of INTERPRETER_GAPS, or "other" with
    reason=) under the interpreter; None where the plugin's fixes close it (the test runs).
    ValueError, naming `where`, for an unknown gap or an 'other' without a reason."""
    if gap == "other":
        if not reason:
            raise ValueError(f"{where}('other') needs reason=")
        return f"interpreter gap: {reason}"
    if gap not in INTERPRETER_GAPS:
        raise ValueError(f"{where}({gap!r}): unknown gap; expected one of "
                         f"{', '.join(INTERPRETER_GAPS)} or 'other' (with reason=)")
    if gap in closed_gaps():
        return None
    return f"interpreter gap: {reason or INTERPRETER_GAPS[gap]}"


def skip_interpreter_gap(gap: str, reason: str | None = None) -> None:
    """Skip the calling test under the interpreter when it needs `gap` (a key of INTERPRETER_GAPS,
    or "other" with reason=), as the interpreter_gap marker does."""
    __tracebackhide__ = True
    why = gap_reason(gap, reason, where="skip_interpreter_gap")
    if why is not None and interpreting():
        pytest.skip(why)
