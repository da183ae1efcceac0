"""Triphone GMMs (steps/train_deltas.sh and what it calls): phone segments of Kaldi's own
alignments, convert-ali onto a tree, a model file that keeps its tree, gmm-init-model, and
train_deltas.sh end to end on Kaldi's yesno exp/mono, decoded with the triphone graph, whose
phones in context are those of the training graphs; train_sat.sh's alignment model in
align_fmllr.sh and decode_fmllr.sh."""
import kaldi_hmm_gmm as khg  # before kaldifst (nnet_tools/speech/__init__.py)
import kaldifst

import os
from pathlib import Path

import numpy as np
import pytest

from helpers import error_line, run
from nnet_tools.data import tables
from nnet_tools.kaldi import alignments, gmm as kaldi_gmm
from nnet_tools.speech.corpus import transcripts
from nnet_tools.speech.lang import fstio, langdir
from nnet_tools.speech.models import align, gmm, questions, tree, tree_build, tree_stats
from nnet_tools.speech.models.likelihoods import compute_likes
from nnet_tools.speech.search import graph

REPO = Path(__file__).resolve().parents[1]
YESNO = REPO.parent / "shared" / "testdata" / "kaldi-models" / "yesno-mono-gmm"
MONO = YESNO / "exp" / "mono"
LANG = YESNO / "data" / "lang"
pytestmark = pytest.mark.skipif(not YESNO.is_dir(), reason=f"shared test data not found at {YESNO}")


@pytest.fixture(scope="module")
def kaldi_mono():
    return kaldi_gmm.read_model(str(MONO / "final.mdl")), dict(alignments.read_alignment_dir(MONO))


def test_phone_segments_of_kaldis_alignments_spell_the_transcripts(kaldi_mono):
    """SplitToPhones on Kaldi's (self-loop-reordered) alignments: each segment one phone, and the
    non-silence phones are the words' (YES -> Y, NO -> N) in order."""
    model, ali = kaldi_mono
    phones = {int(i): p for p, i in (line.split() for line in (LANG / "phones.txt").read_text().splitlines())}
    table = model.tid_table()
    refs = transcripts.read_text(str(YESNO / "data" / "train_yesno" / "text"))
    for utt, tids in ali.items():
        segments = align.phone_segments(table, tids)
        assert sum(len(c) for _, c in segments) == len(tids)
        start = 0
        for phone, classes in segments:
            assert set(table.phone[tids[start:start + len(classes)]]) == {phone}
            assert classes[0] == 0 and (np.diff(classes) >= 0).all()   # a left-to-right HMM, entered at state 0
            start += len(classes)
        spoken = [phones[p] for p, _ in segments if phones[p] != "SIL"]
        assert spoken == [{"YES": "Y", "NO": "N"}[w] for w in refs[utt]], utt


def _triphone_model(model, ali, max_leaves=12):
    """A tree built from the tree stats of Kaldi's alignments, and a one-Gaussian model on it."""
    feats = {u: np.random.default_rng(0).normal(size=(len(a), 4)) + np.asarray(model.tid2pdf())[a][:, None]
             for u, a in ali.items()}
    table, stats = model.tid_table(), {}
    for utt, tids in ali.items():
        seg = align.phone_segments(table, tids)
        tree_stats.accumulate_tree_stats(stats, feats[utt], [p for p, _ in seg], [c for _, c in seg], ci_phones=[1])
    roots = tree_build.read_roots(str(LANG / "phones" / "roots.int"))
    classes = khg.HmmTopology()
    classes.read(model.topo_text)
    num_classes = classes.get_phone_to_num_pdf_classes()
    qs = questions.compile_questions([(1,), (2,), (3,), (2, 3)], [], num_classes)
    t = tree_build.build_tree(stats, qs, roots, max_leaves, thresh=0.0, phone2num_pdf_classes=num_classes)
    ctx = tree.to_context_dependency(t)
    return gmm.init_from_leaf_stats(model.topo_text, ctx, tree.stats_per_leaf(t, stats)), t


def test_convert_ali_keeps_the_path_and_takes_the_new_trees_pdfs(kaldi_mono):
    model, ali = kaldi_mono
    same = align.AlignmentConverter(model, model)
    assert all(np.array_equal(same.convert(a, u), a) for u, a in ali.items())   # onto itself: unchanged
    tri, t = _triphone_model(model, ali)
    assert t.num_pdfs > model.num_pdfs
    conv, old, new = align.AlignmentConverter(model, tri), model.tid_table(), tri.tid_table()
    tid2pdf = tri.tid2pdf()
    for utt, tids in ali.items():
        out = conv.convert(tids, utt)
        for name in ("phone", "hmm_state", "is_self_loop", "is_final"):
            assert np.array_equal(getattr(old, name)[tids], getattr(new, name)[out]), name
        segments = align.phone_segments(new, out)
        windows = align.contexts([p for p, _ in segments], 3, 1)
        start = 0
        for (phone, classes), window in zip(segments, windows):
            for k, cls in enumerate(classes):
                ok, pdf = tri.tree().compute(window, int(cls))
                assert ok and pdf == tid2pdf[out[start + k]]
            start += len(classes)


def test_a_model_file_keeps_its_tree(kaldi_mono, tmp_path):
    model, ali = kaldi_mono
    tri, t = _triphone_model(model, ali)
    gmm.save(tri, tmp_path / "tri.mdl")
    back = gmm.load(tmp_path / "tri.mdl")
    assert back.num_pdfs == t.num_pdfs and np.array_equal(back.tid2pdf(), tri.tid2pdf())
    assert np.array_equal(gmm.tree_bytes(back.tree()), gmm.tree_bytes(tri.tree()))
    tree.write_tree(tmp_path / "tree", back.tree())
    r = run("nnet-tree-info", tmp_path / "tree", check=True)
    assert r.stdout.split() == ["num-pdfs", str(t.num_pdfs), "context-width", "3", "central-position", "1"]
    # Kaldi's own monophone tree file reads, and is what our monophone model builds.
    assert np.array_equal(gmm.tree_bytes(tree.read_tree(str(MONO / "tree"))), gmm.tree_bytes(model.tree()))


def test_gmm_init_model_takes_each_leafs_mean_and_floored_variance(kaldi_mono):
    model, ali = kaldi_mono
    tri, t = _triphone_model(model, ali)
    feats = {u: np.random.default_rng(0).normal(size=(len(a), 4)) + np.asarray(model.tid2pdf())[a][:, None]
             for u, a in ali.items()}
    conv, tid2pdf = align.AlignmentConverter(model, tri), tri.tid2pdf()
    rows = {p: [] for p in range(tri.num_pdfs)}
    for utt, tids in ali.items():
        pdfs = tid2pdf[conv.convert(tids, utt)]
        for p in np.unique(pdfs):
            rows[p].append(feats[utt][pdfs == p])
    for p, chunks in rows.items():
        x = np.concatenate(chunks)
        g = tri.am.get_pdf(p)
        np.testing.assert_allclose(np.asarray(g.means)[0], x.mean(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(g.vars)[0], np.maximum(x.var(0), 0.01), rtol=1e-4)


@pytest.fixture(scope="module")
def yesno_dirs(tmp_path_factory):
    """A data dir (feature paths rewritten to the shared copy), the Kaldi lang dir, and an
    alignment dir of Kaldi's mono model (ours in .npz) and alignments, one job."""
    d = tmp_path_factory.mktemp("yesno_tri")
    data = d / "data"
    data.mkdir()
    for name in ("feats.scp", "cmvn.scp", "spk2utt", "text"):
        lines = (YESNO / "data" / "train_yesno" / name).read_text().splitlines()
        if name.endswith(".scp"):
            lines = [f"{key} {YESNO}/data/train_yesno/data/{path.split('/data/train_yesno/data/', 1)[1]}"
                     for key, path in (line.split(None, 1) for line in lines)]
        (data / name).write_text("".join(f"{line}\n" for line in lines))
    # The tutorial's utt2spk has its columns swapped ("global <utt>"): one speaker, 'global'.
    (data / "utt2spk").write_text("".join(f"{line.split()[0]} global\n" for line in (data / "text").read_text().splitlines()))
    ali_dir = d / "mono_ali"
    ali_dir.mkdir()
    run("nnet-gmm-copy", "--format", "npz", MONO / "final.mdl", ali_dir / "final.mdl", check=True)
    with tables.IntVectorWriter(f"ark:{ali_dir}/ali.1.ark") as w:
        for utt, a in alignments.read_alignment_dir(MONO):
            w.write(utt, a)
    (ali_dir / "num_jobs").write_text("1\n")
    for name in ("steps", "utils"):
        os.symlink(REPO / name, d / name)
    return d


def test_train_deltas_builds_a_tree_trains_and_decodes(yesno_dirs):
    """tri1 on yesno: a tree split from the 3 roots and rounded down to a multiple of 8 leaves
    (build-tree's default; yesno has only 20 phone-in-context states), the last pass's likelihood
    above the first's, and the triphone graph decodes the training utterances: 27 of 31 right
    when measured (Kaldi's monophone: 30; 8 leaves and 5 passes are no better model than its 11
    pdfs and 40 passes: the ladder itself is measured on recipes/spoken_commands)."""
    d = yesno_dirs
    r = run("steps/train_deltas.sh", "--num-iters", "5", "--realign-iters", "3", "--max-iter-inc", "3",
            "40", "200", "data", LANG, "mono_ali", "tri1", cwd=d)
    assert r.returncode == 0, r.stderr[-3000:]
    info = run("nnet-tree-info", d / "tri1" / "tree", check=True).stdout.split()
    leaves = int(info[1])
    log = (d / "tri1" / "log" / "build_tree.log").read_text()
    split = int(log.split("Split 3 leaves into ")[1].split(",")[0])
    assert leaves % 8 == 0 and 3 < leaves <= split <= 40 and f"Number of leaves is {leaves}" in log
    assert gmm.load(d / "tri1" / "final.mdl").num_pdfs == leaves
    likes = [float((d / "tri1" / "log" / f"acc.{x}.1.log").read_text().split("Overall avg like per frame (Gaussian only) = ")[1].split()[0])
             for x in (1, 4)]
    assert likes[1] > likes[0]
    assert not list((d / "tri1").glob("feats.*.ark"))   # the dumped features go
    run("utils/mkgraph.sh", LANG, "tri1", "tri1/graph", cwd=d, check=True)
    feats = ("ark:nnet-apply-cmvn --utt2spk data/utt2spk scp:data/cmvn.scp scp:data/feats.scp ark:- |"
             " nnet-add-deltas ark:- ark:- |")
    r = run("bash", "-o", "pipefail", "-c",
            f"nnet-gmm-compute-likes tri1/final.mdl '{feats}' ark:- | nnet-decode-faster-mapped tri1/final.mdl "
            f"tri1/graph/HCLG.fst ark:- ark,t:words.txt", cwd=d)
    assert r.returncode == 0, r.stderr[-2000:]
    words = {int(i): w for w, i in (line.split() for line in (LANG / "words.txt").read_text().splitlines())}
    hyp = {line.split()[0]: [words[int(i)] for i in line.split()[1:]] for line in (d / "words.txt").read_text().splitlines()}
    refs = transcripts.read_text(str(d / "data" / "text"))
    assert len(hyp) == 31 and sum(hyp[u] == refs[u] for u in refs) >= 25
    # The decoding graph expands phones in context as the training graphs do: HCLG made with a G
    # of the reference words alone holds the forced alignment's path (the same acoustic score).
    feats = dict(tables.read_matrices(feats.replace("data/", f"{d}/data/")))
    for utt, ref_score, hclg_score in _reference_path_scores(d / "tri1" / "final.mdl", refs, feats, 4):
        assert hclg_score == pytest.approx(ref_score, rel=1e-6), utt


def _reference_path_scores(model, refs, feats, count):
    """(utt, acoustic log-likelihood of the training graph's alignment, the same of the best path
    through HCLG made by mkgraph's steps with a G accepting the reference words alone)."""
    mdl, lng = gmm.load(model), langdir.load(LANG)
    l_disambig = fstio.read_fst(f"{LANG}/L_disambig.fst")
    compiler = align.GraphCompiler(mdl, lng, fstio.read_fst(f"{LANG}/L.fst"))
    tid2pdf = np.asarray(gmm.load_tid2pdf(model))
    for utt in sorted(refs)[:count]:
        ids = lng.word_ids(refs[utt], utt)
        g = kaldifst.StdVectorFst()
        for _ in range(len(ids) + 1):
            g.add_state()
        g.start = 0
        for i, w in enumerate(ids):
            g.add_arc(i, kaldifst.StdArc(w, w, 0.0, i + 1))
        g.set_final(len(ids), 0.0)
        likes = compute_likes(mdl, feats[utt])
        hclg = graph.make_hclg(lng, mdl, l_disambig, g)   # named: the decoder keeps a C++ reference
        decoder = khg.FasterDecoder(hclg, khg.FasterDecoderOptions(beam=500.0, max_active=100000, min_active=20))
        decoder.decode(khg.DecodableCtc(np.ascontiguousarray(0.1 * likes[:, tid2pdf[1:]], dtype=np.float32)))
        _, path = decoder.get_best_path(use_final_probs=True)
        _, hclg_tids, _, _ = kaldifst.get_linear_symbol_sequence(path)
        ali = align.Aligner(mdl, beam=500.0, retry_beam=0).align(utt, compiler.compile(refs[utt], utt), feats[utt])
        yield utt, _path_score(likes, tid2pdf, ali), _path_score(likes, tid2pdf, hclg_tids)


def _path_score(likes, tid2pdf, tids):
    return float(sum(likes[t, tid2pdf[tid]] for t, tid in enumerate(tids)))


def test_convert_ali_refuses_a_tree_that_is_not_the_models(yesno_dirs, tmp_path):
    d = yesno_dirs
    tree.write_tree(tmp_path / "other_tree", gmm.load(d / "mono_ali" / "final.mdl").tree())
    r = run("nnet-convert-ali", d / "mono_ali" / "final.mdl", d / "tri1" / "final.mdl", tmp_path / "other_tree",
            f"ark:{d}/mono_ali/ali.1.ark", f"ark:{tmp_path}/ali.ark")
    assert "is not the tree of" in error_line(r)
    assert not (tmp_path / "ali.ark").exists()


def test_train_sat_makes_the_alignment_model_that_align_and_decode_fmllr_use_first(yesno_dirs):
    """steps/train_sat.sh on yesno (one speaker) ends, as Kaldi's, with final.alimdl: the SAT
    model's Gaussians re-estimated on the speaker-independent features, so it explains those
    features better than the SAT model does, Gaussian for Gaussian; steps/align_fmllr.sh and
    steps/decode_fmllr.sh take it for their first, unadapted pass."""
    d = yesno_dirs
    r = run("steps/train_sat.sh", "--num-iters", "5", "--realign-iters", "3", "--fmllr-iters", "2",
            "--max-iter-inc", "3", "40", "200", "data", LANG, "mono_ali", "tri3", cwd=d)
    assert r.returncode == 0, r.stderr[-3000:]
    sat, alimdl = gmm.load(d / "tri3" / "final.mdl"), gmm.load(d / "tri3" / "final.alimdl")
    assert gmm.num_gauss(alimdl) == gmm.num_gauss(sat) and alimdl.num_pdfs == sat.num_pdfs
    si_feats = dict(tables.read_matrices(f"ark:nnet-apply-cmvn --utt2spk {d}/data/utt2spk scp:{d}/data/cmvn.scp "
                                         f"scp:{d}/data/feats.scp ark:- | nnet-add-deltas ark:- ark:- |"))
    alis = dict(tables.read_int_vectors(f"ark:{d}/tri3/ali.1.ark"))
    tid2pdf = np.asarray(gmm.load_tid2pdf(d / "tri3" / "final.mdl"))

    def frame_like(model):
        return sum(_path_score(compute_likes(model, si_feats[u]), tid2pdf, a) for u, a in alis.items()) \
            / sum(len(a) for a in alis.values())
    assert frame_like(alimdl) > frame_like(sat) + 1.0, (frame_like(alimdl), frame_like(sat))

    r = run("steps/align_fmllr.sh", "--nj", "1", "data", LANG, "tri3", "tri3_ali", cwd=d)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tri3_ali/final.alimdl" in (d / "tri3_ali" / "log" / "align_pass1.1.log").read_text().splitlines()[0]
    assert len(dict(tables.read_int_vectors(f"ark:{d}/tri3_ali/ali.1.ark"))) == 31
    run("utils/mkgraph.sh", LANG, "tri3", "tri3/graph", cwd=d, check=True)
    r = run("steps/decode_fmllr.sh", "--nj", "1", "--skip-scoring", "true", "tri3/graph", "data", "tri3/decode", cwd=d)
    assert r.returncode == 0, r.stderr[-3000:]
    # Kaldi's layout: the speaker-independent decode in DECODE_DIR.si; its lattices' posteriors,
    # Gaussians from the alignment model, give the first transforms
    assert "nnet-gmm-compute-likes tri3/final.alimdl" in (d / "tri3" / "decode.si" / "log" / "decode.1.log").read_text()
    pass1 = (d / "tri3" / "decode" / "log" / "fmllr_pass1.1.log").read_text()
    assert "nnet-lattice-to-post --acoustic-scale 0.083333" in pass1 and "--gpost-model tri3/final.alimdl" in pass1
    assert "Done 31 lattices." in pass1 and "Done 1 speakers: 1 transforms updated" in pass1
    words = {int(i): w for w, i in (line.split() for line in (LANG / "words.txt").read_text().splitlines())}
    hyp = {line.split()[0]: [words[int(i)] for i in line.split()[1:]]
           for line in (d / "tri3" / "decode" / "words.1.txt").read_text().splitlines()}
    refs = transcripts.read_text(str(d / "data" / "text"))
    assert len(hyp) == 31 and sum(hyp[u] == refs[u] for u in refs) >= 25
