"""Per-frame cost of each recipe stage at two data sizes (issue 31: no stage may cost more per
frame at the large size than at the small one by more than 25 %).

Reads each run's exp/stage_times (steps/stages.sh: stage, wall seconds, peak MB) and its frame
counts from the logs: training frames from the alignment logs (exp/<ali>/log/align.*.log,
"... over N frames"), test frames from the first GMM decode's (exp/<gmm>/decode_test/log). Data
and feature stages count both; decodes and vosk count test frames; the lang stage does not
grow with the data and gets no ratio.

Usage: python benchmarks/stage_costs.py SMALL_RUN LARGE_RUN [--ali mono_ali --gmm mono]
  e.g. python benchmarks/stage_costs.py /data/sd5k /data/sd50k   (recipe dirs, each with exp/)
"""
import argparse
import glob
import os
import re
import sys

TEST_STAGES = {"gmm_decode", "dnn_decode", "vosk"}
ALL_STAGES = {"data", "features"}
FIXED_STAGES = {"lang"}
GOAL = 1.25
_FRAMES = re.compile(r"over (\d+) frames\.$")


def overall_frames(pattern):
    """Sum of the last 'over N frames.' line of each log matching pattern (a job's total)."""
    total = 0
    for log in glob.glob(pattern):
        found = [int(m.group(1)) for line in open(log, errors="replace")
                 if "Overall" in line and (m := _FRAMES.search(line.rstrip()))]
        total += found[-1] if found else 0
    return total


def read_run(run, ali, gmm):
    stages = {}
    with open(os.path.join(run, "exp", "stage_times")) as f:
        for line in f:
            name, wall, *peak = line.split()
            stages[name] = (int(wall), int(peak[0]) if peak else None)
    train = overall_frames(os.path.join(run, "exp", ali, "log", "align.*.log"))
    test = overall_frames(os.path.join(run, "exp", gmm, "decode_test", "log", "decode.*.log"))
    if not train or not test:
        sys.exit(f"stage_costs.py: {run}: no frame counts in exp/{ali}/log/align.*.log or "
                 f"exp/{gmm}/decode_test/log/decode.*.log")
    return stages, {"train": train, "test": test, "all": train + test}


def basis(stage):
    if stage in FIXED_STAGES:
        return None
    return "test" if stage in TEST_STAGES else "all" if stage in ALL_STAGES else "train"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("small")
    p.add_argument("large")
    p.add_argument("--ali", default="mono_ali", help="alignment dir under exp/ (training frames)")
    p.add_argument("--gmm", default="mono", help="GMM dir under exp/ whose decode_test counts test frames")
    args = p.parse_args()
    (s_st, s_fr), (l_st, l_fr) = (read_run(r, args.ali, args.gmm) for r in (args.small, args.large))
    print(f"frames: train {s_fr['train']} -> {l_fr['train']} ({l_fr['train'] / s_fr['train']:.1f}x), "
          f"test {s_fr['test']} -> {l_fr['test']} ({l_fr['test'] / s_fr['test']:.1f}x)")
    print(f"{'stage':12s} {'wall s':>8s} {'wall s':>8s} {'peak MB':>8s} {'peak MB':>8s}  per-frame cost large / small")
    over = []
    for stage in [s for s in l_st if s in s_st]:
        (sw, sp), (lw, lp) = s_st[stage], l_st[stage]
        b = basis(stage)
        ratio = "-"
        if b and sw > 0:
            r = (lw / l_fr[b]) / (sw / s_fr[b])
            ratio = f"{r:.2f} ({b} frames)"
            if r > GOAL:
                over.append(stage)
        print(f"{stage:12s} {sw:8d} {lw:8d} {sp if sp is not None else '-':>8} {lp if lp is not None else '-':>8}  {ratio}")
    print(f"stages over {GOAL:.2f}: {' '.join(over) if over else 'none'}")


if __name__ == "__main__":
    main()
