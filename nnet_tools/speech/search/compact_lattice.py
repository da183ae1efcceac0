"""Kaldi's CompactLattice (src/lat/kaldi-lattice.h): an acyclic acceptor on words whose weights
hold (graph cost, acoustic cost, transition-ids), as latgen-faster-mapped writes it and every lattice
program reads it; and the topological order of a lattice's states (lattices are acyclic).
"""
from nnet_tools.errors import NnetError


class CompactLattice:
    """Kaldi's CompactLattice: an acyclic acceptor on words (0 = no word) whose weights are
    (graph cost, acoustic cost, transition-ids). ``arcs[s]``: (next state, word, graph, acoustic,
    tids) tuples; ``finals[s]``: (graph, acoustic, tids), or None where ``s`` is not final."""

    __slots__ = ("start", "arcs", "finals")

    def __init__(self, start=0, arcs=None, finals=None):
        self.start, self.arcs, self.finals = start, arcs or [], finals or []

    @property
    def num_states(self):
        return len(self.arcs)

    def __eq__(self, other):
        return isinstance(other, CompactLattice) and (self.start, self.arcs, self.finals) == (
            other.start, other.arcs, other.finals)

    def __repr__(self):
        return f"CompactLattice({self.num_states} states, {sum(map(len, self.arcs))} arcs)"


def topological_order(start, arcs, where="lattice"):
    """The states reachable from ``start`` (arcs[s]: tuples, the next state first), each before
    every state it has an arc to."""
    n = len(arcs)
    indegree = [0] * n
    seen = bytearray(n)
    seen[start] = 1
    stack = [start]
    while stack:
        for arc in arcs[stack.pop()]:
            t = arc[0]
            indegree[t] += 1
            if not seen[t]:
                seen[t] = 1
                stack.append(t)
    order, ready = [], [start] if indegree[start] == 0 else []
    while ready:
        s = ready.pop()
        order.append(s)
        for arc in arcs[s]:
            t = arc[0]
            indegree[t] -= 1
            if indegree[t] == 0:
                ready.append(t)
    if len(order) != sum(seen):
        raise NnetError(f"{where}: the lattice has a cycle (lattices are acyclic)")
    return order
