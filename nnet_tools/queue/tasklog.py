"""The per-task log frame every backend writes, in Kaldi run.pl's exact shape.

    # <command>
    # Started at <date>
    #
    <the command's stdout and stderr>
    # Peak memory: <kB> kB          (not run.pl's: guard.py adds it; steps/stages.sh reads it)
    # Accounting: time=<secs> threads=<n>
    # Ended (code <status>[; signal <sig>]) at <date>, elapsed time <secs> seconds

Logs are streams appended to while the task runs, so they are not written atomically;
a log without its ``# Ended`` line is how an interrupted task is recognised (--pick).
"""
import os
import re
import time

from nnet_tools.fileio import make_dirs

_ENDED = re.compile(r"^# Ended \(code (\d+)(?:; signal (\d+))?\)")


# What ``date`` prints in the C locale, e.g. ``Tue Jul  1 10:02:03 UTC 2025``.
DATE_FORMAT = "%a %b %e %H:%M:%S %Z %Y"
_SHELL_DATE = f"$(LC_ALL=C date '+{DATE_FORMAT}')"


def date():
    return time.strftime(DATE_FORMAT)


def write_header(log, command):
    """Start (truncate) ``log`` with the header; return the start time for write_footer."""
    directory = os.path.dirname(log)
    if directory:
        make_dirs(directory)
    # A new file, not the old one truncated: a stray task of an earlier run still holding the
    # old one open then writes into that, never into this run's log.
    try:
        os.unlink(log)
    except FileNotFoundError:
        pass
    with open(log, "w", errors="surrogateescape") as f:   # a command's bytes as given (a Latin-1 file name)
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


def shell_header(log_var, command_var):
    """Bash lines doing what write_header does, for a wrapper script run by a cluster task
    (the variables named hold the log path and the command line)."""
    return [f'mkdir -p "$(dirname "${log_var}")"; started=$(date +%s); rm -f "${log_var}"',
            f"printf '# %s\\n# Started at %s\\n#\\n' \"${command_var}\" \"{_SHELL_DATE}\" >\"${log_var}\"",
            f'log_inode=$(stat -c %i "${log_var}")']


def shell_footer(log_var, code_var, threads):
    """Bash lines doing what write_footer does, with the exit status held in ``code_var``;
    not if the log is no longer this task's (a later run of the same command replaced it)."""
    return ['[ "$(stat -c %i "$' + log_var + '" 2>/dev/null)" = "$log_inode" ] || exit 1',
            "elapsed=$(( $(date +%s) - started ))",
            f"printf '# Accounting: time=%d threads={threads}\\n# Ended (code %d) at %s, elapsed time %d seconds\\n' "
            f"$elapsed ${code_var} \"{_SHELL_DATE}\" $elapsed >>\"${log_var}\""]


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


def span(log):
    """(start, end) of a finished task, in seconds since the epoch, from its ``# Started`` and last
    ``# Ended`` lines (one-second resolution); None if either is missing."""
    try:
        with open(log, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    started = re.search(r"^# Started at (.+)$", text, re.M)
    ended = re.findall(r"^# Ended \(.*\) at (.+), elapsed time", text, re.M)
    if not started or not ended:
        return None
    parse = DATE_FORMAT.replace("%e", "%d")   # strptime's %d takes date's space-padded day
    return time.mktime(time.strptime(started[1], parse)), time.mktime(time.strptime(ended[-1], parse))


def stalled(log, limit):
    """Whether a started task's log has not grown (its mtime: the task's own lines, or its header
    when it started) for ``limit`` seconds; a task with no log yet has not started."""
    try:
        return time.time() - os.stat(log).st_mtime >= limit
    except FileNotFoundError:
        return False


def stall_note(limit):
    """The line a launcher adds to the log of a task it stopped for --stall-limit (the driver
    reads it: retry.py)."""
    return f"its log did not grow for {limit:g} s (--stall-limit)"


def read_tail(path, size=4096):
    """The last ``size`` bytes of a log as text; "" if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def last_error(log):
    """A task's last ``ERROR (program...) message`` line (ours and Kaldi's programs'), or None."""
    for line in reversed(read_tail(log).splitlines()):
        if line.startswith("ERROR ("):
            return line
    return None
