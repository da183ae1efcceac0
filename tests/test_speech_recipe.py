"""recipes/spoken_digits end to end at a small size: audio -> GMM -> DNN -> HCLG lattices -> WER."""
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
    # Two epochs: at one, on 240 training utterances, the DNN was 13.49 % against the GMM's 14.88.
    r = run("./run.sh", "--num-utts", "300", "--num-speakers", "16", "--mono-iters", "6", "--totgauss", "62",
            "--dnn-1job", "false", "--num-epochs", "2", cwd=recipe, check=True)
    exp = recipe / "exp"
    # every test utterance was decoded, by both systems
    num_test = len((recipe / "data" / "test" / "text").read_text().splitlines())
    # num_jobs, as Kaldi's train_mono.sh, align_si.sh and decode.sh write it (gmm_dir_info.pl reads it)
    for d in ("mono", "mono_ali", "mono/decode_test", "nnet/decode_test"):
        assert (exp / d / "num_jobs").read_text() == "2\n", d
    # steps/make_dnn_egs.sh's --min-archives 16, from its estimate of the egs nnet-get-egs will cut
    assert (exp / "egs" / "info" / "num_archives").read_text() == "16\n"
    # every program ran through $train_cmd: its log has run.pl's header and footer (summarize_logs.pl)
    for log in ("mono_ali/log/ali_to_pdf.log", "mono_ali/log/sum_pdf_counts.log", "nnet/log/adjust_priors.log"):
        assert "# Accounting: time=" in (exp / log).read_text(), log
    # lattices, scored as Kaldi's score_kaldi.sh: LMWT 7..17 x penalties 0.0, 0.5, 1.0
    sweep = sorted(f"wer_{lmwt}_{p}" for lmwt in range(7, 18) for p in ("0.0", "0.5", "1.0"))
    for system in ("mono", "nnet"):
        decode_dir = exp / system / "decode_test"
        assert "Done" in (decode_dir / "log" / "decode.1.log").read_text()
        assert sorted(p.name for p in decode_dir.glob("lat.*.gz")) == ["lat.1.gz", "lat.2.gz"]
        assert sorted(p.name for p in decode_dir.glob("wer_*")) == sweep
        hyps = (decode_dir / "scoring_kaldi" / "penalty_0.0" / "10.txt").read_text().splitlines()
        assert len(hyps) == num_test
        best = (decode_dir / "scoring_kaldi" / "best_wer").read_text().split()
        assert best[-1].startswith(f"exp/{system}/decode_test/wer_")
        assert float(best[1]) == min(wer_of(decode_dir / name) for name in sweep)
    gmm_wer = wer_of(exp / "mono" / "decode_test" / "wer_10_0.0")
    dnn_wer = wer_of(exp / "nnet" / "decode_test" / "wer_10_0.0")
    assert dnn_wer < gmm_wer, r.stdout[-2000:]
    # The DNN exported to vosk (global CMVN, Kaldi's nnet3 and online2 decoder on the same wavs and
    # graph): every test utterance decoded, and vosk's WER within half a point of ours.
    assert not (exp / "nnet" / "online_cmvn").exists() and (exp / "nnet" / "vosk_model" / "am" / "global_cmvn.stats").exists()
    vosk_log = (exp / "nnet" / "decode_test_vosk" / "log" / "decode.1.log").read_text()
    assert "Timing stats: real-time factor was" in vosk_log and ", 0 with errors." in vosk_log
    # vosk gives its best path: scored at the one setting of its objective, LMWT 10 and no penalty,
    # as our lattices' wer_10_0.0 it is set beside
    vosk_dir = exp / "nnet" / "decode_test_vosk"
    assert len((vosk_dir / "scoring_kaldi" / "penalty_0.0" / "10.txt").read_text().splitlines()) == num_test
    assert sorted(p.name for p in vosk_dir.glob("wer_*")) == ["wer_10_0.0"]
    vosk_wer = wer_of(vosk_dir / "wer_10_0.0")
    assert abs(vosk_wer - dnn_wer) <= 0.5, r.stdout[-2000:]
    assert "the same, decoded by vosk" in r.stdout
    assert "Best WERs (held-out speakers):" in r.stdout
    assert "Stage wall times (s) and peak memory of their tasks (MB):" in r.stdout
    # steps/stages.sh: each stage's wall time and its tasks' peak memory (the GMM's and the DNN's
    # programs are python and torch processes of tens to hundreds of MB)
    times = {line.split()[0]: line.split()[1:] for line in (exp / "stage_times").read_text().splitlines()}
    assert set(times) == {"data", "features", "lang", "mono", "align", "gmm_decode", "egs", "dnn_ramp",
                          "dnn_decode", "vosk"}
    assert int(times["mono"][1]) > 30 and int(times["dnn_ramp"][1]) > 100, times
    # run again: every stage's outputs are complete, so only the summary runs
    again = run("./run.sh", "--num-utts", "300", "--num-speakers", "16", "--dnn-1job", "false", cwd=recipe, check=True)
    for n in (0, 1, 2, 3, 4, 5, 6, 8, 9, 10):
        assert re.search(rf"^\./run\.sh: stage {n}: outputs complete \(.*\); skipping it", again.stdout, re.M), n
    assert again.stdout.split("Best WERs (held-out speakers):")[1] == r.stdout.split("Best WERs (held-out speakers):")[1]
    # the summary table: the WER at LMWT 10 and the sweep's best, with its LMWT and penalty
    row = rf"^GMM \(monophone\) +{gmm_wer:.2f} +\d+\.\d\d \(LMWT \d+, penalty \d\.\d\)$"
    assert re.search(row, r.stdout, re.M), r.stdout[-2000:]
    # train and test speakers are disjoint
    spk = {x: {line.split()[1] for line in (recipe / "data" / x / "utt2spk").read_text().splitlines()}
           for x in ("train", "test")}
    assert spk["train"] and spk["test"] and not spk["train"] & spk["test"]
