"""Parameter averaging (Kaldi's nnet3-average): a weighted mean over every float tensor of the
models, parameters and stored statistics (batch-norm) alike.

``average_files`` streams, as nnet3-average does: whatever the number of models it holds the
output model and CHUNK elements of one input at a time (inputs are memory-mapped and re-opened
per chunk, so no input's pages stay mapped), and sums them in float64."""
import math

import torch

from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.model import model_io
from nnet_tools.model.structure import structure_of

CHUNK = 1 << 21   # elements averaged at a time: float64 sums of 16 MB, whatever a tensor's size


def non_finite_message(path, names):
    return (f"{path}: non-finite values (NaN or inf) in {', '.join(names)}; refusing to "
            f"average it (its training job diverged?)")


def normalized_weights(weights, n):
    if weights is None:
        return [1.0 / n] * n
    if (len(weights) != n or not all(math.isfinite(w) and w >= 0 for w in weights)
            or not 0 < sum(weights) < math.inf):
        raise NnetError(f"--weights: need {n} finite non-negative weights with a positive sum, got {weights}")
    total = sum(weights)
    if abs(total - 1.0) > 0.01:
        logger.warning(f"Weights sum to {total}, normalizing to sum to one.")
    return [w / total for w in weights]


def state_of(source):
    """The tensors of a model, or of a model file memory-mapped (nothing read until touched)."""
    if isinstance(source, torch.nn.Module):
        return source.state_dict()
    return model_io.read(source, mmap=True)["state"]


def check_file_structures(paths):
    """Every model file's structure equals the first's; only the small pickled headers are read."""
    first = model_io.read(paths[0], mmap=True)
    ref = structure_of(first["config"], first["state"].keys())
    del first
    for path in paths[1:]:
        blob = model_io.read(path, mmap=True)
        if structure_of(blob["config"], blob["state"].keys()) != ref:
            raise NnetError(f"{path}: model structure differs from {paths[0]}; cannot combine them")


@torch.no_grad()
def average_files(paths, weights):
    """The weighted average of model files as a model (the first file's config and integer buffers).

    Each float tensor is summed over the files in float64 and rounded to float32 once, so the result
    is the exact weighted mean to float rounding; an input with NaN/inf is refused, naming it."""
    check_file_structures(paths)
    first = model_io.read(paths[0], mmap=True)
    model = model_io.build(first, paths[0])
    target = model.state_dict()
    for key, value in first["state"].items():
        if not value.is_floating_point():
            target[key].copy_(value)
            continue
        out = target[key] if key in target else torch.empty_like(value)   # not in target: a presoftmax scale
        flat = out.view(-1)
        for start in range(0, flat.numel(), CHUNK):
            total = torch.zeros(min(CHUNK, flat.numel() - start), dtype=torch.float64)
            for path, w in zip(paths, weights):
                part = read_part(path, key, value.shape, start, len(total), paths[0])
                total.add_(part.to(torch.float64), alpha=w)
                del part
            flat[start:start + len(total)].copy_(total)
        if key not in target:
            model.set_presoftmax_scale(out)
    return model


def read_part(path, key, shape, start, length, first):
    """Elements [start, start + length) of a model file's tensor, checked (its shape equals the
    first file's; finite)."""
    tensor = state_of(path)[key]
    if tensor.shape != shape:
        raise NnetError(f"{path}: {key} has shape {tuple(tensor.shape)}, {first} {tuple(shape)}")
    part = tensor.reshape(-1)[start:start + length]   # mapped: only its pages are read
    if not bool(part.isfinite().all()):
        raise NnetError(non_finite_message(path, [key]))
    return part


def nonfinite_keys(path):
    """The float tensors of a model file holding NaN or inf, read CHUNK elements at a time."""
    sizes = {k: t.numel() for k, t in state_of(path).items() if t.is_floating_point()}
    return [key for key, n in sizes.items()
            if not all(bool(_mapped(path, key, start, CHUNK).isfinite().all()) for start in range(0, n, CHUNK))]


def _mapped(path, key, start, length):
    """Elements [start, start + length) of a model file's tensor, memory-mapped: only their pages
    are read, and they are released with the returned view."""
    return state_of(path)[key].reshape(-1)[start:start + length]


@torch.no_grad()
def average_into(target, sources, weights):
    """target's float tensors := sum_i w_i source_i's (sources: models or state dicts), summed in
    float32 in order; integer buffers come from the first source."""
    states = [s.state_dict() if isinstance(s, torch.nn.Module) else s for s in sources]
    for key, value in target.state_dict().items():
        if value.is_floating_point():
            value.copy_(sum(w * s[key].to(value.device) for w, s in zip(weights, states)))
        else:
            value.copy_(states[0][key])
    return target
