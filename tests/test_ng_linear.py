"""ng_linear: plain forward, exact back-propagated derivative, and the weight/bias gradient
gamma_in * gamma_out * Y_hat^T X_hat with the scale applied exactly once."""
import copy

import pytest
import torch
import torch.nn.functional as F

from nnet_tools.model.ng import OnlineNaturalGradient, SimpleNaturalGradient, ng_linear

F64 = torch.float64


def make(din=7, dout=5, n=32, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, din, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(dout, din, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(dout, generator=g, dtype=dtype, requires_grad=True)
    target = torch.randn(n, dout, generator=g, dtype=dtype)
    return x, w, b, target


def hand_gradient(x, grad_y, pre_in, pre_out):
    X = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)
    X_hat, g_in = pre_in.precondition(X)
    Y_hat, g_out = pre_out.precondition(grad_y)
    full = g_in * g_out * Y_hat.t() @ X_hat
    return full[:, :-1], full[:, -1], float(g_in * g_out)


@pytest.mark.parametrize("kind", ["online", "simple"])
def test_gradients_match_hand_computation(kind):
    x, w, b, target = make()
    if kind == "online":
        pre_in, pre_out = OnlineNaturalGradient(3), OnlineNaturalGradient(2)
    else:
        pre_in, pre_out = SimpleNaturalGradient(), SimpleNaturalGradient()
    for step in range(12):  # several calls, so the online estimate has moved on
        ref_in, ref_out = copy.deepcopy(pre_in), copy.deepcopy(pre_out)
        y = ng_linear(x, w, b, pre_in, pre_out)
        torch.testing.assert_close(y, F.linear(x, w, b), rtol=0, atol=0)
        loss = 0.5 * ((y - target) ** 2).sum()
        x.grad = w.grad = b.grad = None
        loss.backward()
        grad_y = (y - target).detach()
        gw, gb, scale = hand_gradient(x.detach(), grad_y, ref_in, ref_out)
        assert abs(scale - 1.0) > 1e-3  # gamma matters, so a gamma^2 bug would show
        torch.testing.assert_close(w.grad, gw, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(b.grad, gb, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(x.grad, grad_y @ w.detach(), rtol=0, atol=0)
        x.data -= 0.01 * torch.randn_like(x)
    if kind == "online":
        assert pre_in.t == pre_out.t == 12


def test_ng_gradient_is_a_descent_direction():
    x, w, b, target = make(din=20, dout=10, n=64, dtype=torch.float32)
    pre_in, pre_out = OnlineNaturalGradient(5), OnlineNaturalGradient(4)
    for _ in range(5):
        loss = 0.5 * ((ng_linear(x, w, b, pre_in, pre_out) - target) ** 2).sum()
        w.grad = b.grad = None
        loss.backward()
        ng_w, ng_b = w.grad.clone(), b.grad.clone()
        w.grad = b.grad = None
        (0.5 * ((F.linear(x, w, b) - target) ** 2).sum()).backward()
        assert float((ng_w * w.grad).sum() + (ng_b * b.grad).sum()) > 0
        # preconditioning changes direction, not size: the norms are comparable
        ratio = float(torch.cat([ng_w.flatten(), ng_b]).norm() / torch.cat([w.grad.flatten(), b.grad]).norm())
        assert 0.05 < ratio < 20
        with torch.no_grad():
            w -= 1e-3 * ng_w
            b -= 1e-3 * ng_b


def test_no_grad_is_plain_linear_and_leaves_state():
    x, w, b, _ = make()
    pre_in, pre_out = OnlineNaturalGradient(3), OnlineNaturalGradient(2)
    with torch.no_grad():
        y = ng_linear(x, w, b, pre_in, pre_out)
    assert torch.equal(y, F.linear(x, w, b)) and pre_in.t == 0 and pre_out.t == 0
    w.requires_grad_(False)
    b.requires_grad_(False)
    ng_linear(x, w, b, pre_in, pre_out).sum().backward()  # only x needs a gradient
    assert pre_in.t == 0 and x.grad is not None


def test_batched_input_and_no_bias():
    x, w, _, _ = make(n=24)
    x3 = x.detach().reshape(4, 6, 7).requires_grad_(True)
    pre_in, pre_out = OnlineNaturalGradient(3), OnlineNaturalGradient(2)
    ref_in, ref_out = copy.deepcopy(pre_in), copy.deepcopy(pre_out)
    y = ng_linear(x3, w, None, pre_in, pre_out)
    assert y.shape == (4, 6, 5)
    y.pow(2).sum().backward()
    X_hat, g_in = ref_in.precondition(x.detach())  # no ones column without a bias
    Y_hat, g_out = ref_out.precondition(2 * y.detach().reshape(24, 5))
    torch.testing.assert_close(w.grad, g_in * g_out * Y_hat.t() @ X_hat, rtol=1e-12, atol=1e-12)
