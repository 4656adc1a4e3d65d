"""The package's layout holds: grouped by job, imports running one way, no cycles, small modules.

The import graph is read from the source (an AST walk over module-level and function-level
imports alike), so a cycle closed by an import inside a function counts as a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "pytest_triton"
NAME = PKG.name

# Lower layers never import higher ones: env <- correctness, perf, process <- diagnose, report,
# regress, judge. report and regress sit side by side: the run's document (report/summary) is
# written in regress's schema, and the gate saves that document.
# The top-level modules: options (and flags, how its optional values are written) and hookspec
# below everything, state above env (it holds the Runtime), fixtures and plugin (wiring) and
# __init__ (the public API) above everything.
LAYERS = {
    "options": 0, "flags": 0, "hookspec": 0,
    "env": 1,
    "state": 2,
    "correctness": 3, "perf": 3, "process": 3,
    "diagnose": 4, "report": 4, "regress": 4, "judge": 4,
    "fixtures": 5, "plugin": 5, "__init__": 5, "__main__": 5,
}
MAX_TOP_LEVEL = 8
MAX_LINES = 400
# Function-local imports are for import time only: of heavy third-party packages, or of our own
# modules that import them at their top (the line says so in a comment).
LAZY_OK = ("torch", "triton", "matplotlib", "pynvml", "numpy", "pytest_benchmark", "xdist")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG).with_suffix("").parts
        name = ".".join((NAME, *parts))
        found[name.removesuffix(".__init__")] = path
    return found


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        up = node.level - (1 if is_pkg else 0)
        base = ".".join(parts[: len(parts) - up] if up else parts)
        if node.module:
            base = f"{base}.{node.module}"
    return [base], [f"{base}.{a.name}" for a in node.names]


def _imports(modules: dict[str, Path]):
    """(importer, imported, line, local, source line) for every import of one of ours."""
    for name, path in modules.items():
        src = path.read_text()
        lines = src.splitlines()
        tree = ast.parse(src)
        local_lines = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        local_lines.add(node.lineno)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base, subs = _resolve(name, path.name == "__init__.py", node)
                # `from pkg import a`: the module pkg.a where it is one, else pkg itself
                targets = [t for t in subs if t in modules] or base
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            local = node.lineno in local_lines
            text = lines[node.lineno - 1]
            for t in targets:
                if t in modules and t != name and not (path.name == "__init__.py" and t == name):
                    yield name, t, node.lineno, local, text
            if local:
                yield name, None, node.lineno, local, (targets[0], text)


def _group(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _edges():
    modules = _modules()
    return modules, [e for e in _imports(modules) if e[1] is not None]


def test_no_import_cycles():
    modules, edges = _edges()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for a, b, *_ in edges:
        if not modules[a].name == "__init__.py" or _group(a) == "__init__":
            graph[a].add(b)
    # packages' own __init__ re-exports are not edges of the modules below them
    cycles, seen, stack = [], set(), []

    def visit(m, on_path):
        seen.add(m)
        stack.append(m)
        on_path.add(m)
        for n in sorted(graph[m]):
            if n in on_path:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in seen:
                visit(n, on_path)
        on_path.discard(m)
        stack.pop()

    for m in sorted(graph):
        if m not in seen:
            visit(m, set())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_imports_run_one_way_between_groups():
    modules, edges = _edges()
    wrong = []
    for a, b, line, _local, _text in edges:
        ga, gb = _group(a), _group(b)
        if gb == "__init__" or ga == gb:
            continue
        if LAYERS[gb] > LAYERS[ga]:
            wrong.append(f"{modules[a].relative_to(PKG.parent)}:{line}: {a} ({ga}) imports {b} ({gb})")
    assert not wrong, "imports against the layering " + " <- ".join(
        sorted(LAYERS, key=LAYERS.get)) + ":\n" + "\n".join(wrong)


def test_function_local_imports_are_for_import_time_only():
    modules = _modules()
    wrong = []
    for a, b, line, local, text in _imports(modules):
        if not local:
            continue
        if b is None:
            target, src = text
            if target.split(".")[0] in LAZY_OK or target.split(".")[0] not in (NAME,) and \
                    not target.startswith(NAME):
                continue
            if "import time" in src or "import time" in modules[a].read_text().splitlines()[line - 2]:
                continue
            wrong.append(f"{modules[a].relative_to(PKG.parent)}:{line}: {src.strip()}")
    assert not wrong, ("function-local imports of our own modules (allowed only to keep import "
                       "time down, with a comment saying 'import time'):\n" + "\n".join(sorted(set(wrong))))


def test_the_top_level_is_small_and_no_module_is_long():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top
    long = {str(p.relative_to(PKG.parent)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("group", sorted(g for g in LAYERS if (PKG / g).is_dir()))
def test_each_group_is_a_package_with_a_docstring(group):
    init = PKG / group / "__init__.py"
    assert init.is_file() and ast.get_docstring(ast.parse(init.read_text())), init


def test_how_it_is_built_draws_this_layout():
    page = (PKG.parent / "docs" / "how-it-is-built.md").read_text()
    drawing = page.split("```", 2)[1]
    assert len(drawing.strip().splitlines()) <= 12
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "__init__.py" and path.parent != PKG:
            continue
        name = path.stem if path.name != "__init__.py" else "__init__.py"
        where = path.parent.name + "/" if path.parent != PKG else ""
        assert name in drawing or f"{name}.py" in drawing, f"{where}{path.name} is not in the drawing"
    for group in (p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        assert f"{group}/" in drawing, group
