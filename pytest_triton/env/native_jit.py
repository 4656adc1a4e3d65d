"""A kernel and triton.language as a GPU process has them, from a process that runs Triton's
interpreter: what compiling an interpreted launch for a GPU architecture needs.

Under TRITON_INTERPRET=1, @triton.jit makes an InterpretedFunction, and so it does for a
kernel's helpers and for Triton's own library (tl.sum, tl.cdiv ...). jit_of() builds the
JITFunction a GPU process would have, over a copy of the kernel's globals (and closure) with
each interpreted function, and each module of the user's that holds one, translated.
language_for_compile() puts triton.language back as Triton defines it for the length of a
compile, and leaves it as found after.
"""

from __future__ import annotations

import contextlib
import types

JIT_KWARGS = ("version", "do_not_specialize", "do_not_specialize_on_alignment", "debug",
              "noinline", "repr", "launch_metadata")
_SKIP_MODULES = ("triton", "torch", "numpy", "builtins")

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
    kwargs = {k: v for k, v in (getattr(kernel, "kwargs", None) or {}).items() if k in JIT_KWARGS}
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
def language_for_compile():
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
