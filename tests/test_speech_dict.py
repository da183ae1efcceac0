"""nnet-prepare-dict --sentences: in-context pronunciations (weak forms, linking r) from espeak-ng
saying whole training sentences, added to the lexicon besides the isolated words."""
import os
import shutil

import pytest

# In this order: kaldilm before kaldifst (or kaldifst before kaldi_hmm_gmm) hangs the process.
for _module in ("kaldi_hmm_gmm", "kaldifst"):
    pytest.importorskip(_module, reason="speech extra not installed (pip install -e '.[speech]')")

import kaldifst  # noqa: E402

from helpers import error_line, run  # noqa: E402
from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.lang import espeak_dict, fstio, langdir  # noqa: E402

SENTENCES = ["set the alarm to seven", "move my meeting to today", "add a meeting to my calendar",
             "give me a list", "set a timer for ten", "where is the enterprise",
             "show the track of the ship",   # espeak-ng says 'of the' as one word: skipped
             "how far is it"]


def needs_espeak():
    if not shutil.which("espeak-ng"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI must have espeak-ng: .ci/run installs it")
        pytest.skip("needs espeak-ng (apt-get install espeak-ng)")


def test_split_words_two_spaces_between_words():
    line = "s 'E t  D I2 ;  a# l 'A@ m  t @  s 'E v @ n"
    assert espeak_dict.split_words(line, "set the alarm to seven".split()) == \
        [["s", "E", "t"], ["D", "I2"], ["a#", "l", "A@", "m"], ["t", "@"], ["s", "E", "v", "@", "n"]]
    assert espeak_dict.split_words("S 'oU  0 v D @  S 'I p", "show of the ship".split()) is None
    assert espeak_dict.split_words("", ["a"]) is None
    assert espeak_dict.split_words("S 'oU  ;", ["show", "x"]) is None   # a word with no phones


def test_one_batch_splits_as_a_call_per_sentence():
    needs_espeak()
    sentences = [s.split() for s in SENTENCES] + [["what", "is", "<UNK>"], []]
    batch = espeak_dict.say_sentences(sentences)
    assert batch == [espeak_dict.say_sentences([s])[0] for s in sentences]
    assert batch[0][3] == ["t", "@"] and batch[3][2] == ["a#"] and batch[7][1] == ["f", "A@", "r"]
    assert batch[6] is None and batch[8] is None and batch[9] is None


def test_weak_forms_are_variants_and_a_sentence_that_does_not_split_is_skipped():
    needs_espeak()
    sentences = [s.split() for s in SENTENCES] + [["what", "is", "<UNK>"]]
    words = sorted({w for s in sentences for w in s} - {"<UNK>"})
    prons = espeak_dict.pronounce(words)
    assert prons["a"] == ["eI"] and prons["to"] == ["t", "u:"]
    context = espeak_dict.InContext(sentences, min_count=3)
    variants = context.count(prons)
    assert variants == {"a": [["a#"]], "to": [["t", "@"]]}   # 'far' f A@ r: seen once, under --min-count
    assert (context.used, context.skipped) == (7, 2)
    assert context.counts["to"][("t", "@")] == 3 and context.counts["the"] == {("D", "I2"): 2}   # before a vowel
    assert espeak_dict.InContext(sentences, min_count=1).count(prons)["far"] == [["f", "A@", "r"]]
    summary = context.summary()
    assert "7 of 9 sentences split into their words, 2 skipped" in summary[0]
    assert "'show the track of the ship'" in summary[0] and "2 words got 2 variants" in summary[0]
    assert "  a: a# (n=3), eI (isolated, n=0)" in summary and "  to: t @ (n=3), t u: (isolated, n=0)" in summary
    with pytest.raises(NnetError, match="--min-count must be at least 1"):
        espeak_dict.InContext(sentences, min_count=0)


def _accepts(lang_dir, phones, word):
    """Whether L.fst outputs ``word`` for the phone sequence ``phones``."""
    lfst = fstio.read_fst(str(lang_dir / "L.fst"))
    kaldifst.arcsort(lfst, sort_type="ilabel")
    ids, words = langdir.read_symbols(lang_dir / "phones.txt"), langdir.read_symbols(lang_dir / "words.txt")
    a = kaldifst.StdVectorFst()
    s = a.start = a.add_state()
    for p in phones:
        n = a.add_state()
        a.add_arc(s, kaldifst.StdArc(ids[p], ids[p], 0.0, n))
        s = n
    a.set_final(s, 0.0)
    best = kaldifst.shortest_path(kaldifst.compose(a, lfst))
    if best.num_states == 0:
        return False
    ok, _, out, _ = kaldifst.get_linear_symbol_sequence(best)
    return ok and [i for i in out if i] == [words[word]]


def test_prepare_dict_with_sentences_and_prepare_lang_takes_the_variants(tmp_path):
    needs_espeak()
    text = "".join(f"utt{k} {s}\n" for k, s in enumerate(SENTENCES)) + "utt-empty\n"
    (tmp_path / "text").write_text(text)
    words = sorted({w for s in SENTENCES for w in s.split()})
    (tmp_path / "words.txt").write_text("\n".join(words) + "\n")
    r = run("nnet-prepare-dict", "--sentences", tmp_path / "text", tmp_path / "words.txt", tmp_path / "dict",
            check=True)
    assert "7 of 8 sentences split into their words, 1 skipped" in r.stderr
    assert "a: a# (n=3), eI (isolated, n=0)" in r.stderr
    lexicon = (tmp_path / "dict" / "lexicon.txt").read_text().splitlines()
    assert {"a a#", "a eI", "to t @", "to t u:", "far f A@"} <= set(lexicon) and "far f A@ r" not in lexicon
    assert len(lexicon) == len(set(lexicon)) == 2 + len(words) + 2   # '!SIL', '<UNK>', the words, 2 variants
    run("nnet-prepare-lang", tmp_path / "dict", "<UNK>", tmp_path / "tmp", tmp_path / "lang", check=True)
    lang = tmp_path / "lang"
    assert "a a a#_S\na a eI_S\n" in (lang / "phones" / "align_lexicon.txt").read_text()
    for phones in (["a#_S"], ["eI_S"]):
        assert _accepts(lang, phones, "a")
    for phones in (["t_B", "@_E"], ["t_B", "u:_E"]):
        assert _accepts(lang, phones, "to")
    assert not _accepts(lang, ["t_B", "E_E"], "to")
    # Without --sentences: the isolated pronunciations only, as before.
    run("nnet-prepare-dict", tmp_path / "words.txt", tmp_path / "dict0", check=True)
    assert "a a#" not in (tmp_path / "dict0" / "lexicon.txt").read_text().splitlines()
    assert "--min-count must be at least 1" in error_line(
        run("nnet-prepare-dict", "--sentences", tmp_path / "text", "--min-count", "0", tmp_path / "words.txt",
            tmp_path / "dict1"))
