"""The dropout schedule against the cases of Kaldi's own _self_test() (dropout_schedule.py), and
set-dropout-proportion edits on a model."""
import pytest
import torch

from helpers import SMALL_CONFIG
from nnet_tools.errors import NnetError
from nnet_tools.model import config, edits
from nnet_tools.model.nnet import Nnet
from nnet_tools.driver import dropout_schedule as ds

TWO = "*=0.0,0.5,0.0 lstm.*=0.0,0.3@0.75,0.0"


def close(got, want):
    assert [p for p, _ in got] == [p for p, _ in want]
    assert [v for _, v in got] == pytest.approx([v for _, v in want], abs=1e-8)


def test_parse_as_kaldi():
    # Kaldi keeps the points in descending order; ours ascend. Bare middle values sit at 0.5.
    assert ds.parse(TWO) == [("*", [(0.0, 0.0), (0.5, 0.5), (1.0, 0.0)]),
                             ("lstm.*", [(0.0, 0.0), (0.75, 0.3), (1.0, 0.0)])]
    assert ds.parse("0.0,0.3,0.0") == [("*", [(0.0, 0.0), (0.5, 0.3), (1.0, 0.0)])]
    assert ds.parse("0.0,0.5@0.25,0.0,0.6@0.75,0.0") == [
        ("*", [(0.0, 0.0), (0.25, 0.5), (0.5, 0.0), (0.75, 0.6), (1.0, 0.0)])]
    assert ds.parse("lstm.*=0.0,0.3,0.0@0.75,1.0") == [
        ("lstm.*", [(0.0, 0.0), (0.5, 0.3), (0.75, 0.0), (1.0, 1.0)])]


@pytest.mark.parametrize("text, fraction, want", [
    (TWO, 0.75, [("*", 0.25), ("lstm.*", 0.3)]),
    (TWO, 0.5, [("*", 0.5), ("lstm.*", 0.2)]),
    (TWO, 0.25, [("*", 0.25), ("lstm.*", 0.1)]),
    ("0.0,0.3,0.0", 0.5, [("*", 0.3)]),
    ("0.0,0.3,0.0", 0.0, [("*", 0.0)]),
    ("0.0,0.3,0.0", 1.0, [("*", 0.0)]),
    ("0.0,0.3,0.0", 0.25, [("*", 0.15)]),
    ("0.0,0.5@0.25,0.0,0.6@0.75,0.0", 0.25, [("*", 0.5)]),
    ("0.0,0.5@0.25,0.0,0.6@0.75,0.0", 0.1, [("*", 0.2)]),
    ("lstm.*=0.0,0.3,0.0@0.75,1.0", 0.25, [("lstm.*", 0.15)]),
    ("lstm.*=0.0,0.3,0.0@0.75,1.0", 0.5, [("lstm.*", 0.3)]),
    ("lstm.*=0.0,0.3,0.0@0.75,1.0", 0.9, [("lstm.*", 0.6)]),
    ("0.2,0.4", 1.7, [("*", 0.4)]),  # past the end: clamped to 1, as get_dropout_edit_option does
])
def test_proportions_as_kaldis_self_test(text, fraction, want):
    close(ds.proportions(ds.parse(text), fraction), want)


def test_a_step_takes_the_later_value():
    points = ds.parse("0,0.5@0.5,0.2@0.5,0")[0][1]
    assert ds.value_at(points, 0.5) == pytest.approx(0.2)
    assert ds.value_at(points, 0.25) == pytest.approx(0.25)


def test_edits_string_for_the_job():
    assert ds.edits(ds.parse(TWO), 0.5) == ("set-dropout-proportion name=* proportion=0.5;"
                                            "set-dropout-proportion name=lstm.* proportion=0.2")


@pytest.mark.parametrize("text, message", [
    ("0.5", "must specify at least the start and end dropouts"),
    ("a=b=0,1", "must be 'pattern1=func1 pattern2=func2'"),
    ("0,0.5@0.6,0.3@0.4,0", "data fractions must be in [0, 1] and increasing"),
    ("0,0.5@1.2,0", "data fractions must be in [0, 1] and increasing"),
    ("0,1.5,0", "dropout proportion 1.5 in '0,1.5,0' is not in [0, 1]"),
    ("0,x,0", "cannot parse 'x'"),
    ("0@0.1,0.5", "the first and last proportions are at fractions 0 and 1"),
    ("  ", "empty dropout schedule"),
])
def test_errors(text, message):
    with pytest.raises(NnetError) as e:
        ds.parse(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def dropout_net():
    text = SMALL_CONFIG.replace("{name: hidden, type: relu-batchnorm, dim: 16}",
                                "{name: tdnn1, type: relu-dropout, dim: 8}\n"
                                "  - {name: lstm, type: relu-batchnorm-dropout, dim: 8, dropout-proportion: 0.1}")
    return Nnet(config.normalize(config.yaml_load(text)))


def test_set_dropout_proportion_by_component_name_pattern():
    net = dropout_net()
    assert [name for name, _, _ in net.dropout_parts()] == ["tdnn1.dropout", "lstm.dropout"]
    edits.apply_edits(net, ds.edits(ds.parse(TWO), 0.5))  # "*" then "lstm.*" overrides lstm
    assert [part.p for _, _, part in net.dropout_parts()] == pytest.approx([0.5, 0.2])
    assert [layer.get("dropout-proportion") for layer in net.config["layers"]] == pytest.approx([0.5, 0.2, None])
    assert edits.set_dropout_proportion(net, "tdnn?.dropout", 0.3) == 0  # only '*' is special, as in Kaldi
    assert edits.set_dropout_proportion(net, "*.drop*", 0.0) == 2


def test_dropout_proportion_takes_effect_in_training_mode():
    net = dropout_net().train()
    edits.set_dropout_proportion(net, "*", 1.0)
    x = torch.randn(5, 3, 6)  # splice -1:1
    # Every hidden unit dropped: the output layer sees zeros, so all rows are equal.
    out = net(x)
    assert torch.allclose(out, out[:1].expand_as(out))


def test_name_matches_pattern():
    assert edits.name_matches("lstm1.dropout", "lstm*")
    assert edits.name_matches("lstm1.dropout", "*")
    assert not edits.name_matches("lstm1.dropout", "lstm")
    assert edits.name_matches("a.b", "a.b") and not edits.name_matches("axb", "a.b")


def test_models_differing_only_in_dropout_proportion_can_be_averaged(tmp_path):
    # nnet-combine takes models from several iterations of a dropout schedule.
    from nnet_tools.model import model_io
    from nnet_tools.train.average import check_file_structures
    a, b = dropout_net(), dropout_net()
    edits.set_dropout_proportion(b, "*", 0.3)
    paths = [str(tmp_path / "a.mdl"), str(tmp_path / "b.mdl")]
    model_io.save(a, paths[0])
    model_io.save(b, paths[1])
    check_file_structures(paths)
    b.set_presoftmax_scale(torch.ones(4))
    model_io.save(b, paths[1])
    with pytest.raises(NnetError, match="b.mdl: model structure differs from .*a.mdl"):
        check_file_structures(paths)


def test_show_progress_and_the_outer_step_take_models_of_two_dropout_proportions(tmp_path):
    """A dropout schedule changes the proportion between iterations: nnet-show-progress failed on
    every such iteration, and nnet-outer-step (bmuf) stopped the run."""
    from helpers import run
    from nnet_tools.model import model_io
    from nnet_tools.evaluate.progress import show_progress
    a, b = dropout_net(), dropout_net()
    edits.set_dropout_proportion(b, "*", 0.3)
    assert set(show_progress(a, b)) == {"tdnn1.affine", "lstm.affine", "output.affine"}
    model_io.save(a, tmp_path / "a.mdl")
    model_io.save(b, tmp_path / "b.mdl")
    run("nnet-outer-step", "--method", "bmuf", "--jobs", 2, "--state-out", tmp_path / "1.outer",
        tmp_path / "a.mdl", tmp_path / "b.mdl", tmp_path / "c.mdl", check=True)
    assert "overwrite the model" in run("nnet-outer-step", "--method", "bmuf", "--jobs", 2, "--state-out",
                                        tmp_path / "d.mdl", tmp_path / "a.mdl", tmp_path / "b.mdl", tmp_path / "d.mdl").stderr
