"""round_ste: floor(x + 1/2) exactly (halves up, unlike torch.round's halves to even), the
straight-through gradient (the incoming gradient itself), and the shared element-wise cases."""

import pytest
import torch
from elementwise_cases import DEVICE_DTYPES, ElementwiseTests, OpSpec
from helpers import devices

import lltm_ext
from lltm_ext.ops.round_ste import round_ste_forward, round_ste_op


def round_half_up(x):
    """floor(x + 1/2), exactly, on float64: floor(x) + (x - floor(x) >= 1/2)."""
    r = torch.floor(x)
    return r + ((x - r) >= 0.5).to(x.dtype)


def ste_grad(x, grad, dtype):
    return grad.double().cpu()


def round_same_dtype(x):
    """floor(x + 1/2) for half types, in float (exact there), back to x's dtype."""
    return torch.floor(x.float() + 0.5).to(x.dtype)


class TestRoundSTE(ElementwiseTests):
    spec = OpSpec(
        name="round_ste",
        fn=lltm_ext.round_ste,
        function=lltm_ext.RoundSTEFunction,
        module=lltm_ext.RoundSTE,
        ref=round_half_up,
        ref_grad=ste_grad,
        same_dtype=round_same_dtype,
        public_op=round_ste_op,
        forward_op=round_ste_forward,
        exports=["round_ste", "RoundSTE", "RoundSTEFunction"],
    )


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_halves_round_up(device, dtype):
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.25, 0.75, -0.25, -0.75, 3.0, -3.0])
    got = lltm_ext.round_ste(x.to(device=device, dtype=dtype))
    assert got.tolist() == [1.0, 2.0, 3.0, 0.0, -1.0, -2.0, 0.0, 1.0, 0.0, -1.0, 3.0, -3.0]
    # torch.round differs on halves (to even): 0.5 -> 0, 2.5 -> 2, -1.5 -> -2.
    assert torch.round(x)[[0, 2, 4]].tolist() == [0.0, 2.0, -2.0]


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_seed_semantics_in_unit_interval(device, dtype):
    """For x in (0, 1): 1 if x >= 0.5 else 0."""
    x = torch.rand(10_001).clamp_min(1e-3).to(device=device, dtype=dtype)
    expected = (x >= 0.5).to(dtype)
    assert torch.equal(lltm_ext.round_ste(x), expected)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_next_to_halves(device, dtype):
    """The floats next to halves. x + 0.5 rounds up to 1 for the float just below 0.5, so the naive
    floor(x + 0.5) gives 1; floor(x + 0.5) computed exactly is 0."""
    halves = torch.tensor([0.5, -0.5, 1.5, -1.5, 2.5, 1024.5], dtype=dtype)
    below = torch.nextafter(halves, halves.new_tensor(-4096.0))
    above = torch.nextafter(halves, halves.new_tensor(4096.0))
    assert (below[0] + 0.5).item() == 1.0  # the naive formula's mistake
    assert lltm_ext.round_ste(below.to(device)).tolist() == [0.0, -1.0, 1.0, -2.0, 2.0, 1024.0]
    assert lltm_ext.round_ste(above.to(device)).tolist() == [1.0, 0.0, 2.0, -1.0, 3.0, 1025.0]
    assert torch.equal(lltm_ext.round_ste(below.to(device)).cpu(), round_half_up(below))


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_large_and_non_finite_pass_through(device, dtype):
    big = torch.finfo(dtype).max
    x = torch.tensor(
        [big, -big, 2.0**24 + 2, float("inf"), -float("inf"), float("nan")], dtype=dtype
    )
    x = x.to(device)
    y = lltm_ext.round_ste(x)
    assert torch.equal(y[:5], x[:5]) and y[5].isnan()


@pytest.mark.parametrize("device", devices())
def test_gradient_is_the_incoming_gradient_itself(device):
    """Straight through: the same tensor comes back (no kernel, no copy)."""
    x = torch.randn(6, 7, device=device, requires_grad=True)
    grad = torch.randn(6, 7, device=device)
    (dx,) = torch.autograd.grad(lltm_ext.round_ste(x), x, grad)
    assert dx.data_ptr() == grad.data_ptr()
    assert torch.equal(dx, grad)
    # The operator's backward returns its argument as it is (the same tensor, not a copy).
    y = lltm_ext.round_ste(x)
    (dx,) = torch.autograd.grad(y, x, grad)
    assert dx is grad
    # Through the module and a leaf's .grad too.
    lltm_ext.RoundSTE()(x).backward(grad)
    assert torch.equal(x.grad, grad)
