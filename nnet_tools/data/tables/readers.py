"""Reading tables: in order (``read_matrices``, ...) or by key (``RandomAccessMatrices``, ...).

A truncated archive or a failed pipe, which Kaldi only reports as a warning (iteration ends
early and close() returns False), is an NnetError here; values are numpy copies that outlive
the next read."""
import re
from typing import Iterator

import numpy as np

from nnet_tools.data.tables.kaldi_calls import Kaldi
from nnet_tools.data.tables.specifiers import check_rspecifier
from nnet_tools.data.tables.value_types import DOUBLE_MATRIX, INT_VECTOR, MATRIX, POSTERIOR, VECTOR, ValueType
from nnet_tools.errors import NnetError, not_utf8

# Kaldi's warnings about a value it read all the same ("inf" in a text matrix): no read failed.
_VALUE_NOTE = re.compile(r"Reading (infinite|NaN) value into (matrix|vector)")


def _read_sequential(rspecifier, value_type) -> Iterator[tuple[str, np.ndarray]]:
    is_pipe = check_rspecifier(rspecifier)  # a bad specifier or a missing file fails right here
    return _entries(rspecifier, value_type, is_pipe)


def _entries(rspecifier, value_type, is_pipe):
    # Kaldi is opened only once iteration starts, so that the finally below always closes it:
    # a reader in an error state that is destroyed unclosed throws from a C++ destructor,
    # which aborts the process.
    kaldi = Kaldi(rspecifier)
    # Opening reads the first entry, so a wrong type or a corrupt start fails here.
    impl = kaldi(lambda: value_type.sequential(rspecifier), starts_command=is_pipe)

    def value_then_next():
        value = value_type.to_numpy(impl.value)  # an scp entry is loaded (and can fail) here
        impl.next()  # an archive reads its next entry here; failing, it just ends
        return value

    key, finished, seen = None, False, set()
    try:
        while not impl.done:
            kaldi.log_pending()  # reading went on, so earlier warnings were harmless
            try:
                key = impl.key
            except UnicodeDecodeError as e:
                which = f"the key after '{key}'" if key is not None else "the first key"
                raise NnetError(f"{kaldi.name}: {which} {not_utf8(e, offset=False)}") from None
            value = kaldi(value_then_next, key=key)
            # Refused as Kaldi's random-access readers refuse it: read in order, the second value
            # would be trained on (or joined with another table's) as if it were another utterance.
            if key in seen:
                raise NnetError(f"{kaldi.name}: duplicate key '{key}'")
            seen.add(key)
            yield key, value
        finished = True
    finally:
        if not finished:
            kaldi.close_quietly(impl)
    # An archive that stops mid-entry, or a pipe that fails, only shows here.
    if not kaldi.close(impl):
        raise kaldi.error(after=key, default="read error")
    kaldi.log_pending()


def read_matrices(rspecifier) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (key, float32 2-D array) for every entry, e.g. ``read_matrices("scp:feats.scp")``.

    Reads binary or text, float, double or compressed matrices. A malformed rspecifier or a
    missing file raises here; anything else while iterating. The table is closed when the
    iteration ends or the iterator is dropped.
    """
    return _read_sequential(rspecifier, MATRIX)


def read_double_matrices(rspecifier) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (key, float64 2-D array): ``read_matrices`` for statistics such as ``cmvn.scp``."""
    return _read_sequential(rspecifier, DOUBLE_MATRIX)


def read_vectors(rspecifier) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (key, float32 1-D array) for every entry of a float or double vector table."""
    return _read_sequential(rspecifier, VECTOR)


def read_int_vectors(rspecifier) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (key, int32 1-D array) for every entry, e.g. alignments ``ark:ali.ark``."""
    return _read_sequential(rspecifier, INT_VECTOR)


def read_posteriors(rspecifier) -> Iterator[tuple[str, list]]:
    """Yield (key, posterior) for every entry: per frame a list of (transition-id, weight) pairs,
    e.g. ``read_posteriors("ark:lattice-to-post.ark")``."""
    return _read_sequential(rspecifier, POSTERIOR)


class _RandomAccess:
    _type: ValueType

    def __init__(self, rspecifier):
        is_pipe = check_rspecifier(rspecifier)
        self._kaldi = Kaldi(rspecifier)
        self._permissive = "p" in (o.strip() for o in rspecifier.partition(":")[0].split(","))
        self._impl = self._kaldi(lambda: self._type.random_access(rspecifier), starts_command=is_pipe)

    def __contains__(self, key):
        self._kaldi.log_pending()  # an earlier lookup's, so that only this one's count below
        found = self._kaldi(lambda: key in self._impl, key=key)
        # Kaldi only warns when an archive it scans for the key is cut short or corrupt, or an
        # scp entry does not load: the key may well be in what it could not read. That is an
        # error, unless the rspecifier says 'p' (permissive): then, as in Kaldi, the key is
        # just not there.
        if not found and any(level in "WE" and not _VALUE_NOTE.match(m) for level, m in self._kaldi.pending):
            if not self._permissive:
                raise self._kaldi.error(default="read error")
            self._kaldi.log_pending()
        return found

    def __getitem__(self, key):
        if key not in self:
            raise NnetError(f"{self._kaldi.name}: key '{key}' not found")
        value = self._type.to_numpy(self._kaldi(lambda: self._impl[key], key=key))
        self._kaldi.log_pending()
        return value

    def close(self):
        if self._impl.is_open:
            self._kaldi.close_quietly(self._impl)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # see _entries: never leave Kaldi to close itself
        if hasattr(self, "_impl"):
            self.close()


class RandomAccessMatrices(_RandomAccess):
    """Look matrices up by key: ``with RandomAccessMatrices("scp:feats.scp") as feats: feats[utt]``."""
    _type = MATRIX


class RandomAccessDoubleMatrices(_RandomAccess):
    """Look float64 matrices up by key, e.g. a speaker's CMVN statistics in ``scp:cmvn.scp``."""
    _type = DOUBLE_MATRIX


class RandomAccessIntVectors(_RandomAccess):
    """Look int32 vectors up by key, e.g. the alignment of an utterance."""
    _type = INT_VECTOR


class RandomAccessPosteriors(_RandomAccess):
    """Look posteriors up by key: per frame a list of (transition-id, weight) pairs."""
    _type = POSTERIOR
