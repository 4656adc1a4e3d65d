"""Who may import what (issues 18 and 28), by an AST walk of the sources: a kernel module imports
only reference_kernels' private helper modules (`_checks`, `_rows`, ...), never a sibling kernel
module (conv2d may call matmul's public launcher); a bench script imports public names of public
modules only, and reads no `_` attribute of a kernel module; and reference_kernels and bench use
pytest_triton only through the names of `pytest_triton.__all__`, as any user of the plugin does.
Negative controls prove the walk finds each kind of violation."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_triton

PACKAGE = Path(__file__).resolve().parents[1]
BENCH = PACKAGE.parent / "bench"
PUBLIC = set(pytest_triton.__all__)
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


# --- pytest_triton's public API: only the names of pytest_triton.__all__ --------------------------

def plugin_uses(source: str) -> list[str]:
    """What `source` takes from pytest_triton that is not in pytest_triton.__all__: an import of
    one of its modules, a name not in __all__, or an attribute of the package outside __all__."""
    tree = ast.parse(source)
    found, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "pytest_triton":
            if node.module != "pytest_triton":
                found.append(f"line {node.lineno}: imports from the module {node.module}")
                continue
            for alias in node.names:
                if alias.name not in PUBLIC:
                    found.append(f"line {node.lineno}: imports {alias.name}, not in "
                                 "pytest_triton.__all__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "pytest_triton":
                    continue
                if alias.name != "pytest_triton":
                    found.append(f"line {node.lineno}: imports the module {alias.name}")
                else:
                    bound.add(alias.asname or "pytest_triton")
    for node in ast.walk(tree):  # pytest_triton.perf.timing, pt.Settings
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in bound and node.attr not in PUBLIC \
                and not node.attr.startswith("__"):
            found.append(f"line {node.lineno}: reads {ast.unparse(node)}, not in "
                         "pytest_triton.__all__")
    return found


PLUGIN_USERS = sorted([*PACKAGE.rglob("*.py"),
                       *(p for p in BENCH.rglob("*.py") if "runs" not in p.relative_to(BENCH).parts)])


@pytest.mark.parametrize("path", PLUGIN_USERS, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_reference_kernels_and_bench_use_only_the_public_api(path):
    found = plugin_uses(path.read_text())
    assert not found, f"{path.relative_to(PACKAGE.parent)}:\n  " + "\n  ".join(found)


PLUGIN_VIOLATIONS = {
    "submodule_name": "from pytest_triton.perf.timing import measure\n",
    "submodule": "from pytest_triton.perf import timing\n",
    "import_submodule": "import pytest_triton.report.plot\n",
    "private_name": "from pytest_triton import state\n",
    "function_local": "def f():\n    from pytest_triton.perf.calibrate import measure_ceilings\n",
    "attribute": "import pytest_triton\npytest_triton.perf.timing.measure\n",
    "aliased_attribute": "import pytest_triton as pt\npt.plugin\n",
}


@pytest.mark.parametrize("source", PLUGIN_VIOLATIONS.values(), ids=PLUGIN_VIOLATIONS)
def test_control_plugin_api_violation_is_found(source):
    assert plugin_uses(source)


def test_control_public_names_pass():
    assert not plugin_uses("from pytest_triton import assert_close, do_bench, interpreting\n"
                           "import pytest_triton as pt\npt.TimingSettings(max_time=1.0)\n")
