"""CMVN (Kaldi's compute-cmvn-stats / apply-cmvn) against a numpy restatement, on Kaldi-written
features. The shared Kaldi arks hold no CMVN statistics, so the statistics here are ours; their
layout is checked entry by entry against Kaldi's ([2, D+1], count last in row 0, 0 last in row 1)."""
import os
from pathlib import Path

import numpy as np
import pytest

from helpers import error_line, run
from nnet_tools.data import cmvn, tables
from nnet_tools.errors import NnetError

KALDI_FEATS = Path("/work/shared/testdata/kaldi-arks/kaldi-io-for-python/tests/data/feats.ark")


def numpy_cmvn(feats_by_utt, utt2spk, norm_vars):
    """The textbook statement: per speaker, x - mean (and / std, population variance)."""
    out = {}
    for spk in set(utt2spk.values()):
        utts = [u for u in feats_by_utt if utt2spk[u] == spk]
        allf = np.concatenate([feats_by_utt[u] for u in utts]).astype(np.float64)
        mean, std = allf.mean(0), allf.std(0)
        for u in utts:
            x = feats_by_utt[u] - mean
            out[u] = x / std if norm_vars else x
    return out


@pytest.fixture
def data_dir(tmp_path):
    """A Kaldi data dir over the Kaldi-written AMI features: two pseudo-speakers."""
    if not KALDI_FEATS.exists():
        pytest.skip("shared Kaldi test arks not present")
    feats = dict(tables.read_matrices(f"ark:{KALDI_FEATS}"))
    utts = sorted(feats)
    utt2spk = {u: ("spkA" if i < 4 else "spkB") for i, u in enumerate(utts)}
    d = tmp_path / "data"
    d.mkdir()
    (d / "feats.scp").write_text("".join(f"{u} {KALDI_FEATS}:{off}\n" for u, off in _offsets(utts)))
    (d / "utt2spk").write_text("".join(f"{u} {utt2spk[u]}\n" for u in utts))
    (d / "spk2utt").write_text("".join(f"{s} {' '.join(u for u in utts if utt2spk[u] == s)}\n"
                                       for s in ("spkA", "spkB")))
    return d, feats, utt2spk


def _offsets(utts):
    # Byte offsets as an ark,scp writer would give: find each "key " in the binary ark.
    blob = KALDI_FEATS.read_bytes()
    for u in utts:
        yield u, blob.index(u.encode() + b" ") + len(u) + 1


def test_stats_layout_is_kaldis():
    stats = cmvn.compute_cmvn_stats(np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert stats.dtype == np.float64
    np.testing.assert_array_equal(stats, [[4, 6, 2], [10, 20, 0]])
    both = cmvn.accumulate([stats, cmvn.compute_cmvn_stats(np.array([[5.0, -1.0]]))])
    np.testing.assert_array_equal(both, [[9, 5, 3], [35, 21, 0]])
    assert cmvn.accumulate([]) is None


def test_apply_by_hand():
    stats = np.array([[4.0, 6.0, 2.0], [10.0, 20.0, 0.0]])  # mean (2, 3), var (1, 1)
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(cmvn.apply_cmvn(x, stats), [[-1, -1], [1, 1]])
    stats[1, :2] = [4 * 2 + 2 * 4, 20]  # var (4, 1): scale (1/2, 1)
    np.testing.assert_allclose(cmvn.apply_cmvn(x, stats, norm_vars=True), [[-0.5, -1], [0.5, 1]])
    np.testing.assert_array_equal(cmvn.apply_cmvn(x, stats, norm_means=False), x)


def test_variance_floor_and_bad_stats(caplog):
    x = np.array([[1.0, 5.0], [3.0, 5.0]], np.float32)  # dimension 2 is constant: variance 0
    out = cmvn.apply_cmvn(x, cmvn.compute_cmvn_stats(x), norm_vars=True)
    assert np.isfinite(out).all() and np.allclose(out[:, 0], [-1, 1]) and np.allclose(out[:, 1], 0)
    assert "flooring cepstral variance" in caplog.text
    with pytest.raises(NnetError, match="insufficient statistics for CMVN: count = 0"):
        cmvn.apply_cmvn(x, np.zeros((2, 3)))
    with pytest.raises(NnetError, match="dim mismatch: CMVN statistics 2x4, features 2x2"):
        cmvn.apply_cmvn(x, np.ones((2, 4)))
    with pytest.raises(NnetError, match="variance but not the mean"):
        cmvn.apply_cmvn(x, cmvn.compute_cmvn_stats(x), norm_means=False, norm_vars=True)


@pytest.mark.parametrize("norm_vars", [False, True])
def test_programs_match_numpy_per_speaker(data_dir, tmp_path, norm_vars):
    d, feats, utt2spk = data_dir
    run("nnet-compute-cmvn-stats", f"--spk2utt=ark:{d}/spk2utt", f"scp:{d}/feats.scp",  # Kaldi's spelling
        f"ark,scp:{d}/cmvn.ark,{d}/cmvn.scp", check=True)
    stats = dict(tables.read_double_matrices(f"scp:{d}/cmvn.scp"))
    assert sorted(stats) == ["spkA", "spkB"]
    a = np.concatenate([feats[u] for u in feats if utt2spk[u] == "spkA"]).astype(np.float64)
    assert stats["spkA"].shape == (2, 14) and stats["spkA"][0, 13] == len(a) and stats["spkA"][1, 13] == 0
    np.testing.assert_allclose(stats["spkA"][0, :13], a.sum(0), rtol=1e-12)
    np.testing.assert_allclose(stats["spkA"][1, :13], (a * a).sum(0), rtol=1e-6)

    out = tmp_path / "normed.ark"
    r = run("nnet-apply-cmvn", f"--utt2spk=ark:{d}/utt2spk", f"--norm-vars={str(norm_vars).lower()}",
            f"scp:{d}/cmvn.scp", f"scp:{d}/feats.scp", f"ark:{out}", check=True)
    what = "mean and variance" if norm_vars else "mean"
    assert f"Applied cepstral {what} normalization to 10 utterances, errors on 0" in r.stderr
    got = dict(tables.read_matrices(f"ark:{out}"))
    want = numpy_cmvn(feats, utt2spk, norm_vars)
    assert sorted(got) == sorted(want)
    for u in want:
        np.testing.assert_allclose(got[u], want[u], atol=1e-4 if not norm_vars else 1e-5, rtol=1e-5)
    # The library, reading the data dir, gives the programs' answer.
    with cmvn.CmvnApplier.from_data_dir(d, norm_vars=norm_vars) as applier:
        for u in want:
            np.testing.assert_array_equal(applier(u, feats[u]), got[u])


def test_per_utterance_and_global_stats(data_dir, tmp_path):
    d, feats, _ = data_dir
    run("nnet-compute-cmvn-stats", "--binary=false", f"scp:{d}/feats.scp", f"ark:{tmp_path}/utt.txt", check=True)
    assert (tmp_path / "utt.txt").read_text().split()[1] == "["  # a text archive
    per_utt = dict(tables.read_double_matrices(f"ark:{tmp_path}/utt.txt"))
    assert sorted(per_utt) == sorted(feats)
    run("nnet-apply-cmvn", f"ark:{tmp_path}/utt.txt", f"scp:{d}/feats.scp", f"ark:{tmp_path}/o.ark", check=True)
    for u, x in tables.read_matrices(f"ark:{tmp_path}/o.ark"):
        np.testing.assert_allclose(x.mean(0), 0, atol=2e-4)

    # One global matrix file (Kaldi's cmvn-stats-rxfilename form of apply-cmvn).
    total = cmvn.accumulate(per_utt.values())
    with tables.DoubleMatrixWriter(f"ark:{tmp_path}/g.ark") as w:
        w.write("global", total)
    _kaldi_matrix_file(tmp_path / "g.mat", total)
    # compute-cmvn-stats writes that file itself when its output is a file name, not a table.
    run("nnet-compute-cmvn-stats", f"scp:{d}/feats.scp", tmp_path / "g2.mat", check=True)
    assert (tmp_path / "g2.mat").read_bytes()[:15] == (tmp_path / "g.mat").read_bytes()[:15]  # header, sizes
    np.testing.assert_allclose(tables.read_double_matrix(str(tmp_path / "g2.mat")),
                               cmvn.accumulate(cmvn.compute_cmvn_stats(x) for x in feats.values()), rtol=1e-12)
    assert "did you forget ark:?" in error_line(
        run("nnet-compute-cmvn-stats", f"--spk2utt={d}/spk2utt", f"scp:{d}/feats.scp", tmp_path / "g3.mat"))
    run("nnet-apply-cmvn", "--norm-vars=true", tmp_path / "g.mat", f"scp:{d}/feats.scp", f"ark:{tmp_path}/g.out", check=True)
    allf = np.concatenate([x for _, x in tables.read_matrices(f"ark:{tmp_path}/g.out")])
    np.testing.assert_allclose(allf.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(allf.std(0), 1, atol=1e-4)


def _kaldi_matrix_file(path, matrix):
    # A single binary double matrix, as Kaldi's `copy-matrix ... global.mat` would write.
    rows, cols = matrix.shape
    path.write_bytes(b"\0BDM " + b"\4" + np.int32(rows).tobytes() + b"\4" + np.int32(cols).tobytes()
                     + np.ascontiguousarray(matrix, "<f8").tobytes())


def test_missing_speaker_and_utterance(data_dir, tmp_path):
    d, feats, _ = data_dir
    run("nnet-compute-cmvn-stats", f"--spk2utt={d}/spk2utt", f"scp:{d}/feats.scp",
        f"ark,scp:{d}/cmvn.ark,{d}/cmvn.scp", check=True)
    utt = sorted(feats)[0]
    (d / "utt2spk").write_text((d / "utt2spk").read_text().replace(f"{utt} spkA", f"{utt} spkZ"))
    with cmvn.CmvnApplier.from_data_dir(d) as applier:
        with pytest.raises(NnetError, match=rf"cmvn.scp: no CMVN statistics for speaker 'spkZ' \(of utterance '{utt}'\)"):
            applier(utt, feats[utt])
        with pytest.raises(NnetError, match=r"utt2spk: no speaker for utterance 'nobody'"):
            applier.stats("nobody")
    # The program, as Kaldi's, warns, skips that utterance and goes on.
    r = run("nnet-apply-cmvn", f"--utt2spk={d}/utt2spk", f"scp:{d}/cmvn.scp", f"scp:{d}/feats.scp",
            f"ark:{tmp_path}/o.ark", check=True)
    assert "spkZ" in r.stderr and "errors on 1" in r.stderr
    assert len(dict(tables.read_matrices(f"ark:{tmp_path}/o.ark"))) == 9
    # spk2utt naming an utterance without features: warned about and counted.
    (d / "spk2utt").write_text((d / "spk2utt").read_text() + "spkC ghost\n")
    r = run("nnet-compute-cmvn-stats", f"--spk2utt={d}/spk2utt", f"scp:{d}/feats.scp", f"ark:{tmp_path}/s.ark", check=True)
    assert "'ghost'" in r.stderr and "for 10 utterances; 1 had errors." in r.stderr
    assert "no CMVN" not in r.stderr and sorted(dict(tables.read_double_matrices(f"ark:{tmp_path}/s.ark"))) == ["spkA", "spkB"]
    # Nothing done at all: exit 1 as Kaldi, but with an ERROR line and no empty archive left.
    (d / "spk2utt").write_text("spkC ghost phantom\n")
    r = run("nnet-compute-cmvn-stats", f"--spk2utt={d}/spk2utt", f"scp:{d}/feats.scp", f"ark:{tmp_path}/none.ark")
    assert "none of the 2 utterances in" in error_line(r) and not (tmp_path / "none.ark").exists()
    (d / "utt2spk").write_text("ghost spkA\n")
    r = run("nnet-apply-cmvn", f"--utt2spk={d}/utt2spk", f"scp:{d}/cmvn.scp", f"scp:{d}/feats.scp",
            f"ark:{tmp_path}/none.ark")
    assert "no utterance normalised: none of the 10 had statistics" in error_line(r)
    assert not (tmp_path / "none.ark").exists()


def test_bad_input_is_one_line(data_dir, tmp_path):
    d, _, _ = data_dir
    assert "--norm-vars=true needs --norm-means=true" in error_line(
        run("nnet-apply-cmvn", "--norm-means=false", "--norm-vars=true", f"scp:{d}/feats.scp",
            f"scp:{d}/feats.scp", f"ark:{tmp_path}/o.ark"))
    assert "no such file" in error_line(run("nnet-apply-cmvn", tmp_path / "nope.mat", f"scp:{d}/feats.scp", f"ark:{tmp_path}/o.ark"))
    (d / "utt2spk").write_text("a b c\n")
    assert "utt2spk: line 1: expected '<utterance> <speaker>'" in error_line(
        run("nnet-apply-cmvn", f"--utt2spk={d}/utt2spk", f"scp:{d}/feats.scp", f"scp:{d}/feats.scp", f"ark:{tmp_path}/o.ark"))
    with pytest.raises(NnetError, match="no cmvn.scp"):
        cmvn.CmvnApplier.from_data_dir(d)
    assert not (tmp_path / "o.ark").exists()


def test_the_stage_script_takes_kaldis_one_argument_form(data_dir, tmp_path):
    """steps/compute_cmvn_stats.sh <data> [<log> [<cmvn-dir>]], as Kaldi's (once: exactly 3)."""
    import subprocess
    from helpers import REPO
    d, feats, _ = data_dir
    r = subprocess.run(["bash", REPO / "steps" / "compute_cmvn_stats.sh", d], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (d / "cmvn.scp").read_text() == (d / "data" / "cmvn_data.scp").read_text() and (d / "log" / "cmvn_data.log").exists()
    assert sorted(dict(tables.read_double_matrices(f"scp:{d}/cmvn.scp"))) == ["spkA", "spkB"]


def test_features_that_cannot_be_summed_name_their_key(tmp_path):
    """Kaldi asserts on these; a dimension that changes within a speaker or over the whole
    input, and an empty matrix, are one line naming the table and the key."""
    (tmp_path / "f.ark").write_text("u1 [ 1 2 3 ]\nu2 [ 1 2 ]\nu3 [ ]\n")
    (tmp_path / "spk2utt").write_text("s1 u1 u2\n")
    ark = f"ark,t:{tmp_path}/f.ark"
    assert error_line(run("nnet-compute-cmvn-stats", f"--spk2utt={tmp_path}/spk2utt", ark, f"ark:{tmp_path}/o.ark")
                      ).endswith(f"{ark}: key 'u2': dimension 2 differs from the 3 of speaker 's1''s utterances before it")
    assert error_line(run("nnet-compute-cmvn-stats", ark, tmp_path / "g.mat")).endswith(
        f"{ark}: key 'u2': dimension 2 differs from the 3 of the utterances before it")
    assert f"{ark}: key 'u3': CMVN statistics need a [frames, dim] matrix" in error_line(
        run("nnet-compute-cmvn-stats", ark, f"ark:{tmp_path}/o.ark"))
    assert sorted(os.listdir(tmp_path)) == ["f.ark", "spk2utt"]


def test_cmvn_opts_strings():
    assert cmvn.parse_cmvn_opts("") == (True, False)  # apply-cmvn's defaults
    assert cmvn.parse_cmvn_opts("--norm-vars=true") == (True, True)
    assert cmvn.parse_cmvn_opts("--norm-vars --norm-means=True") == (True, True)
    assert cmvn.parse_cmvn_opts("--norm-means=false") == (False, False)
    for opts in ("--norm-means=true --norm-vars=false", "--norm-means=false", "--norm-means=true --norm-vars=true"):
        assert cmvn.format_cmvn_opts(*cmvn.parse_cmvn_opts(opts)) == opts
    with pytest.raises(NnetError, match="unsupported option '--norm-var=true'"):
        cmvn.parse_cmvn_opts("--norm-var=true")
    with pytest.raises(NnetError, match="'--norm-vars=yes': the value must be true or false"):
        cmvn.parse_cmvn_opts("--norm-vars=yes")
