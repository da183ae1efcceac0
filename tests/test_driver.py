"""steps/train_dnn.py end to end on a small egs dir: layout, job ramp, log wording, resume."""
import re

import pytest
import torch

from conftest import REPO, SMALL_CONFIG, run, write_egs_dir

DRIVER = REPO / "steps" / "train_dnn.py"
ACCURACY_REPORT_HEADER = "%Iter\tduration\ttrain_objective\tvalid_objective\tdifference"  # Kaldi's
KALDI_PROB = re.compile(r"^LOG \(nnet3-compute-prob\[[^]]+\]:PrintTotalStats\(\):nnet-diagnostics\.cc:\d+\) "
                        r"Overall (log-likelihood|accuracy) for 'output' is -?[0-9.e-]+ per frame, over \d+ frames\.$", re.M)


def train(tmp_path, config, *extra):
    return run("python3", DRIVER, "--cmd", "nnet-queue local", "--config", config, "--cleanup", "false",
               "--trainer.num-epochs", "1.5", "--trainer.optimization.num-jobs-initial", "2",
               "--trainer.optimization.num-jobs-final", "3", "--trainer.optimization.minibatch-size", "64",
               "--trainer.optimization.initial-effective-lrate", "0.003",
               "--trainer.optimization.final-effective-lrate", "0.001",
               "--egs.dir", tmp_path / "egs", "--dir", tmp_path / "exp", *extra, check=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("driver")
    write_egs_dir(tmp_path / "egs")
    config = tmp_path / "model.yaml"
    config.write_text(SMALL_CONFIG)
    first = train(tmp_path, config)
    return tmp_path, config, first


def test_layout_and_job_ramp(trained):
    tmp_path, _, first = trained
    exp = tmp_path / "exp"
    # 4 archives x 2 frames per eg x 1.5 epochs = 12 job-archives; jobs 2 -> 3: int(24 / 5) = 4 iterations.
    assert "= 4 iterations" in first.stdout
    jobs = {it: len(list((exp / "log").glob(f"train.{it}.*.log"))) for it in range(4)}
    assert jobs == {0: 2, 1: 2, 2: 3, 3: 3}
    for name in ["0.mdl", "1.mdl", "4.mdl", "final.mdl", "accuracy.report", "srand", "log/select.0.log",
                 "log/average.1.log", "log/average.3.log", "log/combine.log", "log/progress.1.log",
                 "log/compute_prob_valid.0.log", "log/compute_prob_train.4.log", "log/compute_prob_valid.final.log"]:
        assert (exp / name).exists(), name
    assert not list(exp.glob("*.*.mdl"))  # per-job models are deleted after averaging
    assert re.findall(r"Iter: (\d+)/3   Jobs: (\d)", first.stdout) == [("0", "2"), ("1", "2"), ("2", "3"), ("3", "3")]
    assert f"{exp}: num-iters=4 nj=2..3 loglike:train/valid[2,4,final]=(" in first.stdout


def test_log_wording(trained):
    exp = trained[0] / "exp" / "log"
    prob = (exp / "compute_prob_valid.final.log").read_text()
    assert len(KALDI_PROB.findall(prob)) == 2
    job = (exp / "train.2.3.log").read_text()
    assert job.startswith("# nnet-train-one-job ")
    assert re.search(r"Overall average objective function for 'output' is -?[0-9.e-]+ over \d+ frames\.", job)
    assert re.search(r"# Accounting: time=\d+ threads=1\n# Ended \(code 0\) at .*, elapsed time \d+ seconds\n$", job)
    # Iteration 0: halved minibatch and max-param-change / sqrt(2); later ones: as given.
    assert "--minibatch-size=32" in (exp / "train.0.1.log").read_text()
    assert "--max-param-change=1.4142136" in (exp / "train.0.1.log").read_text()
    assert "--minibatch-size=64" in job and "--max-param-change=2 " in job
    assert "Combining" in (exp / "combine.log").read_text()
    report = (trained[0] / "exp" / "accuracy.report").read_text().splitlines()
    assert report[0] == ACCURACY_REPORT_HEADER
    assert float(report[-2].split("\t")[3]) > 0.9  # final valid accuracy


def test_resume_reproduces_schedule_and_model(trained):
    tmp_path, config, first = trained
    final = torch.load(tmp_path / "exp" / "final.mdl", weights_only=True)["state"]
    second = train(tmp_path, config, "--stage", "2")
    lines = re.findall(r"Iter: .*?lr: \S+", first.stdout)
    assert re.findall(r"Iter: .*?lr: \S+", second.stdout) == lines[2:]
    again = torch.load(tmp_path / "exp" / "final.mdl", weights_only=True)["state"]
    assert all(torch.equal(final[k], again[k]) for k in final)


def test_too_many_jobs_and_missing_resume_model_fail_clearly(tmp_path):
    write_egs_dir(tmp_path / "egs")
    r = run("python3", DRIVER, "--stage", "2", "--trainer.optimization.num-jobs-final", "3",
            "--egs.dir", tmp_path / "egs", "--dir", tmp_path / "exp")
    assert r.returncode != 0 and "cannot resume at iteration 2" in r.stderr
    r = run("python3", DRIVER, "--stage", "2", "--egs.dir", tmp_path / "egs", "--dir", tmp_path / "exp")
    assert r.returncode != 0 and "num-jobs-final 8 > number of archives 4" in r.stderr
