"""Phonetic decision trees: build-tree (Kaldi's src/tree: BuildTree, its EventMaps and
ContextDependency, in numpy), and the tree in Kaldi's format.

A tree is an EventMap (Constant, Table, Split: Kaldi's CE, TE, SE) from events (Kaldi's
EventType, see tree_stats.py: key -1 the pdf-class, keys 0..N-1 the phones of the context
window, P the central one) to pdf-ids; it is built from the tree stats of tree_stats.py and the
questions of questions.py, and written as Kaldi's binary ContextDependency, so kaldi_hmm_gmm (and
Kaldi) use it as it is: the tree file is Kaldi's own.
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see nnet_tools/speech/__init__.py)

import struct

import numpy as np

from nnet_tools.errors import NnetError, read_error
from nnet_tools.fileio import atomic_path, write_error
from nnet_tools.speech.models.gmm import kaldi_reason
from nnet_tools.speech.models.tree_stats import PDF_CLASS, _event_str

NO_SPLIT = 1.0e20   # SplitDecisionTree's smallest split when it made none


# --- event maps and trees --------------------------------------------------------------------

def _token(s):
    return s.encode() + b" "


def _int(v):
    return b"\x04" + struct.pack("<i", v)


class Constant:
    """A leaf: every event gets ``answer`` (Kaldi's ConstantEventMap, "CE")."""

    def __init__(self, answer):
        self.answer = int(answer)

    def map(self, event):
        return self.answer

    def answers(self, event):   # Kaldi's MultiMap: the answers events agreeing with ``event`` may get
        yield self.answer

    def replace(self, leaves):  # Kaldi's Copy(new_leaves): the map with leaves swapped for sub-maps
        return leaves.get(self.answer, self)

    def to_bytes(self):
        return _token("CE") + _int(self.answer)


class Table:
    """The sub-map indexed by the key's value (Kaldi's TableEventMap, "TE"); None: no answer."""

    def __init__(self, key, table):
        self.key, self.table = int(key), list(table)

    def _sub(self, event):
        v = event.get(self.key)
        return self.table[v] if v is not None and 0 <= v < len(self.table) else None

    def map(self, event):
        sub = self._sub(event)
        return sub.map(event) if sub is not None else None

    def answers(self, event):
        for sub in (self.table if self.key not in event else [self._sub(event)]):
            if sub is not None:
                yield from sub.answers(event)

    def replace(self, leaves):
        return Table(self.key, [m.replace(leaves) if m is not None else None for m in self.table])

    def to_bytes(self):
        body = b"".join(_token("NULL") if m is None else m.to_bytes() for m in self.table)
        return _token("TE") + _int(self.key) + b"\xfc" + struct.pack("<I", len(self.table)) + _token("(") + body + _token(")")


class Split:
    """``yes_map`` if the key's value is in ``yes``, else ``no_map`` (Kaldi's SplitEventMap, "SE");
    an event without the key has no answer."""

    def __init__(self, key, yes, yes_map, no_map):
        self.key, self.yes, self.yes_map, self.no_map = int(key), tuple(sorted({int(v) for v in yes})), yes_map, no_map
        self._yes = frozenset(self.yes)

    def map(self, event):
        if self.key not in event:
            return None
        return (self.yes_map if event[self.key] in self._yes else self.no_map).map(event)

    def answers(self, event):
        if self.key not in event or event[self.key] in self._yes:
            yield from self.yes_map.answers(event)
        if self.key not in event or event[self.key] not in self._yes:
            yield from self.no_map.answers(event)

    def replace(self, leaves):
        return Split(self.key, self.yes, self.yes_map.replace(leaves), self.no_map.replace(leaves))

    def to_bytes(self):
        yes = b"\x04" + struct.pack(f"<i{len(self.yes)}i", len(self.yes), *self.yes)   # ConstIntegerSet::Write
        return (_token("SE") + _int(self.key) + yes + _token("{") + self.yes_map.to_bytes()
                + self.no_map.to_bytes() + _token("}"))


class Tree:
    """A tree: the EventMap ``root`` from events to pdf-ids, its context width N and central
    position P, and what building it did (``info``: split gains, thresholds, objectives)."""

    def __init__(self, root, N, P, info=None):
        self.root, self.N, self.P, self.info = root, N, P, dict(info or {})
        self.num_pdfs = max(root.answers({}), default=-1) + 1   # ContextDependency::NumPdfs

    def map(self, event):
        """The pdf-id of ``event`` (an EventType or a dict key -> value); None where it has none."""
        return self.root.map(dict(event))


def _relabel(emap, leaf_of, mapping):
    """The map with leaves renamed by ``mapping`` {old: new}, and the events' leaves ``leaf_of`` too."""
    lookup = np.arange(1 + max(max(mapping, default=0), int(leaf_of.max(initial=0))))
    lookup[list(mapping)] = list(mapping.values())
    return emap.replace({old: Constant(new) for old, new in mapping.items()}), lookup[leaf_of]


def _renumbering(emap):
    """RenumberEventMap's mapping: leaves numbered 0, 1, ... in the order of their old numbers."""
    return {a: i for i, a in enumerate(sorted(set(emap.answers({}))))}


def _stub(P, phone_sets, shared, num_pdf_classes, counter):
    """GetStubMap: the roots before splitting, one leaf per shared root or per pdf-class of a
    not-shared one; a table on the central phone where every root is one phone, else a split
    halving the list of roots. Leaves are numbered in the order of the roots (``counter``)."""
    def leaf():
        counter[0] += 1
        return Constant(counter[0] - 1)
    if len(phone_sets) == 1:
        if shared[0]:
            return leaf()
        return Table(PDF_CLASS, [leaf() for _ in range(max(num_pdf_classes(p) for p in phone_sets[0]))])
    highest = max(max(s) for s in phone_sets)
    if max(len(s) for s in phone_sets) == 1 and len(phone_sets) <= 2 * highest:
        table = [None] * (highest + 1)
        for s, sh in zip(phone_sets, shared):
            table[s[0]] = _stub(P, [s], [sh], num_pdf_classes, counter)
        return Table(P, table)
    half = len(phone_sets) // 2
    first = _stub(P, phone_sets[:half], shared[:half], num_pdf_classes, counter)
    second = _stub(P, phone_sets[half:], shared[half:], num_pdf_classes, counter)
    return Split(P, [p for s in phone_sets[:half] for p in s], first, second)


def _pdf_class_counts(phone2num_pdf_classes, data, P):
    """phone -> its number of pdf-classes: from the topology's list or dict, or (None) from the
    pdf-classes seen in the stats."""
    if phone2num_pdf_classes is None:
        seen = {}
        for e in data.dicts:
            seen[e[P]] = max(seen.get(e[P], 0), e.get(PDF_CLASS, 0) + 1)
        counts = seen
    elif isinstance(phone2num_pdf_classes, dict):
        counts = phone2num_pdf_classes
    else:
        counts = dict(enumerate(phone2num_pdf_classes))

    def count(phone):
        n = int(counts.get(phone, 0))
        if n <= 0:
            raise NnetError(f"build-tree: phone {phone} has no pdf-classes ("
                            + ("no stats: pass the topology's phone2num_pdf_classes)" if phone2num_pdf_classes is None
                               else "not in the topology)"))
        return n
    return count


def monophone_tree(phones, phone2num_pdf_classes):
    """MonophoneContextDependency: one pdf per pdf-class of each phone (N=1, P=0); an item of
    ``phones`` that is a set of phones shares its pdfs (MonophoneContextDependencyShared)."""
    sets = [sorted(int(q) for q in p) if np.ndim(p) else [int(p)] for p in phones]
    counts = _pdf_class_counts(phone2num_pdf_classes, None, 0)
    return Tree(_stub(0, sets, [False] * len(sets), counts, [0]), 1, 0)


# --- Kaldi's tree file -----------------------------------------------------------------------

def kaldi_bytes(tree, N=None, P=None):
    """ContextDependency::Write in binary, without the "\\0B" header of a file."""
    N, P = tree.N if N is None else N, tree.P if P is None else P
    if not 0 <= P < N:
        raise NnetError(f"tree: invalid central position {P} for context width {N}")
    return (_token("ContextDependency") + _int(N) + _int(P) + _token("ToPdf") + tree.root.to_bytes()
            + _token("EndContextDependency"))


def to_context_dependency(tree, N=None, P=None):
    """The tree as kaldi_hmm_gmm.ContextDependency (N and P default to the tree's)."""
    return _context_dependency(kaldi_bytes(tree, N, P))


def _context_dependency(stream):
    cd = khg.ContextDependency.__new__(khg.ContextDependency)
    cd.__setstate__((np.frombuffer(stream, dtype=np.int8).tolist(),))
    return cd


def write_tree(path, cd):
    """Write Kaldi's binary ``tree`` file atomically (``cd``: a ContextDependency or a Tree)."""
    if isinstance(cd, Tree):
        cd = to_context_dependency(cd)
    with atomic_path(path) as tmp:
        try:
            cd.write(binary=True, filename=tmp)
        except RuntimeError as e:
            raise write_error(path, RuntimeError(kaldi_reason(e))) from None


def read_tree(path):
    """Kaldi's binary ``tree`` file as kaldi_hmm_gmm.ContextDependency (cd.num_pdfs: its leaves),
    checked by parsing it first: a bad file is one line here, not a crash inside Kaldi."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise read_error(path, "tree file", e) from None
    if not data.startswith(b"\0B"):
        raise NnetError(f"{path}: not a Kaldi tree in binary form (no binary header; text trees are not read)")
    parse_context_dependency(data[2:], path)
    return _context_dependency(data[2:])


def tree_from_context_dependency(cd):
    """A ContextDependency (from read_tree, or Kaldi's code) as a Tree of ours."""
    N, P, root = parse_context_dependency(np.array(cd.__getstate__()[0], dtype=np.int8).tobytes(), "tree")
    return Tree(root, N, P)


def parse_context_dependency(stream, where):
    """(N, P, EventMap) of a binary ContextDependency stream; NnetError naming ``where`` if bad."""
    r = _Reader(stream, where)
    r.expect("ContextDependency")
    N, P = r.int(), r.int()
    token = r.token()
    if token == "ToLength":   # ContextDependency::Read's back-compatibility
        r.event_map()
        token = r.token()
    if token != "ToPdf":
        r.fail(f"token '{token}' where ToPdf was expected")
    root = r.event_map()
    r.expect("EndContextDependency")
    if root is None or not 0 <= P < N:
        r.fail("no map, or a central position outside the context")
    return N, P, root


class _Reader:
    """Kaldi's binary stream: tokens ending in a space, sized integers, integer vectors."""

    def __init__(self, data, where):
        self.data, self.pos, self.where = bytes(data), 0, where

    def fail(self, what):
        raise NnetError(f"{self.where}: not a Kaldi tree: {what} at byte {self.pos}")

    def token(self):
        end = self.data.find(b" ", self.pos)
        if end < 0:
            self.fail("truncated")
        token, self.pos = self.data[self.pos:end].decode("latin-1"), end + 1
        return token

    def expect(self, token):
        got = self.token()
        if got != token:
            self.fail(f"token '{got}' where {token} was expected")

    def _unpack(self, fmt, size):
        if self.pos + size > len(self.data):
            self.fail("truncated")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def int(self, size_byte=4, fmt="<i"):
        if self._unpack("<b", 1)[0] != size_byte:
            self.fail("an integer of unexpected size")
        return self._unpack(fmt, 4)[0]

    def ints(self):
        n = self.int()
        if n < 0:
            self.fail("negative vector size")
        return self._unpack(f"<{n}i", 4 * n)

    def event_map(self):
        kind = self.token()
        if kind == "NULL":
            return None
        if kind == "CE":
            return Constant(self.int())
        if kind == "TE":
            key, size = self.int(), self.int(-4, "<I")
            self.expect("(")
            table = [self.event_map() for _ in range(size)]
            self.expect(")")
            return Table(key, table)
        if kind == "SE":
            key, yes = self.int(), self.ints()
            self.expect("{")
            yes_map, no_map = self.event_map(), self.event_map()
            self.expect("}")
            if yes_map is None or no_map is None:
                self.fail("a split with an empty branch")
            return Split(key, yes, yes_map, no_map)
        self.fail(f"'{kind}' where an event map was expected")


def stats_per_leaf(tree, stats):
    """Kaldi's SplitStatsByMap + SumStatsVec: the stats pooled per pdf-id ([Gauss or None] of
    tree.num_pdfs); an event the tree gives no pdf is an error (stats of another lang dir)."""
    pooled = [None] * tree.num_pdfs
    for event, g in stats.items():
        pdf = tree.map(event)
        if pdf is None:
            raise NnetError(f"the tree has no pdf for the stats' event {_event_str(event)} (tree and stats "
                            f"from different lang dirs?)")
        pooled[pdf] = g if pooled[pdf] is None else pooled[pdf] + g
    return pooled
