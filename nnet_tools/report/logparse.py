"""Reading the numbers back out of Kaldi-shaped logs (driver job selection, reports)."""
import glob
import math
import os
import re

from nnet_tools.errors import NnetError

OBJF_RE = re.compile(r"Overall average objective function for 'output' is (\S+(?: \+ \S+ = \S+)?) over (\d+) frames")
PROB_RE = re.compile(r"Overall (log-likelihood|accuracy) for 'output' is (\S+) per frame")
TIME_RE = re.compile(r"^# Accounting: time=(\d+(?:\.\d+)?)", re.M)


def _read(path):
    """A log's text; "" if it is not there (yet). One that is there but unreadable is an error:
    read as absent, its iteration would silently drop out of the report."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except PermissionError as e:
        raise NnetError(f"{path}: cannot read: {e.strerror}") from None
    except OSError:
        return ""


def numbered_logs(exp_dir, pattern):
    """{N: path} for exp_dir/log/<pattern with N> ('compute_prob_valid.{}.log'), N an integer."""
    regex = re.compile(re.escape(pattern).replace(r"\{\}", r"(\d+)") + "$")
    found = {}
    for path in glob.glob(os.path.join(exp_dir, "log", pattern.format("*"))):
        if m := regex.search(os.path.basename(path)):
            found[int(m.group(1))] = path
    return dict(sorted(found.items()))


def number(text):
    """A number from a log; NaN for a garbled one (a log cut or overwritten mid-line), so one bad
    line shows as NaN in the report rather than stopping it."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def train_objective(path):
    """The last 'Overall average objective function' of a train log ('a + b = c' -> c).

    None when the log is missing, has no such line (the job died first) or the value is not
    finite: the job failed, and must not be counted, or chosen, as if it had an objective
    (Kaldi scores it -100000, which let a missing log pass silently)."""
    found = OBJF_RE.findall(_read(path))
    if not found:
        return None
    value = number(found[-1][0].split("=")[-1])
    return value if math.isfinite(value) else None


def train_frames(path):
    """The frame count of a train log's last 'Overall average objective function' line; None when
    the log has no such line (the job died first) or is missing."""
    found = OBJF_RE.findall(_read(path))
    return int(found[-1][1]) if found else None


def compute_prob(path):
    """{'log-likelihood': x, 'accuracy': y} from a compute_prob log (missing keys absent)."""
    return {key: number(value) for key, value in PROB_RE.findall(_read(path))}


def accounting_time(path):
    found = TIME_RE.findall(_read(path))
    return number(found[-1]) if found else None


# nnet3-show-progress: "Relative parameter differences per layer are [ tdnn1.affine:0.017 output.affine:0.03 ]"
DIFF_RE = re.compile(r"^LOG .*?\b(Parameter differences|Relative parameter differences) per layer are \[([^\]]*)\]", re.M)
# nnet3-info's component line and its per-dimension summaries, e.g.
#   component name=tdnn1.relu type=RectifiedLinearComponent, dim=512, ..., value-avg=[percentiles(0,1,2,5
#   10,20,50,80,90 95,98,99,100)=(0.01,...,1.3), mean=0.41, stddev=0.22], deriv-avg=[...], oderiv-rms=[...]
# (a line may carry a prefix, as grep's "file:"; never one spanning lines)
COMPONENT_RE = re.compile(r"^(?:[^\n]*?[ \t:])??component name=(\S+) type=(\w+)Component,(.*)$", re.M)
SUMMARY_RE = re.compile(r"\b(value-avg|deriv-avg|oderiv-rms)=\[percentiles\(([^)]*)\)=\(([^)]*)\), "
                        r"mean=(\S+), stddev=([^\]\s]+)\]")
LRATE_RE = re.compile(r"--learning-rate[= ](\S+)")


def parameter_differences(path, relative=True):
    """{layer: difference} from a progress log's nnet3-show-progress line (relative or absolute)."""
    wanted = "Relative parameter differences" if relative else "Parameter differences"
    found = [body for phrase, body in DIFF_RE.findall(_read(path)) if phrase == wanted]
    if not found:
        return {}
    pairs = (item.rsplit(":", 1) for item in found[-1].split() if ":" in item)
    return {name: number(value) for name, value in pairs}


def _numbers(text):
    return [number(v) for v in re.split(r"[,\s]+", text.strip()) if v]


def nonlinearity_stats(path):
    """{component: {'type': 'RectifiedLinear', 'value-avg': {'percentiles': {5.0: x, ...},
    'mean': m, 'stddev': s}, 'deriv-avg': {...}, 'oderiv-rms': {...}}} from a progress log's
    nnet3-info component lines (only those carrying statistics; oderiv-rms may be absent)."""
    stats = {}
    for name, kind, rest in COMPONENT_RE.findall(_read(path)):
        summaries = {}
        for key, points, values, mean, stddev in SUMMARY_RE.findall(rest):
            points, values = _numbers(points), _numbers(values)
            if len(points) != len(values):
                continue
            summaries[key] = {"percentiles": dict(zip(points, values)), "mean": number(mean), "stddev": number(stddev)}
        if "value-avg" in summaries and "deriv-avg" in summaries:
            stats[name] = {"type": kind, **summaries}
    return stats


def learning_rate(path):
    """The --learning-rate of the command a train log starts with ('# nnet-train-one-job ...')."""
    text = _read(path)
    header = text.split("\n", 1)[0] if text.startswith("#") else ""
    found = LRATE_RE.search(header)
    return number(found.group(1)) if found else None
