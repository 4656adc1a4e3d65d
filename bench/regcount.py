"""Registers and spills of a Triton kernel compiled for a GPU, on a machine without one.

    python bench/regcount.py                # the memory kernels' launch configs, for sm_90

Compiles with triton.compile for GPUTarget("cuda", CC, 64) (the nvidia backend's bundled ptxas
needs no GPU) and reads the cubin's resource usage with the bundled cuobjdump. Pointers and the
integers marked "D" get Triton's 16-byte divisibility specialisation, as a launch on aligned
tensors with sizes divisible by 16 would: with it the counts matched an H100's (Triton 3.6,
sm_90); without it they do not. Use the Triton the GPU machine runs (3.6 there): register
allocation changes between releases.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


class Const:
    """A string constexpr argument (a plain string in `args` is a type)."""

    def __init__(self, value):
        self.value = value


def _jit(fn):
    """The JITFunction of `fn`, unwrapping autotuners and heuristics."""
    while not isinstance(fn, triton.runtime.JITFunction):
        fn = fn.fn
    return fn


def resources(fn, args: dict, *, num_warps: int, maxnreg: int | None = None, cc: int = 90,
              num_stages: int = 3) -> dict:
    """{'regs', 'spill_stores', 'spill_loads', 'shared', 'stack'} of `fn` compiled for sm_`cc`.

    args: for every parameter of fn, a type string ("*fp16", "i32", "fp32",
    "tensordesc<fp16[64, 128]>") optionally followed by ":D" (16-divisible), or a constexpr value
    (int, bool, None, or a string wrapped in Const)."""
    fn = _jit(fn)
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        spec = args[name]
        if isinstance(spec, Const):
            signature[name] = "constexpr"
            constexprs[name] = spec.value
        elif isinstance(spec, str):
            ty, _, flag = spec.partition(":")
            signature[name] = ty
            if flag == "D":
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "constexpr"
            constexprs[name] = spec
    options = {"num_warps": num_warps, "num_stages": num_stages}
    if maxnreg:
        options["maxnreg"] = maxnreg
    src = ASTSource(fn, signature, constexprs, attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc, 64), options=options)
    cubin = kernel.asm["cubin"]
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True,
                              text=True, check=True).stdout
    out = {}
    for key, pat in (("regs", r"REG:(\d+)"), ("stack", r"STACK:(\d+)"), ("shared", r"SHARED:(\d+)")):
        m = re.search(pat, text)
        out[key] = int(m.group(1)) if m else None
    out["smem"] = kernel.metadata.shared  # bytes the launch asks for (static + pipelined buffers)
    ptx = kernel.asm.get("ptx", "")
    out["local_ld"] = ptx.count("ld.local")
    out["local_st"] = ptx.count("st.local")
    return out


def _row_args(dtype: str, **const) -> dict:
    """Arguments of the row kernels (softmax, layernorm): pointers of dtype, aligned sizes."""
    base = {"x_ptr": f"*{dtype}:D", "y_ptr": f"*{dtype}:D", "w_ptr": f"*{dtype}:D",
            "b_ptr": f"*{dtype}:D", "mean_ptr": "*fp32:D", "rstd_ptr": "*fp32:D",
            "sync_ptr": "*i64:D", "words_ptr": "*i64:D", "n_rows": "i32:D", "n_cols": "i32:D",
            "stride_xm": "i32:D", "stride_ym": "i32:D", "eps": "fp32"}
    base.update(const)
    return base


def main() -> None:
    from reference_kernels import layernorm, softmax

    cases = []
    for dt, cols in (("fp32", 16384), ("fp16", 16384), ("fp32", 4096), ("fp16", 4096)):
        for warps in (8, 16, 32):
            cases.append((f"softmax single {dt} {cols} w{warps}", softmax.KERNELS["single"],
                          _row_args(dt, BLOCK_N=cols, ROWS=1, EVICT=False), warps, None))
            cases.append((f"layernorm single {dt} {cols} w{warps}",
                          layernorm.KERNELS["forward"],
                          _row_args(dt, BLOCK_N=cols, ROWS=1, EVICT=False, LATE_WB=True), warps,
                          None))
    for dt, bn, w in (("fp16", 4096, 4), ("fp16", 8192, 4), ("fp32", 4096, 4)):
        cases.append((f"softmax split {dt} {bn} w{w}", softmax.KERNELS["split"],
                      _row_args(dt, BLOCK_N=bn, MAX_CHUNKS=16, RELOAD=False), w, None))
    only = sys.argv[1:]
    for label, fn, args, warps, cap in cases:
        if only and not any(o in label for o in only):
            continue
        sig = {k: v for k, v in args.items() if k in _jit(fn).arg_names}
        r = resources(fn, sig, num_warps=warps, maxnreg=cap)
        print(f"{label:<40} regs {r['regs']:>4}  stack {r['stack']}  local ld/st "
              f"{r['local_ld']}/{r['local_st']}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    main()
