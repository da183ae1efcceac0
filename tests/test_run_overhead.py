"""benchmarks/run_overhead.py (P3 from a run's logs) on logs written by hand."""
import sys

from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))   # benchmark-only code: not part of the package
import run_overhead  # noqa: E402


def write_log(path, start, end, elapsed, code=0):
    path.write_text(f"# cmd\n# Started at Sat Dec  5 17:{start} UTC 2026\n#\nLOG ...\n"
                    f"# Accounting: time={elapsed} threads=1\n"
                    f"# Ended (code {code}) at Sat Dec  5 17:{end} UTC 2026, elapsed time {elapsed} seconds\n")


def test_iterations_run_from_one_averaging_to_the_next_and_count_the_time_jobs_ran(tmp_path):
    log = tmp_path / "log"
    log.mkdir()
    write_log(log / "train.0.1.log", "00:00", "00:08", 8)
    write_log(log / "train.0.2.log", "00:01", "00:06", 5)
    write_log(log / "select.0.log", "00:09", "00:10", 1)        # iteration 0 ends at :10
    write_log(log / "train.1.1.log", "00:12", "00:20", 8)
    write_log(log / "train.1.2.log", "00:21", "00:30", 9)       # a second wave: 17 s of jobs
    write_log(log / "average.1.log", "00:31", "00:34", 3)       # iteration 1: :10 -> :34
    write_log(log / "train.2.1.log", "00:40", "00:50", 10)      # the last: combined, not counted
    (log / "train.3.1.log").write_text("# cmd\n# Started at Sat Dec  5 17:01:00 UTC 2026\n#\n")  # unfinished
    assert run_overhead.iterations(tmp_path) == [(0, 10.0, 8.0, 2), (1, 24.0, 17.0, 2)]
