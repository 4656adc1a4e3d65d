"""Out of memory beside neighbours, for real, on a CUDA GPU (skipped elsewhere; the CPU suite's
tests/process/test_oom_retry.py proves the mechanism with stand-ins).

An inner run with three xdist workers, a GPU lock of its own: two workers' tests each hold 30% of
the memory that was free when the run began, and the third's needs 60% of it: beside them it runs
out, alone it fits. The two hold their memory until the third waits to hold the GPU alone, as
tests that run longer would. Sizes come from the free memory, so the outer suite's other workers
keep 40% of it meanwhile; the inner run's 60% is held for a moment only.

    python3 -m pytest tests/process/test_oom_retry_gpu.py -p no:cacheprovider -v
"""

import os

import pytest
import torch

from pytest_triton.process import gpulock

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available() or torch.version.cuda is None,
                       reason="needs a CUDA GPU: the memory is real"),
    pytest.mark.requires_plugin("pytest-xdist"),
]

NEIGHBOURS = '''
import json
import os
import time

import pytest
import torch

from pytest_triton import state
from pytest_triton.process import lockfiles


def _wait_for(what, ready, timeout=120):
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what} never came"
        time.sleep(0.02)


def _free_at_start():
    _wait_for("free.json", lambda: os.path.exists("free.json"))
    with open("free.json") as f:
        return json.load(f)["free"]


@pytest.mark.parametrize("i", [0, 1])
def test_neighbour_holds_memory(i, request):
    held = torch.empty(int(0.3 * _free_at_start()), dtype=torch.uint8, device="cuda")
    open(f"holding-{i}", "w").close()
    # its test runs on until another waits to hold the GPU alone
    folder = lockfiles.folder_of(state.get(request.config).runtime.gpu_id)
    _wait_for("a test waiting to hold the GPU alone", lambda: lockfiles.scan(folder)[1])
    del held


def test_needs_more_than_is_left():
    if not os.path.exists("attempted"):  # the first attempt: beside the two neighbours
        free, total = torch.cuda.mem_get_info()
        with open("free.json.tmp", "w") as f:
            json.dump({"free": free, "total": total}, f)
        os.replace("free.json.tmp", "free.json")
        _wait_for("the neighbours", lambda: all(os.path.exists(f"holding-{i}") for i in (0, 1)))
        try:
            torch.empty(int(0.6 * free), dtype=torch.uint8, device="cuda")
        finally:
            open("attempted", "w").close()
        pytest.fail("60% of the free memory fit beside neighbours holding 30% each: nothing tested")
    x = torch.empty(int(0.6 * _free_at_start()), dtype=torch.uint8, device="cuda")
    x.fill_(1)
    assert int(x[-1]) == 1
'''


def test_out_of_memory_beside_neighbours_passes_alone(pytester, monkeypatch):
    # Its own lock (the inner run's testrunuid), not this suite's: nothing here waits for this
    # suite's other workers, nor they for it.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
                 gpulock.HELD_ENV):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_neighbours=NEIGHBOURS)
    result = pytester.runpytest_subprocess("-n", "3", "-p", "no:cacheprovider", "-p", "no:randomly",
                                           "-rA", "--triton-gpu-wait", "120")
    print(result.stdout.str())
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "*OutOfMemoryRetried: pytest-triton: ran out of CUDA memory in its call while other "
        "processes held * GiB*; re-run with the GPU to itself, it passed*"])
    assert os.path.exists(pytester.path / "attempted")  # it did run out beside them
