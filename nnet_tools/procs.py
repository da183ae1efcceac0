"""Child processes that do not outlive their parent (Linux PR_SET_PDEATHSIG)."""
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
