#!/usr/bin/env python3
"""Partition pre-training (Miranda & Von Zuben 2015, arXiv 1511.02954): split the model into K narrow
sub-models, train them independently, merge them (plus noise) into the full model's initial model,
and train that with the normal driver (steps/train_dnn.py).

Stages: 0 split (DIR/split/); 1 train the sub-models (DIR/sub.J/final.mdl); 2 merge
(DIR/merged.mdl, log/merge.log); 3 train the full model from it (DIR/final.mdl, as train_dnn.py).

Sub-models (--sub-mode):
  job     each sub-model is trained by one job per iteration, no averaging: iteration I runs the
          K sub-models' jobs as one array (log/train_sub.I.J.log) through --cmd, with train_dnn.py's
          learning-rate schedule and archive rotation; then log/compute_prob_valid_sub.final.J.log.
  driver  each sub-model runs the averaging driver (DIR/sub.J/, log/train_sub.J.log), whose jobs
          go through --cmd; --sub.num-jobs-* set its jobs.
--parallel false trains them one after another (at most one sub-model's job at a time).
--sub-data full trains every sub-model on all egs; shard gives sub-model J archives J, J+K, ...
The sub-models differ by their own seeded initialisations (nnet-split-submodels --srand); their
data order follows --trainer.srand, as the full model's does. Model files hold no optimiser state,
so the merged model's training starts with fresh momentum and natural-gradient statistics.

Example:
  steps/train_partitioned.py --cmd "nnet-queue local" --num-submodels 2 \\
      --sub.num-epochs 2 --trainer.num-epochs 2 conf/mlp3.yaml exp/egs exp/part2
"""
import argparse
import math
import os
import shlex
import shutil
import subprocess
import sys

from nnet_tools.train import schedule
from nnet_tools.data.egs import read_info
from nnet_tools.fileio import atomic_path
from nnet_tools.train.minibatch import halve
from train_dnn import str2bool  # a sibling in steps/: same option syntax as the driver

STEPS = os.path.dirname(os.path.abspath(__file__))


def get_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--cmd", default="nnet-queue local", help="job launcher, as $train_cmd in cmd.sh")
    a("--stage", type=int, default=0, help="first stage: 0 split, 1 sub-models, 2 merge, 3 full model")
    a("--stop-stage", type=int, default=3, help="last stage to run")
    a("--train-stage", type=int, default=-1, help="train_dnn.py --stage of the full model (to resume it)")
    a("--num-submodels", type=int, default=2)
    a("--allow-uneven", type=str2bool, default=False, help="allow hidden widths K does not divide")
    a("--sub-mode", choices=["job", "driver"], default="job")
    a("--sub-data", choices=["full", "shard"], default="full")
    a("--parallel", type=str2bool, default=True)
    a("--noise-fraction", type=float, default=0.02, help="merge noise: Uniform(+-F*max|P|) per tensor")
    a("--output-scale", default=None, help="merge: output weight factor (default 1/K: mean of the logits)")
    a("--use-gpu", default="no", choices=["yes", "no", "wait"])
    a("--cleanup", type=str2bool, default=True, help="delete the sub-models' iteration models (job mode)")
    a("--sub.num-epochs", dest="sub_epochs", type=float, default=2.0)
    a("--sub.initial-effective-lrate", dest="sub_initial_lrate", type=float, default=0.0003)
    a("--sub.final-effective-lrate", dest="sub_final_lrate", type=float, default=0.00003)
    a("--sub.num-jobs-initial", dest="sub_jobs_initial", type=int, default=1, help="driver mode only")
    a("--sub.num-jobs-final", dest="sub_jobs_final", type=int, default=1, help="driver mode only")
    a("--trainer.srand", dest="srand", type=int, default=0, help="seed of the split, the noise and the training")
    a("--trainer.num-epochs", dest="num_epochs", type=float, default=2.0, help="epochs of the merged model")
    a("--trainer.optimization.initial-effective-lrate", dest="initial_lrate", type=float, default=0.0003)
    a("--trainer.optimization.final-effective-lrate", dest="final_lrate", type=float, default=0.00003)
    a("--trainer.optimization.num-jobs-initial", dest="jobs_initial", type=int, default=1)
    a("--trainer.optimization.num-jobs-final", dest="jobs_final", type=int, default=8)
    a("--trainer.optimization.minibatch-size", dest="minibatch_size", default="512")
    a("--trainer.optimization.momentum", dest="momentum", type=float, default=0.0)
    a("--trainer.max-param-change", dest="max_param_change", type=float, default=2.0)
    a("--trainer.shuffle-buffer-size", dest="shuffle_buffer_size", type=int, default=5000)
    a("--trainer.num-threads", dest="num_threads", type=int, default=1, help="CPU threads per job")
    a("--train-opts", default="", help="more steps/train_dnn.py options (full model, and driver-mode sub-models)")
    a("config", help="the full model's YAML config")
    a("egs_dir")
    a("dir")
    return p.parse_args()


class Run:
    """Every program through the launcher, one log each; a failure stops the script with its log."""

    def __init__(self, args):
        self.cmd = shlex.split(args.cmd)
        self.args = args

    def __call__(self, log, command, jobs=None, launcher_opts=(), launcher=None):
        argv = (launcher or self.cmd) + list(launcher_opts) + ([f"JOB=1:{jobs}"] if jobs else []) + [log] + command
        if subprocess.run([str(a) for a in argv]).returncode != 0:
            sys.exit(f"steps/train_partitioned.py: failed: {log.replace('JOB', '*')}")

    def job_opts(self, parallel_tasks):
        opts = ["--num-threads", str(self.args.num_threads), "--max-jobs-run", str(parallel_tasks)]
        return (["--gpu", "1"] if self.args.use_gpu != "no" else []) + opts


def shard_egs(egs_dir, k, dir):
    """DIR/egs.J: archives J, J+K, ... of egs_dir renumbered 1.., the rest of it linked as it is.
    Every shard gets n // K archives, so the sub-models' tasks are the same size."""
    n = read_info(egs_dir, "num_archives")
    if n < k:
        sys.exit(f"steps/train_partitioned.py: --sub-data shard needs at least {k} archives; {egs_dir} has {n}")
    if n % k:
        print(f"steps/train_partitioned.py: WARNING: {n} archives do not split {k} ways; the last {n % k} "
              f"are not used by the sub-models", file=sys.stderr)
    n -= n % k
    src = os.path.abspath(egs_dir)
    for j in range(1, k + 1):
        shard = os.path.join(dir, f"egs.{j}")
        shutil.rmtree(shard, ignore_errors=True)
        shutil.copytree(os.path.join(src, "info"), os.path.join(shard, "info"))
        for name in os.listdir(src):
            if name != "info" and not (name.startswith("egs.") and name.endswith(".ark")):
                os.symlink(os.path.join(src, name), os.path.join(shard, name))
        for m, a in enumerate(range(j, n + 1, k), start=1):
            os.symlink(os.path.join(src, f"egs.{a}.ark"), os.path.join(shard, f"egs.{m}.ark"))
        with open(os.path.join(shard, "info", "num_archives"), "w") as f:
            f.write(f"{len(range(j, n + 1, k))}\n")
    return os.path.join(dir, "egs.JOB")


def train_submodels_by_job(args, run, k, egs_dir):
    """Kaldi's outer loop with one job and no averaging, the K sub-models in lockstep."""
    probe = egs_dir.replace("JOB", "1")
    plan = schedule.plan(args.sub_epochs, read_info(probe, "num_archives"), read_info(probe, "frames_per_eg"),
                         1, 1, args.sub_initial_lrate, args.sub_final_lrate)
    sub, log = os.path.join(args.dir, "sub.JOB"), os.path.join(args.dir, "log")
    for j in range(1, k + 1):
        os.makedirs(os.path.join(args.dir, f"sub.{j}"), exist_ok=True)
    for it, _, lrate, processed in plan:
        minibatch, max_param_change = args.minibatch_size, args.max_param_change
        if it == 0:  # as train_dnn.py: smaller steps on the first iteration from a random init
            minibatch, max_param_change = halve(minibatch), max_param_change / math.sqrt(2)
        model_in = os.path.join(args.dir, "split", "sub.JOB.mdl") if it == 0 else os.path.join(sub, f"{it}.mdl")
        print(f"Sub-models iter: {it}/{len(plan) - 1}   lr: {lrate:.6f}", flush=True)
        run(os.path.join(log, f"train_sub.{it}.JOB.log"), [
            "nnet-train-one-job", f"--learning-rate={lrate:.8g}", f"--minibatch-size={minibatch}",
            f"--max-param-change={max_param_change:.8g}", f"--momentum={args.momentum}",
            f"--shuffle-buffer-size={args.shuffle_buffer_size}", f"--srand={it + args.srand}",
            f"--num-threads={args.num_threads}", f"--use-gpu={args.use_gpu}", "--job=1",
            f"--archives-processed={processed}", model_in, egs_dir, os.path.join(sub, f"{it + 1}.mdl")],
            jobs=k, launcher_opts=run.job_opts(k if args.parallel else 1))
        if args.cleanup and it > 0:
            for j in range(1, k + 1):
                os.remove(os.path.join(args.dir, f"sub.{j}", f"{it}.mdl"))
    for j in range(1, k + 1):
        last, final = (os.path.join(args.dir, f"sub.{j}", name) for name in (f"{len(plan)}.mdl", "final.mdl"))
        if args.cleanup:
            os.replace(last, final)
        else:
            with atomic_path(final) as tmp:
                shutil.copyfile(last, tmp)
    run(os.path.join(log, "compute_prob_valid_sub.final.JOB.log"),
        ["nnet-compute-prob", os.path.join(sub, "final.mdl"), os.path.join(egs_dir, "valid_diagnostic.egs")], jobs=k)


def train_submodels_by_driver(args, run, k, egs_dir):
    """K averaging drivers, run here (one log each), each sending its jobs through --cmd."""
    run(os.path.join(args.dir, "log", "train_sub.JOB.log"), [
        os.path.join(STEPS, "train_dnn.py"), "--cmd", args.cmd, "--use-gpu", args.use_gpu,
        "--trainer.srand", str(args.srand), "--trainer.input-model", os.path.join(args.dir, "split", "sub.JOB.mdl"),
        "--trainer.num-epochs", str(args.sub_epochs),
        "--trainer.optimization.initial-effective-lrate", str(args.sub_initial_lrate),
        "--trainer.optimization.final-effective-lrate", str(args.sub_final_lrate),
        "--trainer.optimization.num-jobs-initial", str(args.sub_jobs_initial),
        "--trainer.optimization.num-jobs-final", str(args.sub_jobs_final),
        *shared_trainer_opts(args), "--egs.dir", egs_dir, "--dir", os.path.join(args.dir, "sub.JOB")],
        jobs=k, launcher=["nnet-queue", "local"], launcher_opts=["--max-jobs-run", str(k if args.parallel else 1)])


def shared_trainer_opts(args):
    return ["--trainer.optimization.minibatch-size", args.minibatch_size,
            "--trainer.optimization.momentum", str(args.momentum),
            "--trainer.max-param-change", str(args.max_param_change),
            "--trainer.shuffle-buffer-size", str(args.shuffle_buffer_size),
            "--trainer.num-threads", str(args.num_threads), *shlex.split(args.train_opts)]


def main():
    args = get_args()
    print(" ".join(shlex.quote(a) for a in sys.argv), flush=True)
    k, dir = args.num_submodels, args.dir
    for name in ("num_archives", "frames_per_eg"):
        read_info(args.egs_dir, name)  # fails early, naming the file, if egs_dir is no egs dir
    os.makedirs(os.path.join(dir, "log"), exist_ok=True)
    run = Run(args)
    stages = range(args.stage, args.stop_stage + 1)

    if 0 in stages:
        run(os.path.join(dir, "log", "split.log"),
            ["nnet-split-submodels", f"--srand={args.srand}"] + (["--allow-uneven"] if args.allow_uneven else [])
            + [args.config, str(k), os.path.join(dir, "split")])
    if 1 in stages:
        egs_dir = shard_egs(args.egs_dir, k, dir) if args.sub_data == "shard" else args.egs_dir
        print(f"steps/train_partitioned.py: training {k} sub-models ({args.sub_mode} mode, "
              f"{'in parallel' if args.parallel else 'one after another'}, {args.sub_data} data)", flush=True)
        (train_submodels_by_job if args.sub_mode == "job" else train_submodels_by_driver)(args, run, k, egs_dir)
    if 2 in stages:
        run(os.path.join(dir, "log", "merge.log"),
            ["nnet-merge-submodels", "--partition", os.path.join(dir, "split", "partition.yaml"),
             f"--noise-fraction={args.noise_fraction}", f"--srand={args.srand}"]
            + ([f"--output-scale={args.output_scale}"] if args.output_scale else [])
            + [os.path.join(dir, f"sub.{j}", "final.mdl") for j in range(1, k + 1)] + [os.path.join(dir, "merged.mdl")])
    if 3 in stages:
        argv = [os.path.join(STEPS, "train_dnn.py"), "--cmd", args.cmd, "--stage", str(args.train_stage),
                "--use-gpu", args.use_gpu, "--trainer.srand", str(args.srand),
                "--trainer.input-model", os.path.join(dir, "merged.mdl"), "--trainer.num-epochs", str(args.num_epochs),
                "--trainer.optimization.initial-effective-lrate", str(args.initial_lrate),
                "--trainer.optimization.final-effective-lrate", str(args.final_lrate),
                "--trainer.optimization.num-jobs-initial", str(args.jobs_initial),
                "--trainer.optimization.num-jobs-final", str(args.jobs_final),
                *shared_trainer_opts(args), "--egs.dir", args.egs_dir, "--dir", dir]
        if subprocess.run(argv).returncode != 0:
            sys.exit("steps/train_partitioned.py: training the merged model failed")
    print(f"steps/train_partitioned.py: done stages {args.stage}..{args.stop_stage} in {dir}", flush=True)


if __name__ == "__main__":
    main()
