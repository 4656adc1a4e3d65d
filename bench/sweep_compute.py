"""Sweep the compute-bound kernels' tile configs and variants against torch, on the GPU.

    python3 bench/sweep_compute.py                      # every phase, within --budget seconds
    python3 bench/sweep_compute.py --phases conv        # one phase or more (see PHASES)
    python3 bench/sweep_compute.py --smoke              # tiny shapes under Triton's interpreter

At the shapes of reference_kernels/tests/test_compute_perf.py, each candidate (tile config,
split-K, variant) is run once, checked against torch's output at the real size (max |out - torch|
/ max |torch|, on an output poisoned with NaN first), then timed the way `pytest --triton-perf`
times it: pytest_triton.perf.timing.measure, the plugin's own timer (cold L2, CUDA-graph replays for
kernels under 0.1 ms, per-launch events behind a spin kernel for longer ones), with torch
(cuDNN, SDPA, cuBLAS) timed interleaved, so that "x torch" is the ratio the perf tests judge.
The first sweep timed with triton.testing.do_bench, whose per-launch events include the host's
launch overhead: kernels of 10-50 us all looked alike, and some looked 4x slower than they are.

Phases, in order; once --budget seconds have passed (150 by default, compiles included) every
remaining measurement is skipped and counted:
  conv        the TMA implicit GEMM at every ResNet-50 layer: the plan conv2d picks by timing
              ("plan"), then each candidate it times (tiles, split-K) and for 3x3 layers the
              same tiles with A TMA-loaded (masked in registers); 1x1 layers also through the
              matmul module
  attention   candidate tiles per head dim at every perf-test shape (TMA variant)
  matmul      M=128 shapes: the default (split-K, its launch timed: see
              bench/sweep_matmul_smallm.py for the split-K sweep) and the unsplit small-M tiles,
              one program per tile and persistent

Prints one line per measurement as it goes, one table at the end (best row per shape starred),
the geometric-mean speedups the perf tests check (planned/default rows, and best of sweep), and
writes the rows as JSON to $OUT/sweep_compute.json when $OUT is set. A failing candidate prints
its error and the rest go on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

PHASES = ("conv", "attention", "matmul")


def _parse_args(known_only: bool = False):
    """The command line; known_only (imported by another sweep, sweep_matmul_smallm.py or
    sweep_attention.py, which reuse the timing, checking and report helpers): the options they
    share (--smoke, --max-time, --budget), the importer's own (and its -h) left to it."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], add_help=not known_only)
    if not known_only:  # an importer's --phases are its own
        p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    add_shared_options(p, budget=150.0)
    return p.parse_known_args()[0] if known_only else p.parse_args()


def add_shared_options(p: argparse.ArgumentParser, *, budget: float) -> None:
    """The options every sweep takes (this one, and those that import it for its helpers)."""
    p.add_argument("--budget", type=float, default=budget,
                   help=f"seconds after which remaining measurements are skipped (default "
                        f"{budget:g})")
    p.add_argument("--max-time", type=float, default=0.3,
                   help="seconds of sampling per measurement (the plugin's max_time; default 0.3)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny shapes under Triton's interpreter on the CPU: checks the script runs")


ARGS = _parse_args(known_only=__name__ != "__main__")
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
RESNET50 = [(64, 64, 56, 3), (128, 128, 28, 3), (256, 256, 14, 3), (512, 512, 7, 3),
            (256, 64, 56, 1), (64, 256, 56, 1), (512, 128, 28, 1), (1024, 256, 14, 1)]
CONV_BATCH = 32
ATTENTION = [(b, h, s, d, causal) for b, h, s in ((32, 16, 1024), (8, 16, 4096), (2, 16, 16384))
             for d in (64, 128) for causal in (False, True)]
MATMUL_SMALL = [(128, 4096, 4096), (128, 14336, 4096), (128, 4096, 14336)]
if SMOKE:
    RESNET50 = [(16, 16, 6, 3), (32, 16, 5, 1)]
    CONV_BATCH = 2
    ATTENTION = [(1, 2, 40, 64, False), (1, 2, 40, 64, True)]
    MATMUL_SMALL = [(17, 40, 24)]


def _mm_cfg(bm, bn, bk, stages, warps, group=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group},
                         num_stages=stages, num_warps=warps)


def _conv_cfg(bm, bn, bk, split, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                          "SPLIT_K": split}, num_stages=stages, num_warps=warps)


def _attn_cfg(bm, bn, stages, warps):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=warps)


def conv_candidates(x, w, pad):
    """(variant, config) pairs for one layer: the plan conv2d picks by timing (None), each of the
    candidates it times (conv2d.conv2d_tma_candidates), for 3x3 layers those with A TMA-loaded,
    and for 1x1 layers the matmul module."""
    if SMOKE:
        return [("tma", None), ("tma", _conv_cfg(16, 16, 16, 2, 4, 1))]
    rs = w.shape[2]
    cands = cv.conv2d_tma_candidates(x, w, padding=pad, variant="tma")
    out = [("tma", None)] + [("tma", c) for c in cands]
    if rs > 1:  # the other way to load A, masked in registers
        out += [("tma", triton.Config({**c.kwargs, "A_TMA": True}, num_stages=c.num_stages,
                                      num_warps=c.num_warps)) for c in cands]
    else:
        out.append(("matmul", None))
    return out


# Per head dim: the shipped candidates (autotuned between) and one more.
ATTENTION_CONFIGS = {
    64: [_attn_cfg(128, 64, 4, 8), _attn_cfg(64, 64, 3, 4), _attn_cfg(128, 64, 3, 4)],
    128: [_attn_cfg(128, 128, 3, 8), _attn_cfg(64, 64, 3, 4), _attn_cfg(128, 64, 4, 8)],
}
# M=128: the shipped small-M group (one program per tile, as matmul launches them for M <= 256),
# and the persistent launch of the N=14336 shape's best tile.
MATMUL_SMALL_CONFIGS = [("tma", _mm_cfg(64, 64, 128, 4, 4)), ("tma", _mm_cfg(64, 128, 64, 4, 4)),
                        ("tma", _mm_cfg(64, 64, 64, 4, 4)),
                        ("tma_persistent", _mm_cfg(64, 128, 64, 4, 4))]
if SMOKE:
    ATTENTION_CONFIGS = {64: [_attn_cfg(32, 16, 1, 4)]}
    MATMUL_SMALL_CONFIGS = [("tma", _mm_cfg(16, 32, 16, 1, 4, 1))]


def cfg_str(cfg) -> str:
    """'128x256x64/2 s3 w8 aT' for a triton.Config (8x16px:128x64: conv2d's tma_nhwc tile of
    8 x 16 pixels by 128 channels, 64 per step; /2: SPLIT_K, /2+fx: summed by matmul's
    in-kernel fixup; aT/aC: A loaded by TMA or by masked copies; r168: maxnreg), a launch dict,
    or a LaunchTuner's best_config text ('BLOCK_M: 64, ...'); '-' for none."""
    if cfg is None:
        return "-"
    if isinstance(cfg, str):  # reference_kernels/_tuning.py's "key: value, ..." text
        def value(v):
            return {"True": True, "False": False}.get(v) if v in ("True", "False") else int(v)
        try:
            cfg = {k: value(v) for k, v in (item.split(": ") for item in cfg.split(", "))}
        except ValueError:
            return cfg
    if isinstance(cfg, dict):
        kw = {k: v for k, v in cfg.items() if k not in ("num_stages", "num_warps")}
        cfg = triton.Config(kw, num_stages=cfg.get("num_stages", 3),
                            num_warps=cfg.get("num_warps", 4))
    kw = cfg.kwargs
    dims = "x".join(str(kw[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in kw)
    if "TILE_H" in kw:  # conv2d's tma_nhwc: TILE_H x TILE_W pixels
        dims = f"{kw['TILE_H']}x{kw['TILE_W']}px:{dims}"
    split = f"/{kw['SPLIT_K']}" if kw.get("SPLIT_K", 1) > 1 else ""
    a_load = {True: " aT", False: " aC"}.get(kw.get("A_TMA"), "")
    fixup = "+fx" if kw.get("FIXUP") and kw.get("SPLIT_K", 1) > 1 else ""  # matmul's fixup
    regs = f" r{cfg.maxnreg}" if getattr(cfg, "maxnreg", None) else ""
    return f"{dims}{split}{fixup} s{cfg.num_stages} w{cfg.num_warps}{a_load}{regs}"


def _short(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:160]


def _cuda_broken() -> bool:
    if DEVICE.type != "cuda":
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:
        return True


class Case:
    """One shape of one kernel: torch's output (the reference) and its callable (the baseline)."""

    def __init__(self, kernel, shape, dtype, torch_fn, flops, nbytes, group):
        self.kernel, self.shape, self.dtype, self.group = kernel, shape, dtype, group
        self.torch_fn, self.flops, self.nbytes = torch_fn, flops, nbytes
        self.ref = torch_fn().clone()


class Sweep:
    def __init__(self, budget: float):
        self.t0 = time.time()
        self.budget = budget
        self.rows: list[dict] = []
        self.skipped = 0
        self.make = TensorFactory(DEVICE, 0)

    def elapsed(self) -> float:
        return time.time() - self.t0

    def over_budget(self) -> bool:
        return self.elapsed() > self.budget

    def time(self, fn, baseline):
        """(ms, baseline ms, method): medians of the plugin's own timer."""
        if SMOKE:  # no CUDA events under the interpreter: one wall-clock run each is enough
            out = []
            for f in (fn, baseline):
                start = time.perf_counter()
                f()
                out.append((time.perf_counter() - start) * 1e3)
            return out[0], out[1], "wall"
        from pytest_triton import TimingSettings, measure

        t = measure(fn, baseline, TimingSettings(max_time=ARGS.max_time), DEVICE)
        return statistics.median(t.ms), statistics.median(t.baseline_ms), t.method

    def try_variant(self, case, variant, config, fn, out, kernel=None):
        """Run fn once (compiling, autotuning), check `out` against the case's reference, then
        time it interleaved with torch."""
        if self.over_budget():
            self.skipped += 1
            return
        chosen = cfg_str(config)
        try:
            out.fill_(float("nan"))  # an element the kernel never writes then fails the check
            start = time.time()
            fn()
            if DEVICE.type == "cuda":
                torch.cuda.synchronize()
            first_call_s = time.time() - start
            if config is None and kernel is not None:
                chosen = cfg_str(getattr(kernel, "best_config", None))
            diff = (out.float() - case.ref.float()).abs().max().item()
            err = diff / max(case.ref.float().abs().max().item(), 1e-30)
            if math.isnan(err):
                err = math.inf
            status = "ok" if err <= MAX_ERR[case.dtype] else "WRONG"
            ms, torch_ms, method = self.time(fn, case.torch_fn)
            self.record(case, variant, chosen, ms, torch_ms, method, err, status, first_call_s)
        except Exception as exc:  # one failing candidate must not stop the sweep
            self.record(case, variant, chosen, None, None, "-", None, "error: " + _short(exc))
            if _cuda_broken():
                raise SystemExit("the CUDA context is broken (see the error above); stopping: "
                                 "rerun with --phases to skip the failing candidate's phase")

    def record(self, case, variant, config, ms, torch_ms, method, err, status,
               first_call_s=None):
        row = {"kernel": case.kernel, "shape": case.shape, "dtype": str(case.dtype).split(".")[-1],
               "group": case.group, "variant": variant, "config": config, "ms": ms,
               "torch_ms": torch_ms, "method": method,
               "tflops": case.flops / ms / 1e9 if ms else None,
               "gbps": case.nbytes / ms / 1e6 if ms else None,
               "x_torch": torch_ms / ms if ms and torch_ms else None,
               "max_err": err, "status": status, "first_call_s": first_call_s}
        self.rows.append(row)
        print(_line(row), flush=True)

    def write_json(self, summary, name="sweep_compute.json"):
        out_dir = os.environ.get("OUT")
        if not out_dir:
            return
        payload = {"info": _info(), "elapsed_s": round(self.elapsed(), 1),
                   "skipped_over_budget": self.skipped, "rows": self.rows, "summary": summary}
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(payload, f, indent=1)


def _info() -> dict:
    info = {"torch": torch.__version__, "triton": triton.__version__, "device": str(DEVICE),
            "tma_available": mm.tma_available(DEVICE), "smoke": SMOKE}
    if DEVICE.type == "cuda":
        props = torch.cuda.get_device_properties(DEVICE)
        info.update(gpu=props.name, sms=props.multi_processor_count)
    return info


def _line(row) -> str:
    def num(v, fmt):
        return format(v, fmt) if v is not None else "-"
    return (f"{row['kernel']:9} {row['shape']:26} {row['dtype']:8} {row['variant']:8} "
            f"{row['config']:27} {num(row['ms'], '8.4f')} ms (torch {num(row['torch_ms'], '.4f')}"
            f" {row['method']:6}) {num(row['tflops'], '6.1f')} TF/s {num(row['gbps'], '6.0f')} GB/s"
            f" x{num(row['x_torch'], '5.3f')} err {num(row['max_err'], '.1e')} "
            f"1st {num(row['first_call_s'], '.1f')}s {row['status']}")


def _guarded(run):
    """A shape whose inputs or torch reference fail prints why; the sweep goes on."""
    def wrapper(sw, *args):
        try:
            run(sw, *args)
        except Exception as exc:
            print(f"{run.__name__}{args[:-2]}: {_short(exc)}", flush=True)
            if _cuda_broken():
                raise SystemExit("the CUDA context is broken; stopping") from exc
    wrapper.__name__ = run.__name__
    return wrapper


# --- phases -----------------------------------------------------------------------------


@_guarded
def run_conv(sw, c_in, k_out, hw, rs, group):
    if sw.over_budget():
        sw.skipped += 1
        return
    pad = rs // 2
    x, w, _ = cv.conv2d_inputs(sw.make, CONV_BATCH, c_in, hw, hw, k_out, rs, rs,
                               dtype=torch.float16)
    candidates = conv_candidates(x, w, pad)
    p, q = cv.conv2d_output_size(x.shape, w.shape, padding=pad)
    y = torch.empty((CONV_BATCH, k_out, p, q), dtype=x.dtype, device=DEVICE,
                    memory_format=torch.channels_last)
    case = Case("conv2d", f"{rs}x{rs}_C{c_in}_K{k_out}_H{hw}", torch.float16,
                lambda: F.conv2d(x, w, padding=pad), cv.conv2d_flops(x, w, padding=pad),
                cv.conv2d_bytes(x, w, padding=pad), group)
    for variant, config in candidates:
        label = variant if config is not None or variant != "tma" else "plan"
        kernel = None if config else cv.conv2d_kernel_for(x, w, padding=pad, variant=variant)
        sw.try_variant(case, label, config,
                       lambda: cv.conv2d(x, w, padding=pad, out=y, variant=variant, config=config),
                       y, kernel)


@_guarded
def run_attention(sw, b, h, s, d, causal, candidates, group):
    if sw.over_budget():
        sw.skipped += len(candidates)
        return
    q, k, v = at.attention_inputs(sw.make, b, h, s, d, dtype=torch.float16)
    o = torch.empty_like(q)
    case = Case("attention", f"B{b}_H{h}_S{s}_D{d}_causal{int(causal)}", torch.float16,
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                at.attention_flops(q, causal=causal), at.attention_bytes(q), group)
    for variant, config in candidates:
        label = variant or "default"
        kernel = None if config else at.attention_kernel_for(q, k, v, variant=variant)
        sw.try_variant(case, label, config,
                       lambda: at.attention(q, k, v, causal=causal, out=o, variant=variant,
                                            config=config), o, kernel)


@_guarded
def run_matmul(sw, m, n, k, dtype, candidates, group):
    if sw.over_budget():
        sw.skipped += len(candidates)
        return
    a, b, _ = mm.matmul_inputs(sw.make, m, n, k, dtype=dtype)
    c = torch.empty((m, n), dtype=dtype, device=DEVICE)
    c_torch = torch.empty_like(c)
    case = Case("matmul", f"M{m}_N{n}_K{k}", dtype, lambda: torch.matmul(a, b, out=c_torch),
                mm.matmul_flops(a, b), mm.matmul_bytes(a, b), group)
    for variant, config in candidates:
        label = variant or f"default({mm.matmul_variant(a, b, out=c)})"
        kernel = None if config else mm.matmul_kernel_for(a, b, variant=variant, out=c)
        sw.try_variant(case, label, config,
                       lambda: mm.matmul(a, b, out=c, variant=variant, config=config), c, kernel)


def phase_conv(sw):
    for c_in, k_out, hw, rs in RESNET50:
        run_conv(sw, c_in, k_out, hw, rs, "conv_resnet50")


def phase_attention(sw):
    variant = "tma" if mm.tma_available(DEVICE) else "pointer"
    for b, h, s, d, causal in ATTENTION:
        candidates = [(variant, c) for c in ATTENTION_CONFIGS.get(d, [])]
        run_attention(sw, b, h, s, d, causal, candidates, "attention")


def phase_matmul(sw):
    candidates = [(None, None)] + (MATMUL_SMALL_CONFIGS if mm.tma_available(DEVICE) else [])
    for m, n, k in MATMUL_SMALL:
        run_matmul(sw, m, n, k, torch.float16, candidates, "matmul_m128")


# --- report -----------------------------------------------------------------------------


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def by_candidate(sw, label) -> dict:
    """Per (group, candidate): geomean and worst x over the group's shapes (shape and dtype), and
    how many of them it ran correctly. label(row) names a row's candidate."""
    shapes: dict = {}
    for r in sw.rows:
        shapes.setdefault(r["group"], set()).add((r["shape"], r["dtype"]))
    out: dict = {}
    for r in sw.rows:
        entry = out.setdefault(r["group"], {}).setdefault(label(r), [])
        if r["status"] == "ok" and r["x_torch"]:
            entry.append(r["x_torch"])
    return {group: {name: {"geomean": _geomean(xs), "worst": min(xs, default=None),
                           "shapes_ok": len(xs), "shapes": len(shapes[group])}
                    for name, xs in cands.items()}
            for group, cands in out.items()}


def _is_default(row) -> bool:
    return row["variant"] == "plan" or row["variant"].startswith("default")


def summarize(sw) -> dict:
    """Per perf-test group: geomean speedup of its plan/default rows, and of the best row of any
    candidate for each of its shapes."""
    ok = [r for r in sw.rows if r["status"] == "ok" and r["x_torch"]]
    best: dict = {}
    for r in ok:
        key = (r["kernel"], r["shape"], r["dtype"])
        if key not in best or r["x_torch"] > best[key]["x_torch"]:
            best[key] = r
    summary = {}
    for group in sorted({r["group"] for r in sw.rows}):
        default = [r for r in ok if r["group"] == group and _is_default(r)]
        keys = sorted({(r["kernel"], r["shape"], r["dtype"]) for r in sw.rows
                       if r["group"] == group})
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
    order: dict = {}
    for r in sw.rows:
        order.setdefault((r["kernel"], r["shape"], r["dtype"]), []).append(r)
    for rows in order.values():
        ok = [r for r in rows if r["status"] == "ok" and r["x_torch"]]
        best = max(ok, key=lambda r: r["x_torch"]) if ok else None
        for r in sorted(rows, key=lambda r: (r["x_torch"] is None, -(r["x_torch"] or 0))):
            print(("* " if r is best else "  ") + _line(r))
    print("\nGeometric-mean speedup over torch (the perf tests' targets: "
          "reference_kernels/tests/test_compute_perf.py):")
    for group, s in summary.items():
        def num(v):
            return f"{v:.3f}" if v is not None else "-"
        print(f"  {group:16} shapes {s['shapes']:3}  plan/default {num(s['geomean_default'])}  "
              f"(worst {num(s['min_default'])})  best-of-sweep {num(s['geomean_best'])}")
        for shape, what in s["best"].items():
            print(f"      best {shape:32} {what}")
    print(f"\n{_info()}\nelapsed {sw.elapsed():.0f} s; {sw.skipped} measurements skipped over the "
          f"{sw.budget:.0f} s budget")


def main() -> int:
    if not SMOKE and not torch.cuda.is_available():
        print("sweep_compute: no CUDA GPU (use --smoke to check the script on the CPU)")
        return 2
    sw = Sweep(ARGS.budget)
    print(_info(), flush=True)
    try:
        for name in ARGS.phases:
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
