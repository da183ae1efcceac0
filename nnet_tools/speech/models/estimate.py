"""Statistics and ML re-estimation: gmm-acc-stats-ali, gmm-sum-accs, gmm-est (with mix-up).

The accumulators are .npz sums of occupancies and first and second moments per Gaussian, which
add across jobs as gmm-sum-accs does (a format of ours, as the model's: see gmm.py).
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see nnet_tools/speech/__init__.py)
import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path
from nnet_tools.speech.models.gmm import load_npz


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
        d = load_npz(path, "GMM accumulator")
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


def accumulate(model, stats, utterances, stats_feats=None):
    """Add the stats of aligned utterances [(feats, tids)]: each frame's posteriors over the
    Gaussians of its aligned pdf, as gmm-acc-stats-ali (done per pdf, over all frames at once).
    With ``stats_feats`` (one matrix per utterance, same shapes), the posteriors come from
    ``feats`` and the moments from ``stats_feats``, as gmm-acc-stats-twofeats: how Kaldi's
    train_sat.sh makes final.alimdl, the SAT model's Gaussians on speaker-independent features."""
    if not utterances:
        return
    tid2pdf = model.tid2pdf()
    feats = np.concatenate([f for f, _ in utterances]).astype(np.float32)
    tids = np.concatenate([np.asarray(a, dtype=np.int64) for _, a in utterances])
    moments = feats if stats_feats is None else np.concatenate(stats_feats).astype(np.float32)
    if moments.shape != feats.shape:
        raise NnetError(f"the statistics' features are {moments.shape[0]} frames of dim {moments.shape[1]}, "
                        f"the posteriors' {feats.shape[0]} of dim {feats.shape[1]}")
    pdfs = tid2pdf[tids]
    stats.trans += np.bincount(tids, minlength=len(stats.trans))
    offsets = _gauss_offsets(model)
    for p in np.unique(pdfs):
        x = feats[pdfs == p]
        comp = model.am.get_pdf(int(p)).log_likelihoods_matrix(x).astype(np.float64)
        top = comp.max(1, keepdims=True)
        like = top[:, 0] + np.log(np.exp(comp - top).sum(1))
        post = np.exp(comp - like[:, None])
        xd = moments[pdfs == p].astype(np.float64)
        sl = slice(offsets[p], offsets[p + 1])
        stats.occ[sl] += post.sum(0)
        stats.x[sl] += post.T @ xd
        stats.x2[sl] += post.T @ (xd * xd)
        stats.tot_like += like.sum()
    stats.frames += len(tids)


def estimate(model, stats, mix_up=0, power=0.2, min_gaussian_occupancy=10.0, perturb_factor=0.01,
             min_count=20.0, srand=0, log=None, remove_low_count_gaussians=True):
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
    opts.remove_low_count_gaussians = remove_low_count_gaussians
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
        occs = [stats.occ[offsets[p]:offsets[p + 1]].sum() for p in range(model.num_pdfs)]
        split(model, occs, mix_up, power, perturb_factor, min_count, srand, log)
    return model


def split(model, occs, mix_up, power=0.2, perturb_factor=0.01, min_count=20.0, srand=0, log=None):
    """gmm-mixup: split Gaussians to ``mix_up`` in all, allocated to pdfs by their occupancy
    ``occs`` ** power. Updates ``model`` in place."""
    before = model.am.num_gauss
    # Kaldi's split perturbs the copies with an unseeded C++ RNG that differs between runs of
    # the wheel; split unperturbed, then perturb from ``srand`` so a pass is reproducible.
    model.am.split_by_count(state_occs=np.asarray(occs, dtype=np.float32), target_components=mix_up,
                            perturb_factor=0.0, power=power, min_count=min_count)
    _perturb_copies(model, perturb_factor, np.random.default_rng(srand))
    if log:  # AmDiagGmm::SplitByCount's line (Kaldi's gmm_dir_info.pl reads "split #Gauss ... to N")
        log.info(f"Split {model.num_pdfs} states with target = {mix_up}, power = {power:g}, perturb_factor = "
                 f"{perturb_factor:g} and min_count = {min_count:g}, split #Gauss from {before} to "
                 f"{model.am.num_gauss}")


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
