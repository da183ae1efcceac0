"""A Kaldi data dir of one's own in recipes/spoken_digits (issue 33, item 6): made by espeak-ng
outside our local/ scripts, with a segments file, 8 kHz audio, uppercase and OOV words. Each
fault is one clear line and exit status 1, or a recovery the user is told about."""
import os
import re
import shutil
import wave

import numpy as np
import pytest

pytest.importorskip("kaldi_hmm_gmm", reason="speech extra not installed (pip install -e '.[speech]')")

from helpers import REPO, SMALL_CONFIG, error_line, espeak_samples, mono_model, run, write_own_data_dir  # noqa: E402
from nnet_tools.data import tables  # noqa: E402
from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.corpus import datadir, transcripts  # noqa: E402
from nnet_tools.speech.features import extract  # noqa: E402

RECIPE = REPO / "recipes" / "spoken_digits"
UTILS = REPO / "utils"


def needs_espeak():
    if not shutil.which("espeak-ng"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI must have espeak-ng: .ci/run installs it")
        pytest.skip("needs espeak-ng (apt-get install espeak-ng)")


def recipe_copy(dest):
    """recipes/spoken_digits linked into dest, but with a conf/ of its own (model.yaml edited)."""
    dest.mkdir()
    for name in ("run.sh", "cmd.sh", "path.sh", "local"):
        (dest / name).symlink_to(RECIPE / name)
    shutil.copytree(RECIPE / "conf", dest / "conf")
    (dest / "steps").symlink_to(REPO / "steps")
    (dest / "utils").symlink_to(REPO / "utils")
    return dest


def digits(n, seed, low=2, high=4):
    rng = np.random.default_rng(seed)
    words = ["zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    return [" ".join(rng.choice(words, rng.integers(low, high + 1))) for _ in range(n)]


# --- the recipe from stage 1 on a data dir of one's own ------------------------------------------

@pytest.mark.slow
def test_stage_1_in_a_fresh_dir_on_own_data_with_segments_and_oovs_then_uppercase_stops_it(tmp_path):
    """./run.sh --stage 1 in a fresh dir (exp/stage_times was never made: sed failed, exit 2),
    train audio as one recording per speaker cut by a segments file (the split wav.scp was
    missing), an OOV word in train and test text (counted, mapped, said), and a model config whose
    output dim was edited (the sed on 'dim: 62}' then did nothing). Then an uppercase text: one
    line naming the word and the fix, exit status 1, before any training."""
    needs_espeak()
    recipe = recipe_copy(tmp_path / "r")
    yaml = (recipe / "conf" / "model.yaml").read_text()
    (recipe / "conf" / "model.yaml").write_text(yaml.replace("dim: 62}", "dim: 10}"))
    train = {spk: (voice, digits(6, k)) for k, (spk, voice) in
             enumerate((("spka", "en-us"), ("spkb", "en-gb+f2"), ("spkc", "en-us+m3")))}
    train["spka"][1][0] = "one eleven two"
    write_own_data_dir(recipe / "data" / "train", train, segments=True)
    write_own_data_dir(recipe / "data" / "test", {"spkd": ("en-gb+m2", ["eleven nine", "four two", "oh six"])})
    assert run(UTILS / "validate_data_dir.sh", "--no-feats", recipe / "data" / "train").returncode == 0
    r = run("./run.sh", "--stage", "1", "--stop-stage", "6", "--nj", "1", "--mono-iters", "4", "--totgauss", "62",
            cwd=recipe)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    exp = recipe / "exp"
    assert [line.split()[0] for line in (exp / "stage_times").read_text().splitlines()] == \
        ["features", "lang", "mono", "align", "gmm_decode", "egs"]
    # every segment has its features, in both feature dirs
    for x in ("train", "train_fbank"):
        assert len((recipe / "data" / x / "feats.scp").read_text().splitlines()) == 18
    assert (recipe / "data" / "train_fbank" / "segments").is_file()
    assert ("data/train/text: 1 word not in data/lang/words.txt (eleven 1): mapped to '!SIL' (its oov.txt)"
            in out)
    assert ("data/test/text: 1 word not in exp/mono/graph/words.txt (eleven 1): the decoder cannot output "
            "them: each counts as an error in scoring") in out
    done, errors = map(int, re.search(r"steps/align_si.sh: aligned (\d+) utterances, errors on (\d+)", out).groups())
    assert done + errors == 18 and done >= 12, out
    assert "spka-000" in dict(tables.read_int_vectors(f"ark:{exp}/mono_ali/ali.1.ark"))   # 'one eleven two'
    # the DNN's output layer: the alignment model's pdf count, not the config's 10
    assert "Output layer dim 62: the pdf count of exp/mono_ali/final.mdl" in (exp / "log" / "model_init.log").read_text()
    assert "dim: 62" in (exp / "model.yaml").read_text().split("name: output")[1]
    assert (exp / "egs" / "info" / "output_dim").read_text().strip() == "62"

    text = recipe / "data" / "train" / "text"
    text.write_text("".join(line.split()[0] + " " + " ".join(line.split()[1:]).upper() + "\n"
                            for line in text.read_text().splitlines()))
    before = sorted(os.listdir(exp / "mono"))
    r = run("./run.sh", "--stage", "3", "--stop-stage", "3", "--nj", "1", cwd=recipe)
    assert r.returncode == 1
    errors = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].startswith(
        "ERROR (validate_data_dir.sh) data/train/text: utt 'spka-000': word 'ONE' is not in data/lang/words.txt, "
        "but 'one' is"), r.stderr
    assert "$i = tolower($i)" in errors[0]
    assert sorted(os.listdir(exp / "mono")) == before


# --- 8 kHz audio ---------------------------------------------------------------------------------

@pytest.mark.parametrize("nj", [1, 2])
def test_a_wav_at_another_sample_rate_is_one_stage_error_whatever_nj(tmp_path, nj):
    """It was skipped with --nj 1 (a job with other wavs succeeded) but failed the stage with
    --nj 2 (a job with only it did): now it stops the step either way, with one line naming the
    file, the utterance, both rates and the fixes; no feats.scp is written."""
    needs_espeak()
    data = write_own_data_dir(tmp_path / "data" / "train", {"spka": ("en-us", ["one two", "three"]),
                                                           "spkb": ("en-gb", ["four five"])})
    with wave.open(str(data / "wav" / "spkb-000.wav"), "wb") as w:   # one speaker's audio at 8 kHz
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes(espeak_samples("four five", "en-gb", rate=8000).tobytes())
    for name in ("steps", "utils"):
        (tmp_path / name).symlink_to(REPO / name)
    r = run("steps/make_feats.sh", "--conf", RECIPE / "conf" / "mfcc.conf", "--nj", nj, "data/train", "exp/mf", "mfcc",
            cwd=tmp_path)
    assert r.returncode == 1
    lines = [line for line in r.stderr.splitlines() if "ERROR" in line]
    assert len(lines) == 1, r.stderr
    assert lines[0].endswith(f"data/train/split{nj}/{2 if nj == 2 else 1}/wav.scp: utt 'spkb-000': sample rate 8000 "
                             f"Hz does not match --sample-frequency=16000 (the features' conf file): resample the "
                             f"audio to 16000 Hz (in wav.scp: 'utt sox FILE -r 16000 -t wav - |') or set "
                             f"--sample-frequency=8000"), lines[0]
    assert not (data / "feats.scp").exists()


# --- segments ------------------------------------------------------------------------------------

def write_wav(path, samples, rate=16000, channels=1):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(np.asarray(samples, "<i2").tobytes())
    return path


def test_segments_are_cut_as_kaldis_extract_segments_cuts_them(tmp_path):
    """[start, end) seconds of the recording, samples int(t * rate); end -1 runs to the end; an
    end up to 0.5 s past the recording is cut to it, further is skipped; so are a segment under
    0.1 s, an unknown recording and a start past the end, each with a warning, and counted."""
    rng = np.random.default_rng(0)
    rec = rng.integers(-3000, 3000, 16000).astype(np.int16)   # 1 s
    write_wav(tmp_path / "rec.wav", rec)
    (tmp_path / "wav.scp").write_text(f"rec {tmp_path}/rec.wav\n")
    (tmp_path / "segments").write_text("a rec 0.10 0.45\nb rec 0.5 -1\nc rec 0.7 1.3\nd rec 0.6 1.6\n"
                                       "e rec 0.2 0.25\nf other 0 0.5\ng rec 1.2 1.5\n")
    r = run("nnet-compute-feats", "--set=--dither=0", "--segments", tmp_path / "segments", tmp_path / "wav.scp",
            f"ark:{tmp_path}/feats.ark", check=True)
    feats = dict(tables.read_matrices(f"ark:{tmp_path}/feats.ark"))
    assert list(feats) == ["a", "b", "c"] and "Done 3 out of 7 utterances." in r.stderr
    opts, wave_opts = extract.make_options("mfcc", overrides=["--dither=0"])
    for utt, (begin, end) in (("a", (1600, 7200)), ("b", (8000, 16000)), ("c", (11200, 16000))):
        write_wav(tmp_path / f"{utt}.wav", rec[begin:end])
        cut = extract.utterance_features(opts, wave_opts, str(tmp_path / f"{utt}.wav"), utt)
        np.testing.assert_array_equal(feats[utt], cut)
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert [w.split("segment ")[1].split(":")[0] for w in warnings] == \
        ["'d' of recording 'rec'", "'e' of recording 'rec'", "'f' of recording 'other'", "'g' of recording 'rec'"]
    assert "ends at sample 25600, more than 0.5 s past the recording's 16000; skipping it" in warnings[0]
    assert "shorter than 0.1 s" in warnings[1] and "no such recording" in warnings[2]
    assert "starts at sample 19200, past the recording's 16000" in warnings[3]
    # a stereo recording needs the channel, as extract-segments says
    write_wav(tmp_path / "st.wav", np.stack([rec, rec[::-1]], 1).reshape(-1), channels=2)
    (tmp_path / "st.scp").write_text(f"st {tmp_path}/st.wav\n")
    with tables.MatrixWriter(f"ark:{tmp_path}/st.ark") as w:
        assert extract.compute_table(opts, wave_opts, str(tmp_path / "st.scp"), w, extract.logger,
                                     [("x", "st", 0.0, -1, 1)]) == (1, 0)
        with pytest.raises(NnetError, match="segment 'y' of recording 'st': the recording has 2 channels: give the "
                                            "channel in the segments file"):
            extract.compute_table(opts, wave_opts, str(tmp_path / "st.scp"), w, extract.logger,
                                  [("y", "st", 0, -1, -1)])


@pytest.mark.parametrize("line, message", [
    ("a rec 0.5\n", r"segments:1: segment 'a': expected 'utt reco start end \[channel\]'"),
    ("a rec x 1\n", "segment 'a': start, end .* must be numbers"),
    ("a rec 0.5 0.5\n", "segment 'a': start 0.5, end 0.5: need 0 <= start < end"),
    ("a rec -1 2\n", "start -1, end 2: need 0 <= start < end"),
    ("a rec 0 1 -3\n", "segment 'a': channel -3: need 0 or more")])
def test_a_bad_segments_line_is_one_error(tmp_path, line, message):
    """extract-segments skips such a line with a warning; a data dir with one is a broken data
    dir, so here it is an error, before any feature is written."""
    (tmp_path / "segments").write_text(line)
    with pytest.raises(NnetError, match=message):
        datadir.read_segments(str(tmp_path / "segments"))


# --- the data dir validator and the spk2utt helpers ---------------------------------------------

def small_dir(d, segments=False):
    d.mkdir()
    files = {"utt2spk": "s1-a s1\ns1-b s1\ns2-a s2\n", "spk2utt": "s1 s1-a s1-b\ns2 s2-a\n",
             "text": "s1-a one\ns1-b two three\ns2-a four\n"}
    if segments:
        files.update({"segments": "s1-a r1 0 1\ns1-b r1 1 2\ns2-a r2 0 1.5\n", "wav.scp": "r1 r1.wav\nr2 r2.wav\n"})
    else:
        files["wav.scp"] = "s1-a a.wav\ns1-b b.wav\ns2-a c.wav\n"
    for name, text in files.items():
        (d / name).write_text(text)
    return d


@pytest.mark.parametrize("name, text, message", [
    ("utt2spk", "s1-b s1\ns1-a s1\ns2-a s2\n", r"utt2spk:2: key 's1-a' comes after 's1-b': not sorted; sort it "
                                               r"with: LC_ALL=C sort -k1,1 -o .*/utt2spk .*/utt2spk"),
    ("utt2spk", "s1-a s1\ns1-a s1\ns2-a s2\n", "utt2spk:2: key 's1-a' appears twice; remove one"),
    ("utt2spk", "s1-a s2\ns1-b s1\ns2-a s2\n", "utterance 's1-b' of speaker 's1' comes after 's1-a' of 's2': utt2spk "
                                               "is not sorted on speakers too; make each speaker-id a prefix"),
    ("spk2utt", "s1 s1-a\ns2 s2-a\n", r"spk2utt: does not match utt2spk; remake it with: "
                                      r"utils/utt2spk_to_spk2utt.pl .*/utt2spk > .*/spk2utt"),
    ("text", "s1-a one\ns2-a four\n", r"text: keys differ from utt2spk: 's1-b' of utt2spk is missing \(1 in all\)"),
    ("wav.scp", "s1-a a.wav\ns1-b b.wav\ns3-a c.wav\n", "wav.scp: keys differ from utt2spk: 's3-a' .* is not in "
                                                        "utt2spk; 's2-a' of utt2spk is missing"),
    ("utt2spk", "s1-a s1 x\n", "utt2spk:1: expected 2 fields in a utt2spk line, got 's1-a s1 x'")])
def test_validate_data_dir_names_the_file_the_key_and_the_fix(tmp_path, name, text, message):
    d = small_dir(tmp_path / "d")
    assert datadir.validate(str(d), no_feats=True) == (3, 2, [])
    (d / name).write_text(text)
    with pytest.raises(NnetError, match=message):
        datadir.validate(str(d), no_feats=True)


def test_validate_data_dir_with_segments_and_features(tmp_path):
    d = small_dir(tmp_path / "d", segments=True)
    assert datadir.validate(str(d), no_feats=True)[:2] == (3, 2)
    (d / "wav.scp").write_text("r1 r1.wav\n")
    with pytest.raises(NnetError, match="wav.scp: keys differ from the recordings of segments: 'r2' of the "
                                        "recordings of segments is missing"):
        datadir.validate(str(d), no_feats=True)
    (d / "wav.scp").write_text("r1 r1.wav\nr2 r2.wav\n")
    # features missing for an utterance whose wav could not be read: a warning, as make_feats.sh counts it
    (d / "feats.scp").write_text("s1-a f.ark:1\ns2-a f.ark:9\n")
    assert datadir.validate(str(d))[2] == [f"{d}/feats.scp: 2 of the 3 keys of utt2spk ('s1-b' is missing): "
                                           f"the others are left out"]
    (d / "feats.scp").write_text("s1-a f.ark:1\ns3-a f.ark:9\n")
    with pytest.raises(NnetError, match="feats.scp: keys differ from utt2spk: 's3-a'"):
        datadir.validate(str(d))
    os.remove(d / "spk2utt")
    r = run(UTILS / "validate_data_dir.sh", "--no-feats", d)
    assert error_line(r) == (f"ERROR (validate_data_dir.sh) {d}/spk2utt: no such file (make it with: "
                             f"utils/utt2spk_to_spk2utt.pl {d}/utt2spk > {d}/spk2utt)")


def test_utt2spk_to_spk2utt_and_back_as_kaldis(tmp_path):
    """Usable as Kaldi's: a file argument or stdin; speakers in the order of their first utterance."""
    (tmp_path / "utt2spk").write_text("a-1 a\na-2 a\nb-1 b\nc-9 a\n")
    r = run(UTILS / "utt2spk_to_spk2utt.pl", tmp_path / "utt2spk", check=True)
    assert r.stdout == "a a-1 a-2 c-9\nb b-1\n"
    (tmp_path / "spk2utt").write_text(r.stdout)
    back = run(UTILS / "spk2utt_to_utt2spk.pl", tmp_path / "spk2utt", check=True).stdout
    assert sorted(back.splitlines()) == sorted((tmp_path / "utt2spk").read_text().splitlines())
    (tmp_path / "bad").write_text("a-1 a\na-2\n")
    r = run(UTILS / "utt2spk_to_spk2utt.pl", tmp_path / "bad")
    assert r.returncode == 1 and r.stderr == f"{UTILS}/utt2spk_to_spk2utt.pl: {tmp_path}/bad:2: expected 'utt spk', " \
                                             f"got 'a-2'\n"
    d = small_dir(tmp_path / "d")
    made = run("bash", "-c", f"{UTILS}/utt2spk_to_spk2utt.pl < {d}/utt2spk", check=True).stdout
    assert made == (d / "spk2utt").read_text()


# --- OOV and uppercase words ---------------------------------------------------------------------

def test_oov_words_are_mapped_and_counted_and_a_text_in_the_wrong_case_is_refused(tmp_path):
    """Kaldi maps OOV words to oov.txt's (sym2int.pl --map-oov) and counts them; it does not
    change case, so a text that is the lexicon's only in another case is refused, naming the word
    and the fix, rather than trained on as all OOV."""
    lang = tmp_path / "lang"
    mono_model(lang)
    refs = {"u1": ["one", "eleven", "two"], "u2": ["twelve", "eleven"], "u3": ["oh"]}
    mapped, line = transcripts.map_oovs(refs, str(lang), "data/train/text")
    assert mapped == {"u1": ["one", "!SIL", "two"], "u2": ["!SIL", "!SIL"], "u3": ["oh"]}
    assert line == (f"data/train/text: 3 words not in {lang}/words.txt (eleven 2, twelve 1): mapped to '!SIL' "
                    f"(its oov.txt), as Kaldi's sym2int.pl --map-oov maps them")
    assert transcripts.map_oovs({"u": ["one"]}, str(lang), "t") == ({"u": ["one"]}, None)
    graph = tmp_path / "graph"   # a graph dir has words.txt and no oov.txt: a test set's OOVs are errors
    graph.mkdir()
    shutil.copy(lang / "words.txt", graph)
    assert transcripts.check_words({"u": ["eleven", "one"]}, str(graph), "data/test/text") == [
        f"data/test/text: 1 word not in {graph}/words.txt (eleven 1): the decoder cannot output them: each "
        f"counts as an error in scoring"]
    with pytest.raises(NnetError, match=r"^data/train/text: utt 'u2': word 'TWO' is not in .*/words.txt, but 'two' "
                                        r"is \(2 words of the text are there only in another case\): Kaldi matches"):
        transcripts.map_oovs({"u1": ["one"], "u2": ["TWO", "One"]}, str(lang), "data/train/text")
    # nnet-gmm-align, as steps/train_mono.sh runs it: the same line, exit status 1, no alignments
    from nnet_tools.speech.models import gmm
    gmm.save(mono_model(tmp_path / "lang2"), str(tmp_path / "0.mdl"))
    with tables.MatrixWriter(f"ark:{tmp_path}/feats.ark") as w:
        w.write("u1", np.random.default_rng(0).normal(size=(60, 6)).astype(np.float32))
    (tmp_path / "text").write_text("u1 ONE TWO\n")
    r = run("nnet-gmm-align", "--equal", tmp_path / "0.mdl", lang, f"ark:{tmp_path}/feats.ark", tmp_path / "text",
            f"ark:{tmp_path}/ali.ark")
    assert "word 'ONE' is not in" in error_line(r) and not (tmp_path / "ali.ark").exists()


def test_the_output_dim_comes_from_the_alignment_model(tmp_path):
    """run.sh set it with a sed on the literal 'dim: 62}' of conf/model.yaml, which did nothing
    once the line was edited; nnet-init --output-dim-from reads the model's pdf count."""
    model = mono_model(tmp_path / "lang")
    from nnet_tools.speech.models import gmm
    gmm.save(model, str(tmp_path / "final.mdl"))
    (tmp_path / "model.yaml").write_text(SMALL_CONFIG.replace("dim: 4}", "dim: 7, max-change: 1.0}"))
    r = run("nnet-init", "--output-dim-from", tmp_path / "final.mdl", "--write-config", tmp_path / "out.yaml",
            tmp_path / "model.yaml", tmp_path / "0.mdl", check=True)
    assert f"Output layer dim {model.num_pdfs}: the pdf count of {tmp_path}/final.mdl" in r.stderr
    from nnet_tools.model import config, model_io
    assert config.load(tmp_path / "out.yaml")["layers"][-1]["dim"] == model.num_pdfs == 62
    assert config.load(tmp_path / "out.yaml")["layers"][-1]["max-change"] == 1.0   # the rest as it was
    assert model_io.load(str(tmp_path / "0.mdl")).config["layers"][-1]["dim"] == 62
