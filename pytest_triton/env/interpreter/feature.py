"""Under Triton's interpreter: device_assert that fires in Triton's debug mode, and a hint where
a plain multi-config @triton.autotune fails for want of a driver.

Debug mode. On a GPU, tl.device_assert (and a kernel's `assert`) is compiled in when the kernel
runs in debug mode: @triton.jit(debug=True), TRITON_DEBUG=1 or triton.knobs.runtime.debug =
True. Triton's interpreter (3.6 and 3.9 alike) ignores all three: its builder's options are a
fixed InterpreterOptions() whose debug is False, so device_assert is dropped before it is built.
install_debug_mode() wraps InterpretedFunction.run so that each launch runs with debug set as the
GPU would set it; the assertion then raises (Triton wraps it in an InterpreterError) and fails
the test. As on a GPU, debug mode also turns on Triton's integer-overflow checks of +, - and *.
Nothing changes for kernels that do not ask for debug mode.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from .. import onimport
from .gaps import INTERPRETER_GAP_KEY

DEBUG_NOTE = pytest.StashKey[str]()  # config: why debug mode could not be honoured, if so

AUTOTUNE_HINT = (
    "Triton's interpreter has no driver to time autotune configs with, so a @triton.autotune "
    "kernel with several configs cannot run under it (RuntimeError: 0 active drivers). Build the "
    "autotuner with pytest_triton.autotune_configs(configs, interpreter=cfg): every config on a "
    "GPU, one (cfg, a small one keeps the CPU suite fast) under the interpreter. Or skip the test "
    "there: @pytest.mark.interpreter_gap(\"autotune\") or "
    "pytest_triton.skip_interpreter_gap(\"autotune\").")


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "on", "yes")


def debug_requested(kernel_kwargs: dict, launch_kwargs: dict) -> bool:
    """Debug mode as a GPU launch decides it: the kernel's jit(debug=...), the launch's debug=,
    triton.knobs.runtime.debug, or TRITON_DEBUG (read at each launch, not only at import)."""
    if kernel_kwargs.get("debug") or launch_kwargs.get("debug"):
        return True
    try:
        from triton import knobs

        if getattr(knobs.runtime, "debug", False):
            return True
    except (ImportError, AttributeError):
        pass
    return _truthy(os.environ.get("TRITON_DEBUG", "0"))


def install_debug_mode(config: pytest.Config) -> None:
    """Make the interpreter honour Triton's debug switches (once per process)."""
    try:
        from triton.runtime import interpreter as ti
    except ImportError:
        config.stash[DEBUG_NOTE] = "triton.runtime.interpreter is not importable"
        return
    cls = getattr(ti, "InterpretedFunction", None)
    builder = getattr(ti, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if cls is None or options is None or not dataclasses.is_dataclass(options) \
            or "debug" not in {f.name for f in dataclasses.fields(options)}:
        config.stash[DEBUG_NOTE] = ("this Triton's interpreter has no InterpretedFunction or "
                                    "builder options with a debug field")
        return
    run = cls.run
    if getattr(run, "_pytest_triton_debug", False):
        return

    def run_in_debug_mode(self, *args, **kwargs):
        __tracebackhide__ = True  # the plugin's frame, not the kernel's: hidden from failures
        wanted = debug_requested(getattr(self, "kwargs", {}) or {}, kwargs)
        before = builder.options
        if wanted == bool(before.debug):
            return run(self, *args, **kwargs)
        builder.options = dataclasses.replace(before, debug=wanted)
        try:
            return run(self, *args, **kwargs)
        finally:
            builder.options = before

    run_in_debug_mode._pytest_triton_debug = True
    run_in_debug_mode.__wrapped__ = run
    cls.run = run_in_debug_mode


def header(config: pytest.Config) -> list[str]:
    note = config.stash.get(DEBUG_NOTE, None)
    if not note:
        return []
    return [f"pytest-triton: tl.device_assert cannot fire under this interpreter ({note})"]


def _is_driverless_autotune(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, RuntimeError) and "active drivers" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _is_plugin_error(exc: BaseException) -> bool:
    """A perf test's own mistake found by the dry run (a bad triton_bench argument): it fails."""
    return type(exc).__name__ in ("PerfTargetError",)


def _remaining_gap(exc: BaseException | None) -> str | None:
    """The message of an interpreter gap the compatibility fixes name when a kernel needs what
    they cannot give (a libdevice function without a CPU version), wherever it is in the chain."""
    seen = 0
    while exc is not None and seen < 10:
        text = str(exc)
        at = text.find("interpreter gap '")
        if at >= 0:
            return text[at:].split("\n")[0].strip("')\"")
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def annotate_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport,
                    declared_gap: str | None = None) -> None:
    """A test stopped by an interpreter gap is skipped, naming the gap (never the kernel's
    failure): one the fixes name at run time, or the declared gap of a perf test whose body ran
    (for its triton_bench's argument checks) and failed before reaching triton_bench. One failed
    by Triton's '0 active drivers' under the interpreter gets the way out."""
    if not report.failed or call.excinfo is None:
        return
    gap = _remaining_gap(call.excinfo.value)
    if gap is None and declared_gap is not None and report.when == "call" and \
            not _is_plugin_error(call.excinfo.value):
        gap = (f"{declared_gap} (the body stopped before triton_bench: "
               f"{type(call.excinfo.value).__name__})")
    if gap is not None and report.when in ("setup", "call"):
        path, line = item.reportinfo()[:2]
        report.outcome = "skipped"
        report.longrepr = (str(path), (line or 0) + 1, f"Skipped: {gap}")
        return
    if _is_driverless_autotune(call.excinfo.value):
        report.sections.append(("pytest-triton: autotune under the interpreter", AUTOTUNE_HINT))


class Interpreter:
    """Under Triton's interpreter: debug mode honoured, and a test stopped by a gap skipped
    naming it (the declared gap of a perf test whose body ran for its argument checks)."""

    def __init__(self, config: pytest.Config):
        # once Triton is imported (by a conftest or a test module, before any kernel launches)
        config.add_cleanup(onimport.when_imported("triton", lambda _triton: install_debug_mode(config)))

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return header(config)

    # trylast: inside every other wrapper (plugin.MAKEREPORT_ORDER): a gap's failure is a skip
    # before the seed, the poison or the OOM retry looks at the report
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        annotate_report(item, call, report, item.stash.get(INTERPRETER_GAP_KEY, None))
        return report
