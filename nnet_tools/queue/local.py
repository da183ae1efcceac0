"""The local backend (Kaldi's run.pl): tasks run as processes on this machine, at most
``slots`` at once, each in its own session so stopping the launcher stops whole task trees.
Each task runs under guard.py, which kills the task's process group when the launcher dies
(kill -9 included), so no orphaned task goes on writing into a log a new run may own.

Concurrency: --max-jobs-run if given; else with --gpu N the number of GPUs // N; else the
number of CPUs, raised to the number of tasks when that is under 1.4 x #CPUs (run.pl's rule,
so a few leftover tasks do not run as a second wave).

--gpu N gives each running task N GPUs of its own through CUDA_VISIBLE_DEVICES, handed out
round robin from the GPUs this process sees (its CUDA_VISIBLE_DEVICES if set, else
``nvidia-smi -L``). --num-threads T exports OMP_NUM_THREADS=T and MKL_NUM_THREADS=T so
torch in the task uses T threads. --max-wait S kills what has not finished S seconds after the
launch; --stall-limit S a task whose log has not grown for S seconds. --mem, --config and engine-only options are accepted and ignored, so a recipe can switch
between local and a cluster by changing only the backend.
"""
import collections
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time

from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.queue import guard, tasklog
from nnet_tools.queue.backend import STALL_CHECK_SECONDS, Backend
from nnet_tools.queue.spec import THREAD_VARIABLES

POLL_SECONDS = 0.05
KILL_GRACE_SECONDS = 5.0


def num_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 10


def visible_gpus():
    """GPU ids tasks may use: CUDA_VISIBLE_DEVICES if set, else those ``nvidia-smi -L`` lists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]


def concurrency(spec, num_tasks, gpus):
    """How many tasks may run at once (see the module docstring)."""
    if spec.gpu > 0:
        if not gpus:
            logger.warning("--gpu %d: no GPUs detected (nvidia-smi -L); running one task at a time",
                           spec.gpu)
            return spec.max_jobs_run or 1
        slots = len(gpus) // spec.gpu
        if slots == 0:
            raise NnetError(f"--gpu {spec.gpu}: each task needs {spec.gpu} GPUs but only "
                            f"{len(gpus)} are visible ({','.join(gpus)})")
        return min(slots, spec.max_jobs_run or slots)
    if spec.max_jobs_run:
        return spec.max_jobs_run
    slots = num_cpus()
    return num_tasks if slots < num_tasks < 1.4 * slots else slots


@dataclasses.dataclass
class _Running:
    popen: subprocess.Popen
    log: str
    started: int
    gpus: list


class LocalBackend(Backend):
    name = "local"

    def run_tasks(self, tasks):
        spec = self.spec
        gpus = visible_gpus() if spec.gpu > 0 else []
        slots = concurrency(spec, len(tasks), gpus)
        free_gpus = collections.deque(gpus)
        pending = collections.deque(tasks)
        running, statuses = {}, {}
        max_wait, begun = spec.fault_option("max_wait"), time.monotonic()
        stall_check = begun
        try:
            while pending or running:
                if max_wait is not None and time.monotonic() - begun >= max_wait:
                    statuses.update(self._give_up(pending, running, max_wait))
                    break
                while pending and len(running) < slots:
                    task = pending.popleft()
                    assigned = [free_gpus.popleft() for _ in range(spec.gpu)] if gpus else []
                    started = self._start(task, assigned)
                    if started is None:
                        statuses[task] = 1
                        free_gpus.extend(assigned)
                    else:
                        running[task] = started
                if spec.stall_limit and time.monotonic() >= stall_check:   # once a second, not every poll
                    stall_check = time.monotonic() + STALL_CHECK_SECONDS
                    self._stop_stalled(running, statuses, free_gpus)
                finished = [t for t, r in running.items() if r.popen.poll() is not None]
                for task in finished:
                    done = running.pop(task)
                    statuses[task] = self._finish(done)
                    free_gpus.extend(done.gpus)
                if not finished and running:
                    time.sleep(POLL_SECONDS)
        finally:
            self._stop(running.values())
        return statuses

    def _start(self, task, gpus):
        """Write the header and start the task; None (task failed) if its log cannot be written."""
        spec = self.spec
        log, command = spec.log_for(task), spec.command_for(task)
        env = dict(os.environ)
        if "num_threads" in spec.options:
            env.update(dict.fromkeys(THREAD_VARIABLES, str(spec.num_threads)))
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        try:
            started = tasklog.write_header(log, command)
            with open(log, "a") as out:
                popen = subprocess.Popen([sys.executable, "-S", "-E", guard.__file__, str(os.getpid()), "bash", "-c", command],
                                         stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        except OSError as e:
            print(f"{self.prog}: cannot run task {task}, log {log}: {e.strerror}", file=sys.stderr)
            return None
        return _Running(popen, log, started, gpus)

    def _finish(self, running):
        returncode = running.popen.wait()
        try:
            tasklog.write_footer(running.log, running.started, returncode, self.spec.num_threads)
        except OSError as e:  # its directory was removed (or became unwritable) while it ran
            print(f"{self.prog}: cannot finish log {running.log}: {e.strerror}; counting the task as failed",
                  file=sys.stderr)
            return returncode or 1
        return returncode

    def _stop_stalled(self, running, statuses, free_gpus):
        """--stall-limit: kill each task whose log has not grown for that long (SIGCONT after the
        SIGTERM, so that a stopped one ends too) and count it as failed."""
        limit = self.spec.stall_limit
        for task in [t for t, r in running.items() if tasklog.stalled(r.log, limit)]:
            r = running.pop(task)
            with open(r.log, "a") as f:
                f.write(f"# nnet-queue: local task {task} stalled: {tasklog.stall_note(limit)}: killed\n")
            print(f"{self.prog}: local task {task} stalled ({tasklog.stall_note(limit)}): killed; see {r.log}",
                  file=sys.stderr)
            self._stop([r], wake=True)
            statuses[task] = 1
            free_gpus.extend(r.gpus)

    def _give_up(self, pending, running, max_wait):
        """--max-wait passed (counted from the launch, as on an engine): stop the running tasks and
        close every unfinished task's log as failed."""
        why = f"# nnet-queue: local task {{}} not finished after {max_wait:g} s (--max-wait): killed\n"
        for task, r in running.items():
            with open(r.log, "a") as f:
                f.write(why.format(task))
        self._stop(running.values())
        for task in pending:
            log = self.spec.log_for(task)
            started = tasklog.write_header(log, self.spec.command_for(task))
            with open(log, "a") as f:
                f.write(why.format(task))
            tasklog.write_footer(log, started, 1, self.spec.num_threads)
        gone = dict.fromkeys([*running, *pending], 1)
        running.clear()
        pending.clear()
        return gone

    def _stop(self, running, wake=False):
        """Signal every still-running task's process group, wait, then force; footers included.
        ``wake``: SIGCONT too, so that a stopped task takes its SIGTERM."""
        running = list(running)
        for r in running:
            _killpg(r.popen, signal.SIGTERM)
            if wake:
                _killpg(r.popen, signal.SIGCONT)
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        for r in running:
            try:
                r.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # Also catches children that outlived the task's shell (the group survives it).
            _killpg(r.popen, signal.SIGKILL)
            self._finish(r)


def _killpg(popen, signum):
    # The task leads its own session, so its pid is its process-group id.
    try:
        os.killpg(popen.pid, signum)
    except ProcessLookupError:
        pass
