"""Process lifetimes and signals: children that do not outlive their parent (Linux
PR_SET_PDEATHSIG), signals held back while a step must finish, and a process on its way out
that no further signal can cut short."""
import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(sig=signal.SIGTERM):
    """A ``preexec_fn``: the kernel sends ``sig`` to the child when the process that started it
    dies, even by SIGKILL, so a killed driver or launcher leaves no task writing into its dir."""
    parent = os.getpid()

    def set_signal():
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the prctl took effect
                os._exit(1)
    return set_signal


@contextlib.contextmanager
def deferred_signals():
    """Hold SIGINT/SIGTERM back until the block is done (e.g. until a submitted job's id is
    known, so that the job can be cancelled); a signal that came meanwhile is delivered on exit.
    Child processes started inside inherit the block, so they finish their step too."""
    signals = {signal.SIGINT, signal.SIGTERM}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@contextlib.contextmanager
def handlers_after():
    """Run Python's SIGINT/SIGTERM handlers only when the block is done, the signals themselves
    not blocked (a command started inside still dies of them, an interrupted read still returns):
    an exception raised by a handler inside a call into C++ can unwind through a noexcept frame
    there, which aborts the process (SIGABRT, no message, temp files left)."""
    came = []
    try:
        previous = {s: signal.signal(s, lambda signum, frame: came.append(signum))
                    for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: handlers only ever run in the main thread anyway
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(came):
            signal.raise_signal(s)


# Set while a program runs inside another process (the driver's in-process launcher): the host
# keeps its own signal handling, and an interrupt is its to handle, not the program's.
_hosted = False


def hosted():
    """Whether a program now runs hosted (see ``hosting``)."""
    return _hosted


@contextlib.contextmanager
def hosting():
    """Run programs inside this process: they leave its signal handlers alone, and a Ctrl-C or
    SIGTERM reaches it as the exception it raises, not as the program's exit."""
    global _hosted
    saved, _hosted = _hosted, True
    try:
        yield
    finally:
        _hosted = saved


def _not_listening(signum, frame):
    pass


def stop_listening():
    """Take no notice of SIGINT or SIGTERM from here on: the process is already on its way out, and
    a second signal (Ctrl-C reaches a launcher and its tasks, a dying parent sends SIGTERM too) must
    not raise again from its clean-up or last message, outside any handler: a traceback. A handler
    that does nothing, not SIG_IGN: for a signal already pending, Python would print 'Signal 15
    ignored due to race condition'."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _not_listening)
