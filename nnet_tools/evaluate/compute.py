"""Per-utterance network outputs (Kaldi's nnet3-compute), and scoring them against targets."""
import collections

import numpy as np
import torch

from nnet_tools.data import tables
from nnet_tools.data.finite import require_finite
from nnet_tools.evaluate.diagnostics import EVAL_BATCH, Stats
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.model.nnet import padded


@torch.no_grad()
def log_posteriors(model, feats, key="", where="", log_priors=None, device="cpu"):
    """[T, D] features -> [T, num_classes] log-posteriors, minus log-priors if given
    (scaled log-likelihoods for decoding)."""
    _check_features(model, feats, key, where)
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


@torch.no_grad()
def log_posteriors_of_table(model, utterances, where="", log_priors=None, device="cpu"):
    """(key, [T, D] features) pairs -> (key, log_posteriors(model, feats, ...)) pairs, in order.
    Utterances shorter than EVAL_BATCH frames are computed together: each padded at its own
    edges, joined along time, one pass per EVAL_BATCH frames or so. Every output frame kept reads
    only its own utterance, so each result is its own (up to float rounding); a table of
    one-frame utterances (images) costs one pass per thousands of them instead of one each."""
    model.to(device).eval()
    left, right = model.left_context, model.right_context
    group, rows = [], 0
    for key, feats in utterances:
        if len(feats) >= EVAL_BATCH:   # log_posteriors checks it
            yield from _joined(model, group, left, right, log_priors, device)
            group, rows = [], 0
            yield key, log_posteriors(model, feats, key, where, log_priors, device)
            continue
        _check_features(model, feats, key, where)
        group.append((key, feats))
        rows += left + len(feats) + right
        if rows >= EVAL_BATCH:
            yield from _joined(model, group, left, right, log_priors, device)
            group, rows = [], 0
    yield from _joined(model, group, left, right, log_priors, device)


def _joined(model, group, left, right, log_priors, device):
    """One forward pass over the group's padded utterances end to end; each one's outputs are
    the rows from its start in the join (its first frame's window begins there)."""
    if not group:
        return
    x = torch.cat([padded(torch.from_numpy(np.asarray(feats, dtype=np.float32)), left, right)
                   for _, feats in group if len(feats)]).to(device)
    out = model.forward_chunk(x[None])[0].cpu() if len(x) else None
    if log_priors is not None and out is not None:
        out -= log_priors
    start = 0
    for key, feats in group:
        if not len(feats):
            yield key, np.zeros((0, model.output_dim), np.float32)
            continue
        yield key, out[start:start + len(feats)].numpy()
        start += left + len(feats) + right


def _check_features(model, feats, key, where):
    if feats.shape[1] != model.input_dim:
        raise NnetError(f"{where}: utterance {key!r}: feature dim {feats.shape[1]} does not match the model's {model.input_dim}")
    require_finite(feats, f"{where}: utterance {key!r}")


def utterance_stats(model, feats_rspecifier, targets_rspecifier, device="cpu", cmvn=None):
    """Log-likelihood and accuracy over every labelled frame of a data set (e.g. the test set),
    its features normalised first by ``cmvn`` (a data.cmvn.CmvnApplier) if given.

    Utterances without targets, or whose targets do not match their frame count, are skipped
    and counted, as Kaldi's egs dumping does."""
    stats, skipped = Stats(0.0, 0.0, 0), 0
    labels = collections.deque()  # of the utterances read and not yet computed, in order

    def labelled():
        nonlocal skipped
        for key, feats in tables.read_matrices(feats_rspecifier):
            if len(feats) == 0:
                skipped += 1
                logger.warning(f"{feats_rspecifier}: utterance {key!r} has no frames; skipping it")
                continue
            if key not in targets or len(targets[key]) != len(feats):
                skipped += 1
                logger.warning(f"{targets_rspecifier}: no targets (or wrong length) for utterance {key!r}; skipping it")
                continue
            ids = torch.from_numpy(targets[key].astype(np.int64))
            bad = ids[(ids < 0) | (ids >= model.output_dim)]
            if len(bad):
                raise NnetError(f"{targets_rspecifier}: utterance {key!r}: target id {int(bad[0])} "
                                f"outside [0, {model.output_dim})")
            labels.append(ids)
            yield key, feats if cmvn is None else cmvn(key, feats)

    with tables.RandomAccessIntVectors(targets_rspecifier) as targets:
        for _, out in log_posteriors_of_table(model, labelled(), feats_rspecifier, device=device):
            stats.add(torch.from_numpy(out), labels.popleft())
    if stats.frames == 0:
        raise NnetError(f"{feats_rspecifier}: no utterance with targets to evaluate on")
    logger.info(f"Evaluated {stats.frames} frames; skipped {skipped} utterances without frames or matching targets.")
    return stats
