"""Durations in the saved run, read back for the longest-first order under pytest-xdist, exported
for pytest-split, and shards merged against one unsharded run (bench/shards_check.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_triton.report import expected, order
from pytest_triton.report.durations import union

from ._once import history_once

ROOT = Path(__file__).resolve().parents[2]
pytest_plugins = ["pytester"]

TESTS = """
import time, pytest
from pytest_triton import perf_target

@pytest.mark.parametrize("s", [0.01, 0.02, 0.3, 0.03])
def test_sleep(s):
    time.sleep(s)

@perf_target(max_ms=1000)
def test_perf(triton_bench):
    triton_bench(lambda: None)
"""

CONFTEST = """
import os

def pytest_collection_finish(session):
    w = getattr(session.config, "workerinput", {}).get("workerid", "main")
    with open(os.path.join(str(session.config.rootpath), f"order-{w}.txt"), "w") as f:
        f.write(" ".join(i.name for i in session.items))
"""

# Every nested run is a CPU machine's, on a GPU machine too (--triton-interpret): the perf test is
# a dry run there, skipped, wherever this suite runs.
CPU = ("-p", "no:cacheprovider", "--triton-interpret")
DRY = (*CPU, "--triton-perf", "--triton-perf-allow-unchecked")


def _project(pytester):
    pytester.makepyfile(test_a=TESTS)
    pytester.makeconftest(CONFTEST)


def _saved(pytester, name="main", history="h"):
    """A dry run of the project saved as `name` in `history`, made once per process and name
    (_once.py)."""
    target = Path(pytester.path, history)

    def make():
        pytester.runpytest_subprocess(*DRY, f"--triton-perf-save={name}",
                                      f"--triton-perf-history={history}"
                                      ).assert_outcomes(passed=4, skipped=1)

    history_once(f"order-{name}", pytester, target, make)
    return [json.loads(p.read_text()) for p in sorted(target.glob("*/*.json"))]


def test_durations_are_saved_and_read_back(pytester):
    _project(pytester)
    (doc,) = _saved(pytester)
    d = doc["durations"]
    assert sorted(d) == ["test_a.py::test_perf"] + [f"test_a.py::test_sleep[{s}]"
                                                    for s in ("0.01", "0.02", "0.03", "0.3")]
    assert d["test_a.py::test_sleep[0.3]"] >= 0.3 > d["test_a.py::test_sleep[0.01]"]
    assert expected.saved(pytester.path / "h") == d
    assert expected.saved(pytester.path / "nothing") == {}


def test_the_preferred_runs_speak_first(tmp_path):
    for key, seconds in (("no-device", 1.0), ("H100-SXM-e53cef81", 9.0)):
        (tmp_path / key).mkdir()
        (tmp_path / key / f"20260101T000000000000Z-nocommit-main-0000000{int(seconds)}.json"
         ).write_text(json.dumps({"durations": {"t.py::a": seconds}}))
    assert expected.saved(tmp_path, expected.of_kind(gpu=True)) == {"t.py::a": 9.0}
    assert expected.saved(tmp_path, expected.of_kind(gpu=False)) == {"t.py::a": 1.0}
    assert expected.saved(tmp_path, expected.of_model("H100")) == {"t.py::a": 9.0}


@pytest.mark.requires_plugin("pytest-xdist")
def test_longest_first_under_xdist(pytester):
    _project(pytester)
    (doc,) = _saved(pytester, "main", ".pytest-triton/history")
    result = pytester.runpytest_subprocess(*CPU, "-n", "2")
    result.assert_outcomes(passed=4, skipped=1)
    # the workers' section says what the order went by
    result.stdout.fnmatch_lines(["tests handed out longest first: all 5 by the durations saved "
                                 "runs hold"])
    orders = {p.read_text() for p in pytester.path.glob("order-gw*.txt")}
    # the two longest in the saved run (the dry-run perf test and the 0.3 s sleep, unless the
    # machine is loaded) go first, each to a worker's first block of two (--maxschedchunk 1:
    # positions 0-1 to gw0, 2-3 to gw1); the shortest comes last. Read from the saved run, not
    # from the sleeps: under load a 10 ms sleep can take longer than a 20 ms one.
    saved = {k.split("::")[1]: v for k, v in doc["durations"].items()}
    by_time = sorted(saved, key=saved.get, reverse=True)
    collected = ["test_sleep[0.01]", "test_sleep[0.02]", "test_sleep[0.3]", "test_sleep[0.03]",
                 "test_perf"]
    # what is asserted below tells the two orders apart
    assert ({collected[0], collected[2]}, collected[-1]) != (set(by_time[:2]), by_time[-1])
    assert len(orders) == 1
    first = orders.pop().split()
    assert {first[0], first[2]} == set(by_time[:2]), (first, saved)
    assert first[-1] == by_time[-1], (first, saved)


@pytest.mark.requires_plugin("pytest-xdist")
def test_the_order_says_it_read_no_saved_run(pytester):
    _project(pytester)
    # no saved run: every test by its estimate, and the line says where a run would be read
    result = pytester.runpytest_subprocess(*DRY, "-n", "2", "--triton-perf-json=none.json")
    result.assert_outcomes(passed=4, skipped=1)
    result.stdout.fnmatch_lines(["tests handed out longest first: all 5 by an estimate from "
                                 "what each measures: no saved run in *history holds them"])
    found = json.loads((pytester.path / "none.json").read_text())["order"]
    assert (found["order"], found["tests"], found["saved"]) == ("longest-first", 5, 0)


def test_the_order_line_counts_the_saved_and_the_estimated():
    some = {"order": "longest-first", "tests": 5, "saved": 4, "history": "h"}
    assert order.basis_line(some) == ("tests handed out longest first: 4 of 5 by the durations "
                                      "saved runs hold, 1 by an estimate from what each measures")
    assert order.basis_line({**some, "saved": 5}).endswith("all 5 by the durations saved runs hold")
    assert order.basis_line(None) is None and order.basis_line({**some, "tests": 0}) is None


@pytest.mark.requires_plugin("pytest-xdist")
def test_collection_order_when_off_and_in_one_process(pytester):
    _project(pytester)
    _saved(pytester, "main", ".pytest-triton/history")
    collected = "test_sleep[0.01] test_sleep[0.02] test_sleep[0.3] test_sleep[0.03] test_perf"
    result = pytester.runpytest_subprocess(*CPU, "-n", "2", "--triton-order=collection")
    result.assert_outcomes(passed=4, skipped=1)
    assert {p.read_text() for p in pytester.path.glob("order-gw*.txt")} == {collected}
    assert "handed out longest first" not in result.stdout.str()  # nothing to say of this order
    pytester.runpytest_subprocess(*CPU).assert_outcomes(passed=4, skipped=1)
    assert (pytester.path / "order-main.txt").read_text() == collected
    pytester.runpytest_subprocess(*CPU, "--triton-order=longest-first"
                                  ).assert_outcomes(passed=4, skipped=1)
    assert (pytester.path / "order-main.txt").read_text().split()[0] in ("test_perf",
                                                                        "test_sleep[0.3]")


def test_a_bad_order_names_the_option(pytester):
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest("--triton-order=fastest")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--triton-order*invalid choice*'fastest'*"])


class _Item:
    def __init__(self, name):
        self.name = name


@pytest.mark.parametrize("workers,block", [(2, 2), (3, 2), (2, 3)])
def test_first_blocks_are_filled_as_lpt(workers, block):
    seconds = [1, 9, 2, 8, 3, 7, 4, 6, 5, 0.5]
    items = [_Item(s) for s in seconds]
    laid = order.lay_out(items, seconds, workers, block)
    head = [[it.name for it in laid[k * block:(k + 1) * block]] for k in range(workers)]
    loads = [sum(b) for b in head]
    # LPT of the longest workers x block tests: no block could give one to another to even out
    ranked = sorted(seconds, reverse=True)
    assert sorted(x for b in head for x in b) == sorted(ranked[:workers * block])
    assert max(loads) - min(loads) <= min(min(b) for b in head)
    # what follows goes longest first
    assert [it.name for it in laid[workers * block:]] == ranked[workers * block:]
    # a negative control: plain longest first puts the two longest in the first worker's block
    plain = order.lay_out(items, seconds, 1, block)
    assert [it.name for it in plain[:2]] == [9, 8]


def test_first_block_follows_xdist():
    assert order.first_block(3, 2, 1) == 1  # fewer than two per worker: round robin
    assert order.first_block(100, 2, 1) == 2  # --maxschedchunk 1: two each
    assert order.first_block(100, 2, None) == 12  # a quarter of a worker's share


def test_union_keeps_every_shards_tests():
    assert union([{"a": 1.0}, {"b": 2.0, "a": 3.0}, None]) == {"a": 1.0, "b": 2.0}


def _check(*args):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "shards_check.py"), *args],
                          capture_output=True, text=True)


def test_shards_merged_equal_the_unsharded_run(pytester):
    _project(pytester)
    (full,) = _saved(pytester, "full", "full")
    for k, expr in ((1, "test_perf or 0.3"), (2, "not (test_perf or 0.3)")):
        pytester.runpytest_subprocess(*DRY, "--triton-perf-save=main", f"--triton-perf-history=s{k}",
                                      "-k", expr)
    merged = pytester.path / "merged.json"
    done = subprocess.run([sys.executable, "-m", "pytest_triton", "merge", "-o", str(merged),
                           str(pytester.path / "s1"), str(pytester.path / "s2")],
                          capture_output=True, text=True, cwd=pytester.path)
    assert done.returncode == 0, done.stderr
    assert json.loads(merged.read_text())["durations"].keys() == full["durations"].keys()
    whole = next((pytester.path / "full").glob("*/*.json"))
    ok = _check("compare", str(merged), str(whole), "--out", str(pytester.path / "out"))
    assert ok.returncode == 0 and "SAME tests and verdicts" in ok.stdout, ok.stdout + ok.stderr
    assert json.loads((pytester.path / "out" / "shards.json").read_text())["same"] is True
    # a negative control: one shard alone is not the whole run
    one = next((pytester.path / "s2").glob("*/*.json"))
    bad = _check("compare", str(one), str(whole))
    assert bad.returncode == 1 and "test_a.py::test_perf only in the unsharded run" in bad.stdout


def test_durations_export_for_pytest_split(pytester):
    _project(pytester)
    (doc,) = _saved(pytester)
    out = pytester.path / ".test_durations"
    done = subprocess.run([sys.executable, "-m", "pytest_triton", "durations", "h", "-o",
                           str(out)], capture_output=True, text=True, cwd=pytester.path)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == doc["durations"]
    empty = subprocess.run([sys.executable, "-m", "pytest_triton", "durations", "none", "-o",
                            "-"], capture_output=True, text=True, cwd=pytester.path)
    assert json.loads(empty.stdout) == {}
