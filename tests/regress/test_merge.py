"""The shards of one CI run merged into one (shards.merge, python -m pytest_triton merge), the
history listed, and concurrent saves from many processes losing no file."""

import json
import multiprocessing
import re
import subprocess
import sys

import pytest

from pytest_triton.regress import schema, storage
from pytest_triton.regress.shards import merge
from pytest_triton.regress.storage import HistoryError, SavedRun

from ._docs import H100, H200, ROOT, device, report, run, small


def _shards(doc: dict, n: int, **run_fields) -> list[dict]:
    """`doc` split into n saved runs, test by test, as n CI jobs would have measured it."""
    return [run({**doc, "results": doc["results"][i::n]}, host=f"ci-{i}", **run_fields)
            for i in range(n)]


def _saved(docs, tmp_path) -> list[SavedRun]:
    return [storage.load(storage.save(d, tmp_path)) for d in docs]


def test_shards_merge_into_the_whole_run(tmp_path):
    whole = report(H100)
    shards = _saved(_shards(whole, 3), tmp_path)
    merged = merge(shards)
    assert sorted(r["nodeid"] for r in merged["results"]) == sorted(
        r["nodeid"] for r in whole["results"])
    assert merged["summary"] == whole["summary"]
    assert merged["geomean_summary"] == whole["geomean_summary"]
    assert merged["schema"] == schema.HISTORY and merged["run"]["commit"] == "a" * 40
    assert [(s["file"], s["host"], s["device"], s["tests"]) for s in merged["run"]["shards"]] == [
        (str(s.path), f"ci-{i}", "H100-SXM-e53cef81", len(s.records)) for i, s in enumerate(shards)]
    # it saves and loads as any run, and a merged run merges again as its shards
    again = storage.load(storage.save(merged, tmp_path / "merged"))
    assert len(again.records) == 75
    extra = _saved([small(device(), nodeids=["t.py::new"])], tmp_path / "extra")
    twice = merge([again, *extra])
    assert len(twice["run"]["shards"]) == 4 and len(twice["results"]) == 76


def test_dirty_is_any_shards(tmp_path):
    a, b = _saved([small(device(), ["t.py::a"]), small(device(), ["t.py::b"], dirty=True)],
                  tmp_path)
    assert merge([a, b])["run"]["dirty"] is True
    assert merge([a])["run"]["dirty"] is False


def test_shards_of_different_commits_are_refused(tmp_path):
    a, b = _saved([small(device(), ["t.py::a"]), small(device(), ["t.py::b"], commit="b" * 40)],
                  tmp_path)
    with pytest.raises(HistoryError, match=rf"^shards of one run must share a commit: "
                       rf"{re.escape(str(a.path))} at a{{40}}, {re.escape(str(b.path))} at b{{40}}$"):
        merge([a, b])


def test_shards_of_different_gpu_models_are_refused(tmp_path):
    h100, h200 = report(H100), report(H200)
    a, b = _saved([run(h100), run({**h200, "results": []})], tmp_path)
    with pytest.raises(HistoryError, match=rf"^shards of one run must share a GPU model: "
                       rf"{re.escape(str(a.path))} on H100 SXM, {re.escape(str(b.path))} on H200 SXM$"):
        merge([a, b])
    # two cards of one model are one run's shards
    c, d = _saved([small(device(), ["t.py::c"]), small(device(fingerprint="0" * 16), ["t.py::d"])],
                  tmp_path)
    merged = merge([c, d])
    assert [s["device"] for s in merged["run"]["shards"]] == ["H100-SXM-e53cef81",
                                                               "H100-SXM-00000000"]
    assert len(merged["environment"]["devices"]) == 2


def test_a_test_in_two_shards_is_refused(tmp_path):
    a, b = _saved([small(device(), ["t.py::a", "t.py::x"]), small(device(), ["t.py::x"])],
                  tmp_path)
    with pytest.raises(HistoryError, match=rf"^t.py::x is in two shards: {re.escape(str(a.path))} "
                       rf"and {re.escape(str(b.path))}$"):
        merge([a, b])


def test_nothing_to_merge():
    with pytest.raises(HistoryError, match="nothing to merge"):
        merge([])


# the command line

def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pytest_triton", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_the_merge_command_writes_a_file_or_saves_into_a_history(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, doc in enumerate(_shards(report(H100), 2)):
        (shards / f"shard{i}.json").write_text(json.dumps(doc))
    out = tmp_path / "merged.json"
    done = _cli("merge", "-o", out, shards / "shard0.json", shards / "shard1.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"merged 2 files (75 tests) into {out}"
    assert len(storage.load(out).records) == 75
    refused = _cli("merge", "-o", out, shards)  # a directory of files; out exists
    assert refused.returncode == 2
    assert refused.stderr == (f"python -m pytest_triton merge: error: {out} exists: merge writes "
                              "a new file, never over one\n")
    hist = tmp_path / "history"
    hist.mkdir()
    done = _cli("merge", "-o", hist, shards)
    assert done.returncode == 0, done.stderr
    [saved] = (hist / "H100-SXM-e53cef81").glob("*.json")
    assert storage.find("main", hist, device()) == saved


def test_the_merge_command_reads_plain_reports_and_names_a_bad_file(tmp_path):
    out = tmp_path / "merged.json"
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    done = _cli("merge", "-o", out, H100, bad)
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.startswith(f"python -m pytest_triton merge: error: {bad}: not JSON")
    done = _cli("merge", "-o", out, H100)
    assert done.returncode == 0, done.stderr
    assert storage.load(out).commit is None


def test_the_history_command_lists_each_devices_runs(tmp_path):
    storage.save(small(device(), name="main", commit="c" * 40, dirty=True), tmp_path)
    storage.save(small(device("H200 SXM"), ["t.py::a", "t.py::b"], name=None, branch=None),
                 tmp_path)
    done = _cli("history", tmp_path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "H100-SXM-e53cef81: 1 run"
    assert lines[1].split() == ["created", "(UTC)", "name", "commit", "branch", "tests", "file"]
    assert re.fullmatch(r"  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  main  c{12}\+dirty  main    1      "
                        r"H100-SXM-e53cef81/\S+\.json", lines[2]), lines[2]
    assert lines[3] == "H200-SXM-e53cef81: 1 run"
    assert re.fullmatch(r"  \S+ \S+  +a{12}  +2  +H200-SXM-e53cef81/\S+-run-\S+\.json",
                        lines[5]), lines[5]
    missing = _cli("history", tmp_path / "none")
    assert missing.returncode == 2 and "no such history directory" in missing.stderr


# many processes saving at once

def _save_five(directory, worker, barrier):
    barrier.wait()  # all start together
    for i in range(5):
        storage.save(small(device(), name="ci", host=f"{worker}-{i}"), directory)


def test_concurrent_saves_lose_no_file(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(8)
    procs = [ctx.Process(target=_save_five, args=(tmp_path, w, barrier)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 8
    files = list((tmp_path / "H100-SXM-e53cef81").iterdir())
    assert len(files) == 40 and all(f.suffix == ".json" for f in files)  # no temporary left
    hosts = sorted(storage.load(f).host for f in files)
    assert hosts == sorted(f"{w}-{i}" for w in range(8) for i in range(5))


def test_runs_merged_into_a_history_keep_their_own_dates(tmp_path):
    # merge -o HISTORY stamped each imported run with the time of the merge: their files sorted
    # in the order of import and the trend plot's labels collapsed into one
    from pytest_triton.regress import trend
    from pytest_triton.regress.cli import main as cli
    hist = tmp_path / "history"
    hist.mkdir()
    for day in ("25", "20", "22"):  # imported out of order
        doc = report(H100)
        doc["created"] = f"2026-11-{day}T09:16:35.178546+00:00"
        path = tmp_path / f"report-{day}.json"
        path.write_text(json.dumps(doc))
        assert cli(["merge", "-o", str(hist), str(path)]) == 0
    [(key, entries)] = storage.saved_runs(hist).items()
    assert sorted(e.stamp[:8] for e in entries) == ["20261120", "20261122", "20261125"]
    _, series = trend.series(hist, None, "test_vector_add_speed[float32]")
    [points] = series.values()
    assert [p[1] for p in points] == ["2026-11-20 09:16", "2026-11-22 09:16", "2026-11-25 09:16"]
