"""Monophone GMM pieces: model files, ML re-estimation from summed stats, alignment failures
counted as Kaldi counts them (out-of-lexicon word, utterance too short), ali-to-pdf."""
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("kaldi_hmm_gmm", reason="speech extra not installed (pip install -e '.[speech]')")

from helpers import REPO, error_line, mono_model, run  # noqa: E402
from nnet_tools.data import tables  # noqa: E402
from nnet_tools.speech.models import estimate, gmm, likelihoods  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("gmm")
    model = mono_model(d / "lang")
    gmm.save(model, str(d / "0.mdl"))
    return d, model


def test_model_file_round_trip(setup):
    d, model = setup
    back = gmm.load(str(d / "0.mdl"))
    x = np.random.default_rng(1).normal(size=(7, 6)).astype(np.float32)
    np.testing.assert_allclose(likelihoods.compute_likes(back, x), likelihoods.compute_likes(model, x), rtol=1e-5)
    assert back.tm.__getstate__()[6] == pytest.approx(model.tm.__getstate__()[6])
    np.testing.assert_array_equal(gmm.load_tid2pdf(str(d / "0.mdl")), model.tid2pdf())


def test_bad_model_file_is_one_line(tmp_path):
    (tmp_path / "x.mdl").write_text("not a model")
    line = error_line(run("nnet-gmm-est", tmp_path / "x.mdl", tmp_path / "a.acc", tmp_path / "y.mdl"))
    assert "x.mdl: not a GMM model file" in line


def test_estimate_is_maximum_likelihood(setup):
    """Stats summed over two 'jobs' re-estimate a single-Gaussian pdf to the data's mean and
    variance, and the transition counts to relative frequencies (Kaldi's MLE with floor 0.01)."""
    d, _ = setup
    model = gmm.load(str(d / "0.mdl"))
    rng = np.random.default_rng(2)
    tids = [t for t in range(1, model.tm.num_transition_ids + 1) if model.tm.transition_id_to_pdf(t) == 0]
    parts = []
    for _ in range(2):
        feats = (rng.normal(size=(400, 6)) * [1, 2, 3, 1, 2, 3] + 5).astype(np.float32)
        ali = rng.choice(tids, size=400, p=[0.7, 0.3] if len(tids) == 2 else None)
        s = estimate.Stats(model)
        estimate.accumulate(model, s, [(feats, ali)])
        parts.append((s, feats, ali))
    total = parts[0][0]
    total.add(parts[1][0])
    x = np.concatenate([p[1] for p in parts]).astype(np.float64)
    estimate.estimate(model, total, min_gaussian_occupancy=3)
    g = model.am.get_pdf(0)
    np.testing.assert_allclose(g.means[0], x.mean(0), rtol=1e-4)
    np.testing.assert_allclose(g.vars[0], x.var(0), rtol=1e-3)
    counts = np.bincount(np.concatenate([p[2] for p in parts]), minlength=model.tm.num_transition_ids + 1)
    log_probs = model.tm.__getstate__()[6]
    np.testing.assert_allclose(np.exp([log_probs[t] for t in tids]), counts[tids] / counts[tids].sum(), rtol=1e-4)


def test_two_feature_streams_posteriors_from_the_first_moments_from_the_second(setup, tmp_path):
    """nnet-gmm-acc-stats-ali --stats-feats (Kaldi's gmm-acc-stats-twofeats, how train_sat.sh
    makes final.alimdl): occupancies and likelihood as from the first stream alone; the moments
    those of the second, here the first shifted by c, so x and x^2 sums move by closed forms.
    Then gmm-est --remove-low-count-gaussians false keeps every Gaussian."""
    d, _ = setup
    model = gmm.load(str(d / "0.mdl"))
    rng = np.random.default_rng(5)
    tids = np.arange(1, model.tm.num_transition_ids + 1)
    stats = stats_of(model, rng.normal(size=(2000, 6)).astype(np.float32), tids, rng)
    estimate.estimate(model, stats, mix_up=3 * model.num_pdfs, min_gaussian_occupancy=3)
    gmm.save(model, str(tmp_path / "m.mdl"))
    feats = rng.normal(size=(300, 6)).astype(np.float32)
    ali = rng.choice(tids, len(feats))
    c = np.array([1.0, -2.0, 0.5, 0.0, 3.0, -1.0], dtype=np.float32)
    with tables.MatrixWriter(f"ark:{tmp_path}/a.ark") as w:
        w.write("u", feats)
    with tables.MatrixWriter(f"ark:{tmp_path}/b.ark") as w:
        w.write("u", feats + c)
    with tables.MatrixWriter(f"ark:{tmp_path}/short.ark") as w:
        w.write("u", feats[:-1] + c)
    with tables.IntVectorWriter(f"ark:{tmp_path}/ali.ark") as w:
        w.write("u", ali)
    one = estimate.Stats(model)
    estimate.accumulate(model, one, [(feats, ali)])
    run("nnet-gmm-acc-stats-ali", "--stats-feats", f"ark:{tmp_path}/b.ark", tmp_path / "m.mdl", f"ark:{tmp_path}/a.ark",
        f"ark:{tmp_path}/ali.ark", tmp_path / "two.acc", check=True)
    two = estimate.Stats.load(str(tmp_path / "two.acc"))
    assert 0 < one.occ.min() < one.occ.max() < len(feats)    # several Gaussians a pdf: real posteriors
    np.testing.assert_allclose(two.occ, one.occ, rtol=1e-6)
    np.testing.assert_array_equal(two.trans, one.trans)
    assert two.tot_like == pytest.approx(one.tot_like, rel=1e-6)
    np.testing.assert_allclose(two.x, one.x + one.occ[:, None] * c, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(two.x2, one.x2 + 2 * c * one.x + one.occ[:, None] * c * c, rtol=1e-4, atol=1e-3)
    r = run("nnet-gmm-est", "--remove-low-count-gaussians", "false", "--min-gaussian-occupancy", "100",
            tmp_path / "m.mdl", tmp_path / "two.acc", tmp_path / "ali.mdl", check=True)
    assert gmm.num_gauss(gmm.load(str(tmp_path / "ali.mdl"))) == gmm.num_gauss(model), r.stderr
    line = error_line(run("nnet-gmm-acc-stats-ali", "--stats-feats", f"ark:{tmp_path}/short.ark", tmp_path / "m.mdl",
                          f"ark:{tmp_path}/a.ark", f"ark:{tmp_path}/ali.ark", tmp_path / "bad.acc"))
    assert "short.ark: utt 'u' has 299 frames of dim 6" in line and not (tmp_path / "bad.acc").exists()


def test_accumulation_in_blocks_equals_one_pass_over_all_frames(setup, tmp_path, monkeypatch):
    """nnet-gmm-acc-stats-ali accumulates blocks of utterances (bounded memory); the stats are
    those of one pass over every frame, whatever the block size."""
    from nnet_tools.cli import gmm_acc_stats_ali as program
    d, _ = setup
    model = gmm.load(str(d / "0.mdl"))
    rng = np.random.default_rng(7)
    tids = np.arange(1, model.tm.num_transition_ids + 1)
    estimate.estimate(model, stats_of(model, rng.normal(size=(2000, 6)).astype(np.float32), tids, rng),
                      mix_up=3 * model.num_pdfs, min_gaussian_occupancy=3)
    gmm.save(model, str(tmp_path / "m.mdl"))
    utts = [(rng.normal(size=(100 + 7 * i, 6)).astype(np.float32), rng.choice(tids, 100 + 7 * i)) for i in range(5)]
    with tables.MatrixWriter(f"ark:{tmp_path}/f.ark") as fw, tables.IntVectorWriter(f"ark:{tmp_path}/a.ark") as aw:
        for i, (feats, ali) in enumerate(utts):
            fw.write(f"u{i}", feats)
            aw.write(f"u{i}", ali)
    one = estimate.Stats(model)
    estimate.accumulate(model, one, utts)
    monkeypatch.setattr(program, "BLOCK_FRAMES", 200)   # blocks of 2, 2 and 1 utterances
    program.main.main(args=[str(tmp_path / "m.mdl"), f"ark:{tmp_path}/f.ark", f"ark:{tmp_path}/a.ark",
                            str(tmp_path / "b.acc")], standalone_mode=False)
    blocks = estimate.Stats.load(str(tmp_path / "b.acc"))
    assert blocks.frames == one.frames == sum(len(f) for f, _ in utts)
    np.testing.assert_array_equal(blocks.trans, one.trans)
    # The binding's log-likelihoods are float32 matrix products: other batches, other roundings.
    np.testing.assert_allclose(blocks.occ, one.occ, rtol=1e-6)
    np.testing.assert_allclose(blocks.x, one.x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(blocks.x2, one.x2, rtol=1e-5)
    assert blocks.tot_like == pytest.approx(one.tot_like, rel=1e-6)


def test_trained_transition_probs_survive_save_and_load(setup, tmp_path):
    """The re-estimated transition probabilities are the ones a loaded model has (load once gave
    the topology's initial ones back, so align, mkgraph and decode used untrained ones)."""
    d, _ = setup
    model = gmm.load(str(d / "0.mdl"))
    initial = model.tm.__getstate__()[6]
    tids = [t for t in range(1, model.tm.num_transition_ids + 1) if model.tm.transition_id_to_pdf(t) == 0]
    rng = np.random.default_rng(4)
    feats = rng.normal(size=(300, 6)).astype(np.float32)
    stats = estimate.Stats(model)
    estimate.accumulate(model, stats, [(feats, rng.choice(tids, size=300, p=[0.9, 0.1] if len(tids) == 2 else None))])
    estimate.estimate(model, stats, min_gaussian_occupancy=3)
    trained = model.tm.__getstate__()[6]
    assert max(abs(a - b) for a, b in zip(trained, initial)) > 0.05
    gmm.save(model, str(tmp_path / "1.mdl"))
    back = gmm.load(str(tmp_path / "1.mdl")).tm
    assert back.log_probs == pytest.approx(trained, abs=1e-6)   # what the C++ code reads
    assert back.non_self_loop_log_probs == pytest.approx(model.tm.non_self_loop_log_probs, abs=1e-6)


def test_align_counts_failures(setup, tmp_path):
    d, _ = setup
    rng = np.random.default_rng(3)
    with tables.MatrixWriter(f"ark:{tmp_path}/feats.ark") as w:
        w.write("good", rng.normal(size=(60, 6)).astype(np.float32))
        w.write("oov", rng.normal(size=(60, 6)).astype(np.float32))
        w.write("short", rng.normal(size=(5, 6)).astype(np.float32))   # 3 words need >= 24 frames
    (tmp_path / "text").write_text("good one two\noov one eleven\nshort one two three\n")
    r = run("nnet-gmm-align", "--equal", d / "0.mdl", d / "lang", f"ark:{tmp_path}/feats.ark", tmp_path / "text",
            f"ark:{tmp_path}/ali.ark", check=True)
    # an OOV word is mapped to oov.txt's word, as Kaldi's sym2int.pl --map-oov, and counted
    assert f"text: 1 word not in {d}/lang/words.txt (eleven 1): mapped to '!SIL'" in r.stderr
    assert "Did not successfully align utterance short, len = 5" in r.stderr
    assert "Done 2, errors on 1" in r.stderr and "Traceback" not in r.stderr
    ali = dict(tables.read_int_vectors(f"ark:{tmp_path}/ali.ark"))
    assert list(ali) == ["good", "oov"] and len(ali["good"]) == 60
    # ali-to-pdf maps every transition-id through the model
    r = run("nnet-ali-to-pdf", d / "0.mdl", f"ark:{tmp_path}/ali.ark", f"ark:{tmp_path}/pdf.ark", check=True)
    pdf = dict(tables.read_int_vectors(f"ark:{tmp_path}/pdf.ark"))["good"]
    np.testing.assert_array_equal(pdf, gmm.load_tid2pdf(str(d / "0.mdl"))[ali["good"]])


def test_missing_wav_is_counted(tmp_path):
    from nnet_tools.speech.corpus import synth
    samples = (np.sin(np.arange(8000) / 5) * 3000).astype(np.int16)
    synth.write_wav(str(tmp_path / "a.wav"), samples)
    (tmp_path / "wav.scp").write_text(f"a {tmp_path}/a.wav\nb {tmp_path}/missing.wav\n")
    r = run("nnet-compute-feats", "--type", "mfcc", tmp_path / "wav.scp", f"ark,t:{tmp_path}/feats.txt", check=True)
    assert f"cannot read wav {tmp_path}/missing.wav: no such file" in r.stderr and "; skipping it" in r.stderr
    assert "Done 1 out of 2 utterances." in r.stderr
    feats = dict(tables.read_matrices(f"ark:{tmp_path}/feats.txt"))
    assert list(feats) == ["a"] and feats["a"].shape == (48, 13)   # (8000 - 400) // 160 + 1 frames


def test_import_order_kaldifst_after_kaldi_hmm_gmm():
    """Every speech module that needs both imports kaldi_hmm_gmm first (the other order hangs)."""
    code = ("import nnet_tools.speech.search.graph, nnet_tools.speech.search.decode, nnet_tools.speech.models.align; "
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.stdout.strip() == "ok", r.stderr


def test_mix_up_is_reproducible_and_splits_apart(setup):
    """The same stats and --srand give the same model (Kaldi's split RNG is unseeded in the
    wheel); every split copy ends up with its own mean."""
    d, _ = setup
    rng = np.random.default_rng(4)
    ref = gmm.load(str(d / "0.mdl"))
    tids = np.arange(1, ref.tm.num_transition_ids + 1)
    stats = stats_of(ref, rng.normal(size=(3000, 6)).astype(np.float32), tids, rng)
    models = []
    for _ in range(2):
        m = gmm.load(str(d / "0.mdl"))
        estimate.estimate(m, stats, mix_up=150, min_gaussian_occupancy=3, min_count=5, srand=7)
        models.append(m)
    assert gmm.num_gauss(models[0]) > ref.num_pdfs
    for p in range(ref.num_pdfs):
        a, b = models[0].am.get_pdf(p), models[1].am.get_pdf(p)
        np.testing.assert_array_equal(a.means, b.means)
        assert len(np.unique(np.asarray(a.means), axis=0)) == a.num_gauss


def test_estimate_logs_the_counts_kaldis_gmm_dir_info_reads(setup):
    """gmm-est's LOG lines that steps/info/gmm_dir_info.pl greps (floored variances, the split's
    Gaussian count), with the numbers the wheel's own update gives: the wheel prints none."""
    d, _ = setup
    rng = np.random.default_rng(5)
    model = gmm.load(str(d / "0.mdl"))
    tids = np.arange(1, model.tm.num_transition_ids + 1)
    estimate.estimate(model, stats_of(model, rng.normal(size=(3000, 6)).astype(np.float32), tids, rng), mix_up=150,
                 min_gaussian_occupancy=3, min_count=5)
    # Two dims all but constant (variance 1e-6 < Kaldi's floor 0.001), and so few frames that
    # some Gaussians fall under --min-gaussian-occupancy and are removed.
    feats = rng.normal(size=(1500, 6)).astype(np.float32)
    feats[:, 4:] *= 1e-3
    stats = stats_of(model, feats, tids, rng)
    before = gmm.num_gauss(model)
    lines = []

    class Log:
        info = staticmethod(lines.append)
    estimate.estimate(model, stats, min_gaussian_occupancy=8, log=Log)
    removed = int(re.search(r"^Removed (\d+) Gaussians due to counts < --min-gaussian-occupancy=8 and "
                            r"--remove-low-count-gaussians=true$", "\n".join(lines), re.M)[1])
    assert removed > 0 and gmm.num_gauss(model) == before - removed
    variances = np.concatenate([np.asarray(model.am.get_pdf(p).vars) for p in range(model.num_pdfs)])
    floored = np.isclose(variances, 0.001, rtol=1e-4)
    assert floored.sum() > 0 and floored[:, :4].sum() == 0
    # Kaldi's gmm_dir_info.pl: /variance elements floored in (\S+) Gaussians, out of (\S+)/ and
    # /Split (\S+) states .+ split #Gauss from \S+ to (\S+)/.
    assert f"{floored.sum()} variance elements floored in {floored.any(1).sum()} Gaussians, out of " \
           f"{before - removed}" in lines
    del lines[:]
    estimate.estimate(model, stats_of(model, feats, tids, rng), mix_up=before, min_count=5, log=Log)
    updated = int(re.search(r"Gaussians, out of (\d+)$", lines[1])[1])   # after this update's removals
    assert lines[-1] == (f"Split {model.num_pdfs} states with target = {before}, power = 0.2, perturb_factor = "
                         f"0.01 and min_count = 5, split #Gauss from {updated} to {gmm.num_gauss(model)}")
    assert gmm.num_gauss(model) > updated


def stats_of(model, feats, tids, rng):
    stats = estimate.Stats(model)
    estimate.accumulate(model, stats, [(feats, rng.choice(tids, len(feats)))])
    return stats
