"""The command lines the driver runs (one training job's, the initial model's presoftmax
option) and prints (its own, and the one that resumes it)."""
import math
import os
import shlex
import sys

from nnet_tools.data import vectors
from nnet_tools.driver import dropout_schedule, schedule
from nnet_tools.model import presoftmax
from nnet_tools.report import logparse
from nnet_tools.train.minibatch import halve

# A stalled job (stopped, hung on a dead mount) is noticed by its silent log. The default limit
# follows the run: a healthy job's log is never silent longer than the job takes.
STALL_FACTOR, STALL_FLOOR, STALL_FIRST = 4.0, 60.0, 600.0


def iteration_settings(opts, it):
    """(minibatch size, max-param-change): Kaldi halves both (the latter by sqrt 2) on iteration 0."""
    if it == 0:
        return halve(opts.minibatch_size), opts.max_param_change / math.sqrt(2)
    return opts.minibatch_size, opts.max_param_change


def job_command(opts, it, jobs, lrate, processed, model_in, egs_dir, model_out, job="JOB", srand_offset=0,
                data_fraction=0.0):
    """nnet-train-one-job's command line for one iteration; ``lrate`` is the effective rate,
    multiplied by the number of jobs as Kaldi does, which also passes l2-regularize-factor 1/jobs;
    ``data_fraction`` (archives processed / to process) places the dropout schedule."""
    minibatch, max_param_change = iteration_settings(opts, it)
    extra = [f"--l2-regularize-factor={1.0 / jobs:.8g}", f"--chunk={str(opts.chunk_training).lower()}"]
    if opts.backstitch_scale:
        extra += [f"--backstitch-training-scale={opts.backstitch_scale}",
                  f"--backstitch-training-interval={opts.backstitch_interval}"]
    if opts.proportional_shrink:
        extra.append(f"--scale={schedule.shrink_factor(opts.proportional_shrink, lrate * jobs):.8g}")
    if opts.dropout_schedule:
        extra.append(f"--edits={dropout_schedule.edits(dropout_schedule.parse(opts.dropout_schedule), data_fraction)}")
    return ["nnet-train-one-job", f"--learning-rate={lrate * jobs:.8g}", f"--minibatch-size={minibatch}",
            f"--max-param-change={max_param_change:.8g}", f"--momentum={opts.momentum}",
            f"--shuffle-buffer-size={opts.shuffle_buffer_size}", f"--srand={it + opts.srand + srand_offset}",
            f"--num-threads={opts.num_threads}", f"--use-gpu={opts.use_gpu}",
            f"--job={job}", f"--archives-processed={processed}", *extra,
            *(opts.add_options or []), model_in, egs_dir, model_out]


def job_launcher_opts(opts, max_jobs_run=None):
    gpu = ["--gpu", "1"] if opts.use_gpu != "no" else []
    limit = ["--max-jobs-run", str(max_jobs_run)] if max_jobs_run else []
    return gpu + ["--num-threads", str(opts.num_threads)] + limit


def stall_limit(opts, dir, it):
    """Iteration ``it``'s stall limit in seconds (0: none): --trainer.stall-limit, or by default
    STALL_FACTOR x the previous iteration's longest job (its logs' accounting time), at least
    STALL_FLOOR; STALL_FIRST when no earlier iteration's logs are there."""
    if opts.stall_limit is not None:
        return opts.stall_limit
    logs = logparse.numbered_logs(dir, f"train.{it - 1}.{{}}.log").values() if it > 0 else []
    times = [t for t in map(logparse.accounting_time, logs) if t is not None]
    return max(STALL_FLOOR, STALL_FACTOR * max(times)) if times else STALL_FIRST


def presoftmax_option(opts, egs_dir, dir):
    """With --trainer.presoftmax-prior-scale-power: DIR/presoftmax_prior_scale.vec, computed from the
    egs' class counts, as the ['--presoftmax-prior-scale=VEC'] option of the program making the
    initial model(s); else []."""
    if not opts.presoftmax_prior_scale_power:
        return []
    vec = os.path.join(dir, "presoftmax_prior_scale.vec")
    vectors.write_vector(vec, presoftmax.prior_scale(presoftmax.egs_counts(egs_dir), opts.presoftmax_prior_scale_power))
    return [f"--presoftmax-prior-scale={vec}"]


def resume_command(argv=None, drop=("--stage",), add=()):
    """The driver's command line without --stage (the options in ``drop``), which resumes where
    the dir left off; ``add``: words put after the program's name."""
    argv, out, skip = list(argv or sys.argv), [], False
    for a in argv:
        if skip:
            skip = False
        elif a in drop:
            skip = True
        elif a.split("=", 1)[0] not in drop:
            out.append(a)
    return command_line(out[:1] + list(add) + out[1:])


def command_line(argv=None):
    return " ".join(shlex.quote(a) for a in (argv or sys.argv))
