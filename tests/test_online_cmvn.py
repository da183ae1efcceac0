"""Online and global CMVN. nnet-apply-cmvn-online against a frame-by-frame transcription of Kaldi's
OnlineCmvn (src/feat/online-feature.cc): a sliding sum, SmoothOnlineCmvnStats and ApplyCmvn;
steps/get_egs.sh --online-cmvn / --global-cmvn."""
import numpy as np
import pytest

from nnet_tools.data import tables
from nnet_tools.data.egs import EgsArchive
from nnet_tools.data.online_cmvn import OnlineCmvnOptions, apply_online_cmvn, speaker_state
from helpers import REPO, error_line, lengths, run, write_data_dir


def kaldi_online_cmvn(feats, global_stats, opts, speaker_stats=None):
    """OnlineCmvn::GetFrame for t = 0..T-1, as Kaldi's loops do it (double stats, float output)."""
    dim = feats.shape[1]
    window = np.zeros((2, dim + 1))
    out = np.empty_like(feats)
    for t in range(len(feats)):
        x = feats[t].astype(np.float64)
        window[0, :dim] += x
        window[1, :dim] += x * x
        window[0, dim] += 1
        if t - opts.cmn_window >= 0:
            old = feats[t - opts.cmn_window].astype(np.float64)
            window[0, :dim] -= old
            window[1, :dim] -= old * old
            window[0, dim] -= 1
        stats = window.copy()
        for prior, limit in ((speaker_stats, opts.speaker_frames), (global_stats, opts.global_frames)):
            if prior is None or stats[0, dim] >= opts.cmn_window:
                continue
            take = min(opts.cmn_window - stats[0, dim], limit, prior[0, dim])
            if take > 0:
                stats += take / prior[0, dim] * prior
        mean = stats[0, :dim] / stats[0, dim]
        if opts.norm_vars:
            scale = 1.0 / np.sqrt(np.maximum(stats[1, :dim] / stats[0, dim] - mean * mean, 1e-20))
            out[t] = feats[t] * scale.astype(np.float32) + (-(mean * scale)).astype(np.float32)
        else:
            out[t] = feats[t] + (-mean).astype(np.float32)
    return out


def write_feats(tmp_path, utts):
    with tables.MatrixWriter(f"ark,scp:{tmp_path}/feats.ark,{tmp_path}/feats.scp") as w:
        for utt, feats in utts:
            w.write(utt, feats)


def stats_of(x):
    return speaker_state(None, x)


@pytest.mark.parametrize("norm_vars", [False, True])
@pytest.mark.parametrize("with_speaker", [False, True])
def test_matches_kaldis_loop(norm_vars, with_speaker):
    rng = np.random.default_rng(0)
    feats = (rng.standard_normal((40, 5)) * 3 + 7).astype(np.float32)
    global_stats = stats_of(rng.standard_normal((500, 5)) * 2 + 5)
    speaker = stats_of(rng.standard_normal((4, 5)) + 6) if with_speaker else None  # fewer than speaker_frames
    opts = OnlineCmvnOptions(cmn_window=9, speaker_frames=6, global_frames=3, norm_vars=norm_vars)
    ours = apply_online_cmvn(feats, global_stats, opts, speaker)
    want = kaldi_online_cmvn(feats, global_stats, opts, speaker)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, want, rtol=0, atol=2e-5)
    # the window's back-off matters at the start, and is gone once the window is full
    assert not np.allclose(ours[0], feats[0] - feats[0])
    later = feats[9:] - np.stack([feats[t - 8:t + 1].mean(0) for t in range(9, 40)])
    if not norm_vars:
        np.testing.assert_allclose(ours[9:], later, atol=2e-5)


def test_first_frame_with_kaldis_defaults():
    """Frame 0 of a first utterance: its own frame plus 200 frames' worth of the global mean."""
    g_mean = np.array([1.0, -2.0, 3.0])
    global_stats = np.zeros((2, 4))
    global_stats[0, :3], global_stats[0, 3] = g_mean * 1000, 1000
    feats = np.array([[4.0, 4.0, 4.0], [0.0, 1.0, 2.0]], np.float32)
    out = apply_online_cmvn(feats, global_stats)
    np.testing.assert_allclose(out[0], feats[0] - (feats[0] + 200 * g_mean) / 201, atol=1e-5)
    np.testing.assert_allclose(out[1], feats[1] - (feats[0] + feats[1] + 200 * g_mean) / 202, atol=1e-5)


def test_program_carries_a_speakers_history_in_spk2utt_order(tmp_path):
    rng = np.random.default_rng(1)
    utts = {u: (rng.standard_normal((n, 4)) + 3).astype(np.float32) for u, n in (("a1", 30), ("a2", 12), ("b1", 8))}
    write_feats(tmp_path, utts.items())
    global_stats = stats_of(rng.standard_normal((900, 4)))
    tables.write_double_matrix(str(tmp_path / "global.stats"), global_stats, binary=False)
    (tmp_path / "spk2utt").write_text("b b1\na a2 a1\n")
    run("nnet-apply-cmvn-online", "--spk2utt", tmp_path / "spk2utt", tmp_path / "global.stats",
        f"scp:{tmp_path}/feats.scp", f"ark:{tmp_path}/out.ark", check=True)
    out = list(tables.read_matrices(f"ark:{tmp_path}/out.ark"))
    assert [k for k, _ in out] == ["b1", "a2", "a1"]
    got = dict(out)
    opts = OnlineCmvnOptions()
    np.testing.assert_allclose(got["a2"], kaldi_online_cmvn(utts["a2"], global_stats, opts), atol=2e-5)
    np.testing.assert_allclose(got["a1"], kaldi_online_cmvn(utts["a1"], global_stats, opts, stats_of(utts["a2"])),
                               atol=2e-5)
    # without spk2utt every utterance starts from the global statistics alone
    r = run("nnet-apply-cmvn-online", tmp_path / "global.stats", f"scp:{tmp_path}/feats.scp", "ark:/dev/null")
    assert "Applied online CMVN to 3 files, or 50 frames." in r.stderr


def test_bad_input_is_one_line(tmp_path):
    write_feats(tmp_path, [("u1", np.ones((5, 4), np.float32))])
    tables.write_double_matrix(str(tmp_path / "global.stats"), stats_of(np.ones((10, 3))), binary=True)
    r = run("nnet-apply-cmvn-online", tmp_path / "global.stats", f"scp:{tmp_path}/feats.scp", "ark:/dev/null")
    assert "utterance 'u1': dim mismatch: global CMVN statistics 2x4, features 5x4" in error_line(r)
    r = run("nnet-apply-cmvn-online", "--global-frames", 700, tmp_path / "global.stats",
            f"scp:{tmp_path}/feats.scp", "ark:/dev/null")
    assert "--global-frames (700) <= --speaker-frames (600)" in error_line(r)


def test_get_egs_sh_global_and_online_cmvn(tmp_path):
    """steps/get_egs.sh --global-cmvn / --online-cmvn: the features' global statistics in the egs
    dir, the egs normalised with them (the one mean, or online frame by frame), Kaldi's online_cmvn
    marker only for online; both at once refused."""
    d, egs = tmp_path / "data", tmp_path / "egs"
    feats, _ = write_data_dir(d, lengths(30))
    total = stats_of(np.concatenate([feats[u] for u in sorted(feats)]))

    def get_egs_sh(*options):
        return run(REPO / "steps" / "get_egs.sh", "--frames-per-eg", 4, "--num-utts-subset", 3,
                   "--samples-per-iter", 30, *options, d, egs)

    def first_frame():
        archive = EgsArchive(egs / "egs.1.ark")
        utt, t0 = archive.keys()[0].rsplit("-", 1)
        return utt, int(t0), archive.windows([0], 0, 4, 4)[0][4].numpy()

    assert get_egs_sh("--global-cmvn", "true").returncode == 0
    np.testing.assert_allclose(tables.read_double_matrix(str(egs / "global_cmvn.stats")), total, rtol=1e-6)
    assert not (egs / "online_cmvn").exists()
    assert (egs / "cmvn_opts").read_text().strip() == "--norm-means=true --norm-vars=false"
    utt, t0, got = first_frame()
    np.testing.assert_allclose(got, feats[utt][t0] - total[0, :-1] / total[0, -1], atol=1e-5)

    assert get_egs_sh("--online-cmvn", "true").returncode == 0
    assert (egs / "online_cmvn").exists()
    utt, t0, got = first_frame()
    np.testing.assert_allclose(got, apply_online_cmvn(feats[utt], total)[t0], atol=1e-5)

    r = get_egs_sh("--online-cmvn", "true", "--global-cmvn", "true")
    assert r.returncode == 1 and "give --online-cmvn true or --global-cmvn true, not both" in r.stderr
