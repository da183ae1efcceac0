"""TDNN layers (per-layer splice offsets, xconfig's input=Append(...)): context arithmetic, the
one-pass chunk forward against frame-by-frame windows, natural gradient on every affine."""
import numpy as np
import pytest
import torch

from helpers import run, write_egs_dir
from nnet_tools.data import egs
from nnet_tools.errors import NnetError
from nnet_tools.model import config, model_io
from nnet_tools.model.nnet import Nnet, frame_windows
from nnet_tools.evaluate import compute
from nnet_tools.train.job import TrainOptions, train_one_job

# Kaldi's classic TDNN shape: splice -2..2 into the first layer (the LDA layer's
# Append(-2,-1,0,1,2)), then Append(-1,0,1), Append(-1,0,1), Append(-3,0,3), Append(-3,0,3),
# Append(-6,-3,0). nnet3 follows the Append()s down to the input:
#   left  = 2 + 1 + 1 + 3 + 3 + 6 = 16
#   right = 2 + 1 + 1 + 3 + 3 + 0 = 10
TDNN = """input-dim: 5
splice: -2:2
layers:
  - {name: tdnn1, type: relu-batchnorm, dim: 12}
  - {name: tdnn2, type: relu-batchnorm, dim: 12, splice: [-1, 0, 1]}
  - {name: tdnn3, type: relu-batchnorm, dim: 12, splice: -1:1}
  - {name: tdnn4, type: relu-batchnorm, dim: 12, splice: [-3, 0, 3]}
  - {name: tdnn5, type: relu-batchnorm, dim: 12, splice: '-3,0,3'}
  - {name: tdnn6, type: relu-batchnorm, dim: 12, splice: [-6, -3, 0]}
  - {name: output, type: output, dim: 7}
"""


def make(text, seed=0, **top):
    torch.manual_seed(seed)
    raw = {**config.yaml_load(text), **top}
    return Nnet(config.normalize(raw))


def randomised(net, seed=1):
    """Non-trivial weights and batch-norm statistics, in test mode (as decoding runs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in net.layers:
            layer.affine.weight.normal_(0, layer.affine.weight.shape[1] ** -0.5, generator=g)
            layer.affine.bias.normal_(0, 0.5, generator=g)
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.normal_(0, 1, generator=g)
                m.running_var.uniform_(0.5, 2, generator=g)
    return net.eval()


def test_context_is_the_sum_over_layers():
    net = make(TDNN)
    assert (net.left_context, net.right_context) == (16, 10)
    assert [layer.affine.weight.shape[1] for layer in net.layers] == [25, 36, 36, 36, 36, 36, 12]
    # Offsets that all lean one way: frame t needs features t+1-3 .. t+2-3, i.e. t-2 .. t-1.
    lean = make("input-dim: 2\nsplice: [1, 2]\nlayers:\n - {dim: 4}\n - {dim: 4, splice: [-3]}\n - {type: output, dim: 3}\n")
    assert (lean.left_context, lean.right_context) == (2, 0)


def test_nnet_info_prints_the_chain_context(tmp_path):
    (tmp_path / "tdnn.yaml").write_text(TDNN)
    run("nnet-init", tmp_path / "tdnn.yaml", tmp_path / "0.mdl", check=True)
    out = run("nnet-info", tmp_path / "0.mdl", check=True).stdout
    assert out.startswith("left-context: 16\nright-context: 10\n")
    assert "splice:\n  - -1\n  - 0\n  - 1\n" in out  # the layer's offsets are in its config


@pytest.mark.parametrize("text", [TDNN, "input-dim: 2\nsplice: [1, 2]\nlayers:\n - {dim: 4}\n - {dim: 4, splice: [-3]}\n"
                                        " - {dim: 4, type: tanh, splice: [0, 2]}\n - {type: output, dim: 3}\n"],
                         ids=["kaldi-tdnn", "one-sided"])
def test_chunk_forward_equals_frame_by_frame(text, monkeypatch):
    net = randomised(make(text))
    feats = torch.randn(37, net.input_dim)
    with torch.no_grad():
        per_frame = net(frame_windows(feats, net.left_context, net.right_context))
        chunk = net.forward_chunk(frame_windows(feats, net.left_context + 18, net.right_context + 18)[18:19, :, :])
    assert per_frame.shape == (37, net.output_dim) and chunk.shape == (1, 37, net.output_dim)
    assert per_frame.abs().max() < 100  # outputs of a sensible size: 1e-5 is a float32 tolerance
    np.testing.assert_allclose(chunk[0].numpy(), per_frame.numpy(), atol=1e-5)
    # nnet-compute's path: whole utterances cut into chunks; chunk edges must not show.
    monkeypatch.setattr(compute, "EVAL_BATCH", 10)
    np.testing.assert_allclose(compute.log_posteriors(net, feats.numpy()), per_frame.numpy(), atol=1e-5)


@pytest.mark.parametrize("text", [TDNN, "input-dim: 2\nsplice: [1, 2]\nlayers:\n - {dim: 4}\n - {dim: 4, splice: [-3]}\n"
                                        " - {type: output, dim: 3}\n", "input-dim: 3\nlayers:\n - {type: output, dim: 4}\n"],
                         ids=["kaldi-tdnn", "one-sided", "no-context"])
def test_a_table_is_computed_several_utterances_a_pass_with_the_same_outputs(text, monkeypatch):
    """nnet-compute and nnet-compute-prob join short utterances into one pass (one-frame
    utterances, as images are, would otherwise cost a pass each); each output equals its own
    utterance's. The long one (>= EVAL_BATCH frames) goes alone, in chunks."""
    net = randomised(make(text))
    g = torch.Generator().manual_seed(3)
    lengths = [1, 0, 3, 12, 2, 1, 1, 70, 5, 1, 1]
    table = [(f"u{i}", torch.randn(n, net.input_dim, generator=g).numpy()) for i, n in enumerate(lengths)]
    priors = torch.rand(net.output_dim, generator=g).log()
    expected = [compute.log_posteriors(net, feats, log_priors=priors) for _, feats in table]
    monkeypatch.setattr(compute, "EVAL_BATCH", 60)
    passes = []
    monkeypatch.setattr(net, "forward_chunk", lambda x, f=net.forward_chunk: passes.append(x.shape[1]) or f(x))
    got = list(compute.log_posteriors_of_table(net, table, log_priors=priors))
    assert [k for k, _ in got] == [k for k, _ in table]
    for (key, out), want in zip(got, expected):
        assert out.shape == want.shape, key
        np.testing.assert_allclose(out, want, atol=1e-5, err_msg=key)
    assert len(passes) <= 6 and max(passes) <= 2 * 60  # 70 frames in two chunks, the rest in a few joins


def test_models_without_layer_splices_compute_as_before():
    """The frame forward of a plain spliced MLP is still: pick the splice rows of the window,
    flatten them, run the layers (what Nnet.forward was before TDNN layers)."""
    net = randomised(make("input-dim: 4\nsplice: [-3, 0, 2]\nlayers:\n - {type: tanh-batchnorm, dim: 6}\n"
                          " - {type: relu, dim: 5}\n - {type: output, dim: 3}\n"))
    windows = torch.randn(9, 3 + 1 + 2, 4)
    x = windows[:, [0, 3, 5]].flatten(1)
    for layer in net.layers:
        x = layer.post(layer.affine(x))
    with torch.no_grad():
        torch.testing.assert_close(net(windows), x.detach())


def test_chunk_forward_rejects_a_window_without_frames():
    net = make(TDNN)
    with pytest.raises(NnetError, match=r"need input \[batch, 16 \+ T \+ 10, 5\] with T >= 1"):
        net.forward_chunk(torch.zeros(2, 26, 5))


def test_natural_gradient_on_every_affine_of_a_chunk():
    """The same TDNN with and without NG: every weight gradient differs, the derivative passed
    back to the input is the same (NG preconditions only the parameter gradient)."""
    grads = {}
    for ng in (True, False):
        net = randomised(make(TDNN, **{"natural-gradient": ng})).train()  # same weights both times
        x = torch.randn(3, 16 + 8 + 10, 5, generator=torch.Generator().manual_seed(5), requires_grad=True)
        labels = torch.randint(7, (3, 8), generator=torch.Generator().manual_seed(6))
        out = net.forward_chunk(x)
        assert out.shape == (3, 8, 7)
        out.gather(2, labels.unsqueeze(2)).sum().backward()
        grads[ng] = ([layer.affine.weight.grad.clone() for layer in net.layers], x.grad.clone())
    for name, g_ng, g_plain in zip([l["name"] for l in config.normalize(config.yaml_load(TDNN))["layers"]],
                                   grads[True][0], grads[False][0]):
        assert not torch.allclose(g_ng, g_plain, rtol=1e-3, atol=1e-6), name
    torch.testing.assert_close(grads[True][1], grads[False][1])


def test_frame_level_training_of_a_tdnn(tmp_path):
    """nnet-train-one-job's path (one label position per eg) with a TDNN whose context
    (1, 1) comes from two layers: input splice [-1, 0] and a layer splice [0, 1]."""
    egs_dir = write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=400)
    net = make("input-dim: 6\nsplice: [-1, 0]\nlayers:\n - {name: t1, type: relu-batchnorm, dim: 16}\n"
               " - {name: t2, type: relu-batchnorm, dim: 16, splice: [0, 1]}\n - {name: output, type: output, dim: 4}\n")
    assert (net.left_context, net.right_context) == (1, 1)
    archive = egs.EgsArchive(egs_dir / "valid_diagnostic.egs")

    def accuracy():
        windows, labels = archive.all_frames(net)
        with torch.no_grad():
            return (net.eval()(windows).argmax(1) == labels).float().mean().item()
    before = accuracy()
    train_one_job(net, egs.EgsArchive(egs_dir / "egs.1.ark"), TrainOptions(learning_rate=0.01, minibatch_size="64"))
    assert accuracy() > max(0.8, before + 0.2)


def test_layer_splice_config_rules(tmp_path):
    with pytest.raises(NnetError, match=r"layer 1 \(a\): the first layer's offsets are the top-level 'splice'"):
        config.normalize(config.yaml_load("input-dim: 2\nlayers:\n - {name: a, dim: 4, splice: [-1, 0]}\n"
                                          " - {type: output, dim: 3}\n"))
    with pytest.raises(NnetError, match=r"layer 2 \(b\): splice offsets \[1, 0\] must be"):
        config.normalize(config.yaml_load("input-dim: 2\nlayers:\n - {dim: 4}\n - {name: b, type: output, dim: 3, splice: [1, 0]}\n"))
    # [0] is the default and stays implicit: a config without TDNN layers normalises as before.
    cfg = config.normalize(config.yaml_load("input-dim: 2\nlayers:\n - {dim: 4}\n - {type: output, dim: 3, splice: [0]}\n"))
    assert "splice" not in cfg["layers"][1]
    # A model file keeps its layers' offsets.
    net = make(TDNN)
    model_io.save(net, tmp_path / "t.mdl")
    back = model_io.load(tmp_path / "t.mdl")
    assert back.offsets == net.offsets and (back.left_context, back.right_context) == (16, 10)


def test_partition_refuses_tdnn_layers():
    from nnet_tools.model import partition
    with pytest.raises(NnetError, match="layer 'tdnn2' has its own splice"):
        partition.split(config.normalize(config.yaml_load(TDNN)), 2)
