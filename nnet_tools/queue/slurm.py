"""The Slurm backend (Kaldi's slurm.pl): ``sbatch --array``, JOB = SLURM_ARRAY_TASK_ID.

--max-jobs-run M becomes the array throttle ``--array=1-N%M``; every other option maps to
sbatch flags through the queue config (config.py; defaults: --mem -> --mem-per-cpu,
--num-threads -> --cpus-per-task, --gpu N -> -p gpu --gres=gpu:N, else -p shared). Slurm sets
CUDA_VISIBLE_DEVICES for the GPUs it gives a task. Task states come from squeue, which keeps
finished tasks (exit codes included) for MinJobAge seconds without an accounting database.
A task squeue has forgotten is looked up in the job-completion log, if the site keeps one
(JobCompType=jobcomp/filetxt).
"""
import os
import re

from nnet_tools.queue.engine import EngineBackend, EngineUnavailable, TaskState, run_command, task_ranges

# Pending reasons that will not go away by waiting: the request exceeds what the partition
# or the cluster offers (sbatch accepts some such requests and leaves them pending forever).
NEVER_RUNS = ("PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
              "InvalidAccount", "InvalidQOS", "DependencyNeverSatisfied")
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE")
# Pending reasons that are the nodes' state (drained, down, not responding): said while waiting.
NODE_REASONS = ("ReqNodeNotAvail", "UnavailableNodes", "NodeDown", "Nodes required for job are DOWN")
SQUEUE_FORMAT = "ArrayTaskID:|,State:|,exit_code:|,Reason:"
TAG_PREFIX = "nnet-queue:"   # the job's --comment: finds a job whose id the submission lost


def parse_squeue(text):
    """``squeue --array --Format SQUEUE_FORMAT`` output -> {task: TaskState}."""
    states = {}
    for line in text.splitlines():
        fields = line.strip().split("|", 3)
        if len(fields) != 4 or not fields[0].isdigit():
            continue
        task, state, status, reason = int(fields[0]), fields[1], fields[2], fields[3].strip()
        code = None
        if state in FINAL_STATES and status.isdigit():   # a wait status: code << 8 | signal
            raw = int(status)
            code = 128 + (raw & 0x7F) if raw & 0x7F else raw >> 8
        problem = f"pending for reason {reason}" if state == "PENDING" and reason in NEVER_RUNS else None
        waiting = (f"pending for reason {reason}: no node can take it now (drained or down? sinfo -R says why)"
                   if state == "PENDING" and any(r in reason for r in NODE_REASONS) else None)
        states[task] = TaskState(state not in FINAL_STATES, code, problem, f"state {state}, reason {reason}", waiting)
    return states


def parse_found(text, tag):
    """``squeue --format=%F|%k`` output -> ids of the array jobs whose comment is ``tag``'s."""
    ids = []
    for line in text.splitlines():
        job, _, comment = line.strip().partition("|")
        if comment == TAG_PREFIX + tag and job not in ids:
            ids.append(job)
    return ids


def parse_jobcomp(text, job):
    """Job-completion log lines (jobcomp/filetxt) -> {task: TaskState} for array job ``job``."""
    states = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("ArrayJobId") == job and fields.get("ArrayTaskId", "").isdigit():
            code, _, sig = fields.get("ExitCode", "1:0").partition(":")
            states[int(fields["ArrayTaskId"])] = TaskState(
                False, 128 + int(sig) if sig not in ("", "0") else int(code), None,
                f"state {fields.get('JobState')} in the job-completion log")
    return states


class SlurmBackend(EngineBackend):
    name = "slurm"
    title = "Slurm"
    task_variable = "SLURM_ARRAY_TASK_ID"
    ping = ["scontrol", "ping"]

    def submit_options(self, files, tasks):
        array = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in task_ranges(tasks))
        if self.spec.max_jobs_run:
            array += f"%{self.spec.max_jobs_run}"
        return ["--parsable", f"--job-name={files.base}", f"--output={files.output}", "--open-mode=append",
                f"--comment={TAG_PREFIX}{self.tag}", f"--array={array}"]

    def job_id(self, stdout):
        return stdout.strip().split(";")[0]     # "<id>" or "<id>;<cluster>"

    def query(self, job):
        try:
            out = run_command(["squeue", "--noheader", "--array", "--states=all", f"--jobs={job}",
                               f"--Format={SQUEUE_FORMAT}"], "squeue")
        except EngineUnavailable as e:
            if "Invalid job id" in str(e):      # the whole job is older than MinJobAge
                return {}
            raise
        return parse_squeue(out)

    def exit_status(self, job, task, state):
        return super().exit_status(job, task, state or self._completion_record(job, task))

    def _completion_record(self, job, task, tail_bytes=4 << 20):
        try:
            conf = run_command(["scontrol", "show", "config"], "scontrol")
        except EngineUnavailable:
            return None
        where = re.search(r"^JobCompLoc\s*=\s*(\S+)", conf, re.MULTILINE)
        if "jobcomp/filetxt" not in conf or not where:
            return None
        try:
            with open(where.group(1), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - tail_bytes))
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        return parse_jobcomp(text, job).get(task)

    def cancel_command(self, job):
        return ["scancel", job]

    def cancel_task_command(self, job, task):
        return ["scancel", f"{job}_{task}"]

    def find_jobs(self, name, tag):
        return parse_found(run_command(["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%F|%k"],
                                       "squeue"), tag)
