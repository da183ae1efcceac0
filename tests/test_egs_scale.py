"""Egs at scale: parallel dumping (get_egs.sh --nj), compressed archives, chunked writing."""
import json
import os
import subprocess

import numpy as np
import pytest

from helpers import SMALL, archives, error_line, lengths, run, split_scp, write_cmvn, write_data, write_data_dir
from nnet_tools.data import egs as egs_mod
from nnet_tools.data import get_egs as ge
from nnet_tools.data.egs import EgsArchive
from nnet_tools.errors import NnetError

STEPS = os.path.join(os.path.dirname(__file__), "..", "steps", "get_egs.sh")


def all_egs(egs_dir):
    """Every training eg of an egs dir as sorted (key, labels, input bytes) rows."""
    rows = []
    for a in archives(egs_dir):
        for i, key in enumerate(a.keys()):
            rows.append((key, a.labels[i].tobytes(), np.asarray(a.inputs[i]).tobytes(),
                         None if a.ranges is None else a.ranges[i].tobytes()))
    return sorted(rows)


def same_files(a, b, names):
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_parallel_jobs_give_the_one_process_egs(tmp_path):
    feats, targets, fs, ts = write_data(tmp_path / "data", lengths(40))
    opts = dict(SMALL, num_valid_frames_combine=8)
    one = tmp_path / "one"
    ge.get_egs(fs, ts, str(one), ge.EgsOptions(**opts))
    par = tmp_path / "par"
    scps = split_scp(tmp_path / "data" / "feats.scp", 3, tmp_path)
    for j in (3, 1, 2):   # jobs are independent: any order
        ge.dump_job(f"scp:{scps[j - 1]}", ts, str(par), ge.EgsOptions(**opts), j, 3)
    num_archives = int((par / "orig" / "num_archives").read_text())
    assert num_archives == int((one / "info" / "num_archives").read_text()) > 2
    for k in range(num_archives, 1, -1):
        ge.merge_archive(str(par), k)
    with pytest.raises(NnetError, match=r"archives \[1\] not merged yet"):
        ge.finish(str(par))
    ge.merge_archive(str(par), 1)
    ge.merge_archive(str(par), 1)   # run again (a retry of a task the queue thought lost): a no-op
    ge.finish(str(par))
    assert not (par / "orig").exists()
    before = {p.name: p.stat().st_mtime_ns for p in par.rglob("*")}
    ge.finish(str(par))             # likewise
    assert {p.name: p.stat().st_mtime_ns for p in par.rglob("*")} == before
    assert all_egs(par) == all_egs(one)   # the same egs multiset, exactly
    # archives differ (other scatter seeds), as Kaldi's do with another --nj
    assert [len(a.keys()) for a in archives(par)] != [len(a.keys()) for a in archives(one)]
    same_files(par, one, ["valid_diagnostic.egs", "train_diagnostic.egs", "combine.egs", "valid_uttlist",
                          "train_subset_uttlist", "cmvn_opts"] + [f"info/{f}" for f in os.listdir(one / "info")])


def test_merge_and_finish_refuse_incomplete_jobs(tmp_path):
    _, _, fs, ts = write_data(tmp_path / "data", lengths(30))
    scps = split_scp(tmp_path / "data" / "feats.scp", 2, tmp_path)
    egs_dir = tmp_path / "egs"
    ge.dump_job(f"scp:{scps[0]}", ts, str(egs_dir), ge.EgsOptions(**SMALL), 1, 2)
    line = error_line(run("nnet-merge-egs", egs_dir, 1))
    assert f"{egs_dir}/orig: dump jobs [2] did not finish" in line
    ge.dump_job(f"scp:{scps[1]}", ts, str(egs_dir), ge.EgsOptions(**dict(SMALL, srand=5)), 2, 2)
    with pytest.raises(NnetError, match="job.2.json: options differs from job 1's"):
        ge.merge_archive(str(egs_dir), 1)
    ge.dump_job(f"scp:{scps[0]}", ts, str(egs_dir), ge.EgsOptions(**SMALL), 2, 2)   # job 1's split again
    with pytest.raises(NnetError, match=r"job.2.json: utterance '\w+' was dumped by job 1 too"):
        ge.merge_archive(str(egs_dir), 1)   # every eg would be in twice
    ge.dump_job(f"scp:{scps[1]}", ts, str(egs_dir), ge.EgsOptions(**SMALL), 2, 2)   # re-run: no stale pieces
    line = error_line(run("nnet-merge-egs", egs_dir, 99))
    assert "archive 99 is not in 1.." in line
    assert run("nnet-merge-egs", egs_dir).returncode == 1   # neither ARCHIVE nor --finish
    with pytest.raises(NnetError, match="--job 3 is not in 1..--num-jobs 2"):
        ge.dump_job(f"scp:{scps[1]}", ts, str(egs_dir), ge.EgsOptions(**SMALL), 3, 2)
    num_archives = int((egs_dir / "orig" / "num_archives").read_text())
    for k in range(1, num_archives + 1):
        ge.merge_archive(str(egs_dir), k)
    (egs_dir / "egs.2.ark").unlink()   # its pieces are gone: --finish must not write info/ over the hole
    with pytest.raises(NnetError, match=r"egs.2.ark: merged, then removed; run the dump jobs again"):
        ge.finish(str(egs_dir))
    assert not (egs_dir / "info" / "num_archives").exists()


def get_egs_sh(data, egs_dir, *options):
    small = ["--frames-per-eg", "4", "--num-utts-subset", "3", "--samples-per-iter", "30"]
    r = subprocess.run([STEPS, *small, *options, str(data), str(egs_dir)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def test_get_egs_sh_nj_compressed_equals_nj_1(tmp_path):
    d = tmp_path / "data"
    feats, _ = write_data_dir(d, lengths(30))
    write_cmvn(d, feats)   # every dump job reads the whole cmvn.scp and utt2spk
    get_egs_sh(d, tmp_path / "one", "--compress", "true")
    get_egs_sh(d, tmp_path / "two", "--compress", "true", "--nj", "2")
    assert all_egs(tmp_path / "two") == all_egs(tmp_path / "one")
    assert (tmp_path / "two" / "cmvn_opts").read_text() == "--norm-means=true --norm-vars=false\n"
    assert EgsArchive(tmp_path / "two" / "egs.1.ark").compress == "two-byte"
    logs = sorted(os.listdir(tmp_path / "two" / "log"))
    assert {"get_egs.1.log", "get_egs.2.log", "shuffle.1.log", "finish.log"} <= set(logs), logs
    assert not (tmp_path / "two" / "split2").exists() and not (tmp_path / "two" / "orig").exists()
    r = subprocess.run([STEPS, "--nj", "x", str(d), str(tmp_path / "bad")], capture_output=True, text=True)
    assert r.returncode == 1 and "--nj must be a positive integer" in r.stderr


# --- compression ------------------------------------------------------------------------------

def test_two_byte_round_trip_is_within_half_a_step(tmp_path):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(200, 7, 5)) * [1, 10, 100, 0.01, 3] + [0, 5, -50, 0, 1e3]).astype(np.float32)
    x[3] = 2.5                       # constant eg
    x[4, 0, 0] = 1e4                 # one outlier widens only its own eg's range
    labels = rng.integers(0, 4, (200, 3)).astype(np.int32)
    keys = [f"u-{i}" for i in range(200)]
    egs_mod.write_archive(tmp_path / "f.ark", x, labels, keys, 2, 2)
    egs_mod.write_archive(tmp_path / "c.ark", x, labels, keys, 2, 2, compress=True)
    plain, comp = EgsArchive(tmp_path / "f.ark"), EgsArchive(tmp_path / "c.ark")
    assert (comp.keys(), comp.labels.tolist()) == (keys, labels.tolist())
    assert comp.inputs.dtype == np.uint16 and 2 * comp.inputs.nbytes == plain.inputs.nbytes == x.nbytes
    saved = os.path.getsize(tmp_path / "f.ark") - os.path.getsize(tmp_path / "c.ark")
    assert x.nbytes / 2 - 8 * 200 - 64 <= saved <= x.nbytes / 2 - 8 * 200 + 64   # 2 bytes a value, 8 an eg
    got = comp.rows(np.arange(200))
    lo, span = comp.ranges[:, 0][:, None, None], comp.ranges[:, 1][:, None, None]
    err = np.abs(got - x)
    # Kaldi's kTwoByte promise: half a quantisation step (its +0.499 rounding), plus float32 rounding
    assert (err <= span / 65535 * 0.501 + 4 * np.finfo(np.float32).eps * (np.abs(lo) + span)).all()
    assert (err / (span / 65535)).max() > 0.45   # the bound is tight: quantisation happened
    assert (got[3] == 2.5).all() and err[5].max() < 1e-2 < err[4].max()
    w = comp.windows([7, 1], 1, 1, 1)
    assert w.dtype.is_floating_point and np.allclose(w.numpy(), plain.windows([7, 1], 1, 1, 1).numpy(),
                                                     atol=float(span.max()) / 65535)


def test_values_whose_range_float32_cannot_hold_are_not_compressed(tmp_path):
    """Finite features 3e38 apart once gave a range of inf, decoded as NaN, with exit status 0."""
    x = np.zeros((2, 3, 4), np.float32)
    x[1, 0, 0], x[1, 2, 3] = 3e38, -3e38
    with pytest.raises(NnetError, match=r"c.ark: an eg's values span 6e\+38, more than float32 holds.*'u-0' on"):
        egs_mod.write_archive(tmp_path / "c.ark", x, np.zeros((2, 1), np.int32), ["u-0", "u-1"], 1, 1, compress=True)
    assert os.listdir(tmp_path) == []


def test_archives_without_compression_field_still_read(tmp_path):
    """An archive as written before compression existed: the header has no 'compress' field."""
    x = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    labels = np.array([[1], [2]], np.int32)
    header = {"num_egs": 2, "frames_per_eg": 1, "left_context": 1, "right_context": 1, "feat_dim": 2,
              "inputs_offset": 1024, "labels_offset": 1088, "keys_offset": 1152, "keys_bytes": 7}
    blob = bytearray(1159)
    h = json.dumps(header).encode().ljust(1024 - 16)
    blob[:1024] = b"NNETEGS1" + len(h).to_bytes(8, "little") + h
    blob[1024:1024 + x.nbytes] = x.tobytes()
    blob[1088:1096] = labels.tobytes()
    blob[1152:] = b"a-0\nb-0"
    (tmp_path / "old.ark").write_bytes(bytes(blob))
    a = EgsArchive(tmp_path / "old.ark")
    assert a.compress is None and a.keys() == ["a-0", "b-0"]
    assert np.array_equal(a.windows([1, 0], 0, 1, 1).numpy(), x[[1, 0]])
    # and the writer still writes exactly that layout when not compressing
    egs_mod.write_archive(tmp_path / "new.ark", x, labels, ["a-0", "b-0"], 1, 1)
    assert (tmp_path / "new.ark").read_bytes() == bytes(blob)


def test_archives_are_written_in_chunks_to_the_same_bytes(tmp_path, monkeypatch):
    _, _, fs, ts = write_data(tmp_path / "data", lengths(30))
    ge.get_egs(fs, ts, str(tmp_path / "big"), ge.EgsOptions(**SMALL, compress=True))
    monkeypatch.setattr(ge, "WRITE_CHUNK_BYTES", 1)   # one eg at a time
    ge.get_egs(fs, ts, str(tmp_path / "small"), ge.EgsOptions(**SMALL, compress=True))
    names = [f for f in os.listdir(tmp_path / "big") if f.endswith((".ark", ".egs"))]
    assert len(names) > 3
    same_files(tmp_path / "small", tmp_path / "big", names)


def test_a_job_trains_on_compressed_egs_as_on_float32(tmp_path, small_model):
    from helpers import write_egs_dir
    from nnet_tools.model import model_io
    from nnet_tools.train import job as train
    write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=600)
    plain = EgsArchive(tmp_path / "egs" / "egs.1.ark")
    egs_mod.write_archive(tmp_path / "c.ark", np.asarray(plain.inputs), np.asarray(plain.labels), plain.keys(),
                          1, 1, compress=True)
    results = []
    for archive in (plain, EgsArchive(tmp_path / "c.ark")):
        model = model_io.load(small_model[1])
        objf, frames = train.train_one_job(model, archive, train.TrainOptions(learning_rate=0.01, minibatch_size="64"))
        results.append((objf, frames, model.state_dict()))
    (o1, f1, s1), (o2, f2, s2) = results
    assert f1 == f2 and abs(o1 - o2) < 1e-3 * abs(o1)   # decoding error ~1e-5 of the inputs' range
    assert all(np.allclose(s1[k], s2[k], rtol=1e-4, atol=1e-3) for k in s1)   # rtol: the statistics' sums
    assert any(not np.array_equal(s1[k], s2[k]) for k in s1)   # it did read the codes, not the floats
