"""The iteration cost model (docs/cost-model.md, benchmarks/iteration_cost.py) on cases worked
out by hand."""
import math
import sys

import pytest

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))   # benchmark-only code: not part of the package
import iteration_cost as cost  # noqa: E402

FREE = dict(program_start=0.0, load_per_param=0.0, save_per_param=0.0, average_per_param=0.0, launch_fixed=0.0,
            launch_wave=0.0, egs_bytes=0.0, diag_egs=0)
NO_DISK = cost.Cluster(node_bw=math.inf, nfs_bw=math.inf)


def test_free_communication_gives_the_ideal_speedup():
    c = cost.Constants(job_rate=1e9, **FREE)
    for n in (1, 8, 256):
        assert cost.speedup(c, NO_DISK, n, 20e6, 400000) == pytest.approx(n)


def test_terms_follow_the_formulas():
    c = cost.Constants(job_rate=100.0, **{**FREE, "program_start": 1.0, "average_per_param": 0.5,
                                          "launch_fixed": 2.0, "launch_wave": 1.0, "egs_bytes": 4.0})
    cl = cost.Cluster(node_bw=8.0, nfs_bw=16.0)   # 4 jobs: each streams at 16 / 4 = 4 B/s
    it = cost.iteration(c, cl, 4, 10, 20)          # 10 params = 40 bytes; 20 egs
    assert it.launch == 3.0
    assert it.job_compute == 20 * 10 / 100.0
    assert it.job_io == (2 * 40 + 20 * 4.0) / 4.0
    assert it.job_cpu == 1.0
    assert it.averaging == 3.0 + 1.0 + 4 * (0.5 * 10 + 40 / 8.0) + 40 / 8.0
    assert it.queueing == 0.0


def test_averaging_passes_a_tenth_where_the_closed_form_says():
    # Only training (900 s) and averaging (1 s per model): A(N) = N > 0.1 (900 + N) from N > 100.
    c = cost.Constants(job_rate=1.0, **{**FREE, "average_per_param": 1.0})
    assert cost.averaging_limit(c, NO_DISK, 1, 900) == 101
    assert cost.flattening_point(c, NO_DISK, 1, 900) is not None


def test_tree_is_flat_up_to_the_fanin_and_cheaper_beyond():
    c = cost.Constants(job_rate=1e9, **{**FREE, "average_per_param": 1e-8, "launch_fixed": 1.0, "launch_wave": 0.5})
    cl = cost.Cluster(node_bw=1.25e9, nfs_bw=10e9)
    assert cost.averaging_cost(c, cl, 16, 20e6, fanin=16) == cost.averaging_cost(c, cl, 16, 20e6)
    assert cost.averaging_cost(c, cl, 256, 20e6, fanin=16) < cost.averaging_cost(c, cl, 256, 20e6) / 4
    assert cost.speedup(c, cl, 256, 20e6, 400000, fanin=16) > cost.speedup(c, cl, 256, 20e6, 400000)


def test_one_host_queues_jobs_behind_the_diagnostics():
    assert cost.makespan([3, 3, 1, 5, 5], 2) == 9    # 3, 3 | 1 after the first | 5, 5 on the freest
    c = cost.Constants(job_rate=1.0, **{**FREE, "program_start": 1.0, "diag_egs": 6})
    here = cost.Cluster(node_bw=math.inf, nfs_bw=math.inf, slots=2)
    it = cost.iteration(c, here, 2, 1, 10)        # diagnostics: 1 + 1, 1 + 1, 1 s; jobs 11 s each
    assert it.queueing == pytest.approx(cost.makespan([2, 2, 1, 11, 11], 2) - 11) == 3
