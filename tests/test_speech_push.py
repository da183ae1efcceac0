"""fstpushspecial (nnet_tools/speech/search/push_special.py) against its definition in Kaldi's
src/fstext/push-special.cc: after pushing, every state's arcs plus final probability sum to the
same lambda (the top eigenvalue), and every complete path keeps its weight."""
import kaldi_hmm_gmm  # noqa: F401  before kaldifst (nnet_tools/speech/__init__.py)
import kaldifst

import numpy as np
import pytest

from nnet_tools.speech.search.push_special import _arcs, push_special


def _fst(arcs, finals, num_states):
    f = kaldifst.StdVectorFst()
    for _ in range(num_states):
        f.add_state()
    f.start = 0
    for s, d, w in arcs:
        f.add_arc(s, kaldifst.StdArc(1, 1, w, d))
    for s, w in finals.items():
        f.set_final(s, w)
    return f


def _state_sums(fst):
    (src, _, _, wt, _), finals = _arcs(fst)
    sums = np.bincount(src, weights=np.exp(-wt), minlength=fst.num_states)
    final = np.isfinite(finals)
    sums[final] += np.exp(-finals[final])
    return sums


def _path_weights(fst, rng, walks=200):
    """Weights of random complete paths, each as the list of arc indices it took (arc order is
    kept by pushing, so the same walk can be replayed on the pushed FST)."""
    (src, _, _, wt, dst), finals = _arcs(fst)
    out = []
    for _ in range(walks):
        s, w, taken = fst.start, 0.0, []
        while True:
            arcs = np.flatnonzero(src == s)
            if np.isfinite(finals[s]) and (len(arcs) == 0 or rng.random() < 0.3):
                out.append((tuple(taken), w + finals[s]))
                break
            k = rng.choice(arcs)
            taken.append(k)
            w += wt[k]
            s = dst[k]
    return out


def _replay(fst, walks):
    (_, _, _, wt, dst), finals = _arcs(fst)
    weights = []
    for taken, _ in walks:
        end = dst[taken[-1]] if taken else fst.start
        weights.append(sum(wt[k] for k in taken) + finals[end])
    return np.array(weights)


LINEAR = ([(0, 2, 0.0), (1, 3, 0.5), (2, 1, 0.5)], {3: 0.25}, 4)  # the FST of push-special.cc's note


def _random_backoff_like(rng, n=30):
    """A cyclic FST that, like a backoff G, does not sum to one at its states."""
    arcs = [(s, int(d), float(rng.uniform(0.2, 4.0))) for s in range(n) for d in rng.choice(n, 3, replace=False)]
    finals = {s: float(rng.uniform(0.5, 3.0)) for s in range(0, n, 4)}
    return arcs, finals, n


@pytest.mark.parametrize("case", ["linear", "cyclic"])
def test_pushed_states_all_sum_to_lambda_and_paths_keep_their_weights(case):
    rng = np.random.default_rng(0)
    fst = _fst(*(LINEAR if case == "linear" else _random_backoff_like(rng)))
    before = _state_sums(fst)
    assert before.max() / before.min() > 1.5  # not pushed to begin with
    pushed = push_special(fst)
    after = _state_sums(pushed)
    assert np.log(after.max() / after.min()) <= 1.0 / 1024 + 1e-6
    if case == "linear":  # lambda is the top eigenvalue of the note's matrix, 0.7316
        assert after.mean() == pytest.approx(0.7316, abs=1e-3)
    walks = _path_weights(fst, rng)
    assert _replay(pushed, walks) == pytest.approx(np.array([w for _, w in walks]), abs=1e-4)
