"""A rate from work and a time, written once: GB/s from bytes, TFLOP/s from FLOPs.

Times are in ms per call, as the plugin's summaries hold them. The division order is fixed
(work / ms / scale), so a rate recomputed from the same numbers (the judge's, a saved run's) is
the same float, not one rounded differently.
"""

from __future__ import annotations


def gbps(nbytes: float, ms: float) -> float:
    """GB/s of `nbytes` moved in `ms` milliseconds: bytes per ms is 1e6 times bytes per second
    over 1e9 bytes per GB."""
    return nbytes / ms / 1e6


def tflops(flops: float, ms: float) -> float:
    """TFLOP/s of `flops` done in `ms` milliseconds (1e3 ms per s over 1e12 FLOP per TFLOP)."""
    return flops / ms / 1e9
