"""The Grid Engine backend (Kaldi's queue.pl): ``qsub -t a-b``, JOB = SGE_TASK_ID.

--max-jobs-run M becomes ``-tc M``; every other option maps to qsub flags through the queue
config (config.py; defaults: --mem -> -l mem_free,ram_free, --num-threads -> -pe smp,
--gpu N -> -l gpu=N, and ``-w e`` so that a request no queue can ever satisfy is refused at
submission instead of waiting forever). Grid Engine counts GPUs but names none, so the task
wrapper picks them (wrapper.py). Task states come from qstat, exit statuses of tasks that
died without their wrapper finishing from qacct. A task put in error state (Eqw, e.g. its
output file could not be opened) can never run: it fails the call with qstat's reason.
"""
import re

from nnet_tools.queue.engine import EngineBackend, EngineUnavailable, TaskState, run_command

TAG_VARIABLE = "nnet_queue"   # a job context variable (-ac): finds a job whose id the submission lost


def parse_qstat(text, job):
    """``qstat -g d`` output -> {task: TaskState} for ``job`` (every task it still lists is queued)."""
    states = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] == job and fields[-1].isdigit():
            state = fields[4]
            states[int(fields[-1])] = TaskState(True, None, "error state" if "E" in state else None,
                                                f"state {state}")
    return states


def parse_error_reasons(text):
    """``qstat -j <job>`` output -> {task: reason} from its 'error reason' lines."""
    reasons = {}
    for m in re.finditer(r"^error reason\s+(\d+):\s*(.*)$", text, re.MULTILINE):
        reasons[int(m.group(1))] = m.group(2).split("error: ", 1)[-1].strip()
    return reasons


def parse_qacct(text):
    """``qacct -j <job>`` output -> {task: (exit_status, failed)} (failed: '0' or the reason)."""
    records, record = {}, {}
    for line in text.splitlines() + ["===="]:
        if line.startswith("===="):
            if "taskid" in record and "exit_status" in record:
                task = int(record["taskid"]) if record["taskid"].isdigit() else 1
                # "137                  (Killed)"; "100 : assumedly after job"
                records[task] = (int(record["exit_status"].split()[0]), record.get("failed", "0"))
            record = {}
        else:
            key, _, value = line.partition(" ")
            record[key] = value.strip()
    return records


def parse_found(text, tag):
    """``qstat -j NAME`` output -> ids of the jobs whose context holds ``tag``."""
    ids, job = [], None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "job_number":
            job = value.strip()
        elif key.strip() == "context" and f"{TAG_VARIABLE}={tag}" in [v.strip() for v in value.split(",")] and job not in ids:
            ids.append(job)
    return ids


def parse_unavailable_queues(text):
    """``qstat -f`` output -> the queue instances that take no job now, with their state letters
    (d disabled, u unreachable, E error, s/S suspended, D calendar-disabled, C calendar-suspended),
    when that is every instance listed; else []."""
    instances, down = 0, []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and "@" in fields[0] and "/" in fields[2]:
            instances += 1
            if len(fields) == 6 and set(fields[5]) & set("duEsSDC"):
                down.append(f"{fields[0]} ({fields[5]})")
    return down if instances and len(down) == instances else []


def job_name(base):
    """A log name as a job name Grid Engine accepts (no '/:@\\*?', not starting with a digit)."""
    name = re.sub(r"[/:@\\*?\s]", "_", base)
    return name if not name[:1].isdigit() else "j" + name


class SgeBackend(EngineBackend):
    name = "sge"
    title = "Grid Engine"
    task_variable = "SGE_TASK_ID"
    ping = ["qstat"]

    def submit_options(self, files, tasks):
        # One range: the wrapper skips numbers in it that are not to run (--pick).
        options = ["-terse", "-N", job_name(files.base), "-o", files.output, "-ac", f"{TAG_VARIABLE}={self.tag}",
                   "-t", f"{min(tasks)}-{max(tasks)}"]
        if self.spec.max_jobs_run:
            options += ["-tc", str(self.spec.max_jobs_run)]
        return options

    def job_id(self, stdout):
        return stdout.strip().split(".")[0]     # "<id>.<first>-<last>:<step>"

    def query(self, job):
        states = parse_qstat(run_command(["qstat", "-g", "d"], "qstat"), job)
        if any(s.problem for s in states.values()):
            reasons = parse_error_reasons(run_command(["qstat", "-j", job], "qstat"))
            states = {task: s._replace(problem=f"{s.what}: {reasons.get(task, 'see qstat -j ' + job)}")
                      if s.problem else s for task, s in states.items()}
        if any("qw" in s.what for s in states.values()):   # queued: is it the queues' doing?
            down = parse_unavailable_queues(run_command(["qstat", "-f"], "qstat"))
            if down:
                waiting = (f"queued while queue instances take no jobs: {', '.join(down)} (disabled or "
                           "unreachable? qstat -f; qmod -e enables)")
                states = {task: s._replace(waiting=waiting) if "qw" in s.what else s for task, s in states.items()}
        return states

    def exit_status(self, job, task, state):
        try:
            status, failed = parse_qacct(run_command(["qacct", "-j", job], "qacct")).get(task, (None, None))
        except EngineUnavailable as e:
            return None, f"no accounting record: {e}"
        if status is None:
            return None, "no accounting record"
        return status, f"exit status {status}" + (f", failed {failed}" if failed != "0" else "")

    def cancel_command(self, job):
        return ["qdel", job]

    def cancel_task_command(self, job, task):
        return ["qdel", job, "-t", str(task)]

    def find_jobs(self, name, tag):
        try:
            return parse_found(run_command(["qstat", "-j", job_name(name)], "qstat"), tag)
        except EngineUnavailable as e:
            if "do not exist" in str(e):     # no job of that name
                return []
            raise
