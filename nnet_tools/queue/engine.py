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
import shutil
import signal
import subprocess
import sys
import time

from nnet_tools.errors import NnetError
from nnet_tools.queue import config, tasklog, wrapper
from nnet_tools.queue.backend import Backend, Interrupted, deferred_signals

# (first, factor, most) seconds between looks: at the marker files, and at the engine.
MARKER_POLL = (0.1, 1.1, 1.0)
ENGINE_POLL = (1.0, 2.0, 30.0)
# A task the engine no longer runs may still have its marker on the way (NFS caches).
LOST_GRACE_SECONDS = 5.0
CANCEL_WAIT_SECONDS = 60.0
COMMAND_TIMEOUT_SECONDS = 120

# What the engine says about one task: still queued or running; its exit status once it
# left the queue (None: not known); why it can never run (None: it can); the state's name.
TaskState = collections.namedtuple("TaskState", "active code problem what")


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


def run_command(argv, what):
    """Run an engine client command; its stdout, or EngineUnavailable with its error text."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                timeout=COMMAND_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineUnavailable(f"{what}: {argv[0]}: {e}") from None
    if result.returncode != 0:
        raise EngineUnavailable(one_line(result.stderr or result.stdout)
                                or f"{argv[0]} exited with {result.returncode}")
    return result.stdout


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

    # --- the shared flow -------------------------------------------------------------------

    def run_tasks(self, tasks):
        spec = self.spec
        queue_config = config.load(self.name, spec.options.get("config"))
        command, flags = queue_config.command, queue_config.flags(spec.options) + spec.engine_args
        if not shutil.which(command[0]):
            raise NnetError(f"{self.name}: '{command[0]}' not found on PATH: is this a {self.title} "
                            f"submit host? (submit command from {queue_config.source})")
        self.files = wrapper.Files.for_spec(spec, token=os.getpid())
        for task in tasks:   # a task that never starts must not leave an old run's log behind
            log = spec.log_for(task)
            os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
            _remove(log)
        _remove(self.files.output)
        wrapper.write(spec, self.files, self.task_variable, tasks)
        argv = command + self.submit_options(self.files, tasks) + flags + [self.files.script]
        job = None
        self.submitted = int(time.time())
        try:
            with deferred_signals():   # a signal now is delivered once the job id is known
                job = self._submit(argv)
            return self._wait(job, tasks)
        except BaseException as e:
            if job is not None:
                self._cancel(job, tasks, e.signum if isinstance(e, Interrupted) else signal.SIGTERM)
            raise
        finally:
            self.files.remove_markers(tasks)

    def _submit(self, argv):
        try:
            return self.job_id(run_command(argv, "submitting"))
        except EngineUnavailable as e:
            raise NnetError(f"{self.name}: submitting {self.spec.log_glob()} failed: {e} "
                            f"(script {self.files.script})") from None

    def _wait(self, job, tasks):
        statuses, unfinished = {}, set(tasks)
        gone_since = {}       # task -> when the engine first no longer ran it, marker unseen
        marker_waits, engine_waits = intervals(*MARKER_POLL), intervals(*ENGINE_POLL)
        ask_at = time.monotonic() + next(engine_waits)
        while True:
            for task in self.files.finished() & unfinished:
                statuses[task] = _logged_status(self.spec.log_for(task))
                unfinished.discard(task)
            if not unfinished:
                return statuses
            now = time.monotonic()
            if now >= ask_at:
                ask_at = now + next(engine_waits)
                states = self._query(job)
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
                        statuses[task] = self._lost(job, task, state)
                        unfinished.discard(task)
            time.sleep(next(marker_waits))

    def _query(self, job):
        try:
            return self.query(job)
        except EngineUnavailable as e:
            print(f"{self.prog}: WARNING: cannot get the state of {self.title} job {job} (will retry): {e}",
                  file=sys.stderr)
            return None

    def _lost(self, job, task, state):
        """A task that left the queue with no marker: its log's footer, else the engine's word."""
        log = self.spec.log_for(task)
        code = tasklog.ended_code(log)
        if code is not None:
            return code
        code, what = self.exit_status(job, task, state)
        code = code or 1
        if not os.path.exists(log):
            tasklog.write_header(log, self.spec.command_for(task))
        with open(log, "a") as f:
            f.write(f"# nnet-queue: {self.title} task {job}.{task} ended ({what}) without its wrapper "
                    f"finishing; {self.title}'s output is in {self.files.output}\n")
        tasklog.write_footer(log, self.submitted, code, self.spec.num_threads)
        return code

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
