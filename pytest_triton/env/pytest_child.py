"""The child command: how the plugin starts a pytest process of its own.

Three features run tests again in a child: the supervisor continues a session in one (process/),
--triton-sanitize runs the selected tests under compute-sanitizer, and --triton-perf-explain=ncu
profiles one perf test under Nsight Compute. Each child runs this interpreter's pytest with the
seeds of this session (so it builds the same inputs), and collects as this session does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pytest

from .. import options as _options

# Set in a child's environment: which child it is (plugin.py reads them to register the child's
# side of each feature without importing the feature)
SANITIZE_CHILD_ENV = "PYTEST_TRITON_SANITIZE_CHILD"  # the tool the child runs under
NCU_CHILD_ENV = "PYTEST_TRITON_NCU_CHILD"  # the file the child's launch lists go to


def collect_alike(config: pytest.Config) -> list[str]:
    """Options that make a child given test ids collect and run them as this session does: its
    rootdir and ini file, its device, its import mode, and no xdist workers of its own."""
    opts = ["--rootdir", str(config.rootpath)]
    if config.inipath is not None:
        opts += ["-c", str(config.inipath)]
    device = _options.get(config, "triton_device")
    if device:
        opts += ["--triton-device", device]
    mode = getattr(config.option, "importmode", None)
    if mode:
        opts.append(f"--import-mode={mode}")
    if config.pluginmanager.hasplugin("xdist"):
        opts += ["-n", "0"]
    return opts


def pytest_command(config: pytest.Config, *, seed: str, args: Sequence[str] | None = None,
                   options: Sequence[str] = ()) -> list[str]:
    """`python -m pytest` for a child: with args=None, this session's own command line (a
    continuation of it); else `args` (test ids or paths) with collect_alike's options. `seed` is
    a --triton-seed value (BASE or BASE:SEED), `options` go last."""
    cmd = [sys.executable, "-m", "pytest"]
    if args is None:
        cmd += [str(a) for a in config.invocation_params.args]
    else:
        cmd += [*collect_alike(config), *args]
    return cmd + [f"--triton-seed={seed}", *options]
