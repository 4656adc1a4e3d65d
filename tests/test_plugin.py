"""plugin.py registers each feature, a plugin object of its own, and imports a feature's module
only when the feature is in use."""

import ast
import json
from pathlib import Path

import pytest

from pytest_triton import plugin

RECORD_MODULES = """
import json, sys
def test_modules():
    with open("modules.json", "w") as f:
        json.dump(sorted(m for m in sys.modules if m.startswith("pytest_triton")), f)
"""
PERF_ONLY = ("pytest_triton.diagnose.explain", "pytest_triton.diagnose.profile",
             "pytest_triton.report.plot", "pytest_triton.diagnose.ncu")


def _modules(pytester, *args) -> set[str]:
    pytester.makepyfile(test_m=RECORD_MODULES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    return set(json.loads((pytester.path / "modules.json").read_text()))


def test_without_triton_perf_no_perf_feature_is_imported(pytester):
    loaded = _modules(pytester)
    assert "pytest_triton.plugin" in loaded and "pytest_triton.perf.lifecycle" in loaded
    assert not loaded & set(PERF_ONLY), sorted(loaded & set(PERF_ONLY))
    for other in ("pytest_triton.diagnose.breakdown", "pytest_triton.report.benchbridge",
                  "pytest_triton.correctness.sanitize"):
        assert other not in loaded, other


def test_triton_perf_imports_what_it_uses_and_only_that(pytester):
    # the positive control: the same check sees the modules a --triton-perf run uses
    loaded = _modules(pytester, "--triton-perf", "--triton-perf-allow-unchecked")
    assert {"pytest_triton.diagnose.explain", "pytest_triton.report.summary"} <= loaded
    assert "pytest_triton.diagnose.ncu" not in loaded  # only --triton-perf-explain=ncu runs it
    assert "pytest_triton.diagnose.profile" not in loaded  # only --triton-perf-profile DIR
    loaded = _modules(pytester, "--triton-perf", "--triton-perf-allow-unchecked",
                      "--triton-perf-profile", "traces")
    assert "pytest_triton.diagnose.profile" in loaded


def test_plugin_py_holds_registration_only():
    """Its hooks are the few that run before any feature can register (options, hook specs, the
    early runtime decision) and pytest_configure, which registers; everything else is a
    feature's, named in FEATURES with the module and class that implement it."""
    tree = ast.parse(Path(plugin.__file__).read_text())
    hooks = sorted(n.name for n in tree.body if isinstance(n, ast.FunctionDef)
                   and n.name.startswith("pytest_"))
    assert hooks == ["pytest_addhooks", "pytest_addoption", "pytest_cmdline_main",
                     "pytest_configure", "pytest_load_initial_conftests"]
    names = [name for name, *_ in plugin.FEATURES]
    assert len(names) == len(set(names))
    import importlib

    for name, in_use, module, cls in plugin.FEATURES:
        assert callable(in_use), name
        found = importlib.import_module(module)
        if cls is not None:
            assert isinstance(getattr(found, cls), type), (name, module, cls)


@pytest.mark.parametrize("flag, name", [
    ((), "triton-perf-tests"), (("--triton-perf",), "triton-perf-explain"),
    (("--triton-autotune=first",), "triton-autotune-pin"),
])
def test_a_feature_in_use_is_registered_by_its_name(pytester, flag, name):
    pytester.makepyfile(test_k=f"""
        def test_k(request):
            assert request.config.pluginmanager.get_plugin({name!r}) is not None
    """)
    pytester.runpytest("-p", "no:cacheprovider", "--triton-perf-allow-unchecked", *flag) \
        .assert_outcomes(passed=1)


def test_the_makereport_wrappers_nest_in_the_documented_order(pytester, tmp_path):
    """plugin.MAKEREPORT_ORDER is the order the wrappers run in (outermost first): a feature
    registered elsewhere, or a priority changed, shows here."""
    config = pytester.parseconfigure("--triton-perf", "--triton-interpret", "--triton-autotune=first",
                                     f"--triton-perf-profile={tmp_path}", "-p", "no:cacheprovider")
    pm = config.pluginmanager
    impls = [i for i in pm.hook.pytest_runtest_makereport.get_hookimpls() if i.wrapper]
    ours = [pm.get_name(i.plugin) for i in reversed(impls)
            if (pm.get_name(i.plugin) or "").startswith("triton-")]
    assert ours == [name for name in plugin.MAKEREPORT_ORDER if name in ours]
    assert set(plugin.MAKEREPORT_ORDER) - set(ours) <= {"triton-oom-retry"}  # an xdist worker's


def test_every_hook_the_plugin_offers_is_declared_with_its_options():
    """Each pytest_triton_* hook in hookspec.py carries pytest.hookspec's mark (an unmarked one
    is taken as a legacy spec, whose options a reader cannot see)."""
    from pytest_triton import hookspec

    names = [n for n in dir(hookspec) if n.startswith("pytest_triton_")]
    assert names
    assert [n for n in names if not hasattr(getattr(hookspec, n), "pytest_spec")] == []
