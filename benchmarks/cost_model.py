#!/usr/bin/env python3
"""Issue 10 item 5: the cluster cost model of an iteration (docs/cost-model.md), its constants
measured here, checked against real iterations here, and its predictions.

(a) Measures, on this machine: a job's compute rate (nnet-train-one-job's loop in process, one
    thread, natural gradient, a 20.9M-parameter 440-2000x5-2000 model); a program's start; model
    save and load through model_io (page cache), and the disk behind it (fsync'd write, read
    after dropping the file from the page cache); nnet-average-models' main in process (its
    start is the program start's) over N = 2, 4, 8 models (fitted as a + b N); the launch cost of an N-task array of `true` through `nnet-queue local`
    and `nnet-queue slurm`, N = 1, 2, 4, 8 (fitted as a + b x rounds of tasks the cores take;
    engines that are not reachable are skipped). Each is timed once per round, the rounds
    interleaved, and the fastest of --rounds kept (this machine is shared).
(b) Validates: runs whole iterations of the driver's own code (OuterLoop: background
    diagnostics, N jobs as one array, averaging) with N = 1 and 2 jobs through local, and 2
    through Slurm, and prints each one's wall time against the model's prediction for this
    machine (2 cores, page cache, so no disk term) and the error.
(c) Predicts, for a cluster with the stated bandwidths (--node-bw, --nfs-bw) and the Slurm launch
    constants measured here: iteration time, its terms, and the speed-up in samples/s over one
    job (every job trains --egs-per-job egs, Kaldi's fixed samples-per-iter) at 8, 64 and 256
    jobs for a 20M- and a 200M-parameter model, with flat and with tree averaging (--fanin); and
    where flat averaging stops scaling. Job rates: this core's as measured, and each of
    --assumed-flops (default 10 TFLOP/s, a GPU job: an assumption, not a measurement; at 6 FLOP
    per parameter per eg).

    python3 benchmarks/cost_model.py [--rounds 2] [--rate-egs 1024] [--egs 2000] [--validation-rounds 1]
        [--backends local,slurm] [--launch-per-task 0]
        [--node-bw 1.25e9] [--nfs-bw 10e9] [--egs-per-job 400000] [--fanin 16] [--assumed-flops 10e12]
        [--skip-validation]
"""
import argparse
import dataclasses
import contextlib
import functools
import io
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import queue_latency
from common import mlp_config, speech_like_archive
from nnet_tools.cli import average_models
from nnet_tools.data import egs
from nnet_tools.log import logger
from nnet_tools.model import model_io
from nnet_tools.model.nnet import Nnet
from nnet_tools.queue import BACKENDS
import iteration_cost as cost
from nnet_tools.train import job as train
from nnet_tools.driver import options, outer_loop

HIDDEN, LAYERS = 2000, 5          # 440-2000x5-2000: 20.9M parameters
SIZES = (20e6, 200e6)
JOBS = (8, 64, 256)
AVERAGED = (2, 4, 8)     # models per nnet-average-models run
LAUNCHED = (1, 2, 4, 8)  # tasks per launch
FLOP_PER_PARAM_EG = 6    # forward 2, backward 4 (natural gradient adds ~7%)


def fit_line(xs, ys):
    """Least-squares a + b x."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def run(argv, cwd=None):
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")


def fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_from_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def average_in_process(inputs, out):
    """nnet-average-models' own main, in this process: its cost without the program start (which
    is timed apart, and would drown the per-model cost in this machine's noise)."""
    handlers, level = logger.handlers[:], logger.level
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            average_models.main.main([*inputs, out], prog_name="nnet-average-models", standalone_mode=False)
    finally:
        logger.handlers[:], logger.level = handlers, level


class Disk:
    """The local disk behind model files: save + fsync, raw write (fsync'd), raw read with the
    file dropped from the page cache first (posix_fadvise), each timed once per call."""

    def __init__(self, d, model):
        self.d, self.model = d, model

    def save_synced(self):
        model_io.save(self.model, f"{self.d}/disk.mdl")
        fsync(f"{self.d}/disk.mdl")

    def write(self):
        self.blob = open(f"{self.d}/disk.mdl", "rb").read()
        with open(f"{self.d}/disk.raw", "wb") as f:
            f.write(self.blob)
            f.flush()
            os.fsync(f.fileno())

    def read(self):
        drop_from_cache(f"{self.d}/disk.raw")
        with open(f"{self.d}/disk.raw", "rb") as f:
            while f.read(1 << 24):
                pass


def measure(args, d):
    """Every constant timed once per round, rounds interleaved (so a burst of load on this shared
    machine hits all of them alike); the fastest of --rounds (the least disturbed)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Nnet(mlp_config(HIDDEN, LAYERS, natural_gradient=True))
    params = sum(p.numel() for p in model.parameters())
    archive = egs.EgsArchive(speech_like_archive(f"{d}/rate.ark", args.rate_egs))
    egs_bytes = os.path.getsize(f"{d}/rate.ark") / args.rate_egs
    path = f"{d}/m.mdl"
    model_io.save(model, path)
    for i in range(8):
        shutil.copyfile(path, f"{d}/avg.{i}.mdl")
    disk = Disk(d, model)
    tasks = {"train": lambda: train.train_one_job(model, archive, train.TrainOptions(learning_rate=1e-4)),
             "start": lambda: run(["nnet-average-models", "--help"]),
             "save": lambda: model_io.save(model, path), "load": lambda: model_io.load(path),
             "synced": disk.save_synced, "disk_write": disk.write, "disk_read": disk.read}
    for n in AVERAGED:
        tasks[f"average{n}"] = functools.partial(average_in_process, [f"{d}/avg.{i}.mdl" for i in range(n)],
                                                 f"{d}/avg.out.mdl")
    backends = []
    for b in args.backends.split(","):
        why = b != "local" and BACKENDS[b].unreachable()
        if why:
            print(f"# {b} skipped: {why}")
            continue
        backends.append(b)
        for n in LAUNCHED:
            tasks[f"{b}{n}"] = functools.partial(queue_latency.latency, b, n, d)   # an n-task array of `true`
    times = {name: [] for name in tasks}
    for _ in range(args.rounds):
        for name, fn in tasks.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    t = {name: min(v) for name, v in times.items()}
    file_bytes = len(disk.blob)
    averaging = {n: t[f"average{n}"] for n in AVERAGED}
    waves = [math.ceil(n / os.cpu_count()) for n in LAUNCHED]   # rounds of tasks this machine's cores take
    launches = {b: ([t[f"{b}{n}"] for n in LAUNCHED], fit_line(waves, [t[f"{b}{n}"] for n in LAUNCHED]))
                for b in backends}
    rate = args.rate_egs * params / t["train"]
    return dict(params=params, rate=rate, egs_s=rate / params, start=t["start"], save=t["save"], load=t["load"],
                synced=t["synced"], disk_write=file_bytes / t["disk_write"], disk_read=file_bytes / t["disk_read"],
                file_bytes=file_bytes, averaging=averaging, avg_fit=fit_line(list(averaging), list(averaging.values())),
                launches=launches, egs_bytes=egs_bytes)


def constants(m, backend, per_task=0.0):
    a, b = m["launches"][backend][1]
    return cost.Constants(job_rate=m["rate"], program_start=m["start"], load_per_param=m["load"] / m["params"],
                          save_per_param=m["save"] / m["params"], average_per_param=m["avg_fit"][1] / m["params"],
                          launch_fixed=a, launch_wave=b, launch_per_task=per_task, egs_bytes=m["egs_bytes"])


def print_constants(m):
    p = m["params"]
    print(f"(a) constants measured here ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"model 440-{HIDDEN}x{LAYERS}-2000, {p / 1e6:.1f}M parameters, {m['file_bytes'] / 1e6:.1f} MB file)")
    print(f"  job compute rate, 1 thread, NG  : {m['egs_s']:8.0f} egs/s = {m['rate'] / 1e9:6.2f} G param-egs/s "
          f"(~{FLOP_PER_PARAM_EG * m['rate'] / 1e9:.0f} GFLOP/s at {FLOP_PER_PARAM_EG} FLOP per param-eg)")
    print(f"  program start (nnet-* --help)   : {m['start']:8.3f} s")
    print(f"  model save, page cache          : {m['save']:8.3f} s  ({m['save'] / p * 1e9:.2f} ns/param)")
    print(f"  model save + fsync              : {m['synced']:8.3f} s")
    print(f"  model load, page cache          : {m['load']:8.3f} s  ({m['load'] / p * 1e9:.2f} ns/param)")
    print(f"  local disk: write (fsync'd) {m['disk_write'] / 1e9:.2f} GB/s, read (dropped from page cache) "
          f"{m['disk_read'] / 1e9:.2f} GB/s")
    print("  nnet-average-models' main, page cache, no program start: " + ", ".join(f"N={n}: {t:.2f} s" for n, t in m["averaging"].items())
          + f"  -> {m['avg_fit'][0]:.2f} s + {m['avg_fit'][1]:.3f} s x N "
          f"({m['avg_fit'][1] / p * 1e9:.2f} ns/param/model)")
    for b, (medians, (a, s)) in m["launches"].items():
        print(f"  launch, nnet-queue {b:5s} (true) : " + ", ".join(f"N={n}: {t:.2f} s" for n, t in zip(LAUNCHED, medians))
              + f"  -> {a:.2f} s + {s:.3f} s x rounds of {os.cpu_count()} tasks")
    print(f"  egs bytes per eg (float32, 11x40): {m['egs_bytes']:.0f}")


def validation_dir(d, jobs, egs_per_job, diag_egs):
    """An egs dir of ``jobs`` archives plus diagnostics, and 0.mdl/1.mdl of the measured model."""
    os.makedirs(f"{d}/info", exist_ok=True)
    for j in range(1, jobs + 1):
        speech_like_archive(f"{d}/egs.{j}.ark", egs_per_job, seed=10 + j)
    for name, seed in (("valid_diagnostic", 1), ("train_diagnostic", 2)):
        speech_like_archive(f"{d}/{name}.egs", diag_egs // 2, seed=seed)
    for key, value in dict(num_archives=jobs, frames_per_eg=1).items():
        open(f"{d}/info/{key}", "w").write(f"{value}\n")
    torch.manual_seed(0)
    model = Nnet(mlp_config(HIDDEN, LAYERS, natural_gradient=True))
    model_io.save(model, f"{d}/0.mdl")
    model_io.save(model, f"{d}/1.mdl")


def real_iteration(d, backend, jobs):
    """Wall time of iteration 1 as the driver runs it: diagnostics in the background, the jobs as
    one array through nnet-queue, selection, nnet-average-models."""
    # The model's averaging is a $cmd job (a program start, then N model reads): run it so.
    opts = options.TrainerOptions(cmd=f"nnet-queue {backend}", jobs_initial=jobs, jobs_final=jobs, num_epochs=2,
                                  average_in_driver=False)
    loop = outer_loop.OuterLoop(opts, d, d)
    with open(f"{d}/driver.log", "w") as log, redirect_fd(2, log):   # nnet-queue echoes its command line
        t = time.perf_counter()
        loop.diagnostics(loop.mdl(1), 1, loop.mdl(0))
        loop.iteration(1, jobs, 0.0003, jobs)
        loop.launcher.wait()
        return time.perf_counter() - t


@contextlib.contextmanager
def redirect_fd(fd, file):
    saved = os.dup(fd)
    os.dup2(file.fileno(), fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def validate(args, m, d):
    here = cost.Cluster(node_bw=math.inf, nfs_bw=math.inf, slots=os.cpu_count())
    diag_egs = 2000
    cases = [(b, n) for b, n in (("local", 1), ("local", 2), ("slurm", 2)) if b in m["launches"]]
    print(f"(b) validation: real iterations here (driver code, {args.egs} egs per job, {diag_egs} diagnostic egs) "
          f"against the model with this machine's constants ({os.cpu_count()} cores, page cache: no disk term)")
    errors = []
    for backend, jobs in cases:
        sub = f"{d}/val-{backend}-{jobs}"
        validation_dir(sub, jobs, args.egs, diag_egs)
        c = dataclasses.replace(constants(m, backend), diag_egs=diag_egs)
        predicted = cost.iteration(c, here, jobs, m["params"], args.egs)
        measured = min(real_iteration(sub, backend, jobs) for _ in range(args.validation_rounds))
        error = (predicted.total - measured) / measured
        errors.append(abs(error))
        print(f"  {backend:5s} N={jobs}: measured {measured:6.1f} s, predicted {predicted.total:6.1f} s "
              f"(launch {predicted.launch:.1f}, compute {predicted.job_compute:.1f}, job start/load/save "
              f"{predicted.job_cpu:.1f}, waiting for cores {predicted.queueing:.1f}, averaging "
              f"{predicted.averaging:.1f}), error {error:+.1%}, load average {os.getloadavg()[0]:.1f}")
        shutil.rmtree(sub)
    if errors:
        print(f"  fit error: mean |error| {statistics.mean(errors):.1%}, worst {max(errors):.1%}")


def predict(args, m):
    backend = "slurm" if "slurm" in m["launches"] else "local"
    cl = cost.Cluster(node_bw=args.node_bw, nfs_bw=args.nfs_bw)
    base = constants(m, backend, args.launch_per_task)
    print(f"(c) predictions: node link {args.node_bw / 1e9:g} GB/s, shared disk {args.nfs_bw / 1e9:g} GB/s aggregate, "
          f"{args.egs_per_job} egs per job per iteration, launch as nnet-queue {backend} here "
          f"({base.launch_fixed + base.launch_wave:.2f} s, tasks in parallel, + {base.launch_per_task:g} s x N), "
          f"tree fan-in {args.fanin}")
    for flops in [None] + args.assumed_flops:
        c = base if flops is None else dataclasses.replace(base, job_rate=flops / FLOP_PER_PARAM_EG)
        what = "this core, measured" if flops is None else f"{flops / 1e12:g} TFLOP/s (assumed, e.g. one GPU)"
        print(f"  job rate {what}: {c.job_rate / 20e6:.0f} egs/s at 20M parameters")
        print(f"    {'params':>6s} {'N':>4s} {'T(N) s':>8s} {'launch':>7s} {'compute':>8s} {'job io':>7s} "
              f"{'job cpu':>7s} {'average':>8s} {'avg %':>6s} {'speed-up':>9s} | {'tree avg':>8s} {'speed-up':>9s}")
        for params in SIZES:
            for n in JOBS:
                it = cost.iteration(c, cl, n, params, args.egs_per_job)
                tree = cost.iteration(c, cl, n, params, args.egs_per_job, args.fanin)
                print(f"    {params / 1e6:5.0f}M {n:4d} {it.total:8.1f} {it.launch:7.1f} {it.job_compute:8.1f} "
                      f"{it.job_io:7.1f} {it.job_cpu:7.1f} {it.averaging:8.1f} {it.averaging / it.total:6.1%} "
                      f"{cost.speedup(c, cl, n, params, args.egs_per_job):9.1f} | {tree.averaging:8.1f} "
                      f"{cost.speedup(c, cl, n, params, args.egs_per_job, args.fanin):9.1f}")
            limit = cost.averaging_limit(c, cl, params, args.egs_per_job)
            flat = cost.flattening_point(c, cl, params, args.egs_per_job)
            tree_flat = cost.flattening_point(c, cl, params, args.egs_per_job, fanin=args.fanin)
            tree_limit = cost.averaging_limit(c, cl, params, args.egs_per_job, fanin=args.fanin)
            print(f"    {params / 1e6:.0f}M: flat averaging passes 10% of the iteration at N = {limit}; doubling N "
                  f"gains < 1.5x from N = {flat}. Tree (fan-in {args.fanin}): 10% at N = {tree_limit}, "
                  f"< 1.5x from N = {tree_flat}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate-egs", type=int, default=1024, help="egs per round of the rate measurement")
    p.add_argument("--egs", type=int, default=2000, help="egs per job in the validation iterations")
    p.add_argument("--validation-rounds", type=int, default=1, help="runs of each validation iteration (fastest kept)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the constants' measurements (fastest kept)")
    p.add_argument("--backends", default="local,slurm")
    p.add_argument("--node-bw", type=float, default=1.25e9, help="a node's link to shared disk, bytes/s")
    p.add_argument("--nfs-bw", type=float, default=10e9, help="the shared disk's aggregate bandwidth, bytes/s")
    p.add_argument("--egs-per-job", type=int, default=400000, help="Kaldi's samples-per-iter")
    p.add_argument("--fanin", type=int, default=16, help="models per averaging job in the tree")
    p.add_argument("--assumed-flops", type=lambda s: [float(x) for x in s.split(",")], default=[10e12],
                   help="job rates to predict for besides this core's, FLOP/s (comma-separated)")
    p.add_argument("--launch-per-task", type=float, default=0.0,
                   help="the controller's dispatch cost per task, s (one node cannot measure it)")
    p.add_argument("--skip-validation", action="store_true")
    args = p.parse_args()
    logger.setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
        m = measure(args, d)
        print_constants(m)
        if not args.skip_validation:
            validate(args, m, d)
    predict(args, m)


if __name__ == "__main__":
    sys.exit(main())
