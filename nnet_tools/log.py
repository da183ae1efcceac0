"""Kaldi-shaped log lines on stderr.

Every program logs ``LOG (<program>[<version>]:<function>():<file>:<line>) <message>`` exactly as
Kaldi's binaries do, so the report and selection parsers written for Kaldi logs work unchanged.
"""
import logging
import os
import shlex
import sys

from nnet_tools import __version__

_LEVELS = {logging.DEBUG: "VLOG[1]", logging.INFO: "LOG", logging.WARNING: "WARNING",
           logging.ERROR: "ERROR", logging.CRITICAL: "ERROR"}


class KaldiFormatter(logging.Formatter):
    def __init__(self, program):
        super().__init__()
        self.program = program

    def format(self, record):
        level = _LEVELS.get(record.levelno, "LOG")
        where = f"{self.program}[{__version__}]:{record.funcName}():{os.path.basename(record.pathname)}:{record.lineno}"
        return f"{level} ({where}) {record.getMessage()}"


logger = logging.getLogger("nnet_tools")


def setup(program, verbose=0):
    """Point the package logger at stderr with Kaldi's line shape, and print the command line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KaldiFormatter(program))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG if verbose > 0 else logging.INFO)
    logger.propagate = False
    # Kaldi binaries echo their command line first, so a log can be re-run by hand.
    print(" ".join([program] + [shlex.quote(a) for a in sys.argv[1:]]), file=sys.stderr, flush=True)
