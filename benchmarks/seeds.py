#!/usr/bin/env python3
"""Every seed claim in one table (issue 32): the papers' figure, ours, the data and the command.

    python3 benchmarks/seeds.py [--work /work/seeds]   # runs what --work lacks (hours), prints the
                                                       # table and stores it in docs/results.md
    python3 benchmarks/seeds.py --from-results         # prints the table the last run stored

Each piece is one benchmark's --json output in --work, made by the benchmark that measures it;
one that is there is reused (remove it to measure again), so a run can be stopped and rerun:
  fashion.json   ng_averaging.py: P4 on full Fashion-MNIST, plain SGD and NG arms, N = 1, 2, 4, 8
  speech.json    recipe_scale.sh (spoken_digits, 10000 utterances, 64 archives), then
                 speech_payoff.py --decode --lrate-factors 0.5,1,2: P4 on 2.2M speech frames, the
                 same arms, each at the best of three learning rates
  mlp3.json      partition.py --model mlp3 --ks 2 --noise-fractions 0.02,0 (full Fashion-MNIST)
  mlp4.json      the same for mlp4 (about 2.1M parameters)
The partition pieces run first: their timings want an otherwise idle machine. A piece may also
be written by hand from a recorded run (its "source" says so, and the data column shows it).
--only speech measures that piece alone; the other pieces keep their rows of the stored table.
The table goes into docs/results.md between the two seeds.py markers (made at the end of the
file if missing); its last lines are issue 32's "P4 speech N=<n> <arm>: worst samples ratio <r>",
one per N > 1 and arm.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

from nnet_tools import fileio

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "docs", "results.md")
BEGIN, END = "<!-- seeds.py: begin -->", "<!-- seeds.py: end -->"
NG_ARMS = ("ng", "bmuf", "nesterov")
ARM_NAMES = {"plain": "plain SGD", "ng": "NG", "bmuf": "NG + bmuf", "nesterov": "NG + nesterov"}


def pieces(work):
    """name -> the commands that make WORK/<name>.json (the last one is given --json)."""
    bench = os.path.join(REPO, "benchmarks")
    recipe = os.path.join(work, "recipes", "sd10000")
    speech = [[os.path.join(bench, "recipe_scale.sh"), "--sizes", "10000", "--cmd", "nnet-queue local", "--nj", "2",
               "--recipe-opts", "--stop-stage 6 --min-archives 64", work],
              ["python3", os.path.join(bench, "speech_payoff.py"), "--decode", "--plots", os.path.join(work, "plots"),
               "--lrate-factors", "0.5,1,2", recipe, os.path.join(work, "payoff")]]

    def partition(model):
        return [["python3", os.path.join(bench, "partition.py"), "--model", model, "--ks", "2",
                 "--noise-fractions", "0.02,0", "--work", os.path.join(work, "partition")]]
    # The timed pieces first, while nothing else of this run loads the machine.
    return {"mlp3": partition("mlp3"), "mlp4": partition("mlp4"),
            "fashion": [["python3", os.path.join(bench, "ng_averaging.py")]], "speech": speech}


def measure(work, names):
    """Each named piece's figures, running the benchmarks for those not in work."""
    os.makedirs(work, exist_ok=True)
    figures = {}
    for name, commands in pieces(work).items():
        if name not in names:
            continue
        path = os.path.join(work, f"{name}.json")
        if os.path.exists(path):
            print(f"seeds.py: {name}: reusing {path}", file=sys.stderr, flush=True)
        else:
            *first, last = commands
            for command in first + [last + ["--json", path]]:
                print(f"seeds.py: {name}: {' '.join(command)}", file=sys.stderr, flush=True)
                with open(os.path.join(work, f"{name}.log"), "a") as log:
                    if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode:
                        sys.exit(f"seeds.py: {name}: failed: see {work}/{name}.log")
        with open(path) as f:
            figures[name] = json.load(f)
    return figures


def ratio(r):
    return "never" if r is None else f"{r:.2f}"


def data_cell(piece):
    return piece["data"] + (f" ({piece['source']})" if piece.get("source") else f" ({piece['date']})")


def best_ng_arm(piece, jobs):
    """The NG arm with the lowest worst ratio at N = jobs (never counts as infinite), then the highest final value."""
    arms = [a for a in NG_ARMS if a in piece["arms"]]
    return min(arms, key=lambda a: (piece["arms"][a]["worst"][jobs] is None,
                                    piece["arms"][a]["worst"][jobs] or 0, -piece["arms"][a]["final"][jobs]))


def averaging_cell(piece, jobs):
    arm = best_ng_arm(piece, jobs)
    a = piece["arms"][arm]
    cells = "; ".join(f"{target} {ratio(r[jobs])}" for target, r in a["ratios"].items())
    one = piece["arms"]["ng"]["final"]["1"]
    text = (f"best NG arm {ARM_NAMES[arm]}, samples ratio to 1 job at each target: {cells}; "
            f"final {a['final'][jobs]:.4f} vs 1 job {one:.4f}")
    if "wer" in a:
        text += f"; WER {a['wer'][jobs]:.2f} vs {piece['arms']['ng']['wer']['1']:.2f}"
    if "tuning" in a:
        tried = "/".join(f"{float(f):g}" for f in a["tuning"][jobs]["final"])
        text += (f"; learning rate tuned over x{tried}: x{a['tuning'][jobs]['chosen']:g} "
                 f"(1 job x{piece['arms']['ng']['tuning']['1']['chosen']:g})")
    return text


def ng_makes_averaging_work(piece, jobs):
    drops = [f"{ARM_NAMES[m]} {100 * (piece['arms'][m]['final'][jobs] - piece['arms'][m]['final']['1']):+.2f}"
             for m in ("plain", "ng", "bmuf") if m in piece["arms"]]
    return f"N={jobs}, points of {piece['final_what']} against the arm's 1 job: " + ", ".join(drops)


def ng_vs_plain_cell(piece):
    c = piece["ng_vs_plain"]
    if not c:
        return "not run"
    reach = f"{c['plain_samples'] / c['ng_samples']:.1f}x fewer samples" if c["ng_samples"] else "never"
    return (f"to plain SGD's final {c['target']:.4f}: {reach} with NG; NG ends "
            f"{100 * (c['ng_final'] - c['plain_final']):+.2f} points")


def partition_rows(piece):
    """{row name: row} of partition.py's table, and the speed-up and accuracy cell of each."""
    rows = {r["name"]: r for r in piece["rows"]}
    base = rows["baseline (1 job)"]

    def cell(name):
        r = rows.get(name)
        if r is None:
            return "not run"
        speed = lambda key: "never" if r[key] is None else f"{base[key] / r[key]:.2f}x"
        return (f"{speed('to_target')} to the baseline's {piece['target']:.2f} % "
                f"({speed('to_tolerance')} to -{piece['tolerance']}), final {r['final'] - base['final']:+.2f} points")
    return cell


def table(figures, command_of, kept=""):
    """The table of the pieces in figures; a piece figures lacks keeps its rows (and P4 lines) from kept,
    an earlier table, matched by claim and command."""
    earlier = {(row[0], row[-1]): row for row in (line[2:-2].split(" | ") for line in kept.splitlines()
                                                  if line.startswith("| ") and not line.startswith("| claim |"))}
    rows = []  # (claim, paper, ours, data, command)

    def add(name, claim, paper, ours, data=data_cell):
        """ours and data: functions of the piece's figures."""
        piece = figures.get(name)
        if piece:
            rows.append((claim, paper, ours(piece), data(piece), command_of(name)))
        elif (claim, command_of(name)) in earlier:
            rows.append(earlier[claim, command_of(name)])

    for name in ("speech", "fashion"):
        add(name, "NG vs plain SGD, one job", "Povey et al. 2014: NG-SGD speeds up one job too (no figure "
            "retrieved)", ng_vs_plain_cell)
    for jobs in ("4", "8"):
        for name in ("speech", "fashion"):
            add(name, f"averaging payoff, N = {jobs}", "Povey et al.: near-linear speed-up up to a modest N; BMUF "
                "(Chen & Huo 2016): near-linear to 16-64 GPUs, no WER loss; goal: samples ratio "
                f"<= {1.25 if jobs == '4' else 1.5} at every target", lambda piece: averaging_cell(piece, jobs))
    for name in ("speech", "fashion"):
        if name not in figures or "plain" in figures[name]["arms"]:
            add(name, "NG is what makes averaging work", "Povey et al.: averaging alone 'does not work very well'; "
                "NG-SGD makes it work", lambda piece: "; ".join(ng_makes_averaging_work(piece, j) for j in ("4", "8")))
    for model in ("mlp3", "mlp4"):
        data = lambda piece: f"full Fashion-MNIST, {model} ({piece['parameters']} parameters), {piece['date']}"
        add(model, f"partition pre-training, k = 2, {model}, parallel", "Miranda & Von Zuben 2015: 2.1x and 3.3x "
            "in parallel (pairing with model and k unknown), no accuracy loss",
            lambda piece: partition_rows(piece)("k=2 parallel"), data)
        add(model, f"partition pre-training, k = 2, {model}, sequential", "the same: 1.45x with the sub-models one "
            "after another", lambda piece: partition_rows(piece)("k=2 sequential"), data)
        add(model, f"merge noise, k = 2, {model}", "the paper's choice: uniform noise of +-0.02 x max abs of each "
            "tensor (no figure for its effect)", lambda piece: f"noise 0.02: {partition_rows(piece)('k=2 parallel')}; "
            f"noise 0: {partition_rows(piece)('k=2 par., noise 0')}", data)
    rows.append(("zeroed momenta at the merge", "the paper's choice: optimiser state reset when the merged model's "
                 "training starts (no figure)", "not measured, nothing to zero: partition.py trains as Kaldi does, "
                 "without momentum (--trainer.optimization.momentum 0, the default), and where momentum is set it "
                 "lives inside one training job, so every job, the merged model's first included, starts from "
                 "zero; keeping the sub-models' momenta would need optimiser state in model files", "-", "-"))
    lines = ["| claim | paper | ours | data | command |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    speech = figures.get("speech")
    p4 = [line for line in kept.splitlines() if line.startswith("P4 speech N=")]
    if speech:
        p4 = [f"P4 speech N={jobs} {arm}: worst samples ratio {ratio(r)}"
              for arm in speech["arms"] for jobs, r in speech["arms"][arm]["worst"].items() if jobs != "1"]
    if p4:
        lines += ["", "```", *p4, "```"]
    return "\n".join(lines)


def store(text, path=RESULTS):
    """Replace the table between the markers in path (atomically), or add it at the end."""
    with open(path) as f:
        doc = f.read()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n## Every seed claim (issue 32)\n\n" + block + "\n"
    fileio.write_text(path, doc)


def stored(path=RESULTS):
    """The table the last run stored in path; None if there is none."""
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        return None
    return doc[doc.index(BEGIN) + len(BEGIN):doc.index(END)].strip("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/tmp/seeds", help="the pieces' JSON files, logs and experiment dirs")
    p.add_argument("--from-results", action="store_true", help="print the table stored in docs/results.md")
    p.add_argument("--only", metavar="PIECES", help="measure only these (e.g. speech); the others keep their rows "
                   "in the stored table")
    p.add_argument("--results", default=RESULTS, help=argparse.SUPPRESS)
    args = p.parse_args()
    names = list(pieces("WORK"))
    if args.only:
        unknown = set(args.only.split(",")) - set(names)
        if unknown:
            p.error(f"--only: no piece {', '.join(sorted(unknown))} (the pieces: {', '.join(names)})")
        names = args.only.split(",")
    if args.from_results:
        text = stored(args.results)
        if text is None:
            sys.exit(f"seeds.py: {args.results}: no stored table (no '{BEGIN}' ... '{END}'); run without --from-results")
        print(text)
        return
    work = os.path.abspath(args.work)
    figures = measure(work, names)

    def command_of(name):
        return "; ".join(shlex.join(c).replace(REPO + "/", "").replace(work, "WORK") for c in pieces(work)[name])
    text = table(figures, command_of, (stored(args.results) or "") if args.only else "")
    print(text)
    store(text, args.results)
    print(f"\nseeds.py: stored in {args.results}", file=sys.stderr)


if __name__ == "__main__":
    main()
