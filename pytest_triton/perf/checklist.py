"""The performance checklist that ships as defaults, and its overrides.

Entries are named perf targets: `@perf_target("softmax")`. Override one in
`[tool.pytest.ini_options]` (`triton_perf_checklist = ["softmax: gbps=600"]`) or in a TOML table
`[tool.pytest-triton.checklist]` of the project's pyproject.toml (`softmax = {gbps = 600}`);
the ini lines win over the TOML table.
"""

from __future__ import annotations

import sys
from types import MappingProxyType

import pytest

from .. import options
from ..options import Option
from .markers import PerfTargetError, parse_perf_target

OPTIONS = options.declare(
    Option("triton_perf_checklist", "linelist", [],
           "overrides of the performance checklist, one per line: "
           "'NAME: key=value, key=value' (e.g. 'softmax: gbps=600')"),
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before 3.11
    import tomli as tomllib

# A100 SXM dense FP16 tensor peak: the checklist's "50 TFLOPS on A100" is this fraction of it, and
# is carried to other devices as the same fraction of their FP16 tensor peak (about 16%).
A100_FP16_TFLOPS = 312.0

# The fractions are of the datasheet peaks, whatever --triton-perf-peak says: that is what the
# checklist means ("80% of memory bandwidth"); a project that wants them of the measured ceilings
# overrides the entry.
DEFAULTS = MappingProxyType({
    "vector_add": {"bandwidth_frac": 0.8, "peak": "datasheet"},
    "matmul": {"tflops_frac": 50.0 / A100_FP16_TFLOPS, "dtype": "float16", "peak": "datasheet"},
    "softmax": {"gbps": 500.0},
    "layernorm": {"gbps": 300.0},
    "conv2d": {"tflops": 30.0},
})

NOTES = {
    "matmul": "FP16 matmul > 50 TFLOPS on A100, scaled by this device's FP16 tensor peak",
}

def _parse_value(raw: str):
    raw = raw.strip()
    try:
        return float(raw)
    except ValueError:
        return raw


def _from_ini(lines: list[str]) -> dict[str, dict]:
    entries: dict[str, dict] = {}
    for line in lines:
        if not line.strip():
            continue
        name, sep, rest = line.partition(":")
        if not sep or not name.strip():
            raise pytest.UsageError(f"triton_perf_checklist line {line!r}: expected "
                                    "'NAME: key=value, key=value'")
        kwargs = {}
        for part in rest.split(","):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise pytest.UsageError(f"triton_perf_checklist line {line!r}: {part.strip()!r} "
                                        "is not key=value")
            kwargs[key.strip()] = _parse_value(value)
        entries[name.strip()] = kwargs
    return entries


def _from_toml(config: pytest.Config) -> dict[str, dict]:
    path = config.rootpath / "pyproject.toml"
    if not path.is_file():
        return {}
    with path.open("rb") as f:
        data = tomllib.load(f)
    table = data.get("tool", {}).get("pytest-triton", {}).get("checklist", {})
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise pytest.UsageError(f"{path}: [tool.pytest-triton.checklist] entries must be tables, "
                                "e.g. softmax = {gbps = 600}")
    return {k: dict(v) for k, v in table.items()}


def load(config: pytest.Config) -> dict[str, dict]:
    """The checklist in force: defaults, then the TOML table, then the ini lines."""
    entries = {k: dict(v) for k, v in DEFAULTS.items()}
    toml, ini = _from_toml(config), _from_ini(options.get(config, "triton_perf_checklist"))
    entries.update(toml)
    entries.update(ini)
    # An override is checked at start-up, not when a test first names it (a misspelt key would
    # otherwise pass every run that does not use the entry, and then be blamed on a test).
    for name in {**toml, **ini}:
        source = "triton_perf_checklist" if name in ini else "[tool.pytest-triton.checklist]"
        try:
            parse_perf_target((name,), {}, entries, where=f"{source} entry {name!r}: ")
        except PerfTargetError as exc:
            raise pytest.UsageError(str(exc)) from None
    return entries
