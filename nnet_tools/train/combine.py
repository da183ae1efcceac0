"""Final model combination (Kaldi's nnet3-combine since 2017): the best uniform average of the
newest n models, n chosen on the combine egs with at most ``max_objective_evaluations`` scorings."""
import copy
import math

from nnet_tools.train import average
from nnet_tools.report import diagnostics
from nnet_tools.log import logger


def _score(model, windows, labels, device):
    diagnostics.recompute_batchnorm_stats(model, windows, device)
    stats = diagnostics.compute_prob(model, windows, labels, device)
    objf = stats.objf / stats.frames
    return objf if math.isfinite(objf) else -math.inf


def combine(models, windows, labels, max_objective_evaluations=30, device="cpu"):
    """models: newest first. Returns (combined model, n used, initial objf, final objf)."""
    first = _score(copy.deepcopy(models[0]), windows, labels, device)
    logger.info(f"Combining nnets, objective function using the last model is {first:.6g}")
    best_n, best_objf, best_model = 1, first, models[0]
    running = copy.deepcopy(models[0])
    step = math.ceil(len(models) / max_objective_evaluations)
    for n in range(2, len(models) + 1):
        average.average_into(running, [running, models[n - 1]], [(n - 1) / n, 1 / n])
        if n % step == 0 or n == len(models):
            candidate = copy.deepcopy(running)
            objf = _score(candidate, windows, labels, device)
            logger.info(f"Combining last {n} models, objective function is {objf:.6g}")
            if objf > best_objf:
                best_n, best_objf, best_model = n, objf, candidate
    logger.info(f"Combining {best_n} nnets, objective function changed from {first:.6g} to {best_objf:.6g}")
    if best_model is models[0]:
        best_model = copy.deepcopy(models[0])
        diagnostics.recompute_batchnorm_stats(best_model, windows, device)
    return best_model, best_n, first, best_objf
