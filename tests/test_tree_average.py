"""Averaging in two levels (--trainer.averaging-fanin): the groups, the driver's commands (a
recording launcher, no training), and the result against the flat average through nnet-queue."""
import os

import pytest
import torch

from helpers import SMALL_CONFIG, RecordingLauncher, drive
from nnet_tools.errors import NnetError
from nnet_tools.model import config, model_io
from nnet_tools.model.nnet import Nnet
from nnet_tools.driver import options, outer_loop, tree_average
from nnet_tools.train import average
from nnet_tools.driver.launcher import InProcessLauncher, Launcher


def test_groups_are_contiguous_near_equal_and_at_most_fanin():
    for n in range(1, 40):
        for k in range(2, 9):
            parts = tree_average.groups(n, k)
            assert [i for p in parts for i in p] == list(range(n))
            sizes = [len(p) for p in parts]
            assert len(parts) == -(-n // k) and max(sizes) <= k and max(sizes) - min(sizes) <= 1
    assert tree_average.groups(10, 4) == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


class ArrayRecorder(RecordingLauncher):
    """Also records each call's task count; checks a group's inputs are in its dir when it runs."""

    def run(self, log, command, jobs=None, launcher_opts=()):
        self.groups = getattr(self, "groups", {})
        if command[0] == "nnet-average-models" and jobs:
            self.groups[log] = [sorted(os.listdir(os.path.dirname(command[1].replace("JOB", str(g)))))
                           for g in range(1, jobs + 1)]
        self.arrays = getattr(self, "arrays", {})
        self.arrays[log] = jobs
        super().run(log, command, jobs, launcher_opts)


def test_driver_averages_in_groups_beyond_the_fanin_and_flat_below(tmp_path, egs_info, monkeypatch):
    monkeypatch.setattr("helpers.RecordingLauncher", ArrayRecorder)
    # Job 2 is dropped by the selection rule as without a fan-in; jobs 2 -> 4, fan-in 2.
    loop, rec = drive(tmp_path, egs_info, lambda it, j: -3.0 if j == 2 else -1.0, averaging_fanin=2)
    exp = tmp_path / "exp"
    by_jobs = {}
    for it, jobs, _, _ in loop.plan[1:]:
        by_jobs.setdefault(jobs, it)
    flat, tree = by_jobs[2], by_jobs[4]
    # the average goes to N.avg.mdl, for the outer step (bmuf, the default) to make N.mdl of
    assert rec.command(f"average.{flat}.log")[1:] == [f"{exp}/{flat + 1}.1.mdl", f"{exp}/{flat + 1}.avg.mdl"]
    stage = f"{exp}/average.{tree}"
    assert rec.command(f"average.{tree}.JOB.log") == ["nnet-average-models", f"{stage}/JOB/*.mdl", f"{stage}/JOB.mdl"]
    assert rec.arrays[f"average.{tree}.JOB.log"] == 2
    assert rec.groups[f"average.{tree}.JOB.log"] == [[f"{tree + 1}.1.mdl", f"{tree + 1}.3.mdl"], [f"{tree + 1}.4.mdl"]]
    assert rec.command(f"average.{tree}.log") == ["nnet-average-models", f"--weights={2 / 3!r}:{1 / 3!r}",
                                                  f"{stage}/1.mdl", f"{stage}/2.mdl", f"{exp}/{tree + 1}.avg.mdl"]
    assert not os.path.exists(stage) and not list(exp.glob("*.*.mdl"))
    assert (exp / "final.mdl").exists()


def test_fanin_one_or_a_dir_with_spaces_is_refused(tmp_path, egs_info):
    with pytest.raises(NnetError, match="averaging-fanin must be 0 .* or at least 2, got 1"):
        outer_loop.OuterLoop(options.TrainerOptions(averaging_fanin=1), str(egs_info), str(tmp_path / "exp"))
    with pytest.raises(NnetError, match="needs an experiment dir path without spaces"):
        tree_average.average(None, ["a", "b", "c"], "out", "average.1.log", 2, str(tmp_path / "my exp" / "average.1"))


def test_tree_average_equals_the_flat_average(tmp_path):
    cfg = config.normalize(config.yaml_load(SMALL_CONFIG))
    paths, models = [], []
    for i in range(5):
        torch.manual_seed(i)
        net = Nnet(cfg)
        for name, value in net.state_dict().items():   # batch-norm statistics differ too
            if value.is_floating_point():
                value.add_(torch.randn_like(value))
        paths.append(str(tmp_path / f"2.{i + 1}.mdl"))
        model_io.save(net, paths[-1])
        models.append(model_io.load(paths[-1]))
    flat = average.average_into(Nnet(cfg), models, [0.2] * 5).state_dict()
    os.makedirs(tmp_path / "log")
    launcher = InProcessLauncher(str(tmp_path / "log"))   # the programs themselves, without process starts
    tree_average.average(launcher, paths, str(tmp_path / "2.mdl"), "average.1.log", 2, str(tmp_path / "average.1"))
    assert sorted(os.listdir(tmp_path / "log")) == ["average.1.1.log", "average.1.2.log", "average.1.3.log",
                                                   "average.1.log"]
    assert "Averaged parameters of 2 neural nets" in (tmp_path / "log" / "average.1.1.log").read_text()
    assert not os.path.exists(tmp_path / "average.1") and not any(os.path.exists(p) for p in paths)
    tree = model_io.load(str(tmp_path / "2.mdl")).state_dict()
    for name, value in flat.items():
        if value.is_floating_point():
            torch.testing.assert_close(tree[name], value, rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(tree[name], value)


def test_nnet_queue_task_shell_expands_a_groups_inputs(tmp_path):
    for g, names in ((1, ["5.1.mdl", "5.3.mdl"]), (2, ["5.4.mdl"])):
        os.makedirs(tmp_path / "average.4" / str(g))
        for name in names:
            (tmp_path / "average.4" / str(g) / name).write_text("")
    Launcher("nnet-queue local", str(tmp_path)).run("ls.JOB.log", ["ls", f"{tmp_path}/average.4/JOB/*.mdl"], jobs=2)
    listed = [[os.path.basename(line) for line in (tmp_path / f"ls.{g}.log").read_text().splitlines()
               if line.endswith(".mdl") and not line.startswith("#")] for g in (1, 2)]
    assert listed == [["5.1.mdl", "5.3.mdl"], ["5.4.mdl"]]
