"""The retry policy for an iteration's training jobs: the jobs run as one array; each one that
failed is re-run alone, up to --trainer.max-retries times (one that went non-finite with another
seed), unless its failure is one a retry cannot change (the input model does not load, the egs
do not fit the model: the run stops at once); then the iteration goes on with the jobs that succeeded, if they are enough
(--trainer.min-success-fraction), unless a failure was the egs' or a full disk's, which another
job's model cannot stand in for.
"""
import os
import re

from nnet_tools.driver.launcher import LaunchFailed
from nnet_tools.driver.resume import Diverged
from nnet_tools.errors import NnetError
from nnet_tools.fileio import disk_full
from nnet_tools.queue import tasklog
from nnet_tools.report import logparse

NONFINITE_RE = re.compile(r"non-?finite|not finite", re.I)
TRAINING_FAULT_RE = re.compile(r": minibatch \d+: |" + NONFINITE_RE.pattern, re.I)  # egs that were read, trained on
DISK_FULL_RE = re.compile(r"No space left on device: ")   # fileio.write_error's words, quota or space
# What the same inputs give on every retry (nnet-train-one-job's checks of the egs against the model).
PERMANENT_RE = re.compile(r"egs context \(.*\) is smaller than the model's|feature dim \d+ does not match the "
                          r"model's|target id -?\d+ >= model output dim")
STALLED_RE = re.compile(r"stalled: (its log did not grow for \S+ s) \(--stall-limit\)")  # nnet-queue's note
RETRY_SRAND_STEP = 1000  # a job that went non-finite is retried with another shuffle and seed


class TrainingJobs:
    """The training jobs of the iterations of the run in ``dir``; logs DIR/log/train.IT.JOB.log,
    models DIR/IT+1.JOB.mdl."""

    def __init__(self, launcher, opts, dir, egs_dir, warn):
        self.launcher, self.opts, self.dir, self.egs_dir, self.warn = launcher, opts, dir, egs_dir, warn

    def log(self, it, job):
        return os.path.join(self.dir, "log", f"train.{it}.{job}.log")

    def run(self, it, jobs, command, launcher_opts, model_in):
        """Run iteration ``it``'s jobs (``command(job, srand_offset)`` is one's command line, and
        ``model_in`` the model they all read); returns the jobs (1-based) that succeeded, when
        they are enough to go on with."""
        try:
            self.launcher.run(f"train.{it}.JOB.log", command("JOB", 0), jobs=jobs, launcher_opts=launcher_opts)
            return list(range(1, jobs + 1))
        except LaunchFailed:
            pass
        succeeded, nonfinite = [], 0
        retries = self.opts.max_retries
        for j in range(1, jobs + 1):
            log = self.log(it, j)
            for attempt in range(1, retries + 2):
                if self.done(it, j):
                    succeeded.append(j)
                    break
                tail = tasklog.read_tail(log)
                went_nonfinite, stalled = bool(NONFINITE_RE.search(tail)), STALLED_RE.search(tail)
                fault = self.error(it, j)
                if fault and (fault.startswith(f"{model_in}: ") or PERMANENT_RE.search(fault)):
                    raise NnetError(f"iteration {it}: job {j} failed: {fault} (not retried: the same inputs "
                                    f"would fail the same way; see {log})")
                if attempt > retries:
                    nonfinite += went_nonfinite
                    break
                kept = f"{log}.failed.{attempt}"
                if os.path.exists(log):
                    os.replace(log, kept)
                what = f"stalled ({stalled[1]}) and was stopped" if stalled else "failed"
                self.warn(f"job {j} of iteration {it} {what} ({kept}); retry {attempt}/{retries}"
                          + (" with another seed (it went non-finite)" if went_nonfinite else ""))
                try:
                    self.launcher.run(f"train.{it}.{j}.log", command(j, RETRY_SRAND_STEP * attempt if went_nonfinite else 0),
                                      launcher_opts=launcher_opts)
                except LaunchFailed:
                    pass
        failed = jobs - len(succeeded)
        if failed == 0:
            return succeeded
        if nonfinite == jobs:
            raise Diverged(f"iteration {it}: every job's objective went non-finite, also after "
                           f"{retries} retries each (see {self.dir}/log/train.{it}.*.log)")
        for j in sorted(set(range(1, jobs + 1)) - set(succeeded)):
            fault = self.error(it, j)
            # A lost node is survived; a bad archive would be left out each time it comes round,
            # and a full disk is no fault of the job's (averaging without it changes the result).
            if fault and fault.startswith(os.path.join(self.egs_dir, "")) and not TRAINING_FAULT_RE.search(fault):
                raise NnetError(f"iteration {it}: job {j} failed on the egs every time: {fault}; the other "
                                f"jobs' models are not averaged without its archive")
            if fault and DISK_FULL_RE.match(fault):
                raise NnetError(f"iteration {it}: job {j} failed every time: {fault}; the other jobs' models are "
                                f"not averaged without it: free some space and resume")
        if len(succeeded) < max(1, self.opts.min_success_fraction * jobs):
            raise NnetError(f"iteration {it}: only {len(succeeded)}/{jobs} jobs succeeded after {retries} "
                            f"retries each (--trainer.min-success-fraction {self.opts.min_success_fraction}); "
                            f"see {self.dir}/log/train.{it}.*.log")
        self.warn(f"iteration {it}: {failed}/{jobs} jobs failed after {retries} retries each; "
                  f"using the {len(succeeded)} that succeeded")
        return succeeded

    def error(self, it, job):
        """The message of a failed job's last ERROR line; a full disk's when the disk the log is
        on is full and the log holds no ERROR line (the job could not write it); else None."""
        log = self.log(it, job)
        line = tasklog.last_error(log)
        if line:
            return line.partition(") ")[2]
        return f"No space left on device: {os.path.dirname(log)} (its log has no ERROR line)" if disk_full(log) else None

    def done(self, it, job):
        """A job succeeded when its model exists (written atomically, last) and its log says how it did."""
        return (os.path.exists(os.path.join(self.dir, f"{it + 1}.{job}.mdl"))
                and logparse.train_objective(self.log(it, job)) is not None)
