"""Calls into kaldi-native-io for one table or object, with Kaldi's messages captured
(nnet_tools.cpp_stderr): Kaldi's messages become the reason in the NnetError (or a one-line log
warning) and anything else written there (a pipe command's own complaints) is passed on to
stderr. A command that a table starts gets a stderr file of its own, read on after every call
into that table."""
import contextlib
import re
import signal
import sys

from nnet_tools.cpp_stderr import CommandStderr, stderr_captured
from nnet_tools.data.tables.specifiers import file_of, is_plain_file, why_unreadable
from nnet_tools.errors import NnetError
from nnet_tools.procs import handlers_after
from nnet_tools.log import logger

_LOG_HEADER = re.compile(r"kaldi_native_io/csrc/\S*:.*:\d+$")  # "<file>:<function>:<line>"
_LOG_MESSAGE = re.compile(r"\[([IWE])\] (.*)")


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


class Kaldi:
    """Runs the calls into kaldi-native-io for one table, named ``name`` in errors.

    Messages from calls that succeeded are kept in ``pending`` until the caller knows whether
    they explained a failure (``error``) or were harmless (``log_pending``).
    """

    def __init__(self, name):
        self.name = name
        self.pending = []
        self._command = None  # the CommandStderr of a command this table started

    def __call__(self, fn, key=None, starts_command=False):
        """Call ``fn``; ``starts_command`` where it starts a pipe's command."""
        error, written = None, []
        if starts_command:
            self._command = CommandStderr()
        with stderr_captured(written, self._command if starts_command else None), \
                _children_die_on_sigpipe() if starts_command else contextlib.nullcontext(), handlers_after():
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


_FAILED_TO_OPEN = re.compile(r"Failed to open (?:file )?(\S+)$")


def _with_cause(reason):
    """Kaldi's "Failed to open file X" says neither why nor whether X exists: add the OS's reason."""
    match = _FAILED_TO_OPEN.search(reason)
    why = why_unreadable(file_of(match[1])) if match and is_plain_file(match[1]) else None
    return f"{reason}: {why}" if why else reason
