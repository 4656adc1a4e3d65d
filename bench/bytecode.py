"""Compile the bytecode of every package the main job imports into PYTHONPYCACHEPREFIX, before
anything is timed (not a test; the first thing bench/final_run.sh does).

    PYTHONPYCACHEPREFIX=DIR python bench/bytecode.py [--modules torch,triton,...]

Why: a Python image built with PYTHONDONTWRITEBYTECODE=1 and no .pyc files beside its sources
(the lent GPU machines' is one) compiles every module it imports from source, in every process,
every time: torch, Triton, numpy, pytest. A pytest process of the main job then spends seconds on
it before its first test and again in its first tests (the modules torch and Triton import
lazily). Under pytest-xdist every worker pays it, so it also distorts a scaling measurement: the
one-GPU run pays it once, N workers N times. A pip install leaves .pyc files, so a user's machine
pays none of this; this script makes the lent machine start as such a machine does.

It imports the main job's modules and pytest's plugins (or the --modules given) with
PYTHONDONTWRITEBYTECODE unset, so their bytecode is written, then compiles, with every core, the
whole folder of each top-level package they loaded from outside the standard library, so the
modules imported lazily later are compiled too. Every process that has PYTHONPYCACHEPREFIX set to
the same folder reads that bytecode. Prints what it compiled and how long it took.
"""

from __future__ import annotations

import argparse
import compileall
import importlib
import importlib.metadata
import os
import sys
import sysconfig
import time
from pathlib import Path

# What a pytest run of the main job imports (its plugins and the bundled kernels and tests among
# them); their top-level packages are compiled whole.
MAIN_JOB = ("torch", "triton", "numpy", "pytest", "_pytest", "pluggy", "xdist", "execnet",
            "pytest_triton.plugin", "reference_kernels.tests.test_compute_perf",
            "reference_kernels.tests.test_memory_perf")


def package_dirs(modules: dict) -> list[Path]:
    """The folder of each top-level package (or the file of each top-level module) that the
    loaded `modules` came from, outside the standard library (its site-packages aside)."""
    stdlib = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")}
    found: set[Path] = set()
    for name, module in list(modules.items()):
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py") or "." in name:
            continue
        # compiled at the path the import used: the cache mirrors that path, not the one
        # symlinks resolve to (a venv's lib64 -> lib)
        path, real = Path(os.path.abspath(path)), Path(path).resolve()
        if any(real.is_relative_to(s) and not real.is_relative_to(s / "site-packages")
               for s in stdlib):
            continue
        found.add(path.parent if path.name == "__init__.py" else path)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modules", help="comma-separated modules to import; their top-level "
                   "packages are compiled (default: the main job's, and pytest's plugins)")
    args = p.parse_args(argv)
    if not sys.pycache_prefix:
        print("bytecode: PYTHONPYCACHEPREFIX is not set: nothing compiled", file=sys.stderr)
        return 2
    if not os.path.isabs(sys.pycache_prefix):
        print(f"bytecode: PYTHONPYCACHEPREFIX={sys.pycache_prefix} is relative: each process "
              "would look for it under its own working folder; give an absolute path",
              file=sys.stderr)
        return 2
    if sys.dont_write_bytecode:
        print("bytecode: PYTHONDONTWRITEBYTECODE is set: unset it so the imports write theirs",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    missing = []
    if args.modules:
        names = args.modules.split(",")
    else:  # and every plugin pytest loads on its own (its "pytest11" entry points:
        # pytest-benchmark, hypothesis, pytest-timeout, where installed)
        names = [*MAIN_JOB, *(ep.value.split(":")[0]
                              for ep in importlib.metadata.entry_points(group="pytest11"))]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{name} ({exc})")
    dirs = package_dirs(sys.modules)
    for d in dirs:  # a file that does not compile (torch ships some for newer Pythons) is left
        if d.is_dir():
            compileall.compile_dir(d, quiet=2, workers=0)
        else:
            compileall.compile_file(d, quiet=2)
    print(f"bytecode: {len(dirs)} packages compiled into {sys.pycache_prefix} in "
          f"{time.perf_counter() - t0:.1f} s" + (f"; not importable: {', '.join(missing)}"
                                                  if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
