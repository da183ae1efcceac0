"""P6: partition pre-training (steps/train_partitioned.py) against the full model trained from scratch
by the same driver (steps/train_dnn.py), on Fashion-MNIST, run one after the other in one process.

What is measured, in wall-clock seconds on this machine:
- baseline: steps/train_dnn.py from a random init, --baseline-jobs jobs per iteration. Its final test
  accuracy is the target; its own time to target is when its first model reached that accuracy.
- partitioned, parallel: stages 0-1 of steps/train_partitioned.py (split; the K sub-models trained
  at the same time, one job per sub-model per iteration), timed as a whole; then stages 2-3 (merge;
  the merged model trained by the driver), timed to each model it writes.
- partitioned, sequential: stages 0-1 again with --parallel false (one job at a time) in another
  dir. Same seeds, so the same sub-models (the largest difference is printed); the merge and
  full-model phase of the parallel run is added to it rather than run twice.
- the merge noise: each further --noise-fractions value merges the parallel run's sub-models again
  with that noise (stages 2-3 in another dir) and trains the merged model the same way; its row
  counts the same sub-model phase.
Time to target = sub-model phase + merge + full-model training up to its first model whose test
accuracy reaches the target. Test accuracies (10k images) are computed afterwards, outside the
timed runs, from the models the drivers keep (--cleanup false). Every job is one process with one
thread. Parallel K sub-models want K cores; with fewer they share them. The driver runs three
diagnostics per iteration in the background; the sub-model jobs run none. A second baseline with
--also-baseline-jobs jobs (the data-parallel driver on all cores) is the resource-matched reference
for the parallel rows. Load from other processes on the machine changes wall times; the load
average is printed. Test accuracy moves by ~0.1-0.2 points between settings, so "to target-0.1" is
printed beside the exact target.

Usage: python benchmarks/partition.py [--model mlp4] [--ks 2,4] [--work /tmp/partition-bench]
           [--idx-dir /usr/share/datasets/fashion-mnist] [--skip-sequential] [--reuse-baseline]
           [--noise-fractions 0.02,0] [--json FILE]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from nnet_tools.model import config as config_mod
from nnet_tools.model import model_io, partition
from nnet_tools.data import tables
from nnet_tools.model.nnet import Nnet

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "fashion_mnist"
TOLERANCE = 0.1  # points of test accuracy: 10 of 10000 images


def get_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--idx-dir", default="/usr/share/datasets/fashion-mnist")
    a("--work", default="/tmp/partition-bench", help="data, egs and experiment dirs (data and egs are reused)")
    a("--steps", default=str(REPO / "steps"), help="the steps/ dir to run")
    a("--model", default="mlp4", help="recipes/fashion_mnist/conf/<model>.yaml")
    a("--ks", default="2,4", help="numbers of sub-models")
    a("--samples-per-iter", type=int, default=30000, help="egs per archive (Fashion-MNIST: 2 archives)")
    a("--minibatch", default="512")
    a("--lrate", default="0.004,0.0004", help="initial,final effective learning rate: baseline and sub-models")
    a("--base-epochs", type=float, default=4)
    a("--sub-epochs", type=float, default=3)
    a("--full-epochs", type=float, default=1, help="epochs of the merged model")
    a("--full-lrate", default="0.001,0.0001", help="initial,final effective learning rate of the merged model")
    a("--baseline-jobs", type=int, default=1, help="jobs per iteration of the baseline and the merged model")
    a("--also-baseline-jobs", type=int, default=2, help="a second baseline with this many jobs (0: none)")
    a("--skip-sequential", action="store_true")
    a("--reuse-baseline", action="store_true", help="reuse the baseline runs (and their timings) in --work")
    a("--noise-fractions", default="0.02", help="merge noise of the partitioned runs; values after the first "
                                              "are extra rows on the same sub-models")
    a("--json", help="also write the table here (for benchmarks/seeds.py)")
    return p.parse_args()


def sh(argv, log):
    """Run argv (output to log); returns its wall time."""
    start = time.time()
    with open(log, "w") as f:
        r = subprocess.run([str(a) for a in argv], stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        sys.exit(f"benchmarks/partition.py: failed ({r.returncode}): {' '.join(map(str, argv))}; see {log}")
    return time.time() - start


def say(text):
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {text}", file=sys.stderr, flush=True)


class TestSet:
    def __init__(self, data):
        feats = np.concatenate([m for _, m in tables.read_matrices(f"scp:{data}/feats.scp")])
        labels = np.concatenate([v for _, v in tables.read_int_vectors(f"scp:{data}/targets.scp")])
        self.x = torch.from_numpy(feats)[:, None, :]
        self.y = torch.from_numpy(labels.astype(np.int64))

    @torch.no_grad()
    def accuracy(self, path):
        model = model_io.load(path).eval()
        return (model(self.x).argmax(1) == self.y).double().mean().item() * 100


class Run:
    """One row: an optional sub-model phase (seconds), then a driver dir whose models are timed from start."""

    def __init__(self, name, exp_dir, start, wall, test, sub=0.0):
        its = sorted((int(m.group(1)), p) for p in Path(exp_dir).glob("*.mdl")
                     if (m := re.fullmatch(r"(\d+)\.mdl", p.name)))
        paths = [p for _, p in its] + [Path(exp_dir) / "final.mdl"]
        self.name, self.sub, self.total = name, sub, sub + wall
        self.points = [(p.stat().st_mtime - start, test.accuracy(p)) for p in paths]
        self.final = self.points[-1][1]

    def time_to(self, target):
        return next((self.sub + t for t, acc in self.points if acc >= target - 1e-9), None)


def main():
    args = get_args()
    torch.set_num_threads(1)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data, egs = work / "data", work / f"egs{args.samples_per_iter}"
    config = RECIPE / "conf" / f"{args.model}.yaml"
    steps = Path(args.steps)
    lo, hi = args.lrate.split(",")
    noises = [float(x) for x in args.noise_fractions.split(",")]
    full_lo, full_hi = args.full_lrate.split(",")
    if not (data / "test" / "feats.scp").exists():
        say("preparing data")
        sh(["python3", RECIPE / "local" / "prepare_data.py", "--idx-dir", args.idx_dir, data], work / "prepare.log")
    if not (egs / "info" / "num_archives").exists():
        say("dumping egs")
        sh([steps / "get_egs.sh", "--frames-per-eg", 1, "--left-context", 0, "--right-context", 0,
            "--samples-per-iter", args.samples_per_iter, "--num-utts-subset", 1000, "--num-targets", 10,
            data / "train", egs], work / "egs.log")
    test = TestSet(data / "test")
    common = ["--trainer.optimization.minibatch-size", args.minibatch, "--cleanup", "false"]

    def baseline(jobs):
        exp = work / f"{args.model}.base{jobs}"
        saved = work / f"{exp.name}.json"
        if args.reuse_baseline and saved.exists():
            start, wall = json.loads(saved.read_text())
        else:
            say(f"baseline, {jobs} job(s)")
            shutil.rmtree(exp, ignore_errors=True)
            start = time.time()
            wall = sh([steps / "train_dnn.py", "--config", config, "--trainer.num-epochs", args.base_epochs,
                       "--trainer.optimization.num-jobs-initial", jobs, "--trainer.optimization.num-jobs-final", jobs,
                       "--trainer.optimization.initial-effective-lrate", lo,
                       "--trainer.optimization.final-effective-lrate", hi, *common,
                       "--egs.dir", egs, "--dir", exp], work / f"{exp.name}.log")
            saved.write_text(json.dumps([start, wall]))
        return Run(f"baseline ({jobs} job{'s' if jobs > 1 else ''})", exp, start, wall, test)

    base = baseline(args.baseline_jobs)
    rows = [base] + ([baseline(args.also_baseline_jobs)] if args.also_baseline_jobs else [])
    notes = []
    for k in [int(x) for x in args.ks.split(",")]:
        opts = ["--num-submodels", k, "--sub.num-epochs", args.sub_epochs,
                "--sub.initial-effective-lrate", lo, "--sub.final-effective-lrate", hi,
                "--trainer.num-epochs", args.full_epochs,
                "--trainer.optimization.initial-effective-lrate", full_lo,
                "--trainer.optimization.final-effective-lrate", full_hi,
                "--trainer.optimization.num-jobs-initial", args.baseline_jobs,
                "--trainer.optimization.num-jobs-final", args.baseline_jobs, *common, "--train-opts", "--cleanup false"]
        noise = ["--noise-fraction", noises[0]]
        exp = work / f"{args.model}.part{k}"
        shutil.rmtree(exp, ignore_errors=True)
        say(f"k={k}: sub-models in parallel")
        sub_par = sh([steps / "train_partitioned.py", "--stop-stage", 1, *opts, *noise, config, egs, exp],
                     work / f"{exp.name}.subs.log")
        say(f"k={k}: merge and full model")
        start = time.time()
        rest = sh([steps / "train_partitioned.py", "--stage", 2, *opts, *noise, config, egs, exp],
                  work / f"{exp.name}.full.log")
        par = Run(f"k={k} parallel", exp, start, rest, test, sub=sub_par)
        rows.append(par)
        for other in noises[1:]:
            remerged = work / f"{exp.name}.noise{other:g}"
            shutil.rmtree(remerged, ignore_errors=True)
            shutil.copytree(exp / "split", remerged / "split")
            for j in range(1, k + 1):
                (remerged / f"sub.{j}").mkdir()
                shutil.copy(exp / f"sub.{j}" / "final.mdl", remerged / f"sub.{j}" / "final.mdl")
            say(f"k={k}: merge with noise {other:g} and full model")
            start_other = time.time()
            wall = sh([steps / "train_partitioned.py", "--stage", 2, *opts, "--noise-fraction", other, config, egs,
                       remerged], work / f"{remerged.name}.full.log")
            rows.append(Run(f"k={k} par., noise {other:g}", remerged, start_other, wall, test, sub=sub_par))
        subs = [test.accuracy(exp / f"sub.{j}" / "final.mdl") for j in range(1, k + 1)]
        sizes = [partition.num_parameters(model_io.load(exp / "split" / f"sub.{j}.mdl")) for j in range(1, k + 1)]
        notes.append(f"k={k}: sub-model parameters {sizes}; their test accuracy {', '.join(f'{a:.2f}' for a in subs)}; "
                     f"merged + full-model training (test accuracy @ seconds after the merge started): "
                     + " ".join(f"{acc:.2f}@{t:.0f}" for t, acc in par.points))
        if not args.skip_sequential:
            seq = work / f"{args.model}.part{k}.seq"
            shutil.rmtree(seq, ignore_errors=True)
            say(f"k={k}: sub-models one after another")
            sub_seq = sh([steps / "train_partitioned.py", "--stop-stage", 1, "--parallel", "false", *opts, config, egs, seq],
                         work / f"{seq.name}.subs.log")
            diff = max((a - b).abs().max().item()
                       for j in range(1, k + 1)
                       for a, b in zip(model_io.load(exp / f"sub.{j}" / "final.mdl").state_dict().values(),
                                       model_io.load(seq / f"sub.{j}" / "final.mdl").state_dict().values()))
            notes.append(f"k={k}: sequential sub-models differ from the parallel ones by at most {diff:.3g}")
            rows.append(Run(f"k={k} sequential", exp, start, rest, test, sub=sub_seq))
    say("done")

    target = base.final
    print(f"\nP6 partition pre-training, Fashion-MNIST, {args.model} ({partition.num_parameters(Nnet(config_mod.load(config)))} "
          f"parameters), {os.cpu_count()} CPUs, one thread per job, load average now {os.getloadavg()[0]:.1f}")
    print(f"settings: {args.samples_per_iter} egs/archive, minibatch {args.minibatch}, effective lrate {args.lrate} for the "
          f"baseline ({args.base_epochs} epochs) and the sub-models ({args.sub_epochs} epochs, one job each, all data), "
          f"{args.full_lrate} for the merged model ({args.full_epochs} epochs); {args.baseline_jobs} job(s) per iteration; "
          f"merge noise {noises[0]:g}, output scale 1/k")
    print(f"target = the baseline's final test accuracy, {target:.2f}%; speed-up = baseline's time to it / row's time to it\n")
    print(f"{'':20} {'sub-models':>10} {'to target':>11} {'speed-up':>8} {f'to -{TOLERANCE}':>11} {'speed-up':>8} "
          f"{'total':>8} {'final acc':>9} {'diff':>6}")
    base_exact, base_tol = base.time_to(target), base.time_to(target - TOLERANCE)
    for row in rows:
        exact, tol = row.time_to(target), row.time_to(target - TOLERANCE)
        print(f"{row.name:20} {f'{row.sub:.1f} s' if row.sub else '':>10} {seconds(exact):>11} {ratio(base_exact, exact):>8} "
              f"{seconds(tol):>11} {ratio(base_tol, tol):>8} {row.total:6.1f} s {row.final:8.2f}% {row.final - target:+6.2f}")
    for note in notes:
        print(note)
    if args.json:
        table = {"model": args.model, "parameters": partition.num_parameters(Nnet(config_mod.load(config))),
                 "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
                 "target": target, "tolerance": TOLERANCE, "load": os.getloadavg()[0],
                 "rows": [{"name": row.name, "sub_seconds": row.sub, "to_target": row.time_to(target),
                           "to_tolerance": row.time_to(target - TOLERANCE), "total": row.total, "final": row.final}
                          for row in rows]}
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


def seconds(value):
    return "never" if value is None else f"{value:.1f} s"


def ratio(base, value):
    return "" if value is None or base is None else f"{base / value:.2f}x"


if __name__ == "__main__":
    main()
