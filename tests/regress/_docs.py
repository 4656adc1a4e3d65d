"""Saved-run documents for the history tests: the real GPU runs' reports wrapped as runs, and
small hand-made ones."""

import copy
import gzip
import json
import pathlib

from pytest_triton.regress import schema

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Two real --triton-perf-json reports, of the H100 and the H200 at one commit, compressed (their
# samples at float32's digits, which CUDA events time in)
H100 = ROOT / "tests/data/h100-perf.json.gz"
H200 = ROOT / "tests/data/h200-perf.json.gz"
_cache = {}


def report(path: pathlib.Path) -> dict:
    """A real --triton-perf-json document (a fresh copy each call)."""
    if path not in _cache:
        _cache[path] = json.loads(gzip.decompress(path.read_bytes()))
    return copy.deepcopy(_cache[path])


def run(doc: dict, name="main", commit="a" * 40, **run_fields) -> dict:
    """`doc` as a saved run."""
    block = {"name": name, "commit": commit, "branch": "main", "dirty": False,
             "versions": {"triton": "3.6.0"}, "host": "ci-1", "shards": [], **run_fields}
    return schema.stamp({**doc, "run": block}, schema.HISTORY)


def small(device: dict | None, nodeids=("t.py::test_a",), **run_fields) -> dict:
    """A hand-made saved run: one dry-run record per nodeid (no measurements)."""
    doc = {"created": "2026-11-26T00:00:00+00:00", "environment": {"devices": [device] if device
                                                                   else []},
           "device": device, "settings": {},
           "results": [{"nodeid": n, "outcome": "passed", "measurements": [], "target": None,
                        "geomean": None} for n in nodeids]}
    return run(doc, **run_fields)


def device(sku="H100 SXM", fingerprint="e53cef8121918e4f") -> dict:
    return {"name": f"NVIDIA {sku}", "sku": sku, "sms": 132, "driver": "580.0",
            "fingerprint": fingerprint}
