#!/usr/bin/env python3
"""P3: per-iteration overhead (process starts, model I/O, averaging, diagnostics) as a fraction
of an iteration's wall time, at Kaldi's default samples-per-iter (400000 egs in the archive).

An iteration is run by the driver's own code (nnet_tools.driver.outer_loop.OuterLoop: its background
diagnostics, then its iteration: the training job through `nnet-queue local JOB=1:1`, selection
and nnet-average-models), on an egs dir of one archive. Its wall time is compared with the same
training loop run in this process (no process start, no model I/O), once before the iteration and
once after: their mean is the baseline, so a drift of the machine's speed over the run cancels,
and their difference shows how far to trust the result. This process keeps its freed memory as
the training program does (nnet_tools.heap). Prints both and the overhead fraction (goal <= 5%).

    python3 benchmarks/iteration_overhead.py [--egs 400000] [--hidden 1024] [--layers 4] [--threads 1]
"""
import argparse
import logging
import os
import resource
import tempfile
import time

import torch

from common import mlp_config, speech_like_archive
from nnet_tools import heap
from nnet_tools.data import egs
from nnet_tools.model import model_io
from nnet_tools.train import job as train
from nnet_tools.log import logger
from nnet_tools.model.nnet import Nnet
from nnet_tools.driver import options, outer_loop


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--egs", type=int, default=400000)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="threads per job, as the driver's --trainer.num-threads")
    args = p.parse_args()
    logger.setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)
    heap.keep_freed_memory()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
        speech_like_archive(f"{d}/egs.1.ark", args.egs)
        for name, seed in (("valid_diagnostic", 1), ("train_diagnostic", 2)):
            speech_like_archive(f"{d}/{name}.egs", 10000, seed=seed)  # Kaldi: 10000 frames each
        for key, value in dict(num_archives=1, frames_per_eg=1).items():
            os.makedirs(f"{d}/info", exist_ok=True)
            open(f"{d}/info/{key}", "w").write(f"{value}\n")
        torch.manual_seed(0)
        model = Nnet(mlp_config(args.hidden, args.layers, natural_gradient=True))
        model_io.save(model, f"{d}/0.mdl")
        model_io.save(model, f"{d}/1.mdl")
        opts = options.TrainerOptions(jobs_initial=1, jobs_final=1, num_threads=args.threads, num_epochs=2)
        loop = outer_loop.OuterLoop(opts, d, d)

        def loop_alone():
            model = model_io.load(f"{d}/1.mdl")
            t0, c0 = time.perf_counter(), _cpu()
            train.train_one_job(model, egs.EgsArchive(f"{d}/egs.1.ark"), train.TrainOptions(learning_rate=0.0003))
            return time.perf_counter() - t0, _cpu() - c0

        before = loop_alone()
        t0, c0 = time.perf_counter(), _cpu()
        loop.diagnostics(loop.mdl(1), 1, loop.mdl(0))
        loop.iteration(1, 1, 0.0003, 0)
        loop.launcher.wait()
        iteration, iteration_cpu = time.perf_counter() - t0, _cpu() - c0
        after = loop_alone()
    compute, compute_cpu = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
    print(f"model 440-{args.hidden}x{args.layers}-2000 (natural gradient), {args.egs} egs, minibatch 512, "
          f"{args.threads} thread(s) per job")
    print(f"iteration wall time (driver's commands): {iteration:8.1f} s")
    print(f"training loop alone, in process       : {compute:8.1f} s  (mean of {before[0]:.1f} s before "
          f"and {after[0]:.1f} s after the iteration)")
    print(f"CPU seconds, every process of the iteration: {iteration_cpu:.1f} s; the loop alone: {compute_cpu:.1f} s "
          f"(the iteration's extra CPU: {iteration_cpu - compute_cpu:.1f} s; steadier than wall time on a loaded machine)")
    print(f"P3 per-iteration overhead = {(iteration - compute) / iteration:.1%} of iteration wall time   (goal <= 5%)")


def _cpu():
    """User + system CPU seconds of this process and its waited-for children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


if __name__ == "__main__":
    main()
