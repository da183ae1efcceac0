"""Per-utterance network outputs (Kaldi's nnet3-compute), and scoring them against targets."""
import numpy as np
import torch

from nnet_tools.data import tables
from nnet_tools.report.diagnostics import EVAL_BATCH, Stats
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.model.nnet import padded


@torch.no_grad()
def log_posteriors(model, feats, key="", where="", log_priors=None, device="cpu"):
    """[T, D] features -> [T, num_classes] log-posteriors, minus log-priors if given
    (scaled log-likelihoods for decoding)."""
    if feats.shape[1] != model.input_dim:
        raise NnetError(f"{where}: utterance {key!r}: feature dim {feats.shape[1]} does not match the model's {model.input_dim}")
    if feats.shape[0] == 0:
        return np.zeros((0, model.output_dim), np.float32)
    model.to(device).eval()
    left, right = model.left_context, model.right_context
    x = padded(torch.from_numpy(np.asarray(feats, dtype=np.float32)), left, right).to(device)
    # Chunks of EVAL_BATCH frames, each computed in one pass; a chunk re-reads only its context.
    t = feats.shape[0]
    out = torch.cat([model.forward_chunk(x[None, s:min(s + EVAL_BATCH, t) + left + right])[0].cpu()
                     for s in range(0, t, EVAL_BATCH)])
    if log_priors is not None:
        out -= log_priors
    return out.numpy()


def utterance_stats(model, feats_rspecifier, targets_rspecifier, device="cpu", cmvn=None):
    """Log-likelihood and accuracy over every labelled frame of a data set (e.g. the test set),
    its features normalised first by ``cmvn`` (a data.cmvn.CmvnApplier) if given.

    Utterances without targets, or whose targets do not match their frame count, are skipped
    and counted, as Kaldi's egs dumping does."""
    stats, skipped = Stats(0.0, 0.0, 0), 0
    with tables.RandomAccessIntVectors(targets_rspecifier) as targets:
        for key, feats in tables.read_matrices(feats_rspecifier):
            if key not in targets or len(targets[key]) != len(feats):
                skipped += 1
                logger.warning(f"{targets_rspecifier}: no targets (or wrong length) for utterance {key!r}; skipping it")
                continue
            labels = torch.from_numpy(targets[key].astype(np.int64))
            if labels.max() >= model.output_dim or labels.min() < 0:
                raise NnetError(f"{targets_rspecifier}: utterance {key!r}: target id {int(labels.max())} "
                                f"outside [0, {model.output_dim})")
            if cmvn is not None:
                feats = cmvn(key, feats)
            stats.add(torch.from_numpy(log_posteriors(model, feats, key, feats_rspecifier, device=device)), labels)
    if stats.frames == 0:
        raise NnetError(f"{feats_rspecifier}: no utterance with targets to evaluate on")
    logger.info(f"Evaluated {stats.frames} frames; skipped {skipped} utterances without matching targets.")
    return stats
