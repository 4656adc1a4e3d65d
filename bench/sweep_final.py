"""Issue 23's GPU measurements in one run: what the CPU side changed or prepared, on the GPU.

    python3 bench/sweep_final.py                 # every phase, within --budget seconds
    python3 bench/sweep_final.py --phases conv   # some phases (see PHASES), in this order
    python3 bench/sweep_final.py --smoke         # tiny shapes under Triton's interpreter

Phases, each within its share of --budget (200 s by default; a phase's unused time goes to the
next), one row per (shape, candidate), every row run once into a NaN-poisoned output, checked
against torch, then timed by bench/sweep_compute.py's Sweep (the perf tests' timer,
pytest_triton.perf.timing.measure, with the baseline interleaved):

  matmul     The new small-M default (split-K where the wave model says the unsplit tiles
             leave SMs idle, timed per shape class) against cuBLAS, the previous default
             (variant "tma", unsplit) and the split space's untimed pick, at M=128 (the three LLM
             shapes, fp16; N=4096 K=4096 in bf16 too) and at M=64 and M=16 (N=4096, K=4096:
             classes the sweeps never measured, where the rule splits 64 x 128 tiles 8 ways);
             M=1024 (N x K: 14336 x 4096, 4096 x 4096, 4096 x 14336) with the large-M
             autotuner that now holds 128x128x64 in 5 stages, against the 128x256x64
             persistent launch it used to pick.
  attention  D128 (the six test_attention_speed shapes, fp16): the default, the shipped
             128 x 128 tile and 64 x 64 over 2 stages (two programs per SM); D64: the default
             and the shipped 128 x 64 tile. (Triton's warp specialization, swept here on
             2026-11-25, was removed from the kernel: see reference_kernels/attention.py.)
  conv       ResNet-50's four 3x3 layers at batch 32 (fp16) against cuDNN: the "tma" plan (the
             default), the "tma_nhwc" plan (its candidates timed once per layer), and each
             "tma_nhwc" candidate.
  memory     Against a baseline that moves the same bytes (x column: our speed over it):
             softmax_persistent at 64K 16-bit columns (copy of x: 2 tensors) with the looped
             path pipelined over 2-3 stages, 2048-column steps, and the split rows; layernorm
             backward (torch.add of x and dy into dx: 3 tensors) at 1K, 4K, 16K, 64K fp16 and
             1K, 16K fp32 with NUM_STAGES 2-3, 4 programs per SM, and for wide rows bands of a
             half and a quarter of L2. Rows of 256 MB per tensor, as the perf tests.

Prints one line per measurement as it goes, then the table (best row per shape starred) and
the summaries the issue asks for; writes the rows and summaries as JSON to $OUT/sweeps.json when
$OUT is set (after each phase too: a kill keeps the rest).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sweep_compute as sc  # noqa: E402  (parses --smoke, --budget, --max-time from sys.argv)

PHASES = ("matmul", "attention", "conv", "memory")
# Shares of the budget, by phase (from the measured costs of the earlier sweeps on an H100:
# compiles included, attention's the largest).
SHARES = {"matmul": 0.2, "attention": 0.35, "conv": 0.2, "memory": 0.25}


def _parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    p.add_argument("--attention-candidate", type=int, default=None,
                   help="attention: only this candidate of each head dim's list (an index)")
    p.add_argument("--head-dims", type=int, nargs="+", default=[128, 64])
    p.add_argument("--attention-shapes", type=int, nargs="+", default=None,
                   help="attention: only these of ATTENTION_SHAPES (indices)")
    p.add_argument("--causal", choices=("both", "no", "yes"), default="both")
    p.add_argument("--watchdog", type=float, default=0,
                   help="seconds after which every thread's stack is printed and the process "
                        "exits (a kernel that never finishes, a compile that never ends)")
    sc.add_shared_options(p, budget=200.0)
    return p.parse_args()


ARGS = _parse_args()
if ARGS.watchdog:
    import faulthandler

    faulthandler.dump_traceback_later(ARGS.watchdog, exit=True)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from reference_kernels import layernorm, softmax  # noqa: E402

at, cv, mm = sc.at, sc.cv, sc.mm
SMOKE = sc.SMOKE
DEVICE = sc.DEVICE
sc.MAX_ERR.setdefault(torch.float32, 1e-4)
TENSOR_BYTES = 64 * 1024 if SMOKE else 256 * 2**20

MATMUL_SHAPES = [(128, 4096, 4096, torch.float16), (128, 14336, 4096, torch.float16),
                 (128, 4096, 14336, torch.float16), (128, 4096, 4096, torch.bfloat16),
                 (64, 4096, 4096, torch.float16), (16, 4096, 4096, torch.float16)]
MATMUL_LARGE = [(1024, 14336, 4096, torch.float16), (1024, 4096, 4096, torch.float16),
                (1024, 4096, 14336, torch.float16)]
ATTENTION_SHAPES = [(32, 16, 1024), (8, 16, 4096), (2, 16, 16384)]
CONV_LAYERS = [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7)]  # (C, K, H=W)
CONV_1X1 = [(256, 64, 56), (64, 256, 56), (512, 128, 28), (1024, 256, 14)]
CONV_BATCH = 32
SOFTMAX_COLS = 65536
LAYERNORM_BWD = [(1024, torch.float16), (4096, torch.float16), (16384, torch.float16),
                 (65536, torch.float16), (1024, torch.float32), (16384, torch.float32)]
if SMOKE:
    MATMUL_SHAPES = [(17, 48, 1088, torch.float16), (33, 40, 72, torch.float16)]
    MATMUL_LARGE = [(300, 40, 72, torch.float16)]
    ATTENTION_SHAPES = [(1, 2, 40)]
    CONV_LAYERS = [(16, 16, 6)]
    CONV_1X1 = [(32, 16, 6)]
    CONV_BATCH = 2
    SOFTMAX_COLS = 256
    LAYERNORM_BWD = [(64, torch.float32), (256, torch.float32)]


def _mm_config(launch: dict) -> triton.Config:
    """A split-K launch dict (matmul.matmul_splitk_space) as the triton.Config matmul takes."""
    kw = {k: v for k, v in launch.items() if k not in ("num_stages", "num_warps")}
    return triton.Config(kw, num_stages=launch["num_stages"], num_warps=launch["num_warps"])


def _attn(bm, bn, stages, warps):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=warps)


# --- matmul -----------------------------------------------------------------------------------

@sc._guarded
def run_matmul(sw, m, n, k, dtype, large, group):
    a, b, _ = mm.matmul_inputs(sw.make, m, n, k, dtype=dtype)
    c = torch.empty((m, n), dtype=dtype, device=DEVICE)
    c_torch = torch.empty_like(c)
    case = sc.Case("matmul", f"M{m}_N{n}_K{k}", dtype, lambda: torch.matmul(a, b, out=c_torch),
                   mm.matmul_flops(a, b), mm.matmul_bytes(a, b), group)
    chosen = mm.matmul_variant(a, b, out=c)
    sw.try_variant(case, f"default({chosen})", None, lambda: mm.matmul(a, b, out=c), c,
                   mm.matmul_kernel_for(a, b, out=c))
    if not mm.tma_available(DEVICE):
        return
    if large:  # the large-M group's former pick, persistent, as a config
        old = triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
                            num_stages=3, num_warps=8)
        if SMOKE:
            old = triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2},
                                num_stages=1, num_warps=4)
        sw.try_variant(case, "tma_persistent", old,
                       lambda: mm.matmul(a, b, out=c, variant="tma_persistent", config=old), c)
        return
    # The previous small-M default (unsplit, autotuned), and the split space's untimed pick.
    sw.try_variant(case, "tma(prev default)", None, lambda: mm.matmul(a, b, out=c, variant="tma"),
                   c, mm.matmul_kernel_for(a, b, variant="tma", out=c))
    first = _mm_config(mm.matmul_splitk_space(m, n, k, DEVICE)[0])
    sw.try_variant(case, "tma_splitk(untimed)", first,
                   lambda: mm.matmul(a, b, out=c, variant="tma_splitk", config=first), c)


def phase_matmul(sw):
    for m, n, k, dtype in MATMUL_SHAPES:
        name = "fp16" if dtype == torch.float16 else "bf16"
        run_matmul(sw, m, n, k, dtype, False, f"matmul_m{m}_{name}")
    for m, n, k, dtype in MATMUL_LARGE:
        run_matmul(sw, m, n, k, dtype, True, f"matmul_m{m}_fp16")


# --- attention --------------------------------------------------------------------------------

ATTENTION_CANDIDATES = {
    128: [_attn(128, 128, 3, 8), _attn(64, 64, 2, 4)],
    64: [_attn(128, 64, 4, 8)],
}
if SMOKE:
    ATTENTION_CANDIDATES = {128: [_attn(32, 16, 1, 4)], 64: [_attn(32, 16, 1, 4)]}


@sc._guarded
def run_attention(sw, b, h, s, d, causal, group):
    q, k, v = at.attention_inputs(sw.make, b, h, s, d, dtype=torch.float16)
    o = torch.empty_like(q)
    case = sc.Case("attention", f"B{b}_H{h}_S{s}_D{d}_causal{int(causal)}", torch.float16,
                   lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                   at.attention_flops(q, causal=causal), at.attention_bytes(q), group)
    if ARGS.attention_candidate is None:
        sw.try_variant(case, "default", None,
                       lambda: at.attention(q, k, v, causal=causal, out=o), o,
                       at.attention_kernel_for(q, k, v))
    variant = "tma" if mm.tma_available(DEVICE) else "pointer"
    for i, config in enumerate(ATTENTION_CANDIDATES[d]):
        if ARGS.attention_candidate not in (None, i):
            continue
        print(f"-- attention candidate {i}: {sc.cfg_str(config)}", flush=True)
        sw.try_variant(case, variant, config,
                       lambda config=config: at.attention(q, k, v, causal=causal, out=o,
                                                          variant=variant, config=config), o)


def phase_attention(sw):
    shapes = [ATTENTION_SHAPES[i] for i in ARGS.attention_shapes or range(len(ATTENTION_SHAPES))]
    causals = {"both": (False, True), "no": (False,), "yes": (True,)}[ARGS.causal]
    for d in ARGS.head_dims:
        for b, h, s in shapes:
            for causal in causals:
                run_attention(sw, b, h, s, d, causal, f"attention_d{d}_fp16")


# --- conv -------------------------------------------------------------------------------------

def _conv_case(sw, c_in, k_out, hw, rs, group):
    """(x, w, y, case) of a same-size rs x rs conv (padding rs // 2) at batch CONV_BATCH, fp16,
    cuDNN its baseline; y the channels_last output the candidates write."""
    pad = rs // 2
    x, w, _ = cv.conv2d_inputs(sw.make, CONV_BATCH, c_in, hw, hw, k_out, rs, rs,
                               dtype=torch.float16)
    y = torch.empty((CONV_BATCH, k_out, hw, hw), dtype=x.dtype, device=DEVICE,
                    memory_format=torch.channels_last)
    case = sc.Case("conv2d", f"{rs}x{rs}_C{c_in}_K{k_out}_H{hw}", torch.float16,
                   lambda: F.conv2d(x, w, padding=pad), cv.conv2d_flops(x, w, padding=pad),
                   cv.conv2d_bytes(x, w, padding=pad), group)
    return x, w, y, case


@sc._guarded
def run_conv(sw, c_in, k_out, hw, group):
    x, w, y, case = _conv_case(sw, c_in, k_out, hw, 3, group)
    sw.try_variant(case, "default", None, lambda: cv.conv2d(x, w, padding=1, out=y), y,
                   cv.conv2d_kernel_for(x, w, padding=1))
    for variant in ("tma", "tma_nhwc"):
        if not mm.tma_available(DEVICE):
            break
        sw.try_variant(case, f"plan({variant})", None,
                       lambda variant=variant: cv.conv2d(x, w, padding=1, out=y, variant=variant),
                       y, cv.conv2d_kernel_for(x, w, padding=1, variant=variant))
    candidates = [] if not mm.tma_available(DEVICE) else (
        [cv.INTERPRETER_NHWC_CONFIG] if SMOKE else cv.conv2d_tma_candidates(
            x, w, padding=1, variant="tma_nhwc"))
    for config in candidates:
        sw.try_variant(case, "tma_nhwc", config,
                       lambda config=config: cv.conv2d(x, w, padding=1, out=y,
                                                       variant="tma_nhwc", config=config), y)


@sc._guarded
def run_conv_1x1(sw, c_in, k_out, hw, group):
    x, w, y, case = _conv_case(sw, c_in, k_out, hw, 1, group)
    sw.try_variant(case, "default", None, lambda: cv.conv2d(x, w, out=y), y,
                   cv.conv2d_kernel_for(x, w))
    sw.try_variant(case, "matmul", None, lambda: cv.conv2d(x, w, out=y, variant="matmul"), y,
                   cv.conv2d_kernel_for(x, w, variant="matmul"))


def phase_conv(sw):
    for c_in, k_out, hw in CONV_LAYERS:
        run_conv(sw, c_in, k_out, hw, "conv_resnet50_3x3")
    for c_in, k_out, hw in CONV_1X1:  # the GEMM layers: the TMA plan or the matmul module's
        run_conv_1x1(sw, c_in, k_out, hw, "conv_resnet50_1x1")


# --- memory -----------------------------------------------------------------------------------

def _rows(cols: int, dtype: torch.dtype) -> int:
    return max(1, TENSOR_BYTES // (cols * dtype.itemsize))


@sc._guarded
def run_softmax(sw, cols, dtype, group):
    (x,) = softmax.softmax_inputs(sw.make, _rows(cols, dtype), cols, dtype=dtype)
    out = torch.empty_like(x)
    copy_out = torch.empty_like(x)
    case = sc.Case("softmax", f"{x.shape[0]}x{cols}", dtype,
                   lambda: torch.softmax(x.float(), dim=-1), 0, softmax.softmax_bytes(x), group)
    case.torch_fn = lambda: copy_out.copy_(x)  # the baseline: a copy of the same bytes
    sw.try_variant(case, "softmax default", None, lambda: softmax.softmax(x, out=out), out,
                   softmax.SOFTMAX_TUNER)
    sw.try_variant(case, "persistent default", None,
                   lambda: softmax.softmax_persistent(x, out=out), out,
                   softmax.SOFTMAX_PERSISTENT_TUNER)
    # The looped path, as softmax_persistent took it before the split rows: 16 warps, evict_first
    loop = {"SPLIT": False, "num_warps": 16, "EVICT": True, "programs_per_sm": None}
    looped = [{**loop, "NUM_STAGES": 2}, {**loop, "NUM_STAGES": 3},
              {**loop, "BLOCK_N": 2048, "num_warps": 8, "NUM_STAGES": 3},
              {**loop, "NUM_STAGES": 3, "programs_per_sm": 2}]
    split = {"SPLIT": True, "BLOCK_N": 4096, "num_warps": 4, "EVICT": False}
    if SMOKE:  # the interpreter's split chunk is the whole row; loops of 64-column steps
        looped = [{"BLOCK_N": 64, **c} for c in looped[:2]]
        split = {**split, "BLOCK_N": triton.next_power_of_2(cols)}
    for config in looped + [split]:
        sw.try_variant(case, "persistent", _text(config),
                       lambda config=config: softmax.softmax_persistent(x, out=out,
                                                                        config=config), out)


@sc._guarded
def run_layernorm_backward(sw, cols, dtype, group):
    x, w, b = layernorm.layernorm_inputs(sw.make, _rows(cols, dtype), cols, dtype=dtype)
    dy = sw.make.like(x)
    _, mean, rstd = layernorm.layernorm(x, w, b)
    dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
    add_out = torch.empty_like(x)

    def reference():  # dx in float32 from float32 copies (dw and db: the tests' job)
        return layernorm.layernorm_backward_reference(dy.float(), x.float(), w.float(),
                                                      b.float())[0]

    case = sc.Case("ln_bwd", f"{x.shape[0]}x{cols}", dtype, reference, 0,
                   layernorm.layernorm_backward_bytes(x), group)
    case.torch_fn = lambda: torch.add(x, dy, out=add_out)  # reads 2 tensors, writes 1: ours too
    configs = [None, {"NUM_STAGES": 2}, {"NUM_STAGES": 3},
               {"NUM_STAGES": 2, "programs_per_sm": 4}]
    if cols > layernorm.FUSED_BWD_MAX_COLS or SMOKE:
        l2 = _l2_bytes()
        configs = [None, {"NUM_STAGES": 2, "SUMS_NUM_STAGES": 3}, {"band_bytes": l2 // 2},
                   {"band_bytes": l2 // 4},
                   {"band_bytes": l2 // 2, "NUM_STAGES": 2, "SUMS_NUM_STAGES": 3}]
        if SMOKE:  # the split path with small blocks
            configs = [{"BLOCK_N": 32, "SUMS_BLOCK_N": 32, **(c or {})} for c in configs]
    for config in configs:
        sw.try_variant(case, "default" if config is None else "backward", _text(config),
                       lambda config=config: layernorm.layernorm_backward(
                           dy, x, w, mean, rstd, dx=dx, dw=dw, db=db, config=config), dx)


def _l2_bytes() -> int:
    """L2 of the device (torch's property): what the band candidates are sized by."""
    if DEVICE.type != "cuda":
        return 50 * 2**20 if not SMOKE else 2**14
    return torch.cuda.get_device_properties(DEVICE).L2_cache_size


def _text(config) -> str:
    return "-" if not config else " ".join(f"{k}={v}" for k, v in config.items())


def phase_memory(sw):
    for dtype in (torch.float16,) if not SMOKE else (torch.float32,):
        run_softmax(sw, SOFTMAX_COLS, dtype, "softmax_persistent_64k")
    for cols, dtype in LAYERNORM_BWD:
        run_layernorm_backward(sw, cols, dtype, "layernorm_backward")
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()


# --- report -----------------------------------------------------------------------------------

def _label(r) -> str:
    """A row's candidate: its variant, with its config where the variant's config is its own
    choice (the defaults and plans choose theirs per shape)."""
    if r["config"] in (None, "-") or r["variant"].startswith(
            ("default", "plan", "tma(prev", "softmax default", "persistent default")):
        return r["variant"]
    return f"{r['variant']} {r['config']}"


def _by_candidate(sw) -> dict:
    return sc.by_candidate(sw, _label)


def report(sw) -> dict:
    return {"groups": sc.summarize(sw), "candidates": _by_candidate(sw),
            "baselines": {"matmul": "cuBLAS (torch.matmul)", "attention": "SDPA",
                          "conv2d": "cuDNN (F.conv2d)",
                          "softmax": "a copy of x (same bytes: x is the copy-ceiling fraction)",
                          "ln_bwd": "torch.add(x, dy) (same bytes: 2 reads, 1 write)"}}


def print_report(sw, summary):
    sc.print_table(sw, summary["groups"])
    print("\nPer candidate over its group's shapes (x: ours over the baseline; geomean, worst):")
    for group, cands in summary["candidates"].items():
        print(f"  {group}")
        for label, c in sorted(cands.items(), key=lambda kv: -(kv[1]["geomean"] or 0)):
            geo = f"{c['geomean']:.3f}" if c["geomean"] else "-"
            worst = f"{c['worst']:.3f}" if c["worst"] else "-"
            short = "" if c["shapes_ok"] == c["shapes"] else \
                f"  ({c['shapes_ok']} of {c['shapes']} shapes ok)"
            print(f"     {label:58} geomean {geo}  worst {worst}{short}")
    print(f"\nbaselines: {summary['baselines']}")


def main() -> int:
    if not SMOKE and not torch.cuda.is_available():
        print("sweep_final: no CUDA GPU (use --smoke to check the script on the CPU)")
        return 2
    budget = ARGS.budget
    sw = sc.Sweep(budget)
    print(sc._info(), flush=True)
    phases = [p for p in PHASES if p in ARGS.phases]
    share_left = sum(SHARES[p] for p in phases)
    try:
        for name in phases:
            # This phase's share of the time left: what a phase leaves unused goes on.
            sw.budget = sw.elapsed() + (budget - sw.elapsed()) * SHARES[name] / share_left
            share_left -= SHARES[name]
            print(f"-- {name} (at {sw.elapsed():.0f} s, until {sw.budget:.0f} s)", flush=True)
            globals()[f"phase_{name}"](sw)
            sw.write_json(report(sw), "sweeps.json")
    except KeyboardInterrupt:  # final_run.sh's timeout: report what was measured
        print(f"-- interrupted at {sw.elapsed():.0f} s", flush=True)
    finally:
        sw.budget = budget
        summary = report(sw)
        print_report(sw, summary)
        sw.write_json(summary, "sweeps.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
