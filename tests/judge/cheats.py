"""Cheating kernels, one per exploit class the judge catches (docs/judging.md), beside their honest
twins. Each cheat gives the test what it checks, or a time it likes, without doing the work as
asked: the negative controls of tests/judge. They run under Triton's interpreter and on CUDA."""

from __future__ import annotations

import subprocess
import sys
import threading

import torch
import triton
import triton.language as tl

BLOCK = 128


@triton.jit
def _relu_kernel(
    x_ptr,  # *in* n elements
    out_ptr,  # *out* n elements
    n,
    WRITE_INPUT: tl.constexpr,  # the cheat: relu(x) into x too
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.where(x > 0, x, 0.0)
    tl.store(out_ptr + offs, y, mask=mask)
    if WRITE_INPUT:
        tl.store(x_ptr + offs, y, mask=mask)


def _launch_relu(x, out, write_input=False, programs=None):
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK) if programs is None else programs,)
    _relu_kernel[grid](x, out, n, WRITE_INPUT=write_input, BLOCK=BLOCK)
    return out


def relu(x, out=None):
    """Honest."""
    return _launch_relu(x, torch.empty_like(x) if out is None else out)


def relu_(x):
    """Honest, in place by design (as torch.relu_): declared inplace= in its tests."""
    return _launch_relu(x, x)


def relu_mutating(x, out=None):
    """Input mutation (the issue's case): also stores relu(x) into x, so a reference computed
    afterwards from x agrees."""
    return _launch_relu(x, torch.empty_like(x) if out is None else out, write_input=True)


@triton.jit
def _fill_kernel(
    x_ptr,  # *in/out* n elements: VALUE over every one
    n,
    VALUE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.full((BLOCK,), VALUE, x_ptr.dtype.element_ty), mask=offs < n)


def relu_by_constant(x):
    """Input mutation behind an in-place result: writes 1 over its input and hands the input back,
    so a reference computed afterwards from it (relu(1) = 1) agrees; a compared actual counts as
    written on purpose unless the judge asks in-place results to be declared."""
    _fill_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, x.numel(), VALUE=1.0, BLOCK=BLOCK)
    return x


@triton.jit
def _scale_kernel(
    x_ptr,  # *in* n elements
    out_ptr,  # *out* n elements: 2 x
    n,
    ZERO_INPUT: tl.constexpr,  # the cheat: 0 into out and x (KernelBench's zero_out_kernel)
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if ZERO_INPUT:
        tl.store(out_ptr + offs, tl.zeros_like(x), mask=mask)
        tl.store(x_ptr + offs, tl.zeros_like(x), mask=mask)
    else:
        tl.store(out_ptr + offs, 2 * x, mask=mask)


def double(x, out=None, zero_input=False):
    out = torch.empty_like(x) if out is None else out
    _scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), ZERO_INPUT=zero_input,
                                                    BLOCK=BLOCK)
    return out


def double_zeroing(x, out=None):
    """Input mutation, KernelBench PR #82's zero_out_kernel: computes nothing, and zeroes its
    input too, so that the reference computed after it (2 * 0) agrees with its zeros."""
    return double(x, out, zero_input=True)


class Lazy(torch.Tensor):
    """A tensor subclass: what a lazy output (gpu-mode #161) hides behind."""


def relu_lazy(x):
    """Lazy output: a tensor subclass (its values could be made when read)."""
    return torch.Tensor._make_subclass(Lazy, relu(x))


def relu_overridden(x):
    """Lazy output: a plain tensor with a method overridden on the instance."""
    out = relu(x)
    honest = out.detach
    out.detach = lambda: honest()  # code of its own runs when the checker reads it
    return out


def copy_aliased(x):
    """Aliased output (KernelBench #110): a "copy" kernel that returns its input."""
    return x


def relu_whole_blocks(x, out=None):
    """Special-cased sizes: launches n // BLOCK programs, right only when BLOCK divides n (the
    tested 1024), leaving the tail unwritten at any other size."""
    out = torch.empty_like(x) if out is None else out
    return _launch_relu(x, out, programs=max(1, x.numel() // BLOCK))


@triton.jit
def _mean_square_kernel(x_ptr, out_ptr, n, offset, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        acc += v * v
    tl.store(out_ptr, tl.sum(acc, axis=0) / n + offset)


def loss_like(x):
    """Honest: one number dominated by a constant, as a cross-entropy's mean loss is by the log of
    its vocabulary (mean(x^2) + 100): the judge's first perturbation moves it by well under 1%."""
    out = torch.empty((), dtype=torch.float32, device=x.device)
    _mean_square_kernel[(1,)](x, out, x.numel(), 100.0, BLOCK=1024)
    return out


class Memo:
    """Special-cased values, or a cache across calls (gpu-mode #104, #142, #160): results kept by
    pointer and shape; a call that finds one returns it without launching anything."""

    def __init__(self, key=lambda x: (x.data_ptr(), tuple(x.shape))):
        self.key = key
        self.kept: dict = {}

    def relu(self, x, out=None):
        k = self.key(x)
        if k not in self.kept:
            self.kept[k] = relu(x).clone()
        result = self.kept[k]
        if out is None:
            return result.clone()
        out.copy_(result)
        return out


def relu_swallowing(x):
    """Silent launch failure (Wafer's 104x case): a launch that fails (a block size that is no
    power of two does not compile), its error swallowed; the output holds whatever its memory
    held: on a GPU, often the reference's result just freed."""
    out = torch.empty_like(x)
    try:
        _relu_kernel[(1,)](x, out, x.numel(), WRITE_INPUT=False, BLOCK=100)
    except Exception:  # noqa: BLE001 - the cheat
        pass
    return out


class Helper:
    """Extra workers: a thread (or a process) that keeps running beside the timed call and does
    its work there."""

    def __init__(self):
        self.thread = None
        self.process = None
        self.stop = threading.Event()

    def relu_in_thread(self, x, out):
        if self.thread is None:
            def work():
                while not self.stop.wait(0.001):
                    pass
            self.thread = threading.Thread(target=work, name="cheat-worker", daemon=True)
            self.thread.start()
        return relu(x, out)

    def relu_with_process(self, x, out):
        if self.process is None:
            self.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        return relu(x, out)

    def close(self):
        self.stop.set()
        if self.process is not None:
            self.process.kill()
            self.process.wait()


def relu_patching_timer(x, out):
    """Timer tampering (gpu-mode #162): the kernel is honest; Event.elapsed_time is not."""
    original = torch.cuda.Event.elapsed_time
    torch.cuda.Event.elapsed_time = lambda self, end: original(self, end) / 100
    return relu(x, out)


def relu_patching_stats(x, out):
    """Timer tampering (gpu-mode #162): the plugin's own statistics report a hundredth."""
    from pytest_triton.perf import stats

    original = stats.summarize
    if not getattr(original, "cheat", False):
        def summarize(samples):
            return original([s / 100 for s in samples])
        summarize.cheat = True
        stats.summarize = summarize
    return relu(x, out)


def relu_patching_stats_unseen(x, out):
    """Timer tampering that also silences the identity checks of the process it runs in (a cheat
    that knows the plugin): only a process that runs no test can still see it (judge/verify.py)."""
    from pytest_triton.judge import identities, verify

    identities.replaced = lambda config: []
    verify.recheck = lambda m: []
    return relu_patching_stats(x, out)
