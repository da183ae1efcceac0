"""What the cluster backends (Slurm, Grid Engine) share: one array submission per launcher
call, waiting for it without hammering the controller, and cancelling it when stopped.

The wrapper script (wrapper.py) goes to LOGDIR/q/<base>.sh and is submitted once as an array
of the tasks to run. Each task writes its own log frame and then a marker file in LOGDIR/q, so
the launcher learns that tasks finished from a directory listing (every 0.1 s, growing to 1 s)
and their exit codes from the logs. The engine is asked far less often (after 1 s, doubling up
to every 30 s) for what markers cannot tell: a task that can never run (fail fast, cancel the
job), and a task that left the queue without its wrapper finishing (killed for its time or
memory limit, node failure): after a grace period for slow shared file systems, that task
fails with the exit status the engine recorded (Slurm: squeue, else its job-completion log;
no accounting database needed; Grid Engine: qacct).

SIGINT/SIGTERM of the launcher (or any error while waiting) cancels the job (scancel / qdel),
waits until no task is left in the queue, and closes the logs of the tasks it stopped.
"""
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from nnet_tools.errors import NnetError
from nnet_tools.fileio import make_dirs
from nnet_tools.procs import deferred_signals
from nnet_tools.queue import config, tasklog, wrapper
from nnet_tools.queue.backend import STALL_CHECK_SECONDS, Backend, Interrupted

# (first, factor, most) seconds between looks: at the marker files, and at the engine.
# Looking at the markers is a directory listing: cheap enough to do 4 times a second, and a
# driver's iteration waits on it three times (P3: docs/results.md).
MARKER_POLL = (0.05, 1.2, 0.25)
ENGINE_POLL = (1.0, 2.0, 30.0)
# A task the engine no longer runs may still have its marker on the way (NFS caches).
LOST_GRACE_SECONDS = 5.0
CANCEL_WAIT_SECONDS = 60.0
COMMAND_TIMEOUT_SECONDS = 120

# Client errors that mean "the controller did not answer", for Slurm and Grid Engine.
_TRANSIENT = re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused|connect failure|"
                        r"Transport endpoint is not connected|Zero Bytes were transmitted|"
                        r"unable to send message to qmaster|unable to contact qmaster|commlib error|"
                        r"timed out|Connection reset", re.IGNORECASE)

# What the engine says about one task: still queued or running; its exit status once it
# left the queue (None: not known); why it can never run (None: it can); the state's name.
# ``waiting``: why a queued task does not start yet, when the reason is the cluster's (a drained or
# down node), for the user to hear while the launcher waits; None otherwise.
TaskState = collections.namedtuple("TaskState", "active code problem what waiting", defaults=(None,))


class EngineUnavailable(Exception):
    """The engine's status command failed this time (the controller may be restarting)."""


def intervals(first, factor, most):
    """first, first*factor, ... capped at most: how long to wait between successive looks."""
    interval = first
    while True:
        yield interval
        interval = min(interval * factor, most)


def task_ranges(tasks):
    """Sorted task numbers -> [(first, last), ...] runs of consecutive numbers."""
    runs = []
    for task in sorted(tasks):
        if runs and task == runs[-1][1] + 1:
            runs[-1][1] = task
        else:
            runs.append([task, task])
    return [tuple(r) for r in runs]


def run_command(argv, what, new_session=False):
    """Run an engine client command; its stdout, or EngineUnavailable with its error text.

    new_session: out of reach of the terminal's Ctrl-C. qsub unblocks SIGINT, and killed after
    the qmaster took the job it never prints the id that would let us cancel it."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                timeout=COMMAND_TIMEOUT_SECONDS, start_new_session=new_session)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineUnavailable(f"{what}: {argv[0]}: {e}") from None
    if result.returncode != 0:
        raise EngineUnavailable(one_line(result.stderr or result.stdout)
                                or f"{argv[0]} exited with {result.returncode}")
    return result.stdout


def transient(error):
    """Whether a failed submission may succeed if tried again: the controller did not answer
    (restarting, overloaded, network), as opposed to refusing the request."""
    return bool(_TRANSIENT.search(error))


def one_line(text):
    """An engine's multi-line complaint as one line, without 'sbatch: error:' prefixes or banners."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and line.strip() != "Exiting." and not line.startswith("*")]
    return "; ".join(line.split("error: ", 1)[-1] for line in lines)


class EngineBackend(Backend):
    """Subclasses give the engine's commands and how to read them (see slurm.py, sge.py)."""
    title = None            # e.g. "Slurm", for messages
    task_variable = None    # the variable holding the array task number inside a task
    ping = None             # a cheap command that succeeds only if the controller answers

    def __init__(self, spec, prog="nnet-queue"):
        super().__init__(spec, prog)
        # Unique to this call: tells its markers from an earlier call's, and finds its job in
        # the queue when the submit command's answer (the job id) was lost.
        self.tag = f"{os.getpid()}-{time.time_ns() // 1_000_000}"
        self.said = set()   # the waiting reasons already printed

    @classmethod
    def unreachable(cls):
        """Why jobs cannot be submitted to this engine from here, or None (tests, benchmarks)."""
        if not shutil.which(cls.ping[0]):
            return f"{cls.ping[0]} not found: no {cls.title} client on this machine"
        try:
            run_command(cls.ping, "ping")
        except EngineUnavailable as e:
            return f"the {cls.title} controller does not answer ({' '.join(cls.ping)}: {e})"
        return None

    def submit_options(self, files, tasks):
        """Flags after the config's submit command: job name, output, the array and its throttle."""
        raise NotImplementedError

    def job_id(self, stdout):
        raise NotImplementedError

    def query(self, job):
        """{task: TaskState} for the tasks the engine knows; EngineUnavailable if it did not answer."""
        raise NotImplementedError

    def exit_status(self, job, task, state):
        """(code or None, what) for a task that left the queue without its wrapper finishing."""
        return state.code if state else None, state.what if state else f"no longer known to {self.title}"

    def cancel_command(self, job):
        raise NotImplementedError

    def find_jobs(self, name, tag):
        """Ids of the queued jobs named ``name`` submitted with ``tag``; EngineUnavailable if the
        engine did not answer."""
        raise NotImplementedError

    def cancel_task_command(self, job, task):
        raise NotImplementedError

    # --- the shared flow -------------------------------------------------------------------

    def run_tasks(self, tasks):
        spec = self.spec
        queue_config = config.load(self.name, spec.options.get("config"))
        command, flags = queue_config.command, queue_config.flags(spec.options) + spec.engine_args
        if not shutil.which(command[0]):
            raise NnetError(f"{self.name}: '{command[0]}' not found on PATH: is this a {self.title} "
                            f"submit host? (submit command from {queue_config.source})")
        self.files = wrapper.Files.for_spec(spec, token=self.tag)
        self.job = None
        # A task that never starts must not leave an old run's log behind; but until the engine
        # has the job, nothing has run, and a refused submission gives the old logs back.
        aside = self._old_logs_aside(tasks)
        try:
            _remove(self.files.output)
            wrapper.write(spec, self.files, self.task_variable, tasks)
            argv = command + self.submit_options(self.files, tasks) + flags + [self.files.script]
            self.submitted = int(time.time())
            try:
                self._submit(argv)
                return self._wait(self.job, tasks)
            except BaseException as e:
                signum = e.signum if isinstance(e, Interrupted) else signal.SIGTERM
                for found in [self.job] if self.job is not None else self._find_own_jobs():
                    self._cancel(found, tasks, signum)
                raise
            finally:
                self.files.remove_markers(tasks)
        finally:
            for log, old in aside.items():
                if self.job is None and not os.path.lexists(log):
                    os.replace(old, log)
                else:
                    _remove(old)

    def _old_logs_aside(self, tasks):
        """Move the tasks' existing logs into the queue dir: {log: where it went}."""
        make_dirs(self.files.qdir)
        aside = {}
        for task in tasks:
            log = self.spec.log_for(task)
            make_dirs(os.path.dirname(log) or ".")
            if os.path.lexists(log) and not os.path.isdir(log):   # a directory there fails its task alone
                aside[log] = os.path.join(self.files.qdir, f"{self.files.stem}.old.{self.tag}.{task}")
                os.replace(log, aside[log])
        return aside

    def _submit(self, argv):
        """Submit, setting self.job; retry while the controller does not answer (Kaldi's
        queue.pl: 4 tries, 20 s apart); a request the engine refuses fails at once."""
        tries, delay = int(self.spec.fault_option("submit_tries")), self.spec.fault_option("submit_retry_delay")
        for attempt in range(1, tries + 1):
            with deferred_signals():   # a signal now is delivered once self.job is set
                try:
                    self.job = self.job_id(run_command(argv, "submitting", new_session=True))
                    return
                except EngineUnavailable as e:
                    error = e
                if not transient(str(error)) or attempt == tries:
                    break
                # A submission that timed out may have been accepted all the same.
                found = self._find_own_jobs(quiet=True)
                if found:
                    self.job = found[0]
                    return
            print(f"{self.prog}: WARNING: submitting {self.spec.log_glob()} failed (try {attempt} of {tries}): "
                  f"{error}; trying again in {delay:g} s", file=sys.stderr, flush=True)
            time.sleep(delay)
        raise NnetError(f"{self.name}: submitting {self.spec.log_glob()} failed: {error} "
                        f"(script {self.files.script})")

    def _find_own_jobs(self, quiet=False):
        """This call's jobs in the queue, found by name and tag (the submit command's answer was
        lost: it failed, timed out, or a signal came)."""
        try:
            return self.find_jobs(self.files.base, self.tag)
        except EngineUnavailable as e:
            if not quiet:
                print(f"{self.prog}: WARNING: cannot look for a job submitted as {self.files.script} "
                      f"(cancel it by hand if it runs): {e}", file=sys.stderr)
            return []

    def _wait(self, job, tasks):
        statuses, unfinished = {}, set(tasks)
        gone_since = {}       # task -> when the engine first no longer ran it, marker unseen
        lost_grace, max_wait = self.spec.fault_option("lost_grace"), self.spec.fault_option("max_wait")
        marker_waits, engine_waits = intervals(*MARKER_POLL), intervals(*ENGINE_POLL)
        started = time.monotonic()
        ask_at, stall_check_at = started + next(engine_waits), started
        while True:
            for task in self.files.finished() & unfinished:
                statuses[task] = _logged_status(self.spec.log_for(task))
                unfinished.discard(task)
            if not unfinished:
                return statuses
            now = time.monotonic()
            if max_wait is not None and now - started >= max_wait:
                statuses.update(self._give_up(job, unfinished, max_wait))
                return statuses
            if self.spec.stall_limit and now >= stall_check_at:   # a stat per task: not at every look
                stall_check_at = now + STALL_CHECK_SECONDS
                stalled = self._stalled(unfinished)
                statuses.update(self._give_up(job, stalled, None))
                unfinished -= set(stalled)
            if now >= ask_at:
                ask_at = now + next(engine_waits)
                states = self._query(job)
                self._say_why_waiting(job, states)
                for task in sorted(unfinished) if states is not None else ():
                    state = states.get(task)
                    if state and state.problem:
                        raise NnetError(f"{self.name}: task {task} of job {job} can never run: {state.problem}; "
                                        f"cancelled job {job}")
                    if state and state.active:
                        gone_since.pop(task, None)
                    elif task not in gone_since:
                        gone_since[task] = now
                        ask_at = min(ask_at, now + LOST_GRACE_SECONDS)
                    elif now - gone_since[task] >= LOST_GRACE_SECONDS:
                        status = self._lost(job, task, state, now - gone_since[task] >= lost_grace)
                        if status is None:     # no verdict yet: look again soon
                            ask_at = min(ask_at, now + LOST_GRACE_SECONDS)
                        else:
                            statuses[task] = status
                            unfinished.discard(task)
            time.sleep(next(marker_waits))

    def _say_why_waiting(self, job, states):
        """Print, once per reason, why queued tasks wait when it is the cluster's doing."""
        said, waiting = self.said, {}
        for task, state in sorted((states or {}).items()):
            if state.active and state.waiting and state.waiting not in said:
                waiting.setdefault(state.waiting, []).append(task)
        for reason, tasks in waiting.items():
            said.add(reason)
            numbers = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in task_ranges(tasks))
            print(f"{self.prog}: {self.title} job {job}: task{'s' if len(tasks) > 1 else ''} {numbers} "
                  f"waiting: {reason}", file=sys.stderr, flush=True)

    def _query(self, job):
        try:
            return self.query(job)
        except EngineUnavailable as e:
            print(f"{self.prog}: WARNING: cannot get the state of {self.title} job {job} (will retry): {e}",
                  file=sys.stderr)
            return None

    def _lost(self, job, task, state, grace_over):
        """A task that left the queue with no marker: its log's footer, else the engine's record
        of a failure; a success (or no record) is waited for until the grace period is over,
        as its marker and footer may not yet be visible here (NFS attribute caching).
        None: no verdict yet."""
        log = self.spec.log_for(task)
        if os.path.exists(self.files.marker(task)) or tasklog.ended_code(log) is not None:
            return _logged_status(log)
        code, what = self.exit_status(job, task, state)
        if not code and not grace_over:
            return None
        if not code:
            what += f"; no '# Ended' footer after {self.spec.fault_option('lost_grace'):g} s (--lost-grace)"
        self._close_log(job, task, code or 1, f"ended ({what}) without its wrapper finishing")
        return code or 1

    def _close_log(self, job, task, code, why):
        """Footer (and header, if the task never wrote one) for a task the launcher gave up on."""
        log = self.spec.log_for(task)
        if not os.path.exists(log):
            tasklog.write_header(log, self.spec.command_for(task))
        with open(log, "a") as f:
            f.write(f"# nnet-queue: {self.title} task {job}.{task} {why}; "
                    f"{self.title}'s output is in {self.files.output}\n")
        tasklog.write_footer(log, self.submitted, code, self.spec.num_threads)

    def _stalled(self, tasks):
        """The started, unfinished tasks whose log has not grown for --stall-limit seconds."""
        limit = self.spec.stall_limit
        out = []
        for task in sorted(tasks):
            log = self.spec.log_for(task)
            if tasklog.stalled(log, limit) and tasklog.ended_code(log) is None:
                print(f"{self.prog}: {self.title} task {self.job}.{task} stalled ({tasklog.stall_note(limit)}): "
                      f"cancelling it; see {log}", file=sys.stderr)
                out.append(task)
        return out

    def _give_up(self, job, tasks, max_wait):
        """--max-wait passed (``max_wait``), or the tasks stalled (None): cancel them; each counts
        as failed."""
        for task in sorted(tasks):
            try:
                run_command(self.cancel_task_command(job, task), "cancelling")
            except EngineUnavailable as e:
                print(f"{self.prog}: WARNING: cancelling {self.title} task {job}.{task} failed: {e}",
                      file=sys.stderr)
        statuses = {}
        for task in sorted(tasks):
            code = tasklog.ended_code(self.spec.log_for(task))
            if code is None:
                why = (f"not finished after {max_wait:g} s (--max-wait)" if max_wait is not None else
                       f"stalled: {tasklog.stall_note(self.spec.stall_limit)}")
                self._close_log(job, task, 1, f"{why}: cancelled")
            statuses[task] = 1 if code is None else code
        return statuses

    def _cancel(self, job, tasks, signum):
        """Cancel the job, wait until none of its tasks is queued, close the stopped tasks' logs."""
        try:
            run_command(self.cancel_command(job), "cancelling")
        except EngineUnavailable as e:
            print(f"{self.prog}: WARNING: cancelling {self.title} job {job} failed: {e}", file=sys.stderr)
        deadline = time.monotonic() + CANCEL_WAIT_SECONDS
        waits = intervals(0.2, 1.5, 2.0)
        while time.monotonic() < deadline:
            states = self._query(job)
            if states is not None and not any(s.active for s in states.values()):
                break
            time.sleep(next(waits))
        else:
            print(f"{self.prog}: WARNING: {self.title} job {job} still has tasks queued after cancelling it",
                  file=sys.stderr)
        for task in tasks:
            log = self.spec.log_for(task)
            if os.path.exists(log) and tasklog.ended_code(log) is None:
                tasklog.write_footer(log, self.submitted, -signum, self.spec.num_threads)


def _logged_status(log):
    """A finished task's exit code from its footer (1 if the footer is missing)."""
    code = tasklog.ended_code(log)
    return 1 if code is None else code


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
