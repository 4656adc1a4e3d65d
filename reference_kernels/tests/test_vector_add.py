"""vector_add and vector_add_persistent against torch in float64, and the controls they reject."""

from __future__ import annotations

import functools

import pytest
import torch
import triton

from pytest_triton import assert_close
from reference_kernels.vector_add import (
    DTYPES,
    vector_add,
    vector_add_configs,
    vector_add_inputs,
    vector_add_persistent,
    vector_add_reference,
)

from . import controls

# The compiled resources of the GPU's launches, on sm_80 and sm_90 (triton_resources compiles
# them on CPU too). Measured with Triton 3.6 and 3.9: 28-30 registers per thread at 8 elements
# per thread (1024-element tiles on 4 warps, 100% occupancy), up to 127 at 32 (fp16 8192 on 8
# warps, the persistent kernel holding a prefetched tile): two programs of 8 warps per SM, 25%.
# Nothing spills; no shared memory but a few bytes of the persistent kernel's ticket broadcast.
RESOURCES = pytest.mark.triton_resources(max_registers=128, max_spills=0, min_occupancy=0.25,
                                         archs=("sm_80", "sm_90"))

LAUNCHERS = [pytest.param(vector_add, id="tiled"),
             pytest.param(vector_add_persistent, id="persistent"),
             # each program holds a second tile, loaded before the first is stored
             pytest.param(functools.partial(vector_add_persistent, config={"PREFETCH": True}),
                          id="persistent-prefetch")]
DTYPE_PARAMS = [pytest.param(d, id=str(d).removeprefix("torch.")) for d in DTYPES]
# Odd sizes around the tile edges (the interpreter's tiles are 256 elements: see
# vector_add.INTERPRETER_CONFIG), a prime, and one size where every persistent program loops
# over many tiles.
SIZES = [1, 127, 129, 255, 257, 4099, 65537]


def check_add(launcher, make_tensor, n, dtype, **input_kwargs):
    """Run launcher on fresh inputs into a poisoned output and compare with float64 torch."""
    x, y = vector_add_inputs(make_tensor, n, dtype=dtype, **input_kwargs)
    out = make_tensor.poisoned_like(x)
    assert launcher(x, y, out=out) is out
    assert_close(out, vector_add_reference(x.double(), y.double()))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_matches_torch(launcher, dtype, n, make_tensor):
    check_add(launcher, make_tensor, n, dtype)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_heavy_magnitudes(launcher, dtype, make_tensor):
    # Magnitudes 1e-3..1e3 with random signs: sums that cancel, and no result near zero by luck.
    check_add(launcher, make_tensor, 1031, dtype, dist="heavy")


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_strided_1d(launcher, make_tensor):
    # Every other element: the gaps hold NaN, so reading them shows up in the result.
    x = make_tensor(515, noncontiguous="elements")
    y = make_tensor(515)
    out = make_tensor(515, poison=True, noncontiguous="elements")
    launcher(x, y, out=out)
    assert_close(out, vector_add_reference(x.double(), y.double()))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_any_contiguous_shape(launcher, make_tensor, triton_device):
    x, y = make_tensor((3, 5, 67)), make_tensor((3, 5, 67))
    out = launcher(x, y)
    assert out.shape == x.shape and out.device.type == triton_device.type
    assert_close(out, vector_add_reference(x.double(), y.double()))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_empty(launcher, make_tensor):
    x = make_tensor(0)
    assert launcher(x, make_tensor(0)).shape == (0,)


def test_persistent_grid_config(make_tensor):
    # One program per SM (the interpreter's stand-in counts 3): each loops over ~86 tiles.
    x, y = vector_add_inputs(make_tensor, 65537)
    out = vector_add_persistent(x, y, config={"programs_per_sm": 1})
    assert_close(out, vector_add_reference(x.double(), y.double()))
    with pytest.raises(ValueError, match="unknown config key"):
        vector_add_persistent(x, y, config={"BLOCK": 128})
    for bad, match in (({"programs_per_sm": 0}, "programs_per_sm=0 must be an integer >= 1"),
                       ({"programs_per_sm": 1.5}, "programs_per_sm=1.5 must be an integer >= 1"),
                       ({"BLOCK_SIZE": True}, "BLOCK_SIZE=True must be a power of two")):
        with pytest.raises(ValueError, match=match):
            vector_add_persistent(x, y, config=bad)
    with pytest.raises(TypeError, match="config must be a dict of launch parameters, got str"):
        vector_add_persistent(x, y, config="fast")


# Each tile of the autotune space, compiled for sm_80 and sm_90 (triton_resources, on CPU too):
# RESOURCES below says what holds.
@RESOURCES
@pytest.mark.parametrize("config", vector_add_configs(), ids=lambda c: f"block{c.kwargs['BLOCK_SIZE']}")
def test_explicit_config(make_tensor, config):
    # The sweeps' path: each tile of the autotune space launched as given, at a size no tile
    # divides; a bad config is named.
    x, y = vector_add_inputs(make_tensor, 8195, dtype=torch.float16)
    out = vector_add(x, y, out=make_tensor.poisoned_like(x), config=config)
    assert_close(out, vector_add_reference(x.double(), y.double()))
    with pytest.raises(ValueError, match="vector_add: config BLOCK_SIZE=96 must be a power of two"):
        vector_add(x, y, config=triton.Config({"BLOCK_SIZE": 96}, num_warps=4))
    with pytest.raises(TypeError, match="must be a triton.Config"):
        vector_add(x, y, config={"BLOCK_SIZE": 1024})


@RESOURCES
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("prefetch", [False, True], ids=["tickets", "prefetch"])
def test_persistent_gpu_config(make_tensor, dtype, prefetch):
    # The persistent kernel as a GPU launches it (vector_add_persistent_config's 4096-element
    # tiles on 8 warps, not the interpreter's small ones).
    x, y = vector_add_inputs(make_tensor, 8195, dtype=dtype)
    out = vector_add_persistent(x, y, config={"BLOCK_SIZE": 4096, "num_warps": 8,
                                              "PREFETCH": prefetch})
    assert_close(out, vector_add_reference(x.double(), y.double()))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_rejects_bad_operands(launcher, make_tensor):
    x = make_tensor(64)
    with pytest.raises(ValueError, match="one shape"):
        launcher(x, make_tensor(65))
    with pytest.raises(TypeError, match="one dtype"):
        launcher(x, make_tensor(64, torch.float16))
    with pytest.raises(TypeError, match="not supported"):
        launcher(make_tensor(64, torch.float64), make_tensor(64, torch.float64))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        launcher(x, [1.0] * 64)
    with pytest.raises(ValueError, match="non-contiguous 2-D"):
        launcher(make_tensor((4, 16), noncontiguous="rows"), make_tensor((4, 16)))
    with pytest.raises(ValueError, match="out must be"):
        launcher(x, x, out=make_tensor(64, torch.float16))
    with pytest.raises(ValueError, match="out has elements that share memory"):
        launcher(x, x, out=make_tensor(1).expand(64))
    buf = make_tensor(65)
    with pytest.raises(ValueError, match="out overlaps the memory of x"):
        launcher(buf[:64], x, out=buf[1:])
    # out that is exactly an input (in place) is fine: each element is read before it is written
    y, z = make_tensor(64), x.clone()
    assert_close(launcher(z, y, out=z), vector_add_reference(x.double(), y.double()))


# --- negative controls: the same check must reject these ---------------------------------------

def test_rejects_off_by_one_mask(make_tensor):
    with pytest.raises(AssertionError, match="Mismatched elements: 1 /"):
        check_add(controls.add_off_by_one, make_tensor, 1000, torch.float32)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_rejects_kernel_that_writes_nothing(dtype, make_tensor):
    with pytest.raises(AssertionError, match="NaN"):
        check_add(controls.add_writes_nothing, make_tensor, 1000, dtype)


def test_rejects_kernel_that_writes_nothing_into_zeros(make_tensor):
    # Without poison, an untouched zero-filled output must still fail: the reference is not ~0.
    x, y = vector_add_inputs(make_tensor, 1000)
    out = controls.add_writes_nothing(x, y, out=torch.zeros_like(x))
    with pytest.raises(AssertionError, match="Mismatched elements"):
        assert_close(out, vector_add_reference(x.double(), y.double()))


def test_slow_control_is_correct(make_tensor):
    # The perf suite's slow control must be slow, not wrong: its perf test fails on speed alone.
    check_add(controls.add_slow, make_tensor, 1000, torch.float32)
