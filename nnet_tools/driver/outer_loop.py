"""Kaldi's nnet3 outer loop (steps/nnet3/train_dnn.py), as a library.

Stages: -1 the initial model; 0 .. num_iters-1 training iterations; num_iters the final
combination. ``OuterLoop.stages`` runs them in Kaldi's order, on one screen. Everything runs
through programs, so every step has its log under DIR/log and can be re-run by hand. Where a
rerun goes on is resume.py's; what a failed job gets, retry.py's; the command lines,
commands.py's.
"""
import math
import os
import shutil
import sys
import time

from nnet_tools.data.egs import read_info
from nnet_tools.data.textfile import read_text
from nnet_tools.driver import commands, preflight, resume, schedule, tree_average
from nnet_tools.driver.exp_lock import ExpLock
from nnet_tools.driver.launcher import InProcessLauncher, Launcher
from nnet_tools.driver.retry import TrainingJobs
from nnet_tools.errors import NnetError
from nnet_tools.fileio import copy_file, write_text
from nnet_tools.queue import tasklog
from nnet_tools.report import logparse, summary

ACCEPT_MARGIN = 1.0  # Kaldi: jobs more than this below the best objective are not averaged
DIAGNOSTIC_WAIT = 10.0  # the diagnostics' --max-wait, in training jobs' stall limits


def select(it, objectives):
    """Indices of the jobs whose models make the next model: the best one on iteration 0 (a
    random start: averaging would blur the models), else every job within ACCEPT_MARGIN of it."""
    best = max(range(len(objectives)), key=lambda j: objectives[j])
    if it == 0:
        return [best]
    return [j for j, o in enumerate(objectives) if o >= objectives[best] - ACCEPT_MARGIN]


def removable(it, preserve_interval, combine_set):
    """Whether iteration ``it``'s model may be deleted during training (Kaldi keeps every
    preserve-interval'th model and the combination's candidates)."""
    return not schedule.keep_model(it, preserve_interval, combine_set)


class OuterLoop:
    """One training run in ``dir`` on ``egs_dir``; ``run`` does the stages from ``stage`` on."""

    def __init__(self, opts, egs_dir, dir, launcher=None, name="steps/train_dnn.py", stage_flag="--stage"):
        """``stage_flag``: what the caller's users type for ``run``'s stage, for messages."""
        self.opts, self.egs_dir, self.dir, self.name, self.stage_flag = opts, egs_dir, dir, name, stage_flag
        self.num_archives = read_info(egs_dir, "num_archives")
        # The schedule's unit: an archive at one label position, or with chunk training a whole archive.
        self.frames_per_eg = schedule.passes_per_archive(opts.chunk_training, read_info(egs_dir, "frames_per_eg"))
        self.launcher = launcher or Launcher(opts.cmd, os.path.join(dir, "log"), name)   # checks --cmd
        self.num_iters, self.to_process, self.made = preflight.check_run(opts, egs_dir, dir, self.num_archives,
                                                                          self.frames_per_eg)
        # What makes each next model (select, average, outer step): light work on files the jobs
        # wrote; in this process unless asked otherwise or a caller's launcher runs everything.
        self.merger = (InProcessLauncher(os.path.join(dir, "log"), name)
                       if opts.average_in_driver and launcher is None else self.launcher)
        self.jobs = TrainingJobs(self.launcher, opts, dir, egs_dir, self.warn)
        self.stall = commands.stall_limit(opts, dir, 0)   # the jobs' stall limit, set each iteration
        self.plan = schedule.plan(opts.num_epochs, self.num_archives, self.frames_per_eg, opts.jobs_initial,
                                  opts.jobs_final, opts.initial_lrate, opts.final_lrate, opts.jobs_step)
        self.expanded = self.num_archives * self.frames_per_eg
        self.combine_set = schedule.combine_iters(self.num_iters, self.expanded, opts.jobs_final,
                                                  opts.max_models_combine)
        self.outer_method = opts.outer_method
        if (opts.outer_method == "bmuf" and opts.jobs_initial == opts.jobs_final == 1
                and opts.outer_momentum in (None, 0) and opts.outer_learning_rate in (None, 1)):
            self.outer_method = "average"   # bmuf's step on one job's model is that model: Kaldi's loop

    def path(self, name):
        return os.path.join(self.dir, name)

    def mdl(self, it):
        return self.path(f"{it}.mdl")

    def say(self, text):
        print(text, flush=True)

    def warn(self, text):
        print(f"{self.name}: WARNING: {text}", file=sys.stderr, flush=True)

    def run(self, stage=None, exit_stage=None, config=None, input_model=None):
        """stage None: go on where this dir left off (a new dir starts at -1); -1: start over;
        N: Kaldi's --stage N. Holds the dir's lock throughout."""
        self.check_start(stage, config, input_model)
        with ExpLock(self.dir) as lock:
            self.launcher.tick = lock.beat
            resume.remove_stale_temp_files(self.dir)
            stage = resume.start_stage(self, stage, config, input_model)
            if stage > self.num_iters:
                self.say(f"{self.name}: {self.dir} is complete (final.mdl, accuracy.report); nothing to do")
                return self.path("final.mdl")
            try:
                return self.stages(stage, exit_stage, config, input_model)
            except NnetError:
                # As in Kaldi, diagnostics already started run to the end, into their logs, and the
                # driver's error stays its last line (a killed task would print after it).
                self.launcher.wait()
                raise

    def stages(self, stage, exit_stage, config, input_model):
        """The run from ``stage`` on, in Kaldi's order."""
        self.write_srand()
        self.copy_cmvn_opts()
        if stage <= -1:
            self.init_model(config, input_model)
            resume.record_run_model(self)
        self.say(f"{self.name}: will train for {self.opts.num_epochs} epochs = {self.num_iters} iterations")
        self.rerun_lost_diagnostics(min(stage, self.num_iters))
        started, done = time.time(), 0
        for it, jobs, lrate, processed in self.plan:
            if exit_stage is not None and it == exit_stage:
                self.say(f"{self.name}: exiting before iteration {it} (--exit-stage)")
                self.launcher.wait()
                return None
            if it < stage:
                continue
            eta = f"   ETA: {format_duration((time.time() - started) / done * (self.num_iters - it))}" if done else ""
            self.say(f"Iter: {it}/{self.num_iters - 1}   Jobs: {jobs}   Epoch: {processed / self.expanded:.2f}/"
                     f"{self.opts.num_epochs:.1f} ({100.0 * processed / self.to_process:.1f}% complete)   "
                     f"lr: {lrate * jobs:.6f}{eta}")
            earlier = self.launcher.num_started
            self.diagnostics(self.mdl(it), it, self.mdl(it - 1) if it > 0 else None)  # in the background
            self.iteration(it, jobs, lrate, processed)
            done += 1
            # The previous iteration's diagnostics read the model cleanup_during removes; on a busy
            # node they can still be running (nnet-show-progress then found no model).
            self.launcher.wait(upto=earlier)
            self.cleanup_during(it)
            self.check_divergence(it)
        final = self.path("final.mdl")
        if stage <= self.num_iters:
            self.combine(final)
        self.launcher.wait()
        self.check_divergence(self.num_iters)
        self.cleanup_after()
        write_text(self.path("accuracy.report"), summary.accuracy_report(self.dir))
        self.say(summary.dir_info(self.dir))
        self.say(f"{self.name}: done; final model {final}")
        return final

    def iteration(self, it, jobs, lrate, processed):
        """Iteration ``it``: its jobs (retried as retry.py says), the ones to keep (select), and
        the next model: the best job's on iteration 0, else their average."""
        def command(job, srand_offset):
            return commands.job_command(self.opts, it, jobs, lrate, processed, self.mdl(it), self.egs_dir,
                                        self.path(f"{it + 1}.{job}.mdl"), job=job, srand_offset=srand_offset,
                                        data_fraction=processed / self.to_process)
        outputs = [self.path(f"{it + 1}.{j}.mdl") for j in range(1, jobs + 1)]
        launcher_opts = commands.job_launcher_opts(self.opts) + self.stall_opts(it)
        succeeded = self.jobs.run(it, jobs, command, launcher_opts, self.mdl(it))
        objectives = {j: logparse.train_objective(self.jobs.log(it, j)) for j in succeeded}
        chosen = [succeeded[k] for k in select(it, [objectives[j] for j in succeeded])]
        if it == 0:
            self.merger.run("select.0.log", ["nnet-average-models", outputs[chosen[0] - 1], self.mdl(1)])
        else:
            if len(chosen) < len(succeeded):
                self.warn(f"Only {len(chosen)}/{len(succeeded)} of the models have been accepted for averaging, "
                          f"based on log files {self.dir}/log/train.{it}.*.log")
            self.average([outputs[j - 1] for j in chosen], it, jobs)
        for o in outputs:
            if os.path.exists(o):
                os.remove(o)
        if not os.path.getsize(self.mdl(it + 1)):
            raise NnetError(f"{self.mdl(it + 1)} is empty")

    def check_start(self, stage, config, input_model=None):
        try:
            preflight.check_start(self.opts, self.egs_dir, self.num_iters, self.stage_flag, stage, config, input_model)
        except NnetError:
            if self.made:   # refused before any work: leave no empty dir behind
                shutil.rmtree(self.made, ignore_errors=True)
                self.made = None
            raise

    # -- the stages' parts -----------------------------------------------------------------------
    def resumable(self, it):
        """Whether iteration ``it`` can start from what the dir holds (its outer optimizer's state)."""
        return it < 2 or self.outer_method == "average" or os.path.exists(self.path(f"{it}.outer"))

    def write_srand(self):
        srand_file = self.path("srand")
        if os.path.exists(srand_file) and read_text(srand_file, "the seed").strip() != str(self.opts.srand):
            self.warn(f"--trainer.srand={self.opts.srand} differs from the one used before")
        write_text(srand_file, f"{self.opts.srand}\n")

    def copy_cmvn_opts(self):
        """As Kaldi's copy_egs_properties_to_exp_dir: decoding reads here the CMVN the egs were
        made with (cmvn_opts; global_cmvn.stats for online or global CMVN, online_cmvn for online)."""
        for name in ("cmvn_opts", "online_cmvn", "global_cmvn.stats"):
            source, dest = os.path.join(self.egs_dir, name), self.path(name)
            if os.path.exists(source):
                copy_file(source, dest)
            elif name != "cmvn_opts" and os.path.exists(dest):
                os.unlink(dest)   # an earlier run's, from egs made with other CMVN

    def init_model(self, config, input_model):
        if input_model:
            self.launcher.run("init_model.log", ["nnet-average-models", input_model, self.mdl(0)])
        elif config:
            scale = commands.presoftmax_option(self.opts, self.egs_dir, self.dir)
            self.launcher.run("init_model.log", ["nnet-init", f"--srand={self.opts.srand}", *scale, config, self.mdl(0)])
        else:
            raise NnetError("stage -1 needs --config or --trainer.input-model")

    def diagnostics(self, model, tag, previous=None):
        """compute_prob_{valid,train}.<tag>.log, and progress.<tag>.log: the model's nnet-info (its
        nonlinearity statistics) and its change from the previous model, as Kaldi's driver runs
        ``nnet3-info MODEL && nnet3-show-progress PREV MODEL`` there."""
        # One thread each, as Kaldi's CPU diagnostics: they run beside the training jobs, which
        # own the node's other cores (--trainer.num-threads).
        one = ["--num-threads", "1"] + self.diagnostic_limits()
        for subset in ("valid", "train"):
            self.launcher.start(f"compute_prob_{subset}.{tag}.log",
                                ["nnet-compute-prob", model, os.path.join(self.egs_dir, f"{subset}_diagnostic.egs")],
                                launcher_opts=one)
        if previous:
            self.launcher.start(f"progress.{tag}.log", ["nnet-info", model, "&&", "nnet-show-progress", previous, model],
                                launcher_opts=one)

    def rerun_lost_diagnostics(self, stage):
        """Diagnostics of the iterations before ``stage`` that did not finish (stopped by a Ctrl-C
        or their --max-wait, while the next iteration trained) run again, in the background, where
        their model is still there: the report and the divergence check keep every iteration."""
        for it in range(stage):
            logs = [self.path(f"log/compute_prob_{s}.{it}.log") for s in ("valid", "train")]
            if all(tasklog.ended_code(log) == 0 for log in logs) or not os.path.exists(self.mdl(it)):
                continue
            self.say(f"{self.name}: running iteration {it}'s diagnostics again (they did not finish)")
            previous = self.mdl(it - 1) if it > 0 and os.path.exists(self.mdl(it - 1)) else None
            self.diagnostics(self.mdl(it), it, previous)

    def stall_opts(self, it):
        """nnet-queue's --stall-limit for iteration ``it``'s jobs (Kaldi's run.pl and queue.pl have
        no such option: there a stalled job is waited for)."""
        self.stall = commands.stall_limit(self.opts, self.dir, it)
        return ["--stall-limit", f"{self.stall:g}"] if self.launcher.is_nnet_queue else []

    def diagnostic_limits(self):
        """The diagnostics' own limits: they write one line at their end, so no stall limit, and a
        --max-wait of DIAGNOSTIC_WAIT x the jobs' stall limit (not $cmd's, which is for the jobs)."""
        if not self.launcher.is_nnet_queue:
            return []
        return ["--stall-limit", "0", "--max-wait", f"{DIAGNOSTIC_WAIT * self.stall:g}"]

    def check_divergence(self, upto):
        """Stop when the newest valid log-likelihood is non-finite or far below the best so far."""
        if not self.opts.divergence_threshold:
            return
        best = latest = None
        for it in range(upto + 1):
            value = logparse.compute_prob(self.path(f"log/compute_prob_valid.{it}.log")).get("log-likelihood")
            if value is None:
                continue
            latest = (it, value)
            if math.isfinite(value) and (best is None or value > best[1]):
                best = (it, value)
        if latest is None:
            return
        it, value = latest
        if not math.isfinite(value) or (best and value < best[1] - self.opts.divergence_threshold):
            where = f"; best {best[1]:.6g} at iteration {best[0]}" if best else ""
            raise resume.Diverged(f"diverged: valid log-likelihood {value:.6g} per frame at iteration {it}{where} "
                                  f"(--trainer.divergence-threshold {self.opts.divergence_threshold:g}); lower the "
                                  f"learning rate or max-change and start over with {self.stage_flag} -1")

    def average(self, models, it, jobs):
        """The chosen jobs' models averaged into IT+1.mdl, through the outer optimizer if any."""
        if self.outer_method == "average":
            self.average_models(models, it, self.mdl(it + 1))
            return
        averaged = self.path(f"{it + 1}.avg.mdl")
        self.average_models(models, it, averaged)
        opts = self.opts
        self.merger.run(f"outer.{it}.log", [
            "nnet-outer-step", f"--method={opts.outer_method}", f"--jobs={jobs}",
            *([f"--momentum={opts.outer_momentum}"] if opts.outer_momentum is not None else []),
            *([f"--learning-rate={opts.outer_learning_rate}"] if opts.outer_learning_rate is not None else []),
            "--nesterov" if opts.outer_nesterov else "--no-nesterov",
            *([f"--state-in={self.path(f'{it}.outer')}"] if it >= 2 else []),
            f"--state-out={self.path(f'{it + 1}.outer')}", self.mdl(it), averaged, self.mdl(it + 1)])
        os.remove(averaged)

    def average_models(self, models, it, out):
        """One nnet-average-models job, or with --trainer.averaging-fanin K < len(models) a tree."""
        tree_average.average(self.launcher, models, out, f"average.{it}.log", self.opts.averaging_fanin,
                             self.path(f"average.{it}"), self.merger)

    def combine(self, final):
        iters = self.num_iters
        self.diagnostics(self.mdl(iters), iters, self.mdl(iters - 1))
        if self.opts.do_final_combination:
            models = [self.mdl(i) for i in reversed(self.combine_set)]  # newest first
            self.launcher.run("combine.log", [
                "nnet-combine", f"--max-objective-evaluations={self.opts.max_objective_evaluations}",
                f"--use-gpu={self.opts.use_gpu}", *models, os.path.join(self.egs_dir, "combine.egs"), final])
        else:
            self.launcher.run("combine.log", ["nnet-average-models", self.mdl(iters), final])
        self.diagnostics(final, "final")

    def cleanup_during(self, it):
        # A model's outer-optimizer state goes with it: --stage I needs both I.mdl and I.outer.
        if self.opts.cleanup and it >= 2 and removable(it - 2, self.opts.preserve_interval, self.combine_set):
            self.remove_iteration(it - 2)

    def cleanup_after(self):
        if not self.opts.cleanup:
            return
        for i in range(self.num_iters):
            if i % self.opts.preserve_interval:
                self.remove_iteration(i)

    def remove_iteration(self, i):
        for path in (self.mdl(i), self.path(f"{i}.outer")):
            if os.path.exists(path):
                os.remove(path)


def format_duration(seconds):
    """H:MM:SS, hours unbounded (time.gmtime would wrap at 24 h)."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
