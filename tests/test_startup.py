"""Loading the plugin is cheap: a run that needs no kernel imports neither torch nor Triton, and
adds little to pytest's own start-up; the saved-runs command line imports no torch either."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import pytest

from pytest_triton.env import runtime

from .regress._docs import H100, H200, report, run

# Where a GPU may be there, choosing the device asks torch (by design: nothing cheaper can tell),
# so a run that needs no kernel imports it too and starts as slowly as before.
NO_GPU_HERE = pytest.mark.skipif(not runtime.surely_no_gpu(),
                                 reason="a GPU may be on this machine: the device choice imports "
                                        "torch here, by design")

HEAVY = ("torch", "triton", "numpy")
REPORT_MODULES = f"""
import json, sys

def pytest_unconfigure(config):
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
    with open("modules.json", "w") as f:
        json.dump(heavy, f)
"""


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment of a fresh shell: the device is chosen as a user's run chooses it."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


@NO_GPU_HERE
def test_a_run_without_kernels_imports_neither_torch_nor_triton(pytester: pytest.Pytester, bare_env):
    pytester.makeconftest(REPORT_MODULES)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["pytest-triton: cpu under Triton's interpreter*; torch *, triton *"])
    assert json.loads((pytester.path / "modules.json").read_text()) == []


@NO_GPU_HERE
def test_a_conftest_importing_triton_gets_the_interpreter_and_its_fixes(pytester: pytest.Pytester,
                                                                       bare_env):
    pytester.makeconftest("""
        import triton
        from pytest_triton.env.interpreter import fixes

        INSTALLED = fixes.installed()
    """)
    pytester.makepyfile("""
        import os

        import conftest

        def test_fixes_were_installed_as_triton_was_imported():
            assert os.environ["TRITON_INTERPRET"] == "1"
            assert conftest.INSTALLED
    """)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def _cpu_seconds(args: list[str], cwd) -> float:
    """The CPU time (user and system) the command and the children it waited for took: unlike
    the wall time, it does not grow when other work shares the machine's cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@NO_GPU_HERE
def test_the_plugin_adds_little_to_pytest_start_up(pytester: pytest.Pytester, bare_env):
    pytester.makepyfile(test_no_kernels="def test_x(): pass")
    run = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_no_kernels.py"]
    # the least of a few runs each, taken in turns on the same machine: what the plugin adds,
    # less the noise of a busy machine
    without, with_plugin = [], []
    for _ in range(3):
        without.append(_cpu_seconds([*run, "-p", "no:triton"], pytester.path))
        with_plugin.append(_cpu_seconds(run, pytester.path))
    assert min(with_plugin) - min(without) < 0.3, \
        f"pytest {min(without):.2f} s of CPU, with pytest-triton {min(with_plugin):.2f} s"


CLI_MODULES = """
import json, runpy, sys
sys.argv = ["pytest_triton", *sys.argv[1:]]
try:
    runpy.run_module("pytest_triton", run_name="__main__")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton"))))
"""


@pytest.mark.parametrize("command", ["history", "compare", "merge", "upgrade"])
def test_the_saved_runs_command_line_imports_no_torch(tmp_path, command):
    saved = tmp_path / "runs"
    saved.mkdir()
    for name in ("main", "pr"):
        (saved / f"{name}.json").write_text(json.dumps(run(report(H100), name=name)))
    args = {"history": [saved], "compare": [H100, H200],
            "merge": ["-o", tmp_path / "merged.json", saved / "main.json"],
            "upgrade": [saved]}[command]
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CLI_MODULES, command, *map(str, args)],
                         capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], out.stderr
    # well under a second where it stays torch-free; a generous margin for a busy machine
    assert elapsed < 1.5, f"python -m pytest_triton {command} took {elapsed:.2f} s"
