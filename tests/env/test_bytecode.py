"""env/bytecode.py: whether every process compiles a package from source (no bytecode where a
process started with this environment reads it, none may be written), asked without importing
the package; and the line the xdist summary adds for it."""

import importlib.util
import os
import py_compile

import pytest

from pytest_triton.env import bytecode
from pytest_triton.report import busy


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package `slowpkg` on sys.path, never imported; its source file."""
    (tmp_path / "src" / "slowpkg").mkdir(parents=True)
    init = tmp_path / "src" / "slowpkg" / "__init__.py"
    init.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    importlib.invalidate_caches()
    return init


def _env(tmp_path, dont_write):
    env = {"PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")}
    if dont_write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_no_bytecode_and_none_written_is_compiled_from_source(package, tmp_path):
    why = bytecode.compiled_from_source("slowpkg", _env(tmp_path, dont_write=True))
    assert why == "PYTHONDONTWRITEBYTECODE is set"
    assert "slowpkg" not in __import__("sys").modules  # asked without importing it


def test_the_path_is_where_python_reads_it(package, tmp_path, monkeypatch):
    """The same file importlib names for a process with that prefix, and __pycache__ without."""
    monkeypatch.setattr("sys.pycache_prefix", str(tmp_path / "pyc"))
    assert bytecode.bytecode_path("slowpkg", _env(tmp_path, False)) == \
        importlib.util.cache_from_source(str(package))
    monkeypatch.setattr("sys.pycache_prefix", None)
    assert bytecode.bytecode_path("slowpkg", {}) == importlib.util.cache_from_source(str(package))


def test_bytecode_where_a_worker_reads_it_is_used(package, tmp_path):
    env = _env(tmp_path, dont_write=True)
    py_compile.compile(str(package), cfile=bytecode.bytecode_path("slowpkg", env))
    assert bytecode.compiled_from_source("slowpkg", env) is None


def test_bytecode_written_by_the_first_process_spares_the_others(package, tmp_path):
    assert bytecode.compiled_from_source("slowpkg", _env(tmp_path, dont_write=False)) is None


def test_a_folder_that_cannot_be_written_compiles_every_time(package, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # root may write anywhere
    why = bytecode.compiled_from_source("slowpkg", _env(tmp_path, dont_write=False))
    assert why == f"{tmp_path} cannot be written"  # the nearest folder that exists


def test_a_package_not_installed_is_not_named(tmp_path):
    assert bytecode.compiled_from_source("no_such_package_here", _env(tmp_path, True)) is None


def test_the_hint_names_the_package_and_what_to_set(monkeypatch):
    monkeypatch.setattr(bytecode, "PACKAGES", ("slowpkg", "fastpkg"))
    monkeypatch.setattr(bytecode, "compiled_from_source",
                        lambda p, env: "PYTHONDONTWRITEBYTECODE is set" if p == "slowpkg" else None)
    line = bytecode.hint({})
    assert "compiles slowpkg from source" in line and "PYTHONDONTWRITEBYTECODE is set" in line
    assert "PYTHONPYCACHEPREFIX=DIR" in line and "fastpkg" not in line
    monkeypatch.setattr(bytecode, "compiled_from_source", lambda p, env: None)
    assert bytecode.hint({}) is None


SUITE = "def test_a(): pass\ndef test_b(): pass\n"


@pytest.mark.requires_plugin("pytest-xdist")
@pytest.mark.parametrize("dont_write", [True, False])
def test_the_xdist_summary_says_when_every_worker_compiles_torch(pytester, monkeypatch, tmp_path,
                                                                  dont_write):
    """An empty bytecode cache that may not be written: the workers compile torch from source,
    and the summary says so; the same cache that may be written: no such line."""
    pytest.importorskip("torch")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "empty-pyc"))
    if dont_write:
        monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    else:
        monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert busy.TITLE in out
    assert ("every worker compiles torch" in out) == dont_write, out
