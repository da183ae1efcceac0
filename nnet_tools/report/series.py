"""Per-iteration series of an experiment dir, read from its logs: what the plots draw
(Kaldi's generate_plots.py reads the same files through log_parse.py)."""
import dataclasses
import glob
import os
import re

from nnet_tools.report import logparse


@dataclasses.dataclass
class ExpSeries:
    exp_dir: str
    prob: dict          # 'accuracy' / 'log-likelihood' -> 'train' / 'valid' -> {iteration: value}
    param_diff: dict    # 'relative' / 'absolute' -> layer -> {iteration: value}
    nonlin: dict        # component -> {'type': str, 'iterations': {iteration: {stat: summary}}}
    jobs: dict          # iteration -> number of training jobs
    lrate: dict         # iteration -> per-job learning rate (the jobs' --learning-rate)
    samples_before: dict  # iteration i -> frames its jobs' logs count over iterations 0..i-1 (what
                          # i.mdl has seen); up to the first iteration with a log that lacks them


def read(exp_dir):
    """Every series of ``exp_dir`` (iterations that lack a line are simply absent)."""
    prob = {key: {subset: {} for subset in ("train", "valid")} for key in ("accuracy", "log-likelihood")}
    for subset in ("train", "valid"):
        for it, path in logparse.numbered_logs(exp_dir, f"compute_prob_{subset}.{{}}.log").items():
            for key, value in logparse.compute_prob(path).items():
                prob[key][subset][it] = value
    param_diff = {"relative": {}, "absolute": {}}
    nonlin = {}
    for it, path in logparse.numbered_logs(exp_dir, "progress.{}.log").items():
        for kind, relative in (("relative", True), ("absolute", False)):
            for layer, value in logparse.parameter_differences(path, relative).items():
                param_diff[kind].setdefault(layer, {})[it] = value
        for name, stats in logparse.nonlinearity_stats(path).items():
            kind = stats.pop("type")
            nonlin.setdefault(name, {"type": kind, "iterations": {}})["iterations"][it] = stats
    jobs, lrate, frames, incomplete = {}, {}, {}, set()
    for path in glob.glob(os.path.join(exp_dir, "log", "train.*.*.log")):
        m = re.search(r"train\.(\d+)\.(\d+)\.log$", path)
        if not m:
            continue
        it = int(m.group(1))
        jobs[it] = jobs.get(it, 0) + 1
        if it not in lrate and (rate := logparse.learning_rate(path)) is not None:
            lrate[it] = rate
        if (count := logparse.train_frames(path)) is None:
            incomplete.add(it)
        frames[it] = frames.get(it, 0) + (count or 0)
    return ExpSeries(exp_dir, prob, param_diff, nonlin, dict(sorted(jobs.items())), dict(sorted(lrate.items())),
                     _samples_before(frames, incomplete))


def _samples_before(frames, incomplete):
    samples, total, it = {}, 0, 0
    while True:
        samples[it] = total
        if it not in frames or it in incomplete:
            return samples
        total += frames[it]
        it += 1
