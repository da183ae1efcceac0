"""Averaging an iteration's models in two levels when one averaging job would be the bottleneck.

One job reading N models through one node's link to shared disk costs N model reads in series:
with hundreds of jobs and large models that outlasts the training (docs/cost-model.md). With a
fan-in K < N the models are split into G = ceil(N / K) groups of near-equal size; one array
`$cmd JOB=1:G DIR/log/average.ITER.JOB.log nnet-average-models DIR/average.ITER/JOB/*.mdl
DIR/average.ITER/JOB.mdl` averages the groups on G nodes at once, then one job averages the G
partial averages weighted by their group sizes, which is the flat average (up to float rounding).

Each group's models are moved into DIR/average.ITER/<g>/ so one array command line names any
group's inputs (the task's shell expands the glob); that dir is removed when the average exists.
"""
import math
import os
import re
import shutil

from nnet_tools.errors import NnetError

_SHELL_SPECIAL = re.compile(r"[\s*?\[\]$`'\"\\|&;<>(){}!#~]")


def groups(n, fanin):
    """Contiguous index groups of ``range(n)``: ceil(n / fanin) of them, sizes differing by at most one."""
    count = math.ceil(n / fanin)
    size, extra = divmod(n, count)
    out, start = [], 0
    for g in range(count):
        end = start + size + (g < extra)
        out.append(list(range(start, end)))
        start = end
    return out


def average(launcher, models, out, log, fanin, stage_dir, merger=None):
    """Average ``models`` into ``out``: one nnet-average-models job logged as ``log`` (e.g.
    average.7.log) when fanin is 0 or there are at most fanin models, else the two levels, the
    groups logged as average.7.JOB.log, their partials kept in ``stage_dir`` until done.
    ``merger`` (default: ``launcher``) runs the one job that writes ``out``."""
    merger = merger or launcher
    if not fanin or len(models) <= fanin:
        merger.run(log, ["nnet-average-models", *models, out])
        return
    if _SHELL_SPECIAL.search(os.path.abspath(stage_dir)):
        raise NnetError(f"{stage_dir}: averaging in groups (--trainer.averaging-fanin) needs an experiment dir "
                        f"path without spaces or shell characters")
    names = [os.path.basename(m) for m in models]
    if len(set(names)) < len(names):
        raise NnetError(f"averaging in groups needs models with distinct file names, got {' '.join(models)}")
    parts = groups(len(models), fanin)
    if os.path.exists(stage_dir):   # left by an interrupted run of this iteration
        shutil.rmtree(stage_dir)
    for g, members in enumerate(parts, 1):
        os.makedirs(os.path.join(stage_dir, str(g)))
        for i in members:
            os.replace(models[i], os.path.join(stage_dir, str(g), names[i]))
    stem = log[:-len(".log")] if log.endswith(".log") else log
    launcher.run(f"{stem}.JOB.log", ["nnet-average-models", os.path.join(stage_dir, "JOB", "*.mdl"),
                                     os.path.join(stage_dir, "JOB.mdl")], jobs=len(parts))
    weights = ":".join(repr(len(members) / len(models)) for members in parts)
    merger.run(log, ["nnet-average-models", f"--weights={weights}",
                       *[os.path.join(stage_dir, f"{g}.mdl") for g in range(1, len(parts) + 1)], out])
    shutil.rmtree(stage_dir)
