"""The triton_resources limits, and the verdict on what one compile uses against them: registers
per thread, spilled bytes per thread, shared memory per program and the occupancy they allow on
the architecture, said in the user's units."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..env.archcompile import CompileSpec, Resources
from ..env.device import ArchLimits, UnknownArch, arch_limits
from ..env.occupancy import occupancy, registers_for, shared_for
from .markers import RESOURCE_KEYS as KEYS

PER_DEVICE = "per-device"


class TritonResourcesError(Exception):
    """A triton_resources marker (or perf_target's resource keywords) that cannot be honoured, or
    a test under one that gives the gate nothing to check; the message names the test."""


class ResourceLimitExceeded(AssertionError):
    """A kernel the test launched uses more than its limits allow on a listed architecture."""


@dataclass(frozen=True)
class ResourceLimits:
    """What every kernel a test launches may use, on each architecture in `archs`. The defaults
    are the checklist's: no spills, shared memory within what one block may have."""
    max_registers: int | None = None  # registers per thread
    max_spills: int | None = 0  # bytes of local memory per thread (4 x Triton's n_spills)
    max_shared_memory: int | str | None = PER_DEVICE  # bytes per program, or the arch's limit
    min_occupancy: float | None = None  # resident warps / the SM's most, in (0, 1]
    archs: tuple[str, ...] = ()
    marker: str = "triton_resources"  # or "perf_target", whose keywords they came from

    def describe(self) -> str:
        args = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                if f.name in KEYS and getattr(self, f.name) != f.default]
        return f"{self.marker}({', '.join(args)})"


def _whole(key: str, value, where: str, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo \
            or (hi is not None and value > hi):
        span = f"a whole number >= {lo}" + (f" and <= {hi}" if hi is not None else "")
        raise TritonResourcesError(f"{where}{key}={value!r}: expected {span}")
    return value


def parse_limits(kwargs: dict, *, default_archs: tuple[str, ...], marker: str,
                 where: str) -> ResourceLimits:
    """Validate the keywords; `where` ("test id: marker(...): ") prefixes every error."""
    for key in kwargs:
        if key not in KEYS:
            raise TritonResourcesError(f"{where}{marker} can't have {key!r} keyword argument; "
                                       f"expected some of {', '.join(KEYS)}")
    values: dict = {"marker": marker}
    if kwargs.get("max_registers") is not None:
        values["max_registers"] = _whole("max_registers", kwargs["max_registers"], where, 1, 255)
    if "max_spills" in kwargs:
        spills = kwargs["max_spills"]
        values["max_spills"] = None if spills is None else _whole("max_spills", spills, where, 0)
    if "max_shared_memory" in kwargs:
        smem = kwargs["max_shared_memory"]
        values["max_shared_memory"] = smem if smem in (None, PER_DEVICE) else \
            _whole("max_shared_memory", smem, where, 0)
    if kwargs.get("min_occupancy") is not None:
        occ = kwargs["min_occupancy"]
        if isinstance(occ, bool) or not isinstance(occ, (int, float)) or math.isnan(occ) \
                or not 0.0 < occ <= 1.0:
            raise TritonResourcesError(f"{where}min_occupancy={occ!r}: expected a fraction in (0, 1]")
        values["min_occupancy"] = float(occ)
    archs = kwargs.get("archs", default_archs)
    if isinstance(archs, str):
        archs = (archs,)
    if not isinstance(archs, (tuple, list)) or not archs:
        raise TritonResourcesError(f"{where}archs={archs!r}: expected a tuple of architecture "
                                   "names such as ('sm_80', 'sm_90')")
    for arch in archs:
        try:
            arch_limits(arch)
        except UnknownArch as exc:
            raise TritonResourcesError(f"{where}archs={tuple(archs)!r}: {exc}") from None
    values["archs"] = tuple(archs)
    return ResourceLimits(**values)


def _kb(n: int) -> str:
    return f"{n:,} bytes ({n / 1024:.1f} KB)" if n >= 1024 else f"{n:,} bytes"


def shared_limit(limits: ResourceLimits, arch: ArchLimits) -> tuple[int | None, str]:
    """The shared memory one program may use on `arch` under `limits`, and its name."""
    if limits.max_shared_memory is None:
        return None, ""
    if limits.max_shared_memory == PER_DEVICE or limits.max_shared_memory >= arch.smem_per_block:
        return arch.smem_per_block, f"{arch.arch}'s most per block"
    return limits.max_shared_memory, f"max_shared_memory={limits.max_shared_memory}"


@dataclass
class Verdict:
    """One compile of one launch on one architecture, judged."""
    spec: CompileSpec
    resources: Resources
    occupancy: dict | None
    problems: list  # (kind, text): kind is "compile", "registers", "spills", "shared", "occupancy"

    @property
    def failed(self) -> bool:
        return bool(self.problems)

    def line(self) -> str:
        """'_k (BLOCK=8192, num_warps=8) on sm_90: 255 registers/thread and 1,024 bytes spilled
        (max_spills=0); occupancy 12% (min 50%).'"""
        head = f"{self.spec.describe(self.resources.num_warps)} on {self.resources.arch}"
        if not self.problems:
            return f"{head}: {usage(self.resources, self.occupancy)}"
        return f"{head}: {'; '.join(text for _, text in self.problems)}."


def usage(res: Resources, occ: dict | None) -> str:
    """What a compile uses, in one line."""
    parts = [f"{res.n_regs} registers/thread", f"{res.spill_bytes:,} bytes spilled",
             f"{_kb(res.shared)} of shared memory"]
    if occ is not None:
        parts.append(f"occupancy {100 * occ['occupancy']:.0f}%")
    return ", ".join(parts)


def judge(spec: CompileSpec, res: Resources, limits: ResourceLimits) -> Verdict:
    """The verdict of `res` (one compile of `spec`) against `limits` on its architecture."""
    if res.error is not None:
        return Verdict(spec, res, None, [("compile", f"cannot be compiled: {res.error}")])
    arch = arch_limits(res.arch)
    occ = occupancy({"num_warps": res.num_warps, "n_regs": res.n_regs, "shared": res.shared}, arch)
    problems = []
    regs_over = limits.max_registers is not None and res.n_regs > limits.max_registers
    if regs_over:
        problems.append(("registers", f"{res.n_regs} registers/thread "
                                      f"(max_registers={limits.max_registers})"))
    if limits.max_spills is not None and res.spill_bytes > limits.max_spills:
        regs = "" if regs_over else f"{res.n_regs} registers/thread and "
        problems.append(("spills", f"{regs}{res.spill_bytes:,} bytes spilled per thread "
                                   f"(max_spills={limits.max_spills})"))
    cap, name = shared_limit(limits, arch)
    if cap is not None and res.shared > cap:
        problems.append(("shared", f"{_kb(res.shared)} of shared memory per program, over "
                                   f"{name}: {_kb(cap)}"))
    if limits.min_occupancy is not None and occ is not None \
            and occ["occupancy"] < limits.min_occupancy:
        problems.append(("occupancy", f"occupancy {100 * occ['occupancy']:.0f}% "
                                      f"(min {100 * limits.min_occupancy:.0f}%): "
                                      f"{occ['blocks_per_sm']} x {res.num_warps} warps of "
                                      f"{occ['max_warps_per_sm']} per SM, limited by {occ['limiter']}"))
    return Verdict(spec, res, occ, problems)


def _blocks(spec: CompileSpec) -> list[tuple[str, int]]:
    """The constexprs that look like tile sizes (powers of two >= 16), largest first."""
    return sorted(((k, v) for k, v in spec.constexpr_values().items()
                   if isinstance(v, int) and not isinstance(v, bool) and v >= 16 and v & (v - 1) == 0),
                  key=lambda kv: -kv[1])


def candidates(verdict: Verdict, limits: ResourceLimits) -> list[dict]:
    """Changes to try, in order, for a failed verdict: a pipeline stage fewer where shared memory
    is over or bounds the occupancy; no register cap where a cap makes it spill; the cap the
    occupancy floor needs where registers bound it; twice the warps where registers are over
    or spill; then the largest tile halved."""
    kinds = {k for k, _ in verdict.problems}
    opts = {"num_warps": verdict.resources.num_warps, **verdict.spec.options}
    occ = verdict.occupancy or {}
    out: list[dict] = []
    stages = opts.get("num_stages")
    if stages and stages > 1 and ("shared" in kinds or "occupancy" in kinds
                                  and occ.get("limiter") == "shared memory"):
        out.append({"num_stages": stages - 1})
    if "spills" in kinds and opts.get("maxnreg"):
        out.append({"maxnreg": None})
    warps = opts.get("num_warps") or 4
    if "occupancy" in kinds and occ.get("limiter") == "registers":
        arch = arch_limits(verdict.resources.arch)
        blocks = math.ceil(limits.min_occupancy * arch.max_warps_per_sm / warps)
        cap = registers_for(blocks, warps, arch)
        if cap is not None and cap >= 24:  # below that, ptxas spills whatever the kernel
            out.append({"maxnreg": cap})
    if kinds & {"registers", "spills"} and warps < 16:
        out.append({"num_warps": warps * 2})
    blocks = _blocks(verdict.spec)
    if blocks and kinds - {"compile"}:
        name, value = blocks[0]
        out.append({name: value // 2})
    return out[:4]


def change_text(change: dict) -> str:
    """'fits with num_stages=2', 'fits without maxnreg'."""
    dropped = [k for k, v in change.items() if v is None]
    given = [f"{k}={v}" for k, v in change.items() if v is not None]
    return " and ".join(([f"with {', '.join(given)}"] if given else [])
                        + ([f"without {', '.join(dropped)}"] if dropped else []))


def arithmetic_hint(verdict: Verdict, limits: ResourceLimits) -> str | None:
    """What would fit, by the occupancy arithmetic, where no tried change did."""
    res, kinds = verdict.resources, {k for k, _ in verdict.problems}
    arch = arch_limits(res.arch)
    if "occupancy" in kinds and res.num_warps:
        blocks = math.ceil(limits.min_occupancy * arch.max_warps_per_sm / res.num_warps)
        regs, smem = registers_for(blocks, res.num_warps, arch), shared_for(blocks, arch)
        if regs is not None:
            return (f"{100 * limits.min_occupancy:.0f}% occupancy at num_warps={res.num_warps} "
                    f"needs {blocks} blocks/SM: at most {regs} registers/thread and "
                    f"{_kb(smem)} of shared memory per program on {arch.arch}")
    if "spills" in kinds:
        return "spilling: fewer live values per thread (a smaller tile, or more warps to share it)"
    return None
