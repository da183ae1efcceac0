#!/usr/bin/env python3
"""Chunk training (nnet-train-one-job --chunk true: every labelled frame of each eg in one pass, as
nnet3-train) against the --frame scheme (one label position per eg per pass, rotated by archive as
the driver rotates it), on the same model config and egs dir, in this process: one epoch of each
(every labelled frame once, plain NG-SGD at one learning rate), from the same initial model, at
the same frames per minibatch (the recipes' 256: 256 egs of the frame scheme, 32 egs of 8
frames). Prints the labelled frames trained per second of each, their ratio, and the valid frame
accuracy after the epoch (valid_diagnostic.egs, every label position, test mode).

    python3 benchmarks/chunk_training.py --egs-dir recipes/spoken_digits/exp/egs \
        --config recipes/spoken_digits/exp/model.yaml [--learning-rate 0.002] [--threads 1]
"""
import argparse
import os
import time

import torch

from nnet_tools.data import egs
from nnet_tools.data.egs import read_info
from nnet_tools.evaluate import diagnostics
from nnet_tools.log import logger
from nnet_tools.model import config
from nnet_tools.model.nnet import Nnet
from nnet_tools.train import job


def epoch(cfg, egs_dir, chunk, lr, minibatch):
    """One epoch: every archive once in whole chunks, or frames-per-eg times, one label position each."""
    torch.manual_seed(0)
    net = Nnet(cfg)
    num_archives, fpe = read_info(egs_dir, "num_archives"), read_info(egs_dir, "frames_per_eg")
    frames, seconds = 0, 0.0
    for k in range(num_archives if chunk else num_archives * fpe):   # the driver's rotation
        archive = egs.EgsArchive(os.path.join(egs_dir, f"egs.{k % num_archives + 1}.ark"))
        opts = job.TrainOptions(learning_rate=lr, chunk=chunk, frame=(k // num_archives) % fpe,
                                minibatch_size=minibatch, srand=k)
        start = time.perf_counter()
        _, n = job.train_one_job(net, archive, opts)
        seconds += time.perf_counter() - start
        frames += n
    windows, labels = egs.EgsArchive(os.path.join(egs_dir, "valid_diagnostic.egs")).all_frames(net)
    stats = diagnostics.compute_prob(net, windows, labels)
    return frames / seconds, frames, seconds, stats.correct / stats.frames


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--egs-dir", required=True)
    p.add_argument("--config", required=True, help="the model's YAML config (e.g. the recipe's exp/model.yaml)")
    p.add_argument("--learning-rate", type=float, default=0.002)
    p.add_argument("--frame-minibatch-size", default="256,128", help="in egs (= frames) for the --frame scheme")
    p.add_argument("--chunk-minibatch-size", default="32,16", help="in egs for chunk training (x frames-per-eg frames)")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    logger.setLevel("WARNING")
    with open(a.config) as f:
        cfg = config.normalize(config.yaml_load(f.read()))
    results = {name: epoch(cfg, a.egs_dir, chunk, a.learning_rate, minibatch)
               for name, chunk, minibatch in (("frame", False, a.frame_minibatch_size),
                                              ("chunk", True, a.chunk_minibatch_size))}
    print(f"egs dir {a.egs_dir}: {read_info(a.egs_dir, 'num_archives')} archives, frames-per-eg "
          f"{read_info(a.egs_dir, 'frames_per_eg')}; threads {a.threads}; learning rate {a.learning_rate:g}; "
          f"minibatch sizes (egs) frame {a.frame_minibatch_size}, chunk {a.chunk_minibatch_size}; "
          f"load average {os.getloadavg()[0]:.2f}")
    for name, (rate, frames, seconds, acc) in results.items():
        print(f"{name:6s} scheme: {rate:9.0f} frames/s ({frames} labelled frames in {seconds:.1f} s); "
              f"valid frame accuracy after one epoch {acc:.4f}")
    print(f"chunk / frame, frames per second: {results['chunk'][0] / results['frame'][0]:.2f}")


if __name__ == "__main__":
    main()
