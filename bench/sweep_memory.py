"""Sweep the memory-bound kernels' launch configs and variants against torch, on the GPU.

    python3 bench/sweep_memory.py                      # every phase, within --budget seconds
    python3 bench/sweep_memory.py --phases softmax     # some phases (see PHASES), in this order
    python3 bench/sweep_memory.py --smoke              # tiny shapes under Triton's interpreter

At the shapes of reference_kernels/tests/test_memory_perf.py (~256 MB per tensor), every
candidate is run once into a NaN-poisoned output, checked against torch at the real size
(max |out - ref| / max |ref|, ref computed in float32 from the same inputs), then timed with
triton.testing.do_bench(warmup=25, rep=100, return_mode="median"), which flushes L2 before each
launch; torch is timed the same way once per shape. GB/s counts each input read once and each
output written once (the modules' cost models). "default" rows are the launchers as they ship:
what `pytest --triton-perf` times.

Phases, in order; once --budget seconds have passed (compiles included) the rest is skipped:
  defaults      every perf-test shape through the shipped launchers, all dtypes
  vector_add    the persistent grid (tiles taken from a counter): tile size, warps, programs
                per SM, a second tile in flight (PREFETCH); with --full also the autotune
                space one config at a time and the slow control
  softmax       64K split rows: chunk width, warps, held vs reread chunks, register caps
                (maxnreg); softmax_persistent at 16K (strided and pipelined vs tickets) and 1K
                (rows per tile, programs per SM) (fp32, fp16)
  softmax_1k    softmax_persistent at 1K columns, float32 (torch's best case): rows per tile,
                warps (1-warp programs reduce within a warp), programs per SM
  layernorm     forward, 64K split rows: chunk width, w and b before or after the exchange,
                register caps; 16K: single pass with w and b loaded late vs early vs split;
                4K fp16 w and b late (fp32, fp16)
  layernorm_wide forward at 64K columns only (all dtypes): split-row chunk width, warps and
                register caps; prints the compiled kernels' registers and spills
  layernorm_bwd backward configs, whole-row vs split backward (fp16)
  fused         add_mul and bias_gelu_residual tile configs
  ceiling       the device's copy ceiling (pytest_triton.perf.calibrate, as --triton-perf-peak
                measured takes it) and torch.add's bandwidth, for reading the rows against
  grid          a broad grid of single-pass tiles (rows per program x warps) and split-row
                chunks (width x warps x register cap) for softmax and the layernorm forward at
                every width, fp32 and fp16, and softmax_persistent's 1K tiles: what a new GPU
                prefers, without the H100's sweeps as a starting point
  rows4k        16-bit rows of 4K columns (fp16, bf16), where the H200 ran softmax and the
                layernorm forward within 1% of their copy fraction: rows per program x warps,
                softmax's ticketed and strided persistent kernels (programs per SM), the
                layernorm's w and b early or late and eviction hints
  wide          16K and 64K rows (fp32, fp16): split rows with held chunks (register caps,
                RELOAD) against single passes (the split-looped kernels it also timed were
                dropped in 293dd7c: 0.60-0.73 of copy on the H200)
A variant whose first result is wrong, or whose second call takes over a second (a split row
waiting on programs that never come), is reported and not timed.
About 3-4 minutes on an H100 with a cold Triton cache. Prints one line per measurement, then one
table (the best Triton row of each shape starred), and writes the rows as JSON to
$OUT/sweep_memory.json when $OUT is set. A failing variant prints its error; the rest go on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

PHASES = ("defaults", "vector_add", "softmax", "softmax_1k", "layernorm", "layernorm_wide",
          "layernorm_bwd", "fused", "ceiling", "grid", "wide", "rows4k")


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    p.add_argument("--budget", type=float, default=220.0,
                   help="seconds after which the remaining measurements are skipped (220)")
    p.add_argument("--full", action="store_true",
                   help="also the vector_add autotune space and the slow control")
    p.add_argument("--smoke", action="store_true",
                   help="tiny shapes under Triton's interpreter on the CPU: checks the script runs")
    return p.parse_args()


ARGS = _args()
SMOKE = ARGS.smoke
if SMOKE:  # before any kernel module is imported: @triton.jit reads it then
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, installed or not

import torch  # noqa: E402
import triton  # noqa: E402

from pytest_triton import TensorFactory  # noqa: E402
from reference_kernels import fused, layernorm, softmax, vector_add  # noqa: E402
from reference_kernels.tests import controls  # noqa: E402

DEVICE = torch.device("cpu" if SMOKE else "cuda")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SWEPT_DTYPES = (torch.float32, torch.float16)  # bf16 moves the same bytes as fp16
TENSOR_BYTES = 64 * 1024 if SMOKE else 256 * 2**20
COLS = (64, 256, 1024, 4096) if SMOKE else (1024, 4096, 16384, 65536)
SINGLE_MAX = 512 if SMOKE else softmax.SINGLE_PASS_MAX_COLS  # smoke: 4096 takes the looped path
# max |out - ref| / max |ref| above which a row is flagged WRONG: a few roundings of the dtype.
MAX_ERR = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _short(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:150]


def _cfg_str(cfg) -> str:
    if cfg is None:
        return "-"
    if isinstance(cfg, triton.Config):
        return " ".join([f"{k}={v}" for k, v in cfg.kwargs.items()] + [f"w{cfg.num_warps}"])
    return " ".join(f"{k}={v}" for k, v in cfg.items())


class Sweep:
    def __init__(self, budget: float):
        self.t0 = time.time()
        self.budget = budget
        self.rows: list[dict] = []
        self.skipped = 0
        self.make = TensorFactory(DEVICE, 0)

    def over(self) -> bool:
        return time.time() - self.t0 > self.budget

    def time(self, fn) -> float:
        if SMOKE:  # no CUDA events under the interpreter: one wall-clock run tests the script
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    def sync(self) -> None:
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()

    def _row(self, case, variant, config, ms=None, err=None, status="ok", first_s=None):
        row = {"kernel": case.kernel, "shape": list(case.shape), "dtype": _dt(case.dtype),
               "variant": variant, "config": config, "ms": ms,
               "gbps": case.nbytes / ms / 1e6 if ms else None,
               "x_torch": case.torch_ms / ms if ms and case.torch_ms and variant != "torch"
               else None,
               "max_err": err, "status": status, "first_call_s": first_s}
        self.rows.append(row)
        print(_line(row), flush=True)

    def case(self, kernel, shape, dtype, nbytes, torch_fn, ref_fn):
        """A shape of a kernel: its reference output(s) and torch's time (None if it failed)."""
        if self.over():
            self.skipped += 1
            return None
        c = Case(kernel, shape, dtype, nbytes)
        try:
            c.refs = [r.float() for r in _as_list(ref_fn())]
            self.sync()
            c.torch_ms = self.time(torch_fn)
            self._row(c, "torch", "-", c.torch_ms)
        except Exception as exc:  # noqa: BLE001 - report and go on
            self._row(c, "torch", "-", status=_short(exc))
            if c.refs is None:
                return None
        return c

    def run(self, case, variant, config, fn, outs):
        """Run fn once into poisoned outs (compiling, autotuning), check, then time it."""
        if case is None or self.over():
            self.skipped += 1
            return
        config = config if isinstance(config, str) else _cfg_str(config)
        try:
            for o in outs:
                o.fill_(float("nan"))
            start = time.time()
            fn()
            self.sync()
            first_s = time.time() - start
            err = max(_rel_err(o, r) for o, r in zip(outs, case.refs))
            status = "ok" if err <= MAX_ERR[case.dtype] else "WRONG"
            if status != "ok":  # a wrong kernel's speed is of no use, and may be a hang
                self._row(case, variant, config, None, err, status, first_s)
                return
            start = time.time()
            fn()
            self.sync()
            if not SMOKE and time.time() - start > 1.0:
                self._row(case, variant, config, None, err, "HANG?", first_s)
                return
            ms = self.time(fn)
            self._row(case, variant, config, ms, err, status, first_s)
        except Exception as exc:  # noqa: BLE001 - one failing variant must not stop the sweep
            self._row(case, variant, config, status=_short(exc))
        finally:
            if DEVICE.type == "cuda":
                torch.cuda.synchronize()


class Case:
    def __init__(self, kernel, shape, dtype, nbytes):
        self.kernel, self.shape, self.dtype, self.nbytes = kernel, tuple(shape), dtype, nbytes
        self.refs = None
        self.torch_ms = None


def _as_list(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (out.float() - ref).abs()
    if torch.isnan(diff).any():  # an element never written (poison) or a split row timed out
        return float("inf")
    return diff.max().item() / max(ref.abs().max().item(), 1e-30)


def _line(r: dict) -> str:
    num = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    shape = "x".join(map(str, r["shape"]))
    return (f"{r['kernel']:<20} {shape:>13} {r['dtype']:<8} {r['variant']:<18} "
            f"{num(r['ms'], '.4f'):>8} {num(r['gbps'], '.0f'):>6} {num(r['x_torch'], '.3f'):>6} "
            f"{num(r['max_err'], '.1e'):>8} {r['status']:<6} {r['config']}")


def _rows_for(cols: int, dtype: torch.dtype) -> int:
    return max(1, TENSOR_BYTES // (cols * dtype.itemsize))


# --- phases ----------------------------------------------------------------------------------

def _vector_add_case(sw, dtype):
    n = TENSOR_BYTES // dtype.itemsize
    x, y = vector_add.vector_add_inputs(sw.make, n, dtype=dtype)
    out, tout = torch.empty_like(x), torch.empty_like(x)
    case = sw.case("vector_add", (n,), dtype, vector_add.vector_add_bytes(x, y),
                   lambda: torch.add(x, y, out=tout), lambda: x.float() + y.float())
    return case, x, y, out


def _softmax_case(sw, dtype, cols):
    (x,) = softmax.softmax_inputs(sw.make, _rows_for(cols, dtype), cols, dtype=dtype)
    case = sw.case("softmax", x.shape, dtype, softmax.softmax_bytes(x),
                   lambda: torch.softmax(x, dim=-1), lambda: torch.softmax(x.float(), dim=-1))
    return case, x, torch.empty_like(x)


def _layernorm_case(sw, dtype, cols):
    x, w, b = layernorm.layernorm_inputs(sw.make, _rows_for(cols, dtype), cols, dtype=dtype)
    ref = lambda: torch.nn.functional.layer_norm(x.float(), (cols,), w.float(), b.float())  # noqa
    case = sw.case("layernorm_fwd", x.shape, dtype, layernorm.layernorm_bytes(x),
                   lambda: torch.nn.functional.layer_norm(x, (cols,), w, b), ref)
    return case, x, w, b, torch.empty_like(x)


def _layernorm_bwd_case(sw, dtype, cols):
    x, w, b = layernorm.layernorm_inputs(sw.make, _rows_for(cols, dtype), cols, dtype=dtype)
    dy = sw.make.like(x)
    leaves = [t.detach().requires_grad_(True) for t in (x, w, b)]
    y = torch.nn.functional.layer_norm(leaves[0], (cols,), leaves[1], leaves[2])

    def ref():
        # float32 reference gradients from float32 copies of the inputs
        return layernorm.layernorm_backward_reference(dy.float(), x.float(), w.float(), b.float())

    case = sw.case("layernorm_bwd", x.shape, dtype, layernorm.layernorm_backward_bytes(x),
                   lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True), ref)
    _, mean, rstd = layernorm.layernorm(x, w, b)
    outs = (torch.empty_like(x), torch.empty_like(w), torch.empty_like(b))
    return case, (dy, x, w, mean, rstd), outs


def _add_mul_case(sw, dtype):
    a, b, c = fused.add_mul_inputs(sw.make, TENSOR_BYTES // dtype.itemsize, dtype=dtype)
    case = sw.case("add_mul", a.shape, dtype, fused.add_mul_bytes(a),
                   lambda: fused.add_mul_reference(a, b, c),
                   lambda: fused.add_mul_reference(a.float(), b.float(), c.float()))
    return case, (a, b, c), torch.empty_like(a)


def _bias_gelu_case(sw, dtype):
    cols = 4096 if not SMOKE else 256
    x, bias, res = fused.bias_gelu_residual_inputs(sw.make, _rows_for(cols, dtype), cols,
                                                   dtype=dtype)
    case = sw.case("bias_gelu_residual", x.shape, dtype, fused.bias_gelu_residual_bytes(x),
                   lambda: fused.bias_gelu_residual_reference(x, bias, res),
                   lambda: fused.bias_gelu_residual_reference(x.float(), bias.float(),
                                                              res.float()))
    return case, (x, bias, res), torch.empty_like(x)


def _shipped(fn, *args, **kwargs):
    """The config a launcher ships with, as _cfg_str shows it."""
    return _cfg_str(fn(*args, **kwargs))


def phase_defaults(sw):
    for dtype in DTYPES:
        case, x, y, out = _vector_add_case(sw, dtype)
        sw.run(case, "default", "autotuned", lambda: vector_add.vector_add(x, y, out=out), [out])
        if case is not None and not SMOKE:
            case_cfg = vector_add.vector_add_kernel_for().best_config
            sw.rows[-1]["config"] = f"autotuned: {_cfg_str(case_cfg)}"
        sw.run(case, "default persistent",
               _shipped(vector_add.vector_add_persistent_config, x.numel(), dtype),
               lambda: vector_add.vector_add_persistent(x, y, out=out), [out])
        del x, y, out
    for dtype in DTYPES:
        for cols in COLS:
            case, x, out = _softmax_case(sw, dtype, cols)
            sw.run(case, "default", _shipped(softmax.softmax_config, *x.shape, dtype, False),
                   lambda: softmax.softmax(x, out=out), [out])
            sw.run(case, "default persistent",
                   _shipped(softmax.softmax_config, *x.shape, dtype, True),
                   lambda: softmax.softmax_persistent(x, out=out), [out])
            del x, out
    for dtype in DTYPES:
        for cols in COLS:
            case, x, w, b, y = _layernorm_case(sw, dtype, cols)
            sw.run(case, "default", _shipped(layernorm.layernorm_config, *x.shape, dtype),
                   lambda: layernorm.layernorm(x, w, b, out=y), [y])
            del x, w, b, y
            case, args, outs = _layernorm_bwd_case(sw, dtype, cols)
            dx, dw, db = outs
            sw.run(case, "default", _shipped(layernorm.layernorm_backward_config, *args[1].shape,
                                             dtype),
                   lambda: layernorm.layernorm_backward(*args, dx=dx, dw=dw, db=db), outs)
            del args, outs, dx, dw, db
    for dtype in DTYPES:
        case, (a, b, c), out = _add_mul_case(sw, dtype)
        sw.run(case, "default", "autotuned", lambda: fused.add_mul(a, b, c, out=out), [out])
        case, (x, bias, res), out = _bias_gelu_case(sw, dtype)
        sw.run(case, "default", "autotuned",
               lambda: fused.bias_gelu_residual(x, bias, res, out=out), [out])


def phase_vector_add(sw):
    for dtype in SWEPT_DTYPES:
        case, x, y, out = _vector_add_case(sw, dtype)
        sw.run(case, "default", "autotuned", lambda: vector_add.vector_add(x, y, out=out), [out])
        sw.run(case, "default persistent",
               _shipped(vector_add.vector_add_persistent_config, x.numel(), dtype),
               lambda: vector_add.vector_add_persistent(x, y, out=out), [out])
        # Run 8: 4096/8/2 best for fp32 (2972 GB/s), 2048/4/8 for fp16 (2981); PREFETCH (a
        # second tile in flight per program) not measured yet. fp32 4096/8 with PREFETCH takes
        # 113 registers: 2 programs per SM at most.
        for block, warps, per_sm, prefetch in ((2048, 4, 8, False), (4096, 8, 3, False),
                                               (4096, 8, 2, True), (2048, 4, 4, True),
                                               (2048, 4, 6, True), (4096, 8, 4, True)):
            if dtype == torch.float32 and prefetch and block == 4096 and per_sm > 2:
                continue  # does not fit: the grid would run in two waves
            cfg = {"BLOCK_SIZE": block, "num_warps": warps, "programs_per_sm": per_sm,
                   "PREFETCH": prefetch}
            if SMOKE:
                cfg["BLOCK_SIZE"] = 256
            sw.run(case, "persistent", cfg,
                   lambda c=cfg: vector_add.vector_add_persistent(x, y, out=out, config=c), [out])
        if dtype == torch.float32 and ARGS.full:
            for cfg in vector_add.vector_add_configs()[1:]:
                sw.run(case, "tiled", cfg,
                       lambda c=cfg: vector_add.vector_add(x, y, out=out, config=c), [out])
            # the perf suite's negative control must miss 88% by 2x
            sw.run(case, "slow control", "BLOCK_SIZE=32 w1",
                   lambda: controls.add_slow(x, y, out=out), [out])
        del x, y, out


# Widths of the open questions (smoke: small stand-ins that take the same paths there).
WIDE = 4096 if SMOKE else 65536  # split rows
MID = 256 if SMOKE else 16384  # the widest single pass
NARROW = 64 if SMOKE else 1024


def _softmax_variants(cols, dtype):
    """(launcher name, config overrides) for one shape, the shipped configs first.

    Register counts are Triton 3.6's for sm_90; "programs" are per SM, "KB" the chunk bytes an
    SM holds: the speed of the split rows followed it in run 8 (fp16: 40 KB 1935 GB/s, 64 KB
    2493, 80 KB 2557; fp32 80 KB 2613, 128 KB 2846).
    """
    half = dtype != torch.float32
    if cols == WIDE:
        out = [("default", None)]
        if half:
            out += [("split", {"BLOCK_N": b, "num_warps": w, "RELOAD": r, "maxnreg": m})
                    for b, w, r, m in (
                        (4096, 4, True, None),  # 48 registers, 10 programs x 8 KB, reread
                        (4096, 4, False, 40),  # 40 (40 B spilled): 12 x 8 KB
                        (2048, 4, False, None),  # 32: 16 x 4 KB
                        (8192, 4, False, None),  # 96: 5 x 16 KB
                        (8192, 4, False, 80),  # 80 (16 B spilled): 6 x 16 KB
                        (8192, 4, True, None),  # 72: 7 x 16 KB, reread
                        (8192, 4, True, 64),  # 64: 8 x 16 KB, reread
                        (8192, 8, False, None))]  # 48: 5 x 16 KB
        else:
            out += [("split", {"BLOCK_N": b, "num_warps": w, "RELOAD": r, "maxnreg": m})
                    for b, w, r, m in (
                        (4096, 4, False, 56),  # 56 (no spill): 9 x 16 KB
                        (2048, 4, False, None),  # 36: 14 x 8 KB
                        (8192, 8, False, None))]  # 80: 3 x 32 KB
        return out
    if cols == MID:
        # softmax_persistent: the strided kernel (shared-memory pipelining) vs tickets
        out = [("default persistent", None)]
        out += [("persistent", c) for c in (
            {"NUM_STAGES": 2, "num_warps": 16, "programs_per_sm": 2, "EVICT": True},
            {"NUM_STAGES": 3, "num_warps": 16, "programs_per_sm": 2, "EVICT": True},
            {"NUM_STAGES": 2, "num_warps": 16, "programs_per_sm": 1, "EVICT": True},
            {"NUM_STAGES": 2, "num_warps": 8, "programs_per_sm": 2, "EVICT": True},
            {"NUM_STAGES": 1, "num_warps": 32, "programs_per_sm": 1, "EVICT": False})]
        return out
    # NARROW: softmax_persistent's tiles; torch's fp32 1K softmax runs at ~2850-2900 GB/s
    out = [("default persistent", None)]
    out += [("persistent", {"ROWS": r, "num_warps": w, "programs_per_sm": p})
            for r, w, p in ((1, 4, 8), (2, 4, 4), (2, 4, 8), (4, 4, 4), (4, 4, 8), (2, 4, 6),
                            (4, 8, 4))]
    return out


def phase_softmax(sw):
    for dtype, cols in ((torch.float16, WIDE), (torch.float32, WIDE), (torch.float16, MID),
                        (torch.float32, MID), (torch.float32, NARROW), (torch.float16, NARROW)):
        case, x, out = _softmax_case(sw, dtype, cols)
        for variant, over in _softmax_variants(cols, dtype):
            launcher = softmax.softmax_persistent if "persistent" in variant else softmax.softmax
            shipped = softmax.softmax_config(*x.shape, dtype, "persistent" in variant)
            if over is not None and {**shipped, **over} == shipped:
                continue  # the default row measures it
            if over is None:
                shown = _shipped(softmax.softmax_config, *x.shape, dtype,
                                 "persistent" in variant)
            else:
                shown = over
                if SMOKE and "BLOCK_N" in over:
                    # the interpreter cannot split a row over programs
                    over = {**over, "BLOCK_N": 64, "SPLIT": False}
            sw.run(case, variant, shown,
                   lambda f=launcher, c=over: f(x, out=out, config=c), [out])
        del x, out


def phase_softmax_1k(sw):
    case, x, out = _softmax_case(sw, torch.float32, NARROW)
    sw.run(case, "default", _shipped(softmax.softmax_config, *x.shape, torch.float32, False),
           lambda: softmax.softmax(x, out=out), [out])
    sw.run(case, "default persistent",
           _shipped(softmax.softmax_config, *x.shape, torch.float32, True),
           lambda: softmax.softmax_persistent(x, out=out), [out])
    # Run 14: then shipped (2 rows, 4 warps, 4 per SM) 2884 GB/s vs torch 2896; 2 rows on 2
    # warps, 8 per SM 2918; 1-2 warp programs with one row 2754-2802; 8 warps 2390-2787. Run 15:
    # 4 rows on 2 warps 2924 (4 or 8 per SM), now shipped; the rest 2903-2923.
    for r, w, p in ((2, 2, 8), (2, 2, 12), (2, 2, 16), (4, 2, 8), (4, 4, 6), (4, 4, 8),
                    (2, 4, 8), (4, 2, 4)):
        over = {"ROWS": r, "num_warps": w, "programs_per_sm": p}
        sw.run(case, "persistent", over,
               lambda c=over: softmax.softmax_persistent(x, out=out, config=c), [out])
    del x, out


def _layernorm_variants(cols, dtype):
    """Config overrides for one shape (None: as shipped). Registers and programs per SM as in
    _softmax_variants; run 8: fp16 16K single pass with w and b in float32 2300 GB/s (one
    program per SM), split 4096/4 reread 2600."""
    half = dtype != torch.float32
    out = [None]
    if cols == WIDE:  # the layernorm_wide phase sweeps chunk widths and register caps
        out += [{"RELOAD": True}, {"LATE_WB": False}]  # chunk read again; w, b during the wait
    elif cols == MID and half:
        out += [{"LATE_WB": False},  # 113 registers: 1 program per SM
                {"LATE_WB": True, "num_warps": 32},  # 60: 1 program of 32 warps
                {"BLOCK_N": 4096, "SPLIT": True, "LATE_WB": True, "num_warps": 4, "maxnreg": 40},
                {"BLOCK_N": 4096, "SPLIT": True, "RELOAD": True, "num_warps": 4}]
    elif cols == MID:
        out += [{"LATE_WB": True, "num_warps": 32}]  # 32 registers: 2 programs of 32 warps
    elif cols == NARROW * 4:  # 4K 16-bit: 48 registers with w and b early, 40 late
        out += [{"LATE_WB": True}, {"num_warps": 4, "LATE_WB": True}]
    return out


def phase_layernorm(sw):
    for dtype, cols in ((torch.float16, WIDE), (torch.float32, WIDE), (torch.float16, MID),
                        (torch.float32, MID), (torch.float16, NARROW * 4)):
        case, x, w, b, y = _layernorm_case(sw, dtype, cols)
        shipped = layernorm.layernorm_config(*x.shape, dtype)
        for over in _layernorm_variants(cols, dtype):
            if over is not None and {**shipped, **over} == shipped:
                continue  # the default row measures it
            shown = _shipped(layernorm.layernorm_config, *x.shape, dtype) if over is None \
                else over
            if SMOKE and over and "BLOCK_N" in over:
                over = {**over, "BLOCK_N": 64, "SPLIT": False}
            sw.run(case, "default" if over is None else "forward", shown,
                   lambda c=over: layernorm.layernorm(x, w, b, out=y, config=c), [y])
        del x, w, b, y


def _layernorm_wide_variants(dtype):
    """64K-column forward variants of the split kernel (each chunk normalised in two halves):
    chunk width, warps and register caps around the shipped config (registers per thread, Triton
    3.6 on sm_90: 4096-column float32 chunks 64; 8192-column 16-bit chunks 75, 72 with no spill).
    Runs 11-12 also timed the chunks on a persistent grid (dropped: see layernorm_config)."""
    split = {"SPLIT": True, "LATE_WB": True, "num_warps": 4}
    if dtype == torch.float32:
        return [None] + [{**split, "BLOCK_N": bn, "num_warps": w, "maxnreg": m}
                         for bn, w, m in ((4096, 4, 56), (2048, 4, None), (8192, 8, None))]
    return [None] + [{**split, "BLOCK_N": bn, "num_warps": w, "maxnreg": m}
                     for bn, w, m in ((8192, 4, 64), (8192, 4, None), (4096, 4, 40),
                                      (16384, 8, 72))]


def _register_report(*kernels) -> None:
    """Registers and spills of every compiled specialisation of these @triton.jit kernels."""
    for k in kernels:
        try:
            for caches in k.device_caches.values():
                for compiled in caches[0].values():
                    consts = {n: v for n, v in compiled.src.constants.items()
                              if isinstance(n, str) and n.isupper()} \
                        if hasattr(compiled.src, "constants") else {}
                    print(f"  regs {k.__name__}: {compiled.n_regs} registers, "
                          f"{compiled.n_spills} spills, {compiled.metadata.num_warps} warps "
                          f"{consts}", flush=True)
        except Exception as exc:  # noqa: BLE001 - an API difference must not stop the sweep
            print(f"  regs {getattr(k, '__name__', k)}: unavailable ({_short(exc)})")


def phase_layernorm_wide(sw):
    for dtype in DTYPES:
        case, x, w, b, y = _layernorm_case(sw, dtype, WIDE)
        for over in _layernorm_wide_variants(dtype):
            shown = _shipped(layernorm.layernorm_config, *x.shape, dtype) if over is None \
                else over
            if SMOKE and over:
                over = {**over, "BLOCK_N": 8192}  # one chunk per row under the interpreter
            sw.run(case, "default" if over is None else "forward", shown,
                   lambda c=over: layernorm.layernorm(x, w, b, out=y, config=c), [y])
        del x, w, b, y
    if not SMOKE:
        _register_report(layernorm.KERNELS["forward_split"])


def phase_layernorm_bwd(sw):
    dtype = torch.float16
    for cols in COLS:
        case, args, outs = _layernorm_bwd_case(sw, dtype, cols)
        dx, dw, db = outs
        if cols <= layernorm.FUSED_BWD_MAX_COLS:
            block = triton.next_power_of_2(cols)
            bwd = [{"ROWS": max(1, t // block), "num_warps": wp, "programs_per_sm": p}
                   for t, wp, p in ((2048, 4, 4), (4096, 8, 1), (8192, 16, 1)) if t >= block]
            bwd.append({"BLOCK_N": 1024 if not SMOKE else 32, "ROWS": 4})  # split, for comparison
        else:
            bwd = [{"BLOCK_N": bn, "ROWS": r, "rows_per_chunk": rpc, "num_warps": wp}
                   for bn, r, rpc, wp in ((512, 8, 64, 8), (2048, 2, 64, 8), (1024, 4, 128, 8),
                                          (1024, 4, 32, 8), (1024, 8, 64, 16))]
            bwd.append({"SUMS_BLOCK_N": 8192, "sums_num_warps": 16})
        for over in bwd:
            if SMOKE and "BLOCK_N" in over:
                over = {**over, "BLOCK_N": 32}
            sw.run(case, "backward", over,
                   lambda c=over: layernorm.layernorm_backward(*args, dx=dx, dw=dw, db=db,
                                                               config=c), outs)
        del args, outs, dx, dw, db


def phase_fused(sw):
    for dtype in SWEPT_DTYPES:
        case, (a, b, c_), out = _add_mul_case(sw, dtype)
        for cfg in fused.add_mul_configs():
            sw.run(case, "tiled", cfg, lambda c=cfg: fused.add_mul(a, b, c_, out=out, config=c),
                   [out])
        del a, b, c_, out
        case, (x, bias, res), out = _bias_gelu_case(sw, dtype)
        for cfg in fused.bias_gelu_residual_configs():
            sw.run(case, "tiled", cfg,
                   lambda c=cfg: fused.bias_gelu_residual(x, bias, res, out=out, config=c), [out])
        del x, bias, res, out


def phase_ceiling(sw):
    if SMOKE:
        return
    from pytest_triton import measure_ceilings

    c = measure_ceilings(DEVICE)
    print(f"ceiling: copy {c['dram_gbps']:.0f} GB/s; cuBLAS {c['tflops']}", flush=True)
    sw.rows.append({"kernel": "ceiling", "shape": [], "dtype": "-", "variant": "copy",
                    "config": c["how"], "ms": None, "gbps": c["dram_gbps"], "x_torch": None,
                    "max_err": None, "status": "ok", "first_call_s": None, "tflops": c["tflops"]})
    case, x, y, out = _vector_add_case(sw, torch.float32)
    del x, y, out


def _grid_single(cols):
    """(ROWS, num_warps) of one-tile-per-program launches for a width (smoke: stand-ins)."""
    if cols <= NARROW:
        return ((1, 4), (2, 4), (4, 4), (2, 8), (4, 8), (8, 8), (8, 16), (16, 16))
    if cols < MID:
        return ((1, 4), (1, 8), (2, 8), (1, 16), (2, 16), (4, 16))
    return ((1, 8), (1, 16), (1, 32), (2, 32))


def _grid_split(dtype):
    """(BLOCK_N, num_warps, maxnreg) of split-row launches at the widest width."""
    if dtype == torch.float32:
        return ((2048, 4, None), (4096, 4, None), (4096, 4, 56), (4096, 8, None),
                (8192, 8, None), (8192, 16, None), (16384, 16, None))
    return ((4096, 4, None), (8192, 4, 72), (8192, 4, None), (8192, 8, None),
            (16384, 8, None), (16384, 16, None))


def phase_grid(sw):
    for dtype in SWEPT_DTYPES:
        for cols in COLS:
            wide = cols > SINGLE_MAX
            case, x, out = _softmax_case(sw, dtype, cols)
            sw.run(case, "default", _shipped(softmax.softmax_config, *x.shape, dtype, False),
                   lambda: softmax.softmax(x, out=out), [out])
            if wide:
                over_list = [{"BLOCK_N": b, "num_warps": w, "maxnreg": m, "SPLIT": True}
                             for b, w, m in _grid_split(dtype)]
            else:
                block = triton.next_power_of_2(cols)
                over_list = [{"ROWS": r, "num_warps": w, "BLOCK_N": block} for r, w in
                             _grid_single(cols)]
            for over in over_list:
                if SMOKE and wide:
                    over = {**over, "BLOCK_N": triton.next_power_of_2(cols)}
                sw.run(case, "grid", over, lambda c=over: softmax.softmax(x, out=out, config=c),
                       [out])
            if cols == NARROW and dtype == torch.float32:
                sw.run(case, "default persistent",
                       _shipped(softmax.softmax_config, *x.shape, dtype, True),
                       lambda: softmax.softmax_persistent(x, out=out), [out])
                for r, w, p in ((4, 2, 4), (4, 2, 8), (8, 4, 4), (8, 4, 8), (2, 2, 8), (4, 4, 8),
                                (8, 8, 4), (16, 8, 2)):
                    over = {"ROWS": r, "num_warps": w, "programs_per_sm": p}
                    sw.run(case, "grid persistent", over,
                           lambda c=over: softmax.softmax_persistent(x, out=out, config=c), [out])
            del x, out
            case, x, w_, b_, y = _layernorm_case(sw, dtype, cols)
            sw.run(case, "default", _shipped(layernorm.layernorm_config, *x.shape, dtype),
                   lambda: layernorm.layernorm(x, w_, b_, out=y), [y])
            if wide:
                over_list = [{"BLOCK_N": b, "num_warps": w, "maxnreg": m, "SPLIT": True,
                              "LATE_WB": True} for b, w, m in _grid_split(dtype)]
            else:
                block = triton.next_power_of_2(cols)
                over_list = [{"ROWS": r, "num_warps": w, "BLOCK_N": block, "LATE_WB": late}
                             for r, w in _grid_single(cols) for late in (False, True)]
            for over in over_list:
                if SMOKE and wide:
                    over = {**over, "BLOCK_N": triton.next_power_of_2(cols)}
                sw.run(case, "grid", over,
                       lambda c=over: layernorm.layernorm(x, w_, b_, out=y, config=c), [y])
            del x, w_, b_, y
    if not SMOKE:
        _register_report(softmax.KERNELS["single"], softmax.KERNELS["split"],
                         softmax.KERNELS["persistent"], layernorm.KERNELS["forward"],
                         layernorm.KERNELS["forward_split"])


def phase_rows4k(sw):
    cols = 256 if SMOKE else 4096
    for dtype in (torch.float16, torch.bfloat16):
        case, x, out = _softmax_case(sw, dtype, cols)
        sw.run(case, "default", "tuned", lambda: softmax.softmax(x, out=out), [out])
        for r, w in ((1, 4), (1, 8), (1, 16), (2, 8), (2, 16), (4, 16), (4, 32)):
            over = {"ROWS": r, "num_warps": w}
            sw.run(case, "single", over, lambda c=over: softmax.softmax(x, out=out, config=c),
                   [out])
        for r, w, p, s in ((1, 8, 4, 1), (1, 8, 8, 1), (1, 4, 8, 1), (1, 4, 16, 1), (2, 8, 4, 1),
                           (2, 8, 2, 1), (1, 16, 2, 1), (2, 16, 2, 1), (1, 8, 4, 2),
                           (1, 8, 2, 3), (2, 8, 2, 2), (1, 16, 2, 2)):
            over = {"ROWS": r, "num_warps": w, "programs_per_sm": p, "NUM_STAGES": s,
                    "BLOCK_N": cols}
            sw.run(case, "persistent", over,
                   lambda c=over: softmax.softmax_persistent(x, out=out, config=c), [out])
        del x, out
        case, x, w_, b_, y = _layernorm_case(sw, dtype, cols)
        sw.run(case, "default", "tuned", lambda: layernorm.layernorm(x, w_, b_, out=y), [y])
        for r, w in ((1, 4), (1, 8), (1, 16), (2, 8), (2, 16), (4, 16), (4, 32)):
            for late in (False, True):
                over = {"ROWS": r, "num_warps": w, "LATE_WB": late}
                sw.run(case, "single", over,
                       lambda c=over: layernorm.layernorm(x, w_, b_, out=y, config=c), [y])
        for r, w in ((1, 8), (2, 8), (2, 16)):
            over = {"ROWS": r, "num_warps": w, "LATE_WB": True, "EVICT": True}
            sw.run(case, "single", over,
                   lambda c=over: layernorm.layernorm(x, w_, b_, out=y, config=c), [y])
        del x, w_, b_, y


def _wide_variants(cols, dtype, layer):
    """(launcher, config) for the wide phase at 16K or 64K columns."""
    out = [("default", None)]
    held = [(4096, 4, None, False), (4096, 4, 40, False), (4096, 2, None, False),
            (8192, 4, 64, True), (8192, 8, None, False), (2048, 2, None, False)]
    if dtype == torch.float32:
        held = [(4096, 4, 56, False), (4096, 4, 48, True), (2048, 2, None, False),
                (8192, 8, None, False), (8192, 8, 64, True)]
    for b, w, m, r in held:
        if SMOKE:
            b = triton.next_power_of_2(cols)
        cfg = {"SPLIT": True, "BLOCK_N": b, "num_warps": w, "maxnreg": m, "RELOAD": r}
        if layer:
            cfg["LATE_WB"] = True
        out.append(("split held", cfg))
    if cols == MID:
        for w, ev in ((32, True), (16, True)):
            cfg = {"num_warps": w, "EVICT": ev}
            out.append(("single", cfg))
        if not layer:
            for st, w, p in ((2, 16, 2), (3, 16, 2), (2, 32, 1), (2, 8, 2)):
                out.append(("persistent", {"NUM_STAGES": st, "num_warps": w,
                                           "programs_per_sm": p, "EVICT": True}))
    return out


def phase_wide(sw):
    for cols in (WIDE, MID):
        for dtype in SWEPT_DTYPES:
            case, x, out = _softmax_case(sw, dtype, cols)
            for variant, over in _wide_variants(cols, dtype, False):
                launcher = softmax.softmax_persistent if variant == "persistent" \
                    else softmax.softmax
                shown = over or _shipped(softmax.softmax_config, *x.shape, dtype, False)
                sw.run(case, variant, shown,
                       lambda f=launcher, c=over: f(x, out=out, config=c), [out])
            del x, out
            case, x, w_, b_, y = _layernorm_case(sw, dtype, cols)
            for variant, over in _wide_variants(cols, dtype, True):
                shown = over or _shipped(layernorm.layernorm_config, *x.shape, dtype)
                sw.run(case, variant, shown,
                       lambda c=over: layernorm.layernorm(x, w_, b_, out=y, config=c), [y])
            del x, w_, b_, y
    if not SMOKE:
        _register_report(softmax.KERNELS["split"], layernorm.KERNELS["forward_split"])


# --- report ----------------------------------------------------------------------------------

def report(sw) -> None:
    print("\n" + "=" * 118)
    dev = "interpreter (smoke)" if SMOKE else torch.cuda.get_device_name()
    print(f"sweep_memory: {dev}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{time.time() - sw.t0:.0f} s, {sw.skipped} measurement(s) skipped over budget")
    print(f"{'kernel':<20} {'shape':>13} {'dtype':<8} {'variant':<18} {'ms':>8} {'GB/s':>6} "
          f"{'xtorch':>6} {'max_err':>8} {'status':<6} config")
    best = {}
    for i, r in enumerate(sw.rows):
        if r["variant"] != "torch" and r["status"] == "ok" and r["ms"]:
            key = (r["kernel"], tuple(r["shape"]), r["dtype"])
            if key not in best or r["ms"] < sw.rows[best[key]]["ms"]:
                best[key] = i
    starred = set(best.values())
    for i, r in enumerate(sw.rows):
        print(("* " if i in starred else "  ") + _line(r))
    for r in sw.rows:
        r["best"] = False
    for i in starred:
        sw.rows[i]["best"] = True
    # The layernorm forward perf test checks the geometric mean of default speedups per dtype.
    for dtype in DTYPES:
        xs = [r["x_torch"] for r in sw.rows if r["kernel"] == "layernorm_fwd"
              and r["dtype"] == _dt(dtype) and r["variant"] == "default" and r["x_torch"]]
        if xs:
            gm = math.exp(sum(math.log(v) for v in xs) / len(xs))
            print(f"layernorm_fwd default geomean speedup, {_dt(dtype)}: {gm:.3f} over {len(xs)}")
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "sweep_memory.json"
        info = {"device": dev, "torch": torch.__version__, "triton": triton.__version__,
                "seconds": round(time.time() - sw.t0, 1), "skipped": sw.skipped}
        path.write_text(json.dumps({"info": info, "rows": sw.rows}, indent=1))
        print(f"wrote {path}")


def main() -> None:
    sw = Sweep(ARGS.budget)
    for name in ARGS.phases:  # in the order given: the first ones get the budget
        print(f"--- {name} ({time.time() - sw.t0:.0f} s)", flush=True)
        try:
            globals()[f"phase_{name}"](sw)
        except Exception as exc:  # noqa: BLE001 - a broken phase must not lose the others
            print(f"phase {name} failed: {_short(exc)}", flush=True)
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
    report(sw)


if __name__ == "__main__":
    main()
