"""What Kaldi's report scripts read: nonlinearity statistics (kept, averaged, printed as
nnet3-info does), SummarizeVector's format, accuracy.report and nnet3_dir_info.pl's line.
The end-to-end check that Kaldi's own patterns match a trained dir's logs is in test_driver.py."""
import re

import numpy as np
import pytest
import torch

from helpers import SMALL_CONFIG, write_egs_dir
from nnet_tools.data import egs
from nnet_tools.model import config, model_io
from nnet_tools.model.nnet import Nnet
from nnet_tools.model.nonlinearity import Nonlinearity
from nnet_tools.model.structure import structure
from nnet_tools.evaluate import model_info
from nnet_tools.report import summary
from nnet_tools.train import average, job

CONFIG = """input-dim: 6
splice: -1:1
layers:
  - {name: tdnn1, type: relu-batchnorm, dim: 16}
  - {name: tdnn2, type: sigmoid, dim: 12}
  - {name: tdnn3, type: tanh-dropout, dim: 10, dropout-proportion: 0.0}
  - {name: output, type: output, dim: 4}
"""


def make(text=CONFIG):
    torch.manual_seed(0)
    return Nnet(config.normalize(config.yaml_load(text)))


def test_stats_are_sums_of_value_derivative_and_squared_output_derivative():
    for kind, derivative in (("relu", lambda y: (y > 0).double()), ("sigmoid", lambda y: y * (1 - y)),
                             ("tanh", lambda y: 1 - y * y)):
        part = Nonlinearity(kind, 5).train()
        x = torch.randn(7, 5, requires_grad=True)
        part(x).sum().backward()  # stats off: nothing stored
        assert float(part.count) == 0 and float(part.value_sum.abs().sum()) == 0
        part.store_stats = True
        ys, grads = [], []
        for rows in (7, 3, 5, 2):
            y = part(torch.randn(rows, 5, requires_grad=True))
            y.register_hook(lambda g: grads.append(g.clone()))
            (y * torch.randn(rows, 5)).sum().backward()
            ys.append(y.detach().double())
        # Sampled as Kaldi samples: value and derivative on passes 1 and 3 (every other one), the
        # output derivative on passes 1-3 (3 in 4).
        stored = torch.cat([ys[0], ys[2]])
        assert float(part.count) == 12 and float(part.oderiv_count) == 15
        assert torch.allclose(part.value_sum, stored.sum(0))
        assert torch.allclose(part.deriv_sum, derivative(stored).sum(0))
        assert torch.allclose(part.oderiv_sumsq, torch.cat(grads[:3]).double().pow(2).sum(0))
        with torch.no_grad():  # evaluation stores nothing
            part(torch.randn(4, 5))
        assert float(part.count) == 12
        part.zero_stats()
        assert float(part.count) == 0 and float(part.oderiv_sumsq.abs().sum()) == 0


def test_a_training_job_zeroes_then_accumulates_over_its_frames(tmp_path):
    write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=200)
    model = make(SMALL_CONFIG)
    (_, relu), = model.nonlinearities()
    relu.count.fill_(1e6)  # stale stats from before: zeroed at the job's start
    opts = job.TrainOptions(learning_rate=0.001, minibatch_size="64")
    _, frames = job.train_one_job(model, egs.EgsArchive(str(tmp_path / "egs" / "egs.1.ark")), opts)
    # 3 minibatches of 64 egs of 2 frames (192 egs; 8 discarded): the 1st and 3rd sampled for
    # values, all 3 for oderiv, 128 hidden rows each (chunk training: 2 frames per eg)
    assert frames == 384
    assert float(relu.count) == 256 and float(relu.oderiv_count) == 384
    value, deriv, oderiv = relu.averages()
    assert (value >= 0).all() and ((deriv >= 0) & (deriv <= 1)).all() and (oderiv > 0).all()
    assert not relu.store_stats  # only while the job trains
    # saved with the model, and read back
    model_io.save(model, tmp_path / "1.mdl")
    (_, back), = model_io.load(tmp_path / "1.mdl").nonlinearities()
    assert torch.equal(back.value_sum, relu.value_sum) and float(back.count) == 256
    model = make(SMALL_CONFIG)
    job.train_one_job(model, egs.EgsArchive(str(tmp_path / "egs" / "egs.1.ark")),
                      job.TrainOptions(learning_rate=0.001, minibatch_size="64", store_component_stats=False))
    assert float(model.nonlinearities()[0][1].count) == 0


def test_averaging_averages_sums_and_counts_as_nnet3_average():
    a, b = make(), make()
    for model, value, deriv, count in ((a, 2.0, 1.0, 2.0), (b, 9.0, 3.0, 3.0)):
        for _, part in model.nonlinearities():
            part.value_sum.fill_(value)
            part.deriv_sum.fill_(deriv)
            part.count.fill_(count)
    average.average_into(a, [a, b], [0.5, 0.5])
    for name, part in a.nonlinearities():
        # sums and counts each averaged: (2 + 9) / 2 over (2 + 3) / 2, i.e. the jobs' averages
        # 1 and 3 weighted by their counts: (2 * 1 + 3 * 3) / 5 = 2.2.
        assert float(part.count) == 2.5
        assert part.averages()[0] == pytest.approx(np.full(part.value_sum.shape, 2.2)), name
        assert part.averages()[1] == pytest.approx(np.full(part.value_sum.shape, 0.8)), name
    c, d = make(), make()
    for model, value in ((c, 4.0), (d, 8.0)):  # equal counts: the mean of the averages
        for _, part in model.nonlinearities():
            part.value_sum.fill_(value)
            part.count.fill_(4.0)
    average.average_into(c, [c, d], [0.5, 0.5])
    assert all(part.averages()[0] == pytest.approx(1.5) for _, part in c.nonlinearities())


def test_models_saved_without_stats_still_load(tmp_path):
    model = make()
    model_io.save(model, tmp_path / "new.mdl")
    blob = torch.load(tmp_path / "new.mdl", weights_only=True)
    blob["state"] = {k: v for k, v in blob["state"].items()
                     if not k.endswith(("value_sum", "deriv_sum", "oderiv_sumsq", "count", "oderiv_count"))}
    torch.save(blob, tmp_path / "old.mdl")
    old = model_io.load(tmp_path / "old.mdl")
    assert all(float(p.count) == 0 for _, p in old.nonlinearities())
    assert torch.equal(old.layers[0].affine.weight, model.layers[0].affine.weight)
    assert structure(old) == structure(model)


def test_summarize_vector_as_kaldi():
    # n = 19: percentile p is the sorted value at index 19 * p // 100.
    assert model_info.summarize_vector(np.arange(1, 21)) == (
        "[percentiles(0,1,2,5 10,20,50,80,90 95,98,99,100)=(1.0,1.0,1.0,1.0 2.0,4.0,10,16,18 19,19,19,20), "
        "mean=10.5, stddev=5.77]")
    assert model_info.summarize_vector([0.005, 0.5, -0.996, 12345.6, 0.0]) == "[ 0.005 0.50 -1.0 12345.6 0 ]"


def test_nnet_info_names_components_as_xconfig_and_kaldi_types():
    model = make()
    lines = model_info.info_lines(model)
    types = dict(re.findall(r"^component name=(\S+) type=(\w+)", "\n".join(lines), re.M))
    assert types == {"tdnn1.affine": "NaturalGradientAffineComponent", "tdnn1.relu": "RectifiedLinearComponent",
                     "tdnn1.batchnorm": "BatchNormComponent", "tdnn2.affine": "NaturalGradientAffineComponent",
                     "tdnn2.sigmoid": "SigmoidComponent", "tdnn3.affine": "NaturalGradientAffineComponent",
                     "tdnn3.tanh": "TanhComponent", "tdnn3.dropout": "DropoutComponent",
                     "output.affine": "NaturalGradientAffineComponent", "output.log-softmax": "LogSoftmaxComponent"}
    assert "output-node name=output input=output.log-softmax dim=4 objective=linear" in lines
    assert "value-avg" not in "\n".join(lines)  # no statistics before training
    (_, relu) = model.nonlinearities()[0]
    relu.value_sum.copy_(torch.arange(16, dtype=torch.float64) * 2)
    relu.deriv_sum.fill_(1.0)
    relu.oderiv_sumsq.fill_(0.25)
    relu.count.fill_(2.0)
    relu.oderiv_count.fill_(1.0)
    line = next(x for x in model_info.info_lines(model) if x.startswith("component name=tdnn1.relu"))
    flat = "percentiles(0,1,2,5 10,20,50,80,90 95,98,99,100)=(0.50,0.50,0.50,0.50 0.50,0.50,0.50,0.50,0.50 " \
           "0.50,0.50,0.50,0.50), mean=0.5, stddev=0"
    assert line == (
        "component name=tdnn1.relu type=RectifiedLinearComponent, dim=16, count=2, self-repaired-proportion=0, "
        "value-avg=[percentiles(0,1,2,5 10,20,50,80,90 95,98,99,100)=(0,0,0,0 1.0,3.0,7.0,12,13 14,14,14,15), "
        f"mean=7.5, stddev=4.61], deriv-avg=[{flat}], oderiv-rms=[{flat}], oderiv-count=1")


def write_logs(exp, times, probs, progress=None, combine=None):
    """A hand-made exp dir: train.<it>.<job>.log with accounting times, compute_prob logs with
    (train, valid) accuracy and log-likelihood per iteration."""
    log = exp / "log"
    log.mkdir(parents=True)
    for it, jobs in times.items():
        for j, t in enumerate(jobs, 1):
            (log / f"train.{it}.{j}.log").write_text(f"# nnet-train-one-job\n# Accounting: time={t} threads=1\n")
    origin = "LOG (nnet3-compute-prob[0.1.0]:PrintTotalStats():nnet-diagnostics.cc:162)"
    for it, ((ta, tl), (va, vl)) in probs.items():
        for subset, acc, ll in (("train", ta, tl), ("valid", va, vl)):
            (log / f"compute_prob_{subset}.{it}.log").write_text(
                f"{origin} Overall log-likelihood for 'output' is {ll} per frame, over 100 frames.\n"
                f"{origin} Overall accuracy for 'output' is {acc} per frame, over 100 frames.\n")
    if progress:
        (log / progress[0]).write_text(progress[1])
    if combine:
        (log / "combine.log").write_text(combine)


def test_accuracy_report_as_kaldi_past_a_day(tmp_path):
    write_logs(tmp_path, {0: [90000, 12], 1: [3600, 3599], 2: [5]},
               {0: ((0.5, -1.5), (0.25, -1.75)), 1: ((0.75, -0.5), (0.875, -0.25)),
                2: ((0.9, -0.2), (0.8, -0.3)), 3: ((0.95, -0.1), (0.9, -0.2)), "final": ((1, 0), (1, 0))})
    assert summary.accuracy_report(tmp_path) == (
        "%Iter\tduration\ttrain_objective\tvalid_objective\tdifference\n"
        "0\t90000.0\t0.5\t0.25\t-0.25\n"
        "1\t3600.0\t0.75\t0.875\t0.125\n"
        "2\t5.0\t0.9\t0.8\t-0.1\n"
        "Total training time is 1 day, 2:00:05\n")  # 90000 + 3600 + 5 s; iteration 3 and final were not trained
    assert summary.format_total(202) == "0:03:22" and summary.format_total(2 * 86400 + 1) == "2 days, 0:00:01"


def test_dir_info_as_nnet3_dir_info_pl(tmp_path):
    probs = {it: ((0.5 + it / 100, -1.0 + it / 100), (0.4 + it / 100, -1.1 + it / 100)) for it in range(14)}
    probs["final"] = ((0.985, -0.015), (0.9, -0.15))
    progress = ("num-parameters: 1234567\ninput-node name=input dim=40\n"
                "output-node name=output input=output.log-softmax dim=10 objective=linear\n")
    write_logs(tmp_path, {it: [1] * (2 if it < 6 else 3) for it in range(13)}, probs,
               ("progress.12.log", progress),
               "LOG (nnet-combine) Combining 3 nnets, objective function changed from -0.2345 to -0.2001\n")
    # 13 trained iterations: the last is 12, two thirds of it int(12 * 0.666) = 7.
    assert summary.dir_info(str(tmp_path)) == (
        f"{tmp_path}: num-iters=13 nj=2..3 num-params=1.2M dim=40->10 combine=-0.23->-0.20 (over 3) "
        "loglike:train/valid[7,12,final]=(-0.93,-0.88,-0.0150/-1.03,-0.98,-0.150) "
        "accuracy:train/valid[7,12,final]=(0.57,0.62,0.9850/0.47,0.52,0.900)")
