"""Kaldi's further nnet3-train options (l2, backstitch), the model edits a job applies first
(--scale, --edits), proportional shrink and the presoftmax prior scale, each against a case
computed by hand (numpy formulas, no autograd)."""
import math
import re

import numpy as np
import pytest
import torch

from helpers import SMALL_CONFIG, error_line, run, write_egs_dir
from nnet_tools.data import egs, vectors
from nnet_tools.errors import NnetError
from nnet_tools.model import config, edits, model_io, presoftmax
from nnet_tools.model.ng import OnlineNaturalGradient
from nnet_tools.model.nnet import Nnet
from nnet_tools.train import max_change
from nnet_tools.train.job import TrainOptions, train_one_job
from nnet_tools.driver.schedule import shrink_factor

W0 = np.array([[0.5, -0.2], [0.1, 0.3], [-0.4, 0.2]])
B0 = np.array([0.1, 0.0, -0.1])
X = np.array([[1.0, 2.0], [-1.0, 0.5], [0.3, -0.7], [2.0, 1.0]])
Y = np.array([0, 2, 1, 0])


def tiny(l2=None, lrf=1.0, ng=False, max_change=0.0):
    """One affine + log-softmax layer with W0, B0 and (by default) no max-change of its own."""
    layer = {"name": "output", "type": "output", "dim": 3, "max-change": max_change, "learning-rate-factor": lrf}
    if l2 is not None:
        layer["l2-regularize"] = l2
    net = Nnet(config.normalize({"input-dim": 2, "natural-gradient": ng, "layers": [layer]}))
    with torch.no_grad():
        net.layers[0].affine.weight.copy_(torch.tensor(W0))
        net.layers[0].affine.bias.copy_(torch.tensor(B0))
    return net


@pytest.fixture
def one_minibatch(tmp_path):
    """The four egs X, Y as one archive (no context): one minibatch of 4."""
    egs.write_archive(tmp_path / "a.ark", X[:, None, :], Y[:, None], [f"u{i}" for i in range(4)], 0, 0)
    return egs.EgsArchive(tmp_path / "a.ark")


def grad(W, b):
    """d/d(W, b) of sum_n log softmax(W x_n + b)[y_n] = sum_n (onehot - softmax) [x_n, 1]."""
    z = X @ W.T + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    e = np.eye(3)[Y] - p
    return e.T @ X, e.sum(axis=0)


def params(net):
    a = net.layers[0].affine
    return a.weight.detach().double().numpy(), a.bias.detach().double().numpy()


def train(net, archive, **kw):
    opts = dict(learning_rate=0.1, minibatch_size="4", max_param_change=0.0)
    opts.update(kw)
    return train_one_job(net, archive, TrainOptions(**opts))


def test_l2_regularize_one_minibatch_by_hand(one_minibatch):
    # Kaldi: delta = lr_c grad - 2 c lr_c N factor params, lr_c = lr x learning-rate-factor.
    net = tiny(l2=0.01, lrf=2.0)
    train(net, one_minibatch, l2_regularize_factor=0.5)
    gW, gb = grad(W0, B0)
    lr_c, l2 = 0.1 * 2.0, -2 * 0.01 * 0.1 * 2.0 * 4 * 0.5
    W, b = params(net)
    np.testing.assert_allclose(W, W0 + lr_c * gW + l2 * W0, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b, B0 + lr_c * gb + l2 * B0, rtol=1e-6, atol=1e-7)


def test_l2_term_bypasses_natural_gradient(one_minibatch):
    # Same run with and without l2: the NG step is identical, so the difference is the raw l2 term.
    with_l2, without = tiny(l2=0.05, ng=True), tiny(ng=True)
    train(with_l2, one_minibatch)
    train(without, one_minibatch)
    diff = params(with_l2)[0] - params(without)[0]
    np.testing.assert_allclose(diff, -2 * 0.05 * 0.1 * 4 * W0, rtol=1e-4, atol=1e-7)


def test_l2_counts_toward_max_change(one_minibatch):
    net = tiny(l2=100.0)  # a huge l2 step, then the global limit caps the whole delta
    train(net, one_minibatch, max_param_change=0.01)
    W, b = params(net)
    assert math.sqrt(((W - W0) ** 2).sum() + ((b - B0) ** 2).sum()) == pytest.approx(0.01, rel=1e-5)


def test_backstitch_one_minibatch_by_hand(one_minibatch):
    # Step 1: -alpha lr grad at W0; step 2: (1 + alpha) (lr grad - 2 c lr N f W1 / (1 + alpha)) at W1.
    alpha, c = 0.5, 0.02
    net = tiny(l2=c)
    train(net, one_minibatch, backstitch_training_scale=alpha, backstitch_training_interval=1)
    gW, gb = grad(W0, B0)
    W1, b1 = W0 - alpha * 0.1 * gW, B0 - alpha * 0.1 * gb
    gW1, gb1 = grad(W1, b1)
    l2 = -2 * c * 0.1 * 4
    W, b = params(net)
    np.testing.assert_allclose(W, W1 + (1 + alpha) * 0.1 * gW1 + l2 * W1, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b, b1 + (1 + alpha) * 0.1 * gb1 + l2 * b1, rtol=1e-6, atol=1e-7)


def test_backstitch_steps_are_limited_to_alpha_and_1_plus_alpha_times_max_change(one_minibatch):
    # Both steps clipped: step 1 moves alpha m against the gradient, step 2 (1 + alpha) m along it.
    alpha, m = 0.5, 0.01
    net = tiny(max_change=m)
    train(net, one_minibatch, backstitch_training_scale=alpha)

    def unit(gW, gb):
        n = math.sqrt((gW ** 2).sum() + (gb ** 2).sum())
        return gW / n, gb / n
    uW, ub = unit(*grad(W0, B0))
    W1, b1 = W0 - alpha * m * uW, B0 - alpha * m * ub
    uW, ub = unit(*grad(W1, b1))
    W, b = params(net)
    np.testing.assert_allclose(W, W1 + (1 + alpha) * m * uW, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b, b1 + (1 + alpha) * m * ub, rtol=1e-5, atol=1e-7)


def test_backstitch_scales_the_max_change_limits():
    norm, limit = torch.tensor([1.0], dtype=torch.float64), torch.tensor([0.75], dtype=torch.float64)
    # Step 1 of alpha = 0.5: |s| d = 0.5 > sigma m = 0.375 -> f = 0.75.
    r = max_change.max_change_factors(norm, limit, 2.0, scale=-0.5, max_change_scale=0.5)
    assert r.factors.item() == pytest.approx(0.75) and r.scale == -0.5
    # Step 2: |s| d = 1.5 <= 1.5 * 0.75 ... per component 1.125 -> f = 0.75; global 1.5*0.75 < 2*1.5: none.
    r = max_change.max_change_factors(norm, limit, 2.0, scale=1.5, max_change_scale=1.5)
    assert r.factors.item() == pytest.approx(0.75) and r.global_factor == 1.0
    # The global limit is scaled too: D = 0.5 * 4 = 2 > 0.5 * 2 = 1 -> s halves.
    r = max_change.max_change_factors(torch.tensor([4.0], dtype=torch.float64), torch.zeros(1, dtype=torch.float64),
                                      2.0, scale=-0.5, max_change_scale=0.5)
    assert r.global_factor == pytest.approx(0.5) and r.scale == pytest.approx(-0.25)


def test_backstitch_step1_freezes_natural_gradient(one_minibatch, monkeypatch):
    seen = []
    real = OnlineNaturalGradient.updating
    monkeypatch.setattr(OnlineNaturalGradient, "updating", lambda self: seen.append(self.frozen) or real(self))
    train(tiny(ng=True), one_minibatch, backstitch_training_scale=0.3)
    assert seen == [True, True, False, False]  # pre_in and pre_out, step 1 then step 2


def test_frozen_preconditioner_applies_but_does_not_learn():
    torch.manual_seed(0)
    pre = OnlineNaturalGradient(rank=2)
    pre.precondition(torch.randn(8, 5))
    state = (pre.W.clone(), pre.d.clone(), pre.rho.clone())
    pre.frozen = True
    X = torch.randn(8, 5) * 3
    out, _ = pre.precondition(X)
    assert torch.equal(pre.W, state[0]) and torch.equal(pre.d, state[1]) and pre.t == 2
    assert not torch.equal(out, X)  # still preconditions
    pre.frozen = False
    pre.precondition(X)
    assert not torch.equal(pre.W, state[0])


def test_backstitch_needs_zero_momentum_and_sane_values(one_minibatch):
    with pytest.raises(NnetError, match="incompatible with --momentum 0.5"):
        train(tiny(), one_minibatch, backstitch_training_scale=0.3, momentum=0.5)
    with pytest.raises(NnetError, match="--backstitch-training-interval must be >= 1"):
        train(tiny(), one_minibatch, backstitch_training_scale=0.3, backstitch_training_interval=0)
    with pytest.raises(NnetError, match="--l2-regularize-factor must be >= 0"):
        train(tiny(), one_minibatch, l2_regularize_factor=-1)


def test_options_off_leave_training_bit_identical(tmp_path):
    """l2-regularize layers with factor 0 and backstitch scale 0 train exactly as a plain config."""
    archive = egs.EgsArchive(write_egs_dir(tmp_path, num_archives=1, egs_per_archive=200) / "egs.1.ark")

    def trained(text, **kw):
        torch.manual_seed(0)
        net = Nnet(config.normalize(config.yaml_load(text)))
        train_one_job(net, archive, TrainOptions(learning_rate=0.01, minibatch_size="64", srand=3, **kw))
        return torch.cat([t.flatten() for t in net.state_dict().values() if t.is_floating_point()])
    with_l2 = SMALL_CONFIG.replace("dim: 16}", "dim: 16, l2-regularize: 0.01}")
    assert with_l2 != SMALL_CONFIG
    plain = trained(SMALL_CONFIG)
    assert torch.equal(plain, trained(with_l2, l2_regularize_factor=0.0, backstitch_training_interval=3))
    assert not torch.equal(plain, trained(with_l2))


def test_config_validates_l2_and_dropout_proportion():
    def layers(**kw):
        return {"input-dim": 2, "layers": [{"name": "h", "type": "relu-dropout", "dim": 4, **kw}, {"dim": 3}]}
    assert config.normalize(layers(**{"l2-regularize": 0.001}))["layers"][0]["l2-regularize"] == 0.001
    assert "l2-regularize" not in config.normalize(layers())["layers"][0]
    with pytest.raises(NnetError, match=r"layer 1 \(h\): l2-regularize must be a number >= 0, got -1"):
        config.normalize(layers(**{"l2-regularize": -1}))
    with pytest.raises(NnetError, match=r"layer 1 \(h\): dropout-proportion must be a number in \[0, 1\], got 1.5"):
        config.normalize(layers(**{"dropout-proportion": 1.5}))


def test_shrink_factor_and_kaldis_limit():
    assert shrink_factor(50.0, 0.002) == pytest.approx(0.9)
    assert shrink_factor(0.0, 0.1) == 1.0
    with pytest.raises(NnetError, match="proportional-shrink=300.0 is too large, it gives shrink-value=0.4"):
        shrink_factor(300.0, 0.002)


def test_scale_parameters_scales_every_parameter_but_not_batchnorm_stats():
    torch.manual_seed(0)
    net = Nnet(config.normalize(config.yaml_load(SMALL_CONFIG)))
    net.layers[0].post[1].running_mean.fill_(0.3)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    edits.scale_parameters(net, 0.9)
    for key, value in net.state_dict().items():
        expected = before[key] * 0.9 if key.endswith(("weight", "bias")) else before[key]
        assert torch.equal(value, expected), key


def test_presoftmax_prior_scale_by_hand():
    counts = [1.0, 3.0, 0.0, 4.0]  # mean 2 -> smoothed by 0.02
    raw = [(c + 0.02) ** -0.25 for c in counts]
    expected = [r * 4 / sum(raw) for r in raw]
    got = presoftmax.prior_scale(counts)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert got.mean() == pytest.approx(1.0) and got[2] > got[0] > got[1] > got[3]
    with pytest.raises(NnetError, match="all class counts are zero"):
        presoftmax.prior_scale([0, 0])


def test_presoftmax_scale_multiplies_the_logits_and_survives_save_and_load(tmp_path):
    net = tiny()
    old = tmp_path / "old.mdl"
    model_io.save(net, old)  # a file without the scale keeps loading, unscaled
    assert model_io.load(old).layers[-1].presoftmax_scale is None
    scale = torch.tensor([0.5, 1.0, 2.0])
    net.set_presoftmax_scale(scale)
    x = torch.tensor(X, dtype=torch.float32)[:, None, :]
    z = torch.tensor(X @ W0.T + B0, dtype=torch.float32)
    assert torch.allclose(net(x), torch.log_softmax(scale * z, dim=-1), atol=1e-6)
    model_io.save(net, tmp_path / "s.mdl")
    assert torch.equal(model_io.load(tmp_path / "s.mdl")(x), net(x))
    with pytest.raises(NnetError, match="presoftmax scale has 2 values; the model has 3 outputs"):
        net.set_presoftmax_scale([1.0, 2.0])


# --- the programs -------------------------------------------------------------------------

DROPOUT_CONFIG = SMALL_CONFIG.replace("relu-batchnorm,", "relu-batchnorm-dropout,")


@pytest.fixture(scope="module")
def egs_dir(tmp_path_factory):
    return write_egs_dir(tmp_path_factory.mktemp("egs"), num_archives=1, egs_per_archive=256)


@pytest.fixture
def dropout_model(tmp_path):
    (tmp_path / "m.yaml").write_text(DROPOUT_CONFIG)
    run("nnet-init", tmp_path / "m.yaml", tmp_path / "0.mdl", check=True)
    return tmp_path / "0.mdl"


def test_help_lists_the_options():
    out = run("nnet-train-one-job", "--help", check=True).stdout
    for option in ("--l2-regularize-factor", "--backstitch-training-scale", "--backstitch-training-interval",
                   "--scale", "--edits"):
        assert option in out


def test_scale_and_edits_are_applied_before_training(dropout_model, egs_dir, tmp_path):
    r = run("nnet-train-one-job", "--learning-rate", 0, "--scale", 0.5, "--minibatch-size", 64,
            "--edits", "set-dropout-proportion name=hid* proportion=0.25;set-dropout-proportion name=x* proportion=1",
            dropout_model, egs_dir / "egs.1.ark", tmp_path / "1.mdl", check=True)
    assert "Set dropout proportions for 1 components." in r.stderr
    assert "Set dropout proportions for 0 components." in r.stderr
    before, after = model_io.load(dropout_model), model_io.load(tmp_path / "1.mdl")
    for (name, p), q in zip(before.named_parameters(), after.parameters()):
        assert torch.allclose(q, 0.5 * p), name  # learning rate 0: only the scale moved them
    assert after.config["layers"][0]["dropout-proportion"] == 0.25
    assert after.layers[0].post[-1].p == 0.25


def test_backstitch_interval_runs_on_every_other_minibatch(small_model, egs_dir, tmp_path):
    r = run("nnet-train-one-job", "--learning-rate", 0.01, "--minibatch-size", 64, "--backstitch-training-scale", 0.3,
            "--backstitch-training-interval", 2, small_model[1], egs_dir / "egs.1.ark", tmp_path / "1.mdl", check=True)
    # 256 egs of 2 frames, chunk training: 4 minibatches of 64 egs, 128 frames each.
    assert re.search(r"objective function for 'output' is \S+ over 512 frames\.", r.stderr)
    assert re.search(r"objective function for 'output_backstitch' is \S+ over 256 frames\.", r.stderr)  # 2 of 4


@pytest.mark.parametrize("argv, message", [
    (["--backstitch-training-scale", 0.3, "--momentum", 0.9], "incompatible with --momentum 0.9"),
    (["--edits", "set-dropout-proportion proportion=1.5"], "proportion 1.5 is not in [0, 1]"),
    (["--edits", "remove-orphans"], "unsupported edit directive 'remove-orphans'"),
    (["--edits", "set-dropout-proportion name=*"], "expected proportion to be set"),
])
def test_bad_options_give_one_line(dropout_model, egs_dir, tmp_path, argv, message):
    r = run("nnet-train-one-job", "--learning-rate", 0.01, *argv, dropout_model, egs_dir / "egs.1.ark", tmp_path / "1.mdl")
    assert message in error_line(r)
    assert not (tmp_path / "1.mdl").exists()


def test_init_with_presoftmax_prior_scale(tmp_path):
    (tmp_path / "m.yaml").write_text(SMALL_CONFIG)
    vectors.write_vector(tmp_path / "scale.vec", presoftmax.prior_scale([10, 20, 30, 40]))
    run("nnet-init", "--presoftmax-prior-scale", tmp_path / "scale.vec", tmp_path / "m.yaml", tmp_path / "0.mdl", check=True)
    scale = model_io.load(tmp_path / "0.mdl").layers[-1].presoftmax_scale
    np.testing.assert_allclose(scale.numpy(), presoftmax.prior_scale([10, 20, 30, 40]), rtol=1e-6)
    (tmp_path / "short.vec").write_text("[ 1 2 ]\n")
    r = run("nnet-init", "--presoftmax-prior-scale", tmp_path / "short.vec", tmp_path / "m.yaml", tmp_path / "1.mdl")
    assert "short.vec: presoftmax scale has 2 values; the model has 4 outputs" in error_line(r)


def test_backstitch_passes_share_their_dropout_masks(egs_dir, monkeypatch):
    net = Nnet(config.normalize(config.yaml_load(SMALL_CONFIG.replace("relu-batchnorm,", "tanh-dropout,"))))
    masks = []
    real = torch.nn.Dropout.forward
    monkeypatch.setattr(torch.nn.Dropout, "forward", lambda self, x: (lambda y: masks.append(y == 0) or y)(real(self, x)))
    train_one_job(net, egs.EgsArchive(egs_dir / "egs.1.ark"),
                  TrainOptions(learning_rate=0.01, minibatch_size="128", backstitch_training_scale=0.3))
    assert len(masks) == 4 and masks[0].float().mean() > 0.3  # 2 minibatches x 2 passes, p = 0.5
    assert torch.equal(masks[0], masks[1]) and torch.equal(masks[2], masks[3])
    assert not torch.equal(masks[0], masks[2])


def test_text_vectors_and_priors(tmp_path):
    from nnet_tools.model import priors
    vectors.write_vector(tmp_path / "v.vec", [1, 2.5, 0.125])
    assert (tmp_path / "v.vec").read_text().split() == ["[", "1", "2.5", "0.125", "]"]
    assert vectors.read_vector(tmp_path / "v.vec") == [1.0, 2.5, 0.125]
    np.testing.assert_allclose(priors.read(tmp_path / "v.vec", 3), [1 / 3.625, 2.5 / 3.625, 0.125 / 3.625], rtol=1e-6)
    (tmp_path / "bad.vec").write_text("[ 1 x ]")
    with pytest.raises(NnetError, match="bad.vec: Failed to read vector"):
        priors.read(tmp_path / "bad.vec", 2)
    with pytest.raises(NnetError, match="nope.vec: cannot read presoftmax prior scale"):
        vectors.read_vector(tmp_path / "nope.vec", "presoftmax prior scale")
