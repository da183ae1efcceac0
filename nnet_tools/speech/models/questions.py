"""Phonetic questions for the decision tree: cluster-phones and compile-questions (Kaldi's
src/bin/cluster-phones.cc and compile-questions.cc; AutomaticallyObtainQuestions and its
TreeCluster / ClusterKMeans in src/tree, in numpy), on the tree statistics of tree_stats.py.

cluster-phones clusters the phone sets top-down by the Gaussian stats of their central states
into phone questions; compile-questions asks them of every context position, plus questions on
the pdf-class (key -1), as build-tree (tree.py) takes them.
"""
import math

import numpy as np

from nnet_tools.errors import NnetError, read_error
from nnet_tools.speech.models.tree_stats import PDF_CLASS, VAR_FLOOR, _event_str, _objf, _pack


# --- questions (cluster-phones, compile-questions) -------------------------------------------

def compile_questions(phone_questions, extra_questions, topo_num_pdf_classes, N=3, P=1):
    """compile-questions: the phone questions (cluster-phones' sets plus extra_questions.int),
    sorted and without duplicates, for every context position 0..N-1, and for the pdf-class
    (key -1) the questions "pdf-class <= i" for i < max #pdf-classes - 1 ([0], [0, 1] for 3-state
    HMMs), so a shared root may split its states at any boundary of the left-to-right order.
    ``topo_num_pdf_classes``: the largest number of pdf-classes of any phone, or the topology's
    phone -> #pdf-classes (a list indexed by phone or a dict), which is also checked against the
    phones asked about. Returns {key: [sorted tuple of values, ...]}."""
    questions = []
    for q in list(phone_questions) + list(extra_questions):
        t = tuple(sorted(int(p) for p in q))
        if len(set(t)) != len(t):
            raise NnetError(f"compile-questions: question {list(t)} contains duplicate phones")
        questions.append(t)
    questions = sorted(set(questions))
    if isinstance(topo_num_pdf_classes, (int, np.integer)):
        most = int(topo_num_pdf_classes)
    else:
        counts = topo_num_pdf_classes if isinstance(topo_num_pdf_classes, dict) else dict(enumerate(topo_num_pdf_classes))
        defined = {int(p) for p, n in counts.items() if n > 0}
        undefined = sorted({p for q in questions for p in q} - defined)
        if undefined:
            raise NnetError(f"compile-questions: phones {undefined[:5]} are asked about but undefined in the topology")
        most = max((int(n) for n in counts.values()), default=0)
    if most < 1:
        raise NnetError("compile-questions: the topology has no phone with pdf-classes")
    compiled = {PDF_CLASS: [tuple(range(i + 1)) for i in range(most - 1)]}
    compiled.update({n: list(questions) for n in range(N)})
    return compiled


def cluster_phones(stats, phone_sets, pdf_class_list=(1,), P=1, include_full_set=True, seed=0,
                   var_floor=VAR_FLOOR):
    """cluster-phones (questions mode): top-down 2-means clustering of the phone sets by the
    Gaussian stats of their central states (``pdf_class_list``), down to single sets; every node
    of that tree is a question, the top ones first, then any phone set not yet among them.
    Kaldi's code leaves the root's set (all the phones) out of its output, against its own
    comment; ``include_full_set`` puts it first (it asks "is this context a real phone or the
    utterance boundary"); False gives Kaldi's list. The k-means starts are drawn from ``seed``."""
    sets = [tuple(sorted(int(p) for p in s)) for s in phone_sets]
    phones = [p for s in sets for p in s]
    if not sets or any(not s for s in sets):
        raise NnetError("cluster-phones: empty phone set (or no phone sets)")
    if len(set(phones)) != len(phones):
        raise NnetError("cluster-phones: a phone is in more than one phone set, or twice in one")
    classes = {int(c) for c in pdf_class_list}
    by_phone = {}
    for event, g in sorted(stats.items()):
        e = dict(event)
        if e.get(PDF_CLASS) in classes:
            if P not in e:
                raise NnetError(f"cluster-phones: event {_event_str(event)} has no central phone (key {P})")
            by_phone[e[P]] = by_phone[e[P]] + _pack(g) if e[P] in by_phone else _pack(g)
    if not by_phone:
        raise NnetError(f"cluster-phones: no tree stats with pdf-class in {sorted(classes)} "
                        f"(a 1-state topology needs pdf_class_list=(0,))")
    zero = np.zeros_like(next(iter(by_phone.values())))
    points = np.stack([sum((by_phone.get(p, zero) for p in s), zero) for s in sets])
    assignment, parents = _tree_cluster(points, np.random.default_rng(seed), var_floor)
    return _question_sets(sets, assignment, parents, include_full_set)


def _tree_cluster(points, rng, var_floor):
    """TreeCluster, branch factor 2, no threshold: split the cluster whose best 2-means split
    gains most, until every point is alone or no split gains. Returns each point's leaf and
    every node's parent in Kaldi's numbering: leaves first, then the non-leaf nodes in reverse
    order of splitting (the root last, its own parent)."""
    leaves, leaf_parent, node_parent = [np.arange(len(points))], [None], []
    best = {0: _kmeans2(points, rng, var_floor)}
    while len(leaves) < len(points):
        gain, leaf = max(((g, -leaf) for leaf, (g, _) in best.items()), default=(0.0, 0))
        if gain <= 0:
            break
        leaf = -leaf
        _, assign = best.pop(leaf)
        members = leaves[leaf]
        node_parent.append(leaf_parent[leaf])
        leaves[leaf], leaf_parent[leaf] = members[assign == 0], len(node_parent) - 1
        leaves.append(members[assign == 1])
        leaf_parent.append(len(node_parent) - 1)
        for child in (leaf, len(leaves) - 1):
            best[child] = _kmeans2(points[leaves[child]], rng, var_floor)
    total = len(leaves) + len(node_parent)

    def out(k):   # the output index of the k-th node split
        return total - 1 - k
    parents = [0 if p is None else out(p) for p in leaf_parent]
    parents += [out(k) if p is None else out(p) for k, p in sorted(enumerate(node_parent), key=lambda kp: -kp[0])]
    assignment = np.empty(len(points), dtype=int)
    for leaf, members in enumerate(leaves):
        assignment[members] = leaf
    return assignment, parents


def _question_sets(sets, assignment, parents, include_full_set):
    """ObtainSetsOfPhones: each node's phones (a node's are its children's), top nodes first,
    then the phone sets themselves; no duplicates, no empty set."""
    total = len(parents)
    raw = [[] for _ in range(total)]
    for s, leaf in zip(sets, assignment):
        raw[leaf].extend(s)
    for j in range(total):   # children come before their parents in this numbering
        raw[j].sort()
        if parents[j] < total - 1 or (include_full_set and j != total - 1):
            raw[parents[j]].extend(raw[j])
    out = []
    for s in [tuple(r) for r in reversed(raw)] + sets:
        if s and s not in out:
            out.append(s)
    return out


def _kmeans2(points, rng, var_floor, tries=10, iters=20, refine_iters=100):
    """ClusterKMeans into 2 clusters as AutomaticallyObtainQuestions runs it (10 tries, the best
    kept): returns (likelihood gain over one cluster, each point's cluster 0 or 1)."""
    n = len(points)
    if n <= 1:
        return 0.0, None
    total, best = float(_objf(points.sum(0), var_floor)), None
    for _ in range(tries):
        assign = _kmeans_start(n, rng)
        sums = np.stack([points[assign == c].sum(0) for c in (0, 1)])
        for _ in range(iters):
            if not _refine(points, assign, sums, refine_iters, var_floor):
                break
        gain = float(_objf(sums, var_floor).sum()) - total
        if best is None or gain > best[0]:
            best = (gain, assign.copy())
    return best


def _kmeans_start(n, rng):
    """ClusterKMeansOnce's start: points visited with a random stride coprime to n, dealt in turn."""
    skip = 1 + int(rng.integers(n - 1))
    while math.gcd(skip, n) != 1:
        skip = 0 if skip == n - 1 else skip
        skip += 1
    assign, i = np.empty(n, dtype=int), 0
    for count in range(n):
        assign[i], i = count % 2, (i + skip) % n
    return assign


def _refine(points, assign, sums, iters, var_floor):
    """RefineClusters with 2 clusters: move each point in turn to the other cluster where that
    gains likelihood, until a pass moves none. Updates ``assign`` and ``sums``; whether any moved."""
    moved_any = False
    for _ in range(iters):
        moved = False
        for p in range(len(points)):
            own, other = assign[p], 1 - assign[p]
            o = _objf(np.stack([sums[other] + points[p], sums[own] - points[p], sums[other], sums[own]]), var_floor)
            if o[0] + o[1] - o[2] - o[3] > 0:
                sums[own] -= points[p]
                sums[other] += points[p]
                assign[p], moved = other, True
        moved_any |= moved
        if not moved:
            break
    return moved_any


def read_int_sets(path, what="phone sets"):
    """A file of integer sets, one a line (phones/sets.int, questions.int, extra_questions.int)."""
    try:
        with open(path, encoding="utf-8") as f:
            return [tuple(int(w) for w in line.split()) for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, what, e) from None
    except ValueError:
        raise NnetError(f"{path}: {what}: a line that is not integers") from None
