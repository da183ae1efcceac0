"""Faults only a user who is not root meets (found by running every program as one): a directory
or file without write or read permission. Tests run as root, for whom os.access grants everything,
so the denial is simulated by patching os.access; what the code does with it is real."""
import os
import stat

import pytest

from nnet_tools import fileio
from nnet_tools.cli.common import program
from nnet_tools.data import get_egs as ge
from nnet_tools.errors import NnetError
from nnet_tools.driver import options, outer_loop
from helpers import SMALL, RecordingLauncher, drive, lengths, run_lib, split_scp, write_data


def deny(monkeypatch, *paths):
    """os.access answers False for ``paths``, as for a user without the permission."""
    denied = {os.path.abspath(p) for p in paths}
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: os.path.abspath(path) not in denied and real(path, mode, **kw))


def test_a_read_only_file_is_not_replaced_and_a_replaced_file_keeps_its_mode(tmp_path, monkeypatch):
    """Kaldi writes in place: a read-only output fails, a private one stays private. The rename
    replaced the first and made the second world-readable (the umask's 0644)."""
    private = tmp_path / "private.txt"
    fileio.write_text(private, "old\n")
    private.chmod(0o600)
    fileio.write_text(private, "new\n")
    assert private.read_text() == "new\n" and stat.S_IMODE(private.stat().st_mode) == 0o600
    deny(monkeypatch, private)
    with pytest.raises(NnetError, match=r"private.txt: cannot write: the file is read-only \(Permission denied\)"):
        fileio.write_text(private, "newer\n")
    assert private.read_text() == "new\n"
    deny(monkeypatch, private, tmp_path)
    with pytest.raises(NnetError, match=rf"other.txt: cannot write: {tmp_path} is not writable \(Permission denied\)"):
        fileio.write_text(tmp_path / "other.txt", "x\n")


def test_another_accounts_stale_temp_in_a_shared_dir_does_not_block_writing(tmp_path, monkeypatch):
    """In a sticky dir (/tmp, group scratch) a dead writer's temp file of another account cannot be
    removed: the sweep stopped every write there with 'Operation not permitted'."""
    stale = tmp_path / f".tmp.{fileio._host()}.999999.abcd.x.mdl"
    stale.write_text("")
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if os.path.abspath(path) == str(stale):
            raise PermissionError(1, "Operation not permitted", str(path))
        return real_unlink(path, *args, **kwargs)
    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(fileio, "pid_alive", lambda pid: False)
    fileio.write_text(tmp_path / "new.txt", "x\n")
    assert (tmp_path / "new.txt").read_text() == "x\n" and stale.exists()


def test_get_egs_into_a_read_only_dir_leaves_the_earlier_egs_as_they_were(tmp_path, monkeypatch):
    """It removed info/num_archives (a complete dir now looked unfinished) and then failed."""
    data, egs_dir, _ = run_lib(tmp_path)
    before = sorted(p.name for p in egs_dir.rglob("*"))
    for denied in (egs_dir, egs_dir / "info"):
        monkeypatch.undo()
        deny(monkeypatch, denied)
        with pytest.raises(NnetError, match=rf"^{denied} is not writable \(Permission denied\)$"):
            ge.get_egs(data[2], data[3], str(egs_dir), ge.EgsOptions(**SMALL))
        assert sorted(p.name for p in egs_dir.rglob("*")) == before


def test_merge_egs_checks_orig_is_writable_before_writing_an_archive(tmp_path, monkeypatch):
    """A merge wrote egs.1.ark, then failed on its merged.1 marker; --finish exited 0 and left orig/."""
    _, _, fs, ts = write_data(tmp_path / "data", lengths(30))
    egs_dir = tmp_path / "egs"
    for j, scp in enumerate(split_scp(tmp_path / "data" / "feats.scp", 2, tmp_path), start=1):
        ge.dump_job(f"scp:{scp}", ts, str(egs_dir), ge.EgsOptions(**SMALL), j, 2)
    deny(monkeypatch, egs_dir / "orig")
    with pytest.raises(NnetError, match=r"orig is not writable"):
        ge.merge_archive(str(egs_dir), 1)
    assert not (egs_dir / "egs.1.ark").exists()
    monkeypatch.undo()
    for k in range(1, int((egs_dir / "orig" / "num_archives").read_text()) + 1):
        ge.merge_archive(str(egs_dir), k)
    deny(monkeypatch, egs_dir / "orig")
    with pytest.raises(NnetError, match=r"orig is not writable"):
        ge.finish(str(egs_dir))
    assert not (egs_dir / "info").exists()


def test_driver_refuses_an_exp_dir_or_log_dir_it_cannot_write(tmp_path, egs_info, monkeypatch):
    """A read-only exp dir was a traceback (driver.lock); a read-only log/ failed every job twice
    more and named logs that were never written."""
    opts = options.TrainerOptions(num_epochs=3, jobs_initial=2, jobs_final=4)
    for denied in (tmp_path / "exp", tmp_path / "exp" / "log"):
        (tmp_path / "exp" / "log").mkdir(parents=True, exist_ok=True)
        monkeypatch.undo()
        deny(monkeypatch, denied)
        with pytest.raises(NnetError, match=rf"^{denied} is not writable \(Permission denied\)$"):
            outer_loop.OuterLoop(opts, str(egs_info), str(tmp_path / "exp"), RecordingLauncher(str(tmp_path), None))


def test_resume_stops_at_a_model_it_cannot_read(tmp_path, egs_info, monkeypatch):
    """It warned, started from an older model, and removed the unreadable one as a later model."""
    loop, _ = drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    for name in ("final.mdl", "accuracy.report", f"{loop.num_iters}.mdl"):
        os.remove(tmp_path / "exp" / name)
    hidden = tmp_path / "exp" / f"{loop.num_iters - 1}.mdl"
    deny(monkeypatch, hidden)
    with pytest.raises(NnetError, match=rf"^{hidden}: cannot resume from it: Permission denied$"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    assert hidden.exists()


def test_nnet_queue_refuses_a_log_dir_it_cannot_write(tmp_path, monkeypatch, capsys):
    """Each task failed for its log, then the failure named the logs that were never written."""
    from nnet_tools import queue
    deny(monkeypatch, tmp_path / "log")
    (tmp_path / "log").mkdir()
    with pytest.raises(NnetError, match=rf"^{tmp_path}/log is not writable \(Permission denied\)$"):
        queue.launch("local", ["JOB=1:2", str(tmp_path / "log" / "a.JOB.log"), "echo", "hi"])
    assert not list((tmp_path / "log").iterdir())


def test_unreadable_is_said_as_such_not_as_missing(tmp_path, egs_info, monkeypatch):
    """An unreadable info/ file read as "missing or not an integer", an unreadable log as absent
    (its iteration dropped out of nnet-report), and an unreadable --trainer.input-model failed
    at stage -1 with a resume hint for a run that never started."""
    from nnet_tools.data import egs as egs_mod
    from nnet_tools.report import logparse

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))
    for module in (egs_mod, logparse):
        monkeypatch.setattr(module, "open", denied, raising=False)
    with pytest.raises(NnetError, match=r"info/num_archives: cannot read: Permission denied$"):
        egs_mod.read_info(str(egs_info), "num_archives")
    with pytest.raises(NnetError, match=r"compute_prob_valid.3.log: cannot read: Permission denied$"):
        logparse.compute_prob(str(tmp_path / "compute_prob_valid.3.log"))
    monkeypatch.undo()
    opts = options.TrainerOptions(num_epochs=3, jobs_initial=2, jobs_final=4)
    loop = outer_loop.OuterLoop(opts, str(egs_info), str(tmp_path / "exp"), RecordingLauncher(str(tmp_path), None))
    with pytest.raises(NnetError, match=r"gone.mdl: no such model file"):
        loop.check_start(None, None, str(tmp_path / "gone.mdl"))


def test_an_os_error_no_reader_named_is_one_line(capsys):
    """An unreadable egs piece was numpy's memmap traceback; any such error is now one line."""
    @program("nnet-x")
    def denied():
        raise PermissionError(13, "Permission denied", "egs/orig/egs_orig.2.1.rec")
    with pytest.raises(SystemExit) as e:
        denied()
    assert e.value.code == 1
    assert capsys.readouterr().err.splitlines()[-1] == "ERROR (nnet-x) egs/orig/egs_orig.2.1.rec: Permission denied"
