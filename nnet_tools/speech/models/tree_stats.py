"""Tree statistics: acc-tree-stats and sum-tree-stats (Kaldi's src/hmm/tree-accu.cc and
src/bin/sum-tree-stats.cc, in numpy), and the Gaussian objective that cluster-phones and build-tree
split and merge by (Kaldi's GaussClusterable, src/tree/clusterable-classes.cc).

An event is Kaldi's EventType: a tuple of (key, value) pairs sorted by key; key -1 is the
pdf-class (HMM state), keys 0..N-1 the phones of the context window, P the central one, phone 0
outside the utterance. Tree stats map events to Gaussian sufficient statistics (Kaldi's
GaussClusterable). The stats file is an .npz of ours, as the GMM accumulators (estimate.py).
"""
import math
from typing import NamedTuple

import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path
from nnet_tools.speech.models.gmm import load_npz

PDF_CLASS = -1      # Kaldi's kPdfClass: the key of the pdf-class in an event
VAR_FLOOR = 0.01    # acc-tree-stats --var-floor
STATS_FORMAT = "nnet-tools-tree-stats-1"


# --- statistics (acc-tree-stats, sum-tree-stats) ---------------------------------------------

class Gauss(NamedTuple):
    """Sufficient statistics of one Gaussian: frame count, sum of x, sum of x^2 (float64)."""
    count: float
    x: np.ndarray
    x2: np.ndarray

    def __add__(self, other):  # a tuple's + would concatenate
        return Gauss(self.count + other.count, self.x + other.x, self.x2 + other.x2)


def _pack(g):
    return np.concatenate([[g.count], g.x, g.x2])


def _dim(stats):
    return len(next(iter(stats.values())).x) if stats else None


def accumulate_tree_stats(stats, feats, phones, pdf_classes, N=3, P=1, ci_phones=()):
    """acc-tree-stats for one utterance: add each frame to the stats of its event, its phone in
    context plus its pdf-class. ``phones`` is the utterance's phone sequence and ``pdf_classes``
    one int array per phone, the pdf-class of each of its frames: the phones' frames follow
    each other and cover ``feats`` [T, d]. A context-independent central phone gets no context
    keys at all, as in Kaldi (tree-accu.cc omits them rather than zeroing them): no question
    can then ever be asked about its context. Returns ``stats``, updated in place."""
    if not 0 <= P < N:
        raise NnetError(f"acc-tree-stats: invalid --central-position={P} for --context-width={N}")
    feats = np.asarray(feats, dtype=np.float64)
    classes = [np.asarray(c, dtype=np.int64).reshape(-1) for c in pdf_classes]
    if len(phones) != len(classes):
        raise NnetError(f"acc-tree-stats: {len(phones)} phones but {len(classes)} pdf-class arrays")
    frames = sum(len(c) for c in classes)
    if feats.ndim != 2 or frames != len(feats):
        raise NnetError(f"acc-tree-stats: the phones cover {frames} frames but the features have "
                        f"shape {feats.shape}")
    if stats and _dim(stats) != feats.shape[1]:
        raise NnetError(f"acc-tree-stats: feature dim {feats.shape[1]} does not match the stats' {_dim(stats)}")
    if any(int(p) <= 0 for p in phones) or any((c < 0).any() for c in classes):
        raise NnetError("acc-tree-stats: phones must be positive and pdf-classes non-negative")
    ci, start = {int(p) for p in ci_phones}, 0
    for i, (phone, cls) in enumerate(zip(phones, classes)):
        window = [int(phones[i - P + j]) if 0 <= i - P + j < len(phones) else 0 for j in range(N)]
        context = tuple((j, window[j]) for j in ([P] if int(phone) in ci else range(N)))
        x = feats[start:start + len(cls)]
        for c in np.unique(cls):
            xc = x[cls == c]
            event = ((PDF_CLASS, int(c)),) + context
            g = Gauss(float(len(xc)), xc.sum(0), (xc * xc).sum(0))
            stats[event] = stats[event] + g if event in stats else g
        start += len(cls)
    return stats


def sum_stats(all_stats):
    """sum-tree-stats: the stats of several jobs added event by event (a new dict)."""
    total = {}
    for stats in all_stats:
        if total and stats and _dim(stats) != _dim(total):
            raise NnetError(f"sum-tree-stats: stats of feature dims {_dim(total)} and {_dim(stats)}")
        for event, g in stats.items():
            total[event] = total[event] + g if event in total else g
    return total


def save_stats(path, stats):
    """Write tree stats atomically as .npz: events flattened to (key, value) pairs, with the
    number of pairs of each; count, sum x and sum x^2 one row per event."""
    events = sorted(stats)
    dim = _dim(stats) or 0
    pairs = np.array([kv for e in events for kv in e], dtype=np.int32).reshape(-1, 2)
    rows = [stats[e] for e in events]
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, format=np.array(STATS_FORMAT), event_lengths=np.array([len(e) for e in events], np.int32),
                     event_pairs=pairs, count=np.array([g.count for g in rows], np.float64),
                     x=np.array([g.x for g in rows], np.float64).reshape(-1, dim),
                     x2=np.array([g.x2 for g in rows], np.float64).reshape(-1, dim))


def load_stats(path):
    """Tree stats written by save_stats, checked: a file cut short or edited is one line here."""
    d = load_npz(path, "tree stats")
    if str(d.get("format", "")) != STATS_FORMAT:
        raise NnetError(f"{path}: not a tree stats file written by nnet-tools (format '{d.get('format', '')}')")
    missing = [k for k in ("event_lengths", "event_pairs", "count", "x", "x2") if k not in d]
    if missing:
        raise NnetError(f"{path}: corrupt tree stats: no {', '.join(missing)}")
    lengths, pairs, count, x, x2 = (d[k] for k in ("event_lengths", "event_pairs", "count", "x", "x2"))
    n = len(count)
    if (lengths.ndim != 1 or lengths.dtype.kind not in "iu" or len(lengths) != n or (lengths < 1).any()
            or pairs.dtype.kind not in "iu" or pairs.shape != (int(lengths.sum()), 2)
            or count.ndim != 1 or x.ndim != 2 or x.shape[0] != n or x2.shape != x.shape
            or any(a.dtype.kind != "f" or not np.isfinite(a).all() for a in (count, x, x2)) or (count < 0).any()):
        raise NnetError(f"{path}: corrupt tree stats: its arrays are not finite numbers of matching shapes")
    stats, start = {}, 0
    for i, length in enumerate(lengths):
        event = tuple((int(k), int(v)) for k, v in pairs[start:start + length])
        start += length
        keys = [k for k, _ in event]
        if keys != sorted(set(keys)) or any(v < 0 for _, v in event) or event in stats:
            raise NnetError(f"{path}: corrupt tree stats: event {_event_str(event)} is not a sorted, "
                            f"non-negative, unique event")
        stats[event] = Gauss(float(count[i]), x[i].copy(), x2[i].copy())
    return stats


def _event_str(event):
    return " ".join(f"{k}:{v}" for k, v in event)   # Kaldi's EventTypeToString


# --- the objective ---------------------------------------------------------------------------

def _objf(s, var_floor=VAR_FLOOR):
    """GaussClusterable::Objf of packed stats s [..., 1+2d] (count, sum x, sum x^2): the data's
    log-likelihood under its own ML Gaussian, variances floored at ``var_floor``; 0 if empty."""
    s = np.asarray(s, dtype=np.float64)
    d = (s.shape[-1] - 1) // 2
    c = s[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = s[..., 1:1 + d] / c[..., None]
        var = s[..., 1 + d:] / c[..., None] - mean * mean
        floored = np.maximum(var, var_floor)
        per_frame = -0.5 * ((var / floored).sum(-1) + np.log(floored).sum(-1) + d * math.log(2 * math.pi))
        ans = c * per_frame
    return np.where((c > 0) & np.isfinite(ans), ans, 0.0)


def objf(g, var_floor=VAR_FLOOR):
    """The log-likelihood of pooled stats ``g`` (a Gauss): -0.5 count (d log 2pi + sum log var + d),
    var floored (Kaldi's exact form: sum var/floored-var in place of d)."""
    return float(_objf(_pack(g), var_floor))
