"""nnet-queue with the local backend, run as a program; plus the spec/config parsing it shares."""
import os
import re
import signal
import subprocess
import sys

import pytest

from nnet_tools.errors import NnetError
from nnet_tools.queue import config, parse_args, quote_command, tasklog
from helpers import error_line, gone, wait_for

HEADER = re.compile(r"# (.*)\n# Started at .+\n#\n")
FOOTER = re.compile(r"(?:# Peak memory: \d+ kB\n)?# Accounting: time=\d+ threads=(\d+)\n"
                    r"# Ended \(code (\d+)\) at .+, elapsed time \d+ seconds\n$")


def queue_local(cwd, *args, env=None):
    return subprocess.run(["nnet-queue", "local", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env=env)


def read_log(path):
    """(command line, what the command printed, exit code, threads) of one task log."""
    text = path.read_text()
    head, foot = HEADER.match(text), FOOTER.search(text)
    assert head and foot, text
    return head.group(1), text[head.end():foot.start()], int(foot.group(2)), int(foot.group(1))




def test_help_after_the_backend_and_a_log_dir_removed_while_the_task_runs(tmp_path):
    r = queue_local(tmp_path, "--help")
    assert r.returncode == 0 and "Usage: nnet-queue BACKEND" in r.stdout   # not a log named --help
    (tmp_path / "gone" / "log").mkdir(parents=True)
    r = queue_local(tmp_path, "gone/log/a.log", "rm", "-rf", "gone")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "cannot finish log gone/log/a.log: No such file or directory; counting the task as failed" in r.stderr


def test_log_records_the_task_peak_memory(tmp_path):
    """The line steps/stages.sh reads for each stage's peak: the largest resident set of the
    task's processes (here a child of the task's shell that holds 150 MB), before Accounting."""
    (tmp_path / "hold.py").write_text("b = bytearray(150 << 20)\nb[::4096] = b'x' * len(b[::4096])\n")
    r = queue_local(tmp_path, "JOB=1:2", "log/m.JOB.log", "bash", "-c", f"[ JOB = 2 ] || {sys.executable} hold.py")
    assert r.returncode == 0, r.stderr
    peaks = []
    for task in (1, 2):
        text = (tmp_path / f"log/m.{task}.log").read_text()
        m = re.search(r"\n# Peak memory: (\d+) kB\n# Accounting: ", text)
        assert m, text
        peaks.append(int(m.group(1)))
    assert peaks[0] >= 150 << 10 and peaks[1] < 50 << 10, peaks


def test_array_with_one_failing_task(tmp_path):
    r = queue_local(tmp_path, "JOB=1:3", "log/t.JOB.log", "bash", "-c",
                    "echo task JOB >&2; exit $((JOB == 2 ? 3 : 0))")
    assert r.returncode == 1
    assert "nnet-queue: 1 / 3 failed, log is in log/t.*.log" in r.stderr
    for task in (1, 2, 3):
        command, body, code, threads = read_log(tmp_path / f"log/t.{task}.log")
        assert command == f'bash -c "echo task {task} >&2; exit $(({task} == 2 ? 3 : 0))"'
        assert body == f"task {task}\n"          # stderr lands in the log too
        assert code == (3 if task == 2 else 0)
        assert threads == 1


def test_a_failure_repeats_the_first_failed_tasks_error_line(tmp_path):
    """A step's user saw only '2 / 3 failed, log is in ...'; what went wrong (a full disk, a bad
    input, named by the program) was in the log."""
    r = queue_local(tmp_path, "JOB=1:3", "log/e.JOB.log", "bash", "-c",
                    "[ JOB = 1 ] || { echo 'ERROR (nnet-x) early' >&2; echo 'ERROR (nnet-x) No space left on device: JOB.ark' >&2; "
                    "echo 'LOG (nnet-x) after' >&2; exit 1; }")
    assert r.stderr.splitlines()[-3:] == [
        "nnet-queue: 2 / 3 failed, log is in log/e.*.log", "nnet-queue: failed: log/e.2.log log/e.3.log",
        "nnet-queue: log/e.2.log: ERROR (nnet-x) No space left on device: 2.ark"], r.stderr
    r = queue_local(tmp_path, "log/f.log", "false")   # no ERROR line: run.pl's line alone
    assert r.stderr.splitlines()[-1] == "nnet-queue: job failed, log is in log/f.log"


def test_single_job_success_and_failure(tmp_path):
    r = queue_local(tmp_path, "exp/log/one.log", "echo", "hello world")
    assert r.returncode == 0, r.stderr
    assert read_log(tmp_path / "exp/log/one.log")[:3] == ('echo "hello world"', "hello world\n", 0)
    r = queue_local(tmp_path, "exp/log/two.log", "false")
    assert r.returncode == 1
    assert "nnet-queue: job failed, log is in exp/log/two.log" in r.stderr
    assert read_log(tmp_path / "exp/log/two.log")[2] == 1


def test_any_variable_name_substituted_everywhere_and_escaped_pipe(tmp_path):
    r = queue_local(tmp_path, "TASK=2:3", "log/TASK/a.TASK.log", "echo", "--srand=TASK", "|", "tr", "a-z", "A-Z")
    assert r.returncode == 0, r.stderr
    for task in (2, 3):
        command, body, code, _ = read_log(tmp_path / f"log/{task}/a.{task}.log")
        assert (command, body, code) == (f"echo --srand={task} | tr a-z A-Z", f"--SRAND={task}\n", 0)
    assert not (tmp_path / "log/1").exists()


def test_single_numbered_task_names_its_log(tmp_path):
    r = queue_local(tmp_path, "JOB=4", "log/x.JOB.log", "exit", "2")
    assert r.returncode == 1
    assert "nnet-queue: job failed, log is in log/x.4.log" in r.stderr


def test_max_jobs_run_is_honoured(tmp_path):
    # Each task marks itself running, records how many are running, then unmarks itself.
    (tmp_path / "run").mkdir()
    step = "touch run/JOB; ls run | wc -l >> counts; sleep 0.3; rm run/JOB"
    r = queue_local(tmp_path, "--max-jobs-run", 2, "JOB=1:5", "log/c.JOB.log", "bash", "-c", step)
    assert r.returncode == 0, r.stderr
    counts = [int(c) for c in (tmp_path / "counts").read_text().split()]
    assert len(counts) == 5 and max(counts) <= 2
    (tmp_path / "counts").unlink()
    r = queue_local(tmp_path, "-tc", 3, "--max-jobs-run", 1, "JOB=1:3", "log/c.JOB.log", "bash", "-c", step)
    assert r.returncode == 0, r.stderr
    assert [int(c) for c in (tmp_path / "counts").read_text().split()] == [1, 1, 1]


def test_max_wait_kills_what_has_not_finished(tmp_path):
    """--max-wait was accepted and ignored here: a hung task held the launcher forever."""
    r = queue_local(tmp_path, "--max-wait", 3, "--max-jobs-run", 1, "JOB=1:3", "log/w.JOB.log", "bash", "-c",
                    "[ JOB = 1 ] || sleep 300")
    assert r.returncode == 1 and "nnet-queue: 2 / 3 failed, log is in log/w.*.log" in r.stderr
    assert read_log(tmp_path / "log/w.1.log")[2] == 0
    for task, ended in ((2, "# Ended (code 0; signal 15)"), (3, "# Ended (code 1)")):   # 3 never started
        text = (tmp_path / f"log/w.{task}.log").read_text()
        assert f"# nnet-queue: local task {task} not finished after 3 s (--max-wait): killed\n" in text
        assert ended in text


def test_num_threads_exported_to_task(tmp_path):
    r = queue_local(tmp_path, "--num-threads", 3, "--mem", "4G", "JOB=1:2", "log/n.JOB.log",
                    "echo", "$OMP_NUM_THREADS", "$MKL_NUM_THREADS")
    assert r.returncode == 0, r.stderr
    for task in (1, 2):
        _, body, _, threads = read_log(tmp_path / f"log/n.{task}.log")
        assert (body, threads) == ("3 3\n", 3)


def test_task_keeps_the_launchers_lowered_priority(tmp_path):
    # Each task gets its own session; where the kernel shares CPU time out per session
    # (sched_autogroup), the session itself must carry the launcher's nice value.
    r = subprocess.run(["nice", "-n", "7", "nnet-queue", "local", "log/p.log", "bash", "-c",
                        "nice; cat /proc/self/autogroup 2>/dev/null || true"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    body = read_log(tmp_path / "log/p.log")[1].split("\n")
    assert body[0] == "7"
    if os.path.exists("/proc/self/autogroup"):
        assert body[1].endswith(" nice 7"), body


@pytest.mark.serial   # the GPU locks are machine-wide: a cluster test holds gpu7's
def test_gpu_tasks_get_distinct_devices(tmp_path):
    # Two visible GPUs, one per task: at most two tasks run, never sharing a device.
    (tmp_path / "run").mkdir()
    (tmp_path / "gpu.sh").write_text(
        "touch run/$CUDA_VISIBLE_DEVICES.$1; echo $(ls run) >> seen; sleep 0.2; rm run/$CUDA_VISIBLE_DEVICES.$1")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="5,7")
    r = queue_local(tmp_path, "--gpu", 1, "JOB=1:4", "log/g.JOB.log", "bash", "gpu.sh", "JOB", env=env)
    assert r.returncode == 0, r.stderr
    for line in (tmp_path / "seen").read_text().splitlines():
        devices = [name.split(".")[0] for name in line.split()]
        assert 1 <= len(devices) <= 2 and len(set(devices)) == len(devices)
        assert set(devices) <= {"5", "7"}
    r = queue_local(tmp_path, "--gpu", 3, "log/g.log", "true", env=env)
    assert "each task needs 3 GPUs but only 2" in error_line(r)


def test_pick_failed_reruns_only_unfinished(tmp_path):
    # Task 2 fails on its first run only.
    (tmp_path / "task.sh").write_text('echo run >> ran.$1; exit $(( $(wc -l < ran.$1) == 1 && $1 == 2 ))')
    r = queue_local(tmp_path, "JOB=1:3", "log/p.JOB.log", "bash", "task.sh", "JOB")
    assert r.returncode == 1
    r = queue_local(tmp_path, "--pick", "incomplete", "JOB=1:3", "log/p.JOB.log", "bash", "task.sh", "JOB")
    assert r.returncode == 1 and "1 / 3 failed" in r.stderr        # failed task not rerun
    r = queue_local(tmp_path, "--pick", "failed", "JOB=1:3", "log/p.JOB.log", "bash", "task.sh", "JOB")
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / f"ran.{t}").read_text().count("run") for t in (1, 2, 3)] == [1, 2, 1]


@pytest.mark.parametrize("args, message", [
    (["JOB=0:3", "log/a.JOB.log", "true"], "invalid job range JOB=0:3: start must be >= 1"),
    (["JOB=3:1", "log/a.JOB.log", "true"], "invalid job range JOB=3:1: start is after end"),
    (["JOB=1:x", "log/a.JOB.log", "true"], "invalid job range JOB=1:x"),
    (["JOB=1:2", "JOB=1:3", "log/a.JOB.log", "true"], "two job ranges, JOB=1:2 and JOB=1:3"),  # once a log name
    (["JOB=1:99999999999", "log/a.JOB.log", "true"], "more than 1000000 tasks"),               # once a MemoryError
    (["JOB=1:3", "log/a.log", "true"], "3 tasks would all write to one log file log/a.log"),
    (["JOB=1:3", "log/a.JOB.log"], "no command given after the log file log/a.JOB.log"),
    (["--max-jobs-run", "0", "log/a.log", "true"], "invalid value '0' for --max-jobs-run"),
    (["--pick", "some", "log/a.log", "true"], "invalid value 'some' for --pick"),
])
def test_bad_input_one_line(tmp_path, args, message):
    assert message in error_line(queue_local(tmp_path, *args))
    assert not (tmp_path / "log").exists()


def test_unknown_backend(tmp_path):
    r = subprocess.run(["nnet-queue", "pbs", "log/a.log", "true"], cwd=tmp_path, capture_output=True, text=True)
    assert "unknown backend 'pbs' (known: local, sge, slurm)" in error_line(r)


def test_sigterm_kills_running_tasks(tmp_path):
    # Each task backgrounds a sleep, records its pid and waits for it.
    proc = subprocess.Popen(["nnet-queue", "local", "JOB=1:2", "log/s.JOB.log",
                             "sleep", "30", "&", "echo", "$!", ">", "pid.JOB", ";", "wait"],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    pids = [tmp_path / "pid.1", tmp_path / "pid.2"]
    wait_for(lambda: all(p.exists() and p.read_text().strip() for p in pids))
    sleeps = [int(p.read_text()) for p in pids]
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "caught signal 15" in stderr
    wait_for(lambda: all(gone(pid) for pid in sleeps))
    for task in (1, 2):          # the killed tasks' logs are closed with a footer
        assert "# Ended (code 0; signal 15)" in (tmp_path / f"log/s.{task}.log").read_text()


def test_an_interrupted_launcher_stays_deaf_to_further_signals():
    """Ctrl-C reaches nnet-queue, and its driver's SIGTERM too, even at the same instant: the
    second signal must not raise as the launcher exits (it printed a traceback), nor have Python
    print 'Signal 15 ignored due to race condition'."""
    script = """
import os, signal, time
from nnet_tools.queue.backend import Interrupted, interruptible
saved = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
with interruptible():   # no signal: the handlers are given back
    pass
assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == saved
try:
    with interruptible():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        time.sleep(5)
except Interrupted as e:
    print("interrupted by", e.signum, flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.5)
print("still here")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "interrupted by 2\nstill here\n", "")


# Library-level: what the engine backends will share.

def test_quote_command_as_kaldi():
    assert quote_command(["a", "b c", 'say "x y"', "|", "ark:gunzip -c a.gz |"]) == \
        """a "b c" 'say "x y"' | "ark:gunzip -c a.gz |\""""


def test_parse_options_around_the_range():
    spec = parse_args(["--mem", "2G", "JOB=2:4", "--time=1:00:00", "-q", "g.q", "-pe", "smp", "4",
                       "log/JOB.log", "prog", "--srand=JOB", "-x"])
    assert (spec.name, spec.start, spec.end, spec.log) == ("JOB", 2, 4, "log/JOB.log")
    assert spec.options == {"mem": "2G", "time": "1:00:00"}
    assert spec.engine_args == ["-q", "g.q", "-pe", "smp", "4"]
    assert spec.command_for(3) == "prog --srand=3 -x"
    assert spec.log_glob() == "log/*.log"


def test_ended_code_reads_last_footer(tmp_path):
    log = str(tmp_path / "a.log")
    assert tasklog.ended_code(log) is None
    started = tasklog.write_header(log, "cmd")
    assert tasklog.ended_code(log) is None
    tasklog.write_footer(log, started, -9)
    assert tasklog.ended_code(log) == 128 + 9
    tasklog.write_footer(log, started, 0)
    assert tasklog.ended_code(log) == 0


def test_config_maps_options_to_engine_flags(tmp_path):
    sge = config.load("sge", os.path.join(os.path.dirname(__file__), "..", "conf", "nnet-queue.conf"))
    assert sge.flags({"mem": "2G", "num_threads": "4", "gpu": "1", "pick": "all"}) == \
        ["-l", "mem_free=2G,ram_free=2G", "-pe", "smp", "4", "-l", "gpu=1", "-q", "*.q"]
    assert sge.flags({"num_threads": "1"}) == []               # special case wins, default gpu=0
    slurm = config.load("slurm", os.path.join(os.path.dirname(__file__), "..", "conf", "nnet-queue.conf"))
    assert slurm.command == ["sbatch", "--export=ALL", "--ntasks-per-node=1"]   # no login shell per task
    assert slurm.flags({"time": "1:0:0"}) == ["--time", "1:0:0", "-p", "shared"]
    # The gpu line adds --time 4:0:0; the user's own --time comes last, so it wins in any order.
    for options in ({"gpu": "1", "time": "8:0:0"}, {"time": "8:0:0", "gpu": "1"}):
        assert slurm.flags(options)[-2:] == ["--time", "8:0:0"]
        assert [f for f in sge.flags(options) if "h_rt" in f] == ["h_rt=8:0:0"]
    mixed = config.parse("command qsub\noption gpu=* -l gpu=$0,h_rt=4:0:0\noption time=* -l h_rt=$0\n", "sge", "x")
    assert mixed.flags({"time": "8:0:0", "gpu": "1"}) == ["-l", "gpu=1,h_rt=4:0:0", "-l", "h_rt=8:0:0"]
    with pytest.raises(NnetError, match="option --foo-bar 3 is not described"):
        slurm.flags({"foo_bar": "3"})
    # The documented file and the built-in defaults agree.
    for engine in ("slurm", "sge"):
        shipped = config.load(engine, os.path.join(os.path.dirname(__file__), "..", "conf", "nnet-queue.conf"))
        builtin = config.parse(config.BUILTIN, engine, "built-in")
        assert (shipped.command, shipped.general, shipped.special, shipped.defaults) == \
            (builtin.command, builtin.general, builtin.special, builtin.defaults)
    (tmp_path / "kaldi.conf").write_text("command sbatch\noption mem=* --mem $0\nbogus line\n")
    with pytest.raises(NnetError, match="kaldi.conf: line 3: cannot parse 'bogus line'"):
        config.load("slurm", str(tmp_path / "kaldi.conf"))
    (tmp_path / "latin1.conf").write_bytes(b"command sbatch -A caf\xe9\n")   # the message named no file
    with pytest.raises(NnetError, match=r"latin1.conf: queue config is not UTF-8 text \(byte 0xe9 at offset 21\)"):
        config.load("slurm", str(tmp_path / "latin1.conf"))


def test_config_files_kaldi_reads(tmp_path, monkeypatch, caplog):
    """Without --config: conf/slurm.conf (slurm.pl's) / conf/queue.conf (queue.pl's), section-less;
    else our combined conf/nnet-queue.conf; else built in."""
    monkeypatch.chdir(tmp_path)
    assert config.load("slurm").source == config.load("sge").source == "built-in queue config"
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "nnet-queue.conf").write_text("[slurm]\ncommand sbatch -A ours\n[sge]\ncommand qsub -A ours\n")
    assert config.load("slurm").command == ["sbatch", "-A", "ours"] and config.load("sge").command == ["qsub", "-A", "ours"]
    # A Kaldi conf/slurm.conf (the issue's: --partition=cpu) wins for slurm, and only for slurm.
    (tmp_path / "conf" / "slurm.conf").write_text(
        "command sbatch --export=PATH --ntasks-per-node=1\noption mem=* --mem-per-cpu $0\noption mem=0\n"
        "default gpu=0\noption gpu=0 --partition=cpu\noption gpu=* -p gpu --gres=gpu:$0\n"
        "option account=*          # flag-less: any --account is accepted and adds nothing\n"
        "option qos=* --qos=high   # no $0: slurm.pl warns and adds the flags as they are\n")
    slurm = config.load("slurm")
    assert slurm.source == "conf/slurm.conf"
    assert slurm.flags({"mem": "2G"}) == ["--mem-per-cpu", "2G", "--partition=cpu"]
    assert slurm.flags({"account": "proj7", "qos": "x"}) == ["--qos=high", "--partition=cpu"]
    assert config.load("sge").source == "conf/nnet-queue.conf"
    (tmp_path / "conf" / "queue.conf").write_text("command qsub -v PATH -cwd -S /bin/bash -j y\n"
                                                  "option mem=* -l mem_free=$0\noption project=*\n")
    sge = config.load("sge")
    assert sge.source == "conf/queue.conf" and sge.flags({"mem": "1G", "project": "p"}) == ["-l", "mem_free=1G"]
    with pytest.raises(NnetError, match="option --gpu 1 is not described"):
        sge.flags({"gpu": "1"})
    # queue.pl refuses an 'option x=* flags' line without $0.
    (tmp_path / "conf" / "queue.conf").write_text("command qsub\noption qos=* -l qos=high\n")
    with pytest.raises(NnetError, match="line 2: 'option qos=\\*' needs \\$0"):
        config.load("sge")
    # Our old combined conf/queue.conf (with a [slurm] section): slurm no longer reads it, and says so.
    for name in ("slurm.conf", "nnet-queue.conf"):
        (tmp_path / "conf" / name).unlink()
    (tmp_path / "conf" / "queue.conf").write_text("[slurm]\ncommand sbatch\n[sge]\ncommand qsub\n")
    with caplog.at_level("WARNING", logger="nnet_tools"):
        assert config.load("slurm").source == "built-in queue config"
    assert "conf/queue.conf has a [slurm] section, which nnet-queue slurm no longer reads" in caplog.text


def test_a_command_with_bytes_that_are_not_utf8(tmp_path):
    """A Latin-1 file name reaches the task as bytes, as under run.pl (once a UnicodeEncodeError)."""
    name = b"caf\xe9.txt"
    (tmp_path / os.fsdecode(name)).write_text("hello\n")
    r = subprocess.run([b"nnet-queue", b"local", b"log/l.log", b"cat", name], cwd=tmp_path, capture_output=True)
    assert r.returncode == 0, r.stderr
    log = (tmp_path / "log" / "l.log").read_bytes()
    assert log.startswith(b"# cat " + name + b"\n") and b"\nhello\n" in log
