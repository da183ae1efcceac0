"""steps/make_vosk_model.sh refuses what vosk cannot reproduce, and nnet-decode-vosk a dir it
cannot load, each in one line (the whole export and decode: tests/test_speech_recipe.py)."""
import importlib.util
import subprocess

import pytest

from helpers import REPO, error_line, run

MAKE = REPO / "steps" / "make_vosk_model.sh"


def exp_dirs(tmp_path):
    """The files make_vosk_model.sh checks for (their contents matter only once it exports)."""
    for f in ("lang/words.txt", "lang/phones/silence.csl", "graph/HCLG.fst", "ali/final.mdl", "nnet/final.mdl",
              "fbank.conf"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("x\n")
    return [tmp_path / "lang", tmp_path / "graph", tmp_path / "ali/final.mdl", tmp_path / "nnet",
            tmp_path / "vosk"]


def make(tmp_path, args):
    return subprocess.run([str(MAKE), "--feat-conf", str(tmp_path / "fbank.conf"), *map(str, args)],
                          capture_output=True, text=True, cwd=tmp_path)


@pytest.mark.parametrize("cmvn, refusal", [
    ("speaker", "was trained on per-speaker CMVN (--norm-means=true --norm-vars=false), which vosk cannot apply"),
    ("online", "was trained on online CMVN, which vosk does not reproduce"),
    ("global-vars", "was trained on global CMVN with variances"),
])
def test_make_vosk_model_refuses_cmvn_vosk_cannot_apply(tmp_path, cmvn, refusal):
    args = exp_dirs(tmp_path)
    nnet = tmp_path / "nnet"
    opts = "--norm-means=true --norm-vars=true" if cmvn == "global-vars" else "--norm-means=true --norm-vars=false"
    (nnet / "cmvn_opts").write_text(opts + "\n")
    if cmvn != "speaker":
        (nnet / "global_cmvn.stats").write_text("[ 1 2 ]\n")
    if cmvn == "online":
        (nnet / "online_cmvn").touch()
    r = make(tmp_path, args)
    assert r.returncode == 1 and refusal in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "vosk").exists() and not list(tmp_path.glob("vosk.tmp*"))


def test_make_vosk_model_names_a_missing_file(tmp_path):
    args = exp_dirs(tmp_path)
    (tmp_path / "graph/HCLG.fst").unlink()
    r = make(tmp_path, args)
    assert r.returncode == 1 and r.stderr.strip().endswith(f"expected file {tmp_path}/graph/HCLG.fst to exist")


# Looked up, not imported: libvosk loaded into a process that has loaded kaldilm hangs there,
# and an xdist worker may have run tests/test_speech_lm.py before this file.
@pytest.mark.skipif(importlib.util.find_spec("vosk") is None, reason="vosk is not installed")
def test_decode_vosk_refuses_a_dir_that_is_not_a_model(tmp_path):
    (tmp_path / "wav.scp").write_text("u1 /nonexistent.wav\n")
    line = error_line(run("nnet-decode-vosk", tmp_path, f"scp:{tmp_path}/wav.scp", "ark,t:/dev/null"))
    assert f"{tmp_path}: not a vosk model dir: no am/final.mdl" in line
    for f in ("am/final.mdl", "graph/HCLG.fst", "conf/model.conf"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("garbage\n")
    (tmp_path / "graph/words.txt").write_text("<eps> 0\n")
    line = error_line(run("nnet-decode-vosk", tmp_path, f"scp:{tmp_path}/wav.scp", "ark,t:/dev/null"))
    assert f"{tmp_path}: vosk could not load the model" in line
