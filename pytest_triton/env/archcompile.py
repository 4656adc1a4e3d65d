"""A Triton launch compiled for a GPU architecture this machine may not have, and what the
compiled kernel uses there: registers per thread, spilled bytes per thread, shared memory per
program.

The nvidia backend compiles for any GPUTarget without a GPU: the ptxas Triton uses (its wheel's,
or TRITON_PTXAS_PATH / TRITON_PTXAS_BLACKWELL_PATH) writes the cubin, and cuobjdump reads the
cubin's resource usage: REG (registers per thread) and STACK (the local memory each thread
reserves, which the driver reports as CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES and Triton's n_spills
counts in 4-byte words). Shared memory is the compiled kernel's metadata.shared (what its
launcher asks for) plus any static shared memory the cubin declares.

A launch is a CompileSpec: the JITFunction and the signature, constexprs and specialisation
attributes Triton's own binder derives from the launch's arguments (so the compile is the one a
GPU launch gets: 16-byte aligned pointers, integers divisible by 16), and the launch's options
(num_warps, num_stages, maxnreg ...). Under Triton's interpreter a kernel is an
InterpretedFunction whose globals hold interpreted helpers: jit_of() builds the JITFunction a GPU
process would have, over a copy of its globals with each interpreted function translated.

Results are kept in memory and on disk per (kernel source hash, signature, constexprs,
attributes, options, architecture, Triton and ptxas versions): a suite compiles each once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
import types
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .device import arch_limits

# Launch options a CompileSpec carries (the rest of the backend's options are its defaults).
SPEC_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug")
_JIT_KWARGS = ("version", "do_not_specialize", "do_not_specialize_on_alignment", "debug",
               "noinline", "repr", "launch_metadata")
_SKIP_MODULES = ("triton", "torch", "numpy", "builtins")


def capability(arch: str) -> int:
    """90 for "sm_90" (UnknownArch for an architecture not in the limits table)."""
    cc = arch_limits(arch).cc
    return cc[0] * 10 + cc[1]


# --- interpreted kernels as the JITFunctions a GPU process would have ---------------------------

# id(raw function or module) -> (it, its translation): holding it keeps its id from being reused
_translated: dict[int, tuple] = {}


def _interpreted_cls():
    try:
        from triton.runtime.interpreter import InterpretedFunction  # import time: triton

        return InterpretedFunction
    except ImportError:  # no interpreter in this Triton: nothing is interpreted
        return None


def _translate(value, interpreted):
    if interpreted is not None and isinstance(value, interpreted):
        return _jit_of_interpreted(value)
    if type(value) is types.ModuleType and not value.__name__.startswith(_SKIP_MODULES):
        seen = _translated.get(id(value))
        if seen is not None and seen[0] is value:
            return seen[1]
        members = vars(value)
        if interpreted is None or not any(isinstance(v, interpreted) for v in members.values()):
            _translated[id(value)] = (value, value)
            return value
        proxy = types.ModuleType(value.__name__)
        _translated[id(value)] = (value, proxy)  # first: a module that reaches itself ends here
        proxy.__dict__.update({k: _translate(v, interpreted) for k, v in members.items()})
        return proxy
    return value


def _jit_of_interpreted(kernel):
    from triton.runtime.jit import JITFunction  # import time: triton

    fn = kernel.fn
    seen = _translated.get(id(fn))
    if seen is not None and seen[0] is fn:
        return seen[1]
    interpreted = _interpreted_cls()
    scope: dict = {}
    closure = None
    if fn.__closure__:
        closure = tuple(types.CellType(_translate(c.cell_contents, interpreted))
                        for c in fn.__closure__)
    clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, closure)
    for attr in ("__kwdefaults__", "__annotations__", "__qualname__", "__module__", "__doc__"):
        setattr(clone, attr, getattr(fn, attr))
    kwargs = {k: v for k, v in (getattr(kernel, "kwargs", None) or {}).items() if k in _JIT_KWARGS}
    jit = JITFunction(clone, **kwargs)
    _translated[id(fn)] = (fn, jit)  # before its globals: a kernel that calls itself finds it
    scope.update({k: _translate(v, interpreted) for k, v in fn.__globals__.items()})
    return jit


def jit_of(kernel):
    """The JITFunction behind `kernel`: itself, the one an InterpretedFunction stands for, or
    the function an Autotuner or Heuristics wraps."""
    from triton.runtime.jit import JITFunction  # import time: triton

    interpreted = _interpreted_cls()
    for _ in range(10):
        if isinstance(kernel, JITFunction):
            return kernel
        if interpreted is not None and isinstance(kernel, interpreted):
            return _jit_of_interpreted(kernel)
        kernel = getattr(kernel, "fn", None)
    raise TypeError("not a Triton kernel: no @triton.jit function behind it")


# --- a launch, as the compiler sees it ----------------------------------------------------------

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


def _ptxas(cc: int):
    from triton.backends.nvidia.compiler import get_ptxas  # import time: triton

    return get_ptxas(cc)


@functools.cache
def _ptxas_archs(path: str) -> frozenset:
    text = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60).stdout
    return frozenset(re.findall(r"'(sm_\d+[af]?)'", text))


def unsupported(arch: str) -> str | None:
    """Why `arch` cannot be compiled for here (the ptxas Triton would use does not know it),
    or None."""
    cc = capability(arch)
    try:
        tool = _ptxas(cc)
    except Exception as exc:  # noqa: BLE001 - no ptxas at all: say so
        return f"no ptxas for {arch}: {type(exc).__name__}: {exc}"
    if tool is None:
        return f"no ptxas for {arch} (set TRITON_PTXAS_PATH)"
    wanted = f"sm_{cc}a" if cc >= 90 else f"sm_{cc}"  # Triton compiles sm_90 and later as "a"
    try:
        archs = _ptxas_archs(tool.path)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"ptxas {tool.path} did not run: {exc}"
    if wanted not in archs:
        return f"ptxas {tool.version} ({tool.path}) cannot compile for {arch}"
    return None


def _toolchain(cc: int) -> str:
    import triton  # import time: triton

    tool = _ptxas(cc)
    return f"ptxas {tool.version}, Triton {triton.__version__}"


def _cuobjdump_usage(cubin: bytes, name: str) -> dict:
    from triton import knobs  # import time: triton

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", f.name],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    block = text.split(f"Function {name}:", 1)[-1]
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", block)}


@contextlib.contextmanager
def _captured_output():
    """The compiler's own output (MLIR diagnostics on fd 2, a failed ptxas's dump on stdout),
    kept out of the test's output and returned for the error message."""
    out: list[str] = []
    with tempfile.TemporaryFile(mode="w+") as sink:
        saved = os.dup(1), os.dup(2)
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            out.append(sink.read())


def _message(exc: BaseException, output: str) -> str:
    text = str(exc).strip() or type(exc).__name__
    notes = [ln.strip() for ln in output.splitlines() if "error" in ln.lower()]
    notes = [ln for ln in notes if ln not in text][:5]
    return "\n".join([f"{type(exc).__name__}: {text}", *notes])


_INTERPRETER = "triton.runtime.interpreter"


def _from_interpreter(value) -> bool:
    fn = getattr(value, "func", value)  # a functools.partial of one of its functions
    return getattr(fn, "__module__", None) == _INTERPRETER


def _unpatched(value, name: str, namespaces: tuple):
    for _ in range(8):
        if not _from_interpreter(value):
            return value
        member = (getattr(value, "__kwdefaults__", None) or {}).get("member")
        if member is None:
            break
        value = member  # the interpreter wraps a builtin with its original as `member`
    for ns in namespaces:  # a replacement: the name where it is still Triton's own
        other = vars(ns).get(name)
        if other is not None and not _from_interpreter(other):
            return other
    return value


def _member_of(value, interpreted):
    """The interpreted function a tensor member wrapper forwards to (core._tensor_member_fn
    wraps what is not a JITFunction), or None."""
    for cell in getattr(value, "__closure__", None) or ():
        try:
            if isinstance(cell.cell_contents, interpreted):
                return cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return None


@contextlib.contextmanager
def _language_for_compile():
    """triton.language as a GPU process has it, for the compile; left as found after.

    - The interpreter patches its builtins for each launch and restores them after, but a
      @triton.jit helper called inside a kernel (tl.sum is one) patches them again and never
      restores (InterpretedFunction.__call__, 3.6 and 3.9): triton.language.core would build
      the IR with the interpreter's semantic. Each such name is put back.
    - Its own @triton.jit functions (tl.sum, tl.cdiv, tl.rand ..., and the tensor members that
      forward to them) are interpreted functions: each is its JITFunction for the compile."""
    import sys

    import triton.language as tl  # import time: triton

    interpreted = _interpreted_cls()
    namespaces = (tl, tl.core, tl.math)
    changed = []

    def put(obj, name, value, new) -> None:
        if new is not value:
            changed.append((obj, name, value))
            setattr(obj, name, new)

    for ns in namespaces:
        for name, value in list(vars(ns).items()):
            put(ns, name, value, _unpatched(value, name, namespaces))
    if interpreted is not None:
        for module_name, module in list(sys.modules.items()):
            if module is not None and module_name.startswith("triton.language"):
                for name, value in list(vars(module).items()):
                    if isinstance(value, interpreted):
                        put(module, name, value, _jit_of_interpreted(value))
        for name, value in list(vars(tl.core.tensor).items()):
            member = _member_of(value, interpreted) if callable(value) else None
            if member is not None:
                put(tl.core.tensor, name, value, _jit_of_interpreted(member))
    try:
        yield
    finally:
        for obj, name, value in reversed(changed):
            setattr(obj, name, value)


def _compile(spec: CompileSpec, arch: str) -> Resources:
    import sys

    import triton  # import time: triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cc = capability(arch)
    t0 = time.perf_counter()
    source = _toolchain(cc)
    try:
        with _captured_output() as output, _quiet(), _language_for_compile():
            sys.stdout.flush()
            compiled = triton.compile(ASTSource(spec.fn, spec.signature, spec.constexprs, spec.attrs),
                                      target=GPUTarget("cuda", cc, 32), options=dict(spec.options))
            sys.stdout.flush()
    except Exception as exc:  # noqa: BLE001 - the compiler's own error is the verdict
        return Resources(arch=arch, source=source, error=_message(exc, "".join(output)),
                         seconds=time.perf_counter() - t0)
    md = compiled.metadata
    usage = _cuobjdump_usage(compiled.asm["cubin"], md.name)
    return Resources(arch=arch, n_regs=usage.get("REG"), spill_bytes=usage.get("STACK"),
                     shared=int(md.shared or 0) + usage.get("SHARED", 0), num_warps=md.num_warps,
                     source=source, seconds=time.perf_counter() - t0)


_memo: dict[str, Resources] = {}
CACHE_VERSION = 1  # of how a compile is made and read here: a change makes every entry stale


def _cache_key(spec: CompileSpec, arch: str) -> str:
    cc = capability(arch)
    text = json.dumps([CACHE_VERSION, spec.key(), arch, _toolchain(cc), _ptxas(cc).path])
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
