"""Kaldi's fstpushspecial (src/fstext/push-special.cc): weight pushing that always succeeds.

A backoff LM's G does not sum to one (backoff arcs duplicate paths), so ordinary pushing may
diverge. Kaldi instead finds the top eigenvector v of the state-transition probability matrix P
(a final probability counts as an arc back to the start state I) by the power method on
P + 0.1 I, and reweights p'_ij = p_ij v_j / v_i (finals p_f v_I / v_i): every state then sums to
the same lambda, so early in an utterance the search sees the LM cost it will pay rather than
meeting it all at a word's end, and beam pruning keeps the right hypotheses. mkgraph.sh applies
it to LG after determinisation and minimisation.
"""
import math

import numpy as np
import scipy.sparse

import kaldi_hmm_gmm  # noqa: F401  before kaldifst: the other import order hangs
import kaldifst

from nnet_tools.log import logger

DELTA = 1.0 / 1024  # fstpushspecial's --delta (OpenFst's kDelta)


def _arcs(fst):
    """(src, ilabel, olabel, weight, dst) arrays of every arc, and each state's final weight."""
    src, ilab, olab, wt, dst = [], [], [], [], []
    finals = np.empty(fst.num_states)
    for s in range(fst.num_states):
        finals[s] = fst.final(s).value
        for a in kaldifst.ArcIterator(fst, s):
            src.append(s), ilab.append(a.ilabel), olab.append(a.olabel)
            wt.append(a.weight.value), dst.append(a.nextstate)
    return (np.array(src, dtype=np.int64), ilab, olab, np.array(wt), np.array(dst, dtype=np.int64)), finals


def _spread(p, v, src, dst, fsrc, finals_p, start):
    """log(max/min) over states of sum_j p'_ij: TestAccuracy's error, 0 when converged."""
    row = np.bincount(src, weights=p * v[dst] / v[src], minlength=len(v))
    row += np.bincount(fsrc, weights=finals_p * v[start] / v[fsrc], minlength=len(v))
    return math.log(row.max() / row.min())


def push_special(fst, delta=DELTA, max_iters=2000):
    """A copy of ``fst`` (tropical weights) pushed as fstpushspecial pushes it."""
    n = fst.num_states
    if n == 0:
        return fst
    (src, ilab, olab, wt, dst), finals = _arcs(fst)
    start = fst.start
    p = np.exp(-wt)
    fsrc = np.flatnonzero(np.isfinite(finals))
    finals_p = np.exp(-finals[fsrc])
    m = scipy.sparse.csr_matrix((np.concatenate([p, finals_p]),
                                 (np.concatenate([src, fsrc]), np.concatenate([dst, np.full(len(fsrc), start)]))),
                                shape=(n, n))
    v = np.full(n, 1.0 / math.sqrt(n))
    for it in range(max_iters):  # Iterate()
        v = m @ v + 0.1 * v
        v /= np.linalg.norm(v)
        if it % 5 == 0 and it > 0 and _spread(p, v, src, dst, fsrc, finals_p, start) <= delta:
            break
    else:
        logger.warning(f"push-special: finished {max_iters} iterations without converging.  Output will be inaccurate.")
    pot = -np.log(v)  # potentials as negative logs, like the FST's weights
    new_wt = wt + pot[dst] - pot[src]
    new_final = finals + pot[start] - pot
    out = kaldifst.StdVectorFst()
    for _ in range(n):
        out.add_state()
    out.start = start
    for s in fsrc:
        out.set_final(int(s), float(new_final[s]))
    for k in range(len(src)):
        out.add_arc(int(src[k]), kaldifst.StdArc(ilab[k], olab[k], float(new_wt[k]), int(dst[k])))
    return out
