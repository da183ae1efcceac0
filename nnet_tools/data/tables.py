"""Kaldi tables (``scp:feats.scp``, ``ark:-``, ``"ark:gunzip -c x.gz |"``, ``ark,scp:a.ark,a.scp``).

A thin layer over kaldi-native-io, which is Kaldi's own C++ table code: it handles binary
and text archives, scp byte offsets and ranges, compressed and double matrices, and pipes.
This module adds what that package lacks: one-line ``NnetError``s, failures that Kaldi only
reports as a warning (a truncated archive or a failed pipe ends iteration early, and only
close() returns False), numpy copies that outlive the next read, and atomic writers.

Kaldi's C++ prints each warning as a multi-line message with a function signature on
stderr. Every call into it therefore runs with file descriptor 2 sent to a scratch file;
Kaldi's messages become the reason in the NnetError (or a one-line log warning) and anything
else written there (a pipe command's own complaints) is passed on to stderr. A command that a
table starts (``ark:gunzip -c x.gz |``) inherits the file it was opened with for its whole
life: it gets one of its own (_CommandStderr), read on after every call into that table.
Readers and writers are meant for one thread at a time, as Kaldi's are.
"""
import contextlib
import dataclasses
import errno
import fcntl
import os
import re
import signal
import sys
import tempfile
import threading
from typing import Callable, Iterator

import numpy as np
# The pybind classes, not kaldi_native_io's Python wrappers: those print an "Exception ignored
# in __del__" traceback whenever opening fails.
from kaldi_native_io.lib import _kaldi_native_io as _kni

from nnet_tools.errors import NnetError, not_utf8
from nnet_tools.fileio import atomic_path, disk_full
from nnet_tools.log import logger

__all__ = ["read_matrices", "read_double_matrices", "read_vectors", "read_int_vectors",
           "RandomAccessMatrices", "RandomAccessDoubleMatrices", "RandomAccessIntVectors",
           "MatrixWriter", "DoubleMatrixWriter", "IntVectorWriter", "read_vector", "write_vector",
           "read_double_matrix", "write_double_matrix", "read_wave"]


# ---------------------------------------------------------------------------------------------
# Specifiers: parsed only as far as choosing what to check and where to write; Kaldi's own
# classification still validates the options.

def _is_pipe(target):
    return target.startswith("|") or target.rstrip().endswith("|")


def _is_plain_file(target):
    return target not in ("", "-") and not _is_pipe(target)


def _split_specifier(specifier, kind_of):
    options, colon, target = specifier.partition(":")
    types = [o for o in (o.strip() for o in options.split(",")) if o in ("ark", "scp")]
    if not colon or not types:
        raise NnetError(f"bad {kind_of} '{specifier}': expected ark:FILE or scp:FILE "
                        f"(e.g. 'ark:feats.ark', 'scp:data/train/feats.scp', 'ark:-')")
    if not target:
        raise NnetError(f"bad {kind_of} '{specifier}': no file name after ':' (use '-' for stdin/stdout)")
    return types, target


def _check_rspecifier(rspecifier):
    """Reject what is malformed or names a missing file; return whether it opens a pipe."""
    _, target = _split_specifier(rspecifier, "rspecifier")
    if _is_plain_file(target):
        _check_input_file(rspecifier, _file_of(target))
    return _is_pipe(target)


def _check_input_file(name, path):
    """A missing, directory or unreadable input ``path`` is one line naming ``name``. Devices
    and FIFOs (``/dev/stdin``, ``<(cmd)``, a named pipe) are read as Kaldi reads them; opening
    one only to check it would take data, or the writer, from the real read."""
    if not os.path.exists(path):
        raise NnetError(f"{name}: no such file '{path}'")
    if os.path.isdir(path):
        raise NnetError(f"{name}: is a directory '{path}'")
    why = _why_unreadable(path) if os.path.isfile(path) else (
        None if os.access(path, os.R_OK) else os.strerror(errno.EACCES))
    if why:
        raise NnetError(f"{name}: cannot read '{path}': {why}")


def _file_of(target):
    """The file of "foo.ark:1234" (an scp entry, or an rspecifier read from a byte offset)."""
    return re.sub(r":\d+$", "", target)


def _why_unreadable(path):
    """The OS's reason ``path`` cannot be opened for reading, or None."""
    try:
        open(path, "rb").close()
    except OSError as e:
        return e.strerror
    return None


# ---------------------------------------------------------------------------------------------
# Calls into Kaldi with its stderr captured.

_scratch = {}  # pid -> scratch file; a forked child must not share its parent's file offset
_fd2_lock = threading.RLock()  # two threads swapping fd 2 at once could leave it redirected
_LOG_HEADER = re.compile(r"kaldi_native_io/csrc/\S*:.*:\d+$")  # "<file>:<function>:<line>"
_LOG_MESSAGE = re.compile(r"\[([IWE])\] (.*)")


def _scratch_file():
    if os.getpid() not in _scratch:
        _scratch.clear()
        _scratch[os.getpid()] = tempfile.TemporaryFile()
    return _scratch[os.getpid()]


@contextlib.contextmanager
def stderr_captured(written, command=None):
    """Send fd 2 to the scratch file (or ``command``'s file, for a call that starts a command);
    append what was written there to ``written``."""
    with _fd2_lock:
        scratch = _scratch_file()
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(scratch.fileno() if command is None else command.fd, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if command is not None:
                written.append(command.take())
            elif os.fstat(scratch.fileno()).st_size:
                scratch.seek(0)
                written.append(scratch.read().decode("utf-8", "backslashreplace"))
                scratch.seek(0)
                scratch.truncate()


class _CommandStderr:
    """Where a command started by a table writes its stderr: an unlinked file in append mode,
    so that the command writes at its end whatever offset we read from. ``take`` returns the
    whole lines written since it was last called."""

    def __init__(self):
        fd, path = tempfile.mkstemp(prefix="nnet-tools-stderr.")
        os.unlink(path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        self.fd, self.offset = fd, 0

    def take(self, everything=False):
        data = os.pread(self.fd, os.fstat(self.fd).st_size - self.offset, self.offset)
        if not everything:  # a line the command is still writing waits for the next call
            data = data[:data.rfind(b"\n") + 1]
        self.offset += len(data)
        return data.decode("utf-8", "backslashreplace")

    def close(self):
        os.close(self.fd)


def _kaldi_messages(text):
    """Kaldi's log messages in ``text`` as (level, one-line message), and the other lines."""
    messages, other = [], []
    for line in text.splitlines():
        match = _LOG_MESSAGE.match(line)
        if messages and messages[-1] == ("E", "Check failed!") and line.startswith("x: "):
            messages[-1] = ("E", f"Check failed: {line[3:].strip()}")  # the assertion's own line
        elif match:
            # A warning can embed the next message's "<file>:<function>:<line>" on the same line.
            message = re.sub(r"\s*\S*kaldi_native_io/csrc/.*$", "", match[2])
            messages.append((match[1], " ".join(message.split())))
        elif line.strip() and not _LOG_HEADER.search(line):
            other.append(line)
    return messages, other


@contextlib.contextmanager
def _children_die_on_sigpipe():
    """Python ignores SIGPIPE and popen'd commands inherit that; restore the default so that a
    command we stop reading early ends quietly, as under a Kaldi binary, instead of printing
    'write error: Broken pipe'."""
    try:
        previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    except ValueError:  # not the main thread: leave it
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGPIPE, previous)


class _Kaldi:
    """Runs the calls into kaldi-native-io for one table, named ``name`` in errors.

    Messages from calls that succeeded are kept in ``pending`` until the caller knows whether
    they explained a failure (``error``) or were harmless (``log_pending``).
    """

    def __init__(self, name):
        self.name = name
        self.pending = []
        self._command = None  # the _CommandStderr of a command this table started

    def __call__(self, fn, key=None, starts_command=False):
        """Call ``fn``; ``starts_command`` where it starts a pipe's command."""
        error, written = None, []
        if starts_command:
            self._command = _CommandStderr()
        with stderr_captured(written, self._command if starts_command else None), \
                _children_die_on_sigpipe() if starts_command else contextlib.nullcontext():
            try:
                result = fn()
            except RuntimeError as e:
                error = e
        if self._command is not None and not starts_command:
            written.append(self._command.take())
        messages, other = _kaldi_messages("".join(written))
        if other:
            print("\n".join(other), file=sys.stderr, flush=True)
        self.pending += messages
        if error is not None:
            if starts_command:  # there is no table to close
                self.command_ended()
            # The exception holds the outermost message; the captured ones say why.
            self.pending += [("X", m) for _, m in _kaldi_messages(str(error))[0]]
            raise self.error(key) from None
        return result

    def error(self, key=None, after=None, default="failed"):
        """One NnetError line: the innermost Kaldi error, else its first warning."""
        reasons = [m for wanted in "EWX" for level, m in self.pending if level == wanted]
        self.pending = []
        where = self.name
        if key is not None:
            where += f": key '{key}'"
        elif after is not None:
            where += f": after key '{after}'"
        return NnetError(f"{where}: {_with_cause(reasons[0]) if reasons else default}")

    def log_pending(self):
        for level, message in self.pending:
            if level in "WE":
                logger.warning(f"{self.name}: {message}")
        self.pending = []

    def close(self, impl):
        """Close ``impl``; returns its close()'s answer (False: Kaldi found an error)."""
        try:
            return self(impl.close)
        finally:
            self.command_ended()

    def close_quietly(self, impl):
        """Close after a failure or an early stop: a pipe cut short complains, rightly ignored."""
        with contextlib.suppress(RuntimeError), stderr_captured([]):
            impl.close()
        self.pending = []
        self.command_ended()

    def command_ended(self):
        """Pass on the last words of the command this table started, and release its file."""
        if self._command is not None:
            other = _kaldi_messages(self._command.take(everything=True))[1]
            if other:
                print("\n".join(other), file=sys.stderr, flush=True)
            self._command.close()
            self._command = None


# Kaldi's warnings about a value it read all the same ("inf" in a text matrix): no read failed.
_VALUE_NOTE = re.compile(r"Reading (infinite|NaN) value into (matrix|vector)")
_FAILED_TO_OPEN = re.compile(r"Failed to open (?:file )?(\S+)$")


def _with_cause(reason):
    """Kaldi's "Failed to open file X" says neither why nor whether X exists: add the OS's reason."""
    match = _FAILED_TO_OPEN.search(reason)
    why = _why_unreadable(_file_of(match[1])) if match and _is_plain_file(match[1]) else None
    return f"{reason}: {why}" if why else reason


# ---------------------------------------------------------------------------------------------
# Value types.

def _to_int32_list(value, where):
    array = np.asarray(value)
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
        raise NnetError(f"{where}: expected a 1-D integer array, got {array.dtype} of shape {array.shape}")
    return array.astype(np.int32).tolist()


def _to_matrix(kaldi_type, dtype):
    def convert(value, where):
        array = np.asarray(value)
        if array.ndim != 2:
            raise NnetError(f"{where}: expected a 2-D matrix, got shape {array.shape}")
        if array.size == 0:
            array = np.zeros((0, 0), dtype)  # Kaldi's only empty matrix
        return kaldi_type(np.ascontiguousarray(array, dtype=dtype))
    return convert


@dataclasses.dataclass(frozen=True)
class _Type:
    sequential: type
    random_access: type
    # numpy() views memory Kaldi reuses for the next entry: always copy.
    to_numpy: Callable = lambda value: np.array(value.numpy(), copy=True)
    writer: type = None
    to_kaldi: Callable = None


_MATRIX = _Type(_kni._SequentialFloatMatrixReader, _kni._RandomAccessFloatMatrixReader,
                writer=_kni._FloatMatrixWriter, to_kaldi=_to_matrix(_kni._FloatMatrix, np.float32))
# CMVN statistics: sums of squares over a speaker's frames need float64, as Kaldi keeps them.
_DOUBLE_MATRIX = _Type(_kni._SequentialDoubleMatrixReader, _kni._RandomAccessDoubleMatrixReader,
                       writer=_kni._DoubleMatrixWriter,
                       to_kaldi=_to_matrix(_kni._DoubleMatrix, np.float64))
_VECTOR = _Type(_kni._SequentialFloatVectorReader, _kni._RandomAccessFloatVectorReader)
_INT_VECTOR = _Type(_kni._SequentialInt32VectorReader, _kni._RandomAccessInt32VectorReader,
                    to_numpy=lambda value: np.asarray(value, dtype=np.int32),  # a list of ints
                    writer=_kni._Int32VectorWriter, to_kaldi=_to_int32_list)


# ---------------------------------------------------------------------------------------------
# Reading.

def _read_sequential(rspecifier, value_type) -> Iterator[tuple[str, np.ndarray]]:
    is_pipe = _check_rspecifier(rspecifier)  # a bad specifier or a missing file fails right here
    return _entries(rspecifier, value_type, is_pipe)


def _entries(rspecifier, value_type, is_pipe):
    # Kaldi is opened only once iteration starts, so that the finally below always closes it:
    # a reader in an error state that is destroyed unclosed throws from a C++ destructor,
    # which aborts the process.
    kaldi = _Kaldi(rspecifier)
    # Opening reads the first entry, so a wrong type or a corrupt start fails here.
    impl = kaldi(lambda: value_type.sequential(rspecifier), starts_command=is_pipe)

    def value_then_next():
        value = value_type.to_numpy(impl.value)  # an scp entry is loaded (and can fail) here
        impl.next()  # an archive reads its next entry here; failing, it just ends
        return value

    key, finished = None, False
    try:
        while not impl.done:
            kaldi.log_pending()  # reading went on, so earlier warnings were harmless
            try:
                key = impl.key
            except UnicodeDecodeError as e:
                which = f"the key after '{key}'" if key is not None else "the first key"
                raise NnetError(f"{kaldi.name}: {which} {not_utf8(e, offset=False)}") from None
            yield key, kaldi(value_then_next, key=key)
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
    return _read_sequential(rspecifier, _MATRIX)


def read_double_matrices(rspecifier) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (key, float64 2-D array): ``read_matrices`` for statistics such as ``cmvn.scp``."""
    return _read_sequential(rspecifier, _DOUBLE_MATRIX)


def read_vectors(rspecifier) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (key, float32 1-D array) for every entry of a float or double vector table."""
    return _read_sequential(rspecifier, _VECTOR)


def read_int_vectors(rspecifier) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (key, int32 1-D array) for every entry, e.g. alignments ``ark:ali.ark``."""
    return _read_sequential(rspecifier, _INT_VECTOR)


class _RandomAccess:
    _type: _Type

    def __init__(self, rspecifier):
        is_pipe = _check_rspecifier(rspecifier)
        self._kaldi = _Kaldi(rspecifier)
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
    _type = _MATRIX


class RandomAccessDoubleMatrices(_RandomAccess):
    """Look float64 matrices up by key, e.g. a speaker's CMVN statistics in ``scp:cmvn.scp``."""
    _type = _DOUBLE_MATRIX


class RandomAccessIntVectors(_RandomAccess):
    """Look int32 vectors up by key, e.g. the alignment of an utterance."""
    _type = _INT_VECTOR


# ---------------------------------------------------------------------------------------------
# Writing.

def _check_output_name(wspecifier, path):
    """What Kaldi's ClassifyWxfilename refuses: outer whitespace, and a byte offset ("x.ark:12",
    which only a reader understands). Kaldi never sees our names, only the temp files'."""
    if path != path.strip():
        raise NnetError(f"bad wspecifier '{wspecifier}': the file name '{path}' begins or ends with a space")
    if re.search(r":\d+$", path):
        raise NnetError(f"bad wspecifier '{wspecifier}': '{path}' ends in a byte offset, which only reading allows")


class _Writer:
    _type: _Type

    def __init__(self, wspecifier):
        self._kaldi = _Kaldi(wspecifier)
        types, target = _split_specifier(wspecifier, "wspecifier")
        if types == ["scp"]:
            raise NnetError(f"bad wspecifier '{wspecifier}': writing through an existing scp is not "
                            f"supported; use ark:FILE or ark,scp:FILE.ark,FILE.scp")
        if types == ["scp", "ark"]:
            raise NnetError(f"bad wspecifier '{wspecifier}': write 'ark,scp:', not 'scp,ark:'")
        ark, _, scp = target.partition(",") if len(types) == 2 else (target, None, None)
        if scp is not None and not (_is_plain_file(ark) and _is_plain_file(scp)):
            raise NnetError(f"bad wspecifier '{wspecifier}': ark,scp needs two file names, "
                            f"e.g. ark,scp:egs.1.ark,egs.1.scp")
        if scp is not None and os.path.realpath(ark) == os.path.realpath(scp):
            raise NnetError(f"bad wspecifier '{wspecifier}': the archive and the scp are the same file")
        for path in (ark, scp):
            if path is not None and _is_plain_file(path):
                _check_output_name(wspecifier, path)
        self._ark, self._scp = ark, scp
        # Temp files beside the real ones, renamed on success: the ark first, so an scp never
        # names an ark that is not there yet.
        self._files = contextlib.ExitStack()
        try:
            self._tmp_scp = self._temp_for(scp) if scp else None
            self._tmp_ark = self._temp_for(ark) if _is_plain_file(ark) else ark
            options = wspecifier.partition(":")[0]
            targets = self._tmp_ark + (f",{self._tmp_scp}" if scp else "")
            sys.stdout.flush()  # "ark:-" shares fd 1 with print()
            self._impl = self._kaldi(lambda: self._type.writer(f"{options}:{targets}"),
                                     starts_command=_is_pipe(ark))
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
            if _is_plain_file(self._ark) and disk_full(self._tmp_ark):
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
    _type = _MATRIX


class DoubleMatrixWriter(_Writer):
    """Write float64 matrices (Kaldi's ``Matrix<double>``, e.g. CMVN statistics)."""
    _type = _DOUBLE_MATRIX


class IntVectorWriter(_Writer):
    """Write int32 vectors (alignments, targets), e.g. ``IntVectorWriter("ark:ali.ark")``."""
    _type = _INT_VECTOR


# ---------------------------------------------------------------------------------------------
# Single objects (Kaldi's rxfilename / wxfilename: a file, '-', or a pipe), not tables.

def _read_object(read, rxfilename, name=None):
    """``read(rxfilename)``, Kaldi's reading of one object, with its messages captured; ``name``
    (default: rxfilename) names it in errors."""
    name = name or rxfilename
    if _is_plain_file(rxfilename):  # "file.ark:123": the object at that byte offset, as Kaldi
        _check_input_file(name, _file_of(rxfilename))
    kaldi = _Kaldi(name)
    try:
        value = kaldi(lambda: read(rxfilename), starts_command=_is_pipe(rxfilename))
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
    _write_object(path, _to_matrix(_kni._DoubleMatrix, np.float64)(matrix, str(path)), binary)


def _write_object(path, value, binary):
    """Kaldi's writer of a single object crashes the process (SIGSEGV) when a write fails, as on
    a full disk: it writes to memory here (Linux), and Python writes the file."""
    if not hasattr(os, "memfd_create"):
        with atomic_path(path) as tmp:
            _Kaldi(str(path))(lambda: value.write(tmp, binary))
        return
    memory = os.memfd_create("kaldi-object")
    try:
        _Kaldi(str(path))(lambda: value.write(f"/proc/self/fd/{memory}", binary))
        data = os.pread(memory, os.fstat(memory).st_size, 0)
    finally:
        os.close(memory)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
