#!/usr/bin/env python3
"""Kaldi's nnet3 frame-level training driver: N parallel jobs per iteration, averaged.

Stages: -1 initial model; 0 .. num_iters-1 training iterations; num_iters final combination.
Every job goes through the launcher ($cmd, e.g. "nnet-queue local"), one log per job.
The loop itself is nnet_tools/driver/outer_loop.py; this script parses options and calls it.

Example:
  steps/train_dnn.py --cmd "nnet-queue local" --config conf/model.yaml \\
      --trainer.num-epochs 8 --trainer.optimization.num-jobs-initial 2 \\
      --trainer.optimization.num-jobs-final 4 --egs.dir exp/egs --dir exp/nnet
"""
import argparse
import sys

from nnet_tools.cli import interrupt_as_exception, quiet_interrupt_until_ready

quiet_interrupt_until_ready()   # before torch is imported: Ctrl-C there ends the script quietly

from nnet_tools.errors import NnetError
from nnet_tools.driver import commands, options, outer_loop, resume


def get_args():
    p = options.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", type=int, default=None, help="first stage: -1 start over (init), 0..num_iters-1 "
                   "iterations, num_iters combine; default: go on where DIR left off (a new DIR starts at -1)")
    p.add_argument("--exit-stage", type=int, default=None, help="stop before this iteration")
    p.add_argument("--config", help="model config (YAML), for stage -1; or give --trainer.input-model")
    p.add_argument("--trainer.input-model", dest="input_model", help="use this model as 0.mdl")
    p.add_argument("--egs.dir", dest="egs_dir", required=True)
    p.add_argument("--dir", required=True)
    options.add_arguments(p)
    args = p.parse_args()
    if (args.stage is None or args.stage <= -1) and not (args.config or args.input_model):
        p.error("starting a run needs --config or --trainer.input-model")
    return args


def main():
    args = get_args()
    print(commands.command_line(), flush=True)
    try:  # bad options: nothing was started, so there is nothing to resume
        loop = outer_loop.OuterLoop(options.from_namespace(args), args.egs_dir, args.dir)
        loop.check_start(args.stage, args.config, args.input_model)
    except NnetError as e:
        sys.exit(f"steps/train_dnn.py: {e}")
    try:
        interrupt_as_exception()   # from here Ctrl-C stops the tasks and says how to resume
        loop.run(args.stage, args.exit_stage, args.config, args.input_model)
    except resume.NoResume as e:
        sys.exit(f"steps/train_dnn.py: {e}")
    except NnetError as e:
        sys.exit(f"steps/train_dnn.py: {e}\nsteps/train_dnn.py: to resume once the cause is fixed: "
                 f"{commands.resume_command()}")
    except KeyboardInterrupt:  # Ctrl-C: the tasks got it too, and the queue stops them
        loop.launcher.stop()
        print(f"steps/train_dnn.py: interrupted\nsteps/train_dnn.py: to resume: {commands.resume_command()}",
              file=sys.stderr, flush=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
