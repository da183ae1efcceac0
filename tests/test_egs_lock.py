"""Egs dirs are owned (issue 33): EGS_DIR/get_egs.lock, the exp dir's kind of lock, held by
steps/get_egs.sh (and by a one-process nnet-get-egs); a re-made egs dir keeps none of an earlier
run's archives."""
import os
import socket
import subprocess
from pathlib import Path

import pytest

from nnet_tools.data import get_egs as ge
from nnet_tools.errors import NnetError
from helpers import REPO, SMALL, error_line, lengths, run, run_lib, wait_for, write_data_dir

STEPS = REPO / "steps" / "get_egs.sh"
SMALL_SH = ["--frames-per-eg", "4", "--num-utts-subset", "3"]


def archive_numbers(egs_dir):
    return sorted(int(p.name.split(".")[1]) for p in Path(egs_dir).glob("egs.*.ark"))


def snapshot(egs_dir, skip):
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in Path(egs_dir).rglob("*") if p.name != skip}


def test_two_get_egs_at_once(tmp_path):
    """The second is refused in one line naming the dir and the holder, and touches nothing; the
    first re-makes the dir with fewer archives than before and keeps none of the old ones."""
    d, egs = tmp_path / "data", tmp_path / "egs"
    write_data_dir(d, lengths(30))
    run(STEPS, *SMALL_SH, "--samples-per-iter", "30", d, egs, check=True)
    before = archive_numbers(egs)
    gate = tmp_path / "go"   # the first's jobs wait for it, so the first is surely still running
    waiting = tmp_path / "waiting"   # the first has written all it writes before its jobs
    cmd = tmp_path / "gated_cmd"
    cmd.write_text(f'#!/bin/sh\ntouch "{waiting}"\nwhile [ ! -e "{gate}" ]; do sleep 0.05; done\n'
                   f'exec nnet-queue local "$@"\n')
    cmd.chmod(0o755)
    first = subprocess.Popen([str(STEPS), *SMALL_SH, "--samples-per-iter", "100", "--nj", "2", "--cmd", str(cmd),
                              str(d), str(egs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        wait_for(waiting.exists, what="the first get_egs.sh to start its jobs")
        lock_text = (egs / ge.LOCK_NAME).read_text()
        files = snapshot(egs, ge.LOCK_NAME)
        second = run(STEPS, *SMALL_SH, "--samples-per-iter", "50", d, egs)
        line = error_line(second)
        assert f"{egs}/{ge.LOCK_NAME}: another get_egs is writing this egs dir (host {socket.gethostname()}, " \
               f"pid {first.pid}," in line
        assert "wrote" not in second.stderr + second.stdout   # not the first's counts
        assert snapshot(egs, ge.LOCK_NAME) == files and (egs / ge.LOCK_NAME).read_text() == lock_text
    finally:
        gate.touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert "wrote 2 archives" in err + out
    assert (egs / "info" / "num_archives").read_text() == "2\n"
    assert archive_numbers(egs) == [1, 2] and len(before) > 2
    assert not (egs / ge.LOCK_NAME).exists() and not (egs / "split2").exists()
    left = subprocess.run(["pgrep", "-s", str(first.pid)], capture_output=True, text=True).stdout
    assert not left, f"get_egs.sh left processes behind (its heartbeat's sleep?): {left}"


def test_one_process_get_egs_holds_the_lock_and_drops_stale_archives(tmp_path):
    data, egs, info = run_lib(tmp_path, samples_per_iter=30)
    assert info["num_archives"] > 2 and not (egs / ge.LOCK_NAME).exists()
    holder = subprocess.Popen(["sleep", "60"])
    try:
        assert run("nnet-egs-lock", holder.pid, egs).returncode == 0
        files = snapshot(egs, ge.LOCK_NAME)
        with pytest.raises(NnetError, match=rf"get_egs.lock: another get_egs is writing this egs dir \(host .*, "
                                            rf"pid {holder.pid},"):
            ge.get_egs(data[2], data[3], str(egs), ge.EgsOptions(**{**SMALL, "samples_per_iter": 100}))
        r = run("nnet-get-egs", "--num-utts-subset", 3, "--samples-per-iter", 100, data[2], data[3], egs)
        assert f"pid {holder.pid}" in error_line(r)
        assert snapshot(egs, ge.LOCK_NAME) == files
        assert run("nnet-egs-lock", "--release", os.getpid(), egs).returncode == 0   # not its lock: kept
        assert (egs / ge.LOCK_NAME).exists()
    finally:
        holder.kill()
        holder.wait()
    info = ge.get_egs(data[2], data[3], str(egs), ge.EgsOptions(**{**SMALL, "samples_per_iter": 100}))  # a dead holder's
    assert archive_numbers(egs) == list(range(1, info["num_archives"] + 1))
    assert not (egs / ge.LOCK_NAME).exists()
