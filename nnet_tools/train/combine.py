"""Final model combination (Kaldi's nnet3-combine since 2017): the best uniform average of the
newest n models, n chosen on the combine egs with at most ``max_objective_evaluations`` scorings.

Streams: the running average is updated one model at a time, each candidate is scored in place
(its batch-norm statistics saved and restored around the scoring), and only the best n is
remembered; the winning average is then rebuilt by the same float operations from the first n
models. Model files are read a piece at a time, so what is held is the running average and a
piece of the model being added."""
import copy
import math

import torch

from nnet_tools.errors import NnetError
from nnet_tools.evaluate import diagnostics
from nnet_tools.log import logger
from nnet_tools.model import model_io
from nnet_tools.model.structure import structure_of
from nnet_tools.train import average


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
    """A copy of the first source; a file is read a piece at a time into one model (no second copy)."""
    return copy.deepcopy(source) if isinstance(source, torch.nn.Module) else average.average_files([source], [1.0])


def _structure(source):
    if isinstance(source, torch.nn.Module):
        return structure_of(source.config, source.state_dict().keys())
    blob = model_io.read(source, mmap=True)
    return structure_of(blob["config"], blob["state"].keys())


def _check(source, name, first_name, ref):
    """One source has the first's structure and only finite values (checked before any scoring)."""
    if _structure(source) != ref:
        raise NnetError(f"{name}: model structure differs from {first_name}; cannot combine them")
    if isinstance(source, torch.nn.Module):
        bad = [k for k, t in source.state_dict().items() if t.is_floating_point() and not bool(t.isfinite().all())]
    else:
        bad = average.nonfinite_keys(source)
    if bad:
        raise NnetError(average.non_finite_message(name, bad))


def _running(sources, n):
    """Yield (k, running average of the newest k sources) for k = 1..n, one source loaded at a time."""
    running = _first(sources[0])
    yield 1, running
    for k in range(2, n + 1):
        _add(running, sources[k - 1], k, str(sources[0]))
        yield k, running


@torch.no_grad()
def _add(running, source, k, first_name):
    """running := (k-1)/k running + 1/k source, by average_into's float operations; a model file
    a piece at a time (only that piece of it mapped)."""
    if isinstance(source, torch.nn.Module):
        average.average_into(running, [running, source], [(k - 1) / k, 1 / k])
        return
    for key, value in running.state_dict().items():
        if not value.is_floating_point():
            continue   # integer buffers stay the first source's, as average_into keeps them
        flat = value.view(-1)
        for start in range(0, flat.numel(), average.CHUNK):
            piece = flat[start:start + average.CHUNK]
            part = average.read_part(source, key, value.shape, start, len(piece), first_name).to(piece.device)
            piece.copy_((k - 1) / k * piece + 1 / k * part)
            del part


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
        del running   # before the rebuild makes another
        for _, running in _running(sources, best_n):
            pass
    diagnostics.recompute_batchnorm_stats(running, windows, device)
    return running, best_n, first, best_objf
