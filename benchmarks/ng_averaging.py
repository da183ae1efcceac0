#!/usr/bin/env python3
"""P4: the parallel payoff. How many samples do N averaged jobs need to reach what 1 job reaches?

Trains with the driver itself (nnet_tools.driver.outer_loop.OuterLoop, the loop steps/train_dnn.py
runs), N = 1, 2, 4, 8 jobs every iteration, for plain SGD, natural-gradient SGD (Kaldi: average
the jobs), and NG with each outer optimizer on the averaged delta (bmuf, nesterov). The only
difference from a real run is the launcher: InProcessLauncher runs the same program command lines
in this process, one job after another (no process starts), and writes the same logs.

Every iteration's model is kept and scored on the held-out test set; samples are the frames the
jobs' logs say they trained on. Targets come from the 1-job run of the same family (plain SGD for
plain SGD, NG-SGD with plain averaging for every NG variant): its final (combined) test accuracy,
that minus 0.5 and 1 point, and its final test log-likelihood. P4 = samples N jobs need / samples
1 job needed (goal <= 1.25 at N = 4 for the best method). Wall time: this process, jobs run one
after another on one thread, so it measures work, not the parallel speed-up a cluster gives.

Learning rate: Kaldi's rule, per-job rate = effective rate x N (the driver's own arithmetic).

Data: Fashion-MNIST (Debian's dataset-fashion-mnist, or --fashion-dir with the four IDX files);
scikit-learn's digits with --data digits (small, for a quick look). Speech frames:
benchmarks/speech_payoff.py, on the same driver and ratios.

    python3 benchmarks/ng_averaging.py [--epochs 6] [--jobs 1,2,4,8] [--methods plain,ng,bmuf,nesterov] [--json F]
"""
import argparse
import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import time

import numpy as np
import torch

from nnet_tools import fileio
from nnet_tools.data import get_egs
from nnet_tools.data.images import load_idx_set, write_data_dir
from nnet_tools.log import logger
from nnet_tools.model import model_io
from nnet_tools.evaluate import diagnostics
from nnet_tools.driver import options, outer_loop
from nnet_tools.driver.launcher import InProcessLauncher

METHODS = {  # name: (natural gradient, outer method)
    "plain": (False, "average"), "ng": (True, "average"), "bmuf": (True, "bmuf"), "nesterov": (True, "nesterov")}
FRAMES_RE = re.compile(r"Overall average objective function for 'output' is \S+ over (\d+) frames")


def make_egs(d, images, labels, num_archives, classes):
    write_data_dir(d, [f"img{i:06d}" for i in range(len(labels))], images, labels)
    opts = get_egs.EgsOptions(frames_per_eg=1, left_context=0, right_context=0, num_utts_subset=300,
                              samples_per_iter=max(1, (len(labels) - 300) // num_archives - 1), num_targets=classes)
    get_egs.get_egs(f"scp:{d}/feats.scp", f"scp:{d}/targets.scp", f"{d}/egs", opts)
    return f"{d}/egs"


def write_config(path, dim, hidden, classes, ng):
    with open(path, "w") as f:
        f.write(f"input-dim: {dim}\nnatural-gradient: {str(ng).lower()}\nlayers:\n"
                + "".join(f"  - {{type: relu-batchnorm, dim: {h}}}\n" for h in hidden)
                + f"  - {{type: output, dim: {classes}}}\n")


def train(egs_dir, exp, cfg, jobs, method, args):
    """One driver run; returns (curve [(samples, test loglik, test acc)], wall seconds)."""
    opts = options.TrainerOptions(num_epochs=args.epochs, jobs_initial=jobs, jobs_final=jobs,
                                  initial_lrate=args.initial_lrate, final_lrate=args.final_lrate,
                                  minibatch_size=args.minibatch, cleanup=False, outer_method=method,
                                  outer_momentum=args.outer_momentum, outer_learning_rate=args.outer_learning_rate,
                                  divergence_threshold=0)  # an arm that blows up and recovers is measured as it ends
    loop = outer_loop.OuterLoop(opts, egs_dir, exp, InProcessLauncher(os.path.join(exp, "log")), name="P4")
    started = time.time()
    with open(os.path.join(exp, "driver.log"), "w") as out, contextlib.redirect_stdout(out):
        loop.run(config=cfg)
    wall = time.time() - started
    samples, points = 0, []
    for it, j, _, _ in loop.plan:
        samples += sum(int(FRAMES_RE.findall(open(f"{exp}/log/train.{it}.{k}.log").read())[-1]) for k in range(1, j + 1))
        points.append((samples, f"{exp}/{it + 1}.mdl"))
    return points, f"{exp}/final.mdl", wall


def score(path, test):
    s = diagnostics.compute_prob(model_io.load(path), *test)
    return s.objf / s.frames, s.correct / s.frames


def curve_of(points, final, test, every):
    chosen = points[every - 1::every]
    if chosen[-1] != points[-1]:
        chosen.append(points[-1])
    return [(n, *score(p, test)) for n, p in chosen] + [(points[-1][0], *score(final, test))]


def samples_to_reach(curve, column, target):
    return next((point[0] for point in curve if point[column] >= target), None)


def experiment(name, train_x, train_y, test_x, test_y, hidden, args):
    dim, classes = train_x.shape[1], int(train_y.max()) + 1
    egs_dir = make_egs(f"{args.tmp}/{name}", train_x, train_y, args.archives, classes)
    test = (torch.from_numpy(test_x.astype(np.float32)).unsqueeze(1), torch.from_numpy(test_y.astype(np.int64)))
    print(f"\n== {name}: model {dim}-{'-'.join(map(str, hidden))}-{classes}, {args.epochs} epochs, effective lrate "
          f"{args.initial_lrate} -> {args.final_lrate} (per job x N), minibatch {args.minibatch}; {len(train_y)} "
          f"training images in {args.archives} archives, {len(test_y)} test images", flush=True)
    curves, walls = {}, {}
    for method in args.methods:
        ng, outer_method = METHODS[method]
        cfg = f"{args.tmp}/{name}/{method}.yaml"
        write_config(cfg, dim, hidden, classes, ng)
        for jobs in args.jobs:
            if jobs == 1 and method == "bmuf":  # bmuf's default momentum 1 - 1/N is 0: plain averaging
                curves[method, 1], walls[method, 1] = curves["ng", 1], walls["ng", 1]
                continue
            exp = f"{args.tmp}/{name}/{method}.{jobs}"
            points, final, walls[method, jobs] = train(egs_dir, exp, cfg, jobs, outer_method, args)
            curves[method, jobs] = curve = curve_of(points, final, test, max(1, len(points) // args.points))
            print(f"{method:>9} x{jobs}: {walls[method, jobs]:6.1f} s, final test acc {curve[-1][2]:.4f}, "
                  f"loglik {curve[-1][1]:.4f} after {curve[-1][0]} samples", flush=True)
    print(f"\nP4 {name}: samples N jobs need / samples 1 job needs "
          f"('-' = never reached, with the value it ended at)")
    ratios = {}
    for method in args.methods:
        one = curves["plain" if method == "plain" else "ng", 1]
        targets = [(2, one[-1][2] - d, f"acc {one[-1][2] - d:.4f}") for d in (0.0, 0.005, 0.01)]
        targets.append((1, one[-1][1], f"loglik {one[-1][1]:.4f}"))
        ratios[method] = ratio_lines(name, method, curves, targets, args.jobs)
    for method in args.methods:
        print(f"P4 {name} {method:>9} wall s: " + "  ".join(f"N={j}: {walls[method, j]:.0f}" for j in args.jobs))
    one_job = ng_vs_plain(name, curves, column=2)
    if args.json:
        write_json(args.json, f"{name}: {len(train_y)} training images in {args.archives} archives, "
                   f"{args.epochs} epochs, model {dim}-{'-'.join(map(str, hidden))}-{classes}; {len(test_y)} test images",
                   args, ratios, curves, walls, one_job, "final test acc")


def ratio_lines(name, method, curves, targets, jobs_list):
    """Print, per target (column, value, label), samples N jobs needed / samples 1 job needed;
    returns {"targets": {label: {N: ratio}}, "worst": {N: worst ratio}} (None: never reached)."""
    one = curves["plain" if method == "plain" else "ng", 1]
    worst, table = {jobs: 0.0 for jobs in jobs_list}, {}
    for column, target, what in targets:
        n1 = samples_to_reach(one, column, target)
        cells, table[what] = [], {}
        for jobs in jobs_list:
            c = curves[method, jobs]
            n = samples_to_reach(c, column, target)
            table[what][jobs] = n / n1 if n else None
            cells.append(f"N={jobs}: {n / n1:.2f}" if n else f"N={jobs}: - ({c[-1][column]:.4f})")
            if worst[jobs] is not None:
                worst[jobs] = max(worst[jobs], n / n1) if n else None
        print(f"P4 {name} {method:>9} {what:<14} 1 job {n1:>8}: " + "  ".join(cells), flush=True)
    return {"targets": table, "worst": worst}


def ng_vs_plain(name, curves, column):
    """NG-SGD against plain SGD in one job: the samples each needs to reach plain SGD's final value."""
    if ("plain", 1) not in curves or ("ng", 1) not in curves:
        return None
    target = curves["plain", 1][-1][column]
    n_plain, n_ng = samples_to_reach(curves["plain", 1], column, target), samples_to_reach(curves["ng", 1], column, target)
    result = {"target": target, "plain_samples": n_plain, "ng_samples": n_ng,
              "plain_final": target, "ng_final": curves["ng", 1][-1][column]}
    print(f"NG vs plain SGD, 1 job, {name}: plain SGD's final {target:.4f} reached by NG after "
          f"{n_ng if n_ng else 'never'} samples, by plain SGD after {n_plain}"
          + (f" ({n_plain / n_ng:.2f}x fewer with NG)" if n_ng else "")
          + f"; NG ends at {result['ng_final']:.4f}", flush=True)
    return result


def write_json(path, data, args, ratios, curves, walls, one_job, final_what, wers=None, tuning=None):
    """The figures benchmarks/seeds.py reads: ratios per arm, final values, wall times, NG vs plain
    (and WER at LMWT 10 per arm, where decoded; the learning-rate factor chosen and what each reached,
    where tuned)."""
    column = 2
    out = {"data": data, "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
           "final_what": final_what, "ng_vs_plain": one_job, "arms": {}}
    for method in args.methods:
        out["arms"][method] = {"ratios": ratios[method]["targets"], "worst": ratios[method]["worst"],
                               "final": {j: curves[method, j][-1][column] for j in args.jobs},
                               "wall": {j: walls[method, j] for j in args.jobs}}
        if wers:
            out["arms"][method]["wer"] = {j: wers[method, j][0] for j in args.jobs}
        if tuning:
            out["arms"][method]["tuning"] = {j: tuning[method, j] for j in args.jobs}
    fileio.write_text(path, json.dumps(out, indent=1))


def arm_arguments(p, epochs, minibatch, minibatch_help=None):
    """The options of the arms (methods x N jobs) and their training, shared with speech_payoff.py."""
    p.add_argument("--epochs", type=float, default=epochs)
    p.add_argument("--jobs", default="1,2,4,8")
    p.add_argument("--methods", default="plain,ng,bmuf,nesterov")
    p.add_argument("--initial-lrate", type=float, default=0.003)
    p.add_argument("--final-lrate", type=float, default=0.0003)
    p.add_argument("--minibatch", default=minibatch, help=minibatch_help)
    p.add_argument("--outer-momentum", type=float, default=None, help="bmuf/nesterov momentum (default: theirs)")
    p.add_argument("--outer-learning-rate", type=float, default=None, help="bmuf/nesterov block learning rate")
    p.add_argument("--json", help="also write the figures here (for benchmarks/seeds.py)")


def parse_arms(p):
    """Parse; --jobs and --methods as lists, checked."""
    args = p.parse_args()
    args.jobs = [int(j) for j in args.jobs.split(",")]
    args.methods = args.methods.split(",")
    if args.jobs[0] != 1 or ("ng" not in args.methods and set(args.methods) - {"plain"}):
        p.error("--jobs must start with 1, and NG variants need 'ng' in --methods (their 1-job reference)")
    return args


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", choices=["fashion", "digits"], default="fashion")
    arm_arguments(p, epochs=6, minibatch="64")
    # Kaldi scatters egs to archives at random: digits' 1137 in 16 would leave some archive short of
    # a 64-eg minibatch, and a job with no minibatch fails (as nnet3-train does).
    p.add_argument("--archives", type=int, default=None, help="default: 16 for fashion, 8 for digits")
    p.add_argument("--points", type=int, default=48, help="test-set scorings per run (plus the final model)")
    p.add_argument("--fashion-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--fashion-train", type=int, default=60000, help="training images used (of 60000)")
    args = parse_arms(p)
    logger.setLevel(logging.WARNING)
    torch.set_num_threads(1)
    if args.archives is None:
        args.archives = 8 if args.data == "digits" else 16
    with tempfile.TemporaryDirectory() as args.tmp:
        if args.data == "digits":
            from sklearn.datasets import load_digits
            digits = load_digits()
            order = np.random.default_rng(0).permutation(len(digits.target))
            x, y = digits.data[order] / 16.0, digits.target[order]
            experiment("digits", x[360:], y[360:], x[:360], y[:360], [256, 256], args)
            return
        (x, y), (tx, ty) = load_idx_set(args.fashion_dir, "train"), load_idx_set(args.fashion_dir, "t10k")
        experiment("fashion-mnist", x[:args.fashion_train], y[:args.fashion_train], tx, ty, [256, 256], args)


if __name__ == "__main__":
    main()
