"""steps/train_dnn.py end to end on a small egs dir: layout, job ramp, log wording, resume."""
import re

import pytest
import torch

from helpers import REPO, SMALL_CONFIG, run, write_egs_dir

DRIVER = REPO / "steps" / "train_dnn.py"
ACCURACY_REPORT_HEADER = "%Iter\tduration\ttrain_objective\tvalid_objective\tdifference"  # Kaldi's
KALDI_PROB = re.compile(r"^LOG \(nnet3-compute-prob\[[^]]+\]:PrintTotalStats\(\):nnet-diagnostics\.cc:\d+\) "
                        r"Overall (log-likelihood|accuracy) for 'output' is -?[0-9.e-]+ per frame, over \d+ frames\.$", re.M)


def recording_cmd(tmp_path):
    """nnet-queue local behind a script that notes each command line it is given."""
    script = tmp_path / "recording-queue"
    script.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/cmd.calls\nexec nnet-queue local "$@"\n')
    script.chmod(0o755)
    return str(script)


def train(tmp_path, config, *extra):
    return run("python3", DRIVER, "--cmd", recording_cmd(tmp_path), "--config", config, "--cleanup", "false",
               "--trainer.num-epochs", "3", "--trainer.optimization.num-jobs-initial", "2",
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
    # 4 archives x 3 epochs = 12 job-archives (chunk training: an epoch is one pass over the
    # archives); jobs 2 -> 3: int(24 / 5) = 4 iterations.
    assert "= 4 iterations" in first.stdout
    jobs = {it: len(list((exp / "log").glob(f"train.{it}.*.log"))) for it in range(4)}
    assert jobs == {0: 2, 1: 2, 2: 3, 3: 3}
    for name in ["0.mdl", "1.mdl", "4.mdl", "final.mdl", "accuracy.report", "srand", "log/select.0.log",
                 "log/average.1.log", "log/average.3.log", "log/combine.log", "log/progress.1.log",
                 "log/compute_prob_valid.0.log", "log/compute_prob_train.4.log", "log/compute_prob_valid.final.log"]:
        assert (exp / name).exists(), name
    assert not list(exp.glob("*.*.mdl"))  # per-job models are deleted after averaging
    assert re.findall(r"Iter: (\d+)/3   Jobs: (\d)", first.stdout) == [("0", "2"), ("1", "2"), ("2", "3"), ("3", "3")]
    # nnet3_dir_info.pl: the last trained iteration (3), two thirds of it (int(3 * 0.666) = 1), final.
    assert re.search(rf"^{exp}: num-iters=4 nj=2..3 num-params=0.0M dim=6->4 combine=\S+ \(over \d\) "
                     rf"loglike:train/valid\[1,3,final\]=\(\S+\) accuracy:train/valid\[1,3,final\]=\(\S+\)$",
                     first.stdout, re.M)


def test_the_driver_makes_each_next_model_itself_with_logs_as_through_cmd(trained):
    """select, average and the outer step run in the driver (--trainer.average-in-driver): $cmd
    never sees them, and their logs read as a task's."""
    calls = (trained[0] / "cmd.calls").read_text()
    assert "train.1.JOB.log" in calls and "combine.log" in calls
    assert not re.search(r"(select|average|outer)\.\d+\.log", calls)
    exp = trained[0] / "exp"
    log = (exp / "log" / "average.1.log").read_text()
    assert log.startswith(f"# nnet-average-models {exp}/2.1.mdl {exp}/2.2.mdl {exp}/2.avg.mdl\n# Started at ")
    assert "Averaged parameters of 2 neural nets" in log and "# Ended (code 0)" in log
    assert "bmuf step (momentum 0.5" in (exp / "log" / "outer.1.log").read_text()
    assert "# Ended (code 0)" in (exp / "log" / "select.0.log").read_text()


def test_log_wording(trained):
    exp = trained[0] / "exp" / "log"
    prob = (exp / "compute_prob_valid.final.log").read_text()
    assert len(KALDI_PROB.findall(prob)) == 2
    job = (exp / "train.2.3.log").read_text()
    assert job.startswith("# nnet-train-one-job ")
    assert re.search(r"Overall average objective function for 'output' is -?[0-9.e-]+ over \d+ frames\.", job)
    assert re.search(r"# Peak memory: \d+ kB\n"
                     r"# Accounting: time=\d+ threads=1\n# Ended \(code 0\) at .*, elapsed time \d+ seconds\n$", job)
    # Iteration 0: halved minibatch and max-param-change / sqrt(2); later ones: as given.
    assert "--minibatch-size=32" in (exp / "train.0.1.log").read_text()
    assert "--max-param-change=1.4142136" in (exp / "train.0.1.log").read_text()
    assert "--minibatch-size=64" in job and "--max-param-change=2 " in job
    assert "Combining" in (exp / "combine.log").read_text()
    report = (trained[0] / "exp" / "accuracy.report").read_text().splitlines()
    assert report[0] == ACCURACY_REPORT_HEADER
    # Kaldi's rows: the trained iterations 0-3 (none for 4 or final), durations as floats.
    assert [row.split("\t")[0] for row in report[1:-1]] == ["0", "1", "2", "3"]
    assert all(re.fullmatch(r"\d+\.0", row.split("\t")[1]) for row in report[1:-1])
    assert float(report[-2].split("\t")[3]) > 0.9  # last valid accuracy
    assert re.fullmatch(r"Total training time is 0:0\d:\d\d", report[-1])


# The patterns Kaldi's report scripts apply, restated (Kaldi is not a dependency). Each script
# greps log files, which prefixes every line with its path and ':'.
# log_parse.py parse_prob_logs:
KALDI_PARSE_PROB = (r".*compute_prob_.*\.([0-9]+).log:LOG .nnet3.*compute-prob.*:PrintTotalStats..:"
                    r"nnet.*diagnostics.cc:[0-9]+. Overall ([a-zA-Z\-]+) for 'output'.*is ([0-9.\-e]+) .*per frame")
# log_parse.py parse_progress_logs_for_nonlinearity_stats (g_normal_nonlin_regex_pattern_with_oderiv):
_STAT = r"=\[.*=\((.+)\), mean=([0-9\.\-e]+), stddev=([0-9\.e\-]+)\]"
KALDI_NONLIN = (r".*progress.([0-9]+).log:component name=(.+) type=(.*)Component,.*value-avg" + _STAT
                + r".*deriv-avg" + _STAT + r".*oderiv-rms" + _STAT)
# log_parse.py parse_progress_logs_for_param_diff:
KALDI_PARAM_DIFF = r".*progress\.([0-9]+)\.log:LOG.*{0}.*\[(.*)\]"
# nnet3_dir_info.pl get_progress_info:
KALDI_INFO = {"num-parameters": r"^num-parameters: (\S+)", "output-dim": r"^output-node.* name=output .*dim=(\S+)",
              "input-dim": r"^input-node.* name=input .*dim=(\S+)"}


def grepped(paths, word):
    """`grep -e word paths...`: matching lines prefixed with their file's path."""
    return [f"{p}:{line}" for p in paths for line in p.read_text().splitlines() if word in line]


def test_kaldi_report_scripts_read_the_logs(trained):
    log = trained[0] / "exp" / "log"
    for key in ("accuracy", "log-likelihood"):
        for subset in ("train", "valid"):
            found = {}
            for line in grepped(sorted(log.glob(f"compute_prob_{subset}.*.log")), key):
                m = re.search(KALDI_PARSE_PROB, line)
                if m and m.group(2) == key:
                    found[int(m.group(1))] = float(m.group(3))
            assert sorted(found) == [0, 1, 2, 3, 4], (key, subset)
    progress = sorted(log.glob("progress.*.log"))
    stats = [re.search(KALDI_NONLIN, line).groups() for line in grepped(progress, "oderiv")]
    assert [(g[0], g[1], g[2]) for g in stats] == [(str(i), "hidden.relu", "RectifiedLinear") for i in (1, 2, 3, 4)]
    for g in stats:
        for percentiles in (g[3], g[6], g[9]):
            assert len(re.split(",| ", percentiles)) == 13  # log_parse asserts this
        value_mean, deriv_mean = float(g[4]), float(g[7])
        assert value_mean > 0 and 0 < deriv_mean < 1  # relu: outputs >= 0, derivative a 0/1 average
    for pattern in ("Relative parameter differences", "Parameter differences"):
        diffs = {}
        for line in grepped(progress, pattern):
            m = re.search(KALDI_PARAM_DIFF.format(pattern), line)
            diffs[int(m.group(1))] = dict(part.split(":") for part in m.group(2).split())
        assert sorted(diffs) == [1, 2, 3, 4] and all(set(d) == {"hidden.affine", "output.affine"} for d in diffs.values())
    text = (log / "progress.3.log").read_text()
    found = {name: re.findall(pattern, text, re.M) for name, pattern in KALDI_INFO.items()}
    # 6*3*16 + 16 weights and biases of the hidden layer, 16*4 + 4 of the output layer
    assert found == {"num-parameters": ["372"], "output-dim": ["4"], "input-dim": ["6"]}


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


@pytest.mark.parametrize("name", ["valid_diagnostic.egs", "combine.egs"])
def test_truncated_diagnostic_or_combine_egs_stop_the_run_before_any_work(tmp_path, name):
    """They only warned each iteration (the divergence check blind all run), or failed the run at
    its end; now the driver names the file before it starts anything."""
    write_egs_dir(tmp_path / "egs")
    path = tmp_path / "egs" / name
    path.write_bytes(path.read_bytes()[:-100])
    (tmp_path / "model.yaml").write_text(SMALL_CONFIG)
    r = run("python3", DRIVER, "--cmd", "nnet-queue local", "--config", tmp_path / "model.yaml",
            "--trainer.optimization.num-jobs-final", "2", "--egs.dir", tmp_path / "egs", "--dir", tmp_path / "exp")
    assert r.returncode == 1
    assert f"steps/train_dnn.py: {path}: truncated egs archive" in r.stderr.splitlines()[-1]
    assert not (tmp_path / "exp" / "0.mdl").exists()
