"""What every program shares: logging set-up and turning NnetError into one line + exit 1."""
import functools
import os
import signal
import sys

import click

from nnet_tools import log
from nnet_tools.cli import interrupt_as_exception
from nnet_tools.errors import NnetError, not_utf8
from nnet_tools.procs import hosted, stop_listening

# A --srand: torch's and numpy's generators take seeds in [0, 2^63).
SEED = click.IntRange(0, 2 ** 63 - 1)

# Kaldi programs exit 1 on bad usage too (a missing argument, a malformed option); click says 2.
click.exceptions.UsageError.exit_code = 1


def _show_usage_error(self, file=None):
    """Bad usage is one ERROR line like any other bad input (click prints usage, a hint and the
    error over 3-5 lines); --help has the usage."""
    prog = self.ctx.command_path if self.ctx is not None else os.path.basename(sys.argv[0])
    message = self.format_message()
    message = message[:-1] if message.endswith(".") else message
    print(f"ERROR ({prog}) {message} (see {prog} --help)", file=file or sys.stderr, flush=True)


click.exceptions.UsageError.show = _show_usage_error


class Terminated(BaseException):
    """SIGTERM (a queue's scancel/qdel, a launcher stopping its tasks) as an exception, so that
    writers remove their temp files on the way out as they do on any other failure."""


def _raise_terminated(signum, frame):
    stop_listening()
    raise Terminated()


def _die_of_sigterm():
    """End as SIGTERM would have ended us, so the launcher's log still says 'signal 15'."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def program(name):
    """Decorate a click command body: Kaldi logging, and bad input -> one ERROR line, exit 1."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:  # the handlers first thing inside: a signal may come as soon as they are in
                if not hosted():
                    interrupt_as_exception()
                    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                        signal.signal(signal.SIGTERM, _raise_terminated)
                log.setup(name, kwargs.get("verbose", 0) or 0)
                return fn(*args, **kwargs)
            except NnetError as e:
                print(f"ERROR ({name}) {e}", file=sys.stderr, flush=True)
                sys.exit(1)
            except UnicodeDecodeError as e:  # a text input no reader named: still one line
                print(f"ERROR ({name}) an input text file {not_utf8(e)}", file=sys.stderr, flush=True)
                sys.exit(1)
            except BrokenPipeError:
                raise
            except ImportError as e:   # a signal inside a C extension's import comes out as its failure
                if hosted() and isinstance(e.__cause__, (Terminated, KeyboardInterrupt)):
                    raise e.__cause__ from None
                if isinstance(e.__cause__, Terminated):
                    print(f"ERROR ({name}) terminated (SIGTERM)", file=sys.stderr, flush=True)
                    _die_of_sigterm()
                if isinstance(e.__cause__, KeyboardInterrupt):
                    print(f"ERROR ({name}) interrupted", file=sys.stderr, flush=True)
                    sys.exit(130)
                raise
            except OSError as e:  # a file no reader or writer named (permissions, mostly): still one line
                where = f"{e.filename}: " if e.filename else ""
                print(f"ERROR ({name}) {where}{e.strerror or e}", file=sys.stderr, flush=True)
                sys.exit(1)
            except KeyboardInterrupt:
                print(f"ERROR ({name}) interrupted", file=sys.stderr, flush=True)
                if hosted():
                    raise
                sys.exit(130)
            except Terminated:
                if hosted():
                    raise
                print(f"ERROR ({name}) terminated (SIGTERM)", file=sys.stderr, flush=True)
                _die_of_sigterm()
        return run
    return wrap


def cmvn_options(fn):
    """--cmvn, --utt2spk, --online-cmvn and --cmvn-opts, for programs that read features (see
    data/cmvn.py and data/online_cmvn.py)."""
    for option in reversed([
            click.option("--cmvn", default=None, help="CMVN statistics to apply to the features first, "
                         "e.g. scp:data/test/cmvn.scp (Kaldi's apply-cmvn)."),
            click.option("--utt2spk", default=None, help="utt2spk file: the --cmvn statistics are per speaker."),
            click.option("--online-cmvn", default=None, metavar="GLOBAL_STATS",
                         help="Online CMVN instead (Kaldi's apply-cmvn-online, each utterance from these "
                         "global statistics, as an online decoder meets it), e.g. exp/egs/global_cmvn.stats."),
            click.option("--cmvn-opts", default="", show_default=True,
                         help="apply-cmvn options, e.g. '--norm-vars=true' (the egs dir's cmvn_opts).")]):
        fn = option(fn)
    return fn
