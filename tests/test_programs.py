"""Program-level behaviour on bad input: one clear ERROR line, exit 1, nothing half-written."""
import numpy as np
import pytest

from helpers import REPO, error_line, run, write_egs_dir
from nnet_tools.data import tables


@pytest.fixture
def data(tmp_path):
    """feats (dim 6, 3-frame utterances) and targets; utt3 has no targets."""
    rng = np.random.default_rng(0)
    with tables.MatrixWriter(f"ark,scp:{tmp_path}/feats.ark,{tmp_path}/feats.scp") as w:
        for i in range(4):
            w.write(f"utt{i}", rng.normal(size=(3, 6)).astype(np.float32))
    with tables.IntVectorWriter(f"ark:{tmp_path}/targets.ark") as w:
        for i in range(3):
            w.write(f"utt{i}", np.array([0, 1, 3], dtype=np.int32))
    return f"scp:{tmp_path}/feats.scp", f"ark:{tmp_path}/targets.ark"


def test_compute_prob_on_tables_skips_and_counts_utterances_without_targets(small_model, data):
    r = run("nnet-compute-prob", small_model[1], *data, check=True)
    assert "utt3" in r.stderr and "skipped 1 utterances" in r.stderr
    assert "Overall accuracy for 'output' is" in r.stderr and "over 9 frames." in r.stderr


def test_unreadable_model_file(tmp_path, data):
    (tmp_path / "bad.mdl").write_text("garbage")
    assert "bad.mdl: not a readable nnet-tools model file" in error_line(run("nnet-compute-prob", tmp_path / "bad.mdl", *data))
    assert "nope.mdl: no such model file" in error_line(run("nnet-info", tmp_path / "nope.mdl"))


def test_missing_and_unknown_rspecifiers(small_model, tmp_path, data):
    assert "nope.scp" in error_line(run("nnet-compute-prob", small_model[1], f"scp:{tmp_path}/nope.scp", data[1]))
    assert "bad rspecifier" in error_line(run("nnet-compute", small_model[1], "foo:bar", f"ark:{tmp_path}/o.ark"))


def test_feature_dim_mismatch_and_nothing_half_written(tmp_path):
    cfg = tmp_path / "m.yaml"
    cfg.write_text("input-dim: 5\nlayers:\n - {type: output, dim: 4}\n")
    run("nnet-init", cfg, tmp_path / "m.mdl", check=True)
    with tables.MatrixWriter(f"ark:{tmp_path}/f.ark") as w:
        w.write("good", np.zeros((2, 5), np.float32))
        w.write("wrong", np.zeros((2, 7), np.float32))
    (tmp_path / "out.ark").write_text("precious")
    line = error_line(run("nnet-compute", tmp_path / "m.mdl", f"ark:{tmp_path}/f.ark", f"ark:{tmp_path}/out.ark"))
    assert "'wrong'" in line and "feature dim 7 does not match the model's 5" in line
    assert (tmp_path / "out.ark").read_text() == "precious"  # the old output is untouched


def test_target_id_beyond_output_dim(small_model, tmp_path, data):
    with tables.IntVectorWriter(f"ark:{tmp_path}/big.ark") as w:
        w.write("utt0", np.array([0, 9, 1], dtype=np.int32))
    line = error_line(run("nnet-compute-prob", small_model[1], data[0], f"ark:{tmp_path}/big.ark"))
    assert "utt0" in line and "target id 9" in line
    write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=20, classes=7)
    assert "target id 6 >= model output dim 4" in error_line(
        run("nnet-compute-prob", small_model[1], tmp_path / "egs" / "valid_diagnostic.egs"))


def test_negative_target_id_and_empty_utterance(small_model, tmp_path, data):
    with tables.IntVectorWriter(f"ark:{tmp_path}/neg.ark") as w:
        w.write("utt0", np.array([0, -2, 1], dtype=np.int32))
    line = error_line(run("nnet-compute-prob", small_model[1], data[0], f"ark:{tmp_path}/neg.ark"))
    assert "utt0" in line and "target id -2 outside [0, 4)" in line     # the bad id, not the largest
    with tables.MatrixWriter(f"ark:{tmp_path}/f.ark") as w:
        w.write("utt0", np.zeros((0, 6), np.float32))
        w.write("utt1", np.zeros((3, 6), np.float32))
    r = run("nnet-compute-prob", small_model[1], f"ark:{tmp_path}/f.ark", data[1], check=True)
    assert "utterance 'utt0' has no frames; skipping it" in r.stderr and "Traceback" not in r.stderr
    assert "over 3 frames." in r.stderr


def test_empty_data(small_model, tmp_path):
    with tables.MatrixWriter(f"ark:{tmp_path}/empty.ark"):
        pass
    assert "no utterance with targets" in error_line(
        run("nnet-compute-prob", small_model[1], f"ark:{tmp_path}/empty.ark", f"ark:{tmp_path}/empty.ark"))


def test_train_one_job_failure_writes_no_model(small_model, tmp_path):
    write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=20, dim=5)
    out = tmp_path / "1.mdl"
    line = error_line(run("nnet-train-one-job", "--learning-rate", "0.001", small_model[1], tmp_path / "egs" / "egs.1.ark", out))
    assert "feature dim 5 does not match the model's 6" in line
    assert not out.exists()


def test_compute_writes_log_posteriors(small_model, data, tmp_path):
    run("nnet-compute", small_model[1], data[0], f"ark,t:{tmp_path}/post.txt", check=True)
    outs = dict(tables.read_matrices(f"ark:{tmp_path}/post.txt"))
    assert sorted(outs) == ["utt0", "utt1", "utt2", "utt3"]
    assert np.allclose(np.exp(outs["utt0"]).sum(1), 1.0, atol=1e-4) and outs["utt0"].shape == (3, 4)
    # A zero-length utterance is warned about and skipped, as nnet3-compute does; none done is exit 1.
    (tmp_path / "some.txt").write_text("empty [ ]\nutt0 [ 1 2 3 4 5 6 ]\n")
    r = run("nnet-compute", small_model[1], f"ark:{tmp_path}/some.txt", f"ark:{tmp_path}/some.ark", check=True)
    assert "zero-length utterance: empty" in r.stderr and "Done 1 utterances, failed for 1" in r.stderr
    assert list(dict(tables.read_matrices(f"ark:{tmp_path}/some.ark"))) == ["utt0"]
    (tmp_path / "none.txt").write_text("empty [ ]\n")
    r = run("nnet-compute", small_model[1], f"ark:{tmp_path}/none.txt", f"ark:{tmp_path}/none.ark")
    assert "no utterance computed" in error_line(r) and not (tmp_path / "none.ark").exists()


def test_help_has_an_example():
    """Every program of pyproject.toml's [project.scripts], each installed as it says: its --help
    (in this process; a process each would cost a second apiece) exits 0, shows its usage line and
    an Example(s) section with a line that runs the program. nnet-get-egs's also as a process."""
    import importlib
    import re
    import subprocess
    import tomllib
    from importlib.metadata import entry_points
    from click.testing import CliRunner
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert len(scripts) >= 31
    installed = {e.name: e.value for e in entry_points(group="console_scripts") if e.value.startswith("nnet_tools.cli.")}
    assert installed == scripts, "the installed programs are not pyproject.toml's: pip install -e ."
    for name, target in scripts.items():
        module, function = target.split(":")
        r = CliRunner().invoke(getattr(importlib.import_module(module), function), ["--help"], prog_name=name)
        assert r.exit_code == 0 and f"Usage: {name} " in r.output, (name, r.output)
        section = re.search(r"^ *Examples?\b.*:\n((?: {4,}\S.*\n)+)", r.output, re.M)   # up to a blank line
        assert section and re.search(rf"^ *{re.escape(name)} \S", section[1], re.M), (name, r.output)
    r = subprocess.run(["nnet-get-egs", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Example:" in r.stdout and "--frames-per-eg" in r.stdout


def test_usage_errors_exit_1_as_kaldi_programs_do():
    """In one ERROR line, as any other bad input, pointing at --help."""
    assert error_line(run("nnet-average-models")) == \
        "ERROR (nnet-average-models) Missing argument 'MODELS...' (see nnet-average-models --help)"
    r = run("nnet-train-one-job", "--learning-rate", "abc", "a", "b", "c")
    assert "'abc' is not a valid float" in error_line(r) and "Usage:" not in r.stderr
    for option, value in (("--job", "0"), ("--archives-processed", "-7")):   # once trained on some archive
        r = run("nnet-train-one-job", "--learning-rate", "0.1", option, value, "a", "b", "c")
        assert f"Invalid value for '{option}'" in error_line(r)
    assert error_line(run("nnet-compute", "--bogus", "3", "m", "ark:f", "ark:o")) == \
        "ERROR (nnet-compute) No such option '--bogus' (see nnet-compute --help)"


def test_an_egs_archive_given_as_a_table_says_so(tmp_path):
    """Kaldi's egs are tables ('ark:egs.1.ark'); ours are files, and 'no such egs archive' misled."""
    from nnet_tools.data.egs import EgsArchive
    from nnet_tools.errors import NnetError
    (tmp_path / "egs.1.ark").write_bytes(b"")
    with pytest.raises(NnetError, match="egs.1.ark: an egs archive is a plain file name, not a table: drop the 'ark:'"):
        EgsArchive(f"ark:{tmp_path}/egs.1.ark")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a usable GPU")
def test_use_gpu_yes_without_a_gpu_is_an_error_not_the_cpu(tmp_path):
    """Kaldi's --use-gpu yes (and wait) need a GPU: without one the job fails before training
    (it once trained on the CPU, rc 0); optional falls back to the CPU, as the default does."""
    from helpers import SMALL_CONFIG
    write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=50)
    (tmp_path / "m.yaml").write_text(SMALL_CONFIG)
    run("nnet-init", tmp_path / "m.yaml", tmp_path / "0.mdl", check=True)
    for use_gpu in ("yes", "wait"):
        line = error_line(run("nnet-train-one-job", f"--use-gpu={use_gpu}", "--learning-rate=0.001",
                              tmp_path / "0.mdl", tmp_path / "egs/egs.1.ark", tmp_path / "1.mdl"))
        assert f"--use-gpu={use_gpu} but no CUDA GPU is usable" in line and "--use-gpu=optional" in line
        assert not (tmp_path / "1.mdl").exists()
    r = run("nnet-train-one-job", "--use-gpu=optional", "--learning-rate=0.001", "--minibatch-size=16",
            tmp_path / "0.mdl", tmp_path / "egs/egs.1.ark", tmp_path / "1.mdl", check=True)
    assert "running on CPU" in r.stderr and (tmp_path / "1.mdl").exists()


def test_a_duplicate_feats_key_stops_the_egs_dump(tmp_path):
    """The issue's case: a feats.scp line repeated gave one eg too many (an image trained with
    the wrong label); now nnet-get-egs names the file and the key, and writes no egs dir."""
    rng = np.random.default_rng(0)
    with tables.MatrixWriter(f"ark,scp:{tmp_path}/feats.ark,{tmp_path}/feats.scp") as w, \
            tables.IntVectorWriter(f"ark:{tmp_path}/targets.ark") as t:
        for i in range(8):
            w.write(f"utt{i}", rng.normal(size=(1, 6)).astype(np.float32))
            t.write(f"utt{i}", np.array([i % 2], dtype=np.int32))
    scp = tmp_path / "feats.scp"
    lines = scp.read_text().splitlines()
    scp.write_text("\n".join(lines + lines[1:2]) + "\n")
    line = error_line(run("nnet-get-egs", "--left-context=0", "--right-context=0", "--frames-per-eg=1",
                          "--num-utts-subset=1", f"scp:{scp}", f"ark:{tmp_path}/targets.ark", tmp_path / "egs"))
    assert "feats.scp" in line and "duplicate key 'utt1'" in line
    assert not (tmp_path / "egs" / "info" / "num_archives").exists()


def test_a_signal_inside_a_c_extensions_import_is_one_line_not_a_traceback():
    """SIGTERM while kaldi_native_fbank's module initialised came out as its ImportError, a
    traceback in the log of a stopped task (tests/test_faults.py, 1 run in many)."""
    import subprocess
    import sys
    body = ("from nnet_tools.cli.common import Terminated, program\n"
            "@program('nnet-x')\n"
            "def main():\n"
            "    raise ImportError('initialization failed') from Terminated()\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True)
    assert r.returncode == -15 and r.stderr.splitlines()[-1] == "ERROR (nnet-x) terminated (SIGTERM)", r.stderr
    assert "Traceback" not in r.stderr
