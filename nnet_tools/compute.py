"""Per-utterance network outputs (Kaldi's nnet3-compute)."""
import numpy as np
import torch

from .diagnostics import EVAL_BATCH
from .errors import NnetError
from .nnet import frame_windows


@torch.no_grad()
def log_posteriors(model, feats, key="", where="", log_priors=None, device="cpu"):
    """[T, D] features -> [T, num_classes] log-posteriors, minus log-priors if given
    (scaled log-likelihoods for decoding)."""
    if feats.shape[1] != model.input_dim:
        raise NnetError(f"{where}: utterance {key!r}: feature dim {feats.shape[1]} does not match the model's {model.input_dim}")
    model.to(device).eval()
    windows = frame_windows(torch.from_numpy(np.asarray(feats, dtype=np.float32)), model.left_context, model.right_context)
    out = torch.cat([model(windows[s:s + EVAL_BATCH].to(device)).cpu() for s in range(0, len(windows), EVAL_BATCH)])
    if log_priors is not None:
        out -= log_priors
    return out.numpy()


def read_priors(path, dim):
    """Class priors from a Kaldi text vector file ('[ p1 p2 ... ]' or plain numbers), as log-priors."""
    try:
        with open(path) as f:
            values = [float(v) for v in f.read().replace("[", " ").replace("]", " ").split()]
    except OSError as e:
        raise NnetError(f"{path}: cannot read priors: {e.strerror}") from None
    except ValueError:
        raise NnetError(f"{path}: priors must be a vector of numbers") from None
    priors = torch.tensor(values, dtype=torch.float32)
    if len(priors) != dim or (priors <= 0).any():
        raise NnetError(f"{path}: need {dim} positive priors, got {len(priors)} values")
    return torch.log(priors / priors.sum())
