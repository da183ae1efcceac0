#!/usr/bin/env python3
"""P5: nnet-average-models' peak memory and time for N = 1 and N = 16 models (goal: at most two
models' bytes above the runtime's, whatever N), and nnet-combine's on the same models (issue 10's
item 3 asks the same of it), scoring on --combine-egs egs.

Each call runs the program in a child process and reads that child's own peak RSS (ru_maxrss from
wait4), through a small launcher: a child forked from this process would start with this
process's high-water mark (it has made the models), which Linux keeps across exec. "runtime" is
the peak RSS of a child that imports the program and loads nothing; the figure to judge is
(peak - runtime) / model bytes, the number of models held at the peak.

    python3 benchmarks/average_memory.py [--hidden 2048] [--layers 5] [--classes 3000] [--n 1,16]
        [--combine-egs 1000]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch

from common import mlp_config, speech_like_archive
from nnet_tools.model import model_io
from nnet_tools.model.nnet import Nnet

PROGRAM = "from nnet_tools.cli.average_models import main; main()"
COMBINE = "from nnet_tools.cli.combine import main; main()"


# Run by a bare interpreter (-S: no site, a few MB): fork, exec the command, print its peak RSS.
LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def child(argv):
    """(peak RSS in bytes, wall seconds) of one child process."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, sys.executable, *argv],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    code, kb = proc.stdout.split()
    if proc.returncode or int(code):
        raise SystemExit(f"{argv} failed: {proc.stderr[-2000:]}")
    return int(kb) * 1024, seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--classes", type=int, default=3000)
    p.add_argument("--n", default="1,16", help="numbers of models to average")
    p.add_argument("--combine-egs", type=int, default=1000, help="egs nnet-combine scores on (0: skip it)")
    args = p.parse_args()
    counts = [int(n) for n in args.n.split(",")]
    torch.manual_seed(0)
    model = Nnet(mlp_config(args.hidden, args.layers, classes=args.classes))
    params = sum(t.numel() for t in model.state_dict().values())
    model_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
        paths = []
        for i in range(max(counts)):
            with torch.no_grad():
                for t in model.parameters():
                    t.add_(0.01)
            paths.append(f"{d}/{i}.mdl")
            model_io.save(model, paths[-1])
        del model
        runtime, _ = child(["-c", "import nnet_tools.cli.average_models, nnet_tools.cli.combine, torch"])
        print(f"model: 440-{args.hidden}x{args.layers}-{args.classes}, {params / 1e6:.1f}M parameters, "
              f"{model_bytes / 1e6:.0f} MB; runtime (program imported, nothing loaded): {runtime / 1e6:.0f} MB")
        for n in counts:
            peak, seconds = child(["-c", PROGRAM, *paths[:n], f"{d}/out.mdl"])
            held = (peak - runtime) / model_bytes
            print(f"P5 nnet-average-models N={n:3d}: peak RSS {peak / 1e6:6.0f} MB = runtime + {held:.2f} models, "
                  f"{seconds:6.1f} s{'   (goal <= 2 models)' if n == max(counts) else ''}")
        if args.combine_egs:
            speech_like_archive(f"{d}/combine.egs", args.combine_egs, classes=args.classes)
            for n in counts:
                peak, seconds = child(["-c", COMBINE, "--use-gpu", "no", *reversed(paths[:n]), f"{d}/combine.egs",
                                       f"{d}/out.mdl"])
                print(f"   nnet-combine N={n:3d}: peak RSS {peak / 1e6:6.0f} MB = runtime + "
                      f"{(peak - runtime) / model_bytes:.2f} models, {seconds:6.1f} s ({args.combine_egs} egs scored)")


if __name__ == "__main__":
    main()
