"""Compatibility fixes that let Triton's interpreter (TRITON_INTERPRET=1) run real kernel libraries.

Kernel libraries (RMSNorm, RoPE, SwiGLU, cross-entropy, layer norm, ...) written for the GPU hit
gaps in Triton's interpreter that have nothing to do with their correctness: float arguments
arrive as Python floats, libdevice calls return None, bfloat16 arithmetic runs on the raw uint16
bits, `range()` loop indices are Python ints, a multi-config `@triton.autotune` tries to time its
configs on a driver that does not exist. This module patches the interpreter, in this process,
so such kernels run as they would on a GPU:

- `install() -> list[str]`: applies the fixes that the installed Triton needs (each is detected by
  probing the interpreter's behaviour, not by its version string) and returns their names.
  Idempotent; does nothing unless TRITON_INTERPRET=1 is set (Triton reads it when a kernel is
  decorated, so it must already be set, and install() must run before user kernels launch).
- `uninstall()`: undoes every fix (for tests).
- `installed()`, `status()`: which fixes are applied; why each other one is not.
- `FIXES`: each fix, what it fixes, which Triton versions need it, the upstream issue.
- `REMAINING_GAPS`: what still cannot run under the interpreter with the fixes applied, keyed as
  pytest_triton's interpreter gaps are.

Every patch touches only the interpreter's own classes and functions, Triton's libdevice modules
(whose replacements pass a GPU compilation's arguments through unchanged) and, for an autotuner,
only kernels that are interpreted; so a process that also compiles for a GPU is not affected.

The fixes live in args, bf16, libdevice, autotune and float_errors; this module
holds their table and installs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import args as _args
from . import autotune as _autotune
from . import bf16 as _bf16
from . import float_errors as _float_errors
from . import libdevice as _libdevice
from .base import Patches, interpreting

__all__ = ["FIXES", "REMAINING_GAPS", "Fix", "install", "installed", "status", "uninstall"]



# --------------------------------------------------------------------------------------------
# The table


@dataclass(frozen=True)
class Fix:
    name: str
    fixes: str  # what fails without it
    needed_by: str  # the Triton versions that need it, as tested; each install probes anew
    upstream: str  # the upstream Triton issue / PR, and its state
    closes_gap: str | None  # the pytest_triton interpreter gap it makes unnecessary, if any
    needed: Callable[[], bool]
    apply: Callable[[Patches], None]


FIXES: dict[str, Fix] = {f.name: f for f in (
    Fix("float_args",
        "float scalar kernel arguments arrive as Python floats ('float' object has no attribute "
        "'to'; x_fp16 * eps stays fp16 where a GPU promotes to fp32): passed as fp32 scalars, as a "
        "GPU launch passes them",
        "3.6, 3.9",
        "triton-lang/triton#5965 (scalars in interpreter mode; the int half was fixed, floats are "
        "still not converted in 3.9)",
        None, _args.needs_float_args, _args.apply_float_args),
    Fix("annotated_scalar_args",
        "a scalar argument's annotation is ignored: stride: tl.int64 arrives as int32, so row * "
        "stride wraps silently past 2**31 (wrong addresses); scale: tl.float16 arrives as a "
        "Python float; on 3.6 flag: tl.int1 fails. Converted to the annotated type, as a GPU "
        "launch does",
        "3.6, 3.9",
        "none found",
        None, _args.needs_annotated_scalar_args, _args.apply_annotated_scalar_args),
    Fix("loop_index_tensors",
        "the index of a range()/tl.range() loop is a Python int ('int' object has no attribute "
        "'to'): an int32 tensor (int64 if a bound is), as on a GPU; tl.static_range is left alone",
        "3.6, 3.9",
        "none found (triton-lang/triton#5965 covers assigned ints, fixed by the interpreter's "
        "assignment rewrite; loop targets are not assignments)",
        None, _args.needs_loop_index_tensors, _args.apply_loop_index_tensors),
    Fix("tensor_index_numpy2",
        "with NumPy >= 2.4 any range() with a tensor bound fails (only 0-dimensional arrays can be "
        "converted to Python scalars); without this fix, pin numpy<2.4",
        "3.6 (3.9 has the upstream fix)",
        "triton-lang/triton#9171 (fixed upstream: __index__ squeezes the array)",
        None, _args.needs_tensor_index_numpy2, _args.apply_tensor_index_numpy2),
    Fix("bf16_arithmetic",
        "bf16 + - *, minimum/maximum, comparisons, negation, clamp and fma act on the raw uint16 bits "
        "(3e38, NaN, -4.0 for -1.0, wrong order for negatives): computed in float32, rounded to "
        "bf16 to nearest even",
        "3.6, 3.9",
        "triton-lang/triton#10919 (open for bf16); PR triton-lang/triton#10945 closed unmerged; "
        "the interpreter's documentation lists bf16 as unsupported (triton-lang/triton#4972)",
        None, _bf16.needs_bf16_arithmetic, _bf16.apply_bf16_arithmetic),
    Fix("bf16_constants",
        "a bf16 scalar constant (x * 1.5 with x bf16) fails: the interpreter's builder has no "
        "get_bf16 (AttributeError): made as float32 rounded to bf16 to nearest even",
        "3.6 (3.9 has get_bf16)",
        "none found (added upstream along with the builder's get_bf16, by 3.9)",
        None, _bf16.needs_bf16_constants, _bf16.apply_bf16_constants),
    Fix("bf16_casts",
        "float32 -> bf16 truncates instead of rounding to nearest even (1 ulp errors; this also "
        "rounds bf16 / and %, and tl.max/tl.min, which Triton computes in float32); int -> bf16 "
        "and fp64 -> bf16 copy the number into the bit pattern; bf16 <-> fp16 through float32",
        "3.6, 3.9",
        "none found for the rounding (PR triton-lang/triton#3811 added bf16 <-> fp32 by truncation)",
        "bf16_rounding", _bf16.needs_bf16_casts, _bf16.apply_bf16_casts),
    Fix("bf16_reductions",
        "tl.sum, tl.argmax/argmin, tl.cumsum/cumprod (and tl.reduce with max/min combines) of bf16 "
        "add or order the bit patterns: reduced in float32 (sums rounded once, as torch.sum does)",
        "3.6, 3.9",
        "triton-lang/triton#11604 (tl.sum of bf16 on bit patterns, closed without a fix in 3.9)",
        None, _bf16.needs_bf16_reductions, _bf16.apply_bf16_reductions),
    Fix("bf16_dot",
        "tl.dot of bf16 multiplies the bit patterns (values around 1e10): operands widened to "
        "float32, products exact, accumulated in float32",
        "3.6, 3.9",
        "triton-lang/triton#11584; PR triton-lang/triton#11585 closed ('we just don't support it yet')",
        "bf16_dot", _bf16.needs_bf16_dot, _bf16.apply_bf16_dot),
    Fix("bf16_atomics",
        "tl.atomic_add on bf16 (the one bf16 atomic Triton allows) fails (ValueError: Unsupported "
        "data type): done as an in-order read-modify-write in float32, rounded to bf16",
        "3.6, 3.9",
        "none found",
        None, _bf16.needs_bf16_atomics, _bf16.apply_bf16_atomics),
    Fix("libdevice",
        "libdevice / extern math (triton.language.extra.libdevice, tl.extra.cuda.libdevice, a "
        "library's own @core.extern): the stubs return None, the backend functions ask for "
        "@triton.jit, extern_elementwise is not implemented. Implemented with NumPy/torch on the "
        "CPU, dispatched by libdevice's own type tables",
        "3.6, 3.9",
        "triton-lang/triton#8825 (closed, not supported); PR triton-lang/triton#10366 closed unmerged",
        "libdevice", _libdevice.needs_libdevice, _libdevice.apply_libdevice),
    Fix("autotune_one_config",
        "a multi-config @triton.autotune cannot run (RuntimeError: 0 active drivers: it tries to "
        "time every config): an interpreted kernel runs one config, the first that the autotuner's "
        "own pruning keeps (early_config_prune; a perf_model that needs a GPU is passed over), "
        "for every autotuner class (a library's subclass too); pin_config, assert_every_config "
        "and --triton-autotune=first choose their own",
        "3.6, 3.9",
        "none found (PR triton-lang/triton#6678 only keeps the disk cache away from the interpreter)",
        "autotune", _autotune.needs_autotune_one_config, _autotune.apply_autotune_one_config),
    Fix("quiet_float_errors",
        "kernel arithmetic is NumPy's, which warns ('overflow encountered in exp') where a GPU "
        "gives Inf or NaN silently: every heavy-tailed input into an exp printed warnings. An "
        "interpreted launch ignores floating-point errors, as a GPU does; an Inf or NaN that "
        "reaches an output is still reported by assert_close",
        "3.6, 3.9",
        "none found",
        None, _float_errors.needs_quiet_float_errors, _float_errors.apply_quiet_float_errors),
)}

# What still does not run under the interpreter with every fix applied, as keys of
# pytest_triton's INTERPRETER_GAPS with their reasons.
REMAINING_GAPS: dict[str, str] = {
    "libdevice": "Triton's interpreter has no CPU version of this libdevice function (directed-rounding "
                 "_rz/_rd/_ru variants, jn/yn, byte_perm, double2hiint and the like)",
    "inline_asm": "Triton's interpreter cannot run inline assembly",
    "tensor_descriptor": "this Triton's interpreter does not support tensor descriptors (TMA)",
    "bf16_bit_exact": "bf16 under Triton's interpreter rounds as torch's CPU kernels do, which can differ "
                      "from a GPU in the last bit: tl.sum/tl.cumsum accumulate in float32 and round once "
                      "(a GPU rounds each partial sum to bf16, in its own order); tl.fma and int64/fp64 -> "
                      "bf16 round twice, through float32 (a GPU may round once)",
}

_applied: dict[str, Patches] = {}
_skipped: dict[str, str] = {}


def install(exclude: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Apply the fixes the installed Triton's interpreter needs; returns the names applied (those
    applied by an earlier call included). Nothing is applied unless TRITON_INTERPRET=1.
    exclude: names of fixes to leave out (tests use it to show that each one is needed)."""
    unknown = [name for name in exclude if name not in FIXES]
    if unknown:
        raise ValueError(f"fixes.install: unknown fix {', '.join(unknown)}; "
                         f"known: {', '.join(FIXES)}")
    if not interpreting():
        return installed()
    for name, fix in FIXES.items():
        if name in _applied or name in exclude:
            continue
        try:
            needed = fix.needed()
        except Exception as exc:  # noqa: BLE001 - an interpreter this fix does not know
            _skipped[name] = f"cannot tell on this Triton ({type(exc).__name__}: {exc})"
            continue
        if not needed:
            _skipped[name] = "not needed: this Triton's interpreter already behaves"
            continue
        patches = Patches()
        try:
            fix.apply(patches)
        except Exception as exc:  # noqa: BLE001 - leave the interpreter as it was
            patches.undo()
            _skipped[name] = f"could not apply on this Triton ({type(exc).__name__}: {exc})"
            continue
        _applied[name] = patches
        _skipped.pop(name, None)
    return installed()


def uninstall() -> None:
    """Undo every applied fix, newest first."""
    for name in reversed(list(_applied)):
        _applied.pop(name).undo()
    _skipped.clear()


def installed() -> list[str]:
    """The fixes applied now, in table order."""
    return [name for name in FIXES if name in _applied]


def closed_gaps() -> set[str]:
    """The interpreter gaps (pytest_triton's INTERPRETER_GAPS keys) this interpreter no longer has:
    their fix is applied, or the interpreter already behaves."""
    return {fix.closes_gap for name, fix in FIXES.items() if fix.closes_gap and
            (name in _applied or _skipped.get(name, "").startswith("not needed"))}


def status() -> dict[str, str]:
    """Each fix: 'applied', or why it is not (not needed, not probed yet, or could not apply)."""
    return {name: "applied" if name in _applied else _skipped.get(name, "not installed")
            for name in FIXES}
