import os
import zipfile

import click
import torch

from nnet_tools.cli.common import program
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path, starts_as_zip
from nnet_tools.log import logger
from nnet_tools.model import model_io
from nnet_tools.train import outer_optim
from nnet_tools.model.structure import structure


NOT_OURS = "not an outer-optimizer state written by nnet-outer-step"


def _load_state(path):
    if path is None:
        return {}
    try:
        # torch.save writes a zip archive: without its end record the file was cut short.
        if not zipfile.is_zipfile(path):
            what = ("empty file" if os.path.getsize(path) == 0
                    else "truncated" if starts_as_zip(path) else "another format")
            raise NnetError(f"{path}: {NOT_OURS} ({what})")
        return torch.load(path, map_location="cpu", weights_only=True)
    except NnetError:
        raise
    except FileNotFoundError:
        raise NnetError(f"{path}: no such outer-optimizer state file") from None
    except IsADirectoryError:
        raise NnetError(f"{path}: is a directory, not an outer-optimizer state file") from None
    except OSError as e:
        raise NnetError(f"{path}: cannot read outer-optimizer state file: {e.strerror}") from None
    except Exception:  # noqa: BLE001 - torch fails in many ways on a zip archive not its own
        raise NnetError(f"{path}: {NOT_OURS} (a damaged zip archive, or another program's)") from None


@click.command(context_settings={"show_default": True})
@click.option("--method", type=click.Choice(["bmuf", "nesterov"]), required=True)
@click.option("--jobs", type=int, default=1, help="Jobs averaged this iteration (sets bmuf's default momentum 1-1/N).")
@click.option("--momentum", type=float, default=None, help="Block momentum (default: bmuf 1-1/jobs, nesterov 0.9).")
@click.option("--learning-rate", type=float, default=None, help="Block learning rate (default: bmuf 1.0, nesterov 0.7).")
@click.option("--nesterov/--no-nesterov", default=True, help="bmuf: start the next jobs from the look-ahead point.")
@click.option("--state-in", default=None, help="The state the previous step wrote (none on the first step).")
@click.option("--state-out", required=True)
@click.argument("start_model")
@click.argument("average_model")
@click.argument("model_out")
@program("nnet-outer-step")
def main(method, jobs, momentum, learning_rate, nesterov, state_in, state_out, start_model, average_model, model_out):
    """Outer-optimizer step on the averaged delta: START_MODEL (what the jobs started from) and
    AVERAGE_MODEL (their average) -> MODEL_OUT, the next iteration's model.

    \b
    Example:
      nnet-outer-step --method bmuf --jobs 4 --state-in exp/nnet/7.outer --state-out exp/nnet/8.outer \\
          exp/nnet/7.mdl exp/nnet/8.avg.mdl exp/nnet/8.mdl
    """
    (start, priors), average = model_io.load(start_model, with_priors=True), model_io.load(average_model)
    if os.path.realpath(state_out) == os.path.realpath(model_out):
        raise NnetError(f"--state-out {state_out} is MODEL_OUT: the state would overwrite the model")
    if structure(start) != structure(average):  # a dropout schedule changes only the proportions
        raise NnetError(f"{average_model}: model structure differs from {start_model}")
    opt = outer_optim.make(method, jobs, momentum, learning_rate, nesterov)
    params = {name: p.detach() for name, p in start.named_parameters()}
    state = _load_state(state_in)
    outer_optim.check_state(state, method, params, state_in)
    new, state = opt.step(params, {name: p.detach() for name, p in average.named_parameters()}, state)
    bad = [name for name, p in new.items() if not bool(p.isfinite().all())]
    if bad:
        raise NnetError(f"{method} step: the new model is not finite (in {bad[0]}); nothing written")
    with torch.no_grad():
        for name, p in average.named_parameters():
            p.copy_(new[name])
    # Both temp files are made before either is written, and renamed only when both are.
    with atomic_path(state_out) as state_tmp, atomic_path(model_out) as model_tmp:
        torch.save(state, state_tmp)
        model_io.save(average, model_tmp, priors=priors)
    change = sum(float((new[n] - params[n]).pow(2).sum()) for n in params) ** 0.5
    logger.info(f"{method} step (momentum {opt.momentum:g}, learning rate {opt.learning_rate:g}): "
                f"parameter change {change:.6g}; wrote {model_out} and {state_out}")
