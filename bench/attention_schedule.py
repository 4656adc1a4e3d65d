"""The compiled schedule of attention's key loop for sm_90, on a machine without a GPU.

    python bench/attention_schedule.py            # D 128, 128 x 128 tiles, 3 stages, 8 warps
    python bench/attention_schedule.py 64 128 64 4 8

Compiles the TMA kernel (reference_kernels/attention.py) for GPUTarget("cuda", 90) with the
config given (HEAD_DIM BLOCK_M BLOCK_N num_stages num_warps; non-causal) and prints, for each
loop over the keys in the TTGIR, its operations in order that decide what overlaps what: the
barrier waits on K and V, the tensor-core products (ttng.warp_group_dot, asynchronous) and the
waits for them (warp_group_dot_wait and how many products it lets stay in flight, "pendings"),
the exponentials, the TMA copies it issues. Then the shared memory the launch asks for. Use
the Triton the GPU machine runs (3.6 there): the schedule changes between releases.
"""

from __future__ import annotations

import os
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from reference_kernels import attention  # noqa: E402

KEY_OPS = (("ttng.wait_barrier", "wait for K/V (TMA barrier)"),
           ("ttng.warp_group_dot_wait", "wait for tensor-core products"),
           ("ttng.warp_group_dot ", "tensor-core product (async)"),
           ("math.exp2", "exp2"),
           ("ttng.async_tma_copy_global_to_local", "TMA copy issued"))


def compile_ttgir(head_dim: int, block_m: int, block_n: int, stages: int, warps: int):
    fn = attention.KERNELS["tma"]
    desc = f"tensordesc<fp16[{block_n}, {head_dim}]>"
    signature = {"q_desc": f"tensordesc<fp16[{block_m}, {head_dim}]>", "k_desc": desc,
                 "v_desc": desc, "o_ptr": "*fp16", "H": "i32", "S": "i32", "qk_scale": "fp32",
                 "stride_ob": "i32", "stride_oh": "i32", "stride_os": "i32", "stride_od": "i32"}
    constexprs = {"HEAD_DIM": head_dim, "CAUSAL": False, "BLOCK_M": block_m, "BLOCK_N": block_n}
    signature.update({k: "constexpr" for k in constexprs})
    # aligned output and sizes, as a launch on contiguous tensors with S a multiple of 16 has
    aligned = ("o_ptr", "S", "stride_ob", "stride_oh", "stride_os")
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if n in aligned}
    kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                            target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": warps, "num_stages": stages})
    return kernel.asm["ttgir"], kernel.metadata.shared


def loop_schedules(ttgir: str) -> list[list[str]]:
    """Each scf.for's key operations, in order (nested regions flattened)."""
    loops, current, depth = [], None, 0
    for line in ttgir.splitlines():
        if current is None:
            if "scf.for" in line:
                current, depth = [], line.count("{") - line.count("}")
            continue
        depth += line.count("{") - line.count("}")
        for op, label in KEY_OPS:
            if op in line:
                pend = re.search(r"pendings = (\d+)", line)
                current.append(label + (f", pendings = {pend.group(1)}" if pend else ""))
                break
        if depth <= 0:
            loops.append(current)
            current = None
    return loops


def main(argv: list[str]) -> None:
    head_dim, block_m, block_n, stages, warps = (int(a) for a in argv) if argv else \
        (128, 128, 128, 3, 8)
    ttgir, shared = compile_ttgir(head_dim, block_m, block_n, stages, warps)
    print(f"attention TMA kernel, D {head_dim}, {block_m} x {block_n}, {stages} stages, "
          f"{warps} warps, sm_90, Triton {triton.__version__}")
    for i, ops in enumerate(loop_schedules(ttgir)):
        print(f"key loop {i + 1}:")
        for op in ops:
            print(f"  {op}")
    print(f"shared memory: {shared} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
