"""Monophone HMM-GMM training and alignment with Kaldi's own code (kaldi-hmm-gmm).

The pieces of Kaldi's steps/train_mono.sh, one function per Kaldi program: gmm-init-mono,
compile-train-graphs, align-equal-compiled, gmm-align-compiled, gmm-acc-stats-ali, gmm-sum-accs +
gmm-est (with mix-up), ali-to-pdf, gmm-compute-likes.

Files differ from Kaldi's (see the README's "Where we differ"): a model is a numpy .npz (topology
text, transition log-probs, Gaussians per pdf; read with allow_pickle=False, so it cannot run
code), and the accumulators are .npz sums of occupancies and first and second moments per
Gaussian, which add across jobs as gmm-sum-accs does.
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see __init__)
import kaldifst

import os
import re
import zipfile

import numpy as np

from nnet_tools.data.tables import stderr_captured
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path
from nnet_tools.log import logger

FORMAT = "nnet-tools-gmm-1"


class Model:
    """A transition model plus one diagonal GMM per pdf (Kaldi's final.mdl)."""

    def __init__(self, topo_text, tm, am):
        self.topo_text, self.tm, self.am = topo_text, tm, am

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
        topo = _topology(self.topo_text)
        return khg.monophone_context_dependency(phones=topo.phones,
                                                phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes())


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
    if not np.isfinite(feats).all():
        raise NnetError(f"{where}: NaN or infinite features")
    return True


def _topology(text):
    topo = khg.HmmTopology()
    topo.read(text)
    return topo


def _transition_model(topo_text):
    topo = _topology(topo_text)
    tree = khg.monophone_context_dependency(phones=topo.phones,
                                            phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes())
    return khg.TransitionModel(ctx_dep=tree, hmm_topo=topo)


def init_mono(topo_text, feats):
    """gmm-init-mono: every pdf one Gaussian with the global mean and variance of ``feats``."""
    if len(feats) == 0:
        raise NnetError("gmm-init-mono: no features to initialise from")
    if len({f.shape[1] for f in feats}) != 1:
        raise NnetError(f"gmm-init-mono: utterances of different feature dims {sorted({f.shape[1] for f in feats})}")
    x = np.concatenate(feats).astype(np.float64)
    mean, var = x.mean(0), np.maximum(x.var(0), 1e-4)
    tm = _transition_model(topo_text)
    gmm = khg.DiagGmm(nmix=1, dim=x.shape[1])
    gmm.set_weights(np.ones(1, dtype=np.float32))
    gmm.set_means(mean[None, :].astype(np.float32))
    gmm.set_invvars((1.0 / var)[None, :].astype(np.float32))
    gmm.compute_gconsts()
    am = khg.AmDiagGmm()
    for _ in range(tm.num_pdfs):
        am.add_pdf(gmm)
    return Model(topo_text, tm, am)


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
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, format=np.array(FORMAT), topo=np.array(model.topo_text),
                     log_probs=np.array(state[6]), non_self_loop_log_probs=np.array(state[7]),
                     num_gauss=np.array(counts, dtype=np.int32), weights=np.concatenate(weights),
                     means=np.concatenate(means), vars=np.concatenate(variances), tid2pdf=model.tid2pdf())


def _load_npz(path, what):
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


def load(path):
    d = _load_npz(path, "GMM model")
    if str(d.get("format", "")) != FORMAT:
        raise NnetError(f"{path}: not a GMM model written by nnet-gmm-* (format '{d.get('format', '')}')")
    _check_model_arrays(d, path)
    topo_text = str(d["topo"])
    try:
        tm = _transition_model(topo_text)
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
    return Model(topo_text, tm, am)


def load_tid2pdf(path):
    """Just the transition-id -> pdf-id map of a model file (decoding needs no GMM code)."""
    d = _load_npz(path, "GMM model")
    if "tid2pdf" not in d:
        raise NnetError(f"{path}: no transition-id map in this model file")
    m = d["tid2pdf"]
    if m.ndim != 1 or m.dtype.kind not in "iu" or len(m) < 2 or m[0] != -1 or (m[1:] < 0).any():
        raise NnetError(f"{path}: corrupt GMM model: tid2pdf is not a map from transition-ids 1.. to pdf-ids")
    return m


# ---------------------------------------------------------------------------------------------
# Graphs and alignment.

class GraphCompiler:
    """compile-train-graphs: per-utterance HCLG of the transcript, without transition probs
    (Kaldi adds them at alignment time, as they change every pass)."""

    def __init__(self, model, lang, lexicon_fst, where="lang"):
        model.check_lang(lang, where)
        self.lang = lang
        opts = khg.TrainingGraphCompilerOptions(transition_scale=0.0, self_loop_scale=0.0)
        # The compiler keeps C++ references to these: hold them so Python does not free them.
        self._keep = (model.tree(), lexicon_fst, opts)
        self._gc = khg.TrainingGraphCompiler(trans_model=model.tm, ctx_dep=self._keep[0], lex_fst=lexicon_fst,
                                             disambig_syms=lang.disambig, opts=opts)

    def compile(self, words, where):
        word_ids = self.lang.word_ids(words, where)
        try:
            with stderr_captured([]):
                return self._gc.compile_graph_from_text(word_ids)
        except RuntimeError:  # Kaldi's assertion: L composed with the words is empty
            raise NnetError(f"{where}: the transcript has no path through L.fst (a word of words.txt "
                            f"that L.fst does not pronounce?)") from None


def align_equal(graph, num_frames, seed):
    """align-equal-compiled: a random path of exactly num_frames through the graph, or None."""
    ok, path = kaldifst.equal_align(ifst=graph, length=num_frames, rand_seed=seed, num_retries=10)
    if not ok:
        return None
    ok, tids, _, _ = kaldifst.get_linear_symbol_sequence(path)
    return tids if ok and len(tids) == num_frames else None


class Aligner:
    """gmm-align-compiled with Kaldi's train_mono.sh scales; counts done/failed/retried."""

    def __init__(self, model, beam=6.0, retry_beam=40.0, careful=False, acoustic_scale=0.1,
                 transition_scale=1.0, self_loop_scale=0.1):
        if not (0 < beam < np.inf and 0 < acoustic_scale < np.inf):
            raise NnetError(f"--beam and --acoustic-scale must be finite and > 0, got {beam} and {acoustic_scale}")
        if not (retry_beam == 0 or beam < retry_beam < np.inf):  # Kaldi: "Beams do not make sense"
            raise NnetError(f"--retry-beam must be 0 (no retry) or finite and above --beam {beam:g}, got {retry_beam:g}")
        if not (0 <= transition_scale < np.inf and 0 <= self_loop_scale < np.inf):
            raise NnetError(f"--transition-scale and --self-loop-scale must be finite and >= 0, "
                            f"got {transition_scale} and {self_loop_scale}")
        self.model = model
        self.config = khg.AlignConfig(beam=beam, retry_beam=retry_beam, careful=careful)
        self.scales = (acoustic_scale, transition_scale, self_loop_scale)
        self.done = self.failed = self.retried = self.frames = 0
        self.tot_like = 0.0

    def align(self, utt, graph, feats):
        acoustic_scale, transition_scale, self_loop_scale = self.scales
        khg.add_transition_probs(trans_model=self.model.tm, transition_scale=transition_scale,
                                 self_loop_scale=self_loop_scale, fst=graph)
        decodable = khg.DecodableAmDiagGmmScaled(am=self.model.am, tm=self.model.tm,
                                                 feats=np.ascontiguousarray(feats, dtype=np.float32),
                                                 scale=acoustic_scale)
        done_before = self.done
        (self.done, self.failed, self.retried, self.tot_like, self.frames, alignment, _) = \
            khg.align_utterance_wrapper(config=self.config, utt=utt, acoustic_scale=acoustic_scale, fst=graph,
                                        decodable=decodable, num_done=self.done, num_error=self.failed,
                                        num_retried=self.retried, tot_like=self.tot_like,
                                        frame_count=self.frames)
        return alignment if self.done > done_before else None


# ---------------------------------------------------------------------------------------------
# Accumulation and re-estimation.

class Stats:
    """gmm-acc-stats-ali accumulators: per Gaussian (all pdfs in order) occupancy, sum x, sum x^2;
    per transition-id counts; the data log-likelihood and frame count for the log."""

    def __init__(self, model):
        g = sum(model.am.num_gauss_in_pdf(p) for p in range(model.num_pdfs))
        self.occ = np.zeros(g)
        self.x = np.zeros((g, model.dim))
        self.x2 = np.zeros((g, model.dim))
        self.trans = np.zeros(model.tm.num_transition_ids + 1)
        self.tot_like = 0.0
        self.frames = 0

    def add(self, other):
        """Add ``other`` (made with the same model: see check_model) into these; returns self."""
        for name in ("occ", "x", "x2", "trans", "tot_like", "frames"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    def save(self, path):
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, format=np.array("nnet-tools-gmm-acc-1"), occ=self.occ, x=self.x, x2=self.x2,
                         trans=self.trans, tot_like=np.array(self.tot_like), frames=np.array(self.frames))

    @classmethod
    def load(cls, path):
        d = _load_npz(path, "GMM accumulator")
        if str(d.get("format", "")) != "nnet-tools-gmm-acc-1":
            raise NnetError(f"{path}: not a GMM accumulator written by nnet-gmm-acc-stats-ali")
        missing = [k for k in ("occ", "x", "x2", "trans", "tot_like", "frames") if k not in d]
        if missing:
            raise NnetError(f"{path}: corrupt GMM accumulator: no {', '.join(missing)}")
        s = cls.__new__(cls)
        s.occ, s.x, s.x2, s.trans = d["occ"], d["x"], d["x2"], d["trans"]
        try:
            s.tot_like, s.frames = float(d["tot_like"]), int(d["frames"])
        except (TypeError, ValueError):
            raise NnetError(f"{path}: corrupt GMM accumulator: tot_like and frames must be numbers") from None
        arrays = (s.occ, s.x, s.x2, s.trans)
        if (s.occ.ndim != 1 or s.x.shape != (len(s.occ), s.x.shape[-1]) or s.x2.shape != s.x.shape
                or s.trans.ndim != 1 or any(a.dtype.kind not in "fiu" or not np.isfinite(a).all() for a in arrays)):
            raise NnetError(f"{path}: corrupt GMM accumulator: its arrays are not finite numbers of matching shapes")
        return s

    def check_model(self, model, where):
        """These accumulators were made with ``model`` (same Gaussians, dims and transition-ids)."""
        want = (sum(model.am.num_gauss_in_pdf(p) for p in range(model.num_pdfs)), model.dim,
                model.tm.num_transition_ids + 1)
        have = (len(self.occ), self.x.shape[1], len(self.trans))
        if have != want:
            raise NnetError(f"{where}: accumulators for {have[0]} Gaussians of dim {have[1]} and {have[2] - 1} "
                            f"transition-ids, but the model has {want[0]}, {want[1]} and {want[2] - 1}")


def _gauss_offsets(model):
    """Where each pdf's Gaussians start in the flat per-Gaussian arrays (Stats), and the end."""
    return np.cumsum([0] + [model.am.num_gauss_in_pdf(p) for p in range(model.num_pdfs)])


def accumulate(model, stats, utterances):
    """Add the stats of aligned utterances [(feats, tids)]: each frame's posteriors over the
    Gaussians of its aligned pdf, as gmm-acc-stats-ali (done per pdf, over all frames at once)."""
    if not utterances:
        return
    tid2pdf = model.tid2pdf()
    feats = np.concatenate([f for f, _ in utterances]).astype(np.float32)
    tids = np.concatenate([np.asarray(a, dtype=np.int64) for _, a in utterances])
    pdfs = tid2pdf[tids]
    stats.trans += np.bincount(tids, minlength=len(stats.trans))
    offsets = _gauss_offsets(model)
    for p in np.unique(pdfs):
        x = feats[pdfs == p]
        comp = model.am.get_pdf(int(p)).log_likelihoods_matrix(x).astype(np.float64)
        top = comp.max(1, keepdims=True)
        like = top[:, 0] + np.log(np.exp(comp - top).sum(1))
        post = np.exp(comp - like[:, None])
        xd = x.astype(np.float64)
        sl = slice(offsets[p], offsets[p + 1])
        stats.occ[sl] += post.sum(0)
        stats.x[sl] += post.T @ xd
        stats.x2[sl] += post.T @ (xd * xd)
        stats.tot_like += like.sum()
    stats.frames += len(tids)


def estimate(model, stats, mix_up=0, power=0.2, min_gaussian_occupancy=10.0, perturb_factor=0.01,
             min_count=20.0, srand=0, log=None):
    """gmm-est: ML update of transitions and Gaussians, then split Gaussians to ``mix_up`` in all
    (allocated to pdfs by occupancy ** power). Updates ``model`` in place."""
    if not (mix_up >= 0 and 0 <= power < np.inf and 0 <= min_gaussian_occupancy < np.inf
            and 0 <= perturb_factor < np.inf and 0 <= min_count < np.inf):
        raise NnetError("need --mix-up >= 0 and finite --power, --min-gaussian-occupancy and --perturb-factor >= 0")
    flags = khg.str_to_gmm_flags("mvwt")
    tcfg = khg.MleTransitionUpdateConfig()
    impr, count = model.tm.mle_update(stats.trans.reshape(-1, 1), tcfg)
    if log:
        log.info(f"Transition model update: Overall {impr / max(count, 1):.6g} log-like improvement per "
                 f"frame over {count:g} frames.")
    accs = khg.AccumAmDiagGmm()
    accs.init(model.am, int(flags))
    # The bindings hand out copies of the per-pdf accumulators, so the summed moments go in as
    # two weighted points per Gaussian, mean +- std, weight occ/2 each: exactly the same
    # occupancy, first and second moments (up to float32 rounding of the points).
    g = 0
    for p in range(model.num_pdfs):
        for k in range(model.am.num_gauss_in_pdf(p)):
            occ = float(stats.occ[g])
            if occ > 0.0:
                mean = stats.x[g] / occ
                std = np.sqrt(np.maximum(stats.x2[g] / occ - mean * mean, 0.0))
                for point in (mean + std, mean - std):
                    accs.accumulate_for_gaussian(model.am, point.astype(np.float32), p, k, occ / 2)
            g += 1
    opts = khg.MleDiagGmmOptions()
    opts.min_gaussian_occupancy = min_gaussian_occupancy
    offsets = _gauss_offsets(model)
    floored, removed = _floored_and_removed(stats, offsets, opts)
    impr, count = khg.mle_am_diag_gmm_update(config=opts, amdiag_gmm_acc=accs, flags=flags, am_gmm=model.am)
    if log:  # the wheel keeps Kaldi's own LOG lines to itself: these are MleAmDiagGmmUpdate's and gmm-est's
        log.info(f"{floored[0]} variance elements floored in {floored[1]} Gaussians, out of {model.am.num_gauss}")
        if opts.remove_low_count_gaussians:
            log.info(f"Removed {removed} Gaussians due to counts < --min-gaussian-occupancy="
                     f"{min_gaussian_occupancy:g} and --remove-low-count-gaussians=true")
        log.info(f"GMM update: Overall {impr / max(count, 1):.6g} objective function improvement per frame "
                 f"over {count:g} frames")
        log.info(f"GMM update: Overall avg like per frame = {stats.tot_like / max(stats.frames, 1):.6g} "
                 f"over {stats.frames} frames.")
    if mix_up > 0:
        occs = np.array([stats.occ[offsets[p]:offsets[p + 1]].sum() for p in range(model.num_pdfs)],
                        dtype=np.float32)
        before = model.am.num_gauss
        # Kaldi's split perturbs the copies with an unseeded C++ RNG that differs between runs of
        # the wheel; split unperturbed, then perturb from ``srand`` so a pass is reproducible.
        model.am.split_by_count(state_occs=occs, target_components=mix_up, perturb_factor=0.0,
                                power=power, min_count=min_count)
        _perturb_copies(model, perturb_factor, np.random.default_rng(srand))
        if log:  # AmDiagGmm::SplitByCount's line (Kaldi's gmm_dir_info.pl reads "split #Gauss ... to N")
            log.info(f"Split {model.num_pdfs} states with target = {mix_up}, power = {power:g}, perturb_factor = "
                     f"{perturb_factor:g} and min_count = {min_count:g}, split #Gauss from {before} to "
                     f"{model.am.num_gauss}")
    return model


def _floored_and_removed(stats, offsets, opts):
    """What Kaldi's MleDiagGmmUpdate counts, from the same statistics: (variance elements floored,
    Gaussians with any floored), and the Gaussians it removes for too little occupancy."""
    elements = gaussians = removed = 0
    for p in range(len(offsets) - 1):
        occ = stats.occ[offsets[p]:offsets[p + 1]]
        total = occ.sum()
        weight = occ / total if total > 0 else np.full(len(occ), 1.0 / len(occ))
        updated = (occ > opts.min_gaussian_occupancy) & (weight > opts.min_gaussian_weight)
        for g in np.flatnonzero(updated) + offsets[p]:
            mean = stats.x[g] / stats.occ[g]
            n = int((stats.x2[g] / stats.occ[g] - mean * mean < opts.min_variance).sum())
            elements, gaussians = elements + n, gaussians + (n > 0)
        if opts.remove_low_count_gaussians:  # all but the last Gaussian of a pdf
            removed += min(int((~updated).sum()), len(occ) - 1)
    return (elements, gaussians), removed


def _perturb_copies(model, perturb_factor, rng):
    """Move each set of identical Gaussians (one split k ways) apart by perturb_factor x std in
    random directions that sum to zero, as Kaldi's DiagGmm::Split does for a pair."""
    for p in range(model.num_pdfs):
        g = model.am.get_pdf(p)
        means, variances = np.asarray(g.means, dtype=np.float64), np.asarray(g.vars, dtype=np.float64)
        groups = {}
        for k in range(len(means)):
            groups.setdefault(means[k].tobytes() + variances[k].tobytes(), []).append(k)
        for members in groups.values():
            if len(members) < 2:
                continue
            z = rng.standard_normal((len(members), means.shape[1]))
            z -= z.mean(0)
            for k, dz in zip(members, z):
                shifted = means[k] + perturb_factor * np.sqrt(variances[k]) * dz
                model.am.set_gaussian_mean(p, k, shifted.astype(np.float32))
    model.am.compute_gconsts()


def compute_likes(model, feats):
    """gmm-compute-likes: (frames x pdfs) log-likelihoods of each pdf's GMM."""
    x = np.ascontiguousarray(feats, dtype=np.float32)
    out = np.empty((x.shape[0], model.num_pdfs), dtype=np.float32)
    for p in range(model.num_pdfs):
        comp = model.am.get_pdf(p).log_likelihoods_matrix(x).astype(np.float64)
        top = comp.max(1)
        with np.errstate(invalid="ignore"):  # every Gaussian at -inf: -inf, not NaN
            out[:, p] = np.where(np.isneginf(top), -np.inf, top + np.log(np.exp(comp - top[:, None]).sum(1)))
    return out


def num_gauss(model):
    return model.am.num_gauss
