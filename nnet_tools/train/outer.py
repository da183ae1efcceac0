"""Kaldi's nnet3 outer loop (steps/nnet3/train_dnn.py), as a library.

Stages: -1 the initial model; 0 .. num_iters-1 training iterations; num_iters the final
combination. Each iteration: diagnostics of the current model in the background; J jobs, one
archive each, as one array submission through the launcher; the jobs' models selected (iteration
0: the best one; later: all within 1.0 of the best objective) and averaged, optionally through an
outer optimizer (outer_optim.py); cleanup of old models. Everything runs through programs, so
every step has its log under DIR/log and can be re-run by hand.
"""
import math
import os
import shlex
import sys
import time

from nnet_tools.data.egs import read_info
from nnet_tools.errors import NnetError
from nnet_tools.fileio import write_text
from nnet_tools.report import logparse, summary
from nnet_tools.train import schedule
from nnet_tools.train.launcher import Launcher
from nnet_tools.train.minibatch import halve

ACCEPT_MARGIN = 1.0  # Kaldi: jobs more than this below the best objective are not averaged


def select(it, objectives):
    """Indices of the jobs whose models make the next model: the best one on iteration 0 (a
    random start: averaging would blur the models), else every job within ACCEPT_MARGIN of it."""
    best = max(range(len(objectives)), key=lambda j: objectives[j])
    if it == 0:
        return [best]
    return [j for j, o in enumerate(objectives) if o >= objectives[best] - ACCEPT_MARGIN]


def iteration_settings(opts, it):
    """(minibatch size, max-param-change): Kaldi halves both (the latter by sqrt 2) on iteration 0."""
    if it == 0:
        return halve(opts.minibatch_size), opts.max_param_change / math.sqrt(2)
    return opts.minibatch_size, opts.max_param_change


def job_command(opts, it, jobs, lrate, processed, model_in, egs_dir, model_out, job="JOB"):
    """nnet-train-one-job's command line for one iteration; ``lrate`` is the effective rate,
    multiplied by the number of jobs as Kaldi does."""
    minibatch, max_param_change = iteration_settings(opts, it)
    return ["nnet-train-one-job", f"--learning-rate={lrate * jobs:.8g}", f"--minibatch-size={minibatch}",
            f"--max-param-change={max_param_change:.8g}", f"--momentum={opts.momentum}",
            f"--shuffle-buffer-size={opts.shuffle_buffer_size}", f"--srand={it + opts.srand}",
            f"--num-threads={opts.num_threads}", f"--use-gpu={opts.use_gpu}",
            f"--job={job}", f"--archives-processed={processed}",
            *(opts.add_options or []), model_in, egs_dir, model_out]


def job_launcher_opts(opts, max_jobs_run=None):
    gpu = ["--gpu", "1"] if opts.use_gpu != "no" else []
    limit = ["--max-jobs-run", str(max_jobs_run)] if max_jobs_run else []
    return gpu + ["--num-threads", str(opts.num_threads)] + limit


def removable(it, preserve_interval, combine_set):
    """Whether iteration ``it``'s model may be deleted during training (Kaldi keeps every
    preserve-interval'th model and the combination's candidates)."""
    return not schedule.keep_model(it, preserve_interval, combine_set)


class OuterLoop:
    """One training run in ``dir`` on ``egs_dir``; ``run`` does the stages from ``stage`` on."""

    def __init__(self, opts, egs_dir, dir, launcher=None, name="steps/train_dnn.py"):
        self.opts, self.egs_dir, self.dir, self.name = opts, egs_dir, dir, name
        self.num_archives = read_info(egs_dir, "num_archives")
        self.frames_per_eg = read_info(egs_dir, "frames_per_eg")
        if opts.jobs_final > self.num_archives:
            raise NnetError(f"num-jobs-final {opts.jobs_final} > number of archives {self.num_archives} in {egs_dir}")
        os.makedirs(os.path.join(dir, "log"), exist_ok=True)
        self.launcher = launcher or Launcher(opts.cmd, os.path.join(dir, "log"), name)
        self.plan = schedule.plan(opts.num_epochs, self.num_archives, self.frames_per_eg, opts.jobs_initial,
                                  opts.jobs_final, opts.initial_lrate, opts.final_lrate, opts.jobs_step)
        self.num_iters, self.to_process = schedule.num_iters(opts.num_epochs, self.num_archives, self.frames_per_eg,
                                                             opts.jobs_initial, opts.jobs_final)
        self.expanded = self.num_archives * self.frames_per_eg
        self.combine_set = schedule.combine_iters(self.num_iters, self.expanded, opts.jobs_final,
                                                  opts.max_models_combine)

    def path(self, name):
        return os.path.join(self.dir, name)

    def mdl(self, it):
        return self.path(f"{it}.mdl")

    def say(self, text):
        print(text, flush=True)

    def warn(self, text):
        print(f"{self.name}: WARNING: {text}", file=sys.stderr, flush=True)

    # -- stages ---------------------------------------------------------------------------------
    def run(self, stage=-1, exit_stage=None, config=None, input_model=None):
        self.write_srand()
        if stage <= -1:
            self.init_model(config, input_model)
        self.say(f"{self.name}: will train for {self.opts.num_epochs} epochs = {self.num_iters} iterations")
        started, done = time.time(), 0
        for it, jobs, lrate, processed in self.plan:
            if exit_stage is not None and it == exit_stage:
                self.say(f"{self.name}: exiting before iteration {it} (--exit-stage)")
                self.launcher.wait()
                return None
            if it < stage:
                continue
            self.check_resumable(it)
            eta = ""
            if done:
                eta = f"   ETA: {format_duration((time.time() - started) / done * (self.num_iters - it))}"
            self.say(f"Iter: {it}/{self.num_iters - 1}   Jobs: {jobs}   Epoch: {processed / self.expanded:.2f}/"
                     f"{self.opts.num_epochs:.1f} ({100.0 * processed / self.to_process:.1f}% complete)   "
                     f"lr: {lrate * jobs:.6f}{eta}")
            self.diagnostics(self.mdl(it), it, self.mdl(it - 1) if it > 0 else None)
            self.iteration(it, jobs, lrate, processed)
            done += 1
            self.cleanup_during(it)
        final = self.path("final.mdl")
        if stage <= self.num_iters:
            self.combine(final)
        self.launcher.wait()
        self.cleanup_after()
        write_text(self.path("accuracy.report"), summary.accuracy_report(self.dir))
        self.say(summary.dir_info(self.dir))
        self.say(f"{self.name}: done; final model {final}")
        return final

    def write_srand(self):
        srand_file = self.path("srand")
        if os.path.exists(srand_file) and open(srand_file).read().strip() != str(self.opts.srand):
            self.warn(f"--trainer.srand={self.opts.srand} differs from the one used before")
        write_text(srand_file, f"{self.opts.srand}\n")

    def init_model(self, config, input_model):
        if input_model:
            self.launcher.run("init_model.log", ["nnet-average-models", input_model, self.mdl(0)])
        elif config:
            self.launcher.run("init_model.log", ["nnet-init", f"--srand={self.opts.srand}", config, self.mdl(0)])
        else:
            raise NnetError("stage -1 needs --config or --trainer.input-model")

    def check_resumable(self, it):
        if not os.path.exists(self.mdl(it)):
            raise NnetError(f"cannot resume at iteration {it}: {self.mdl(it)} does not exist")
        if it >= 2 and self.opts.outer_method != "average" and not os.path.exists(self.path(f"{it}.outer")):
            raise NnetError(f"cannot resume at iteration {it}: {self.path(f'{it}.outer')} does not exist")

    def diagnostics(self, model, tag, previous=None):
        """compute_prob_{valid,train}.<tag>.log, and progress.<tag>.log against the previous model."""
        for subset in ("valid", "train"):
            self.launcher.start(f"compute_prob_{subset}.{tag}.log",
                                ["nnet-compute-prob", model, os.path.join(self.egs_dir, f"{subset}_diagnostic.egs")])
        if previous:
            self.launcher.start(f"progress.{tag}.log", ["nnet-show-progress", previous, model])

    def iteration(self, it, jobs, lrate, processed):
        outputs = [self.path(f"{it + 1}.{j}.mdl") for j in range(1, jobs + 1)]
        self.launcher.run(f"train.{it}.JOB.log",
                          job_command(self.opts, it, jobs, lrate, processed, self.mdl(it), self.egs_dir,
                                      self.path(f"{it + 1}.JOB.mdl")),
                          jobs=jobs, launcher_opts=job_launcher_opts(self.opts))
        objectives = [logparse.train_objective(self.path(f"log/train.{it}.{j}.log")) for j in range(1, jobs + 1)]
        chosen = select(it, objectives)
        if it == 0:
            self.launcher.run("select.0.log", ["nnet-average-models", outputs[chosen[0]], self.mdl(1)])
        else:
            if len(chosen) < jobs:
                self.warn(f"Only {len(chosen)}/{jobs} of the models have been accepted for averaging, "
                          f"based on log files {self.dir}/log/train.{it}.*.log")
            self.average([outputs[j] for j in chosen], it, jobs)
        for o in outputs:
            os.remove(o)
        if not os.path.getsize(self.mdl(it + 1)):
            raise NnetError(f"{self.mdl(it + 1)} is empty")

    def average(self, models, it, jobs):
        if self.opts.outer_method == "average":
            self.launcher.run(f"average.{it}.log", ["nnet-average-models", *models, self.mdl(it + 1)])
            return
        averaged = self.path(f"{it + 1}.avg.mdl")
        self.launcher.run(f"average.{it}.log", ["nnet-average-models", *models, averaged])
        opts = self.opts
        self.launcher.run(f"outer.{it}.log", [
            "nnet-outer-step", f"--method={opts.outer_method}", f"--jobs={jobs}",
            *([f"--momentum={opts.outer_momentum}"] if opts.outer_momentum is not None else []),
            *([f"--learning-rate={opts.outer_learning_rate}"] if opts.outer_learning_rate is not None else []),
            "--nesterov" if opts.outer_nesterov else "--no-nesterov",
            *([f"--state-in={self.path(f'{it}.outer')}"] if it >= 2 else []),
            f"--state-out={self.path(f'{it + 1}.outer')}", self.mdl(it), averaged, self.mdl(it + 1)])
        os.remove(averaged)

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
        old = it - 1  # the outer state of iteration it-1 is not needed once it+1's exists
        if old >= 1 and os.path.exists(self.path(f"{old}.outer")):
            os.remove(self.path(f"{old}.outer"))
        if self.opts.cleanup and it >= 2 and removable(it - 2, self.opts.preserve_interval, self.combine_set):
            if os.path.exists(self.mdl(it - 2)):
                os.remove(self.mdl(it - 2))

    def cleanup_after(self):
        if not self.opts.cleanup:
            return
        for i in range(self.num_iters):
            if i % self.opts.preserve_interval and os.path.exists(self.mdl(i)):
                os.remove(self.mdl(i))


def format_duration(seconds):
    """H:MM:SS, hours unbounded (time.gmtime would wrap at 24 h)."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def command_line(argv=None):
    return " ".join(shlex.quote(a) for a in (argv or sys.argv))
