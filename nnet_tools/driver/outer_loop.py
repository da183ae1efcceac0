"""Kaldi's nnet3 outer loop (steps/nnet3/train_dnn.py), as a library.

Stages: -1 the initial model; 0 .. num_iters-1 training iterations; num_iters the final
combination. Each iteration: diagnostics of the current model in the background; J jobs, one
archive each, as one array submission through the launcher; the jobs' models selected (iteration
0: the best one; later: all within 1.0 of the best objective) and averaged, optionally through an
outer optimizer (outer_optim.py); cleanup of old models. Everything runs through programs, so
every step has its log under DIR/log and can be re-run by hand.
"""
import glob
import math
import os
import re
import shlex
import sys
import time

from nnet_tools.data import vectors
from nnet_tools.data.egs import read_info
from nnet_tools.data.textfile import read_text
from nnet_tools.errors import NnetError
from nnet_tools.fileio import check_writable, make_dirs, write_text
from nnet_tools.report import logparse, summary
from nnet_tools.model import config as config_mod, model_io, presoftmax
from nnet_tools.queue import tasklog
from nnet_tools.driver import dropout_schedule, manifest, options, schedule, tree_average
from nnet_tools.driver.exp_lock import ExpLock
from nnet_tools.driver.launcher import LaunchFailed, Launcher
from nnet_tools.train.minibatch import halve

ACCEPT_MARGIN = 1.0  # Kaldi: jobs more than this below the best objective are not averaged
NONFINITE_RE = re.compile(r"non-?finite|not finite", re.I)
TRAINING_FAULT_RE = re.compile(r": minibatch \d+: |" + NONFINITE_RE.pattern, re.I)  # egs that were read, trained on
DISK_FULL_RE = re.compile(r"No space left on device: ")   # fileio.write_error's words, quota or space
MODEL_RE = re.compile(r"(\d+)\.(?:(?:\d+\.)?mdl|outer)")  # N.mdl, the jobs' N.J.mdl, N.outer
# An iteration's logs: train.N.J, select.N, average.N(.J), outer.N (they make N+1.mdl), and
# progress.N, compute_prob_*.N (of N.mdl); then the final combination's.
# (A partitioned dir's log/ also holds the sub-models' own: train_sub.N.J.log and the like.)
ITER_LOG_RE = re.compile(r"(?P<kind>train|select|average|outer|progress|compute_prob_valid|compute_prob_train)"
                         r"\.(?P<n>\d+)(?:\.\d+)?\.log")
FINAL_LOG_RE = re.compile(r"combine\.log|(?:compute_prob_valid|compute_prob_train|progress)\.final\.log")
SHELL_CHARS = re.compile(r"[$`\\|&;<>()*?\[\]{}!'\"]")
RETRY_SRAND_STEP = 1000  # a job that went non-finite is retried with another shuffle and seed


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


def job_command(opts, it, jobs, lrate, processed, model_in, egs_dir, model_out, job="JOB", srand_offset=0,
                data_fraction=0.0):
    """nnet-train-one-job's command line for one iteration; ``lrate`` is the effective rate,
    multiplied by the number of jobs as Kaldi does, which also passes l2-regularize-factor 1/jobs;
    ``data_fraction`` (archives processed / to process) places the dropout schedule."""
    minibatch, max_param_change = iteration_settings(opts, it)
    extra = [f"--l2-regularize-factor={1.0 / jobs:.8g}"]
    if opts.backstitch_scale:
        extra += [f"--backstitch-training-scale={opts.backstitch_scale}",
                  f"--backstitch-training-interval={opts.backstitch_interval}"]
    if opts.proportional_shrink:
        extra.append(f"--scale={schedule.shrink_factor(opts.proportional_shrink, lrate * jobs):.8g}")
    if opts.dropout_schedule:
        extra.append(f"--edits={dropout_schedule.edits(dropout_schedule.parse(opts.dropout_schedule), data_fraction)}")
    return ["nnet-train-one-job", f"--learning-rate={lrate * jobs:.8g}", f"--minibatch-size={minibatch}",
            f"--max-param-change={max_param_change:.8g}", f"--momentum={opts.momentum}",
            f"--shuffle-buffer-size={opts.shuffle_buffer_size}", f"--srand={it + opts.srand + srand_offset}",
            f"--num-threads={opts.num_threads}", f"--use-gpu={opts.use_gpu}",
            f"--job={job}", f"--archives-processed={processed}", *extra,
            *(opts.add_options or []), model_in, egs_dir, model_out]


def job_launcher_opts(opts, max_jobs_run=None):
    gpu = ["--gpu", "1"] if opts.use_gpu != "no" else []
    limit = ["--max-jobs-run", str(max_jobs_run)] if max_jobs_run else []
    return gpu + ["--num-threads", str(opts.num_threads)] + limit


def removable(it, preserve_interval, combine_set):
    """Whether iteration ``it``'s model may be deleted during training (Kaldi keeps every
    preserve-interval'th model and the combination's candidates)."""
    return not schedule.keep_model(it, preserve_interval, combine_set)


def check_dims(where, cfg, egs_dir):
    """The model (config ``cfg``, named ``where``) takes the egs' features and has an output for
    every target in them; not found in every job's log. A hand-made egs dir may lack the info."""
    info = os.path.join(egs_dir, "info")
    if os.path.exists(os.path.join(info, "feat_dim")):
        feat_dim = read_info(egs_dir, "feat_dim")
        if cfg["input-dim"] != feat_dim:
            raise NnetError(f"{where}: input-dim {cfg['input-dim']} does not match the egs' feature dim {feat_dim} "
                            f"({info}/feat_dim)")
    if os.path.exists(os.path.join(info, "output_dim")):
        egs_out, model_out = read_info(egs_dir, "output_dim"), cfg["layers"][-1]["dim"]
        if model_out < egs_out:
            raise NnetError(f"{where}: the output layer's dim {model_out} is less than the egs' output dim {egs_out} "
                            f"({info}/output_dim): targets up to {egs_out - 1}")


def presoftmax_option(opts, egs_dir, dir):
    """With --trainer.presoftmax-prior-scale-power: DIR/presoftmax_prior_scale.vec, computed from the
    egs' class counts, as the ['--presoftmax-prior-scale=VEC'] option of the program making the
    initial model(s); else []."""
    if not opts.presoftmax_prior_scale_power:
        return []
    vec = os.path.join(dir, "presoftmax_prior_scale.vec")
    vectors.write_vector(vec, presoftmax.prior_scale(presoftmax.egs_counts(egs_dir), opts.presoftmax_prior_scale_power))
    return [f"--presoftmax-prior-scale={vec}"]


def _log_is_later(match, stage):
    """Whether an iteration log (ITER_LOG_RE) belongs to what a run starting at ``stage`` redoes."""
    n = int(match["n"])
    return n >= stage if match["kind"] in ("train", "select", "average", "outer") else n > stage


class OuterLoop:
    """One training run in ``dir`` on ``egs_dir``; ``run`` does the stages from ``stage`` on."""

    def __init__(self, opts, egs_dir, dir, launcher=None, name="steps/train_dnn.py", stage_flag="--stage"):
        """``stage_flag``: what the caller's users type for ``run``'s stage, for messages."""
        self.opts, self.egs_dir, self.dir, self.name, self.stage_flag = opts, egs_dir, dir, name, stage_flag
        self.num_archives = read_info(egs_dir, "num_archives")
        self.frames_per_eg = read_info(egs_dir, "frames_per_eg")
        if opts.jobs_final > self.num_archives:
            raise NnetError(f"num-jobs-final {opts.jobs_final} > number of archives {self.num_archives} in {egs_dir}")
        options.check(opts, self.num_archives)
        for flag, path in (("--dir", dir), ("--egs.dir", egs_dir)):
            if SHELL_CHARS.search(path):  # $cmd re-quotes words as Kaldi's run.pl: only whitespace
                raise NnetError(f"{flag} {path!r}: shell characters in a path would be expanded by the task's "
                                f"shell; use a path without them")
        self.num_iters, self.to_process = schedule.num_iters(opts.num_epochs, self.num_archives, self.frames_per_eg,
                                                             opts.jobs_initial, opts.jobs_final)
        if not 1 <= self.num_iters <= options.MAX_ITERATIONS:
            raise NnetError(f"--trainer.num-epochs {opts.num_epochs} gives {self.num_iters} iterations on "
                            f"{self.num_archives} archives of {self.frames_per_eg} frames per eg; need 1 to {options.MAX_ITERATIONS}")
        try:
            make_dirs(os.path.join(dir, "log"))
        except OSError as e:
            raise NnetError(f"{dir}: cannot make the experiment dir: {e.strerror}") from None
        for d in (dir, os.path.join(dir, "log")):   # else every job fails, is retried, and names logs never written
            check_writable(d)
        if opts.dropout_schedule:
            dropout_schedule.parse(opts.dropout_schedule, where="--trainer.dropout-schedule")
        if opts.averaging_fanin < 0 or opts.averaging_fanin == 1:
            raise NnetError(f"--trainer.averaging-fanin must be 0 (one job averages all models) or at least 2, "
                            f"got {opts.averaging_fanin}")
        self.launcher = launcher or Launcher(opts.cmd, os.path.join(dir, "log"), name)
        self.plan = schedule.plan(opts.num_epochs, self.num_archives, self.frames_per_eg, opts.jobs_initial,
                                  opts.jobs_final, opts.initial_lrate, opts.final_lrate, opts.jobs_step)
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
    def run(self, stage=None, exit_stage=None, config=None, input_model=None):
        """stage None: go on where this dir left off (a new dir starts at -1); -1: start over;
        N: Kaldi's --stage N. Holds the dir's lock throughout."""
        self.check_start(stage, config, input_model)
        with ExpLock(self.dir) as lock:
            self.launcher.tick = lock.beat
            remove_stale_temp_files(self.dir)
            stage = self.check_manifest(stage, config, input_model)
            if stage > self.num_iters:
                self.say(f"{self.name}: {self.dir} is complete (final.mdl, accuracy.report); nothing to do")
                return self.path("final.mdl")
            self.check_stage_inputs(stage)  # a stage that cannot start leaves the dir as it was
            self.remove_later_models(stage)
            try:
                return self.stages(stage, exit_stage, config, input_model)
            except NnetError:
                # As in Kaldi, diagnostics already started run to the end, into their logs, and the
                # driver's error stays its last line (a killed task would print after it).
                self.launcher.wait()
                raise

    def check_start(self, stage, config, input_model=None):
        """What can be wrong with the stage, the egs and the initial model, found before any work:
        the combination's egs must be there (not found after the last iteration), an input model
        must be a readable model file, and a model config must parse and take the egs' features
        (not found in init_model.log, or in every job's log for a wrong input-dim)."""
        if stage is not None and stage > self.num_iters:
            raise NnetError(f"{self.stage_flag} {stage} is past this run's last stage, {self.num_iters} (the final combination)")
        if self.opts.do_final_combination and not os.path.isfile(os.path.join(self.egs_dir, "combine.egs")):
            raise NnetError(f"{self.egs_dir}/combine.egs: no such file; the final combination needs it "
                            f"(or --trainer.optimization.do-final-combination false)")
        if stage is not None and stage > -1:
            return
        if input_model:   # stage -1 copies it (a config is then not used)
            check_dims(input_model, model_io.read(input_model, mmap=True)["config"], self.egs_dir)
        elif config:
            check_dims(config, config_mod.load(config), self.egs_dir)

    def check_manifest(self, stage, config, input_model):
        """The stage to start at, after checking this run's settings against the dir's manifest."""
        new = manifest.describe(self.opts, self.egs_dir, self.num_archives, self.frames_per_eg, config, input_model)
        old = None if stage == -1 else manifest.read(self.dir)
        if old is None or not os.path.exists(self.mdl(0)):  # nothing made yet: any settings may start it
            manifest.write(self.dir, new)
            return -1 if stage is None else stage
        diffs = manifest.differences(old, new)
        if diffs:
            raise Refused(f"{self.path(manifest.NAME)}: this dir was started with other settings ("
                          f"{'; '.join(diffs)}); run with {self.stage_flag} -1 to start it over, or use another --dir")
        if stage is not None:
            return stage
        stage = self.resume_point()
        if 0 <= stage <= self.num_iters:
            where = "the final combination" if stage == self.num_iters else f"iteration {stage}"
            self.say(f"{self.name}: resuming at {where} ({self.mdl(stage)} is the newest complete model)")
        return stage

    def remove_later_models(self, stage):
        """Models, outer states and the final model an earlier run made after ``stage``: this
        run makes them again, and until it has, a resume would take the newest of them (or
        final.mdl with accuracy.report: "complete") for its own."""
        later = [name for name in os.listdir(self.dir)
                 if (m := MODEL_RE.fullmatch(name)) and int(m.group(1)) > max(stage, -1)]
        later += [name for name in ("final.mdl", "accuracy.report") if os.path.exists(self.path(name))]
        for name in later:
            os.remove(self.path(name))
        # Their logs too: a run stopped early would otherwise be reported with the earlier run's figures.
        logs = [name for name in os.listdir(self.path("log")) if FINAL_LOG_RE.fullmatch(name) or (
                (m := ITER_LOG_RE.fullmatch(name)) and _log_is_later(m, stage))]
        for name in logs:
            os.remove(os.path.join(self.path("log"), name))
        if later or logs:
            self.say(f"{self.name}: starting at stage {stage}: removed {len(later)} later models and outer states "
                     f"of an earlier run ({', '.join(sorted(later, key=_natural)[:3])}{', ...' if len(later) > 3 else ''}), "
                     f"and {len(logs)} of its logs")

    def resume_point(self):
        """num_iters + 1 if the run is complete; else the newest iteration with a whole model."""
        if os.path.exists(self.path("final.mdl")) and os.path.exists(self.path("accuracy.report")):
            return self.num_iters + 1
        for it in range(self.num_iters, -1, -1):
            if os.path.exists(self.mdl(it)) and self.resumable(it) and whole_model(self.mdl(it), self.warn):
                return it
        return -1

    def resumable(self, it):
        return it < 2 or self.opts.outer_method == "average" or os.path.exists(self.path(f"{it}.outer"))

    def stages(self, stage, exit_stage, config, input_model):
        self.write_srand()
        cmvn_opts = os.path.join(self.egs_dir, "cmvn_opts")
        if os.path.exists(cmvn_opts):  # as Kaldi: decoding reads the CMVN the egs were made with here
            write_text(self.path("cmvn_opts"), read_text(cmvn_opts, "the egs' CMVN options"))
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
            eta = ""
            if done:
                eta = f"   ETA: {format_duration((time.time() - started) / done * (self.num_iters - it))}"
            self.say(f"Iter: {it}/{self.num_iters - 1}   Jobs: {jobs}   Epoch: {processed / self.expanded:.2f}/"
                     f"{self.opts.num_epochs:.1f} ({100.0 * processed / self.to_process:.1f}% complete)   "
                     f"lr: {lrate * jobs:.6f}{eta}")
            earlier = self.launcher.num_started
            self.diagnostics(self.mdl(it), it, self.mdl(it - 1) if it > 0 else None)
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

    def write_srand(self):
        srand_file = self.path("srand")
        if os.path.exists(srand_file) and read_text(srand_file, "the seed").strip() != str(self.opts.srand):
            self.warn(f"--trainer.srand={self.opts.srand} differs from the one used before")
        write_text(srand_file, f"{self.opts.srand}\n")

    def init_model(self, config, input_model):
        if input_model:
            self.launcher.run("init_model.log", ["nnet-average-models", input_model, self.mdl(0)])
        elif config:
            scale = presoftmax_option(self.opts, self.egs_dir, self.dir)
            self.launcher.run("init_model.log", ["nnet-init", f"--srand={self.opts.srand}", *scale, config, self.mdl(0)])
        else:
            raise NnetError("stage -1 needs --config or --trainer.input-model")

    def check_stage_inputs(self, stage):
        """The models stage ``stage`` starts from must exist (cleanup keeps only every
        --cleanup.preserve-interval-th, and final.mdl, once a run is done)."""
        if 0 <= stage < self.num_iters:
            self.check_resumable(stage)
        elif stage == self.num_iters:
            needed = [self.mdl(i) for i in self.combine_set] if self.opts.do_final_combination else [self.mdl(stage)]
            missing = [m for m in needed if not os.path.exists(m)]
            if missing:
                raise NnetError(f"cannot start at the final combination: {len(missing)} of its models do not exist "
                                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")

    def check_resumable(self, it):
        if not os.path.exists(self.mdl(it)):
            raise NnetError(f"cannot resume at iteration {it}: {self.mdl(it)} does not exist")
        if not self.resumable(it):
            raise NnetError(f"cannot resume at iteration {it}: {self.path(f'{it}.outer')} does not exist")

    def diagnostics(self, model, tag, previous=None):
        """compute_prob_{valid,train}.<tag>.log, and progress.<tag>.log: the model's nnet-info (its
        nonlinearity statistics) and its change from the previous model, as Kaldi's driver runs
        ``nnet3-info MODEL && nnet3-show-progress PREV MODEL`` there."""
        # One thread each, as Kaldi's CPU diagnostics: they run beside the training jobs, which
        # own the node's other cores (--trainer.num-threads).
        one = ["--num-threads", "1"]
        for subset in ("valid", "train"):
            self.launcher.start(f"compute_prob_{subset}.{tag}.log",
                                ["nnet-compute-prob", model, os.path.join(self.egs_dir, f"{subset}_diagnostic.egs")],
                                launcher_opts=one)
        if previous:
            self.launcher.start(f"progress.{tag}.log", ["nnet-info", model, "&&", "nnet-show-progress", previous, model],
                                launcher_opts=one)

    def iteration(self, it, jobs, lrate, processed):
        outputs = [self.path(f"{it + 1}.{j}.mdl") for j in range(1, jobs + 1)]
        succeeded = self.train_jobs(it, jobs, lrate, processed)
        objectives = {j: logparse.train_objective(self.path(f"log/train.{it}.{j}.log")) for j in succeeded}
        chosen = [succeeded[k] for k in select(it, [objectives[j] for j in succeeded])]
        if it == 0:
            self.launcher.run("select.0.log", ["nnet-average-models", outputs[chosen[0] - 1], self.mdl(1)])
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

    def train_jobs(self, it, jobs, lrate, processed):
        """Run the iteration's jobs as one array; re-run each failed one alone, up to max-retries
        times (a job that went non-finite with another seed); returns the jobs (1-based) that
        succeeded, when they are enough to go on with."""
        def command(job, srand_offset=0):
            return job_command(self.opts, it, jobs, lrate, processed, self.mdl(it), self.egs_dir,
                               self.path(f"{it + 1}.{job}.mdl"), job=job, srand_offset=srand_offset,
                               data_fraction=processed / self.to_process)
        try:
            self.launcher.run(f"train.{it}.JOB.log", command("JOB"), jobs=jobs, launcher_opts=job_launcher_opts(self.opts))
            return list(range(1, jobs + 1))
        except LaunchFailed:
            pass
        succeeded, nonfinite = [], 0
        for j in range(1, jobs + 1):
            log = self.path(f"log/train.{it}.{j}.log")
            for attempt in range(1, self.opts.max_retries + 2):
                if self.job_done(it, j):
                    succeeded.append(j)
                    break
                went_nonfinite = bool(NONFINITE_RE.search(tasklog.read_tail(log)))
                if attempt > self.opts.max_retries:
                    nonfinite += went_nonfinite
                    break
                kept = f"{log}.failed.{attempt}"
                if os.path.exists(log):
                    os.replace(log, kept)
                self.warn(f"job {j} of iteration {it} failed ({kept}); retry {attempt}/{self.opts.max_retries}"
                          + (" with another seed (it went non-finite)" if went_nonfinite else ""))
                try:
                    self.launcher.run(f"train.{it}.{j}.log", command(j, RETRY_SRAND_STEP * attempt if went_nonfinite else 0),
                                      launcher_opts=job_launcher_opts(self.opts))
                except LaunchFailed:
                    pass
        failed = jobs - len(succeeded)
        if failed == 0:
            return succeeded
        if nonfinite == jobs:
            raise Diverged(f"iteration {it}: every job's objective went non-finite, also after "
                           f"{self.opts.max_retries} retries each (see {self.dir}/log/train.{it}.*.log)")
        for j in sorted(set(range(1, jobs + 1)) - set(succeeded)):
            fault = self.job_error(it, j)
            # A lost node is survived; a bad archive would be left out each time it comes round,
            # and a full disk is no fault of the job's (averaging without it changes the result).
            if fault and fault.startswith(os.path.join(self.egs_dir, "")) and not TRAINING_FAULT_RE.search(fault):
                raise NnetError(f"iteration {it}: job {j} failed on the egs every time: {fault}; the other "
                                f"jobs' models are not averaged without its archive")
            if fault and DISK_FULL_RE.match(fault):
                raise NnetError(f"iteration {it}: job {j} failed every time: {fault}; the other jobs' models are "
                                f"not averaged without it: free some space and resume")
        if len(succeeded) < max(1, self.opts.min_success_fraction * jobs):
            raise NnetError(f"iteration {it}: only {len(succeeded)}/{jobs} jobs succeeded after {self.opts.max_retries} "
                            f"retries each (--trainer.min-success-fraction {self.opts.min_success_fraction}); "
                            f"see {self.dir}/log/train.{it}.*.log")
        self.warn(f"iteration {it}: {failed}/{jobs} jobs failed after {self.opts.max_retries} retries each; "
                  f"using the {len(succeeded)} that succeeded")
        return succeeded

    def job_error(self, it, job):
        """The message of a failed job's last ERROR line, or None."""
        line = tasklog.last_error(self.path(f"log/train.{it}.{job}.log"))
        return line and line.partition(") ")[2]

    def job_done(self, it, job):
        """A job succeeded when its model exists (written atomically, last) and its log says how it did."""
        return (os.path.exists(self.path(f"{it + 1}.{job}.mdl"))
                and logparse.train_objective(self.path(f"log/train.{it}.{job}.log")) is not None)

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
            raise Diverged(f"diverged: valid log-likelihood {value:.6g} per frame at iteration {it}{where} "
                           f"(--trainer.divergence-threshold {self.opts.divergence_threshold:g}); lower the "
                           f"learning rate or max-change and start over with {self.stage_flag} -1")

    def average(self, models, it, jobs):
        if self.opts.outer_method == "average":
            self.average_models(models, it, self.mdl(it + 1))
            return
        averaged = self.path(f"{it + 1}.avg.mdl")
        self.average_models(models, it, averaged)
        opts = self.opts
        self.launcher.run(f"outer.{it}.log", [
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
                             self.path(f"average.{it}"))

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


class NoResume(NnetError):
    """Rerunning the same command would fail the same way, so the drivers offer no resume command."""


class Diverged(NoResume):
    """Training went non-finite or far worse; resuming would do the same again."""


class Refused(NoResume):
    """This command cannot go on in this dir (other settings, a missing input)."""


def whole_model(path, warn):
    """Whether a run may resume from the model at ``path``: a model that does not load is passed
    over with a warning; one it may not read stops the resume, as it is not broken, only hidden,
    and is not to be trained over."""
    if not os.access(path, os.R_OK):
        raise NnetError(f"{path}: cannot resume from it: Permission denied")
    try:
        model_io.read(path)
        return True
    except NnetError as e:
        warn(f"not resuming from {path}: {e}")
        return False


def _natural(name):
    """Sort key: 2.mdl before 10.mdl, numbered names before final.mdl."""
    m = re.match(r"\d+", name)
    return (0, int(m.group()), name) if m else (1, 0, name)


def remove_stale_temp_files(dir):
    """Temp files of atomic writers killed in an earlier run (we hold the dir's lock now)."""
    for tmp in glob.glob(os.path.join(dir, ".tmp.*")) + glob.glob(os.path.join(dir, "log", ".tmp.*")):
        try:
            os.remove(tmp)
        except OSError:
            pass


def resume_command(argv=None, drop=("--stage",), add=()):
    """The driver's command line without --stage (the options in ``drop``), which resumes where
    the dir left off; ``add``: words put after the program's name."""
    argv, out, skip = list(argv or sys.argv), [], False
    for a in argv:
        if skip:
            skip = False
        elif a in drop:
            skip = True
        elif a.split("=", 1)[0] not in drop:
            out.append(a)
    return command_line(out[:1] + list(add) + out[1:])


def format_duration(seconds):
    """H:MM:SS, hours unbounded (time.gmtime would wrap at 24 h)."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def command_line(argv=None):
    return " ".join(shlex.quote(a) for a in (argv or sys.argv))
