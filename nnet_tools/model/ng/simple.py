"""nnet2's "simple" natural gradient (src/nnet2/nnet-precondition.cc), in torch.

Each row r_i of the minibatch is multiplied by the inverse of a Fisher estimate built from
the *other* rows of the same minibatch (leave one out, so it does not depend on the sample
itself): p_i = (lambda I + 1/(N-1) sum_{j != i} r_j r_j^T)^{-1} r_i, with
lambda = alpha tr(R^T R) / (N D). It costs a D x D (or N x N) factorisation per minibatch,
which is why nnet3 replaced it with the online estimator; it is kept for comparison.
"""
import torch

_TRACE_FLOOR = 1.0e-20


class SimpleNaturalGradient:
    """Stateless leave-one-out preconditioner with the online one's interface.

    ``P, gamma = pre.precondition(X)``; gamma = ||X||_F / ||P||_F is returned, not applied
    (nnet2's PreconditionDirectionsAlphaRescaled applies it; here the caller does, once).
    alpha defaults to 4.0 as in nnet2's train_pnorm.sh/train_tanh.sh (the header suggests 0.1).
    """

    def __init__(self, alpha=4.0):
        if not alpha > 0.0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        self.alpha = float(alpha)
        self.frozen = False  # nothing to freeze: kept for interface parity with the online one

    def reset(self):
        """Nothing to forget: the estimate is rebuilt from every minibatch."""

    def to(self, device=None, dtype=None):
        return self

    def precondition_with_ones(self, X, reuse=False):
        """Precondition [X, 1]; returns (X_hat, c_hat, gamma) as the online one does. This one
        forms [X, 1]: its cost is the D x D factorisation, not the copy."""
        P, gamma = self.precondition(torch.cat([X, X.new_ones(X.shape[0], 1)], dim=1))
        return P[:, :-1], P[:, -1], gamma

    @torch.no_grad()
    def precondition(self, X, inplace=False, reuse=False):
        """Return (P, gamma); inplace and reuse are accepted for interface parity and ignored."""
        if X.dim() != 2:
            raise ValueError(f"precondition expects a 2-D [N, D] tensor, got shape {tuple(X.shape)}")
        N, D = X.shape
        if N <= 1:  # no other rows to estimate from
            return X, X.new_ones(())
        tr_x = torch.linalg.vector_norm(X).square()
        # All-zero X gives P = 0 = X through the floored trace, with no branch.
        lam = self.alpha * tr_x.clamp(min=_TRACE_FLOOR) / (N * D)
        if N >= D:   # Q = X (lambda I + X^T X/(N-1))^{-1}
            G = torch.mm(X.t(), X) / (N - 1)
            G.diagonal().add_(lam)
            Q = torch.cholesky_solve(X.t(), torch.linalg.cholesky(G)).t()
        else:        # same algebra transposed: Q = (lambda I + X X^T/(N-1))^{-1} X
            S = torch.mm(X, X.t()) / (N - 1)
            S.diagonal().add_(lam)
            Q = torch.cholesky_solve(X, torch.linalg.cholesky(S))
        # Sherman-Morrison removes each row's own outer product: p_i = beta_i q_i.
        g = (X * Q).sum(dim=1)
        beta = 1.0 + g / (N - 1 - g)
        if not bool(((g >= 0) & (beta > 0)).all()):
            raise FloatingPointError("simple natural gradient: bad values in preconditioning "
                                     f"(min gamma_i {float(g.min())}, min beta_i {float(beta.min())})")
        P = Q * beta[:, None]
        tr_p = torch.linalg.vector_norm(P).square()
        gamma = torch.where(tr_x > 0, torch.sqrt(tr_x / tr_p.clamp(min=torch.finfo(X.dtype).tiny)),
                            torch.ones_like(tr_x))
        return P, gamma
