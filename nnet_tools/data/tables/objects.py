"""Single objects (Kaldi's rxfilename / wxfilename: a file, '-', or a pipe), not tables: a wav
file, a vector or a double matrix, read by Kaldi's own code and written atomically."""
import os

import numpy as np
# The pybind classes, not kaldi_native_io's Python wrappers (see value_types).
from kaldi_native_io.lib import _kaldi_native_io as _kni

from nnet_tools.data.tables.kaldi_calls import Kaldi
from nnet_tools.data.tables.specifiers import check_input_file, file_of, is_pipe, is_plain_file
from nnet_tools.data.tables.value_types import to_matrix
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path


def _read_object(read, rxfilename, name=None):
    """``read(rxfilename)``, Kaldi's reading of one object, with its messages captured; ``name``
    (default: rxfilename) names it in errors."""
    name = name or rxfilename
    if is_plain_file(rxfilename):  # "file.ark:123": the object at that byte offset, as Kaldi
        check_input_file(name, file_of(rxfilename))
    kaldi = Kaldi(name)
    try:
        value = kaldi(lambda: read(rxfilename), starts_command=is_pipe(rxfilename))
    finally:
        kaldi.command_ended()
    kaldi.log_pending()
    return value


def read_wave(rxfilename, name=None):
    """(sample rate, [channels, samples] float32 in int16 scale) of one wav file, or of a command's
    output ('sox x.flac -t wav - |'), read by Kaldi's WaveData (which warns on a truncated file
    and reads to the end one whose header gives no size). ``name`` is the name in errors."""
    wave = _read_object(_kni.read_wave, rxfilename, name)
    return wave.sample_freq, np.array(wave.data.numpy(), dtype=np.float32, copy=True)


def read_vector(rxfilename) -> np.ndarray:
    """One Kaldi vector file as float64: binary (float ``\\0BFV`` or double ``\\0BDV``) or text
    (``[ 1 2 3 ]``), as Kaldi's ReadKaldiObject reads it."""
    return np.array(_read_object(_kni._DoubleVector.read, rxfilename).numpy(), dtype=np.float64, copy=True)


def read_double_matrix(rxfilename) -> np.ndarray:
    """One Kaldi matrix file (binary or text, float or double) as float64, e.g. global CMVN stats."""
    return np.array(_read_object(_kni._DoubleMatrix.read, rxfilename).numpy(), dtype=np.float64, copy=True)


def write_vector(path, vector, binary=True, double=False):
    """Write one Kaldi vector file atomically: binary ``\\0BFV`` (``\\0BDV`` if ``double``) or text."""
    array = np.ascontiguousarray(vector, dtype=np.float64 if double else np.float32)
    if array.ndim != 1:
        raise NnetError(f"{path}: expected a 1-D vector, got shape {array.shape}")
    _write_object(path, (_kni._DoubleVector if double else _kni._FloatVector)(array), binary)


def write_double_matrix(path, matrix, binary=True):
    """Write one Kaldi double matrix file atomically (``\\0BDM``, or text), e.g. global CMVN stats."""
    _write_object(path, to_matrix(_kni._DoubleMatrix, np.float64)(matrix, str(path)), binary)


def write_float_matrix(path, matrix, binary=True):
    """Write one Kaldi float matrix file atomically (``\\0BFM``, or text), e.g. an LDA transform."""
    _write_object(path, to_matrix(_kni._FloatMatrix, np.float32)(matrix, str(path)), binary)


def _write_object(path, value, binary):
    """Kaldi's writer of a single object crashes the process (SIGSEGV) when a write fails, as on
    a full disk: it writes to memory here (Linux), and Python writes the file."""
    if not hasattr(os, "memfd_create"):
        with atomic_path(path) as tmp:
            Kaldi(str(path))(lambda: value.write(tmp, binary))
        return
    memory = os.memfd_create("kaldi-object")
    try:
        Kaldi(str(path))(lambda: value.write(f"/proc/self/fd/{memory}", binary))
        data = os.pread(memory, os.fstat(memory).st_size, 0)
    finally:
        os.close(memory)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
