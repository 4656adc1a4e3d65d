"""The roofline, once: where a measurement sits between the DRAM and tensor-core ceilings.

A kernel of arithmetic intensity AI (FLOP per byte moved) is bound by memory below the ridge
(the intensity where the two ceilings meet: peak FLOP/s / peak bytes/s) and by compute above it;
its fraction is what it achieved of the ceiling that binds it. The verdict's one-line roofline,
the explain diagnosis and the plot all read their numbers here, against the datasheet or the
measured ceilings.
"""

from __future__ import annotations

from dataclasses import dataclass

# How a fraction of the binding ceiling is graded in the one-line roofline: (good above, needs
# work below). A memory-bound kernel rarely passes ~90% of DRAM bandwidth (refresh, row switches),
# a compute-bound one ~85% of the tensor cores' peak (clock drop under load), so "good" starts
# lower for memory.
GRADES = {"memory": (0.6, 0.3), "compute": (0.8, 0.5)}
# Above this fraction of its binding ceiling a kernel is not slow, and the explain diagnosis
# offers no speed hints: what is left is within the spread of real kernels near a ceiling.
NEAR_CEILING = 0.8


def ridge(peak_tflops: float, peak_gbps: float) -> float:
    """FLOP/byte where the compute ceiling (TFLOP/s) meets the memory ceiling (GB/s)."""
    return peak_tflops * 1e3 / peak_gbps


@dataclass(frozen=True)
class Position:
    """Where a measurement sits against one pair of ceilings: the bound that holds it, the ridge
    and its intensity (None unless both flops= and bytes= were given), and the binding ceiling in
    words. What it achieved of that ceiling is the record's (Measurement.fractions)."""
    bound: str  # "memory" or "compute"
    ridge: float | None
    intensity: float | None  # FLOP/byte
    ceiling: str  # '3352 GB/s', '989.4 TFLOP/s'


def position(*, flops=None, bytes=None, peak_gbps=None, peak_tflops=None) -> Position | None:
    """The position of one measurement against one pair of ceilings, or None when neither
    ceiling applies. Without both flops and bytes the bound is the one the measurement has a
    number for."""
    if flops and bytes and peak_gbps and peak_tflops:
        r, ai = ridge(peak_tflops, peak_gbps), flops / bytes
        bound = "compute" if ai >= r else "memory"
    elif bytes and peak_gbps:
        r, ai, bound = None, None, "memory"
    elif flops and peak_tflops:
        r, ai, bound = None, None, "compute"
    else:
        return None
    ceiling = f"{peak_gbps:.0f} GB/s" if bound == "memory" else f"{peak_tflops:.1f} TFLOP/s"
    return Position(bound, r, ai, ceiling)


def grade(bound: str, fraction: float) -> str:
    good, poor = GRADES[bound]
    if fraction >= good:
        return f"good (>{100 * good:.1f}%)"
    if fraction < poor:
        return f"needs work (<{100 * poor:.1f}%)"
    return f"fair ({100 * poor:.1f}%-{100 * good:.1f}%)"
