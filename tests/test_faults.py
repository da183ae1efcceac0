"""The fault suite: what a user sees when things go wrong, with real processes and real signals.

Each case asserts the one line the user gets and that nothing is lost or left behind: no
partial file under a real name, no stray temp file after the next run, no task outliving
its launcher. The disk-full cases need a small tmpfs, so they run as root only.
"""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from helpers import SMALL_CONFIG, error_line, gone, nan_archive, run, wait_for, write_egs_dir
from nnet_tools import fileio
from nnet_tools.data import egs, tables
from nnet_tools.queue import tasklog
from nnet_tools.report import logparse


def temps(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith(fileio.TEMP_PREFIX))


def write_data(d, num_utts=40, frames=12, dim=6, bad=None, seed=0):
    """feats.scp + targets.ark in d; bad = {utterance index: (frame, value)} plants NaN/inf."""
    rng = np.random.default_rng(seed)
    os.makedirs(d, exist_ok=True)
    with tables.MatrixWriter(f"ark,scp:{d}/feats.ark,{d}/feats.scp") as fw, \
            tables.IntVectorWriter(f"ark:{d}/targets.ark") as tw:
        for i in range(num_utts):
            feats = rng.standard_normal((frames, dim)).astype(np.float32)
            if bad and i in bad:
                feats[bad[i][0], 0] = bad[i][1]
            fw.write(f"utt{i:03d}", feats)
            tw.write(f"utt{i:03d}", rng.integers(0, 4, frames).astype(np.int32))
    return f"scp:{d}/feats.scp", f"ark:{d}/targets.ark"


GET_EGS = ["nnet-get-egs", "--frames-per-eg", 4, "--left-context", 1, "--right-context", 1,
           "--num-utts-subset", 4, "--samples-per-iter", 40, "--num-frames-diagnostic", 16,
           "--num-train-frames-combine", 16]


# --- non-finite values are failures -----------------------------------------------------------

def test_nan_features_are_one_error_line_or_skipped_and_counted(tmp_path):
    feats, targets = write_data(tmp_path / "data", bad={5: (3, np.nan), 9: (0, np.inf)})
    line = error_line(run(*GET_EGS, feats, targets, tmp_path / "egs"))
    assert line.endswith("feats.scp: utterance 'utt005': 1 of 12 frames have NaN or infinite features "
                         "(first: frame 3); fix the features, or skip such utterances with --allow-nonfinite")
    assert not (tmp_path / "egs").exists()   # the dir it made goes, temp files and all
    r = run(*GET_EGS, "--allow-nonfinite", feats, targets, tmp_path / "egs", check=True)
    assert "Skipped 2 utterances with 2 frames of NaN or infinite features (--allow-nonfinite)." in r.stderr
    assert "utterance 'utt009': 1 of 12 frames have NaN or infinite features (first: frame 0); skipping it" in r.stderr
    for k in range(1, int((tmp_path / "egs/info/num_archives").read_text()) + 1):
        archive = egs.EgsArchive(tmp_path / f"egs/egs.{k}.ark")
        assert np.isfinite(archive.inputs).all()
        assert not {key.rsplit("-", 1)[0] for key in archive.keys()} & {"utt005", "utt009"}


@pytest.fixture
def nan_egs(tmp_path):
    """An egs dir whose one archive holds a NaN, and a small natural-gradient model for it."""
    d = write_egs_dir(tmp_path / "egs", num_archives=1, egs_per_archive=300)
    nan_archive(d, d / "egs.1.ark")
    (tmp_path / "m.yaml").write_text(SMALL_CONFIG)
    run("nnet-init", tmp_path / "m.yaml", tmp_path / "0.mdl", check=True)
    return d


def test_training_job_on_nan_fails_with_one_line_through_the_launcher(tmp_path, nan_egs):
    # The NaN would otherwise reach the natural-gradient eigendecomposition (a LinAlgError
    # traceback) and then the average. The driver sees a failed task, and no objective.
    r = run("nnet-queue", "local", "JOB=1:1", tmp_path / "log/train.0.JOB.log", "nnet-train-one-job",
            "--use-gpu=no", "--learning-rate=0.01", "--minibatch-size=64", "--job=JOB", "--archives-processed=0",
            tmp_path / "0.mdl", nan_egs, tmp_path / "1.JOB.mdl")
    log = tmp_path / "log/train.0.1.log"
    assert r.returncode == 1 and f"job failed, log is in {log}" in r.stderr
    text = log.read_text()
    assert "Traceback" not in text
    errors = [line for line in text.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "egs.1.ark: minibatch " in errors[0]
    assert "objective function is nan (non-finite)" in errors[0]
    assert tasklog.ended_code(str(log)) == 1 and logparse.train_objective(log) is None
    assert not (tmp_path / "1.1.mdl").exists() and temps(tmp_path) == []


def test_a_missing_or_non_finite_train_log_is_no_objective(tmp_path):
    assert logparse.train_objective(tmp_path / "nope.log") is None        # Kaldi: -100000
    (tmp_path / "t.log").write_text("LOG (x) Overall average objective function for 'output' is nan over 9 frames.\n")
    assert logparse.train_objective(tmp_path / "t.log") is None
    (tmp_path / "t.log").write_text("LOG (x) Overall average objective function for 'output' is -0.5 over 9 frames.\n")
    assert logparse.train_objective(tmp_path / "t.log") == -0.5


# --- killed writers ---------------------------------------------------------------------------

WRITER = """
import sys, time
from nnet_tools.fileio import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    open(tmp, "w").write("half of it")
    print("writing", flush=True)
    time.sleep(300)
"""


def test_killed_writer_leaves_no_partial_file_and_the_next_writer_sweeps_its_temp(tmp_path):
    target = tmp_path / "out/final.mdl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "writing\n"
    (stale,) = temps(tmp_path / "out")
    assert stale.startswith(f".tmp.{fileio._host()}.{proc.pid}.") and stale.endswith(".final.mdl")
    proc.kill()
    proc.wait()
    assert not target.exists()                       # no visible partial file
    (tmp_path / "out/keep").mkdir()                   # a live writer's temp is never touched
    live = tmp_path / f"out/.tmp.{fileio._host()}.{os.getpid()}.abc.other"
    live.write_text("mine")
    run(sys.executable, "-c", f"from nnet_tools.fileio import write_text; write_text({str(tmp_path / 'out/x')!r}, 'y')",
        check=True)
    assert temps(tmp_path / "out") == [live.name]


def test_a_write_that_fails_otherwise_says_why_in_one_line(tmp_path):
    from nnet_tools.errors import NnetError
    (tmp_path / "file").write_text("")
    with pytest.raises(NnetError, match=r"file/x.mdl: write failed: Not a directory$"):
        fileio.write_text(tmp_path / "file/x.mdl", "y")
    assert not fileio.disk_full(str(tmp_path), OSError(13, "Permission denied"))


def test_killed_get_egs_leaves_nothing_visible_and_the_next_run_cleans_up(tmp_path):
    feats, targets = write_data(tmp_path / "data")
    # Features from a pipe that stalls after the data: nnet-get-egs is then mid-run, its spool
    # directory made, when it is killed (with the pipe, its process group).
    stalled = f"ark:cat {tmp_path}/data/feats.ark; sleep 300 |"
    proc = subprocess.Popen([str(a) for a in GET_EGS + [stalled, targets, tmp_path / "egs"]],
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: (tmp_path / "egs").exists() and temps(tmp_path / "egs"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    (spool,) = temps(tmp_path / "egs")
    assert spool.endswith(".get-egs") and not (tmp_path / "egs/egs.1.ark").exists()
    assert not (tmp_path / "egs/info/num_archives").exists()
    run(*GET_EGS, feats, targets, tmp_path / "egs", check=True)
    assert temps(tmp_path / "egs") == [] and (tmp_path / "egs/info/num_archives").exists()


def test_sigterm_removes_a_programs_temp_files_and_still_ends_it_by_the_signal(tmp_path):
    """What scancel, qdel or a launcher stopping its tasks sends: unlike SIGKILL, it is caught,
    so nothing waits for the next run's sweep; the launcher still sees 'signal 15'."""
    feats, targets = write_data(tmp_path / "data")
    stalled = f"ark:cat {tmp_path}/data/feats.ark; sleep 300 |"
    proc = subprocess.Popen([str(a) for a in GET_EGS + [stalled, targets, tmp_path / "egs"]],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for(lambda: (tmp_path / "egs").exists() and temps(tmp_path / "egs"))
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM and "terminated (SIGTERM)" in err.splitlines()[-1]
    assert "Traceback" not in err and not (tmp_path / "egs").exists()


def test_a_stopped_task_lets_its_pipeline_clean_up(tmp_path):
    """nnet-queue stopping a task (Ctrl-C, scancel) whose command is a pipeline, as decode.sh's:
    the task's shell dies at once, and the group's SIGKILL followed, so the writer at the end of
    the pipe lost its SIGTERM clean-up (its temp file stayed, its last line was missing)."""
    write_data(tmp_path / "data")
    task = f"{{ cat {tmp_path}/data/feats.ark; sleep 300; }} | nnet-add-deltas ark:- ark,t:{tmp_path}/out/deltas.txt"
    proc = subprocess.Popen(["nnet-queue", "local", f"{tmp_path}/log/task.log", "bash", "-c", task],
                            stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (tmp_path / "out").exists() and temps(tmp_path / "out"))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "caught signal 15, stopped all tasks" in err
    log = (tmp_path / "log" / "task.log").read_text()
    assert "ERROR (nnet-add-deltas) terminated (SIGTERM)\n" in log and "# Ended (code 0; signal 15)" in log, log
    assert os.listdir(tmp_path / "out") == []


PROGRAM_STOPPED = """
import os, signal, sys
import click
from nnet_tools import log
from nnet_tools.cli.common import program

signal.signal(signal.SIGINT, signal.SIG_DFL)   # as an nnet-* program starts
setup = log.setup
def stopped_while_echoing(*args):   # a launcher's SIGTERM as the program prints its command line
    if sys.argv[1] == "early":
        os.kill(os.getpid(), signal.SIGTERM)
    setup(*args)
log.setup = stopped_while_echoing

@click.command()
@program("nnet-x")
def main():
    if sys.argv[1] == "together":   # Ctrl-C and the driver's SIGTERM at the same instant
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        os.kill(os.getpid(), signal.SIGINT)
    finally:   # and a second signal as it cleans up (the driver dying after Ctrl-C)
        os.kill(os.getpid(), signal.SIGTERM)
main(sys.argv[2:])
"""


@pytest.mark.parametrize("when", ["early", "late", "together"])
def test_a_signal_at_any_point_of_a_programs_life_ends_it_in_one_line(when):
    """Even as its handlers go in, a second one during the clean-up of the first, or two at once:
    never a traceback (a Ctrl-C'd run printed one from a launcher SIGTERMed during its first print)."""
    r = subprocess.run([sys.executable, "-c", PROGRAM_STOPPED, when], capture_output=True, text=True,
                       timeout=60)
    # the first signal handled decides (of two at once, SIGINT); the others are not heard
    code, last = (-signal.SIGTERM, "terminated (SIGTERM)") if when == "early" else (130, "interrupted")
    assert r.returncode == code and r.stderr.splitlines()[-1] == f"ERROR (nnet-x) {last}", r.stderr
    assert "Traceback" not in r.stderr and "race condition" not in r.stderr, r.stderr


# --- disk full --------------------------------------------------------------------------------

def test_disk_full_is_named_by_every_writer_and_leaves_no_temp(tmp_path, full_disk, small_model):
    feats, targets = write_data(tmp_path / "data")
    line = error_line(run(*GET_EGS, feats, targets, full_disk / "egs"))
    assert line.startswith("ERROR (nnet-get-egs) No space left on device: ") and str(full_disk / "egs") in line
    line = error_line(run("nnet-average-models", small_model[1], small_model[1], full_disk / "avg.mdl"))
    assert line == f"ERROR (nnet-average-models) No space left on device: {full_disk / 'avg.mdl'}"
    line = error_line(run("nnet-compute", small_model[1], feats, f"ark,scp:{full_disk}/out.ark,{full_disk}/out.scp"))
    assert line == f"ERROR (nnet-compute) No space left on device: {full_disk / 'out.ark'}"
    (full_disk / "filler").unlink()                        # space again: the next run works
    run("nnet-average-models", small_model[1], small_model[1], full_disk / "avg.mdl", check=True)
    assert temps(full_disk) == []
    assert sorted(os.listdir(full_disk)) == ["avg.mdl"]   # the egs dir nnet-get-egs made went again


# --- the local launcher -----------------------------------------------------------------------

def test_kill_9_of_nnet_queue_leaves_no_task_running(tmp_path):
    # Each task is a shell with a child (the training program, say), both recording their pids.
    (tmp_path / "task.sh").write_text("echo $$ > pid.$1; sleep 300 & echo $! > child.$1; wait")
    proc = subprocess.Popen(["nnet-queue", "local", "JOB=1:2", "log/s.JOB.log", "bash", "task.sh", "JOB"],
                            cwd=tmp_path, stderr=subprocess.DEVNULL)
    files = [tmp_path / f"{kind}.{t}" for kind in ("pid", "child") for t in (1, 2)]
    wait_for(lambda: all(f.exists() and f.read_text().strip() for f in files))
    pids = [int(f.read_text()) for f in files]
    assert all(not gone(p) for p in pids)
    proc.kill()                                                    # kill -9: no handler runs
    proc.wait()
    wait_for(lambda: all(gone(p) for p in pids), timeout=30)
    # Nothing writes into the logs any more; a new run of the same command owns them alone.
    r = subprocess.run(["nnet-queue", "local", "JOB=1:2", "log/s.JOB.log", "echo", "new", "JOB"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "log/s.2.log").read_text().count("# Ended") == 1


def test_exit_status_and_signals_pass_through_the_task_guard(tmp_path):
    (tmp_path / "task.sh").write_text('[ $1 = 1 ] || { [ $1 = 2 ] && exit 7 || kill -USR1 $$; }')
    r = subprocess.run(["nnet-queue", "local", "JOB=1:3", "log/g.JOB.log", "bash", "task.sh", "JOB"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and "2 / 3 failed" in r.stderr
    assert [tasklog.ended_code(str(tmp_path / f"log/g.{t}.log")) for t in (1, 2, 3)] == [0, 7, 128 + signal.SIGUSR1]
    assert "# Ended (code 0; signal 10)" in (tmp_path / "log/g.3.log").read_text()
