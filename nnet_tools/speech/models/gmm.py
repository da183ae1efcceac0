"""The GMM acoustic model and its file: gmm-init-mono, the model file, and input checks.

A model is a transition model plus one diagonal GMM per pdf, as Kaldi's final.mdl, and the
context-dependency tree its pdfs come from (Kaldi keeps that in a separate ``tree`` file; a
monophone model's tree follows from its topology). Its file differs from Kaldi's (see the
README's "Where we differ"): a numpy .npz (topology text, the tree as Kaldi's binary
ContextDependency bytes when it is not the monophone one, transition log-probs, Gaussians per
pdf; read with allow_pickle=False, so it cannot run code).
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see nnet_tools/speech/__init__.py)

import os
import re
import zipfile

import numpy as np

from nnet_tools.data.finite import require_finite
from nnet_tools.errors import NnetError, read_error
from nnet_tools.fileio import atomic_path
from nnet_tools.log import logger

FORMAT = "nnet-tools-gmm-1"


class Model:
    """A transition model plus one diagonal GMM per pdf (Kaldi's final.mdl), and its tree
    (a kaldi_hmm_gmm.ContextDependency; None: the topology's monophone tree)."""

    def __init__(self, topo_text, tm, am, ctx=None):
        self.topo_text, self.tm, self.am, self.ctx = topo_text, tm, am, ctx

    @property
    def dim(self):
        return self.am.dim

    @property
    def num_pdfs(self):
        return self.am.num_pdfs

    def tid2pdf(self):
        """Array a with a[tid] = pdf-id (a[0] = -1: transition-ids start at 1)."""
        return _tid2pdf(self.tm)

    def check_lang(self, lang, where):
        """This model's topology covers exactly the lang's phones (a model from another lang dir
        would compile graphs whose phones mean other things, or fail inside Kaldi)."""
        phones, want = sorted(_topology(self.topo_text).phones), sorted(lang.silence + lang.nonsilence)
        if phones != want:
            raise NnetError(f"{where}: the model's {len(phones)} phones are not the lang's {len(want)} "
                            f"(phones {sorted(set(phones) ^ set(want))[:5]} differ): model and lang dir "
                            f"come from different lexicons")

    def tree(self):
        return self.ctx if self.ctx is not None else monophone_tree(_topology(self.topo_text))

    def tid_table(self):
        """Per transition-id (index 0 unused): what Kaldi's TransitionModel answers about it."""
        return TidTable(self.tm, _topology(self.topo_text))


class TidTable:
    """Arrays over transition-ids: transition-state, phone, HMM state, pdf-class of that state,
    whether it is a self-loop and whether it leaves the phone (Kaldi's IsFinal)."""

    def __init__(self, tm, topo):
        n = tm.num_transition_ids + 1
        self.state = np.asarray(tm.id2state, dtype=np.int32)
        self.first_tid = np.asarray(tm.state2id, dtype=np.int32)  # transition-state -> its first transition-id
        tuples = [t.__getstate__() for t in tm.tuples]           # (phone, HMM state, pdfs)
        self.phone, self.hmm_state, self.pdf_class = (np.zeros(n, dtype=np.int32) for _ in range(3))
        self.is_final, self.is_self_loop = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        for t in range(1, n):
            self.phone[t], self.hmm_state[t] = tuples[self.state[t] - 1][:2]
            self.pdf_class[t] = topo.topology_for_phone(self.phone[t])[self.hmm_state[t]].forward_pdf_class
            self.is_final[t], self.is_self_loop[t] = tm.is_final(t), tm.is_self_loop(t)


def monophone_tree(topo):
    return khg.monophone_context_dependency(phones=topo.phones,
                                            phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes())


def tree_from_bytes(data):
    """A ContextDependency from Kaldi's binary stream of it (no header), as __getstate__ gives."""
    ctx = khg.ContextDependency.__new__(khg.ContextDependency)
    ctx.__setstate__(([int(b) for b in data],))
    return ctx


def tree_bytes(ctx):
    return np.array(ctx.__getstate__()[0], dtype=np.int8)


def _tid2pdf(tm):
    return np.array([-1] + [tm.transition_id_to_pdf(t) for t in range(1, tm.num_transition_ids + 1)], dtype=np.int32)


def kaldi_reason(error):
    """The message of a RuntimeError from Kaldi's C++ code, on one line without its '[E]' tag."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return re.sub(r"^\[[EWI]\]\s*", "", lines[-1] if lines else type(error).__name__)


def check_tids(tids, num_tids, where):
    """Transition-ids are 1..num_tids; anything else is an alignment from another model."""
    tids = np.asarray(tids)
    bad = (tids < 1) | (tids > num_tids)
    if bad.any():
        raise NnetError(f"{where}: transition-id {int(tids[bad][0])} out of range [1, {num_tids}] "
                        f"(an alignment from another model?)")


def usable_features(feats, dim, where):
    """Whether an utterance's features can be used with a model of feature dim ``dim`` (None:
    any): a zero-length one is warned about and skipped, as Kaldi's programs do; a wrong dim or
    a NaN or infinite value is an error (Kaldi would carry the NaN into the model)."""
    if len(feats) == 0:
        logger.warning(f"{where}: zero-length utterance; skipping it")
        return False
    if dim is not None and feats.shape[1] != dim:
        raise NnetError(f"{where}: feature dim {feats.shape[1]} does not match the model's {dim}")
    require_finite(feats, where)
    return True


def _topology(text):
    topo = khg.HmmTopology()
    topo.read(text)
    return topo


def read_topology(path):
    """A lang dir's ``topo`` file (Kaldi's text HmmTopology): (its text, the HmmTopology)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, "topology file", e) from None
    try:
        return text, _topology(text)
    except RuntimeError as e:
        raise NnetError(f"{path}: not a Kaldi topology ({kaldi_reason(e)})") from None


def _transition_model(topo_text, ctx=None):
    topo = _topology(topo_text)
    return khg.TransitionModel(ctx_dep=ctx if ctx is not None else monophone_tree(topo), hmm_topo=topo)


def init_mono(topo_text, feats, shared_phones=None):
    """gmm-init-mono: every pdf one Gaussian with the global mean and variance of ``feats``.
    ``shared_phones`` (phones/sets.int: the word-position variants of each phone): phones of a
    set share their pdfs, as gmm-init-mono --shared-phones."""
    if len(feats) == 0:
        raise NnetError("gmm-init-mono: no features to initialise from")
    if len({f.shape[1] for f in feats}) != 1:
        raise NnetError(f"gmm-init-mono: utterances of different feature dims {sorted({f.shape[1] for f in feats})}")
    ctx = None
    if shared_phones and any(len(s) > 1 for s in shared_phones):
        topo = _topology(topo_text)
        if sorted(p for s in shared_phones for p in s) != sorted(topo.phones):
            raise NnetError("gmm-init-mono: the --shared-phones sets do not cover the topology's phones once each")
        ctx = khg.monophone_context_dependency_shared(phone_classes=[sorted(s) for s in shared_phones],
                                                      phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes())
    x = np.concatenate(feats).astype(np.float64)
    mean, var = x.mean(0), np.maximum(x.var(0), 1e-4)
    tm = _transition_model(topo_text, ctx)
    gmm = khg.DiagGmm(nmix=1, dim=x.shape[1])
    gmm.set_weights(np.ones(1, dtype=np.float32))
    gmm.set_means(mean[None, :].astype(np.float32))
    gmm.set_invvars((1.0 / var)[None, :].astype(np.float32))
    gmm.compute_gconsts()
    am = khg.AmDiagGmm()
    for _ in range(tm.num_pdfs):
        am.add_pdf(gmm)
    return Model(topo_text, tm, am, ctx)


def save(model, path):
    """Write ``model`` atomically as .npz (np.savez appends no suffix to an open file)."""
    weights, means, variances, counts = [], [], [], []
    for p in range(model.num_pdfs):
        g = model.am.get_pdf(p)
        counts.append(g.num_gauss)
        weights.append(np.asarray(g.weights, dtype=np.float64))
        means.append(np.asarray(g.means, dtype=np.float64))
        variances.append(np.asarray(g.vars, dtype=np.float64))
    state = model.tm.__getstate__()
    for name, arrays in (("weights", weights), ("means", means), ("vars", variances)):
        if not all(np.isfinite(a).all() for a in arrays):  # a file no program could load
            raise NnetError(f"{path}: not written: the GMM's {name} are not finite (too large a --perturb-factor?)")
    tree = {} if model.ctx is None else {"tree": tree_bytes(model.ctx)}
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, format=np.array(FORMAT), topo=np.array(model.topo_text), **tree,
                     log_probs=np.array(state[6]), non_self_loop_log_probs=np.array(state[7]),
                     num_gauss=np.array(counts, dtype=np.int32), weights=np.concatenate(weights),
                     means=np.concatenate(means), vars=np.concatenate(variances), tid2pdf=model.tid2pdf())


def load_npz(path, what):
    if not os.path.exists(path) or os.path.isdir(path):
        raise NnetError(f"{path}: {what} file " + ("is a directory" if os.path.isdir(path) else "does not exist"))
    if os.path.isfile(path) and os.access(path, os.R_OK) and not zipfile.is_zipfile(path):  # numpy's message would talk of pickles
        raise NnetError(f"{path}: not a {what} file (not an .npz archive: truncated, or another format)")
    try:
        data = np.load(path, allow_pickle=False)
        return {k: data[k] for k in data.files}
    except PermissionError as e:
        raise NnetError(f"{path}: cannot read {what} file: {e.strerror}") from None
    except Exception as e:  # numpy raises several types for a file that is not an npz
        raise NnetError(f"{path}: not a {what} file ({e})") from None


_MODEL_ARRAYS = ("topo", "log_probs", "non_self_loop_log_probs", "num_gauss", "weights", "means", "vars", "tid2pdf")


def _check_model_arrays(d, path):
    """The arrays of a model file agree with each other: a file edited or cut short is one line
    here, not a C++ check failing later (or, worse, Gaussians read from the wrong rows)."""
    missing = [k for k in _MODEL_ARRAYS if k not in d]
    if missing:
        raise NnetError(f"{path}: corrupt GMM model: no {', '.join(missing)}")
    counts, means, variances, weights = d["num_gauss"], d["means"], d["vars"], d["weights"]
    if counts.ndim != 1 or counts.dtype.kind not in "iu" or (counts < 1).any():
        raise NnetError(f"{path}: corrupt GMM model: num_gauss must be positive integers")
    total = int(counts.sum())
    if means.ndim != 2 or means.shape[0] != total or variances.shape != means.shape or weights.shape != (total,):
        raise NnetError(f"{path}: corrupt GMM model: {total} Gaussians, but means {means.shape}, "
                        f"vars {variances.shape}, weights {weights.shape}")
    for name in ("log_probs", "non_self_loop_log_probs", "weights", "means", "vars"):
        if d[name].dtype.kind != "f" or not np.isfinite(d[name]).all():
            raise NnetError(f"{path}: corrupt GMM model: {name} must be finite numbers")
    if (variances <= 0).any() or (weights < 0).any():
        raise NnetError(f"{path}: corrupt GMM model: variances must be positive and weights non-negative")


def is_kaldi_model(path):
    """Whether ``path`` starts as a Kaldi model file does (binary or text TransitionModel)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False    # the reader that follows names the problem
    return head.startswith(b"\0B<TransitionModel>") or head.lstrip().startswith(b"<TransitionModel>")


def load(path):
    try:
        d = load_npz(path, "GMM model")
    except NnetError:
        if is_kaldi_model(path):   # the programs' examples say final.mdl: ours, but Kaldi's has that name too
            raise NnetError(f"{path}: a Kaldi model file; this program reads the .npz GMM that nnet-gmm-* write "
                            f"(nnet-gmm-copy {path} final.npz converts a monophone one)") from None
        raise
    if str(d.get("format", "")) != FORMAT:
        raise NnetError(f"{path}: not a GMM model written by nnet-gmm-* (format '{d.get('format', '')}')")
    _check_model_arrays(d, path)
    topo_text = str(d["topo"])
    try:
        ctx = tree_from_bytes(d["tree"]) if "tree" in d else None
    except RuntimeError as e:
        raise NnetError(f"{path}: corrupt GMM model: its tree does not parse ({kaldi_reason(e)})") from None
    try:
        tm = _transition_model(topo_text, ctx)
    except RuntimeError as e:
        raise NnetError(f"{path}: corrupt GMM model: its topology does not parse ({kaldi_reason(e)})") from None
    state = tm.__getstate__()
    if len(state[6]) != len(d["log_probs"]) or len(state[7]) != len(d["non_self_loop_log_probs"]):
        raise NnetError(f"{path}: transition log-probs do not match the stored topology")
    if len(d["num_gauss"]) != tm.num_pdfs or not np.array_equal(d["tid2pdf"], _tid2pdf(tm)):
        raise NnetError(f"{path}: corrupt GMM model: {len(d['num_gauss'])} GMMs and its transition-id map "
                        f"do not match the topology's {tm.num_pdfs} pdfs")
    # kaldi-hmm-gmm's __setstate__ on a built TransitionModel is a no-op (it kept the topology's
    # initial probabilities): the trained ones go into a new, unbuilt object.
    tm = khg.TransitionModel.__new__(khg.TransitionModel)
    tm.__setstate__(state[:6] + ([float(v) for v in d["log_probs"]],
                                 [float(v) for v in d["non_self_loop_log_probs"]]) + state[8:])
    am = khg.AmDiagGmm()
    start = 0
    for n in d["num_gauss"]:
        g = khg.DiagGmm(nmix=int(n), dim=d["means"].shape[1])
        g.set_weights(d["weights"][start:start + n].astype(np.float32))
        g.set_means(d["means"][start:start + n].astype(np.float32))
        g.set_invvars((1.0 / d["vars"][start:start + n]).astype(np.float32))
        g.compute_gconsts()
        am.add_pdf(g)
        start += n
    return Model(topo_text, tm, am, ctx)


def load_tid2pdf(path):
    """Just the transition-id -> pdf-id map of a model file (decoding needs no GMM code)."""
    d = load_npz(path, "GMM model")
    if "tid2pdf" not in d:
        raise NnetError(f"{path}: no transition-id map in this model file")
    m = d["tid2pdf"]
    if m.ndim != 1 or m.dtype.kind not in "iu" or len(m) < 2 or m[0] != -1 or (m[1:] < 0).any():
        raise NnetError(f"{path}: corrupt GMM model: tid2pdf is not a map from transition-ids 1.. to pdf-ids")
    return m


def num_gauss(model):
    return model.am.num_gauss


def transform_means(model, matrix, where):
    """gmm-transform-means: every mean mu becomes A mu (or A [mu; 1] for an affine A), the
    variances kept, as Kaldi does after an MLLT update (the transform is nearly orthogonal)."""
    a = np.asarray(matrix, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != model.dim or a.shape[1] not in (model.dim, model.dim + 1):
        raise NnetError(f"{where}: a {a.shape} matrix cannot transform the means of a dim-{model.dim} model")
    for p in range(model.num_pdfs):
        for k in range(model.am.num_gauss_in_pdf(p)):
            mean = np.asarray(model.am.get_gaussian_mean(p, k), dtype=np.float64)
            new = a[:, :model.dim] @ mean + (a[:, model.dim] if a.shape[1] > model.dim else 0.0)
            model.am.set_gaussian_mean(p, k, new.astype(np.float32))
    model.am.compute_gconsts()


def init_from_leaf_stats(topo_text, ctx, leaf_stats, var_floor=0.01, log=None):
    """gmm-init-model: one Gaussian per pdf of the tree ``ctx`` from its pooled statistics
    (leaf_stats[pdf]: a tree_stats.Gauss; None for a leaf without any, which gets the global ones, as
    Kaldi does, and a warning). Variances are floored at ``var_floor``."""
    tm = _transition_model(topo_text, ctx)
    seen = [g for g in leaf_stats if g is not None]
    if not seen:
        raise NnetError("gmm-init-model: no stats")
    total = seen[0]
    for g in seen[1:]:
        total = total + g
    am = khg.AmDiagGmm()
    for pdf, g in enumerate(leaf_stats):
        if g is None and log:
            log.warning(f"Tree has pdf-id {pdf} with no stats; using the stats of all pdfs")
        g = total if g is None else g
        if g.count < 100 and log:
            log.warning(f"Very small count for state {pdf}: {g.count:g}")
        mean = g.x / g.count
        var = np.maximum(g.x2 / g.count - mean * mean, var_floor)
        gauss = khg.DiagGmm(nmix=1, dim=len(mean))
        gauss.set_weights(np.ones(1, dtype=np.float32))
        gauss.set_means(mean[None, :].astype(np.float32))
        gauss.set_invvars((1.0 / var)[None, :].astype(np.float32))
        gauss.compute_gconsts()
        am.add_pdf(gauss)
    return Model(topo_text, tm, am, ctx)
