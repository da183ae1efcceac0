"""Per-frame posteriors of the transition-ids in a lattice, by forward-backward over its paths:
Kaldi's lattice-to-post (src/latbin/lattice-to-post.cc, LatticeForwardBackward in
src/lat/lattice-functions.cc), on our CompactLattice. A compact arc carries a string of
transition-ids, one per frame from its source state's time on; its posterior goes to each of them,
as on the one-transition-id-per-arc Lattice Kaldi expands it to.
"""
import math

from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.search.compact_lattice import topological_order

NEG_INF = -math.inf


def _log_add(a, b):
    if a < b:
        a, b = b, a
    return a if b == NEG_INF else a + math.log1p(math.exp(b - a))


class LatticePosteriors:
    """``post[t]``: (transition-id, posterior) pairs of frame t, sorted by transition-id, equal ones
    summed and zeros dropped (Kaldi's MergePairVectorSumming); ``log_like``: the total
    log-likelihood of the scaled lattice; ``acoustic_like``: its scaled acoustic log-likelihood
    weighted by the arcs' posteriors (lattice-to-post's "acoustic like")."""

    def __init__(self, post, log_like, acoustic_like):
        self.post, self.log_like, self.acoustic_like = post, log_like, acoustic_like


def state_times(lattice, order, where="lattice"):
    """Each reachable state's frame (arcs advance it by their strings' lengths), and the number
    of frames, which every final state's time plus its final string must reach."""
    times = {lattice.start: 0}
    for s in order:
        here = times[s]
        for t, _, _, _, tids in lattice.arcs[s]:
            there = here + len(tids)
            if times.setdefault(t, there) != there:
                raise NnetError(f"{where}: state {t} is reached at frames {times[t]} and {there} "
                                f"(an inconsistent lattice)")
    ends = {times[s] + len(f[2]) for s, f in enumerate(lattice.finals) if f is not None and s in times}
    if len(ends) > 1:
        raise NnetError(f"{where}: final states end at different frames {sorted(ends)} (an inconsistent lattice)")
    return times, ends.pop() if ends else 0


def forward_backward(lattice, acoustic_scale=1.0, lm_scale=1.0, where="lattice"):
    """LatticePosteriors of ``lattice`` (unscaled costs, as written by the decoders) after scaling
    its graph costs by ``lm_scale`` and acoustic costs by ``acoustic_scale`` (lattice-to-post's
    ScaleLattice); None when no final state is reachable."""
    if lattice.num_states == 0:
        return None
    order = topological_order(lattice.start, lattice.arcs, where)
    times, num_frames = state_times(lattice, order, where)

    def cost(g, a):
        return lm_scale * g + acoustic_scale * a

    alpha = {lattice.start: 0.0}
    total = NEG_INF
    for s in order:
        here = alpha.get(s, NEG_INF)
        for t, _, g, a, _ in lattice.arcs[s]:
            alpha[t] = _log_add(alpha.get(t, NEG_INF), here - cost(g, a))
        f = lattice.finals[s]
        if f is not None:
            total = _log_add(total, here - cost(f[0], f[1]))
    if total == NEG_INF:
        return None
    beta = {}
    post = [{} for _ in range(num_frames)]
    acoustic = 0.0

    def add(start, tids, posterior):
        for i, tid in enumerate(tids):
            frame = post[start + i]
            frame[tid] = frame.get(tid, 0.0) + posterior

    for s in reversed(order):
        f = lattice.finals[s]
        this = -cost(f[0], f[1]) if f is not None else NEG_INF
        if f is not None:
            posterior = math.exp(alpha[s] + this - total)
            add(times[s], f[2], posterior)
            acoustic -= posterior * acoustic_scale * f[1]
        for t, _, g, a, tids in lattice.arcs[s]:
            arc_beta = beta[t] - cost(g, a)
            this = _log_add(this, arc_beta)
            posterior = math.exp(alpha[s] + arc_beta - total)
            add(times[s], tids, posterior)
            acoustic -= posterior * acoustic_scale * a
        beta[s] = this
    if not math.isclose(total, beta[lattice.start], rel_tol=1e-8, abs_tol=1e-6):
        logger.warning(f"{where}: total forward probability over lattice = {total}, while total backward "
                       f"probability = {beta[lattice.start]}")
    merged = [sorted((tid, p) for tid, p in frame.items() if p != 0.0) for frame in post]
    return LatticePosteriors(merged, beta[lattice.start], acoustic)
