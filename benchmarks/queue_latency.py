"""nnet-queue's cost per backend: submit-to-finish latency of a trivial array, and the digits
recipe's wall time, each engine against the local backend, measured side by side.

Latency: ``nnet-queue BACKEND JOB=1:4 log/t.JOB.log true`` timed from the call to its exit;
backends take turns round by round (so drifts in machine load hit all of them), and the median
and fastest round are printed with the ratio to local. --recipe also runs recipes/digits/run.sh
once per backend in a fresh copy (train_cmd="nnet-queue BACKEND --mem 2G") and prints its wall
time, the ratio to local, and the test accuracy. Engines that are not reachable are skipped
(start them with tests/cluster/start-slurm.sh / start-sge.sh).

"slurm-kaldi" is Slurm with Kaldi's submit line (sbatch --export=PATH, which makes Slurm start
a login shell on the node for every task) instead of ours (--export=ALL).

Usage: python benchmarks/queue_latency.py [--rounds 5] [--tasks 4] [--recipe] [--backends local,slurm,sge,slurm-kaldi]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from nnet_tools.queue import BACKENDS

RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recipes", "digits")


# Variants: a backend run with a queue config of its own.
VARIANTS = {"slurm-kaldi": ("slurm", "[slurm]\ncommand sbatch --export=PATH --ntasks-per-node=1\n"
                                     "option mem=* --mem-per-cpu $0\ndefault gpu=0\noption gpu=0 -p shared\n")}


def launcher(backend, work):
    """The nnet-queue words for ``backend`` (a variant writes its config into ``work``)."""
    if backend not in VARIANTS:
        return ["nnet-queue", backend]
    engine, text = VARIANTS[backend]
    conf = os.path.join(work, f"{backend}.conf")
    with open(conf, "w") as f:
        f.write(text)
    return ["nnet-queue", engine, "--config", conf]


def latency(backend, tasks, work):
    started = time.perf_counter()
    r = subprocess.run(launcher(backend, work) + [f"JOB=1:{tasks}", "log/t.JOB.log", "true"], cwd=work,
                       capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"nnet-queue {backend} failed: {r.stderr}")
    return elapsed


def recipe(backend, work):
    copy = os.path.join(work, f"digits-{backend}")
    shutil.copytree(RECIPE, copy, ignore=shutil.ignore_patterns("exp", "data"))   # steps/ followed
    env = dict(os.environ, train_cmd=" ".join(launcher(backend, work) + ["--mem", "2G"]))
    started = time.perf_counter()
    r = subprocess.run(["bash", "run.sh"], cwd=copy, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    m = re.search(r"Test accuracy: ([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        raise SystemExit(f"digits with {backend} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return elapsed, float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--recipe", action="store_true", help="also time recipes/digits/run.sh per backend")
    p.add_argument("--backends", default="local,slurm,sge")
    args = p.parse_args()
    backends = []
    for b in args.backends.split(","):
        why = b != "local" and BACKENDS[VARIANTS.get(b, (b,))[0]].unreachable()
        if why:
            print(f"# {b} skipped: {why}")
        else:
            backends.append(b)
    print(f"# load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as work:
        times = {b: [] for b in backends}
        for _ in range(args.rounds):
            for b in backends:
                times[b].append(latency(b, args.tasks, work))
        base = statistics.median(times[backends[0]])
        print(f"{args.tasks}-task array, submit to finish, {args.rounds} rounds:")
        for b in backends:
            median = statistics.median(times[b])
            print(f"  {b:11s} median {median:6.2f} s  fastest {min(times[b]):6.2f} s  "
                  f"ratio to {backends[0]} {median / base:6.1f}")
        if args.recipe:
            print("recipes/digits/run.sh, wall time:")
            results = {b: recipe(b, work) for b in backends}
            base = results[backends[0]][0]
            for b, (elapsed, accuracy) in results.items():
                print(f"  {b:11s} {elapsed:7.1f} s  ratio to {backends[0]} {elapsed / base:5.2f}  "
                      f"test accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
