"""How long each test is expected to take: read from the durations the saved runs hold
(durations.py), else estimated from the test's perf target. The longest-first order (order.py)
and `python -m pytest_triton durations` (a .test_durations file for pytest-split's CI shards)
read it.

Which saved run speaks for a test: the newest that holds it among the preferred runs (those of
one GPU model; under the plugin, runs of the same kind as this one: GPU runs on a GPU, dry runs
on CPU, as a dry run's durations say nothing of a timed run's), then the newest of any other.
At most READ_AT_MOST files are read, newest first: a history keeps every run, and old runs speak
for tests that no longer exist.

Where no saved run holds a test, its estimate comes from its perf target (estimate()): the order
of a test's cost is known from what it measures before it has ever run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ..perf import record
from ..regress import storage

READ_AT_MOST = 20

# The static estimate, in seconds, by what a test measures: the bundled main job's tests on an
# H100 and an H200 fall in these bands. A target on the geometric mean measures several shapes
# (each sampled and judged); a compute-bound target samples each measurement for at least
# COMPUTE_MIN_TIME_S (perf/timing.py); any other perf test measures one shape of a memory-bound
# kernel; a test that times nothing is short.
ESTIMATE_SEVERAL_SHAPES_S = 20.0
ESTIMATE_COMPUTE_BOUND_S = 3.0
ESTIMATE_PERF_S = 1.0
ESTIMATE_PLAIN_S = 0.1


def saved(directory: Path | str, prefer: Callable[[str], bool] = lambda key: False, *,
          read_at_most: int = READ_AT_MOST) -> dict[str, float]:
    """{node id: seconds} from the saved runs in `directory`: for each test, the newest of the
    runs whose device folder `prefer` accepts that holds it, else the newest other. {} where
    there is no such directory or no run recorded durations (runs saved before they were)."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    entries = [e for runs in storage.saved_runs(directory).values() for e in runs]
    entries.sort(key=lambda e: e.path.name, reverse=True)  # names start with the time saved
    entries.sort(key=lambda e: not prefer(e.key))  # stable: each part stays newest first
    out: dict[str, float] = {}
    for e in entries[:read_at_most]:
        for nodeid, seconds in _durations(e.path).items():
            out.setdefault(nodeid, seconds)
    return out


def _durations(path: Path) -> dict[str, float]:
    """A saved run's durations, read without its records (a GPU run's samples are most of the
    file and play no part here); a file that cannot be read gives none rather than stopping the
    run it would only have ordered."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    found = doc.get("durations") if isinstance(doc, dict) else None
    if not isinstance(found, dict):
        return {}
    return {str(k): float(v) for k, v in found.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0}


def of_model(model: str) -> Callable[[str], bool]:
    """A `prefer` for saved(): the device folders of one GPU model, given as a folder or its
    start ("H100-SXM", "H100")."""
    return lambda key: key == model or storage.model_of(key).startswith(model)


def of_kind(gpu: bool) -> Callable[[str], bool]:
    """A `prefer` for saved(): GPU runs (gpu=True) or the dry runs of a CPU (no-device)."""
    return lambda key: (key != storage.NO_DEVICE) == gpu


def estimate(item: pytest.Item) -> float:
    """A test's static estimate (seconds), from its perf target (see the ESTIMATE_ constants)."""
    rec = record.of(item)
    if rec is None:
        return ESTIMATE_PLAIN_S
    target = rec.target
    if target is not None and target.geomean_speedup is not None:
        return ESTIMATE_SEVERAL_SHAPES_S
    if target is not None and (target.tflops is not None or target.tflops_frac is not None):
        return ESTIMATE_COMPUTE_BOUND_S
    return ESTIMATE_PERF_S


def expected(item: pytest.Item, known: dict[str, float]) -> float:
    """The test's expected seconds: its saved duration, else its estimate."""
    seconds = known.get(item.nodeid)
    return estimate(item) if seconds is None else seconds
