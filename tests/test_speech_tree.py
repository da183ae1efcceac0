"""Decision-tree building (acc-tree-stats, cluster-phones, compile-questions, build-tree): likelihood
gains against closed forms from the raw frames, the greedy stopping rules, roots, post-clustering,
and the tree through Kaldi's own ContextDependency and tree file."""
import math

import numpy as np
import pytest

khg = pytest.importorskip("kaldi_hmm_gmm", reason="speech extra not installed (pip install -e '.[speech]')")

from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.models import questions as tree_questions, tree, tree_build, tree_stats  # noqa: E402


def utterance(rng, phones, mean, n=30, num_classes=1, d=2):
    """(feats, phones, pdf_classes) of an utterance whose phone i has n frames per pdf-class c,
    unit-variance noise around mean(left, phone, right, c)."""
    feats, classes = [], []
    for i, p in enumerate(phones):
        left = phones[i - 1] if i > 0 else 0
        right = phones[i + 1] if i + 1 < len(phones) else 0
        feats += [rng.normal(size=(n, d)) + mean(left, p, right, c) for c in range(num_classes)]
        classes.append(np.repeat(np.arange(num_classes), n))
    return np.concatenate(feats), list(phones), classes


def stats_of(utterances, **kw):
    stats = {}
    for u in utterances:
        tree_stats.accumulate_tree_stats(stats, *u, **kw)
    return stats


def log_like(x):
    """The closed form: log-likelihood of frames x under their own ML diagonal Gaussian."""
    n, d = x.shape
    return -0.5 * n * (d * math.log(2 * math.pi) + np.log(x.var(0)).sum() + d)


def not_split(*phones, shared=False):
    return [((p,), shared, False) for p in phones]


def event(left, phone, right, pdf_class=0):
    return ((-1, pdf_class), (0, left), (1, phone), (2, right))


def test_objf_is_kaldis_gauss_clusterable():
    """Our objective equals Kaldi's own GaussClusterable::Objf, a floored dimension included."""
    x = np.random.default_rng(0).normal(size=(50, 3)) * [1.0, 0.05, 2.0]   # var 0.0025 < floor 0.01
    g = tree_stats.Gauss(50.0, x.sum(0), (x * x).sum(0))
    kaldi = khg.GaussClusterable(g.x.reshape(-1, 1), g.x2.reshape(-1, 1), 0.01, 50.0).objf()
    assert tree_stats.objf(g) == pytest.approx(kaldi, rel=1e-5)
    assert tree_stats.objf(g) < log_like(x)   # the floor lowers it below the unfloored closed form
    y = x[:, [0, 2]]
    assert tree_stats.objf(tree_stats.Gauss(50.0, y.sum(0), (y * y).sum(0))) == pytest.approx(log_like(y))


def test_split_gain_is_the_closed_form():
    """Phone 2 after phone 1 or after phone 3, different means: the one split asks about the left
    phone, and its gain is ll(after 1) + ll(after 3) - ll(all), computed from the frames."""
    rng = np.random.default_rng(1)
    mean = lambda l, p, r, c: {1: 0.0, 3: 4.0}.get(l, 8.0)   # noqa: E731
    u1, u2 = utterance(rng, [1, 2], mean, n=40), utterance(rng, [3, 2], mean, n=60)
    stats = stats_of([u1, u2])
    assert set(stats) == {event(0, 1, 2), event(1, 2, 0), event(0, 3, 2), event(3, 2, 0)}
    a, b = u1[0][40:], u2[0][60:]
    want = log_like(a) + log_like(b) - log_like(np.vstack([a, b]))
    questions = tree_questions.compile_questions([[1], [3], [1, 2, 3]], [], 1)
    roots = not_split(1, 3) + [((2,), False, True)]
    t = tree_build.build_tree(stats, questions, roots, max_leaves=4, cluster_thresh=0)
    assert t.info["split_gains"] == [pytest.approx(want, rel=1e-9)]
    split = t.root.table[2].table[0]   # central phone 2, pdf-class 0
    assert (split.key, split.yes) == (0, (1,))   # {1} and {3} tie: the first question wins
    assert t.num_pdfs == 4 and t.map(event(1, 2, 0)) != t.map(event(3, 2, 0))
    assert t.info["objf"] - t.info["objf_before_cluster"] == 0


def chain_stats(means, seed=2):
    """Phone 2 after each of the phones in ``means`` (their means), one utterance each."""
    rng = np.random.default_rng(seed)
    return stats_of([utterance(rng, [l, 2], lambda l, p, r, c: means.get(l, -5.0) if p == 2 else -5.0)
                     for l in means])


def test_greedy_splitting_stops_at_max_leaves_and_at_thresh():
    means = {1: 0.0, 3: 3.0, 4: 7.0, 5: 12.0}
    stats = chain_stats(means)
    questions = tree_questions.compile_questions([[1], [3], [4], [5], [1, 3], [4, 5]], [], 1)
    roots = not_split(1, 3, 4, 5) + [((2,), False, True)]
    full = tree_build.build_tree(stats, questions, roots, max_leaves=0, thresh=1e-6, cluster_thresh=0)
    gains = full.info["split_gains"]
    assert len(gains) == 3 and full.num_pdfs == 5 + 3   # one leaf per left phone of phone 2
    assert gains[0] > gains[1] > gains[2] > 0           # (the data make best-first gains decrease)
    two = tree_build.build_tree(stats, questions, roots, max_leaves=7, cluster_thresh=0)
    assert two.num_pdfs == 7 and two.info["split_gains"] == pytest.approx(gains[:2])
    at = (gains[1] + gains[2]) / 2
    by_thresh = tree_build.build_tree(stats, questions, roots, max_leaves=0, thresh=at, cluster_thresh=0)
    assert by_thresh.num_pdfs == 7 and by_thresh.info["split_gains"] == pytest.approx(gains[:2])
    pdfs = {by_thresh.map(e) for e in stats}
    assert pdfs == set(range(7))   # pdf-ids are 0..num_pdfs-1


def test_best_split_anywhere_goes_first():
    """Two split roots: the one split allowed goes to the root whose best split gains more."""
    rng = np.random.default_rng(10)
    mean = lambda l, p, r, c: (10.0 if p == 2 else 2.0) * (l == 3)   # noqa: E731
    stats = stats_of([utterance(rng, [l, p], mean) for l in (1, 3) for p in (2, 6)])
    questions = tree_questions.compile_questions([[1], [3]], [], 1)
    roots = not_split(1, 3) + [((2,), False, True), ((6,), False, True)]
    one = tree_build.build_tree(stats, questions, roots, max_leaves=5, cluster_thresh=0)
    assert one.map(event(1, 2, 0)) != one.map(event(3, 2, 0)) and one.map(event(1, 6, 0)) == one.map(event(3, 6, 0))
    two = tree_build.build_tree(stats, questions, roots, max_leaves=6, cluster_thresh=0)
    assert two.info["split_gains"][0] == one.info["split_gains"][0] > two.info["split_gains"][1] > 0
    assert two.map(event(1, 6, 0)) != two.map(event(3, 6, 0))


def test_context_independent_phone_is_never_asked_its_context():
    """A CI phone (as silence) has no context in its stats: even in a split root shared with a
    phone whose frames depend on the context as much as its own, no question about the context
    is asked while the CI phone is on that leaf, so Kaldi's tree gives the CI phone the same
    pdf whatever the context, and the other phone is split on its context."""
    rng = np.random.default_rng(11)
    mean = lambda l, p, r, c: 10.0 * l + 5.0 * c if p in (1, 4) else 0.0   # noqa: E731
    stats = stats_of([utterance(rng, [l, p, r], mean, num_classes=2) for l in (2, 3) for r in (2, 3) for p in (1, 4)],
                     ci_phones=(1,))
    questions = tree_questions.compile_questions([[1], [2], [3], [4], [1, 2, 3, 4]], [], 2)
    roots = [((1, 4), True, True)] + not_split(2, 3, shared=True)
    t = tree_build.build_tree(stats, questions, roots, max_leaves=20, cluster_thresh=0)
    ci = [e for e in stats if dict(e)[1] == 1]
    assert len(ci) == 2 and len({t.map(e) for e in ci}) == 2   # one pdf per pdf-class
    assert len({t.map(e) for e in stats if dict(e)[1] == 4}) == 8   # per pdf-class and left, right phone
    cd = tree.to_context_dependency(t)
    assert {cd.compute([l, 1, r], c) for l in (0, 2, 3) for r in (0, 2, 3) for c in (0, 1)} == \
        {(True, t.map(e)) for e in ci}


def test_not_split_root_stays_one_leaf():
    """Phone 1's frames depend strongly on its left phone; a not-split root ignores that."""
    rng = np.random.default_rng(3)
    mean = lambda l, p, r, c: 10.0 * l if p == 1 else 0.0   # noqa: E731
    stats = stats_of([utterance(rng, [l, 1], mean, num_classes=2) for l in (2, 3, 4)])
    questions = tree_questions.compile_questions([[2], [3], [4], [1, 2, 3, 4]], [], 2)
    others = not_split(2, 3, 4)
    kept = tree_build.build_tree(stats, questions, others + [((1,), False, False)], max_leaves=50, cluster_thresh=0)
    for c in (0, 1):
        assert len({kept.map(e) for e in stats if dict(e)[1] == 1 and dict(e)[-1] == c}) == 1
    assert kept.num_pdfs == 8   # 2 pdf-classes x 4 phones, no split
    split = tree_build.build_tree(stats, questions, others + [((1,), False, True)], max_leaves=50, cluster_thresh=0)
    assert len({split.map(e) for e in stats if dict(e)[1] == 1}) == 6


def test_shared_root_splits_on_pdf_class():
    """A shared root whose first state differs most splits on the pdf-class question [0] first."""
    rng = np.random.default_rng(4)
    mean = lambda l, p, r, c: (10.0 if c == 0 else 0.0) + 0.3 * (l == 3) if p == 2 else 0.0   # noqa: E731
    stats = stats_of([utterance(rng, [l, 2], mean, num_classes=3) for l in (1, 3)])
    questions = tree_questions.compile_questions([[1], [3], [1, 2, 3]], [], 3)
    assert questions[-1] == [(0,), (0, 1)]
    roots = not_split(1, 3, shared=True) + [((2,), True, True)]
    t = tree_build.build_tree(stats, questions, roots, max_leaves=4, cluster_thresh=0,
                        phone2num_pdf_classes=[0, 3, 3, 3])
    split = t.root.table[2]
    assert isinstance(split, tree.Split) and (split.key, split.yes) == (-1, (0,))
    assert t.map(event(1, 2, 0, 0)) != t.map(event(1, 2, 0, 1)) == t.map(event(1, 2, 0, 2)) == t.map(event(3, 2, 0, 2))


def test_post_clustering_merges_leaves_of_one_root():
    """Left phones 1 and 4 alike, 3 and 5 alike, only singleton questions: two splits leave two
    alike leaves in different branches, and clustering at the smallest split's gain merges them."""
    stats = chain_stats({1: 0.0, 3: 10.0, 4: 0.02, 5: 10.02}, seed=5)
    questions = tree_questions.compile_questions([[1], [3], [4], [5]], [], 1)
    roots = not_split(1, 3, 4, 5) + [((2,), False, True)]
    plain = tree_build.build_tree(stats, questions, roots, max_leaves=7, cluster_thresh=0)
    merged = tree_build.build_tree(stats, questions, roots, max_leaves=7)   # cluster_thresh -1: smallest split
    assert plain.num_pdfs == 7 and merged.num_pdfs == 6 and merged.info["num_removed"] == 1
    assert merged.info["cluster_thresh"] == min(merged.info["split_gains"])
    assert len({plain.map(event(left, 2, 0)) for left in (1, 3, 4, 5)}) == 3
    pdf = {left: merged.map(event(left, 2, 0)) for left in (1, 3, 4, 5)}
    assert pdf[1] == pdf[4] != pdf[3] == pdf[5]
    assert sorted({merged.map(e) for e in stats}) == list(range(6))   # renumbered to 0..5
    assert merged.info["objf"] <= merged.info["objf_before_cluster"]


def test_round_num_leaves_to_a_multiple_of_8():
    stats = chain_stats({p: 3.0 * i for i, p in enumerate([1, 3, 4, 5, 6, 7, 8, 9, 10, 11])}, seed=6)
    questions = tree_questions.compile_questions([[p] for p in [1, 3, 4, 5, 6, 7, 8, 9, 10, 11]], [], 1)
    roots = not_split(1, 3, 4, 5, 6, 7, 8, 9, 10, 11, shared=True) + [((2,), True, True)]
    t = tree_build.build_tree(stats, questions, roots, max_leaves=0, thresh=1e-6, cluster_thresh=0, round_num_leaves=True)
    assert t.info["num_leaves_split"] == 20 and t.num_pdfs == 16
    assert len({t.map(e) for e in stats if dict(e)[1] != 2}) == 10   # the other roots keep their leaves


def test_cluster_phones_questions():
    rng = np.random.default_rng(7)
    means = {1: 0.0, 2: 0.2, 3: 10.0, 4: 10.2, 5: 20.0, 6: 20.3}
    # pdf-class 1 carries the phone identity; pdf-class 0 says the opposite and must be ignored
    mean = lambda l, p, r, c: means[p] if c == 1 else -means[p] * (p % 2)   # noqa: E731
    stats = stats_of([utterance(rng, [p], mean, num_classes=3) for p in means])
    sets = [[1], [2], [3, 4], [5], [6]]
    questions = tree_questions.cluster_phones(stats, sets)
    assert questions[0] == (1, 2, 3, 4, 5, 6)
    assert all(tuple(s) in questions for s in sets)
    assert (1, 2) in questions and (5, 6) in questions and (1, 3) not in questions
    assert len(questions) == len(set(questions)) and all(list(q) == sorted(q) for q in questions)
    kaldis = tree_questions.cluster_phones(stats, sets, include_full_set=False)
    assert kaldis == questions[1:]
    assert tree_questions.cluster_phones(stats, sets) == questions   # seeded: the same every time
    with pytest.raises(NnetError, match="more than one phone set"):
        tree_questions.cluster_phones(stats, [[1, 2], [2]])
    with pytest.raises(NnetError, match="pdf_class_list"):
        tree_questions.cluster_phones(stats, sets, pdf_class_list=(5,))


def test_compile_questions():
    q = tree_questions.compile_questions([[3, 1], [2]], [[2], [1, 2, 3]], [-1, 3, 3, 1])
    assert list(q) == [-1, 0, 1, 2]
    assert q[-1] == [(0,), (0, 1)] and q[0] == q[1] == q[2] == [(1, 2, 3), (1, 3), (2,)]
    assert tree_questions.compile_questions([[1]], [], 1, N=1) == {-1: [], 0: [(1,)]}
    with pytest.raises(NnetError, match="duplicate phones"):
        tree_questions.compile_questions([[1, 1]], [], 3)
    with pytest.raises(NnetError, match=r"phones \[7\].*undefined in the topology"):
        tree_questions.compile_questions([[1, 7]], [], [0, 3])


def test_monophone_tree_is_kaldis_byte_for_byte():
    def kaldi(cd):
        return np.array(cd.__getstate__()[0], dtype=np.int8).tobytes()
    ours = tree.monophone_tree([1, 2, 3], [0, 3, 3, 3])
    assert tree.kaldi_bytes(ours) == kaldi(khg.monophone_context_dependency(phones=[1, 2, 3], phone2num_pdf_classes=[0, 3, 3, 3]))
    counts = [0, 1, 3, 5, 3, 2]   # a split on the central phone: sets of several phones
    ours = tree.monophone_tree([[1, 2], [3], [4, 5]], counts)
    theirs = khg.monophone_context_dependency_shared(phone_classes=[[1, 2], [3], [4, 5]], phone2num_pdf_classes=counts)
    assert tree.kaldi_bytes(ours) == kaldi(theirs) and ours.num_pdfs == theirs.num_pdfs == 3 + 5 + 3


TOPO = """<Topology>
<TopologyEntry>
<ForPhones>
{phones}
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.75 <Transition> 2 0.25 </State>
<State> 2 <PdfClass> 2 <Transition> 2 0.75 <Transition> 3 0.25 </State>
<State> 3 </State>
</TopologyEntry>
</Topology>
"""


@pytest.fixture(scope="module")
def triphone():
    """A tree over phones 1..6 (1 context-independent, as silence), 3 pdf-classes, shared and
    not-shared roots, every split kind, built from random sentences."""
    rng = np.random.default_rng(8)
    effect = rng.normal(size=(7, 3)) * 3
    mean = lambda l, p, r, c: effect[p, c] + 0.8 * effect[l, 0] - 0.6 * effect[r, 2]   # noqa: E731
    utts = [utterance(rng, [1] + list(rng.integers(2, 7, size=6)) + [1], mean, n=4, num_classes=3) for _ in range(40)]
    stats = stats_of(utts, ci_phones=(1,))
    sets = [[1], [2, 3], [4], [5], [6]]
    questions = tree_questions.compile_questions(tree_questions.cluster_phones(stats, sets), [[1]], 3)
    roots = [((1,), True, False), ((2, 3), True, True), ((4,), False, True), ((5, 6), False, True)]
    t = tree_build.build_tree(stats, questions, roots, max_leaves=30, phone2num_pdf_classes=[0] + [3] * 6)
    return stats, t


def test_tree_is_kaldis_context_dependency(triphone, tmp_path):
    stats, t = triphone
    assert any(dict(e).keys() == {-1, 1} for e in stats) and 20 < t.num_pdfs <= 30
    cd = tree.to_context_dependency(t)
    assert (cd.context_width, cd.central_position, cd.num_pdfs) == (3, 1, t.num_pdfs)
    for e in stats:
        d = dict(e)
        window = [d.get(k, 0) for k in range(3)]   # a CI phone's tree never asks its context
        assert cd.compute(window, d[-1]) == (True, t.map(e))
    topo = khg.HmmTopology()
    topo.read(TOPO.format(phones="1 2 3 4 5 6"))
    assert khg.TransitionModel(ctx_dep=cd, hmm_topo=topo).num_pdfs == t.num_pdfs   # Kaldi can train on it
    tree.write_tree(str(tmp_path / "tree"), cd)
    assert (tmp_path / "tree").read_bytes()[:2] == b"\0B"
    back = tree.read_tree(str(tmp_path / "tree"))
    assert back.__getstate__() == cd.__getstate__() and back.num_pdfs == t.num_pdfs
    ours = tree.tree_from_context_dependency(back)
    assert all(ours.map(e) == t.map(e) for e in stats)


def test_tree_objective_is_its_leaves(triphone):
    """The logged objective is the stats pooled by the final tree's pdfs, lowered by the merging."""
    stats, t = triphone
    pooled = {}
    for e, g in stats.items():
        pooled[t.map(e)] = pooled[t.map(e)] + g if t.map(e) in pooled else g
    assert sum(tree_stats.objf(g) for g in pooled.values()) == pytest.approx(t.info["objf"], rel=1e-12)
    assert t.info["num_removed"] == t.info["num_leaves_split"] - t.num_pdfs > 0
    assert t.info["objf"] < t.info["objf_before_cluster"]


def test_bad_tree_file_is_one_line(triphone, tmp_path):
    _, t = triphone
    path = tmp_path / "tree"
    tree.write_tree(str(path), t)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(NnetError, match=f"{path}: not a Kaldi tree: truncated"):
        tree.read_tree(str(path))
    path.write_text("ContextDependency 3 1 ToPdf CE 0 EndContextDependency\n")
    with pytest.raises(NnetError, match=f"{path}: not a Kaldi tree in binary form"):
        tree.read_tree(str(path))
    with pytest.raises(NnetError, match="cannot read tree file"):
        tree.read_tree(str(tmp_path / "none"))


def test_stats_accumulate_save_load_and_sum(tmp_path):
    rng = np.random.default_rng(9)
    mean = lambda l, p, r, c: p + c   # noqa: E731
    jobs = [[utterance(rng, [1, 2, 3, 1], mean, n=5, num_classes=2) for _ in range(3)] for _ in range(2)]
    parts = [stats_of(job, ci_phones=(1,)) for job in jobs]
    together = stats_of(jobs[0] + jobs[1], ci_phones=(1,))
    total = tree_stats.sum_stats(parts)
    assert set(total) == set(together)
    for e in together:
        assert total[e].count == together[e].count
        np.testing.assert_allclose(total[e].x2, together[e].x2)
    # a CI central phone has no context keys; outside the utterance the context is phone 0
    assert ((-1, 0), (1, 1)) in total and event(0, 1, 2) not in total and event(3, 2, 1) not in total
    assert event(1, 2, 3, 1) in total and total[event(1, 2, 3, 1)].count == 5 * 6
    feats, _, classes = jobs[0][0]
    x = feats[10:15]   # phone 2's pdf-class 0 frames in the first utterance
    one = stats_of([jobs[0][0]], ci_phones=(1,))[event(1, 2, 3, 0)]
    np.testing.assert_allclose(one.x, x.sum(0))
    np.testing.assert_allclose(one.x2, (x * x).sum(0))
    path = tmp_path / "1.treeacc"
    tree_stats.save_stats(str(path), total)
    back = tree_stats.load_stats(str(path))
    assert set(back) == set(total)
    for e in total:
        assert back[e].count == total[e].count and np.array_equal(back[e].x, total[e].x)
        assert np.array_equal(back[e].x2, total[e].x2)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(NnetError, match=f"{path}: not a tree stats file"):
        tree_stats.load_stats(str(path))
    np.savez(tmp_path / "acc.npz", format=np.array("nnet-tools-gmm-acc-1"))
    with pytest.raises(NnetError, match="acc.npz: not a tree stats file written by nnet-tools"):
        tree_stats.load_stats(str(tmp_path / "acc.npz"))
    with pytest.raises(NnetError, match="missing.treeacc: tree stats file does not exist"):
        tree_stats.load_stats(str(tmp_path / "missing.treeacc"))
    with pytest.raises(NnetError, match="the phones cover 7 frames but the features have shape"):
        tree_stats.accumulate_tree_stats({}, np.zeros((8, 2)), [1, 2], [[0, 0, 0], [0, 0, 0, 0]])


def test_bad_roots_and_stats_are_one_line(tmp_path):
    (tmp_path / "roots.int").write_text("shared split 1 2\nnot-shared 3\n")
    with pytest.raises(NnetError, match="roots.int: line 2: bad roots line 'not-shared 3'"):
        tree_build.read_roots(str(tmp_path / "roots.int"))
    (tmp_path / "roots.int").write_text("shared split 1 2\nnot-shared not-split 3\n")
    assert tree_build.read_roots(str(tmp_path / "roots.int")) == [((1, 2), True, True), ((3,), False, False)]
    stats = chain_stats({1: 0.0, 3: 1.0})
    questions = tree_questions.compile_questions([[1], [3]], [], 1)
    with pytest.raises(NnetError, match=r"phones \[3\] appear in the stats but in no line of the roots"):
        tree_build.build_tree(stats, questions, [((1, 2), True, True)], max_leaves=10)
    with pytest.raises(NnetError, match="no leaf for the stats of event -1:1 0:0 1:3 2:2"):
        stats[((-1, 1), (0, 0), (1, 3), (2, 2))] = stats[((-1, 0), (0, 0), (1, 3), (2, 2))]   # a 2nd pdf-class
        tree_build.build_tree(stats, questions, not_split(1, 2, 3), max_leaves=10, phone2num_pdf_classes=[0, 1, 1, 1])
