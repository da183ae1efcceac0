"""nnet2's simple natural gradient against the explicitly inverted leave-one-out matrices
(Kaldi's src/nnet2/nnet-precondition-test.cc)."""
import pytest
import torch

from nnet_tools.model.ng import SimpleNaturalGradient

F64 = torch.float64


def leave_one_out(X, alpha):
    """p_n = (lambda I + 1/(N-1) sum_{m != n} r_m r_m^T)^{-1} r_n, one inverse per row."""
    N, D = X.shape
    lam = alpha * float((X * X).sum()) / (N * D)
    rows = []
    for n in range(N):
        others = torch.cat([X[:n], X[n + 1:]])
        G = lam * torch.eye(D, dtype=F64) + others.t() @ others / (N - 1)
        rows.append(torch.linalg.inv(G) @ X[n])
    return torch.stack(rows)


@pytest.mark.parametrize("trial", range(10))
def test_equals_explicit_leave_one_out_inverse(trial):
    g = torch.Generator().manual_seed(trial)
    N = 2 + int(torch.randint(30, (1,), generator=g))
    D = 1 + int(torch.randint(20, (1,), generator=g))
    X = torch.randn(N, D, generator=g, dtype=F64)
    P, gamma = SimpleNaturalGradient(alpha=0.1).precondition(X)
    torch.testing.assert_close(P, leave_one_out(X, 0.1), rtol=1e-9, atol=1e-12)
    assert float(gamma) == pytest.approx(float(X.norm() / P.norm()), rel=1e-12)


@pytest.mark.parametrize("N,D", [(40, 12), (8, 30)])  # both algebraic branches
def test_both_branches_and_float32(N, D):
    X = torch.randn(N, D, dtype=F64) * torch.linspace(0.1, 3.0, D, dtype=F64)
    pre = SimpleNaturalGradient()  # alpha 4, as nnet2's scripts
    P, gamma = pre.precondition(X)
    torch.testing.assert_close(P, leave_one_out(X, 4.0), rtol=1e-9, atol=1e-12)
    assert float((X * P).sum(dim=1).min()) > 0  # a descent direction per row
    P32, gamma32 = pre.precondition(X.float())
    assert P32.dtype == torch.float32
    torch.testing.assert_close(P32.double(), P, rtol=1e-4, atol=1e-5)
    assert float(gamma32) == pytest.approx(float(gamma), rel=1e-4)


def test_zero_and_single_row_pass_through():
    pre = SimpleNaturalGradient()
    Z = torch.zeros(6, 4)
    P, gamma = pre.precondition(Z)
    assert torch.equal(P, Z) and float(gamma) == 1.0
    one = torch.randn(1, 4)
    P, gamma = pre.precondition(one)
    assert torch.equal(P, one) and float(gamma) == 1.0
