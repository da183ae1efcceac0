#!/usr/bin/env python3
"""What the nonlinearity statistics cost a training step (nnet-train-one-job's
--store-component-stats, on by default as in nnet3-train).

The same 440-1024x4-2000 relu model (train_throughput.py's, natural gradient off) runs
forward and backward at minibatch 512 with the statistics stored and not, in alternating blocks
of steps in this process; the cost is the median over adjacent block pairs of their time ratio
(ng_step.py's pairing, which cancels slow drifts in machine load).

    python3 benchmarks/component_stats.py [--threads 1] [--blocks 15] [--steps 8]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

from common import mlp_config
from ng_step import paired_ratio, timed
from nnet_tools import heap
from nnet_tools.model.nnet import Nnet


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--blocks", type=int, default=15)
    p.add_argument("--steps", type=int, default=8, help="steps per block (a multiple of 4: Kaldi's sampling cycle)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    heap.keep_freed_memory()  # as nnet-train-one-job does
    torch.manual_seed(0)
    model = Nnet(mlp_config(1024, 4, natural_gradient=False)).train()
    x = torch.randn(512, 1 + model.left_context + model.right_context, model.input_dim)
    y = torch.randint(2000, (512,))

    def step():
        F.nll_loss(model(x), y, reduction="sum").backward()
        for param in model.parameters():
            param.grad = None

    timed(step, 4)
    on, off = [], []
    for _ in range(args.blocks):
        for store, times in ((True, on), (False, off)):
            model.store_component_stats(store)
            times.append(timed(step, args.steps)[0])
    print(f"440-1024x4-2000 relu, minibatch 512, {torch.get_num_threads()} thread(s), "
          f"{args.blocks} blocks x {args.steps} steps")
    print(f"step without statistics: median {1000 * statistics.median(off):.1f} ms; with: "
          f"{1000 * statistics.median(on):.1f} ms")
    print(f"component stats cost: step time with / without (median of paired blocks) {paired_ratio(off, on):.4f}")


if __name__ == "__main__":
    main()
