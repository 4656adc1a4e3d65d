"""A Triton launch compiled for a GPU architecture this machine may not have, and what the
compiled kernel uses there: registers per thread, spilled bytes per thread, shared memory per
program.

The nvidia backend compiles for any GPUTarget without a GPU: the ptxas Triton uses writes the
cubin (ptxas.py), whose resource usage gives REG (registers per thread) and STACK (the local
memory each thread reserves, which the driver reports as CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES and
Triton's n_spills counts in 4-byte words). Shared memory is the compiled kernel's
metadata.shared: what its launcher asks for, the number Triton checks against the device's limit
and a GPU's compile reports. (cuobjdump's SHARED adds the 1 KB the driver reserves per block
whenever a kernel uses shared memory; occupancy counts that reserve itself. On an H100 the CPU
path's metadata.shared equalled the real compile's for all 98 launches of the bundled gates, and
cuobjdump's SHARED exceeded it by 1024 for the 89 that use shared memory.)

A launch is a CompileSpec: the JITFunction and the signature, constexprs and specialisation
attributes Triton's own binder derives from the launch's arguments (so the compile is the one a
GPU launch gets: 16-byte aligned pointers, integers divisible by 16), and the launch's options
(num_warps, num_stages, maxnreg ...). An interpreted kernel is compiled as the JITFunction a GPU
process would have (native_jit.py).

Results are kept in memory and on disk per (kernel source hash, signature, constexprs,
attributes, options, architecture, Triton and ptxas versions): a suite compiles each once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import ptxas
from .native_jit import jit_of, language_for_compile
from .ptxas import capability

# Launch options a CompileSpec carries (the rest of the backend's options are its defaults).
SPEC_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug")


def _shown(value) -> str | None:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float, str)):
        return repr(value) if isinstance(value, str) else str(value)
    return None


def _keyed(value) -> str:
    key = getattr(value, "cache_key", None)  # a JITFunction passed as a constexpr
    return key if isinstance(key, str) else repr(value)


@dataclass(frozen=True)
class CompileSpec:
    """One launch's compile: what triton.compile needs, for any architecture."""
    fn: object  # the JITFunction
    signature: dict  # {param: "*fp16" | "i32" | "fp32" | "constexpr" | ...}
    constexprs: dict  # {(index,): value}
    attrs: dict  # {(index,): [["tt.divisibility", 16]]}
    options: dict  # launch options (SPEC_OPTIONS) given at the launch

    @property
    def kernel(self) -> str:
        return self.fn.__name__

    def constexpr_values(self) -> dict:
        """The values of the parameters declared tl.constexpr (not the arguments Triton's
        specialisation made constant, such as a stride of 1)."""
        params = self.fn.params
        return {params[path[0]].name: value for path, value in self.constexprs.items()
                if len(path) == 1 and params[path[0]].is_constexpr}

    def describe(self, num_warps: int | None = None) -> str:
        """'_kernel (BLOCK=8192, num_warps=8)': its constexprs and launch options (num_warps: the
        compiled kernel's, where the launch left it to the default)."""
        parts = [f"{k}={s}" for k, v in self.constexpr_values().items()
                 if v is not None and (s := _shown(v)) is not None]
        opts = {"num_warps": num_warps, **self.options}
        parts += [f"{k}={opts[k]}" for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
                  if opts.get(k) is not None and not (k == "num_ctas" and opts[k] == 1)]
        return f"{self.kernel} ({', '.join(parts)})" if parts else self.kernel

    def key(self) -> str:
        return json.dumps({"fn": self.fn.cache_key, "name": self.kernel,
                           "signature": self.signature,
                           "constexprs": sorted((str(k), _keyed(v)) for k, v in self.constexprs.items()),
                           "attrs": sorted((str(k), repr(v)) for k, v in self.attrs.items()),
                           "options": sorted((k, repr(v)) for k, v in self.options.items())})

    def with_changes(self, **changes) -> CompileSpec:
        """This launch with some constexprs or launch options changed (for a hint)."""
        names = self.fn.arg_names
        constexprs, options = dict(self.constexprs), dict(self.options)
        for name, value in changes.items():
            if name in SPEC_OPTIONS and value is None:
                options.pop(name, None)
            elif name in SPEC_OPTIONS:
                options[name] = value
            else:
                constexprs[(names.index(name),)] = value
        return replace(self, constexprs=constexprs, options=options)


@contextlib.contextmanager
def _quiet():
    """Triton 3.9 warns once, where options are parsed, that TRITON_DEFAULT_FP_FUSION is unset:
    a side compile takes the default a GPU launch takes, and leaves the warning to that launch."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*FP_FUSION", category=UserWarning)
        yield


@functools.cache
def _backend():
    """A CUDA backend for argument specialisation (the same on every CUDA architecture)."""
    from triton.backends.compiler import GPUTarget  # import time: triton
    from triton.compiler import make_backend

    return make_backend(GPUTarget("cuda", 90, 32))


def _option_names() -> frozenset:
    return frozenset(type(_backend().parse_options({})).__dataclass_fields__)


_binders: dict[int, tuple] = {}  # id(JITFunction) -> (JITFunction, binder)


def spec_of_call(kernel, args: tuple, kwargs: dict) -> CompileSpec:
    """The CompileSpec of `kernel[grid](*args, **kwargs)` (a JITFunction or an interpreted one),
    from Triton's own binder, as JITFunction.run derives it on a GPU."""
    from triton import knobs  # import time: triton
    from triton.runtime.jit import create_function_from_signature

    jit = jit_of(kernel)
    entry = _binders.get(id(jit))
    if entry is None:
        entry = _binders[id(jit)] = (jit, create_function_from_signature(jit.signature, jit.params,
                                                                         _backend()))
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", jit.debug) or bool(getattr(knobs.runtime, "debug", False))
    bound, specialization, extra = entry[1](*args, **kwargs)
    with _quiet():
        _, signature, constexprs, attrs = jit._pack_args(_backend(), kwargs, bound, specialization,
                                                         extra)
        names = _option_names()
    options = {k: v for k, v in extra.items() if k in SPEC_OPTIONS and k in names and v is not None}
    if not options.get("debug"):
        options.pop("debug", None)
    return CompileSpec(jit, dict(signature), dict(constexprs), dict(attrs), options)


def spec_of_config(kernel, args: tuple, kwargs: dict, config, configs: list) -> CompileSpec:
    """The CompileSpec of an autotuned launch `kernel[grid](*args, **kwargs)` had its autotuner
    run `config` instead (`configs`: all of them, whose keys the launch's kwargs carry): the
    config's constexprs and options, after its pre_hook (which may set a tensor descriptor's
    block shape, part of the signature), as Autotuner.run launches it."""
    keys = {k for c in configs for k in c.all_kwargs()}
    kwargs = {k: v for k, v in kwargs.items() if k not in keys}
    kwargs.update(config.all_kwargs())
    if config.pre_hook is not None:
        config.pre_hook({**dict(zip(jit_of(kernel).arg_names, args)), **kwargs})
    return spec_of_call(kernel, args, kwargs)


def spec_of_compiled(kernel) -> CompileSpec | None:
    """The CompileSpec of a CompiledKernel a GPU launch used (None when it was not compiled from
    a @triton.jit function's source)."""
    src = getattr(kernel, "src", None)
    if src is None or not hasattr(src, "signature") or not hasattr(getattr(src, "fn", None), "arg_names"):
        return None
    md = kernel.metadata
    options = {k: getattr(md, k) for k in SPEC_OPTIONS if getattr(md, k, None) is not None}
    if not options.get("debug"):
        options.pop("debug", None)
    return CompileSpec(src.fn, dict(src.signature), dict(src.constants), dict(src.attrs), options)


# --- what a compile uses -----------------------------------------------------------------------

@dataclass
class Resources:
    """What one compile of a launch uses on one architecture."""
    arch: str
    n_regs: int | None = None  # registers per thread
    spill_bytes: int | None = None  # local memory per thread (spilled registers): 4 x n_spills
    shared: int | None = None  # bytes of shared memory per program
    num_warps: int | None = None
    source: str = ""  # "ptxas 12.9, Triton 3.6.0" or "this GPU's compile"
    error: str | None = None  # the compiler's message, where the launch cannot compile
    seconds: float = 0.0  # compile time (0 when read from the cache)
    cached: bool = field(default=False, compare=False)

    def to_dict(self) -> dict:
        return asdict(self)


def real_resources(compiled, arch: str) -> Resources:
    """The numbers of a CompiledKernel a launch on this GPU loaded (n_regs and n_spills come from
    the driver)."""
    spills = getattr(compiled, "n_spills", None)
    return Resources(arch=arch, n_regs=getattr(compiled, "n_regs", None),
                     spill_bytes=None if spills is None else 4 * int(spills),
                     shared=getattr(compiled.metadata, "shared", None),
                     num_warps=getattr(compiled.metadata, "num_warps", None),
                     source="this GPU's compile")


def _message(exc: BaseException, output: str) -> str:
    text = str(exc).strip() or type(exc).__name__
    notes = [ln.strip() for ln in output.splitlines() if "error" in ln.lower()]
    notes = [ln for ln in notes if ln not in text][:5]
    return "\n".join([f"{type(exc).__name__}: {text}", *notes])


def _compile(spec: CompileSpec, arch: str) -> Resources:
    import sys

    import triton  # import time: triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cc = capability(arch)
    t0 = time.perf_counter()
    source = ptxas.toolchain(cc)
    try:
        with ptxas.captured_output() as output, _quiet(), language_for_compile():
            sys.stdout.flush()
            compiled = triton.compile(ASTSource(spec.fn, spec.signature, spec.constexprs, spec.attrs),
                                      target=GPUTarget("cuda", cc, 32), options=dict(spec.options))
            sys.stdout.flush()
    except Exception as exc:  # noqa: BLE001 - the compiler's own error is the verdict
        return Resources(arch=arch, source=source, error=_message(exc, "".join(output)),
                         seconds=time.perf_counter() - t0)
    md = compiled.metadata
    usage = ptxas.cuobjdump_usage(compiled.asm["cubin"], md.name)
    return Resources(arch=arch, n_regs=usage.get("REG"), spill_bytes=usage.get("STACK"),
                     shared=int(md.shared or 0), num_warps=md.num_warps,
                     source=source, seconds=time.perf_counter() - t0)


_memo: dict[str, Resources] = {}
CACHE_VERSION = 2  # of how a compile is made and read here: a change makes every entry stale


def _cache_key(spec: CompileSpec, arch: str) -> str:
    cc = capability(arch)
    text = json.dumps([CACHE_VERSION, spec.key(), arch, ptxas.toolchain(cc), ptxas.for_arch(cc).path])
    return hashlib.sha256(text.encode()).hexdigest()


def compile_resources(spec: CompileSpec, arch: str, cache_dir: Path | None = None) -> Resources:
    """What `spec` uses compiled for `arch` (an error Resources where it cannot compile; check
    unsupported(arch) first). Cached in memory, and under cache_dir when given (what compiled:
    a failure may be this machine's, and is cheap to meet again)."""
    key = _cache_key(spec, arch)
    if key in _memo:
        return replace(_memo[key], seconds=0.0, cached=True)
    path = cache_dir / key[:2] / f"{key}.json" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            found = Resources(**{**json.loads(path.read_text()), "seconds": 0.0, "cached": True})
            _memo[key] = found
            return found
        except (OSError, ValueError, TypeError):
            pass  # unreadable (a concurrent writer, an older layout): compile again
    got = _compile(spec, arch)
    _memo[key] = got
    if path is not None and got.error is None:  # a failure is compiled again in the next run
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({k: v for k, v in got.to_dict().items() if k != "cached"}))
            os.replace(tmp, path)  # atomic: xdist workers share the directory
        except OSError:
            pass  # a cache that cannot be written costs time, not correctness
    return got
