import pytest
import torch

from nnet_tools.model import config, model_io
from nnet_tools.errors import NnetError
from nnet_tools.model.nnet import Nnet, frame_windows


def cfg(text):
    return config.normalize(config.yaml_load(text))


BASE = """input-dim: 5
splice: -2:2
layers:
  - {name: a, type: relu-batchnorm-dropout, dim: 8, dropout-proportion: 0.1}
  - {name: b, type: tanh, dim: 6, learning-rate-factor: 0.5, natural-gradient: simple}
  - {name: output, type: output, dim: 3}
"""


def test_splice_range_survives_yaml_and_sets_context():
    c = cfg(BASE)
    assert c["splice"] == [-2, -1, 0, 1, 2]  # YAML 1.1 alone would read -2:2 as -122
    assert config.context(c) == (2, 2)
    assert cfg(BASE.replace("-2:2", "[1, 3]"))["splice"] == [1, 3]
    assert config.context(cfg(BASE.replace("-2:2", "[1, 3]"))) == (0, 3)


def test_defaults_follow_xconfig():
    a, b, out = cfg(BASE)["layers"]
    assert a["max-change"] == 0.75 and out["max-change"] == 1.5
    assert a["natural-gradient"] is True and b["natural-gradient"] == "simple"
    assert out["param-stddev"] == 0.0 and out["bias-stddev"] == 0.0
    assert b["learning-rate-factor"] == 0.5


@pytest.mark.parametrize("text, message", [
    ("input-dim: 5\nlayers: []", "non-empty"),
    ("input-dim: 5\nlayers:\n - {type: relu, dim: 4}\n - {type: relu, dim: 3}", "last layer"),
    ("input-dim: 5\nlayers:\n - {type: swish, dim: 4}\n - {type: output, dim: 3}", "unknown layer type"),
    ("input-dim: 5\nlayers:\n - {type: output, dim: 3, colour: red}", "unknown key"),
    ("input-dim: 5\nsplice: 2:-2\nlayers:\n - {type: output, dim: 3}", "splice"),
    ("layers:\n - {type: output, dim: 3}", "input-dim"),
    ("input-dim: 5\nlayers:\n - {type: relu-dropout, dim: 4, dropout-proportion: 1.5}\n - {type: output, dim: 3}",
     r"layer 1 \(layer1\): dropout-proportion must be a number in \[0, 1\], got 1.5"),
    ("input-dim: 5\nlayers:\n - {type: relu, dim: 4, max-change: fast}\n - {type: output, dim: 3}",
     "max-change must be a number >= 0, got 'fast'"),
])
def test_bad_configs(text, message):
    with pytest.raises(NnetError, match=message):
        cfg(text)


@pytest.mark.parametrize("change, message", [
    (("dim: 8", "dim: true"), "dim must be a positive integer, got True"),        # once a TypeError
    (("input-dim: 5", "input-dim: true"), "input-dim must be a positive integer, got True"),  # once accepted
    (("dim: 8", "dim: 4294967296"), "dim must be a positive integer, got 4294967296"),
    (("-2:2", "[-1.5, 0.7]"), r"splice \[-1.5, 0.7\] is not"),                    # once [-1, 0]
    (("-2:2", "[[0]]"), "splice"), (("-2:2", "[null, 0]"), "splice"),             # once TypeErrors
    (("natural-gradient: simple", "natural-gradient: 1"), "natural-gradient must be true, false or simple"),
    (("name: a,", "name: 'a b',"), "name 'a b' must be one word"),
])
def test_config_values_of_the_wrong_type(change, message):
    assert change[0] in BASE
    with pytest.raises(NnetError, match=message):
        cfg(BASE.replace(*change))


def test_forward_shapes_and_log_probabilities():
    torch.manual_seed(0)
    model = Nnet(cfg(BASE)).eval()
    out = model(torch.randn(7, 5, 5))
    assert out.shape == (7, 3)
    assert torch.allclose(out.exp().sum(1), torch.ones(7), atol=1e-5)


def test_model_file_round_trip_is_weights_only_and_exact(tmp_path):
    torch.manual_seed(0)
    model = Nnet(cfg(BASE))
    model.train()(torch.randn(16, 5, 5)).sum().backward()  # moves batch-norm stats, fills NG state
    model_io.save(model, tmp_path / "m.mdl")
    blob = torch.load(tmp_path / "m.mdl", weights_only=True)
    assert set(blob["state"]) == set(model.state_dict())
    assert not any("pre_" in k for k in blob["state"])  # NG state is never saved
    again = model_io.load(tmp_path / "m.mdl")
    x = torch.randn(4, 5, 5)
    assert torch.equal(model.eval()(x), again.eval()(x))
    assert again.config == model.config


def test_unreadable_model_files(tmp_path):
    (tmp_path / "junk.mdl").write_bytes(b"not a model")
    with pytest.raises(NnetError, match="junk.mdl: not a readable"):
        model_io.load(tmp_path / "junk.mdl")
    with pytest.raises(NnetError, match="no such model file"):
        model_io.load(tmp_path / "missing.mdl")
    (tmp_path / "text.mdl").write_text("hello world\n")     # torch.load raises KeyError on it
    with pytest.raises(NnetError, match="text.mdl: not a readable"):
        model_io.load(tmp_path / "text.mdl")
    torch.save({"format": "something-else"}, tmp_path / "other.mdl")
    with pytest.raises(NnetError, match="not an nnet-tools model"):
        model_io.load(tmp_path / "other.mdl")


def test_frame_windows_pad_edges_by_repeating_frames():
    feats = torch.arange(4.0).unsqueeze(1)
    w = frame_windows(feats, 2, 1)[:, :, 0]
    assert w.tolist() == [[0, 0, 0, 1], [0, 0, 1, 2], [0, 1, 2, 3], [1, 2, 3, 3]]


def test_load_errors_are_whole_sentences(tmp_path):
    # torch's message for a truncated file is a paragraph; a file that is no zip is caught first.
    model_io.save(Nnet(cfg(BASE)), tmp_path / "m.mdl")
    data = (tmp_path / "m.mdl").read_bytes()
    (tmp_path / "cut.mdl").write_bytes(data[:len(data) // 2])
    with pytest.raises(NnetError) as e:
        model_io.load(tmp_path / "cut.mdl")
    assert str(e.value).endswith("cut.mdl: not a readable nnet-tools model file (not a zip archive: truncated, "
                                 "or another format)")
    assert model_io.first_sentence(RuntimeError("word " * 100)).endswith("word ...")


def test_a_model_on_stdin_and_stdout_as_dash(tmp_path):
    """Kaldi's '-': `nnet-average-models a b - | nnet-info -` (once: a file named '-', and
    nnet-info reading that stale file instead of the pipe)."""
    import subprocess
    torch.manual_seed(0)
    model_io.save(Nnet(cfg(BASE)), tmp_path / "a.mdl")
    r = subprocess.run("nnet-average-models a.mdl a.mdl - | nnet-info - && nnet-info - < /dev/null",
                       shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert "num-parameters:" in r.stdout and not (tmp_path / "-").exists()
    assert r.returncode == 1 and r.stderr.splitlines()[-1].endswith(
        "stdin: not a readable nnet-tools model file (empty file)")
