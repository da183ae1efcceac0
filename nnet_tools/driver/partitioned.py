"""Partition pre-training's stages (Miranda & Von Zuben 2015): split, train the sub-models, merge,
train the full model with the outer loop. steps/train_partitioned.py parses options and calls
``run``; the file layout is documented there.
"""
import argparse
import dataclasses
import math
import os
import shlex
import shutil
import sys

from nnet_tools.data.egs import read_info
from nnet_tools.errors import NnetError
from nnet_tools.fileio import copy_file, make_dirs, write_text
from nnet_tools.model import config as config_mod
from nnet_tools.driver import commands, manifest, options, outer_loop, preflight, resume, schedule
from nnet_tools.driver.exp_lock import ExpLock
from nnet_tools.driver.launcher import Launcher


@dataclasses.dataclass
class PartitionOptions:
    num_submodels: int = 2
    allow_uneven: bool = False
    sub_mode: str = "job"
    sub_data: str = "full"
    parallel: bool = True
    noise_fraction: float = 0.02
    output_scale: str = None
    sub_epochs: float = 2.0
    sub_initial_lrate: float = 0.0003
    sub_final_lrate: float = 0.00003
    sub_jobs_initial: int = 1
    sub_jobs_final: int = 1
    train_opts: str = ""


def shard_egs(egs_dir, k, dir):
    """DIR/egs.J: archives J, J+K, ... of egs_dir renumbered 1.., the rest of it linked as it is.
    Every shard gets n // K archives, so the sub-models' tasks are the same size."""
    n = read_info(egs_dir, "num_archives")
    if n < k:
        raise NnetError(f"--sub-data shard needs at least {k} archives; {egs_dir} has {n}")
    if n % k:
        print(f"WARNING: {n} archives do not split {k} ways; the last {n % k} are not used by the sub-models",
              file=sys.stderr)
    n -= n % k
    src = os.path.abspath(egs_dir)
    for j in range(1, k + 1):
        shard = os.path.join(dir, f"egs.{j}")
        shutil.rmtree(shard, ignore_errors=True)
        shutil.copytree(os.path.join(src, "info"), os.path.join(shard, "info"))
        for name in os.listdir(src):
            if name != "info" and not (name.startswith("egs.") and name.endswith(".ark")):
                os.symlink(os.path.join(src, name), os.path.join(shard, name))
        for m, a in enumerate(range(j, n + 1, k), start=1):
            os.symlink(os.path.join(src, f"egs.{a}.ark"), os.path.join(shard, f"egs.{m}.ark"))
        with open(os.path.join(shard, "info", "num_archives"), "w") as f:
            f.write(f"{len(range(j, n + 1, k))}\n")
    return os.path.join(dir, "egs.JOB")


def full_model_options(opts, popts):
    """The trainer options with --train-opts applied on top (they win, as on a command line)."""
    parser = _TrainOptsParser(prog="--train-opts", add_help=False)
    options.add_arguments(parser, **dataclasses.asdict(opts))
    try:
        return options.from_namespace(parser.parse_args(shlex.split(popts.train_opts)))
    except ValueError as e:  # shlex: an unclosed quote
        raise NnetError(f"--train-opts {popts.train_opts!r}: {e}") from None


class _TrainOptsParser(argparse.ArgumentParser):
    def error(self, message):  # not argparse's usage and exit 2
        raise NnetError(f"--train-opts: {message}")


class Partitioned:
    def __init__(self, opts, popts, egs_dir, dir, driver):
        """``driver``: the path of steps/train_dnn.py, which driver-mode sub-models run."""
        self.opts, self.popts, self.egs_dir, self.dir, self.driver = opts, popts, egs_dir, dir, driver
        num_archives, _ = (read_info(egs_dir, name) for name in ("num_archives", "frames_per_eg"))
        options.check(full_model_options(opts, popts), num_archives)  # before any work, as the driver's
        for field, flag in (("sub_epochs", "--sub.num-epochs"), ("sub_initial_lrate", "--sub.initial-effective-lrate"),
                            ("sub_final_lrate", "--sub.final-effective-lrate")):
            if not 0 < getattr(popts, field) < math.inf:
                raise NnetError(f"{flag} must be finite and > 0, got {getattr(popts, field)}")
        if min(popts.sub_jobs_initial, popts.sub_jobs_final) < 1:
            raise NnetError("--sub.num-jobs-initial and --sub.num-jobs-final must be >= 1")
        self.log = os.path.join(dir, "log")
        try:
            make_dirs(self.log)
        except OSError as e:
            raise NnetError(f"{dir}: cannot make the experiment dir: {e.strerror}") from None
        self.launcher = Launcher(opts.cmd, self.log, "steps/train_partitioned.py")
        self.running = None  # the stage run() is at: where a stopped run goes on
        self.launchers = [self.launcher]   # every one that may have commands running (stop)
        self.first_stage = None

    def run(self, stage, stop_stage, config, train_stage=None):
        """stage None: go on after the last of split and merge that completed with these settings.
        train_stage: the full model's outer-loop stage; None goes on where DIR left off, unless this
        call merges a new DIR/merged.mdl, which starts the full model over."""
        if stage is None:   # (a stage past --stop-stage: that one again, its outputs unchanged)
            stage = min(self.resume_stage(config), stop_stage)
            if stage:
                print(f"steps/train_partitioned.py: going on at stage {stage} (" + ("the merged model"
                      if stage == 3 else "the split") + " of these settings is done)", flush=True)
        stages = range(stage, stop_stage + 1)
        self.running = self.first_stage = stage
        # The full model's options are checked before any sub-model trains (hours, on real data).
        loop = outer_loop.OuterLoop(full_model_options(self.opts, self.popts), self.egs_dir, self.dir,
                               name="steps/train_partitioned.py", stage_flag="--stage 3 --train-stage") \
            if 3 in stages else None
        if loop:
            self.launchers.append(loop.launcher)
        if 0 in stages:   # before any sub-model trains: not found in every job's log
            preflight.check_dims(config, config_mod.load(config), self.egs_dir)
        if {0, 1, 2} & set(stages):
            with ExpLock(self.dir) as lock:   # stage 3's outer loop takes the lock itself
                self.launcher.tick = lock.beat
                self.split_train_merge(stages, config)
                self.launcher.tick = None
        if loop:
            self.running = 3
            if train_stage is None and 2 in stages:
                train_stage = -1
            loop.run(train_stage, input_model=os.path.join(self.dir, "merged.mdl"))

    def split_train_merge(self, stages, config):
        """Stages 0-2: split the config into sub-models, train them, merge them into DIR/merged.mdl."""
        k, dir = self.popts.num_submodels, self.dir
        if {0, 1} & set(stages):   # the merged model of earlier sub-models is not this run's
            self.forget("merge.log")
        if 0 in stages:
            self.running = 0
            self.run_recorded("split.log", self.split_command(config))
        if 1 in stages:
            self.running = 1
            egs_dir = shard_egs(self.egs_dir, k, dir) if self.popts.sub_data == "shard" else self.egs_dir
            print(f"steps/train_partitioned.py: training {k} sub-models ({self.popts.sub_mode} mode, "
                  f"{'in parallel' if self.popts.parallel else 'one after another'}, {self.popts.sub_data} data)",
                  flush=True)
            if self.popts.sub_mode == "job":
                self.submodels_by_job(egs_dir, fresh=0 in stages)
            else:
                self.submodels_by_driver(egs_dir)
        if 2 in stages:
            self.running = 2
            self.run_recorded("merge.log", self.merge_command())

    def stop(self):
        """Stop what is still running, and wait for it (Ctrl-C)."""
        for launcher in self.launchers:
            launcher.stop()

    def split_command(self, config):
        return ["nnet-split-submodels", f"--srand={self.opts.srand}",
                *(["--allow-uneven"] if self.popts.allow_uneven else []),
                *commands.presoftmax_option(self.opts, self.egs_dir, self.dir),
                config, str(self.popts.num_submodels), os.path.join(self.dir, "split")]

    def merge_command(self):
        scale = [f"--output-scale={self.popts.output_scale}"] if self.popts.output_scale else []
        return ["nnet-merge-submodels", "--partition", os.path.join(self.dir, "split", "partition.yaml"),
                f"--noise-fraction={self.popts.noise_fraction}", f"--srand={self.opts.srand}", *scale,
                *[os.path.join(self.dir, f"sub.{j}", "final.mdl") for j in range(1, self.popts.num_submodels + 1)],
                os.path.join(self.dir, "merged.mdl")]

    def run_recorded(self, log, command):
        """Run ``command``; then DIR/log/LOG.done holds it, for resume_stage (removed first: a
        command that stops half-way has not done what the record says)."""
        self.forget(log)
        self.launcher.run(log, command)
        write_text(self._record(log), shlex.join(command) + "\n")

    def forget(self, log):
        if os.path.exists(self._record(log)):
            os.remove(self._record(log))

    def _record(self, log):
        return os.path.join(self.log, f"{log}.done")

    def _done(self, log, command):
        try:
            with open(self._record(log)) as f:
                return f.read() == shlex.join(command) + "\n"
        except (OSError, UnicodeDecodeError):
            return False

    def resume_stage(self, config):
        """3 when the merge of these settings completed, else 1 when the split did, else 0. A
        completed merge means every sub-model was trained; stage 1 goes on where they stopped."""
        if self._done("merge.log", self.merge_command()) and os.path.exists(os.path.join(self.dir, "merged.mdl")):
            return 3
        return 1 if self._done("split.log", self.split_command(config)) else 0

    def submodels_by_job(self, egs_dir, fresh):
        """The outer loop's schedule with one job and no averaging, the K sub-models in lockstep
        as one array submission per iteration (log/train_sub.I.J.log). Goes on after the newest
        iteration every sub-model finished, unless ``fresh`` (this run made a new split)."""
        k, opts = self.popts.num_submodels, self.opts
        probe = egs_dir.replace("JOB", "1")
        sub_opts = dataclasses.replace(opts, jobs_initial=1, jobs_final=1, num_epochs=self.popts.sub_epochs,
                                       initial_lrate=self.popts.sub_initial_lrate, final_lrate=self.popts.sub_final_lrate)
        num_archives = read_info(probe, "num_archives")
        frames_per_eg = schedule.passes_per_archive(opts.chunk_training, read_info(probe, "frames_per_eg"))
        plan = schedule.plan(sub_opts.num_epochs, num_archives, frames_per_eg, 1, 1,
                             sub_opts.initial_lrate, sub_opts.final_lrate)
        if not plan:
            raise NnetError(f"--sub.num-epochs {sub_opts.num_epochs} gives no iteration on {probe}")
        sub = os.path.join(self.dir, "sub.JOB")
        start = self.submodels_start(sub_opts, egs_dir, num_archives, frames_per_eg, len(plan), fresh)
        for it, _, lrate, processed in plan[start:]:
            model_in = os.path.join(self.dir, "split", "sub.JOB.mdl") if it == 0 else os.path.join(sub, f"{it}.mdl")
            print(f"Sub-models iter: {it}/{len(plan) - 1}   lr: {lrate:.6f}", flush=True)
            command = commands.job_command(sub_opts, it, 1, lrate, processed, model_in, egs_dir,
                                        os.path.join(sub, f"{it + 1}.mdl"), job=1)
            self.launcher.run(f"train_sub.{it}.JOB.log", command, jobs=k,
                              launcher_opts=commands.job_launcher_opts(opts, k if self.popts.parallel else 1))
            if opts.cleanup and it > 0:
                for j in range(1, k + 1):
                    os.remove(os.path.join(self.dir, f"sub.{j}", f"{it}.mdl"))
        for j in range(1, k + 1):
            last, final = (os.path.join(self.dir, f"sub.{j}", name) for name in (f"{len(plan)}.mdl", "final.mdl"))
            if not os.path.exists(last):   # renamed by the run that stopped in this loop
                continue
            if opts.cleanup:
                os.replace(last, final)
            else:
                copy_file(last, final)
        self.launcher.run("compute_prob_valid_sub.final.JOB.log", [
            "nnet-compute-prob", os.path.join(sub, "final.mdl"), os.path.join(egs_dir, "valid_diagnostic.egs")], jobs=k)

    def submodels_start(self, sub_opts, egs_dir, num_archives, frames_per_eg, num_iters, fresh):
        """The iteration job-mode sub-models start at: after the newest one every sub-model has a
        whole model for (sub.J/I.mdl; the last as final.mdl), once each sub.J/manifest.json shows
        the same settings. Anything of an earlier run after that point is removed."""
        k = self.popts.num_submodels
        subs = [os.path.join(self.dir, f"sub.{j}") for j in range(1, k + 1)]
        wanted = []
        for j in range(1, k + 1):
            split = os.path.join(self.dir, "split", f"sub.{j}.mdl")
            if not os.path.exists(split):
                raise resume.Refused(f"{split}: no such file; the sub-models start from the split (run with --stage 0)")
            # The source egs dir, not a shard's: DIR/egs.J is made again by every run, wherever DIR now is.
            wanted.append({**manifest.describe(sub_opts, self.egs_dir, num_archives, frames_per_eg, input_model=split),
                           "sub-data": self.popts.sub_data})
        start = 0 if fresh else self._submodels_resume_point(subs, wanted, num_iters)
        removed = 0
        for d, new in zip(subs, wanted):
            os.makedirs(d, exist_ok=True)
            removed += len(resume.remove_models_after(d, start, ("final.mdl",) if start < num_iters else ()))
            manifest.write(d, new)
        if removed:
            print(f"steps/train_partitioned.py: sub-models start at iteration {start}: removed {removed} later "
                  f"models of an earlier run", flush=True)
        if start == num_iters:
            print(f"steps/train_partitioned.py: the sub-models are trained ({subs[0]}/final.mdl, ...)", flush=True)
        elif start:
            print(f"steps/train_partitioned.py: resuming the sub-models at iteration {start} "
                  f"(every sub.J has {start}.mdl)", flush=True)
        return start

    def _submodels_resume_point(self, subs, wanted, num_iters):
        """The newest iteration every sub-model has a model for that loads; 0 in a dir no run of
        this version trained sub-models in. Other settings, or one manifest missing, are refused."""
        old = [manifest.read(d) for d in subs]
        if not any(old):
            return 0   # nothing of a run this version made
        for d, before, new in zip(subs, old, wanted):
            if before is None:
                raise resume.Refused(f"{d}/{manifest.NAME}: missing, so this sub-model's settings are unknown; run "
                                     f"with --stage 0 to train the sub-models over")
            resume.check_settings(f"{d}/{manifest.NAME}", before, new, "the sub-models were started",
                                  "run with --stage 0 to train them over")

        def model(d, it):
            path = os.path.join(d, f"{it}.mdl")
            return path if os.path.exists(path) or it < num_iters else os.path.join(d, "final.mdl")

        it = resume.newest_whole(range(num_iters, 0, -1), lambda it: [model(d, it) for d in subs], self.warn)
        return 0 if it is None else it

    def warn(self, text):
        print(f"steps/train_partitioned.py: WARNING: {text}", file=sys.stderr, flush=True)

    def submodels_by_driver(self, egs_dir):
        """K averaging drivers, run here (one log each), each sending its jobs through --cmd."""
        k, p = self.popts.num_submodels, self.popts
        sub_opts = dataclasses.replace(full_model_options(self.opts, p), num_epochs=p.sub_epochs,
                                       initial_lrate=p.sub_initial_lrate, final_lrate=p.sub_final_lrate,
                                       jobs_initial=p.sub_jobs_initial, jobs_final=p.sub_jobs_final)
        local = Launcher("nnet-queue local", self.log, "steps/train_partitioned.py")
        self.launchers.append(local)
        local.run("train_sub.JOB.log", [
            self.driver, *options.to_argv(sub_opts), "--trainer.input-model", os.path.join(self.dir, "split", "sub.JOB.mdl"),
            "--egs.dir", egs_dir, "--dir", os.path.join(self.dir, "sub.JOB")],
            jobs=k, launcher_opts=["--max-jobs-run", str(k if p.parallel else 1)])
