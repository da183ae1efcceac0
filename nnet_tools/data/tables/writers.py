"""Writing tables (``MatrixWriter``, ...): atomically, through temp files beside the real ones
that are renamed when the writer closes without error; ``ark:-`` and ``ark:| cmd`` stream."""
import contextlib
import os
import sys

from nnet_tools.data.tables.kaldi_calls import Kaldi
from nnet_tools.data.tables.specifiers import check_output_name, is_pipe, is_plain_file, split_specifier
from nnet_tools.data.tables.value_types import DOUBLE_MATRIX, INT_VECTOR, MATRIX, POSTERIOR, ValueType
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path, disk_full
from nnet_tools.log import logger


class _Writer:
    _type: ValueType

    def __init__(self, wspecifier):
        self._kaldi = Kaldi(wspecifier)
        types, target = split_specifier(wspecifier, "wspecifier")
        if types == ["scp"]:
            raise NnetError(f"bad wspecifier '{wspecifier}': writing through an existing scp is not "
                            f"supported; use ark:FILE or ark,scp:FILE.ark,FILE.scp")
        if types == ["scp", "ark"]:
            raise NnetError(f"bad wspecifier '{wspecifier}': write 'ark,scp:', not 'scp,ark:'")
        ark, _, scp = target.partition(",") if len(types) == 2 else (target, None, None)
        if scp is not None and not (is_plain_file(ark) and is_plain_file(scp)):
            raise NnetError(f"bad wspecifier '{wspecifier}': ark,scp needs two file names, "
                            f"e.g. ark,scp:egs.1.ark,egs.1.scp")
        if scp is not None and os.path.realpath(ark) == os.path.realpath(scp):
            raise NnetError(f"bad wspecifier '{wspecifier}': the archive and the scp are the same file")
        for path in (ark, scp):
            if path is not None and is_plain_file(path):
                check_output_name(wspecifier, path)
        self._ark, self._scp = ark, scp
        # Temp files beside the real ones, renamed on success: the ark first, so an scp never
        # names an ark that is not there yet.
        self._files = contextlib.ExitStack()
        try:
            self._tmp_scp = self._temp_for(scp) if scp else None
            self._tmp_ark = self._temp_for(ark) if is_plain_file(ark) else ark
            options = wspecifier.partition(":")[0]
            targets = self._tmp_ark + (f",{self._tmp_scp}" if scp else "")
            sys.stdout.flush()  # "ark:-" shares fd 1 with print()
            self._impl = self._kaldi(lambda: self._type.writer(f"{options}:{targets}"),
                                     starts_command=is_pipe(ark))
        except BaseException as e:
            self._discard_files(e)
            raise

    def _temp_for(self, path):
        try:
            return self._files.enter_context(atomic_path(path))
        except OSError as e:
            raise NnetError(f"{self._kaldi.name}: cannot create '{path}': {e.strerror}") from None

    def write(self, key, value):
        """Append one entry; ``value`` is converted to the table's dtype (float32 or int32)."""
        data = self._type.to_kaldi(value, f"{self._kaldi.name}: key '{key}'")
        with self._space_named():
            self._kaldi(lambda: self._impl.write(key, data), key=key)
        self._kaldi.log_pending()

    @contextlib.contextmanager
    def _space_named(self):
        """Kaldi reports a full disk as 'Failed to write ... to stream': name it."""
        try:
            yield
        except NnetError:
            if is_plain_file(self._ark) and disk_full(self._tmp_ark):
                raise NnetError(f"No space left on device: {self._ark}") from None
            raise

    def close(self):
        """Finish writing and move the files into place; a no-op when already closed."""
        if not self._impl.is_open:
            return
        try:
            # Kaldi only warns when an output pipe's command fails; for us it is lost output.
            with self._space_named():
                if not self._kaldi.close(self._impl) or self._kaldi.pending:
                    raise self._kaldi.error(default="write error")
            if self._scp:
                self._name_final_ark_in_scp()
        except BaseException as e:
            self._discard_files(e)
            raise
        self._files.close()  # renames the temp files over the real names

    def _discard_files(self, error):
        """Remove the temp files: atomic_path does so when it sees an exception."""
        self._files.__exit__(type(error), error, error.__traceback__)

    def _name_final_ark_in_scp(self):
        """Kaldi wrote 'key <temp ark>:<offset>' lines; point them at the ark's real name."""
        with open(self._tmp_scp) as f:
            lines = f.read().splitlines()
        fixed = []
        for line in lines:
            key, _, location = line.partition(" ")
            assert location.startswith(self._tmp_ark + ":"), line
            fixed.append(f"{key} {self._ark}{location[len(self._tmp_ark):]}\n")
        with open(self._tmp_scp, "w") as f:
            f.writelines(fixed)

    def abort(self):
        """Stop writing and leave nothing behind (files that existed before are untouched)."""
        if self._impl.is_open:
            self._kaldi.close_quietly(self._impl)
            self._discard_files(NnetError(f"{self._kaldi.name}: aborted"))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self):  # never closed: the output may be incomplete, so it must not appear
        if hasattr(self, "_impl") and self._impl.is_open:
            logger.warning(f"{self._kaldi.name}: writer dropped without close(); nothing written")
            self.abort()


class MatrixWriter(_Writer):
    """Write float32 matrices: ``with MatrixWriter("ark,scp:out.ark,out.scp") as w: w.write(k, m)``.

    Files appear only when the writer closes without error; ``ark:-`` and ``ark:| cmd``
    stream as they go. Text archives: ``ark,t:out.txt``.
    """
    _type = MATRIX


class DoubleMatrixWriter(_Writer):
    """Write float64 matrices (Kaldi's ``Matrix<double>``, e.g. CMVN statistics)."""
    _type = DOUBLE_MATRIX


class IntVectorWriter(_Writer):
    """Write int32 vectors (alignments, targets), e.g. ``IntVectorWriter("ark:ali.ark")``."""
    _type = INT_VECTOR


class PosteriorWriter(_Writer):
    """Write posteriors (per frame, (transition-id, weight) pairs), e.g. ``PosteriorWriter("ark:1.post")``."""
    _type = POSTERIOR
