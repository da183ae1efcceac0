"""The spoken-commands data side: the grammar and its split, the espeak-ng lexicon, the word LM
(kaldingram), G.fst (kaldilm's arpa2fst) and their bad inputs."""
import contextlib
import io
import math
import os
import random
import shutil
import subprocess
import sys

import pytest

# In this order: kaldilm before kaldifst (or kaldifst before kaldi_hmm_gmm) hangs the process.
for _module in ("kaldi_hmm_gmm", "kaldifst", "kaldilm", "kaldingram"):
    pytest.importorskip(_module, reason="speech extra not installed (pip install -e '.[speech]')")

import kaldifst  # noqa: E402

from helpers import REPO, error_line, run  # noqa: E402
from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.corpus import commands, synth  # noqa: E402
from nnet_tools.speech.lang import espeak_dict, fstio, langdir, lm  # noqa: E402


def needs_espeak():
    if not shutil.which("espeak-ng"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI must have espeak-ng: .ci/run installs it")
        pytest.skip("needs espeak-ng (apt-get install espeak-ng)")


# --- the grammar and the corpus plan -------------------------------------------------------------

def test_the_grammar_has_an_rm_sized_vocabulary():
    vocab = commands.vocabulary()
    assert 500 <= len(vocab) <= 1000 and vocab == sorted(set(vocab))
    assert all(w.isalpha() and w.islower() and w.isascii() for w in vocab)
    rng = random.Random(1)
    said = {w for _ in range(3000) for w in commands.sentence(rng)}
    assert said <= set(vocab) and len(said) > 0.9 * len(vocab)


def test_the_plan_splits_by_speaker_and_by_sentence():
    plan = commands.make_plan(600, 30, 0.2, seed=3)
    assert (len(plan["train"]), len(plan["test"])) == (480, 120)
    speakers = {part: {u["speaker"] for u in plan[part]} for part in plan}
    assert len(speakers["test"]) == 6 and len(speakers["train"]) == 24 and not speakers["test"] & speakers["train"]
    sentences = {part: [tuple(u["words"]) for u in plan[part]] for part in plan}
    assert not set(sentences["test"]) & set(sentences["train"])
    assert len(set(sentences["test"])) == len(sentences["test"])      # every test sentence once
    # utterance-ids start with their speaker-id (utt2spk sorts both ways), gaps one per word but the last
    for u in plan["train"] + plan["test"]:
        assert u["id"].startswith(synth.speaker_id(u["speaker"]) + "-") and len(u["gaps_ms"]) == len(u["words"]) - 1
    summary = commands.split_summary(plan)
    assert summary["test_only_words"] > 0 and summary["test_oov_tokens"] < 0.2 * summary["test_tokens"]
    assert commands.make_plan(600, 30, 0.2, seed=3) == plan                   # deterministic from the seed
    assert commands.make_plan(600, 30, 0.2, seed=4)["train"][0]["words"] != plan["train"][0]["words"] or \
        commands.make_plan(600, 30, 0.2, seed=4)["train"][1]["words"] != plan["train"][1]["words"]


def test_the_plan_writes_a_data_dir_synth_reads(tmp_path):
    plan = commands.make_plan(40, 4, 0.25, seed=0)
    synth.write_data_dir(plan["train"], str(tmp_path / "train"), str(tmp_path / "wav"))
    back = synth.read_plan(str(tmp_path / "train" / "synth.plan"))
    assert [u["words"] for u in back] == [u["words"] for u in sorted(plan["train"], key=lambda u: u["id"])]
    from nnet_tools.speech.corpus import datadir
    assert datadir.validate(str(tmp_path / "train"), no_feats=True)[:2] == (30, 3)


def test_prepare_data_script(tmp_path):
    r = run(sys.executable, REPO / "recipes" / "spoken_commands" / "local" / "prepare_data.py", "--num-utts", "50",
            "--num-speakers", "5", tmp_path / "data", tmp_path / "wav", check=True)
    assert f"Vocabulary: {len(commands.vocabulary())} words" in r.stderr
    assert (tmp_path / "data" / "local" / "vocab.txt").read_text().split() == commands.vocabulary()
    assert len((tmp_path / "data" / "test" / "text").read_text().splitlines()) == 10


def test_bad_plan_options():
    with pytest.raises(NnetError, match="need at least 2 speakers"):
        commands.make_plan(10, 1, 0.2, 0)
    with pytest.raises(NnetError, match="--test-fraction must be in"):
        commands.make_plan(10, 2, 1.0, 0)


# --- the espeak-ng lexicon -------------------------------------------------------------------------

def test_espeak_phones_stress_stripped():
    assert espeak_dict.phones_of("S 'I p s", "ships") == ["S", "I", "p", "s"]
    assert espeak_dict.phones_of(",a d r I ; 'a t I k", "adriatic") == ["a", "d", "r", "I", "a", "t", "I", "k"]
    assert espeak_dict.phones_of("'a N k 3 r- I2 dZ", "anchorage") == ["a", "N", "k", "@r", "r", "I2", "dZ"]
    assert espeak_dict.phones_of("l '0 N", "long") == ["l", "Q", "N"]
    with pytest.raises(NnetError, match="word 'x': espeak-ng gave .* with 'a/b', which is not a phone"):
        espeak_dict.phones_of("a/b", "x")


def test_espeak_dict_is_one_batch_and_the_same_as_a_call_per_word(tmp_path):
    needs_espeak()
    words = ["show", "the", "ships", "enterprise", "gulf", "mexico", "seven", "thirty", "alarm"]
    batch = espeak_dict.pronounce(words)
    for w in ("enterprise", "thirty"):
        assert batch[w] == espeak_dict.pronounce([w])[w]
    assert batch["ships"] == ["S", "I", "p", "s"] and batch["thirty"] == ["T", "3:", "t", "i"]
    (tmp_path / "words.txt").write_text("\n".join(words) + "\nships\n")   # a word twice: once
    r = run("nnet-prepare-dict", tmp_path / "words.txt", tmp_path / "dict", check=True)
    assert "11 words" in r.stderr
    lexicon = (tmp_path / "dict" / "lexicon.txt").read_text().splitlines()
    assert lexicon[:2] == ["!SIL SIL", "<UNK> SPN"] and "ships S I p s" in lexicon and len(lexicon) == 11
    assert (tmp_path / "dict" / "silence_phones.txt").read_text() == "SIL\nSPN\n"
    assert (tmp_path / "dict" / "optional_silence.txt").read_text() == "SIL\n"
    assert (tmp_path / "dict" / "extra_questions.txt").read_text() == ""
    nonsil = (tmp_path / "dict" / "nonsilence_phones.txt").read_text().split()
    assert nonsil == sorted({p for line in lexicon[2:] for p in line.split()[1:]})
    run("nnet-prepare-lang", tmp_path / "dict", "<UNK>", tmp_path / "lang", check=True)
    assert "S_B" in (tmp_path / "lang" / "phones.txt").read_text()
    (tmp_path / "bad.txt").write_text("hello\nU.S.A.\n")
    assert "word 'U.S.A.': espeak-ng cannot be given it as one word" in \
        error_line(run("nnet-prepare-dict", tmp_path / "bad.txt", tmp_path / "dict2"))


# --- the LM and G.fst -----------------------------------------------------------------------------

TRAIN = ["show the ships in the coral sea", "show the carriers in the red sea", "where is the enterprise",
         "where is the kennedy", "show the ships near norfolk", "where are the carriers"]


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    """A lang dir for the words of TRAIN and a few more (not in any training sentence), and the
    trigram LM of TRAIN formatted into lang_test."""
    d = tmp_path_factory.mktemp("lm")
    words = sorted({w for s in TRAIN for w in s.split()} | {"frigates", "gulf"})
    (d / "lexicon.txt").write_text("!SIL SIL\n<UNK> SPN\n" + "".join(f"{w} {' '.join(w.upper())}\n" for w in words))
    run("nnet-prepare-lang", "--no-word-loop-grammar", "--oov", "<UNK>", d / "lexicon.txt", d / "lang", check=True)
    (d / "text").write_text("".join(f"u{k} {s}\n" for k, s in enumerate(TRAIN)))
    r = run("nnet-train-lm", "--order", "3", "--lang", d / "lang", d / "text", d / "lm.arpa", check=True)
    assert "'<UNK>' has unigram probability" in r.stderr
    r = run("nnet-format-lm", d / "lang", d / "lm.arpa", d / "lang_test", check=True)
    assert "G.fst:" in r.stderr and "states" in r.stderr
    return d


def test_arpa_counts(lm_dir):
    counts, ngrams = lm.check_arpa(str(lm_dir / "lm.arpa"))
    vocab = {w for s in TRAIN for w in s.split()}
    assert counts[1] == len(vocab) + 3                        # + <s> </s> <UNK>
    bigrams = {tuple(s.split()[k:k + 2]) for s in (f"<s> {t} </s>" for t in TRAIN) for k in range(len(s.split()) - 1)}
    assert counts[2] == len(bigrams)
    trigrams = {tuple(s.split()[k:k + 3]) for s in (f"<s> {t} </s>" for t in TRAIN) for k in range(len(s.split()) - 2)}
    assert counts[3] == len(trigrams)
    assert "frigates" not in ngrams and "<UNK>" in ngrams
    # the unigram distribution sums to one (<s> has log-prob -99: no probability)
    text = (lm_dir / "lm.arpa").read_text()
    section = text.split("\\1-grams:")[1].split("\\2-grams:")[0]
    total = sum(10 ** float(line.split()[0]) for line in section.strip().splitlines())
    assert total == pytest.approx(1.0, abs=1e-5)
    # unk: N1/N of the training tokens (words seen once / tokens)
    tokens = [w for s in TRAIN for w in s.split()]
    n1 = sum(1 for w in set(tokens) if tokens.count(w) == 1)
    unk = next(float(line.split()[0]) for line in section.splitlines() if "\t<UNK>" in line)
    assert 10 ** unk == pytest.approx(n1 / len(tokens), rel=0.3)


def _word_acceptor(ids):
    a = kaldifst.StdVectorFst()
    s = a.add_state()
    a.start = s
    for i in ids:
        n = a.add_state()
        a.add_arc(s, kaldifst.StdArc(i, i, 0.0, n))
        s = n
    a.set_final(s, 0.0)
    return a


def _g_cost(g, words_txt, sentence):
    """Cost of the best path of G whose words (output side; the back-off arcs output nothing) are
    ``sentence``, or None. It may take a back-off arc where the n-gram is there too."""
    words = langdir.read_symbols(words_txt)
    kaldifst.arcsort(g, sort_type="olabel")
    best = kaldifst.shortest_path(kaldifst.compose(g, _word_acceptor([words[w] for w in sentence.split()])))
    if best.num_states == 0:
        return None
    ok, _, out, weight = kaldifst.get_linear_symbol_sequence(best)
    assert ok and [i for i in out if i] == [words[w] for w in sentence.split()]
    return float(weight.value)


def _lm_cost(g, words_txt, sentence):
    """Cost of ``sentence`` in G read as the LM it encodes: the #0 arc only where the word has no
    arc (a failure transition), as the ARPA's back-off is."""
    words = langdir.read_symbols(words_txt)
    state, cost = g.start, 0.0

    def arcs(s):
        return {a.ilabel: a for a in kaldifst.ArcIterator(g, s)}
    for w in sentence.split() + ["</s>"]:
        while True:
            out = arcs(state)
            if w == "</s>" and math.isfinite(float(g.final(state).value)):
                return cost + float(g.final(state).value)
            if words[w] in out:
                cost, state = cost + float(out[words[w]].weight.value), out[words[w]].nextstate
                break
            if words["#0"] not in out:
                return None
            cost, state = cost + float(out[words["#0"]].weight.value), out[words["#0"]].nextstate


def test_g_accepts_training_sentences_and_new_word_orders(lm_dir):
    g = fstio.read_fst(str(lm_dir / "lang_test" / "G.fst"))
    words_txt = str(lm_dir / "lang_test" / "words.txt")
    words = langdir.read_symbols(words_txt)
    labels = {(a.ilabel, a.olabel) for s in range(g.num_states) for a in kaldifst.ArcIterator(g, s)}
    assert not {words["<s>"], words["</s>"]} & {i for pair in labels for i in pair}   # epsilons, as arpa2fst has them
    assert (words["#0"], 0) in labels                                                  # back-off arcs
    from kaldingram.prune import ArpaParser
    with contextlib.redirect_stderr(io.StringIO()):
        arpa = ArpaParser().loadf(str(lm_dir / "lm.arpa"))[0]
    new_order = "where are the ships in the red sea"            # every word seen, this order never
    assert new_order not in TRAIN
    for sentence in (TRAIN[0], TRAIN[2], new_order):
        exact = -math.log(10) * arpa.log_s(sentence)
        assert _lm_cost(g, words_txt, sentence) == pytest.approx(exact, rel=1e-4)
        assert _g_cost(g, words_txt, sentence) <= exact + 1e-3     # a back-off path may be cheaper
    assert _lm_cost(g, words_txt, new_order) > _lm_cost(g, words_txt, TRAIN[0])
    assert _g_cost(g, words_txt, "show the <UNK> in the coral sea") is not None      # the unknown word
    assert _g_cost(g, words_txt, "show the frigates") is None    # a lexicon word the LM never saw: not in G
    # the lang dir came along (utils/format_lm.sh's copy)
    for name in lm.LANG_FILES + ("phones/align_lexicon.int",):
        assert (lm_dir / "lang_test" / name).read_bytes() == (lm_dir / "lang" / name).read_bytes()


def test_perplexity(lm_dir, tmp_path):
    (tmp_path / "test").write_text("t1 where is the carriers\nt2 show the frigates in the gulf\n")
    r = run("nnet-compute-ppl", lm_dir / "lm.arpa", tmp_path / "test", check=True)
    first, second = r.stdout.splitlines()
    assert first == f"file {tmp_path / 'test'}: 2 sentences, 10 words, 2 OOVs"
    ppl = float(second.split("ppl= ")[1].split()[0])
    assert second.startswith("0 zeroprobs") and 1 < ppl < 1000
    # without an unknown word, the OOV sentence is a zeroprob and left out
    assert lm.perplexity(str(lm_dir / "lm.arpa"), [s.split() for s in ("where is the carriers", "show the frigates")],
                         unk=None)["num_zeroprobs"] == 1


def test_an_oov_word_in_the_training_text_is_mapped_with_a_count(lm_dir, tmp_path):
    """As steps/train_mono.sh's sym2int.pl --map-oov (transcripts.map_oovs): mapped to oov.txt's
    word, with one warning line counting them."""
    (tmp_path / "text").write_text("u1 show the ships\nu2 show the submarines\nu3 where are the submarines\n")
    r = run("nnet-train-lm", "--lang", lm_dir / "lang", tmp_path / "text", tmp_path / "lm.arpa", check=True)
    warning = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warning) == 1 and "2 words not in" in warning[0] and "(submarines 2)" in warning[0] and \
        "mapped to '<UNK>'" in warning[0]
    counts, ngrams = lm.check_arpa(str(tmp_path / "lm.arpa"))
    assert "submarines" not in ngrams and ngrams["<UNK>"] > 1    # <UNK> seen in training: counted as any word
    (tmp_path / "case").write_text("u1 SHOW the ships\n")
    assert "word 'SHOW' is not in" in error_line(run("nnet-train-lm", "--lang", lm_dir / "lang", tmp_path / "case",
                                                     tmp_path / "lm2.arpa"))


GOOD = "\\data\\\nngram 1=4\nngram 2=2\n\n\\1-grams:\n-99\t<s>\t-0.3\n-0.5\ta\t-0.2\n-0.5\tb\n-0.6\t</s>\n\n" \
       "\\2-grams:\n-0.1\t<s> a\n-0.2\ta b\n\n\\end\\\n"


@pytest.mark.parametrize("text, message", [
    ("hello\n", r"bad.arpa: not an ARPA LM: no \\data\\ line"),
    (GOOD.replace("ngram 2=2", "ngram two=2"), r"bad.arpa:3: \[ngram two=2\]: expected 'ngram N=COUNT'"),
    (GOOD.replace("-0.5\tb\n", "-0.5\tb c d e\n"), r"bad.arpa:8: \[-0.5\tb c d e\]: expected 'logprob w1 .. w1"),
    (GOOD.replace("-0.5\ta\t", "x\ta\t"), r"bad.arpa:7: \[x\ta\t-0.2\]: invalid n-gram logprob 'x'"),
    (GOOD.replace("-0.5\ta\t-0.2", "-0.5\ta\tnan"), r"bad.arpa:7: .*invalid backoff weight 'nan'"),
    (GOOD.replace("ngram 1=4", "ngram 1=5"), r"bad.arpa:10: the header says 5 1-grams, the section has 4"),
    (GOOD.replace("ngram 1=4", "ngram 1=3"),
     r"bad.arpa:9: \[-0.6\t</s>\]: the header says 3 1-grams, this is one more"),
    (GOOD.replace("\\2-grams:", "\\3-grams:"), r"bad.arpa:11: \[\\3-grams:\]: expected '\\2-grams:'"),
    (GOOD.replace("\\end\\\n", ""), r"bad.arpa:14: end of file: expected '\\end\\'"),
    (GOOD.replace("-0.2\ta b", "-0.2\ta #0"), r"bad.arpa:13: \[-0.2\ta #0\]: '#0' is a reserved symbol"),
    (GOOD.replace("<s>", "<bos>"), r"bad.arpa: no 1-gram '<s>'"),
    (GOOD[:40], r"bad.arpa:6: \[-9\]: expected 'logprob w1 .. w1 \[backoff\]' \(2 or 3 fields\), got 1"),
])
def test_an_arpa_that_does_not_parse_is_one_line(lm_dir, tmp_path, text, message):
    """kaldilm's arpa2fst aborts the whole process on these (SIGABRT, after C++ lines on stderr):
    the file is checked first."""
    (tmp_path / "bad.arpa").write_text(text)
    r = run("nnet-format-lm", lm_dir / "lang", tmp_path / "bad.arpa", tmp_path / "out")
    import re
    assert re.search(message, error_line(r)), r.stderr
    assert not (tmp_path / "out" / "G.fst").exists() and not (tmp_path / "out" / "words.txt").exists()
    assert "[I]" not in r.stderr and "csrc" not in r.stderr        # no C++ lines


def test_arpa_words_not_in_words_txt_are_skipped_with_one_warning(lm_dir, tmp_path):
    (tmp_path / "lm.arpa").write_text(GOOD.replace("\ta\t", "\tship\t").replace("<s> a", "<s> ship")
                                      .replace("a b", "ship zebra").replace("\tb\n", "\tzebra\n"))
    r = run("nnet-format-lm", lm_dir / "lang", tmp_path / "lm.arpa", tmp_path / "out", check=True)
    warning = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warning) == 1 and "2 words not in" in warning[0] and "(ship, zebra)" in warning[0]
    assert "[W]" not in r.stderr and (tmp_path / "out" / "G.fst").exists()


def test_train_lm_bad_input(tmp_path):
    (tmp_path / "text").write_text("u1 a b\nu1 c\n")
    assert "utterance 'u1' appears twice" in error_line(run("nnet-train-lm", tmp_path / "text", tmp_path / "x.arpa"))
    (tmp_path / "text").write_text("u1 a </s> b\n")
    assert "reserved symbol '</s>'" in error_line(run("nnet-train-lm", tmp_path / "text", tmp_path / "x.arpa"))
    (tmp_path / "text").write_text("u1 a b\n")
    assert "--order must be in 1..5" in error_line(run("nnet-train-lm", "--order", "7", tmp_path / "text",
                                                       tmp_path / "x.arpa"))
    assert not (tmp_path / "x.arpa").exists()


def test_lm_imports_in_the_order_that_does_not_hang(lm_dir, tmp_path):
    """kaldilm before kaldifst hangs in the extension's initialisation, as kaldifst before
    kaldi_hmm_gmm does: lm.py imports kaldi_hmm_gmm, kaldifst, kaldilm in that order."""
    code = (f"from nnet_tools.speech.lang import lm\n"
            f"lm.arpa_to_fst({str(lm_dir / 'lm.arpa')!r}, {str(lm_dir / 'lang' / 'words.txt')!r}, "
            f"{str(tmp_path / 'G.fst')!r})\n"
            f"import kaldifst, kaldi_hmm_gmm\nprint('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.stdout == "ok\n", r.stderr
