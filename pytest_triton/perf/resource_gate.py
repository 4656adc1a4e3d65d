"""The triton_resources gate: every Triton kernel a test launches, compiled for each listed GPU
architecture (no such GPU needed) and held to the test's limits on registers, spills, shared
memory and occupancy. A plugin object (ResourceGate) that plugin.py registers with configure().

The test runs as usual with its launches recorded (env/compile_specs.py); then each distinct
launch is compiled per architecture (env/archcompile.py: cached on disk, so a suite pays for each
compile once) and judged (resource_limits.py). An autotuned kernel is checked over every config
its autotuner declares (autotune_configs' GPU configs under the interpreter), after its own
early_config_prune; with --triton-autotune=heuristic|first over the config that picks. On a GPU
the launch's own compile gives the numbers for the GPU's architecture (n_regs and n_spills from
the driver). A failed verdict carries the compiler's hint: the first of a few changes (fewer
stages, more warps, a halved tile) that, compiled, fits.
"""

from __future__ import annotations

import pytest

from .. import options, state
from ..env import archcompile, ptxas
from ..env.compile_specs import Recorder, recording
from ..env.device import arch_of
from ..options import Option
from . import resource_limits as rc
from .calibrate import cache_dir
from .markers import RESOURCE_KEYS
from .session import dry_run

OPTIONS = options.declare(
    Option("triton_resources_archs", "string", "sm_80 sm_90",
           "the GPU architectures a triton_resources marker without archs= compiles its kernels "
           "for, separated by spaces or commas (known: sm_80 sm_86 sm_89 sm_90 sm_100 sm_120)",
           metavar="ARCHS"),
)

MARKER_HELP = (
    "triton_resources(*, max_registers=None, max_spills=0, max_shared_memory='per-device', "
    "min_occupancy=None, archs=None): compile every Triton kernel the test launches for each "
    "GPU architecture in archs (default: --triton-resources-archs), without that GPU, and fail "
    "the test where one uses more registers per thread, spills more bytes per thread, needs more "
    "shared memory per program (default: the architecture's limit) or allows a lower occupancy "
    "than asked. perf_target takes the same keywords."
)
MARKERS = options.declare_markers(options.Marker(MARKER_HELP))

LIMITS_KEY = pytest.StashKey["rc.ResourceLimits | None"]()
RECORDER_KEY = pytest.StashKey[Recorder]()
LINES_KEY = pytest.StashKey[list]()  # per item: each verdict's line, for the report
COST_KEY = pytest.StashKey[dict]()  # per item: its check's compiles, cache hits and seconds


def limits_of(item: pytest.Item) -> rc.ResourceLimits | None:
    """The item's resource limits, from its triton_resources marker or perf_target's resource
    keywords (TritonResourcesError names the test and the argument)."""
    marks = list(item.iter_markers("triton_resources"))
    target = item.get_closest_marker("perf_target")
    from_target = {k: v for k, v in (target.kwargs if target else {}).items() if k in RESOURCE_KEYS}
    if not marks and not from_target:
        return None
    if len(marks) > 1 or (marks and from_target):
        raise rc.TritonResourcesError(
            f"{item.nodeid}: resource limits come from {len(marks)} triton_resources marker(s)"
            f"{' and perf_target' if from_target else ''}: give them in one")
    marker, kwargs = ("perf_target", from_target) if from_target else \
        ("triton_resources", dict(marks[0].kwargs))
    if marks and marks[0].args:
        raise rc.TritonResourcesError(f"{item.nodeid}: triton_resources: takes keyword arguments "
                                      f"only, got {marks[0].args!r}")
    where = f"{item.nodeid}: {marker}: "
    return rc.parse_limits(kwargs, default_archs=default_archs(item.config), marker=marker,
                           where=where)


def default_archs(config: pytest.Config) -> tuple[str, ...]:
    raw = options.get(config, "triton_resources_archs")
    return tuple(a for a in raw.replace(",", " ").split() if a)


def _measured(item: pytest.Item) -> bool:
    """A perf test timed on the GPU: its launches are recorded once, after timing, not while
    timed (pytest_triton_measured)."""
    return state.get(item.config).perf and not dry_run(item.config) \
        and "triton_bench" in getattr(item, "fixturenames", ())


def _perf_test(item: pytest.Item) -> bool:
    return item.get_closest_marker("perf_target") is not None or \
        "triton_bench" in getattr(item, "fixturenames", ())


class ResourceGate:
    """The triton_resources marker's hooks, and the run's compile statistics (gathered from the
    reports where they arrive: in-process, on the xdist controller, in a supervising parent)."""

    def __init__(self, config: pytest.Config) -> None:
        for arch in default_archs(config) or ("(none)",):
            try:
                ptxas.capability(arch)
            except ValueError as exc:
                raise pytest.UsageError(f"{options.BY_NAME['triton_resources_archs'].flag} "
                                        f"(or ini triton_resources_archs): {exc}") from None
        self.config = config
        self.cache = cache_dir() / "resources"
        self.totals = {"tests": 0, "compiles": 0, "cached": 0, "seconds": 0.0}
        self._cost: dict | None = None  # the running check's
        self._local: str | None | bool = False  # the GPU's architecture (None: no GPU), once read

    # --- hooks ------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[LIMITS_KEY] = limits_of(item)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item):
        __tracebackhide__ = True
        limits = item.stash.get(LIMITS_KEY, None)
        if limits is None:
            return (yield)
        recorder = item.stash.setdefault(RECORDER_KEY, Recorder())
        skip = None
        try:
            if _measured(item):
                result = yield
            else:
                with recording(recorder, state.get(item.config).runtime.interpret):
                    try:
                        result = yield
                    except pytest.skip.Exception as exc:  # a dry run ends as a skip: check first
                        skip = exc
            self.check(item, recorder, limits)
        finally:
            del item.stash[RECORDER_KEY]  # it holds the launches' tensors
        if skip is not None:
            raise skip
        return result

    def pytest_triton_measured(self, item, measurement, fn, kernel, compiles) -> None:
        if item.stash.get(LIMITS_KEY, None) is None:
            return
        with recording(item.stash.setdefault(RECORDER_KEY, Recorder()), False):
            fn()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        exc = call.excinfo.value if call.excinfo is not None else None
        if report.failed and isinstance(exc, (rc.TritonResourcesError, rc.ResourceLimitExceeded)):
            report.longrepr = f"{type(exc).__name__}: {exc}"  # the verdict, not the plugin's frames
        lines = item.stash.get(LINES_KEY, None)
        if lines and report.when == "call":
            report.sections.append(("pytest-triton resources", "\n".join(lines)))
        cost = item.stash.get(COST_KEY, None)
        if cost is not None and report.when == "call":
            report.triton_resources = cost  # serialisable: it travels to where reports go
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        cost = getattr(report, "triton_resources", None)
        if cost:
            self.totals["tests"] += 1
            for key in ("compiles", "cached", "seconds"):
                self.totals[key] += cost[key]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        t = self.totals
        if t["tests"]:
            terminalreporter.write_line(
                f"pytest-triton: triton_resources checked {t['tests']} test"
                f"{'s' if t['tests'] > 1 else ''}: {t['compiles']} compiles ({t['cached']} from "
                f"the cache, {self.cache}), {t['seconds']:.1f} s compiling")

    # --- the check ----------------------------------------------------------------------------

    def local_arch(self) -> str | None:
        if self._local is False:
            rt = state.get(self.config).runtime
            self._local = None
            if not rt.interpret:
                import torch  # import time: torch

                self._local = arch_of(torch.cuda.get_device_capability(rt.device))
        return self._local

    def resources(self, spec, arch: str, recorded=None) -> archcompile.Resources:
        if recorded is not None and recorded.compiled is not None and arch == self.local_arch():
            return archcompile.real_resources(recorded.compiled, arch)
        res = archcompile.compile_resources(spec, arch, self.cache)
        if self._cost is not None:
            self._cost["compiles"] += 1
            self._cost["cached"] += int(res.cached)
            self._cost["seconds"] += res.seconds
        return res

    def groups(self, item: pytest.Item, recorder: Recorder) -> list[tuple]:
        """(title, [(spec, recorded or None)]) per kernel: an autotuned one over its configs."""
        how = "full" if _perf_test(item) else options.get(item.config, "triton_autotune")
        out, seen = [], set()
        by_key = {r.spec.key(): r for r in recorder.kernels.values()}
        for rec in recorder.kernels.values():
            if rec.tuner is None:
                out.append((None, [(rec.spec, rec)]))
                continue
            declared = list(getattr(rec.tuner.configs, "declared", rec.tuner.configs))
            keys = {k for c in declared for k in c.all_kwargs()}
            configs, which = tuner_configs(rec.tuner, dict(zip(rec.spec.fn.arg_names, rec.args)),
                                           {k: v for k, v in rec.kwargs.items() if k not in keys},
                                           how)
            variants = []
            for cfg in configs:
                try:
                    spec = archcompile.spec_of_config(rec.spec.fn, rec.args, rec.kwargs, cfg,
                                                      declared)
                except Exception as exc:  # noqa: BLE001 - named in the verdict, never passed
                    recorder.errors.append(f"{rec.spec.kernel}: config {cfg}: "
                                           f"{type(exc).__name__}: {exc}")
                    continue
                if spec.key() not in seen:
                    seen.add(spec.key())
                    variants.append((spec, by_key.get(spec.key())))
            if variants:
                out.append((f"{rec.spec.kernel}: {which}", variants))
        return out

    def check(self, item: pytest.Item, recorder: Recorder, limits: rc.ResourceLimits) -> None:
        __tracebackhide__ = True
        if recorder.errors:
            raise rc.TritonResourcesError(f"{item.nodeid}: {limits.describe()}: some launches could "
                                          "not be read:\n  " + "\n  ".join(recorder.errors))
        if not recorder.kernels:
            raise rc.TritonResourcesError(f"{item.nodeid}: {limits.describe()}, but the test "
                                          "launched no Triton kernel: nothing to check")
        self._cost = item.stash[COST_KEY] = {"compiles": 0, "cached": 0, "seconds": 0.0}
        groups = self.groups(item, recorder)
        if recorder.errors:
            raise rc.TritonResourcesError(f"{item.nodeid}: {limits.describe()}: some configs could "
                                          "not be bound:\n  " + "\n  ".join(recorder.errors))
        skipped, failures, lines = {}, [], []
        for arch in limits.archs:
            reason = ptxas.unsupported(arch)
            if reason is not None:
                skipped[arch] = reason
                continue
            for title, variants in groups:
                verdicts = [rc.judge(spec, self.resources(spec, arch, rec), limits)
                            for spec, rec in variants]
                lines += [v.line() for v in verdicts]
                bad = [v for v in verdicts if v.failed]
                if not bad:
                    continue
                text = [f"{title} on {arch}: {len(bad)} of {len(verdicts)} configs over the limit"] \
                    if title else []
                text += [("  " if title else "") + v.line() for v in bad]
                hint = self.hint(bad[0], limits)
                if hint:
                    text.append(("  " if title else "") + f"  hint: {hint}")
                failures.append("\n".join(text))
        item.stash[LINES_KEY] = lines
        for arch, reason in skipped.items():
            lines.append(f"{arch}: not checked: {reason}")
        item.config.hook.pytest_triton_resources_checked(
            item=item, recorded=list(recorder.kernels.values()), lines=lines)
        if failures:
            raise rc.ResourceLimitExceeded(f"{limits.describe()}:\n" + "\n".join(failures))
        if skipped:
            held = ", ".join(a for a in limits.archs if a not in skipped)
            pytest.skip(f"{limits.describe()}: " + "; ".join(f"{a} not checked: {r}"
                                                            for a, r in skipped.items())
                        + (f" (the limits hold on {held})" if held else ""))

    def hint(self, verdict: rc.Verdict, limits: rc.ResourceLimits) -> str | None:
        """The first change that, compiled, fits; else the occupancy arithmetic."""
        if verdict.resources.error is not None:
            return None
        arch = verdict.resources.arch
        for change in rc.candidates(verdict, limits):
            spec = verdict.spec.with_changes(**change)
            res = self.resources(spec, arch)
            tried = rc.judge(spec, res, limits)
            if not tried.failed:
                return f"fits {rc.change_text(change)}: {rc.usage(res, tried.occupancy)}"
        return rc.arithmetic_hint(verdict, limits)


def tuner_configs(tuner, nargs: dict, kwargs: dict, how: str) -> tuple[list, str]:
    """The configs of `tuner` to check, and how they were picked: every config it would time for
    this launch (those it declares, autotune_configs' GPU configs under the interpreter, that its
    early_config_prune keeps, as Autotuner.prune_configs keeps them); with
    --triton-autotune=heuristic the first of those, with =first its first config."""
    configs = list(getattr(tuner.configs, "declared", tuner.configs))
    n = len(configs)
    if how == "first":
        return configs[:1], f"the first of {n} configs (--triton-autotune=first)"
    prune = getattr(tuner, "early_config_prune", None)
    if prune is not None:
        try:
            configs = list(prune(configs, nargs, **kwargs)) or configs
        except Exception:  # noqa: BLE001 - a pruning that needs the GPU: every config
            pass
    if how == "heuristic":
        return configs[:1], f"the config --triton-autotune=heuristic picks of {n}"
    kept = f", the {len(configs)} its early_config_prune keeps" if len(configs) < n else ""
    return configs, f"{n} configs{kept}"
