"""nnet-queue: run a command as JOB=1:N array tasks, locally or on a cluster (Kaldi run.pl / queue.pl)."""
import sys

import click

from .. import queue
from .common import program

USAGE = """Run COMMAND as array tasks on BACKEND ({backends}), one log per task.

\b
Usage: nnet-queue BACKEND [options] [JOB=1:N] LOG COMMAND...
\b
Options (before JOB=/LOG; everything after LOG is the command, untouched):
  --mem 4G            memory per task (cluster backends; ignored locally)
  --gpu N             GPUs per task (locally: CUDA_VISIBLE_DEVICES per task)
  --num-threads N     threads per task (exports OMP_NUM_THREADS / MKL_NUM_THREADS)
  --max-jobs-run N    at most N tasks at once (locally default: #CPUs, or #GPUs with --gpu)
  --config FILE       option -> engine flag mapping (default conf/queue.conf)
  --pick all|failed|incomplete   rerun only tasks whose log lacks '# Ended (code 0)'
\b
Every JOB in LOG and COMMAND becomes the task number (any identifier works: TASK=1:4).
Escape shell syntax meant for the task: \\| \\> \\; . Exit 0 iff every task succeeded.
\b
Examples:
  nnet-queue local JOB=1:4 exp/x/log/train.3.JOB.log nnet-train-one-job --srand=JOB ...
  nnet-queue local --max-jobs-run 2 JOB=1:2 log/a.JOB.log echo JOB \\| cat
  nnet-queue local exp/x/log/average.4.log nnet-average-models ...
"""


@click.command(help=USAGE.format(backends=", ".join(sorted(queue.BACKENDS))),
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("backend")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@program("nnet-queue")
def main(backend, args):
    sys.exit(queue.launch(backend, args))
