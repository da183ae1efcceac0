"""Kaldi nnet3 export and import (nnet-to-kaldi, nnet-from-kaldi; nnet_tools/kaldi/): the round
trip on real features, what each layer type becomes, the context, the tract nets Kaldi computed,
and bad input."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import error_line, mono_model, run
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.kaldi import am, compute, convert, nnet3, transition_model as transition
from nnet_tools.kaldi.stream import KaldiWriter, read_kaldi_file, write_kaldi_file
from nnet_tools.model import config, model_io
from nnet_tools.model.nnet import Nnet, padded

MODELS = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "kaldi-models"
TRACT = MODELS / "tract-nnet3-raw"
YESNO = MODELS / "yesno-mono-gmm"
GMM = YESNO / "exp" / "mono" / "final.mdl"  # Kaldi's binary GMM final.mdl: 11 pdfs
FEATS = f"ark:{YESNO}/data/train_yesno/data/raw_mfcc_train_yesno.1.ark"  # real MFCCs, dim 13

EVERY_LAYER = """input-dim: 13
splice: -2:2
layers:
  - {name: tdnn1, type: relu-batchnorm, dim: 24}
  - {name: tdnn2, type: sigmoid-batchnorm-dropout, dim: 20, splice: [-1, 0, 1], dropout-proportion: 0.2}
  - {name: tdnn3, type: tanh-dropout, dim: 18, splice: [-3, 0, 3], natural-gradient: false}
  - {name: tdnn4, type: relu, dim: 16, rank-in: 5}
  - {name: lin, type: affine, dim: 14, learning-rate-factor: 0.5, l2-regularize: 0.01, max-change: 0.0}
  - {name: output, type: output, dim: 11}
"""


def _features():
    return [torch.from_numpy(m).float() for _, m in sorted(tables.read_matrices(FEATS))[:3]]


def _outputs(net, feats):
    with torch.no_grad():
        return [net.forward_chunk(padded(x, net.left_context, net.right_context)[None])[0].numpy() for x in feats]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model of every layer type, its batch-norm and nonlinearity statistics filled by training
    passes on the features, with a presoftmax scale and priors."""
    d = tmp_path_factory.mktemp("model")
    feats = _features()
    torch.manual_seed(0)
    net = Nnet(config.normalize(config.yaml_load(EVERY_LAYER)))
    net.train()
    net.store_component_stats(True)
    for x in feats:
        out = net.forward_chunk(padded(x, net.left_context, net.right_context)[None])
        out.sum().backward()
    net.set_presoftmax_scale(np.random.default_rng(0).uniform(0.5, 1.5, 11))
    net.eval()
    priors = np.random.default_rng(1).uniform(1, 2, 11)
    model_io.save(net, d / "nnet.mdl", priors=priors / priors.sum())
    return d / "nnet.mdl", net, feats


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The model as nnet-to-kaldi writes it: a binary final.mdl and a text raw nnet."""
    d = tmp_path_factory.mktemp("kaldi")
    run("nnet-to-kaldi", "--transition-model", GMM, trained[0], d / "final.mdl", check=True)
    am.export(trained[0], d / "final.mdl.txt", False, GMM)  # the program's one call, in this process
    am.export(trained[0], d / "final.raw.txt", False)
    return {"true": d / "final.mdl", "false": d / "final.mdl.txt", "raw": d / "final.raw.txt"}


@pytest.mark.parametrize("binary", ["true", "false"])
def test_round_trip_on_real_features(trained, exported, tmp_path, binary):
    mdl, net, feats = trained
    kaldi = exported[binary]
    assert kaldi.read_bytes().startswith(b"\0B<TransitionModel>" if binary == "true" else b"<TransitionModel>")
    run("nnet-from-kaldi", kaldi, tmp_path / "back.mdl", check=True)
    back, priors = model_io.load(tmp_path / "back.mdl", with_priors=True)
    want = _outputs(net, feats)
    worst = max(np.abs(a - b).max() for a, b in zip(_outputs(back.eval(), feats), want))
    assert worst < 1e-5
    # What Kaldi would compute from the file (its components' own definitions) is ours too.
    knet = nnet3.read(kaldi)
    assert max(np.abs(compute.compute(knet, x.numpy()) - y).max() for x, y in zip(feats, want)) < 1e-5
    np.testing.assert_allclose(priors.numpy(), model_io.priors(mdl).numpy(), rtol=1e-6)
    assert back.config == net.config


def test_what_each_layer_type_becomes(exported):
    out = exported["raw"]
    text = out.read_text()
    assert text.startswith("<Nnet3> \ninput-node name=input dim=13\n")
    assert ("component-node name=tdnn2.affine component=tdnn2.affine input=Append(Offset(tdnn1.batchnorm, -1), "
            "tdnn1.batchnorm, Offset(tdnn1.batchnorm, 1))") in text
    assert "input=Append(Offset(input, -2), Offset(input, -1), input, Offset(input, 1), Offset(input, 2))" in text
    assert "output-node name=output input=output.log-softmax objective=linear\n\n<NumComponents> 16 \n" in text
    assert text.rstrip().endswith("</Nnet3>") and "<LeftContext>" not in text  # a raw nnet
    knet = nnet3.read(out)
    kinds = {name: c.kind for name, c in knet.components.items()}
    assert kinds["tdnn1.affine"] == "NaturalGradientAffineComponent" and kinds["tdnn3.affine"] == "AffineComponent"
    assert [kinds[f"tdnn{i}.{p}"] for i, p in ((1, "relu"), (2, "sigmoid"), (3, "tanh"))] == \
        ["RectifiedLinearComponent", "SigmoidComponent", "TanhComponent"]
    assert kinds["output.fixed-scale"] == "FixedScaleComponent" and kinds["output.log-softmax"] == "LogSoftmaxComponent"
    bn = knet.components["tdnn1.batchnorm"]
    assert bn.test_mode and bn.count >= 1 and bn.epsilon == pytest.approx(1e-5)
    assert "<Epsilon> 1e-05 <TargetRms> 1 <TestMode> T <Count> " in text
    drop = knet.components["tdnn2.dropout"]
    assert (drop.kind, drop.test_mode, drop.proportion) == ("GeneralDropoutComponent", True, pytest.approx(0.2))
    ng = knet.components["tdnn4.affine"]
    assert (ng.rank_in, ng.rank_out, ng.update_period) == (5, 8, 4)
    lin = knet.components["lin.affine"]
    assert (lin.learning_rate_factor, lin.l2_regularize, lin.max_change) == (0.5, pytest.approx(0.01), 0.0)
    relu = knet.components["tdnn1.relu"]
    assert relu.count > 0 and len(relu.value_avg) == 24 and relu.oderiv_count > 0


def test_context_equals_nnet_info(trained, exported):
    mdl, net, _ = trained
    info = run("nnet-info", mdl, check=True).stdout.splitlines()
    knet = nnet3.read(exported["true"])
    assert info[:2] == [f"left-context: {knet.context[0]}", f"right-context: {knet.context[1]}"]
    assert knet.context == knet.model_context() == (net.left_context, net.right_context) == (6, 6)


def test_transition_model_is_written_as_kaldi_does(exported, tmp_path):
    """From a Kaldi GMM final.mdl, the TransitionModel comes out byte for byte; from our GMM file,
    it reads back as kaldi-hmm-gmm's."""
    r = read_kaldi_file(GMM)
    transition.read(r)
    assert exported["true"].read_bytes()[:r.pos] == r.data[:r.pos]
    gmm = mono_model(tmp_path / "lang")
    ours = transition.from_khg(gmm.tm)
    w = KaldiWriter(False)
    transition.write(w, ours)
    assert w.getvalue().decode().split("<LogProbs>")[0] == str(gmm.tm).split("<LogProbs>")[0]
    assert ours.num_pdfs == gmm.tm.num_pdfs


def _tract(case):
    subsampling = int((TRACT / case / "vars.sh").read_text().split("subsampling=")[1].split()[0])
    x = dict(tables.read_matrices(f"ark:{TRACT / case / 'input.ark'}"))["idx"]
    y = dict(tables.read_matrices(f"ark:{TRACT / case / 'output.ark'}"))["idx"]
    return x, y, subsampling


@pytest.mark.parametrize("case", ["ngaffine_40x10_T15_S1", "fixed_affine_40x10_T40_S3", "relu_D10_T11",
                                  "renorm_tgt1.0_D20_T35", "delay_5_D20_T259_S3"])
@pytest.mark.parametrize("name", ["model.raw", "model.raw.txt"])
def test_tract_nets_reproduce_kaldi(case, name):
    x, y, subsampling = _tract(case)
    out = compute.compute(nnet3.read(TRACT / case / name), x, subsampling)
    assert out.shape == y.shape and np.abs(out - y).max() < 1e-4


@pytest.mark.parametrize("case", ["ngaffine_40x10_T15_S1", "fixed_affine_40x10_T40_S3"])
def test_tract_affine_nets_become_our_models(case, tmp_path):
    """Given the log-softmax an nnet-tools model ends in, Kaldi's affine nets import as our models
    and compute Kaldi's outputs (log-softmaxed)."""
    text = (TRACT / case / "model.raw.txt").read_text()
    node = "affine1" if case.startswith("ngaffine") else "fixed1"
    text = text.replace(f"output-node name=output input={node}",
                        f"component-node name=sm input={node} component=sm\noutput-node name=output input=sm")
    text = text.replace("<NumComponents> 1", "<NumComponents> 2").replace(
        "</Nnet3>", "<ComponentName> sm <LogSoftmaxComponent> <Dim> 10 <ValueAvg> [ ]\n<DerivAvg> [ ]\n"
                    "<Count> 0 </LogSoftmaxComponent>\n</Nnet3>")
    (tmp_path / "k.txt").write_text(text)
    net, priors = convert.to_ours(nnet3.read(tmp_path / "k.txt"), "k.txt")
    assert priors is None and net.layers[0].affine.ng_mode == case.startswith("ngaffine")
    x, y, subsampling = _tract(case)
    out = _outputs(net.eval(), [torch.from_numpy(x).float()])[0][::subsampling]
    y = y - np.log(np.exp(y).sum(1, keepdims=True))
    assert np.abs(out - y).max() < 1e-4


def test_unsupported_component_is_one_line(tmp_path):
    line = error_line(run("nnet-from-kaldi", TRACT / "lstm_5-8-16_T20_S3_delay1" / "model.raw", tmp_path / "m.mdl"))
    assert "component 'lstm1.lstm_nonlin' is of type LstmNonlinearityComponent, which nnet-tools does not support" in line
    assert not (tmp_path / "m.mdl").exists()
    for case, name, message in (("renorm_tgt1.0_D20_T35", "model.raw", "comes before any affine component"),
                                ("ngaffine_40x10_T15_S1", "model.raw.txt", "must be affine [+ fixed-scale] + log-softmax"),
                                ("delay_5_D20_T259_S3", "final.mdl", "nnet-tools models output their last component")):
        with pytest.raises(NnetError, match=re.escape(message)):
            am.import_(TRACT / case / name, tmp_path / "m.mdl")


def test_unsupported_descriptors_and_nodes(tmp_path):
    text = (TRACT / "relu_D10_T11" / "model.raw.txt").read_text()
    for old, new, message in (("input=input ", "input=IfDefined(Offset(input, -1)) ", "IfDefined(...) is not supported"),
                              ("input=input ", "input=Sum(input, input) ", "Sum(...) is not supported"),
                              ("output-node name=output input=relu1", "dim-range-node name=r input-node=relu1 "
                               "dim-offset=0 dim=5\noutput-node name=output input=r", "dim-range-node 'r' is not supported")):
        (tmp_path / "k.txt").write_text(text.replace(old, new))
        with pytest.raises(NnetError, match=re.escape(message)):
            nnet3.read(tmp_path / "k.txt")


def test_truncated_final_mdl_is_one_line(exported, tmp_path):
    data = exported["true"].read_bytes()
    (tmp_path / "cut.mdl").write_bytes(data[:len(data) // 2])
    line = error_line(run("nnet-from-kaldi", tmp_path / "cut.mdl", tmp_path / "m.mdl"))
    assert "cut.mdl: at byte" in line and "truncated" in line


def test_pdf_count_mismatch_is_one_line(trained, tmp_path):
    mdl, net, _ = trained
    gmm_npz = tmp_path / "gmm.mdl"
    from nnet_tools.speech.models import gmm
    gmm.save(mono_model(tmp_path / "lang"), gmm_npz)
    line = error_line(run("nnet-to-kaldi", "--transition-model", gmm_npz, mdl, tmp_path / "final.mdl"))
    assert "the transition model has 62 pdfs, the model" in line and "has 11 outputs" in line
    assert not (tmp_path / "final.mdl").exists()
    # A final.mdl made elsewhere whose transition model does not fit its nnet.
    knet = convert.from_ours(net, None, am.load_transition_model(gmm_npz))
    write_kaldi_file(tmp_path / "bad.mdl", nnet3.write(knet, True))
    with pytest.raises(NnetError, match="bad.mdl: the transition model has 62 pdfs, the nnet's output has dim 11"):
        am.import_(tmp_path / "bad.mdl", tmp_path / "m.mdl")
