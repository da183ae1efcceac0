"""LDA and MLLT feature transforms (Kaldi's tri2 stage): splice-feats at the edges, LDA against
the generalised eigenproblem of between- and within-class scatter, MLLT's objective rising and
its transform undoing a rotation, compose-transforms, the matrix file through Kaldi's own
reader, and the programs' failures as one line."""
import numpy as np
import pytest

pytest.importorskip("kaldi_hmm_gmm", reason="speech extra not installed (pip install -e '.[speech]')")
import kaldi_hmm_gmm as khg  # noqa: E402  (before anything that imports kaldifst)
import kaldi_native_io  # noqa: E402
import scipy.linalg  # noqa: E402

from helpers import error_line, mono_model, run  # noqa: E402
from nnet_tools.data import tables  # noqa: E402
from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.models import gmm  # noqa: E402
from nnet_tools.speech.transforms import lda, matrix, mllt, splice, weights  # noqa: E402


# --- splice-feats ---------------------------------------------------------------------------

def test_splice_repeats_the_edge_frames():
    feats = np.array([[0, 1], [2, 3], [4, 5]], dtype=np.float32)
    want = np.array([[0, 1, 0, 1, 2, 3, 4, 5],      # t=0: frames 0(-1 clamped), 0, 1, 2
                     [0, 1, 2, 3, 4, 5, 4, 5],      # t=1: frames 0, 1, 2, 2(3 clamped)
                     [2, 3, 4, 5, 4, 5, 4, 5]])     # t=2: frames 1, 2, 2, 2
    np.testing.assert_array_equal(splice.splice_frames(feats, 1, 2), want)
    np.testing.assert_array_equal(splice.splice_frames(feats, 0, 0), feats)
    np.testing.assert_array_equal(splice.splice_frames(feats[:1], 2, 1), np.tile(feats[:1], 4))
    assert splice.splice_frames(np.zeros((10, 13)), 4, 4).shape == (10, 117)
    with pytest.raises(NnetError, match="left-context"):
        splice.splice_frames(feats, -1, 0)


# --- LDA ------------------------------------------------------------------------------------

def _classes(rng, num_classes=6, dim=5, n=400):
    """Frames of ``num_classes`` classes with random means and one shared full covariance."""
    a = rng.normal(size=(dim, dim))
    means = rng.normal(size=(num_classes, dim)) * 2
    labels = rng.integers(0, num_classes, size=n * num_classes)
    x = means[labels] + rng.normal(size=(len(labels), dim)) @ a.T
    return x, labels


def test_lda_solves_the_generalised_eigenproblem():
    rng = np.random.default_rng(0)
    x, labels = _classes(rng)
    num_classes, dim = 6, x.shape[1]
    stats = lda.LdaEstimate(num_classes, dim)
    half = len(x) // 2
    stats.accumulate(x[:half], labels[:half])
    other = lda.LdaEstimate(num_classes, dim)
    other.accumulate(x[half:], labels[half:])
    stats.add(other)                            # two jobs' accs summed, as est-lda sums them
    m, full = stats.estimate(dim=3)
    # An independent restatement: scatter of the raw frames about their class means, and of
    # the class means about the global mean, each per frame; B v = lambda W v with v^T W v = 1.
    mean = x.mean(0)
    within = sum(((x[labels == c] - x[labels == c].mean(0)).T @ (x[labels == c] - x[labels == c].mean(0)))
                 for c in range(num_classes)) / len(x)
    between = sum((labels == c).sum() * np.outer(x[labels == c].mean(0) - mean, x[labels == c].mean(0) - mean)
                  for c in range(num_classes)) / len(x)
    values, vectors = scipy.linalg.eigh(between, within)
    values, ref = values[::-1], vectors[:, ::-1].T
    signs = np.sign(np.sum(full * ref, axis=1))
    np.testing.assert_allclose(full, signs[:, None] * ref, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(full @ within @ full.T, np.eye(dim), atol=1e-8)
    np.testing.assert_allclose(full @ between @ full.T, np.diag(values), atol=1e-8)
    assert np.all(np.diff(np.diag(full @ between @ full.T)) <= 1e-10)        # sorted, largest first
    np.testing.assert_array_equal(m, full[:3])
    # no mean removal by default; --remove-offset appends the column that zeroes the mean
    m_off, _ = stats.estimate(dim=3, remove_offset=True)
    assert m_off.shape == (3, dim + 1)
    np.testing.assert_allclose(m_off[:, :dim], m)
    np.testing.assert_allclose(matrix.apply_transform(x, m_off).mean(0), 0, atol=1e-4)


def test_lda_weights_count_as_repeated_frames():
    rng = np.random.default_rng(1)
    x, labels = _classes(rng, n=100)
    twice = lda.LdaEstimate(6, 5)
    twice.accumulate(np.concatenate([x, x[:50]]), np.concatenate([labels, labels[:50]]))
    weighted = lda.LdaEstimate(6, 5)
    weighted.accumulate(x, labels, np.where(np.arange(len(x)) < 50, 2.0, 1.0))
    np.testing.assert_allclose(weighted.estimate(4)[0], twice.estimate(4)[0], rtol=1e-8, atol=1e-10)


def test_lda_options_and_degenerate_statistics(caplog):
    rng = np.random.default_rng(2)
    x, labels = _classes(rng, num_classes=3, dim=5)
    stats = lda.LdaEstimate(3, 5)
    stats.accumulate(x, labels)
    with pytest.raises(NnetError, match="less than the number of classes 3"):
        stats.estimate(dim=3)
    assert stats.estimate(dim=4, allow_large_dim=True)[0].shape == (4, 5)
    with pytest.raises(NnetError, match="more than the feature dim 5"):
        stats.estimate(dim=6, allow_large_dim=True)
    with pytest.raises(NnetError, match="no data"):
        lda.LdaEstimate(3, 5).estimate(dim=2)
    # a repeated dimension: W is singular; Kaldi's smoothing of its diagonal makes it usable
    dup = lda.LdaEstimate(3, 6)
    dup.accumulate(np.hstack([x, x[:, :1]]), labels)
    log = _Log()
    m, _ = dup.estimate(dim=2, log=log)
    assert np.isfinite(m).all() and any("Cholesky failed" in line for line in log.lines)
    assert any(line.startswith("LDA singular values are [ ") for line in log.lines)
    # constant features have no within-class scatter at all: one line
    const = lda.LdaEstimate(3, 4)
    const.accumulate(np.ones((30, 4)), np.arange(30) % 3)
    with pytest.raises(NnetError, match="within-class covariance .* is singular"):
        const.estimate(dim=2)


class _Log:
    def __init__(self):
        self.lines = []

    def info(self, line):
        self.lines.append(line)

    warning = info


def test_rand_prune_keeps_the_expectation():
    rng = np.random.default_rng(3)
    w = np.full(200000, 0.5)
    pruned = weights.rand_prune(w, 4.0, rng)
    assert set(np.unique(pruned)) == {0.0, 4.0}
    assert pruned.mean() == pytest.approx(0.5, rel=0.03)
    np.testing.assert_array_equal(weights.rand_prune(np.array([5.0, 0.0, 1.0]), 0.0, rng), [5.0, 0.0, 1.0])
    assert weights.rand_prune(np.array([5.0, 0.0]), 4.0, rng).tolist() == [5.0, 0.0]


# --- MLLT -----------------------------------------------------------------------------------

def _rotated_classes(rng, dim=4, num_classes=5, n=2000):
    """Classes whose covariances are diagonal in a rotated basis q (their own variances each)."""
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    means = rng.normal(size=(num_classes, dim)) * 3
    variances = rng.uniform(0.2, 5.0, size=(num_classes, dim))
    x = np.concatenate([means[k] + (rng.normal(size=(n, dim)) * np.sqrt(variances[k])) @ q.T
                        for k in range(num_classes)])
    return x, np.repeat(np.arange(num_classes), n), q


def _diag_loglike(y, labels, logdet):
    """Total log-likelihood of the frames under per-class diagonal Gaussians fitted to y, plus
    the Jacobian of the transform (what MLLT maximises)."""
    total = 0.0
    for k in np.unique(labels):
        v = y[labels == k].var(0)
        total += -0.5 * (labels == k).sum() * (np.log(2 * np.pi * v).sum() + len(v))
    return total + len(y) * logdet


def test_mllt_objective_rises_and_the_transform_undoes_the_rotation():
    rng = np.random.default_rng(4)
    x, labels, q = _rotated_classes(rng)
    dim, num_classes = x.shape[1], 5
    total = np.eye(dim)
    likes = [_diag_loglike(x, labels, 0.0)]
    for _ in range(3):   # Kaldi's MLLT iterations: accumulate on the current features, update, compose
        y = x @ total.T
        means = np.array([y[labels == k].mean(0) for k in range(num_classes)])
        inv_vars = 1 / np.array([y[labels == k].var(0) for k in range(num_classes)])
        accs = mllt.MlltAccs(dim, rand_prune=0.0)
        accs.accumulate_from_posteriors(means, inv_vars, y, np.eye(num_classes)[labels])
        assert accs.beta == pytest.approx(len(x))
        log = _Log()
        result = accs.update(log=log)
        gains = np.diff([0.0] + result.objf_history)
        assert len(gains) == 200 and gains[0] > 0
        assert gains.min() > -1e-9 * abs(result.objf_impr) - 1e-9         # never falls
        # the improvement is that of the auxiliary function, computed independently
        aux = lambda m: len(x) * np.linalg.slogdet(m)[1] - 0.5 * sum(  # noqa: E731
            m[i] @ accs.G[i] @ m[i] for i in range(dim))
        assert result.objf_impr == pytest.approx(aux(result.matrix) - aux(np.eye(dim)), rel=1e-8, abs=1e-6)
        assert log.lines[0].startswith("MLLT objective improvement per frame by 0'th iteration is ")
        assert len(log.lines) == 10 + 19          # passes 0-9, then every 10th, as Kaldi logs them
        total = matrix.compose(result.matrix, total)
        likes.append(_diag_loglike(x @ total.T, labels, np.linalg.slogdet(total)[1]))
    assert all(b >= a - 1e-6 * abs(a) for a, b in zip(likes, likes[1:])) and likes[1] > likes[0] + 100
    undone = total @ q          # features q z in; a scaled permutation of z out
    undone /= np.linalg.norm(undone, axis=1, keepdims=True)
    assert np.abs(undone).max(1).min() > 0.99
    assert sorted(np.abs(undone).argmax(1)) == list(range(dim))


def test_mllt_accumulates_gmm_posteriors_as_the_formula():
    """G_i = sum_t sum_k g_k(t) / var_k[i] (mu_k - x_t)(mu_k - x_t)^T with g the GMM's posteriors."""
    rng = np.random.default_rng(5)
    dim = 3
    w, mu, var = np.array([0.3, 0.7]), rng.normal(size=(2, dim)), rng.uniform(0.5, 2, size=(2, dim))
    g = khg.DiagGmm(nmix=2, dim=dim)
    g.set_weights(w.astype(np.float32))
    g.set_means(mu.astype(np.float32))
    g.set_invvars((1 / var).astype(np.float32))
    g.compute_gconsts()
    x = rng.normal(size=(50, dim)).astype(np.float32)
    frame_w = rng.uniform(0, 1, size=50)
    accs = mllt.MlltAccs(dim, rand_prune=0.0)
    like = accs.accumulate_from_gmm(g, x, frame_w)
    mu, var = np.asarray(g.means, dtype=np.float64), np.asarray(g.vars, dtype=np.float64)
    comp = np.log(w) - 0.5 * (np.log(2 * np.pi * var).sum(1) + (((x[:, None, :] - mu) ** 2) / var).sum(2))
    np.testing.assert_allclose(like, np.logaddexp(comp[:, 0], comp[:, 1]), rtol=1e-4)
    post = np.exp(comp - like[:, None]) * frame_w[:, None]
    want = np.zeros((dim, dim, dim))
    for t in range(50):
        for k in range(2):
            diff = mu[k] - x[t]
            for i in range(dim):
                want[i] += post[t, k] / var[k, i] * np.outer(diff, diff)
    np.testing.assert_allclose(accs.G, want, rtol=1e-4, atol=1e-8)
    assert accs.beta == pytest.approx(frame_w.sum(), rel=1e-5)


def test_mllt_degenerate_statistics():
    with pytest.raises(NnetError, match="no data in the MLLT statistics"):
        mllt.MlltAccs(3).update()
    accs = mllt.MlltAccs(2)
    accs.beta, accs.G[:] = 100.0, np.array([[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(NnetError, match="G matrix of dimension 0 is singular"):
        accs.update()


# --- compose-transforms and the matrix file -------------------------------------------------

@pytest.mark.parametrize("a_affine,b_affine", [(False, False), (True, False), (True, True), (False, True)])
def test_compose_is_applying_b_then_a(a_affine, b_affine):
    rng = np.random.default_rng(6)
    d0, d1, d2 = 5, 4, 3
    b = rng.normal(size=(d1, d0 + b_affine))
    a = rng.normal(size=(d2, d1 + a_affine))
    c = matrix.compose(a, b, b_is_affine=b_affine)
    assert c.shape == (d2, d0 + (a_affine or b_affine))
    x = rng.normal(size=(7, d0)).astype(np.float32)
    np.testing.assert_allclose(matrix.apply_transform(x, c),
                               matrix.apply_transform(matrix.apply_transform(x, b), a), rtol=1e-4, atol=1e-4)
    if not (a_affine or b_affine):
        np.testing.assert_allclose(c, a @ b)


def test_compose_and_apply_reject_mismatched_dims():
    with pytest.raises(NnetError, match="mismatched dimensions, a has 6 columns and b has 4 rows"):
        matrix.compose(np.zeros((3, 6)), np.zeros((4, 4)))
    with pytest.raises(NnetError, match="bad dimension 3x7 versus feat dim 5"):
        matrix.apply_transform(np.zeros((2, 5)), np.zeros((3, 7)))


def test_matrix_file_round_trips_through_kaldi(tmp_path):
    m = np.random.default_rng(7).normal(size=(3, 5))
    matrix.write_matrix(str(tmp_path / "b.mat"), m)
    assert (tmp_path / "b.mat").read_bytes()[:5] == b"\0BFM "          # Kaldi's binary float matrix
    np.testing.assert_array_equal(kaldi_native_io.FloatMatrix.read(str(tmp_path / "b.mat")).numpy(),
                                  m.astype(np.float32))
    matrix.write_matrix(str(tmp_path / "t.mat"), m, binary=False)
    np.testing.assert_array_equal(kaldi_native_io.FloatMatrix.read(str(tmp_path / "t.mat")).numpy(),
                                  m.astype(np.float32))
    # and what Kaldi writes is read back: float and double, binary and text
    for cls, dtype in ((kaldi_native_io.FloatMatrix, np.float32), (kaldi_native_io.DoubleMatrix, np.float64)):
        for binary in (True, False):
            path = str(tmp_path / f"k.{dtype.__name__}.{binary}.mat")
            cls(m.astype(dtype)).write(path, binary=binary)
            # binary: exact; Kaldi's text matrices have 7 significant digits
            np.testing.assert_allclose(matrix.read_matrix(path), m.astype(dtype), rtol=0 if binary else 1e-6)
    (tmp_path / "bad.mat").write_text("[ 1 2\n 3 ]\n")
    with pytest.raises(NnetError, match="bad.mat"):
        matrix.read_matrix(str(tmp_path / "bad.mat"))


# --- the programs ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A monophone model of 6-dim features; utterances whose frames follow random alignments,
    each pdf with its own mean; a feats key without an alignment."""
    d = tmp_path_factory.mktemp("lda")
    model = mono_model(d / "lang")
    gmm.save(model, str(d / "0.mdl"))
    rng = np.random.default_rng(8)
    tid2pdf = model.tid2pdf()
    pdf_means = rng.normal(size=(model.num_pdfs, 6)) * 2
    alis, feats = {}, {}
    for u in range(12):
        ali = rng.integers(1, model.tm.num_transition_ids + 1, size=int(rng.integers(80, 120)))
        alis[f"u{u}"] = ali
        feats[f"u{u}"] = (pdf_means[tid2pdf[ali]] + rng.normal(size=(len(ali), 6))).astype(np.float32)
    feats["noali"] = rng.normal(size=(30, 6)).astype(np.float32)
    with tables.MatrixWriter(f"ark:{d}/feats.ark") as w:
        for k, v in feats.items():
            w.write(k, v)
    with tables.IntVectorWriter(f"ark:{d}/ali.ark") as w:
        for k, v in alis.items():
            w.write(k, v.astype(np.int32))
    return d, model, feats, alis


def test_lda_mllt_programs(data, tmp_path):
    d, model, feats, alis = data
    r = run("nnet-splice-feats", "--left-context", "1", "--right-context", "1", f"ark:{d}/feats.ark",
            f"ark:{tmp_path}/spliced.ark", check=True)
    spliced = dict(tables.read_matrices(f"ark:{tmp_path}/spliced.ark"))
    np.testing.assert_array_equal(spliced["u3"], splice.splice_frames(feats["u3"], 1, 1))
    r = run("nnet-acc-lda", d / "0.mdl", f"ark:{tmp_path}/spliced.ark", f"ark:{d}/ali.ark", tmp_path / "lda.acc",
            check=True)
    assert "No alignment for utterance noali" in r.stderr and "Done 12 files, failed for 1" in r.stderr
    r = run("nnet-est-lda", "--dim", "10", "--write-full-matrix", tmp_path / "full.mat", tmp_path / "0.mat",
            tmp_path / "lda.acc", check=True)
    assert "LDA singular values are [ " in r.stderr and "Data count is " in r.stderr
    # what the library gives from the same frames
    stats = lda.LdaEstimate(model.num_pdfs, 18)
    for u, ali in alis.items():
        stats.accumulate(spliced[u], model.tid2pdf()[ali])
    want, want_full = stats.estimate(10)
    m = kaldi_native_io.FloatMatrix.read(str(tmp_path / "0.mat")).numpy()
    np.testing.assert_allclose(m, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(matrix.read_matrix(str(tmp_path / "full.mat")), want_full, rtol=1e-4, atol=1e-5)
    run("nnet-transform-feats", tmp_path / "0.mat", f"ark:{tmp_path}/spliced.ark", f"ark:{tmp_path}/lda.ark",
        check=True)
    out = dict(tables.read_matrices(f"ark:{tmp_path}/lda.ark"))
    np.testing.assert_allclose(out["u3"], spliced["u3"] @ m.T, rtol=1e-4, atol=1e-4)
    # MLLT on the model's own features: the accs, the update, the composition
    sil = ":".join(str(p) for p in range(1, 6))
    r = run("nnet-gmm-acc-mllt", "--rand-prune", "0", d / "0.mdl", f"ark:{d}/feats.ark", f"ark:{d}/ali.ark",
            tmp_path / "a.macc", check=True)
    assert "Done 12 files, 1 with no alignments, 0 with other errors." in r.stderr
    assert "Overall avg like per frame (Gaussian only) = " in r.stderr
    run("nnet-gmm-acc-mllt", "--silence-phones", sil, d / "0.mdl", f"ark:{d}/feats.ark", f"ark:{d}/ali.ark",
        tmp_path / "b.macc", check=True)
    assert mllt.MlltAccs.load(str(tmp_path / "b.macc")).beta < mllt.MlltAccs.load(str(tmp_path / "a.macc")).beta
    r = run("nnet-est-mllt", tmp_path / "1.mat.new", tmp_path / "a.macc", check=True)
    assert "Overall objective function improvement for MLLT is " in r.stderr and ", logdet is " in r.stderr
    new = matrix.read_matrix(str(tmp_path / "1.mat.new"))
    assert new.shape == (6, 6)
    run("nnet-compose-transforms", tmp_path / "1.mat.new", tmp_path / "1.mat.new", tmp_path / "2.mat", check=True)
    np.testing.assert_allclose(matrix.read_matrix(str(tmp_path / "2.mat")), new @ new, rtol=1e-4, atol=1e-5)


def test_programs_fail_in_one_line(data, tmp_path):
    d, model, feats, alis = data
    matrix.write_matrix(str(tmp_path / "40.mat"), np.eye(40))
    line = error_line(run("nnet-transform-feats", tmp_path / "40.mat", f"ark:{d}/feats.ark", f"ark:{tmp_path}/o.ark"))
    assert "40.mat: utterance 'u0'" in line and "bad dimension 40x40 versus feat dim 6" in line
    assert not (tmp_path / "o.ark").exists()
    matrix.write_matrix(str(tmp_path / "a.mat"), np.ones((3, 5)))
    line = error_line(run("nnet-compose-transforms", tmp_path / "a.mat", tmp_path / "40.mat", tmp_path / "c.mat"))
    assert "mismatched dimensions, a has 5 columns and b has 40 rows" in line and not (tmp_path / "c.mat").exists()
    # constant features: the LDA's within-class scatter is singular
    with tables.MatrixWriter(f"ark:{tmp_path}/const.ark") as w:
        for u, ali in alis.items():
            w.write(u, np.ones((len(ali), 6), dtype=np.float32))
    run("nnet-acc-lda", d / "0.mdl", f"ark:{tmp_path}/const.ark", f"ark:{d}/ali.ark", tmp_path / "c.acc", check=True)
    line = error_line(run("nnet-est-lda", "--dim", "4", tmp_path / "c.mat", tmp_path / "c.acc"))
    assert "within-class covariance of the LDA statistics is singular" in line
    # every frame silence: no MLLT statistics
    phones = ":".join(str(p) for p in range(1, 200))
    run("nnet-gmm-acc-mllt", "--silence-phones", phones, d / "0.mdl", f"ark:{d}/feats.ark", f"ark:{d}/ali.ark",
        tmp_path / "e.macc", check=True)
    line = error_line(run("nnet-est-mllt", tmp_path / "e.mat", tmp_path / "e.macc"))
    assert "no data in the MLLT statistics (count 0)" in line
    # features of another dim than the model's
    line = error_line(run("nnet-gmm-acc-mllt", d / "0.mdl", f"ark:{tmp_path}/spliced_missing.ark",
                          f"ark:{d}/ali.ark", tmp_path / "f.macc"))
    assert "spliced_missing.ark" in line
    with tables.MatrixWriter(f"ark:{tmp_path}/wide.ark") as w:
        w.write("u0", np.zeros((len(alis["u0"]), 7), dtype=np.float32))
    line = error_line(run("nnet-gmm-acc-mllt", d / "0.mdl", f"ark:{tmp_path}/wide.ark", f"ark:{d}/ali.ark",
                          tmp_path / "f.macc"))
    assert "utt 'u0': feature dim 7 does not match the model's 6" in line
    # accs of different dims are not summed
    acc7 = lda.LdaEstimate(model.num_pdfs, 7)
    acc7.accumulate(np.zeros((1, 7)), [0])
    acc7.save(str(tmp_path / "7.acc"))
    line = error_line(run("nnet-est-lda", "--dim", "3", tmp_path / "x.mat", tmp_path / "c.acc", tmp_path / "7.acc"))
    assert "7.acc" in line and "dimension or classes count mismatch" in line
