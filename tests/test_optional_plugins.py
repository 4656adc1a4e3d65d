"""A test that drives an optional pytest plugin (pytest-timeout, pytest-xdist, pytest-benchmark,
pytest-reportlog) in an inner run says so (requires_plugin, tests/conftest.py), and skips naming
the plugin where it is missing, rather than erroring on an option the inner run does not know
(`ValueError: Pytest terminal summary report not found`, `unrecognized arguments: --timeout`)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What in a test's source shows that its inner run needs a plugin: an option, or an import.
OPTIONS = {"--timeout": "pytest-timeout", "-n": "pytest-xdist", "--max-worker-restart": "pytest-xdist",
           "--testrunuid": "pytest-xdist", "--dist": "pytest-xdist", "--report-log": "pytest-reportlog"}
MODULES = {"pytest_timeout": "pytest-timeout", "xdist": "pytest-xdist",
           "pytest_benchmark": "pytest-benchmark", "pytest_reportlog": "pytest-reportlog"}
PLUGINS = sorted(set(OPTIONS.values()) | set(MODULES.values()))


def _needed(node: ast.AST) -> set[str]:
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            flag = n.value.split("=", 1)[0]
            if flag in OPTIONS:
                found.add(OPTIONS[flag])
            elif flag.startswith("--benchmark-"):
                found.add("pytest-benchmark")
            elif n.value in MODULES:
                found.add(MODULES[n.value])
    if isinstance(node, ast.FunctionDef) and "benchmark" in [a.arg for a in node.args.args]:
        found.add("pytest-benchmark")
    return found


def _declared(nodes) -> set[str]:
    found = set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "requires_plugin":
                found |= {a.value for a in n.args if isinstance(a, ast.Constant)}
    return found


def _test_files():
    return sorted(p for d in ("tests", "reference_kernels") for p in (ROOT / d).rglob("test_*.py")
                  if "thirdparty" not in p.parts and p.name != Path(__file__).name)  # names them


def _drivers() -> dict[str, tuple[set[str], set[str]]]:
    """{nodeid-ish name: (plugins its source needs, plugins it declares)} of every test function
    whose source needs one."""
    out = {}
    for path in _test_files():
        tree = ast.parse(path.read_text())
        module_marks = [n.value for n in tree.body if isinstance(n, ast.Assign)
                        and any(getattr(t, "id", None) == "pytestmark" for t in n.targets)]
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
                needed = _needed(fn)
                if needed:
                    out[f"{path.relative_to(ROOT)}::{fn.name}"] = (
                        needed, _declared(fn.decorator_list + module_marks))
    return out


def test_every_test_that_drives_an_optional_plugin_declares_it():
    drivers = _drivers()
    assert len(drivers) >= 10, sorted(drivers)  # the scan finds them (it found 14 when written)
    missing = {name: sorted(needed - declared) for name, (needed, declared) in drivers.items()
               if needed - declared}
    assert not missing, ("mark these with @pytest.mark.requires_plugin(...) (tests/conftest.py): "
                         f"{missing}")


def test_the_scan_sees_an_undeclared_plugin():
    # negative control of the scan above: a test passing --timeout without the marker
    tree = ast.parse("def test_x(pytester):\n    pytester.runpytest('--timeout=2', '-n', '2')\n")
    fn = tree.body[0]
    assert _needed(fn) == {"pytest-timeout", "pytest-xdist"} and _declared(fn.decorator_list) == set()


@pytest.mark.triton_no_gpu  # every test of the inner run skips at its setup
def test_without_their_plugins_they_skip_naming_the_plugin():
    # -p no:NAME stands in for a plugin that is not installed: the inner run, in a process of its
    # own from the repository's root, has none of them loaded.
    files = sorted({name.split("::")[0] for name in _drivers()})
    disable = [arg for name in ("timeout", "xdist", "benchmark", "reportlog", "pytest_reportlog")
               for arg in ("-p", f"no:{name}")]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          "-p", "no:randomly", "-m", "requires_plugin", *disable, *files],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == pytest.ExitCode.OK, text
    assert " error" not in text and " failed" not in text and " passed" not in text, text
    skipped = [line for line in text.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) >= 10, text
    for line in skipped:
        assert any(f"needs {plugin}: {plugin} is" in line for plugin in PLUGINS), line
    for plugin in ("pytest-timeout", "pytest-xdist", "pytest-benchmark"):
        assert any(f"needs {plugin}: {plugin} is installed but not loaded in this run" in line
                   for line in skipped), (plugin, text)
