"""ReLU: values and gradients vs torch.relu in float64 (shared element-wise cases), gradcheck away
from the kink, the gradient at 0, NaN."""

import pytest
import torch
from elementwise_cases import ElementwiseTests, OpSpec, autograd_ref_grad
from helpers import devices

import lltm_ext
from lltm_ext.ops.relu import relu_backward, relu_forward, relu_op


class TestReLU(ElementwiseTests):
    spec = OpSpec(
        name="relu",
        fn=lltm_ext.relu,
        function=lltm_ext.ReLUFunction,
        module=lltm_ext.ReLU,
        ref=torch.relu,
        ref_grad=autograd_ref_grad(torch.relu),
        same_dtype=torch.relu,
        public_op=relu_op,
        forward_op=relu_forward,
        backward_op=relu_backward,
        backward_same_dtype=lambda grad, y: torch.ops.aten.threshold_backward(grad, y, 0),
        exports=["relu", "ReLU", "ReLUFunction"],
    )


@pytest.mark.parametrize("device", devices())
def test_gradcheck_away_from_the_kink(device):
    x = torch.randn(40, dtype=torch.float64, device=device)
    x = (x + 0.1 * x.sign()).requires_grad_()  # |x| >= 0.1: finite differences stay on one side
    assert torch.autograd.gradcheck(lltm_ext.relu, (x,))
    assert torch.autograd.gradcheck(lltm_ext.ReLUFunction.apply, (x.view(5, 8),))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zero_nan_and_signs(device, dtype):
    """relu(NaN) = NaN with the gradient passed; the gradient at 0 (and -0) is 0, as torch's."""
    x = torch.tensor([float("nan"), 0.0, -0.0, -1.0, 2.0], dtype=dtype, device=device)
    x.requires_grad_()
    y = lltm_ext.relu(x)
    assert y[0].isnan() and y[1:].tolist() == [0.0, 0.0, 0.0, 2.0]
    grad = torch.tensor([3.0, 4.0, 5.0, 6.0, 7.0], dtype=dtype, device=device)
    (dx,) = torch.autograd.grad(y, x, grad)
    x_ref = x.detach().clone().requires_grad_()
    (dx_ref,) = torch.autograd.grad(torch.relu(x_ref), x_ref, grad)
    assert dx.tolist() == dx_ref.tolist() == [3.0, 0.0, 0.0, 0.0, 7.0]
