"""Kaldi tables (``scp:feats.scp``, ``ark:-``, ``"ark:gunzip -c x.gz |"``, ``ark,scp:a.ark,a.scp``).

A thin layer over kaldi-native-io, which is Kaldi's own C++ table code: it handles binary
and text archives, scp byte offsets and ranges, compressed and double matrices, and pipes.
This package adds what that package lacks: one-line ``NnetError``s, failures that Kaldi only
reports as a warning (a truncated archive or a failed pipe ends iteration early, and only
close() returns False), numpy copies that outlive the next read, and atomic writers.
Readers and writers are meant for one thread at a time, as Kaldi's are.

Its modules, one concern each (import the names below from here):

- ``specifiers``: rspecifiers, wspecifiers and rxfilenames parsed and their files checked.
- ``kaldi_calls``: every call into Kaldi, with its stderr captured (nnet_tools.cpp_stderr) and
  its messages turned into the reason in the NnetError or a one-line log warning.
- ``value_types``: matrices and vectors, float, double and int32, between numpy and Kaldi; and
  posteriors on transition-ids (lists of (int, float) pairs per frame).
- ``readers``: ``read_matrices``, ``read_double_matrices``, ``read_vectors``, ``read_int_vectors``,
  ``read_posteriors`` and ``RandomAccessMatrices``, ``RandomAccessDoubleMatrices``,
  ``RandomAccessIntVectors``, ``RandomAccessPosteriors``.
- ``writers``: ``MatrixWriter``, ``DoubleMatrixWriter``, ``IntVectorWriter``, ``PosteriorWriter``.
- ``objects``: single objects, not tables: ``read_wave``, ``read_vector``, ``write_vector``,
  ``read_double_matrix``, ``write_double_matrix``, ``write_float_matrix``.
"""
from nnet_tools.data.tables.objects import (read_double_matrix, read_vector, read_wave, write_double_matrix, write_float_matrix,
                                            write_vector)
from nnet_tools.data.tables.readers import (RandomAccessDoubleMatrices, RandomAccessIntVectors,
                                            RandomAccessMatrices, RandomAccessPosteriors, read_double_matrices,
                                            read_int_vectors, read_matrices, read_posteriors, read_vectors)
from nnet_tools.data.tables.writers import DoubleMatrixWriter, IntVectorWriter, MatrixWriter, PosteriorWriter

__all__ = ["read_matrices", "read_double_matrices", "read_vectors", "read_int_vectors", "read_posteriors",
           "RandomAccessMatrices", "RandomAccessDoubleMatrices", "RandomAccessIntVectors", "RandomAccessPosteriors",
           "MatrixWriter", "DoubleMatrixWriter", "IntVectorWriter", "PosteriorWriter", "read_vector", "write_vector",
           "read_double_matrix", "write_double_matrix", "read_wave"]
