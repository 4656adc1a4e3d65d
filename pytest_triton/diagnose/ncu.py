"""--triton-perf-explain=ncu: Nsight Compute's speed-of-light figures for each perf test's kernel.

After a perf test ran here, the plugin runs that one test again in a child pytest under
`ncu --clock-control none --profile-from-start off -k regex:<the timed kernels>` with the
SpeedOfLight, Occupancy and WarpStateStats sections. In the child, triton_bench does not time:
it calls fn twice (compilation and autotuning, unprofiled), then once between
cudaProfilerStart and cudaProfilerStop, so ncu profiles exactly the launches of one timed call
(the clocks left alone: what was timed ran at the card's own clocks too). The child writes the
Triton launches of that call, in order, so the parent can give each profiled kernel to its
measurement. Where ncu is missing or cannot read the counters (ERR_NVGPUCTRPERM: profiling
needs admin rights on this machine), the diagnosis says so with the reason, and the run goes on.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import tempfile

import pytest
import torch

from .. import state
from ..env import launch_hooks, pytest_child, seeding
from ..env.runtime import find_cuda_tool
from ..perf.timing import Timings
from .capture import timed_launches

CHILD_ENV = pytest_child.NCU_CHILD_ENV  # in the child: the file its launch lists go to
SECTIONS = ("SpeedOfLight", "Occupancy", "WarpStateStats")
TIMEOUT_S = 600

METRICS = {  # our key: the raw metric names that give it, first found wins
    "duration": ("gpu__time_duration.sum",),
    "dram_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                 "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    "memory_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "l2_pct": ("lts__throughput.avg.pct_of_peak_sustained_elapsed",),
    "sm_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),
    "registers": ("launch__registers_per_thread",),
}
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
_NOT_STALLS = {"selected", "not_selected"}
_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
          "second": 1e6, "s": 1e6}


def find_ncu() -> str | None:
    return find_cuda_tool("ncu")


def why_unavailable(config: pytest.Config) -> str | None:
    rt = state.get(config).runtime
    if rt.interpret:
        return f"kernels run under Triton's interpreter on the CPU ({rt.why})"
    if find_ncu() is None:
        return "Nsight Compute (ncu) was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"
    return None


# --- the parent ----------------------------------------------------------------------------------

def command(config: pytest.Config, item: pytest.Item, ncu: str, names: list[str], log: str) -> list[str]:
    pattern = "^(" + "|".join(re.escape(n) for n in sorted(set(names))) + ")$"
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "-k", f"regex:{pattern}"]
    for s in SECTIONS:
        cmd += ["--section", s]
    cmd += ["--csv", "--page", "raw", "--log-file", log]
    test = str(item.path) + "".join("::" + part for part in item.nodeid.split("::")[1:])
    seed = seeding.for_item(item, seeding.base(config))
    # The test's own seed, fixed: the child profiles the inputs the parent timed, whatever the
    # child's node id and whether the parent's --triton-seed was BASE or BASE:SEED.
    return cmd + pytest_child.pytest_command(
        config, seed=f"{seed.base}:{seed.seed}", args=[test],
        options=["-q", "-p", "no:cacheprovider", "--triton-perf", "--triton-perf-retries", "0",
                 "--triton-perf-max-time", "0.01", "--triton-perf-explain=off",
                 "-o", "triton_perf_json=", "-o", "triton_perf_plot=", "-o", "triton_perf_profile="])


def profile_item(item: pytest.Item, captures: dict) -> dict:
    """Run ncu on the timed kernels of `item`'s measurements; {measurement index: result}."""
    config = item.config
    why = why_unavailable(config)
    if why is None:
        names = sorted({la["name"] for rec in captures.values() for la in timed_launches(rec)})
        if not names:
            why = "no Triton launch was seen in fn, so there is no kernel to give ncu"
    if why is not None:
        return {i: {"unavailable": why} for i in captures}
    with tempfile.TemporaryDirectory(prefix="pytest-triton-ncu-") as tmp:
        log, seen = os.path.join(tmp, "ncu.csv"), os.path.join(tmp, "launch_hooks.jsonl")
        env = dict(os.environ, **{CHILD_ENV: seen})
        cmd = command(config, item, find_ncu(), names, log)
        try:
            proc = subprocess.run(cmd, cwd=str(config.invocation_params.dir), env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  errors="replace", timeout=TIMEOUT_S)
            output = proc.stdout
        except subprocess.TimeoutExpired as exc:
            output = f"timed out after {TIMEOUT_S} s: {exc}"
        text = _read(log)
        order = [json.loads(line) for line in _read(seen).splitlines() if line.strip()]
    # The CSV goes to the log file; older ncu releases print it to stdout whatever --log-file says.
    kernels = parse(text) or parse(output)
    return attribute(kernels, order, captures, names, output + "\n" + text)


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def unavailable_reason(output: str) -> str:
    """Why ncu gave no rows, from what it printed."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("ncu cannot read the GPU's performance counters (ERR_NVGPUCTRPERM): profiling is "
                "restricted to admin users on this machine (NVreg_RestrictProfilingToAdminUsers)")
    for line in output.splitlines():
        if "==ERROR==" in line or "==WARNING== No kernels were profiled" in line:
            return "ncu: " + line.split("==", 2)[-1].strip()
    tail = " | ".join(line.strip() for line in output.strip().splitlines()[-3:])
    return f"ncu profiled no kernel ({tail or 'no output'})"


def parse(text: str) -> list[dict]:
    """The kernels of ncu's `--csv --page raw` output, in profiling order."""
    rows = [line for line in text.splitlines() if line.startswith('"')]
    if not rows:
        return []
    reader = list(csv.reader(io.StringIO("\n".join(rows))))
    header, body = reader[0], reader[1:]
    units = {}
    if body and not body[0][0].strip().isdigit():  # the units row
        units = dict(zip(header, body[0]))
        body = body[1:]
    out = []
    for row in body:
        rec = dict(zip(header, row))
        k = {"id": rec.get("ID"), "name": rec.get("Kernel Name", "?")}
        for key, names in METRICS.items():
            for n in names:
                value = _number(rec.get(n))
                if value is not None:
                    if key == "duration":
                        k["duration_us"] = value * _TO_US.get(units.get(n, "nsecond"), 1e-3)
                    else:
                        k[key] = value
                    break
        stalls = {}
        for col, value in rec.items():
            match = _STALL.match(col)
            if match and match.group(1) not in _NOT_STALLS:
                number = _number(value)
                if number is not None:
                    stalls[match.group(1)] = number
        if stalls:
            reason = max(stalls, key=stalls.get)
            k["stall"], k["stall_ratio"] = reason, stalls[reason]
            k["stalls"] = stalls
        out.append(k)
    return out


def _number(value) -> float | None:
    if value is None:
        return None
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        return None


def _base(name: str) -> str:
    return name.split("(", 1)[0].strip()


def attribute(kernels: list[dict], order: list[dict], captures: dict, names: list[str],
              output: str) -> dict:
    """Give the profiled kernels to the measurements, in the order the child profiled them."""
    wanted = set(names)
    out = {}
    queue = list(kernels)
    for i in sorted(captures):
        calls = [o for o in order if o.get("index") == i]
        mine = []
        for name in (calls[0]["launches"] if calls else []):
            if name in wanted and queue and _base(queue[0]["name"]) == name:
                mine.append(queue.pop(0))
        out[i] = {"kernels": mine}
        if not mine:
            out[i]["unavailable"] = unavailable_reason(output) if not kernels else \
                "ncu's profiled kernels did not match this measurement's launches"
    return out


# --- the child -------------------------------------------------------------------------------------

class NcuChild:
    """In the child ncu runs (CHILD_ENV set, with --triton-perf): triton_bench profiles one call
    of fn instead of timing it."""

    def __init__(self, config: pytest.Config):
        self.path = os.environ[CHILD_ENV]
        self.calls: dict[str, int] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_triton_measure(self, config, request, fn, baseline, settings):
        index = self.calls[request.node.nodeid] = self.calls.get(request.node.nodeid, -1) + 1
        for _ in range(2):  # compile and autotune outside the profiled range
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        try:
            cap = launch_hooks.capture(fn, torch.cuda.synchronize)
        finally:
            torch.cuda.profiler.stop()
        with open(self.path, "a") as f:
            f.write(json.dumps({"nodeid": request.node.nodeid, "index": index,
                                "launches": [la.name for la in cap.launches]}) + "\n")
        ms = [1.0] * 20
        return Timings(ms=ms, baseline_ms=list(ms) if baseline is not None else None,
                       method="ncu-child", l2=settings.l2)
