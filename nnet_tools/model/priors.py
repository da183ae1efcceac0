"""Class priors of an acoustic model: counted from alignments, stored in the model file, divided
out at decoding time (Kaldi's analyze-counts, nnet3-am-adjust-priors, and the division by priors
that turns network posteriors into scaled likelihoods for the decoder).

Priors are a probability vector over the model's outputs (pdf-ids). A prior is floored at
1e-15 (nnet3-am-adjust-priors' --prior-floor) so that a pdf never seen in training does not
become log(0); decoding then treats a pdf at the floor as nnet1 does, never favoured. Vector files are Kaldi's: binary (``\\0BFV``, ``\\0BDV``) or text (``[ ... ]``).
"""
import math

import numpy as np
import torch

from nnet_tools.data import tables, vectors
from nnet_tools.data.egs import MAX_TARGETS
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.model import model_io

PRIOR_FLOOR = 1.0e-15
UNSEEN_LOG_PRIOR = 0.5 * math.log(np.finfo(np.float32).max)   # log(sqrt(FLT_MAX)), 44.36


def count_pdfs(targets_rspecifier, counts_dim=None):
    """Occurrences of each pdf-id in an int-vector table (e.g. ``ark:ali-to-pdf ... |``) as
    float64 counts of length ``counts_dim`` (default: the largest id + 1), as analyze-counts."""
    if counts_dim is not None and not 0 < counts_dim <= MAX_TARGETS:
        raise NnetError(f"--counts-dim must be in [1, {MAX_TARGETS}], got {counts_dim}")
    counts = np.zeros(counts_dim or 0)
    for key, ids in tables.read_int_vectors(targets_rspecifier):
        if not ids.size:
            continue
        if ids.min() < 0:
            raise NnetError(f"{targets_rspecifier}: utterance '{key}': negative pdf-id {int(ids.min())}")
        top = int(ids.max())
        if counts_dim is not None and top >= counts_dim:
            raise NnetError(f"{targets_rspecifier}: utterance '{key}': pdf-id {top} >= --counts-dim {counts_dim}")
        if top >= MAX_TARGETS:
            raise NnetError(f"{targets_rspecifier}: utterance '{key}': pdf-id {top} is implausibly large (>= {MAX_TARGETS})")
        if top >= len(counts):
            counts = np.concatenate([counts, np.zeros(top + 1 - len(counts))])
        counts += np.bincount(ids, minlength=len(counts))
    if not counts.sum():
        raise NnetError(f"{targets_rspecifier}: no pdf-ids to count")
    return counts


def normalise(counts, floor=PRIOR_FLOOR, where="priors"):
    """Counts (or summed posteriors) -> priors: scaled to sum to 1, then floored."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or not counts.size or not np.isfinite(counts).all() or (counts < 0).any() \
            or counts.sum() <= 0:
        raise NnetError(f"{where}: need a vector of non-negative counts with a positive sum")
    return np.maximum(counts / counts.sum(), floor)


def read(path, dim=None):
    """A Kaldi vector file (binary or text, or bare numbers) as priors normalised to sum to 1 and
    floored; ``dim``, if given, must match."""
    values = np.array(vectors.read_vector(path, "priors"))
    if dim is not None and len(values) != dim:
        raise NnetError(f"{path}: priors have dimension {len(values)}, the model has {dim} outputs")
    return normalise(values, where=str(path))


def kl_divergence(p, q):
    """One-sided K-L divergence from p to q, each normalised first (Kaldi's KlDivergence)."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    p, q = p / p.sum(), q / q.sum()
    nonzero = p > 0
    return float(np.sum(p[nonzero] * np.log(p[nonzero] / q[nonzero])))


def adjust_model_priors(model_in, priors_path, model_out, floor=PRIOR_FLOOR):
    """nnet3-am-adjust-priors: store the priors (renormalised, floored) in the model file,
    logging how far they moved from the model's old priors, as Kaldi does."""
    if not 0.0 <= floor < 1.0:  # also NaN
        raise NnetError(f"--prior-floor must be in [0, 1), got {floor}")
    model, old = model_io.load(model_in, with_priors=True)
    new = read(priors_path, model.output_dim)
    new = np.maximum(new, floor)
    if old is None:
        logger.info("Model did not previously have priors attached.")
    else:
        try:
            old = stored(old, model.output_dim, model_in)
        except NnetError as e:
            logger.warning(f"{e}; replacing them")
            old = None
    if old is not None:
        i = int(np.argmax(np.abs(new - old)))
        logger.info(f"Adjusting priors: largest absolute difference was for pdf {i}, {old[i]:g} -> {new[i]:g}")
        logger.info(f"Adjusting priors: K-L divergence from old to new is {kl_divergence(old, new):g}")
    model_io.save(model, model_out, priors=new)
    logger.info(f"Modified priors of neural network model and wrote it to {model_out}")
    return new


def log_priors_for_decoding(model_priors, priors_path=None, use_priors=True, dim=None, model="the model"):
    """The log-priors nnet-compute subtracts: from ``priors_path`` if given, else the model's
    own (``model`` names its file in errors) if it has them and ``use_priors``; None means plain
    log-posteriors."""
    if priors_path is not None:
        priors = read(priors_path, dim)
    elif use_priors and model_priors is not None:
        priors = stored(model_priors, dim, model)
    else:
        return None
    log_priors = np.log(priors)
    # A pdf at the floor was never seen in training (e.g. the spoken-noise phone of an LM's <UNK>):
    # dividing by 1e-15 would add 34.5 to its log-likelihood and it would win every frame. As
    # Kaldi's nnet1 PdfPrior does, such a pdf gets the prior sqrt(FLT_MAX), so it is never favoured.
    log_priors[priors <= PRIOR_FLOOR * (1 + 1e-6)] = UNSEEN_LOG_PRIOR   # model files store float32
    return torch.from_numpy(log_priors).float()


def stored(priors, dim, where):
    """A model file's priors (model_io.load(..., with_priors=True)) as float64, checked: one
    positive finite value per output."""
    if not (isinstance(priors, torch.Tensor) and priors.is_floating_point() and priors.dim() == 1
            and (dim is None or len(priors) == dim)):
        what = f"shape {tuple(priors.shape)}" if isinstance(priors, torch.Tensor) else type(priors).__name__
        raise NnetError(f"{where}: stored priors must be {dim or 'a vector of'} floats (one per output), got {what}")
    values = priors.double().numpy()
    if not (np.isfinite(values).all() and (values > 0).all()):
        raise NnetError(f"{where}: stored priors must be positive and finite")
    return values


def log_prior_summary(log_priors):
    """A one-line description for the log: what nnet-compute is about to write."""
    if log_priors is None:
        return "writing log-posteriors (no priors)"
    return (f"writing log-likelihoods: log-posterior - log-prior, over {len(log_priors)} priors "
            f"(smallest {math.exp(float(log_priors.min())):g})")
