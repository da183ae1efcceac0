"""Kaldi's splice-feats (SpliceFrames in src/feat/feature-functions.cc): each output frame t is
input frames t-left .. t+right side by side, a frame before the start or after the end replaced
by the first or last frame."""
import numpy as np

from nnet_tools.errors import NnetError


def check_context(left_context, right_context):
    """Kaldi asserts these; here they are one line."""
    if left_context < 0 or right_context < 0:
        raise NnetError(f"--left-context and --right-context must be >= 0, got {left_context} and {right_context}")


def splice_frames(feats, left_context=4, right_context=4):
    """[T, D] features -> [T, D * (left + 1 + right)] float32: block j of row t is frame
    clamp(t + j - left, 0, T - 1)."""
    check_context(left_context, right_context)
    feats = np.asarray(feats, dtype=np.float32)
    if feats.ndim != 2 or feats.shape[0] == 0 or feats.shape[1] == 0:
        raise NnetError(f"splice-feats: empty input (features of shape {feats.shape})")
    t = feats.shape[0]
    offsets = np.arange(-left_context, right_context + 1)
    source = np.clip(np.arange(t)[:, None] + offsets[None, :], 0, t - 1)   # [T, N] source frames
    return np.ascontiguousarray(feats[source].reshape(t, -1))
