"""Likelihoods: gmm-compute-likes, each pdf's GMM log-likelihood of each frame."""
import numpy as np


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
