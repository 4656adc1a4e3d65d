"""--triton-autotune=heuristic|first (correctness/pinning.py, env/autotune_pin.py): correctness
tests run each autotuner with one config, untimed, while perf tests autotune and
assert_every_config checks every config; under the interpreter, assert_every_config checks configs
that differ only in launch parameters once, and says so."""

import pytest
import torch
import triton
import triton.language as tl

from pytest_triton import assert_close, assert_every_config, interpreting
from pytest_triton.correctness import call_record, pinning

from . import _fake_gpu

# An autotuner over a kernel that is not interpreted, as on a GPU: its do_bench (Triton's
# benchmarker there) records each config it times instead of timing it, so the CPU suite sees
# whether a run autotunes.
LIBRARY = '''
import triton
from triton.runtime.autotuner import Autotuner

BENCHED, RAN = [], []


def _body(x, n, BLOCK):
    pass


class Launcher:
    """Stands for a compiled JITFunction: records the BLOCK of each launch."""
    fn = staticmethod(_body)

    def run(self, *args, **kwargs):
        RAN.append(kwargs["BLOCK"])


def bench(kernel_call, quantiles):
    kernel_call()
    BENCHED.append(RAN[-1])
    return [1.0 / RAN[-1]] * 3  # the largest block is the fastest


def prune(configs, nargs, **kwargs):  # as libraries prune: no block larger than the problem
    return [c for c in configs if c.kwargs["BLOCK"] <= nargs["n"]]


CONFIGS = [triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 32})]
tuned = Autotuner(Launcher(), ["x", "n"], CONFIGS, key=["n"], reset_to_zero=None,
                  restore_value=None, prune_configs_by={"early_config_prune": prune}, do_bench=bench)
'''

TESTS = '''
import pytest
from pytest_triton import assert_every_config, perf_target
from triton.runtime.autotuner import Autotuner
import library
from library import BENCHED, RAN, tuned


class LibraryTuner(Autotuner):  # a library's own autotuner class, overriding run (as FlagGems')
    def run(self, *args, **kwargs):
        if len(self.configs) > 1:
            BENCHED.append("own tuning")
            return self.fn.run(*args, **kwargs, **self.configs[-1].all_kwargs())
        return self.fn.run(*args, **kwargs, **self.configs[0].all_kwargs())


own = LibraryTuner(library.Launcher(), ["x", "n"], library.CONFIGS, key=["n"], reset_to_zero=None,
                   restore_value=None, prune_configs_by={"early_config_prune": library.prune})


def test_correctness():
    del BENCHED[:], RAN[:]
    tuned.run(0, 100, grid=(1,))
    own.run(0, 100, grid=(1,))
    with open("seen.txt", "w") as f:
        f.write(repr((list(BENCHED), list(RAN))))


def test_every_config():
    del RAN[:]
    assert_every_config(tuned, lambda: tuned.run(0, 100, grid=(1,)))
    assert RAN == [256, 64, 32]


@perf_target(max_ms=1.0)
def test_speed(triton_bench):
    del BENCHED[:]
    triton_bench(lambda: tuned.run(0, 1000, grid=(1,)))
    assert BENCHED == [256, 64, 32]  # a perf test autotunes
'''


@pytest.fixture
def run(pytester):
    pytester.makepyfile(library=LIBRARY, test_lib=TESTS)

    def run_with(*args):
        result = pytester.runpytest("-p", "no:cacheprovider", "--triton-supervise=off", *args)
        seen = eval((pytester.path / "seen.txt").read_text())
        return result, seen

    return run_with


def test_by_default_correctness_tests_autotune(run):
    result, (benched, ran) = run()
    result.assert_outcomes(passed=2, skipped=1)  # the perf test dry-runs (no GPU)
    assert benched == [64, 32, "own tuning"]  # every config the pruning keeps is timed
    assert ran == [64, 32, 64, 32]  # ... then the fastest runs; the library's own picks the last


@pytest.mark.parametrize("how, block", [("heuristic", 64), ("first", 256)])
def test_pinned_correctness_tests_run_one_config_untimed(run, how, block):
    result, (benched, ran) = run(f"--triton-autotune={how}", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    assert benched == []  # nothing timed, Triton's autotuner nor the library's own class
    assert ran == [block, block]  # heuristic: the first the pruning keeps for n=100; first: the first
    result.stdout.fnmatch_lines([f"pytest-triton: --triton-autotune={how}: in correctness tests *"])


def test_the_ini_twin_and_a_bad_value(run, pytester):
    pytester.makeini("[pytest]\ntriton_autotune = heuristic\n")
    result, (benched, ran) = run()
    assert benched == [] and ran == [64, 64]
    pytester.makeini("[pytest]\ntriton_autotune = fastest\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*triton_autotune = 'fastest': expected one of full, heuristic, first*"])


def test_perf_tests_still_autotune(run, pytester):
    pytester.makeconftest(_fake_gpu.CONFTEST)
    result, (benched, ran) = run("--triton-perf", "--triton-autotune=heuristic")
    result.assert_outcomes(passed=3)  # test_speed asserts that every config was timed
    assert benched == []


def test_a_failing_pinned_test_names_the_config_it_ran(pytester):
    pytester.makepyfile(library=LIBRARY, test_fail='''
from library import tuned
def test_fails():
    tuned.run(0, 100, grid=(1,))
    assert False
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--triton-supervise=off",
                                "--triton-autotune=heuristic")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- pytest-triton autotune -*",
                                 "autotuners ran one config, untimed (--triton-autotune=heuristic):",
                                 "_body: BLOCK: 64, num_warps: 4*(heuristic)"])


# --- assert_every_config under the interpreter: configs it cannot tell apart ------------------------

@triton.jit
def _triple_kernel(x_ptr, out_ptr, n, SKIP_LAST: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if SKIP_LAST and pid == tl.num_programs(0) - 1:
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 3.0 * tl.load(x_ptr + offs, mask=mask), mask=mask)


WARPS = [triton.Config({"BLOCK": 256, "SKIP_LAST": False}, num_warps=1, num_stages=1),
         triton.Config({"BLOCK": 256, "SKIP_LAST": False}, num_warps=4, num_stages=1),
         triton.Config({"BLOCK": 512, "SKIP_LAST": False}, num_warps=4, num_stages=2),
         triton.Config({"BLOCK": 512, "SKIP_LAST": False}, num_warps=8, num_stages=3),
         triton.Config({"BLOCK": 256, "SKIP_LAST": False}, num_warps=8, num_stages=4)]
triple = triton.autotune(configs=WARPS, key=["n"])(_triple_kernel)


def triple_of(x):
    out = torch.empty_like(x)
    triple[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out


def test_configs_differing_only_in_launch_parameters_run_once_under_the_interpreter(make_tensor):
    x = make_tensor(1000)
    ran = []

    def check():
        ran.append(triple.configs[0])
        assert_close(triple_of(x), 3 * x.double())

    assert_every_config(triple, check)
    if not interpreting():
        assert ran == WARPS  # a GPU compiles each: all run
        return
    assert ran == [WARPS[0], WARPS[2]]
    # one count with one meaning (issue 32): the five are checked, two of them ran
    notes = [n for n in call_record.CURRENT.get().notes if "assert_every_config" in n]
    assert notes[-1] == (
        "assert_every_config: checked 5 of 5 configs of _triple_kernel (interpreter): 2 of the 5 "
        "ran under Triton's interpreter; the other 3 differ from one that ran only in num_stages, "
        "num_warps, which the interpreter ignores, and count as checked with it (configs 1, 4 as "
        "config 0; config 3 as config 2); a GPU runs all 5")
    assert len(notes) == 1


def test_the_failure_says_which_configs_were_not_run_again(make_tensor):
    broken = WARPS[:2] + [triton.Config({"BLOCK": 512, "SKIP_LAST": True}, num_warps=4),
                          triton.Config({"BLOCK": 512, "SKIP_LAST": True}, num_warps=8)]
    x = make_tensor(1000)
    with pytest.raises(AssertionError) as info:
        assert_every_config(triple, lambda: assert_close(triple_of(x), 3 * x.double()),
                            configs=broken)
    lines = str(info.value).splitlines()
    assert lines[1] == "config 2 of 4: BLOCK=512, SKIP_LAST=True, num_warps=4, num_stages=3"
    if interpreting():
        assert lines[0].startswith("1 of 4 configs of _triple_kernel fail this check")
        assert lines[-2:] == [
            "passed: config 0 of 4",
            "2 of the 4 ran under Triton's interpreter; the other 2 differ from one that ran only "
            "in num_warps, which the interpreter ignores, and count as checked with it (config 1 "
            "as config 0; config 3 as config 2); a GPU runs all 4"]
    else:
        assert lines[0].startswith("2 of 4 configs of _triple_kernel fail this check")


def test_configs_whose_meta_parameters_or_pre_hooks_differ_are_all_distinct(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    hook = lambda nargs: None  # noqa: E731
    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32}),
               triton.Config({"BLOCK": 16}, pre_hook=hook), triton.Config({"BLOCK": 16}, num_ctas=2),
               triton.Config({"BLOCK": 32}, maxnreg=128)]
    same = pinning.interpreter_duplicates(configs)
    assert same == {3: 0, 4: 1}
    assert pinning.duplicates_note(configs, same).startswith(
        "3 of the 5 ran under Triton's interpreter; the other 2 differ from one that ran only in "
        "maxnreg, num_ctas, which")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert pinning.interpreter_duplicates(configs) == {}


def test_the_heuristic_is_the_autotuners_own_pruning_perf_model_included():
    from triton.runtime.autotuner import Autotuner

    from pytest_triton.env import autotune_pin

    class Launcher:
        fn = staticmethod(lambda x, n, BLOCK: None)

    configs = [triton.Config({"BLOCK": b}) for b in (512, 256, 64, 32)]
    prune = lambda configs, nargs, **kw: [c for c in configs if c.kwargs["BLOCK"] <= nargs["n"]]  # noqa: E731
    model = lambda x, n, BLOCK, **kw: abs(BLOCK - 64)  # noqa: E731 - estimates BLOCK=64 fastest
    tuner = Autotuner(Launcher(), ["x", "n"], configs, key=["n"], reset_to_zero=None,
                      restore_value=None, prune_configs_by={"early_config_prune": prune,
                                                            "perf_model": model, "top_k": 2})
    assert autotune_pin.choose(tuner, (0, 300), {}, "heuristic").kwargs == {"BLOCK": 64}
    assert autotune_pin.choose(tuner, (0, 300), {}, "first").kwargs == {"BLOCK": 512}

    def needs_a_gpu(**kwargs):
        raise RuntimeError("0 active drivers")  # a perf model under the interpreter

    tuner.perf_model = needs_a_gpu  # passed over: the early pruning's first
    assert autotune_pin.choose(tuner, (0, 300), {}, "heuristic").kwargs == {"BLOCK": 256}
    tuner.early_config_prune = lambda *a, **k: 1 / 0  # the library's own pruning errors are its own
    with pytest.raises(ZeroDivisionError):
        autotune_pin.choose(tuner, (0, 300), {}, "heuristic")


# --- on a GPU: a real autotuner, timed or not --------------------------------------------------------

GPU_TESTS = '''
import torch
import triton
import triton.language as tl

from pytest_triton import assert_close


def _prune(configs, nargs, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= 4 * nargs["n"]]


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in
                          ((4096, 8), (1024, 4), (256, 2), (128, 1))],
                 key=["n"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_double(make_tensor):
    x = make_tensor(300)
    out = torch.empty_like(x)
    _double_kernel[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, out, 300)
    assert_close(out, 2 * x.double())
    timed = getattr(_double_kernel, "configs_timings", None)
    with open("seen.txt", "w") as f:
        f.write(repr((len(timed) if timed else 0, _double_kernel.best_config.kwargs["BLOCK"])))
'''


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: Triton's autotuner "
                    "times configs there")
@pytest.mark.parametrize("how, expected", [("full", (3, None)), ("heuristic", (0, 1024)),
                                           ("first", (0, 4096))])
def test_on_a_gpu_a_pinned_autotuner_times_nothing(pytester, how, expected):
    pytester.makepyfile(test_gpu=GPU_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--triton-autotune={how}")
    result.assert_outcomes(passed=1)
    timed, block = eval((pytester.path / "seen.txt").read_text())
    assert timed == expected[0]  # full: the 3 configs the pruning keeps for n=300 were timed
    if expected[1] is not None:
        assert block == expected[1]


def test_declared_configs_the_interpreter_cannot_tell_from_the_one_it_ran_count_as_checked(
        make_tensor, monkeypatch):
    # issue 32: the summary promised that --triton-all-configs "checks every one" where every
    # config it would pin differs from the one that ran only in num_warps: nothing new to run
    if not interpreting():
        pytest.skip("a GPU runs every config")
    from pytest_triton import autotune_configs

    configs = autotune_configs(WARPS[:2], interpreter=WARPS[0])
    monkeypatch.setattr(triple, "configs", configs)
    x = make_tensor(1000)
    assert_every_config(triple, lambda: assert_close(triple_of(x), 3 * x.double()))
    rec = call_record.CURRENT.get().configs_checked[-1]
    assert (rec["checked"], rec["total"], rec["reason"]) == (2, 2, None)
    assert "1 of them differs from the one that ran only in launch parameters" in \
        call_record.CURRENT.get().notes[-1]
