"""Whether each process of this run compiles torch's and Triton's Python from source.

A Python that may not write bytecode (PYTHONDONTWRITEBYTECODE, `python -B`, or a bytecode folder
it cannot write) and whose packages ship no .pyc files compiles every module it imports from
source, in every process: seconds for torch alone. pytest-xdist pays it once per worker, before
its first test and again in its first tests (the modules imported lazily). Container images set
PYTHONDONTWRITEBYTECODE often; a pip install otherwise leaves .pyc files, and then nothing here
applies.

Asked without importing the packages: their specs say where their sources lie, and
importlib.util.cache_from_source says where this Python reads their bytecode (a
PYTHONPYCACHEPREFIX folder where one is set).
"""

from __future__ import annotations

import importlib.util
import os
import sys

PACKAGES = ("torch", "triton")
DOC = "docs/several-gpus.md, 'An install without compiled bytecode'"


def compiled_from_source(package: str) -> bool:
    """Whether a process started as this one compiles `package`'s __init__ from its source on
    every import: no bytecode where this Python reads it, and none may be written there."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        return False
    pyc = importlib.util.cache_from_source(origin)
    if os.path.exists(pyc):
        return False
    if sys.dont_write_bytecode:
        return True
    folder = os.path.dirname(pyc)
    while folder and not os.path.isdir(folder):  # the nearest folder that exists gets the rest
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return not os.access(folder, os.W_OK)


def hint() -> str | None:
    """One line for a run of several processes whose every process compiles torch's or Triton's
    Python from source (what it costs, what to set), or None."""
    slow = [p for p in PACKAGES if compiled_from_source(p)]
    if not slow:
        return None
    why = ("PYTHONDONTWRITEBYTECODE is set" if sys.dont_write_bytecode
           else "the folder of its bytecode cannot be written")
    return (f"every worker compiles {' and '.join(slow)} from source at its start ({why}, and "
            f"there is no compiled bytecode of {' or '.join(slow)}): give the run a bytecode "
            f"cache, PYTHONPYCACHEPREFIX=DIR with PYTHONDONTWRITEBYTECODE unset ({DOC})")
