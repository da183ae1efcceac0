"""Online CMVN, as Kaldi's apply-cmvn-online and its online decoders (OnlineCmvn in
src/feat/online-feature.cc, which Kaldi's online2 decoders run; vosk 0.3.45, measured, applies
the global mean alone instead: docs/kaldi-interop.md).

Frame t is normalised with the statistics of the last ``cmn_window`` frames up to and
including t. While the window holds fewer frames than that, it is filled up first from the
speaker's earlier utterances (at most ``speaker_frames``), then from the global statistics (at
most ``global_frames``), each scaled to the count it contributes. Nothing after frame t is
used, so a decoder can normalise as audio arrives, which per-speaker offline CMVN cannot.

Statistics are Kaldi's [2, D+1] CMVN matrices (data/cmvn.py).
"""
from dataclasses import dataclass

import numpy as np

from nnet_tools.data import tables
from nnet_tools.data.finite import require_finite
from nnet_tools.data.cmvn import VAR_FLOOR, format_cmvn_opts
from nnet_tools.errors import NnetError
from nnet_tools.log import logger


@dataclass
class OnlineCmvnOptions:
    """Kaldi's OnlineCmvnOptions, with its defaults."""
    cmn_window: int = 600
    speaker_frames: int = 600
    global_frames: int = 200
    norm_means: bool = True
    norm_vars: bool = False

    def check(self):
        if not 0 <= self.global_frames <= self.speaker_frames <= self.cmn_window or self.cmn_window < 1:
            raise NnetError(f"online CMVN needs 0 <= --global-frames ({self.global_frames}) <= --speaker-frames "
                            f"({self.speaker_frames}) <= --cmn-window ({self.cmn_window}), and a window of "
                            "at least one frame")
        if self.norm_vars and not self.norm_means:
            raise NnetError("you cannot normalise the variance but not the mean (--norm-vars=true needs "
                            "--norm-means=true)")


def apply_online_cmvn(feats, global_stats, opts=None, speaker_stats=None, where="online CMVN"):
    """[T, D] features -> normalised float32 features, frame by frame as OnlineCmvn::GetFrame.

    ``speaker_stats`` are the speaker's earlier utterances' statistics (None for a speaker's
    first utterance, or without speakers); ``where`` names the utterance in errors."""
    opts = opts or OnlineCmvnOptions()
    feats = np.asarray(feats, dtype=np.float32)
    if not opts.norm_means:
        return feats.copy()
    global_stats = np.asarray(global_stats, dtype=np.float64)
    dim = feats.shape[1] if feats.ndim == 2 else -1
    if global_stats.shape != (2, dim + 1):
        raise NnetError(f"{where}: dim mismatch: global CMVN statistics {'x'.join(map(str, global_stats.shape))}, "
                        f"features {'x'.join(map(str, feats.shape))}")
    if global_stats[0, dim] <= 0:
        raise NnetError(f"{where}: the global CMVN statistics have no frames (count {global_stats[0, dim]:g})")
    x = feats.astype(np.float64)
    rows = 2 if opts.norm_vars else 1
    # The window's sums: prefix sums differenced, rows [T, rows, D+1] as Kaldi's stats matrix.
    frame_stats = np.zeros((len(x), rows, dim + 1))
    frame_stats[:, 0, :dim], frame_stats[:, 0, dim] = x, 1.0
    if opts.norm_vars:
        frame_stats[:, 1, :dim] = x * x
    prefix = np.concatenate([np.zeros((1, rows, dim + 1)), np.cumsum(frame_stats, axis=0)])
    t = np.arange(len(x))
    stats = prefix[t + 1] - prefix[np.maximum(t + 1 - opts.cmn_window, 0)]
    count = np.minimum(t + 1, opts.cmn_window).astype(np.float64)
    for prior, limit in ((speaker_stats, opts.speaker_frames), (global_stats, opts.global_frames)):
        if prior is None or prior[0, dim] <= 0:
            continue
        take = np.clip(np.minimum(opts.cmn_window - count, min(limit, prior[0, dim])), 0.0, None)
        stats += (take / prior[0, dim])[:, None, None] * np.asarray(prior, np.float64)[None, :rows]
        count = count + take
    mean = stats[:, 0, :dim] / stats[:, 0, dim:]
    if not opts.norm_vars:
        return (feats - mean.astype(np.float32)).astype(np.float32)
    var = stats[:, 1, :dim] / stats[:, 0, dim:] - mean * mean
    if (var < VAR_FLOOR).any():
        logger.warning(f"{where}: flooring cepstral variance from {var.min():g} to {VAR_FLOOR:g}")
    scale = 1.0 / np.sqrt(np.maximum(var, VAR_FLOOR))
    return (feats * scale.astype(np.float32) + (-(mean * scale)).astype(np.float32)).astype(np.float32)


def speaker_state(speaker_stats, feats):
    """The speaker statistics after an utterance (OnlineCmvn::GetState): all its frames added,
    in double as Kaldi adds them."""
    x = np.asarray(feats, dtype=np.float64)
    stats = np.zeros((2, x.shape[1] + 1))
    stats[0, :-1], stats[1, :-1], stats[0, -1] = x.sum(0), (x * x).sum(0), len(x)
    return stats if speaker_stats is None else speaker_stats + stats


def read_global_stats(path):
    """The [2, D+1] global CMVN statistics file that online CMVN backs off to."""
    stats = tables.read_double_matrix(path)
    require_finite(stats, path, "CMVN statistics", rows=None)
    return stats


class OnlineCmvnApplier:
    """Online CMVN as a feature reader's normaliser (the CmvnApplier interface): every utterance
    from the global statistics alone, as an online decoder meets a new stream (Kaldi's
    apply-cmvn-online without --spk2utt)."""

    def __init__(self, global_stats, norm_means=True, norm_vars=False):
        self.name = global_stats
        self.options = OnlineCmvnOptions(norm_means=norm_means, norm_vars=norm_vars)
        self.options.check()
        self.global_stats = read_global_stats(global_stats)

    def opts(self):
        """Kaldi's cmvn_opts string for these options, as get_egs records it."""
        return format_cmvn_opts(self.options.norm_means, self.options.norm_vars)

    def __call__(self, utt, feats):
        return apply_online_cmvn(feats, self.global_stats, self.options, where=f"{self.name}: utterance '{utt}'")

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
