"""Candidates timed interleaved (perf/timing.py `_sample`, `do_bench_each`): a GPU whose speed
drifts while candidates are timed must not pick among them by when each was timed. The GPU here
is a simulated clock: each launch advances it by its cost, which grows as the 'GPU' warms."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_triton.perf import timing


class _Clock:
    def __init__(self, drift_per_call: float):
        self.now = 0.0
        self.calls = 0
        self.drift = drift_per_call

    def launch(self, cost_ms: float):
        def fn():
            self.calls += 1
            self.now += cost_ms * (1 + self.drift * self.calls)
        return fn


class _Event:
    def __init__(self, clock):
        self.clock, self.t = clock, None

    def record(self):
        self.t = self.clock.now

    def elapsed_time(self, end):
        return end.t - self.t


@pytest.fixture
def clock(monkeypatch):
    c = _Clock(drift_per_call=2e-4)
    gpu = SimpleNamespace(event=lambda: _Event(c), sync=lambda: None, spin=lambda ms: None,
                          flush=lambda: None, torch=None)
    monkeypatch.setattr(timing._Gpu, "get", classmethod(lambda cls, device: gpu))
    return c


EVENTS = timing.Settings(max_time=0.0, min_samples=1, min_time=0.0, warm_ms=0.0,
                         graph_below_ms=0.0, read_gpu_state=False)


def _medians(samples):
    return [sorted(xs)[len(xs) // 2] for xs in samples]


def test_interleaved_candidates_share_the_drift(clock):
    a, b = _medians(timing._sample([clock.launch(1.0), clock.launch(1.0)], EVENTS, "cuda:0")[0])
    assert abs(a / b - 1) < 0.005  # equal costs come out equal


def test_a_faster_candidate_wins_despite_the_drift(clock):
    # 1% faster, timed second: one after the other, the drift makes it look slower
    slow, fast = clock.launch(1.0), clock.launch(0.99)
    one_by_one = [_medians(timing._sample([f], EVENTS, "cuda:0")[0])[0] for f in (slow, fast)]
    assert one_by_one[1] > one_by_one[0]  # the negative control: drift decided
    clock.calls = 0
    a, b = _medians(timing._sample([slow, fast], EVENTS, "cuda:0")[0])
    assert b < a


def test_do_bench_each_gives_a_median_per_candidate(clock, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(timing, "AUTOTUNE", EVENTS)
    ms = timing.do_bench_each([clock.launch(2.0), clock.launch(1.0), clock.launch(3.0)])
    assert len(ms) == 3 and ms[1] < ms[0] < ms[2]
    assert timing.do_bench_each([]) == []
