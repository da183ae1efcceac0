"""Linear discriminant analysis as Kaldi's LdaEstimate (src/transform/lda-estimate.cc), for
acc-lda and est-lda.

Statistics: per class (pdf-id) the weighted count and sum of the features, and the total
weighted scatter sum w x x^T. From them, the total covariance T, the between-class covariance
B (of the class means about the global mean, weighted by count) and the within-class W = T - B.
With W = L L^T (Cholesky) and L^-1 B L^-T = U diag(d) U^T (eigenvalues d sorted decreasing),
the LDA matrix is U^T L^-1: it makes the within-class covariance the identity and the
between-class diag(d); its first ``dim`` rows are the transform. No mean removal unless
``remove_offset`` (then an affine transform, whose last column subtracts the projected mean).
"""
import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path
from nnet_tools.speech.models.gmm import load_npz

FORMAT = "nnet-tools-lda-acc-1"


class LdaEstimate:
    """acc-lda's accumulators: ``zero`` [C] counts, ``first`` [C, D] sums, ``second`` [D, D]
    the total scatter, all float64."""

    def __init__(self, num_classes, dim):
        if num_classes < 1 or dim < 1:
            raise NnetError(f"LDA statistics need >= 1 class and dim >= 1, got {num_classes} and {dim}")
        self.zero = np.zeros(num_classes)
        self.first = np.zeros((num_classes, dim))
        self.second = np.zeros((dim, dim))

    @property
    def num_classes(self):
        return len(self.zero)

    @property
    def dim(self):
        return self.first.shape[1]

    def tot_count(self):
        return float(self.zero.sum())

    def accumulate(self, feats, class_ids, weights=None):
        """Add frames ``feats`` [T, D] of classes ``class_ids`` [T] with ``weights`` [T] (default
        1); frames of weight 0 add nothing."""
        x = np.asarray(feats, dtype=np.float64)
        c = np.asarray(class_ids, dtype=np.int64)
        w = np.ones(len(c)) if weights is None else np.asarray(weights, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise NnetError(f"LDA accumulation: features of dim {x.shape[-1]}, statistics of dim {self.dim}")
        if len(c) != len(x) or len(w) != len(x):
            raise NnetError(f"LDA accumulation: {len(x)} frames, {len(c)} class ids, {len(w)} weights")
        if len(c) and (c.min() < 0 or c.max() >= self.num_classes):
            raise NnetError(f"LDA accumulation: class id out of range [0, {self.num_classes})")
        nz = w != 0.0
        x, c, w = x[nz], c[nz], w[nz]
        self.zero += np.bincount(c, weights=w, minlength=self.num_classes)
        np.add.at(self.first, c, x * w[:, None])
        self.second += (x * w[:, None]).T @ x

    def add(self, other, where="LDA accumulators"):
        """Sum ``other`` into these (est-lda reading several accs); returns self."""
        if (other.num_classes, other.dim) != (self.num_classes, self.dim):
            raise NnetError(f"{where}: dimension or classes count mismatch: {other.dim} dims and "
                            f"{other.num_classes} classes vs. {self.dim} and {self.num_classes}")
        self.zero += other.zero
        self.first += other.first
        self.second += other.second
        return self

    def save(self, path):
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, format=np.array(FORMAT), zero=self.zero, first=self.first, second=self.second)

    @classmethod
    def load(cls, path):
        d = load_npz(path, "LDA accumulator")
        if str(d.get("format", "")) != FORMAT:
            raise NnetError(f"{path}: not an LDA accumulator written by nnet-acc-lda")
        missing = [k for k in ("zero", "first", "second") if k not in d]
        if missing:
            raise NnetError(f"{path}: corrupt LDA accumulator: no {', '.join(missing)}")
        zero, first, second = d["zero"], d["first"], d["second"]
        if (zero.ndim != 1 or first.ndim != 2 or first.shape[0] != len(zero) or len(zero) == 0
                or second.shape != (first.shape[1], first.shape[1]) or first.shape[1] == 0
                or any(a.dtype.kind != "f" or not np.isfinite(a).all() for a in (zero, first, second))):
            raise NnetError(f"{path}: corrupt LDA accumulator: its arrays are not finite numbers of matching shapes")
        s = cls.__new__(cls)
        s.zero, s.first, s.second = (a.astype(np.float64) for a in (zero, first, second))
        return s

    def stats(self):
        """(total covariance, between-class covariance, total mean, count), as GetStats."""
        count = self.tot_count()
        if not count > 0:
            raise NnetError(f"no data in the LDA statistics (total count {count:g})")
        mean = self.first.sum(0) / count
        total = self.second / count - np.outer(mean, mean)
        seen = self.zero != 0
        means = self.first[seen] / self.zero[seen, None]
        between = (means * (self.zero[seen] / count)[:, None]).T @ means - np.outer(mean, mean)
        return total, between, mean, count

    def estimate(self, dim=40, allow_large_dim=False, remove_offset=False, within_class_factor=1.0, log=None):
        """est-lda: (the dim x D LDA matrix, the full D x D one), float64; each with a last
        offset column if ``remove_offset``. ``log`` gets Kaldi's LOG lines."""
        if dim < 1:
            raise NnetError(f"--dim must be >= 1, got {dim}")
        if dim > self.dim:
            raise NnetError(f"--dim={dim} is more than the feature dim {self.dim}")
        if dim >= self.num_classes and not allow_large_dim:
            raise NnetError(f"--dim={dim} must be less than the number of classes {self.num_classes} "
                            f"(the between-class covariance has rank at most {self.num_classes - 1}); "
                            f"--allow-large-dim=true to allow it")
        if not within_class_factor >= 0:
            raise NnetError(f"--within-class-factor must be >= 0, got {within_class_factor}")
        total, between, mean, count = self.stats()
        within = total - between
        chol = _cholesky(within)
        if chol is None:
            smooth = 1.0e-03 * np.trace(within) / len(within)
            if log:
                log.info(f"Cholesky failed (possibly not +ve definite), so adding {smooth:.6g} to diagonal "
                         f"and trying again.")
            chol = _cholesky(within + smooth * np.eye(len(within))) if smooth > 0 else None
            if chol is None:
                raise NnetError(f"the within-class covariance of the LDA statistics is singular, even with "
                                f"{smooth:.6g} added to its diagonal (constant or repeated feature dimensions?)")
        linv = np.linalg.inv(chol)
        values, vectors = np.linalg.eigh(_symmetric(linv @ between @ linv.T))
        order = np.argsort(-values, kind="stable")
        values, vectors = values[order], vectors[:, order]
        full = vectors.T @ linv
        # An eigenvector's sign is arbitrary: make each row's largest element positive, so that
        # the same statistics give the same matrix whatever the LAPACK build.
        full *= np.where(full[np.arange(len(full)), np.abs(full).argmax(1)] < 0, -1.0, 1.0)[:, None]
        if log:
            log.info(f"Data count is {count:.8g}")
            log.info(f"LDA singular values are [ {' '.join(f'{v:.6g}' for v in values)} ]")
            log.info(f"Sum of all singular values is {values.sum():.6g}")
            log.info(f"Sum of selected singular values is {values[:dim].sum():.6g}")
        if within_class_factor != 1.0:   # Kaldi's deprecated option: shrink the weak dimensions
            full *= np.sqrt((within_class_factor + values) / (1.0 + values))[:, None]
        if remove_offset:
            full = np.hstack([full, -(full @ mean)[:, None]])
        return full[:dim].copy(), full


def _symmetric(m):
    return 0.5 * (m + m.T)


def _cholesky(m):
    """The lower Cholesky factor of ``m``, or None when it has none, or is so close to singular
    (condition number past 1e12) that its inverse would be noise: Kaldi's Cholesky throws only
    on a non-positive pivot, and would carry such noise into the transform."""
    try:
        chol = np.linalg.cholesky(_symmetric(m))
    except np.linalg.LinAlgError:
        return None
    diag = np.abs(np.diag(chol))
    if not np.isfinite(chol).all() or diag.min() <= 1e-6 * diag.max():
        return None
    return chol
