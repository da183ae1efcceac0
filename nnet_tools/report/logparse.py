"""Reading the numbers back out of Kaldi-shaped logs (driver job selection, reports)."""
import math
import re

OBJF_RE = re.compile(r"Overall average objective function for 'output' is (\S+(?: \+ \S+ = \S+)?) over (\d+) frames")
PROB_RE = re.compile(r"Overall (log-likelihood|accuracy) for 'output' is (\S+) per frame")
TIME_RE = re.compile(r"^# Accounting: time=(\d+(?:\.\d+)?)", re.M)


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def train_objective(path):
    """The last 'Overall average objective function' of a train log ('a + b = c' -> c).

    None when the log is missing, has no such line (the job died first) or the value is not
    finite: the job failed, and must not be counted, or chosen, as if it had an objective
    (Kaldi scores it -100000, which let a missing log pass silently)."""
    found = OBJF_RE.findall(_read(path))
    if not found:
        return None
    value = float(found[-1][0].split("=")[-1])
    return value if math.isfinite(value) else None


def compute_prob(path):
    """{'log-likelihood': x, 'accuracy': y} from a compute_prob log (missing keys absent)."""
    return {key: float(value) for key, value in PROB_RE.findall(_read(path))}


def accounting_time(path):
    found = TIME_RE.findall(_read(path))
    return float(found[-1]) if found else None
