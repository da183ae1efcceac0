"""Priors: counted from targets (analyze-counts), stored in a model (nnet3-am-adjust-priors),
divided out by nnet-compute; Kaldi vector files, binary and text, as inputs everywhere."""
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import error_line, run
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.model import config, model_io, priors
from nnet_tools.model.nnet import Nnet
from nnet_tools.evaluate import compute as report_compute

SET_A = Path("/work/shared/testdata/kaldi-arks/kaldi-io-for-python/tests/data")
SET_B = Path("/work/shared/testdata/kaldi-arks/kaldi-native-io-generated")


@pytest.fixture
def targets(tmp_path):
    """pdf-ids 0 x1, 2 x3, 3 x1 over two utterances; 1 and 4 never occur."""
    with tables.IntVectorWriter(f"ark:{tmp_path}/ali.ark") as w:
        w.write("a", np.array([0, 2, 2], np.int32))
        w.write("b", np.array([2, 3], np.int32))
        w.write("empty", np.array([], np.int32))
    return f"ark:{tmp_path}/ali.ark"


def test_priors_from_counts_by_hand(targets):
    counts = priors.count_pdfs(targets, counts_dim=5)
    np.testing.assert_array_equal(counts, [1, 0, 3, 1, 0])
    np.testing.assert_array_equal(priors.normalise(counts), [0.2, 1e-15, 0.6, 0.2, 1e-15])
    np.testing.assert_array_equal(priors.count_pdfs(targets), [1, 0, 3, 1])  # largest id + 1
    with pytest.raises(NnetError, match="utterance 'a': pdf-id 2 >= --counts-dim 2"):
        priors.count_pdfs(targets, counts_dim=2)
    with pytest.raises(NnetError, match="non-negative counts with a positive sum"):
        priors.normalise([0, 0])


def test_sum_pdf_counts_program_text_and_binary(targets, tmp_path):
    r = run("nnet-sum-pdf-counts", "--counts-dim=5", targets, tmp_path / "p.vec", check=True)
    assert "Counted 5 frames over 5 pdfs; 2 pdfs never seen" in r.stderr
    assert (tmp_path / "p.vec").read_text().split() == ["[", "0.2", "1e-15", "0.6", "0.2", "1e-15", "]"]
    run("nnet-sum-pdf-counts", "--binary=true", "--normalize=false", targets, tmp_path / "c.vec", check=True)
    assert (tmp_path / "c.vec").read_bytes()[:5] == b"\0BFV "
    np.testing.assert_array_equal(tables.read_vector(str(tmp_path / "c.vec")), [1, 0, 3, 1])
    # Kaldi's single-object writer crashed the process (SIGSEGV) on a failed write.
    full = run("nnet-sum-pdf-counts", targets, "/dev/full")
    assert full.returncode == 1 and error_line(full).endswith("No space left on device: /dev/full")


def test_vector_files_round_trip(tmp_path):
    v = np.array([0.25, 1e-15, 0.75, 3.5e-7])
    for binary in (True, False):
        for double in (True, False):
            path = tmp_path / f"v.{binary}.{double}"
            tables.write_vector(path, v, binary=binary, double=double)
            head = path.read_bytes()[:5]
            assert head == (b"\0BDV " if double else b"\0BFV ") if binary else head.strip().startswith(b"[")
            np.testing.assert_allclose(tables.read_vector(str(path)), v, rtol=1e-7 if double or binary else 1e-6)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    (tmp_path / "bad.vec").write_text("0.5 oops\n")
    with pytest.raises(NnetError, match=r"bad.vec: Failed to read vector from stream. Expected \"\[\""):
        priors.read(str(tmp_path / "bad.vec"))
    with pytest.raises(NnetError, match="nope.vec: cannot read priors: No such file"):
        priors.read(str(tmp_path / "nope.vec"))


def test_vector_files_are_written_where_there_is_no_memfd(tmp_path, monkeypatch):
    """Not on Linux: Kaldi writes the temp file itself (and a full disk would crash it, as before)."""
    import os
    monkeypatch.delattr(os, "memfd_create", raising=False)
    tables.write_vector(tmp_path / "v.vec", np.array([0.5, 2.0]))
    np.testing.assert_array_equal(tables.read_vector(str(tmp_path / "v.vec")), [0.5, 2.0])
    assert os.listdir(tmp_path) == ["v.vec"]


def _first_object(ark):
    """The value of an archive's first entry, which is exactly a Kaldi object file's content:
    binary '\\0B' 'FV '|'DV ' '\\4' <int32 n> <n values>, or text '[ ... ]'."""
    blob = ark.read_bytes()
    start = blob.index(b" ") + 1
    if blob[start:start + 2] == b"\0B":
        width = 8 if blob[start + 2:start + 4] == b"DV" else 4
        n = int.from_bytes(blob[start + 6:start + 10], "little")
        return blob[start:start + 10 + n * width]
    return blob[start:blob.index(b"]", start) + 1] + b"\n"


@pytest.mark.parametrize("ark", [SET_A / "conf.ark", SET_B / "double_vector.ark", SET_B / "double_vector.text.ark"],
                         ids=["kaldi-float-binary", "kaldi-double-binary", "kaldi-double-text"])
def test_kaldi_written_vectors_read_as_priors(ark, tmp_path):
    """Each form Kaldi writes reads as a vector, as priors, and in every program that takes one."""
    if not ark.exists():
        pytest.skip("shared Kaldi test arks not present")
    _, want = next(tables.read_vectors(f"ark:{ark}"))
    path = tmp_path / "kaldi.vec"
    path.write_bytes(_first_object(ark))
    np.testing.assert_allclose(tables.read_vector(str(path)), want, rtol=1e-7)
    np.testing.assert_allclose(priors.read(str(path)), np.maximum(want / want.sum(), 1e-15), rtol=1e-6)
    # ... and so do the programs: --presoftmax-prior-scale (nnet-init) and --priors (nnet-compute).
    (tmp_path / "m.yaml").write_text(f"input-dim: 3\nlayers:\n - {{dim: 8}}\n - {{type: output, dim: {len(want)}}}\n")
    run("nnet-init", "--presoftmax-prior-scale", path, tmp_path / "m.yaml", tmp_path / "0.mdl", check=True)
    net = model_io.load(tmp_path / "0.mdl")
    np.testing.assert_allclose(net.layers[-1].presoftmax_scale.numpy(), want, rtol=1e-6)
    with tables.MatrixWriter(f"ark:{tmp_path}/feats.ark") as w:
        w.write("u1", np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32))
    run("nnet-compute", "--priors", path, tmp_path / "0.mdl", f"ark:{tmp_path}/feats.ark", f"ark:{tmp_path}/out.ark",
        check=True)
    post = report_compute.log_posteriors(net, next(tables.read_matrices(f"ark:{tmp_path}/feats.ark"))[1])
    np.testing.assert_allclose(dict(tables.read_matrices(f"ark:{tmp_path}/out.ark"))["u1"],
                               post - np.log(want / want.sum()), atol=1e-5)


@pytest.fixture
def model(tmp_path):
    torch.manual_seed(0)
    net = Nnet(config.normalize(config.yaml_load(
        "input-dim: 3\nsplice: -1:1\nlayers:\n - {dim: 8}\n - {type: output, dim: 5, param-stddev: 0.5}\n")))
    model_io.save(net, tmp_path / "final.mdl")
    return tmp_path / "final.mdl"


def test_adjust_priors_logs_as_kaldi(model, targets, tmp_path):
    run("nnet-sum-pdf-counts", "--counts-dim=5", "--binary=true", "--normalize=false", targets, tmp_path / "c.vec",
        check=True)
    r = run("nnet-adjust-priors", model, tmp_path / "c.vec", tmp_path / "a.mdl", check=True)
    assert "Model did not previously have priors attached." in r.stderr
    assert f"Modified priors of neural network model and wrote it to {tmp_path / 'a.mdl'}" in r.stderr
    _, stored = model_io.load(tmp_path / "a.mdl", with_priors=True)
    np.testing.assert_allclose(stored.numpy(), [0.2, 1e-15, 0.6, 0.2, 1e-15], rtol=1e-6)

    (tmp_path / "new.vec").write_text("[ 0.1 0.1 0.6 0.1 0.1 ]\n")
    r = run("nnet-adjust-priors", tmp_path / "a.mdl", tmp_path / "new.vec", tmp_path / "a.mdl", check=True)
    # |new - old| is largest (0.1) for pdfs 0, 1, 3, 4; Kaldi's Max() reports the first.
    assert "Adjusting priors: largest absolute difference was for pdf 0, 0.2 -> 0.1" in r.stderr
    kl = 0.2 * math.log(2) + 0.6 * math.log(1) + 0.2 * math.log(2)  # sum p_old log(p_old / p_new)
    line = next(line for line in r.stderr.splitlines() if "K-L divergence from old to new is" in line)
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(kl, rel=1e-5)

    (tmp_path / "short.vec").write_text("[ 1 2 ]\n")
    assert "short.vec: priors have dimension 2, the model has 5 outputs" in error_line(
        run("nnet-adjust-priors", model, tmp_path / "short.vec", tmp_path / "b.mdl"))
    assert not (tmp_path / "b.mdl").exists()


def test_compute_divides_by_the_models_priors(model, tmp_path):
    rng = np.random.default_rng(0)
    with tables.MatrixWriter(f"ark:{tmp_path}/feats.ark") as w:
        w.write("u1", rng.normal(size=(6, 3)).astype(np.float32))
        w.write("u2", rng.normal(size=(2, 3)).astype(np.float32))
    p = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    tables.write_vector(tmp_path / "p.vec", p, binary=True)  # Kaldi's binary "\0BFV" form
    run("nnet-adjust-priors", model, tmp_path / "p.vec", tmp_path / "withp.mdl", check=True)

    def compute(*args):
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}.ark"
        r = run("nnet-compute", *args, f"ark:{tmp_path}/feats.ark", f"ark:{out}", check=True)
        return dict(tables.read_matrices(f"ark:{out}")), r.stderr
    like, log = compute(tmp_path / "withp.mdl")
    assert "writing log-likelihoods: log-posterior - log-prior, over 5 priors" in log
    override, _ = compute("--priors", tmp_path / "p.vec", model)  # a binary vector file, accepted
    net, stored = model_io.load(tmp_path / "withp.mdl", with_priors=True)
    for u, feats in tables.read_matrices(f"ark:{tmp_path}/feats.ark"):
        post = report_compute.log_posteriors(net, feats)
        np.testing.assert_allclose(np.exp(post).sum(1), 1, rtol=1e-5)
        np.testing.assert_allclose(like[u], post - np.log(p).astype(np.float32), atol=1e-5)
        np.testing.assert_allclose(override[u], like[u], atol=1e-6)
    # --use-priors false: plain log-posteriors; --priors wins over the model's own.
    assert priors.log_priors_for_decoding(stored, None, use_priors=False) is None
    assert priors.log_priors_for_decoding(None, None) is None
    np.testing.assert_allclose(priors.log_priors_for_decoding(stored, None).numpy(), np.log(p), rtol=1e-6)
    tables.write_vector(tmp_path / "q.vec", [1, 1, 1, 1, 4], binary=False)
    np.testing.assert_allclose(priors.log_priors_for_decoding(stored, str(tmp_path / "q.vec"), dim=5).numpy(),
                               np.log([0.125, 0.125, 0.125, 0.125, 0.5]), rtol=1e-6)
    # A pdf never counted (its prior at the floor) is not favoured by the division, as in Kaldi's
    # nnet1: its log-prior is log(sqrt(FLT_MAX)), not log(1e-15).
    tables.write_vector(tmp_path / "unseen.vec", [1, 1, 0, 1, 1], binary=False)
    log_priors = priors.log_priors_for_decoding(stored, str(tmp_path / "unseen.vec"), dim=5).numpy()
    np.testing.assert_allclose(log_priors, [np.log(0.25)] * 2 + [44.3614] + [np.log(0.25)] * 2, rtol=1e-5)
    model_io.save(net, tmp_path / "unseen.mdl", priors=priors.read(tmp_path / "unseen.vec"))   # float32 in the file
    _, unseen = model_io.load(tmp_path / "unseen.mdl", with_priors=True)
    np.testing.assert_allclose(priors.log_priors_for_decoding(unseen, None, dim=5).numpy(), log_priors, rtol=1e-5)



def test_stored_priors_that_are_not_one_positive_value_per_output(model, tmp_path):
    net = model_io.load(model)
    for bad, message in ((torch.tensor([0.5, 0.5]), r"must be 5 floats \(one per output\), got shape \(2,\)"),
                         ("0.2 0.2", "must be 5 floats .*got str"),
                         (torch.tensor([0.2, 0.2, math.nan, 0.2, 0.2]), "must be positive and finite")):
        torch.save({"format": model_io.FORMAT, "version": model_io.VERSION, "config": net.config,
                    "state": net.state_dict(), "priors": bad}, tmp_path / "bad.mdl")
        _, stored = model_io.load(tmp_path / "bad.mdl", with_priors=True)
        with pytest.raises(NnetError, match="bad.mdl: stored priors " + message):
            priors.log_priors_for_decoding(stored, None, dim=5, model=str(tmp_path / "bad.mdl"))
    # nnet-adjust-priors is how they are mended: it warns and replaces them.
    (tmp_path / "p.vec").write_text("[ 1 1 1 1 1 ]\n")
    priors.adjust_model_priors(tmp_path / "bad.mdl", tmp_path / "p.vec", tmp_path / "fixed.mdl")
    np.testing.assert_allclose(model_io.load(tmp_path / "fixed.mdl", with_priors=True)[1].numpy(), [0.2] * 5)
    for floor in (1.0, math.nan, -1e-3):
        with pytest.raises(NnetError, match=r"--prior-floor must be in \[0, 1\)"):
            priors.adjust_model_priors(tmp_path / "bad.mdl", tmp_path / "p.vec", tmp_path / "x.mdl", floor)


def test_priors_stay_with_the_model_through_training_averaging_and_combination(small_model, tmp_path):
    """As Kaldi's driver puts each new raw nnet into the previous .mdl (nnet3-am-copy --set-raw-nnet),
    a model's priors survive every program that makes a model from it; they were dropped, so a model
    fine-tuned from an adjusted final.mdl decoded without dividing by its priors."""
    from helpers import write_egs_dir
    write_egs_dir(tmp_path / "egs")
    _, plain = small_model
    p = np.array([0.1, 0.2, 0.3, 0.4])
    model_io.save(model_io.load(plain), tmp_path / "withp.mdl", priors=p)
    run("nnet-train-one-job", "--use-gpu=no", "--learning-rate=0.01", "--minibatch-size=64", "--job=1",
        "--archives-processed=0", tmp_path / "withp.mdl", tmp_path / "egs", tmp_path / "1.1.mdl", check=True)
    run("nnet-average-models", tmp_path / "1.1.mdl", plain, tmp_path / "1.mdl", check=True)
    run("nnet-outer-step", "--method", "bmuf", "--jobs", "2", "--state-out", tmp_path / "1.outer",
        tmp_path / "1.mdl", plain, tmp_path / "2.mdl", check=True)
    run("nnet-combine", "--use-gpu", "no", tmp_path / "2.mdl", plain, tmp_path / "egs" / "combine.egs",
        tmp_path / "final.mdl", check=True)
    for name in ("1.1.mdl", "1.mdl", "2.mdl", "final.mdl"):
        np.testing.assert_allclose(model_io.priors(tmp_path / name).numpy(), p, rtol=1e-7, err_msg=name)
    assert model_io.priors(plain) is None
    run("nnet-average-models", plain, tmp_path / "1.mdl", tmp_path / "first.mdl", check=True)
    assert model_io.priors(tmp_path / "first.mdl") is None   # the first model's, as Kaldi's copy
