"""WER scoring: hand-counted edits, Kaldi's compute-wer line format, utils/best_wer.sh."""
import pytest

pytest.importorskip("kaldialign", reason="speech extra not installed (pip install -e '.[speech]')")

from helpers import REPO, run  # noqa: E402
from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.search import score  # noqa: E402


def wer(refs, hyps, mode="present"):
    return score.compute_wer(refs, hyps, mode)[0]


def test_hand_counted_edits_and_kaldi_line():
    refs = {"u1": "one two three".split(),        # hyp drops 'two': 1 del
            "u2": "oh five".split(),              # hyp 'oh nine five six': 2 ins
            "u3": "seven eight nine zero".split()}  # hyp 'seven six nine': 1 sub, 1 del
    hyps = {"u1": "one three".split(), "u2": "oh nine five six".split(), "u3": "seven six nine".split()}
    c = wer(refs, hyps)
    assert (c.ins, c.dels, c.subs, c.ref_words) == (2, 2, 1, 9)
    assert c.wer_line() == "%WER 55.56 [ 5 / 9, 2 ins, 2 del, 1 sub ]"
    assert c.ser_line() == "%SER 100.00 [ 3 / 3 ]"


def test_perfect_and_empty_hypothesis():
    refs = {"a": ["one", "two"], "b": ["three"]}
    assert wer(refs, dict(refs)).wer_line() == "%WER 0.00 [ 0 / 3, 0 ins, 0 del, 0 sub ]"
    assert wer(refs, {"a": [], "b": []}).wer_line() == "%WER 100.00 [ 3 / 3, 0 ins, 3 del, 0 sub ]"


def test_modes_for_missing_utterances():
    """As Kaldi's compute-wer.cc: a hypothesis without a reference is ignored in every mode."""
    refs = {"a": ["one"], "b": ["two", "three"]}
    counts, missing = score.compute_wer(refs, {"a": ["one"], "c": ["x"]}, "present")
    assert (counts.sents, counts.ref_words, counts.errors, missing) == (1, 1, 0, 1)
    counts, missing = score.compute_wer(refs, {"a": ["one"]}, "all")  # 'b' scored as empty
    assert (counts.sents, counts.dels, missing) == (2, 2, 1)
    assert counts.wer_line(partial=missing > 0) == "%WER 66.67 [ 2 / 3, 0 ins, 2 del, 0 sub ] [PARTIAL]"
    with pytest.raises(NnetError, match="no hypothesis for utterance 'b' \\(--mode=strict"):
        score.compute_wer(refs, {"a": ["one"]})
    assert score.compute_wer(refs, {"a": ["one"], "b": ["two", "three"], "c": ["x"]})[0].errors == 0


def test_nothing_scored_is_an_error_not_a_perfect_wer():
    with pytest.raises(NnetError, match="no utterance scored: none of the 1 references has a hypothesis"):
        wer({"u1": ["one"]}, {"u9": ["one"]})
    with pytest.raises(NnetError, match="no reference words in the 1 utterances scored"):
        wer({"u1": []}, {"u1": ["one", "two"]})


def test_best_wer_sh_picks_lowest():
    """As Kaldi's: of grep's 'file:%WER ...' lines the lowest (the first of equal ones), printed
    '%WER ... file', the file last where score.sh reads the best LMWT and penalty from it."""
    lines = ["exp/mono/decode_test/wer_10_0.0:%WER 12.50 [ 10 / 80, 1 ins, 2 del, 7 sub ]",
             "exp/mono/decode_test/wer_9_0.5:%WER 9.00 [ 9 / 100, 0 ins, 0 del, 9 sub ]",
             "exp/mono/decode_test/wer_8_1.0:%WER 9.00 [ 9 / 100, 0 ins, 0 del, 9 sub ]",
             "not a wer line"]
    r = run("bash", "-c", f"printf '%s\\n' {' '.join(repr(x) for x in lines)} | {REPO}/utils/best_wer.sh")
    assert r.stdout == "%WER 9.00 [ 9 / 100, 0 ins, 0 del, 9 sub ] exp/mono/decode_test/wer_9_0.5\n"
    r = run("bash", "-c", f"echo '%WER 3.00 [ 3 / 100, 0 ins, 0 del, 3 sub ]' | {REPO}/utils/best_wer.sh")
    assert r.stdout == "%WER 3.00 [ 3 / 100, 0 ins, 0 del, 3 sub ]\n"
    assert run("bash", "-c", f"echo none | {REPO}/utils/best_wer.sh").stdout == ""


def test_compute_wer_program(tmp_path):
    (tmp_path / "ref").write_text("u1 one two three\nu2 four\n")
    (tmp_path / "hyp").write_text("u1 one two\nu2 five five\n")
    r = run("nnet-compute-wer", "--text", tmp_path / "ref", tmp_path / "hyp", check=True)
    assert r.stdout.splitlines()[0] == "%WER 75.00 [ 3 / 4, 1 ins, 1 del, 1 sub ]"
    (tmp_path / "part").write_text("u1 one two\n")
    r = run("nnet-compute-wer", "--mode=all", tmp_path / "ref", tmp_path / "part", check=True)
    assert r.stdout.splitlines() == ["%WER 50.00 [ 2 / 4, 0 ins, 2 del, 0 sub ] [PARTIAL]", "%SER 100.00 [ 2 / 2 ]",
                                     "Scored 2 sentences, 1 not present in hyp."]
    assert "both stdin" in run("nnet-compute-wer", "-", "ark:-").stderr
    (tmp_path / "bad").write_text("u1 one\nu1 two\n")
    r = run("nnet-compute-wer", tmp_path / "ref", tmp_path / "bad")
    assert r.returncode == 1 and "appears twice" in r.stderr and "Traceback" not in r.stderr
