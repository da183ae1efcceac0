"""CPU/GPU parity of the online preconditioner and of ng_linear (same code on both)."""
import pytest
import torch

from nnet_tools.model.ng import OnlineNaturalGradient, ng_linear

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="CUDA is not available: the GPU parity tests need a GPU")


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-6), (torch.float32, 2e-3)], ids=["float64", "float32"])
@pytest.mark.parametrize("N,D,R", [(60, 25, 10), (512, 1025, 20), (512, 2000, 80), (40, 300, 30)])
def test_online_cpu_gpu_parity(dtype, tol, N, D, R):
    g = torch.Generator().manual_seed(N + D + R)
    spike = 30.0 * torch.randn(D, generator=g, dtype=torch.float64)
    cpu, gpu = OnlineNaturalGradient(R), OnlineNaturalGradient(R)
    for i in range(40):
        X = torch.randn(N, D, generator=g, dtype=torch.float64)
        X += torch.outer(torch.randn(N, generator=g, dtype=torch.float64), spike)
        if i % 7 == 6:
            X.zero_()
        X = X.to(dtype)
        a, ga = cpu.precondition(X)
        b, gb = gpu.precondition(X.cuda())
        assert b.is_cuda and gb.is_cuda and gpu.W.is_cuda
        b = b.cpu()
        assert float((a - b).norm()) <= tol * max(float(a.norm()), 1e-30)
        assert float(ga) == pytest.approx(float(gb), rel=tol)


def test_ng_linear_cpu_gpu_parity():
    torch.manual_seed(0)
    din, dout, n = 64, 48, 256
    w = torch.randn(dout, din, dtype=torch.float64)
    b = torch.randn(dout, dtype=torch.float64)
    pres = {dev: (OnlineNaturalGradient(20), OnlineNaturalGradient(24)) for dev in ("cpu", "cuda")}
    for _ in range(20):
        x = torch.randn(n, din, dtype=torch.float64)
        target = torch.randn(n, dout, dtype=torch.float64)
        grads = {}
        for dev in ("cpu", "cuda"):
            wd = w.to(dev, copy=True).requires_grad_(True)
            bd = b.to(dev, copy=True).requires_grad_(True)
            y = ng_linear(x.to(dev), wd, bd, *pres[dev])
            (0.5 * (y - target.to(dev)).pow(2).sum()).backward()
            grads[dev] = (wd.grad.cpu(), bd.grad.cpu())
        for c, d in zip(grads["cpu"], grads["cuda"]):
            torch.testing.assert_close(d, c, rtol=1e-6, atol=1e-8)
        w -= 1e-4 * grads["cpu"][0]
        b -= 1e-4 * grads["cpu"][1]
    assert pres["cuda"][0].W.is_cuda and pres["cuda"][0].t == 20
