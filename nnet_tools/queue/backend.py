"""The seam between the launcher and an execution engine.

A backend only runs tasks and reports their exit statuses; choosing which tasks to run
(--pick), the exit code and the failure message are shared here, so every engine behaves
the same from the caller's side.
"""
import contextlib
import os
import signal
import sys
import threading

from nnet_tools.errors import NnetError
from nnet_tools.fileio import check_writable, make_dirs
from nnet_tools.procs import stop_listening
from nnet_tools.queue import tasklog


MAX_NAMED = 10   # failed tasks' logs named in the failure message
MAX_ERROR_CHARS = 500   # of the first failed task's ERROR line, repeated there
STALL_CHECK_SECONDS = 1.0   # how often --stall-limit looks at the running tasks' logs (a stat each)


class Interrupted(Exception):
    """SIGINT/SIGTERM reached the launcher; a backend stops its tasks, then lets this propagate."""

    def __init__(self, signum):
        super().__init__(f"caught signal {signum}")
        self.signum = signum


@contextlib.contextmanager
def interruptible():
    """Turn SIGINT/SIGTERM into Interrupted while tasks run (main thread only: elsewhere
    Python cannot install handlers and the caller owns signal handling)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(signum, frame):
        # A second signal must not cut short the backend stopping its tasks, nor raise again
        # outside any handler as the launcher exits.
        interrupted.append(signum)
        stop_listening()
        raise Interrupted(signum)

    interrupted = []
    previous = {s: signal.signal(s, raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        if not interrupted:
            for s, handler in previous.items():
                signal.signal(s, handler)


class Backend:
    """Subclass and register in ``nnet_tools.queue.BACKENDS``.

    ``run_tasks(tasks)`` runs the given task numbers of ``self.spec`` (each writing its log
    with ``tasklog``) and returns ``{task: status}`` (0 = success). ``prog`` prefixes messages.
    """
    name = None

    def __init__(self, spec, prog="nnet-queue"):
        self.spec = spec
        self.prog = prog

    def run_tasks(self, tasks):
        raise NotImplementedError


def pick_tasks(spec):
    """Tasks to run and tasks already failed, per --pick (Kaldi run.pl semantics).

    all: run every task. failed: skip tasks whose log ends ``# Ended (code 0)``, rerun the rest.
    incomplete: skip finished tasks; failed ones are not rerun but still count as failed.
    """
    if spec.pick == "all":
        return list(spec.tasks), []
    to_run, failed = [], []
    for task in spec.tasks:
        code = tasklog.ended_code(spec.log_for(task))
        if code == 0:
            continue
        if code is not None and spec.pick == "incomplete":
            failed.append(task)
        else:
            to_run.append(task)
    return to_run, failed


def check_log_dir(spec):
    """The log dir, made and writable before any task: else every task fails for its log alone,
    and the failure names logs that were never written."""
    log_dir = os.path.dirname(spec.log_for(spec.start)) or "."
    try:
        make_dirs(log_dir)
    except OSError as e:
        raise NnetError(f"{log_dir}: cannot make the log dir: {e.strerror}") from None
    check_writable(log_dir)


def run(backend_cls, spec, prog="nnet-queue", stderr=None):
    """Run ``spec`` on a backend class; return the exit code (0 iff every task succeeded)."""
    stderr = stderr or sys.stderr
    check_log_dir(spec)
    to_run, failed = pick_tasks(spec)
    try:
        with interruptible():
            statuses = backend_cls(spec, prog).run_tasks(to_run) if to_run else {}
    except Interrupted as e:
        print(f"{prog}: caught signal {e.signum}, stopped all tasks", file=stderr)
        return 128 + e.signum
    failed += [task for task, status in statuses.items() if status != 0]
    if not failed:
        return 0
    _report_failures(spec, sorted(failed), prog, stderr)
    return 1


def _report_failures(spec, failed, prog, stderr):
    """run.pl's lines, then the first failed task's ERROR line: what went wrong, without opening
    the log (a full disk, a bad input file, named there)."""
    if len(spec.tasks) == 1:
        log = spec.log_for(spec.start)
        print(f"{prog}: job failed, log is in {log}", file=stderr)
        if "JOB" in log:
            print(f"{prog}: probably you forgot to put JOB=1:$nj in your script.", file=stderr)
    else:
        print(f"{prog}: {len(failed)} / {len(spec.tasks)} failed, log is in {spec.log_glob()}",
              file=stderr)
        named = [spec.log_for(task) for task in failed]
        print(f"{prog}: failed: {' '.join(named[:MAX_NAMED])}{' ...' if len(named) > MAX_NAMED else ''}",
              file=stderr)
    for task in failed:
        error = tasklog.last_error(spec.log_for(task))
        if error:
            print(f"{prog}: {spec.log_for(task)}: {error[:MAX_ERROR_CHARS]}", file=stderr)
            return
