"""The shell stage scripts' own checks: a bad number is one line and exit 1 before any work."""
import contextlib
import os
import re
import signal
import subprocess

import pytest

from helpers import REPO, wait_for


@pytest.mark.parametrize("script, args, message", [
    ("utils/split_data.sh", ["data/x", "0"], "Invalid num-split argument '0'"),      # once awk on split0/-nan
    ("utils/split_data.sh", ["data/x", "abc"], "Invalid num-split argument 'abc'"),
    ("steps/train_mono.sh", ["--stage", "abc", "data/x", "data/lang", "exp/mono"], "--stage must be an integer, got 'abc'"),
])
def test_stage_scripts_check_their_numbers(tmp_path, script, args, message):
    r = subprocess.run(["bash", REPO / script, *args], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and message in r.stderr.splitlines()[-1], r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_refused_nj_makes_no_dir_and_leaves_an_existing_dirs_num_jobs(tmp_path):
    """split_data.sh refuses more jobs than speakers: before, the step had already made its dirs
    and written the new num_jobs over an existing dir's (whose alignments later steps split by it)."""
    for name in ("steps", "utils"):
        (tmp_path / name).symlink_to(REPO / name)
    data, lang = tmp_path / "data", tmp_path / "lang"
    (lang / "phones").mkdir(parents=True)
    data.mkdir()
    for name, text in (("wav.scp", "u1 /x.wav"), ("utt2spk", "u1 s1"), ("spk2utt", "s1 u1"), ("text", "u1 one"),
                       ("feats.scp", "u1 f.ark:1"), ("cmvn.scp", "s1 c.ark:1")):
        (data / name).write_text(text + "\n")
    for name in ("L.fst", "topo", "phones/sets.int"):   # what train_mono.sh checks before the split
        (lang / name).write_text("")
    (lang / "words.txt").write_text("<eps> 0\none 1\n")
    (tmp_path / "exp/mono").mkdir(parents=True)
    (tmp_path / "exp/mono/num_jobs").write_text("1\n")
    for argv in (["steps/train_mono.sh", "--nj", "2", "data", "lang", "exp/mono"],
                 ["steps/make_feats.sh", "--nj", "2", "data", "exp/make_mfcc/log", "exp/make_mfcc/mfcc"]):
        r = subprocess.run(["bash", *argv], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 1 and r.stderr.splitlines()[-1].endswith("data has 1 speakers, fewer than 2 jobs")
    assert (tmp_path / "exp/mono/num_jobs").read_text() == "1\n" and os.listdir(tmp_path / "exp") == ["mono"]
    assert os.listdir(tmp_path / "exp/mono") == ["num_jobs"]


def test_parse_options_stops_at_double_dash_and_leaves_the_rest():
    """train_hybrid_dnn.sh passes what follows '--' to train_dnn.py; parse_options.sh once took
    '--' for an option and refused it ('invalid option --')."""
    r = subprocess.run(["bash", "-c", f'jobs=1:1; set -- --jobs 2:4 -- --trainer.chunk-training true a b; '
                        f'. {REPO}/steps/parse_options.sh; echo "$jobs|$*"'], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "2:4|-- --trainer.chunk-training true a b", r.stderr


ATOMIC_WRITE = REPO / "utils" / "atomic_write.sh"


def test_atomic_write_replaces_a_file_only_with_a_whole_new_one(tmp_path):
    """What the steps write with a shell redirect or cp (feats.scp, cmvn.scp, final.mdl, wer_10_0.0)
    goes through it: a step stopped midway left a truncated or empty file under the real name."""
    target = tmp_path / "feats.scp"
    target.write_text("old\n")
    failed = subprocess.run(["bash", "-c", f"{ATOMIC_WRITE} {target} bash -c 'echo half; exit 3'"],
                            capture_output=True, text=True)
    assert failed.returncode == 3 and target.read_text() == "old\n" and failed.stderr == ""
    # Ctrl-C: SIGINT to its process group, not ignored (a pytest-xdist worker ignores it)
    stopped = subprocess.Popen([ATOMIC_WRITE, target, "bash", "-c", "echo half; exec sleep 300"], start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: len(list(tmp_path.iterdir())) == 2)   # the temp file, beside it
        os.killpg(stopped.pid, signal.SIGINT)
        assert stopped.wait(timeout=30) == 130 and target.read_text() == "old\n"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stopped.pid, signal.SIGKILL)
    # a command may read the file it replaces (``sort f > f`` empties it)
    ok = subprocess.run([ATOMIC_WRITE, target, "sort", "-r", target], capture_output=True, text=True)
    assert ok.returncode == 0 and target.read_text() == "old\n"
    target.chmod(0o640)
    subprocess.run([ATOMIC_WRITE, target, "printf", "b\\na\\n"], check=True)
    assert target.read_text() == "b\na\n" and oct(target.stat().st_mode & 0o777) == oct(0o640)   # kept
    subprocess.run([ATOMIC_WRITE, tmp_path / "new.scp", "echo"], check=True)
    assert oct((tmp_path / "new.scp").stat().st_mode & 0o777) == oct(0o666 & ~umask())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feats.scp", "new.scp"]


def test_atomic_write_on_a_full_disk_names_the_file(full_disk):
    r = subprocess.run([ATOMIC_WRITE, full_disk / "final.mdl", "head", "-c", "100000", "/dev/zero"],
                       capture_output=True, text=True)
    # one line: not head's own, which names no file (cat's can name the file it reads)
    assert r.returncode != 0 and r.stderr == f"No space left on device: {full_disk}/final.mdl\n"
    assert os.listdir(full_disk) == ["filler"]


def umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_stage_done_records_wall_time_and_the_peak_of_the_stage_logs(tmp_path):
    """exp/stage_times gets 'NAME wall peak-MB' per stage, the peak from the '# Peak memory' lines
    of the task logs written during the stage only (none: 0, under the recipes' pipefail, where a
    grep finding nothing once ended the recipe); --stop-stage ends the stages run."""
    (tmp_path / "exp/old/log").mkdir(parents=True)
    (tmp_path / "exp/old/log/a.log").write_text("# Peak memory: 900000 kB\n")   # before this run
    os.utime(tmp_path / "exp/old/log/a.log", (1, 1))
    script = f"""set -euo pipefail; stage=; stop_stage=2; . {REPO}/steps/stages.sh
      mkdir -p exp/a/log
      if run_stage 1; then
        printf '# Peak memory: 307200 kB\\n' > exp/a/log/x.1.log
        printf 'no peak line\\n' > exp/a/log/x.2.log
        printf '# Peak memory: 102400 kB\\n' > exp/a/log/x.3.log
        stage_done first
      fi
      if run_stage 2; then echo 'a log without the line' > exp/a/log/y.log; stage_done second; fi
      if run_stage 3; then echo stage 3 ran; fi
      print_stage_times"""
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in (tmp_path / "exp/stage_times").read_text().splitlines()]
    assert [(name, peak) for name, _, peak in rows] == [("first", "300"), ("second", "0")]
    assert all(int(wall) <= 1 for _, wall, _ in rows)
    assert "stage 3 ran" not in r.stdout and re.search(r"^  first +[01] +300$", r.stdout, re.M), r.stdout
