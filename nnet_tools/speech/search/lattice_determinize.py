"""Pruning and word-level determinization of the decoder's raw lattices, as Kaldi's PruneLattice
(src/lat/lattice-functions.h) and DeterminizeLatticePruned (src/lat/determinize-lattice-pruned.cc)
do, here in Python because no wheel binds them (kaldifst 1.7.17 has no CompactLattice,
kaldi-hmm-gmm's lattice decoders give the best path only).

A raw lattice (transition-ids in, words out, (graph, acoustic) costs: arcs[s] = (next, tid, word,
graph, acoustic), finals[s] = (graph, acoustic)) is pruned to the lattice beam and determinized on
the words: one path per word sequence, the best, with its transition-ids in the weight (Kaldi's
CompactLattice), pruned as it goes and after.
"""
import heapq

from nnet_tools.speech.search.compact_lattice import CompactLattice, topological_order

INF = float("inf")
DELTA = 1.0 / 1024   # Kaldi's kDelta: weights this close are the same in determinization
MAX_DET_STATES = 50000   # a determinized lattice bigger than this is made again with a narrower beam
RAW_COST, CLAT_COST = 3, 2   # where an arc's graph cost is (the acoustic cost follows it)


def _prune(start, arcs, finals, beam, cost_at, order=None):
    """Kaldi's PruneLattice: drop the arcs and final weights whose best path through them costs
    more than the best path + ``beam``, and the states left without a path. Also returns the
    states kept, in topological order (``order``: that of the states before, when known), and
    each state's best cost to the end (before pruning). An arc's cost is at ``cost_at`` and after."""
    if order is None:
        order = topological_order(start, arcs)
    c = cost_at
    alpha = [INF] * len(arcs)
    alpha[start] = 0.0
    for s in order:
        a = alpha[s]
        for arc in arcs[s]:
            x = a + arc[c] + arc[c + 1]
            if x < alpha[arc[0]]:
                alpha[arc[0]] = x
    beta = [INF] * len(arcs)
    for s in reversed(order):
        f = finals[s]
        b = f[0] + f[1] if f is not None else INF
        for arc in arcs[s]:
            x = arc[c] + arc[c + 1] + beta[arc[0]]
            if x < b:
                b = x
        beta[s] = b
    best = beta[start]
    if best == INF:
        return start, [[] for _ in arcs], [None] * len(finals), [start], beta
    limit = best + beam + 1e-4 * max(1.0, abs(best))
    new_arcs = [[] for _ in arcs]
    new_finals = [None] * len(finals)
    kept = []
    for s in order:
        a = alpha[s]
        if a + beta[s] > limit:
            continue
        kept.append(s)
        new_arcs[s] = [arc for arc in arcs[s] if a + arc[c] + arc[c + 1] + beta[arc[0]] <= limit]
        f = finals[s]
        if f is not None and a + f[0] + f[1] <= limit:
            new_finals[s] = f
    return start, new_arcs, new_finals, kept, beta


def _topsorted(start, arcs, finals):
    """A CompactLattice of the states reachable from ``start`` that reach a final state,
    renumbered in topological order (the start is state 0)."""
    order = topological_order(start, arcs)
    live = set()
    for s in reversed(order):
        if finals[s] is not None or any(arc[0] in live for arc in arcs[s]):
            live.add(s)
    if start not in live:
        return CompactLattice(0, [], [])
    kept = [s for s in order if s in live]
    number = {s: i for i, s in enumerate(kept)}
    return CompactLattice(0, [[(number[arc[0]],) + tuple(arc[1:]) for arc in arcs[s] if arc[0] in live] for s in kept],
                          [finals[s] for s in kept])


# --- determinization --------------------------------------------------------------------------

def _better(c1, c2, d1, d2):
    """Kaldi's Compare of LatticeWeights: the lower total cost, then the lower graph cost."""
    return c1 + c2 < d1 + d2 or (c1 + c2 == d1 + d2 and c1 < d1)


def _common_prefix(strings):
    first = min(strings)
    last = max(strings)
    n = 0
    for x, y in zip(first, last):
        if x != y:
            break
        n += 1
    return first[:n]


def determinize_pruned(start, arcs, finals, beam, max_states=MAX_DET_STATES):
    """(CompactLattice, beam used) of a raw lattice: pruned to ``beam``, determinized on the words
    (for each word sequence its best path, the transition-ids moved into the weights), pruned to
    ``beam`` again, states in topological order. As Kaldi's DeterminizeLatticePruned, a lattice
    whose determinization passes ``max_states`` is made again with a beam of 3/4 of it."""
    order = topological_order(start, arcs)
    while True:
        lattice = _determinize(*_prune(start, arcs, finals, beam, RAW_COST, order), beam, max_states)
        if lattice is not None:
            break
        beam *= 0.75
    s, a, f, _, _ = _prune(lattice.start, lattice.arcs, lattice.finals, beam, CLAT_COST)
    return _topsorted(s, a, f), beam



def prune_raw(start, arcs, finals, beam):
    """Kaldi's --determinize-lattice=false: the raw lattice pruned to ``beam``, as a CompactLattice
    with one transition-id per arc, states in topological order."""
    start, arcs, finals, _, _ = _prune(start, arcs, finals, beam, RAW_COST)
    return _topsorted(start, [[(t, w, g, a, (tid,) if tid else ()) for t, tid, w, g, a in out] for out in arcs],
                      [None if f is None else (f[0], f[1], ()) for f in finals])


def _determinize(start, arcs, finals, order, beta, beam, max_states):
    """Word-level determinization of a raw lattice (arcs: next, tid, word, graph, acoustic; its
    states in topological ``order``; ``beta``: each state's best cost to the end) in Kaldi's
    CompactLattice semiring, pruned as it goes (a state whose best complete path costs more than
    the best + ``beam`` is not expanded); None when it passes ``max_states``.

    A subset is a set of (state, residual graph cost, residual acoustic cost, residual tids),
    only of states that have a word arc out or are final (as Kaldi's minimal subsets); after a
    word, its word-free closure is taken in topological order, the transition-ids of the paths
    kept as back-pointers until the subset's states are known."""
    position = {state: i for i, state in enumerate(order)}
    frontier = {s for s in order if finals[s] is not None or any(arc[2] for arc in arcs[s])}
    word_free = {s: [arc for arc in arcs[s] if not arc[2]] for s in order}
    frame = {start: 0}   # raw lattices are frame-synchronous: a state's number of tids from the start
    for s in order:
        for arc in arcs[s]:
            frame[arc[0]] = frame[s] + (1 if arc[1] else 0)
    limit = beta[start] + beam + 1e-4 * max(1.0, abs(beta[start]))
    heappush, heappop = heapq.heappush, heapq.heappop

    def closure(seeds):
        """seeds: state -> (g, a, tids) -> [(frontier state, g, a, tids)] of the best word-free paths."""
        best = {t: (g + a, g, a, None, 0) for t, (g, a, _) in seeds.items()}   # (total, g, a, previous, tid)
        heap = [position[t] for t in seeds]
        heapq.heapify(heap)
        while heap:   # each state is pushed once: all its predecessors come before it in the order
            s = order[heappop(heap)]
            _, c1, c2, _, _ = best[s]
            for t, tid, _, g, a in word_free[s]:
                n1, n2 = c1 + g, c2 + a
                n = n1 + n2
                old = best.get(t)
                if old is None:
                    best[t] = (n, n1, n2, s, tid)
                    heappush(heap, position[t])
                elif n < old[0] or n == old[0] and n1 < old[1]:
                    best[t] = (n, n1, n2, s, tid)
        out = []
        for f in frontier.intersection(best):
            _, g, a, prev, tid = best[f]
            tail, s = [], f
            while prev is not None:
                if tid:
                    tail.append(tid)
                s = prev
                _, _, _, prev, tid = best[s]
            out.append((f, g, a, seeds[s][2] + tuple(reversed(tail))))
        return out

    def key(subset):
        return tuple((f, round(r1 / DELTA), round(r2 / DELTA), rs) for f, r1, r2, rs in subset)

    def to_go(subset):   # the best cost from the subset to the end
        return min(r1 + r2 + beta[f] for f, r1, r2, _ in subset)

    def time_of(subset):   # tids output on the way to the subset (the same for each element)
        f, _, _, rs = subset[0]
        return frame[f] - len(rs)

    initial = tuple(sorted(closure({start: (0.0, 0.0, ())})))
    subsets, index, forward, rest = [initial], {key(initial): 0}, [0.0], [to_go(initial)]
    out_arcs, out_finals, expanded = [[]], [None], [False]
    heap = [(time_of(initial), 0)]   # subsets in topological order: by time, then by creation
    while heap:
        _, i = heappop(heap)
        if expanded[i]:   # reached again by a better path: pass the better forward cost on
            for j, _, d1, d2, _ in out_arcs[i]:
                if forward[i] + d1 + d2 < forward[j] - 1e-6:
                    forward[j] = forward[i] + d1 + d2
                    heappush(heap, (time_of(subsets[j]), j))
            continue
        if forward[i] + rest[i] > limit:
            continue   # not expanded (it may be reached later by a better path)
        expanded[i] = True
        subset = subsets[i]
        final = None
        seeds_by_word = {}
        for f, r1, r2, rs in subset:
            if finals[f] is not None:
                n1, n2 = r1 + finals[f][0], r2 + finals[f][1]
                if final is None or _better(n1, n2, final[0], final[1]):
                    final = (n1, n2, rs)
            for t, tid, w, g, a in arcs[f]:
                if not w:
                    continue
                seeds = seeds_by_word.setdefault(w, {})
                n1, n2 = r1 + g, r2 + a
                old = seeds.get(t)
                if old is None or _better(n1, n2, old[0], old[1]):
                    seeds[t] = (n1, n2, rs + (tid,) if tid else rs)
        arcs_i = []
        for w in sorted(seeds_by_word):
            reached = closure(seeds_by_word[w])
            if not reached:
                continue
            _, d1, d2, _ = min(reached, key=lambda e: (e[1] + e[2], e[1]))
            prefix = _common_prefix([e[3] for e in reached])
            k = len(prefix)
            nxt = tuple(sorted((f, n1 - d1, n2 - d2, s[k:]) for f, n1, n2, s in reached))
            there = forward[i] + d1 + d2
            j = index.get(key(nxt))
            if j is None:
                if len(subsets) >= max_states:
                    return None
                j = index[key(nxt)] = len(subsets)
                subsets.append(nxt)
                forward.append(there)
                rest.append(to_go(nxt))
                out_arcs.append([])
                out_finals.append(None)
                expanded.append(False)
                heappush(heap, (time_of(nxt), j))
            elif there < forward[j] - 1e-6:
                forward[j] = there
                heappush(heap, (time_of(nxt), j))
            arcs_i.append((j, w, d1, d2, prefix))
        out_arcs[i] = arcs_i
        out_finals[i] = final
    return CompactLattice(0, out_arcs, out_finals)

