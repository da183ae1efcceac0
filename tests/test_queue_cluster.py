"""nnet-queue slurm / sge against real daemons (start them with tests/cluster/start-*.sh).

Without a reachable engine these tests skip, saying why; under CI (CI=true) they fail
instead, since CI starts both engines (with FAKE_GPUS=2) before the tests. The wrapper script
and the engines' status parsers are also tested without any engine.
"""
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest
from helpers import copy_recipe, error_line, queued_jobs, require, wait_for

from nnet_tools.queue import BACKENDS, parse_args, sge, slurm, wrapper

HEADER = re.compile(r"# (.*)\n# Started at .+\n#\n")
FOOTER = re.compile(r"(?:# Peak memory: \d+ kB\n)?# Accounting: time=\d+ threads=(\d+)\n"
                    r"# Ended \(code (\d+)(?:; signal (\d+))?\) at .+, elapsed time \d+ seconds\n$")

ENGINES = ("slurm", "sge")


@pytest.fixture(params=[pytest.param(e, marks=pytest.mark.cluster) for e in ENGINES])
def engine(request):
    require(request.param)
    return request.param


def queue(engine, cwd, *args, env=None, timeout=120):
    return subprocess.run(["nnet-queue", engine, *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


def read_log(path):
    """(command line, output, exit code, threads, signal) of one task log."""
    text = path.read_text()
    head, foot = HEADER.match(text), FOOTER.search(text)
    assert head and foot, text
    return (head.group(1), text[head.end():foot.start()], int(foot.group(2)), int(foot.group(1)),
            foot.group(3) and int(foot.group(3)))


# --- against the engines ------------------------------------------------------------------

def test_array_with_one_failing_task(engine, tmp_path):
    r = queue(engine, tmp_path, "JOB=1:3", "log/t.JOB.log", "bash", "-c",
              "echo task JOB on $HOSTNAME >&2; exit $((JOB == 2 ? 3 : 0))")
    assert r.returncode == 1
    assert "nnet-queue: 1 / 3 failed, log is in log/t.*.log" in r.stderr
    for task in (1, 2, 3):
        command, body, code, threads, _ = read_log(tmp_path / f"log/t.{task}.log")
        assert command == f'bash -c "echo task {task} on $HOSTNAME >&2; exit $(({task} == 2 ? 3 : 0))"'
        assert re.fullmatch(f"task {task} on \\S+\n", body)
        assert (code, threads) == (3 if task == 2 else 0, 1)
    assert os.access(tmp_path / "log/q/t.sh", os.X_OK)             # Kaldi's LOGDIR/q/<base>.sh
    assert not list((tmp_path / "log/q").glob("t.done.*"))          # markers cleaned up
    r = queue(engine, tmp_path, "log/one.log", "echo", "single job")
    assert r.returncode == 0, r.stderr
    assert read_log(tmp_path / "log/one.log")[1:3] == ("single job\n", 0)
    # The task's peak memory (guard.py, as in the local backend) ends its output.
    assert re.search(r"\nsingle job\n# Peak memory: [1-9]\d* kB\n# Accounting: ", (tmp_path / "log/one.log").read_text())


def test_a_refused_submission_keeps_the_earlier_logs(engine, tmp_path):
    """They were removed before submitting: a refused job left neither the old logs nor new ones."""
    assert queue(engine, tmp_path, "JOB=1:2", "log/x.JOB.log", "echo", "first", "JOB").returncode == 0
    before = {n: (tmp_path / "log" / n).read_text() for n in ("x.1.log", "x.2.log")}
    r = queue(engine, tmp_path, "--time", "garbage", "JOB=1:2", "log/x.JOB.log", "echo", "second", "JOB")
    assert r.returncode == 1 and "submitting log/x.*.log failed" in error_line(r)
    assert {n: (tmp_path / "log" / n).read_text() for n in before} == before
    assert queue(engine, tmp_path, "JOB=1:2", "log/x.JOB.log", "echo", "third", "JOB").returncode == 0
    assert "third 2" in (tmp_path / "log" / "x.2.log").read_text()
    assert not [p for p in (tmp_path / "log" / "q").iterdir() if ".old." in p.name]


def test_max_jobs_run_is_honoured(engine, tmp_path):
    # Each task marks itself running, records how many are, then unmarks itself; the node
    # has CPUs for two at once, so without the throttle two would be seen.
    (tmp_path / "run").mkdir()
    step = "touch run/JOB; ls run | wc -l >> counts; sleep 1; rm run/JOB"
    r = queue(engine, tmp_path, "--max-jobs-run", 1, "JOB=1:3", "log/m.JOB.log", "bash", "-c", step)
    assert r.returncode == 0, r.stderr
    assert [int(c) for c in (tmp_path / "counts").read_text().split()] == [1, 1, 1]


def test_sigterm_cancels_every_task(engine, tmp_path):
    # Two tasks run (a sleep each, pid recorded), the third waits in the queue.
    name = f"c{os.getpid()}.log"
    proc = subprocess.Popen(["nnet-queue", engine, "--max-jobs-run", "2", "JOB=1:3", f"log/c{os.getpid()}.JOB.log",
                             "sleep", "300", "&", "echo", "$!", ">", "pid.JOB", ";", "wait"],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: all((tmp_path / f"pid.{t}").exists() and (tmp_path / f"pid.{t}").read_text().strip()
                         for t in (1, 2)), timeout=60)
    sleeps = [int((tmp_path / f"pid.{t}").read_text()) for t in (1, 2)]
    assert queued_jobs(engine, name)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "caught signal 15, stopped all tasks" in stderr
    assert queued_jobs(engine, name) == set()                      # nothing left in the queue
    wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in sleeps), timeout=60)
    for task in (1, 2):     # the stopped tasks' logs are closed as the local backend does
        assert read_log(tmp_path / f"log/c{os.getpid()}.{task}.log")[4] == signal.SIGTERM
    assert not (tmp_path / f"log/c{os.getpid()}.3.log").exists()    # never started


@pytest.mark.parametrize("request_", [["--num-threads", "64"], ["--mem", "100T"], ["--gpu", "3"]])
def test_request_never_satisfiable_fails_fast(engine, tmp_path, request_):
    r = queue(engine, tmp_path, *request_, "JOB=1:2", "log/n.JOB.log", "true", timeout=60)
    assert re.search(f"ERROR .*{engine}: (submitting log/n.\\*.log failed|task 1 of job \\d+ can never run)",
                     error_line(r))
    assert queued_jobs(engine, "n.log") == set()


def test_engine_not_reachable_or_missing(engine, tmp_path):
    env = dict(os.environ)
    if engine == "slurm":   # a client configuration naming a port nothing listens on
        (tmp_path / "slurm.conf").write_text("ClusterName=x\nSlurmctldHost=localhost(127.0.0.1)\n"
                                             "SlurmctldPort=9\nMessageTimeout=1\nNodeName=x\n")
        env["SLURM_CONF"] = str(tmp_path / "slurm.conf")
        expected = "Unable to contact slurm controller"
    else:
        env["SGE_QMASTER_PORT"] = "9"
        expected = "unable to send message to qmaster"
    # Retried (Kaldi: 4 tries, 20 s apart; here 2 tries, 0.2 s apart), then one line.
    r = queue(engine, tmp_path, "--submit-tries", 2, "--submit-retry-delay", 0.2, "JOB=1:2", "log/u.JOB.log", "true",
              env=env)
    line = error_line(r)
    assert f"{engine}: submitting log/u.*.log failed: " in line and expected in line
    assert "(try 1 of 2)" in r.stderr and "trying again in 0.2 s" in r.stderr and "(try 2 of 2)" not in r.stderr
    (tmp_path / "queue.conf").write_text(f"[{engine}]\ncommand no-such-submit-command -x\n")
    line = error_line(queue(engine, tmp_path, "--config", "queue.conf", "log/u.log", "true"))
    assert f"{engine}: 'no-such-submit-command' not found on PATH" in line


def test_num_threads_and_memory_reach_the_engine(engine, tmp_path):
    shows = {"slurm": "$SLURM_CPUS_PER_TASK $SLURM_MEM_PER_CPU", "sge": "$NSLOTS $PE"}[engine]
    r = queue(engine, tmp_path, "--num-threads", 2, "--mem", "1G", "JOB=1:2", "log/n.JOB.log",
              "echo", "$OMP_NUM_THREADS", "$MKL_NUM_THREADS", shows)
    assert r.returncode == 0, r.stderr
    for task in (1, 2):
        _, body, _, threads, _ = read_log(tmp_path / f"log/n.{task}.log")
        assert threads == 2
        assert body == {"slurm": "2 2 2 1024\n", "sge": "2 2 2 smp\n"}[engine]


def test_pick_failed_reruns_only_failed_tasks(engine, tmp_path):
    # Tasks 2 and 4 fail on their first run only: the rerun is the non-contiguous set {2, 4}.
    (tmp_path / "task.sh").write_text('echo run >> ran.$1; [ $(wc -l < ran.$1) -gt 1 ] || [ $(($1 % 2)) = 1 ]')
    r = queue(engine, tmp_path, "JOB=1:5", "log/p.JOB.log", "bash", "task.sh", "JOB")
    assert r.returncode == 1 and "2 / 5 failed" in r.stderr
    r = queue(engine, tmp_path, "--pick", "failed", "JOB=1:5", "log/p.JOB.log", "bash", "task.sh", "JOB")
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / f"ran.{t}").read_text().count("run") for t in range(1, 6)] == [1, 2, 1, 2, 1]


def test_task_killed_outside_fails_with_engine_status(engine, tmp_path):
    # Task 2 is cancelled by someone else: its wrapper never finishes, the engine's record says why.
    proc = subprocess.Popen(["nnet-queue", engine, "--lost-grace", "20", "JOB=1:2", "log/k.JOB.log", "bash", "-c",
                             "[ JOB = 1 ] || { touch started; sleep 300; }"],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (tmp_path / "started").exists(), timeout=60)
    (job,) = queued_jobs(engine, "k.log")
    subprocess.run(["scancel", f"{job}_2"] if engine == "slurm" else ["qdel", job, "-t", "2"], check=True,
                   capture_output=True)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "1 / 2 failed, log is in log/k.*.log" in stderr
    assert "nnet-queue: failed: log/k.2.log" in stderr
    assert read_log(tmp_path / "log/k.1.log")[2] == 0
    text = (tmp_path / "log/k.2.log").read_text()
    assert re.search(r"# nnet-queue: .* task \d+\.2 ended \((state CANCELLED|exit status \d+).*\) "
                     r"without its wrapper finishing", text), text
    assert read_log(tmp_path / "log/k.2.log")[2] != 0


def test_ctrl_c_during_submission_leaves_no_job(engine, tmp_path):
    # Ctrl-C reaches the whole foreground process group (here: its own session), at delays
    # across the submission window, which opens when the task script is written. qsub/sbatch
    # must neither be cut off after the engine took the job, nor leave it running: whatever
    # the moment, no job stays in the queue. The jobs are held, so cancelling them is quick.
    (tmp_path / "held.conf").write_text({"slurm": "command sbatch --export=ALL --hold\n",
                                         "sge": "command qsub -cwd -S /bin/bash -j y -h\n"}[engine])
    names = []
    for i, delay in enumerate(0.015 * k for k in range(20)):
        names.append(f"i{os.getpid()}x{i}.log")
        proc = subprocess.Popen(["nnet-queue", engine, "--config", "held.conf", "JOB=1:2",
                                 f"log/{names[-1].replace('.log', '.JOB.log')}", "sleep", "60"],
                                cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True)
        wait_for(lambda: (tmp_path / f"log/q/{names[-1][:-4]}.sh").exists(), timeout=60)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGINT and "Traceback" not in stderr, stderr
        assert "caught signal 2, stopped all tasks" in stderr and "WARNING" not in stderr, stderr
    assert {name: queued_jobs(engine, name) for name in names} == {name: set() for name in names}


@pytest.mark.parametrize("error", ["Socket timed out on send/recv operation", "something unexpected"])
def test_a_job_whose_id_the_submission_lost_is_found(engine, tmp_path, error):
    # The submit command takes the job, then fails without printing its id. Timed out (worth
    # a retry): the job is found by its tag and waited for, not submitted twice. Any other
    # failure: the job is found and cancelled, so none runs unknown to the user.
    submit = {"slurm": "sbatch", "sge": "qsub"}[engine]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / submit).write_text(f'#!/bin/sh\n{shutil.which(submit)} "$@" >/dev/null\necho "{error}" >&2\nexit 1\n')
    (tmp_path / "bin" / submit).chmod(stat.S_IRWXU)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    r = queue(engine, tmp_path, "--submit-retry-delay", 0.1, "JOB=1:2", "log/f.JOB.log", "bash", "-c",
              "sleep 5; echo JOB >> ran", env=env)
    if error.startswith("Socket"):
        assert r.returncode == 0, r.stderr
    else:
        assert f"{engine}: submitting log/f.*.log failed: something unexpected" in error_line(r)
    wait_for(lambda: queued_jobs(engine, "f.log") == set(), timeout=60, interval=0.1)
    # Ran once each (not submitted twice), or not at all (cancelled).
    ran = (tmp_path / "ran").read_text().split() if (tmp_path / "ran").exists() else []
    assert sorted(ran) == (["1", "2"] if error.startswith("Socket") else [])


def test_max_wait_fails_a_task_that_never_ends(engine, tmp_path):
    r = queue(engine, tmp_path, "--max-wait", 3, "JOB=1:2", "log/w.JOB.log", "bash", "-c",
              "[ JOB = 1 ] || sleep 300")
    assert r.returncode == 1 and "nnet-queue: failed: log/w.2.log" in r.stderr
    assert read_log(tmp_path / "log/w.1.log")[2] == 0
    text = (tmp_path / "log/w.2.log").read_text()
    assert re.search(r"# nnet-queue: .* task \d+\.2 not finished after 3 s \(--max-wait\): cancelled", text), text
    assert read_log(tmp_path / "log/w.2.log")[2] == 1
    wait_for(lambda: queued_jobs(engine, "w.log") == set(), timeout=60, interval=0.1)


@pytest.mark.cluster
def test_user_time_limit_wins_over_the_gpu_line(tmp_path):
    require("slurm")
    if engine_gpus("slurm") < 1:
        pytest.skip("slurm offers no GPU (start it with FAKE_GPUS=2)")
    for order in (["--gpu", 1, "--time", "8:0:0"], ["--time", "8:0:0", "--gpu", 1]):
        r = queue("slurm", tmp_path, *order, "log/l.log", "squeue", "-h", "-j", "$SLURM_JOB_ID", "-o", "%l")
        assert r.returncode == 0, r.stderr
        assert read_log(tmp_path / "log/l.log")[1] == "8:00:00\n"


def engine_gpus(engine):
    if engine == "slurm":
        out = subprocess.run(["sinfo", "--noheader", "--format=%G"], capture_output=True, text=True).stdout
    else:
        host = subprocess.run(["qconf", "-sel"], capture_output=True, text=True).stdout.split()[0]
        out = subprocess.run(["qconf", "-se", host], capture_output=True, text=True).stdout
    m = re.search(r"gpu[:=](\d+)", out)
    return int(m.group(1)) if m else 0


def test_gpu_tasks_get_their_devices_from_the_engine(engine, tmp_path):
    if engine_gpus(engine) != 2:
        why = f"{engine} does not offer 2 GPUs (start it with FAKE_GPUS=2)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    # Grid Engine names no device: the wrapper takes free ones from nvidia-smi (a fake here).
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/nvidia-smi").write_text("#!/bin/sh\nprintf '0\\n1\\n'\n")
    (tmp_path / "bin/nvidia-smi").chmod(stat.S_IRWXU)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    (tmp_path / "run").mkdir()
    (tmp_path / "gpu.sh").write_text(
        "touch run/$CUDA_VISIBLE_DEVICES.$1; echo $(ls run) >> seen.$2; sleep 0.5; rm run/$CUDA_VISIBLE_DEVICES.$1")
    r = queue(engine, tmp_path, "--gpu", 1, "JOB=1:4", "log/g.JOB.log", "bash", "gpu.sh", "JOB", "one", env=env)
    assert r.returncode == 0, r.stderr
    for line in (tmp_path / "seen.one").read_text().splitlines():   # running at once: distinct GPUs
        devices = [name.split(".")[0] for name in line.split()]
        assert len(set(devices)) == len(devices) and set(devices) <= {"0", "1"}, line
    # Two GPUs each: both are given, so only one task runs although two CPUs are free.
    r = queue(engine, tmp_path, "--gpu", 2, "JOB=1:2", "log/h.JOB.log", "bash", "gpu.sh", "JOB", "two", env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "seen.two").read_text().split("\n") == ["0,1.1", "0,1.2", ""] or \
        (tmp_path / "seen.two").read_text().split("\n") == ["0,1.2", "0,1.1", ""]


def test_status_queries_back_off(engine, tmp_path):
    # Every status query goes through a counting stand-in for squeue / qstat.
    status = {"slurm": "squeue", "sge": "qstat"}[engine]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / status).write_text(f'#!/bin/sh\necho >> {tmp_path}/queries\nexec {shutil.which(status)} "$@"\n')
    (tmp_path / "bin" / status).chmod(stat.S_IRWXU)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    r = queue(engine, tmp_path, "log/b.log", "sleep", 4, env=env)
    assert r.returncode == 0, r.stderr
    # Asked after 1, 3, 7, 15 s (doubling), not every tenth of a second as markers are looked for.
    assert 1 <= len((tmp_path / "queries").read_text().split("\n")) - 1 <= 4


# --- without an engine ---------------------------------------------------------------------

def run_wrapper(tmp_path, args, task, env_extra=None, environ=None):
    spec = parse_args(args)
    files = wrapper.Files.for_spec(spec, token=7)
    text = wrapper.script_text(spec, files, "SLURM_ARRAY_TASK_ID", list(spec.tasks), environ=environ)
    (tmp_path / "w.sh").write_text(text)
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": str(task), **(env_extra or {})}
    os.makedirs(files.qdir, exist_ok=True)
    r = subprocess.run(["bash", str(tmp_path / "w.sh")], cwd=tmp_path, env=env, capture_output=True, text=True)
    return r, files


def test_wrapper_frames_the_log_and_maps_the_exit_status(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r, files = run_wrapper(tmp_path, ["JOB=1:3", "exp/JOB/x.JOB.log", "bash", "-c",
                                      "echo JOB $OMP_NUM_THREADS $MY_VAR; exit $((JOB * 50 - 13))"],
                           task=3, environ={"PATH": "/usr/bin:/bin", "MY_VAR": "not carried"})
    assert files.qdir == str(tmp_path / "exp/q") and files.script == str(tmp_path / "exp/q/x.sh")
    assert r.returncode == 1            # 137 (as if killed) reaches the engine as 1, never 100
    command, body, code, threads, _ = read_log(tmp_path / "exp/3/x.3.log")
    assert (command, body, code, threads) == ('bash -c "echo 3 $OMP_NUM_THREADS $MY_VAR; exit $((3 * 50 - 13))"',
                                              "3 1\n", 137, 1)
    assert os.path.exists(files.marker(3)) and files.finished() == {3}


def test_wrapper_sources_path_sh_only_if_present_and_carries_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/hello").write_text("#!/bin/sh\necho hello from PATH\n")
    (tmp_path / "bin/hello").chmod(stat.S_IRWXU)
    environ = {"PATH": f"{tmp_path}/bin:/usr/bin:/bin", "VIRTUAL_ENV": "/venv"}
    r, _ = run_wrapper(tmp_path, ["log/a.log", "hello", ";", "echo", "$VIRTUAL_ENV", "$FROM_PATH_SH"],
                       task=1, environ=environ)
    assert r.returncode == 0, r.stderr
    assert read_log(tmp_path / "log/a.log")[1] == "hello from PATH\n/venv\n"
    (tmp_path / "path.sh").write_text("export FROM_PATH_SH=sourced\n")
    r, _ = run_wrapper(tmp_path, ["log/a.log", "hello", ";", "echo", "$VIRTUAL_ENV", "$FROM_PATH_SH"],
                       task=1, environ=environ)
    assert read_log(tmp_path / "log/a.log")[1] == "hello from PATH\n/venv sourced\n"


def test_wrapper_skips_tasks_not_picked(tmp_path, monkeypatch):
    # Grid Engine runs one range; tasks in it that are not to run exit at once, log untouched.
    monkeypatch.chdir(tmp_path)
    spec = parse_args(["JOB=1:5", "log/s.JOB.log", "echo", "JOB"])
    files = wrapper.Files.for_spec(spec, token=1)
    os.makedirs(files.qdir)
    (tmp_path / "w.sh").write_text(wrapper.script_text(spec, files, "SGE_TASK_ID", [2, 4]))
    for task in (1, 2, 3, 4, 5):
        subprocess.run(["bash", "w.sh"], env={"PATH": "/usr/bin:/bin", "SGE_TASK_ID": str(task)}, check=True)
    assert sorted(p.name for p in (tmp_path / "log").glob("s.*.log")) == ["s.2.log", "s.4.log"]
    assert files.finished() == {2, 4}


def test_wrapper_takes_free_gpus_when_the_engine_names_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/nvidia-smi").write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n'\n")
    (tmp_path / "bin/nvidia-smi").chmod(stat.S_IRWXU)
    path = f"{tmp_path}/bin:/usr/bin:/bin"
    held = subprocess.Popen(["flock", "/tmp/nnet-queue.gpu0.lock", "sleep", "30"])   # GPU 0 is busy
    try:
        wait_for(lambda: subprocess.run(["flock", "-n", "/tmp/nnet-queue.gpu0.lock", "true"]).returncode != 0,
                 timeout=60)
        args = ["--gpu", "2", "log/g.log", "echo", "$CUDA_VISIBLE_DEVICES"]
        run_wrapper(tmp_path, args, task=1, environ={"PATH": path})
        assert read_log(tmp_path / "log/g.log")[1] == "1,2\n"
        run_wrapper(tmp_path, args, task=1, env_extra={"CUDA_VISIBLE_DEVICES": "5"}, environ={"PATH": path})
        assert read_log(tmp_path / "log/g.log")[1] == "5\n"         # the engine's choice stands
    finally:
        held.kill()
        held.wait()


SQUEUE = """\
5|COMPLETED|0|None
4|RUNNING|0|None
3|PENDING|0|JobArrayTaskLimit
2|FAILED|256|NonZeroExitCode
1|CANCELLED|15|None
7|PENDING|0|PartitionConfig
"""
QSTAT = """\
job-ID  prior   name       user         state submit/start at     queue                          slots ja-task-ID
-----------------------------------------------------------------------------------------------------------------
     25 0.50000 c.log      root         r     11/29/2026 16:13:13 all.q@vm                           1 1
     25 0.50000 c.log      root         Eqw   11/29/2026 16:13:13                                    1 2
     26 0.00000 d.log      root         qw    11/29/2026 16:13:13                                    1 3
"""
QACCT = """\
==============================================================
qname        all.q
jobnumber    5
taskid       1
failed       0
exit_status  0
==============================================================
qname        all.q
jobnumber    5
taskid       2
failed       100 : assumedly after job
exit_status  137                  (Killed)
"""


def test_engine_outputs_are_read_right():
    states = slurm.parse_squeue(SQUEUE)
    assert {t: (s.active, s.code) for t, s in states.items()} == \
        {5: (False, 0), 4: (True, None), 3: (True, None), 2: (False, 1), 1: (False, 128 + 15), 7: (True, None)}
    assert [t for t, s in states.items() if s.problem] == [7]
    assert not any(s.waiting for s in states.values())
    qstat_f = ("queuename   qtype resv/used/tot. load_avg arch     states\n"
               "all.q@a     BIP   0/0/2          0.1      lx-amd64 d\nall.q@b     BIP   0/1/2          0.1      lx-amd64\n")
    assert sge.parse_unavailable_queues(qstat_f) == []     # b still takes jobs
    assert sge.parse_unavailable_queues(qstat_f.replace("lx-amd64\n", "lx-amd64 u\n")) == ["all.q@a (d)", "all.q@b (u)"]
    drained = slurm.parse_squeue("8|PENDING|0|ReqNodeNotAvail, UnavailableNodes:vm\n9|PENDING|0|Resources\n")
    assert "ReqNodeNotAvail" in drained[8].waiting and "sinfo -R" in drained[8].waiting and not drained[9].waiting
    states = sge.parse_qstat(QSTAT, "25")
    assert sorted(states) == [1, 2] and states[2].problem and not states[1].problem
    assert sge.parse_error_reasons("error reason    2:      11/29/2026 16:07:40 [0:24246]: error: can't open "
                                   "output file \"/x\": No such file") == {2: "can't open output file \"/x\": No such file"}
    assert sge.parse_qacct(QACCT) == {1: (0, "0"), 2: (137, "100 : assumedly after job")}
    assert sge.job_name("3.log") == "j3.log"
    jobcomp = ("JobId=57 Name=t.log JobState=FAILED Partition=shared ArrayJobId=53 ArrayTaskId=2 "
               "DerivedExitCode=0:0 ExitCode=3:0\n"
               "JobId=58 Name=t.log JobState=CANCELLED ArrayJobId=53 ArrayTaskId=3 ExitCode=0:15\n"
               "JobId=59 Name=u.log JobState=COMPLETED ArrayJobId=59 ArrayTaskId=1 ExitCode=0:0\n")
    assert {t: (s.active, s.code) for t, s in slurm.parse_jobcomp(jobcomp, "53").items()} == \
        {2: (False, 3), 3: (False, 128 + 15)}


def test_array_requests_with_throttle():
    spec = parse_args(["--max-jobs-run", "2", "JOB=1:8", "log/a.JOB.log", "true"])
    files = wrapper.Files.for_spec(spec, token=1)
    tasks = [1, 2, 3, 5, 7, 8]                      # e.g. what --pick failed leaves
    assert "--array=1-3,5,7-8%2" in slurm.SlurmBackend(spec).submit_options(files, tasks)
    options = sge.SgeBackend(spec).submit_options(files, tasks)
    assert options[options.index("-t") + 1] == "1-8" and options[options.index("-tc") + 1] == "2"


# --- the digits recipe end to end, its jobs on the engine ------------------------------------

@pytest.mark.slow
def test_digits_recipe_trains_through_the_engine(engine, tmp_path):
    recipe = copy_recipe(tmp_path / "digits")
    env = dict(os.environ, train_cmd=f"nnet-queue {engine} --mem 2G")
    # 2 epochs (the recipe's default is 10): 2 iterations, of 2 and 3 jobs, keep CI short.
    r = subprocess.run(["./run.sh", "--num-epochs", "2"], cwd=recipe, env=env, capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    accuracy = float(re.search(r"^Test accuracy: (\S+)$", r.stdout, re.M).group(1))
    assert accuracy >= 0.93, r.stdout[-2000:]        # the local backend: 0.95 at 2 epochs
    # Every training iteration was one array job on the engine: its script in LOGDIR/q.
    log = recipe / "exp/nnet/log"
    iterations = sorted(int(p.name.split(".")[1]) for p in (log / "q").glob("train.*.sh"))
    assert iterations == list(range(len(re.findall(r"^Iter: ", r.stdout, re.M))))
    assert f"task=${{{BACKENDS[engine].task_variable}}}" in (log / "q/train.0.sh").read_text()


KALDI_LAUNCHERS = {"slurm": "slurm.pl", "sge": "queue.pl"}


def test_kaldis_own_launcher_finds_the_programs_through_path_sh(engine, tmp_path):
    """$train_cmd = Kaldi's slurm.pl / queue.pl (from $KALDI_ROOT): their jobs get only PATH and
    source ./path.sh, which must put the nnet-* programs on it (without it: command not found)."""
    kaldi = os.environ.get("KALDI_ROOT", "")
    launcher = os.path.join(kaldi, "egs/wsj/s5/utils/parallel", KALDI_LAUNCHERS[engine])
    if not kaldi or not os.path.exists(launcher):
        pytest.skip("set KALDI_ROOT to a Kaldi checkout to run Kaldi's own launchers")
    recipe = copy_recipe(tmp_path / "digits")
    # A PATH with the interpreter but not its scripts dir, as on a node whose login PATH lacks them.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/python3").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (tmp_path / "bin/python3").chmod(stat.S_IRWXU)
    env = dict(os.environ, PATH=f"{tmp_path}/bin:{os.path.dirname(shutil.which('qsub' if engine == 'sge' else 'sbatch'))}"
               ":/usr/bin:/bin")
    env.pop("PYTHONPATH", None)            # path.sh supplies the recipe's own toolkit too

    def launch():
        return subprocess.run([launcher, "JOB=1:2", "exp/log/init.JOB.log", "nnet-init", "--srand=JOB",
                               "conf/model.yaml", "exp/JOB.mdl"], cwd=recipe, env=env, capture_output=True,
                              text=True, timeout=300)
    r = launch()
    assert r.returncode == 0, r.stderr + (recipe / "exp/log/init.1.log").read_text()
    assert (recipe / "exp/1.mdl").exists() and (recipe / "exp/2.mdl").exists()
    assert "wrote exp/1.mdl" in (recipe / "exp/log/init.1.log").read_text()
    (recipe / "path.sh").unlink()
    assert launch().returncode != 0
    assert "nnet-init: command not found" in (recipe / "exp/log/init.1.log").read_text()


def test_found_jobs_are_read_right():
    assert slurm.parse_found("71|nnet-queue:9-1\n72|(null)\n71|nnet-queue:9-1\n73|nnet-queue:9-10\n", "9-1") == ["71"]
    text = ("job_number:                 14\ncontext:                    a=b, nnet_queue=9-1\n"
            "job_number:                 15\ncontext:                    nnet_queue=9-10\n")
    assert sge.parse_found(text, "9-1") == ["14"]


def test_wrapper_fails_clearly_without_gpus_to_take(tmp_path, monkeypatch):
    # Grid Engine names no device: no nvidia-smi, or every GPU held by other tasks, is a
    # failed task saying why, never a silent run on the CPU.
    monkeypatch.chdir(tmp_path)
    args = ["--gpu", "1", "log/g.log", "echo", "ran on $CUDA_VISIBLE_DEVICES"]
    r, _ = run_wrapper(tmp_path, args, task=1, environ={"PATH": "/usr/bin:/bin"})
    _, body, code, _, _ = read_log(tmp_path / "log/g.log")
    assert r.returncode == 1 and code == 1 and "ran on" not in body
    assert re.fullmatch(r"nnet-queue: --gpu 1: the engine named no GPU and there is no nvidia-smi on \S+ "
                        r"to find one\n", body)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/nvidia-smi").write_text("#!/bin/sh\nprintf '7\\n'\n")
    (tmp_path / "bin/nvidia-smi").chmod(stat.S_IRWXU)
    held = subprocess.Popen(["flock", "/tmp/nnet-queue.gpu7.lock", "sleep", "30"])
    try:
        wait_for(lambda: subprocess.run(["flock", "-n", "/tmp/nnet-queue.gpu7.lock", "true"]).returncode != 0,
                 timeout=60)
        run_wrapper(tmp_path, args, task=1, environ={"PATH": f"{tmp_path}/bin:/usr/bin:/bin"})
        _, body, code, _, _ = read_log(tmp_path / "log/g.log")
        assert code == 1 and re.fullmatch(r"nnet-queue: --gpu 1: only 0 GPU\(s\) of \S+ free \(the others are held "
                                          r"by nnet-queue tasks: /tmp/nnet-queue.gpu\*.lock\)\n", body), body
    finally:
        held.kill()
        held.wait()


def test_a_stray_task_never_writes_into_a_newer_runs_log(tmp_path, monkeypatch):
    # An old run's task still running when the same command is run again (its launcher was
    # killed): the new run replaces the log; the old task's output and footer go elsewhere.
    monkeypatch.chdir(tmp_path)
    spec = parse_args(["log/a.log", "touch", "started", ";", "while", "[", "!", "-e", "go", "]", ";", "do", "sleep",
                       "0.05", ";", "done", ";", "echo", "old", "output"])
    files = wrapper.Files.for_spec(spec, token=3)
    os.makedirs(files.qdir)
    (tmp_path / "w.sh").write_text(wrapper.script_text(spec, files, "SLURM_ARRAY_TASK_ID", [1]))
    old = subprocess.Popen(["bash", "w.sh"], env={"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": "1"})
    wait_for(lambda: (tmp_path / "started").exists(), timeout=60)
    from nnet_tools.queue import tasklog
    tasklog.write_header("log/a.log", "the new run")
    (tmp_path / "go").touch()
    assert old.wait(timeout=60) == 1
    text = (tmp_path / "log/a.log").read_text()
    assert text.startswith("# the new run\n# Started at ") and "old output" not in text and "# Ended" not in text
    assert files.finished() == set()


def test_a_task_the_engine_forgot_is_rechecked_before_it_counts_as_failed(tmp_path, monkeypatch):
    # The engine says a task ended well but its footer is not visible here (NFS attribute
    # caching): no verdict until the grace period is over. A failure the engine recorded
    # counts at once, with the engine's code.
    monkeypatch.chdir(tmp_path)
    spec = parse_args(["--lost-grace", "30", "JOB=1:3", "log/l.JOB.log", "true"])
    backend = slurm.SlurmBackend(spec)
    backend.files, backend.submitted = wrapper.Files.for_spec(spec, token=backend.tag), 0
    os.makedirs(backend.files.qdir)
    record = {1: slurm.TaskState(False, 0, None, "state COMPLETED"), 2: slurm.TaskState(False, 137, None, "state FAILED")}
    monkeypatch.setattr(backend, "exit_status", lambda job, task, state: (record[task].code, record[task].what))
    assert backend._lost("5", 1, record[1], grace_over=False) is None and not (tmp_path / "log/l.1.log").exists()
    (tmp_path / "log/l.3.log").write_text("# true\n# Started at x\n#\n# Accounting: time=0 threads=1\n"
                                          "# Ended (code 0) at x, elapsed time 0 seconds\n")
    assert backend._lost("5", 3, None, grace_over=False) == 0              # the footer turned up
    assert backend._lost("5", 2, record[2], grace_over=False) == 137
    assert backend._lost("5", 1, record[1], grace_over=True) == 1
    text = (tmp_path / "log/l.1.log").read_text()
    assert "task 5.1 ended (state COMPLETED; no '# Ended' footer after 30 s (--lost-grace))" in text
    assert read_log(tmp_path / "log/l.1.log")[2] == 1 and read_log(tmp_path / "log/l.2.log")[2] == 137


def waiting_said(tmp_path, engine, block, unblock):
    """Run a two-task nnet-queue call while ``block`` keeps every node from it, until nnet-queue
    says why its tasks wait; then ``unblock``. Returns the lines saying it, once it succeeded."""
    block()
    try:
        with open(tmp_path / "err", "w") as err_file:
            p = subprocess.Popen(["nnet-queue", engine, "JOB=1:2", "log/t.JOB.log", "echo", "JOB"], cwd=tmp_path,
                                 stdout=subprocess.DEVNULL, stderr=err_file, text=True)
        try:
            wait_for(lambda: "waiting" in (tmp_path / "err").read_text(), timeout=120,
                     what="nnet-queue to say why its tasks wait")
        except BaseException:
            p.kill()
            raise
    finally:
        unblock()
    assert p.wait(timeout=300) == 0, (tmp_path / "err").read_text()
    assert (tmp_path / "log" / "t.2.log").read_text().count("# Ended (code 0)") == 1
    return [line for line in (tmp_path / "err").read_text().splitlines() if "waiting" in line]


@pytest.mark.cluster
def test_a_task_waiting_on_a_drained_node_is_said_while_nnet_queue_waits(tmp_path):
    """The node drained: the task stays PENDING and nnet-queue said nothing; now it says why, once,
    and goes on when the node is back."""
    require("slurm")
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()[0]
    said = waiting_said(tmp_path, "slurm",
                        lambda: subprocess.run(["scontrol", "update", f"nodename={node}", "state=drain",
                                                "reason=nnet-tools test"], check=True),
                        lambda: subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=True))
    assert len(said) == 1, said   # once
    assert re.match(r"nnet-queue: Slurm job \d+: tasks 1-2 waiting: pending for reason .*(DRAINED|ReqNodeNotAvail)",
                    said[0]) and "sinfo -R" in said[0], said


@pytest.mark.cluster
def test_a_task_queued_while_grid_engines_queues_are_disabled_is_said(tmp_path):
    """Every queue instance disabled: the task stays qw; nnet-queue says so once and runs it when
    they are enabled again."""
    require("sge")
    listing = subprocess.run(["qstat", "-f"], capture_output=True, text=True, check=True).stdout
    queues = [line.split()[0] for line in listing.splitlines() if line.split() and "@" in line.split()[0]]
    said = waiting_said(tmp_path, "sge", lambda: subprocess.run(["qmod", "-d", *queues], check=True, capture_output=True),
                        lambda: subprocess.run(["qmod", "-e", *queues], check=True, capture_output=True))
    assert len(said) == 1 and f"{queues[0]} (d)" in said[0] and "qmod -e" in said[0], said
