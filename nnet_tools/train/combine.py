"""Final model combination (Kaldi's nnet3-combine since 2017): the best uniform average of the
newest n models, n chosen on the combine egs with at most ``max_objective_evaluations`` scorings.

Streams: the running average is updated one model at a time, each candidate is scored in place
(its batch-norm statistics saved and restored around the scoring), and only the best n is
remembered; the winning average is then rebuilt by the same float operations from the first n
models. So at most two models are held at once (the running average and the one being added)."""
import copy
import math

import torch

from nnet_tools.train import average
from nnet_tools.report import diagnostics
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.model import model_io


def _score(model, windows, labels, device):
    """Objective per frame of ``model`` with batch-norm statistics recomputed on ``windows``; the
    model's own statistics are put back afterwards."""
    saved = {k: b.detach().clone() for k, b in model.named_buffers()}
    diagnostics.recompute_batchnorm_stats(model, windows, device)
    stats = diagnostics.compute_prob(model, windows, labels, device)
    with torch.no_grad():
        for k, b in model.named_buffers():
            b.copy_(saved[k])
    objf = stats.objf / stats.frames
    return objf if math.isfinite(objf) else -math.inf


def _first(source):
    return copy.deepcopy(source) if isinstance(source, torch.nn.Module) else model_io.load(source)


def _structure(source):
    if isinstance(source, torch.nn.Module):
        return average.structure_of(source.config, source.state_dict().keys())
    blob = model_io.read(source, mmap=True)
    return average.structure_of(blob["config"], blob["state"].keys())


def _check(source, name, first_name, ref):
    """One source has the first's structure and only finite values (checked before any scoring)."""
    if _structure(source) != ref:
        raise NnetError(f"{name}: model structure differs from {first_name}; cannot combine them")
    bad = [k for k, t in average.state_of(source).items() if t.is_floating_point() and not bool(t.isfinite().all())]
    if bad:
        raise NnetError(average.non_finite_message(name, bad))


def _running(sources, n):
    """Yield (k, running average of the newest k sources) for k = 1..n, one source loaded at a time."""
    running = _first(sources[0])
    yield 1, running
    for k in range(2, n + 1):
        average.average_into(running, [running, average.state_of(sources[k - 1])], [(k - 1) / k, 1 / k])
        yield k, running


def combine(sources, windows, labels, max_objective_evaluations=30, device="cpu"):
    """sources: models or model files, newest first. Returns (combined model, n used, initial objf,
    final objf). Every source is checked (same structure as the first, finite) before any scoring."""
    names = [str(s) if not isinstance(s, torch.nn.Module) else f"model {i + 1}" for i, s in enumerate(sources)]
    if max_objective_evaluations < 1:
        raise NnetError(f"--max-objective-evaluations must be >= 1, got {max_objective_evaluations}")
    step = math.ceil(len(sources) / max_objective_evaluations)
    best_n = 1
    for n, running in _running(sources, len(sources)):
        if n == 1:
            ref = _structure(sources[0])
            for k in range(len(sources)):   # refuse a bad model before any scoring
                _check(sources[k], names[k], names[0], ref)
            first = best_objf = _score(running, windows, labels, device)
            logger.info(f"objective function using the last model is {first:.6g}")
            continue
        if n % step == 0 or n == len(sources):
            objf = _score(running, windows, labels, device)
            logger.info(f"Combining last {n} models, objective function is {objf:.6g}")
            if objf > best_objf:
                best_n, best_objf = n, objf
    logger.info(f"Combining {best_n} nnets, objective function changed from {first:.6g} to {best_objf:.6g}")
    if best_n != len(sources):
        for _, running in _running(sources, best_n):
            pass
    diagnostics.recompute_batchnorm_stats(running, windows, device)
    return running, best_n, first, best_objf
