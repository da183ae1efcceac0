"""The queue config: how generic launcher options become engine flags (Kaldi's conf/queue.conf).

Line kinds, as in Kaldi's queue.pl / slurm.pl (``#`` starts a comment):

    command sbatch --export=PATH          the submit command and its fixed flags
    option mem=* --mem-per-cpu $0         --mem X  -> flags with $0 replaced by X
    option gpu=0 -p shared                --gpu 0  -> exactly these flags (may be none)
    option account=*                      --account X -> no flags (any value accepted, as slurm.pl)
    default gpu=0                         --gpu not given -> behave as --gpu 0

Which file, without ``--config``: the one Kaldi's script for the engine reads in the working
directory, ``conf/slurm.conf`` (slurm.pl) or ``conf/queue.conf`` (queue.pl), section-less;
else our combined ``conf/nnet-queue.conf``, where ``[slurm]`` / ``[sge]`` start a section that
only that engine reads (lines before the first section are read by both), a name neither Kaldi
script reads; else the built-in defaults below (which conf/nnet-queue.conf in the source tree
documents).
"""
import dataclasses
import os
import re
import shlex

from nnet_tools.errors import NnetError, not_utf8
from nnet_tools.log import logger

KALDI_PATHS = {"slurm": "conf/slurm.conf", "sge": "conf/queue.conf"}   # what slurm.pl / queue.pl read
COMBINED_PATH = "conf/nnet-queue.conf"
# Options the launcher itself consumes; they never become engine flags (the engine backends
# turn max_jobs_run into the array's throttle, %N or -tc N).
LAUNCHER_ONLY = ("config", "pick", "max_jobs_run", "submit_tries", "submit_retry_delay", "lost_grace", "max_wait",
                 "stall_limit")

# Kaldi's built-in defaults (utils/parallel/slurm.pl and queue.pl), plus qsub -w e.
BUILTIN = """\
[slurm]
command sbatch --export=ALL --ntasks-per-node=1
option time=* --time $0
option mem=* --mem-per-cpu $0
option mem=0
option num_threads=* --cpus-per-task $0 --ntasks-per-node=1
option num_threads=1 --cpus-per-task 1 --ntasks-per-node=1
default gpu=0
option gpu=0 -p shared
option gpu=* -p gpu --gres=gpu:$0 --time 4:0:0
[sge]
command qsub -v PATH -cwd -S /bin/bash -j y -l arch=*64* -w e
option time=* -l h_rt=$0
option mem=* -l mem_free=$0,ram_free=$0
option mem=0
option num_threads=* -pe smp $0
option num_threads=1
default gpu=0
option gpu=0
option gpu=* -l gpu=$0 -q '*.q'
"""

_SECTION = re.compile(r"^\[(\w+)\]$")
_GENERAL = re.compile(r"^option ([^=\s]+)=\* (.+)$")
_SPECIAL = re.compile(r"^option ([^=\s]+)=(\S+)\s*(.*)$")
_DEFAULT = re.compile(r"^default ([^=\s]+)=(\S+)$")


@dataclasses.dataclass
class EngineConfig:
    source: str                                            # file name, for messages
    command: list = None                                   # submit command + fixed flags
    general: dict = dataclasses.field(default_factory=dict)   # name -> template with $0
    special: dict = dataclasses.field(default_factory=dict)   # (name, value) -> flags
    defaults: dict = dataclasses.field(default_factory=dict)  # name -> implied value

    def flags(self, options):
        """Engine flags for ``options`` ({name: value}); an option the config does not describe
        (for that value) is an error, so a typo never silently drops a resource request."""
        values = {**options, **{k: v for k, v in self.defaults.items() if k not in options}}
        for name in LAUNCHER_ONLY:
            values.pop(name, None)
        expansions = {}
        for name, value in values.items():
            if (name, value) in self.special:
                expansions[name] = shlex.split(self.special[name, value])
            elif name in self.general:
                expansions[name] = shlex.split(self.general[name].replace("$0", value))
            elif (name, "*") in self.special:     # 'option name=*' without flags: any value, no flags
                expansions[name] = shlex.split(self.special[name, "*"])
            else:
                raise NnetError(f"{self.source}: option --{name.replace('_', '-')} {value} "
                                f"is not described (add 'option {name}=* ...$0...')")
        # An option whose flags another option's line also sets (--time, which the gpu line sets
        # to 4:0:0) goes last: sbatch and qsub take the last value, so the user's own request
        # wins whatever the order of the options.
        keys = {name: _flag_keys(flags) for name, flags in expansions.items()}
        narrower = {name for name in expansions
                    if keys[name] and any(keys[name] <= keys[other] for other in expansions if other != name)}
        return [flag for name in sorted(expansions, key=lambda n: n in narrower) for flag in expansions[name]]


def _flag_keys(flags):
    """What engine settings a list of flags sets: '--time' for '--time 4:0:0' or '--time=4:0:0',
    '-l h_rt' for '-l h_rt=1:0:0,mem_free=2G' (one key per resource)."""
    keys = set()
    for i, flag in enumerate(flags):
        if not flag.startswith("-"):
            continue
        name = flag.split("=", 1)[0]
        if name == "-l" and i + 1 < len(flags):
            keys |= {f"-l {r.split('=', 1)[0]}" for r in flags[i + 1].split(",")}
        else:
            keys.add(name)
    return keys


def parse(text, engine, source):
    """The EngineConfig for ``engine`` from config ``text`` (shared lines + its section)."""
    config = EngineConfig(source=source)
    section = None
    for number, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"\s*#.*", "", line).strip()
        if not line:
            continue
        if m := _SECTION.match(line):
            section = m.group(1)
            continue
        if section not in (None, engine):
            continue
        if line.startswith("command "):
            config.command = shlex.split(line[len("command "):])
        elif m := _GENERAL.match(line):
            if "$0" not in m.group(2):
                # slurm.pl warns and adds the flags as they are; queue.pl refuses the line.
                if engine != "slurm":
                    raise NnetError(f"{source}: line {number}: 'option {m.group(1)}=*' needs $0 in '{line}'")
                logger.warning(f"{source}: line {number}: '{line}' has no $0; its flags are added as they are")
            config.general[m.group(1)] = m.group(2)
        elif m := _SPECIAL.match(line):
            config.special[m.group(1), m.group(2)] = m.group(3)
        elif m := _DEFAULT.match(line):
            config.defaults[m.group(1)] = m.group(2)
        else:
            raise NnetError(f"{source}: line {number}: cannot parse '{line}'")
    if not config.command:
        raise NnetError(f"{source}: no 'command ...' line for engine {engine}")
    return config


def default_path(engine):
    """The config file nnet-queue ``engine`` reads without --config (None: the built-in one)."""
    kaldi = KALDI_PATHS[engine]
    if os.path.exists(kaldi):
        return kaldi
    if os.path.exists(COMBINED_PATH):
        return COMBINED_PATH
    if engine == "slurm" and _has_section(KALDI_PATHS["sge"], "slurm"):
        logger.warning(f"{KALDI_PATHS['sge']} has a [slurm] section, which nnet-queue slurm no longer reads "
                       f"(Kaldi's queue.pl reads that file): move it to {COMBINED_PATH}")
    return None


def _has_section(path, section):
    try:
        with open(path) as f:
            return any(line.strip() == f"[{section}]" for line in f)
    except (OSError, UnicodeDecodeError):
        return False


def load(engine, path=None):
    """The config for ``engine``: ``path`` (--config, must exist), else default_path(engine), else built-in."""
    path = path or default_path(engine)
    if path is None:
        return parse(BUILTIN, engine, "built-in queue config")
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise NnetError(f"{path}: cannot read queue config: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise NnetError(f"{path}: queue config {not_utf8(e)}") from None
    return parse(text, engine, path)
