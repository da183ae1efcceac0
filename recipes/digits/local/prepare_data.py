#!/usr/bin/env python3
"""Kaldi data dirs from scikit-learn's bundled digits (1,797 8x8 images, no network needed).

Each image is a one-frame utterance: a 64-dim feature row (pixels / 16) and a one-element
target (its class). Writes DIR/{train,test}/{feats.ark,feats.scp,targets.ark,targets.scp,utt2spk}.

Usage: local/prepare_data.py [--test-fraction 0.2] [--seed 0] data
"""
from nnet_tools.cli import quiet_interrupt_until_ready

quiet_interrupt_until_ready()   # Ctrl-C during the imports (seconds) ends it quietly

import os  # noqa: E402

import click  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from nnet_tools.cli.common import program  # noqa: E402
from nnet_tools.data.images import write_data_dir  # noqa: E402


@click.command()
@click.option("--test-fraction", default=0.2, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.argument("dir")
@program("local/prepare_data.py")
def main(test_fraction, seed, dir):
    """Example: local/prepare_data.py --seed 0 data"""
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    n_test = int(round(test_fraction * len(order)))
    for name, idx in (("test", order[:n_test]), ("train", order[n_test:])):
        idx = np.sort(idx)  # Kaldi tables are sorted by key
        write_data_dir(os.path.join(dir, name), [f"digit{i:04d}" for i in idx], digits.data[idx] / 16.0,
                       digits.target[idx])
        print(f"local/prepare_data.py: wrote {len(idx)} utterances to {dir}/{name}")


if __name__ == "__main__":
    main()
