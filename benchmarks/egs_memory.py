#!/usr/bin/env python3
"""P8: nnet-get-egs at two data sizes (40-dim features, frames-per-eg 8, context +-5): peak
process-private memory must stay flat (goal: within 20 %) as the data grows (10x by default,
20x at the issue's sizes); plus the
compression ratio and dump-time cost of --compress true, and the wall-time speed-up of
steps/get_egs.sh --nj 2 over --nj 1 (both launched from this process, one after the other).

Memory is sampled from /proc/<pid>/status every 5 ms: RssAnon is the process's own memory (heap,
numpy arrays): what must not grow with the data. RssFile is file pages mapped into it (shared
libraries, the memory-mapped spools and archives): page cache, which the kernel reclaims under
pressure, so it is reported but not judged. VmHWM (the kernel's exact peak of RssAnon + RssFile +
RssShmem) is printed too; a sampled peak can miss a spike shorter than the period.

    python3 benchmarks/egs_memory.py [--frames 100000,1000000] [--nj-archives 4]
    (the issue's sizes: --frames 100000,2000000; needs nnet-merge-egs on PATH for --nj)
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from nnet_tools.data.tables import IntVectorWriter, MatrixWriter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GET_EGS = "from nnet_tools.cli.get_egs import main; main()"
FIELDS = ("VmHWM", "RssAnon", "RssFile")
OPTS = ["--frames-per-eg", "8", "--left-context", "5", "--right-context", "5"]


def write_data(d, frames, dim=40, classes=500, seed=0):
    """A Kaldi data dir of about ``frames`` frames: utterances of 50..150 frames, feats.scp and
    targets.scp (per-frame class ids; features near their class's mean)."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(classes, dim)).astype(np.float32) * 3
    os.makedirs(d, exist_ok=True)
    total, i = 0, 0
    with MatrixWriter(f"ark,scp:{d}/feats.ark,{d}/feats.scp") as fw, \
            IntVectorWriter(f"ark,scp:{d}/targets.ark,{d}/targets.scp") as tw:
        while total < frames:
            n = int(rng.integers(50, 151))
            ids = rng.integers(0, classes, n).astype(np.int32)
            fw.write(f"utt{i:07d}", means[ids] + rng.normal(size=(n, dim)).astype(np.float32))
            tw.write(f"utt{i:07d}", ids)
            total, i = total + n, i + 1
    return total


def sampled(argv):
    """Run argv; (wall seconds, {field: peak bytes}) with RssAnon/RssFile sampled, VmHWM exact."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = dict.fromkeys(FIELDS, 0)
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    name, _, value = line.partition(":")
                    if name in peak:
                        peak[name] = max(peak[name], int(value.split()[0]) * 1024)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
        time.sleep(0.005)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode()
    if proc.returncode:
        raise SystemExit(f"{argv[:3]} failed:\n{err[-3000:]}")
    return seconds, peak


def dir_bytes(d, suffixes=(".ark",)):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(suffixes))


def subset_option(data):
    """--num-utts-subset 100, or fewer on small data (get_egs needs more than 4x as many utterances)."""
    with open(f"{data}/feats.scp") as f:
        utts = sum(1 for _ in f)
    return ["--num-utts-subset", str(max(1, min(100, utts // 5)))]


def get_egs_sh(data, egs_dir, *options):
    start = time.perf_counter()
    r = subprocess.run([os.path.join(REPO, "steps", "get_egs.sh"), "--cmd", "nnet-queue local", *options,
                        *subset_option(data), *OPTS, data, egs_dir], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"get_egs.sh {options} failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--frames", default="100000,1000000", help="small,large data sizes in frames")
    p.add_argument("--nj-archives", type=int, default=4, help="archives in the --nj comparison")
    p.add_argument("--skip-nj", action="store_true")
    args = p.parse_args()
    sizes = [int(x) for x in args.frames.split(",")]
    if len(sizes) != 2 or not 0 < sizes[0] < sizes[1] or args.nj_archives < 1:
        raise SystemExit("egs_memory.py: --frames takes two sizes, small,large (> 0), and --nj-archives >= 1")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        rows, anon = [], []
        for size in sizes:
            data = f"{tmp}/data{size}"
            frames = write_data(data, size)
            for compress in ("false", "true"):
                if compress == "true" and size != sizes[-1]:
                    continue
                out = f"{tmp}/egs"
                seconds, peak = sampled([sys.executable, "-c", GET_EGS, *OPTS, *subset_option(data), "--compress", compress,
                                         f"scp:{data}/feats.scp", f"scp:{data}/targets.scp", out])
                rows.append((frames, compress, seconds, peak, dir_bytes(out)))
                if compress == "false":
                    anon.append(peak["RssAnon"])
                shutil.rmtree(out)
            feat_bytes = os.path.getsize(f"{data}/feats.ark")
        print("nnet-get-egs, 40-dim features, frames-per-eg 8, context +-5 (egs dir sizes are archive bytes):")
        for frames, compress, seconds, peak, nbytes in rows:
            print(f"  {frames:8d} frames, --compress {compress:5s}: {seconds:6.1f} s, peak RssAnon "
                  f"{peak['RssAnon'] / 1e6:6.0f} MB, RssFile {peak['RssFile'] / 1e6:6.0f} MB, VmHWM "
                  f"{peak['VmHWM'] / 1e6:6.0f} MB, archives {nbytes / 1e6:7.0f} MB")
        print(f"P8 peak non-file-backed memory (RssAnon), {sizes[-1] // sizes[0]}x the data: "
              f"{anon[-1] / anon[0]:.3f} x   (goal <= 1.20)")
        (_, _, t32, _, b32), (_, _, t16, _, b16) = rows[-2], rows[-1]
        print(f"P8 compression, {frames} frames: archives {b32 / b16:.2f}x smaller ({b32 / feat_bytes:.2f}x -> "
              f"{b16 / feat_bytes:.2f}x the feature bytes); dump time compressed / float32 = {t16 / t32:.2f}")
        if not args.skip_nj:
            if not shutil.which("nnet-merge-egs"):
                raise SystemExit("nnet-merge-egs is not on PATH (install the package or add a shim)")
            spi = str(max(1, sizes[-1] // (8 * args.nj_archives)))
            t1 = get_egs_sh(data, f"{tmp}/nj1", "--samples-per-iter", spi, "--nj", "1")
            t2 = get_egs_sh(data, f"{tmp}/nj2", "--samples-per-iter", spi, "--nj", "2")
            print(f"P8 parallel dumping, {sizes[-1]} frames, {args.nj_archives} archives, nnet-queue local "
                  f"on {os.cpu_count()} CPUs: nj=1 {t1:.1f} s, nj=2 {t2:.1f} s, speed-up {t1 / t2:.2f}x")


if __name__ == "__main__":
    main()
