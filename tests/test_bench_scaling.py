"""bench/scaling.py: the main job's pipeline on 1 and 2 "GPUs" (--dry: a stand-in suite on CPU
under xdist), each worker's busy and idle time read from the reports, and every outcome and
verdict compared with the one-GPU run's (a difference is named)."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[1]
SCALING = ROOT / "bench" / "scaling.py"


def _module():
    spec = importlib.util.spec_from_file_location("scaling", SCALING)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.requires_plugin("pytest-xdist")
@pytest.mark.triton_no_gpu  # its runs are interpreted, in processes of their own
def test_the_dry_pipeline_runs_both_configurations_and_finds_them_the_same(tmp_path):
    out = tmp_path / "scaling.json"
    done = subprocess.run([sys.executable, str(SCALING), "--dry", "--dir", str(tmp_path / "runs"),
                           "--json", str(out), "--md", str(tmp_path / "scaling.md")],
                          capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    one, two = doc["configurations"]
    assert (one["gpus"], two["gpus"]) == (1, 2)
    # the stand-in suite's deliberate miss fails on both, and nothing else differs
    assert one["counts"] == two["counts"] == {"failed": 1, "passed": 5}
    assert two["differences"] == [] and two["speedup"] > 0
    # the one-GPU run keeps the collection order; its durations, saved, order the two-GPU run
    assert one["order"] is None and one["history"] == "saved", one
    assert two["order"]["saved"] == two["order"]["tests"] == 6, two["order"]
    assert [w["worker"] for w in one["worker_times"]] == ["this process"]
    assert sorted(w["worker"] for w in two["worker_times"]) == ["gw0", "gw1"]
    # the 1.5 s test makes its worker busy at least that long; the other worker ends first (by
    # how much depends on the machine: each worker's first test also pays its start)
    busiest = max(two["worker_times"], key=lambda w: w["busy_s"])
    other = min(two["worker_times"], key=lambda w: w["busy_s"])
    assert busiest["busy_s"] >= 1.5 and other["tail_s"] > busiest["tail_s"], two["worker_times"]
    # the process's time outside the session (start-up, the end) and each worker's on ceilings
    for cfg in (one, two):
        assert 0 <= cfg["before_s"] < cfg["wall_s"] and 0 <= cfg["after_s"] < cfg["wall_s"], cfg
        for w in cfg["worker_times"]:
            assert w["calibration_s"] >= 0 and 0 <= w["setup_s"] + w["teardown_s"] <= w["busy_s"], w
    md = (tmp_path / "scaling.md").read_text()
    assert "| 2 | gw1 |" in md and "| yes |" in md and "| saved durations |" in md


def test_a_changed_outcome_or_verdict_is_named():
    mod = _module()
    base = {"gpus": 1, "wall_s": 100.0, "outcomes": {"t.py::a": "passed", "t.py::b": "passed"},
            "verdicts": {"t.py::a gbps": "pass"}}
    same = {**base, "gpus": 2, "wall_s": 55.0}
    changed = {"gpus": 4, "wall_s": 30.0, "outcomes": {"t.py::a": "failed"},
               "verdicts": {"t.py::a gbps": "inconclusive"}}
    configs = [dict(base), same, changed]
    mod.compare(configs)
    assert same["differences"] == [] and same["speedup"] == pytest.approx(100 / 55, abs=1e-3)
    assert changed["differences"] == [
        "outcome t.py::a: passed on 1 GPU, failed here",
        "outcome t.py::b: passed on 1 GPU, (absent) here",
        "verdict t.py::a gbps: pass on 1 GPU, inconclusive here"]
    assert changed["of_linear"] == pytest.approx(100 / 30 / 4, abs=1e-3)


def test_the_configurations_are_one_two_and_all_or_those_chosen():
    mod = _module()
    assert mod.configurations(4) == [1, 2, 4] and mod.configurations(1) == [1]
    assert mod.configurations(2) == [1, 2]
    assert mod.configurations(4, "4") == [1, 4]  # the one-GPU run is always made
    assert mod.configurations(4, "2,8") == [1, 2]  # none over the host's GPUs


@pytest.mark.parametrize("env, state, words", [
    ({"PYTHONPYCACHEPREFIX": "compiled"}, "precompiled",
     "bytecode compiled before every configuration"),
    ({"PYTHONPYCACHEPREFIX": "empty"}, "cache filled by the runs", "was empty at the start"),
    ({"PYTHONDONTWRITEBYTECODE": "1"}, "not written", "every process compiles what it imports"),
    ({}, "as installed", None),
])
def test_the_tables_say_how_the_runs_got_their_bytecode(monkeypatch, tmp_path, env, state, words):
    pytest.importorskip("torch")
    mod = _module()
    for name in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cache = env.get("PYTHONPYCACHEPREFIX")
    if cache:  # a folder of its own; torch's bytecode in it only where compiled
        monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / cache))
        if cache == "compiled":
            target = pathlib.Path(mod.torch_bytecode(str(tmp_path / cache)))
            assert target.is_relative_to(tmp_path / cache)
            target.parent.mkdir(parents=True)
            target.write_bytes(b"")
    assert mod.bytecode_state() == state
    one = {"gpus": 1, "wall_s": 100.0, "outcomes": {"t.py::a": "passed"}, "verdicts": {},
           "counts": {"passed": 1}, "rc": 0, "worker_times": [], "device": "NVIDIA H200"}
    mod.compare([one])
    md = mod.markdown([one], False, state)
    assert (words in md) if words else ("bytecode" not in md)
