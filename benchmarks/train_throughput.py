#!/usr/bin/env python3
"""P2: nnet-train-one-job's training loop against a hand-written PyTorch loop, same model and data.

Both run plain SGD (natural gradient off, so the ratio shows our loop's own cost: archive reads,
shuffle buffer, minibatch rule, max-change, logging) on the same memory-mapped archive, in this
process, alternating, best of --repeats. Prints egs/s of each and the ratio (goal >= 0.95).
Also times nnet-train-one-job without the nonlinearity statistics nnet3 keeps
(--store-component-stats=false) and prints that cost as a ratio.

    python3 benchmarks/train_throughput.py [--egs 20000] [--hidden 1024] [--layers 4]
"""
import argparse
import copy
import logging
import os
import tempfile
import time

import numpy as np
import torch

from common import loop_arguments, mlp_config, speech_like_archive
from nnet_tools.data import egs
from nnet_tools.train import job as train
from nnet_tools.log import logger
from nnet_tools.model.nnet import Nnet


def warm_up():
    """Pay torch.optim's one-off lazy imports (seconds, on a process's first step) before timing."""
    w = torch.zeros(1, requires_grad=True)
    w.sum().backward()
    torch.optim.SGD([w], lr=0.1).step()


def hand_loop(model, archive, lr, minibatch):
    """What a PyTorch user would write: shuffled minibatches from the archive, SGD on summed NLL."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    order = np.random.default_rng(0).permutation(archive.num_egs)
    model.train()
    for start in range(0, archive.num_egs - minibatch + 1, minibatch):
        idx = np.sort(order[start:start + minibatch])
        x = torch.from_numpy(archive.inputs[idx])
        y = torch.from_numpy(archive.labels[idx, 0].astype(np.int64))
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.nll_loss(model(x), y, reduction="sum").backward()
        opt.step()


def main():
    p = argparse.ArgumentParser()
    loop_arguments(p, egs=20000, repeats=3)
    args = p.parse_args()
    logger.setLevel(logging.WARNING)
    warm_up()
    with tempfile.TemporaryDirectory() as tmp:
        archive = egs.EgsArchive(speech_like_archive(os.path.join(tmp, "egs.1.ark"), args.egs))
        torch.manual_seed(0)
        base = Nnet(mlp_config(args.hidden, args.layers))
        opts = train.TrainOptions(learning_rate=1e-4, minibatch_size=str(args.minibatch), max_param_change=2.0)
        no_stats = train.TrainOptions(learning_rate=1e-4, minibatch_size=str(args.minibatch), max_param_change=2.0,
                                      store_component_stats=False)
        ours, hand, bare = [], [], []
        for _ in range(args.repeats):
            model = copy.deepcopy(base)
            t = time.perf_counter()
            train.train_one_job(model, archive, opts)
            ours.append(time.perf_counter() - t)
            model = copy.deepcopy(base)
            t = time.perf_counter()
            train.train_one_job(model, archive, no_stats)
            bare.append(time.perf_counter() - t)
            model = copy.deepcopy(base)
            t = time.perf_counter()
            hand_loop(model, archive, 1e-4, args.minibatch)
            hand.append(time.perf_counter() - t)
    n = args.egs // args.minibatch * args.minibatch
    print(f"model 440-{args.hidden}x{args.layers}-2000, minibatch {args.minibatch}, {n} egs, "
          f"{torch.get_num_threads()} threads, best of {args.repeats}")
    print(f"hand-written loop : {n / min(hand):8.0f} egs/s")
    print(f"nnet-train-one-job: {n / min(ours):8.0f} egs/s")
    print(f"  without component stats: {n / min(bare):8.0f} egs/s")
    print(f"P2 throughput ratio (ours / hand-written) = {min(hand) / min(ours):.3f}   (goal >= 0.95)")
    print(f"component stats cost: time with / without = {min(ours) / min(bare):.3f}")


if __name__ == "__main__":
    main()
