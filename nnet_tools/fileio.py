"""Atomic file writing: a reader never sees a half-written file, a failed writer leaves none.

Temp files live beside their target as ``.tmp.<host>.<pid>.<random>.<name>``: a writer killed
outright (SIGKILL, power loss) cannot remove its own, so the next writer in that directory
removes those whose process is gone (same host, pid no longer running). A write that fails for
lack of space says so in one line, ``No space left on device: <file>``, whichever layer failed
(Python's errno, or numpy / torch / Kaldi that only report a short write).
"""
import contextlib
import errno
import os
import re
import shutil
import socket
import tempfile

from nnet_tools.errors import NnetError

TEMP_PREFIX = ".tmp."
_TEMP = re.compile(r"^\.tmp\.([^.]+)\.(\d+)\.[^.]+\.")
# A short write with no errno (numpy, torch, Kaldi streams) is taken for a full disk when
# less than this is left on the file system.
NEARLY_FULL_BYTES = 64 << 10
_swept = set()   # directories already swept of dead writers' temp files by this process


def _host():
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"


def temp_prefix():
    return f"{TEMP_PREFIX}{_host()}.{os.getpid()}."


def starts_as_zip(path):
    """Whether a file begins as a zip archive (torch.save's format) does, whole or cut short
    (zipfile.is_zipfile needs the end). OSError if it cannot be read."""
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def pid_alive(pid):
    """Whether a process with this pid runs on this host."""
    if pid <= 0:   # kill() takes these for process groups (0: the caller's own), never one process
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):   # OverflowError: past pid_t, so no process
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(directory):
    """Remove temp files and dirs in ``directory`` left by dead writers on this host; their names."""
    host, removed = _host(), []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = _TEMP.match(name)
        if not m or m.group(1) != host or pid_alive(int(m.group(2))):
            continue
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except PermissionError:   # another account's, in a shared (sticky) dir: theirs to remove
                continue
        removed.append(name)
    return removed


def _sweep_once(directory):
    directory = os.path.abspath(directory)
    if directory not in _swept:
        remove_stale_temps(directory)
        _swept.add(directory)


def disk_full(path, error=None):
    """Whether a failed write to ``path`` failed for lack of space."""
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NEARLY_FULL_BYTES


def write_error(path, error):
    """One NnetError line for a write to ``path`` that raised ``error``."""
    if disk_full(path, error):
        return NnetError(f"No space left on device: {path}")
    what = getattr(error, "strerror", None) or (str(error).splitlines() or [type(error).__name__])[0]
    return NnetError(f"{path}: write failed: {what}")


@contextlib.contextmanager
def writing(path):
    """Turn a failed write to ``path`` (OSError, or a short write) into one NnetError line."""
    try:
        yield
    except NnetError:
        raise
    except OSError as e:
        raise write_error(path, e) from None
    except RuntimeError as e:   # torch's zip writer: "unexpected pos ..." on a short write
        if disk_full(path, e):
            raise NnetError(f"No space left on device: {path}") from None
        raise


def _mode_of(path):
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success.

    A symbolic link is written through (its target is replaced, the link kept). A device or
    FIFO (``ark:/dev/null``, a named pipe) cannot be replaced: it is written in place, and so is
    whatever ``/dev/stdout`` or ``/dev/fd/N`` (``>(cmd)``) stands for, even a regular file: the
    shell that opened it keeps writing there."""
    path = os.fspath(path)
    if os.path.isdir(path):  # checked before anything is written: a file cannot replace it
        raise NnetError(f"{path}: cannot write: is a directory")
    if os.path.exists(path) and (not os.path.isfile(path) or _is_open_descriptor(path)):
        with writing(path):
            yield path
        return
    if os.path.islink(path):
        path = os.path.realpath(path)
    if os.path.exists(path) and not os.access(path, os.W_OK):   # as Kaldi, which writes in place, and the shell
        raise NnetError(f"{path}: cannot write: the file is read-only (Permission denied)")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        make_dirs(directory)
        check_writable(directory, path)
        _sweep_once(directory)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(), suffix="." + os.path.basename(path), dir=directory)
        os.close(fd)
    except OSError as e:
        raise write_error(path, e) from None
    # A file replaced keeps its mode (a private model stays private, as Kaldi's in-place write
    # keeps it); a new one gets the umask's, not mkstemp's 0600: other cluster accounts read it.
    os.chmod(tmp, _mode_of(path))
    try:
        with writing(path):
            yield tmp
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _is_open_descriptor(path):
    """Whether ``path`` names one of this process's open files (/dev/stdout, /dev/fd/N)."""
    path = os.path.abspath(path)
    return path in ("/dev/stdout", "/dev/stderr") or path.startswith(
        ("/dev/fd/", "/proc/self/fd/", f"/proc/{os.getpid()}/fd/"))


def check_writable(directory, output=None):
    """A directory this process cannot create files in is one line (naming ``output``, the file
    to be written there, if given), before any work. Root passes: os.access answers as for root."""
    if os.path.isdir(directory) and not os.access(directory, os.W_OK | os.X_OK):
        where = f"{output}: cannot write: " if output else ""
        raise NnetError(f"{where}{directory} is not writable (Permission denied)")


def make_dirs(directory):
    """makedirs, but a directory that is a regular file says 'Not a directory' ('File exists' misleads)."""
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)) from None


def make_new_dirs(directory):
    """make_dirs(directory); returns the topmost directory it made (None if all were there), for
    a caller that removes it again when what it was made for fails. OSError as make_dirs."""
    missing, path = [], os.path.abspath(directory)
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    made = None   # each mkdir, not a guess, says it was ours
    try:
        for path in reversed(missing):
            try:
                os.mkdir(path)
            except FileExistsError:   # made meanwhile by another process: theirs
                continue
            made = made or path
        make_dirs(directory)
    except OSError:  # e.g. it is a file
        if made:
            shutil.rmtree(made, ignore_errors=True)
        raise
    return made


@contextlib.contextmanager
def output_dir(directory):
    """make_dirs(directory) for a block that fills it. If the block fails, the directories made here
    (``directory`` and any parents it lacked) are removed again with what the block wrote in them:
    a failed run leaves no empty output dir. One that existed before is never removed."""
    try:
        made = make_new_dirs(directory)
    except OSError as e:
        raise write_error(directory, e) from None
    try:
        yield
    except BaseException:
        if made:
            shutil.rmtree(made, ignore_errors=True)
        raise


@contextlib.contextmanager
def temp_dir(directory, what):
    """A scratch directory inside ``directory``, removed afterwards (or by the next run if killed)."""
    try:
        make_dirs(directory)
        check_writable(directory)
        _sweep_once(directory)
        path = tempfile.mkdtemp(prefix=temp_prefix(), suffix="." + what, dir=directory)
    except OSError as e:
        raise write_error(os.path.join(directory, what), e) from None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_text(path, text):
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)


def copy_file(source, path):
    """Copy ``source`` to ``path``, all or nothing (as write_text)."""
    with atomic_path(path) as tmp:
        shutil.copyfile(source, tmp)
