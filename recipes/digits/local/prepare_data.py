#!/usr/bin/env python3
"""Kaldi data dirs from scikit-learn's bundled digits (1,797 8x8 images, no network needed).

Each image is a one-frame utterance: a 64-dim feature row (pixels / 16) and a one-element
target (its class). Writes DIR/{train,test}/{feats.ark,feats.scp,targets.ark,targets.scp,utt2spk}.

Usage: local/prepare_data.py [--test-fraction 0.2] [--seed 0] data
"""
import argparse
import os

import numpy as np
from sklearn.datasets import load_digits

from nnet_tools.data.images import write_data_dir


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("dir")
    args = p.parse_args()
    digits = load_digits()
    order = np.random.default_rng(args.seed).permutation(len(digits.target))
    n_test = int(round(args.test_fraction * len(order)))
    for name, idx in (("test", order[:n_test]), ("train", order[n_test:])):
        idx = np.sort(idx)  # Kaldi tables are sorted by key
        write_data_dir(os.path.join(args.dir, name), [f"digit{i:04d}" for i in idx], digits.data[idx] / 16.0,
                       digits.target[idx])
        print(f"local/prepare_data.py: wrote {len(idx)} utterances to {args.dir}/{name}")


if __name__ == "__main__":
    main()
