"""Sweep the matmul's small-M launches (split-K and tile candidates) against cuBLAS, on the GPU.

    python3 bench/sweep_matmul_smallm.py               # fp16 fully, bf16 for each shape's best few
    python3 bench/sweep_matmul_smallm.py --smoke       # tiny shapes under Triton's interpreter

At the LLM shapes of test_matmul_llm_shapes_speed with M in (128, 1024), N x K in (4096 x 4096,
14336 x 4096, 4096 x 14336), times in fp16:

  M=128   the default (matmul(a, b): split-K where the wave model says so, else the autotuned
          unsplit 64-row tiles), the split-K variant as matmul(variant="tma_splitk") runs it
          (its launch chosen by timing matmul_splitk_space), every launch of
          matmul_splitk_space(every_split=True) (each of SPLITK_TILES unsplit and at every
          split in 1-2 waves; the split ones both with the reduce kernel and with the in-kernel
          fixup, "+fx"), and EXTRA_TILES (128-row tiles with BLOCK_N 32 or 64, deeper or
          shallower pipelines) at their wave-model split and unsplit (reduce kernel);
  M=1024  the default (persistent, autotuned), and each big tile of the large-M group (now
          with the 5-stage 128 x 128) one tile per program and persistent;

then in bf16 (not with --smoke: bf16 dots are an interpreter gap) the default and the
BF16_BEST fastest fp16 candidates of each shape. Each row is
checked and timed by bench/sweep_compute.py's helpers (imported, not copied): run once into a
NaN-poisoned output, max |out - torch| / max |torch| against torch.matmul, then
pytest_triton.perf.timing.measure (the perf tests' timer: cold L2, CUDA graphs) with torch.matmul
timed interleaved, so "x" is the ratio test_matmul_llm_shapes_speed judges.

Prints one line per measurement, then per shape and dtype the default's and the best row's
speedup (and whether the default's timed choice is the best launch), geomeans, and writes every
row as JSON to $OUT/sweep_matmul_smallm.json when $OUT is set (after each group too, so partial
results survive a kill). Measurements past --budget seconds (compiles included) are skipped and
counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# First: it reads --smoke (switching the interpreter on before any kernel module is imported)
# and --max-time from this command line.
import sweep_compute as sc  # noqa: E402


def _parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sc.add_shared_options(p, budget=330.0)
    return p.parse_args()


ARGS = _parse_args()

import torch  # noqa: E402
import triton  # noqa: E402

mm = sc.mm
SMOKE = sc.SMOKE

# (M, N, K): M=128 is matmul's small-M path (M <= SMALL_M), M=1024 the persistent big tiles.
SHAPES_M128 = [(128, 4096, 4096), (128, 14336, 4096), (128, 4096, 14336)]
SHAPES_M1024 = [(1024, 4096, 4096), (1024, 14336, 4096), (1024, 4096, 14336)]
# Brief item 2 and the pipeline depth: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps).
# 64 x 64 x 128 in 3 stages fits two programs per SM (2 x ~104 KB); 128 x 64 x 64 in 6 stages
# keeps 144 KB in flight; 128 x 64 x 128 in 4 (192 KB); 128 x 32 x 128 reads the whole A from
# L2 for a thin B slice (M=128, N=4096: 128 tiles without a split).
EXTRA_TILES = [(64, 64, 128, 3, 4), (128, 64, 64, 6, 4), (128, 64, 128, 4, 4),
               (128, 32, 128, 4, 4)]
# M=1024: _matmul_configs' big group, and 128 x 128 with one stage more.
BIG_TILES = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (256, 128, 64, 3, 8),
             (128, 128, 64, 5, 8)]
BF16_BEST = 3  # fp16's fastest candidates of a shape also timed in bf16
if SMOKE:
    SHAPES_M128 = [(17, 40, 72), (33, 24, 136)]
    SHAPES_M1024 = [(40, 24, 40)]
    EXTRA_TILES = [(16, 32, 16, 1, 4)]
    BIG_TILES = [(32, 32, 32, 1, 4)]


def _cfg(bm, bn, bk, stages, warps, split=None) -> triton.Config:
    kw = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}
    if split is not None:
        kw["SPLIT_K"] = split
    return triton.Config(kw, num_stages=stages, num_warps=warps)


def _as_config(launch: dict) -> triton.Config:
    """A split-K launch dict of matmul.matmul_splitk_space as the triton.Config matmul(config=) takes."""
    kw = {k: v for k, v in launch.items() if k not in ("num_stages", "num_warps", "num_ctas")}
    return triton.Config(kw, num_stages=launch["num_stages"], num_warps=launch["num_warps"])


def candidates_m128(m, n, k) -> list:
    """(variant, config) pairs at a small-M shape: the default (tma), tma_splitk with its timed
    choice, every split-K launch of the space, and EXTRA_TILES unsplit and at their wave-model
    split."""
    out = [(None, None), ("tma_splitk", None)]
    space = mm.matmul_splitk_space(m, n, k, sc.DEVICE, every_split=True)
    out += [("tma_splitk", _as_config({**c, "FIXUP": False})) for c in space]
    # The split launches again with the in-kernel fixup instead of the reduce kernel.
    out += [("tma_splitk", _as_config({**c, "FIXUP": True})) for c in space if c["SPLIT_K"] > 1]
    # EXTRA_TILES at their wave-model split and unsplit.
    out += [("tma_splitk", _as_config(c))
            for c in mm.matmul_splitk_space(m, n, k, sc.DEVICE, tiles=EXTRA_TILES)]
    return out


def candidates_m1024(m, n, k) -> list:
    out = [(None, None)]
    for tile in BIG_TILES:
        out += [("tma", _cfg(*tile)), ("tma_persistent", _cfg(*tile))]
    return out


def _key(row) -> tuple:
    return row["shape"], row["dtype"]


def run_group(sw, shapes, dtype, group, candidates_of, measured):
    """Time each shape's candidates (sweep_compute.run_matmul: check, then time with torch
    interleaved); measured[(shape, dtype)] maps each row's (variant, config text) to its
    (variant, config), for choosing the bf16 candidates."""
    for m, n, k in shapes:
        cands = candidates_of(m, n, k)
        shape = f"M{m}_N{n}_K{k}"
        for variant, config in cands:
            measured.setdefault(shape, {})[(variant or "", sc.cfg_str(config))] = (variant,
                                                                                    config)
        sc.run_matmul(sw, m, n, k, dtype, cands, group)


def bf16_candidates(sw, shape, measured) -> list:
    """The default, and the BF16_BEST fastest explicit fp16 candidates of the shape that were
    right."""
    ok = [r for r in sw.rows if r["shape"] == shape and r["dtype"] == "float16"
          and r["status"] == "ok" and r["x_torch"] and not sc._is_default(r)]
    ok.sort(key=lambda r: -r["x_torch"])
    out = [(None, None)]
    for r in ok:
        pair = measured.get(shape, {}).get((r["variant"], r["config"]))
        if pair is not None and pair not in out:
            out.append(pair)
        if len(out) > BF16_BEST:
            break
    return out


def best_table(sw) -> dict:
    """Per (shape, dtype): the default row's and the best row's speedup and launch."""
    table = {}
    for r in sw.rows:
        if r["status"] != "ok" or not r["x_torch"]:
            continue
        t = table.setdefault(_key(r), {"default": None, "best": None})
        if sc._is_default(r) and (t["default"] is None or r["x_torch"] > t["default"]["x_torch"]):
            t["default"] = r
        if t["best"] is None or r["x_torch"] > t["best"]["x_torch"]:
            t["best"] = r
    return table


def print_report(sw, table):
    print("\n" + "=" * 150)
    print("Best per shape (x: torch ms / ours ms, > 1 faster than cuBLAS; default: what "
          "matmul(a, b) launches; the perf test wants every LLM shape >= 0.90 and the geomean "
          ">= 0.98):")
    for (shape, dtype), t in table.items():
        d, b = t["default"], t["best"]
        d_text = (f"default x{d['x_torch']:.3f} ({d['config']}, {d['ms'] * 1e3:.1f} us)"
                  if d else "default -")
        same = " = best" if d is not None and (d["config"] == b["config"] or d is b) else ""
        print(f"  {shape:22} {dtype:9} {d_text:52}{same:7} best x{b['x_torch']:.3f} "
              f"{b['variant']} {b['config']} ({b['ms'] * 1e3:.1f} us vs torch "
              f"{b['torch_ms'] * 1e3:.1f} us)")
    summary = sc.summarize(sw)
    print("\nGeometric means of x over the shapes of each group (default rows; best of sweep):")
    for group, s in summary.items():
        def num(v):
            return f"{v:.3f}" if v is not None else "-"
        print(f"  {group:12} shapes {s['shapes']:3}  default {num(s['geomean_default'])} "
              f"(worst {num(s['min_default'])})  best-of-sweep {num(s['geomean_best'])}")
    print(f"\n{sc._info()}\nelapsed {sw.elapsed():.0f} s; {sw.skipped} measurements skipped over "
          f"the {sw.budget:.0f} s budget")
    return summary


def write_json(sw, table, summary):
    out_dir = os.environ.get("OUT")
    if not out_dir:
        return
    best = {f"{shape} {dtype}": {
        "default": t["default"] and {k: t["default"][k] for k in ("variant", "config", "x_torch")},
        "best": {k: t["best"][k] for k in ("variant", "config", "x_torch")}}
        for (shape, dtype), t in table.items()}
    payload = {"info": sc._info(), "elapsed_s": round(sw.elapsed(), 1),
               "skipped_over_budget": sw.skipped, "rows": sw.rows, "best": best,
               "summary": summary}
    with open(os.path.join(out_dir, "sweep_matmul_smallm.json"), "w") as f:
        json.dump(payload, f, indent=1)


def main() -> int:
    if not SMOKE and not torch.cuda.is_available():
        print("sweep_matmul_smallm: no CUDA GPU (use --smoke to check the script on the CPU)")
        return 2
    if not mm.tma_available(sc.DEVICE):
        print("sweep_matmul_smallm: the small-M launches need TMA (Hopper, Triton >= 3.4)")
        return 2
    sw = sc.Sweep(ARGS.budget)
    print(sc._info(), flush=True)
    measured: dict = {}
    steps = [("fp16 M=128", lambda: run_group(sw, SHAPES_M128, torch.float16, "llm_m128_fp16",
                                              candidates_m128, measured)),
             ("fp16 M=1024", lambda: run_group(sw, SHAPES_M1024, torch.float16, "llm_m1024_fp16",
                                               candidates_m1024, measured))]
    for shapes, group in ((SHAPES_M128, "llm_m128_bf16"), (SHAPES_M1024, "llm_m1024_bf16")):
        for m, n, k in shapes if not SMOKE else ():  # bf16 dots are an interpreter gap
            steps.append((f"bf16 M{m}_N{n}_K{k}", lambda m=m, n=n, k=k, group=group: sc.run_matmul(
                sw, m, n, k, torch.bfloat16, bf16_candidates(sw, f"M{m}_N{n}_K{k}", measured),
                group)))
    try:
        for name, step in steps:
            print(f"-- {name} (at {sw.elapsed():.0f} s)", flush=True)
            step()
            write_json(sw, best_table(sw), sc.summarize(sw))
    finally:
        table = best_table(sw)
        write_json(sw, table, print_report(sw, table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
