import pytest
import torch

from conftest import SMALL_CONFIG, error_line, run
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
    from conftest import write_egs_dir
    good, bad = make(0), make(1)
    bad.state_dict()["layers.1.affine.bias"][2] = float("nan")
    model_io.save(good, tmp_path / "good.mdl")
    model_io.save(bad, tmp_path / "bad.mdl")
    line = error_line(run("nnet-average-models", tmp_path / "good.mdl", tmp_path / "bad.mdl", tmp_path / "avg.mdl"))
    assert "bad.mdl: non-finite values (NaN or inf) in layers.1.affine.bias; refusing to average it" in line
    write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=20)
    line = error_line(run("nnet-combine", "--use-gpu", "no", tmp_path / "good.mdl", tmp_path / "bad.mdl",
                          tmp_path / "egs/combine.egs", tmp_path / "final.mdl"))
    assert "bad.mdl: non-finite values" in line
    assert not (tmp_path / "avg.mdl").exists() and not (tmp_path / "final.mdl").exists()
