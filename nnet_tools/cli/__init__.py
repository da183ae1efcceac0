"""Thin click programs: option parsing plus one library call each."""
import os
import signal
import sys

# Run as a program: Ctrl-C while Python is still importing ends it quietly, as it ends a
# Kaldi binary, instead of printing a KeyboardInterrupt traceback; common.program() turns
# Ctrl-C back into KeyboardInterrupt once the program's own handling is in place.
if os.path.basename(sys.argv[0]).startswith("nnet-") and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
