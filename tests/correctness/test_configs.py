"""Every config of an autotuned kernel: pin_config, config_params, assert_every_config (each
config run, outputs re-poisoned before each, failures named), and their errors."""

import subprocess
import sys

import pytest
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from pytest_triton import (
    assert_close,
    assert_every_config,
    autotune_configs,
    config_id,
    config_params,
    pin_config,
)

CONFIGS = [triton.Config({"BLOCK": 16, "WRITE": True}, num_warps=1, num_stages=1),
           triton.Config({"BLOCK": 32, "WRITE": False}, num_warps=2, num_stages=1),
           triton.Config({"BLOCK": 64, "WRITE": True}, num_warps=4, num_stages=2)]


@triton.jit
def _double_kernel(
    x_ptr,  # *in* n
    out_ptr,  # *out* n
    n,
    WRITE: tl.constexpr,  # the bug of CONFIGS[1]: it writes nothing
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if WRITE:
        tl.store(out_ptr + offs, 2 * x, mask=offs < n)


double_kernel = triton.autotune(configs=CONFIGS, key=["n"])(_double_kernel)


def double(x, out):
    double_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out


def test_config_ids_and_params():
    assert config_id(CONFIGS[2]) == "BLOCK=64, WRITE=True, num_warps=4, num_stages=2"
    params = config_params(double_kernel)
    assert [p.id for p in params] == [
        "BLOCK=16-WRITE=True-num_warps=1-num_stages=1", "BLOCK=32-WRITE=False-num_warps=2-num_stages=1",
        "BLOCK=64-WRITE=True-num_warps=4-num_stages=2"]
    assert [p.values[0] for p in params] == CONFIGS


def test_pin_config_launches_that_config_and_restores_the_autotuner(make_tensor):
    x = make_tensor(100)
    out = make_tensor.poisoned_like(x)
    with pin_config(double_kernel, CONFIGS[2]):
        double(x, out)
        assert double_kernel.best_config is CONFIGS[2]
    assert double_kernel.configs == CONFIGS
    assert_close(out, 2 * x.double())
    with pytest.raises(RuntimeError), pin_config(double_kernel, CONFIGS[0]):
        raise RuntimeError("a failing check")
    assert double_kernel.configs == CONFIGS


def test_every_config_is_checked_into_a_repoisoned_output_and_the_failure_names_it(make_tensor):
    x = make_tensor(100)
    out = make_tensor.poisoned_like(x)
    check = lambda: assert_close(double(x, out), 2 * x.double())
    with pytest.raises(AssertionError) as info:
        assert_every_config(double_kernel, check, outputs=[out])
    lines = str(info.value).splitlines()
    assert lines[0] == ("1 of 3 configs of _double_kernel fail this check (every config the "
                        "autotuner holds, pruned ones included: any of them may be picked for some "
                        "shape):")
    assert lines[1] == "config 1 of 3: BLOCK=32, WRITE=False, num_warps=2, num_stages=1"
    assert lines[2] == f"    AssertionError: Tensors are not close (torch.float32, shape (100,), on {x.device})."
    assert lines[3] == "    Mismatched elements: 100 / 100 (100%)"
    assert lines[-1] == "passed: configs 0, 2 of 3"
    # Without re-poisoning, the config that writes nothing passes on what the one before left.
    assert_every_config(double_kernel, check)
    # Only the given configs: both right.
    assert_every_config(double_kernel, check, outputs=[out], configs=[CONFIGS[0], CONFIGS[2]])


def test_a_check_that_never_launches_the_kernel_fails_every_config(make_tensor):
    x = make_tensor(100)
    out = make_tensor.poisoned_like(x)
    with pytest.raises(AssertionError) as info:  # compares x with itself: no launch
        assert_every_config(double_kernel, lambda: assert_close(x, x.double()), outputs=[out])
    lines = str(info.value).splitlines()
    assert lines[0].startswith("3 of 3 configs of _double_kernel fail this check")
    assert lines[2] == ("    AssertionError: check() never launched _double_kernel, so this config "
                        "was not exercised: call the kernel (or the function that launches it) "
                        "inside check")
    assert "run" not in double_kernel.__dict__  # the counting wrapper is gone
    with pin_config(double_kernel, CONFIGS[0]):
        double(x, out)  # and the kernel launches as before
    assert_close(out, 2 * x.double())


def test_a_config_that_cannot_run_is_listed_and_fails_only_if_none_can(make_tensor):
    x = make_tensor(10)
    out = make_tensor.poisoned_like(x)

    def check():
        if double_kernel.configs[0].kwargs["BLOCK"] == 64:
            raise OutOfResources(300000, 232448, "shared memory")
        assert_close(double(x, out), 2 * x.double())

    configs = [CONFIGS[0], CONFIGS[2]]
    assert_every_config(double_kernel, check, outputs=[out], configs=configs)
    with pytest.raises(AssertionError) as info:
        assert_every_config(double_kernel, check, outputs=[out], configs=[CONFIGS[2]])
    assert str(info.value).splitlines() == [
        "none of the 1 configs of _double_kernel could run here:",
        "config 0 of 1: BLOCK=64, WRITE=True, num_warps=4, num_stages=2: cannot run here, as the "
        "autotuner would skip it (OutOfResources: out of resource: shared memory, Required: "
        "300000, Hardware limit: 232448. Reducing block sizes or `num_stages` may help.)"]


def test_under_the_interpreter_an_autotune_configs_kernel_holds_the_interpreters_config():
    one = triton.Config({"BLOCK": 16, "WRITE": True}, num_warps=1, num_stages=1)
    tuned = triton.autotune(configs=autotune_configs(CONFIGS, interpreter=one), key=["n"])(
        _double_kernel)
    from pytest_triton import interpreting

    assert [p.values[0] for p in config_params(tuned)] == ([one] if interpreting() else CONFIGS)


@pytest.mark.parametrize("call, error, match", [
    (lambda: pin_config(_double_kernel, CONFIGS[0]).__enter__(), TypeError,
     "kernel must be an @triton.autotune kernel"),
    (lambda: pin_config(double_kernel, {"BLOCK": 16}).__enter__(), TypeError,
     "config must be a triton.Config"),
    (lambda: assert_every_config(double_kernel, None), TypeError, "check must be callable"),
    (lambda: assert_every_config(double_kernel, lambda: None, configs=[]), ValueError,
     "no configs"),
    (lambda: assert_every_config(double_kernel, lambda: None, outputs=[3]), TypeError,
     "outputs must be tensors"),
])
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_importing_pytest_triton_imports_no_triton():
    # @triton.jit picks interpreter or compiler when triton.language is first imported; the
    # plugin sets TRITON_INTERPRET before that, so importing pytest_triton must not import it.
    code = ("import sys, pytest_triton; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'triton'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- what a CPU run checked: k of N configs, and all of them on request -----------------------

PORTABLE = """
import pytest, torch, triton, triton.language as tl
from pytest_triton import assert_close, assert_every_config, autotune_configs
from tests.correctness.test_configs import CONFIGS, _double_kernel

# As the README recommends: every config on a GPU, the first under the interpreter.
portable = triton.autotune(configs=autotune_configs(CONFIGS, interpreter=CONFIGS[0]),
                           key=["n"])(_double_kernel)
right = triton.autotune(configs=autotune_configs([CONFIGS[0], CONFIGS[2]]), key=["n"])(_double_kernel)
plain = triton.autotune(configs=CONFIGS, key=["n"])(_double_kernel)

def check(kernel, make_tensor, **kw):
    x = make_tensor(100)
    out = make_tensor.poisoned_like(x)
    launch = lambda: kernel[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, out, 100)
    assert_every_config(kernel, lambda: (launch(), assert_close(out, 2 * x.double())),
                        outputs=[out], **kw)

def test_portable(make_tensor):
    check(portable, make_tensor)

def test_portable_all(make_tensor):
    check(portable, make_tensor, all_configs=True)

def test_right_all(make_tensor):
    check(right, make_tensor, all_configs=True)

def test_plain(make_tensor):
    check(plain, make_tensor, configs=[CONFIGS[0]])
"""


def _run_portable(pytester, run, *args):
    # run: run_interpreted_fresh (test_portable imports _double_kernel from this module)
    import pathlib

    pytester.makepyfile(test_portable=PORTABLE)
    return run("-rA", "-p", "no:cacheprovider", "--rootdir", str(pytester.path),
               "-o", f"pythonpath={pathlib.Path(__file__).parents[2]}", *args)


def test_an_interpreter_run_says_it_checked_one_of_the_configs(pytester, run_interpreted_fresh):
    # It checked 1 of 3 configs under the interpreter and said nothing: the buggy config 1
    # (WRITE=False) passed unseen.
    result = _run_portable(pytester, run_interpreted_fresh, "test_portable.py::test_portable",
                           "--junitxml", "junit.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*- pytest-triton correctness -*",
        "assert_every_config: checked 1 of 3 configs of _double_kernel (interpreter); the "
        "autotuner holds only the interpreter's config here (autotune_configs); not checked: "
        "BLOCK=32, WRITE=False, num_warps=2, num_stages=1; BLOCK=64, WRITE=True, num_warps=4, "
        "num_stages=2. all_configs=True or --triton-all-configs runs them here, or a GPU run",
    ])
    # by design under the interpreter: said once, as such, not as a warning on a passing run
    result.stdout.fnmatch_lines([
        "pytest-triton: under Triton's interpreter assert_every_config checks the one config "
        "autotune_configs holds there, by design: 2 configs of 1 kernel in 1 test are left to a "
        "GPU run or --triton-all-configs (-v lists them)"])
    assert "left 2 configs unchecked" not in result.stdout.str()
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="triton.configs_checked" value="_double_kernel: 1 of 3 (interpreter)"' in junit
    # -v lists each test and kernel; -q says nothing of it
    verbose = _run_portable(pytester, run_interpreted_fresh, "test_portable.py::test_portable",
                            "-v")
    verbose.stdout.fnmatch_lines([
        "pytest-triton: under Triton's interpreter assert_every_config checks the one config "
        "autotune_configs holds there, by design: 2 configs of 1 kernel in 1 test are left to a "
        "GPU run or --triton-all-configs: test_portable.py::test_portable: _double_kernel 1 of "
        "3 (interpreter)"])
    quiet = _run_portable(pytester, run_interpreted_fresh, "test_portable.py::test_portable",
                          "-q")
    assert "assert_every_config checks the one config" not in quiet.stdout.str()


def test_all_configs_checks_every_config_under_the_interpreter(pytester, run_interpreted_fresh):
    # The keyword and the option check all three, pinned one at a time: config 1's bug fails.
    result = _run_portable(pytester, run_interpreted_fresh)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*1 of 3 configs of _double_kernel fail this check*",
                                 "*config 1 of 3: BLOCK=32, WRITE=False, num_warps=2, num_stages=1*"])
    assert "FAILED test_portable.py::test_portable_all" in result.stdout.str()
    result.stdout.fnmatch_lines(["assert_every_config: checked 2 of 2 configs of _double_kernel "
                                 "(interpreter)"])  # test_right_all: the positive control
    # configs= is the test's own choice: said in its section, not in the run's summary line
    result.stdout.fnmatch_lines(["assert_every_config: checked 1 of 3 configs of _double_kernel "
                                 "(interpreter); configs= chose them; not checked: *"])
    option = _run_portable(pytester, run_interpreted_fresh, "test_portable.py::test_portable",
                           "--triton-all-configs")
    option.assert_outcomes(failed=1)
    option.stdout.fnmatch_lines(["*config 1 of 3: BLOCK=32, WRITE=False*"])
    assert "left 2 configs unchecked" not in option.stdout.str()


def test_the_perf_json_records_the_configs_each_test_checked(pytester, run_interpreted_fresh):
    import json

    result = _run_portable(pytester, run_interpreted_fresh, "test_portable.py::test_portable",
                           "--triton-perf", "--triton-perf-allow-unchecked", "--triton-perf-json", "perf.json")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "perf.json").read_text())
    assert doc["configs_checked"] == [{
        "nodeid": "test_portable.py::test_portable", "kernel": "_double_kernel", "checked": 1,
        "total": 3, "where": "interpreter", "unchecked": 2, "reason": "interpreter config only"}]


def test_the_summary_names_each_test_and_kernel_once(pytester):
    # issue 32: a test that called assert_every_config twice was listed twice and counted as
    # two tests
    from pytest_triton.correctness.configs import RECORDS_KEY, ConfigsSummary

    config = pytester.parseconfig("-v")
    summary = ConfigsSummary(config)
    rec = {"kernel": "_k", "checked": 0, "total": 7, "where": "interpreter", "unchecked": 7,
           "reason": "interpreter config only"}
    config.stash[RECORDS_KEY] += [{"nodeid": "t.py::a", **rec}, {"nodeid": "t.py::a", **rec},
                                  {"nodeid": "t.py::b", **rec}]
    lines = []

    class Reporter:
        def write_line(self, line, **kw):
            lines.append(line)

    summary.pytest_terminal_summary(Reporter())
    assert "by design: 14 configs of 1 kernel in 2 tests are left" in lines[0], lines[0]
    assert lines[0].count("t.py::a") == 1
