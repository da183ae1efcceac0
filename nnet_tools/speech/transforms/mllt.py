"""MLLT (maximum likelihood linear transform, a.k.a. global semi-tied covariance) as Kaldi's
MlltAccs (src/transform/mllt.cc), for gmm-acc-mllt and est-mllt.

Statistics, from a diagonal-covariance GMM and frames x with Gaussian posteriors g_k(t): the
count beta = sum g, and per feature dimension i the d x d matrix
G_i = sum_t sum_k g_k(t) / var_k[i] (mu_k - x)(mu_k - x)^T. The update maximises
beta log|det M| - 1/2 sum_i m_i^T G_i m_i over the rows m_i of M, starting from the unit
matrix: row by row, m_i = G_i^-1 c_i sqrt(beta / c_i^T G_i^-1 c_i) with c_i the i-th cofactor
row (Gales 1999, eq. 22), 200 passes over the rows as Kaldi. The new features are M x, and the
model's means become M mu (gmm-transform-means: models/gmm.py's transform_means); compose M
with the previous transform (matrix.compose).
"""
from collections import namedtuple

import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path
from nnet_tools.log import logger
from nnet_tools.speech.models.gmm import load_npz
from nnet_tools.speech.transforms.weights import rand_prune

FORMAT = "nnet-tools-mllt-acc-1"
NUM_ITERS = 200   # MlltAccs::Update's, fixed there ("may later make this an option")

MlltUpdate = namedtuple("MlltUpdate", "matrix objf_impr count objf_history")
MlltUpdate.__doc__ = """est-mllt's result: the d x d ``matrix`` (float64), the total objective
improvement ``objf_impr`` over the unit matrix, the ``count`` (beta), and ``objf_history``, the
cumulative improvement after each pass over the rows."""


class MlltAccs:
    """gmm-acc-mllt's accumulators: ``beta`` (the count) and ``G`` [d, d, d], G[i] the G_i."""

    def __init__(self, dim, rand_prune=0.25):
        if dim < 1:
            raise NnetError(f"MLLT statistics need dim >= 1, got {dim}")
        if not 0.0 <= rand_prune < np.inf:
            raise NnetError(f"--rand-prune must be >= 0, got {rand_prune}")
        self.rand_prune = float(rand_prune)
        self.beta = 0.0
        self.G = np.zeros((dim, dim, dim))

    @property
    def dim(self):
        return len(self.G)

    def accumulate_from_posteriors(self, means, inv_vars, feats, posts, rng=None):
        """AccumulateFromPosteriors for many frames of one GMM: ``means``, ``inv_vars`` [K, d],
        ``feats`` [T, d], ``posts`` [T, K] (each randomly pruned at ``rand_prune``, with ``rng``)."""
        means, inv_vars = np.asarray(means, dtype=np.float64), np.asarray(inv_vars, dtype=np.float64)
        x = np.asarray(feats, dtype=np.float64)
        if means.shape[1] != self.dim or x.shape[1] != self.dim:
            raise NnetError(f"MLLT accumulation: model dim {means.shape[1]} and feature dim {x.shape[1]}, "
                            f"statistics of dim {self.dim}")
        if self.rand_prune > 0:
            posts = rand_prune(posts, self.rand_prune, rng if rng is not None else self._default_rng())
        posts = np.asarray(posts, dtype=np.float64)
        occ = posts.sum(0)
        scatter = np.zeros((len(means), self.dim, self.dim))
        for k in np.flatnonzero(occ != 0):
            rows = posts[:, k] != 0
            diff = x[rows] - means[k]
            scatter[k] = (diff * posts[rows, k, None]).T @ diff
        used = occ != 0
        self.G += np.einsum("kj,kab->jab", inv_vars[used], scatter[used], optimize=True)
        self.beta += float(occ.sum())

    def accumulate_from_gmm(self, gmm, feats, weights, rng=None):
        """AccumulateFromGmm for frames ``feats`` [T, d] of one pdf's ``gmm`` (kaldi_hmm_gmm
        DiagGmm), frame t weighted ``weights[t]``; returns each frame's GMM log-likelihood."""
        x = np.ascontiguousarray(feats, dtype=np.float32)
        comp = np.asarray(gmm.log_likelihoods_matrix(x), dtype=np.float64)
        top = comp.max(1, keepdims=True)
        like = top[:, 0] + np.log(np.exp(comp - top).sum(1))
        posts = np.exp(comp - like[:, None]) * np.asarray(weights, dtype=np.float64)[:, None]
        self.accumulate_from_posteriors(np.asarray(gmm.means), np.asarray(gmm.inv_vars), x, posts, rng)
        return like

    def accumulate(self, model, feats, pdfs, weights, rng=None):
        """gmm-acc-mllt's loop over aligned frames, done per pdf: ``feats`` [N, d] (any number of
        utterances), their pdf-ids and weights [N]. Returns the per-frame log-likelihoods (0 for
        frames of weight 0, which add nothing)."""
        feats = np.asarray(feats, dtype=np.float32)
        pdfs, weights = np.asarray(pdfs, dtype=np.int64), np.asarray(weights, dtype=np.float64)
        if feats.ndim != 2 or feats.shape[1] != model.dim:
            raise NnetError(f"MLLT accumulation: feature dim {feats.shape[-1]} does not match the model's {model.dim}")
        rng = rng if rng is not None else self._default_rng()
        like = np.zeros(len(feats))
        used = weights != 0
        for p in np.unique(pdfs[used]):
            rows = np.flatnonzero(used & (pdfs == p))
            like[rows] = self.accumulate_from_gmm(model.am.get_pdf(int(p)), feats[rows], weights[rows], rng)
        return like

    def _default_rng(self):
        """One generator (seed 0) for all calls that bring none, so that their prunings differ."""
        if getattr(self, "_rng", None) is None:
            self._rng = np.random.default_rng(0)
        return self._rng

    def add(self, other, where="MLLT accumulators"):
        """Sum ``other`` into these (est-mllt reading several accs); returns self."""
        if other.dim != self.dim:
            raise NnetError(f"{where}: summing MLLT accumulators of different dims, {other.dim} vs. {self.dim}")
        self.beta += other.beta
        self.G += other.G
        return self

    def save(self, path):
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, format=np.array(FORMAT), beta=np.array(self.beta), G=self.G,
                         rand_prune=np.array(self.rand_prune))

    @classmethod
    def load(cls, path):
        d = load_npz(path, "MLLT accumulator")
        if str(d.get("format", "")) != FORMAT:
            raise NnetError(f"{path}: not an MLLT accumulator written by nnet-gmm-acc-mllt")
        missing = [k for k in ("beta", "G") if k not in d]
        if missing:
            raise NnetError(f"{path}: corrupt MLLT accumulator: no {', '.join(missing)}")
        g, beta = d["G"], d["beta"]
        if (g.ndim != 3 or g.shape[0] == 0 or g.shape != (g.shape[0],) * 3 or beta.shape != ()
                or any(a.dtype.kind != "f" or not np.isfinite(a).all() for a in (g, beta))):
            raise NnetError(f"{path}: corrupt MLLT accumulator: G must be finite numbers of shape [d, d, d] "
                            f"and beta one number")
        s = cls.__new__(cls)
        s.G, s.beta = g.astype(np.float64), float(beta)
        s.rand_prune = float(d["rand_prune"]) if "rand_prune" in d else 0.0
        return s

    def update(self, num_iters=NUM_ITERS, log=None):
        return update(self.beta, self.G, num_iters, log)


def objective(beta, G, M):
    """The auxiliary function the update maximises: beta log|det M| - 1/2 sum_i m_i^T G_i m_i."""
    M = np.asarray(M, dtype=np.float64)
    return beta * np.linalg.slogdet(M)[1] - 0.5 * np.einsum("ia,iab,ib->", M, G, M)


def update(beta, G, num_iters=NUM_ITERS, log=None):
    """MlltAccs::Update from the unit matrix: an MlltUpdate. ``log`` gets Kaldi's LOG lines (and
    its warning when the count is small)."""
    G = np.asarray(G, dtype=np.float64)
    dim = len(G)
    if not beta > 0:
        raise NnetError(f"no data in the MLLT statistics (count {beta:g})")
    if beta < 10 * dim:   # not really enough data to estimate
        (log or logger).warning(f"Mllt:Update, {'very small' if beta > 2 * dim else 'insufficient'} count {beta:g}")
    ginv = np.empty_like(G)
    for i in range(dim):
        try:
            chol = np.linalg.cholesky(0.5 * (G[i] + G[i].T))
        except np.linalg.LinAlgError:
            chol = None
        diag = np.abs(np.diag(chol)) if chol is not None else None
        if chol is None or diag.min() <= 1e-8 * diag.max():
            raise NnetError(f"the MLLT statistics' G matrix of dimension {i} is singular (count {beta:g}: "
                            f"too little data, or a constant feature dimension?)")
        cinv = np.linalg.inv(chol)
        ginv[i] = cinv.T @ cinv
    M = np.eye(dim)
    tot, history = 0.0, []
    for p in range(num_iters):
        for i in range(dim):
            cof = np.linalg.inv(M)[:, i]   # the i-th cofactor row / det(M): m_i . cof = 1
            row = M[i]
            before = beta * np.log(abs(row @ cof)) - 0.5 * row @ G[i] @ row
            gc = ginv[i] @ cof
            row = gc * np.sqrt(beta / (cof @ gc))
            after = beta * np.log(abs(row @ cof)) - 0.5 * row @ G[i] @ row
            if after < before - abs(before) * 1e-5:
                raise NnetError("Objective decrease in MLLT update.")
            M[i] = row
            tot += after - before
        history.append(tot)
        if log and (p < 10 or p % 10 == 0):
            log.info(f"MLLT objective improvement per frame by {p}'th iteration is {tot / beta:.6g} per frame "
                     f"over {beta:.8g} frames.")
    return MlltUpdate(M, tot, beta, history)

