"""Feature-transform matrices: Kaldi's matrix file (final.mat, 0.mat: what est-lda, est-mllt
and compose-transforms write), transform-feats and compose-transforms (src/featbin/, and
ComposeTransforms in src/transform/transform-common.cc).

A transform of D-dimensional features is R x D (linear, y = A x) or R x (D+1) (affine, y =
A x + b, the offset b in the last column). Files are written as Kaldi writes a
Matrix<BaseFloat> (binary ``\\0BFM``, or text), and read with Kaldi's own reader, which takes
binary and text, float and double matrices, and ``cmd |`` pipes.
"""
import sys
import tempfile

import numpy as np

from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path


def read_matrix(rxfilename):
    """One Kaldi matrix file as float64 (finite values, at least one row and column)."""
    m = tables.read_double_matrix(rxfilename)
    if m.ndim != 2 or m.size == 0:
        raise NnetError(f"{rxfilename}: empty transform matrix (shape {m.shape})")
    if not np.isfinite(m).all():
        raise NnetError(f"{rxfilename}: the matrix has NaN or infinite values")
    return m


def write_matrix(wxfilename, matrix, binary=True):
    """Write ``matrix`` as Kaldi's Matrix<BaseFloat> file, atomically ('-': standard output)."""
    m = np.asarray(matrix)
    if m.ndim != 2:
        raise NnetError(f"{wxfilename}: a transform must be a 2-D matrix, not of shape {m.shape}")
    if not np.isfinite(m).all():
        raise NnetError(f"{wxfilename}: not written: the matrix has NaN or infinite values")
    if not binary:   # Kaldi's text form, at full float precision (its own writer rounds more)
        rows = "\n".join("  " + " ".join(f"{v:.9g}" for v in r) for r in m.astype(np.float32))
        data = f" [\n{rows} ]\n".encode()
    elif wxfilename == "-":
        with tempfile.TemporaryDirectory() as tmp:
            tables.write_float_matrix(f"{tmp}/m", m, binary)
            with open(f"{tmp}/m", "rb") as f:
                data = f.read()
    else:
        tables.write_float_matrix(wxfilename, m, binary)
        return
    if wxfilename == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        write_bytes(wxfilename, data)


def write_bytes(path, data):
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def is_affine_for(matrix, feat_dim):
    """Whether ``matrix`` applies to features of ``feat_dim`` as an affine transform (True) or a
    linear one (False); neither is an NnetError."""
    cols = matrix.shape[1]
    if cols == feat_dim:
        return False
    if cols == feat_dim + 1:
        return True
    hint = " (composed without --b-is-affine?)" if cols == feat_dim + 2 else ""
    raise NnetError(f"transform has bad dimension {matrix.shape[0]}x{cols} versus feat dim {feat_dim}: "
                    f"it needs {feat_dim} (linear) or {feat_dim + 1} (affine) columns{hint}")


def apply_transform(feats, matrix):
    """transform-feats: [T, D] features through an R x D or R x (D+1) transform -> [T, R] float32."""
    feats = np.asarray(feats, dtype=np.float32)
    d = feats.shape[1]
    m = np.asarray(matrix, dtype=np.float32)
    out = feats @ m[:, :d].T
    if is_affine_for(m, d):
        out += m[:, d]
    return np.ascontiguousarray(out, dtype=np.float32)


def logdet(matrix, feat_dim):
    """transform-feats' log-determinant of the linear part A: log|det A| for a square one,
    0.5 log det(A A^T) ("pseudo") for a dimension-reducing one; (value, pseudo). None for a
    dimension-increasing transform, which has none."""
    a = np.asarray(matrix, dtype=np.float64)[:, :feat_dim]
    if a.shape[0] > feat_dim:
        return None
    sign, value = np.linalg.slogdet(a @ a.T)
    return (0.5 * value if sign > 0 else float("nan")), a.shape[0] < feat_dim


def compose(a, b, b_is_affine=False):
    """compose-transforms: the transform that applies ``b`` first, then ``a`` (A B). A linear
    ``a`` needs as many columns as ``b`` has rows; an affine ``a`` (one column more) makes the
    result affine: B extended with a last row 0 .. 0 1 (``b_is_affine``: b already has the
    offset column) or with a unit row and column (b linear)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise NnetError("compose-transforms: empty matrix")
    if a.shape[1] == b.shape[0]:
        return a @ b
    if a.shape[1] == b.shape[0] + 1:
        if b_is_affine:
            ext = np.zeros((b.shape[0] + 1, b.shape[1]))
            ext[:-1], ext[-1, -1] = b, 1.0
        else:
            ext = np.zeros((b.shape[0] + 1, b.shape[1] + 1))
            ext[:-1, :-1], ext[-1, -1] = b, 1.0
        return a @ ext
    raise NnetError(f"compose-transforms: mismatched dimensions, a has {a.shape[1]} columns and b has "
                    f"{b.shape[0]} rows")
