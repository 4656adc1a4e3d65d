"""Saved runs (regress/storage.py): a real run's document survives save and load exactly, bad
files are refused naming the file and the reason, save never replaces a file, and find picks the
run a name, a path or 'latest' means."""

import datetime
import json
import pathlib
import re
import subprocess
import types

import pytest

from pytest_triton.perf.record import PerfRecord
from pytest_triton.regress import provenance, schema, storage
from pytest_triton.regress.storage import HistoryError, SavedRun

from ._docs import H100, H200, device, report, run, small


def test_a_real_run_round_trips_through_save_and_load(tmp_path):
    doc = run(report(H100))
    path = storage.save(doc, tmp_path)
    assert path.parent == tmp_path / "H100-SXM-e53cef81"
    assert re.fullmatch(r"\d{8}T\d{12}Z-aaaaaaaaaaaa-main-[0-9a-f]{8}\.json", path.name)
    saved = storage.load(path)
    assert (saved.name, saved.commit, saved.branch, saved.dirty, saved.path) == (
        "main", "a" * 40, "main", False, path)
    assert saved.device["fingerprint"] == "e53cef8121918e4f"
    assert saved.records == [PerfRecord.from_dict(r) for r in doc["results"]]
    assert len(saved.records) == 75 and saved.records[0].measurements[0].timings.ms
    assert saved.to_document() == doc
    assert json.loads(path.read_text()) == doc


def test_a_plain_report_is_refused_unless_allowed():
    with pytest.raises(HistoryError, match=rf"^{re.escape(str(H100))}: a --triton-perf-json "
                       r"report, not a saved run: it has no \"run\" block"):
        storage.load(H100)
    saved = storage.load(H100, allow_report=True)
    assert saved.commit is None and saved.name is None
    assert saved.versions["torch"] == report(H100)["environment"]["torch"]
    assert saved.versions["driver"] == "580.159.04"
    assert len(saved.records) == 75 and saved.key == "H100-SXM-e53cef81"


def _write(tmp_path, content: str):
    path = tmp_path / "bad.json"
    path.write_text(content)
    return path


@pytest.mark.parametrize("content, reason", [
    ("{not json", r"not JSON \(Expecting property name"),
    ("[1, 2]", r"a JSON list, not a pytest-triton history document"),
    ('{"results": []}', r'no "schema" field: not a pytest-triton history file'),
    (json.dumps({"schema": "pytest-triton-history", "schema_version": schema.VERSION + 1}),
     rf"written by pytest-triton history schema version {schema.VERSION + 1}; this version "
     rf"reads {schema.VERSION} and older: upgrade pytest-triton to read it$"),
    ('{"schema": "pytest-triton-perf/7", "results": []}',
     rf"written by pytest-triton perf report schema version 7; this version reads "
     rf"{schema.VERSION} and older"),
    ('{"schema": "pytest-triton-history", "results": []}',
     r"schema version None: not a version \(a positive integer\)"),
    ('{"schema": "pytest-triton-history", "schema_version": "2", "results": []}',
     r"schema version '2': not a version"),
    ('{"schema": "asv/1"}', r"schema 'asv/1': not a pytest-triton history file"),
    ('{"schema": "pytest-triton-history/1", "results": []}', r'no "run" block'),
    ('{"schema": "pytest-triton-history/1", "run": {"name": null}, "results": []}',
     r'the "run" block lacks commit, branch, dirty, versions, host, shards'),
    (json.dumps(small(None)).replace('"results": [', '"results": [{"nodeid": "t.py::x"}, '),
     r"result 0 \(t.py::x\) cannot be read: KeyError: 'measurements'"),
    (json.dumps({**small(None), "results": None}), r'no "results" list'),
    (json.dumps({**small(None), "device": "H100"}), r'"device" is a JSON str, not an object'),
])
def test_a_bad_file_is_refused_naming_it_and_why(tmp_path, content, reason):
    path = _write(tmp_path, content)
    with pytest.raises(HistoryError, match=rf"^{re.escape(str(path))}: {reason}"):
        storage.load(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(HistoryError, match=rf"^{re.escape(str(tmp_path / 'nope.json'))}: no such file$"):
        storage.load(tmp_path / "nope.json")


@pytest.mark.parametrize("dev, key", [
    (device(), "H100-SXM-e53cef81"),
    (device("H200 SXM", "e7f9923afd6d93d7"), "H200-SXM-e7f9923a"),
    ({"name": "NVIDIA RTX 6000 Ada/Gen", "fingerprint": "../x"}, "NVIDIA-RTX-6000-Ada-Gen-x"),
    ({"name": "Some GPU"}, "Some-GPU"),
    (None, "no-device"),
    ({}, "no-device"),
])
def test_device_key_is_a_safe_directory_name(dev, key):
    assert storage.device_key(dev) == key


def test_a_run_that_measured_nothing_is_saved_under_no_device(tmp_path):
    path = storage.save(small(None, name=None, commit=None), tmp_path)
    assert path.parent.name == "no-device"
    assert re.fullmatch(r"\d{8}T\d{12}Z-nocommit-run-[0-9a-f]{8}\.json", path.name)
    assert storage.load(path).records[0].nodeid == "t.py::test_a"
    assert storage.find("latest", tmp_path, None) == path


@pytest.mark.parametrize("name", ["latest", "run", "a/b", "../up", "", "-x", "x" * 65, "a b"])
def test_a_name_that_cannot_be_a_file_name_part_is_refused(tmp_path, name):
    with pytest.raises(HistoryError, match=rf"run name {re.escape(repr(name))}: use letters"):
        storage.save(small(None, name=name), tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.rglob("*"))


def test_save_refuses_a_plain_report(tmp_path):
    with pytest.raises(HistoryError, match="a --triton-perf-json report, not a saved run"):
        storage.save(report(H100), tmp_path)


def test_save_never_replaces_a_file_whose_name_it_drew(tmp_path, monkeypatch):
    # the same second, commit and name, and the same random suffix drawn twice
    when = datetime.datetime(2026, 11, 26, 12, 0, 0, 1, tzinfo=datetime.timezone.utc)
    fixed = types.SimpleNamespace(datetime=types.SimpleNamespace(now=lambda tz: when),
                                  timezone=datetime.timezone)
    monkeypatch.setattr(storage, "datetime", fixed)
    draws = iter(["feed0001", "00000000", "feed0002", "00000000", "11111111"])
    monkeypatch.setattr(storage.secrets, "token_hex", lambda n: next(draws))
    first = storage.save(small(None, host="first"), tmp_path)
    second = storage.save(small(None, host="second"), tmp_path)
    assert first.name.endswith("-00000000.json") and second.name.endswith("-11111111.json")
    assert storage.load(first).host == "first" and storage.load(second).host == "second"
    assert sorted(p.name for p in (tmp_path / "no-device").iterdir()) == sorted(
        [first.name, second.name])  # and no temporary file is left


# find: a path, a name, or 'latest'

@pytest.fixture
def saved(tmp_path):
    """Runs saved in this order: main on H100 (two), pr on H100, main on H200, only-h200."""
    h100, other_h100, h200 = device(), device(fingerprint="0123456789abcdef"), device("H200 SXM")
    paths = {}
    for label, dev, name in [("main1", h100, "main"), ("main2", h100, "main"), ("pr", h100, "pr"),
                             ("h200", h200, "main"), ("only", h200, "only-h200"),
                             ("other", other_h100, "other-card")]:
        paths[label] = storage.save(small(dev, name=name), tmp_path)
    return tmp_path, paths


def test_latest_is_this_devices_newest_run(saved):
    directory, paths = saved
    assert storage.find("latest", directory, device()) == paths["pr"]
    assert storage.find("latest", directory, device(), exclude=paths["pr"]) == paths["main2"]
    assert storage.find("latest", directory, device("H200 SXM")) == paths["only"]


def test_latest_falls_back_to_another_card_of_the_same_sku_only(saved):
    directory, paths = saved
    card = device(fingerprint="fedcba9876543210")  # an H100 SXM that saved nothing yet
    assert storage.find("latest", directory, card) == paths["other"]
    with pytest.raises(HistoryError, match=r"no saved run for this device \(A100-SXM-e53cef81\) "
                       r"or another of its SKU in .*; it holds: H100-SXM-01234567 \(1 run: "
                       r"other-card\); H100-SXM-e53cef81 \(3 runs: main, pr\); H200-SXM-e53cef81 "
                       r"\(2 runs: main, only-h200\)"):
        storage.find("latest", directory, device("A100 SXM"))


def test_a_name_is_its_newest_run_on_this_device_else_on_another(saved):
    directory, paths = saved
    assert storage.find("main", directory, device()) == paths["main2"]  # not H200's, newer
    assert storage.find("main", directory, device("H200 SXM")) == paths["h200"]
    # only on another device: returned, so that the compare refuses it by name
    assert storage.find("only-h200", directory, device()) == paths["only"]
    with pytest.raises(HistoryError, match=r"no saved run named 'nightly' in .*; it holds: "
                       r"H100-SXM-01234567 \(1 run: other-card\); H100-SXM-e53cef81 \(3 runs"):
        storage.find("nightly", directory, device())


def test_a_path_is_that_file(saved, tmp_path):
    directory, paths = saved
    assert storage.find(str(paths["h200"]), directory, device()) == paths["h200"]
    with pytest.raises(HistoryError, match=r"^old/run.json: no such file$"):
        storage.find("old/run.json", directory, device())


def test_an_empty_or_missing_directory_is_named(tmp_path):
    with pytest.raises(HistoryError, match=r"in .*; it holds: nothing$"):
        storage.find("latest", tmp_path, device())
    with pytest.raises(HistoryError, match=r"no saved run 'main': .*/nowhere does not exist"):
        storage.find("main", tmp_path / "nowhere", device())


# git: the run block's commit, branch and dirty flag

def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    for var in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(var, raising=False)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "feature")
    (repo / "k.py").write_text("x = 1\n")
    _git(repo, "add", "k.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return repo


def test_git_info_of_a_checkout(repo, monkeypatch):
    head = _git(repo, "rev-parse", "HEAD")
    assert provenance.git_info(repo) == {"commit": head, "branch": "feature", "dirty": False}
    (repo / "untracked.json").write_text("{}")  # the history directory is usually untracked
    assert provenance.git_info(repo)["dirty"] is False
    (repo / "k.py").write_text("x = 2\n")
    assert provenance.git_info(repo)["dirty"] is True
    _git(repo, "checkout", "-q", "--detach")
    assert provenance.git_info(repo)["branch"] is None
    monkeypatch.setenv("GITHUB_HEAD_REF", "pr-branch")
    assert provenance.git_info(repo)["branch"] == "pr-branch"


def test_git_info_outside_git_or_without_git_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    nothing = {"commit": None, "branch": None, "dirty": None}
    assert provenance.git_info(tmp_path) == nothing
    assert provenance.git_info(tmp_path / "not-a-directory") == nothing
    monkeypatch.setenv("PATH", str(tmp_path))  # no git program
    assert provenance.git_info(tmp_path) == nothing


def test_run_block(repo):
    config = types.SimpleNamespace(rootpath=repo, stash={})  # no perf session: no driver
    block = provenance.run_block(config, "nightly")
    assert set(block) == set(storage.RUN_FIELDS)
    assert block["name"] == "nightly" and block["commit"] == _git(repo, "rev-parse", "HEAD")
    assert block["branch"] == "feature" and block["dirty"] is False and block["shards"] == []
    import pytest_triton
    assert block["versions"]["pytest_triton"] == pytest_triton.__version__
    assert set(block["versions"]) == {"python", "torch", "triton", "pytest", "pytest_triton",
                                      "cuda", "driver"}
    assert block["host"]
    with pytest.raises(HistoryError, match="run name 'latest'"):
        provenance.run_block(config, "latest")


def test_the_h200_run_loads_too(tmp_path):
    saved = storage.load(storage.save(run(report(H200)), tmp_path))
    assert saved.key == "H200-SXM-e7f9923a" and saved.to_document() == run(report(H200))


def test_saved_run_from_document_names_a_document_without_path():
    with pytest.raises(HistoryError, match=r"^<document>: a JSON str"):
        SavedRun.from_document("x")


# a real session's document, saved as the plugin will save it

SAVE_AT_THE_END = """
import pytest
from pytest_triton.regress import provenance, storage

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    doc = provenance.saved_document(session.config, "cpu-ci")
    print("SAVED", storage.save(doc, session.config.rootpath / "hist"))
"""

FAKE_H100 = """
from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf.timing import Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="NVIDIA H100 80GB HBM3", sms=132, dram_gbps=3352.0, sku="H100 SXM",
                      tflops={"float16": 989.4}, driver="580.0", fingerprint="0123abcd4567ef89")

def pytest_triton_measure(config, request, fn, baseline, settings):
    return Timings(ms=[0.5 * (1 + 0.001 * (i % 3)) for i in range(30)], method="injected",
                   l2=settings.l2, gpu_before={"sm_clock_mhz": 1980})
"""

PERF_TEST = """
from pytest_triton import perf_target
@perf_target(gbps=100)
def test_copy(triton_bench): triton_bench(lambda: None, bytes=1e8)
"""


@pytest.mark.parametrize("gpu", [False, True], ids=["dry-run", "fake-h100"])
def test_a_sessions_document_saves_and_is_found(pytester, monkeypatch, run_interpreted, gpu):
    monkeypatch.setenv("PYTEST_TRITON_CACHE_DIR", str(pytester.path / "cache"))
    pytester.makeconftest(SAVE_AT_THE_END + (FAKE_H100 if gpu else ""))
    pytester.makepyfile(test_k=PERF_TEST)
    # the dry run is a CPU machine's, on a GPU machine too (--triton-interpret)
    run = pytester.runpytest if gpu else run_interpreted
    result = run("--triton-perf", "--triton-perf-allow-unchecked", "-p", "no:cacheprovider")
    # on CPU the body dry-runs, and the test skips as its target is unchecked
    result.assert_outcomes(**({"passed": 1} if gpu else {"skipped": 1}))
    path = pathlib.Path(re.search(r"SAVED (\S+)", result.stdout.str()).group(1))
    saved = storage.load(path)
    key = "H100-SXM-0123abcd" if gpu else "no-device"
    assert path.parent.name == key == saved.key
    assert saved.name == "cpu-ci"
    if gpu:
        [record] = saved.records
        assert record.nodeid == "test_k.py::test_copy" and len(record.measurements) == 1
    else:
        assert saved.records == []
        assert saved.rest["unchecked"][0]["nodeid"] == "test_k.py::test_copy"
    assert saved.versions["pytest_triton"] and saved.host
    assert saved.commit is None or len(saved.commit) == 40  # pytester's dir may be in no checkout
    assert storage.find("latest", pytester.path / "hist", saved.device) == path


def test_the_docs_snippet_runs(capsys, monkeypatch):
    from ._docs import ROOT
    page = (ROOT / "docs" / "regressions.md").read_text()
    [snippet] = re.findall(r"```python\n(.*?)```", page, re.S)
    monkeypatch.chdir(ROOT)
    exec(snippet, {})
    assert capsys.readouterr().out.split() == [
        "H100-SXM-e53cef81", "None", "75", "tests/test_compute_perf.py::test_matmul_square_speed[4096-fp16]"]
