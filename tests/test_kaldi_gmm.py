"""Kaldi GMMs and alignments in and out (nnet_tools/kaldi/{transition_model,gmm,alignments}.py,
nnet-gmm-copy, nnet-ali-to-pdf with a Kaldi model): the yesno exp/mono that Kaldi wrote, our GMM
written in Kaldi's format and read back, a Kaldi lang dir, and a DNN trained on Kaldi's alignments."""
import kaldi_hmm_gmm as khg  # before kaldifst (nnet_tools/speech/__init__.py)

import gzip
from pathlib import Path

import numpy as np
import pytest

from helpers import error_line, mono_model, run
from nnet_tools.data import cmvn, tables
from nnet_tools.errors import NnetError
from nnet_tools.kaldi import alignments, gmm as kaldi_gmm, transition_model
from nnet_tools.kaldi.stream import KaldiReader, KaldiWriter
from nnet_tools.speech.features.deltas import add_deltas
from nnet_tools.speech.models import gmm

MODELS = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "kaldi-models"
YESNO = MODELS / "yesno-mono-gmm"
MONO = YESNO / "exp" / "mono"
NNET3_MDL = MODELS / "tract-nnet3-raw" / "delay_5_D20_T259_S3" / "final.mdl"
pytestmark = pytest.mark.skipif(not YESNO.is_dir(), reason=f"shared test data not found at {YESNO}")


@pytest.fixture(scope="module")
def yesno_data(tmp_path_factory):
    """The yesno data dir's feats.scp and cmvn.scp with the author's absolute paths rewritten to
    the shared copy (everything before data/train_yesno/data/)."""
    d = tmp_path_factory.mktemp("yesno")
    for name in ("feats.scp", "cmvn.scp", "utt2spk", "text"):
        lines = (YESNO / "data" / "train_yesno" / name).read_text().splitlines()
        if name.endswith(".scp"):
            lines = [f"{key} {YESNO}/data/train_yesno/data/{path.split('/data/train_yesno/data/', 1)[1]}"
                     for key, path in (line.split(None, 1) for line in lines)]
        (d / name).write_text("".join(f"{line}\n" for line in lines))
    return d


def _features(data_dir):
    """train_mono.sh's features: apply-cmvn (means, per speaker: here one, 'global') | add-deltas."""
    stats = dict(tables.read_double_matrices(f"scp:{data_dir}/cmvn.scp"))["global"]
    return {utt: add_deltas(cmvn.apply_cmvn(f, stats)).astype(np.float32)
            for utt, f in tables.read_matrices(f"scp:{data_dir}/feats.scp")}


def _gmm_params(model):
    return [(np.asarray(g.weights), np.asarray(g.means_invvars), np.asarray(g.inv_vars))
            for g in (model.am.get_pdf(p) for p in range(model.num_pdfs))]


def assert_same_model(a, b, exact=True):
    """Same topology, transitions and Gaussians; ``exact=False``: Gaussians to float32 rounding
    (our .npz keeps means and variances, so means x inverse variances are multiplied again)."""
    assert a.topo_text == b.topo_text and a.num_pdfs == b.num_pdfs and a.dim == b.dim
    assert np.array_equal(a.tid2pdf(), b.tid2pdf())
    sa, sb = a.tm.__getstate__(), b.tm.__getstate__()
    assert sa[2:6] == sb[2:6] and np.array_equal(sa[6], sb[6])
    np.testing.assert_allclose(sa[7], sb[7], rtol=1e-6)
    for pa, pb in zip(_gmm_params(a), _gmm_params(b)):
        for x, y in zip(pa, pb):
            assert np.array_equal(x, y) if exact else np.allclose(x, y, rtol=1e-6, atol=1e-7)
    frames = np.random.default_rng(0).normal(size=(5, a.dim)).astype(np.float32)
    for p in range(a.num_pdfs):
        like_a, like_b = ([m.am.log_likelihood(p, x) for x in frames] for m in (a, b))
        assert like_a == like_b if exact else np.allclose(like_a, like_b, rtol=1e-6)


# --- the Kaldi-written yesno exp/mono -----------------------------------------------------------

def test_yesno_final_mdl_reads_as_in_its_files():
    model = kaldi_gmm.read_model(MONO / "final.mdl")
    assert (model.num_pdfs, model.dim, gmm.num_gauss(model)) == (11, 39, 943)
    assert model.tm.num_transition_ids == 30 and len(model.tm.__getstate__()[0]) == 11
    assert model.topo_text == (YESNO / "data" / "lang" / "topo").read_text()  # the topology prepare_lang.sh wrote
    # SIL (phone 1) has 5 states, pdfs 0-4; Y and N 3 each: pdfs 5-7 and 8-10.
    assert [model.tm.transition_id_to_phone(t) for t in (1, 17, 19, 25)] == [1, 1, 2, 3]
    assert model.tid2pdf().tolist() == [-1] + [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 2 + \
        [5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10]
    occs = [float(x) for x in (MONO / "final.occs").read_text().strip().strip("[]").split()]
    assert len(occs) == model.num_pdfs
    assert kaldi_gmm.read_model(MONO / "0.mdl").am.num_gauss == 11   # gmm-init-mono: one Gaussian a pdf


def test_yesno_model_written_again_is_kaldis_file_byte_for_byte(tmp_path):
    model = kaldi_gmm.read_model(MONO / "final.mdl")
    kaldi_gmm.write_model(model, tmp_path / "final.mdl")
    assert (tmp_path / "final.mdl").read_bytes() == (MONO / "final.mdl").read_bytes()
    kaldi_gmm.write_tree(model, tmp_path / "tree")  # its monophone tree is Kaldi's tree
    assert (tmp_path / "tree").read_bytes() == (MONO / "tree").read_bytes()


def test_derived_tables_are_kaldis():
    """ComputeDerived / ComputeDerivedOfProbs as Kaldi's own (kaldi-hmm-gmm's, built from the topology)."""
    topo_text = (YESNO / "data" / "lang" / "topo").read_text()
    topo = khg.HmmTopology()
    topo.read(topo_text)
    built = khg.TransitionModel(ctx_dep=khg.monophone_context_dependency(
        phones=topo.phones, phone2num_pdf_classes=topo.get_phone_to_num_pdf_classes()), hmm_topo=topo)
    ours = transition_model.from_khg(built, "topo", topo_text)
    state = built.__getstate__()
    assert (ours.state2id, ours.id2state, ours.id2pdf, ours.num_pdfs) == tuple(state[2:6])
    np.testing.assert_allclose(ours.non_self_loop_log_probs(), state[7], rtol=1e-6)
    from_str = transition_model.from_khg(built)   # the topology from its str(), Kaldi's text Write
    assert (from_str.topo, from_str.tuples) == (ours.topo, ours.tuples) and np.array_equal(from_str.log_probs, ours.log_probs)
    # and the text TransitionModel is Kaldi's TransitionModel::Write (str() of kaldi-hmm-gmm's)
    w = KaldiWriter(False)
    transition_model.write(w, ours)
    mine, kaldis = w.getvalue().decode().split(), str(built).split()
    assert len(mine) == len(kaldis)
    for a, b in zip(mine, kaldis):
        assert a == b or (a not in "[]" and float(a) == pytest.approx(float(b), rel=1e-5)), (a, b)


def test_gaussians_and_alignments_agree_with_the_features(yesno_data):
    """The Gaussians read are Kaldi's: on train_mono.sh's features the best-scoring pdf is Kaldi's
    aligned pdf on almost every frame. The 31 alignments have the features' frame counts."""
    from nnet_tools.speech.models.likelihoods import compute_likes
    model = kaldi_gmm.read_model(MONO / "final.mdl")
    feats = _features(yesno_data)
    ali = dict(alignments.read_alignment_dir(MONO))
    assert len(ali) == len(feats) == 31 and {u: len(a) for u, a in ali.items()} == {u: len(f) for u, f in feats.items()}
    assert sum(len(a) for a in ali.values()) == 18996
    tid2pdf = kaldi_gmm.load_tid2pdf(MONO / "final.mdl")
    pdfs = {u: alignments.to_pdfs(tid2pdf, a, u) for u, a in ali.items()}
    assert sorted(set(np.concatenate(list(pdfs.values())).tolist())) == list(range(11))
    hits = sum(int((compute_likes(model, feats[u]).argmax(1) == pdfs[u]).sum()) for u in feats)
    assert hits / 18996 > 0.95


def test_kaldi_lang_dir_and_model_realign_kaldis_alignments(yesno_data):
    """The prepare_lang.sh lang dir reads, its L.fst compiles training graphs, and our aligner with
    Kaldi's final.mdl gives Kaldi's alignments (written from pass 38's model, so nearly all)."""
    from nnet_tools.speech.corpus import transcripts
    from nnet_tools.speech.lang import fstio, langdir
    from nnet_tools.speech.models import align
    lang_dir = YESNO / "data" / "lang"
    model = kaldi_gmm.read_model(MONO / "final.mdl")
    lang = langdir.load(str(lang_dir))
    assert langdir.read_topology(str(lang_dir))[1] == model.topo_text
    compiler = align.GraphCompiler(model, lang, fstio.read_fst(str(lang_dir / "L.fst")), "lang")
    refs = transcripts.read_text(str(yesno_data / "text"))
    aligner = align.Aligner(model)
    ali = dict(alignments.read_alignment_dir(MONO))
    same = total = 0
    for utt, x in _features(yesno_data).items():
        ours = aligner.align(utt, compiler.compile(refs[utt], utt), x)
        same, total = same + int((np.asarray(ours) == ali[utt]).sum()), total + len(x)
    assert aligner.done == 31 and same / total > 0.99


def test_kaldi_lang_dir_and_model_make_a_graph_through_our_programs(tmp_path):
    """nnet-mkgraph on the prepare_lang.sh lang dir (L_disambig.fst, G.fst) with Kaldi's model, made ours."""
    run("nnet-gmm-copy", MONO / "final.mdl", tmp_path / "final.npz", check=True)
    r = run("nnet-mkgraph", YESNO / "data" / "lang", tmp_path / "final.npz", tmp_path / "graph", check=True)
    assert "Wrote" in r.stderr and (tmp_path / "graph" / "HCLG.fst").is_file()
    assert (tmp_path / "graph" / "words.txt").read_text() == (YESNO / "data" / "lang" / "words.txt").read_text()


def test_alignments_written_read_back(tmp_path):
    ali = list(alignments.read_alignments(MONO / "ali.1.gz"))
    (tmp_path / "ali").mkdir()
    alignments.write_alignments(tmp_path / "ali" / "ali.1.gz", ali)
    back = list(alignments.read_alignment_dir(tmp_path / "ali"))
    assert [u for u, _ in back] == [u for u, _ in ali] and all(np.array_equal(a, b) for (_, a), (_, b) in zip(ali, back))
    assert gzip.decompress((tmp_path / "ali" / "ali.1.gz").read_bytes()).startswith(ali[0][0].encode() + b" ")  # text, as Kaldi's


# --- our GMM in Kaldi's format and back -------------------------------------------------------

@pytest.mark.parametrize("binary", [True, False])
def test_our_gmm_in_kaldi_format_reads_back_the_same(tmp_path, binary):
    model = mono_model(tmp_path / "lang")
    for p in range(model.num_pdfs):       # several Gaussians of different weights, means, variances
        model.am.split_pdf(p, 2 + p % 3, 0.5)
    gmm.save(model, tmp_path / "ours.mdl")
    ours = gmm.load(tmp_path / "ours.mdl")
    kaldi_gmm.write_model(ours, tmp_path / "kaldi.mdl", binary)
    assert (tmp_path / "kaldi.mdl").read_bytes().startswith(b"\0B<TransitionModel>" if binary else b"<TransitionModel>")
    assert_same_model(kaldi_gmm.read_model(tmp_path / "kaldi.mdl"), ours)
    assert_same_model(kaldi_gmm.load(tmp_path / "kaldi.mdl"), ours)   # recognised by its contents


def test_kaldi_model_to_ours_and_back_through_the_program(tmp_path):
    """Trained transition probabilities and 943 Gaussians: Kaldi -> .npz -> Kaldi text -> Kaldi binary."""
    run("nnet-gmm-copy", MONO / "final.mdl", tmp_path / "final.npz", check=True)
    ours = gmm.load(tmp_path / "final.npz")
    assert_same_model(ours, kaldi_gmm.read_model(MONO / "final.mdl"), exact=False)
    r = run("nnet-gmm-copy", "--binary", "false", "--write-tree", tmp_path / "tree", tmp_path / "final.npz",
            tmp_path / "text.mdl", check=True)
    assert "Kaldi's text format: 11 pdfs, feature dim 39, 943 Gaussians" in r.stderr
    assert (tmp_path / "tree").read_bytes().startswith(b"ContextDependency")   # text tree
    assert_same_model(kaldi_gmm.read_model(tmp_path / "text.mdl"), ours)
    run("nnet-gmm-copy", "--binary", "false", MONO / "final.mdl", tmp_path / "kaldi-text.mdl", check=True)
    run("nnet-gmm-copy", tmp_path / "kaldi-text.mdl", tmp_path / "binary.mdl", check=True)
    assert (tmp_path / "binary.mdl").read_bytes() == (MONO / "final.mdl").read_bytes()   # gmm-copy both ways


def test_a_program_that_reads_our_gmm_names_a_kaldi_model_as_one(tmp_path):
    """Binary and text Kaldi final.mdl alike: the line says what it is and how to convert it."""
    run("nnet-gmm-copy", "--binary", "false", MONO / "final.mdl", tmp_path / "text.mdl", check=True)
    for path in (MONO / "final.mdl", tmp_path / "text.mdl"):
        line = error_line(run("nnet-gmm-info", path))
        assert line.endswith(f"{path}: a Kaldi model file; this program reads the .npz GMM that nnet-gmm-* "
                             f"write (nnet-gmm-copy {path} final.npz converts a monophone one)")


def test_a_triphone_like_model_does_not_become_ours(tmp_path):
    """Our .npz holds monophone models only: tuples that a monophone tree would not make are refused."""
    model = kaldi_gmm.read_model(MONO / "final.mdl")
    tm = transition_model.from_khg(model.tm, "m", model.topo_text)
    tm.tuples = [(p, s, f, sl) if p != 3 else (p, s, f - 3, sl - 3) for p, s, f, sl in tm.tuples]  # N shares Y's pdfs
    model.tm = transition_model.to_khg(transition_model.TransitionModel(tm.topo, tm.tuples, tm.log_probs), "m")[1]
    with pytest.raises(NnetError, match="not a monophone model"):
        kaldi_gmm.check_monophone(model, "m")


# --- bad input --------------------------------------------------------------------------------

def test_truncated_final_mdl_is_one_line(tmp_path):
    data = (MONO / "final.mdl").read_bytes()
    cut = tmp_path / "final.mdl"
    cut.write_bytes(data[:50000])
    line = error_line(run("nnet-gmm-copy", cut, tmp_path / "out.mdl"))
    assert f"{cut}: at byte" in line and "truncated" in line and not (tmp_path / "out.mdl").exists()
    for n in (1, 2, 100, 700, 1000, 2000, len(data) - 400):
        cut.write_bytes(data[:n])
        with pytest.raises(NnetError, match=f"^{cut}: .*(truncated|expected)"):
            kaldi_gmm.read_model(cut)
    line = error_line(run("nnet-gmm-copy", NNET3_MDL, tmp_path / "out.mdl"))
    assert "not a GMM model: its TransitionModel is followed by '<Nnet3>'" in line


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("<Triples> 11", "<Triples> 12", 1), "expected an integer"),
    (lambda t: t.replace("\n3 2 10 \n", "\n9 2 10 \n", 1), "phone 9, which the topology does not have"),
    (lambda t: t.replace("<LogProbs> \n [ 0 ", "<LogProbs> \n [ 0 0.5 ", 1), "<LogProbs> has 32 values"),
    (lambda t: t.replace("<Transition> 4 0.75 <Transition> 5 0.25", "<Transition> 4 0.75 <Transition> 6 0.25", 1),
     "bad HMM topology: .*invalid dest state 6"),
    (lambda t: t.replace("<NUMPDFS> 11", "<NUMPDFS> 10", 1), "the AmDiagGmm has 10 pdfs, the TransitionModel 11"),
    (lambda t: t.replace("<INV_VARS>  [\n  ", "<INV_VARS>  [\n  -", 1), "inverse variances must be positive"),
])
def test_corrupt_text_model_is_one_line(tmp_path, edit, message):
    kaldi_gmm.write_model(kaldi_gmm.read_model(MONO / "0.mdl"), tmp_path / "0.mdl", binary=False)
    text = (tmp_path / "0.mdl").read_text()
    assert edit(text) != text
    (tmp_path / "0.mdl").write_text(edit(text))
    with pytest.raises(NnetError, match=f"^{tmp_path / '0.mdl'}: .*{message}"):
        kaldi_gmm.read_model(tmp_path / "0.mdl")


def test_reader_reads_kaldi_text_topology_spellings():
    """<ForwardPdfClass>/<SelfLoopPdfClass> (chain) topologies: a -1 in binary, <Tuples> in the model."""
    text = ("<Topology> <TopologyEntry> <ForPhones> 1 2 </ForPhones> <State> 0 <ForwardPdfClass> 0 "
            "<SelfLoopPdfClass> 1 <Transition> 0 0.5 <Transition> 1 0.5 </State> <State> 1 </State> "
            "</TopologyEntry> </Topology>")
    topo = transition_model.parse_topology_text(text, "topo")
    assert topo.phones == [1, 2] and not topo.is_hmm
    tm = transition_model.TransitionModel(topo, [(1, 0, 0, 1), (2, 0, 2, 3)], np.log(np.full(5, 0.5, np.float32)))
    for binary in (True, False):
        w = KaldiWriter(binary)
        transition_model.write(w, tm)
        assert b"<Tuples>" in w.getvalue()
        back = transition_model.read(KaldiReader(w.getvalue(), "tm"))
        assert back.tuples == tm.tuples and back.tid2pdf().tolist() == [-1, 1, 0, 3, 2]
        assert back.topo == topo


# --- a DNN on a Kaldi user's alignments ---------------------------------------------------------

def test_a_dnn_trains_on_kaldi_alignments(tmp_path, yesno_data):
    """nnet-ali-to-pdf with Kaldi's final.mdl and gzip'd alignments, as a Kaldi user types it; then
    egs from Kaldi's (compressed) features, and one training job that learns the targets."""
    targets = tmp_path / "targets.ark"
    r = run("nnet-ali-to-pdf", MONO / "final.mdl", f"ark:gunzip -c {MONO}/ali.*.gz |", f"ark:{targets}", check=True)
    assert "Converted 31 alignments" in r.stderr
    pdfs = dict(tables.read_int_vectors(f"ark:{targets}"))
    assert len(pdfs) == 31 and max(int(p.max()) for p in pdfs.values()) == 10
    run("nnet-get-egs", "--frames-per-eg", 8, "--left-context", 2, "--right-context", 2, "--num-utts-subset", 3,
        "--samples-per-iter", 2000, "--num-frames-diagnostic", 200, "--num-train-frames-combine", 200,
        "--num-targets", 11, f"scp:{yesno_data}/feats.scp", f"ark:{targets}", tmp_path / "egs", check=True)
    (tmp_path / "m.yaml").write_text("input-dim: 13\nsplice: -2:2\nlayers:\n"
                                     "  - {name: hidden, type: relu-batchnorm, dim: 32}\n"
                                     "  - {name: output, type: output, dim: 11}\n")
    run("nnet-init", tmp_path / "m.yaml", tmp_path / "0.mdl", check=True)
    run("nnet-train-one-job", "--use-gpu=no", "--learning-rate=0.002", "--minibatch-size=64", tmp_path / "0.mdl",
        tmp_path / "egs" / "egs.1.ark", tmp_path / "1.mdl", check=True)
    r = run("nnet-compute-prob", tmp_path / "1.mdl", tmp_path / "egs" / "valid_diagnostic.egs", check=True)
    accuracy = float(r.stderr.split("Overall accuracy for 'output' is ")[1].split()[0])
    assert accuracy > 0.4   # 11 classes; one pass over one archive reaches about 0.7
