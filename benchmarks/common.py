"""Shared set-up for the benchmarks: a synthetic, learnable egs archive and model configs."""
import argparse

import numpy as np

from nnet_tools.model import config
from nnet_tools.data import egs


def speech_like_archive(path, num_egs, dim=40, left=5, right=5, classes=2000, seed=0):
    """One-label egs with +-5 frames of 40-dim context, classes with distinct means."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, (num_egs, 1)).astype(np.int32)
    means = rng.normal(size=(classes, dim)).astype(np.float32)
    inputs = rng.normal(size=(num_egs, left + 1 + right, dim)).astype(np.float32)
    inputs += means[labels[:, 0]][:, None, :]
    egs.write_archive(path, inputs, labels, [str(i) for i in range(num_egs)], left, right)
    return path


def mlp_config(hidden, layers, classes=2000, dim=40, natural_gradient=False, batchnorm=False):
    kind = "relu-batchnorm" if batchnorm else "relu"
    text = f"input-dim: {dim}\nsplice: -5:5\nnatural-gradient: {str(natural_gradient).lower()}\nlayers:\n"
    text += "".join(f"  - {{type: {kind}, dim: {hidden}}}\n" for _ in range(layers))
    text += f"  - {{type: output, dim: {classes}}}\n"
    return config.normalize(config.yaml_load(text))


def positive_int(text):
    """argparse type: an integer >= 1 (a bad value is one usage line, not a traceback)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"want an integer >= 1, got {text!r}")
    return value


def loop_arguments(parser, egs, repeats):
    """The options the training-loop benchmarks share: archive size, model shape, minibatch."""
    parser.add_argument("--egs", type=positive_int, default=egs)
    parser.add_argument("--hidden", type=positive_int, default=1024)
    parser.add_argument("--layers", type=positive_int, default=4)
    parser.add_argument("--minibatch", type=positive_int, default=512)
    parser.add_argument("--repeats", type=positive_int, default=repeats,
                        help="runs of each, the best kept; a process's first run of a loop carries one-off "
                             "start-up costs (lazy imports), so 1 can mislead")
    return parser
