"""build-tree (Kaldi's BuildTree: src/tree/build-tree.cc, build-tree-utils.cc): from the tree
stats (tree_stats.py), the compiled questions (questions.py) and the roots (phones/roots.int),
greedy splitting by likelihood gain, then the post-clustering of leaves within each root and
Kaldi's pdf numbering. The result is a tree.Tree.
"""
import math

import numpy as np

from nnet_tools.errors import NnetError, read_error
from nnet_tools.speech.models.tree import NO_SPLIT, Constant, Split, Tree, _pdf_class_counts, _relabel, _renumbering, _stub
from nnet_tools.speech.models.tree_stats import VAR_FLOOR, _event_str, _objf, _pack


def read_roots(path):
    """phones/roots.int: lines "shared split 1 2 3" or "not-shared not-split 5" -> [(phones, shared, split)]."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise read_error(path, "roots file", e) from None
    roots = []
    for n, line in enumerate(lines, 1):
        words = line.split()
        if not words:
            continue
        try:
            phones = tuple(int(w) for w in words[2:])
        except ValueError:
            phones = ()
        if (len(words) < 3 or words[0] not in ("shared", "not-shared") or words[1] not in ("split", "not-split")
                or not phones or min(phones) <= 0 or len(set(phones)) != len(phones)):
            raise NnetError(f"{path}: line {n}: bad roots line '{line}' (want e.g. 'shared split 1 2 3')")
        roots.append((tuple(sorted(phones)), words[0] == "shared", words[1] == "split"))
    if not roots:
        raise NnetError(f"{path}: empty roots file")
    return roots


def _sum_by(labels, rows, size):
    """Rows summed per label 0..size-1 ([size, cols]); faster than np.add.at."""
    out = np.zeros((size, rows.shape[1]))
    if len(labels):
        order = np.argsort(labels, kind="stable")
        sorted_labels = labels[order]
        starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
        out[sorted_labels[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return out


class _Data:
    """The stats as arrays: the events in Kaldi's (sorted) order, as dicts; their packed
    Gaussians [n, 1+2d]; per key, each event's value (-1 where it has no such key)."""

    def __init__(self, stats):
        self.events = sorted(stats)
        self.dicts = [dict(e) for e in self.events]
        self.packed = np.stack([_pack(stats[e]) for e in self.events])
        keys = sorted({k for e in self.events for k, _ in e})
        self.values = {k: np.array([d.get(k, -1) for d in self.dicts]) for k in keys}


class _Questions:
    """The questions per key as 0/1 membership matrices over the values 0..V-1 of that key."""

    def __init__(self, questions, data, var_floor):
        self.data, self.var_floor, self.keys = data, var_floor, []
        for key in sorted(questions):
            qs = [tuple(q) for q in questions[key]]
            if not qs or key not in data.values:
                continue
            if min(min(q, default=0) for q in qs) < 0:
                raise NnetError(f"build-tree: negative value in a question for key {key}")
            size = 1 + max(int(data.values[key].max()), max(max(q, default=0) for q in qs))
            member = np.zeros((len(qs), size))
            for i, q in enumerate(qs):
                member[i, list(q)] = 1.0
            self.keys.append((key, qs, member))

    def best(self, idx):
        """FindBestSplit: the question whose yes/no split of these events gains the most
        likelihood, over every key all of them have: (gain, key, question), gain 0 if none gains.
        Ties go to the first key and question (Kaldi's strict '>')."""
        best, data, var_floor = (0.0, None, None), self.data, self.var_floor
        if len(idx) <= 1:
            return best
        s = data.packed[idx]
        total = _objf(s.sum(0), var_floor)
        for key, qs, member in self.keys:
            v = data.values[key][idx]
            if (v < 0).any():   # not every event has this key: Kaldi asks nothing of it
                continue
            by_value = _sum_by(v, s, member.shape[1])
            gains = _objf(member @ by_value, var_floor) + _objf((1 - member) @ by_value, var_floor) - total
            q = int(np.argmax(gains))
            if gains[q] > best[0]:
                best = (float(gains[q]), key, qs[q])
        return best


class _Node:
    """A leaf of a root's growing tree, with its best split; once split, the question asked and
    its yes and no children (Kaldi's DecisionTreeSplitter). ``best``: the best gain below it."""

    def __init__(self, leaf, idx, find):
        self.leaf, self.idx, self.children = leaf, idx, None
        self.best, self.key, self.question = find(idx)

    def split(self, counter, data, find):
        """Split the leaf below with the best gain; the yes side keeps the leaf's number, the
        no side takes the next free one."""
        if self.children is None:
            yes = np.isin(data.values[self.key][self.idx], self.question)
            self.children = (_Node(self.leaf, self.idx[yes], find), _Node(counter[0], self.idx[~yes], find))
            counter[0] += 1
        else:
            yes, no = self.children
            (yes if yes.best >= no.best else no).split(counter, data, find)
        self.best = max(c.best for c in self.children)

    def leaves(self):
        if self.children is None:
            yield self
        else:
            for child in self.children:
                yield from child.leaves()

    def event_map(self):
        if self.children is None:
            return Constant(self.leaf)
        return Split(self.key, self.question, self.children[0].event_map(), self.children[1].event_map())


def _map_all(emap, data, what):
    leaves = [emap.map(e) for e in data.dicts]
    for event, leaf in zip(data.events, leaves):
        if leaf is None:
            raise NnetError(f"build-tree: {what} has no leaf for the stats of event {_event_str(event)}: its "
                            f"central phone is in no roots line, or its pdf-class beyond its root's; check "
                            f"the context width and central position match the stats")
    return np.array(leaves)


def _leaf_groups(leaf_of, group_of, data):
    """Per group (in group order), the leaves with stats in it (ascending) and their summed stats."""
    groups = []
    for g in np.unique(group_of):
        idx = np.flatnonzero(group_of == g)
        leaves, inverse = np.unique(leaf_of[idx], return_inverse=True)
        groups.append((leaves, _sum_by(inverse.reshape(-1), data.packed[idx], len(leaves))))
    return groups


def _bottom_up(groups, thresh, min_clusters, var_floor):
    """ClusterBottomUp, per group (ClusterBottomUpCompartmentalized when ``min_clusters`` > 0):
    repeatedly merge the two clusters of one group whose merging loses the least likelihood,
    while that loss is below ``thresh`` (a loss equal to it up to rounding, as the last split's
    own, is not merged) and more than ``min_clusters`` clusters are left. Returns {old leaf:
    new leaf} and the number merged away; each cluster takes the number of the group's k-th
    leaf, k its rank by its last member (where Kaldi keeps the merged sum), as
    ClusterEventMapGetMapping."""
    limit = thresh - 1e-9 * abs(thresh) if math.isfinite(thresh) else thresh
    states = []
    for leaves, sums in groups:
        sums = sums.copy()
        own = _objf(sums, var_floor)
        dist = np.full((len(sums), len(sums)), np.inf)
        for i in range(1, len(sums)):
            dist[i, :i] = np.maximum(own[i] + own[:i] - _objf(sums[i] + sums[:i], var_floor), 0.0)
        states.append((leaves, sums, own, dist, list(range(len(sums)))))
    mins = [s[3].min() if len(s[1]) > 1 else np.inf for s in states]
    clusters = sum(len(s[1]) for s in states)
    while clusters > min_clusters and states:
        g = int(np.argmin(mins))
        if not mins[g] < limit:
            break
        _, sums, own, dist, into = states[g]
        i, j = np.unravel_index(int(np.argmin(dist)), dist.shape)   # i > j: j merges into i
        sums[i] += sums[j]
        own[i] = _objf(sums[i], var_floor)
        into[j] = i
        dist[j, :], dist[:, j] = np.inf, np.inf
        alive = np.array([into[k] == k for k in range(len(sums))])
        d = np.maximum(own[i] + own - _objf(sums[i] + sums, var_floor), 0.0)
        d[~alive] = np.inf
        dist[i, :i], dist[i + 1:, i] = d[:i], d[i + 1:]
        mins[g] = dist.min()
        clusters -= 1
    mapping, removed = {}, 0
    for leaves, sums, _, _, into in states:
        root = list(range(len(sums)))
        for k in range(len(sums)):
            while into[root[k]] != root[k]:
                root[k] = into[root[k]]
        survivors = sorted(set(root))
        removed += len(sums) - len(survivors)
        rank = {r: n for n, r in enumerate(survivors)}
        mapping.update({int(leaves[k]): int(leaves[rank[root[k]]]) for k in range(len(sums))})
    return mapping, removed


def _objf_given_map(leaf_of, data, var_floor):
    groups = _leaf_groups(leaf_of, np.zeros(len(leaf_of), dtype=int), data)
    return float(_objf(groups[0][1], var_floor).sum())


def build_tree(stats, questions, roots, max_leaves, thresh=0.0, cluster_thresh=-1.0, N=3, P=1,
               phone2num_pdf_classes=None, round_num_leaves=False, var_floor=VAR_FLOOR):
    """build-tree (Kaldi's BuildTree): from the roots (``roots``: [(phones, shared, split)]: a
    shared root has one leaf for all pdf-classes of its phones, a not-shared one a leaf per
    pdf-class; a not-split root is never split), split greedily, always the leaf anywhere whose
    best question gains most, until ``max_leaves`` (<= 0: no limit) or no gain exceeds
    ``thresh``; then merge leaves of the same root while the loss is below ``cluster_thresh``
    (< 0: the smallest gain of the splitting; 0: no merging) and, with ``round_num_leaves``
    (build-tree's default), down to a multiple of 8 leaves; pdf-ids in Kaldi's order.
    ``phone2num_pdf_classes``: the topology's (list indexed by phone, or dict); None takes it
    from the stats. Returns a Tree with ``info`` for the logs."""
    if not (thresh > 0 or max_leaves > 0):
        raise NnetError("build-tree: need thresh > 0 or max_leaves > 0")
    if not stats:
        raise NnetError("build-tree: no tree stats")
    roots = [(tuple(sorted(int(p) for p in phones)), bool(shared), bool(split)) for phones, shared, split in roots]
    phones = [p for r in roots for p in r[0]]
    if not roots or any(not r[0] for r in roots) or len(set(phones)) != len(phones):
        raise NnetError("build-tree: the roots must be non-empty phone sets, each phone in one root")
    data = _Data(stats)
    if (data.values.get(P, np.array([-1])) < 0).any():
        raise NnetError(f"build-tree: some stats have no central phone (key {P}): wrong central position?")
    unrooted = sorted(set(data.values[P].tolist()) - set(phones))
    if unrooted:   # build-tree's check: a lone shared root would otherwise take them silently
        raise NnetError(f"build-tree: phones {unrooted[:5]} appear in the stats but in no line of the roots")
    counter = [0]
    stub = _stub(P, [r[0] for r in roots], [r[1] for r in roots], _pdf_class_counts(phone2num_pdf_classes, data, P), counter)
    stub_leaf = _map_all(stub, data, "the roots")
    num_stub = counter[0]
    unsplit = [p for r in roots if not r[2] for p in r[0]]
    splittable = ~np.isin(data.values[P], unsplit)
    find = _Questions(questions, data, var_floor).best
    builders = [_Node(leaf, np.flatnonzero(splittable & (stub_leaf == leaf)), find) for leaf in range(num_stub)]
    gains = []
    while max_leaves <= 0 or counter[0] < max_leaves:
        gain, b = max((node.best, b) for b, node in enumerate(builders))
        if not (gain > thresh and gain > 0):
            break
        builders[b].split(counter, data, find)
        gains.append(gain)
    tree = stub.replace({node.leaf: node.event_map() for node in builders})
    smallest = min(gains, default=NO_SPLIT)
    if cluster_thresh < 0:
        cluster_thresh = smallest
    info = {"num_leaves_before": num_stub, "split_gains": gains, "impr": float(sum(gains)),
            "smallest_split": smallest, "cluster_thresh": cluster_thresh, "num_leaves_split": counter[0],
            "frames": float(data.packed[:, 0].sum()), "frames_split": float(data.packed[splittable, 0].sum())}
    leaf_of = stub_leaf.copy()   # not-split phones stay on their stub leaves
    for leaf in (leaf for node in builders for leaf in node.leaves()):
        leaf_of[leaf.idx] = leaf.leaf
    info["objf_before_cluster"] = _objf_given_map(leaf_of, data, var_floor)
    removed = 0
    if cluster_thresh != 0:
        mapping, removed = _bottom_up(_leaf_groups(leaf_of, stub_leaf, data), cluster_thresh, 0, var_floor)
        tree, leaf_of = _relabel(tree, leaf_of, mapping)
    if round_num_leaves:
        mapping, info["num_removed_rounding"] = _rounding(leaf_of, stub_leaf, data, counter[0] - removed, var_floor)
        tree, leaf_of = _relabel(tree, leaf_of, mapping)
    if cluster_thresh != 0 or round_num_leaves:
        tree, leaf_of = _relabel(tree, leaf_of, _renumbering(tree))
    info["num_removed"] = removed
    info["objf"] = _objf_given_map(leaf_of, data, var_floor)
    return Tree(tree, N, P, info)


def _rounding(leaf_of, stub_leaf, data, num_leaves, var_floor):
    """ClusterEventMapToNClustersRestrictedByMap: merge the closest leaves of a root, whichever
    root, until a multiple of 8 are left (unless the roots alone need more): {old: new}, number merged."""
    required = (num_leaves // 8) * 8
    groups = _leaf_groups(leaf_of, stub_leaf, data)
    size = int(stub_leaf.max()) + 1                                   # Kaldi's split_stats.size()
    with_stats = required - (size - len(groups))
    if required < size or with_stats > sum(len(leaves) for leaves, _ in groups):
        return {}, 0
    return _bottom_up(groups, math.inf, with_stats, var_floor)
