"""Lang dir sanity: lexicon disambiguation, topology, L with optional silence, the word loop G."""
import math
import os
import re

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


# --- dict dirs and word-position-dependent phones (utils/prepare_lang.sh's default) ---------------

DICT = {"lexicon.txt": "!SIL SIL\n<UNK> SPN\na AH\nabout AH B AW T\nat AE T\ncat K AE T\ntat T AE T\n",
        "silence_phones.txt": "SIL\nSPN\n",
        "nonsilence_phones.txt": "AH\nB\nAW\nT\nK\nAE\n",
        "optional_silence.txt": "SIL\n",
        "extra_questions.txt": "K T\n"}


def write_dict(path, **changes):
    path.mkdir(parents=True, exist_ok=True)
    for name, text in dict(DICT, **changes).items():
        (path / name).write_text(text)
    return path


@pytest.fixture(scope="module")
def pd_lang(tmp_path_factory):
    d = tmp_path_factory.mktemp("pd")
    r = run("nnet-prepare-lang", write_dict(d / "dict"), "<UNK>", d / "tmp", d / "lang")
    assert r.returncode == 0, r.stderr
    return d


def test_position_dependent_phones_as_prepare_lang_makes_them(pd_lang):
    """Worked out by hand from utils/prepare_lang.sh: phone_map.txt gives a silence phone itself
    and its four variants, a non-silence phone its four; phones.txt is <eps>, silence.txt,
    nonsilence.txt, disambig.txt in that order."""
    lang = pd_lang / "lang"

    def read(name):
        return (lang / name).read_text()
    variants = ["SIL", "SIL_B", "SIL_E", "SIL_I", "SIL_S", "SPN", "SPN_B", "SPN_E", "SPN_I", "SPN_S"]
    nonsil = [f"{p}{s}" for p in ["AH", "B", "AW", "T", "K", "AE"] for s in ["_B", "_E", "_I", "_S"]]
    # no homophones, no prefixes among the marked prons (a = AH_S, about = AH_B ...): #0 and #1 only
    assert read("phones.txt").split("\n")[:-1] == [f"{p} {i}" for i, p in enumerate(["<eps>", *variants, *nonsil,
                                                                                      "#0", "#1"])]
    assert read("phones/silence.txt").split() == read("phones/context_indep.txt").split() == variants
    assert read("phones/nonsilence.txt").split() == nonsil
    assert read("phones/optional_silence.txt") == "SIL\n" and read("phones/optional_silence.int") == "1\n"
    assert read("phones/disambig.txt") == "#0\n#1\n"
    assert read("phones/sets.txt").splitlines() == ["SIL SIL_B SIL_E SIL_I SIL_S", "SPN SPN_B SPN_E SPN_I SPN_S"] + \
        [f"{p}_B {p}_E {p}_I {p}_S" for p in ["AH", "B", "AW", "T", "K", "AE"]]
    assert read("phones/roots.txt").splitlines() == ["shared split " + s for s in read("phones/sets.txt").splitlines()]
    assert read("phones/roots.int").splitlines()[:3] == ["shared split 1 2 3 4 5", "shared split 6 7 8 9 10",
                                                         "shared split 11 12 13 14"]
    # the dict's own question mapped, then the position questions (non-silence; then silence)
    assert read("phones/extra_questions.txt").splitlines() == [
        "K_B K_E K_I K_S T_B T_E T_I T_S",
        "AH_B B_B AW_B T_B K_B AE_B", "AH_E B_E AW_E T_E K_E AE_E", "AH_I B_I AW_I T_I K_I AE_I",
        "AH_S B_S AW_S T_S K_S AE_S", "SIL SPN", "SIL_B SPN_B", "SIL_E SPN_E", "SIL_I SPN_I", "SIL_S SPN_S"]
    kinds = {"": "nonword", "_B": "begin", "_E": "end", "_I": "internal", "_S": "singleton"}
    assert read("phones/word_boundary.txt").splitlines() == \
        [f"{p} {kinds[p[-2:] if p[-2:] in kinds else '']}" for p in variants + nonsil]
    phones = dict(line.split() for line in read("phones.txt").splitlines())
    assert read("phones/word_boundary.int").splitlines()[:2] == [f"{phones['SIL']} nonword", f"{phones['SIL_B']} begin"]
    assert read("phones/align_lexicon.txt").splitlines() == [
        "!SIL !SIL SIL_S", "<UNK> <UNK> SPN_S", "<eps> <eps> SIL", "a a AH_S", "about about AH_B B_I AW_I T_E",
        "at at AE_B T_E", "cat cat K_B AE_I T_E", "tat tat T_B AE_I T_E"]
    words = dict(line.split() for line in read("words.txt").splitlines())
    assert list(words) == ["<eps>", "!SIL", "<UNK>", "a", "about", "at", "cat", "tat", "#0", "<s>", "</s>"]
    assert read("phones/align_lexicon.int").splitlines()[4] == \
        " ".join([words["about"]] * 2 + [phones[p] for p in "AH_B B_I AW_I T_E".split()])
    assert read("oov.txt") == "<UNK>\n" and read("oov.int") == f"{words['<UNK>']}\n"
    assert not (lang / "G.fst").exists()   # Kaldi's G comes from an LM (nnet-format-lm)
    topo, _ = langdir.read_topology(str(lang))
    classes = topo.get_phone_to_num_pdf_classes()
    assert [classes[int(phones[p])] for p in ("SIL", "SPN_S", "AH_B", "T_E")] == [5, 5, 3, 3]
    # prepare_lang.sh's <tmp-dir>
    tmp = pd_lang / "tmp"
    assert (tmp / "lexiconp.txt").read_text().splitlines()[3] == "about 1.0\tAH_B B_I AW_I T_E"
    assert (tmp / "phone_map.txt").read_text().splitlines()[:3] == ["SIL SIL SIL_B SIL_E SIL_I SIL_S",
                                                                    "SPN SPN SPN_B SPN_E SPN_I SPN_S",
                                                                    "AH AH_B AH_E AH_I AH_S"]
    assert (tmp / "lex_ndisambig").read_text() == "1\n"


def test_position_dependent_lexicon_fst(pd_lang):
    lang = pd_lang / "lang"
    lng = langdir.load(str(lang))
    ph = lng.phones
    words, _ = _best_path([ph[p] for p in "SIL K_B AE_I T_E SIL AH_S".split()], fstio.read_fst(str(lang / "L.fst")))
    assert words == [lng.words["cat"], lng.words["a"]]
    # a word-internal phone cannot end a word: no path
    assert _best_path([ph[p] for p in "K_B AE_I T_I".split()], fstio.read_fst(str(lang / "L.fst")))[0] == []


def _accepts_nothing_ok(fst, phone_ids):
    a = kaldifst.StdVectorFst()
    s = a.add_state()
    a.start = s
    for p in phone_ids:
        n = a.add_state()
        a.add_arc(s, kaldifst.StdArc(p, p, 0.0, n))
        s = n
    a.set_final(s, 0.0)
    return kaldifst.compose(a, fst).num_states > 0


def test_l_disambig_passes_g_backoff_symbol_through(pd_lang):
    """fstaddselfloops wdisambig_phones.int wdisambig_words.int: a #0:#0 loop at each state with
    a word out (and the final state), so an LM's back-off arcs compose with L_disambig."""
    lang = pd_lang / "lang"
    lng = langdir.load(str(lang))
    lfst = fstio.read_fst(str(lang / "L_disambig.fst"))
    zero_p, zero_w = lng.phones["#0"], lng.words["#0"]
    loops = [(s, a) for s in range(lfst.num_states) for a in kaldifst.ArcIterator(lfst, s)
             if a.ilabel == zero_p]
    assert loops and all(a.olabel == zero_w and a.nextstate == s for s, a in loops)
    ph = lng.phones
    assert _accepts_nothing_ok(lfst, [ph[p] for p in "K_B AE_I T_E #0 AH_S".split()])
    assert not _accepts_nothing_ok(fstio.read_fst(str(lang / "L.fst")), [ph[p] for p in "K_B AE_I T_E #0".split()])


def test_the_lexicon_file_form_stays_as_it_was_and_can_mark_positions(tmp_path):
    """spoken_digits' run.sh gives nnet-prepare-lang a lexicon file: still no position marks
    by default; --position-dependent-phones true marks them there too."""
    run("nnet-prepare-lang", LEXICON, tmp_path / "plain", check=True)
    assert not (tmp_path / "plain" / "phones" / "word_boundary.txt").exists()
    assert (tmp_path / "plain" / "G.fst").exists()
    run("nnet-prepare-lang", "--position-dependent-phones", "true", LEXICON, tmp_path / "pd", check=True)
    phones = (tmp_path / "pd" / "phones.txt").read_text().split()[::2]
    assert phones[:6] == ["<eps>", "SIL", "SIL_B", "SIL_E", "SIL_I", "SIL_S"] and "OW_S" in phones
    assert len((tmp_path / "pd" / "phones" / "nonsilence.txt").read_text().split()) == 19 * 4
    # run again without: a stale word_boundary must not stay
    run("nnet-prepare-lang", "--position-dependent-phones", "false", LEXICON, tmp_path / "pd", check=True)
    assert not (tmp_path / "pd" / "phones" / "word_boundary.txt").exists()
    r = run("nnet-prepare-lang", "--position-dependent-phones", "maybe", LEXICON, tmp_path / "x")
    assert r.returncode == 1 and "expected true or false" in r.stderr


def test_dict_dir_with_position_independent_phones(tmp_path):
    d = write_dict(tmp_path / "dict", **{"nonsilence_phones.txt": "AH\nB\nAW\nT K\nAE\n", "extra_questions.txt": "T\n"})
    run("nnet-prepare-lang", "--position-dependent-phones", "false", d, "<UNK>", tmp_path / "lang", check=True)
    read = lambda name: (tmp_path / "lang" / name).read_text()  # noqa: E731
    assert read("phones.txt").split()[::2] == ["<eps>", "SIL", "SPN", "AH", "B", "AW", "T", "K", "AE", "#0", "#1", "#2"]
    assert read("phones/disambig.txt") == "#0\n#1\n#2\n"   # 'a' (AH) is a prefix of 'about': #1, and L_disambig's #2
    assert read("phones/sets.txt").splitlines() == ["SIL", "SPN", "AH", "B", "AW", "T K", "AE"]   # T K share a root
    assert read("phones/extra_questions.txt") == "T\n"
    assert read("phones/align_lexicon.txt").splitlines()[3] == "a a AH"
    assert not (tmp_path / "lang" / "phones" / "word_boundary.txt").exists()


@pytest.mark.parametrize("changes, message", [
    ({"lexicon.txt": DICT["lexicon.txt"] + "dog D AO G\n"},
     r"dict/lexicon.txt: word 'dog': phone 'D' is not in \S*dict/nonsilence_phones.txt or \S*silence_phones.txt"),
    ({"nonsilence_phones.txt": "AH\nB\nAW\nT\nK\nAE\nSIL\n"}, "nonsilence_phones.txt:7: phone 'SIL' is already in "),
    ({"nonsilence_phones.txt": "AH\nB_B\n"}, "nonsilence_phones.txt:2: phone 'B_B' has a disallowed form"),
    ({"nonsilence_phones.txt": "AH\n\nB\n"}, "nonsilence_phones.txt:2: empty line"),
    ({"optional_silence.txt": "SIL SPN\n"}, "optional_silence.txt: expected one phone on one line"),
    ({"optional_silence.txt": "AH\n"}, "optional_silence.txt: phone 'AH' is not in "),
    ({"extra_questions.txt": "K X\n"}, "extra_questions.txt:1: phone 'X' is not in "),
    ({"nonsilence_phones.txt": "AH\nB\nAW\nT K\nAE\n", "extra_questions.txt": ""},
     "phones 'T' and 'K' share a tree root but no line of "),
    ({"lexicon.txt": "!SIL SIL\n<UNK> SPN\n<s> AH\n"}, "'<s>' is a reserved symbol"),
])
def test_a_bad_dict_dir_is_one_line(tmp_path, changes, message):
    d = write_dict(tmp_path / "dict", **changes)
    line = error_line(run("nnet-prepare-lang", d, "<UNK>", tmp_path / "lang"))
    assert re.search(message, line), line
    assert not (tmp_path / "lang").exists()


def test_dict_dir_arguments(tmp_path):
    d = write_dict(tmp_path / "dict")
    assert "give DICT_DIR OOV_WORD [TMP_DIR] LANG_DIR" in error_line(run("nnet-prepare-lang", d, tmp_path / "lang"))
    assert "the OOV word '<SPOKEN_NOISE>' is not in the lexicon" in \
        error_line(run("nnet-prepare-lang", d, "<SPOKEN_NOISE>", tmp_path / "lang"))
    (d / "lexicon.txt").unlink()
    assert "lexicon.txt: no such file" in error_line(run("nnet-prepare-lang", d, "<UNK>", tmp_path / "lang"))
    # lexiconp.txt, as prepare_lang.sh leaves it in the dict dir: read when its probabilities are all 1.0
    (d / "lexiconp.txt").write_text("".join(f"{w} 1.0\t{' '.join(p)}\n" for w, *p in
                                            (line.split() for line in DICT["lexicon.txt"].splitlines())))
    run("nnet-prepare-lang", d, "<UNK>", tmp_path / "lang", check=True)
    (d / "lexiconp.txt").write_text("!SIL 1.0 SIL\n<UNK> 0.5 SPN\n")
    assert "lexiconp.txt:2: word '<UNK>': pronunciation probability 0.5: only 1.0 is supported" in \
        error_line(run("nnet-prepare-lang", d, "<UNK>", tmp_path / "lang2"))
