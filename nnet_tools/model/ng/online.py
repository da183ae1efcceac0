"""Kaldi's online natural-gradient preconditioner (nnet3 ``OnlineNaturalGradient``), in torch.

Per side of an affine layer it tracks a Fisher (scatter) estimate of the rows of X,

    F_t = R_t^T diag(d_t) R_t + rho_t I,      R_t: rank x D with orthonormal rows,

updated by one power-method step against the smoothed scatter T_t = eta S_t + (1-eta) F_t,
S_t = X^T X / N, and returns the rows multiplied by the smoothed inverse
beta_t (F_t + alpha/D tr(F_t) I)^{-1}, written in Woodbury form X_hat = X - X W^T W with
W_t = E_t^{1/2} R_t stored instead of R_t. The notation follows Kaldi's
src/nnet3/natural-gradient-online.{h,cc}.

The N x D work (three thin GEMMs per update, two otherwise) runs in X's dtype on X's
device; the R x R products K and L are formed in float64 there, and the rank x rank problem
(Z_t, its eigendecomposition, floors, the new d and rho, re-orthogonalisation) runs on the
CPU in float64, as Kaldi does. Fetching K and L is the only host sync, and it happens only
on update calls (every call while t <= 10, i.e. the first 11, then every ``update_period``); a
re-orthogonalisation check adds one more R x R fetch.
"""
import contextlib
import math

import numpy as np
import torch

from nnet_tools.errors import NnetError
from nnet_tools.log import logger

_NUM_INITIAL_UPDATES = 10       # Kaldi hard-codes 10 updates before skipping any.
_CONDITION_THRESHOLD = 1.0e6    # re-orthogonalise when c_max > this * c_min
_ORTHOGONAL_TOLERANCE = 1.0e-3  # R R^T this close to I needs no re-orthogonalisation
_MAX_CHOLESKY_INVERSE = 100.0   # a larger C^{-1} means Cholesky is unreliable: use QR
_CPU64 = {"device": "cpu", "dtype": torch.float64}
_TRACE_CHUNK = 1 << 20         # elements per float32 dot in _trace


def orthonormal_special(rank, dim):
    """Kaldi's deterministic start: row r has entries at columns r, r+rank, ...; the first is
    1.1, the rest 1, row normalised. The 1.1 keeps any sum of rows from being all-ones."""
    cols = torch.arange(dim)
    rows = cols % rank
    per_row = torch.bincount(rows, minlength=rank).to(torch.float64)
    vals = torch.ones(dim, dtype=torch.float64)
    vals[:rank] = 1.1
    vals /= torch.sqrt(1.1 ** 2 + per_row[rows] - 1.0)
    out = torch.zeros(rank, dim, dtype=torch.float64)
    out[rows, cols] = vals
    return out


class OnlineNaturalGradient:
    """Online low-rank-plus-identity natural-gradient preconditioner for one side of a layer.

    ``X_hat, gamma = pre.precondition(X)``: X is [N, D]; X_hat = X - X W^T W; gamma is a
    0-dim tensor, sqrt(||X||^2 / ||X_hat||^2) (1 for all-zero X), NOT applied to X_hat.
    The state (W, d, rho, t) lives in plain tensors on this object, never in a module's
    state dict: Kaldi re-estimates it in every job. It follows X's device and dtype.
    """

    def __init__(self, rank, update_period=4, num_samples_history=2000.0, alpha=4.0,
                 epsilon=1.0e-10, delta=5.0e-4, num_minibatches_history=0.0):
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        if update_period < 1:
            raise ValueError(f"update_period must be >= 1, got {update_period}")
        if not 0.0 < num_samples_history <= 1.0e6:
            raise ValueError(f"num_samples_history must be in (0, 1e6], got {num_samples_history}")
        if num_minibatches_history != 0.0 and not 1.0 < num_minibatches_history < 1.0e6:
            raise ValueError("num_minibatches_history must be 0 (off) or in (1, 1e6), "
                             f"got {num_minibatches_history}")
        if alpha < 0.0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if not 0.0 < epsilon <= 1.0e-5:
            raise ValueError(f"epsilon must be in (0, 1e-5], got {epsilon}")
        if not 0.0 < delta <= 1.0e-2:
            raise ValueError(f"delta must be in (0, 1e-2], got {delta}")
        self.rank = int(rank)
        self.update_period = int(update_period)
        self.num_samples_history = float(num_samples_history)
        self.num_minibatches_history = float(num_minibatches_history)
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.frozen = False  # Kaldi's Freeze(): apply the estimate but do not update it (backstitch step 1)
        self.reset()

    def reset(self):
        """Forget the estimate; the next call re-initialises from its minibatch."""
        self.t = 0       # calls so far (Kaldi's t_); 0 means not initialised
        self.W = None    # [rank, D], X's dtype and device: E_t^{1/2} R_t
        self.d = None    # [rank] float64 CPU: diag(D_t), descending
        self.rho = None  # 0-dim float64 CPU
        self._scratch = None  # X_hat buffer for reuse=True calls

    def to(self, device=None, dtype=None):
        """Move the N x D-side state (W); d and rho stay on the CPU in float64."""
        if self.W is not None:
            self.W = self.W.to(device=device, dtype=dtype)
        return self

    def eta(self, n):
        """Forgetting factor for a minibatch of n rows, capped at 0.9 (all-zero input)."""
        if self.num_minibatches_history > 0.0:
            return 1.0 / self.num_minibatches_history
        return min(1.0 - math.exp(-n / self.num_samples_history), 0.9)

    def updating(self):
        """Whether the next call updates the estimate (Kaldi's Updating()): every call for the
        first 11 (t = 0..10), then every update_period-th; the others only apply it. Never while
        frozen (t still counts the call, as in Kaldi)."""
        if self.frozen:
            return False
        t = self.t
        return t <= _NUM_INITIAL_UPDATES or (t - _NUM_INITIAL_UPDATES) % self.update_period == 0

    @torch.no_grad()
    def precondition(self, X, inplace=False, reuse=False):
        """Return (X_hat, gamma). inplace=True writes X_hat over X (a caller-owned temporary),
        saving one pass over memory. reuse=True writes X_hat into a buffer this object keeps
        and overwrites on its next reuse=True call (for a caller done with X_hat by then, as a
        layer's backward is): no fresh [N, D] allocation, and its page faults, per minibatch."""
        if X.dim() != 2:
            raise ValueError(f"precondition expects a 2-D [N, D] tensor, got shape {tuple(X.shape)}")
        N, D = X.shape
        if D == 1 or N == 0:  # rank would be 0: the rescaled NG step is the identity
            return X, X.new_ones(())
        W = self._ready(X)
        H = torch.mm(X, W.t())                       # H_t = X_t W_t^T      [N, R]
        tr_x = _trace(X)                             # tr(X X^T), before X_hat exists
        stats = self._stats(H, torch.mm(H.t(), X), tr_x) if self.updating() else None
        if inplace:
            X_hat = X.addmm_(H, W, alpha=-1.0)        # X_t - H_t W_t
        else:
            X_hat = torch.addmm(X, H, W, alpha=-1.0, out=self._buffer(X) if reuse else None)
        gamma = _gamma(tr_x, _trace(X_hat))
        if stats is not None:  # after queueing X_hat, so a GPU computes it during the host work
            self._update(N, D, *stats)
        self.t += 1
        return X_hat, gamma

    @torch.no_grad()
    def precondition_with_ones(self, X, reuse=False):
        """Precondition [X, 1] (an affine layer's input with the bias's column of ones) without
        forming it. Returns (X_hat, c_hat, gamma): [X_hat, c_hat] is the preconditioned [X, 1],
        X_hat [N, D] and c_hat [N]. Not copying X into an [N, D+1] buffer saves a pass over it,
        and X_hat stays contiguous for the weight-gradient GEMM. The same algorithm and state as
        ``precondition(torch.cat([X, 1]))``: W is [rank, D+1], its last column the ones' part.
        reuse as in precondition."""
        if X.dim() != 2:
            raise ValueError(f"precondition expects a 2-D [N, D] tensor, got shape {tuple(X.shape)}")
        N, Dx = X.shape
        if Dx == 0 or N == 0:
            X_hat, gamma = self.precondition(torch.cat([X, X.new_ones(N, 1)], dim=1))
            return X_hat[:, :Dx], X_hat[:, Dx], gamma
        if self.t == 0:  # the start needs the whole first minibatch: form it once per job
            self._init(torch.cat([X, X.new_ones(N, 1)], dim=1))
        W = self._ready(X)
        W_x, w_1 = W[:, :Dx], W[:, Dx]
        H = torch.addmm(w_1, X, W_x.t())             # [X, 1] W^T
        tr_x = _trace(X).add_(N)                     # tr([X, 1] [X, 1]^T); no host scalar sent to a GPU
        stats = None
        if self.updating():                          # J = H^T [X, 1]
            J = torch.cat([torch.mm(H.t(), X), H.sum(dim=0)[:, None]], dim=1)
            stats = self._stats(H, J, tr_x)
        X_hat = torch.addmm(X, H, W_x, alpha=-1.0, out=self._buffer(X) if reuse else None)
        c_hat = torch.mv(H, w_1).neg_().add_(1.0)
        gamma = _gamma(tr_x, _trace(X_hat).add_(_trace(c_hat)))
        if stats is not None:
            self._update(N, Dx + 1, *stats)
        self.t += 1
        return X_hat, c_hat, gamma

    # --- internals -------------------------------------------------------------------------

    def _buffer(self, X):
        """The reused X_hat buffer, (re)made when X's shape, dtype or device changes."""
        buf = self._scratch
        if buf is None or buf.shape != X.shape or buf.dtype != X.dtype or buf.device != X.device:
            buf = self._scratch = torch.empty_like(X, memory_format=torch.contiguous_format)
        return buf

    def _ready(self, X):
        """Initialise on the first call; have W follow X's device and dtype. Returns W."""
        if self.t == 0:
            self._init(X)
        if self.W.device != X.device or self.W.dtype != X.dtype:
            self.W = self.W.to(device=X.device, dtype=X.dtype)
        return self.W

    def _init(self, X0):
        """Structured start, then 3 update iterations on copies of the first minibatch (1 if
        N <= rank: one already gives its row space). The first real call still has t = 0."""
        if self.W is not None:
            return
        N, D = X0.shape
        if self.rank >= D:
            logger.warning(f"Rank {self.rank} of online preconditioner is >= dim {D}, "
                           f"setting it to {D - 1} (but this is probably still too high)")
            self.rank = D - 1
        R = self.rank
        e0 = 1.0 / (2.0 + (D + R) * self.alpha / D)
        self.W = (math.sqrt(e0) * orthonormal_special(R, D)).to(device=X0.device, dtype=X0.dtype)
        self.d = torch.full((R,), self.epsilon, **_CPU64)
        self.rho = torch.tensor(self.epsilon, **_CPU64)
        tr_x = _trace(X0)
        for _ in range(3 if N > R else 1):
            H = torch.mm(X0, self.W.t())
            self._update(N, D, *self._stats(H, torch.mm(H.t(), X0), tr_x))

    def _stats(self, H, J, tr_x):
        """From H = X W^T [N, R] and J = H^T X [R, D] (X's dtype): J, and [L = H^T H, K = J J^T,
        tr(X X^T)] packed in float64 on X's device, for _update to fetch in one transfer. K and L
        square the data's condition number (the spread of the scatter's eigenvalues), so forming
        them in float32 loses the small eigenvalues; in float64 they cost R^2 min(N, D) flops,
        small beside the N D R GEMMs."""
        N, D = H.shape[0], J.shape[1]
        J64 = J.to(torch.float64)
        if N > D:  # L = W J^T and K = J J^T in one GEMM
            LK = torch.mm(torch.cat([self.W.to(torch.float64), J64]), J64.t())
        else:
            H64 = H.to(torch.float64)
            LK = torch.cat([torch.mm(H64.t(), H64), torch.mm(J64, J64.t())])
        return J, torch.cat([LK.reshape(-1), tr_x.to(torch.float64).reshape(1)])

    def _update(self, N, D, J, packed):
        """One power-method step: W_{t+1}, d_{t+1}, rho_{t+1} from the stats of X_t."""
        R = self.rank
        host = packed.to(**_CPU64)  # the one host sync of an update
        L, K, tr_x = host[:R * R].view(R, R), host[R * R:2 * R * R].view(R, R), float(host[-1])
        A, coeff, d1, rho1, sqrt_e1, reorth = self._solve_rank_problem(N, D, L, K, tr_x)
        # W_{t+1} = A_t B_t with B_t = J_t + (1-eta)/(eta/N) (D_t + rho_t I) W_t, formed in J_t.
        to_dev = {"device": J.device, "dtype": J.dtype}
        W1 = torch.mm(A.to(**to_dev), J.addcmul_(coeff.to(**to_dev)[:, None], self.W))
        if reorth:
            W1 = self._reorthogonalize(W1, sqrt_e1)
        self.W, self.d, self.rho = W1, d1, torch.tensor(rho1, **_CPU64)

    def _solve_rank_problem(self, N, D, L, K, tr_x):
        """The rank x rank part of the update, on the host in float64. It runs every update on
        tiny arrays, so the op count is its cost: numpy's elementwise ops cost a fraction of
        torch's dispatch; the eigendecomposition stays in torch (its LAPACK, on one thread)."""
        R, alpha = self.rank, self.alpha
        eta = self.eta(N)
        eta_n, eta1 = eta / N, 1.0 - eta
        d, rho = self.d.numpy(), float(self.rho)
        d_sum = float(d.sum())
        beta = rho * (1.0 + alpha) + alpha * d_sum / D
        inv_sqrt_e = np.sqrt(beta / d + 1.0)             # e_ii = 1 / (beta/d_ii + 1)
        d_rho = d + rho                                  # diag(D_t + rho_t I)
        # Z_t = Y_t Y_t^T with Y_t = R_t T_t, from K and L (header's eqn:Zt):
        # E^-1/2 [(eta/N)^2 K + (eta/N)(1-eta)(L (D+rho) + (D+rho) L)] E^-1/2 + (1-eta)^2 (D+rho)^2.
        # eigh reads one triangle, which symmetrises K and L as Kaldi does explicitly.
        Z = K.numpy() * eta_n ** 2 + L.numpy() * (d_rho[:, None] + d_rho[None, :]) * (eta_n * eta1)
        Z *= np.multiply.outer(inv_sqrt_e, inv_sqrt_e)
        Z.flat[::R + 1] += d_rho * d_rho * eta1 ** 2
        # Z scales with the 4th power of the data: normalise before the eigendecomposition.
        z_scale = max(float(np.trace(Z)), 1.0)
        Z /= z_scale
        try:
            with _one_thread():
                c, U = torch.linalg.eigh(torch.from_numpy(Z))
        except torch.linalg.LinAlgError:
            raise NnetError("natural gradient: the eigendecomposition of the Fisher estimate failed, as its "
                            "inputs or derivatives are not finite (NaN or inf)") from None
        c, U = c.numpy()[::-1] * z_scale, U.numpy()[:, ::-1]  # descending, as Kaldi's SortSvd
        c_floor = (rho * eta1) ** 2
        reorth = bool(c[0] > _CONDITION_THRESHOLD * c[-1] or c[-1] < c_floor)
        sqrt_c = np.sqrt(np.maximum(c, c_floor))         # still descending
        # rho_{t+1} keeps tr(F_{t+1}) = tr(T_t); then floor rho and d absolutely and relatively.
        rho1 = (eta_n * tr_x + eta1 * (D * rho + d_sum) - float(sqrt_c.sum())) / (D - R)
        floor = max(self.epsilon, self.delta * float(sqrt_c[0]))
        d1 = np.maximum(sqrt_c - rho1, floor)
        rho1 = max(rho1, floor)
        beta1 = rho1 * (1.0 + alpha) + alpha * float(d1.sum()) / D
        sqrt_e1 = 1.0 / np.sqrt(beta1 / d1 + 1.0)
        # A_t = (eta/N) E_{t+1}^{1/2} C_t^{-1/2} U_t^T E_t^{-1/2}
        A = U.T * np.multiply.outer(sqrt_e1 / sqrt_c * eta_n, inv_sqrt_e)
        coeff = d_rho * (eta1 / eta_n)
        return (torch.from_numpy(A), torch.from_numpy(coeff), torch.from_numpy(d1), rho1,
                torch.from_numpy(sqrt_e1), reorth)

    def _reorthogonalize(self, W1, sqrt_e1):
        """Make R_{t+1} = E^{-1/2} W_{t+1} orthonormal again: W <- E^{1/2} C^{-1} E^{-1/2} W with
        O = C C^T (Cholesky), which disturbs the top rows least; Gram-Schmidt (Householder QR)
        when Cholesky fails or C^{-1} is out of range."""
        R = W1.shape[0]
        inv_sqrt_e1 = 1.0 / sqrt_e1
        O = torch.mm(W1, W1.t()).to(**_CPU64) * (inv_sqrt_e1[:, None] * inv_sqrt_e1[None, :])
        eye = torch.eye(R, **_CPU64)
        if bool((O - eye).abs().max() <= _ORTHOGONAL_TOLERANCE):
            return W1
        with _one_thread():
            C, info = torch.linalg.cholesky_ex(O)
            if int(info) == 0:
                C_inv = torch.linalg.solve_triangular(C, eye, upper=False)
                if bool(torch.isfinite(C_inv).all()) and bool(C_inv.max() < _MAX_CHOLESKY_INVERSE):
                    M = sqrt_e1[:, None] * C_inv * inv_sqrt_e1[None, :]
                    return torch.mm(M.to(device=W1.device, dtype=W1.dtype), W1)
            logger.warning("Cholesky failed or out of range while re-orthogonalizing R_t; "
                           "using Gram-Schmidt")
            Q, Rq = torch.linalg.qr(W1.to(**_CPU64).t())
        # QR's Q^T rows are Gram-Schmidt of W's rows up to sign; keep each row's direction.
        sign = torch.where(Rq.diagonal() < 0, -1.0, 1.0).to(torch.float64)
        rows = Q.t() * (sign * sqrt_e1)[:, None]
        return rows.to(device=W1.device, dtype=W1.dtype)


def _trace(X):
    """tr(X X^T), the squared Frobenius norm, as a 0-dim tensor: BLAS dots (2-3x faster here than
    torch.linalg.vector_norm's reduction, which matters at two per side) over chunks of at most
    _TRACE_CHUNK elements, summed in float64. One float32 dot over millions of elements drifts
    (0.15 % for 8M equal values on one thread); a minibatch of up to 1M elements is one dot."""
    v = X.reshape(-1)
    if v.numel() <= _TRACE_CHUNK:
        return torch.dot(v, v)
    dots = torch.stack([torch.dot(c, c) for c in v.split(_TRACE_CHUNK)])
    return dots.sum(dtype=torch.float64).to(X.dtype)


def _gamma(tr_x, tr_hat):
    """Kaldi's scale sqrt(tr(X X^T) / tr(X_hat X_hat^T)), a 0-dim tensor (no host sync);
    X = 0 gives X_hat = 0 and, through the tiny offsets, 1."""
    tiny = torch.finfo(tr_x.dtype).tiny
    return ((tr_x + tiny) / (tr_hat + tiny)).sqrt_()


@contextlib.contextmanager
def _one_thread():
    """Run the tiny host LAPACK calls (eigh, Cholesky) on one thread: split over threads they
    gain nothing, and on a busy machine one descheduled thread stalls them for milliseconds."""
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
