"""fMLLR (Kaldi's gmm-est-fmllr, tri3 speaker-adaptive training): the estimate undoes a known
affine distortion of a speaker's features, its auxiliary function rises every pass and equals
the likelihood gain, the statistics are Kaldi's formula over the GMM's posteriors, the unit
transform below --fmllr-min-count, the per-speaker table that nnet-transform-feats --utt2spk
reads, composition on tables (nnet-compose-transforms ark:new ark:old ark:out), and the
programs' failures as one line."""
import numpy as np
import pytest

pytest.importorskip("kaldi_hmm_gmm", reason="speech extra not installed (pip install -e '.[speech]')")
import kaldi_hmm_gmm as khg  # noqa: E402  (before anything that imports kaldifst)

from helpers import error_line, mono_model, run  # noqa: E402
from nnet_tools.data import tables  # noqa: E402
from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.models import gmm  # noqa: E402
from nnet_tools.speech.transforms import fmllr, matrix, weights  # noqa: E402


class _Log:
    def __init__(self):
        self.lines = []

    def info(self, line):
        self.lines.append(("LOG", line))

    def warning(self, line):
        self.lines.append(("WARNING", line))

    def text(self):
        return "\n".join(f"{level} {line}" for level, line in self.lines)


def _distortion(rng, dim, scale=0.3):
    """A well-conditioned affine speaker distortion x = A z + b."""
    return np.eye(dim) + scale * rng.normal(size=(dim, dim)), rng.normal(size=dim)


def _gauss_loglike(y, mu, var):
    """Per-frame log N(y_t; mu_t, diag var_t) (rows of mu, var per frame)."""
    return -0.5 * (np.log(2 * np.pi * var).sum(1) + (((y - mu) ** 2) / var).sum(1))


def _classes(rng, dim=5, num_classes=8, n=6000):
    mu = rng.normal(size=(num_classes, dim)) * 3
    var = rng.uniform(0.3, 2.0, size=(num_classes, dim))
    labels = rng.integers(0, num_classes, size=n)
    z = mu[labels] + rng.normal(size=(n, dim)) * np.sqrt(var[labels])
    return mu, var, labels, z


# --- the library ----------------------------------------------------------------------------

def test_fmllr_undoes_a_known_speaker_distortion():
    rng = np.random.default_rng(0)
    mu, var, labels, z = _classes(rng)
    dim = z.shape[1]
    a, b = _distortion(rng, dim)
    x = z @ a.T + b
    accs = fmllr.FmllrAccs(dim)
    half = len(x) // 2          # two jobs' worth of statistics, summed
    accs.accumulate_from_posteriors(mu, 1 / var, x[:half], np.eye(len(mu))[labels[:half]])
    other = fmllr.FmllrAccs(dim)
    other.accumulate_from_posteriors(mu, 1 / var, x[half:], np.eye(len(mu))[labels[half:]])
    accs.add(other)
    assert accs.beta == pytest.approx(len(x))
    result = accs.estimate()
    assert result.updated and result.matrix.shape == (dim, dim + 1)
    inv = np.linalg.inv(a)
    np.testing.assert_allclose(result.matrix, np.hstack([inv, -(inv @ b)[:, None]]), atol=0.05)
    # the adapted features' likelihood is the undistorted data's; unadapted, far lower
    y = matrix.apply_transform(x, result.matrix).astype(np.float64)
    clean = _gauss_loglike(z, mu[labels], var[labels]).mean()
    adapted = _gauss_loglike(y, mu[labels], var[labels]).mean()
    distorted = _gauss_loglike(x, mu[labels], var[labels]).mean()
    assert abs(adapted - clean) < 0.03 and distorted < clean - 1.0
    # with the Jacobian, the density of x: the ML transform's is at least the true inverse's, and barely more
    logdet = np.linalg.slogdet(result.matrix[:, :dim])[1]
    truth = clean - np.linalg.slogdet(a)[1]
    assert 0 <= adapted + logdet - truth < 0.01
    # the auxiliary function's rise is exactly the data likelihood's, log N(W x+) + log|det A| (posteriors fixed)
    assert result.objf_impr / result.count == pytest.approx(adapted + logdet - distorted, rel=1e-4)


def test_auxiliary_function_rises_every_pass_on_gmm_posteriors():
    rng = np.random.default_rng(1)
    dim = 4
    g = khg.DiagGmm(nmix=3, dim=dim)
    g.set_weights(np.array([0.2, 0.3, 0.5], dtype=np.float32))
    g.set_means((rng.normal(size=(3, dim)) * 2).astype(np.float32))
    g.set_invvars((1 / rng.uniform(0.5, 2, size=(3, dim))).astype(np.float32))
    g.compute_gconsts()
    a, b = _distortion(rng, dim, 0.4)
    x = (rng.normal(size=(3000, dim)) * 1.5) @ a.T + b
    accs = fmllr.FmllrAccs(dim)
    like = accs.accumulate_from_gmm(g, x, np.ones(len(x)))
    assert like.shape == (3000,) and np.isfinite(like).all()
    log = _Log()
    result = accs.estimate(num_iters=40, log=log)
    h = np.array(result.objf_history)
    assert len(h) == 41 and h[1] > h[0]
    assert np.diff(h).min() >= -1e-9 * abs(h).max()                      # never falls
    assert result.objf_impr == pytest.approx(h[-1] - h[0])
    assert result.objf_impr == pytest.approx(accs.objective(result.matrix) - accs.objective(fmllr.unit_transform(dim)))
    assert fmllr.estimate(accs, num_iters=3).objf_impr <= result.objf_impr + 1e-9
    assert log.lines == [("LOG", f"fMLLR objf improvement is {result.objf_impr / result.count:.6g} per frame over "
                                 f"{result.count:g} frames.")]


def test_statistics_are_kaldis_formula_over_the_gmm_posteriors():
    """beta = sum g, K = sum_t (sum_k g_k mu_k / var_k) x+^T, G_i = sum_t (sum_k g_k / var_k[i]) x+ x+^T,
    with g the GMM's posteriors scaled by the frame weight."""
    rng = np.random.default_rng(2)
    dim = 3
    w, mu, var = np.array([0.4, 0.6]), rng.normal(size=(2, dim)), rng.uniform(0.5, 2, size=(2, dim))
    g = khg.DiagGmm(nmix=2, dim=dim)
    g.set_weights(w.astype(np.float32))
    g.set_means(mu.astype(np.float32))
    g.set_invvars((1 / var).astype(np.float32))
    g.compute_gconsts()
    x = rng.normal(size=(40, dim)).astype(np.float32)
    frame_w = rng.uniform(0, 1, size=40)
    frame_w[:5] = 0.0
    accs = fmllr.FmllrAccs(dim)
    accs.accumulate_from_gmm(g, x, frame_w)
    mu, var = np.asarray(g.means, dtype=np.float64), np.asarray(g.vars, dtype=np.float64)
    comp = np.log(w) - 0.5 * (np.log(2 * np.pi * var).sum(1) + (((x[:, None, :] - mu) ** 2) / var).sum(2))
    post = np.exp(comp - np.logaddexp(comp[:, 0], comp[:, 1])[:, None]) * frame_w[:, None]
    K, G = np.zeros((dim, dim + 1)), np.zeros((dim, dim + 1, dim + 1))
    for t in range(40):
        xp = np.append(x[t], 1.0)
        for k in range(2):
            K += post[t, k] * np.outer(mu[k] / var[k], xp)
            for i in range(dim):
                G[i] += post[t, k] / var[k, i] * np.outer(xp, xp)
    np.testing.assert_allclose(accs.K, K, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(accs.G, G, rtol=1e-4, atol=1e-8)
    assert accs.beta == pytest.approx(frame_w.sum(), rel=1e-5)
    # from an alignment: each frame within its own pdf's GMM, weighted (weight-silence-post 0.5 here)
    other = khg.DiagGmm(nmix=1, dim=dim)
    other.set_weights(np.ones(1, dtype=np.float32))
    other.set_means(np.ones((1, dim), dtype=np.float32))
    other.set_invvars(np.full((1, dim), 2.0, dtype=np.float32))
    other.compute_gconsts()
    model = _FakeModel([other, g])
    pdfs = np.arange(40) % 2
    aligned = fmllr.FmllrAccs(dim)
    aligned.accumulate(model, x, pdfs, frame_w * 0.5)
    want = fmllr.FmllrAccs(dim)
    for p, pdf in enumerate(model.am.pdfs):
        want.accumulate_from_gmm(pdf, x[pdfs == p], frame_w[pdfs == p] * 0.5)
    np.testing.assert_allclose(aligned.G, want.G, rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(aligned.K, want.K, rtol=1e-6, atol=1e-10)
    assert aligned.beta == pytest.approx(0.5 * frame_w.sum(), rel=1e-5)


class _FakeModel:
    """What FmllrAccs.accumulate uses of a gmm.Model: its dim and its pdfs' DiagGmms."""

    def __init__(self, pdfs):
        self.dim = pdfs[0].dim
        self.am = self
        self.pdfs = pdfs

    def get_pdf(self, p):
        return self.pdfs[p]


def test_unit_transform_below_min_count_and_the_other_update_types():
    rng = np.random.default_rng(3)
    mu, var, labels, z = _classes(rng, dim=4, n=1000)
    a, b = _distortion(rng, 4)
    x = z @ a.T + b
    posts = np.eye(len(mu))[labels]
    accs = fmllr.FmllrAccs(4)
    accs.accumulate_from_posteriors(mu, 1 / var, x[:400], posts[:400])
    log = _Log()
    result = accs.estimate(log=log)                 # 400 frames, min-count 500
    np.testing.assert_array_equal(result.matrix, np.hstack([np.eye(4), np.zeros((4, 1))]))
    assert (result.objf_impr, result.count, result.updated) == (0.0, 400.0, False)
    assert log.lines == [("WARNING", "Not updating fMLLR since below min-count: count is 400")]
    assert accs.estimate(min_count=399).updated
    # Kaldi updates only above the count: exactly 500 frames keeps the unit transform
    accs.accumulate_from_posteriors(mu, 1 / var, x[400:500], posts[400:500])
    assert not accs.estimate(log=_Log()).updated
    accs.accumulate_from_posteriors(mu, 1 / var, x[500:], posts[500:])
    full = accs.estimate()
    diag, offset, none = (accs.estimate(update_type=t) for t in ("diag", "offset", "none"))
    assert not none.updated and none.objf_impr == 0.0
    assert full.objf_impr >= diag.objf_impr >= offset.objf_impr > 0        # nested families of transforms
    np.testing.assert_array_equal(diag.matrix[:, :4], np.diag(np.diag(diag.matrix[:, :4])))
    np.testing.assert_array_equal(offset.matrix[:, :4], np.eye(4))
    assert np.abs(offset.matrix[:, 4]).max() > 0.1
    # each is the maximum over its free entries: a small step along any of them lowers the function
    free = {"full": [(i, j) for i in range(4) for j in range(5)], "diag": [(i, j) for i in range(4) for j in (i, 4)],
            "offset": [(i, 4) for i in range(4)]}
    for name, result in (("full", full), ("diag", diag), ("offset", offset)):
        best = accs.objective(result.matrix)
        for i, j in free[name]:
            for step in (1e-3, -1e-3):
                moved = result.matrix.copy()
                moved[i, j] += step
                assert accs.objective(moved) < best, (name, i, j, step)
    with pytest.raises(NnetError, match="Unknown fMLLR update type bogus"):
        accs.estimate(update_type="bogus")


def test_singular_statistics_are_one_line():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(800, 3))
    x[:, 1] = 2.0                                  # a constant feature dimension
    accs = fmllr.FmllrAccs(3)
    accs.accumulate_from_posteriors(np.zeros((1, 3)), np.ones((1, 3)), x, np.ones((800, 1)))
    with pytest.raises(NnetError, match="G matrix of row 0 is singular"):
        accs.estimate()


def test_compose_tables_is_applying_old_then_new(tmp_path):
    rng = np.random.default_rng(5)
    dim = 3
    old = {s: np.hstack([np.eye(dim) + 0.2 * rng.normal(size=(dim, dim)), rng.normal(size=(dim, 1))]) for s in "ab"}
    new = {s: np.hstack([np.eye(dim) + 0.2 * rng.normal(size=(dim, dim)), rng.normal(size=(dim, 1))]) for s in "abc"}
    for name, table in (("old", old), ("new", new)):
        with tables.MatrixWriter(f"ark:{tmp_path}/{name}.ark") as w:
            for k, v in table.items():
                w.write(k, v)
    log = _Log()
    assert fmllr.compose_tables(f"ark:{tmp_path}/new.ark", f"ark:{tmp_path}/old.ark", f"ark:{tmp_path}/c.ark",
                                b_is_affine=True, log=log) == 2
    assert ("WARNING", "Second table does not have key c") in log.lines
    out = dict(tables.read_matrices(f"ark:{tmp_path}/c.ark"))
    assert list(out) == ["a", "b"]
    x = rng.normal(size=(20, dim)).astype(np.float32)
    for s in "ab":
        np.testing.assert_allclose(matrix.apply_transform(x, out[s]),
                                   matrix.apply_transform(matrix.apply_transform(x, old[s]), new[s]), atol=1e-4)
    # per-utterance A with per-speaker B; a global B (an LDA+MLLT file) under every entry
    (tmp_path / "utt2spk").write_text("u1 a\nu2 b\nu3 a\n")
    with tables.MatrixWriter(f"ark:{tmp_path}/utt.ark") as w:
        for u in ("u1", "u2", "u3"):
            w.write(u, new["c"])
    fmllr.compose_tables(f"ark:{tmp_path}/utt.ark", f"ark:{tmp_path}/old.ark", f"ark:{tmp_path}/u.ark",
                         b_is_affine=True, utt2spk=str(tmp_path / "utt2spk"), log=_Log())
    per_utt = dict(tables.read_matrices(f"ark:{tmp_path}/u.ark"))
    np.testing.assert_allclose(per_utt["u3"], matrix.compose(new["c"], old["a"], True), atol=1e-5)
    np.testing.assert_allclose(per_utt["u2"], matrix.compose(new["c"], old["b"], True), atol=1e-5)
    lda = rng.normal(size=(dim, 5))
    matrix.write_matrix(str(tmp_path / "lda.mat"), lda)
    fmllr.compose_tables(f"ark:{tmp_path}/old.ark", str(tmp_path / "lda.mat"), f"ark:{tmp_path}/l.ark", log=_Log())
    np.testing.assert_allclose(dict(tables.read_matrices(f"ark:{tmp_path}/l.ark"))["b"],
                               matrix.compose(old["b"], lda), rtol=1e-4, atol=1e-5)
    with pytest.raises(NnetError, match="do not match: .*c.mat must be a wspecifier"):
        fmllr.compose_tables(f"ark:{tmp_path}/new.ark", f"ark:{tmp_path}/old.ark", str(tmp_path / "c.mat"))
    matrix.write_matrix(str(tmp_path / "wide.mat"), rng.normal(size=(5, 5)))
    with pytest.raises(NnetError, match="key 'a': compose-transforms: mismatched dimensions"):
        fmllr.compose_tables(f"ark:{tmp_path}/new.ark", str(tmp_path / "wide.mat"), f"ark:{tmp_path}/bad.ark")
    assert not (tmp_path / "bad.ark").exists()


# --- the programs ---------------------------------------------------------------------------

DIM = 6


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A monophone model of 6-dim features, one Gaussian of its own per pdf; speakers s1, s2
    with their own affine distortion (4 utterances of 200 frames), s3 with one utterance (below
    the min-count), s4 without alignments; u1c has features but no alignment."""
    d = tmp_path_factory.mktemp("fmllr")
    base = mono_model(d / "lang")
    rng = np.random.default_rng(6)
    mu = rng.normal(size=(base.num_pdfs, DIM)) * 3
    var = rng.uniform(0.5, 2.0, size=(base.num_pdfs, DIM))
    am = khg.AmDiagGmm()
    for p in range(base.num_pdfs):
        g = khg.DiagGmm(nmix=1, dim=DIM)
        g.set_weights(np.ones(1, dtype=np.float32))
        g.set_means(mu[p:p + 1].astype(np.float32))
        g.set_invvars((1 / var[p:p + 1]).astype(np.float32))
        g.compute_gconsts()
        am.add_pdf(g)
    model = gmm.Model(base.topo_text, base.tm, am)
    gmm.save(model, str(d / "final.mdl"))
    tid2pdf = model.tid2pdf()
    utts = {"s1": ["u1a", "u1b", "u1c", "u1d", "u1e"], "s2": ["u2a", "u2b", "u2c", "u2d"], "s3": ["u3a"],
            "s4": ["u4a", "u4b"]}
    distortion = {s: _distortion(rng, DIM) for s in utts}
    alis, clean, feats = {}, {}, {}
    for s, us in utts.items():
        a, b = distortion[s]
        for u in us:
            ali = rng.integers(1, model.tm.num_transition_ids + 1, size=100 if s == "s3" else 200)
            pdf = tid2pdf[ali]
            z = mu[pdf] + rng.normal(size=(len(ali), DIM)) * np.sqrt(var[pdf])
            clean[u], feats[u] = z, (z @ a.T + b).astype(np.float32)
            if s != "s4" and u != "u1c":
                alis[u] = ali.astype(np.int32)
    with tables.MatrixWriter(f"ark:{d}/feats.ark") as w:
        for k, v in feats.items():
            w.write(k, v)
    with tables.IntVectorWriter(f"ark:{d}/ali.ark") as w:
        for k, v in alis.items():
            w.write(k, v)
    (d / "spk2utt").write_text("".join(f"{s} {' '.join(us)}\n" for s, us in utts.items()))
    (d / "utt2spk").write_text("".join(f"{u} {s}\n" for s, us in utts.items() for u in us))
    return d, model, utts, alis, clean, feats, (mu, var)


def _aligned_loglike(model_params, tid2pdf, alis, frames, utts):
    mu, var = model_params
    pdf = np.concatenate([tid2pdf[alis[u]] for u in utts])
    return _gauss_loglike(np.concatenate([frames[u] for u in utts]).astype(np.float64), mu[pdf], var[pdf]).mean()


def test_est_fmllr_per_speaker_then_transform_feats_and_compose(data, tmp_path):
    d, model, utts, alis, clean, feats, params = data
    tid2pdf = model.tid2pdf()
    r = run("nnet-gmm-est-fmllr", "--spk2utt", f"ark:{d}/spk2utt", d / "final.mdl", f"ark:{d}/feats.ark",
            f"ark:{d}/ali.ark", f"ark:{tmp_path}/trans.1", check=True)
    err = r.stderr
    assert "Did not find alignment for utterance u1c" in err
    assert "No alignment for any utterance of speaker s4; writing the unit transform [I 0]" in err
    assert "Not updating fMLLR since below min-count: count is 100" in err
    assert "For speaker s1, auxf-impr from fMLLR is " in err and ", over 800 frames." in err
    assert "fMLLR objf improvement is " in err and " per frame over 800 frames." in err
    assert "Done 9 files, 3 with no alignments, 0 with other errors." in err
    assert "Done 4 speakers: 2 transforms updated, 1 speakers without any aligned utterance." in err
    assert "Overall fMLLR auxf impr per frame is " in err and " over 1700 frames." in err
    trans = dict(tables.read_matrices(f"ark:{tmp_path}/trans.1"))
    assert list(trans) == ["s1", "s2", "s3", "s4"]
    for s in ("s3", "s4"):
        np.testing.assert_array_equal(trans[s], fmllr.unit_transform(DIM))
    # what the library gives from the same frames
    accs = fmllr.FmllrAccs(DIM)
    for u in ("u1a", "u1b", "u1d", "u1e"):
        accs.accumulate(model, feats[u], tid2pdf[alis[u]], np.ones(len(feats[u])))
    np.testing.assert_allclose(trans["s1"], accs.estimate(log=_Log()).matrix, rtol=1e-4, atol=1e-4)
    # the per-speaker table as nnet-transform-feats --utt2spk reads it (Kaldi's transform-feats)
    run("nnet-transform-feats", "--utt2spk", f"ark:{d}/utt2spk", f"ark:{tmp_path}/trans.1", f"ark:{d}/feats.ark",
        f"ark:{tmp_path}/adapted.ark", check=True)
    adapted = dict(tables.read_matrices(f"ark:{tmp_path}/adapted.ark"))
    np.testing.assert_allclose(adapted["u2b"], matrix.apply_transform(feats["u2b"], trans["s2"]), atol=1e-5)
    for s in ("s1", "s2"):
        aligned = [u for u in utts[s] if u in alis]
        logdet = np.linalg.slogdet(trans[s][:, :DIM].astype(np.float64))[1]
        before = _aligned_loglike(params, tid2pdf, alis, feats, aligned)
        after = _aligned_loglike(params, tid2pdf, alis, adapted, aligned)
        want = _aligned_loglike(params, tid2pdf, alis, clean, aligned)
        assert abs(after - want) < 0.1 and after + logdet > before + 1.0, (s, before, after, want)
    # train_sat's later fmllr_iters: estimate on the adapted features, compose onto the old table
    r = run("nnet-gmm-est-fmllr", "--spk2utt", f"ark:{d}/spk2utt", d / "final.mdl", f"ark:{tmp_path}/adapted.ark",
            f"ark:{d}/ali.ark", f"ark:{tmp_path}/tmp_trans.1", check=True)
    assert "Done 9 files, 3 with no alignments, 0 with other errors." in r.stderr
    tmp = dict(tables.read_matrices(f"ark:{tmp_path}/tmp_trans.1"))
    np.testing.assert_allclose(tmp["s1"], fmllr.unit_transform(DIM), atol=2e-3)   # already the ML transform
    r = run("nnet-compose-transforms", "--b-is-affine", "true", f"ark:{tmp_path}/tmp_trans.1",
            f"ark:{tmp_path}/trans.1", f"ark:{tmp_path}/composed.1", check=True)
    composed = dict(tables.read_matrices(f"ark:{tmp_path}/composed.1"))
    assert list(composed) == ["s1", "s2", "s3", "s4"]
    assert "Second table does not have key" not in r.stderr
    for s in ("s1", "s2"):
        np.testing.assert_allclose(composed[s], tmp[s] @ np.vstack([trans[s], np.eye(DIM + 1)[-1]]), atol=1e-5)
        u = utts[s][0]
        np.testing.assert_allclose(matrix.apply_transform(feats[u], composed[s]),
                                   matrix.apply_transform(adapted[u], tmp[s]), atol=1e-3)


def test_est_fmllr_per_utterance_and_silence_weight(data, tmp_path):
    d, model, utts, alis, clean, feats, params = data
    sil_frames = int(np.isin(weights.tid_to_phone(model)[alis["u2a"]], [1]).sum())
    assert 0 < sil_frames < 200
    r = run("nnet-gmm-est-fmllr", "--fmllr-min-count", "100", "--silence-phones", "1", "--silence-weight", "0.0",
            d / "final.mdl", f"ark:{d}/feats.ark", f"ark:{d}/ali.ark", f"ark,t:{tmp_path}/trans.txt", check=True)
    assert "For utterance u2a, auxf-impr from fMLLR is " in r.stderr
    assert f"over {200 - sil_frames:g} frames." in r.stderr
    trans = dict(tables.read_matrices(f"ark:{tmp_path}/trans.txt"))
    assert set(trans) == set(alis)                          # per utterance: the aligned ones
    assert not np.allclose(trans["u2a"], fmllr.unit_transform(DIM), atol=1e-2)


def test_est_fmllr_from_posteriors(data, tmp_path):
    """--posteriors (lattice-to-post's table): weight-1 posteriors on the alignment give the
    alignment's transforms; a frame shared by two transition-ids counts for each by its weight."""
    d, model, utts, alis, clean, feats, params = data
    rng = np.random.default_rng(1)
    other = {u: rng.integers(1, model.tm.num_transition_ids + 1, size=len(a)) for u, a in alis.items()}
    for name, post in (("one", lambda u, t: [(int(alis[u][t]), 1.0)]),
                       ("split", lambda u, t: [(int(alis[u][t]), 0.7), (int(other[u][t]), 0.3)])):
        with tables.PosteriorWriter(f"ark:{tmp_path}/{name}.post") as w:
            for u in alis:
                w.write(u, [post(u, t) for t in range(len(alis[u]))])
    common = ["--spk2utt", f"ark:{d}/spk2utt", d / "final.mdl", f"ark:{d}/feats.ark"]
    run("nnet-gmm-est-fmllr", *common, f"ark:{d}/ali.ark", f"ark:{tmp_path}/ali.trans", check=True)
    for name in ("one", "split"):
        r = run("nnet-gmm-est-fmllr", "--posteriors", *common, f"ark:{tmp_path}/{name}.post",
                f"ark:{tmp_path}/{name}.trans", check=True)
        assert "Done 9 files, 3 with no alignments, 0 with other errors." in r.stderr
    by_ali, one, split = (dict(tables.read_matrices(f"ark:{tmp_path}/{n}.trans")) for n in ("ali", "one", "split"))
    for s in ("s1", "s2"):
        np.testing.assert_allclose(one[s], by_ali[s], atol=1e-6)
    tid2pdf = model.tid2pdf()
    accs = fmllr.FmllrAccs(DIM)
    for u in ("u1a", "u1b", "u1d", "u1e"):
        x = np.concatenate([feats[u], feats[u]])
        accs.accumulate(model, x, tid2pdf[np.concatenate([alis[u], other[u]])],
                        np.repeat([0.7, 0.3], len(feats[u])))
    np.testing.assert_allclose(split["s1"], accs.estimate(log=_Log()).matrix, rtol=1e-4, atol=1e-4)
    assert not np.allclose(split["s1"], one["s1"], atol=1e-3)
    with tables.PosteriorWriter(f"ark:{tmp_path}/short.post") as w:
        w.write("u1a", [[(1, 1.0)]] * 10)
    r = run("nnet-gmm-est-fmllr", "--posteriors", d / "final.mdl", f"ark:{d}/feats.ark", f"ark:{tmp_path}/short.post",
            f"ark:{tmp_path}/short.trans")
    assert "Posterior has wrong size 10 vs. 200 for utterance u1a" in r.stderr


def _two_gauss_model(base, rng, mu, var):
    """``base``'s topology and transitions with two Gaussians per pdf around the means ``mu``."""
    am = khg.AmDiagGmm()
    for p in range(base.num_pdfs):
        g = khg.DiagGmm(nmix=2, dim=DIM)
        g.set_weights(np.array([0.4, 0.6], dtype=np.float32))
        g.set_means((mu[p] + rng.normal(size=(2, DIM))).astype(np.float32))
        g.set_invvars((1 / np.tile(var[p], (2, 1))).astype(np.float32))
        g.compute_gconsts()
        am.add_pdf(g)
    return gmm.Model(base.topo_text, base.tm, am)


def test_gaussian_posteriors_from_another_model(data):
    """accumulate(gpost_model=ALIMDL) is gmm-post-to-gpost ALIMDL | gmm-est-fmllr-gpost MODEL: the
    Gaussians' posteriors from ALIMDL, the means and variances they weight from MODEL."""
    d, model, utts, alis, clean, feats, (mu, var) = data
    rng = np.random.default_rng(2)
    sat, alimdl = _two_gauss_model(model, rng, mu, var), _two_gauss_model(model, rng, mu, var)
    x, pdfs = feats["u1a"], model.tid2pdf()[alis["u1a"]]
    w = rng.uniform(0.2, 1.0, size=len(x))
    got = fmllr.FmllrAccs(DIM)
    got.accumulate(sat, x, pdfs, w, gpost_model=alimdl)
    want, own = fmllr.FmllrAccs(DIM), fmllr.FmllrAccs(DIM)
    own.accumulate(sat, x, pdfs, w)
    for p in np.unique(pdfs):
        rows = pdfs == p
        posts = fmllr._posteriors(alimdl.am.get_pdf(int(p)), np.ascontiguousarray(x[rows]))[0] * w[rows, None]
        g = sat.am.get_pdf(int(p))
        want.accumulate_from_posteriors(np.asarray(g.means), np.asarray(g.inv_vars), x[rows], posts)
    for field in ("beta", "K", "G"):
        np.testing.assert_allclose(getattr(got, field), getattr(want, field), rtol=1e-6, atol=1e-6)
    assert not np.allclose(got.K, own.K, rtol=1e-3)   # the posteriors did come from the other model
    with pytest.raises(NnetError, match="2 Gaussians of dim 6 in the model giving the Gaussian posteriors, 1 of dim 6"):
        fmllr.FmllrAccs(DIM).accumulate(model, x, pdfs, w, gpost_model=alimdl)


def test_programs_fail_in_one_line(data, tmp_path):
    d, model, utts, alis, clean, feats, params = data
    with tables.MatrixWriter(f"ark:{tmp_path}/wide.ark") as w:
        w.write("u1a", np.zeros((200, DIM + 1), dtype=np.float32))
    line = error_line(run("nnet-gmm-est-fmllr", "--spk2utt", f"ark:{d}/spk2utt", d / "final.mdl",
                          f"ark:{tmp_path}/wide.ark", f"ark:{d}/ali.ark", f"ark:{tmp_path}/t.ark"))
    assert "utt 'u1a': feature dim 7 does not match the model's 6" in line
    assert not (tmp_path / "t.ark").exists()
    # no alignment for any utterance of the only speaker: nothing estimated, nothing written
    (tmp_path / "spk2utt").write_text("s4 u4a u4b\n")
    r = run("nnet-gmm-est-fmllr", "--spk2utt", f"ark:{tmp_path}/spk2utt", d / "final.mdl", f"ark:{d}/feats.ark",
            f"ark:{d}/ali.ark", f"ark:{tmp_path}/t.ark")
    line = error_line(r)
    assert "no utterance to estimate fMLLR from: 2 without an alignment in ark:" in line
    assert "No alignment for any utterance of speaker s4" in r.stderr and not (tmp_path / "t.ark").exists()
    line = error_line(run("nnet-gmm-est-fmllr", d / "final.mdl", f"ark:{d}/feats.ark", f"ark:{d}/ali.ark",
                          tmp_path / "trans.1"))
    assert "trans.1: the transforms are a table: give a wspecifier such as ark:trans.1" in line
    line = error_line(run("nnet-gmm-est-fmllr", "--fmllr-update-type", "fancy", d / "final.mdl",
                          f"ark:{d}/feats.ark", f"ark:{d}/ali.ark", f"ark:{tmp_path}/t.ark"))
    assert "Unknown fMLLR update type fancy" in line
    # composing tables of transforms of another dim
    with tables.MatrixWriter(f"ark:{tmp_path}/a.ark") as w:
        w.write("s1", np.ones((DIM, DIM + 1), dtype=np.float32))
    with tables.MatrixWriter(f"ark:{tmp_path}/b.ark") as w:
        w.write("s1", np.ones((DIM + 2, DIM + 3), dtype=np.float32))
    line = error_line(run("nnet-compose-transforms", "--b-is-affine", "true", f"ark:{tmp_path}/a.ark",
                          f"ark:{tmp_path}/b.ark", f"ark:{tmp_path}/c.ark"))
    assert "key 's1': compose-transforms: mismatched dimensions, a has 7 columns and b has 8 rows" in line
    assert not (tmp_path / "c.ark").exists()
