"""The per-task log frame every backend writes, in Kaldi run.pl's exact shape.

    # <command>
    # Started at <date>
    #
    <the command's stdout and stderr>
    # Accounting: time=<secs> threads=<n>
    # Ended (code <status>[; signal <sig>]) at <date>, elapsed time <secs> seconds

Logs are streams appended to while the task runs, so they are not written atomically;
a log without its ``# Ended`` line is how an interrupted task is recognised (--pick).
"""
import os
import re
import time

_ENDED = re.compile(r"^# Ended \(code (\d+)(?:; signal (\d+))?\)")


def date():
    """What ``date`` prints in the C locale, e.g. ``Tue Jul  1 10:02:03 UTC 2025``."""
    return time.strftime("%a %b %e %H:%M:%S %Z %Y")


def write_header(log, command):
    """Start (truncate) ``log`` with the header; return the start time for write_footer."""
    directory = os.path.dirname(log)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(log, "w") as f:
        f.write(f"# {command}\n# Started at {date()}\n#\n")
    return int(time.time())


def status_text(returncode):
    """A subprocess return code as Kaldi words it: ``code 3`` or ``code 0; signal 15``."""
    if returncode < 0:
        return f"code 0; signal {-returncode}"
    return f"code {returncode}"


def write_footer(log, started, returncode, threads=1):
    elapsed = int(time.time()) - started
    with open(log, "a") as f:
        f.write(f"# Accounting: time={elapsed} threads={threads}\n"
                f"# Ended ({status_text(returncode)}) at {date()}, elapsed time {elapsed} seconds\n")


def ended_code(log):
    """The code in the last ``# Ended`` line of ``log``; None if missing or unfinished.

    A signal counts as failure even when the code is 0.
    """
    try:
        with open(log, errors="replace") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        if m := _ENDED.match(line):
            return int(m.group(1)) or (128 + int(m.group(2)) if m.group(2) else 0)
    return None
