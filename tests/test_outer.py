"""The outer loop's rules, without training: selection, averaging set, cleanup, combination, outer
optimizers, options; a recording launcher stands in for $cmd so every command can be checked."""
import copy
import dataclasses
import os
import re
import signal

import numpy as np
import pytest
import torch

from helpers import SMALL_CONFIG, RecordingLauncher, drive, write_egs_dir
from nnet_tools.data import egs
from nnet_tools.errors import NnetError
from nnet_tools.model import config, model_io
from nnet_tools.model.nnet import Nnet
from nnet_tools.driver import commands, manifest, options, outer_loop, resume, schedule
from nnet_tools.train import combine, outer_optim
from nnet_tools.driver.launcher import BACKGROUND_NICENESS, InProcessLauncher, Launcher, LaunchFailed


def test_select_best_on_iteration_zero_then_within_one_of_best():
    assert outer_loop.select(0, [-1.0, -0.5, -2.0]) == [1]
    assert outer_loop.select(3, [-1.0, -1.9, -2.1, -0.95]) == [0, 1, 3]
    assert outer_loop.select(3, [-0.5]) == [0]


def test_iteration_zero_halves_minibatch_and_max_param_change():
    opts = options.TrainerOptions(minibatch_size="256,128", max_param_change=2.0)
    assert commands.iteration_settings(opts, 0) == ("128,64", pytest.approx(2.0 / 2 ** 0.5))
    assert commands.iteration_settings(opts, 1) == ("256,128", 2.0)


def test_driver_averages_exactly_the_accepted_jobs(tmp_path, egs_info, capsys):
    # Job 2 is always 1.5 below the others: kept on iteration 0 only if best (it is not), dropped later.
    loop, rec = drive(tmp_path, egs_info, lambda it, j: -3.0 if j == 2 else -1.0 - 0.1 * j)
    exp = tmp_path / "exp"
    assert rec.command("select.0.log")[1:] == [f"{exp}/1.1.mdl", f"{exp}/1.mdl"]
    for it, jobs, _, _ in loop.plan[1:]:
        averaged = rec.command(f"average.{it}.log")[1:-1]
        assert averaged == [f"{exp}/{it + 1}.{j}.mdl" for j in range(1, jobs + 1) if j != 2], it
    assert "Only 2/3 of the models have been accepted for averaging" in capsys.readouterr().err
    assert not list(exp.glob("*.*.mdl"))  # job models deleted after averaging


def test_cleanup_keeps_preserved_and_combine_models_and_combines_newest_first(tmp_path, egs_info):
    loop, rec = drive(tmp_path, egs_info, lambda it, j: -1.0)
    exp, iters = tmp_path / "exp", loop.num_iters
    assert loop.combine_set == schedule.combine_iters(iters, 8, 4, 3) == [iters - 2, iters - 1, iters]
    combined = rec.command("combine.log")
    assert combined[-3 - 2:-2] == [f"{exp}/{i}.mdl" for i in (iters, iters - 1, iters - 2)]
    kept = sorted(int(p.stem) for p in exp.glob("*.mdl") if p.stem.isdigit())
    assert kept == [i for i in range(iters + 1) if i % 4 == 0 or i == iters]
    assert (exp / "final.mdl").exists()


class LateBackground(RecordingLauncher):
    """Background commands run only when waited for, as on a node too busy to start them sooner;
    each notes the model files it would have found missing."""

    def __init__(self, *args):
        super().__init__(*args)
        self.pending, self.num_started, self.missing = [], 0, []

    def start(self, log, command, launcher_opts=()):
        super().start(log, command, launcher_opts)
        self.num_started += 1
        self.pending.append((self.num_started, [str(c) for c in command]))

    def wait(self, upto=None):
        due = [command for n, command in self.pending if upto is None or n <= upto]
        self.pending = self.pending[len(due):]
        self.missing += [c for command in due for c in command if c.endswith(".mdl") and not os.path.exists(c)]


def test_cleanup_waits_for_the_diagnostics_that_read_the_model_it_removes(tmp_path, egs_info):
    """nnet-show-progress of iteration N-1 reads (N-2).mdl, which cleanup removes after iteration N:
    on a busy node it found no model."""
    _, rec = drive(tmp_path, egs_info, lambda it, j: -1.0, launcher_cls=LateBackground)
    assert any(name.startswith("progress.") for name, _ in rec.commands) and not rec.pending
    assert rec.missing == []
    assert not (tmp_path / "exp" / "2.mdl").exists()   # cleanup did remove models


def test_removable_follows_preserve_interval_and_combine_set():
    assert [i for i in range(12) if not outer_loop.removable(i, 5, [9, 10, 11])] == [0, 5, 9, 10, 11]


def test_bmuf_runs_outer_step_with_state_and_resume_needs_it(tmp_path, egs_info):
    loop, rec = drive(tmp_path, egs_info, lambda it, j: -1.0, outer_method="bmuf", cleanup=False)
    exp = tmp_path / "exp"
    step = rec.command("outer.2.log")
    assert step[:3] == ["nnet-outer-step", "--method=bmuf", "--jobs=3"]
    assert f"--state-in={exp}/2.outer" in step and f"--state-out={exp}/3.outer" in step
    assert step[-3:] == [f"{exp}/2.mdl", f"{exp}/3.avg.mdl", f"{exp}/3.mdl"]
    assert not any(a.startswith("--state-in") for a in rec.command("outer.1.log"))
    os.remove(exp / "3.mdl")
    with pytest.raises(NnetError, match="cannot resume at iteration 3"):
        outer_loop.OuterLoop(loop.opts, str(egs_info), str(exp), rec).run(stage=3)


def test_bmuf_is_the_default_and_one_job_runs_average_as_kaldi(tmp_path, egs_info):
    _, rec = drive(tmp_path / "ramp", egs_info, lambda it, j: -1.0)
    assert rec.command("outer.1.log")[:2] == ["nnet-outer-step", "--method=bmuf"]
    # one job every iteration: bmuf's momentum 1 - 1/1 = 0 makes its step the average itself
    _, rec = drive(tmp_path / "one", egs_info, lambda it, j: -1.0, jobs_initial=1, jobs_final=1, cleanup=False)
    assert not [name for name, _ in rec.commands if name.startswith("outer.")]
    assert not list((tmp_path / "one" / "exp").glob("*.outer"))
    # ... but not with a momentum or rate of the user's
    _, rec = drive(tmp_path / "lr", egs_info, lambda it, j: -1.0, jobs_initial=1, jobs_final=1,
                   outer_learning_rate=0.5)
    assert rec.command("outer.1.log")[:2] == ["nnet-outer-step", "--method=bmuf"]


def test_outer_states_are_kept_and_removed_with_their_models(tmp_path, egs_info):
    """--stage I needs I.mdl and I.outer: a state goes only when cleanup removes its model."""
    loop, _ = drive(tmp_path / "kept", egs_info, lambda it, j: -1.0, cleanup=False)
    exp = tmp_path / "kept" / "exp"
    assert sorted(int(p.stem) for p in exp.glob("*.outer")) == list(range(2, loop.num_iters + 1))
    loop, _ = drive(tmp_path / "clean", egs_info, lambda it, j: -1.0, cleanup=True)
    exp = tmp_path / "clean" / "exp"
    models = {int(p.stem) for p in exp.glob("*.mdl") if p.stem.isdigit()}
    states = {int(p.stem) for p in exp.glob("*.outer")}
    assert states and states == {i for i in models if i >= 2} and len(states) < loop.num_iters - 1


def tiny_problem(seed=0):
    torch.manual_seed(seed)
    cfg = config.normalize(config.yaml_load(SMALL_CONFIG))
    windows = torch.randn(256, 3, 6)
    labels = torch.randint(0, 4, (256,))
    return Nnet(cfg), windows, labels


def test_combine_picks_a_running_average_that_is_not_the_newest_model():
    base, windows, labels = tiny_problem()
    base.eval()
    noise = {k: torch.randn_like(v) * 0.5 for k, v in base.named_parameters()}
    newest, older = copy.deepcopy(base), copy.deepcopy(base)
    with torch.no_grad():  # +noise and -noise: their average is the base model, better than either
        for (k, p), (_, q) in zip(newest.named_parameters(), older.named_parameters()):
            p.add_(noise[k])
            q.sub_(noise[k])
    far = copy.deepcopy(base)
    with torch.no_grad():
        for p in far.parameters():
            p.add_(torch.randn_like(p) * 5)
    best, n, first, objf = combine.combine([newest, older, far], windows, labels, max_objective_evaluations=30)
    assert n == 2 and objf > first
    for (k, p), (_, q) in zip(best.named_parameters(), base.named_parameters()):
        assert torch.allclose(p, q, atol=1e-5), k


def test_bmuf_by_hand():
    opt = outer_optim.Bmuf(momentum=0.5, learning_rate=1.0, nesterov=False)
    start, avg = {"w": torch.tensor([1.0])}, {"w": torch.tensor([3.0])}
    out, state = opt.step(start, avg, {})
    assert out["w"].item() == 3.0 and state["delta.w"].item() == 2.0  # first block: plain averaging
    out, state = opt.step(out, {"w": torch.tensor([4.0])}, state)  # G = 1, Delta = 0.5*2 + 1 = 2
    assert out["w"].item() == 5.0 and state["w.w"].item() == 5.0
    nbm = outer_optim.Bmuf(momentum=0.5, learning_rate=1.0, nesterov=True)
    out, state = nbm.step(start, avg, {})
    assert state["w.w"].item() == 3.0 and out["w"].item() == 4.0  # look-ahead W + m * Delta


def test_nesterov_matches_torch_sgd():
    start, avg1, avg2 = torch.tensor([1.0, -2.0]), torch.tensor([2.0, -1.0]), torch.tensor([0.5, 0.0])
    opt = outer_optim.Nesterov(momentum=0.9, learning_rate=0.7)
    w, state = opt.step({"w": start}, {"w": avg1}, {})
    w2, _ = opt.step(w, {"w": avg2}, state)
    p = torch.nn.Parameter(start.clone())
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)
    for avg in (avg1, avg2):
        p.grad = p.detach() - avg
        sgd.step()
    assert torch.allclose(w2["w"], p.detach())


def test_outer_optimizer_defaults_follow_jobs():
    assert outer_optim.make("bmuf", 4).momentum == 0.75
    assert outer_optim.make("bmuf", 1).momentum == 0.0  # one job: plain averaging, no extrapolation
    assert (outer_optim.make("nesterov", 4).momentum, outer_optim.make("nesterov", 4).learning_rate) == (0.9, 0.7)


def test_options_round_trip_through_argv():
    import argparse
    opts = options.TrainerOptions(num_epochs=3.5, cleanup=False, add_options=["--print-interval=5"], outer_method="bmuf")
    p = argparse.ArgumentParser()
    options.add_arguments(p)
    assert options.from_namespace(p.parse_args(options.to_argv(opts))) == opts


def test_the_next_model_is_made_in_the_driver_unless_asked_or_given_a_launcher(tmp_path, egs_info):
    def merger(launcher=None, **changes):
        opts = options.TrainerOptions(**{"num_epochs": 3, "jobs_initial": 2, "jobs_final": 4, **changes})
        loop = outer_loop.OuterLoop(opts, str(egs_info), str(tmp_path / "exp"), launcher)
        return loop.merger, loop.launcher
    made_here, cmd = merger()
    assert isinstance(made_here, InProcessLauncher) and not isinstance(cmd, InProcessLauncher)
    made_by_cmd, cmd = merger(average_in_driver=False)
    assert made_by_cmd is cmd
    rec = RecordingLauncher(str(tmp_path), lambda it, j: -1.0)
    assert merger(rec)[0] is rec   # a caller's launcher runs everything (tests record it)


def test_a_program_run_in_process_leaves_interrupts_to_the_host(tmp_path, monkeypatch):
    """The driver averages in its own process: a Ctrl-C there must reach the driver (which says
    how to resume), not end as the program's failure, and the program must not take over the
    driver's SIGTERM handling."""
    from nnet_tools.train import average
    model = tmp_path / "m.mdl"
    model_io.save(Nnet(config.normalize(config.yaml_load(SMALL_CONFIG))), model)
    launcher = InProcessLauncher(str(tmp_path / "log"))
    sigterm = signal.getsignal(signal.SIGTERM)
    launcher.run("average.1.log", ["nnet-average-models", model, model, tmp_path / "2.mdl"])
    assert signal.getsignal(signal.SIGTERM) is sigterm
    assert "# Ended (code 0)" in (tmp_path / "log" / "average.1.log").read_text()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(average, "average_files", interrupted)
    with pytest.raises(KeyboardInterrupt):
        launcher.run("average.2.log", ["nnet-average-models", model, model, tmp_path / "3.mdl"])
    log = (tmp_path / "log" / "average.2.log").read_text()
    assert "# Ended" not in log and not (tmp_path / "3.mdl").exists()   # an unfinished task, as resume sees it


def test_in_process_launcher_writes_logs_as_nnet_queue(tmp_path):
    write_egs_dir(tmp_path / "egs")
    (tmp_path / "m.yaml").write_text(SMALL_CONFIG)
    launcher = InProcessLauncher(str(tmp_path / "log"))
    launcher.run("init.log", ["nnet-init", "--srand=1", tmp_path / "m.yaml", tmp_path / "0.mdl"])
    launcher.run("train.0.JOB.log", commands.job_command(options.TrainerOptions(minibatch_size="64"), 0, 2, 0.001, 0,
                                                      tmp_path / "0.mdl", tmp_path / "egs", tmp_path / "1.JOB.mdl"), jobs=2)
    log = (tmp_path / "log" / "train.0.2.log").read_text()
    assert log.startswith("# nnet-train-one-job --learning-rate=0.002 --minibatch-size=32")
    assert re.search(r"Overall average objective function for 'output' is -?[\d.]+ over \d+ frames", log)
    assert log.rstrip().splitlines()[-1].startswith("# Ended (code 0)")
    assert (tmp_path / "1.1.mdl").exists() and (tmp_path / "1.2.mdl").exists()
    assert "training on" in log and egs.job_archive(str(tmp_path / "egs"), 2, 0)[0] in log
    # A progress log as the driver starts it: two programs chained with && into one log.
    launcher.start("progress.1.log", ["nnet-info", tmp_path / "1.1.mdl", "&&", "nnet-show-progress",
                                      tmp_path / "0.mdl", tmp_path / "1.1.mdl"])
    progress = (tmp_path / "log" / "progress.1.log").read_text()
    assert "type=RectifiedLinearComponent, dim=16, count=" in progress
    assert "Relative parameter differences per layer are [ hidden.affine:" in progress
    assert progress.rstrip().splitlines()[-1].startswith("# Ended (code 0)")
    with pytest.raises(LaunchFailed, match=r"failed: .*/bad\.log"):
        launcher.run("bad.log", ["nnet-average-models", tmp_path / "missing.mdl", tmp_path / "x.mdl"])
    assert "# Ended (code 1)" in (tmp_path / "log" / "bad.log").read_text()


def test_a_failed_job_is_retried_with_the_same_inputs(tmp_path, egs_info, capsys):
    loop, rec = drive(tmp_path, egs_info, lambda it, j: -1.0,
                      fails=lambda it, j, attempt: "Killed\n" if (it, j, attempt) == (2, 2, 0) else None)
    exp = tmp_path / "exp"
    retry = rec.command("train.2.2.log")
    assert retry == [a.replace("JOB", "2") for a in rec.command("train.2.JOB.log")]  # same seed, archive, model
    assert (exp / "log" / "train.2.2.log.failed.1").read_text() == "Killed\n"
    assert rec.command("average.2.log")[1:-1] == [f"{exp}/3.{j}.mdl" for j in (1, 2, 3)]
    assert "job 2 of iteration 2 failed" in capsys.readouterr().err


def test_survivors_are_averaged_when_enough_succeed(tmp_path, egs_info, capsys):
    loop, rec = drive(tmp_path, egs_info, lambda it, j: -1.0,
                      fails=lambda it, j, attempt: "node lost\n" if (it, j) == (3, 1) else None)
    exp = tmp_path / "exp"
    assert all("--srand=3" in c for name, c in rec.commands if name == "train.3.1.log")
    assert len([name for name, _ in rec.commands if name == "train.3.1.log"]) == 2  # --trainer.max-retries 2
    assert rec.command("average.3.log")[1:-1] == [f"{exp}/4.{j}.mdl" for j in (2, 3)]
    assert "iteration 3: 1/3 jobs failed after 2 retries each; using the 2 that succeeded" in capsys.readouterr().err
    assert (exp / "final.mdl").exists()


def test_a_job_that_fails_on_its_archive_stops_the_run_after_its_retries(tmp_path, egs_info, capsys):
    # Survivors are for lost nodes: averaging without a bad archive would leave its egs out of
    # every iteration that reads it, with only a warning.
    fault = f"{egs_info}/egs.2.ark: cannot read egs archive: Permission denied"
    with pytest.raises(NnetError, match=r"iteration 3: job 1 failed on the egs every time: "
                                        + re.escape(fault) + r"; the other jobs' models are not averaged"):
        drive(tmp_path, egs_info, lambda it, j: -1.0,
              fails=lambda it, j, attempt: f"ERROR (nnet-train-one-job) {fault}\n" if (it, j) == (3, 1) else None)
    assert "job 1 of iteration 3 failed" in capsys.readouterr().err   # retried first: NFS may have hiccuped
    assert (tmp_path / "exp" / "log" / "train.3.1.log.failed.2").exists()
    assert not (tmp_path / "exp" / "4.mdl").exists()


@pytest.mark.parametrize("fault", [
    "{exp}/3.mdl: not a readable nnet-tools model file (not a zip archive: truncated, or another format)",
    "{egs}/egs.2.ark: egs context (0,0) is smaller than the model's (1,1)",
    "{egs}/egs.2.ark: target id 7 >= model output dim 4"])
def test_a_failure_a_retry_cannot_change_stops_the_run_at_once(tmp_path, egs_info, capsys, fault):
    """A garbage input model, or egs that do not fit the model: every retry would fail the same
    way (they were retried 12 times), so the first failure stops the run, naming it."""
    fault = fault.format(exp=tmp_path / "exp", egs=egs_info)
    with pytest.raises(NnetError, match=r"iteration 3: job 1 failed: " + re.escape(fault) + r" \(not retried"):
        drive(tmp_path, egs_info, lambda it, j: -1.0,
              fails=lambda it, j, attempt: f"ERROR (nnet-train-one-job) {fault}\n" if (it, j) == (3, 1) else None)
    assert "retry" not in capsys.readouterr().err
    assert not (tmp_path / "exp" / "log" / "train.3.1.log.failed.1").exists()


def test_a_job_that_finds_the_disk_full_stops_the_run_after_its_retries(tmp_path, egs_info, capsys):
    # It used to be averaged out as a lost node: the run went on, its result changed, exit 0.
    fault = f"No space left on device: {tmp_path}/exp/4.1.mdl"
    with pytest.raises(NnetError, match=r"iteration 3: job 1 failed every time: " + re.escape(fault)
                       + r"; the other jobs' models are not averaged without it: free some space and resume"):
        drive(tmp_path, egs_info, lambda it, j: -1.0,
              fails=lambda it, j, attempt: f"ERROR (nnet-train-one-job) {fault}\n" if (it, j) == (3, 1) else None)
    assert "job 1 of iteration 3 failed" in capsys.readouterr().err   # retried first: space may come back
    assert not (tmp_path / "exp" / "4.mdl").exists()


def test_jobs_that_could_not_write_their_logs_on_a_full_disk_name_the_full_disk(tmp_path, egs_info, monkeypatch):
    """A disk filled while the jobs ran: their logs stayed empty, and the run ended pointing at
    them; now the full disk is named, as when a job could say it."""
    from nnet_tools.driver import retry
    monkeypatch.setattr(retry, "disk_full", lambda path, error=None: True)
    with pytest.raises(NnetError, match=r"iteration 3: job 1 failed every time: No space left on device: "
                       + re.escape(f"{tmp_path}/exp/log") + r" \(its log has no ERROR line\); the other jobs' "
                       r"models are not averaged without it: free some space and resume"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, fails=lambda it, j, attempt: "" if (it, j) == (3, 1) else None)


@pytest.mark.parametrize("training_fault", [
    "minibatch 3: objective function is nan (non-finite): training diverged",
    "minibatch 3: natural gradient: the eigendecomposition of the Fisher estimate failed, as its inputs "
    "or derivatives are not finite (NaN or inf)"])
def test_a_job_that_diverged_on_its_archive_is_survived_after_other_seeds(tmp_path, egs_info, capsys, training_fault):
    """Training faults name the archive too; they are the job's, not the egs': retried with other
    seeds, then survived."""
    message = f"ERROR (nnet-train-one-job) {egs_info}/egs.2.ark: {training_fault}\n"
    _, rec = drive(tmp_path, egs_info, lambda it, j: -1.0,
                   fails=lambda it, j, attempt: message if (it, j) == (3, 1) else None)
    assert [a for log, c in rec.commands if log == "train.3.1.log" for a in c if a.startswith("--srand=")] \
        == ["--srand=1003", "--srand=2003"]
    assert "iteration 3: 1/3 jobs failed after 2 retries each; using the 2 that succeeded" in capsys.readouterr().err


def test_too_few_survivors_stop_the_run(tmp_path, egs_info):
    with pytest.raises(NnetError, match=r"iteration 1: only 0/2 jobs succeeded after 2 retries"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, fails=lambda it, j, attempt: "x\n" if it == 1 else None)


def test_non_finite_jobs_are_retried_with_another_seed_then_diverge(tmp_path, egs_info, monkeypatch):
    seen = []
    monkeypatch.setattr(RecordingLauncher, "start", lambda self, log, command, launcher_opts=(): None)
    real_run = RecordingLauncher.run
    monkeypatch.setattr(RecordingLauncher, "run", lambda self, log, command, jobs=None, launcher_opts=():
                        seen.append((log, [str(c) for c in command])) or real_run(self, log, command, jobs, launcher_opts))
    with pytest.raises(resume.Diverged, match="every job's objective went non-finite"):
        drive(tmp_path, egs_info, lambda it, j: -1.0,
              fails=lambda it, j, attempt: "ERROR (nnet-train-one-job) objective is non-finite\n" if it == 2 else None)
    srands = [next(a for a in c if a.startswith("--srand=")) for log, c in seen if log == "train.2.1.log"]
    assert srands == ["--srand=1002", "--srand=2002"]


def test_valid_log_likelihood_far_below_best_stops_as_diverged(tmp_path, egs_info):
    valid = {0: -2.0, 1: -1.0, 2: -0.8, 3: -5.4e13}
    with pytest.raises(resume.Diverged, match=r"valid log-likelihood -5.4e\+13 per frame at iteration 3; best -0.8 "):
        drive(tmp_path, egs_info, lambda it, j: -1.0, valid=lambda it: valid.get(it, -0.7))
    with pytest.raises(resume.Diverged, match="valid log-likelihood nan"):
        drive(tmp_path / "b", egs_info, lambda it, j: -1.0, valid=lambda it: "nan" if it == 2 else -1.0)


def test_rerun_resumes_where_the_dir_left_off_and_refuses_other_settings(tmp_path, egs_info, capsys):
    loop, _ = drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    exp = tmp_path / "exp"
    drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    assert "is complete (final.mdl, accuracy.report); nothing to do" in capsys.readouterr().out
    for name in ["final.mdl", "accuracy.report"] + [f"{i}.mdl" for i in range(5, loop.num_iters + 1)]:
        os.remove(exp / name)
    (exp / "4.mdl").write_text("half a model")  # as if written by a non-atomic tool
    _, rec = drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    out = capsys.readouterr()
    assert "resuming at iteration 3" in out.out and "not resuming from" in out.err
    assert [name for name, _ in rec.commands if name.startswith("train.")][0] == "train.3.JOB.log"
    with pytest.raises(resume.Refused, match=r"manifest.json: this dir was started with other settings "
                                           r"\(num-epochs: 3 -> 4; srand: 0 -> 5\); run with --stage -1"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, num_epochs=4, srand=5)
    # Settings that shape the updates, not only the schedule, mixed two runs: a resume took them.
    with pytest.raises(resume.Refused, match=r"\(shuffle-buffer-size: 5000 -> 100\)"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, shuffle_buffer_size=100)
    old = manifest.read(exp)   # a manifest an older version wrote did not record them: not compared
    manifest.write(exp, {k: v for k, v in old.items() if k != "shuffle-buffer-size"})
    drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False, shuffle_buffer_size=100)
    drive(tmp_path, egs_info, lambda it, j: -1.0, stage=-1, num_epochs=4, srand=5)  # starting over is allowed


def test_the_egs_cmvn_goes_into_the_exp_dir_for_decoding(tmp_path, egs_info):
    """As Kaldi's copy_egs_properties_to_exp_dir: cmvn_opts, online_cmvn and global_cmvn.stats;
    a run started over on egs without online CMVN leaves none of the earlier run's behind."""
    (egs_info / "cmvn_opts").write_text("--norm-means=true --norm-vars=false\n")
    (egs_info / "online_cmvn").touch()
    (egs_info / "global_cmvn.stats").write_text("[\n 1 2 3\n 4 5 0 ]\n")
    drive(tmp_path, egs_info, lambda it, j: -1.0)
    exp = tmp_path / "exp"
    for name in ("cmvn_opts", "online_cmvn", "global_cmvn.stats"):
        assert (exp / name).read_text() == (egs_info / name).read_text(), name
    (egs_info / "online_cmvn").unlink()
    (egs_info / "global_cmvn.stats").unlink()
    drive(tmp_path, egs_info, lambda it, j: -1.0, stage=-1)
    assert not (exp / "online_cmvn").exists() and not (exp / "global_cmvn.stats").exists()


def test_egs_made_again_with_other_cmvn_are_not_resumed_on(tmp_path, egs_info, capsys):
    """The egs dir re-made under a finished run (other CMVN: cmvn_opts alike, global statistics
    new) once gave 'nothing to do'; now the run's models are not trusted with them."""
    drive(tmp_path, egs_info, lambda it, j: -1.0)
    drive(tmp_path, egs_info, lambda it, j: -1.0)   # the same egs: still complete
    assert "nothing to do" in capsys.readouterr().out
    (egs_info / "global_cmvn.stats").write_text("[\n 1 2 3\n 4 5 0 ]\n")
    with pytest.raises(resume.Refused, match=r"this dir was started with other settings \(egs-made: [0-9a-f]{16} -> "
                                           r"[0-9a-f]{16}\); run with --stage -1"):
        drive(tmp_path, egs_info, lambda it, j: -1.0)


def test_a_model_of_another_shape_is_not_resumed_from(tmp_path, egs_info, capsys):
    """A model of another width put where the run's 3.mdl was: the rerun names it and stops,
    removing nothing (it once resumed from it, trained on and said "done"); so does a --stage that
    takes it, and a dir an older version started (no fingerprint in its manifest) checks against
    its 0.mdl."""
    drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    exp = tmp_path / "exp"
    assert manifest.read(exp)[manifest.MODEL]["num-params"] == sum(
        p.numel() for p in Nnet(config.normalize(config.yaml_load(SMALL_CONFIG))).parameters())
    for name in ["final.mdl", "accuracy.report"] + [f"{i}.mdl" for i in range(4, 20)]:
        if (exp / name).exists():
            os.remove(exp / name)
    wider = config.normalize(config.yaml_load(SMALL_CONFIG.replace("dim: 16", "dim: 32")))
    model_io.save(Nnet(wider), str(exp / "3.mdl"))
    before = sorted(os.listdir(exp))
    message = r"3\.mdl: not a model of this run: \d+ parameters, where this run's models have \d+ \(.*manifest.json\)"
    with pytest.raises(resume.Refused, match=message):
        drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    with pytest.raises(resume.Refused, match=message):
        drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False, stage=3)
    old = manifest.read(exp)
    manifest.write(exp, {k: v for k, v in old.items() if k != manifest.MODEL})
    with pytest.raises(resume.Refused, match=r"3\.mdl: not a model of this run: .*\(as .*0\.mdl\)"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    assert sorted(os.listdir(exp)) == before


def test_starting_over_removes_the_earlier_runs_later_models(tmp_path, egs_info, capsys):
    """--stage -1 on a finished dir, stopped at iteration 2: the next resume must take the new run's
    2.mdl, not the old run's newest model, nor call the dir complete by its old final.mdl."""
    drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    exp = tmp_path / "exp"
    (exp / "9.3.mdl").write_text("a job's model from a killed iteration")
    for name in ("train.7.1.log", "compute_prob_valid.8.log", "combine.log", "compute_prob_valid.final.log"):
        (exp / "log" / name).write_text("the earlier run's\n")
    capsys.readouterr()
    with pytest.raises(NnetError, match="iteration 2: only 0/"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, stage=-1, cleanup=False,
              fails=lambda it, j, attempt: "killed\n" if it == 2 else None)
    assert ("removed 19 later models and outer states of an earlier run (0.mdl, 1.mdl, 2.mdl, ...)"
            in capsys.readouterr().out)  # 0..8.mdl, 9.3.mdl, final.mdl, accuracy.report and bmuf's 2..8.outer
    assert sorted(n for n in os.listdir(exp) if resume.MODEL_RE.fullmatch(n)) == ["0.mdl", "1.mdl", "2.mdl",
                                                                                  "2.outer"]  # from iteration 1
    assert not (exp / "final.mdl").exists() and not (exp / "accuracy.report").exists()
    # The earlier run's logs of what was removed went with it: nnet-report showed its figures.
    logs = os.listdir(exp / "log")
    assert not [n for n in logs if resume.FINAL_LOG_RE.fullmatch(n)]
    assert max(int(m["n"]) for n in logs if (m := resume.ITER_LOG_RE.fullmatch(n))) == 2   # the new run's
    later = {n for n in ("train.2.1.log", "train.3.1.log", "select.3.log", "average.3.log", "average.4.log",
                         "compute_prob_valid.3.log", "compute_prob_valid.4.log", "progress.4.log")
             if resume.log_is_later(resume.ITER_LOG_RE.fullmatch(n), 3)}
    assert later == {"train.3.1.log", "select.3.log", "average.3.log", "average.4.log", "compute_prob_valid.4.log",
                     "progress.4.log"}
    _, rec = drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    assert "resuming at iteration 2" in capsys.readouterr().out
    assert [name for name, _ in rec.commands if name.startswith("train.")][0] == "train.2.JOB.log"


def test_exp_lock_refuses_a_second_driver_and_takes_over_a_dead_ones(tmp_path, capsys):
    from nnet_tools.driver.exp_lock import ExpLock
    with ExpLock(str(tmp_path)):
        with pytest.raises(NnetError, match=r"driver.lock: another driver is running in this dir \(host .*, pid "
                                            rf"{os.getpid()}, started"):
            ExpLock(str(tmp_path)).acquire()
    assert not (tmp_path / "driver.lock").exists()
    dead = __import__("subprocess").Popen(["true"])
    dead.wait()
    (tmp_path / "driver.lock").write_text('{"host": "%s", "pid": %d, "started": "then"}'
                                          % (__import__("socket").gethostname(), dead.pid))
    with ExpLock(str(tmp_path)) as lock:
        assert f'"pid": {os.getpid()}' in (tmp_path / "driver.lock").read_text()
        lock.beat()
    assert "taking over a stale lock" in capsys.readouterr().err
    (tmp_path / "driver.lock").write_text('{"host": "elsewhere", "pid": 1, "started": "then"}')
    os.utime(tmp_path / "driver.lock", (0, 0))  # no heartbeat for decades
    ExpLock(str(tmp_path)).acquire().release()


def test_a_stage_whose_models_cleanup_removed_fails_before_removing_anything(tmp_path, egs_info):
    """--stage N on a finished, cleaned-up run: N.mdl is gone, so it cannot start, and it must not
    first remove final.mdl and the later models as a start over does."""
    loop, _ = drive(tmp_path, egs_info, lambda it, j: -1.0)
    exp = tmp_path / "exp"
    before = sorted(os.listdir(exp))
    gone = next(i for i in range(loop.num_iters) if not (exp / f"{i}.mdl").exists())
    with pytest.raises(NnetError, match=f"cannot resume at iteration {gone}: .*{gone}.mdl does not exist"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, stage=gone)
    assert sorted(os.listdir(exp)) == before
    missing = [i for i in loop.combine_set if not (exp / f"{i}.mdl").exists()]  # cleanup_after took them
    with pytest.raises(NnetError, match=f"cannot start at the final combination: {len(missing)} of its models do not exist"):
        drive(tmp_path, egs_info, lambda it, j: -1.0, stage=loop.num_iters)
    assert missing and sorted(os.listdir(exp)) == before


def test_resume_command_drops_stage():
    assert commands.resume_command(["steps/train_dnn.py", "--stage", "3", "--dir", "exp/a b"]) == \
        "steps/train_dnn.py --dir 'exp/a b'"
    assert commands.resume_command(["x.py", "--stage=-1", "--cmd", "nnet-queue local"]) == "x.py --cmd 'nnet-queue local'"
    # train_partitioned.py's full model: its own stage and the outer loop's dropped, stage 3 added
    assert commands.resume_command(["p.py", "--train-stage=4", "--stage", "0", "c.yaml", "egs", "exp"],
                                drop=("--stage", "--train-stage"), add=("--stage", "3")) == "p.py --stage 3 c.yaml egs exp"


def test_outer_step_program_applies_bmuf_to_parameters_and_keeps_averaged_batchnorm(tmp_path, small_model):
    from helpers import run
    from nnet_tools.model import model_io
    _, start_path = small_model
    start = model_io.load(start_path)
    avg = copy.deepcopy(start)
    with torch.no_grad():
        for p in avg.parameters():
            p.add_(1.0)
        for b in avg.buffers():
            if b.is_floating_point():
                b.add_(0.5)
    model_io.save(avg, tmp_path / "avg.mdl")
    args = ["--method", "bmuf", "--jobs", "4", "--no-nesterov", "--state-out", tmp_path / "s1"]
    run("nnet-outer-step", *args, start_path, tmp_path / "avg.mdl", tmp_path / "out.mdl", check=True)
    out = model_io.load(tmp_path / "out.mdl")
    for (k, p), (_, q) in zip(out.named_parameters(), start.named_parameters()):
        assert torch.allclose(p, q + 1.0), k  # first block: Delta = G
    assert all(torch.equal(a, b) for a, b in zip(out.buffers(), avg.buffers()))
    state = torch.load(tmp_path / "s1", weights_only=True)
    assert torch.allclose(state["delta.layers.0.affine.weight"], torch.ones_like(start.layers[0].affine.weight))
    r = run("nnet-outer-step", *args[:-1], tmp_path / "s2", "--state-in", tmp_path / "nope", start_path,
            tmp_path / "avg.mdl", tmp_path / "out2.mdl")
    assert r.returncode == 1 and "nope: no such outer-optimizer state file" in r.stderr


def test_job_command_carries_kaldis_training_options():
    opts = options.TrainerOptions(backstitch_scale=0.3, backstitch_interval=4, proportional_shrink=20.0,
                                  dropout_schedule="0,0@0.20,0.5@0.50,0", add_options=["--print-interval=5"])
    argv = commands.job_command(opts, 5, 4, 0.001, 10, "5.mdl", "egs", "6.JOB.mdl", data_fraction=0.35)
    assert "--l2-regularize-factor=0.25" in argv  # Kaldi: 1 / num_jobs
    assert "--backstitch-training-scale=0.3" in argv and "--backstitch-training-interval=4" in argv
    assert "--scale=0.92" in argv  # 1 - 20 x (0.001 x 4 jobs)
    assert "--edits=set-dropout-proportion name=* proportion=0.25" in argv  # halfway from 0@0.2 to 0.5@0.5
    assert argv[-4:] == ["--print-interval=5", "5.mdl", "egs", "6.JOB.mdl"]
    plain = commands.job_command(options.TrainerOptions(), 5, 1, 0.001, 10, "5.mdl", "egs", "6.JOB.mdl")
    assert not any(a.startswith(("--scale", "--edits", "--backstitch")) for a in plain)
    with pytest.raises(NnetError, match="proportional-shrink=200.0 is too large"):
        commands.job_command(options.TrainerOptions(proportional_shrink=200.0), 5, 4, 0.001, 10, "a", "b", "c")


def test_presoftmax_prior_scale_is_computed_from_the_egs_at_init(tmp_path):
    from nnet_tools.data import vectors
    from nnet_tools.model import presoftmax
    write_egs_dir(tmp_path / "egs")
    loop, rec = drive(tmp_path, tmp_path / "egs", lambda it, j: -1.0, presoftmax_prior_scale_power=-0.25,
                      jobs_initial=2, jobs_final=2)
    vec = tmp_path / "exp" / "presoftmax_prior_scale.vec"
    assert rec.command("init_model.log")[:3] == ["nnet-init", "--srand=0", f"--presoftmax-prior-scale={vec}"]
    labels = [egs.EgsArchive(tmp_path / "egs" / f"egs.{k}.ark").labels for k in range(1, 5)]
    counts = sum(np.bincount(l.ravel(), minlength=4) for l in labels)
    assert vectors.read_vector(str(vec), "v") == pytest.approx(presoftmax.prior_scale(counts, -0.25), rel=1e-6)


def test_background_commands_run_below_the_jobs_priority(tmp_path):
    # Diagnostics must not take the training jobs' cores on a shared node (nnet-queue local
    # gives every task its own session, which must keep the lowered priority too).
    launcher = Launcher("nnet-queue local", str(tmp_path))
    launcher.start("background.log", ["nice"])
    launcher.wait()
    launcher.run("foreground.log", ["nice"])
    niceness = {name: (tmp_path / f"{name}.log").read_text().split("\n")[3]
                for name in ("background", "foreground")}
    base = os.nice(0)
    assert niceness == {"background": str(min(base + BACKGROUND_NICENESS, 19)), "foreground": str(base)}


@pytest.mark.parametrize("change, message", [
    (dict(num_epochs=0.2), r"gives 0 iterations .* need 1 to"),           # used to train nothing, exit 0
    (dict(num_epochs=float("nan")), "--trainer.num-epochs must be finite and > 0"),
    (dict(num_epochs=1e9), r"gives \d+ iterations"),                      # a plan that would not fit in memory
    (dict(jobs_initial=0), "num-jobs-initial must be >= 1"),              # used to divide by zero
    (dict(jobs_step=0), "num-jobs-step must be >= 1"),
    (dict(final_lrate=0.0), "final-effective-lrate must be finite and > 0"),
    (dict(preserve_interval=0), "preserve-model-interval must be >= 1"),
    (dict(momentum=float("nan")), r"momentum must be in \[0, 1\)"),       # every job would fail, every retry
    (dict(minibatch_size="abc"), "minibatch-size: bad minibatch size 'abc'"),
    (dict(divergence_threshold=float("nan")), "divergence-threshold must be finite"),
    (dict(outer_method="bmuf", outer_momentum=float("nan")), r"outer.momentum must be in \[0, 1\)"),
    (dict(srand=-5), r"--trainer.srand must be in \[0, 2\^62\), got -5"),   # every job failed, every retry
    pytest.param(dict(use_gpu="yes"), r"--use-gpu yes: the jobs run on this machine \(--cmd 'nnet-queue local'\), "
                 r"where no CUDA GPU is usable", marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU"))])
def test_driver_options_out_of_range_are_refused_before_any_work(tmp_path, egs_info, change, message):
    opts = options.TrainerOptions(**{**dict(num_epochs=3, jobs_initial=2, jobs_final=4), **change})
    with pytest.raises(NnetError, match=message):
        outer_loop.OuterLoop(opts, str(egs_info), str(tmp_path / "exp"), launcher=InProcessLauncher(str(tmp_path)))
    assert not (tmp_path / "exp").exists()


def test_a_stage_past_the_end_a_bad_config_or_cmd_fail_before_any_work(tmp_path, egs_info):
    (egs_info / "info" / "feat_dim").write_text("6\n")
    loop = outer_loop.OuterLoop(options.TrainerOptions(num_epochs=3, jobs_initial=2, jobs_final=4), str(egs_info),
                           str(tmp_path / "exp"), launcher=InProcessLauncher(str(tmp_path)))
    with pytest.raises(NnetError, match=rf"--stage 100 is past this run's last stage, {loop.num_iters}"):
        loop.run(stage=100)      # used to say 'complete' with no model
    (tmp_path / "m.yaml").write_text(SMALL_CONFIG.replace("input-dim: 6", "input-dim: 7"))
    with pytest.raises(NnetError, match=r"m.yaml: input-dim 7 does not match the egs' feature dim 6"):
        loop.run(config=str(tmp_path / "m.yaml"))
    (egs_info / "info" / "output_dim").write_text("5\n")   # the config's output layer has 4
    (tmp_path / "m.yaml").write_text(SMALL_CONFIG)
    with pytest.raises(NnetError, match=r"m.yaml: the output layer's dim 4 is less than the egs' output dim 5"):
        loop.run(config=str(tmp_path / "m.yaml"))   # used to fail in every job, after its retries
    (egs_info / "info" / "output_dim").unlink()
    assert not (tmp_path / "exp" / "manifest.json").exists()
    (egs_info / "combine.egs").unlink()   # used to be found after the last iteration
    with pytest.raises(NnetError, match="combine.egs: no such file; the final combination needs it"):
        loop.run()
    with pytest.raises(NnetError, match=r"--dir '.*d\$x': shell characters"):   # the task's bash would expand $x
        outer_loop.OuterLoop(loop.opts, str(egs_info), str(tmp_path / "d$x"), launcher=InProcessLauncher(str(tmp_path)))
    for cmd, message in (("no-such-queue local", "no program 'no-such-queue' on PATH"), ("", "empty"),
                         ("nnet-queue 'local", "No closing quotation")):
        with pytest.raises(NnetError, match=message):
            Launcher(cmd, str(tmp_path))


def test_a_run_that_failed_before_its_first_model_starts_over_with_new_settings(tmp_path, egs_info):
    """Fixing a config that broke stage -1 and re-running must not be refused as 'other settings'."""
    exp = tmp_path / "exp"
    (tmp_path / "first.yaml").write_text(SMALL_CONFIG.replace("dim: 16", "dim: 12"))
    opts = options.TrainerOptions(num_epochs=3, jobs_initial=2, jobs_final=4)
    exp.mkdir()   # the manifest an earlier run wrote before its stage -1 failed
    manifest.write(str(exp), manifest.describe(opts, str(egs_info), 8, 1, config=str(tmp_path / "first.yaml")))
    drive(tmp_path, egs_info, lambda it, j: -1.0)   # same dir, another config: runs
    assert (exp / "final.mdl").exists()


def test_outer_step_refuses_what_would_make_a_nan_model():
    for kwargs, message in ((dict(momentum=float("nan")), r"--momentum in \[0, 1\)"),
                            (dict(learning_rate=float("inf")), "finite --learning-rate > 0"),
                            (dict(jobs=0), "--jobs must be >= 1")):
        with pytest.raises(NnetError, match=message):
            outer_optim.make("bmuf", **{"jobs": 2, **kwargs})
    params = {"w": torch.zeros(2, 3)}
    outer_optim.check_state({}, "bmuf", params, "s")
    outer_optim.check_state({"w.w": torch.zeros(2, 3), "delta.w": torch.zeros(2, 3)}, "bmuf", params, "s")
    with pytest.raises(NnetError, match="s: not a nesterov state for this model"):
        outer_optim.check_state({"w.w": torch.zeros(2, 3), "delta.w": torch.zeros(2, 3)}, "nesterov", params, "s")
    with pytest.raises(NnetError, match=r"s: delta.w is not a finite tensor of the parameter's shape \(2, 3\)"):
        outer_optim.check_state({"w.w": torch.zeros(2, 3), "delta.w": torch.full((2, 3), float("nan"))},
                                "bmuf", params, "s")


def test_the_stall_limit_follows_the_previous_iteration_and_diagnostics_have_their_own(tmp_path, egs_info):
    """Default: 4 x the previous iteration's longest job (its logs' accounting), at least 60 s,
    600 s with no earlier logs; --trainer.stall-limit sets it (0: never). The diagnostics get no
    stall limit and a --max-wait of 10 stall limits, whatever $cmd says."""
    log = tmp_path / "log"
    log.mkdir()
    opts = options.TrainerOptions()
    assert commands.stall_limit(opts, tmp_path, 0) == 600 and commands.stall_limit(opts, tmp_path, 3) == 600
    (log / "train.2.1.log").write_text("# Accounting: time=5 threads=1\n")
    assert commands.stall_limit(opts, tmp_path, 3) == 60
    (log / "train.2.2.log").write_text("# Accounting: time=31 threads=1\n# Ended (code 0) at x\n")
    (log / "train.2.2.log.failed.1").write_text("# Accounting: time=900 threads=1\n")   # not a job's final log
    assert commands.stall_limit(opts, tmp_path, 3) == 124
    assert commands.stall_limit(dataclasses.replace(opts, stall_limit=0.0), tmp_path, 3) == 0
    loop, rec = drive(tmp_path / "run", egs_info, lambda it, j: -1.0)
    assert rec.launcher_opts["train.0.JOB.log"][-2:] == ["--stall-limit", "600"]
    assert rec.launcher_opts["compute_prob_valid.0.log"] == ["--num-threads", "1", "--stall-limit", "0",
                                                             "--max-wait", "6000"]


def test_diagnostics_that_did_not_finish_run_again_on_resume(tmp_path, egs_info, capsys):
    """A Ctrl-C while iteration 2 trained stopped iteration 1's diagnostics, still running: the
    report lost an iteration. The resume runs them again (where the model is still there)."""
    loop, _ = drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    exp = tmp_path / "exp"
    for name in ["final.mdl", "accuracy.report"] + [f"{i}.mdl" for i in range(4, loop.num_iters + 1)]:
        os.remove(exp / name)
    (exp / "log" / "compute_prob_valid.1.log").write_text("LOG (nnet-compute-prob[x]:f():d.py:1) starting\n")
    capsys.readouterr()
    _, rec = drive(tmp_path, egs_info, lambda it, j: -1.0, cleanup=False)
    assert "running iteration 1's diagnostics again (they did not finish)" in capsys.readouterr().out
    started = [name for name, _ in rec.commands if name.startswith("compute_prob_valid.")]
    assert started[0] == "compute_prob_valid.1.log" and "compute_prob_valid.0.log" not in started
    assert rec.command("progress.1.log")[-2:] == [str(exp / "0.mdl"), str(exp / "1.mdl")]


def test_chunk_training_counts_an_epoch_in_whole_archives(tmp_path, egs_info):
    """--trainer.chunk-training: each job trains on every frame of its archive (--chunk=true), so
    an epoch is one pass over the archives, where the --frame scheme needs frames-per-eg passes."""
    (egs_info / "info" / "frames_per_eg").write_text("4\n")
    frame_loop, frec = drive(tmp_path / "frame", egs_info, lambda it, j: -1.0, num_epochs=1, chunk_training=False)
    chunk_loop, rec = drive(tmp_path / "chunk", egs_info, lambda it, j: -1.0, num_epochs=1)   # the default
    assert chunk_loop.num_iters == schedule.num_iters(1, 8, 1, 2, 4)[0] < frame_loop.num_iters == schedule.num_iters(1, 8, 4, 2, 4)[0]
    assert "--chunk=true" in rec.command("train.0.JOB.log") and "--chunk=false" in frec.command("train.0.JOB.log")
