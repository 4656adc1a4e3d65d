"""On a GPU: what the CPU path reads for the GPU's architecture against what the GPU's own
compile reports, for every launch of the bundled kernels' triton_resources tests.

    python3 bench/resources_check.py          # writes $OUT/resources_check.json (~1-2 min)

Runs `pytest reference_kernels -m triton_resources -n 8` with this module as a plugin. For each
distinct launch a gated test made, the real numbers are the launched CompiledKernel's: n_regs and
n_spills from the driver (n_spills x 4 bytes), metadata.shared. The CPU path's are what a run
without this GPU would read: the CompileSpec bound from the launch's arguments by Triton's own
binder (archcompile.spec_of_call, as under the interpreter), compiled for GPUTarget("cuda", cc)
with a Triton cache of its own (a fresh compile, not the launch's cached one), its cubin read by
cuobjdump (REG, STACK). Each row says whether the three numbers agree, and whether the two specs
are the same compile. Also: env/device.py's row for this GPU's architecture against
torch.cuda.get_device_properties().
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PARTS_ENV = "RESOURCES_CHECK_DIR"


# --- the plugin, in each pytest-xdist worker -------------------------------------------------------

def _numbers(res) -> dict:
    return {"n_regs": res.n_regs, "spill_bytes": res.spill_bytes, "shared": res.shared,
            "error": res.error}


def pytest_triton_resources_checked(item, recorded, lines):
    import torch

    import pytest_triton as archcompile
    from pytest_triton import arch_of

    if all(rec.compiled is None for rec in recorded):
        return  # under the interpreter: nothing compiled to compare with
    arch = arch_of(torch.cuda.get_device_capability())
    rows = []
    own_cache = tempfile.mkdtemp(prefix="triton-cpu-path-")
    for rec in recorded:
        if rec.compiled is None:
            continue
        real = archcompile.real_resources(rec.compiled, arch)
        row = {"test": item.nodeid, "kernel": rec.spec.describe(real.num_warps), "arch": arch,
               "real": _numbers(real)}
        try:
            spec = archcompile.spec_of_call(rec.spec.fn, rec.args, rec.kwargs)
            before = os.environ.get("TRITON_CACHE_DIR")
            os.environ["TRITON_CACHE_DIR"] = own_cache
            try:
                cpu = archcompile.compile_resources(spec, arch)
            finally:
                if before is None:
                    os.environ.pop("TRITON_CACHE_DIR", None)
                else:
                    os.environ["TRITON_CACHE_DIR"] = before
            row.update(cpu=_numbers(cpu), same_spec=(spec.signature, spec.constexprs, spec.attrs)
                       == (rec.spec.signature, rec.spec.constexprs, rec.spec.attrs))
        except Exception as exc:  # noqa: BLE001 - reported in the row, never dropped
            row.update(cpu={"error": f"{type(exc).__name__}: {exc}"}, same_spec=False)
        keys = ("n_regs", "spill_bytes", "shared")
        row["equal"] = all(row["cpu"].get(k) == row["real"][k] for k in keys) \
            and row["cpu"].get("error") is None
        rows.append(row)
    path = os.path.join(os.environ[PARTS_ENV], f"part-{os.getpid()}.jsonl")
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


# --- the script ----------------------------------------------------------------------------------

def arch_table_row() -> dict:
    import torch

    sys.path.insert(0, ROOT)
    from pytest_triton import ARCH_LIMITS, arch_of, sm_limits

    props = torch.cuda.get_device_properties(0)
    cc = (props.major, props.minor)
    measured = sm_limits(props, cc)
    table = ARCH_LIMITS.get(arch_of(cc))
    fields = ("regs_per_sm", "smem_per_sm", "smem_per_block", "max_threads_per_sm",
              "max_blocks_per_sm")
    got = {k: measured[k] for k in fields}
    want = {k: getattr(table, k) for k in fields} if table else None
    return {"device": props.name, "arch": arch_of(cc), "torch": got, "table": want,
            "ok": want == got}


def main() -> int:
    out_dir = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out_dir, exist_ok=True)
    parts = tempfile.mkdtemp(prefix="resources-check-")
    env = {**os.environ, PARTS_ENV: parts,
           "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), ROOT,
                                          os.environ.get("PYTHONPATH", "")]),
           "PYTEST_TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="pytest-triton-cache-")}
    cmd = [sys.executable, "-m", "pytest", os.path.join(ROOT, "reference_kernels"), "-m",
           "triton_resources", "-p", "resources_check", "-p", "no:cacheprovider", "-q", "-n", "8",
           "-rfEs"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    rows = [json.loads(line) for p in sorted(glob.glob(os.path.join(parts, "*.jsonl")))
            for line in open(p)]
    rows.sort(key=lambda r: (r["test"], r["kernel"]))
    table = arch_table_row()
    equal = sum(r["equal"] for r in rows)
    doc = {"command": " ".join(["pytest reference_kernels -m triton_resources -n 8",
                                "-p resources_check"]),
           "pytest_rc": proc.returncode, "pytest_tail": proc.stdout.strip().splitlines()[-1:],
           "launches": len(rows), "equal": equal, "arch_table": table, "rows": rows}
    with open(os.path.join(out_dir, "resources_check.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{equal} of {len(rows)} launches: the CPU path's registers, spills and shared memory "
          f"equal the real compile's; arch table {'matches' if table['ok'] else 'DIFFERS'} "
          f"({table})")
    for r in rows:
        if not r["equal"]:
            print(f"DIFFERENT: {r['test']} {r['kernel']}: real {r['real']} cpu {r['cpu']}")
    return 0 if rows and equal == len(rows) and table["ok"] and proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
