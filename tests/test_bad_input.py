"""Inputs no other test feeds the programs (found by trying them on broken data): each is one
NnetError line naming what is wrong, never a traceback, a crash or a NaN model written."""
import json
import math
import os
import threading
import warnings

import numpy as np
import pytest
import torch

from helpers import REPO, SMALL_CONFIG, error_line, nan_archive, run, write_egs_dir
from nnet_tools import device, fileio
from nnet_tools.cli.average_models import parse_weights
from nnet_tools.data import egs, tables
from nnet_tools.errors import NnetError
from nnet_tools.model import config, model_io, partition
from nnet_tools.model.nnet import Nnet
from nnet_tools.train import average, job


def test_a_fifo_is_written_in_place_and_a_link_through_to_its_target(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    fileio.write_text(fifo, "through the pipe")
    reader.join(10)
    assert got == ["through the pipe"] and fifo.is_fifo()   # not replaced by a regular file
    (tmp_path / "link").symlink_to("target")
    fileio.write_text(tmp_path / "link", "x")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "target").read_text() == "x"


def test_an_output_that_is_a_directory_or_under_a_file_fails_before_anything_is_written(tmp_path):
    (tmp_path / "sub").mkdir()
    with pytest.raises(NnetError, match=r"sub: cannot write: is a directory"):
        tables.MatrixWriter(f"ark,scp:{tmp_path}/o.ark,{tmp_path}/sub")
    (tmp_path / "file").write_text("")
    with pytest.raises(NnetError, match=r"file/o.ark: write failed: Not a directory"):
        tables.MatrixWriter(f"ark:{tmp_path}/file/o.ark")
    assert sorted(os.listdir(tmp_path)) == ["file", "sub"] and not os.listdir(tmp_path / "sub")


def test_ark_and_scp_the_same_file_or_a_lookup_in_a_cut_archive(tmp_path):
    with pytest.raises(NnetError, match="the archive and the scp are the same file"):
        tables.MatrixWriter(f"ark,scp:{tmp_path}/same,{tmp_path}/./same")
    with tables.IntVectorWriter(f"ark:{tmp_path}/ali.ark") as w:
        for i in range(20):
            w.write(f"u{i:02d}", np.arange(100, dtype=np.int32))
    (tmp_path / "cut.ark").write_bytes((tmp_path / "ali.ark").read_bytes()[:3000])
    with tables.RandomAccessIntVectors(f"ark:{tmp_path}/cut.ark") as alis:
        assert "u00" in alis   # before the cut
        with pytest.raises(NnetError, match=r"cut.ark: .*read error .* at archive entry beginning at file position"):
            "u10" in alis      # Kaldi only warns and answers 'not there'


@pytest.mark.parametrize("weights", [[math.nan, 1.0], [math.inf, 1.0], [1e308, 1e308]])
def test_average_weights_must_be_finite(weights):
    with pytest.raises(NnetError, match="finite non-negative weights"):
        average.normalized_weights(weights, 2)


def test_average_weights_that_are_not_numbers():
    with pytest.raises(NnetError, match=r"--weights: expected colon-separated numbers .*'1::2'"):
        parse_weights("1::2")


SPLIT_CONFIG = {"input-dim": 6, "layers": [{"name": "h", "type": "relu", "dim": 8},
                                            {"name": "output", "type": "output", "dim": 4}]}


def test_merge_refuses_a_nan_sub_model_and_non_finite_options(tmp_path):
    partition.split_to_dir(config.normalize(SPLIT_CONFIG), 2, tmp_path)
    subs = [str(tmp_path / f"sub.{j}.mdl") for j in (1, 2)]
    with pytest.raises(NnetError, match="noise-fraction must be finite"):
        partition.merge_files(subs, tmp_path / "m.mdl", noise_fraction=math.nan)
    with pytest.raises(NnetError, match="output-scale must be finite"):
        partition.merge_files(subs, tmp_path / "m.mdl", output_scale=math.inf)
    model = model_io.load(subs[0])
    with torch.no_grad():
        model.layers[0].affine.weight[0, 0] = math.nan
    model_io.save(model, subs[0])
    with pytest.raises(NnetError, match=r"sub.1.mdl: non-finite values .*layers.0.affine.weight; refusing to merge"):
        partition.merge_files(subs, tmp_path / "m.mdl")
    assert not (tmp_path / "m.mdl").exists()


def test_a_failed_split_leaves_the_earlier_set_whole(tmp_path, monkeypatch):
    cfg = config.normalize(SPLIT_CONFIG)
    partition.split_to_dir(cfg, 2, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    saved, real_save = [], model_io.save

    def save_then_fail(model, path):  # the second sub-model's write fails
        if saved:
            raise NnetError(f"No space left on device: {path}")
        saved.append(path)
        real_save(model, path)
    monkeypatch.setattr(model_io, "save", save_then_fail)
    with pytest.raises(NnetError, match="No space left"):
        partition.split_to_dir(cfg, 2, tmp_path, srand=7)
    assert saved and {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_absurd_thread_counts_are_refused():
    for n in (-1, 100000):
        with pytest.raises(NnetError, match="--num-threads must be 0"):
            device.set_threads(n)


@pytest.mark.parametrize("option,message", [
    ("rank-in: -1", "rank-in must be a positive integer"), ("rank-out: 2.5", "rank-out must be a positive integer"),
    ("update-period: 0", "update-period must be a positive integer"), ("alpha: -1", "alpha must be a number >= 0"),
    ("num-samples-history: 0", r"num-samples-history must be a number in \(0"),
    ("param-stddev: .inf", "param-stddev must be a number >= 0"), ("max-change: .inf", "max-change must be")])
def test_layer_options_out_of_range(tmp_path, option, message):
    path = tmp_path / "m.yaml"
    path.write_text(f"input-dim: 6\nlayers:\n  - {{name: h, type: relu, dim: 8, {option}}}\n"
                    "  - {name: output, type: output, dim: 4}\n")
    with pytest.raises(NnetError, match=f"m.yaml: layer 1 \\(h\\): {message}"):
        config.load(path)


def test_add_deltas_option_bounds_and_an_empty_utterance(tmp_path):
    x = np.arange(20, dtype=np.float32).reshape(5, 4) ** 2
    with tables.MatrixWriter(f"ark:{tmp_path}/f.ark") as w:
        w.write("empty", np.zeros((0, 4), np.float32))
        w.write("u1", x)
    assert "--delta-window must be in (0, 1000), got 0" in error_line(
        run("nnet-add-deltas", "--delta-window", 0, f"ark:{tmp_path}/f.ark", f"ark:{tmp_path}/d.ark"))
    r = run("nnet-add-deltas", "--delta-order", 1, "--delta-window", 1, f"ark:{tmp_path}/f.ark",
            f"ark:{tmp_path}/d.ark", check=True)
    assert "Empty feature matrix for utterance empty" in r.stderr   # Kaldi's warning; skipped
    (key, d), = tables.read_matrices(f"ark:{tmp_path}/d.ark")
    padded = np.concatenate([x[:1], x, x[-1:]])                      # edge frames replicated
    assert key == "u1" and np.allclose(d, np.hstack([x, (padded[2:] - padded[:-2]) / 2]))


def test_text_inputs_that_are_not_utf8_name_the_file(tmp_path):
    (tmp_path / "m.yaml").write_bytes(b"\xff\xfe input-dim: 6\n")
    with pytest.raises(NnetError, match=r"m.yaml: model config is not UTF-8 text \(byte 0xff at offset 0\)"):
        config.load(tmp_path / "m.yaml")
    with tables.MatrixWriter(f"ark,scp:{tmp_path}/f.ark,{tmp_path}/f.scp") as w:
        w.write("a", np.zeros((2, 3), np.float32))
    line = (tmp_path / "f.scp").read_bytes()
    (tmp_path / "f.scp").write_bytes(line + b"\xff\xfe " + line.split(b" ", 1)[1])
    with pytest.raises(NnetError, match=r"the key after 'a' is not UTF-8 text \(byte 0xff\)"):
        list(tables.read_matrices(f"scp:{tmp_path}/f.scp"))


def corrupt_header(path, **fields):
    """Rewrite fields of an egs archive's JSON header in place (padded to its length)."""
    with open(path, "r+b") as f:
        f.seek(8)
        hlen = int.from_bytes(f.read(8), "little")
        h = json.loads(f.read(hlen))
        h.update(fields)
        text = json.dumps(h).encode()
        assert len(text) <= hlen
        f.seek(16)
        f.write(text.ljust(hlen))


@pytest.mark.parametrize("fields,message", [
    ({"feat_dim": None}, "header field feat_dim is None"), ({"num_egs": -5}, "header field num_egs is -5"),
    ({"frames_per_eg": 0}, "header field frames_per_eg is 0"), ({"feat_dim": "6"}, "header field feat_dim is '6'"),
    ({"num_egs": 10 ** 9}, "mmap length")])
def test_a_corrupt_egs_header_is_one_line(tmp_path, fields, message):
    rng = np.random.default_rng(0)
    path = tmp_path / "egs.1.ark"
    egs.write_archive(path, rng.normal(size=(8, 4, 6)).astype(np.float32),
                      rng.integers(0, 4, (8, 2)).astype(np.int32), [f"u{i}" for i in range(8)], 1, 1)
    corrupt_header(path, **fields)
    with pytest.raises(NnetError, match=f"egs.1.ark: corrupt egs archive: {message}"):
        egs.EgsArchive(path)


def test_a_label_below_minus_one_is_a_corrupt_archive(tmp_path):
    path = tmp_path / "egs.1.ark"
    labels = np.zeros((4, 2), np.int32)
    labels[2, 1] = -3
    egs.write_archive(path, np.zeros((4, 4, 6), np.float32), labels, [f"u{i}" for i in range(4)], 1, 1)
    (tmp_path / "m.yaml").write_text(SMALL_CONFIG)
    model = Nnet(config.load(tmp_path / "m.yaml"))
    with pytest.raises(NnetError, match="target id -3 < 0"):
        egs.EgsArchive(path).check_model(model)


@pytest.mark.parametrize("option,value,message", [
    ("learning_rate", math.nan, "--learning-rate must be finite"), ("momentum", 1.0, r"--momentum must be in \[0, 1\)"),
    ("max_param_change", -1.0, "--max-param-change must be finite"), ("srand", -1, "--srand must be in"),
    ("print_interval", 0, "--print-interval must be >= 1"), ("shuffle_buffer_size", -1, "--shuffle-buffer-size")])
def test_training_options_out_of_range(option, value, message):
    opts = job.TrainOptions(**{"learning_rate": 0.001, option: value})
    with pytest.raises(NnetError, match=message):
        opts.check()


def test_a_model_file_without_its_parameters(tmp_path):
    torch.save({"format": model_io.FORMAT, "version": model_io.VERSION, "config": {}}, tmp_path / "x.mdl")
    with pytest.raises(NnetError, match="x.mdl: corrupt model file"):
        model_io.read(tmp_path / "x.mdl")


def test_a_garbled_log_number_is_nan_in_the_report_not_a_crash(tmp_path):
    from nnet_tools.report import logparse
    log = tmp_path / "train.log"
    log.write_text("Overall average objective function for 'output' is abc over 10 frames\n"
                   "Overall log-likelihood for 'output' is -1.x per frame\n"
                   "LOG (x) Relative parameter differences per layer are [ hidden: output:0.5 bare ]\n")
    assert logparse.train_objective(log) is None
    assert math.isnan(logparse.compute_prob(log)["log-likelihood"])
    diffs = logparse.parameter_differences(log)
    assert math.isnan(diffs["hidden"]) and diffs["output"] == 0.5 and "bare" not in diffs
    from nnet_tools.report import summary   # the dir summary's own reads of progress and combine logs
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "progress.0.log").write_text("num-parameters: 37\0\0\noutput-node name=output dim=4\0\n")
    (tmp_path / "log" / "combine.log").write_text("Combining 1\0 nnets, objective function changed from -1.3\0 to -1\n")
    assert "num-params=nanM" in summary._progress_info(str(tmp_path), 0)
    assert summary._combine_info(str(tmp_path)) == " combine=nan->-1.00 (over ?)"
    assert summary.format_total(1e20) == "1e+20 seconds"


def test_egs_dir_problems_are_one_line(tmp_path):
    from nnet_tools.data import get_egs
    (tmp_path / "afile").write_text("")
    with pytest.raises(NnetError, match="afile: write failed: Not a directory$"):
        get_egs._start(str(tmp_path / "afile"))
    (tmp_path / "egs" / get_egs.ORIG).mkdir(parents=True)
    (tmp_path / "egs" / get_egs.ORIG / "job.1.json").write_text("[1, 2]\n")
    with pytest.raises(NnetError, match="job.1.json: not an nnet-get-egs job summary"):
        get_egs.merge_archive(str(tmp_path / "egs"), 1)
    # Summaries of a run with another --num-jobs left beside this run's: named, not 'jobs [] did not finish'.
    for j, num_jobs in ((1, 2), (2, 2), (3, 3)):
        summary = {**dict.fromkeys(get_egs.SUMMARY_KEYS), "job": j, "num_jobs": num_jobs}
        (tmp_path / "egs" / get_egs.ORIG / f"job.{j}.json").write_text(json.dumps(summary))
    with pytest.raises(NnetError, match=r"job.3.json is from a run of 3 dump jobs, job.1.json from one of 2: remove"):
        get_egs.merge_archive(str(tmp_path / "egs"), 1)


def test_combine_and_diagnostic_egs_with_nan_features_are_refused(tmp_path):
    d = write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=200)
    nan_archive(d, tmp_path / "combine.egs", index=7)
    model = Nnet(config.normalize(config.yaml_load(SMALL_CONFIG)))
    with pytest.raises(NnetError, match=r"combine.egs: eg 7 \('utt7-0'\) has NaN or infinite features"):
        egs.EgsArchive(tmp_path / "combine.egs").all_frames(model)


def test_a_model_file_that_is_empty_truncated_or_not_ours(tmp_path):
    model_io.save(Nnet(config.normalize(config.yaml_load(SMALL_CONFIG))), tmp_path / "good.mdl")
    (tmp_path / "empty.mdl").write_bytes(b"")
    (tmp_path / "text.mdl").write_text("hello\n")
    (tmp_path / "half.mdl").write_bytes((tmp_path / "good.mdl").read_bytes()[:2000])
    torch.save({"format": model_io.FORMAT}, tmp_path / "pickle.mdl", _use_new_zipfile_serialization=False)
    for name, what in (("empty", "empty file"), ("text", "not a zip archive"), ("half", "not a zip archive"),
                       ("pickle", "not a zip archive")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # torch's warnings about old formats would precede the ERROR line
            with pytest.raises(NnetError, match=rf"{name}.mdl: not a readable nnet-tools model file \({what}"):
                model_io.read(tmp_path / f"{name}.mdl", mmap=True)


def test_driver_and_shell_step_options_are_one_line_and_exit_1(tmp_path):
    r = run(REPO / "steps/train_dnn.py", "--stage", "abc", "--egs.dir", tmp_path, "--dir", tmp_path / "x")
    assert r.returncode == 1 and r.stderr.strip() == \
        "train_dnn.py: argument --stage: invalid int value: 'abc' (see --help)"   # argparse: usage, exit 2
    for option in ("--PATH", "--help-message", "--foo.bar"):   # a variable of bash's, or no name at all
        r = run(REPO / "steps/get_egs.sh", option, "x", tmp_path, tmp_path / "egs")
        assert r.returncode == 1 and r.stderr.strip().endswith(f"invalid option {option}")
    r = run("bash", "-c", f"stage=abc; . {REPO}/steps/stages.sh")
    assert r.returncode == 1 and "--stage must be an integer, got 'abc'" in r.stderr   # ran no stage, exit 0


def test_nan_features_or_cmvn_statistics_are_refused_not_carried_on(tmp_path):
    """Programs that compute from features refuse a NaN or inf in them, or in CMVN statistics,
    in one line; before, they wrote NaN outputs (every utterance's, through the statistics)."""
    rng = np.random.default_rng(0)
    good = {f"u{i}": rng.normal(size=(5, 6)).astype(np.float32) for i in range(3)}
    bad = {**good, "u1": good["u1"].copy()}
    bad["u1"][3, 2] = np.nan
    for name, feats in (("good", good), ("bad", bad)):
        with tables.MatrixWriter(f"ark:{tmp_path}/{name}.ark") as w:
            for key, value in feats.items():
                w.write(key, value)
    with tables.IntVectorWriter(f"ark:{tmp_path}/t.ark") as w:
        for key in good:
            w.write(key, np.array([0, 1, 2, 3, 0], np.int32))
    (tmp_path / "m.yaml").write_text("input-dim: 6\nlayers:\n - {type: output, dim: 4}\n")
    run("nnet-init", tmp_path / "m.yaml", tmp_path / "m.mdl", check=True)
    run("nnet-compute-cmvn-stats", f"ark:{tmp_path}/good.ark", tmp_path / "g.stats", check=True)
    stats = tables.read_double_matrix(str(tmp_path / "g.stats"))
    stats[0, 1] = np.inf
    tables.write_double_matrix(str(tmp_path / "inf.stats"), stats)
    in_feats = f"ark:{tmp_path}/bad.ark: utterance 'u1': NaN or infinite features (first: frame 3)"
    out = tmp_path / "out"
    for argv, message in (
            (["nnet-compute", tmp_path / "m.mdl", f"ark:{tmp_path}/bad.ark", f"ark:{out}"], in_feats),
            (["nnet-compute-prob", tmp_path / "m.mdl", f"ark:{tmp_path}/bad.ark", f"ark:{tmp_path}/t.ark"], in_feats),
            (["nnet-apply-cmvn", tmp_path / "g.stats", f"ark:{tmp_path}/bad.ark", f"ark:{out}"], in_feats),
            (["nnet-apply-cmvn-online", tmp_path / "g.stats", f"ark:{tmp_path}/bad.ark", f"ark:{out}"], in_feats),
            (["nnet-compute-cmvn-stats", f"ark:{tmp_path}/bad.ark", out],
             f"ark:{tmp_path}/bad.ark: key 'u1': NaN or infinite features (first: frame 3)"),
            (["nnet-apply-cmvn", tmp_path / "inf.stats", f"ark:{tmp_path}/good.ark", f"ark:{out}"],
             f"{tmp_path}/inf.stats: utterance 'u0': NaN or infinite CMVN statistics"),
            (["nnet-apply-cmvn-online", tmp_path / "inf.stats", f"ark:{tmp_path}/good.ark", f"ark:{out}"],
             f"{tmp_path}/inf.stats: NaN or infinite CMVN statistics")):
        line = error_line(run(*argv))
        assert line.endswith(message), line
        assert not out.exists()


def test_copy_feats_of_nothing_is_an_error_as_in_kaldi(tmp_path):
    (tmp_path / "empty.ark").write_bytes(b"")
    line = error_line(run("nnet-copy-feats", f"ark:{tmp_path}/empty.ark", f"ark:{tmp_path}/out.ark"))
    assert line.endswith(f"ark:{tmp_path}/empty.ark: no feature matrices to copy")
    assert not (tmp_path / "out.ark").exists()


def test_split_submodels_names_a_truncated_model_file_as_one(tmp_path):
    model_io.save(Nnet(config.normalize(config.yaml_load(SMALL_CONFIG))), tmp_path / "good.mdl")
    (tmp_path / "half.mdl").write_bytes((tmp_path / "good.mdl").read_bytes()[:1500])
    line = error_line(run("nnet-split-submodels", tmp_path / "half.mdl", 2, tmp_path / "split"))
    assert line.endswith("half.mdl: not a readable nnet-tools model file "
                         "(not a zip archive: truncated, or another format)")
    assert not (tmp_path / "split").exists()


def test_a_binary_archive_read_as_scp_is_named_as_one(tmp_path):
    with tables.MatrixWriter(f"ark,scp:{tmp_path}/f.ark,{tmp_path}/f.scp") as w:
        w.write("u1", np.zeros((2, 3), np.float32))
    with pytest.raises(NnetError, match=r"^scp:.*f.ark: a binary archive, not a script file \(read it as ark:\)$"):
        list(tables.read_matrices(f"scp:{tmp_path}/f.ark"))
    with pytest.raises(NnetError, match="a binary archive, not a script file"):
        tables.RandomAccessMatrices(f"scp:{tmp_path}/f.ark")
    assert [k for k, _ in tables.read_matrices(f"scp:{tmp_path}/f.scp")] == ["u1"]   # the real scp reads
