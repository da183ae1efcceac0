"""P1: NG-SGD train-step time over plain-SGD train-step time, measured side by side.

The network is 440-1024x4-2000 (ReLU hidden layers, log-softmax, summed NLL) at minibatch
512 on the CPU. The plain step uses torch.nn.functional.linear and the NG step ng_linear with
the same weights, Kaldi's default ranks and update period 4. Warm-up and measurement are
interleaved in one process: plain and NG blocks alternate, each block a multiple of the
update period so update and skip calls are both in it. The P1 ratio is the median over
adjacent (plain, NG) block pairs of their time ratio, which cancels slow drifts in machine
load. Also printed: the ratio of the per-method medians, of the fastest blocks, and of process
CPU time, with the load average: on a shared machine, trust a run whose blocks agree; and the
NG steps split into those that update the Fisher estimates (every 4th) and the others.
--floor adds a third method, alternating with the two: the same step whose preconditioners only
run the two thin GEMMs per side (H = X W^T, X - H W, W fixed: no norms, no updates, no host
work), the least any implementation of Kaldi's algorithm pays in torch GEMMs. Its ratio to the
plain step is the floor; what NG-SGD costs above it is the rest of the algorithm's work.
Goal: <= 1.15.

Usage: python benchmarks/ng_step.py [--minibatch 512] [--blocks 11] [--steps 4] [--threads N] [--floor]
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from nnet_tools import heap
from nnet_tools.model.ng import OnlineNaturalGradient, default_ranks, ng_linear

DIMS = [440, 1024, 1024, 1024, 1024, 2000]


def build(seed=0):
    g = torch.Generator().manual_seed(seed)
    params = []
    for din, dout in zip(DIMS[:-1], DIMS[1:]):
        w = (torch.randn(dout, din, generator=g) / din ** 0.5).requires_grad_(True)
        b = torch.zeros(dout, requires_grad=True)
        params.append((w, b))
    return params


def preconditioners(update_period=4):
    pres = []
    for din, dout in zip(DIMS[:-1], DIMS[1:]):
        r_in, r_out = default_ranks(din, dout)
        pres.append((OnlineNaturalGradient(r_in, update_period=update_period),
                     OnlineNaturalGradient(r_out, update_period=update_period)))
    return pres


class GemmOnly:
    """A preconditioner that does only the two N x D x R GEMMs per call, with a fixed W."""

    def __init__(self, rank, dim, seed):
        self.W = torch.randn(rank, dim, generator=torch.Generator().manual_seed(seed)) / dim
        self.out = None

    def _hat(self, X, H, W):  # X - H W into a buffer kept across calls, as the real one's reuse=True
        if self.out is None:
            self.out = torch.empty_like(X)
        return torch.addmm(X, H, W, alpha=-1.0, out=self.out)

    def precondition(self, X, reuse=True):
        return self._hat(X, torch.mm(X, self.W.t()), self.W), X.new_ones(())

    def precondition_with_ones(self, X, reuse=True):
        W_x, w_1 = self.W[:, :-1], self.W[:, -1]
        H = torch.addmm(w_1, X, W_x.t())
        return self._hat(X, H, W_x), torch.mv(H, w_1).neg_().add_(1.0), X.new_ones(())


def gemm_only_preconditioners():
    pres = []
    for i, (din, dout) in enumerate(zip(DIMS[:-1], DIMS[1:])):
        r_in, r_out = default_ranks(din, dout)
        pres.append((GemmOnly(r_in, din + 1, 2 * i), GemmOnly(r_out, dout, 2 * i + 1)))
    return pres


def step(params, x, y, lr, pres=None):
    h = x
    for i, (w, b) in enumerate(params):
        h = F.linear(h, w, b) if pres is None else ng_linear(h, w, b, *pres[i])
        if i < len(params) - 1:
            h = torch.relu(h)
    loss = F.nll_loss(F.log_softmax(h, dim=1), y, reduction="sum")
    loss.backward()
    with torch.no_grad():
        for w, b in params:
            w.add_(w.grad, alpha=-lr)
            b.add_(b.grad, alpha=-lr)
            w.grad = b.grad = None
    return loss


def paired_ratio(base, other):
    """Median over adjacent blocks of other / base: slow drifts in machine load cancel."""
    return statistics.median(o / b for b, o in zip(base, other))


def timed(fn, n):
    """Wall and process-CPU seconds per call. CPU time excludes the time other processes on
    a shared machine held the cores, so with one thread it cross-checks the wall ratio."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minibatch", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=11, help="measured blocks per method")
    ap.add_argument("--steps", type=int, default=4, help="steps per block (multiple of 4)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--floor", action="store_true", help="also time the GEMM-only preconditioner (the floor)")
    args = ap.parse_args()
    heap.keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.minibatch, DIMS[0], generator=g)
    y = torch.randint(DIMS[-1], (args.minibatch,), generator=g)
    params, pres, lr = build(), preconditioners(), 1e-6

    def plain():
        step(params, x, y, lr)

    by_kind = {True: [], False: []}  # NG step times: does the step update the estimates?

    def ng():
        updating = pres[0][0].updating()
        start = time.perf_counter()
        step(params, x, y, lr, pres)
        by_kind[updating].append(time.perf_counter() - start)

    floor_pres = gemm_only_preconditioners() if args.floor else None

    def floor():
        step(params, x, y, lr, floor_pres)

    # Warm-up: past the NG initialisation and its 10 forced updates, and the allocator.
    timed(plain, 3)
    timed(ng, 14)
    if args.floor:
        timed(floor, 3)
    by_kind[True].clear(), by_kind[False].clear()
    t_plain, t_ng, t_floor = [], [], []
    for _ in range(args.blocks):
        t_plain.append(timed(plain, args.steps))
        t_ng.append(timed(ng, args.steps))
        if args.floor:
            t_floor.append(timed(floor, args.steps))
    wall_p, wall_n = [t[0] for t in t_plain], [t[0] for t in t_ng]
    cpu_p, cpu_n = [t[1] for t in t_plain], [t[1] for t in t_ng]
    mp, mn = statistics.median(wall_p), statistics.median(wall_n)
    paired, cpu_paired = paired_ratio(wall_p, wall_n), paired_ratio(cpu_p, cpu_n)
    print(f"network {'-'.join(map(str, DIMS))}, minibatch {args.minibatch}, "
          f"{torch.get_num_threads()} threads, {args.blocks} blocks x {args.steps} steps, "
          f"load average {os.getloadavg()[0]:.2f}")
    for name, med, blocks in (("plain SGD", mp, wall_p), ("NG-SGD", mn, wall_n)):
        print(f"{name + ' step:':16s}median {1000 * med:.1f} ms  "
              f"(blocks: {' '.join(f'{1000 * t:.1f}' for t in blocks)})")
    print(f"ratio of medians {mn / mp:.3f}; of fastest blocks {min(wall_n) / min(wall_p):.3f}; "
          f"of process CPU time (paired median) {cpu_paired:.3f}")
    print(f"NG-SGD steps that update the estimates (every {pres[0][0].update_period}th): median "
          f"{1000 * statistics.median(by_kind[True]):.1f} ms; the others {1000 * statistics.median(by_kind[False]):.1f} ms")
    if args.floor:
        wall_f = [t[0] for t in t_floor]
        print(f"{'GEMM-only step:':16s}median {1000 * statistics.median(wall_f):.1f} ms; floor ratio "
              f"(median of paired blocks) {paired_ratio(wall_p, wall_f):.3f}")
    goal = f"goal <= floor + 0.03 = {paired_ratio(wall_p, wall_f) + 0.03:.3f}" if args.floor else "goal: floor + 0.03 (--floor)"
    print(f"P1 ratio NG-SGD / plain SGD step time (median of paired blocks): {paired:.3f} ({goal})")


if __name__ == "__main__":
    main()
