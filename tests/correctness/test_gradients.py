"""assert_grads_close: every input's gradient through an autograd.Function against float64
autograd of a reference, naming the inputs whose gradients are off."""

import pytest
import torch

from pytest_triton import assert_grads_close


class ScaledProduct(torch.autograd.Function):
    """out = a * w (w broadcast over a's rows) + c; `bug` picks one input's gradient to get wrong."""

    bug = None

    @staticmethod
    def forward(ctx, a, w, c, scale):
        ctx.save_for_backward(a, w)
        ctx.scale = scale
        return (a * w + c) * scale

    @staticmethod
    def backward(ctx, g):
        a, w = ctx.saved_tensors
        s = ctx.scale
        da = g * w * s
        dw = (g * a * s).sum(0)
        dc = g * s
        if ScaledProduct.bug == "w_twice":
            dw = 2 * dw
        if ScaledProduct.bug == "a_last_row":
            da[-1] = 0
        if ScaledProduct.bug == "no_c":
            dc = None
        return da, dw, dc, None


def reference(a, w, c, scale):
    return (a * w + c) * scale


@pytest.fixture
def operands(make_tensor):
    ScaledProduct.bug = None
    yield make_tensor((33, 8)), make_tensor(8), make_tensor((33, 8)), 0.5
    ScaledProduct.bug = None


def test_right_gradients_pass_and_the_outputs_come_back(operands):
    out = assert_grads_close(ScaledProduct.apply, reference, operands)
    a, w, c, s = operands
    assert torch.equal(out, (a * w + c) * s)


@pytest.mark.parametrize("bug, off, label", [
    ("w_twice", "w", "gradient of w (float32 (8,), reduction_size=33 (broadcast)):"),
    ("a_last_row", "a", "gradient of a (float32 (33, 8), elementwise):"),
])
def test_a_wrong_gradient_is_named(operands, bug, off, label):
    ScaledProduct.bug = bug
    with pytest.raises(AssertionError) as info:
        assert_grads_close(ScaledProduct.apply, reference, operands)
    lines = str(info.value).splitlines()
    assert lines[0] == f"Gradients off for 1 of 3 inputs: {off}"
    assert lines[1] == label
    assert lines[2].startswith("    Tensors are not close (torch.float32")
    right = [n for n in ("a", "w", "c") if n != off]
    assert lines[-1].startswith(f"Gradients that match: {right[0]} (")
    assert f", {right[1]} (" in lines[-1]


def test_a_missing_gradient_is_named(operands):
    ScaledProduct.bug = "no_c"
    with pytest.raises(AssertionError, match=r"Gradients off for 1 of 3 inputs: c\ngradient of c "
                                             r"\(float32 \(33, 8\), elementwise\): fn gave none"):
        assert_grads_close(ScaledProduct.apply, reference, operands)


def test_names_and_reduction_sizes_can_be_given(operands):
    ScaledProduct.bug = "w_twice"
    with pytest.raises(AssertionError, match=r"inputs: weight\ngradient of weight \(float32 "
                                             r"\(8,\), reduction_size=64 \(given\)\)"):
        assert_grads_close(ScaledProduct.apply, lambda *args: reference(*args), operands,
                           names=["x", "weight", "bias", "scale"],
                           reduction_sizes={"weight": 64})
    with pytest.raises(AssertionError, match=r"inputs\[1\]"):  # no names to be had: positions
        assert_grads_close(ScaledProduct.apply, lambda *args: reference(*args), operands)


def test_against_a_baseline(operands, make_tensor):
    a, w, c, s = (t.half() if isinstance(t, torch.Tensor) else t for t in operands)
    assert_grads_close(ScaledProduct.apply, reference, (a, w, c, s), baseline=True)
    ScaledProduct.bug = "a_last_row"
    with pytest.raises(AssertionError, match="Kernel error exceeds 2x the baseline's"):
        assert_grads_close(ScaledProduct.apply, reference, (a, w, c, s), baseline=True)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"names": ["a"]}, ValueError, "names has 1 entries for 4 inputs"),
    ({"reduction_sizes": {"z": 3}}, ValueError, r"reduction_sizes names \['z'\]"),
    ({"reduction_sizes": [1]}, ValueError, "reduction_sizes has 1 entries for 4 inputs"),
    ({"grad_outputs": [torch.ones(1), torch.ones(1)]}, ValueError, "2 grad_outputs for 1 outputs"),
])
def test_bad_arguments_are_named(operands, kwargs, error, match):
    with pytest.raises(error, match=match):
        assert_grads_close(ScaledProduct.apply, reference, operands, **kwargs)
    with pytest.raises(ValueError, match="no floating-point tensor"):
        assert_grads_close(ScaledProduct.apply, reference, (1, 2, 3, 4))
    with pytest.raises(AssertionError, match="no output of fn requires grad"):
        assert_grads_close(lambda *args: reference(*args).detach(), reference, operands)


class TimesTwoInPlace(torch.autograd.Function):
    """x * 2 whose backward doubles its incoming gradient in place and returns it (RoPE and
    RMSNorm kernels reuse the incoming gradient's memory this way): right, and legal."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        grad.mul_(2)
        return grad


def test_a_backward_that_overwrites_its_incoming_gradient_passes(make_tensor):
    x = make_tensor((7, 5))
    given = make_tensor((7, 5))
    kept = given.clone()
    assert_grads_close(TimesTwoInPlace.apply, lambda x: x * 2, (x,))
    assert_grads_close(TimesTwoInPlace.apply, lambda x: x * 2, (x,), grad_outputs=given)
    assert torch.equal(given, kept)  # the caller's gradient is not written either
    # Negative control: the same in-place backward that forgets the factor 2 still fails.
    with pytest.raises(AssertionError, match="Gradients off for 1 of 1 inputs: x"):
        assert_grads_close(TimesTwoInPlace.apply, lambda x: x * 4, (x,))


class TwoOutputs(torch.autograd.Function):
    """(x * 3, w * 2): w reaches only the small output, elementwise. `bug` adds 1e-4 to w's
    gradient: far outside float32's elementwise tolerance (1e-5), inside the 3.2e-4 that a
    reduction over the large output's 1024 elements per element of w would allow."""

    bug = False

    @staticmethod
    def forward(ctx, x, w):
        return x * 3, w * 2

    @staticmethod
    def backward(ctx, gx, gw):
        dw = gw * 2
        return gx * 3, dw + 1e-4 if TwoOutputs.bug else dw


def test_each_inputs_reduction_size_comes_from_the_outputs_it_reaches(make_tensor):
    x, w = make_tensor((64, 64)), make_tensor(4)
    reference = lambda x, w: (x * 3, w * 2)
    TwoOutputs.bug = False
    assert_grads_close(TwoOutputs.apply, reference, (x, w))
    TwoOutputs.bug = True
    try:
        with pytest.raises(AssertionError, match=r"Gradients off for 1 of 2 inputs: w\ngradient "
                                                 r"of w \(float32 \(4,\), elementwise\)"):
            assert_grads_close(TwoOutputs.apply, reference, (x, w))
    finally:
        TwoOutputs.bug = False


def test_an_input_broadcast_into_several_outputs_sums_their_counts(operands):
    a, w, c, s = operands
    ScaledProduct.bug = "w_twice"
    both = lambda a, w, c, s: (ScaledProduct.apply(a, w, c, s), ScaledProduct.apply(a, w, c, 2 * s))
    with pytest.raises(AssertionError, match=r"gradient of w \(float32 \(8,\), reduction_size=66 "
                                             r"\(broadcast: 33 \+ 33 from outputs 0, 1\)\)"):
        assert_grads_close(both, lambda a, w, c, s: (reference(a, w, c, s),
                                                     reference(a, w, c, 2 * s)), operands)


class NormWithStats(torch.autograd.Function):
    """An RMSNorm returning (y, rstd) as kernels do, rstd not differentiable; `bug` drops w from
    dx."""

    bug = False

    @staticmethod
    def forward(ctx, x, w):
        rstd = torch.rsqrt(x.pow(2).mean(-1) + 1e-6)
        ctx.save_for_backward(x, w, rstd)
        ctx.mark_non_differentiable(rstd)
        return x * rstd[:, None] * w, rstd

    @staticmethod
    def backward(ctx, gy, _grstd):
        x, w, rstd = ctx.saved_tensors
        xhat = x * rstd[:, None]
        gxhat = gy if NormWithStats.bug else gy * w
        dx = rstd[:, None] * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True))
        return dx, (gy * xhat).sum(0)


def _norm_with_stats(x, w):
    rstd = torch.rsqrt(x.pow(2).mean(-1) + 1e-6)
    return x * rstd[:, None] * w, rstd


def test_outputs_chooses_which_outputs_are_differentiated(make_tensor):
    x, w = make_tensor((9, 40)), make_tensor(40)
    NormWithStats.bug = False
    # Every output: the reference differentiates rstd as well, the kernel cannot.
    with pytest.raises(AssertionError, match="Gradients off for 1 of 2 inputs: x"):
        assert_grads_close(NormWithStats.apply, _norm_with_stats, (x, w),
                           reduction_sizes={"x": 40})
    y, rstd = assert_grads_close(NormWithStats.apply, _norm_with_stats, (x, w), outputs=(0,),
                                 reduction_sizes={"x": 40})
    assert y.shape == (9, 40) and rstd.shape == (9,)  # every output comes back
    gy = make_tensor((9, 40))
    assert_grads_close(NormWithStats.apply, _norm_with_stats, (x, w), outputs=(0,),
                       grad_outputs=[gy], reduction_sizes={"x": 40})
    NormWithStats.bug = True
    try:
        with pytest.raises(AssertionError, match="Gradients off for 1 of 2 inputs: x"):
            assert_grads_close(NormWithStats.apply, _norm_with_stats, (x, w), outputs=(0,),
                               grad_outputs=[gy], reduction_sizes={"x": 40})
    finally:
        NormWithStats.bug = False
    with pytest.raises(ValueError, match=r"outputs=\(2,\): fn returned 2 outputs"):
        assert_grads_close(NormWithStats.apply, _norm_with_stats, (x, w), outputs=(2,))
    with pytest.raises(ValueError, match="2 grad_outputs for 1 outputs"):
        assert_grads_close(NormWithStats.apply, _norm_with_stats, (x, w), outputs=[0],
                           grad_outputs=[gy, gy])


class ScaleWithExtras(torch.autograd.Function):
    """Returns (y, None, None, None), as autograd Functions that carry non-tensor outputs do."""

    bug = False

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w, None, None, None

    @staticmethod
    def backward(ctx, gy, *_):
        x, w = ctx.saved_tensors
        return gy * w * (1.5 if ScaleWithExtras.bug else 1.0), (gy * x).sum(0)


def test_none_outputs_of_an_autograd_function_are_skipped(make_tensor):
    # issue 32: "fn returned NoneType; expected a tensor or a tuple of tensors" for a function
    # that returned (tensor, None, None, None)
    x, w = make_tensor((6, 16)), make_tensor(16)
    y, *rest = assert_grads_close(ScaleWithExtras.apply, lambda x, w: x * w, (x, w),
                                  reduction_sizes={"w": 6}, names=["x", "w"])
    assert y.shape == (6, 16) and rest == [None, None, None]
    ScaleWithExtras.bug = True
    try:
        with pytest.raises(AssertionError, match="Gradients off for 1 of 2 inputs: x"):
            assert_grads_close(ScaleWithExtras.apply, lambda x, w: x * w, (x, w),
                               reduction_sizes={"w": 6}, names=["x", "w"])
    finally:
        ScaleWithExtras.bug = False
    with pytest.raises(ValueError, match=r"outputs=\(1,\): fn's output 1 is None"):
        assert_grads_close(ScaleWithExtras.apply, lambda x, w: x * w, (x, w), outputs=(1,))
    with pytest.raises(TypeError, match="fn returned int at position 1 of its 2 outputs"):
        assert_grads_close(lambda x, w: (x * w, 3), lambda x, w: x * w, (x, w))
    with pytest.raises(TypeError, match="fn returned no tensor"):
        assert_grads_close(lambda x, w: None, lambda x, w: x * w, (x, w))


class HalfRMSNorm(torch.autograd.Function):
    """An RMSNorm that computes as torch's own autograd does at the inputs' precision: x_hat
    rounded to the inputs' dtype, the weight gradient summed from products in that dtype. `bug`
    drops the first row from the weight gradient."""

    bug = False

    @staticmethod
    def forward(ctx, x, w):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, w, rstd)
        return (x.float() * rstd).to(x.dtype) * w

    @staticmethod
    def backward(ctx, g):
        x, w, rstd = ctx.saved_tensors
        xhat = (x.float() * rstd).to(x.dtype)
        rows = slice(1, None) if HalfRMSNorm.bug else slice(None)
        dw = (g[rows] * xhat[rows]).sum(0)
        gx = (g * w).float()
        dx = rstd * (gx - xhat.float() * (gx * xhat.float()).mean(-1, keepdim=True))
        return dx.to(x.dtype), dw


def _rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_kernel_as_precise_as_torch_at_its_precision_passes_with_baseline(make_tensor, dtype):
    x, w = make_tensor((2048, 128), dtype), make_tensor(128, dtype)
    HalfRMSNorm.bug = False
    try:
        # The table (float32 arithmetic, one rounding) rejects the weight gradient; the failure
        # says torch's own is as far off and names the keyword.
        with pytest.raises(AssertionError) as info:
            assert_grads_close(HalfRMSNorm.apply, _rms_norm, (x, w), reduction_sizes={"x": 128})
        report = str(info.value)
        assert "gradient of w (" in report
        assert (f"Note: reference's own {str(dtype)[6:]} gradient of w (reference run in "
                f"{str(dtype)[6:]}, as torch computes it) is off by as much") in report
        assert "passes with assert_grads_close(..., baseline=True)." in report
        assert "baseline=torch_result" not in report  # assert_close's own note is not repeated
        assert_grads_close(HalfRMSNorm.apply, _rms_norm, (x, w), reduction_sizes={"x": 128},
                           baseline=True)
        # Negative control: a dropped row is no rounding; it fails both ways, with no note.
        HalfRMSNorm.bug = True
        with pytest.raises(AssertionError) as info:
            assert_grads_close(HalfRMSNorm.apply, _rms_norm, (x, w), reduction_sizes={"x": 128})
        w_section = str(info.value).split("gradient of w (", 1)[1]
        assert "Note:" not in w_section  # (bf16's x gradient, right, keeps its note)
        with pytest.raises(AssertionError, match=r"Gradients off for 1 of 2 inputs: w\n.*\n"
                                                 r"    Kernel error exceeds 2x the baseline's"):
            assert_grads_close(HalfRMSNorm.apply, _rms_norm, (x, w), reduction_sizes={"x": 128},
                               baseline=True)
    finally:
        HalfRMSNorm.bug = False
