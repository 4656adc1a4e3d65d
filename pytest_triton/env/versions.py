"""The versions of torch and Triton, and how torch was built, read without importing either.

The report header names them in every run, and the device choice asks whether torch was built
for a GPU at all; importing torch for that would cost the second or two that the plugin avoids
at load. A package already imported answers itself; otherwise the literal assignments in its
source (triton/__init__.py, torch/version.py) are read, which is what the import would set.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys

_UNKNOWN = "unknown"


def _literals(package: str, filename: str) -> dict | None:
    """The module-level names assigned a literal in `filename` of the installed `package`,
    found without importing it; None when the package or the file is not there."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), filename)
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                found[t.id] = literal
    return found


def torch_build() -> dict | None:
    """torch.version's fields (__version__, cuda, hip, ...); None when they cannot be read."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        return {k: getattr(torch.version, k, None) for k in ("__version__", "cuda", "hip")}
    return _literals("torch", "version.py")


def torch_version() -> str:
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "__version__"):
        return str(torch.__version__)
    return str((torch_build() or {}).get("__version__", _UNKNOWN))


def torch_cuda() -> str | None:
    """The CUDA version torch was built with (torch.version.cuda): None for a CPU or ROCm build."""
    return (torch_build() or {}).get("cuda")


def triton_version() -> str:
    triton = sys.modules.get("triton")
    if triton is not None and hasattr(triton, "__version__"):
        return str(triton.__version__)
    found = _literals("triton", "__init__.py")
    if found and "__version__" in found:
        return str(found["__version__"])
    import triton  # import time: only where the source does not spell the version out

    return str(triton.__version__)
