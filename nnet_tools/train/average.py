"""Parameter averaging (Kaldi's nnet3-average): a weighted mean over every float tensor of the
models, parameters and stored statistics (batch-norm) alike."""
import torch

from nnet_tools.errors import NnetError
from nnet_tools.log import logger


def _structure(model):
    """What must agree for models to be averaged: the config without dropout proportions (a
    dropout schedule changes them between iterations; the result keeps the first model's) and
    the stored tensors (e.g. only one has a presoftmax scale)."""
    layers = [{k: v for k, v in layer.items() if k != "dropout-proportion"} for layer in model.config["layers"]]
    return {**model.config, "layers": layers}, list(model.state_dict().keys())


def check_same_structure(models, paths):
    ref = _structure(models[0])
    for model, path in zip(models[1:], paths[1:]):
        if _structure(model) != ref:
            raise NnetError(f"{path}: model structure differs from {paths[0]}; cannot combine them")


def check_finite(models, paths):
    """A model with NaN/inf anywhere would make the average NaN: refuse it, naming it."""
    for model, path in zip(models, paths):
        bad = model.nonfinite()
        if bad:
            raise NnetError(f"{path}: non-finite values (NaN or inf) in {', '.join(bad)}; refusing to "
                            f"average it (its training job diverged?)")


def normalized_weights(weights, n):
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise NnetError(f"--weights: need {n} non-negative weights with a positive sum, got {weights}")
    total = sum(weights)
    if abs(total - 1.0) > 0.01:
        logger.warning(f"Weights sum to {total}, normalizing to sum to one.")
    return [w / total for w in weights]


@torch.no_grad()
def average_into(target, models, weights):
    """target's float tensors := sum_i w_i model_i's; integer buffers come from the first model."""
    states = [m.state_dict() for m in models]
    for key, value in target.state_dict().items():
        if value.is_floating_point():
            value.copy_(sum(w * s[key].to(value.device) for w, s in zip(weights, states)))
        else:
            value.copy_(states[0][key])
    return target
