"""Sweep the compute-bound kernels' variants and tile configs against torch, on the GPU.

    python3 bench/sweep_compute.py                     # every phase, within --budget seconds
    python3 bench/sweep_compute.py --phases matmul     # one phase (see PHASES)
    python3 bench/sweep_compute.py --smoke             # tiny shapes under Triton's interpreter

For matmul, conv2d and attention at the shapes of reference_kernels/tests/test_compute_perf.py
(and a few more), each candidate (variant: persistent or not, TMA or pointer loads; tile config:
block sizes, num_stages, num_warps) is run once, checked against torch's output at the real size
(max |out - torch| / max |torch|, on an output poisoned with NaN first), then timed with
triton.testing.do_bench(warmup=25, rep=100, return_mode="median"), which flushes L2 before every
launch; torch (cuBLAS, cuDNN, scaled_dot_product_attention) is timed the same way, once per shape.
"default" rows are what `pytest --triton-perf` times: the launcher as it ships, autotuning included.

Phases, in order; once --budget seconds have passed (225 by default, compiles included) every
remaining measurement is skipped and counted. Expected: about 2-3 minutes on an H100 with a cold
Triton cache (each kernel compiles in 0.1-1 s for sm_90; each do_bench takes about 0.2 s):
  defaults   every perf-test shape through the shipped launchers (fp16)
  matmul     4 variants x tile configs on big and M=128 shapes (fp16)
  attention  both variants at the shipped configs, other tile configs, every perf-test shape
  conv       tile configs at every ResNet-50 layer; 1x1 layers also as a matmul
  bf16       the matmul perf-test shapes in bf16 through the shipped launcher

Prints one line per measurement as it goes, one table at the end (best triton row per shape
starred), the geometric-mean speedups the perf tests check, and writes the rows as JSON to
$OUT/sweep_compute.json when $OUT is set. A failing variant prints its error and the rest go on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

PHASES = ("defaults", "matmul", "attention", "conv", "bf16")


def _parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    p.add_argument("--budget", type=float, default=225.0,
                   help="seconds after which remaining measurements are skipped (default 225)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny shapes under Triton's interpreter on the CPU: checks the script runs")
    return p.parse_args()


ARGS = _parse_args()
if ARGS.smoke:  # before any kernel module is imported: @triton.jit reads it then
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, installed or not

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from pytest_triton import TensorFactory  # noqa: E402
from reference_kernels import attention as at  # noqa: E402
from reference_kernels import conv2d as cv  # noqa: E402
from reference_kernels import matmul as mm  # noqa: E402

SMOKE = ARGS.smoke
DEVICE = torch.device("cpu" if SMOKE else "cuda")
# max |out - torch| / max |torch| above which a row is WRONG: a few units of the dtype's rounding
# (both sides round to it), far below what a wrong tile or a dropped term gives.
MAX_ERR = {torch.float16: 1e-2, torch.bfloat16: 4e-2}

# Shapes, as in test_compute_perf.py.
LLM = [(m, n, k) for m in (128, 1024, 4096, 8192) for n, k in ((4096, 4096), (14336, 4096),
                                                               (4096, 14336))]
SQUARE = [(8192, 8192, 8192), (2048, 2048, 2048)]  # 4096^3 is in LLM
RESNET50 = [(64, 64, 56, 3), (128, 128, 28, 3), (256, 256, 14, 3), (512, 512, 7, 3),
            (256, 64, 56, 1), (64, 256, 56, 1), (512, 128, 28, 1), (1024, 256, 14, 1)]
CONV_CHECKLIST = (256, 256, 56, 3)
ATTENTION = [(b, h, s, d, causal) for b, h, s in ((32, 16, 1024), (8, 16, 4096), (2, 16, 16384))
             for d in (64, 128) for causal in (False, True)]
CONV_BATCH = 32
if SMOKE:
    LLM = [(17, 40, 24), (64, 96, 40)]
    SQUARE = [(64, 64, 64)]
    RESNET50 = [(16, 16, 6, 3), (32, 16, 5, 1)]
    CONV_CHECKLIST = (16, 32, 6, 3)
    ATTENTION = [(1, 2, 40, 64, False), (1, 2, 40, 64, True)]
    CONV_BATCH = 2


def _cfg(bm, bn, bk, stages, warps, group=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group},
                         num_stages=stages, num_warps=warps)


# Candidates beyond the shipped configs (which are swept too): 4-warp 128 x 128 for big shapes;
# for small M 128 x 64, 64 x 256 and a 128-deep K step. (128 x 256 x 64 with 4 stages needs 256 KB
# of shared memory with the TMA epilogue, over the H100's 227 KB: left out.)
MATMUL_BIG = [c for c in mm._matmul_configs() if c.kwargs["BLOCK_M"] > 64] + [
    _cfg(128, 128, 64, 3, 4)]
MATMUL_SMALL = [c for c in mm._matmul_configs() if c.kwargs["BLOCK_M"] <= 64] + [
    _cfg(128, 64, 64, 4, 4), _cfg(64, 256, 64, 3, 4), _cfg(64, 64, 128, 4, 4)]
MATMUL_BIG_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (1024, 4096, 4096),
                     (4096, 4096, 14336), (8192, 14336, 4096)]
MATMUL_SMALL_SHAPES = [s for s in LLM if s[0] == 128]
CONV_CONFIGS = cv._conv2d_configs() + [_cfg(128, 128, 64, 3, 4), _cfg(64, 64, 64, 4, 4),
                                       _cfg(128, 64, 32, 4, 4), _cfg(256, 128, 64, 3, 8)]
ATTENTION_CONFIGS = {  # besides the shipped one per head dim (at._TUNED)
    64: [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w)
         for bm, bn, s, w in ((128, 64, 3, 4), (128, 64, 4, 8), (64, 64, 3, 4))],
    128: [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w)
          for bm, bn, s, w in ((128, 128, 3, 8), (128, 64, 2, 8), (64, 64, 3, 4))],
}
if SMOKE:
    MATMUL_BIG = [_cfg(32, 32, 32, 1, 4, 2)]
    MATMUL_SMALL = [_cfg(16, 32, 16, 1, 4, 1)]
    MATMUL_BIG_SHAPES = [(64, 96, 40)]
    MATMUL_SMALL_SHAPES = [(17, 40, 24)]
    CONV_CONFIGS = [_cfg(32, 16, 16, 1, 4, 2)]
    ATTENTION_CONFIGS = {64: [triton.Config({"BLOCK_M": 64, "BLOCK_N": 16}, num_stages=1,
                                            num_warps=4)]}


def cfg_str(cfg) -> str:
    """'128x256x64 s3 w8 g8' for a triton.Config; '-' for none."""
    if cfg is None:
        return "-"
    kw = cfg.kwargs
    dims = "x".join(str(kw[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in kw)
    group = f" g{kw['GROUP_M']}" if "GROUP_M" in kw else ""
    return f"{dims} s{cfg.num_stages} w{cfg.num_warps}{group}"


def _short(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:160]


class Case:
    """One shape of one kernel: torch's output (the reference) and torch's time."""

    def __init__(self, sweep, kernel, shape, dtype, torch_fn, flops, nbytes, group):
        self.kernel, self.shape, self.dtype, self.group = kernel, shape, dtype, group
        self.flops, self.nbytes = flops, nbytes
        self.ref = torch_fn().clone()
        key = (kernel, shape, str(dtype))
        if key not in sweep.torch_ms:
            sweep.torch_ms[key] = sweep.time(torch_fn)
            sweep.record(self, "torch", "-", sweep.torch_ms[key], 0.0, "ok")
        self.torch_ms = sweep.torch_ms[key]


class Sweep:
    def __init__(self, budget: float):
        self.t0 = time.time()
        self.budget = budget
        self.rows: list[dict] = []
        self.torch_ms: dict = {}
        self.skipped = 0
        self.make = TensorFactory(DEVICE, 0)

    def elapsed(self) -> float:
        return time.time() - self.t0

    def over_budget(self) -> bool:
        return self.elapsed() > self.budget

    def sync(self):
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()

    def time(self, fn) -> float:
        if SMOKE:  # no CUDA events under the interpreter: one wall-clock run is enough to test
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    def record(self, case, variant, config, ms, err, status, first_call_s=None):
        row = {"kernel": case.kernel, "shape": case.shape, "dtype": str(case.dtype).split(".")[-1],
               "group": case.group, "variant": variant, "config": config, "ms": ms,
               "tflops": case.flops / ms / 1e9 if ms else None,
               "gbps": case.nbytes / ms / 1e6 if ms else None,
               "x_torch": (self.torch_ms[(case.kernel, case.shape, str(case.dtype))] / ms
                           if ms and variant != "torch" else None),
               "max_err": err, "status": status, "first_call_s": first_call_s}
        self.rows.append(row)
        print(_line(row), flush=True)

    def try_variant(self, case, variant, config, fn, out, kernel=None):
        """Run fn once (compiling, autotuning), check `out` against the case's reference, then
        time it."""
        if self.over_budget():
            self.skipped += 1
            return
        try:
            out.fill_(float("nan"))  # an element the kernel never writes then fails the check
            start = time.time()
            fn()
            self.sync()
            first_call_s = time.time() - start
            diff = (out.float() - case.ref.float()).abs().max().item()
            err = diff / max(case.ref.float().abs().max().item(), 1e-30)
            if math.isnan(err):
                err = math.inf
            status = "ok" if err <= MAX_ERR[case.dtype] else "WRONG"
            ms = self.time(fn)
            chosen = cfg_str(config) if config is not None else \
                cfg_str(getattr(kernel, "best_config", None))
            self.record(case, variant, chosen, ms, err, status, first_call_s)
        except Exception as exc:  # one failing variant must not stop the sweep
            self.record(case, variant, cfg_str(config), None, None, "error: " + _short(exc))
            if _cuda_broken():
                raise SystemExit("the CUDA context is broken (see the error above); stopping: "
                                 "rerun with --phases to skip the failing variant's phase")

    def write_json(self, summary):
        out_dir = os.environ.get("OUT")
        if not out_dir:
            return
        payload = {"info": _info(), "elapsed_s": round(self.elapsed(), 1),
                   "skipped_over_budget": self.skipped, "rows": self.rows, "summary": summary}
        with open(os.path.join(out_dir, "sweep_compute.json"), "w") as f:
            json.dump(payload, f, indent=1)


def _cuda_broken() -> bool:
    if DEVICE.type != "cuda":
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:
        return True


def _info() -> dict:
    info = {"torch": torch.__version__, "triton": triton.__version__, "device": str(DEVICE),
            "tma_available": mm.tma_available(DEVICE), "matmul_default": mm.DEFAULT_VARIANT,
            "conv_1x1_default": cv.ONE_BY_ONE_VARIANT, "smoke": SMOKE}
    if DEVICE.type == "cuda":
        props = torch.cuda.get_device_properties(DEVICE)
        info.update(gpu=props.name, sms=props.multi_processor_count)
    return info


def _line(row) -> str:
    def num(v, fmt):
        return format(v, fmt) if v is not None else "-"
    return (f"{row['kernel']:9} {row['shape']:24} {row['dtype']:8} {row['variant']:24} "
            f"{row['config']:20} {num(row['ms'], '9.4f')} ms {num(row['tflops'], '7.1f')} TF/s "
            f"{num(row['gbps'], '7.0f')} GB/s x{num(row['x_torch'], '5.2f')} "
            f"err {num(row['max_err'], '.1e')} 1st {num(row['first_call_s'], '.1f')}s "
            f"{row['status']}")


# --- per-kernel drivers ---------------------------------------------------------------------


def _guarded(run):
    """A shape whose inputs or torch baseline fail prints why; the sweep goes on."""
    def wrapper(sw, *args):
        try:
            run(sw, *args)
        except Exception as exc:
            print(f"{run.__name__}{args[:-2]}: {_short(exc)}", flush=True)
            if _cuda_broken():
                raise SystemExit("the CUDA context is broken; stopping") from exc
    wrapper.__name__ = run.__name__
    return wrapper


@_guarded
def run_matmul(sw, m, n, k, dtype, candidates, group):
    """candidates: (variant or None for the shipped default, config or None for autotuning)."""
    if sw.over_budget():
        sw.skipped += len(candidates)
        return
    a, b, _ = mm.matmul_inputs(sw.make, m, n, k, dtype=dtype)
    c = torch.empty((m, n), dtype=dtype, device=DEVICE)
    c_torch = torch.empty_like(c)
    case = Case(sw, "matmul", f"{m}x{n}x{k}", dtype, lambda: torch.matmul(a, b, out=c_torch),
                mm.matmul_flops(a, b), mm.matmul_bytes(a, b), group)
    for variant, config in candidates:
        label = variant or f"default({mm._choose_variant(a, b, c, None)})"
        kernel = None if config else mm.matmul_kernel_for(a, b, variant=variant, out=c)
        sw.try_variant(case, label, config,
                       lambda: mm.matmul(a, b, out=c, variant=variant, config=config), c, kernel)


@_guarded
def run_conv(sw, c_in, k_out, hw, rs, candidates, group):
    """candidates: (variant or None for the shipped default, config or None for autotuning)."""
    if sw.over_budget():
        sw.skipped += len(candidates)
        return
    pad = rs // 2
    x, w, _ = cv.conv2d_inputs(sw.make, CONV_BATCH, c_in, hw, hw, k_out, rs, rs,
                               dtype=torch.float16)
    p, q = cv.conv2d_output_size(x.shape, w.shape, padding=pad)
    y = torch.empty((CONV_BATCH, k_out, p, q), dtype=x.dtype, device=DEVICE,
                    memory_format=torch.channels_last)
    shape = f"N{CONV_BATCH} C{c_in} K{k_out} {hw}x{hw} {rs}x{rs}"
    case = Case(sw, "conv2d", shape, torch.float16, lambda: F.conv2d(x, w, padding=pad),
                cv.conv2d_flops(x, w, padding=pad), cv.conv2d_bytes(x, w, padding=pad), group)
    for variant, config in candidates:
        label = variant or "default"
        kernel = None if config else cv.conv2d_kernel_for(x, w, padding=pad, variant=variant)
        sw.try_variant(case, label, config,
                       lambda: cv.conv2d(x, w, padding=pad, out=y, variant=variant, config=config),
                       y, kernel)


@_guarded
def run_attention(sw, b, h, s, d, causal, candidates, group):
    """candidates: (variant or None for the shipped default, config or None for autotuning)."""
    if sw.over_budget():
        sw.skipped += len(candidates)
        return
    q, k, v = at.attention_inputs(sw.make, b, h, s, d, dtype=torch.float16)
    o = torch.empty_like(q)
    case = Case(sw, "attention", f"B{b} H{h} S{s} D{d}{' causal' if causal else ''}",
                torch.float16, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                at.attention_flops(q, causal=causal), at.attention_bytes(q), group)
    for variant, config in candidates:
        label = variant or f"default({at._choose_variant(q, k, v, None)})"
        kernel = None if config else at.attention_kernel_for(q, k, v, variant=variant)
        sw.try_variant(case, label, config,
                       lambda: at.attention(q, k, v, causal=causal, out=o, variant=variant,
                                            config=config), o, kernel)


# --- phases -----------------------------------------------------------------------------


def phase_defaults(sw):
    for m, n, k in LLM:
        run_matmul(sw, m, n, k, torch.float16, [(None, None)], "matmul_llm_fp16")
    for m, n, k in SQUARE:
        run_matmul(sw, m, n, k, torch.float16, [(None, None)], "matmul_square_fp16")
    for layer in RESNET50:
        run_conv(sw, *layer, [(None, None)], "conv_resnet50")
    run_conv(sw, *CONV_CHECKLIST, [(None, None)], "conv_checklist")
    for case in ATTENTION:
        run_attention(sw, *case, [(None, None)], "attention")


def phase_matmul(sw):
    variants = [v for v in mm.VARIANTS if not v.startswith("tma") or mm.tma_available(DEVICE)]
    for shapes, configs in ((MATMUL_BIG_SHAPES, MATMUL_BIG), (MATMUL_SMALL_SHAPES, MATMUL_SMALL)):
        for m, n, k in shapes:
            run_matmul(sw, m, n, k, torch.float16, [(v, c) for v in variants for c in configs],
                       "matmul_sweep")


def phase_attention(sw):
    # Both variants at the shipped config; the other configs with the default variant only
    # (each config costs a compile per head dim, causal flag and variant).
    variants = [v for v in at.VARIANTS if v != "tma" or mm.tma_available(DEVICE)]
    for b, h, s, d, causal in ATTENTION:
        shipped = at._TUNED.get(d)
        candidates = [(v, shipped) for v in variants] if shipped else []
        candidates += [(at.DEFAULT_VARIANT if "tma" in variants else "pointer", c)
                       for c in ATTENTION_CONFIGS.get(d, [])]
        run_attention(sw, b, h, s, d, causal, candidates, "attention")


def phase_conv(sw):
    for c_in, k_out, hw, rs in RESNET50:
        candidates = [("implicit_gemm", c) for c in CONV_CONFIGS
                      if c.kwargs["BLOCK_N"] <= max(64, k_out)]
        if rs == 1:  # the 1x1 layer as a plain GEMM through matmul, autotuned
            candidates.append(("matmul", None))
        run_conv(sw, c_in, k_out, hw, rs, candidates, "conv_resnet50")


def phase_bf16(sw):
    for m, n, k in LLM:
        run_matmul(sw, m, n, k, torch.bfloat16, [(None, None)], "matmul_llm_bf16")
    run_matmul(sw, *SQUARE[0], torch.bfloat16, [(None, None)], "matmul_square_bf16")


# --- report -----------------------------------------------------------------------------


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(sw) -> dict:
    """Per perf-test group: geomean speedup of its default rows, and of the best row of any
    phase for each of its shapes."""
    ok = [r for r in sw.rows if r["variant"] != "torch" and r["status"] == "ok"]
    best: dict = {}
    for r in ok:
        key = (r["kernel"], r["shape"], r["dtype"])
        if key not in best or r["x_torch"] > best[key]["x_torch"]:
            best[key] = r
    summary = {}
    for group in sorted({r["group"] for r in sw.rows}):
        default = [r for r in ok if r["group"] == group and r["variant"].startswith("default")]
        keys = {(r["kernel"], r["shape"], r["dtype"]) for r in sw.rows if r["group"] == group}
        summary[group] = {
            "shapes": len(keys),
            "geomean_default": _geomean([r["x_torch"] for r in default]),
            "min_default": min((r["x_torch"] for r in default), default=None),
            "geomean_best": _geomean([best[k]["x_torch"] for k in keys if k in best]),
            "best": {f"{k[1]} {k[2]}": f"{best[k]['variant']} {best[k]['config']} "
                                       f"x{best[k]['x_torch']:.3f}" for k in keys if k in best},
        }
    return summary


def print_table(sw, summary):
    print("\n" + "=" * 150)
    print(f"{'kernel':9} {'shape':24} {'dtype':8} {'variant':24} {'config':20} {'ms':>12} "
          f"{'TF/s':>12} {'GB/s':>12} {'x torch':>6}  check")
    order: dict = {}
    for r in sw.rows:
        order.setdefault((r["kernel"], r["shape"], r["dtype"]), []).append(r)
    for rows in order.values():
        ok = [r for r in rows if r["variant"] != "torch" and r["status"] == "ok"]
        best = max(ok, key=lambda r: r["x_torch"]) if ok else None
        for r in sorted(rows, key=lambda r: (r["variant"] != "torch", r["ms"] is None,
                                             r["ms"] or 0)):
            print(("* " if r is best else "  ") + _line(r))
    print("\nGeometric-mean speedup over torch (perf tests: matmul_llm 0.85, conv_resnet50 0.7, "
          "attention 0.85; matmul_square 0.95 per shape at 4096^3 and 8192^3):")
    for group, s in summary.items():
        def num(v):
            return f"{v:.3f}" if v is not None else "-"
        print(f"  {group:20} shapes {s['shapes']:3}  default {num(s['geomean_default'])}  "
              f"(worst {num(s['min_default'])})  best-of-sweep {num(s['geomean_best'])}")
    info = _info()
    print(f"\n{info}\nelapsed {sw.elapsed():.0f} s; {sw.skipped} measurements skipped over the "
          f"{sw.budget:.0f} s budget")


def main() -> int:
    if not SMOKE and not torch.cuda.is_available():
        print("sweep_compute: no CUDA GPU (use --smoke to check the script on the CPU)")
        return 2
    sw = Sweep(ARGS.budget)
    print(_info(), flush=True)
    try:
        for name in ARGS.phases:
            if SMOKE and name == "bf16":
                print("-- phase bf16: skipped under --smoke (the interpreter computes bf16 "
                      "tl.dot wrongly)")
                continue
            if sw.over_budget():
                print(f"-- phase {name}: skipped, over the {ARGS.budget:.0f} s budget")
                continue
            print(f"-- phase {name} (at {sw.elapsed():.0f} s)", flush=True)
            globals()[f"phase_{name}"](sw)
            sw.write_json(summarize(sw))  # after every phase: partial results survive a kill
    finally:
        summary = summarize(sw)
        print_table(sw, summary)
        sw.write_json(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
