"""What every interpreter fix shares: the interpreter's modules (imported late, so that importing
the plugin imports no Triton), undo records, and whether the interpreter is asked for."""

from __future__ import annotations

import os
from collections.abc import Callable

MISSING = object()
INTERPRET_ENV = "TRITON_INTERPRET"


def interpreting() -> bool:
    """True when Triton kernels in this process run under the interpreter: TRITON_INTERPRET asks
    for it (read as Triton reads it)."""
    return os.environ.get(INTERPRET_ENV, "0").strip().lower() in ("1", "true", "on", "yes")


def modules():
    """Triton's interpreter and language modules, imported only when a fix is probed or applied,
    so that importing this module imports no Triton (the plugin decides on the interpreter first)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as ti

    return np, tl, ti


# --------------------------------------------------------------------------------------------
# Undo records


class Patches:
    """Attribute and dict-entry replacements, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set_attr(self, obj, name: str, value) -> None:
        # vars(): a class's own entry, not an inherited one, so that undo deletes what was added
        old = vars(obj).get(name, MISSING)
        setattr(obj, name, value)

        def undo():
            if old is MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)

        self._undo.append(undo)

    def set_item(self, mapping: dict, key, value) -> None:
        old = mapping.get(key, MISSING)
        mapping[key] = value

        def undo():
            if old is MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = old

        self._undo.append(undo)

    def on_undo(self, fn: Callable[[], None]) -> None:
        self._undo.append(fn)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


def clear_rewritten(ti) -> None:
    # The interpreter caches each kernel's rewritten source; a change to the rewriting must reach
    # kernels that already ran.
    cache = getattr(getattr(ti, "InterpretedFunction", None), "rewritten_fn", None)
    if isinstance(cache, dict):
        cache.clear()


def hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def foreign_builtin(tl, member) -> bool:
    """A @builtin defined outside triton.language's core modules (which the interpreter patches
    itself): a library's @core.extern function."""
    if not callable(member) or not tl.core.is_builtin(member) or hasattr(member, "_pytest_triton_original"):
        return False
    module = getattr(member, "__module__", "") or ""
    return not (module.startswith("triton.language") and not module.startswith("triton.language.extra"))


# --------------------------------------------------------------------------------------------
# autotune_one_config: a multi-config @triton.autotune runs one config under the interpreter
