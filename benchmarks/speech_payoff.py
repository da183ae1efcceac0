#!/usr/bin/env python3
"""P4 on speech frames (issue 32): how many frames do N averaged jobs need to reach what 1 job
reaches, and at what WER?

The data is a spoken_digits recipe dir run through its egs stage, e.g. 10000 utterances (8000
training, 2.2M frames) in 64 archives, so that an iteration at N = 8 is an eighth of an epoch:

    benchmarks/recipe_scale.sh --sizes 10000 --cmd "nnet-queue local" --nj 2 \\
        --recipe-opts "--stop-stage 6 --min-archives 64" /work/study
    python3 benchmarks/speech_payoff.py --decode --plots /work/study/plots \\
        /work/study/recipes/sd10000 /work/study/payoff

Each arm (method x N jobs: plain SGD, NG-SGD, NG + BMUF, NG + Nesterov, as ng_averaging.py) is a
run of the driver's own loop (ng_averaging.train: OuterLoop with the in-process launcher, the
same per-job rate x N rule) into OUT/<method>.<N>, the recipe's model config with
natural-gradient set. Its curve is the driver's own diagnostics: compute_prob_valid.<i>.log (the
recipe's valid_diagnostic.egs, utterances held out of training) at the frames iterations 0..i-1
trained on, then the final (combined) model's. A finished arm (final.mdl, its wall time and
settings) is not trained again, and one trained with other settings is refused: the study can be
stopped and rerun, or run in pieces (--methods, --jobs).

Targets (issue 32): the 1-job run of the same family (plain SGD for plain SGD, NG with plain
averaging for every NG arm): valid frame accuracy at 50, 80 and 95 % of its gain over the initial
model, and its final value. Ratio = frames N jobs needed / frames 1 job needed, read at iteration
ends: an N-job arm cannot show a target before its first average (N archives), which the
"frames per iteration" line gives. With --decode, every arm's final model is decoded on the
recipe's test set (steps/decode.sh with its mono graph) and scored as Kaldi's (LMWT 7-17, WIP
0/0.5/1). The last lines, one per arm, are "P4 speech N=<n> <method>: worst samples ratio <r>".
Wall time: this process, one thread, jobs one after another (work, not a cluster's speed-up).

Tuning (--lrate-factors 0.5,1,2): every arm is trained at each factor x the learning rates
(OUT/<method>.<N>.lr<f>; factor 1 is OUT/<method>.<N>), and the one with the highest final valid
accuracy stands for the arm, the 1-job runs that set the targets included; the tuning lines print
what each factor reached. Only the chosen models are decoded.
"""
import argparse
import copy
import logging
import math
import os
import subprocess
import sys
import time

import torch
import yaml

from ng_averaging import METHODS, arm_arguments, ng_vs_plain, parse_arms, ratio_lines, train, write_json
from nnet_tools import fileio
from nnet_tools.data.egs import read_info
from nnet_tools.log import logger
from nnet_tools.model import config
from nnet_tools.report import logparse, plots, series


def write_config(path, source, ng):
    """The recipe's model config with natural-gradient set as the method needs."""
    cfg = config.yaml_load(open(source).read())
    cfg["natural-gradient"] = ng
    fileio.write_text(path, yaml.safe_dump(cfg, sort_keys=False))  # atomic: runs of other factors read it


def logged_curve(exp):
    """[(frames trained on, valid log-likelihood, valid accuracy)] from the driver's diagnostics:
    each iteration's model, then the final model at the last iteration's frames."""
    run = series.read(exp)
    acc, ll = run.prob["accuracy"]["valid"], run.prob["log-likelihood"]["valid"]
    curve = [(run.samples_before[i], ll[i], acc[i]) for i in sorted(acc) if i in run.samples_before]
    final = logparse.compute_prob(os.path.join(exp, "log", "compute_prob_valid.final.log"))
    return curve + [(curve[-1][0], final["log-likelihood"], final["accuracy"])]


def run_arm(args, exp, method, jobs):
    """Train the arm unless a finished one is there; returns its wall seconds."""
    wall_file, settings_file = os.path.join(exp, "wall_seconds"), os.path.join(exp, "settings")
    settings = " ".join(f"{k}={getattr(args, k)}" for k in ("epochs", "initial_lrate", "final_lrate", "minibatch",
                                                            "outer_momentum", "outer_learning_rate")) + "\n"
    if os.path.exists(os.path.join(exp, "final.mdl")) and os.path.exists(wall_file):
        if open(settings_file).read() != settings:
            raise SystemExit(f"{exp}: trained with {open(settings_file).read().strip()}, not {settings.strip()}")
        return float(open(wall_file).read())
    if os.path.exists(exp):
        raise SystemExit(f"{exp}: an unfinished arm is there; remove it to train it again")
    ng, outer_method = METHODS[method]
    cfg = os.path.join(args.out, f"{method}.yaml")
    write_config(cfg, os.path.join(args.recipe, "exp", "model.yaml"), ng)
    started = time.time()
    train(os.path.join(args.recipe, "exp", "egs"), exp, cfg, jobs, outer_method, args)
    wall = time.time() - started
    with open(settings_file, "w") as f:
        f.write(settings)
    with open(wall_file, "w") as f:
        f.write(f"{wall:.1f}\n")
    return wall


def arm_dir(out, method, jobs, factor):
    return os.path.join(out, f"{method}.{jobs}" + ("" if factor == 1 else f".lr{factor:g}"))


def tune(args, method, jobs):
    """Train the arm at each learning-rate factor; returns ({factor: (exp, wall, curve)}, the chosen factor):
    the highest final valid accuracy, ties to the factor nearest 1."""
    runs = {}
    for factor in args.lrate_factors:
        scaled = copy.copy(args)
        scaled.initial_lrate, scaled.final_lrate = args.initial_lrate * factor, args.final_lrate * factor
        exp = arm_dir(args.out, method, jobs, factor)
        wall = run_arm(scaled, exp, method, jobs)
        runs[factor] = exp, wall, logged_curve(exp)
    chosen = max(runs, key=lambda f: (runs[f][2][-1][2], -abs(math.log(f))))
    return runs, chosen


def decode(args, exp):
    """The recipe's steps/decode.sh on exp/final.mdl; returns (WER at LMWT 10 and WIP 0, best line)."""
    out = os.path.join(exp, "decode_test")
    if not os.path.exists(os.path.join(out, "scoring_kaldi", "best_wer")):
        cmvn_opts = open(os.path.join(args.recipe, "exp", "egs", "cmvn_opts")).read().strip()
        cmd = ["steps/decode.sh", "--nj", str(args.nj), "--cmd", "nnet-queue local", "--nnet", f"{exp}/final.mdl",
               "--cmvn-opts", cmvn_opts, "--trans-model", "exp/mono_ali/final.mdl", "exp/mono/graph",
               "data/test_fbank", out]
        with open(os.path.join(exp, "decode.log"), "w") as log:
            if subprocess.run(cmd, cwd=args.recipe, stdout=log, stderr=subprocess.STDOUT).returncode:
                raise SystemExit(f"decoding {exp} failed: see {exp}/decode.log")
    at10 = open(os.path.join(out, "wer_10_0.0")).read().split()[1]
    return float(at10), open(os.path.join(out, "scoring_kaldi", "best_wer")).read().strip()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", help="a spoken_digits recipe dir run through stage 6 (exp/egs, exp/model.yaml)")
    p.add_argument("out", help="the arms' exp dirs go here (kept: rerunning reuses finished arms)")
    arm_arguments(p, epochs=1.0, minibatch="32,16", minibatch_help="in egs of 8 frames (the recipe's)")
    p.add_argument("--decode", action="store_true", help="decode every arm's final model on the recipe's test set")
    p.add_argument("--nj", type=int, default=2, help="decoding jobs")
    p.add_argument("--plots", metavar="OUTDIR", help="nnet-report's plots of every arm against frames trained on")
    p.add_argument("--lrate-factors", default="1", help="the tuning pass: each arm at these multiples of the "
                   "learning rates, the best final valid accuracy kept (e.g. 0.5,1,2)")
    args = parse_arms(p)
    args.lrate_factors = [float(f) for f in args.lrate_factors.split(",")]
    args.recipe, args.out = os.path.abspath(args.recipe), os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    logger.setLevel(logging.WARNING)
    torch.set_num_threads(1)
    egs_dir = os.path.join(args.recipe, "exp", "egs")
    frames, archives = int(read_info(egs_dir, "num_frames")), int(read_info(egs_dir, "num_archives"))
    print(f"== speech: {egs_dir}: {frames} training frames in {archives} archives ({frames // archives} "
          f"frames per archive); {args.epochs} epochs, effective lrate {args.initial_lrate} -> {args.final_lrate} "
          f"(per job x N), minibatch {args.minibatch} egs; held out: valid_diagnostic.egs; learning rates x "
          f"{','.join(f'{f:g}' for f in args.lrate_factors)}", flush=True)

    curves, walls, wers, exps, tuning = {}, {}, {}, {}, {}
    for method in args.methods:
        for jobs in args.jobs:
            if jobs == 1 and method == "bmuf":  # bmuf's default momentum 1 - 1/N is 0: plain averaging
                continue
            runs, chosen = tune(args, method, jobs)
            exp, wall, curve = runs[chosen]
            exps[method, jobs], walls[method, jobs], curves[method, jobs] = exp, wall, curve
            tuning[method, jobs] = {"chosen": chosen, "final": {f: run[2][-1][2] for f, run in runs.items()}}
            if len(runs) > 1:
                print(f"tuning {method:>9} x{jobs}: final valid acc " + "  ".join(
                    f"lrate x{f:g} {run[2][-1][2]:.4f}" for f, run in runs.items()) + f" -> x{chosen:g}", flush=True)
            line = (f"{method:>9} x{jobs}: {wall:6.0f} s, {curve[1][0]} frames per iteration, "
                    f"final valid acc {curve[-1][2]:.4f}, loglik {curve[-1][1]:.4f} after {curve[-1][0]} frames")
            if args.decode:
                wers[method, jobs] = decode(args, exp)
                line += f"; WER {wers[method, jobs][0]:.2f} (LMWT 10, WIP 0), best {wers[method, jobs][1]}"
            print(line, flush=True)
    if "bmuf" in args.methods:
        for table in (curves, walls, wers, tuning):
            if ("ng", 1) in table:
                table["bmuf", 1] = table["ng", 1]

    print("\nP4 speech: frames N jobs need / frames 1 job needs ('-' = never reached, with the value it ended at)")
    ratios = {}
    for method in args.methods:
        one = curves["plain" if method == "plain" else "ng", 1]
        start, end = one[0][2], one[-1][2]
        # the final value itself, not start + 1.0 * (end - start), which rounds above it half the time
        values = [(f, end if f == 1.0 else start + f * (end - start)) for f in (0.5, 0.8, 0.95, 1.0)]
        targets = [(2, value, f"acc {value:.4f} ({f:.0%} of gain)") for f, value in values]
        ratios[method] = ratio_lines("speech", method, curves, targets, args.jobs)
        if args.decode:
            base = wers["plain" if method == "plain" else "ng", 1][0]
            print(f"P4 speech {method:>9} final WER (LMWT 10, WIP 0), 1 job {base:.2f}: "
                  + "  ".join(f"N={j}: {wers[method, j][0]:.2f}" for j in args.jobs))
        print(f"P4 speech {method:>9} wall s: " + "  ".join(f"N={j}: {walls[method, j]:.0f}" for j in args.jobs))
    if args.plots:
        drawn = plots.write_plots(args.plots, list(dict.fromkeys(exps.values())), x_axis="samples")
        print(f"\nWrote {len(drawn)} plots and {args.plots}/index.html (x: frames trained on)")
    one_job = ng_vs_plain("speech", curves, column=2)
    if args.json:
        write_json(args.json, f"spoken_digits {os.path.basename(args.recipe)}: {frames} training frames in {archives} "
                   f"archives, {args.epochs} epoch(s); valid_diagnostic.egs held out", args, ratios, curves, walls,
                   one_job, "final valid frame acc", wers, tuning)
    print()
    for method in args.methods:
        for jobs in args.jobs[1:]:
            r = ratios[method]["worst"][jobs]
            print(f"P4 speech N={jobs} {method}: worst samples ratio {'never' if r is None else f'{r:.2f}'}")


if __name__ == "__main__":
    sys.exit(main())
