#!/usr/bin/env python3
"""Kaldi's nnet3 frame-level training driver: N parallel jobs per iteration, averaged.

Stages: -1 initial model; 0 .. num_iters-1 training iterations; num_iters final combination.
Every job goes through the launcher ($cmd, e.g. "nnet-queue local"), one log per job.

Example:
  steps/train_dnn.py --cmd "nnet-queue local" --config conf/digits.yaml \\
      --trainer.num-epochs 8 --trainer.optimization.num-jobs-initial 2 \\
      --trainer.optimization.num-jobs-final 4 --egs.dir exp/egs --dir exp/nnet
"""
import argparse
import math
import os
import shlex
import subprocess
import sys
import time

from nnet_tools.report import logparse
from nnet_tools.report import summary as report
from nnet_tools.train import schedule
from nnet_tools.data.egs import read_info
from nnet_tools.fileio import write_text
from nnet_tools.train.minibatch import halve


def str2bool(text):
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def get_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--stage", type=int, default=-1, help="first stage: -1 init, 0..num_iters-1 iterations, num_iters combine")
    a("--exit-stage", type=int, default=None, help="stop before this iteration")
    a("--cmd", default="nnet-queue local", help="job launcher, as $train_cmd in cmd.sh")
    a("--use-gpu", default="no", choices=["yes", "no", "wait"])
    a("--cleanup", type=str2bool, default=True)
    a("--cleanup.preserve-model-interval", dest="preserve_interval", type=int, default=100)
    a("--config", help="model config (YAML), for stage -1; or give --trainer.input-model")
    a("--trainer.input-model", dest="input_model", help="use this model as 0.mdl")
    a("--trainer.srand", dest="srand", type=int, default=0)
    a("--trainer.num-epochs", dest="num_epochs", type=float, default=8.0)
    a("--trainer.shuffle-buffer-size", dest="shuffle_buffer_size", type=int, default=5000)
    a("--trainer.max-param-change", dest="max_param_change", type=float, default=2.0)
    a("--trainer.num-threads", dest="num_threads", type=int, default=1, help="CPU threads per job")
    a("--trainer.optimization.initial-effective-lrate", dest="initial_lrate", type=float, default=0.0003)
    a("--trainer.optimization.final-effective-lrate", dest="final_lrate", type=float, default=0.00003)
    a("--trainer.optimization.num-jobs-initial", dest="jobs_initial", type=int, default=1)
    a("--trainer.optimization.num-jobs-final", dest="jobs_final", type=int, default=8)
    a("--trainer.optimization.num-jobs-step", dest="jobs_step", type=int, default=1)
    a("--trainer.optimization.max-models-combine", dest="max_models_combine", type=int, default=20)
    a("--trainer.optimization.max-objective-evaluations", dest="max_objective_evaluations", type=int, default=30)
    a("--trainer.optimization.do-final-combination", dest="do_final_combination", type=str2bool, default=True)
    a("--trainer.optimization.momentum", dest="momentum", type=float, default=0.0)
    a("--trainer.optimization.minibatch-size", dest="minibatch_size", default="512")
    a("--egs.dir", dest="egs_dir", required=True)
    a("--dir", required=True)
    args = p.parse_args()
    if args.stage <= -1 and not (args.config or args.input_model):
        p.error("stage -1 needs --config or --trainer.input-model")
    return args


class Launcher:
    """Runs programs through $cmd; training jobs in the foreground, diagnostics in the background."""

    def __init__(self, cmd, log_dir):
        self.cmd = shlex.split(cmd)
        self.log_dir = log_dir
        self.background = []

    def argv(self, log, command, jobs=None, launcher_opts=()):
        array = [f"JOB=1:{jobs}"] if jobs else []
        return self.cmd + list(launcher_opts) + array + [os.path.join(self.log_dir, log)] + command

    def run(self, log, command, jobs=None, launcher_opts=()):
        if subprocess.run(self.argv(log, command, jobs, launcher_opts)).returncode != 0:
            sys.exit(f"steps/train_dnn.py: failed: {os.path.join(self.log_dir, log)}")

    def start(self, log, command):
        self._reap(block=False)
        self.background.append(subprocess.Popen(self.argv(log, command)))

    def wait(self):
        self._reap(block=True)

    def _reap(self, block):
        running = []
        for p in self.background:
            code = p.wait() if block else p.poll()
            if code is None:
                running.append(p)
            elif code != 0:  # diagnostics only warn, as in Kaldi
                print(f"steps/train_dnn.py: WARNING: background job failed: {' '.join(p.args)}", file=sys.stderr)
        self.background = running


def mdl(args, it):
    return os.path.join(args.dir, f"{it}.mdl")


def diagnostics(launcher, model, tag, egs_dir, previous=None):
    """compute_prob_{valid,train}.<tag>.log, and progress.<tag>.log against the previous model."""
    for subset in ("valid", "train"):
        launcher.start(f"compute_prob_{subset}.{tag}.log",
                       ["nnet-compute-prob", model, os.path.join(egs_dir, f"{subset}_diagnostic.egs")])
    if previous:
        launcher.start(f"progress.{tag}.log", ["nnet-show-progress", previous, model])


def train_iteration(args, launcher, it, jobs, lrate, processed, egs_dir):
    minibatch, max_param_change = args.minibatch_size, args.max_param_change
    if it == 0:  # Kaldi: smaller steps and keep the best job, not the average
        minibatch, max_param_change = halve(minibatch), max_param_change / math.sqrt(2)
    gpu_opts = ["--gpu", "1"] if args.use_gpu != "no" else []
    launcher.run(f"train.{it}.JOB.log", [
        "nnet-train-one-job", f"--learning-rate={lrate * jobs:.8g}", f"--minibatch-size={minibatch}",
        f"--max-param-change={max_param_change:.8g}", f"--momentum={args.momentum}",
        f"--shuffle-buffer-size={args.shuffle_buffer_size}", f"--srand={it + args.srand}",
        f"--num-threads={args.num_threads}", f"--use-gpu={args.use_gpu}",
        "--job=JOB", f"--archives-processed={processed}",
        mdl(args, it), egs_dir, os.path.join(args.dir, f"{it + 1}.JOB.mdl")],
        jobs=jobs, launcher_opts=gpu_opts + ["--num-threads", str(args.num_threads)])
    objfs = [logparse.train_objective(os.path.join(args.dir, "log", f"train.{it}.{j}.log")) for j in range(1, jobs + 1)]
    best = max(range(jobs), key=lambda j: objfs[j])
    outputs = [os.path.join(args.dir, f"{it + 1}.{j}.mdl") for j in range(1, jobs + 1)]
    if it == 0:
        launcher.run("select.0.log", ["nnet-average-models", outputs[best], mdl(args, it + 1)])
    else:
        accepted = [o for o, f in zip(outputs, objfs) if f >= objfs[best] - 1.0]
        if len(accepted) < jobs:
            print(f"steps/train_dnn.py: WARNING: Only {len(accepted)}/{jobs} of the models have been accepted "
                  f"for averaging, based on log files {args.dir}/log/train.{it}.*.log", file=sys.stderr)
        launcher.run(f"average.{it}.log", ["nnet-average-models"] + accepted + [mdl(args, it + 1)])
    for o in outputs:
        os.remove(o)
    if not os.path.getsize(mdl(args, it + 1)):
        sys.exit(f"steps/train_dnn.py: {mdl(args, it + 1)} is empty")


def main():
    args = get_args()
    print(" ".join(shlex.quote(a) for a in sys.argv), flush=True)
    egs_dir = args.egs_dir
    num_archives, frames_per_eg = read_info(egs_dir, "num_archives"), read_info(egs_dir, "frames_per_eg")
    if args.jobs_final > num_archives:
        sys.exit(f"steps/train_dnn.py: num-jobs-final {args.jobs_final} > number of archives {num_archives} in {egs_dir}")
    os.makedirs(os.path.join(args.dir, "log"), exist_ok=True)
    srand_file = os.path.join(args.dir, "srand")
    if os.path.exists(srand_file) and open(srand_file).read().strip() != str(args.srand):
        print(f"steps/train_dnn.py: WARNING: --trainer.srand={args.srand} differs from the one used before", file=sys.stderr)
    with open(srand_file, "w") as f:
        f.write(f"{args.srand}\n")
    launcher = Launcher(args.cmd, os.path.join(args.dir, "log"))

    if args.stage <= -1:
        if args.input_model:
            launcher.run("init_model.log", ["nnet-average-models", args.input_model, mdl(args, 0)])
        else:
            launcher.run("init_model.log", ["nnet-init", f"--srand={args.srand}", args.config, mdl(args, 0)])

    plan = schedule.plan(args.num_epochs, num_archives, frames_per_eg, args.jobs_initial, args.jobs_final,
                         args.initial_lrate, args.final_lrate, args.jobs_step)
    iters, to_process = schedule.num_iters(args.num_epochs, num_archives, frames_per_eg, args.jobs_initial, args.jobs_final)
    expanded = num_archives * frames_per_eg
    combine_set = schedule.combine_iters(iters, expanded, args.jobs_final, args.max_models_combine)
    print(f"steps/train_dnn.py: will train for {args.num_epochs} epochs = {iters} iterations", flush=True)
    started, done = time.time(), 0
    for it, jobs, lrate, processed in plan:
        if args.exit_stage is not None and it == args.exit_stage:
            print(f"steps/train_dnn.py: exiting before iteration {it} (--exit-stage)")
            launcher.wait()
            return
        if it < args.stage:
            continue
        if not os.path.exists(mdl(args, it)):
            sys.exit(f"steps/train_dnn.py: cannot resume at iteration {it}: {mdl(args, it)} does not exist")
        eta = ""
        if done:
            left = (time.time() - started) / done * (iters - it)
            eta = f"   ETA: {time.strftime('%H:%M:%S', time.gmtime(left))}"
        print(f"Iter: {it}/{iters - 1}   Jobs: {jobs}   Epoch: {processed / expanded:.2f}/{args.num_epochs:.1f} "
              f"({100.0 * processed / to_process:.1f}% complete)   lr: {lrate * jobs:.6f}{eta}", flush=True)
        diagnostics(launcher, mdl(args, it), it, egs_dir, mdl(args, it - 1) if it > 0 else None)
        train_iteration(args, launcher, it, jobs, lrate, processed, egs_dir)
        done += 1
        if args.cleanup and it >= 2 and not schedule.keep_model(it - 2, args.preserve_interval, combine_set):
            if os.path.exists(mdl(args, it - 2)):
                os.remove(mdl(args, it - 2))

    final = os.path.join(args.dir, "final.mdl")
    if args.stage <= iters:
        diagnostics(launcher, mdl(args, iters), iters, egs_dir, mdl(args, iters - 1))
        if args.do_final_combination:
            models = [mdl(args, i) for i in reversed(combine_set)]  # newest first
            launcher.run("combine.log", ["nnet-combine", f"--max-objective-evaluations={args.max_objective_evaluations}",
                                         f"--use-gpu={args.use_gpu}"] + models + [os.path.join(egs_dir, "combine.egs"), final])
        else:
            launcher.run("combine.log", ["nnet-average-models", mdl(args, iters), final])
        diagnostics(launcher, final, "final", egs_dir)
    launcher.wait()
    if args.cleanup:
        for i in range(iters):
            if i % args.preserve_interval and os.path.exists(mdl(args, i)):
                os.remove(mdl(args, i))
    write_text(os.path.join(args.dir, "accuracy.report"), report.accuracy_report(args.dir))
    print(report.dir_info(args.dir), flush=True)
    print(f"steps/train_dnn.py: done; final model {final}", flush=True)


if __name__ == "__main__":
    main()
