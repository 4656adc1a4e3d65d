"""bench/bytecode.py: the bytecode of what the main job imports, compiled into a cache that a
process with PYTHONDONTWRITEBYTECODE set then reads instead of compiling the sources again,
lazily imported modules included; refused where it could not work."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[1]
BYTECODE = ROOT / "bench" / "bytecode.py"

pytestmark = pytest.mark.triton_no_gpu  # processes of their own, no kernel


@pytest.fixture
def package(tmp_path):
    """A package on its own path whose submodule `later` nothing imports at first, as torch
    imports torch._dynamo only when asked."""
    root = tmp_path / "src"
    (root / "pkgx").mkdir(parents=True)
    (root / "pkgx" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkgx" / "later.py").write_text("LATER = 2\n")
    return root


def _env(package, prefix, *, dont_write):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(package), PYTHONPYCACHEPREFIX=str(prefix))
    if dont_write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _source_compiled(package, prefix) -> bool:
    """Whether a process that writes no bytecode compiles pkgx.later from its source (python -v
    names the .pyc a module's code came from)."""
    done = subprocess.run([sys.executable, "-v", "-c", "import pkgx.later"], capture_output=True,
                          text=True, env=_env(package, prefix, dont_write=True), timeout=60)
    assert done.returncode == 0, done.stderr
    read = [ln for ln in done.stderr.splitlines() if "later" in ln and "code object from" in ln]
    return not any(".pyc" in ln for ln in read)


def test_a_compiled_cache_spares_later_processes_the_source_compile(package, tmp_path):
    prefix = tmp_path / "pyc"
    # negative control: with an empty cache the module is compiled from source, every process
    assert _source_compiled(package, prefix)
    done = subprocess.run([sys.executable, str(BYTECODE), "--modules", "pkgx"],
                          capture_output=True, text=True, timeout=240,
                          env=_env(package, prefix, dont_write=False))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "packages compiled into" in done.stdout
    # the module nothing imported was compiled too (its package's folder whole)
    assert list(prefix.rglob("later*.pyc"))
    assert not _source_compiled(package, prefix)


@pytest.mark.parametrize("drop, words", [
    ("PYTHONPYCACHEPREFIX", "PYTHONPYCACHEPREFIX is not set"),
    (None, "PYTHONDONTWRITEBYTECODE is set"),
    ("relative", "is relative"),
])
def test_it_refuses_where_it_could_not_work(package, tmp_path, drop, words):
    env = _env(package, tmp_path / "pyc", dont_write=drop is None)
    if drop == "relative":
        env["PYTHONPYCACHEPREFIX"] = "pyc"
    else:
        env.pop(drop or "", None)
    (tmp_path / "work").mkdir()  # where a relative prefix would land
    done = subprocess.run([sys.executable, str(BYTECODE), "--modules", "pkgx"],
                          capture_output=True, text=True, timeout=60, env=env,
                          cwd=tmp_path / "work")
    assert done.returncode == 2 and words in done.stderr
    assert not (tmp_path / "pyc").exists()
