"""Kaldi's presoftmax prior scale (steps/libs/nnet3/train/common.py, compute_presoftmax_prior_scale):
a fixed per-class scale on the output layer's pre-softmax activations that damps frequent
classes, scale_i proportional to (count_i + 0.01 mean_count)^power with power -0.25, rescaled to
mean 1. The model applies it as log_softmax(scale * z) (Nnet.set_presoftmax_scale).
"""
import numpy as np

from nnet_tools.data import egs
from nnet_tools.errors import NnetError


def prior_scale(counts, power=-0.25, smooth=0.01):
    """Per-class counts -> the scale vector (Kaldi's smooth_presoftmax_prior_scale_vector)."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or len(counts) == 0 or not np.isfinite(counts).all() or (counts < 0).any():
        raise NnetError("presoftmax prior scale: counts must be a non-empty vector of non-negative numbers")
    if counts.sum() <= 0:
        raise NnetError("presoftmax prior scale: all class counts are zero")
    scales = (counts + smooth * counts.mean()) ** power
    return scales * len(counts) / scales.sum()


def egs_counts(egs_dir):
    """Frames per class over an egs dir's training archives (what the jobs will see)."""
    classes = egs.read_info(egs_dir, "output_dim")
    counts = np.zeros(classes, dtype=np.float64)
    for k in range(1, egs.read_info(egs_dir, "num_archives") + 1):
        labels = egs.EgsArchive(f"{egs_dir}/egs.{k}.ark").labels
        counts += np.bincount(labels[labels >= 0].ravel(), minlength=classes)[:classes]
    return counts
