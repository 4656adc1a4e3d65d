"""Sweep attention's tiles against torch's SDPA, on the GPU.

    python3 bench/sweep_attention.py                   # D 128, then D 64, fp16, within --budget s
    python3 bench/sweep_attention.py --dtypes fp16 bf16 --head-dims 128
    python3 bench/sweep_attention.py --smoke           # tiny shapes under Triton's interpreter

At every shape of test_attention_speed (reference_kernels/tests/test_compute_perf.py: B, H, S in
(32, 16, 1024), (8, 16, 4096), (2, 16, 16384), causal and not), per head dim: the default (the
autotuned launch `attention` makes, TMA on Hopper) and each candidate config of the TMA kernel
(reference_kernels/attention.py: tiles, stages, warps; its WARP_SPECIALIZE option, swept here
before, was removed: see the module's docstring).
Each is run once on an output poisoned with NaN, checked against SDPA's output (max |out - sdpa|
/ max |sdpa|, WRONG above sweep_compute.MAX_ERR), then timed with the perf tests' own timer
(pytest_triton.perf.timing.measure: cold L2, SDPA interleaved), so that "x torch" is the ratio
test_attention_speed judges. The machinery (Sweep, Case, the timer, the row format and table) is
bench/sweep_compute.py's, imported.

Budget: 5 candidates at D 128 and 3 at D 64 (and the default's two tiles), compiled once per
(head dim, causal) as S is no constexpr: about 24 compiles and 60 measurements, about 80 s on
an H100 with --max-time 0.2. Once --budget seconds (330 by default) have passed every remaining
measurement is skipped and counted; D 128 runs first.

Prints one line per measurement as it goes, then the table (best row per shape starred), per
candidate its geomean and worst speedup over the shapes of its head dim (what switching the
default to it would give), best-of-sweep per shape, and writes everything as JSON to
$OUT/sweep_attention.json when $OUT is set (after each head dim too: a kill keeps the rest).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sweep_compute as sc  # noqa: E402  (parses --smoke, --budget, --max-time from sys.argv)

DTYPE_NAMES = ("fp16", "bf16")


def _parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--head-dims", nargs="+", type=int, choices=(64, 128), default=[128, 64])
    p.add_argument("--dtypes", nargs="+", choices=DTYPE_NAMES, default=["fp16"])
    sc.add_shared_options(p, budget=330.0)
    return p.parse_args()


ARGS = _parse_args()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from reference_kernels import attention as at  # noqa: E402

SMOKE = sc.SMOKE
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SHAPES = [(32, 16, 1024), (8, 16, 4096), (2, 16, 16384)]
if SMOKE:
    SHAPES = [(1, 2, 40)]


def _cfg(bm, bn, stages, warps):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=warps)


# Per head dim, after the default: the shipped first candidate as a config (the baseline each
# candidate is judged against), then (issue 23, what gets Triton's FlashAttention kernels to
# SDPA's speed on Hopper):
# - D 128 at 64 x 64 over 2 stages and 4 warps: 80 KB and 138 registers, so two programs share
#   an SM and one's softmax runs while the other's products do (the 3-stage tile the default
#   tunes to at S = 1024 needs 113 KB: one per SM).
CANDIDATES = {
    128: [_cfg(128, 128, 3, 8), _cfg(64, 64, 2, 4)],
    64: [_cfg(128, 64, 4, 8)],
}
if SMOKE:  # the interpreter's blocks
    CANDIDATES = {d: [_cfg(32, 16, 1, 4)] for d in (64, 128)}


@sc._guarded
def run_shape(sw, b, h, s, d, causal, dtype, variant, candidates, group):
    if sw.over_budget():
        sw.skipped += len(candidates) + 1
        return
    q, k, v = at.attention_inputs(sw.make, b, h, s, d, dtype=dtype)
    o = torch.empty_like(q)
    case = sc.Case("attention", f"B{b}_H{h}_S{s}_D{d}_causal{int(causal)}", dtype,
                   lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                   at.attention_flops(q, causal=causal), at.attention_bytes(q), group)
    # The default: what attention() launches unasked (autotuned; its chosen config is shown).
    sw.try_variant(case, "default", None, lambda: at.attention(q, k, v, causal=causal, out=o),
                   o, at.attention_kernel_for(q, k, v))
    for config in candidates:
        sw.try_variant(case, variant, config,
                       lambda: at.attention(q, k, v, causal=causal, out=o, variant=variant,
                                            config=config), o)


def _label(r) -> str:
    # The default's config differs per shape (autotuned): one entry for all its rows.
    return "default" if r["variant"] == "default" else f"{r['variant']} {r['config']}"


def _by_candidate(sw) -> dict:
    """Per (group, variant and config): sweep_compute.by_candidate (a candidate short of all
    shapes is marked in the report)."""
    return sc.by_candidate(sw, _label)


def report(sw) -> dict:
    summary = {"groups": sc.summarize(sw), "candidates": _by_candidate(sw),
               "targets": "each shape >= 0.9x SDPA, geomean >= 1.0x"}
    return summary


def print_report(sw, summary):
    sc.print_table(sw, summary["groups"])
    print("\nPer candidate over its head dim's shapes (targets: every shape >= 0.9x SDPA, geomean "
          ">= 1.0x); '*' meets both:")
    for group, cands in summary["candidates"].items():
        print(f"  {group}")
        ranked = sorted(cands.items(), key=lambda kv: -(kv[1]["geomean"] or 0))
        for label, c in ranked:
            full = c["shapes_ok"] == c["shapes"]
            good = full and c["worst"] is not None and c["worst"] >= 0.9 and c["geomean"] >= 1.0
            geo = f"{c['geomean']:.3f}" if c["geomean"] else "-"
            worst = f"{c['worst']:.3f}" if c["worst"] else "-"
            short = "" if full else f"  ({c['shapes_ok']} of {c['shapes']} shapes ok)"
            print(f"   {'*' if good else ' '} {label:38} geomean {geo}  worst {worst}{short}")


def main() -> int:
    if not SMOKE and not torch.cuda.is_available():
        print("sweep_attention: no CUDA GPU (use --smoke to check the script on the CPU)")
        return 2
    sw = sc.Sweep(ARGS.budget)
    variant = "tma" if sc.mm.tma_available(sc.DEVICE) else "pointer"
    print(sc._info(), f"candidates: the {variant} kernel", flush=True)
    try:
        for d in ARGS.head_dims:
            for name in ARGS.dtypes:
                group = f"attention_d{d}_{name}"
                print(f"-- {group} (at {sw.elapsed():.0f} s)", flush=True)
                for b, h, s in SHAPES:
                    for causal in (False, True):
                        run_shape(sw, b, h, s, d, causal, DTYPES[name], variant,
                                  CANDIDATES[d], group)
                sw.write_json(report(sw), "sweep_attention.json")
    finally:
        summary = report(sw)
        print_report(sw, summary)
        sw.write_json(summary, "sweep_attention.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
