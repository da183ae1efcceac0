"""Best paths through CompactLattices for scoring: ``best_paths`` gives the best path under several
(LM scale, acoustic scale, word insertion penalty) settings in one pass, as Kaldi's
``lattice-scale --inv-acoustic-scale=LMWT | lattice-add-penalty | lattice-best-path`` per setting
(src/latbin/lattice-{scale,add-penalty,best-path}.cc, the sweep of steps/score_kaldi.sh); and the
checks of the sweep's --lmwt-range and --word-ins-penalties.
"""
import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.speech.search.compact_lattice import topological_order

INF = float("inf")


class BestPath:
    """One best path: its words, transition-ids, and scaled costs (graph incl. penalties, acoustic)."""

    def __init__(self, words, tids, graph, acoustic):
        self.words, self.tids, self.graph, self.acoustic = words, tids, graph, acoustic


def best_paths(lattice, settings, where="lattice"):
    """For each (lm_scale, acoustic_scale, word_ins_penalty) in ``settings``, the BestPath under
    cost = lm_scale * graph + acoustic_scale * acoustic + penalty per word arc (Kaldi's
    lattice-scale, then lattice-add-penalty, then lattice-best-path), or None when the lattice
    has no final state."""
    settings = np.asarray(settings, dtype=np.float64).reshape(-1, 3)
    k = len(settings)
    lm, ac, wip = settings[:, 0], settings[:, 1], settings[:, 2]
    if lattice.num_states == 0:
        return [None] * k
    order = topological_order(lattice.start, lattice.arcs, where)
    cost = {lattice.start: np.zeros(k)}
    back = {}   # state -> (arc ids per setting); arc id = (state, index)
    flat = []
    for s in order:
        here = cost.get(s)
        if here is None:
            continue
        for n, (t, w, g, a, _) in enumerate(lattice.arcs[s]):
            cand = here + lm * g + ac * a + (wip if w else 0.0)
            flat.append((s, n))
            arc_id = len(flat) - 1
            old = cost.get(t)
            if old is None:
                cost[t] = cand
                back[t] = np.full(k, arc_id)
            else:
                better = cand < old
                if better.any():
                    old[better] = cand[better]
                    back[t][better] = arc_id
    best_total, best_state = np.full(k, INF), np.full(k, -1)
    for s, f in enumerate(lattice.finals):
        if f is None or s not in cost:
            continue
        total = cost[s] + lm * f[0] + ac * f[1]
        better = total < best_total
        best_total[better], best_state[better] = total[better], s
    out = []
    for i in range(k):
        s = int(best_state[i])
        if s < 0:
            out.append(None)
            continue
        f = lattice.finals[s]
        words, tids, graph, acoustic = [], [list(f[2])], lm[i] * f[0], ac[i] * f[1]
        while s != lattice.start:
            ps, n = flat[back[s][i]]
            t, w, g, a, arc_tids = lattice.arcs[ps][n]
            if w:
                words.append(w)
            tids.append(list(arc_tids))
            graph += lm[i] * g + (wip[i] if w else 0.0)
            acoustic += ac[i] * a
            s = ps
        out.append(BestPath(words[::-1], [x for part in reversed(tids) for x in part], graph, acoustic))
    return out


def check_lmwt_range(text):
    """'7:17' -> [7, ..., 17] (Kaldi's LMWT=7:17)."""
    first, sep, last = text.partition(":")
    if not (sep and first.strip().isdigit() and last.strip().isdigit()) or int(first) < 1 or int(last) < int(first):
        raise NnetError(f"--lmwt-range must be A:B with integers 1 <= A <= B, e.g. 7:17, got '{text}'")
    return list(range(int(first), int(last) + 1))


def check_penalties(text):
    """'0.0,0.5,1.0' -> [(text, value), ...], the texts as given (they name files: penalty_0.5)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = float(item)
        except ValueError:
            value = INF
        if not abs(value) < INF:
            raise NnetError(f"--word-ins-penalties must be a comma-separated list of numbers, e.g. 0.0,0.5,1.0, "
                            f"got '{text}'")
        out.append((item, value))
    if len({t for t, _ in out}) != len(out):
        raise NnetError(f"--word-ins-penalties lists a penalty twice: '{text}'")
    return out
