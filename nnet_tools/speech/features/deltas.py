"""Kaldi's add-deltas, with kaldi-native-fbank's DeltaFeatures."""
import numpy as np

from nnet_tools.errors import NnetError


def check_delta_options(order, window):
    """Kaldi's DeltaFeatures asserts these bounds; here they are one line."""
    if not 0 <= order < 1000:
        raise NnetError(f"--delta-order must be in [0, 1000), got {order}")
    if not 0 < window < 1000:
        raise NnetError(f"--delta-window must be in (0, 1000), got {window}")


def add_deltas(feats, order=2, window=2):
    """Kaldi's add-deltas: [x, delta, delta-delta] with edge frames replicated."""
    import kaldi_native_fbank as knf
    check_delta_options(order, window)
    opts = knf.DeltaOptions()
    opts.order, opts.window = order, window
    return knf.compute_deltas(opts, np.ascontiguousarray(feats, dtype=np.float32))
