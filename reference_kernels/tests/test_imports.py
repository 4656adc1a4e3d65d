"""Who may import what (issue 18), by an AST walk of the sources: a kernel module imports only
reference_kernels' private helper modules (`_checks`, `_rows`, ...), never a sibling kernel
module (conv2d may call matmul's public launcher); a bench script imports public names of public
modules only, and reads no `_` attribute of a kernel module. Negative controls prove the walk
finds each kind of violation."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
BENCH = PACKAGE.parent / "bench"
KERNEL_MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_"))
# (importer, imported): public names a kernel module may take from a sibling kernel module.
ALLOWED_SIBLINGS = {("conv2d", "matmul")}


def _imported_modules(node: ast.AST) -> list[tuple[str, list[str], str | None]]:
    """(reference_kernels module, names taken from it ([] for the module itself), the name it is
    bound to when it is the module) for one import statement; [] if it imports nothing of the
    package."""
    out = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "reference_kernels" and len(parts) > 1:
                out.append((parts[1], [], alias.asname))
    elif isinstance(node, ast.ImportFrom):
        parts = (node.module or "").split(".") if node.module else []
        if node.level == 1:  # within the package: from . import x, from .x import y
            parts = ["reference_kernels", *parts]
        elif node.level > 1:
            return out
        if not parts or parts[0] != "reference_kernels":
            return out
        if len(parts) == 1:  # from reference_kernels import x: x is a module
            out += [(a.name, [], a.asname or a.name) for a in node.names]
        else:
            out.append((parts[1], [a.name for a in node.names], None))
    return out


def module_aliases(source: str) -> dict[str, str]:
    """{local name: reference_kernels module} of the modules `source` imports as modules."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        for module, _, bound in _imported_modules(node):
            if bound:
                out[bound] = module
    return out


def violations(source: str, importer: str | None, others: dict[str, str] | None = None) -> list:
    """What `source` imports or reads that it may not: importer is the kernel module's name, or
    None for a bench script. others: the module aliases of the scripts it may import (a bench
    script reading sweep_compute's `mm` as `sc.mm`, or binding it: `mm = sc.mm`)."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        for module, names, _ in _imported_modules(node):
            line = f"line {node.lineno}"
            private = [n for n in names if n.startswith("_")]
            if importer is None:
                if module.startswith("_"):
                    found.append(f"{line}: imports the private module reference_kernels.{module}")
                elif private:
                    found.append(f"{line}: imports private {', '.join(private)} of {module}")
            elif not module.startswith("_") and module in KERNEL_MODULES and module != importer:
                if (importer, module) not in ALLOWED_SIBLINGS or not names:
                    found.append(f"{line}: imports the sibling kernel module {module}")
                elif private:
                    found.append(f"{line}: imports private {', '.join(private)} of {module}")
    aliases = module_aliases(source)
    others = others or {}
    for node in ast.walk(tree):  # mm = sc.mm; at, mm = sc.at, sc.mm
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) \
                and isinstance(node.value, ast.Tuple) else [(target, node.value)]
            for name, value in pairs:
                if isinstance(name, ast.Name) and isinstance(value, ast.Attribute) \
                        and value.attr in others:
                    aliases[name.id] = others[value.attr]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") \
                or node.attr.startswith("__"):
            continue
        value, module = node.value, None
        if isinstance(value, ast.Name):
            module = aliases.get(value.id)
        elif isinstance(value, ast.Attribute):  # sc.mm._x
            module = others.get(value.attr)
        if module is not None and not module.startswith("_") and module != importer:
            found.append(f"line {node.lineno}: reads {ast.unparse(node)}, a private name of "
                         f"{module}")
    return found


def _bench_aliases() -> dict[str, str]:
    out = {}
    for script in BENCH.glob("*.py"):
        out.update(module_aliases(script.read_text()))
    return out


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_kernel_modules_import_only_private_helpers(module):
    found = violations((PACKAGE / f"{module}.py").read_text(), module)
    assert not found, f"reference_kernels/{module}.py:\n  " + "\n  ".join(found)


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_bench_scripts_use_public_names(script):
    found = violations((BENCH / script).read_text(), None, _bench_aliases())
    assert not found, f"bench/{script}:\n  " + "\n  ".join(found)


# --- negative controls: the walk must see each kind of violation ---------------------------

# (importer, source)
KERNEL_VIOLATIONS = {
    "private_of_sibling": ("attention", "from .matmul import _grouped_tile\n"),
    "public_of_sibling": ("layernorm", "from .softmax import row_view\n"),
    "sibling_module": ("softmax", "from . import vector_add\n"),
    "absolute": ("attention", "from reference_kernels.matmul import matmul\n"),
    "attribute": ("conv2d", "from . import matmul as mm\nx = mm._sm_count\n"),
    "allowed_pair_but_private": ("conv2d", "from .matmul import matmul, _autotune_kwargs\n"),
}
BENCH_VIOLATIONS = {
    "private_name": "from reference_kernels.matmul import _splitk_space\n",
    "private_module": "from reference_kernels import _tuning\n",
    "private_module_import": "import reference_kernels._rows as rows\n",
    "attribute": "from reference_kernels import softmax\nsoftmax._softmax_kernel\n",
    "through_another_script": "import sweep_compute as sc\nmm = sc.mm\nmm._sm_count(0)\n",
    "chained": "import sweep_compute as sc\nsc.mm._resident(1)\n",
    "tuple_alias": "import sweep_compute as sc\nat, mm = sc.at, sc.mm\nmm._sm_count(0)\n",
}


@pytest.mark.parametrize("importer, source", KERNEL_VIOLATIONS.values(), ids=KERNEL_VIOLATIONS)
def test_control_kernel_module_violation_is_found(importer, source):
    assert violations(source, importer)


@pytest.mark.parametrize("source", BENCH_VIOLATIONS.values(), ids=BENCH_VIOLATIONS)
def test_control_bench_violation_is_found(source):
    assert violations(source, None, {"mm": "matmul"})


def test_allowed_imports_pass():
    assert not violations("from . import _tuning\nfrom ._rows import row_view\n"
                          "from .matmul import matmul, matmul_kernel_for\n_tuning._may_time\n",
                          "conv2d")
    assert not violations("from reference_kernels import matmul as mm\nmm.matmul_variant\n"
                          "from reference_kernels.tests import controls\nsc.mm.tma_available\n",
                          None, {"mm": "matmul"})
