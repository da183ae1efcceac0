import pytest
import torch

from helpers import SMALL_CONFIG, error_line, run
from nnet_tools.train import average
from nnet_tools.model import config, model_io
from nnet_tools.errors import NnetError
from nnet_tools.model.nnet import Nnet


def make(seed):
    torch.manual_seed(seed)
    model = Nnet(config.normalize(config.yaml_load(SMALL_CONFIG)))
    model.train()(torch.randn(32, 3, 6))  # batch-norm running stats differ per model
    return model


def test_average_is_mean_of_params_and_batchnorm_buffers():
    models = [make(s) for s in range(3)]
    states = [m.state_dict() for m in models]
    out = average.average_into(make(9), models, [1 / 3] * 3)
    for key, value in out.state_dict().items():
        if value.is_floating_point():
            assert torch.allclose(value, sum(s[key] for s in states) / 3, atol=1e-6), key
    assert any("running_var" in k for k in states[0])


def test_weights_are_normalized():
    assert average.normalized_weights([1, 3], 2) == [0.25, 0.75]
    with pytest.raises(NnetError):
        average.normalized_weights([1], 2)


def test_program_averages_and_refuses_mismatched_models(tmp_path):
    paths = []
    for s in range(2):
        paths.append(tmp_path / f"{s}.mdl")
        model_io.save(make(s), paths[-1])
    run("nnet-average-models", *paths, tmp_path / "avg.mdl", check=True)
    a, b, avg = (model_io.load(p).state_dict() for p in paths + [tmp_path / "avg.mdl"])
    assert torch.allclose(avg["layers.0.affine.weight"], (a["layers.0.affine.weight"] + b["layers.0.affine.weight"]) / 2)
    other = Nnet(config.normalize(config.yaml_load(SMALL_CONFIG.replace("dim: 16", "dim: 8"))))
    model_io.save(other, tmp_path / "other.mdl")
    line = error_line(run("nnet-average-models", paths[0], tmp_path / "other.mdl", tmp_path / "bad.mdl"))
    assert "other.mdl" in line and "structure differs" in line
    assert not (tmp_path / "bad.mdl").exists()


def test_programs_refuse_non_finite_models(tmp_path):
    from helpers import write_egs_dir
    good, bad = make(0), make(1)
    bad.state_dict()["layers.1.affine.bias"][2] = float("nan")
    bad.state_dict()["layers.0.affine.weight"][3, 1] = float("inf")
    model_io.save(good, tmp_path / "good.mdl")
    model_io.save(bad, tmp_path / "bad.mdl")
    line = error_line(run("nnet-average-models", tmp_path / "good.mdl", tmp_path / "bad.mdl", tmp_path / "avg.mdl"))
    assert "bad.mdl: non-finite values (NaN or inf) in layers.0.affine.weight; refusing to average it" in line
    write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=20)
    line = error_line(run("nnet-combine", "--use-gpu", "no", tmp_path / "good.mdl", tmp_path / "bad.mdl",
                          tmp_path / "egs/combine.egs", tmp_path / "final.mdl"))
    # nnet-combine checks every input whole first, a piece at a time, and names every bad tensor.
    assert "bad.mdl: non-finite values (NaN or inf) in layers.0.affine.weight, layers.1.affine.bias;" in line
    assert not (tmp_path / "avg.mdl").exists() and not (tmp_path / "final.mdl").exists()


def _saved(tmp_path, seeds):
    paths = []
    for s in seeds:
        paths.append(tmp_path / f"m{s}.mdl")
        model_io.save(make(s), paths[-1])
    return paths


def _live_inputs_tracker(monkeypatch):
    """Wrap average.state_of so every call records how many tensors of earlier calls are alive."""
    import weakref
    refs, alive_at_call = [], []
    real = average.state_of

    def tracked(source):
        alive_at_call.append(sum(r() is not None for r in refs))
        state = real(source)
        refs.extend(weakref.ref(t) for t in state.values())
        return state
    monkeypatch.setattr(average, "state_of", tracked)
    return alive_at_call


@pytest.mark.parametrize("chunk", [average.CHUNK, 7])
def test_streaming_average_is_the_float64_mean_holding_one_input_tensor(tmp_path, monkeypatch, chunk):
    """chunk 7: every tensor of more than 7 elements averaged in pieces, one piece of one input mapped at a time."""
    monkeypatch.setattr(average, "CHUNK", chunk)
    paths = _saved(tmp_path, range(5))
    weights = average.normalized_weights([1, 2, 3, 4, 5], 5)
    alive = _live_inputs_tracker(monkeypatch)
    out = average.average_files(paths, weights).state_dict()
    assert alive and max(alive) == 0   # no input tensor survives into the next read
    states = [model_io.load(p).state_dict() for p in paths]
    old = average.average_into(make(9), [model_io.load(p) for p in paths], weights).state_dict()
    for key, value in out.items():
        if not value.is_floating_point():
            assert torch.equal(value, states[0][key]), key
            continue
        exact = sum(w * s[key].double() for w, s in zip(weights, states))
        # Summed in float64 and rounded once: the exact mean's float32 rounding, to the last bit.
        assert torch.equal(value, exact.float()), key
        # The previous in-memory float32 sum differs by float32 rounding only.
        assert torch.allclose(value, old[key], rtol=4e-7 * len(paths), atol=1e-7), key


@pytest.mark.parametrize("chunk", [average.CHUNK, 7])
def test_streaming_combine_equals_the_in_memory_one(tmp_path, monkeypatch, caplog, chunk):
    import copy
    import logging
    import math
    from nnet_tools.log import logger
    from nnet_tools.evaluate import diagnostics
    from nnet_tools.train import combine
    monkeypatch.setattr(average, "CHUNK", chunk)   # 7: every model file read in pieces
    torch.manual_seed(3)
    windows, base, paths = torch.randn(128, 3, 6), make(0), []
    with torch.no_grad():
        labels = base.eval()(windows).argmax(-1).reshape(-1)   # the base model is the best one
    for i in range(6):   # noisy copies of one model: averaging them helps, so best_n > 1
        m = copy.deepcopy(base)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.5)
        paths.append(tmp_path / f"c{i}.mdl")
        model_io.save(m, paths[-1])
    models = [model_io.load(p) for p in paths]

    def objf(m):   # the previous implementation's scoring of a copy
        m = copy.deepcopy(m)
        diagnostics.recompute_batchnorm_stats(m, windows)
        s = diagnostics.compute_prob(m, windows, labels)
        return s.objf / s.frames
    best_n, best = 1, objf(models[0])
    running, scores = copy.deepcopy(models[0]), []
    for n in range(2, 7):
        average.average_into(running, [running, models[n - 1]], [(n - 1) / n, 1 / n])
        scores.append(objf(running))
        if scores[-1] > best:
            best_n, best, best_model = n, scores[-1], copy.deepcopy(running)
    assert best_n > 1 and math.isfinite(best)
    diagnostics.recompute_batchnorm_stats(best_model, windows)
    alive = _live_inputs_tracker(monkeypatch)
    with caplog.at_level(logging.INFO, logger=logger.name):
        out, n, _, got = combine.combine(paths, windows, labels, max_objective_evaluations=30)
    assert max(alive) <= 1   # the running average plus at most one input
    assert (n, got) == (best_n, best)
    for (k, a), b in zip(out.state_dict().items(), best_model.state_dict().values()):
        assert torch.equal(a, b), k   # the same float operations: equal to the last bit
    # nnet3-combine's LOG lines, in its words
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == f"objective function using the last model is {objf(models[0]):.6g}"
    assert said[1:6] == [f"Combining last {n} models, objective function is {v:.6g}" for n, v in zip(range(2, 7), scores)]
    assert f"Combining {best_n} nnets, objective function changed from {objf(models[0]):.6g} to {best:.6g}" in said


def test_batchnorm_statistics_are_recomputed_exactly_over_all_frames():
    """nnet3-combine's recomputation: the mean and variance of the layer's input over every frame,
    whatever the chunks (here 4096 + 1 frames: the last chunk of one frame once raised)."""
    from nnet_tools.evaluate import diagnostics
    model = make(0)
    windows = torch.randn(diagnostics.EVAL_BATCH + 1, 3, 6)
    diagnostics.recompute_batchnorm_stats(model, windows)
    bn = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d))
    seen = []
    hook = bn.register_forward_pre_hook(lambda m, inputs: seen.append(inputs[0].double()))
    with torch.no_grad():
        model.eval()(windows)   # the layers before it have no statistics: eval gives the same input
    hook.remove()
    x = torch.cat(seen)
    torch.testing.assert_close(bn.running_mean, x.mean(0).float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bn.running_var, x.var(0, unbiased=False).float(), rtol=1e-5, atol=1e-6)


def test_a_one_frame_minibatch_through_batchnorm_gives_zeros_and_keeps_the_statistics():
    model = make(0)
    bn = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d))
    before = bn.running_mean.clone()
    x = torch.randn(1, 16, requires_grad=True)
    out = bn.train()(x)
    out.sum().backward()
    assert out.abs().max() == 0 and x.grad.abs().max() == 0
    assert torch.equal(bn.running_mean, before)
