"""What can be wrong with a training run, found before any work: the options, the paths, the
egs' shape against the model's, the dir's permissions and the stage asked for. Not found in
every job's log, after the jobs were retried."""
import os
import re
import shlex

from nnet_tools import device
from nnet_tools.data.egs import EgsArchive, read_info
from nnet_tools.driver import dropout_schedule, options, schedule
from nnet_tools.errors import NnetError
from nnet_tools.fileio import check_writable, make_new_dirs
from nnet_tools.model import config as config_mod, model_io

SHELL_CHARS = re.compile(r"[$`\\|&;<>()*?\[\]{}!'\"]")


def check_run(opts, egs_dir, dir, num_archives, frames_per_eg):
    """The options and paths of a run on ``egs_dir`` in ``dir`` (made here, with its log/, once the
    options pass); returns (iterations, archives to process), as schedule.num_iters, and the
    topmost directory made (None if ``dir`` and its log/ were there)."""
    if opts.jobs_final > num_archives:
        raise NnetError(f"num-jobs-final {opts.jobs_final} > number of archives {num_archives} in {egs_dir}")
    options.check(opts, num_archives)
    for flag, path in (("--dir", dir), ("--egs.dir", egs_dir)):
        if SHELL_CHARS.search(path):  # $cmd re-quotes words as Kaldi's run.pl: only whitespace
            raise NnetError(f"{flag} {path!r}: shell characters in a path would be expanded by the task's "
                            f"shell; use a path without them")
    check_gpu(opts)
    num_iters, to_process = schedule.num_iters(opts.num_epochs, num_archives, frames_per_eg,
                                               opts.jobs_initial, opts.jobs_final)
    if not 1 <= num_iters <= options.MAX_ITERATIONS:
        raise NnetError(f"--trainer.num-epochs {opts.num_epochs} gives {num_iters} iterations on "
                        f"{num_archives} archives of {frames_per_eg} frames per eg; need 1 to {options.MAX_ITERATIONS}")
    if opts.dropout_schedule:
        dropout_schedule.parse(opts.dropout_schedule, where="--trainer.dropout-schedule")
    if opts.averaging_fanin < 0 or opts.averaging_fanin == 1:
        raise NnetError(f"--trainer.averaging-fanin must be 0 (one job averages all models) or at least 2, "
                        f"got {opts.averaging_fanin}")
    try:
        made = make_new_dirs(os.path.join(dir, "log"))
    except OSError as e:
        raise NnetError(f"{dir}: cannot make the experiment dir: {e.strerror}") from None
    for d in (dir, os.path.join(dir, "log")):   # else every job fails, is retried, and names logs never written
        check_writable(d)
    return num_iters, to_process, made


def check_gpu(opts):
    """--use-gpu yes or wait when $cmd runs the jobs on this machine, which has no usable GPU:
    every job would fail (as Kaldi's do); an engine's jobs find out on their GPU nodes."""
    if opts.use_gpu not in ("yes", "wait"):
        return
    words = shlex.split(opts.cmd or "")
    local = words[:2] == ["nnet-queue", "local"] or (words and os.path.basename(words[0]) == "run.pl")
    missing = local and device.cuda_missing()
    if missing:
        raise NnetError(f"--use-gpu {opts.use_gpu}: the jobs run on this machine (--cmd {opts.cmd!r}), where no "
                        f"CUDA GPU is usable ({missing}); use --use-gpu no")


def check_start(opts, egs_dir, num_iters, stage_flag, stage, config, input_model=None):
    """What can be wrong with the stage, the egs and the initial model, found before any work:
    the combination's egs must be there (not found after the last iteration), an input model
    must be a readable model file, and a model config must parse and take the egs' features
    (not found in init_model.log, or in every job's log for a wrong input-dim)."""
    if stage is not None and stage > num_iters:
        raise NnetError(f"{stage_flag} {stage} is past this run's last stage, {num_iters} (the final combination)")
    if opts.do_final_combination and not os.path.isfile(os.path.join(egs_dir, "combine.egs")):
        raise NnetError(f"{egs_dir}/combine.egs: no such file; the final combination needs it "
                        f"(or --trainer.optimization.do-final-combination false)")
    # A truncated diagnostic archive only warned each iteration (the divergence check blind all
    # run), a truncated combine.egs failed the run at its end.
    subsets = ["valid_diagnostic.egs", "train_diagnostic.egs"] + (["combine.egs"] if opts.do_final_combination else [])
    for name in subsets:
        if os.path.exists(os.path.join(egs_dir, name)):
            EgsArchive(os.path.join(egs_dir, name))
    if stage is not None and stage > -1:
        return
    if input_model:   # stage -1 copies it (a config is then not used)
        check_dims(input_model, model_io.read(input_model, mmap=True)["config"], egs_dir)
    elif config:
        check_dims(config, config_mod.load(config), egs_dir)


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
