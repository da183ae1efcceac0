#!/usr/bin/env python3
"""Partition pre-training (Miranda & Von Zuben 2015, arXiv 1511.02954): split the model into K narrow
sub-models, train them independently, merge them (plus noise) into the full model's initial model,
and train that with the outer loop of steps/train_dnn.py (same --trainer.* options).

Stages: 0 split (DIR/split/); 1 train the sub-models (DIR/sub.J/final.mdl); 2 merge
(DIR/merged.mdl, log/merge.log); 3 train the full model from it (DIR/final.mdl, as train_dnn.py;
--train-stage is its --stage: by default it goes on where it left off, or starts over after a new merge).
Without --stage, a rerun goes on after the split or merge that completed with the same settings
(DIR/log/split.log.done, merge.log.done hold their commands), else starts at stage 0.

Sub-models (--sub-mode):
  job     each sub-model is trained by one job per iteration, no averaging: iteration I runs the
          K sub-models' jobs as one array (log/train_sub.I.J.log) through --cmd, with train_dnn.py's
          learning-rate schedule and archive rotation; then log/compute_prob_valid_sub.final.J.log.
          --stage 1 goes on after the newest iteration every sub-model finished (sub.J/N.mdl).
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
import os
import sys

from nnet_tools.cli import interrupt_as_exception, quiet_interrupt_until_ready

quiet_interrupt_until_ready()   # before torch is imported: Ctrl-C there ends the script quietly

from nnet_tools.driver import commands, options
from nnet_tools.driver.options import str2bool
from nnet_tools.driver.partitioned import Partitioned, PartitionOptions
from nnet_tools.driver.resume import NoResume
from nnet_tools.errors import NnetError

NAME = "steps/train_partitioned.py"

SUB_OPTIONS = [  # flag, PartitionOptions field, type, help
    ("--num-submodels", "num_submodels", int, ""),
    ("--allow-uneven", "allow_uneven", str2bool, "allow hidden widths K does not divide"),
    ("--sub-mode", "sub_mode", ["job", "driver"], ""),
    ("--sub-data", "sub_data", ["full", "shard"], ""),
    ("--parallel", "parallel", str2bool, ""),
    ("--noise-fraction", "noise_fraction", float, "merge noise: Uniform(+-F*max|P|) per tensor"),
    ("--output-scale", "output_scale", str, "merge: output weight factor (default 1/K: mean of the logits)"),
    ("--sub.num-epochs", "sub_epochs", float, ""),
    ("--sub.initial-effective-lrate", "sub_initial_lrate", float, ""),
    ("--sub.final-effective-lrate", "sub_final_lrate", float, ""),
    ("--sub.num-jobs-initial", "sub_jobs_initial", int, "driver mode only"),
    ("--sub.num-jobs-final", "sub_jobs_final", int, "driver mode only"),
    ("--train-opts", "train_opts", str, "more trainer options for the full model and driver-mode sub-models"),
]


def get_args():
    p = options.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", type=int, default=None, help="first stage: 0 split, 1 sub-models, 2 merge, 3 full "
                   "model; default: go on after the split or merge that completed with these settings, else 0")
    p.add_argument("--stop-stage", type=int, default=3, help="last stage to run")
    p.add_argument("--train-stage", type=int, default=None, help="the full model's outer-loop stage, as "
                   "train_dnn.py's --stage; default: go on where DIR left off, or start over after a new merge")
    for flag, dest, kind, help in SUB_OPTIONS:
        typed = {"choices": kind} if isinstance(kind, list) else {"type": kind}
        p.add_argument(flag, dest=dest, default=getattr(PartitionOptions, dest), help=help or None, **typed)
    options.add_arguments(p, num_epochs=2.0)
    p.add_argument("config", help="the full model's YAML config")
    p.add_argument("egs_dir")
    p.add_argument("dir")
    return p.parse_args()


def resume_command(part):
    """The command that goes on from the stage that stopped (stage 3: where the full model left off)."""
    return commands.resume_command(drop=("--stage", "--train-stage"), add=("--stage", str(part.running)))


def main():
    args = get_args()
    print(commands.command_line(), flush=True)
    popts = PartitionOptions(**{dest: getattr(args, dest) for _, dest, _, _ in SUB_OPTIONS})
    driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_dnn.py")
    try:  # bad options: nothing was started, so there is nothing to resume
        part = Partitioned(options.from_namespace(args), popts, args.egs_dir, args.dir, driver)
    except NnetError as e:
        sys.exit(f"{NAME}: {e}")
    try:
        interrupt_as_exception()   # from here Ctrl-C stops the tasks and says how to resume
        part.run(args.stage, args.stop_stage, args.config, args.train_stage)
    except NnetError as e:
        hint = "" if isinstance(e, NoResume) else f"\n{NAME}: to resume once the cause is fixed: {resume_command(part)}"
        sys.exit(f"{NAME}: {e}{hint}")
    except KeyboardInterrupt:  # Ctrl-C: the tasks got it too, and the queue stops them
        part.stop()
        print(f"{NAME}: interrupted\n{NAME}: to resume: {resume_command(part)}", file=sys.stderr, flush=True)
        sys.exit(130)
    print(f"{NAME}: done stages {part.first_stage}..{args.stop_stage} in {args.dir}", flush=True)


if __name__ == "__main__":
    main()
