"""The task wrapper script an engine runs for every array task (Kaldi's LOGDIR/q/<name>.sh,
<name> being the log's file name without JOB and extension, e.g. train.3).

One script per launcher call. Run by a task, it picks its number from the engine's variable,
substitutes it for JOB in the log name and the command exactly as the local backend does,
writes the log frame (tasklog), runs the command with ``bash -c`` under guard.py as the local
backend does (which adds the task's peak memory to the log),
then touches a marker ``q/<name>.done.<token>.<task>`` so the launcher sees it finished
without asking the engine. The engine only sees exit 0 or 1 (the real code is in the log):
Grid Engine gives 99 and 100 a meaning (requeue, error state); 137 is not turned into 100 as
Kaldi does, since a job held in error state would keep the launcher waiting.

The task gets the submitting shell's PATH and Python environment (so ``nnet-*`` programs are
found), then ``./path.sh`` if there is one (Kaldi sources it unconditionally), then
OMP_NUM_THREADS / MKL_NUM_THREADS = --num-threads: the engine allotted that many CPUs.
With --gpu N the task keeps CUDA_VISIBLE_DEVICES as the engine set it (Slurm does); where it
is unset (Grid Engine only counts GPUs) the wrapper takes N GPUs of ``nvidia-smi`` that no
other nnet-queue task on the node holds, by an flock per GPU held for the task's lifetime.
"""
import dataclasses
import os
import re
import shlex
import sys

from nnet_tools.fileio import atomic_path, make_dirs
from nnet_tools.queue import guard, tasklog
from nnet_tools.queue.spec import THREAD_VARIABLES

# Carried from the submitting shell into the task, when set there.
CARRIED_ENVIRONMENT = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYENV_VERSION")
GPU_LOCK = "/tmp/nnet-queue.gpu$g.lock"


@dataclasses.dataclass
class Files:
    """Where one launcher call keeps its engine files: LOGDIR/q/<stem>.{sh,log} and markers."""
    qdir: str
    base: str        # the log's file name without the array variable, e.g. train.3.log
    token: str       # tells this call's markers from an earlier call's

    @classmethod
    def for_spec(cls, spec, token):
        logdir = os.path.dirname(spec.log)
        if spec.name:   # a directory named after the task: its parent
            while spec.name in os.path.basename(logdir):
                logdir = os.path.dirname(logdir)
            base = re.sub(r"\.?" + re.escape(spec.name), "", os.path.basename(spec.log))
        else:
            base = os.path.basename(spec.log)
        return cls(os.path.abspath(os.path.join(logdir, "q")), base or "job", str(token))

    @property
    def stem(self):
        return re.sub(r"\.[A-Za-z]{1,5}$", "", self.base)

    @property
    def script(self):
        return os.path.join(self.qdir, self.stem + ".sh")

    @property
    def output(self):
        """The engine's own output for the tasks (what the wrapper itself prints, engine notes)."""
        return os.path.join(self.qdir, self.stem + ".log")

    @property
    def marker_prefix(self):
        """A finished task touches this path followed by its number."""
        return os.path.join(self.qdir, f"{self.stem}.done.{self.token}.")

    def marker(self, task):
        return self.marker_prefix + str(task)

    def finished(self):
        """Task numbers whose markers exist: one directory listing, however many tasks."""
        prefix = os.path.basename(self.marker_prefix)
        try:
            names = os.listdir(self.qdir)
        except FileNotFoundError:
            return set()
        return {int(n[len(prefix):]) for n in names if n.startswith(prefix) and n[len(prefix):].isdigit()}

    def remove_markers(self, tasks):
        for task in tasks:
            try:
                os.remove(self.marker(task))
            except FileNotFoundError:
                pass


def script_text(spec, files, task_variable, tasks, environ=None):
    """The wrapper for ``tasks`` of ``spec``; ``task_variable`` names the engine's task number."""
    environ = os.environ if environ is None else environ
    q = shlex.quote
    carried = " ".join(f"{name}={q(environ[name])}" for name in CARRIED_ENVIRONMENT if name in environ)
    lines = [
        "#!/bin/bash",
        f"# Written by nnet-queue: one array task of {spec.log}",
        f"cd {q(os.getcwd())} || exit 1",
    ]
    if carried:
        lines.append(f"export {carried}")
    lines += [
        "[ ! -f ./path.sh ] || . ./path.sh",
        "export " + " ".join(f"{v}={spec.num_threads}" for v in THREAD_VARIABLES),
        f"task=${{{task_variable}}}",
    ]
    if list(tasks) != list(range(min(tasks), max(tasks) + 1)):   # the engine runs the range
        lines.append(f'case " {" ".join(map(str, tasks))} " in *" $task "*) ;; *) exit 0 ;; esac')
    lines += [
        f"command={q(spec.command_line())}",
        f"log={q(spec.log)}",
    ]
    if spec.name:
        lines.append(f'command=${{command//{spec.name}/$task}} log=${{log//{spec.name}/$task}}')
    lines += tasklog.shell_header("log", "command") + ["no_gpu="]
    guarded = f"{q(sys.executable)} -S -E {q(guard.__file__)} 0"   # for the peak-memory line
    if spec.gpu > 0:
        lines += _claim_gpus(spec.gpu)
    lines += [
        f'if [ -z "$no_gpu" ]; then {guarded} bash -c "$command" </dev/null >>"$log" 2>&1; code=$?; '
        'else echo "nnet-queue: $no_gpu" >>"$log"; code=1; fi',
        ]
    lines += [
        *tasklog.shell_footer("log", "code", spec.num_threads),
        f'touch {q(files.marker_prefix)}"$task"',
        "exit $(( code == 0 ? 0 : 1 ))",
    ]
    return "\n".join(lines) + "\n"


def _claim_gpus(count):
    """Bash: unless the engine set CUDA_VISIBLE_DEVICES, take ``count`` GPUs nobody holds; if
    there are not that many, set ``no_gpu`` to why (the task fails: never silently on CPU)."""
    return [
        'if [ -z "${CUDA_VISIBLE_DEVICES+set}" ] && ! command -v nvidia-smi >/dev/null; then',
        f'  no_gpu="--gpu {count}: the engine named no GPU and there is no nvidia-smi on $(hostname) to find one"',
        'elif [ -z "${CUDA_VISIBLE_DEVICES+set}" ]; then',
        "  gpus= n=0",
        "  for g in $(nvidia-smi --query-gpu=index --format=csv,noheader); do",
        f'    lock="{GPU_LOCK}"; [ -e "$lock" ] || (umask 0; : >"$lock")',
        '    exec {fd}<"$lock"',
        "    if flock -n $fd; then gpus=${gpus:+$gpus,}$g n=$((n + 1)); else exec {fd}<&-; fi",
        f"    [ $n -lt {count} ] || break",
        "  done",
        "  export CUDA_VISIBLE_DEVICES=$gpus",
        f'  [ $n -ge {count} ] || no_gpu="--gpu {count}: only $n GPU(s) of $(hostname) free'
        f' (the others are held by nnet-queue tasks: {GPU_LOCK.replace("$g", "*")})"',
        "fi",
    ]


def write(spec, files, task_variable, tasks):
    """Write the wrapper script (atomically: a task may start while a later call rewrites it)."""
    make_dirs(files.qdir)
    with atomic_path(files.script) as tmp:
        with open(tmp, "w", errors="surrogateescape") as f:   # the command's bytes as given
            f.write(script_text(spec, files, task_variable, tasks))
        os.chmod(tmp, 0o755)
