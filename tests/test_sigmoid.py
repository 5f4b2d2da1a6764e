"""Sigmoid: values and gradients vs torch.sigmoid in float64 (shared element-wise cases),
gradcheck, stability at +-1000 in every dtype, accuracy over the whole float32 range."""

import pytest
import torch
from elementwise_cases import DEVICE_DTYPES, ElementwiseTests, OpSpec, autograd_ref_grad
from helpers import assert_close, devices

import lltm_ext
from lltm_ext.ops.sigmoid import sigmoid_backward, sigmoid_forward, sigmoid_op

_exact_grad = autograd_ref_grad(torch.sigmoid)


def ref_grad(x, grad, dtype):
    """torch.sigmoid's gradient in float64. For half types, from the output rounded to `dtype`
    (what backward saves, in torch too): 1 - y is coarse there once y is near 1."""
    if dtype in (torch.float16, torch.bfloat16):
        y = torch.sigmoid(x.detach().double().cpu()).to(dtype).double()
        return grad.double().cpu() * y * (1 - y)
    return _exact_grad(x, grad, dtype)


class TestSigmoid(ElementwiseTests):
    spec = OpSpec(
        name="sigmoid",
        fn=lltm_ext.sigmoid,
        function=lltm_ext.SigmoidFunction,
        module=lltm_ext.Sigmoid,
        ref=torch.sigmoid,
        ref_grad=ref_grad,
        same_dtype=torch.sigmoid,
        public_op=sigmoid_op,
        forward_op=sigmoid_forward,
        backward_op=sigmoid_backward,
        backward_same_dtype=torch.ops.aten.sigmoid_backward,
        exports=["sigmoid", "Sigmoid", "SigmoidFunction"],
    )


@pytest.mark.parametrize("device", devices())
def test_gradcheck(device):
    x = (torch.randn(40, dtype=torch.float64, device=device) * 4).requires_grad_()
    assert torch.autograd.gradcheck(lltm_ext.sigmoid, (x,))
    assert torch.autograd.gradcheck(lltm_ext.SigmoidFunction.apply, (x.view(4, 10),))


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_stable_at_extremes(device, dtype):
    """No inf or NaN for x = +-1000 (or +-inf): exactly 1 and 0, gradients 0."""
    x = torch.tensor([1000.0, -1000.0, float("inf"), -float("inf"), 88.0, -88.0, -104.0])
    x = x.to(device=device, dtype=dtype).requires_grad_()
    y = lltm_ext.sigmoid(x)
    assert torch.isfinite(y).all()
    assert y[:4].tolist() == [1.0, 0.0, 1.0, 0.0]
    (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.isfinite(dx).all() and dx[:4].tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("device", devices())
def test_float32_accuracy_over_the_range(device):
    """Relative error against float64 within a few float32 ulps wherever y is a normal float."""
    x = torch.linspace(-87, 40, 1_000_001, dtype=torch.float32, device=device)
    y = lltm_ext.sigmoid(x).double().cpu()
    ref = torch.sigmoid(x.double().cpu())
    rel = ((y - ref).abs() / ref).max().item()
    assert rel < 4 * torch.finfo(torch.float32).eps, rel
    assert_close(y, ref, torch.float32)
