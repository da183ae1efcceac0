"""Broken inputs to the speech programs (found by trying them on broken data): each is one
NnetError line, never a crash, a traceback, or a wrong result with exit status 0."""
import io
import math
import os
import subprocess
import sys
import wave

import numpy as np
import pytest

pytest.importorskip("kaldi_hmm_gmm", reason="speech extra not installed (pip install -e '.[speech]')")

from helpers import error_line, mono_model, run  # noqa: E402
from nnet_tools.data import tables  # noqa: E402
from nnet_tools.errors import NnetError  # noqa: E402
from nnet_tools.speech.corpus import transcripts  # noqa: E402
from nnet_tools.speech.features import extract  # noqa: E402
from nnet_tools.speech.lang import fstio, langdir, lexicon  # noqa: E402
from nnet_tools.speech.models import align, estimate, gmm, likelihoods  # noqa: E402
from nnet_tools.speech.search import decode, graph  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The digits lang and a one-Gaussian-per-pdf model; a two-word lang and its model."""
    d = tmp_path_factory.mktemp("speech-bad")
    (d / "small.txt").write_text("!SIL SIL\none W AH N\ntwo T UW\n")
    models = {"lang": mono_model(d / "lang"), "small": mono_model(d / "small", d / "small.txt")}
    gmm.save(models["lang"], str(d / "0.mdl"))
    return d, models


def test_a_graph_with_transition_ids_beyond_the_model_is_refused(setup):
    """The decoder would read scores past the end of its matrix: wrong words, exit 0."""
    d, models = setup
    hclg = graph.make_hclg(langdir.load(str(d / "lang")), models["lang"], fstio.read_fst(str(d / "lang/L_disambig.fst")),
                           fstio.read_fst(str(d / "lang/G.fst")))
    decode.Decoder(hclg, models["lang"].tid2pdf())
    with pytest.raises(NnetError, match=r"the graph has transition-id \d+, the model only \d+"):
        decode.Decoder(hclg, models["small"].tid2pdf())
    with pytest.raises(NnetError, match="--beam must be finite"):
        decode.Decoder(hclg, models["lang"].tid2pdf(), beam=math.nan)


def test_model_and_lang_from_different_lexicons(setup):
    d, models = setup
    with pytest.raises(NnetError, match="the model's 20 phones are not the lang's 6"):
        models["lang"].check_lang(langdir.load(str(d / "small")), "m with small")
    with pytest.raises(NnetError, match="come from different lexicons"):
        align.GraphCompiler(models["small"], langdir.load(str(d / "lang")), fstio.read_fst(str(d / "lang/L.fst")))


def test_a_word_that_l_fst_does_not_pronounce_is_skipped(setup, tmp_path):
    """In words.txt but not in L.fst: Kaldi's graph compiler asserts; the utterance is skipped."""
    d, models = setup
    small = tmp_path / "small"
    subprocess.run(["cp", "-r", str(d / "small"), str(small)], check=True)
    with open(small / "words.txt", "a") as f:
        f.write("<unk> 99\n")
    compiler = align.GraphCompiler(models["small"], langdir.load(str(small)), fstio.read_fst(str(small / "L.fst")))
    assert compiler.compile(["one", "two"], "text: utt 'a'") is not None
    with pytest.raises(NnetError, match="text: utt 'b': the transcript has no path through L.fst"):
        compiler.compile(["one", "<unk>"], "text: utt 'b'")


@pytest.mark.parametrize("beam, retry_beam", [(10, 5), (10, 10), (10, math.inf)])
def test_retry_beam_is_zero_or_above_the_beam(setup, beam, retry_beam):
    d, models = setup
    align.Aligner(models["lang"], beam=10, retry_beam=0)  # Kaldi's default: no retry
    with pytest.raises(NnetError, match=f"--retry-beam must be 0 .* above --beam {beam}, got {retry_beam}"):
        align.Aligner(models["lang"], beam=beam, retry_beam=retry_beam)


def test_a_gmm_no_program_could_use_is_not_written_and_likelihoods_are_never_nan(setup, tmp_path):
    """A huge --perturb-factor made means of inf (a model file every loader refuses) or of 1e20
    (log-likelihoods of NaN, written with exit status 0)."""
    d, _ = setup
    m = gmm.load(str(d / "0.mdl"))
    m.am.set_gaussian_mean(0, 0, np.full(m.dim, 1e20, np.float32))
    m.am.compute_gconsts()
    likes = likelihoods.compute_likes(m, np.zeros((2, m.dim), np.float32))
    assert np.isneginf(likes[:, 0]).all() and np.isfinite(likes[:, 1:]).all()
    m.am.set_gaussian_mean(0, 0, np.full(m.dim, np.inf, np.float32))
    with pytest.raises(NnetError, match="x.mdl: not written: the GMM's means are not finite"):
        gmm.save(m, str(tmp_path / "x.mdl"))
    assert os.listdir(tmp_path) == []


def test_alignments_and_accumulators_from_another_model(setup):
    d, models = setup
    num_tids = models["lang"].tm.num_transition_ids
    gmm.check_tids([1, num_tids], num_tids, "ali")
    for bad in (0, -1, num_tids + 1):
        with pytest.raises(NnetError, match=rf"ali: transition-id {bad} out of range \[1, {num_tids}\]"):
            gmm.check_tids([1, bad], num_tids, "ali")
    with pytest.raises(NnetError, match=r"acc: accumulators for \d+ Gaussians .* but the model has"):
        estimate.Stats(models["small"]).check_model(models["lang"], "acc")


def test_a_model_file_edited_or_not_a_model(setup, tmp_path):
    d, _ = setup
    good = dict(np.load(d / "0.mdl"))
    for name, edit, message in (
            ("nomeans", lambda m: m.pop("means"), "no means"),
            ("nanmean", lambda m: m["means"].__setitem__((0, 0), np.nan), "means must be finite"),
            ("negvar", lambda m: m["vars"].__setitem__((0, 0), -1.0), "variances must be positive"),
            ("short", lambda m: m.__setitem__("num_gauss", m["num_gauss"][:-1]), "Gaussians, but means"),
            ("tid2pdf", lambda m: m["tid2pdf"].__setitem__(1, 0 if m["tid2pdf"][1] else 1), "do not match")):
        model = {k: v.copy() for k, v in good.items()}
        edit(model)
        np.savez(tmp_path / f"{name}.npz", **model)
        with pytest.raises(NnetError, match=f"{name}.npz: corrupt GMM model: .*{message}"):
            gmm.load(str(tmp_path / f"{name}.npz"))
    (tmp_path / "text.mdl").write_text("hello\n")
    with pytest.raises(NnetError, match=r"text.mdl: not a GMM model file \(not an .npz archive"):
        gmm.load(str(tmp_path / "text.mdl"))
    with pytest.raises(NnetError, match="GMM model file is a directory"):
        gmm.load(str(tmp_path))


def test_features_that_are_empty_nan_or_of_another_dim():
    assert gmm.usable_features(np.zeros((0, 0), np.float32), 6, "u") is False   # skipped, as Kaldi
    assert gmm.usable_features(np.zeros((3, 6), np.float32), 6, "u") is True
    with pytest.raises(NnetError, match="u: feature dim 5 does not match the model's 6"):
        gmm.usable_features(np.zeros((3, 5), np.float32), 6, "u")
    with pytest.raises(NnetError, match="u: NaN or infinite features"):
        gmm.usable_features(np.full((3, 6), np.inf, np.float32), 6, "u")


@pytest.mark.parametrize("option, message", [
    ("--num-ceps=0", r"--num-ceps must be in 1..--num-mel-bins \(23\)"),      # segfaulted
    ("--frame-shift=0.001", "must each be at least one sample"),               # SIGFPE
    ("--num-mel-bins=1000", "bad mfcc options: You may have set num_mel_bins too large"),
    ("--window-type=foo", "--window-type must be one of"),
    ("--cepstral-lifter=nan", "--cepstral-lifter must be a finite number"),   # all-NaN features
    ("--low-freq=9000", "bad mfcc options: Bad values in options: low-freq 9000")])
def test_feature_options_out_of_range(option, message):
    with pytest.raises(NnetError, match=message):
        extract.make_options("mfcc", overrides=[option])


def test_a_lexicon_that_would_make_a_corrupt_lang_dir(tmp_path):
    for name, text, message in (("eps", "!SIL SIL\none W <eps> N\n", "phone '<eps>' is a reserved symbol"),
                                ("hash", "!SIL SIL\none W AH #0\n", "phone '#0' is a reserved symbol"),
                                ("sil", "!SIL SIL\n", "no phone but the silence phone")):
        (tmp_path / f"{name}.txt").write_text(text)
        with pytest.raises(NnetError, match=message):
            langdir.prepare(str(tmp_path / f"{name}.txt"), str(tmp_path / name))
    for name, text, message in (("p", "!SIL 1.0 SIL\none 0.5 W AH N\n", "'1.0' is a probability, as in lexiconp.txt"),
                                ("dup", "!SIL SIL\none W AH N\none W AH N\n", "dup.txt:3: the same line as line 2")):
        (tmp_path / f"{name}.txt").write_text(text)
        with pytest.raises(NnetError, match=message):
            lexicon.read_lexicon(str(tmp_path / f"{name}.txt"))
        os.remove(tmp_path / f"{name}.txt")
    (tmp_path / "ok.txt").write_text("!SIL SIL\none W AH N\n")
    with pytest.raises(NnetError, match=r"--sil-prob must be in \(0, 1\)"):
        langdir.prepare(str(tmp_path / "ok.txt"), str(tmp_path / "lang"), sil_prob=1.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eps.txt", "hash.txt", "ok.txt", "sil.txt"]  # nothing written
    with pytest.raises(NnetError, match="'#0' is a reserved symbol, not a word"):
        langdir.build(lexicon.read_lexicon(str(tmp_path / "ok.txt"))).word_ids(["one", "#0"], "text: utt 'u'")


def test_a_word_pronounced_only_by_a_silence_phone_is_kept_as_kaldi_keeps_it(tmp_path):
    """Kaldi's own lexicons have them ('!SIL SIL', '<UNK> SPN' in wsj_prepare_dict.sh) and
    validate_dict_dir.pl has no check against them: not an error here either."""
    (tmp_path / "lexicon.txt").write_text("!SIL SIL\n<SIL> SIL\none W AH N\n")
    made = langdir.prepare(str(tmp_path / "lexicon.txt"), str(tmp_path / "lang"))
    assert "<SIL>" in made.words and (tmp_path / "lang" / "L.fst").is_file()


def write_wav(path, samples, rate=16000):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, "<i2").tobytes())
    return path


SAMPLES = np.random.default_rng(0).integers(-3000, 3000, 1600)  # 0.1 s: 8 frames


def test_a_truncated_wav_is_used_as_far_as_it_goes_with_kaldis_warning(tmp_path):
    """Kaldi's WaveData::Read warns and keeps what it read (an odd last byte dropped); this was
    silent, and an odd number of bytes was a traceback. No data at all is Kaldi's error."""
    good = write_wav(tmp_path / "good.wav", SAMPLES)
    (tmp_path / "cut.wav").write_bytes(good.read_bytes()[:-1001])   # 2199 of its 3200 data bytes
    (tmp_path / "empty.wav").write_bytes(good.read_bytes()[:44])    # the header alone
    (tmp_path / "junk.wav").write_bytes(b"hello")                   # its reason once printed empty
    (tmp_path / "wav.scp").write_text("".join(f"{u} {tmp_path}/{u}.wav\n" for u in ("good", "cut", "empty", "junk")))
    r = run("nnet-compute-feats", tmp_path / "wav.scp", f"ark:{tmp_path}/feats.ark", check=True)
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 3 and "Done 2 out of 4 utterances." in r.stderr
    assert warnings[0].endswith(f"wav.scp: utt 'cut': {tmp_path}/cut.wav: Expected 3200 bytes of wave data, "
                                f"but read only 2199 bytes. Truncated file?")
    assert f"utt 'empty': cannot read wav {tmp_path}/empty.wav: WaveData: empty file (no data); skipping it" in warnings[1]
    assert np.array_equal(extract.read_wav(str(tmp_path / "cut.wav"), "u")[1], SAMPLES[:1099])
    assert "WaveData: expected RIFF or RIFX" in warnings[2]
    feats = dict(tables.read_matrices(f"ark:{tmp_path}/feats.ark"))
    assert {u: len(f) for u, f in feats.items()} == {"good": 8, "cut": 5}


def test_wav_scp_commands_channels_and_the_programs_own_options(tmp_path):
    """As Kaldi's compute-mfcc-feats: 'utt command |' lines, the first of two channels (with a
    warning) or --channel, and its own options in the conf file beside the feature options."""
    write_wav(tmp_path / "a.wav", SAMPLES)
    stereo = np.stack([SAMPLES, SAMPLES[::-1]], axis=1).reshape(-1)
    with wave.open(str(tmp_path / "st.wav"), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(stereo.astype("<i2").tobytes())
    (tmp_path / "wav.scp").write_text(f"cmd cat {tmp_path}/a.wav |\nst {tmp_path}/st.wav\n")
    (tmp_path / "mfcc.conf").write_text("--dither=0\n--use-energy\n--subtract-mean=true\n")
    r = run("nnet-compute-feats", f"--config={tmp_path}/mfcc.conf", tmp_path / "wav.scp", f"ark:{tmp_path}/f.ark",
            check=True)
    assert "utt 'st': channel not specified but you have data with 2 channels; defaulting to zero" in r.stderr
    feats = dict(tables.read_matrices(f"ark:{tmp_path}/f.ark"))
    np.testing.assert_array_equal(feats["cmd"], feats["st"])          # channel 0 is a.wav's samples
    np.testing.assert_allclose(feats["cmd"].mean(0), 0, atol=1e-4)    # --subtract-mean
    opts, wave_opts = extract.make_options("mfcc", overrides=["--dither=0", "--channel=1", "--min-duration=0.2"])
    assert (wave_opts.channel, wave_opts.min_duration) == (1, 0.2)
    rate, right = extract.read_wav(str(tmp_path / "st.wav"), "u", channel=1)
    np.testing.assert_array_equal(right, SAMPLES[::-1])
    assert extract.read_wav(str(tmp_path / "st.wav"), "u", channel=2)[1] is None
    assert extract.utterance_features(opts, wave_opts, str(tmp_path / "a.wav"), "u") is None  # 0.1 s < 0.2 s
    opts, wave_opts = extract.make_options("mfcc", overrides=["--allow-downsample=true", "--sample-frequency=8000"])
    with pytest.raises(NnetError, match="resampling is not supported"):
        extract.utterance_features(opts, wave_opts, str(tmp_path / "a.wav"), "u")
    with pytest.raises(NnetError, match="--vtln-warp=0.9 is not supported, only 1.0"):
        extract.make_options("mfcc", overrides=["--vtln-warp=0.9"])


def test_an_utterance_twice_in_wav_scp_is_refused_before_anything_is_written(tmp_path):
    """Kaldi's compute-mfcc-feats would write the key twice, and random access to the output
    then fails ('contains duplicate key'); validate_data_dir.sh refuses such a wav.scp."""
    wav = write_wav(tmp_path / "a.wav", SAMPLES)
    (tmp_path / "wav.scp").write_text(f"u1 {wav}\nu2 {wav}\nu1 {wav}\n")
    r = run("nnet-compute-feats", tmp_path / "wav.scp", f"ark,scp:{tmp_path}/f.ark,{tmp_path}/f.scp")
    assert error_line(r).endswith(f"{tmp_path}/wav.scp:3: utterance 'u1' appears twice")
    assert sorted(os.listdir(tmp_path)) == ["a.wav", "wav.scp"]   # no output, no temp file


def test_text_tables_from_stdin(tmp_path, monkeypatch):
    """'-' and 'ark:-' (for wav.scp 'scp:-') are stdin, as in Kaldi's rspecifiers."""
    (tmp_path / "ref").write_text("u1 one two three\nu2 four\n")
    for ref, hyp in ((f"ark:{tmp_path}/ref", "ark:-"), (str(tmp_path / "ref"), "-")):
        r = subprocess.run(["nnet-compute-wer", ref, hyp], input="u1 one two\nu2 five five\n",
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[0] == "%WER 75.00 [ 3 / 4, 1 ins, 1 del, 1 sub ]"
    wav = write_wav(tmp_path / "a.wav", SAMPLES)
    r = subprocess.run(["nnet-compute-feats", "scp:-", f"ark:{tmp_path}/feats.ark"], input=f"u1 {wav}\n",
                       capture_output=True, text=True)
    assert r.returncode == 0 and [k for k, _ in tables.read_matrices(f"ark:{tmp_path}/feats.ark")] == ["u1"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"u1 one\nu1 two\n")))
    with pytest.raises(NnetError, match="^standard input:2: utterance 'u1' appears twice$"):
        transcripts.read_text("ark:-")
    for bad, message in (("scp:text", "the text is read as ark:FILE"),
                         ("ark:cat text |", "a command is not supported for the text")):
        with pytest.raises(NnetError, match=message):
            transcripts.read_text(bad)
