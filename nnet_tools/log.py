"""Kaldi-shaped log lines on stderr.

Every program logs ``LOG (<program>[<version>]:<function>():<file>:<line>) <message>`` exactly as
Kaldi's binaries do. The few lines Kaldi's report scripts (log_parse.py, nnet3_dir_info.pl) match
with patterns that name the Kaldi binary and source file that prints them are logged with that
origin instead (``extra=kaldi_origin(...)``), e.g. ``LOG (nnet3-compute-prob[0.1.0]:PrintTotalStats():
nnet-diagnostics.cc:162) Overall log-likelihood ...``: the version in brackets stays ours.
"""
import logging
import os
import shlex
import sys

from nnet_tools import __version__

_LEVELS = {logging.DEBUG: "VLOG[1]", logging.INFO: "LOG", logging.WARNING: "WARNING",
           logging.ERROR: "ERROR", logging.CRITICAL: "ERROR"}


def kaldi_origin(program, function, source, line):
    """``extra=`` for a log call: print the header of the Kaldi binary and source line that prints
    this message in Kaldi, where Kaldi's scripts parse the header too."""
    return {"kaldi_origin": f"{program}[{__version__}]:{function}():{source}:{line}"}


class KaldiFormatter(logging.Formatter):
    def __init__(self, program):
        super().__init__()
        self.program = program

    def format(self, record):
        level = _LEVELS.get(record.levelno, "LOG")
        where = getattr(record, "kaldi_origin", None) or f"{self.program}[{__version__}]:{record.funcName}():{os.path.basename(record.pathname)}:{record.lineno}"
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
