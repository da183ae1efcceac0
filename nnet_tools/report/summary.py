"""Summaries of an experiment dir from its logs (Kaldi's accuracy.report and nnet3_dir_info.pl)."""
import glob
import os
import re
import time

from nnet_tools.report import logparse


def _iterations(exp_dir):
    found = {int(m.group(1)) for p in glob.glob(os.path.join(exp_dir, "log", "compute_prob_valid.*.log"))
             if (m := re.search(r"compute_prob_valid\.(\d+)\.log$", p))}
    return sorted(found)


def _jobs(exp_dir, it):
    return len(glob.glob(os.path.join(exp_dir, "log", f"train.{it}.*.log")))


def iteration_rows(exp_dir, key="accuracy"):
    """[(iteration or 'final', duration s, train, valid)] for every iteration with both diagnostics."""
    rows = []
    for it in _iterations(exp_dir) + ["final"]:
        train = logparse.compute_prob(os.path.join(exp_dir, "log", f"compute_prob_train.{it}.log")).get(key)
        valid = logparse.compute_prob(os.path.join(exp_dir, "log", f"compute_prob_valid.{it}.log")).get(key)
        times = [logparse.accounting_time(p) for p in glob.glob(os.path.join(exp_dir, "log", f"train.{it}.*.log"))]
        if train is not None and valid is not None:
            rows.append((it, max([t for t in times if t is not None], default=0.0), train, valid))
    return rows


def accuracy_report(exp_dir, key="accuracy"):
    """Kaldi's accuracy.report: a header, one row per iteration, the total training time."""
    rows = iteration_rows(exp_dir, key)
    lines = ["%Iter\tduration\ttrain_objective\tvalid_objective\tdifference"]
    lines += [f"{it}\t{d:g}\t{t:g}\t{v:g}\t{v - t:g}" for it, d, t, v in rows]
    total = sum(d for _, d, _, _ in rows)
    lines.append(f"Total training time is {time.strftime('%H:%M:%S', time.gmtime(total))}")
    return "\n".join(lines) + "\n"


def dir_info(exp_dir):
    """One line in the spirit of steps/info/nnet3_dir_info.pl."""
    its = _iterations(exp_dir)
    if not its:
        return f"{exp_dir}: no diagnostics logs found"
    last = its[-1]
    shown = [int(last * 0.666), last, "final"]

    def values(key, subset):
        out = []
        for it in shown:
            v = logparse.compute_prob(os.path.join(exp_dir, "log", f"compute_prob_{subset}.{it}.log")).get(key)
            out.append("NA" if v is None else f"{v:.4g}")
        return ",".join(out)
    jobs = f"{_jobs(exp_dir, 0)}..{_jobs(exp_dir, last - 1)}"
    return (f"{exp_dir}: num-iters={last} nj={jobs} "
            f"loglike:train/valid[{shown[0]},{shown[1]},final]=({values('log-likelihood', 'train')}/"
            f"{values('log-likelihood', 'valid')}) "
            f"accuracy:train/valid[{shown[0]},{shown[1]},final]=({values('accuracy', 'train')}/{values('accuracy', 'valid')})")
