"""The value types of tables: which kaldi-native-io classes read and write them, and the
conversions between numpy arrays and Kaldi's types."""
import dataclasses
from typing import Callable

import numpy as np
# The pybind classes, not kaldi_native_io's Python wrappers: those print an "Exception ignored
# in __del__" traceback whenever opening fails.
from kaldi_native_io.lib import _kaldi_native_io as _kni

from nnet_tools.errors import NnetError


def _to_int32_list(value, where):
    array = np.asarray(value)
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
        raise NnetError(f"{where}: expected a 1-D integer array, got {array.dtype} of shape {array.shape}")
    return array.astype(np.int32).tolist()


def _to_posterior(value, where):
    """Kaldi's Posterior: per frame, a list of (transition-id, weight) pairs."""
    try:
        return [[(int(tid), float(weight)) for tid, weight in frame] for frame in value]
    except (TypeError, ValueError):
        raise NnetError(f"{where}: expected per frame a list of (transition-id, weight) pairs") from None


def to_matrix(kaldi_type, dtype):
    def convert(value, where):
        array = np.asarray(value)
        if array.ndim != 2:
            raise NnetError(f"{where}: expected a 2-D matrix, got shape {array.shape}")
        if array.size == 0:
            array = np.zeros((0, 0), dtype)  # Kaldi's only empty matrix
        return kaldi_type(np.ascontiguousarray(array, dtype=dtype))
    return convert


@dataclasses.dataclass(frozen=True)
class ValueType:
    sequential: type
    random_access: type
    # numpy() views memory Kaldi reuses for the next entry: always copy.
    to_numpy: Callable = lambda value: np.array(value.numpy(), copy=True)
    writer: type = None
    to_kaldi: Callable = None


MATRIX = ValueType(_kni._SequentialFloatMatrixReader, _kni._RandomAccessFloatMatrixReader,
                   writer=_kni._FloatMatrixWriter, to_kaldi=to_matrix(_kni._FloatMatrix, np.float32))
# CMVN statistics: sums of squares over a speaker's frames need float64, as Kaldi keeps them.
DOUBLE_MATRIX = ValueType(_kni._SequentialDoubleMatrixReader, _kni._RandomAccessDoubleMatrixReader,
                          writer=_kni._DoubleMatrixWriter,
                          to_kaldi=to_matrix(_kni._DoubleMatrix, np.float64))
VECTOR = ValueType(_kni._SequentialFloatVectorReader, _kni._RandomAccessFloatVectorReader)
INT_VECTOR = ValueType(_kni._SequentialInt32VectorReader, _kni._RandomAccessInt32VectorReader,
                       to_numpy=lambda value: np.asarray(value, dtype=np.int32),  # a list of ints
                       writer=_kni._Int32VectorWriter, to_kaldi=_to_int32_list)
# Posteriors on transition-ids (lattice-to-post, ali-to-post): read as a fresh list of lists of
# (int, float) pairs, one list per frame.
POSTERIOR = ValueType(_kni._SequentialPosteriorReader, _kni._RandomAccessPosteriorReader,
                      to_numpy=lambda value: value, writer=_kni._PosteriorWriter, to_kaldi=_to_posterior)
