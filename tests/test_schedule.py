"""The driver's arithmetic against the worked numbers in reference/kaldi-framework.md §3."""
import math

import pytest

from nnet_tools.data import egs
from nnet_tools.driver import schedule
from nnet_tools.train.minibatch import halve


def test_jobs_ramp_matches_kaldi_unit_test():
    assert [schedule.current_num_jobs(i, 12, 2, 9) for i in range(12)] == [2, 3, 3, 4, 4, 5, 6, 6, 7, 7, 8, 8]
    assert [schedule.current_num_jobs(i, 12, 2, 9, 3) for i in range(12)] == [2, 3, 3, 3, 3, 6, 6, 6, 6, 6, 9, 9]


def test_num_iters_worked_examples():
    # 100 h speech: 12 archives x 8 frames per eg, 4 epochs, jobs 2 -> 12.
    assert schedule.num_iters(4, 12, 8, 2, 12) == (54, 384)
    # CIFAR-10: 2 archives, 140 epochs, jobs 1 -> 2; and 3 archives, 30 epochs.
    assert schedule.num_iters(140, 2, 1, 1, 2) == (186, 280)
    assert schedule.num_iters(30, 3, 1, 1, 2)[0] == 60


def test_cifar_jobs_switch_at_half():
    jobs = [schedule.current_num_jobs(i, 186, 1, 2) for i in range(186)]
    assert jobs[:93] == [1] * 93 and jobs[93:] == [2] * 93


def test_learning_rate_decays_exponentially_in_data_and_ends_at_final():
    plan = schedule.plan(4, 12, 8, 2, 12, 0.0003, 0.00003)
    assert len(plan) == 54
    assert plan[0][2] == 0.0003
    assert plan[-1][2] == 0.00003
    it, jobs, lr, processed = plan[20]
    assert lr == pytest.approx(0.0003 * math.exp(processed / 384 * math.log(0.1)))
    # processed advances by the jobs of each iteration
    assert [p for *_, p in plan[:4]] == [0, 2, 4, 6]
    assert all(a[2] > b[2] for a, b in zip(plan, plan[1:]))


def test_archive_and_frame_rotation():
    # k = processed + job - 1; archive = k % A + 1; frame = (k // A + archive) % fpe
    assert egs.archive_and_frame(0, 1, 12, 8) == (1, 1)
    assert egs.archive_and_frame(11, 2, 12, 8) == (1, 2)   # k = 12: second pass, archive 1
    assert egs.archive_and_frame(5, 3, 4, 1) == (4, 0)
    seen = {egs.archive_and_frame(k, 1, 12, 8) for k in range(96)}
    assert len(seen) == 96  # one epoch visits every (archive, frame) exactly once


def test_combine_iters():
    assert schedule.combine_iters(186, 2, 2) == list(range(167, 187))
    assert schedule.combine_iters(10, 4, 4) == [6, 7, 8, 9, 10]
    # Large data: 192 expanded archives / 2 final jobs -> initial 49 > 20: stride int(49/20) = 2.
    assert schedule.combine_iters(400, 192, 2) == list(range(352, 401, 2))
    assert schedule.combine_iters(401, 192, 2) == list(range(353, 402, 2))


def test_halve_minibatch_string():
    assert halve("512") == "256"
    assert halve("256,128,64") == "128,64,32"
    assert halve("128=64/256=40,80:100") == "128=32/256=20,40:50"
    assert halve("1") == "1"
