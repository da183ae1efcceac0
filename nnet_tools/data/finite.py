"""Refusing NaN and infinite values in what a program reads: carried into a model, a CMVN
statistic or a decode, one NaN silently spoils everything computed from it."""
import numpy as np

from nnet_tools.errors import NnetError


def require_finite(values, where, what="features", rows="frame"):
    """One line, ``WHERE: NaN or infinite WHAT (first: frame T)``, if the array holds any;
    ``rows`` names its first axis in the message (None: no position)."""
    finite = np.isfinite(values)
    if finite.all():
        return
    at = ""
    if rows:
        first = int(np.argmin(finite.reshape(len(finite), -1).all(axis=1)))
        at = f" (first: {rows} {first})"
    raise NnetError(f"{where}: NaN or infinite {what}{at}")
