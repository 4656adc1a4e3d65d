"""The repository stays small: the tracked tree (outside .git) at most 10 MB, the GPU runs that
BENCHMARKS.md renders (bench/runs) at most 5 MB, and the tests' own data (tests/data) at most
1 MB. A copy of the tree travels to a GPU machine for every run there, and a tree that grows by a
run's logs each session soon no longer does; git history keeps superseded runs."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIMITS_MB = {"": 10.0, "bench/runs": 5.0, "tests/data": 1.0}


def _tracked() -> list[pathlib.Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist or an installed copy): no tracked tree to size")
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / p for p in done.stdout.decode().split("\0") if p]


@pytest.mark.parametrize("folder", list(LIMITS_MB), ids=lambda f: f or "the whole tree")
def test_the_tracked_tree_stays_small(folder):
    files = [p for p in _tracked() if p.exists() and (not folder or p.is_relative_to(ROOT / folder))]
    sizes = sorted(((p.stat().st_size, p.relative_to(ROOT)) for p in files), reverse=True)
    total = sum(s for s, _ in sizes) / 1e6
    largest = ", ".join(f"{path} {size / 1e6:.2f} MB" for size, path in sizes[:5])
    assert total <= LIMITS_MB[folder], (
        f"{folder or 'the tracked tree'} holds {total:.1f} MB, over its {LIMITS_MB[folder]:g} MB "
        f"(largest: {largest}); keep only the runs BENCHMARKS.md renders (bench/slim_run.py "
        "shrinks a run), and tests' data small")
