"""nnet-queue: run a command as JOB=1:N array tasks, locally or on a cluster (Kaldi run.pl / queue.pl)."""
import sys

import click

from nnet_tools import queue
from nnet_tools.cli.common import program

USAGE = """Run COMMAND as array tasks on BACKEND ({backends}), one log per task.

\b
Usage: nnet-queue BACKEND [options] [JOB=1:N] LOG COMMAND...
\b
Options (before JOB=/LOG; everything after LOG is the command, untouched):
  --mem 4G            memory per task (cluster backends; ignored locally)
  --gpu N             GPUs per task (locally: CUDA_VISIBLE_DEVICES per task)
  --num-threads N     threads per task (exports OMP_NUM_THREADS / MKL_NUM_THREADS)
  --max-jobs-run N    at most N tasks at once (locally default: #CPUs, or #GPUs with --gpu;
                      on slurm / sge the array throttle %N / -tc N)
  --config FILE       option -> engine flag mapping (default: conf/slurm.conf for slurm,
                      conf/queue.conf for sge, as Kaldi; else conf/nnet-queue.conf; else built in)
  --pick all|failed|incomplete   rerun only tasks whose log lacks '# Ended (code 0)'
  --NAME VALUE        slurm / sge: any option the queue config describes (e.g. --time 1:00:00)

Faults (slurm / sge):
  --submit-tries N         tries when the controller does not answer (default 4, as queue.pl)
  --submit-retry-delay S   seconds between those tries (default 20)
  --lost-grace S           how long a task the engine no longer runs may take to show its
                           log footer before it counts as failed (default 75)
  --max-wait S             a task not finished after S seconds is cancelled and fails
                           (default 0: wait forever)
  --stall-limit S          a started task whose log has not grown for S seconds (a stopped
                           or hung process) is killed, or cancelled, and fails (also locally;
                           default 0: off; steps/train_dnn.py sets it for its training jobs)
\b
Every JOB in LOG and COMMAND becomes the task number (any identifier works: TASK=1:4).
Escape shell syntax meant for the task: \\| \\> \\; . Exit 0 iff every task succeeded.
On slurm / sge a call is one array job; its task script is LOGDIR/q/<name>.sh, Ctrl-C or
SIGTERM cancels it (scancel / qdel). Locally, tasks die with nnet-queue, even on kill -9.
\b
Examples:
  nnet-queue local JOB=1:4 exp/x/log/train.3.JOB.log nnet-train-one-job --srand=JOB ...
  nnet-queue local --max-jobs-run 2 JOB=1:2 log/a.JOB.log echo JOB \\| cat
  nnet-queue local exp/x/log/average.4.log nnet-average-models ...
  nnet-queue slurm --mem 2G --gpu 1 JOB=1:8 exp/x/log/train.5.JOB.log nnet-train-one-job ...
  nnet-queue sge --num-threads 4 --max-jobs-run 10 JOB=1:40 log/egs.JOB.log nnet-get-egs ...
"""


@click.command(help=USAGE.format(backends=", ".join(sorted(queue.BACKENDS))),
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("backend")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@program("nnet-queue")
def main(backend, args):
    if args[:1] in (("--help",), ("-h",)):  # before any JOB= or LOG: help, not a log named --help
        click.echo(click.get_current_context().get_help())
        sys.exit(0)
    sys.exit(queue.launch(backend, args))
