"""pytest_triton.env.interpreter.fixes: library kernels (tests/env/_library.py) under Triton's
interpreter. For each fix, a check that passes with every fix installed, and the same check
failing with every fix but that one (skipped where the installed Triton does not need the fix).
bf16 results are compared with torch's bit for bit."""

import pytest
import torch
import triton.language.standard as tl_standard
from triton.runtime.interpreter import InterpretedFunction

from pytest_triton.env.interpreter import fixes as ic

# Triton's own library (tl.sigmoid, tl.sum, tl.argmax, tl.cumsum, ...) is decorated when
# triton.language is first imported. On a GPU machine this process imported it for the compiler, so
# an interpreted kernel that calls it fails ("Cannot call @triton.jit'd outside of the scope of a
# kernel"): not a gap of the fixes tested here. They are for runs without a GPU, where the plugin
# sets TRITON_INTERPRET=1 before triton is imported; the CPU suite runs this module, whose library
# kernels are then decorated for the interpreter as well.
if not isinstance(tl_standard.sigmoid, InterpretedFunction):
    pytest.skip("triton.language was imported for the compiler in this process (a GPU run): "
                "these interpreter fixes are tested where the interpreter is on from the start "
                "(the CPU suite)", allow_module_level=True)

from . import _library as lib  # noqa: E402


@pytest.fixture
def compat(monkeypatch):
    """Every fix installed, as the plugin installs them; the state before is restored after."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    before = ic.installed()
    ic.uninstall()
    yield ic.install()
    ic.uninstall()
    if before:
        ic.install()


@pytest.fixture
def without(monkeypatch):
    """without(name): every fix installed except `name`; skips where this Triton does not need
    that fix. The state before is restored after."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    before = ic.installed()

    def install_all_but(name):
        ic.uninstall()
        if not ic.FIXES[name].needed():
            pytest.skip(f"this Triton's interpreter does not need the {name} fix")
        ic.install(exclude=(name, ))

    yield install_all_but
    ic.uninstall()
    if before:
        ic.install()


def rng(seed=0):
    return torch.Generator().manual_seed(seed)


def bf16(values):
    return torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)


def randn_bf16(n, seed=0, scale=1.0):
    return (torch.randn(n, generator=rng(seed)) * scale).to(torch.bfloat16)


def assert_same_bits(got, want):
    """Equal bit patterns; NaN only where the reference has NaN (any NaN)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if not got.dtype.is_floating_point:
        assert torch.equal(got, want), f"got {got.tolist()}, want {want.tolist()}"
        return
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), "NaN in different places"
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    differ = (got.view(bits) != want.view(bits)) & ~nan
    if differ.any():
        i = int(differ.nonzero()[0, 0]) if differ.dim() == 1 else tuple(differ.nonzero()[0].tolist())
        raise AssertionError(f"{int(differ.sum())} of {got.numel()} differ from torch bit for bit; "
                             f"first at {i}: got {got[i].item()!r}, want {want[i].item()!r}")


def fails_without(fix, check, *args, always=True):
    """The check fails with the fix left out. always=False: some Triton versions compute this op
    another way (through float32 and a cast) that never reaches what the fix changes; skip there."""
    try:
        check(*args)
    except AssertionError:
        return
    what = " ".join(map(str, args)) or check.__name__
    if always:
        pytest.fail(f"{what} gave torch's result with the {fix} fix left out")
    pytest.skip(f"this Triton computes {what} of bf16 without reaching the interpreter path that "
                f"the {fix} fix changes")


# ---- install / uninstall -------------------------------------------------------------------------


def test_install_applies_fixes_only_under_the_interpreter(monkeypatch):
    before = ic.installed()
    ic.uninstall()
    try:
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        assert ic.install() == []
        assert set(ic.status().values()) == {"not installed"}
    finally:
        if before:
            monkeypatch.setenv("TRITON_INTERPRET", "1")
            ic.install()


def test_install_is_idempotent_and_uninstall_restores_triton(compat):
    from triton.language.extra import libdevice
    from triton.runtime import interpreter as ti
    from triton.runtime.autotuner import Autotuner

    ic.uninstall()
    originals = [ti._implicit_cvt, ti._patch_lang, ti._patch_lang_tensor, ti.FunctionRewriter.ast_transformer,
                 ti.InterpreterBuilder.binary_op, ti.InterpreterBuilder.cast_impl, ti.InterpreterBuilder.create_dot,
                 ti.InterpreterBuilder.create_extern_elementwise, ti.ReduceOps.sum, Autotuner.run, libdevice.tanh]
    first = ic.install()
    assert first and ic.install() == first == ic.installed()
    assert all(state == "applied" or state.startswith("not needed") for state in ic.status().values())
    assert ic.status()["float_args"] == "applied"  # needed by 3.6 and 3.9 alike
    ic.uninstall()
    assert [ti._implicit_cvt, ti._patch_lang, ti._patch_lang_tensor, ti.FunctionRewriter.ast_transformer,
            ti.InterpreterBuilder.binary_op, ti.InterpreterBuilder.cast_impl, ti.InterpreterBuilder.create_dot,
            ti.InterpreterBuilder.create_extern_elementwise, ti.ReduceOps.sum, Autotuner.run,
            libdevice.tanh] == originals
    assert ic.installed() == []


def test_install_rejects_an_unknown_fix_name():
    with pytest.raises(ValueError, match="unknown fix bf16_everything"):
        ic.install(exclude=("bf16_everything", ))


def test_every_fix_is_documented():
    for fix in ic.FIXES.values():
        assert fix.fixes and fix.needed_by and fix.upstream
    assert {fix.closes_gap for fix in ic.FIXES.values()} - {None} == {"bf16_rounding", "bf16_dot", "libdevice",
                                                                       "autotune"}


# ---- float_args ------------------------------------------------------------------------------------


def check_float_args():
    x = torch.arange(50, dtype=torch.float32)
    out = torch.empty_like(x)
    lib.scale_kernel[(2, )](x, out, 50, 0.5, BLOCK=32)
    assert torch.equal(out, x * 0.5)


def check_float_arg_promotes():
    # a float argument is an fp32 scalar on a GPU, so fp16 * it is computed in fp32 (a Python
    # float literal would keep fp16)
    x = torch.tensor([0.7], dtype=torch.float16)
    out = torch.empty(1)
    lib.promote_kernel[(1, )](x, out, 0.3)
    assert out.item() == (x.float() * torch.tensor(0.3)).item()


def test_float_args(compat):
    check_float_args()
    check_float_arg_promotes()


def test_float_args_fails_without_fix(without):
    without("float_args")
    with pytest.raises(Exception, match="'float' object has no attribute 'to'"):
        check_float_args()
    with pytest.raises(AssertionError):
        check_float_arg_promotes()


# ---- annotated_scalar_args -------------------------------------------------------------------------


def check_annotated_args():
    offset, scale = torch.zeros(1, dtype=torch.int64), torch.zeros(1)
    lib.strided_kernel[(1, )](offset, scale, 3, 2**30, 0.1, True)
    assert offset.item() == 3 * 2**30  # int64, as annotated: no wrap past 2**31
    assert scale.item() == torch.tensor(0.1).half().item()  # passed as fp16, as annotated


def test_annotated_scalar_args(compat):
    check_annotated_args()


def test_annotated_scalar_args_of_an_autotuned_kernel(compat):
    # Conch's nms: the config's launch options (num_warps=...) came along as keywords the
    # kernel's signature does not have, and binding them raised TypeError
    offset = torch.zeros(4, dtype=torch.int64)
    lib.tuned_strided_kernel[(1, )](offset, 3, 2**30)
    assert offset[0].item() == 3 * 2**30


def test_annotated_scalar_args_fail_without_fix(without):
    without("annotated_scalar_args")
    # 3.9 wraps row * stride in int32 (to -2**30); 3.6 cannot even take the bool for flag: tl.int1
    with pytest.raises(Exception, match="-1073741824|exceeds dtype primitive_bitwidth"):
        check_annotated_args()


# ---- loop_index_tensors --------------------------------------------------------------------------


def check_loop_index():
    x = torch.arange(32, dtype=torch.float32)
    out = torch.empty(8)
    lib.blocks_sum_kernel[(1, )](x, out, NUM_BLOCKS=4, BLOCK=8)
    assert torch.equal(out, x.view(4, 8).sum(0) + 6.0)  # + the tl.range indices 0+1+2+3


def test_loop_index_tensors(compat):
    check_loop_index()
    # an int64 bound makes an int64 index, as on a GPU
    out = torch.zeros(2, dtype=torch.int64)
    lib.wide_index_kernel[(1, )](out, 2**33)
    assert out.tolist() == [2**33, 2**33 + 1]


def test_loop_index_tensors_fails_without_fix(without):
    without("loop_index_tensors")
    with pytest.raises(Exception, match="'int' object has no attribute 'to'"):
        check_loop_index()


# ---- tensor_index_numpy2 -------------------------------------------------------------------------


def check_tensor_bound():
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty(1)
    lib.row_sum_kernel[(1, )](x, out, 100, BLOCK=32)
    assert out.item() == x.sum().item()


def test_tensor_index_numpy2(compat):
    check_tensor_bound()


def test_tensor_index_numpy2_fails_without_fix(without):
    without("tensor_index_numpy2")
    with pytest.raises(Exception, match="only 0-dimensional arrays can be converted"):
        check_tensor_bound()


# ---- bf16_arithmetic -----------------------------------------------------------------------------

BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "rem": torch.fmod,  # Triton's % on floats is C's fmod
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "lt": lambda x, y: x < y,
    "scalar_mul": lambda x, y: x * 1.5 + 0.25,
    "where": lambda x, y: torch.where(x > y, x, y),
}


def check_binary(op, n=200):
    x, y = randn_bf16(n, seed=1, scale=3.0), randn_bf16(n, seed=2, scale=3.0)
    y[:4] = bf16([1.0, -1.0, 2.5, -0.5])  # small divisors, both signs
    want = BINARY[op](x, y)
    out = torch.empty_like(want)
    lib.binary_kernel[(1, )](x, y, out, n, OP=op, BLOCK=256)
    assert_same_bits(out, want)


@pytest.mark.parametrize("op", list(BINARY))
def test_bf16_binary_ops(compat, op):
    check_binary(op)


# bf16 / and % reach the interpreter as float32 operations and a cast (the casts fix covers them;
# % is exact anyway); Triton 3.6 computes minimum and maximum that way too.
@pytest.mark.parametrize("op, always", [("add", True), ("sub", True), ("mul", True), ("lt", True),
                                        ("scalar_mul", True), ("where", True), ("maximum", False),
                                        ("minimum", False)])
def test_bf16_binary_ops_fail_without_fix(without, op, always):
    without("bf16_arithmetic")
    fails_without("bf16_arithmetic", check_binary, op, always=always)


def test_bf16_constants_fail_without_fix(without):
    without("bf16_constants")
    with pytest.raises(Exception, match="get_bf16"):
        check_binary("scalar_mul")


UNARY = {
    "neg": lambda x: -x,
    "abs": torch.abs,
    "clamp": lambda x: x.clamp(-0.5, 0.75),
    "exp": lambda x: torch.exp(x.float()).bfloat16(),
    "sqrt": lambda x: torch.sqrt(x.float().abs()).bfloat16(),
    "sigmoid": lambda x: (1 / (1 + torch.exp(-x.float()))).bfloat16(),
    "log": lambda x: torch.log(x.float().abs() + 1.0).bfloat16(),
}


def check_unary(op, n=200):
    x = randn_bf16(n, seed=3, scale=2.0)
    want = UNARY[op](x)
    out = torch.empty_like(want)
    lib.unary_kernel[(1, )](x, out, n, OP=op, BLOCK=256)
    assert_same_bits(out, want)


@pytest.mark.parametrize("op", list(UNARY))
def test_bf16_unary_math(compat, op):
    check_unary(op)


@pytest.mark.parametrize("op, always", [("neg", True), ("clamp", False)])
def test_bf16_unary_fails_without_fix(without, op, always):
    without("bf16_arithmetic")
    fails_without("bf16_arithmetic", check_unary, op, always=always)


@pytest.mark.parametrize("op", ["exp", "sqrt", "sigmoid", "log"])
def test_bf16_math_through_float32_fails_without_cast_fix(without, op):
    without("bf16_casts")
    fails_without("bf16_casts", check_unary, op)


def check_fma(n=200):
    x, y, z = randn_bf16(n, seed=4), randn_bf16(n, seed=5), randn_bf16(n, seed=6)
    out = torch.empty_like(x)
    lib.fma_kernel[(1, )](x, y, z, out, n, BLOCK=256)
    # a product of two bf16 values is exact in float32: this rounds once to float32, once to bf16
    assert_same_bits(out, (x.float() * y.float() + z.float()).bfloat16())


def test_bf16_fma(compat):
    check_fma()


def test_bf16_fma_fails_without_fix(without):
    without("bf16_arithmetic")
    fails_without("bf16_arithmetic", check_fma)


# ---- bf16_casts ------------------------------------------------------------------------------------


def _f32_with_ties():
    # random values, plus exact midpoints between two bf16 values (to nearest even goes both ways)
    x = torch.randn(256, generator=rng(7)) * 10
    ties = torch.tensor([0x3F808000, 0x3F818000, 0xBF808000, 0x40490000 | 0x8000, 0x3F80C000],
                        dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.cat([x, ties, torch.tensor([float("inf"), float("-inf"), 0.0, -0.0, 3.0e38, 1e-40])])


CASTS = {
    "f32_to_bf16": (_f32_with_ties, torch.bfloat16),
    "f64_to_bf16": (lambda: torch.randn(200, generator=rng(8), dtype=torch.float64) * 100, torch.bfloat16),
    "f16_to_bf16": (lambda: (torch.randn(200, generator=rng(9)) * 100).half(), torch.bfloat16),
    "i32_to_bf16": (lambda: torch.randint(-100000, 100000, (200, ), generator=rng(10), dtype=torch.int32),
                    torch.bfloat16),
    "bf16_to_f32": (lambda: randn_bf16(200, seed=11, scale=100), torch.float32),
    "bf16_to_f16": (lambda: randn_bf16(200, seed=12, scale=100), torch.float16),
    "bf16_to_f64": (lambda: randn_bf16(200, seed=13, scale=100), torch.float64),
    "bf16_to_i32": (lambda: randn_bf16(200, seed=14, scale=1000), torch.int32),
}


def check_cast(name):
    make, dtype = CASTS[name]
    x = make()
    out = torch.empty(x.shape, dtype=dtype)
    lib.cast_kernel[(1, )](x, out, x.numel(), ROUNDING="rtne", BLOCK=512)
    assert_same_bits(out, x.to(dtype))


@pytest.mark.parametrize("name", list(CASTS))
def test_bf16_casts(compat, name):
    check_cast(name)


@pytest.mark.parametrize("name", ["f32_to_bf16", "f64_to_bf16", "f16_to_bf16", "i32_to_bf16"])
def test_bf16_casts_fail_without_fix(without, name):
    without("bf16_casts")
    fails_without("bf16_casts", check_cast, name)


def test_bf16_division_fails_without_cast_fix(without):
    without("bf16_casts")
    fails_without("bf16_casts", check_binary, "div")


def test_bf16_cast_toward_zero(compat):
    x = _f32_with_ties()[:-6]  # finite, normal values
    out = torch.empty(x.shape, dtype=torch.bfloat16)
    lib.cast_kernel[(1, )](x, out, x.numel(), ROUNDING="rtz", BLOCK=512)
    assert_same_bits(out, (x.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16))


# ---- bf16_reductions -----------------------------------------------------------------------------


def _reduction_input(op):
    if op in ("sum", "cumsum"):
        # multiples of 1/8 in [-8, 8]: every partial sum is exact in float32, so the order in which
        # torch and the interpreter add cannot matter and the comparison can be bit for bit
        return (torch.randint(-64, 65, (4, 64), generator=rng(15)).float() / 8).bfloat16()
    return randn_bf16(256, seed=16, scale=5).view(4, 64)


REDUCTIONS = {
    "sum": lambda x: x.sum(1),
    "max": lambda x: x.max(1).values,
    "min": lambda x: x.min(1).values,
    "argmax": lambda x: x.argmax(1).to(torch.int32),
    "argmin": lambda x: x.argmin(1).to(torch.int32),
    "cumsum": lambda x: x.cumsum(1),
}


def check_reduction(op):
    x = _reduction_input(op)
    want = REDUCTIONS[op](x)
    out = torch.empty_like(want)
    lib.reduce_kernel[(1, )](x, out, OP=op, ROWS=4, COLS=64)
    assert_same_bits(out, want)


@pytest.mark.parametrize("op", list(REDUCTIONS))
def test_bf16_reductions(compat, op):
    check_reduction(op)


# tl.max and tl.min reduce bf16 as float32 and cast back (exact); Triton 3.6 does the same for
# argmax, argmin and cumsum.
@pytest.mark.parametrize("op, always", [("sum", True), ("argmax", False), ("argmin", False),
                                        ("cumsum", False)])
def test_bf16_reductions_fail_without_fix(without, op, always):
    without("bf16_reductions")
    fails_without("bf16_reductions", check_reduction, op, always=always)


# ---- bf16_dot ----------------------------------------------------------------------------------------


def check_dot(out_dtype=torch.float32, exact=True):
    if exact:  # small integers: products and sums exact in float32, any order
        a = torch.randint(-4, 5, (16, 32), generator=rng(17)).to(torch.bfloat16)
        b = torch.randint(-4, 5, (32, 16), generator=rng(18)).to(torch.bfloat16)
    else:
        a, b = randn_bf16(512, seed=19).view(16, 32), randn_bf16(512, seed=20).view(32, 16)
    c = torch.empty(16, 16, dtype=out_dtype)
    lib.dot_kernel[(1, )](a, b, c, M=16, N=16, K=32)
    want = (a.float() @ b.float()).to(out_dtype)
    if exact:
        assert_same_bits(c, want)
    else:
        torch.testing.assert_close(c, want, rtol=1e-5, atol=1e-5)


def test_bf16_dot(compat):
    check_dot()
    check_dot(exact=False)
    check_dot(out_dtype=torch.bfloat16)


def test_bf16_dot_fails_without_fix(without):
    without("bf16_dot")
    fails_without("bf16_dot", check_dot)


# ---- bf16_atomics ------------------------------------------------------------------------------------


def check_atomic_add(start=0.0):
    # small integers: every order of the additions gives the same sums (16 lanes per address)
    x = torch.randint(-8, 9, (64, ), generator=rng(21)).to(torch.bfloat16)
    out = torch.full((4, ), start, dtype=torch.bfloat16)
    lib.atomic_kernel[(1, )](x, out, 64, BINS=4, OP="add", BLOCK=64)
    assert_same_bits(out, (x.float().view(16, 4).sum(0) + start).bfloat16())


def test_bf16_atomic_add(compat):
    check_atomic_add()
    check_atomic_add(start=0.5)


def test_bf16_atomic_add_fails_without_fix(without):
    without("bf16_atomics")
    with pytest.raises(Exception, match="Unsupported data type"):
        check_atomic_add()


# ---- libdevice -----------------------------------------------------------------------------------------

LIBDEVICE = {
    "tanh": lambda x, y: torch.tanh(x),
    "erf": lambda x, y: torch.erf(x),
    "rsqrt": lambda x, y: torch.rsqrt(x.abs() + 0.5),
    "pow": lambda x, y: torch.pow(x.abs() + 0.5, y),
    "exp": lambda x, y: torch.exp(x),
    "log1p": lambda x, y: torch.log1p(x.abs()),
    "atan2": lambda x, y: torch.atan2(x, y),
    "erfinv": lambda x, y: torch.erfinv(x * 0.5),
    "isnan": lambda x, y: torch.isnan(x / x).float(),
    "cuda_module": lambda x, y: torch.tanh(x),
    "imported_function": lambda x, y: torch.tanh(x),
    "own_extern": lambda x, y: torch.tanh(x),
}


def check_libdevice(fn):
    x = torch.randn(100, generator=rng(23)).clamp(-1.9, 1.9)
    x[0] = 0.0  # 0/0 is NaN, for isnan
    y = torch.randn(100, generator=rng(24))
    out = torch.empty(100)
    lib.libdevice_kernel[(1, )](x, y, out, 100, FN=fn, BLOCK=128)
    # libdevice and torch's CPU math are each within an ulp or two of the exact value
    torch.testing.assert_close(out, LIBDEVICE[fn](x, y), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn", list(LIBDEVICE))
def test_libdevice(compat, fn):
    check_libdevice(fn)


def test_libdevice_float64(compat):
    x = torch.randn(50, generator=rng(25), dtype=torch.float64)
    out = torch.empty_like(x)
    lib.float64_libdevice_kernel[(1, )](x, out, 50, BLOCK=64)
    torch.testing.assert_close(out, torch.tanh(x), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("fn, error", [
    ("tanh", "cannot convert None"),  # triton.language.extra.libdevice: stubs
    # the backend's builtins, uncalled as such (or, where the plugin had installed the fix before
    # the library imported them, the interpreter's own refusal once it is undone)
    ("cuda_module", "Did you forget to add @triton.jit|extern_elementwise not supported"),
    ("imported_function", "Did you forget to add @triton.jit|extern_elementwise not supported"),
    ("own_extern", "Did you forget to add @triton.jit|extern_elementwise not supported"),
])
def test_libdevice_fails_without_fix(without, fn, error):
    without("libdevice")
    with pytest.raises(Exception, match=error):
        check_libdevice(fn)


def test_libdevice_function_without_cpu_version_names_the_gap(compat):
    import triton
    import triton.language as tl

    @triton.jit
    def bessel_jn(x_ptr, out_ptr):
        tl.store(out_ptr, tl.extra.cuda.libdevice.jn(2, tl.load(x_ptr)))

    # (decorated here, inside the compat fixture's TRITON_INTERPRET=1: interpreted on any machine)
    with pytest.raises(Exception, match="interpreter gap 'libdevice': __nv_jnf has no CPU implementation"):
        bessel_jn[(1, )](torch.ones(1), torch.empty(1))


# ---- autotune_one_config -----------------------------------------------------------------------------


def run_tuned_add(n):
    x, y = torch.arange(n, dtype=torch.float32), torch.ones(n)
    out, block = torch.empty(n), torch.zeros(1, dtype=torch.int32)
    lib.tuned_add(x, y, out, block)
    assert torch.equal(out, x + 1)
    return block.item()


def test_autotune_one_config(compat):
    # the first config that the library's early_config_prune keeps for the shape
    assert run_tuned_add(100) == 32
    assert run_tuned_add(20) == 16


def test_autotune_one_config_fails_without_fix(without):
    without("autotune_one_config")
    with pytest.raises(Exception, match="active drivers"):
        run_tuned_add(100)


def test_the_autotune_probe_never_asks_the_driver_to_time(monkeypatch):
    # On a GPU machine the driver's timer initialises CUDA, after which a supervised child can no
    # longer be forked from the process (seen under --triton-interpret on an H100: every child was
    # a fresh process). The probe must answer without it.
    from triton.runtime.driver import driver

    from pytest_triton.env.interpreter import autotune as compat_autotune

    asked = []

    class Recorder:
        def __getattr__(self, name):
            asked.append(name)
            raise AttributeError(name)

    before = ic.installed()
    ic.uninstall()  # the probe asks Triton's own autotuner, as before the fix is installed
    monkeypatch.setattr(driver, "_active", Recorder())  # reset_active() would make a real one
    try:
        assert compat_autotune.needs_autotune_one_config()
    finally:
        if before:
            ic.install()
    assert asked == []


def test_autotune_pin_config_and_assert_every_config(compat):
    from pytest_triton.correctness.configs import assert_every_config, pin_config

    configs = lib.tuned_add_kernel.configs
    with pin_config(lib.tuned_add_kernel, configs[0]):
        assert run_tuned_add(100) == 128  # pinned: not pruned, not replaced

    seen = []
    x, y = torch.arange(100, dtype=torch.float32), torch.ones(100)
    out, block = torch.empty(100), torch.zeros(1, dtype=torch.int32)

    def check():
        lib.tuned_add(x, y, out, block)
        seen.append(block.item())
        assert torch.equal(out, x + 1)

    assert_every_config(lib.tuned_add_kernel, check, outputs=[out])
    assert seen == [128, 32, 16]  # each config in turn
    assert lib.tuned_add_kernel.configs == configs


# ---- whole library kernels -----------------------------------------------------------------------------


def run_library():
    x = randn_bf16(4 * 100, seed=26).view(4, 100)
    w = randn_bf16(100, seed=27)
    xf = x.float()
    want = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16() * w
    torch.testing.assert_close(lib.rmsnorm(x, w, eps=1e-6), want)

    gate, up = randn_bf16(300, seed=28, scale=3), randn_bf16(300, seed=29)
    torch.testing.assert_close(lib.swiglu(gate, up), (gate.float() * torch.sigmoid(gate.float())).bfloat16() * up)

    q = randn_bf16(8 * 32, seed=30).view(8, 32)
    angles = torch.arange(8).float()[:, None] * torch.logspace(0, -3, 16)[None, :]
    cos, sin = angles.cos().bfloat16(), angles.sin().bfloat16()
    x1, x2 = q[:, :16], q[:, 16:]
    # bf16 arithmetic throughout on both sides: torch rounds each operation, as the kernel does
    assert_same_bits(lib.rope(q, cos, sin), torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=1))

    logits = randn_bf16(6 * 70, seed=31, scale=4).view(6, 70)
    target = torch.randint(0, 70, (6, ), generator=rng(32))
    want = torch.nn.functional.cross_entropy(logits.float(), target, label_smoothing=0.1, reduction="none")
    torch.testing.assert_close(lib.cross_entropy(logits, target, label_smoothing=0.1), want,
                               rtol=1e-5, atol=1e-5)


def test_library_kernels_run_under_the_interpreter(compat):
    run_library()


def test_library_kernels_fail_without_compat(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    before = ic.installed()
    ic.uninstall()
    try:
        # the first kernel is autotuned: no driver to time it with here; where a GPU driver
        # exists, its float eps argument fails instead
        with pytest.raises(Exception, match="active drivers|'float' object has no attribute 'to'"):
            run_library()
    finally:
        if before:
            ic.install()


# ---- quiet_float_errors ----------------------------------------------------------------------------


def check_quiet_float_errors():
    import warnings

    x = torch.tensor([-3.0, 0.5, 25.0, 1e4, -1e4], dtype=torch.float32)  # exp(1e4) overflows
    out = torch.empty_like(x)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        lib.softplus_kernel[(1, )](x, out, 5, BLOCK=8)
    torch.testing.assert_close(out, torch.nn.functional.softplus(x))
    numpy_warnings = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert not numpy_warnings, numpy_warnings


def test_quiet_float_errors(compat):
    check_quiet_float_errors()
    import numpy as np
    with np.errstate(over="warn"), pytest.warns(RuntimeWarning, match="overflow"):
        np.exp(np.float32(1e4))  # outside a launch NumPy's settings are the caller's


def test_quiet_float_errors_needed(without):
    without("quiet_float_errors")
    with pytest.raises(AssertionError, match="overflow encountered in exp"):
        check_quiet_float_errors()
