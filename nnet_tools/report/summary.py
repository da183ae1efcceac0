"""Summaries of an experiment dir from its logs, exactly as Kaldi's scripts print them:
accuracy.report (log_parse.generate_acc_logprob_report) and the one-line summary
(steps/info/nnet3_dir_info.pl): the same rows, iterations and number formats."""
import datetime
import glob
import os
import re

from nnet_tools.errors import NnetError
from nnet_tools.report import logparse

TRAIN_LOG_RE = re.compile(r"train\.(\d+)\.(\d+)\.log$")


def _log(exp_dir, name):
    return os.path.join(exp_dir, "log", name)


def train_times(exp_dir):
    """{iteration: seconds}, the longest job's '# Accounting: time=' (get_train_times)."""
    times = {}
    for path in glob.glob(_log(exp_dir, "train.*.*.log")):
        m = TRAIN_LOG_RE.search(path)
        t = logparse.accounting_time(path) if m else None
        if t is not None:
            it = int(m.group(1))
            times[it] = max(times.get(it, t), t)
    return times


def prob_values(exp_dir, key="accuracy"):
    """[(iteration, train, valid)] for every numbered iteration with both values (parse_prob_logs)."""
    found = {subset: {it: logparse.compute_prob(path).get(key)
                      for it, path in logparse.numbered_logs(exp_dir, f"compute_prob_{subset}.{{}}.log").items()}
             for subset in ("train", "valid")}
    return [(it, found["train"][it], found["valid"][it]) for it in sorted(set(found["train"]) & set(found["valid"]))
            if found["train"][it] is not None and found["valid"][it] is not None]


def iteration_rows(exp_dir, key="accuracy"):
    """[(iteration, duration s, train, valid)]: the iterations that were trained (have a train
    time) and have both diagnostics, as accuracy.report lists them."""
    times = train_times(exp_dir)
    return [(it, times[it], t, v) for it, t, v in prob_values(exp_dir, key) if it in times]


def format_total(seconds):
    """Python's timedelta string, as Kaldi's report prints it: 0:03:22, 1 day, 2:00:05."""
    try:
        return str(datetime.timedelta(seconds=seconds))
    except OverflowError:  # a garbled 'time=' in a log
        return f"{seconds:g} seconds"


def accuracy_report(exp_dir, key="accuracy"):
    """Kaldi's accuracy.report: a header, one row per trained iteration, the total of every
    iteration's training time."""
    lines = ["%Iter\tduration\ttrain_objective\tvalid_objective\tdifference"]
    lines += ["%d\t%s\t%g\t%g\t%g" % (it, float(d), t, v, v - t) for it, d, t, v in iteration_rows(exp_dir, key)]
    lines.append(f"Total training time is {format_total(sum(train_times(exp_dir).values()))}")
    return "\n".join(lines) + "\n"


# -- nnet3_dir_info.pl --------------------------------------------------------------------------
def _has_loglike(path):
    return "log-likelihood" in logparse.compute_prob(path)


def _count(exp_dir, pattern):
    """How many of pattern.format(n) exist for n = 0, 1, ... without a gap."""
    n = 0
    while os.path.exists(_log(exp_dir, pattern.format(n))):
        n += 1
    return n


def num_iters(exp_dir):
    """Iterations with a train.N.1.log, less any final ones whose diagnostics have not finished
    (up to 6 back, as nnet3_dir_info.pl)."""
    log_dir = os.path.join(exp_dir, "log")
    if os.path.isdir(log_dir) and not os.access(log_dir, os.R_OK | os.X_OK):   # else: "no train.0.1.log"
        raise NnetError(f"{log_dir}: cannot read: Permission denied")
    iters = _count(exp_dir, "train.{}.1.log")
    if iters == 0:
        raise NnetError(f"{exp_dir} does not seem to be an nnet3 neural net training directory "
                        f"(no {_log(exp_dir, 'train.0.1.log')})")
    for last in range(iters - 1, max(iters - 8, -1), -1):
        if all(_has_loglike(_log(exp_dir, f"compute_prob_{s}.{last}.log")) for s in ("train", "valid")):
            return last + 1
    return iters


def number_to_string(value, name):
    if abs(value) < 0.02 or (name == "accuracy" and abs(value) > 0.97):
        return f"{value:.4f}"
    if abs(value) < 0.2 or (name == "accuracy" and abs(value) > 0.7):
        return f"{value:.3f}"
    return f"{value:.2f}"


def _progress_info(exp_dir, it):
    """' num-params=0.1M dim=40->10' from the nnet-info block of progress.<it>.log."""
    try:
        with open(_log(exp_dir, f"progress.{it}.log"), errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    out = ""
    params = re.findall(r"^num-parameters: (\S+)", text, re.M)
    if params:
        out += f" num-params={logparse.number(params[-1]) / 1e6:.1f}M"
    clipped = [logparse.number(x) for x in re.findall(r"clipped-proportion=([^,\s]+)", text)]
    if clipped and max(clipped) > 0.1:
        out += f" **max-clipped-proportion={max(clipped):g}**" if max(clipped) > 0.3 else f" max-clipped-proportion={max(clipped):g}"
    dims = {name: re.findall(rf"^{kind}-node.* name={name} .*dim=(\S+)", text, re.M)
            for kind, name in (("output", "output"), ("input", "input"), ("input", "ivector"))}
    out_dim, in_dim, iv_dim = (_dim(dims[n][-1]) if dims[n] else 0 for n in ("output", "input", "ivector"))
    if out_dim and in_dim and iv_dim:
        out += f" dim={in_dim}+{iv_dim}->{out_dim}"
    elif out_dim and in_dim:
        out += f" dim={in_dim}->{out_dim}"
    elif out_dim:
        out += f" output-dim={out_dim}"
    return out


def _dim(text):
    """A dim from a log; 0 (not shown) for a garbled one."""
    return int(text) if text.isdigit() else 0


def _combine_info(exp_dir):
    try:
        with open(_log(exp_dir, "combine.log"), errors="replace") as f:
            for line in f:
                if m := re.search(r"Combining nnets, objective function changed from (\S+) to (\S+)", line):
                    return f" combine={logparse.number(m.group(1)):.2f}->{logparse.number(m.group(2)):.2f}"
                if m := re.search(r"Combining (\S+) nnets, objective function changed from (\S+) to (\S+)", line):
                    return f" combine={logparse.number(m.group(2)):.2f}->{logparse.number(m.group(3)):.2f} (over {m.group(1) if m.group(1).isdigit() else '?'})"
    except OSError:
        pass
    return ""


def _values_at(exp_dir, iters):
    out = ""
    for key, name in (("log-likelihood", "loglike"), ("accuracy", "accuracy")):
        shown, train, valid = [], [], []
        for it in iters:
            t = logparse.compute_prob(_log(exp_dir, f"compute_prob_train.{it}.log")).get(key)
            v = logparse.compute_prob(_log(exp_dir, f"compute_prob_valid.{it}.log")).get(key)
            if t is not None and v is not None:
                shown.append(str(it))
                train.append(number_to_string(t, name))
                valid.append(number_to_string(v, name))
        if shown:
            out += f" {name}:train/valid[{','.join(shown)}]=({','.join(train)}/{','.join(valid)})"
    return out


def dir_info(exp_dir):
    """nnet3_dir_info.pl's line: iterations, jobs, parameters and dims, combination, and
    log-likelihood and accuracy at two thirds of the way, the last iteration and final."""
    iters = num_iters(exp_dir)
    last = iters - 1
    return (f"{exp_dir}: num-iters={iters} nj={_count_jobs(exp_dir, 0)}..{_count_jobs(exp_dir, last)}"
            + _progress_info(exp_dir, last)
            + _combine_info(exp_dir) + _values_at(exp_dir, [int(last * 0.666), last, "final", "combined"]))


def _count_jobs(exp_dir, it):
    """Jobs 1, 2, ... of iteration ``it`` that have a train log."""
    n = 1
    while os.path.exists(_log(exp_dir, f"train.{it}.{n}.log")):
        n += 1
    if n == 1:
        raise NnetError(f"{exp_dir} does not seem to be an nnet3 neural net training directory "
                        f"(no {_log(exp_dir, f'train.{it}.1.log')})")
    return n - 1
