"""What C++ code (Kaldi's, OpenFst's) writes on file descriptor 2, captured instead of printed.

Kaldi's C++ prints each warning as a multi-line message with a function signature on stderr.
A call into it runs inside ``stderr_captured``: fd 2 goes to a scratch file for the call, and
what was written there is handed to the caller, who turns it into one line. A command that the
C++ code starts (a table's ``ark:gunzip -c x.gz |``) inherits the file it was started with for
its whole life: it gets one of its own (``CommandStderr``), read on after every call.
"""
import contextlib
import fcntl
import os
import sys
import tempfile
import threading

__all__ = ["stderr_captured", "CommandStderr"]

_scratch = {}  # pid -> scratch file; a forked child must not share its parent's file offset
_fd2_lock = threading.RLock()  # two threads swapping fd 2 at once could leave it redirected


def _scratch_file():
    if os.getpid() not in _scratch:
        _scratch.clear()
        _scratch[os.getpid()] = tempfile.TemporaryFile()
    return _scratch[os.getpid()]


@contextlib.contextmanager
def stderr_captured(written, command=None):
    """Send fd 2 to the scratch file (or ``command``'s file, a CommandStderr, for a call that
    starts a command); append what was written there to ``written``."""
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


class CommandStderr:
    """Where a command started by C++ code writes its stderr: an unlinked file in append mode,
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
