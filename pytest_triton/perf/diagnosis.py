"""Why a measurement is slow, as its record keeps it: the roofline position against both kinds of
ceiling, the hints with their evidence, and what the diagnosis read to find them.

The types only: diagnose/explain.py fills them (--triton-perf-explain, or a verdict that is not
a pass); the record carries them to the JSON report and back (to_dict, from_dict), and the plot
reads the intensity. The kernels, autotune records, compile counts, Nsight Compute results and
the timed call's breakdown stay the JSON-ready dicts the modules that read them made.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .peaks import known


@dataclass(frozen=True)
class Hint:
    code: str  # spills, occupancy, block-size, small-block, waves, tail, num-stages, autotune,
    #            single-config, compile-time, coalescing, fusion
    message: str  # what to change
    evidence: str  # what in the compiled kernel, launch or record shows it
    kernel: str | None = None


@dataclass(frozen=True)
class Against:
    """The position against one pair of ceilings (datasheet or measured): the bound, the ridge
    (FLOP/byte; None without both flops= and bytes=), the binding ceiling in words, and the
    fraction of it achieved."""
    bound: str
    ridge: float | None
    ceiling: str
    fraction: float | None


@dataclass(frozen=True)
class Roofline:
    """Arithmetic intensity, the bound, and each kind of ceiling's position; `binding` names the
    one the diagnosis judges by (the measured where there is one) and `fraction` is its."""
    intensity: float | None = None  # FLOP/byte
    intensity_from: str | None = None  # "bytes=", or "operands": the launches' tensors' sizes
    bound: str | None = None
    datasheet: Against | None = None
    measured: Against | None = None
    binding: str | None = None
    fraction: float | None = None

    @classmethod
    def from_dict(cls, d: dict | None) -> Roofline:
        d = known(cls, d or {})
        for src in ("datasheet", "measured"):
            if d.get(src) is not None:
                d[src] = Against(**known(Against, d[src]))
        return cls(**d)


@dataclass(frozen=True)
class Diagnosis:
    """One measurement's diagnosis (diagnose/explain.py says how each part is found)."""
    nodeid: str
    name: str | None
    verdict: str
    roofline: Roofline = field(default_factory=Roofline)
    near_ceiling: bool = False  # at roofline.NEAR_CEILING of its ceiling: no speed hints raised
    kernels: list[dict] = field(default_factory=list)  # the timed launches, each with occupancy
    all_launches: int = 0
    autotune: list[dict] = field(default_factory=list)
    compiles: dict | None = None
    errors: list[str] = field(default_factory=list)
    note: str = ""
    ncu: dict | None = None
    cost_s: float = 0.0  # seconds spent reading the launches
    timed_call: dict | None = None  # the breakdown of one timed call
    hints: tuple[Hint, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hints"] = [asdict(h) for h in self.hints]
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> Diagnosis | None:
        if d is None:
            return None
        d = known(cls, d)
        d["roofline"] = Roofline.from_dict(d.get("roofline"))
        d["hints"] = tuple(Hint(**known(Hint, h)) for h in d.get("hints") or ())
        return cls(**{"name": None, "verdict": "", **d})
