"""Whether each process of this run compiles torch's and Triton's Python from source.

A Python that may not write bytecode (PYTHONDONTWRITEBYTECODE, or a bytecode folder it cannot
write) and whose packages ship no .pyc files compiles every module it imports from source, in
every process: seconds for torch alone. pytest-xdist pays it once per worker, before its first
test and again in its first tests (the modules imported lazily). Container images set
PYTHONDONTWRITEBYTECODE often; a pip install otherwise leaves .pyc files, and then nothing here
applies.

Asked without importing the packages (their specs say where their sources lie), and of the
environment the workers inherit: PYTHONDONTWRITEBYTECODE and PYTHONPYCACHEPREFIX, not this
process's own `-B` or `-X pycache_prefix`, which xdist does not pass on to its workers.
"""

from __future__ import annotations

import importlib.util
import os
import sys

PACKAGES = ("torch", "triton")
DOC = "docs/several-gpus.md, 'An install without compiled bytecode'"


def bytecode_path(package: str, env=os.environ) -> str | None:
    """Where a process started with `env` reads the bytecode of `package`'s __init__ (its
    PYTHONPYCACHEPREFIX folder where one is set, else __pycache__ beside the source), or None
    for a package not installed or not made of Python source."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        return None
    head, tail = os.path.split(os.path.abspath(origin))
    name = f"{tail[:-3]}.{sys.implementation.cache_tag}.pyc"
    prefix = env.get("PYTHONPYCACHEPREFIX")
    if prefix:  # as importlib.util.cache_from_source mirrors the source's absolute path
        return os.path.join(os.path.abspath(prefix), head.lstrip(os.sep), name)
    return os.path.join(head, "__pycache__", name)


def unwritable(path: str, env=os.environ) -> str | None:
    """Why a process started with `env` cannot write the bytecode file `path`, or None."""
    if env.get("PYTHONDONTWRITEBYTECODE"):
        return "PYTHONDONTWRITEBYTECODE is set"
    folder = os.path.dirname(path)
    while not os.path.isdir(folder):  # the nearest folder that exists gets the rest
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None if os.access(folder, os.W_OK) else f"{folder} cannot be written"


def compiled_from_source(package: str, env=os.environ) -> str | None:
    """Why a process started with `env` compiles `package`'s __init__ from its source on every
    import (no bytecode where it reads it, and it may not write it there), or None."""
    path = bytecode_path(package, env)
    if path is None or os.path.exists(path):
        return None
    return unwritable(path, env)


def hint(env=os.environ) -> str | None:
    """One line for a run of several processes whose every process compiles torch's or Triton's
    Python from source (what it costs, what to set), or None."""
    why = {p: compiled_from_source(p, env) for p in PACKAGES}
    slow = [p for p in PACKAGES if why[p]]
    if not slow:
        return None
    return (f"every worker compiles {' and '.join(slow)} from source at its start "
            f"({why[slow[0]]}, and there is no compiled bytecode of {' or '.join(slow)}): give "
            f"the run a bytecode cache, PYTHONPYCACHEPREFIX=DIR with PYTHONDONTWRITEBYTECODE "
            f"unset ({DOC})")
