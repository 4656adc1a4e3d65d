"""The launch tuner (reference_kernels/_tuning.py): which candidate it launches, and when it times.
Timing itself needs a GPU; here it is replaced by given medians."""

from __future__ import annotations

import math
import os
import time
from types import SimpleNamespace

import pytest
import torch

from reference_kernels import _tuning, layernorm, softmax


@pytest.fixture
def fake_gpu(monkeypatch):
    """A 'GPU' on which timing is allowed and candidate i takes MS[i] ms (inf: fails to run)."""
    timed = []
    ms = {}

    def medians_ms(run, space, device):
        timed.extend(cfg["id"] for cfg in space)
        return [ms[cfg["id"]] for cfg in space]

    # one process's choices alone (the outer run's xdist workers would share them): a test of
    # sharing gives a run id of its own
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    monkeypatch.setattr(_tuning, "_may_time", lambda device, nbytes: nbytes >= _tuning.TUNE_MIN_BYTES)
    monkeypatch.setattr(_tuning, "_medians_ms", medians_ms)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(name=f"GPU {device}", multi_processor_count=132))
    return SimpleNamespace(ms=ms, timed=timed)


SPACE = [{"id": 0}, {"id": 1}, {"id": 2}]
BIG = _tuning.TUNE_MIN_BYTES


def test_the_fastest_candidate_is_chosen_once_per_device_and_key(fake_gpu):
    tuner = _tuning.LaunchTuner("k")
    fake_gpu.ms.update({0: 1.0, 1: 0.5, 2: 0.7})
    assert tuner.choose("gpu0", ("w", 4), SPACE, None, BIG)["id"] == 1
    assert tuner.choose("gpu0", ("w", 4), SPACE, None, BIG)["id"] == 1
    assert fake_gpu.timed == [0, 1, 2]  # timed once, then cached
    assert tuner.best_config == "id: 1"
    assert tuner.configs_timings == {"id: 0": 1.0, "id: 1": 0.5, "id: 2": 0.7}
    fake_gpu.ms.update({0: 0.1})
    assert tuner.choose("gpu1", ("w", 4), SPACE, None, BIG)["id"] == 0  # another GPU chooses anew
    assert tuner.choose("gpu0", ("w", 2), SPACE, None, BIG)["id"] == 0  # another key too


def test_workers_of_one_run_share_a_choice_and_another_gpu_model_times_its_own(fake_gpu, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", f"tuning-{os.getpid()}-{time.time_ns()}")
    fake_gpu.ms.update({0: 1.0, 1: 0.5, 2: 0.7})
    first = _tuning.LaunchTuner("shared")  # a new tuner: another worker's process
    assert first.choose("gpu0", ("w", 4), SPACE, None, BIG)["id"] == 1
    assert fake_gpu.timed == [0, 1, 2]
    fake_gpu.ms.update({0: 0.1})  # were it timed again, candidate 0 would win
    second = _tuning.LaunchTuner("shared")
    assert second.choose("gpu0", ("w", 4), SPACE, None, BIG)["id"] == 1
    assert fake_gpu.timed == [0, 1, 2]  # taken from the first, untimed
    assert second.configs_timings == {"id: 0": 1.0, "id: 1": 0.5, "id: 2": 0.7}
    # another GPU model (its name) and another launcher time their own
    assert second.choose("gpu1", ("w", 4), SPACE, None, BIG)["id"] == 0
    assert _tuning.LaunchTuner("other").choose("gpu0", ("w", 4), SPACE, None, BIG)["id"] == 0
    assert fake_gpu.timed == [0, 1, 2] * 3


def test_a_graph_capture_replays_the_eager_choice(fake_gpu, monkeypatch):
    # Inside a CUDA-graph capture nothing is timed: a key chosen before keeps its choice (the
    # perf tests time short kernels as graph replays of what the eager calls chose); a key never
    # timed takes the heuristic.
    tuner = _tuning.LaunchTuner("k")
    fake_gpu.ms.update({0: 1.0, 1: 0.5, 2: 0.7})
    assert tuner.choose("gpu0", ("w",), SPACE, None, BIG)["id"] == 1
    monkeypatch.setattr(_tuning, "_may_time", lambda device, nbytes: False)
    monkeypatch.setattr(_tuning, "_capturing", lambda device: True)
    assert tuner.choose("gpu0", ("w",), SPACE, None, BIG)["id"] == 1
    assert tuner.configs_timings == {"id: 0": 1.0, "id: 1": 0.5, "id: 2": 0.7}
    assert tuner.choose("gpu0", ("v",), SPACE, None, BIG)["id"] == 0
    monkeypatch.setattr(_tuning, "_capturing", lambda device: False)  # e.g. PYTEST_TRITON_TUNE=0
    assert tuner.choose("gpu0", ("w",), SPACE, None, BIG)["id"] == 0
    assert fake_gpu.timed == [0, 1, 2]


def test_small_problems_take_the_heuristic_untimed(fake_gpu):
    tuner = _tuning.LaunchTuner("k")
    fake_gpu.ms.update({0: 1.0, 1: 0.5, 2: 0.7})
    assert tuner.choose("gpu0", ("w",), SPACE, None, BIG - 1)["id"] == 0
    assert fake_gpu.timed == [] and tuner.configs_timings is None


def test_a_candidate_that_cannot_run_is_never_chosen(fake_gpu):
    tuner = _tuning.LaunchTuner("k")
    fake_gpu.ms.update({0: math.inf, 1: math.inf, 2: 3.0})
    assert tuner.choose("gpu0", ("w",), SPACE, None, BIG)["id"] == 2
    fake_gpu.ms.update({2: math.inf})
    assert tuner.choose("gpu0", ("v",), SPACE, None, BIG)["id"] == 0  # none ran: the heuristic raises


@pytest.fixture
def cuda_calls(monkeypatch):
    """torch.cuda's device context and synchronize as no-ops, for _medians_ms on a CPU."""
    import contextlib

    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)


def test_candidates_are_timed_interleaved_and_one_that_fails_is_set_aside(cuda_calls, monkeypatch):
    # The candidates are timed together (do_bench_each), not one after another, so that the
    # GPU's drift over the seconds of tuning does not choose among configs a percent apart.
    ran, each = [], []

    def run(cfg):
        ran.append(cfg["id"])
        if cfg["id"] == 1:
            raise RuntimeError("out of shared memory")

    def bench_each(fns):
        each.append(len(fns))
        for f in fns:
            f()
        return [float(10 + i) for i in range(len(fns))]

    monkeypatch.setattr(_tuning, "do_bench_each", bench_each)
    monkeypatch.setattr(_tuning, "_median_ms", lambda *a: pytest.fail("timed alone"))
    assert _tuning._medians_ms(run, SPACE, "gpu0") == [10.0, math.inf, 11.0]
    assert each == [2]  # one interleaved timing of the two that ran
    assert ran == [0, 1, 2, 0, 2]


def test_each_candidate_is_timed_alone_if_the_interleaved_timing_fails(cuda_calls, monkeypatch):
    def bench_each(fns):
        raise RuntimeError("a candidate broke a CUDA graph")

    monkeypatch.setattr(_tuning, "do_bench_each", bench_each)
    monkeypatch.setattr(_tuning, "_median_ms", lambda run, cfg, device: float(cfg["id"]))
    assert _tuning._medians_ms(lambda cfg: None, SPACE, "gpu0") == [0.0, 1.0, 2.0]


def test_untimed_under_the_interpreter_and_when_switched_off(monkeypatch):
    monkeypatch.setattr(_tuning, "interpreting", lambda: False)
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert _tuning._may_time(cuda, BIG)
    monkeypatch.setenv("PYTEST_TRITON_TUNE", "0")
    assert not _tuning._may_time(cuda, BIG)
    monkeypatch.delenv("PYTEST_TRITON_TUNE")
    monkeypatch.setattr(_tuning, "interpreting", lambda: True)
    assert not _tuning._may_time(cuda, BIG)
    assert not _tuning._may_time(torch.device("cpu"), BIG)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("cols", [100, 1024, 4096, 16384, 65536])
def test_spaces_start_with_the_heuristic_and_hold_valid_configs(dtype, cols, monkeypatch):
    monkeypatch.setattr(softmax, "interpreting", lambda: False)  # the GPU's spaces
    monkeypatch.setattr(layernorm, "interpreting", lambda: False)
    rows = 1 << 20
    cases = [(softmax.softmax_space(rows, cols, dtype, p), softmax.softmax_config(rows, cols, dtype, p))
             for p in (False, True)]
    cases.append((layernorm.layernorm_space(rows, cols, dtype),
                  layernorm.layernorm_config(rows, cols, dtype)))
    for spaces, heuristic in cases:
        assert spaces[0] == heuristic
        assert len(spaces) == len({tuple(sorted(c.items())) for c in spaces})  # no duplicates
        for cfg in spaces:
            assert set(cfg) == set(heuristic)
            for key in ("BLOCK_N", "ROWS", "num_warps"):
                assert cfg[key] & (cfg[key] - 1) == 0, cfg  # powers of two
            assert 1 <= cfg["num_warps"] <= 32
            assert cfg["SPLIT"] or cfg["BLOCK_N"] >= cols or cfg["BLOCK_N"] == heuristic["BLOCK_N"]


def test_timing_gives_an_in_place_output_its_values_back(fake_gpu, monkeypatch):
    # Timing launches each candidate many times: in place (out is x), x became the result of
    # dozens of launches (on the H100, vector_add's in-place test read 2042.4 for 1.07). The
    # tensors a launch writes get their values back once the candidates are timed.
    x = torch.arange(4.0)

    def run(cfg):
        x.mul_(2.0)  # an in-place launch: its output is its input

    def medians_ms(run_, space, device):
        for cfg in space:
            for _ in range(3):
                run_(cfg)
        return [float(cfg["id"] + 1) for cfg in space]

    monkeypatch.setattr(_tuning, "_medians_ms", medians_ms)
    tuner = _tuning.LaunchTuner("k")
    assert tuner.choose("gpu0", ("w",), SPACE, run, BIG, restore=(x,))["id"] == 0
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    tuner.choose("gpu0", ("v",), SPACE, run, BIG)  # the negative control: nothing restored
    assert x.tolist() != [0.0, 1.0, 2.0, 3.0]


def _autotuners():
    """Every triton.autotune kernel the bundled modules define at import, by qualified name."""
    import importlib
    import pkgutil

    from triton.runtime.autotuner import Autotuner

    import reference_kernels

    found = {}
    for info in pkgutil.iter_modules(reference_kernels.__path__):
        if info.name == "tests":
            continue
        module = importlib.import_module(f"reference_kernels.{info.name}")
        for name, value in vars(module).items():
            values = value.values() if isinstance(value, dict) else [value]
            for i, v in enumerate(values):
                if isinstance(v, Autotuner):
                    found[f"{info.name}.{name}" + (f"[{i}]" if isinstance(value, dict) else "")] = v
    return found


@pytest.mark.skipif(not _tuning.autotune_kwargs(), reason="this Triton's autotune takes no do_bench")
def test_every_autotuned_kernel_chooses_with_the_gates_timing():
    # Triton's default timing and the perf gate disagreed on the vector add's tile on an H200: the
    # config it chose missed the test's parity with torch.add, where another met it.
    found = _autotuners()
    assert {"vector_add._vector_add_kernel", "fused._add_mul_kernel",
            "conv2d._conv2d_kernel"} <= set(found), sorted(found)
    plugin_timing = _tuning.autotune_kwargs()["do_bench"]
    # where the Autotuner keeps the do_bench it was given (Triton's own attribute, not an API)
    attr = next((a for a in ("_do_bench", "do_bench") if hasattr(found["conv2d._conv2d_kernel"], a)),
                None)
    if attr is None:
        pytest.skip("this Triton's Autotuner keeps its do_bench under no name known here")
    others = sorted(name for name, tuner in found.items()
                    if getattr(tuner, attr) is not plugin_timing)
    assert not others, f"autotuned with Triton's default timing, not the gate's: {others}"


def _tuned_add(calls_per_config: int):
    """The vector add's kernel under Triton's own Autotuner, with two configs and a do_bench that
    launches each `calls_per_config` times, as tuning on a GPU does (the interpreter has no timer:
    the bundled autotuners keep one config there and never tune)."""
    import triton

    from reference_kernels import vector_add

    def do_bench(kernel_call, quantiles=None):
        for _ in range(calls_per_config):
            kernel_call()
        return [1.0, 1.0, 1.0]

    configs = [triton.Config({"BLOCK_SIZE": 64}), triton.Config({"BLOCK_SIZE": 128})]
    return triton.autotune(configs=configs, key=["n_elements"], do_bench=do_bench,
                           **_tuning.in_place_hooks("out_ptr", "x_ptr", "y_ptr"))(
        vector_add._vector_add_kernel.fn)


def _device() -> str:
    """Where the kernels run: the GPU, or the CPU under Triton's interpreter."""
    from pytest_triton import interpreting

    return "cpu" if interpreting() else "cuda"


def _launch(kernel, x, y, out):
    n = x.numel()
    kernel[lambda meta: (-(-n // meta["BLOCK_SIZE"]),)](x, y, out, n, 1, 1, 1)


def test_in_place_hooks_tune_an_in_place_launch_once(monkeypatch):
    # out is x: every timed launch starts from x's values, so after tuning (2 configs x 3 timed
    # launches) the caller's launch adds y exactly once
    kernel = _tuned_add(calls_per_config=3)
    x = torch.arange(300, dtype=torch.float32, device=_device())
    y = torch.full((300,), 0.5, device=_device())
    expected = x + y
    _launch(kernel, x, y, x)
    torch.testing.assert_close(x, expected, rtol=0, atol=0)


def test_in_place_hooks_copy_nothing_when_the_output_is_not_an_input(monkeypatch):
    # Triton's restore_value clones the output around every timed launch, which more than doubles
    # a streaming kernel's traffic while it is tuned and hides the differences between tiles
    clones = []
    real_clone = torch.Tensor.clone
    monkeypatch.setattr(torch.Tensor, "clone",
                        lambda self, *a, **k: clones.append(self.shape) or real_clone(self, *a, **k))
    kernel = _tuned_add(calls_per_config=3)
    x = torch.arange(300, dtype=torch.float32, device=_device())
    y, out = torch.ones(300, device=_device()), torch.empty(300, device=_device())
    _launch(kernel, x, y, out)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    assert clones == []


def test_no_bundled_autotuner_restores_its_output_around_every_timed_launch():
    # restore_value=[...] copies the output twice per timed launch whatever it aliases: the
    # bundled kernels use in_place_hooks, which copy only for an in-place call
    import importlib
    import pkgutil

    from triton.runtime.autotuner import Autotuner

    import reference_kernels

    restoring = []
    for info in pkgutil.iter_modules(reference_kernels.__path__):
        if info.name == "tests":
            continue
        module = importlib.import_module(f"reference_kernels.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Autotuner) and obj.restore_value:
                restoring.append(f"{info.name}.{name}")
    assert restoring == []


class _FakeAutotuner:
    """What launch_autotuned reads of Triton's Autotuner: tuning a new key (its first argument)
    times every config one after another (`drifted`: the GPU's clock moving meanwhile) and keeps
    the fastest; `launched` and `hooks` record what ran."""

    arg_names = ["n", "x"]

    def __init__(self, configs, drifted, untimed=()):
        self.configs, self.drifted, self.untimed = configs, drifted, set(untimed)
        self.cache, self.configs_timings, self.best_config = {}, None, None
        self.launched, self.hooks = [], []
        self.fn = SimpleNamespace(run=self._run)

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            if args[0] in self.untimed and args[0] not in self.cache:
                self.cache[args[0]] = self.configs[0]  # pruned to one: chosen untimed
            elif args[0] not in self.cache:
                self.configs_timings = {c: [ms, ms, ms] for c, ms in zip(self.configs, self.drifted)}
                self.cache[args[0]] = min(self.configs_timings, key=self.configs_timings.get)
            self.best_config = self.cache[args[0]]
            return self._run(*args, grid=grid, warmup=False, **kwargs, **self.best_config.all_kwargs())
        return call

    def _run(self, *args, grid, warmup, **kwargs):
        self.launched.append(kwargs["BLOCK"])

    def pre_hook(self, nargs, reset_only=False):
        self.hooks.append(("pre", nargs["BLOCK"]))

    def post_hook(self, nargs, exception):
        self.hooks.append(("post", nargs["BLOCK"]))


@pytest.fixture
def true_ms(monkeypatch):
    """Timing on a 'GPU' whose clock holds still: config BLOCK=b takes TRUE[b] ms; what was timed."""
    true = {}
    timed = []

    def medians_ms(run, space, device):
        for cfg in space:
            run(cfg)
        timed.append([cfg.kwargs["BLOCK"] for cfg in space])
        return [true[cfg.kwargs["BLOCK"]] for cfg in space]

    monkeypatch.setattr(_tuning, "interpreting", lambda: False)
    monkeypatch.setattr(_tuning, "_medians_ms", medians_ms)
    return SimpleNamespace(ms=true, timed=timed)


def _configs(*blocks):
    import triton

    return [triton.Config({"BLOCK": b}) for b in blocks]


def test_a_choice_the_gpus_drift_made_is_confirmed_interleaved(true_ms):
    # timed one after another, 128 ran while the clock was high and came out 2% ahead of 256,
    # which is 6% faster on a steady clock; 64 was far behind either way
    tuner = _FakeAutotuner(_configs(64, 128, 256), drifted=[1.5, 0.98, 1.0])
    true_ms.ms.update({64: 1.5, 128: 1.06, 256: 1.0})
    _tuning.launch_autotuned(tuner, (1,), 4096, torch.empty(1))
    assert true_ms.timed == [[128, 256]]  # the finalists, fastest first; 64 is out of the band
    assert tuner.cache[4096].kwargs == {"BLOCK": 256} and tuner.best_config.kwargs == {"BLOCK": 256}
    assert {c.kwargs["BLOCK"]: t[0] for c, t in tuner.configs_timings.items()} == {
        64: 1.5, 128: 1.06, 256: 1.0}
    # the call itself, each finalist once, then the choice again: its output is the result
    assert tuner.launched == [128, 128, 256, 256]
    # each timed launch between the tuner's hooks, as Triton's own tuning launches it
    assert tuner.hooks == [("pre", 128), ("post", 128), ("pre", 256), ("post", 256)]
    tuner.launched.clear()
    _tuning.launch_autotuned(tuner, (1,), 4096, torch.empty(1))  # the key is tuned: nothing is timed again
    assert true_ms.timed == [[128, 256]] and tuner.launched == [256]
    # a key Triton chose for untimed (pruned to one config) keeps the last key's configs_timings:
    # nothing is confirmed from them
    tuner.untimed.add(16)
    tuner.launched.clear()
    _tuning.launch_autotuned(tuner, (1,), 16, torch.empty(1))
    assert tuner.cache[16].kwargs == {"BLOCK": 64} and tuner.launched == [64]
    assert true_ms.timed == [[128, 256]]


def test_a_confirmed_choice_that_stands_and_a_lone_finalist_time_nothing_more(true_ms):
    tuner = _FakeAutotuner(_configs(128, 256), drifted=[1.0, 1.05])
    true_ms.ms.update({128: 1.0, 256: 1.05})
    _tuning.launch_autotuned(tuner, (1,), 1, torch.empty(1))
    assert tuner.cache[1].kwargs == {"BLOCK": 128} and true_ms.timed == [[128, 256]]
    alone = _FakeAutotuner(_configs(128, 256), drifted=[1.0, 1.5])  # 256 out of the band
    _tuning.launch_autotuned(alone, (1,), 1, torch.empty(1))
    assert alone.cache[1].kwargs == {"BLOCK": 128} and true_ms.timed == [[128, 256]]


def test_the_finalists_are_the_fastest_few_within_the_band():
    cfgs = _configs(1, 2, 3, 4, 5, 6)
    timings = dict(zip(cfgs, [[1.0], [1.02], [float("inf")], [1.09], [1.05], [1.08]]))
    assert [c.kwargs["BLOCK"] for c in _tuning.finalists(timings)] == [1, 2, 5, 6][:_tuning.CONFIRM_MAX]
    assert _tuning.finalists(dict(zip(cfgs[:2], [[1.0], [1.2]]))) == []
    assert _tuning.finalists({}) == []


def test_no_confirmation_inside_a_graph_capture(true_ms, monkeypatch):
    monkeypatch.setattr(_tuning, "_capturing", lambda device: True)
    tuner = _FakeAutotuner(_configs(128, 256), drifted=[0.98, 1.0])
    true_ms.ms.update({128: 1.06, 256: 1.0})
    _tuning.launch_autotuned(tuner, (1,), 1, torch.empty(1))
    assert tuner.cache[1].kwargs == {"BLOCK": 128} and true_ms.timed == [] and tuner.launched == [128]


def test_no_confirmation_under_the_interpreter(true_ms, monkeypatch):
    monkeypatch.setattr(_tuning, "interpreting", lambda: True)
    tuner = _FakeAutotuner(_configs(128, 256), drifted=[0.98, 1.0])
    true_ms.ms.update({128: 1.06, 256: 1.0})
    _tuning.launch_autotuned(tuner, (1,), 1, torch.empty(1))
    assert tuner.cache[1].kwargs == {"BLOCK": 128} and true_ms.timed == []


def test_the_compute_bound_kernels_launch_their_autotuners_through_the_confirmation():
    import inspect

    from reference_kernels import attention, conv2d, matmul

    for module in (matmul, attention, conv2d):
        source = inspect.getsource(module)
        assert "launch_autotuned(" in source, module.__name__
        assert "_AUTOTUNED[chosen][grid](" not in source and "_conv2d_kernel[grid](" not in source
