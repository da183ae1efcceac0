"""The driver under real faults (real processes, real signals): a training job killed mid-iteration,
the driver killed and run again, two drivers on one dir. Each run is compared with an undisturbed
run: the same final model, bit for bit (a re-run job has the same inputs and seed)."""
import os
import re
import shlex
import signal
import subprocess

import pytest
import torch

from helpers import REPO, SMALL_CONFIG, queued_jobs, require, wait_for, write_egs_dir

DRIVER = REPO / "steps" / "train_dnn.py"


def driver_argv(tmp, exp):
    """Two iterations, of 2 and 3 jobs (1.5 epochs of 4 archives); the faults strike the second."""
    return ["python3", str(DRIVER), "--cmd", "nnet-queue local", "--config", str(tmp / "model.yaml"),
            "--trainer.num-epochs", "1.5", "--trainer.optimization.num-jobs-initial", "2",
            "--trainer.optimization.num-jobs-final", "3", "--trainer.optimization.minibatch-size", "64",
            "--trainer.optimization.initial-effective-lrate", "0.003",
            "--trainer.optimization.final-effective-lrate", "0.001", "--egs.dir", str(tmp / "egs"), "--dir", str(exp)]


def start(tmp, exp):
    return subprocess.Popen(driver_argv(tmp, exp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def processes(*patterns, exclude=("\0",)):
    """pids of processes whose command line contains every pattern and none of ``exclude``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if all(p in cmdline for p in patterns) and not any(x in cmdline for x in exclude):
                found.append(int(pid))
    return found


def final_state(exp):
    return torch.load(exp / "final.mdl", weights_only=True)["state"]


def valid_accuracy(exp):
    return re.search(r"Overall accuracy for 'output' is (\S+)", (exp / "log" / "compute_prob_valid.final.log").read_text())[1]


def same_model(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    write_egs_dir(tmp / "egs")
    (tmp / "model.yaml").write_text(SMALL_CONFIG)
    r = subprocess.run(driver_argv(tmp, tmp / "clean"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return tmp, final_state(tmp / "clean")


def test_killed_training_job_is_retried_and_the_run_finishes_as_if_undisturbed(setup):
    tmp, clean = setup
    exp = tmp / "kill_job"
    p = start(tmp, exp)
    # The training program itself: not nnet-queue, nor the guard or shell it runs the task under.
    victim = wait_for(lambda: processes("--job=2 --archives-processed=2 ", f"{exp}/1.mdl",
                                        exclude=("nnet-queue", "guard.py", "bash")), timeout=120,
                      what="job 2 of iteration 1")
    os.kill(victim[0], signal.SIGKILL)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    assert "job 2 of iteration 1 failed" in err and "retry 1/2" in err
    assert "# Ended (code 0; signal 9)" in (exp / "log" / "train.1.2.log.failed.1").read_text()
    assert same_model(final_state(exp), clean)


def stop_job_2_of_iteration_1(exp):
    """SIGSTOP the training program of job 2, iteration 1: it holds its cores and says nothing more."""
    victim = wait_for(lambda: processes("--job=2 --archives-processed=2 ", f"{exp}/1.mdl",
                                        exclude=("nnet-queue", "guard.py", "bash")), timeout=600,
                      what="job 2 of iteration 1")
    os.kill(victim[0], signal.SIGSTOP)


def test_a_stopped_job_is_stopped_at_its_stall_limit_and_the_run_finishes_as_if_undisturbed(setup):
    """Default options: the limit is 4 x iteration 0's longest job, at least 60 s (it once waited
    forever, the lock's heartbeat fresh)."""
    tmp, clean = setup
    exp = tmp / "stop_job"
    p = start(tmp, exp)
    stop_job_2_of_iteration_1(exp)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    # 60 s, unless iteration 0's jobs took over 15 s on a loaded machine
    limit = re.search(r"job 2 of iteration 1 stalled \(its log did not grow for (\d+) s\) and was stopped", err)
    assert limit and int(limit[1]) >= 60 and "retry 1/2" in err, err[-2000:]
    assert f"stalled: its log did not grow for {limit[1]} s (--stall-limit): killed" in \
        (exp / "log" / "train.1.2.log.failed.1").read_text()
    assert same_model(final_state(exp), clean)


def test_killed_driver_leaves_no_task_and_the_same_command_resumes(setup):
    tmp, clean = setup
    exp = tmp / "kill_driver"
    p = start(tmp, exp)
    wait_for(lambda: processes("--archives-processed=2 ", f"{exp}/1.mdl"), timeout=120, what="iteration 1's jobs")
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    wait_for(lambda: not processes(str(exp)), timeout=30, what="the driver's tasks to die")
    again = subprocess.run(driver_argv(tmp, exp), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "taking over a stale lock" in again.stderr
    assert "resuming at iteration 1" in again.stdout
    assert same_model(final_state(exp), clean)
    assert not list(exp.glob(".tmp.*")) and not (exp / "driver.lock").exists()


def test_ctrl_c_stops_the_run_in_one_line_that_says_how_to_resume(setup):
    """SIGINT to the driver's process group, as a terminal's Ctrl-C: it was a traceback."""
    tmp, _ = setup
    exp = tmp / "ctrl_c"
    # In iteration 1's jobs, as its diagnostics' launchers start: one SIGTERMed by the driver
    # while it printed its command line printed a traceback (1 run in 5 to 20 then).
    argv = driver_argv(tmp, exp)
    # A session of its own, SIGINT not ignored (a background shell job would inherit it ignored).
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: processes("--archives-processed=2 ", f"{exp}/1.mdl"), timeout=120, what="iteration 1's jobs")
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err
    # the last two lines: what a task stopped by it says comes before them (it came after)
    assert err.splitlines()[-2:] == ["steps/train_dnn.py: interrupted",
                                     f"steps/train_dnn.py: to resume: {shlex.join(argv[1:])}"], err
    wait_for(lambda: not processes(str(exp)), timeout=30, what="the driver's tasks to die")
    assert not (exp / "driver.lock").exists()


def test_ctrl_c_while_sub_model_drivers_train_stops_them_all_and_says_how_to_resume(setup):
    """The nested case: train_partitioned.py's launcher runs a train_dnn.py per sub-model, each with
    its own launcher and jobs. Ctrl-C stops all of them; the last line is the command that resumes."""
    tmp, _ = setup
    exp = tmp / "ctrl_c_partitioned"
    argv = ["python3", str(REPO / "steps" / "train_partitioned.py"), "--sub-mode", "driver", "--stop-stage", "1",
            "--sub.num-epochs", "0.25", "--trainer.optimization.minibatch-size", "64",
            "--train-opts", "--trainer.optimization.do-final-combination false",
            str(tmp / "model.yaml"), str(tmp / "egs"), str(exp)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: processes("nnet-train-one-job", f"{exp}/sub.2/0.mdl"), timeout=120,
             what="sub-model 2's first job")
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err, err
    *_, said, resume = err.splitlines()
    assert said == "steps/train_partitioned.py: interrupted", err
    assert resume == f"steps/train_partitioned.py: to resume: {shlex.join(argv[1:2] + ['--stage', '1'] + argv[2:])}"
    # (that a killed sub-model driver's run goes on is test_killed_driver_leaves_no_task...'s)
    wait_for(lambda: not processes(str(exp)), timeout=30, what="every process of the run to die")


def test_ctrl_c_while_the_driver_starts_ends_it_quietly(setup):
    """Ctrl-C while Python imports torch (seconds) was a KeyboardInterrupt traceback; now the
    driver dies of the signal, as a Kaldi script does, before it has started anything."""
    tmp, _ = setup
    exp = tmp / "ctrl_c_early"

    def importing_torch(pid):
        try:
            return "libtorch" in open(f"/proc/{pid}/maps").read()
        except OSError:
            return False
    p = subprocess.Popen(driver_argv(tmp, exp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: importing_torch(p.pid), timeout=60, what="the driver to import torch")
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert "Traceback" not in err and p.returncode in (-signal.SIGINT, 130), (p.returncode, err)


def test_second_driver_on_the_same_dir_is_refused(setup):
    tmp, _ = setup
    exp = tmp / "two"
    first = start(tmp, exp)
    wait_for(lambda: (exp / "driver.lock").exists(), timeout=120, what="the first driver's lock")
    second = subprocess.run(driver_argv(tmp, exp), capture_output=True, text=True)
    first.kill()
    first.communicate()
    assert second.returncode == 1
    assert "driver.lock: another driver is running in this dir (host" in second.stderr
    assert f"pid {first.pid}" in second.stderr


def test_diverging_learning_rate_stops_the_run_saying_diverged(setup):
    tmp, _ = setup
    (tmp / "loose.yaml").write_text(SMALL_CONFIG.replace("dim: 16}", "dim: 16, max-change: 0}")
                                    .replace("dim: 4}", "dim: 4, max-change: 0}"))
    argv = driver_argv(tmp, tmp / "diverge")
    argv[argv.index("--config") + 1] = str(tmp / "loose.yaml")
    argv[argv.index("--trainer.optimization.initial-effective-lrate") + 1] = "1000"
    r = subprocess.run(argv + ["--trainer.max-param-change", "0", "--trainer.max-retries", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("steps/train_dnn.py: ") and "diverged" in last, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    # the diagnostics it had started ran to their end first, as Kaldi's do
    diagnostics = list((tmp / "diverge" / "log").glob("compute_prob_*.log"))
    assert diagnostics and all("# Ended (code 0)" in d.read_text() for d in diagnostics)


@pytest.mark.parametrize("engine", [pytest.param(e, marks=pytest.mark.cluster) for e in ("slurm", "sge")])
def test_a_job_cancelled_on_the_engine_is_retried_and_the_run_ends_as_undisturbed(setup, engine):
    require(engine)
    tmp, clean = setup
    exp = tmp / f"cancel_{engine}"
    argv = driver_argv(tmp, exp)
    argv[argv.index("--cmd") + 1] = f"nnet-queue {engine} --mem 1G"
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = exp / "log" / "train.1.2.log"
        (job,) = wait_for(lambda: started.exists() and queued_jobs(engine, "train.1.log"), timeout=600,
                          what="iteration 1's array job to run")
        subprocess.run(["scancel", f"{job}_2"] if engine == "slurm" else ["qdel", job, "-t", "2"], check=True,
                       capture_output=True)
        out, err = p.communicate(timeout=900)
    finally:
        p.kill()
    assert p.returncode == 0, err[-3000:]
    assert "job 2 of iteration 1 failed" in err and "retry 1/2" in err
    # Not bit for bit with the local run (seen: last-digit differences, most likely the engine's
    # one-CPU tasks summing in another order than local ones that use every core), but the same:
    final = final_state(exp)
    assert all(torch.allclose(final[k], clean[k], atol=1e-4) for k in clean)
    assert valid_accuracy(exp) == valid_accuracy(tmp / "clean")


@pytest.mark.cluster
def test_a_stopped_job_on_slurm_is_cancelled_at_its_stall_limit_and_retried(setup):
    """As locally, with default options: the task RUNNING, its log silent, is cancelled."""
    require("slurm")
    tmp, clean = setup
    exp = tmp / "stop_slurm"
    argv = driver_argv(tmp, exp)
    argv[argv.index("--cmd") + 1] = "nnet-queue slurm --mem 1G"
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stop_job_2_of_iteration_1(exp)
        out, err = p.communicate(timeout=900)
    finally:
        p.kill()
    assert p.returncode == 0, err[-3000:]
    limit = re.search(r"job 2 of iteration 1 stalled \(its log did not grow for (\d+) s\) and was stopped", err)
    assert limit and int(limit[1]) >= 60, err[-3000:]
    assert f"stalled: its log did not grow for {limit[1]} s (--stall-limit): cancelled" in \
        (exp / "log" / "train.1.2.log.failed.1").read_text()
    final = final_state(exp)
    assert all(torch.allclose(final[k], clean[k], atol=1e-4) for k in clean)
