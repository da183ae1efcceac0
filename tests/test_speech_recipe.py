"""recipes/spoken_digits end to end at a small size: audio -> GMM -> DNN -> HCLG decode -> WER."""
import os
import re
import shutil

import pytest

from helpers import REPO, run

RECIPE = REPO / "recipes" / "spoken_digits"
WER = re.compile(r"^%WER (\d+\.\d\d) \[ (\d+) / (\d+), (\d+) ins, (\d+) del, (\d+) sub \]$")


def needs_speech_stack():
    missing = [] if shutil.which("espeak-ng") else ["espeak-ng (apt-get install espeak-ng)"]
    try:
        import kaldi_hmm_gmm  # noqa: F401
    except ImportError:
        missing.append("the speech extra (pip install -e '.[speech]')")
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must have {', '.join(missing)}: .ci/run installs them")
        pytest.skip(f"needs {', '.join(missing)}")


def copy_recipe(dest):
    dest.mkdir()
    for name in ("run.sh", "cmd.sh", "path.sh", "local", "conf"):
        (dest / name).symlink_to(RECIPE / name)
    (dest / "steps").symlink_to(REPO / "steps")
    (dest / "utils").symlink_to(REPO / "utils")
    return dest


def wer_of(path):
    line = path.read_text().splitlines()[0]
    m = WER.match(line)
    assert m, f"{path}: not Kaldi's compute-wer line: {line!r}"
    errors, words, ins, dels, subs = map(int, m.groups()[1:])
    assert errors == ins + dels + subs and words > 0
    assert float(m.group(1)) == pytest.approx(100.0 * errors / words, abs=0.006)
    return float(m.group(1))


@pytest.mark.slow
def test_spoken_digits_dnn_beats_gmm(tmp_path):
    needs_speech_stack()
    recipe = copy_recipe(tmp_path / "spoken_digits")
    # One Gaussian per pdf (--totgauss = the 62 pdfs: no mix-up): alignments good enough for the
    # DNN, a decode clearly worse than it, so the comparison is not decided by a word or two.
    r = run("./run.sh", "--num-utts", "300", "--num-speakers", "16", "--mono-iters", "6", "--totgauss", "62",
            "--dnn-1job", "false", cwd=recipe, check=True)
    exp = recipe / "exp"
    # every test utterance was decoded, by both systems
    num_test = len((recipe / "data" / "test" / "text").read_text().splitlines())
    # num_jobs, as Kaldi's train_mono.sh, align_si.sh and decode.sh write it (gmm_dir_info.pl reads it)
    for d in ("mono", "mono_ali", "mono/decode_test", "nnet/decode_test"):
        assert (exp / d / "num_jobs").read_text() == "2\n", d
    # every program ran through $train_cmd: its log has run.pl's header and footer (summarize_logs.pl)
    for log in ("mono_ali/log/ali_to_pdf.log", "mono_ali/log/sum_pdf_counts.log", "nnet/log/adjust_priors.log"):
        assert "# Accounting: time=" in (exp / log).read_text(), log
    for system in ("mono", "nnet"):
        assert "Done" in (exp / system / "decode_test" / "log" / "decode.1.log").read_text()
        hyps = (exp / system / "decode_test" / "scoring" / "10.txt").read_text().splitlines()
        assert len(hyps) == num_test
    gmm_wer = wer_of(exp / "mono" / "decode_test" / "wer_10")
    dnn_wer = wer_of(exp / "nnet" / "decode_test" / "wer_10")
    assert dnn_wer < gmm_wer, r.stdout[-2000:]
    # The DNN exported to vosk (global CMVN, Kaldi's nnet3 and online2 decoder on the same wavs and
    # graph): every test utterance decoded, and vosk's WER within half a point of ours.
    assert not (exp / "nnet" / "online_cmvn").exists() and (exp / "nnet" / "vosk_model" / "am" / "global_cmvn.stats").exists()
    vosk_log = (exp / "nnet" / "decode_test_vosk" / "log" / "decode.1.log").read_text()
    assert "Timing stats: real-time factor was" in vosk_log and ", 0 with errors." in vosk_log
    assert len((exp / "nnet" / "decode_test_vosk" / "scoring" / "10.txt").read_text().splitlines()) == num_test
    vosk_wer = wer_of(exp / "nnet" / "decode_test_vosk" / "wer_10")
    assert abs(vosk_wer - dnn_wer) <= 0.5, r.stdout[-2000:]
    assert "the same, decoded by vosk" in r.stdout
    assert "Best WERs (held-out speakers):" in r.stdout and "Stage wall times (s):" in r.stdout
    # train and test speakers are disjoint
    spk = {x: {line.split()[1] for line in (recipe / "data" / x / "utt2spk").read_text().splitlines()}
           for x in ("train", "test")}
    assert spk["train"] and spk["test"] and not spk["train"] & spk["test"]
