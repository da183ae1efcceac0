#!/usr/bin/env python3
"""Kaldi data dirs from the four MNIST-format IDX files (Fashion-MNIST, MNIST, KMNIST, ...).

IDX_DIR must hold train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
t10k-labels-idx1-ubyte, each optionally gzipped (".gz"; the "-idx" may also be ".idx").
Each image is a one-frame utterance: a 784-dim feature row (pixels / 255) and a one-element
target (its class). Writes DIR/{train,test}/{feats.ark,feats.scp,targets.ark,targets.scp,utt2spk}.

Usage: local/prepare_data.py [--idx-dir /usr/share/datasets/fashion-mnist] data
"""
from nnet_tools.cli import quiet_interrupt_until_ready

quiet_interrupt_until_ready()   # Ctrl-C during the imports (seconds) ends it quietly

import os  # noqa: E402

import click  # noqa: E402

from nnet_tools.cli.common import program  # noqa: E402
from nnet_tools.data.images import load_idx_set, write_data_dir  # noqa: E402


@click.command()
@click.option("--idx-dir", default="/usr/share/datasets/fashion-mnist", show_default=True)
@click.argument("dir")
@program("local/prepare_data.py")
def main(idx_dir, dir):
    """Example: local/prepare_data.py --idx-dir /usr/share/datasets/fashion-mnist data"""
    for name, stem in (("train", "train"), ("test", "t10k")):
        pixels, labels = load_idx_set(idx_dir, stem)
        keys = [f"{stem}{i:05d}" for i in range(len(labels))]  # zero-padded: sorted, as Kaldi tables are
        write_data_dir(os.path.join(dir, name), keys, pixels, labels)
        print(f"local/prepare_data.py: wrote {len(keys)} images of {pixels.shape[1]} pixels to {dir}/{name}")


if __name__ == "__main__":
    main()
