"""Where kernels run: the interpreter switch, the device fixture, options and their ini twins."""

import os
from types import SimpleNamespace

import pytest

from pytest_triton.env import runtime


def test_kernels_imported_from_conftest_and_modules_are_interpreted(pytester, run_interpreted):
    pytester.makeconftest("""
        import triton, triton.language as tl
        @triton.jit
        def conftest_kernel(x_ptr):
            tl.store(x_ptr, 1.0)
    """)
    pytester.makepyfile("""
        import torch, triton
        from triton.runtime.interpreter import InterpretedFunction
        from conftest import conftest_kernel
        @triton.jit
        def module_kernel(x_ptr):
            pass
        def test_interpreted(triton_device):
            assert triton_device == torch.device("cpu")
            assert isinstance(conftest_kernel, InterpretedFunction)
            assert isinstance(module_kernel, InterpretedFunction)
            x = torch.zeros(1)
            conftest_kernel[(1,)](x)
            assert x.item() == 1.0
    """)
    result = run_interpreted("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["pytest-triton: cpu under Triton's interpreter*"])


def test_asking_for_a_cuda_device_without_one_is_a_usage_error(pytester):
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest_subprocess("--triton-device", "cuda:1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--triton-device cuda:1: *"])


@pytest.mark.parametrize("ini, flag", [
    ("triton_perf_l2 = tepid", None), (None, "--triton-perf-l2=tepid"),
])
def test_option_choices_are_checked_on_both_twins(pytester, ini, flag):
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest("--triton-perf", *([flag] if flag else []))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "tepid" in (result.stdout.str() + result.stderr.str())


def test_ini_twins_set_defaults_and_the_command_line_wins(pytester):
    pytester.makeini("[pytest]\ntriton_seed = 11\ntriton_perf = true\n")
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["pytest-triton: seed base 11 (--triton-seed); perf on*"])
    result = pytester.runpytest("--triton-seed", "12")
    result.stdout.fnmatch_lines(["pytest-triton: seed base 12 (--triton-seed); perf on*"])


@pytest.mark.requires_plugin("pytest-benchmark", "pytest-xdist")
def test_loads_beside_pytest_benchmark_and_xdist(pytester):
    pytester.makepyfile("""
        from pytest_triton import assert_close
        def test_a(make_tensor, benchmark):
            x = make_tensor(8)
            benchmark(lambda: x + 1)
            assert_close(x + 1, x.double() + 1)
        def test_b(make_tensor, triton_device):
            assert make_tensor(3).device == triton_device
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result = pytester.runpytest("--benchmark-disable")
    result.assert_outcomes(passed=2)


def test_a_nested_interpreted_run_leaves_the_environment_as_it_found_it(pytester, monkeypatch):
    # A pytest run nested in a GPU session's test (pytester, in-process) with --triton-interpret
    # set TRITON_INTERPRET=1 for good: every later child process of that session (a perf child,
    # a supervised child) then ran its kernels under the interpreter, slowly (seen on the H100:
    # the explain controls' child interpreting 64M-element adds until its timeout).
    import os

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    pytester.makepyfile("def test_ok(): pass")
    result = pytester.runpytest("--triton-interpret", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert os.environ["TRITON_INTERPRET"] == "0"
    monkeypatch.delenv("TRITON_INTERPRET")
    pytester.runpytest("--triton-interpret", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert "TRITON_INTERPRET" not in os.environ


_FAKE_GPU_HOST = """
# Loaded with -p before the plugin decides: a torch built for CUDA and one GPU that NVML sees, so
# the controller takes its path without a GPU; torch.cuda finds none here, so workers interpret.
import json, os, sys
from pytest_triton.env import runtime, versions

versions.torch_build = lambda: {"__version__": "0", "cuda": "13.0", "hip": None}
runtime._visible_gpu_ids = runtime._driver_gpu_ids = lambda: ["0"]
runtime.surely_no_gpu = lambda: False  # torch is asked, as on a machine with a GPU driver


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        from pytest_triton import state
        with open(os.environ["FAKE_GPU_OUT"], "w") as f:
            json.dump({"torch": "torch" in sys.modules, "triton": "triton" in sys.modules,
                       "why": state.get(config).runtime.why}, f)
"""


@pytest.mark.requires_plugin("pytest-xdist")
@pytest.mark.parametrize("options", [
    [],
    # the main job's options: every feature the controller registers under them (the perf
    # summaries, the diagnoses' summary, the judge, the reports) imports no torch either
    ["--triton-perf", "--triton-perf-explain", "--triton-judge", "--triton-perf-json", "r.json",
     "--triton-perf-report-md", "r.md", "--triton-perf-save", "x", "--triton-perf-history", "h",
     "--triton-perf-profile", "traces"],
], ids=["plain", "main-job-options"])
def test_the_xdist_controller_on_a_gpu_host_starts_neither_torch_nor_cuda(pytester, monkeypatch,
                                                                          options):
    """The controller runs no test: on a host with a GPU it decides without importing torch or
    Triton (seconds before its workers can start); negative control: without -n the same process
    asks torch."""
    import json

    pytester.makepyfile(fakegpu=_FAKE_GPU_HOST)
    pytester.makepyfile(test_a="def test_a(): pass")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path), prepend=os.pathsep)
    out = pytester.path / "out.json"
    monkeypatch.setenv("FAKE_GPU_OUT", str(out))
    # an outer xdist worker's variables would make the inner controller a worker
    for name in ("TRITON_INTERPRET", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest_subprocess("-p", "fakegpu", "-n", "2", "-p", "no:cacheprovider",
                                           *options)
    result.assert_outcomes(passed=1)
    seen = json.loads(out.read_text())
    assert seen == {"torch": False, "triton": False, "why": runtime.CONTROLLER_WHY}, seen
    result.stdout.fnmatch_lines(["*pytest-triton: cuda (pytest-xdist's controller*"])

    result = pytester.runpytest_subprocess("-p", "fakegpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    seen = json.loads(out.read_text())
    assert seen["torch"] and seen["why"] != runtime.CONTROLLER_WHY, seen


@pytest.mark.requires_plugin("pytest-xdist")
@pytest.mark.parametrize("args, env, conftest", [
    (["-n", "auto", "--pdb"], {}, None),  # xdist starts no workers under --pdb
    (["-n", "auto"], {"PYTEST_XDIST_AUTO_NUM_WORKERS": "0"}, None),
    (["-n", "auto"], {}, "def pytest_xdist_auto_num_workers(config):\n    return 0\n"),
    (["--tx", "popen"], {}, None),  # --tx without --dist distributes nothing
], ids=["pdb", "auto-env-0", "auto-hook-0", "tx-without-dist"])
def test_a_command_line_that_ends_without_workers_runs_its_tests_on_the_device_torch_finds(
        pytester, monkeypatch, args, env, conftest):
    """-n on the command line, but xdist settles on no workers: this process runs the tests, so
    it asks torch for its device (the interpreter here, the GPU on a GPU machine), not the
    controller's shortcut."""
    import json

    pytester.makepyfile(fakegpu=_FAKE_GPU_HOST)
    pytester.makepyfile(test_a="""
        import torch

        def test_a(triton_device):
            assert str(triton_device) == ("cuda:0" if torch.cuda.is_available() else "cpu")
    """)
    if conftest:
        pytester.makeconftest(conftest)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path), prepend=os.pathsep)
    out = pytester.path / "out.json"
    monkeypatch.setenv("FAKE_GPU_OUT", str(out))
    for name in ("TRITON_INTERPRET", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT",
                 "PYTEST_XDIST_AUTO_NUM_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest_subprocess("-p", "fakegpu", *args, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    seen = json.loads(out.read_text())
    import torch

    # torch's answer: none here (the interpreter), the GPU on a machine with one
    assert seen["why"] == ("CUDA GPU" if torch.cuda.is_available() else "no CUDA GPU visible"), seen


def test_a_visible_devices_variable_without_a_driver_is_no_gpu(monkeypatch):
    """The controller's shortcut needs a driver that lists a GPU: CUDA_VISIBLE_DEVICES=0 on a CPU
    runner with torch built for CUDA is not one; a driver listing one, with the variable unset
    or naming it, is; the variable set to none hides it."""
    monkeypatch.setattr(runtime.versions, "torch_build",
                        lambda: {"__version__": "0", "cuda": "13.0", "hip": None})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(runtime, "surely_no_gpu", lambda: True)
    assert not runtime._gpus_without_torch()
    monkeypatch.setattr(runtime, "surely_no_gpu", lambda: False)
    monkeypatch.setattr(runtime, "_driver_gpu_ids", lambda: [])
    assert not runtime._gpus_without_torch()
    monkeypatch.setattr(runtime, "_driver_gpu_ids", lambda: ["0"])
    assert runtime._gpus_without_torch()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert runtime._gpus_without_torch()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert not runtime._gpus_without_torch()


def _decide_as_worker(monkeypatch, index: int, count: int, gpus: list[str]):
    """runtime's choice in xdist worker `index` of `count` on a host whose driver lists `gpus`
    (torch and CUDA stand-ins: no GPU here)."""
    import torch

    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(runtime.INTERPRET_ENV, raising=False)
    monkeypatch.setattr(runtime, "_driver_gpu_ids", lambda: list(gpus))
    monkeypatch.setattr(runtime, "_cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    monkeypatch.setattr(runtime.options, "get_early", lambda config, name: None)
    return runtime._decide(SimpleNamespace(), may_control=False)


@pytest.mark.parametrize("index, count, gpus, alone", [
    (0, 2, ["0", "1"], True),  # one worker per GPU
    (3, 4, ["0", "1", "2", "3"], True),
    (1, 2, ["0", "1", "2", "3"], True),  # fewer workers than GPUs
    (0, 3, ["0", "1"], False),  # gw0 and gw2 share GPU 0
    (1, 3, ["0", "1"], True),  # gw1 is alone on GPU 1 (gw0 and gw2 share GPU 0)
    (0, 14, ["0"], False),  # the CUDA suite: 14 workers on one GPU
    (2, 2, ["0", "1"], False),  # started in place of a retired worker: it shares GPU 0 with gw0
])
def test_a_worker_has_its_gpu_alone_only_with_no_more_workers_than_gpus(monkeypatch, index,
                                                                        count, gpus, alone):
    rt = _decide_as_worker(monkeypatch, index, count, gpus)
    assert rt.gpu_id == gpus[index % len(gpus)]
    assert rt.gpu_alone is alone
