#!/usr/bin/env python3
"""Egs compression (--compress true, Kaldi's kTwoByte per eg) against float32 archives of the same
egs: archive bytes, write time, the time to read one 512-eg minibatch (codes decoded from the
memory map), nnet-train-one-job's egs/s reading each, and the objective and accuracy on held-out float32 egs of a model
trained one pass on each (same seed, so compression is the only difference).

Writes and training alternate between the two formats in this process, best of --repeats.

    python3 benchmarks/egs_compression.py [--egs 16000] [--hidden 256] [--layers 2] [--classes 50] [--repeats 3]
"""
import argparse
import copy
import logging
import os
import tempfile
import time

import numpy as np
import torch

from common import mlp_config
from nnet_tools.data import egs
from nnet_tools.log import logger
from nnet_tools.model.nnet import Nnet
from nnet_tools.evaluate import diagnostics
from nnet_tools.train import job as train


def speech_like(num_egs, seed, means, left=5, right=5):
    """One-label egs of +-5 frames of 40-dim features around class means (fbank-like offsets)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(means), (num_egs, 1)).astype(np.int32)
    inputs = rng.normal(size=(num_egs, left + 1 + right, means.shape[1])).astype(np.float32) * 2
    inputs += means[labels[:, 0]][:, None, :]
    return inputs, labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--egs", type=int, default=16000)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--classes", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lrate", type=float, default=2e-5)
    args = p.parse_args()
    logger.setLevel(logging.WARNING)
    rng = np.random.default_rng(0)
    means = (rng.normal(size=(args.classes, 40)) * 3 + 10).astype(np.float32)   # fbank-like: offset, spread
    inputs, labels = speech_like(args.egs, 1, means)
    v_inputs, v_labels = speech_like(5000, 2, means)
    keys = [str(i) for i in range(args.egs)]
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
        paths, write_s = {}, {}
        for compress in (False, True) * args.repeats:
            path = f"{d}/{'c' if compress else 'f'}.ark"
            t = time.perf_counter()
            egs.write_archive(path, inputs, labels, keys, 5, 5, compress=compress)
            write_s[compress] = min(write_s.get(compress, 1e9), time.perf_counter() - t)
            paths[compress] = path
        egs.write_archive(f"{d}/valid.ark", v_inputs, v_labels, [f"v{i}" for i in range(len(v_labels))], 5, 5)
        windows, vlabels = egs.EgsArchive(f"{d}/valid.ark").all_frames(Nnet(mlp_config(args.hidden, args.layers,
                                                                                  args.classes)))
        torch.manual_seed(0)
        base = Nnet(mlp_config(args.hidden, args.layers, classes=args.classes))
        opts = train.TrainOptions(learning_rate=args.lrate, minibatch_size="512", max_param_change=2.0)
        train_s, models = {}, {}
        for compress in (False, True) * args.repeats:
            model = copy.deepcopy(base)
            t = time.perf_counter()
            train.train_one_job(model, egs.EgsArchive(paths[compress]), opts)
            train_s[compress] = min(train_s.get(compress, 1e9), time.perf_counter() - t)
            models[compress] = model
        read_ms = {}
        for compress in (False, True) * args.repeats:   # the read alone: what decoding adds per minibatch
            archive, pick = egs.EgsArchive(paths[compress]), np.random.default_rng(0)
            t = time.perf_counter()
            for _ in range(100):
                archive.windows(np.sort(pick.permutation(args.egs)[:512]), 0, 5, 5)
            read_ms[compress] = min(read_ms.get(compress, 1e9), (time.perf_counter() - t) * 10)
        sizes = {c: os.path.getsize(paths[c]) for c in paths}
        print(f"{args.egs} egs of 11 x 40 inputs, model 440-{args.hidden}x{args.layers}-{args.classes}, "
              f"{torch.get_num_threads()} threads, best of {args.repeats}")
        for c, name in ((False, "float32   "), (True, "compressed")):
            s = diagnostics.compute_prob(models[c], windows, vlabels)
            print(f"  {name}: {sizes[c] / 1e6:7.1f} MB, write {write_s[c]:6.2f} s, read {read_ms[c]:.2f} ms per "
                  f"512-eg minibatch, train "
                  f"{args.egs / train_s[c]:7.0f} egs/s; held-out objective {s.objf / s.frames:.5f}, "
                  f"accuracy {s.correct / s.frames:.4f}")
        print(f"compression ratio {sizes[False] / sizes[True]:.2f}x; write time compressed / float32 = "
              f"{write_s[True] / write_s[False]:.2f}; minibatch read compressed / float32 = "
              f"{read_ms[True] / read_ms[False]:.2f}; training speed compressed / float32 = "
              f"{train_s[False] / train_s[True]:.3f}")


if __name__ == "__main__":
    main()
