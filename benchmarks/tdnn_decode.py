#!/usr/bin/env python3
"""TDNN decoding speed: nnet-compute's chunk forward (each hidden frame computed once) against
the frame-window forward it replaced (every frame's whole left+1+right window through the
network), on the same model and utterance in one process. Prints frames per second for both,
the ratio, and the largest difference between their outputs.

    python3 benchmarks/tdnn_decode.py [--frames 3000] [--hidden 512] [--threads 1]
"""
import argparse
import time

import numpy as np
import torch

from nnet_tools.model import config
from nnet_tools.model.nnet import Nnet, frame_windows
from nnet_tools.evaluate import compute


def tdnn_config(hidden, classes=2000, dim=40):
    # Kaldi's classic TDNN shape: context 16 left, 10 right.
    text = (f"input-dim: {dim}\nsplice: -2:2\nlayers:\n  - {{type: relu-batchnorm, dim: {hidden}}}\n"
            + "".join(f"  - {{type: relu-batchnorm, dim: {hidden}, splice: {s}}}\n"
                      for s in ("[-1,0,1]", "[-1,0,1]", "[-3,0,3]", "[-3,0,3]", "[-6,-3,0]"))
            + f"  - {{type: output, dim: {classes}, param-stddev: 0.05}}\n")  # not 0: outputs must differ
    return config.normalize(config.yaml_load(text))


@torch.no_grad()
def frame_by_frame(net, feats, batch=512):
    windows = frame_windows(torch.from_numpy(feats), net.left_context, net.right_context)
    return torch.cat([net(windows[s:s + batch]) for s in range(0, len(windows), batch)]).numpy()


def timed(fn, repeats=3):
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=3000)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = Nnet(tdnn_config(args.hidden)).eval()
    feats = np.random.default_rng(0).normal(size=(args.frames, 40)).astype(np.float32)
    t_chunk, chunk = timed(lambda: compute.log_posteriors(net, feats))
    t_frame, frame = timed(lambda: frame_by_frame(net, feats))
    print(f"TDNN context {net.left_context},{net.right_context}, hidden {args.hidden}, {args.frames} frames, "
          f"{args.threads} thread(s)")
    print(f"frame windows: {args.frames / t_frame:10.0f} frames/s")
    print(f"chunk forward: {args.frames / t_chunk:10.0f} frames/s")
    print(f"ratio (chunk / frame windows): {t_frame / t_chunk:.1f}x; max |difference| {np.abs(chunk - frame).max():.2e}")


if __name__ == "__main__":
    main()
