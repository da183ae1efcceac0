#!/usr/bin/env python3
"""P7: how much of the core's arithmetic the training loop uses, with natural gradient.

nnet-train-one-job's loop (train_one_job, natural gradient on, Kaldi's defaults) runs on a
speech-like archive in this process, alternating with the same loop without natural gradient and
with a hand-written PyTorch loop (plain SGD, as in train_throughput.py), best of --repeats each.
Each is reported as egs/s and GFLOP/s, the model's FLOPs counted as 6 x (sum of Din x Dout) per
eg (the forward GEMM and the backward's two), so the preconditioning's own FLOPs are its cost,
not credit. The peak is this machine's fp32 GEMM rate at the same thread count (2048^3 products,
best of several, measured between the runs). The process keeps its freed memory, as the program
does (nnet_tools.heap). Goal (issue 31, relative to this host's own floor): the NG loop's rate
>= 0.90 x the hand-written plain loop's, both wall clock, in the same run.

    python3 benchmarks/train_efficiency.py [--egs 25000] [--threads 1] [--repeats 2]
"""
import argparse
import copy
import logging
import os
import tempfile
import time

import torch

from common import loop_arguments, mlp_config, speech_like_archive
from train_throughput import hand_loop, warm_up
from nnet_tools import heap
from nnet_tools.data import egs
from nnet_tools.log import logger
from nnet_tools.model.nnet import Nnet
from nnet_tools.train import job as train


def gemm_peak(n=2048, reps=3):
    """Best fp32 GEMM rate in GFLOP/s over ``reps`` products of n x n matrices: (wall, CPU)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    wall, cpu = zip(*(_timed(lambda: torch.mm(a, b)) for _ in range(reps)))
    return 2.0 * n ** 3 / min(wall) / 1e9, 2.0 * n ** 3 / min(cpu) / 1e9


def _timed(fn):
    """(wall, process CPU) seconds of one call. With one thread, CPU time leaves out the time
    other processes held the core, so on a shared machine it is the steadier figure."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def model_flops_per_eg(model):
    """6 x the affine layers' multiply-adds: forward, derivative and gradient GEMMs."""
    return 6.0 * sum(a.weight.numel() for _, a in model.updatable())


def main():
    p = argparse.ArgumentParser()
    loop_arguments(p, egs=25000, repeats=2)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    logger.setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)
    heap.keep_freed_memory()  # as nnet-train-one-job does
    warm_up()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        archive = egs.EgsArchive(speech_like_archive(os.path.join(tmp, "egs.1.ark"), args.egs))
        torch.manual_seed(0)
        bases = {ng: Nnet(mlp_config(args.hidden, args.layers, natural_gradient=ng)) for ng in (True, False)}
        bases[True].load_state_dict(bases[False].state_dict())
        opts = train.TrainOptions(learning_rate=1e-4, minibatch_size=str(args.minibatch))
        runs = {
            "nnet-train-one-job, natural gradient": lambda: train.train_one_job(copy.deepcopy(bases[True]), archive, opts),
            "nnet-train-one-job, plain SGD": lambda: train.train_one_job(copy.deepcopy(bases[False]), archive, opts),
            "hand-written PyTorch loop, plain SGD": lambda: hand_loop(copy.deepcopy(bases[False]), archive, 1e-4,
                                                                    args.minibatch),
        }
        times, peaks = {name: [] for name in runs}, []
        for _ in range(args.repeats):
            peaks.append(gemm_peak())
            for name, run in runs.items():
                times[name].append(_timed(run))
        peaks.append(gemm_peak())
    n = args.egs // args.minibatch * args.minibatch
    flops = model_flops_per_eg(bases[True])
    print(f"model 440-{args.hidden}x{args.layers}-2000, minibatch {args.minibatch}, {n} egs, "
          f"{torch.get_num_threads()} thread(s), best of {args.repeats}, load average {os.getloadavg()[0]:.2f}")
    print(f"model FLOPs per eg: {flops / 1e6:.1f} M (6 x weights)")
    result = {}
    for k, clock in enumerate(("wall", "CPU")):
        peak = max(p[k] for p in peaks)
        print(f"{clock} clock: fp32 GEMM peak (2048^3) {peak:.1f} GFLOP/s "
              f"(measured: {' '.join(f'{p[k]:.1f}' for p in peaks)})")
        for name, ts in times.items():
            rate = n / min(t[k] for t in ts)
            result[clock, name] = rate * flops / 1e9 / peak
            print(f"  {name:38s}: {rate:7.0f} egs/s = {rate * flops / 1e9:6.1f} GFLOP/s = "
                  f"{result[clock, name]:6.1%} of peak")
    ng, hand = "nnet-train-one-job, natural gradient", "hand-written PyTorch loop, plain SGD"
    print(f"P7 training loop with natural gradient = {result['wall', ng]:.1%} of the fp32 GEMM peak "
          f"(CPU clock: {result['CPU', ng]:.1%})")
    print(f"P7 ratio NG loop / hand-written loop: {result['wall', ng] / result['wall', hand]:.3f} "
          f"(CPU clock: {result['CPU', ng] / result['CPU', hand]:.3f})   (goal >= 0.90)")


if __name__ == "__main__":
    main()
