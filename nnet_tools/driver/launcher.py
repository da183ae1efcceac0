"""How the drivers run programs: through ``$cmd`` (``nnet-queue local|slurm|sge``, or Kaldi's
run.pl/queue.pl), one log per task, with the ``JOB=1:N`` array idiom.

``Launcher`` is the one every step uses. ``InProcessLauncher`` runs the same command lines through
the programs' own entry points inside this process, one task after another, writing the same logs:
the driver makes each next model with it (no queue round trip, no program start), and benchmarks
use it to measure the driver without paying a process start per task.
"""
import contextlib
import glob
import importlib
import importlib.metadata
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import click

from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.procs import deferred_signals, die_with_parent, hosting
from nnet_tools.queue import tasklog

TICK_SECONDS = 10.0
# Background commands (diagnostics) run below the training jobs' priority: on a node they share,
# the jobs keep their cores and the diagnostics take what is left (nice 10: about 1/10 the share).
BACKGROUND_NICENESS = 10


class LaunchFailed(NnetError):
    """A foreground command exited non-zero; ``log`` names its log(s), JOB as '*'."""

    def __init__(self, log):
        super().__init__(f"failed: {log.replace('JOB', '*')}")
        self.log = log


def _launcher_argv(cmd):
    """--cmd as argv, checked: a user's typo is one line here, not a traceback at the first job."""
    try:
        argv = shlex.split(cmd)
    except ValueError as e:  # an unclosed quote
        raise NnetError(f"--cmd {cmd!r}: {e}") from None
    if not argv or shutil.which(argv[0]) is None:
        raise NnetError(f"--cmd {cmd!r}: " + (f"no program '{argv[0]}' on PATH" if argv else "empty")
                        + " (e.g. --cmd 'nnet-queue local', or $train_cmd from cmd.sh)")
    return argv


def _child_setup(niceness=0, ignore_sigint=False):
    """A ``preexec_fn`` for $cmd: it dies with the driver and runs ``niceness`` lower. With
    ``ignore_sigint`` (for nnet-queue) it starts with Ctrl-C ignored: Ctrl-C reaches the terminal's
    whole process group, and a Python interpreter it catches while starting prints a traceback;
    nnet-queue handles SIGINT itself once its tasks run, and the driver's exit stops it (SIGTERM)
    before that. Not for Kaldi's run.pl, whose tasks would inherit it and outlive the Ctrl-C.
    The driver starts it with SIGINT/SIGTERM blocked (so that it knows what it started): the child
    drops the driver's Python handlers, as exec would, before it unblocks them, so that a pending
    signal never runs them in the child."""
    die = die_with_parent()

    def setup():
        die()
        for s in (signal.SIGINT, signal.SIGTERM):
            if callable(signal.getsignal(s)):
                signal.signal(s, signal.SIG_DFL)
        if ignore_sigint:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if niceness:
            os.nice(niceness)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    return setup


class Launcher:
    """Foreground commands fail loudly; background ones (diagnostics) only warn, as in Kaldi.
    Every command dies with the driver (a killed driver leaves no launcher behind), and ``tick``
    is called every few seconds while a foreground command runs (the exp-dir lock's heartbeat)."""

    def __init__(self, cmd, log_dir, name="driver", tick=None):
        self.cmd = _launcher_argv(cmd) if isinstance(cmd, str) else list(cmd)
        self.is_nnet_queue = bool(self.cmd) and os.path.basename(self.cmd[0]) == "nnet-queue"
        self.log_dir = log_dir
        self.name = name
        self.tick = tick
        self.background = []   # (number, Popen) of the background commands still running
        self.foreground = None  # the Popen of the last foreground command
        self.num_started = 0   # background commands started so far

    def argv(self, log, command, jobs=None, launcher_opts=()):
        array = [f"JOB=1:{jobs}"] if jobs else []
        return self.cmd + list(launcher_opts) + array + [os.path.join(self.log_dir, log)] + [str(c) for c in command]

    def run(self, log, command, jobs=None, launcher_opts=()):
        with deferred_signals():   # a Ctrl-C inside Popen lost the started command: stop() missed it
            p = self.foreground = subprocess.Popen(self.argv(log, command, jobs, launcher_opts),
                                                   preexec_fn=_child_setup(ignore_sigint=self.is_nnet_queue))
        while True:
            try:
                code = p.wait(timeout=TICK_SECONDS)
                break
            except subprocess.TimeoutExpired:
                if self.tick:
                    self.tick()
        if code != 0:
            raise LaunchFailed(os.path.join(self.log_dir, log))

    def start(self, log, command, launcher_opts=()):
        self._reap(block=False)
        self.num_started += 1
        with deferred_signals():
            self.background.append((self.num_started, subprocess.Popen(
                self.argv(log, command, launcher_opts=launcher_opts),
                preexec_fn=_child_setup(BACKGROUND_NICENESS, self.is_nnet_queue))))

    def stop(self):
        """Stop every command still running (SIGTERM: nnet-queue stops its tasks) and wait for them,
        so that their last words come before the caller's (Ctrl-C: the resume line is the last)."""
        running = [p for _, p in self.background] + ([self.foreground] if self.foreground else [])
        for p in running:
            if p.poll() is None:
                p.terminate()
        for p in running:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        self.background, self.foreground = [], None

    def wait(self, upto=None):
        """Wait for the background commands: all, or the first ``upto`` started (see num_started)."""
        self._reap(block=True, upto=upto)

    def _reap(self, block, upto=None):
        running = []
        for n, p in self.background:
            code = p.wait() if block and (upto is None or n <= upto) else p.poll()
            if code is None:
                running.append((n, p))
            elif code != 0:
                print(f"{self.name}: WARNING: background job failed: {' '.join(p.args)}", file=sys.stderr)
        self.background = running


def _glob(word):
    """A word as the task's shell (bash -c, unquoted when it has no whitespace) would expand it."""
    if re.search(r"\s", word) or not re.search(r"[*?[]", word):
        return [word]
    return sorted(glob.glob(word)) or [word]


def _entry_points():
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")
            if ep.value.startswith("nnet_tools.")}


class InProcessLauncher(Launcher):
    """Runs nnet-tools programs in this process, tasks one after another, logs as nnet-queue's."""

    def __init__(self, log_dir, name="driver"):
        super().__init__([], log_dir, name)
        self.programs = _entry_points()

    def run(self, log, command, jobs=None, launcher_opts=()):
        failed = [j for j in (range(1, jobs + 1) if jobs else [None]) if self._task(log, command, j) != 0]
        if failed:
            raise LaunchFailed(os.path.join(self.log_dir, log))

    def start(self, log, command, launcher_opts=()):
        if self._task(log, command, None) != 0:
            print(f"{self.name}: WARNING: background job failed: {' '.join(map(str, command))}", file=sys.stderr)

    def _task(self, log, command, job):
        """One task: its programs, ``&&``-chained as a shell would run them, into one log."""
        def subst(text):
            return str(text) if job is None else str(text).replace("JOB", str(job))
        argv = [subst(c) for c in command]
        header = " ".join(shlex.quote(a) for a in argv)
        chain = [[]]
        for a in (word for a in argv for word in _glob(a)):
            if a == "&&":
                chain.append([])
            else:
                chain[-1].append(a)
        for program in chain:
            if not program or program[0] not in self.programs:
                raise NnetError(f"in-process launcher: {program[0] if program else '(nothing)'} is not an nnet-tools program")
        path = os.path.join(self.log_dir, subst(log))
        started = tasklog.write_header(path, header)
        code = 0
        for program in chain:
            if code == 0:
                code = self._program(path, program)
        tasklog.write_footer(path, started, code)
        return code

    def _program(self, path, argv):
        module, _, attr = self.programs[argv[0]].partition(":")
        main = getattr(importlib.import_module(module), attr)
        handlers, level = logger.handlers[:], logger.level  # the program points the logger at its log
        with open(path, "a") as f, contextlib.redirect_stderr(f), contextlib.redirect_stdout(f), hosting():
            saved, sys.argv = sys.argv, argv
            try:
                main.main(argv[1:], prog_name=argv[0], standalone_mode=False)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except click.exceptions.Abort as e:   # click's name for a Ctrl-C inside main: the host's to handle
                if isinstance(e.__cause__, KeyboardInterrupt):
                    raise e.__cause__ from None
                print(f"ERROR ({argv[0]}) aborted", file=sys.stderr)
                code = 1
            except Exception as e:  # noqa: BLE001 - the log says what broke, as a process's would
                print(f"ERROR ({argv[0]}) {type(e).__name__}: {e}", file=sys.stderr)
                code = 1
            finally:
                sys.argv = saved
                logger.handlers[:], logger.level = handlers, level
        return code

