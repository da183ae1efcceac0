"""nnet-get-egs: egs archives, diagnostic/combine subsets and info/ from features + targets."""
import collections
import os
import subprocess
import tracemalloc

import numpy as np
import pytest
import torch

from nnet_tools.data import get_egs as ge
from nnet_tools.data.egs import EgsArchive
from nnet_tools.errors import NnetError
from nnet_tools.model.nnet import frame_windows
from nnet_tools.data.tables import MatrixWriter
from helpers import SMALL, archives, error_line, lengths, run_lib, write_cmvn, write_data, write_data_dir


def read_list(path):
    return path.read_text().split()


def check_egs(archive, feats, targets, left, right):
    """Every labelled position of every eg: its context window equals frame_windows of the source
    features (edge padding included) and its label the source target. Returns the (utt, frame)s."""
    seen = []
    for i, key in enumerate(archive.keys()):
        utt, t0 = key.rsplit("-", 1)
        t0 = int(t0)
        windows = frame_windows(torch.from_numpy(feats[utt]), left, right)
        for f in range(archive.frames_per_eg):
            frame, label = t0 + f, int(archive.labels[i, f])
            if label < 0:
                assert frame >= len(targets[utt]) or frame >= len(feats[utt]), key
                continue
            assert label == targets[utt][frame], key
            assert torch.equal(archive.windows([i], f, left, right)[0], windows[frame]), (key, f)
            seen.append((utt, frame))
    return seen


def test_every_training_frame_in_exactly_one_eg(tmp_path):
    (feats, targets, *_), egs_dir, info = run_lib(tmp_path)
    valid = set(read_list(egs_dir / "valid_uttlist"))
    seen = collections.Counter()
    for archive in archives(egs_dir):
        assert archive.frames_per_eg == 4 and (archive.left_context, archive.right_context) == (2, 3)
        seen.update(check_egs(archive, feats, targets, 2, 3))
    expected = {(u, t) for u in feats if u not in valid for t in range(len(feats[u]))}
    assert set(seen) == expected
    assert max(seen.values()) == 1
    assert info["num_frames"] == len(expected)
    assert not {u for u, _ in seen} & valid


def test_utterance_lists_and_subsets(tmp_path):
    (feats, targets, *_), egs_dir, _ = run_lib(tmp_path)
    valid, subset = read_list(egs_dir / "valid_uttlist"), read_list(egs_dir / "train_subset_uttlist")
    assert len(valid) == len(subset) == 3 and not set(valid) & set(subset)
    training = {k.rsplit("-", 1)[0] for a in archives(egs_dir) for k in a.keys()}
    assert set(subset) <= training  # the train subset is not excluded from training
    pools = {"valid_diagnostic.egs": set(valid), "train_diagnostic.egs": set(subset),
             "combine.egs": set(subset)}  # num_valid_frames_combine is 0 by default
    for name, utts in pools.items():
        archive = EgsArchive(egs_dir / name)
        assert {k.rsplit("-", 1)[0] for k in archive.keys()} <= utts, name
        check_egs(archive, feats, targets, 2, 3)
        pool_egs = sum(-(-len(feats[u]) // 4) for u in utts)
        wanted = (SMALL["num_frames_diagnostic"] if "diagnostic" in name else SMALL["num_train_frames_combine"]) // 4
        assert archive.num_egs == min(wanted, pool_egs), name
        assert len(set(archive.keys())) == archive.num_egs


def test_valid_frames_go_into_combine_when_asked(tmp_path):
    _, egs_dir, _ = run_lib(tmp_path, num_valid_frames_combine=8)
    valid = set(read_list(egs_dir / "valid_uttlist"))
    utts = [k.rsplit("-", 1)[0] for k in EgsArchive(egs_dir / "combine.egs").keys()]
    assert sum(u in valid for u in utts) == 2  # 8 frames / 4 per eg, the valid_combine part first
    assert all(u in valid for u in utts[:2])


def test_archive_count_and_info_files(tmp_path):
    _, egs_dir, info = run_lib(tmp_path, n_utts=40)
    values = {f: (egs_dir / "info" / f).read_text().strip() for f in os.listdir(egs_dir / "info")}
    assert values.pop("cmvn_opts") == info.pop("cmvn_opts") == "--norm-means=false"  # no CMVN given
    values = {f: int(v) for f, v in values.items()}
    assert values == info
    fpe, spi = SMALL["frames_per_eg"], SMALL["samples_per_iter"]
    assert values["num_archives"] == values["num_frames"] // (fpe * spi) + 1 > 2
    assert values["egs_per_archive"] == values["num_frames"] // (fpe * values["num_archives"])
    assert (values["frames_per_eg"], values["left_context"], values["right_context"], values["feat_dim"]) == (4, 2, 3, 3)
    assert values["output_dim"] == 5  # largest id + 1 when --num-targets is not given
    assert sorted(os.listdir(egs_dir)) == sorted(
        ["info", "cmvn_opts", "valid_uttlist", "train_subset_uttlist", "valid_diagnostic.egs", "train_diagnostic.egs",
         "combine.egs"] + [f"egs.{k}.ark" for k in range(1, values["num_archives"] + 1)])  # temp dir gone
    sizes = [a.num_egs for a in archives(egs_dir)]
    assert sum(sizes) > 0 and min(sizes) > 0


def test_num_targets_sets_output_dim(tmp_path):
    assert run_lib(tmp_path, num_targets=12)[2]["output_dim"] == 12


def test_same_seed_same_egs_other_seed_differs(tmp_path):
    data = write_data(tmp_path / "data", lengths(30))
    dirs = [run_lib(tmp_path, data=data, name=n, srand=s)[1] for n, s in (("a", 0), ("b", 0), ("c", 5))]
    names = ["egs.1.ark", "egs.2.ark", "valid_uttlist", "valid_diagnostic.egs", "combine.egs"]
    for name in names:
        assert (dirs[0] / name).read_bytes() == (dirs[1] / name).read_bytes(), name
    assert any((dirs[0] / name).read_bytes() != (dirs[2] / name).read_bytes() for name in names)
    assert EgsArchive(dirs[0] / "egs.1.ark").keys() != EgsArchive(dirs[2] / "egs.1.ark").keys()


def dump_ranks(keys):
    """Each eg's place in dump order (utterance by utterance, then by first frame), in ``keys``' order."""
    dump = sorted(keys, key=lambda k: (k.rsplit("-", 1)[0], int(k.rsplit("-", 1)[1])))
    rank = {k: i for i, k in enumerate(dump)}
    return [rank[k] for k in keys]


def test_archives_are_shuffled_across_utterances(tmp_path):
    """Archive k is its egs in dump order permuted with seed k + srand (nnet3-shuffle-egs --srand):
    in no archive that order, nor one near it or its reverse; the same for the same srand, another
    for another srand."""
    _, egs_dir, _ = run_lib(tmp_path, n_utts=40)
    keys = archives(egs_dir)[0].keys()
    utts = [k.rsplit("-", 1)[0] for k in keys]
    assert utts != sorted(utts)
    for archive in archives(egs_dir):
        ranks = dump_ranks(archive.keys())
        assert ranks != sorted(ranks) and ranks != sorted(ranks, reverse=True), archive.path
    # One archive of 37 x 3 egs whatever the srand (40 utterances of 12 frames, 3 of them valid):
    # only the shuffle tells two srands' archives apart.
    data = write_data(tmp_path / "even", [12] * 40)
    orders = {}
    for name, srand in (("a", 0), ("b", 0), ("c", 5)):
        (archive,) = archives(run_lib(tmp_path, data=data, name=name, srand=srand, samples_per_iter=1000)[1])
        orders[name] = dump_ranks(archive.keys())
        assert sorted(orders[name]) == list(range(111))
        assert abs(np.corrcoef(orders[name], np.arange(111))[0, 1]) < 0.3, name   # unrelated to dump order
    assert orders["a"] == orders["b"]
    assert orders["a"] != orders["c"]


def test_images_one_frame_utterances(tmp_path):
    feats, targets, fs, ts = write_data(tmp_path / "data", [1] * 40, dim=4, num_classes=3)
    _, egs_dir, info = run_lib(tmp_path, data=(feats, targets, fs, ts), frames_per_eg=1, left_context=0,
                               right_context=0, num_utts_subset=2, samples_per_iter=10)
    assert info["num_archives"] == 36 // 10 + 1
    got = {}
    for a in archives(egs_dir):
        for i, key in enumerate(a.keys()):
            got[key] = (a.inputs[i, 0].copy(), int(a.labels[i, 0]))
    valid = read_list(egs_dir / "valid_uttlist")
    assert sorted(got) == sorted(f"{u}-0" for u in feats if u not in valid)
    for key, (x, y) in got.items():
        assert np.array_equal(x, feats[key[:-2]][0]) and y == targets[key[:-2]][0]


def test_length_tolerance(tmp_path):
    n = [10] * 30
    # utt000: 2 targets short (within Kaldi's default tolerance 2); utt001: 3 short (beyond it);
    # utt002: 1 target too many (the extra one is ignored).
    data = write_data(tmp_path / "data", n, targets_len={0: 8, 1: 7, 2: 11})
    feats, targets, *_ = data
    _, egs_dir, _ = run_lib(tmp_path, data=data, num_utts_subset=1, srand=3)
    valid = read_list(egs_dir / "valid_uttlist")
    assert not {"utt000", "utt001", "utt002"} & set(valid)  # srand chosen so that they are trained on
    seen = set()
    for a in archives(egs_dir):
        seen.update(check_egs(a, feats, targets, 2, 3))
    assert {t for u, t in seen if u == "utt000"} == set(range(8))
    assert not any(u == "utt001" for u, _ in seen)
    assert {t for u, t in seen if u == "utt002"} == set(range(10))


def test_memory_is_one_archive_not_the_data(tmp_path, monkeypatch):
    """Egs go to disk through a bounded buffer and archives are loaded one at a time: peak Python
    memory stays far below the total size of the egs written."""
    data = write_data(tmp_path / "data", [100] * 120, dim=40)
    monkeypatch.setattr(ge, "SPOOL_BUFFER_BYTES", 64 << 10)
    opts = dict(frames_per_eg=8, left_context=4, right_context=4, samples_per_iter=50)
    run_lib(tmp_path, name="warm-up", data=write_data(tmp_path / "warm", lengths(30)), **opts)  # lazy imports
    tracemalloc.start()
    try:
        _, egs_dir, info = run_lib(tmp_path, data=data, **opts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    total = sum(a.inputs.nbytes for a in archives(egs_dir))
    assert info["num_archives"] >= 10
    assert total > 3 << 20
    assert peak < total / 4, (peak, total)


def test_a_failed_run_leaves_no_temp_dir_and_an_earlier_egs_dir_whole(tmp_path):
    """The earlier run's info/num_archives goes only when its first file is replaced: it once went
    before any features were read, and a failed run left a whole egs dir unusable."""
    good, bad = write_data(tmp_path / "good", [10] * 30), write_data(tmp_path / "bad", [10] * 30, dims={20: 4})
    egs_dir = tmp_path / "egs"
    ge.get_egs(good[2], good[3], str(egs_dir), ge.EgsOptions(**SMALL))
    before = {p: p.read_bytes() for p in egs_dir.rglob("*") if p.is_file()}
    with pytest.raises(NnetError, match="utt020.*feature dim 4 differs from 3"):
        ge.get_egs(bad[2], bad[3], str(egs_dir), ge.EgsOptions(**SMALL))
    assert {p: p.read_bytes() for p in egs_dir.rglob("*") if p.is_file()} == before


def test_non_finite_features_are_an_error_or_skipped(tmp_path):
    feats, targets, fs, ts = write_data(tmp_path / "data", [10] * 30)
    feats["utt007"][4, 1], feats["utt012"][0, 0] = np.nan, -np.inf
    with MatrixWriter(f"ark,scp:{tmp_path}/bad.ark,{tmp_path}/bad.scp") as w:
        for key, m in feats.items():
            w.write(key, m)
    with pytest.raises(NnetError, match=r"bad.scp: utterance 'utt007': 1 of 10 frames have NaN or infinite "
                                        r"features \(first: frame 4\).*--allow-nonfinite"):
        ge.get_egs(f"scp:{tmp_path}/bad.scp", ts, str(tmp_path / "egs"), ge.EgsOptions(**SMALL))
    assert not (tmp_path / "egs").exists()      # the dir it made goes: nothing half-written, no spool
    info = ge.get_egs(f"scp:{tmp_path}/bad.scp", ts, str(tmp_path / "egs"),
                      ge.EgsOptions(**SMALL, allow_nonfinite=True))
    keys = {k.rsplit("-", 1)[0] for a in archives(tmp_path / "egs") for k in a.keys()}
    assert not keys & {"utt007", "utt012"} and all(np.isfinite(a.inputs).all() for a in archives(tmp_path / "egs"))
    assert info["num_frames"] < 300


def test_option_checks(tmp_path):
    data = write_data(tmp_path / "data", [5] * 12)
    for bad, match in ((dict(frames_per_eg=0), "--frames-per-eg"), (dict(left_context=-1), "--left-context"),
                       (dict(num_utts_subset=3), "only 12 utterances.*--num-utts-subset")):
        with pytest.raises(NnetError, match=match):
            ge.get_egs(data[2], data[3], str(tmp_path / "egs"), ge.EgsOptions(**{**SMALL, **bad}))
    with pytest.raises(NnetError, match="cannot come from stdin"):
        ge.get_egs(data[2], "ark:-", str(tmp_path / "egs"), ge.EgsOptions(**SMALL))
    with pytest.raises(NnetError, match="no examples"):  # 2 frames < 4 per eg: no diagnostic egs asked
        ge.get_egs(data[2], data[3], str(tmp_path / "egs"), ge.EgsOptions(**{**SMALL, "num_utts_subset": 2,
                                                                              "num_frames_diagnostic": 2}))


def test_cut_utterance_pads_last_chunk():
    feats = np.arange(10, dtype=np.float32).reshape(5, 2)
    inputs, labels, t0 = ge.cut_utterance(feats, np.arange(5, dtype=np.int32), ge.EgsOptions(frames_per_eg=3,
                                                                                            left_context=1, right_context=2))
    assert t0.tolist() == [0, 3]
    assert labels.tolist() == [[0, 1, 2], [3, 4, -1]]
    assert inputs[:, :, 0].tolist() == [[0, 0, 2, 4, 6, 8], [4, 6, 8, 8, 8, 8]]


# ---- the program ----------------------------------------------------------------------------

def nnet_get_egs(cwd, *args):
    return subprocess.run(["nnet-get-egs", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=120)




CLI_SMALL = ["--frames-per-eg", 4, "--num-utts-subset", 3, "--samples-per-iter", 30,
             "--num-frames-diagnostic", 20]


def test_program_writes_egs_dir_and_logs(tmp_path):
    _, _, fs, ts = write_data(tmp_path, lengths(30), skip_targets={4, 9})
    r = nnet_get_egs(tmp_path, *CLI_SMALL, "--srand", 2, fs, ts, "exp/egs")
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("nnet-get-egs --frames-per-eg 4")
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert any("No targets for key utt004" in w for w in warnings)
    assert any("No targets for key utt009" in w for w in warnings)
    assert "successfully processed 28 feature files" in r.stderr and "; 2 files had errors." in r.stderr
    num = int((tmp_path / "exp/egs/info/num_archives").read_text())
    assert f"Wrote {num} archives" in r.stderr
    keys = {k.rsplit("-", 1)[0] for k in range(1, num + 1) for k in EgsArchive(tmp_path / f"exp/egs/egs.{k}.ark").keys()}
    assert not keys & {"utt004", "utt009"}


def test_program_bad_inputs(tmp_path):
    _, _, fs, ts = write_data(tmp_path, lengths(30), num_classes=7)
    missing = error_line(nnet_get_egs(tmp_path, *CLI_SMALL, "scp:nope.scp", ts, "egs"))
    assert "nope.scp" in missing
    too_big = error_line(nnet_get_egs(tmp_path, *CLI_SMALL, "--num-targets", 3, fs, ts, "egs"))
    assert "targets.ark" in too_big and "utterance 'utt" in too_big and ">= --num-targets 3" in too_big
    (tmp_path / "empty.ark").write_bytes(b"")
    empty = error_line(nnet_get_egs(tmp_path, *CLI_SMALL, fs, "ark:empty.ark", "egs"))
    assert "no utterances with targets" in empty
    few = error_line(nnet_get_egs(tmp_path, *CLI_SMALL, "--num-utts-subset", 10, fs, ts, "egs"))
    assert "--num-utts-subset" in few
    assert not (tmp_path / "egs" / "info" / "num_archives").exists()


def test_program_no_matching_features(tmp_path):
    _, _, _, ts = write_data(tmp_path / "a", lengths(30))
    other_feats = tmp_path / "b"
    other_feats.mkdir()
    with MatrixWriter(f"ark,scp:{other_feats}/f.ark,{other_feats}/f.scp") as w:
        w.write("someone-else", np.zeros((5, 3), np.float32))
    r = nnet_get_egs(tmp_path, *CLI_SMALL, f"scp:{other_feats}/f.scp", ts, "egs")
    assert "no training examples" in error_line(r)
    assert "No targets for key someone-else" in r.stderr
    assert not (tmp_path / "egs").exists()  # the dir it made goes, not even an empty info/ stays


# ---- CMVN ------------------------------------------------------------------------------------

def speaker_normalised(feats, utt2spk, norm_vars=False):
    out = {}
    for spk in set(utt2spk.values()):
        allf = np.concatenate([feats[u] for u in feats if utt2spk[u] == spk])
        for u in feats:
            if utt2spk[u] == spk:
                out[u] = ((feats[u] - allf.mean(0)) / (allf.std(0) if norm_vars else 1)).astype(np.float32)
    return out


def test_egs_hold_per_speaker_normalised_features(tmp_path):
    from nnet_tools.data import cmvn
    feats, targets, fs, ts = write_data(tmp_path / "data", lengths(30))
    for i, u in enumerate(sorted(feats)):  # speakers far apart: unnormalised egs could not pass
        feats[u] += 50.0 * (i % 3)
    with MatrixWriter(f"ark,scp:{tmp_path}/data/feats.ark,{tmp_path}/data/feats.scp") as w:
        for u in sorted(feats):
            w.write(u, feats[u])
    utt2spk = write_cmvn(tmp_path / "data", feats)
    with cmvn.CmvnApplier.from_data_dir(tmp_path / "data", norm_vars=True) as applier:
        info = ge.get_egs(fs, ts, str(tmp_path / "egs"), ge.EgsOptions(**SMALL), applier)
    assert info["cmvn_opts"] == "--norm-means=true --norm-vars=true"
    assert (tmp_path / "egs" / "cmvn_opts").read_text() == (tmp_path / "egs" / "info" / "cmvn_opts").read_text() \
        == "--norm-means=true --norm-vars=true\n"
    want = speaker_normalised(feats, utt2spk, norm_vars=True)
    for archive in archives(tmp_path / "egs"):
        for i, key in enumerate(archive.keys()):
            utt, t0 = key.rsplit("-", 1)
            window = archive.windows([i], 0, SMALL["left_context"], SMALL["right_context"])[0].numpy()
            expect = frame_windows(torch.from_numpy(want[utt]), SMALL["left_context"], SMALL["right_context"])[int(t0)]
            np.testing.assert_allclose(window, expect.numpy(), atol=1e-4)  # Kaldi applies in float


def test_get_egs_sh_applies_cmvn_when_the_data_dir_has_it(tmp_path):
    d = tmp_path / "data"
    feats, targets = write_data_dir(d, lengths(30))
    steps = os.path.join(os.path.dirname(__file__), "..", "steps", "get_egs.sh")
    small = ["--frames-per-eg", "4", "--num-utts-subset", "3", "--samples-per-iter", "30"]

    def get_egs_sh(*options):
        r = subprocess.run([steps, *small, *options, str(d), str(tmp_path / "egs")], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return (tmp_path / "egs" / "info" / "cmvn_opts").read_text().strip()

    assert get_egs_sh() == "--norm-means=false"  # no cmvn.scp: nothing to apply
    utt2spk = write_cmvn(d, feats)
    assert get_egs_sh("--cmvn-opts", "--norm-vars=true") == "--norm-means=true --norm-vars=true"
    archive = EgsArchive(tmp_path / "egs" / "egs.1.ark")
    utt, t0 = archive.keys()[0].rsplit("-", 1)
    normed = speaker_normalised(feats, utt2spk, norm_vars=True)[utt]
    np.testing.assert_allclose(archive.windows([0], 0, 4, 4)[0][4].numpy(), normed[int(t0)], atol=1e-5)
    assert get_egs_sh("--apply-cmvn", "false") == "--norm-means=false"


def test_compute_and_compute_prob_apply_the_same_cmvn(tmp_path, small_model):
    from helpers import run
    from nnet_tools.data import cmvn
    from nnet_tools.data.tables import read_matrices
    from nnet_tools.model import model_io
    from nnet_tools.evaluate import compute
    d = tmp_path / "data"
    feats, targets, fs, ts = write_data(d, lengths(8, low=3, high=9), dim=6, num_classes=4)
    utt2spk = write_cmvn(d, feats, num_speakers=2)
    normed = speaker_normalised(feats, utt2spk)
    with MatrixWriter(f"ark:{tmp_path}/normed.ark") as w:
        for u in sorted(normed):
            w.write(u, normed[u])
    mdl = tmp_path / "random.mdl"  # the initial output layer is zero: every input would look alike
    net = model_io.load(small_model[1])
    torch.nn.init.normal_(net.layers[-1].affine.weight)
    model_io.save(net, mdl)
    cmvn_args = ["--cmvn", f"scp:{d}/cmvn.scp", "--utt2spk", f"{d}/utt2spk"]
    run("nnet-compute", *cmvn_args, mdl, fs, f"ark:{tmp_path}/a.ark", check=True)
    for u, out in read_matrices(f"ark:{tmp_path}/a.ark"):
        np.testing.assert_allclose(out, compute.log_posteriors(net, normed[u]), atol=1e-4)
        assert not np.allclose(out, compute.log_posteriors(net, feats[u]), atol=1e-3)
    with_cmvn = run("nnet-compute-prob", *cmvn_args, mdl, fs, ts, check=True).stderr
    stats = compute.utterance_stats(net, f"ark:{tmp_path}/normed.ark", ts)
    assert f"Overall log-likelihood for 'output' is {stats.objf / stats.frames:.6g} per frame" in with_cmvn
    with pytest.raises(NnetError, match="given without --cmvn"):
        cmvn.applier_for(None, f"{d}/utt2spk")
