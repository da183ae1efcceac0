"""The driver's options, under Kaldi's names (steps/nnet3/train_dnn.py), with their defaults in
one place. Steps add them to their parser; the outer loop reads the resulting TrainerOptions."""
import argparse
import dataclasses
import math
from dataclasses import dataclass, field

from nnet_tools.errors import NnetError
from nnet_tools.train.minibatch import MinibatchRule


def str2bool(text):
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def _opt(flag, default, help="", type=None, choices=None, action=None):
    return field(default=default, metadata=dict(flag=flag, help=help, type=type, choices=choices, action=action))


@dataclass
class TrainerOptions:
    cmd: str = _opt("--cmd", "nnet-queue local", "job launcher, as $train_cmd in cmd.sh")
    use_gpu: str = _opt("--use-gpu", "no", choices=["yes", "no", "wait"])
    cleanup: bool = _opt("--cleanup", True, type=str2bool)
    preserve_interval: int = _opt("--cleanup.preserve-model-interval", 100)
    srand: int = _opt("--trainer.srand", 0)
    num_epochs: float = _opt("--trainer.num-epochs", 8.0)
    shuffle_buffer_size: int = _opt("--trainer.shuffle-buffer-size", 5000)
    max_param_change: float = _opt("--trainer.max-param-change", 2.0)
    num_threads: int = _opt("--trainer.num-threads", 1, "CPU threads per job")
    add_options: list = _opt("--trainer.add-option", None, "more nnet-train-one-job options, e.g. "
                             "--trainer.add-option=--print-interval=20 (repeatable)", action="append")
    dropout_schedule: str = _opt("--trainer.dropout-schedule", None, "Kaldi's piecewise-linear schedule, "
                                 "e.g. '0,0@0.20,0.5@0.50,0' or 'layer1=0,0.2,0'")
    initial_lrate: float = _opt("--trainer.optimization.initial-effective-lrate", 0.0003)
    final_lrate: float = _opt("--trainer.optimization.final-effective-lrate", 0.00003)
    jobs_initial: int = _opt("--trainer.optimization.num-jobs-initial", 1)
    jobs_final: int = _opt("--trainer.optimization.num-jobs-final", 8)
    jobs_step: int = _opt("--trainer.optimization.num-jobs-step", 1)
    max_models_combine: int = _opt("--trainer.optimization.max-models-combine", 20)
    max_objective_evaluations: int = _opt("--trainer.optimization.max-objective-evaluations", 30)
    do_final_combination: bool = _opt("--trainer.optimization.do-final-combination", True, type=str2bool)
    momentum: float = _opt("--trainer.optimization.momentum", 0.0)
    minibatch_size: str = _opt("--trainer.optimization.minibatch-size", "512")
    proportional_shrink: float = _opt("--trainer.optimization.proportional-shrink", 0.0,
                                      "scale the model by 1 - P x lr before each iteration (approximates l2)")
    backstitch_scale: float = _opt("--trainer.optimization.backstitch-training-scale", 0.0)
    backstitch_interval: int = _opt("--trainer.optimization.backstitch-training-interval", 1)
    presoftmax_prior_scale_power: float = _opt("--trainer.presoftmax-prior-scale-power", 0.0,
                                               "scale the output's pre-softmax activations by (class count)^power, "
                                               "counts from the egs (Kaldi's acoustic default: -0.25); 0 = off")
    max_retries: int = _opt("--trainer.max-retries", 2, "times a failed job is run again before the iteration "
                            "goes on without it")
    chunk_training: bool = _opt("--trainer.chunk-training", True, "train each job on every labelled frame of "
                                "its egs in one pass (nnet3; nnet-train-one-job --chunk): an epoch is one pass "
                                "over the archives; false: nnet2's --frame scheme, one label position per eg "
                                "per job, an epoch frames-per-eg passes", type=str2bool)
    stall_limit: float = _opt("--trainer.stall-limit", None, "seconds a training job's log may stay as it is "
                              "before the job counts as stalled, is killed and retried (nnet-queue --stall-limit); "
                              "default: 4 x the previous iteration's longest job, at least 60 (600 with no previous "
                              "iteration); 0: never", type=float)
    min_success_fraction: float = _opt("--trainer.min-success-fraction", 0.5, "the least fraction of an iteration's "
                                       "jobs that must succeed for their average to be used")
    divergence_threshold: float = _opt("--trainer.divergence-threshold", 5.0, "stop ('diverged') when the valid "
                                       "log-likelihood per frame falls this far below its best; 0 = never")
    averaging_fanin: int = _opt("--trainer.averaging-fanin", 0, "models per averaging job: with more jobs than "
                                "this, average them in ceil(jobs/K) groups at once, then the groups' averages "
                                "(weighted by size: the same average); 0 = one job averages all, as Kaldi")
    # Not Kaldi's: there nnet3-average goes through $cmd. Here the driver, which has torch loaded,
    # saves each iteration a queue round trip and a program start (~2 s of torch import) per step.
    average_in_driver: bool = _opt("--trainer.average-in-driver", True, "average the jobs' models (and take the "
                                   "outer step) in the driver's own process, logs as through --cmd; false: "
                                   "through --cmd, as Kaldi", type=str2bool)
    # bmuf, not Kaldi's plain average: at N >= 4 it came closest to one job's samples on Fashion-MNIST
    # and on speech frames (docs/results.md, "How many jobs"); with one job its momentum is 0.
    outer_method: str = _opt("--trainer.outer.method", "bmuf", "what becomes of the averaged model: "
                             "average (Kaldi), bmuf (block momentum), nesterov (DiLoCo's outer Nesterov SGD)",
                             choices=["average", "bmuf", "nesterov"])
    outer_momentum: float = _opt("--trainer.outer.momentum", None,
                                 "block momentum; default 1 - 1/(the iteration's jobs) for bmuf, 0.9 for nesterov")
    outer_learning_rate: float = _opt("--trainer.outer.learning-rate", None,
                                      "block learning rate; default 1.0 for bmuf, 0.7 for nesterov")
    outer_nesterov: bool = _opt("--trainer.outer.nesterov", True, "bmuf: Nesterov look-ahead", type=str2bool)


# More iterations than this is a mistyped --trainer.num-epochs, not a run: its plan alone would
# not fit in memory.
MAX_ITERATIONS = 1_000_000


def check(opts, num_archives):
    """Refuse, before any work, option values the loop or its jobs cannot run with, naming the
    option: a job would fail on them every retry, and the loop's arithmetic divide by zero."""
    def need(ok, flag, what, value):
        if not ok:
            raise NnetError(f"{flag} must be {what}, got {value}")
    need(0 < opts.num_epochs < math.inf, "--trainer.num-epochs", "finite and > 0", opts.num_epochs)
    for f in ("jobs_initial", "jobs_final", "jobs_step", "preserve_interval", "max_models_combine",
              "max_objective_evaluations", "num_threads", "backstitch_interval"):
        need(getattr(opts, f) >= 1, _flag(f), ">= 1", getattr(opts, f))
    need(opts.jobs_initial <= num_archives, _flag("jobs_initial"), f"<= the {num_archives} egs archives",
         opts.jobs_initial)
    for f in ("initial_lrate", "final_lrate"):
        need(0 < getattr(opts, f) < math.inf, _flag(f), "finite and > 0", getattr(opts, f))
    for f in ("max_param_change", "proportional_shrink", "backstitch_scale"):
        need(0 <= getattr(opts, f) < math.inf, _flag(f), "finite and >= 0", getattr(opts, f))
    need(0 <= opts.momentum < 1, _flag("momentum"), "in [0, 1)", opts.momentum)
    # Each job's seed is srand + iteration (+ 1000 per retry), and a program takes [0, 2^63).
    need(0 <= opts.srand < 2 ** 62, _flag("srand"), "in [0, 2^62)", opts.srand)
    need(opts.shuffle_buffer_size >= 0, _flag("shuffle_buffer_size"), ">= 0", opts.shuffle_buffer_size)
    need(opts.max_retries >= 0, _flag("max_retries"), ">= 0", opts.max_retries)
    need(opts.stall_limit is None or 0 <= opts.stall_limit < math.inf, _flag("stall_limit"), "finite and >= 0 (0: "
         "never)", opts.stall_limit)
    need(0 < opts.min_success_fraction <= 1, _flag("min_success_fraction"), "in (0, 1]", opts.min_success_fraction)
    need(0 <= opts.divergence_threshold < math.inf, _flag("divergence_threshold"), "finite and >= 0 (0: never)",
         opts.divergence_threshold)
    need(opts.outer_momentum is None or 0 <= opts.outer_momentum < 1, _flag("outer_momentum"), "in [0, 1)",
         opts.outer_momentum)
    need(opts.outer_learning_rate is None or 0 < opts.outer_learning_rate < math.inf, _flag("outer_learning_rate"),
         "finite and > 0", opts.outer_learning_rate)
    MinibatchRule(opts.minibatch_size, where=_flag("minibatch_size"))


def _flag(name):
    return next(f.metadata["flag"] for f in dataclasses.fields(TrainerOptions) if f.name == name)


class Parser(argparse.ArgumentParser):
    """A driver's option parser: a bad option is one line and exit status 1, as a Kaldi program's
    (argparse prints the whole usage and exits 2)."""

    def error(self, message):
        self.exit(1, f"{self.prog}: {message} (see --help)\n")


def add_arguments(parser, **defaults):
    """Add every TrainerOptions field to an argparse parser (``defaults`` override ours)."""
    for f in dataclasses.fields(TrainerOptions):
        m = f.metadata
        kwargs = dict(dest=f.name, default=defaults.get(f.name, f.default), help=m["help"] or None)
        if m["action"]:
            kwargs["action"] = m["action"]
        else:
            kwargs["type"] = m["type"] or (f.type if f.type in (int, float) else str)
            if m["choices"]:
                kwargs["choices"] = m["choices"]
        parser.add_argument(m["flag"], **kwargs)


def from_namespace(ns):
    return TrainerOptions(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(TrainerOptions)})


def to_argv(opts, **changes):
    """The command-line options that reproduce ``opts`` (with ``changes``), for a sub-driver."""
    opts = dataclasses.replace(opts, **changes)
    argv = []
    for f in dataclasses.fields(TrainerOptions):
        value = getattr(opts, f.name)
        if value is None:
            continue
        for v in (value if isinstance(value, list) else [value]):
            argv.append(f"{f.metadata['flag']}={str(v).lower() if isinstance(v, bool) else v}")
    return argv
