"""Where a rerun of a driver goes on, and what it may trust: the dir's manifest must show the
same settings, the model it resumes from must load, and whatever an earlier run made after that
point is removed (this run makes it again). The outer loop and the partitioned driver's
sub-models share these rules.
"""
import glob
import os
import re

from nnet_tools.driver import manifest
from nnet_tools.errors import NnetError
from nnet_tools.model import model_io
from nnet_tools.model.structure import fingerprint

MODEL_RE = re.compile(r"(\d+)\.(?:(?:\d+\.)?mdl|outer)")  # N.mdl, the jobs' N.J.mdl, N.outer
# An iteration's logs: train.N.J, select.N, average.N(.J), outer.N (they make N+1.mdl), and
# progress.N, compute_prob_*.N (of N.mdl); then the final combination's.
# (A partitioned dir's log/ also holds the sub-models' own: train_sub.N.J.log and the like.)
ITER_LOG_RE = re.compile(r"(?P<kind>train|select|average|outer|progress|compute_prob_valid|compute_prob_train)"
                         r"\.(?P<n>\d+)(?:\.\d+)?\.log")
FINAL_LOG_RE = re.compile(r"combine\.log|(?:compute_prob_valid|compute_prob_train|progress)\.final\.log")


class NoResume(NnetError):
    """Rerunning the same command would fail the same way, so the drivers offer no resume command."""


class Diverged(NoResume):
    """Training went non-finite or far worse; resuming would do the same again."""


class Refused(NoResume):
    """This command cannot go on in this dir (other settings, a missing input)."""


def check_settings(path, old, new, started, remedy):
    """Refuse to go on when the settings ``new`` differ from the manifest ``old`` (read from
    ``path``): a run is never mixed from two settings."""
    diffs = manifest.differences(old, new)
    if diffs:
        raise Refused(f"{path}: {started} with other settings ({'; '.join(diffs)}); {remedy}")


def whole_model(path, warn, check=None):
    """Whether a run may resume from the model at ``path``: a model that does not load is passed
    over with a warning; one it may not read stops the resume, as it is not broken, only hidden,
    and is not to be trained over. ``check(path, blob)`` may refuse one that loads."""
    if not os.access(path, os.R_OK):
        raise NnetError(f"{path}: cannot resume from it: Permission denied")
    try:
        blob = model_io.read(path)
    except NnetError as e:
        warn(f"not resuming from {path}: {e}")
        return False
    if check:
        check(path, blob)
    return True


def newest_whole(iters, models_of, warn, usable=lambda it: True, check=None):
    """The first iteration of ``iters`` (newest first) whose models ``models_of(it)`` all exist
    and load (and pass ``check``), and that is ``usable``; None if there is none."""
    for it in iters:
        paths = models_of(it)
        # A list, not a generator: every model that does not load gets its warning.
        if all(os.path.exists(p) for p in paths) and usable(it) and all([whole_model(p, warn, check) for p in paths]):
            return it
    return None


def same_run(run_fingerprint, source, restart):
    """A check for whole_model: a model of another shape than ``run_fingerprint`` (recorded in
    ``source``) is refused, naming it; ``restart`` says how to start the run over."""
    def check(path, blob):
        got = fingerprint(blob)
        if got == run_fingerprint:
            return
        if got["num-params"] != run_fingerprint["num-params"]:
            what = f"{got['num-params']} parameters, where this run's models have {run_fingerprint['num-params']}"
        else:
            what = "its layers or tensor shapes differ from this run's models'"
        raise Refused(f"{path}: not a model of this run: {what} ({source}); put the run's own model back, or "
                      f"{restart}")
    return check


def remove_models_after(dir, stage, names=()):
    """Remove the models and outer states numbered after ``stage`` in ``dir``, and those of
    ``names`` that exist; returns the names removed."""
    later = [name for name in os.listdir(dir) if (m := MODEL_RE.fullmatch(name)) and int(m.group(1)) > stage]
    later += [name for name in names if os.path.exists(os.path.join(dir, name))]
    for name in later:
        os.remove(os.path.join(dir, name))
    return later


def log_is_later(match, stage):
    """Whether an iteration log (ITER_LOG_RE) belongs to what a run starting at ``stage`` redoes."""
    n = int(match["n"])
    return n >= stage if match["kind"] in ("train", "select", "average", "outer") else n > stage


def remove_logs_after(log_dir, stage):
    """The iteration logs of what a run starting at ``stage`` redoes, and the final ones: a run
    stopped early would otherwise be reported with the earlier run's figures."""
    logs = [name for name in os.listdir(log_dir) if FINAL_LOG_RE.fullmatch(name) or (
            (m := ITER_LOG_RE.fullmatch(name)) and log_is_later(m, stage))]
    for name in logs:
        os.remove(os.path.join(log_dir, name))
    return logs


# -- the outer loop's resume (OuterLoop.run) --------------------------------------------------
def start_stage(loop, stage, config, input_model):
    """The stage the outer loop ``loop`` starts at, once this run's settings are checked against
    the dir's manifest, the stage's input models are found and are this run's (else the dir is
    left as it was) and what an earlier run made after it is removed."""
    new = manifest.describe(loop.opts, loop.egs_dir, loop.num_archives, loop.frames_per_eg, config, input_model)
    old = None if stage == -1 else manifest.read(loop.dir)
    check = None
    if old is None or not os.path.exists(loop.mdl(0)):  # nothing made yet: any settings may start it
        manifest.write(loop.dir, new)
        stage = -1 if stage is None else stage
    else:
        check_settings(loop.path(manifest.NAME), old, new, "this dir was started",
                       f"run with {loop.stage_flag} -1 to start it over, or use another --dir")
        check = run_check(loop, old)
        if stage is None:
            stage = resume_point(loop, check)
            if 0 <= stage <= loop.num_iters:
                where = "the final combination" if stage == loop.num_iters else f"iteration {stage}"
                loop.say(f"{loop.name}: resuming at {where} ({loop.mdl(stage)} is the newest complete model)")
    if stage <= loop.num_iters:
        check_stage_inputs(loop, stage, check)
        remove_later(loop, stage)
    return stage


def record_run_model(loop):
    """Once stage -1 made 0.mdl: its fingerprint into the manifest, for run_check."""
    manifest.record_model(loop.dir, fingerprint(model_io.read(loop.mdl(0), mmap=True)))


def run_check(loop, recorded):
    """same_run against the fingerprint the manifest ``recorded``, or, in a dir an older version
    started, 0.mdl's."""
    restart = f"start over with {loop.stage_flag} -1"
    if manifest.MODEL in recorded:
        return same_run(recorded[manifest.MODEL], loop.path(manifest.NAME), restart)
    return same_run(fingerprint(model_io.read(loop.mdl(0), mmap=True)), f"as {loop.mdl(0)}", restart)


def resume_point(loop, check):
    """num_iters + 1 if the run is complete; else the newest iteration with a whole model."""
    if os.path.exists(loop.path("final.mdl")) and os.path.exists(loop.path("accuracy.report")):
        return loop.num_iters + 1
    it = newest_whole(range(loop.num_iters, -1, -1), lambda it: [loop.mdl(it)], loop.warn, loop.resumable, check)
    return -1 if it is None else it


def check_stage_inputs(loop, stage, check=None):
    """The models stage ``stage`` starts from must exist (cleanup keeps only every
    --cleanup.preserve-interval-th, and final.mdl, once a run is done), and be this run's."""
    if 0 <= stage < loop.num_iters:
        if not os.path.exists(loop.mdl(stage)):
            raise NnetError(f"cannot resume at iteration {stage}: {loop.mdl(stage)} does not exist")
        if not loop.resumable(stage):
            raise NnetError(f"cannot resume at iteration {stage}: {loop.path(f'{stage}.outer')} does not exist")
        needed = [loop.mdl(stage)]
    elif stage == loop.num_iters:
        needed = [loop.mdl(i) for i in loop.combine_set] if loop.opts.do_final_combination else [loop.mdl(stage)]
        missing = [m for m in needed if not os.path.exists(m)]
        if missing:
            raise NnetError(f"cannot start at the final combination: {len(missing)} of its models do not exist "
                            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    else:
        return
    if check:
        for path in needed:
            check(path, model_io.read(path, mmap=True))


def remove_later(loop, stage):
    """Models, outer states and the final model an earlier run made after ``stage``, and their
    logs: this run makes them again, and until it has, a resume would take the newest of them
    (or final.mdl with accuracy.report: "complete") for its own."""
    later = remove_models_after(loop.dir, max(stage, -1), ("final.mdl", "accuracy.report"))
    logs = remove_logs_after(loop.path("log"), stage)
    if later or logs:
        loop.say(f"{loop.name}: starting at stage {stage}: removed {len(later)} later models and outer states "
                 f"of an earlier run ({', '.join(sorted(later, key=natural)[:3])}"
                 f"{', ...' if len(later) > 3 else ''}), and {len(logs)} of its logs")


def natural(name):
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
