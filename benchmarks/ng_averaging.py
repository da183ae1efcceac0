#!/usr/bin/env python3
"""P4: does natural gradient help one job, and does it keep 4 averaged jobs close to 1 job?

For plain SGD and NG-SGD, with 1 job and with 4 jobs averaged every iteration, trains with the
driver's own schedule (steps/train_dnn.py's arithmetic, the library's training job and averaging,
run in this process to skip process starts) and prints validation log-likelihood and accuracy
against total samples processed, on a held-out test set. P4 = samples 4 jobs need to reach an
accuracy / samples 1 job needed for it (goal <= 1.25 for NG); the targets are the 1-job run's
final accuracy and that minus 0.5 and 1 point, and its final log-likelihood.

Data: scikit-learn's digits always; Fashion-MNIST too when its IDX files are found
(Debian's dataset-fashion-mnist: /usr/share/datasets/fashion-mnist, or --fashion-dir).

    python3 benchmarks/ng_averaging.py [--epochs 10] [--fashion-dir DIR] [--fashion-train 60000]
"""
import argparse
import copy
import logging
import tempfile

import numpy as np
import torch

from nnet_tools.train import average
from nnet_tools.model import config
from nnet_tools.report import diagnostics
from nnet_tools.data import egs, get_egs
from nnet_tools.train import schedule
from nnet_tools.train import job as train
from nnet_tools.errors import NnetError
from nnet_tools.data.images import load_idx_set, write_data_dir
from nnet_tools.log import logger
from nnet_tools.train.minibatch import halve
from nnet_tools.model.nnet import Nnet


def make_egs(d, images, labels, num_archives, classes):
    write_data_dir(d, [f"img{i:06d}" for i in range(len(labels))], images, labels)
    opts = get_egs.EgsOptions(frames_per_eg=1, left_context=0, right_context=0, num_utts_subset=300,
                              samples_per_iter=max(1, (len(labels) - 300) // num_archives - 1), num_targets=classes)
    get_egs.get_egs(f"scp:{d}/feats.scp", f"scp:{d}/targets.scp", f"{d}/egs", opts)
    return f"{d}/egs"


def model_config(dim, hidden, classes, ng):
    text = (f"input-dim: {dim}\nnatural-gradient: {str(ng).lower()}\nlayers:\n"
            + "".join(f"  - {{type: relu-batchnorm, dim: {h}}}\n" for h in hidden) + f"  - {{type: output, dim: {classes}}}\n")
    return config.normalize(config.yaml_load(text))


def run(egs_dir, test, cfg, jobs, args):
    """Kaldi's outer loop with a fixed number of jobs; returns [(samples processed, loglik, acc)]."""
    torch.manual_seed(0)
    model = Nnet(cfg)
    num_archives = egs.read_info(egs_dir, "num_archives")
    curve, samples = [], 0
    for it, j, lrate, processed in schedule.plan(args.epochs, num_archives, 1, jobs, jobs, args.initial_lrate,
                                                 args.final_lrate):
        outs, objfs = [], []
        for job in range(1, j + 1):
            path, frame = egs.job_archive(egs_dir, job, processed)
            net = copy.deepcopy(model)
            opts = train.TrainOptions(learning_rate=lrate * j, frame=frame, srand=it,
                                      minibatch_size=halve(args.minibatch) if it == 0 else args.minibatch,
                                      max_param_change=2.0 / np.sqrt(2) if it == 0 else 2.0)
            objf, frames = train.train_one_job(net, egs.EgsArchive(path), opts)
            outs.append(net)
            objfs.append(objf)
            samples += frames
        if it == 0:
            model = outs[int(np.argmax(objfs))]
        else:
            keep = [n for n, o in zip(outs, objfs) if o >= max(objfs) - 1.0]
            model = average.average_into(outs[0], keep, [1 / len(keep)] * len(keep))
        s = diagnostics.compute_prob(model, *test)
        curve.append((samples, s.objf / s.frames, s.correct / s.frames))
    return curve


def samples_to_reach(curve, column, target):
    return next((point[0] for point in curve if point[column] >= target), None)


def experiment(name, train_x, train_y, test_x, test_y, hidden, args):
    dim, classes = train_x.shape[1], int(train_y.max()) + 1
    egs_dir = make_egs(f"{args.tmp}/{name}", train_x, train_y, 8, classes)
    test = (torch.from_numpy(test_x.astype(np.float32)).unsqueeze(1), torch.from_numpy(test_y.astype(np.int64)))
    print(f"\n== {name}: model {dim}-{'-'.join(map(str, hidden))}-{classes}, {args.epochs} epochs, "
          f"effective lrate {args.initial_lrate} -> {args.final_lrate}, minibatch {args.minibatch}")
    print(f"{len(train_y)} training images in 8 archives (300 held out for Kaldi's diagnostics), {len(test_y)} test images")
    print(f"{'run':<16}{'samples':>10}{'test loglik':>14}{'test acc':>11}")
    curves = {}
    for ng in (False, True):
        for jobs in (1, 4):
            key = f"{'NG-SGD' if ng else 'plain SGD'} x{jobs}"
            curves[key] = curve = run(egs_dir, test, model_config(dim, hidden, classes, ng), jobs, args)
            for n, ll, acc in curve[max(1, len(curve) // 5) - 1::max(1, len(curve) // 5)]:
                print(f"{key:<16}{n:>10}{ll:>14.4f}{acc:>11.4f}")
    for method in ("plain SGD", "NG-SGD"):
        one, four = curves[f"{method} x1"], curves[f"{method} x4"]
        targets = [(2, one[-1][2] - d, f"acc {one[-1][2] - d:.4f}") for d in (0.0, 0.005, 0.01)]
        for column, target, what in targets + [(1, one[-1][1], f"loglik {one[-1][1]:.4f}")]:
            n1, n4 = samples_to_reach(one, column, target), samples_to_reach(four, column, target)
            ratio = f"{n4 / n1:.2f}" if n4 else f"not reached (4 jobs ended at {four[-1][column]:.4f})"
            print(f"P4 {name} {method}: test {what}: 1 job {n1} samples, 4 jobs {n4 or '-'}; ratio {ratio}")
    print(f"{name}: final test acc, NG vs plain, 1 job: {curves['NG-SGD x1'][-1][2]:.4f} vs {curves['plain SGD x1'][-1][2]:.4f}; "
          f"4 jobs: {curves['NG-SGD x4'][-1][2]:.4f} vs {curves['plain SGD x4'][-1][2]:.4f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=float, default=10)
    p.add_argument("--initial-lrate", type=float, default=0.003)
    p.add_argument("--final-lrate", type=float, default=0.0003)
    p.add_argument("--minibatch", default="64")
    p.add_argument("--fashion-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--fashion-train", type=int, default=20000, help="training images used (of 60000)")
    args = p.parse_args()
    logger.setLevel(logging.WARNING)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as args.tmp:
        from sklearn.datasets import load_digits
        digits = load_digits()
        order = np.random.default_rng(0).permutation(len(digits.target))
        x, y = digits.data[order] / 16.0, digits.target[order]
        experiment("digits", x[360:], y[360:], x[:360], y[:360], [256, 256], args)
        try:
            (x, y), (tx, ty) = load_idx_set(args.fashion_dir, "train"), load_idx_set(args.fashion_dir, "t10k")
        except NnetError as e:
            print(f"\nFashion-MNIST skipped: {e}")
            return
        experiment("fashion-mnist", x[:args.fashion_train], y[:args.fashion_train], tx, ty, [256, 256], args)


if __name__ == "__main__":
    main()
