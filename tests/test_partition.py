"""Partition pre-training: split and merge (nnet_tools.model.partition), their programs, the stage script."""
import re

import pytest
import torch
import yaml

from helpers import REPO, error_line, run, write_egs_dir
from nnet_tools.model import config, model_io, partition
from nnet_tools.driver import manifest
from nnet_tools.errors import NnetError
from nnet_tools.model.nnet import Nnet

# Every layer kind the config language has, mixed NG modes, spliced input: D0 = 5 x 3 = 15.
MIXED = """input-dim: 5
splice: -1:1
layers:
  - {name: a, type: relu-batchnorm, dim: 12}
  - {name: b, type: tanh-dropout, dim: 24, natural-gradient: false}
  - {name: c, type: sigmoid-batchnorm-dropout, dim: 12, natural-gradient: simple}
  - {name: d, type: affine, dim: 6}
  - {name: output, type: output, dim: 7}
"""
NO_DROPOUT = """input-dim: 5
splice: [-2, 0, 2]
layers:
  - {name: a, type: relu-batchnorm, dim: 12}
  - {name: b, type: tanh-batchnorm, dim: 12}
  - {name: output, type: output, dim: 4}
"""


def parse(text):
    return config.normalize(config.yaml_load(text))


@torch.no_grad()
def trained_looking(model, seed):
    """Every float tensor random, batch-norm statistics and the (zero-initialised) output layer too."""
    g = torch.Generator().manual_seed(seed)
    for name, t in model.state_dict().items():
        if t.is_floating_point():
            t.copy_(torch.rand(t.shape, generator=g) + 0.5 if name.endswith("running_var")
                    else torch.randn(t.shape, generator=g))
    return model


def logits(model, windows):
    """The pre-softmax output: the network with the output layer's log-softmax left out."""
    log_softmax, model.layers[-1].post = model.layers[-1].post, torch.nn.Identity()
    try:
        return model(windows)
    finally:
        model.layers[-1].post = log_softmax


def sub_models(part, seed=0):
    return [trained_looking(Nnet(part.sub_config(j)), seed + j) for j in range(part.k)]


@pytest.mark.parametrize("text,k,uneven", [(MIXED, 3, False), (MIXED, 5, True), (NO_DROPOUT, 2, False)],
                         ids=["mixed-k3", "mixed-k5-uneven", "batchnorm-k2"])
def test_merged_model_outputs_the_logit_average_of_the_sub_models(text, k, uneven):
    part = partition.split(parse(text), k, allow_uneven=uneven)
    subs = sub_models(part)
    merged, noise = partition.merge(subs, part, noise_fraction=0)
    assert noise == []
    windows = torch.randn(50, 5, 5, generator=torch.Generator().manual_seed(1))
    for m in subs + [merged]:
        m.eval()
    with torch.no_grad():
        each = torch.stack([logits(m, windows) for m in subs])
        assert torch.allclose(merged(windows), torch.log_softmax(each.mean(0), -1), atol=1e-5)
        summed, _ = partition.merge(subs, part, output_scale=1.0, noise_fraction=0)
        assert torch.allclose(summed.eval()(windows), torch.log_softmax(each.sum(0), -1), atol=1e-5)


def test_logit_average_holds_with_training_mode_batch_norm():
    """Batch-norm is per unit, so batch statistics keep the blocks independent too."""
    part = partition.split(parse(NO_DROPOUT), 2)
    subs = sub_models(part)
    merged, _ = partition.merge(subs, part, noise_fraction=0)
    windows = torch.randn(50, 5, 5, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = torch.log_softmax(torch.stack([logits(m.train(), windows) for m in subs]).mean(0), -1)
        assert torch.allclose(merged.train()(windows), expected, atol=1e-5)


@pytest.mark.parametrize("k", [2, 3, 6])
def test_sub_model_parameter_count(k):
    part = partition.split(parse(MIXED), k)
    d = [15, 12, 24, 12, 6, 7]  # D0 (spliced input) .. DL
    weights = d[0] * d[1] / k + sum(a * b for a, b in zip(d[1:-2], d[2:-1])) / k ** 2 + d[-2] * d[-1] / k
    biases = sum(d[1:-1]) / k + d[-1]
    for j in range(k):
        assert partition.num_parameters(Nnet(part.sub_config(j))) == weights + biases
    merged, _ = partition.merge(sub_models(part), part, noise_fraction=0)
    assert partition.num_parameters(merged) == partition.num_parameters(Nnet(parse(MIXED)))


def test_noise_is_bounded_per_tensor_and_fills_the_zero_cross_blocks():
    part = partition.split(parse(MIXED), 3)
    subs = sub_models(part)
    clean, _ = partition.merge(subs, part, noise_fraction=0)
    noisy, table = partition.merge(subs, part, noise_fraction=0.02, generator=torch.Generator().manual_seed(3))
    amplitudes = {name: a for name, _, a in table}
    assert len(amplitudes) == 2 * len(clean.layers)  # every weight matrix and bias vector
    for (name, c), (_, n) in zip(clean.updatable(), noisy.updatable()):
        for pname in ("weight", "bias"):
            before, after = getattr(c, pname), getattr(n, pname)
            bound = 0.02 * before.abs().max().item()
            assert amplitudes[f"{name}.{pname}"] == pytest.approx(bound)
            delta = (after - before).abs()
            assert delta.max().item() <= bound * (1 + 1e-5)
            if before.numel() >= 100:  # the whole +-bound range is used, not a smaller one
                assert delta.max().item() > 0.9 * bound
    # Hidden-to-hidden layer b (12 -> 24): blocks of 4 inputs x 8 outputs; the rest is zero before noise.
    w_clean, w_noisy = clean.layers[1].affine.weight, noisy.layers[1].affine.weight
    cross = torch.ones(24, 12, dtype=torch.bool)
    for j in range(3):
        cross[8 * j:8 * j + 8, 4 * j:4 * j + 4] = False
    assert (w_clean[cross] == 0).all() and (w_clean[~cross] != 0).all()
    assert (w_noisy[cross] != 0).all()


@pytest.fixture
def split_dir(tmp_path):
    cfg = tmp_path / "full.yaml"
    cfg.write_text(MIXED)
    run("nnet-split-submodels", "--srand", 5, cfg, 3, tmp_path / "split", check=True)
    return cfg, tmp_path / "split"


def test_split_writes_seeded_sub_models_and_merge_restores_the_full_shapes(split_dir, tmp_path):
    cfg, out = split_dir
    subs = [model_io.load(out / f"sub.{j}.mdl") for j in (1, 2, 3)]
    assert [layer["dim"] for layer in subs[0].config["layers"]] == [4, 8, 4, 2, 7]
    assert config.load(out / "sub.2.yaml") == subs[1].config
    assert not torch.equal(subs[0].layers[1].affine.weight, subs[1].layers[1].affine.weight)  # own inits
    saved = yaml.safe_load((out / "partition.yaml").read_text())
    assert saved["num-submodels"] == 3 and saved["blocks"]["b"] == [8, 8, 8]
    # Seeded: the same --srand gives the same sub-models; splitting the model file gives the same split.
    run("nnet-init", cfg, tmp_path / "full.mdl", check=True)
    run("nnet-split-submodels", "--srand", 5, tmp_path / "full.mdl", 3, tmp_path / "again", check=True)
    assert (tmp_path / "again" / "partition.yaml").read_text() == (out / "partition.yaml").read_text()
    assert torch.equal(model_io.load(tmp_path / "again" / "sub.3.mdl").layers[0].affine.weight,
                       subs[2].layers[0].affine.weight)

    paths = [out / f"sub.{j}.mdl" for j in (1, 2, 3)]
    r = run("nnet-merge-submodels", "--partition", out / "partition.yaml", *paths, tmp_path / "merged.mdl", check=True)
    assert "b.weight: max|P| = " in r.stderr and "Merged 3 sub-models" in r.stderr
    merged = model_io.load(tmp_path / "merged.mdl")
    assert merged.config == config.load(cfg)
    full_shapes = {k: v.shape for k, v in Nnet(config.load(cfg)).state_dict().items()}
    assert {k: v.shape for k, v in merged.state_dict().items()} == full_shapes
    # Without the partition file the blocks come from the sub-models themselves: the same model.
    run("nnet-merge-submodels", *paths, tmp_path / "merged2.mdl", check=True)
    for a, b in zip(merged.state_dict().values(), model_io.load(tmp_path / "merged2.mdl").state_dict().values()):
        assert torch.equal(a, b)


def test_the_presoftmax_scale_goes_to_every_sub_model_and_back_to_the_merged_model(tmp_path):
    """--trainer.presoftmax-prior-scale-power was silently ignored by partition pre-training, and
    splitting a model file dropped its scale."""
    part = partition.split(parse(NO_DROPOUT), 2)
    scale = torch.tensor([1.0, 2.0, 0.5, 3.0])
    subs = sub_models(part)
    for m in subs:
        m.set_presoftmax_scale(scale)
    merged, _ = partition.merge(subs, part, noise_fraction=0)
    windows = torch.randn(20, 5, 5, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        each = torch.stack([logits(m.eval(), windows) for m in subs])   # scaled logits
        assert torch.allclose(merged.eval()(windows), torch.log_softmax(each.mean(0), -1), atol=1e-5)
    subs[1].layers[-1].presoftmax_scale = None
    with pytest.raises(NnetError, match="presoftmax scales differ"):
        partition.merge(subs, part, noise_fraction=0)
    (tmp_path / "full.yaml").write_text(NO_DROPOUT)
    (tmp_path / "ps.vec").write_text("[ 1 2 0.5 3 ]\n")
    run("nnet-init", "--presoftmax-prior-scale", tmp_path / "ps.vec", tmp_path / "full.yaml", tmp_path / "full.mdl",
        check=True)
    run("nnet-split-submodels", tmp_path / "full.mdl", 2, tmp_path / "a", check=True)   # the model's own
    run("nnet-split-submodels", "--presoftmax-prior-scale", tmp_path / "ps.vec", tmp_path / "full.yaml", 2,
        tmp_path / "b", check=True)
    for d in ("a", "b"):
        assert torch.equal(model_io.load(tmp_path / d / "sub.2.mdl").layers[-1].presoftmax_scale, scale)
    (tmp_path / "bad.vec").write_text("[ 1 2 ]\n")
    assert "bad.vec: presoftmax scale has 2 values; the model has 4 outputs" in error_line(run(
        "nnet-split-submodels", "--presoftmax-prior-scale", tmp_path / "bad.vec", tmp_path / "full.yaml", 2,
        tmp_path / "c"))


def test_split_errors(tmp_path):
    cfg = tmp_path / "full.yaml"
    cfg.write_text(MIXED)
    assert "need at least 2 sub-models, got 1" in error_line(run("nnet-split-submodels", cfg, 1, tmp_path / "s"))
    line = error_line(run("nnet-split-submodels", cfg, 5, tmp_path / "s"))
    assert "layer 'a': dim 12 is not divisible by 5 sub-models" in line and "--allow-uneven" in line
    assert not (tmp_path / "s").exists()
    assert partition.split(parse(MIXED), 5, allow_uneven=True).blocks[0] == [3, 3, 2, 2, 2]
    with pytest.raises(NnetError, match="layer 'd': dim 6 is smaller than the number of sub-models 7"):
        partition.split(parse(MIXED), 7, allow_uneven=True)
    with pytest.raises(NnetError, match="no hidden layer to split"):
        partition.split(parse("input-dim: 4\nlayers:\n  - {type: output, dim: 3}\n"), 2)


def test_merge_refuses_sub_models_that_do_not_belong_together(split_dir, tmp_path):
    cfg, out = split_dir
    part = out / "partition.yaml"
    other = tmp_path / "other.yaml"
    other.write_text(MIXED.replace("dim: 24", "dim: 48"))
    run("nnet-split-submodels", other, 3, tmp_path / "other", check=True)
    mine = [out / f"sub.{j}.mdl" for j in (1, 2, 3)]
    mixed = [mine[0], tmp_path / "other" / "sub.2.mdl", mine[2]]
    dest = tmp_path / "merged.mdl"
    line = error_line(run("nnet-merge-submodels", *mixed, dest))
    assert "other/sub.2.mdl: sub-model does not match" in line and "layer 'b' dim: 16 vs 8" in line
    line = error_line(run("nnet-merge-submodels", mine[0], mine[1], mine[0], dest))   # once merged as 3
    assert line.endswith(f"{mine[0]}: the same file as {mine[0]}: give each sub-model once")
    line = error_line(run("nnet-merge-submodels", "--partition", part, *mixed, dest))
    assert "other/sub.2.mdl: not sub-model 2 of" in line and "layer 'b' dim: 16 vs 8" in line
    assert not dest.exists()

    # The same checks, library-side (no process start per case).
    models = [model_io.load(p) for p in mine]
    expected = partition.load(part)

    def refusal(models, paths, with_partition=True):
        with pytest.raises(NnetError) as e:
            partition.partition_of(models, paths, expected if with_partition else None, part)
        return str(e.value)
    assert "num-submodels is 3 but 2 sub-models were given" in refusal(models[:2], mine[:2])
    assert "need at least 2 sub-models to merge, got 1" in refusal(models[:1], mine[:1], with_partition=False)
    shifted = Nnet(config.normalize(config.yaml_load(MIXED.replace("input-dim: 5", "input-dim: 6"))))
    assert "input-dim: 6 vs 5" in refusal([models[0], shifted, models[2]], mine, with_partition=False)
    (tmp_path / "bad.yaml").write_text("k: 3\n")
    with pytest.raises(NnetError, match="bad.yaml: not a partition file"):
        partition.load(tmp_path / "bad.yaml")
    (tmp_path / "sums.yaml").write_text(part.read_text().replace("- 8\n", "- 9\n", 1))
    with pytest.raises(NnetError, match=r"blocks: b: need 3 positive sizes summing to 24"):
        partition.load(tmp_path / "sums.yaml")
    with pytest.raises(NnetError, match="--noise-fraction must be finite and >= 0"):
        partition.merge(models, expected, noise_fraction=-1)


STEP = REPO / "steps" / "train_partitioned.py"
TINY = """input-dim: 6
layers:
  - {name: hidden1, type: relu-batchnorm, dim: 16}
  - {name: hidden2, type: relu-batchnorm, dim: 16}
  - {name: output, type: output, dim: 4}
"""


def test_stage_script_job_mode_sharded_data(tmp_path):
    """split -> 2 sub-models, one job per iteration each, on half the archives -> merge -> full model."""
    write_egs_dir(tmp_path / "egs", num_archives=2, egs_per_archive=200, fpe=1, left=0, right=0)
    (tmp_path / "tiny.yaml").write_text(TINY)
    exp = tmp_path / "exp"
    argv = ["python3", STEP, "--sub-data", "shard", "--parallel", "false", "--sub.num-epochs", 2,
            "--sub.initial-effective-lrate", 0.003, "--sub.final-effective-lrate", 0.001, "--trainer.num-epochs", 0.5,
            "--trainer.optimization.num-jobs-final", 1, "--trainer.optimization.minibatch-size", 32,
            "--train-opts", "--trainer.optimization.do-final-combination false",
            tmp_path / "tiny.yaml", tmp_path / "egs", exp]
    r = run(*argv, check=True)
    # Sub-model J trains on its shard only (archive J of 2, renumbered 1), one job at a time.
    for j in (1, 2):
        assert (exp / f"egs.{j}" / "info" / "num_archives").read_text() == "1\n"
        assert (exp / f"egs.{j}" / "egs.1.ark").resolve() == (tmp_path / "egs" / f"egs.{j}.ark").resolve()
        assert f"training on {exp}/egs.{j}/egs.1.ark" in (exp / "log" / f"train_sub.1.{j}.log").read_text()
        assert "Overall accuracy for 'output'" in (exp / "log" / f"compute_prob_valid_sub.final.{j}.log").read_text()
    assert re.search(r"--max-jobs-run 1 JOB=1:2 \S+train_sub\.0\.JOB\.log nnet-train-one-job", r.stdout + r.stderr)
    assert sorted(p.name for p in (exp / "sub.1").iterdir()) == ["final.mdl", "manifest.json"]  # iterations cleaned up
    # The source egs dir: DIR/egs.J is made again by every run, wherever DIR is (a moved DIR resumes).
    assert manifest.read(exp / "sub.2")["egs-dir"] == str(tmp_path / "egs")
    merge_log = (exp / "log" / "merge.log").read_text()
    assert "Merged 2 sub-models (hidden blocks [[8, 8], [8, 8]], output scale 0.5, noise fraction 0.02)" in merge_log
    merged = model_io.load(exp / "merged.mdl")
    assert merged.config == config.normalize(config.yaml_load(TINY))
    for a, b in zip(merged.state_dict().values(), model_io.load(exp / "0.mdl").state_dict().values()):
        assert torch.equal(a, b)  # the full model's training starts from the merged model
    assert (exp / "final.mdl").exists() and (exp / "log" / "train.0.1.log").exists()
    assert "done stages 0..3" in r.stdout
    # Stage 3 again goes on where the full model left off (here: done); it used to start it over.
    again = [*argv[:2], "--stage", 3, *argv[2:]]
    assert "is complete (final.mdl, accuracy.report); nothing to do" in run(*again, check=True).stdout
    # The same command again (no --stage) goes on after the merge of these settings: nothing to do.
    out = run(*argv, check=True).stdout
    assert "going on at stage 3 (the merged model of these settings is done)" in out and "nothing to do" in out


def test_job_mode_sub_models_go_on_where_they_stopped(tmp_path):
    """Stage 1 in job mode trained its sub-models from iteration 0 again on every rerun."""
    write_egs_dir(tmp_path / "egs", num_archives=2, egs_per_archive=100, fpe=1, left=0, right=0)
    (tmp_path / "tiny.yaml").write_text(TINY)
    exp = tmp_path / "exp"
    argv = ["python3", STEP, "--stop-stage", 1, "--sub.num-epochs", 1, "--cleanup", "false",
            "--trainer.optimization.minibatch-size", 32, tmp_path / "tiny.yaml", tmp_path / "egs", exp]
    # The full model's options are checked first: they failed after the sub-models had trained.
    early = run(*argv[:2], *argv[4:])
    assert early.returncode == 1 and "num-jobs-final 8 > number of archives 2" in early.stderr
    assert not (exp / "split").exists()
    run(*argv, check=True)
    finals = [model_io.load(exp / f"sub.{j}" / "final.mdl").state_dict() for j in (1, 2)]
    # 1 epoch of 2 archives: iterations 0 and 1. As if the run stopped during iteration 1, after
    # sub-model 1's job but before sub-model 2's.
    (exp / "sub.2" / "2.mdl").unlink()
    for j in (1, 2):
        (exp / f"sub.{j}" / "final.mdl").unlink()
        (exp / "log" / f"train_sub.0.{j}.log").write_text("untouched\n")
    out = run(*argv[:2], "--stage", 1, *argv[2:], check=True).stdout
    assert "resuming the sub-models at iteration 1 (every sub.J has 1.mdl)" in out
    assert "Sub-models iter: 0/" not in out and "Sub-models iter: 1/1" in out
    assert (exp / "log" / "train_sub.0.1.log").read_text() == "untouched\n"
    for j, before in zip((1, 2), finals):   # the same seeds and inputs: the same sub-models
        after = model_io.load(exp / f"sub.{j}" / "final.mdl").state_dict()
        assert all(torch.equal(before[name], after[name]) for name in before)
    out = run(*argv, check=True).stdout   # no --stage: after the split these settings made (it started over)
    assert "going on at stage 1 (the split of these settings is done)" in out
    assert "the sub-models are trained" in out and "Sub-models iter" not in out
    assert not (exp / "driver.lock").exists()   # held while stages 0-2 ran
    # A model that does not load is passed over (it was trusted, and every resume failed on it).
    for name in ("2.mdl", "final.mdl"):
        (exp / "sub.1" / name).write_text("half a model")
    r = run(*argv[:2], "--stage", 1, *argv[2:], check=True)
    assert f"WARNING: not resuming from {exp}/sub.1/2.mdl" in r.stderr
    assert "resuming the sub-models at iteration 1" in r.stdout
    half = [*argv[2:5], 0.5, *argv[6:]]
    changed = run(*argv[:2], "--stage", 1, *half)
    assert changed.returncode == 1 and "sub.1/manifest.json: the sub-models were started with other settings " \
        "(num-epochs: 1.0 -> 0.5); run with --stage 0 to train them over" in changed.stderr
    assert "to resume" not in changed.stderr   # the same command would be refused again
    (exp / "sub.2" / "manifest.json").unlink()   # it threw away both sub-models' work without a word
    gone = run(*argv[:2], "--stage", 1, *argv[2:])
    assert gone.returncode == 1 and "sub.2/manifest.json: missing, so this sub-model's settings are unknown" \
        in gone.stderr and (exp / "sub.1" / "final.mdl").exists()
    unsplit = run(*argv[:2], "--stage", 1, *argv[2:-1], tmp_path / "new")
    assert unsplit.returncode == 1 and "to resume" not in unsplit.stderr
    assert "split/sub.1.mdl: no such file; the sub-models start from the split (run with --stage 0)" in unsplit.stderr
    out = run(*argv[:2], "--stage", 0, *half, check=True).stdout    # a new split, trained over
    assert "Sub-models iter: 0/0" in out and not (exp / "sub.1" / "2.mdl").exists()
    assert "sub-models start at iteration 0: removed 6 later models of an earlier run" in out   # 1.mdl, 2.mdl, final.mdl each


def test_stage_script_driver_mode_runs_a_driver_per_sub_model(tmp_path):
    write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=200, fpe=1, left=0, right=0)
    (tmp_path / "tiny.yaml").write_text(TINY)
    exp = tmp_path / "exp"
    run("python3", STEP, "--sub-mode", "driver", "--stop-stage", 1, "--sub.num-epochs", 1,
        "--trainer.optimization.minibatch-size", 32, "--train-opts", "--trainer.optimization.do-final-combination false",
        tmp_path / "tiny.yaml", tmp_path / "egs", exp, check=True)
    for j in (1, 2):
        log = (exp / "log" / f"train_sub.{j}.log").read_text()
        assert log.startswith("# ") and "train_dnn.py" in log.splitlines()[0] and "# Ended (code 0)" in log
        assert (exp / f"sub.{j}" / "final.mdl").exists() and (exp / f"sub.{j}" / "log" / "train.0.1.log").exists()
    assert not (exp / "merged.mdl").exists()  # --stop-stage 1
