"""Out of memory beside a neighbour, with stand-ins (the CPU suite runs these; on a CUDA GPU
tests/process/test_oom_retry_gpu.py does it for real): the inner run's GPU and its memory query are
stand-ins, and a neighbour process holds the GPU's lock (shared) and "holds 6 GiB" (a file the
memory query reads) until a test waits to hold the GPU alone, as another worker's test would."""

import os
import time

import pytest

from pytest_triton.process import gpulock

from .test_gpulock import process_beside
from .test_gpulock_timing import STAND_IN_GPU

pytestmark = [pytest.mark.skipif(os.name != "posix", reason="flock locks are POSIX only"),
              pytest.mark.triton_no_gpu,  # the inner runs pretend a GPU, under the interpreter
              pytest.mark.requires_plugin("pytest-xdist")]

STAND_IN_MEMORY = """
import json, os
from pytest_triton.process import oomretry

def _memory(device, gpu_id):
    try:
        with open(os.environ["NEIGHBOUR_FILE"]) as f:
            held = json.load(f)
    except (OSError, ValueError):
        return oomretry.Memory(0, 80 << 30)
    return oomretry.Memory(held["bytes"], 80 << 30, ((held["who"], held["bytes"]),))

oomretry.memory_of_others = _memory
"""

NEIGHBOUR = """
import json, os, sys, time
os.environ["PYTEST_XDIST_TESTRUNUID"] = sys.argv[1]
from pytest_triton.process import gpulock, lockfiles
with gpulock.hold("fake0", False, nodeid="neighbour.py::test_holds_6_gib"):
    with open(sys.argv[2], "w") as f:
        json.dump({"bytes": 6 << 30, "who": "gw9 (neighbour.py::test_holds_6_gib)"}, f)
    print("holding", flush=True)
    deadline = time.monotonic() + 60
    while not lockfiles.scan(lockfiles.folder_of("fake0"))[1] and time.monotonic() < deadline:
        time.sleep(0.02)  # its test runs on until another waits to hold the GPU alone
    os.remove(sys.argv[2])  # its test ends: its memory goes back
"""

TESTS = """
import os
import pytest
import torch

def _out_of_memory():
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a "
                                 "total capacity of 80.00 GiB of which 2.00 GiB is free.")

@pytest.fixture
def big_buffer():
    if os.environ["CASE"] == "setup" and os.path.exists(os.environ["NEIGHBOUR_FILE"]):
        _out_of_memory()

def test_big(big_buffer):
    if os.environ["CASE"] == "always" or (
            os.environ["CASE"] in ("call", "off") and os.path.exists(os.environ["NEIGHBOUR_FILE"])):
        _out_of_memory()

def test_small():
    pass
"""

RETRIED = ("*OutOfMemoryRetried: pytest-triton: ran out of CUDA memory in its {when} while other "
           "processes held 6.0 GiB of the GPU's 80.0 GiB (gw9 (neighbour.py::test_holds_6_gib): "
           "6.0 GiB); re-run with the GPU to itself, it passed*")


@pytest.fixture
def neighbour(pytester, monkeypatch):
    """A process beside the inner run that holds its GPU's lock and 6 GiB; yields the run's uid."""
    uid = f"oomtest-{os.getpid()}-{time.time_ns()}"
    path = str(pytester.path / "neighbour.json")
    monkeypatch.setenv("NEIGHBOUR_FILE", path)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
                 gpulock.HELD_ENV):
        monkeypatch.delenv(name, raising=False)
    with process_beside(NEIGHBOUR, uid, path):
        yield uid


def _run(pytester, uid, case, *args):
    pytester.makeconftest(STAND_IN_GPU + STAND_IN_MEMORY)
    pytester.makepyfile(test_k=TESTS)
    return pytester.runpytest_subprocess("-n", "1", f"--testrunuid={uid}", "-p", "no:cacheprovider",
                                         "-p", "no:randomly", "--triton-interpret", "-rA", *args)


@pytest.mark.parametrize("when", ["call", "setup"])
def test_out_of_memory_beside_a_neighbour_passes_when_run_alone(pytester, neighbour, monkeypatch,
                                                                when):
    monkeypatch.setenv("CASE", when)
    result = _run(pytester, neighbour, when)
    result.assert_outcomes(passed=2)  # once each: the first attempt's failure is not reported
    result.stdout.fnmatch_lines([RETRIED.format(when=when)])
    assert not os.path.exists(os.environ["NEIGHBOUR_FILE"])  # the re-run waited for it to end
    result.stdout.fnmatch_lines(["gw0: waited * s in * takes, longest * (test_k.py::test_big, "
                                 "to hold it alone)*"])


def test_out_of_memory_alone_fails_as_before_saying_it_was_tried_alone(pytester, neighbour,
                                                                     monkeypatch):
    monkeypatch.setenv("CASE", "always")
    result = _run(pytester, neighbour, "always")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*OutOfMemoryError: CUDA out of memory*",
                                 "*- pytest-triton -*",
                                 "pytest-triton: ran out of CUDA memory in its call while other "
                                 "processes held 6.0 GiB*; re-run with the GPU to itself, it "
                                 "failed again"])
    assert result.stdout.str().count("_ test_big _") == 1  # one failure, not one per attempt
    assert "OutOfMemoryRetried" not in result.stdout.str()


def test_with_the_option_off_the_first_failure_stands(pytester, neighbour, monkeypatch):
    monkeypatch.setenv("CASE", "off")
    result = _run(pytester, neighbour, "off", "--triton-oom-retry=off")
    result.assert_outcomes(passed=1, failed=1)
    assert "re-run" not in result.stdout.str()
    assert os.path.exists(os.environ["NEIGHBOUR_FILE"])  # nobody waited to hold the GPU alone


def test_without_neighbours_holding_memory_it_is_not_run_again(pytester, neighbour, monkeypatch):
    # Out of memory with nothing held by anyone else: the test's own size; one attempt.
    monkeypatch.setenv("CASE", "always")
    os.remove(os.environ["NEIGHBOUR_FILE"])  # the stand-in query then reports 0 bytes
    result = _run(pytester, neighbour, "always")
    result.assert_outcomes(passed=1, failed=1)
    assert "re-run" not in result.stdout.str()


@pytest.mark.parametrize("how", [[], ["--setup-show"], ["--setup-only"]])
def test_it_runs_each_test_as_pytest_does(pytester, how):
    # Under xdist on a GPU the retry runs every test (pytest's runtestprotocol, its reports held
    # back only from an out-of-memory failure it re-runs): here in-process, against pytest itself.
    pytester.makeconftest("""
import pytest
from pytest_triton.process import oomretry

class Always(oomretry.OOMRetry):
    def _applies(self, item):
        open("ours-ran", "a").close()
        return True

def pytest_configure(config):
    if config.getoption("--always", False):
        config.pluginmanager.register(Always(config), "always")

def pytest_addoption(parser):
    parser.addoption("--always", action="store_true")
""")
    pytester.makepyfile("""
        import pytest
        @pytest.fixture(scope="module")
        def shared():
            yield 1
        @pytest.fixture
        def broken():
            raise RuntimeError("no")
        def test_a(shared): pass
        def test_b(shared): assert 0
        def test_c(broken): pass
        @pytest.mark.skip
        def test_d(): pass
        @pytest.mark.xfail
        def test_e(): assert 0
    """)
    ours = pytester.runpytest("--triton-interpret", "-p", "no:cacheprovider", "--always", *how)
    assert (pytester.path / "ours-ran").exists()
    (pytester.path / "ours-ran").unlink()
    theirs = pytester.runpytest("--triton-interpret", "-p", "no:cacheprovider", *how)
    assert not (pytester.path / "ours-ran").exists()
    assert ours.parseoutcomes() == theirs.parseoutcomes()
    strip = lambda r: [line for line in r.stdout.lines if " in " not in line]  # noqa: E731
    assert strip(ours) == strip(theirs)
