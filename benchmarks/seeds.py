#!/usr/bin/env python3
"""Every seed claim in one table (issue 32): the papers' figure, ours, the data and the command.

    python3 benchmarks/seeds.py [--work /work/seeds]   # runs what --work lacks (hours), prints the
                                                       # table and stores it in docs/results.md
    python3 benchmarks/seeds.py --from-results         # prints the table the last run stored

Each piece is one benchmark's --json output in --work, made by the benchmark that measures it;
one that is there is reused (remove it to measure again), so a run can be stopped and rerun:
  fashion.json   ng_averaging.py: P4 on full Fashion-MNIST, plain SGD and NG arms, N = 1, 2, 4, 8
  speech.json    recipe_scale.sh (spoken_digits, 10000 utterances, 64 archives), then
                 speech_payoff.py --decode: P4 on 2.2M speech frames, the same arms
  mlp3.json      partition.py --model mlp3 --ks 2 --noise-fractions 0.02,0 (full Fashion-MNIST)
  mlp4.json      the same for mlp4 (about 2.1M parameters)
The partition pieces run first: their timings want an otherwise idle machine. A piece may also
be written by hand from a recorded run (its "source" says so, and the data column shows it).
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
               recipe, os.path.join(work, "payoff")]]

    def partition(model):
        return [["python3", os.path.join(bench, "partition.py"), "--model", model, "--ks", "2",
                 "--noise-fractions", "0.02,0", "--work", os.path.join(work, "partition")]]
    # The timed pieces first, while nothing else of this run loads the machine.
    return {"mlp3": partition("mlp3"), "mlp4": partition("mlp4"),
            "fashion": [["python3", os.path.join(bench, "ng_averaging.py")]], "speech": speech}


def measure(work):
    """Each piece's figures, running the benchmarks for those not in work."""
    os.makedirs(work, exist_ok=True)
    figures = {}
    for name, commands in pieces(work).items():
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


def table(figures, command_of):
    fashion, speech = figures.get("fashion"), figures.get("speech")
    rows = []  # (claim, paper, ours, data, command)
    for name, piece in (("speech", speech), ("fashion", fashion)):
        if piece:
            rows.append(("NG vs plain SGD, one job", "Povey et al. 2014: NG-SGD speeds up one job too (no figure "
                         "retrieved)", ng_vs_plain_cell(piece), data_cell(piece), command_of(name)))
    for jobs in ("4", "8"):
        for name, piece in (("speech", speech), ("fashion", fashion)):
            if piece:
                rows.append((f"averaging payoff, N = {jobs}", "Povey et al.: near-linear speed-up up to a modest N; "
                             "BMUF (Chen & Huo 2016): near-linear to 16-64 GPUs, no WER loss; goal: samples ratio "
                             f"<= {1.25 if jobs == '4' else 1.5} at every target", averaging_cell(piece, jobs),
                             data_cell(piece), command_of(name)))
    for name, piece in (("speech", speech), ("fashion", fashion)):
        if piece and "plain" in piece["arms"]:
            rows.append(("NG is what makes averaging work", "Povey et al.: averaging alone 'does not work very "
                         "well'; NG-SGD makes it work", "; ".join(ng_makes_averaging_work(piece, j) for j in ("4", "8")),
                         data_cell(piece), command_of(name)))
    for model in ("mlp3", "mlp4"):
        piece = figures.get(model)
        if not piece:
            continue
        cell = partition_rows(piece)
        data = f"full Fashion-MNIST, {model} ({piece['parameters']} parameters), {piece['date']}"
        rows.append((f"partition pre-training, k = 2, {model}, parallel", "Miranda & Von Zuben 2015: 2.1x and 3.3x "
                     "in parallel (pairing with model and k unknown), no accuracy loss", cell("k=2 parallel"), data,
                     command_of(model)))
        rows.append((f"partition pre-training, k = 2, {model}, sequential", "the same: 1.45x with the sub-models "
                     "one after another", cell("k=2 sequential"), data, command_of(model)))
        rows.append((f"merge noise, k = 2, {model}", "the paper's choice: uniform noise of +-0.02 x max abs of "
                     "each tensor (no figure for its effect)", f"noise 0.02: {cell('k=2 parallel')}; noise 0: "
                     f"{cell('k=2 par., noise 0')}", data, command_of(model)))
    rows.append(("zeroed momenta at the merge", "the paper's choice: optimiser state reset when the merged model's "
                 "training starts (no figure)", "not measured: momentum lives inside one training job here (Kaldi's "
                 "design), so every job, the merged model's first included, starts from zero momentum; keeping "
                 "the sub-models' momenta would need optimiser state in model files", "-", "-"))
    lines = ["| claim | paper | ours | data | command |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    if speech:
        lines += ["", "```"]
        for arm in speech["arms"]:
            for jobs, r in speech["arms"][arm]["worst"].items():
                if jobs != "1":
                    lines.append(f"P4 speech N={jobs} {arm}: worst samples ratio {ratio(r)}")
        lines.append("```")
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
    p.add_argument("--results", default=RESULTS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.from_results:
        text = stored(args.results)
        if text is None:
            sys.exit(f"seeds.py: {args.results}: no stored table (no '{BEGIN}' ... '{END}'); run without --from-results")
        print(text)
        return
    work = os.path.abspath(args.work)
    figures = measure(work)

    def command_of(name):
        return "; ".join(shlex.join(c).replace(REPO + "/", "").replace(work, "WORK") for c in pieces(work)[name])
    text = table(figures, command_of)
    print(text)
    store(text, args.results)
    print(f"\nseeds.py: stored in {args.results}", file=sys.stderr)


if __name__ == "__main__":
    main()
