"""fMLLR (feature-space, "constrained" MLLR) for diagonal-covariance GMMs, as Kaldi's
FmllrDiagGmmAccs (src/transform/fmllr-diag-gmm.cc), for gmm-est-fmllr and the per-speaker
tables of compose-transforms: speaker-adaptive training (Kaldi's steps/train_sat.sh, tri3) and
its two-pass decoding (steps/decode_fmllr.sh).

The transform is d x (d+1), W = [A b], and maps a frame x to y = W x+ (x+ = [x; 1]). Per
speaker it maximises the likelihood of the transformed frames under the model plus the
Jacobian, log N(W x+; mu_k, diag var_k) + log|det A|, summed over the frames' Gaussian
posteriors g_k(t) (from the alignment's pdf, frames weighted, silence by 0). Statistics, over
frames t and Gaussians k: the count beta = sum g, K = sum_t (sum_k g_k mu_k / var_k) x+^T
[d, d+1], and per row i, G_i = sum_t (sum_k g_k / var_k[i]) x+ x+^T [d+1, d+1]. The auxiliary
function is

    beta log|det A| + tr(W K^T) - 1/2 sum_i w_i^T G_i w_i

(the log-likelihood up to a constant). The full update, from W = [I 0], visits the rows in turn
(Gales 1998, "Maximum likelihood linear transformations for HMM-based speech recognition"):
with c the i-th row of the cofactors of A (here A^-T's row: the cofactors over det A, the
scale is immaterial) extended by a 0, w_i = (alpha c + k_i) G_i^-1, where alpha solves
e1 alpha^2 + e2 alpha - beta = 0 (e1 = c G_i^-1 c, e2 = c G_i^-1 k_i), the root with the larger
beta log|alpha e1 + e2| - alpha^2 e1 / 2. Each row step maximises the function over that row
exactly, so it never falls; Kaldi makes 40 passes (--fmllr-num-iters) and leaves the unit
transform unless the count exceeds 500 (--fmllr-min-count). Also "diag" (A diagonal) and
"offset" (b only), as Kaldi's --fmllr-update-type.

Re-estimation on top of a previous transform (train_sat.sh at its fmllr_iters, and the second
pass of decode_fmllr.sh) does not start from the old matrix: the statistics are accumulated on
the features already through the speaker's current transform W_old (``transform-feats
--utt2spk ... ark:trans.JOB``), a new W_new is estimated on them from [I 0], and the two are
composed into the speaker's total transform, applying W_old first:

    W_total = W_new [W_old; 0 .. 0 1]   (compose-transforms --b-is-affine=true ark:new ark:old ark:out)

so the features are always the speaker-independent ones through one transform per speaker
(``compose_tables`` here; nnet-compose-transforms with tables).
"""
from collections import namedtuple

import numpy as np

from nnet_tools.data import cmvn, tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.transforms import matrix

MIN_COUNT = 500.0      # FmllrOptions' defaults
NUM_ITERS = 40
UPDATE_TYPES = ("full", "diag", "offset", "none")
_CHUNK = 2048          # frames per block when summing the G_i (a [block, (d+1)^2] temporary)

FmllrUpdate = namedtuple("FmllrUpdate", "matrix objf_impr count objf_history updated")
FmllrUpdate.__doc__ = """An fMLLR estimate: the d x (d+1) ``matrix`` (float64), ``objf_impr``
the rise of the auxiliary function over the unit transform [I 0] (0 if not updated), ``count``
(beta), ``objf_history`` the auxiliary function after each pass over the rows (full update;
the starting value first), and ``updated``: False when the unit transform was kept (count not
above min_count, update type "none", or a change that did not raise the function)."""


def unit_transform(dim):
    """[I 0]: the d x (d+1) transform that changes nothing (Kaldi's InitFmllr)."""
    return np.hstack([np.eye(dim), np.zeros((dim, 1))])


class FmllrAccs:
    """gmm-est-fmllr's statistics of one speaker (or utterance): ``beta``, ``K`` [d, d+1] and
    ``G`` [d, d+1, d+1], float64."""

    def __init__(self, dim):
        if dim < 1:
            raise NnetError(f"fMLLR statistics need dim >= 1, got {dim}")
        self.beta = 0.0
        self.K = np.zeros((dim, dim + 1))
        self.G = np.zeros((dim, dim + 1, dim + 1))

    @property
    def dim(self):
        return len(self.K)

    def _check_dim(self, feats, what):
        if feats.ndim != 2 or feats.shape[1] != self.dim:
            raise NnetError(f"fMLLR accumulation: {what} of dim {feats.shape[-1]}, statistics of dim {self.dim}")

    def accumulate_frame_stats(self, feats, linear, quadratic, counts):
        """Add frames ``feats`` [T, d] given, per frame, ``linear`` = sum_k g_k mu_k / var_k [T, d],
        ``quadratic`` = sum_k g_k / var_k [T, d] and ``counts`` = sum_k g_k [T] (Kaldi's
        SingleFrameStats, committed). Frames of count 0 add nothing."""
        x = np.asarray(feats, dtype=np.float64)
        self._check_dim(x, "features")
        counts = np.asarray(counts, dtype=np.float64)
        keep = counts != 0
        if not keep.any():
            return
        x = x[keep]
        a = np.asarray(linear, dtype=np.float64)[keep]
        b = np.asarray(quadratic, dtype=np.float64)[keep]
        xp = np.hstack([x, np.ones((len(x), 1))])
        self.beta += float(counts[keep].sum())
        self.K += a.T @ xp
        # G_i += sum_t b_t[i] x+ x+^T, on the upper triangle (G_i is symmetric), in blocks of frames
        rows, cols = np.triu_indices(self.dim + 1)
        upper = np.zeros((self.dim, len(rows)))
        for s in range(0, len(xp), _CHUNK):
            blk = xp[s:s + _CHUNK]
            upper += b[s:s + _CHUNK].T @ (blk[:, rows] * blk[:, cols])
        self.G[:, rows, cols] += upper
        self.G[:, cols[rows != cols], rows[rows != cols]] += upper[:, rows != cols]

    def accumulate_from_posteriors(self, means, inv_vars, feats, posts):
        """AccumulateFromPosteriors for many frames of one GMM: ``means``, ``inv_vars`` [K, d],
        ``feats`` [T, d], ``posts`` [T, K] (already scaled by the frames' weights)."""
        means, inv_vars = np.asarray(means, dtype=np.float64), np.asarray(inv_vars, dtype=np.float64)
        x = np.asarray(feats, dtype=np.float64)
        self._check_dim(x, "features")
        if means.shape != inv_vars.shape or means.shape[1] != self.dim:
            raise NnetError(f"fMLLR accumulation: model of dim {means.shape[1]}, statistics of dim {self.dim}")
        posts = np.asarray(posts, dtype=np.float64)
        self.accumulate_frame_stats(x, posts @ (means * inv_vars), posts @ inv_vars, posts.sum(1))

    def accumulate_from_gmm(self, gmm, feats, weights):
        """AccumulateForGmm for frames ``feats`` [T, d] of one pdf's ``gmm`` (kaldi_hmm_gmm
        DiagGmm), frame t weighted ``weights[t]``; returns each frame's GMM log-likelihood."""
        x = np.ascontiguousarray(feats, dtype=np.float32)
        posts, like = _posteriors(gmm, x)
        posts *= np.asarray(weights, dtype=np.float64)[:, None]
        self.accumulate_from_posteriors(np.asarray(gmm.means), np.asarray(gmm.inv_vars), x, posts)
        return like

    def accumulate(self, model, feats, pdfs, weights, gpost_model=None):
        """gmm-est-fmllr's AccumulateForUtterance: ``feats`` [T, d] (one or more utterances of this
        speaker), their pdf-ids and weights [T] (ali-to-post | weight-silence-post; a frame with
        several pdfs in its posterior is one row per pdf), the posteriors within each row's pdf.
        ``gpost_model``: take those Gaussian posteriors from this model instead, whose pdfs have
        ``model``'s sizes (gmm-post-to-gpost ALIMDL | gmm-est-fmllr-gpost MODEL). Returns the
        per-row log-likelihoods (under the model giving the posteriors; 0 for rows of weight 0,
        which add nothing)."""
        x = np.asarray(feats, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != model.dim:
            raise NnetError(f"fMLLR accumulation: feature dim {x.shape[-1]} does not match the model's {model.dim}")
        self._check_dim(x, "features")
        pdfs, weights = np.asarray(pdfs, dtype=np.int64), np.asarray(weights, dtype=np.float64)
        if len(pdfs) != len(x) or len(weights) != len(x):
            raise NnetError(f"fMLLR accumulation: {len(x)} frames, {len(pdfs)} pdf-ids, {len(weights)} weights")
        like = np.zeros(len(x))
        linear, quadratic, counts = np.zeros(x.shape), np.zeros(x.shape), np.zeros(len(x))
        used = weights != 0
        for p in np.unique(pdfs[used]):
            rows = np.flatnonzero(used & (pdfs == p))
            g = model.am.get_pdf(int(p))
            posts, like[rows] = _posteriors(gpost_pdf(gpost_model, g, int(p)) if gpost_model else g,
                                            np.ascontiguousarray(x[rows]))
            posts *= weights[rows, None]
            means, inv_vars = np.asarray(g.means, dtype=np.float64), np.asarray(g.inv_vars, dtype=np.float64)
            linear[rows] += posts @ (means * inv_vars)
            quadratic[rows] += posts @ inv_vars
            counts[rows] += posts.sum(1)
        self.accumulate_frame_stats(x, linear, quadratic, counts)
        return like

    def add(self, other, where="fMLLR statistics"):
        if other.dim != self.dim:
            raise NnetError(f"{where}: summing fMLLR statistics of different dims, {other.dim} vs. {self.dim}")
        self.beta += other.beta
        self.K += other.K
        self.G += other.G
        return self

    def objective(self, transform):
        return objective(self, transform)

    def estimate(self, min_count=MIN_COUNT, num_iters=NUM_ITERS, update_type="full", log=None):
        return estimate(self, min_count, num_iters, update_type, log)


def gpost_pdf(gpost_model, gmm, pdf):
    """Pdf ``pdf`` of ``gpost_model``, which must match ``gmm`` (the same pdf of the model being
    adapted) in its number of Gaussians and dimension, as gmm-est-fmllr-gpost requires."""
    if pdf >= gpost_model.am.num_pdfs:
        raise NnetError(f"pdf {pdf}: the model giving the Gaussian posteriors has only {gpost_model.am.num_pdfs} pdfs")
    g = gpost_model.am.get_pdf(pdf)
    if g.num_gauss != gmm.num_gauss or g.dim != gmm.dim:
        raise NnetError(f"pdf {pdf}: {g.num_gauss} Gaussians of dim {g.dim} in the model giving the Gaussian "
                        f"posteriors, {gmm.num_gauss} of dim {gmm.dim} in the model adapted to")
    return g


def _posteriors(gmm, x):
    """The Gaussians' posteriors [T, K] (float64) and the GMM log-likelihoods [T] of frames x."""
    comp = np.asarray(gmm.log_likelihoods_matrix(x), dtype=np.float64)
    top = comp.max(1, keepdims=True)
    like = top[:, 0] + np.log(np.exp(comp - top).sum(1))
    return np.exp(comp - like[:, None]), like


def objective(accs, transform):
    """FmllrAuxFuncDiagGmm: beta log|det A| + tr(W K^T) - 1/2 sum_i w_i^T G_i w_i."""
    w = np.asarray(transform, dtype=np.float64)
    d = accs.dim
    if w.shape != (d, d + 1):
        raise NnetError(f"an fMLLR transform of statistics of dim {d} is {d}x{d + 1}, not {w.shape[0]}x{w.shape[1]}")
    sign, logdet = np.linalg.slogdet(w[:, :d])
    if sign == 0:
        return -np.inf
    return accs.beta * logdet + float(np.sum(w * accs.K)) - 0.5 * float(np.einsum("ia,iab,ib->", w, accs.G, w))


def check_options(min_count, num_iters, update_type):
    if update_type not in UPDATE_TYPES:
        raise NnetError(f"Unknown fMLLR update type {update_type}, fmllr-update-type must be one of "
                        f"\"full\"|\"diag\"|\"offset\"|\"none\"")
    if not min_count >= 0:
        raise NnetError(f"--fmllr-min-count must be >= 0, got {min_count}")
    if num_iters < 0:
        raise NnetError(f"--fmllr-num-iters must be >= 0, got {num_iters}")


def estimate(accs, min_count=MIN_COUNT, num_iters=NUM_ITERS, update_type="full", log=None):
    """FmllrDiagGmmAccs::Update from the unit transform: an FmllrUpdate. Below (or at)
    ``min_count`` the unit transform, with Kaldi's warning. ``log`` gets Kaldi's LOG lines."""
    log = log or logger
    check_options(min_count, num_iters, update_type)
    d = accs.dim
    start = unit_transform(d)
    if not accs.beta > min_count:
        log.warning(f"Not updating fMLLR since below min-count: count is {accs.beta:g}")
        return FmllrUpdate(start, 0.0, accs.beta, [], False)
    if update_type == "none":
        return FmllrUpdate(start, 0.0, accs.beta, [], False)
    before = objective(accs, start)
    if update_type == "full":
        w, history = _update_full(accs, start, num_iters)
    else:
        w = (_update_diag if update_type == "diag" else _update_offset)(accs)
        history = [before, objective(accs, w)]
    impr = objective(accs, w) - before
    if update_type == "full":
        log.info(f"fMLLR objf improvement is {impr / (accs.beta + 1.0e-10):.6g} per frame over {accs.beta:g} frames.")
    if not np.isfinite(w).all():
        raise NnetError(f"the fMLLR update gave a transform with NaN or infinite values (count {accs.beta:g})")
    if impr < 0.0 and not np.isclose(impr + before, before, rtol=1e-6, atol=0.0):
        log.warning("No applying fMLLR transform change because objective function did not increase.")
        return FmllrUpdate(start, 0.0, accs.beta, history, False)
    return FmllrUpdate(w, impr, accs.beta, history, True)


def _inverse_g(accs):
    """G_i^-1 for every row: each G_i must be positive definite (a constant or repeated feature
    dimension, or too few distinct frames, makes it singular: Kaldi's Invert() would fail)."""
    out = np.empty_like(accs.G)
    for i, g in enumerate(accs.G):
        g = 0.5 * (g + g.T)
        try:
            chol = np.linalg.cholesky(g)
            diag = np.abs(np.diag(chol))
            ok = np.isfinite(chol).all() and diag.min() > 1e-8 * diag.max()
        except np.linalg.LinAlgError:
            ok = False
        if not ok:
            raise NnetError(f"the fMLLR statistics' G matrix of row {i} is singular (count {accs.beta:g}: "
                            f"a constant or repeated feature dimension, or too few distinct frames?)")
        cinv = np.linalg.inv(chol)
        out[i] = cinv.T @ cinv
    return out


def _update_full(accs, start, num_iters):
    """ComputeFmllrMatrixDiagGmmFull: ``num_iters`` passes of FmllrInnerUpdate over the rows."""
    d, beta = accs.dim, accs.beta
    ginv = _inverse_g(accs)
    w = start.copy()
    history = [objective(accs, w)]
    for _ in range(num_iters):
        for i in range(d):
            cof = np.zeros(d + 1)
            cof[:d] = np.linalg.inv(w[:, :d])[:, i]     # row i of A^-T: the cofactors / det A
            k = accs.K[i]
            gc = ginv[i] @ cof
            e1, e2 = float(cof @ gc), float(gc @ k)
            discr = np.sqrt(e2 * e2 + 4.0 * e1 * beta)
            roots = ((-e2 + discr) / (2.0 * e1), (-e2 - discr) / (2.0 * e1))
            auxf = [beta * np.log(abs(a * e1 + e2)) - 0.5 * a * a * e1 for a in roots]
            alpha = roots[0] if auxf[0] > auxf[1] else roots[1]
            w[i] = ginv[i] @ (alpha * cof + k)
        history.append(objective(accs, w))
    return w, history


def _update_diag(accs):
    """ComputeFmllrMatrixDiagGmmDiagonal from the unit transform: per row i a scale s (A's
    diagonal) and an offset o, the row function's maximum with s > 0."""
    d, beta = accs.dim, accs.beta
    w = unit_transform(d)
    for i in range(d):
        g = accs.G[i]
        k_ii, k_id = accs.K[i, i], accs.K[i, d]
        g_iii, g_idd, g_idi = g[i, i], g[d, d], g[d, i]
        if not g_idd > 0:
            raise NnetError(f"the fMLLR statistics of row {i} have no weight (count {beta:g})")
        a = g_idi * g_idi / g_idd - g_iii
        b = k_ii - g_idi * k_id / g_idd
        if not a < 0:
            raise NnetError(f"the fMLLR statistics' G matrix of row {i} is singular (count {beta:g}: a constant "
                            f"feature dimension?)")
        s = (-b - np.sqrt(b * b - 4.0 * a * beta)) / (2.0 * a)
        w[i, i], w[i, d] = s, (k_id - s * g_idi) / g_idd
    return w


def _update_offset(accs):
    """ComputeFmllrMatrixDiagGmmOffset from the unit transform: the offsets b only."""
    d = accs.dim
    w = unit_transform(d)
    for i in range(d):
        g = accs.G[i]
        if not g[d, d] > 0:
            raise NnetError(f"the fMLLR statistics of row {i} have no weight (count {accs.beta:g})")
        w[i, d] = (accs.K[i, d] - g[i, d]) / g[d, d]
    return w


# --- compose-transforms on tables ------------------------------------------------------------

def compose_tables(a, b, out, b_is_affine=False, utt2spk=None, log=None):
    """compose-transforms when A or B (or both) is a table of matrices (an rspecifier such as
    ``ark:exp/tri3/tmp_trans.1``): OUT, a wspecifier, gets A[key] B[key] per key of A (both
    tables), or each entry with the other's one matrix. With ``utt2spk`` (both tables) A is per
    utterance and B per speaker: OUT[utt] = A[utt] B[utt2spk[utt]]. A key of A missing from B is
    warned about and skipped, as Kaldi; a mismatch of dimensions is an error naming the key.
    Returns the number of entries written."""
    log = log or logger
    a_table, b_table, out_table = cmvn.is_table(a), cmvn.is_table(b), cmvn.is_table(out)
    if not (a_table or b_table):
        raise NnetError(f"compose_tables: neither {a} nor {b} is a table")
    if not out_table:
        raise NnetError(f"Formats of the input and output rspecifiers/rxfilenames do not match: {out} must be a "
                        f"wspecifier such as ark:{out} when {a if a_table else b} is a table")
    if utt2spk is not None and not (a_table and b_table):
        raise NnetError(f"--utt2spk={utt2spk} given, but {a if not a_table else b} is a global transform, not a table")
    spk_of = cmvn.read_utt2spk(utt2spk) if utt2spk is not None else None

    warned = []

    def composed(ma, mb, key, where):
        if not b_is_affine and not warned and ma.shape == mb.shape and ma.shape[1] == ma.shape[0] + 1:
            log.warning("It looks like you are trying to compose two affine transforms, but you omitted "
                        "the --b-is-affine option.")
            warned.append(key)
        try:
            return matrix.compose(ma, mb, b_is_affine)
        except NnetError as e:
            raise NnetError(f"{where}: key '{key}': {e}") from None

    done = missing = 0
    with tables.MatrixWriter(out) as writer:
        if a_table and b_table:
            with tables.RandomAccessMatrices(b) as second:
                for key, ma in tables.read_matrices(a):
                    bkey = key
                    if spk_of is not None:
                        bkey = spk_of.get(key)
                        if bkey is None:
                            log.warning(f"No speaker provided for utterance {key} (perhaps you wrongly provided "
                                        f"utt2spk option to compose-transforms?)")
                            missing += 1
                            continue
                    if bkey not in second:
                        log.warning(f"Second table does not have key {bkey}")
                        missing += 1
                        continue
                    writer.write(key, composed(ma, second[bkey], key, f"{a} x {b}"))
                    done += 1
        elif a_table:
            mb = matrix.read_matrix(b)
            for key, ma in tables.read_matrices(a):
                writer.write(key, composed(ma, mb, key, f"{a} x {b}"))
                done += 1
        else:
            ma = matrix.read_matrix(a)
            for key, mb in tables.read_matrices(b):
                writer.write(key, composed(ma, mb, key, f"{a} x {b}"))
                done += 1
        if not done:
            raise NnetError(f"{a} x {b}: no transform composed"
                            + (f": none of the {missing} keys of {a} is in {b}" if missing else ": the table is empty"))
    log.info(f"Composed {done} transforms into {out}" + (f"; {missing} keys had no transform in {b}" if missing else "")
             + ".")
    return done
