"""Lang dir sanity: lexicon disambiguation, topology, L with optional silence, the word loop G."""
import math
import os

import pytest

pytest.importorskip("kaldi_hmm_gmm", reason="speech extra not installed (pip install -e '.[speech]')")

import kaldi_hmm_gmm as khg  # noqa: E402  (first: see nnet_tools/speech/__init__.py)
import kaldifst  # noqa: E402

from helpers import REPO, error_line, run  # noqa: E402
from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.lang import fstio, langdir, lexicon  # noqa: E402

LEXICON = REPO / "recipes" / "spoken_digits" / "local" / "dict" / "lexicon.txt"


def test_add_lex_disambig_homophones_and_prefixes():
    lex = [("red", ["R", "EH", "D"]), ("read", ["R", "EH", "D"]), ("a", ["AH"]), ("about", ["AH", "B", "AW", "T"]),
           ("cat", ["K", "AE", "T"])]
    out, top = lexicon.add_lex_disambig(lex)
    assert out == [("red", ["R", "EH", "D", "#1"]), ("read", ["R", "EH", "D", "#2"]), ("a", ["AH", "#1"]),
                   ("about", ["AH", "B", "AW", "T"]), ("cat", ["K", "AE", "T"])]
    assert top == 2


@pytest.fixture(scope="module")
def lang_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("lang")
    langdir.prepare(str(LEXICON), str(d))
    return d


def test_symbol_tables_and_topology(lang_dir):
    lng = langdir.load(str(lang_dir))
    assert lng.phones["<eps>"] == 0 and lng.phones["SIL"] == 1 and lng.silence == [1]
    assert len(lng.nonsilence) == 19          # the digits' phones
    # no homophones or prefixes among the digits: #0, and #1 for L_disambig's optional silence
    assert lng.disambig == [lng.phones["#0"], lng.phones["#1"]] == [21, 22]
    assert [w for w, i in sorted(lng.words.items(), key=lambda kv: kv[1])][:2] == ["<eps>", "!SIL"]
    topo, _ = langdir.read_topology(str(lang_dir))
    classes = topo.get_phone_to_num_pdf_classes()
    assert classes[1] == 5 and all(classes[p] == 3 for p in lng.nonsilence)
    tree = khg.monophone_context_dependency(phones=topo.phones, phone2num_pdf_classes=classes)
    assert tree.num_pdfs == 19 * 3 + 5


def _best_path(phone_ids, lexicon_fst):
    """Words and cost of the best path of a phone string through L."""
    a = kaldifst.StdVectorFst()
    s = a.add_state()
    a.start = s
    for p in phone_ids:
        n = a.add_state()
        a.add_arc(s, kaldifst.StdArc(p, p, 0.0, n))
        s = n
    a.set_final(s, 0.0)
    best = kaldifst.shortest_path(kaldifst.compose(a, lexicon_fst))
    ok, _, words, weight = kaldifst.get_linear_symbol_sequence(best)
    assert ok
    return words, float(weight.value)


def test_lexicon_fst_optional_silence(lang_dir):
    lng = langdir.load(str(lang_dir))
    lfst = fstio.read_fst(str(lang_dir / "L.fst"))
    ph = lng.phones
    # SIL | one (W AH N) | two (T UW) SIL: silence at the start and after 'two', none after 'one'
    words, cost = _best_path([ph[p] for p in "SIL W AH N T UW SIL".split()], lfst)
    assert words == [lng.words["one"], lng.words["two"]]
    assert cost == pytest.approx(3 * math.log(2), abs=1e-4)   # sil-prob 0.5: three binary choices
    words, _ = _best_path([ph[p] for p in "OW".split()], lfst)
    assert words == [lng.words["oh"]]


def test_the_phone_sets_validate_lang_reads(lang_dir):
    """The files Kaldi's utils/validate_lang.pl opens, as prepare_lang.sh writes them."""
    def read(name):
        return (lang_dir / name).read_text()
    nonsil = read("phones/nonsilence.txt").split()
    assert read("phones/silence.txt") == read("phones/optional_silence.txt") == read("phones/context_indep.txt") \
        == "SIL\n"
    for name in ("silence", "nonsilence", "optional_silence", "disambig", "context_indep"):
        assert read(f"phones/{name}.csl") == ":".join(read(f"phones/{name}.int").split()) + "\n"
    assert read("phones/disambig.txt") == "#0\n#1\n" and read("phones/disambig.csl") == "21:22\n"
    assert read("phones/sets.txt").split() == ["SIL", *nonsil] and len(nonsil) == 19
    assert read("phones/roots.txt").splitlines() == [f"shared split {p}" for p in ["SIL", *nonsil]]
    assert read("phones/roots.int").splitlines() == [f"shared split {i}" for i in range(1, 21)]
    assert read("phones/extra_questions.txt") == read("phones/extra_questions.int") == ""
    assert (read("phones/wdisambig.txt"), read("phones/wdisambig_phones.int")) == ("#0\n", "21\n")
    words = dict(line.split() for line in read("words.txt").splitlines())
    assert read("phones/wdisambig_words.int") == f"{words['#0']}\n"
    assert (read("oov.txt"), read("oov.int")) == ("!SIL\n", f"{words['!SIL']}\n")   # the silence word


def test_l_disambig_marks_the_optional_silence(lang_dir):
    """make_lexicon_fst.py --sil-disambig: the last disambiguation symbol follows each optional
    silence in L_disambig, not in L."""
    lng = langdir.load(str(lang_dir))
    ph = lng.phones
    phones = [ph[p] for p in "SIL #1 W AH N".split()]
    assert _best_path(phones, fstio.read_fst(str(lang_dir / "L_disambig.fst")))[0] == [lng.words["one"]]
    assert _best_path(phones, fstio.read_fst(str(lang_dir / "L.fst")))[0] == []   # no path


def test_oov_word(tmp_path):
    r = run("nnet-prepare-lang", "--oov", "<UNK>", LEXICON, tmp_path / "lang")
    assert "lexicon.txt: --oov word '<UNK>' is not in the lexicon" in error_line(r)
    (tmp_path / "lex.txt").write_text("<UNK> SPN\n" + LEXICON.read_text().replace("!SIL SIL\n", "!SIL SIL SIL\n"))
    assert "no word is pronounced 'SIL' alone: give --oov" in error_line(run("nnet-prepare-lang", tmp_path / "lex.txt",
                                                                             tmp_path / "lang"))
    run("nnet-prepare-lang", "--oov", "<UNK>", tmp_path / "lex.txt", tmp_path / "lang", check=True)
    assert (tmp_path / "lang" / "oov.txt").read_text() == "<UNK>\n"


def test_word_loop_grammar(lang_dir):
    lng = langdir.load(str(lang_dir))
    g = fstio.read_fst(str(lang_dir / "G.fst"))
    assert g.num_states == 1
    arcs = list(kaldifst.ArcIterator(g, g.start))
    assert sorted(a.olabel for a in arcs) == sorted(lng.words[w] for w in
                                                     "zero oh one two three four five six seven eight nine".split())
    assert all(float(a.weight.value) == pytest.approx(math.log(11), abs=1e-5) for a in arcs)


def test_prepare_lang_program_rejects_bad_lexicon(tmp_path):
    (tmp_path / "lex.txt").write_text("one W AH N\ntwo\n")
    line = error_line(run("nnet-prepare-lang", tmp_path / "lex.txt", tmp_path / "lang"))
    assert "lex.txt:2: word 'two' has no pronunciation" in line
    (tmp_path / "nosil.txt").write_text("one W AH N\n")
    assert "no silence phone 'SIL'" in error_line(run("nnet-prepare-lang", tmp_path / "nosil.txt", tmp_path / "l2"))


def test_corrupt_fst_and_topology_are_one_line(lang_dir, tmp_path):
    import shutil
    bad = tmp_path / "lang"
    shutil.copytree(lang_dir, bad)
    (bad / "L_disambig.fst").write_text("not an fst")
    r = run("nnet-mkgraph", bad, bad / "no.mdl", tmp_path / "graph")
    assert r.returncode == 1 and "no.mdl: GMM model file does not exist" in r.stderr
    (bad / "topo").write_text("<Topology> garbage\n")
    line = error_line(run("nnet-gmm-init-mono", bad, "ark:/dev/null", tmp_path / "0.mdl"))
    assert "topo: bad HMM topology" in line
    with pytest.raises(NnetError, match="cannot read FST"):
        fstio.read_fst(str(bad / "L_disambig.fst"))


def test_an_fst_on_a_full_disk_is_one_line_and_no_file(lang_dir, full_disk):
    """OpenFst's write returns false (no exception); its short temp file was renamed into place,
    and mkgraph.sh printed "Wrote HCLG.fst" over an empty file."""
    with pytest.raises(NnetError, match=f"^No space left on device: {full_disk}/G.fst$"):
        fstio.write_fst(fstio.read_fst(str(lang_dir / "G.fst")), str(full_disk / "G.fst"))
    assert os.listdir(full_disk) == ["filler"]
