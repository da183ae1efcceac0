#!/usr/bin/env python3
"""Kaldi data dirs from the four MNIST-format IDX files (Fashion-MNIST, MNIST, KMNIST, ...).

IDX_DIR must hold train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
t10k-labels-idx1-ubyte, each optionally gzipped (".gz"; the "-idx" may also be ".idx").
Each image is a one-frame utterance: a 784-dim feature row (pixels / 255) and a one-element
target (its class). Writes DIR/{train,test}/{feats.ark,feats.scp,targets.ark,targets.scp,utt2spk}.

Usage: local/prepare_data.py [--idx-dir /usr/share/datasets/fashion-mnist] data
"""
import argparse
import os
import sys

from nnet_tools.errors import NnetError
from nnet_tools.data.images import load_idx_set, write_data_dir


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--idx-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("dir")
    args = p.parse_args()
    try:
        for name, stem in (("train", "train"), ("test", "t10k")):
            pixels, labels = load_idx_set(args.idx_dir, stem)
            keys = [f"{stem}{i:05d}" for i in range(len(labels))]  # zero-padded: sorted, as Kaldi tables are
            write_data_dir(os.path.join(args.dir, name), keys, pixels, labels)
            print(f"local/prepare_data.py: wrote {len(keys)} images of {pixels.shape[1]} pixels to {args.dir}/{name}")
    except NnetError as e:
        sys.exit(f"local/prepare_data.py: {e}")


if __name__ == "__main__":
    main()
