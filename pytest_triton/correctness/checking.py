"""Whether the judge's checks run, and the time they take: kept apart from the checks themselves
(inputs.py and the judge's modules, which import torch), so that the judge switches them on and
counts their cost without importing torch."""

from __future__ import annotations

import contextvars
import functools
import time

# The judge's checks (inputs.py's and the others in docs/judging.md) are on unless --triton-judge=off
ENABLED: contextvars.ContextVar[bool] = contextvars.ContextVar("triton_judge_checks", default=True)
# Seconds the judge's checks took in this process, by kind ("default": the cheap checks that
# always run; "judge": --triton-judge's): judge/cost.py reports them against the tests' time.
SPENT = {"default": 0.0, "judge": 0.0}
_DEPTH = [0]
_CLOCK = time.perf_counter  # bound now: a test that replaces time.perf_counter cannot skew it


def costed(kind: str = "default"):
    """Count the decorated function's time in SPENT[kind] (not again inside another counted)."""
    def wrap(fn):
        @functools.wraps(fn)
        def counted(*args, **kwargs):
            if _DEPTH[0]:
                return fn(*args, **kwargs)
            _DEPTH[0] += 1
            t0 = _CLOCK()
            try:
                return fn(*args, **kwargs)
            finally:
                SPENT[kind] += _CLOCK() - t0
                _DEPTH[0] -= 1
        return counted
    return wrap
