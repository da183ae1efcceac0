"""Lattices (nnet_tools/speech/search/compact_lattice.py, lattice*.py, nnet-latgen-faster-mapped,
nnet-lattice-best-path, steps/score.sh): Kaldi's yesno model and graph decoded to lattices whose
best path is the best-path decoder's, Kaldi's text CompactLattice format written and read back,
the LM-weight and word-insertion-penalty sweep on lattices built by hand, and bad lattice files as
one line."""
import kaldi_hmm_gmm  # noqa: F401  before kaldifst/kaldi_decoder (nnet_tools/speech/__init__.py)

import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO, error_line, run
from nnet_tools.data import cmvn, tables
from nnet_tools.errors import NnetError
from nnet_tools.kaldi import gmm as kaldi_gmm
from nnet_tools.speech.features.deltas import add_deltas
from nnet_tools.speech.lang import fstio
from nnet_tools.speech.models.likelihoods import compute_likes
from nnet_tools.speech.search import decode, lattice, lattice_best_path, lattice_io
from nnet_tools.speech.search.compact_lattice import CompactLattice

MODELS = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "kaldi-models"
YESNO = MODELS / "yesno-mono-gmm"
MONO = YESNO / "exp" / "mono"
WORDS = {"NO": 2, "YES": 3}


@pytest.fixture(scope="module")
def yesno(tmp_path_factory):
    """Kaldi's yesno final.mdl, HCLG and the log-likelihoods of 8 of its utterances (train_mono.sh's
    features: CMVN, deltas), also as an ark; the transcripts as word-ids."""
    if not YESNO.is_dir():
        pytest.skip(f"shared test data not found at {YESNO}")
    d = tmp_path_factory.mktemp("yesno")
    scp = {}
    for name in ("feats.scp", "cmvn.scp"):
        lines = (YESNO / "data" / "train_yesno" / name).read_text().splitlines()[:8 if name == "feats.scp" else None]
        (d / name).write_text("".join(f"{k} {YESNO}/data/train_yesno/data/{p.split('/data/train_yesno/data/', 1)[1]}\n"
                                      for k, p in (line.split(None, 1) for line in lines)))
        scp[name] = d / name
    stats = dict(tables.read_double_matrices(f"scp:{scp['cmvn.scp']}"))["global"]
    model = kaldi_gmm.read_model(MONO / "final.mdl")
    likes = {u: compute_likes(model, add_deltas(cmvn.apply_cmvn(f, stats)).astype(np.float32))
             for u, f in tables.read_matrices(f"scp:{scp['feats.scp']}")}
    with tables.MatrixWriter(f"ark:{d / 'likes.ark'}") as w:
        for u, x in likes.items():
            w.write(u, x)
    text = {line.split()[0]: [WORDS[w] for w in line.split()[1:]]
            for line in (YESNO / "data" / "train_yesno" / "text").read_text().splitlines()}
    return {"dir": d, "likes": likes, "text": text, "hclg": fstio.read_fst(str(MONO / "graph" / "HCLG.fst")),
            "tid2pdf": kaldi_gmm.load_tid2pdf(MONO / "final.mdl")}


def lattice_of(paths):
    """A CompactLattice from the start state 0 to final state 1: one arc chain per path, each
    (words, graph cost per word, acoustic cost per word); tids 1 per arc."""
    arcs, finals = [[], []], [None, (0.0, 0.0, ())]
    for words, graph, acoustic in paths:
        prev = 0
        for k, w in enumerate(words):
            nxt = 1 if k == len(words) - 1 else len(arcs)
            if nxt != 1:
                arcs.append([])
                finals.append(None)
            arcs[prev].append((nxt, w, graph, acoustic, (1, 1)))
            prev = nxt
    return CompactLattice(0, arcs, finals)


# --- decoding -------------------------------------------------------------------------------

def test_lattice_best_path_is_the_best_path_decoders(yesno):
    """Wide beams: at LMWT = 1/acwt and no penalty, each lattice's best path is FasterDecoder's
    words (and yesno's transcript: Kaldi's yesno decodes without errors); the lattice is
    determinized (no state has two arcs with one word) and every path spans all the frames."""
    faster = decode.Decoder(yesno["hclg"], yesno["tid2pdf"], 0.1, 40.0)
    latgen = lattice.LatticeDecoder(yesno["hclg"], yesno["tid2pdf"], 0.1, beam=40.0, lattice_beam=10.0)
    branching = 0
    for utt, x in yesno["likes"].items():
        words, final = faster.decode(x, utt)
        out = latgen.decode(x, utt)
        assert final and out.reached_final
        best = lattice_best_path.best_paths(out.lattice, [(1.0, 0.1, 0.0)])[0]
        assert best.words == out.words == list(words) == yesno["text"][utt], utt
        assert len(best.tids) == len(out.tids) == len(x)
        assert best.graph + best.acoustic == pytest.approx(out.cost, rel=1e-5)   # acoustic costs unscaled in the file
        lat = out.lattice
        for s in range(lat.num_states):
            labels = [a[1] for a in lat.arcs[s]]
            assert len(labels) == len(set(labels)) and 0 not in labels, (utt, s)
            branching += len(labels) > 1
        assert all(t > s for s in range(lat.num_states) for t, *_ in lat.arcs[s])   # states in topological order
    assert branching > 0   # the lattices do hold alternatives


def test_raw_and_determinized_lattices_agree(yesno):
    """--determinize-lattice false keeps the pruned raw lattice (an arc per transition-id): its
    best paths are the determinized lattice's at the decoding's LM weight; it is much bigger."""
    det = lattice.LatticeDecoder(yesno["hclg"], yesno["tid2pdf"], 0.1, 20.0, 8.0)
    raw = lattice.LatticeDecoder(yesno["hclg"], yesno["tid2pdf"], 0.1, 20.0, 8.0, determinize=False)
    for utt, x in list(yesno["likes"].items())[:4]:
        a, b = det.decode(x, utt).lattice, raw.decode(x, utt).lattice
        assert b.num_states > 10 * a.num_states
        pa, pb = (lattice_best_path.best_paths(lat, [(1.0, 0.1, 0.0)])[0] for lat in (a, b))
        assert pa.words == pb.words and pa.tids == pb.tids
        assert pa.graph + pa.acoustic == pytest.approx(pb.graph + pb.acoustic, rel=1e-5)


def test_latgen_program_writes_kaldis_text_lattices_and_the_best_path(yesno, tmp_path):
    likes = f"ark:{yesno['dir'] / 'likes.ark'}"
    lat = tmp_path / "lat.1.gz"
    r = run("nnet-latgen-faster-mapped", "--beam", "20", "--lattice-beam", "6", "--allow-partial", "true",
            "--word-symbol-table", MONO / "graph" / "words.txt", MONO / "final.mdl", MONO / "graph" / "HCLG.fst",
            likes, f"ark:| gzip -c > {lat}", f"ark,t:{tmp_path / 'words.txt'}", f"ark,t:{tmp_path / 'ali.txt'}",
            check=True)
    assert "Done 8 utterances, failed for 0" in r.stderr and "Overall log-likelihood per frame is" in r.stderr
    assert "0_0_0_0_1_1_1_1 NO NO NO NO YES YES YES YES" in r.stderr.splitlines()   # --word-symbol-table
    words = {line.split()[0]: [int(w) for w in line.split()[1:]]
             for line in (tmp_path / "words.txt").read_text().splitlines()}
    assert words == {u: yesno["text"][u] for u in yesno["likes"]}
    ali = {line.split()[0]: line.split()[1:] for line in (tmp_path / "ali.txt").read_text().splitlines()}
    assert {u: len(a) for u, a in ali.items()} == {u: len(x) for u, x in yesno["likes"].items()}
    # Kaldi's text CompactLattice: "key " then tab-separated arcs and finals, a blank line after each
    text = gzip.decompress(lat.read_bytes()).decode()
    first = text.split("\n\n")[0].splitlines()
    assert first[0] == "0_0_0_0_1_1_1_1 " and all(len(line.split("\t")) in (1, 2, 3, 4) for line in first[1:])
    g, a, tids = first[1].split("\t")[3].split(",")
    assert float(a) > 100 * abs(float(g)) and all(t.isdigit() for t in tids.split("_"))   # acoustics unscaled
    read = dict(lattice_io.read_lattices(f"ark:gunzip -c {lat} |"))
    assert list(read) == list(yesno["likes"])
    ours = lattice.LatticeDecoder(yesno["hclg"], yesno["tid2pdf"], 0.1, 20.0, 6.0)
    for utt, x in yesno["likes"].items():
        assert read[utt] == ours.decode(x, utt).lattice   # the file holds what the library makes
    # and lattice-best-path at LMWT 10 gives the decoder's words
    run("nnet-lattice-best-path", "--acoustic-scale", "0.1", f"ark:gunzip -c {lat} |", f"ark,t:{tmp_path / 'best.txt'}",
        check=True)
    assert (tmp_path / "best.txt").read_text() == (tmp_path / "words.txt").read_text()


def test_latgen_without_a_final_state(yesno, tmp_path):
    """2 frames are too few for any path to a final state of yesno's graph (3 are enough):
    skipped by default, partial with --allow-partial."""
    x = yesno["likes"]["0_0_0_0_1_1_1_1"][:2]
    with tables.MatrixWriter(f"ark:{tmp_path / 'cut.ark'}") as w:
        w.write("cut", x)
    argv = [MONO / "final.mdl", MONO / "graph" / "HCLG.fst", f"ark:{tmp_path / 'cut.ark'}", f"ark:{tmp_path / 'lat'}"]
    r = run("nnet-latgen-faster-mapped", *argv)
    assert "no final-state reached and --allow-partial=false" in r.stderr
    assert "no utterance decoded (1 failed)" in error_line(r) and not (tmp_path / "lat").exists()
    r = run("nnet-latgen-faster-mapped", "--allow-partial", "true", *argv, check=True)
    assert "Outputting partial output for utterance cut" in r.stderr
    [(key, lat)] = list(lattice_io.read_lattices(f"ark:{tmp_path / 'lat'}"))
    assert key == "cut" and len(lattice_best_path.best_paths(lat, [(1, 0.1, 0)])[0].tids) == 2


# --- the file format ------------------------------------------------------------------------

def test_lattice_written_and_read_back_is_identical(tmp_path):
    """States, arcs, weights (float32) and tids survive Kaldi's text form, also: a start state
    other than 0, an epsilon arc, a weight of One, a final weight with tids, a state with two finals' worth."""
    lat = CompactLattice(2, [[(3, 5, 0.0, 0.0, ())], [], [(0, 7, 1.5, 1234.25, (3, 3, 4)), (1, 0, -0.125, 7.0, (9,))],
                             [(1, 8, 3.0, 17.5, (11, 12))]],
                         [None, (0.0, 0.0, ()), None, (0.5, 2.0, (6, 6))])
    lat.arcs[2][0] = (0, 7, float(np.float32(0.1)), float(np.float32(1234.567)), (3, 3, 4))
    with lattice_io.LatticeWriter(f"ark,t:{tmp_path / 'a.ark'}") as w:
        w.write("u1", lat)
        w.write("u2", lattice_of([([4], 1.0, 2.0)]))
    text = (tmp_path / "a.ark").read_text()
    assert text.startswith("u1 \n2\t0\t7\t0.1,1234.567,3_3_4\n2\t1\t0\t-0.125,7.0,9\n")   # the start state first
    assert "\n0\t3\t5\n" in text and "\n1\n" in text and "\n3\t0.5,2.0,6_6\n" in text and text.endswith("\n\n")
    back = dict(lattice_io.read_lattices(f"ark:{tmp_path / 'a.ark'}"))
    assert back["u1"] == lat and back["u2"] == lattice_of([([4], 1.0, 2.0)])
    assert list(back) == ["u1", "u2"]


def test_bad_lattice_files_are_one_line(tmp_path):
    cases = {
        "bad_label.ark": ("u1 \n0\t1\tx\t1,2,3\n1\n\n", "key 'u1': line 2: not a CompactLattice line"),
        "bad_weight.ark": ("u1 \n0\t1\t3\t1;2;3\n1\n\n", "key 'u1': line 2: not a CompactLattice line"),
        "lattice.ark": ("u1 \n0\t1\t3\t4\t1,2\n1\n\n", "key 'u1': line 2: a Lattice, not a CompactLattice"),
        "cycle.ark": ("u1 \n0\t1\t3\t1,2,3\n1\t0\t3\t1,2,3\n1\n\n", "key 'u1': the lattice has a cycle"),
        "no_key.ark": ("0\t1\t3\t1,2,3\n", "line 1: expected a key alone on its line"),
        "binary.ark": ("u1 \0B\x96\x0b\n", "a binary lattice (Kaldi's default 'ark:')"),
        "twice.ark": ("u1 \n0\n\nu1 \n0\n\n", "duplicate key 'u1'"),
        # cut at a line's end: Kaldi's empty line after every lattice is what tells
        "cut.ark": ("u1 \n0\t1\t3\t1,2,3\n1\n\nu2 \n0\t1\t3\t1,2,3\n",
                    "lattice 'u2' ends without its empty line: the archive is truncated"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content.encode())
        line = error_line(run("nnet-lattice-best-path", f"ark:{tmp_path / name}", f"ark,t:{tmp_path / 'out'}"))
        assert message in line and name in line, line
        assert not (tmp_path / "out").exists()
    (tmp_path / "out").write_text("kept\n")
    error_line(run("nnet-lattice-to-post", f"ark:{tmp_path / 'cut.ark'}", f"ark,t:{tmp_path / 'out'}"))
    assert (tmp_path / "out").read_text() == "kept\n"
    line = error_line(run("nnet-lattice-best-path", f"ark:{tmp_path / 'missing.ark'}", "ark,t:-"))
    assert "no such file" in line and "missing.ark" in line
    line = error_line(run("nnet-lattice-best-path", f"ark:gunzip -c {tmp_path / 'cycle.ark'} |", "ark,t:-"))
    assert "failed (exit status 1)" in line
    line = error_line(run("nnet-lattice-best-path", "--lmwt-range", "9:7", "ark:-", "ark,t:-"))
    assert "--lmwt-range must be A:B" in line
    line = error_line(run("nnet-lattice-best-path", "--lmwt-range", "7:9", "ark:-", "ark,t:words.txt"))
    assert "does not name LMWT" in line


# --- best paths: LM weight and word insertion penalty -----------------------------------------

def test_raising_the_lm_weight_lets_the_lm_win(tmp_path):
    """Word 1 is acoustically better (cost 50 against 100), word 2 better under the LM (2 against
    10): cost = graph + acoustic / LMWT, so word 1 up to LMWT 6, word 2 from 7 (the crossing: 6.25)."""
    lat = lattice_of([([1], 10.0, 50.0), ([2], 2.0, 100.0)])
    paths = lattice_best_path.best_paths(lat, [(1.0, 1.0 / lmwt, 0.0) for lmwt in range(4, 10)])
    assert [p.words for p in paths] == [[1]] * 3 + [[2]] * 3
    assert paths[0].graph == 10.0 and paths[0].acoustic == pytest.approx(50.0 / 4)
    with lattice_io.LatticeWriter(f"ark:| gzip -c > {tmp_path / 'lat.1.gz'}") as w:
        w.write("u", lat)
    r = run("nnet-lattice-best-path", "--lmwt-range", "4:9", f"ark:gunzip -c {tmp_path}/lat.*.gz |",
            f"ark,t:{tmp_path}/LMWT.txt", check=True)
    assert [(tmp_path / f"{k}.txt").read_text().split() for k in range(4, 10)] == [["u", "1"]] * 3 + [["u", "2"]] * 3
    assert "LMWT=9: Overall cost per frame is" in r.stderr and "Done 1 lattices, failed for 0" in r.stderr


def test_word_insertion_penalty_reduces_the_words(tmp_path):
    """Three words of total cost 3 against one word of cost 4: the three win without a penalty,
    the one with a penalty of 1 per word (3 + 3 > 4 + 1), as lattice-add-penalty adds it."""
    lat = lattice_of([([3, 4, 5], 1.0, 0.0), ([6], 4.0, 0.0)])
    paths = lattice_best_path.best_paths(lat, [(1, 1, 0.0), (1, 1, 0.4), (1, 1, 1.0)])
    assert [p.words for p in paths] == [[3, 4, 5], [3, 4, 5], [6]]
    with lattice_io.LatticeWriter(f"ark:{tmp_path / 'lat'}") as w:
        w.write("u", lat)
    run("nnet-lattice-best-path", "--lmwt-range", "10:11", "--word-ins-penalties", "0.0,1.0", f"ark:{tmp_path / 'lat'}",
        f"ark,t:{tmp_path}/penalty_WIP/LMWT.int", check=True)
    for lmwt in (10, 11):
        assert (tmp_path / "penalty_0.0" / f"{lmwt}.int").read_text().split() == ["u", "3", "4", "5"]
        assert (tmp_path / "penalty_1.0" / f"{lmwt}.int").read_text().split() == ["u", "6"]
    # one setting, Kaldi's options
    r = run("nnet-lattice-best-path", "--word-ins-penalty", "1.0", f"ark:{tmp_path / 'lat'}", "ark,t:-", check=True)
    assert r.stdout.split() == ["u", "6"] and "For utterance u, best cost 5 + 0 = 5 over 2 frames." in r.stderr


# --- scoring --------------------------------------------------------------------------------

def _decode_dir(tmp_path, lattices):
    """A recipe dir (steps/, utils/) with data/text, graph/words.txt and a decode dir with lat.1.gz
    (``lattices``) or words.1.txt."""
    for name in ("steps", "utils"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "text").write_text("u1 one two three\nu2 four\n")
    (tmp_path / "graph").mkdir()
    (tmp_path / "graph" / "words.txt").write_text("<eps> 0\none 1\ntwo 2\nthree 3\nfour 4\nfive 5\n")
    d = tmp_path / "decode"
    d.mkdir()
    if lattices:
        with lattice_io.LatticeWriter(f"ark:| gzip -c > {d / 'lat.1.gz'}") as w:
            # u1: 'one two three' against 'five' (the acoustics prefer five less and less as LMWT grows)
            w.write("u1", lattice_of([([1, 2, 3], 1.0, 10.0), ([5], 1.0, 70.0)]))
            w.write("u2", lattice_of([([4], 0.0, 1.0)]))
    else:
        (d / "words.1.txt").write_text("u1 1 2\nu2 4\n")
    (d / "wer_10").write_text("%WER 99.00 [ 99 / 100, 0 ins, 0 del, 99 sub ]\n")   # the old scoring's
    return d


def test_score_sh_sweeps_lm_weights_and_penalties(tmp_path):
    d = _decode_dir(tmp_path, lattices=True)
    r = subprocess.run(["steps/score.sh", "--min-lmwt", "9", "--max-lmwt", "11", "--word-ins-penalty", "0.0,20.0",
                        "data", "graph", "decode"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in d.glob("wer_*")) == [f"wer_{k}_{p}" for k in (10, 11, 9) for p in ("0.0", "20.0")]
    # penalty 0: 3 words of cost 3 + 10/LMWT against 1 of 1 + 70/LMWT: the three win from LMWT 9 on
    assert (d / "scoring_kaldi" / "penalty_0.0" / "10.txt").read_text() == "u1 one two three\nu2 four\n"
    # penalty 20: the single word
    assert (d / "scoring_kaldi" / "penalty_20.0" / "9.txt").read_text() == "u1 five\nu2 four\n"
    assert (d / "wer_9_0.0").read_text().splitlines()[0] == "%WER 0.00 [ 0 / 4, 0 ins, 0 del, 0 sub ]"
    assert (d / "wer_9_20.0").read_text().splitlines()[0] == "%WER 75.00 [ 3 / 4, 0 ins, 2 del, 1 sub ]"
    best = "%WER 0.00 [ 0 / 4, 0 ins, 0 del, 0 sub ] decode/wer_9_0.0\n"   # of equal WERs the first
    assert (d / "scoring_kaldi" / "best_wer").read_text() == best
    assert (d / "scoring_kaldi" / "wer_details" / "lmwt").read_text() == "9\n"
    assert (d / "scoring_kaldi" / "wer_details" / "wip").read_text() == "0.0\n"
    assert not (d / "wer_10").exists()   # as Kaldi's score_kaldi.sh: the old layout's files go


def test_score_sh_scores_a_best_path_decode_at_one_setting(tmp_path):
    d = _decode_dir(tmp_path, lattices=False)
    r = subprocess.run(["steps/score.sh", "data", "graph", "decode"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in d.glob("wer_*")) == ["wer_10_0.0"]
    assert (d / "wer_10_0.0").read_text().splitlines()[0] == "%WER 25.00 [ 1 / 4, 0 ins, 1 del, 0 sub ]"
    assert (d / "scoring_kaldi" / "best_wer").read_text().endswith(" decode/wer_10_0.0\n")


def test_import_order_the_lattice_module_brings_kaldi_hmm_gmm_first():
    """kaldifst or kaldi_decoder before kaldi_hmm_gmm hangs: the module imports it first itself."""
    r = subprocess.run([sys.executable, "-c", "import nnet_tools.speech.search.lattice, kaldi_hmm_gmm; print('ok')"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.stdout.strip() == "ok", r.stderr


def test_library_errors():
    with pytest.raises(NnetError, match="--lattice-beam must be finite and > 0"):
        lattice.LatticeDecoder(None, [-1, 0], lattice_beam=0.0)
    with pytest.raises(NnetError, match="repeat|twice"):
        lattice_best_path.check_penalties("0.5,0.5")
    assert lattice_best_path.check_penalties("0.0, 1") == [("0.0", 0.0), ("1", 1.0)]
    assert lattice_best_path.best_paths(CompactLattice(0, [[]], [None]), [(1, 1, 0)]) == [None]
