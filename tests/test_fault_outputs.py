"""What a failed run leaves: an output dir it made is gone again, one that existed is as it was;
a lock for no running process is refused; a bad outer-optimizer state is named in user words."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

from nnet_tools.data import egs
from nnet_tools.data import get_egs as ge
from nnet_tools.errors import NnetError
from helpers import DIGITS_LEXICON, SMALL, error_line, lengths, run, run_lib, write_data


def snapshot(d):
    return {str(p): (p.stat().st_mtime_ns, p.is_file() and p.read_bytes()) for p in d.rglob("*")}


# --- nnet-get-egs -----------------------------------------------------------------------------

def bad_feats(data, d, how):
    """write_data's answer (into ``d``) with features that fail part-way: a cut-short ark, or an scp
    pointing at an ark that is not there; and the error that names them."""
    if how == "truncated":
        (d / "cut.ark").write_bytes((d / "feats.ark").read_bytes()[:3000])
        return (*data[:2], f"ark:{d}/cut.ark", data[3]), "Failed to read matrix"
    (d / "bad.scp").write_text((d / "feats.scp").read_text().replace("feats.ark", "missing.ark"))
    return (*data[:2], f"scp:{d}/bad.scp", data[3]), "missing.ark:"


@pytest.mark.parametrize("how", ["truncated", "missing ark"])
def test_a_failed_get_egs_removes_the_egs_dir_it_made(tmp_path, how):
    bad, message = bad_feats(write_data(tmp_path / "data", lengths(30)), tmp_path / "data", how)
    r = run("nnet-get-egs", "--frames-per-eg", 4, "--num-utts-subset", 3, bad[2], bad[3], tmp_path / "eg_a")
    assert message in error_line(r) and "Traceback" not in r.stderr
    assert not (tmp_path / "eg_a").exists()
    # the parents it made go too, up to the dir that was there
    with pytest.raises(NnetError, match=message):
        run_lib(tmp_path, data=bad, name="new/exp/egs")
    assert sorted(os.listdir(tmp_path)) == ["data"]


def test_a_failed_get_egs_keeps_a_dir_that_existed(tmp_path):
    """An earlier run's egs dir, and get_egs.sh's: it takes the lock (making the dir) before
    nnet-get-egs --lock false runs, so the dir and the lock outlive a failed nnet-get-egs."""
    data = write_data(tmp_path / "data", lengths(30))
    bad, message = bad_feats(data, tmp_path / "data", "truncated")
    _, old, _ = run_lib(tmp_path, data=data, samples_per_iter=30)
    before = snapshot(old)
    with pytest.raises(NnetError, match=message):
        run_lib(tmp_path, data=bad)
    assert snapshot(old) == before
    locked = tmp_path / "locked"
    ge.take_lock(str(locked), os.getpid())
    with pytest.raises(NnetError, match=message):
        ge.get_egs(bad[2], bad[3], str(locked), ge.EgsOptions(**SMALL), lock=False)
    assert os.listdir(locked) == [ge.LOCK_NAME]
    ge.release_lock(str(locked), os.getpid())


# --- nnet-format-lm ---------------------------------------------------------------------------

CUT_ARPA = "\\data\\\nngram 1=4\n\n\\1-grams:\n-99\t<s>\n"   # cut short after one 1-gram


@pytest.fixture(scope="module")
def lang_dir(tmp_path_factory):
    from nnet_tools.speech.lang import langdir
    d = tmp_path_factory.mktemp("lang") / "lang"
    langdir.prepare(str(DIGITS_LEXICON), str(d))
    return d


def test_a_failed_format_lm_removes_the_dir_it_made_and_keeps_one_that_existed(lang_dir, tmp_path):
    from nnet_tools.speech.lang import lm
    (tmp_path / "cut.arpa").write_text(CUT_ARPA)
    r = run("nnet-format-lm", lang_dir, tmp_path / "cut.arpa", tmp_path / "lang_test2")
    assert "cut.arpa:5: the header says 4 1-grams, the section has 1" in error_line(r)
    assert not (tmp_path / "lang_test2").exists()
    with pytest.raises(NnetError, match="the header says 4 1-grams"):
        lm.format_lm(str(lang_dir), str(tmp_path / "cut.arpa"), str(tmp_path / "a" / "b" / "lang_test"))
    assert not (tmp_path / "a").exists()
    old = tmp_path / "old"
    old.mkdir()
    (old / "G.fst").write_text("an earlier G\n")
    (old / "empty").mkdir()
    before = snapshot(old)
    with pytest.raises(NnetError, match="the header says 4 1-grams"):
        lm.format_lm(str(lang_dir), str(tmp_path / "cut.arpa"), str(old))
    assert snapshot(old) == before


# --- nnet-egs-lock ----------------------------------------------------------------------------

def unused_pid():
    """A pid no process has now (one that has just ended)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("pid, why", [(0, "not a process id"), (-5, "not a process id"),
                                      (99999999999, "no running process has that id"),
                                      ("ended", "no running process has that id")])
def test_egs_lock_refuses_a_pid_of_no_running_process(tmp_path, pid, why):
    """Such a lock is never judged dead by its pid, so it would hold the dir until its heartbeat aged."""
    pid = unused_pid() if pid == "ended" else pid
    r = run("nnet-egs-lock", "--", pid, tmp_path / "egs")
    assert error_line(r).endswith(f"egs/{ge.LOCK_NAME}: cannot take it for pid {pid}: {why}")
    assert not (tmp_path / "egs").exists()
    (tmp_path / "egs").mkdir()
    assert run("nnet-egs-lock", "--", pid, tmp_path / "egs").returncode == 1
    assert os.listdir(tmp_path / "egs") == []


def test_egs_lock_release_of_pid_0_is_refused_and_a_real_pid_still_releases(tmp_path):
    holder = subprocess.Popen(["sleep", "60"])
    try:
        assert run("nnet-egs-lock", holder.pid, tmp_path).returncode == 0
        lock = (tmp_path / ge.LOCK_NAME).read_text()
        r = run("nnet-egs-lock", "--release", 0, tmp_path)
        assert "cannot release it for pid 0: not a process id, so it can never have been taken" in error_line(r)
        assert (tmp_path / ge.LOCK_NAME).read_text() == lock
        assert run("nnet-egs-lock", "--release", holder.pid, tmp_path).returncode == 0
        assert not (tmp_path / ge.LOCK_NAME).exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_for_a_huge_pid_is_taken_over(tmp_path, capsys):
    """An earlier version wrote such locks; judging one used to fail in os.kill (OverflowError)."""
    data = write_data(tmp_path / "data", lengths(30))
    (tmp_path / "egs").mkdir()
    ge.egs_lock(str(tmp_path / "egs"), pid=99999999999).acquire()
    run_lib(tmp_path, data=data)
    assert "taking over a stale lock" in capsys.readouterr().err
    assert not (tmp_path / "egs" / ge.LOCK_NAME).exists()


# --- nnet-outer-step --------------------------------------------------------------------------

def write_bad_state(path, kind, model):
    if kind == "text":
        path.write_text("w.layers.0.affine.weight: 1 2 3\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        full = path.with_suffix(".full")
        torch.save({f"{k}.{n}": p.detach() for n, p in model.named_parameters() for k in ("w", "delta")}, full)
        path.write_bytes(full.read_bytes()[:len(full.read_bytes()) // 2])
    else:   # an egs archive
        egs.write_archive(str(path), np.zeros((2, 3, 6), np.float32), np.zeros((2, 1), np.int32), ["a", "b"], 1, 1)


@pytest.mark.parametrize("kind, what", [("text", "another format"), ("empty", "empty file"),
                                        ("truncated", "truncated"), ("egs", "another format")])
def test_outer_step_names_a_bad_state_file_in_user_words(tmp_path, small_model, kind, what):
    from nnet_tools.model import model_io
    _, start = small_model
    shutil.copyfile(start, tmp_path / "avg.mdl")
    write_bad_state(tmp_path / "bad.outer", kind, model_io.load(start))
    r = run("nnet-outer-step", "--method", "bmuf", "--state-in", tmp_path / "bad.outer", "--state-out",
            tmp_path / "s.outer", start, tmp_path / "avg.mdl", tmp_path / "o.mdl")
    line = error_line(r)
    assert line.endswith(f"bad.outer: not an outer-optimizer state written by nnet-outer-step ({what})")
    assert not re.search(r"Error\b|Unpickling|Exception", line) and "Traceback" not in r.stderr
    assert not (tmp_path / "s.outer").exists() and not (tmp_path / "o.mdl").exists()


# --- the training driver ----------------------------------------------------------------------

def test_a_driver_refused_before_any_work_leaves_no_dir_it_made(tmp_path, egs_info):
    """Its options pass, then the config is bad: the exp dir (and the parents) it made go again;
    an exp dir that was there stays. Options refused before that make no dir at all."""
    from nnet_tools.driver import options, outer_loop
    from helpers import RecordingLauncher
    (tmp_path / "bad.yaml").write_text("input-dim: 6\nlayers:\n - {name: h, type: foo, dim: 16}\n")
    opts = options.TrainerOptions(num_epochs=3, jobs_initial=2, jobs_final=4)
    (tmp_path / "old").mkdir()
    for exp in (tmp_path / "a" / "b" / "exp", tmp_path / "old"):
        loop = outer_loop.OuterLoop(opts, str(tmp_path / "egs"), str(exp), RecordingLauncher(str(tmp_path), None))
        assert (exp / "log").is_dir()
        with pytest.raises(NnetError, match="unknown layer type 'foo'"):
            loop.check_start(None, str(tmp_path / "bad.yaml"))
        assert sorted(os.listdir(tmp_path)) == ["bad.yaml", "egs", "old"] and os.listdir(tmp_path / "old") == []
    with pytest.raises(NnetError, match="averaging-fanin must be 0"):
        outer_loop.OuterLoop(options.TrainerOptions(num_epochs=3, jobs_initial=2, jobs_final=4, averaging_fanin=1),
                             str(tmp_path / "egs"), str(tmp_path / "new"), RecordingLauncher(str(tmp_path), None))
    assert not (tmp_path / "new").exists()
