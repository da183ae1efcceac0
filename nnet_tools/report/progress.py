"""Per-layer parameter change between two models (Kaldi's nnet3-show-progress without egs)."""
import torch

from nnet_tools.errors import NnetError
from nnet_tools.log import logger


def _norm(affine):
    return torch.sqrt((affine.weight.detach() ** 2).sum() + (affine.bias.detach() ** 2).sum()).item()


def show_progress(old, new, old_path="old", new_path="new"):
    """Returns {name: (difference, new norm, relative difference)} and logs Kaldi's three lines."""
    if old.config != new.config:
        raise NnetError(f"{new_path}: structure differs from {old_path}; cannot compare")
    rows = {}
    for (name, a_old), (_, a_new) in zip(old.updatable(), new.updatable()):
        diff = torch.sqrt(((a_old.weight - a_new.weight) ** 2).sum() + ((a_old.bias - a_new.bias) ** 2).sum()).item()
        old_norm = _norm(a_old)
        rows[name] = (diff, _norm(a_new), diff / old_norm if old_norm > 0 else float("inf"))

    def fmt(i):
        return "[ " + " ".join(f"{name}:{vals[i]:.4g}" for name, vals in rows.items()) + " ]"
    logger.info(f"Parameter differences per layer are {fmt(0)}")
    logger.info(f"Norms of parameter matrices from {new_path} are {fmt(1)}")
    logger.info(f"Relative parameter differences per layer are {fmt(2)}")
    return rows
