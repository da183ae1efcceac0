"""Thin click programs: option parsing plus one library call each."""
import os
import signal
import sys


def quiet_interrupt_until_ready():
    """Ctrl-C while Python is still importing (torch takes a second or more) ends the program
    quietly, as it ends a Kaldi binary, instead of printing a KeyboardInterrupt traceback. An
    ignored SIGINT (a background job's) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _raise_keyboard_interrupt(signum, frame):
    stop_listening()
    raise KeyboardInterrupt


def interrupt_as_exception():
    """Ctrl-C raises KeyboardInterrupt again (once), once the program's own handling is in place."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_DFL:
        signal.signal(signal.SIGINT, _raise_keyboard_interrupt)


# Run as a program (nnet-*): common.program() calls interrupt_as_exception().
if os.path.basename(sys.argv[0]).startswith("nnet-"):
    quiet_interrupt_until_ready()

from nnet_tools.procs import stop_listening  # noqa: E402  (after: Ctrl-C while importing is quiet)
