"""What a launcher line asks for: ``[options] [JOB=1:N] LOG COMMAND...``, parsed as Kaldi's run.pl does.

The array variable (any identifier, conventionally JOB) is replaced by the task number in
every place it occurs, in the log path and in the command, exactly as Kaldi does (even inside
other words: ``$JOB_DIR`` becomes ``$1_DIR`` for task 1).
"""
import dataclasses
import re

from nnet_tools.errors import NnetError

_RANGE = re.compile(r"^([A-Za-z_]\w*)=(\d+):(\d+)$")   # JOB=1:20
_SINGLE = re.compile(r"^([A-Za-z_]\w*)=(\d+)$")        # JOB=3
_SUSPICIOUS = re.compile(r"^[A-Za-z_]\w*=\S*:\S*$")     # JOB=a:b, JOB=1:, ...

# How the cluster launcher rides out faults (seconds; the launcher consumes them, no engine flag):
# submission tries and the pause between them (Kaldi's queue.pl: 4 tries, 20 s apart), how
# long a task the engine no longer runs may take to show its footer before it counts as
# failed (shared file systems lag), the longest wait for a task (default: no limit), and how
# long a started task's log may stay as it is before the task counts as stalled (default: off).
FAULT_OPTIONS = {"submit_tries": 4, "submit_retry_delay": 20.0, "lost_grace": 75.0, "max_wait": None,
                 "stall_limit": None}
PICK_CHOICES = ("all", "failed", "incomplete")
# Set to --num-threads in a task's environment, so torch (OpenMP, MKL) uses that many threads.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclasses.dataclass
class JobSpec:
    """One launcher call. ``name`` is None for the single-job form (no ``JOB=``)."""
    log: str
    command: list
    name: str = None
    start: int = 1
    end: int = 1
    # --foo-bar value -> {"foo_bar": "value"}, values as given (strings), queue.pl style.
    options: dict = dataclasses.field(default_factory=dict)
    # Old-style qsub switches (-l x, -q y, -pe smp 4, -V): engines pass them through.
    engine_args: list = dataclasses.field(default_factory=list)

    @property
    def tasks(self):
        return range(self.start, self.end + 1)

    @property
    def num_threads(self):
        return int(self.options.get("num_threads", 1))

    @property
    def gpu(self):
        return int(self.options.get("gpu", 0))

    @property
    def max_jobs_run(self):
        """The --max-jobs-run limit, or None when not given."""
        value = self.options.get("max_jobs_run")
        return None if value is None else int(value)

    def fault_option(self, name):
        """The option's value in seconds (or tries); None for no limit (--max-wait and
        --stall-limit not given, or 0)."""
        value = self.options.get(name, FAULT_OPTIONS[name])
        if value is None or (name in ("max_wait", "stall_limit") and float(value) == 0):
            return None
        return float(value)

    @property
    def stall_limit(self):
        return self.fault_option("stall_limit")

    @property
    def pick(self):
        return self.options.get("pick", "all")

    def substitute(self, text, task):
        return text if self.name is None else text.replace(self.name, str(task))

    def log_for(self, task):
        return self.substitute(self.log, task)

    def command_line(self):
        return quote_command(self.command)

    def command_for(self, task):
        return self.substitute(self.command_line(), task)

    def log_glob(self):
        """The log name with the array variable as ``*``, for failure messages."""
        if self.name is None:
            return self.log
        if self.end == self.start:
            return self.log_for(self.start)
        return self.log.replace(self.name, "*")


def quote_command(args):
    """Kaldi's re-quoting: no whitespace -> as is; contains ``"`` -> single-quoted; else double-quoted.

    So escaped shell syntax (``\\|``, ``\\>``, ``\\;``) reaches bash as syntax, while an argument
    with spaces such as ``"ark:gunzip -c a.gz |"`` reaches the program as one word.
    """
    out = []
    for arg in args:
        if arg and not re.search(r"\s", arg):
            out.append(arg)
        elif '"' in arg:
            out.append(f"'{arg}'")
        else:
            out.append(f'"{arg}"')
    return " ".join(out)


def _positive_int(name, value, minimum=1):
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise NnetError(f"invalid value '{value}' for --{name.replace('_', '-')}: "
                        f"expected an integer >= {minimum}")
    return number


def _number(name, value, minimum):
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is None or not number >= minimum or number == float("inf"):
        raise NnetError(f"invalid value '{value}' for --{name.replace('_', '-')}: expected a number >= {minimum}")
    return number


def _set_option(options, name, value):
    if name in ("num_threads", "max_jobs_run"):
        number = _positive_int(name, value)
        if name == "max_jobs_run" and "max_jobs_run" in options:
            # As run.pl: given several times (also as -tc), the smallest wins.
            number = min(number, int(options[name]))
        value = str(number)
    elif name == "gpu":
        value = str(_positive_int(name, value, minimum=0))
    elif name in FAULT_OPTIONS:
        value = str(_number(name, value, minimum=1 if name == "submit_tries" else 0))
    elif name == "pick" and value not in PICK_CHOICES:
        raise NnetError(f"invalid value '{value}' for --pick: expected one of {', '.join(PICK_CHOICES)}")
    options[name] = value


def _parse_switches(args, options, engine_args):
    """Consume leading switches (run.pl: only while at least 2 arguments remain)."""
    while len(args) >= 2 and args[0].startswith("-"):
        switch = args.pop(0)
        if switch == "-V":
            engine_args.append(switch)
        elif switch.startswith("--"):
            name, eq, value = switch[2:].partition("=")
            if not eq:
                value = args.pop(0)
            _set_option(options, name.replace("-", "_"), value)
        elif switch == "-tc":
            _set_option(options, "max_jobs_run", args.pop(0))
        elif switch == "-pe":                    # -pe smp 4: two arguments
            engine_args += [switch] + args[:2]
            del args[:2]
        else:
            engine_args += [switch, args.pop(0)]


MAX_TASKS = 1_000_000  # beyond any engine's array limit (Grid Engine's default is 75000)


def parse_args(args):
    """``[options] [NAME=a:b] LOG COMMAND...`` -> JobSpec; bad input -> NnetError (one line)."""
    args = list(args)
    options, engine_args = {}, []
    name, start, end = None, 1, 1
    # Twice, as run.pl: options may come before and after JOB=1:N.
    for _ in range(2):
        _parse_switches(args, options, engine_args)
        if not args:
            break
        first = args[0]
        if (m := _RANGE.match(first) or _SINGLE.match(first)) and name is not None:
            raise NnetError(f"two job ranges, {range_arg} and {first}: give one")
        if m:
            name, start, range_arg = m.group(1), int(m.group(2)), first
            end = int(m.group(3)) if m.re is _RANGE else start
            if start > end:
                raise NnetError(f"invalid job range {first}: start is after end")
            if start < 1:
                raise NnetError(f"invalid job range {first}: start must be >= 1 "
                                f"(Grid Engine numbers tasks from 1)")
            if end - start >= MAX_TASKS:
                raise NnetError(f"invalid job range {first}: more than {MAX_TASKS} tasks")
            args.pop(0)
        elif name is None and _SUSPICIOUS.match(first):
            raise NnetError(f"invalid job range {first}: expected NAME=start:end, e.g. JOB=1:4")
    if not args:
        raise NnetError("no log file and no command given (usage: [options] [JOB=1:N] LOG COMMAND...)")
    log = args.pop(0)
    if not args:
        raise NnetError(f"no command given after the log file {log}")
    if name is not None and end > start and name not in log:
        raise NnetError(f"{end - start + 1} tasks would all write to one log file {log}: "
                        f"put {name} in the log name")
    return JobSpec(log=log, command=args, name=name, start=start, end=end,
                   options=options, engine_args=engine_args)
