"""Choices shared by the workers of one pytest-xdist run (process/runshare.py): a second process
of the run reads the first one's choice instead of making it; a process of another run, or one
with another key, makes its own; outside xdist nothing is written."""

import os
import subprocess
import sys
import time

from pytest_triton.process import runshare

CHOOSE = """
import sys
from pytest_triton import shared_choice
made = []
value = shared_choice("launch-test", sys.argv[1], lambda: made.append(1) or {"index": int(sys.argv[2])})
print(value["index"], "made" if made else "read")
"""


def _choose(run: str, key: str, index: int) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env[runshare.RUN_ENV] = run
    env.pop("PYTEST_TRITON_GPU_LOCK_HELD", None)
    done = subprocess.run([sys.executable, "-c", CHOOSE, key, str(index)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_second_process_of_the_run_reads_the_first_ones_choice():
    run = f"share-{os.getpid()}-{time.time_ns()}"
    assert _choose(run, "('H100', 132, 'k')", 1) == "1 made"
    assert _choose(run, "('H100', 132, 'k')", 2) == "1 read"  # the first one's, not its own
    # another key (another GPU model) and another run make their own
    assert _choose(run, "('H200', 132, 'k')", 2) == "2 made"
    assert _choose(run + "-b", "('H100', 132, 'k')", 2) == "2 made"


def test_outside_xdist_every_call_makes_its_own(monkeypatch):
    monkeypatch.delenv(runshare.RUN_ENV, raising=False)
    made = []
    for i in range(2):
        assert runshare.shared_choice("launch-test", "k", lambda i=i: made.append(i) or i) == i
    assert made == [0, 1] and runshare.folder() is None


def test_a_choice_made_while_the_gpu_is_shared_is_not_written(monkeypatch):
    # triton_bench's first call shares the GPU and its choice is made again alone: only that
    # one is written
    from pytest_triton.process import gpulock

    monkeypatch.setenv(runshare.RUN_ENV, f"share-{os.getpid()}-{time.time_ns()}")
    monkeypatch.setattr(gpulock, "sharing", lambda: True)
    assert runshare.shared_choice("launch-test", "k", lambda: 1) == 1
    monkeypatch.setattr(gpulock, "sharing", lambda: False)
    assert runshare.shared_choice("launch-test", "k", lambda: 2) == 2  # nothing stood: made
    assert runshare.shared_choice("launch-test", "k", lambda: 3) == 2  # now it stands
