#!/usr/bin/env python3
"""P3 of a finished run, from its logs: the driver's and the diagnostics' share of each iteration
(issue 31: at most 5 % on the 50k run's iterations). benchmarks/iteration_overhead.py measures
the same on a synthetic iteration; this one reads what a real run left in EXP/log.

An iteration's wall time runs from the end of the previous iteration's averaging (average.N.log,
or select.0.log; for iteration 0, from the first start of its training jobs) to the end of its
own. The jobs' own time is the time some train.N.J.log's task was running (the union of their
intervals: process start and model I/O included; jobs that wait for a free slot run in waves,
which counts as the jobs' time, not overhead). The rest is the overhead: the queue's latency,
the driver's bookkeeping, averaging, and the diagnostics where they delay the next iteration.
Log times have one-second resolution.

    python3 benchmarks/run_overhead.py EXP_DIR      e.g. recipes/spoken_digits/exp/nnet
"""
import glob
import os
import sys

from nnet_tools.queue import tasklog
from nnet_tools.report import logparse
from nnet_tools.report.summary import TRAIN_LOG_RE

GOAL = 0.05


def busy(spans):
    """Seconds during which at least one of the (start, end) ``spans`` was running."""
    total, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def iterations(exp):
    """Per iteration: (n, wall seconds, the jobs' busy seconds, number of jobs)."""
    jobs = {}
    for path in glob.glob(os.path.join(exp, "log", "train.*.*.log")):
        if (m := TRAIN_LOG_RE.search(path)) and (s := tasklog.span(path)):
            jobs.setdefault(int(m.group(1)), []).append(s)
    # Iteration 0 selects the best job's model, the others average; the last is combined (not
    # counted), or the run stopped in it.
    ends = {**logparse.numbered_logs(exp, "average.{}.log"), **logparse.numbered_logs(exp, "select.{}.log")}
    rows, previous_end = [], None
    for n in sorted(jobs):
        averaged = tasklog.span(ends[n]) if n in ends else None
        if averaged is None:
            continue
        begin = previous_end if previous_end is not None else min(start for start, _ in jobs[n])
        rows.append((n, averaged[1] - begin, busy(jobs[n]), len(jobs[n])))
        previous_end = averaged[1]
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    rows = iterations(sys.argv[1])
    if not rows:
        sys.exit(f"run_overhead.py: no finished iteration (train.N.J.log and average.N.log) in {sys.argv[1]}/log")
    print(f"{'iter':>4s} {'jobs':>4s} {'wall s':>7s} {'jobs s':>7s} {'overhead':>8s}")
    for n, wall, job, count in rows:
        print(f"{n:4d} {count:4d} {wall:7.0f} {job:7.0f} {(wall - job) / wall if wall else 0:8.1%}")
    wall, job = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"P3 overhead of {len(rows)} iterations: {(wall - job) / wall:.3f} "
          f"({wall - job:.0f} s of {wall:.0f} s; goal <= {GOAL})")


if __name__ == "__main__":
    main()
