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
import re
import sys
import time

GOAL = 0.05
_STARTED = re.compile(r"^# Started at (.+)$", re.MULTILINE)
_ENDED = re.compile(r"^# Ended \(code \d+(?:; signal \d+)?\) at (.+), elapsed time (\d+) seconds$", re.MULTILINE)


def _seconds(stamp):
    return time.mktime(time.strptime(stamp.strip(), "%a %b %d %H:%M:%S %Z %Y"))


def read_log(path):
    """(start, end, elapsed) of one task log, or None if it did not finish."""
    text = open(path, errors="replace").read()
    started, ended = _STARTED.search(text), list(_ENDED.finditer(text))
    if not started or not ended:
        return None
    return _seconds(started[1]), _seconds(ended[-1][1]), int(ended[-1][2])


def busy(tasks):
    """Seconds during which at least one of ``tasks`` (start, end, elapsed) was running."""
    total, reach = 0.0, None
    for start, end, _ in sorted(tasks):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def iterations(exp):
    """Per iteration: (n, wall seconds, the jobs' busy seconds, number of jobs)."""
    log = os.path.join(exp, "log")
    jobs = {}
    for path in glob.glob(os.path.join(log, "train.*.*.log")):
        n = int(os.path.basename(path).split(".")[1])
        if (t := read_log(path)):
            jobs.setdefault(n, []).append(t)
    rows, previous_end = [], None
    for n in sorted(jobs):
        # Iteration 0 selects the best job's model (select.0.log), the others average; the last
        # is combined (not counted), or the run stopped in it.
        ends = [read_log(p) for p in (os.path.join(log, f"{kind}.{n}.log") for kind in ("average", "select"))
                if os.path.exists(p)]
        averaged = next((e for e in ends if e), None)
        if averaged is None:
            continue
        begin = previous_end if previous_end is not None else min(t[0] for t in jobs[n])
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
