"""bench/series.py: a series of main-job runs fails on any failed test or INCONCLUSIVE target,
and names every target's smallest margin over the runs (a passing run of correct kernels, and
runs with a failed and an undecided target, made from a real GPU run's report)."""

import copy
import gzip
import importlib.util
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).parents[1]
SERIES = ROOT / "bench" / "series.py"
REPORT = json.loads(gzip.decompress((ROOT / "tests" / "data" / "h100-perf.json.gz").read_bytes()))


def _series(tmp_path, *docs):
    paths = []
    for i, doc in enumerate(docs):
        paths.append(tmp_path / f"run-{i}.json")
        # each its own report (copies of one would be one run twice)
        paths[-1].write_text(json.dumps({**doc, "created": f"{doc['created']}#{tmp_path.name}{i}"}))
    out = tmp_path / "series.json"
    done = subprocess.run([sys.executable, str(SERIES), *map(str, paths), "--json", str(out)],
                          capture_output=True, text=True)
    return done, json.loads(out.read_text())


def _module():
    """bench/series.py as a module (it is a script, not a package's)."""
    spec = importlib.util.spec_from_file_location("series", SERIES)
    series = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(series)
    return series


def _check(doc, nodeid_part, target="speedup"):
    r = next(r for r in doc["results"] if nodeid_part in r["nodeid"])
    return next(c for m in r["measurements"] for c in m["checks"] if c["target"] == target)


def test_runs_of_correct_kernels_pass_and_name_each_targets_smallest_margin(tmp_path):
    a, b = copy.deepcopy(REPORT), copy.deepcopy(REPORT)
    c = _check(b, "test_vector_add_speed[float32]")
    c["ci"] = [c["asked"] * 1.004, c["ci"][1]]  # a bound 0.4% past its target, still a pass
    done, doc = _series(tmp_path, a, b)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r["passed"] for r in doc["runs"]] == [True, True]
    closest = doc["margins"][0]
    assert (closest["test"], closest["target"]) == ("test_vector_add_speed[float32]",
                                                    ">=0.98x baseline")
    assert abs(closest["smallest"] - 0.004) < 1e-9 and closest["runs"] == 2
    assert "+0.4% **(under 1%)**" in done.stdout


def test_a_failed_test_or_an_inconclusive_target_fails_the_series(tmp_path):
    failed, undecided = copy.deepcopy(REPORT), copy.deepcopy(REPORT)
    next(r for r in failed["results"] if "test_softmax_speed" in r["nodeid"])["outcome"] = "failed"
    _check(undecided, "test_vector_add_speed[bfloat16]")["verdict"] = "inconclusive"
    done, doc = _series(tmp_path, copy.deepcopy(REPORT), failed, undecided)
    assert done.returncode == 1
    assert [r["passed"] for r in doc["runs"]] == [True, False, False]
    assert doc["runs"][1]["failed"][0].startswith("tests/test_memory_perf.py::test_softmax_speed")
    assert doc["runs"][2]["inconclusive"] == [
        "tests/test_memory_perf.py::test_vector_add_speed[bfloat16] speedup"]
    assert "3 runs on NVIDIA H100 80GB HBM3, each its own process with a cold Triton cache: 1 " \
           "passed, 1 with a failed test, 1 with an INCONCLUSIVE target." in done.stdout


def test_runs_go_to_the_gpus_an_outer_cuda_visible_devices_names(monkeypatch):
    # On a machine whose GPU 0 runs the whole suite meanwhile, CUDA_VISIBLE_DEVICES=1,2,3 keeps
    # the series' runs off it
    series = _module()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert series.gpu_ids(3) == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2,3")
    assert series.gpu_ids(3) == ["1", "2", "3"]
    assert series.gpu_ids(2) == ["1", "2"]
    try:
        series.gpu_ids(4)
    except SystemExit as e:
        assert "names only 3" in str(e)
    else:
        raise AssertionError("4 runs at once on 3 visible GPUs was accepted")


def test_a_later_call_sizes_its_budget_by_the_runs_an_earlier_call_made(monkeypatch, tmp_path):
    # A second call on the warm machine adds runs to the same folder: a run fits a budget by the
    # runs already made there (150 s), not by the estimate for a machine that made none (200 s)
    series = _module()
    started = []

    def fake_run(cmd, **kwargs):
        started.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(series.subprocess, "run", fake_run)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "series-0.status").write_text(json.dumps({"rc": 0, "wall_s": 150.0}))
    assert series.ESTIMATE_S > 180
    series.make_runs(1, 1, tmp_path, first=1, budget=180)
    assert len(started) == 1 and (tmp_path / "series-1.status").exists()
    series.make_runs(1, 1, tmp_path, first=2, budget=140)  # the longest run so far: 150 s
    assert len(started) == 1 and not (tmp_path / "series-2.status").exists()


def _join(tmp_path, *series):
    out = tmp_path / "joined.json"
    done = subprocess.run([sys.executable, str(SERIES), *map(str, series), "--json", str(out)],
                          capture_output=True, text=True)
    return done, (json.loads(out.read_text()) if out.exists() else None)


def test_series_of_one_commit_made_in_several_calls_join_into_one(tmp_path):
    """Three runs read at once, and the same runs as a series of two and a series of one joined:
    the same runs, verdicts and margins (the closest one in the later series)."""
    a, b, c = (copy.deepcopy(REPORT) for _ in range(3))
    check = _check(c, "test_vector_add_speed[float32]")
    check["ci"] = [check["asked"] * 1.004, check["ci"][1]]
    (tmp_path / "all").mkdir()
    _, whole = _series(tmp_path / "all", a, b, c)
    (tmp_path / "first").mkdir()
    (tmp_path / "later").mkdir()
    _series(tmp_path / "first", a, b)
    _series(tmp_path / "later", c)
    first = tmp_path / "first" / "series.json"
    later = tmp_path / "later" / "series.json"
    done, joined = _join(tmp_path, first, later)
    assert done.returncode == 0, done.stdout + done.stderr
    assert joined["margins"] == whole["margins"]
    assert [r["name"] for r in joined["runs"]] == ["first/series:run-0", "first/series:run-1",
                                                   "later/series:run-0"]
    assert joined["margins"][0]["runs"] == 3 and abs(joined["margins"][0]["smallest"] - 0.004) < 1e-9
    # a joined series joins again, as it is
    done, again = _join(tmp_path, tmp_path / "joined.json")
    assert done.returncode == 0 and again["margins"] == whole["margins"]


def test_one_run_twice_or_a_known_commit_beside_an_unknown_one_is_refused(tmp_path):
    _series(tmp_path, copy.deepcopy(REPORT), copy.deepcopy(REPORT))
    done, _ = _join(tmp_path, tmp_path / "series.json", tmp_path / "series.json")
    assert done.returncode == 2 and "one run twice" in done.stderr, done.stderr
    doc = json.loads((tmp_path / "series.json").read_text())
    doc["runs"][0]["commit"] = "ce5dbfa"
    doc["runs"][1]["commit"] = "ce5dbfa3f2d1c2b7a8e9f00112233445566778899"  # the same, in full
    (tmp_path / "same.json").write_text(json.dumps(doc))
    done, joined = _join(tmp_path, tmp_path / "same.json")
    assert done.returncode == 0, done.stderr
    assert "2 runs of ce5dbfa on" in done.stdout  # one commit, named once
    doc["runs"][1]["commit"] = None
    (tmp_path / "half.json").write_text(json.dumps(doc))
    done, _ = _join(tmp_path, tmp_path / "half.json")
    assert done.returncode == 2 and "beside runs of an unknown commit" in done.stderr


def test_making_runs_into_a_folder_of_another_commit_is_refused_first(tmp_path, monkeypatch):
    series = _module()
    (tmp_path / "series-0.status").write_text(json.dumps({"rc": 0, "wall_s": 150.0,
                                                          "commit": "aaa1111"}))
    made = []

    def fake_make(*args, **kwargs):  # a run that left its log and no report
        made.append(args)
        (tmp_path / "series-0.log").write_text("")

    monkeypatch.setattr(series, "make_runs", fake_make)
    monkeypatch.setattr(series, "checkout_commit", lambda: "bbb2222")
    assert series.main(["--make", "1", "--dir", str(tmp_path)]) == 2 and made == []
    monkeypatch.setattr(series, "checkout_commit", lambda: "aaa1111ffff")  # the same commit
    assert series.main(["--make", "1", "--dir", str(tmp_path)]) == 1  # its run left no report
    assert made


def test_runs_of_different_commits_or_gpus_or_without_margins_are_refused(tmp_path):
    _series(tmp_path, copy.deepcopy(REPORT))
    one = json.loads((tmp_path / "series.json").read_text())
    for field, value, words in (("commit", "aaa1111", "runs of different commits"),
                                ("device", "NVIDIA H200", "runs of different GPU models")):
        other = copy.deepcopy(one)
        other["runs"][0][field] = value
        if field == "commit":
            one_with = copy.deepcopy(one)
            one_with["runs"][0]["commit"] = "bbb2222"
            (tmp_path / "a.json").write_text(json.dumps(one_with))
        else:
            (tmp_path / "a.json").write_text(json.dumps(one))
        (tmp_path / "b.json").write_text(json.dumps(other))
        done, _ = _join(tmp_path, tmp_path / "a.json", tmp_path / "b.json")
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert value in done.stderr
    old = copy.deepcopy(one)
    del old["runs"][0]["checks"]  # a series.json written before the runs kept their margins
    (tmp_path / "old.json").write_text(json.dumps(old))
    done, _ = _join(tmp_path, tmp_path / "old.json")
    assert done.returncode == 2 and "carry no per-target margins" in done.stderr


def test_a_run_made_names_the_commit_of_its_checkout(monkeypatch, tmp_path):
    series = _module()
    # the checkout's own commit: its .commit (a GPU machine's tree), else git's HEAD
    stamp = ROOT / ".commit"
    expected = stamp.read_text().strip() if stamp.exists() else subprocess.check_output(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True).strip()
    assert series.checkout_commit() == expected
    # and each run's status names it
    monkeypatch.setattr(series.subprocess, "run",
                        lambda cmd, **kwargs: subprocess.CompletedProcess(cmd, 0))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    series.make_runs(1, 1, tmp_path, commit="abc1234")
    assert json.loads((tmp_path / "series-0.status").read_text())["commit"] == "abc1234"
