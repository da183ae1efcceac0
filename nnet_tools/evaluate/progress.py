"""Per-layer parameter change between two models (Kaldi's nnet3-show-progress without egs).

Components are named as nnet3 names them (``tdnn1.affine``), values printed as C++ streams do
(6 significant digits), and the lines carry nnet3-show-progress's header, so Kaldi's
parse_progress_logs_for_param_diff and generate_plots.py read them."""
import torch

from nnet_tools.errors import NnetError
from nnet_tools.log import kaldi_origin, logger
from nnet_tools.model.structure import structure


def _norm(affine):
    return torch.sqrt((affine.weight.detach() ** 2).sum() + (affine.bias.detach() ** 2).sum()).item()


def show_progress(old, new, old_path="old", new_path="new"):
    """Returns {name: (difference, new norm, relative difference)} and logs Kaldi's three lines."""
    if structure(old) != structure(new):  # a dropout schedule changes only the proportions
        raise NnetError(f"{new_path}: structure differs from {old_path}; cannot compare")
    rows = {}
    for (name, a_old), (_, a_new) in zip(old.updatable(), new.updatable()):
        diff = torch.sqrt(((a_old.weight - a_new.weight) ** 2).sum() + ((a_old.bias - a_new.bias) ** 2).sum()).item()
        old_norm = _norm(a_old)
        rows[f"{name}.affine"] = (diff, _norm(a_new), diff / old_norm if old_norm > 0 else float("inf"))

    def fmt(i):
        return "[ " + " ".join(f"{name}:{vals[i]:g}" for name, vals in rows.items()) + " ]"

    def origin(line):
        return kaldi_origin("nnet3-show-progress", "main", "nnet3-show-progress.cc", line)
    logger.info(f"Parameter differences per layer are {fmt(0)}", extra=origin(143))
    logger.info(f"Norms of parameter matrices from {new_path} are {fmt(1)}", extra=origin(153))
    logger.info(f"Relative parameter differences per layer are {fmt(2)}", extra=origin(157))
    return rows
