"""bench/scaling.py: the main job's pipeline on 1 and 2 "GPUs" (--dry: a stand-in suite on CPU
under xdist), each worker's busy and idle time read from the reports, and every outcome and
verdict compared with the one-GPU run's (a difference is named)."""

import importlib.util
import json
import pathlib
import subprocess
import sys
import types

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


def _made(n, wall, round_, outcome="passed", rc=0):
    return {"gpus": n, "round": round_, "wall_s": wall, "rc": rc, "outcomes": {"t.py::a": outcome},
            "verdicts": {}, "counts": {outcome: 1}, "worker_times": [], "device": "NVIDIA H200"}


def test_rounds_compare_with_their_own_one_gpu_run_and_the_medians_judge():
    mod = _module()
    configs = [_made(1, 150.0, 1), _made(4, 50.0, 1), _made(1, 160.0, 2), _made(4, 40.0, 2),
               _made(1, 140.0, 3), _made(4, 45.0, 3, outcome="failed", rc=1)]
    mod.compare(configs)
    assert [c["speedup"] for c in configs if c["gpus"] == 4] == [3.0, 4.0, round(140 / 45, 3)]
    assert configs[-1]["differences"] == ["outcome t.py::a: passed on 1 GPU, failed here"]
    one, four = mod.medians(configs)
    assert (one["median_s"], four["median_s"]) == (150.0, 45.0)
    assert four["speedup"] == round(150 / 45, 3) and (four["min_s"], four["max_s"]) == (40.0, 50.0)
    assert four["runs"] == 3 and four["of_linear"] == round(150 / 45 / 4, 3)
    md = mod.markdown(configs, False)
    assert "the main job on 1 and 4 GPUs of one host (`bench/scaling.py --repeat 3`)" in md
    assert "| 4 | 3 | 45.0 | 40.0-50.0 | 3.33x | 83% | 3.00x, 4.00x, 3.11x |" in md
    assert "| 2 | 4 | 40.0 | 4.00x |" in md and "What differs on 4 GPUs (round 3) from one:" in md


def test_the_medians_pair_only_rounds_run_to_their_end():
    mod = _module()
    # round 2's four-GPU run was stopped at the budget, round 3's one-GPU run too (its
    # four-GPU run, had it run, has nothing to pair with), round 4 was not run
    configs = [_made(1, 150.0, 1), _made(4, 50.0, 1),
               _made(1, 100.0, 2), _made(4, 20.0, 2, rc="stopped at the budget"),
               _made(1, 90.0, 3, rc="stopped at the budget"), _made(4, 30.0, 3),
               {"gpus": 1, "round": 4, "skipped": "the round: ~200 s expected"},
               {"gpus": 4, "round": 4, "skipped": "the round: ~200 s expected"}]
    mod.compare(configs)
    one, four = mod.medians(configs)
    assert (one["runs"], one["walls_s"]) == (2, [150.0, 100.0])
    assert (four["runs"], four["walls_s"], four["speedup"]) == (1, [50.0], 3.0)
    md = mod.markdown(configs, False)
    assert "| 4 | 4 | not run: the round: ~200 s expected |" in md
    # no one-GPU run to compare with: n/a, not a crash
    lone = [_made(4, 50.0, 1)]
    lone[0].update(speedup=None, of_linear=None, differences=[])
    assert "| 4 | 50.0 | n/a | n/a |" in mod.markdown(lone, False)


def test_a_run_saved_before_rounds_renders_as_one_round():
    mod = _module()
    old = [_made(1, 150.0, 1), _made(4, 50.0, 1)]
    for c in old:
        del c["round"]  # a scaling.json written before --repeat
    mod.compare(old)
    md = mod.markdown(old, False)
    assert "round" not in md and "median" not in md and "| 4 | 50.0 | 3.00x | 75% |" in md
    assert md == mod.markdown([{**c, "round": 1} for c in old], False)


def _stubbed(monkeypatch, mod, runs):
    """main() with run_one replaced: each run takes the next (wall, rc) of `runs` on a clock of
    its own, so the budget is decided without running anything."""
    made, saved, clock = [], [], [0.0]

    def run_one(n, folder, *, dry, suite, timeout, history=None, tag=""):
        wall, rc = next(runs)
        clock[0] += wall
        made.append((n, tag, history))
        return _made(n, wall, 0, rc=rc)

    monkeypatch.setattr(mod, "run_one", run_one)
    monkeypatch.setattr(mod, "read_one", lambda cfg: cfg)
    monkeypatch.setattr(mod, "save_durations", lambda cfg, h: saved.append(cfg["wall_s"]) or h)
    monkeypatch.setattr(mod, "bytecode_state", lambda: "as installed")
    monkeypatch.setattr(mod, "time", types.SimpleNamespace(time=lambda: clock[0]))
    return made, saved


def test_repeat_runs_the_rounds_in_turn_each_ordered_by_the_first_one_gpu_run(monkeypatch, tmp_path):
    mod = _module()
    made, saved = _stubbed(monkeypatch, mod, iter([(150.0, 0), (50.0, 0), (160.0, 0), (40.0, 0),
                                                   (155.0, 0), (45.0, 1)]))
    out = tmp_path / "scaling.json"
    assert mod.main(["--gpus", "4", "--configs", "4", "--repeat", "3", "--dir", str(tmp_path),
                     "--json", str(out)]) == 0
    assert [(n, tag) for n, tag, _ in made] == [(1, "-r1"), (4, "-r1"), (1, "-r2"), (4, "-r2"),
                                                (1, "-r3"), (4, "-r3")]
    history = made[1][2]
    assert made[0][2] is None and saved == [150.0]  # the first one-GPU run reads no history
    assert history and all(h == history for _, _, h in made[1:])
    doc = json.loads(out.read_text())
    assert doc["rounds"] == 3 and [c["round"] for c in doc["configurations"]] == [1, 1, 2, 2, 3, 3]
    assert doc["medians"][1]["speedup"] == round(155 / 45, 3)
    with pytest.raises(SystemExit):
        mod.main(["--gpus", "4", "--repeat", "0"])


def test_a_round_that_does_not_fit_the_budget_is_not_started(monkeypatch, tmp_path):
    mod = _module()
    # round 1: 100 s + 30 s of a 250 s budget; round 2 is expected to take ~143 s (round 1's own
    # wall times, a tenth over) of the 120 s left
    made, _ = _stubbed(monkeypatch, mod, iter([(100.0, 0), (30.0, 0)]))
    out = tmp_path / "scaling.json"
    mod.main(["--gpus", "4", "--configs", "4", "--repeat", "2", "--budget", "250",
              "--dir", str(tmp_path), "--json", str(out)])
    assert [(n, tag) for n, tag, _ in made] == [(1, "-r1"), (4, "-r1")]
    skipped = [c for c in json.loads(out.read_text())["configurations"] if c.get("skipped")]
    assert [(c["gpus"], c["round"]) for c in skipped] == [(1, 2), (4, 2)]
    assert skipped[0]["skipped"].startswith("the round: ~143 s expected, 120 s left")


def test_a_later_round_is_estimated_by_the_first_rounds_own_wall_times(monkeypatch, tmp_path):
    mod = _module()
    # 170 s left after round 1 (100 s + 30 s of 300 s): round 2 fits at ~143 s, where the
    # one-GPU run's estimate for the first round (a quarter over the linear share plus the
    # workers' start-up, for each configuration) would have said ~196 s
    assert sum(mod.expected(100.0, n) for n in (1, 4)) == pytest.approx(196.25)
    made, _ = _stubbed(monkeypatch, mod, iter([(100.0, 0), (30.0, 0), (104.0, 0), (31.0, 0)]))
    out = tmp_path / "scaling.json"
    mod.main(["--gpus", "4", "--configs", "4", "--repeat", "2", "--budget", "300",
              "--dir", str(tmp_path), "--json", str(out)])
    assert [(n, tag) for n, tag, _ in made] == [(1, "-r1"), (4, "-r1"), (1, "-r2"), (4, "-r2")]
    # a count the first round did not run is estimated from its one-GPU run
    assert mod.expected_again({1: 100.0}, 4) == mod.expected(100.0, 4)
    assert mod.expected_again({1: 100.0, 4: 30.0}, 4) == pytest.approx(33.0)


def test_a_round_whose_one_gpu_run_was_stopped_runs_no_more(monkeypatch, tmp_path):
    mod = _module()
    made, _ = _stubbed(monkeypatch, mod, iter([(100.0, 0), (30.0, 0), (90.0, "stopped at the "
                                                                            "budget")]))
    out = tmp_path / "scaling.json"
    mod.main(["--gpus", "4", "--configs", "4", "--repeat", "2", "--dir", str(tmp_path),
              "--json", str(out)])
    assert [(n, tag) for n, tag, _ in made] == [(1, "-r1"), (4, "-r1"), (1, "-r2")]
    last = json.loads(out.read_text())["configurations"][-1]
    assert (last["gpus"], last["round"]) == (4, 2)
    assert last["skipped"] == "its one-GPU run ended with rc=stopped at the budget"
