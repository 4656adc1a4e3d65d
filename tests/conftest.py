import importlib.metadata
import os

import pytest

from pytest_triton.env import role


def _bytecode_for_inner_runs() -> None:
    """Let the Python processes this suite starts keep their bytecode, where the environment
    forbids it (PYTHONDONTWRITEBYTECODE, as many CI images set).

    The suite starts several hundred processes: pytester's subprocess runs, xdist workers, the
    supervised children of interpreted runs, bench scripts. Without bytecode each compiles the
    plugin's modules from source and pytest rewrites the test modules again, a few tenths of a
    second a process. Unset here, at conftest import (before xdist starts its workers), every
    process started later reads the bytecode an install left beside the sources (pip compiles
    it) and writes what is missing there (the checkout's __pycache__ folders, ignored by git).

    No PYTHONPYCACHEPREFIX is set: a process with one reads bytecode only from that folder, so
    on a fresh checkout and virtual environment every worker and inner run compiled torch and
    Triton from source until the folder filled, seconds each. One given by the environment
    (bench/final_run.sh sets one, for an image whose packages ship no bytecode:
    docs/several-gpus.md) is kept. Only this suite's own environment changes: tests that study
    the bytecode settings set theirs explicitly."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_bytecode_for_inner_runs()


def _import_what_inner_runs_must_not(config) -> None:
    """torch imports torch.distributed.tensor lazily, at the first torch.testing.assert_close.
    Were that first import inside an in-process pytester run, pytester would drop the module from
    sys.modules afterwards, and importing it again fails (RuntimeError: Only a single
    TORCH_LIBRARY can be used to register the namespace c10d_functional): in one process (python
    -m pytest, as .ci/run runs it) tests/diagnose's inner runs made every later
    torch.testing.assert_close fail. Imported in the outermost run, it stays.
    torch._inductor likewise (its test_operators module registers the _inductor_test library):
    torch.profiler and torch._dynamo import it at their first use, which on a GPU machine fell
    inside an inner run, and tests/diagnose's profiler_imported fixture then failed to import it.

    Not on pytest-xdist's controller, which runs no test: there the imports (seconds of CPU)
    would only slow the workers starting beside it."""
    if role.is_controller(config):
        return
    try:
        import torch.distributed.tensor  # noqa: F401
    except (ImportError, RuntimeError):  # a torch built without distributed support
        pass
    import torch._inductor  # noqa: F401


REQUIRES_PLUGIN_HELP = (
    "requires_plugin(dist, ...): the test drives the optional pytest plugin of each distribution "
    "named (pytest-timeout, pytest-xdist, pytest-benchmark, pytest-reportlog), in an inner run: it "
    "skips, naming the plugin, where that plugin is not installed or not loaded in this run "
    "(-p no:NAME, PYTEST_DISABLE_PLUGIN_AUTOLOAD)")


def pytest_configure(config):
    config.addinivalue_line("markers", REQUIRES_PLUGIN_HELP)
    _import_what_inner_runs_must_not(config)


def plugin_missing(config, dist: str) -> str | None:
    """Why the pytest plugin of distribution `dist` is not there for this run's tests, or None."""
    try:
        found = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return f"{dist} is not installed"
    names = [ep.name for ep in found.entry_points if ep.group == "pytest11"]
    off = [n for n in names if not config.pluginmanager.has_plugin(n)]
    if off:
        return f"{dist} is installed but not loaded in this run (-p no:{off[0]}, or plugin autoload off)"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test marked requires_plugin skips, naming the plugin, where the plugin is missing: an inner
    run would stop at its option (`--timeout`: unrecognized arguments) and fail the test."""
    for mark in item.iter_markers("requires_plugin"):
        for dist in mark.args:
            why = plugin_missing(item.config, dist)
            if why is not None:  # reported at the test's own line, one line per test under -rs
                raise pytest.skip.Exception(f"needs {dist}: {why}", _use_item_location=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """A test whose inner run is interpreted uses no GPU: on a GPU machine under xdist it takes
    no GPU lock (triton_no_gpu), and runs while the tests that hold the GPU alone do. Before the
    plugin orders the tests by their lock (tryfirst)."""
    for item in items:
        if {"run_interpreted", "run_interpreted_fresh"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.triton_no_gpu)


@pytest.fixture(autouse=True)
def _calibration_cache(tmp_path, monkeypatch):
    """Measured ceilings are cached on disk per device fingerprint: each test gets its own cache,
    so no test sees another's (nor the user's ~/.cache)."""
    monkeypatch.setenv("PYTEST_TRITON_CACHE_DIR", str(tmp_path / "pytest-triton-cache"))


@pytest.fixture(autouse=True)
def _not_on_ci(monkeypatch):
    """Inner pytest runs print the same whether or not the outer run is on a CI system: pytest
    prints the short test summary untruncated when CI or BUILD_NUMBER is set, repeating each
    failure's message there (seen on the project's CI), which tests that count a message in the
    output would take for a cascade."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)


@pytest.fixture
def run_interpreted(pytester, monkeypatch):
    """Run pytester in-process with --triton-interpret, on a GPU machine too. The inner run sets
    TRITON_INTERPRET=1 in this process; monkeypatch restores the outer value afterwards. (setenv,
    not delenv: delenv of an absent variable records nothing, and the inner run's value would
    leak into the rest of the session, turning launchers' interpreter checks on over CUDA.)"""
    import os

    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))

    def run(*args):
        return pytester.runpytest("--triton-interpret", *args)

    return run


@pytest.fixture
def run_interpreted_fresh(request, pytester, monkeypatch, run_interpreted):
    """run_interpreted for an inner test that imports kernels from this process's own modules
    (tests.correctness.*). Where this process interprets (no GPU), as run_interpreted. On a GPU
    machine those kernels were decorated for the compiler when this process imported them, and
    in-process they would compile and be launched on CPU tensors: the inner run is a process of
    its own, with TRITON_INTERPRET=1 from its start, as a CPU machine's run is."""
    from pytest_triton import state

    if state.get(request.config).runtime.interpret:
        return run_interpreted

    def run(*args):
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        return pytester.runpytest_subprocess("--triton-interpret", *args)

    return run


@pytest.fixture
def outside_a_test():
    """Run the test's body as plain function use would: without the plugin's per-test scope
    (assert_close then judges each call on its own, and guards are found while they live)."""
    from pytest_triton.correctness import call_record

    token = call_record.CURRENT.set(None)
    yield
    call_record.CURRENT.reset(token)
